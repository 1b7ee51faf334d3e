/* The stage executor: follows the indices of the dry run (exec_plan.c) through
 * one worker's ops; weight versions and asynchronous all-reduces are the only
 * state it tracks as it goes. See runtime/executor.h. */
#include "protocol/clock.h"
#include "runtime/executor.h"
#include "runtime/exec_host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend_cuda.h"
#include "runtime/comm_nccl.h"
#include "runtime/exec_internal.h"
#include "runtime/exec_nccl.h"

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME  1099511628211ull

/* A weight array: the net's current parameters (index 0, never freed) or an
 * older version in PT_MEM_STASH, left behind by an out-of-place OPT_STEP and
 * held by versions of the store and by micro-batch stashes (refs). */
typedef struct varr {
    float *data;
    int refs;
    int tag; /* the weight version it holds */
} varr;

/* An asynchronous all-reduce, queued until the collective is free. */
typedef struct arq {
    int gbuf;
    int64_t off, count; /* the floats of the gradient buffer it reduces */
    int started, done, rc;
    pt_error err;
} arq;

/* Fault injection for tests (docs/reliability.md): PT_FAULT_NAN=loss:K makes
 * the last stage's loss of iteration K a NaN, PT_FAULT_NAN=grad:K every
 * stage's gradients of the step of iteration K; read when an executor is
 * made. */
typedef enum { FAULT_NONE, FAULT_LOSS, FAULT_GRAD } fault_kind;

struct pt_exec {
    pt_exec_config cfg;
    fault_kind fault;
    int64_t fault_iteration;
    const pt_program *p;
    const pt_worker *wk;
    const pt_op *ops; /* the worker's first op */
    pt_exec_plan plan;
    int n, w, last, rows;
    int *ranks;
    pt_net *net;
    const pt_backend *be;
    pt_arena *arena;
    int64_t pcount, in_elems, out_elems, label_count;
    float **gbufs, **inbufs, **dybufs, **dxbufs; /* one array of pointers */
    float *x_host;
    /* a backend whose memory the host cannot address (CUDA): data feed,
     * ZeroMQ messages, host all-reduces and digests go through host copies */
    int staged;
    float *x_dev;    /* device copy of x_host (stage 0) */
    float *msg_host; /* one message or the all-reduced gradients, host */
    float **g_host;  /* per gradient buffer: host copy for an asynchronous all-reduce */
    int32_t *lab_host;
    const float **slot_y;
    /* weight versions */
    varr *va;
    int va_cap;
    int *va_free, va_nfree;
    int *vmap; /* version -> index into va, or -1 */
    int *live_list, live_n;
    int *stash; /* net slot -> index into va, or -1 */
    int versions_live, versions_peak;
    /* all-reduce */
    pt_comm_group group, agroup;
    arq *fifo;
    int fifo_cap, fifo_head, fifo_n;
    /* bucket all-reduces hooked to the running BWD (schedule.h): the next one to
     * queue, the end of the scan; ALLREDUCE ops before hooked_upto are queued */
    int hook_next, hook_end, hooked_upto;
    int64_t *hook_ns; /* per op: when the hook queued it */
    /* per run */
    double *wloss;
    int64_t *wcount;
    int dirty;
    int ready; /* every buffer allocated */
    /* NCCL (cfg.nccl): where each message is enqueued, nccl_prepare's groups */
    int *nccl_groups;
};

