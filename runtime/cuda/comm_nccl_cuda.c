/* NCCL communicators, the module's side (runtime/cuda_module.h): the calls
 * behind runtime/comm_nccl.h, which has checked the arguments it can (a CUDA
 * backend, the ranks, the id's hex, peers inside the communicator).
 *
 * libnccl.so.2 is not linked: it is opened with dlopen the first time the
 * core asks for NCCL (nccl_load), so the module, and with it the CUDA
 * backend, loads on a machine without it. Only nccl.h is needed to build. */
#define _GNU_SOURCE /* RTLD_* and nanosleep under -std=c11 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "runtime/cuda_module.h"

_Static_assert(sizeof(ncclUniqueId) == PT_NCCL_ID_BYTES, "ncclUniqueId is 128 bytes");

#define NCCL_LIBRARY_ENV "PIPETOP_NCCL_LIBRARY"
#define NCCL_LIBRARY     "libnccl.so.2"
#define NCCL_MIN_VERSION 21800 /* 2.18: ncclCommSplit */
#define POLL_SPIN        200   /* polls without sleeping before waiting POLL_SLEEP_NS */
#define POLL_SLEEP_NS    50000

/* Every NCCL function the module calls, resolved from the library. */
#define NCCL_FUNCS(X)                                                                              \
    X(ncclGetVersion)                                                                              \
    X(ncclGetUniqueId)                                                                             \
    X(ncclCommInitRank)                                                                            \
    X(ncclCommSplit)                                                                               \
    X(ncclCommDestroy)                                                                             \
    X(ncclCommAbort)                                                                               \
    X(ncclCommUserRank)                                                                            \
    X(ncclCommCount)                                                                               \
    X(ncclCommGetAsyncError)                                                                       \
    X(ncclGetErrorString)                                                                          \
    X(ncclAllReduce)                                                                               \
    X(ncclSend)                                                                                    \
    X(ncclRecv)                                                                                    \
    X(ncclGroupStart)                                                                              \
    X(ncclGroupEnd)

static struct {
#define NCCL_FIELD(f) __typeof__(&f) f;
    NCCL_FUNCS(NCCL_FIELD)
#undef NCCL_FIELD
} g_nccl;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;
static pt_error g_nccl_why; /* empty once loaded */

struct pt_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device, rank, size;
    int aborted; /* ncclCommAbort was called: comm is gone */
};

/* Opens the library named by $PIPETOP_NCCL_LIBRARY or libnccl.so.2 and
 * resolves NCCL_FUNCS; g_nccl_why says why not. Never closed. */
static void nccl_open(void)
{
    const char *env = getenv(NCCL_LIBRARY_ENV);
    const char *path = env && *env ? env : NCCL_LIBRARY;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        pt_error_set(&g_nccl_why, PT_EUNSUPP, "nccl: cannot load %s: %s", path,
                     why ? why : "dlopen failed");
        return;
    }
