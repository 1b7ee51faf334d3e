/* dapple: DAPPLE's early-backward schedule (DAPPLE §III-B, §V-C). Stage i
 * injects K_i forwards, then alternates one backward and one forward, then
 * drains; a flush ends the iteration. Policy A, K_i = min(S-i, M), keeps the
 * fewest activations; policy B, K_i = min(2(S-i)-1, M), runs further ahead to
 * hide cross-stage communication when it is slow relative to compute. */
#include "planner/sched_gen.h"

int pt_sched_gen_dapple(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        /* K_i is the table's in-flight formula (protocol/sched_kind.h): the
         * warm-up depth and the cost model's in-flight count are one formula */
        pt_sched_shape q = {S, p->workers[w].stage, M, p->policy, 0, 0, 1};
        if ((rc = pt_sched_gen_sync_1f1b(p, w, pt_sched_kind_inflight_policy(&q))) < 0)
            return rc;
    }
    return 0;
}
