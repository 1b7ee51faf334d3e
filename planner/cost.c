/* Cost model and memory model (see cost.h for the formulas). */
#include "planner/cost.h"
#include "planner/roofline.h"
#include "planner/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/checked.h"

#define MS_PER_S 1000.0

struct pt_cost {
    const pt_profile *profile; /* what it charges: the caller's, or floored (owned) */
    pt_profile *floored;       /* owned copy with the roofline floor folded in, or NULL */
    const pt_topology *topo;
    int n;                /* layers */
    int profile_mb;       /* samples the profile's times and bytes are for */
    double opt_bw;        /* bytes/s of an optimizer step on a speed-1 device; <= 0: free */
    double op_overhead_s; /* worker time before each op (profile's runtime.op_overhead_ms) */
    int sends_hold;       /* the profile's runtime.sends_hold */
    double recv_wake_s;   /* the profile's runtime.recv_wake_ms, in s */
    /* prefix sums over layers, n+1 entries each: x[j] = sum over layers < j;
     * of the share of each time that scales with rows, and (the *_fix sums)
     * of the share that does not (the profile's fixed_share) */
    double *fwd_ms, *bwd_ms, *rec_ms, *bin_ms, *bw_ms;
    double *fwd_fix, *bwd_fix, *rec_fix, *bin_fix, *bw_fix;
    int64_t *param, *act, *saved, *keep; /* keep: a split backward's hold, B to W */
    /* range maximum of scratch_bytes: scratch_max[k][l] = max over layers
     * [l, l + 2^k) (a sparse table, so a stage's figure is O(1)) */
    int levels;
    int64_t **scratch_max;
    /* the profile records what layers keep for the backward (any saved or
     * scratch bytes): then the runtime's input-gradient buffers count too */
    int runtime_memory;
};

static int floor_log2(int n)
{
    int k = 0;
    while ((2 << k) <= n)
        k++;
    return k;
}

/* Fills the sparse table of scratch_bytes; PT_ENOMEM. */
static int build_scratch_max(pt_cost *c)
{
    c->levels = floor_log2(c->n) + 1;
    c->scratch_max = calloc((size_t)c->levels, sizeof *c->scratch_max);
    if (!c->scratch_max)
        return PT_ENOMEM;
    for (int k = 0; k < c->levels; k++) {
        int width = 1 << k, count = c->n - width + 1;
        int64_t *row = malloc((size_t)count * sizeof *row);
        if (!row)
            return PT_ENOMEM;
        c->scratch_max[k] = row;
        for (int l = 0; l < count; l++) {
            if (k == 0) {
                row[l] = c->profile->layers[l].scratch_bytes;
                continue;
            }
            int64_t a = c->scratch_max[k - 1][l], b = c->scratch_max[k - 1][l + width / 2];
            row[l] = a > b ? a : b;
        }
    }
    return 0;
}

/* A layer's split-backward hold: the profile's keep_bytes, else the
 * gradient of its output when it has parameters (exact for a layer that is
 * not a block of several). */
static int64_t keep_of(const pt_profile_layer *L)
{
    if (L->keep_bytes > 0)
        return L->keep_bytes;
    return L->param_bytes > 0 ? L->act_bytes : 0;
}

