/* pipetop train and pipetop profile, driven as a user would: the real binary,
 * its JSON lines, its exit status and its files.
 *
 *  - fmnist-mlp on 20000 Fashion-MNIST images for one epoch reaches >= 80%
 *    test accuracy (the 85%-in-3-epochs, shortened);
 *  - gpt-tiny on synthetic tokens: the test loss ends below a third of
 *    log(256), the loss of a uniform guess;
 *  - a run saved after 6 steps and resumed for 8 more ends with exactly the
 *    weights and momentum of an uninterrupted 14-step run (data order and
 *    optimizer state survive the checkpoint), and --steps 0 re-saves the same
 *    weights;
 *  - Ctrl-C saves a loadable checkpoint and exits with status 1;
 *  - the profile has one row per layer with positive times and the exact
 *    activation and parameter bytes;
 *  - bad flags and bad data give exit status 2 or 1 and a message that says
 *    what is wrong. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "protocol/profile.h"
#include "runtime/checkpoint.h"
#include "tests/test.h"
#include "tests/wait_util.h"

#define OUT_MAX (1 << 20)
/* a 3-step run interrupted by ^C takes a second or two; a hang meets this */
#define TRAIN_BOUND_MS 120000

static char g_out[OUT_MAX];

static const char *pipetop(void)
{
    static char path[1024];
    const char *dir = getenv("PT_BUILD_DIR");
    snprintf(path, sizeof path, "%s/pipetop", dir ? dir : ".");
    return path;
}

/* Runs `pipetop ARGS` through the shell with stderr merged into stdout; the
 * output is in g_out, the exit status is returned (-1 if it did not exit). */
static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 '%s' %s 2>&1", pipetop(), args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(g_out, 1, OUT_MAX - 1, p);
    g_out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last JSON line of g_out whose "event" is `event` (caller deletes). */
static cJSON *last_event(const char *event)
{
    cJSON *found = NULL;
    char *save = NULL, *copy = strdup(g_out);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *e = o ? cJSON_GetObjectItem(o, "event") : NULL;
        if (e && cJSON_IsString(e) && !strcmp(e->valuestring, event)) {
            cJSON_Delete(found);
            found = o;
        } else {
            cJSON_Delete(o);
        }
    }
    free(copy);
    return found;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    return v && cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_fmnist_accuracy(void)
{
    int st = run("train --model fmnist-mlp --data fashion-mnist --epochs 1 --subset 20000 --json");
    CHECK_MSG(st == 0, "status %d: %s", st, g_out);
    cJSON *end = last_event("end"), *epoch = last_event("epoch"), *step = last_event("step");
    REQUIRE(end && epoch && step);
    double acc = num(end, "test_accuracy");
    printf("fmnist-mlp, 1 epoch of 20000: test accuracy %.4f, %.0f samples/s\n", acc,
           num(end, "samples_per_s"));
    CHECK_MSG(acc >= 0.80, "test accuracy %.4f < 0.80", acc);
    CHECK(num(epoch, "test_accuracy") == acc);
    CHECK(num(end, "step") == 313 && num(epoch, "epoch") == 1);
    CHECK(num(step, "samples_per_s") > 0 && num(step, "loss") > 0);
    cJSON_Delete(end);
    cJSON_Delete(epoch);
    cJSON_Delete(step);
}

