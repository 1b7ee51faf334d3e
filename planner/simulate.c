/* Discrete-event simulator of schedule programs (see simulate.h). */
#include "planner/simulate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/checked.h"

/* Versions are array indices per worker; a program never needs more than one
 * per micro-batch plus a few. */
#define PT_SIM_MAX_VERSION (1 << 28)
/* Shared cores: passes of the stretch fixed point at most, and the change
 * of every worker's stretch below which it has converged. */
#define PT_SIM_SHARE_PASSES 8
#define PT_SIM_SHARE_TOL    1e-3

/* Per-worker state while simulating. */
typedef struct wstate {
    int pc, blocked, joined;
    double ready, comp_free, comm_free;
    /* durations and sizes for the worker's own rows */
    double t_fwd, t_bwd, t_rec, t_opt, t_bin, t_bw;
    double slow; /* >= 1: compute slowed by the cores its node's workers share */
    int64_t P, in_b, out_b, act_b, saved_b, loss_b, keep_b;
    int rows;
    /* memory */
    int64_t cur[PT_MEM_KIND_COUNT], cur_total;
    /* weight arrays: store_n versions of its own alive, the initial versions'
     * shared array while init_alive > 0, stash arrays held by stashes only */
    int inflight, stash, store_n, init_alive, init_sref, newest, grads_open;
    int ver_off, cov_off, n_opt, opt_seen, maxv;
    double busy; /* compute time, summed as ops run */
    /* the BWD asynchronous bucket all-reduces hook to (schedule.h): its start and
     * rows, hook_rows 0 when the last compute op was not a BWD */
    double hook_start;
    int hook_rows;
    struct pt_sim_host *host; /* hosted programs: the device's figures this worker adds to */
    int64_t noted_total;      /* total last added to host */
    int noted_inflight;       /* inflight last added to host */
} wstate;

/* A host's lanes, shared by its workers (hosted programs). */
typedef struct lanes {
    double ready, comp_free, comm_free;
} lanes;

typedef struct inst {
    int count;
    int done;
    double start, end;
} inst;

struct pt_sim {
    pt_sim_event *events;
    pt_sim_worker *workers;
    wstate *ws;
    int32_t *match, *scratch, *stack, *devs, *cover, *last_read, *ar_first;
    int32_t *sref; /* per version: the in-flight micro-batches whose stash holds it */
    unsigned char *alive, *gopen;
    double *arrival, *finish;
    inst *insts;
    pt_sim_host *hosts;
    int32_t *hpc; /* per runner (host, or worker): next op in its order */
    lanes *lanes; /* per host: its shared lanes */
    int64_t cap_hosts, cap_hpc, cap_lanes;
    double *share; /* shared cores: each worker's compute stretch for this pass */
    int share_on;
    int64_t cap_share;
    int64_t cap_events, cap_match, cap_arrival, cap_scratch, cap_workers, cap_stack, cap_devs,
        cap_wout, cap_stages, cap_cover, cap_ver, cap_alive, cap_sref, cap_cov, cap_inst, cap_win;
};

int pt_sim_new(pt_sim **out)
{
    if (!out)
        return PT_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : PT_ENOMEM;
}

void pt_sim_free(pt_sim **sim_p)
{
    if (!sim_p || !*sim_p)
        return;
    pt_sim *s = *sim_p;
    free(s->events);
    free(s->workers);
    free(s->ws);
    free(s->match);
    free(s->scratch);
    free(s->stack);
    free(s->devs);
    free(s->cover);
    free(s->last_read);
    free(s->ar_first);
    free(s->alive);
    free(s->sref);
    free(s->gopen);
    free(s->arrival);
    free(s->finish);
    free(s->insts);
    free(s->hosts);
    free(s->hpc);
    free(s->lanes);
    free(s->share);
    free(s);
    *sim_p = NULL;
}