uint64_t pt_exec_digest(const float *x, int64_t count)
{
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = FNV_OFFSET;
    for (int64_t i = 0; i < count * (int64_t)sizeof(float); i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Digest of count floats of device array x of the executor's backend. */
static uint64_t device_digest(pt_exec *ex, const float *x)
{
    if (!ex->staged)
        return pt_exec_digest(x, ex->pcount);
    ex->be->download(ex->be, ex->msg_host, x, (size_t)ex->pcount * sizeof(float));
    return pt_exec_digest(ex->msg_host, ex->pcount);
}

/* ---- weight versions --------------------------------------------------- */

static void note_versions(pt_exec *ex, int delta)
{
    ex->versions_live += delta;
    if (ex->versions_live > ex->versions_peak)
        ex->versions_peak = ex->versions_live;
}

static void va_unref(pt_exec *ex, int k)
{
    if (k <= 0 || --ex->va[k].refs > 0)
        return;
    pt_net_version_free(ex->net, &ex->va[k].data);
    ex->va_free[ex->va_nfree++] = k;
    note_versions(ex, -1);
}

static void live_remove(pt_exec *ex, int v)
{
    for (int j = 0; j < ex->live_n; j++)
        if (ex->live_list[j] == v) {
            ex->live_list[j] = ex->live_list[--ex->live_n];
            return;
        }
}

/* Drops everything but the current parameters and maps versions
 * 0..initial_versions-1 onto them. */
static void versions_begin(pt_exec *ex)
{
    for (int s = 0; s < ex->plan.needs.max_slots; s++) {
        va_unref(ex, ex->stash[s]); /* none for the live weights (0) */
        ex->stash[s] = -1;
    }
    for (int v = 0; v <= ex->plan.needs.max_version; v++) {
        if (ex->vmap[v] > 0)
            va_unref(ex, ex->vmap[v]);
        ex->vmap[v] = -1;
    }
    int init = ex->p->initial_versions > 0 ? ex->p->initial_versions : 1;
    ex->live_n = 0;
    for (int v = 0; v < init; v++) {
        ex->vmap[v] = 0;
        ex->live_list[ex->live_n++] = v;
    }
    ex->va[0].tag = init - 1;
    ex->versions_live = ex->versions_peak = 1;
}

/* After op i read version v from the store: forget v when nothing reads it
 * any more. */
static void version_read(pt_exec *ex, int i, int v)
{
    int k = ex->vmap[v];
    if (ex->plan.last_read[v] != i || k < 0)
        return;
    ex->vmap[v] = -1;
    if (k == 0)
        live_remove(ex, v);
    else
        va_unref(ex, k);
}

/* The array op i reads (FWD/RECOMPUTE/BWD), through the micro-batch's stash
 * or the store. */
static int weights_for(pt_exec *ex, const pt_op *op, int slot, pt_error *err)
{
    int k = (op->flags & PT_OPF_STASH) && op->kind != PT_OP_FWD ? ex->stash[slot]
                                                                : ex->vmap[op->version];
    if (k < 0)
        return pt_error_set(err, PT_ESTATE, "weight version %d is not held", op->version);
    if (op->kind == PT_OP_FWD && (op->flags & PT_OPF_STASH)) {
        /* PipeDream: the micro-batch holds on to the array its forward read
         * (the live weights or a kept version) until its backward; nothing
         * is copied: an OPT_STEP steps out of place while a stash holds the
         * live weights (opt_step) */
        if (k > 0)
            ex->va[k].refs++;
        ex->stash[slot] = k;
    }
    return k;
}

/* A step's gradients, before the optimizer takes them: their squared norm
 * is finite, or the run stops at this iteration naming it (a NaN or an
 * infinity would be written into every weight and, unchecked, into the
 * next checkpoint). One pass over the gradients, a fifth of the
 * optimizer's own traffic. */
static int grads_finite(pt_exec *ex, const float *grads, int64_t iteration, pt_error *err)
{
    double sq = ex->be->dot(ex->be, ex->pcount, grads, grads);
    if (isfinite(sq))
        return 0;
    return pt_error_set(err, PT_ERANGE,
                        "iteration %lld: this stage's gradients are not finite (squared norm "
                        "%g): training diverged (a smaller optimizer.lr keeps them finite)",
                        (long long)iteration, sq);
}

/* OPT_STEP at local op i. When versions that later ops read, or micro-batch
 * stashes, hold the live weights, the step writes the new weights into an
 * array of their own and the old ones stay where they are, as a kept
 * version (out of place: no copy); else it steps in place. */
/* Round-robin replication (planner/schedule.h): the loss of every
 * micro-batch is scaled for the last stage's step, which covers r_last
 * micro-batches (exec_plan.c's step_samples), so a step of stage i, whose
 * all-reduce summed the gradients of its round's r_i micro-batches, rescales
 * by r_last / r_i: every stage then applies the mean gradient of the round it
 * synchronised, as PipeDream's replicas averaging through
 * DistributedDataParallel do. 1 for every other program. */
static float rr_step_scale(const pt_exec *ex)
{
    const pt_program *p = ex->p;
    if (!p->round_robin)
        return 1.0f;
    int S = p->stage_count;
    int r_last = p->stage_worker[S] - p->stage_worker[S - 1];
    return (float)r_last / (float)ex->wk->replica_count;
}

static int opt_step(pt_exec *ex, int i, const pt_op *op, float *grads, pt_error *err)
{
    float g = rr_step_scale(ex);
    if (g != 1.0f)
        ex->be->scale(ex->be, ex->pcount, g, grads);
    int held = 0;
    for (int j = 0; j < ex->live_n; j++)
        held += ex->plan.last_read[ex->live_list[j]] > i;
    for (int s = 0; s < ex->plan.needs.max_slots; s++)
        held += ex->stash[s] == 0;
    if (held) {
        float *next = ex->va_nfree > 0
                          ? pt_arena_alloc_floats(pt_net_arena(ex->net), PT_MEM_STASH, ex->pcount)
                          : NULL;
        if (!next)
            return pt_error_set(err, PT_ENOMEM, "no memory to keep weight version %d",
                                ex->va[0].tag);
        pt_optim_step_to(ex->cfg.optim, ex->va[0].data, next, grads);
        int k = ex->va_free[--ex->va_nfree];
        ex->va[k] = (varr){pt_net_swap_params(ex->net, next), held, ex->va[0].tag};
        ex->va[0].data = next;
        note_versions(ex, 1);
        for (int j = 0; j < ex->live_n; j++) {
            int v = ex->live_list[j];
            ex->vmap[v] = ex->plan.last_read[v] > i ? k : -1;
        }
        for (int s = 0; s < ex->plan.needs.max_slots; s++)
            if (ex->stash[s] == 0)
                ex->stash[s] = k;
    } else {
        for (int j = 0; j < ex->live_n; j++)
            ex->vmap[ex->live_list[j]] = -1;
        pt_optim_step(ex->cfg.optim, ex->va[0].data, grads);
    }
    ex->be->fill(ex->be, ex->pcount, 0.0f, grads);
    ex->va[0].tag = op->version;
    ex->vmap[op->version] = 0;
    ex->live_list[0] = op->version;
    ex->live_n = 1;
    return 0;
}

/* ---- asynchronous all-reduce ------------------------------------------- */

static int ar_start(pt_exec *ex, arq *q)
{
    q->started = 1;
    float *buf = ex->gbufs[q->gbuf] + q->off;
    if (ex->staged) {
        buf = ex->g_host[q->gbuf] + q->off;
        ex->be->download(ex->be, buf, ex->gbufs[q->gbuf] + q->off,
                         (size_t)q->count * sizeof(float));
    }
    int rc =
        pt_collective_start(ex->cfg.coll, &ex->agroup, buf, (size_t)q->count, PT_COMM_SUM, &q->err);
    if (rc < 0) {
        q->done = 1;
        q->rc = rc;
    }
    return rc;
}

/* A finished all-reduce's sum back into its device buffer (staged backends). */
static void ar_finish(pt_exec *ex, arq *q)
{
    q->done = 1;
    if (ex->staged && q->rc == 0)
        ex->be->upload(ex->be, ex->gbufs[q->gbuf] + q->off, ex->g_host[q->gbuf] + q->off,
                       (size_t)q->count * sizeof(float));
}

/* Collects a finished all-reduce and starts the next queued one. */
static void ar_pump(pt_exec *ex)
{
    for (int j = 0; j < ex->fifo_n; j++) {
        arq *q = &ex->fifo[(ex->fifo_head + j) % ex->fifo_cap];
        if (q->done)
            continue;
        if (q->started) {
            if (!pt_collective_test(ex->cfg.coll))
                return;
            q->rc = pt_collective_wait(ex->cfg.coll, 0, &q->err);
            ar_finish(ex, q);
            continue;
        }
        ar_start(ex, q);
        return;
    }
}

/* Waits for the oldest outstanding all-reduce and removes it. */
static int ar_wait_oldest(pt_exec *ex, pt_error *err)
{
    if (ex->fifo_n <= 0)
        return pt_error_set(err, PT_ESTATE, "no asynchronous all-reduce is outstanding");
    arq *q = &ex->fifo[ex->fifo_head];
    if (!q->started)
        ar_start(ex, q);
    if (!q->done) {
        q->rc = pt_collective_wait(ex->cfg.coll, pt_comm_timeout_ms(ex->cfg.comm), &q->err);
        ar_finish(ex, q);
    }
    int rc = q->rc;
    if (rc < 0 && err)
        *err = q->err;
    ex->fifo_head = (ex->fifo_head + 1) % ex->fifo_cap;
    ex->fifo_n--;
    ar_pump(ex);
    return rc;
}

/* The floats an ALLREDUCE reduces: its bucket's layers, or all parameters. */
static void ar_span(const pt_exec *ex, const pt_op *op, int64_t *off, int64_t *count)
{
    int64_t o0, o1, n1;
    if (op->layer_hi > op->layer_lo && pt_net_layer_range(ex->net, op->layer_lo, &o0, NULL) == 0 &&
        pt_net_layer_range(ex->net, op->layer_hi - 1, &o1, &n1) == 0) {
        *off = o0;
        *count = o1 + n1 - o0;
        return;
    }
    *off = 0;
    *count = ex->pcount;
}

static void ar_enqueue(pt_exec *ex, int i)
{
    arq *q = &ex->fifo[(ex->fifo_head + ex->fifo_n) % ex->fifo_cap];
    *q = (arq){.gbuf = ex->plan.xop[i].gbuf};
    ar_span(ex, &ex->ops[i], &q->off, &q->count);
    ex->fifo_n++;
    ar_pump(ex);
}

static int hookable(const pt_exec *ex, int j)
{
    const pt_op *op = &ex->ops[j];
    return op->kind == PT_OP_ALLREDUCE && (op->flags & PT_OPF_ASYNC) &&
           op->layer_hi > op->layer_lo && !ex->plan.xop[j].trivial;
}

/* The ops from `from` on that a backward ending just before it may start from
 * inside (only SEND_GRAD and ALLREDUCE between): sets hook_next/hook_end to
 * them for bwd_hook; 1 when one of them is a hookable bucket all-reduce. */
static int hook_span(pt_exec *ex, int from)
{
    int j = from, any = 0;
    for (; j < ex->n && (ex->ops[j].kind == PT_OP_SEND_GRAD || ex->ops[j].kind == PT_OP_ALLREDUCE);
         j++)
        any |= hookable(ex, j);
    ex->hook_next = from;
    ex->hook_end = j;
    return any;
}

/* Called by the backward after each layer: queues every hooked bucket whose
 * layers are all done (the backward has reached its first layer). */
static void bwd_hook(void *user, int layer)
{
    pt_exec *ex = user;
    while (ex->hook_next < ex->hook_end) {
        int j = ex->hook_next;
        if (hookable(ex, j)) {
            if (layer > ex->ops[j].layer_lo)
                break;
            ar_enqueue(ex, j);
            ex->hook_ns[j] = pt_clock_ns();
            ex->hooked_upto = j + 1;
        }
        ex->hook_next++;
    }
    if (ex->fifo_n)
        ar_pump(ex);
}

/* ---- ops --------------------------------------------------------------- */

static uint64_t tag_of(pt_exec *ex, pt_comm_kind kind, const pt_op *op, int64_t base)
{
    int64_t gmb = base * ex->p->mb_per_window + op->mb;
    return pt_comm_tag(kind, (uint32_t)gmb,
                       pt_exec_host_tag_part(ex->p, ex->w, op->peer, op->row_lo));
}

static int op_fwd(pt_exec *ex, int i, const pt_op *op, const pt_xop *x, int64_t base,
                  pt_exec_event *ev, pt_error *err)
{
    const float *in = ex->wk->stage > 0 ? ex->inbufs[x->buf] : ex->x_dev;
    int32_t *labels = ex->last ? ex->lab_host : NULL;
    int rc;
    if (ex->wk->stage == 0 || labels) {
        int64_t it = base + op->mb / ex->p->mb_per_window;
        rc = ex->cfg.feed.load(ex->cfg.feed.ctx, it, op->mb % ex->p->mb_per_window, op->row_lo,
                               op->row_hi, ex->wk->stage == 0 ? ex->x_host : NULL, labels, err);
        if (rc < 0)
            return rc;
        if (ex->staged && ex->wk->stage == 0)
            ex->be->upload(ex->be, ex->x_dev, ex->x_host,
                           (size_t)((int64_t)(op->row_hi - op->row_lo) * ex->in_elems) *
                               sizeof(float));
    }
    int k = weights_for(ex, op, x->slot, err);
    if (k < 0)
        return k;
    double scale = 0;
    if (ex->last) {
        scale = pt_net_loss_scale_for(ex->net, x->step_samples);
        pt_net_set_loss_scale(ex->net, scale);
    }
    double loss = 0;
    rc = pt_net_forward(ex->net, x->slot, ex->va[k].data, in, ex->rows, labels,
                        &ex->slot_y[x->slot], &loss);
    if (rc < 0)
        return pt_error_set(err, rc, "forward failed (%s)", pt_strerror(rc));
    version_read(ex, i, op->version);
    ev->used_version = ex->va[k].tag;
    if (ex->cfg.digest)
        ev->weights_digest = device_digest(ex, ex->va[k].data);
    int64_t iteration = base + op->mb / ex->p->mb_per_window;
    if (ex->last && ex->fault == FAULT_LOSS && iteration == ex->fault_iteration)
        loss = NAN;
    if (ex->last && !isfinite(loss))
        return pt_error_set(err, PT_ERANGE,
                            "iteration %lld: the loss is %g, not a finite number: training "
                            "diverged (a smaller optimizer.lr keeps it finite)",
                            (long long)iteration, loss);
    if (ex->last) {
        ev->loss_sum = scale > 0 ? loss / scale : 0;
        ev->loss_count = (int64_t)ex->rows * ex->label_count;
        int wdw = op->mb / ex->p->mb_per_window;
        ex->wloss[wdw] += ev->loss_sum;
        ex->wcount[wdw] += ev->loss_count;
    }
    return 0;
}

static int op_bwd(pt_exec *ex, int i, const pt_op *op, const pt_xop *x, pt_exec_event *ev,
                  pt_error *err)
{
    int k = weights_for(ex, op, x->slot, err);
    if (k < 0)
        return k;
    ev->used_version = ex->va[k].tag;
    if (ex->cfg.digest)
        ev->weights_digest = device_digest(ex, ex->va[k].data);
    int rc;
    if (op->kind == PT_OP_RECOMPUTE) {
        rc = pt_net_recompute(ex->net, x->slot, ex->va[k].data);
    } else if (op->kind == PT_OP_BWD_INPUT) {
        /* the slot and its stash stay for the BWD_WEIGHT */
        rc = pt_net_backward_input(ex->net, x->slot, ex->va[k].data,
                                   ex->last ? NULL : ex->dybufs[x->buf],
                                   ex->wk->stage > 0 ? ex->dxbufs[x->buf2] : NULL);
    } else {
        /* the asynchronous bucket all-reduces that follow with only SEND_GRAD and
         * ALLREDUCE between start from inside the backward, as their layers finish */
        int any = hook_span(ex, i + 1);
        if (op->kind == PT_OP_BWD_WEIGHT)
            rc = pt_net_backward_weight_hooked(ex->net, x->slot, ex->va[k].data, ex->gbufs[x->gbuf],
                                               any ? bwd_hook : NULL, ex);
        else
            rc = pt_net_backward_hooked(ex->net, x->slot, ex->va[k].data, ex->gbufs[x->gbuf],
                                        ex->last ? NULL : ex->dybufs[x->buf],
                                        ex->wk->stage > 0 ? ex->dxbufs[x->buf2] : NULL,
                                        any ? bwd_hook : NULL, ex);
        ex->hook_next = ex->hook_end = 0;
        ex->slot_y[x->slot] = NULL;
        if (op->flags & PT_OPF_STASH) {
            va_unref(ex, ex->stash[x->slot]);
            ex->stash[x->slot] = -1;
        }
    }
    if (rc < 0)
        return pt_error_set(err, rc, "%s failed (%s)", pt_op_name(op->kind), pt_strerror(rc));
    if (!(op->flags & PT_OPF_STASH))
        version_read(ex, i, op->version);
    return 0;
}

/* A message between stages over ZeroMQ: straight from/into the device buffer
 * when the host can address it, else through msg_host (download before a
 * send, upload after a receive). NCCL messages go through nccl_messages. */
static int exchange(pt_exec *ex, int send, int dst, uint64_t tag, float *buf, size_t count,
                    pt_error *err)
{
    if (!ex->staged)
        return send ? pt_comm_send(ex->cfg.comm, dst, tag, buf, count, err)
                    : pt_comm_recv(ex->cfg.comm, dst, tag, buf, count, err);
    size_t bytes = count * sizeof(float);
    if (send) {
        ex->be->download(ex->be, ex->msg_host, buf, bytes);
        return pt_comm_send(ex->cfg.comm, dst, tag, ex->msg_host, count, err);
    }
    int rc = pt_comm_recv(ex->cfg.comm, dst, tag, ex->msg_host, count, err);
    if (rc == 0)
        ex->be->upload(ex->be, buf, ex->msg_host, bytes);
    return rc;
}

/* The device floats of message op `op` (SEND/RECV): its rows of the buffer
 * it reads or fills; *count floats. */
static float *message_buf(pt_exec *ex, const pt_op *op, const pt_xop *x, size_t *count)
{
    int lo = op->row_lo - ex->wk->row_lo, n = op->row_hi - op->row_lo;
    float *buf;
    int64_t elems;
    switch (op->kind) {
    case PT_OP_SEND_ACT:
        elems = ex->out_elems;
        buf = (float *)ex->slot_y[x->slot];
        break;
    case PT_OP_RECV_ACT:
        elems = ex->in_elems;
        buf = ex->inbufs[x->buf];
        break;
    case PT_OP_SEND_GRAD:
        elems = ex->in_elems;
        buf = ex->dxbufs[x->buf];
        break;
    default: /* PT_OP_RECV_GRAD */
        elems = ex->out_elems;
        buf = ex->dybufs[x->buf];
        break;
    }
    *count = (size_t)((int64_t)n * elems);
    return buf + (int64_t)lo * elems;
}

static int is_send(pt_op_kind kind)
{
    return kind == PT_OP_SEND_ACT || kind == PT_OP_SEND_GRAD;
}

static int is_message(pt_op_kind kind)
{
    return is_send(kind) || kind == PT_OP_RECV_ACT || kind == PT_OP_RECV_GRAD;
}

static int op_exchange(pt_exec *ex, const pt_op *op, const pt_xop *x, int64_t base,
                       pt_exec_event *ev, pt_error *err)
{
    size_t count;
    float *buf = message_buf(ex, op, x, &count);
    pt_comm_kind kind =
        op->kind == PT_OP_SEND_ACT || op->kind == PT_OP_RECV_ACT ? PT_COMM_ACT : PT_COMM_GRAD;
    ev->bytes = (int64_t)(count * sizeof(float));
    return exchange(ex, is_send(op->kind), ex->ranks[op->peer], tag_of(ex, kind, op, base), buf,
                    count, err);
}

/* ---- NCCL (runtime/comm_nccl.h) ---------------------------------------- */

/* How long an NCCL wait may take: the communicator's bound when there is one. */
static int nccl_timeout_ms(const pt_exec *ex)
{
    return ex->cfg.comm ? pt_comm_timeout_ms(ex->cfg.comm) : PT_NCCL_WAIT_MS;
}

/* With NCCL, a run of messages of the program: the SEND/RECV ops that
 * follow one another from op i, which nccl_messages handles in one go. 0
 * when op i is not a message or the messages go over ZeroMQ.
 *
 * Why. An NCCL send or receive holds its stream until the peer's matching
 * call runs, unlike ZeroMQ's buffered sends, which the schedules' orders were
 * made for: one by one, 1f1b-flush on 2 stages deadlocks (stage 0 runs
 * SEND_ACT(1) then RECV_GRAD(0), stage 1 SEND_GRAD(0) then RECV_ACT(1), each
 * send waiting for a receive queued behind the other's). So the messages of
 * a run are enqueued as one group, and a send that would still block is
 * deferred to a later group (runtime/exec_nccl.h; tests/runtime/
 * exec_nccl_test.c replays every synchronous kind). */
static int nccl_run(const pt_exec *ex, int i)
{
    if (!ex->cfg.nccl || !is_message(ex->ops[i].kind))
        return 0;
    int g = 1;
    while (i + g < ex->n && g < PT_EXEC_WEIGHT_RUN_MAX && is_message(ex->ops[i + g].kind))
        g++;
    return g;
}

/* The run of messages i .. i+g-1 (nccl_run): the NCCL group the plan puts
 * at op i (the run's messages not deferred, and messages of earlier runs
 * deferred to it), then a wait that polls and aborts a communicator whose
 * peer fails or never answers (pt_nccl_wait): no later op is queued behind
 * a message that cannot complete. A run's messages are enqueued at the
 * start of the run, so a deferred message's event has its own run's time. */
static int nccl_messages(pt_exec *ex, int i, int g, pt_exec_event *ev, pt_error *err)
{
    for (int k = 0; k < g; k++) {
        size_t count;
        message_buf(ex, &ex->ops[i + k], &ex->plan.xop[i + k], &count);
        ev[k].bytes = (int64_t)(count * sizeof(float));
    }
    const int *member = ex->nccl_groups + ex->n + 1;
    int first = ex->nccl_groups[i], n = ex->nccl_groups[i + 1] - first;
    if (n == 0)
        return 0; /* every message of the run was deferred to a later group */
    if (n > PT_NCCL_GROUP_MAX)
        return pt_error_set(err, PT_EINVAL, "executor: a group of %d NCCL messages, at most %d", n,
                            PT_NCCL_GROUP_MAX);
    pt_nccl_p2p ops[PT_NCCL_GROUP_MAX];
    for (int k = 0; k < n; k++) {
        const pt_op *op = &ex->ops[member[first + k]];
        ops[k].send = is_send(op->kind);
        ops[k].peer = ex->ranks[op->peer];
        ops[k].buf = message_buf(ex, op, &ex->plan.xop[member[first + k]], &ops[k].count);
    }
    int rc = pt_nccl_p2p_group(ex->cfg.nccl, ops, n, err);
    return rc < 0 ? rc : pt_nccl_wait(ex->cfg.nccl, nccl_timeout_ms(ex), err);
}

/* The synchronous all-reduce of a gradient buffer on the replicas' NCCL
 * communicator, waited for as nccl_messages does. */
static int nccl_allreduce(pt_exec *ex, float *grads, int64_t count, pt_error *err)
{
    int rc = pt_nccl_allreduce(ex->cfg.nccl_replicas, grads, (size_t)count, err);
    return rc < 0 ? rc : pt_nccl_wait(ex->cfg.nccl_replicas, nccl_timeout_ms(ex), err);
}

/* The synchronous all-reduce of a gradient buffer, through msg_host when the
 * host cannot address it. */
static int allreduce(pt_exec *ex, float *grads, int64_t count, pt_error *err)
{
    if (ex->cfg.nccl_replicas)
        return nccl_allreduce(ex, grads, count, err);
    if (!ex->staged)
        return pt_comm_allreduce(ex->cfg.comm, &ex->group, grads, (size_t)count, PT_COMM_SUM, err);
    size_t bytes = (size_t)count * sizeof(float);
    ex->be->download(ex->be, ex->msg_host, grads, bytes);
    int rc =
        pt_comm_allreduce(ex->cfg.comm, &ex->group, ex->msg_host, (size_t)count, PT_COMM_SUM, err);
    if (rc == 0)
        ex->be->upload(ex->be, grads, ex->msg_host, bytes);
    return rc;
}

/* Gathered weight gradients: the run of BWD_WEIGHT ops that starts at op i
 * (consecutive in the program, same gradient array, no stash), which
 * op_bwd_weights runs as one pass. 1 when op i starts none, under a host
 * (interleaved chunks take turns op by op) or when the net recomputes (it
 * keeps one micro-batch's B state). */
static int weight_run(const pt_exec *ex, int i)
{
    const pt_op *op = &ex->ops[i];
    if (op->kind != PT_OP_BWD_WEIGHT || (op->flags & PT_OPF_STASH) || ex->cfg.host ||
        ex->wk->recompute)
        return 1;
    int g = 1;
    while (i + g < ex->n && g < PT_EXEC_WEIGHT_RUN_MAX) {
        const pt_op *o = &ex->ops[i + g];
        if (o->kind != PT_OP_BWD_WEIGHT || o->flags != op->flags ||
            ex->plan.xop[i + g].gbuf != ex->plan.xop[i].gbuf)
            break;
        g++;
    }
    return g;
}

/* Ops i .. i+g-1, a weight_run, in one pass: every layer's gradient takes
 * the W of all g micro-batches while it is in cache (pt_net_backward_weight_many;
 * the same sums as one op at a time). ev[k] gets op i+k's version. */
static int op_bwd_weights(pt_exec *ex, int i, int g, pt_exec_event *ev, pt_error *err)
{
    int slots[PT_EXEC_WEIGHT_RUN_MAX];
    for (int k = 0; k < g; k++) {
        const pt_op *op = &ex->ops[i + k];
        int a = weights_for(ex, op, ex->plan.xop[i + k].slot, err);
        if (a < 0)
            return a;
        ev[k].used_version = ex->va[a].tag;
        if (ex->cfg.digest)
            ev[k].weights_digest = device_digest(ex, ex->va[a].data);
        slots[k] = ex->plan.xop[i + k].slot;
    }
    int any = hook_span(ex, i + g);
    int rc = pt_net_backward_weight_many(ex->net, slots, g, ex->gbufs[ex->plan.xop[i].gbuf],
                                         any ? bwd_hook : NULL, ex);
    ex->hook_next = ex->hook_end = 0;
    if (rc < 0)
        return pt_error_set(err, rc, "%s of %d micro-batches failed (%s)",
                            pt_op_name(PT_OP_BWD_WEIGHT), g, pt_strerror(rc));
    for (int k = 0; k < g; k++) {
        ex->slot_y[slots[k]] = NULL;
        version_read(ex, i + k, ex->ops[i + k].version);
    }
    return 0;
}

static int exec_op(pt_exec *ex, int i, int64_t base, pt_exec_event *ev, pt_error *err)
{
    const pt_op *op = &ex->ops[i];
    const pt_xop *x = &ex->plan.xop[i];
    int rc = 0;
    switch (op->kind) {
    case PT_OP_FWD:
        return op_fwd(ex, i, op, x, base, ev, err);
    case PT_OP_RECOMPUTE:
    case PT_OP_BWD:
    case PT_OP_BWD_INPUT:
    case PT_OP_BWD_WEIGHT:
        return op_bwd(ex, i, op, x, ev, err);
    case PT_OP_SEND_ACT:
    case PT_OP_RECV_ACT:
    case PT_OP_SEND_GRAD:
    case PT_OP_RECV_GRAD:
        return op_exchange(ex, op, x, base, ev, err);
    case PT_OP_ALLREDUCE: {
        int64_t off, count;
        ar_span(ex, op, &off, &count);
        ev->bytes = count * (int64_t)sizeof(float);
        if (x->trivial)
            return 0;
        if (op->flags & PT_OPF_ASYNC) {
            if (i >= ex->hooked_upto) { /* else its BWD queued it already */
                ev->queued_ns = ev->start_ns;
                ar_enqueue(ex, i);
            } else {
                ev->queued_ns = ex->hook_ns[i];
            }
            return 0;
        }
        return allreduce(ex, ex->gbufs[x->gbuf] + off, count, err);
    }
    case PT_OP_AR_WAIT:
        return x->trivial ? 0 : ar_wait_oldest(ex, err);
    case PT_OP_OPT_STEP: {
        int64_t it = base + op->mb / ex->p->mb_per_window;
        ev->bytes = ex->pcount * (int64_t)sizeof(float);
        if (ex->fault == FAULT_GRAD && it == ex->fault_iteration)
            ex->be->fill(ex->be, 1, NAN, ex->gbufs[x->gbuf]);
        if ((rc = grads_finite(ex, ex->gbufs[x->gbuf], it, err)) < 0 ||
            (rc = opt_step(ex, i, op, ex->gbufs[x->gbuf], err)) < 0)
            return rc;
        ev->used_version = op->version;
        if (ex->cfg.digest)
            ev->weights_digest = device_digest(ex, ex->va[0].data);
        return 0;
    }
    }
    return pt_error_set(err, PT_EINVAL, "unknown op kind %d", op->kind);
}

/* Prefixes err's message with the worker and the op. */
static int op_error(pt_exec *ex, int i, int rc, pt_error *err)
{
    if (!err)
        return rc;
    char opbuf[160], msg[PT_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", err->code ? err->msg : pt_strerror(rc));
    pt_sched_op_str(ex->p, ex->wk->op_begin + i, opbuf, sizeof opbuf);
    return pt_error_set(err, rc, "executor: worker %d (stage %d replica %d) op %d (%s): %s", ex->w,
                        ex->wk->stage, ex->wk->replica, ex->wk->op_begin + i, opbuf, msg);
}

/* Several chunks per device (runtime/exec_host.h): wait for op i's turn. */
static int host_turn(pt_exec *ex, int i, pt_error *err)
{
    if (!ex->cfg.host)
        return 0;
    return pt_exec_host_take(ex->cfg.host, ex->wk->op_begin + i, ex->cfg.stop, err);
}

/* Hands the host's turn on, or stops its other chunks when the op failed. */
static void host_done(pt_exec *ex, int rc)
{
    if (!ex->cfg.host)
        return;
    if (rc < 0)
        pt_exec_host_abort(ex->cfg.host);
    else
        pt_exec_host_give(ex->cfg.host);
}

/* Fills op i's fields of ev and hands it to the on_op callback. */
static void emit_event(pt_exec *ex, int i, int64_t iteration_base, pt_exec_event *ev)
{
    const pt_op *op = &ex->ops[i];
    ev->worker = ex->w;
    ev->stage = ex->wk->stage;
    ev->replica = ex->wk->replica;
    ev->op_index = ex->wk->op_begin + i;
    ev->kind = op->kind;
    ev->flags = op->flags;
    ev->mb = op->mb;
    ev->mb_end = op->mb_end;
    ev->iteration = iteration_base + op->mb / ex->p->mb_per_window;
    ev->version = op->version;
    ev->peer = op->peer;
    ev->row_lo = op->row_lo;
    ev->row_hi = op->row_hi;
    ev->versions_live = ex->versions_live;
    ex->cfg.on_op(ex->cfg.user, ev);
}

int pt_exec_run(pt_exec *ex, int64_t iteration_base, pt_exec_result *res, pt_error *err)
{
    if (res)
        memset(res, 0, sizeof *res);
    if (!ex)
        return pt_error_set(err, PT_EINVAL, "executor: NULL argument");
    if (ex->dirty)
        return pt_error_set(err, PT_ESTATE,
                            "executor: worker %d: a failed run was not reset (pt_exec_reset)",
                            ex->w);
    ex->dirty = 1;
    ex->hooked_upto = 0;
    if (err)
        err->code = 0;
    versions_begin(ex);
    for (int t = 0; t < ex->p->window_count; t++) {
        ex->wloss[t] = 0;
        ex->wcount[t] = 0;
    }
    int64_t t_run = pt_clock_ns(), busy = 0;
    pt_exec_event evs[PT_EXEC_WEIGHT_RUN_MAX];
    for (int i = 0; i < ex->n;) {
        if (ex->cfg.stop && atomic_load(ex->cfg.stop))
            return op_error(ex, i, pt_error_set(err, PT_ESTATE, "stopped"), err);
        if (ex->fifo_n)
            ar_pump(ex);
        int msgs = nccl_run(ex, i), g = msgs ? msgs : weight_run(ex, i);
        memset(evs, 0, (size_t)g * sizeof evs[0]);
        for (int k = 0; k < g; k++)
            evs[k].used_version = -1;
        int rc = host_turn(ex, i, err);
        if (rc < 0)
            return op_error(ex, i, rc, err);
        int64_t t0 = pt_clock_ns();
        evs[0].start_ns = t0;
        rc = msgs    ? nccl_messages(ex, i, g, evs, err)
             : g > 1 ? op_bwd_weights(ex, i, g, evs, err)
                     : exec_op(ex, i, iteration_base, evs, err);
        int64_t t1 = pt_clock_ns();
        host_done(ex, rc);
        if (rc < 0)
            return op_error(ex, i, rc, err);
        /* a gathered run's time is shared evenly by its ops, one after the other */
        for (int k = 0; k < g; k++) {
            evs[k].start_ns = t0 + (t1 - t0) * k / g;
            evs[k].end_ns = t0 + (t1 - t0) * (k + 1) / g;
        }
        if (pt_op_is_compute(ex->ops[i].kind))
            busy += t1 - t0;
        for (int k = 0; k < g && ex->cfg.on_op; k++)
            emit_event(ex, i + k, iteration_base, &evs[k]);
        i += g;
    }
    /* all-reduces no AR_WAIT waits for (hand-written programs; generated ones drain): finish them
     * so the replicas stay in step, and drop their gradients */
    while (ex->fifo_n > 0) {
        int rc = ar_wait_oldest(ex, err);
        if (rc < 0)
            return pt_error_set(err, rc,
                                "executor: worker %d: all-reduce at the end of the run: %s", ex->w,
                                err ? err->msg : pt_strerror(rc));
    }
    for (int j = 0; j < ex->plan.end_zero_count; j++)
        ex->be->fill(ex->be, ex->pcount, 0.0f, ex->gbufs[ex->plan.end_zero[j]]);
    if (res) {
        res->ops = ex->n;
        res->windows = ex->p->window_count;
        for (int t = 0; t < ex->p->window_count; t++) {
            res->loss_sum += ex->wloss[t];
            res->loss_count += ex->wcount[t];
        }
        res->versions_peak = ex->versions_peak;
        res->busy_ns = busy;
        res->wall_ns = pt_clock_ns() - t_run;
    }
    versions_begin(ex);
    ex->dirty = 0;
    return 0;
}

void pt_exec_reset(pt_exec *ex)
{
    if (!ex)
        return;
    while (ex->fifo_n > 0) {
        arq *q = &ex->fifo[ex->fifo_head];
        if (q->started && !q->done)
            pt_collective_wait(ex->cfg.coll, pt_comm_timeout_ms(ex->cfg.comm), NULL);
        ex->fifo_head = (ex->fifo_head + 1) % ex->fifo_cap;
        ex->fifo_n--;
    }
    for (int s = 0; s < ex->plan.needs.max_slots; s++) {
        pt_net_release(ex->net, s);
        ex->slot_y[s] = NULL;
    }
    for (int g = 0; g < ex->plan.needs.grad_buffers; g++)
        ex->be->fill(ex->be, ex->pcount, 0.0f, ex->gbufs[g]);
    versions_begin(ex);
    ex->dirty = 0;
}

void pt_exec_window_loss(const pt_exec *ex, int w, double *sum, int64_t *count)
{
    int ok = ex && w >= 0 && w < ex->p->window_count;
    if (sum)
        *sum = ok ? ex->wloss[w] : 0;
    if (count)
        *count = ok ? ex->wcount[w] : 0;
}

const pt_exec_needs *pt_exec_get_needs(const pt_exec *ex)
{
    return ex ? &ex->plan.needs : NULL;
}

float *pt_exec_grad_buffer(pt_exec *ex, int i)
{
    return ex && i >= 0 && i < ex->plan.needs.grad_buffers ? ex->gbufs[i] : NULL;
}

/* ---- set-up ------------------------------------------------------------ */

static int check_config(pt_exec *ex, const pt_exec_config *cfg, pt_error *err)
{
    const pt_exec_needs *ne = &ex->plan.needs;
    pt_net *net = cfg->net;
    int w = cfg->worker;
    if (pt_net_first(net) != ne->first || pt_net_last(net) != ne->last)
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: the net has layers [%d,%d), the stage [%d,%d)", w,
                            pt_net_first(net), pt_net_last(net), ne->first, ne->last);
    if (pt_net_max_batch(net) < ne->max_batch || pt_net_max_slots(net) < ne->max_slots)
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: the net holds %d slots of %d samples; the "
                            "program needs %d slots of %d",
                            w, pt_net_max_slots(net), pt_net_max_batch(net), ne->max_slots,
                            ne->max_batch);
    if (!cfg->optim || pt_optim_count(cfg->optim) != pt_net_param_count(net))
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: an optimizer over the net's %lld parameters is "
                            "required",
                            w, (long long)pt_net_param_count(net));
    if (ne->needs_comm && !cfg->comm)
        return pt_error_set(err, PT_EINVAL, "executor: worker %d: a communicator is required", w);
    if (cfg->comm && pt_comm_rank(cfg->comm) != ex->ranks[w])
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: the communicator has rank %d, not %d", w,
                            pt_comm_rank(cfg->comm), ex->ranks[w]);
    if (ne->needs_collective && (!cfg->coll || !cfg->comm))
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: asynchronous all-reduces need a collective and a "
                            "communicator",
                            w);
    if ((ne->needs_input || ne->needs_labels) && !cfg->feed.load)
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d (stage %d): a data feed is required", w,
                            ne->stage);
    if (ne->needs_labels != pt_net_has_loss(net))
        return pt_error_set(
            err, PT_EINVAL, "executor: worker %d: the %s stage's net %s a loss layer", w,
            ne->needs_labels ? "last" : "inner", pt_net_has_loss(net) ? "has" : "lacks");
    for (int r = 0; r < ex->p->worker_count; r++)
        if (ex->ranks[r] < 0 || (cfg->comm && ex->ranks[r] >= pt_comm_size(cfg->comm)))
            return pt_error_set(err, PT_EINVAL, "executor: worker %d: rank of worker %d is %d", w,
                                r, ex->ranks[r]);
    return 0;
}

