/* Calibration: fit a profile (and links) to a run record's op events. */
#include "planner/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/sched_kind.h"

#define NS_PER_S  1e9
#define NS_PER_MS 1e6
#define MS_PER_S  1e3
/* worker * this + step names a worker's step exactly in a double (steps and
 * workers stay far below 2^26) */
#define PT_CAL_STEP_KEY 67108864.0
/* A send holds its worker when the next op starts no earlier than this
 * before the send's end (clock reads of one thread), for this share of the
 * sends. */
#define PT_CAL_HOLD_SLACK_NS 1000
#define PT_CAL_HOLD_FRACTION 0.9

/* One op event of the generation, on its sender's clock. */
typedef struct cev {
    int64_t seq; /* arrival order: the order the worker issued its ops */
    int worker;
    int64_t step;
    int mb; /* -1: none */
    pt_op_kind op;
    int64_t start, end, bytes;
    int64_t off; /* the sender's clock minus the console's */
} cev;

static int cev_cmp(const void *a, const void *b)
{
    const cev *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Least squares of y = a*u + b*v over n points (sums given). Returns 0 and
 * a, b; -1 when the normal equations are singular. */
typedef struct ls2 {
    double uu, uv, vv, uy, vy, yy;
    int n;
} ls2;

static void ls2_add(ls2 *s, double u, double v, double y)
{
    s->uu += u * u;
    s->uv += u * v;
    s->vv += v * v;
    s->uy += u * y;
    s->vy += v * y;
    s->yy += y * y;
    s->n++;
}

static int ls2_solve(const ls2 *s, double *a, double *b)
{
    double det = s->uu * s->vv - s->uv * s->uv;
    if (!(fabs(det) > 1e-12 * (s->uu * s->vv)) || s->n < 2)
        return -1;
    *a = (s->uy * s->vv - s->vy * s->uv) / det;
    *b = (s->vy * s->uu - s->uy * s->uv) / det;
    return 0;
}

static double ls2_rms(const ls2 *s, double a, double b)
{
    /* sum (y - a u - b v)^2 expanded over the kept sums */
    double r =
        s->yy - 2 * a * s->uy - 2 * b * s->vy + a * a * s->uu + 2 * a * b * s->uv + b * b * s->vv;
    return s->n > 0 && r > 0 ? sqrt(r / s->n) : 0;
}

/* Fits y = alpha*u + v/beta (u: latency multiplier, v: bytes multiplier);
 * the fallbacks keep `keep`'s latency or bandwidth. mean_y / mean_u / mean_v
 * describe the points for the one-size and flat cases. */
static void fit_link(const ls2 *s, pt_link keep, pt_cal_link *out)
{
    memset(out, 0, sizeof *out);
    out->ops = s->n;
    out->link = keep;
    if (s->n == 0)
        return;
    double alpha, inv_beta;
    if (ls2_solve(s, &alpha, &inv_beta) == 0 && alpha >= 0 && inv_beta > 0) {
        out->how = PT_CAL_LINK_FIT;
        out->link.latency = alpha;
        out->link.bandwidth = 1.0 / inv_beta;
    } else if (s->vv > 0 && s->uv > 0 && s->uu > 0 &&
               s->uv / s->uu / keep.bandwidth >= keep.latency) {
        /* one size (or a negative intercept) of messages large for the link
         * (their bytes take longer than its latency): keep the latency, fit
         * 1/beta through the remaining time */
        double rest = (s->vy - keep.latency * s->uv) / s->vv;
        if (rest > 0) {
            out->how = PT_CAL_LINK_BW_ONLY;
            out->link.bandwidth = 1.0 / rest;
        } else {
            out->how = PT_CAL_LINK_FLAT;
            out->link.latency = s->uu > 0 ? s->uy / s->uu : 0;
        }
    } else {
        /* one size of small messages: their time is per-message overhead
         * (copies, queueing, wake-ups), not bandwidth; a bandwidth fitted
         * through it would make large transfers (an all-reduce of a stage's
         * gradients) cost orders of magnitude too much */
        out->how = PT_CAL_LINK_FLAT;
        out->link.latency = s->uu > 0 ? s->uy / s->uu : 0;
    }
    if (out->link.latency < 0)
        out->link.latency = 0;
    out->rms_s = ls2_rms(s, out->link.latency, 1.0 / out->link.bandwidth);
}

const char *pt_cal_link_how_name(pt_cal_link_how how)
{
    switch (how) {
    case PT_CAL_LINK_NONE:
        return "none";
    case PT_CAL_LINK_FIT:
        return "fit";
    case PT_CAL_LINK_BW_ONLY:
        return "bandwidth-only";
    case PT_CAL_LINK_FLAT:
        return "flat";
    }
    return "?";
}

void pt_cal_fit_clear(pt_cal_fit *fit)
{
    if (!fit)
        return;
    free(fit->stages);
    memset(fit, 0, sizeof *fit);
}

/* Finds the generation to fit (the newest with events unless asked) and its
 * plan entry. */
static int find_gen(const pt_record *rec, int64_t want, int64_t *gen, const pt_plan **plan,
                    pt_error *err)
{
    int64_t newest = -1, n = pt_record_count(rec);
    for (int64_t i = 0; i < n && want < 0; i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind != PT_RECORD_RECV || e->msg_type != PT_MSG_EVENTS)
            continue;
        pt_msg m;
        int rc = pt_record_msg(rec, i, &m, err);
        if (rc < 0)
            return rc;
        if (m.gen > newest)
            newest = m.gen;
        pt_msg_clear(&m);
    }
    *gen = want >= 0 ? want : newest;
    if (*gen < 0)
        return pt_error_set(err, PT_ENOTFOUND, "calibrate: the record has no op events");
    *plan = NULL;
    for (int64_t i = 0; i < n; i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind == PT_RECORD_PLAN && e->gen == *gen)
            *plan = e->plan;
    }
    if (!*plan)
        return pt_error_set(err, PT_ENOTFOUND, "calibrate: no plan for generation %lld",
                            (long long)*gen);
    return 0;
}

