/* pipetop profile --analytic: a profile derived from a model spec's FLOPs and
 * bytes and a device description, for devices that are not at hand
 * (planner/analytic.h). `pipetop profile` hands over here on --analytic. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/analytic.h"
#include "protocol/datadir.h"
#include "protocol/device.h"
#include "protocol/model.h"
#include "protocol/profile.h"
#include "protocol/opts.h"
#include "tui/cli/commands.h"

#define BYTES_PER_MIB    (1024.0 * 1024.0)
#define FLOPS_PER_TFLOPS 1e12
#define BYTES_PER_GB     1e9
#define BYTES_PER_GIB    (1024.0 * 1024.0 * 1024.0)
/* --efficiency is a fraction in (0, 1]: the least value taken. */
#define EFFICIENCY_MIN 1e-6

static const char usage_text[] =
    "usage: pipetop profile --analytic --model MODEL --device DEVICE --batch B\n"
    "                       [--precision P] [--recompute none|selective] [--efficiency E]\n"
    "                       [--out PROFILE.json] [--json]\n"
    "Derives each layer's forward and backward time from its FLOPs and the bytes it\n"
    "moves: time = max(FLOPs / (peak FLOP/s x E), bytes / memory bandwidth) + kernel\n"
    "launches, backward twice the forward work; in the precision P (fp32 default; bf16,\n"
    "fp16, fp8: mixed precision with Megatron-LM's activation layout).\n";

static void list_devices(FILE *f)
{
    char dir[PATH_MAX];
    DIR *d = pt_datadir_folder("devices", dir, sizeof dir, NULL) == 0 ? opendir(dir) : NULL;
    if (!d)
        return;
    fprintf(f, "shipped devices:");
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 5 && !strcmp(e->d_name + n - 5, ".json"))
            fprintf(f, " %.*s", (int)(n - 5), e->d_name);
    }
    fprintf(f, "\n");
    closedir(d);
}

static void print_table(const pt_profile *p, const pt_device_desc *dev, double eff)
{
    printf("%s on %s (%.4g TFLOP/s %s, %.4g GB/s, %.4g GiB), micro-batch %d, efficiency "
           "%.2f\n",
           p->model, dev->name, pt_device_peak(dev, p->precision) / FLOPS_PER_TFLOPS,
           pt_precision_name(p->precision), dev->mem_bandwidth / BYTES_PER_GB,
           (double)dev->memory_bytes / BYTES_PER_GIB, p->microbatch, eff);
    printf("%5s  %-24s %12s %12s %12s %12s\n", "#", "layer", "fwd ms", "bwd ms", "act MiB",
           "param MiB");
    double f = 0, b = 0, params = 0;
    for (int i = 0; i < p->layer_count; i++) {
        const pt_profile_layer *l = &p->layers[i];
        printf("%5d  %-24.24s %12.5g %12.5g %12.5g %12.5g\n", i, l->name, l->fwd_ms, l->bwd_ms,
               (double)l->act_bytes / BYTES_PER_MIB, (double)l->param_bytes / BYTES_PER_MIB);
        f += l->fwd_ms;
        b += l->bwd_ms;
        params += (double)l->param_bytes;
    }
    printf("total: %d layers, fwd %.5g ms, bwd %.5g ms, parameters %.5g MiB, input %.5g MiB\n",
           p->layer_count, f, b, params / BYTES_PER_MIB, (double)p->input_bytes / BYTES_PER_MIB);
}

int pt_cmd_profile_analytic(int argc, char **argv)
{
    const char *model = NULL, *device = NULL, *out = NULL, *precision = NULL, *recompute = NULL;
    int batch = 0, json = 0, analytic = 0;
    pt_analytic_options opt = {0};
    pt_opt opts[] = {
        {"analytic", PT_OPT_FLAG, &analytic, 0, 0, 0, NULL,
         "derive the profile from FLOPs and bytes (this command)"},
        {"model", PT_OPT_STRING, &model, 0, 0, 0, "MODEL",
         "a model spec file or a name in models/"},
        {"device", PT_OPT_STRING, &device, 0, 0, 0, "DEVICE",
         "a device description file or a name in devices/"},
        {"batch", PT_OPT_INT, &batch, 1, PT_PROFILE_BATCH_MAX, 0, "B",
         "micro-batch size the profile is for"},
        {"precision", PT_OPT_STRING, &precision, 0, 0, 0, "P",
         "fp32 (default), tf32, bf16, fp16 or fp8: the device's peak for it,\n"
         "activation and weight bytes, optimizer state"},
        {"recompute", PT_OPT_STRING, &recompute, 0, 0, 0, "R",
         "none (default) or selective: recompute the attention core in the\n"
         "backward instead of keeping it (Korthikanti et al.; bf16, fp16, fp8)"},
        {"efficiency", PT_OPT_DOUBLE, &opt.efficiency, EFFICIENCY_MIN, 1, 0, "E",
         "fraction of peak FLOP/s reached, in (0, 1] (default 0.5)"},
        {"out", PT_OPT_STRING, &out, 0, 0, 0, "FILE", "write the profile there"},
        {"json", PT_OPT_FLAG, &json, 0, 0, 0, NULL, "print the profile as JSON instead of a table"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int prc = pt_opts_parse("profile", argc, argv, opts, n, stderr);
    if (prc == PT_OPTS_HELP) {
        pt_opts_help(stdout, usage_text, opts, n, NULL);
        list_devices(stdout);
        return 0;
    }
    if (prc != PT_OPTS_OK)
        return 2;
    if (!model || !device || !batch) {
        fprintf(stderr, "pipetop profile --analytic: needs --model, --device and --batch "
                        "(see pipetop profile --analytic --help)\n");
        return 2;
    }
    if (precision && (opt.precision = pt_precision_parse(precision)) < 0) {
        fprintf(stderr, "pipetop profile --analytic: --precision: '%s' is not one of %s\n",
                precision, pt_precision_names());
        return 2;
    }
    if (recompute && strcmp(recompute, "none") &&
        !(opt.selective = !strcmp(recompute, "selective"))) {
        fprintf(stderr, "pipetop profile --analytic: --recompute: '%s' is not none or selective\n",
                recompute);
        return 2;
    }
    pt_error err = {0};
    pt_model_spec *spec = NULL;
    pt_device_desc dev;
    pt_profile *p = NULL;
    int rc = 1;
    if (pt_model_spec_find(model, &spec, &err) < 0 || pt_device_find(device, &dev, &err) < 0 ||
        pt_analytic_profile(spec, &dev, batch, &opt, &p, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        goto done;
    }
    if (out && pt_profile_save(p, out, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        goto done;
    }
    if (json) {
        char *text = pt_profile_to_json(p);
        if (!text) {
            fprintf(stderr, "pipetop profile: out of memory\n");
            goto done;
        }
        fputs(text, stdout);
        free(text);
    } else {
        print_table(p, &dev, opt.efficiency ? opt.efficiency : PT_ANALYTIC_COMPUTE_EFFICIENCY);
        if (out)
            printf("wrote %s\n", out);
    }
    rc = 0;
done:
    pt_profile_free(&p);
    pt_model_spec_free(&spec);
    return rc;
}
