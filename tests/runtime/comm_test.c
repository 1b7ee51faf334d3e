/* runtime/comm: point-to-point delivery in any order, timeouts, count checks,
 * ring all-reduce against a serial sum, the asynchronous collective, over
 * inproc, tcp on 127.0.0.1 (ephemeral ports) and ipc in a temporary folder,
 * with 2-5 worker threads. */
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "runtime/comm.h"
#include "runtime/comm_internal.h"
#include "tests/runtime/ar_ref.h"
#include "tests/test.h"

#define MAX_P      5
#define TIMEOUT_MS 10000 /* generous: 2 shared cores, maybe under ASan */
#define SHORT_MS   200

/* inproc, tcp and ipc peers are local, so they talk over shared-memory
 * rings; tcp-zmq is tcp with shared memory off (what remote peers use). */
typedef enum { T_INPROC, T_TCP, T_IPC, T_ZMQ, T_COUNT } transport;
static const char *const tname[] = {"inproc", "tcp", "ipc", "tcp-zmq"};

typedef struct world {
    int p;
    transport t;
    void *ctx;
    pt_comm *comm[MAX_P];
    char dir[64];
} world;

static int world_seq;
/* What the next world_open gives every communicator besides its defaults. */
static uint64_t world_token, world_gen;
static size_t world_stash_limit, world_ring_bytes;

static int world_open(world *w, int p, transport t, int timeout_ms)
{
    memset(w, 0, sizeof *w);
    w->p = p;
    w->t = t;
    w->ctx = zmq_ctx_new();
    if (!w->ctx)
        return -1;
    if (t == T_IPC) {
        snprintf(w->dir, sizeof w->dir, "/tmp/pt-comm-test-XXXXXX");
        if (!mkdtemp(w->dir))
            return -1;
    }
    const char *eps[MAX_P];
    int id = world_seq++;
    for (int r = 0; r < p; r++) {
        char bind[128];
        if (t == T_INPROC)
            snprintf(bind, sizeof bind, "inproc://pt-comm-test-%d-%d", id, r);
        else if (t == T_TCP || t == T_ZMQ)
            snprintf(bind, sizeof bind, "tcp://127.0.0.1:*");
        else
            snprintf(bind, sizeof bind, "ipc://%s/r%d", w->dir, r);
        pt_comm_config cfg = {.rank = r,
                              .size = p,
                              .bind_endpoint = bind,
                              .zmq_context = w->ctx,
                              .timeout_ms = timeout_ms,
                              .shm = t == T_ZMQ ? -1 : 0,
                              .run_token = world_token,
                              .generation = world_gen,
                              .stash_limit_bytes = world_stash_limit,
                              .shm_ring_bytes = world_ring_bytes};
        pt_error err = {0};
        if (pt_comm_create(&cfg, &w->comm[r], &err) < 0) {
            fprintf(stderr, "world_open: %s\n", err.msg);
            return -1;
        }
        eps[r] = pt_comm_endpoint(w->comm[r]);
    }
    for (int r = 0; r < p; r++) {
        pt_error err = {0};
        if (pt_comm_connect(w->comm[r], eps, &err) < 0) {
            fprintf(stderr, "world_open: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

static void world_close(world *w)
{
    for (int r = 0; r < w->p; r++)
        pt_comm_destroy(&w->comm[r]);
    if (w->ctx)
        zmq_ctx_term(w->ctx);
    /* pt_comm_destroy removed the ipc socket files, so the folder is empty. */
    if (w->dir[0] && rmdir(w->dir) != 0) {
        fprintf(stderr, "world_close: rmdir %s failed: socket files left behind\n", w->dir);
        pt_test_failures_++;
    }
}

typedef void (*rank_fn)(world *w, int rank, void *arg);
typedef struct thread_arg {
    world *w;
    int rank;
    rank_fn fn;
    void *arg;
} thread_arg;

static void *thread_main(void *a)
{
    thread_arg *t = a;
    t->fn(t->w, t->rank, t->arg);
    return NULL;
}

/* Runs fn on every rank, each in its own thread (the comms were made here;
 * pthread_create is the barrier ZeroMQ needs to move sockets). */
static void world_run(world *w, rank_fn fn, void *arg)
{
    pthread_t th[MAX_P];
    thread_arg ta[MAX_P];
    for (int r = 0; r < w->p; r++) {
        ta[r] = (thread_arg){w, r, fn, arg};
        pthread_create(&th[r], NULL, thread_main, &ta[r]);
    }
    for (int r = 0; r < w->p; r++)
        pthread_join(th[r], NULL);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- point to point --------------------------------------------------------- */

#define NMSG 10
static float payload_value(int src, int mb, int i)
{
    return (float)(src * 100000 + mb * 1000 + i);
}
static size_t payload_count(int mb)
{
    return (size_t)(mb * 37 % 50 + 1); /* distinct sizes */
}

typedef struct p2p_result {
    int rc[MAX_P][NMSG];
    int data_ok[MAX_P][NMSG];
    pt_comm_stats stats[MAX_P];
} p2p_result;

/* Ranks 1..p-1 each send NMSG gradients (mb 0..9) to rank 0, in order; rank 0
 * asks for them from the highest source down and the highest mb down, so all
 * but the very first wanted message arrive early. */
static void p2p_rank(world *w, int rank, void *arg)
{
    p2p_result *res = arg;
    pt_comm *c = w->comm[rank];
    if (rank != 0) {
        for (int mb = 0; mb < NMSG; mb++) {
            float buf[64];
            for (size_t i = 0; i < payload_count(mb); i++)
                buf[i] = payload_value(rank, mb, (int)i);
            res->rc[rank][mb] = pt_comm_send(c, 0, pt_comm_tag(PT_COMM_GRAD, (uint32_t)mb, 0), buf,
                                             payload_count(mb), NULL);
        }
    } else {
        for (int src = w->p - 1; src >= 1; src--)
            for (int mb = NMSG - 1; mb >= 0; mb--) {
                float buf[64];
                size_t n = payload_count(mb);
                pt_error err = {0};
                res->rc[src][mb] =
                    pt_comm_recv(c, src, pt_comm_tag(PT_COMM_GRAD, (uint32_t)mb, 0), buf, n, &err);
                if (res->rc[src][mb] < 0)
                    fprintf(stderr, "p2p: %s\n", err.msg);
                int ok = 1;
                for (size_t i = 0; i < n; i++)
                    ok &= buf[i] == payload_value(src, mb, (int)i);
                res->data_ok[src][mb] = ok;
            }
    }
    pt_comm_stats_get(c, &res->stats[rank]);
}

static void test_p2p_out_of_order(void)
{
    for (int t = 0; t < T_COUNT; t++)
        for (int p = 2; p <= MAX_P; p += 3) {
            world w;
            REQUIRE(world_open(&w, p, (transport)t, TIMEOUT_MS) == 0);
            p2p_result res;
            memset(&res, 0, sizeof res);
            world_run(&w, p2p_rank, &res);
            uint64_t expect_bytes = 0;
            for (int mb = 0; mb < NMSG; mb++)
                expect_bytes += PT_COMM_HEADER_BYTES + payload_count(mb) * sizeof(float);
            for (int src = 1; src < p; src++) {
                for (int mb = 0; mb < NMSG; mb++) {
                    CHECK_MSG(res.rc[src][mb] == 0, "%s p=%d src %d mb %d", tname[t], p, src, mb);
                    CHECK_MSG(res.data_ok[src][mb], "%s p=%d src %d mb %d", tname[t], p, src, mb);
                }
                CHECK(res.stats[src].bytes_sent == expect_bytes);
                CHECK(res.stats[src].msgs_sent == NMSG);
            }
            CHECK(res.stats[0].bytes_recv == expect_bytes * (uint64_t)(p - 1));
            CHECK(res.stats[0].msgs_recv == (uint64_t)NMSG * (uint64_t)(p - 1));
            /* Every message but the ones received in the order asked was
             * stashed, and the stash is empty at the end. */
            CHECK(res.stats[0].early_arrivals >= (uint64_t)NMSG - 1);
            CHECK(res.stats[0].stash_bytes == 0);
            CHECK(res.stats[0].stash_peak_bytes > 0);
            CHECK(res.stats[0].bad_msgs == 0);
            world_close(&w);
        }
}

/* Two messages with the same (src, tag) come out first-in first-out; a
 * message to oneself works without a socket. */
static void fifo_rank(world *w, int rank, void *arg)
{
    int *ok = arg;
    pt_comm *c = w->comm[rank];
    uint64_t tag = pt_comm_tag(PT_COMM_ACT, 7, 3);
    if (rank == 1) {
        for (int k = 0; k < 3; k++) {
            float v[2] = {(float)k, (float)-k};
            ok[1] &= pt_comm_send(c, 0, tag, v, 2, NULL) == 0;
        }
        return;
    }
    float self_v = 42.0f, self_out = 0;
    ok[0] &= pt_comm_send(c, 0, pt_comm_tag(PT_COMM_USER, 1, 0), &self_v, 1, NULL) == 0;
    ok[0] &= pt_comm_recv(c, 0, pt_comm_tag(PT_COMM_USER, 1, 0), &self_out, 1, NULL) == 0;
    ok[0] &= self_out == 42.0f;
    /* Wait for a message that comes last, so the three equal tags queue up. */
    for (int k = 0; k < 3; k++) {
        float v[2] = {-1, -1};
        ok[0] &= pt_comm_recv(c, 1, tag, v, 2, NULL) == 0;
        ok[0] &= v[0] == (float)k && v[1] == (float)-k;
    }
}

static void test_p2p_fifo_and_self(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, TIMEOUT_MS) == 0);
        int ok[2] = {1, 1};
        world_run(&w, fifo_rank, ok);
        CHECK_MSG(ok[0] && ok[1], "%s", tname[t]);
        world_close(&w);
    }
}

typedef struct timeout_result {
    int rc;
    double elapsed_ms;
    char msg[PT_ERROR_MAX];
} timeout_result;

static void timeout_rank(world *w, int rank, void *arg)
{
    timeout_result *res = arg;
    if (rank != 0)
        return; /* rank 1 never sends */
    float buf[4];
    pt_error err = {0};
    double t0 = (pt_clock_s() * 1e3);
    res->rc = pt_comm_recv(w->comm[0], 1, pt_comm_tag(PT_COMM_ACT, 3, 0), buf, 4, &err);
    res->elapsed_ms = (pt_clock_s() * 1e3) - t0;
    memcpy(res->msg, err.msg, sizeof res->msg);
}

static void test_recv_timeout(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, SHORT_MS) == 0);
        timeout_result res = {0};
        world_run(&w, timeout_rank, &res);
        CHECK(res.rc == PT_ETIMEOUT);
        CHECK_MSG(res.elapsed_ms >= SHORT_MS - 5 && res.elapsed_ms < SHORT_MS + 2000,
                  "%s: waited %.1f ms", tname[t], res.elapsed_ms);
        CHECK_STR_CONTAINS(res.msg, "act/mb3/part0");
        CHECK_STR_CONTAINS(res.msg, "from rank 1");
        world_close(&w);
    }
}

