/* The small-M gemm kernels (runtime/gemm_small.h), every kernel set this CPU
 * runs, on random shapes that include the edges of their register tiles
 * (sizes one below, at and one above a multiple of the vector width and of
 * the tile), leading dimensions wider than the matrices, alpha != 1 and
 * beta of 0, 1 and other values, forward (NN) and input gradient (NT):
 *   - bit for bit equal to the in-order FMA chain the header promises (a
 *     scalar fmaf reference), which also makes the AVX2 and AVX-512 kernels
 *     and any two row counts agree bit for bit;
 *   - within the error bound of two summation orders of cblas_sgemm:
 *     |ours - cblas| <= 2 k eps sum_p |alpha a_ip b_pj| + 2 eps |beta c_ij|;
 *   - C outside its m x n window untouched, NaN in C ignored when beta is 0;
 *   - shapes outside the kernels' reach left to the caller (C untouched). */
#include <cblas.h>
#include <float.h>
#include <stdint.h>

#include "runtime/gemm_small.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define DRAWS_PER_OP 250
/* Under valgrind (scripts/memcheck.sh sets PT_MEMCHECK) fewer draws: what
 * memcheck adds is reads outside the buffers and uninitialised bytes, which
 * the edge sizes every draw picks from already reach; the values are checked
 * over all draws natively and under ASan. */
#define DRAWS_PER_OP_MEMCHECK 12
#define SENTINEL              12345.0f

typedef struct gcase {
    pt_trans ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
} gcase;

static float a_at(const gcase *g, const float *a, int i, int p)
{
    return g->ta == PT_TRANS ? a[(size_t)p * g->lda + i] : a[(size_t)i * g->lda + p];
}

static float b_at(const gcase *g, const float *b, int p, int j)
{
    return g->tb == PT_TRANS ? b[(size_t)j * g->ldb + p] : b[(size_t)p * g->ldb + j];
}

static const int edge_sizes[] = {1,  2,  3,  5,  7,  8,  9,  15, 16, 17, 23,  24, 25,
                                 31, 32, 33, 47, 48, 49, 63, 64, 65, 97, 130, 257};
#define EDGE_COUNT ((int)(sizeof edge_sizes / sizeof edge_sizes[0]))

static int draw_size(pt_rng *rng, int lo, int hi)
{
    for (;;) {
        int v = edge_sizes[pt_rng_below(rng, EDGE_COUNT)];
        if (v >= lo && v <= hi)
            return v;
    }
}

/* A random case of op (ta, tb) that the kernels take. */
static gcase draw_case(pt_rng *rng, pt_trans ta, pt_trans tb)
{
    static const float betas[] = {0.0f, 1.0f, -0.75f};
    gcase g = {ta, tb, 0, 0, 0, 0, 0, 0, 1.0f, 0.0f};
    do {
        g.m = draw_size(rng, 1, tb == PT_TRANS ? PT_GEMM_SMALL_NT_MAX_M : 257);
        g.n = draw_size(rng, 1, 257);
        g.k = draw_size(rng, 1, 257);
    } while (!pt_gemm_small_fits(ta, tb, g.m, g.n, g.k));
    int pad = (int)pt_rng_below(rng, 3) == 0 ? (int)pt_rng_below(rng, 9) + 1 : 0;
    g.lda = (ta == PT_TRANS ? g.m : g.k) + pad;
    g.ldb = (tb == PT_TRANS ? g.k : g.n) + pad;
    g.ldc = g.n + pad;
    g.alpha = pt_rng_below(rng, 4) == 0 ? 0.5f : 1.0f;
    g.beta = betas[pt_rng_below(rng, 3)];
    return g;
}

static float *rand_buf(pt_rng *rng, size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)pt_rng_uniform_range(rng, -1.0, 1.0);
    return p;
}

/* Runs one case with isa; returns the number of failed elements (each
 * reported up to a few). */
