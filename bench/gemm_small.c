/* The small-M gemm kernels (runtime/gemm_small.h) against cblas_sgemm on the
 * shapes of a pipeline stage's linear layers: a micro-batch of M rows through
 * an in x out weight matrix, forward (NN: Y = X W), input gradient (NT:
 * dX = dY W^T) and weight gradient (TN: dW += X^T dY, a rank-M update).
 *
 * Each call uses the next of --layers distinct weight (and weight-gradient)
 * matrices in turn, as a stage does going through its layers, so the weights
 * come from wherever a stage's weights live (L3 or memory, not L1). Timing is
 * this thread's CPU time over a burst of calls, repeated; the minimum over
 * the repeats is printed (least disturbed by other load), in microseconds a
 * call and GFLOP/s. Also prints the largest |ours - cblas| relative to the
 * largest |C|. Usage: gemm_small [--rows M] [--layers L] [--repeats R]
 * [--threads T] (OpenBLAS threads; 1 by default). Prints figures; never fails
 * on time. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "runtime/blas_core.h"
#include "runtime/gemm_small.h"
#include "runtime/rng.h"

#define BURST_CALLS   40
#define DEFAULT_REPS  15
#define DEFAULT_LAYER 8
#define MAX_ARG       4096

typedef struct shape {
    const char *what;
    pt_trans ta, tb;
    int in, out; /* the weight matrix, in x out */
    float beta;
} shape;

typedef struct mats {
    int layers, rows, in, out;
    float *x, *y, *w, *dy, *dx, *dw;
} mats;

static float *rand_floats(pt_rng *rng, size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)pt_rng_uniform_range(rng, -1.0, 1.0);
    return p;
}

/* One call of the layer's gemm, through ours (isa) or cblas (NONE). */
static void call(const shape *s, const mats *mt, int l, pt_gemm_isa isa)
{
    int M = mt->rows, in = s->in, out = s->out;
    const float *w = mt->w + (size_t)l * in * out;
    int m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    if (s->ta == PT_NO_TRANS && s->tb == PT_NO_TRANS) { /* Y = X W */
        m = M, n = out, k = in, a = mt->x, lda = in, b = w, ldb = out, c = mt->y, ldc = out;
    } else if (s->tb == PT_TRANS) { /* dX = dY W^T */
        m = M, n = in, k = out, a = mt->dy, lda = out, b = w, ldb = out, c = mt->dx, ldc = in;
    } else { /* dW += X^T dY */
        m = in, n = out, k = M, a = mt->x, lda = in, b = mt->dy, ldb = out;
        c = mt->dw + (size_t)l * in * out, ldc = out;
    }
    if (isa != PT_GEMM_ISA_NONE &&
        pt_gemm_small_with(isa, s->ta, s->tb, m, n, k, 1.0f, a, lda, b, ldb, s->beta, c, ldc))
        return;
    cblas_sgemm(CblasRowMajor, s->ta == PT_TRANS ? CblasTrans : CblasNoTrans,
                s->tb == PT_TRANS ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
                s->beta, c, ldc);
}

/* Minimum over repeats of the CPU time of one call, in seconds. */
static double time_calls(const shape *s, const mats *mt, pt_gemm_isa isa, int reps)
{
    double best = INFINITY;
    for (int l = 0; l < mt->layers; l++) /* warm */
        call(s, mt, l, isa);
    for (int r = 0; r < reps; r++) {
        double t0 = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < BURST_CALLS; i++)
            call(s, mt, i % mt->layers, isa);
        double t = (pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID) - t0) / BURST_CALLS;
        best = t < best ? t : best;
    }
    return best;
}

/* Largest |ours - cblas| over the output, relative to the largest |cblas|. */
static double rel_diff(const shape *s, mats *mt, pt_gemm_isa isa)
{
    int rows = s->tb == PT_TRANS ? mt->rows : s->ta == PT_TRANS ? s->in : mt->rows;
    int cols = s->tb == PT_TRANS ? s->in : s->out;
    float *c = s->tb == PT_TRANS ? mt->dx : s->ta == PT_TRANS ? mt->dw : mt->y;
    size_t n = (size_t)rows * cols;
    float *keep = malloc(n * sizeof *keep), *ref = malloc(n * sizeof *ref);
    if (!keep || !ref) {
        free(keep);
        free(ref);
        return NAN;
    }
    memcpy(keep, c, n * sizeof *c);
    call(s, mt, 0, PT_GEMM_ISA_NONE);
    memcpy(ref, c, n * sizeof *c);
    memcpy(c, keep, n * sizeof *c);
    call(s, mt, 0, isa);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)c[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    memcpy(c, keep, n * sizeof *c);
    free(keep);
    free(ref);
    return scale > 0 ? worst / scale : worst;
}

