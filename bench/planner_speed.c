/* Planner speed: wall-clock time of the dapple and pipedream planners against
 * the number of layers N (10, 100, 1000) and devices G (8 = 1x8, 64 = 8x8,
 * 1024 = 128x8) on synthetic transformer-like profiles (fixed seed).
 *
 * usage: planner_speed [--layers N,...] [--devices G,...] [--planners a,b]
 *                      [--batch-per-device K]
 *        planner_speed --profile P.json --topology T.json --batch GBS [--planners a,b]
 *                      [--memory-limit GiB]
 * The second form times the planners on a real profile and topology, e.g.
 * GPT-3 (pipetop profile --analytic --model gpt3 --device h100-80gb) on
 * topologies/h100-8x8.json (issue 9: under 1 s).
 * Prints one line per (planner, N, G): seconds, the plan's shape and the
 * planner's objective. Targets (docs/benchmarks.md): 100 layers x 64 devices
 * under 1 s; 1,000 layers x 1,024 devices under 60 s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/planner.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

#define BENCH_DEVICES_PER_NODE 8
#define BENCH_GIB              1073741824LL
#define BENCH_MEMORY_GIB       80
#define BENCH_MAX_LIST         8

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double uniform(double lo, double hi)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return lo + (hi - lo) * (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

/* A transformer-like chain: blocks of similar cost with +-20% noise, an
 * embedding first and a large head last; activations 8 MiB per micro-batch,
 * 8 MiB of parameters per block (fp32), 64 MiB embedding and head. */
static pt_profile *synthetic(int layers)
{
    pt_profile *p = pt_profile_new(layers);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "synthetic-%d", layers);
    snprintf(p->source, sizeof p->source, "analytic");
    p->microbatch = 4;
    p->input_bytes = 1 << 20;
    for (int l = 0; l < layers; l++) {
        pt_profile_layer *L = &p->layers[l];
        snprintf(L->name, sizeof L->name, "block%d", l);
        L->fwd_ms = uniform(0.8, 1.2);
        L->bwd_ms = 2 * L->fwd_ms * uniform(0.9, 1.1);
        L->recompute_ms = L->fwd_ms;
        L->act_bytes = (int64_t)((8 << 20) * uniform(0.8, 1.2));
        L->param_bytes = (int64_t)(8 << 20);
    }
    p->layers[0].param_bytes = 64 << 20;
    p->layers[layers - 1].param_bytes = 64 << 20;
    p->layers[layers - 1].fwd_ms *= 3;
    p->layers[layers - 1].bwd_ms *= 3;
    return p;
}

static int parse_list(const char *s, int *out)
{
    int n = 0;
    while (*s && n < BENCH_MAX_LIST) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static void print_row(const char *name, int layers, int G, int gbs, int rc, const pt_plan *plan,
                      const pt_planner_report *rep, double cpu, const pt_error *err)
{
    char shape[64] = "-";
    if (rc == 0) {
        size_t k = (size_t)snprintf(shape, sizeof shape, "%d:", plan->stage_count);
        for (int s = 0; s < plan->stage_count && k + 12 < sizeof shape; s++)
            k +=
                (size_t)snprintf(shape + k, sizeof shape - k, " %d", plan->stages[s].replica_count);
        if (k + 12 >= sizeof shape)
            snprintf(shape + sizeof shape - 5, 5, " ...");
    }
    printf("%-10s %6d %6d %8d %9.3f %9.3f  %-28s %s\n", name, layers, G, gbs, rep->search_s, cpu,
           shape, rc == 0 ? "" : err->msg);
    if (rc == 0)
        printf("%-10s %6s %6s %8s %9s %9s  objective %.4f ms; %s\n", "", "", "", "", "", "",
               rep->objective_s * 1e3, rep->why);
    fflush(stdout);
}

/* The --profile form: every planner of the list on one real input. */
static int run_real(const char *prof_path, const char *topo_path, int gbs, double mem_gib,
                    const char *planners)
{
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    pt_error err = {0};
    if (pt_profile_load(prof_path, &p, &err) < 0 || pt_topology_load(topo_path, &t, &err) < 0) {
        fprintf(stderr, "planner_speed: %s\n", err.msg);
        pt_profile_free(&p);
        return 1;
    }
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.memory_limit_bytes = (int64_t)(mem_gib * BENCH_GIB);
    char list[256];
    snprintf(list, sizeof list, "%s", planners);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        pt_plan *plan = NULL;
        pt_planner_report rep = {0};
        clock_t c0 = clock();
        int rc = pt_planner_run(name, p, t, gbs, &o, &plan, &rep, &err);
        print_row(name, p->layer_count, t->device_count, gbs, rc, plan, &rep,
                  (double)(clock() - c0) / CLOCKS_PER_SEC, &err);
        pt_plan_free(&plan);
    }
    pt_profile_free(&p);
    pt_topology_free(&t);
    return 0;
}

