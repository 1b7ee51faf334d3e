/* The live data source: a session with local or remote agents (see live.h). */
#include "tui/live.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "tui/agent_spawn.h"
#include "tui/run_ckpt.h"
#include "tui/session.h"

#define PATH_CAP      4096
#define RUNS_DIR      "runs"
#define POLL_SLICE_MS 20
#define NS_PER_MS     1000000LL

typedef enum live_state {
    L_WAIT,   /* waiting for agents to register */
    L_RUN,    /* assigned and started */
    L_DONE,   /* finished the steps it was started for */
    L_FAILED, /* a worker failed; the failure is in the store's note */
} live_state;

typedef struct live {
    pt_source base;
    pt_session *s;
    pt_store *store; /* bound at the first poll */
    pt_plan *plan;
    pt_model_spec *model;
    char data[PT_MSG_PATH_MAX];
    char run_dir[PATH_CAP], ckpt_dir[PATH_CAP + 16];
    pid_t *pids;
    int *exited;
    int nspawn, expect;
    live_state state;
    int64_t steps, seed, ckpt_every, resume;
    int64_t last_refresh_ns;
    pt_plan *pending; /* an applied plan: the next poll stops the run and restarts under it */
} live;

static const char *const live_keys[][2] = {{NULL, NULL}};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the agent table into the store */

static void refresh_agents(live *l)
{
    if (!l->store)
        return;
    for (int i = 0; i < pt_session_agent_count(l->s); i++) {
        const pt_session_agent *a = pt_session_agent_at(l->s, i);
        pt_store_agent row;
        memset(&row, 0, sizeof row);
        snprintf(row.id, sizeof row.id, "%s", a->id);
        snprintf(row.host, sizeof row.host, "%s", a->host);
        snprintf(row.device, sizeof row.device, "%s",
                 a->device_name[0] ? a->device_name : a->backend);
        row.device_index = a->device;
        row.pid = a->pid;
        row.stage = a->stage;
        row.replica = a->replica;
        snprintf(row.state, sizeof row.state, "%s", pt_agent_state_name(a->state));
        row.step = a->step;
        row.last_heard_ns = a->last_heard_ns;
        row.hb_age_ms = pt_session_heartbeat_age_ms(l->s, i);
        pt_rx_counts c;
        pt_session_agent_telemetry(l->s, i, &c);
        row.dropped = c.dropped;
        snprintf(row.last_error, sizeof row.last_error, "%s", a->last_error);
        pt_store_set_agent(l->store, &row);
    }
}

static void on_note(void *user, const pt_session_note *n)
{
    live *l = user;
    if (!l->store)
        return;
    switch (n->kind) {
    case PT_NOTE_EVENTS:
        pt_store_events(l->store, n->msg->u.events.events, n->msg->u.events.count, n->msg->gen);
        break;
    case PT_NOTE_METRICS:
        pt_store_metrics(l->store, &n->msg->u.metrics, n->msg->gen, pt_msg_now_ns());
        break;
    case PT_NOTE_CHECKPOINT:
        pt_store_note(l->store, "checkpoint of step %lld committed", (long long)n->step);
        break;
    case PT_NOTE_DEAD:
    case PT_NOTE_ERROR:
        pt_store_note(l->store, "%s", n->text ? n->text : "an agent failed");
        break;
    default:
        break;
    }
}

/* ---- agents' processes */

static int spawn(live *l, int count, pt_error *err)
{
    char bin[PATH_CAP + 32];
    int rc = pt_agent_binary(bin, sizeof bin, err);
    if (rc < 0)
        return rc;
    l->pids = calloc((size_t)count, sizeof *l->pids);
    l->exited = calloc((size_t)count, sizeof *l->exited);
    if (!l->pids || !l->exited)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int threads = pt_agent_threads(count);
    fflush(stdout);
    fflush(stderr);
    for (int w = 0; w < count; w++) {
        char name[32], log[PATH_CAP + 32];
        snprintf(name, sizeof name, "w%d", w);
        snprintf(log, sizeof log, "%.4000s/agent-%s.log", l->run_dir, name);
        if ((rc = pt_agent_spawn(bin, l->s, name, w, threads, log, &l->pids[w], err)) < 0)
            return rc;
        l->nspawn = w + 1;
    }
    return 0;
}

