/* The checkpoint index and latest formats (see protocol/ckpt_index.h;
 * docs/formats.md, "Checkpoint"). */
#include "protocol/ckpt_index.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/checked.h"
#include "protocol/fileio.h"
#include "protocol/json_util.h"

#define PATH_BYTES      4096
#define LATEST_TEXT_MAX 96

/* ---- index.json ---- */

void pt_ckpt_layers_free(pt_ckpt_layer **layers_p, int count)
{
    if (!layers_p || !*layers_p)
        return;
    for (int i = 0; i < count; i++)
        free((*layers_p)[i].tensors);
    free(*layers_p);
    *layers_p = NULL;
}

void pt_ckpt_index_free(pt_ckpt_index **index_p)
{
    if (!index_p || !*index_p)
        return;
    pt_ckpt_layers_free(&(*index_p)->layers, (*index_p)->layer_count);
    free(*index_p);
    *index_p = NULL;
}

const pt_ckpt_layer *pt_ckpt_index_find(const pt_ckpt_index *index, int layer)
{
    for (int i = 0; index && i < index->layer_count; i++)
        if (index->layers[i].index == layer)
            return &index->layers[i];
    return NULL;
}

const pt_ckpt_tensor *pt_ckpt_layer_tensor(const pt_ckpt_layer *layer, const char *name)
{
    for (int i = 0; layer && i < layer->tensor_count; i++)
        if (!strcmp(layer->tensors[i].name, name))
            return &layer->tensors[i];
    return NULL;
}

