/* NCCL ids, the when-to-use rule (host logic, always built), and the
 * communicators, which live in the CUDA module (runtime/cuda_module.h) and are
 * reached through its table (runtime/comm_nccl.h). */
#include "runtime/comm_nccl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend_cuda.h"
#include "runtime/cuda_module.h"

/* The CUDA module when it loads and has NCCL; else NULL, and err says why. */
static const pt_cuda_module *nccl_module(pt_error *err)
{
    pt_error why = {0};
    const pt_cuda_module *m = pt_cuda_module_get(&why);
    if (!m) {
        pt_error_set(err, PT_EUNSUPP, "nccl: %s", why.msg);
        return NULL;
    }
    if (!m->nccl_load) {
        pt_error_set(err, PT_EUNSUPP, "nccl: this pipetop was built without NCCL");
        return NULL;
    }
    if (m->nccl_load(&why) < 0) {
        pt_error_set(err, PT_EUNSUPP, "%s", why.msg);
        return NULL;
    }
    return m;
}

int pt_nccl_built(void)
{
    return nccl_module(NULL) != NULL;
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

int pt_nccl_id_new(char *hex, size_t cap, pt_error *err)
{
    if (cap)
        hex[0] = '\0';
    const pt_cuda_module *m = nccl_module(err);
    if (!m)
        return PT_EUNSUPP;
    if (cap < PT_NCCL_ID_HEX)
        return pt_error_set(err, PT_ERANGE, "nccl: id buffer too small");
    unsigned char id[PT_NCCL_ID_BYTES];
    int rc = m->nccl_id_new(id, err);
    return rc < 0 ? rc : pt_nccl_id_encode(id, hex, cap);
}

int pt_nccl_create(const char *hex_id, int nranks, int rank, const pt_backend *be, pt_nccl **out,
                   pt_error *err)
{
    *out = NULL;
    if (!pt_backend_is_cuda(be))
        return pt_error_set(err, PT_EUNSUPP, "nccl: needs a CUDA backend, not %s",
                            be ? be->name : "none");
    const pt_cuda_module *m = nccl_module(err);
    if (!m)
        return PT_EUNSUPP;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return pt_error_set(err, PT_EINVAL, "nccl: rank %d of %d", rank, nranks);
    unsigned char id[PT_NCCL_ID_BYTES];
    int rc = pt_nccl_id_decode(hex_id, id, err);
    if (rc < 0)
        return rc;
    return m->nccl_create(id, nranks, rank, pt_backend_cuda_device(be), pt_backend_cuda_stream(be),
                          out, err);
}

/* A communicator exists only once the module (with NCCL) is loaded. */
static const pt_cuda_module *comm_module(const pt_nccl *self, pt_error *err)
{
    const pt_cuda_module *m = self ? pt_cuda_module_loaded() : NULL;
    if (!m || !m->nccl_load) {
        pt_error_set(err, PT_EINVAL, "nccl: no communicator");
        return NULL;
    }
    return m;
}

int pt_nccl_split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    *out = NULL;
    const pt_cuda_module *m = comm_module(parent, NULL);
    if (!m || color < 0)
        return pt_error_set(err, PT_EINVAL, "nccl: split needs a communicator and a color >= 0");
    return m->nccl_split(parent, color, key, out, err);
}

void pt_nccl_destroy(pt_nccl **self_p)
{
    if (!self_p || !*self_p)
        return;
    const pt_cuda_module *m = comm_module(*self_p, NULL);
    if (m)
        m->nccl_destroy(*self_p);
    *self_p = NULL;
}

int pt_nccl_rank(const pt_nccl *self)
{
    const pt_cuda_module *m = comm_module(self, NULL);
    return m ? m->nccl_rank(self) : -1;
}

int pt_nccl_size(const pt_nccl *self)
{
    const pt_cuda_module *m = comm_module(self, NULL);
    return m ? m->nccl_size(self) : 0;
}

int pt_nccl_allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err)
{
    const pt_cuda_module *m = comm_module(self, err);
    return m ? m->nccl_allreduce(self, buf, count, err) : PT_EINVAL;
}

static int check_peer(const pt_nccl *self, int peer, pt_error *err)
{
    int size = pt_nccl_size(self);
    if (peer < 0 || peer >= size)
        return pt_error_set(err, PT_EINVAL, "nccl: peer %d outside 0..%d", peer, size - 1);
    return 0;
}

int pt_nccl_p2p_group(pt_nccl *self, const pt_nccl_p2p *ops, int n, pt_error *err)
{
    const pt_cuda_module *m = comm_module(self, err);
    if (!m)
        return PT_EINVAL;
    if (!ops || n < 1 || n > PT_NCCL_GROUP_MAX)
        return pt_error_set(err, PT_EINVAL, "nccl: a group of %d operations (1..%d)", n,
                            PT_NCCL_GROUP_MAX);
    for (int i = 0; i < n; i++) {
        int rc = check_peer(self, ops[i].peer, err);
        if (rc < 0)
            return rc;
    }
    return m->nccl_p2p(self, ops, n, err);
}

int pt_nccl_send(pt_nccl *self, int peer, const float *buf, size_t count, pt_error *err)
{
    pt_nccl_p2p op = {1, peer, (float *)buf, count}; /* a send only reads buf */
    return pt_nccl_p2p_group(self, &op, 1, err);
}

int pt_nccl_recv(pt_nccl *self, int peer, float *buf, size_t count, pt_error *err)
{
    pt_nccl_p2p op = {0, peer, buf, count};
    return pt_nccl_p2p_group(self, &op, 1, err);
}

int pt_nccl_exchange(pt_nccl *self, int to, const float *sbuf, int from, float *rbuf, size_t count,
                     pt_error *err)
{
    pt_nccl_p2p ops[2] = {{1, to, (float *)sbuf, count}, {0, from, rbuf, count}};
    return pt_nccl_p2p_group(self, ops, 2, err);
}

int pt_nccl_wait(pt_nccl *self, int timeout_ms, pt_error *err)
{
    const pt_cuda_module *m = comm_module(self, err);
    return m ? m->nccl_wait(self, timeout_ms > 0 ? timeout_ms : PT_NCCL_WAIT_MS, err) : PT_EINVAL;
}