/* Every op event of gen, with worker indices from prog. */
static int collect(const pt_record *rec, int64_t gen, const pt_program *prog, cev **out,
                   int64_t *count, pt_error *err)
{
    int64_t n = pt_record_count(rec), cap = 0, len = 0;
    cev *v = NULL;
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind != PT_RECORD_RECV || e->msg_type != PT_MSG_EVENTS)
            continue;
        pt_msg m;
        if ((rc = pt_record_msg(rec, i, &m, err)) < 0)
            break;
        for (int k = 0; m.gen == gen && k < m.u.events.count; k++) {
            const pt_msg_event *x = &m.u.events.events[k];
            if (x->stage < 0 || x->stage >= prog->stage_count || x->replica < 0 ||
                x->replica >= prog->stage_worker[x->stage + 1] - prog->stage_worker[x->stage]) {
                rc = pt_error_set(err, PT_EINVAL,
                                  "calibrate: line %lld: event of stage %d replica %d, "
                                  "which the plan of generation %lld does not have",
                                  (long long)e->line, x->stage, x->replica, (long long)gen);
                break;
            }
            if (len == cap) {
                int64_t nc = cap ? 2 * cap : 1024;
                cev *nv = realloc(v, (size_t)nc * sizeof *nv);
                if (!nv) {
                    rc = pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
                    break;
                }
                v = nv;
                cap = nc;
            }
            v[len] = (cev){len,         prog->stage_worker[x->stage] + x->replica,
                           x->step,     x->mb,
                           x->op,       x->start_ns,
                           x->end_ns,   x->bytes,
                           e->offset_ns};
            len++;
        }
        pt_msg_clear(&m);
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        free(v);
        return rc;
    }
    qsort(v, (size_t)len, sizeof *v, cev_cmp);
    *out = v;
    *count = len;
    return 0;
}

/* Samples, grouped by (a, b) and, inside, by c (a worker's step): a
 * figure is the mean over steps of each step's mean, over the steps kept
 * (pick_steps). */
typedef struct smp {
    double a, b, c, y;
} smp;

typedef struct svec {
    smp *v;
    int64_t n, cap;
} svec;

static int svec_add(svec *s, double a, double b, double c, double y)
{
    if (s->n == s->cap) {
        int64_t nc = s->cap ? 2 * s->cap : 256;
        smp *nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -1;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = (smp){a, b, c, y};
    return 0;
}

static int smp_cmp(const void *p, const void *q)
{
    const smp *x = p, *y = q;
    if (x->a != y->a)
        return x->a < y->a ? -1 : 1;
    if (x->b != y->b)
        return x->b < y->b ? -1 : 1;
    if (x->c != y->c)
        return x->c < y->c ? -1 : 1;
    return x->y < y->y ? -1 : x->y > y->y;
}

static int dbl_cmp(const void *p, const void *q)
{
    double x = *(const double *)p, y = *(const double *)q;
    return x < y ? -1 : x > y;
}

/* Calls f(ctx, a, b, mean over c of the mean y, samples) once per group of
 * equal (a, b). Returns 0 or -1 on no memory. */
static int svec_groups(svec *s, void (*f)(void *, double, double, double, int64_t), void *ctx)
{
    if (s->n > 1)
        qsort(s->v, (size_t)s->n, sizeof *s->v, smp_cmp);
    double *means = malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof *means);
    if (!means)
        return -1;
    for (int64_t i = 0; i < s->n;) {
        int64_t j = i, m = 0;
        while (j < s->n && s->v[j].a == s->v[i].a && s->v[j].b == s->v[i].b) {
            int64_t k = j;
            double sum = 0;
            while (k < s->n && s->v[k].a == s->v[j].a && s->v[k].b == s->v[j].b &&
                   s->v[k].c == s->v[j].c)
                sum += s->v[k++].y;
            means[m++] = sum / (double)(k - j);
            j = k;
        }
        double sum = 0;
        for (int64_t k = 0; k < m; k++)
            sum += means[k];
        f(ctx, s->v[i].a, s->v[i].b, sum / (double)m, j - i);
        i = j;
    }
    free(means);
    return 0;
}

/* a link fit: latency multiplier u, bytes multiplier v; each group's mean
 * weighs as many points as it has */
static void add_link(void *ctx, double u, double v, double y, int64_t m)
{
    ls2 *l = ctx;
    for (int64_t k = 0; k < m; k++)
        ls2_add(l, u, v, y);
}

typedef struct sends_ctx {
    ls2 *intra, *inter;
} sends_ctx;

/* a = 1 intra-node, 0 inter-node; b = bytes */
static void add_send(void *ctx, double a, double b, double y, int64_t m)
{
    sends_ctx *c = ctx;
    add_link(a > 0 ? c->intra : c->inter, 1, b, y, m);
}

static void take_mean(void *ctx, double a, double b, double y, int64_t m)
{
    (void)a, (void)b, (void)m;
    *(double *)ctx = y;
}

/* Measured over one stage: samples of each compute kind, the base
 * profile's summed prediction for the same ops. */
typedef struct acc {
    svec fwd, bwd, rec, opt;    /* seconds per op */
    double fwd_b, bwd_b, rec_b; /* summed base predictions */
    double touched;             /* bytes an OPT_STEP touches / speed */
    double slow_sum;            /* shared-core stretch, summed over the worker-steps fitted */
    int64_t slow_n;
} acc;

static double mean_of(svec *s)
{
    double m = 0;
    if (svec_groups(s, take_mean, &m) < 0)
        return -1;
    return m;
}

static void acc_free(acc *a)
{
    free(a->fwd.v);
    free(a->bwd.v);
    free(a->rec.v);
    free(a->opt.v);
}

/* Blocking ops advance the worker's cursor; the others (sends, background
 * all-reduce) are issued and the worker goes on. */
