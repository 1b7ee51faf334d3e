/* Profiler traces as a run record (see trace_import.h). */
#include "tui/cli/trace_import.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/message.h"
#include "protocol/op.h"
#include "protocol/record.h"
#include "tui/cli/torch_bridge.h"

#define NS_PER_US     1000.0
#define BASE_NS       1000000000LL /* the first op's start on the record's clock */
#define IMPORT_HB_MS  250          /* the session line's figures: a console's defaults */
#define IMPORT_MISSED 12

void pt_ti_release(pt_ti_run *run)
{
    free(run->owner);
    free(run->offset_us);
    free(run->lo_us);
    free(run->hi_us);
    run->owner = NULL;
    run->offset_us = run->lo_us = run->hi_us = NULL;
}

static int order_ranks(pt_ti_run *run, pt_tt_trace *traces, const char **names, int n,
                       pt_error *err)
{
    for (int i = 0; i < n; i++) {
        if (traces[i].rank < 0)
            return pt_error_set(err, PT_EINVAL,
                                "%s: no rank: the trace has no distributedInfo.rank; give --rank",
                                names[i]);
        if (traces[i].rank >= n)
            return pt_error_set(err, PT_EINVAL,
                                "%s: rank %d, but %d traces were given (one per rank 0..%d)",
                                names[i], traces[i].rank, n, n - 1);
        for (int j = 0; j < i; j++)
            if (traces[j].rank == traces[i].rank)
                return pt_error_set(err, PT_EINVAL, "%s and %s are both rank %d", names[j],
                                    names[i], traces[i].rank);
    }
    for (int i = 0; i < n; i++) /* a permutation: swap each into its place */
        while (traces[i].rank != i) {
            int r = traces[i].rank;
            pt_tt_trace t = traces[r];
            const char *nm = names[r];
            traces[r] = traces[i];
            names[r] = names[i];
            traces[i] = t;
            names[i] = nm;
        }
    run->traces = traces;
    run->names = names;
    run->ranks = n;
    return 0;
}

int pt_ti_gather(pt_ti_run *run, pt_tt_trace *traces, const char **names, int n, pt_error *err)
{
    memset(run, 0, sizeof *run);
    int rc = order_ranks(run, traces, names, n, err);
    for (int r = 0; rc == 0 && r < n; r++) {
        int64_t k = pt_tt_assign_steps(&traces[r]);
        if (k < 0)
            return pt_error_set(err, PT_ENOMEM, "out of memory");
        run->steps = k > run->steps ? k : run->steps;
        for (int i = 0; i < traces[r].op_count; i++) {
            const pt_tt_op *o = &traces[r].ops[i];
            run->stages = o->stage + 1 > run->stages ? o->stage + 1 : run->stages;
            run->microbatches = o->mb + 1 > run->microbatches ? o->mb + 1 : run->microbatches;
            run->split |= o->kind == PT_OP_BWD_INPUT || o->kind == PT_OP_BWD_WEIGHT;
        }
    }
    if (rc == 0 && run->stages == 0)
        return pt_error_set(err, PT_EINVAL,
                            "no labelled op in any trace (PP:<stage><F|B|I|W><mb>, Forward <mb>, "
                            "or --label)");
    run->owner = rc == 0 ? malloc((size_t)run->stages * sizeof *run->owner) : NULL;
    run->offset_us = rc == 0 ? calloc((size_t)n, sizeof *run->offset_us) : NULL;
    run->lo_us = rc == 0 ? malloc((size_t)n * sizeof *run->lo_us) : NULL;
    run->hi_us = rc == 0 ? malloc((size_t)n * sizeof *run->hi_us) : NULL;
    if (rc == 0 && (!run->owner || !run->offset_us || !run->lo_us || !run->hi_us))
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int s = 0; rc == 0 && s < run->stages; s++)
        run->owner[s] = -1;
    for (int r = 0; rc == 0 && r < n; r++) {
        run->lo_us[r] = run->hi_us[r] = NAN;
        for (int i = 0; rc == 0 && i < traces[r].op_count; i++) {
            int s = traces[r].ops[i].stage;
            if (run->owner[s] >= 0 && run->owner[s] != r)
                rc = pt_error_set(err, PT_EINVAL,
                                  "stage %d has ops in %s (rank %d) and %s (rank %d): a stage "
                                  "runs on one rank",
                                  s, names[run->owner[s]], run->owner[s], names[r], r);
            run->owner[s] = r;
        }
    }
    for (int s = 0; rc == 0 && s < run->stages; s++)
        if (run->owner[s] < 0)
            rc = pt_error_set(err, PT_EINVAL,
                              "stage %d has no op in any trace (stages 0..%d are "
                              "named)",
                              s, run->stages - 1);
    if (rc < 0)
        pt_ti_release(run);
    return rc;
}

