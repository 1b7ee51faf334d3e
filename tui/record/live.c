/* The live data source: an adapter from the run controller (tui/control/run.h) to
 * the console's store (see live.h). */
#include "tui/record/live.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/calibrate.h"
#include "protocol/fileio.h"
#include "protocol/record.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define PATH_CAP      4096
#define LIVE_DIR_TAG  "console" /* default run folders: runs/<stamp>-console-<pid> */
#define LIVE_CKPT_DIR "ckpt"
#define NS_PER_MS     1000000LL

typedef enum live_state {
    L_WAIT,   /* waiting for agents to register */
    L_RUN,    /* assigned and started */
    L_DONE,   /* finished the steps it was started for */
    L_FAILED, /* a worker failed; the failure is in the store's note */
} live_state;

typedef struct live {
    pt_source base;
    pt_run *run;
    pt_session *s;   /* the controller's */
    pt_store *store; /* bound at the first poll */
    pt_plan *plan;
    pt_model_spec *model;
    char data[PT_MSG_PATH_MAX];
    char run_dir[PATH_CAP], ckpt_dir[PATH_CAP + 16];
    int expect;
    live_state state;
    int64_t steps, seed, ckpt_every, resume;
    int64_t last_refresh_ns;
    pt_plan *pending; /* an applied plan: the next poll stops the run and restarts under it */
    int observed;     /* the agents relay a PyTorch run (pt_live_opts.observe_dir) */
    char observe_dir[PATH_CAP];
    pt_profile *cal_base; /* calibration's base (NULL: none) */
    pt_topology *topo;
    int64_t cal_for_gen; /* the generation cal_next counts for */
    int64_t cal_next;    /* its steps in the store before the next fit */
    int64_t cal_done;    /* the newest generation calibrated (0: none) */
    int64_t cal_steps;   /* pt_live_opts.cal_steps, resolved (< 0: never) */
    /* apply & restart runs beside the console's loop: while `restarting`,
     * the restart thread alone drives the controller (and its session), and
     * what the session tells arrives in `held`, which the loop moves into the
     * store; the loop never waits for the stop, the commit or the assign */
    int restarting;
    pthread_t restarter;
    atomic_int restart_done;
    pthread_mutex_t held_lock;
    struct held *held;
    int held_n, held_cap;
    pt_plan *restart_plan; /* the plan being applied */
    int restart_rc;
    int64_t restart_step;
    pt_error restart_err;
    atomic_int closing; /* the console quits: a restart in flight gives up */
    int64_t shown_gen;  /* the session's generation and agents, as the loop last read them */
    int shown_agents;
} live;

/* What the session told while a restart held the controller. */
typedef struct held {
    pt_session_note_kind kind;
    int64_t gen;
    pt_msg_metrics metrics;
    pt_msg_event *events; /* owned */
    int count;
    char text[PT_STORE_NOTE_MAX];
    int64_t t_ns;
} held;

static const char *const live_keys[][2] = {{NULL, NULL}};

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
        row.mem_total = a->memory_bytes;
        row.mem_free = -1;
        if (a->has_metrics && a->metrics.device_total > 0) {
            row.mem_total = a->metrics.device_total;
            row.mem_free = a->metrics.device_free;
        }
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

/* Keeps a note for the loop (the restart thread's side). */
static void hold(live *l, const pt_session_note *n)
{
    held h;
    memset(&h, 0, sizeof h);
    h.kind = n->kind;
    h.t_ns = pt_msg_now_ns();
    if (n->msg)
        h.gen = n->msg->gen;
    if (n->kind == PT_NOTE_METRICS) {
        h.metrics = n->msg->u.metrics;
    } else if (n->kind == PT_NOTE_EVENTS) {
        h.count = n->msg->u.events.count;
        if (!(h.events = malloc(sizeof *h.events * (size_t)h.count)))
            return;
        memcpy(h.events, n->msg->u.events.events, sizeof *h.events * (size_t)h.count);
    } else if (n->kind == PT_NOTE_CHECKPOINT) {
        snprintf(h.text, sizeof h.text, "checkpoint of step %lld committed", (long long)n->step);
    } else if (n->kind == PT_NOTE_DEAD || n->kind == PT_NOTE_ERROR) {
        snprintf(h.text, sizeof h.text, "%s", n->text ? n->text : "an agent failed");
    } else {
        return;
    }
    pthread_mutex_lock(&l->held_lock);
    if (l->held_n == l->held_cap) {
        int cap = l->held_cap ? 2 * l->held_cap : 64;
        held *q = realloc(l->held, sizeof *q * (size_t)cap);
        if (!q) {
            pthread_mutex_unlock(&l->held_lock);
            free(h.events);
            return;
        }
        l->held = q;
        l->held_cap = cap;
    }
    l->held[l->held_n++] = h;
    pthread_mutex_unlock(&l->held_lock);
}