static void test_gpt_tiny_loss_drops(void)
{
    int st = run("train --model gpt-tiny --data synthetic --steps 120 --batch 8 --optimizer adam "
                 "--lr 3e-3 --eval-samples 64 --json --log-every 10");
    CHECK_MSG(st == 0, "status %d: %s", st, g_out);
    cJSON *end = last_event("end");
    REQUIRE(end);
    /* The first step line is the mean loss of steps 1..10. */
    const char *first = strstr(g_out, "{\"event\":\"step\"");
    REQUIRE(first);
    cJSON *f = cJSON_ParseWithOpts(first, NULL, 0);
    REQUIRE(f);
    double start = num(f, "loss"), final = num(end, "test_loss"), uniform = log(256.0);
    printf("gpt-tiny: loss %.3f over steps 1-10, test loss %.3f after 120 (uniform %.3f)\n", start,
           final, uniform);
    CHECK_MSG(start > 0.7 * uniform, "first loss %.3f is not near log(256)", start);
    CHECK_MSG(final < uniform / 3, "test loss %.3f did not drop below log(256)/3", final);
    cJSON_Delete(f);
    cJSON_Delete(end);
}

/* 1 when checkpoints a and b hold the same tensors (names, shapes) with
 * byte-identical files; with `verbose`, prints the first difference. */
static int same_checkpoint(const char *a, const char *b, int verbose)
{
    pt_ckpt_index *ia = NULL, *ib = NULL;
    pt_error err = {0};
    int same = pt_ckpt_index_load(a, &ia, &err) == 0 && pt_ckpt_index_load(b, &ib, &err) == 0;
    if (!same)
        fprintf(stderr, "%s\n", err.msg);
    int tensors = 0;
    for (int l = 0; same && l < ia->layer_count; l++) {
        const pt_ckpt_layer *la = &ia->layers[l], *lb = pt_ckpt_index_find(ib, la->index);
        same = lb && lb->tensor_count == la->tensor_count;
        for (int t = 0; same && t < la->tensor_count; t++) {
            const pt_ckpt_tensor *ta = &la->tensors[t], *tb = pt_ckpt_layer_tensor(lb, ta->name);
            float *x = malloc((size_t)ta->count * sizeof(float));
            float *y = malloc((size_t)ta->count * sizeof(float));
            same = tb && tb->count == ta->count && x && y &&
                   pt_ckpt_read_tensor(a, ta, x, &err) == 0 &&
                   pt_ckpt_read_tensor(b, tb, y, &err) == 0 &&
                   memcmp(x, y, (size_t)ta->count * sizeof(float)) == 0;
            if (!same && verbose)
                fprintf(stderr, "layer %d tensor %s differs %s\n", la->index, ta->name, err.msg);
            free(x);
            free(y);
            tensors++;
        }
    }
    pt_ckpt_index_free(&ia);
    pt_ckpt_index_free(&ib);
    return same && tensors > 0;
}

static void test_save_load_continues(void)
{
    char dir[] = "/tmp/pt_train_itest.XXXXXX";
    REQUIRE(mkdtemp(dir));
    const char *f = "--model fmnist-mlp --data fashion-mnist --subset 640 --eval-samples 0 --json";
    char args[2048], whole[256], part[256], again[256];
    snprintf(whole, sizeof whole, "%s/whole", dir);
    snprintf(part, sizeof part, "%s/part", dir);
    snprintf(again, sizeof again, "%s/again", dir);
    /* 10 batches per epoch: the resumed run crosses an epoch boundary. */
    snprintf(args, sizeof args, "train %s --steps 14 --save %s", f, whole);
    CHECK(run(args) == 0);
    snprintf(args, sizeof args, "train %s --steps 6 --save %s", f, part);
    CHECK(run(args) == 0);
    CHECK(!same_checkpoint(whole, part, 0));
    snprintf(args, sizeof args, "train %s --steps 8 --load %s --save %s", f, part, part);
    CHECK(run(args) == 0);
    CHECK_MSG(same_checkpoint(whole, part, 1), "6 + 8 steps differ from 14 steps");
    /* Load, train nothing, save elsewhere: the same tensors, momentum included. */
    snprintf(args, sizeof args, "train %s --steps 0 --load %s --save %s", f, part, again);
    CHECK(run(args) == 0);
    CHECK_MSG(same_checkpoint(part, again, 1), "re-saved checkpoint differs");
    pt_ckpt_index *ix = NULL;
    REQUIRE(pt_ckpt_index_load(again, &ix, NULL) == 0);
    CHECK(ix->step == 14 && ix->optim_steps == 14);
    CHECK(pt_ckpt_layer_tensor(pt_ckpt_index_find(ix, 0), "weight.momentum") != NULL);
    pt_ckpt_index_free(&ix);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    CHECK(system(args) == 0);
}

