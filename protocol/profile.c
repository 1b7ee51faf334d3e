/* Profile: parser, writer, validator (docs/formats.md, "Profile"). */
#include "protocol/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"

static const char *const profile_keys[] = {"v",          "model",       "device",   "source",
                                           "microbatch", "input_bytes", "layers",   "origin",
                                           "runtime",    "precision",   "roofline", NULL};
static const char *const roofline_keys[] = {"peak_flops", "mem_bandwidth", "launch_us", NULL};
static const char *const origin_keys[] = {"kind", "run",       "base",   "date",
                                          "gen",  "framework", "module", NULL};
static const char *const runtime_keys[] = {
    "op_overhead_ms",       "opt_gbytes_per_s",   "sends_hold",   "allreduce_gbytes_per_s",
    "allreduce_latency_us", "stash_gbytes_per_s", "recv_wake_ms", NULL};
static const char *const layer_keys[] = {"name",
                                         "fwd_ms",
                                         "bwd_ms",
                                         "recompute_ms",
                                         "act_bytes",
                                         "param_bytes",
                                         "saved_bytes",
                                         "scratch_bytes",
                                         "bwd_input_ms",
                                         "bwd_weight_ms",
                                         "keep_bytes",
                                         "fixed_share",
                                         "flops",
                                         "bytes",
                                         "weight_bytes",
                                         "kernels",
                                         "bwd_fixed_share",
                                         "recompute_fixed_share",
                                         NULL};
static const char *const sources[] = {"measured", "analytic", "imported", "calibrated", NULL};
#define BYTES_PER_GB 1e9 /* runtime.opt_gbytes_per_s */
#define US_PER_S     1e6 /* runtime.allreduce_latency_us */

static const pt_jr_range NON_NEGATIVE = {0.0, INFINITY, 0, 0};
/* A layer's time: finite, and at most a day (1e308 ms printed as "inf ms"). */
static const pt_jr_range LAYER_MS = {0.0, PT_PROFILE_LAYER_MS_MAX, 0, 0};
static const pt_jr_range SHARE = {0.0, 1.0, 0, 1}; /* [0, 1) */
static const pt_jr_range POSITIVE = {0.0, INFINITY, 1, 0};
#define KERNELS_MAX (1 << 24) /* launches per layer forward */

pt_profile *pt_profile_new(int layer_count)
{
    if (layer_count < 0)
        return NULL;
    pt_profile *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (layer_count > 0) {
        p->layers = calloc((size_t)layer_count, sizeof *p->layers);
        if (!p->layers) {
            free(p);
            return NULL;
        }
    }
    p->layer_count = layer_count;
    p->origin.gen = -1;
    p->precision = PT_PRECISION_FP32;
    return p;
}

double pt_profile_layer_share(const pt_profile_layer *l, pt_profile_pass pass)
{
    double f = !l->pass_shares || pass == PT_PROFILE_PASS_FWD ? l->fixed_share
               : pass == PT_PROFILE_PASS_BWD                  ? l->bwd_fixed_share
                                                              : l->recompute_fixed_share;
    return f > 0 && f < 1 ? f : 0;
}

pt_profile *pt_profile_copy(const pt_profile *src)
{
    if (!src)
        return NULL;
    pt_profile *p = pt_profile_new(src->layer_count);
    if (!p)
        return NULL;
    pt_profile_layer *layers = p->layers;
    *p = *src;
    p->layers = layers;
    if (src->layer_count > 0)
        memcpy(layers, src->layers, (size_t)src->layer_count * sizeof *layers);
    return p;
}

void pt_profile_free(pt_profile **profile_p)
{
    if (!profile_p || !*profile_p)
        return;
    free((*profile_p)->layers);
    free(*profile_p);
    *profile_p = NULL;
}

