/* Scoring plans with the simulator (see plan_score.h). */
#include "planner/plan_score.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/interleave.h"
#include "planner/plan_util.h"

int pu_scorer_init(pu_scorer *sc, const pt_cost *cost)
{
    memset(sc, 0, sizeof *sc);
    sc->cost = cost;
    return pt_sim_new(&sc->sim);
}

void pu_scorer_release(pu_scorer *sc)
{
    if (!sc)
        return;
    pt_program_release(&sc->prog);
    pt_sim_free(&sc->sim);
}

int pu_score(pu_scorer *sc, const pt_plan *plan, double *iter_s, int *fits, int64_t *peak,
             pt_error *err)
{
    pt_sim_result res;
    int rc = pt_sim_plan(sc->sim, plan, sc->cost, NULL, &sc->prog, &res, err);
    if (rc < 0)
        return rc;
    sc->ops += sc->prog.op_count;
    sc->sims++;
    if (iter_s)
        *iter_s = res.iter_s;
    if (fits)
        *fits = res.fits;
    if (peak) {
        int64_t m = 0;
        for (int w = 0; w < res.worker_count; w++)
            if (res.workers[w].peak.total > m)
                m = res.workers[w].peak.total;
        *peak = m;
    }
    return 0;
}

int pu_score_steady(pu_scorer *sc, const pt_plan *plan, double *iter_s, int *fits, pt_error *err)
{
    int S = plan->stage_count, M = plan->microbatch_count;
    pt_sched_opts so = {0};
    so.windows = (2 * S + M - 1) / M + 2;
    pt_sim_result res;
    int rc = pt_sim_plan(sc->sim, plan, sc->cost, &so, &sc->prog, &res, err);
    if (rc < 0)
        return rc;
    sc->ops += sc->prog.op_count;
    sc->sims++;
    *iter_s = res.iter_s;
    *fits = res.fits;
    return 0;
}

int pu_kind_allowed(uint32_t mask, int kind, int own)
{
    if (kind == own)
        return 1;
    if (!pt_sched_kind_has(kind, PT_SCHED_SYNCHRONOUS) || kind < 0 || kind >= 32)
        return 0;
    return (mask >> kind) & 1u;
}

/* The plan to score for a row of v chunks per device: plan itself when it
 * has v already, else *alt, plan cut afresh into S·v chunks (owned by the
 * caller). 0, or the rechunk's PT_E* with err saying why. */
static int row_plan(const pu_scorer *sc, pt_plan *plan, int kind, int v, pt_plan **alt,
                    const pt_plan **use, pt_error *err)
{
    *alt = NULL;
    *use = plan;
    if ((plan->chunks > 1 ? plan->chunks : 1) == v)
        return 0;
    int rc = pt_plan_rechunk(plan, sc->cost, (pt_sched_kind)kind, v, alt, err);
    if (rc == 0)
        *use = *alt;
    return rc;
}

/* Moves src's contents into dst (dst's old contents freed with src). */
static void plan_take(pt_plan *dst, pt_plan **src_p)
{
    pt_plan tmp = *dst;
    *dst = **src_p;
    **src_p = tmp;
    pt_plan_free(src_p);
}