/* Grows *buf to hold n elements (never shrinks); 0 or PT_ENOMEM. */
static int reserve(void **buf, int64_t *cap, int64_t n, size_t elem)
{
    if (n < 1)
        n = 1;
    if (n <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(*buf, (size_t)c * elem);
    if (!q)
        return PT_ENOMEM;
    *buf = q;
    *cap = c;
    return 0;
}

#define RESERVE(field, capf, n) reserve((void **)&sim->field, &sim->capf, (n), sizeof *sim->field)

/* Checks the fields the simulation indexes with, sizes the per-worker
 * arrays and fills the per-worker tables. */
static int prepare(pt_sim *sim, const pt_program *p, const pt_cost *cost, pt_error *err)
{
    const pt_topology *topo = pt_cost_topology(cost);
    int nw = p->worker_count, S = p->stage_count, M = p->mb_per_window;
    if (nw < 1 || S < 1 || M < 1 || p->mb_count < 1 || !p->workers || !p->stage_worker ||
        p->stage_worker[S] != nw || p->initial_versions < 1 ||
        p->initial_versions > PT_SIM_MAX_VERSION)
        return pt_error_set(err, PT_EINVAL, "simulate: empty or inconsistent program");
    int64_t ver_total = 0, cov_total = 0, inst_total = 0;
    int windows = (p->mb_count + M - 1) / M;
    if (RESERVE(ws, cap_workers, nw) < 0 || RESERVE(stack, cap_stack, nw) < 0 ||
        RESERVE(devs, cap_devs, nw) < 0 || RESERVE(workers, cap_wout, nw) < 0 ||
        RESERVE(ar_first, cap_stages, S + 1) < 0)
        return PT_ENOMEM;
    for (int s = 0; s < S; s++)
        if (p->stage_worker[s] < 0 || p->stage_worker[s] >= p->stage_worker[s + 1])
            return pt_error_set(err, PT_EINVAL, "simulate: stage %d has no workers", s);
    for (int s = 0; s < S; s++) {
        int most = 0;
        for (int w = p->stage_worker[s]; w < p->stage_worker[s + 1]; w++) {
            const pt_worker *x = &p->workers[w];
            if (x->op_begin < 0 || x->op_end < x->op_begin || x->op_end > p->op_count ||
                x->stage != s || x->replica_count != p->stage_worker[s + 1] - p->stage_worker[s])
                return pt_error_set(err, PT_EINVAL, "simulate: worker %d: bad op range or stage",
                                    w);
            if (x->device < 0 || x->device >= topo->device_count)
                return pt_error_set(err, PT_EINVAL,
                                    "simulate: worker %d (stage %d replica %d): device %d not in "
                                    "topology '%s' (%d devices)",
                                    w, s, x->replica, x->device, topo->name, topo->device_count);
            int n_ar = 0, n_opt = 0, maxv = p->initial_versions - 1;
            for (int i = x->op_begin; i < x->op_end; i++) {
                const pt_op *op = &p->ops[i];
                /* compute ops read (OPT_STEP: produce) a version */
                int reads = pt_op_is_compute(op->kind);
                if (op->kind >= PT_OP_KIND_COUNT || op->mb < 0 || op->mb_end <= op->mb ||
                    op->mb_end > p->mb_count || op->version > PT_SIM_MAX_VERSION ||
                    (reads && op->version < 0))
                    return pt_error_set(err, PT_EINVAL,
                                        "simulate: op %d: bad kind, micro-batch or version", i);
                n_ar += op->kind == PT_OP_ALLREDUCE;
                n_opt += op->kind == PT_OP_OPT_STEP;
                if (op->version > maxv)
                    maxv = op->version;
            }
            if (n_ar > most)
                most = n_ar;
            wstate *st = &sim->ws[w];
            memset(st, 0, sizeof *st);
            st->ver_off = (int)ver_total;
            st->cov_off = (int)cov_total;
            st->n_opt = n_opt;
            st->maxv = maxv;
            ver_total += maxv + 1;
            cov_total += n_opt + windows;
            sim->devs[w] = x->device;
        }
        sim->ar_first[s] = (int)inst_total;
        inst_total += most;
    }
    sim->ar_first[S] = (int)inst_total;
    if (RESERVE(events, cap_events, p->op_count) < 0 ||
        RESERVE(match, cap_match, p->op_count) < 0 ||
        RESERVE(arrival, cap_arrival, p->op_count) < 0 ||
        RESERVE(scratch, cap_scratch, pt_sched_match_scratch(p)) < 0 ||
        RESERVE(cover, cap_cover, (int64_t)nw * p->mb_count) < 0 ||
        RESERVE(last_read, cap_ver, ver_total) < 0 || RESERVE(alive, cap_alive, ver_total) < 0 ||
        RESERVE(sref, cap_sref, ver_total) < 0 || RESERVE(insts, cap_inst, inst_total) < 0 ||
        RESERVE(finish, cap_win, windows) < 0 || RESERVE(gopen, cap_cov, cov_total) < 0)
        return PT_ENOMEM;
    int nh = pt_sched_host_count(p);
    if (RESERVE(hpc, cap_hpc, nh) < 0 || RESERVE(hosts, cap_hosts, nh) < 0 ||
        RESERVE(lanes, cap_lanes, nh) < 0)
        return PT_ENOMEM;
    for (int h = 0; h < nh; h++)
        sim->hosts[h].device = -1;
    for (int w = 0; w < nw; w++) {
        int h = pt_sched_host_of(p, w), d = p->workers[w].device;
        if (h < 0 || h >= nh || (sim->hosts[h].device >= 0 && sim->hosts[h].device != d))
            return pt_error_set(err, PT_EINVAL,
                                "simulate: worker %d: host %d out of range or not on one device", w,
                                h);
        sim->hosts[h].device = d;
    }
    if (p->host_count > 0 &&
        (!p->host_begin || !p->host_ops || p->host_begin[p->host_count] != p->op_count))
        return pt_error_set(err, PT_EINVAL, "simulate: hosts do not span the ops");
    return 0;
}

/* Memory bookkeeping ---------------------------------------------------- */

/* Adds worker st's change since its last note to its host's running sums (and
 * peaks); no-op for a worker alone on its device. */
static void host_note(wstate *st, int64_t total)
{
    pt_sim_host *h = st->host;
    if (!h)
        return;
    h->cur_total += total - st->noted_total;
    h->cur_inflight += st->inflight - st->noted_inflight;
    st->noted_total = total;
    st->noted_inflight = st->inflight;
    if (h->cur_total > h->peak_total)
        h->peak_total = h->cur_total;
    if (h->cur_inflight > h->peak_inflight)
        h->peak_inflight = h->cur_inflight;
}

/* host_note after a release that mem_note did not see. */
static void host_resync(wstate *st)
{
    if (!st->host)
        return;
    int64_t total = 0;
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
        total += st->cur[k];
    host_note(st, total);
}

static void mem_note(pt_sim_worker *out, wstate *st)
{
    int64_t held = st->store_n + (st->init_alive > 0) + st->stash;
    st->cur[PT_MEM_STASH] = (held - 1) * st->P;
    st->cur[PT_MEM_GRADS] = st->grads_open * st->P;
    int64_t total = 0;
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++) {
        total += st->cur[k];
        if (st->cur[k] > out->peak.bytes[k])
            out->peak.bytes[k] = st->cur[k];
    }
    if (total > out->peak.total)
        out->peak.total = total;
    if (st->inflight > out->peak_inflight)
        out->peak_inflight = st->inflight;
    host_note(st, total);
    if (held > out->peak_versions)
        out->peak_versions = (int)held;
}

/* Whether version v's array is held by a stash (the initial versions share
 * one array). */
static int stash_held(const pt_program *p, const pt_sim *sim, const wstate *st, int v)
{
    return v < p->initial_versions ? st->init_sref > 0 : sim->sref[st->ver_off + v] > 0;
}

/* Version v leaves the store; its array stays while a stash holds it. */
static void kill_version(const pt_program *p, const pt_sim *sim, wstate *st, unsigned char *alive,
                         int v)
{
    if (!alive[v])
        return;
    alive[v] = 0;
    if (v < p->initial_versions) {
        if (--st->init_alive > 0)
            return; /* the shared array stays in the store */
    } else {
        st->store_n--;
    }
    if (stash_held(p, sim, st, v))
        st->stash++;
}