static int check_case(pt_gemm_isa isa, const gcase *g, pt_rng *rng)
{
    size_t a_n = (size_t)(g->ta == PT_TRANS ? g->k : g->m) * g->lda;
    size_t b_n = (size_t)(g->tb == PT_TRANS ? g->n : g->k) * g->ldb;
    size_t c_rows = (size_t)g->m + 1; /* one row past C, to see it untouched */
    size_t c_n = c_rows * g->ldc;
    float *a = rand_buf(rng, a_n), *b = rand_buf(rng, b_n), *c0 = rand_buf(rng, c_n);
    float *c = malloc(c_n * sizeof *c), *cb = malloc(c_n * sizeof *cb);
    int bad = 0;
    if (!a || !b || !c0 || !c || !cb) {
        CHECK(!"out of memory");
        bad = 1;
        goto done;
    }
    for (size_t i = 0; i < c_n; i++) { /* outside the window: a sentinel */
        size_t r = i / g->ldc, col = i % g->ldc;
        if (r >= (size_t)g->m || col >= (size_t)g->n)
            c0[i] = SENTINEL;
        else if (g->beta == 0.0f)
            c0[i] = NAN; /* must be overwritten, never read */
    }
    memcpy(c, c0, c_n * sizeof *c);
    memcpy(cb, c0, c_n * sizeof *cb);
    int took = pt_gemm_small_with(isa, g->ta, g->tb, g->m, g->n, g->k, g->alpha, a, g->lda, b,
                                  g->ldb, g->beta, c, g->ldc);
    CHECK_MSG(took == 1, "%s did not take ta %d tb %d m %d n %d k %d", pt_gemm_isa_name(isa), g->ta,
              g->tb, g->m, g->n, g->k);
    if (g->beta == 0.0f)
        for (size_t i = 0; i < c_n; i++)
            if (isnan(cb[i]))
                cb[i] = 0.0f; /* cblas may scale C by 0 first: NaN would stay */
    cblas_sgemm(CblasRowMajor, g->ta == PT_TRANS ? CblasTrans : CblasNoTrans,
                g->tb == PT_TRANS ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha, a,
                g->lda, b, g->ldb, g->beta, cb, g->ldc);
    for (size_t r = 0; r < c_rows; r++) {
        for (int j = 0; j < g->ldc; j++) {
            size_t at = r * g->ldc + j;
            if (r >= (size_t)g->m || j >= g->n) {
                if (c[at] != SENTINEL && bad++ < 3)
                    CHECK_MSG(0, "%s: C[%zu][%d] outside %dx%d changed", pt_gemm_isa_name(isa), r,
                              j, g->m, g->n);
                continue;
            }
            float acc = 0.0f;
            double mag = 0.0;
            for (int p = 0; p < g->k; p++) {
                float x = a_at(g, a, (int)r, p), y = b_at(g, b, p, j);
                acc = fmaf(x, y, acc);
                mag += fabs((double)g->alpha * x * y);
            }
            float want = g->alpha * acc;
            if (g->beta != 0.0f)
                want = fmaf(g->beta, c0[at], want);
            double tol = 2.0 * g->k * FLT_EPSILON * mag +
                         (g->beta != 0.0f ? 2.0 * FLT_EPSILON * fabs(g->beta * c0[at]) : 0.0);
            int same = memcmp(&want, &c[at], sizeof want) == 0;
            int near = fabs((double)c[at] - cb[at]) <= tol;
            if ((!same || !near) && bad++ < 3)
                CHECK_MSG(0,
                          "%s ta %d tb %d m %d n %d k %d alpha %g beta %g: C[%zu][%d] = %.9g, "
                          "in-order FMA %.9g, cblas %.9g (tol %.3g)",
                          pt_gemm_isa_name(isa), g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->beta,
                          r, j, c[at], want, cb[at], tol);
        }
    }
done:
    free(a);
    free(b);
    free(c0);
    free(c);
    free(cb);
    return bad;
}

static void run_op(pt_trans ta, pt_trans tb, uint64_t seed)
{
    pt_gemm_isa cpu = pt_gemm_small_cpu_isa();
    if (cpu == PT_GEMM_ISA_NONE) {
        printf("  (no small-gemm kernels on this CPU: nothing to check)\n");
        return;
    }
    for (int isa = PT_GEMM_ISA_AVX2; isa <= (int)cpu; isa++) {
        pt_rng rng = pt_rng_make(seed, (uint64_t)isa);
        int bad_cases = 0, draws = getenv("PT_MEMCHECK") ? DRAWS_PER_OP_MEMCHECK : DRAWS_PER_OP;
        for (int d = 0; d < draws; d++) {
            gcase g = draw_case(&rng, ta, tb);
            bad_cases += check_case((pt_gemm_isa)isa, &g, &rng) > 0;
        }
        CHECK_MSG(bad_cases == 0, "%s: %d of %d cases wrong", pt_gemm_isa_name((pt_gemm_isa)isa),
                  bad_cases, draws);
    }
}

static void test_forward_nn(void)
{
    run_op(PT_NO_TRANS, PT_NO_TRANS, 11);
}

static void test_input_grad_nt(void)
{
    run_op(PT_NO_TRANS, PT_TRANS, 12);
}

/* The layer shapes of fmnist-mlp-deep at a 16-row micro-batch: the ones the
 * pipeline runs, checked by the same properties. */
static void test_layer_shapes(void)
{
    pt_gemm_isa cpu = pt_gemm_small_cpu_isa();
    pt_rng rng = pt_rng_make(14, 0);
    const int rows = 16, ins[] = {784, 512, 512}, outs[] = {512, 512, 10};
    for (int isa = PT_GEMM_ISA_AVX2; isa <= (int)cpu; isa++) {
        for (int l = 0; l < 3; l++) {
            int in = ins[l], out = outs[l];
            gcase fwd = {PT_NO_TRANS, PT_NO_TRANS, rows, out, in, in, out, out, 1.0f, 0.0f};
            gcase dx = {PT_NO_TRANS, PT_TRANS, rows, in, out, out, out, in, 1.0f, 0.0f};
            CHECK(check_case((pt_gemm_isa)isa, &fwd, &rng) == 0);
            if (pt_gemm_small_fits(dx.ta, dx.tb, dx.m, dx.n, dx.k))
                CHECK(check_case((pt_gemm_isa)isa, &dx, &rng) == 0);
        }
    }
}