int pt_cost_new(const pt_profile *profile, const pt_topology *topo, pt_cost **out, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!profile || !topo || !out)
        return pt_error_set(err, PT_EINVAL, "cost: a profile and a topology are required");
    if (profile->layer_count < 1 || !profile->layers)
        return pt_error_set(err, PT_EINVAL, "profile: layers: none");
    if (profile->microbatch < 1)
        return pt_error_set(err, PT_EINVAL, "profile: microbatch: %d is not positive",
                            profile->microbatch);
    if (!(topo->intra.bandwidth > 0) || !(topo->inter.bandwidth > 0))
        return pt_error_set(err, PT_EINVAL, "topology: %s.bandwidth: must be positive",
                            topo->intra.bandwidth > 0 ? "inter" : "intra");
    int n = profile->layer_count;
    pt_cost *c = calloc(1, sizeof *c);
    if (!c)
        return pt_error_set(err, PT_ENOMEM, "cost: out of memory");
    c->profile = profile;
    if (profile->roofline.has) {
        if (!(c->floored = pt_profile_copy(profile))) {
            free(c);
            return pt_error_set(err, PT_ENOMEM, "cost: out of memory");
        }
        pt_roofline_floor(c->floored);
        c->profile = profile = c->floored;
    }
    c->topo = topo;
    c->n = n;
    c->profile_mb = profile->microbatch;
    /* a calibrated rate first, else the profile's device's memory bandwidth */
    c->opt_bw = profile->opt_bytes_per_s > 0 ? profile->opt_bytes_per_s
                : profile->roofline.has      ? profile->roofline.mem_bandwidth
                                             : PT_COST_OPT_MEM_BW_BPS;
    c->op_overhead_s = profile->op_overhead_ms > 0 ? profile->op_overhead_ms / 1000.0 : 0;
    c->sends_hold = profile->sends_hold != 0;
    c->recv_wake_s = profile->recv_wake_ms > 0 ? profile->recv_wake_ms / 1000.0 : 0;
    c->fwd_ms = malloc((size_t)(n + 1) * 10 * sizeof(double));
    c->param = malloc((size_t)(n + 1) * 4 * sizeof(int64_t));
    if (!c->fwd_ms || !c->param || build_scratch_max(c) < 0) {
        pt_cost_free(&c);
        return pt_error_set(err, PT_ENOMEM, "cost: out of memory");
    }
    c->bwd_ms = c->fwd_ms + (n + 1);
    c->rec_ms = c->bwd_ms + (n + 1);
    c->bin_ms = c->rec_ms + (n + 1);
    c->bw_ms = c->bin_ms + (n + 1);
    c->fwd_fix = c->bw_ms + (n + 1);
    c->bwd_fix = c->fwd_fix + (n + 1);
    c->rec_fix = c->bwd_fix + (n + 1);
    c->bin_fix = c->rec_fix + (n + 1);
    c->bw_fix = c->bin_fix + (n + 1);
    c->act = c->param + (n + 1);
    c->saved = c->act + (n + 1);
    c->keep = c->saved + (n + 1);
    c->fwd_ms[0] = c->bwd_ms[0] = c->rec_ms[0] = c->bin_ms[0] = c->bw_ms[0] = 0;
    c->fwd_fix[0] = c->bwd_fix[0] = c->rec_fix[0] = c->bin_fix[0] = c->bw_fix[0] = 0;
    c->param[0] = c->act[0] = c->saved[0] = c->keep[0] = 0;
    for (int l = 0; l < n; l++) {
        const pt_profile_layer *L = &profile->layers[l];
        double rec = L->recompute_ms > 0 ? L->recompute_ms : L->fwd_ms;
        double ff = pt_profile_layer_share(L, PT_PROFILE_PASS_FWD),
               fb = pt_profile_layer_share(L, PT_PROFILE_PASS_BWD),
               fr = pt_profile_layer_share(L, PT_PROFILE_PASS_RECOMPUTE);
        c->fwd_ms[l + 1] = c->fwd_ms[l] + L->fwd_ms * (1 - ff);
        c->bwd_ms[l + 1] = c->bwd_ms[l] + L->bwd_ms * (1 - fb);
        c->rec_ms[l + 1] = c->rec_ms[l] + rec * (1 - fr);
        c->fwd_fix[l + 1] = c->fwd_fix[l] + L->fwd_ms * ff;
        c->bwd_fix[l + 1] = c->bwd_fix[l] + L->bwd_ms * fb;
        c->rec_fix[l + 1] = c->rec_fix[l] + rec * fr;
        double bin, bw;
        pt_cost_split_bwd(L, &bin, &bw);
        c->bin_ms[l + 1] = c->bin_ms[l] + bin * (1 - fb);
        c->bw_ms[l + 1] = c->bw_ms[l] + bw * (1 - fb);
        c->bin_fix[l + 1] = c->bin_fix[l] + bin * fb;
        c->bw_fix[l + 1] = c->bw_fix[l] + bw * fb;
        if (pt_add_i64(c->param[l], L->param_bytes, &c->param[l + 1]) < 0 ||
            pt_add_i64(c->act[l], L->act_bytes, &c->act[l + 1]) < 0 ||
            pt_add_i64(c->saved[l], L->saved_bytes, &c->saved[l + 1]) < 0 ||
            pt_add_i64(c->keep[l], keep_of(L), &c->keep[l + 1]) < 0) {
            pt_cost_free(&c);
            return pt_error_set(err, PT_ERANGE,
                                "profile: layers[%d]: the byte sums up to this layer exceed 2^63",
                                l);
        }
        c->runtime_memory |= L->saved_bytes > 0 || L->scratch_bytes > 0;
    }
    *out = c;
    return 0;
}

