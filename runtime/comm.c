/* Point-to-point transport over ZeroMQ: one PULL socket bound per rank, one
 * PUSH socket per connected peer, a two-frame message (header, payload) and a
 * stash of early arrivals keyed by (source, tag). See runtime/comm.h. */
#include "runtime/comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm_internal.h"

/* Messages queued per socket before a send blocks. Above the 2^15 segments
 * one ring step may send before it receives, so an all-reduce never waits
 * on its own queue; a dead peer still stops a sender within the timeout. */
#define HWM_MSGS         65536
#define ZC_POLL_NS       20000L
#define STASH_GROW_SLOTS 16

typedef struct stash_slot {
    int src;
    uint64_t tag;
    uint64_t order; /* arrival number: FIFO among equal (src, tag) */
    zmq_msg_t payload;
} stash_slot;

struct pt_comm {
    int rank, size, timeout_ms;
    void *ctx;
    int own_ctx;
    void *pull;
    void **push;        /* [size]; NULL where not connected */
    uint64_t *send_seq; /* [size] */
    int connected;
    char endpoint[PT_COMM_ENDPOINT_MAX];
    stash_slot **slots; /* [0, used) hold messages, [used, cap) are free */
    int slots_used, slots_cap;
    uint64_t arrivals;
    pt_comm_stats stats;
    pt_comm_shared *shared;   /* zero-copy counter and send-buffer pool */
    atomic_int interrupted;   /* pt_comm_interrupt was called: close without lingering */
    pt_comm_socket_hook hook; /* pt_comm_create_hooked; NULL none */
    void *hook_user;
};

int64_t pt_comm_internal_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *pt_comm_tag_str(uint64_t tag, char *buf, size_t size)
{
    static const char *const names[] = {"?", "act", "grad", "allreduce", "user"};
    unsigned kind = (unsigned)pt_comm_tag_kind(tag);
    if (kind >= 1 && kind <= 4)
        snprintf(buf, size, "%s/mb%u/part%u", names[kind], pt_comm_tag_microbatch(tag),
                 pt_comm_tag_part(tag));
    else
        snprintf(buf, size, "kind%u/mb%u/part%u", kind, pt_comm_tag_microbatch(tag),
                 pt_comm_tag_part(tag));
    return buf;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int valid_endpoint(const char *ep)
{
    if (!ep || strlen(ep) >= PT_COMM_ENDPOINT_MAX)
        return 0;
    return !strncmp(ep, "tcp://", 6) || !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9);
}

static int set_int_opt(void *sock, int opt, int value)
{
    return zmq_setsockopt(sock, opt, &value, sizeof value);
}

int pt_comm_create(const pt_comm_config *cfg, pt_comm **out, pt_error *err)
{
    return pt_comm_create_hooked(cfg, NULL, NULL, out, err);
}

int pt_comm_create_hooked(const pt_comm_config *cfg, pt_comm_socket_hook hook, void *hook_user,
                          pt_comm **out, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!cfg || !out)
        return pt_error_set(err, PT_EINVAL, "comm: config and out must not be NULL");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return pt_error_set(err, PT_EUNSUPP,
                        "comm: the wire format is little-endian floats; "
                        "this host is big-endian");
