/* Planners charge what the simulator (and the runtime) does.
 *
 * overlap: on shipped profiles, a data-parallel plan simulated with the
 * default bucketed all-reduce (overlapping the last backward) is faster than
 * with one all-reduce after the backward by exactly what the cost model
 * predicts: (B + allreduce(P)) - pt_cost_overlapped_bwd_allreduce_s.
 *
 * agree: for every shipped profile x topology x global batch 128 and 1,024,
 * the predicted iteration of dp, dapple, gpipe, pipedream and 2bw equals the
 * simulated iteration of the plan they return within 2 % (pipedream, 2bw:
 * the steady state of their asynchronous programs), and each plan simulates
 * no slower than pure data parallelism on the same devices x 1.005 (the
 * data-parallel floor), or data parallelism does not fit memory and the
 * report says so. dapple and gpipe score their final candidates with the
 * simulator, in the order of their closed form (DAPPLE's critical path),
 * which must not exceed the simulated time of the plan returned by more than
 * the slack the scoring allows (PU_SCORE_BOUND_SLACK); the test prints how
 * far below and above it is, and how far pipedream's dynamic program's figure
 * is from its simulated steady state. PT_AGREE_TOPO=NAME plans one topology;
 * PT_AGREE_TIME=1 prints each plan's and simulation's CPU seconds.
 *
 * kinds: dapple and gpipe allowed every synchronous kind return the kind
 * (and policy) that an independent simulation of every synchronous kind of
 * the table on the returned partition finds fastest among those that fit,
 * also when a memory limit leaves the fastest kind out.
 *
 * gpt3: GPT-3 (models/gpt3, analytic on h100-80gb, micro-batch 1) over the
 * 64 H100s of h100-8x8 at global batch 1536 fits 80 GiB only with
 * recomputation. dapple's and 2bw's plans fit by the simulator's peak memory
 * of every device, recompute some stages, and the same plans with those
 * stages not recomputing do not fit; dapple's prediction is the simulated
 * time within 2 %. Weight stashing alone needs more than 80 GiB on some
 * stage of any partition, by a bound computed here: pipedream with
 * no_fallback finds nothing and says so; by default it plans 2bw or
 * 1f1b-flush (the faster simulated of the two that fit), which fits by the
 * simulator and whose reported time is the simulator's within 2 %. */
#include <dirent.h>
#include <math.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "planner/cost.h"
#include "planner/interleave.h"
#include "planner/latency.h"
#include "planner/plan_score.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "protocol/device.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tests/test.h"

#define GBS 128

/* The shipped profiles and topologies: every NAME.json of profiles/ and
 * topologies/, read from the tree so that a file added there is planned
 * here too. */
#define MAX_SHIPPED 64
static char profiles[MAX_SHIPPED][64], topologies[MAX_SHIPPED][64];
static int NP, NT;

static int by_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* The names (without .json) of dir's JSON files, sorted; their count. */
static int list_shipped(const char *rel, char names[][64])
{
    DIR *d = opendir(pt_test_path(rel));
    CHECK_MSG(d, "cannot list %s", rel);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || len - 5 >= 64 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        CHECK(n < MAX_SHIPPED);
        if (n == MAX_SHIPPED)
            break;
        memcpy(names[n], e->d_name, len - 5);
        names[n++][len - 5] = 0;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    return n;
}

static pt_profile *load_profile(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "profiles/%s.json", name);
    pt_profile *p = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_profile_load(pt_test_path(rel), &p, &err) == 0, "%s", err.msg);
    return p;
}

static pt_topology *load_topology(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "topologies/%s.json", name);
    pt_topology *t = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_topology_load(pt_test_path(rel), &t, &err) == 0, "%s", err.msg);
    return t;
}