static int blocks(pt_op_kind op, int async_ar, int hold)
{
    if (pt_op_facts(op) & PT_OPK_SEND)
        return hold;
    return !(op == PT_OP_ALLREDUCE && async_ar);
}

typedef struct stepfig {
    int64_t step;
    double span; /* the slowest worker's span of the step, ns */
} stepfig;

static int stepfig_cmp(const void *p, const void *q)
{
    const stepfig *x = p, *y = q;
    return x->step < y->step ? -1 : x->step > y->step;
}

/* The steps to fit: those after the warm-up whose slowest worker's span
 * (first op start to last op end) lies between the quartiles of all such
 * steps. A loaded machine stretches some iterations several times over;
 * the middle half is what a typical iteration costs (the run's
 * measured_iteration_ms is the median iteration). On success *out (sorted
 * by step) and *count are the kept steps. */
static int pick_steps(const cev *v, int64_t n, const int64_t *first, int skip, stepfig **out,
                      int64_t *count)
{
    stepfig *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    double *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
    if (!f || !spans) {
        free(f);
        free(spans);
        return -1;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i, lo = v[i].start, hi = v[i].end;
        for (; j < n && v[j].worker == v[i].worker && v[j].step == v[i].step; j++) {
            lo = v[j].start < lo ? v[j].start : lo;
            hi = v[j].end > hi ? v[j].end : hi;
        }
        if (v[i].step >= first[v[i].worker] + skip)
            f[m++] = (stepfig){v[i].step, (double)(hi - lo)};
        i = j;
    }
    /* one figure per step: its slowest worker */
    qsort(f, (size_t)m, sizeof *f, stepfig_cmp);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++) {
        if (u > 0 && f[u - 1].step == f[i].step) {
            if (f[i].span > f[u - 1].span)
                f[u - 1].span = f[i].span;
        } else {
            f[u++] = f[i];
        }
    }
    for (int64_t i = 0; i < u; i++)
        spans[i] = f[i].span;
    qsort(spans, (size_t)u, sizeof *spans, dbl_cmp);
    double q1 = u ? spans[u / 4] : 0, q3 = u ? spans[(3 * u) / 4 < u ? (3 * u) / 4 : u - 1] : 0;
    int64_t k = 0;
    for (int64_t i = 0; i < u; i++)
        if (f[i].span >= q1 && f[i].span <= q3)
            f[k++] = f[i];
    free(spans);
    *out = f;
    *count = k;
    return 0;
}

static int kept(const stepfig *f, int64_t k, int64_t step)
{
    stepfig key = {step, 0};
    return bsearch(&key, f, (size_t)k, sizeof *f, stepfig_cmp) != NULL;
}

/* The shared-core stretch of every worker, as the simulator computes it
 * (planner/simulate.h) but on the measured timeline: the compute ops of the
 * steps after the warm-up, on the console's clock (one clock for all
 * agents), where the worker's node shares cores. The measured times include
 * it, so the fitted layer times leave it out and the simulator puts it back
 * for whatever plan it runs. 0 or -1 (out of memory). */
static int measured_stretch(const pt_program *prog, const pt_topology *topo, const cev *v,
                            int64_t n, const int64_t *first, int skip, double *stretch)
{
    pt_core_span *sp = malloc((size_t)(n > 0 ? n : 1) * sizeof *sp);
    if (!sp)
        return -1;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const pt_device *d = &topo->devices[prog->workers[v[i].worker].device];
        if (d->node_cores <= 0 || !pt_op_is_compute(v[i].op) ||
            v[i].step < first[v[i].worker] + skip)
            continue;
        sp[k++] = (pt_core_span){(double)(v[i].start - v[i].off) / NS_PER_S,
                                 (double)(v[i].end - v[i].off) / NS_PER_S, v[i].worker, d->node,
                                 d->node_cores};
    }
    int rc = pt_core_stretch(sp, k, prog->worker_count, stretch);
    free(sp);
    return rc < 0 ? -1 : 0;
}

/* Whether sends hold their worker: the op after a send starts only once
 * the send has ended, for nearly every send (a runtime whose sends run
 * beside the worker starts the next op while the send is in flight). */
static int sends_hold(const cev *v, int64_t n)
{
    int64_t sends = 0, held = 0;
    for (int64_t i = 0; i + 1 < n; i++) {
        if (!(pt_op_facts(v[i].op) & PT_OPK_SEND) || v[i + 1].worker != v[i].worker ||
            v[i + 1].step != v[i].step || v[i].end <= v[i].start)
            continue;
        sends++;
        held += v[i + 1].start + PT_CAL_HOLD_SLACK_NS >= v[i].end;
    }
    return sends > 0 && (double)held >= PT_CAL_HOLD_FRACTION * (double)sends;
}

/* First index of worker's step in v (sorted by cev_cmp), or n. */
static int64_t step_begin(const cev *v, int64_t n, int worker, int64_t step)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v[mid].worker < worker || (v[mid].worker == worker && v[mid].step < step))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Seconds the ord-th all-reduce of worker's step took on that worker's
 * clock, from when it could start (its ALLREDUCE, and not before the
 * previous one ended: collectives of a worker run one after another) to
 * when it ended: the ALLREDUCE's end, or the end of the matching AR_WAIT
 * when the worker really waited there (the runtime's ALLREDUCE op only
 * queues the collective, which its AR_WAIT then waits for). -1 when it is
 * not in v. */
static double ar_span(const cev *v, int64_t n, int worker, int64_t step, int ord)
{
    int a = 0, wt = 0;
    int64_t start = -1, end = -1, prev_end = -1, prev_ar_end = -1;
    for (int64_t m = step_begin(v, n, worker, step);
         m < n && v[m].worker == worker && v[m].step == step; m++) {
        if (v[m].op == PT_OP_ALLREDUCE) {
            if (a == ord - 1)
                prev_ar_end = v[m].end;
            if (a++ == ord) {
                start = v[m].start;
                end = v[m].end;
            }
        } else if (v[m].op == PT_OP_AR_WAIT) {
            int waited = v[m].end - v[m].start > PT_CAL_HOLD_SLACK_NS;
            if (wt == ord - 1)
                prev_end = waited && v[m].end > prev_ar_end ? v[m].end : prev_ar_end;
            if (wt++ == ord && start >= 0 && waited && v[m].end > end)
                end = v[m].end;
        }
    }
    if (start >= 0 && prev_end > start)
        start = prev_end;
    return start >= 0 && end >= start ? (double)(end - start) / NS_PER_S : -1;
}

