/* The schedule-program validator: structure, matching, dependency order,
 * weight versions, collectives, and deadlock freedom by running the program
 * with zero durations and blocking receives and collectives. It is written
 * independently of the simulator so each checks the other in the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/schedule.h"

#define OPSTR_MAX 160

typedef struct mbstate {
    int fwd, rec, bwd;       /* op index, -1 when not seen; bwd: the BWD or the BWD_WEIGHT,
                                the op that completes the backward */
    int bin;                 /* the BWD or the BWD_INPUT: the op that makes the input
                                gradient; -1 when not seen */
    int version, flags;      /* of the FWD */
    int rows_in, rows_gin;   /* rows received: activations, gradients */
    int rows_out, rows_gout; /* rows sent */
    int covered;             /* OPT_STEPs covering it */
} mbstate;

typedef struct vstate {
    mbstate *mb;         /* mb_count */
    unsigned char *made; /* versions produced or initial, max_version + 1 */
    int max_version;
    int32_t *match;
    int32_t *ar_first;      /* per stage: index of the first collective instance */
    int32_t *ar_count;      /* per collective instance: replicas arrived */
    int32_t *blocked;       /* per worker: op it is blocked on, -1 */
    int32_t *stack;         /* workers able to run */
    int32_t *pc;            /* per worker: next op */
    unsigned char *joined;  /* per worker: arrival at the collective at pc counted */
    unsigned char *arrived; /* per RECV op: its send has run */
    int32_t *fifo;          /* per worker in turn: its unwaited asynchronous all-reduces */
} vstate;

static int fail(pt_error *err, int code, const pt_program *p, int i, const char *why)
{
    char buf[OPSTR_MAX];
    return pt_error_set(err, code, "schedule: op %d (%s): %s", i,
                        pt_sched_op_str(p, i, buf, sizeof buf), why);
}

static int check_shape(const pt_program *p, pt_error *err)
{
    if (p->worker_count < 1 || p->stage_count < 1 || !p->workers || !p->stage_worker)
        return pt_error_set(err, PT_EINVAL, "schedule: no workers");
    if (p->mb_count < 1 || p->initial_versions < 1)
        return pt_error_set(err, PT_EINVAL, "schedule: mb_count %d, initial_versions %d",
                            p->mb_count, p->initial_versions);
    int prev_end = 0;
    for (int s = 0; s < p->stage_count; s++)
        if (p->stage_worker[s] >= p->stage_worker[s + 1])
            return pt_error_set(err, PT_EINVAL, "schedule: stage %d has no workers", s);
    if (p->stage_worker[0] != 0 || p->stage_worker[p->stage_count] != p->worker_count)
        return pt_error_set(err, PT_EINVAL, "schedule: stage_worker does not span the workers");
    for (int w = 0; w < p->worker_count; w++) {
        const pt_worker *x = &p->workers[w];
        if (x->stage < 0 || x->stage >= p->stage_count || w < p->stage_worker[x->stage] ||
            w >= p->stage_worker[x->stage + 1] ||
            x->replica_count != p->stage_worker[x->stage + 1] - p->stage_worker[x->stage])
            return pt_error_set(err, PT_EINVAL,
                                "schedule: worker %d: stage %d or replica count %d out of place", w,
                                x->stage, x->replica_count);
        if (x->op_begin != prev_end || x->op_end < x->op_begin || x->op_end > p->op_count)
            return pt_error_set(err, PT_EINVAL,
                                "schedule: worker %d: ops [%d,%d) do not follow the previous "
                                "worker's (ending at %d)",
                                w, x->op_begin, x->op_end, prev_end);
        if (x->row_lo < 0 || x->row_hi <= x->row_lo || x->row_hi > p->mb_size)
            return pt_error_set(err, PT_EINVAL, "schedule: worker %d: rows [%d,%d) of %d", w,
                                x->row_lo, x->row_hi, p->mb_size);
        prev_end = x->op_end;
    }
    if (prev_end != p->op_count)
        return pt_error_set(err, PT_EINVAL, "schedule: ops end at %d but op_count is %d", prev_end,
                            p->op_count);
    return 0;
}

