/* Single-precision gemm for the shapes of a linear layer on a pipeline
 * micro-batch: a few rows of activations against a large weight matrix
 * (forward Y = X W, NN; input gradient dX = dY W^T, NT). The weight
 * gradient (dW += X^T dY, TN, a rank-k update) stays with OpenBLAS: a
 * kernel of this kind measured at par with it when dW sits in cache and
 * 0.5-0.75x when dW comes from memory (OpenBLAS also sums it in order: the
 * same bits at k = 16).
 *
 * OpenBLAS packs the large operand into its panel layout on every call; at
 * 16 rows that copy of a 512 x 512 weight matrix costs a third of the call.
 * These kernels read the weight matrix where it lies, row by row, each
 * element once per block of rows, and pack only the small operand (NT: a
 * strip of A^T, on the stack). Register-blocked FMA kernels for AVX-512 and
 * for AVX2 + FMA, chosen at run time from the CPU; on other CPUs nothing is
 * handled and the caller uses cblas_sgemm. bench/gemm_small measures them
 * against OpenBLAS; the shapes they take are those where they measured
 * faster.
 *
 * Layout and semantics as cblas_sgemm with CblasRowMajor (and as
 * pt_backend.gemm): C = alpha * op(A) op(B) + beta * C, op(A) m x k, op(B)
 * k x n; with beta == 0 C is only written. Each element of C is the in-order
 * chain acc = fma(a_ip, b_pj, acc) over p = 0..k-1 from 0, then alpha * acc,
 * then fma(beta, c, that) when beta != 0: the same bits on every kernel set
 * and at any m, so a row of C does not depend on the other rows of the call
 * (a micro-batch of 16 gives the rows a batch of 128 gives). Thread-safe; no
 * allocation. */
#ifndef PT_RUNTIME_GEMM_SMALL_H
#define PT_RUNTIME_GEMM_SMALL_H

#include "runtime/backend.h"

/* NN takes any m, in blocks of this many rows (each block reads all of B:
 * at 64 rows, 64 FMAs per element of B keep the kernel compute-bound). */
#define PT_GEMM_SMALL_BLOCK_M 64
/* NT takes m up to this (past it OpenBLAS measured faster), ... */
#define PT_GEMM_SMALL_NT_MAX_M 64
/* ... k from this (it writes the narrow last columns of C element by
 * element, which a shallow product does not repay) ... */
#define PT_GEMM_SMALL_NT_MIN_K 32
/* ... up to this: a strip of A^T, 16 rows by k, lives on the stack (64 KiB). */
#define PT_GEMM_SMALL_NT_MAX_K 1024
/* Environment variable: "0" or "off" turns the small kernels off (every call
 * goes to cblas), for measuring one against the other in a whole run. */
#define PT_GEMM_SMALL_ENV "PT_GEMM_SMALL"

typedef enum pt_gemm_isa {
    PT_GEMM_ISA_NONE = 0,  /* not handled: the caller uses cblas_sgemm */
    PT_GEMM_ISA_AVX2 = 1,  /* AVX2 + FMA, 8 floats a vector */
    PT_GEMM_ISA_AVX512 = 2 /* AVX-512F, 16 floats a vector */
} pt_gemm_isa;

/* The best kernel set this CPU can run. */
pt_gemm_isa pt_gemm_small_cpu_isa(void);

/* The kernel set pt_gemm_small uses: pt_gemm_small_cpu_isa(), or NONE when
 * PT_GEMM_SMALL_ENV turns it off; read once, at the first call. */
pt_gemm_isa pt_gemm_small_isa(void);

/* "avx512", "avx2" or "none". */
const char *pt_gemm_isa_name(pt_gemm_isa isa);

/* Whether a gemm of this shape is one the small kernels take: NN at any
 * size; NT with m <= PT_GEMM_SMALL_NT_MAX_M and PT_GEMM_SMALL_NT_MIN_K <= k
 * <= PT_GEMM_SMALL_NT_MAX_K; TN and TT never.
 * m, n, k < 1: no. */
int pt_gemm_small_fits(pt_trans ta, pt_trans tb, int m, int n, int k);

/* Computes the gemm with the given kernel set and returns 1, or returns 0
 * and leaves C untouched when isa is NONE, is more than this CPU runs, or
 * the shape does not fit (m, n, k < 1 included). */
int pt_gemm_small_with(pt_gemm_isa isa, pt_trans ta, pt_trans tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc);

/* pt_gemm_small_with(pt_gemm_small_isa(), ...), but 0 (not handled) while
 * OpenBLAS runs more than one thread: these kernels run on one, and a caller
 * that gave OpenBLAS several wants them used. */
int pt_gemm_small(pt_trans ta, pt_trans tb, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc);

#endif
