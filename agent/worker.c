/* The agent's worker thread: its state machine (assign, start, hold, stop,
 * checkpoint requests, quit) and the control thread's calls into it. It
 * builds one stage replica from an assign — or, for an interleaved plan,
 * every model chunk of its device (the assign's "chunks": stages d, d+S, ...
 * of replica r) — and runs its schedule program through the stage executor
 * (runtime/executor.h). See agent/agent.h and agent/worker_internal.h.
 *
 * The executor is reached through runtime/stage.h (worker_plane.c builds and
 * wires it) and two calls here: pt_exec_run and pt_exec_reset. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "agent/worker_internal.h"
#include "runtime/backend_cuda.h"

/* How often an idle, wired worker answers its peers' requests to send again. */
#define IDLE_PROGRESS_MS 500

void pt_wk_set_state(pt_agent_worker *w, const char *st)
{
    pthread_mutex_lock(&w->mu);
    snprintf(w->state, sizeof w->state, "%s", st);
    pthread_mutex_unlock(&w->mu);
}

void pt_wk_notify(pt_agent_worker *w, const pt_wnote *n)
{
    zmq_send(w->notify, n, sizeof *n, 0);
}

void pt_wk_notify_simple(pt_agent_worker *w, int kind, int64_t req, int64_t step, int rc,
                         const char *text)
{
    pt_wnote n = {0};
    n.kind = kind;
    n.rc = rc;
    n.stage = w->r.spec ? w->r.stage : -1;
    n.replica = w->r.spec ? w->r.replica : -1;
    n.gen = w->r.gen;
    n.req = req;
    n.step = step;
    if (text)
        snprintf(n.text, sizeof n.text, "%s", text);
    pt_wk_notify(w, &n);
}

void pt_wk_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * NS_PER_MS};
    nanosleep(&ts, NULL);
}

/* ---- running ---------------------------------------------------------------------- */

static void *chunk_main(void *arg)
{
    chunk *ch = arg;
    ch->err.code = 0;
    pt_backend_cuda_bind(ch->r->be); /* a failure shows at the first allocation */
    ch->rc = pt_exec_run(pt_stage_exec(ch->st), ch->base, &ch->res, &ch->err);
    if (ch->rc < 0)
        pt_exec_host_abort(ch->r->host); /* the device's other chunks stop at their turn */
    return NULL;
}

/* One run of every chunk, each on its own thread, taking turns through the
 * device's host order. The error is the first cause: a chunk stopped by
 * another's abort (PT_ESTATE) is reported only when nothing else failed.
 * res: the first chunk's windows, the longest wall time, busy time summed. */
static int run_chunks(run_state *r, int64_t base, pt_exec_result *res, pt_error *err)
{
    pt_exec_host_rewind(r->host);
    int started = 0, rc = 0;
    for (int c = 0; c < r->nch; c++) {
        r->ch[c].base = base;
        r->ch[c].rc = 0;
        if (pthread_create(&r->ch[c].th, NULL, chunk_main, &r->ch[c]) != 0) {
            pt_exec_host_abort(r->host);
            rc = pt_error_set(err, PT_ENOMEM, "agent: cannot start the thread of chunk %d", c);
            break;
        }
        started++;
    }
    for (int c = 0; c < started; c++)
        pthread_join(r->ch[c].th, NULL);
    int cause = -1;
    for (int c = 0; c < started; c++)
        if (r->ch[c].rc < 0 &&
            (cause < 0 || (r->ch[cause].rc == PT_ESTATE && r->ch[c].rc != PT_ESTATE)))
            cause = c;
    if (rc == 0 && cause >= 0) {
        rc = r->ch[cause].rc;
        if (err)
            *err = r->ch[cause].err;
    }
    if (rc < 0) {
        for (int c = 0; c < r->nch; c++)
            pt_exec_reset(pt_stage_exec(r->ch[c].st));
        return rc;
    }
    *res = r->ch[0].res;
    for (int c = 1; c < r->nch; c++) {
        if (r->ch[c].res.wall_ns > res->wall_ns)
            res->wall_ns = r->ch[c].res.wall_ns;
        res->busy_ns += r->ch[c].res.busy_ns;
        res->loss_sum += r->ch[c].res.loss_sum;
        res->loss_count += r->ch[c].res.loss_count;
    }
    return 0;
}

