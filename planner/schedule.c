/* Schedule programs: the registry of generators, the set-up every kind shares,
 * the emitters generators use, and SEND/RECV matching. The validator lives in
 * sched_validate.c. */
#include "planner/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/sched_gen.h"

/* The built-in kinds, one per line of PT_SCHED_KIND_LIST (protocol/sched_kind.h);
 * kinds registered at run time follow them. */
static const pt_sched_info builtin[PT_SCHED_BUILTIN_COUNT] = {
#define PT_SCHED_ENTRY_(ID, name, flags, inflight, versions, hold, cmin, cmax, generator, summary) \
    [PT_SCHED_##ID] = {{name, flags, inflight, versions, summary, hold, cmin, cmax}, generator},
    PT_SCHED_KIND_LIST(PT_SCHED_ENTRY_)
#undef PT_SCHED_ENTRY_
};

static const pt_sched_info *added[PT_SCHED_KIND_MAX - PT_SCHED_BUILTIN_COUNT];

const pt_sched_info *pt_sched_info_of(pt_sched_kind kind)
{
    int k = (int)kind;
    if (k >= 0 && k < PT_SCHED_BUILTIN_COUNT)
        return &builtin[k];
    if (k >= PT_SCHED_BUILTIN_COUNT && k < pt_sched_kind_count())
        return added[k - PT_SCHED_BUILTIN_COUNT];
    return NULL;
}

int pt_sched_register(const pt_sched_info *info, pt_sched_kind *out, pt_error *err)
{
    if (!info || !out)
        return pt_error_set(err, PT_EINVAL, "schedule kind: an entry and an id are required");
    if (!info->generate)
        return pt_error_set(err, PT_EINVAL, "schedule kind \"%s\": no generator",
                            info->facts.name ? info->facts.name : "(null)");
    pt_sched_kind k;
    int rc = pt_sched_kind_register(&info->facts, &k, err);
    if (rc < 0)
        return rc;
    added[k - PT_SCHED_BUILTIN_COUNT] = info;
    *out = k;
    return 0;
}

/* ---- set-up ------------------------------------------------------------ */

static int64_t sum_act(const pt_profile *pf, int boundary)
{
    if (!pf)
        return 0;
    return boundary == 0 ? pf->input_bytes : pf->layers[boundary - 1].act_bytes;
}

static int check_plan(const pt_plan *plan, const pt_profile *profile, int M, pt_error *err)
{
    if (plan->stage_count < 1 || !plan->stages)
        return pt_error_set(err, PT_EINVAL, "plan: stages: none");
    if (plan->microbatch_size < 1)
        return pt_error_set(err, PT_EINVAL, "plan: microbatch_size: %d is not positive",
                            plan->microbatch_size);
    if (M < 1)
        return pt_error_set(err, PT_EINVAL, "plan: microbatch_count: %d is not positive", M);
    if (profile && profile->layer_count != plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "plan: layer_count: %d layers, but the profile has %d",
                            plan->layer_count, profile->layer_count);
    if (profile && profile->microbatch < 1)
        return pt_error_set(err, PT_EINVAL, "profile: microbatch: %d is not positive",
                            profile->microbatch);
    int expect = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        const pt_stage *st = &plan->stages[s];
        if (st->first != expect || st->last <= st->first || st->last > plan->layer_count)
            return pt_error_set(err, PT_EINVAL,
                                "plan: stages[%d].layers: [%d,%d) does not continue at layer %d "
                                "within %d layers",
                                s, st->first, st->last, expect, plan->layer_count);
        expect = st->last;
        if (st->replica_count < 1 || !st->replicas)
            return pt_error_set(err, PT_EINVAL, "plan: stages[%d].replicas: none", s);
        if (st->replica_count > plan->microbatch_size && !pt_plan_round_robin(plan))
            return pt_error_set(err, PT_EINVAL,
                                "plan: stages[%d].replicas: %d replicas cannot split a "
                                "micro-batch of %d samples",
                                s, st->replica_count, plan->microbatch_size);
    }
    if (expect != plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "plan: stages: cover layers [0,%d) of %d", expect,
                            plan->layer_count);
    return 0;
}