/* NCCL communicators of cfg checked against the executor (a CUDA backend,
 * the worker's own rank, no host: chunks sharing a device share one stream
 * and exchange over ZeroMQ), and the worker's NCCL groups (runtime/exec_nccl.h)
 * into *groups: [n+1] offsets, group of op i = members [groups[i],
 * groups[i+1]) of the relative op indices that follow; NULL without nccl. */
static int nccl_prepare(pt_exec *ex, const pt_exec_config *cfg, int **groups, pt_error *err)
{
    *groups = NULL;
    int w = ex->w;
    if (!cfg->nccl && !cfg->nccl_replicas)
        return 0;
    if (!pt_backend_is_cuda(ex->be))
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: NCCL communicators need the CUDA backend, not %s",
                            w, ex->be->name);
    if (cfg->host)
        return pt_error_set(err, PT_EINVAL,
                            "executor: worker %d: chunks that share a device take turns on one "
                            "stream; they exchange over ZeroMQ, not NCCL",
                            w);
    if (!cfg->nccl)
        return 0;
    if (pt_nccl_rank(cfg->nccl) != ex->ranks[w])
        return pt_error_set(err, PT_EINVAL, "executor: worker %d: the NCCL rank is %d, not %d", w,
                            pt_nccl_rank(cfg->nccl), ex->ranks[w]);
    int *at = malloc(((size_t)ex->p->op_count + 1) * sizeof *at);
    int *g = malloc(((size_t)2 * ex->n + 2) * sizeof *g);
    int *fill = malloc(((size_t)ex->n + 1) * sizeof *fill); /* next free slot per group */
    int rc = at && g && fill ? pt_exec_nccl_plan(ex->p, at, err) : PT_ENOMEM;
    if (rc == 0) { /* counting sort of the worker's messages by where they are enqueued */
        const int *mine = at + ex->wk->op_begin, base = ex->wk->op_begin;
        memset(g, 0, ((size_t)ex->n + 1) * sizeof *g);
        for (int i = 0; i < ex->n; i++)
            if (mine[i] >= 0)
                g[mine[i] - base + 1]++;
        for (int i = 0; i < ex->n; i++)
            g[i + 1] += g[i];
        memcpy(fill, g, (size_t)ex->n * sizeof *fill);
        for (int i = 0; i < ex->n; i++)
            if (mine[i] >= 0)
                g[ex->n + 1 + fill[mine[i] - base]++] = i;
    } else if (rc == PT_ENOMEM) {
        pt_error_set(err, rc, "executor: worker %d: out of memory", w);
    } else {
        char msg[PT_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        pt_error_set(err, rc, "executor: worker %d: %s", w, msg);
    }
    free(at);
    free(fill);
    if (rc < 0)
        free(g);
    else
        *groups = g;
    return rc;
}