typedef struct mismatch_result {
    int rc_bad, rc_good, canary_ok, good_ok;
    char msg[PT_ERROR_MAX];
} mismatch_result;

static void mismatch_rank(world *w, int rank, void *arg)
{
    mismatch_result *res = arg;
    pt_comm *c = w->comm[rank];
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (rank == 1) {
        pt_comm_send(c, 0, pt_comm_tag(PT_COMM_ACT, 0, 0), v, 8, NULL);
        pt_comm_send(c, 0, pt_comm_tag(PT_COMM_ACT, 1, 0), v, 3, NULL);
        return;
    }
    /* Too small and too large a buffer are both refused, nothing written. */
    float small[5] = {-1, -1, -1, -1, -1}, canary = -7;
    pt_error err = {0};
    res->rc_bad = pt_comm_recv(c, 1, pt_comm_tag(PT_COMM_ACT, 0, 0), small, 4, &err);
    memcpy(res->msg, err.msg, sizeof res->msg);
    res->canary_ok = small[4] == -1 && small[0] == -1 && canary == -7;
    float three[3] = {0};
    res->rc_good = pt_comm_recv(c, 1, pt_comm_tag(PT_COMM_ACT, 1, 0), three, 3, NULL);
    res->good_ok = three[0] == 1 && three[2] == 3;
}

static void test_count_mismatch(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, TIMEOUT_MS) == 0);
        mismatch_result res = {0};
        world_run(&w, mismatch_rank, &res);
        CHECK(res.rc_bad == PT_EINVAL);
        CHECK(res.canary_ok);
        CHECK_STR_CONTAINS(res.msg, "has 8 floats, the receiver expects 4");
        CHECK(res.rc_good == 0);
        CHECK(res.good_ok);
        world_close(&w);
    }
}

/* Zero-copy: the sender may reuse its buffer only after the wait, and the
 * receiver sees the values as they were at send time. */
static void zc_rank(world *w, int rank, void *arg)
{
    int *ok = arg;
    pt_comm *c = w->comm[rank];
    enum { N = 50000 };
    static float sendbuf[N];
    if (rank == 1) {
        pt_comm_zc zc;
        pt_comm_zc_init(&zc);
        for (int it = 0; it < 3; it++) {
            for (int i = 0; i < N; i++)
                sendbuf[i] = (float)(it * N + i);
            ok[1] &= pt_comm_send_zc(c, 0, pt_comm_tag(PT_COMM_ACT, (uint32_t)it, 0), sendbuf, N,
                                     &zc, NULL) == 0;
            ok[1] &= pt_comm_zc_wait(&zc, TIMEOUT_MS) == 0;
        }
        return;
    }
    static float recvbuf[N];
    for (int it = 0; it < 3; it++) {
        ok[0] &=
            pt_comm_recv(c, 1, pt_comm_tag(PT_COMM_ACT, (uint32_t)it, 0), recvbuf, N, NULL) == 0;
        for (int i = 0; i < N; i++)
            ok[0] &= recvbuf[i] == (float)(it * N + i);
    }
}

static void test_zero_copy_send(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, TIMEOUT_MS) == 0);
        int ok[2] = {1, 1};
        world_run(&w, zc_rank, ok);
        CHECK_MSG(ok[0] && ok[1], "%s", tname[t]);
        world_close(&w);
    }
}

/* Copying sends reuse their buffers: 20 one-at-a-time 1 MiB sends need one
 * pooled buffer (two if a release races the next send), not twenty. */
