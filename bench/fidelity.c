/* Prediction fidelity: how close the simulator's iteration time is to what
 * `pipetop run` then measures on this machine, from the default profile and
 * from a profile calibrated on another plan (issue 10).
 *
 * For each model (fmnist-mlp-deep and gpt-tiny) and each plan of a matrix
 * spanning gpipe, dapple, 1f1b-flush, pipedream and 2bw, 1 to 4 stages,
 * M = 4, 8, 16, with and without a replicated stage (24 plans per model):
 *   1. the plan is written (stages cut so that the largest stage's fwd + bwd
 *      in a layer profile measured here is the least it can be, balance();
 *      a replicated stage gets two devices);
 *   2. `pipetop run --plan P --json` runs it for real with its default
 *      profile (measured now at the agents' thread count) and reports the
 *      default prediction, the measured iteration time (median step) and
 *      the measured bubble (mean over stage replicas), --repeats times
 *      (3; --quick and --reuse 1), in rounds over the matrix (run_rounds),
 *      the median run kept;
 *   3. the run is calibrated (planner/calibrate.h) against its own profile.
 * Then each plan i is predicted from the calibration of a *different* plan j:
 * the nearest plan of the matrix with the same number of agents (so the same
 * BLAS threads per agent; nearest(): same stages, then the same replicated
 * stage, then the same schedule, then the nearest M -- the plan a user ran
 * before editing it into i), carried onto plan i's
 * conditions with pt_cal_rebase (unchanged when both default profiles were
 * measured at one thread count), on the local topology (its devices share
 * this machine's cores) with j's fitted links; the simulator stretches each
 * worker's compute by how many of i's workers compute at once. Prints per
 * plan default, calibrated, measured, errors and bubbles, then the median
 * and worst relative error (|measured - predicted| / predicted) over the
 * matrix, and the same over every ordered pair of plans with as many agents
 * (how far a calibration carries beyond the nearest plan). --detail adds,
 * per plan, the fits used and its own, and per stage the predicted and the
 * measured compute and the stretch.
 *
 * --reuse DIR reads plans back from an earlier run's folders instead of
 * running them (DIR/<model>-NN.plan.json and DIR/<model>-NN/ with its
 * record, default profile and summary; plans without a record there run
 * as usual; DIR/<model>-layers.json when present), so the cost and
 * calibration model can be iterated on a quiet run's measurements; it
 * skips the throughput comparison, which measures single processes now.
 *
 * It also prints the throughput of 2-stage plans at global batch 128 (dapple,
 * and 1f1b-gw: its weight gradients gathered into one pass per layer) against one process training
 * the same model at batch 128 with one and with two BLAS threads (bench/train_throughput, built
 * beside this program), and each one's samples per CPU-second (the pipeline's: pipetop run and its
 * agents, less a 3-iteration run of the same plan, so start-up and profiling
 * cancel), which a loaded machine distorts less than samples/s. --throughput-only runs only that
 * part.
 *
 * --plans I,J,... runs only those rows of the matrix; each is then
 * calibrated from the nearest row of the subset, so the pairs may differ
 * from the full matrix's; it skips the throughput comparison.
 *
 * Figures mean something only on a quiet machine: other load stretches runs
 * unevenly. --quick runs three small plans of fmnist-mlp-deep (a smoke test
 * for ctest). Usage: fidelity [--quick] [--throughput-only] [--models a,b]
 * [--iters N] [--out-dir DIR] [--reuse DIR] [--shares DIR] [--detail] (see
 * docs/benchmarks.md). --shares DIR gives the default profiles a
 * fixed_share per layer measured now (apply_shares), for records whose
 * profiles predate the field. Prints figures; never fails on time. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/calibrate.h"
#include "planner/cost.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/datadir.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tui/cli/inputs.h"

#define MB_SIZE        16 /* samples per micro-batch (pipetop run's default) */
#define ITERS_FULL     30
#define ITERS_QUICK    6
#define TP_STEPS_FULL  200
#define TP_STEPS_QUICK 10
#define TP_BATCH       128 /* global batch of the throughput comparison */
#define TP_MB          8   /* its micro-batches: 8 x 16 = 128 */
#define TP_SHORT_ITERS 3   /* the short run whose CPU time is subtracted */
#define PATH_CAP       4096
#define CMD_CAP        (4 * PATH_CAP)
#define LINE_CAP       (1 << 20)
#define MAX_STAGES     4
#define MAX_MODELS     4
#define PLANS_MAX      32
#define REPEATS_MAX    9
#define REPEATS_FULL   3

/* One plan of the matrix: schedule, stages, micro-batches, the replicated
 * stage (-1: none). */
typedef struct plan_case {
    const char *schedule;
    int stages, mb_count, rep_stage;
} plan_case;

static const plan_case full_matrix[] = {
    {"gpipe", 1, 4, -1},      {"gpipe", 2, 8, -1},       {"gpipe", 3, 16, -1},
    {"gpipe", 2, 4, 0},       {"gpipe", 4, 8, -1},       {"dapple", 1, 8, -1},
    {"dapple", 2, 4, -1},     {"dapple", 2, 8, -1},      {"dapple", 3, 8, -1},
    {"dapple", 4, 16, -1},    {"dapple", 2, 8, 1},       {"dapple", 3, 4, 0},
    {"1f1b-flush", 2, 8, -1}, {"1f1b-flush", 3, 16, -1}, {"1f1b-flush", 4, 8, -1},
    {"1f1b-flush", 2, 16, 0}, {"pipedream", 2, 4, -1},   {"pipedream", 3, 8, -1},
    {"pipedream", 4, 4, -1},  {"pipedream", 2, 8, 1},    {"2bw", 2, 4, -1},
    {"2bw", 2, 16, -1},       {"2bw", 3, 8, -1},         {"2bw", 4, 16, -1},
    {"2bw", 2, 8, 0},         {"1f1b-flush", 1, 16, -1},
};
static const plan_case quick_matrix[] = {
    {"gpipe", 2, 4, -1},
    {"dapple", 2, 4, -1},
    {"1f1b-flush", 2, 4, 0},
};

