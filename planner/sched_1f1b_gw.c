/* 1f1b-gw: 1F1B-flush with gathered weight gradients. The backward is split
 * into B (the input gradient the previous stage waits for) and W (the weight
 * gradient), and every W is put after the stage's last B (the zero-bubble
 * order of planner/sched_zb.c with W delayed by M). The runtime runs those M
 * consecutive W as one pass per layer (runtime/executor.c), so each layer's
 * gradient goes through memory once per iteration instead of once per
 * micro-batch, and the upstream stages get their gradients after B alone, as
 * in zero bubble. The price is memory: every micro-batch keeps its
 * activations until the W at the end, GPipe's M instead of 1F1B's S-i. Since
 * the peak is M anyway, stage i runs DAPPLE policy B's deeper warm-up,
 * min(2(S-i)-1, M) forwards, which hides the wait for the first gradient at
 * no cost in memory. A recomputing stage keeps one micro-batch's recomputed
 * activations, so it runs W right after B (with the same warm-up, which its
 * neighbours' order needs). */
#include "planner/sched_gen.h"

int pt_sched_gen_1f1b_gw(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        int rec = p->workers[w].recompute;
        pt_sched_shape q = {S, p->workers[w].stage, M, 'B', 0, 0, 1};
        if ((rc = pt_sched_gen_zb(p, w, pt_sched_kind_inflight_policy(&q), rec ? 0 : M)) < 0)
            return rc;
    }
    return 0;
}
