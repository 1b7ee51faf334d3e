/* pipetop-agent --simulate [--count N]: N simulated agents in one process.
 * Each is a whole agent as agent/main.c starts one (its own DEALER with the
 * process's CURVE key, its own control loop on its own thread, its own
 * worker thread and telemetry PUB), except that its worker simulates
 * (agent/sim.c) and it binds no data socket. They share one ZeroMQ context,
 * the profile and topology, and the process's key: the console binds their
 * names to that key (pt_session_allow), so one key holds N names without
 * opening the per-key limit to anyone else. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "agent/control.h"
#include "protocol/fileio.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

/* ZeroMQ sockets one simulated agent holds: DEALER, two ends of the notify
 * PAIR, PUB, and with CURVE the monitor's two; plus the process's few. */
#define SOCKETS_PER_AGENT 8
#define SOCKETS_SLACK     64
/* Agents per ZeroMQ I/O thread: their connections' handshakes, CURVE
 * and timers (libzmq walks a thread's timers linearly at times). */
#define IO_THREAD_AGENTS 256
/* Stack of each control thread: its loop holds a few messages at once. */
#define CTL_STACK_BYTES (512 * 1024)
#define DATA_EP_FMT     "inproc://pt-sim-data-%s"

/* "K:PCT:STEP" (--straggler) or "K:STEP" (--fail). */
static int parse_sim_faults(const pt_agent_args *a, int n, pt_agent_sim *s)
{
    s->straggler = s->fail_agent = s->straggler_device = -1;
    if (a->straggler) {
        int k = -1;
        double pct = 0;
        long long step = -1;
        char tail = 0;
        if (sscanf(a->straggler, "%d:%lf:%lld%c", &k, &pct, &step, &tail) != 3 || k < 0 || k >= n ||
            pct <= 0 || pct > 10000 || step < 0) {
            fprintf(stderr,
                    "pipetop-agent: --straggler \"%s\": K:PCT:STEP with 0 <= K < %d, "
                    "0 < PCT <= 10000, STEP >= 0\n",
                    a->straggler, n);
            return -1;
        }
        s->straggler = k;
        s->slow_frac = pct / 100.0;
        s->straggler_step = step;
        /* agent k's device (open_agent): D + k, or none */
        s->straggler_device =
            a->device_given && a->device < 0 ? -1 : (a->device >= 0 ? a->device : 0) + k;
    }
    if (a->fail) {
        int k = -1;
        long long step = -1;
        char tail = 0;
        if (sscanf(a->fail, "%d:%lld%c", &k, &step, &tail) != 2 || k < 0 || k >= n || step < 0) {
            fprintf(stderr, "pipetop-agent: --fail \"%s\": K:STEP with 0 <= K < %d, STEP >= 0\n",
                    a->fail, n);
            return -1;
        }
        s->fail_agent = k;
        s->fail_step = step;
    }
    return 0;
}

static void *ctl_thread(void *arg)
{
    pt_agent_ctl *ag = arg;
    pt_agent_ctl_register(ag);
    pt_agent_ctl_loop(ag);
    /* Its worker stops as soon as the agent leaves, not when the process's
     * one-by-one close reaches it (pt_agent_ctl_close aborts it there too):
     * 1,024 simulated workers running on after a signal kept 2 cores busy
     * for minutes. */
    pt_agent_worker_abort(ag->worker);
    return NULL;
}

/* Agent k of the process: tmpl's copy under its own name and device. */
static int open_agent(pt_agent_ctl *ag, const pt_agent_ctl *tmpl, int k, int n, void *ctx,
                      const pt_agent_sim *sim, const volatile sig_atomic_t *sig)
{
    *ag = *tmpl;
    ag->worker = NULL;
    ag->monitor = NULL;
    ag->signal = sig;
    if (n > 1 && (size_t)snprintf(ag->id, sizeof ag->id, "%s-%d", tmpl->id, k) >= sizeof ag->id) {
        fprintf(stderr, "pipetop-agent: --name %s: too long for %d agents' names\n", tmpl->id, n);
        return -1;
    }
    /* --device -1: none for every agent; else D + k */
    if (tmpl->a.device_given && tmpl->a.device < 0)
        ag->a.device = -1;
    else
        ag->a.device = (tmpl->a.device >= 0 ? tmpl->a.device : 0) + k;
    snprintf(ag->data_ep, sizeof ag->data_ep, DATA_EP_FMT, ag->id);
    pt_clock_filter_init(&ag->clk);
    return pt_agent_ctl_open(ag, ctx, sim, k);
}