/* What one plan gave. */
typedef struct plan_result {
    const plan_case *c;
    int ok, agents;
    char dir[PATH_CAP];
    pt_plan *plan;
    pt_profile *base, *cal; /* the run's default profile, its calibration */
    pt_cal_fit fit;
    double pred_ms, meas_ms, mean_ms, meas_bubble;
    double cal_ms, cal_bubble; /* from another plan's calibration */
    int cal_from;
    int reps;                   /* runs of the plan; the figures are the median run's */
    double rep_ms[REPEATS_MAX]; /* each run's measured iteration, in run order */
} plan_result;

typedef struct bench_args {
    int quick, iters, throughput_only, repeats;
    const char *models, *out_dir, *reuse;
    /* --plans: only these rows of the matrix (a bit per row; 0: all) */
    unsigned long long plans;
} bench_args;

static char exe_dir[PATH_CAP];
/* --reuse DIR: a plan whose folder DIR/<model>-NN holds a run record is read
 * back from it (plan, record, default profile, summary), not run again */
static const char *reuse_dir;
/* --detail: per stage, the measured and the predicted compute and stretch */
static int detail;
/* --shares DIR: DIR/<model>-shares.json, a layer profile measured with
 * `pipetop profile --fixed-share` at the runs' micro-batch and thread count;
 * its layers' fixed_share replace those of each run's default profile
 * (records from before the field have none), before calibration */
static const char *shares_dir;

/* Copies the layers' fixed_share of shares_dir's profile of base's model
 * into base; 0 when there is no --shares, -1 on a bad or mismatched file. */
static int apply_shares(pt_profile *base)
{
    if (!shares_dir)
        return 0;
    char path[PATH_CAP + 64];
    pt_error err = {0};
    pt_profile *sh = NULL;
    snprintf(path, sizeof path, "%s/%s-shares.json", shares_dir, base->model);
    int rc = pt_profile_load(path, &sh, &err);
    if (rc == 0 && (sh->layer_count != base->layer_count || strcmp(sh->model, base->model) ||
                    sh->microbatch != base->microbatch))
        rc = pt_error_set(&err, PT_EINVAL,
                          "%s: %s with %d layers at micro-batch %d; the run's profile is %s "
                          "with %d at %d",
                          path, sh->model, sh->layer_count, sh->microbatch, base->model,
                          base->layer_count, base->microbatch);
    for (int l = 0; rc == 0 && l < base->layer_count; l++)
        base->layers[l].fixed_share = sh->layers[l].fixed_share;
    if (rc < 0)
        fprintf(stderr, "fidelity: --shares: %s\n", err.msg);
    pt_profile_free(&sh);
    return rc < 0 ? -1 : 0;
}

static int parse(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){0, 0, 0, 0, "fmnist-mlp-deep,gpt-tiny", NULL, NULL, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            a->quick = 1;
        } else if (!strcmp(argv[i], "--throughput-only")) {
            a->throughput_only = 1;
        } else if (!strcmp(argv[i], "--models") && i + 1 < argc) {
            a->models = argv[++i];
        } else if (!strcmp(argv[i], "--out-dir") && i + 1 < argc) {
            a->out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--detail")) {
            detail = 1;
        } else if (!strcmp(argv[i], "--reuse") && i + 1 < argc) {
            a->reuse = argv[++i];
        } else if (!strcmp(argv[i], "--shares") && i + 1 < argc) {
            shares_dir = argv[++i];
        } else if (!strcmp(argv[i], "--plans") && i + 1 < argc) {
            char *list = argv[++i], *end = list;
            while (*end) {
                long k = strtol(list, &end, 10);
                if (end == list || k < 0 || k >= PLANS_MAX || (*end && *end != ',')) {
                    fprintf(stderr, "fidelity: --plans: a comma-separated list of rows 0..%d\n",
                            PLANS_MAX - 1);
                    return 2;
                }
                a->plans |= 1ULL << k;
                list = *end ? end + 1 : end;
            }
        } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            a->repeats = atoi(argv[++i]);
            if (a->repeats < 1 || a->repeats > REPEATS_MAX) {
                fprintf(stderr, "fidelity: --repeats must be in 1..%d\n", REPEATS_MAX);
                return 2;
            }
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            a->iters = atoi(argv[++i]);
            if (a->iters < 3 || a->iters > 100000) {
                fprintf(stderr, "fidelity: --iters must be in 3..100000\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: fidelity [--quick] [--throughput-only] [--models a,b] "
                            "[--iters N] [--repeats R] [--out-dir DIR] [--reuse DIR] "
                            "[--shares DIR] [--plans I,J,...] [--detail]\n");
            return 2;
        }
    }
    if (a->quick && !strcmp(a->models, "fmnist-mlp-deep,gpt-tiny"))
        a->models = "fmnist-mlp-deep";
    if (!a->iters)
        a->iters = a->quick ? ITERS_QUICK : ITERS_FULL;
    /* --reuse reads back one run per plan unless told how many */
    if (!a->repeats)
        a->repeats = a->quick || a->reuse ? 1 : REPEATS_FULL;
    return 0;
}

