/* The uniform face of every data set, the synthetic data sets, and the
 * per-epoch visiting order. Fashion-MNIST's IDX reader is in data_idx.c. */
#include "runtime/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data_impl.h"

/* Weights of a synthetic class sample: prototype * SIGNAL + noise * NOISE. */
#define SYNTH_SIGNAL 0.5f
#define SYNTH_NOISE  1.0f
/* Seeds of the two splits differ by these salts, so their samples differ. */
#define SALT_TRAIN     0x7472616E6Eull
#define SALT_TEST      0x74657374ull
#define SALT_STRUCTURE 0x73747275ull
#define SALT_ORDER     0x6F726465ull

pt_dataset *pt_data_alloc(data_kind kind, const char *name)
{
    pt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    ds->kind = kind;
    snprintf(ds->name, sizeof ds->name, "%s", name);
    return ds;
}

void pt_dataset_free(pt_dataset **ds_p)
{
    if (!ds_p || !*ds_p)
        return;
    pt_dataset *ds = *ds_p;
    free(ds->pixels);
    free(ds->labels);
    free(ds->succ);
    free(ds);
    *ds_p = NULL;
}

void pt_dataset_limit(pt_dataset *ds, int64_t n)
{
    if (ds && n > 0 && n < ds->count)
        ds->count = n;
}

int64_t pt_dataset_count(const pt_dataset *ds)
{
    return ds->count;
}

int64_t pt_dataset_input_elems(const pt_dataset *ds)
{
    return ds->input_elems;
}

int pt_dataset_labels_per_sample(const pt_dataset *ds)
{
    return ds->labels_per_sample;
}

int pt_dataset_classes(const pt_dataset *ds)
{
    return ds->classes;
}

const char *pt_dataset_name(const pt_dataset *ds)
{
    return ds ? ds->name : "(none)";
}

static uint64_t split_seed(uint64_t seed, pt_data_split split)
{
    return pt_data_mix64(seed ^ (split == PT_DATA_TRAIN ? SALT_TRAIN : SALT_TEST));
}

int pt_dataset_synth_class_new(int64_t count, int64_t input_elems, int classes, uint64_t seed,
                               pt_data_split split, pt_dataset **out, pt_error *err)
{
    *out = NULL;
    if (count <= 0 || input_elems <= 0 || classes < 2)
        return pt_error_set(err, PT_EINVAL,
                            "synthetic data: need count > 0, input size > 0 and >= 2 classes "
                            "(got %lld, %lld, %d)",
                            (long long)count, (long long)input_elems, classes);
    pt_dataset *ds =
        pt_data_alloc(DATA_SYNTH_CLASS, split == PT_DATA_TRAIN ? "synthetic classification train"
                                                               : "synthetic classification test");
    if (!ds)
        return pt_error_set(err, PT_ENOMEM, "synthetic data: out of memory");
    ds->count = count;
    ds->input_elems = input_elems;
    ds->labels_per_sample = 1;
    ds->classes = classes;
    ds->structure_seed = pt_data_mix64(seed ^ SALT_STRUCTURE);
    ds->sample_seed = split_seed(seed, split);
    *out = ds;
    return 0;
}

int pt_dataset_synth_tokens_new(int64_t count, int seq_len, int vocab, uint64_t seed,
                                pt_data_split split, pt_dataset **out, pt_error *err)
{
    *out = NULL;
    if (count <= 0 || seq_len <= 0 || vocab < 2)
        return pt_error_set(err, PT_EINVAL,
                            "synthetic tokens: need count > 0, seq_len > 0 and vocab >= 2 "
                            "(got %lld, %d, %d)",
                            (long long)count, seq_len, vocab);
    pt_dataset *ds =
        pt_data_alloc(DATA_SYNTH_TOKENS,
                      split == PT_DATA_TRAIN ? "synthetic tokens train" : "synthetic tokens test");
    if (!ds || !(ds->succ = malloc((size_t)vocab * sizeof *ds->succ))) {
        pt_dataset_free(&ds);
        return pt_error_set(err, PT_ENOMEM, "synthetic tokens: out of memory");
    }
    ds->count = count;
    ds->input_elems = seq_len;
    ds->labels_per_sample = seq_len;
    ds->classes = vocab;
    ds->structure_seed = pt_data_mix64(seed ^ SALT_STRUCTURE);
    ds->sample_seed = split_seed(seed, split);
    /* succ is a random permutation, so every token is someone's likely follower. */
    for (int t = 0; t < vocab; t++)
        ds->succ[t] = t;
    uint64_t s = ds->structure_seed;
    for (int t = vocab - 1; t > 0; t--) {
        s = pt_data_mix64(s);
        int j = (int)(s % (uint64_t)(t + 1));
        int32_t tmp = ds->succ[t];
        ds->succ[t] = ds->succ[j];
        ds->succ[j] = tmp;
    }
    *out = ds;
    return 0;
}

double pt_dataset_synth_tokens_entropy(int vocab)
{
    double q = (1.0 - PT_SYNTH_FOLLOW_P) / vocab;
    double p = PT_SYNTH_FOLLOW_P + q;
    return -(p * log(p)) - (vocab - 1) * q * log(q);
}

