/* Plan quality: for each shipped profile (profiles/NAME.json) on each shipped
 * topology (topologies/NAME.json), the iteration time of the dapple, pipedream,
 * gpipe and dp plans under synchronous training, each simulated
 * (planner/simulate.h): the dapple, pipedream and dp plans with the dapple
 * schedule (policy as planned; A for pipedream's), the gpipe plan with the
 * gpipe schedule. The global batch is 4 profile micro-batches, or more so that
 * every device can hold two samples.
 *
 * usage: plan_quality [SOURCE_DIR] [--profiles a,b] [--topologies x,y]
 * Prints one row per (profile, topology): milliseconds per iteration, "nofit"
 * when the planner finds nothing that fits memory, "!mem" after a time whose
 * plan exceeds memory under the synchronous schedule, the speed-up of dapple
 * over the best of the others, dapple's predicted over simulated time, and
 * its search time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

#define QUALITY_MAX_ITEMS          32
#define QUALITY_MB_FACTOR          4 /* global batch >= this many profile micro-batches */
#define QUALITY_SAMPLES_PER_DEVICE 2

static const char *const default_profiles[] = {"alexnet",     "vgg16",     "resnet18",
                                               "resnet50",    "resnet101", "inception_v3",
                                               "densenet121", "gnmt",      "gnmt_large"};
static const char *const default_topologies[] = {
    "local-cpu-4", "pipedream-cluster-a", "pipedream-cluster-b", "dgx1-v100-x8", "cluster-128x8"};
static const char *const planners[] = {"dapple", "pipedream", "gpipe", "dp"};
#define PLANNER_COUNT 4

static int split(char *s, const char **out)
{
    int n = 0;
    for (char *t = strtok(s, ","); t && n < QUALITY_MAX_ITEMS; t = strtok(NULL, ","))
        out[n++] = t;
    return n;
}

/* Simulated synchronous iteration time of plan, or NAN; *fits from the sim. */
static double sync_time(pt_sim *sim, pt_program *prog, const pt_cost *cost, pt_plan *plan,
                        int *fits)
{
    if (plan->schedule != PT_SCHED_GPIPE && plan->schedule != PT_SCHED_DAPPLE) {
        plan->schedule = PT_SCHED_DAPPLE;
        plan->policy = 'A';
    }
    pt_sim_result res;
    pt_error err = {0};
    if (pt_sim_plan(sim, plan, cost, NULL, prog, &res, &err) < 0) {
        fprintf(stderr, "plan_quality: simulate: %s\n", err.msg);
        return NAN;
    }
    *fits = res.fits;
    return res.iter_s;
}

int main(int argc, char **argv)
{
    const char *root = getenv("PT_SOURCE_DIR");
    const char *profs[QUALITY_MAX_ITEMS], *topos[QUALITY_MAX_ITEMS];
    int np = (int)(sizeof default_profiles / sizeof *default_profiles);
    int nt = (int)(sizeof default_topologies / sizeof *default_topologies);
    memcpy(profs, default_profiles, sizeof default_profiles);
    memcpy(topos, default_topologies, sizeof default_topologies);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profiles") && i + 1 < argc)
            np = split(argv[++i], profs);
        else if (!strcmp(argv[i], "--topologies") && i + 1 < argc)
            nt = split(argv[++i], topos);
        else if (argv[i][0] != '-')
            root = argv[i];
        else {
            fprintf(stderr, "usage: plan_quality [SOURCE_DIR] [--profiles a,b] "
                            "[--topologies x,y]\n");
            return 2;
        }
    }
    char data[512];
    if (!root) {
        pt_error derr = {0};
        if (pt_datadir(data, sizeof data, &derr) < 0) {
            fprintf(stderr, "plan_quality: %s\n", derr.msg);
            return 1;
        }
        root = data;
    }
    pt_sim *sim = NULL;
    pt_program prog = {0};
    if (pt_sim_new(&sim) < 0)
        return 1;
    printf("%-13s %-20s %6s %11s %11s %11s %11s %8s %8s %7s  %s\n", "profile", "topology", "batch",
           "dapple ms", "pipedream", "gpipe", "dp", "dapple/x", "pred/sim", "plan s",
           "dapple plan");
    for (int t = 0; t < nt; t++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/topologies/%s.json", root, topos[t]);
        pt_topology *topo = NULL;
        pt_error err = {0};
        if (pt_topology_load(path, &topo, &err) < 0) {
            fprintf(stderr, "plan_quality: %s\n", err.msg);
            continue;
        }
        for (int p = 0; p < np; p++) {
            snprintf(path, sizeof path, "%s/profiles/%s.json", root, profs[p]);
            pt_profile *pr = NULL;
            if (pt_profile_load(path, &pr, &err) < 0) {
                fprintf(stderr, "plan_quality: %s\n", err.msg);
                continue;
            }
            int mb = pr->microbatch, gbs = QUALITY_MB_FACTOR * mb;
            while (gbs < QUALITY_SAMPLES_PER_DEVICE * topo->device_count)
                gbs += mb;
            pt_cost *cost = NULL;
            if (pt_cost_new(pr, topo, &cost, &err) < 0) {
                fprintf(stderr, "plan_quality: %s\n", err.msg);
                pt_profile_free(&pr);
                continue;
            }
            char cells[PLANNER_COUNT][24], shape[96] = "-";
            double times[PLANNER_COUNT], predicted = NAN, search_s = NAN;
            for (int k = 0; k < PLANNER_COUNT; k++) {
                pt_plan *plan = NULL;
                pt_planner_report rep;
                times[k] = NAN;
                snprintf(cells[k], sizeof cells[k], "nofit");
                if (pt_planner_run(planners[k], pr, topo, gbs, NULL, &plan, &rep, &err) < 0) {
                    if (err.code != PT_ENOFIT)
                        snprintf(cells[k], sizeof cells[k], "error");
                    continue;
                }
                if (k == 0) {
                    predicted = rep.iter_s;
                    search_s = rep.search_s;
                    size_t n = (size_t)snprintf(
                        shape, sizeof shape, "M=%d %d:", plan->microbatch_count, plan->stage_count);
                    for (int s = 0; s < plan->stage_count && n + 12 < sizeof shape; s++)
                        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%d", s ? "," : "",
                                              plan->stages[s].replica_count);
                }
                int fits = 1;
                times[k] = sync_time(sim, &prog, cost, plan, &fits);
                snprintf(cells[k], sizeof cells[k], "%.1f%s", times[k] * 1e3, fits ? "" : "!mem");
                pt_plan_free(&plan);
            }
            double other = INFINITY;
            for (int k = 1; k < PLANNER_COUNT; k++)
                if (isfinite(times[k]) && times[k] < other)
                    other = times[k];
            char ratio[16] = "-";
            if (isfinite(times[0]) && isfinite(other))
                snprintf(ratio, sizeof ratio, "%.2fx", other / times[0]);
            printf("%-13s %-20s %6d %11s %11s %11s %11s %8s %8.3f %7.2f  %s\n", profs[p], topos[t],
                   gbs, cells[0], cells[1], cells[2], cells[3], ratio, predicted / times[0],
                   search_s, shape);
            fflush(stdout);
            pt_cost_free(&cost);
            pt_profile_free(&pr);
        }
        pt_topology_free(&topo);
    }
    pt_program_release(&prog);
    pt_sim_free(&sim);
    return 0;
}