/* Runs a shell command; its stdout's last line that starts with '{' goes to
 * last (when not NULL). Returns the exit status, or -1. */
static int run_cmd(const char *cmd, char *last, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char *line = malloc(LINE_CAP);
    if (!line) {
        pclose(p);
        return -1;
    }
    if (last)
        last[0] = '\0';
    while (fgets(line, LINE_CAP, p))
        if (last && line[0] == '{')
            snprintf(last, cap, "%s", line);
    free(line);
    int st = pclose(p);
    return st == -1 ? -1 : WEXITSTATUS(st);
}

/* Cuts S contiguous stages, each of at least one layer, so that the largest
 * stage's fwd + bwd in prof is the least it can be (dynamic programming over
 * the cut points, as the planners partition). The greedy cut at k/S of the
 * total gave the layer that crosses the mark to the earlier stage: on
 * fmnist-mlp-deep's 2 stages 9 of its 17 linear layers against 8 (one of
 * them 512x10), and the 2-stage pipeline waited on its first stage (26.9 ms
 * of compute per iteration against 21.5). */
static void balance(const pt_profile *prof, int S, int *cut)
{
    enum { LMAX = 256 };
    int n = prof->layer_count;
    if (n > LMAX || S > n) { /* not the matrix's models: even layer counts */
        for (int k = 0; k <= S; k++)
            cut[k] = (int)((int64_t)n * k / S);
        return;
    }
    double pre[LMAX + 1], best[MAX_STAGES + 1][LMAX + 1];
    int from[MAX_STAGES + 1][LMAX + 1];
    pre[0] = 0;
    for (int l = 0; l < n; l++)
        pre[l + 1] = pre[l] + prof->layers[l].fwd_ms + prof->layers[l].bwd_ms;
    /* best[k][l]: the least largest stage of layers [0, l) in k stages */
    for (int l = 1; l <= n; l++)
        best[1][l] = pre[l];
    for (int k = 2; k <= S; k++)
        for (int l = k; l <= n; l++) {
            best[k][l] = INFINITY;
            for (int j = k - 1; j < l; j++) {
                double last = pre[l] - pre[j], m = best[k - 1][j] > last ? best[k - 1][j] : last;
                if (m < best[k][l]) {
                    best[k][l] = m;
                    from[k][l] = j;
                }
            }
        }
    cut[S] = n;
    for (int k = S; k > 1; k--)
        cut[k - 1] = from[k][cut[k]];
    cut[0] = 0;
}

