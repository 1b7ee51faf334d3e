/* Internal interface between runtime/comm.c (sockets, matching, stash) and
 * runtime/allreduce.c (ring all-reduce, collective thread). Not for other
 * modules: use runtime/comm.h. */
#ifndef PT_RUNTIME_COMM_INTERNAL_H
#define PT_RUNTIME_COMM_INTERNAL_H

#include <zmq.h>

#include "runtime/comm.h"

/* Receives the payload frame of the message (src, tag) into *out (which the
 * caller must zmq_msg_close on success; untouched on failure). Same matching,
 * stash and timeout rules as pt_comm_recv, without the copy. */
int pt_comm_internal_recv_msg(pt_comm *self, int src, uint64_t tag, zmq_msg_t *payload,
                              pt_error *err);

/* Sends *payload (a frame of whole floats) to dst under tag. Takes ownership
 * of *payload only on success; on failure the caller still closes it. */
int pt_comm_internal_send_msg(pt_comm *self, int dst, uint64_t tag, zmq_msg_t *payload,
                              pt_error *err);

/* Zero-copy send for the all-reduce, tracked by a counter the communicator
 * shares with the messages (so a release after pt_comm_destroy, possible
 * with a shared context, touches no freed memory). Same contract as
 * pt_comm_send_zc otherwise. */
int pt_comm_internal_send_ar_zc(pt_comm *self, int dst, uint64_t tag, const float *buf,
                                size_t count, pt_error *err);

/* Waits until every all-reduce zero-copy send released its buffer: 0 or
 * PT_ETIMEOUT. */
int pt_comm_internal_wait_ar_zc(pt_comm *self, int timeout_ms);

/* ---- allreduce.c: which algorithm an all-reduce takes ---- */

/* The direct all-reduce (each member sums its own chunk from every member's
 * copy, then sends the sum to all) is taken when PT_COMM_ALLREDUCE=direct is
 * in the environment, for groups of 3 to PT_COMM_DIRECT_MAX_GROUP members
 * and buffers of at most PT_COMM_DIRECT_MAX_FLOATS floats (what may arrive
 * early over ZeroMQ stays within a stash bound of twice the buffer); the
 * ring otherwise. Not the default: measured against the ring on 2 shared
 * cores (docs/benchmarks.md) it was not reliably faster. Every member must
 * see the same setting; the choice depends on it, p and count only. */
#define PT_COMM_DIRECT_MAX_GROUP  8
#define PT_COMM_DIRECT_MAX_FLOATS ((size_t)1 << 19) /* 2 MiB */
int pt_comm_internal_allreduce_direct(int p, size_t count);

/* ---- comm_pool.c: what in-flight messages may outlive the comm for ---- */

typedef struct pt_comm_shared pt_comm_shared;

/* A block with one reference (the communicator's); NULL on no memory. */
pt_comm_shared *pt_comm_shared_new(void);
/* The communicator lets go: idle pool buffers are freed now, the rest when
 * ZeroMQ releases them; the block goes with the last reference. */
void pt_comm_shared_close(pt_comm_shared *s);
/* The all-reduce's zero-copy completion counter. */
pt_comm_zc *pt_comm_shared_zc(pt_comm_shared *s);
/* Takes a reference; pt_comm_shared_zc_release (a zmq_free_fn whose hint is
 * the block) drops it and one pending count of the counter. */
void pt_comm_shared_hold(pt_comm_shared *s);
void pt_comm_shared_zc_release(void *data, void *hint);
/* Initialises *m with a copy of bytes from data, in a pooled buffer when the
 * size is worth pooling (4 KiB .. 2 GiB). 0 or PT_ENOMEM (m untouched). */
int pt_comm_shared_copy_msg(pt_comm_shared *s, zmq_msg_t *m, const void *data, size_t bytes);
/* Bytes of pooled buffers, in flight plus idle, now and at the peak. */
void pt_comm_shared_pool_bytes(pt_comm_shared *s, size_t *current, size_t *peak);

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t pt_comm_internal_now_ms(void);

/* ---- frames: what a receive hands the all-reduce without copying ---- */

/* Writes payload bytes [off, off + len) of a message at dst (in a ring:
 * 64-byte aligned; len and off whole floats). */
typedef void pt_shm_fill_fn(void *arg, unsigned char *dst, size_t off, size_t len);

/* A received message's payload: in a ZeroMQ frame (stash or socket) or still
 * in a shared-memory ring, which it holds until released. */
