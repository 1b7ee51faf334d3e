/* Helpers shared by the planners (see plan_util.h). */
#include "planner/plan_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/schedule.h"

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int pu_microbatch_candidates(const pt_planner_opts *opts, int global_batch, int max, int *out)
{
    if (max > PT_PLANNER_MB_CHOICES_MAX)
        max = PT_PLANNER_MB_CHOICES_MAX;
    if (max < 1 || global_batch < 1)
        return 0;
    int n = 0;
    if (opts && opts->microbatch_size_count > 0) {
        for (int i = 0; i < opts->microbatch_size_count && n < max; i++) {
            int b = opts->microbatch_sizes[i], dup = 0;
            for (int k = 0; k < n; k++)
                dup |= out[k] == b;
            if (!dup && b >= 1 && global_batch % b == 0)
                out[n++] = b;
        }
        qsort(out, (size_t)n, sizeof *out, cmp_int);
        return n;
    }
    /* every divisor, ascending (small and large halves) */
    /* an int below 2^31 has at most 1600 divisors, 800 on each side of its root */
    int lo[1024], hi[1024], nl = 0, nh = 0;
    for (int64_t d = 1; d * d <= global_batch; d++) {
        if (global_batch % d)
            continue;
        if (nl < 1024)
            lo[nl++] = (int)d;
        if (d * d != global_batch && nh < 1024)
            hi[nh++] = (int)(global_batch / d);
    }
    int merged[2048];
    int m = 0;
    for (int i = 0; i < nl; i++)
        merged[m++] = lo[i];
    for (int i = nh - 1; i >= 0; i--)
        merged[m++] = hi[i];
    if (m <= max) {
        memcpy(out, merged, (size_t)m * sizeof *out);
        return m;
    }
    /* thin: pick `max` divisors nearest to log-spaced targets, keeping both ends */
    double l0 = log((double)merged[0]), l1 = log((double)merged[m - 1]);
    int last = -1;
    for (int k = 0; k < max; k++) {
        double target = l0 + (l1 - l0) * k / (max - 1);
        int best = -1;
        double bd = 1e300;
        for (int i = last + 1; i < m; i++) {
            double d = fabs(log((double)merged[i]) - target);
            if (d < bd) {
                bd = d;
                best = i;
            }
        }
        if (best < 0)
            break;
        out[n++] = merged[best];
        last = best;
    }
    if (n > 0 && out[n - 1] != merged[m - 1])
        out[n - 1] = merged[m - 1];
    return n;
}

double pu_boundary_s(pt_link link, int src_r, int dst_r, int mb_rows, int64_t mb_bytes,
                     int profile_mb)
{
    if (src_r < 1 || dst_r < 1 || profile_mb < 1)
        return 0;
    double worst = 0;
    for (int j = 0; j < src_r; j++) {
        int slo = (int)((int64_t)mb_rows * j / src_r);
        int shi = (int)((int64_t)mb_rows * (j + 1) / src_r);
        /* destinations overlapping [slo, shi): k from floor(slo*dst_r/mb_rows) */
        double t = 0;
        int k0 = mb_rows > 0 ? (int)((int64_t)slo * dst_r / mb_rows) : 0;
        for (int k = k0 > 0 ? k0 - 1 : 0; k < dst_r; k++) {
            int dlo = (int)((int64_t)mb_rows * k / dst_r);
            int dhi = (int)((int64_t)mb_rows * (k + 1) / dst_r);
            if (dlo >= shi)
                break;
            int lo = slo > dlo ? slo : dlo, hi = shi < dhi ? shi : dhi;
            if (lo < hi)
                t += pt_cost_link_s(link, mb_bytes * (hi - lo) / profile_mb);
        }
        if (t > worst)
            worst = t;
    }
    return worst;
}

static double stage_time(const pt_cost *cost, int i, int j, int pmb, double speed, int recompute)
{
    double t = pt_cost_fwd_s(cost, i, j, pmb, -1) + pt_cost_bwd_s(cost, i, j, pmb, -1);
    if (recompute)
        t += pt_cost_recompute_s(cost, i, j, pmb, -1);
    return t / speed;
}

