/* gpipe: every forward of the iteration, then every backward (last micro-batch
 * first), then the all-reduce of a replicated stage and one optimizer step.
 * A recomputing stage keeps only its inputs and re-runs each forward just
 * before its backward (RECOMPUTE, emitted by pt_sched_gen_bwd). */
#include "planner/sched_gen.h"

int pt_sched_gen_gpipe(pt_program *p, pt_error *err)
{
    (void)err;
    int M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        pt_sched_gen_begin(p, w);
        for (int k = 0; k < M; k++)
            if ((rc = pt_sched_gen_fwd(p, w, k, 0, 0)) < 0)
                return rc;
        for (int k = M - 1; k >= 0; k--)
            if ((rc = pt_sched_gen_bwd(p, w, k, 0, 0)) < 0)
                return rc;
        if ((rc = pt_sched_gen_grad_sync(p, w, 0, M, 0, 1)) < 0)
            return rc;
        pt_sched_gen_end(p, w);
    }
    return 0;
}