static int arg_int(const char *flag, const char *v, int lo, int *out)
{
    *out = atoi(v);
    if (*out < lo || *out > MAX_ARG) {
        fprintf(stderr, "gemm_small: %s %s out of range\n", flag, v);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv);
    int rows = 16, layers = DEFAULT_LAYER, reps = DEFAULT_REPS, threads = 1;
    for (int i = 1; i < argc; i += 2) {
        int rc = -1;
        if (i + 1 < argc && !strcmp(argv[i], "--rows"))
            rc = arg_int(argv[i], argv[i + 1], 1, &rows);
        else if (i + 1 < argc && !strcmp(argv[i], "--layers"))
            rc = arg_int(argv[i], argv[i + 1], 1, &layers);
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats"))
            rc = arg_int(argv[i], argv[i + 1], 1, &reps);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
            rc = arg_int(argv[i], argv[i + 1], 1, &threads);
        if (rc < 0) {
            fprintf(stderr, "usage: gemm_small [--rows M] [--layers L] [--repeats R] "
                            "[--threads T]\n");
            return 2;
        }
    }
    openblas_set_num_threads(threads);
    pt_gemm_isa cpu = pt_gemm_small_cpu_isa();
    printf("small gemm vs cblas_sgemm (OpenBLAS core %s, %d thread%s); ours: %s; %d rows, %d "
           "weight matrices in turn; min over %d bursts of %d calls, thread CPU time\n",
           pt_blas_core_name(), threads, threads == 1 ? "" : "s", pt_gemm_isa_name(cpu), rows,
           layers, reps, BURST_CALLS);
    const shape shapes[] = {
        {"fwd  Y = X W      ", PT_NO_TRANS, PT_NO_TRANS, 512, 512, 0.0f},
        {"bwd dX = dY W^T   ", PT_NO_TRANS, PT_TRANS, 512, 512, 0.0f},
        {"bwd dW += X^T dY  ", PT_TRANS, PT_NO_TRANS, 512, 512, 1.0f},
        {"fwd  Y = X W      ", PT_NO_TRANS, PT_NO_TRANS, 784, 512, 0.0f},
        {"bwd dW += X^T dY  ", PT_TRANS, PT_NO_TRANS, 784, 512, 1.0f},
        {"fwd  Y = X W      ", PT_NO_TRANS, PT_NO_TRANS, 512, 10, 0.0f},
        {"bwd dX = dY W^T   ", PT_NO_TRANS, PT_TRANS, 512, 10, 0.0f},
        {"bwd dW += X^T dY  ", PT_TRANS, PT_NO_TRANS, 512, 10, 1.0f},
    };
    printf("%-18s %9s %12s %12s %12s %8s %10s\n", "op", "in x out", "cblas us", "avx512 us",
           "avx2 us", "speedup", "rel diff");
    pt_rng rng = pt_rng_make(3, 0);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        mats mt = {layers, rows, s->in, s->out, NULL, NULL, NULL, NULL, NULL, NULL};
        mt.x = rand_floats(&rng, (size_t)rows * s->in);
        mt.y = rand_floats(&rng, (size_t)rows * s->out);
        mt.dy = rand_floats(&rng, (size_t)rows * s->out);
        mt.dx = rand_floats(&rng, (size_t)rows * s->in);
        mt.w = rand_floats(&rng, (size_t)layers * s->in * s->out);
        mt.dw = rand_floats(&rng, (size_t)layers * s->in * s->out);
        if (!mt.x || !mt.y || !mt.dy || !mt.dx || !mt.w || !mt.dw) {
            fprintf(stderr, "gemm_small: out of memory\n");
            return 1;
        }
        int m = s->ta == PT_TRANS ? s->in : rows, k = s->ta == PT_TRANS ? rows : s->in;
        if (s->tb == PT_TRANS)
            k = s->out;
        double flops = 2.0 * rows * s->in * s->out;
        double tc = time_calls(s, &mt, PT_GEMM_ISA_NONE, reps);
        double t5 = cpu >= PT_GEMM_ISA_AVX512 ? time_calls(s, &mt, PT_GEMM_ISA_AVX512, reps) : NAN;
        double t2 = cpu >= PT_GEMM_ISA_AVX2 ? time_calls(s, &mt, PT_GEMM_ISA_AVX2, reps) : NAN;
        double best = cpu >= PT_GEMM_ISA_AVX512 ? t5 : t2;
        int fits = pt_gemm_small_fits(s->ta, s->tb, m, s->tb == PT_TRANS ? s->in : s->out, k);
        printf("%s %4dx%-4d %7.1f (%3.0f) %7.1f (%3.0f) %7.1f (%3.0f) %7.2fx %10.2e%s\n", s->what,
               s->in, s->out, tc * 1e6, flops / tc * 1e-9, t5 * 1e6, flops / t5 * 1e-9, t2 * 1e6,
               flops / t2 * 1e-9, tc / best, cpu ? rel_diff(s, &mt, cpu) : NAN,
               fits ? "" : "  (not taken: shape)");
        free(mt.x);
        free(mt.y);
        free(mt.dy);
        free(mt.dx);
        free(mt.w);
        free(mt.dw);
    }
    printf("figures: microseconds a call (GFLOP/s)\n");
    return 0;
}