/* The forward of a 128-row batch equals, bit for bit, its eight 16-row
 * micro-batches: what lets a pipeline match single-device training. */
static void test_rows_independent(void)
{
    pt_gemm_isa cpu = pt_gemm_small_cpu_isa();
    const int rows = 128, mb = 16, in = 512, out = 512;
    pt_rng rng = pt_rng_make(15, 0);
    float *x = rand_buf(&rng, (size_t)rows * in), *w = rand_buf(&rng, (size_t)in * out);
    float *whole = malloc((size_t)rows * out * sizeof *whole);
    float *parts = malloc((size_t)rows * out * sizeof *parts);
    REQUIRE(x && w && whole && parts);
    for (int isa = PT_GEMM_ISA_AVX2; isa <= (int)cpu; isa++) {
        CHECK(pt_gemm_small_with((pt_gemm_isa)isa, PT_NO_TRANS, PT_NO_TRANS, rows, out, in, 1.0f, x,
                                 in, w, out, 0.0f, whole, out));
        for (int i = 0; i < rows; i += mb)
            CHECK(pt_gemm_small_with((pt_gemm_isa)isa, PT_NO_TRANS, PT_NO_TRANS, mb, out, in, 1.0f,
                                     x + (size_t)i * in, in, w, out, 0.0f, parts + (size_t)i * out,
                                     out));
        CHECK(memcmp(whole, parts, (size_t)rows * out * sizeof *whole) == 0);
    }
    free(x);
    free(w);
    free(whole);
    free(parts);
}

/* Shapes the kernels do not take, and kernel sets the CPU lacks, are left to
 * the caller with C as it was. */
static void test_declines(void)
{
    float a[4 * 80] = {0}, b[80 * 4] = {0}, c[4 * 4];
    for (int i = 0; i < 16; i++)
        c[i] = 7.0f;
    const float *cc = c;
    CHECK(pt_gemm_small_fits(PT_NO_TRANS, PT_NO_TRANS, 4096, 4, 4));
    CHECK(!pt_gemm_small_fits(PT_NO_TRANS, PT_TRANS, PT_GEMM_SMALL_NT_MAX_M + 1, 4, 512));
    CHECK(!pt_gemm_small_fits(PT_TRANS, PT_NO_TRANS, 512, 512, 16)); /* dW: OpenBLAS's */
    CHECK(!pt_gemm_small_fits(PT_TRANS, PT_TRANS, 4, 4, 4));
    CHECK(!pt_gemm_small_fits(PT_NO_TRANS, PT_TRANS, 4, 4, 4)); /* too shallow for NT */
    CHECK(!pt_gemm_small_fits(PT_NO_TRANS, PT_TRANS, 16, 512, PT_GEMM_SMALL_NT_MAX_K + 1));
    CHECK(pt_gemm_small_fits(PT_NO_TRANS, PT_TRANS, 16, 512, 512));
    CHECK(!pt_gemm_small_fits(PT_NO_TRANS, PT_NO_TRANS, 0, 4, 4));
    CHECK(!pt_gemm_small_fits(PT_NO_TRANS, PT_NO_TRANS, 4, 4, 0));
    CHECK(pt_gemm_small_with(PT_GEMM_ISA_NONE, PT_NO_TRANS, PT_NO_TRANS, 4, 4, 4, 1.0f, a, 4, b, 4,
                             0.0f, c, 4) == 0);
    CHECK(pt_gemm_small_with(PT_GEMM_ISA_AVX2, PT_TRANS, PT_TRANS, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f,
                             c, 4) == 0);
    if (pt_gemm_small_cpu_isa() < PT_GEMM_ISA_AVX512)
        CHECK(pt_gemm_small_with(PT_GEMM_ISA_AVX512, PT_NO_TRANS, PT_NO_TRANS, 4, 4, 4, 1.0f, a, 4,
                                 b, 4, 0.0f, c, 4) == 0);
    for (int i = 0; i < 16; i++)
        CHECK(cc[i] == 7.0f);
    /* The dispatching entry takes what fits (the test runs at one OpenBLAS
     * thread) unless PT_GEMM_SMALL turned it off. */
    const char *env = getenv(PT_GEMM_SMALL_ENV);
    int off = env && (!strcmp(env, "0") || !strcmp(env, "off"));
    pt_gemm_isa want = off ? PT_GEMM_ISA_NONE : pt_gemm_small_cpu_isa();
    CHECK(pt_gemm_small_isa() == want);
    if (openblas_get_num_threads() == 1)
        CHECK(pt_gemm_small(PT_NO_TRANS, PT_NO_TRANS, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4) ==
              (want != PT_GEMM_ISA_NONE));
}

PT_TEST_MAIN({"forward_nn", test_forward_nn}, {"input_grad_nt", test_input_grad_nt},
             {"layer_shapes", test_layer_shapes}, {"rows_independent", test_rows_independent},
             {"declines", test_declines})