static void test_ctrl_c_saves(void)
{
    char dir[] = "/tmp/pt_train_itest.XXXXXX";
    REQUIRE(mkdtemp(dir));
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        execl(pipetop(), "pipetop", "train", "--model", "fmnist-mlp", "--data", "synthetic",
              "--epochs", "50", "--json", "--log-every", "1", "--eval-samples", "64", "--save", dir,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    pt_wait_lines in = {.fd = fds[0]};
    char line[4096];
    int steps = 0, saw_end = 0, got;
    int64_t deadline = pt_wait_now_ms() + TRAIN_BOUND_MS;
    while ((got = pt_wait_line(&in, line, sizeof line, deadline)) == 1) {
        if (strstr(line, "\"event\":\"step\"") && ++steps == 3)
            kill(pid, SIGINT);
        if (strstr(line, "\"event\":\"end\"")) {
            saw_end = 1;
            CHECK_STR_CONTAINS(line, "\"interrupted\":true");
            CHECK_STR_CONTAINS(line, "\"test_accuracy\"");
        }
    }
    close(fds[0]);
    CHECK_MSG(got == 0, "pipetop train: no end of its output within %d ms (%d steps seen)",
              TRAIN_BOUND_MS, steps);
    int st = pt_wait_pid(pid, TRAIN_BOUND_MS);
    CHECK_MSG(st == 128 + SIGINT, "pipetop train after ^C: exit %d (-1: still running after %d ms)",
              st, TRAIN_BOUND_MS);
    CHECK(saw_end);
    pt_ckpt_index *ix = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_ckpt_index_load(dir, &ix, &err) == 0, "%s", err.msg);
    CHECK(ix && ix->step >= 3 && ix->step < 50 * 128);
    pt_ckpt_index_free(&ix);
    char args[256];
    snprintf(args, sizeof args,
             "train --model fmnist-mlp --data synthetic --steps 1 --load %s "
             "--eval-samples 0 --json",
             dir);
    CHECK_MSG(run(args) == 0, "%s", g_out);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    CHECK(system(args) == 0);
}

static void test_profile(void)
{
    char path[] = "/tmp/pt_profile_itest.XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    char args[256];
    snprintf(args, sizeof args,
             "profile --model fmnist-mlp --batch 16 --repeats 3 --warmup 1 "
             "--out %s",
             path);
    CHECK_MSG(run(args) == 0, "%s", g_out);
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_profile_load(path, &p, &err) == 0);
    REQUIRE(p->layer_count == 8);
    const int64_t f = sizeof(float), outs[8] = {1024, 1024, 1024, 1024, 1024, 1024, 10, 10};
    const int64_t params[8] = {785 * 1024, 0, 1025 * 1024, 0, 1025 * 1024, 0, 1025 * 10, 0};
    const char *names[8] = {"linear0", "relu1", "linear2", "relu3",
                            "linear4", "relu5", "linear6", "softmax_xent7"};
    for (int i = 0; i < 8; i++) {
        const pt_profile_layer *l = &p->layers[i];
        CHECK_MSG(!strcmp(l->name, names[i]), "layer %d is %s", i, l->name);
        CHECK_MSG(l->fwd_ms > 0 && l->bwd_ms > 0, "layer %d: %g / %g ms", i, l->fwd_ms, l->bwd_ms);
        CHECK(l->act_bytes == outs[i] * 16 * f);
        CHECK(l->param_bytes == params[i] * f);
    }
    CHECK(p->microbatch == 16 && p->input_bytes == 784 * 16 * f);
    CHECK(!strcmp(p->source, "measured") && !strcmp(p->model, "fmnist-mlp"));
    /* The big linears cost more than the relus next to them. */
    CHECK(p->layers[2].fwd_ms + p->layers[2].bwd_ms > p->layers[3].fwd_ms + p->layers[3].bwd_ms);
    pt_profile_free(&p);
    unlink(path);

    /* --json on stdout parses too, for the token model. */
    CHECK(run("profile --model gpt-tiny --batch 2 --repeats 1 --warmup 0 --json") == 0);
    CHECK(pt_profile_parse(g_out, "stdout", &p, &err) == 0);
    CHECK(p && p->layer_count == 8);
    pt_profile_free(&p);
}