static void pool_rank(world *w, int rank, void *arg)
{
    int *ok = arg;
    pt_comm *c = w->comm[rank];
    enum { N = 1 << 18, ROUNDS = 20 };
    float *buf = calloc(N, sizeof(float));
    for (int i = 0; i < ROUNDS; i++) {
        float ack = 0;
        uint64_t tag = pt_comm_tag(PT_COMM_ACT, (uint32_t)i, 0);
        if (rank == 0) {
            buf[0] = (float)i;
            ok[0] &= pt_comm_send(c, 1, tag, buf, N, NULL) == 0;
            ok[0] &=
                pt_comm_recv(c, 1, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 0), &ack, 1, NULL) == 0;
        } else {
            ok[1] &= pt_comm_recv(c, 0, tag, buf, N, NULL) == 0 && buf[0] == (float)i;
            ok[1] &=
                pt_comm_send(c, 0, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 0), &ack, 1, NULL) == 0;
        }
    }
    free(buf);
}

static void test_send_buffers_reused(void)
{
    /* The pool serves ZeroMQ sends; over a ring the copy goes into the ring. */
    for (int t = T_ZMQ; t < T_COUNT; t++) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, TIMEOUT_MS) == 0);
        int ok[2] = {1, 1};
        world_run(&w, pool_rank, ok);
        CHECK_MSG(ok[0] && ok[1], "%s", tname[t]);
        pt_comm_stats st;
        pt_comm_stats_get(w.comm[0], &st);
        CHECK_MSG(st.pool_peak_bytes >= (1u << 20) && st.pool_peak_bytes <= (2u << 20),
                  "%s: pool peak %zu bytes", tname[t], st.pool_peak_bytes);
        CHECK(st.pool_bytes >= (1u << 20));
        world_close(&w);
    }
}

/* pt_comm_open with endpoints known beforehand (ipc paths), then a token
 * passed around the ring. */
static void ring_rank(world *w, int rank, void *arg)
{
    int *ok = arg;
    pt_comm *c = w->comm[rank];
    int right = (rank + 1) % w->p, left = (rank + w->p - 1) % w->p;
    float token = 0;
    if (rank == 0)
        ok[0] &= pt_comm_send(c, right, pt_comm_tag(PT_COMM_USER, 0, 0), &token, 1, NULL) == 0;
    ok[rank] &= pt_comm_recv(c, left, pt_comm_tag(PT_COMM_USER, 0, 0), &token, 1, NULL) == 0;
    if (rank != 0) {
        token += (float)rank;
        ok[rank] &= pt_comm_send(c, right, pt_comm_tag(PT_COMM_USER, 0, 0), &token, 1, NULL) == 0;
    } else {
        ok[0] &= token == (float)(w->p * (w->p - 1) / 2);
    }
}

static void test_open_known_endpoints(void)
{
    world w;
    memset(&w, 0, sizeof w);
    w.p = 3;
    w.ctx = zmq_ctx_new();
    snprintf(w.dir, sizeof w.dir, "/tmp/pt-comm-test-XXXXXX");
    REQUIRE(mkdtemp(w.dir) != NULL);
    char eps[3][128];
    const char *ep[3];
    for (int r = 0; r < 3; r++) {
        snprintf(eps[r], sizeof eps[r], "ipc://%s/ring%d", w.dir, r);
        ep[r] = eps[r];
    }
    for (int r = 0; r < 3; r++) {
        pt_comm_config cfg = {.rank = r, .size = 3, .zmq_context = w.ctx, .timeout_ms = TIMEOUT_MS};
        pt_error err = {0};
        CHECK_MSG(pt_comm_open(&cfg, ep, &w.comm[r], &err) == 0, "%s", err.msg);
    }
    int ok[3] = {1, 1, 1};
    world_run(&w, ring_rank, ok);
    CHECK(ok[0] && ok[1] && ok[2]);
    world_close(&w);

    /* Binding an endpoint already bound fails and leaves nothing open (tcp:
     * an ipc bind would take the path over). */
    pt_comm *a = NULL, *dup = (pt_comm *)1;
    pt_comm_config ca = {
        .rank = 0, .size = 2, .bind_endpoint = "tcp://127.0.0.1:*", .timeout_ms = 100};
    REQUIRE(pt_comm_create(&ca, &a, NULL) == 0);
    const char *taken[2] = {pt_comm_endpoint(a), pt_comm_endpoint(a)};
    pt_comm_config cb = {.rank = 1, .size = 2, .timeout_ms = 100};
    pt_error err = {0};
    CHECK(pt_comm_open(&cb, taken, &dup, &err) == PT_EIO);
    CHECK(dup == NULL);
    CHECK_STR_CONTAINS(err.msg, "bind");
    pt_comm_destroy(&a);
}

typedef struct interrupt_result {
    int rc;
    double elapsed_ms;
} interrupt_result;

static void blocked_rank(world *w, int rank, void *arg)
{
    interrupt_result *res = arg;
    if (rank != 0)
        return;
    float v;
    double t0 = (pt_clock_s() * 1e3);
    res->rc = pt_comm_recv(w->comm[0], 1, pt_comm_tag(PT_COMM_ACT, 0, 0), &v, 1, NULL);
    res->elapsed_ms = (pt_clock_s() * 1e3) - t0;
}

static void *interrupter(void *arg)
{
    sleep_ms(100);
    pt_comm_interrupt(arg);
    return NULL;
}

/* Another thread can wake a receive that would otherwise wait its full
 * timeout (how an agent abandons a run whose peer died). */
static void test_interrupt_blocked_recv(void)
{
    world w;
    REQUIRE(world_open(&w, 2, T_TCP, 60000) == 0);
    /* Something queued to a peer that never reads: destroy must not linger. */
    float big[1024] = {0};
    CHECK(pt_comm_send(w.comm[1], 0, pt_comm_tag(PT_COMM_USER, 9, 0), big, 1024, NULL) == 0);
    interrupt_result res = {0};
    pthread_t th;
    pthread_create(&th, NULL, interrupter, w.comm[0]);
    world_run(&w, blocked_rank, &res);
    pthread_join(th, NULL);
    CHECK(res.rc == PT_ESTATE);
    CHECK_MSG(res.elapsed_ms < 5000, "woke after %.0f ms", res.elapsed_ms);
    double t0 = (pt_clock_s() * 1e3);
    world_close(&w);
    CHECK_MSG((pt_clock_s() * 1e3) - t0 < 5000, "closing took %.0f ms", (pt_clock_s() * 1e3) - t0);
}

/* A 48-byte header as an injector would forge it. */
static void forge(unsigned char *h, uint32_t magic, uint32_t src, uint64_t tag, uint64_t count,
                  uint64_t seq, uint64_t token, uint64_t gen)
{
    uint64_t f[5] = {tag, count, seq, token, gen};
    memcpy(h, &magic, 4);
    memcpy(h + 4, &src, 4);
    for (int i = 0; i < 5; i++)
        memcpy(h + 8 + 8 * i, &f[i], 8);
}

static void send_forged(void *raw, uint32_t magic, uint32_t src, uint64_t tag, uint64_t seq,
                        uint64_t token, uint64_t gen, const float *v, size_t n)
{
    unsigned char h[PT_COMM_HEADER_BYTES];
    forge(h, magic, src, tag, n, seq, token, gen);
    zmq_send(raw, h, sizeof h, ZMQ_SNDMORE);
    zmq_send(raw, v, n * sizeof *v, 0);
}

#define TOKEN 0x5eedc0ffee123457ull
#define GEN   3

