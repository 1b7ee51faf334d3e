/* The agent's worker thread: builds one stage replica from an assign — or,
 * for an interleaved plan, every model chunk of its device (the assign's
 * "chunks": stages d, d+S, ... of replica r) — runs its schedule program
 * through the stage executor (runtime/executor.h), publishes telemetry, saves
 * checkpoints. See agent/agent.h.
 *
 * Several chunks share the agent's one data-plane rank (the device's host
 * index, runtime/exec_host.h): each chunk has its own executor, net and
 * optimizer, run on its own thread, and the executors take turns in the
 * device's host order, so a hop to a chunk on another agent goes over the
 * data plane and the device runs one op at a time, as the simulator times it.
 *
 * The executor is reached through three calls only — pt_exec_create,
 * pt_exec_run and pt_exec_window_loss/pt_exec_destroy — in build_run(),
 * run_once() and teardown(). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/agent.h"
#include "planner/schedule.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/backend_cuda.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/comm_nccl.h"
#include "runtime/trust.h"
#include "runtime/data.h"
#include "runtime/exec_host.h"
#include "runtime/executor.h"
#include "runtime/feed.h"
#include "runtime/net.h"
#include "runtime/optim.h"

#define NS_PER_MS          1000000LL
#define BIND_RETRIES       50 /* the data port is re-bound after the previous socket closed */
#define BIND_RETRY_MS      20
#define EVENTS_INITIAL_CAP 1024
/* Telemetry thinning (docs/protocol.md, "Telemetry thinning"): metrics of
 * consecutive steps go out folded into one message at most every
 * FOLD_FLUSH_MS (and whenever the worker stops running); the op events of a
 * step go out for the first EVENTS_HEAD_STEPS and the last EVENTS_TAIL_STEPS
 * steps of a start, and in between for steps that are multiples of a power
 * of two chosen so that about EVENT_STEPS_PER_S steps a second are sent.
 * The stride depends on the step number only, the same on every worker
 * running at the pipeline's pace, so the sampled steps line up. */
#define FOLD_FLUSH_MS     50
#define EVENT_STEPS_PER_S 50
#define EVENTS_HEAD_STEPS 32
#define EVENTS_TAIL_STEPS 16
#define EVENT_STRIDE_MAX  4096
/* The replicas of a stage swap their collective endpoints under this tag. */
#define COLL_EXCHANGE_MB 0x00C011EC
#define STATE_NAME_MAX   32

/* Most model chunks one agent runs (an interleaved plan's v). */
#define CHUNKS_MAX PT_SCHED_CHUNKS_MAX

struct run_state;

/* One model chunk of the run: a worker of the program with its own net,
 * optimizer, feed (first and last stage), collective and executor. */
typedef struct chunk {
    int worker, stage;
    pt_exec_needs needs;
    pt_feed *feed;
    pt_net *net;
    pt_optim *optim;
    pt_collective *coll;
    pt_exec *exec;
    /* one run of several chunks: each on its own thread */
    struct run_state *r;
    pthread_t th;
    int64_t base;
    int rc;
    pt_error err;
    pt_exec_result res;
} chunk;

/* Consecutive steps' metrics of one chunk folded into one message (n steps;
 * iter and rate: sums). */
typedef struct fold_slot {
    pt_msg_metrics m;
    int n;
    double iter, rate;
} fold_slot;

/* Everything one generation's run owns (worker thread only). */
typedef struct run_state {
    int64_t gen;
    pt_model_spec *spec;
    pt_plan *plan;
    pt_program prog;
    int worker, stage, replica; /* the first chunk's */
    int rank, nranks;           /* data-plane rank and count: workers, or hosts when hosted */
    const int *ranks;           /* every worker's rank: NULL (its index) or prog.worker_host */
    chunk ch[CHUNKS_MAX];
    int nch;
    pt_exec_host *host;    /* several chunks: the device's turn */
    const pt_backend *be;  /* the agent's (NULL: CPU), bound on the chunks' threads too */
    pthread_mutex_t ev_mu; /* chunks' threads append events concurrently */
    int ev_mu_ok;
    pt_dataset *ds;
    void *data_ctx;
    pt_zap *data_zap;                      /* CURVE: allows exactly the assign's peers */
    char (*peer_keys)[PT_KEY_Z85_LEN + 1]; /* [worker_count] by rank; NULL: plain */
    const pt_keyfile *own_key;
    pt_comm *comm;
    pt_nccl *nccl, *nccl_replicas; /* an assign with an nccl_id on a CUDA backend */
    char ckpt_dir[PT_MSG_PATH_MAX];
    int64_t ckpt_every;
    int64_t last_saved; /* step of the newest checkpoint written by this run, -1 none */
    pt_msg_event *events;
    int nev, evcap;
    int64_t ns_base;             /* pt_exec_now_ns() - pt_msg_now_ns() */
    uint64_t run_token;          /* the assign's: every data frame carries it */
    size_t stash_bound, max_msg; /* bytes: early-arrival buffer, largest message */
    size_t coll_stash_bound;
} run_state;

typedef struct ckpt_req {
    int64_t req, step;
} ckpt_req;

struct pt_agent_worker {
    char id[PT_MSG_ID_MAX];
    char data_ep[PT_MSG_ENDPOINT_MAX];
    char tel_fixed[PT_MSG_ENDPOINT_MAX];
    char tel_connected[PT_MSG_ENDPOINT_MAX];
    void *ctx;
    char notify_ep[PT_MSG_ENDPOINT_MAX];
    char ckpt_root[PT_MSG_PATH_MAX]; /* checkpoints only under here (absolute) */
    int comm_timeout_ms;
    const pt_backend *be; /* NULL: the CPU backend */
    int curve;            /* key and server_key set: every socket talks CURVE */
    pt_keyfile key;
    char server_key[PT_KEY_Z85_LEN + 1];
    pthread_t th;
    int started;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* commands (mu) */
    pt_msg *assign;
    int running;        /* a start is being served */
    int64_t start_req;  /* its request id: periodic checkpoints are acknowledged under it */
    int64_t run_target; /* iterations done at which it ends; -1: until stopped */
    int has_stop;
    int64_t stop_req;
    int64_t stop_at; /* the stop's at_step: run until this many iterations are done; -1 none */
    int hold;        /* a hold is in force: begin no iteration at or beyond hold_at */
    int64_t hold_at;
    int in_run;      /* an iteration (program) is executing... */
    int64_t run_end; /* ...and `done` will be this when it finishes */
    ckpt_req ckpts[PT_AGENT_CKPT_REQ_MAX];
    int nckpt;
    int quit;
    void *abort_ctx; /* the data context while a run exists: shut down to abort */
    /* status (mu) */
    char state[STATE_NAME_MAX];
    int64_t done;     /* iterations completed */
    uint64_t dropped; /* data-plane frames dropped, as of the last run of steps */
    int64_t gen;      /* generation built */
    int built;
    int exited;