static int grow(void **buf, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*buf, (size_t)n * elem);
    if (!q)
        return PT_ENOMEM;
    *buf = q;
    *cap = n;
    return 0;
}

/* Interleaved placement: host (rank d, replica r) runs the workers of stages
 * d, d+S, ... replica r; their host order is filled in by the generator. */
static int setup_hosts(pt_program *p, const pt_plan *plan)
{
    p->chunks = 1;
    p->rank_count = p->stage_count;
    p->host_count = 0;
    if (!pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_CHUNKS) || plan->chunks < 2 ||
        p->stage_count % plan->chunks)
        return 0;
    int v = plan->chunks, P = p->stage_count / v, nh = p->stage_worker[P];
    if (grow((void **)&p->worker_host, &p->worker_host_cap, p->worker_count, sizeof(int)) < 0 ||
        grow((void **)&p->host_begin, &p->host_cap, nh + 1, sizeof(int)) < 0)
        return PT_ENOMEM;
    p->chunks = v;
    p->rank_count = P;
    p->host_count = nh;
    for (int w = 0; w < p->worker_count; w++) {
        const pt_worker *x = &p->workers[w];
        p->worker_host[w] = p->stage_worker[x->stage % P] + x->replica;
    }
    for (int h = 0; h <= nh; h++)
        p->host_begin[h] = 0;
    return 0;
}

/* Sizes the program and fills in its workers; ops are left empty. */
static int setup(pt_program *p, const pt_plan *plan, const pt_profile *pf, int M, int windows,
                 const pt_sched_info *info)
{
    int S = plan->stage_count, nw = 0;
    for (int s = 0; s < S; s++)
        nw += plan->stages[s].replica_count;
    /* worker and stage arrays are sized exactly; the op array keeps its capacity */
    pt_worker *wk = realloc(p->workers, (size_t)nw * sizeof *wk);
    if (!wk)
        return PT_ENOMEM;
    p->workers = wk;
    int *sw = realloc(p->stage_worker, (size_t)(S + 1) * sizeof *sw);
    if (!sw)
        return PT_ENOMEM;
    p->stage_worker = sw;
    p->kind = plan->schedule;
    p->policy = plan->policy == 'B' ? 'B' : 'A';
    p->vertical_sync = plan->vertical_sync ? 1 : 0;
    p->round_robin = pt_plan_round_robin(plan);
    p->synchronous = (info->facts.flags & PT_SCHED_SYNCHRONOUS) != 0;
    p->optim = plan->optimizer.kind;
    p->stage_count = S;
    p->worker_count = nw;
    p->mb_size = plan->microbatch_size;
    p->mb_per_window = M;
    p->window_count = windows;
    p->mb_count = M * windows;
    p->initial_versions = 1;
    p->profile_mb = pf ? pf->microbatch : 0;
    p->op_count = 0;
    int w = 0;
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &plan->stages[s];
        sw[s] = w;
        int64_t params = 0;
        for (int l = st->first; pf && l < st->last; l++)
            params += pf->layers[l].param_bytes;
        for (int r = 0; r < st->replica_count; r++, w++) {
            pt_worker *x = &wk[w];
            memset(x, 0, sizeof *x);
            x->stage = s;
            x->replica = r;
            x->device = st->replicas[r];
            x->first = st->first;
            x->last = st->last;
            if (p->round_robin) { /* whole micro-batches */
                x->row_lo = 0;
                x->row_hi = plan->microbatch_size;
            } else {
                pt_sched_rows(plan->microbatch_size, st->replica_count, r, &x->row_lo, &x->row_hi);
            }
            x->replica_count = st->replica_count;
            x->recompute = st->recompute ? 1 : 0;
            x->param_bytes = params;
            x->in_bytes = sum_act(pf, st->first);
            x->out_bytes = sum_act(pf, st->last);
        }
    }
    sw[S] = w;
    return setup_hosts(p, plan);
}

int pt_sched_bucket_lo(const pt_profile *pf, int first, int hi, int64_t cap)
{
    if (!pf || cap <= 0)
        return first;
    int64_t acc = 0;
    int l = hi - 1;
    for (; l > first; l--) {
        acc += pf->layers[l].param_bytes;
        if (acc >= cap)
            break;
    }
    for (int k = first; k < l; k++)
        if (pf->layers[k].param_bytes > 0)
            return l;
    return first;
}