void pt_cost_free(pt_cost **cost_p)
{
    if (!cost_p || !*cost_p)
        return;
    free((*cost_p)->fwd_ms);
    free((*cost_p)->param);
    if ((*cost_p)->scratch_max)
        for (int k = 0; k < (*cost_p)->levels; k++)
            free((*cost_p)->scratch_max[k]);
    free((*cost_p)->scratch_max);
    pt_profile_free(&(*cost_p)->floored);
    free(*cost_p);
    *cost_p = NULL;
}

void pt_cost_set_opt_bandwidth(pt_cost *cost, double bytes_per_s)
{
    if (cost)
        cost->opt_bw = bytes_per_s;
}

double pt_cost_op_overhead_s(const pt_cost *cost)
{
    return cost ? cost->op_overhead_s : 0;
}

int pt_cost_sends_hold(const pt_cost *cost)
{
    return cost ? cost->sends_hold : 0;
}

double pt_cost_recv_wake_s(const pt_cost *cost)
{
    return cost ? cost->recv_wake_s : 0;
}

void pt_cost_set_op_overhead(pt_cost *cost, double seconds)
{
    if (cost)
        cost->op_overhead_s = seconds > 0 ? seconds : 0;
}

const pt_profile *pt_cost_profile(const pt_cost *cost)
{
    return cost->profile;
}

const pt_topology *pt_cost_topology(const pt_cost *cost)
{
    return cost->topo;
}

double pt_cost_rows_ms(double fixed_ms, double per_mb_ms, int rows, int profile_mb)
{
    return per_mb_ms * rows / profile_mb + fixed_ms;
}

static double speed_of(const pt_cost *c, int device)
{
    if (device < 0 || device >= c->topo->device_count || !(c->topo->devices[device].speed > 0))
        return 1.0;
    return c->topo->devices[device].speed;
}

/* t(rows) = fixed + per_row * rows: the rows-independent sums plus the
 * per-row sums scaled from the profile's micro-batch (pt_cost_rows_ms) */
static double scaled(const pt_cost *c, const double *pre, const double *fix, int first, int last,
                     int rows, int device)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    if (last <= first || rows <= 0)
        return 0;
    return pt_cost_rows_ms((fix[last] - fix[first]) / MS_PER_S, (pre[last] - pre[first]) / MS_PER_S,
                           rows, c->profile_mb) /
           speed_of(c, device);
}

double pt_cost_fixed_s(const pt_cost *c, int first, int last, int device)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    if (last <= first)
        return 0;
    return (c->fwd_fix[last] - c->fwd_fix[first] + c->bwd_fix[last] - c->bwd_fix[first]) /
           MS_PER_S / speed_of(c, device);
}

int pt_cost_has_fixed(const pt_cost *c)
{
    return c->fwd_fix[c->n] > 0 || c->bwd_fix[c->n] > 0 || c->rec_fix[c->n] > 0;
}

double pt_cost_fwd_s(const pt_cost *c, int first, int last, int rows, int device)
{
    return scaled(c, c->fwd_ms, c->fwd_fix, first, last, rows, device);
}

double pt_cost_bwd_s(const pt_cost *c, int first, int last, int rows, int device)
{
    return scaled(c, c->bwd_ms, c->bwd_fix, first, last, rows, device);
}

void pt_cost_split_bwd(const pt_profile_layer *L, double *input_ms, double *weight_ms)
{
    if (L->split) {
        *input_ms = L->bwd_input_ms;
        *weight_ms = L->bwd_weight_ms;
    } else if (L->param_bytes > 0) {
        *input_ms = *weight_ms = L->bwd_ms / 2;
    } else {
        *input_ms = L->bwd_ms;
        *weight_ms = 0;
    }
}

