/* Counter-based random numbers (splitmix64 finaliser over a keyed counter).
 *
 * The value at position `counter` of stream `key` is a pure function of
 * (key, counter), so any part of a model or data set can be generated
 * independently and reproducibly: layer i of a model draws from stream
 * pt_rng_key(seed, i) whatever stage it lives in, and a data loader can
 * produce sample j of epoch e without producing the ones before it.
 * Not cryptographic. */
#ifndef PT_RUNTIME_RNG_H
#define PT_RUNTIME_RNG_H

#include <stdint.h>

typedef struct pt_rng {
    uint64_t key;     /* stream */
    uint64_t counter; /* next position in the stream */
} pt_rng;

/* A stream key derived from a seed and an index (layer, sample, epoch...);
 * distinct (seed, index) pairs give unrelated streams. Nest calls for more
 * indices: pt_rng_key(pt_rng_key(seed, layer), child). */
uint64_t pt_rng_key(uint64_t seed, uint64_t index);

/* The 64-bit value at position `counter` of stream `key`. */
uint64_t pt_rng_at(uint64_t key, uint64_t counter);

/* A generator positioned at the start of stream pt_rng_key(seed, index). */
pt_rng pt_rng_make(uint64_t seed, uint64_t index);

uint64_t pt_rng_next(pt_rng *rng);                              /* next 64 bits */
double pt_rng_uniform(pt_rng *rng);                             /* [0, 1), 53 bits */
double pt_rng_uniform_range(pt_rng *rng, double lo, double hi); /* [lo, hi) */
double pt_rng_normal(pt_rng *rng);                  /* N(0,1), Box-Muller (uses 2 draws) */
uint64_t pt_rng_below(pt_rng *rng, uint64_t bound); /* [0, bound), unbiased; 0 when bound == 0 */

#endif
