/* pipetop profile: measures each top-level layer's forward and backward time
 * at one micro-batch size on a local backend (the CPU, or a GPU with
 * --device cuda:N), with its output activation and parameter bytes and the
 * memory its backward needs (read off its net's arena), and writes a profile
 * (protocol/profile.h).
 *
 * Each layer runs in a net of its own ([i, i+1) of the model), so its time
 * is what a pipeline stage holding it spends: the input copy into the slot,
 * the forward, and a backward that computes the input gradient except for
 * layer 0 (stage 0 needs none). Times are medians over --repeats runs after
 * --warmup runs. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/clock.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "runtime/backend_select.h"
#include "runtime/blas_core.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"

#define DEFAULT_BATCH   64
#define DEFAULT_REPEATS 10
#define DEFAULT_WARMUP  3
#define MAX_REPEATS     10000
#define MAX_BATCH       65536
#define PROFILE_SEED    1
#define CPUINFO_LINE    512

typedef struct profile_args {
    const char *model, *out, *device, *plan;
    int batch, json, repeats, warmup, threads, beside;
    int rows_fit;         /* --fixed-share: also time each layer at half the rows */
    const pt_backend *be; /* opened from device */
} profile_args;

static const char usage_text[] =
    "usage: pipetop profile --model M [--batch B] [options]\n"
    "Measures each layer's forward and backward time on this machine's CPU (or GPU)\n"
    "and writes a profile for the planners.\n\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "cpu: <model name> x<threads> <OpenBLAS core>" from /proc/cpuinfo. */
static void device_name(char *out, size_t cap)
{
    char model[CPUINFO_LINE] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[CPUINFO_LINE];
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ')
                v++;
            snprintf(model, sizeof model, "%s", v);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    }
    if (f)
        fclose(f);
    int threads = openblas_get_num_threads();
    char suffix[48];
    snprintf(suffix, sizeof suffix, " x%d %s", threads, pt_blas_core_name());
    size_t room = cap > strlen(suffix) + 6 ? cap - strlen(suffix) - 6 : 0;
    if (model[0])
        snprintf(out, cap, "cpu: %.*s%s", (int)room, model, suffix);
    else
        snprintf(out, cap, "cpu%s", suffix);
}

/* Input, labels and gradients for a net of layers [first, ...), filled from a
 * fixed stream. */
typedef struct layer_bufs {
    float *x, *dy, *dx; /* device */
    int32_t *labels;    /* host */
} layer_bufs;

static int make_bufs(pt_net *net, const pt_model_spec *spec, int first, int batch, layer_bufs *b)
{
    const pt_backend *be = pt_net_backend(net);
    pt_arena *arena = pt_net_arena(net);
    int64_t in = pt_net_in_elems(net), out = pt_net_out_elems(net);
    int64_t lab = pt_net_label_count(net) * batch;
    float *host = malloc((size_t)((in > out ? in : out) * batch) * sizeof(float));
    b->x = pt_arena_alloc_floats(arena, PT_MEM_COMM, in * batch);
    b->dy = pt_net_has_loss(net) ? NULL : pt_arena_alloc_floats(arena, PT_MEM_COMM, out * batch);
    b->dx = first > 0 ? pt_arena_alloc_floats(arena, PT_MEM_COMM, in * batch) : NULL;
    b->labels = lab > 0 ? malloc((size_t)lab * sizeof(int32_t)) : NULL;
    if (!host || !b->x || (!pt_net_has_loss(net) && !b->dy) || (first > 0 && !b->dx) ||
        (lab > 0 && !b->labels)) {
        free(host);
        return PT_ENOMEM;
    }
    pt_rng rng = pt_rng_make(PROFILE_SEED, (uint64_t)first);
    int tokens = first == 0 && spec->input_kind == PT_INPUT_TOKENS;
    int vocab = tokens ? spec->layers[0].vocab : 0;
    for (int64_t i = 0; i < in * batch; i++)
        host[i] = tokens ? (float)pt_rng_below(&rng, (uint64_t)vocab)
                         : (float)pt_rng_uniform_range(&rng, -1, 1);
    be->upload(be, b->x, host, (size_t)(in * batch) * sizeof(float));
    if (b->dy) {
        for (int64_t i = 0; i < out * batch; i++)
            host[i] = (float)pt_rng_uniform_range(&rng, -1e-2, 1e-2);
        be->upload(be, b->dy, host, (size_t)(out * batch) * sizeof(float));
    }
    for (int64_t i = 0; i < lab; i++)
        b->labels[i] = (int32_t)pt_rng_below(&rng, (uint64_t)pt_net_classes(net));
    free(host);
    return 0;
}

