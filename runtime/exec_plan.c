/* The executor's dry run: walks one worker's ops in program order, checks
 * that they can be executed, and gives every micro-batch its net slot, every
 * received row range and gradient its buffer, and every optimizer step its
 * gradient buffer, from free lists — so the number of buffers is the most
 * ever live at once and a run follows fixed indices without allocating. */
#include <stdlib.h>
#include <string.h>

#include "runtime/exec_internal.h"

/* A free list of indices 0, 1, ...; peak = indices ever handed out. */
typedef struct pool {
    int32_t *stack;
    int top, next;
} pool;

static int pool_get(pool *p)
{
    return p->top > 0 ? p->stack[--p->top] : p->next++;
}

static void pool_put(pool *p, int i)
{
    p->stack[p->top++] = i;
}

/* micro-batch state on this worker; MB_BIN: a split backward's B ran, its W not */
enum { MB_NONE, MB_FWD, MB_BIN, MB_BWD };

typedef struct dry {
    const pt_program *p;
    const pt_worker *wk;
    int w, n, rows, base;
    pt_exec_plan *plan;
    pt_error *err;
    /* per micro-batch */
    int8_t *state, *stashed;
    int32_t *slot, *in, *in_rows, *dy, *dy_rows, *dx, *dx_rows, *group;
    /* per group key (a local op index, or n for "no op covers it") */
    int32_t *group_buf;
    int8_t *ar_pending, *ar_done;
    int8_t *produced; /* per version */
    int newest;
    int split_mb;  /* recompute: micro-batch whose BWD_INPUT was the last compute op, or -1 */
    int32_t *fifo; /* local indices of outstanding asynchronous all-reduces */
    int fifo_head, fifo_tail;
    pool slots, ins, dys, dxs, grads;
} dry;

static int fail(dry *d, int i, const char *why)
{
    char buf[160];
    return pt_error_set(d->err, PT_EINVAL, "schedule program: worker %d op %d (%s): %s", d->w,
                        d->wk->op_begin + i,
                        pt_sched_op_str(d->p, d->wk->op_begin + i, buf, sizeof buf), why);
}

/* Checks fields that do not depend on the order: ranges, peers, versions. */
static int check_op(dry *d, int i, int *max_version)
{
    const pt_op *op = &d->p->ops[d->wk->op_begin + i];
    const pt_worker *wk = d->wk;
    int S = d->p->stage_count;
    if (op->kind >= PT_OP_KIND_COUNT)
        return fail(d, i, "unknown op kind");
    if (op->mb < 0 || op->mb >= d->p->mb_count)
        return fail(d, i, "micro-batch outside the program");
    unsigned facts = pt_op_facts(op->kind);
    if (facts & PT_OPK_MB_RANGE) {
        if (op->mb_end <= op->mb || op->mb_end > d->p->mb_count)
            return fail(d, i, "covered micro-batches outside the program");
        if ((facts & PT_OPK_COLLECTIVE) && op->peer != wk->stage)
            return fail(d, i, "the all-reduce group is not the worker's stage");
    }
    if (pt_op_is_mb_compute(op->kind) && (op->row_lo != wk->row_lo || op->row_hi != wk->row_hi))
        return fail(d, i, "rows differ from the worker's rows");
    if (facts & PT_OPK_P2P) {
        if (op->row_lo < wk->row_lo || op->row_hi > wk->row_hi || op->row_lo >= op->row_hi)
            return fail(d, i, "rows outside the worker's rows");
        int towards = facts & PT_OPK_NEXT ? 1 : -1;
        int s = wk->stage + towards;
        if (s < 0 || s >= S || op->peer < d->p->stage_worker[s] ||
            op->peer >= d->p->stage_worker[s + 1])
            return fail(d, i, "peer is not a worker of the adjacent stage");
    }
    if (pt_op_is_compute(op->kind)) {
        if (op->version < 0 || op->version > (1 << 30))
            return fail(d, i, "version out of range");
        if (op->version > *max_version)
            *max_version = op->version;
    }
    return 0;
}