    atomic_int stop_flag; /* the executor's: stop before the next op */
    /* worker thread only */
    void *pub, *notify;
    int64_t tel_seq;
    run_state r;
    /* telemetry thinning: one metrics fold being gathered per chunk (so an
     * agent running several chunks folds each one's consecutive steps), when
     * one last went out, and the events' step stride from the smoothed
     * iteration time */
    fold_slot folds[CHUNKS_MAX];
    int64_t fold_sent_ns;
    double iter_ema_ms;
    int64_t start_step; /* (mu) done when the current start began */
};

/* ---- helpers ------------------------------------------------------------------ */

static void set_state(pt_agent_worker *w, const char *st)
{
    pthread_mutex_lock(&w->mu);
    snprintf(w->state, sizeof w->state, "%s", st);
    pthread_mutex_unlock(&w->mu);
}

static void notify(pt_agent_worker *w, const pt_wnote *n)
{
    zmq_send(w->notify, n, sizeof *n, 0);
}

static void notify_simple(pt_agent_worker *w, int kind, int64_t req, int64_t step, int rc,
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
    notify(w, &n);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * NS_PER_MS};
    nanosleep(&ts, NULL);
}

/* ---- telemetry ------------------------------------------------------------------- */

static void publish(pt_agent_worker *w, pt_msg *m)
{
    if (!w->pub)
        return;
    snprintf(m->agent, sizeof m->agent, "%s", w->id);
    m->seq = w->tel_seq;
    m->gen = w->r.gen;
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    if (pt_msg_encode(m, &text, &len, &err) < 0) {
        /* a bug of ours, not the console's: say it once per kind */
        static int said[PT_MSG_TYPE_COUNT];
        if ((unsigned)m->type < PT_MSG_TYPE_COUNT && !said[m->type]++)
            fprintf(stderr, "pipetop-agent %s: telemetry not sent: %s\n", w->id, err.msg);
        return;
    }
    /* A PUB learns its subscribers' subscriptions only while it processes
     * its command queue, which zmq_send does at most every few hundred
     * microseconds: reading ZMQ_EVENTS makes it do so now, so a burst of
     * telemetry right after a quiet spell is not dropped for want of it. */
    int events = 0;
    size_t elen = sizeof events;
    zmq_getsockopt(w->pub, ZMQ_EVENTS, &events, &elen);
    if (zmq_send(w->pub, text, len, ZMQ_DONTWAIT) == (int)len)
        w->tel_seq++;
    free(text);
}

