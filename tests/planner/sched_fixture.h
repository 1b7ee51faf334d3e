/* Builders shared by the schedule, simulator and cost tests: uniform profiles,
 * plans with any replication, uniform topologies. Everything is built by hand
 * so the expected figures can be computed independently in the tests. */
#ifndef PT_TESTS_PLANNER_SCHED_FIXTURE_H
#define PT_TESTS_PLANNER_SCHED_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

/* Bandwidth that makes transfers free to within 1e-20 s for test sizes. */
#define FX_FAST_BPS 1e30

/* n layers, each fwd_ms / bwd_ms at a micro-batch of mb samples. */
static inline pt_profile *fx_profile(int n, double fwd_ms, double bwd_ms, int64_t act, int64_t par,
                                     int mb)
{
    pt_profile *p = pt_profile_new(n);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "fx");
    p->microbatch = mb;
    p->input_bytes = act;
    for (int l = 0; l < n; l++) {
        snprintf(p->layers[l].name, sizeof p->layers[l].name, "l%d", l);
        p->layers[l].fwd_ms = fwd_ms;
        p->layers[l].bwd_ms = bwd_ms;
        p->layers[l].recompute_ms = fwd_ms;
        p->layers[l].act_bytes = act;
        p->layers[l].param_bytes = par;
    }
    return p;
}

/* S stages of `per` layers each; stage s has reps[s] replicas (reps NULL: 1)
 * on consecutive devices from 0. */
static inline pt_plan *fx_plan(pt_sched_kind kind, int S, int per, const int *reps, int mb_size,
                               int M)
{
    pt_plan *p = pt_plan_new(S);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "fx");
    p->layer_count = S * per;
    p->microbatch_size = mb_size;
    p->microbatch_count = M;
    p->schedule = kind;
    p->policy = 'A';
    int dev = 0;
    for (int s = 0; s < S; s++) {
        int r = reps ? reps[s] : 1;
        int d[64];
        for (int k = 0; k < r; k++)
            d[k] = dev++;
        p->stages[s].first = s * per;
        p->stages[s].last = (s + 1) * per;
        if (pt_plan_set_replicas(p, s, d, r) < 0) {
            pt_plan_free(&p);
            return NULL;
        }
    }
    return p;
}

static inline pt_topology *fx_topo(int nodes, int per_node, double bw, double lat)
{
    pt_link l = {bw, lat};
    return pt_topology_uniform(nodes, per_node, (int64_t)1 << 40, l, l);
}

/* Counts ops of a kind on worker w. */
static inline int fx_count(const pt_program *p, int w, int kind)
{
    int n = 0;
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++)
        n += p->ops[i].kind == kind;
    return n;
}

/* Removes op i, keeping every worker's range consistent. */
static inline void fx_delete_op(pt_program *p, int i)
{
    for (int j = i; j + 1 < p->op_count; j++)
        p->ops[j] = p->ops[j + 1];
    p->op_count--;
    for (int w = 0; w < p->worker_count; w++) {
        if (p->workers[w].op_begin > i)
            p->workers[w].op_begin--;
        if (p->workers[w].op_end > i)
            p->workers[w].op_end--;
    }
}

/* Inserts op at position i, in the worker that owns position i-1. */
static inline void fx_insert_op(pt_program *p, int i, pt_op op)
{
    if (p->op_count == p->op_cap) {
        p->op_cap = p->op_cap ? 2 * p->op_cap : 16;
        p->ops = realloc(p->ops, (size_t)p->op_cap * sizeof *p->ops);
    }
    for (int j = p->op_count; j > i; j--)
        p->ops[j] = p->ops[j - 1];
    p->ops[i] = op;
    p->op_count++;
    for (int w = 0; w < p->worker_count; w++) {
        if (p->workers[w].op_begin >= i)
            p->workers[w].op_begin++;
        if (p->workers[w].op_end >= i)
            p->workers[w].op_end++;
    }
}

/* Moves op `from` to position `to` (same worker), shifting the ones between. */
static inline void fx_move_op(pt_program *p, int from, int to)
{
    pt_op op = p->ops[from];
    if (from < to)
        for (int j = from; j < to; j++)
            p->ops[j] = p->ops[j + 1];
    else
        for (int j = from; j > to; j--)
            p->ops[j] = p->ops[j - 1];
    p->ops[to] = op;
}

/* Index of the first op on worker w of `kind` for micro-batch mb, or -1. */
static inline int fx_find(const pt_program *p, int w, int kind, int mb)
{
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++)
        if (p->ops[i].kind == kind && p->ops[i].mb == mb)
            return i;
    return -1;
}

#endif