/* A point-to-point message of a step: from worker `from` to worker `to`,
 * activation or gradient, its micro-batch, and when its send ended on the
 * console's clock. */
typedef struct sent {
    int from, to, grad, mb;
    int64_t step, end;
} sent;

static int sent_cmp(const void *p, const void *q)
{
    const sent *a = p, *b = q;
    if (a->from != b->from)
        return a->from - b->from;
    if (a->to != b->to)
        return a->to - b->to;
    if (a->grad != b->grad)
        return a->grad - b->grad;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->mb - b->mb;
}

/* A p2p op of the program: worker, kind, micro-batch, its rank among the
 * worker's ops of that kind and micro-batch (a receive from each replica of
 * a replicated stage), and its peer. */
typedef struct p2p_op {
    int worker, kind, mb, nth, peer;
} p2p_op;

static int p2p_cmp(const void *p, const void *q)
{
    const p2p_op *a = p, *b = q;
    if (a->worker != b->worker)
        return a->worker - b->worker;
    if (a->kind != b->kind)
        return a->kind - b->kind;
    if (a->mb != b->mb)
        return a->mb - b->mb;
    return a->nth - b->nth;
}

/* The peer of event v[k], a p2p op (the program's op of its worker, kind,
 * micro-batch and rank among those in its worker's step, which starts at
 * v[g]); -1 when the program has none. */
static int event_peer(const p2p_op *ops, int64_t nops, const cev *v, int64_t g, int64_t k)
{
    p2p_op key = {v[k].worker, v[k].op, v[k].mb, 0, 0};
    for (int64_t q = g; q < k; q++)
        key.nth += v[q].op == v[k].op && v[q].mb == v[k].mb;
    const p2p_op *m = bsearch(&key, ops, (size_t)nops, sizeof *ops, p2p_cmp);
    return m ? m->peer : -1;
}

/* The receiver's wake-up (runtime.recv_wake_ms): over the receives of the
 * kept steps that started before their message's send ended (they waited
 * for it), the mean time from the send's end to the receive's, on the
 * console's clock. A receive's send is found through the program: its peer
 * sent the message of the same kind, step and micro-batch to it. Sets *ms
 * (0 when no receive waited) and *waits; 0 or -1 when out of memory. */
static int recv_wake(const pt_program *prog, const cev *v, int64_t n, const int64_t *first,
                     int skip, const stepfig *keep, int64_t nkeep, double *ms, int64_t *waits)
{
    *ms = 0;
    *waits = 0;
    p2p_op *ops = malloc((size_t)(prog->op_count > 0 ? prog->op_count : 1) * sizeof *ops);
    sent *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    int *peer = malloc((size_t)(n > 0 ? n : 1) * sizeof *peer); /* each event's; -1 none */
    if (!ops || !s || !peer) {
        free(ops);
        free(s);
        free(peer);
        return -1;
    }
    int64_t nops = 0, ns = 0;
    for (int w = 0; w < prog->worker_count; w++)
        for (int i = prog->workers[w].op_begin; i < prog->workers[w].op_end; i++) {
            const pt_op *op = &prog->ops[i];
            if (!(pt_op_facts(op->kind) & PT_OPK_P2P))
                continue;
            p2p_op o = {w, op->kind, op->mb, 0, op->peer};
            for (int64_t q = nops - 1; q >= 0 && ops[q].worker == w; q--)
                o.nth += ops[q].kind == o.kind && ops[q].mb == o.mb;
            ops[nops++] = o;
        }
    qsort(ops, (size_t)nops, sizeof *ops, p2p_cmp);
    for (int64_t g = 0, i = 0; i < n; i++) {
        if (v[i].worker != v[g].worker || v[i].step != v[g].step)
            g = i; /* a worker's step begins */
        unsigned f = pt_op_facts(v[i].op);
        peer[i] = (f & PT_OPK_P2P) ? event_peer(ops, nops, v, g, i) : -1;
        if (peer[i] >= 0 && (f & PT_OPK_SEND))
            s[ns++] = (sent){v[i].worker, peer[i],   v[i].op == PT_OP_SEND_GRAD,
                             v[i].mb,     v[i].step, v[i].end - v[i].off};
    }
    qsort(s, (size_t)ns, sizeof *s, sent_cmp);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const cev *e = &v[i];
        if (peer[i] < 0 || !(pt_op_facts(e->op) & PT_OPK_RECV) ||
            e->step < first[e->worker] + skip || !kept(keep, nkeep, e->step))
            continue;
        sent key = {peer[i], e->worker, e->op == PT_OP_RECV_GRAD, e->mb, e->step, 0};
        const sent *m = bsearch(&key, s, (size_t)ns, sizeof *s, sent_cmp);
        if (!m || e->start - e->off >= m->end)
            continue;
        int64_t d = e->end - e->off - m->end;
        sum += d > 0 ? (double)d / NS_PER_S : 0;
        (*waits)++;
    }
    free(ops);
    free(s);
    free(peer);
    *ms = *waits > 0 ? sum / (double)*waits * MS_PER_S : 0;
    return 0;
}

/* The samples of one fit: the program's events and what they add up to. */
typedef struct fit_ctx {
    const pt_program *prog;
    const pt_cost *cost;
    const pt_topology *topo;
    const cev *v;
    int64_t n;
    acc *st;
    int async_ar, sends_hold;
    const double *stretch;
    svec sends, ars, gaps;
    int64_t used;
    int oom;
} fit_ctx;

