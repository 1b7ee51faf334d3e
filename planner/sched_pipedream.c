/* pipedream: PipeDream's asynchronous 1F1B over a run of N = M * windows
 * micro-batches (warm-up, steady state, drain), no flush. Stage i admits
 * S-i micro-batches, then alternates backward and forward; every backward is
 * followed by the all-reduce of a replicated stage and an optimizer step, so
 * stage i's weights advance one version per micro-batch.
 *
 * Weight stashing: a micro-batch's FWD, RECOMPUTE and BWD on a stage read the
 * same version (PT_OPF_STASH: the micro-batch holds the array its forward
 * read), so a stage holds one version per in-flight micro-batch, the newest
 * of them the live weights: S-i versions. Without vertical sync a micro-batch reads, on each stage,
 * the newest version there when its forward starts. With vertical sync it
 * reads on every stage the version that was newest on stage 0 when it entered
 * the pipeline (PipeDream's public runtime never implemented this).
 *
 * Every backward is followed by its step, so a run applies every gradient it
 * computes before it ends. A run starts from one version (the weights the
 * previous run left), so programs run back to back are PipeDream with a
 * flush every window_count windows: the first micro-batches of a run read
 * those weights, not versions stashed in the previous run. */
#include "planner/sched_gen.h"

/* Version the forward of micro-batch k reads on a stage that admits K:
 * backwards 0..k-K (each followed by a step) precede it in 1F1B order. */
static int newest_at_fwd(int k, int K)
{
    return k - K + 1 > 0 ? k - K + 1 : 0;
}

int pt_sched_gen_pipedream(pt_program *p, pt_error *err)
{
    (void)err;
    int S = p->stage_count, N = p->mb_count, rc;
    int K0 = pt_sched_min(S, N);
    for (int w = 0; w < p->worker_count; w++) {
        int K = pt_sched_min(S - p->workers[w].stage, N);
#define VERSION(k) (p->vertical_sync ? newest_at_fwd((k), K0) : newest_at_fwd((k), K))
        pt_sched_gen_begin(p, w);
        for (int k = 0; k < K; k++)
            if ((rc = pt_sched_gen_fwd(p, w, k, VERSION(k), PT_OPF_STASH)) < 0)
                return rc;
        for (int j = 0; j < N; j++) {
            if ((rc = pt_sched_gen_bwd(p, w, j, VERSION(j), PT_OPF_STASH)) < 0 ||
                (rc = pt_sched_gen_grad_sync(p, w, j, j + 1, VERSION(j), j + 1)) < 0)
                return rc;
            if (K + j < N && (rc = pt_sched_gen_fwd(p, w, K + j, VERSION(K + j), PT_OPF_STASH)) < 0)
                return rc;
        }
#undef VERSION
        pt_sched_gen_end(p, w);
    }
    return 0;
}