/* A net of layers [first, last) ready to be timed: what a pipeline stage
 * holding them runs for one micro-batch (the input copy into the slot, the
 * forward, and a backward that computes the input gradient except at layer
 * 0). */
typedef struct timed_net {
    pt_net *net;
    layer_bufs b;
    int first, last;
} timed_net;

static void tnet_close(timed_net *t)
{
    free(t->b.labels);
    pt_net_destroy(&t->net); /* its arena holds x, dy and dx */
    memset(t, 0, sizeof *t);
}

static int tnet_open(const pt_model_spec *spec, int first, int last, const profile_args *a,
                     timed_net *t, pt_error *err)
{
    memset(t, 0, sizeof *t);
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = first;
    cfg.last = last;
    cfg.max_batch = a->batch;
    cfg.seed = PROFILE_SEED;
    cfg.backend = a->be;
    int rc = pt_net_create(spec, &cfg, &t->net, err);
    if (rc < 0)
        return rc;
    t->first = first;
    t->last = last;
    if (make_bufs(t->net, spec, first, a->batch, &t->b) < 0) {
        tnet_close(t);
        return pt_error_set(err, PT_ENOMEM, "layers [%d, %d): out of memory", first, last);
    }
    return 0;
}

/* One forward and backward of t, timed into *fwd and *bwd (ms). */
static int tnet_run(timed_net *t, const pt_model_spec *spec, int batch, double *fwd, double *bwd,
                    pt_error *err)
{
    const pt_backend *be = pt_net_backend(t->net);
    be->synchronize(be);
    double t0 = (pt_clock_s() * 1e3);
    int rc = pt_net_forward(t->net, 0, NULL, t->b.x, batch, t->b.labels, NULL, NULL);
    be->synchronize(be);
    double t1 = (pt_clock_s() * 1e3);
    if (rc == 0)
        rc = pt_net_backward(t->net, 0, NULL, NULL, t->b.dy, t->b.dx);
    be->synchronize(be);
    double t2 = (pt_clock_s() * 1e3);
    if (rc < 0)
        return pt_error_set(err, rc, "layers [%d, %d) (%s...): %s", t->first, t->last,
                            spec->layers[t->first].name, pt_strerror(rc));
    *fwd = t1 - t0;
    *bwd = t2 - t1;
    return 0;
}

/* Fills pl's name, bytes and memory for layer `layer` (times are the caller's). */
static int layer_facts(const pt_model_spec *spec, int layer, const timed_net *t,
                       const profile_args *a, pt_profile_layer *pl, pt_error *err)
{
    snprintf(pl->name, sizeof pl->name, "%s", spec->layers[layer].name);
    pl->act_bytes = pt_net_out_elems(t->net) * a->batch * (int64_t)sizeof(float);
    pl->param_bytes = pt_net_param_count(t->net) * (int64_t)sizeof(float);
    return pt_net_layer_memory(spec, layer, a->batch, a->be, &pl->saved_bytes, &pl->scratch_bytes,
                               err);
}

/* Times layer `layer` into pl: forward and backward, then the two halves of
 * the split backward (zero-bubble schedules), each timed on its own after a
 * forward of their own. */
