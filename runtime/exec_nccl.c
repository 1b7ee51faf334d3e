/* The NCCL issue plan of a program (runtime/exec_nccl.h): groups from runs
 * of messages, replayed with NCCL's blocking semantics, sends deferred while
 * the replay deadlocks. */
#include "runtime/exec_nccl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct np {
    const pt_program *p;
    int n, W;
    int *pos;     /* per op: where its NCCL call is enqueued; -1: no NCCL call */
    int *worker;  /* per op */
    int *partner; /* message: the matching op; synchronous all-reduce: its ordinal */
    char *done;
    int *list, *beg, *head; /* worker w's NCCL ops list[beg[w]..beg[w+1]) by (pos, index);
                               head[w]: the first unfinished */
} np;

static int is_msg(int kind)
{
    return kind == PT_OP_SEND_ACT || kind == PT_OP_SEND_GRAD || kind == PT_OP_RECV_ACT ||
           kind == PT_OP_RECV_GRAD;
}

static int is_send(int kind)
{
    return kind == PT_OP_SEND_ACT || kind == PT_OP_SEND_GRAD;
}

/* An all-reduce that goes over the replicas' NCCL communicator. */
static int is_nccl_allreduce(const pt_program *p, const pt_op *o)
{
    return o->kind == PT_OP_ALLREDUCE && !(o->flags & PT_OPF_ASYNC) &&
           p->stage_worker[o->peer + 1] - p->stage_worker[o->peer] > 1;
}

/* Partners: the k-th send from a to b with the k-th receive at b from a; the
 * k-th all-reduce of a worker gets ordinal k. */
static int pair_up(np *q, pt_error *err)
{
    int W = q->W, rc = 0;
    int *cnt = calloc((size_t)W * W * 2, sizeof *cnt), *first = NULL;
    int *ars = calloc((size_t)W, sizeof *ars);
    for (int i = 0; cnt && i < q->n; i++)
        if (is_msg(q->p->ops[i].kind)) {
            int a = q->worker[i], b = q->p->ops[i].peer, s = is_send(q->p->ops[i].kind);
            cnt[((s ? a : b) * W + (s ? b : a)) * 2 + s]++;
        }
    first = cnt ? malloc(((size_t)W * W * 2 + 1) * sizeof *first) : NULL;
    if (!first || !ars) {
        rc = pt_error_set(err, PT_ENOMEM, "nccl plan: out of memory");
        goto done;
    }
    /* the ops of each (pair, direction) in order, in one array */
    int total = 0;
    for (int k = 0; k < W * W * 2; k++) {
        first[k] = total;
        total += cnt[k];
        if (k % 2 && cnt[k] != cnt[k - 1] && rc == 0)
            rc = pt_error_set(err, PT_EINVAL,
                              "nccl plan: %d messages from worker %d to %d, %d received", cnt[k],
                              k / 2 / W, k / 2 % W, cnt[k - 1]);
    }
    int *ops = malloc(((size_t)total + 1) * sizeof *ops);
    memset(cnt, 0, (size_t)W * W * 2 * sizeof *cnt);
    for (int i = 0; ops && rc == 0 && i < q->n; i++) {
        const pt_op *o = &q->p->ops[i];
        if (is_nccl_allreduce(q->p, o))
            q->partner[i] = ars[q->worker[i]]++;
        if (!is_msg(o->kind))
            continue;
        int a = q->worker[i], b = o->peer, s = is_send(o->kind);
        int k = ((s ? a : b) * W + (s ? b : a)) * 2 + s;
        ops[first[k] + cnt[k]++] = i;
    }
    for (int k = 0; ops && rc == 0 && k < W * W * 2; k += 2)
        for (int j = 0; j < cnt[k]; j++) {
            q->partner[ops[first[k] + j]] = ops[first[k + 1] + j];
            q->partner[ops[first[k + 1] + j]] = ops[first[k] + j];
        }
    if (!ops && rc == 0)
        rc = pt_error_set(err, PT_ENOMEM, "nccl plan: out of memory");
    free(ops);
done:
    free(cnt);
    free(first);
    free(ars);
    return rc;
}

/* Worker w's list by (pos, index): insertion sort, the lists being nearly sorted. */
static void sort_worker(np *q, int w)
{
    int *l = q->list;
    for (int i = q->beg[w] + 1; i < q->beg[w + 1]; i++) {
        int v = l[i], j = i;
        while (j > q->beg[w] &&
               (q->pos[l[j - 1]] > q->pos[v] || (q->pos[l[j - 1]] == q->pos[v] && l[j - 1] > v))) {
            l[j] = l[j - 1];
            j--;
        }
        l[j] = v;
    }
}

