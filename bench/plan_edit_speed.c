/* plan_edit_speed: how long one edit in the console's plan view takes (the
 * check and re-simulation of tui/console/plan_edit.h), against the 50 ms budget, for
 * a 100-layer model in 8 stages on 16 devices (2 replicas each), 32
 * micro-batches, under every schedule kind. Each edit moves a stage boundary
 * back and forth, so every edit re-builds the program and re-simulates it.
 *
 *   plan_edit_speed [--edits N] [--layers L]
 *
 * Prints figures; never passes or fails on them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "tui/console/plan_edit.h"

#define DEFAULT_EDITS  200
#define DEFAULT_LAYERS 100
#define STAGES         8
#define REPLICAS       2
#define MICROBATCHES   32
#define MB_SIZE        16
#define DEVICE_GIB     80

int main(int argc, char **argv)
{
    int edits = DEFAULT_EDITS, layers = DEFAULT_LAYERS;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--edits"))
            edits = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers"))
            layers = atoi(argv[i + 1]);
    }
    if (edits < 1 || layers < 2 * STAGES) {
        fprintf(stderr, "usage: plan_edit_speed [--edits N] [--layers L >= %d]\n", 2 * STAGES);
        return 2;
    }
    pt_profile *prof = pt_profile_new(layers);
    snprintf(prof->model, sizeof prof->model, "bench");
    prof->microbatch = MB_SIZE;
    prof->input_bytes = MB_SIZE * 4096;
    for (int i = 0; i < layers; i++) {
        prof->layers[i].fwd_ms = 0.5 + (i % 7) * 0.1;
        prof->layers[i].bwd_ms = 2 * prof->layers[i].fwd_ms;
        prof->layers[i].recompute_ms = prof->layers[i].fwd_ms;
        prof->layers[i].act_bytes = MB_SIZE * 4096 * 4;
        prof->layers[i].param_bytes = 4096 * 1024 * 4;
    }
    pt_link intra = {100e9, 5e-6}, inter = {12.5e9, 10e-6};
    pt_topology *topo =
        pt_topology_uniform(2, STAGES * REPLICAS / 2, (int64_t)DEVICE_GIB << 30, intra, inter);
    printf("plan_edit_speed: %d layers, %d stages x %d replicas, %d micro-batches, %d edits per "
           "kind (budget %d ms)\n",
           layers, STAGES, REPLICAS, MICROBATCHES, edits, PT_PLAN_EDIT_BUDGET_MS);
    printf("%-11s %8s %10s %10s %10s\n", "schedule", "ops", "mean ms", "max ms", "iter ms");
    for (int k = 0; k < PT_SCHED_BUILTIN_COUNT; k++) {
        pt_plan *plan = pt_plan_new(STAGES);
        snprintf(plan->model, sizeof plan->model, "bench");
        plan->layer_count = layers;
        plan->microbatch_size = MB_SIZE;
        plan->microbatch_count = MICROBATCHES;
        plan->schedule = (pt_sched_kind)k;
        for (int s = 0; s < STAGES; s++) {
            plan->stages[s].first = layers * s / STAGES;
            plan->stages[s].last = layers * (s + 1) / STAGES;
            int devs[REPLICAS];
            for (int r = 0; r < REPLICAS; r++)
                devs[r] = s * REPLICAS + r;
            pt_plan_set_replicas(plan, s, devs, REPLICAS);
        }
        pt_plan_edit *e = NULL;
        pt_error err = {0};
        if (pt_plan_edit_new(plan, prof, topo, &e, &err) < 0) {
            printf("%-11s refused: %s\n", pt_sched_kind_name((pt_sched_kind)k), err.msg);
            pt_plan_free(&plan);
            continue;
        }
        double total = 0, worst = 0;
        int done = 0;
        for (int i = 0; i < edits; i++) {
            int b = 1 + i % (STAGES - 1);
            double t0 = pt_clock_s();
            int rc = pt_plan_edit_move_boundary(e, b, i % 2 ? -1 : 1, &err);
            double dt = pt_clock_s() - t0;
            if (rc < 0)
                continue;
            total += dt;
            if (dt > worst)
                worst = dt;
            done++;
        }
        printf("%-11s %8d %10.3f %10.3f %10.3f\n", pt_sched_kind_name((pt_sched_kind)k),
               pt_plan_edit_program(e)->op_count, done ? total / done * 1e3 : 0, worst * 1e3,
               pt_plan_edit_result(e)->iter_s * 1e3);
        pt_plan_edit_free(&e);
        pt_plan_free(&plan);
    }
    pt_topology_free(&topo);
    pt_profile_free(&prof);
    return 0;
}