/* The first step of every worker (allocated), for the warm-up skip; *skip
 * shrinks so that it never leaves a worker without steps. NULL when out of
 * memory. */
static int64_t *first_steps(const pt_program *prog, const cev *v, int64_t n, int *skip)
{
    int64_t *first = malloc((size_t)prog->worker_count * sizeof *first);
    if (!first)
        return NULL;
    for (int w = 0; w < prog->worker_count; w++)
        first[w] = INT64_MAX;
    int64_t last_step = -1;
    for (int64_t i = 0; i < n; i++) {
        if (v[i].step < first[v[i].worker])
            first[v[i].worker] = v[i].step;
        if (v[i].step > last_step)
            last_step = v[i].step;
    }
    for (int w = 0; w < prog->worker_count; w++)
        if (first[w] != INT64_MAX && first[w] + *skip > last_step)
            *skip = (int)(last_step - first[w]);
    if (*skip < 0)
        *skip = 0;
    return first;
}

/* A send's sample: its bytes, on or off its node. */
static void add_send_sample(fit_ctx *f, const pt_worker *x, const cev *e, double c, double d)
{
    if (e->bytes <= 0)
        return;
    const pt_program *prog = f->prog;
    int peer_stage = x->stage + ((pt_op_facts(e->op) & PT_OPK_NEXT) ? 1 : -1);
    int peer = peer_stage >= 0 && peer_stage < prog->stage_count
                   ? prog->workers[prog->stage_worker[peer_stage]].device
                   : x->device;
    int same_node = f->topo->devices[x->device].node == f->topo->devices[peer].node;
    f->oom |= svec_add(&f->sends, same_node, (double)e->bytes, c, d);
}

/* The k-th collective of this step on this stage: the shortest replica's
 * time, which waited least for the others. */
static void add_ar_sample(fit_ctx *f, const pt_worker *x, const cev *e, double c, int ar_ord)
{
    int r = x->replica_count;
    if (r <= 1 || x->replica != 0)
        return;
    double best = -1;
    for (int q = 0; q < r; q++) {
        double dq = ar_span(f->v, f->n, f->prog->stage_worker[x->stage] + q, e->step, ar_ord);
        if (dq >= 0 && (best < 0 || dq < best))
            best = dq;
    }
    if (best >= 0)
        f->oom |= svec_add(&f->ars, 2.0 * (r - 1), 2.0 * (r - 1) / r * (double)e->bytes, c, best);
}

/* One op's sample into its stage's accumulator (or the links'); a split
 * backward's halves add to *split_s, counted in *split_n. */
static void add_op_sample(fit_ctx *f, int w, const cev *e, double c, double slow, int *ar_ord,
                          double *split_s, int *split_n)
{
    const pt_worker *x = &f->prog->workers[w];
    acc *a = &f->st[x->stage];
    const pt_cost *cost = f->cost;
    int rows = x->row_hi - x->row_lo;
    double d = (double)(e->end - e->start) / NS_PER_S;
    switch (e->op) {
    case PT_OP_FWD:
        f->oom |= svec_add(&a->fwd, 0, 0, c, d);
        a->fwd_b += slow * pt_cost_fwd_s(cost, x->first, x->last, rows, x->device);
        break;
    case PT_OP_BWD:
        f->oom |= svec_add(&a->bwd, 0, 0, c, d);
        a->bwd_b += slow * pt_cost_bwd_s(cost, x->first, x->last, rows, x->device);
        break;
    case PT_OP_BWD_INPUT:
        /* a split backward is fitted as whole backwards: the step's
         * halves summed, one sample per micro-batch (fit_step) */
        *split_s += d;
        (*split_n)++;
        a->bwd_b += slow * pt_cost_bwd_s(cost, x->first, x->last, rows, x->device);
        break;
    case PT_OP_BWD_WEIGHT:
        *split_s += d;
        break;
    case PT_OP_RECOMPUTE:
        f->oom |= svec_add(&a->rec, 0, 0, c, d);
        a->rec_b += slow * pt_cost_recompute_s(cost, x->first, x->last, rows, x->device);
        break;
    case PT_OP_OPT_STEP: {
        f->oom |= svec_add(&a->opt, 0, 0, c, d);
        /* time = slow * touched / (bw * speed) */
        int64_t P = pt_cost_param_bytes(cost, x->first, x->last);
        double speed = f->topo->devices[x->device].speed;
        a->touched = (double)P *
                     (PT_COST_OPT_BASE_PASSES +
                      PT_COST_OPT_STATE_PASSES * pt_cost_optim_state_factor(f->prog->optim)) /
                     speed * slow;
        break;
    }
    case PT_OP_SEND_ACT:
    case PT_OP_SEND_GRAD:
        add_send_sample(f, x, e, c, d);
        break;
    case PT_OP_ALLREDUCE:
        add_ar_sample(f, x, e, c, *ar_ord);
        (*ar_ord)++;
        break;
    default:
        break;
    }
}

/* One worker's one kept step, events v[i, j). */
static void fit_step(fit_ctx *f, int64_t i, int64_t j)
{
    const cev *v = f->v;
    int w = v[i].worker;
    acc *a = &f->st[f->prog->workers[w].stage];
    double slow = f->stretch[w];
    a->slow_sum += slow;
    a->slow_n++;
    int64_t cursor = -1, issued = 0; /* end of the last blocking op; ops since */
    double c = (double)w * PT_CAL_STEP_KEY + (double)v[i].step; /* this worker-step */
    int ar_ord = 0, split_n = 0;
    double split_s = 0;
    for (int64_t k = i; k < j; k++) {
        const cev *e = &v[k];
        f->used++;
        add_op_sample(f, w, e, c, slow, &ar_ord, &split_s, &split_n);
        issued++;
        if (!blocks(e->op, f->async_ar, f->sends_hold))
            continue;
        /* a collective starts when its last member joins, so the time
         * before it is partly waiting: no gap is measured there */
        if (cursor >= 0 && e->op != PT_OP_ALLREDUCE) {
            /* one sample per op issued: a step's mean is then its
             * gap time over its ops */
            int64_t g = e->start - cursor;
            double per = (g > 0 ? (double)g / NS_PER_S : 0) / (double)issued;
            for (int64_t q = 0; q < issued; q++)
                f->oom |= svec_add(&f->gaps, 0, 0, c, per);
        }
        cursor = e->end;
        issued = 0;
    }
    for (int q = 0; q < split_n; q++)
        f->oom |= svec_add(&a->bwd, 0, 0, c, split_s / split_n);
}

