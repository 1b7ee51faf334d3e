/* The tiled attention reference; the algorithm is stated in attention_tiled.h.
 * Loops run in the order a GPU thread of the same blocking runs them: a
 * thread per query row (forward, dQ) or per key (dK, dV), looping over the
 * other side's rows in ascending order and over the head dimension inside. */
#include "runtime/attention_tiled.h"

#include <math.h>

typedef float tile[PT_ATTN_BLOCK_MAX][PT_ATTN_HEAD_DIM_MAX];

/* One (sample, head) of the layout. */
typedef struct head {
    const pt_attn_shape *a;
    pt_attn_round_fn round;
    int T, dh, D;
    int64_t ld;             /* floats between rows of qkv */
    const float *q, *k, *v; /* row 0 of this head's Q, K, V columns */
    int64_t stat;           /* offset of its statistics (and delta: stat / 2) */
} head;

static float rnd(pt_attn_round_fn round, float x)
{
    return round ? round(x) : x;
}

static head head_of(const pt_attn_shape *a, pt_attn_round_fn round, const float *qkv, int s, int h)
{
    head hd = {.a = a, .round = round, .T = a->seq, .dh = a->head_dim};
    hd.D = a->heads * a->head_dim;
    hd.ld = 3 * (int64_t)hd.D;
    hd.q = qkv + (int64_t)s * hd.T * hd.ld + (int64_t)h * hd.dh;
    hd.k = hd.q + hd.D;
    hd.v = hd.q + 2 * hd.D;
    hd.stat = ((int64_t)s * a->heads + h) * PT_ATTN_STATS * hd.T;
    return hd;
}

/* rows x dh of src (row stride ld) from row r0 into t, rounded. */
static void load(const head *hd, tile t, const float *src, int64_t ld, int r0, int rows)
{
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < hd->dh; d++)
            t[r][d] = rnd(hd->round, src[(int64_t)(r0 + r) * ld + d]);
}

static void store(const head *hd, tile t, float *dst, int64_t ld, int r0, int rows)
{
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < hd->dh; d++)
            dst[(int64_t)(r0 + r) * ld + d] = rnd(hd->round, t[r][d]);
}

static float dot(const float *x, const float *y, int n)
{
    float s = 0.0f;
    for (int d = 0; d < n; d++)
        s += x[d] * y[d];
    return s;
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* Query rows q0.. of one head against the key tile at k0 (cols keys), the
 * online softmax's step for each row that reaches a key of the tile. */
static void fwd_tile(const head *hd, tile q, tile k, tile v, int q0, int rows, int k0, int cols,
                     float *m, float *l, tile o)
{
    float s[PT_ATTN_BLOCK_MAX];
    for (int r = 0; r < rows; r++) {
        int t = q0 + r;
        if (k0 > t)
            continue;
        int n = min_int(cols, t - k0 + 1);
        float mx = m[r];
        for (int c = 0; c < n; c++) {
            s[c] = hd->a->scale * dot(q[r], k[c], hd->dh);
            mx = s[c] > mx ? s[c] : mx;
        }
        float corr = expf(m[r] - mx); /* 0 at the first tile: m is -inf */
        l[r] *= corr;
        for (int d = 0; d < hd->dh; d++)
            o[r][d] *= corr;
        for (int c = 0; c < n; c++) {
            float p = expf(s[c] - mx);
            l[r] += p;
            p = rnd(hd->round, p);
            for (int d = 0; d < hd->dh; d++)
                o[r][d] += p * v[c][d];
        }
        m[r] = mx;
    }
}

static void fwd_block(const head *hd, float *ctx, float *stats, int q0)
{
    tile q, k, v, o;
    float m[PT_ATTN_BLOCK_MAX], l[PT_ATTN_BLOCK_MAX];
    int rows = min_int(hd->a->br, hd->T - q0);
    load(hd, q, hd->q, hd->ld, q0, rows);
    for (int r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int d = 0; d < hd->dh; d++)
            o[r][d] = 0.0f;
    }
    for (int k0 = 0; k0 < q0 + rows; k0 += hd->a->bc) {
        int cols = min_int(hd->a->bc, hd->T - k0);
        load(hd, k, hd->k, hd->ld, k0, cols);
        load(hd, v, hd->v, hd->ld, k0, cols);
        fwd_tile(hd, q, k, v, q0, rows, k0, cols, m, l, o);
    }
    for (int r = 0; r < rows; r++) {
        for (int d = 0; d < hd->dh; d++)
            o[r][d] /= l[r];
        stats[hd->stat + q0 + r] = m[r] + logf(l[r]);
        stats[hd->stat + hd->T + q0 + r] = m[r];
    }
    store(hd, o, ctx, hd->D, q0, rows);
}

void pt_attn_tiled_fwd(const pt_attn_shape *a, pt_attn_round_fn round, const float *qkv, float *ctx,
                       float *stats)
{
    int D = a->heads * a->head_dim;
    for (int s = 0; s < a->n; s++)
        for (int h = 0; h < a->heads; h++) {
            head hd = head_of(a, round, qkv, s, h);
            float *c = ctx + (int64_t)s * a->seq * D + (int64_t)h * a->head_dim;
            for (int q0 = 0; q0 < a->seq; q0 += a->br)
                fwd_block(&hd, c, stats, q0);
        }
}