/* After op i read version v from the store: drop v if nothing reads it later. */
static void after_read(const pt_program *p, pt_sim *sim, wstate *st, int i, int v)
{
    if (sim->last_read[st->ver_off + v] == i && v != st->newest)
        kill_version(p, sim, st, sim->alive + st->ver_off, v);
}

/* A stashing FWD holds on to the array of the version it read (no copy, as
 * the runtime does); its BWD (BWD_WEIGHT when split) lets go of it. */
static void stash_take(const pt_program *p, pt_sim *sim, wstate *st, int v)
{
    if (v < p->initial_versions)
        st->init_sref++;
    else
        sim->sref[st->ver_off + v]++;
}

static void stash_drop(const pt_program *p, pt_sim *sim, wstate *st, int v)
{
    int was = stash_held(p, sim, st, v);
    if (v < p->initial_versions)
        st->init_sref -= st->init_sref > 0;
    else
        sim->sref[st->ver_off + v] -= sim->sref[st->ver_off + v] > 0;
    int alive = v < p->initial_versions ? st->init_alive > 0 : sim->alive[st->ver_off + v];
    if (was && !stash_held(p, sim, st, v) && !alive)
        st->stash--;
}

/* Every byte figure the simulation adds up for worker w stays below this bound
 * (weights, optimizer state, every version and stash, a gradient per
 * micro-batch, every micro-batch's activations in flight, the comm buffers),
 * so when it fits in int64 no running sum can overflow. Sizes come from
 * outside: micro-batch 2^24 x count 2^20 is within the plan's limits. */
static int mem_bound_fits(const pt_program *p, const wstate *st, int64_t scratch)
{
    int64_t per_mb, acts, held, bound;
    int64_t versions = (int64_t)st->maxv + 3 + PT_COST_OPTIM_STATE_MAX;
    return pt_add_i64(st->in_b, st->act_b, &per_mb) == 0 &&
           pt_add_i64(per_mb, st->out_b, &per_mb) == 0 &&
           pt_add_i64(per_mb, st->saved_b, &per_mb) == 0 &&
           pt_add_i64(per_mb, st->loss_b, &per_mb) == 0 &&
           pt_add_i64(per_mb, st->keep_b, &per_mb) == 0 &&
           pt_mul_i64(per_mb, p->mb_count, &acts) == 0 &&
           pt_mul_i64(st->P, versions + 2 * (int64_t)p->mb_count, &held) == 0 &&
           pt_add_i64(acts, held, &bound) == 0 && pt_add_i64(bound, st->in_b, &bound) == 0 &&
           pt_add_i64(bound, st->in_b, &bound) == 0 && pt_add_i64(bound, st->out_b, &bound) == 0 &&
           pt_add_i64(bound, scratch, &bound) == 0;
}

static int init_worker(const pt_program *p, pt_sim *sim, const pt_cost *cost, int w, pt_error *err)
{
    const pt_worker *x = &p->workers[w];
    wstate *st = &sim->ws[w];
    pt_sim_worker *out = &sim->workers[w];
    int rows = x->row_hi - x->row_lo, M = p->mb_per_window;
    st->pc = x->op_begin;
    st->hook_rows = 0;
    st->blocked = -1;
    st->rows = rows;
    const pt_topology *topo = pt_cost_topology(cost);
    st->slow = 1.0;
    if (topo->devices[x->device].node_cores > 0) {
        /* workers on one host's shared cores: counted only where cores are shared */
        int node = topo->devices[x->device].node, n = 0;
        for (int v = 0; v < p->worker_count; v++) {
            /* a host's workers run one at a time: count the host once */
            int first = 1;
            for (int u = 0; p->host_count > 0 && u < v && first; u++)
                first = p->worker_host[u] != p->worker_host[v];
            n += first && topo->devices[p->workers[v].device].node == node;
        }
        st->slow = sim->share_on ? sim->share[w] : pt_topology_oversubscription(topo, x->device, n);
    }
    st->t_fwd = st->slow * pt_cost_fwd_s(cost, x->first, x->last, rows, x->device);
    st->t_bwd = st->slow * pt_cost_bwd_s(cost, x->first, x->last, rows, x->device);
    st->t_rec = st->slow * pt_cost_recompute_s(cost, x->first, x->last, rows, x->device);
    st->t_bin = st->slow * pt_cost_bwd_input_s(cost, x->first, x->last, rows, x->device);
    st->t_bw = st->slow * pt_cost_bwd_weight_s(cost, x->first, x->last, rows, x->device);
    st->P = pt_cost_param_bytes(cost, x->first, x->last);
    st->t_opt = st->slow * pt_cost_opt_step_s(cost, st->P, p->optim, x->device);
    st->in_b = pt_cost_boundary_bytes(cost, x->first, rows);
    st->out_b = pt_cost_boundary_bytes(cost, x->last, rows);
    st->act_b = pt_cost_act_bytes(cost, x->first, x->last, rows);
    st->saved_b = pt_cost_saved_bytes(cost, x->first, x->last, rows);
    st->loss_b = pt_cost_loss_saved_bytes(cost, x->first, x->last, rows);
    st->keep_b = pt_cost_keep_bytes(cost, x->first, x->last, rows);
    int64_t scratch = pt_cost_scratch_bytes(cost, x->first, x->last, rows);
    if (!mem_bound_fits(p, st, scratch))
        return pt_error_set(err, PT_ERANGE,
                            "simulate: worker %d (stage %d): %d micro-batches of %d samples need "
                            "more than 2^63 bytes (%lld activation bytes each)",
                            w, x->stage, p->mb_count, rows, (long long)st->act_b);
    memset(out, 0, sizeof *out);
    out->limit = pt_cost_topology(cost)->devices[x->device].memory_bytes;
    st->host = p->host_count > 0 ? &sim->hosts[p->worker_host[w]] : NULL;
    st->noted_total = 0;
    st->noted_inflight = 0;
    if (st->host)
        st->host->worker_count++;
    st->cur[PT_MEM_WEIGHTS] = st->P;
    st->cur[PT_MEM_OPTIM] = pt_cost_optim_state_bytes(cost, st->P, p->optim);
    /* the backward scratch is laid out once, for the worker's rows */
    st->cur[PT_MEM_ACTS] = scratch;
    /* received activations and the input gradient waiting to be sent (not the first
     * stage), the received output gradient (not the last) */
    st->cur[PT_MEM_COMM] =
        (x->stage > 0 ? 2 * st->in_b : 0) + (x->stage + 1 < p->stage_count ? st->out_b : 0);
    /* one pass: version liveness (last op reading each version from the store),
     * the step covering each micro-batch, collective instances, event owners */
    int32_t *last = sim->last_read + st->ver_off;
    unsigned char *alive = sim->alive + st->ver_off;
    int32_t *cover = sim->cover + (int64_t)w * p->mb_count;
    for (int v = 0; v <= st->maxv; v++) {
        last[v] = -1;
        alive[v] = 0;
        sim->sref[st->ver_off + v] = 0;
    }
    for (int m = 0; m < p->mb_count; m++)
        cover[m] = st->n_opt + m / M;
    int o = 0, inst = sim->ar_first[x->stage], waited = x->op_begin;
    for (int i = x->op_begin; i < x->op_end; i++) {
        const pt_op *op = &p->ops[i];
        sim->events[i].worker = w;
        switch (op->kind) {
        case PT_OP_FWD:
            last[op->version] = i;
            break;
        case PT_OP_BWD:
        case PT_OP_BWD_INPUT:
        case PT_OP_BWD_WEIGHT:
        case PT_OP_RECOMPUTE:
            if (!(op->flags & PT_OPF_STASH))
                last[op->version] = i;
            break;
        case PT_OP_OPT_STEP:
            for (int m = op->mb; m < op->mb_end; m++)
                cover[m] = o;
            o++;
            break;
        case PT_OP_ALLREDUCE:
            sim->match[i] = inst++;
            break;
        case PT_OP_AR_WAIT:
            /* the oldest asynchronous all-reduce not waited for yet */
            while (waited < i && !(p->ops[waited].kind == PT_OP_ALLREDUCE &&
                                   (p->ops[waited].flags & PT_OPF_ASYNC)))
                waited++;
            sim->match[i] = waited < i ? sim->match[waited] : -1;
            waited++;
            break;
        default:
            break;
        }
    }
    memset(sim->gopen + st->cov_off, 0, (size_t)(st->n_opt + (p->mb_count + M - 1) / M));
    st->newest = p->initial_versions - 1;
    for (int v = 0; v < p->initial_versions; v++) {
        if (v == st->newest || last[v] >= 0) {
            alive[v] = 1;
            st->init_alive++;
        }
    }
    mem_note(out, st);
    return 0;
}