/* Step 1: runs of messages, all-reduces alone. */
static void initial_plan(np *q)
{
    int e = 0;
    for (int w = 0; w < q->W; w++) {
        q->beg[w] = e;
        const pt_worker *wk = &q->p->workers[w];
        for (int i = wk->op_begin; i < wk->op_end; i++) {
            q->worker[i] = w;
            const pt_op *o = &q->p->ops[i];
            if (is_msg(o->kind))
                q->pos[i] = i > wk->op_begin && is_msg(q->p->ops[i - 1].kind) ? q->pos[i - 1] : i;
            else if (is_nccl_allreduce(q->p, o))
                q->pos[i] = i;
            if (q->pos[i] >= 0)
                q->list[e++] = i;
        }
    }
    q->beg[q->W] = e;
}

static int head_pos(const np *q, int w)
{
    return q->head[w] < q->beg[w + 1] ? q->pos[q->list[q->head[w]]] : INT_MAX;
}

static int posted(const np *q, int op)
{
    return q->pos[op] == head_pos(q, q->worker[op]);
}

/* Marks op m (at the head of its worker) and its partners done when they are
 * at their heads too; 1 when it did. */
static int match(np *q, int m)
{
    const pt_op *o = &q->p->ops[m];
    if (o->kind != PT_OP_ALLREDUCE) {
        if (!posted(q, q->partner[m]))
            return 0;
        q->done[m] = q->done[q->partner[m]] = 1;
        return 1;
    }
    int w0 = q->p->stage_worker[o->peer], w1 = q->p->stage_worker[o->peer + 1];
    for (int w = w0; w < w1; w++) {
        int h = q->head[w] < q->beg[w + 1] ? q->list[q->head[w]] : -1;
        if (h < 0 || q->p->ops[h].kind != PT_OP_ALLREDUCE || q->partner[h] != q->partner[m])
            return 0;
    }
    for (int w = w0; w < w1; w++)
        q->done[q->list[q->head[w]]] = 1;
    return 1;
}

/* Step 2: replays the plan; returns 1 when some worker is stuck. */
static int replay(np *q)
{
    memset(q->done, 0, (size_t)q->n);
    for (int w = 0; w < q->W; w++)
        q->head[w] = q->beg[w];
    for (int moved = 1; moved;) {
        moved = 0;
        for (int w = 0; w < q->W; w++)
            for (int e = q->head[w], h = head_pos(q, w);
                 e < q->beg[w + 1] && q->pos[q->list[e]] == h; e++)
                if (!q->done[q->list[e]])
                    moved |= match(q, q->list[e]);
        for (int w = 0; w < q->W; w++) {
            int e = q->head[w], h = head_pos(q, w), all = e < q->beg[w + 1];
            for (; e < q->beg[w + 1] && q->pos[q->list[e]] == h; e++)
                all &= q->done[q->list[e]];
            if (all) {
                q->head[w] = e;
                moved = 1;
            }
        }
    }
    for (int w = 0; w < q->W; w++)
        if (q->head[w] < q->beg[w + 1])
            return 1;
    return 0;
}

/* May op k, between a send and the place it is deferred to, write what it sends? */
static int writes_sent(const pt_op *send, const pt_op *k)
{
    if (send->kind == PT_OP_SEND_GRAD)
        return k->kind == PT_OP_BWD || k->kind == PT_OP_BWD_INPUT;
    return k->mb == send->mb && (k->kind == PT_OP_RECOMPUTE || k->kind == PT_OP_BWD ||
                                 k->kind == PT_OP_BWD_INPUT || k->kind == PT_OP_BWD_WEIGHT);
}

/* The place of the next group of send m's worker that holds a receive, or
 * INT_MAX. */
static int next_receive(const np *q, int m)
{
    int w = q->worker[m], t = INT_MAX;
    for (int e = q->beg[w]; e < q->beg[w + 1]; e++) {
        int o = q->list[e];
        if (q->pos[o] > q->pos[m] && q->pos[o] < t && is_msg(q->p->ops[o].kind) &&
            !is_send(q->p->ops[o].kind))
            t = q->pos[o];
    }
    return t;
}

/* Step 3: moves send m to place t, with the later sends to the same peer
 * that would overtake it; PT_EDEADLOCK when an op it passes over may write
 * what one of them sends. */
static int defer(np *q, int m, int t, pt_error *err)
{
    char what[160];
    for (int pass = 0; pass < 2; pass++) /* check all, then move all */
        for (int j = m; j < t; j++) {
            const pt_op *o = &q->p->ops[j];
            if (j != m && (!is_send(o->kind) || o->peer != q->p->ops[m].peer || q->pos[j] >= t))
                continue;
            for (int k = j + 1; k < t && pass == 0; k++)
                if (writes_sent(o, &q->p->ops[k]))
                    return pt_error_set(err, PT_EDEADLOCK,
                                        "nccl plan: %s would have to wait past op %d, which may "
                                        "write what it sends",
                                        pt_sched_op_str(q->p, j, what, sizeof what), k);
            if (pass == 1)
                q->pos[j] = t;
        }
    sort_worker(q, q->worker[m]);
    return 0;
}

