/* Point-to-point and collective transport for one pipeline worker: over
 * shared memory between ranks on one host, over ZeroMQ otherwise.
 *
 * A communicator belongs to one worker (a process, or a thread in tests) with
 * a rank in [0, size). It binds one PULL socket for everything addressed to it
 * and connects one PUSH socket per peer it talks to. Every data message is two
 * frames:
 *
 *   frame 1, header, 48 bytes, little-endian:
 *     u32 magic "PTC2" (0x32435450), u32 source rank, u64 tag, u64 float count,
 *     u64 per-(source, destination) sequence number (from 0, +1 per message),
 *     u64 run token, u64 plan generation
 *   frame 2, payload: count IEEE-754 binary32 floats, little-endian (raw host
 *     floats; pt_comm_create refuses a big-endian host with PT_EUNSUPP)
 *
 * so a receiver learns the sender from the header, not from the socket.
 * A frame is accepted only when its token and generation are the
 * communicator's, its source is a peer that reaches this rank over that
 * path, and its sequence number is the next one expected from that source;
 * anything else is dropped and counted (pt_comm_stats.dropped_*), so forged,
 * replayed and stale frames never reach a receive. See docs/protocol.md.
 *
 * Shared memory: when a peer's endpoint is local (ipc://, inproc://, tcp on
 * a loopback address) the sender makes a ring in its own 0700 folder under
 * /dev/shm at its first message and announces it with a "ring" frame over
 * ZeroMQ (tag kind PT_COMM_SHM_HELLO, the path as payload; checked like any
 * frame); every later message to that peer goes through the ring, and a
 * ZeroMQ frame claiming to come from that peer is dropped. Wake-ups are FIFO
 * bytes written only to a side that said it sleeps. Off with
 * pt_comm_config.shm = -1 or PT_COMM_SHM=0 in the environment.
 *
 * Messages from one peer may arrive in any order relative to what the receiver
 * asks for: recv() takes the first queued message with the wanted (source,
 * tag) and keeps the others in a stash (the early-arrival buffer) whose bytes
 * are bounded by pt_comm_config.stash_limit_bytes: a frame that would exceed
 * it is dropped and counted instead of growing the buffer. A matching message
 * is copied once, straight from the frame or ring into the caller's buffer.
 *
 * Resending: a frame written into a TCP connection that then breaks (a
 * network cut) is lost with it; ZeroMQ reconnects but does not send it again.
 * So each frame sent over ZeroMQ to a peer on another host is also kept, in a
 * window of the newest (pt_comm_config.resend_bytes).
 * A receiver that finds a gap in such a source's sequence numbers, or has
 * waited PT_COMM_RESEND_PROBE_MS for one, asks it for everything from the
 * first number missing (a frame of tag kind PT_COMM_RESEND, checked like any
 * frame but out of sequence: its own number is 2^64 - 1), again for the same
 * number after 1, 2, then every 4 probe periods. The source, whenever it
 * receives, sends its kept frames from there again, as they were. From such
 * a source frames are taken in any order within RECV_WINDOW (4,096) of the
 * first one missing, each once; duplicates are dropped by their numbers. A
 * frame no longer kept cannot come again: the receive times out as before,
 * and the source counts the request (resend_unserved).
 *
 * Threads: a pt_comm and its sockets are used by one thread at a time (ZeroMQ
 * sockets are not thread-safe). To overlap an all-reduce with compute, give a
 * second, connected communicator to a pt_collective (below), which drives it
 * from its own thread. inproc:// endpoints need every communicator that talks
 * over them to share one ZeroMQ context (pt_comm_config.zmq_context).
 *
 * Every blocking call is bounded by the communicator's timeout. */
#ifndef PT_RUNTIME_COMM_H
#define PT_RUNTIME_COMM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"