static void connect_telemetry(pt_agent_worker *w, const char *ep)
{
    if (!ep || !ep[0] || !strcmp(ep, w->tel_connected))
        return;
    if (!w->pub) {
        w->pub = zmq_socket(w->ctx, ZMQ_PUB);
        int linger = 1000, hwm = 100000;
        if (w->pub) {
            zmq_setsockopt(w->pub, ZMQ_LINGER, &linger, sizeof linger);
            zmq_setsockopt(w->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
            pt_error err = {0};
            if (w->curve && pt_trust_client(w->pub, &w->key, w->server_key, &err) < 0) {
                fprintf(stderr, "pipetop-agent %s: telemetry: %s\n", w->id, err.msg);
                zmq_close(w->pub);
                w->pub = NULL;
            }
        }
    }
    if (w->pub && zmq_connect(w->pub, ep) == 0)
        snprintf(w->tel_connected, sizeof w->tel_connected, "%s", ep);
}

static void on_op(void *user, const pt_exec_event *ev)
{
    run_state *r = user;
    if (r->nch > 1)
        pthread_mutex_lock(&r->ev_mu);
    if (r->nev == r->evcap) {
        int cap = r->evcap ? r->evcap * 2 : EVENTS_INITIAL_CAP;
        pt_msg_event *e = realloc(r->events, (size_t)cap * sizeof *e);
        if (!e) {
            if (r->nch > 1)
                pthread_mutex_unlock(&r->ev_mu);
            return; /* the batch misses it; the run goes on */
        }
        r->events = e;
        r->evcap = cap;
    }
    pt_msg_event *e = &r->events[r->nev++];
    memset(e, 0, sizeof *e);
    e->stage = ev->stage;
    e->replica = ev->replica;
    e->step = ev->iteration;
    e->mb = pt_op_has_one_mb(ev->kind) && ev->mb >= 0 ? ev->mb % r->prog.mb_per_window : -1;
    e->op = ev->kind;
    e->version = ev->used_version >= 0 ? ev->used_version : -1;
    int64_t s = ev->start_ns - r->ns_base, t = ev->end_ns - r->ns_base;
    e->start_ns = s > 0 ? s : 0;
    e->end_ns = t > e->start_ns ? t : e->start_ns;
    e->bytes = ev->bytes > 0 ? ev->bytes : 0;
    if (r->nch > 1)
        pthread_mutex_unlock(&r->ev_mu);
}

static void publish_events(pt_agent_worker *w)
{
    run_state *r = &w->r;
    for (int k = 0; k < r->nev; k += PT_MSG_MAX_EVENTS) {
        pt_msg m;
        pt_msg_init(&m, PT_MSG_EVENTS, w->id);
        m.u.events.count = r->nev - k < PT_MSG_MAX_EVENTS ? r->nev - k : PT_MSG_MAX_EVENTS;
        m.u.events.events = r->events + k;
        publish(w, &m); /* the events stay ours: no pt_msg_clear */
    }
    r->nev = 0;
}

/* Sends chunk c's metrics fold (nothing when empty). */
static void flush_fold(pt_agent_worker *w, int c)
{
    fold_slot *f = &w->folds[c];
    if (f->n == 0)
        return;
    pt_msg m;
    pt_msg_init(&m, PT_MSG_METRICS, w->id);
    m.u.metrics = f->m;
    m.u.metrics.steps = f->n;
    m.u.metrics.iter_ms = f->iter / f->n;
    m.u.metrics.samples_per_s = f->rate / f->n;
    publish(w, &m);
    f->n = 0;
    w->fold_sent_ns = pt_msg_now_ns();
}

/* Sends every chunk's fold gathered so far. */
static void flush_metrics(pt_agent_worker *w)
{
    for (int c = 0; c < CHUNKS_MAX; c++)
        flush_fold(w, c);
}

/* 1 when some fold holds steps not sent yet. */
static int folds_pending(const pt_agent_worker *w)
{
    for (int c = 0; c < CHUNKS_MAX; c++)
        if (w->folds[c].n > 0)
            return 1;
    return 0;
}

/* Adds one step's metrics to chunk c's fold (sent first when full, or when
 * mt does not follow its last step). */
static void fold_metrics(pt_agent_worker *w, int c, const pt_msg_metrics *mt)
{
    fold_slot *s = &w->folds[c];
    pt_msg_metrics *f = &s->m;
    if (s->n > 0 && (s->n == PT_MSG_FOLD_MAX || mt->step != f->step + 1 || mt->stage != f->stage ||
                     mt->replica != f->replica))
        flush_fold(w, c);
    if (s->n == 0) {
        *f = *mt;
        s->iter = s->rate = 0;
    } else {
        f->step = mt->step;
        f->loss = mt->loss;
        memcpy(f->mem_cur, mt->mem_cur, sizeof f->mem_cur);
        for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
            if (mt->mem_peak[k] > f->mem_peak[k])
                f->mem_peak[k] = mt->mem_peak[k];
        f->total_cur = mt->total_cur;
        if (mt->total_peak > f->total_peak)
            f->total_peak = mt->total_peak;
        f->device_free = mt->device_free;
        f->device_total = mt->device_total;
    }
    f->losses[s->n++] = mt->loss;
    s->iter += mt->iter_ms;
    s->rate += mt->samples_per_s;
}

/* 1 when the op events of steps [done, after) go out: the first and last
 * steps of a start, and steps on the stride in between. */
static int events_wanted(const pt_agent_worker *w, int64_t start, int64_t done, int64_t after,
                         int64_t target)
{
    if (done - start < EVENTS_HEAD_STEPS || (target >= 0 && after > target - EVENTS_TAIL_STEPS))
        return 1;
    int64_t stride = 1;
    double want_ms = 1000.0 / EVENT_STEPS_PER_S;
    while (stride < EVENT_STRIDE_MAX && w->iter_ema_ms > 0 &&
           (double)stride * w->iter_ema_ms < want_ms)
        stride *= 2;
    return done % stride == 0 || (after - 1) / stride != done / stride;
}

static void publish_chunk_metrics(pt_agent_worker *w, const chunk *ch, const pt_exec_result *res,
                                  int64_t first_step);

/* One metrics message per window and chunk (each chunk its stage's memory). */
static void publish_metrics(pt_agent_worker *w, const pt_exec_result *res, int64_t first_step)
{
    run_state *r = &w->r;
    for (int c = 0; c < r->nch; c++)
        publish_chunk_metrics(w, &r->ch[c], res, first_step);
}

static void publish_chunk_metrics(pt_agent_worker *w, const chunk *ch, const pt_exec_result *res,
                                  int64_t first_step)
{
    run_state *r = &w->r;
    pt_mem_stats ms;
    pt_arena_stats(pt_net_arena(ch->net), &ms);
    int windows = res->windows > 0 ? res->windows : 1;
    double iter_ms = (double)res->wall_ns / 1e6 / windows;
    double samples = (double)r->prog.mb_size * r->prog.mb_per_window;
    for (int k = 0; k < windows; k++) {
        pt_msg m;
        pt_msg_init(&m, PT_MSG_METRICS, w->id);
        pt_msg_metrics *mt = &m.u.metrics;
        mt->stage = ch->stage;
        mt->replica = r->replica;
        mt->step = first_step + k;
        double sum = 0;
        int64_t count = 0;
        pt_exec_window_loss(ch->exec, k, &sum, &count);
        mt->loss = count > 0 ? sum / (double)count : NAN;
        mt->iter_ms = iter_ms;
        mt->samples_per_s = iter_ms > 0 ? samples / (iter_ms / 1e3) : 0;
        for (int c = 0; c < PT_MSG_MEM_COUNT && c < PT_MEM_KIND_COUNT; c++) {
            mt->mem_cur[c] = ms.current[c];
            mt->mem_peak[c] = ms.peak[c] > ms.current[c] ? ms.peak[c] : ms.current[c];
        }
        mt->total_cur = ms.total_current;
        mt->total_peak = ms.total_peak > ms.total_current ? ms.total_peak : ms.total_current;
        if (pt_backend_cuda_mem_info(w->be, &mt->device_free, &mt->device_total) < 0)
            mt->device_free = mt->device_total = 0;
        fold_metrics(w, (int)(ch - r->ch), mt);
    }
    w->iter_ema_ms = w->iter_ema_ms > 0 ? 0.9 * w->iter_ema_ms + 0.1 * iter_ms : iter_ms;
    if (pt_msg_now_ns() - w->fold_sent_ns >= FOLD_FLUSH_MS * NS_PER_MS)
        flush_metrics(w);
}

/* ---- set-up and tear-down ------------------------------------------------------- */

static void teardown(pt_agent_worker *w)
{
    run_state *r = &w->r;
    for (int c = 0; c < r->nch; c++) {
        pt_exec_destroy(&r->ch[c].exec);
        pt_collective_destroy(&r->ch[c].coll);
    }
    pt_exec_host_free(&r->host);
    pt_comm_destroy(&r->comm);
    pt_nccl_destroy(&r->nccl_replicas);
    pt_nccl_destroy(&r->nccl);
    pt_zap_stop(&r->data_zap);
    free(r->peer_keys);
    r->peer_keys = NULL;
    pthread_mutex_lock(&w->mu);
    void *ctx = r->data_ctx;
    int quitting = w->quit;
    w->abort_ctx = NULL;
    w->built = 0;
    pthread_mutex_unlock(&w->mu);
    /* Terminating releases the data port before the next bind, but waits for
     * messages still queued to peers (up to the comm timeout); a process on
     * its way out does not wait for a peer that may be gone. */
    if (ctx && !quitting)
        zmq_ctx_term(ctx);
    r->data_ctx = NULL;
    for (int c = 0; c < r->nch; c++) {
        pt_optim_destroy(&r->ch[c].optim);
        pt_net_destroy(&r->ch[c].net);
        pt_feed_destroy(&r->ch[c].feed);
    }
    pt_dataset_free(&r->ds);
    if (r->ev_mu_ok)
        pthread_mutex_destroy(&r->ev_mu);
    pt_program_release(&r->prog);
    pt_plan_free(&r->plan);
    pt_model_spec_free(&r->spec);
    free(r->events);
    memset(r, 0, sizeof *r);
    r->last_saved = -1;
}

/* Floats holding the bytes of a string (exact small integers), for the
 * endpoint swap over the data plane. */
static int rank_of(const run_state *r, int worker)
{
    return r->ranks ? r->ranks[worker] : worker;
}

/* Swaps chunk c's collective endpoints with the other replicas of its stage
 * (workers [lo, hi)), over the data plane, one tag per chunk. */
static int exchange_coll_endpoints(run_state *r, int c, const char *mine,
                                   char (*eps)[PT_MSG_ENDPOINT_MAX], int lo, int hi, pt_error *err)
{
    float buf[PT_MSG_ENDPOINT_MAX];
    size_t n = strlen(mine);
    for (size_t i = 0; i < PT_MSG_ENDPOINT_MAX; i++)
        buf[i] = i < n ? (float)(unsigned char)mine[i] : 0.0f;
    uint64_t tag = pt_comm_tag(PT_COMM_USER, COLL_EXCHANGE_MB + (uint32_t)c, (uint32_t)r->gen);
    int me = r->ch[c].worker;
    for (int k = lo; k < hi; k++)
        if (k != me) {
            int rc = pt_comm_send(r->comm, rank_of(r, k), tag, buf, PT_MSG_ENDPOINT_MAX, err);
            if (rc < 0)
                return rc;
        }
    for (int k = lo; k < hi; k++) {
        if (k == me) {
            snprintf(eps[k - lo], PT_MSG_ENDPOINT_MAX, "%s", mine);
            continue;
        }
        float in[PT_MSG_ENDPOINT_MAX];
        int rc = pt_comm_recv(r->comm, rank_of(r, k), tag, in, PT_MSG_ENDPOINT_MAX, err);
        if (rc < 0)
            return rc;
        for (int i = 0; i < PT_MSG_ENDPOINT_MAX; i++) {
            float f = in[i];
            if (f < 0 || f > 255 || f != (float)(int)f)
                return pt_error_set(err, PT_EINVAL, "collective endpoint from rank %d is not text",
                                    k);
            eps[k - lo][i] = (char)(int)f;
        }
        eps[k - lo][PT_MSG_ENDPOINT_MAX - 1] = '\0';
    }
    return 0;
}

/* Frames the data plane dropped (forged, replayed, stale, over the bound),
 * over both communicators; the worker thread's own reading. */
static void coll_stats(run_state *r, pt_comm_stats *b)
{
    memset(b, 0, sizeof *b);
    for (int c = 0; c < r->nch; c++) {
        pt_comm_stats x = {0};
        pt_collective_stats(r->ch[c].coll, &x);
        b->bad_msgs += x.bad_msgs;
        b->dropped_malformed += x.dropped_malformed;
        b->dropped_token += x.dropped_token;
        b->dropped_sender += x.dropped_sender;
        b->dropped_seq += x.dropped_seq;
        b->dropped_overflow += x.dropped_overflow;
        if (x.stash_peak_bytes > b->stash_peak_bytes)
            b->stash_peak_bytes = x.stash_peak_bytes;
    }
}

static uint64_t data_dropped(run_state *r)
{
    pt_comm_stats a = {0}, b;
    pt_comm_stats_get(r->comm, &a);
    coll_stats(r, &b);
    return a.bad_msgs + b.bad_msgs;
}

/* The data plane's bounds, from the program: the largest message this
 * worker receives, and what may wait early in its buffer — every message
 * the program sends it in one pass (all its RECVs), twice, as the next
 * iteration's may come before this one's are taken, plus a stage's
 * gradients for an all-reduce neighbour that runs a chunk ahead, plus room
 * for the set-up messages. A buffer that would grow past it drops instead. */
#define STASH_SLACK_BYTES ((size_t)1 << 20)
static void data_bounds(run_state *r)
{
    size_t recv_bytes = 0, largest = (size_t)PT_COMM_SEGMENT_FLOATS * sizeof(float), grads = 0,
           grads_max = 0;
    /* the chunks of a device share the rank: their messages add up */
    for (int c = 0; c < r->nch; c++) {
        const pt_worker *pw = &r->prog.workers[r->ch[c].worker];
        const pt_net *net = r->ch[c].net;
        int64_t in_row = pt_net_in_elems(net) * (int64_t)sizeof(float);
        int64_t out_row = pt_net_out_elems(net) * (int64_t)sizeof(float);
        for (int i = pw->op_begin; i < pw->op_end; i++) {
            const pt_op *op = &r->prog.ops[i];
            int64_t rows = op->row_hi - op->row_lo;
            size_t b = op->kind == PT_OP_RECV_ACT    ? (size_t)(rows * in_row)
                       : op->kind == PT_OP_RECV_GRAD ? (size_t)(rows * out_row)
                                                     : 0;
            recv_bytes += b;
            if (b > largest)
                largest = b;
        }
        size_t g = (size_t)pt_net_param_count(net) * sizeof(float);
        grads += g;
        grads_max = g > grads_max ? g : grads_max;
    }
    r->max_msg = largest;
    r->stash_bound = 2 * recv_bytes + grads + STASH_SLACK_BYTES;
    r->coll_stash_bound = 2 * grads_max + STASH_SLACK_BYTES;
}

/* Says on stderr (the agent's log) what the data plane dropped, when that
 * grew: forged or stale frames are an attack or a bug worth a line. */
static void log_dropped(pt_agent_worker *w, uint64_t dropped)
{
    if (dropped == w->dropped)
        return;
    pt_comm_stats a = {0}, b;
    pt_comm_stats_get(w->r.comm, &a);
    coll_stats(&w->r, &b);
    fprintf(stderr,
            "pipetop-agent %s: data plane dropped %llu frames (malformed %llu, token or "
            "generation %llu, sender %llu, sequence %llu, over the %zu-byte early-arrival bound "
            "%llu); early-arrival peak %zu bytes\n",
            w->id, (unsigned long long)dropped,
            (unsigned long long)(a.dropped_malformed + b.dropped_malformed),
            (unsigned long long)(a.dropped_token + b.dropped_token),
            (unsigned long long)(a.dropped_sender + b.dropped_sender),
            (unsigned long long)(a.dropped_seq + b.dropped_seq), w->r.stash_bound,
            (unsigned long long)(a.dropped_overflow + b.dropped_overflow),
            a.stash_peak_bytes > b.stash_peak_bytes ? a.stash_peak_bytes : b.stash_peak_bytes);
}

/* The data plane's CURVE (docs/architecture.md, "Trust"): every receiving
 * socket is a server that lets in only the assign's peers (their keys came
 * over the authenticated control channel), every sending socket a client
 * that talks only to the peer holding the key the console named. */
static int data_socket_hook(void *user, void *sock, int peer, pt_error *err)
{
    run_state *r = user;
    if (!r->peer_keys)
        return 0;
    if (peer < 0)
        return pt_trust_server(sock, r->own_key, err);
    return pt_trust_client(sock, r->own_key, r->peer_keys[peer], err);
}

/* With CURVE, the assign's peer keys by rank and the ZAP handler of the
 * generation's data context. Every peer must have a key. */
static int setup_data_trust(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    if (!w->curve)
        return 0;
    int n = r->nranks;
    r->peer_keys = calloc((size_t)n, sizeof *r->peer_keys);
    const char **list = calloc((size_t)n + 1, sizeof *list);
    int rc = 0;
    if (!r->peer_keys || !list)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int k = 0; rc == 0 && k < as->peer_count; k++) {
        const pt_msg_peer *p = &as->peers[k];
        if (p->rank >= n)
            continue;
        if (!p->key[0])
            rc = pt_error_set(err, PT_EINVAL,
                              "assign: peer rank %d has no key, and this agent talks CURVE only",
                              p->rank);
        else
            snprintf(r->peer_keys[p->rank], sizeof r->peer_keys[0], "%s", p->key);
    }
    for (int k = 0; rc == 0 && k < n; k++) {
        if (!r->peer_keys[k][0])
            rc = pt_error_set(err, PT_EINVAL, "assign: no key for rank %d of %d", k, n);
        list[k] = r->peer_keys[k];
    }
    r->own_key = &w->key;
    if (rc == 0)
        rc = pt_zap_start(r->data_ctx, list, n, &r->data_zap, err);
    free(list);
    if (rc < 0) {
        free(r->peer_keys);
        r->peer_keys = NULL;
    }
    return rc;
}

