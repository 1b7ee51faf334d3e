/* pipetop train: single-device training of a model spec on Fashion-MNIST or
 * synthetic data, with a progress bar (or JSON lines), per-epoch test
 * accuracy, and per-layer checkpoints (--load / --save). */
#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "protocol/clock.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/backend_select.h"
#include "runtime/blas_core.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/net.h"
#include "runtime/optim.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"
#include "tui/record/progress.h"

#define DEFAULT_EPOCHS    3
#define DEFAULT_BATCH     64
#define DEFAULT_SEED      1
#define DEFAULT_LOG_EVERY 50
/* Reaches 85.8% test accuracy on Fashion-MNIST after one epoch of fmnist-mlp
 * (batch 64, momentum 0.9) and 87-88% after three; 0.05 reaches 85% too but
 * its first steps overshoot (docs/benchmarks.md). */
#define DEFAULT_SGD_LR 0.02
#define MAX_BATCH      65536
#define MAX_THREADS    1024

typedef struct train_args {
    const char *model, *data, *load, *save, *optimizer, *device;
    int epochs, batch, json, threads, log_every;
    int64_t steps, subset, eval_samples, seed;
    double lr, momentum, weight_decay;
    int epochs_seen, steps_seen, optimizer_seen, lr_seen, momentum_seen, wd_seen;
} train_args;

typedef struct trainer {
    train_args a;
    pt_model_spec *spec;
    pt_dataset *train, *test;
    pt_net *net;
    pt_optim *optim;
    const pt_backend *be;
    const pt_backend *opened; /* from --device; closed by teardown */
    float *x_host, *x_dev;
    int32_t *labels;
    int64_t *order, *eval_idx;
    int64_t step;    /* optimizer steps taken, including those of a loaded checkpoint */
    int64_t epoch;   /* epochs completed, including a loaded checkpoint's */
    double train_s;  /* seconds spent in training steps (not evaluation) */
    int64_t trained; /* samples trained in this run */
    double last_train_loss;
    double partial_epoch; /* fraction of the current epoch done when training stopped */
    int64_t resume_batch; /* first batch of the current epoch still to train */
    double last_test_loss, last_test_acc;
    int64_t last_eval_step;
    int64_t last_save_step;
} trainer;

static volatile sig_atomic_t g_interrupted;

/* The first Ctrl-C (or SIGTERM) stops training at the next step boundary
 * (and saves); the process then exits 128 + the signal's number, as `run`
 * does. A second one kills the process the usual way. */
static void on_sigint(int sig)
{
    if (g_interrupted) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupted = sig;
}