#define PT_COMM_MAX_RANKS    4096 /* ranks of one communicator */
#define PT_COMM_MAX_GROUP    256  /* ranks of one all-reduce ring */
#define PT_COMM_HEADER_BYTES 48
#define PT_COMM_MAGIC        0x32435450u /* "PTC2" read as little-endian u32 */
/* Defaults of pt_comm_config's bounds (0 there means these). */
#define PT_COMM_DEFAULT_STASH_BYTES  ((size_t)256 << 20) /* early-arrival buffer */
#define PT_COMM_DEFAULT_MAX_MSG      ((size_t)512 << 20) /* ZMQ_MAXMSGSIZE of every socket */
#define PT_COMM_DEFAULT_RING_BYTES   ((size_t)8 << 20)   /* one shared-memory ring */
#define PT_COMM_DEFAULT_RESEND_BYTES ((size_t)32 << 20)  /* sent frames kept per remote peer */
#define PT_COMM_RESEND_OFF           ((size_t)-1)        /* pt_comm_config.resend_bytes: none */
#define PT_COMM_RESEND_PROBE_MS      1000 /* a wait this long asks the source to send again */
#define PT_COMM_ENDPOINT_MAX         256  /* bytes, with the NUL */

/* What a message carries; the top 8 bits of a tag. */
typedef enum pt_comm_kind {
    PT_COMM_ACT = 1,         /* forward activations */
    PT_COMM_GRAD = 2,        /* backward gradients w.r.t. activations */
    PT_COMM_ALLREDUCE = 3,   /* all-reduce traffic (used internally) */
    PT_COMM_USER = 4,        /* anything else (tests, benchmarks, barriers) */
    PT_COMM_RESEND = 0xFD,   /* internal: "send me again what you sent from sequence number N" */
    PT_COMM_SHM_HELLO = 0xFE /* internal: "my messages to you now come through this ring" */
} pt_comm_kind;

#define PT_COMM_TAG_PART_MAX 0xFFFFFFu /* 24 bits */

/* A tag: kind (8 bits) | micro-batch (32 bits) | part (24 bits: row range of
 * a split micro-batch, step of a ring...). part is masked to 24 bits. */
static inline uint64_t pt_comm_tag(pt_comm_kind kind, uint32_t microbatch, uint32_t part)
{
    return ((uint64_t)(kind & 0xFF) << 56) | ((uint64_t)microbatch << 24) |
           (uint64_t)(part & PT_COMM_TAG_PART_MAX);
}
static inline pt_comm_kind pt_comm_tag_kind(uint64_t tag)
{
    return (pt_comm_kind)(tag >> 56);
}
static inline uint32_t pt_comm_tag_microbatch(uint64_t tag)
{
    return (uint32_t)(tag >> 24);
}
static inline uint32_t pt_comm_tag_part(uint64_t tag)
{
    return (uint32_t)(tag & PT_COMM_TAG_PART_MAX);
}

/* Writes "act/mb3/part0" (or "kind9/...") into buf; returns buf. */
const char *pt_comm_tag_str(uint64_t tag, char *buf, size_t size);

typedef struct pt_comm pt_comm;

typedef struct pt_comm_config {
    int rank;                  /* this worker, in [0, size) */
    int size;                  /* ranks in the communicator, 1..PT_COMM_MAX_RANKS */
    const char *bind_endpoint; /* "tcp://127.0.0.1:*" (ephemeral port), "tcp://127.0.0.1:5601",
                                  "ipc:///tmp/dir/r0", "inproc://name" */
    void *zmq_context;         /* NULL: the communicator makes and owns a context */
    int timeout_ms;            /* bound of every blocking call, > 0 */
    /* From here on, zero means the default. */
    uint64_t run_token;       /* every frame carries it; others are dropped (0 allowed: tests) */
    uint64_t generation;      /* the plan generation frames must carry */
    size_t stash_limit_bytes; /* early-arrival buffer bound (default PT_COMM_DEFAULT_STASH_BYTES);
                                 callers derive it from the schedule's in-flight messages */
    size_t max_msg_bytes;     /* largest payload accepted: ZMQ_MAXMSGSIZE on every socket */
    int shm;                  /* 0: shared memory to local peers unless PT_COMM_SHM=0; -1: off */
    size_t shm_ring_bytes;    /* capacity of each ring (default PT_COMM_DEFAULT_RING_BYTES) */
    int no_linger;            /* 1: closing drops what is still queued to a peer at once, instead
                                 of waiting up to the timeout for it to leave (for a caller that
                                 closes only when every message was taken, or is lost anyway) */
    size_t resend_bytes; /* frames sent over ZeroMQ kept per peer to be sent again when a broken
                            connection lost them (see "Resending" above): 0 keeps
                            PT_COMM_DEFAULT_RESEND_BYTES for peers on other hosts and none for
                            local ones (nothing is lost there); PT_COMM_RESEND_OFF none at all;
                            any other value that bound for every ZeroMQ peer */
} pt_comm_config;