/* Per-op checks that need no history. */
static int check_op(const pt_program *p, int w, int i, pt_error *err)
{
    const pt_worker *x = &p->workers[w];
    const pt_op *op = &p->ops[i];
    int k = op->kind;
    if (k >= PT_OP_KIND_COUNT)
        return fail(err, PT_EINVAL, p, i, "unknown op kind");
    if (op->mb < 0 || op->mb_end <= op->mb || op->mb_end > p->mb_count)
        return fail(err, PT_EINVAL, p, i, "micro-batch range outside the program");
    unsigned facts = pt_op_facts(k);
    if (facts & PT_OPK_COLLECTIVE) {
        if (op->peer != x->stage)
            return fail(err, PT_EINVAL, p, i, "collective group is not the worker's stage");
        if (x->replica_count < 2)
            return fail(err, PT_EINVAL, p, i, "all-reduce on a stage with one replica");
        return 0;
    }
    if (k == PT_OP_OPT_STEP)
        return 0;
    if (op->mb_end != op->mb + 1)
        return fail(err, PT_EINVAL, p, i, "covers more than one micro-batch");
    if (op->row_lo < x->row_lo || op->row_hi > x->row_hi || op->row_lo >= op->row_hi)
        return fail(err, PT_EINVAL, p, i, "rows outside the worker's share");
    if (pt_op_is_mb_compute(k)) {
        if (op->row_lo != x->row_lo || op->row_hi != x->row_hi)
            return fail(err, PT_EINVAL, p, i, "compute does not cover the worker's rows");
        if (op->version < 0)
            return fail(err, PT_EINVAL, p, i, "negative weight version");
        return 0;
    }
    int want = facts & PT_OPK_NEXT ? x->stage + 1 : x->stage - 1;
    if (op->peer < 0 || op->peer >= p->worker_count || p->workers[op->peer].stage != want)
        return fail(err, PT_EINVAL, p, i, "peer is not a worker of the adjacent stage");
    const pt_worker *y = &p->workers[op->peer];
    if (op->row_lo < y->row_lo || op->row_hi > y->row_hi)
        return fail(err, PT_EINVAL, p, i, "rows outside the peer's share");
    if (!pt_sched_owns(p, x, op->mb) || !pt_sched_owns(p, y, op->mb))
        return fail(err, PT_EINVAL, p, i,
                    "round-robin: the micro-batch is not this replica's or the peer's");
    if (op->bytes < 0)
        return fail(err, PT_EINVAL, p, i, "negative bytes");
    return 0;
}

/* Whether every micro-batch of [mb, mb_end) the worker runs has its backward
 * done (round-robin: the worker runs only its own, pt_sched_owns). */
static int all_bwd_done(const pt_program *p, const pt_worker *x, const vstate *v, const pt_op *op)
{
    for (int m = op->mb; m < op->mb_end; m++)
        if (pt_sched_owns(p, x, m) && v->mb[m].bwd < 0)
            return 0;
    return 1;
}

/* One worker's walk through its ops (check_worker). */
typedef struct wcheck {
    const pt_program *p;
    const pt_worker *x;
    vstate *v;
    int rows, newest;
    /* completed reductions of [reduced_lo, reduced_hi), reduced_layers of the
     * worker's layers, consumed by a step; the reduction being issued: its
     * range and the layer its next bucket must end at (-1: none in progress);
     * unwaited asynchronous ones in v->fifo[fifo_h, fifo_t) */
    int reduced_lo, reduced_hi, reduced_layers;
    int iss_lo, iss_hi, iss_next, fifo_h, fifo_t;
} wcheck;