#endif
    if (cfg->size < 1 || cfg->size > PT_COMM_MAX_RANKS)
        return pt_error_set(err, PT_EINVAL, "comm: size %d is out of range [1, %d]", cfg->size,
                            PT_COMM_MAX_RANKS);
    if (cfg->rank < 0 || cfg->rank >= cfg->size)
        return pt_error_set(err, PT_EINVAL, "comm: rank %d is out of range [0, %d)", cfg->rank,
                            cfg->size);
    if (cfg->timeout_ms <= 0)
        return pt_error_set(err, PT_EINVAL, "comm: timeout_ms %d must be > 0", cfg->timeout_ms);
    if (!valid_endpoint(cfg->bind_endpoint))
        return pt_error_set(err, PT_EINVAL,
                            "comm: bind endpoint \"%s\" is not tcp://, ipc:// or inproc://",
                            cfg->bind_endpoint ? cfg->bind_endpoint : "(null)");

    int rc = PT_ENOMEM;
    pt_comm *c = calloc(1, sizeof *c);
    if (!c)
        goto fail_alloc;
    c->rank = cfg->rank;
    c->size = cfg->size;
    c->timeout_ms = cfg->timeout_ms;
    c->push = calloc((size_t)cfg->size, sizeof *c->push);
    c->send_seq = calloc((size_t)cfg->size, sizeof *c->send_seq);
    c->shared = pt_comm_shared_new();
    if (!c->push || !c->send_seq || !c->shared)
        goto fail_arrays;

    c->ctx = cfg->zmq_context;
    if (!c->ctx) {
        c->ctx = zmq_ctx_new();
        c->own_ctx = 1;
        if (!c->ctx) {
            rc = pt_error_set(err, PT_EIO, "comm: zmq_ctx_new: %s", zmq_strerror(errno));
            goto fail_arrays;
        }
    }
    c->pull = zmq_socket(c->ctx, ZMQ_PULL);
    if (!c->pull) {
        rc = pt_error_set(err, PT_EIO, "comm: zmq_socket: %s", zmq_strerror(errno));
        goto fail_socket;
    }
    set_int_opt(c->pull, ZMQ_RCVHWM, HWM_MSGS);
    set_int_opt(c->pull, ZMQ_LINGER, 0);
    c->hook = hook;
    c->hook_user = hook_user;
    if (hook && (rc = hook(hook_user, c->pull, -1, err)) < 0)
        goto fail_bind;
    if (zmq_bind(c->pull, cfg->bind_endpoint) != 0) {
        rc = pt_error_set(err, PT_EIO, "comm: rank %d: bind %s: %s", cfg->rank, cfg->bind_endpoint,
                          zmq_strerror(errno));
        goto fail_bind;
    }
    size_t len = sizeof c->endpoint;
    if (zmq_getsockopt(c->pull, ZMQ_LAST_ENDPOINT, c->endpoint, &len) != 0) {
        rc = pt_error_set(err, PT_EIO, "comm: ZMQ_LAST_ENDPOINT: %s", zmq_strerror(errno));
        goto fail_bind;
    }
    c->endpoint[sizeof c->endpoint - 1] = '\0';
    *out = c;
    return 0;

fail_bind:
    zmq_close(c->pull);
fail_socket:
    if (c->own_ctx)
        zmq_ctx_term(c->ctx);
fail_arrays:
    pt_comm_shared_close(c->shared);
    free(c->push);
    free(c->send_seq);
    free(c);
fail_alloc:
    if (rc == PT_ENOMEM)
        pt_error_set(err, rc, "comm: out of memory");
    return rc;
}

const char *pt_comm_endpoint(const pt_comm *self)
{
    return self ? self->endpoint : "";
}

int pt_comm_connect(pt_comm *self, const char *const *endpoints, pt_error *err)
{
    if (!self || !endpoints)
        return pt_error_set(err, PT_EINVAL, "comm: connect: NULL argument");
    if (self->connected)
        return pt_error_set(err, PT_ESTATE, "comm: rank %d is already connected", self->rank);
    for (int r = 0; r < self->size; r++)
        if (r != self->rank && endpoints[r] && !valid_endpoint(endpoints[r]))
            return pt_error_set(err, PT_EINVAL,
                                "comm: endpoints[%d] \"%s\" is not tcp://, ipc:// or inproc://", r,
                                endpoints[r]);
    for (int r = 0; r < self->size; r++) {
        if (r == self->rank || !endpoints[r])
            continue;
        void *s = zmq_socket(self->ctx, ZMQ_PUSH);
        if (!s)
            return pt_error_set(err, PT_EIO, "comm: zmq_socket: %s", zmq_strerror(errno));
        set_int_opt(s, ZMQ_SNDHWM, HWM_MSGS);
        set_int_opt(s, ZMQ_SNDTIMEO, self->timeout_ms);
        set_int_opt(s, ZMQ_LINGER, self->timeout_ms);
        int hrc = self->hook ? self->hook(self->hook_user, s, r, err) : 0;
        if (hrc < 0) {
            zmq_close(s);
            return hrc;
        }
        if (zmq_connect(s, endpoints[r]) != 0) {
            int e = errno;
            zmq_close(s);
            return pt_error_set(err, PT_EIO, "comm: rank %d: connect to rank %d at %s: %s",
                                self->rank, r, endpoints[r], zmq_strerror(e));
        }
        self->push[r] = s;
    }
    self->connected = 1;
    return 0;
}

