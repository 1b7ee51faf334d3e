/* pipetop profile --torch MODULE:FACTORY --input SHAPE --batch B: a profile
 * of a PyTorch nn.Module, measured by the bridge (bridge/pipetop_torch/
 * profile.py, run with Debian's python3-torch) and checked here as any
 * profile is read. docs/torch.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/opts.h"
#include "protocol/profile.h"
#include "tui/cli/commands.h"
#include "tui/cli/torch_bridge.h"

#define TORCH_DEFAULT_REPEATS "5"
#define TORCH_DEFAULT_WARMUP  "1"
#define TORCH_PATH_CAP        4096
#define TORCH_ARGS_MAX        40
#define TORCH_INT_CHARS       16

static const char usage_text[] =
    "usage: pipetop profile --torch MODULE:FACTORY --input SHAPE --batch B [options]\n"
    "Measures a PyTorch nn.Module layer by layer and writes a pipetop profile: each\n"
    "layer's forward and backward time at micro-batch B, its parameter, output and\n"
    "saved-for-backward bytes, under its fully qualified name. The layers are the\n"
    "module's top-level children (nn.Sequential and nn.ModuleList flattened) or --layers.\n"
    "Runs Debian's /usr/bin/python3 (python3-torch), or $" PT_TORCH_PYTHON_ENV ". The\n"
    "factory is called without arguments: torchvision's builders then download no\n"
    "weights. See docs/torch.md.\n\n";

typedef struct torch_args {
    const char *module, *input, *layers, *device, *clock, *precision, *name, *out, *python;
    int batch, tokens, repeats, warmup, threads, json;
} torch_args;

static int parse(int argc, char **argv, torch_args *a)
{
    pt_opt opts[] = {
        {"torch", PT_OPT_STRING, &a->module, 0, 0, 0, "M:F",
         "the module's factory, e.g. torchvision.models:resnet50"},
        {"input", PT_OPT_STRING, &a->input, 0, 0, 0, "SHAPE", "one sample's shape: 3,224,224"},
        {"batch", PT_OPT_INT, &a->batch, 1, PT_PROFILE_BATCH_MAX, 0, "B",
         "micro-batch size the figures are for"},
        {"tokens", PT_OPT_INT, &a->tokens, 1, 1 << 30, 0, "VOCAB",
         "the input is token ids in [0, VOCAB) (default: float)"},
        {"layers", PT_OPT_STRING, &a->layers, 0, 0, 0, "FQN,...",
         "the layers, in forward order (default: the top-level children)"},
        {"repeats", PT_OPT_INT, &a->repeats, 1, 10000, 0, "N",
         "timed runs per layer; the median is kept (default " TORCH_DEFAULT_REPEATS ")"},
        {"warmup", PT_OPT_INT, &a->warmup, 0, 10000, 0, "N",
         "untimed runs first (default " TORCH_DEFAULT_WARMUP ")"},
        {"threads", PT_OPT_INT, &a->threads, 1, 1024, 0, "N", "torch threads (default: torch's)"},
        {"device", PT_OPT_STRING, &a->device, 0, 0, 0, "D",
         "cpu (default) or cuda[:N] (timed with CUDA events)"},
        {"clock", PT_OPT_STRING, &a->clock, 0, 0, 0, "C",
         "on the CPU: wall (default) or cpu, the process's CPU time, which other work on a "
         "shared machine does not inflate"},
        {"precision", PT_OPT_STRING, &a->precision, 0, 0, 0, "P", "fp32 (default), bf16 or fp16"},
        {"name", PT_OPT_STRING, &a->name, 0, 0, 0, "NAME",
         "the model's name in the profile (default: the factory's)"},
        {"out", PT_OPT_STRING, &a->out, 0, 0, 0, "FILE",
         "write the profile JSON to FILE (atomically)"},
        {"json", PT_OPT_FLAG, &a->json, 0, 0, 0, NULL, "print the profile JSON on stdout"},
        {"python", PT_OPT_STRING, &a->python, 0, 0, 0, "PATH",
         "the interpreter (default $" PT_TORCH_PYTHON_ENV ", else " PT_TORCH_PYTHON_DEFAULT ")"},
    };
    int rc = pt_opts_command("profile", argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                             usage_text, NULL);
    if (rc >= 0)
        return rc;
    if (!a->module || !a->input || !a->batch) {
        fprintf(stderr, "pipetop profile: --torch needs --input SHAPE and --batch B (see "
                        "pipetop profile --torch M:F --help)\n");
        return 2;
    }
    if (a->clock && strcmp(a->clock, "wall") != 0 && strcmp(a->clock, "cpu") != 0) {
        fprintf(stderr, "pipetop profile: --clock \"%s\": wall or cpu\n", a->clock);
        return 2;
    }
    return -1;
}

/* The bridge's command line (pointers into a and num). */
static int bridge_args(const torch_args *a, const char *out, char num[][TORCH_INT_CHARS],
                       const char **v)
{
    int k = 0;
    v[k++] = "--module";
    v[k++] = a->module;
    v[k++] = "--input";
    v[k++] = a->input;
    snprintf(num[0], TORCH_INT_CHARS, "%d", a->batch);
    v[k++] = "--batch";
    v[k++] = num[0];
    const struct {
        const char *flag;
        int value, given;
    } ints[] = {{"--tokens", a->tokens, a->tokens > 0},
                {"--repeats", a->repeats, a->repeats > 0},
                {"--warmup", a->warmup, a->warmup >= 0},
                {"--threads", a->threads, a->threads > 0}};
    for (int i = 0; i < 4; i++)
        if (ints[i].given) {
            snprintf(num[i + 1], TORCH_INT_CHARS, "%d", ints[i].value);
            v[k++] = ints[i].flag;
            v[k++] = num[i + 1];
        }
    const char *strs[][2] = {{"--layers", a->layers},
                             {"--device", a->device},
                             {"--clock", a->clock},
                             {"--dtype", a->precision},
                             {"--name", a->name}};
    for (int i = 0; i < 5; i++)
        if (strs[i][1]) {
            v[k++] = strs[i][0];
            v[k++] = strs[i][1];
        }
    v[k++] = "--out";
    v[k++] = out;
    v[k] = NULL;
    return k;
}

