/* Fuzz harness for the receiving side of a shared-memory ring
 * (runtime/comm_shm.c): what a faulty or hostile producer sharing the
 * mapping can leave in it. Each input sets the ring (64 KiB) as such a
 * producer could: bytes 0-7 its head, 8-15 its tail (both as they are: any
 * value), the rest the data area from its start (zero beyond). The consumer
 * then takes records until it finds none or a corrupt ring, at most a few
 * ring-fulls. Properties, each an abort() when false (a read outside the
 * mapping crashes): every record handed out lies inside the data area and
 * holds exactly the bytes that were put there, right after its record
 * header at the offset of the tail it was read at; the consumer only ever
 * moves the tail forward, by at most the ring (counting modulo 2^64). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_internal.h"

#define TOKEN   0x5054465a5a3032ull
#define GEN     5
#define REC_HDR 16

static pt_shm_ring *g_prod, *g_cons;
static unsigned char *g_area; /* what the data area holds: the input, zero-filled */
static char g_dir[PT_SHM_PATH_MAX];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_comm_ring: %s\n", what);
    abort();
}

static void teardown(void)
{
    pt_shm_ring_destroy(&g_cons);
    pt_shm_ring_destroy(&g_prod);
    free(g_area);
    remove(g_dir);
}

static void setup(void)
{
    pt_error err = {0};
    if (pt_shm_make_dir(g_dir, sizeof g_dir, &err) < 0 ||
        pt_shm_ring_create(g_dir, 1, 0, TOKEN, GEN, 0, &g_prod, &err) < 0)
        fail(err.msg);
    char path[PT_SHM_PATH_MAX];
    snprintf(path, sizeof path, "%s", pt_shm_ring_path(g_prod));
    if (pt_shm_ring_attach(path, 1, 0, TOKEN, GEN, &g_cons, &err) < 0)
        fail(err.msg);
    g_area = malloc(pt_shm_ring_capacity(g_prod));
    if (!g_area)
        fail("out of memory");
    atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_prod)
        setup();
    size_t cap = pt_shm_ring_capacity(g_prod);
    uint64_t head = 0, tail = 0;
    if (size >= 8)
        memcpy(&head, data, 8);
    if (size >= 16)
        memcpy(&tail, data + 8, 8);
    size_t n = size > 16 ? size - 16 : 0;
    n = n < cap ? n : cap;
    memset(g_area, 0, cap);
    if (n)
        memcpy(g_area, data + 16, n);
    pt_shm_ring_forge(g_prod, head, tail, g_area, n);
    for (size_t i = 0; i < 4 * cap / 64; i++) {
        uint64_t at = pt_shm_ring_tail(g_cons);
        pt_shm_rec rec;
        int rc = pt_shm_ring_peek_from(g_cons, at, &rec);
        if (rc == 0 || rc == PT_EPARSE)
            break;
        if (rc != 1 && rc != PT_SHM_AGAIN)
            fail("peek returned something it never returns");
        if (pt_shm_ring_tail(g_cons) - at > cap) /* modulo 2^64, as the ring counts */
            fail("the tail went backwards or past a ring-full");
        if (rc == PT_SHM_AGAIN)
            continue;
        size_t off = (size_t)(at & (cap - 1));
        if (off + REC_HDR + rec.len > cap)
            fail("a record reaches past the data area");
        if (memcmp(rec.data, g_area + off + REC_HDR, rec.len) != 0)
            fail("a record's bytes are not those at its offset");
        pt_shm_ring_consume(g_cons);
        uint64_t moved = pt_shm_ring_tail(g_cons) - at;
        if (moved == 0 || moved > cap)
            fail("consuming a record did not move the tail forward, within the ring");
    }
    return 0;
}
