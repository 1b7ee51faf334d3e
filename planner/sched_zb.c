/* The zero-bubble order (Qi et al., "Zero Bubble Pipeline Parallelism",
 * ICLR'24) shared by zb-h1 and zb-h2: the backward is split into B (the input
 * gradient, which the previous stage waits for) and W (the weight gradient,
 * which nothing downstream waits for). A worker runs K warm-up forwards, then
 * B_j, W_{j-lag} (once j >= lag), F_{K+j}, ...; the W it still owes after its
 * last B fill the cool-down, where 1F1B idles waiting for gradients. Delaying
 * W by `lag` micro-batches lets B reach the previous stage sooner at the cost
 * of holding `lag` more micro-batches' activations (a micro-batch's saved
 * tensors live until its W). */
#include "planner/sched_gen.h"

int pt_sched_gen_zb(pt_program *p, int w, int K, int lag)
{
    int M = p->mb_per_window, rc;
    K = K < 1 ? 1 : pt_sched_min(K, M);
    if (lag < 0)
        lag = 0;
    pt_sched_gen_begin(p, w);
    for (int k = 0; k < K; k++)
        if ((rc = pt_sched_gen_fwd(p, w, k, 0, 0)) < 0)
            return rc;
    int owed = 0; /* W_0 .. W_{owed-1} emitted */
    for (int j = 0; j < M; j++) {
        if ((rc = pt_sched_gen_bwd_input(p, w, j, 0, 0)) < 0)
            return rc;
        if (j >= lag && (rc = pt_sched_gen_bwd_weight(p, w, owed++, 0, 0)) < 0)
            return rc;
        if (K + j < M && (rc = pt_sched_gen_fwd(p, w, K + j, 0, 0)) < 0)
            return rc;
    }
    while (owed < M)
        if ((rc = pt_sched_gen_bwd_weight(p, w, owed++, 0, 0)) < 0)
            return rc;
    if ((rc = pt_sched_gen_allreduce(p, w, 0, M, 0, 0)) < 0 ||
        (rc = pt_sched_gen_opt(p, w, 0, M, 1)) < 0)
        return rc;
    pt_sched_gen_end(p, w);
    return 0;
}
