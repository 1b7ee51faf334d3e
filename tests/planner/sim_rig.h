/* The simulator rig the schedule tests share: a plan on uniform one-layer
 * stages (tests/planner/sched_fixture.h), a profile, a one-node topology and
 * a cost model, simulated once. With a fast link and the optimizer free it is
 * the "equal stages, no communication" case the closed forms speak of
 * (DESIGN.md "Reference facts": (M+S-1)(F+B) per iteration for 1F1B,
 * (S-1)/(v·M + S-1) bubble for interleaved, the zero-bubble formulas). */
#ifndef PT_TESTS_PLANNER_SIM_RIG_H
#define PT_TESTS_PLANNER_SIM_RIG_H

#include <string.h>

#include "tests/planner/sched_fixture.h"

typedef struct fx_rig {
    pt_plan *plan;
    pt_profile *pf;
    pt_topology *topo;
    pt_cost *cost;
    pt_program prog;
    pt_sim *sim;
    pt_sim_result res;
    pt_error err;
} fx_rig;

/* The costs of a rig: layers of f_ms / b_ms with act / par bytes, devices on
 * one node linked at bw bytes/s with lat s latency, opt_free: optimizer steps
 * cost nothing. */
typedef struct fx_rig_costs {
    int layers, devices;
    double f_ms, b_ms;
    int64_t act, par;
    double bw, lat;
    int opt_free;
} fx_rig_costs;

/* Equal stages, no communication: fast link, free optimizer. */
static inline fx_rig_costs fx_rig_free_comm(int layers, int devices, double f_ms, double b_ms)
{
    return (fx_rig_costs){layers, devices, f_ms, b_ms, 1000, 100, FX_FAST_BPS, 0, 1};
}

/* Builds the profile, topology, cost model and simulator of g once (g->plan,
 * owned by the rig from here on, is kept; later calls reuse the rest) and
 * simulates g->plan with o (NULL: the plan's micro-batches); validate: the
 * program must also pass pt_sched_validate. Returns 0 or the failing call's
 * code, having printed err. */
static inline int fx_rig_sim(fx_rig *g, const fx_rig_costs *c, const pt_sched_opts *o, int validate)
{
    if (!g->plan)
        return -1;
    if (!g->cost) {
        g->pf = fx_profile(c->layers, c->f_ms, c->b_ms, c->act, c->par, g->plan->microbatch_size);
        g->topo = fx_topo(1, c->devices, c->bw, c->lat);
        if (!g->pf || !g->topo || pt_cost_new(g->pf, g->topo, &g->cost, &g->err) < 0)
            return -1;
        if (c->opt_free)
            pt_cost_set_opt_bandwidth(g->cost, 0);
    }
    if (!g->sim && pt_sim_new(&g->sim) < 0)
        return -1;
    int rc = pt_sim_plan(g->sim, g->plan, g->cost, o, &g->prog, &g->res, &g->err);
    if (rc == 0 && validate)
        rc = pt_sched_validate(&g->prog, &g->err);
    if (rc < 0)
        fprintf(stderr, "rig: %s\n", g->err.msg);
    return rc;
}

static inline void fx_rig_free(fx_rig *g)
{
    pt_plan_free(&g->plan);
    pt_profile_free(&g->pf);
    pt_topology_free(&g->topo);
    pt_cost_free(&g->cost);
    pt_program_release(&g->prog);
    pt_sim_free(&g->sim);
    memset(g, 0, sizeof *g);
}

#endif
