/* Planners: from a profile, a topology and a global batch size to a plan.
 *
 * Every planner is one function registered by name in planner.c:
 *   dapple     DAPPLE's dynamic program (partition, replication, placement by
 *              Fresh/Append/Scatter First) minimising the synchronous iteration
 *              latency; schedule "dapple" with policy A or B.
 *   pipedream  PipeDream's hierarchical dynamic program minimising the slowest
 *              stage (replication and boundary transfers included); "pipedream".
 *              When no weight-stashing plan fits memory it plans "2bw" (the
 *              2bw planner) or "1f1b-flush" (PipeDream-Flush on dapple's
 *              search), the one the simulator runs faster, unless
 *              opts->no_fallback.
 *   2bw        PipeDream-2BW's search over depth x width, micro-batch size and
 *              recomputation under the memory limit; "2bw".
 *   gpipe      balanced contiguous partition into --stages stages; "gpipe".
 *   dp         pure data parallelism, all-reduce after the backward; one stage.
 *   pipesgd    data parallelism with Pipe-SGD's width-two timing; "pipesgd".
 *
 * All of them charge time and memory through the shared cost model
 * (planner/cost.h): a plan a planner accepts fits pt_cost_plan_memory, so the
 * planner and the simulator never disagree on memory. Each writes a plan and a
 * report: the value of its own objective for that plan and why it was chosen.
 * docs/planners.md states each objective exactly. */
#ifndef PT_PLANNER_PLANNER_H
#define PT_PLANNER_PLANNER_H

#include <stdint.h>

#include "planner/cost.h"
#include "protocol/error.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"

/* Most candidate micro-batch sizes a planner tries. */
#define PT_PLANNER_MB_CHOICES_MAX 16
/* Length of a report's explanation. */
#define PT_PLANNER_WHY_MAX 1024

/* What a planner minimises. DEFAULT is the model the simulator and the
 * runtime agree on; the others are a paper's own formulas, for comparing
 * with the paper and its released code (docs/planners.md). */
typedef enum pt_planner_objective {
    PT_OBJECTIVE_DEFAULT = 0,
    PT_OBJECTIVE_PIPEDREAM, /* PipeDream's optimizer (pipedream only) */
    PT_OBJECTIVE_DAPPLE,    /* DAPPLE's released planner (dapple only) */
    PT_OBJECTIVE_COUNT
} pt_planner_objective;

/* "default", "pipedream", "dapple"; NULL past the end. */
const char *pt_planner_objective_name(pt_planner_objective objective);
/* The objective called name: 0, or PT_ENOTFOUND. */
int pt_planner_objective_parse(const char *name, pt_planner_objective *out);

typedef struct pt_planner_opts {
    /* > 0: every device is taken to have this much memory (bytes); 0: the
     * topology's figures. */
    int64_t memory_limit_bytes;
    /* gpipe: number of stages, 1..min(layers, devices); 0: min(layers, devices).
     * Other planners ignore it. */
    int stages;
    /* Candidate micro-batch sizes (samples; each divides the global batch).
     * count 0: the planner's defaults (divisors of the global batch, thinned
     * to PT_PLANNER_MB_CHOICES_MAX; pipedream: the profile's micro-batch). */
    int microbatch_sizes[PT_PLANNER_MB_CHOICES_MAX];
    int microbatch_size_count;
    /* Optimizer whose state (memory) and step (time) are charged. */
    pt_optim_kind optim;
    /* DEFAULT, or the planner's paper objective (pt_planner_info.paper);
     * pt_planner_run refuses an objective the planner does not have. */
    pt_planner_objective objective;
    /* dapple and gpipe: the schedule kinds they may choose among, as a mask of
     * (1u << kind) over the synchronous kinds of the kind table; 0: their own
     * kind only; PT_PLANNER_KINDS_SYNC: every synchronous kind (a kind added
     * to the table joins). Other planners ignore it. */
    uint32_t kinds;
    /* pipedream (default objective): 0 plans PipeDream-2BW or PipeDream-Flush
     * (the memory-lean kinds of the PipeDream-2BW paper, whichever the
     * simulator runs faster among those that fit) when no weight-stashing plan
     * fits memory; 1 keeps it strict: PT_ENOFIT naming the stashing need.
     * Other planners ignore it. */
    int no_fallback;
    /* dapple: 'A' or 'B' searches, simulates and picks among its own kind's
     * rows only that policy (pipedream's PipeDream-Flush candidate, whose op
     * order is policy A's, needs no policy B); 0: both. */
    char dapple_policy;
    /* 1: pt_planner_run returns the planner's own best plan even where pure
     * data parallelism simulates faster (the data-parallel floor is off; for
     * tests of a search itself); 0: the floor (pt_planner_report.dp_*). */
    int no_dp_floor;
} pt_planner_opts;

