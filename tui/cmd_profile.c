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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "protocol/model.h"
#include "protocol/profile.h"
#include "runtime/backend_select.h"
#include "runtime/blas_core.h"
#include "runtime/net.h"
#include "runtime/rng.h"
#include "protocol/opts.h"
#include "tui/commands.h"

#define DEFAULT_BATCH   64
#define DEFAULT_REPEATS 10
#define DEFAULT_WARMUP  3
#define MAX_REPEATS     10000
#define MAX_BATCH       65536
#define PROFILE_SEED    1
#define CPUINFO_LINE    512

typedef struct profile_args {
    const char *model, *out, *device;
    int batch, json, repeats, warmup, threads;
    const pt_backend *be; /* opened from device */
} profile_args;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

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

/* Input, labels and gradients for a one-layer net, filled from a fixed stream. */
typedef struct layer_bufs {
    float *x, *dy, *dx; /* device */
    int32_t *labels;    /* host */
} layer_bufs;

static int make_bufs(pt_net *net, const pt_model_spec *spec, int layer, int batch, layer_bufs *b)
{
    const pt_backend *be = pt_net_backend(net);
    pt_arena *arena = pt_net_arena(net);
    int64_t in = pt_net_in_elems(net), out = pt_net_out_elems(net);
    int64_t lab = pt_net_label_count(net) * batch;
    float *host = malloc((size_t)((in > out ? in : out) * batch) * sizeof(float));
    b->x = pt_arena_alloc_floats(arena, PT_MEM_COMM, in * batch);
    b->dy = pt_net_has_loss(net) ? NULL : pt_arena_alloc_floats(arena, PT_MEM_COMM, out * batch);
    b->dx = layer > 0 ? pt_arena_alloc_floats(arena, PT_MEM_COMM, in * batch) : NULL;
    b->labels = lab > 0 ? malloc((size_t)lab * sizeof(int32_t)) : NULL;
    if (!host || !b->x || (!pt_net_has_loss(net) && !b->dy) || (layer > 0 && !b->dx) ||
        (lab > 0 && !b->labels)) {
        free(host);
        return PT_ENOMEM;
    }
    pt_rng rng = pt_rng_make(PROFILE_SEED, (uint64_t)layer);
    int tokens = layer == 0 && spec->input_kind == PT_INPUT_TOKENS;
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

/* Times layer `layer` into pl. */
static int profile_layer(const pt_model_spec *spec, int layer, const profile_args *a,
                         pt_profile_layer *pl, pt_error *err)
{
    pt_net_config cfg = pt_net_config_default(spec);
    cfg.first = layer;
    cfg.last = layer + 1;
    cfg.max_batch = a->batch;
    cfg.seed = PROFILE_SEED;
    cfg.backend = a->be;
    pt_net *net = NULL;
    int rc = pt_net_create(spec, &cfg, &net, err);
    if (rc < 0)
        return rc;
    layer_bufs b = {0};
    double *fwd = malloc((size_t)a->repeats * sizeof(double));
    double *bwd = malloc((size_t)a->repeats * sizeof(double));
    /* the two halves of the split backward (zero-bubble schedules), each timed on its own */
    double *bin = malloc((size_t)a->repeats * sizeof(double));
    double *bw = malloc((size_t)a->repeats * sizeof(double));
    if (!fwd || !bwd || !bin || !bw || (rc = make_bufs(net, spec, layer, a->batch, &b)) < 0) {
        rc = pt_error_set(err, PT_ENOMEM, "layer %d: out of memory", layer);
        goto done;
    }
    const pt_backend *be = pt_net_backend(net);
    for (int r = -a->warmup; r < a->repeats; r++) {
        be->synchronize(be);
        double t0 = now_ms();
        rc = pt_net_forward(net, 0, NULL, b.x, a->batch, b.labels, NULL, NULL);
        be->synchronize(be);
        double t1 = now_ms();
        if (rc == 0)
            rc = pt_net_backward(net, 0, NULL, NULL, b.dy, b.dx);
        be->synchronize(be);
        double t2 = now_ms();
        if (rc == 0)
            rc = pt_net_forward(net, 0, NULL, b.x, a->batch, b.labels, NULL, NULL);
        be->synchronize(be);
        double t3 = now_ms();
        if (rc == 0)
            rc = pt_net_backward_input(net, 0, NULL, b.dy, b.dx);
        be->synchronize(be);
        double t4 = now_ms();
        if (rc == 0)
            rc = pt_net_backward_weight(net, 0, NULL, NULL);
        be->synchronize(be);
        double t5 = now_ms();
        if (rc < 0) {
            rc = pt_error_set(err, rc, "layer %d (%s): %s", layer, spec->layers[layer].name,
                              pt_strerror(rc));
            goto done;
        }
        if (r >= 0) {
            fwd[r] = t1 - t0;
            bwd[r] = t2 - t1;
            bin[r] = t4 - t3;
            bw[r] = t5 - t4;
        }
    }
    snprintf(pl->name, sizeof pl->name, "%s", spec->layers[layer].name);
    pl->fwd_ms = median(fwd, a->repeats);
    pl->bwd_ms = median(bwd, a->repeats);
    pl->recompute_ms = pl->fwd_ms;
    pl->split = 1;
    pl->bwd_input_ms = median(bin, a->repeats);
    pl->bwd_weight_ms = median(bw, a->repeats);
    pl->act_bytes = pt_net_out_elems(net) * a->batch * (int64_t)sizeof(float);
    pl->param_bytes = pt_net_param_count(net) * (int64_t)sizeof(float);
    rc = pt_net_layer_memory(spec, layer, a->batch, a->be, &pl->saved_bytes, &pl->scratch_bytes,
                             err);
    if (rc == 0)
        rc = pt_net_layer_keep(spec, layer, a->batch, a->be, &pl->keep_bytes, err);
done:
    free(fwd);
    free(bwd);
    free(bin);
    free(bw);
    free(b.labels);
    pt_net_destroy(&net); /* its arena holds x, dy and dx */
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
    int analytic = 0; /* pt_cmd_profile hands --analytic over before parsing */
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
        {"analytic", PT_OPT_FLAG, &analytic, 0, 0, 0, NULL,
         "derive the profile from FLOPs and a device description instead\n"
         "(see pipetop profile --analytic --help)"},
    };
    int rc = pt_opts_command("profile", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if (!a->model) {
        fprintf(stderr, "pipetop profile: --model is required (see pipetop profile --help)\n");
        return 2;
    }
    return -1;
}

int pt_cmd_profile(int argc, char **argv)
{
    /* Analytic profiles (from FLOPs and a device description) live in
     * tui/cmd_profile_analytic.c. */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--analytic"))
            return pt_cmd_profile_analytic(argc, argv);
    profile_args a;
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
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
