/* NCCL ids, the when-to-use rule, and communicators (runtime/comm_nccl.h). */
#include "runtime/comm_nccl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda.h"

#ifdef PT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
_Static_assert(sizeof(ncclUniqueId) == PT_NCCL_ID_BYTES, "ncclUniqueId is 128 bytes");
#endif

int pt_nccl_built(void)
{
#ifdef PT_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

int pt_nccl_id_encode(const unsigned char id[PT_NCCL_ID_BYTES], char *hex, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    if (cap < PT_NCCL_ID_HEX)
        return PT_ERANGE;
    for (int i = 0; i < PT_NCCL_ID_BYTES; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 0xf];
    }
    hex[2 * PT_NCCL_ID_BYTES] = '\0';
    return 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int pt_nccl_id_decode(const char *hex, unsigned char id[PT_NCCL_ID_BYTES], pt_error *err)
{
    if (!hex)
        return pt_error_set(err, PT_EINVAL, "nccl_id: missing");
    size_t len = strlen(hex);
    if (len != 2 * PT_NCCL_ID_BYTES)
        return pt_error_set(err, PT_EINVAL, "nccl_id: %zu hex digits, want %d", len,
                            2 * PT_NCCL_ID_BYTES);
    for (int i = 0; i < PT_NCCL_ID_BYTES; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return pt_error_set(err, PT_EINVAL, "nccl_id: character %d is not a hex digit",
                                hi < 0 ? 2 * i : 2 * i + 1);
        id[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

int pt_nccl_members_ok(const pt_nccl_member *m, int n)
{
    if (!m || n < 2)
        return 0;
    for (int i = 0; i < n; i++) {
        if (!m[i].has_nccl || !m[i].gpu || !m[i].gpu[0])
            return 0;
        for (int j = 0; j < i; j++)
            if (!strcmp(m[j].gpu, m[i].gpu) &&
                !strcmp(m[j].host ? m[j].host : "", m[i].host ? m[i].host : ""))
                return 0;
    }
    return 1;
}

#ifndef PT_HAVE_NCCL

int pt_nccl_id_new(char *hex, size_t cap, pt_error *err)
{
    if (cap)
        hex[0] = '\0';
    return pt_error_set(err, PT_EUNSUPP, "nccl: this pipetop was built without NCCL");
}

int pt_nccl_create(const char *hex_id, int nranks, int rank, const pt_backend *be, pt_nccl **out,
                   pt_error *err)
{
    (void)hex_id, (void)nranks, (void)rank, (void)be;
    *out = NULL;
    return pt_error_set(err, PT_EUNSUPP, "nccl: this pipetop was built without NCCL");
}

int pt_nccl_split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    (void)parent, (void)color, (void)key;
    *out = NULL;
    return pt_error_set(err, PT_EUNSUPP, "nccl: this pipetop was built without NCCL");
}

void pt_nccl_destroy(pt_nccl **self_p)
{
    if (self_p)
        *self_p = NULL;
}

int pt_nccl_rank(const pt_nccl *self)
{
    (void)self;
    return -1;
}

int pt_nccl_size(const pt_nccl *self)
{
    (void)self;
    return 0;
}

int pt_nccl_allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err)
{
    (void)self, (void)buf, (void)count;
    return pt_error_set(err, PT_EUNSUPP, "nccl: not built");
}

int pt_nccl_send(pt_nccl *self, int peer, const float *buf, size_t count, pt_error *err)
{
    (void)self, (void)peer, (void)buf, (void)count;
    return pt_error_set(err, PT_EUNSUPP, "nccl: not built");
}

int pt_nccl_recv(pt_nccl *self, int peer, float *buf, size_t count, pt_error *err)
{
    (void)self, (void)peer, (void)buf, (void)count;
    return pt_error_set(err, PT_EUNSUPP, "nccl: not built");
}

int pt_nccl_exchange(pt_nccl *self, int to, const float *sbuf, int from, float *rbuf, size_t count,
                     pt_error *err)
{
    (void)self, (void)to, (void)sbuf, (void)from, (void)rbuf, (void)count;
    return pt_error_set(err, PT_EUNSUPP, "nccl: not built");
}

int pt_nccl_wait(pt_nccl *self, pt_error *err)
{
    (void)self;
    return pt_error_set(err, PT_EUNSUPP, "nccl: not built");
}

#else

struct pt_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device, rank, size;
};

static int nccl_fail(pt_error *err, const char *what, ncclResult_t r)
{
    return pt_error_set(err, PT_EIO, "nccl: %s: %s", what, ncclGetErrorString(r));
}

int pt_nccl_id_new(char *hex, size_t cap, pt_error *err)
{
    if (cap)
        hex[0] = '\0';
    if (cap < PT_NCCL_ID_HEX)
        return pt_error_set(err, PT_ERANGE, "nccl: id buffer too small");
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclGetUniqueId", r);
    return pt_nccl_id_encode((const unsigned char *)id.internal, hex, cap);
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

int pt_nccl_create(const char *hex_id, int nranks, int rank, const pt_backend *be, pt_nccl **out,
                   pt_error *err)
{
    *out = NULL;
    if (!pt_backend_is_cuda(be))
        return pt_error_set(err, PT_EUNSUPP, "nccl: needs a CUDA backend, not %s",
                            be ? be->name : "none");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return pt_error_set(err, PT_EINVAL, "nccl: rank %d of %d", rank, nranks);
    ncclUniqueId id;
    int rc = pt_nccl_id_decode(hex_id, (unsigned char *)id.internal, err);
    if (rc < 0)
        return rc;
    int device = pt_backend_cuda_device(be);
    cudaSetDevice(device);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommInitRank", r);
    if (!(*out = wrap(comm, (cudaStream_t)pt_backend_cuda_stream(be), device))) {
        ncclCommDestroy(comm);
        return pt_error_set(err, PT_ENOMEM, "nccl: out of memory");
    }
    return 0;
}

int pt_nccl_split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    *out = NULL;
    if (!parent || color < 0)
        return pt_error_set(err, PT_EINVAL, "nccl: split needs a communicator and a color >= 0");
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

void pt_nccl_destroy(pt_nccl **self_p)
{
    if (!self_p || !*self_p)
        return;
    pt_nccl *c = *self_p;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    ncclCommDestroy(c->comm);
    free(c);
    *self_p = NULL;
}

int pt_nccl_rank(const pt_nccl *self)
{
    return self ? self->rank : -1;
}

int pt_nccl_size(const pt_nccl *self)
{
    return self ? self->size : 0;
}

int pt_nccl_allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err)
{
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclAllReduce", r);
}

static int check_peer(const pt_nccl *self, int peer, pt_error *err)
{
    if (peer < 0 || peer >= self->size)
        return pt_error_set(err, PT_EINVAL, "nccl: peer %d outside 0..%d", peer, self->size - 1);
    return 0;
}

int pt_nccl_send(pt_nccl *self, int peer, const float *buf, size_t count, pt_error *err)
{
    int rc = check_peer(self, peer, err);
    if (rc < 0)
        return rc;
    ncclResult_t r = ncclSend(buf, count, ncclFloat32, peer, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclSend", r);
}

int pt_nccl_recv(pt_nccl *self, int peer, float *buf, size_t count, pt_error *err)
{
    int rc = check_peer(self, peer, err);
    if (rc < 0)
        return rc;
    ncclResult_t r = ncclRecv(buf, count, ncclFloat32, peer, self->comm, self->stream);
    return r == ncclSuccess ? 0 : nccl_fail(err, "ncclRecv", r);
}

int pt_nccl_exchange(pt_nccl *self, int to, const float *sbuf, int from, float *rbuf, size_t count,
                     pt_error *err)
{
    int rc;
    if ((rc = check_peer(self, to, err)) < 0 || (rc = check_peer(self, from, err)) < 0)
        return rc;
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

int pt_nccl_wait(pt_nccl *self, pt_error *err)
{
    cudaSetDevice(self->device);
    cudaError_t e = cudaStreamSynchronize(self->stream);
    if (e != cudaSuccess)
        return pt_error_set(err, PT_EIO, "nccl: stream: %s", cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(self->comm, &async);
    return async == ncclSuccess ? 0 : nccl_fail(err, "asynchronous error", async);
}

#endif