static void synth_class_sample(const pt_dataset *ds, int64_t i, float *x, int32_t *label)
{
    uint64_t h = pt_data_mix64(ds->sample_seed ^ pt_data_mix64((uint64_t)i));
    int c = (int)(h % (uint64_t)ds->classes);
    if (label)
        *label = c;
    if (!x)
        return;
    for (int64_t j = 0; j < ds->input_elems; j++)
        x[j] = SYNTH_SIGNAL * pt_data_hash_unit(ds->structure_seed, (uint64_t)c, (uint64_t)j) +
               SYNTH_NOISE * pt_data_hash_unit(ds->sample_seed, (uint64_t)i, (uint64_t)j);
}

static void synth_tokens_sample(const pt_dataset *ds, int64_t i, float *x, int32_t *labels)
{
    const uint64_t vocab = (uint64_t)ds->classes;
    uint64_t s = pt_data_mix64(ds->sample_seed ^ pt_data_mix64((uint64_t)i));
    int32_t tok = (int32_t)(s % vocab);
    for (int64_t t = 0; t < ds->input_elems; t++) {
        if (x)
            x[t] = (float)tok;
        s = pt_data_mix64(s);
        /* The top 24 bits decide follow-or-random, the rest pick the random token. */
        double u = (double)(s >> 40) / 16777216.0;
        int32_t next =
            u < PT_SYNTH_FOLLOW_P ? ds->succ[tok] : (int32_t)((s & 0xFFFFFFFFFFull) % vocab);
        if (labels)
            labels[t] = next;
        tok = next;
    }
}

int pt_dataset_get_batch(const pt_dataset *ds, const int64_t *indices, int n, float *x_out,
                         int32_t *labels_out)
{
    const int64_t elems = ds->input_elems;
    const int lps = ds->labels_per_sample;
    for (int b = 0; b < n; b++) {
        int64_t i = indices[b];
        if (i < 0 || i >= ds->count)
            return PT_ERANGE;
        float *x = x_out ? x_out + (int64_t)b * elems : NULL;
        int32_t *lab = labels_out ? labels_out + (int64_t)b * lps : NULL;
        switch (ds->kind) {
        case DATA_IMAGES:
            if (x) {
                const uint8_t *p = ds->pixels + i * elems;
                for (int64_t j = 0; j < elems; j++)
                    x[j] = (float)p[j] * ds->pixel_scale + ds->pixel_shift;
            }
            if (lab)
                *lab = ds->labels[i];
            break;
        case DATA_SYNTH_CLASS:
            synth_class_sample(ds, i, x, lab);
            break;
        case DATA_SYNTH_TOKENS:
            synth_tokens_sample(ds, i, x, lab);
            break;
        }
    }
    return 0;
}

void pt_data_order(int64_t n, uint64_t seed, int64_t epoch, int64_t *order)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    uint64_t s = pt_data_mix64(seed ^ SALT_ORDER) ^ pt_data_mix64((uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        s = pt_data_mix64(s);
        int64_t j = (int64_t)(s % (uint64_t)(i + 1));
        int64_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

/* The classes of a model: those of its final loss layer (softmax_xent). */
static int model_classes(const pt_model_spec *spec)
{
    if (spec->layer_count <= 0)
        return 0;
    const pt_layer_spec *last = &spec->layers[spec->layer_count - 1];
    return pt_layer_kind_flags(last->kind) & PT_LKF_LOSS ? last->classes : 0;
}

int pt_dataset_open(const char *name, const pt_model_spec *spec, pt_data_split split, uint64_t seed,
                    pt_dataset **out, pt_error *err)
{
    *out = NULL;
    int classes = model_classes(spec);
    int64_t elems = pt_model_spec_input_elems(spec);
    if (classes < 2)
        return pt_error_set(err, PT_EINVAL, "model %s: last layer is not a softmax_xent loss",
                            spec->name);
    if (!strcmp(name, "fashion-mnist")) {
        const int64_t px = PT_FMNIST_SIDE_PX * PT_FMNIST_SIDE_PX;
        if (spec->input_kind != PT_INPUT_FLOAT || elems != px || classes != PT_FMNIST_CLASSES)
            return pt_error_set(err, PT_EINVAL,
                                "model %s does not fit fashion-mnist: it needs %lld float inputs "
                                "and %d classes, the model has %lld %s inputs and %d classes",
                                spec->name, (long long)px, PT_FMNIST_CLASSES, (long long)elems,
                                spec->input_kind == PT_INPUT_FLOAT ? "float" : "token", classes);
        return pt_dataset_fmnist_load(NULL, split, 1, out, err);
    }
    if (!strcmp(name, "synthetic")) {
        int64_t count = split == PT_DATA_TRAIN ? PT_SYNTH_TRAIN_COUNT : PT_SYNTH_TEST_COUNT;
        if (spec->input_kind == PT_INPUT_TOKENS)
            return pt_dataset_synth_tokens_new(count, spec->input[0], classes, seed, split, out,
                                               err);
        return pt_dataset_synth_class_new(count, elems, classes, seed, split, out, err);
    }
    return pt_error_set(err, PT_ENOTFOUND, "unknown data set '%s' (fashion-mnist, synthetic)",
                        name);
}
