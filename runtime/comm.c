/* Point-to-point transport: one PULL socket bound per rank, one PUSH socket
 * per connected peer, a two-frame message (header, payload), shared-memory
 * rings (comm_shm.c) to peers on this host, the checks every arriving frame
 * passes, and a bounded stash of early arrivals keyed by (source, tag). See
 * runtime/comm.h. */
#include "protocol/clock.h"
#include "runtime/comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm_internal.h"
#include "runtime/zmq_watch.h"

/* Messages queued per socket before a send blocks. Above the 2^15 segments
 * one ring step may send before it receives, so an all-reduce never waits
 * on its own queue; a dead peer still stops a sender within the timeout. */
#define HWM_MSGS         65536
#define RCV_HWM_MSGS     256 /* per connection: what a flood can park inside ZeroMQ */
#define ZC_POLL_NS       20000L
#define STASH_GROW_SLOTS 16
/* Spinning before a sleep on a ring (see spin_until): the budget's bounds,
 * how often the loop reads the clock, and how often the PULL socket is read
 * while a ring delivers. PT_COMM_SPIN_US in the environment sets the
 * largest budget (0: never spin). */
#define SPIN_MAX_NS        50000
#define SPIN_MIN_NS        2000
#define IDLE_CHECK_NS      100000000
#define SPIN_CLOCK_EVERY   32
#define ZMQ_CHECK_NS       1000000
#define US_NS              1000
#define SEQ_LINES_MAX      4          /* lines about dropped sequence numbers, per communicator */
#define RESEND_SEQ         UINT64_MAX /* the sequence number of a request to send again */
#define RECV_WINDOW        4096       /* frames a resending source may be ahead of its first gap */
#define RESEND_BACKOFF_MAX 2          /* requests for one frame: at most every 4 probe periods */

/* A message of several ring records, taken piece by piece. */
typedef struct ring_partial {
    int active, keep; /* keep 0: dropped, its pieces are skipped */
    struct wire_hdr_s {
        uint32_t magic, src;
        uint64_t tag, count, seq, token, gen;
    } h;
    size_t total, done;
    zmq_msg_t m;
} ring_partial;

/* A PUSH socket's way to its peer: where it connects, and until a handshake
 * succeeded, the watch on it and what the failed ones said. */
typedef struct peer_link {
    char *endpoint;      /* NULL: never talk to this rank */
    pt_zmq_watch *watch; /* NULL once the handshake is confirmed (or none asked) */
    int shaken;          /* a handshake succeeded */
    int failed;          /* handshakes that failed (each socket replaced) */
    int64_t retry_ns;    /* a failed socket's replacement connects from then on; 0 none due */
    int last_event;      /* the last failure's ZMQ_EVENT_* and value */
    int32_t last_value;
} peer_link;

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
    peer_link *link;    /* [size] */
    uint64_t *send_seq; /* [size] */
    int connected;
    char endpoint[PT_COMM_ENDPOINT_MAX];
    stash_slot **slots; /* [0, used) hold messages, [used, cap) are free */
    int slots_used, slots_cap;
    uint64_t arrivals;
    pt_comm_stats stats;
    pt_comm_shared *shared; /* zero-copy counter and send-buffer pool */
    atomic_int interrupted; /* pt_comm_interrupt was called: close without lingering */
    uint64_t token, gen;
    size_t stash_limit, max_msg, ring_bytes;
    int shm_on;
    uint64_t *recv_seq;        /* [size] next sequence number expected from each source */
    unsigned char *local;      /* [size] 1: the peer's endpoint is on this host */
    unsigned char *shm_failed; /* [size] 1: making its ring failed, ZeroMQ it is */
    pt_shm_ring **out_ring;    /* [size] ring to each peer, NULL: none (yet) */
    pt_shm_ring **in_ring;     /* [size] ring from each peer */
    int *in_list, in_count;    /* sources with a ring, for polling */
    ring_partial *partial;     /* [size] the message each ring is in the middle of */
    pt_shm_ring *held;         /* ring whose record a frame holds now */
    char shm_dir[PT_SHM_PATH_MAX];
    int64_t spin_ns, spin_max_ns; /* spin budget now and at most; 0: never spin */
    int64_t idle_checked_ns;      /* when core_free last read the run queue */
    int core_free, cores;         /* its answer; online cores */
    int64_t zmq_checked_ns;       /* when a receive last read the PULL socket */
    int seq_lines;                /* lines said about sequence drops (SEQ_LINES_MAX) */
    int no_linger;                /* pt_comm_config.no_linger */
    pt_comm_socket_hook hook;     /* pt_comm_create_hooked; NULL none */
    void *hook_user;
    size_t resend_limit;      /* bytes kept per peer to send again; 0: none */
    int resend_all;           /* 1: for local peers too (pt_comm_config.resend_bytes) */
    pt_resend_store **resend; /* [size] what was sent to each peer over ZeroMQ; NULL: none yet */
    int64_t *asked_ms;        /* [size] when this rank last asked that source to send again */
    uint64_t *asked_for;      /* [size] the sequence number it asked from, + 1; 0: never */
    int *asked_n;
    uint64_t *served_from; /* [size] the highest sequence number a peer asked from, + 1 */
    int64_t *served_ms;    /* [size] when frames from there were last sent again */
    uint64_t **seen; /* [size] frames taken above recv_seq, a bit per sequence number modulo
                        RECV_WINDOW, for sources that resend; NULL until needed */             /* [size] how often it asked for that one */
    int resend_lines; /* lines said about requests that could not be served */
};

/* One step of a spin: lets the sibling hyper-thread run and saves power. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int64_t pt_comm_internal_now_ms(void)
{
    return pt_clock_ns() / 1000000;
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

/* Frames longer than a header and the largest payload make ZeroMQ drop
 * the connection that sent them before they take any memory here. */
static void set_max_msg(void *sock, size_t max_payload)
{
    int64_t v = (int64_t)(max_payload + PT_COMM_HEADER_BYTES);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &v, sizeof v);
}

static void free_arrays(pt_comm *c)
{
    if (c->link)
        for (int r = 0; r < c->size; r++) {
            pt_zmq_watch_stop(&c->link[r].watch);
            free(c->link[r].endpoint);
        }
    free(c->link);
    free(c->push);
    free(c->send_seq);
    free(c->recv_seq);
    free(c->local);
    free(c->shm_failed);
    free(c->out_ring);
    free(c->in_ring);
    free(c->in_list);
    free(c->partial);
    for (int r = 0; c->resend && r < c->size; r++)
        pt_resend_store_free(&c->resend[r]);
    free(c->resend);
    free(c->asked_ms);
    free(c->asked_for);
    free(c->asked_n);
    free(c->served_from);
    free(c->served_ms);
    for (int r = 0; c->seen && r < c->size; r++)
        free(c->seen[r]);
    free(c->seen);
}

/* An endpoint on this host: what shared memory may replace. */
static int is_local(const char *ep)
{
    return !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9) ||
           !strncmp(ep, "tcp://127.", 10) || !strncmp(ep, "tcp://localhost:", 16) ||
           !strncmp(ep, "tcp://[::1]:", 12);
}

/* The per-peer arrays and the shared block: 0, or PT_ENOMEM (what was made
 * goes with free_arrays and pt_comm_shared_close). */