double pt_cost_bwd_input_s(const pt_cost *c, int first, int last, int rows, int device)
{
    return scaled(c, c->bin_ms, c->bin_fix, first, last, rows, device);
}

double pt_cost_bwd_weight_s(const pt_cost *c, int first, int last, int rows, int device)
{
    return scaled(c, c->bw_ms, c->bw_fix, first, last, rows, device);
}

double pt_cost_recompute_s(const pt_cost *c, int first, int last, int rows, int device)
{
    return scaled(c, c->rec_ms, c->rec_fix, first, last, rows, device);
}

int64_t pt_cost_param_bytes(const pt_cost *c, int first, int last)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    return last > first ? c->param[last] - c->param[first] : 0;
}

/* bytes measured at the profile's micro-batch, scaled to rows; INT64_MAX when
 * that does not fit, which the simulator's memory bound then refuses */
static int64_t scale_bytes(int64_t bytes, int rows, int profile_mb)
{
    int64_t x;
    return pt_mul_i64(bytes, rows, &x) < 0 ? INT64_MAX : x / profile_mb;
}

int64_t pt_cost_boundary_bytes(const pt_cost *c, int boundary, int rows)
{
    if (boundary < 0 || boundary > c->n)
        return 0;
    int64_t b =
        boundary == 0 ? c->profile->input_bytes : c->profile->layers[boundary - 1].act_bytes;
    return scale_bytes(b, rows, c->profile_mb);
}

int64_t pt_cost_act_bytes(const pt_cost *c, int first, int last, int rows)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    return last > first ? scale_bytes(c->act[last] - c->act[first], rows, c->profile_mb) : 0;
}

int64_t pt_cost_saved_bytes(const pt_cost *c, int first, int last, int rows)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    return last > first ? scale_bytes(c->saved[last] - c->saved[first], rows, c->profile_mb) : 0;
}

int64_t pt_cost_keep_bytes(const pt_cost *c, int first, int last, int rows)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    return last > first ? scale_bytes(c->keep[last] - c->keep[first], rows, c->profile_mb) : 0;
}

int64_t pt_cost_scratch_bytes(const pt_cost *c, int first, int last, int rows)
{
    if (first < 0)
        first = 0;
    if (last > c->n)
        last = c->n;
    if (last <= first)
        return 0;
    int k = floor_log2(last - first);
    int64_t a = c->scratch_max[k][first], b = c->scratch_max[k][last - (1 << k)];
    /* the input gradients of every layer but the first are the inner outputs' size */
    int64_t inner = c->runtime_memory ? c->act[last - 1] - c->act[first] : 0;
    return scale_bytes(pt_add_sat_i64(inner, a > b ? a : b), rows, c->profile_mb);
}

int64_t pt_cost_loss_saved_bytes(const pt_cost *c, int first, int last, int rows)
{
    if (last != c->n || first >= last)
        return 0;
    return scale_bytes(c->profile->layers[c->n - 1].saved_bytes, rows, c->profile_mb);
}

double pt_cost_link_s(pt_link link, int64_t bytes)
{
    if (bytes <= 0)
        return 0;
    return link.latency + (double)bytes / link.bandwidth;
}

static pt_link link_of(const pt_cost *c, int a, int b)
{
    const pt_topology *t = c->topo;
    if (a < 0 || b < 0 || a >= t->device_count || b >= t->device_count)
        return t->inter;
    return t->devices[a].node == t->devices[b].node ? t->intra : t->inter;
}

double pt_cost_p2p_s(const pt_cost *c, int a, int b, int64_t bytes)
{
    if (a == b)
        return 0;
    return pt_cost_link_s(link_of(c, a, b), bytes);
}

double pt_cost_ring_allreduce_s(int p, int64_t bytes, double latency, double bandwidth)
{
    if (p <= 1 || bytes <= 0)
        return 0;
    return 2.0 * (p - 1) * latency + 2.0 * (p - 1) / p * (double)bytes / bandwidth;
}

/* The ring's latency and bandwidth: its slowest hop; among devices of one
 * node, the profile's fitted all-reduce when it has one (a collective's
 * cost is not a point-to-point message's: calibration fits both). */