int pu_choose_kind(pu_scorer *sc, pt_plan *plan, uint32_t mask, pt_sched_kind own,
                   pt_planner_report *report, double *iter_s, int64_t *peak)
{
    pt_sched_kind kind0 = plan->schedule;
    char policy0 = plan->policy;
    int best = -1, n = 0, rc = 0;
    int P = pt_plan_rank_count(plan), M = plan->microbatch_count;
    double best_t = INFINITY;
    int64_t best_peak = 0;
    pt_plan *best_alt = NULL; /* the winner's partition when it is not plan's */
    pt_planner_kind_row rows[PT_PLANNER_KIND_ROWS];
    for (int k = 0; k < pt_sched_kind_count() && n < PT_PLANNER_KIND_ROWS; k++) {
        if (!pt_sched_kind_has(k, PT_SCHED_SYNCHRONOUS) || !pt_sched_info_of((pt_sched_kind)k))
            continue;
        int allowed = pu_kind_allowed(mask, k, (int)own);
        if (!allowed && mask == 0)
            continue; /* own kind only: nothing else to compare */
        int npol = pt_sched_kind_has(k, PT_SCHED_OPT_POLICY) ? 2 : 1, vlo, vhi;
        pt_sched_kind_chunks(k, &vlo, &vhi);
        vhi = vhi < vlo + PU_SCORE_CHUNKS_TRIES - 1 ? vhi : vlo + PU_SCORE_CHUNKS_TRIES - 1;
        for (int v = vlo; v <= vhi && n < PT_PLANNER_KIND_ROWS; v++) {
            /* the first chunk count says why a kind does not take the plan;
             * larger ones are tried only where the schedule and layers allow */
            if (v > vlo && (P < 1 || M % P || P * v > plan->layer_count || rows[n - 1].refused))
                break;
            for (int pi = 0; pi < npol && n < PT_PLANNER_KIND_ROWS; pi++) {
                if (npol == 2 && sc->only_policy && (pi ? 'B' : 'A') != sc->only_policy)
                    continue;
                pt_planner_kind_row *r = &rows[n++];
                memset(r, 0, sizeof *r);
                r->kind = k;
                r->policy = npol == 2 ? (pi ? 'B' : 'A') : 0;
                r->chunks = v;
                r->allowed = allowed;
                plan->schedule = (pt_sched_kind)k;
                plan->policy = npol == 2 ? r->policy : policy0;
                pt_error e = {0};
                pt_plan *alt = NULL;
                const pt_plan *use = plan;
                rc = row_plan(sc, plan, k, v, &alt, &use, &e);
                if (rc == PT_EINVAL) {
                    r->refused = 1;
                    r->iter_s = INFINITY;
                    snprintf(r->note, sizeof r->note, "%.95s", e.msg);
                    rc = 0;
                    continue;
                }
                if (rc < 0)
                    goto fail;
                /* a kind that does not fit by the memory model (which the simulator
                 * agrees with) is simulated only while the budget lasts */
                if (sc->ops >= PU_SCORE_OPS_BUDGET &&
                    pt_cost_plan_memory(sc->cost, use, NULL) == PT_ENOFIT) {
                    r->fits = 0;
                    r->iter_s = NAN;
                    r->peak_memory_bytes = pu_plan_peak_memory(sc->cost, use, NULL);
                    snprintf(r->note, sizeof r->note, "does not fit (not simulated)");
                    pt_plan_free(&alt);
                    continue;
                }
                rc = pu_score(sc, use, &r->iter_s, &r->fits, &r->peak_memory_bytes, &e);
                if (rc == PT_EINVAL) {
                    r->refused = 1;
                    r->iter_s = INFINITY;
                    snprintf(r->note, sizeof r->note, "%.95s", e.msg);
                    pt_plan_free(&alt);
                    rc = 0;
                    continue;
                }
                if (rc < 0) {
                    pt_plan_free(&alt);
                    goto fail;
                }
                /* on a tie the planner's own kind, else the earlier row */
                int better = r->iter_s < best_t || (best >= 0 && r->iter_s == best_t &&
                                                    k == (int)own && rows[best].kind != (int)own);
                if (r->allowed && r->fits && better) {
                    best_t = r->iter_s;
                    best_peak = r->peak_memory_bytes;
                    best = n - 1;
                    pt_plan_free(&best_alt);
                    best_alt = alt;
                    alt = NULL;
                }
                pt_plan_free(&alt);
            }
        }
    }
    if (best >= 0) {
        /* a kind without a policy gets 'A', as a parsed plan has */
        plan->schedule = (pt_sched_kind)rows[best].kind;
        plan->policy = rows[best].policy ? rows[best].policy : 'A';
        if (best_alt) {
            best_alt->policy = plan->policy;
            plan_take(plan, &best_alt);
        }
    } else {
        plan->schedule = kind0;
        plan->policy = policy0;
    }
    if (report) {
        report->kind_count = n;
        memcpy(report->kinds, rows, (size_t)n * sizeof *rows);
        report->chosen_kind = best;
    }
    if (best >= 0) {
        if (iter_s)
            *iter_s = best_t;
        if (peak)
            *peak = best_peak;
    }
    return best >= 0 ? 0 : 1;
fail:
    pt_plan_free(&best_alt);
    plan->schedule = kind0;
    plan->policy = policy0;
    return rc;
}

int pu_pick(pu_scorer *sc, pt_plan *const *cand, const double *bound, int n, uint32_t mask,
            pt_sched_kind own, pt_planner_report *report, double *iter_s, int *simulated)
{
    pt_planner_report tmp;
    int best = -1, done = 0;
    double best_t = INFINITY;
    for (int i = 0; i < n; i++) {
        if (i > 0 && sc->ops >= PU_SCORE_OPS_BUDGET)
            break;
        if (mask == 0 && best >= 0 && bound[i] > best_t * (1 + PU_SCORE_BOUND_SLACK))
            break;
        double t = INFINITY;
        tmp.kind_count = 0;
        int rc = pu_choose_kind(sc, cand[i], mask, own, &tmp, &t, NULL);
        done++;
        if (rc < 0)
            return rc;
        if (rc == 0 && t < best_t) {
            best_t = t;
            best = i;
            if (report) {
                report->kind_count = tmp.kind_count;
                report->chosen_kind = tmp.chosen_kind;
                memcpy(report->kinds, tmp.kinds, (size_t)tmp.kind_count * sizeof *tmp.kinds);
            }
        }
    }
    if (simulated)
        *simulated = done;
    if (best < 0) {
        /* the simulator finds no allowed kind fitting: keep the first in its own kind */
        best = 0;
        cand[0]->schedule = own;
        pt_error e = {0};
        int rc = pu_score(sc, cand[0], &best_t, NULL, NULL, &e);
        if (rc < 0)
            return rc;
        if (report)
            report->chosen_kind = -1;
    }
    if (iter_s)
        *iter_s = best_t;
    return best;
}

void pu_why_kinds(pt_planner_report *report)
{
    if (!report || report->kind_count < 1)
        return;
    int fit = 0, allowed = 0;
    for (int i = 0; i < report->kind_count; i++) {
        allowed += report->kinds[i].allowed;
        fit += report->kinds[i].allowed && report->kinds[i].fits && !report->kinds[i].refused;
    }
    if (report->chosen_kind < 0) {
        pu_why(report, "; no allowed kind fits in the simulation, kept the planner's own");
        return;
    }
    const pt_planner_kind_row *c = &report->kinds[report->chosen_kind];
    char v[24] = "";
    if (c->chunks > 1)
        snprintf(v, sizeof v, " v=%d", c->chunks);
    char pol[3] = "";
    if (c->policy)
        snprintf(pol, sizeof pol, "/%c", c->policy);
    pu_why(report, "; schedule %s%s%s: the fastest simulated of %d allowed kind%s (%d fit)",
           pt_sched_kind_name(c->kind), pol, v, allowed, allowed == 1 ? "" : "s", fit);
}