typedef struct pt_comm_frame {
    uint64_t tag;              /* the message's tag */
    const unsigned char *data; /* bytes floats, possibly unaligned (tcp) */
    size_t bytes;
    int in_msg; /* 1: data lives in msg */
    zmq_msg_t msg;
    struct pt_shm_ring *ring; /* not NULL: data lives in this ring until released */
} pt_comm_frame;

/* Receives (src, tag) as a frame; same matching, stash and timeout rules as
 * pt_comm_recv. At most one frame may be held at a time; release it with
 * pt_comm_internal_frame_release before the next receive or send. */
int pt_comm_internal_recv_frame(pt_comm *self, int src, uint64_t tag, pt_comm_frame *f,
                                pt_error *err);
void pt_comm_internal_frame_release(pt_comm *self, pt_comm_frame *f);
/* The same for the oldest message from src whose tag t has
 * (t & mask) == (want & mask), whichever arrived first: f->tag says which. */
int pt_comm_internal_recv_frame_any(pt_comm *self, int src, uint64_t want, uint64_t mask,
                                    pt_comm_frame *f, pt_error *err);
/* Holds back (on) or sends now (0) the wake-ups of the consumers of this
 * rank's rings (pt_shm_ring_defer_wake); must be 0 again before any
 * receive. */
void pt_comm_internal_defer_wakes(pt_comm *self, int on);
/* 1 when a send to dst is a copy made before the send returns (a
 * shared-memory ring, made now if it is to be), 0 when it may be zero-copy. */
int pt_comm_internal_copies_to(pt_comm *self, int dst);
/* Sends a message of bytes (whole floats) to dst under tag whose payload
 * fill writes: into dst's shared-memory ring where it has one (no copy of
 * its own), else into a buffer that is then sent. The frame held, if any,
 * stays held. */
int pt_comm_internal_send_fill(pt_comm *self, int dst, uint64_t tag, size_t bytes,
                               pt_shm_fill_fn *fill, void *fill_arg, pt_error *err);
/* Sends a held frame's payload on to dst under tag: shares a ZeroMQ frame
 * where the path allows, copies otherwise. The frame stays held. */
int pt_comm_internal_forward(pt_comm *self, int dst, uint64_t tag, pt_comm_frame *f, pt_error *err);

/* ---- comm_shm.c: shared-memory rings between ranks on one host ---- */

#define PT_SHM_PATH_MAX 200

typedef struct pt_shm_ring pt_shm_ring;

/* A private 0700 folder under /dev/shm for this communicator's rings. */
int pt_shm_make_dir(char *dir, size_t cap, pt_error *err);
/* The sender makes the ring src -> dst of capacity bytes (rounded up to a
 * power of two) in dir; the receiver attaches it by path, checking that it
 * is a regular 0600 file of this user whose control block names the same
 * token, generation, src and dst. 0 or a negative code with err set. */
int pt_shm_ring_create(const char *dir, int src, int dst, uint64_t token, uint64_t generation,
                       size_t capacity, pt_shm_ring **out, pt_error *err);
int pt_shm_ring_attach(const char *path, int src, int dst, uint64_t token, uint64_t generation,
                       pt_shm_ring **out, pt_error *err);
/* Unmaps, closes and removes the ring's names. NULL-safe. */
void pt_shm_ring_destroy(pt_shm_ring **r_p);
const char *pt_shm_ring_path(const pt_shm_ring *r);
/* The fd that becomes readable when the other side wakes this one. */
int pt_shm_ring_wait_fd(const pt_shm_ring *r);
size_t pt_shm_ring_piece_max(const pt_shm_ring *r);

/* Called by a sender whose ring is full: waits (bounded) for the fd of
 * pt_shm_ring_wait_fd(r) or other progress; 0 to look again, < 0 to give up. */
typedef int pt_shm_wait_fn(void *arg, pt_shm_ring *r);
/* Writes one message: the 48-byte header and bytes of payload, in pieces. */
int pt_shm_ring_send(pt_shm_ring *r, const unsigned char *hdr, const void *payload, size_t bytes,
                     pt_shm_wait_fn *wait, void *arg);

/* pt_shm_ring_send whose payload fill writes straight into the ring (so a
 * sum or a copy made for the send needs no buffer of its own). */
int pt_shm_ring_send_fill(pt_shm_ring *r, const unsigned char *hdr, size_t bytes,
                          pt_shm_fill_fn *fill, void *fill_arg, pt_shm_wait_fn *wait, void *arg);