static void ring_link(const pt_cost *c, const int *devices, int p, double *lat, double *bw)
{
    *lat = 0;
    *bw = 0;
    int one_node = 1;
    for (int k = 0; k < p; k++) {
        if (devices[k] == devices[(k + 1) % p])
            continue;
        pt_link l = link_of(c, devices[k], devices[(k + 1) % p]);
        one_node &= devices[k] >= 0 && devices[k] < c->topo->device_count && devices[0] >= 0 &&
                    devices[0] < c->topo->device_count &&
                    c->topo->devices[devices[k]].node == c->topo->devices[devices[0]].node;
        if (l.latency > *lat)
            *lat = l.latency;
        if (*bw == 0 || l.bandwidth < *bw)
            *bw = l.bandwidth;
    }
    if (*bw > 0 && one_node && c->profile->ar_bytes_per_s > 0) {
        *bw = c->profile->ar_bytes_per_s;
        *lat = c->profile->ar_latency_s;
    }
}

double pt_cost_allreduce_s(const pt_cost *c, const int *devices, int p, int64_t bytes)
{
    if (p <= 1)
        return 0;
    double lat, bw;
    ring_link(c, devices, p, &lat, &bw);
    if (bw == 0)
        return 0;
    return pt_cost_ring_allreduce_s(p, bytes, lat, bw);
}

double pt_cost_overlapped_bwd_ring_s(const pt_cost *c, int p, double lat, double bw, int first,
                                     int last, int rows, int dev, int64_t cap)
{
    double bwd = pt_cost_bwd_s(c, first, last, rows, dev);
    if (p <= 1 || bw <= 0)
        return bwd;
    if (cap < 0)
        return bwd + pt_cost_ring_allreduce_s(p, pt_cost_param_bytes(c, first, last), lat, bw);
    if (cap == 0)
        cap = PT_SCHED_BUCKET_BYTES;
    /* pt_sched_bucket_lo's rule over the prefix sums */
    double end = 0;
    for (int hi = last; hi > first;) {
        int lo = hi - 1;
        while (lo > first && pt_cost_param_bytes(c, lo, hi) < cap)
            lo--;
        if (pt_cost_param_bytes(c, first, lo) == 0)
            lo = first;
        double ready = pt_cost_bwd_s(c, lo, last, rows, dev);
        end = (ready > end ? ready : end) +
              pt_cost_ring_allreduce_s(p, pt_cost_param_bytes(c, lo, hi), lat, bw);
        hi = lo;
    }
    return end > bwd ? end : bwd;
}

double pt_cost_overlapped_bwd_allreduce_s(const pt_cost *c, const int *devices, int p, int first,
                                          int last, int rows, int dev, int64_t cap)
{
    double lat, bw;
    ring_link(c, devices, p, &lat, &bw);
    return pt_cost_overlapped_bwd_ring_s(c, p, lat, bw, first, last, rows, dev, cap);
}

double pt_cost_boundary_s(const pt_cost *c, const int *src, int src_r, const int *dst, int dst_r,
                          int mb_rows, int64_t mb_bytes)
{
    double worst = 0;
    for (int j = 0; j < src_r; j++) {
        int slo = (int)((int64_t)mb_rows * j / src_r),
            shi = (int)((int64_t)mb_rows * (j + 1) / src_r);
        double t = 0;
        for (int k = 0; k < dst_r; k++) {
            int dlo = (int)((int64_t)mb_rows * k / dst_r);
            int dhi = (int)((int64_t)mb_rows * (k + 1) / dst_r);
            int lo = slo > dlo ? slo : dlo, hi = shi < dhi ? shi : dhi;
            if (lo < hi)
                t += pt_cost_p2p_s(c, src[j], dst[k], mb_bytes * (hi - lo) / c->profile_mb);
        }
        if (t > worst)
            worst = t;
    }
    return worst;
}

int pt_cost_optim_state_factor(pt_optim_kind optim)
{
    return optim == PT_OPTIM_ADAM ? 2 : 1;
}

int64_t pt_cost_optim_state_bytes(const pt_cost *c, int64_t param_bytes, pt_optim_kind optim)
{
    int prec = c ? c->profile->precision : PT_PRECISION_FP32;
    int64_t per_param = pt_precision_master_bytes(prec) +
                        (int64_t)PT_PRECISION_MOMENT_BYTES * pt_cost_optim_state_factor(optim);
    int64_t x;
    if (pt_mul_i64(param_bytes, per_param, &x) < 0)
        return INT64_MAX;
    return x / pt_precision_weight_bytes(prec);
}

