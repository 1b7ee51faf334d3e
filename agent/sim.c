/* The worker of pipetop-agent --simulate: the same state machine as the
 * training worker (agent/worker.c: assign, start, hold, stop at a step,
 * checkpoint requests, quit) and the same telemetry (agent/worker_telemetry.c),
 * but an iteration is the simulator's timeline of the agent's workers
 * (planner/simulate.h) for the plan the console assigned, on the profile and
 * topology the agent was given, played against the wall clock: the program
 * run that begins at t0 ends at t0 + the simulator's makespan, and op i of it
 * is reported as [t0 + start_i, t0 + end_i] (times the noise and straggler
 * factor of agent.h's pt_agent_sim). Nothing travels between simulated
 * agents, but a straggler (--straggler K) still holds up the others as it
 * would in a run: from its step on every agent plays a second simulation of
 * the same program with device K that much slower, in which the others wait
 * for it (docs/architecture.md, "Simulated agents").
 * A checkpoint is a stage manifest marked "simulated" with no layers
 * (docs/formats.md, "Run checkpoints"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "agent/worker_internal.h"
#include "planner/cost.h"
#include "planner/simulate.h"
#include "protocol/ckpt_index.h"
#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/profile.h"

#define NS_PER_S 1000000000.0
/* A run of the program that begins within this of the previous run's end
 * continues its timeline exactly (no drift from the thread's wake-up). */
#define CONTINUE_SLACK_NS (50 * NS_PER_MS)

/* The simulator's run of one plan, shared by the simulated agents of a
 * process that were assigned the same generation of the same plan (one
 * simulation of a 1,024-worker program, not 1,024): reference-counted, the
 * cache holding one reference to the newest. */
typedef struct sim_entry {
    int refs;
    int64_t gen;
    char *plan_json; /* the plan it is of (pt_plan_to_json) */
    int rc;          /* a simulation that failed is shared as well */
    pt_error err;
    pt_program prog;  /* built with the profile, as the console's prediction */
    pt_sim_event *ev; /* [prog.op_count]: the simulator's timeline */
    pt_mem *peak;     /* [prog.worker_count] */
    double makespan_s;
    /* with a straggler on a device of the plan: the same program with that
     * device slower (NULL: none) */
    pt_sim_event *slow_ev;
    double slow_makespan_s;
} sim_entry;

struct pt_agent_sim_cache {
    pthread_mutex_t mu;
    sim_entry *cur;
};

/* One generation as simulated (worker thread only). */
typedef struct sim_gen {
    int built;
    sim_entry *e;
    const pt_program *p; /* e->prog */
    int nw;              /* workers (model chunks) of this agent */
    int wk[CHUNKS_MAX];  /* their indices in *p */
    int64_t next_ns;     /* when the last run ended (pt_msg_now_ns), 0: none */
    uint64_t rng;
} sim_gen;

static void entry_free(sim_entry *e)
{
    if (!e)
        return;
    pt_program_release(&e->prog);
    free(e->ev);
    free(e->slow_ev);
    free(e->peak);
    free(e->plan_json);
    free(e);
}

static void entry_release(pt_agent_sim_cache *c, sim_entry *e)
{
    if (!e)
        return;
    if (c)
        pthread_mutex_lock(&c->mu);
    int last = --e->refs == 0;
    if (c)
        pthread_mutex_unlock(&c->mu);
    if (last)
        entry_free(e);
}

/* 1 when a worker of prog runs on device d. */
static int uses_device(const pt_program *prog, int d)
{
    for (int w = 0; w < prog->worker_count; w++)
        if (prog->workers[w].device == d)
            return 1;
    return 0;
}

/* e's program again, with the straggler's device 1 + slow_frac times
 * slower: e->slow_ev and e->slow_makespan_s. */
