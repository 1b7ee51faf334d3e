/* zb-h1: ZB-H1 of Zero Bubble Pipeline Parallelism (Qi et al., ICLR'24).
 * Stage i runs 1F1B's S-i warm-up forwards, then 1F1B with the backward
 * split, its W delayed by i micro-batches: the B chain that the earlier
 * stages wait for runs first, and the W owed fill the cool-down. A stage
 * keeps at most min(S, M) micro-batches in flight, the peak 1F1B reaches on
 * stage 0, so the peak over all stages equals 1F1B's; with equal stages and
 * no communication the bubble is (S-1)(F+B-W) against 1F1B's (S-1)(F+B+W)
 * (B, W: the halves of the backward), about a third when F = B = W. */
#include "planner/sched_gen.h"

int pt_sched_gen_zb_h1(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        pt_sched_shape q = {S, p->workers[w].stage, M, 'A', 0, 0, 1};
        /* A recomputing stage cannot delay W: W reads the recomputed
         * activations, which recomputation keeps for one micro-batch at a
         * time. It runs W right after B in 1F1B's order. */
        rc = p->workers[w].recompute
                 ? pt_sched_gen_zb(p, w, pt_sched_kind_inflight_1f1b(&q), 0)
                 : pt_sched_gen_zb(p, w, pt_sched_kind_inflight_1f1b(&q), q.stage);
        if (rc < 0)
            return rc;
    }
    return 0;
}