double pt_cost_opt_step_s(const pt_cost *c, int64_t param_bytes, pt_optim_kind optim, int device)
{
    if (!(c->opt_bw > 0) || param_bytes <= 0)
        return 0;
    double bytes =
        (double)param_bytes * PT_COST_OPT_BASE_PASSES +
        (double)pt_cost_optim_state_bytes(c, param_bytes, optim) * PT_COST_OPT_STATE_PASSES;
    return bytes / (c->opt_bw * speed_of(c, device));
}

/* The kind's formulas from its table entry (protocol/sched_kind.h). */
static const pt_sched_kind_info *facts_of(pt_sched_kind kind)
{
    const pt_sched_kind_info *in = pt_sched_kind_info_of(kind);
    return in ? in : pt_sched_kind_info_of(PT_SCHED_1F1B_FLUSH);
}

int pt_cost_inflight(pt_sched_kind kind, char policy, int S, int i, int M)
{
    pt_sched_shape q = {S, i, M, policy, 0, 0, 1};
    return facts_of(kind)->inflight(&q);
}

int pt_cost_stage_inflight(const pt_mem_query *m)
{
    pt_sched_shape q = {m->stage_count,   m->stage,     m->microbatches, m->policy,
                        m->vertical_sync, m->recompute, m->chunks};
    return facts_of(m->kind)->inflight(&q);
}

int pt_cost_weight_versions(pt_sched_kind kind, int vertical_sync, int S, int i)
{
    pt_sched_shape q = {S, i, 0, 'A', vertical_sync, 0, 1};
    return facts_of(kind)->weight_versions(&q);
}

void pt_cost_stage_memory(const pt_cost *c, const pt_mem_query *q, pt_mem *out)
{
    memset(out, 0, sizeof *out);
    int64_t P = pt_cost_param_bytes(c, q->first, q->last);
    int64_t in_b = pt_cost_boundary_bytes(c, q->first, q->rows);
    int64_t out_b = pt_cost_boundary_bytes(c, q->last, q->rows);
    int64_t not_first = q->stage > 0, not_last = q->stage + 1 < q->stage_count;
    int64_t act_b = pt_cost_act_bytes(c, q->first, q->last, q->rows);
    int64_t saved_b = pt_cost_saved_bytes(c, q->first, q->last, q->rows);
    int64_t loss_b = pt_cost_loss_saved_bytes(c, q->first, q->last, q->rows);
    int64_t scratch_b = pt_cost_scratch_bytes(c, q->first, q->last, q->rows);
    const pt_sched_kind_info *kind = facts_of(q->kind);
    pt_sched_shape shape = {q->stage_count,   q->stage,     q->microbatches, q->policy,
                            q->vertical_sync, q->recompute, q->chunks};
    int K = kind->inflight(&shape);
    int V = kind->weight_versions(&shape);
    out->bytes[PT_MEM_WEIGHTS] = P;
    out->bytes[PT_MEM_GRADS] = (kind->flags & PT_SCHED_OVERLAP_ALLREDUCE) ? 2 * P : P;
    out->bytes[PT_MEM_OPTIM] = pt_cost_optim_state_bytes(c, P, q->optim);
    out->bytes[PT_MEM_ACTS] =
        scratch_b +
        (q->recompute ? K * (in_b + out_b + loss_b) + (act_b - out_b + saved_b - loss_b)
                      : K * (in_b + act_b + saved_b)) +
        (kind->split_hold ? kind->split_hold(&shape) : 0) *
            pt_cost_keep_bytes(c, q->first, q->last, q->rows);
    out->bytes[PT_MEM_STASH] = (int64_t)(V - 1) * P;
    out->bytes[PT_MEM_COMM] = not_first * 2 * in_b + not_last * out_b;
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
        out->total += out->bytes[k];
}