static int plain_file_name(const char *s)
{
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

static int parse_tensor(pt_jr *jr, const cJSON *obj, const char *path, pt_ckpt_tensor *t)
{
    static const char *const keys[] = {"name", "file", "shape", "count", "crc32", NULL};
    int rc;
    if ((rc = pt_jr_is_object(jr, obj, path)) < 0 || (rc = pt_jr_keys(jr, obj, path, keys)) < 0 ||
        (rc = pt_jr_str(jr, obj, path, "name", PT_JR_REQUIRED, NULL, t->name, sizeof t->name)) <
            0 ||
        (rc = pt_jr_str(jr, obj, path, "file", PT_JR_REQUIRED, NULL, t->file, sizeof t->file)) < 0)
        return rc;
    if (!plain_file_name(t->file))
        return pt_jr_fail(jr, PT_EINVAL, path, "file",
                          "\"%s\" must be a plain file name inside the checkpoint folder", t->file);
    const cJSON *shape;
    int rank;
    if ((rc = pt_jr_array(jr, obj, path, "shape", PT_JR_REQUIRED, 1, &shape, &rank)) < 0)
        return rc;
    if (rank > PT_SHAPE_MAX)
        return pt_jr_fail(jr, PT_EINVAL, path, "shape", "rank %d is above %d", rank, PT_SHAPE_MAX);
    t->rank = rank;
    int64_t product = 1;
    for (int d = 0; d < rank; d++) {
        const cJSON *e = cJSON_GetArrayItem(shape, d);
        char key[32];
        snprintf(key, sizeof key, "shape[%d]", d);
        /* the range first: casting an out-of-range double is undefined */
        if (!cJSON_IsNumber(e) ||
            pt_double_to_i64(e->valuedouble, 1, PT_CKPT_TENSOR_FLOATS_MAX, &t->shape[d]) < 0 ||
            e->valuedouble != (double)t->shape[d])
            return pt_jr_fail(jr, PT_EINVAL, path, key, "must be an integer in [1, %lld]",
                              (long long)PT_CKPT_TENSOR_FLOATS_MAX);
        /* checked: [2^32, 2^32+1] wraps to 2^32 and would pass the count check */
        if (pt_mul_i64(product, t->shape[d], &product) < 0 || product > PT_CKPT_TENSOR_FLOATS_MAX)
            return pt_jr_fail(jr, PT_ERANGE, path, "shape", "more than %lld elements",
                              (long long)PT_CKPT_TENSOR_FLOATS_MAX);
    }
    int64_t crc;
    if ((rc = pt_jr_int64(jr, obj, path, "count", PT_JR_REQUIRED, 0, 1, PT_CKPT_TENSOR_FLOATS_MAX,
                          &t->count)) < 0 ||
        (rc = pt_jr_int64(jr, obj, path, "crc32", PT_JR_REQUIRED, 0, 0, 0xFFFFFFFFLL, &crc)) < 0)
        return rc;
    if (t->count != product)
        return pt_jr_fail(jr, PT_EINVAL, path, "count",
                          "%lld is not the product of the shape (%lld)", (long long)t->count,
                          (long long)product);
    t->crc32 = (uint32_t)crc;
    return 0;
}

static int parse_layer(pt_jr *jr, const cJSON *obj, const char *path, int64_t def_step,
                       pt_ckpt_layer *l)
{
    static const char *const keys[] = {"index", "name", "step", "tensors", NULL};
    int rc;
    const cJSON *tensors;
    if ((rc = pt_jr_is_object(jr, obj, path)) < 0 || (rc = pt_jr_keys(jr, obj, path, keys)) < 0 ||
        (rc = pt_jr_int(jr, obj, path, "index", PT_JR_REQUIRED, 0, 0, 1 << 24, &l->index)) < 0 ||
        (rc = pt_jr_str(jr, obj, path, "name", PT_JR_REQUIRED, NULL, l->name, sizeof l->name)) <
            0 ||
        (rc = pt_jr_int64(jr, obj, path, "step", PT_JR_OPTIONAL, def_step, 0, PT_JSON_INT_MAX,
                          &l->step)) < 0 ||
        (rc = pt_jr_array(jr, obj, path, "tensors", PT_JR_REQUIRED, 0, &tensors,
                          &l->tensor_count)) < 0)
        return rc;
    if (l->tensor_count > 0 && !(l->tensors = calloc((size_t)l->tensor_count, sizeof *l->tensors)))
        return pt_jr_fail(jr, PT_ENOMEM, path, "tensors", "out of memory");
    for (int i = 0; i < l->tensor_count; i++) {
        char sub[PT_JPATH_MAX];
        pt_jr_join_index(sub, sizeof sub, path, "tensors", i);
        if ((rc = parse_tensor(jr, cJSON_GetArrayItem(tensors, i), sub, &l->tensors[i])) < 0)
            return rc;
        for (int j = 0; j < i; j++)
            if (!strcmp(l->tensors[j].name, l->tensors[i].name))
                return pt_jr_fail(jr, PT_EINVAL, sub, "name", "\"%s\" appears twice",
                                  l->tensors[i].name);
    }
    return 0;
}

static int parse_optimizer(pt_jr *jr, const cJSON *obj, pt_ckpt_index *ix)
{
    static const char *const all_keys[] = {"kind",  "step", "lr",           "momentum", "beta1",
                                           "beta2", "eps",  "weight_decay", NULL};
    const char *path = "optimizer";
    char kind[16];
    int rc;
    if ((rc = pt_jr_is_object(jr, obj, path)) < 0 ||
        (rc = pt_jr_keys(jr, obj, path, all_keys)) < 0 ||
        (rc = pt_jr_str(jr, obj, path, "kind", PT_JR_REQUIRED, NULL, kind, sizeof kind)) < 0)
        return rc;
    if (!strcmp(kind, "sgd"))
        ix->optimizer = pt_optim_default(PT_OPTIM_SGD);
    else if (!strcmp(kind, "adam"))
        ix->optimizer = pt_optim_default(PT_OPTIM_ADAM);
    else
        return pt_jr_fail(jr, PT_EINVAL, path, "kind", "unknown optimizer \"%s\" (sgd, adam)",
                          kind);
    pt_optim_spec *o = &ix->optimizer;
    const pt_jr_range positive = {0, INFINITY, 1, 0}, unit = {0, 1, 0, 1},
                      nonneg = {0, INFINITY, 0, 0};
    double lr, mom, b1, b2, eps, wd;
    if ((rc = pt_jr_int64(jr, obj, path, "step", PT_JR_OPTIONAL, 0, 0, PT_JSON_INT_MAX,
                          &ix->optim_steps)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "lr", PT_JR_REQUIRED, 0, positive, &lr)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "momentum", PT_JR_OPTIONAL, o->momentum, unit, &mom)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "beta1", PT_JR_OPTIONAL, o->beta1, unit, &b1)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "beta2", PT_JR_OPTIONAL, o->beta2, unit, &b2)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "eps", PT_JR_OPTIONAL, o->eps, positive, &eps)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "weight_decay", PT_JR_OPTIONAL, o->weight_decay, nonneg,
                        &wd)) < 0)
        return rc;
    /* The run keeps floats: a value that rounds out of its range (eps 1e-53
     * becomes 0, momentum 0.999999999 becomes 1) would be written back as one
     * this parser refuses. */
    const struct {
        const char *key;
        double value;
        pt_jr_range range;
        float *out;
    } fs[] = {{"lr", lr, positive, &o->lr},    {"momentum", mom, unit, &o->momentum},
              {"beta1", b1, unit, &o->beta1},  {"beta2", b2, unit, &o->beta2},
              {"eps", eps, positive, &o->eps}, {"weight_decay", wd, nonneg, &o->weight_decay}};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
        float f = (float)fs[i].value;
        const pt_jr_range *r = &fs[i].range;
        if (!isfinite(f) || (r->lo_open ? f <= r->lo : f < r->lo) ||
            (r->hi_open ? f >= r->hi : f > r->hi))
            return pt_jr_fail(jr, PT_ERANGE, path, fs[i].key,
                              "%.17g is out of range once stored as a float (%.9g)", fs[i].value,
                              (double)f);
        *fs[i].out = f;
    }
    ix->has_optimizer = 1;
    return 0;
}

