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
        int i = p->workers[w].stage;
        int K = p->policy == 'B' ? pt_sched_min(2 * (S - i) - 1, M) : pt_sched_min(S - i, M);
        if ((rc = pt_sched_gen_sync_1f1b(p, w, K)) < 0)
            return rc;
    }
    return 0;
}
