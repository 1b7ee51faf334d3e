/* Data sets: the real Fashion-MNIST files, the bad IDX corpus, the synthetic
 * sets and the per-epoch order. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/data.h"
#include "tests/test.h"

#define SMALL_IMAGES 10
#define PX           (28 * 28)

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes a valid gzip IDX file of unsigned bytes. */
static int write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims,
                     const unsigned char *data, size_t len)
{
    gzFile f = gzopen(path, "wb");
    if (!f)
        return -1;
    unsigned char head[16];
    be32(head, magic);
    for (int d = 0; d < ndims; d++)
        be32(head + 4 + 4 * d, dims[d]);
    int ok = gzwrite(f, head, 4 + 4 * (unsigned)ndims) > 0 && gzwrite(f, data, (unsigned)len) > 0;
    return gzclose(f) == Z_OK && ok ? 0 : -1;
}

/* A folder with a valid 10-image train split, pixel p of image i = (i*PX+p)*7 % 256 and
 * label of image i = (i * 3) % 10. */
static void make_small_fmnist(const char *dir)
{
    static unsigned char px[SMALL_IMAGES * PX];
    unsigned char lab[SMALL_IMAGES];
    for (int i = 0; i < SMALL_IMAGES * PX; i++)
        px[i] = (unsigned char)((i * 7) % 256);
    for (int i = 0; i < SMALL_IMAGES; i++)
        lab[i] = (unsigned char)((i * 3) % 10);
    char path[512];
    uint32_t idims[3] = {SMALL_IMAGES, 28, 28}, ldims[1] = {SMALL_IMAGES};
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    REQUIRE(write_idx(path, 0x803, idims, 3, px, sizeof px) == 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    REQUIRE(write_idx(path, 0x801, ldims, 1, lab, sizeof lab) == 0);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    REQUIRE(in && out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
}

static char *make_tmpdir(void)
{
    static char tmpl[64];
    snprintf(tmpl, sizeof tmpl, "/tmp/pt_data_test.XXXXXX");
    return mkdtemp(tmpl);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static void test_small_valid_folder(void)
{
    char *dir = make_tmpdir();
    REQUIRE(dir);
    make_small_fmnist(dir);
    pt_dataset *ds = NULL;
    pt_error err = {0};
    REQUIRE(pt_dataset_fmnist_load(dir, PT_DATA_TRAIN, 0, &ds, &err) == 0);
    CHECK(pt_dataset_count(ds) == SMALL_IMAGES);
    CHECK(pt_dataset_input_elems(ds) == PX);
    int64_t idx[2] = {7, 2};
    float x[2 * PX];
    int32_t lab[2];
    REQUIRE(pt_dataset_get_batch(ds, idx, 2, x, lab) == 0);
    CHECK(lab[0] == 1 && lab[1] == 6);
    CHECK_NEAR(x[5], ((7 * PX + 5) * 7 % 256) / 255.0, 1e-6);
    CHECK_NEAR(x[PX + 100], ((2 * PX + 100) * 7 % 256) / 255.0, 1e-6);
    pt_dataset_free(&ds);
    CHECK(ds == NULL);

    /* Normalised pixels are (p/255 - mean) / std. */
    REQUIRE(pt_dataset_fmnist_load(dir, PT_DATA_TRAIN, 1, &ds, &err) == 0);
    REQUIRE(pt_dataset_get_batch(ds, idx, 1, x, NULL) == 0);
    CHECK_NEAR(x[5], (((7 * PX + 5) * 7 % 256) / 255.0 - PT_FMNIST_MEAN) / PT_FMNIST_STD, 1e-5);
    int64_t bad = SMALL_IMAGES;
    CHECK(pt_dataset_get_batch(ds, &bad, 1, x, lab) == PT_ERANGE);
    bad = -1;
    CHECK(pt_dataset_get_batch(ds, &bad, 1, x, lab) == PT_ERANGE);
    pt_dataset_free(&ds);
    remove_dir(dir);
}

static void test_missing_names_package(void)
{
    char *dir = make_tmpdir();
    REQUIRE(dir);
    pt_dataset *ds = NULL;
    pt_error err = {0};
    setenv(PT_FMNIST_DIR_ENV, dir, 1);
    CHECK(pt_dataset_fmnist_load(NULL, PT_DATA_TEST, 0, &ds, &err) == PT_ENOTFOUND);
    unsetenv(PT_FMNIST_DIR_ENV);
    CHECK(ds == NULL);
    CHECK_STR_CONTAINS(err.msg, "t10k-images-idx3-ubyte.gz: not found");
    CHECK_STR_CONTAINS(err.msg, "apt-get install dataset-fashion-mnist");
    CHECK_STR_CONTAINS(err.msg, dir);
    remove_dir(dir);
}

/* Every tests/data/bad/idx/<case>.<file> replaces <file> in a valid folder and
 * must fail with the error in <case>.<file>.expect, naming the file. */
static void test_bad_idx_corpus(void)
{
    const char *bad_dir = pt_test_path("tests/data/bad/idx");
    DIR *d = opendir(bad_dir);
    REQUIRE(d);
    int cases = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t n = strlen(name);
        if (n < 4 || strcmp(name + n - 3, ".gz"))
            continue;
        const char *role = strchr(name, '.') + 1;
        char path[512], expect_path[600], expect[512] = {0};
        snprintf(path, sizeof path, "%s/%s", bad_dir, name);
        snprintf(expect_path, sizeof expect_path, "%s.expect", path);
        FILE *ef = fopen(expect_path, "r");
        CHECK_MSG(ef != NULL, "%s has no .expect file", name);
        if (!ef)
            continue;
        if (!fgets(expect, sizeof expect, ef))
            expect[0] = '\0';
        fclose(ef);
        expect[strcspn(expect, "\n")] = '\0';

        char *dir = make_tmpdir();
        REQUIRE(dir);
        make_small_fmnist(dir);
        char target[512];
        snprintf(target, sizeof target, "%s/%s", dir, role);
        copy_file(path, target);
        pt_dataset *ds = NULL;
        pt_error err = {0};
        int rc = pt_dataset_fmnist_load(dir, PT_DATA_TRAIN, 0, &ds, &err);
        CHECK_MSG(rc < 0 && ds == NULL, "%s: loaded without error", name);
        CHECK_MSG(strstr(err.msg, expect) != NULL, "%s: error \"%s\" lacks \"%s\"", name, err.msg,
                  expect);
        CHECK_MSG(strstr(err.msg, role) != NULL, "%s: error \"%s\" does not name the file", name,
                  err.msg);
        pt_dataset_free(&ds);
        remove_dir(dir);
        cases++;
    }
    closedir(d);
    CHECK(cases >= 10);
}

/* The installed data set: Fashion-MNIST has 6000 training and 1000 test images
 * of each class, and mean training pixel PT_FMNIST_MEAN. */
static void test_real_fashion_mnist(void)
{
    pt_dataset *train = NULL, *test = NULL;
    pt_error err = {0};
    int rc = pt_dataset_fmnist_load(NULL, PT_DATA_TRAIN, 0, &train, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    REQUIRE(rc == 0);
    REQUIRE(pt_dataset_fmnist_load(NULL, PT_DATA_TEST, 0, &test, &err) == 0);
    CHECK(pt_dataset_count(train) == 60000);
    CHECK(pt_dataset_count(test) == 10000);
    CHECK(pt_dataset_classes(train) == 10);
    pt_dataset *sets[2] = {train, test};
    for (int s = 0; s < 2; s++) {
        int64_t n = pt_dataset_count(sets[s]);
        int64_t per_class[10] = {0};
        double sum = 0, lo = 1, hi = 0;
        static float x[PX];
        for (int64_t i = 0; i < n; i++) {
            int32_t lab;
            REQUIRE(pt_dataset_get_batch(sets[s], &i, 1, x, &lab) == 0);
            REQUIRE(lab >= 0 && lab < 10);
            per_class[lab]++;
            for (int p = 0; p < PX; p++) {
                sum += x[p];
                lo = x[p] < lo ? x[p] : lo;
                hi = x[p] > hi ? x[p] : hi;
            }
        }
        for (int c = 0; c < 10; c++)
            CHECK(per_class[c] == n / 10);
        CHECK(lo == 0.0 && hi == 1.0);
        if (s == 0)
            CHECK_NEAR(sum / ((double)n * PX), PT_FMNIST_MEAN, 5e-4);
    }
    pt_dataset_free(&train);
    pt_dataset_free(&test);
}

static void test_synth_class(void)
{
    const int64_t elems = 50, n = 2000;
    const int classes = 5;
    pt_dataset *a = NULL, *b = NULL, *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_dataset_synth_class_new(n, elems, classes, 42, PT_DATA_TRAIN, &a, &err) == 0);
    REQUIRE(pt_dataset_synth_class_new(n, elems, classes, 42, PT_DATA_TRAIN, &b, &err) == 0);
    pt_dataset *none = NULL;
    CHECK(pt_dataset_synth_class_new(0, elems, classes, 42, PT_DATA_TEST, &none, &err) ==
          PT_EINVAL);
    CHECK(none == NULL);
    REQUIRE(pt_dataset_synth_class_new(n, elems, classes, 42, PT_DATA_TEST, &t, &err) == 0);

    float *x = malloc(sizeof(float) * elems * n), *y = malloc(sizeof(float) * elems * n);
    int32_t *la = malloc(sizeof(int32_t) * n), *lb = malloc(sizeof(int32_t) * n);
    int64_t *idx = malloc(sizeof(int64_t) * n);
    REQUIRE(x && y && la && lb && idx);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    /* Same seed and split: the same samples, in any batch composition. */
    REQUIRE(pt_dataset_get_batch(a, idx, (int)n, x, la) == 0);
    int64_t rev[3] = {n - 1, 0, 17};
    REQUIRE(pt_dataset_get_batch(b, rev, 3, y, lb) == 0);
    CHECK(memcmp(y, x + (n - 1) * elems, sizeof(float) * elems) == 0 && lb[0] == la[n - 1]);
    CHECK(memcmp(y + elems, x, sizeof(float) * elems) == 0 && lb[1] == la[0]);
    CHECK(memcmp(y + 2 * elems, x + 17 * elems, sizeof(float) * elems) == 0 && lb[2] == la[17]);

    /* Learnable: class means estimated on train classify the test split. */
    double *mean = calloc((size_t)(classes * elems), sizeof(double));
    int count[5] = {0};
    for (int64_t i = 0; i < n; i++) {
        REQUIRE(la[i] >= 0 && la[i] < classes);
        count[la[i]]++;
        for (int64_t j = 0; j < elems; j++)
            mean[la[i] * elems + j] += x[i * elems + j];
    }
    for (int c = 0; c < classes; c++) {
        CHECK(count[c] > n / classes / 2);
        for (int64_t j = 0; j < elems; j++)
            mean[c * elems + j] /= count[c];
    }
    REQUIRE(pt_dataset_get_batch(t, idx, (int)n, y, lb) == 0);
    CHECK(memcmp(x, y, sizeof(float) * elems) != 0);
    int correct = 0;
    for (int64_t i = 0; i < n; i++) {
        int best = 0;
        double best_d = 1e300;
        for (int c = 0; c < classes; c++) {
            double dist = 0;
            for (int64_t j = 0; j < elems; j++) {
                double diff = y[i * elems + j] - mean[c * elems + j];
                dist += diff * diff;
            }
            if (dist < best_d) {
                best_d = dist;
                best = c;
            }
        }
        correct += best == lb[i];
    }
    CHECK_MSG(correct > 0.9 * n, "nearest-mean accuracy %d / %lld", correct, (long long)n);
    free(mean);
    free(x);
    free(y);
    free(la);
    free(lb);
    free(idx);
    pt_dataset_free(&a);
    pt_dataset_free(&b);
    pt_dataset_free(&t);
}

static void test_synth_tokens(void)
{
    const int seq = 16, vocab = 12;
    const int64_t n = 4000;
    pt_dataset *ds = NULL;
    pt_error err = {0};
    REQUIRE(pt_dataset_synth_tokens_new(n, seq, vocab, 7, PT_DATA_TRAIN, &ds, &err) == 0);
    CHECK(pt_dataset_input_elems(ds) == seq);
    CHECK(pt_dataset_labels_per_sample(ds) == seq);
    CHECK(pt_dataset_classes(ds) == vocab);
    float *x = malloc(sizeof(float) * seq * n);
    int32_t *lab = malloc(sizeof(int32_t) * seq * n);
    int64_t *idx = malloc(sizeof(int64_t) * n);
    REQUIRE(x && lab && idx);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    REQUIRE(pt_dataset_get_batch(ds, idx, (int)n, x, lab) == 0);
    /* Labels are the next tokens; transition counts give the chain back. */
    static int64_t trans[12][12];
    int shifted_ok = 1;
    for (int64_t i = 0; i < n; i++)
        for (int t = 0; t < seq; t++) {
            int cur = (int)x[i * seq + t], next = lab[i * seq + t];
            REQUIRE(cur >= 0 && cur < vocab && next >= 0 && next < vocab);
            REQUIRE((float)cur == x[i * seq + t]);
            if (t + 1 < seq && x[i * seq + t + 1] != (float)next)
                shifted_ok = 0;
            trans[cur][next]++;
        }
    CHECK(shifted_ok);
    /* Empirical conditional entropy matches the stated floor. */
    double h = 0, total = (double)n * seq;
    int succ_seen[12] = {0};
    for (int a = 0; a < vocab; a++) {
        int64_t row = 0, best = 0;
        int arg = 0;
        for (int b = 0; b < vocab; b++) {
            row += trans[a][b];
            if (trans[a][b] > best) {
                best = trans[a][b];
                arg = b;
            }
        }
        succ_seen[arg]++;
        CHECK_NEAR((double)best / row, PT_SYNTH_FOLLOW_P + (1 - PT_SYNTH_FOLLOW_P) / vocab, 0.03);
        for (int b = 0; b < vocab; b++)
            if (trans[a][b])
                h -= trans[a][b] / total * log((double)trans[a][b] / row);
    }
    /* The likely followers form a permutation. */
    for (int b = 0; b < vocab; b++)
        CHECK(succ_seen[b] == 1);
    CHECK_NEAR(h, pt_dataset_synth_tokens_entropy(vocab), 0.03);
    CHECK(pt_dataset_synth_tokens_entropy(vocab) < 0.5 * log(vocab));
    /* vocab 2: p = 0.95, q = 0.05. */
    CHECK_NEAR(pt_dataset_synth_tokens_entropy(2), -(0.95 * log(0.95) + 0.05 * log(0.05)), 1e-12);
    free(x);
    free(lab);
    free(idx);
    pt_dataset_free(&ds);
}

static void test_order(void)
{
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N];
    pt_data_order(N, 5, 0, a);
    pt_data_order(N, 5, 0, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    static char seen[N];
    int perm = 1;
    for (int i = 0; i < N; i++) {
        if (a[i] < 0 || a[i] >= N || seen[a[i]])
            perm = 0;
        else
            seen[a[i]] = 1;
    }
    CHECK(perm);
    pt_data_order(N, 5, 1, c);
    CHECK(memcmp(a, c, sizeof a) != 0);
    pt_data_order(N, 6, 0, c);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* Roughly uniform: over 4000 epochs of 10 items, item 0 lands in each slot
     * about 400 times (binomial sd ~19). */
    int64_t slot[10] = {0}, small[10];
    for (int e = 0; e < 4000; e++) {
        pt_data_order(10, 9, e, small);
        for (int i = 0; i < 10; i++)
            if (small[i] == 0)
                slot[i]++;
    }
    for (int i = 0; i < 10; i++)
        CHECK_MSG(slot[i] > 300 && slot[i] < 500, "slot %d: %lld", i, (long long)slot[i]);
}

static void test_limit(void)
{
    pt_dataset *ds = NULL;
    pt_error err = {0};
    REQUIRE(pt_dataset_synth_class_new(100, 3, 2, 1, PT_DATA_TRAIN, &ds, &err) == 0);
    pt_dataset_limit(ds, 0);
    CHECK(pt_dataset_count(ds) == 100);
    pt_dataset_limit(ds, 30);
    CHECK(pt_dataset_count(ds) == 30);
    int64_t i = 30;
    CHECK(pt_dataset_get_batch(ds, &i, 1, NULL, NULL) == PT_ERANGE);
    pt_dataset_limit(ds, 500);
    CHECK(pt_dataset_count(ds) == 30);
    pt_dataset_free(&ds);
    pt_dataset_free(&ds);
}

PT_TEST_MAIN({"small_valid_folder", test_small_valid_folder},
             {"missing_names_package", test_missing_names_package},
             {"bad_idx_corpus", test_bad_idx_corpus},
             {"real_fashion_mnist", test_real_fashion_mnist}, {"synth_class", test_synth_class},
             {"synth_tokens", test_synth_tokens}, {"order", test_order}, {"limit", test_limit})