/* Reaps agents that ended; an end nobody asked for marks the agent dead. */
static void reap(live *l, int expected)
{
    for (int w = 0; w < l->nspawn; w++) {
        if (l->exited[w] || l->pids[w] <= 0)
            continue;
        int st = 0;
        if (waitpid(l->pids[w], &st, WNOHANG) != l->pids[w])
            continue;
        l->exited[w] = 1;
        if (expected)
            continue;
        char name[32], why[160];
        snprintf(name, sizeof name, "w%d", w);
        if (WIFSIGNALED(st))
            snprintf(why, sizeof why,
                     "its process was killed by signal %d (see %.60s/agent-%s.log)", WTERMSIG(st),
                     l->run_dir, name);
        else
            snprintf(why, sizeof why, "its process exited with status %d (see %.60s/agent-%s.log)",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1, l->run_dir, name);
        int i = pt_session_find_agent(l->s, name);
        if (i >= 0)
            pt_session_mark_dead(l->s, i, why);
        else if (l->store)
            pt_store_note(l->store, "agent %s ended before registering: %s", name, why);
    }
}

/* ---- plan to agents */

static int alive(const pt_session_agent *a)
{
    return a->state != PT_AGENT_DEAD && a->state != PT_AGENT_GONE && a->state != PT_AGENT_FAILED &&
           a->data_endpoint[0];
}

/* agents[w] for every worker of plan: the live agent on the worker's device,
 * else the next unused live agent. PT_ENOTFOUND naming the device when the
 * agents run out. */
static int map_agents(live *l, const pt_plan *plan, int *agents, pt_error *err)
{
    int n = pt_session_agent_count(l->s);
    unsigned char *used = calloc((size_t)(n ? n : 1), 1);
    if (!used)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int w = 0, rc = 0;
    for (int s = 0; s < plan->stage_count && rc == 0; s++)
        for (int r = 0; r < plan->stages[s].replica_count && rc == 0; r++, w++) {
            int dev = plan->stages[s].replicas[r], pick = -1;
            for (int i = 0; i < n && pick < 0; i++) {
                const pt_session_agent *a = pt_session_agent_at(l->s, i);
                if (!used[i] && alive(a) && a->device == dev)
                    pick = i;
            }
            for (int i = 0; i < n && pick < 0; i++) {
                const pt_session_agent *a = pt_session_agent_at(l->s, i);
                if (!used[i] && alive(a) && a->device < 0)
                    pick = i;
            }
            if (pick < 0) {
                rc = pt_error_set(err, PT_ENOTFOUND,
                                  "stage %d replica %d needs device %d, and no live agent is "
                                  "free for it (%d agents)",
                                  s, r, dev, n);
                break;
            }
            used[pick] = 1;
            agents[w] = pick;
        }
    free(used);
    return rc;
}

static int assign_and_start(live *l, const pt_plan *plan, int64_t resume, pt_error *err)
{
    int workers = pt_plan_device_count(plan);
    int *agents = calloc((size_t)workers, sizeof *agents);
    if (!agents)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = map_agents(l, plan, agents, err);
    pt_session_plan sp = {plan,    l->model,    agents,        l->data,
                          l->seed, l->ckpt_dir, l->ckpt_every, resume};
    if (rc == 0)
        rc = pt_session_assign(l->s, &sp, err);
    free(agents);
    if (rc == 0)
        rc = pt_session_wait(l->s, PT_LIVE_WAIT_MS, err);
    if (rc == 0 && l->store)
        pt_store_set_plan(l->store, plan, pt_session_generation(l->s));
    return rc;
}

/* Steps left to run from `done`: 0 (start: until stopped) when the run has
 * no end; -1 when it has done all it should. One start covers them all: a
 * stop brings every agent to one step by itself (pt_session_stop). */
static int64_t steps_left(const live *l, int64_t done)
{
    if (l->steps <= 0)
        return 0;
    return l->steps > done ? l->steps - done : -1;
}

/* 1 when every worker of the current plan finished the steps it was started
 * for and nothing is pending: the run sits at one step on every stage. */
static int all_idle(live *l)
{
    if (pt_session_pending(l->s) > 0)
        return 0;
    int workers = 0;
    for (int i = 0; i < pt_session_agent_count(l->s); i++) {
        const pt_session_agent *a = pt_session_agent_at(l->s, i);
        if (a->worker < 0 || a->gen != pt_session_generation(l->s))
            continue;
        if (a->state != PT_AGENT_IDLE && a->state != PT_AGENT_ASSIGNED)
            return 0;
        workers++;
    }
    return workers > 0;
}

/* Stops the run at one step on every stage (the stop saves and commits a
 * checkpoint there, within about an iteration), re-assigns under l->pending
 * resuming at the committed step. */
