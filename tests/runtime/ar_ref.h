/* The all-reduce tests' shared reference (comm_test with threads as ranks,
 * comm_proc_test with processes): each rank's input and the bits the ring
 * (and the direct all-reduce) must give. Header-only, like exec_common.h. */
#ifndef PT_TESTS_AR_REF_H
#define PT_TESTS_AR_REF_H

#include <stddef.h>
#include <stdint.h>

/* Rank `rank`'s input element j in round `round`: small integers (exact
 * sums) or a fixed hash to [-0.5, 0.5], reproducible without shared RNG
 * state. */
static inline float ar_input(int integers, int round, int rank, size_t j)
{
    if (integers)
        return (float)((long)((j * 131 + (size_t)rank * 977 + (size_t)round * 71) % 2001) - 1000);
    uint64_t x = (j + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 40) ^ ((uint64_t)round << 52);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (float)((double)(x >> 11) / 9007199254740992.0 - 0.5);
}

/* Element j of a count-float all-reduce over p ranks as the ring sums it, in
 * floats: chunk c (count split into p as the ring splits it) starts at rank
 * c's copy and adds rank c+1's, c+2's, ... in turn. The ring and the direct
 * all-reduce must both give these very bits. */
static inline float ar_ring_order_sum(int integers, size_t count, int p, int round, size_t j)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    size_t c = j < rem * (base + 1) ? j / (base + 1) : rem + (j - rem * (base + 1)) / base;
    float acc = ar_input(integers, round, (int)c, j);
    for (int i = 1; i < p; i++)
        acc = acc + ar_input(integers, round, (int)((c + (size_t)i) % (size_t)p), j);
    return acc;
}

#endif