/* Group keys: every micro-batch belongs to the OPT_STEP that covers it, else
 * to the ALLREDUCE that covers it, else to the "dropped" group n. */
static int assign_groups(dry *d)
{
    const pt_op *ops = d->p->ops + d->wk->op_begin;
    for (int m = 0; m < d->p->mb_count; m++)
        d->group[m] = -1;
    for (int pass = 0; pass < 2; pass++) {
        int want = pass == 0 ? PT_OP_OPT_STEP : PT_OP_ALLREDUCE;
        for (int i = 0; i < d->n; i++) {
            if (ops[i].kind != want)
                continue;
            for (int m = ops[i].mb; m < ops[i].mb_end; m++) {
                if (pass == 0 && d->group[m] >= 0)
                    return fail(d, i, "a micro-batch is covered by two optimizer steps");
                if (d->group[m] < 0)
                    d->group[m] = i;
            }
        }
    }
    for (int m = 0; m < d->p->mb_count; m++)
        if (d->group[m] < 0)
            d->group[m] = d->n;
    return 0;
}

static int want_state(dry *d, int i, int mb, int state, const char *why)
{
    return d->state[mb] == state ? 0 : fail(d, i, why);
}

static int read_version(dry *d, int i, int v)
{
    if (!d->produced[v])
        return fail(d, i, "reads a weight version not produced before it");
    d->plan->last_read[v] = i;
    return 0;
}

/* The backward of mb is complete (BWD, or BWD_WEIGHT): its slot is free and
 * its gradients go to its group's buffer. */
static int bwd_done(dry *d, int i, int mb)
{
    pt_xop *x = &d->plan->xop[i];
    pool_put(&d->slots, d->slot[mb]);
    d->slot[mb] = -1;
    d->state[mb] = MB_BWD;
    int g = d->group[mb];
    if (d->group_buf[g] < 0)
        d->group_buf[g] = pool_get(&d->grads);
    x->gbuf = d->group_buf[g];
    return 0;
}

/* The checks every op of a micro-batch's backward half makes: its state,
 * stashing as in its forward, and the weight version it reads. */
static int mb_op_ok(dry *d, int i, int state, const char *why)
{
    const pt_op *op = &d->p->ops[d->wk->op_begin + i];
    int stash = op->flags & PT_OPF_STASH, rc;
    if ((rc = want_state(d, i, op->mb, state, why)) < 0)
        return rc;
    if (!stash != !d->stashed[op->mb])
        return fail(d, i, "stashing differs from the micro-batch's forward");
    return stash ? 0 : read_version(d, i, op->version);
}

static int step_recv_act(dry *d, int i, const pt_op *op, pt_xop *x)
{
    int mb = op->mb, rc;
    if ((rc = want_state(d, i, mb, MB_NONE, "activations arrive after the forward")) < 0)
        return rc;
    if (d->in[mb] < 0) {
        d->in[mb] = pool_get(&d->ins);
        d->in_rows[mb] = 0;
    }
    x->buf = d->in[mb];
    d->in_rows[mb] += op->row_hi - op->row_lo;
    return 0;
}

static int step_fwd(dry *d, int i, const pt_op *op, pt_xop *x)
{
    const pt_worker *wk = d->wk;
    int mb = op->mb, rc;
    if ((rc = want_state(d, i, mb, MB_NONE, "a second forward of the micro-batch")) < 0)
        return rc;
    if (wk->stage > 0) {
        if (d->in[mb] < 0 || d->in_rows[mb] != d->rows)
            return fail(d, i, "forward before all its input rows were received");
        x->buf = d->in[mb];
        pool_put(&d->ins, d->in[mb]);
        d->in[mb] = -1;
    }
    if ((rc = read_version(d, i, op->version)) < 0)
        return rc;
    x->slot = d->slot[mb] = pool_get(&d->slots);
    d->state[mb] = MB_FWD;
    d->stashed[mb] = op->flags & PT_OPF_STASH ? 1 : 0;
    if (wk->stage == d->p->stage_count - 1) {
        int g = d->group[mb];
        const pt_op *cover = g < d->n ? &d->p->ops[wk->op_begin + g] : NULL;
        int count = cover && cover->kind == PT_OP_OPT_STEP ? cover->mb_end - cover->mb
                                                           : d->p->mb_per_window;
        x->step_samples = (int64_t)count * d->p->mb_size;
    }
    return 0;
}