/* Cuts every stage's layers into gradient buckets (see pt_program). */
static int setup_buckets(pt_program *p, const pt_plan *plan, const pt_profile *pf, int64_t cap)
{
    int S = plan->stage_count, n = 0;
    int *sb = realloc(p->stage_bucket, (size_t)(S + 1) * sizeof *sb);
    if (!sb)
        return PT_ENOMEM;
    p->stage_bucket = sb;
    p->bucket_bytes = cap;
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &plan->stages[s];
        sb[s] = n;
        for (int hi = st->last; hi > st->first;) {
            if (grow((void **)&p->buckets, &p->bucket_cap, n + 1, sizeof(pt_bucket)) < 0)
                return PT_ENOMEM;
            pt_bucket *b = &p->buckets[n++];
            b->hi = hi;
            b->lo = pt_sched_bucket_lo(pf, st->first, hi, cap);
            b->bytes = 0;
            for (int l = b->lo; pf && l < hi; l++)
                b->bytes += pf->layers[l].param_bytes;
            hi = b->lo;
        }
    }
    sb[S] = n;
    return 0;
}

int pt_sched_gen_host_ops(pt_program *prog)
{
    return grow((void **)&prog->host_ops, &prog->host_ops_cap, prog->op_count, sizeof(int32_t));
}