/* Frames that are not our messages — malformed, another run's token or
 * generation, a sender that is not a peer, a replayed or skipped sequence
 * number — are dropped and counted, never crash the receiver, and do not
 * hide the valid message behind them; over shared memory, frames that claim
 * a sender whose messages come through its ring are dropped even when all
 * the rest is right. Rank 2 never sends: the injector speaks for it. */
static void test_bad_frames_dropped(void)
{
    world_token = TOKEN;
    world_gen = GEN;
    for (int t = T_TCP; t < T_COUNT; t += T_ZMQ - T_TCP) {
        int shm = t != T_ZMQ;
        world w;
        REQUIRE(world_open(&w, 3, (transport)t, TIMEOUT_MS) == 0);
        void *raw = zmq_socket(w.ctx, ZMQ_PUSH);
        REQUIRE(raw != NULL);
        REQUIRE(zmq_connect(raw, pt_comm_endpoint(w.comm[0])) == 0);
        const uint32_t M = PT_COMM_MAGIC;
        unsigned char zero[PT_COMM_HEADER_BYTES] = {0};
        float one = 1.0f, two[2] = {3.0f, 4.0f}, bad[2] = {-1.0f, -1.0f}, out[2] = {0};
        zmq_send(raw, "hello", 5, 0);                  /* one short frame */
        zmq_send(raw, zero, sizeof zero, ZMQ_SNDMORE); /* bad magic */
        zmq_send(raw, "abcd", 4, 0);
        unsigned char h[PT_COMM_HEADER_BYTES];
        forge(h, M, 2, 0, 2, 0, TOKEN, GEN); /* count says 2, payload has 1 */
        zmq_send(raw, h, sizeof h, ZMQ_SNDMORE);
        zmq_send(raw, &one, sizeof one, 0);
        send_forged(raw, M, 2, 0, 0, TOKEN ^ 1, GEN, bad, 2); /* another run */
        send_forged(raw, M, 2, 0, 0, TOKEN, GEN - 1, bad, 2); /* an older generation */
        send_forged(raw, M, 7, 0, 0, TOKEN, GEN, bad, 2);     /* no such rank */
        send_forged(raw, M, 0, 0, 0, TOKEN, GEN, bad, 2);     /* the receiver itself */
        send_forged(raw, M, 2, 0, 5, TOKEN, GEN, bad, 2);     /* skips ahead */
        send_forged(raw, M, 2, 0, 0, TOKEN, GEN, two, 2);     /* valid: seq 0 */
        send_forged(raw, M, 2, 0, 0, TOKEN, GEN, bad, 2);     /* replay of seq 0 */
        CHECK_MSG(pt_comm_recv(w.comm[0], 2, 0, out, 2, NULL) == 0, "%s", tname[t]);
        CHECK(out[0] == 3.0f && out[1] == 4.0f);
        /* the real rank 1 (over its ring when local) */
        float real = 5.0f;
        uint64_t tag = pt_comm_tag(PT_COMM_ACT, 1, 0);
        CHECK(pt_comm_send(w.comm[1], 0, tag, &real, 1, NULL) == 0);
        pt_error err = {0};
        CHECK_MSG(pt_comm_recv(w.comm[0], 1, tag, out, 1, &err) == 0, "%s: %s", tname[t], err.msg);
        CHECK(out[0] == 5.0f);
        /* a replay of rank 1's frame; with shared memory also its next one,
         * which only the ring may carry */
        send_forged(raw, M, 1, tag, 0, TOKEN, GEN, bad, 1);
        if (shm)
            send_forged(raw, M, 1, pt_comm_tag(PT_COMM_ACT, 2, 0), 1, TOKEN, GEN, bad, 1);
        CHECK(pt_comm_send(w.comm[1], 0, pt_comm_tag(PT_COMM_ACT, 2, 0), &real, 1, NULL) == 0);
        CHECK(pt_comm_recv(w.comm[0], 1, pt_comm_tag(PT_COMM_ACT, 2, 0), out, 1, &err) == 0);
        CHECK_MSG(out[0] == 5.0f, "%s: the forged frame won", tname[t]);
        /* the forged frames may still be queued: receive until they are counted */
        uint64_t want = 10u + (unsigned)shm;
        pt_comm_stats st;
        pt_comm_stats_get(w.comm[0], &st);
        pt_comm_set_timeout(w.comm[0], 20);
        double t0 = (pt_clock_s() * 1e3);
        while (st.bad_msgs < want && (pt_clock_s() * 1e3) - t0 < TIMEOUT_MS) {
            pt_comm_recv(w.comm[0], 1, pt_comm_tag(PT_COMM_USER, 0, 0), out, 1, NULL);
            pt_comm_stats_get(w.comm[0], &st);
        }
        CHECK_MSG(st.dropped_malformed == 3, "%s: %llu", tname[t],
                  (unsigned long long)st.dropped_malformed);
        CHECK(st.dropped_token == 1);      /* another run */
        CHECK(st.dropped_generation == 1); /* this run, an older generation */
        CHECK_MSG(st.dropped_sender == (shm ? 4u : 2u), "%s: %llu", tname[t],
                  (unsigned long long)st.dropped_sender);
        CHECK_MSG(st.dropped_seq == (shm ? 2u : 3u), "%s: %llu", tname[t],
                  (unsigned long long)st.dropped_seq);
        CHECK(st.dropped_overflow == 0);
        CHECK(st.bad_msgs == want);
        CHECK(st.shm_peers_in == (shm ? 1u : 0u));
        int linger = 0;
        zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(raw);
        world_close(&w);
    }
    world_token = world_gen = 0;
}

/* The early-arrival buffer holds at most its bound: frames beyond it are
 * dropped and counted, the wanted one still arrives, and a receive of a
 * dropped one fails naming the bound. */
static void test_stash_bound(void)
{
    enum { N = 10, FLOATS = 256 };
    world_stash_limit = 4 * FLOATS * sizeof(float);
    for (int t = T_TCP; t < T_COUNT; t += T_ZMQ - T_TCP) {
        world w;
        REQUIRE(world_open(&w, 2, (transport)t, TIMEOUT_MS) == 0);
        float buf[FLOATS];
        for (int mb = 0; mb < N; mb++) {
            buf[0] = (float)mb;
            CHECK(pt_comm_send(w.comm[1], 0, pt_comm_tag(PT_COMM_ACT, (uint32_t)mb, 0), buf, FLOATS,
                               NULL) == 0);
        }
        CHECK(pt_comm_recv(w.comm[0], 1, pt_comm_tag(PT_COMM_ACT, N - 1, 0), buf, FLOATS, NULL) ==
              0);
        CHECK(buf[0] == (float)(N - 1));
        pt_comm_stats st;
        pt_comm_stats_get(w.comm[0], &st);
        CHECK_MSG(st.stash_peak_bytes <= world_stash_limit, "%s: peak %zu", tname[t],
                  st.stash_peak_bytes);
        CHECK_MSG(st.dropped_overflow == N - 1 - 4, "%s: %llu dropped", tname[t],
                  (unsigned long long)st.dropped_overflow);
        CHECK(pt_comm_recv(w.comm[0], 1, pt_comm_tag(PT_COMM_ACT, 3, 0), buf, FLOATS, NULL) == 0);
        CHECK(buf[0] == 3.0f);
        pt_comm_set_timeout(w.comm[0], SHORT_MS);
        pt_error err = {0};
        CHECK(pt_comm_recv(w.comm[0], 1, pt_comm_tag(PT_COMM_ACT, 5, 0), buf, FLOATS, &err) ==
              PT_ETIMEOUT);
        CHECK_STR_CONTAINS(err.msg, "early-arrival bound");
        world_close(&w);
    }
    world_stash_limit = 0;
}