/* ---- backward ------------------------------------------------------------ */

/* What the backward's tiles share: the head, its gradient's columns, the
 * statistics and delta of its rows. */
typedef struct bwd_head {
    head hd;
    const float *o, *dout; /* row 0 of this head's ctx and dctx columns */
    const float *lse, *delta;
} bwd_head;

/* P and dS of query row t against key c, from the saved statistics. */
static void p_ds(const bwd_head *b, const float *q, const float *k, const float *v,
                 const float *dout, int t, float *p, float *ds)
{
    const head *hd = &b->hd;
    float s = hd->a->scale * dot(q, k, hd->dh);
    *p = expf(s - b->lse[t]);
    float dp = dot(dout, v, hd->dh);
    *ds = rnd(hd->round, *p * (dp - b->delta[t]));
    *p = rnd(hd->round, *p);
}

/* dK and dV of the keys k0.. (cols of them) over every query block that
 * reaches them. */
static void bwd_kv_block(const bwd_head *b, float *dk_out, float *dv_out, int k0)
{
    tile q, dout, k, v, dk, dv;
    const head *hd = &b->hd;
    int cols = min_int(hd->a->bc, hd->T - k0);
    load(hd, k, hd->k, hd->ld, k0, cols);
    load(hd, v, hd->v, hd->ld, k0, cols);
    for (int c = 0; c < cols; c++)
        for (int d = 0; d < hd->dh; d++)
            dk[c][d] = dv[c][d] = 0.0f;
    for (int q0 = k0 / hd->a->br * hd->a->br; q0 < hd->T; q0 += hd->a->br) {
        int rows = min_int(hd->a->br, hd->T - q0);
        load(hd, q, hd->q, hd->ld, q0, rows);
        load(hd, dout, b->dout, hd->D, q0, rows);
        for (int r = 0; r < rows; r++) {
            int t = q0 + r;
            for (int c = 0; c < cols && k0 + c <= t; c++) {
                float p, ds;
                p_ds(b, q[r], k[c], v[c], dout[r], t, &p, &ds);
                for (int d = 0; d < hd->dh; d++) {
                    dv[c][d] += p * dout[r][d];
                    dk[c][d] += hd->a->scale * ds * q[r][d];
                }
            }
        }
    }
    store(hd, dk, dk_out, hd->ld, k0, cols);
    store(hd, dv, dv_out, hd->ld, k0, cols);
}

/* dQ of the query rows q0.. over every key block they reach. */
static void bwd_q_block(const bwd_head *b, float *dq_out, int q0)
{
    tile q, dout, k, v, dq;
    const head *hd = &b->hd;
    int rows = min_int(hd->a->br, hd->T - q0);
    load(hd, q, hd->q, hd->ld, q0, rows);
    load(hd, dout, b->dout, hd->D, q0, rows);
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < hd->dh; d++)
            dq[r][d] = 0.0f;
    for (int k0 = 0; k0 < q0 + rows; k0 += hd->a->bc) {
        int cols = min_int(hd->a->bc, hd->T - k0);
        load(hd, k, hd->k, hd->ld, k0, cols);
        load(hd, v, hd->v, hd->ld, k0, cols);
        for (int r = 0; r < rows; r++) {
            int t = q0 + r;
            for (int c = 0; c < cols && k0 + c <= t; c++) {
                float p, ds;
                p_ds(b, q[r], k[c], v[c], dout[r], t, &p, &ds);
                for (int d = 0; d < hd->dh; d++)
                    dq[r][d] += hd->a->scale * ds * k[c][d];
            }
        }
    }
    store(hd, dq, dq_out, hd->ld, q0, rows);
}

/* delta_t = dO_t . O_t for every query row of one head. */
static void bwd_delta(const bwd_head *b, float *delta)
{
    const head *hd = &b->hd;
    for (int t = 0; t < hd->T; t++) {
        float s = 0.0f;
        for (int d = 0; d < hd->dh; d++)
            s += rnd(hd->round, b->dout[(int64_t)t * hd->D + d]) *
                 rnd(hd->round, b->o[(int64_t)t * hd->D + d]);
        delta[t] = s;
    }
}

void pt_attn_tiled_bwd(const pt_attn_shape *a, pt_attn_round_fn round, const float *qkv,
                       const float *ctx, const float *stats, const float *dctx, float *delta,
                       float *dqkv)
{
    int T = a->seq, dh = a->head_dim, D = a->heads * dh;
    for (int s = 0; s < a->n; s++)
        for (int h = 0; h < a->heads; h++) {
            bwd_head b = {.hd = head_of(a, round, qkv, s, h)};
            int64_t col = (int64_t)s * T * D + (int64_t)h * dh;
            float *dq = dqkv + (int64_t)s * T * 3 * D + (int64_t)h * dh;
            float *dl = delta + ((int64_t)s * a->heads + h) * T;
            b.o = ctx + col;
            b.dout = dctx + col;
            b.lse = stats + b.hd.stat;
            b.delta = dl;
            bwd_delta(&b, dl);
            for (int k0 = 0; k0 < T; k0 += a->bc)
                bwd_kv_block(&b, dq + D, dq + 2 * D, k0);
            for (int q0 = 0; q0 < T; q0 += a->br)
                bwd_q_block(&b, dq, q0);
        }
}