static int alloc_arrays(pt_comm *c)
{
    size_t n = (size_t)c->size;
    c->push = calloc(n, sizeof *c->push);
    c->link = calloc(n, sizeof *c->link);
    c->send_seq = calloc(n, sizeof *c->send_seq);
    c->recv_seq = calloc(n, sizeof *c->recv_seq);
    c->local = calloc(n, 1);
    c->shm_failed = calloc(n, 1);
    c->out_ring = calloc(n, sizeof *c->out_ring);
    c->in_ring = calloc(n, sizeof *c->in_ring);
    c->in_list = calloc(n, sizeof *c->in_list);
    c->partial = calloc(n, sizeof *c->partial);
    c->resend = calloc(n, sizeof *c->resend);
    c->asked_ms = calloc(n, sizeof *c->asked_ms);
    c->asked_for = calloc(n, sizeof *c->asked_for);
    c->asked_n = calloc(n, sizeof *c->asked_n);
    c->seen = calloc(n, sizeof *c->seen);
    c->served_from = calloc(n, sizeof *c->served_from);
    c->served_ms = calloc(n, sizeof *c->served_ms);
    c->shared = pt_comm_shared_new();
    if (!c->push || !c->link || !c->send_seq || !c->recv_seq || !c->local || !c->shm_failed ||
        !c->out_ring || !c->in_ring || !c->in_list || !c->partial || !c->resend || !c->asked_ms ||
        !c->asked_for || !c->asked_n || !c->seen || !c->served_from || !c->served_ms || !c->shared)
        return PT_ENOMEM;
    return 0;
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
    c->token = cfg->run_token;
    c->gen = cfg->generation;
    c->no_linger = cfg->no_linger;
    c->stash_limit = cfg->stash_limit_bytes ? cfg->stash_limit_bytes : PT_COMM_DEFAULT_STASH_BYTES;
    c->max_msg = cfg->max_msg_bytes ? cfg->max_msg_bytes : PT_COMM_DEFAULT_MAX_MSG;
    c->ring_bytes = cfg->shm_ring_bytes ? cfg->shm_ring_bytes : PT_COMM_DEFAULT_RING_BYTES;
    const char *env = getenv("PT_COMM_SHM");
    c->shm_on = cfg->shm >= 0 && !(env && !strcmp(env, "0"));
    /* Spinning helps only where the peer can run meanwhile on another core. */
    c->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->spin_max_ns = c->cores > 1 ? SPIN_MAX_NS : 0;
    c->idle_checked_ns = INT64_MIN / 2;
    const char *spin_env = getenv("PT_COMM_SPIN_US");
    if (spin_env && *spin_env) {
        char *end;
        long us = strtol(spin_env, &end, 10);
        if (*end == '\0' && us >= 0 && us <= 1000000)
            c->spin_max_ns = (int64_t)us * US_NS;
    }
    c->spin_ns = c->spin_max_ns;
    if (alloc_arrays(c) < 0)
        goto fail_arrays;
    c->resend_all = cfg->resend_bytes && cfg->resend_bytes != PT_COMM_RESEND_OFF;
    c->resend_limit = cfg->resend_bytes == PT_COMM_RESEND_OFF ? 0
                      : cfg->resend_bytes                     ? cfg->resend_bytes
                                                              : PT_COMM_DEFAULT_RESEND_BYTES;

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
    set_int_opt(c->pull, ZMQ_RCVHWM, RCV_HWM_MSGS);
    set_int_opt(c->pull, ZMQ_LINGER, 0);
    set_max_msg(c->pull, c->max_msg);
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
    free_arrays(c);
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

static int interrupted(const pt_comm *c, const char *what, pt_error *err);

/* Opens rank r's PUSH socket to its link's endpoint, watched until its
 * handshake is confirmed (pt_comm_await_peers). */
static int open_push(pt_comm *c, int r, pt_error *err)
{
    peer_link *l = &c->link[r];
    void *s = zmq_socket(c->ctx, ZMQ_PUSH);
    if (!s)
        return pt_error_set(err, PT_EIO, "comm: zmq_socket: %s", zmq_strerror(errno));
    set_int_opt(s, ZMQ_SNDHWM, HWM_MSGS);
    set_int_opt(s, ZMQ_SNDTIMEO, c->timeout_ms);
    set_int_opt(s, ZMQ_LINGER, c->no_linger ? 0 : c->timeout_ms);
    set_max_msg(s, c->max_msg);
    int rc = c->hook ? c->hook(c->hook_user, s, r, err) : 0;
    if (rc == 0)
        rc = pt_zmq_watch_start(c->ctx, s, PT_WATCH_HANDSHAKE_EVENTS, &l->watch, err);
    if (rc == 0 && zmq_connect(s, l->endpoint) != 0)
        rc = pt_error_set(err, PT_EIO, "comm: rank %d: connect to rank %d at %s: %s", c->rank, r,
                          l->endpoint, zmq_strerror(errno));
    if (rc < 0) {
        pt_zmq_watch_stop(&l->watch);
        zmq_close(s);
        return rc;
    }
    c->push[r] = s;
    return 0;
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
        if (!(self->link[r].endpoint = strdup(endpoints[r])))
            return pt_error_set(err, PT_ENOMEM, "comm: out of memory");
        int rc = open_push(self, r, err);
        if (rc < 0)
            return rc;
        self->local[r] = (unsigned char)is_local(endpoints[r]);
    }
    self->connected = 1;
    return 0;
}

/* A failed handshake ends its connection for good: the socket is replaced
 * after a pause that doubles with each failure. Nothing was sent on it. */
static void replace_push(pt_comm *c, int r, int64_t now)
{
    peer_link *l = &c->link[r];
    pt_zmq_watch_stop(&l->watch);
    int linger0 = 0;
    zmq_setsockopt(c->push[r], ZMQ_LINGER, &linger0, sizeof linger0);
    zmq_close(c->push[r]);
    c->push[r] = NULL;
    int shift =
        l->failed < PT_COMM_HANDSHAKE_BACKOFF_STEPS ? l->failed : PT_COMM_HANDSHAKE_BACKOFF_STEPS;
    l->retry_ns = now + ((int64_t)PT_COMM_HANDSHAKE_RETRY_MS << shift) * 1000000;
}

/* The error for rank r whose handshake was not confirmed in time. */
static int unconfirmed(pt_comm *c, int r, int timeout_ms, pt_error *err)
{
    peer_link *l = &c->link[r];
    if (!l->failed)
        return pt_error_set(err, PT_ETIMEOUT,
                            "comm: rank %d: no handshake with rank %d at %s within %d ms (is the "
                            "peer listening there?)",
                            c->rank, r, l->endpoint, timeout_ms);
    char why[128];
    pt_zmq_watch_describe(l->last_event, l->last_value, why, sizeof why);
    return pt_error_set(err, PT_EREFUSED,
                        "comm: rank %d: rank %d at %s refused %d handshakes within %d ms, the "
                        "last %s: it does not take this rank's key for this run and generation",
                        c->rank, r, l->endpoint, l->failed, timeout_ms, why);
}

/* Reads rank r's watch: 1 confirmed, 0 nothing new or a failure handled,
 * <0 error. */
static int read_watch(pt_comm *c, int r, int64_t now, pt_error *err)
{
    peer_link *l = &c->link[r];
    int ev;
    int32_t val;
    int got;
    while (l->watch && (got = pt_zmq_watch_next(l->watch, &ev, &val)) != 0) {
        if (got < 0)
            return interrupted(c, "connect", err);
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            l->shaken = 1;
            pt_zmq_watch_stop(&l->watch);
            return 1;
        }
        l->failed++;
        l->last_event = ev;
        l->last_value = val;
        c->stats.handshakes_failed++;
        replace_push(c, r, now);
        return 0;
    }
    return 0;
}