static const char usage_text[] =
    "usage: pipetop train --model M --data D [options]\n"
    "Trains model M on one device (the CPU, or a GPU with --device cuda:N) and reports\n"
    "loss and test accuracy.\n\n";

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, train_args *a)
{
    *a = (train_args){.optimizer = "sgd",
                      .epochs = DEFAULT_EPOCHS,
                      .batch = DEFAULT_BATCH,
                      .log_every = DEFAULT_LOG_EVERY,
                      .eval_samples = -1,
                      .seed = DEFAULT_SEED};
    pt_opt opts[] = {
        {"model", PT_OPT_STRING, &a->model, 0, 0, 0, "M",
         "model spec: a path or a name in models/ (fmnist-mlp, gpt-tiny)"},
        {"data", PT_OPT_STRING, &a->data, 0, 0, 0, "D",
         "fashion-mnist or synthetic (shapes taken from the model)"},
        {"epochs", PT_OPT_INT, &a->epochs, 1, 1e6, 0, "N",
         "passes over the training set (default " PT_OPTS_STR(DEFAULT_EPOCHS) ")"},
        {"steps", PT_OPT_INT64, &a->steps, 0, 1e12, 0, "N",
         "optimizer steps instead of epochs (0: none, e.g. to re-save)"},
        {"batch", PT_OPT_INT, &a->batch, 1, MAX_BATCH, 0, "B",
         "samples per step (default " PT_OPTS_STR(DEFAULT_BATCH) ")"},
        {"optimizer", PT_OPT_STRING, &a->optimizer, 0, 0, 0, "K",
         "sgd (with momentum, default) or adam"},
        {"lr", PT_OPT_DOUBLE, &a->lr, 1e-12, 1e3, 0, "X", "learning rate (sgd 0.02, adam 0.001)"},
        {"momentum", PT_OPT_DOUBLE, &a->momentum, 0, 0.999999, 0, "X",
         "sgd momentum (default 0.9)"},
        {"weight-decay", PT_OPT_DOUBLE, &a->weight_decay, 0, 1e3, 0, "X",
         "L2 weight decay (default 0)"},
        {"seed", PT_OPT_INT64, &a->seed, 0, 9e15, 0, "S",
         "initialisation and data order (default " PT_OPTS_STR(DEFAULT_SEED) ")"},
        {"subset", PT_OPT_INT64, &a->subset, 1, 1e12, 0, "N",
         "train on the first N training samples only"},
        {"eval-samples", PT_OPT_INT64, &a->eval_samples, 0, 1e12, 0, "N",
         "evaluate on the first N test samples (0: no evaluation)"},
        {"load", PT_OPT_STRING, &a->load, 0, 0, 0, "DIR",
         "start from the checkpoint in DIR (its optimizer settings\n"
         "apply unless given here)"},
        {"save", PT_OPT_STRING, &a->save, 0, 0, 0, "DIR",
         "save a checkpoint to DIR after each epoch, at the end and on\n"
         "Ctrl-C"},
        {"json", PT_OPT_FLAG, &a->json, 0, 0, 0, NULL,
         "one JSON object per line instead of the progress bar:\n"
         "\"event\" step|epoch|end, step, epoch, loss, samples_per_s,\n"
         "and test_loss/test_accuracy where evaluated"},
        {"log-every", PT_OPT_INT, &a->log_every, 1, 1e9, 0, "N",
         "steps between JSON step lines (default " PT_OPTS_STR(DEFAULT_LOG_EVERY) ")"},
        {"threads", PT_OPT_INT, &a->threads, 1, MAX_THREADS, 0, "N",
         "OpenBLAS threads (default: OpenBLAS's own choice)"},
        {"device", PT_OPT_STRING, &a->device, 0, 0, 0, "D",
         "cpu (default) or cuda:N[:fp32|tf32|bf16]"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = pt_opts_command("train", argc, argv, opts, n, usage_text, NULL);
    if (rc >= 0)
        return rc;
    a->epochs_seen = pt_opts_find(opts, n, "epochs")->seen;
    a->steps_seen = pt_opts_find(opts, n, "steps")->seen;
    a->optimizer_seen = pt_opts_find(opts, n, "optimizer")->seen;
    a->lr_seen = pt_opts_find(opts, n, "lr")->seen;
    a->momentum_seen = pt_opts_find(opts, n, "momentum")->seen;
    a->wd_seen = pt_opts_find(opts, n, "weight-decay")->seen;
    const char *missing = !a->model ? "--model" : !a->data ? "--data" : NULL;
    if (missing) {
        fprintf(stderr, "pipetop train: %s is required (see pipetop train --help)\n", missing);
        return 2;
    }
    if (a->epochs_seen && a->steps_seen) {
        fprintf(stderr, "pipetop train: give --epochs or --steps, not both\n");
        return 2;
    }
    if (strcmp(a->optimizer, "sgd") && strcmp(a->optimizer, "adam")) {
        fprintf(stderr, "pipetop train: --optimizer must be sgd or adam, got '%s'\n", a->optimizer);
        return 2;
    }
    if (strcmp(a->data, "fashion-mnist") && strcmp(a->data, "synthetic")) {
        fprintf(stderr, "pipetop train: --data must be fashion-mnist or synthetic, got '%s'\n",
                a->data);
        return 2;
    }
    return -1;
}

/* The optimizer: the checkpoint's settings (when loading one) under the
 * command line's. */
static int make_optimizer(trainer *t, pt_error *err)
{
    const train_args *a = &t->a;
    pt_optim_kind kind = !strcmp(a->optimizer, "adam") ? PT_OPTIM_ADAM : PT_OPTIM_SGD;
    pt_optim_spec spec = pt_optim_default(kind);
    if (kind == PT_OPTIM_SGD)
        spec.lr = DEFAULT_SGD_LR;
    if (a->load) {
        pt_ckpt_index *ix = NULL;
        int rc = pt_ckpt_index_load(a->load, &ix, err);
        if (rc < 0)
            return rc;
        if (ix->has_optimizer && (!a->optimizer_seen || ix->optimizer.kind == kind))
            spec = ix->optimizer;
        pt_ckpt_index_free(&ix);
    }
    if (a->lr_seen)
        spec.lr = (float)a->lr;
    if (a->momentum_seen)
        spec.momentum = (float)a->momentum;
    if (a->wd_seen)
        spec.weight_decay = (float)a->weight_decay;
    return pt_optim_create(&spec, pt_net_arena(t->net), pt_net_param_count(t->net), &t->optim, err);
}

static int setup(trainer *t, pt_error *err)
{
    const train_args *a = &t->a;
    int rc;
    if (a->threads > 0)
        openblas_set_num_threads(a->threads);
    if ((rc = pt_model_spec_find(a->model, &t->spec, err)) < 0)
        return rc;
    uint64_t data_seed = PT_SYNTH_DATA_SEED;
    if ((rc = pt_dataset_open(a->data, t->spec, PT_DATA_TRAIN, data_seed, &t->train, err)) < 0 ||
        (rc = pt_dataset_open(a->data, t->spec, PT_DATA_TEST, data_seed, &t->test, err)) < 0)
        return rc;
    pt_dataset_limit(t->train, a->subset);
    if (a->eval_samples >= 0)
        pt_dataset_limit(t->test, a->eval_samples > 0 ? a->eval_samples : 1);
    pt_device_spec dev = {0};
    if (a->device && (rc = pt_device_spec_parse(a->device, &dev, err)) < 0)
        return rc;
    if ((rc = pt_device_open(&dev, &t->opened, err)) < 0)
        return rc;
    pt_net_config cfg = pt_net_config_default(t->spec);
    cfg.max_batch = a->batch;
    cfg.seed = (uint64_t)a->seed;
    cfg.backend = t->opened;
    if ((rc = pt_net_create(t->spec, &cfg, &t->net, err)) < 0)
        return rc;
    if ((rc = make_optimizer(t, err)) < 0)
        return rc;
    t->be = pt_net_backend(t->net);
    int64_t in = pt_net_in_elems(t->net), lps = pt_net_label_count(t->net);
    int64_t n_train = pt_dataset_count(t->train), n_test = pt_dataset_count(t->test);
    t->x_host = malloc((size_t)(a->batch * in) * sizeof(float));
    t->labels = malloc((size_t)(a->batch * lps) * sizeof(int32_t));
    t->order = malloc((size_t)n_train * sizeof(int64_t));
    t->eval_idx = malloc((size_t)a->batch * sizeof(int64_t));
    t->x_dev = pt_arena_alloc_floats(pt_net_arena(t->net), PT_MEM_ACTS, a->batch * in);
    (void)n_test;
    if (!t->x_host || !t->labels || !t->order || !t->eval_idx || !t->x_dev)
        return pt_error_set(err, PT_ENOMEM, "out of memory for the training buffers");
    if (a->load) {
        pt_ckpt_info info;
        if ((rc = pt_ckpt_load(a->load, t->spec, t->net, t->optim, &info, err)) < 0)
            return rc;
        t->step = info.step;
        t->epoch = (int64_t)floor(info.epoch + 1e-9);
        /* A checkpoint within an epoch: go on from the batch it stopped at. */
        int64_t batches = (pt_dataset_count(t->train) + a->batch - 1) / a->batch;
        t->resume_batch = llround((info.epoch - (double)t->epoch) * (double)batches);
        if (t->resume_batch >= batches) {
            t->epoch++;
            t->resume_batch = 0;
        }
        if (!a->json)
            printf("loaded %s: step %lld, epoch %g%s\n", a->load, (long long)info.step, info.epoch,
                   info.optim_loaded ? ", with optimizer state" : "");
    }
    t->last_eval_step = -1;
    t->last_save_step = -1;
    return 0;
}

static void teardown(trainer *t)
{
    if (t->x_dev)
        pt_arena_free(pt_net_arena(t->net), t->x_dev);
    pt_optim_destroy(&t->optim);
    pt_net_destroy(&t->net);
    pt_device_close(&t->opened);
    pt_dataset_free(&t->train);
    pt_dataset_free(&t->test);
    pt_model_spec_free(&t->spec);
    free(t->x_host);
    free(t->labels);
    free(t->order);
    free(t->eval_idx);
}

/* Gathers samples idx[0..n) of ds into the device input buffer and host labels. */
static int load_batch(trainer *t, const pt_dataset *ds, const int64_t *idx, int n)
{
    int rc = pt_dataset_get_batch(ds, idx, n, t->x_host, t->labels);
    if (rc < 0)
        return rc;
    t->be->upload(t->be, t->x_dev, t->x_host,
                  (size_t)n * (size_t)pt_net_in_elems(t->net) * sizeof(float));
    return 0;
}

/* One optimizer step on samples idx[0..n). */
static int train_step(trainer *t, const int64_t *idx, int n, double *loss, pt_error *err)
{
    int rc = load_batch(t, t->train, idx, n);
    if (rc == 0) {
        pt_net_zero_grads(t->net);
        rc = pt_net_forward(t->net, 0, NULL, t->x_dev, n, t->labels, NULL, loss);
    }
    if (rc == 0)
        rc = pt_net_backward(t->net, 0, NULL, NULL, NULL, NULL);
    if (rc < 0)
        return pt_error_set(err, rc, "training step %lld: %s", (long long)t->step, pt_strerror(rc));
    pt_optim_step(t->optim, pt_net_params(t->net), pt_net_grads(t->net));
    t->step++;
    return 0;
}

/* Mean loss and accuracy (over label rows) on the test set. */
static int evaluate(trainer *t, double *mean_loss, double *accuracy, pt_error *err)
{
    int64_t n_test = pt_dataset_count(t->test), correct = 0, rows = 0;
    double loss_sum = 0;
    for (int64_t start = 0; start < n_test; start += t->a.batch) {
        int n = (int)(n_test - start < t->a.batch ? n_test - start : t->a.batch);
        for (int i = 0; i < n; i++)
            t->eval_idx[i] = start + i;
        double loss = 0;
        int64_t c = 0, r = 0;
        int rc = load_batch(t, t->test, t->eval_idx, n);
        if (rc == 0)
            rc = pt_net_forward(t->net, 0, NULL, t->x_dev, n, t->labels, NULL, &loss);
        if (rc == 0)
            rc = pt_net_count_correct(t->net, 0, &c, &r);
        pt_net_release(t->net, 0);
        if (rc < 0)
            return pt_error_set(err, rc, "evaluation: %s", pt_strerror(rc));
        loss_sum += loss * n;
        correct += c;
        rows += r;
    }
    *mean_loss = n_test > 0 ? loss_sum / (double)n_test : 0;
    *accuracy = rows > 0 ? (double)correct / (double)rows : 0;
    t->last_test_loss = *mean_loss;
    t->last_test_acc = *accuracy;
    t->last_eval_step = t->step;
    return 0;
}

static int save(trainer *t, double epoch, pt_error *err)
{
    if (!t->a.save)
        return 0;
    int rc = pt_ckpt_save(t->a.save, t->spec, t->net, t->optim, t->step, epoch, err);
    t->last_save_step = t->step;
    if (rc == 0 && !t->a.json)
        printf("saved checkpoint %s (step %lld)\n", t->a.save, (long long)t->step);
    return rc;
}

static int evaluating(const trainer *t)
{
    return t->a.eval_samples != 0;
}

/* Evaluates (unless --eval-samples 0) and reports the end of an epoch. */
static int end_epoch(trainer *t, double loss, double samples_per_s, double seconds, pt_error *err)
{
    double tl = 0, acc = 0;
    int rc = evaluating(t) ? evaluate(t, &tl, &acc, err) : 0;
    if (rc < 0)
        return rc;
    if (t->a.json) {
        printf("{\"event\":\"epoch\",\"step\":%lld,\"epoch\":%lld,\"loss\":%.6g,"
               "\"samples_per_s\":%.6g,\"seconds\":%.3f",
               (long long)t->step, (long long)t->epoch, loss, samples_per_s, seconds);
        if (evaluating(t))
            printf(",\"test_loss\":%.6g,\"test_accuracy\":%.6g", tl, acc);
        printf("}\n");
    } else {
        printf("epoch %lld: train loss %.4f, %.0f samples/s, %.1f s", (long long)t->epoch, loss,
               samples_per_s, seconds);
        if (evaluating(t))
            printf("; test loss %.4f, test accuracy %.2f%%", tl, 100 * acc);
        printf("\n");
    }
    fflush(stdout);
    return 0;
}

/* Trains up to `budget` steps (< 0: no limit) of the current epoch, from
 * batch t->resume_batch on (a checkpoint saved within an epoch resumes where
 * it stopped, in the same order); returns the steps taken through *taken and
 * whether the epoch was finished through *full. */
static int run_epoch(trainer *t, int64_t budget, int64_t *taken, int *full, pt_error *err)
{
    const int64_t n_train = pt_dataset_count(t->train), b = t->a.batch;
    const int64_t batches = (n_train + b - 1) / b, k0 = t->resume_batch;
    int64_t end = budget >= 0 && budget < batches - k0 ? k0 + budget : batches;
    t->resume_batch = 0;
    pt_data_order(n_train, (uint64_t)t->a.seed, t->epoch, t->order);
    char label[64];
    snprintf(label, sizeof label, "epoch %lld", (long long)t->epoch + 1);
    pt_progress *bar =
        t->a.json
            ? NULL
            : pt_progress_new(stdout, label, (end * b < n_train ? end * b : n_train) - k0 * b, -1);
    double loss_sum = 0, window_loss = 0, t0 = pt_clock_s(), window_t0 = t0;
    int64_t samples = 0, window_steps = 0, window_samples = 0, k;
    int rc = 0;
    for (k = k0; k < end && !g_interrupted; k++) {
        int n = (int)(n_train - k * b < b ? n_train - k * b : b);
        double loss = 0;
        if ((rc = train_step(t, t->order + k * b, n, &loss, err)) < 0)
            break;
        loss_sum += loss;
        window_loss += loss;
        samples += n;
        window_samples += n;
        window_steps++;
        double now = pt_clock_s();
        if (t->a.json && window_steps == t->a.log_every) {
            printf("{\"event\":\"step\",\"step\":%lld,\"epoch\":%.4f,\"loss\":%.6g,"
                   "\"samples_per_s\":%.6g}\n",
                   (long long)t->step, (double)t->epoch + (double)(k + 1) / (double)batches,
                   window_loss / (double)window_steps, window_samples / (now - window_t0));
            fflush(stdout);
            window_loss = 0;
            window_steps = window_samples = 0;
            window_t0 = now;
        } else if (bar) {
            char fields[96];
            snprintf(fields, sizeof fields, "loss %.4f  %.0f samples/s",
                     loss_sum / (double)(k - k0 + 1), samples / (now - t0));
            pt_progress_update(bar, samples, fields);
        }
    }
    double seconds = pt_clock_s() - t0;
    int64_t steps = k - k0;
    t->train_s += seconds;
    t->trained += samples;
    *taken = steps;
    *full = rc == 0 && k == batches;
    t->partial_epoch = *full ? 0 : (double)k / (double)batches;
    t->resume_batch = *full ? 0 : k;
    pt_progress_finish(&bar, NULL);
    if (rc < 0)
        return rc;
    double mean_loss = steps ? loss_sum / (double)steps : t->last_train_loss;
    t->last_train_loss = mean_loss;
    if (*full) {
        t->epoch++;
        rc = end_epoch(t, mean_loss, seconds > 0 ? samples / seconds : 0, seconds, err);
    }
    return rc;
}

/* The final report: evaluates unless the last epoch just did. */
static int finish(trainer *t, int interrupted, double seconds, pt_error *err)
{
    double tl = t->last_test_loss, acc = t->last_test_acc;
    int rc = 0;
    if (evaluating(t) && t->last_eval_step != t->step && (rc = evaluate(t, &tl, &acc, err)) < 0)
        return rc;
    double sps = t->train_s > 0 ? (double)t->trained / t->train_s : 0;
    if (t->a.json) {
        printf("{\"event\":\"end\",\"step\":%lld,\"epoch\":%.4f,\"loss\":%.6g,"
               "\"samples_per_s\":%.6g,\"seconds\":%.3f,\"interrupted\":%s",
               (long long)t->step, (double)t->epoch + t->partial_epoch, t->last_train_loss, sps,
               seconds, interrupted ? "true" : "false");
        if (evaluating(t))
            printf(",\"test_loss\":%.6g,\"test_accuracy\":%.6g", tl, acc);
        printf("}\n");
    } else {
        printf("%s after %lld steps (%.1f s, %.0f samples/s)", interrupted ? "interrupted" : "done",
               (long long)t->step, seconds, sps);
        if (evaluating(t))
            printf(": test loss %.4f, test accuracy %.2f%%", tl, 100 * acc);
        printf("\n");
    }
    fflush(stdout);
    return 0;
}

static int train(trainer *t, pt_error *err)
{
    const train_args *a = &t->a;
    if (!a->json) {
        const pt_optim_spec *o = pt_optim_get_spec(t->optim);
        printf("training %s on %s (%lld samples), batch %d, %s lr %g", t->spec->name,
               pt_dataset_name(t->train), (long long)pt_dataset_count(t->train), a->batch,
               o->kind == PT_OPTIM_ADAM ? "adam" : "sgd", o->lr);
        if (o->kind == PT_OPTIM_SGD)
            printf(" momentum %g", o->momentum);
        if (a->steps_seen)
            printf(", %lld steps\n", (long long)a->steps);
        else
            printf(", %d epoch%s\n", a->epochs, a->epochs > 1 ? "s" : "");
        fflush(stdout);
    }
    double t0 = pt_clock_s();
    int64_t budget = a->steps_seen ? a->steps : -1;
    int rc = 0;
    for (int e = 0; !g_interrupted; e++) {
        if (a->steps_seen ? budget == 0 : e == a->epochs)
            break;
        int64_t taken = 0;
        int full = 0;
        if ((rc = run_epoch(t, budget, &taken, &full, err)) < 0)
            return rc;
        if (budget > 0)
            budget -= taken;
        if (full && (rc = save(t, (double)t->epoch, err)) < 0)
            return rc;
    }
    int interrupted = g_interrupted != 0;
    if (t->last_save_step != t->step &&
        (rc = save(t, (double)t->epoch + t->partial_epoch, err)) < 0)
        return rc;
    if ((rc = finish(t, interrupted, pt_clock_s() - t0, err)) < 0)
        return rc;
    if (interrupted)
        fprintf(stderr, "pipetop train: interrupted at step %lld%s\n", (long long)t->step,
                a->save ? " (checkpoint saved)" : "");
    return interrupted ? 128 + (int)g_interrupted : 0;
}

int pt_cmd_train(int argc, char **argv)
{
    trainer t = {0};
    int status = parse_args(argc, argv, &t.a);
    if (status >= 0)
        return status;
    pt_blas_fixup_core(NULL); /* may restart the process with faster BLAS kernels */
    pt_error err = {0};
    struct sigaction sa = {0}, old, old_term;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    g_interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = setup(&t, &err);
    if (rc == 0)
        rc = train(&t, &err);
    sigaction(SIGINT, &old, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    teardown(&t);
    if (rc < 0) {
        fprintf(stderr, "pipetop train: %s\n", err.msg[0] ? err.msg : pt_strerror(rc));
        return 1;
    }
    return rc;
}