static int profile_layer(const pt_model_spec *spec, int layer, const profile_args *a,
                         pt_profile_layer *pl, pt_error *err)
{
    timed_net t;
    int rc = tnet_open(spec, layer, layer + 1, a, &t, err);
    if (rc < 0)
        return rc;
    const pt_backend *be = pt_net_backend(t.net);
    double *fwd = malloc((size_t)a->repeats * sizeof(double));
    double *bwd = malloc((size_t)a->repeats * sizeof(double));
    double *bin = malloc((size_t)a->repeats * sizeof(double));
    double *bw = malloc((size_t)a->repeats * sizeof(double));
    int half = a->rows_fit && a->batch >= 2 ? a->batch / 2 : 0;
    double full_min = INFINITY, half_min = INFINITY;
    if (!fwd || !bwd || !bin || !bw) {
        rc = pt_error_set(err, PT_ENOMEM, "layer %d: out of memory", layer);
        goto done;
    }
    for (int r = -a->warmup; r < a->repeats; r++) {
        double f = 0, b = 0;
        if ((rc = tnet_run(&t, spec, a->batch, &f, &b, err)) < 0)
            goto done;
        rc = pt_net_forward(t.net, 0, NULL, t.b.x, a->batch, t.b.labels, NULL, NULL);
        be->synchronize(be);
        double t3 = (pt_clock_s() * 1e3);
        if (rc == 0)
            rc = pt_net_backward_input(t.net, 0, NULL, t.b.dy, t.b.dx);
        be->synchronize(be);
        double t4 = (pt_clock_s() * 1e3);
        if (rc == 0)
            rc = pt_net_backward_weight(t.net, 0, NULL, NULL);
        be->synchronize(be);
        double t5 = (pt_clock_s() * 1e3);
        if (rc < 0) {
            rc = pt_error_set(err, rc, "layer %d (%s): %s", layer, spec->layers[layer].name,
                              pt_strerror(rc));
            goto done;
        }
        if (r >= 0) {
            fwd[r] = f;
            bwd[r] = b;
            bin[r] = t4 - t3;
            bw[r] = t5 - t4;
        }
        if (half > 0) {
            /* the same net on half the rows, in the same round: the least
             * of several repeats of each keeps the fit off the load */
            double fh = 0, bh = 0;
            if ((rc = tnet_run(&t, spec, half, &fh, &bh, err)) < 0)
                goto done;
            if (r >= 0) {
                full_min = f + b < full_min ? f + b : full_min;
                half_min = fh + bh < half_min ? fh + bh : half_min;
            }
        }
    }
    if (half > 0)
        pl->fixed_share = pt_profile_fit_fixed_share(full_min, a->batch, half_min, half);
    pl->fwd_ms = median(fwd, a->repeats);
    pl->bwd_ms = median(bwd, a->repeats);
    pl->recompute_ms = pl->fwd_ms;
    pl->split = 1;
    pl->bwd_input_ms = median(bin, a->repeats);
    pl->bwd_weight_ms = median(bw, a->repeats);
    rc = layer_facts(spec, layer, &t, a, pl, err);
    if (rc == 0)
        rc = pt_net_layer_keep(spec, layer, a->batch, a->be, &pl->keep_bytes, err);
done:
    free(fwd);
    free(bwd);
    free(bin);
    free(bw);
    tnet_close(&t);
    return rc;
}

/* ---- stage profiles (--plan) -------------------------------------------------------- */

/* A stage measured whole and layer by layer, in alternation (each round runs
 * every layer's net once, then the stage's), so both see the same
 * conditions: medians in ms. */
typedef struct stage_times {
    double fwd_ms, bwd_ms; /* the stage's net */
    double *lf_ms, *lb_ms; /* per layer of the stage (owned, last - first each) */
    /* the fastest round's: the stage's, the sum of its layers' (the round
     * least disturbed by other load, for comparing the two) */
    double fwd_min_ms, bwd_min_ms, lf_min_ms, lb_min_ms;
} stage_times;

static void stage_times_free(stage_times *st)
{
    free(st->lf_ms);
    free(st->lb_ms);
    memset(st, 0, sizeof *st);
}