static int parse_layer(pt_jr *jr, const cJSON *obj, const char *path, int index,
                       pt_profile_layer *l)
{
    int rc = pt_jr_is_object(jr, obj, path);
    if (rc < 0 || (rc = pt_jr_keys(jr, obj, path, layer_keys)) < 0)
        return rc;
    char def[PT_NAME_MAX];
    snprintf(def, sizeof def, "layer%d", index);
    if ((rc = pt_jr_str(jr, obj, path, "name", PT_JR_OPTIONAL, def, l->name, sizeof l->name)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "fwd_ms", PT_JR_REQUIRED, 0, LAYER_MS, &l->fwd_ms)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "bwd_ms", PT_JR_REQUIRED, 0, LAYER_MS, &l->bwd_ms)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "recompute_ms", PT_JR_OPTIONAL, l->fwd_ms, LAYER_MS,
                        &l->recompute_ms)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "act_bytes", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &l->act_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "param_bytes", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &l->param_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "saved_bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->saved_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "scratch_bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->scratch_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "keep_bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->keep_bytes)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "fixed_share", PT_JR_OPTIONAL, 0, SHARE, &l->fixed_share)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "flops", PT_JR_OPTIONAL, 0, NON_NEGATIVE, &l->flops)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "weight_bytes", PT_JR_OPTIONAL, l->param_bytes, 0,
                          PT_JSON_INT_MAX, &l->weight_bytes)) < 0 ||
        (rc = pt_jr_int(jr, obj, path, "kernels", PT_JR_OPTIONAL, l->fwd_ms > 0, 0, KERNELS_MAX,
                        &l->kernels)) < 0)
        return rc;
    l->pass_shares = cJSON_HasObjectItem(obj, "bwd_fixed_share") ||
                     cJSON_HasObjectItem(obj, "recompute_fixed_share");
    if ((rc = pt_jr_num(jr, obj, path, "bwd_fixed_share", PT_JR_OPTIONAL, l->fixed_share, SHARE,
                        &l->bwd_fixed_share)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "recompute_fixed_share", PT_JR_OPTIONAL, l->fixed_share,
                        SHARE, &l->recompute_fixed_share)) < 0)
        return rc;
    int has_b = cJSON_HasObjectItem(obj, "bwd_input_ms"),
        has_w = cJSON_HasObjectItem(obj, "bwd_weight_ms");
    if (has_b != has_w)
        return pt_jr_fail(jr, PT_EINVAL, path, has_b ? "bwd_input_ms" : "bwd_weight_ms",
                          "given without %s: a split backward needs both halves",
                          has_b ? "bwd_weight_ms" : "bwd_input_ms");
    if (has_b && ((rc = pt_jr_num(jr, obj, path, "bwd_input_ms", PT_JR_REQUIRED, 0, NON_NEGATIVE,
                                  &l->bwd_input_ms)) < 0 ||
                  (rc = pt_jr_num(jr, obj, path, "bwd_weight_ms", PT_JR_REQUIRED, 0, NON_NEGATIVE,
                                  &l->bwd_weight_ms)) < 0))
        return rc;
    l->split = has_b;
    return 0;
}

static int is_source(const char *s)
{
    for (int k = 0; sources[k]; k++)
        if (!strcmp(sources[k], s))
            return 1;
    return 0;
}