static int cmp_layer(const void *a, const void *b)
{
    const pt_ckpt_layer *x = a, *y = b;
    return (x->index > y->index) - (x->index < y->index);
}

void pt_ckpt_index_sort(pt_ckpt_index *ix)
{
    if (ix && ix->layer_count > 1)
        qsort(ix->layers, (size_t)ix->layer_count, sizeof *ix->layers, cmp_layer);
}

int pt_ckpt_index_parse(const char *json, const char *source, pt_ckpt_index **out, pt_error *err)
{
    static const char *const keys[] = {"v",         "model",  "step",      "epoch",
                                       "optimizer", "layers", "simulated", NULL};
    *out = NULL;
    pt_jr jr = {source, err};
    cJSON *root = NULL;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    pt_ckpt_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        cJSON_Delete(root);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", source);
    }
    const cJSON *opt, *layers;
    /* epoch is turned into an integer count by its readers (pipetop train) */
    const pt_jr_range nonneg = {0, (double)PT_JSON_INT_MAX, 0, 0};
    if ((rc = pt_jr_keys(&jr, root, "", keys)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "model", PT_JR_REQUIRED, NULL, ix->model,
                        sizeof ix->model)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "step", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX,
                          &ix->step)) < 0 ||
        (rc = pt_jr_num(&jr, root, "", "epoch", PT_JR_OPTIONAL, 0, nonneg, &ix->epoch)) < 0 ||
        (rc = pt_jr_bool(&jr, root, "", "simulated", PT_JR_OPTIONAL, 0, &ix->simulated)) < 0 ||
        (rc = pt_jr_object(&jr, root, "", "optimizer", PT_JR_OPTIONAL, &opt)) < 0 ||
        (opt && (rc = parse_optimizer(&jr, opt, ix)) < 0) ||
        (rc = pt_jr_array(&jr, root, "", "layers", PT_JR_REQUIRED, 0, &layers, &ix->layer_count)) <
            0)
        goto fail;
    if (ix->layer_count > 0 &&
        !(ix->layers = calloc((size_t)ix->layer_count, sizeof *ix->layers))) {
        rc = pt_error_set(err, PT_ENOMEM, "%s: out of memory", source);
        goto fail;
    }
    for (int i = 0; i < ix->layer_count; i++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "layers", i);
        if ((rc = parse_layer(&jr, cJSON_GetArrayItem(layers, i), path, ix->step, &ix->layers[i])) <
            0)
            goto fail;
        for (int j = 0; j < i; j++)
            if (ix->layers[j].index == ix->layers[i].index) {
                rc = pt_jr_fail(&jr, PT_EINVAL, path, "index", "layer %d appears twice",
                                ix->layers[i].index);
                goto fail;
            }
    }
    pt_ckpt_index_sort(ix);
    cJSON_Delete(root);
    *out = ix;
    return 0;
fail:
    cJSON_Delete(root);
    pt_ckpt_index_free(&ix);
    return rc;
}

int pt_ckpt_index_read(const char *path, pt_ckpt_index **out, pt_error *err)
{
    *out = NULL;
    char *text = NULL;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_ckpt_index_parse(text, path, out, err);
    free(text);
    return rc;
}

int pt_ckpt_index_load(const char *dir, pt_ckpt_index **out, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_INDEX_FILE);
    int rc = pt_ckpt_index_read(path, out, err);
    if (rc == PT_ENOTFOUND)
        pt_error_set(err, rc, "%s: no checkpoint here (no %s)", dir, PT_CKPT_INDEX_FILE);
    return rc;
}

/* A float hyper-parameter as the shortest decimal that reads back as the same
 * float, so 0.05f is written 0.05 rather than 0.05000000074505806. */
static void add_float(cJSON *obj, const char *key, float v)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v)
            break;
    }
    cJSON_AddNumberToObject(obj, key, strtod(buf, NULL));
}

static cJSON *tensor_json(const pt_ckpt_tensor *t)
{
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    if (!o || !shape) {
        cJSON_Delete(o);
        cJSON_Delete(shape);
        return NULL;
    }
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "file", t->file);
    for (int d = 0; d < t->rank; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddNumberToObject(o, "count", (double)t->count);
    cJSON_AddNumberToObject(o, "crc32", (double)t->crc32);
    return o;
}

