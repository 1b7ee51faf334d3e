/* Every CPU backend kernel against a straightforward double-precision
 * reference written here (the layer gradient checks only prove that a
 * forward and its backward agree, not that the forward is the right
 * function). Bound: max |got - want| / max(1, |want|) < KERNEL_TOL unless
 * stated. */
#include <stdint.h>

#include "runtime/backend.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define KERNEL_TOL 1e-5
#define GEMM_TOL   1e-4 /* float accumulation over k <= 70 terms of size <= 1 */

static const pt_backend *be;

static void fill_random(float *x, int64_t n, double lo, double hi, uint64_t seed)
{
    pt_rng r = pt_rng_make(seed, 0);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)pt_rng_uniform_range(&r, lo, hi);
}

static double worst(const float *got, const double *want, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
        if (!(e <= w)) /* NaN counts as worst */
            w = isnan(e) ? INFINITY : e;
    }
    return w;
}

static void test_gemm(void)
{
    enum { M = 7, N = 9, K = 70, BATCH = 3 };
    float a[BATCH][M * K], b[BATCH][K * N], c[BATCH][M * N];
    fill_random(&a[0][0], BATCH * M * K, -1, 1, 1);
    fill_random(&b[0][0], BATCH * K * N, -1, 1, 2);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            fill_random(&c[0][0], BATCH * M * N, -1, 1, 3);
            double want[BATCH][M * N], prod[M * N];
            for (int s = 0; s < BATCH; s++)
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double sum = 0;
                        for (int k = 0; k < K; k++) {
                            double av = ta ? a[s][k * M + i] : a[s][i * K + k];
                            double bv = tb ? b[s][j * K + k] : b[s][k * N + j];
                            sum += av * bv;
                        }
                        want[s][i * N + j] = 0.5 * sum + 2.0 * c[s][i * N + j];
                        if (s == 0)
                            prod[i * N + j] = sum;
                    }
            be->gemm_batched(be, ta, tb, M, N, K, 0.5f, a[0], ta ? M : K, M * K, b[0], tb ? K : N,
                             K * N, 2.0f, c[0], N, M * N, BATCH);
            CHECK_MSG(worst(c[0], want[0], BATCH * M * N) < GEMM_TOL, "gemm ta=%d tb=%d", ta, tb);
            /* beta 0 overwrites, even NaN */
            for (int i = 0; i < M * N; i++)
                c[0][i] = NAN;
            be->gemm(be, ta, tb, M, N, K, 1.0f, a[0], ta ? M : K, b[0], tb ? K : N, 0.0f, c[0], N);
            CHECK_MSG(worst(c[0], prod, M * N) < GEMM_TOL, "gemm beta=0 ta=%d tb=%d", ta, tb);
        }
}

