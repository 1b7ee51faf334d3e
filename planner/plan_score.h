/* Scoring plans with the simulator, for the planners whose closed forms only
 * bound what the simulator charges (dapple, gpipe): the final candidates of
 * a search are simulated, the fastest is kept, and its partition is compared
 * under every synchronous schedule kind of the kind table (the kinds the
 * planner may choose among, opts->kinds). Internal to planner/. */
#ifndef PT_PLANNER_PLAN_SCORE_H
#define PT_PLANNER_PLAN_SCORE_H

#include <stdint.h>

#include "planner/cost.h"
#include "planner/planner.h"
#include "planner/schedule.h"
#include "planner/simulate.h"

/* Ops the pool of final candidates may simulate in all (about 15 M ops per
 * second of CPU): past it only the first candidates are simulated, so a
 * 64-stage plan of 1,536 micro-batches still plans in well under a second. */
#define PU_SCORE_OPS_BUDGET 3000000LL

/* A simulator with buffers reused across candidates. */
typedef struct pu_scorer {
    const pt_cost *cost;
    pt_sim *sim;
    pt_program prog;
    long long ops;    /* ops simulated so far */
    long long sims;   /* simulations run */
    char only_policy; /* 'A' or 'B': kinds with a policy are scored with it alone; 0: both */
} pu_scorer;

/* 0 or PT_ENOMEM. */
int pu_scorer_init(pu_scorer *sc, const pt_cost *cost);
void pu_scorer_release(pu_scorer *sc); /* NULL-safe */

/* Simulates plan under its own kind with the default buckets (what the
 * runtime runs): 0 with *iter_s, *fits and *peak (largest replica's peak
 * total; each may be NULL); PT_EINVAL when the kind's generator refuses the
 * plan (err says why), another PT_E* on failure. */
int pu_score(pu_scorer *sc, const pt_plan *plan, double *iter_s, int *fits, int64_t *peak,
             pt_error *err);

/* pu_score for an asynchronous plan that runs no round-robin rounds, over
 * ceil(2S/M) + 2 windows: the generator's own count for reaching the steady
 * state without its floor of PT_SCHED_MIN_WINDOWS, so with M >= 2S three
 * windows instead of four, the same steady window after the warm-up one, at
 * three quarters of the cost (2bw: planner_2bw_test checks the time against
 * the default simulation). Same results and errors as pu_score. */
int pu_score_steady(pu_scorer *sc, const pt_plan *plan, double *iter_s, int *fits, pt_error *err);

/* Whether the kind is in the mask (PT_PLANNER_KINDS_SYNC: every synchronous
 * kind); own is always allowed. */
int pu_kind_allowed(uint32_t mask, int kind, int own);

/* Chunk counts a kind choice tries per kind that takes chunks (the table's
 * chunks_min and up): each is one more partition cut and simulated. */
#define PU_SCORE_CHUNKS_TRIES 3

/* Compares plan's partition under every synchronous kind of the table that
 * has a generator (each policy of a kind with PT_SCHED_OPT_POLICY; a kind
 * with chunks once per v from its chunks_min, up to PU_SCORE_CHUNKS_TRIES
 * values while M is a multiple of the ranks and S·v <= layers, the layers
 * cut afresh into S·v chunks on the same devices, pt_plan_rechunk; with mask
 * 0 only own's rows), filling
 * report->kinds (may be NULL), and sets plan's kind and policy to the fastest
 * allowed one that fits memory in the simulation (on a tie own's row, else
 * the earlier one: table order, policy A first, fewer chunks first) — an
 * interleaved winner replaces plan's stages with its S·v chunks and sets
 * plan->chunks — leaving it unchanged when none does. *iter_s
 * and *peak (may be NULL) receive that row's figures. Returns 0, 1 when no
 * allowed row fits, or a negative PT_E* code. */
int pu_choose_kind(pu_scorer *sc, pt_plan *plan, uint32_t mask, pt_sched_kind own,
                   pt_planner_report *report, double *iter_s, int64_t *peak);

/* The closed forms the planners order their candidates by are within a few
 * per cent of the simulated time, mostly below it but not always (up to 16 %
 * above it on the shipped profiles, policy B plans whose transfers the
 * critical path charges in full): a candidate whose closed form exceeds the
 * best simulated time by more than this fraction is not simulated. */
#define PU_SCORE_BOUND_SLACK 0.20

/* Picks the best of the final candidates cand[0..n), ordered by their closed
 * form bound[] (ascending): each is compared under the kinds of mask
 * (pu_choose_kind) until the ops budget is spent (the first is always
 * compared) or, when only the planner's own kind is allowed, until the
 * bound passes the best simulated time by PU_SCORE_BOUND_SLACK (other kinds
 * can beat the own kind's bound). The winner's kind and policy are set, its
 * rows copied to report (may be NULL); *iter_s its simulated time and
 * *simulated the candidates compared. Returns the winner's index (0, with
 * the own kind's time, when no candidate fits in the simulation), or a
 * negative PT_E* code. */
int pu_pick(pu_scorer *sc, pt_plan *const *cand, const double *bound, int n, uint32_t mask,
            pt_sched_kind own, pt_planner_report *report, double *iter_s, int *simulated);

/* Appends the choice to report->why ("schedule zb-h1: the fastest simulated
 * of 8 allowed kinds (7 fit)"); the rows themselves are report->kinds.
 * NULL-safe. */
void pu_why_kinds(pt_planner_report *report);

#endif