#define NCCL_SYM(f)                                                                                \
    if (!(g_nccl.f = (__typeof__(g_nccl.f))dlsym(h, #f))) {                                        \
        pt_error_set(&g_nccl_why, PT_EUNSUPP, "nccl: %s has no %s", path, #f);                     \
        return;                                                                                    \
    }
    NCCL_FUNCS(NCCL_SYM)
#undef NCCL_SYM
    int version = 0;
    if (g_nccl.ncclGetVersion(&version) != ncclSuccess || version < NCCL_MIN_VERSION) {
        pt_error_set(&g_nccl_why, PT_EUNSUPP, "nccl: %s is version %d; %d or newer is needed", path,
                     version, NCCL_MIN_VERSION);
        return;
    }
    g_nccl_why.code = 0;
}

static int nccl_load(pt_error *err)
{
    pthread_once(&g_nccl_once, nccl_open);
    if (g_nccl_why.code < 0) {
        if (err)
            *err = g_nccl_why;
        return g_nccl_why.code;
    }
    return 0;
}

static int nccl_fail(pt_error *err, const char *what, ncclResult_t r)
{
    return pt_error_set(err, PT_EIO, "nccl: %s: %s", what, g_nccl.ncclGetErrorString(r));
}

static int id_new(unsigned char *id, pt_error *err)
{
    ncclUniqueId u;
    ncclResult_t r = g_nccl.ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclGetUniqueId", r);
    memcpy(id, u.internal, PT_NCCL_ID_BYTES);
    return 0;
}

static pt_nccl *wrap(ncclComm_t comm, cudaStream_t stream, int device)
{
    pt_nccl *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->comm = comm;
    c->stream = stream;
    c->device = device;
    g_nccl.ncclCommUserRank(comm, &c->rank);
    g_nccl.ncclCommCount(comm, &c->size);
    return c;
}

static int create(const unsigned char *idb, int nranks, int rank, int device, void *stream,
                  pt_nccl **out, pt_error *err)
{
    ncclUniqueId id;
    memcpy(id.internal, idb, PT_NCCL_ID_BYTES);
    cudaSetDevice(device);
    ncclComm_t comm;
    ncclResult_t r = g_nccl.ncclCommInitRank(&comm, nranks, id, rank);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommInitRank", r);
    if (!(*out = wrap(comm, (cudaStream_t)stream, device))) {
        g_nccl.ncclCommDestroy(comm);
        return pt_error_set(err, PT_ENOMEM, "nccl: out of memory");
    }
    return 0;
}

static int split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    if (parent->aborted)
        return pt_error_set(err, PT_EIO, "nccl: the communicator was aborted");
    cudaSetDevice(parent->device);
    ncclComm_t comm;
    ncclResult_t r = g_nccl.ncclCommSplit(parent->comm, color, key, &comm, NULL);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommSplit", r);
    if (!(*out = wrap(comm, parent->stream, parent->device))) {
        g_nccl.ncclCommDestroy(comm);
        return pt_error_set(err, PT_ENOMEM, "nccl: out of memory");
    }
    return 0;
}

/* Aborts the communicator (its kernels stop, so the stream drains) and
 * returns rc with err set to msg and that it was aborted. */
static int abort_comm(pt_nccl *self, int rc, pt_error *err, const char *msg)
{
    if (!self->aborted) {
        g_nccl.ncclCommAbort(self->comm);
        self->aborted = 1;
    }
    return pt_error_set(err, rc, "nccl: rank %d of %d: %s; communicator aborted", self->rank,
                        self->size, msg);
}

/* Polls the stream and NCCL's asynchronous error until the stream is done,
 * an error shows or timeout_ms pass; never blocks in CUDA or NCCL. */
static int wait_stream(pt_nccl *self, int timeout_ms, pt_error *err)
{
    if (self->aborted)
        return pt_error_set(err, PT_EIO, "nccl: the communicator was aborted");
    cudaSetDevice(self->device);
    int64_t deadline = pt_clock_ns() / 1000000 + timeout_ms;
    char msg[PT_ERROR_MAX - 64];
    for (int polls = 0;; polls++) {
        cudaError_t e = cudaStreamQuery(self->stream);
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = g_nccl.ncclCommGetAsyncError(self->comm, &async);
        if (r != ncclSuccess)
            async = r;
        if (async != ncclSuccess && async != ncclInProgress) {
            snprintf(msg, sizeof msg, "asynchronous error: %s", g_nccl.ncclGetErrorString(async));
            return abort_comm(self, PT_EIO, err, msg);
        }
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady) {
            snprintf(msg, sizeof msg, "stream: %s", cudaGetErrorString(e));
            return abort_comm(self, PT_EIO, err, msg);
        }
        if (pt_clock_ns() / 1000000 >= deadline) {
            snprintf(msg, sizeof msg,
                     "its stream did not finish in %d ms (a peer that died or never called)",
                     timeout_ms);
            return abort_comm(self, PT_ETIMEOUT, err, msg);
        }
        if (polls >= POLL_SPIN) {
            struct timespec ts = {0, POLL_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
}

/* Drains the stream (bounded: an unfinished one is aborted) before the
 * communicator goes. */
static void destroy(pt_nccl *c)
{
    if (!c->aborted && wait_stream(c, PT_NCCL_WAIT_MS, NULL) == 0)
        g_nccl.ncclCommDestroy(c->comm);
    free(c);
}

static int rank_of(const pt_nccl *self)
{
    return self->rank;
}

static int size_of(const pt_nccl *self)
{
    return self->size;
}

static int allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err)
{
    if (self->aborted)
        return pt_error_set(err, PT_EIO, "nccl: the communicator was aborted");
    ncclResult_t r =
        g_nccl.ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclAllReduce", r);
}

static int p2p(pt_nccl *self, const pt_nccl_p2p *ops, int n, pt_error *err)
{
    if (self->aborted)
        return pt_error_set(err, PT_EIO, "nccl: the communicator was aborted");
    ncclResult_t r = g_nccl.ncclGroupStart();
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclGroupStart", r);
    for (int i = 0; i < n && r == ncclSuccess; i++)
        r = ops[i].send ? g_nccl.ncclSend(ops[i].buf, ops[i].count, ncclFloat32, ops[i].peer,
                                          self->comm, self->stream)
                        : g_nccl.ncclRecv(ops[i].buf, ops[i].count, ncclFloat32, ops[i].peer,
                                          self->comm, self->stream);
    ncclResult_t end = g_nccl.ncclGroupEnd(); /* always closes the group */
    if (r == ncclSuccess)
        r = end;
    return r == ncclSuccess ? 0 : nccl_fail(err, n > 1 ? "send/recv group" : "send/recv", r);
}

void pt_cuda_module_fill_nccl(pt_cuda_module *m)
{
    m->nccl_load = nccl_load;
    m->nccl_id_new = id_new;
    m->nccl_create = create;
    m->nccl_split = split;
    m->nccl_destroy = destroy;
    m->nccl_rank = rank_of;
    m->nccl_size = size_of;
    m->nccl_allreduce = allreduce;
    m->nccl_p2p = p2p;
    m->nccl_wait = wait_stream;
}