enum { PT_SHM_MSG = 1, PT_SHM_CONT = 2 };
typedef struct pt_shm_rec {
    int type;                  /* PT_SHM_MSG: header then first piece; PT_SHM_CONT: next piece */
    const unsigned char *data; /* in the ring, 48-byte aligned header / 64-byte aligned piece */
    size_t len;
} pt_shm_rec;
/* The next record: 1 (in *rec, valid until consumed), 0 none yet, PT_EPARSE
 * a corrupt ring. */
int pt_shm_ring_peek(pt_shm_ring *r, pt_shm_rec *rec);
/* One look of pt_shm_ring_peek at the record at tail, a value of the ring's
 * tail read earlier (exposed so a test can hold a receiver between reading
 * tail and reading the record, where the producer's rewind of an empty ring
 * raced it): the same returns, or PT_SHM_AGAIN when tail moved meanwhile or
 * a PAD was consumed (read tail again and retry). */
#define PT_SHM_AGAIN 2
int pt_shm_ring_peek_from(pt_shm_ring *r, uint64_t tail, pt_shm_rec *rec);
/* Producer: overwrites the data area from its start with bytes (at most the
 * capacity) and sets head and tail, as a faulty or hostile producer sharing
 * the mapping could (the fuzz harness of the consumer). */
void pt_shm_ring_forge(pt_shm_ring *r, uint64_t head, uint64_t tail, const void *bytes, size_t n);
/* The ring's capacity in bytes (a power of two). */
size_t pt_shm_ring_capacity(const pt_shm_ring *r);
/* The ring's tail now (the receiver's count of consumed bytes). */
uint64_t pt_shm_ring_tail(const pt_shm_ring *r);
/* Producer: on, a consumer found asleep by a send is woken only when this is
 * called again with on = 0 (so a rank that sends to several peers in a row
 * is not preempted by the first it wakes); a sender whose ring is full
 * still wakes its consumer at once. */
void pt_shm_ring_defer_wake(pt_shm_ring *r, int on);
/* Frees the record last peeked (waking a sender that waits for room). */
void pt_shm_ring_consume(pt_shm_ring *r);
void pt_shm_ring_consume_to(pt_shm_ring *r, uint64_t tail);
/* Before a receiver sleeps: sets its flag; 1 when data came meanwhile. */
int pt_shm_ring_prepare_sleep(pt_shm_ring *r);
/* After it woke: clears the flag, and the FIFO when fd_ready (its fd
 * polled readable; a FIFO left with bytes only wakes a later poll early). */
void pt_shm_ring_woke(pt_shm_ring *r, int fd_ready);
/* Receiver: 1 when a record waits (no system call, for spinning). */
int pt_shm_ring_readable(const pt_shm_ring *r);
/* What the other side last published: the sender's view of tail, the
 * receiver's of head; a change means progress (for spinning). */
uint64_t pt_shm_ring_peer_count(const pt_shm_ring *r);
/* 1 when the sender waits for room (the receiver should drain). */
int pt_shm_ring_producer_waiting(const pt_shm_ring *r);

/* ---- comm_resend.c: what was sent to a peer, kept to be sent again ---- */

/* Frames sent to one peer over ZeroMQ, in sequence, each copied: the newest
 * always, older ones while the copies stay within limit_bytes. A frame
 * written into a TCP connection that then breaks is lost with it (ZeroMQ
 * reconnects, but does not resend); the receiver, finding a gap or waiting
 * long, asks for everything from its next sequence number (tag kind
 * PT_COMM_RESEND) and this window answers. first_seq: the sequence number of
 * the first frame it will be given (none before it can be served). */
typedef struct pt_resend_store pt_resend_store;
pt_resend_store *pt_resend_store_new(size_t limit_bytes, uint64_t first_seq);
void pt_resend_store_free(pt_resend_store **s_p);
/* Keeps a copy of the frame hdr (PT_COMM_HEADER_BYTES) + data whose
 * sequence number is seq (one above the last kept). PT_ENOMEM: not kept,
 * and nothing before it can be served any more. */
int pt_resend_store_keep(pt_resend_store *s, const unsigned char *hdr, uint64_t seq,
                         const void *data, size_t bytes);
/* The frames kept from sequence number from on: their count (0: none sent
 * since), *first the index of the first for pt_resend_store_at; PT_ENOTFOUND
 * when some frame at or after from is no longer kept. */
int pt_resend_store_from(const pt_resend_store *s, uint64_t from, int *first);
void pt_resend_store_at(const pt_resend_store *s, int k, const unsigned char **hdr,
                        const void **data, size_t *bytes);
/* Bytes of payload kept (0 for NULL). */
size_t pt_resend_store_bytes(const pt_resend_store *s);

#endif