static int make_comm(pt_agent_worker *w, const char *bind, size_t stash_bound, pt_comm **out,
                     pt_error *err)
{
    run_state *r = &w->r;
    pt_comm_config cc = {.rank = r->rank,
                         .size = r->nranks,
                         .bind_endpoint = bind,
                         .zmq_context = r->data_ctx,
                         .timeout_ms = w->comm_timeout_ms,
                         .run_token = r->run_token,
                         .generation = (uint64_t)r->gen,
                         .stash_limit_bytes = stash_bound,
                         .max_msg_bytes = r->max_msg};
    int rc = 0;
    for (int k = 0; k < BIND_RETRIES; k++) {
        rc = pt_comm_create_hooked(&cc, data_socket_hook, r, out, err);
        if (rc != PT_EIO)
            break;
        sleep_ms(BIND_RETRY_MS);
    }
    return rc;
}

/* Chunk c's collective (background all-reduces among its stage's replicas):
 * a second communicator with the same rank numbering, whose endpoints the
 * replicas swap over the first. */
static int build_collective(pt_agent_worker *w, int c, pt_error *err)
{
    run_state *r = &w->r;
    int st = r->ch[c].stage, lo = r->prog.stage_worker[st], hi = r->prog.stage_worker[st + 1];
    pt_comm *c2 = NULL;
    char host_bind[PT_MSG_ENDPOINT_MAX];
    snprintf(host_bind, sizeof host_bind, "%s", w->data_ep);
    if (!strncmp(host_bind, "tcp://", 6)) {
        char *colon = strrchr(host_bind, ':');
        if (colon && colon > host_bind + 6)
            snprintf(colon, sizeof host_bind - (size_t)(colon - host_bind), ":*");
    } else if (c == 0) {
        snprintf(host_bind, sizeof host_bind, "%.240s.coll", w->data_ep);
    } else {
        snprintf(host_bind, sizeof host_bind, "%.236s.coll%d", w->data_ep, c);
    }
    int rc = make_comm(w, host_bind, r->coll_stash_bound, &c2, err);
    if (rc < 0)
        return rc;
    char(*peer_eps)[PT_MSG_ENDPOINT_MAX] = calloc((size_t)(hi - lo), sizeof *peer_eps);
    const char **all = calloc((size_t)r->nranks, sizeof *all);
    if (!peer_eps || !all)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = exchange_coll_endpoints(r, c, pt_comm_endpoint(c2), peer_eps, lo, hi, err);
    for (int k = lo; rc == 0 && k < hi; k++)
        all[rank_of(r, k)] = peer_eps[k - lo];
    if (rc == 0)
        rc = pt_comm_connect(c2, all, err);
    if (rc == 0)
        rc = pt_collective_create(&c2, &r->ch[c].coll, err);
    pt_comm_destroy(&c2);
    free(peer_eps);
    free(all);
    return rc;
}