static int parse_origin(pt_jr *jr, const cJSON *root, pt_profile *p)
{
    const cJSON *o = NULL;
    int rc = pt_jr_object(jr, root, "", "origin", PT_JR_OPTIONAL, &o);
    if (rc < 0 || !o)
        return rc;
    pt_profile_origin *g = &p->origin;
    if ((rc = pt_jr_keys(jr, o, "origin", origin_keys)) < 0 ||
        (rc = pt_jr_str(jr, o, "origin", "kind", PT_JR_REQUIRED, NULL, g->kind, sizeof g->kind)) <
            0 ||
        (rc = pt_jr_str(jr, o, "origin", "run", PT_JR_OPTIONAL, NULL, g->run, sizeof g->run)) < 0 ||
        (rc = pt_jr_str(jr, o, "origin", "base", PT_JR_OPTIONAL, NULL, g->base, sizeof g->base)) <
            0 ||
        (rc = pt_jr_str(jr, o, "origin", "date", PT_JR_OPTIONAL, NULL, g->date, sizeof g->date)) <
            0 ||
        (rc = pt_jr_int64(jr, o, "origin", "gen", PT_JR_OPTIONAL, -1, 0, PT_JSON_INT_MAX,
                          &g->gen)) < 0 ||
        (rc = pt_jr_str(jr, o, "origin", "framework", PT_JR_OPTIONAL, NULL, g->framework,
                        sizeof g->framework)) < 0 ||
        (rc = pt_jr_str(jr, o, "origin", "module", PT_JR_OPTIONAL, NULL, g->module,
                        sizeof g->module)) < 0)
        return rc;
    if (!is_source(g->kind))
        return pt_jr_fail(jr, PT_EINVAL, "origin", "kind",
                          "unknown kind \"%s\" (measured, analytic, imported or calibrated)",
                          g->kind);
    if (!strcmp(g->kind, "calibrated") && !g->run[0])
        return pt_jr_fail(jr, PT_EINVAL, "origin", "run",
                          "a calibrated profile must name the run it was fitted to");
    return 0;
}

/* "precision": a name of protocol/precision.h, fp32 when absent. */
static int parse_precision(pt_jr *jr, const cJSON *root, pt_profile *p)
{
    char name[16];
    int rc = pt_jr_str(jr, root, "", "precision", PT_JR_OPTIONAL, "fp32", name, sizeof name);
    if (rc == PT_ERANGE) /* longer than any name */
        return pt_jr_fail(jr, PT_EINVAL, "", "precision", "unknown precision (%s)",
                          pt_precision_names());
    if (rc < 0)
        return rc;
    if ((p->precision = pt_precision_parse(name)) < 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "precision", "unknown precision \"%s\" (%s)", name,
                          pt_precision_names());
    return 0;
}

static int parse_roofline(pt_jr *jr, const cJSON *root, pt_profile *p)
{
    const cJSON *o = NULL;
    int rc = pt_jr_object(jr, root, "", "roofline", PT_JR_OPTIONAL, &o);
    if (rc < 0 || !o)
        return rc;
    pt_profile_roofline *r = &p->roofline;
    if ((rc = pt_jr_keys(jr, o, "roofline", roofline_keys)) < 0 ||
        (rc = pt_jr_num(jr, o, "roofline", "peak_flops", PT_JR_REQUIRED, 0, POSITIVE,
                        &r->peak_flops)) < 0 ||
        (rc = pt_jr_num(jr, o, "roofline", "mem_bandwidth", PT_JR_REQUIRED, 0, POSITIVE,
                        &r->mem_bandwidth)) < 0 ||
        (rc = pt_jr_num(jr, o, "roofline", "launch_us", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &r->launch_us)) < 0)
        return rc;
    r->has = 1;
    return 0;
}