static int step_recv_grad(dry *d, int i, const pt_op *op, pt_xop *x)
{
    int mb = op->mb, rc;
    if ((rc = want_state(d, i, mb, MB_FWD, "a gradient for a micro-batch not in flight")) < 0)
        return rc;
    if (d->dy[mb] < 0) {
        d->dy[mb] = pool_get(&d->dys);
        d->dy_rows[mb] = 0;
    }
    x->buf = d->dy[mb];
    d->dy_rows[mb] += op->row_hi - op->row_lo;
    return 0;
}

/* BWD and BWD_INPUT. */
static int step_bwd(dry *d, int i, const pt_op *op, pt_xop *x)
{
    const pt_worker *wk = d->wk;
    int mb = op->mb, rc;
    if ((rc = mb_op_ok(d, i, MB_FWD, "backward of a micro-batch not in flight")) < 0)
        return rc;
    if (wk->stage != d->p->stage_count - 1) {
        if (d->dy[mb] < 0 || d->dy_rows[mb] != d->rows)
            return fail(d, i, "backward before all its output gradients were received");
        x->buf = d->dy[mb];
        pool_put(&d->dys, d->dy[mb]);
        d->dy[mb] = -1;
    }
    if (wk->stage > 0) {
        x->buf2 = d->dx[mb] = pool_get(&d->dxs);
        d->dx_rows[mb] = 0;
    }
    x->slot = d->slot[mb];
    if (op->kind == PT_OP_BWD_INPUT) {
        /* the slot (activations, stash) stays until the BWD_WEIGHT */
        d->state[mb] = MB_BIN;
        d->split_mb = mb;
        return 0;
    }
    return bwd_done(d, i, mb);
}

static int step_bwd_weight(dry *d, int i, const pt_op *op, pt_xop *x)
{
    int mb = op->mb, stash = op->flags & PT_OPF_STASH, rc;
    if ((rc = want_state(d, i, mb, MB_BIN, "weight gradient before its BWD_INPUT")) < 0)
        return rc;
    if (!stash != !d->stashed[mb])
        return fail(d, i, "stashing differs from the micro-batch's forward");
    if (d->wk->recompute && d->split_mb != mb)
        return fail(d, i,
                    "a recomputing stage runs the BWD_WEIGHT right after its BWD_INPUT (the "
                    "recomputed activations are kept for one micro-batch)");
    if (!stash && (rc = read_version(d, i, op->version)) < 0)
        return rc;
    x->slot = d->slot[mb];
    return bwd_done(d, i, mb);
}

static int step_send_grad(dry *d, int i, const pt_op *op, pt_xop *x)
{
    int mb = op->mb;
    if (d->state[mb] != MB_BIN && d->state[mb] != MB_BWD)
        return fail(d, i, "sends a gradient before its backward");
    if (d->dx[mb] < 0)
        return fail(d, i, "sends more gradient rows than the backward produced");
    x->buf = d->dx[mb];
    d->dx_rows[mb] += op->row_hi - op->row_lo;
    if (d->dx_rows[mb] >= d->rows) {
        pool_put(&d->dxs, d->dx[mb]);
        d->dx[mb] = -1;
    }
    return 0;
}

