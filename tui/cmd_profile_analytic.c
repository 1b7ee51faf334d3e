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
#include "tui/commands.h"

#define BYTES_PER_MIB    (1024.0 * 1024.0)
#define FLOPS_PER_TFLOPS 1e12
#define BYTES_PER_GB     1e9
#define BYTES_PER_GIB    (1024.0 * 1024.0 * 1024.0)

static const char usage_text[] =
    "usage: pipetop profile --analytic --model MODEL --device DEVICE --batch B\n"
    "                       [--efficiency E] [--out PROFILE.json] [--json]\n"
    "Derives each layer's forward and backward time from its FLOPs and the bytes it\n"
    "moves: time = max(FLOPs / (peak FLOP/s x E), bytes / memory bandwidth), backward\n"
    "twice the forward work; activations and parameters in fp32.\n"
    "  --model MODEL    a model spec file or a name in models/\n"
    "  --device DEVICE  a device description file or a name in devices/\n"
    "  --batch B        micro-batch size the profile is for\n"
    "  --efficiency E   fraction of peak FLOP/s reached, in (0, 1] (default 0.5)\n"
    "  --out FILE       write the profile there\n"
    "  --json           print the profile as JSON instead of a table\n";

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

/* Takes "--name VALUE" or "--name=VALUE" at argv[*i]; NULL when argv[*i] is
 * not that option (*missing set when it is but has no value). */
static const char *option(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static void print_table(const pt_profile *p, const pt_device_desc *dev, double eff)
{
    printf("%s on %s (%.3g TFLOP/s fp32, %.4g GB/s, %.4g GiB), micro-batch %d, efficiency "
           "%.2f\n",
           p->model, dev->name, dev->peak_flops / FLOPS_PER_TFLOPS,
           dev->mem_bandwidth / BYTES_PER_GB, (double)dev->memory_bytes / BYTES_PER_GIB,
           p->microbatch, eff);
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
    const char *model = NULL, *device = NULL, *out = NULL, *v;
    int batch = 0, json = 0;
    pt_analytic_options opt = {0};
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        char *end;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            list_devices(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--analytic")) {
            continue;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if ((v = option(argc, argv, &i, "--model", &missing))) {
            model = v;
        } else if ((v = option(argc, argv, &i, "--device", &missing))) {
            device = v;
        } else if ((v = option(argc, argv, &i, "--out", &missing))) {
            out = v;
        } else if ((v = option(argc, argv, &i, "--batch", &missing))) {
            long b = strtol(v, &end, 10);
            if (*end || end == v || b < 1 || b > PT_PROFILE_BATCH_MAX) {
                fprintf(stderr, "pipetop profile: --batch: '%s' is not in 1..%d\n", v,
                        PT_PROFILE_BATCH_MAX);
                return 2;
            }
            batch = (int)b;
        } else if ((v = option(argc, argv, &i, "--efficiency", &missing))) {
            opt.efficiency = strtod(v, &end);
            if (*end || end == v || !(opt.efficiency > 0 && opt.efficiency <= 1)) {
                fprintf(stderr, "pipetop profile: --efficiency: '%s' is not in (0, 1]\n", v);
                return 2;
            }
        } else if (missing) {
            fprintf(stderr, "pipetop profile: %s needs a value\n", argv[i]);
            return 2;
        } else {
            fprintf(stderr, "pipetop profile: unexpected '%s'\n%s", argv[i], usage_text);
            return 2;
        }
    }
    if (!model || !device || !batch) {
        fprintf(stderr, "pipetop profile --analytic: needs --model, --device and --batch\n%s",
                usage_text);
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