int pt_comm_await_peers(pt_comm *self, int timeout_ms, int max_failures, pt_error *err)
{
    if (!self || timeout_ms <= 0)
        return pt_error_set(err, PT_EINVAL, "comm: await peers: bad argument");
    zmq_pollitem_t *items = calloc((size_t)self->size, sizeof *items);
    int *rank_of = calloc((size_t)self->size, sizeof *rank_of);
    int rc = items && rank_of ? 0 : pt_error_set(err, PT_ENOMEM, "comm: out of memory");
    int64_t deadline = pt_clock_ns() + (int64_t)timeout_ms * 1000000;
    while (rc == 0) {
        int64_t now = pt_clock_ns(), wake = deadline;
        int n = 0, waiting = -1;
        for (int r = 0; r < self->size && rc == 0; r++) {
            peer_link *l = &self->link[r];
            if (!l->endpoint || l->shaken)
                continue;
            if (max_failures > 0 && l->failed >= max_failures)
                rc = unconfirmed(self, r, timeout_ms, err);
            else if (!self->push[r] && now >= l->retry_ns)
                rc = open_push(self, r, err);
            if (rc < 0)
                break;
            waiting = waiting < 0 ? r : waiting;
            if (!self->push[r]) {
                wake = l->retry_ns < wake ? l->retry_ns : wake;
                continue;
            }
            items[n].socket = pt_zmq_watch_socket(l->watch);
            items[n].events = ZMQ_POLLIN;
            rank_of[n++] = r;
        }
        if (rc < 0 || waiting < 0)
            break;
        if (now >= deadline) {
            rc = unconfirmed(self, waiting, timeout_ms, err);
            break;
        }
        long ms = (long)((wake - now + 999999) / 1000000);
        if (zmq_poll(items, n, ms > 0 ? ms : 1) < 0 && errno == ETERM) {
            rc = interrupted(self, "connect", err);
            break;
        }
        now = pt_clock_ns();
        for (int i = 0; i < n && rc >= 0; i++)
            rc = read_watch(self, rank_of[i], now, err);
        rc = rc > 0 ? 0 : rc;
    }
    free(items);
    free(rank_of);
    return rc;
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
    for (int r = 0; r < c->size; r++) {
        if (c->partial[r].active && c->partial[r].keep)
            zmq_msg_close(&c->partial[r].m);
        pt_shm_ring_destroy(&c->out_ring[r]);
        pt_shm_ring_destroy(&c->in_ring[r]);
    }
    if (c->shm_dir[0])
        rmdir(c->shm_dir);
    int linger0 = 0;
    for (int r = 0; r < c->size; r++)
        pt_zmq_watch_stop(&c->link[r].watch);
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
    free_arrays(c);
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
            set_int_opt(self->push[r], ZMQ_LINGER, self->no_linger ? 0 : timeout_ms);
        }
    return 0;
}