/* The links' fits from the sends' and collectives' samples; frees them. */
static int fit_links(fit_ctx *f, pt_cal_fit *fit, pt_error *err)
{
    const pt_topology *topo = f->topo;
    int oom = f->oom;
    if (!oom) {
        fit->events = f->used;
        fit->gaps = f->gaps.n;
        fit->op_overhead_ms = f->gaps.n > 0 ? mean_of(&f->gaps) * MS_PER_S : 0;
    }
    ls2 intra = {0}, inter = {0}, ar = {0};
    sends_ctx sc = {&intra, &inter};
    if (!oom)
        oom = svec_groups(&f->sends, add_send, &sc) < 0 || svec_groups(&f->ars, add_link, &ar) < 0;
    free(f->sends.v);
    free(f->ars.v);
    free(f->gaps.v);
    if (oom)
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    fit_link(&intra, topo->intra, &fit->intra);
    fit_link(&inter, topo->inter, &fit->inter);
    /* a collective's cost is its own: the sends' fit (on one host mostly the
     * sender's copy) says nothing of it */
    fit_link(&ar, topo->intra, &fit->allreduce);
    return 0;
}

static int fit_events(const pt_program *prog, const pt_cost *cost, const pt_topology *topo,
                      const cev *v, int64_t n, int skip, acc *st, pt_cal_fit *fit, pt_error *err)
{
    fit->first_step = INT64_MAX;
    fit->last_step = -1;
    int64_t *first = first_steps(prog, v, n, &skip);
    if (!first)
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    fit->sends_hold = sends_hold(v, n);
    stepfig *keep = NULL;
    int64_t nkeep = 0;
    double *stretch = malloc((size_t)prog->worker_count * sizeof *stretch);
    if (!stretch || measured_stretch(prog, topo, v, n, first, skip, stretch) < 0 ||
        pick_steps(v, n, first, skip, &keep, &nkeep) < 0 ||
        recv_wake(prog, v, n, first, skip, keep, nkeep, &fit->recv_wake_ms, &fit->recv_waits) < 0) {
        free(first);
        free(stretch);
        free(keep);
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    }
    fit->steps_used = nkeep;
    fit_ctx f = {.prog = prog,
                 .cost = cost,
                 .topo = topo,
                 .v = v,
                 .n = n,
                 .st = st,
                 .async_ar = pt_sched_kind_has(prog->kind, PT_SCHED_OVERLAP_ALLREDUCE),
                 .sends_hold = fit->sends_hold,
                 .stretch = stretch};
    for (int64_t i = 0; i < n;) {
        /* one worker's one step: v[i, j) */
        int64_t j = i;
        while (j < n && v[j].worker == v[i].worker && v[j].step == v[i].step)
            j++;
        if (v[i].step >= first[v[i].worker] + skip && kept(keep, nkeep, v[i].step)) {
            if (v[i].step < fit->first_step)
                fit->first_step = v[i].step;
            if (v[i].step > fit->last_step)
                fit->last_step = v[i].step;
            fit_step(&f, i, j);
        }
        i = j;
    }
    free(first);
    free(keep);
    free(stretch);
    return fit_links(&f, fit, err);
}

/* Scales the layers of one stage so its prediction equals the measurement. */
static double stage_scale(double meas, double base)
{
    return base > 0 ? meas / base : 0;
}

static void scale_layers(pt_profile *p, const pt_profile *base, const pt_cal_stage *s,
                         double fwd_mean_ms, double bwd_mean_ms, double rec_mean_ms,
                         double lin_share, double speed)
{
    int n = s->last - s->first;
    for (int l = s->first; l < s->last; l++) {
        const pt_profile_layer *b = &base->layers[l];
        pt_profile_layer *o = &p->layers[l];
        double rec = b->recompute_ms > 0 ? b->recompute_ms : b->fwd_ms;
        /* a stage whose base layers cost nothing gets the measured time
         * spread evenly (per profile micro-batch): the rows a measured op
         * covers cost f + (1 - f) * rows / microbatch of the layer's time at
         * the micro-batch (its fixed_share f, kept from the base) */
        double f = b->fixed_share > 0 && b->fixed_share < 1 ? b->fixed_share : 0;
        double rows_share = f > 0 ? lin_share / (f * lin_share + 1 - f) : lin_share;
        rows_share *= speed;
        o->fwd_ms = s->fwd_base_ms > 0 ? b->fwd_ms * s->fwd_scale : fwd_mean_ms * rows_share / n;
        o->bwd_ms = s->bwd_base_ms > 0 ? b->bwd_ms * s->bwd_scale : bwd_mean_ms * rows_share / n;
        /* the halves of a split backward move with it */
        if (b->bwd_input_ms > 0 && b->bwd_ms > 0)
            o->bwd_input_ms = b->bwd_input_ms * o->bwd_ms / b->bwd_ms;
        if (b->bwd_weight_ms > 0 && b->bwd_ms > 0)
            o->bwd_weight_ms = b->bwd_weight_ms * o->bwd_ms / b->bwd_ms;
        if (s->rec_ops > 0)
            o->recompute_ms =
                s->rec_base_ms > 0 ? rec * s->rec_scale : rec_mean_ms * rows_share / n;
        else
            o->recompute_ms = rec * s->fwd_scale;
    }
}

/* Stage s's measured means against its base predictions; scales its layers
 * in p. */