/* Applies op i's memory effects on worker w (in program order). */
static void mem_op(const pt_program *p, pt_sim *sim, int w, int i)
{
    const pt_op *op = &p->ops[i];
    wstate *st = &sim->ws[w];
    pt_sim_worker *out = &sim->workers[w];
    const pt_worker *x = &p->workers[w];
    int rows = op->row_hi - op->row_lo;
    /* activations scale with the op's rows (the worker's own, in generated programs) */
    int64_t div = st->rows ? st->rows : 1;
    int64_t in_b = rows == st->rows ? st->in_b : st->in_b * rows / div;
    /* everything one micro-batch holds from its forward to its backward */
    int64_t held = st->act_b + st->saved_b;
    /* with recomputation a micro-batch keeps its input, its output (the stage's
     * last layer's, which the runtime's slot holds until the backward) and its
     * labels; the rest is rebuilt by RECOMPUTE */
    int64_t kept = x->recompute ? st->out_b + st->loss_b : held;
    /* a split backward's output gradients, from its BWD_INPUT to its BWD_WEIGHT */
    int64_t keep = st->keep_b;
    if (rows != st->rows) {
        held = held * rows / div;
        kept = kept * rows / div;
        keep = keep * rows / div;
    }
    switch (op->kind) {
    case PT_OP_FWD:
        st->cur[PT_MEM_ACTS] += in_b + kept;
        st->inflight++;
        if (op->flags & PT_OPF_STASH)
            stash_take(p, sim, st, op->version);
        mem_note(out, st);
        after_read(p, sim, st, i, op->version);
        break;
    case PT_OP_RECOMPUTE:
        st->cur[PT_MEM_ACTS] += held - kept;
        mem_note(out, st);
        if (!(op->flags & PT_OPF_STASH))
            after_read(p, sim, st, i, op->version);
        break;
    case PT_OP_BWD_INPUT:
        /* the activations stay until the BWD_WEIGHT, which reads them */
        st->cur[PT_MEM_ACTS] += keep;
        mem_note(out, st);
        if (!(op->flags & PT_OPF_STASH))
            after_read(p, sim, st, i, op->version);
        break;
    case PT_OP_BWD:
    case PT_OP_BWD_WEIGHT: {
        int c = sim->cover[(int64_t)w * p->mb_count + op->mb];
        unsigned char *g = sim->gopen + st->cov_off;
        if (!g[c]) {
            g[c] = 1;
            st->grads_open++;
        }
        mem_note(out, st);
        st->cur[PT_MEM_ACTS] -= in_b + held + (op->kind == PT_OP_BWD_WEIGHT ? keep : 0);
        st->inflight--;
        if (op->flags & PT_OPF_STASH)
            stash_drop(p, sim, st, op->version);
        else
            after_read(p, sim, st, i, op->version);
        host_resync(st);
        break;
    }
    case PT_OP_OPT_STEP: {
        unsigned char *alive = sim->alive + st->ver_off;
        int old = st->newest, v = op->version;
        if (v >= 0 && !alive[v]) {
            alive[v] = 1;
            if (v < p->initial_versions)
                st->init_alive++;
            else
                st->store_n++;
        }
        st->newest = v;
        /* in place when nothing reads the old newest version any more (its
         * array stays, the new weights in one of their own, while a stash
         * holds it) */
        if (old != v && sim->last_read[st->ver_off + old] < i)
            kill_version(p, sim, st, alive, old);
        mem_note(out, st);
        unsigned char *g = sim->gopen + st->cov_off;
        if (g[st->opt_seen]) {
            g[st->opt_seen] = 0;
            st->grads_open--;
        }
        st->opt_seen++;
        break;
    }
    default:
        break;
    }
}