static int parse_runtime(pt_jr *jr, const cJSON *root, pt_profile *p)
{
    const cJSON *o = NULL;
    int rc = pt_jr_object(jr, root, "", "runtime", PT_JR_OPTIONAL, &o);
    if (rc < 0 || !o)
        return rc;
    double gbs = 0, ar_gbs = 0, ar_us = 0, stash_gbs = 0;
    if ((rc = pt_jr_keys(jr, o, "runtime", runtime_keys)) < 0 ||
        (rc = pt_jr_num(jr, o, "runtime", "allreduce_gbytes_per_s", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &ar_gbs)) < 0 ||
        (rc = pt_jr_num(jr, o, "runtime", "allreduce_latency_us", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &ar_us)) < 0 ||
        (rc = pt_jr_num(jr, o, "runtime", "op_overhead_ms", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &p->op_overhead_ms)) < 0 ||
        (rc = pt_jr_num(jr, o, "runtime", "opt_gbytes_per_s", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &gbs)) < 0 ||
        (rc = pt_jr_bool(jr, o, "runtime", "sends_hold", PT_JR_OPTIONAL, 0, &p->sends_hold)) < 0 ||
        (rc = pt_jr_num(jr, o, "runtime", "recv_wake_ms", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &p->recv_wake_ms)) < 0 ||
        /* written by profiles of before the runtime stopped copying weights
         * (docs/formats.md): still checked, no longer used */
        (rc = pt_jr_num(jr, o, "runtime", "stash_gbytes_per_s", PT_JR_OPTIONAL, 0, NON_NEGATIVE,
                        &stash_gbs)) < 0)
        return rc;
    p->opt_bytes_per_s = gbs * BYTES_PER_GB;
    p->ar_bytes_per_s = ar_gbs * BYTES_PER_GB;
    p->ar_latency_s = ar_us / US_PER_S;
    return 0;
}

int pt_profile_parse(const char *json, const char *source, pt_profile **out, pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    cJSON *root;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    const cJSON *arr = NULL;
    int n = 0;
    pt_profile *p = NULL;
    if ((rc = pt_jr_keys(&jr, root, "", profile_keys)) < 0 ||
        (rc = pt_jr_array(&jr, root, "", "layers", PT_JR_REQUIRED, 1, &arr, &n)) < 0)
        goto done;
    if (n > PT_PROFILE_LAYERS_MAX) {
        rc = pt_jr_fail(&jr, PT_ERANGE, "layers", NULL, "more than %d layers",
                        PT_PROFILE_LAYERS_MAX);
        goto done;
    }
    if (!(p = pt_profile_new(n))) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    if ((rc = pt_jr_str(&jr, root, "", "model", PT_JR_REQUIRED, NULL, p->model, sizeof p->model)) <
            0 ||
        (rc = pt_jr_str(&jr, root, "", "device", PT_JR_REQUIRED, NULL, p->device,
                        sizeof p->device)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "source", PT_JR_OPTIONAL, "measured", p->source,
                        sizeof p->source)) < 0 ||
        (rc = pt_jr_int(&jr, root, "", "microbatch", PT_JR_REQUIRED, 0, 1, PT_PROFILE_BATCH_MAX,
                        &p->microbatch)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "input_bytes", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &p->input_bytes)) < 0)
        goto done;
    if (!is_source(p->source)) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "source",
                        "unknown source \"%s\" (measured, analytic, imported or calibrated)",
                        p->source);
        goto done;
    }
    if ((rc = parse_origin(&jr, root, p)) < 0 || (rc = parse_runtime(&jr, root, p)) < 0 ||
        (rc = parse_precision(&jr, root, p)) < 0 || (rc = parse_roofline(&jr, root, p)) < 0)
        goto done;
    int i = 0;
    for (const cJSON *e = arr->child; e && i < n; e = e->next, i++) {
        char path[PT_JPATH_MAX];
        snprintf(path, sizeof path, "layers[%d]", i);
        if ((rc = parse_layer(&jr, e, path, i, &p->layers[i])) < 0)
            goto done;
    }
done:
    cJSON_Delete(root);
    if (rc < 0)
        pt_profile_free(&p);
    *out = p;
    return rc;
}

int pt_profile_load(const char *path, pt_profile **out, pt_error *err)
{
    *out = NULL;
    char *text;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_profile_parse(text, path, out, err);
    free(text);
    return rc;
}