static int build_comms(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    int n = r->nranks;
    r->data_ctx = zmq_ctx_new();
    if (!r->data_ctx)
        return pt_error_set(err, PT_EIO, "zmq_ctx_new: %s", zmq_strerror(errno));
    pthread_mutex_lock(&w->mu);
    w->abort_ctx = r->data_ctx;
    pthread_mutex_unlock(&w->mu);
    data_bounds(r);
    fprintf(stderr,
            "pipetop-agent %s: data plane: early-arrival buffer bound %zu bytes, messages up to "
            "%zu bytes\n",
            w->id, r->stash_bound, r->max_msg);
    int rc = setup_data_trust(w, as, err);
    if (rc == 0)
        rc = make_comm(w, w->data_ep, r->stash_bound, &r->comm, err);
    if (rc < 0)
        return rc;
    const char **eps = calloc((size_t)n, sizeof *eps);
    if (!eps)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int k = 0; k < as->peer_count; k++)
        if (as->peers[k].rank < n)
            eps[as->peers[k].rank] = as->peers[k].endpoint;
    for (int k = 0; k < n && rc == 0; k++)
        if (!eps[k])
            rc = pt_error_set(err, PT_EINVAL, "assign: no peer has rank %d of %d", k, n);
    if (rc == 0)
        rc = pt_comm_connect(r->comm, eps, err);
    free(eps);
    for (int c = 0; c < r->nch && rc == 0; c++)
        if (r->ch[c].needs.needs_collective)
            rc = build_collective(w, c, err);
    return rc;
}

