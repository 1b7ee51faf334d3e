/* zb-h2: ZB-H2 of Zero Bubble Pipeline Parallelism (Qi et al., ICLR'24),
 * chosen over ZB-V because it keeps one contiguous layer range per device,
 * so it runs on the partitions every planner writes and on the executor's
 * one-chunk workers; ZB-V needs the V-shaped two-chunk placement that the
 * interleaved kind's chunk lists would bring.
 *
 * Stage i runs DAPPLE policy B's 2(S-i)-1 warm-up forwards (filling the
 * start, where ZB-H1 still idles when B > F), then ZB-H1's order: B, W
 * delayed by i micro-batches, F. A stage keeps min(2S-1-i, M) micro-batches
 * in flight, about twice 1F1B's peak. Over one flushed iteration no schedule
 * beats (S-1)F + M(F+B+W) (the last stage's first forward cannot start
 * earlier), and ZB-H1 already reaches it when F = B = W; the paper's
 * near-zero bubble for ZB-H2 also relies on overlapping the next iteration
 * past the optimizer step ("post-validation"), which a synchronous program
 * does not do. What zb-h2 buys here is that bound when the backward halves
 * outweigh the forward (B > F) and M >= 2S, where ZB-H1 misses it
 * (tests/planner/sched_zb_test.c). A recomputing stage runs W right after B
 * (W reads the recomputed activations), with the same warm-up. */
#include "planner/sched_gen.h"

int pt_sched_gen_zb_h2(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        int i = p->workers[w].stage;
        int K = pt_sched_min(2 * (S - i) - 1, M);
        if ((rc = pt_sched_gen_zb(p, w, K, p->workers[w].recompute ? 0 : i)) < 0)
            return rc;
    }
    return 0;
}