/* Every synchronous kind of the table (built-in or registered). */
#define PT_PLANNER_KINDS_SYNC 0xFFFFFFFFu
/* Most rows of a report's kind comparison (a kind with a policy has one per policy). */
#define PT_PLANNER_KIND_ROWS 24
/* Rows of pipedream's fallback comparison: 2bw and 1f1b-flush. */
#define PT_PLANNER_FALLBACK_ROWS 2

/* One synchronous kind on the chosen partition, as the simulator predicts it. */
typedef struct pt_planner_kind_row {
    int kind;                  /* pt_sched_kind */
    char policy;               /* 'A' or 'B' for kinds with a policy, else 0 */
    int chunks;                /* model chunks per device v (1 but for interleaved rows, whose
                                  partition is the plan's cut afresh into S·v chunks) */
    int allowed;               /* the planner was allowed to choose it (opts->kinds) */
    int refused;               /* the kind's generator refused the plan (note says why) */
    int fits;                  /* every replica fits its device in the simulation */
    double iter_s;             /* simulated iteration time (NAN: not simulated, it does not fit) */
    int64_t peak_memory_bytes; /* largest replica's simulated peak */
    char note[96];
} pt_planner_kind_row;

typedef struct pt_planner_report {
    char planner[16];
    char objective[96];          /* what objective_s measures, in words */
    double objective_s;          /* the planner's own objective for the plan it chose */
    double bound_s;              /* dapple, gpipe: the optimum of the closed form their search
                                    minimises, a lower bound on the simulated time of the
                                    candidates it scores (0: not used) */
    double iter_s;               /* its predicted time of one iteration (global batch), seconds */
    int64_t peak_memory_bytes;   /* largest stage replica memory of the plan (shared model) */
    int64_t needed_memory_bytes; /* on PT_ENOFIT: the smallest memory per device under which
                                    the planner finds a plan (0: unknown) */
    long long evaluated;         /* candidate stages / plans the search evaluated */
    double search_s;             /* wall-clock time of the search */
    char why[PT_PLANNER_WHY_MAX];
    /* dapple and gpipe: every synchronous kind on the plan's partition (the
     * simulator's time and peak memory), chosen_kind the row of the plan's
     * kind (-1: none compared) */
    int kind_count, chosen_kind;
    pt_planner_kind_row kinds[PT_PLANNER_KIND_ROWS];
    /* pipedream: when no weight-stashing plan fits and it fell back
     * (opts->no_fallback 0), the candidates it planned instead (2bw, then
     * 1f1b-flush; each its planner's plan as the simulator runs it; allowed
     * is 1, refused 1 when its planner found no plan, note says why) and
     * fallback_chosen the row of the plan (-1: none, fallback_count 0: no
     * fallback); stash_need_bytes what weight stashing needs per device (a
     * lower bound over every partition when stash_need_proven, else the
     * least over its plans) and device_memory_bytes the smallest device's
     * memory. */
    int fallback_count, fallback_chosen, stash_need_proven;
    int64_t stash_need_bytes, device_memory_bytes;
    pt_planner_kind_row fallback[PT_PLANNER_FALLBACK_ROWS];
    /* The data-parallel floor (pt_planner_run, default objective, planners
     * with pt_planner_info.dp_floor): dp_state PT_DP_COMPARED with dp_iter_s
     * the simulated iteration of pure data parallelism on the same devices
     * (the dp planner's plan), and dp_kept 1 when the plan returned is that
     * plan because the planner's own best was not PT_PLANNER_DP_MARGIN faster;
     * PT_DP_NOFIT when data parallelism does not fit memory (dp_need_bytes
     * per device, why says so); PT_DP_IMPOSSIBLE when it has no plan for
     * another reason (why says which); PT_DP_NOT_COMPARED otherwise. */
    int dp_state, dp_kept;
    double dp_iter_s;
    int64_t dp_need_bytes;
} pt_planner_report;