static int load_resume(pt_agent_worker *w, int64_t step, pt_error *err)
{
    run_state *r = &w->r;
    char dir[PT_MSG_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/step-%lld", r->ckpt_dir, (long long)step);
    pt_ckpt_info info;
    int rc = 0;
    for (int c = 0; c < r->nch && rc == 0; c++)
        rc = pt_ckpt_load(dir, r->spec, r->ch[c].net, r->ch[c].optim, &info, err);
    if (rc < 0)
        return rc;
    if (info.step != step)
        return pt_error_set(err, PT_EINVAL, "%s holds step %lld, not the resume step %lld", dir,
                            (long long)info.step, (long long)step);
    r->last_saved = step;
    return 0;
}

/* The NCCL communicators of an assign that carries an id (the console hands
 * one out only when every worker has its own GPU, runtime/comm_nccl.h): one
 * over all workers with the data-plane ranks, split into this stage's
 * replicas. Collective: every agent of the run calls it. Without an id, or on
 * the CPU, messages stay on the ZeroMQ data plane. */
static int build_nccl(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    if (!as->nccl_id[0] || !pt_backend_is_cuda(w->be) || r->nch > 1)
        return 0; /* several chunks share one rank: their messages stay on ZeroMQ */
    int rc = pt_nccl_create(as->nccl_id, as->peer_count, as->rank, w->be, &r->nccl, err);
    if (rc == 0)
        rc = pt_nccl_split(r->nccl, r->stage, r->replica, &r->nccl_replicas, err);
    return rc;
}

/* The workers this agent runs, from the assign: its rank's worker, or with
 * "chunks" every chunk of its device (host `rank` of the program: stages
 * stage, stage+S, ... replica `replica`). The error names what disagrees. */
static int pick_chunks(run_state *r, const pt_msg_assign *as, pt_error *err)
{
    const pt_program *p = &r->prog;
    int v = as->chunks > 1 ? as->chunks : 1;
    if (v == 1) {
        r->ranks = NULL;
        r->nranks = p->worker_count;
        if (as->rank >= p->worker_count || as->peer_count != p->worker_count)
            return pt_error_set(err, PT_EINVAL,
                                "assign: rank %d and %d peers for a program of %d workers",
                                as->rank, as->peer_count, p->worker_count);
        const pt_worker *pw = &p->workers[as->rank];
        if (pw->stage != as->stage || pw->replica != as->replica)
            return pt_error_set(err, PT_EINVAL,
                                "assign: rank %d is stage %d replica %d in the plan's program, "
                                "not stage %d replica %d",
                                as->rank, pw->stage, pw->replica, as->stage, as->replica);
        r->nch = 1;
        r->ch[0].worker = as->rank;
        r->ch[0].stage = as->stage;
        return 0;
    }
    if (p->host_count <= 0 || p->chunks != v || v > CHUNKS_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "assign.chunks: %d model chunks per agent, but the plan's program "
                            "places %d per device",
                            v, p->host_count > 0 ? p->chunks : 1);
    int P = p->rank_count, h = as->rank;
    if (h >= p->host_count || as->peer_count != p->host_count)
        return pt_error_set(err, PT_EINVAL,
                            "assign: rank %d and %d peers for a program of %d devices", h,
                            as->peer_count, p->host_count);
    if (as->stage >= P || p->stage_worker[as->stage] + as->replica != h)
        return pt_error_set(err, PT_EINVAL,
                            "assign: rank %d is not stage %d replica %d's device (the first %d "
                            "stages' replicas, in order, are the devices)",
                            h, as->stage, as->replica, P);
    r->ranks = p->worker_host;
    r->nranks = p->host_count;
    r->nch = v;
    for (int c = 0; c < v; c++) {
        int st = as->stage + c * P, wk = p->stage_worker[st] + as->replica;
        if (wk >= p->stage_worker[st + 1] || p->worker_host[wk] != h)
            return pt_error_set(err, PT_EINVAL,
                                "assign: chunk %d (stage %d) has no replica %d on device %d", c, st,
                                as->replica, h);
        r->ch[c].worker = wk;
        r->ch[c].stage = st;
    }
    return 0;
}

/* Chunk c's net, optimizer and feed (its stage's layers and data). */
static int build_chunk(pt_agent_worker *w, const pt_msg_assign *as, int c, pt_error *err)
{
    run_state *r = &w->r;
    chunk *ch = &r->ch[c];
    ch->r = r;
    int rc = pt_exec_needs_of(&r->prog, ch->worker, &ch->needs, err);
    if (rc < 0)
        return rc;
    const pt_exec_needs *needs = &ch->needs;
    if (needs->needs_input || needs->needs_labels) {
        if (!r->ds && (rc = pt_dataset_open(as->data, r->spec, PT_DATA_TRAIN,
                                            PT_AGENT_SYNTH_DATA_SEED, &r->ds, err)) < 0)
            return rc;
        if ((rc = pt_feed_create(r->ds, (uint64_t)as->seed, r->prog.mb_size, r->prog.mb_per_window,
                                 &ch->feed, err)) < 0)
            return rc;
    }
    pt_net_config nc = pt_net_config_default(r->spec);
    nc.first = needs->first;
    nc.last = needs->last;
    nc.max_batch = needs->max_batch > 0 ? needs->max_batch : 1;
    nc.max_slots = needs->max_slots > 0 ? needs->max_slots : 1;
    nc.recompute = needs->recompute;
    nc.seed = (uint64_t)as->seed;
    nc.backend = w->be;
    if ((rc = pt_net_create(r->spec, &nc, &ch->net, err)) < 0 ||
        (rc = pt_optim_create(&r->plan->optimizer, pt_net_arena(ch->net),
                              pt_net_param_count(ch->net), &ch->optim, err)) < 0)
        return rc;
    return 0;
}

static int build_exec(pt_agent_worker *w, int c, pt_error *err)
{
    run_state *r = &w->r;
    chunk *ch = &r->ch[c];
    pt_exec_config ec = {0};
    ec.nccl = r->nccl;
    ec.nccl_replicas = r->nccl_replicas;
    ec.prog = &r->prog;
    ec.worker = ch->worker;
    ec.net = ch->net;
    ec.optim = ch->optim;
    ec.comm = r->comm;
    ec.coll = ch->coll;
    ec.ranks = r->ranks;
    ec.host = r->host;
    ec.feed = ch->feed ? pt_feed_as_exec(ch->feed) : (pt_exec_feed){0};
    ec.on_op = on_op;
    ec.user = r;
    ec.stop = &w->stop_flag;
    return pt_exec_create(&ec, &ch->exec, err);
}

/* Builds the run of an assign; the error says what did not fit. */
static int build_run(pt_agent_worker *w, const pt_msg *m, pt_error *err)
{
    run_state *r = &w->r;
    const pt_msg_assign *as = &m->u.assign;
    r->gen = m->gen;
    r->run_token = m->u.assign.run_token;
    r->last_saved = -1;
    r->ns_base = pt_exec_now_ns() - pt_msg_now_ns();
    int rc;
    if ((rc = pt_model_spec_copy(as->model, &r->spec, err)) < 0 ||
        (rc = pt_plan_copy(as->plan, &r->plan, err)) < 0 ||
        (rc = pt_plan_check(r->plan, r->spec, NULL, "assign.plan", err)) < 0 ||
        (rc = pt_sched_build(r->plan, NULL, NULL, &r->prog, err)) < 0)
        return rc;
    if ((rc = pick_chunks(r, as, err)) < 0)
        return rc;
    r->worker = r->ch[0].worker;
    r->stage = as->stage;
    r->replica = as->replica;
    r->rank = as->rank;
    r->be = w->be;
    if (r->nch > 1) {
        if (pthread_mutex_init(&r->ev_mu, NULL) != 0)
            return pt_error_set(err, PT_ENOMEM, "agent: no mutex for the chunks' events");
        r->ev_mu_ok = 1;
        if ((rc = pt_exec_host_new(&r->prog, r->rank, &r->host, err)) < 0)
            return rc;
    }
    for (int c = 0; c < r->nch; c++)
        if ((rc = build_chunk(w, as, c, err)) < 0)
            return rc;
    /* the wire names a folder inside our root, checked again here: the
     * message checker refuses the rest, but a path is trusted only where
     * it is used */
    r->ckpt_dir[0] = '\0';
    if (as->checkpoint_dir[0] &&
        (rc = pt_path_join_inside(w->ckpt_root, as->checkpoint_dir, r->ckpt_dir, sizeof r->ckpt_dir,
                                  err)) < 0)
        return pt_error_prefix(err, "assign.checkpoint_dir");
    r->ckpt_every = as->checkpoint_every;
    if (as->resume_step > 0 && (rc = load_resume(w, as->resume_step, err)) < 0)
        return rc;
    if ((rc = build_comms(w, as, err)) < 0 || (rc = build_nccl(w, as, err)) < 0)
        return rc;
    for (int c = 0; c < r->nch; c++)
        if ((rc = build_exec(w, c, err)) < 0)
            return rc;
    return 0;
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* Writes chunk ch's layers and its stage's manifest into dir (step's folder). */
static int save_chunk(run_state *r, const chunk *ch, int64_t step, const char *dir, pt_error *err)
{
    pt_ckpt_layer *layers = NULL;
    int count = 0;
    int rc = pt_ckpt_write_layers(dir, r->spec, ch->net, ch->optim, step, &layers, &count, err);
    if (rc < 0)
        return rc;
    const pt_feed *feed = NULL;
    for (int c = 0; c < r->nch && !feed; c++)
        feed = r->ch[c].feed;
    pt_ckpt_index ix = {0};
    snprintf(ix.model, sizeof ix.model, "%s", r->spec->name);
    ix.step = step;
    ix.epoch = feed ? (double)step / (double)pt_feed_batches_per_epoch(feed) : 0;
    ix.has_optimizer = 1;
    ix.optimizer = r->plan->optimizer;
    ix.optim_steps = pt_optim_steps(ch->optim);
    ix.layer_count = count;
    ix.layers = layers;
    char *text = pt_ckpt_index_to_json(&ix);
    char path[PT_MSG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" PT_AGENT_MANIFEST_FMT, dir, ch->stage);
    if (!text)
        rc = pt_error_set(err, PT_ENOMEM, "checkpoint manifest: out of memory");
    else
        rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    pt_ckpt_layers_free(&layers, count);
    return rc;
}

/* Saves this agent's stages (every chunk's) after `step` iterations into
 * <dir>/step-<step>, each with the manifest the console commits from.
 * Replicas other than 0 hold the same weights and save nothing. */
static int save_checkpoint(pt_agent_worker *w, int64_t step, char *dir_out, size_t cap,
                           pt_error *err)
{
    run_state *r = &w->r;
    snprintf(dir_out, cap, "%.1000s/step-%lld", r->ckpt_dir, (long long)step);
    if (r->last_saved == step || r->replica != 0)
        return 0;
    int rc = 0;
    for (int c = 0; c < r->nch && rc == 0; c++)
        rc = save_chunk(r, &r->ch[c], step, dir_out, err);
    if (rc == 0)
        r->last_saved = step;
    return rc;
}

static void do_save(pt_agent_worker *w, int64_t step, int64_t req)
{
    pt_wnote n = {0};
    pt_error err = {0};
    n.stage = w->r.stage;
    n.replica = w->r.replica;
    n.gen = w->r.gen;
    n.req = req;
    n.step = step;
    if (!w->r.ckpt_dir[0]) {
        n.kind = PT_WNOTE_FAILED;
        n.rc = PT_EINVAL;
        snprintf(n.text, sizeof n.text, "checkpoint asked, but the assign named no folder");
        notify(w, &n);
        return;
    }
    set_state(w, "saving");
    int rc = save_checkpoint(w, step, n.dir, sizeof n.dir, &err);
    n.kind = rc == 0 ? PT_WNOTE_CKPT : PT_WNOTE_FAILED;
    n.rc = rc;
    if (rc < 0)
        snprintf(n.text, sizeof n.text, "checkpoint step %lld: %.450s", (long long)step, err.msg);
    notify(w, &n);
}

/* Serves checkpoint requests due at `done` iterations (all of them when
 * `all`, e.g. when idle). */
static void serve_ckpt_requests(pt_agent_worker *w, int64_t done, int all)
{
    for (;;) {
        ckpt_req q = {0, 0};
        int found = 0;
        pthread_mutex_lock(&w->mu);
        for (int k = 0; k < w->nckpt; k++)
            if (all || w->ckpts[k].step < 0 || w->ckpts[k].step <= done) {
                q = w->ckpts[k];
                w->ckpts[k] = w->ckpts[--w->nckpt];
                found = 1;
                break;
            }
        pthread_mutex_unlock(&w->mu);
        if (!found)
            return;
        do_save(w, done, q.req);
    }
}

/* ---- running ---------------------------------------------------------------------- */

static void *chunk_main(void *arg)
{
    chunk *ch = arg;
    ch->err.code = 0;
    pt_backend_cuda_bind(ch->r->be); /* a failure shows at the first allocation */
    ch->rc = pt_exec_run(ch->exec, ch->base, &ch->res, &ch->err);
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
            pt_exec_reset(r->ch[c].exec);
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
    int rc =
        r->nch > 1 ? run_chunks(r, done, &res, err) : pt_exec_run(r->ch[0].exec, done, &res, err);
    if (rc < 0 || events_wanted(w, start, done, end, target))
        publish_events(w);
    r->nev = 0;
    uint64_t dropped = data_dropped(r);
    log_dropped(w, dropped);
    if (rc < 0) {
        pthread_mutex_lock(&w->mu);
        w->dropped = dropped;
        w->in_run = 0;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    publish_metrics(w, &res, done);
    int64_t after = done + (res.windows > 0 ? res.windows : 1);
    pthread_mutex_lock(&w->mu);
    w->dropped = dropped;
    w->done = after;
    w->in_run = 0;
    pthread_mutex_unlock(&w->mu);
    notify_simple(w, PT_WNOTE_STEP, 0, after, 0, NULL);
    if (r->ckpt_every > 0 && r->ckpt_dir[0] && after / r->ckpt_every > done / r->ckpt_every)
        do_save(w, after, w->start_req);
    serve_ckpt_requests(w, after, 0);
    return 0;
}

static void handle_assign(pt_agent_worker *w, pt_msg *m)
{
    flush_metrics(w); /* the old generation's, under its number */
    set_state(w, "setting-up");
    teardown(w);
    atomic_store(&w->stop_flag, 0);
    pt_error err = {0};
    connect_telemetry(w, w->tel_fixed[0] ? w->tel_fixed : m->u.assign.telemetry);
    int rc = build_run(w, m, &err);
    pt_wnote n = {0};
    n.kind = PT_WNOTE_SETUP;
    n.rc = rc;
    n.gen = m->gen;
    n.req = m->req;
    n.stage = m->u.assign.stage;
    n.replica = m->u.assign.replica;
    n.step = m->u.assign.resume_step;
    if (rc < 0) {
        snprintf(n.text, sizeof n.text, "stage %d replica %d: %.450s", n.stage, n.replica,
                 err.msg[0] ? err.msg : pt_strerror(rc));
        teardown(w);
    }
    pthread_mutex_lock(&w->mu);
    w->gen = m->gen;
    w->done = rc == 0 ? m->u.assign.resume_step : 0;
    w->built = rc == 0;
    w->running = 0;
    w->nckpt = 0;
    snprintf(w->state, sizeof w->state, "%s", rc == 0 ? "ready" : "failed");
    pthread_mutex_unlock(&w->mu);
    notify(w, &n);
}

static void *thread_main(void *arg)
{
    pt_agent_worker *w = arg;
    w->notify = zmq_socket(w->ctx, ZMQ_PAIR);
    if (w->notify)
        zmq_connect(w->notify, w->notify_ep);
    w->r.last_saved = -1;
    pt_backend_cuda_bind(w->be); /* a failure shows at the first allocation */
    connect_telemetry(w, w->tel_fixed);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int64_t done = w->done;
        if (w->quit)
            break;
        if (w->assign) {
            pt_msg *m = w->assign;
            w->assign = NULL;
            pthread_mutex_unlock(&w->mu);
            handle_assign(w, m);
            pt_msg_clear(m);
            free(m);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        /* A stop at a step runs the iterations before it first, whether or
         * not a start is being served (its peers need them). */
        int catch_up = w->has_stop && w->stop_at >= 0 && w->built && done < w->stop_at;
        if (w->has_stop && !catch_up) {
            int64_t req = w->stop_req;
            w->has_stop = 0;
            w->hold = 0;
            w->running = 0;
            int built = w->built;
            pthread_mutex_unlock(&w->mu);
            flush_metrics(w);
            if (built && w->r.ckpt_dir[0])
                do_save(w, done, req);
            serve_ckpt_requests(w, done, 1);
            set_state(w, "stopped");
            notify_simple(w, PT_WNOTE_STOPPED, req, done, 0, NULL);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        if (w->nckpt > 0 && w->built && !w->running) {
            /* idle: every request is due now */
            pthread_mutex_unlock(&w->mu);
            serve_ckpt_requests(w, done, 1);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        if (catch_up || (w->running && w->built && !(w->hold && done >= w->hold_at))) {
            if (!catch_up && w->run_target >= 0 && done >= w->run_target) {
                w->running = 0;
                snprintf(w->state, sizeof w->state, "idle");
                pthread_mutex_unlock(&w->mu);
                flush_metrics(w);
                notify_simple(w, PT_WNOTE_IDLE, 0, done, 0, NULL);
                pthread_mutex_lock(&w->mu);
                continue;
            }
            snprintf(w->state, sizeof w->state, catch_up ? "stopping" : "running");
            w->in_run = 1;
            w->run_end = done + (w->r.prog.window_count > 0 ? w->r.prog.window_count : 1);
            pthread_mutex_unlock(&w->mu);
            pt_error err = {0};
            int rc = run_once(w, &err);
            pthread_mutex_lock(&w->mu);
            if (rc < 0) {
                w->running = 0;
                w->has_stop = 0; /* the failure is reported instead */
                snprintf(w->state, sizeof w->state, "failed");
                int aborted = w->quit;
                pthread_mutex_unlock(&w->mu);
                if (!aborted)
                    notify_simple(w, PT_WNOTE_FAILED, 0, done, rc,
                                  err.msg[0] ? err.msg : pt_strerror(rc));
                pthread_mutex_lock(&w->mu);
            }
            continue;
        }
        if (w->running && w->hold && done >= w->hold_at)
            snprintf(w->state, sizeof w->state, "holding");
        if (folds_pending(w)) {
            /* nothing to run now: what was folded goes out before waiting */
            pthread_mutex_unlock(&w->mu);
            flush_metrics(w);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    flush_metrics(w);
    teardown(w);
    if (w->pub)
        zmq_close(w->pub);
    if (w->notify)
        zmq_close(w->notify);
    w->pub = w->notify = NULL;
    pthread_mutex_lock(&w->mu);
    w->exited = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
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
    if (pthread_create(&w->th, NULL, thread_main, w) != 0) {
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
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * NS_PER_MS;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
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