/* Counters for telemetry and memory accounting. Bytes count headers and
 * payload as they go on the wire or ring; messages to oneself never touch a
 * socket and are not counted (their payload does count in stash_bytes). */
typedef struct pt_comm_stats {
    uint64_t bytes_sent, bytes_recv;
    uint64_t msgs_sent, msgs_recv;
    uint64_t early_arrivals;     /* messages stashed because another one was wanted */
    uint64_t bad_msgs;           /* frames dropped, all reasons: the sum of the six below */
    uint64_t dropped_malformed;  /* bad magic, header or payload size, parts */
    uint64_t dropped_token;      /* another run's token */
    uint64_t dropped_generation; /* this run's token, another plan generation's */
    uint64_t dropped_sender;     /* source out of range, this rank, or not the path it uses */
    uint64_t dropped_seq;        /* not the next sequence number of its source (replay, gap) */
    uint64_t dropped_overflow;   /* would have grown the stash past its bound */
    uint64_t shm_peers_out, shm_peers_in; /* peers reached / heard over shared memory */
    uint64_t handshakes_failed;           /* PUSH handshakes refused or failed (socket replaced) */
    uint64_t resend_asked;                /* requests sent for frames a peer sent again */
    uint64_t resent;                      /* frames this rank sent again, asked by a peer */
    uint64_t resend_unserved;             /* requests for frames no longer kept here */
    size_t resend_bytes;                  /* payload bytes kept to be sent again, now */
    size_t stash_bytes;                   /* payload bytes waiting in the stash now */
    size_t stash_peak_bytes;              /* high-water mark of stash_bytes */
    size_t pool_bytes;                    /* send buffers kept for reuse, in flight or idle */
    size_t pool_peak_bytes;               /* high-water mark of pool_bytes */
} pt_comm_stats;

/* Creates a communicator and binds its receiving socket (nothing is sent).
 * On success *out owns it; on failure *out is NULL and err says why
 * (PT_EINVAL bad config, PT_EIO bind failed, PT_EUNSUPP big-endian host). */
int pt_comm_create(const pt_comm_config *cfg, pt_comm **out, pt_error *err);

/* Called on each socket before it binds (peer -1: the receiving PULL) or
 * connects (peer r: the PUSH to rank r), to set options of the caller's,
 * such as CURVE keys (runtime/trust.h). A negative return (err set) fails
 * the create or connect. */
typedef int (*pt_comm_socket_hook)(void *user, void *socket, int peer, pt_error *err);

/* pt_comm_create with a socket hook (NULL: none), kept by the communicator
 * for pt_comm_connect; user must outlive it. */
int pt_comm_create_hooked(const pt_comm_config *cfg, pt_comm_socket_hook hook, void *user,
                          pt_comm **out, pt_error *err);

/* The endpoint actually bound (the ephemeral port resolved, from
 * ZMQ_LAST_ENDPOINT), to give to the peers. Owned by the communicator. */
const char *pt_comm_endpoint(const pt_comm *self);

/* Connects to the peers: endpoints[r] is the bound endpoint of rank r, for
 * r in [0, size); a NULL entry means "never talk to r"; this rank's own entry
 * is ignored (messages to oneself never touch a socket). Connecting needs no
 * live peer: messages queue until it appears. May be called once. */
int pt_comm_connect(pt_comm *self, const char *const *endpoints, pt_error *err);

/* Waits until every PUSH socket pt_comm_connect opened has completed its
 * handshake with the peer (CURVE: the peer's ZAP handler took this rank's
 * key), so that what is sent next reaches a socket that accepts it. A
 * refused or failed handshake ends that connection for good in libzmq, so
 * its socket is replaced (nothing was sent on it) and tried again after
 * PT_COMM_HANDSHAKE_RETRY_MS, doubling up to 2^PT_COMM_HANDSHAKE_BACKOFF_STEPS
 * times that. Returns 0 when all are confirmed; PT_EREFUSED naming the peer,
 * its endpoint and the refusal once a peer failed max_failures handshakes
 * (0: no such bound); PT_ETIMEOUT naming the first unconfirmed peer after
 * timeout_ms; PT_ESTATE after pt_comm_interrupt. Call it before the first
 * send; calling it again returns at once for confirmed peers. */