/* The worker that stuck worker w waits for, through the op it waits in (*op). */
static int waits_for(const np *q, int w, int *op)
{
    for (int e = q->head[w], h = head_pos(q, w); e < q->beg[w + 1] && q->pos[q->list[e]] == h;
         e++) {
        int m = q->list[e];
        if (q->done[m])
            continue;
        *op = m;
        const pt_op *o = &q->p->ops[m];
        if (o->kind != PT_OP_ALLREDUCE)
            return q->worker[q->partner[m]];
        for (int r = q->p->stage_worker[o->peer]; r < q->p->stage_worker[o->peer + 1]; r++) {
            int hr = q->head[r] < q->beg[r + 1] ? q->list[q->head[r]] : -1;
            if (hr < 0 || q->p->ops[hr].kind != PT_OP_ALLREDUCE || q->partner[hr] != q->partner[m])
                return r;
        }
    }
    return -1;
}

/* A deadlocked replay has a cycle of workers each waiting for the next. Of
 * the sends on it, the one that moves least to the next group of its worker
 * holding a receive is deferred there. Returns 1, 0 when the cycle has no
 * send that can move, or an error. path: 3 * W ints of scratch. */
static int break_cycle(np *q, int *path, pt_error *err)
{
    int *seen = path + q->W, *via = seen + q->W, n = 0, w = 0;
    for (int i = 0; i < q->W; i++)
        seen[i] = -1;
    while (w < q->W && q->head[w] == q->beg[w + 1])
        w++;
    while (w >= 0 && w < q->W && seen[w] < 0) { /* each stuck worker waits for a stuck one */
        seen[w] = n;
        path[n++] = w;
        w = waits_for(q, w, &via[w]);
    }
    int best = -1, best_t = 0;
    for (int i = w >= 0 && w < q->W ? seen[w] : n; i < n; i++) {
        int m = via[path[i]];
        if (!is_send(q->p->ops[m].kind))
            continue;
        int t = next_receive(q, m);
        if (t != INT_MAX && (best < 0 || t - q->pos[m] < best_t - q->pos[best])) {
            best = m;
            best_t = t;
        }
    }
    if (best < 0)
        return 0;
    int rc = defer(q, best, best_t, err);
    return rc < 0 ? rc : 1;
}

/* err: where each stuck worker waits. */
static int stuck_error(const np *q, pt_error *err)
{
    char msg[PT_ERROR_MAX] = "", op[160];
    size_t used = 0;
    for (int w = 0; w < q->W && used < sizeof msg; w++)
        if (q->head[w] < q->beg[w + 1])
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", used ? "; " : "",
                                     pt_sched_op_str(q->p, q->list[q->head[w]], op, sizeof op));
    return pt_error_set(err, PT_EDEADLOCK, "nccl plan: the messages deadlock at: %s", msg);
}

static void np_free(np *q)
{
    free(q->pos);
    free(q->worker);
    free(q->partner);
    free(q->done);
    free(q->list);
    free(q->beg);
    free(q->head);
}

int pt_exec_nccl_plan(const pt_program *prog, int *at, pt_error *err)
{
    np q = {.p = prog, .n = prog->op_count, .W = prog->worker_count};
    size_t n = (size_t)q.n + 1, W = (size_t)q.W + 1;
    q.pos = malloc(n * sizeof *q.pos);
    q.worker = calloc(n, sizeof *q.worker);
    q.partner = malloc(n * sizeof *q.partner);
    q.done = calloc(n, 1);
    q.list = malloc(n * sizeof *q.list);
    q.beg = calloc(W, sizeof *q.beg);
    q.head = calloc(W, sizeof *q.head);
    int *cand = malloc(3 * W * sizeof *cand), rc = 0;
    if (!q.pos || !q.worker || !q.partner || !q.done || !q.list || !q.beg || !q.head || !cand) {
        rc = pt_error_set(err, PT_ENOMEM, "nccl plan: out of memory");
        goto done;
    }
    for (int i = 0; i < q.n; i++)
        q.pos[i] = q.partner[i] = -1;
    initial_plan(&q);
    if ((rc = pair_up(&q, err)) < 0)
        goto done;
    /* every deferral moves a send later, so this ends */
    while (replay(&q)) {
        rc = break_cycle(&q, cand, err);
        if (rc == 0)
            rc = stuck_error(&q, err);
        if (rc < 0)
            goto done;
        rc = 0;
    }
    for (int i = 0; i < q.n; i++)
        at[i] = is_msg(prog->ops[i].kind) ? q.pos[i] : -1;
done:
    free(cand);
    np_free(&q);
    return rc;
}