/* "12.3 GiB"-style text for messages. */
static const char *human(int64_t bytes, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

int pt_cost_plan_memory(const pt_cost *c, const pt_plan *plan, pt_error *err)
{
    if (!c || !plan)
        return pt_error_set(err, PT_EINVAL, "cost: a cost model and a plan are required");
    const pt_topology *t = c->topo;
    if (plan->precision[0] && pt_precision_parse(plan->precision) != c->profile->precision)
        return pt_error_set(err, PT_EINVAL,
                            "plan: precision: %s, but the profile of '%s' is %s (make a %s "
                            "profile: pipetop profile --analytic --precision %s)",
                            plan->precision, c->profile->model,
                            pt_precision_name(c->profile->precision), plan->precision,
                            plan->precision);
    for (int s = 0; s < plan->stage_count; s++) {
        const pt_stage *st = &plan->stages[s];
        if (st->first < 0 || st->last > c->n || st->last <= st->first)
            return pt_error_set(err, PT_EINVAL,
                                "plan: stages[%d].layers: [%d,%d) outside %d layers", s, st->first,
                                st->last, c->n);
        for (int r = 0; r < st->replica_count; r++) {
            int d = st->replicas[r];
            if (d < 0 || d >= t->device_count)
                return pt_error_set(err, PT_EINVAL,
                                    "plan: stages[%d].replicas[%d]: device %d not in topology "
                                    "'%s' (%d devices)",
                                    s, r, d, t->name, t->device_count);
            int P = pt_plan_rank_count(plan);
            if (plan->chunks > 1 && s >= P)
                continue; /* counted with the device's first chunk */
            pt_mem m;
            pt_cost_replica_memory(c, plan, s, r, &m);
            for (int k = s + P; plan->chunks > 1 && k < plan->stage_count; k += P) {
                /* the device's other chunks (their peaks added: an upper bound) */
                pt_mem more;
                pt_cost_replica_memory(c, plan, k, r, &more);
                for (int b = 0; b < PT_MEM_KIND_COUNT; b++)
                    m.bytes[b] += more.bytes[b];
                m.total += more.total;
            }
            if (m.total <= t->devices[d].memory_bytes)
                continue;
            /* name the two largest categories so the user sees what to change */
            int a = 0, b = -1;
            for (int k = 1; k < PT_MEM_KIND_COUNT; k++)
                if (m.bytes[k] > m.bytes[a])
                    a = k;
            for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
                if (k != a && (b < 0 || m.bytes[k] > m.bytes[b]))
                    b = k;
            char n1[32], n2[32], n3[32], n4[32];
            return pt_error_set(
                err, PT_ENOFIT,
                "plan: stages[%d] (layers [%d,%d)) replica %d on device %d '%s': "
                "needs %s (%s %s, %s %s) but the device has %s",
                s, st->first, st->last, r, d, t->devices[d].name, human(m.total, n1, sizeof n1),
                pt_mem_kind_name(a), human(m.bytes[a], n2, sizeof n2), pt_mem_kind_name(b),
                human(m.bytes[b], n3, sizeof n3), human(t->devices[d].memory_bytes, n4, sizeof n4));
        }
    }
    return 0;
}

int pt_cost_check_memory(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                         pt_error *err)
{
    pt_cost *c = NULL;
    int rc = pt_cost_new(profile, topo, &c, err);
    if (rc < 0)
        return rc;
    rc = pt_cost_plan_memory(c, plan, err);
    pt_cost_free(&c);
    return rc;
}

void pt_cost_replica_memory(const pt_cost *cost, const pt_plan *plan, int s, int r, pt_mem *out)
{
    const pt_stage *st = &plan->stages[s];
    int lo, hi, S = plan->stage_count;
    pt_sched_rows(plan->microbatch_size, st->replica_count, r, &lo, &hi);
    if (pt_plan_round_robin(plan)) {
        /* whole micro-batches, pt_plan_rr_inflight of them (and as many stashed
         * versions): what the kind's formulas give stage s of s + that many */
        lo = 0;
        hi = plan->microbatch_size;
        S = s + pt_plan_rr_inflight(plan, s);
    }
    pt_mem_query q = {plan->schedule,
                      plan->policy,
                      plan->vertical_sync,
                      plan->optimizer.kind,
                      S,
                      s,
                      st->first,
                      st->last,
                      hi - lo,
                      plan->microbatch_count,
                      st->recompute,
                      plan->chunks};
    pt_cost_stage_memory(cost, &q, out);
}
