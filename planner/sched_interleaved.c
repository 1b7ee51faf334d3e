/* interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al., "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
 * SC'21; Megatron's forward_backward_pipelining_with_interleaving, torch's
 * Interleaved1F1B). Each of the S pipeline ranks holds v model chunks (rank d
 * holds chunks d, d+S, ..., the program's stages), so a micro-batch crosses
 * the ranks v times. Rank d runs min(2(S-d-1) + (v-1)S, v·M) warm-up forward
 * units, then one forward and one backward unit in turn, then the backward
 * units left (protocol/sched_kind.h, pt_sched_interleaved_unit); micro-batches
 * go through the chunks in groups of S, so M must be a multiple of S. With
 * equal stages and no communication the bubble shrinks from (S-1)(F+B) to
 * (S-1)(F+B)/v: (S-1)/(v·M + S-1) of the iteration, for v times more
 * point-to-point messages.
 *
 * Each chunk is its own worker (its layers, net, messages and gradient
 * all-reduce); the chunks of one device form a host whose op order
 * (prog->host_ops) interleaves them in the rank's unit order. */
#include <stdlib.h>

#include "planner/sched_gen.h"

/* Position of every op in its host's order: the unit it belongs to (j in
 * [0, 2·v·M) along the rank's sequence), or 2·v·M + k for the k-th chunk's
 * gradient synchronisation and step, which close the iteration. */
typedef struct keyed {
    int *key;
    int cap;
} keyed;

static int note_keys(keyed *k, int from, int to, int key)
{
    if (to > k->cap) {
        int n = k->cap ? k->cap : 256;
        while (n < to)
            n *= 2;
        int *q = realloc(k->key, (size_t)n * sizeof *q);
        if (!q)
            return PT_ENOMEM;
        k->key = q;
        k->cap = n;
    }
    for (int i = from; i < to; i++)
        k->key[i] = key;
    return 0;
}

/* Emits unit k (forward or backward) of the rank's sequence at position j
 * when it belongs to worker w's chunk c. */
static int unit(pt_program *p, int w, int c, int k, int backward, int j, keyed *keys)
{
    int ch, mb, rc;
    pt_sched_interleaved_unit(p->rank_count, p->chunks, k, backward, &ch, &mb);
    if (ch != c)
        return 0;
    int from = p->op_count;
    rc = backward ? pt_sched_gen_bwd(p, w, mb, 0, 0) : pt_sched_gen_fwd(p, w, mb, 0, 0);
    return rc < 0 ? rc : note_keys(keys, from, p->op_count, j);
}

/* Worker w's ops (chunk c of rank d) in the rank's unit order. */
static int gen_worker(pt_program *p, int w, keyed *keys)
{
    int P = p->rank_count, v = p->chunks, M = p->mb_per_window;
    int d = p->workers[w].stage % P, c = p->workers[w].stage / P, total = v * M;
    int W = pt_sched_interleaved_warmup(P, v, M, d), j = 0, rc = 0;
    pt_sched_gen_begin(p, w);
    for (int k = 0; k < W && rc == 0; k++) /* warm-up */
        rc = unit(p, w, c, k, 0, j++, keys);
    for (int k = 0; k < total - W && rc == 0; k++) /* steady state: F_{W+k} B_k */
        if ((rc = unit(p, w, c, W + k, 0, j++, keys)) == 0)
            rc = unit(p, w, c, k, 1, j++, keys);
    for (int k = total - W; k < total && rc == 0; k++) /* cool-down */
        rc = unit(p, w, c, k, 1, j++, keys);
    int from = p->op_count;
    if (rc < 0 || (rc = pt_sched_gen_grad_sync(p, w, 0, M, 0, 1)) < 0 ||
        (rc = note_keys(keys, from, p->op_count, 2 * total + (v - 1 - c))) < 0)
        return rc;
    pt_sched_gen_end(p, w);
    return 0;
}

/* Merges the chunk workers of every host by key (a stable v-way merge: each
 * worker's own ops are already in key order). */
static void merge_hosts(pt_program *p, const int *key)
{
    int P = p->rank_count, v = p->chunks, n = 0;
    for (int h = 0; h < p->host_count; h++) {
        p->host_begin[h] = n;
        int d = 0;
        while (d + 1 < P && p->stage_worker[d + 1] <= h)
            d++;
        int r = h - p->stage_worker[d];
        int pos[PT_PLAN_CHUNKS_MAX], end[PT_PLAN_CHUNKS_MAX];
        for (int c = 0; c < v; c++) {
            const pt_worker *x = &p->workers[p->stage_worker[d + c * P] + r];
            pos[c] = x->op_begin;
            end[c] = x->op_end;
        }
        for (;;) {
            int best = -1;
            for (int c = 0; c < v; c++)
                if (pos[c] < end[c] && (best < 0 || key[pos[c]] < key[pos[best]]))
                    best = c;
            if (best < 0)
                break;
            p->host_ops[n++] = pos[best]++;
        }
    }
    p->host_begin[p->host_count] = n;
}

int pt_sched_gen_interleaved(pt_program *p, pt_error *err)
{
    int v = p->chunks, P = p->rank_count, M = p->mb_per_window, rc = 0;
    if (p->host_count < 1 || v < 2 || P < 2)
        return pt_error_set(err, PT_EINVAL,
                            "schedule interleaved: chunks: needs v >= 2 chunks per device on at "
                            "least 2 pipeline ranks (plan has %d stages, %d chunks)",
                            p->stage_count, v);
    if (M % P)
        return pt_error_set(err, PT_EINVAL,
                            "schedule interleaved: microbatch count: %d is not a multiple of the "
                            "%d pipeline ranks (Megatron-LM's interleaved schedule needs it)",
                            M, P);
    for (int s = P; s < p->stage_count; s++)
        if (p->stage_worker[s + 1] - p->stage_worker[s] !=
            p->stage_worker[s % P + 1] - p->stage_worker[s % P])
            return pt_error_set(err, PT_EINVAL,
                                "schedule interleaved: stages[%d].replicas: chunk %d of rank %d "
                                "must have the replicas of stages[%d]",
                                s, s / P, s % P, s % P);
    keyed keys = {0};
    for (int w = 0; w < p->worker_count && rc == 0; w++)
        rc = gen_worker(p, w, &keys);
    if (rc == 0 && (rc = pt_sched_gen_host_ops(p)) == 0)
        merge_hosts(p, keys.key);
    free(keys.key);
    return rc;
}