static void test_vector_ops(void)
{
    enum { N = 37, R = 5, C = 11 };
    float x[N], y[N], z[N];
    double want[N];
    fill_random(x, N, -2, 2, 4);
    fill_random(y, N, -2, 2, 5);
    memcpy(z, y, sizeof y);
    be->axpy(be, N, 0.25f, x, z);
    for (int i = 0; i < N; i++)
        want[i] = y[i] + 0.25 * x[i];
    CHECK(worst(z, want, N) < KERNEL_TOL);
    be->scale(be, N, -3.0f, z);
    for (int i = 0; i < N; i++)
        want[i] *= -3.0;
    CHECK(worst(z, want, N) < KERNEL_TOL);
    be->add(be, N, x, y, z);
    for (int i = 0; i < N; i++)
        want[i] = (double)x[i] + y[i];
    CHECK(worst(z, want, N) < KERNEL_TOL);
    be->fill(be, N, 1.5f, z);
    for (int i = 0; i < N; i++)
        want[i] = 1.5;
    CHECK(worst(z, want, N) == 0);
    double d = 0;
    for (int i = 0; i < N; i++)
        d += (double)x[i] * y[i];
    CHECK_NEAR(be->dot(be, N, x, y), d, 1e-9);

    float m[R * C], v[C], out[C];
    fill_random(m, R * C, -1, 1, 6);
    fill_random(v, C, -1, 1, 7);
    double wm[R * C], wc[C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            wm[r * C + c] = (double)m[r * C + c] + v[c];
    be->add_row_vector(be, R, C, v, m);
    CHECK(worst(m, wm, R * C) < KERNEL_TOL);
    for (int c = 0; c < C; c++) {
        wc[c] = 10.0;
        for (int r = 0; r < R; r++)
            wc[c] += m[r * C + c];
        out[c] = 10.0f;
    }
    be->col_sum(be, R, C, m, 1.0f, out);
    CHECK(worst(out, wc, C) < KERNEL_TOL);
    be->col_sum(be, R, C, m, 0.0f, out);
    for (int c = 0; c < C; c++)
        wc[c] -= 10.0;
    CHECK(worst(out, wc, C) < KERNEL_TOL);

    /* memory */
    float *dev = be->alloc(be, N * sizeof(float));
    REQUIRE(dev && ((uintptr_t)dev % 64) == 0);
    be->upload(be, dev, x, sizeof x);
    be->copy(be, dev + 1, dev, 4 * sizeof(float)); /* overlapping */
    be->download(be, z, dev, sizeof z);
    CHECK(z[0] == x[0] && z[1] == x[0] && z[4] == x[3] && z[5] == x[5]);
    be->synchronize(be);
    be->free(be, dev);
    be->free(be, NULL);
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Pointwise activations over a range that includes both tails (where a
 * naive exp overflows) and values near 0. */
static void test_activations(void)
{
    enum { N = 4001 };
    static float x[N], y[N], dy[N], dx[N];
    static double want[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(-100.0 + 200.0 * i / (N - 1)) * (i % 2 ? 1.0f : 0.05f);
    fill_random(dy, N, -1, 1, 8);
    be->relu_fwd(be, N, x, y);
    for (int i = 0; i < N; i++)
        want[i] = x[i] > 0 ? x[i] : 0;
    CHECK(worst(y, want, N) == 0);
    be->relu_bwd(be, N, y, dy, dx);
    for (int i = 0; i < N; i++)
        want[i] = x[i] > 0 ? dy[i] : 0;
    CHECK(worst(dx, want, N) == 0);

    be->gelu_fwd(be, N, x, y);
    for (int i = 0; i < N; i++)
        want[i] = gelu_ref(x[i]);
    double e = worst(y, want, N);
    CHECK_MSG(e < KERNEL_TOL, "gelu forward error %.3g", e);
    be->gelu_bwd(be, N, x, dy, dx);
    for (int i = 0; i < N; i++) {
        double h = 1e-4 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
        want[i] = dy[i] * (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
    }
    e = worst(dx, want, N);
    CHECK_MSG(e < 1e-4, "gelu backward error %.3g", e);
    /* in place (dx aliasing dy) gives the same */
    float *copy = malloc(sizeof dy);
    memcpy(copy, dy, sizeof dy);
    be->gelu_bwd(be, N, x, copy, copy);
    CHECK(memcmp(copy, dx, sizeof dx) == 0);
    free(copy);
}

static void test_layernorm(void)
{
    enum { R = 4, C = 13 };
    float x[R * C], g[C], b[C], y[R * C], mean[R], rstd[R];
    fill_random(x, R * C, -3, 5, 9);
    fill_random(g, C, 0.5, 1.5, 10);
    fill_random(b, C, -1, 1, 11);
    be->layernorm_fwd(be, R, C, 1e-5f, x, g, b, y, mean, rstd);
    double want[R * C];
    for (int r = 0; r < R; r++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++)
            mu += x[r * C + c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
        var /= C;
        CHECK_NEAR(mean[r], mu, 1e-6);
        CHECK_NEAR(rstd[r], 1 / sqrt(var + 1e-5), 1e-5);
        for (int c = 0; c < C; c++)
            want[r * C + c] = (x[r * C + c] - mu) / sqrt(var + 1e-5) * g[c] + b[c];
    }
    CHECK(worst(y, want, R * C) < KERNEL_TOL);
}

static void test_embedding(void)
{
    enum { NS = 2, SEQ = 3, DIM = 4, VOCAB = 5 };
    float ids[NS * SEQ] = {0, 4, 2, 2, 2, 1};
    float table[VOCAB * DIM], pos[SEQ * DIM], y[NS * SEQ * DIM];
    fill_random(table, VOCAB * DIM, -1, 1, 12);
    fill_random(pos, SEQ * DIM, -1, 1, 13);
    REQUIRE(be->embedding_fwd(be, NS, SEQ, DIM, VOCAB, ids, table, pos, y) == 0);
    double want[NS * SEQ * DIM];
    for (int i = 0; i < NS * SEQ; i++)
        for (int c = 0; c < DIM; c++)
            want[i * DIM + c] = (double)table[(int)ids[i] * DIM + c] + pos[(i % SEQ) * DIM + c];
    CHECK(worst(y, want, NS * SEQ * DIM) < KERNEL_TOL);
    /* backward: token 2 appears three times, position 1 twice */
    float dy[NS * SEQ * DIM], dt[VOCAB * DIM], dp[SEQ * DIM];
    for (int i = 0; i < NS * SEQ * DIM; i++)
        dy[i] = 1.0f;
    memset(dt, 0, sizeof dt);
    memset(dp, 0, sizeof dp);
    be->embedding_bwd(be, NS, SEQ, DIM, ids, dy, dt, dp);
    CHECK(dt[2 * DIM] == 3.0f && dt[0] == 1.0f && dt[3 * DIM] == 0.0f && dt[4 * DIM] == 1.0f);
    CHECK(dp[0] == 2.0f && dp[DIM] == 2.0f);
    ids[1] = 5.0f;
    CHECK(be->embedding_fwd(be, NS, SEQ, DIM, VOCAB, ids, table, pos, y) == PT_ERANGE);
    ids[1] = -1.0f;
    CHECK(be->embedding_fwd(be, NS, SEQ, DIM, VOCAB, ids, table, NULL, y) == PT_ERANGE);
}

/* Causal softmax and cross-entropy, including rows with large logits. */
static void test_softmaxes(void)
{
    enum { SEQ = 6, ROWS = 2 * SEQ, CL = 7, XR = 4 };
    float s[ROWS * SEQ], p[ROWS * SEQ];
    fill_random(s, ROWS * SEQ, -30, 30, 14);
    memcpy(p, s, sizeof s);
    be->attention_softmax_fwd(be, ROWS, SEQ, p);
    double want[ROWS * SEQ];
    for (int r = 0; r < ROWS; r++) {
        int t = r % SEQ;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++)
            mx = s[r * SEQ + j] > mx ? s[r * SEQ + j] : mx;
        for (int j = 0; j <= t; j++)
            sum += exp(s[r * SEQ + j] - mx);
        for (int j = 0; j < SEQ; j++)
            want[r * SEQ + j] = j <= t ? exp(s[r * SEQ + j] - mx) / sum : 0.0;
    }
    CHECK(worst(p, want, ROWS * SEQ) < KERNEL_TOL);
    for (int r = 0; r < ROWS; r++)
        for (int j = r % SEQ + 1; j < SEQ; j++)
            CHECK(p[r * SEQ + j] == 0.0f);
    /* backward: ds = p (dp - <p, dp>) */
    float dp[ROWS * SEQ], ds[ROWS * SEQ];
    fill_random(dp, ROWS * SEQ, -1, 1, 15);
    be->attention_softmax_bwd(be, ROWS, SEQ, p, dp, ds);
    for (int r = 0; r < ROWS; r++) {
        double dot = 0;
        for (int j = 0; j < SEQ; j++)
            dot += (double)p[r * SEQ + j] * dp[r * SEQ + j];
        for (int j = 0; j < SEQ; j++)
            want[r * SEQ + j] = p[r * SEQ + j] * (dp[r * SEQ + j] - dot);
    }
    CHECK(worst(ds, want, ROWS * SEQ) < KERNEL_TOL);

    float logits[XR * CL], probs[XR * CL], dl[XR * CL];
    int32_t labels[XR] = {0, 6, 3, 3};
    fill_random(logits, XR * CL, -50, 50, 16);
    double loss = 0, wloss = 0, wp[XR * CL];
    REQUIRE(be->softmax_xent_fwd(be, XR, CL, logits, labels, probs, &loss) == 0);
    for (int r = 0; r < XR; r++) {
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < CL; c++)
            mx = logits[r * CL + c] > mx ? logits[r * CL + c] : mx;
        for (int c = 0; c < CL; c++)
            sum += exp(logits[r * CL + c] - mx);
        for (int c = 0; c < CL; c++)
            wp[r * CL + c] = exp(logits[r * CL + c] - mx) / sum;
        wloss += log(sum) + mx - logits[r * CL + labels[r]];
    }
    CHECK(worst(probs, wp, XR * CL) < KERNEL_TOL);
    CHECK_NEAR(loss, wloss, 1e-5 * fabs(wloss));
    be->softmax_xent_bwd(be, XR, CL, probs, labels, 0.5f, dl);
    for (int r = 0; r < XR; r++)
        for (int c = 0; c < CL; c++)
            wp[r * CL + c] = 0.5 * (probs[r * CL + c] - (c == labels[r]));
    CHECK(worst(dl, wp, XR * CL) < KERNEL_TOL);
    labels[2] = CL;
    CHECK(be->softmax_xent_fwd(be, XR, CL, logits, labels, probs, &loss) == PT_ERANGE);
}

static void test_defaults(void)
{
    CHECK(pt_backend_default() == pt_backend_cpu());
    CHECK(strcmp(pt_backend_cpu()->name, "cpu") == 0);
    /* every entry of the table is filled */
    const void *const *slots = (const void *const *)&pt_backend_cpu()->alloc;
    const void *const *end = (const void *const *)(&pt_backend_cpu()->attention_fused_bwd + 1);
    for (const void *const *p = slots; p < end; p++)
        CHECK(*p != NULL);
}

static void setup(void)
{
    be = pt_backend_cpu();
}

PT_TEST_MAIN({"setup", setup}, {"gemm", test_gemm}, {"vector_ops", test_vector_ops},
             {"activations", test_activations}, {"layernorm", test_layernorm},
             {"embedding", test_embedding}, {"softmaxes", test_softmaxes},
             {"defaults", test_defaults})