void pt_comm_stats_get(const pt_comm *self, pt_comm_stats *out)
{
    if (!self || !out)
        return;
    *out = self->stats;
    pt_comm_shared_pool_bytes(self->shared, &out->pool_bytes, &out->pool_peak_bytes);
    out->resend_bytes = 0;
    for (int r = 0; r < self->size; r++)
        out->resend_bytes += pt_resend_store_bytes(self->resend[r]);
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

/* Whether bytes more would still fit under the stash's bound. */
static int stash_fits(const pt_comm *c, size_t bytes)
{
    return bytes <= c->stash_limit && c->stats.stash_bytes <= c->stash_limit - bytes;
}

/* Whether tag is one that a receive of (want, mask) takes. */
static int tag_matches(uint64_t tag, uint64_t want, uint64_t mask)
{
    return ((tag ^ want) & mask) == 0;
}

/* Takes the oldest stashed message from src whose tag matches (want, mask)
 * into *payload and its tag into *tag: 1 found, 0 not. */
static int stash_take(pt_comm *c, int src, uint64_t want, uint64_t mask, zmq_msg_t *payload,
                      uint64_t *tag)
{
    int best = -1;
    for (int i = 0; i < c->slots_used; i++) {
        stash_slot *s = c->slots[i];
        if (s->src == src && tag_matches(s->tag, want, mask) &&
            (best < 0 || s->order < c->slots[best]->order))
            best = i;
    }
    if (best < 0)
        return 0;
    stash_slot *s = c->slots[best];
    *tag = s->tag;
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

/* ---- the checks every arriving frame passes --------------------------------- */

typedef struct wire_hdr_s wire_hdr;

static void hdr_write(unsigned char *h, const wire_hdr *w)
{
    put_u32(h, w->magic);
    put_u32(h + 4, w->src);
    put_u64(h + 8, w->tag);
    put_u64(h + 16, w->count);
    put_u64(h + 24, w->seq);
    put_u64(h + 32, w->token);
    put_u64(h + 40, w->gen);
}

static void hdr_read(const unsigned char *h, wire_hdr *w)
{
    w->magic = get_u32(h);
    w->src = get_u32(h + 4);
    w->tag = get_u64(h + 8);
    w->count = get_u64(h + 16);
    w->seq = get_u64(h + 24);
    w->token = get_u64(h + 32);
    w->gen = get_u64(h + 40);
}

/* ---- resending (see runtime/comm.h) ----------------------------------------- */

/* Whether what this rank sends to dst over ZeroMQ is kept to be sent again. */
static int keep_on(const pt_comm *c, int dst)
{
    return c->resend_limit && (c->resend_all || !c->local[dst]) && !c->out_ring[dst];
}

/* Whether this rank asks src to send again (src keeps what it sends here). */
static int ask_on(const pt_comm *c, int src)
{
    return c->resend_limit && c->push[src] && (c->resend_all || !c->local[src]) && !c->in_ring[src];
}

/* The frame whose header is h, about to go to dst with the next sequence
 * number: a copy kept (a failure to keep it only means it cannot be sent
 * again). */
static void keep_sent(pt_comm *c, int dst, const unsigned char *h, zmq_msg_t *payload)
{
    if (!keep_on(c, dst))
        return;
    if (!c->resend[dst] &&
        !(c->resend[dst] = pt_resend_store_new(c->resend_limit, c->send_seq[dst])))
        return;
    pt_resend_store_keep(c->resend[dst], h, c->send_seq[dst], zmq_msg_data(payload),
                         zmq_msg_size(payload));
}

/* Asks src for everything from the next sequence number this rank expects
 * of it, unless it asked for that lately: PT_COMM_RESEND_PROBE_MS after the
 * first request, twice that after the second, then 4 times (each answer
 * sends the whole window from there again, so a long outage must not be
 * answered by a flood). The
 * request is out of sequence (RESEND_SEQ): both directions may have lost
 * frames in one cut, and each side drops what follows a gap until it is
 * filled, so a request in sequence would wait behind the gap it asks to
 * fill. It is neither counted as a message nor kept. */
static void ask_resend(pt_comm *c, int src, int64_t now)
{
    uint64_t from = c->recv_seq[src];
    int again = c->asked_for[src] == from + 1;
    int shift = c->asked_n[src] - 1 < RESEND_BACKOFF_MAX ? c->asked_n[src] - 1 : RESEND_BACKOFF_MAX;
    if (again && now - c->asked_ms[src] < ((int64_t)PT_COMM_RESEND_PROBE_MS << shift))
        return;
    c->asked_n[src] = again ? c->asked_n[src] + 1 : 1;
    c->asked_for[src] = from + 1;
    c->asked_ms[src] = now;
    wire_hdr w = {PT_COMM_MAGIC,
                  (uint32_t)c->rank,
                  pt_comm_tag(PT_COMM_RESEND, 0, 0),
                  sizeof from / sizeof(float),
                  RESEND_SEQ,
                  c->token,
                  c->gen};
    unsigned char h[PT_COMM_HEADER_BYTES];
    hdr_write(h, &w);
    if (zmq_send(c->push[src], h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)sizeof h &&
        zmq_send(c->push[src], &from, sizeof from, 0) == (int)sizeof from)
        c->stats.resend_asked++;
}

/* src asked for what this rank sent it from the sequence number in payload
 * on: the kept frames go again, as they were. */
static void serve_resend(pt_comm *c, int src, zmq_msg_t *payload)
{
    uint64_t from;
    if (zmq_msg_size(payload) != sizeof from)
        return;
    memcpy(&from, zmq_msg_data(payload), sizeof from);
    /* A peer's first missing frame only moves up: a request below the
     * highest seen is an old one come late (it waited in a connection a
     * cut had stopped), and one for the same frame within a probe period is
     * already being answered. Each answer sends the window from there:
     * answering every late request flooded the link and starved the
     * receive that would have taken what came. */
    int64_t now = pt_comm_internal_now_ms();
    if (from + 1 < c->served_from[src] ||
        (from + 1 == c->served_from[src] && now - c->served_ms[src] < PT_COMM_RESEND_PROBE_MS))
        return;
    c->served_from[src] = from + 1;
    c->served_ms[src] = now;
    if (from >= c->send_seq[src]) {
        if (getenv("PT_COMM_RESEND_TRACE"))
            fprintf(stderr,
                    "comm: rank %d: rank %d asks from %llu; nothing sent since (next %llu)\n",
                    c->rank, src, (unsigned long long)from, (unsigned long long)c->send_seq[src]);
        return; /* nothing sent since: it waits for what is still to come */
    }
    int first = 0;
    int n = c->resend[src] ? pt_resend_store_from(c->resend[src], from, &first) : PT_ENOTFOUND;
    if (n < 0) {
        c->stats.resend_unserved++;
        if (c->resend_lines < SEQ_LINES_MAX) {
            c->resend_lines++;
            fprintf(stderr,
                    "comm: rank %d: rank %d asked again for what was sent to it from sequence "
                    "%llu on; %s: those frames are lost\n",
                    c->rank, src, (unsigned long long)from,
                    c->resend[src] ? "they are no longer kept" : "nothing is kept for it");
        }
        return;
    }
    if (getenv("PT_COMM_RESEND_TRACE"))
        fprintf(stderr, "comm: rank %d: rank %d asks from %llu: %d frames again (next %llu)\n",
                c->rank, src, (unsigned long long)from, n, (unsigned long long)c->send_seq[src]);
    for (int k = first; k < first + n; k++) {
        const unsigned char *h;
        const void *data;
        size_t bytes;
        pt_resend_store_at(c->resend[src], k, &h, &data, &bytes);
        if (zmq_send(c->push[src], h, PT_COMM_HEADER_BYTES, ZMQ_SNDMORE) < 0 ||
            zmq_send(c->push[src], data, bytes, 0) < 0)
            break;
        c->stats.resent++;
    }
}

/* A frame numbered seq from src, a source that resends: taken once, in any
 * order within RECV_WINDOW of the first one still missing (after a cut,
 * the old connection's last frames and the new one's, resent ones among
 * them, interleave). 1 taken (recv_seq moves past every frame taken in a
 * row), 0 a duplicate or too far ahead. */
static int take_windowed(pt_comm *c, int src, uint64_t seq)
{
    uint64_t base = c->recv_seq[src];
    if (seq < base || seq - base >= RECV_WINDOW)
        return 0;
    if (!c->seen[src] && !(c->seen[src] = calloc(RECV_WINDOW / 64, sizeof *c->seen[src]))) {
        if (seq != base)
            return 0; /* no memory for the window: in order only */
        c->recv_seq[src]++;
        return 1;
    }
    uint64_t *w = c->seen[src], k = seq % RECV_WINDOW;
    if ((w[k / 64] >> (k % 64)) & 1)
        return 0;
    w[k / 64] |= (uint64_t)1 << (k % 64);
    for (uint64_t b = c->recv_seq[src] % RECV_WINDOW; (w[b / 64] >> (b % 64)) & 1;
         b = c->recv_seq[src] % RECV_WINDOW) {
        w[b / 64] &= ~((uint64_t)1 << (b % 64));
        c->recv_seq[src]++;
    }
    return 1;
}

enum { ACCEPT = 0, DROP = 1 };

static void drop(uint64_t *counter, pt_comm *c)
{
    (*counter)++;
    c->stats.bad_msgs++;
}

/* Whether a well-formed header may be delivered: run token and generation,
 * a source that reaches us this way (via_ring: through its ring), and the
 * next sequence number of that source. Counts what it refuses. */
static int check_hdr(pt_comm *c, const wire_hdr *h, int via_ring)
{
    int resend_ask = h->seq == RESEND_SEQ && pt_comm_tag_kind(h->tag) == PT_COMM_RESEND;
    if (h->token != c->token) {
        drop(&c->stats.dropped_token, c);
        return DROP;
    }
    if (h->gen != c->gen) { /* another generation's, of this run: late or early */
        drop(&c->stats.dropped_generation, c);
        return DROP;
    }
    if (h->src >= (uint32_t)c->size || (int)h->src == c->rank ||
        (!via_ring && c->in_ring[h->src])) {
        drop(&c->stats.dropped_sender, c);
        return DROP;
    }
    if (resend_ask && !via_ring) /* out of sequence on purpose (ask_resend) */
        return ACCEPT;
    if (!via_ring && ask_on(c, (int)h->src)) {
        /* a source that resends: frames a broken connection lost are
         * asked for while the ones after them are taken */
        int src = (int)h->src, took = take_windowed(c, src, h->seq);
        if ((took && c->recv_seq[src] <= h->seq) || (!took && h->seq >= c->recv_seq[src]))
            ask_resend(c, src, pt_comm_internal_now_ms());
        if (took)
            return ACCEPT;
        drop(&c->stats.dropped_seq, c); /* sent again, already here; or too far ahead */
        return DROP;
    }
    if (h->seq != c->recv_seq[h->src]) {
        /* a few lines per communicator: a gap is a bug worth seeing, a
         * replay flood is not worth a line each */
        if (c->seq_lines < SEQ_LINES_MAX) {
            char tb[64];
            c->seq_lines++;
            fprintf(stderr,
                    "comm: rank %d: dropped a frame from rank %u: sequence %llu, expected %llu "
                    "(%s, generation %llu%s)\n",
                    c->rank, h->src, (unsigned long long)h->seq,
                    (unsigned long long)c->recv_seq[h->src], pt_comm_tag_str(h->tag, tb, sizeof tb),
                    (unsigned long long)h->gen, via_ring ? ", shared memory" : "");
        }
        drop(&c->stats.dropped_seq, c);
        return DROP;
    }
    c->recv_seq[h->src]++;
    return ACCEPT;
}

/* ---- receiving over ZeroMQ -------------------------------------------------- */

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

static int attach_ring(pt_comm *c, int src, zmq_msg_t *payload);

/* Reads one message from the PULL socket without blocking.
 * 1: a valid message (src, tag, *payload initialised; caller owns it);
 * 0: nothing queued; 2: a frame was dropped or handled inside (a ring hello);
 * <0: socket error. */
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
    wire_hdr h = {0};
    if (ok) {
        hdr_read(zmq_msg_data(&hdr), &h);
        ok = h.magic == PT_COMM_MAGIC && h.count <= c->max_msg / sizeof(float);
    }
    int more = zmq_msg_more(&hdr);
    zmq_msg_close(&hdr);
    if (!ok) {
        if (more)
            drain_parts(c->pull);
        drop(&c->stats.dropped_malformed, c);
        return 2;
    }
    zmq_msg_init(payload);
    n = zmq_msg_recv(payload, c->pull, ZMQ_DONTWAIT);
    if (n < 0 || zmq_msg_more(payload) || zmq_msg_size(payload) != h.count * sizeof(float)) {
        if (n >= 0 && zmq_msg_more(payload))
            drain_parts(c->pull);
        zmq_msg_close(payload);
        drop(&c->stats.dropped_malformed, c);
        return 2;
    }
    if (check_hdr(c, &h, 0) == DROP) {
        zmq_msg_close(payload);
        return 2;
    }
    if (pt_comm_tag_kind(h.tag) == PT_COMM_SHM_HELLO) { /* transport control, not counted */
        attach_ring(c, (int)h.src, payload);
        zmq_msg_close(payload);
        return 2;
    }
    if (pt_comm_tag_kind(h.tag) == PT_COMM_RESEND) { /* transport control, not counted */
        serve_resend(c, (int)h.src, payload);
        zmq_msg_close(payload);
        return 2;
    }
    c->stats.msgs_recv++;
    c->stats.bytes_recv += PT_COMM_HEADER_BYTES + zmq_msg_size(payload);
    *src = (int)h.src;
    *tag = h.tag;
    return 1;
}

/* A peer announces its ring: map it. A hello that cannot be mapped leaves
 * the peer on ZeroMQ, and the next receive from it says why. */
static int attach_ring(pt_comm *c, int src, zmq_msg_t *payload)
{
    /* The path travels as one float per byte (exact small integers), NUL-ended. */
    char path[PT_SHM_PATH_MAX];
    size_t n = zmq_msg_size(payload) / sizeof(float), k = 0;
    const unsigned char *p = zmq_msg_data(payload);
    for (; k < n && k + 1 < sizeof path; k++) {
        float f;
        memcpy(&f, p + k * sizeof f, sizeof f);
        if (!(f >= 0 && f <= 255) || f != (float)(int)f)
            break;
        path[k] = (char)(int)f;
        if (!path[k])
            break;
    }
    path[k < sizeof path ? k : sizeof path - 1] = '\0';
    if (c->in_ring[src]) {
        drop(&c->stats.dropped_sender, c); /* a second hello: not from the peer we know */
        return PT_ESTATE;
    }
    pt_error e = {0};
    pt_shm_ring *r;
    int rc = pt_shm_ring_attach(path, src, c->rank, c->token, c->gen, &r, &e);
    if (rc < 0) {
        fprintf(stderr, "comm: rank %d: ring from rank %d: %s\n", c->rank, src, e.msg);
        drop(&c->stats.dropped_sender, c);
        return rc;
    }
    c->in_ring[src] = r;
    c->in_list[c->in_count++] = src;
    c->stats.shm_peers_in++;
    return 0;
}

/* ---- receiving from a ring ---------------------------------------------------- */

/* Takes what is in ring src without waiting. A message of several records
 * is assembled across calls (its sender may be waiting for the room the
 * first pieces free), so no caller ever blocks inside another's message.
 * 1: the message (src, want) is complete and *f holds it (f not NULL): a
 * view into the ring when it is one record and view is set, a copy
 * otherwise; 2: another message was stashed or dropped, or a piece taken;
 * 0: nothing more now; <0 an error (err set). */
static int ring_next(pt_comm *c, int src, uint64_t want, uint64_t mask, int view, pt_comm_frame *f,
                     pt_error *err)
{
    pt_shm_ring *r = c->in_ring[src];
    ring_partial *p = &c->partial[src];
    pt_shm_rec rec;
    int rc = pt_shm_ring_peek(r, &rec);
    if (rc == 0)
        return 0;
    if (rc < 0 || (rec.type == PT_SHM_MSG && rec.len < PT_COMM_HEADER_BYTES) ||
        (rec.type == PT_SHM_CONT && (!p->active || rec.len > p->total - p->done)) ||
        (rec.type == PT_SHM_MSG && p->active))
        return pt_error_set(err, PT_EPARSE, "comm: rank %d: the ring from rank %d is corrupt",
                            c->rank, src);
    if (rec.type == PT_SHM_MSG) {
        wire_hdr h;
        hdr_read(rec.data, &h);
        size_t first = rec.len - PT_COMM_HEADER_BYTES, total = (size_t)h.count * sizeof(float);
        int ok = h.magic == PT_COMM_MAGIC && h.count <= c->max_msg / sizeof(float) &&
                 first <= total && (int)h.src == src;
        if (!ok)
            return pt_error_set(err, PT_EPARSE, "comm: rank %d: the ring from rank %d is corrupt",
                                c->rank, src);
        int keep = check_hdr(c, &h, 1) == ACCEPT;
        int match = keep && f && tag_matches(h.tag, want, mask);
        if (keep && !match && !stash_fits(c, total)) {
            drop(&c->stats.dropped_overflow, c);
            keep = 0;
        }
        if (keep) {
            c->stats.msgs_recv++;
            c->stats.bytes_recv += PT_COMM_HEADER_BYTES + total;
        }
        if (match && view && first == total) {
            f->tag = h.tag;
            f->data = rec.data + PT_COMM_HEADER_BYTES;
            f->bytes = total;
            f->in_msg = 0;
            f->ring = r;
            c->held = r;
            return 1;
        }
        p->h = h;
        p->total = total;
        p->done = first;
        p->keep = keep;
        if (keep) {
            if (zmq_msg_init_size(&p->m, total) != 0)
                return pt_error_set(err, PT_ENOMEM, "comm: rank %d: no memory for %zu bytes",
                                    c->rank, total);
            memcpy(zmq_msg_data(&p->m), rec.data + PT_COMM_HEADER_BYTES, first);
        }
        p->active = 1;
    } else {
        if (p->keep)
            memcpy((unsigned char *)zmq_msg_data(&p->m) + p->done, rec.data, rec.len);
        p->done += rec.len;
    }
    pt_shm_ring_consume(r);
    if (p->done < p->total)
        return 2;
    p->active = 0;
    if (!p->keep)
        return 2;
    if (f && tag_matches(p->h.tag, want, mask)) {
        f->tag = p->h.tag;
        f->in_msg = 1;
        f->ring = NULL;
        zmq_msg_init(&f->msg);
        zmq_msg_move(&f->msg, &p->m);
        zmq_msg_close(&p->m);
        f->data = zmq_msg_data(&f->msg);
        f->bytes = p->total;
        return 1;
    }
    c->stats.early_arrivals++;
    rc = stash_put(c, src, p->h.tag, &p->m);
    zmq_msg_close(&p->m);
    if (rc < 0)
        return pt_error_set(err, PT_ENOMEM, "comm: rank %d: stash: out of memory", c->rank);
    return 2;
}

/* Drains into the stash the rings whose sender waits for room (except the
 * one a frame holds), so two ranks that both send never wait on each other.
 * 0 or <0 (err set). */
static int drain_blocked_rings(pt_comm *c, pt_error *err)
{
    for (int i = 0; i < c->in_count; i++) {
        int src = c->in_list[i];
        pt_shm_ring *r = c->in_ring[src];
        if (r == c->held || !pt_shm_ring_producer_waiting(r))
            continue;
        int rc;
        while ((rc = ring_next(c, src, 0, 0, 0, NULL, err)) == 2) {
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Sleeps until the PULL socket, a ring's FIFO or extra_fd (-1: none) wakes
 * us, or deadline. want_ring (NULL: none) is armed to wake us on its next
 * record; the rings of blocked senders wake us anyway. *zmq_ready (not
 * NULL) is 0 when the PULL socket surely has nothing to read. 0, or
 * PT_ESTATE. */
static int sleep_any(pt_comm *c, pt_shm_ring *want_ring, int extra_fd, int64_t deadline,
                     int *zmq_ready)
{
    if (zmq_ready)
        *zmq_ready = 1;
    if (want_ring && pt_shm_ring_prepare_sleep(want_ring)) {
        pt_shm_ring_woke(want_ring, 0);
        return 0;
    }
    int64_t left = deadline - pt_comm_internal_now_ms();
    unsigned char fired[PT_COMM_MAX_RANKS];
    memset(fired, 1, (size_t)c->in_count); /* not watched: drained anyway */
    if (left > 0) {
        zmq_pollitem_t stack[16], *it = stack;
        int n = c->in_count + 2;
        if (n > 16 && !(it = malloc((size_t)n * sizeof *it)))
            it = stack, n = 2 + (c->in_count > 14 ? 14 : c->in_count);
        int k = 0;
        it[k++] = (zmq_pollitem_t){.socket = c->pull, .events = ZMQ_POLLIN};
        int rings = 0;
        for (; rings < c->in_count && k < n; rings++)
            it[k++] = (zmq_pollitem_t){.fd = pt_shm_ring_wait_fd(c->in_ring[c->in_list[rings]]),
                                       .events = ZMQ_POLLIN};
        if (extra_fd >= 0 && k < n)
            it[k++] = (zmq_pollitem_t){.fd = extra_fd, .events = ZMQ_POLLIN};
        int rc = zmq_poll(it, k, (long)left);
        int e = errno;
        if (rc >= 0) {
            if (zmq_ready)
                *zmq_ready = (it[0].revents & ZMQ_POLLIN) != 0;
            for (int i = 0; i < rings; i++)
                fired[i] = (it[i + 1].revents & ZMQ_POLLIN) != 0;
        }
        if (it != stack)
            free(it);
        if (rc < 0 && e == ETERM)
            return PT_ESTATE;
    }
    /* Only FIFOs that fired hold bytes to read: no empty read per ring. */
    for (int i = 0; i < c->in_count; i++)
        pt_shm_ring_woke(c->in_ring[c->in_list[i]], fired[i]);
    return atomic_load(&c->interrupted) ? PT_ESTATE : 0;
}

static int interrupted(const pt_comm *c, const char *what, pt_error *err)
{
    return pt_error_set(err, PT_ESTATE, "comm: rank %d: %s interrupted (context shut down)",
                        c->rank, what);
}

/* Reads everything queued on the PULL socket without blocking: a message
 * from src whose tag matches (want, mask) stops it (1, *out and *out_tag
 * set; out not NULL), others are stashed (or dropped over the bound). 0
 * when the socket is empty, <0 on error (err set). */
static int pull_all(pt_comm *c, int src, uint64_t want, uint64_t mask, zmq_msg_t *out,
                    uint64_t *out_tag, pt_error *err)
{
    for (;;) {
        int from;
        uint64_t got;
        zmq_msg_t m;
        int rc = pull_one(c, &from, &got, &m);
        if (rc == PT_ESTATE)
            return interrupted(c, "recv", err);
        if (rc < 0)
            return pt_error_set(err, PT_EIO, "comm: rank %d: recv: %s", c->rank,
                                zmq_strerror(errno));
        if (rc == 0)
            return 0;
        if (rc == 2)
            continue;
        if (out && from == src && tag_matches(got, want, mask)) {
            *out_tag = got;
            zmq_msg_init(out);
            zmq_msg_move(out, &m);
            zmq_msg_close(&m);
            return 1;
        }
        if (!stash_fits(c, zmq_msg_size(&m))) {
            drop(&c->stats.dropped_overflow, c);
            zmq_msg_close(&m);
            continue;
        }
        c->stats.early_arrivals++;
        rc = stash_put(c, from, got, &m);
        zmq_msg_close(&m);
        if (rc < 0)
            return pt_error_set(err, PT_ENOMEM, "comm: rank %d: stash: out of memory", c->rank);
    }
}

/* Whether a core is free for the peer while this rank spins: the kernel's
 * count of runnable tasks (this one among them) in /proc/loadavg, read at
 * most every IDLE_CHECK_NS, is at most the number of cores. On a machine
 * with more runnable tasks than cores a spin only keeps the peer (or
 * others) off this core, so it is skipped. */
static int core_free(pt_comm *c, int64_t t)
{
    if (t - c->idle_checked_ns < IDLE_CHECK_NS)
        return c->core_free;
    c->idle_checked_ns = t;
    c->core_free = 1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        double l1, l5, l15;
        long running, total;
        if (fscanf(f, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &running, &total) == 5)
            c->core_free = running <= c->cores;
        fclose(f);
    }
    return c->core_free;
}

/* Spins (pause, no system call) until ready(c, arg) or c's spin budget is
 * spent: 1 ready, 0 not. A wait that a spin ended doubles the budget (up to
 * spin_max_ns), one it did not halves it (down to SPIN_MIN_NS), so ranks
 * whose peers answer within microseconds (each on its own core) skip the
 * sleep and the wake-up, while ranks that wait long (for a peer's compute)
 * spin almost not at all; and nobody spins while the machine has no core
 * to spare (core_free). */
static int spin_until(pt_comm *c, int (*ready)(pt_comm *, const void *), const void *arg)
{
    if (c->spin_max_ns <= 0)
        return 0;
    int64_t t0 = pt_clock_ns();
    if (!core_free(c, t0))
        return 0;
    for (unsigned i = 1;; i++) {
        if (ready(c, arg)) {
            c->spin_ns = c->spin_ns * 2 > c->spin_max_ns ? c->spin_max_ns : c->spin_ns * 2;
            return 1;
        }
        cpu_relax();
        if (!(i % SPIN_CLOCK_EVERY) && pt_clock_ns() - t0 >= c->spin_ns)
            break;
    }
    c->spin_ns = c->spin_ns / 2 < SPIN_MIN_NS ? SPIN_MIN_NS : c->spin_ns / 2;
    return 0;
}

/* A sender waits for room in the rings to this rank: they must be drained. */
static int blocked_producer(const pt_comm *c)
{
    for (int i = 0; i < c->in_count; i++) {
        pt_shm_ring *r = c->in_ring[c->in_list[i]];
        if (r != c->held && pt_shm_ring_producer_waiting(r))
            return 1;
    }
    return 0;
}

static int ring_has_record(pt_comm *c, const void *ring)
{
    return pt_shm_ring_readable(ring) || blocked_producer(c);
}

/* Whether the PULL socket is to be read now. With src's messages in its
 * ring, ZeroMQ carries only others' (remote peers', or forged frames, which
 * are dropped and counted): reading it at most every ZMQ_CHECK_NS while the
 * ring delivers keeps its cost (a system call in ZeroMQ per look) off each
 * message; every sleep watches the socket anyway. */
static int zmq_due(pt_comm *c, int src, int after_sleep)
{
    if (after_sleep || !c->in_ring[src])
        return 1;
    int64_t t = pt_clock_ns();
    if (t - c->zmq_checked_ns < ZMQ_CHECK_NS)
        return 0;
    c->zmq_checked_ns = t;
    return 1;
}

static void frame_from_msg(pt_comm_frame *f, uint64_t tag)
{
    f->tag = tag;
    f->in_msg = 1;
    f->ring = NULL;
    f->data = zmq_msg_data(&f->msg);
    f->bytes = zmq_msg_size(&f->msg);
}

/* pt_comm_internal_recv_frame for the oldest message from src whose tag
 * matches (want, mask); f->tag says which. */
static int recv_frame(pt_comm *self, int src, uint64_t want, uint64_t mask, pt_comm_frame *f,
                      pt_error *err)
{
    char tb[64];
    if (src < 0 || src >= self->size)
        return pt_error_set(err, PT_EINVAL, "comm: recv: source rank %d is out of range [0, %d)",
                            src, self->size);
    f->ring = NULL;
    f->in_msg = 1;
    uint64_t got;
    if (stash_take(self, src, want, mask, &f->msg, &got)) {
        frame_from_msg(f, got);
        return 0;
    }
    int64_t started = pt_comm_internal_now_ms(), deadline = started + self->timeout_ms;
    int slept = 0; /* 1: the PULL socket may have woken the last sleep */
    for (;;) {
        int rc;
        if (zmq_due(self, src, slept)) {
            rc = pull_all(self, src, want, mask, &f->msg, &got, err);
            if (rc < 0)
                return rc;
            if (rc == 1) {
                frame_from_msg(f, got);
                return 0;
            }
        }
        slept = 0;
        pt_shm_ring *ring = self->in_ring[src];
        if (ring) {
            while ((rc = ring_next(self, src, want, mask, 1, f, err)) == 2) {
            }
            if (rc < 0)
                return rc;
            if (rc == 1)
                return 0;
            if ((rc = drain_blocked_rings(self, err)) < 0)
                return rc;
            if (stash_take(self, src, want, mask, &f->msg, &got)) {
                frame_from_msg(f, got);
                return 0;
            }
            if (spin_until(self, ring_has_record, ring))
                continue;
            /* A hello from src may have just attached its ring: look there
             * first. */
            if (pt_shm_ring_prepare_sleep(ring)) {
                pt_shm_ring_woke(ring, 0);
                continue;
            }
        }
        if ((rc = drain_blocked_rings(self, err)) < 0)
            return rc;
        if (stash_take(self, src, want, mask, &f->msg, &got)) {
            frame_from_msg(f, got);
            return 0;
        }
        if (pt_comm_internal_now_ms() >= deadline) {
            if (self->stats.dropped_overflow)
                return pt_error_set(
                    err, PT_ETIMEOUT,
                    "comm: rank %d: no message %s from rank %d within %d ms "
                    "(%llu frames dropped over the %zu-byte early-arrival bound)",
                    self->rank, pt_comm_tag_str(want, tb, sizeof tb), src, self->timeout_ms,
                    (unsigned long long)self->stats.dropped_overflow, self->stash_limit);
            if (ask_on(self, src) && self->asked_for[src])
                return pt_error_set(
                    err, PT_ETIMEOUT,
                    "comm: rank %d: no message %s from rank %d within %d ms (the first frame "
                    "missing from it is %llu, asked for %d times; %llu frames taken since)",
                    self->rank, pt_comm_tag_str(want, tb, sizeof tb), src, self->timeout_ms,
                    (unsigned long long)self->recv_seq[src], self->asked_n[src],
                    (unsigned long long)(self->recv_seq[src] - (self->asked_for[src] - 1)));
            return pt_error_set(
                err, PT_ETIMEOUT, "comm: rank %d: no message %s from rank %d within %d ms",
                self->rank, pt_comm_tag_str(want, tb, sizeof tb), src, self->timeout_ms);
        }
        int64_t wake = deadline;
        if (ask_on(self, src)) { /* a frame lost with a broken connection is asked for */
            int64_t now = pt_comm_internal_now_ms();
            if (now - started >= PT_COMM_RESEND_PROBE_MS)
                ask_resend(self, src, now);
            if (now + PT_COMM_RESEND_PROBE_MS < wake)
                wake = now + PT_COMM_RESEND_PROBE_MS;
        }
        if (sleep_any(self, ring, -1, wake, &slept) < 0)
            return interrupted(self, "recv", err);
    }
}

int pt_comm_progress(pt_comm *self, pt_error *err)
{
    if (!self)
        return pt_error_set(err, PT_EINVAL, "comm: progress: NULL");
    int rc = pull_all(self, -1, 0, 0, NULL, NULL, err);
    return rc < 0 ? rc : drain_blocked_rings(self, err);
}

int pt_comm_internal_recv_frame(pt_comm *self, int src, uint64_t tag, pt_comm_frame *f,
                                pt_error *err)
{
    return recv_frame(self, src, tag, UINT64_MAX, f, err);
}

int pt_comm_internal_recv_frame_any(pt_comm *self, int src, uint64_t want, uint64_t mask,
                                    pt_comm_frame *f, pt_error *err)
{
    return recv_frame(self, src, want, mask, f, err);
}

void pt_comm_internal_frame_release(pt_comm *self, pt_comm_frame *f)
{
    if (f->ring) {
        pt_shm_ring_consume(f->ring);
        if (self->held == f->ring)
            self->held = NULL;
        f->ring = NULL;
    } else if (f->in_msg) {
        zmq_msg_close(&f->msg);
        f->in_msg = 0;
    }
    f->data = NULL;
    f->bytes = 0;
}

int pt_comm_internal_recv_msg(pt_comm *self, int src, uint64_t tag, zmq_msg_t *payload,
                              pt_error *err)
{
    pt_comm_frame f;
    int rc = pt_comm_internal_recv_frame(self, src, tag, &f, err);
    if (rc < 0)
        return rc;
    if (f.in_msg) {
        zmq_msg_init(payload);
        zmq_msg_move(payload, &f.msg);
        zmq_msg_close(&f.msg);
        return 0;
    }
    rc = zmq_msg_init_size(payload, f.bytes);
    if (rc == 0)
        memcpy(zmq_msg_data(payload), f.data, f.bytes);
    pt_comm_internal_frame_release(self, &f);
    return rc == 0 ? 0 : pt_error_set(err, PT_ENOMEM, "comm: out of memory");
}

int pt_comm_recv(pt_comm *self, int src, uint64_t tag, float *buf, size_t count, pt_error *err)
{
    char tb[64];
    if (!self || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "comm: recv: NULL argument");
    pt_comm_frame f;
    int rc = pt_comm_internal_recv_frame(self, src, tag, &f, err);
    if (rc < 0)
        return rc;
    size_t got = f.bytes / sizeof(float);
    if (got != count) {
        pt_comm_internal_frame_release(self, &f);
        return pt_error_set(err, PT_EINVAL,
                            "comm: rank %d: message %s from rank %d has %zu floats, the "
                            "receiver expects %zu",
                            self->rank, pt_comm_tag_str(tag, tb, sizeof tb), src, got, count);
    }
    if (count)
        memcpy(buf, f.data, count * sizeof(float));
    pt_comm_internal_frame_release(self, &f);
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

static void make_hdr(pt_comm *c, int dst, uint64_t tag, size_t bytes, unsigned char *h)
{
    wire_hdr w = {PT_COMM_MAGIC,    (uint32_t)c->rank, tag,   (uint64_t)(bytes / sizeof(float)),
                  c->send_seq[dst], c->token,          c->gen};
    hdr_write(h, &w);
}

/* Header and payload over the PUSH socket to dst. Takes *payload on success. */
static int zmq_send_msg(pt_comm *c, int dst, uint64_t tag, zmq_msg_t *payload, pt_error *err)
{
    size_t bytes = zmq_msg_size(payload);
    unsigned char h[PT_COMM_HEADER_BYTES];
    make_hdr(c, dst, tag, bytes, h);
    char tb[64];
    if (zmq_send(c->push[dst], h, sizeof h, ZMQ_SNDMORE) < 0) {
        int e = errno;
        if (e == ETERM)
            return interrupted(c, "send", err);
        return pt_error_set(
            err, e == EAGAIN ? PT_ETIMEOUT : PT_EIO, "comm: rank %d: send %s to rank %d: %s",
            c->rank, pt_comm_tag_str(tag, tb, sizeof tb), dst,
            e == EAGAIN ? "peer queue full for the whole timeout" : zmq_strerror(e));
    }
    keep_sent(c, dst, h, payload);
    /* The first part was accepted, so ZeroMQ accepts the rest of the message. */
    if (zmq_msg_send(payload, c->push[dst], 0) < 0)
        return pt_error_set(err, PT_EIO, "comm: rank %d: send %s to rank %d: %s", c->rank,
                            pt_comm_tag_str(tag, tb, sizeof tb), dst, zmq_strerror(errno));
    c->send_seq[dst]++;
    c->stats.msgs_sent++;
    c->stats.bytes_sent += PT_COMM_HEADER_BYTES + bytes;
    return 0;
}

typedef struct send_wait {
    pt_comm *c;
    int64_t deadline;
    pt_error *err;
    int rc;
} send_wait;

typedef struct room_wait {
    pt_shm_ring *ring;
    uint64_t tail; /* the receiver's count when the sender found it full */
} room_wait;

static int room_freed(pt_comm *c, const void *arg)
{
    const room_wait *w = arg;
    return pt_shm_ring_peer_count(w->ring) != w->tail || blocked_producer(c);
}

/* A full ring: receive what is queued for us meanwhile (into the stash) and
 * sleep until the receiver frees room, bounded by the send's deadline. */
static int ring_full_wait(void *arg, pt_shm_ring *r)
{
    send_wait *w = arg;
    /* Nobody sleeps on a wake-up held back while this rank waits. */
    pt_comm_internal_defer_wakes(w->c, 0);
    int rc = pull_all(w->c, -1, 0, 0, NULL, NULL, w->err);
    if (rc == 0)
        rc = drain_blocked_rings(w->c, w->err);
    if (rc == 0 && pt_comm_internal_now_ms() >= w->deadline)
        rc = PT_ETIMEOUT;
    room_wait rw = {r, pt_shm_ring_peer_count(r)};
    if (rc == 0 && !spin_until(w->c, room_freed, &rw) &&
        sleep_any(w->c, NULL, pt_shm_ring_wait_fd(r), w->deadline, NULL) < 0)
        rc = PT_ESTATE;
    w->rc = rc;
    return rc;
}

/* The ring to dst, made (and announced over ZeroMQ) at the first message.
 * NULL when dst is not local, shared memory is off or making it failed
 * (then ZeroMQ carries everything to dst). */
static pt_shm_ring *ring_to(pt_comm *c, int dst)
{
    if (c->out_ring[dst] || !c->shm_on || !c->local[dst] || c->shm_failed[dst])
        return c->out_ring[dst];
    pt_error e = {0};
    int rc = 0;
    if (!c->shm_dir[0])
        rc = pt_shm_make_dir(c->shm_dir, sizeof c->shm_dir, &e);
    pt_shm_ring *r = NULL;
    if (rc == 0)
        rc = pt_shm_ring_create(c->shm_dir, c->rank, dst, c->token, c->gen, c->ring_bytes, &r, &e);
    if (rc == 0) {
        const char *path = pt_shm_ring_path(r);
        size_t n = strlen(path) + 1;
        zmq_msg_t m;
        rc = zmq_msg_init_size(&m, n * sizeof(float)) == 0 ? 0 : PT_ENOMEM;
        if (rc == 0) {
            float *f = zmq_msg_data(&m);
            for (size_t i = 0; i < n; i++)
                f[i] = (float)(unsigned char)path[i];
            rc = zmq_send_msg(c, dst, pt_comm_tag(PT_COMM_SHM_HELLO, 0, 0), &m, &e);
            zmq_msg_close(&m);
            if (rc == 0) { /* transport control, not counted as a message */
                c->stats.msgs_sent--;
                c->stats.bytes_sent -= PT_COMM_HEADER_BYTES + n * sizeof(float);
            }
        }
    }
    if (rc < 0) {
        pt_shm_ring_destroy(&r);
        c->shm_failed[dst] = 1;
        if (rc != PT_ETIMEOUT && rc != PT_ESTATE)
            fprintf(stderr, "comm: rank %d: shared memory to rank %d: %s; using ZeroMQ\n", c->rank,
                    dst, e.msg);
        return NULL;
    }
    c->out_ring[dst] = r;
    c->stats.shm_peers_out++;
    return r;
}

/* A message of bytes that fill writes, to dst (not this rank) over its ring. */
static int ring_send_fill(pt_comm *c, pt_shm_ring *r, int dst, uint64_t tag, size_t bytes,
                          pt_shm_fill_fn *fill, void *fill_arg, pt_error *err)
{
    unsigned char h[PT_COMM_HEADER_BYTES];
    make_hdr(c, dst, tag, bytes, h);
    send_wait w = {c, pt_comm_internal_now_ms() + c->timeout_ms, err, 0};
    int rc = pt_shm_ring_send_fill(r, h, bytes, fill, fill_arg, ring_full_wait, &w);
    if (rc < 0) {
        char tb[64];
        if (rc == PT_ESTATE)
            return interrupted(c, "send", err);
        if (rc == PT_ETIMEOUT)
            return pt_error_set(err, PT_ETIMEOUT,
                                "comm: rank %d: send %s to rank %d: peer queue full for the whole "
                                "timeout",
                                c->rank, pt_comm_tag_str(tag, tb, sizeof tb), dst);
        return rc; /* err set by the progress it made */
    }
    c->send_seq[dst]++;
    c->stats.msgs_sent++;
    c->stats.bytes_sent += PT_COMM_HEADER_BYTES + bytes;
    return 0;
}

static void fill_copy(void *src, unsigned char *dst, size_t off, size_t len)
{
    memcpy(dst, (const unsigned char *)src + off, len);
}

/* bytes from data to dst (not this rank) over its ring. */
static int ring_send(pt_comm *c, pt_shm_ring *r, int dst, uint64_t tag, const void *data,
                     size_t bytes, pt_error *err)
{
    return ring_send_fill(c, r, dst, tag, bytes, fill_copy, (void *)(uintptr_t)data, err);
}

int pt_comm_internal_send_fill(pt_comm *self, int dst, uint64_t tag, size_t bytes,
                               pt_shm_fill_fn *fill, void *fill_arg, pt_error *err)
{
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    if (bytes % sizeof(float))
        return pt_error_set(err, PT_EINVAL, "comm: send: %zu bytes are not whole floats", bytes);
    pt_shm_ring *r = dst != self->rank ? ring_to(self, dst) : NULL;
    if (r)
        return ring_send_fill(self, r, dst, tag, bytes, fill, fill_arg, err);
    /* No ring: fill a buffer of the message's own and send that. */
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, bytes) != 0)
        return pt_error_set(err, PT_ENOMEM, "comm: send: no memory for %zu bytes", bytes);
    if (bytes)
        fill(fill_arg, zmq_msg_data(&m), 0, bytes);
    rc = pt_comm_internal_send_msg(self, dst, tag, &m, err);
    zmq_msg_close(&m);
    return rc;
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
    }
    pt_shm_ring *r = ring_to(self, dst);
    if (r) {
        rc = ring_send(self, r, dst, tag, zmq_msg_data(payload), bytes, err);
        if (rc == 0) { /* taken: the caller's close releases the frame */
        }
        return rc;
    }
    /* zmq_msg_send leaves *payload empty; closing it is harmless. */
    return zmq_send_msg(self, dst, tag, payload, err);
}

int pt_comm_internal_forward(pt_comm *self, int dst, uint64_t tag, pt_comm_frame *f, pt_error *err)
{
    int rc = check_dst(self, dst, err);
    if (rc < 0)
        return rc;
    if (dst != self->rank) {
        pt_shm_ring *r = ring_to(self, dst);
        if (r)
            return ring_send(self, r, dst, tag, f->data, f->bytes, err);
    }
    zmq_msg_t m;
    if (f->in_msg) {
        zmq_msg_init(&m);
        zmq_msg_copy(&m, &f->msg); /* shares the frame's data */
    } else if (pt_comm_shared_copy_msg(self->shared, &m, f->data, f->bytes) != 0) {
        return pt_error_set(err, PT_ENOMEM, "comm: send: no memory for %zu bytes", f->bytes);
    }
    rc = pt_comm_internal_send_msg(self, dst, tag, &m, err);
    zmq_msg_close(&m);
    return rc;
}

void pt_comm_internal_defer_wakes(pt_comm *self, int on)
{
    for (int r = 0; r < self->size; r++)
        if (self->out_ring[r])
            pt_shm_ring_defer_wake(self->out_ring[r], on);
}

int pt_comm_internal_copies_to(pt_comm *self, int dst)
{
    return dst != self->rank && dst >= 0 && dst < self->size && self->push[dst] &&
           ring_to(self, dst) != NULL;
}

/* count floats from buf to dst over its ring, when it has one: 1 sent, 0 no
 * ring (send otherwise), <0 error. */
static int try_ring_send(pt_comm *c, int dst, uint64_t tag, const float *buf, size_t count,
                         pt_error *err)
{
    if (dst == c->rank)
        return 0;
    pt_shm_ring *r = ring_to(c, dst);
    if (!r)
        return 0;
    int rc = ring_send(c, r, dst, tag, buf, count * sizeof(float), err);
    return rc < 0 ? rc : 1;
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
    if ((rc = try_ring_send(self, dst, tag, buf, count, err)) != 0)
        return rc < 0 ? rc : 0;
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
    /* Over a ring the copy into it is the send: buf is free at once. */
    if ((rc = try_ring_send(self, dst, tag, buf, count, err)) != 0)
        return rc < 0 ? rc : 0;
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
    if ((rc = try_ring_send(self, dst, tag, buf, count, err)) != 0)
        return rc < 0 ? rc : 0;
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
