/* PipeDream's dynamic program for one micro-batch size (plan_pipedream.c),
 * for the pipedream planner and the tests that check it against exhaustive
 * search. Internal to planner/; the planner's public face is planner.h. */
#ifndef PT_PLANNER_PLAN_PIPEDREAM_H
#define PT_PLANNER_PLAN_PIPEDREAM_H

#include <stddef.h>

#include "planner/cost.h"
#include "protocol/plan.h"
#include "protocol/topology.h"

typedef struct pdresult {
    double objective; /* the slowest stage per micro-batch, seconds */
    pt_plan *plan;    /* owned by the caller */
} pdresult;

/* Variants of the dynamic program (flags of pd_plan_for). */
enum {
    PD_FLAT = 1,   /* one level over every device at the slower link, even on several nodes */
    PD_POW2 = 2,   /* replica counts only powers of two (round-robin rounds stay short) */
    PD_COARSE = 4, /* stage boundaries only at PD_COARSE_CUTS candidates of equal work */
};
#define PD_COARSE_CUTS 48

/* Solves the dynamic program for micro-batch size mbs (dividing
 * global_batch): hierarchical over the topology's nodes (level 1 inside a
 * node, level 2 over nodes), or as flags say; paper: PipeDream's optimizer's
 * formulas. 0 with res->plan (a round-robin pipedream plan) and
 * res->objective, PT_ENOFIT when no plan has a finite objective, PT_ENOMEM.
 * levels_text receives which levels ran. */
int pd_plan_for(const pt_cost *cost, const pt_topology *topo, int global_batch, int mbs,
                pt_optim_kind optim, int paper, int flags, pdresult *res, char *levels_text,
                size_t ltcap);

#endif