static int version_ok(const wcheck *c, const pt_op *op)
{
    return op->version <= c->v->max_version && c->v->made[op->version];
}

/* RECV_ACT, FWD, SEND_ACT, RECV_GRAD, SEND_GRAD: order and rows. */
static int on_data(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_op *op = &p->ops[i];
    mbstate *m = &c->v->mb[op->mb];
    int n = op->row_hi - op->row_lo;
    switch (op->kind) {
    case PT_OP_RECV_ACT:
        if (m->fwd >= 0)
            return fail(err, PT_EINVAL, p, i, "activation received after its FWD");
        m->rows_in += n;
        return 0;
    case PT_OP_FWD:
        if (m->fwd >= 0)
            return fail(err, PT_EINVAL, p, i, "second FWD of the micro-batch");
        if (c->x->stage > 0 && m->rows_in != c->rows)
            return fail(err, PT_EINVAL, p, i, "FWD before all its input rows are received");
        if (!version_ok(c, op))
            return fail(err, PT_EINVAL, p, i, "reads a weight version not produced yet");
        m->fwd = i;
        m->version = op->version;
        m->flags = op->flags & PT_OPF_STASH;
        return 0;
    case PT_OP_SEND_ACT:
        if (m->fwd < 0)
            return fail(err, PT_EINVAL, p, i, "activation sent before its FWD");
        m->rows_out += n;
        return 0;
    case PT_OP_RECV_GRAD:
        if (m->bin >= 0)
            return fail(err, PT_EINVAL, p, i, "gradient received after its BWD");
        m->rows_gin += n;
        return 0;
    default: /* PT_OP_SEND_GRAD */
        if (m->bin < 0)
            return fail(err, PT_EINVAL, p, i, "gradient sent before its BWD");
        m->rows_gout += n;
        return 0;
    }
}

/* RECOMPUTE, BWD, BWD_INPUT, BWD_WEIGHT: between the FWD and the end, on the
 * FWD's version. */
static int on_bwd(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_op *op = &p->ops[i];
    mbstate *m = &c->v->mb[op->mb];
    int stash = op->flags & PT_OPF_STASH;
    if (op->kind == PT_OP_RECOMPUTE) {
        if (!c->x->recompute)
            return fail(err, PT_EINVAL, p, i, "RECOMPUTE on a worker that keeps activations");
        if (m->fwd < 0 || m->bin >= 0 || m->rec >= 0)
            return fail(err, PT_EINVAL, p, i, "RECOMPUTE not once between FWD and BWD");
        if (op->version != m->version || stash != m->flags)
            return fail(err, PT_EINVAL, p, i, "RECOMPUTE reads another version than its FWD");
        m->rec = i;
        return 0;
    }
    if (op->kind == PT_OP_BWD_WEIGHT) {
        /* the weight half of a split backward: after its BWD_INPUT, any later slot */
        if (m->bin < 0 || p->ops[m->bin].kind != PT_OP_BWD_INPUT)
            return fail(err, PT_EINVAL, p, i, "BWD_WEIGHT without an earlier BWD_INPUT");
        if (m->bwd >= 0)
            return fail(err, PT_EINVAL, p, i, "second BWD_WEIGHT of the micro-batch");
    } else {
        if (m->fwd < 0)
            return fail(err, PT_EINVAL, p, i, "BWD before its FWD");
        if (m->bin >= 0)
            return fail(err, PT_EINVAL, p, i, "second BWD of the micro-batch");
        if (c->x->recompute && m->rec < 0)
            return fail(err, PT_EINVAL, p, i, "BWD without RECOMPUTE on a recomputing worker");
        if (c->x->stage + 1 < p->stage_count && m->rows_gin != c->rows)
            return fail(err, PT_EINVAL, p, i, "BWD before all its gradient rows are received");
    }
    if (op->version != m->version || stash != m->flags)
        return fail(err, PT_EINVAL, p, i,
                    op->kind == PT_OP_BWD_WEIGHT
                        ? "BWD_WEIGHT reads another weight version than its FWD"
                        : "BWD reads another weight version than its FWD");
    if (!stash && !version_ok(c, op))
        return fail(err, PT_EINVAL, p, i, "reads a weight version not produced yet");
    if (op->kind != PT_OP_BWD_WEIGHT)
        m->bin = i;
    if (op->kind != PT_OP_BWD_INPUT)
        m->bwd = i;
    return 0;
}

