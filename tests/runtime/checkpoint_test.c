/* Per-layer checkpoints: round trips of weights and optimizer state, loading
 * under another partition, two-phase saves, corrupt and truncated files, a
 * crash between writing tensor files and the index, and a weight file built
 * by hand from docs/formats.md. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "runtime/rng.h"
#include "tests/test.h"

#define BATCH 4

/* Every parametrised kind: linear, layernorm, residual (nested linear/gelu). */
static const char *MLP_JSON =
    "{\"v\":1,\"name\":\"ckpt-mlp\",\"input\":{\"kind\":\"float\",\"shape\":[6]},\"layers\":["
    "{\"type\":\"linear\",\"out\":5},{\"type\":\"relu\"},{\"type\":\"layernorm\"},"
    "{\"type\":\"residual\",\"body\":[{\"type\":\"linear\",\"out\":7},{\"type\":\"gelu\"},"
    "{\"type\":\"linear\",\"out\":5}]},"
    "{\"type\":\"linear\",\"out\":3,\"bias\":false},{\"type\":\"softmax_xent\",\"classes\":3}]}";

/* Embedding with positions and attention. */
static const char *GPT_JSON =
    "{\"v\":1,\"name\":\"ckpt-gpt\",\"input\":{\"kind\":\"tokens\",\"shape\":[4]},\"layers\":["
    "{\"type\":\"embedding\",\"vocab\":7,\"dim\":8,\"positional\":true},"
    "{\"type\":\"residual\",\"body\":[{\"type\":\"layernorm\"},{\"type\":\"attention\","
    "\"heads\":2}]},{\"type\":\"linear\",\"out\":7},{\"type\":\"softmax_xent\",\"classes\":7}]}";

static char g_dir[64];

static const char *fresh_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/pt_ckpt_test.XXXXXX");
    return mkdtemp(g_dir);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static pt_model_spec *spec_of(const char *json)
{
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    if (pt_model_spec_parse(json, "test", &spec, &err) < 0)
        fprintf(stderr, "spec: %s\n", err.msg);
    return spec;
}

static pt_net *make_net(const pt_model_spec *spec, int first, int last, uint64_t seed)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = first;
    cfg.last = last;
    cfg.max_batch = BATCH;
    cfg.seed = seed;
    pt_net *net = NULL;
    pt_error err = {0};
    if (pt_net_create(spec, &cfg, &net, &err) < 0)
        fprintf(stderr, "net: %s\n", err.msg);
    return net;
}

static pt_optim *make_optim(pt_net *net, pt_optim_kind kind)
{
    pt_optim_spec os = pt_optim_default(kind);
    os.lr = 0.01f;
    pt_optim *o = NULL;
    pt_error err = {0};
    if (pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &o, &err) < 0)
        fprintf(stderr, "optim: %s\n", err.msg);
    return o;
}

/* Host copy of the net's parameters (caller frees). */
static float *params_of(pt_net *net)
{
    int64_t n = pt_net_param_count(net);
    float *h = malloc((size_t)n * sizeof(float));
    const pt_backend *be = pt_net_backend(net);
    be->download(be, h, pt_net_params(net), (size_t)n * sizeof(float));
    return h;
}

static float *state_of(pt_optim *o, int i)
{
    int64_t n = pt_optim_count(o);
    float *h = malloc((size_t)n * sizeof(float));
    pt_optim_get_state(o, i, 0, n, h);
    return h;
}

/* One training step on a batch drawn from `key` (whole model nets only). */
static void train_step(const pt_model_spec *spec, pt_net *net, pt_optim *o, uint64_t key)
{
    int64_t in = pt_net_in_elems(net), lps = pt_net_label_count(net);
    float x[BATCH * 64];
    int32_t labels[BATCH * 8];
    pt_rng rng = pt_rng_make(key, 0);
    for (int64_t i = 0; i < BATCH * in; i++)
        x[i] = spec->input_kind == PT_INPUT_TOKENS ? (float)pt_rng_below(&rng, 7)
                                                   : (float)pt_rng_uniform_range(&rng, -1, 1);
    for (int64_t i = 0; i < BATCH * lps; i++)
        labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_net_classes(net));
    float *xd = pt_arena_alloc_floats(pt_net_arena(net), PT_MEM_ACTS, BATCH * in);
    const pt_backend *be = pt_net_backend(net);
    be->upload(be, xd, x, (size_t)(BATCH * in) * sizeof(float));
    pt_net_zero_grads(net);
    CHECK(pt_net_forward(net, 0, NULL, xd, BATCH, labels, NULL, NULL) == 0);
    CHECK(pt_net_backward(net, 0, NULL, NULL, NULL, NULL) == 0);
    pt_optim_step(o, pt_net_params(net), pt_net_grads(net));
    pt_arena_free(pt_net_arena(net), xd);
}

