/* Fused causal attention, flash-attention style (Dao et al., "FlashAttention",
 * NeurIPS 2022, with FlashAttention-2's loop order): the CPU reference of the
 * tiled algorithm. The CPU backend's attention_fused_fwd/_bwd call it with
 * the default blocking; the CUDA backend's kernels (runtime/cuda/
 * backend_cuda.cu) run the same blocking, one thread per row of a tile, with
 * the tiles in shared memory.
 *
 * Layout (runtime/layer_attention.c's): per sample, qkv is [T, 3D] with
 * columns Q | K | V and head h at column h*dh of each; ctx is [T, D] with
 * head h at h*dh; D = heads * dh. stats per sample is [heads][2][T]: each
 * query row's log-sum-exp of its scaled scores (k = 0) and their maximum
 * (k = 1). The backward reads only the log-sum-exp.
 *
 * Forward, per (sample, head, block of br query rows): for each block of bc
 * keys that starts at or before the block's last query (causal), the br x bc
 * score tile S = scale Q K^T, keys after a row's query masked, then the online
 * softmax per row: m' = max(m, rowmax S), P = exp(S - m'), l = l e^(m - m') +
 * rowsum P, O = O e^(m - m') + P V; at the end O / l and lse = m + log l.
 * Nothing of size T x T is ever written: a tile lives in on-chip memory (here,
 * the stack: at most six tiles of PT_ATTN_BLOCK_MAX x PT_ATTN_HEAD_DIM_MAX
 * floats, 192 KiB, in one call; callers run on threads with default stacks).
 *
 * Backward, three passes (three kernels on a GPU): delta_t = dO_t . O_t per
 * query row; per key block, over the query blocks that reach it, P = exp(S -
 * lse) recomputed from the saved statistics, dV += P^T dO, dP = dO V^T,
 * dS = P (dP - delta), dK += scale dS^T Q; per query block, over the key
 * blocks it reaches, the same P and dS and dQ += scale dS K. Two passes rather
 * than one with atomic adds into dQ: every output element is summed by one
 * thread in one order, so runs repeat bit for bit.
 *
 * `round` (NULL: none) is applied to every value loaded into a tile (Q, K,
 * V, dO, O), to P and dS before their products and to what is stored (O,
 * dQ, dK, dV): a kernel that stores bf16 and accumulates in fp32 (the test's
 * bf16 check). The statistics and the sums stay fp32. */
#ifndef PT_RUNTIME_ATTENTION_TILED_H
#define PT_RUNTIME_ATTENTION_TILED_H

#include <stdint.h>

/* The blocking the backends use: query rows and keys per tile. */
#define PT_ATTN_BR 32
#define PT_ATTN_BC 32
/* Largest tile side and head dimension a tile holds (a CUDA block's shared
 * memory: K and V tiles of PT_ATTN_BC x PT_ATTN_HEAD_DIM_MAX floats, 32 KiB). */
#define PT_ATTN_BLOCK_MAX    64
#define PT_ATTN_HEAD_DIM_MAX 128
/* Floats of statistics per (sample, head, query row): lse and max. */
#define PT_ATTN_STATS 2

typedef float (*pt_attn_round_fn)(float);

typedef struct pt_attn_shape {
    int n, seq, heads, head_dim; /* samples, T, heads, dh (<= PT_ATTN_HEAD_DIM_MAX) */
    float scale;                 /* of the scores: 1/sqrt(dh) in the layer */
    int br, bc;                  /* tile sides, 1..PT_ATTN_BLOCK_MAX */
} pt_attn_shape;

/* ctx (n x T x D, overwritten) and stats (n x heads x 2 x T, overwritten)
 * from qkv. Host memory. */
void pt_attn_tiled_fwd(const pt_attn_shape *a, pt_attn_round_fn round, const float *qkv, float *ctx,
                       float *stats);

/* dqkv (n x T x 3D, overwritten) from the forward's qkv, ctx and stats and
 * dctx, the gradient of ctx; delta (n x heads x T) is scratch. Host memory;
 * dqkv must not overlap the inputs. */
void pt_attn_tiled_bwd(const pt_attn_shape *a, pt_attn_round_fn round, const float *qkv,
                       const float *ctx, const float *stats, const float *dctx, float *delta,
                       float *dqkv);

#endif