/* Moves what the restart thread held into the store (the loop's side). */
static void drain(live *l)
{
    pthread_mutex_lock(&l->held_lock);
    for (int i = 0; i < l->held_n; i++) {
        held *h = &l->held[i];
        if (h->kind == PT_NOTE_EVENTS)
            pt_store_events(l->store, h->events, h->count, h->gen);
        else if (h->kind == PT_NOTE_METRICS)
            pt_store_metrics(l->store, &h->metrics, h->gen, h->t_ns);
        else
            pt_store_note(l->store, "%s", h->text);
        free(h->events);
    }
    l->held_n = 0;
    pthread_mutex_unlock(&l->held_lock);
}

static void on_note(void *user, const pt_session_note *n)
{
    live *l = user;
    if (!l->store)
        return;
    if (l->restarting) { /* the restart thread's call: the loop owns the store */
        hold(l, n);
        return;
    }
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

/* ---- plan to agents */

static int assign(live *l, const pt_plan *plan, int64_t resume, pt_error *err)
{
    pt_run_job job = {l->model, l->data, l->seed, l->observed ? NULL : l->ckpt_dir, l->ckpt_every};
    int rc = pt_run_assign(l->run, plan, &job, resume, PT_LIVE_WAIT_MS, err);
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

/* The restart thread: stops the run at one step on every stage (the stop
 * saves and commits a checkpoint there, within about an iteration) and
 * re-assigns under the plan resuming at the committed step, polling the
 * session (heartbeats included) while it waits. */
static void *restart_main(void *arg)
{
    live *l = arg;
    l->restart_rc =
        pt_run_restart(l->run, l->restart_plan, PT_LIVE_WAIT_MS, &l->restart_step, &l->restart_err);
    atomic_store(&l->restart_done, 1);
    return NULL;
}

/* The cancel hook of the controller's waits: the console is quitting. */
static int cancelled(void *user, pt_error *err)
{
    live *l = user;
    if (!atomic_load(&l->closing))
        return 0;
    pt_error_set(err, PT_ESTATE, "the console quit");
    return 1;
}

/* Starts applying l->pending beside the loop. */
static int restart_begin(live *l, pt_error *err)
{
    l->restart_plan = l->pending;
    l->pending = NULL;
    l->restart_rc = 0;
    l->restart_step = -1;
    memset(&l->restart_err, 0, sizeof l->restart_err);
    atomic_store(&l->restart_done, 0);
    l->restarting = 1;
    if (pthread_create(&l->restarter, NULL, restart_main, l) != 0) {
        l->restarting = 0;
        pt_plan_free(&l->restart_plan);
        return pt_error_set(err, PT_EIO, "apply & restart: cannot start its thread");
    }
    pt_store_note(l->store, "apply & restart: stopping at one step, checkpointing, re-assigning "
                            "(the console stays live)");
    return 0;
}

/* The restart thread ended: the new generation starts (the loop's side).
 * 0, or the restart's error. */
static int restart_end(live *l, pt_error *err)
{
    pthread_join(l->restarter, NULL);
    l->restarting = 0;
    drain(l);
    pt_plan *next = l->restart_plan;
    l->restart_plan = NULL;
    if (l->restart_rc < 0) {
        pt_plan_free(&next);
        *err = l->restart_err;
        return l->restart_rc;
    }
    int64_t step = l->restart_step;
    pt_store_set_plan(l->store, next, pt_session_generation(l->s));
    pt_plan_free(&l->plan);
    l->plan = next;
    l->resume = step;
    pt_store_note(
        l->store, "apply & restart: generation %lld resumes at step %lld from %s/step-%lld",
        (long long)pt_session_generation(l->s), (long long)step, l->ckpt_dir, (long long)step);
    return 0;
}

/* ---- calibration */

/* Steps of generation gen in the store (they are stored in order). */
static int64_t gen_steps(const pt_store *st, int64_t gen)
{
    int64_t n = 0;
    for (int64_t i = pt_store_step_count(st) - 1; i >= 0; i--) {
        const pt_store_step *x = pt_store_step_at(st, i);
        if (x->gen != gen)
            break;
        n += x->reports > 0;
    }
    return n;
}

static void save_calibration(const live *l, const pt_profile *p, const pt_topology *t, int64_t gen,
                             char *path, size_t cap)
{
    char tp[PATH_CAP + 64];
    snprintf(path, cap, "%.4000s/calibrated-gen-%lld.json", l->run_dir, (long long)gen);
    snprintf(tp, sizeof tp, "%.4000s/calibrated-gen-%lld-topology.json", l->run_dir,
             (long long)gen);
    if (pt_profile_save(p, path, NULL) < 0 || pt_topology_save(t, tp, NULL) < 0)
        snprintf(path, cap, "%s", "(not saved)");
}

/* Fits the running generation once it has enough steps (live.h). */
static void maybe_calibrate(live *l)
{
    int64_t gen = pt_session_generation(l->s);
    if (!l->cal_base || l->cal_steps < 0 || gen <= 0 || l->cal_done == gen)
        return;
    if (l->cal_for_gen != gen) {
        l->cal_for_gen = gen;
        l->cal_next = l->cal_steps;
    }
    int64_t n = gen_steps(l->store, gen);
    if (n < l->cal_next)
        return;
    l->cal_next = n + PT_LIVE_CAL_RETRY;
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%.4000s/%s", l->run_dir, PT_RECORD_FILE);
    pt_record *rec = NULL;
    pt_profile *cal = NULL;
    pt_topology *ctopo = NULL;
    pt_cal_fit fit = {0};
    pt_error err = {0};
    pt_cal_opts o = {gen, -1, l->run_dir, "the console's profile", ""};
    int rc = pt_record_load(path, &rec, &err);
    if (rc == 0)
        rc = pt_calibrate(rec, l->cal_base, l->topo, &o, &cal, &fit, &err);
    if (rc == 0)
        rc = pt_cal_topology(&fit, l->topo, &ctopo, &err);
    pt_record_free(&rec);
    if (rc < 0) { /* too few op events yet: tried again PT_LIVE_CAL_RETRY steps later */
        pt_profile_free(&cal);
        pt_cal_fit_clear(&fit);
        return;
    }
    save_calibration(l, cal, ctopo, gen, path, sizeof path);
    pt_store_set_calibration(l->store, cal, ctopo, gen);
    pt_cal_fit_clear(&fit);
    l->cal_done = gen;
}

/* ---- vtable */

/* The run failed: said on the status line ("WHAT: WHY") and in the run
 * record's "failed" entry (what `pipetop status` reads), as `pipetop run`
 * writes it: WHY, after WHAT when WHAT adds to it (record_what). The agents
 * are told to leave (bye, not waited for): a failed run does not go on
 * (apply & restart refuses it), and simulated agents, which wait on no data
 * plane, would play on past the failure. */
static void live_failed(live *l, pt_store *store, const char *what, int record_what,
                        const char *why)
{
    char reason[PT_ERROR_MAX + 64];
    snprintf(reason, sizeof reason, "%s: %s", what, why);
    l->state = L_FAILED;
    pt_store_note(store, "%s", reason);
    pt_session_record_failed(l->s, record_what ? reason : why);
    pt_session_bye(l->s, "the run failed");
}

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
    if (l->restarting) {
        drain(l);
        if (!atomic_load(&l->restart_done))
            return 0; /* the restart thread drives the controller meanwhile */
        int rc = restart_end(l, &err);
        int64_t n = steps_left(l, l->resume);
        if (rc == 0 && n >= 0)
            rc = pt_run_start(l->run, n, &err);
        else if (rc == 0) {
            l->state = L_DONE;
            pt_store_note(store, "the run finished its %lld steps", (long long)l->steps);
        }
        if (rc < 0)
            live_failed(l, store, "the run stopped", 1, err.msg);
        refresh_agents(l);
    }
    if (pt_run_poll(l->run, timeout_ms, &err) < 0) {
        pt_store_note(store, "session: %s", err.msg);
        return PT_EIO;
    }
    if (now_ns - l->last_refresh_ns >= PT_LIVE_REFRESH_MS * NS_PER_MS) {
        refresh_agents(l);
        l->last_refresh_ns = now_ns;
    }
    pt_run_state rs = pt_run_get_state(l->run);
    if (l->state == L_WAIT && rs == PT_RUN_READY) {
        pt_store_note(store, "%d agents registered: assigning the plan and starting", l->expect);
        if (assign(l, l->plan, 0, &err) < 0 || pt_run_start(l->run, steps_left(l, 0), &err) < 0) {
            live_failed(l, store, "could not start the run", 1, err.msg);
        } else {
            l->state = L_RUN;
            if (l->observed)
                pt_store_note(store,
                              "observing: run the training with PIPETOP_OBSERVE=%s (run "
                              "folder %s)",
                              l->observe_dir, l->run_dir);
            else
                pt_store_note(store, "training (generation %lld, run folder %s)",
                              (long long)pt_session_generation(l->s), l->run_dir);
        }
        refresh_agents(l);
    }
    if ((l->state == L_WAIT || l->state == L_RUN) && rs == PT_RUN_FAILED) {
        pt_run_failure(l->run, &err);
        live_failed(l, store, "the run failed", 0, err.msg);
    }
    l->shown_gen = pt_session_generation(l->s);
    l->shown_agents = pt_session_agent_count(l->s);
    if (l->state == L_RUN && l->pending) {
        if (restart_begin(l, &err) < 0)
            pt_store_note(store, "%s", err.msg);
        return 0;
    }
    if (l->state == L_RUN)
        maybe_calibrate(l);
    if (l->state == L_RUN && rs == PT_RUN_FINISHED) {
        l->state = L_DONE;
        pt_store_note(store, "the run finished its %lld steps", (long long)l->steps);
        refresh_agents(l);
    }
    return 0;
}

static int live_apply(pt_source *src, const pt_plan *plan, pt_error *err)
{
    live *l = src->impl;
    if (l->observed)
        return pt_error_set(err, PT_ESTATE, "%s", PT_LIVE_OBSERVED_WHY);
    if (l->restarting)
        return pt_error_set(err, PT_ESTATE,
                            "a restart is in progress (the run stops, checkpoints and resumes "
                            "first; apply again once it trains)");
    if (l->state != L_RUN)
        return pt_error_set(err, PT_ESTATE, "the run is not training (%s)",
                            l->state == L_WAIT     ? "still waiting for agents"
                            : l->state == L_FAILED ? "it failed"
                                                   : "it finished");
    if (pt_run_failure(l->run, err))
        return PT_ESTATE;
    if (plan->layer_count != l->plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "the plan has %d layers, the model %d",
                            plan->layer_count, l->plan->layer_count);
    int workers = pt_plan_agent_count(plan);
    int *agents = calloc((size_t)workers, sizeof *agents);
    if (!agents)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = pt_run_map(l->run, plan, agents, err); /* refuse before touching the run */
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
    /* the figures the loop last read: the session may be the restart thread's now */
    snprintf(buf, cap, "%s gen %lld, %d agents", l->restarting ? "restarting" : names[l->state],
             (long long)l->shown_gen, l->shown_agents);
}

static void live_close(pt_source *src)
{
    live *l = src->impl;
    if (l->restarting) { /* the restart gives up at its next wait */
        atomic_store(&l->closing, 1);
        pthread_join(l->restarter, NULL);
        l->restarting = 0;
        drain(l);
        pt_plan_free(&l->restart_plan);
    }
    for (int i = 0; i < l->held_n; i++)
        free(l->held[i].events);
    free(l->held);
    pthread_mutex_destroy(&l->held_lock);
    if (l->run) {
        if (l->state == L_RUN)
            pt_run_stop(l->run, "console quit", PT_LIVE_EXIT_MS, NULL);
        pt_run_end(l->run, "console quit");
        pt_run_destroy(&l->run);
    }
    pt_plan_free(&l->plan);
    pt_plan_free(&l->pending);
    pt_model_spec_free(&l->model);
    pt_profile_free(&l->cal_base);
    pt_topology_free(&l->topo);
    free(l);
}

static const pt_source_vt live_vt = {"live",        live_poll, live_apply, NULL,
                                     live_describe, live_keys, live_close};

/* Simulated agents read the profile and topology from the run folder (the
 * files replay predicts with, too). */
static int set_simulate(live *l, const pt_live_opts *o, pt_error *err)
{
    if (!l->cal_base || !l->topo)
        return pt_error_set(err, PT_EINVAL, "live: simulated agents need a profile and a topology");
    char prof[PATH_CAP + 32], topo[PATH_CAP + 32];
    snprintf(prof, sizeof prof, "%.4000s/profile.json", l->run_dir);
    snprintf(topo, sizeof topo, "%.4000s/topology.json", l->run_dir);
    int rc = pt_profile_save(l->cal_base, prof, err);
    if (rc == 0)
        rc = pt_topology_save(l->topo, topo, err);
    pt_run_sim sim = {prof, topo, 0, o->sim_straggler, o->sim_fail, 0};
    return rc < 0 ? rc : pt_run_set_simulate(l->run, &sim, err);
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
    pthread_mutex_init(&l->held_lock, NULL);
    l->expect = o->expect_agents > 0 ? o->expect_agents : pt_plan_agent_count(o->plan);
    l->steps = o->steps;
    l->seed = o->seed > 0 ? o->seed : 1;
    l->ckpt_every = o->checkpoint_every;
    l->cal_steps = o->cal_steps ? o->cal_steps : PT_LIVE_CAL_STEPS;
    snprintf(l->data, sizeof l->data, "%s", o->data ? o->data : "fashion-mnist");
    int rc = 0;
    char *mj = pt_model_spec_to_json(o->model);
    l->plan = pt_plan_clone(o->plan);
    if (!mj || !l->plan)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_model_spec_parse(mj, "model", &l->model, err);
    free(mj);
    if (rc == 0 && o->profile && o->topology) {
        char *pj = pt_profile_to_json(o->profile), *tj = pt_topology_to_json(o->topology);
        rc = pj && tj ? pt_profile_parse(pj, "profile", &l->cal_base, err)
                      : pt_error_set(err, PT_ENOMEM, "out of memory");
        if (rc == 0)
            rc = pt_topology_parse(tj, "topology", &l->topo, err);
        free(pj);
        free(tj);
    }
    if (rc == 0)
        rc = pt_run_dir_make(o->run_dir, LIVE_DIR_TAG, l->run_dir, sizeof l->run_dir, err);
    snprintf(l->ckpt_dir, sizeof l->ckpt_dir, "%.4000s/%s", l->run_dir, LIVE_CKPT_DIR);
    char plan_path[PATH_CAP + 32];
    snprintf(plan_path, sizeof plan_path, "%.4000s/plan.json", l->run_dir);
    l->observed = o->observe_dir != NULL;
    snprintf(l->observe_dir, sizeof l->observe_dir, "%s", o->observe_dir ? o->observe_dir : "");
    if (rc == 0 && !l->observed)
        rc = pt_mkdir_p(l->ckpt_dir, err);
    if (rc == 0)
        rc = pt_plan_save(l->plan, plan_path, err);
    pt_run_config cfg = {l->run_dir, o->listen, NULL, l->expect, on_note,  l,
                         cancelled,  l,         NULL, NULL,      o->spawn, o->spawn};
    if (rc == 0 && (rc = pt_run_create(&cfg, &l->run, err)) == 0)
        l->s = pt_run_session(l->run);
    if (rc == 0)
        rc = pt_run_set_agents(l->run, 0, l->observed ? NULL : l->ckpt_dir, err);
    if (rc == 0 && l->observed)
        pt_run_set_observe(l->run, o->observe_dir);
    if (rc == 0 && o->simulate)
        rc = set_simulate(l, o, err);
    if (rc == 0 && o->spawn)
        rc = pt_run_spawn_on(l->run, NULL, l->topo, err);
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