int pt_exec_set_nccl(pt_exec *ex, struct pt_nccl *nccl, struct pt_nccl *nccl_replicas,
                     pt_error *err)
{
    if (!ex)
        return pt_error_set(err, PT_EINVAL, "executor: NULL argument");
    pt_exec_config cfg = ex->cfg;
    cfg.nccl = nccl;
    cfg.nccl_replicas = nccl_replicas;
    int *groups = NULL;
    int rc = nccl_prepare(ex, &cfg, &groups, err);
    if (rc < 0)
        return rc;
    free(ex->nccl_groups);
    ex->nccl_groups = groups;
    ex->cfg.nccl = nccl;
    ex->cfg.nccl_replicas = nccl_replicas;
    return 0;
}

/* Host copies for a backend the host cannot address (see struct pt_exec). */
static int alloc_staging(pt_exec *ex, pt_error *err)
{
    const pt_exec_needs *ne = &ex->plan.needs;
    ex->x_dev = ex->staged ? NULL : ex->x_host;
    if (!ex->staged)
        return 0;
    int64_t msg = ex->pcount, io = (int64_t)ex->rows * ex->in_elems;
    if ((int64_t)ex->rows * ex->out_elems > msg)
        msg = (int64_t)ex->rows * ex->out_elems;
    if (io > msg)
        msg = io;
    ex->msg_host = malloc((size_t)msg * sizeof(float) + 1);
    ex->g_host = calloc((size_t)ne->grad_buffers + 1, sizeof(float *));
    if (!ex->msg_host || !ex->g_host)
        return pt_error_set(err, PT_ENOMEM, "executor: out of memory");
    if (ne->needs_collective)
        for (int g = 0; g < ne->grad_buffers; g++)
            if (!(ex->g_host[g] = malloc((size_t)ex->pcount * sizeof(float) + 1)))
                return pt_error_set(err, PT_ENOMEM, "executor: out of memory");
    if (ne->needs_input &&
        !(ex->x_dev = pt_arena_alloc_floats(ex->arena, PT_MEM_COMM, io > 0 ? io : 1)))
        return pt_error_set(err, PT_ENOMEM, "executor: no memory for the input buffer");
    return 0;
}

