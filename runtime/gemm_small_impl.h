/* The small-gemm kernels, written once over a vector width and included by
 * gemm_small.c once per instruction set with these macros defined:
 *   SFX          name suffix (avx512, avx2)
 *   TGT          the function attribute target("...")
 *   VW           floats per vector
 *   VT, MT       vector type, tail-mask type
 *   V_ZERO() V_SET1(x) V_FMA(a, b, c) V_MUL(a, b)
 *   V_LOAD(p) V_STORE(p, v) V_LOADM(p, m) V_STOREM(p, m, v) V_MASK(count)
 *   NN_MR NN_NV  rows x vectors of the NN register tile (NN_NV <= 3)
 * and a function transpose_SFX(VT r[VW]) that transposes VW x VW floats.
 * Every tile loop takes its shape as constant arguments of an always-inline
 * function, so each instance keeps its accumulators in registers. Each
 * element of C is the in-order FMA chain over p, whatever the tile. */

#define CAT2(a, b) a##_##b
#define CAT(a, b)  CAT2(a, b)
#define FN(name)   CAT(name, SFX)
#define INL        static inline __attribute__((always_inline, TGT))
#define UNROLL     _Pragma("GCC unroll 32")
/* Rows of B ahead that the NN kernel prefetches. */
#ifndef PF_ROWS
#define PF_ROWS 16
#endif

/* C tile = alpha * acc + beta * C (beta == 0: C is only written). */
INL void FN(put)(VT acc, float alpha, float beta, float *c, int masked, MT m)
{
    VT x = V_MUL(acc, V_SET1(alpha));
    if (beta != 0.0f)
        x = V_FMA(V_SET1(beta), masked ? V_LOADM(c, m) : V_LOAD(c), x);
    if (masked)
        V_STOREM(c, m, x);
    else
        V_STORE(c, x);
}

/* NN, A[r][p] = a[r * lda + p]: rows r < MR of C by NV vectors of columns,
 * the last one masked when TAIL. */
INL void FN(nn_tile)(const int MR, const int NV, const int TAIL, MT mlast, int k, const float *a,
                     int lda, const float *b, int ldb, float alpha, float beta, float *c, int ldc)
{
    VT acc[NN_MR][NN_NV];
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
    for (int v = 0; v < NV; v++)
        acc[r][v] = V_ZERO();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        /* the walk down a panel of B takes a short piece of each row: too
         * short for the hardware prefetcher when B comes from memory */
        if (p + PF_ROWS < k)
            UNROLL
        for (int v = 0; v < NV; v++)
            __builtin_prefetch(bp + (size_t)PF_ROWS * ldb + v * VW, 0, 3);
        VT bv[NN_NV];
        UNROLL
        for (int v = 0; v < NV; v++)
            bv[v] = TAIL && v == NV - 1 ? V_LOADM(bp + v * VW, mlast) : V_LOAD(bp + v * VW);
        UNROLL
        for (int r = 0; r < MR; r++) {
            VT av = V_SET1(a[(size_t)r * lda + p]);
            UNROLL
            for (int v = 0; v < NV; v++)
                acc[r][v] = V_FMA(av, bv[v], acc[r][v]);
        }
    }
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
    for (int v = 0; v < NV; v++)
        FN(put)(acc[r][v], alpha, beta, c + (size_t)r * ldc + v * VW, TAIL && v == NV - 1, mlast);
}

/* MR rows of C by one panel of at most NN_NV vectors (n <= NN_NV * VW). */
INL void FN(nn_panel)(const int MR, int n, int k, const float *a, int lda, const float *b, int ldb,
                      float alpha, float beta, float *c, int ldc)
{
    if (n == NN_NV * VW) {
        FN(nn_tile)(MR, NN_NV, 0, V_MASK(VW), k, a, lda, b, ldb, alpha, beta, c, ldc);
        return;
    }
    int nv = (n + VW - 1) / VW;
    MT m = V_MASK(n - (nv - 1) * VW);
    switch (nv) {
#if NN_NV >= 3
    case 3:
        FN(nn_tile)(MR, 3, 1, m, k, a, lda, b, ldb, alpha, beta, c, ldc);
        break;
#endif
    case 2:
        FN(nn_tile)(MR, 2, 1, m, k, a, lda, b, ldb, alpha, beta, c, ldc);
        break;
    default:
        FN(nn_tile)(MR, 1, 1, m, k, a, lda, b, ldb, alpha, beta, c, ldc);
        break;
    }
}