static int fit_stage(const pt_program *prog, const pt_topology *topo, const pt_profile *base,
                     int64_t gen, int skip, int s, acc *a, pt_profile *p, pt_cal_fit *fit,
                     pt_error *err)
{
    const pt_worker *x = &prog->workers[prog->stage_worker[s]];
    pt_cal_stage *c = &fit->stages[s];
    c->first = x->first;
    c->last = x->last;
    c->replicas = x->replica_count;
    c->fwd_ops = (int)a->fwd.n;
    c->bwd_ops = (int)a->bwd.n;
    c->rec_ops = (int)a->rec.n;
    c->opt_ops = (int)a->opt.n;
    if (a->fwd.n == 0 || a->bwd.n == 0)
        return pt_error_set(err, PT_EINVAL,
                            "calibrate: generation %lld: stage %d has no %s measured (after "
                            "%d warm-up steps)",
                            (long long)gen, s, pt_op_name(a->fwd.n == 0 ? PT_OP_FWD : PT_OP_BWD),
                            skip);
    c->fwd_ms = mean_of(&a->fwd) * MS_PER_S;
    c->bwd_ms = mean_of(&a->bwd) * MS_PER_S;
    c->rec_ms = a->rec.n ? mean_of(&a->rec) * MS_PER_S : 0;
    c->opt_ms = a->opt.n ? mean_of(&a->opt) * MS_PER_S : 0;
    c->fwd_base_ms = a->fwd_b / (double)a->fwd.n * MS_PER_S;
    c->bwd_base_ms = a->bwd_b / (double)a->bwd.n * MS_PER_S;
    c->rec_base_ms = a->rec.n ? a->rec_b / (double)a->rec.n * MS_PER_S : 0;
    if (c->fwd_ms < 0 || c->bwd_ms < 0 || c->rec_ms < 0 || c->opt_ms < 0)
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    c->fwd_scale = stage_scale(c->fwd_ms, c->fwd_base_ms);
    c->bwd_scale = stage_scale(c->bwd_ms, c->bwd_base_ms);
    c->rec_scale = a->rec.n ? stage_scale(c->rec_ms, c->rec_base_ms) : 1;
    /* a measured op covers rows samples; the profile's unit is its micro-batch */
    int rows = x->row_hi - x->row_lo;
    double speed = topo->devices[x->device].speed;
    double share = rows > 0 ? (double)base->microbatch / rows : 1;
    scale_layers(p, base, c, c->fwd_ms, c->bwd_ms, c->rec_ms, share, speed);
    return 0;
}

/* The optimizer's bytes per second: least squares of the stages' mean times
 * through the origin against bytes touched; 0 when none was measured. */
static double fit_optimizer(const pt_program *prog, const acc *st, const pt_cal_fit *fit)
{
    double opt_xy = 0, opt_xx = 0;
    for (int s = 0; s < prog->stage_count; s++)
        if (st[s].opt.n > 0) {
            double t = fit->stages[s].opt_ms / MS_PER_S;
            opt_xy += st[s].touched * t;
            opt_xx += st[s].touched * st[s].touched;
        }
    return opt_xy > 0 ? opt_xx / opt_xy : 0;
}

/* The calibrated profile's origin and the runtime constants of the fit. */
static void calibrated_profile(pt_profile *p, const pt_cal_fit *fit, const pt_cal_opts *o,
                               int64_t gen)
{
    snprintf(p->source, sizeof p->source, "calibrated");
    memset(&p->origin, 0, sizeof p->origin);
    snprintf(p->origin.kind, sizeof p->origin.kind, "calibrated");
    snprintf(p->origin.run, sizeof p->origin.run, "%s", o->run ? o->run : "");
    snprintf(p->origin.base, sizeof p->origin.base, "%s", o->base ? o->base : "");
    snprintf(p->origin.date, sizeof p->origin.date, "%s", o->date ? o->date : "");
    p->origin.gen = gen;
    p->op_overhead_ms = fit->op_overhead_ms;
    p->sends_hold = fit->sends_hold;
    p->recv_wake_ms = fit->recv_wake_ms;
    if (fit->allreduce.how != PT_CAL_LINK_NONE) {
        p->ar_bytes_per_s = fit->allreduce.link.bandwidth;
        p->ar_latency_s = fit->allreduce.link.latency;
    }
    if (fit->opt_bytes_per_s > 0)
        p->opt_bytes_per_s = fit->opt_bytes_per_s;
}

