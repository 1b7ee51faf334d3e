/* pipedream: PipeDream's asynchronous 1F1B over a run of N = M * windows
 * micro-batches (warm-up, steady state, drain), no flush. A worker runs its
 * micro-batches in order: K warm-up forwards, then it alternates backward and
 * forward; every backward is followed by the all-reduce of a replicated stage
 * and an optimizer step, so the worker's weights advance one version per
 * micro-batch it runs.
 *
 * Replication. Split-concat (every replica runs every micro-batch's share of
 * rows): a stage i worker admits K = S-i micro-batches and a replicated stage
 * all-reduces after every backward. Round-robin (PipeDream's runtime,
 * prog->round_robin): replica j of a stage of r runs micro-batches
 * j, j+r, j+2r, ... whole, admits K = ceil(R_i / r) of them (R_i the replicas
 * of stages i.., pt_plan_rr_inflight: PipeDream's (R_i - 1) / r warm-up
 * micro-batches plus the one in flight), and after its t-th backward joins the
 * all-reduce of round t, micro-batches [t·r, (t+1)·r), one from each replica,
 * then steps: the stage synchronises once per round and every step applies
 * the average of r micro-batches' gradients (runtime/executor.c).
 *
 * Weight stashing: a micro-batch's FWD, RECOMPUTE and BWD on a stage read the
 * same version (PT_OPF_STASH: the micro-batch holds the array its forward
 * read), so a worker holds one version per micro-batch in flight, the newest
 * of them the live weights: K versions. Without vertical sync a micro-batch
 * reads, on each stage, the newest version there when its forward starts.
 * With vertical sync (split-concat only) it reads on every stage the version
 * that was newest on stage 0 when it entered the pipeline (PipeDream's public
 * runtime never implemented this).
 *
 * Every backward is followed by its step, so a run applies every gradient it
 * computes before it ends. A run starts from one version (the weights the
 * previous run left), so programs run back to back are PipeDream with a
 * flush every window_count windows: the first micro-batches of a run read
 * those weights, not versions stashed in the previous run. */
#include "planner/sched_gen.h"

/* Version the forward of the worker's k-th micro-batch reads on a worker that
 * admits K: its backwards 0..k-K (each followed by a step) precede it in 1F1B
 * order. */
static int newest_at_fwd(int k, int K)
{
    return k - K + 1 > 0 ? k - K + 1 : 0;
}

/* The micro-batches a worker runs: n of them, the k-th being k·step + first;
 * K admitted at once. */
typedef struct pd_turns {
    int first, step, n, K;
} pd_turns;

static pd_turns turns_of(const pt_program *p, int w)
{
    const pt_worker *x = &p->workers[w];
    int S = p->stage_count, N = p->mb_count;
    pd_turns t = {0, 1, N, pt_sched_min(S - x->stage, N)};
    if (p->round_robin) {
        int r = x->replica_count, R = p->worker_count - p->stage_worker[x->stage];
        t.first = x->replica;
        t.step = r;
        t.n = N / r; /* the build makes N a multiple of r */
        t.K = pt_sched_min((R + r - 1) / r, t.n);
    }
    return t;
}

static int gen_worker(pt_program *p, int w, int K0)
{
    pd_turns t = turns_of(p, w);
    int rc, r = t.step;
#define MB(k)      ((k)*t.step + t.first)
#define VERSION(k) (p->vertical_sync ? newest_at_fwd(MB(k), K0) : newest_at_fwd((k), t.K))
    pt_sched_gen_begin(p, w);
    for (int k = 0; k < t.K; k++)
        if ((rc = pt_sched_gen_fwd(p, w, MB(k), VERSION(k), PT_OPF_STASH)) < 0)
            return rc;
    for (int j = 0; j < t.n; j++) {
        /* round j of the stage: one micro-batch of each of its r replicas */
        int lo = p->round_robin ? j * r : MB(j), hi = p->round_robin ? lo + r : lo + 1;
        if ((rc = pt_sched_gen_bwd(p, w, MB(j), VERSION(j), PT_OPF_STASH)) < 0 ||
            (rc = pt_sched_gen_grad_sync(p, w, lo, hi, VERSION(j), j + 1)) < 0)
            return rc;
        if (t.K + j < t.n &&
            (rc = pt_sched_gen_fwd(p, w, MB(t.K + j), VERSION(t.K + j), PT_OPF_STASH)) < 0)
            return rc;
    }
#undef VERSION
#undef MB
    pt_sched_gen_end(p, w);
    return 0;
}

int pt_sched_gen_pipedream(pt_program *p, pt_error *err)
{
    (void)err;
    int K0 = pt_sched_min(p->stage_count, p->mb_count);
    for (int w = 0; w < p->worker_count; w++) {
        int rc = gen_worker(p, w, K0);
        if (rc < 0)
            return rc;
    }
    return 0;
}