static double simulate(pt_sim *sim, const pt_plan *plan, const pt_cost *cost, int64_t bucket)
{
    pt_sched_opts o = {.bucket_bytes = bucket};
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    int rc = pt_sim_plan(sim, plan, cost, &o, &prog, &res, &err);
    CHECK_MSG(rc == 0, "simulate: %s", err.msg);
    pt_program_release(&prog);
    return rc == 0 ? res.iter_s : NAN;
}

static void test_overlap(void)
{
    static const char *const models[] = {"resnet50", "vgg16", "gnmt"};
    pt_topology *t = load_topology("dapple-config-b");
    REQUIRE(t);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    for (int m = 0; m < 3; m++) {
        pt_profile *p = load_profile(models[m]);
        pt_cost *cost = NULL;
        pt_error err = {0};
        REQUIRE(p && pt_cost_new(p, t, &cost, &err) == 0);
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        pt_plan *plan = NULL;
        REQUIRE(pt_planner_run("dp", p, t, GBS, &o, &plan, NULL, &err) == 0);
        const pt_stage *st = &plan->stages[0];
        int r = st->replica_count, b = plan->microbatch_size;
        int rows = (b + r - 1) / r;
        double over = simulate(sim, plan, cost, 0), plain = simulate(sim, plan, cost, -1);
        double bwd = pt_cost_bwd_s(cost, st->first, st->last, rows, st->replicas[0]);
        double ar = pt_cost_allreduce_s(cost, st->replicas, r,
                                        pt_cost_param_bytes(cost, st->first, st->last));
        double predicted = bwd + ar -
                           pt_cost_overlapped_bwd_allreduce_s(cost, st->replicas, r, st->first,
                                                              st->last, rows, st->replicas[0], 0);
        printf("  %s dp x%d on dapple-config-b: unoverlapped %.3f ms, overlapped %.3f ms, saved "
               "%.3f ms, cost model %.3f ms\n",
               models[m], r, plain * 1e3, over * 1e3, (plain - over) * 1e3, predicted * 1e3);
        CHECK(predicted > 1e-4); /* a real overlap: more than 0.1 ms */
        CHECK_MSG(fabs((plain - over) - predicted) <= 1e-9 * plain,
                  "%s: saved %.9f, predicted %.9f", models[m], plain - over, predicted);
        pt_plan_free(&plan);
        pt_cost_free(&cost);
        pt_profile_free(&p);
    }
    pt_sim_free(&sim);
    pt_topology_free(&t);
}

/* Under AddressSanitizer (CI's sanitizer stage, where test_agree over half
 * the pairs took ~120 s of CPU, 4-5x the native time per pair, and was that
 * stage's longest test) test_agree takes one pair per topology, the diagonal
 * (topology i with profile i mod the profile count): every topology and
 * every profile is still planned, at both global batches, by every planner,
 * and each case gets the same checks, which is what the sanitizer watches
 * (the planners' and the simulator's memory over differently shaped inputs);
 * the native run takes every pair, for the agreement itself. */
#if defined(__SANITIZE_ADDRESS__)
#define AGREE_DIAGONAL 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGREE_DIAGONAL 1
#endif
#endif
#ifndef AGREE_DIAGONAL
#define AGREE_DIAGONAL 0
#endif

#define NK 5
static const char *const agree_planners[NK] = {"dp", "dapple", "gpipe", "pipedream", "2bw"};

/* What test_agree gathers over its cases. */
typedef struct agree_stats {
    double worst[NK], bound_gap[NK], bound_over[NK], floor_worst[NK];
    int compared[NK], within[NK], nofit_dp[NK], kept_dp[NK], fell_back, pairs;
} agree_stats;

/* The checks on one planner's plan (k > 0) against its simulated time sim_s
 * and data parallelism's dp_s (NAN: dp found no plan; dp_rc its code). */
