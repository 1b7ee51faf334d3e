/* What pt_planner_run composes around the planners, so that no planner calls
 * another (planner/plan_compose.h): pipedream's fallback when weight stashing
 * does not fit, and the data-parallel floor every planner's plan is held to. */
#include "planner/plan_compose.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_score.h"
#include "planner/plan_util.h"
#include "planner/simulate.h"

/* The fallback when no weight-stashing plan fits, from PipeDream's authors'
 * PipeDream-2BW paper: PipeDream-2BW keeps two weight versions,
 * PipeDream-Flush one. Each
 * candidate is its own planner's search, not a new one: 2bw's search for
 * 2bw; dapple's for 1f1b-flush, whose op order is dapple's with policy A
 * (sched_1f1b.c), its plan relabelled and recomputing where the flush's
 * in-flight micro-batches need it. Both are simulated; the faster one that
 * fits is kept. */
enum { FB_2BW, FB_FLUSH };
static const pt_sched_kind fb_kind[PT_PLANNER_FALLBACK_ROWS] = {PT_SCHED_2BW, PT_SCHED_1F1B_FLUSH};

/* Plans candidate c into *plan and fills row; 0 (row->refused when its
 * planner found none, row->fits when it fits in the simulation), or
 * PT_ENOMEM. *need receives its planner's memory need on PT_ENOFIT, e
 * (not NULL) the reason when it has no plan. */
static int fb_candidate(int c, const pt_profile *profile, const pt_topology *topo, int global_batch,
                        const pt_planner_opts *opts, pu_scorer *sc, pt_plan **plan,
                        pt_planner_report *rep, pt_planner_kind_row *row, int64_t *need,
                        pt_error *e)
{
    pt_planner_opts o = *opts;
    o.kinds = 0;
    o.objective = PT_OBJECTIVE_DEFAULT;
    o.dapple_policy = c == FB_FLUSH ? 'A' : 0; /* 1f1b-flush runs policy A's op order */
    *row = (pt_planner_kind_row){.kind = fb_kind[c], .allowed = 1, .iter_s = NAN};
    int rc = c == FB_2BW ? pt_planner_2bw(profile, topo, global_batch, &o, plan, rep, e)
                         : pt_planner_dapple(profile, topo, global_batch, &o, plan, rep, e);
    if (rc == PT_ENOMEM)
        return rc;
    if (rc < 0) {
        row->refused = 1;
        if (rc == PT_ENOFIT)
            *need = rep->needed_memory_bytes;
        snprintf(row->note, sizeof row->note, "%.95s", e->msg);
        return 0;
    }
    int ok = 1;
    const pt_planner_kind_row *same = NULL;
    if (c == FB_FLUSH) {
        int S = (*plan)->stage_count, changed = 0;
        uint8_t *was = malloc((size_t)S);
        if (!was)
            return PT_ENOMEM;
        for (int s = 0; s < S; s++)
            was[s] = (uint8_t)(*plan)->stages[s].recompute;
        (*plan)->schedule = PT_SCHED_1F1B_FLUSH;
        (*plan)->policy = 'A';
        ok = pu_recompute_where_needed(sc->cost, *plan);
        for (int s = 0; s < S; s++)
            changed |= was[s] != (*plan)->stages[s].recompute;
        free(was);
        /* dapple simulated this partition with these recomputing stages under
         * policy A, the same program: its figures are this plan's */
        for (int k = 0; k < rep->kind_count && !changed; k++)
            if (rep->kinds[k].kind == PT_SCHED_DAPPLE && rep->kinds[k].policy == 'A' &&
                !rep->kinds[k].refused && isfinite(rep->kinds[k].iter_s))
                same = &rep->kinds[k];
    }
    double t = NAN;
    int fits = 0;
    int64_t peak = 0;
    if (same) {
        t = same->iter_s;
        fits = same->fits;
        peak = same->peak_memory_bytes;
    } else if (c == FB_2BW) {
        /* the 2bw planner simulated its plan (the default windows) and kept it
         * only fitting; its peak is the memory model's, which the simulator's
         * equals */
        t = rep->iter_s;
        fits = 1;
        peak = rep->peak_memory_bytes;
    } else if ((rc = pu_score(sc, *plan, &t, &fits, &peak, e)) < 0) {
        if (rc == PT_ENOMEM)
            return rc;
        row->refused = 1;
        snprintf(row->note, sizeof row->note, "%.95s", e->msg);
        pt_plan_free(plan);
        return 0;
    }
    row->iter_s = t;
    row->peak_memory_bytes = peak;
    row->fits = fits && ok;
    int S = (*plan)->stage_count, nrc = 0;
    for (int s = 0; s < S; s++)
        nrc += (*plan)->stages[s].recompute;
    snprintf(row->note, sizeof row->note, "%d stage%s, micro-batch %d, %d recompute%s", S,
             S > 1 ? "s" : "", (*plan)->microbatch_size, nrc, row->fits ? "" : ", does not fit");
    return 0;
}