int main(int argc, char **argv)
{
    const char *prof_path = NULL, *topo_path = NULL;
    int real_gbs = 0;
    double mem_gib = 0;
    int layers[BENCH_MAX_LIST] = {10, 100, 1000}, nl = 3;
    int devices[BENCH_MAX_LIST] = {8, 64, 1024}, nd = 3;
    const char *planners = "dapple,pipedream";
    int per_device = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            nl = parse_list(argv[++i], layers);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc)
            nd = parse_list(argv[++i], devices);
        else if (!strcmp(argv[i], "--planners") && i + 1 < argc)
            planners = argv[++i];
        else if (!strcmp(argv[i], "--batch-per-device") && i + 1 < argc)
            per_device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc)
            prof_path = argv[++i];
        else if (!strcmp(argv[i], "--topology") && i + 1 < argc)
            topo_path = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            real_gbs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--memory-limit") && i + 1 < argc)
            mem_gib = atof(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: planner_speed [--layers N,...] [--devices G,...] [--planners a,b] "
                    "[--batch-per-device K]\n"
                    "       planner_speed --profile P --topology T --batch GBS [--planners a,b] "
                    "[--memory-limit GiB]\n");
            return 2;
        }
        if (nl < 1 || nd < 1 || per_device < 1) {
            fprintf(stderr, "planner_speed: bad list or number\n");
            return 2;
        }
    }
    int given = (prof_path != NULL) + (topo_path != NULL) + (real_gbs > 0);
    if (given && given != 3) {
        fprintf(stderr, "planner_speed: --profile, --topology and --batch go together\n");
        return 2;
    }
    printf("%-10s %6s %6s %8s %9s %9s  %-28s %s\n", "planner", "layers", "devices", "batch",
           "wall s", "cpu s", "plan (stages: replicas)", "objective");
    if (prof_path)
        return run_real(prof_path, topo_path, real_gbs, mem_gib, planners);
    char list[256];
    snprintf(list, sizeof list, "%s", planners);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        for (int a = 0; a < nl; a++) {
            for (int b = 0; b < nd; b++) {
                int G = devices[b], per = G < BENCH_DEVICES_PER_NODE ? G : BENCH_DEVICES_PER_NODE;
                pt_link intra = {300e9, 3e-6}, inter = {25e9, 10e-6};
                pt_topology *t =
                    pt_topology_uniform(G / per, per, BENCH_MEMORY_GIB * BENCH_GIB, intra, inter);
                rng = 0x9E3779B97F4A7C15ULL + (uint64_t)layers[a];
                pt_profile *p = synthetic(layers[a]);
                if (!t || !p) {
                    fprintf(stderr, "planner_speed: out of memory\n");
                    return 1;
                }
                int gbs = per_device * G;
                pt_plan *plan = NULL;
                pt_planner_report rep;
                pt_error err = {0};
                clock_t c0 = clock();
                int rc = pt_planner_run(name, p, t, gbs, NULL, &plan, &rep, &err);
                double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
                print_row(name, layers[a], G, gbs, rc, plan, &rep, cpu, &err);
                pt_plan_free(&plan);
                pt_profile_free(&p);
                pt_topology_free(&t);
            }
        }
    }
    return 0;
}