double pu_balanced_partition(const pt_cost *cost, int n, int S, const double *speeds, int recompute,
                             int *cuts, int *rc)
{
    *rc = 0;
    if (S < 1 || S > n) {
        *rc = PT_EINVAL;
        return 0;
    }
    int pmb = pt_cost_profile(cost)->microbatch;
    /* best[s][j]: slowest stage of the best split of layers [0,j) into s+1
     * stages; arg[s][j]: where its last stage starts. */
    size_t cells = (size_t)S * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best);
    int *arg = malloc(cells * sizeof *arg);
    if (!best || !arg) {
        free(best);
        free(arg);
        *rc = PT_ENOMEM;
        return 0;
    }
    for (size_t c = 0; c < cells; c++) {
        best[c] = INFINITY;
        arg[c] = -1;
    }
    double sp0 = speeds ? speeds[0] : 1.0;
    for (int j = 1; j <= n - (S - 1); j++) {
        best[j] = stage_time(cost, 0, j, pmb, sp0, recompute);
        arg[j] = 0;
    }
    for (int s = 1; s < S; s++) {
        double sp = speeds ? speeds[s] : 1.0;
        double *prev = best + (size_t)(s - 1) * (n + 1), *cur = best + (size_t)s * (n + 1);
        int *ca = arg + (size_t)s * (n + 1);
        /* stage s ends at j, starts at i in [s, j); layers after j must fill S-1-s stages */
        for (int j = s + 1; j <= n - (S - 1 - s); j++) {
            double b = INFINITY;
            int bi = -1;
            for (int i = j - 1; i >= s; i--) {
                double t = stage_time(cost, i, j, pmb, sp, recompute);
                if (t >= b)
                    break; /* the stage only grows as i falls */
                double v = prev[i] > t ? prev[i] : t;
                if (v <= b) {
                    b = v;
                    bi = i;
                }
            }
            cur[j] = b;
            ca[j] = bi;
        }
    }
    double result = best[(size_t)(S - 1) * (n + 1) + n];
    cuts[S] = n;
    int j = n;
    for (int s = S - 1; s >= 1; s--) {
        int i = arg[(size_t)s * (n + 1) + j];
        cuts[s] = i;
        j = i;
    }
    cuts[0] = 0;
    free(best);
    free(arg);
    return result;
}

pt_plan *pu_plan_alloc(const pt_profile *profile, int S, const int *cuts, pt_sched_kind kind,
                       int mb_size, int mb_count, pt_optim_kind optim)
{
    pt_plan *p = pt_plan_new(S);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "%s", profile->model);
    p->layer_count = profile->layer_count;
    for (int s = 0; s < S; s++) {
        p->stages[s].first = cuts[s];
        p->stages[s].last = cuts[s + 1];
        p->stages[s].recompute = 0;
    }
    p->microbatch_size = mb_size;
    p->microbatch_count = mb_count;
    p->schedule = kind;
    p->policy = 'A';
    p->vertical_sync = 0;
    p->optimizer = pt_optim_default(optim);
    return p;
}

int64_t pu_stage_memory(const pt_cost *cost, pt_sched_kind kind, char policy, int S, int i,
                        int first, int last, int rows, int M, int recompute, pt_optim_kind optim)
{
    pt_mem_query q = {kind, policy, 0, optim, S, i, first, last, rows, M, recompute, 1};
    pt_mem m;
    pt_cost_stage_memory(cost, &q, &m);
    return m.total;
}

int64_t pu_plan_peak_memory(const pt_cost *cost, const pt_plan *plan, int64_t *per_stage)
{
    int64_t peak = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        const pt_stage *st = &plan->stages[s];
        int64_t sp = 0;
        for (int r = 0; r < st->replica_count; r++) {
            pt_mem m;
            pt_cost_replica_memory(cost, plan, s, r, &m);
            if (m.total > sp)
                sp = m.total;
        }
        if (per_stage)
            per_stage[s] = sp;
        if (sp > peak)
            peak = sp;
    }
    return peak;
}

/* Largest replica memory of stage s of plan as the plan stands. */
static int64_t stage_peak(const pt_cost *cost, const pt_plan *plan, int s)
{
    int64_t sp = 0;
    for (int r = 0; r < plan->stages[s].replica_count; r++) {
        pt_mem m;
        pt_cost_replica_memory(cost, plan, s, r, &m);
        if (m.total > sp)
            sp = m.total;
    }
    return sp;
}

int pu_recompute_where_needed(const pt_cost *cost, pt_plan *plan)
{
    const pt_topology *t = pt_cost_topology(cost);
    int ok = 1;
    for (int s = 0; s < plan->stage_count; s++) {
        pt_stage *st = &plan->stages[s];
        int64_t lim = pu_stage_min_memory(t, st);
        st->recompute = 0;
        if (stage_peak(cost, plan, s) <= lim)
            continue;
        st->recompute = 1;
        ok &= stage_peak(cost, plan, s) <= lim;
    }
    return ok;
}