static pt_plan *make_plan(const pt_profile *prof, const plan_case *c)
{
    pt_plan *p = pt_plan_new(c->stages);
    if (!p)
        return NULL;
    int cut[MAX_STAGES + 1];
    balance(prof, c->stages, cut);
    snprintf(p->model, sizeof p->model, "%s", prof->model);
    p->layer_count = prof->layer_count;
    p->microbatch_size = MB_SIZE;
    p->microbatch_count = c->mb_count;
    p->policy = 'A';
    p->optimizer = pt_optim_default(PT_OPTIM_SGD);
    if (pt_sched_kind_parse(c->schedule, &p->schedule) < 0) {
        pt_plan_free(&p);
        return NULL;
    }
    int dev = 0;
    for (int s = 0; s < c->stages; s++) {
        int devs[2] = {dev, dev + 1}, n = s == c->rep_stage ? 2 : 1;
        p->stages[s].first = cut[s];
        p->stages[s].last = cut[s + 1];
        if (pt_plan_set_replicas(p, s, devs, n) < 0) {
            pt_plan_free(&p);
            return NULL;
        }
        dev += n;
    }
    return p;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Reads a `pipetop run --json` summary (the run's stdout line, or the
 * record's summary entry, which carries the same members). */
static int read_summary(const char *text, plan_result *r)
{
    cJSON *o = cJSON_Parse(text);
    if (!o)
        return -1;
    r->pred_ms = num(o, "predicted_iteration_ms");
    r->meas_ms = num(o, "measured_iteration_ms");
    r->mean_ms = num(o, "mean_iteration_ms"); /* NaN in records from before the field */
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(o, "stages"), *s;
    double bub = 0;
    int n = 0;
    cJSON_ArrayForEach(s, stages)
    {
        double b = num(s, "bubble_frac");
        if (isfinite(b)) {
            bub += b;
            n++;
        }
    }
    r->meas_bubble = n ? bub / n : NAN;
    cJSON_Delete(o);
    return 0;
}

/* The last summary line of a run folder's record into last; -1 when the
 * folder has no record or the record no summary. */
static int record_summary(const char *dir, char *last, size_t cap)
{
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%s/%s", dir, PT_RECORD_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *line = malloc(LINE_CAP);
    last[0] = '\0';
    while (line && fgets(line, LINE_CAP, f))
        if (strstr(line, "\"kind\":\"summary\""))
            snprintf(last, cap, "%s", line);
    free(line);
    fclose(f);
    return last[0] ? 0 : -1;
}

/* Calibrates run r against its own default profile. */
static int calibrate_run(plan_result *r)
{
    char path[PATH_CAP + 32];
    pt_error err = {0};
    pt_record *rec = NULL;
    pt_topology *topo = pt_inputs_local_topology(r->agents);
    snprintf(path, sizeof path, "%s/profile.json", r->dir);
    int rc = topo ? pt_profile_load(path, &r->base, &err) : PT_ENOMEM;
    if (rc == 0 && apply_shares(r->base) < 0)
        rc = pt_error_set(&err, PT_EINVAL, "--shares: not applied");
    snprintf(path, sizeof path, "%s/%s", r->dir, PT_RECORD_FILE);
    if (rc == 0)
        rc = pt_record_load(path, &rec, &err);
    pt_cal_opts co = {-1, -1, r->dir, "profile.json", ""};
    if (rc == 0)
        rc = pt_calibrate(rec, r->base, topo, &co, &r->cal, &r->fit, &err);
    if (rc < 0)
        fprintf(stderr, "fidelity: %s: calibrate: %s\n", r->dir, err.msg);
    pt_record_free(&rec);
    pt_topology_free(&topo);
    return rc < 0 ? -1 : 0;
}

/* Plan r's default prediction by this build's simulator: its default
 * profile on the local topology, as `pipetop run` predicts it (--reuse: the
 * recorded figure is the simulator's of the run's day). */
static int predict_default(plan_result *r)
{
    pt_error err = {0};
    pt_topology *topo = pt_inputs_local_topology(r->agents);
    pt_program prog = {0};
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_sim_result res = {0};
    int rc = topo ? 0 : PT_ENOMEM;
    if (rc == 0)
        rc = pt_sched_build(r->plan, r->base, NULL, &prog, &err);
    if (rc == 0)
        rc = pt_cost_new(r->base, topo, &cost, &err);
    if (rc == 0)
        rc = pt_sim_new(&sim);
    if (rc == 0)
        rc = pt_sim_run(sim, &prog, cost, &res, &err);
    if (rc == 0)
        r->pred_ms = res.iter_s * 1e3;
    else
        fprintf(stderr, "fidelity: predict %s: %s\n", r->dir, err.msg);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_program_release(&prog);
    pt_topology_free(&topo);
    return rc;
}

/* Reads plan r back from an earlier run's folder (--reuse): its plan, its
 * summary (the measured figures), its calibration and its default
 * prediction by this build; 1 when the folder has none (the plan is then
 * run), 0 or -1. */
static int reuse_plan(plan_result *r, const char *name)
{
    char src[PATH_CAP], path[PATH_CAP + 32], *last = malloc(LINE_CAP);
    pt_error err = {0};
    if (!last)
        return -1;
    if ((size_t)snprintf(src, sizeof src, "%s/%s", reuse_dir, name) >= sizeof src ||
        record_summary(src, last, LINE_CAP) < 0) {
        free(last);
        return 1;
    }
    snprintf(path, sizeof path, "%s.plan.json", src);
    pt_plan *plan = NULL;
    int rc = pt_plan_load(path, &plan, &err);
    if (rc < 0)
        fprintf(stderr, "fidelity: %s\n", err.msg);
    else if (read_summary(last, r) < 0)
        rc = -1;
    free(last);
    if (rc < 0) {
        pt_plan_free(&plan);
        return -1;
    }
    pt_plan_free(&r->plan);
    r->plan = plan;
    snprintf(r->dir, sizeof r->dir, "%s", src);
    if (calibrate_run(r) < 0)
        return -1;
    return predict_default(r) < 0 ? -1 : 0;
}

/* Runs plan r (written to r->dir.plan.json) and reads its summary, its
 * default profile, and calibrates it. */
static int run_plan(const char *model, int iters, plan_result *r)
{
    char path[PATH_CAP + 32], cmd[CMD_CAP], *last = malloc(LINE_CAP);
    pt_error err = {0};
    if (!last)
        return -1;
    snprintf(path, sizeof path, "%s.plan.json", r->dir);
    if (pt_plan_save(r->plan, path, &err) < 0) {
        fprintf(stderr, "fidelity: %s\n", err.msg);
        free(last);
        return -1;
    }
    int st = -1;
    if ((size_t)snprintf(cmd, sizeof cmd,
                         "'%s/pipetop' run --plan '%s' --model '%s' --data synthetic --iters %d "
                         "--json --run-dir '%s' 2>'%s.err'",
                         exe_dir, path, model, iters, r->dir, r->dir) < sizeof cmd)
        st = run_cmd(cmd, last, LINE_CAP);
    if (st != 0 || read_summary(last, r) < 0) {
        fprintf(stderr, "fidelity: %s %d stages M=%d: pipetop run failed (exit %d; see %s.err)\n",
                r->c->schedule, r->c->stages, r->c->mb_count, st, r->dir);
        free(last);
        return -1;
    }
    free(last);
    return calibrate_run(r);
}

/* Predicts plan i from plan j's calibration into *ms and *bubble (with
 * --detail and show set, per stage against i's measurement). */
static int predict_from(const plan_result *i, const plan_result *j, int show, double *ms,
                        double *bubble)
{
    pt_error err = {0};
    pt_profile *prof = NULL;
    pt_topology *topo = pt_inputs_local_topology(i->agents), *ctopo = NULL;
    pt_program prog = {0};
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_sim_result res = {0};
    int rc = topo ? 0 : PT_ENOMEM;
    if (rc == 0)
        rc = pt_cal_rebase(j->cal, j->base, i->base, &prof, &err);
    if (rc == 0)
        rc = pt_cal_topology(&j->fit, topo, &ctopo, &err);
    if (rc == 0)
        rc = pt_sched_build(i->plan, prof, NULL, &prog, &err);
    if (rc == 0)
        rc = pt_cost_new(prof, ctopo, &cost, &err);
    if (rc == 0)
        rc = pt_sim_new(&sim);
    if (rc == 0)
        rc = pt_sim_run(sim, &prog, cost, &res, &err);
    if (rc == 0 && detail && show) {
        /* per stage (its first replica): predicted from j vs measured in i */
        printf("  %s from %s: predicted %.2f ms; measured median step %.2f ms, mean %.2f ms\n",
               i->dir, j->dir, res.iter_s * 1e3, i->meas_ms, i->mean_ms);
        const pt_cal_fit *f[2] = {&j->fit, &i->fit};
        for (int k = 0; k < 2; k++)
            printf("    %s fit: sends %s %.1f us + %.3g B/s, all-reduce %s %.1f us + %.3g B/s, "
                   "overhead %.3f ms\n",
                   k ? "its own" : "used", pt_cal_link_how_name(f[k]->intra.how),
                   f[k]->intra.link.latency * 1e6, f[k]->intra.link.bandwidth,
                   pt_cal_link_how_name(f[k]->allreduce.how), f[k]->allreduce.link.latency * 1e6,
                   f[k]->allreduce.link.bandwidth, f[k]->op_overhead_ms);
        for (int s = 0; s < prog.stage_count && s < i->fit.stage_count; s++) {
            int w = prog.stage_worker[s];
            const pt_worker *x = &prog.workers[w];
            const pt_cal_stage *m = &i->fit.stages[s];
            int rows = x->row_hi - x->row_lo;
            double st = res.workers[w].core_stretch;
            printf("    stage %d rows %2d: fwd %.3f / %.3f ms, bwd %.3f / %.3f ms (predicted / "
                   "measured), stretch %.2f\n",
                   s, rows, 1e3 * st * pt_cost_fwd_s(cost, x->first, x->last, rows, x->device),
                   m->fwd_ms, 1e3 * st * pt_cost_bwd_s(cost, x->first, x->last, rows, x->device),
                   m->bwd_ms, st);
        }
    }
    if (rc == 0) {
        *ms = res.iter_s * 1e3;
        *bubble = res.bubble_frac;
    } else {
        fprintf(stderr, "fidelity: predict %s from %s: %s\n", i->dir, j->dir, err.msg);
    }
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_program_release(&prog);
    pt_topology_free(&ctopo);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double rel(double meas, double pred)
{
    return pred > 0 && isfinite(meas) ? (meas - pred) / pred : NAN;
}

/* Median and worst |relative error| of n figures (NaN ones left out). */
static void summarise(const char *what, const double *e, int n, const char *unit)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    int k = 0;
    for (int i = 0; v && i < n; i++)
        if (isfinite(e[i]))
            v[k++] = fabs(e[i]);
    if (!k) {
        printf("  %-28s no plans\n", what);
        free(v);
        return;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    double med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
    printf("  %-28s median %5.1f %%  worst %5.1f %%  over %d %s\n", what, 100 * med, 100 * v[k - 1],
           k, unit);
    free(v);
}

static int plan_agents(const plan_case *c)
{
    return c->stages + (c->rep_stage >= 0);
}

/* Frees what a plan's result owns. */
static void result_clear(plan_result *r)
{
    pt_plan_free(&r->plan);
    pt_profile_free(&r->base);
    pt_profile_free(&r->cal);
    pt_cal_fit_clear(&r->fit);
}

/* Run k of plan i of the matrix (or read back with --reuse), in folder
 * <model>-NN for k = 0 and <model>-NN-rK after: *t gets its own plan, record,
 * profile and calibration; t->ok says whether it ran. */
static void run_once(const char *model, const bench_args *a, const pt_profile *cut_prof,
                     const plan_result *r, int i, int n, int k, plan_result *t)
{
    char name[PATH_CAP];
    *t = *r;
    t->plan = NULL;
    t->base = t->cal = NULL;
    memset(&t->fit, 0, sizeof t->fit);
    t->ok = 0;
    if (!(t->plan = make_plan(cut_prof, r->c)))
        return;
    if (k) {
        snprintf(name, sizeof name, "%s-%02d-r%d", model, i, k);
        snprintf(t->dir, sizeof t->dir, "%.*s-r%d", PATH_CAP - 16, r->dir, k);
    } else {
        snprintf(name, sizeof name, "%s-%02d", model, i);
    }
    int re = reuse_dir ? reuse_plan(t, name) : 1;
    t->ok = re == 1 ? run_plan(model, a->iters, t) == 0 : re == 0;
    fprintf(stderr, "  ran %2d/%d (%d of %d) %s\n", i + 1, n, k + 1, a->repeats, t->dir);
}

/* Keeps in *r, of plan i's runs t[0, R), the one whose measured iteration is
 * the median (its record, profile and calibration) and every run's figure;
 * frees the others. */
static void keep_median(plan_result *r, plan_result *t, int R)
{
    int order[REPEATS_MAX], good = 0;
    for (int k = 0; k < R; k++)
        if (t[k].ok)
            order[good++] = k;
    /* insertion sort of at most REPEATS_MAX */
    for (int x = 1; x < good; x++)
        for (int y = x; y > 0 && t[order[y]].meas_ms < t[order[y - 1]].meas_ms; y--) {
            int z = order[y];
            order[y] = order[y - 1];
            order[y - 1] = z;
        }
    int keep = good ? order[(good - 1) / 2] : -1;
    for (int k = 0; k < R; k++)
        if (k != keep)
            result_clear(&t[k]);
    if (keep < 0)
        return;
    pt_plan_free(&r->plan);
    *r = t[keep];
    r->reps = good;
    for (int x = 0; x < good; x++)
        r->rep_ms[x] = t[order[x]].meas_ms;
}

/* Runs every asked plan of r[0, n) a->repeats times, in rounds over the
 * matrix rather than one plan's runs back to back: this VM's speed drifts by
 * up to half over minutes (a one-agent plan's three runs in one minute took
 * 161-176 ms, two runs of it four minutes later 137 and 94 ms), so back to
 * back runs make two plans' medians draws of different minutes; in rounds
 * every plan's runs are spread over the whole matrix's time. */
static void run_rounds(const char *model, const bench_args *a, const pt_profile *cut_prof,
                       plan_result *r, int n)
{
    int R = a->repeats > 0 ? a->repeats : 1;
    plan_result *t = calloc((size_t)n * (size_t)R, sizeof *t);
    if (!t)
        return;
    for (int k = 0; k < R; k++)
        for (int i = 0; i < n; i++)
            if (r[i].plan && !(a->plans && !(a->plans & (1ULL << i))))
                run_once(model, a, cut_prof, &r[i], i, n, k, &t[i * R + k]);
    for (int i = 0; i < n; i++)
        if (r[i].plan && !(a->plans && !(a->plans & (1ULL << i))))
            keep_median(&r[i], &t[i * R], R);
    free(t);
}

/* The plan of the matrix nearest to plan i that ran, to calibrate i on: the
 * plan a user ran before editing it into i. The first in this order: as
 * many agents (so the same BLAS threads each; pt_cal_rebase carries a
 * calibration across thread counts otherwise), the same stage count, the
 * same replicated stage, the same schedule, the nearest micro-batch count
 * (by ratio), then the nearest row. -1 when none ran. */
static int nearest(const plan_result *r, int n, int i)
{
    int best = -1;
    double best_key = 0;
    const plan_case *c = r[i].c;
    for (int j = 0; j < n; j++) {
        if (j == i || !r[j].ok)
            continue;
        const plan_case *d = r[j].c;
        double key = 1e7 * (r[j].agents != r[i].agents) + 1e6 * (d->stages != c->stages) +
                     1e5 * (d->rep_stage != c->rep_stage) +
                     1e4 * (strcmp(d->schedule, c->schedule) != 0) +
                     1e2 * fabs(log2((double)d->mb_count / c->mb_count)) + abs(j - i);
        if (best < 0 || key < best_key) {
            best = j;
            best_key = key;
        }
    }
    return best;
}

/* Every plan predicted from every other plan with as many agents: the
 * median and worst |relative error| over those pairs (how far a calibration
 * carries beyond the nearest plan). */
static void all_pairs(const plan_result *r, int n)
{
    double *e = malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof *e);
    int k = 0;
    for (int i = 0; e && i < n; i++)
        for (int j = 0; r[i].ok && j < n; j++) {
            double ms = NAN, bubble = NAN;
            if (j != i && r[j].ok && r[j].agents == r[i].agents &&
                predict_from(&r[i], &r[j], 0, &ms, &bubble) == 0)
                e[k++] = rel(r[i].meas_ms, ms);
        }
    if (e)
        summarise("every other plan, same agents", e, k, "pairs");
    free(e);
}

static void bench_model(const char *model, const bench_args *a, const char *out_dir)
{
    const plan_case *m = a->quick ? quick_matrix : full_matrix;
    int n = a->quick ? (int)(sizeof quick_matrix / sizeof *quick_matrix)
                     : (int)(sizeof full_matrix / sizeof *full_matrix);
    char path[PATH_CAP + 64], cmd[CMD_CAP];
    pt_error err = {0};
    pt_profile *cut_prof = NULL;
    /* the layer profile that places the cuts: one BLAS thread, as a
     * multi-stage plan's agents on this machine have */
    snprintf(path, sizeof path, "%s/%s-layers.json", reuse_dir ? reuse_dir : out_dir, model);
    int have = reuse_dir && access(path, R_OK) == 0;
    if (!have)
        snprintf(path, sizeof path, "%s/%s-layers.json", out_dir, model);
    snprintf(cmd, sizeof cmd,
             "'%s/pipetop' profile --model '%s' --batch %d --threads 1 --out '%s' >/dev/null",
             exe_dir, model, MB_SIZE, path);
    if ((!have && run_cmd(cmd, NULL, 0) != 0) || pt_profile_load(path, &cut_prof, &err) < 0) {
        fprintf(stderr, "fidelity: %s: cannot profile (%s)\n", model, err.msg);
        return;
    }
    plan_result *r = calloc((size_t)n, sizeof *r);
    if (!r) {
        pt_profile_free(&cut_prof);
        return;
    }
    int asked = n;
    for (int i = 0; a->plans && i < n; i++)
        asked -= !(a->plans & (1ULL << i));
    printf("\n%s: %d plans, micro-batch %d, %d iterations each, run %d time%s; measured = the "
           "median step (pipetop run's measured_iteration_ms: per step its slowest worker, the "
           "first step left out) of the median run; spread = (slowest - fastest run) / median\n",
           model, asked, MB_SIZE, a->iters, a->repeats, a->repeats > 1 ? "s" : "");
    for (int i = 0; i < n; i++) {
        r[i].c = &m[i];
        r[i].agents = plan_agents(&m[i]);
        r[i].cal_ms = r[i].cal_bubble = NAN;
        r[i].cal_from = -1;
        if ((size_t)snprintf(r[i].dir, sizeof r[i].dir, "%s/%s-%02d", out_dir, model, i) >=
                sizeof r[i].dir ||
            !(r[i].plan = make_plan(cut_prof, &m[i])))
            continue;
    }
    /* plans not asked for (--plans) are neither run nor a calibration source */
    run_rounds(model, a, cut_prof, r, n);
    for (int i = 0; i < n; i++) {
        int j = r[i].ok ? nearest(r, n, i) : -1;
        if (j >= 0 && predict_from(&r[i], &r[j], 1, &r[i].cal_ms, &r[i].cal_bubble) == 0)
            r[i].cal_from = j;
    }
    printf("%3s %-11s %2s %3s %4s %3s %10s %10s %5s %10s %7s %8s %8s %7s %7s\n", "#", "schedule",
           "S", "M", "rep", "agt", "default ms", "calib. ms", "from", "measured", "spread",
           "err def", "err cal", "bubble", "pred b");
    double *ed = calloc((size_t)n, sizeof *ed), *ec = calloc((size_t)n, sizeof *ec);
    for (int i = 0; i < n; i++) {
        const plan_result *x = &r[i];
        char rep[16];
        snprintf(rep, sizeof rep, "%s", x->c->rep_stage >= 0 ? "" : "-");
        if (x->c->rep_stage >= 0)
            snprintf(rep, sizeof rep, "s%d", x->c->rep_stage);
        if (ed && ec) {
            ed[i] = x->ok ? rel(x->meas_ms, x->pred_ms) : NAN;
            ec[i] = x->ok ? rel(x->meas_ms, x->cal_ms) : NAN;
        }
        if (a->plans && !(a->plans & (1ULL << i)))
            continue;
        if (!x->ok) {
            printf("%3d %-11s %2d %3d %4s %3d  failed (see %s.err)\n", i, x->c->schedule,
                   x->c->stages, x->c->mb_count, rep, x->agents, x->dir);
            continue;
        }
        double spread = x->reps > 1 ? (x->rep_ms[x->reps - 1] - x->rep_ms[0]) / x->meas_ms : 0;
        printf("%3d %-11s %2d %3d %4s %3d %10.3f %10.3f %5d %10.3f %6.1f%% %+7.1f%% %+7.1f%% "
               "%6.1f%% %6.1f%%\n",
               i, x->c->schedule, x->c->stages, x->c->mb_count, rep, x->agents, x->pred_ms,
               x->cal_ms, x->cal_from, x->meas_ms, 100 * spread, 100 * rel(x->meas_ms, x->pred_ms),
               100 * rel(x->meas_ms, x->cal_ms), 100 * x->meas_bubble, 100 * x->cal_bubble);
    }
    printf("relative error |measured - predicted| / predicted, %s:\n", model);
    if (ed && ec) {
        summarise("default profile", ed, n, "plans");
        summarise("calibrated on another plan", ec, n, "plans");
    }
    all_pairs(r, n);
    free(ed);
    free(ec);
    for (int i = 0; i < n; i++)
        result_clear(&r[i]);
    free(r);
    pt_profile_free(&cut_prof);
}

/* CPU seconds of this process's waited-for children (and theirs) so far. */
static double children_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) < 0)
        return NAN;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* The number before `unit` on the line ("1234.5 samples/s"); NaN when absent. */