static int alloc_buffers(pt_exec *ex, pt_error *err)
{
    int rc;
    const pt_exec_needs *ne = &ex->plan.needs;
    int total = ne->grad_buffers + ne->in_buffers + ne->dy_buffers + ne->dx_buffers;
    int slots = ne->max_slots > 0 ? ne->max_slots : 1;
    int nv = ne->max_version + 1;
    ex->gbufs = calloc((size_t)total + 1, sizeof(float *));
    ex->slot_y = calloc((size_t)slots, sizeof(float *));
    ex->stash = malloc((size_t)slots * sizeof(int));
    ex->va_cap = slots + nv + 1;
    ex->va = calloc((size_t)ex->va_cap, sizeof(varr));
    ex->va_free = malloc((size_t)ex->va_cap * sizeof(int));
    ex->vmap = malloc((size_t)nv * sizeof(int));
    ex->live_list = malloc((size_t)(nv + 1) * sizeof(int));
    ex->fifo_cap = ex->plan.fifo_peak > 0 ? ex->plan.fifo_peak : 1;
    ex->fifo = calloc((size_t)ex->fifo_cap, sizeof(arq));
    ex->wloss = calloc((size_t)ex->p->window_count, sizeof(double));
    ex->wcount = calloc((size_t)ex->p->window_count, sizeof(int64_t));
    ex->hook_ns = calloc((size_t)ex->n + 1, sizeof(int64_t));
    ex->x_host = malloc((size_t)(ex->rows * ex->in_elems) * sizeof(float) + 1);
    ex->lab_host = malloc((size_t)(ex->rows * (ex->label_count + 1)) * sizeof(int32_t));
    if (!ex->gbufs || !ex->slot_y || !ex->stash || !ex->va || !ex->va_free || !ex->vmap ||
        !ex->live_list || !ex->fifo || !ex->wloss || !ex->wcount || !ex->x_host || !ex->lab_host ||
        !ex->hook_ns)
        return pt_error_set(err, PT_ENOMEM, "executor: out of memory");
    if ((rc = alloc_staging(ex, err)) < 0)
        return rc;
    for (int s = 0; s < slots; s++)
        ex->stash[s] = -1;
    for (int v = 0; v < nv; v++)
        ex->vmap[v] = -1;
    ex->va[0] = (varr){pt_net_params(ex->net), 0, 0};
    for (int k = ex->va_cap - 1; k >= 1; k--)
        ex->va_free[ex->va_nfree++] = k;
    ex->inbufs = ex->gbufs + ne->grad_buffers;
    ex->dybufs = ex->inbufs + ne->in_buffers;
    ex->dxbufs = ex->dybufs + ne->dy_buffers;
    ex->gbufs[0] = pt_net_grads(ex->net);
    for (int g = 1; g < ne->grad_buffers; g++) {
        if (!(ex->gbufs[g] = pt_arena_alloc_floats(ex->arena, PT_MEM_GRADS, ex->pcount)))
            return pt_error_set(err, PT_ENOMEM, "executor: no memory for gradient buffer %d", g);
        ex->be->fill(ex->be, ex->pcount, 0.0f, ex->gbufs[g]);
    }
    struct {
        float **bufs;
        int count;
        int64_t elems;
    } sets[3] = {{ex->inbufs, ne->in_buffers, ex->in_elems},
                 {ex->dybufs, ne->dy_buffers, ex->out_elems},
                 {ex->dxbufs, ne->dx_buffers, ex->in_elems}};
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < sets[s].count; j++)
            if (!(sets[s].bufs[j] = pt_arena_alloc_floats(ex->arena, PT_MEM_COMM,
                                                          (int64_t)ex->rows * sets[s].elems)))
                return pt_error_set(err, PT_ENOMEM, "executor: no memory for message buffers");
    return 0;
}