int pt_profile_check(const pt_profile *profile, const pt_model_spec *model, const char *source,
                     pt_error *err)
{
    pt_jr jr = {source, err};
    if (!profile)
        return pt_jr_fail(&jr, PT_EINVAL, "", NULL, "no profile");
    if (model && strcmp(profile->model, model->name))
        return pt_jr_fail(&jr, PT_EINVAL, "", "model", "profile is for \"%s\", not for \"%s\"",
                          profile->model, model->name);
    if (model && profile->layer_count != model->layer_count)
        return pt_jr_fail(&jr, PT_EINVAL, "", "layers", "%d layers, but model %s has %d",
                          profile->layer_count, model->name, model->layer_count);
    return 0;
}

/* Optional members are written only when set, so older profiles round-trip
 * to the same text. -1 on no memory. */
static int add_origin(cJSON *root, const pt_profile_origin *g)
{
    if (!g->kind[0])
        return 0;
    cJSON *o = cJSON_AddObjectToObject(root, "origin");
    if (!o || !cJSON_AddStringToObject(o, "kind", g->kind) ||
        (g->run[0] && !cJSON_AddStringToObject(o, "run", g->run)) ||
        (g->base[0] && !cJSON_AddStringToObject(o, "base", g->base)) ||
        (g->date[0] && !cJSON_AddStringToObject(o, "date", g->date)) ||
        (g->gen >= 0 && !pt_jr_add_number(o, "gen", (double)g->gen)) ||
        (g->framework[0] && !cJSON_AddStringToObject(o, "framework", g->framework)) ||
        (g->module[0] && !cJSON_AddStringToObject(o, "module", g->module)))
        return -1;
    return 0;
}

/* precision (when not fp32) and roofline (when the profile has one); -1 on
 * no memory. */
static int add_precision_roofline(cJSON *root, const pt_profile *p)
{
    if (p->precision != PT_PRECISION_FP32 && pt_precision_name(p->precision) &&
        !cJSON_AddStringToObject(root, "precision", pt_precision_name(p->precision)))
        return -1;
    const pt_profile_roofline *r = &p->roofline;
    if (!r->has)
        return 0;
    cJSON *o = cJSON_AddObjectToObject(root, "roofline");
    if (!o || !pt_jr_add_number(o, "peak_flops", r->peak_flops) ||
        !pt_jr_add_number(o, "mem_bandwidth", r->mem_bandwidth) ||
        !pt_jr_add_number(o, "launch_us", r->launch_us))
        return -1;
    return 0;
}

/* A layer's roofline fields, written only for a profile with a roofline and
 * only where they differ from what a reader assumes without them. */
static int add_layer_roofline(cJSON *o, const pt_profile_layer *l)
{
    if ((l->flops > 0 && !pt_jr_add_number(o, "flops", l->flops)) ||
        (l->bytes > 0 && !pt_jr_add_number(o, "bytes", (double)l->bytes)) ||
        (l->weight_bytes != l->param_bytes &&
         !pt_jr_add_number(o, "weight_bytes", (double)l->weight_bytes)) ||
        (l->kernels != (l->fwd_ms > 0) && !pt_jr_add_number(o, "kernels", l->kernels)))
        return -1;
    return 0;
}

static int add_runtime(cJSON *root, const pt_profile *p)
{
    if (!(p->op_overhead_ms > 0) && !(p->opt_bytes_per_s > 0) && !p->sends_hold &&
        !(p->ar_bytes_per_s > 0) && !(p->recv_wake_ms > 0))
        return 0;
    cJSON *o = cJSON_AddObjectToObject(root, "runtime");
    if (!o ||
        (p->op_overhead_ms > 0 && !pt_jr_add_number(o, "op_overhead_ms", p->op_overhead_ms)) ||
        (p->opt_bytes_per_s > 0 &&
         !pt_jr_add_number(o, "opt_gbytes_per_s", p->opt_bytes_per_s / BYTES_PER_GB)) ||
        (p->sends_hold && !cJSON_AddBoolToObject(o, "sends_hold", 1)) ||
        (p->recv_wake_ms > 0 && !pt_jr_add_number(o, "recv_wake_ms", p->recv_wake_ms)) ||
        (p->ar_bytes_per_s > 0 &&
         (!pt_jr_add_number(o, "allreduce_gbytes_per_s", p->ar_bytes_per_s / BYTES_PER_GB) ||
          !pt_jr_add_number(o, "allreduce_latency_us", p->ar_latency_s * US_PER_S))))
        return -1;
    return 0;
}