/* The event loop ------------------------------------------------------- */

/* Worker u may go on: its runner (its host, or u itself) goes back on the stack. */
static void wake(const pt_program *p, pt_sim *sim, int *top, int u)
{
    sim->ws[u].blocked = -1;
    sim->stack[(*top)++] = pt_sched_host_of(p, u);
}

static double op_duration(const pt_program *p, pt_sim *sim, const pt_cost *cost, int w,
                          const pt_op *op)
{
    const wstate *st = &sim->ws[w];
    const pt_worker *x = &p->workers[w];
    int rows = op->row_hi - op->row_lo;
    switch (op->kind) {
    case PT_OP_FWD:
        return rows == st->rows
                   ? st->t_fwd
                   : st->slow * pt_cost_fwd_s(cost, x->first, x->last, rows, x->device);
    case PT_OP_BWD:
        return rows == st->rows
                   ? st->t_bwd
                   : st->slow * pt_cost_bwd_s(cost, x->first, x->last, rows, x->device);
    case PT_OP_BWD_INPUT:
        return rows == st->rows
                   ? st->t_bin
                   : st->slow * pt_cost_bwd_input_s(cost, x->first, x->last, rows, x->device);
    case PT_OP_BWD_WEIGHT:
        return rows == st->rows
                   ? st->t_bw
                   : st->slow * pt_cost_bwd_weight_s(cost, x->first, x->last, rows, x->device);
    case PT_OP_RECOMPUTE:
        return rows == st->rows
                   ? st->t_rec
                   : st->slow * pt_cost_recompute_s(cost, x->first, x->last, rows, x->device);
    case PT_OP_OPT_STEP:
        return st->t_opt;
    default:
        return 0;
    }
}

/* one pass of the event loop: the program, its simulation state and the
 * cost constants every op reads */
typedef struct run_ctx {
    const pt_program *p;
    pt_sim *sim;
    const pt_cost *cost;
    int top;
    double gap, recv_wake;
    int hold;
} run_ctx;

enum { STEP_DONE = 0, STEP_BLOCKED = 1 };

static int step_send(run_ctx *c, int i, int w)
{
    pt_sim *sim = c->sim;
    const pt_op *op = &c->p->ops[i];
    wstate *st = &sim->ws[w];
    if (op->kind == PT_OP_SEND_ACT)
        st->hook_rows = 0;
    int j = sim->match[i];
    double start = st->ready > st->comm_free ? st->ready : st->comm_free;
    double end =
        start + pt_cost_p2p_s(c->cost, c->p->workers[w].device, sim->devs[op->peer], op->bytes);
    st->comm_free = end;
    if (c->hold && end > st->ready)
        st->ready = end;
    sim->events[i].start = start;
    sim->events[i].end = end;
    /* a receiver already waiting returns recv_wake after the send ends */
    sim->arrival[j] = end + c->recv_wake;
    if (sim->ws[op->peer].blocked == j)
        wake(c->p, sim, &c->top, op->peer);
    return STEP_DONE;
}

static int step_recv(run_ctx *c, int i, int w)
{
    pt_sim *sim = c->sim;
    wstate *st = &sim->ws[w];
    st->hook_rows = 0;
    if (sim->arrival[i] < 0) {
        st->blocked = i;
        return STEP_BLOCKED;
    }
    sim->events[i].start = st->ready;
    if (sim->arrival[i] > st->ready)
        st->ready = sim->arrival[i];
    sim->events[i].end = st->ready;
    return STEP_DONE;
}

/* worker w joins all-reduce instance k; the last of the stage's r replicas to
 * join starts it (after the stage's previous instance) and wakes the waiters */
static void join_allreduce(run_ctx *c, int i, int w, int k)
{
    const pt_program *p = c->p;
    pt_sim *sim = c->sim;
    const pt_op *op = &p->ops[i];
    const pt_worker *x = &p->workers[w];
    wstate *st = &sim->ws[w];
    inst *in = &sim->insts[k];
    st->joined = 1;
    /* a hooked bucket is ready once the BWD has run its layers, which
     * come last in the backward's order: layers [layer_lo, last) */
    double ready = st->ready;
    if ((op->flags & PT_OPF_ASYNC) && st->hook_rows > 0 && op->layer_hi > op->layer_lo)
        ready = st->hook_start +
                pt_cost_bwd_s(c->cost, op->layer_lo, x->last, st->hook_rows, x->device);
    if (in->count == 0 || ready > in->start)
        in->start = ready;
    if (++in->count < x->replica_count)
        return;
    int s = x->stage;
    if (k > sim->ar_first[s] && sim->insts[k - 1].end > in->start)
        in->start = sim->insts[k - 1].end;
    in->end = in->start + pt_cost_allreduce_s(c->cost, sim->devs + p->stage_worker[s],
                                              x->replica_count, op->bytes);
    in->done = 1;
    for (int u = p->stage_worker[s]; u < p->stage_worker[s + 1]; u++) {
        int b = sim->ws[u].blocked;
        if (b >= 0 && (pt_op_facts(p->ops[b].kind) & PT_OPK_COLLECTIVE) && sim->match[b] == k)
            wake(p, sim, &c->top, u);
    }
}

