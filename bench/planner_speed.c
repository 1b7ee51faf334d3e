/* Planner speed: wall-clock time of the dapple and pipedream planners against
 * the number of layers N (10, 100, 1000) and devices G (8 = 1x8, 64 = 8x8,
 * 1024 = 128x8) on synthetic transformer-like profiles (fixed seed).
 *
 * usage: planner_speed [--layers N,...] [--devices G,...] [--planners a,b]
 *                      [--batch-per-device K]
 *        planner_speed --profile P.json --topology T.json --batch GBS [--planners a,b]
 *                      [--memory-limit GiB]
 *        planner_speed --gpt3 [--planners a,b]
 *        planner_speed --cluster [TOPOLOGY] [--planners a,b]
 * The fourth times every planner (default all but pipesgd) on every shipped
 * profile at global batch 128 and on GPT-3 (adam, 1,536) over TOPOLOGY
 * (default cluster-128x8): one row each, CPU seconds, target 1 s.
 * The second form times the planners on a real profile and topology. The
 * third is issue 9's case: GPT-3 (models/gpt3, analytic on h100-80gb at
 * micro-batch 1) over the 64 H100s of topologies/h100-8x8.json at global
 * batch 1536 and 80 GiB, planners dapple, pipedream and 2bw by default
 * (target: under 1 s; pipedream's weight stashing cannot fit there, so its
 * row times the fallback to 2bw or 1f1b-flush, docs/planners.md); each row
 * also gives the stages that recompute and the
 * simulator's iteration time and peak memory of the plan. The default run
 * ends with these rows.
 * Prints one line per (planner, N, G): seconds, the plan's shape and the
 * planner's objective. Targets (docs/benchmarks.md): 100 layers x 64 devices
 * under 1 s; 1,000 layers x 1,024 devices under 60 s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/analytic.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/device.h"
#include "protocol/model.h"
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

#define BENCH_GPT3_BATCH 1536

/* The plan's stages that recompute and the simulator's figures for it. */
static void print_sim(const pt_plan *plan, const pt_profile *p, const pt_topology *t)
{
    int nrc = 0;
    for (int s = 0; s < plan->stage_count; s++)
        nrc += plan->stages[s].recompute;
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    if (pt_cost_new(p, t, &cost, &err) < 0 || pt_sim_new(&sim) < 0 ||
        pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) < 0) {
        printf("%-10s simulate: %s\n", "", err.msg);
    } else {
        int64_t peak = 0, limit = 0;
        for (int h = 0; h < res.host_count; h++)
            if (res.hosts[h].peak_total > peak) {
                peak = res.hosts[h].peak_total;
                limit = res.hosts[h].limit;
            }
        printf("%-10s %6s %6s %8s %9s %9s  %d of %d stages recompute; simulated %.1f s per "
               "iteration, peak %.2f of %.2f GiB, %s\n",
               "", "", "", "", "", "", nrc, plan->stage_count, res.iter_s, (double)peak / BENCH_GIB,
               (double)limit / BENCH_GIB, res.fits ? "fits" : "does NOT fit");
    }
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
}

/* Issue 9's rows: GPT-3 on h100-8x8 (see the header). */
static int run_gpt3(const char *planners)
{
    pt_model_spec *spec = NULL;
    pt_device_desc dev;
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    pt_error err = {0};
    char tpath[4096];
    if (pt_model_spec_find("gpt3", &spec, &err) < 0 ||
        pt_device_find("h100-80gb", &dev, &err) < 0 ||
        pt_analytic_profile(spec, &dev, 1, NULL, &p, &err) < 0 ||
        pt_datadir_lookup("topology", "topologies", "PT_TOPOLOGIES_DIR", "h100-8x8", tpath,
                          sizeof tpath, &err) < 0 ||
        pt_topology_load(tpath, &t, &err) < 0) {
        fprintf(stderr, "planner_speed: gpt3: %s\n", err.msg);
        pt_model_spec_free(&spec);
        pt_profile_free(&p);
        return 1;
    }
    pt_model_spec_free(&spec);
    char list[256];
    snprintf(list, sizeof list, "%s", planners);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        pt_plan *plan = NULL;
        pt_planner_report rep = {0};
        clock_t c0 = clock();
        int rc = pt_planner_run(name, p, t, BENCH_GPT3_BATCH, NULL, &plan, &rep, &err);
        double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
        char label[32];
        snprintf(label, sizeof label, "%s/gpt3", name);
        print_row(label, p->layer_count, t->device_count, BENCH_GPT3_BATCH, rc, plan, &rep, cpu,
                  &err);
        if (rc == 0)
            print_sim(plan, p, t);
        pt_plan_free(&plan);
    }
    pt_profile_free(&p);
    pt_topology_free(&t);
    return 0;
}