static void make_empty(pt_program *p)
{
    p->host_count = 0;
    p->op_count = 0;
    p->worker_count = 0;
    p->stage_count = 0;
    p->mb_count = 0;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Windows of M micro-batches a round-robin program's length must be a
 * multiple of (every stage's replicas divide its micro-batches): L / gcd(M, L)
 * for L the least common multiple of the replica counts; 0 when above 2^20. */
static int rr_window_step(const pt_plan *plan, int M)
{
    int64_t L = 1;
    for (int s = 0; s < plan->stage_count && L <= (1 << 20); s++) {
        int64_t r = plan->stages[s].replica_count;
        L = L / gcd64(L, r) * r;
    }
    int64_t step = L / gcd64(L, M);
    return step <= (1 << 20) ? (int)step : 0;
}

int pt_sched_window_count(const pt_plan *plan, int M, int asked, int *out, pt_error *err)
{
    const pt_sched_info *info = pt_sched_info_of(plan->schedule);
    if (!info)
        return pt_error_set(err, PT_EINVAL, "plan: schedule: kind %d has no generator",
                            (int)plan->schedule);
    if (info->facts.flags & PT_SCHED_SYNCHRONOUS) {
        if (asked > 1)
            return pt_error_set(err, PT_EINVAL,
                                "schedule %s: windows: a synchronous schedule covers one "
                                "iteration, not %d",
                                info->facts.name, asked);
        *out = 1;
        return 0;
    }
    int w = asked;
    if (w <= 0) {
        w = (2 * plan->stage_count + M - 1) / M + 2;
        if (w < PT_SCHED_MIN_WINDOWS)
            w = PT_SCHED_MIN_WINDOWS;
    }
    if (pt_plan_round_robin(plan)) {
        int step = rr_window_step(plan, M);
        if (step == 0)
            return pt_error_set(err, PT_ERANGE,
                                "schedule %s: replication: round-robin rounds of these replica "
                                "counts need more than 2^20 windows of %d micro-batches",
                                info->facts.name, M);
        if (asked > 0 && w % step)
            return pt_error_set(err, PT_EINVAL,
                                "schedule %s: windows: %d windows of %d micro-batches do not end "
                                "on a whole round-robin round of every stage (a multiple of %d "
                                "windows does)",
                                info->facts.name, w, M, step);
        w = (w + step - 1) / step * step;
    }
    *out = w;
    return 0;
}

int pt_sched_build(const pt_plan *plan, const pt_profile *profile, const pt_sched_opts *opts,
                   pt_program *prog, pt_error *err)
{
    if (!plan || !prog)
        return pt_error_set(err, PT_EINVAL, "pt_sched_build: plan and program are required");
    const pt_sched_info *info = pt_sched_info_of(plan->schedule);
    if (!info) {
        const char *name = pt_sched_kind_name(plan->schedule);
        return name ? pt_error_set(err, PT_EINVAL, "plan: schedule: %s has no generator", name)
                    : pt_error_set(err, PT_EINVAL, "plan: schedule: unknown kind %d",
                                   (int)plan->schedule);
    }
    pt_sched_opts o = opts ? *opts : (pt_sched_opts){0};
    int M = o.microbatches > 0 ? o.microbatches : plan->microbatch_count;
    int rc = check_plan(plan, profile, M, err);
    if (rc < 0)
        goto fail;
    int windows = 1;
    if ((rc = pt_sched_window_count(plan, M, o.windows, &windows, err)) < 0)
        goto fail;
    if ((int64_t)M * windows > (1 << 30)) {
        rc = pt_error_set(err, PT_ERANGE, "schedule %s: %d windows of %d micro-batches is too many",
                          info->facts.name, windows, M);
        goto fail;
    }
    int64_t cap = o.bucket_bytes == 0 ? PT_SCHED_BUCKET_BYTES : o.bucket_bytes;
    if ((rc = setup(prog, plan, profile, M, windows, info)) < 0 ||
        (rc = setup_buckets(prog, plan, profile, cap)) < 0) {
        pt_error_set(err, rc, "schedule %s: out of memory", info->facts.name);
        goto fail;
    }
    if ((rc = info->generate(prog, err)) < 0) {
        if (rc == PT_ENOMEM)
            pt_error_set(err, rc, "schedule %s: out of memory", info->facts.name);
        goto fail;
    }
    return 0;
fail:
    make_empty(prog);
    return rc;
}

void pt_program_release(pt_program *prog)
{
    if (!prog)
        return;
    free(prog->workers);
    free(prog->stage_worker);
    free(prog->ops);
    free(prog->buckets);
    free(prog->stage_bucket);
    free(prog->worker_host);
    free(prog->host_begin);
    free(prog->host_ops);
    memset(prog, 0, sizeof *prog);
}

/* ---- emitters ---------------------------------------------------------- */

void pt_sched_gen_begin(pt_program *prog, int w)
{
    prog->workers[w].op_begin = prog->op_count;
}

void pt_sched_gen_end(pt_program *prog, int w)
{
    prog->workers[w].op_end = prog->op_count;
}

int pt_sched_gen_op(pt_program *prog, int kind, int flags, int mb, int mb_end, int version,
                    int peer, int row_lo, int row_hi, int64_t bytes)
{
    if (prog->op_count == prog->op_cap &&
        grow((void **)&prog->ops, &prog->op_cap, prog->op_count + 1, sizeof(pt_op)) < 0)
        return PT_ENOMEM;
    pt_op *op = &prog->ops[prog->op_count++];
    op->kind = (uint8_t)kind;
    op->flags = (uint8_t)flags;
    op->pad_ = 0;
    op->mb = mb;
    op->mb_end = mb_end;
    op->version = version;
    op->peer = peer;
    op->row_lo = row_lo;
    op->row_hi = row_hi;
    op->bytes = bytes;
    op->layer_lo = op->layer_hi = 0;
    return 0;
}

/* Emits one op per replica of stage `s` whose rows overlap [lo, hi); under
 * round-robin one op to the replica whose turn mb is. */
static int exchange(pt_program *p, int kind, int s, int mb, int lo, int hi, int64_t per_pm)
{
    if (p->round_robin) {
        int k = p->stage_worker[s] + mb % (p->stage_worker[s + 1] - p->stage_worker[s]);
        return pt_sched_gen_op(p, kind, 0, mb, mb + 1, -1, k, lo, hi,
                               pt_sched_scale_bytes(per_pm, hi - lo, p->profile_mb));
    }
    for (int k = p->stage_worker[s]; k < p->stage_worker[s + 1]; k++) {
        int a = p->workers[k].row_lo > lo ? p->workers[k].row_lo : lo;
        int b = p->workers[k].row_hi < hi ? p->workers[k].row_hi : hi;
        if (a >= b)
            continue;
        int rc = pt_sched_gen_op(p, kind, 0, mb, mb + 1, -1, k, a, b,
                                 pt_sched_scale_bytes(per_pm, b - a, p->profile_mb));
        if (rc < 0)
            return rc;
    }
    return 0;
}

int pt_sched_gen_fwd(pt_program *p, int w, int mb, int version, int flags)
{
    const pt_worker *x = &p->workers[w];
    int rc;
    if (x->stage > 0 &&
        (rc = exchange(p, PT_OP_RECV_ACT, x->stage - 1, mb, x->row_lo, x->row_hi, x->in_bytes)) < 0)
        return rc;
    if ((rc = pt_sched_gen_op(p, PT_OP_FWD, flags, mb, mb + 1, version, -1, x->row_lo, x->row_hi,
                              0)) < 0)
        return rc;
    if (x->stage + 1 < p->stage_count)
        return exchange(p, PT_OP_SEND_ACT, x->stage + 1, mb, x->row_lo, x->row_hi, x->out_bytes);
    return 0;
}

static int gen_bwd_as(pt_program *p, int w, int mb, int version, int flags, int kind);

int pt_sched_gen_bwd(pt_program *p, int w, int mb, int version, int flags)
{
    return gen_bwd_as(p, w, mb, version, flags, PT_OP_BWD);
}

int pt_sched_gen_bwd_input(pt_program *p, int w, int mb, int version, int flags)
{
    return gen_bwd_as(p, w, mb, version, flags, PT_OP_BWD_INPUT);
}

int pt_sched_gen_bwd_weight(pt_program *p, int w, int mb, int version, int flags)
{
    const pt_worker *x = &p->workers[w];
    return pt_sched_gen_op(p, PT_OP_BWD_WEIGHT, flags, mb, mb + 1, version, -1, x->row_lo,
                           x->row_hi, 0);
}

/* The backward of mb with its messages; kind BWD or BWD_INPUT (the half the
 * previous stage waits for). */
static int gen_bwd_as(pt_program *p, int w, int mb, int version, int flags, int kind)
{
    const pt_worker *x = &p->workers[w];
    int rc;
    if (x->stage + 1 < p->stage_count && (rc = exchange(p, PT_OP_RECV_GRAD, x->stage + 1, mb,
                                                        x->row_lo, x->row_hi, x->out_bytes)) < 0)
        return rc;
    if (x->recompute && (rc = pt_sched_gen_op(p, PT_OP_RECOMPUTE, flags, mb, mb + 1, version, -1,
                                              x->row_lo, x->row_hi, 0)) < 0)
        return rc;
    if ((rc = pt_sched_gen_op(p, kind, flags, mb, mb + 1, version, -1, x->row_lo, x->row_hi, 0)) <
        0)
        return rc;
    if (x->stage > 0)
        return exchange(p, PT_OP_SEND_GRAD, x->stage - 1, mb, x->row_lo, x->row_hi, x->in_bytes);
    return 0;
}

int pt_sched_gen_allreduce(pt_program *p, int w, int mb, int mb_end, int version, int flags)
{
    const pt_worker *x = &p->workers[w];
    if (x->replica_count < 2)
        return 0;
    return pt_sched_gen_op(p, PT_OP_ALLREDUCE, flags, mb, mb_end, version, x->stage, x->row_lo,
                           x->row_hi, x->param_bytes);
}

int pt_sched_gen_grad_sync(pt_program *p, int w, int mb, int mb_end, int version, int produce)
{
    const pt_worker *x = &p->workers[w];
    int rc;
    if (x->replica_count > 1 && p->bucket_bytes <= 0) {
        if ((rc = pt_sched_gen_allreduce(p, w, mb, mb_end, version, 0)) < 0)
            return rc;
    } else if (x->replica_count > 1) {
        int b0 = p->stage_bucket[x->stage], b1 = p->stage_bucket[x->stage + 1];
        for (int b = b0; b < b1; b++) {
            const pt_bucket *k = &p->buckets[b];
            if ((rc = pt_sched_gen_op(p, PT_OP_ALLREDUCE, PT_OPF_ASYNC, mb, mb_end, version,
                                      x->stage, x->row_lo, x->row_hi, k->bytes)) < 0)
                return rc;
            p->ops[p->op_count - 1].layer_lo = k->lo;
            p->ops[p->op_count - 1].layer_hi = k->hi;
        }
        for (int b = b0; b < b1; b++)
            if ((rc = pt_sched_gen_ar_wait(p, w, mb, mb_end, version)) < 0)
                return rc;
    }
    return pt_sched_gen_opt(p, w, mb, mb_end, produce);
}

int pt_sched_gen_ar_wait(pt_program *p, int w, int mb, int mb_end, int version)
{
    const pt_worker *x = &p->workers[w];
    if (x->replica_count < 2)
        return 0;
    return pt_sched_gen_op(p, PT_OP_AR_WAIT, 0, mb, mb_end, version, x->stage, x->row_lo, x->row_hi,
                           0);
}

int pt_sched_gen_opt(pt_program *p, int w, int mb, int mb_end, int version)
{
    const pt_worker *x = &p->workers[w];
    return pt_sched_gen_op(p, PT_OP_OPT_STEP, 0, mb, mb_end, version, -1, x->row_lo, x->row_hi,
                           x->param_bytes);
}

int pt_sched_gen_sync_1f1b(pt_program *p, int w, int K)
{
    int M = p->mb_per_window, rc;
    if (K > M)
        K = M;
    if (K < 1)
        K = 1;
    pt_sched_gen_begin(p, w);
    for (int k = 0; k < K; k++)
        if ((rc = pt_sched_gen_fwd(p, w, k, 0, 0)) < 0)
            return rc;
    for (int j = 0; j < M; j++) {
        if ((rc = pt_sched_gen_bwd(p, w, j, 0, 0)) < 0)
            return rc;
        if (K + j < M && (rc = pt_sched_gen_fwd(p, w, K + j, 0, 0)) < 0)
            return rc;
    }
    if ((rc = pt_sched_gen_grad_sync(p, w, 0, M, 0, 1)) < 0)
        return rc;
    pt_sched_gen_end(p, w);
    return 0;
}

/* ---- matching ---------------------------------------------------------- */

static int is_send(int k)
{
    return (pt_op_facts(k) & PT_OPK_SEND) != 0;
}

static int is_recv(int k)
{
    return (pt_op_facts(k) & PT_OPK_RECV) != 0;
}

int64_t pt_sched_match_scratch(const pt_program *prog)
{
    if (!prog)
        return 0;
    return (int64_t)prog->worker_count * prog->mb_count + 1 + prog->op_count;
}

/* Receives are bucketed by (receiving worker, micro-batch) with a counting
 * sort; a send scans the few receives of its (peer, micro-batch) bucket. All
 * passes but the bucket look-ups are sequential, which beats hashing on the
 * large programs the console re-simulates. */
int pt_sched_match(const pt_program *prog, int32_t *match, int32_t *scratch, pt_error *err)
{
    int64_t mbc = prog->mb_count, nb = (int64_t)prog->worker_count * mbc;
    int32_t *start =
        scratch ? scratch : malloc((size_t)pt_sched_match_scratch(prog) * sizeof *start);
    if (!start)
        return pt_error_set(err, PT_ENOMEM, "schedule: out of memory matching sends");
    int32_t *ent = start + nb + 1;
    int rc = 0, recvs = 0, matched = 0;
    char buf[160];
    memset(start, 0, (size_t)(nb + 1) * sizeof *start);
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *x = &prog->workers[w];
        for (int i = x->op_begin; i < x->op_end; i++) {
            const pt_op *op = &prog->ops[i];
            match[i] = -1;
            if (!is_send(op->kind) && !is_recv(op->kind))
                continue;
            if (op->mb < 0 || op->mb >= mbc || op->peer < 0 || op->peer >= prog->worker_count) {
                rc = pt_error_set(err, PT_EINVAL,
                                  "schedule: op %d (%s): micro-batch or peer out of range", i,
                                  pt_sched_op_str(prog, i, buf, sizeof buf));
                goto out;
            }
            if (is_recv(op->kind)) {
                start[w * mbc + op->mb + 1]++;
                recvs++;
            }
        }
    }
    for (int64_t b = 1; b <= nb; b++)
        start[b] += start[b - 1];
    /* after placing, bucket b spans [start[b-1], start[b]) (start[-1] = 0) */
    for (int w = 0; w < prog->worker_count; w++)
        for (int i = prog->workers[w].op_begin; i < prog->workers[w].op_end; i++)
            if (is_recv(prog->ops[i].kind))
                ent[start[w * mbc + prog->ops[i].mb]++] = i;
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *x = &prog->workers[w];
        for (int i = x->op_begin; i < x->op_end; i++) {
            const pt_op *op = &prog->ops[i];
            if (!is_send(op->kind))
                continue;
            int want = op->kind == PT_OP_SEND_ACT ? PT_OP_RECV_ACT : PT_OP_RECV_GRAD;
            int64_t b = op->peer * mbc + op->mb;
            int found = -1;
            for (int32_t e = b ? start[b - 1] : 0; e < start[b]; e++) {
                const pt_op *o = &prog->ops[ent[e]];
                if (o->kind == want && o->peer == w && o->row_lo == op->row_lo &&
                    o->row_hi == op->row_hi) {
                    found = ent[e];
                    break;
                }
            }
            if (found < 0) {
                rc = pt_error_set(err, PT_EINVAL, "schedule: op %d (%s): no matching receive", i,
                                  pt_sched_op_str(prog, i, buf, sizeof buf));
                goto out;
            }
            if (match[found] >= 0) {
                rc = pt_error_set(err, PT_EINVAL,
                                  "schedule: op %d (%s): its receive %d is matched by op %d too", i,
                                  pt_sched_op_str(prog, i, buf, sizeof buf), found, match[found]);
                goto out;
            }
            match[found] = i;
            match[i] = found;
            matched++;
        }
    }
    for (int i = 0; matched < recvs && i < prog->op_count; i++)
        if (is_recv(prog->ops[i].kind) && match[i] < 0) {
            rc = pt_error_set(err, PT_EINVAL, "schedule: op %d (%s): no matching send", i,
                              pt_sched_op_str(prog, i, buf, sizeof buf));
            goto out;
        }
out:
    if (!scratch)
        free(start);
    return rc;
}

