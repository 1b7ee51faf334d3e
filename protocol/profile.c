/* Profile: parser, writer, validator (docs/formats.md, "Profile"). */
#include "protocol/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"

static const char *const profile_keys[] = {"v",          "model",       "device", "source",
                                           "microbatch", "input_bytes", "layers", NULL};
static const char *const layer_keys[] = {
    "name",        "fwd_ms",        "bwd_ms",       "recompute_ms",  "act_bytes", "param_bytes",
    "saved_bytes", "scratch_bytes", "bwd_input_ms", "bwd_weight_ms", NULL};
static const char *const sources[] = {"measured", "analytic", "imported", NULL};

static const pt_jr_range NON_NEGATIVE = {0.0, INFINITY, 0, 0};

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
        (rc = pt_jr_num(jr, obj, path, "fwd_ms", PT_JR_REQUIRED, 0, NON_NEGATIVE, &l->fwd_ms)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "bwd_ms", PT_JR_REQUIRED, 0, NON_NEGATIVE, &l->bwd_ms)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "recompute_ms", PT_JR_OPTIONAL, l->fwd_ms, NON_NEGATIVE,
                        &l->recompute_ms)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "act_bytes", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &l->act_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "param_bytes", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &l->param_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "saved_bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->saved_bytes)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "scratch_bytes", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &l->scratch_bytes)) < 0)
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
    int known = 0;
    for (int k = 0; sources[k]; k++)
        known |= !strcmp(sources[k], p->source);
    if (!known) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "source",
                        "unknown source \"%s\" (measured, analytic or imported)", p->source);
        goto done;
    }
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
            (l->split && (!pt_jr_add_number(o, "bwd_input_ms", l->bwd_input_ms) ||
                          !pt_jr_add_number(o, "bwd_weight_ms", l->bwd_weight_ms)))) {
            cJSON_Delete(root);
            return NULL;
        }
    }
    return pt_jr_print_and_delete(root);
}

int pt_profile_save(const pt_profile *profile, const char *path, pt_error *err)
{
    char *text = pt_profile_to_json(profile);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    int rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}