static int restart(live *l, pt_error *err)
{
    pt_plan *next = l->pending;
    l->pending = NULL;
    int rc = pt_session_stop(l->s, "apply & restart", err);
    if (rc == 0)
        rc = pt_session_wait(l->s, PT_LIVE_WAIT_MS, err);
    int64_t step = pt_session_committed_step(l->s);
    if (rc == 0 && step < 0)
        rc = pt_error_set(err, PT_ESTATE, "the stop committed no checkpoint");
    if (rc == 0)
        rc = assign_and_start(l, next, step, err);
    if (rc < 0) {
        pt_plan_free(&next);
        return rc;
    }
    pt_plan_free(&l->plan);
    l->plan = next;
    l->resume = step;
    pt_store_note(
        l->store, "apply & restart: generation %lld resumes at step %lld from %s/step-%lld",
        (long long)pt_session_generation(l->s), (long long)step, l->ckpt_dir, (long long)step);
    return 0;
}

static int registered(live *l)
{
    int have = 0;
    for (int i = 0; i < pt_session_agent_count(l->s); i++)
        have += alive(pt_session_agent_at(l->s, i));
    return have;
}

/* ---- vtable */

static int live_poll(pt_source *src, pt_store *store, int64_t now_ns, int timeout_ms)
{
    live *l = src->impl;
    int first = !l->store;
    l->store = store;
    if (first) {
        pt_store_set_plan(store, l->plan, 0);
        pt_store_note(store, "waiting for %d agents to register (run folder %s)", l->expect,
                      l->run_dir);
    }
    pt_error err = {0};
    if (pt_session_poll(l->s, timeout_ms, &err) < 0) {
        pt_store_note(store, "session: %s", err.msg);
        return PT_EIO;
    }
    if (l->nspawn)
        reap(l, 0);
    if (now_ns - l->last_refresh_ns >= PT_LIVE_REFRESH_MS * NS_PER_MS) {
        refresh_agents(l);
        l->last_refresh_ns = now_ns;
    }
    if (l->state == L_WAIT && registered(l) >= l->expect) {
        pt_store_note(store, "%d agents registered: assigning the plan and starting", l->expect);
        if (assign_and_start(l, l->plan, 0, &err) < 0 ||
            pt_session_start(l->s, steps_left(l, 0), &err) < 0) {
            l->state = L_FAILED;
            pt_store_note(store, "could not start the run: %s", err.msg);
        } else {
            l->state = L_RUN;
            pt_store_note(store, "training (generation %lld, run folder %s)",
                          (long long)pt_session_generation(l->s), l->run_dir);
        }
        refresh_agents(l);
    }
    if (l->state == L_RUN && pt_session_failure(l->s, &err)) {
        l->state = L_FAILED;
        pt_store_note(store, "the run failed: %s", err.msg);
    }
    if (l->state == L_RUN && (l->pending || all_idle(l))) {
        int64_t n = -1;
        int rc = 0;
        if (l->pending) {
            rc = restart(l, &err);
            n = steps_left(l, l->resume);
        }
        if (rc == 0 && n < 0) {
            l->state = L_DONE;
            pt_store_note(store, "the run finished its %lld steps", (long long)l->steps);
        } else if (rc == 0) {
            rc = pt_session_start(l->s, n, &err);
        }
        if (rc < 0) {
            l->state = L_FAILED;
            pt_store_note(store, "the run stopped: %s", err.msg);
        }
        refresh_agents(l);
    }
    return 0;
}

static int live_apply(pt_source *src, const pt_plan *plan, pt_error *err)
{
    live *l = src->impl;
    if (l->state != L_RUN)
        return pt_error_set(err, PT_ESTATE, "the run is not training (%s)",
                            l->state == L_WAIT     ? "still waiting for agents"
                            : l->state == L_FAILED ? "it failed"
                                                   : "it finished");
    if (pt_session_failure(l->s, err))
        return PT_ESTATE;
    if (plan->layer_count != l->plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "the plan has %d layers, the model %d",
                            plan->layer_count, l->plan->layer_count);
    int workers = pt_plan_device_count(plan);
    int *agents = calloc((size_t)workers, sizeof *agents);
    if (!agents)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = map_agents(l, plan, agents, err); /* refuse before touching the run */
    free(agents);
    if (rc < 0)
        return rc;
    pt_plan *c = pt_plan_clone(plan); /* a later apply replaces a queued one */
    if (!c)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    pt_plan_free(&l->pending);
    l->pending = c;
    pt_error_set(err, 0,
                 "queued: the run stops at one step on every stage, checkpoints there and "
                 "resumes under the new plan");
    return 0;
}