/* An asynchronous all-reduce joins the unwaited ones: at most two gradient
 * ranges may be unwaited at once (Pipe-SGD's width two). */
static int queue_async(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const int32_t *fifo = c->v->fifo;
    int ranges = 0;
    for (int q = c->fifo_h; q < c->fifo_t; q++)
        ranges += q == c->fifo_h || p->ops[fifo[q]].mb != p->ops[fifo[q - 1]].mb;
    ranges += c->fifo_t == c->fifo_h || p->ops[fifo[c->fifo_t - 1]].mb != p->ops[i].mb;
    if (ranges > 2)
        return fail(err, PT_EINVAL, p, i, "all-reduces of more than two gradient ranges unwaited");
    c->v->fifo[c->fifo_t++] = i;
    return 0;
}

/* A completed reduction of layers [a, b) of [lo, hi). */
static void reduced(wcheck *c, int lo, int hi, int layers)
{
    if (c->reduced_lo != lo || c->reduced_hi != hi)
        c->reduced_layers = 0;
    c->reduced_lo = lo;
    c->reduced_hi = hi;
    c->reduced_layers += layers;
}

static int on_allreduce(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_worker *x = c->x;
    const pt_op *op = &p->ops[i];
    if (!all_bwd_done(p, x, c->v, op))
        return fail(err, PT_EINVAL, p, i, "all-reduce before every BWD it covers");
    int a = op->layer_lo, b = op->layer_hi;
    if (b <= a) {
        a = x->first;
        b = x->last;
    }
    if (a < x->first || b > x->last)
        return fail(err, PT_EINVAL, p, i, "bucket outside the worker's layers");
    if (c->iss_next < 0) {
        if (b != x->last)
            return fail(err, PT_EINVAL, p, i,
                        "first bucket of a reduction does not end at the worker's last layer "
                        "(buckets go last layer first)");
        c->iss_lo = op->mb;
        c->iss_hi = op->mb_end;
    } else if (op->mb != c->iss_lo || op->mb_end != c->iss_hi || b != c->iss_next) {
        return fail(err, PT_EINVAL, p, i,
                    "bucket does not continue the reduction in progress (same micro-batches, "
                    "ending where the previous bucket began)");
    }
    c->iss_next = a == x->first ? -1 : a;
    if (op->flags & PT_OPF_ASYNC)
        return queue_async(c, i, err);
    reduced(c, op->mb, op->mb_end, b - a);
    return 0;
}

static int on_ar_wait(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_op *op = &p->ops[i];
    if (c->fifo_h == c->fifo_t)
        return fail(err, PT_EINVAL, p, i, "waits for no asynchronous all-reduce");
    const pt_op *a = &p->ops[c->v->fifo[c->fifo_h++]];
    if (a->mb != op->mb || a->mb_end != op->mb_end)
        return fail(err, PT_EINVAL, p, i,
                    "waits for another range than the oldest asynchronous all-reduce");
    reduced(c, a->mb, a->mb_end,
            a->layer_hi > a->layer_lo ? a->layer_hi - a->layer_lo : c->x->last - c->x->first);
    return 0;
}