static void check_plan(int k, const char *where, const pt_plan *plan, const pt_planner_report *rep,
                       const pt_cost *cost, double sim_s, double dp_s, int dp_rc, agree_stats *a)
{
    if (isnan(dp_s)) {
        /* the floor's memory reason, or another the report names */
        a->nofit_dp[k]++;
        CHECK_MSG(rep->dp_state == (dp_rc == PT_ENOFIT ? PT_DP_NOFIT : PT_DP_IMPOSSIBLE),
                  "%s %s: dp found no plan (%d) but the report says %d", agree_planners[k], where,
                  dp_rc, rep->dp_state);
        if (dp_rc == PT_ENOFIT)
            CHECK_STR_CONTAINS(rep->why, "data parallelism does not fit");
    } else {
        double r = sim_s / dp_s;
        if (r > a->floor_worst[k])
            a->floor_worst[k] = r;
        a->kept_dp[k] += rep->dp_kept;
        CHECK_MSG(sim_s <= dp_s * 1.005,
                  "%s %s: its plan simulates %.3f ms, data parallelism %.3f ms", agree_planners[k],
                  where, sim_s * 1e3, dp_s * 1e3);
        CHECK(rep->dp_state == PT_DP_COMPARED && fabs(rep->dp_iter_s - dp_s) <= 1e-9 * dp_s);
    }
    if (k == 3 && rep->fallback_count > 0) {
        /* weight stashing does not fit: a 2bw or 1f1b-flush plan */
        a->fell_back++;
        CHECK(plan->schedule == PT_SCHED_2BW || plan->schedule == PT_SCHED_1F1B_FLUSH ||
              rep->dp_kept);
    } else if (k == 3 && !rep->dp_kept) {
        /* pipedream: its DP's slowest stage x M against the steady state */
        double gap = (rep->bound_s - sim_s) / sim_s;
        a->bound_gap[k] = fmin(a->bound_gap[k], gap);
        a->bound_over[k] = fmax(a->bound_over[k], gap);
        a->within[k] += fabs(gap) <= 0.02;
        CHECK(plan->schedule == PT_SCHED_PIPEDREAM && pt_plan_round_robin(plan));
    }
    if ((k == 1 || k == 2) && !rep->dp_kept) {
        /* the closed form the candidates are ordered by stays within the
         * slack the scoring assumes above the simulated time */
        double L = NAN;
        CHECK(pt_latency_critical_path(cost, plan, &L, NULL, NULL, NULL) == 0);
        CHECK_MSG(L <= sim_s * (1 + PU_SCORE_BOUND_SLACK),
                  "%s %s: critical path %.6f ms, more than %.0f%% above the simulated %.6f ms",
                  agree_planners[k], where, L * 1e3, PU_SCORE_BOUND_SLACK * 100, sim_s * 1e3);
        double gap = (L - sim_s) / sim_s;
        a->bound_gap[k] = fmin(a->bound_gap[k], gap);
        a->bound_over[k] = fmax(a->bound_over[k], gap);
        a->within[k] += fabs(gap) <= 0.02;
        CHECK(plan->schedule == (k == 1 ? PT_SCHED_DAPPLE : PT_SCHED_GPIPE));
    }
}

