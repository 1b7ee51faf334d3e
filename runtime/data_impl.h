/* Private to runtime/data*.c: the layout of a data set and the hash that
 * makes synthetic data a pure function of (seed, index). */
#ifndef PT_RUNTIME_DATA_IMPL_H
#define PT_RUNTIME_DATA_IMPL_H

#include <stdint.h>

#include "runtime/data.h"

typedef enum data_kind { DATA_IMAGES, DATA_SYNTH_CLASS, DATA_SYNTH_TOKENS } data_kind;

struct pt_dataset {
    data_kind kind;
    char name[64];
    int64_t count;
    int64_t input_elems;
    int labels_per_sample;
    int classes;
    /* DATA_IMAGES: count * input_elems pixels and count labels, owned. */
    uint8_t *pixels;
    uint8_t *labels;
    float pixel_scale, pixel_shift; /* x = pixel * scale + shift */
    /* DATA_SYNTH_*: seeds of the shared structure and of this split's samples. */
    uint64_t structure_seed, sample_seed;
    /* DATA_SYNTH_TOKENS: succ[t], the likely follower of token t (owned). */
    int32_t *succ;
};

/* splitmix64's finaliser: a bijective mix of 64 bits. */
static inline uint64_t pt_data_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A float in [-1, 1) that depends only on (seed, a, b). */
static inline float pt_data_hash_unit(uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t h = pt_data_mix64(seed ^ pt_data_mix64(a * 0xD1B54A32D192ED03ull + b));
    return (float)((double)(h >> 40) * (2.0 / 16777216.0) - 1.0);
}

pt_dataset *pt_data_alloc(data_kind kind, const char *name);

#endif
