/* 2bw: PipeDream-2BW. 1F1B without flush (stage i admits S-i micro-batches)
 * over `windows` windows of M micro-batches. Micro-batches of window t read
 * weight version t; their gradients are coalesced and, right after the last
 * backward of window t, applied to the newest version: version t+2 =
 * version t+1 - lr * grad f(version t), i.e. W(t+1) = W(t) - lr * grad
 * f(W(t-1)). Versions 0 and 1 both hold the initial weights. Since M >= S
 * (checked), when version t+2 appears no micro-batch of window t is left in
 * flight, so a stage holds two versions: double buffering. */
#include "planner/sched_gen.h"

int pt_sched_gen_2bw(pt_program *p, pt_error *err)
{
    int S = p->stage_count, M = p->mb_per_window, N = p->mb_count, rc;
    if (M < S)
        return pt_error_set(err, PT_EINVAL,
                            "schedule 2bw: microbatch_count: %d micro-batches per window is fewer "
                            "than the %d stages (2BW needs M >= S for two weight versions)",
                            M, S);
    p->initial_versions = 2;
    for (int w = 0; w < p->worker_count; w++) {
        int K = pt_sched_min(S - p->workers[w].stage, N);
        pt_sched_gen_begin(p, w);
        for (int k = 0; k < K; k++)
            if ((rc = pt_sched_gen_fwd(p, w, k, k / M, 0)) < 0)
                return rc;
        for (int j = 0; j < N; j++) {
            if ((rc = pt_sched_gen_bwd(p, w, j, j / M, 0)) < 0)
                return rc;
            if ((j + 1) % M == 0) {
                int t = j / M;
                if ((rc = pt_sched_gen_grad_sync(p, w, t * M, (t + 1) * M, t, t + 2)) < 0)
                    return rc;
            }
            if (K + j < N && (rc = pt_sched_gen_fwd(p, w, K + j, (K + j) / M, 0)) < 0)
                return rc;
        }
        pt_sched_gen_end(p, w);
    }
    return 0;
}