static void print_summary(const pt_profile *p, const char *out)
{
    int64_t params = 0;
    double f = 0, b = 0;
    for (int i = 0; i < p->layer_count; i++) {
        params += p->layers[i].param_bytes;
        f += p->layers[i].fwd_ms;
        b += p->layers[i].bwd_ms;
    }
    printf("wrote %s: %d layers of %s at micro-batch %d (%s, %s, %s): %lld parameter bytes, "
           "forward %.3f ms + backward %.3f ms\n",
           out, p->layer_count, p->model, p->microbatch, p->origin.framework, p->device,
           pt_precision_name(p->precision), (long long)params, f, b);
}

int pt_cmd_profile_torch(int argc, char **argv)
{
    torch_args a = {.warmup = -1};
    int st = parse(argc, argv, &a);
    if (st >= 0)
        return st;
    char dir[] = "/tmp/pipetop-torch-XXXXXX", tmp[sizeof dir + 32];
    char num[5][TORCH_INT_CHARS];
    const char *v[TORCH_ARGS_MAX];
    pt_error err = {0};
    pt_profile *p = NULL;
    if (!mkdtemp(dir)) {
        perror("pipetop profile: mkdtemp");
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s/profile.json", dir);
    bridge_args(&a, tmp, num, v);
    int rc = pt_torch_run(a.python, "pipetop_torch.profile", v, &err);
    if (rc == 0)
        rc = pt_profile_load(tmp, &p, &err);
    unlink(tmp);
    rmdir(dir);
    if (rc == 0 && a.out && (rc = pt_profile_save(p, a.out, &err)) == 0 && !a.json)
        print_summary(p, a.out);
    if (rc == 0 && (a.json || !a.out)) {
        char *json = pt_profile_to_json(p);
        rc = json ? 0 : pt_error_set(&err, PT_ENOMEM, "out of memory");
        if (json)
            fputs(json, stdout);
        free(json);
    }
    pt_profile_free(&p);
    if (rc < 0) {
        fprintf(stderr, "pipetop profile: --torch %s: %s\n", a.module, err.msg);
        return 1;
    }
    return 0;
}