static int step_allreduce(run_ctx *c, int i, int w)
{
    pt_sim *sim = c->sim;
    const pt_op *op = &c->p->ops[i];
    wstate *st = &sim->ws[w];
    int k = sim->match[i];
    inst *in = &sim->insts[k];
    if (!st->joined)
        join_allreduce(c, i, w, k);
    if (!(op->flags & PT_OPF_ASYNC)) {
        if (!in->done) {
            st->blocked = i;
            return STEP_BLOCKED;
        }
        if (in->end > st->ready)
            st->ready = in->end;
    }
    st->joined = 0;
    return STEP_DONE;
}

static int step_ar_wait(run_ctx *c, int i, int w, pt_error *err)
{
    pt_sim *sim = c->sim;
    wstate *st = &sim->ws[w];
    st->hook_rows = 0;
    int k = sim->match[i];
    if (k < 0)
        return pt_error_set(err, PT_EINVAL,
                            "simulate: op %d: AR_WAIT without an asynchronous "
                            "ALLREDUCE before it",
                            i);
    if (!sim->insts[k].done) {
        st->blocked = i;
        return STEP_BLOCKED;
    }
    sim->events[i].start = st->ready;
    if (sim->insts[k].end > st->ready)
        st->ready = sim->insts[k].end;
    sim->events[i].end = st->ready;
    return STEP_DONE;
}

static int step_compute(run_ctx *c, int i, int w)
{
    pt_sim *sim = c->sim;
    const pt_op *op = &c->p->ops[i];
    wstate *st = &sim->ws[w];
    double start = st->ready > st->comp_free ? st->ready : st->comp_free;
    double end = start + op_duration(c->p, sim, c->cost, w, op);
    st->hook_start = start;
    st->hook_rows = op->kind == PT_OP_BWD ? op->row_hi - op->row_lo : 0;
    sim->events[i].start = start;
    sim->events[i].end = end;
    st->comp_free = st->ready = end;
    st->busy += end - start;
    mem_op(c->p, sim, w, i);
    return STEP_DONE;
}

static int step_op(run_ctx *c, int i, int w, pt_error *err)
{
    const pt_op *op = &c->p->ops[i];
    c->sim->events[i].lane = (uint8_t)pt_op_lane(op->kind);
    switch (op->kind) {
    case PT_OP_SEND_ACT:
    case PT_OP_SEND_GRAD:
        return step_send(c, i, w);
    case PT_OP_RECV_ACT:
    case PT_OP_RECV_GRAD:
        return step_recv(c, i, w);
    case PT_OP_ALLREDUCE:
        return step_allreduce(c, i, w);
    case PT_OP_AR_WAIT:
        return step_ar_wait(c, i, w, err);
    default:
        return step_compute(c, i, w);
    }
}

/* runs host h's ops until it ends or blocks; <0 on an error */
static int run_host(run_ctx *c, int h, pt_error *err)
{
    const pt_program *p = c->p;
    pt_sim *sim = c->sim;
    const int hosted = p->host_count > 0, len = pt_sched_host_len(p, h);
    while (sim->hpc[h] < len) {
        int i = pt_sched_host_op(p, h, sim->hpc[h]);
        int w = sim->events[i].worker;
        wstate *st = &sim->ws[w];
        if (hosted) { /* the device's lanes, as the host's previous op left them */
            st->ready = sim->lanes[h].ready;
            st->comp_free = sim->lanes[h].comp_free;
            st->comm_free = sim->lanes[h].comm_free;
        }
        int rc = step_op(c, i, w, err);
        if (rc != STEP_DONE)
            return rc;
        /* the runtime's time between two ops (dispatch, messaging,
         * telemetry): the next op of this worker starts that much later */
        st->ready += c->gap;
        st->pc++;
        sim->hpc[h]++;
        if (hosted)
            sim->lanes[h] = (lanes){st->ready, st->comp_free, st->comm_free};
    }
    return STEP_DONE;
}

/* the hosts that never finished, named by the op each waits on */
static int deadlock_error(const pt_program *p, const pt_sim *sim, pt_error *err)
{
    int stuck = 0, nh = pt_sched_host_count(p);
    char msg[PT_ERROR_MAX] = "", buf[160];
    size_t len = 0;
    for (int h = 0; h < nh; h++) {
        if (sim->hpc[h] >= pt_sched_host_len(p, h))
            continue;
        if (stuck++ < 3 && len < sizeof msg) {
            int n =
                snprintf(msg + len, sizeof msg - len, "%s%s", stuck > 1 ? "; " : "",
                         pt_sched_op_str(p, pt_sched_host_op(p, h, sim->hpc[h]), buf, sizeof buf));
            if (n > 0)
                len += (size_t)n;
        }
    }
    if (stuck)
        return pt_error_set(err, PT_EDEADLOCK, "simulate: deadlock: %d workers blocked: %.400s",
                            stuck, msg);
    return 0;
}

static int run_events(const pt_program *p, pt_sim *sim, const pt_cost *cost, pt_error *err)
{
    run_ctx c = {p,
                 sim,
                 cost,
                 0,
                 pt_cost_op_overhead_s(cost),
                 pt_cost_recv_wake_s(cost),
                 pt_cost_sends_hold(cost)};
    for (int i = 0; i < p->op_count; i++)
        sim->arrival[i] = -1;
    for (int k = 0; k < sim->ar_first[p->stage_count]; k++)
        sim->insts[k] = (inst){0, 0, 0, 0};
    const int hosted = p->host_count > 0, nh = pt_sched_host_count(p);
    for (int h = nh - 1; h >= 0; h--) {
        sim->hpc[h] = 0;
        sim->stack[c.top++] = h;
        if (hosted)
            sim->lanes[h] = (lanes){0, 0, 0};
    }
    while (c.top > 0) {
        int rc = run_host(&c, sim->stack[--c.top], err);
        if (rc < 0)
            return rc;
    }
    return deadlock_error(p, sim, err);
}

static double overlap(double a, double b, double lo, double hi)
{
    double s = a > lo ? a : lo, e = b < hi ? b : hi;
    return e > s ? e - s : 0;
}