#define PT_COMM_HANDSHAKE_RETRY_MS      20
#define PT_COMM_HANDSHAKE_BACKOFF_STEPS 5
int pt_comm_await_peers(pt_comm *self, int timeout_ms, int max_failures, pt_error *err);

/* Create and connect in one: binds endpoints[cfg->rank] (cfg->bind_endpoint
 * is ignored) and connects to the others (without awaiting the handshakes),
 * for when every endpoint is known
 * beforehand (fixed ports, ipc paths, inproc names). Same contract as
 * pt_comm_create + pt_comm_connect; on failure nothing is left open. */
int pt_comm_open(const pt_comm_config *cfg, const char *const *endpoints, pt_comm **out,
                 pt_error *err);

/* Callable from any thread: shuts the communicator's ZeroMQ context down
 * (zmq_ctx_shutdown), so every blocked and later send, receive and
 * all-reduce on it — and on every other communicator or socket sharing that
 * context — returns PT_ESTATE ("interrupted") at once. Only
 * pt_comm_destroy is useful afterwards. 0, or PT_EINVAL / PT_EIO. */
int pt_comm_interrupt(pt_comm *self);

/* Closes the sockets (each lingers at most the timeout so queued messages
 * still leave) and, if it owns it, the context. NULL-safe; sets *self_p = NULL. */
void pt_comm_destroy(pt_comm **self_p);

int pt_comm_rank(const pt_comm *self);
int pt_comm_size(const pt_comm *self);
int pt_comm_timeout_ms(const pt_comm *self);
/* Changes the bound of later calls; PT_EINVAL unless timeout_ms > 0. */
int pt_comm_set_timeout(pt_comm *self, int timeout_ms);
/* Copies the counters (either argument NULL: no-op). */
void pt_comm_stats_get(const pt_comm *self, pt_comm_stats *out);

/* Reads what has arrived, without blocking: requests to send again are
 * answered (see "Resending" above), messages wait in the stash for their
 * receive. For a rank with nothing to receive now whose peers may still ask
 * it for what a broken connection lost. 0, or <0 with err set. */
int pt_comm_progress(pt_comm *self, pt_error *err);

/* Sends count floats from buf to rank dst under tag. buf is copied before the
 * call returns, so the caller may reuse it at once; the copy lives in a pooled
 * buffer (power-of-two size classes from 4 KiB, at most 512 MiB kept idle)
 * that is reused once ZeroMQ is done with it. count may be 0.
 * PT_EINVAL bad rank/tag or dst not connected; PT_ETIMEOUT when the peer's
 * queue stays full for the timeout; PT_EIO other socket errors. */
int pt_comm_send(pt_comm *self, int dst, uint64_t tag, const float *buf, size_t count,
                 pt_error *err);

/* Completion counter for zero-copy sends; caller-owned, zero-initialise it
 * (or call pt_comm_zc_init). One counter may track many sends. */
typedef struct pt_comm_zc {
    atomic_int pending; /* sends whose buffer ZeroMQ still holds; read it via pt_comm_zc_wait */
} pt_comm_zc;

void pt_comm_zc_init(pt_comm_zc *zc);

/* Zero-copy send: ZeroMQ sends straight from buf, which the caller must not
 * modify or free until pt_comm_zc_wait(zc) returns 0. zc (and buf) must
 * outlive the communicator if the wait is skipped or times out. On error
 * nothing was queued and zc is unchanged. A send to oneself copies. */
int pt_comm_send_zc(pt_comm *self, int dst, uint64_t tag, const float *buf, size_t count,
                    pt_comm_zc *zc, pt_error *err);

/* Waits until every send tracked by zc released its buffer: 0, or
 * PT_ETIMEOUT after timeout_ms (the sends stay tracked). */
int pt_comm_zc_wait(pt_comm_zc *zc, int timeout_ms);

/* Receives the message with this (src, tag) into buf, which must hold exactly
 * the count floats the sender sent: a different count is PT_EINVAL and the
 * message is dropped (nothing is written to buf). Messages for other tags
 * that arrive meanwhile are stashed. PT_ETIMEOUT when none arrives within the
 * timeout; PT_ESTATE after pt_comm_interrupt. src may equal this rank (a
 * message sent to oneself). */
