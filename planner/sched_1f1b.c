/* 1f1b-flush: PipeDream-Flush (PipeDream-2BW paper): stage i runs S-i warm-up
 * forwards, then one-forward-one-backward, and flushes the pipeline at the
 * end of every mini-batch, so there is one weight version and the update is
 * W(t+1) = W(t) - lr * grad f(W(t)). The op order equals dapple with policy A;
 * it is its own kind because its meaning (the PipeDream lineage, no policy)
 * is what users pick it for. */
#include "planner/sched_gen.h"

int pt_sched_gen_1f1b_flush(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        pt_sched_shape q = {S, p->workers[w].stage, M, 'A', 0, 0, 1};
        if ((rc = pt_sched_gen_sync_1f1b(p, w, pt_sched_kind_inflight_1f1b(&q))) < 0)
            return rc;
    }
    return 0;
}