/* Every planner on one profile, topology and global batch. */
static void agree_case(pt_sim *sim, const char *prof, const char *topo, const pt_profile *p,
                       const pt_topology *t, const pt_cost *cost, int gbs, agree_stats *a)
{
    char where[96];
    snprintf(where, sizeof where, "%.40s on %.40s at %d", prof, topo, gbs);
    double dp_s = NAN;
    int dp_rc = 0;
    for (int k = 0; k < NK; k++) {
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        pt_plan *plan = NULL;
        pt_planner_report rep;
        pt_error err = {0};
        clock_t c0 = clock();
        int rc = pt_planner_run(agree_planners[k], p, t, gbs, &o, &plan, &rep, &err);
        double c1 = (double)(clock() - c0) / CLOCKS_PER_SEC;
        if (k == 0)
            dp_rc = rc;
        if (rc == PT_ENOFIT || (k == 0 && rc == PT_EINVAL)) /* nothing fits: nothing to compare */
            continue;
        CHECK_MSG(rc == 0, "%s %s: %s", agree_planners[k], where, err.msg);
        if (rc < 0)
            continue;
        clock_t c2 = clock();
        double sim_s = simulate(sim, plan, cost, 0);
        if (getenv("PT_AGREE_TIME"))
            fprintf(stderr, "%-10s %-40s plan %.3f s sim %.3f s\n", agree_planners[k], where, c1,
                    (double)(clock() - c2) / CLOCKS_PER_SEC);
        double dev = (rep.iter_s - sim_s) / sim_s;
        a->compared[k]++;
        if (fabs(dev) > fabs(a->worst[k]))
            a->worst[k] = dev;
        CHECK_MSG(fabs(dev) <= 0.02, "%s %s: planner %.3f ms, simulator %.3f ms (%+.1f%%)",
                  agree_planners[k], where, rep.iter_s * 1e3, sim_s * 1e3, dev * 100);
        if (k == 0)
            dp_s = sim_s;
        else
            check_plan(k, where, plan, &rep, cost, sim_s, dp_s, dp_rc, a);
        pt_plan_free(&plan);
    }
}

static void print_stats(const agree_stats *a)
{
    for (int k = 0; k < NK; k++) {
        printf("  %s: worst planner vs simulator %+.2f%% over %d plans", agree_planners[k],
               a->worst[k] * 100, a->compared[k]);
        if (k > 0)
            printf("; slowest against data parallelism %.3fx (dp kept %d times, dp did not fit "
                   "%d times)",
                   a->floor_worst[k], a->kept_dp[k], a->nofit_dp[k]);
        if (k > 0 && k < 4)
            printf("; its %s from %.1f%% below to %.1f%% above the simulated time (within 2%% "
                   "in %d)",
                   k == 3 ? "DP's slowest stage x M" : "plans' critical path",
                   -a->bound_gap[k] * 100, a->bound_over[k] * 100, a->within[k]);
        printf("\n");
    }
    printf("  pipedream: %d of its plans fell back to 2bw or 1f1b-flush (stashing does not fit)\n",
           a->fell_back);
}

/* Every shipped profile x topology x global batch 128 and 1,024: each
 * planner's prediction is the simulator's (2 %), and its plan simulates no
 * slower than pure data parallelism on the same devices x 1.005 (the
 * data-parallel floor) or data parallelism does not fit and the report says
 * so. Under AddressSanitizer (AGREE_DIAGONAL) one pair per topology, unless
 * PT_AGREE_ALL=1. */
static void test_agree(void)
{
    static const int batches[] = {128, 1024};
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    agree_stats a = {0};
    const char *all = getenv("PT_AGREE_ALL");
    int every = all && *all == '1';
    NP = list_shipped("profiles", profiles);
    NT = list_shipped("topologies", topologies);
    CHECK(NP >= 9 && NT >= 14 && NT >= NP); /* the diagonal meets every profile */
    for (int ti = 0; ti < NT; ti++) {
        const char *only = getenv("PT_AGREE_TOPO");
        if (only && strcmp(only, topologies[ti]))
            continue;
        pt_topology *t = load_topology(topologies[ti]);
        for (int pi = 0; pi < NP && t; pi++) {
            if (AGREE_DIAGONAL && !every && pi != ti % NP)
                continue;
            a.pairs++;
            pt_profile *p = load_profile(profiles[pi]);
            pt_cost *cost = NULL;
            pt_error err = {0};
            if (!p || pt_cost_new(p, t, &cost, &err) < 0) {
                CHECK_MSG(0, "%s on %s: %s", profiles[pi], topologies[ti], err.msg);
                pt_profile_free(&p);
                continue;
            }
            for (int b = 0; b < 2; b++)
                agree_case(sim, profiles[pi], topologies[ti], p, t, cost, batches[b], &a);
            pt_cost_free(&cost);
            pt_profile_free(&p);
        }
        pt_topology_free(&t);
    }
    print_stats(&a);
    if (!getenv("PT_AGREE_TOPO"))
        CHECK(a.pairs == (AGREE_DIAGONAL && !every ? NT : NP * NT));
    CHECK(a.compared[0] == 2 * a.pairs); /* dp plans every case */
    pt_sim_free(&sim);
}