/* Opens the nets of stage [first, last) and of each of its layers. */
static int stage_open(const pt_model_spec *spec, int first, int last, const profile_args *a,
                      timed_net **out, pt_error *err)
{
    int n = last - first, rc = 0;
    timed_net *t = calloc((size_t)n + 1, sizeof *t);
    if (!t)
        return pt_error_set(err, PT_ENOMEM, "stage [%d, %d): out of memory", first, last);
    for (int i = 0; i < n && rc == 0; i++)
        rc = tnet_open(spec, first + i, first + i + 1, a, &t[i], err);
    if (rc == 0)
        rc = tnet_open(spec, first, last, a, &t[n], err);
    if (rc < 0) {
        for (int i = 0; i <= n; i++)
            tnet_close(&t[i]);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void stage_close(timed_net **t_p, int n)
{
    for (int i = 0; *t_p && i <= n; i++)
        tnet_close(&(*t_p)[i]);
    free(*t_p);
    *t_p = NULL;
}

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static int stage_measure(const pt_model_spec *spec, timed_net *t, int n, const profile_args *a,
                         stage_times *st, pt_error *err)
{
    int R = a->repeats, rc = 0;
    double *v = malloc((size_t)(n + 1) * 2 * (size_t)R * sizeof *v);
    st->lf_ms = calloc((size_t)n, sizeof *st->lf_ms);
    st->lb_ms = calloc((size_t)n, sizeof *st->lb_ms);
    if (!v || !st->lf_ms || !st->lb_ms) {
        free(v);
        stage_times_free(st);
        return pt_error_set(err, PT_ENOMEM, "stage: out of memory");
    }
    for (int r = -a->warmup; r < R && rc == 0; r++)
        for (int i = 0; i <= n && rc == 0; i++) {
            double f = 0, b = 0;
            rc = tnet_run(&t[i], spec, a->batch, &f, &b, err);
            if (r >= 0) {
                v[(2 * i) * R + r] = f;
                v[(2 * i + 1) * R + r] = b;
            }
        }
    if (rc == 0) {
        st->fwd_min_ms = min_of(v + (2 * n) * R, R);
        st->bwd_min_ms = min_of(v + (2 * n + 1) * R, R);
        st->lf_min_ms = st->lb_min_ms = 0;
        for (int i = 0; i < n; i++) {
            st->lf_min_ms += min_of(v + (2 * i) * R, R);
            st->lb_min_ms += min_of(v + (2 * i + 1) * R, R);
            st->lf_ms[i] = median(v + (2 * i) * R, R);
            st->lb_ms[i] = median(v + (2 * i + 1) * R, R);
        }
        st->fwd_ms = median(v + (2 * n) * R, R);
        st->bwd_ms = median(v + (2 * n + 1) * R, R);
    } else {
        stage_times_free(st);
    }
    free(v);
    return rc;
}

/* One stage measured in this process. */
static int stage_here(const pt_model_spec *spec, int first, int last, const profile_args *a,
                      stage_times *st, pt_error *err)
{
    timed_net *t = NULL;
    int rc = stage_open(spec, first, last, a, &t, err);
    if (rc == 0)
        rc = stage_measure(spec, t, last - first, a, st, err);
    stage_close(&t, last - first);
    return rc;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = read(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* In a child: open the stage, say ready, wait for go, measure, send the
 * times, then keep running the stage (load beside the others) until the
 * parent ends it. Never returns. */
static void beside_child(const pt_model_spec *spec, int first, int last, const profile_args *a,
                         int ready_fd, int go_fd, int out_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int n = last - first;
    timed_net *t = NULL;
    pt_error err = {0};
    char c = 0;
    if (stage_open(spec, first, last, a, &t, &err) < 0) {
        fprintf(stderr, "pipetop profile: stage [%d, %d): %s\n", first, last, err.msg);
        _exit(1);
    }
    if (write_all(ready_fd, &c, 1) < 0 || read_all(go_fd, &c, 1) < 0)
        _exit(1);
    stage_times st = {0};
    if (stage_measure(spec, t, n, a, &st, &err) < 0) {
        fprintf(stderr, "pipetop profile: stage [%d, %d): %s\n", first, last, err.msg);
        _exit(1);
    }
    double head[6] = {st.fwd_ms,     st.bwd_ms,    st.fwd_min_ms,
                      st.bwd_min_ms, st.lf_min_ms, st.lb_min_ms};
    if (write_all(out_fd, head, sizeof head) < 0 ||
        write_all(out_fd, st.lf_ms, (size_t)n * sizeof(double)) < 0 ||
        write_all(out_fd, st.lb_ms, (size_t)n * sizeof(double)) < 0)
        _exit(1);
    for (;;) {
        double f, b;
        if (tnet_run(&t[n], spec, a->batch, &f, &b, &err) < 0)
            _exit(1);
    }
}

/* Every stage replica of plan measured at once, one process each (as the
 * plan's agents run); st[s] gets the first replica's times of stage s. */
static int stages_beside(const pt_model_spec *spec, const pt_plan *plan, const profile_args *a,
                         stage_times *st, pt_error *err)
{
    int workers = pt_plan_device_count(plan), rc = 0, started = 0;
    int ready[2] = {-1, -1}, go[2] = {-1, -1};
    pid_t *pid = calloc((size_t)workers, sizeof *pid);
    int *out = calloc((size_t)workers, sizeof *out),
        *stage_of = calloc((size_t)workers, sizeof *stage_of);
    if (!pid || !out || !stage_of || pipe(ready) < 0 || pipe(go) < 0) {
        rc = pt_error_set(err, PT_ENOMEM, "--beside: out of memory or pipes");
        goto done;
    }
    fflush(NULL);
    for (int s = 0; s < plan->stage_count && rc == 0; s++)
        for (int j = 0; j < plan->stages[s].replica_count && rc == 0; j++) {
            int res[2];
            if (pipe(res) < 0) {
                rc = pt_error_set(err, PT_EIO, "--beside: pipe: %s", strerror(errno));
                break;
            }
            pid_t p = fork();
            if (p < 0) {
                close(res[0]);
                close(res[1]);
                rc = pt_error_set(err, PT_EIO, "--beside: fork: %s", strerror(errno));
                break;
            }
            if (p == 0) {
                close(res[0]);
                beside_child(spec, plan->stages[s].first, plan->stages[s].last, a, ready[1], go[0],
                             res[1]);
            }
            close(res[1]);
            pid[started] = p;
            out[started] = res[0];
            stage_of[started] = s;
            started++;
        }
    char c;
    for (int k = 0; k < started && rc == 0; k++)
        if (read_all(ready[0], &c, 1) < 0)
            rc = pt_error_set(err, PT_EIO, "--beside: a stage process failed to start");
    for (int k = 0; k < started && rc == 0; k++)
        if (write_all(go[1], &c, 1) < 0)
            rc = pt_error_set(err, PT_EIO, "--beside: cannot start the stage processes");
    for (int k = 0; k < started && rc == 0; k++) {
        int s = stage_of[k], n = plan->stages[s].last - plan->stages[s].first;
        double head[6];
        double *lf = calloc((size_t)n, sizeof *lf), *lb = calloc((size_t)n, sizeof *lb);
        if (!lf || !lb || read_all(out[k], head, sizeof head) < 0 ||
            read_all(out[k], lf, (size_t)n * sizeof *lf) < 0 ||
            read_all(out[k], lb, (size_t)n * sizeof *lb) < 0) {
            free(lf);
            free(lb);
            rc = pt_error_set(err, PT_EIO, "--beside: stage %d's process failed", s);
            break;
        }
        if (st[s].lf_ms) { /* another replica of the stage: the first one's kept */
            free(lf);
            free(lb);
            continue;
        }
        st[s] = (stage_times){head[0], head[1], lf, lb, head[2], head[3], head[4], head[5]};
    }
done:
    for (int k = 0; k < started; k++) {
        kill(pid[k], SIGKILL);
        waitpid(pid[k], NULL, 0);
        close(out[k]);
    }
    for (int i = 0; i < 2; i++) {
        if (ready[i] >= 0)
            close(ready[i]);
        if (go[i] >= 0)
            close(go[i]);
    }
    free(pid);
    free(out);
    free(stage_of);
    return rc;
}

/* --plan: each stage's layers get the times of its in-place measurement,
 * scaled so the stage's layers sum to the stage measured whole; beside the
 * other stages (--beside), divided by the slowdown the simulator puts back
 * for that many workers on this machine's cores (planner/simulate.h). */
static int profile_stages(const pt_model_spec *spec, const profile_args *a, pt_profile *p,
                          pt_error *err)
{
    pt_plan *plan = NULL;
    int rc = pt_plan_load(a->plan, &plan, err);
    if (rc < 0)
        return rc;
    if (strcmp(plan->model, spec->name) || plan->layer_count != spec->layer_count) {
        rc = pt_error_set(err, PT_EINVAL, "%s: the plan is for model \"%s\" (%d layers), not %s",
                          a->plan, plan->model, plan->layer_count, spec->name);
        pt_plan_free(&plan);
        return rc;
    }
    stage_times *st = calloc((size_t)plan->stage_count, sizeof *st);
    if (!st) {
        pt_plan_free(&plan);
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    }
    if (a->beside)
        rc = stages_beside(spec, plan, a, st, err);
    for (int s = 0; !a->beside && s < plan->stage_count && rc == 0; s++)
        rc = stage_here(spec, plan->stages[s].first, plan->stages[s].last, a, &st[s], err);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = pt_plan_device_count(plan);
    double slow = a->beside && cpus > 0 && workers > cpus ? (double)workers / (double)cpus : 1.0;
    if (rc == 0)
        fprintf(
            stderr,
            "stages of %s measured %s at micro-batch %d (median of %d rounds, each running "
            "every layer alone, then the stage whole)%s:\n",
            a->plan, a->beside ? "beside each other, one process per stage replica" : "one by one",
            a->batch, a->repeats, slow > 1 ? "; times divided by the shared-core slowdown" : "");
    for (int s = 0; s < plan->stage_count && rc == 0; s++) {
        const pt_stage *g = &plan->stages[s];
        double lf = 0, lb = 0;
        for (int l = g->first; l < g->last; l++) {
            lf += st[s].lf_ms[l - g->first];
            lb += st[s].lb_ms[l - g->first];
        }
        double kf = lf > 0 ? st[s].fwd_ms / lf : 1, kb = lb > 0 ? st[s].bwd_ms / lb : 1;
        for (int l = g->first; l < g->last; l++) {
            pt_profile_layer *pl = &p->layers[l];
            pl->fwd_ms = st[s].lf_ms[l - g->first] * kf / slow;
            double was = pl->bwd_ms;
            pl->bwd_ms = st[s].lb_ms[l - g->first] * kb / slow;
            if (pl->split && was > 0) { /* the halves keep their share of the backward */
                pl->bwd_input_ms *= pl->bwd_ms / was;
                pl->bwd_weight_ms *= pl->bwd_ms / was;
            }
            pl->recompute_ms = pl->fwd_ms;
        }
        fprintf(stderr,
                "stage %d [%d,%d): fwd %.4f ms whole, %.4f ms its layers; bwd %.4f ms whole, "
                "%.4f ms its layers; fastest round: fwd %.4f / %.4f, bwd %.4f / %.4f\n",
                s, g->first, g->last, st[s].fwd_ms, lf, st[s].bwd_ms, lb, st[s].fwd_min_ms,
                st[s].lf_min_ms, st[s].bwd_min_ms, st[s].lb_min_ms);
    }
    for (int s = 0; s < plan->stage_count; s++)
        stage_times_free(&st[s]);
    free(st);
    pt_plan_free(&plan);
    return rc;
}

static void print_table(const pt_profile *p, const profile_args *a)
{
    printf("profile of %s, micro-batch %d, on %s: median of %d runs after %d warm-up\n\n", p->model,
           p->microbatch, p->device, a->repeats, a->warmup);
    printf("%4s  %-20s %10s %10s %14s %14s %14s %14s\n", "#", "layer", "fwd ms", "bwd ms",
           "act bytes", "param bytes", "saved bytes", "scratch bytes");
    double f = 0, b = 0;
    int64_t params = 0;
    for (int i = 0; i < p->layer_count; i++) {
        const pt_profile_layer *l = &p->layers[i];
        printf("%4d  %-20s %10.3f %10.3f %14lld %14lld %14lld %14lld\n", i, l->name, l->fwd_ms,
               l->bwd_ms, (long long)l->act_bytes, (long long)l->param_bytes,
               (long long)l->saved_bytes, (long long)l->scratch_bytes);
        f += l->fwd_ms;
        b += l->bwd_ms;
        params += l->param_bytes;
    }
    printf("%4s  %-20s %10.3f %10.3f %14s %14lld\n", "", "total", f, b, "", (long long)params);
}

static int parse_args(int argc, char **argv, profile_args *a)
{
    *a = (profile_args){
        .batch = DEFAULT_BATCH, .repeats = DEFAULT_REPEATS, .warmup = DEFAULT_WARMUP};
    int analytic = 0; /* pt_cmd_profile hands --analytic and --torch over before parsing */
    const char *torch = NULL;
    pt_opt opts[] = {
        {"model", PT_OPT_STRING, &a->model, 0, 0, 0, "M",
         "model spec: a path or a name in models/"},
        {"batch", PT_OPT_INT, &a->batch, 1, MAX_BATCH, 0, "B",
         "micro-batch size the times are for (default " PT_OPTS_STR(DEFAULT_BATCH) ")"},
        {"out", PT_OPT_STRING, &a->out, 0, 0, 0, "FILE",
         "write the profile JSON to FILE (atomically)"},
        {"json", PT_OPT_FLAG, &a->json, 0, 0, 0, NULL,
         "print the profile JSON on stdout (the default when stdout is not\n"
         "a terminal; on a terminal a table is shown instead)"},
        {"repeats", PT_OPT_INT, &a->repeats, 1, MAX_REPEATS, 0, "N",
         "timed runs per layer; the median is kept (default " PT_OPTS_STR(DEFAULT_REPEATS) ")"},
        {"warmup", PT_OPT_INT, &a->warmup, 0, MAX_REPEATS, 0, "N",
         "untimed runs first (default " PT_OPTS_STR(DEFAULT_WARMUP) ")"},
        {"threads", PT_OPT_INT, &a->threads, 1, 1024, 0, "N",
         "OpenBLAS threads (default: OpenBLAS's own choice)"},
        {"device", PT_OPT_STRING, &a->device, 0, 0, 0, "D",
         "cpu (default) or cuda:N[:fp32|tf32|bf16]; the profile records\n"
         "the GPU's name"},
        {"plan", PT_OPT_STRING, &a->plan, 0, 0, 0, "P",
         "measure each stage of plan P whole, in place: its layers in\n"
         "sequence in one net, alternating with each layer alone; the\n"
         "stage's layers are scaled to the whole stage's time"},
        {"beside", PT_OPT_FLAG, &a->beside, 0, 0, 0, NULL,
         "with --plan: measure every stage replica at once, one process\n"
         "each, as the plan's agents run on this machine"},
        {"fixed-share", PT_OPT_FLAG, &a->rows_fit, 0, 0, 0, NULL,
         "also time each layer at half the rows and write the share of its\n"
         "time that does not scale with rows (layers[i].fixed_share; the\n"
         "least of the repeats at each row count)"},
        {"analytic", PT_OPT_FLAG, &analytic, 0, 0, 0, NULL,
         "derive the profile from FLOPs and a device description instead\n"
         "(see pipetop profile --analytic --help)"},
        {"torch", PT_OPT_STRING, &torch, 0, 0, 0, "M:F",
         "measure a PyTorch module instead (see pipetop profile --torch M:F\n--help)"},
    };
    int rc = pt_opts_command("profile", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if (!a->model) {
        fprintf(stderr, "pipetop profile: --model is required (see pipetop profile --help)\n");
        return 2;
    }
    if (a->beside && !a->plan) {
        fprintf(stderr, "pipetop profile: --beside needs --plan (see pipetop profile --help)\n");
        return 2;
    }
    return -1;
}

int pt_cmd_profile(int argc, char **argv)
{
    /* Analytic profiles (from FLOPs and a device description) live in
     * tui/cli/cmd_profile_analytic.c, PyTorch modules' in cmd_profile_torch.c. */
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--torch", 7) && (argv[i][7] == '\0' || argv[i][7] == '='))
            return pt_cmd_profile_torch(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--analytic"))
            return pt_cmd_profile_analytic(argc, argv);
    profile_args a;
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if (getenv("PT_FAULT_PROFILE")) { /* tests: a measurement that fails */
        fprintf(stderr, "pipetop profile: failed as asked ($PT_FAULT_PROFILE)\n");
        return 1;
    }
    pt_blas_fixup_core(NULL); /* may restart the process with faster BLAS kernels */
    if (a.threads > 0)
        openblas_set_num_threads(a.threads);
    pt_error err = {0};
    pt_model_spec *spec = NULL;
    pt_profile *p = NULL;
    pt_device_spec dev = {0};
    int rc = 0;
    if (a.device && ((rc = pt_device_spec_parse(a.device, &dev, &err)) < 0)) {
        fprintf(stderr, "pipetop profile: --device: %s\n", err.msg);
        return 2;
    }
    if ((rc = pt_device_open(&dev, &a.be, &err)) < 0) {
        fprintf(stderr, "pipetop profile: --device %s: %s\n", a.device, err.msg);
        return 1;
    }
    rc = pt_model_spec_find(a.model, &spec, &err);
    if (rc == 0 && !(p = pt_profile_new(spec->layer_count)))
        rc = pt_error_set(&err, PT_ENOMEM, "out of memory");
    if (rc == 0) {
        snprintf(p->model, sizeof p->model, "%s", spec->name);
        if (dev.cuda)
            pt_device_describe(a.be, p->device, sizeof p->device);
        else
            device_name(p->device, sizeof p->device);
        snprintf(p->source, sizeof p->source, "measured");
        p->microbatch = a.batch;
        p->input_bytes = pt_model_spec_input_elems(spec) * a.batch * (int64_t)sizeof(float);
        for (int i = 0; i < spec->layer_count && rc == 0; i++)
            rc = profile_layer(spec, i, &a, &p->layers[i], &err);
        if (rc == 0 && a.plan)
            rc = profile_stages(spec, &a, p, &err);
    }
    if (rc == 0 && a.out && (rc = pt_profile_save(p, a.out, &err)) == 0 && !a.json)
        printf("wrote %s: %d layers of %s at micro-batch %d\n", a.out, p->layer_count, p->model,
               a.batch);
    if (rc == 0 && (a.json || (!a.out && !isatty(STDOUT_FILENO)))) {
        char *json = pt_profile_to_json(p);
        if (!json)
            rc = pt_error_set(&err, PT_ENOMEM, "out of memory");
        else
            fputs(json, stdout);
        free(json);
    } else if (rc == 0 && !a.out) {
        print_table(p, &a);
    }
    pt_profile_free(&p);
    pt_model_spec_free(&spec);
    pt_device_close(&a.be);
    if (rc < 0) {
        fprintf(stderr, "pipetop profile: %s\n", err.msg[0] ? err.msg : pt_strerror(rc));
        return 1;
    }
    return 0;
}