static int run_once(pt_agent_worker *w, pt_error *err)
{
    run_state *r = &w->r;
    pthread_mutex_lock(&w->mu);
    int64_t done = w->done, end = w->run_end, target = w->run_target, start = w->start_step;
    pthread_mutex_unlock(&w->mu);
    pt_exec_result res;
    r->nev = 0;
    /* in_run and run_end were set under the lock that decided to run */
    int rc = r->wired ? 0 : pt_wk_wire_run(w, err);
    if (rc == 0)
        rc = r->nch > 1 ? run_chunks(r, done, &res, err)
                        : pt_exec_run(pt_stage_exec(r->ch[0].st), done, &res, err);
    if (rc < 0 || pt_wk_events_wanted(w, start, done, end, target))
        pt_wk_publish_events(w);
    r->nev = 0;
    uint64_t dropped = pt_wk_data_dropped(r);
    pt_wk_log_dropped(w, dropped);
    if (rc < 0) {
        pthread_mutex_lock(&w->mu);
        w->dropped = dropped;
        w->in_run = 0;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    pt_wk_publish_metrics(w, &res, done);
    pthread_mutex_lock(&w->mu);
    w->dropped = dropped;
    pthread_mutex_unlock(&w->mu);
    pt_wk_ran(w, done, done + (res.windows > 0 ? res.windows : 1));
    return 0;
}

void pt_wk_ran(pt_agent_worker *w, int64_t done, int64_t after)
{
    run_state *r = &w->r;
    pthread_mutex_lock(&w->mu);
    w->done = after;
    w->in_run = 0;
    pthread_mutex_unlock(&w->mu);
    pt_wk_notify_simple(w, PT_WNOTE_STEP, 0, after, 0, NULL);
    if (r->ckpt_every > 0 && r->ckpt_dir[0] && after / r->ckpt_every > done / r->ckpt_every)
        pt_wk_do_save(w, after, w->start_req);
    pt_wk_serve_ckpt_requests(w, after, 0);
}

static void handle_assign(pt_agent_worker *w, pt_msg *m)
{
    pt_wk_flush_metrics(w); /* the old generation's, under its number */
    pt_wk_set_state(w, "setting-up");
    pt_wk_teardown(w);
    atomic_store(&w->stop_flag, 0);
    pt_error err = {0};
    pt_wk_connect_telemetry(w, w->tel_fixed[0] ? w->tel_fixed : m->u.assign.telemetry);
    int rc = pt_wk_build_run(w, m, &err);
    if (rc < 0)
        pt_wk_teardown(w);
    pt_wk_setup_done(w, m, rc, err.msg);
}

void pt_wk_setup_done(pt_agent_worker *w, const pt_msg *m, int rc, const char *why)
{
    pt_wnote n = {0};
    n.kind = PT_WNOTE_SETUP;
    n.rc = rc;
    n.gen = m->gen;
    n.req = m->req;
    n.stage = m->u.assign.stage;
    n.replica = m->u.assign.replica;
    n.step = m->u.assign.resume_step;
    if (rc < 0)
        snprintf(n.text, sizeof n.text, "stage %d replica %d: %.450s", n.stage, n.replica,
                 why && why[0] ? why : pt_strerror(rc));
    pt_wk_assigned(w, m->gen, rc == 0 ? m->u.assign.resume_step : 0, rc, &n);
}

void pt_wk_assigned(pt_agent_worker *w, int64_t gen, int64_t done, int rc, const pt_wnote *n)
{
    pthread_mutex_lock(&w->mu);
    w->gen = gen;
    w->done = done;
    w->built = rc == 0;
    w->running = 0;
    w->nckpt = 0;
    snprintf(w->state, sizeof w->state, "%s", rc == 0 ? "ready" : "failed");
    pthread_mutex_unlock(&w->mu);
    pt_wk_notify(w, n);
}

/* A stop that is due now: saves, acknowledges. w->mu held on entry and return. */
static void stop_now(pt_agent_worker *w, int64_t done)
{
    int64_t req = w->stop_req;
    w->has_stop = 0;
    w->hold = 0;
    w->running = 0;
    int built = w->built;
    pthread_mutex_unlock(&w->mu);
    pt_wk_flush_metrics(w);
    if (built && w->r.ckpt_dir[0])
        pt_wk_do_save(w, done, req);
    pt_wk_serve_ckpt_requests(w, done, 1);
    pt_wk_set_state(w, "stopped");
    pt_wk_notify_simple(w, PT_WNOTE_STOPPED, req, done, 0, NULL);
    pthread_mutex_lock(&w->mu);
}

/* One run of the program, or the end of the start's steps. w->mu held on
 * entry and return. */
static void step_once(pt_agent_worker *w, const pt_wk_ops *ops, void *ctx, int64_t done,
                      int catch_up)
{
    if (!catch_up && w->run_target >= 0 && done >= w->run_target) {
        w->running = 0;
        snprintf(w->state, sizeof w->state, "idle");
        pthread_mutex_unlock(&w->mu);
        pt_wk_flush_metrics(w);
        pt_wk_notify_simple(w, PT_WNOTE_IDLE, 0, done, 0, NULL);
        pthread_mutex_lock(&w->mu);
        return;
    }
    snprintf(w->state, sizeof w->state, catch_up ? "stopping" : "running");
    w->in_run = 1;
    w->run_end = done + (w->r.prog.window_count > 0 ? w->r.prog.window_count : 1);
    pthread_mutex_unlock(&w->mu);
    pt_error err = {0};
    int rc = ops->run_once(w, ctx, &err);
    pthread_mutex_lock(&w->mu);
    if (rc < 0) {
        w->in_run = 0;
        w->running = 0;
        w->has_stop = 0; /* the failure is reported instead */
        snprintf(w->state, sizeof w->state, "failed");
        int aborted = w->quit;
        pthread_mutex_unlock(&w->mu);
        pt_wk_flush_metrics(w);
        if (!aborted)
            pt_wk_notify_simple(w, PT_WNOTE_FAILED, 0, done, rc,
                                err.msg[0] ? err.msg : pt_strerror(rc));
        pthread_mutex_lock(&w->mu);
    }
}

void pt_wk_loop(pt_agent_worker *w, const pt_wk_ops *ops, void *ctx)
{
    w->ops = ops;
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        int64_t done = w->done;
        if (w->assign) {
            pt_msg *m = w->assign;
            w->assign = NULL;
            pthread_mutex_unlock(&w->mu);
            ops->assign(w, ctx, m);
            pt_msg_clear(m);
            free(m);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        /* A stop at a step runs the iterations before it first, whether or
         * not a start is being served (its peers need them). */
        int catch_up = w->has_stop && w->stop_at >= 0 && w->built && done < w->stop_at;
        if (w->has_stop && !catch_up) {
            stop_now(w, done);
        } else if (w->nckpt > 0 && w->built && !w->running) {
            /* idle: every request is due now */
            pthread_mutex_unlock(&w->mu);
            pt_wk_serve_ckpt_requests(w, done, 1);
            pthread_mutex_lock(&w->mu);
        } else if (catch_up || (w->running && w->built && !(w->hold && done >= w->hold_at))) {
            step_once(w, ops, ctx, done, catch_up);
        } else {
            if (w->running && w->hold && done >= w->hold_at)
                snprintf(w->state, sizeof w->state, "holding");
            if (pt_wk_folds_pending(w)) {
                /* nothing to run now: what was folded goes out before waiting */
                pthread_mutex_unlock(&w->mu);
                pt_wk_flush_metrics(w);
                pthread_mutex_lock(&w->mu);
            } else {
                ops->idle(w, ctx);
            }
        }
    }
    pthread_mutex_unlock(&w->mu);
    pt_wk_flush_metrics(w);
}

static void train_assign(pt_agent_worker *w, void *ctx, pt_msg *m)
{
    (void)ctx;
    handle_assign(w, m);
}

static int train_run_once(pt_agent_worker *w, void *ctx, pt_error *err)
{
    (void)ctx;
    return run_once(w, err);
}

static void train_idle(pt_agent_worker *w, void *ctx)
{
    (void)ctx;
    if (!w->r.wired || !w->r.comm) {
        pthread_cond_wait(&w->cv, &w->mu);
        return;
    }
    /* wired and idle: peers may still ask for frames a broken connection
     * lost (runtime/comm.h, "Resending"); they are answered between waits */
    struct timespec until = pt_clock_deadline(CLOCK_MONOTONIC, IDLE_PROGRESS_MS);
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT) {
        pthread_mutex_unlock(&w->mu);
        pt_comm_progress(w->r.comm, NULL);
        pthread_mutex_lock(&w->mu);
    }
}