int pt_comm_open(const pt_comm_config *cfg, const char *const *endpoints, pt_comm **out,
                 pt_error *err)
{
    if (out)
        *out = NULL;
    if (!cfg || !endpoints || !out)
        return pt_error_set(err, PT_EINVAL, "comm: open: NULL argument");
    if (cfg->rank < 0 || cfg->rank >= cfg->size || cfg->size > PT_COMM_MAX_RANKS)
        return pt_error_set(err, PT_EINVAL, "comm: rank %d is out of range [0, %d)", cfg->rank,
                            cfg->size);
    pt_comm_config c = *cfg;
    c.bind_endpoint = endpoints[cfg->rank];
    pt_comm *comm;
    int rc = pt_comm_create(&c, &comm, err);
    if (rc < 0)
        return rc;
    if ((rc = pt_comm_connect(comm, endpoints, err)) < 0) {
        pt_comm_destroy(&comm);
        return rc;
    }
    *out = comm;
    return 0;
}

int pt_comm_interrupt(pt_comm *self)
{
    if (!self)
        return PT_EINVAL;
    atomic_store(&self->interrupted, 1);
    return zmq_ctx_shutdown(self->ctx) == 0 ? 0 : PT_EIO;
}

void pt_comm_destroy(pt_comm **self_p)
{
    if (!self_p || !*self_p)
        return;
    pt_comm *c = *self_p;
    for (int i = 0; i < c->slots_cap; i++) {
        if (i < c->slots_used)
            zmq_msg_close(&c->slots[i]->payload);
        free(c->slots[i]);
    }
    free(c->slots);
    int linger0 = 0;
    for (int r = 0; r < c->size; r++)
        if (c->push[r]) {
            /* After an interrupt nobody waits for queued messages. */
            if (atomic_load(&c->interrupted))
                zmq_setsockopt(c->push[r], ZMQ_LINGER, &linger0, sizeof linger0);
            zmq_close(c->push[r]);
        }
    zmq_close(c->pull);
    /* ZeroMQ leaves the socket file of a bound ipc endpoint behind. */
    if (!strncmp(c->endpoint, "ipc://", 6) && c->endpoint[6] != '@')
        unlink(c->endpoint + 6);
    if (c->own_ctx)
        zmq_ctx_term(c->ctx); /* releases every message this comm sent */
    pt_comm_shared_close(c->shared);
    free(c->push);
    free(c->send_seq);
    free(c);
    *self_p = NULL;
}

int pt_comm_rank(const pt_comm *self)
{
    return self ? self->rank : -1;
}
int pt_comm_size(const pt_comm *self)
{
    return self ? self->size : 0;
}
int pt_comm_timeout_ms(const pt_comm *self)
{
    return self ? self->timeout_ms : 0;
}

int pt_comm_set_timeout(pt_comm *self, int timeout_ms)
{
    if (!self || timeout_ms <= 0)
        return PT_EINVAL;
    self->timeout_ms = timeout_ms;
    for (int r = 0; r < self->size; r++)
        if (self->push[r]) {
            set_int_opt(self->push[r], ZMQ_SNDTIMEO, timeout_ms);
            set_int_opt(self->push[r], ZMQ_LINGER, timeout_ms);
        }
    return 0;
}

void pt_comm_stats_get(const pt_comm *self, pt_comm_stats *out)
{
    if (!self || !out)
        return;
    *out = self->stats;
    pt_comm_shared_pool_bytes(self->shared, &out->pool_bytes, &out->pool_peak_bytes);
}

/* ---- stash ---------------------------------------------------------------- */

/* Moves *payload into a free slot (taking ownership). */
static int stash_put(pt_comm *c, int src, uint64_t tag, zmq_msg_t *payload)
{
    if (c->slots_used == c->slots_cap) {
        int cap = c->slots_cap + STASH_GROW_SLOTS;
        stash_slot **slots = realloc(c->slots, (size_t)cap * sizeof *slots);
        if (!slots)
            return PT_ENOMEM;
        c->slots = slots;
        for (int i = c->slots_cap; i < cap; i++) {
            slots[i] = calloc(1, sizeof *slots[i]);
            if (!slots[i]) {
                c->slots_cap = i;
                return PT_ENOMEM;
            }
        }
        c->slots_cap = cap;
    }
    stash_slot *s = c->slots[c->slots_used++];
    s->src = src;
    s->tag = tag;
    s->order = c->arrivals++;
    zmq_msg_init(&s->payload);
    zmq_msg_move(&s->payload, payload);
    c->stats.stash_bytes += zmq_msg_size(&s->payload);
    if (c->stats.stash_bytes > c->stats.stash_peak_bytes)
        c->stats.stash_peak_bytes = c->stats.stash_bytes;
    return 0;
}