char *pt_profile_to_json(const pt_profile *profile)
{
    if (!profile)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *layers = cJSON_CreateArray();
    if (!root || !layers) {
        cJSON_Delete(root);
        cJSON_Delete(layers);
        return NULL;
    }
    pt_jr_add_number(root, "v", PT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "model", profile->model);
    cJSON_AddStringToObject(root, "device", profile->device);
    cJSON_AddStringToObject(root, "source", profile->source[0] ? profile->source : "measured");
    pt_jr_add_number(root, "microbatch", profile->microbatch);
    pt_jr_add_number(root, "input_bytes", (double)profile->input_bytes);
    if (add_origin(root, &profile->origin) < 0 || add_runtime(root, profile) < 0 ||
        add_precision_roofline(root, profile) < 0) {
        cJSON_Delete(root);
        cJSON_Delete(layers);
        return NULL;
    }
    cJSON_AddItemToObject(root, "layers", layers);
    for (int i = 0; i < profile->layer_count; i++) {
        const pt_profile_layer *l = &profile->layers[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddItemToArray(layers, o);
        /* An empty name is written as none, which reads back as "layer<i>". */
        if ((l->name[0] && !cJSON_AddStringToObject(o, "name", l->name)) ||
            !pt_jr_add_number(o, "fwd_ms", l->fwd_ms) ||
            !pt_jr_add_number(o, "bwd_ms", l->bwd_ms) ||
            !pt_jr_add_number(o, "recompute_ms", l->recompute_ms) ||
            !pt_jr_add_number(o, "act_bytes", (double)l->act_bytes) ||
            !pt_jr_add_number(o, "param_bytes", (double)l->param_bytes) ||
            !pt_jr_add_number(o, "saved_bytes", (double)l->saved_bytes) ||
            !pt_jr_add_number(o, "scratch_bytes", (double)l->scratch_bytes) ||
            (l->keep_bytes > 0 && !pt_jr_add_number(o, "keep_bytes", (double)l->keep_bytes)) ||
            (l->fixed_share > 0 && !pt_jr_add_number(o, "fixed_share", l->fixed_share)) ||
            (l->pass_shares &&
             (!pt_jr_add_number(o, "bwd_fixed_share", l->bwd_fixed_share) ||
              !pt_jr_add_number(o, "recompute_fixed_share", l->recompute_fixed_share))) ||
            (l->split && (!pt_jr_add_number(o, "bwd_input_ms", l->bwd_input_ms) ||
                          !pt_jr_add_number(o, "bwd_weight_ms", l->bwd_weight_ms))) ||
            (profile->roofline.has && add_layer_roofline(o, l) < 0)) {
            cJSON_Delete(root);
            return NULL;
        }
    }
    return pt_jr_print_and_delete(root);
}

int pt_profile_save(const pt_profile *profile, const char *path, pt_error *err)
{
    return pt_file_save_text(path, pt_profile_to_json(profile), err);
}

double pt_profile_fit_fixed_share(double t_full, int full_rows, double t_part, int part_rows)
{
    if (!(t_full > 0) || !(t_part > 0) || !isfinite(t_full) || !isfinite(t_part) ||
        full_rows <= 0 || part_rows <= 0 || part_rows >= full_rows)
        return 0;
    double x = (double)part_rows / full_rows;
    double f = (t_part / t_full - x) / (1 - x);
    return f < 0 ? 0 : f > PT_PROFILE_SHARE_MAX ? PT_PROFILE_SHARE_MAX : f;
}