static double number_before(const char *line, const char *unit)
{
    const char *s = strstr(line, unit);
    if (!s)
        return NAN;
    const char *b = s;
    while (b > line && (b[-1] == '.' || (b[-1] >= '0' && b[-1] <= '9')))
        b--;
    return b < s ? strtod(b, NULL) : NAN;
}

/* train_throughput's samples/s and samples per CPU-second; NaN when absent. */
static void samples_per_s(const char *model, int threads, int steps, double *wall, double *cpu)
{
    char cmd[CMD_CAP], line[4096] = "";
    *wall = *cpu = NAN;
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS= '%s/train_throughput' --model '%s' --batch %d --threads %d "
             "--steps %d --warmup %d 2>&1",
             exe_dir, model, TP_BATCH, threads, steps, steps / 10 + 1);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    while (fgets(line, sizeof line, p)) {
        double w = number_before(line, " samples/s"), c = number_before(line, " samples/CPU-s");
        if (isfinite(w)) {
            *wall = w;
            *cpu = c;
        } else if (strstr(line, "train_throughput")) {
            fprintf(stderr, "fidelity: %s", line);
        }
    }
    pclose(p);
}

/* One 2-stage M=TP_MB plan of `kind` run for real: samples/s and samples per
 * CPU-second (NaN when a run failed). */