/* The kind (policy, chunks) that simulates fastest and fits among the
 * report's rows, each simulated afresh on plan's partition (an interleaved
 * row's partition cut into S·v chunks, pt_plan_rechunk); *best_s its time.
 * The rows must cover every synchronous kind of the table, each policy,
 * and for a kind with chunks the chunk counts from its chunks_min up. */
static void fastest_kind(pt_sim *sim, const pt_plan *plan, const pt_cost *cost,
                         const pt_planner_report *rep, int *row, double *best_s, int *fastest_fits)
{
    *best_s = INFINITY;
    *row = -1;
    double any = INFINITY;
    *fastest_fits = 0;
    for (int k = 0; k < pt_sched_kind_count(); k++) {
        if (!pt_sched_kind_has(k, PT_SCHED_SYNCHRONOUS) || !pt_sched_info_of((pt_sched_kind)k))
            continue;
        int npol = pt_sched_kind_has(k, PT_SCHED_OPT_POLICY) ? 2 : 1, lo, hi, rows = 0, vmax = 0;
        pt_sched_kind_chunks(k, &lo, &hi);
        for (int i = 0; i < rep->kind_count; i++)
            if (rep->kinds[i].kind == k) {
                rows++;
                vmax = rep->kinds[i].chunks > vmax ? rep->kinds[i].chunks : vmax;
                CHECK(rep->kinds[i].chunks >= lo && rep->kinds[i].chunks <= hi);
            }
        CHECK_MSG(vmax >= lo && rows == npol * (vmax - lo + 1), "%s: %d rows up to v=%d",
                  pt_sched_kind_name(k), rows, vmax);
    }
    for (int i = 0; i < rep->kind_count; i++) {
        const pt_planner_kind_row *r = &rep->kinds[i];
        pt_plan *q = NULL;
        pt_error err = {0};
        int own = (plan->chunks > 1 ? plan->chunks : 1) == r->chunks;
        if (own)
            q = pt_plan_clone(plan);
        else if (pt_plan_rechunk(plan, cost, (pt_sched_kind)r->kind, r->chunks, &q, &err) < 0)
            continue; /* the row says refused */
        REQUIRE(q);
        q->schedule = (pt_sched_kind)r->kind;
        q->policy = r->policy ? r->policy : 'A';
        pt_program prog = {0};
        pt_sim_result res;
        int rc = pt_sim_plan(sim, q, cost, NULL, &prog, &res, &err);
        pt_program_release(&prog);
        pt_plan_free(&q);
        CHECK_MSG((rc < 0) == (r->refused != 0), "row %d (%s v=%d): simulator %d, refused %d", i,
                  pt_sched_kind_name(r->kind), r->chunks, rc, r->refused);
        if (rc < 0)
            continue; /* the kind refuses this partition */
        if (isfinite(r->iter_s))
            CHECK_MSG(r->iter_s == res.iter_s, "row %d (%s v=%d): %.9f vs %.9f", i,
                      pt_sched_kind_name(r->kind), r->chunks, r->iter_s, res.iter_s);
        if (res.iter_s < any) {
            any = res.iter_s;
            *fastest_fits = res.fits;
        }
        if (res.fits && res.iter_s < *best_s) {
            *best_s = res.iter_s;
            *row = i;
        }
    }
}

