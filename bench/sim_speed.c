/* Simulator speed: simulated ops per second for several pipeline depths and
 * micro-batch counts (issue 3 asks for >= 5 million ops/s, a 64-stage x
 * 512-micro-batch iteration well under a second). Prints figures; never
 * fails on time.
 *
 *   build/sim_speed            all sizes
 *   build/sim_speed S M        one size */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/clock.h"

#define MIN_SECONDS 0.3 /* CPU seconds to repeat each simulation for */

static pt_plan *make_plan(pt_sched_kind kind, int S, int M, int reps)
{
    pt_plan *p = pt_plan_new(S);
    p->layer_count = S;
    p->microbatch_size = 8;
    p->microbatch_count = M;
    p->schedule = kind;
    for (int s = 0; s < S; s++) {
        int d[8];
        for (int k = 0; k < reps; k++)
            d[k] = s * reps + k;
        p->stages[s].first = s;
        p->stages[s].last = s + 1;
        pt_plan_set_replicas(p, s, d, reps);
    }
    return p;
}

static int run(pt_sched_kind kind, int S, int M, int reps)
{
    pt_profile *pf = pt_profile_new(S);
    pf->microbatch = 8;
    pf->input_bytes = 1 << 20;
    for (int l = 0; l < S; l++) {
        pf->layers[l].fwd_ms = 1.0 + (l % 3) * 0.1;
        pf->layers[l].bwd_ms = 2.0;
        pf->layers[l].act_bytes = 1 << 20;
        pf->layers[l].param_bytes = 1 << 24;
    }
    pt_link intra = {100e9, 2e-6}, inter = {3.125e9, 1e-5};
    int devs = S * reps;
    pt_topology *t = pt_topology_uniform((devs + 7) / 8, 8, (int64_t)80 << 30, intra, inter);
    pt_plan *plan = make_plan(kind, S, M, reps);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    int rc = -1;
    if (!pf || !t || !plan || pt_cost_new(pf, t, &cost, &err) < 0 || pt_sim_new(&sim) < 0)
        goto out;
    double t0 = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID);
    if (pt_sched_build(plan, pf, NULL, &prog, &err) < 0)
        goto out;
    double build_s = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID) - t0;
    /* first run grows the simulator's buffers; the timed runs allocate nothing */
    if (pt_sim_run(sim, &prog, cost, &res, &err) < 0)
        goto out;
    int reps_run = 0;
    t0 = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID);
    double w0 = pt_clock_s(), el;
    do {
        if (pt_sim_run(sim, &prog, cost, &res, &err) < 0)
            goto out;
        reps_run++;
        el = pt_clock_of_s(CLOCK_PROCESS_CPUTIME_ID) - t0;
    } while (el < MIN_SECONDS);
    double per = el / reps_run, wall = (pt_clock_s() - w0) / reps_run;
    printf("%-10s S %3d M %4d r %d  ops %8d  build %6.2f ms  simulate %7.2f ms cpu (%7.2f wall)  "
           "%5.1f M ops/s  (iter %.3f s, bubble %.3f)\n",
           pt_sched_kind_name(kind), S, M, reps, prog.op_count, build_s * 1e3, per * 1e3,
           wall * 1e3, prog.op_count / per / 1e6, res.iter_s, res.bubble_frac);
    rc = 0;
out:
    if (rc < 0)
        fprintf(stderr, "sim_speed: %s\n", err.msg);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_plan_free(&plan);
    pt_topology_free(&t);
    pt_profile_free(&pf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3)
        return run(PT_SCHED_DAPPLE, atoi(argv[1]), atoi(argv[2]), 1) < 0;
    static const int sizes[][3] = {{8, 64, 1},   {16, 128, 1}, {32, 256, 1},
                                   {64, 512, 1}, {16, 128, 4}, {64, 512, 2}};
    static const pt_sched_kind kinds[] = {PT_SCHED_GPIPE, PT_SCHED_DAPPLE, PT_SCHED_PIPEDREAM};
    int bad = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            bad |= run(kinds[k], sizes[i][0], sizes[i][1], sizes[i][2]) < 0;
    return bad;
}