static void read_fault(pt_exec *ex)
{
    const char *e = getenv("PT_FAULT_NAN");
    long long k;
    char kind[8];
    if (!e || sscanf(e, "%7[a-z]:%lld", kind, &k) != 2 || k < 0)
        return;
    ex->fault = !strcmp(kind, "loss")   ? FAULT_LOSS
                : !strcmp(kind, "grad") ? FAULT_GRAD
                                        : FAULT_NONE;
    ex->fault_iteration = k;
}

int pt_exec_create(const pt_exec_config *cfg, pt_exec **out, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!cfg || !out || !cfg->prog || !cfg->net)
        return pt_error_set(err, PT_EINVAL, "executor: program, net and output are required");
    pt_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return pt_error_set(err, PT_ENOMEM, "executor: out of memory");
    int rc = pt_exec_plan_build(cfg->prog, cfg->worker, &ex->plan, err);
    if (rc < 0) {
        free(ex);
        return rc;
    }
    ex->cfg = *cfg;
    read_fault(ex);
    ex->p = cfg->prog;
    ex->w = cfg->worker;
    ex->wk = &ex->p->workers[ex->w];
    ex->ops = ex->p->ops + ex->wk->op_begin;
    ex->n = ex->plan.op_count;
    ex->last = ex->wk->stage == ex->p->stage_count - 1;
    ex->rows = ex->plan.needs.rows;
    ex->net = cfg->net;
    ex->be = pt_net_backend(cfg->net);
    ex->staged = ex->be != pt_backend_cpu();
    ex->arena = pt_net_arena(cfg->net);
    ex->pcount = pt_net_param_count(cfg->net);
    ex->in_elems = pt_net_in_elems(cfg->net);
    ex->out_elems = pt_net_out_elems(cfg->net);
    ex->label_count = pt_net_label_count(cfg->net);
    ex->ranks = malloc((size_t)ex->p->worker_count * sizeof(int));
    if (!ex->ranks) {
        rc = pt_error_set(err, PT_ENOMEM, "executor: out of memory");
        goto fail;
    }
    for (int r = 0; r < ex->p->worker_count; r++)
        ex->ranks[r] = cfg->ranks ? cfg->ranks[r] : r;
    if (ex->p->host_count > 0 && ex->p->mb_size >= (1 << PT_EXEC_HOST_ROW_BITS)) {
        rc = pt_error_set(err, PT_EINVAL,
                          "executor: worker %d: micro-batches of %d samples: an interleaved "
                          "program's messages name at most %d rows",
                          ex->w, ex->p->mb_size, (1 << PT_EXEC_HOST_ROW_BITS) - 1);
        goto fail;
    }
    if ((rc = check_config(ex, cfg, err)) < 0 || (rc = alloc_buffers(ex, err)) < 0 ||
        (rc = nccl_prepare(ex, cfg, &ex->nccl_groups, err)) < 0)
        goto fail;
    int s = ex->wk->stage, r0 = ex->p->stage_worker[s], nr = ex->p->stage_worker[s + 1] - r0;
    if (nr > PT_COMM_MAX_GROUP) {
        rc = pt_error_set(err, PT_EINVAL, "executor: stage %d has %d replicas, at most %d", s, nr,
                          PT_COMM_MAX_GROUP);
        goto fail;
    }
    if ((rc = pt_comm_group_init(&ex->group, ex->ranks + r0, nr)) < 0) {
        pt_error_set(err, rc, "executor: worker %d: replicas of stage %d share a rank", ex->w, s);
        goto fail;
    }
    /* chunks of one device may share a rank: each numbers its rings apart */
    ex->group.next_id = (uint32_t)pt_exec_host_chunk(ex->p, ex->w) << PT_EXEC_HOST_AR_CHUNK_SHIFT;
    ex->agroup = ex->group;
    ex->ready = 1;
    versions_begin(ex);
    *out = ex;
    return 0;