static int step_allreduce(dry *d, int i, const pt_op *op, pt_xop *x)
{
    const pt_worker *wk = d->wk;
    int g = d->group[op->mb];
    for (int m = op->mb; m < op->mb_end; m++) {
        if (d->state[m] != MB_BWD && pt_sched_owns(d->p, wk, m))
            return fail(d, i, "all-reduces gradients of a backward not yet run");
        if (d->group[m] != g)
            return fail(d, i, "covers micro-batches of different optimizer steps");
    }
    if (d->group_buf[g] < 0)
        return fail(d, i, "no gradient to all-reduce");
    x->gbuf = d->group_buf[g];
    x->trivial = wk->replica_count < 2;
    if (op->flags & PT_OPF_ASYNC) {
        d->fifo[d->fifo_tail++] = i;
        if (d->fifo_tail - d->fifo_head > d->plan->fifo_peak)
            d->plan->fifo_peak = d->fifo_tail - d->fifo_head;
        d->ar_pending[g]++;
        if (!x->trivial)
            d->plan->needs.needs_collective = 1;
    } else {
        d->ar_done[g] = 1;
    }
    return 0;
}

static int step_ar_wait(dry *d, int i, const pt_op *op, pt_xop *x)
{
    if (d->fifo_head == d->fifo_tail)
        return fail(d, i, "waits with no asynchronous all-reduce outstanding");
    const pt_op *a = &d->p->ops[d->wk->op_begin + d->fifo[d->fifo_head]];
    if (a->mb != op->mb || a->mb_end != op->mb_end)
        return fail(d, i, "waits for other micro-batches than the oldest all-reduce");
    int g = d->group[a->mb];
    d->fifo_head++;
    d->ar_pending[g]--;
    d->ar_done[g] = !d->ar_pending[g];
    x->gbuf = d->group_buf[g];
    x->trivial = d->wk->replica_count < 2;
    return 0;
}

static int step_opt_step(dry *d, int i, const pt_op *op, pt_xop *x)
{
    const pt_worker *wk = d->wk;
    for (int m = op->mb; m < op->mb_end; m++) /* round-robin: this replica's share */
        if (d->state[m] != MB_BWD && pt_sched_owns(d->p, wk, m))
            return fail(d, i, "applies gradients of a backward not yet run");
    if (d->group_buf[i] < 0)
        return fail(d, i, "no gradient to apply");
    if (d->ar_pending[i])
        return fail(d, i, "applies gradients whose all-reduce was not waited for");
    if (wk->replica_count > 1 && !d->ar_done[i])
        return fail(d, i, "applies gradients not all-reduced among the stage's replicas");
    if (op->version <= d->newest)
        return fail(d, i, "produces a version not newer than the current one");
    d->produced[op->version] = 1;
    d->newest = op->version;
    x->gbuf = d->group_buf[i];
    pool_put(&d->grads, d->group_buf[i]);
    d->group_buf[i] = -1;
    return 0;
}

/* One op of the dry run. */
static int step(dry *d, int i)
{
    const pt_op *op = &d->p->ops[d->wk->op_begin + i];
    pt_xop *x = &d->plan->xop[i];
    int mb = op->mb, rc;
    if (op->kind == PT_OP_FWD || op->kind == PT_OP_RECOMPUTE || op->kind == PT_OP_BWD)
        d->split_mb = -1; /* overwrites a recomputing stage's shared activations */
    switch (op->kind) {
    case PT_OP_RECV_ACT:
        return step_recv_act(d, i, op, x);
    case PT_OP_FWD:
        return step_fwd(d, i, op, x);
    case PT_OP_SEND_ACT:
        if ((rc = want_state(d, i, mb, MB_FWD, "sends activations not computed or released")) < 0)
            return rc;
        x->slot = d->slot[mb];
        return 0;
    case PT_OP_RECV_GRAD:
        return step_recv_grad(d, i, op, x);
    case PT_OP_RECOMPUTE:
        if ((rc = mb_op_ok(d, i, MB_FWD, "recompute of a micro-batch not in flight")) < 0)
            return rc;
        x->slot = d->slot[mb];
        return 0;
    case PT_OP_BWD:
    case PT_OP_BWD_INPUT:
        return step_bwd(d, i, op, x);
    case PT_OP_BWD_WEIGHT:
        return step_bwd_weight(d, i, op, x);
    case PT_OP_SEND_GRAD:
        return step_send_grad(d, i, op, x);
    case PT_OP_ALLREDUCE:
        return step_allreduce(d, i, op, x);
    case PT_OP_AR_WAIT:
        return step_ar_wait(d, i, op, x);
    case PT_OP_OPT_STEP:
        return step_opt_step(d, i, op, x);
    }
    return fail(d, i, "unknown op kind");
}