static void test_bad_usage(void)
{
    struct {
        const char *args, *expect;
        int status;
    } cases[] = {
        {"train --model fmnist-mlp", "--data is required", 2},
        {"train --data synthetic", "--model is required", 2},
        {"train --model fmnist-mlp --data synthetic --batch 0",
         "--batch must be in [1, 65536], got 0", 2},
        {"train --model fmnist-mlp --data synthetic --lr abc", "--lr needs a number, got 'abc'", 2},
        {"train --model fmnist-mlp --data synthetic --epochs 2 --steps 3",
         "give --epochs or --steps, not both", 2},
        {"train --model fmnist-mlp --data synthetic --optimizer lamb",
         "--optimizer must be sgd or adam, got 'lamb'", 2},
        {"train --model fmnist-mlp --data imagenet", "--data must be fashion-mnist or synthetic",
         2},
        {"train --model fmnist-mlp --data synthetic --frobnicate", "unknown option '--frobnicate'",
         2},
        {"train --model fmnist-mlp --data synthetic --seed", "--seed needs a value", 2},
        {"train --model no-such-model --data synthetic", "no-such-model", 1},
        {"train --model gpt-tiny --data fashion-mnist", "model gpt-tiny does not fit fashion-mnist",
         1},
        {"train --model fmnist-mlp --data synthetic --load /nonexistent/ckpt",
         "/nonexistent/ckpt: no checkpoint here", 1},
        {"profile --batch 4", "--model is required", 2},
        {"profile --model fmnist-mlp --repeats 0", "--repeats must be in", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = run(cases[i].args);
        CHECK_MSG(st == cases[i].status, "'%s': status %d, expected %d", cases[i].args, st,
                  cases[i].status);
        CHECK_MSG(strstr(g_out, cases[i].expect) != NULL, "'%s' said \"%s\", not \"%s\"",
                  cases[i].args, g_out, cases[i].expect);
    }
    CHECK(run("train --help") == 0);
    CHECK_STR_CONTAINS(g_out, "usage: pipetop train");
    CHECK(run("profile --help") == 0);
    CHECK_STR_CONTAINS(g_out, "usage: pipetop profile");

    /* No data set installed: the message names the package. */
    char args[256];
    snprintf(args, sizeof args, "train --model fmnist-mlp --data fashion-mnist --steps 1");
    setenv("PT_FASHION_MNIST_DIR", "/nonexistent/fmnist", 1);
    CHECK(run(args) == 1);
    unsetenv("PT_FASHION_MNIST_DIR");
    CHECK_STR_CONTAINS(g_out, "/nonexistent/fmnist/train-images-idx3-ubyte.gz: not found");
    CHECK_STR_CONTAINS(g_out, "apt-get install dataset-fashion-mnist");
}

PT_TEST_MAIN({"bad_usage", test_bad_usage}, {"profile", test_profile},
             {"save_load_continues", test_save_load_continues}, {"ctrl_c_saves", test_ctrl_c_saves},
             {"gpt_tiny_loss_drops", test_gpt_tiny_loss_drops},
             {"fmnist_accuracy", test_fmnist_accuracy})