static int on_step(wcheck *c, int i, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_worker *x = c->x;
    const pt_op *op = &p->ops[i];
    if (!all_bwd_done(p, x, c->v, op))
        return fail(err, PT_EINVAL, p, i, "OPT_STEP before every BWD it covers");
    for (int u = op->mb; u < op->mb_end; u++)
        if (c->v->mb[u].covered++)
            return fail(err, PT_EINVAL, p, i, "applies a micro-batch's gradient twice");
    if (x->replica_count > 1 && (c->reduced_lo != op->mb || c->reduced_hi != op->mb_end ||
                                 c->reduced_layers != x->last - x->first))
        return fail(err, PT_EINVAL, p, i,
                    "replicated stage steps without a completed all-reduce of all its layers' "
                    "gradients of the same micro-batches");
    c->reduced_lo = c->reduced_hi = -1;
    c->reduced_layers = 0;
    if (op->version <= c->newest || op->version > c->v->max_version)
        return fail(err, PT_EINVAL, p, i, "produced version is not newer than the last");
    c->newest = op->version;
    c->v->made[c->newest] = 1;
    return 0;
}

/* After the walk: every micro-batch the worker runs went all the way. */
static int check_complete(const wcheck *c, int w, pt_error *err)
{
    const pt_program *p = c->p;
    const pt_worker *x = c->x;
    int S = p->stage_count;
    for (int u = 0; u < p->mb_count; u++) {
        const mbstate *m = &c->v->mb[u];
        const char *why = NULL;
        if (!pt_sched_owns(p, x, u)) {
            if (m->fwd >= 0 || m->bin >= 0 || m->bwd >= 0 || m->rows_in || m->rows_gin)
                why = "is another replica's (round-robin) but runs here";
        } else if (m->fwd >= 0 && m->bin >= 0 && m->bwd < 0) {
            why = "has a BWD_INPUT but no BWD_WEIGHT";
        } else if (m->fwd < 0 || m->bwd < 0) {
            why = "has no FWD or no BWD";
        } else if (x->stage + 1 < S && m->rows_out != c->rows) {
            why = "does not send all its output rows";
        } else if (x->stage > 0 && m->rows_gout != c->rows) {
            why = "does not send all its input-gradient rows";
        } else if (p->synchronous && m->covered != 1) {
            why = "is not applied by exactly one OPT_STEP";
        }
        if (why)
            return pt_error_set(err, PT_EINVAL,
                                "schedule: worker %d (stage %d replica %d): micro-batch %d %s", w,
                                x->stage, x->replica, u, why);
    }
    return 0;
}

/* Dependency order and versions on one worker. */
static int check_worker(const pt_program *p, int w, vstate *v, pt_error *err)
{
    const pt_worker *x = &p->workers[w];
    wcheck c = {p,  x, v, x->row_hi - x->row_lo, p->initial_versions - 1, -1, -1, 0, -1, -1,
                -1, 0, 0};
    for (int m = 0; m < p->mb_count; m++)
        v->mb[m] = (mbstate){-1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0};
    memset(v->made, 0, (size_t)v->max_version + 1);
    for (int u = 0; u < p->initial_versions && u <= v->max_version; u++)
        v->made[u] = 1;
    for (int i = x->op_begin; i < x->op_end; i++) {
        int rc = check_op(p, w, i, err);
        if (rc < 0)
            return rc;
        switch (p->ops[i].kind) {
        case PT_OP_RECOMPUTE:
        case PT_OP_BWD:
        case PT_OP_BWD_INPUT:
        case PT_OP_BWD_WEIGHT:
            rc = on_bwd(&c, i, err);
            break;
        case PT_OP_ALLREDUCE:
            rc = on_allreduce(&c, i, err);
            break;
        case PT_OP_AR_WAIT:
            rc = on_ar_wait(&c, i, err);
            break;
        case PT_OP_OPT_STEP:
            rc = on_step(&c, i, err);
            break;
        default:
            rc = on_data(&c, i, err);
            break;
        }
        if (rc < 0)
            return rc;
    }
    return check_complete(&c, w, err);
}