/* Takes the oldest stashed (src, tag) message into *payload: 1 found, 0 not. */
static int stash_take(pt_comm *c, int src, uint64_t tag, zmq_msg_t *payload)
{
    int best = -1;
    for (int i = 0; i < c->slots_used; i++) {
        stash_slot *s = c->slots[i];
        if (s->src == src && s->tag == tag && (best < 0 || s->order < c->slots[best]->order))
            best = i;
    }
    if (best < 0)
        return 0;
    stash_slot *s = c->slots[best];
    c->stats.stash_bytes -= zmq_msg_size(&s->payload);
    zmq_msg_init(payload);
    zmq_msg_move(payload, &s->payload);
    zmq_msg_close(&s->payload);
    /* Keep [0, used) dense: the freed slot swaps with the last used one. */
    c->slots[best] = c->slots[c->slots_used - 1];
    c->slots[c->slots_used - 1] = s;
    c->slots_used--;
    return 1;
}

/* ---- receiving ------------------------------------------------------------ */

static void drain_parts(void *sock)
{
    int more = 1;
    size_t len = sizeof more;
    /* A multipart message arrives whole, so this ends after its last part. */
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int n = zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        if (n < 0)
            break;
    }
}

/* Reads one message from the PULL socket without blocking.
 * 1: a valid message (src, tag, *payload initialised; caller owns it);
 * 0: nothing queued; 2: a malformed message was dropped; <0: socket error. */
static int pull_one(pt_comm *c, int *src, uint64_t *tag, zmq_msg_t *payload)
{
    zmq_msg_t hdr;
    zmq_msg_init(&hdr);
    int n = zmq_msg_recv(&hdr, c->pull, ZMQ_DONTWAIT);
    if (n < 0) {
        int e = errno;
        zmq_msg_close(&hdr);
        if (e == EAGAIN || e == EINTR)
            return 0;
        errno = e;
        return e == ETERM ? PT_ESTATE : PT_EIO;
    }
    int ok = n == PT_COMM_HEADER_BYTES && zmq_msg_more(&hdr);
    const unsigned char *h = zmq_msg_data(&hdr);
    uint32_t from = 0;
    uint64_t count = 0;
    if (ok) {
        from = get_u32(h + 4);
        *tag = get_u64(h + 8);
        count = get_u64(h + 16);
        ok = get_u32(h) == PT_COMM_MAGIC && from < (uint32_t)c->size &&
             count <= SIZE_MAX / sizeof(float);
    }
    int more = zmq_msg_more(&hdr);
    zmq_msg_close(&hdr);
    if (!ok) {
        if (more)
            drain_parts(c->pull);
        c->stats.bad_msgs++;
        return 2;
    }
    zmq_msg_init(payload);
    n = zmq_msg_recv(payload, c->pull, ZMQ_DONTWAIT);
    if (n < 0 || zmq_msg_more(payload) || zmq_msg_size(payload) != count * sizeof(float)) {
        if (n >= 0 && zmq_msg_more(payload))
            drain_parts(c->pull);
        zmq_msg_close(payload);
        c->stats.bad_msgs++;
        return 2;
    }
    *src = (int)from;
    c->stats.msgs_recv++;
    c->stats.bytes_recv += PT_COMM_HEADER_BYTES + zmq_msg_size(payload);
    return 1;
}

static int interrupted(const pt_comm *c, const char *what, pt_error *err)
{
    return pt_error_set(err, PT_ESTATE, "comm: rank %d: %s interrupted (context shut down)",
                        c->rank, what);
}