/* ---- one clock ------------------------------------------------------------------------- */

/* An op found by (stage, forward or backward, micro-batch, iteration). */
typedef struct op_key {
    int stage, back, mb;
    int64_t step;
    int index;
} op_key;

static int cmp_key(const void *a, const void *b)
{
    const op_key *x = a, *y = b;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    if (x->back != y->back)
        return x->back < y->back ? -1 : 1;
    if (x->mb != y->mb)
        return x->mb < y->mb ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

/* F (back 0) and B or I (back 1) ops of a trace, sorted for lookup. */
static op_key *index_ops(const pt_tt_trace *t, int *n)
{
    op_key *k = malloc((size_t)(t->op_count > 0 ? t->op_count : 1) * sizeof *k);
    *n = 0;
    for (int i = 0; k && i < t->op_count; i++) {
        int kind = t->ops[i].kind;
        if (kind == PT_OP_FWD || kind == PT_OP_BWD || kind == PT_OP_BWD_INPUT)
            k[(*n)++] =
                (op_key){t->ops[i].stage, kind != PT_OP_FWD, t->ops[i].mb, t->ops[i].step, i};
    }
    if (k)
        qsort(k, (size_t)*n, sizeof *k, cmp_key);
    return k;
}

static const pt_tt_op *find_op(const pt_tt_trace *t, const op_key *idx, int n, op_key want)
{
    const op_key *k = bsearch(&want, idx, (size_t)n, sizeof *idx, cmp_key);
    return k ? &t->ops[k->index] : NULL;
}

/* The interval of rank b's offset relative to rank a's that the hand-offs
 * between stage s (on a) and s+1 (on b) allow: *lo <= off_b - off_a <= *hi
 * (NAN when no hand-off bounds that side). */
static void handoff_bounds(const pt_ti_run *run, int s, const op_key *ia, int na, double *lo,
                           double *hi)
{
    const pt_tt_trace *a = &run->traces[run->owner[s]], *b = &run->traces[run->owner[s + 1]];
    *lo = *hi = NAN;
    for (int i = 0; i < b->op_count; i++) {
        const pt_tt_op *o = &b->ops[i];
        if (o->stage != s + 1)
            continue;
        int back = o->kind == PT_OP_BWD || o->kind == PT_OP_BWD_INPUT;
        if (o->kind != PT_OP_FWD && !back)
            continue;
        const pt_tt_op *p = find_op(a, ia, na, (op_key){s, back, o->mb, o->step, 0});
        if (!p)
            continue;
        if (!back) { /* o starts after p ended: off_b - off_a >= p.end - o.start */
            double v = p->ts + p->dur - o->ts;
            *lo = isnan(*lo) || v > *lo ? v : *lo;
        } else { /* p starts after o ended: off_b - off_a <= p.start - o.end */
            double v = p->ts - (o->ts + o->dur);
            *hi = isnan(*hi) || v < *hi ? v : *hi;
        }
    }
}

void pt_ti_align(pt_ti_run *run)
{
    int *done = calloc((size_t)run->ranks, sizeof *done);
    if (!done)
        return;
    done[run->owner[0]] = 1;
    for (int s = 0; s + 1 < run->stages; s++) {
        int a = run->owner[s], b = run->owner[s + 1];
        if (a == b || !done[a] || done[b])
            continue;
        int na = 0;
        op_key *ia = index_ops(&run->traces[a], &na);
        double lo, hi;
        if (!ia)
            break;
        handoff_bounds(run, s, ia, na, &lo, &hi);
        free(ia);
        double rel = isnan(lo) && isnan(hi) ? 0 : isnan(lo) ? hi : isnan(hi) ? lo : (lo + hi) / 2;
        if (!isnan(lo) && !isnan(hi) && run->traces[a].kineto && run->traces[b].kineto && lo <= 0 &&
            0 <= hi)
            rel = 0; /* one host clock, and nothing contradicts it */
        run->offset_us[b] = run->offset_us[a] + rel;
        run->lo_us[b] = run->offset_us[a] + lo;
        run->hi_us[b] = run->offset_us[a] + hi;
        done[b] = 1;
    }
    free(done);
}

/* ---- the plan -------------------------------------------------------------------------- */

/* 1 when the first stage runs every forward of its first iteration before
 * any backward of it (GPipe's order). */
static int forwards_first(const pt_ti_run *run)
{
    const pt_tt_trace *t = &run->traces[run->owner[0]];
    double last_f = -1, first_b = INFINITY;
    for (int i = 0; i < t->op_count; i++) {
        const pt_tt_op *o = &t->ops[i];
        if (o->stage != 0 || o->step != 0)
            continue;
        if (o->kind == PT_OP_FWD)
            last_f = o->ts > last_f ? o->ts : last_f;
        else if (o->kind == PT_OP_BWD || o->kind == PT_OP_BWD_INPUT)
            first_b = o->ts < first_b ? o->ts : first_b;
    }
    return run->microbatches > 1 && last_f >= 0 && last_f < first_b;
}

int pt_ti_infer_plan(const pt_ti_run *run, const char *model, int mb_size, pt_plan **out, char *why,
                     size_t cap, pt_error *err)
{
    *out = NULL;
    int S = run->stages, P = run->ranks;
    if (S > P && S % P != 0)
        return pt_error_set(err, PT_EINVAL,
                            "%d stages on %d ranks is no interleaved placement: give --plan", S, P);
    for (int s = 0; s < S; s++)
        if (run->owner[s] != s % P)
            return pt_error_set(err, PT_EINVAL,
                                "stage %d runs on rank %d, not rank %d (stage s on rank s mod %d): "
                                "give --plan",
                                s, run->owner[s], s % P, P);
    pt_plan *p = pt_plan_new(S);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    snprintf(p->model, sizeof p->model, "%s", model);
    p->layer_count = S;
    p->microbatch_size = mb_size;
    p->microbatch_count = run->microbatches;
    p->chunks = S > P ? S / P : 1;
    p->schedule = S > P                 ? PT_SCHED_INTERLEAVED
                  : run->split          ? PT_SCHED_ZB_H1
                  : forwards_first(run) ? PT_SCHED_GPIPE
                                        : PT_SCHED_1F1B_FLUSH;
    int rc = 0;
    for (int s = 0; rc == 0 && s < S; s++) {
        int dev = s % P;
        p->stages[s].first = s;
        p->stages[s].last = s + 1;
        rc = pt_plan_set_replicas(p, s, &dev, 1);
    }
    if (rc == 0)
        rc = pt_plan_check(p, NULL, NULL, "the inferred plan", err);
    if (rc < 0) {
        pt_plan_free(&p);
        return rc;
    }
    snprintf(why, cap, "%s (%s), %d stages on %d ranks, %d micro-batches of %d samples",
             pt_sched_kind_name(p->schedule),
             S > P                           ? "more stages than ranks"
             : run->split                    ? "the backward is split into I and W"
             : p->schedule == PT_SCHED_GPIPE ? "every forward before the first backward"
                                             : "a backward before the last forward",
             S, P, run->microbatches, mb_size);
    *out = p;
    return 0;
}

int pt_ti_check_plan(const pt_ti_run *run, const pt_plan *plan, const char *source, pt_error *err)
{
    int P = pt_plan_rank_count(plan);
    if (plan->stage_count != run->stages)
        return pt_error_set(err, PT_EINVAL, "%s: stages: %d stages, the traces name %d", source,
                            plan->stage_count, run->stages);
    if (plan->microbatch_count != run->microbatches)
        return pt_error_set(err, PT_EINVAL,
                            "%s: microbatch.count: %d, the traces name %d micro-batches", source,
                            plan->microbatch_count, run->microbatches);
    if (P != run->ranks)
        return pt_error_set(err, PT_EINVAL, "%s: %d pipeline ranks, but %d traces", source, P,
                            run->ranks);
    for (int s = 0; s < plan->stage_count; s++) {
        if (plan->stages[s].replica_count != 1)
            return pt_error_set(err, PT_EINVAL,
                                "%s: stages[%d].replicas: %d; import-trace reads one trace per "
                                "pipeline rank (no data-parallel replicas)",
                                source, s, plan->stages[s].replica_count);
        if (run->owner[s] != s % P)
            return pt_error_set(err, PT_EINVAL,
                                "%s: stages[%d]: the plan runs it on pipeline rank %d, the traces "
                                "on rank %d",
                                source, s, s % P, run->owner[s]);
    }
    return 0;
}

/* ---- the profile and the summary ------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median duration (ms) of stage s's ops of kind, 0 when none. */
static double median_ms(const pt_ti_run *run, int s, int kind)
{
    const pt_tt_trace *t = &run->traces[run->owner[s]];
    double *v = malloc((size_t)(t->op_count > 0 ? t->op_count : 1) * sizeof *v);
    int n = 0;
    for (int i = 0; v && i < t->op_count; i++)
        if (t->ops[i].stage == s && t->ops[i].kind == kind)
            v[n++] = t->ops[i].dur / 1e3;
    double m = 0;
    if (n > 0) {
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
    free(v);
    return m;
}

int pt_ti_profile(const pt_ti_run *run, const pt_plan *plan, pt_profile **out, pt_error *err)
{
    *out = NULL;
    if (plan->layer_count != run->stages)
        return pt_error_set(err, PT_EINVAL,
                            "the plan has %d layers for %d stages: give --profile (the traces time "
                            "stages, not layers)",
                            plan->layer_count, run->stages);
    pt_profile *p = pt_profile_new(run->stages);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    snprintf(p->model, sizeof p->model, "%s", plan->model);
    snprintf(p->device, sizeof p->device, "a PyTorch run's profiler traces");
    snprintf(p->source, sizeof p->source, "measured");
    snprintf(p->origin.kind, sizeof p->origin.kind, "measured");
    snprintf(p->origin.framework, sizeof p->origin.framework, "torch profiler trace");
    p->microbatch = plan->microbatch_size;
    for (int s = 0; s < run->stages; s++) {
        pt_profile_layer *l = &p->layers[s];
        snprintf(l->name, sizeof l->name, "stage%d", s);
        l->fwd_ms = l->recompute_ms = median_ms(run, s, PT_OP_FWD);
        l->bwd_ms = median_ms(run, s, PT_OP_BWD);
        if (run->split) {
            l->split = 1;
            l->bwd_input_ms = median_ms(run, s, PT_OP_BWD_INPUT);
            l->bwd_weight_ms = median_ms(run, s, PT_OP_BWD_WEIGHT);
            l->bwd_ms = l->bwd_input_ms + l->bwd_weight_ms;
        }
    }
    *out = p;
    return 0;
}

double pt_ti_busy_us(const pt_ti_run *run, int stage, int64_t *ops)
{
    const pt_tt_trace *t = &run->traces[run->owner[stage]];
    double busy = 0;
    *ops = 0;
    for (int i = 0; i < t->op_count; i++)
        if (t->ops[i].stage == stage) {
            (*ops)++;
            if (pt_op_is_compute(t->ops[i].kind))
                busy += t->ops[i].dur;
        }
    return busy;
}

/* ---- the run record -------------------------------------------------------------------- */

typedef struct rec_ctx {
    const pt_ti_run *run;
    const pt_plan *plan;
    pt_record_writer *w;
    double base_us;        /* the earliest aligned start */
    double *lo_us, *hi_us; /* [steps]: each iteration's aligned span */
    int **order;           /* [ranks]: op indices by (step, start) */
    int *next;             /* [ranks]: the next of order to write */
    int64_t *seq;          /* [ranks]: telemetry sequence numbers */
    pt_msg_event *ev;      /* scratch, PT_MSG_MAX_EVENTS */
    pt_error *err;
} rec_ctx;

/* An op's place in the write order: by iteration, then start. */
typedef struct ord {
    int64_t step;
    double ts;
    int index;
} ord;

static int cmp_ord(const void *a, const void *b)
{
    const ord *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* Rank r's op indices by (iteration, start) into c->order[r]. */
static int sort_rank(rec_ctx *c, int r)
{
    const pt_tt_trace *t = &c->run->traces[r];
    size_t n = (size_t)(t->op_count > 0 ? t->op_count : 1);
    ord *o = malloc(n * sizeof *o);
    c->order[r] = malloc(n * sizeof(int));
    if (!o || !c->order[r]) {
        free(o);
        return PT_ENOMEM;
    }
    for (int i = 0; i < t->op_count; i++)
        o[i] = (ord){t->ops[i].step, t->ops[i].ts, i};
    qsort(o, (size_t)t->op_count, sizeof *o, cmp_ord);
    for (int i = 0; i < t->op_count; i++)
        c->order[r][i] = o[i].index;
    free(o);
    return 0;
}

static int64_t to_ns(const rec_ctx *c, int rank, double us)
{
    return BASE_NS + llround((us + c->run->offset_us[rank] - c->base_us) * NS_PER_US);
}

static int frame(rec_ctx *c, int rank, pt_msg *m)
{
    snprintf(m->agent, sizeof m->agent, "rank%d", rank);
    m->seq = c->seq[rank]++;
    m->gen = 1;
    char *text = NULL;
    size_t len = 0;
    int rc = pt_msg_encode(m, &text, &len, c->err);
    if (rc == 0)
        rc = pt_record_write_frame(c->w, PT_RECORD_RECV, "telemetry", 0, text, len);
    free(text);
    return rc < 0 && !c->err->msg[0] ? pt_error_set(c->err, rc, "run record: write failed") : rc;
}

/* Rank r's ops of iteration k, as events messages. */
static int write_events(rec_ctx *c, int r, int64_t k)
{
    const pt_tt_trace *t = &c->run->traces[r];
    int n = 0, rc = 0;
    while (rc == 0 && c->next[r] < t->op_count && t->ops[c->order[r][c->next[r]]].step == k) {
        const pt_tt_op *o = &t->ops[c->order[r][c->next[r]++]];
        int64_t s = to_ns(c, r, o->ts);
        c->ev[n++] = (pt_msg_event){
            o->stage, 0, k, o->mb, (pt_op_kind)o->kind, -1, s, s + llround(o->dur * NS_PER_US), 0};
        int last = c->next[r] == t->op_count || t->ops[c->order[r][c->next[r]]].step != k;
        if (n == PT_MSG_MAX_EVENTS || (last && n > 0)) {
            pt_msg m;
            pt_msg_init(&m, PT_MSG_EVENTS, NULL);
            m.u.events.count = n;
            m.u.events.events = c->ev;
            rc = frame(c, r, &m); /* the events stay ours: no pt_msg_clear */
            n = 0;
        }
    }
    return rc;
}

/* One metrics message per stage of rank r for iteration k: no loss (a trace
 * has none), the iteration's span over every rank. */
static int write_metrics(rec_ctx *c, int r, int64_t k)
{
    double iter_ms = (c->hi_us[k] - c->lo_us[k]) / 1e3;
    double samples = (double)c->plan->microbatch_size * c->plan->microbatch_count;
    int rc = 0;
    for (int s = 0; rc == 0 && s < c->run->stages; s++) {
        if (c->run->owner[s] != r || !(iter_ms > 0))
            continue;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_METRICS, NULL);
        m.u.metrics.stage = s;
        m.u.metrics.step = k;
        m.u.metrics.loss = NAN;
        m.u.metrics.iter_ms = iter_ms;
        m.u.metrics.samples_per_s = samples / (iter_ms / 1e3);
        rc = frame(c, r, &m);
    }
    return rc;
}

/* The iterations' spans and the ops' write order. */
static int rec_prepare(rec_ctx *c)
{
    const pt_ti_run *run = c->run;
    int64_t K = run->steps > 0 ? run->steps : 1;
    c->lo_us = malloc((size_t)K * sizeof *c->lo_us);
    c->hi_us = malloc((size_t)K * sizeof *c->hi_us);
    c->order = calloc((size_t)run->ranks, sizeof *c->order);
    c->next = calloc((size_t)run->ranks, sizeof *c->next);
    c->seq = calloc((size_t)run->ranks, sizeof *c->seq);
    c->ev = malloc(PT_MSG_MAX_EVENTS * sizeof *c->ev);
    if (!c->lo_us || !c->hi_us || !c->order || !c->next || !c->seq || !c->ev)
        return pt_error_set(c->err, PT_ENOMEM, "out of memory");
    c->base_us = INFINITY;
    for (int64_t k = 0; k < K; k++) {
        c->lo_us[k] = INFINITY;
        c->hi_us[k] = -INFINITY;
    }
    for (int r = 0; r < run->ranks; r++) {
        const pt_tt_trace *t = &run->traces[r];
        if (sort_rank(c, r) < 0)
            return pt_error_set(c->err, PT_ENOMEM, "out of memory");
        for (int i = 0; i < t->op_count; i++) {
            const pt_tt_op *o = &t->ops[i];
            double a = o->ts + run->offset_us[r], b = a + o->dur;
            c->base_us = a < c->base_us ? a : c->base_us;
            c->lo_us[o->step] = a < c->lo_us[o->step] ? a : c->lo_us[o->step];
            c->hi_us[o->step] = b > c->hi_us[o->step] ? b : c->hi_us[o->step];
        }
    }
    return 0;
}

static void rec_free(rec_ctx *c)
{
    for (int r = 0; c->order && r < c->run->ranks; r++)
        free(c->order[r]);
    free(c->order);
    free(c->lo_us);
    free(c->hi_us);
    free(c->next);
    free(c->seq);
    free(c->ev);
}

/* The session line, the plan (generation 1) with one worker per rank, and
 * the ranks as agents. */
static int write_head(rec_ctx *c, const pt_profile *profile, const char *path)
{
    const pt_ti_run *run = c->run;
    pt_record_session ses = {"import-trace", "import-trace", IMPORT_HB_MS, IMPORT_MISSED};
    int rc = pt_record_writer_open(path, &ses, &c->w, c->err);
    /* an imported trace is read for its detail: every step verbatim */
    if (rc == 0 && (rc = pt_record_writer_set_fold(c->w, NULL, 1)) < 0)
        pt_error_set(c->err, rc, "out of memory");
    pt_model_spec *model = NULL;
    pt_record_worker *wk = calloc((size_t)run->ranks, sizeof *wk);
    if (rc == 0 && !wk)
        rc = pt_error_set(c->err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_torch_standin_model(profile, &model, c->err);
    for (int r = 0; rc == 0 && r < run->ranks; r++) {
        wk[r] = (pt_record_worker){r, "", r, 0, 0};
        snprintf(wk[r].agent, sizeof wk[r].agent, "rank%d", r);
    }
    pt_record_plan rp = {1, c->plan, model, "torch", 0, NULL, 0, 0, run->ranks, wk};
    if (rc == 0 && (rc = pt_record_write_plan(c->w, &rp)) < 0)
        pt_error_set(c->err, rc, "%s: cannot write the plan entry", path);
    for (int r = 0; rc == 0 && r < run->ranks; r++)
        rc = pt_record_write_agent(c->w, wk[r].agent, "running", -1);
    pt_model_spec_free(&model);
    free(wk);
    return rc;
}

int pt_ti_write_record(const pt_ti_run *run, const pt_plan *plan, const pt_profile *profile,
                       const char *path, pt_error *err)
{
    rec_ctx c = {.run = run, .plan = plan, .err = err};
    int rc = rec_prepare(&c);
    if (rc == 0)
        rc = write_head(&c, profile, path);
    for (int64_t k = 0; rc == 0 && k < run->steps; k++)
        for (int r = 0; rc == 0 && r < run->ranks; r++)
            if ((rc = write_events(&c, r, k)) == 0)
                rc = write_metrics(&c, r, k);
    for (int r = 0; rc == 0 && r < run->ranks; r++) {
        char agent[16];
        snprintf(agent, sizeof agent, "rank%d", r);
        rc = pt_record_write_agent(c.w, agent, "idle", run->steps - 1);
    }
    char summary[128];
    snprintf(summary, sizeof summary, "{\"imported\":%d,\"steps_measured\":%lld}", run->ranks,
             (long long)run->steps);
    if (rc == 0)
        rc = pt_record_write_json(c.w, "summary", summary);
    if (rc == 0 && (rc = pt_record_flush(c.w)) < 0)
        pt_record_writer_failed(c.w, err);
    if (rc < 0 && !err->msg[0])
        pt_error_set(err, rc, "%s: cannot write the run record", path);
    pt_record_writer_close(&c.w);
    rec_free(&c);
    return rc;
}