char *pt_ckpt_index_to_json(const pt_ckpt_index *ix)
{
    cJSON *root = cJSON_CreateObject(), *layers = cJSON_CreateArray();
    if (!root || !layers) {
        cJSON_Delete(root);
        cJSON_Delete(layers);
        return NULL;
    }
    cJSON_AddNumberToObject(root, "v", PT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "model", ix->model);
    cJSON_AddNumberToObject(root, "step", (double)ix->step);
    cJSON_AddNumberToObject(root, "epoch", ix->epoch);
    if (ix->simulated)
        cJSON_AddBoolToObject(root, "simulated", 1);
    if (ix->has_optimizer) {
        const pt_optim_spec *o = &ix->optimizer;
        cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
        if (opt) {
            cJSON_AddStringToObject(opt, "kind", o->kind == PT_OPTIM_ADAM ? "adam" : "sgd");
            cJSON_AddNumberToObject(opt, "step", (double)ix->optim_steps);
            add_float(opt, "lr", o->lr);
            if (o->kind == PT_OPTIM_SGD) {
                add_float(opt, "momentum", o->momentum);
            } else {
                add_float(opt, "beta1", o->beta1);
                add_float(opt, "beta2", o->beta2);
                add_float(opt, "eps", o->eps);
            }
            add_float(opt, "weight_decay", o->weight_decay);
        }
    }
    cJSON_AddItemToObject(root, "layers", layers);
    for (int i = 0; i < ix->layer_count; i++) {
        const pt_ckpt_layer *l = &ix->layers[i];
        cJSON *lo = cJSON_CreateObject(), *ts = cJSON_CreateArray();
        if (!lo || !ts) {
            cJSON_Delete(lo);
            cJSON_Delete(ts);
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddNumberToObject(lo, "index", l->index);
        cJSON_AddStringToObject(lo, "name", l->name);
        cJSON_AddNumberToObject(lo, "step", (double)l->step);
        for (int t = 0; t < l->tensor_count; t++)
            cJSON_AddItemToArray(ts, tensor_json(&l->tensors[t]));
        cJSON_AddItemToObject(lo, "tensors", ts);
        cJSON_AddItemToArray(layers, lo);
    }
    return pt_jr_print_and_delete(root);
}

int pt_ckpt_index_save(const pt_ckpt_index *ix, const char *path, pt_error *err)
{
    return pt_file_save_text(path, pt_ckpt_index_to_json(ix), err);
}

/* ---- latest ---- */

int pt_ckpt_latest_parse(const char *json, const char *source, int64_t *step, pt_error *err)
{
    static const char *const keys[] = {"v", "step", "dir", NULL};
    pt_jr jr = {source, err};
    cJSON *root = NULL;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    int64_t n = 0;
    char dir[PT_CKPT_NAME_MAX], want[PT_CKPT_NAME_MAX];
    if ((rc = pt_jr_keys(&jr, root, "", keys)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "step", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX, &n)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "dir", PT_JR_REQUIRED, NULL, dir, sizeof dir)) < 0)
        goto done;
    snprintf(want, sizeof want, "step-%lld", (long long)n);
    if (strcmp(dir, want) != 0)
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "dir", "\"%s\" is not the folder of step %lld (\"%s\")",
                        dir, (long long)n, want);
    else
        *step = n;
done:
    cJSON_Delete(root);
    return rc;
}

int pt_ckpt_latest_load(const char *root, int64_t *step, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", root, PT_CKPT_LATEST_FILE);
    char *text = NULL;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_ckpt_latest_parse(text, path, step, err);
    free(text);
    return rc;
}

char *pt_ckpt_latest_to_json(int64_t step)
{
    char *text = malloc(LATEST_TEXT_MAX);
    if (text)
        snprintf(text, LATEST_TEXT_MAX, "{\"v\":%d,\"step\":%lld,\"dir\":\"step-%lld\"}\n",
                 PT_FORMAT_VERSION, (long long)step, (long long)step);
    return text;
}

int pt_ckpt_latest_save(const char *root, int64_t step, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", root, PT_CKPT_LATEST_FILE);
    char *text = pt_ckpt_latest_to_json(step);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    int rc = pt_mkdir_p(root, err);
    /* `latest` never moves back: a resumed run that saved an older step
     * over a newer one would lose the newer run's progress without a word */
    int64_t now = -1;
    pt_error e = {0};
    int lr = rc == 0 ? pt_ckpt_latest_load(root, &now, &e) : 0;
    if (rc == 0 && lr < 0 && lr != PT_ENOTFOUND)
        rc = pt_error_set(err, lr, "%s (not replaced)", e.msg);
    else if (rc == 0 && lr == 0 && now > step)
        rc = pt_error_set(err, PT_ESTATE,
                          "%s names step %lld, newer than step %lld: it never moves back", path,
                          (long long)now, (long long)step);
    if (rc == 0)
        rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}