enum { PT_DP_NOT_COMPARED = 0, PT_DP_COMPARED, PT_DP_NOFIT, PT_DP_IMPOSSIBLE };

/* A planner keeps its own plan over pure data parallelism only when the
 * simulator runs it at least this fraction faster: within the cost model's
 * error the simpler plan wins (docs/planners.md "The data-parallel floor"). */
#define PT_PLANNER_DP_MARGIN 0.01

/* A planner. Called by pt_planner_run with validated input (and the memory
 * limit already applied to topo); returns 0 with *out a new plan (owned by
 * the caller), PT_ENOFIT when no plan of its space fits memory (err says so),
 * or another PT_E* code; on failure *out is NULL. */
typedef int (*pt_planner_fn)(const pt_profile *profile, const pt_topology *topo, int global_batch,
                             const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                             pt_error *err);

typedef struct pt_planner_info {
    const char *name;    /* "dapple", "pipedream", "2bw", "gpipe", "dp", "pipesgd" */
    const char *summary; /* one line for help texts */
    pt_planner_fn run;
    pt_planner_objective paper; /* its paper's objective, or DEFAULT when it has none */
    /* NULL, or what pt_planner_run plans instead when run returns PT_ENOFIT
     * under the default objective without opts->no_fallback (pipedream:
     * PipeDream-2BW or PipeDream-Flush); run's report is its input. */
    pt_planner_fn fallback;
    /* 1: pt_planner_run compares the plan (default objective) with pure data
     * parallelism on the same devices and returns the faster (the report's
     * dp_* fields); 0 for dp and pipesgd themselves. */
    int dp_floor;
} pt_planner_info;

/* The registered planners, in table order; NULL past the end. */
const pt_planner_info *pt_planner_get(int index);
int pt_planner_count(void);
/* The planner called name, or NULL. */
const pt_planner_info *pt_planner_find(const char *name);

/* Zeroed options with the sgd optimizer. NULL-safe. */
void pt_planner_opts_default(pt_planner_opts *opts);

/* Validates what reaches the planner API: a profile with layers, a positive
 * micro-batch and finite non-negative times and bytes; a topology with
 * devices of positive memory and speed on existing nodes and links of
 * positive bandwidth and non-negative latency; a positive global batch;
 * options in range (stages <= layers and devices, micro-batch sizes that
 * divide the global batch). Returns 0 or PT_EINVAL with err naming the field
 * ("profile: layers[3].fwd_ms: -1 is negative"). */
int pt_planner_check_input(const pt_profile *profile, const pt_topology *topo, int global_batch,
                           const pt_planner_opts *opts, pt_error *err);

/* Runs planner `name`: validates the input, applies the memory limit, runs
 * the planner and fills report (may be NULL). When nothing fits memory it
 * returns PT_ENOFIT and err says so and names the smallest memory per device
 * under which the planner would find a plan. opts may be NULL (defaults).
 * On success *out owns a new plan (pt_plan_free); on failure *out is NULL.
 * PT_ENOTFOUND for an unknown name. */
int pt_planner_run(const char *name, const pt_profile *profile, const pt_topology *topo,
                   int global_batch, const pt_planner_opts *opts, pt_plan **out,
                   pt_planner_report *report, pt_error *err);

/* The planners themselves (same contract as pt_planner_fn). */
int pt_planner_dapple(const pt_profile *profile, const pt_topology *topo, int global_batch,
                      const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                      pt_error *err);
/* pt_planner_dapple under --objective dapple (plan_dapple_paper.c): DAPPLE's
 * released planner's space, constants and closed form. Same contract. */
int pt_planner_dapple_paper(const pt_profile *profile, const pt_topology *topo, int global_batch,
                            const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                            pt_error *err);
int pt_planner_pipedream(const pt_profile *profile, const pt_topology *topo, int global_batch,
                         const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                         pt_error *err);
int pt_planner_2bw(const pt_profile *profile, const pt_topology *topo, int global_batch,
                   const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                   pt_error *err);
int pt_planner_gpipe(const pt_profile *profile, const pt_topology *topo, int global_batch,
                     const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                     pt_error *err);
int pt_planner_dp(const pt_profile *profile, const pt_topology *topo, int global_batch,
                  const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                  pt_error *err);
int pt_planner_pipesgd(const pt_profile *profile, const pt_topology *topo, int global_batch,
                       const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                       pt_error *err);

#endif
