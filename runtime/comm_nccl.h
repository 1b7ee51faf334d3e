/* NCCL between GPUs: the unique id the console hands out in the assign
 * message (hex, protocol/message.h nccl_id), communicators built from it,
 * and the all-reduce and send/recv the executor uses on device buffers.
 *
 * The id text and the rule for when a run uses NCCL are host logic and are
 * always built; communicators live in the CUDA module (runtime/cuda_module.h),
 * loaded on first use, and exist only where it loads and was built with NCCL
 * (cmake/cuda.cmake, PT_HAVE_NCCL); otherwise their constructors return
 * PT_EUNSUPP with the reason (the module's load error, or "without NCCL").
 *
 * When NCCL is used. NCCL takes one GPU per rank of a communicator, so a run
 * uses it only when every worker is an agent on a CUDA device that offers the
 * "nccl" capability and no two workers share a (host, GPU bus id) pair
 * (pt_nccl_members_ok). Otherwise stages exchange tensors through host copies
 * over the ZeroMQ data plane (runtime/executor.h), which is also how several
 * stages share one GPU.
 *
 * Ordering. NCCL operations are enqueued on the backend's stream and do not
 * wait for the host; a send and its matching receive must be issued in the
 * same order on both ranks (the schedule programs issue a pair's messages in
 * micro-batch order). A send or receive blocks its stream until the peer's
 * matching call runs (for messages beyond NCCL's internal buffers, always
 * assumed here), so calls that must progress together, such as a stage's
 * send of one micro-batch's activations and its receive of another's
 * gradient from the same neighbour, are enqueued as one group
 * (pt_nccl_p2p_group; NCCL's "Point-to-point communication" guide).
 *
 * Errors. A failed enqueue is returned at once. Errors of an enqueued
 * operation, and a peer that never answers, surface in pt_nccl_wait, which
 * polls the stream (cudaStreamQuery) and NCCL's asynchronous error
 * (ncclCommGetAsyncError) instead of blocking, and aborts the communicator
 * (ncclCommAbort) on an error or at its timeout: a dead peer costs the
 * timeout, never a hang. An aborted communicator fails every later call;
 * destroy it.
 *
 * NCCL itself (libnccl.so.2) is opened at run time by the CUDA module the
 * first time it is needed; without it the CUDA backend works and only the
 * functions here say what did not load. */
#ifndef PT_RUNTIME_COMM_NCCL_H
#define PT_RUNTIME_COMM_NCCL_H

#include <stddef.h>

#include "protocol/error.h"
#include "protocol/message.h"
#include "runtime/backend.h"

#define PT_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define PT_NCCL_ID_HEX   (2 * PT_NCCL_ID_BYTES + 1)

_Static_assert(PT_NCCL_ID_HEX <= PT_MSG_NCCL_ID_MAX, "the assign message holds an NCCL id");

#define PT_NCCL_WAIT_MS 30000 /* pt_nccl_wait's timeout when the caller has none */

/* 1 when the CUDA module loads, was built with NCCL's header and opens
 * libnccl.so.2 (this loads both). */
int pt_nccl_built(void);

/* Writes the 128 id bytes as 256 lower-case hex digits and a NUL. Returns 0,
 * or PT_ERANGE when cap < PT_NCCL_ID_HEX. */
int pt_nccl_id_encode(const unsigned char id[PT_NCCL_ID_BYTES], char *hex, size_t cap);

/* Reads an id written by pt_nccl_id_encode. Returns 0, or PT_EINVAL (err
 * names the position) when hex is not exactly 256 hex digits. */
int pt_nccl_id_decode(const char *hex, unsigned char id[PT_NCCL_ID_BYTES], pt_error *err);

/* A new unique id (ncclGetUniqueId; needs no GPU) as hex into hex[cap >=
 * PT_NCCL_ID_HEX]. Returns 0, PT_EUNSUPP (no NCCL: err says why), PT_ERANGE
 * or PT_EIO. */
int pt_nccl_id_new(char *hex, size_t cap, pt_error *err);

/* What the console knows of one worker's agent. */
typedef struct pt_nccl_member {
    const char *host; /* register.host */
    const char *gpu;  /* register.gpu_bus_id; NULL or "": not on a GPU */
    int has_nccl;     /* register.capabilities holds "nccl" */
} pt_nccl_member;

/* 1 when a run over these n >= 2 workers should use NCCL (see the header
 * comment), else 0. */
int pt_nccl_members_ok(const pt_nccl_member *m, int n);

typedef struct pt_nccl pt_nccl;

/* Joins the communicator of `nranks` ranks named by hex_id as `rank`, on
 * the device and stream of CUDA backend be. Collective: every rank must call
 * it. On success *out owns the communicator; on failure *out is NULL and the
 * result is PT_EINVAL, PT_EUNSUPP (no NCCL, or be is not a CUDA backend) or
 * PT_EIO (err has NCCL's words). */
int pt_nccl_create(const char *hex_id, int nranks, int rank, const pt_backend *be, pt_nccl **out,
                   pt_error *err);

/* The sub-communicator of the ranks that pass the same color, ordered by key
 * (ncclCommSplit; collective over the parent). */
int pt_nccl_split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err);

void pt_nccl_destroy(pt_nccl **self_p); /* NULL-safe; sets *self_p = NULL */

int pt_nccl_rank(const pt_nccl *self);
int pt_nccl_size(const pt_nccl *self);

/* buf (device, count floats) = the sum over ranks, in place. */
int pt_nccl_allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err);

/* One point-to-point operation of a group. */
typedef struct pt_nccl_p2p {
    int send;     /* 1: send buf to peer (buf is only read); 0: receive into buf */
    int peer;     /* a rank of the communicator */
    float *buf;   /* device, count floats */
    size_t count; /* equal to the peer's matching call */
} pt_nccl_p2p;

/* Enqueues ops[0..n) (1 <= n <= PT_NCCL_GROUP_MAX) as one NCCL group: they
 * progress together, and the stream goes on once all are done. Operations
 * with the same peer and direction are matched in order. Returns 0, or
 * PT_EINVAL (a bad peer or n; nothing enqueued) or PT_EIO (NCCL's words). */
#define PT_NCCL_GROUP_MAX 64
int pt_nccl_p2p_group(pt_nccl *self, const pt_nccl_p2p *ops, int n, pt_error *err);

/* One send, one receive: groups of one. */
int pt_nccl_send(pt_nccl *self, int peer, const float *buf, size_t count, pt_error *err);
int pt_nccl_recv(pt_nccl *self, int peer, float *buf, size_t count, pt_error *err);

/* Sends sbuf to `to` and receives rbuf from `from` as one NCCL group (so a
 * ring shift, or a rank talking to itself, cannot deadlock). */
int pt_nccl_exchange(pt_nccl *self, int to, const float *sbuf, int from, float *rbuf, size_t count,
                     pt_error *err);

/* Waits until everything enqueued on the communicator's stream is done,
 * polling (see "Errors" above) for at most timeout_ms (<= 0:
 * PT_NCCL_WAIT_MS). Returns 0; PT_EIO (a CUDA or asynchronous NCCL error;
 * err has its words) or PT_ETIMEOUT (err says how long), after which the
 * communicator is aborted. */
int pt_nccl_wait(pt_nccl *self, int timeout_ms, pt_error *err);

#endif
