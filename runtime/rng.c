/* Counter-based generator: splitmix64's finaliser applied to a keyed counter. */
#include "runtime/rng.h"

#include <math.h>

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t pt_rng_key(uint64_t seed, uint64_t index)
{
    return mix64(mix64(seed + GOLDEN_GAMMA) ^
                 mix64((index + 1) * GOLDEN_GAMMA + 0x632BE59BD9B4E019ull));
}

uint64_t pt_rng_at(uint64_t key, uint64_t counter)
{
    return mix64(key ^ mix64((counter + 1) * GOLDEN_GAMMA));
}

pt_rng pt_rng_make(uint64_t seed, uint64_t index)
{
    pt_rng r = {pt_rng_key(seed, index), 0};
    return r;
}

uint64_t pt_rng_next(pt_rng *rng)
{
    return pt_rng_at(rng->key, rng->counter++);
}

double pt_rng_uniform(pt_rng *rng)
{
    return (double)(pt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double pt_rng_uniform_range(pt_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * pt_rng_uniform(rng);
}

double pt_rng_normal(pt_rng *rng)
{
    double u1 = 1.0 - pt_rng_uniform(rng); /* (0, 1]: log is finite */
    double u2 = pt_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t pt_rng_below(pt_rng *rng, uint64_t bound)
{
    if (bound == 0)
        return 0;
    /* Rejection from the top partial block keeps the result unbiased. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t v;
    do {
        v = pt_rng_next(rng);
    } while (v >= limit);
    return v % bound;
}
