/* pipesgd: Pipe-SGD "with a width of two". Each window t is one iteration
 * (1F1B with S-i warm-up forwards inside it, reading version t). At its end a
 * replicated stage starts the all-reduce of window t's gradients in the
 * background (PT_OPF_ASYNC) and the next iteration computes while it runs;
 * the step at the end of window t+1 waits for it (AR_WAIT) and applies it:
 * version t+2 = version t+1 - lr * g(version t), i.e. w(t+1) = w(t) -
 * lr * g(w(t-1)), one step of staleness. Versions 0 and 1 both hold the
 * initial weights. Usually a single replicated stage (data parallelism); any
 * plan works, and an unreplicated stage keeps the same one-step staleness.
 *
 * Drain: after the last window T-1 the program waits for its all-reduce and
 * applies it (version T+1 = version T - lr * g(version T-1)), so every
 * gradient a run computes is applied before the run ends and nothing is left
 * in flight between runs. A run therefore covers T windows of the recursion
 * above and ends flushed; the next run starts with versions 0 and 1 both
 * equal to the weights this one produced, so its first window's gradient is
 * not stale: a program run back to back is Pipe-SGD with a flush every
 * window_count windows (as 2BW's and PipeDream's programs are). */
#include "planner/sched_gen.h"

int pt_sched_gen_pipesgd(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, M = p->mb_per_window, T = p->window_count, rc;
    p->initial_versions = 2;
    for (int w = 0; w < p->worker_count; w++) {
        int K = pt_sched_min(S - p->workers[w].stage, M);
        pt_sched_gen_begin(p, w);
        for (int t = 0; t < T; t++) {
            int base = t * M;
            for (int k = 0; k < K; k++)
                if ((rc = pt_sched_gen_fwd(p, w, base + k, t, 0)) < 0)
                    return rc;
            for (int j = 0; j < M; j++) {
                if ((rc = pt_sched_gen_bwd(p, w, base + j, t, 0)) < 0)
                    return rc;
                if (K + j < M && (rc = pt_sched_gen_fwd(p, w, base + K + j, t, 0)) < 0)
                    return rc;
            }
            /* start this window's all-reduce before waiting for the previous one, so
             * consecutive all-reduces run back to back and an iteration costs
             * max(compute + step, all-reduce) (Pipe-SGD's timing model) */
            if ((rc = pt_sched_gen_allreduce(p, w, base, base + M, t, PT_OPF_ASYNC)) < 0)
                return rc;
            if (t >= 1 && ((rc = pt_sched_gen_ar_wait(p, w, base - M, base, t - 1)) < 0 ||
                           (rc = pt_sched_gen_opt(p, w, base - M, base, t + 1)) < 0))
                return rc;
        }
        /* the drain: the last window's gradients, applied before the run ends */
        int last = (T - 1) * M;
        if ((rc = pt_sched_gen_ar_wait(p, w, last, last + M, T - 1)) < 0 ||
            (rc = pt_sched_gen_opt(p, w, last, last + M, T + 1)) < 0)
            return rc;
        pt_sched_gen_end(p, w);
    }
    return 0;
}