static int fallback(const pt_profile *profile, const pt_topology *topo, int global_batch,
                    const pt_planner_opts *opts, const pt_cost *cost, int64_t stash_need,
                    int proven, const char *stash_msg, pt_plan **out, pt_planner_report *report,
                    pt_error *err)
{
    pt_plan *cand[PT_PLANNER_FALLBACK_ROWS] = {NULL, NULL};
    pt_planner_kind_row rows[PT_PLANNER_FALLBACK_ROWS];
    pt_error errs[PT_PLANNER_FALLBACK_ROWS] = {{0}, {0}};
    /* each candidate's own report (why, evaluated); large, so not on the stack */
    pt_planner_report *reps = calloc(PT_PLANNER_FALLBACK_ROWS, sizeof *reps);
    int64_t need = stash_need;
    pu_scorer sc;
    int rc = reps && pu_scorer_init(&sc, cost) == 0 ? 0 : PT_ENOMEM;
    if (rc < 0) {
        free(reps);
        return pt_error_set(err, rc, "pipedream: out of memory");
    }
    int best = -1;
    for (int c = 0; c < PT_PLANNER_FALLBACK_ROWS && rc == 0; c++) {
        int64_t n = 0;
        rc = fb_candidate(c, profile, topo, global_batch, opts, &sc, &cand[c], &reps[c], &rows[c],
                          &n, &errs[c]);
        if (n > 0 && n < need)
            need = n;
        if (rc == 0 && rows[c].fits && (best < 0 || rows[c].iter_s < rows[best].iter_s))
            best = c;
    }
    pu_scorer_release(&sc);
    char nb[32], mb[32];
    int64_t devmem = pu_topology_min_memory(topo);
    pu_bytes_str(stash_need, nb, sizeof nb);
    pu_bytes_str(devmem, mb, sizeof mb);
    if (rc == 0 && best < 0) {
        char detail[4 * PT_ERROR_MAX];
        snprintf(detail, sizeof detail,
                 "weight stashing needs %s%s per device (%s), and neither memory-lean kind fits: "
                 "2bw: %s; 1f1b-flush: %s",
                 proven ? ">= " : "", nb, stash_msg,
                 rows[FB_2BW].refused ? errs[FB_2BW].msg : rows[FB_2BW].note,
                 rows[FB_FLUSH].refused ? errs[FB_FLUSH].msg : rows[FB_FLUSH].note);
        rc = pu_error_nofit(err, report, "pipedream", devmem, need, detail);
    } else if (rc < 0) {
        rc = pt_error_set(err, rc, "pipedream: out of memory");
    }
    if (rc == 0 && report) {
        pt_planner_report *r = &reps[best];
        double search = report->search_s;
        pu_report_begin(report, "pipedream",
                        "simulated iteration time of the memory-lean kind (weight stashing does "
                        "not fit)");
        report->objective_s = rows[best].iter_s;
        report->iter_s = rows[best].iter_s;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, cand[best], NULL);
        report->evaluated = reps[FB_2BW].evaluated + reps[FB_FLUSH].evaluated;
        report->search_s = search;
        report->stash_need_bytes = stash_need;
        report->stash_need_proven = proven;
        report->device_memory_bytes = devmem;
        report->fallback_count = PT_PLANNER_FALLBACK_ROWS;
        report->fallback_chosen = best;
        memcpy(report->fallback, rows, sizeof rows);
        pu_why(report,
               "weight stashing needs %s%s per device (devices have %s), so it planned %s "
               "instead (PipeDream-%s):",
               proven ? ">= " : "", nb, mb, pt_sched_kind_name(fb_kind[best]),
               best == FB_2BW ? "2BW" : "Flush");
        for (int c = 0; c < PT_PLANNER_FALLBACK_ROWS; c++) {
            char pb[32];
            if (rows[c].refused)
                pu_why(report, "%s %s found no plan", c ? ";" : "", pt_sched_kind_name(fb_kind[c]));
            else
                pu_why(report, "%s %s simulated %.3f ms, peak %s%s", c ? ";" : "",
                       pt_sched_kind_name(fb_kind[c]), rows[c].iter_s * 1e3,
                       pu_bytes_str(rows[c].peak_memory_bytes, pb, sizeof pb),
                       rows[c].fits ? "" : " (does not fit)");
        }
        pu_why(report, ". %s's search: %s", best == FB_2BW ? "2bw" : "dapple", r->why);
    }
    if (rc == 0) {
        *out = cand[best];
        cand[best] = NULL;
    }
    for (int c = 0; c < PT_PLANNER_FALLBACK_ROWS; c++)
        pt_plan_free(&cand[c]);
    free(reps);
    return rc;
}