/* Busy and comm time of worker w inside [lo, hi). */
static void measure(const pt_program *p, const pt_sim *sim, int w, double lo, double hi,
                    pt_sim_worker *ow)
{
    ow->busy_s = ow->comm_s = 0;
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++) {
        const pt_sim_event *ev = &sim->events[i];
        if (ev->lane == PT_LANE_COMPUTE)
            ow->busy_s += overlap(ev->start, ev->end, lo, hi);
        else if (ev->lane == PT_LANE_COMM)
            ow->comm_s += overlap(ev->start, ev->end, lo, hi);
    }
}

static void summarise(const pt_program *p, pt_sim *sim, pt_sim_result *out)
{
    int M = p->mb_per_window, W = (p->mb_count + M - 1) / M;
    double makespan = 0;
    for (int t = 0; t < W; t++)
        sim->finish[t] = 0;
    /* one pass: all-reduce events, ends, window finishes, whole-run comm time */
    for (int w = 0; w < p->worker_count; w++) {
        pt_sim_worker *ow = &sim->workers[w];
        double end = 0, comm = 0;
        for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++) {
            pt_sim_event *ev = &sim->events[i];
            const pt_op *op = &p->ops[i];
            if (op->kind == PT_OP_ALLREDUCE) {
                ev->start = sim->insts[sim->match[i]].start;
                ev->end = sim->insts[sim->match[i]].end;
            }
            if (ev->lane == PT_LANE_COMM)
                comm += ev->end - ev->start;
            if (ev->end > end)
                end = ev->end;
            int t = op->mb / M;
            if (ev->end > sim->finish[t])
                sim->finish[t] = ev->end;
        }
        ow->end_s = end;
        ow->busy_s = sim->ws[w].busy;
        ow->comm_s = comm;
        if (end > makespan)
            makespan = end;
    }
    out->makespan_s = makespan;
    double lo = 0, hi = makespan;
    if (!p->synchronous && W >= 3) {
        lo = sim->finish[0];
        hi = sim->finish[W - 2];
        out->iter_s = (hi - lo) / (W - 2);
    } else if (!p->synchronous && W == 2) {
        lo = sim->finish[0];
        hi = sim->finish[1];
        out->iter_s = hi - lo;
    } else {
        out->iter_s = makespan;
    }
    if (!(hi > lo)) {
        lo = 0;
        hi = makespan;
    }
    out->measure_lo = lo;
    out->measure_hi = hi;
    out->throughput = out->iter_s > 0 ? (double)M * p->mb_size / out->iter_s : 0;
    out->fits = 1;
    out->worst_worker = 0;
    double worst = -1, bubble = 0;
    for (int w = 0; w < p->worker_count; w++) {
        pt_sim_worker *ow = &sim->workers[w];
        if (lo > 0 || hi < makespan) /* a steady-state window: clip every event */
            measure(p, sim, w, lo, hi, ow);
        ow->busy_frac = pt_op_busy_frac(ow->busy_s, hi - lo);
        ow->bubble_frac = 1 - ow->busy_frac;
        bubble += ow->bubble_frac;
        double ratio = ow->limit > 0 ? (double)ow->peak.total / (double)ow->limit : 1e300;
        if (ratio > worst) {
            worst = ratio;
            out->worst_worker = w;
        }
        if (ow->peak.total > ow->limit)
            out->fits = 0;
    }
    out->bubble_frac = bubble / p->worker_count;
    if (p->host_count > 0) {
        bubble = 0;
        out->fits = 1;
        for (int h = 0; h < p->host_count; h++)
            sim->hosts[h].busy_s = 0;
        for (int w = 0; w < p->worker_count; w++)
            sim->hosts[p->worker_host[w]].busy_s += sim->workers[w].busy_s;
        for (int h = 0; h < p->host_count; h++) {
            pt_sim_host *ho = &sim->hosts[h];
            ho->busy_frac = pt_op_busy_frac(ho->busy_s, hi - lo);
            ho->bubble_frac = 1 - ho->busy_frac;
            bubble += ho->bubble_frac;
            if (ho->peak_total > ho->limit)
                out->fits = 0;
        }
        out->bubble_frac = bubble / p->host_count;
    } else {
        for (int w = 0; w < p->worker_count; w++) {
            const pt_sim_worker *ow = &sim->workers[w];
            sim->hosts[w] = (pt_sim_host){.device = p->workers[w].device,
                                          .worker_count = 1,
                                          .busy_s = ow->busy_s,
                                          .busy_frac = ow->busy_frac,
                                          .bubble_frac = ow->bubble_frac,
                                          .peak_total = ow->peak.total,
                                          .limit = ow->limit,
                                          .peak_inflight = ow->peak_inflight};
        }
    }
    out->host_count = pt_sched_host_count(p);
    out->hosts = sim->hosts;
    out->worker_count = p->worker_count;
    out->workers = sim->workers;
    out->event_count = p->op_count;
    out->events = sim->events;
}

/* One simulation with the current per-worker compute stretch. */
static int run_pass(pt_sim *sim, const pt_program *prog, const pt_cost *cost, pt_error *err)
{
    int rc = prepare(sim, prog, cost, err);
    if (rc == PT_ENOMEM)
        return pt_error_set(err, rc, "simulate: out of memory");
    if (rc < 0)
        return rc;
    if ((rc = pt_sched_match(prog, sim->match, sim->scratch, err)) < 0)
        return rc;
    for (int h = 0; h < pt_sched_host_count(prog); h++) {
        pt_sim_host *ho = &sim->hosts[h];
        int d = ho->device;
        memset(ho, 0, sizeof *ho);
        ho->device = d;
        ho->limit = pt_cost_topology(cost)->devices[d].memory_bytes;
    }
    for (int w = 0; w < prog->worker_count; w++)
        if ((rc = init_worker(prog, sim, cost, w, err)) < 0)
            return rc;
    return run_events(prog, sim, cost, err);
}

static int span_cmp(const void *a, const void *b)
{
    const pt_core_span *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->worker < y->worker ? -1 : x->worker > y->worker;
}

typedef struct span_end {
    double t;
    int node;
    int64_t k; /* 2 * span + (1 for its end) */
} span_end;

