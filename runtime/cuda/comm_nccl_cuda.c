/* NCCL communicators, the module's side (runtime/cuda_module.h): the calls
 * behind runtime/comm_nccl.h, which has checked the arguments it can (a CUDA
 * backend, the ranks, the id's hex, peers inside the communicator). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_module.h"

_Static_assert(sizeof(ncclUniqueId) == PT_NCCL_ID_BYTES, "ncclUniqueId is 128 bytes");

struct pt_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device, rank, size;
};

static int nccl_fail(pt_error *err, const char *what, ncclResult_t r)
{
    return pt_error_set(err, PT_EIO, "nccl: %s: %s", what, ncclGetErrorString(r));
}

static int id_new(unsigned char *id, pt_error *err)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
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
    ncclCommUserRank(comm, &c->rank);
    ncclCommCount(comm, &c->size);
    return c;
}

static int create(const unsigned char *idb, int nranks, int rank, int device, void *stream,
                  pt_nccl **out, pt_error *err)
{
    ncclUniqueId id;
    memcpy(id.internal, idb, PT_NCCL_ID_BYTES);
    cudaSetDevice(device);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommInitRank", r);
    if (!(*out = wrap(comm, (cudaStream_t)stream, device))) {
        ncclCommDestroy(comm);
        return pt_error_set(err, PT_ENOMEM, "nccl: out of memory");
    }
    return 0;
}

static int split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    cudaSetDevice(parent->device);
    ncclComm_t comm;
    ncclResult_t r = ncclCommSplit(parent->comm, color, key, &comm, NULL);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommSplit", r);
    if (!(*out = wrap(comm, parent->stream, parent->device))) {
        ncclCommDestroy(comm);
        return pt_error_set(err, PT_ENOMEM, "nccl: out of memory");
    }
    return 0;
}

static void destroy(pt_nccl *c)
{
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    ncclCommDestroy(c->comm);
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
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclAllReduce", r);
}

static int p2p_send(pt_nccl *self, int peer, const float *buf, size_t count, pt_error *err)
{
    ncclResult_t r = ncclSend(buf, count, ncclFloat32, peer, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclSend", r);
}

static int p2p_recv(pt_nccl *self, int peer, float *buf, size_t count, pt_error *err)
{
    ncclResult_t r = ncclRecv(buf, count, ncclFloat32, peer, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclRecv", r);
}

static int exchange(pt_nccl *self, int to, const float *sbuf, int from, float *rbuf, size_t count,
                    pt_error *err)
{
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess)
        r = ncclSend(sbuf, count, ncclFloat32, to, self->comm, self->stream);
    if (r == ncclSuccess)
        r = ncclRecv(rbuf, count, ncclFloat32, from, self->comm, self->stream);
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
    return r == ncclSuccess ? 0 : nccl_fail(err, "send/recv group", r);
}

static int wait_stream(pt_nccl *self, pt_error *err)
{
    cudaSetDevice(self->device);
    cudaError_t e = cudaStreamSynchronize(self->stream);
    if (e != cudaSuccess)
        return pt_error_set(err, PT_EIO, "nccl: stream: %s", cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(self->comm, &async);
    return async == ncclSuccess ? 0 : nccl_fail(err, "asynchronous error", async);
}

void pt_cuda_module_fill_nccl(pt_cuda_module *m)
{
    m->nccl_id_new = id_new;
    m->nccl_create = create;
    m->nccl_split = split;
    m->nccl_destroy = destroy;
    m->nccl_rank = rank_of;
    m->nccl_size = size_of;
    m->nccl_allreduce = allreduce;
    m->nccl_send = p2p_send;
    m->nccl_recv = p2p_recv;
    m->nccl_exchange = exchange;
    m->nccl_wait = wait_stream;
}