/* Messages much larger than a (small) ring stream through it, and two
 * ranks that both send several of them before receiving do not wait on each
 * other: a sender whose ring is full takes in what is sent to it. */
static void both_ways_rank(world *w, int rank, void *arg)
{
    enum { N = 1 << 16, MSGS = 4 };
    int *ok = arg;
    int peer = 1 - rank;
    float *buf = malloc(N * sizeof(float));
    for (int m = 0; m < MSGS; m++) {
        for (int i = 0; i < N; i++)
            buf[i] = (float)(rank * 1000000 + m * N + i);
        pt_error err = {0};
        int rc = pt_comm_send(w->comm[rank], peer, pt_comm_tag(PT_COMM_ACT, (uint32_t)m, 0), buf, N,
                              &err);
        if (rc < 0)
            fprintf(stderr, "both ways: rank %d: %s\n", rank, err.msg);
        ok[rank] &= rc == 0;
    }
    for (int m = 0; m < MSGS; m++) {
        pt_error err = {0};
        int rc = pt_comm_recv(w->comm[rank], peer, pt_comm_tag(PT_COMM_ACT, (uint32_t)m, 0), buf, N,
                              &err);
        if (rc < 0)
            fprintf(stderr, "both ways: rank %d: %s\n", rank, err.msg);
        ok[rank] &= rc == 0;
        for (int i = 0; i < N; i += 997)
            ok[rank] &= buf[i] == (float)(peer * 1000000 + m * N + i);
    }
    free(buf);
}

static void test_shm_large_both_ways(void)
{
    world_ring_bytes = 64 << 10; /* 4 messages of 256 KiB each way: 16 x the ring */
    world w;
    REQUIRE(world_open(&w, 2, T_IPC, TIMEOUT_MS) == 0);
    int ok[2] = {1, 1};
    world_run(&w, both_ways_rank, ok);
    CHECK(ok[0] && ok[1]);
    pt_comm_stats st;
    pt_comm_stats_get(w.comm[0], &st);
    CHECK(st.shm_peers_out == 1 && st.shm_peers_in == 1);
    CHECK(st.bad_msgs == 0);
    world_close(&w);
    world_ring_bytes = 0;
}

/* A process killed with its rings leaves its folder behind; the next one
 * to make a folder removes the folders of processes that are gone (and only
 * those: a live pid's folder stays). */
static void test_shm_sweeps_stale(void)
{
    char dead[128], live[128], file[160];
    /* pid_max is at most 2^22: this pid cannot exist */
    snprintf(dead, sizeof dead, "/dev/shm/pipetop-comm-%d-zzzzzz", (1 << 22) + 1);
    snprintf(live, sizeof live, "/dev/shm/pipetop-comm-%d-zzzzzz", (int)getppid());
    REQUIRE(mkdir(dead, 0700) == 0);
    REQUIRE(mkdir(live, 0700) == 0);
    snprintf(file, sizeof file, "%s/g1-r0-to-r1", dead);
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fclose(f);
    world w;
    REQUIRE(world_open(&w, 2, T_IPC, TIMEOUT_MS) == 0);
    float v = 1;
    CHECK(pt_comm_send(w.comm[0], 1, 0, &v, 1, NULL) == 0); /* makes the first ring */
    CHECK(pt_comm_recv(w.comm[1], 0, 0, &v, 1, NULL) == 0);
    struct stat st;
    CHECK_MSG(stat(dead, &st) != 0, "%s is still there", dead);
    CHECK_MSG(stat(live, &st) == 0, "%s was removed", live);
    world_close(&w);
    rmdir(live);
}

/* A ring that its receiver drains between messages starts each message at
 * its front again (the same cached bytes), and one that still holds a
 * message puts the next one after it. */
static void test_shm_ring_rewinds(void)
{
    char dir[PT_SHM_PATH_MAX];
    pt_error err = {0};
    REQUIRE(pt_shm_make_dir(dir, sizeof dir, &err) == 0);
    pt_shm_ring *tx, *rx;
    REQUIRE(pt_shm_ring_create(dir, 0, 1, 7, 1, 64 << 10, &tx, &err) == 0);
    REQUIRE(pt_shm_ring_attach(pt_shm_ring_path(tx), 0, 1, 7, 1, &rx, &err) == 0);
    unsigned char hdr[PT_COMM_HEADER_BYTES] = {0};
    float pay[1000] = {0}; /* 4 KiB: 16 of them would wrap the 64 KiB ring */
    const unsigned char *front = NULL;
    for (int m = 0; m < 40; m++) {
        pay[0] = (float)m;
        REQUIRE(pt_shm_ring_send(tx, hdr, pay, sizeof pay, NULL, NULL) == 0);
        pt_shm_rec rec;
        REQUIRE(pt_shm_ring_peek(rx, &rec) == 1);
        CHECK(rec.type == PT_SHM_MSG && rec.len == sizeof hdr + sizeof pay);
        float got;
        memcpy(&got, rec.data + sizeof hdr, sizeof got);
        CHECK(got == (float)m);
        if (!front)
            front = rec.data;
        CHECK_MSG(rec.data == front, "message %d at offset %td", m, rec.data - front);
        pt_shm_ring_consume(rx);
    }
    REQUIRE(pt_shm_ring_send(tx, hdr, pay, sizeof pay, NULL, NULL) == 0);
    REQUIRE(pt_shm_ring_send(tx, hdr, pay, sizeof pay, NULL, NULL) == 0);
    pt_shm_rec a, b;
    REQUIRE(pt_shm_ring_peek(rx, &a) == 1);
    pt_shm_ring_consume(rx);
    REQUIRE(pt_shm_ring_peek(rx, &b) == 1);
    CHECK(a.data == front && b.data > a.data);
    pt_shm_ring_consume(rx);
    pt_shm_ring_destroy(&rx);
    pt_shm_ring_destroy(&tx);
    CHECK(rmdir(dir) == 0);
}

/* The rewind of an empty ring (above) moves the ring's tail from the
 * producer's side. A receiver that read tail just before, and is held there
 * while the producer writes a ring's worth of new messages (over the bytes
 * at the tail it read), must not take what is there now for its next
 * record: it reads tail again. Before this was checked, a receiver
 * preempted in that window (a loaded machine) took a later message for the
 * next one: the next sequence number from that peer failed and the
 * messages in between were lost. */