/* Runs n agents, each on its own control thread, until they all left. */
static int run_agents(pt_agent_ctl *ags, int n)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, CTL_STACK_BYTES);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int started = 0;
    for (; th && started < n; started++)
        if (pthread_create(&th[started], &attr, ctl_thread, &ags[started]) != 0) {
            fprintf(stderr, "pipetop-agent: cannot start the control thread of agent %d\n",
                    started);
            break;
        }
    pthread_attr_destroy(&attr);
    for (int k = started; k < n; k++) { /* never started: leaves at once */
        ags[k].leaving = 2;
        snprintf(ags[k].why, sizeof ags[k].why, "no control thread");
    }
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    free(th);
    return started == n ? 0 : -1;
}

int pt_agent_sim_main(const pt_agent_ctl *tmpl, const volatile sig_atomic_t *sig)
{
    const pt_agent_args *a = &tmpl->a;
    int n = a->count > 0 ? a->count : 1, rc = 1;
    pt_agent_sim sim = {0};
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    pt_error err = {0};
    if (pt_profile_load(a->profile, &prof, &err) < 0 ||
        pt_topology_load(a->topology, &topo, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --simulate: %s\n", err.msg);
        goto out_inputs;
    }
    if (pt_agent_sim_cache_new(&sim.cache) < 0)
        goto out_inputs;
    sim.profile = prof;
    sim.topo = topo;
    sim.noise = a->noise;
    sim.seed = (uint64_t)a->sim_seed;
    if (parse_sim_faults(a, n, &sim) < 0) {
        rc = 2;
        goto out_inputs;
    }
    long fds = pt_fd_limit_raise();
    void *ctx = zmq_ctx_new();
    pt_agent_ctl *ags = calloc((size_t)n, sizeof *ags);
    if (!ctx || !ags ||
        zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, n * SOCKETS_PER_AGENT + SOCKETS_SLACK) != 0 ||
        zmq_ctx_set(ctx, ZMQ_IO_THREADS, (n + IO_THREAD_AGENTS - 1) / IO_THREAD_AGENTS) != 0) {
        fprintf(stderr, "pipetop-agent: --simulate: cannot make a context for %d agents\n", n);
        goto out_ctx;
    }
    int opened = 0;
    for (; opened < n; opened++)
        if (open_agent(&ags[opened], tmpl, opened, n, ctx, &sim, sig) < 0) {
            fprintf(stderr,
                    "pipetop-agent: simulated agent %d of %d cannot start (descriptors: %ld)\n",
                    opened, n, fds);
            break;
        }
    fprintf(stderr, "pipetop-agent: %d simulated agent%s (%s-...) on %s\n", opened,
            opened == 1 ? "" : "s", tmpl->id, a->console);
    int ok = opened == n && run_agents(ags, n) == 0;
    int joined = 1, lost = 0, refused = 0;
    for (int k = 0; k < opened; k++) {
        pt_agent_ctl_close(&ags[k]);
        joined &= ags[k].joined;
        lost |= ags[k].leaving == 2;
        refused |= ags[k].leaving == 4;
    }
    rc = !ok ? 1 : refused ? 4 : lost ? 3 : 0;
    if (!joined)
        return rc; /* a worker that did not end may still use them all: leave them */
out_ctx:
    free(ags);
    if (ctx)
        zmq_ctx_term(ctx);
out_inputs:
    pt_agent_sim_cache_free(&sim.cache);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    return rc;
}