void pu_why_recompute(pt_planner_report *report, const pt_cost *cost, pt_plan *plan)
{
    if (!report)
        return;
    int n = 0;
    int64_t off_lo = INT64_MAX, off_hi = 0, on_lo = INT64_MAX, on_hi = 0, lim_lo = INT64_MAX;
    for (int s = 0; s < plan->stage_count; s++) {
        pt_stage *st = &plan->stages[s];
        if (!st->recompute)
            continue;
        int64_t on = stage_peak(cost, plan, s);
        st->recompute = 0;
        int64_t off = stage_peak(cost, plan, s);
        st->recompute = 1;
        int64_t lim = pu_stage_min_memory(pt_cost_topology(cost), st);
        off_lo = off < off_lo ? off : off_lo;
        off_hi = off > off_hi ? off : off_hi;
        on_lo = on < on_lo ? on : on_lo;
        on_hi = on > on_hi ? on : on_hi;
        lim_lo = lim < lim_lo ? lim : lim_lo;
        n++;
    }
    if (n == 0)
        return;
    pu_why(report, "; recomputation on %d of %d stages (", n, plan->stage_count);
    int first = 1;
    for (int s = 0; s < plan->stage_count; s++) {
        if (!plan->stages[s].recompute || (s > 0 && plan->stages[s - 1].recompute))
            continue;
        int e = s;
        while (e + 1 < plan->stage_count && plan->stages[e + 1].recompute)
            e++;
        if (e > s)
            pu_why(report, "%s%d-%d", first ? "" : ",", s, e);
        else
            pu_why(report, "%s%d", first ? "" : ",", s);
        first = 0;
    }
    char a[32], b[32], c[32], d[32], l[32];
    pu_why(report,
           "): without it they would need %s-%s per replica, their devices have %s; with it "
           "%s-%s (stage inputs of the micro-batches in flight plus one micro-batch's "
           "activations), each backward preceded by its forward again",
           pu_bytes_str(off_lo, a, sizeof a), pu_bytes_str(off_hi, b, sizeof b),
           pu_bytes_str(lim_lo, l, sizeof l), pu_bytes_str(on_lo, c, sizeof c),
           pu_bytes_str(on_hi, d, sizeof d));
}

int64_t pu_stage_min_memory(const pt_topology *topo, const pt_stage *stage)
{
    int64_t m = INT64_MAX;
    for (int r = 0; r < stage->replica_count; r++) {
        int d = stage->replicas[r];
        if (d >= 0 && d < topo->device_count && topo->devices[d].memory_bytes < m)
            m = topo->devices[d].memory_bytes;
    }
    return m;
}

int64_t pu_topology_min_memory(const pt_topology *topo)
{
    int64_t m = INT64_MAX;
    for (int d = 0; d < topo->device_count; d++)
        if (topo->devices[d].memory_bytes < m)
            m = topo->devices[d].memory_bytes;
    return m;
}

double pu_topology_min_speed(const pt_topology *topo)
{
    double s = INFINITY;
    for (int d = 0; d < topo->device_count; d++)
        if (topo->devices[d].speed < s)
            s = topo->devices[d].speed;
    return s;
}

pt_topology *pu_topology_with_memory(const pt_topology *topo, int64_t memory_bytes)
{
    pt_topology *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    *t = *topo;
    t->devices = NULL;
    t->node_names = NULL;
    t->devices = malloc((size_t)topo->device_count * sizeof *t->devices);
    if (!t->devices) {
        free(t);
        return NULL;
    }
    memcpy(t->devices, topo->devices, (size_t)topo->device_count * sizeof *t->devices);
    for (int d = 0; d < t->device_count; d++)
        t->devices[d].memory_bytes = memory_bytes;
    if (topo->node_names) {
        t->node_names = malloc((size_t)topo->node_count * sizeof *t->node_names);
        if (!t->node_names) {
            pt_topology_free(&t);
            return NULL;
        }
        memcpy(t->node_names, topo->node_names, (size_t)topo->node_count * sizeof *t->node_names);
    }
    return t;
}

int pu_uniform_node_size(const pt_topology *topo)
{
    if (topo->node_count < 1)
        return 0;
    int *count = calloc((size_t)topo->node_count, sizeof *count);
    if (!count)
        return 0;
    for (int d = 0; d < topo->device_count; d++)
        if (topo->devices[d].node >= 0 && topo->devices[d].node < topo->node_count)
            count[topo->devices[d].node]++;
    int p = count[0];
    for (int n = 1; n < topo->node_count; n++)
        if (count[n] != p)
            p = 0;
    free(count);
    return p;
}

const char *pu_bytes_str(int64_t bytes, char *buf, int cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, (size_t)cap, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

void pu_why(pt_planner_report *report, const char *fmt, ...)
{
    if (!report)
        return;
    size_t len = strlen(report->why);
    if (len + 1 >= sizeof report->why)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report->why + len, sizeof report->why - len, fmt, ap);
    va_end(ap);
}

void pu_report_begin(pt_planner_report *report, const char *planner, const char *objective)
{
    if (!report)
        return;
    memset(report, 0, sizeof *report);
    report->chosen_kind = -1;
    snprintf(report->planner, sizeof report->planner, "%s", planner);
    snprintf(report->objective, sizeof report->objective, "%s", objective);
}

int pu_error_nofit(pt_error *err, pt_planner_report *report, const char *planner, int64_t limit,
                   int64_t needed, const char *detail)
{
    if (report)
        report->needed_memory_bytes = needed > 0 ? needed : 0;
    char a[32], b[32];
    if (needed > 0)
        return pt_error_set(err, PT_ENOFIT,
                            "%s: no plan fits in %s per device; the smallest plan it can make "
                            "needs %s per device%s%s",
                            planner, pu_bytes_str(limit, a, sizeof a),
                            pu_bytes_str(needed, b, sizeof b), detail ? ": " : "",
                            detail ? detail : "");
    return pt_error_set(err, PT_ENOFIT, "%s: no plan fits in %s per device%s%s", planner,
                        pu_bytes_str(limit, a, sizeof a), detail ? ": " : "", detail ? detail : "");
}