static void test_kinds(void)
{
    static const struct {
        const char *planner, *profile, *topology;
        double mem_gib; /* 0: the topology's */
    } cases[] = {
        {"dapple", "resnet18", "pipedream-cluster-b", 0},
        {"dapple", "gnmt", "dgx1-v100-x8", 0},
        {"dapple", "vgg16", "dapple-config-c", 0},
        {"gpipe", "gnmt", "pipedream-cluster-b", 0},
        {"gpipe", "resnet50", "h100-8x8", 0},
        {"gpipe", "gnmt", "pipedream-cluster-b", 0.5},
        {"gpipe", "vgg16", "local-cpu-4", 0},
        {"dapple", "gnmt_large", "h100-8x8", 0},
    };
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    int non_default = 0, fastest_left_out = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        pt_profile *p = load_profile(cases[c].profile);
        pt_topology *t = load_topology(cases[c].topology);
        REQUIRE(p && t);
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        o.kinds = PT_PLANNER_KINDS_SYNC;
        o.no_dp_floor = 1; /* the kind choice itself */
        /* a memory limit on every device, which the planner and the simulator see */
        for (int d = 0; d < t->device_count && cases[c].mem_gib > 0; d++)
            t->devices[d].memory_bytes = (int64_t)(cases[c].mem_gib * 1073741824.0);
        pt_cost *cost = NULL;
        pt_error err = {0};
        REQUIRE(pt_cost_new(p, t, &cost, &err) == 0);
        pt_plan *plan = NULL;
        pt_planner_report rep;
        int rc = pt_planner_run(cases[c].planner, p, t, GBS, &o, &plan, &rep, &err);
        CHECK_MSG(rc == 0, "%s %s on %s: %s", cases[c].planner, cases[c].profile, cases[c].topology,
                  err.msg);
        if (rc == 0) {
            /* the rows were figured on the partition the planner found before any
             * re-cut: an interleaved winner's is its v = 1 rows' partition */
            int row = -1, ffits = 0;
            double best = INFINITY;
            double got = simulate(sim, plan, cost, 0);
            CHECK_MSG(rep.iter_s == got, "report %.9f vs simulated %.9f", rep.iter_s, got);
            CHECK(rep.chosen_kind >= 0 && rep.chosen_kind < rep.kind_count);
            if (rep.chosen_kind >= 0) {
                const pt_planner_kind_row *r = &rep.kinds[rep.chosen_kind];
                CHECK(r->kind == (int)plan->schedule && r->fits && r->allowed);
                CHECK(r->chunks == plan->chunks);
                CHECK(r->iter_s == got);
            }
            if (plan->chunks == 1) {
                fastest_kind(sim, plan, cost, &rep, &row, &best, &ffits);
                const pt_planner_kind_row *f = row >= 0 ? &rep.kinds[row] : NULL;
                printf("  %s %s on %s%s: chose %s%s%c %.3f ms; fastest that fits %s%s%c v=%d "
                       "%.3f ms%s\n",
                       cases[c].planner, cases[c].profile, cases[c].topology,
                       cases[c].mem_gib > 0 ? " (memory limit)" : "",
                       pt_sched_kind_name(plan->schedule),
                       pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_POLICY) ? "/" : "",
                       pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_POLICY) ? plan->policy : ' ',
                       got * 1e3, f ? pt_sched_kind_name(f->kind) : "none",
                       f && f->policy ? "/" : "", f && f->policy ? f->policy : ' ',
                       f ? f->chunks : 0, best * 1e3,
                       ffits ? "" : " (the fastest kind does not fit)");
                CHECK(row >= 0);
                CHECK_MSG(got <= best * (1 + 1e-12),
                          "%s %s on %s: chose %.6f ms, row %d %.6f ms fits", cases[c].planner,
                          cases[c].profile, cases[c].topology, got * 1e3, row, best * 1e3);
            } else {
                /* interleaved won: no other row may be faster and fit */
                printf("  %s %s on %s: chose %s v=%d %.3f ms\n", cases[c].planner, cases[c].profile,
                       cases[c].topology, pt_sched_kind_name(plan->schedule), plan->chunks,
                       got * 1e3);
                for (int i = 0; i < rep.kind_count; i++)
                    if (rep.kinds[i].allowed && rep.kinds[i].fits && isfinite(rep.kinds[i].iter_s))
                        CHECK(rep.kinds[i].iter_s >= got);
                ffits = 1;
            }
            non_default += plan->schedule != PT_SCHED_DAPPLE && plan->schedule != PT_SCHED_GPIPE;
            fastest_left_out += !ffits;
        }
        pt_plan_free(&plan);
        pt_cost_free(&cost);
        pt_topology_free(&t);
        pt_profile_free(&p);
    }
    /* the cases exercise a choice: some kind other than the planner's own wins */
    CHECK(non_default > 0);
    /* and a memory limit that leaves the fastest kind out */
    CHECK(fastest_left_out > 0);
    pt_sim_free(&sim);
}