static void test_shm_ring_rewind_race(void)
{
    char dir[PT_SHM_PATH_MAX];
    pt_error err = {0};
    REQUIRE(pt_shm_make_dir(dir, sizeof dir, &err) == 0);
    pt_shm_ring *tx, *rx;
    REQUIRE(pt_shm_ring_create(dir, 0, 1, 7, 1, 64 << 10, &tx, &err) == 0);
    REQUIRE(pt_shm_ring_attach(pt_shm_ring_path(tx), 0, 1, 7, 1, &rx, &err) == 0);
    unsigned char hdr[PT_COMM_HEADER_BYTES] = {0};
    float pay[1000] = {0};
    pt_shm_rec rec;
    REQUIRE(pt_shm_ring_send(tx, hdr, pay, sizeof pay, NULL, NULL) == 0);
    REQUIRE(pt_shm_ring_peek(rx, &rec) == 1);
    pt_shm_ring_consume(rx); /* empty, its tail past the front */
    uint64_t held = pt_shm_ring_tail(rx);
    /* 15 messages of 4 KiB: the first rewinds to the front, the second lands
     * where the receiver's held tail points */
    int sent = 15;
    for (int m = 1; m <= sent; m++) {
        pay[0] = (float)m;
        REQUIRE(pt_shm_ring_send(tx, hdr, pay, sizeof pay, NULL, NULL) == 0);
    }
    CHECK_MSG(pt_shm_ring_peek_from(rx, held, &rec) == PT_SHM_AGAIN,
              "the receiver took the record at a tail the producer had moved");
    for (int m = 1; m <= sent; m++) {
        REQUIRE(pt_shm_ring_peek(rx, &rec) == 1);
        float got;
        memcpy(&got, rec.data + sizeof hdr, sizeof got);
        CHECK_MSG(got == (float)m, "message %g where %d was next", (double)got, m);
        pt_shm_ring_consume(rx);
    }
    CHECK(pt_shm_ring_peek(rx, &rec) == 0);
    pt_shm_ring_destroy(&rx);
    pt_shm_ring_destroy(&tx);
    CHECK(rmdir(dir) == 0);
}

