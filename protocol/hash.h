/* The one string hash (64-bit FNV-1a) of the id indexes: the session's
 * agent table, the store's agents and the telemetry tracker find an agent
 * by its id through it. Not for anything an attacker could choose to
 * collide at will beyond an index's linear probing (ids are bounded in
 * number by the session). */
#ifndef PT_PROTOCOL_HASH_H
#define PT_PROTOCOL_HASH_H

#include <stdint.h>

#define PT_FNV_OFFSET 1469598103934665603ULL
#define PT_FNV_PRIME  1099511628211ULL

static inline uint64_t pt_hash_str(const char *s)
{
    uint64_t h = PT_FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * PT_FNV_PRIME;
    return h;
}

#endif