/* ---- text -------------------------------------------------------------- */

static int worker_of(const pt_program *prog, int op_index)
{
    int lo = 0, hi = prog->worker_count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const pt_worker *x = &prog->workers[mid];
        if (op_index < x->op_begin)
            hi = mid - 1;
        else if (op_index >= x->op_end)
            lo = mid + 1;
        else
            return mid;
    }
    for (int w = 0; w < prog->worker_count; w++)
        if (op_index >= prog->workers[w].op_begin && op_index < prog->workers[w].op_end)
            return w;
    return -1;
}

char *pt_sched_op_str(const pt_program *prog, int i, char *buf, int cap)
{
    if (!buf || cap < 1)
        return buf;
    if (!prog || i < 0 || i >= prog->op_count) {
        snprintf(buf, (size_t)cap, "op %d out of range", i);
        return buf;
    }
    const pt_op *op = &prog->ops[i];
    int w = worker_of(prog, i);
    int s = w >= 0 ? prog->workers[w].stage : -1, r = w >= 0 ? prog->workers[w].replica : -1;
    const char *name = pt_op_name(op->kind);
    switch (op->kind) {
    case PT_OP_SEND_ACT:
    case PT_OP_SEND_GRAD:
    case PT_OP_RECV_ACT:
    case PT_OP_RECV_GRAD:
        snprintf(buf, (size_t)cap, "w%d s%dr%d %s mb %d rows [%d,%d) %s w%d, %lld bytes", w, s, r,
                 name, op->mb, op->row_lo, op->row_hi, is_send(op->kind) ? "to" : "from", op->peer,
                 (long long)op->bytes);
        break;
    case PT_OP_ALLREDUCE:
    case PT_OP_AR_WAIT:
    case PT_OP_OPT_STEP:
        snprintf(buf, (size_t)cap, "w%d s%dr%d %s%s mb [%d,%d) v %d", w, s, r, name,
                 (op->flags & PT_OPF_ASYNC) ? " async" : "", op->mb, op->mb_end, op->version);
        break;
    default:
        snprintf(buf, (size_t)cap, "w%d s%dr%d %s%s mb %d v %d rows [%d,%d)", w, s, r, name,
                 (op->flags & PT_OPF_STASH) ? " stash" : "", op->mb, op->version, op->row_lo,
                 op->row_hi);
        break;
    }
    return buf;
}