static void pipeline_tp(const char *model, const char *kind, const pt_profile *prof,
                        const bench_args *a, const char *out_dir, double *wall, double *cpu)
{
    plan_case c = {kind, 2, TP_MB, -1};
    plan_result r = {.c = &c, .agents = 2};
    *wall = *cpu = NAN;
    if (!(r.plan = make_plan(prof, &c)))
        return;
    if ((size_t)snprintf(r.dir, sizeof r.dir, "%s/%s-throughput-%s", out_dir, model, kind) >=
        sizeof r.dir)
        goto done;
    int iters = a->quick ? a->iters : 2 * a->iters;
    /* CPU per sample from the difference of a short and this run: start-up,
     * profiling and the console's set-up cancel */
    plan_result sr = r;
    if ((size_t)snprintf(sr.dir, sizeof sr.dir, "%.*s-short", PATH_CAP - 16, r.dir) >=
        sizeof sr.dir)
        goto done;
    double c0 = children_cpu_s();
    int short_ok = run_plan(model, TP_SHORT_ITERS, &sr) == 0;
    double c1 = children_cpu_s();
    int ok = run_plan(model, iters, &r) == 0;
    double c2 = children_cpu_s();
    pt_profile_free(&sr.base);
    pt_profile_free(&sr.cal);
    pt_cal_fit_clear(&sr.fit);
    *wall = ok && r.meas_ms > 0 ? TP_BATCH / (r.meas_ms / 1e3) : NAN;
    *cpu = ok && short_ok && iters > TP_SHORT_ITERS && c2 - c1 > c1 - c0
               ? (double)(iters - TP_SHORT_ITERS) * TP_BATCH / ((c2 - c1) - (c1 - c0))
               : NAN;
done:
    pt_plan_free(&r.plan);
    pt_profile_free(&r.base);
    pt_profile_free(&r.cal);
    pt_cal_fit_clear(&r.fit);
}