#define GPT3_GBS 1536

/* Whether every device of plan's simulation stays within its memory; with
 * over (may be NULL) counting the stages with a device above it. */
static int sim_fits(pt_sim *sim, const pt_plan *plan, const pt_cost *cost, int *over,
                    double *iter_s)
{
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    int rc = pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err);
    pt_program_release(&prog);
    CHECK_MSG(rc == 0, "simulate: %s", err.msg);
    if (rc < 0)
        return 0;
    int all = 1;
    if (over)
        *over = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        int bad = 0;
        for (int h = 0; h < res.host_count; h++)
            for (int r = 0; r < plan->stages[s].replica_count; r++)
                bad |= res.hosts[h].device == plan->stages[s].replicas[r] &&
                       res.hosts[h].peak_total > res.hosts[h].limit;
        all &= !bad;
        if (over)
            *over += bad;
    }
    CHECK(all == res.fits);
    if (iter_s)
        *iter_s = res.iter_s;
    return all;
}

static void test_gpt3(void)
{
    pt_model_spec *spec = NULL;
    pt_device_desc dev;
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt3", &spec, &err) == 0);
    REQUIRE(pt_device_find("h100-80gb", &dev, &err) == 0);
    REQUIRE(pt_analytic_profile(spec, &dev, 1, NULL, &p, &err) == 0);
    pt_model_spec_free(&spec);
    pt_topology *t = load_topology("h100-8x8");
    REQUIRE(t);
    pt_cost *cost = NULL;
    REQUIRE(pt_cost_new(p, t, &cost, &err) == 0);
    pt_sim *sim = NULL;
    REQUIRE(pt_sim_new(&sim) == 0);
    static const char *const planners[] = {"dapple", "2bw"};
    for (int k = 0; k < 2; k++) {
        pt_planner_opts o;
        pt_planner_opts_default(&o);
        pt_plan *plan = NULL;
        pt_planner_report rep;
        int rc = pt_planner_run(planners[k], p, t, GPT3_GBS, &o, &plan, &rep, &err);
        CHECK_MSG(rc == 0, "%s: %s", planners[k], err.msg);
        if (rc < 0)
            continue;
        int nrc = 0;
        for (int s = 0; s < plan->stage_count; s++)
            nrc += plan->stages[s].recompute;
        double sim_s = NAN;
        CHECK_MSG(sim_fits(sim, plan, cost, NULL, &sim_s), "%s: the plan does not fit",
                  planners[k]);
        CHECK(nrc > 0);
        /* the same plan without recomputation on those stages */
        pt_plan *off = pt_plan_clone(plan);
        REQUIRE(off);
        for (int s = 0; s < off->stage_count; s++)
            off->stages[s].recompute = 0;
        int over = 0;
        CHECK_MSG(!sim_fits(sim, off, cost, &over, NULL), "%s: fits without recomputation too",
                  planners[k]);
        printf("  gpt3 %s: %d stages, %d recompute, simulated %.1f s per iteration, planner "
               "%.1f s; without recomputation %d of them exceed their device\n",
               planners[k], plan->stage_count, nrc, sim_s, rep.iter_s, over);
        if (k == 0)
            CHECK_MSG(fabs(rep.iter_s - sim_s) <= 0.02 * sim_s, "dapple %.3f s vs simulated %.3f s",
                      rep.iter_s, sim_s);
        pt_plan_free(&off);
        pt_plan_free(&plan);
    }
    /* pipedream: some stage of any plan holds (versions + gradient + momentum)
     * x its parameter bytes, versions S - i on stage i of S <= 64 */
    double P = 0;
    for (int l = 0; l < p->layer_count; l++)
        P += (double)p->layers[l].param_bytes;
    int S = t->device_count < p->layer_count ? t->device_count : p->layer_count;
    double inv = 0;
    for (int i = 0; i < S; i++)
        inv += 1.0 / ((S - i) + 1 + 1);
    double bound = P / inv;
    CHECK(bound > (double)t->devices[0].memory_bytes);
    /* strict: no plan, the error gives the bound */
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.no_fallback = 1;
    pt_plan *plan = NULL;
    pt_planner_report rep;
    int rc = pt_planner_run("pipedream", p, t, GPT3_GBS, &o, &plan, &rep, &err);
    CHECK_MSG(rc == PT_ENOFIT, "pipedream strict: %d", rc);
    CHECK((double)rep.needed_memory_bytes >= bound);
    CHECK_STR_CONTAINS(err.msg, "weight versions");
    printf(
        "  gpt3 pipedream --no-fallback: no plan; stashing bound %.1f GiB, least plan %.1f GiB\n",
        bound / 1073741824.0, (double)rep.needed_memory_bytes / 1073741824.0);
    pt_plan_free(&plan);
    /* default: PipeDream-2BW or PipeDream-Flush, the faster simulated that
     * fits, the reported time the simulator's */
    o.no_fallback = 0;
    rc = pt_planner_run("pipedream", p, t, GPT3_GBS, &o, &plan, &rep, &err);
    CHECK_MSG(rc == 0, "pipedream: %s", err.msg);
    if (rc == 0) {
        CHECK(plan->schedule == PT_SCHED_2BW || plan->schedule == PT_SCHED_1F1B_FLUSH);
        CHECK(rep.stash_need_proven && (double)rep.stash_need_bytes >= bound - 1);
        CHECK(rep.fallback_count == 2 && rep.fallback_chosen >= 0);
        CHECK_STR_CONTAINS(rep.why, "weight stashing needs >= ");
        double sim_s = NAN;
        CHECK_MSG(sim_fits(sim, plan, cost, NULL, &sim_s), "pipedream's %s plan does not fit",
                  pt_sched_kind_name(plan->schedule));
        CHECK_MSG(fabs(rep.iter_s - sim_s) <= 0.02 * sim_s, "pipedream %.3f s vs simulated %.3f s",
                  rep.iter_s, sim_s);
        for (int c = 0; c < rep.fallback_count; c++)
            if (rep.fallback[c].fits)
                CHECK(rep.fallback[rep.fallback_chosen].iter_s <= rep.fallback[c].iter_s);
        printf("  gpt3 pipedream: %s, simulated %.1f s per iteration (2bw %.1f s, 1f1b-flush "
               "%.1f s), search %.3f s\n",
               pt_sched_kind_name(plan->schedule), sim_s, rep.fallback[0].iter_s,
               rep.fallback[1].iter_s, rep.search_s);
    }
    pt_plan_free(&plan);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&t);
    pt_profile_free(&p);
}

PT_TEST_MAIN({"overlap", test_overlap}, {"agree", test_agree}, {"kinds", test_kinds},
             {"gpt3", test_gpt3})