static int same_floats(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* The tensor list of every layer of the shipped models matches the net's slices. */
static void test_layouts_match_net(void)
{
    const char *models[] = {"fmnist-mlp", "gpt-tiny", "fmnist-mlp-deep"};
    for (int m = 0; m < 3; m++) {
        pt_model_spec *spec = NULL;
        pt_error err = {0};
        REQUIRE(pt_model_spec_find(models[m], &spec, &err) == 0);
        pt_net *net = make_net(spec, 0, spec->layer_count, 1);
        REQUIRE(net);
        pt_ckpt_tensor ts[64];
        int64_t total = 0;
        for (int l = 0; l < spec->layer_count; l++) {
            int n = pt_ckpt_layer_tensors(spec, l, ts, 64, &err);
            REQUIRE(n >= 0 && n <= 64);
            int64_t off, count, sum = 0;
            REQUIRE(pt_net_layer_range(net, l, &off, &count) == 0);
            for (int i = 0; i < n; i++)
                sum += ts[i].count;
            CHECK_MSG(sum == count, "%s layer %d: tensors %lld, net %lld", models[m], l,
                      (long long)sum, (long long)count);
            total += sum;
        }
        CHECK(total == pt_net_param_count(net) || total <= pt_net_param_count(net));
        pt_net_destroy(&net);
        pt_model_spec_free(&spec);
    }
    /* gpt-tiny's first attention block: body.0 layernorm, body.1 attention. */
    pt_model_spec *spec = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt-tiny", &spec, &err) == 0);
    pt_ckpt_tensor ts[16];
    int n = pt_ckpt_layer_tensors(spec, 1, ts, 16, &err);
    REQUIRE(n == 6);
    CHECK(!strcmp(ts[0].name, "body.0.gain") && ts[0].shape[0] == 64);
    CHECK(!strcmp(ts[2].name, "body.1.wqkv") && ts[2].shape[0] == 64 && ts[2].shape[1] == 192);
    n = pt_ckpt_layer_tensors(spec, 0, ts, 16, &err);
    REQUIRE(n == 2);
    CHECK(!strcmp(ts[1].name, "pos") && ts[1].shape[0] == 32 && ts[1].shape[1] == 64);
    pt_model_spec_free(&spec);
}

static void roundtrip(const char *json, pt_optim_kind kind)
{
    pt_model_spec *spec = spec_of(json);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    int L = spec->layer_count;
    pt_net *a = make_net(spec, 0, L, 11), *b = make_net(spec, 0, L, 22);
    pt_optim *oa = make_optim(a, kind), *ob = make_optim(b, kind);
    REQUIRE(a && b && oa && ob);
    for (int s = 0; s < 3; s++)
        train_step(spec, a, oa, (uint64_t)s);
    pt_error err = {0};
    int rc = pt_ckpt_save(dir, spec, a, oa, 3, 0.5, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    float *pa = params_of(a), *pb = params_of(b);
    int64_t n = pt_net_param_count(a);
    CHECK(!same_floats(pa, pb, n));
    free(pb);
    pt_ckpt_info info;
    rc = pt_ckpt_load(dir, spec, b, ob, &info, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(info.step == 3 && info.epoch == 0.5 && info.optim_loaded && info.has_optimizer);
    CHECK(info.optimizer.kind == kind);
    pb = params_of(b);
    CHECK(same_floats(pa, pb, n));
    CHECK(pt_optim_steps(ob) == 3);
    for (int i = 0; i < pt_optim_state_count(oa); i++) {
        float *sa = state_of(oa, i), *sb = state_of(ob, i);
        CHECK(same_floats(sa, sb, n));
        free(sa);
        free(sb);
    }
    /* Continuing from the checkpoint is continuing the run. */
    train_step(spec, a, oa, 99);
    train_step(spec, b, ob, 99);
    free(pa);
    free(pb);
    pa = params_of(a);
    pb = params_of(b);
    CHECK(same_floats(pa, pb, n));
    free(pa);
    free(pb);

    /* The index re-parses to what was written and validates. */
    pt_ckpt_index *ix = NULL;
    REQUIRE(pt_ckpt_index_load(dir, &ix, &err) == 0);
    CHECK(ix->step == 3 && ix->optim_steps == 3 && !strcmp(ix->model, spec->name));
    CHECK(ix->layer_count == L);
    const pt_ckpt_layer *l0 = pt_ckpt_index_find(ix, 0);
    REQUIRE(l0);
    CHECK(!strcmp(l0->name, spec->layers[0].name));
    pt_ckpt_tensor first[8];
    REQUIRE(pt_ckpt_layer_tensors(spec, 0, first, 8, &err) > 0);
    char state[PT_CKPT_NAME_MAX + 16];
    snprintf(state, sizeof state, "%s.%s", first[0].name,
             kind == PT_OPTIM_ADAM ? "adam_v" : "momentum");
    CHECK_MSG(pt_ckpt_layer_tensor(l0, state) != NULL, "no %s", state);
    pt_ckpt_index_free(&ix);
    CHECK(ix == NULL);

    pt_optim_destroy(&oa);
    pt_optim_destroy(&ob);
    pt_net_destroy(&a);
    pt_net_destroy(&b);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

static void test_roundtrip_mlp_adam(void)
{
    roundtrip(MLP_JSON, PT_OPTIM_ADAM);
}

static void test_roundtrip_gpt_sgd(void)
{
    roundtrip(GPT_JSON, PT_OPTIM_SGD);
}

/* Save the whole model, load layers [2, 5) into a stage net: the stage holds
 * exactly those layers' weights. Then save two stages into one folder and
 * load the whole model from it. */
static void test_other_partition(void)
{
    pt_model_spec *spec = spec_of(MLP_JSON);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    int L = spec->layer_count;
    pt_net *full = make_net(spec, 0, L, 5), *stage = make_net(spec, 2, 5, 6);
    REQUIRE(full && stage);
    pt_error err = {0};
    REQUIRE(pt_ckpt_save(dir, spec, full, NULL, 7, 1, &err) == 0);
    pt_ckpt_info info;
    int rc = pt_ckpt_load(dir, spec, stage, NULL, &info, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(info.step == 7 && !info.optim_loaded && !info.has_optimizer);
    for (int l = 2; l < 5; l++) {
        int64_t off, count;
        REQUIRE(pt_net_layer_range(stage, l, &off, &count) == 0);
        float *x = malloc((size_t)(count + 1) * sizeof(float));
        float *y = malloc((size_t)(count + 1) * sizeof(float));
        REQUIRE(pt_net_get_layer(stage, l, NULL, x, count) == 0);
        REQUIRE(pt_net_get_layer(full, l, NULL, y, count) == 0);
        CHECK(same_floats(x, y, count));
        free(x);
        free(y);
    }
    remove_dir(dir);

    /* Two stages, two-phase: each writes its layers, one commit. */
    REQUIRE(fresh_dir());
    pt_net *s0 = make_net(spec, 0, 3, 31), *s1 = make_net(spec, 3, L, 32);
    pt_optim *o0 = make_optim(s0, PT_OPTIM_SGD), *o1 = make_optim(s1, PT_OPTIM_SGD);
    REQUIRE(s0 && s1 && o0 && o1);
    pt_ckpt_layer *l0 = NULL, *l1 = NULL;
    int n0 = 0, n1 = 0;
    REQUIRE(pt_ckpt_write_layers(dir, spec, s0, o0, 4, &l0, &n0, &err) == 0);
    REQUIRE(pt_ckpt_write_layers(dir, spec, s1, o1, 4, &l1, &n1, &err) == 0);
    CHECK(n0 == 3 && n1 == L - 3);
    pt_ckpt_layer *all = calloc((size_t)(n0 + n1), sizeof *all);
    memcpy(all, l0, (size_t)n0 * sizeof *all);
    memcpy(all + n0, l1, (size_t)n1 * sizeof *all);
    pt_ckpt_index header = {.step = 4, .epoch = 0.25, .has_optimizer = 1};
    snprintf(header.model, sizeof header.model, "%s", spec->name);
    header.optimizer = *pt_optim_get_spec(o0);
    header.optim_steps = 4;
    /* Before the commit there is no checkpoint to load. */
    pt_net *whole = make_net(spec, 0, L, 33);
    pt_optim *ow = make_optim(whole, PT_OPTIM_SGD);
    CHECK(pt_ckpt_load(dir, spec, whole, ow, NULL, &err) == PT_ENOTFOUND);
    REQUIRE(pt_ckpt_commit(dir, &header, all, n0 + n1, &err) == 0);
    free(all);
    pt_ckpt_layers_free(&l0, n0);
    pt_ckpt_layers_free(&l1, n1);
    rc = pt_ckpt_load(dir, spec, whole, ow, &info, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(info.optim_loaded && pt_optim_steps(ow) == 4);
    float *pw = params_of(whole), *p0 = params_of(s0), *p1 = params_of(s1);
    int64_t off3, c3;
    REQUIRE(pt_net_layer_range(whole, 3, &off3, &c3) == 0);
    CHECK(same_floats(pw, p0, pt_net_param_count(s0)));
    CHECK(same_floats(pw + off3, p1, pt_net_param_count(s1)));
    free(pw);
    free(p0);
    free(p1);
    pt_optim_destroy(&o0);
    pt_optim_destroy(&o1);
    pt_optim_destroy(&ow);
    pt_net_destroy(&s0);
    pt_net_destroy(&s1);
    pt_net_destroy(&whole);
    pt_net_destroy(&full);
    pt_net_destroy(&stage);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

/* Files in dir other than index.json and index.lock. */
static int data_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.' && strcmp(e->d_name, PT_CKPT_INDEX_FILE) &&
             strcmp(e->d_name, PT_CKPT_LOCK_FILE);
    if (d)
        closedir(d);
    return n;
}

/* A crash after the tensor files of a new save but before its index leaves
 * the old checkpoint loadable, bit for bit; the commit then switches to the
 * new one and removes the old files. */
static void test_crash_before_index(void)
{
    pt_model_spec *spec = spec_of(MLP_JSON);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    int L = spec->layer_count;
    pt_net *net = make_net(spec, 0, L, 3), *other = make_net(spec, 0, L, 4);
    pt_optim *o = make_optim(net, PT_OPTIM_ADAM), *oo = make_optim(other, PT_OPTIM_ADAM);
    pt_error err = {0};
    train_step(spec, net, o, 1);
    REQUIRE(pt_ckpt_save(dir, spec, net, o, 1, 0, &err) == 0);
    int files_one = data_files(dir);
    float *old = params_of(net);
    train_step(spec, net, o, 2);
    pt_ckpt_layer *layers = NULL;
    int count = 0;
    REQUIRE(pt_ckpt_write_layers(dir, spec, net, o, 2, &layers, &count, &err) == 0);
    CHECK(data_files(dir) == 2 * files_one);
    /* "crash": no commit. */
    pt_ckpt_info info;
    REQUIRE(pt_ckpt_load(dir, spec, other, oo, &info, &err) == 0);
    CHECK(info.step == 1 && pt_optim_steps(oo) == 1);
    float *got = params_of(other);
    CHECK(same_floats(old, got, pt_net_param_count(net)));
    free(got);
    /* A later save after the crash still works and cleans up. */
    pt_ckpt_layers_free(&layers, count);
    REQUIRE(pt_ckpt_save(dir, spec, net, o, 2, 0, &err) == 0);
    REQUIRE(pt_ckpt_load(dir, spec, other, oo, &info, &err) == 0);
    CHECK(info.step == 2);
    float *now = params_of(net);
    got = params_of(other);
    CHECK(same_floats(now, got, pt_net_param_count(net)));
    CHECK(!same_floats(now, old, pt_net_param_count(net)));
    CHECK_MSG(data_files(dir) <= 2 * files_one, "%d files", data_files(dir));
    /* And a third save alternates back, leaving one file per tensor referenced. */
    REQUIRE(pt_ckpt_save(dir, spec, net, o, 3, 0, &err) == 0);
    CHECK_MSG(data_files(dir) == files_one, "%d files, expected %d", data_files(dir), files_one);
    free(old);
    free(now);
    free(got);
    pt_optim_destroy(&o);
    pt_optim_destroy(&oo);
    pt_net_destroy(&net);
    pt_net_destroy(&other);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

/* Rewrites the first occurrence of `from` in dir/index.json with `to`. */
static void edit_index(const char *dir, const char *from, const char *to)
{
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_INDEX_FILE);
    REQUIRE(pt_file_read(path, &text, NULL, NULL) == 0);
    char *at = strstr(text, from);
    REQUIRE(at);
    size_t n = strlen(text) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    REQUIRE(pt_file_write_atomic(path, out, strlen(out), NULL) == 0);
    free(text);
    free(out);
}

static int load_error(const char *dir, const pt_model_spec *spec, pt_net *net, char *msg)
{
    pt_error err = {0};
    int rc = pt_ckpt_load(dir, spec, net, NULL, NULL, &err);
    snprintf(msg, PT_ERROR_MAX, "%s", err.msg);
    return rc;
}

static void save_fresh(const char *dir, const pt_model_spec *spec, pt_net *net)
{
    pt_error err = {0};
    REQUIRE(pt_ckpt_save(dir, spec, net, NULL, 1, 0, &err) == 0);
}

static void test_corrupt_files(void)
{
    pt_model_spec *spec = spec_of(MLP_JSON);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    pt_net *net = make_net(spec, 0, spec->layer_count, 3);
    char msg[PT_ERROR_MAX], path[256];
    save_fresh(dir, spec, net);
    snprintf(path, sizeof path, "%s/layer000.weight.f32", dir);

    /* A flipped byte. */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, 17, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 17, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    CHECK(load_error(dir, spec, net, msg) == PT_EPARSE);
    CHECK_STR_CONTAINS(msg, "layer000.weight.f32: crc32 mismatch");

    /* Truncated. */
    save_fresh(dir, spec, net);
    pt_ckpt_index *ix = NULL;
    REQUIRE(pt_ckpt_index_load(dir, &ix, NULL) == 0);
    snprintf(path, sizeof path, "%s/%s", dir, pt_ckpt_index_find(ix, 0)->tensors[0].file);
    pt_ckpt_index_free(&ix);
    REQUIRE(truncate(path, 40) == 0);
    CHECK(load_error(dir, spec, net, msg) == PT_EPARSE);
    CHECK_STR_CONTAINS(msg, "truncated file size: tensor weight needs 30 floats (120 bytes)");
    CHECK_STR_CONTAINS(msg, path);

    /* Too long. */
    f = fopen(path, "ab");
    REQUIRE(f);
    static const char extra[100] = {0}; /* path's 256 bytes are not all set (valgrind) */
    fwrite(extra, 1, sizeof extra, f);
    fclose(f);
    CHECK(load_error(dir, spec, net, msg) == PT_EPARSE);
    CHECK_STR_CONTAINS(msg, "wrong file size");

    /* Missing. */
    unlink(path);
    CHECK(load_error(dir, spec, net, msg) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(msg, path);

    /* Shape and name mismatches between index and model. */
    save_fresh(dir, spec, net);
    edit_index(dir, "\"shape\":\t[6, 5]", "\"shape\":\t[5, 6]");
    CHECK(load_error(dir, spec, net, msg) == PT_EINVAL);
    CHECK_STR_CONTAINS(msg,
                       "layer 0 (linear0): tensor weight has shape [5, 6], the model needs [6, 5]");
    save_fresh(dir, spec, net);
    edit_index(dir, "\"name\":\t\"layernorm2\"", "\"name\":\t\"norm\"");
    CHECK(load_error(dir, spec, net, msg) == PT_EINVAL);
    CHECK_STR_CONTAINS(msg, "layer 2 is \"norm\" in the checkpoint, \"layernorm2\" in model");
    save_fresh(dir, spec, net);
    edit_index(dir, "\"index\":\t3", "\"index\":\t33");
    CHECK(load_error(dir, spec, net, msg) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(msg, "layer 3 (residual3) of model ckpt-mlp is not in it");

    /* No checkpoint at all. */
    CHECK(load_error("/nonexistent/pt", spec, net, msg) == PT_ENOTFOUND);
    CHECK_STR_CONTAINS(msg, "no checkpoint here");
    pt_net_destroy(&net);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

/* Every tests/data/bad/checkpoint/<case>.json is refused, as index.json, with
 * the message in <case>.expect, and leaves no index. */
static void test_bad_index_corpus(void)
{
    const char *dir = pt_test_path("tests/data/bad/checkpoint");
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *e;
    int cases = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        char path[512], expect_path[512], *text = NULL, *expect = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expect_path, sizeof expect_path, "%s/%.*s.expect", dir, (int)(n - 5), e->d_name);
        REQUIRE(pt_file_read(path, &text, NULL, NULL) == 0);
        CHECK_MSG(pt_file_read(expect_path, &expect, NULL, NULL) == 0, "%s: no .expect", e->d_name);
        if (expect)
            expect[strcspn(expect, "\n")] = '\0';
        pt_ckpt_index *ix = NULL;
        pt_error err = {0};
        int rc = pt_ckpt_index_parse(text, "index.json", &ix, &err);
        CHECK_MSG(rc < 0 && !ix, "%s was accepted", e->d_name);
        CHECK_MSG(expect && strstr(err.msg, expect) && !strncmp(err.msg, "index.json", 10),
                  "%s: \"%s\" lacks \"%s\"", e->d_name, err.msg, expect ? expect : "");
        pt_ckpt_index_free(&ix);
        free(text);
        free(expect);
        cases++;
    }
    closedir(d);
    CHECK(cases >= 12);
}

/* Layers saved at different steps (one stage saved, another did not) are
 * refused rather than mixed; each stage alone still loads. An Adam
 * checkpoint loads its weights into an SGD run without the state. */
static void test_mixed_steps_and_kinds(void)
{
    pt_model_spec *spec = spec_of(MLP_JSON);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    int L = spec->layer_count;
    pt_net *full = make_net(spec, 0, L, 1), *front = make_net(spec, 0, 2, 2);
    pt_optim *adam = make_optim(full, PT_OPTIM_ADAM), *sgd = make_optim(front, PT_OPTIM_SGD);
    pt_error err = {0};
    REQUIRE(pt_ckpt_save(dir, spec, full, adam, 10, 1, &err) == 0);
    pt_ckpt_info info;
    REQUIRE(pt_ckpt_load(dir, spec, front, sgd, &info, &err) == 0);
    CHECK(!info.optim_loaded && info.has_optimizer && info.optimizer.kind == PT_OPTIM_ADAM);
    CHECK(pt_optim_steps(sgd) == 0);
    REQUIRE(pt_ckpt_save(dir, spec, front, NULL, 11, 1, &err) == 0);
    char msg[PT_ERROR_MAX];
    CHECK(load_error(dir, spec, full, msg) == PT_EINVAL);
    CHECK_STR_CONTAINS(msg, "layer 0 is at step 11, layer 2 at step 10");
    CHECK(load_error(dir, spec, front, msg) == 0);
    pt_optim_destroy(&adam);
    pt_optim_destroy(&sgd);
    pt_net_destroy(&full);
    pt_net_destroy(&front);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

/* A weight file made outside pipetop, following docs/formats.md: index.json
 * plus raw little-endian float32 files, no optimizer. */
static void test_handmade_weights(void)
{
    static const char *json =
        "{\"v\":1,\"name\":\"hand\",\"input\":{\"kind\":\"float\",\"shape\":[3]},\"layers\":["
        "{\"type\":\"linear\",\"out\":2},{\"type\":\"softmax_xent\",\"classes\":2}]}";
    pt_model_spec *spec = spec_of(json);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    float w[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1, 0.5f};
    char path[256];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    REQUIRE(pt_file_write_atomic(path, w, sizeof w, NULL) == 0);
    snprintf(path, sizeof path, "%s/b.bin", dir);
    REQUIRE(pt_file_write_atomic(path, b, sizeof b, NULL) == 0);
    char index[1024];
    snprintf(index, sizeof index,
             "{\"v\":1,\"model\":\"hand\",\"step\":0,\"layers\":[{\"index\":0,\"name\":"
             "\"linear0\",\"tensors\":[{\"name\":\"weight\",\"file\":\"w.bin\",\"shape\":[3,2],"
             "\"count\":6,\"crc32\":%lu},{\"name\":\"bias\",\"file\":\"b.bin\",\"shape\":[2],"
             "\"count\":2,\"crc32\":%lu}]}]}",
             crc32(0, (const Bytef *)w, sizeof w), crc32(0, (const Bytef *)b, sizeof b));
    snprintf(path, sizeof path, "%s/index.json", dir);
    REQUIRE(pt_file_write_atomic(path, index, strlen(index), NULL) == 0);
    pt_net *net = make_net(spec, 0, 2, 9);
    pt_error err = {0};
    int rc = pt_ckpt_load(dir, spec, net, NULL, NULL, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    float *p = params_of(net);
    CHECK(pt_net_param_count(net) == 8);
    CHECK(same_floats(p, w, 6) && same_floats(p + 6, b, 2));
    free(p);
    pt_net_destroy(&net);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

/* A checkpoint never holds a number that is not finite: a save of weights
 * holding a NaN fails naming the file and leaves the previous checkpoint
 * the one loaded; a tensor file holding an infinity, with the right crc
 * (saved so), is refused on load. */
static void test_nonfinite(void)
{
    pt_model_spec *spec = spec_of(MLP_JSON);
    REQUIRE(spec);
    const char *dir = fresh_dir();
    REQUIRE(dir);
    int L = spec->layer_count;
    pt_net *net = make_net(spec, 0, L, 3), *other = make_net(spec, 0, L, 4);
    pt_error err = {0};
    REQUIRE(pt_ckpt_save(dir, spec, net, NULL, 1, 0, &err) == 0);
    float *good = params_of(net);
    const pt_backend *be = pt_net_backend(net);
    float nan = NAN;
    be->upload(be, pt_net_params(net) + 5, &nan, sizeof nan);
    CHECK(pt_ckpt_save(dir, spec, net, NULL, 2, 0, &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "element 5 of");
    CHECK_STR_CONTAINS(err.msg, "not a finite number");
    pt_ckpt_info info;
    err = (pt_error){0};
    REQUIRE(pt_ckpt_load(dir, spec, other, NULL, &info, &err) == 0);
    CHECK(info.step == 1);
    float *got = params_of(other);
    CHECK(same_floats(good, got, pt_net_param_count(net)));
    free(got);
    free(good);
    remove_dir(dir);

    /* a tensor file saved with an infinity in it, its crc matching */
    static const char *json =
        "{\"v\":1,\"name\":\"hand\",\"input\":{\"kind\":\"float\",\"shape\":[3]},\"layers\":["
        "{\"type\":\"linear\",\"out\":2},{\"type\":\"softmax_xent\",\"classes\":2}]}";
    pt_model_spec *hand = spec_of(json);
    REQUIRE(hand);
    dir = fresh_dir();
    REQUIRE(dir);
    float w[6] = {1, 2, INFINITY, 4, 5, 6}, b[2] = {-1, 0.5f};
    char path[256], index[1024];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    REQUIRE(pt_file_write_atomic(path, w, sizeof w, NULL) == 0);
    snprintf(path, sizeof path, "%s/b.bin", dir);
    REQUIRE(pt_file_write_atomic(path, b, sizeof b, NULL) == 0);
    snprintf(index, sizeof index,
             "{\"v\":1,\"model\":\"hand\",\"step\":0,\"layers\":[{\"index\":0,\"name\":"
             "\"linear0\",\"tensors\":[{\"name\":\"weight\",\"file\":\"w.bin\",\"shape\":[3,2],"
             "\"count\":6,\"crc32\":%lu},{\"name\":\"bias\",\"file\":\"b.bin\",\"shape\":[2],"
             "\"count\":2,\"crc32\":%lu}]}]}",
             crc32(0, (const Bytef *)w, sizeof w), crc32(0, (const Bytef *)b, sizeof b));
    snprintf(path, sizeof path, "%s/index.json", dir);
    REQUIRE(pt_file_write_atomic(path, index, strlen(index), NULL) == 0);
    pt_net *hnet = make_net(hand, 0, 2, 9);
    err = (pt_error){0};
    CHECK(pt_ckpt_load(dir, hand, hnet, NULL, NULL, &err) == PT_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "element 2 of tensor weight is inf");
    pt_net_destroy(&hnet);
    pt_net_destroy(&net);
    pt_net_destroy(&other);
    pt_model_spec_free(&hand);
    pt_model_spec_free(&spec);
    remove_dir(dir);
}

PT_TEST_MAIN({"layouts_match_net", test_layouts_match_net},
             {"roundtrip_mlp_adam", test_roundtrip_mlp_adam},
             {"roundtrip_gpt_sgd", test_roundtrip_gpt_sgd},
             {"other_partition", test_other_partition},
             {"crash_before_index", test_crash_before_index}, {"corrupt_files", test_corrupt_files},
             {"bad_index_corpus", test_bad_index_corpus},
             {"mixed_steps_and_kinds", test_mixed_steps_and_kinds},
             {"handmade_weights", test_handmade_weights}, {"nonfinite", test_nonfinite})