/* The pipelines the throughput comparison runs: DAPPLE's schedule, and
 * 1F1B with the weight gradients gathered into one pass per layer. */
static const char *const tp_kinds[] = {"dapple", "1f1b-gw"};
#define TP_KINDS (int)(sizeof tp_kinds / sizeof tp_kinds[0])

static void throughput(const char *model, const bench_args *a, const char *out_dir)
{
    char path[PATH_CAP + 64], cmd[CMD_CAP];
    pt_error err = {0};
    pt_profile *prof = NULL;
    snprintf(path, sizeof path, "%s/%s-layers.json", out_dir, model);
    if (access(path, R_OK) != 0) { /* --throughput-only: the matrix did not profile it */
        snprintf(cmd, sizeof cmd,
                 "'%s/pipetop' profile --model '%s' --batch %d --threads 1 --out '%s' >/dev/null",
                 exe_dir, model, MB_SIZE, path);
        if (run_cmd(cmd, NULL, 0) != 0)
            fprintf(stderr, "fidelity: throughput: %s: cannot profile\n", model);
    }
    if (pt_profile_load(path, &prof, &err) < 0) {
        fprintf(stderr, "fidelity: throughput: %s\n", err.msg);
        return;
    }
    int steps = a->quick ? TP_STEPS_QUICK : TP_STEPS_FULL;
    double pipe[TP_KINDS], pipe_cpu[TP_KINDS], one, one_cpu, two, two_cpu;
    for (int k = 0; k < TP_KINDS; k++)
        pipeline_tp(model, tp_kinds[k], prof, a, out_dir, &pipe[k], &pipe_cpu[k]);
    samples_per_s(model, 1, steps, &one, &one_cpu);
    samples_per_s(model, 2, steps, &two, &two_cpu);
    printf("\nthroughput, %s, global batch %d: one process 1 BLAS thread %.1f samples/s, "
           "2 threads %.1f\n",
           model, TP_BATCH, one, two);
    for (int k = 0; k < TP_KINDS; k++)
        printf("  2-stage %-8s M=%d %.1f samples/s; ratios %.2fx (1 thread) and %.2fx (2 "
               "threads)\n",
               tp_kinds[k], TP_MB, pipe[k], pipe[k] / one, pipe[k] / two);
    printf("  samples per CPU-second: one process 1 thread %.1f, 2 threads %.1f;", one_cpu,
           two_cpu);
    for (int k = 0; k < TP_KINDS; k++)
        printf(" %s %.1f", tp_kinds[k], pipe_cpu[k]);
    printf(" (pipetop run and its agents, a %d-iteration run subtracted)\n", TP_SHORT_ITERS);
    pt_profile_free(&prof);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the table between the progress lines */
    bench_args a;
    if (parse(argc, argv, &a))
        return 2;
    reuse_dir = a.reuse;
    if (pt_exe_dir(exe_dir, sizeof exe_dir) < 0) {
        fprintf(stderr, "fidelity: cannot find this program's folder\n");
        return 1;
    }
    char out_dir[PATH_CAP];
    if (a.out_dir) {
        snprintf(out_dir, sizeof out_dir, "%s", a.out_dir);
        if (mkdir(out_dir, 0755) < 0 && access(out_dir, W_OK) < 0) {
            fprintf(stderr, "fidelity: %s: cannot create\n", out_dir);
            return 1;
        }
    } else {
        snprintf(out_dir, sizeof out_dir, "/tmp/pipetop-fidelity.XXXXXX");
        if (!mkdtemp(out_dir)) {
            fprintf(stderr, "fidelity: cannot make a folder under /tmp\n");
            return 1;
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("prediction fidelity on %ld CPUs; runs under %s\n", cpus, out_dir);
    if (reuse_dir)
        printf("reusing the runs recorded under %s (their measured figures; no throughput)\n",
               reuse_dir);
    char models[PATH_CAP];
    snprintf(models, sizeof models, "%s", a.models);
    char *save = NULL;
    int k = 0;
    for (char *m = strtok_r(models, ",", &save); m && k < MAX_MODELS;
         m = strtok_r(NULL, ",", &save), k++)
        if (!a.throughput_only)
            bench_model(m, &a, out_dir);
    snprintf(models, sizeof models, "%s", a.models);
    k = 0;
    /* the throughput comparison measures single processes now: not from records */
    for (char *m = strtok_r(models, ",", &save); m && k < MAX_MODELS && !reuse_dir && !a.plans;
         m = strtok_r(NULL, ",", &save), k++)
        throughput(m, &a, out_dir);
    return 0;
}