int pt_comm_recv(pt_comm *self, int src, uint64_t tag, float *buf, size_t count, pt_error *err);

/* ---- all-reduce ---------------------------------------------------------- */

/* Ranks of one ring (the replicas of one stage), in ring order. Every member
 * must build the same group and issue the same sequence of all-reduces on it:
 * next_id numbers them so that consecutive all-reduces never mix. */
typedef struct pt_comm_group {
    int size;
    int ranks[PT_COMM_MAX_GROUP];
    uint32_t next_id;
} pt_comm_group;

/* Fills a group from ranks[0..n); PT_EINVAL if n is not in 1..PT_COMM_MAX_GROUP,
 * a rank is negative or repeated. */
int pt_comm_group_init(pt_comm_group *group, const int *ranks, int n);

enum {
    PT_COMM_SUM = 0,    /* buf = sum over the group */
    PT_COMM_AVERAGE = 1 /* buf = sum / group size */
};

/* Floats per ring message: larger chunks are cut into segments so a rank
 * forwards the first segment while the next one is still on the wire. */
#define PT_COMM_SEGMENT_FLOATS 65536

/* All-reduce of buf[0..count) in place over group (this rank must be in
 * it). The ring: reduce-scatter then all-gather, 2(p-1) steps, count split
 * into p chunks of floor or ceil(count/p) floats (so any count works, even
 * < p), each chunk in segments of at most PT_COMM_SEGMENT_FLOATS. With
 * PT_COMM_ALLREDUCE=direct in the environment, 3 to 8 ranks and at most
 * 2 MiB (runtime/comm_internal.h), the direct one instead: each rank takes its chunk from every
 * other member, sums it in the ring's order and sends the sum to all (two hand-offs instead of
 * 2(p-1)); its results are the ring's, bit for bit (docs/benchmarks.md says when it is faster).
 * Either way each chunk is summed once and then copied, so every member ends with bit-identical
 * results. p = 1 returns at once (averaging by 1 changes nothing). Each receive is bounded by the
 * timeout: PT_ETIMEOUT names the step and peer; PT_EINVAL when members passed different counts. On
 * error buf holds partial sums, and the reduce-scatter's zero-copy sends may still read parts of it
 * until pt_comm_destroy returns (a communicator that owns its context) or the shared context is
 * terminated: keep buf until then. */
int pt_comm_allreduce(pt_comm *self, pt_comm_group *group, float *buf, size_t count, int op,
                      pt_error *err);

/* ---- asynchronous all-reduce (Pipe-SGD: reduce step t while computing t+1) */

typedef struct pt_collective pt_collective;

/* Takes ownership of a connected communicator (*comm_p is set to NULL) and
 * starts a thread that alone uses it from now on. On failure *comm_p is left
 * to the caller and *out is NULL. */
int pt_collective_create(pt_comm **comm_p, pt_collective **out, pt_error *err);

/* Starts an all-reduce of buf on the thread; buf belongs to the collective
 * until pt_collective_wait returns anything but PT_ETIMEOUT (or the
 * collective is destroyed; the error caveat of pt_comm_allreduce applies).
 * group is copied (its next_id advanced in *group too, so the caller's copy
 * stays in step). One operation at a time: PT_ESTATE while one is in flight
 * or finished but not yet waited for. */
int pt_collective_start(pt_collective *self, pt_comm_group *group, float *buf, size_t count, int op,
                        pt_error *err);

/* 1 when the operation in flight finished (or none is in flight), else 0. */
int pt_collective_test(pt_collective *self);

/* Waits for the operation in flight; returns its status (0, or its error in
 * err), or PT_ETIMEOUT if it is still running after timeout_ms. 0 when none. */
int pt_collective_wait(pt_collective *self, int timeout_ms, pt_error *err);

/* Counters of the owned communicator, as of the last finished operation. */
void pt_collective_stats(pt_collective *self, pt_comm_stats *out);

/* Waits for the operation in flight (bounded by the timeout of the comm),
 * stops the thread, destroys the communicator. NULL-safe; sets *self_p = NULL. */
void pt_collective_destroy(pt_collective **self_p);

#endif