static int end_cmp(const void *a, const void *b)
{
    const span_end *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

int pt_core_stretch(pt_core_span *spans, int64_t n, int workers, double *stretch)
{
    for (int w = 0; w < workers; w++)
        stretch[w] = 1.0;
    if (n <= 0)
        return 0;
    qsort(spans, (size_t)n, sizeof *spans, span_cmp); /* a deterministic order */
    span_end *e = malloc((size_t)(2 * n) * sizeof *e);
    double *g = malloc((size_t)(2 * n) * sizeof *g);
    double *num = calloc((size_t)workers, sizeof *num), *den = calloc((size_t)workers, sizeof *den);
    if (!e || !g || !num || !den) {
        free(e);
        free(g);
        free(num);
        free(den);
        return PT_ENOMEM;
    }
    for (int64_t i = 0; i < n; i++) {
        e[2 * i] = (span_end){spans[i].start, spans[i].node, 2 * i};
        e[2 * i + 1] = (span_end){spans[i].end, spans[i].node, 2 * i + 1};
    }
    qsort(e, (size_t)(2 * n), sizeof *e, end_cmp);
    /* G(t): the integral of max(1, busy / cores) over the node's time; a
     * span's stretched share is G(end) - G(start) */
    double G = 0, last = 0;
    int busy = 0, node = 0;
    for (int64_t q = 0; q < 2 * n; q++) {
        const pt_core_span *sp = &spans[e[q].k / 2];
        if (q == 0 || e[q].node != node) {
            node = e[q].node;
            G = 0;
            busy = 0;
            last = e[q].t;
        }
        double c = sp->cores > 0 ? sp->cores : 1;
        double f = busy > c ? busy / c : 1.0;
        G += (e[q].t - last) * f;
        last = e[q].t;
        g[e[q].k] = G;
        busy += (e[q].k & 1) ? -1 : 1;
    }
    for (int64_t i = 0; i < n; i++) {
        int w = spans[i].worker;
        if (w < 0 || w >= workers || !(spans[i].end > spans[i].start))
            continue;
        num[w] += g[2 * i + 1] - g[2 * i];
        den[w] += spans[i].end - spans[i].start;
    }
    for (int w = 0; w < workers; w++)
        if (den[w] > 0 && num[w] > den[w])
            stretch[w] = num[w] / den[w];
    free(e);
    free(g);
    free(num);
    free(den);
    return 0;
}

/* The compute stretch of every worker on shared cores, from the last pass's
 * compute-lane events into next[]; 0 or PT_ENOMEM. */
static int share_from_events(const pt_program *prog, const pt_sim *sim, const pt_topology *topo,
                             double *next)
{
    int64_t n = 0;
    for (int i = 0; i < prog->op_count; i++)
        n += sim->events[i].lane == PT_LANE_COMPUTE;
    pt_core_span *sp = malloc((size_t)(n > 0 ? n : 1) * sizeof *sp);
    if (!sp)
        return PT_ENOMEM;
    int64_t k = 0;
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_device *d = &topo->devices[prog->workers[w].device];
        if (d->node_cores <= 0)
            continue;
        for (int i = prog->workers[w].op_begin; i < prog->workers[w].op_end; i++)
            if (sim->events[i].lane == PT_LANE_COMPUTE)
                sp[k++] = (pt_core_span){sim->events[i].start, sim->events[i].end, w, d->node,
                                         d->node_cores};
    }
    int rc = pt_core_stretch(sp, k, prog->worker_count, next);
    free(sp);
    return rc;
}

int pt_sim_run(pt_sim *sim, const pt_program *prog, const pt_cost *cost, pt_sim_result *out,
               pt_error *err)
{
    if (!sim || !prog || !cost || !out)
        return pt_error_set(err, PT_EINVAL, "simulate: sim, program, cost and result are required");
    memset(out, 0, sizeof *out);
    const pt_topology *topo = pt_cost_topology(cost);
    int shared = 0, nw = prog->worker_count, rc;
    for (int w = 0; w < nw && prog->workers; w++) {
        int d = prog->workers[w].device;
        shared |= d >= 0 && d < topo->device_count && topo->devices[d].node_cores > 0;
    }
    sim->share_on = 0;
    if (shared) {
        /* shared cores: a fixed point of stretch -> timeline -> stretch,
         * from no stretch up (the stretch only grows with overlap) */
        if (RESERVE(share, cap_share, 2 * (int64_t)nw) < 0)
            return pt_error_set(err, PT_ENOMEM, "simulate: out of memory");
        for (int w = 0; w < nw; w++)
            sim->share[w] = 1.0;
        sim->share_on = 1;
        for (int pass = 0;; pass++) {
            if ((rc = run_pass(sim, prog, cost, err)) < 0)
                return rc;
            double *next = sim->share + nw, most = 0;
            if (pass + 1 >= PT_SIM_SHARE_PASSES)
                break;
            if (share_from_events(prog, sim, topo, next) < 0)
                return pt_error_set(err, PT_ENOMEM, "simulate: out of memory");
            for (int w = 0; w < nw; w++) {
                double d = next[w] - sim->share[w];
                most = d > most ? d : -d > most ? -d : most;
                sim->share[w] = next[w];
            }
            if (most < PT_SIM_SHARE_TOL)
                break;
        }
    } else if ((rc = run_pass(sim, prog, cost, err)) < 0) {
        return rc;
    }
    summarise(prog, sim, out);
    for (int w = 0; w < nw; w++)
        sim->workers[w].core_stretch = sim->ws[w].slow;
    return 0;
}

int pt_sim_plan(pt_sim *sim, const pt_plan *plan, const pt_cost *cost, const pt_sched_opts *opts,
                pt_program *prog, pt_sim_result *out, pt_error *err)
{
    if (!cost)
        return pt_error_set(err, PT_EINVAL, "simulate: a cost model is required");
    int rc = pt_sched_build(plan, pt_cost_profile(cost), opts, prog, err);
    if (rc < 0)
        return rc;
    return pt_sim_run(sim, prog, cost, out, err);
}
