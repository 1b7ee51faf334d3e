/* Fuzz harness for the data plane's frames (runtime/comm.c): what a peer, or
 * anything that reached the data port, can put on the wire. Each input is
 * one message sent by a raw PUSH socket to a communicator (rank 0 of 2, run
 * token and generation set), which then receives from rank 1:
 *   byte 0, its bits: 1 put this run's magic, token, generation and rank 1
 *   in the header (so the checks behind those are reached), 2 the next
 *   sequence number too, 4 the payload size as the header's count, 8 send
 *   the header alone, 16 split the payload over two parts;
 *   bytes 1-48 the 48-byte header (zero-filled when short), the rest the
 *   payload.
 * Properties, each an abort() when false: every message is either delivered
 * or counted as dropped, once (msgs_recv + bad_msgs grows by at most one,
 * and by one unless it was a shared-memory hello); a delivered message
 * carried this run's magic, token and generation and rank 1 as its source,
 * and its floats are the payload's bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "runtime/comm.h"

#define TOKEN 0x5054465a5a3031ull
#define GEN   3
#define MAXF  4096

static void *g_ctx, *g_push;
static pt_comm *g_comm;
static uint64_t g_seq; /* the next sequence number rank 0 expects of rank 1, as far as known */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_comm_frame: %s\n", what);
    abort();
}

static void teardown(void)
{
    pt_comm_destroy(&g_comm);
    zmq_close(g_push);
    zmq_ctx_term(g_ctx);
}

static void setup(void)
{
    g_ctx = zmq_ctx_new();
    pt_comm_config cfg = {0};
    cfg.rank = 0;
    cfg.size = 2;
    cfg.bind_endpoint = "inproc://fuzz-comm-frame";
    cfg.zmq_context = g_ctx;
    cfg.timeout_ms = 1;
    cfg.run_token = TOKEN;
    cfg.generation = GEN;
    cfg.max_msg_bytes = MAXF * sizeof(float);
    cfg.shm = -1;
    cfg.no_linger = 1;
    pt_error err = {0};
    if (pt_comm_create(&cfg, &g_comm, &err) < 0)
        fail(err.msg);
    g_push = zmq_socket(g_ctx, ZMQ_PUSH);
    int zero = 0;
    zmq_setsockopt(g_push, ZMQ_LINGER, &zero, sizeof zero);
    if (!g_push || zmq_connect(g_push, "inproc://fuzz-comm-frame") != 0)
        fail("cannot connect the raw sender");
    atexit(teardown);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the wire is little-endian, as is every host pt_comm runs on */
}

static void put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t accounted(void)
{
    pt_comm_stats st;
    pt_comm_stats_get(g_comm, &st);
    return st.msgs_recv + st.bad_msgs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_comm)
        setup();
    unsigned mode = size ? data[0] : 0;
    unsigned char hdr[PT_COMM_HEADER_BYTES] = {0};
    size_t hn = size > 1 ? size - 1 : 0;
    hn = hn < sizeof hdr ? hn : sizeof hdr;
    if (hn)
        memcpy(hdr, data + 1, hn);
    const uint8_t *pay = data + 1 + hn;
    size_t plen = size - (size ? 1 : 0) - hn;
    if (mode & 1) {
        put_u32(hdr, PT_COMM_MAGIC);
        put_u32(hdr + 4, 1);
        put_u64(hdr + 32, TOKEN);
        put_u64(hdr + 40, GEN);
    }
    if (mode & 2)
        put_u64(hdr + 24, g_seq);
    if (mode & 4)
        put_u64(hdr + 16, plen / sizeof(float));
    uint64_t tag = get_u64(hdr + 8);
    int hello = pt_comm_tag_kind(tag) == PT_COMM_SHM_HELLO;
    uint64_t before = accounted();
    if (mode & 8) {
        zmq_send(g_push, hdr, sizeof hdr, 0);
    } else if ((mode & 16) && plen > 1) {
        zmq_send(g_push, hdr, sizeof hdr, ZMQ_SNDMORE);
        zmq_send(g_push, pay, plen / 2, ZMQ_SNDMORE);
        zmq_send(g_push, pay + plen / 2, plen - plen / 2, 0);
    } else {
        zmq_send(g_push, hdr, sizeof hdr, ZMQ_SNDMORE);
        zmq_send(g_push, pay, plen, 0);
    }
    static float buf[MAXF];
    size_t count = get_u64(hdr + 16);
    pt_error err = {0};
    int rc = pt_comm_recv(g_comm, 1, tag, buf, count <= MAXF ? count : MAXF, &err);
    uint64_t after = accounted();
    if (rc == 0) {
        if (get_u64(hdr + 32) != TOKEN || get_u64(hdr + 40) != GEN || hdr[4] != 1 ||
            memcmp(hdr, &(uint32_t){PT_COMM_MAGIC}, 4) != 0)
            fail("delivered a message whose header is not this run's from rank 1");
        if (count * sizeof(float) != plen || memcmp(buf, pay, plen) != 0)
            fail("delivered floats are not the payload sent");
    }
    if (after > before + 1)
        fail("one message counted twice");
    if (after == before && !hello)
        fail("a message was neither delivered nor counted as dropped");
    if (rc == 0 || (hello && after == before)) /* it passed the checks: its number is used */
        g_seq++;
    return 0;
}