int pt_calibrate(const pt_record *rec, const pt_profile *base, const pt_topology *topo,
                 const pt_cal_opts *opts, pt_profile **out, pt_cal_fit *fit_out, pt_error *err)
{
    *out = NULL;
    pt_cal_fit local, *fit = fit_out ? fit_out : &local;
    memset(fit, 0, sizeof *fit);
    pt_cal_opts o = opts ? *opts : (pt_cal_opts){-1, -1, NULL, NULL, NULL};
    int skip = o.skip_steps < 0 ? PT_CAL_SKIP_STEPS_DEFAULT : o.skip_steps;
    const pt_plan *plan;
    int64_t gen;
    int rc = find_gen(rec, o.gen, &gen, &plan, err);
    if (rc < 0)
        return rc;
    if (strcmp(plan->model, base->model))
        return pt_error_set(err, PT_EINVAL,
                            "calibrate: the run's plan is for model \"%s\", the base profile for "
                            "\"%s\"",
                            plan->model, base->model);
    if (plan->layer_count != base->layer_count)
        return pt_error_set(err, PT_EINVAL,
                            "calibrate: the plan has %d layers, the base profile %d (model %s)",
                            plan->layer_count, base->layer_count, base->model);
    pt_program prog = {0};
    pt_cost *cost = NULL;
    cev *v = NULL;
    int64_t nv = 0;
    acc *st = NULL;
    pt_profile *p = NULL;
    if ((rc = pt_sched_build(plan, base, NULL, &prog, err)) < 0)
        goto done;
    for (int w = 0; w < prog.worker_count; w++)
        if (prog.workers[w].device < 0 || prog.workers[w].device >= topo->device_count) {
            rc = pt_error_set(err, PT_EINVAL,
                              "calibrate: stage %d uses device %d; the topology has %d",
                              prog.workers[w].stage, prog.workers[w].device, topo->device_count);
            goto done;
        }
    if ((rc = pt_cost_new(base, topo, &cost, err)) < 0 ||
        (rc = collect(rec, gen, &prog, &v, &nv, err)) < 0)
        goto done;
    fit->gen = gen;
    fit->stage_count = prog.stage_count;
    st = calloc((size_t)prog.stage_count, sizeof *st);
    fit->stages = calloc((size_t)prog.stage_count, sizeof *fit->stages);
    if (!st || !fit->stages) {
        rc = pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
        goto done;
    }
    if ((rc = fit_events(&prog, cost, topo, v, nv, skip, st, fit, err)) < 0)
        goto done;
    if (!(p = pt_profile_new(base->layer_count))) {
        rc = pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
        goto done;
    }
    {
        pt_profile_layer *layers = p->layers;
        *p = *base;
        p->layers = layers;
        memcpy(p->layers, base->layers, (size_t)base->layer_count * sizeof *p->layers);
    }
    for (int s = 0; s < prog.stage_count; s++)
        if ((rc = fit_stage(&prog, topo, base, gen, skip, s, &st[s], p, fit, err)) < 0)
            goto done;
    fit->opt_bytes_per_s = fit_optimizer(&prog, st, fit);
    calibrated_profile(p, fit, &o, gen);
done:
    for (int s = 0; st && s < prog.stage_count; s++)
        acc_free(&st[s]);
    free(st);
    free(v);
    pt_cost_free(&cost);
    pt_program_release(&prog);
    if (rc < 0) {
        pt_profile_free(&p);
        pt_cal_fit_clear(fit);
    }
    if (fit == &local)
        pt_cal_fit_clear(&local);
    *out = p;
    return rc;
}

int pt_cal_topology(const pt_cal_fit *fit, const pt_topology *topo, pt_topology **out,
                    pt_error *err)
{
    *out = NULL;
    char *text = pt_topology_to_json(topo);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    int rc = pt_topology_parse(text, "calibrated topology", out, err);
    free(text);
    if (rc < 0)
        return rc;
    pt_topology *t = *out;
    if (fit->intra.how != PT_CAL_LINK_NONE)
        t->intra = fit->intra.link;
    else if (fit->allreduce.how != PT_CAL_LINK_NONE && fit->inter.how == PT_CAL_LINK_NONE)
        t->intra = fit->allreduce.link;
    if (fit->inter.how != PT_CAL_LINK_NONE)
        t->inter = fit->inter.link;
    return 0;
}

static double layer_factor(double cal_ms, double base_ms)
{
    return base_ms > 0 ? cal_ms / base_ms : 1.0;
}

int pt_cal_rebase(const pt_profile *cal, const pt_profile *cal_base, const pt_profile *onto,
                  pt_profile **out, pt_error *err)
{
    *out = NULL;
    if (strcmp(cal->model, cal_base->model) || strcmp(cal->model, onto->model) ||
        cal->layer_count != cal_base->layer_count || cal->layer_count != onto->layer_count)
        return pt_error_set(err, PT_EINVAL,
                            "calibrate: rebase: the profiles are of models \"%s\", \"%s\" and "
                            "\"%s\" with %d, %d and %d layers; they must be one model's",
                            cal->model, cal_base->model, onto->model, cal->layer_count,
                            cal_base->layer_count, onto->layer_count);
    if (cal->microbatch != cal_base->microbatch || cal->microbatch != onto->microbatch)
        return pt_error_set(err, PT_EINVAL, "calibrate: rebase: micro-batches %d, %d and %d differ",
                            cal->microbatch, cal_base->microbatch, onto->microbatch);
    pt_profile *p = pt_profile_new(onto->layer_count);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "calibrate: out of memory");
    pt_profile_layer *layers = p->layers;
    *p = *cal;
    p->layers = layers;
    snprintf(p->device, sizeof p->device, "%s", onto->device);
    p->input_bytes = onto->input_bytes;
    /* one factor per kind for the whole model: the new conditions' total
     * over the old ones' (1 when both were measured on one device string,
     * the same conditions); a per-layer ratio of two noisy profiles would
     * carry each layer's measurement noise twice */
    int same = !strcmp(cal_base->device, onto->device);
    double of = 0, bf = 0, ob = 0, bb = 0, orc = 0, brc = 0;
    for (int l = 0; l < onto->layer_count; l++) {
        const pt_profile_layer *b = &cal_base->layers[l], *n = &onto->layers[l];
        of += n->fwd_ms;
        bf += b->fwd_ms;
        ob += n->bwd_ms;
        bb += b->bwd_ms;
        orc += n->recompute_ms > 0 ? n->recompute_ms : n->fwd_ms;
        brc += b->recompute_ms > 0 ? b->recompute_ms : b->fwd_ms;
    }
    double ff = same ? 1 : layer_factor(of, bf), fb = same ? 1 : layer_factor(ob, bb),
           fr = same ? 1 : layer_factor(orc, brc);
    for (int l = 0; l < onto->layer_count; l++) {
        const pt_profile_layer *c = &cal->layers[l], *n = &onto->layers[l];
        pt_profile_layer *o = &p->layers[l];
        *o = *n;
        o->fwd_ms = c->fwd_ms * ff;
        o->bwd_ms = c->bwd_ms * fb;
        o->recompute_ms = (c->recompute_ms > 0 ? c->recompute_ms : c->fwd_ms) * fr;
        if (o->split) {
            double sum = n->bwd_input_ms + n->bwd_weight_ms;
            double in = sum > 0 ? n->bwd_input_ms / sum : 0.5;
            o->bwd_input_ms = o->bwd_ms * in;
            o->bwd_weight_ms = o->bwd_ms * (1 - in);
        }
    }
    *out = p;
    return 0;
}