/* Replicas of a stage must issue the same collectives in the same order. */
static int check_collectives(const pt_program *p, vstate *v, int *total, pt_error *err)
{
    *total = 0;
    for (int s = 0; s < p->stage_count; s++) {
        int w0 = p->stage_worker[s];
        v->ar_first[s] = *total;
        int n0 = 0;
        for (int i = p->workers[w0].op_begin; i < p->workers[w0].op_end; i++)
            n0 += p->ops[i].kind == PT_OP_ALLREDUCE;
        for (int w = w0 + 1; w < p->stage_worker[s + 1]; w++) {
            int a = p->workers[w0].op_begin, b = p->workers[w].op_begin;
            for (;;) {
                while (a < p->workers[w0].op_end && p->ops[a].kind != PT_OP_ALLREDUCE)
                    a++;
                while (b < p->workers[w].op_end && p->ops[b].kind != PT_OP_ALLREDUCE)
                    b++;
                int ea = a >= p->workers[w0].op_end, eb = b >= p->workers[w].op_end;
                if (ea && eb)
                    break;
                if (ea || eb || p->ops[a].mb != p->ops[b].mb ||
                    p->ops[a].mb_end != p->ops[b].mb_end ||
                    p->ops[a].layer_lo != p->ops[b].layer_lo ||
                    p->ops[a].layer_hi != p->ops[b].layer_hi ||
                    (p->ops[a].flags & PT_OPF_ASYNC) != (p->ops[b].flags & PT_OPF_ASYNC))
                    return fail(err, PT_EINVAL, p, eb ? a : b,
                                "replicas of the stage issue different all-reduces");
                a++;
                b++;
            }
        }
        *total += n0;
    }
    return 0;
}

/* Gives every ALLREDUCE and AR_WAIT its collective instance in v->match (whose
 * entries for those ops are free): ALLREDUCE k of a worker of stage s is
 * instance ar_first[s] + k; an AR_WAIT waits for the oldest unwaited
 * asynchronous ALLREDUCE of its worker. */
static void number_collectives(const pt_program *p, vstate *v)
{
    for (int w = 0; w < p->worker_count; w++) {
        const pt_worker *x = &p->workers[w];
        int k = v->ar_first[x->stage], waited = x->op_begin;
        for (int i = x->op_begin; i < x->op_end; i++) {
            if (p->ops[i].kind == PT_OP_ALLREDUCE) {
                v->match[i] = k++;
            } else if (p->ops[i].kind == PT_OP_AR_WAIT) {
                while (waited < i && !(p->ops[waited].kind == PT_OP_ALLREDUCE &&
                                       (p->ops[waited].flags & PT_OPF_ASYNC)))
                    waited++;
                v->match[i] = v->match[waited]; /* checked to exist by check_worker */
                waited++;
            }
        }
    }
}