static void live_describe(pt_source *src, char *buf, size_t cap)
{
    live *l = src->impl;
    static const char *const names[] = {"waiting for agents", "live", "done", "failed"};
    snprintf(buf, cap, "%s gen %lld, %d agents", names[l->state],
             (long long)pt_session_generation(l->s), pt_session_agent_count(l->s));
}

static void end_agents(live *l)
{
    int64_t end = mono_ns() + PT_LIVE_EXIT_MS * NS_PER_MS;
    for (;;) {
        pt_session_poll(l->s, POLL_SLICE_MS, NULL);
        reap(l, 1);
        int left = 0;
        for (int w = 0; w < l->nspawn; w++)
            left += l->pids[w] > 0 && !l->exited[w];
        if (!left || mono_ns() > end)
            break;
    }
    for (int w = 0; w < l->nspawn; w++)
        if (l->pids[w] > 0 && !l->exited[w]) {
            kill(l->pids[w], SIGKILL);
            waitpid(l->pids[w], NULL, 0);
            l->exited[w] = 1;
        }
}

static void live_close(pt_source *src)
{
    live *l = src->impl;
    if (l->s) {
        if (l->state == L_RUN && pt_session_stop(l->s, "console quit", NULL) == 0)
            pt_session_wait(l->s, PT_LIVE_EXIT_MS, NULL);
        pt_session_bye(l->s, "console quit");
        end_agents(l);
        pt_session_destroy(&l->s);
    }
    free(l->pids);
    free(l->exited);
    pt_plan_free(&l->plan);
    pt_plan_free(&l->pending);
    pt_model_spec_free(&l->model);
    free(l);
}

static const pt_source_vt live_vt = {"live",        live_poll, live_apply, NULL,
                                     live_describe, live_keys, live_close};

static int make_run_dir(live *l, const char *dir, pt_error *err)
{
    if (dir)
        snprintf(l->run_dir, sizeof l->run_dir, "%s", dir);
    else {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        char name[64];
        strftime(name, sizeof name, "%Y%m%d-%H%M%S", &tm);
        snprintf(l->run_dir, sizeof l->run_dir, "%s/%s-console-%ld", RUNS_DIR, name,
                 (long)getpid());
    }
    snprintf(l->ckpt_dir, sizeof l->ckpt_dir, "%s/ckpt", l->run_dir);
    return pt_mkdir_p(l->ckpt_dir, err);
}

int pt_source_live_new(const pt_live_opts *o, pt_source **out, pt_error *err)
{
    *out = NULL;
    if (!o || !o->plan || !o->model)
        return pt_error_set(err, PT_EINVAL, "live: needs a plan and a model");
    live *l = calloc(1, sizeof *l);
    if (!l)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    l->base.vt = &live_vt;
    l->base.impl = l;
    l->expect = o->expect_agents > 0 ? o->expect_agents : pt_plan_device_count(o->plan);
    l->steps = o->steps;
    l->seed = o->seed > 0 ? o->seed : 1;
    l->ckpt_every = o->checkpoint_every;
    snprintf(l->data, sizeof l->data, "%s", o->data ? o->data : "fashion-mnist");
    int rc = 0;
    char *mj = pt_model_spec_to_json(o->model);
    l->plan = pt_plan_clone(o->plan);
    if (!mj || !l->plan)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_model_spec_parse(mj, "model", &l->model, err);
    free(mj);
    if (rc == 0)
        rc = make_run_dir(l, o->run_dir, err);
    char record[PATH_CAP + 32], plan_path[PATH_CAP + 32];
    snprintf(record, sizeof record, "%.4000s/run.ndjson", l->run_dir);
    snprintf(plan_path, sizeof plan_path, "%.4000s/plan.json", l->run_dir);
    if (rc == 0)
        rc = pt_plan_save(l->plan, plan_path, err);
    pt_session_config cfg = {o->listen, NULL, record, 0, 0};
    if (rc == 0)
        rc = pt_session_create(&cfg, &l->s, err);
    if (rc == 0) {
        pt_session_set_listener(l->s, on_note, l);
        pt_session_set_commit(l->s, pt_run_ckpt_commit, NULL);
    }
    if (rc == 0 && o->spawn)
        rc = spawn(l, l->expect, err);
    if (rc < 0) {
        live_close(&l->base);
        return rc;
    }
    *out = &l->base;
    return 0;
}

const char *pt_source_live_run_dir(const pt_source *src)
{
    return src && src->vt == &live_vt ? ((const live *)src->impl)->run_dir : NULL;
}
