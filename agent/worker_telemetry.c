/* The worker's telemetry: op events and folded metrics on its PUB socket
 * (docs/protocol.md, "Telemetry thinning"). See agent/worker_internal.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/worker_internal.h"
#include "runtime/backend_cuda.h"
#include "runtime/net.h"

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

void pt_wk_connect_telemetry(pt_agent_worker *w, const char *ep)
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

void pt_wk_on_op(void *user, const pt_exec_event *ev)
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

void pt_wk_publish_events(pt_agent_worker *w)
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
void pt_wk_flush_metrics(pt_agent_worker *w)
{
    for (int c = 0; c < CHUNKS_MAX; c++)
        flush_fold(w, c);
}

/* 1 when some fold holds steps not sent yet. */
int pt_wk_folds_pending(const pt_agent_worker *w)
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
int pt_wk_events_wanted(const pt_agent_worker *w, int64_t start, int64_t done, int64_t after,
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

void pt_wk_fold_metrics(pt_agent_worker *w, int c, const pt_msg_metrics *mt)
{
    fold_metrics(w, c, mt);
    if (pt_msg_now_ns() - w->fold_sent_ns >= FOLD_FLUSH_MS * NS_PER_MS)
        pt_wk_flush_metrics(w);
}

/* One metrics message per window and chunk (each chunk its stage's memory). */
void pt_wk_publish_metrics(pt_agent_worker *w, const pt_exec_result *res, int64_t first_step)
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
    pt_arena_stats(pt_net_arena(pt_stage_net(ch->st)), &ms);
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
        pt_exec_window_loss(pt_stage_exec(ch->st), k, &sum, &count);
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
        pt_wk_flush_metrics(w);
}