/* The shipped profiles (profiles/), for --cluster. */
static const char *const shipped[] = {"alexnet",    "densenet121",  "gnmt",
                                      "gnmt_large", "inception_v3", "resnet101",
                                      "resnet18",   "resnet50",     "vgg16"};
#define BENCH_CLUSTER_BATCH 128

/* One planner on one input: a row with its CPU seconds; returns them. */
static double time_one(const char *name, const char *label, const pt_profile *p,
                       const pt_topology *t, int gbs, const pt_planner_opts *o)
{
    pt_plan *plan = NULL;
    pt_planner_report rep = {0};
    pt_error err = {0};
    clock_t c0 = clock();
    int rc = pt_planner_run(name, p, t, gbs, o, &plan, &rep, &err);
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    print_row(label, p->layer_count, t->device_count, gbs, rc, plan, &rep, cpu, &err);
    pt_plan_free(&plan);
    return cpu;
}

/* --cluster: every planner of the list on every shipped profile at global
 * batch 128 and on GPT-3 (analytic on h100-80gb, micro-batch 1, adam, global
 * batch 1536) over one topology (default cluster-128x8); target: each under
 * 1 s of CPU. Ends with the most CPU seconds of any row. */
static int run_cluster(const char *topo_name, const char *planners)
{
    char path[4096], list[256];
    pt_topology *t = NULL;
    pt_error err = {0};
    if (pt_datadir_lookup("topology", "topologies", "PT_TOPOLOGIES_DIR", topo_name, path,
                          sizeof path, &err) < 0 ||
        pt_topology_load(path, &t, &err) < 0) {
        fprintf(stderr, "planner_speed: %s\n", err.msg);
        return 1;
    }
    double worst = 0;
    int n = (int)(sizeof shipped / sizeof *shipped);
    for (int k = 0; k <= n; k++) {
        pt_profile *p = NULL;
        pt_model_spec *spec = NULL;
        pt_device_desc dev;
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        int gbs = BENCH_CLUSTER_BATCH;
        if (k < n) {
            if (pt_profile_load(
                    pt_datadir_resolve("profiles", shipped[k], ".json", path, sizeof path), &p,
                    &err) < 0)
                goto fail;
        } else {
            if (pt_model_spec_find("gpt3", &spec, &err) < 0 ||
                pt_device_find("h100-80gb", &dev, &err) < 0 ||
                pt_analytic_profile(spec, &dev, 1, NULL, &p, &err) < 0)
                goto fail;
            pt_model_spec_free(&spec);
            o.optim = PT_OPTIM_ADAM;
            gbs = BENCH_GPT3_BATCH;
        }
        snprintf(list, sizeof list, "%s", planners);
        for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
            char label[40];
            snprintf(label, sizeof label, "%s/%.20s", name, k < n ? shipped[k] : "gpt3");
            double cpu = time_one(name, label, p, t, gbs, &o);
            worst = cpu > worst ? cpu : worst;
        }
        pt_profile_free(&p);
        continue;
    fail:
        fprintf(stderr, "planner_speed: %s\n", err.msg);
        pt_model_spec_free(&spec);
        pt_topology_free(&t);
        return 1;
    }
    printf("most CPU of any row: %.3f s\n", worst);
    pt_topology_free(&t);
    return 0;
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
    int planners_given = 0, gpt3_only = 0;
    const char *cluster = NULL;
    int per_device = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            nl = parse_list(argv[++i], layers);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc)
            nd = parse_list(argv[++i], devices);
        else if (!strcmp(argv[i], "--planners") && i + 1 < argc) {
            planners = argv[++i];
            planners_given = 1;
        } else if (!strcmp(argv[i], "--gpt3"))
            gpt3_only = 1;
        else if (!strcmp(argv[i], "--cluster"))
            cluster = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : "cluster-128x8";
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
                    "[--memory-limit GiB]\n"
                    "       planner_speed --gpt3 [--planners a,b]\n"
                    "       planner_speed --cluster [TOPOLOGY] [--planners a,b]\n");
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
    if (cluster)
        return run_cluster(cluster, planners_given ? planners : "dapple,pipedream,2bw,gpipe,dp");
    const char *gpt3_planners = planners_given ? planners : "dapple,pipedream,2bw";
    if (gpt3_only)
        return run_gpt3(gpt3_planners);
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
    return run_gpt3(gpt3_planners);
}