int pt_comm_internal_recv_msg(pt_comm *self, int src, uint64_t tag, zmq_msg_t *payload,
                              pt_error *err)
{
    char tb[64];
    if (src < 0 || src >= self->size)
        return pt_error_set(err, PT_EINVAL, "comm: recv: source rank %d is out of range [0, %d)",
                            src, self->size);
    if (stash_take(self, src, tag, payload))
        return 0;
    int64_t deadline = pt_comm_internal_now_ms() + self->timeout_ms;
    for (;;) {
        int from;
        uint64_t got;
        zmq_msg_t m;
        int rc = pull_one(self, &from, &got, &m);
        if (rc == PT_ESTATE)
            return interrupted(self, "recv", err);
        if (rc < 0)
            return pt_error_set(err, PT_EIO, "comm: rank %d: recv: %s", self->rank,
                                zmq_strerror(errno));
        if (rc == 1) {
            if (from == src && got == tag) {
                zmq_msg_init(payload);
                zmq_msg_move(payload, &m);
                zmq_msg_close(&m);
                return 0;
            }
            self->stats.early_arrivals++;
            if (stash_put(self, from, got, &m) < 0) {
                zmq_msg_close(&m);
                return pt_error_set(err, PT_ENOMEM, "comm: rank %d: stash: out of memory",
                                    self->rank);
            }
            zmq_msg_close(&m);
        }
        int64_t left = deadline - pt_comm_internal_now_ms();
        if (rc != 0 && left > 0)
            continue; /* more may be queued */
        if (left <= 0)
            return pt_error_set(
                err, PT_ETIMEOUT, "comm: rank %d: no message %s from rank %d within %d ms",
                self->rank, pt_comm_tag_str(tag, tb, sizeof tb), src, self->timeout_ms);
        zmq_pollitem_t item = {.socket = self->pull, .events = ZMQ_POLLIN};
        if (zmq_poll(&item, 1, (long)left) < 0 && errno != EINTR)
            return errno == ETERM ? interrupted(self, "recv", err)
                                  : pt_error_set(err, PT_EIO, "comm: rank %d: poll: %s", self->rank,
                                                 zmq_strerror(errno));
    }
}

int pt_comm_recv(pt_comm *self, int src, uint64_t tag, float *buf, size_t count, pt_error *err)
{
    char tb[64];
    if (!self || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "comm: recv: NULL argument");
    zmq_msg_t m;
    int rc = pt_comm_internal_recv_msg(self, src, tag, &m, err);
    if (rc < 0)
        return rc;
    size_t got = zmq_msg_size(&m) / sizeof(float);
    if (got != count) {
        zmq_msg_close(&m);
        return pt_error_set(err, PT_EINVAL,
                            "comm: rank %d: message %s from rank %d has %zu floats, the "
                            "receiver expects %zu",
                            self->rank, pt_comm_tag_str(tag, tb, sizeof tb), src, got, count);
    }
    if (count)
        memcpy(buf, zmq_msg_data(&m), count * sizeof(float));
    zmq_msg_close(&m);
    return 0;
}

/* ---- sending -------------------------------------------------------------- */

static int check_dst(pt_comm *c, int dst, pt_error *err)
{
    if (dst < 0 || dst >= c->size)
        return pt_error_set(err, PT_EINVAL,
                            "comm: send: destination rank %d is out of range "
                            "[0, %d)",
                            dst, c->size);
    if (dst != c->rank && !c->push[dst])
        return pt_error_set(err, PT_EINVAL, "comm: rank %d is not connected to rank %d", c->rank,
                            dst);
    return 0;
}

int pt_comm_internal_send_msg(pt_comm *self, int dst, uint64_t tag, zmq_msg_t *payload,
                              pt_error *err)
{
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    size_t bytes = zmq_msg_size(payload);
    if (bytes % sizeof(float))
        return pt_error_set(err, PT_EINVAL, "comm: send: %zu bytes is not whole floats", bytes);
    if (dst == self->rank) {
        /* To oneself: straight into the stash, no socket. */
        rc = stash_put(self, dst, tag, payload);
        if (rc < 0)
            return pt_error_set(err, rc, "comm: rank %d: stash: out of memory", self->rank);
        /* stash_put left *payload empty; the caller's close is harmless. */
        self->send_seq[dst]++;
        return 0;
    } else {
        unsigned char h[PT_COMM_HEADER_BYTES];
        put_u32(h, PT_COMM_MAGIC);
        put_u32(h + 4, (uint32_t)self->rank);
        put_u64(h + 8, tag);
        put_u64(h + 16, (uint64_t)(bytes / sizeof(float)));
        put_u64(h + 24, self->send_seq[dst]);
        char tb[64];
        if (zmq_send(self->push[dst], h, sizeof h, ZMQ_SNDMORE) < 0) {
            int e = errno;
            if (e == ETERM)
                return interrupted(self, "send", err);
            return pt_error_set(
                err, e == EAGAIN ? PT_ETIMEOUT : PT_EIO, "comm: rank %d: send %s to rank %d: %s",
                self->rank, pt_comm_tag_str(tag, tb, sizeof tb), dst,
                e == EAGAIN ? "peer queue full for the whole timeout" : zmq_strerror(e));
        }
        /* The first part was accepted, so ZeroMQ accepts the rest of the message. */
        if (zmq_msg_send(payload, self->push[dst], 0) < 0)
            return pt_error_set(err, PT_EIO, "comm: rank %d: send %s to rank %d: %s", self->rank,
                                pt_comm_tag_str(tag, tb, sizeof tb), dst, zmq_strerror(errno));
        /* zmq_msg_send leaves *payload empty; closing it is harmless. */
    }
    self->send_seq[dst]++;
    self->stats.msgs_sent++;
    self->stats.bytes_sent += PT_COMM_HEADER_BYTES + bytes;
    return 0;
}