static void *thread_main(void *arg)
{
    static const pt_wk_ops train = {train_assign, train_run_once, NULL, train_idle};
    pt_agent_worker *w = arg;
    w->notify = zmq_socket(w->ctx, ZMQ_PAIR);
    if (w->notify)
        zmq_connect(w->notify, w->notify_ep);
    w->r.last_saved = -1;
    pt_backend_cuda_bind(w->be); /* a failure shows at the first allocation */
    pt_wk_connect_telemetry(w, w->tel_fixed);
    pt_wk_loop(w, &train, NULL);
    pt_wk_teardown(w);
    pt_wk_exit(w);
    return NULL;
}

void pt_wk_exit(pt_agent_worker *w)
{
    if (w->pub)
        zmq_close(w->pub);
    if (w->notify)
        zmq_close(w->notify);
    w->pub = w->notify = NULL;
    pthread_mutex_lock(&w->mu);
    w->exited = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* ---- the control thread's side ------------------------------------------------------- */

int pt_agent_worker_start(const pt_agent_worker_config *cfg, pt_agent_worker **out, pt_error *err)
{
    *out = NULL;
    pt_agent_worker *w = calloc(1, sizeof *w);
    if (!w)
        return pt_error_set(err, PT_ENOMEM, "agent: out of memory");
    snprintf(w->id, sizeof w->id, "%s", cfg->agent_id);
    snprintf(w->data_ep, sizeof w->data_ep, "%s", cfg->data_endpoint);
    snprintf(w->tel_fixed, sizeof w->tel_fixed, "%s", cfg->telemetry ? cfg->telemetry : "");
    snprintf(w->notify_ep, sizeof w->notify_ep, "%s", cfg->notify_ep);
    snprintf(w->state, sizeof w->state, "waiting");
    w->ctx = cfg->zmq_ctx;
    w->comm_timeout_ms = cfg->comm_timeout_ms > 0 ? cfg->comm_timeout_ms : PT_AGENT_COMM_TIMEOUT_MS;
    snprintf(w->ckpt_root, sizeof w->ckpt_root, "%s",
             cfg->checkpoint_root ? cfg->checkpoint_root : ".");
    w->be = cfg->backend;
    if (cfg->key && cfg->server_key) {
        w->curve = 1;
        w->key = *cfg->key;
        snprintf(w->server_key, sizeof w->server_key, "%s", cfg->server_key);
    }
    atomic_init(&w->stop_flag, 0);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(w->observe_dir, sizeof w->observe_dir, "%s", cfg->observe ? cfg->observe : "");
    w->sim = cfg->sim;
    w->sim_index = cfg->sim_index;
    void *(*main_fn)(void *) = cfg->observe ? pt_wk_observe_main
                               : cfg->sim   ? pt_wk_sim_main
                                            : thread_main;
    if (pthread_create(&w->th, NULL, main_fn, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return pt_error_set(err, PT_EIO, "agent: cannot start the worker thread");
    }
    w->started = 1;
    *out = w;
    return 0;
}

void pt_agent_worker_assign(pt_agent_worker *w, pt_msg *assign)
{
    pt_msg *m = malloc(sizeof *m);
    if (!m) {
        pt_msg_clear(assign);
        return;
    }
    *m = *assign;
    memset(assign, 0, sizeof *assign);
    pthread_mutex_lock(&w->mu);
    if (w->assign) {
        pt_msg_clear(w->assign);
        free(w->assign);
    }
    w->assign = m;
    w->built = 0; /* starts for the old generation are refused from now on */
    w->running = 0;
    w->has_stop = 0;
    w->hold = 0;
    w->nckpt = 0;
    snprintf(w->state, sizeof w->state, "setting-up");
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int pt_agent_worker_begin(pt_agent_worker *w, int64_t gen, int64_t req, int64_t steps)
{
    pthread_mutex_lock(&w->mu);
    int ok = w->built && w->gen == gen && !w->assign;
    if (ok) {
        w->running = 1;
        w->start_req = req;
        w->start_step = w->done;
        w->run_target = steps > 0 ? w->done + steps : -1;
        snprintf(w->state, sizeof w->state, "running");
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return ok ? 0 : PT_ESTATE;
}

int64_t pt_agent_worker_hold(pt_agent_worker *w)
{
    pthread_mutex_lock(&w->mu);
    int64_t begun = w->in_run && w->run_end > w->done ? w->run_end : w->done;
    if (!w->hold || begun < w->hold_at) { /* a second hold keeps the first horizon */
        w->hold = 1;
        w->hold_at = begun;
    }
    begun = w->hold_at;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return begun;
}

void pt_agent_worker_stop(pt_agent_worker *w, int64_t gen, int64_t req, int64_t at_step)
{
    (void)gen;
    pthread_mutex_lock(&w->mu);
    w->has_stop = 1;
    w->stop_req = req;
    w->stop_at = at_step >= 0 ? at_step : -1;
    if (at_step >= 0)
        w->hold = 0; /* the named step replaces the horizon of a hold */
    snprintf(w->state, sizeof w->state, "stopping");
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int pt_agent_worker_checkpoint(pt_agent_worker *w, int64_t gen, int64_t req, int64_t step)
{
    (void)gen;
    pthread_mutex_lock(&w->mu);
    int ok = w->nckpt < PT_AGENT_CKPT_REQ_MAX && w->built;
    if (ok) {
        w->ckpts[w->nckpt++] = (ckpt_req){req, step};
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return ok ? 0 : PT_ERANGE;
}

void pt_agent_worker_abort(pt_agent_worker *w)
{
    if (!w)
        return;
    atomic_store(&w->stop_flag, 1);
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    w->running = 0;
    if (w->abort_ctx)
        zmq_ctx_shutdown(w->abort_ctx);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void pt_agent_worker_status(pt_agent_worker *w, char *state, int cap, int64_t *step)
{
    pthread_mutex_lock(&w->mu);
    snprintf(state, (size_t)cap, "%s", w->state);
    *step = w->done - 1;
    pthread_mutex_unlock(&w->mu);
}

int64_t pt_agent_worker_data_dropped(pt_agent_worker *w)
{
    pthread_mutex_lock(&w->mu);
    int64_t n = (int64_t)w->dropped;
    pthread_mutex_unlock(&w->mu);
    return n;
}

int pt_agent_worker_destroy(pt_agent_worker **w_p, int timeout_ms)
{
    if (!w_p || !*w_p)
        return 0;
    pt_agent_worker *w = *w_p;
    *w_p = NULL;
    pt_agent_worker_abort(w);
    struct timespec until = pt_clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&w->mu);
    while (!w->exited)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT)
            break;
    int exited = w->exited;
    pthread_mutex_unlock(&w->mu);
    if (!exited)
        return PT_ETIMEOUT; /* leaked on purpose: the thread may still touch it */
    pthread_join(w->th, NULL);
    if (w->assign) {
        pt_msg_clear(w->assign);
        free(w->assign);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    return 0;
}