int pc_pipedream_fallback(const pt_profile *profile, const pt_topology *topo, int global_batch,
                          const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                          pt_error *err)
{
    double t0 = pt_clock_s(), searched = report->search_s;
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    int proven = report->stash_need_proven;
    const char *msg = proven ? "whatever the partition some stage holds that much"
                             : "the least over its plans, recomputing where that fits";
    report->search_s = 0;
    rc = fallback(profile, topo, global_batch, opts, cost, report->stash_need_bytes, proven, msg,
                  out, report, err);
    report->search_s = searched + pt_clock_s() - t0;
    pt_cost_free(&cost);
    return rc;
}

/* Pure data parallelism on the same devices: 0 with *dp and dprep, or the dp
 * planner's error (PT_ENOFIT: it does not fit; another code: no plan). */
static int plan_dp(const pt_profile *profile, const pt_topology *topo, int global_batch,
                   const pt_planner_opts *opts, pt_plan **dp, pt_planner_report *dprep,
                   pt_error *derr)
{
    pt_planner_opts o = *opts;
    o.kinds = 0;
    o.stages = 0;
    return pt_planner_dp(profile, topo, global_batch, &o, dp, dprep, derr);
}

/* The report of the plan returned being data parallelism's, the planner's
 * own best (own_s, NAN: none fits) said in front of the dp planner's why. */
static void take_dp(pt_planner_report *report, const pt_planner_report *dprep, double own_s,
                    const char *own_why)
{
    char planner[sizeof report->planner], objective[sizeof report->objective];
    snprintf(planner, sizeof planner, "%s", report->planner);
    snprintf(objective, sizeof objective, "%s", report->objective);
    double search = report->search_s;
    long long evaluated = report->evaluated;
    *report = *dprep;
    snprintf(report->planner, sizeof report->planner, "%s", planner);
    snprintf(report->objective, sizeof report->objective, "%s", objective);
    report->search_s = search;
    report->evaluated = evaluated;
    report->why[0] = '\0';
    if (isnan(own_s))
        pu_why(report, "pure data parallelism: nothing of this planner's own space fits (%.200s). ",
               own_why);
    else
        pu_why(report,
               "pure data parallelism: this planner's best plan simulates %.3f ms, data "
               "parallelism %.3f ms (the plan must be %.0f %% faster to be kept). ",
               own_s * 1e3, dprep->iter_s * 1e3, PT_PLANNER_DP_MARGIN * 100);
    pu_why(report, "dp: %s", dprep->why);
    report->dp_state = PT_DP_COMPARED;
    report->dp_kept = 1;
    report->dp_iter_s = dprep->iter_s;
}

int pc_dp_floor(const pt_profile *profile, const pt_topology *topo, int global_batch,
                const pt_planner_opts *opts, int rc, pt_plan **out, pt_planner_report *report,
                pt_error *err)
{
    pt_planner_report *dprep = malloc(sizeof *dprep);
    if (!dprep)
        return pt_error_set(err, PT_ENOMEM, "planner: out of memory");
    pt_plan *dp = NULL;
    pt_error derr = {0};
    int drc = plan_dp(profile, topo, global_batch, opts, &dp, dprep, &derr);
    if (drc == PT_ENOMEM) {
        free(dprep);
        return pt_error_set(err, drc, "planner: out of memory");
    }
    char nb[32];
    if (drc < 0) {
        report->dp_state = drc == PT_ENOFIT ? PT_DP_NOFIT : PT_DP_IMPOSSIBLE;
        report->dp_need_bytes = drc == PT_ENOFIT ? dprep->needed_memory_bytes : 0;
        if (rc == 0 && drc == PT_ENOFIT)
            pu_why(report,
                   "; data parallelism does not fit: one replica of the whole model "
                   "needs %s per device",
                   pu_bytes_str(report->dp_need_bytes, nb, sizeof nb));
        else if (rc == 0)
            pu_why(report, "; no data-parallel plan to compare: %.300s", derr.msg);
        free(dprep);
        return rc;
    }
    report->dp_state = PT_DP_COMPARED;
    report->dp_iter_s = dprep->iter_s;
    if (rc == PT_ENOFIT && opts->stages > 0) { /* the stage count asked for has no plan */
        free(dprep);
        pt_plan_free(&dp);
        return rc;
    }
    /* a stage count the user asked for is kept; otherwise the faster wins */
    int own = rc == 0 &&
              (opts->stages > 0 || report->iter_s <= dprep->iter_s * (1 - PT_PLANNER_DP_MARGIN));
    if (rc == 0 && own) {
        pu_why(report, "; %.2fx the speed of data parallelism (%.3f ms)",
               dprep->iter_s / report->iter_s, dprep->iter_s * 1e3);
    } else if (rc == 0 || rc == PT_ENOFIT) {
        take_dp(report, dprep, rc == 0 ? report->iter_s : NAN, rc == 0 ? "" : err->msg);
        pt_plan_free(out);
        *out = dp;
        dp = NULL;
        rc = 0;
    }
    pt_plan_free(&dp);
    free(dprep);
    return rc;
}