int pt_comm_send(pt_comm *self, int dst, uint64_t tag, const float *buf, size_t count,
                 pt_error *err)
{
    if (!self || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "comm: send: NULL argument");
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    if (count > SIZE_MAX / sizeof(float))
        return pt_error_set(err, PT_EINVAL, "comm: send: count %zu is too large", count);
    zmq_msg_t m;
    if (pt_comm_shared_copy_msg(self->shared, &m, buf, count * sizeof(float)) != 0)
        return pt_error_set(err, PT_ENOMEM, "comm: send: no memory for %zu floats", count);
    rc = pt_comm_internal_send_msg(self, dst, tag, &m, err);
    zmq_msg_close(&m);
    return rc;
}

void pt_comm_zc_init(pt_comm_zc *zc)
{
    if (zc)
        atomic_init(&zc->pending, 0);
}

/* Called by ZeroMQ (from any thread) when it no longer needs the buffer. */
static void zc_release(void *data, void *hint)
{
    (void)data;
    atomic_fetch_sub(&((pt_comm_zc *)hint)->pending, 1);
}

/* Zero-copy send whose release calls release(NULL, hint) exactly once, also
 * when the send fails, so counters the caller raised come back down. */
static int send_zc_with(pt_comm *self, int dst, uint64_t tag, const float *buf, size_t count,
                        zmq_free_fn *release, void *hint, pt_error *err)
{
    zmq_msg_t m;
    /* ZeroMQ never writes through the pointer; the cast only fits its API. */
    if (zmq_msg_init_data(&m, (void *)(uintptr_t)buf, count * sizeof(float), release, hint) != 0) {
        release(NULL, hint);
        return pt_error_set(err, PT_ENOMEM, "comm: send_zc: zmq_msg_init_data failed");
    }
    int rc = pt_comm_internal_send_msg(self, dst, tag, &m, err);
    zmq_msg_close(&m); /* on failure this releases buf and balances the counters */
    return rc;
}

int pt_comm_send_zc(pt_comm *self, int dst, uint64_t tag, const float *buf, size_t count,
                    pt_comm_zc *zc, pt_error *err)
{
    if (!self || !zc || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "comm: send_zc: NULL argument");
    if (dst == self->rank || count == 0)
        return pt_comm_send(self, dst, tag, buf, count, err);
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    if (count > SIZE_MAX / sizeof(float))
        return pt_error_set(err, PT_EINVAL, "comm: send: count %zu is too large", count);
    atomic_fetch_add(&zc->pending, 1);
    return send_zc_with(self, dst, tag, buf, count, zc_release, zc, err);
}

int pt_comm_internal_send_ar_zc(pt_comm *self, int dst, uint64_t tag, const float *buf,
                                size_t count, pt_error *err)
{
    if (dst == self->rank || count == 0)
        return pt_comm_send(self, dst, tag, buf, count, err);
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    pt_comm_shared_hold(self->shared);
    atomic_fetch_add(&pt_comm_shared_zc(self->shared)->pending, 1);
    return send_zc_with(self, dst, tag, buf, count, pt_comm_shared_zc_release, self->shared, err);
}

int pt_comm_internal_wait_ar_zc(pt_comm *self, int timeout_ms)
{
    return pt_comm_zc_wait(pt_comm_shared_zc(self->shared), timeout_ms);
}

int pt_comm_zc_wait(pt_comm_zc *zc, int timeout_ms)
{
    if (!zc)
        return PT_EINVAL;
    int64_t deadline = pt_comm_internal_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (atomic_load(&zc->pending) <= 0)
            return 0;
        if (pt_comm_internal_now_ms() >= deadline)
            return PT_ETIMEOUT;
        struct timespec ts = {0, ZC_POLL_NS};
        nanosleep(&ts, NULL);
    }
}
