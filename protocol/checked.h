/* Overflow-checked arithmetic for sizes, counts and times read from outside
 * (files, the wire, the command line). Every product or sum of such values is
 * computed here, so a crafted input is refused with an error instead of
 * wrapping (signed overflow is undefined behaviour; unsigned wrap-around lets
 * a huge shape pass a count check). Each function returns 0 and stores the
 * exact result, or returns -1 and leaves *out untouched when the result does
 * not fit. gcc and clang both provide the __builtin_*_overflow primitives. */
#ifndef PT_PROTOCOL_CHECKED_H
#define PT_PROTOCOL_CHECKED_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static inline int pt_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static inline int pt_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static inline int pt_sub_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static inline int pt_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static inline int pt_add_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

/* a * b, or INT64_MAX / INT64_MIN when the exact product does not fit: for
 * byte figures whose consumers only compare them against a limit. */
static inline int64_t pt_mul_sat_i64(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

/* a + b, saturating at INT64_MAX / INT64_MIN. */
static inline int64_t pt_add_sat_i64(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b < 0 ? INT64_MIN : INT64_MAX;
    return r;
}

/* Converts a double to int64 (truncating toward zero) when it is finite and
 * within [lo, hi], and within [-2^63, 2^63) whatever lo and hi say (INT64_MAX
 * as a double is 2^63, which does not fit). Casting an
 * out-of-range double is undefined behaviour, so every double read from
 * outside goes through here (or a range check) before becoming an integer. */
static inline int pt_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!isfinite(v) || v < (double)lo || v > (double)hi || v >= 0x1p63 || v < -0x1p63)
        return -1;
    *out = (int64_t)v;
    return 0;
}

#endif
