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

#endif
