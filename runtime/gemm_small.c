#include "runtime/gemm_small.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Widest vector of the kernels (AVX-512: 16 floats); NT pads m to it. */
#define VW_MAX 16
/* Floats of the packed A^T the NT kernel keeps on the stack (64 KiB). */
#define NT_PACK_FLOATS (PT_GEMM_SMALL_NT_MAX_K * VW_MAX)
/* Up to this m, NT runs the 8-float kernel on an AVX-512 CPU too. */
#define NT_NARROW_M 8

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_KERNELS 1
#include <immintrin.h>

/* 16 x 16 floats: r[i] becomes column i. */
static inline __attribute__((always_inline, target("avx512f"))) void transpose_avx512(__m512 r[16])
{
    __m512 t[16], u[16], v[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < 4; i++) {
            v[8 * h + i] = _mm512_shuffle_f32x4(u[8 * h + i], u[8 * h + 4 + i], 0x88);
            v[8 * h + 4 + i] = _mm512_shuffle_f32x4(u[8 * h + i], u[8 * h + 4 + i], 0xDD);
        }
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(v[i], v[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(v[i], v[8 + i], 0xDD);
    }
}

/* ---- AVX-512F: 32 registers of 16 floats, masks for the column tail ---- */
#define SFX               avx512
#define TGT               target("avx512f")
#define VW                16
#define VT                __m512
#define MT                __mmask16
#define V_ZERO()          _mm512_setzero_ps()
#define V_SET1(x)         _mm512_set1_ps(x)
#define V_FMA(a, b, c)    _mm512_fmadd_ps(a, b, c)
#define V_MUL(a, b)       _mm512_mul_ps(a, b)
#define V_LOAD(p)         _mm512_loadu_ps(p)
#define V_STORE(p, v)     _mm512_storeu_ps(p, v)
#define V_LOADM(p, m)     _mm512_maskz_loadu_ps(m, p)
#define V_STOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define V_MASK(cnt)       ((__mmask16)((1u << (cnt)) - 1u))
#define NN_MR             8
#define NN_NV             3
#include "runtime/gemm_small_impl.h"
#undef SFX
#undef TGT
#undef VW
#undef VT
#undef MT
#undef V_ZERO
#undef V_SET1
#undef V_FMA
#undef V_MUL
#undef V_LOAD
#undef V_STORE
#undef V_LOADM
#undef V_STOREM
#undef V_MASK
#undef NN_MR
#undef NN_NV

/* 8 x 8 floats: r[i] becomes column i. */
static inline __attribute__((always_inline, target("avx2,fma"))) void transpose_avx2(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* ---- AVX2 + FMA: 16 registers of 8 floats, integer masks for the tail ---- */
static const int32_t avx2_mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
#define SFX               avx2
#define TGT               target("avx2,fma")
#define VW                8
#define VT                __m256
#define MT                __m256i
#define V_ZERO()          _mm256_setzero_ps()
#define V_SET1(x)         _mm256_set1_ps(x)
#define V_FMA(a, b, c)    _mm256_fmadd_ps(a, b, c)
#define V_MUL(a, b)       _mm256_mul_ps(a, b)
#define V_LOAD(p)         _mm256_loadu_ps(p)
#define V_STORE(p, v)     _mm256_storeu_ps(p, v)
#define V_LOADM(p, m)     _mm256_maskload_ps(p, m)
#define V_STOREM(p, m, v) _mm256_maskstore_ps(p, m, v)
#define V_MASK(cnt)       _mm256_loadu_si256((const __m256i *)(avx2_mask_src + 8 - (cnt)))
#define NN_MR             4
#define NN_NV             3
#include "runtime/gemm_small_impl.h"
#undef SFX
#undef TGT
#undef VW
#undef VT
#undef MT
#undef V_ZERO
#undef V_SET1
#undef V_FMA
#undef V_MUL
#undef V_LOAD
#undef V_STORE
#undef V_LOADM
#undef V_STOREM
#undef V_MASK
#undef NN_MR
#undef NN_NV
#endif

pt_gemm_isa pt_gemm_small_cpu_isa(void)
{
#ifdef HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return PT_GEMM_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return PT_GEMM_ISA_AVX2;
#endif
    return PT_GEMM_ISA_NONE;
}

pt_gemm_isa pt_gemm_small_isa(void)
{
    static atomic_int chosen = -1;
    int isa = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (isa < 0) {
        const char *env = getenv(PT_GEMM_SMALL_ENV);
        int off = env && (!strcmp(env, "0") || !strcmp(env, "off"));
        isa = off ? PT_GEMM_ISA_NONE : (int)pt_gemm_small_cpu_isa();
        atomic_store_explicit(&chosen, isa, memory_order_relaxed);
    }
    return (pt_gemm_isa)isa;
}

const char *pt_gemm_isa_name(pt_gemm_isa isa)
{
    return isa == PT_GEMM_ISA_AVX512 ? "avx512" : isa == PT_GEMM_ISA_AVX2 ? "avx2" : "none";
}

int pt_gemm_small_fits(pt_trans ta, pt_trans tb, int m, int n, int k)
{
    if (m < 1 || n < 1 || k < 1)
        return 0;
    if (ta == PT_NO_TRANS && tb == PT_NO_TRANS)
        return 1;
    if (ta == PT_NO_TRANS && tb == PT_TRANS)
        return m <= PT_GEMM_SMALL_NT_MAX_M && k >= PT_GEMM_SMALL_NT_MIN_K &&
               k <= PT_GEMM_SMALL_NT_MAX_K;
    return 0;
}

int pt_gemm_small_with(pt_gemm_isa isa, pt_trans ta, pt_trans tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc)
{
    if (isa == PT_GEMM_ISA_NONE || isa > pt_gemm_small_cpu_isa() ||
        !pt_gemm_small_fits(ta, tb, m, n, k))
        return 0;
#ifdef HAVE_X86_KERNELS
    if (tb == PT_TRANS) {
        /* strips of one vector of rows, each reading all of B; an AVX-512
         * CPU runs the 8-float kernel on a last strip of 8 rows or fewer */
        float at[NT_PACK_FLOATS] __attribute__((aligned(64)));
        for (int i = 0; i < m;) {
            int wide = isa == PT_GEMM_ISA_AVX512 && m - i > NT_NARROW_M;
            int vw = wide ? 16 : 8, mi = m - i < vw ? m - i : vw;
            const float *ai = a + (size_t)i * lda;
            float *ci = c + (size_t)i * ldc;
            if (wide)
                gemm_nt_avx512(mi, n, k, alpha, ai, lda, b, ldb, beta, ci, ldc, at);
            else
                gemm_nt_avx2(mi, n, k, alpha, ai, lda, b, ldb, beta, ci, ldc, at);
            i += mi;
        }
        return 1;
    }
    for (int i = 0; i < m; i += PT_GEMM_SMALL_BLOCK_M) {
        int mi = m - i < PT_GEMM_SMALL_BLOCK_M ? m - i : PT_GEMM_SMALL_BLOCK_M;
        const float *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        if (isa == PT_GEMM_ISA_AVX512)
            gemm_nn_avx512(mi, n, k, alpha, ai, lda, b, ldb, beta, ci, ldc);
        else
            gemm_nn_avx2(mi, n, k, alpha, ai, lda, b, ldb, beta, ci, ldc);
    }
    return 1;
#else
    (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return 0;
#endif
}

int pt_gemm_small(pt_trans ta, pt_trans tb, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (openblas_get_num_threads() > 1)
        return 0;
    return pt_gemm_small_with(pt_gemm_small_isa(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                              ldc);
}