/* The worker owning op i of a hosted program (op ranges are in worker order). */
static int owner_of(const pt_program *p, int i)
{
    int lo = 0, hi = p->worker_count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (p->workers[mid].op_begin <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (lo > 0 && p->workers[lo].op_begin == p->workers[lo].op_end)
        lo--;
    return lo;
}

/* Hosts (schedule.h): every op in exactly one host's order, each worker's ops
 * in program order there, the workers of a host on one device and of distinct
 * stages. */
static int check_hosts(const pt_program *p, vstate *v, pt_error *err)
{
    if (p->host_count <= 0)
        return 0;
    if (!p->worker_host || !p->host_begin || !p->host_ops || p->host_begin[0] != 0 ||
        p->host_begin[p->host_count] != p->op_count)
        return pt_error_set(err, PT_EINVAL, "schedule: hosts do not span the ops");
    for (int w = 0; w < p->worker_count; w++) {
        int h = p->worker_host[w];
        if (h < 0 || h >= p->host_count)
            return pt_error_set(err, PT_EINVAL, "schedule: worker %d: host %d out of range", w, h);
        v->pc[w] = p->workers[w].op_begin; /* next op expected in its host's order */
        for (int u = 0; u < w; u++)
            if (p->worker_host[u] == h && (p->workers[u].device != p->workers[w].device ||
                                           p->workers[u].stage == p->workers[w].stage))
                return pt_error_set(err, PT_EINVAL,
                                    "schedule: workers %d and %d share host %d but not a device, "
                                    "or share a stage",
                                    u, w, h);
    }
    for (int h = 0; h < p->host_count; h++) {
        if (p->host_begin[h + 1] < p->host_begin[h])
            return pt_error_set(err, PT_EINVAL, "schedule: host %d: negative op count", h);
        for (int k = p->host_begin[h]; k < p->host_begin[h + 1]; k++) {
            int i = p->host_ops[k];
            if (i < 0 || i >= p->op_count)
                return pt_error_set(err, PT_EINVAL, "schedule: host %d: op %d out of range", h, i);
            int w = owner_of(p, i);
            if (p->worker_host[w] != h)
                return fail(err, PT_EINVAL, p, i, "in the order of a host its worker is not on");
            if (v->pc[w] != i)
                return fail(err, PT_EINVAL, p, i,
                            "out of its worker's program order (or twice) in its host's order");
            v->pc[w]++;
        }
    }
    return 0;
}

static void wake(vstate *v, int *top, int u)
{
    v->blocked[u] = -1;
    v->stack[(*top)++] = u;
}

/* Zero-duration execution with blocking receives and collectives, one runner
 * per host (per worker when the program has no hosts): a blocked op blocks
 * its whole host. pc, blocked and joined are per runner. */
static int run_blocking(const pt_program *p, vstate *v, int n_inst, pt_error *err)
{
    int top = 0, nh = pt_sched_host_count(p);
    memset(v->arrived, 0, (size_t)p->op_count);
    memset(v->ar_count, 0, (size_t)(n_inst ? n_inst : 1) * sizeof *v->ar_count);
    for (int h = 0; h < nh; h++) {
        v->pc[h] = 0;
        v->blocked[h] = -1;
        v->joined[h] = 0;
        v->stack[top++] = h;
    }
    while (top > 0) {
        int h = v->stack[--top], len = pt_sched_host_len(p, h);
        while (v->pc[h] < len) {
            int i = pt_sched_host_op(p, h, v->pc[h]);
            int w = p->host_count > 0 ? owner_of(p, i) : h;
            const pt_worker *x = &p->workers[w];
            int r = x->replica_count;
            const pt_op *op = &p->ops[i];
            unsigned facts = pt_op_facts(op->kind);
            if (facts & PT_OPK_SEND) {
                int j = v->match[i], g = pt_sched_host_of(p, op->peer);
                v->arrived[j] = 1;
                if (v->blocked[g] == j)
                    wake(v, &top, g);
            } else if (facts & PT_OPK_RECV) {
                if (!v->arrived[i]) {
                    v->blocked[h] = i;
                    break;
                }
            } else if (op->kind == PT_OP_ALLREDUCE) {
                int inst = v->match[i];
                if (!v->joined[h]) {
                    v->joined[h] = 1;
                    if (++v->ar_count[inst] == r)
                        for (int u = p->stage_worker[x->stage]; u < p->stage_worker[x->stage + 1];
                             u++) {
                            int g = pt_sched_host_of(p, u);
                            if (v->blocked[g] >= 0 &&
                                (pt_op_facts(p->ops[v->blocked[g]].kind) & PT_OPK_COLLECTIVE) &&
                                v->match[v->blocked[g]] == inst)
                                wake(v, &top, g);
                        }
                }
                if (!(op->flags & PT_OPF_ASYNC) && v->ar_count[inst] < r) {
                    v->blocked[h] = i;
                    break;
                }
                v->joined[h] = 0;
            } else if (op->kind == PT_OP_AR_WAIT) {
                if (v->ar_count[v->match[i]] < r) {
                    v->blocked[h] = i;
                    break;
                }
            }
            v->pc[h]++;
        }
    }
    int stuck = 0;
    char msg[PT_ERROR_MAX] = "", buf[OPSTR_MAX];
    size_t len = 0;
    for (int h = 0; h < nh; h++) {
        if (v->pc[h] >= pt_sched_host_len(p, h))
            continue;
        if (stuck++ < 3 && len < sizeof msg) {
            int n = snprintf(msg + len, sizeof msg - len, "%s%s", stuck > 1 ? "; " : "",
                             pt_sched_op_str(p, pt_sched_host_op(p, h, v->pc[h]), buf, sizeof buf));
            if (n > 0)
                len += (size_t)n;
        }
    }
    if (stuck)
        return pt_error_set(err, PT_EDEADLOCK, "schedule: deadlock: %d %s blocked: %.400s", stuck,
                            p->host_count > 0 ? "hosts" : "workers", msg);
    return 0;
}

static void free_state(vstate *v)
{
    free(v->mb);
    free(v->made);
    free(v->match);
    free(v->ar_first);
    free(v->ar_count);
    free(v->blocked);
    free(v->stack);
    free(v->pc);
    free(v->joined);
    free(v->arrived);
    free(v->fifo);
}

int pt_sched_validate(const pt_program *p, pt_error *err)
{
    if (!p)
        return pt_error_set(err, PT_EINVAL, "schedule: no program");
    int rc = check_shape(p, err);
    if (rc < 0)
        return rc;
    vstate v = {0};
    v.max_version = p->initial_versions;
    for (int i = 0; i < p->op_count; i++)
        if (p->ops[i].version > v.max_version)
            v.max_version = p->ops[i].version;
    int nw = p->worker_count, no = p->op_count > 0 ? p->op_count : 1;
    v.mb = malloc((size_t)p->mb_count * sizeof *v.mb);
    v.made = malloc((size_t)v.max_version + 1);
    v.match = malloc((size_t)no * sizeof *v.match);
    v.ar_first = malloc((size_t)p->stage_count * sizeof *v.ar_first);
    v.blocked = malloc((size_t)nw * sizeof *v.blocked);
    v.stack = malloc((size_t)nw * sizeof *v.stack);
    v.pc = malloc((size_t)nw * sizeof *v.pc);
    v.joined = malloc((size_t)nw * sizeof *v.joined);
    v.arrived = malloc((size_t)no);
    v.fifo = malloc((size_t)no * sizeof *v.fifo);
    if (!v.mb || !v.made || !v.match || !v.ar_first || !v.blocked || !v.stack || !v.pc ||
        !v.joined || !v.arrived || !v.fifo) {
        rc = pt_error_set(err, PT_ENOMEM, "schedule: out of memory validating");
        goto out;
    }
    if ((rc = pt_sched_match(p, v.match, NULL, err)) < 0)
        goto out;
    for (int i = 0; i < p->op_count; i++) {
        int j = v.match[i];
        if (j >= 0 && p->ops[i].bytes != p->ops[j].bytes) {
            rc = fail(err, PT_EINVAL, p, i, "send and receive disagree on the bytes");
            goto out;
        }
    }
    for (int w = 0; w < nw && rc == 0; w++)
        rc = check_worker(p, w, &v, err);
    if (rc < 0 || (rc = check_hosts(p, &v, err)) < 0)
        goto out;
    int n_inst = 0;
    if ((rc = check_collectives(p, &v, &n_inst, err)) < 0)
        goto out;
    v.ar_count = malloc((size_t)(n_inst ? n_inst : 1) * sizeof *v.ar_count);
    if (!v.ar_count) {
        rc = pt_error_set(err, PT_ENOMEM, "schedule: out of memory validating");
        goto out;
    }
    number_collectives(p, &v);
    rc = run_blocking(p, &v, n_inst, err);
out:
    free_state(&v);
    return rc;
}