static int entry_slow(sim_entry *e, const pt_agent_sim *sim, pt_sim *sm)
{
    char *json = pt_topology_to_json(sim->topo);
    pt_topology *t = NULL;
    pt_cost *cost = NULL;
    pt_sim_result res;
    memset(&res, 0, sizeof res);
    int rc = json ? pt_topology_parse(json, "simulate", &t, &e->err)
                  : pt_error_set(&e->err, PT_ENOMEM, "simulate: out of memory");
    free(json);
    if (rc == 0) {
        t->devices[sim->straggler_device].speed /= 1.0 + sim->slow_frac;
        rc = pt_cost_new(sim->profile, t, &cost, &e->err);
    }
    if (rc == 0)
        rc = pt_sim_run(sm, &e->prog, cost, &res, &e->err);
    if (rc == 0 && !(e->slow_ev = malloc((size_t)res.event_count * sizeof *e->slow_ev)))
        rc = pt_error_set(&e->err, PT_ENOMEM, "simulate: out of memory");
    if (rc == 0) {
        memcpy(e->slow_ev, res.events, (size_t)res.event_count * sizeof *e->slow_ev);
        e->slow_makespan_s = res.makespan_s;
    }
    pt_cost_free(&cost);
    pt_topology_free(&t);
    return rc;
}

/* Simulates plan on the agents' profile and topology into a new entry
 * (refs 1); its outcome is in e->rc and e->err. NULL on no memory. */
static sim_entry *entry_make(const pt_agent_sim *sim, int64_t gen, const pt_plan *plan, char *json)
{
    sim_entry *e = calloc(1, sizeof *e);
    if (!e) {
        free(json);
        return NULL;
    }
    e->refs = 1;
    e->gen = gen;
    e->plan_json = json;
    pt_cost *cost = NULL;
    pt_sim *sm = NULL;
    pt_sim_result res;
    memset(&res, 0, sizeof res);
    int rc =
        sim->profile->layer_count == plan->layer_count
            ? 0
            : pt_error_set(&e->err, PT_EINVAL, "simulate: the profile has %d layers, the plan %d",
                           sim->profile->layer_count, plan->layer_count);
    if (rc == 0)
        rc = pt_cost_new(sim->profile, sim->topo, &cost, &e->err);
    if (rc == 0 && (rc = pt_sim_new(&sm)) < 0)
        pt_error_set(&e->err, rc, "simulate: out of memory");
    if (rc == 0)
        rc = pt_sim_plan(sm, plan, cost, NULL, &e->prog, &res, &e->err);
    if (rc == 0 && (!(e->ev = malloc((size_t)res.event_count * sizeof *e->ev)) ||
                    !(e->peak = calloc((size_t)res.worker_count, sizeof *e->peak))))
        rc = pt_error_set(&e->err, PT_ENOMEM, "simulate: out of memory");
    if (rc == 0) {
        memcpy(e->ev, res.events, (size_t)res.event_count * sizeof *e->ev);
        for (int w = 0; w < res.worker_count; w++)
            e->peak[w] = res.workers[w].peak;
        e->makespan_s = res.makespan_s;
    }
    if (rc == 0 && sim->straggler_device >= 0 && sim->straggler_device < sim->topo->device_count &&
        uses_device(&e->prog, sim->straggler_device))
        rc = entry_slow(e, sim, sm);
    e->rc = rc;
    pt_sim_free(&sm);
    pt_cost_free(&cost);
    return e;
}

/* The simulation of generation gen's plan: the cache's when it is of the
 * same generation and plan, else a new one (which the cache then keeps).
 * The caller holds a reference (entry_release). NULL on no memory. */
static sim_entry *entry_get(const pt_agent_sim *sim, int64_t gen, const pt_plan *plan)
{
    char *json = pt_plan_to_json(plan);
    if (!json)
        return NULL;
    pt_agent_sim_cache *c = sim->cache;
    if (!c)
        return entry_make(sim, gen, plan, json);
    pthread_mutex_lock(&c->mu); /* the others wait for the one simulation they all need */
    sim_entry *e = c->cur;
    if (e && e->gen == gen && !strcmp(e->plan_json, json)) {
        free(json);
    } else if ((e = entry_make(sim, gen, plan, json))) {
        if (c->cur && --c->cur->refs == 0)
            entry_free(c->cur);
        c->cur = e;
    }
    if (e)
        e->refs++;
    pthread_mutex_unlock(&c->mu);
    return e;
}

int pt_agent_sim_cache_new(pt_agent_sim_cache **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PT_ENOMEM;
    pthread_mutex_init(&(*out)->mu, NULL);
    return 0;
}