static int finish(dry *d)
{
    for (int m = 0; m < d->p->mb_count; m++) {
        if (d->state[m] == MB_FWD)
            return pt_error_set(d->err, PT_EINVAL,
                                "schedule program: worker %d: micro-batch %d is forwarded but "
                                "never backwarded",
                                d->w, m);
        if (d->state[m] == MB_BIN)
            return pt_error_set(d->err, PT_EINVAL,
                                "schedule program: worker %d: micro-batch %d has a BWD_INPUT but "
                                "no BWD_WEIGHT",
                                d->w, m);
        if (d->in[m] >= 0 || d->dy[m] >= 0 || d->dx[m] >= 0)
            return pt_error_set(d->err, PT_EINVAL,
                                "schedule program: worker %d: rows of micro-batch %d are received "
                                "but never used, or computed but never sent",
                                d->w, m);
    }
    pt_exec_plan *pl = d->plan;
    for (int g = 0; g <= d->n; g++)
        if (d->group_buf[g] >= 0)
            pl->end_zero[pl->end_zero_count++] = d->group_buf[g];
    pt_exec_needs *ne = &pl->needs;
    ne->max_slots = d->slots.next;
    ne->grad_buffers = d->grads.next > 0 ? d->grads.next : 1;
    ne->in_buffers = d->ins.next;
    ne->dy_buffers = d->dys.next;
    ne->dx_buffers = d->dxs.next;
    return 0;
}

static void free_dry(dry *d)
{
    free(d->state);
    free(d->slot);
    free(d->group_buf);
    free(d->ar_pending);
    free(d->produced);
    free(d->fifo);
    free(d->slots.stack);
}

void pt_exec_plan_free(pt_exec_plan *plan)
{
    if (!plan)
        return;
    free(plan->xop);
    free(plan->last_read);
    free(plan->end_zero);
    memset(plan, 0, sizeof *plan);
}

static int setup(dry *d, int max_version)
{
    int M = d->p->mb_count, n = d->n;
    pt_exec_plan *pl = d->plan;
    d->state = calloc((size_t)M * 2, 1);
    d->slot = malloc((size_t)M * 8 * sizeof(int32_t));
    d->group_buf = malloc((size_t)(n + 1) * sizeof(int32_t));
    d->ar_pending = calloc((size_t)(n + 1) * 2, 1);
    d->produced = calloc((size_t)max_version + 1, 1);
    d->fifo = malloc((size_t)(n + 1) * sizeof(int32_t));
    /* five pools, each never holding more than n + 1 free indices */
    d->slots.stack = malloc((size_t)(n + 1) * 5 * sizeof(int32_t));
    pl->xop = malloc((size_t)(n > 0 ? n : 1) * sizeof(pt_xop));
    pl->last_read = malloc((size_t)(max_version + 1) * sizeof(int32_t));
    pl->end_zero = malloc((size_t)(n + 1) * sizeof(int32_t));
    if (!d->state || !d->slot || !d->group_buf || !d->ar_pending || !d->produced || !d->fifo ||
        !d->slots.stack || !pl->xop || !pl->last_read || !pl->end_zero)
        return PT_ENOMEM;
    d->stashed = d->state + M;
    d->in = d->slot + M;
    d->in_rows = d->slot + 2 * M;
    d->dy = d->slot + 3 * M;
    d->dy_rows = d->slot + 4 * M;
    d->dx = d->slot + 5 * M;
    d->dx_rows = d->slot + 6 * M;
    d->group = d->slot + 7 * M;
    for (int m = 0; m < M; m++)
        d->slot[m] = d->in[m] = d->dy[m] = d->dx[m] = -1;
    for (int g = 0; g <= n; g++)
        d->group_buf[g] = -1;
    d->ar_done = d->ar_pending + n + 1;
    d->ins.stack = d->slots.stack + (n + 1);
    d->dys.stack = d->slots.stack + 2 * (n + 1);
    d->dxs.stack = d->slots.stack + 3 * (n + 1);
    d->grads.stack = d->slots.stack + 4 * (n + 1);
    for (int i = 0; i < n; i++)
        pl->xop[i] = (pt_xop){-1, -1, -1, -1, 0, 0};
    for (int v = 0; v <= max_version; v++)
        pl->last_read[v] = -1;
    int init = d->p->initial_versions > 0 ? d->p->initial_versions : 1;
    for (int v = 0; v < init && v <= max_version; v++)
        d->produced[v] = 1;
    d->newest = init - 1;
    return 0;
}