static void test_bad_config(void)
{
    pt_comm *c = (pt_comm *)0x1;
    pt_error err = {0};
    pt_comm_config cfg = {.rank = 0, .size = 2, .bind_endpoint = "udp://x", .timeout_ms = 10};
    CHECK(pt_comm_create(&cfg, &c, &err) == PT_EINVAL);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(err.msg, "udp://x");
    cfg.bind_endpoint = "tcp://127.0.0.1:*";
    cfg.rank = 2;
    CHECK(pt_comm_create(&cfg, &c, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "rank 2");
    cfg.rank = 0;
    cfg.timeout_ms = 0;
    CHECK(pt_comm_create(&cfg, &c, &err) == PT_EINVAL);
    cfg.timeout_ms = 100;
    REQUIRE(pt_comm_create(&cfg, &c, &err) == 0);
    CHECK(strncmp(pt_comm_endpoint(c), "tcp://127.0.0.1:", 16) == 0);
    CHECK(strcmp(pt_comm_endpoint(c), "tcp://127.0.0.1:*") != 0);
    float v = 1;
    /* Not connected to rank 1; rank 5 does not exist. */
    CHECK(pt_comm_send(c, 1, 0, &v, 1, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "not connected");
    CHECK(pt_comm_send(c, 5, 0, &v, 1, &err) == PT_EINVAL);
    CHECK(pt_comm_recv(c, -1, 0, &v, 1, &err) == PT_EINVAL);
    const char *eps[2] = {NULL, "bogus"};
    CHECK(pt_comm_connect(c, eps, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "endpoints[1]");
    pt_comm_destroy(&c);
    CHECK(c == NULL);
    pt_comm_destroy(&c); /* NULL-safe */
    char tb[64];
    CHECK(strcmp(pt_comm_tag_str(pt_comm_tag(PT_COMM_GRAD, 12, 5), tb, sizeof tb),
                 "grad/mb12/part5") == 0);
    uint64_t tag = pt_comm_tag(PT_COMM_ALLREDUCE, 0xFFFFFFFFu, PT_COMM_TAG_PART_MAX);
    CHECK(pt_comm_tag_kind(tag) == PT_COMM_ALLREDUCE);
    CHECK(pt_comm_tag_microbatch(tag) == 0xFFFFFFFFu);
    CHECK(pt_comm_tag_part(tag) == PT_COMM_TAG_PART_MAX);
    pt_comm_group g;
    int dup[3] = {0, 1, 0};
    CHECK(pt_comm_group_init(&g, dup, 3) == PT_EINVAL);
    CHECK(pt_comm_group_init(&g, dup, 0) == PT_EINVAL);
}

/* ---- all-reduce ------------------------------------------------------------- */

typedef struct ar_job {
    size_t count;
    int integers; /* 1: small integers (exact), 0: uniform in [-0.5, 0.5] */
    int op;
    int rounds; /* consecutive all-reduces on one group, each with new data */
    float *data[MAX_P];
    int rc[MAX_P];
    char msg[MAX_P][PT_ERROR_MAX];
} ar_job;

static void ar_rank(world *w, int rank, void *arg)
{
    ar_job *job = arg;
    int ranks[MAX_P];
    for (int r = 0; r < w->p; r++)
        ranks[r] = r;
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, w->p);
    for (int round = 0; round < job->rounds; round++) {
        float *buf = job->data[rank];
        for (size_t j = 0; j < job->count; j++)
            buf[j] = ar_input(job->integers, round, rank, j);
        if (rank == round % w->p)
            sleep_ms(5); /* let the others run ahead into the next round */
        pt_error err = {0};
        job->rc[rank] = pt_comm_allreduce(w->comm[rank], &g, buf, job->count, job->op, &err);
        if (job->rc[rank] < 0) {
            memcpy(job->msg[rank], err.msg, sizeof job->msg[rank]);
            return;
        }
        if (round + 1 < job->rounds) {
            /* Keep this round's result in the upper copy for checking. */
            memcpy(buf + job->count * (size_t)(round + 1), buf, job->count * sizeof(float));
        }
    }
}

/* Checks rank results of the last round against a serial sum (double) and,
 * bit for bit, against the ring's order of float sums. */
static int ar_check(const ar_job *job, int p, const char *what, int round, const float *const *res)
{
    int bad = 0;
    for (size_t j = 0; j < job->count && bad < 5; j++) {
        float bits = ar_ring_order_sum(job->integers, job->count, p, round, j);
        if (job->op == PT_COMM_AVERAGE)
            bits /= (float)p;
        if (memcmp(&bits, &res[0][j], sizeof bits) != 0) {
            fprintf(stderr,
                    "%s: round %d element %zu: got %.9g, the ring's order of sums gives %.9g\n",
                    what, round, j, res[0][j], bits);
            bad++;
        }
        double sum = 0;
        for (int r = 0; r < p; r++)
            sum += ar_input(job->integers, round, r, j);
        double want = job->op == PT_COMM_AVERAGE ? sum / p : sum;
        /* Integers: the float sum is exact, and so is its correctly rounded
         * quotient by p. */
        float want_f = (float)sum;
        if (job->op == PT_COMM_AVERAGE)
            want_f /= (float)p;
        for (int r = 0; r < p; r++) {
            float got = res[r][j];
            /* Floats in [-0.5,0.5]: p-1 float additions of partial sums below
             * 2.5 err by < 4 * 2.5 * 2^-24 < 1e-6. */
            int ok = job->integers ? got == want_f : fabs(got - want) <= 1e-6;
            /* Every rank ends with the very same bits. */
            ok &= memcmp(&got, &res[0][j], sizeof got) == 0;
            if (!ok) {
                fprintf(stderr, "%s: round %d element %zu rank %d: got %.9g want %.9g\n", what,
                        round, j, r, got, want);
                bad++;
            }
        }
    }
    return bad == 0;
}

static void run_allreduce_case(transport t, int p, size_t count, int integers, int op, int rounds)
{
    world w;
    REQUIRE(world_open(&w, p, t, TIMEOUT_MS) == 0);
    ar_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    job.integers = integers;
    job.op = op;
    job.rounds = rounds;
    for (int r = 0; r < p; r++)
        job.data[r] = malloc((count ? count : 1) * sizeof(float) * (size_t)rounds);
    world_run(&w, ar_rank, &job);
    char what[128];
    snprintf(what, sizeof what, "%s p=%d count=%zu %s %s", tname[t], p, count,
             integers ? "ints" : "floats", op == PT_COMM_AVERAGE ? "avg" : "sum");
    int all_ok = 1;
    for (int r = 0; r < p; r++)
        if (job.rc[r] != 0) {
            fprintf(stderr, "%s: rank %d: %s\n", what, r, job.msg[r]);
            all_ok = 0;
        }
    CHECK_MSG(all_ok, "%s", what);
    if (all_ok)
        for (int round = 0; round < rounds; round++) {
            const float *res[MAX_P];
            for (int r = 0; r < p; r++)
                res[r] =
                    round + 1 < rounds ? job.data[r] + count * (size_t)(round + 1) : job.data[r];
            CHECK_MSG(ar_check(&job, p, what, round, res), "%s round %d", what, round);
        }
    for (int r = 0; r < p; r++)
        free(job.data[r]);
    world_close(&w);
}

static void test_allreduce_sizes(void)
{
    static const int ps[] = {1, 2, 3, 5};
    static const size_t counts[] = {1, 7, 1000, 100003};
    for (int t = 0; t < T_COUNT; t++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                run_allreduce_case((transport)t, ps[pi], counts[ci], 1, PT_COMM_SUM, 1);
                run_allreduce_case((transport)t, ps[pi], counts[ci], 0, PT_COMM_SUM, 1);
            }
}

static void test_allreduce_segments_average_rounds(void)
{
    /* Chunks longer than one segment (3 * 65536 + 1 floats over 2 and 3 ranks),
     * an empty all-reduce, averaging, and consecutive rounds whose traffic
     * overlaps (a late rank receives the next round's messages early). */
    run_allreduce_case(T_INPROC, 2, 3 * PT_COMM_SEGMENT_FLOATS + 1, 1, PT_COMM_SUM, 1);
    run_allreduce_case(T_TCP, 3, 3 * PT_COMM_SEGMENT_FLOATS + 1, 0, PT_COMM_SUM, 1);
    run_allreduce_case(T_INPROC, 3, 0, 1, PT_COMM_SUM, 1);
    run_allreduce_case(T_IPC, 3, 1000, 0, PT_COMM_AVERAGE, 1);
    run_allreduce_case(T_INPROC, 5, 101, 1, PT_COMM_AVERAGE, 3);
    run_allreduce_case(T_TCP, 4, 5000, 1, PT_COMM_SUM, 4);
}

/* The direct all-reduce (PT_COMM_ALLREDUCE=direct, set here before the
 * ranks' threads start and unset after they end) over every transport, 3
 * and 5 ranks, odd sizes, averaging and overlapping rounds: the ring's bits
 * (ar_check). */
static void test_allreduce_direct(void)
{
    setenv("PT_COMM_ALLREDUCE", "direct", 1);
    for (int t = 0; t < T_COUNT; t++) {
        run_allreduce_case((transport)t, 3, 1001, 0, PT_COMM_SUM, 1);
        run_allreduce_case((transport)t, 5, 100003, 0, PT_COMM_SUM, 1);
    }
    run_allreduce_case(T_INPROC, 3, 2, 1, PT_COMM_SUM, 2);
    run_allreduce_case(T_IPC, 4, 3 * PT_COMM_SEGMENT_FLOATS + 1, 0, PT_COMM_AVERAGE, 1);
    run_allreduce_case(T_ZMQ, 5, 101, 1, PT_COMM_AVERAGE, 3);
    unsetenv("PT_COMM_ALLREDUCE");
}

/* Over shared memory the ring takes segments in the order they arrive: the
 * left's step-0 segments come interleaved with the step-1 segments they
 * yield, and none is put aside in the stash to be taken (and copied) later.
 * Chunks of 8 and 4 segments, 2 and 4 ranks, one round. */
static void test_allreduce_shm_arrival_order(void)
{
    static const struct {
        transport t;
        int p;
    } cases[] = {{T_IPC, 2}, {T_TCP, 4}, {T_INPROC, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int p = cases[i].p;
        size_t count = (size_t)p * 8 * PT_COMM_SEGMENT_FLOATS / (p == 2 ? 1 : 2) + 3;
        world w;
        REQUIRE(world_open(&w, p, cases[i].t, TIMEOUT_MS) == 0);
        ar_job job;
        memset(&job, 0, sizeof job);
        job.count = count;
        job.op = PT_COMM_SUM;
        job.rounds = 1;
        for (int r = 0; r < p; r++)
            job.data[r] = malloc(count * sizeof(float));
        world_run(&w, ar_rank, &job);
        char what[96];
        snprintf(what, sizeof what, "%s p=%d count=%zu", tname[cases[i].t], p, count);
        int ok = 1;
        for (int r = 0; r < p; r++)
            ok &= job.rc[r] == 0;
        CHECK_MSG(ok, "%s: %s", what, job.msg[0]);
        const float *res[MAX_P];
        for (int r = 0; r < p; r++)
            res[r] = job.data[r];
        if (ok)
            CHECK_MSG(ar_check(&job, p, what, 0, res), "%s", what);
        for (int r = 0; r < p; r++) {
            pt_comm_stats st;
            pt_comm_stats_get(w.comm[r], &st);
            CHECK_MSG(st.shm_peers_out == 1 && st.shm_peers_in == 1, "%s rank %d: rings %llu/%llu",
                      what, r, (unsigned long long)st.shm_peers_out,
                      (unsigned long long)st.shm_peers_in);
            CHECK_MSG(st.stash_peak_bytes == 0 && st.early_arrivals == 0,
                      "%s rank %d: %zu bytes stashed (%llu early arrivals)", what, r,
                      st.stash_peak_bytes, (unsigned long long)st.early_arrivals);
            free(job.data[r]);
        }
        world_close(&w);
    }
}

/* Members that disagree on the count: nobody succeeds, and the one that sees
 * the wrong size says so. */
static void mismatch_ar_rank(world *w, int rank, void *arg)
{
    ar_job *job = arg;
    int ranks[2] = {0, 1};
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, 2);
    float buf[11] = {0};
    pt_error err = {0};
    job->rc[rank] =
        pt_comm_allreduce(w->comm[rank], &g, buf, rank == 0 ? 10 : 11, PT_COMM_SUM, &err);
    memcpy(job->msg[rank], err.msg, sizeof job->msg[rank]);
}

static void test_allreduce_count_mismatch(void)
{
    world w;
    REQUIRE(world_open(&w, 2, T_INPROC, SHORT_MS) == 0);
    ar_job job;
    memset(&job, 0, sizeof job);
    world_run(&w, mismatch_ar_rank, &job);
    CHECK(job.rc[0] < 0 && job.rc[1] < 0);
    CHECK(job.rc[0] == PT_EINVAL || job.rc[1] == PT_EINVAL);
    CHECK_STR_CONTAINS(job.rc[0] == PT_EINVAL ? job.msg[0] : job.msg[1], "same count");
    world_close(&w);

    /* A rank outside the group is refused before any traffic. */
    REQUIRE(world_open(&w, 2, T_INPROC, SHORT_MS) == 0);
    pt_comm_group g;
    int only1 = 1;
    pt_comm_group_init(&g, &only1, 1);
    float v = 1;
    pt_error err = {0};
    CHECK(pt_comm_allreduce(w.comm[0], &g, &v, 1, PT_COMM_SUM, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "not in the group");
    world_close(&w);
}

/* ---- asynchronous collective ------------------------------------------------- */

typedef struct async_job {
    pt_collective *coll[MAX_P];
    size_t count;
    float *data[MAX_P];
    int rc_start[MAX_P], rc_second[MAX_P], rc_wait[MAX_P], p2p_ok[MAX_P], overlap_seen[MAX_P];
} async_job;

/* Each rank starts an all-reduce on its collective (second communicator) and,
 * while it runs, exchanges point-to-point messages on the first one: the
 * compute/communication overlap of Pipe-SGD. */
static void async_rank(world *w, int rank, void *arg)
{
    async_job *job = arg;
    int ranks[MAX_P];
    for (int r = 0; r < w->p; r++)
        ranks[r] = r;
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, w->p);
    for (int round = 0; round < 2; round++) {
        for (size_t j = 0; j < job->count; j++)
            job->data[rank][j] = (float)((int)(j % 97) + rank * 3 + round);
        job->rc_start[rank] |= pt_collective_start(job->coll[rank], &g, job->data[rank], job->count,
                                                   PT_COMM_SUM, NULL);
        job->rc_second[rank] = pt_collective_start(job->coll[rank], &g, job->data[rank], job->count,
                                                   PT_COMM_SUM, NULL);
        /* Ring of p2p messages on the main communicator meanwhile. */
        int right = (rank + 1) % w->p, left = (rank + w->p - 1) % w->p;
        float v = (float)(rank + round), got = -1;
        int ok = pt_comm_send(w->comm[rank], right, pt_comm_tag(PT_COMM_ACT, (uint32_t)round, 0),
                              &v, 1, NULL) == 0;
        ok &= pt_comm_recv(w->comm[rank], left, pt_comm_tag(PT_COMM_ACT, (uint32_t)round, 0), &got,
                           1, NULL) == 0;
        ok &= got == (float)(left + round);
        job->p2p_ok[rank] = round == 0 ? ok : job->p2p_ok[rank] & ok;
        job->rc_wait[rank] |= pt_collective_wait(job->coll[rank], TIMEOUT_MS, NULL);
        if (pt_collective_test(job->coll[rank]) != 1)
            job->rc_wait[rank] |= -200;
        if (round == 0) /* check the first round before the second overwrites it */
            for (size_t j = 0; j < job->count; j++) {
                float want = 0;
                for (int r = 0; r < w->p; r++)
                    want += (float)((int)(j % 97) + r * 3);
                if (job->data[rank][j] != want) {
                    job->rc_wait[rank] |= -100;
                    break;
                }
            }
    }
}

static void test_async_collective(void)
{
    for (int t = 0; t < T_COUNT; t += 1) {
        int p = 3;
        world w, w2;
        REQUIRE(world_open(&w, p, (transport)t, TIMEOUT_MS) == 0);
        REQUIRE(world_open(&w2, p, (transport)t, TIMEOUT_MS) == 0);
        async_job job;
        memset(&job, 0, sizeof job);
        job.count = 20011;
        for (int r = 0; r < p; r++) {
            job.data[r] = malloc(job.count * sizeof(float));
            pt_error err = {0};
            CHECK(pt_collective_create(&w2.comm[r], &job.coll[r], &err) == 0);
            CHECK(w2.comm[r] == NULL);
        }
        world_run(&w, async_rank, &job);
        for (int r = 0; r < p; r++) {
            CHECK_MSG(job.rc_start[r] == 0, "%s rank %d", tname[t], r);
            CHECK_MSG(job.rc_second[r] == PT_ESTATE, "%s rank %d", tname[t], r);
            CHECK_MSG(job.rc_wait[r] == 0, "%s rank %d", tname[t], r);
            CHECK_MSG(job.p2p_ok[r], "%s rank %d", tname[t], r);
            for (size_t j = 0; j < job.count; j++) {
                float want = 0;
                for (int q = 0; q < p; q++)
                    want += (float)((int)(j % 97) + q * 3 + 1);
                if (job.data[r][j] != want) {
                    CHECK_MSG(0, "%s rank %d element %zu", tname[t], r, j);
                    break;
                }
            }
            pt_comm_stats st;
            pt_collective_stats(job.coll[r], &st);
            CHECK(st.bytes_sent > 0 && st.bytes_recv > 0);
            pt_collective_destroy(&job.coll[r]);
            CHECK(job.coll[r] == NULL);
            free(job.data[r]);
        }
        world_close(&w2);
        world_close(&w);
    }
}

/* The wait of a collective whose peers never join is bounded and reports it. */
static void test_async_collective_timeout(void)
{
    world w;
    REQUIRE(world_open(&w, 2, T_INPROC, SHORT_MS) == 0);
    pt_collective *coll = NULL;
    REQUIRE(pt_collective_create(&w.comm[0], &coll, NULL) == 0);
    int ranks[2] = {0, 1};
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, 2);
    float buf[4] = {1, 2, 3, 4};
    CHECK(pt_collective_start(coll, &g, buf, 4, PT_COMM_SUM, NULL) == 0);
    CHECK(g.next_id == 1);
    pt_error err = {0};
    CHECK(pt_collective_wait(coll, 1, &err) == PT_ETIMEOUT);          /* still running */
    CHECK(pt_collective_wait(coll, TIMEOUT_MS, &err) == PT_ETIMEOUT); /* its own timeout */
    CHECK_STR_CONTAINS(err.msg, "from rank 1");
    CHECK(pt_collective_wait(coll, 10, &err) == 0); /* nothing in flight any more */
    pt_collective_destroy(&coll);
    world_close(&w);
}

PT_TEST_MAIN({"p2p_out_of_order", test_p2p_out_of_order},
             {"p2p_fifo_and_self", test_p2p_fifo_and_self}, {"recv_timeout", test_recv_timeout},
             {"count_mismatch", test_count_mismatch}, {"zero_copy_send", test_zero_copy_send},
             {"send_buffers_reused", test_send_buffers_reused},
             {"open_known_endpoints", test_open_known_endpoints},
             {"interrupt_blocked_recv", test_interrupt_blocked_recv},
             {"bad_frames_dropped", test_bad_frames_dropped}, {"stash_bound", test_stash_bound},
             {"shm_large_both_ways", test_shm_large_both_ways},
             {"shm_sweeps_stale", test_shm_sweeps_stale},
             {"shm_ring_rewinds", test_shm_ring_rewinds},
             {"shm_ring_rewind_race", test_shm_ring_rewind_race}, {"bad_config", test_bad_config},
             {"allreduce_sizes", test_allreduce_sizes},
             {"allreduce_segments_average_rounds", test_allreduce_segments_average_rounds},
             {"allreduce_count_mismatch", test_allreduce_count_mismatch},
             {"allreduce_shm_arrival_order", test_allreduce_shm_arrival_order},
             {"allreduce_direct", test_allreduce_direct},
             {"async_collective", test_async_collective},
             {"async_collective_timeout", test_async_collective_timeout})