/* NN: C = alpha A B + beta C, one panel of NN_NV vectors of columns at a
 * time through all m rows (strips of NN_MR rows, then halves down to one),
 * so a panel of B (k x NN_NV * VW) comes from memory once and from cache for
 * the other strips. */
static __attribute__((TGT)) void FN(gemm_nn)(int m, int n, int k, float alpha, const float *a,
                                             int lda, const float *b, int ldb, float beta, float *c,
                                             int ldc)
{
    const int step = NN_NV * VW;
    for (int j = 0; j < n; j += step) {
        int nj = n - j < step ? n - j : step;
        int i = 0;
        for (int mr = NN_MR; mr >= 1; mr /= 2) {
            for (; m - i >= mr; i += mr) {
                const float *ai = a + (size_t)i * lda, *bj = b + j;
                float *cij = c + (size_t)i * ldc + j;
                switch (mr) {
#if NN_MR >= 8
                case 8:
                    FN(nn_panel)(8, nj, k, ai, lda, bj, ldb, alpha, beta, cij, ldc);
                    break;
#endif
                case 4:
                    FN(nn_panel)(4, nj, k, ai, lda, bj, ldb, alpha, beta, cij, ldc);
                    break;
                case 2:
                    FN(nn_panel)(2, nj, k, ai, lda, bj, ldb, alpha, beta, cij, ldc);
                    break;
                default:
                    FN(nn_panel)(1, nj, k, ai, lda, bj, ldb, alpha, beta, cij, ldc);
                    break;
                }
            }
        }
    }
}

/* NT over packed A^T (at[p * VW + l] = A[l][p], l < VW): NJ rows j of B by
 * the VW rows of A of the strip; C[l][j] is written for l < mi only. A full
 * square (NJ == VW) is transposed in registers and written row by row;
 * narrower tiles (the last columns) element by element. */
INL void FN(nt_tile)(const int NJ, int mi, int k, const float *at, const float *b, int ldb,
                     float alpha, float beta, float *c, int ldc)
{
    VT acc[VW];
    UNROLL
    for (int jj = 0; jj < NJ; jj++)
        acc[jj] = V_ZERO();
    for (int p = 0; p < k; p++) {
        VT av = V_LOAD(at + (size_t)p * VW);
        UNROLL
        for (int jj = 0; jj < NJ; jj++)
            acc[jj] = V_FMA(av, V_SET1(b[(size_t)jj * ldb + p]), acc[jj]);
    }
    if (NJ == VW) {
        FN(transpose)(acc);
        for (int l = 0; l < mi; l++)
            FN(put)(acc[l], alpha, beta, c + (size_t)l * ldc, 0, V_MASK(VW));
        return;
    }
    float lane[VW];
    UNROLL
    for (int jj = 0; jj < NJ; jj++) {
        V_STORE(lane, acc[jj]);
        for (int l = 0; l < mi; l++) {
            float *cl = c + (size_t)l * ldc + jj;
            float x = alpha * lane[l];
            *cl = beta != 0.0f ? fmaf(beta, *cl, x) : x;
        }
    }
}

/* NT: C = alpha A B^T + beta C with A m x k (m <= VW), B n x k; at holds
 * k x VW floats of scratch. */
static __attribute__((TGT)) void FN(gemm_nt)(int m, int n, int k, float alpha, const float *a,
                                             int lda, const float *b, int ldb, float beta, float *c,
                                             int ldc, float *at)
{
    for (int p = 0; p < k; p++) {
        float *row = at + (size_t)p * VW;
        for (int i = 0; i < m; i++)
            row[i] = a[(size_t)i * lda + p];
        for (int i = m; i < VW; i++)
            row[i] = 0.0f;
    }
    int j = 0;
    for (int nj = VW; nj >= 1; nj /= 2) {
        for (; n - j >= nj; j += nj) {
            const float *bj = b + (size_t)j * ldb;
            float *cj = c + j;
            switch (nj) {
            case VW:
                FN(nt_tile)(VW, m, k, at, bj, ldb, alpha, beta, cj, ldc);
                break;
#if VW > 8
            case 8:
                FN(nt_tile)(8, m, k, at, bj, ldb, alpha, beta, cj, ldc);
                break;
#endif
            case 4:
                FN(nt_tile)(4, m, k, at, bj, ldb, alpha, beta, cj, ldc);
                break;
            case 2:
                FN(nt_tile)(2, m, k, at, bj, ldb, alpha, beta, cj, ldc);
                break;
            default:
                FN(nt_tile)(1, m, k, at, bj, ldb, alpha, beta, cj, ldc);
                break;
            }
        }
    }
}

#undef CAT2
#undef CAT
#undef FN
#undef INL
#undef UNROLL