int pt_exec_plan_build(const pt_program *prog, int w, pt_exec_plan *plan, pt_error *err)
{
    memset(plan, 0, sizeof *plan);
    if (!prog || w < 0 || w >= prog->worker_count || !prog->workers || !prog->stage_worker)
        return pt_error_set(err, PT_EINVAL, "schedule program: worker %d does not exist", w);
    dry d = {.p = prog, .wk = &prog->workers[w], .w = w, .plan = plan, .err = err};
    const pt_worker *wk = d.wk;
    d.n = wk->op_end - wk->op_begin;
    d.rows = wk->row_hi - wk->row_lo;
    d.split_mb = -1;
    if (d.n < 0 || wk->op_begin < 0 || wk->op_end > prog->op_count || d.rows < 1 ||
        prog->mb_count < 1 || prog->mb_per_window < 1 || prog->mb_size < 1)
        return pt_error_set(err, PT_EINVAL, "schedule program: worker %d: malformed worker", w);
    int max_version = prog->initial_versions > 0 ? prog->initial_versions - 1 : 0, rc = 0;
    for (int i = 0; i < d.n && rc == 0; i++)
        rc = check_op(&d, i, &max_version);
    if (rc < 0)
        return rc;
    if ((rc = setup(&d, max_version)) < 0) {
        pt_error_set(err, rc, "executor: out of memory planning worker %d", w);
        goto out;
    }
    if ((rc = assign_groups(&d)) < 0)
        goto out;
    pt_exec_needs *ne = &plan->needs;
    ne->stage = wk->stage;
    ne->replica = wk->replica;
    ne->first = wk->first;
    ne->last = wk->last;
    ne->rows = ne->max_batch = d.rows;
    ne->recompute = wk->recompute;
    ne->needs_input = wk->stage == 0;
    ne->needs_labels = wk->stage == prog->stage_count - 1;
    ne->max_version = max_version;
    plan->op_count = d.n;
    for (int i = 0; i < d.n && rc == 0; i++) {
        int k = prog->ops[wk->op_begin + i].kind;
        if ((pt_op_facts(k) & PT_OPK_P2P) ||
            ((pt_op_facts(k) & PT_OPK_COLLECTIVE) && wk->replica_count > 1))
            ne->needs_comm = 1;
        rc = step(&d, i);
    }
    if (rc == 0)
        rc = finish(&d);
out:
    free_dry(&d);
    if (rc < 0)
        pt_exec_plan_free(plan);
    return rc;
}

int pt_exec_needs_of(const pt_program *prog, int worker, pt_exec_needs *out, pt_error *err)
{
    pt_exec_plan plan;
    int rc = pt_exec_plan_build(prog, worker, &plan, err);
    if (rc < 0)
        return rc;
    if (out)
        *out = plan.needs;
    pt_exec_plan_free(&plan);
    return 0;
}