void pt_agent_sim_cache_free(pt_agent_sim_cache **c_p)
{
    if (!c_p || !*c_p)
        return;
    pt_agent_sim_cache *c = *c_p;
    *c_p = NULL;
    if (c->cur && --c->cur->refs == 0)
        entry_free(c->cur);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static double uniform_pm1(uint64_t *s)
{
    /* splitmix64: cheap, seeded, the same sequence on every machine */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static void sim_teardown(pt_agent_worker *w, sim_gen *g)
{
    run_state *r = &w->r;
    entry_release(w->sim->cache, g->e);
    memset(&r->prog, 0, sizeof r->prog);
    pt_plan_free(&r->plan);
    pt_model_spec_free(&r->spec);
    *g = (sim_gen){0};
    r->ckpt_dir[0] = '\0';
    r->nch = 0;
}

/* This agent's workers: the assign's rank, or with chunks the workers on
 * the rank's device (as agent/worker_plane.c picks them). */
static int pick_workers(const pt_program *p, const pt_msg_assign *as, sim_gen *g, pt_error *err)
{
    if (as->chunks <= 1) {
        if (as->rank >= p->worker_count || p->workers[as->rank].stage != as->stage ||
            p->workers[as->rank].replica != as->replica)
            return pt_error_set(err, PT_EINVAL,
                                "assign: rank %d is not stage %d replica %d of the simulator's "
                                "program (%d workers)",
                                as->rank, as->stage, as->replica, p->worker_count);
        g->wk[0] = as->rank;
        g->nw = 1;
        return 0;
    }
    for (int k = 0; k < p->worker_count && p->worker_host; k++)
        if (p->worker_host[k] == as->rank && g->nw < CHUNKS_MAX)
            g->wk[g->nw++] = k;
    if (g->nw != as->chunks)
        return pt_error_set(err, PT_EINVAL,
                            "assign.chunks: %d model chunks, but the simulator's program puts %d "
                            "on device rank %d",
                            as->chunks, g->nw, as->rank);
    return 0;
}

static int sim_build(pt_agent_worker *w, sim_gen *g, pt_msg *m, pt_error *err)
{
    run_state *r = &w->r;
    pt_msg_assign *as = &m->u.assign;
    sim_teardown(w, g);
    r->gen = m->gen;
    r->plan = as->plan;
    r->spec = as->model;
    as->plan = NULL;
    as->model = NULL;
    r->stage = as->stage;
    r->replica = as->replica;
    r->ckpt_every = as->checkpoint_every;
    r->last_saved = -1;
    int rc;
    if (as->checkpoint_dir[0] &&
        (rc = pt_path_join_inside(w->ckpt_root, as->checkpoint_dir, r->ckpt_dir, sizeof r->ckpt_dir,
                                  err)) < 0)
        return pt_error_prefix(err, "assign.checkpoint_dir");
    if (!(g->e = entry_get(w->sim, m->gen, r->plan)))
        return pt_error_set(err, PT_ENOMEM, "simulate: out of memory");
    if (g->e->rc < 0) {
        *err = g->e->err;
        return g->e->rc;
    }
    g->p = &g->e->prog;
    if ((rc = pick_workers(g->p, as, g, err)) < 0)
        return rc;
    /* what pt_wk_on_op reads of the program */
    r->prog.mb_per_window = g->p->mb_per_window;
    r->prog.window_count = g->p->window_count;
    r->prog.mb_size = g->p->mb_size;
    r->nch = g->nw;
    for (int c = 0; c < g->nw; c++) {
        r->ch[c].worker = g->wk[c];
        r->ch[c].stage = g->p->workers[g->wk[c]].stage;
    }
    g->rng = w->sim->seed ^ ((uint64_t)w->sim_index * 0x2545F4914F6CDD1Dull);
    g->built = 1;
    return 0;
}

static void sim_assign(pt_agent_worker *w, sim_gen *g, pt_msg *m)
{
    pt_wk_flush_metrics(w);
    pt_wk_set_state(w, "setting-up");
    pt_error err = {0};
    pt_wk_connect_telemetry(w, w->tel_fixed[0] ? w->tel_fixed : m->u.assign.telemetry);
    int rc = sim_build(w, g, m, &err);
    if (rc < 0)
        sim_teardown(w, g);
    pt_wk_setup_done(w, m, rc, err.msg);
}

/* ---- checkpoints ------------------------------------------------------------------ */

/* Writes the manifests of this agent's stages into <ckpt_dir>/step-<step>:
 * "simulated": true, no layers (replicas other than 0 write nothing, as a
 * training agent's). */
static int sim_save_dir(pt_agent_worker *w, int64_t step, char *dir, size_t cap, pt_error *err)
{
    run_state *r = &w->r;
    snprintf(dir, cap, "%.1000s/step-%lld", r->ckpt_dir, (long long)step);
    if (r->last_saved == step || r->replica != 0)
        return 0;
    int rc = pt_mkdir_p(dir, err);
    for (int c = 0; c < r->nch && rc == 0; c++) {
        pt_ckpt_index ix = {0};
        snprintf(ix.model, sizeof ix.model, "%s", r->spec->name);
        ix.step = step;
        ix.simulated = 1;
        ix.has_optimizer = 1;
        ix.optimizer = r->plan->optimizer;
        ix.optim_steps = step;
        char path[PT_MSG_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/" PT_AGENT_MANIFEST_FMT, dir, r->ch[c].stage);
        char *text = pt_ckpt_index_to_json(&ix);
        rc = text ? pt_file_write_atomic(path, text, strlen(text), err)
                  : pt_error_set(err, PT_ENOMEM, "checkpoint manifest: out of memory");
        free(text);
    }
    if (rc == 0)
        r->last_saved = step;
    return rc;
}

/* ---- one run of the program --------------------------------------------------------- */

/* Waits (w->mu not held) until pt_msg_now_ns() reaches until_ns or the
 * worker is told to quit: 0, or PT_ESTATE on quit. */
static int wait_until(pt_agent_worker *w, int64_t until_ns)
{
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (w->quit) {
            rc = PT_ESTATE;
            break;
        }
        int64_t left = until_ns - pt_msg_now_ns();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + left;
        ts.tv_sec += (time_t)(ns / 1000000000LL);
        ts.tv_nsec = (long)(ns % 1000000000LL);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* The op events of one program run that began at t0, as the simulation
 * sev has it, into r->events. */
static void sim_events(pt_agent_worker *w, sim_gen *g, const pt_sim_event *sev, int64_t t0,
                       int64_t done)
{
    run_state *r = &w->r;
    const pt_program *p = g->p;
    for (int c = 0; c < g->nw; c++) {
        const pt_worker *pw = &p->workers[g->wk[c]];
        for (int i = pw->op_begin; i < pw->op_end; i++) {
            const pt_op *op = &p->ops[i];
            double f = w->sim->noise > 0 ? 1.0 + w->sim->noise * uniform_pm1(&g->rng) : 1.0;
            double dur = (sev[i].end - sev[i].start) * (f > 0 ? f : 0);
            pt_exec_event ev;
            memset(&ev, 0, sizeof ev);
            ev.stage = pw->stage;
            ev.replica = pw->replica;
            ev.kind = op->kind;
            ev.mb = op->mb;
            ev.iteration = done + op->mb / p->mb_per_window;
            ev.used_version = op->version;
            ev.bytes = op->bytes;
            /* pt_wk_on_op takes pt_clock_ns() times: ns_base maps them */
            ev.start_ns = t0 + r->ns_base + llround(sev[i].start * NS_PER_S);
            ev.end_ns = ev.start_ns + llround(dur * NS_PER_S);
            pt_wk_on_op(r, &ev);
        }
    }
}

static void sim_metrics(pt_agent_worker *w, sim_gen *g, double run_s, int64_t done)
{
    run_state *r = &w->r;
    int windows = r->prog.window_count > 0 ? r->prog.window_count : 1;
    double iter_ms = run_s * 1e3 / windows;
    double samples = (double)r->prog.mb_size * r->prog.mb_per_window;
    for (int c = 0; c < g->nw; c++)
        for (int k = 0; k < windows; k++) {
            pt_msg_metrics mt;
            memset(&mt, 0, sizeof mt);
            mt.stage = r->ch[c].stage;
            mt.replica = r->replica;
            mt.step = done + k;
            mt.loss = NAN; /* nothing is trained */
            mt.iter_ms = iter_ms;
            mt.samples_per_s = iter_ms > 0 ? samples / (iter_ms / 1e3) : 0;
            const pt_mem *pk = &g->e->peak[g->wk[c]];
            for (int j = 0; j < PT_MSG_MEM_COUNT && j < PT_MEM_KIND_COUNT; j++)
                mt.mem_cur[j] = mt.mem_peak[j] = pk->bytes[j];
            mt.total_cur = mt.total_peak = pk->total;
            pt_wk_fold_metrics(w, c, &mt);
        }
    w->iter_ema_ms = w->iter_ema_ms > 0 ? 0.9 * w->iter_ema_ms + 0.1 * iter_ms : iter_ms;
}

static int sim_run_once(pt_agent_worker *w, sim_gen *g, pt_error *err)
{
    run_state *r = &w->r;
    const pt_agent_sim *sim = w->sim;
    pthread_mutex_lock(&w->mu);
    int64_t done = w->done, end = w->run_end, target = w->run_target, start = w->start_step;
    pthread_mutex_unlock(&w->mu);
    if (sim->fail_agent == w->sim_index && sim->fail_step >= done && sim->fail_step < end)
        return pt_error_set(err, PT_EIO, "simulated failure at step %lld (--fail)",
                            (long long)sim->fail_step);
    /* from the straggler's step on, every agent plays the simulation where
     * the others wait for it */
    int slow = g->e->slow_ev && done >= sim->straggler_step;
    const pt_sim_event *sev = slow ? g->e->slow_ev : g->e->ev;
    int64_t now = pt_msg_now_ns();
    int64_t t0 = g->next_ns > 0 && now - g->next_ns < (int64_t)CONTINUE_SLACK_NS ? g->next_ns : now;
    double run_s = slow ? g->e->slow_makespan_s : g->e->makespan_s;
    int64_t t1 = t0 + llround(run_s * NS_PER_S);
    r->nev = 0;
    int rc = wait_until(w, t1);
    if (rc < 0) {
        pthread_mutex_lock(&w->mu);
        w->in_run = 0;
        pthread_mutex_unlock(&w->mu);
        return pt_error_set(err, rc, "simulated run abandoned: the agent is leaving");
    }
    g->next_ns = t1;
    sim_events(w, g, sev, t0, done);
    if (pt_wk_events_wanted(w, start, done, end, target))
        pt_wk_publish_events(w);
    r->nev = 0;
    sim_metrics(w, g, run_s, done);
    pt_wk_ran(w, done, end);
    return 0;
}

/* ---- the state machine: agent/worker.c's pt_wk_loop with these steps ------------------ */

static void sim_assign_op(pt_agent_worker *w, void *ctx, pt_msg *m)
{
    sim_assign(w, ctx, m);
}

static int sim_run_once_op(pt_agent_worker *w, void *ctx, pt_error *err)
{
    return sim_run_once(w, ctx, err);
}

static void sim_idle(pt_agent_worker *w, void *ctx)
{
    (void)ctx;
    pthread_cond_wait(&w->cv, &w->mu);
}

void *pt_wk_sim_main(void *arg)
{
    pt_agent_worker *w = arg;
    sim_gen g = {0};
    w->notify = zmq_socket(w->ctx, ZMQ_PAIR);
    if (w->notify)
        zmq_connect(w->notify, w->notify_ep);
    w->r.last_saved = -1;
    w->r.ev_mu_ok = pthread_mutex_init(&w->r.ev_mu, NULL) == 0; /* chunks > 1: pt_wk_on_op */
    w->r.ns_base = pt_clock_ns() - pt_msg_now_ns();
    pt_wk_connect_telemetry(w, w->tel_fixed);
    static const pt_wk_ops sim_ops = {sim_assign_op, sim_run_once_op, sim_save_dir, sim_idle};
    pt_wk_loop(w, &sim_ops, &g);
    sim_teardown(w, &g);
    free(w->r.events);
    w->r.events = NULL;
    if (w->r.ev_mu_ok)
        pthread_mutex_destroy(&w->r.ev_mu);
    pt_wk_exit(w);
    return NULL;
}