fail:
    pt_exec_destroy(&ex);
    return rc;
}

void pt_exec_destroy(pt_exec **ex_p)
{
    if (!ex_p || !*ex_p)
        return;
    pt_exec *ex = *ex_p;
    if (ex->ready)
        pt_exec_reset(ex); /* also frees stashed and kept versions */
    if (ex->gbufs) {
        const pt_exec_needs *ne = &ex->plan.needs;
        int total = ne->grad_buffers + ne->in_buffers + ne->dy_buffers + ne->dx_buffers;
        for (int j = 1; j < total; j++)
            if (ex->gbufs[j])
                pt_arena_free(ex->arena, ex->gbufs[j]);
    }
    free(ex->gbufs);
    free(ex->slot_y);
    free(ex->stash);
    free(ex->va);
    free(ex->va_free);
    free(ex->vmap);
    free(ex->live_list);
    free(ex->fifo);
    free(ex->wloss);
    free(ex->wcount);
    free(ex->hook_ns);
    if (ex->staged && ex->x_dev)
        pt_arena_free(ex->arena, ex->x_dev);
    if (ex->g_host)
        for (int g = 0; g < ex->plan.needs.grad_buffers; g++)
            free(ex->g_host[g]);
    free(ex->g_host);
    free(ex->msg_host);
    free(ex->x_host);
    free(ex->lab_host);
    free(ex->ranks);
    free(ex->nccl_groups);
    pt_exec_plan_free(&ex->plan);
    free(ex);
    *ex_p = NULL;
}
