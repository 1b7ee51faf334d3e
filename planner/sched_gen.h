/* Internal to planner/: what schedule generators (planner/sched_*.c) share.
 * A generator appends each worker's ops in turn: call pt_sched_gen_begin(w),
 * emit its ops, then pt_sched_gen_end(w). For generators only: planner/sched_*.c
 * and the generators of kinds registered at run time (pt_sched_register). */
#ifndef PT_PLANNER_SCHED_GEN_H
#define PT_PLANNER_SCHED_GEN_H

#include "planner/schedule.h"

/* The generators of the built-in kinds (one per file, named in PT_SCHED_KIND_LIST). */
#define PT_SCHED_GEN_DECL_(ID, name, flags, inflight, versions, hold, cmin, cmax, generator,       \
                           summary)                                                                \
    int generator(pt_program *prog, pt_error *err);
PT_SCHED_KIND_LIST(PT_SCHED_GEN_DECL_)
#undef PT_SCHED_GEN_DECL_

void pt_sched_gen_begin(pt_program *prog, int w);
void pt_sched_gen_end(pt_program *prog, int w);

/* Appends one op (growing the array); 0 or PT_ENOMEM. */
int pt_sched_gen_op(pt_program *prog, int kind, int flags, int mb, int mb_end, int version,
                    int peer, int row_lo, int row_hi, int64_t bytes);

/* RECV_ACT from every overlapping replica of the previous stage, FWD of the
 * worker's rows of mb, SEND_ACT to every overlapping replica of the next. */
int pt_sched_gen_fwd(pt_program *prog, int w, int mb, int version, int flags);
/* RECV_GRAD from the next stage's overlapping replicas, RECOMPUTE when the
 * worker recomputes, BWD, SEND_GRAD to the previous stage's replicas. */
int pt_sched_gen_bwd(pt_program *prog, int w, int mb, int version, int flags);
/* The same with the backward split (zero-bubble kinds): BWD_INPUT in the
 * BWD's place, and the BWD_WEIGHT of mb on its own, for a later slot. */
int pt_sched_gen_bwd_input(pt_program *prog, int w, int mb, int version, int flags);
int pt_sched_gen_bwd_weight(pt_program *prog, int w, int mb, int version, int flags);
/* The zero-bubble order of one worker (planner/sched_zb.c): K warm-up
 * forwards, then for j = 0.., B_j, W_{j-lag} once j >= lag, F_{K+j} while
 * any is left; then the W still owed; then the all-reduce and the step. */
int pt_sched_gen_zb(pt_program *prog, int w, int K, int lag);
/* ALLREDUCE / AR_WAIT of [mb, mb_end) on a replicated stage; nothing on a
 * stage with one replica. */
int pt_sched_gen_allreduce(pt_program *prog, int w, int mb, int mb_end, int version, int flags);
int pt_sched_gen_ar_wait(pt_program *prog, int w, int mb, int mb_end, int version);
/* The gradient synchronisation and step of [mb, mb_end), emitted right after
 * the BWD that completes those gradients: on a replicated stage one
 * asynchronous ALLREDUCE per gradient bucket (last layer first, hooked to that
 * BWD, so it overlaps the rest of the backward), one AR_WAIT per bucket, then
 * the OPT_STEP producing `produce`; with prog->bucket_bytes <= 0 one
 * synchronous ALLREDUCE instead. version: the one the covered BWDs read. */
int pt_sched_gen_grad_sync(pt_program *prog, int w, int mb, int mb_end, int version, int produce);
/* OPT_STEP applying [mb, mb_end) and producing `version`. */
int pt_sched_gen_opt(pt_program *prog, int w, int mb, int mb_end, int version);

/* The synchronous 1F1B order shared by dapple and 1f1b-flush: K warm-up
 * forwards, then B0 F_K B1 F_K+1 ..., then the remaining backwards; then the
 * all-reduce of [0, M) and the step producing version 1. */
int pt_sched_gen_sync_1f1b(pt_program *prog, int w, int K);

/* Sizes prog->host_ops for prog->op_count ops (hosted kinds fill it after
 * their last op); 0 or PT_ENOMEM. */
int pt_sched_gen_host_ops(pt_program *prog);

static inline int pt_sched_min(int a, int b)
{
    return a < b ? a : b;
}

#endif
