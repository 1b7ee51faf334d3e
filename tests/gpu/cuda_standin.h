/* A stand-in CUDA module (runtime/cuda_module.h) for machines without a GPU:
 * its backend is a copy of the CPU backend that says it is CUDA, and its
 * NCCL delivers messages and all-reduces between the threads of this
 * process on the host and records every call. Installed with
 * pt_cuda_module_set before anything loads the real module, it lets the
 * executor's NCCL path (runtime/executor.c) and the GPU tests' NCCL logic
 * run here (tests/runtime/exec_nccl_test.c, nccl_gputest's dry run).
 *
 * Delivery is buffered, as ZeroMQ's is: a send copies its floats into the
 * receiver's queue at once and a receive waits (up to STI_TIMEOUT_MS) for
 * the oldest message from its peer. So a run completes even where a real
 * NCCL would deadlock; whether it would is told from the record afterwards
 * (sti_deadlock), which models NCCL for messages beyond its buffers: a send
 * or receive completes only while its group and the peer's matching one are
 * both at the head of their streams, and an all-reduce only while it heads
 * every member's stream.
 *
 * Its device has STI_DEVICE_BYTES: the backend counts what it hands out and
 * reports the rest as free through mem_info, the way the driver's
 * cudaMemGetInfo would, and refuses (and counts as an error) what does not
 * fit. $PT_GPU_DRY_FAULT gives it a fault, for tests/gpu/gpu_dryrun_faults.sh:
 * "leak" (every allocation takes 64 MiB more from the device than asked),
 * "nccl_drop" (every message arrives with its last float off by one).
 *
 * Header-only (each test is its own program); threads: any, each worker its
 * own. */
#ifndef PT_TESTS_GPU_CUDA_STANDIN_H
#define PT_TESTS_GPU_CUDA_STANDIN_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/comm_nccl.h"
#include "runtime/cuda_module.h"

#define STI_TIMEOUT_MS   20000
#define STI_DEVICE_BYTES (16ll << 30)
#define STI_LEAK_BYTES   (64ll << 20)
#define STI_HEADER       64 /* before each allocation: its size; keeps the 64-byte alignment */
#define STI_WORLDS       64
#define STI_RANKS        64

typedef struct sti_msg {
    int src;
    size_t count;
    float *data;
    struct sti_msg *next;
} sti_msg;

/* The ranks of one NCCL id. */
typedef struct sti_world {
    unsigned char id[PT_NCCL_ID_BYTES];
    int size;
    sti_msg *head[STI_RANKS], *tail[STI_RANKS]; /* queue per receiver */
    /* all-reduce: contributions of the current one, in rank order */
    float *part[STI_RANKS];
    size_t ar_count;
    int ar_arrived, ar_left;
    unsigned ar_gen;
    float *ar_sum;
} sti_world;

struct pt_nccl {
    sti_world *w;
    int index; /* of w in sti.worlds */
    int rank;
};

/* One recorded call: a group of sends and receives, or an all-reduce. */
typedef enum { STI_GROUP, STI_ALLREDUCE } sti_kind;
typedef struct sti_record {
    sti_kind kind;
    int world, rank; /* the communicator's */
    int stream;      /* the calling worker (sti_stream_of), whose stream holds it */
    int n;           /* group: operations */
    pt_nccl_p2p ops[PT_NCCL_GROUP_MAX];
} sti_record;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sti_world worlds[STI_WORLDS];
    int world_count;
    unsigned id_next;
    sti_record *log;
    int log_n, log_cap;
    pt_backend be;
    pt_cuda_module module;
    int64_t used; /* device bytes handed out */
    int errors;   /* allocations refused */
    int waits;    /* nccl_wait calls */
} sti = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static inline int sti_fault(const char *name)
{
    const char *f = getenv("PT_GPU_DRY_FAULT");
    return f && !strcmp(f, name);
}

/* Which stream (worker) a communicator's calls belong to: the rank of the
 * worker in the communicator of all workers. A test that also makes replica
 * communicators maps them here (sti_set_stream); -1: the communicator's own
 * rank. */
static int sti_stream_of_[STI_WORLDS][STI_RANKS];

static inline void sti_set_stream(const pt_nccl *c, int stream)
{
    sti_stream_of_[c->index][c->rank] = stream + 1;
}

static inline int sti_stream(const pt_nccl *c)
{
    int s = sti_stream_of_[c->index][c->rank];
    return s ? s - 1 : c->rank;
}

/* ---- the backend ---------------------------------------------------- */

static inline int sti_device_probe(pt_error *err)
{
    (void)err;
    return 1;
}
static inline int sti_device_count(void)
{
    return 1;
}
static inline int sti_device_name(int device, char *buf, size_t cap)
{
    snprintf(buf, cap, "stand-in %d", device);
    return 0;
}
static inline int sti_error_count(void)
{
    pthread_mutex_lock(&sti.lock);
    int n = sti.errors;
    pthread_mutex_unlock(&sti.lock);
    return n;
}

static inline void *sti_alloc(const pt_backend *be, size_t bytes)
{
    (void)be;
    int64_t take = (int64_t)bytes + (sti_fault("leak") ? STI_LEAK_BYTES : 0);
    pthread_mutex_lock(&sti.lock);
    int fits = sti.used + take <= STI_DEVICE_BYTES;
    if (fits)
        sti.used += take;
    else
        sti.errors++;
    pthread_mutex_unlock(&sti.lock);
    char *p = fits ? pt_backend_cpu()->alloc(pt_backend_cpu(), bytes + STI_HEADER) : NULL;
    if (!p)
        return NULL;
    memcpy(p, &take, sizeof take);
    return p + STI_HEADER;
}

static inline void sti_free(const pt_backend *be, void *ptr)
{
    (void)be;
    if (!ptr)
        return;
    char *p = (char *)ptr - STI_HEADER;
    int64_t take;
    memcpy(&take, p, sizeof take);
    pthread_mutex_lock(&sti.lock);
    sti.used -= take;
    pthread_mutex_unlock(&sti.lock);
    pt_backend_cpu()->free(pt_backend_cpu(), p);
}
static inline int sti_backend_create(int device, pt_cuda_math math, const pt_backend **out,
                                     pt_error *err)
{
    (void)device, (void)math, (void)err;
    *out = &sti.be;
    return 0;
}
static inline void sti_backend_destroy(const pt_backend **be_p)
{
    *be_p = NULL;
}
static inline int sti_backend_is_cuda(const pt_backend *be)
{
    return be == &sti.be;
}
static inline int sti_backend_device(const pt_backend *be)
{
    return be == &sti.be ? 0 : -1;
}
static inline void *sti_backend_stream(const pt_backend *be)
{
    return be == &sti.be ? (void *)&sti : NULL;
}
static inline int sti_backend_bind(const pt_backend *be)
{
    (void)be;
    return 0;
}
static inline int sti_backend_mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total)
{
    if (be != &sti.be)
        return PT_EUNSUPP;
    pthread_mutex_lock(&sti.lock);
    if (free_bytes)
        *free_bytes = STI_DEVICE_BYTES - sti.used;
    pthread_mutex_unlock(&sti.lock);
    if (total)
        *total = STI_DEVICE_BYTES;
    return 0;
}

/* ---- NCCL ------------------------------------------------------------- */

static inline int sti_nccl_load(pt_error *err)
{
    (void)err;
    return 0;
}

static inline int sti_id_new(unsigned char *id, pt_error *err)
{
    (void)err;
    pthread_mutex_lock(&sti.lock);
    unsigned n = ++sti.id_next;
    pthread_mutex_unlock(&sti.lock);
    memset(id, 0, PT_NCCL_ID_BYTES);
    memcpy(id, "standin", 7);
    memcpy(id + 8, &n, sizeof n);
    return 0;
}

static inline int sti_create(const unsigned char *id, int nranks, int rank, int device,
                             void *stream, pt_nccl **out, pt_error *err)
{
    (void)device, (void)stream;
    if (nranks > STI_RANKS)
        return pt_error_set(err, PT_EUNSUPP, "stand-in nccl: %d ranks", nranks);
    pthread_mutex_lock(&sti.lock);
    int k = 0, size = -1;
    while (k < sti.world_count && memcmp(sti.worlds[k].id, id, PT_NCCL_ID_BYTES))
        k++;
    if (k < STI_WORLDS) {
        if (k == sti.world_count) {
            memset(&sti.worlds[k], 0, sizeof sti.worlds[k]);
            memcpy(sti.worlds[k].id, id, PT_NCCL_ID_BYTES);
            sti.worlds[k].size = nranks;
            sti.world_count++;
        }
        size = sti.worlds[k].size;
    }
    pthread_mutex_unlock(&sti.lock);
    if (size != nranks)
        return pt_error_set(err, PT_EINVAL, "stand-in nccl: id of %d ranks joined with %d", size,
                            nranks);
    pt_nccl *c = calloc(1, sizeof *c);
    c->w = &sti.worlds[k];
    c->index = k;
    c->rank = rank;
    *out = c;
    return 0;
}

/* Only the trivial split (a one-rank parent) is modelled. */
static inline int sti_split(pt_nccl *parent, int color, int key, pt_nccl **out, pt_error *err)
{
    (void)color, (void)key;
    if (parent->w->size != 1)
        return pt_error_set(err, PT_EUNSUPP, "stand-in nccl: split of %d ranks", parent->w->size);
    unsigned char id[PT_NCCL_ID_BYTES];
    sti_id_new(id, err);
    return sti_create(id, 1, 0, 0, NULL, out, err);
}

static inline void sti_destroy(pt_nccl *c)
{
    free(c);
}
static inline int sti_rank(const pt_nccl *c)
{
    return c->rank;
}
static inline int sti_size(const pt_nccl *c)
{
    return c->w->size;
}

static inline void sti_log(const sti_record *r)
{
    pthread_mutex_lock(&sti.lock);
    if (sti.log_n == sti.log_cap) {
        sti.log_cap = sti.log_cap ? 2 * sti.log_cap : 1024;
        sti.log = realloc(sti.log, (size_t)sti.log_cap * sizeof *sti.log);
    }
    sti.log[sti.log_n++] = *r;
    pthread_mutex_unlock(&sti.lock);
}

static inline void sti_deadline(struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += STI_TIMEOUT_MS / 1000;
}

static inline int sti_p2p(pt_nccl *self, const pt_nccl_p2p *ops, int n, pt_error *err)
{
    sti_record r = {STI_GROUP, self->index, self->rank, sti_stream(self), n, {{0}}};
    memcpy(r.ops, ops, (size_t)n * sizeof *ops);
    sti_log(&r);
    sti_world *w = self->w;
    struct timespec until;
    sti_deadline(&until);
    pthread_mutex_lock(&sti.lock);
    for (int i = 0; i < n; i++) { /* sends first: a group's calls progress together */
        if (!ops[i].send)
            continue;
        sti_msg *m = malloc(sizeof *m);
        m->src = self->rank;
        m->count = ops[i].count;
        m->data = malloc(ops[i].count * sizeof(float) + 1);
        memcpy(m->data, ops[i].buf, ops[i].count * sizeof(float));
        if (sti_fault("nccl_drop") && m->count)
            m->data[m->count - 1] += 1.0f;
        m->next = NULL;
        int d = ops[i].peer;
        if (w->tail[d])
            w->tail[d]->next = m;
        else
            w->head[d] = m;
        w->tail[d] = m;
    }
    pthread_cond_broadcast(&sti.cond);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (ops[i].send)
            continue;
        sti_msg *m = NULL, *prev = NULL;
        while (!m && rc == 0) {
            for (prev = NULL, m = w->head[self->rank]; m && m->src != ops[i].peer; m = m->next)
                prev = m;
            if (!m && pthread_cond_timedwait(&sti.cond, &sti.lock, &until))
                rc = pt_error_set(err, PT_ETIMEOUT, "stand-in nccl: rank %d: nothing from %d",
                                  self->rank, ops[i].peer);
        }
        if (rc < 0)
            break;
        if (m->count != ops[i].count)
            rc = pt_error_set(err, PT_EINVAL, "stand-in nccl: %zu floats sent, %zu received",
                              m->count, ops[i].count);
        else
            memcpy(ops[i].buf, m->data, m->count * sizeof(float));
        if (prev)
            prev->next = m->next;
        else
            w->head[self->rank] = m->next;
        if (w->tail[self->rank] == m)
            w->tail[self->rank] = prev;
        free(m->data);
        free(m);
    }
    pthread_mutex_unlock(&sti.lock);
    return rc;
}

/* The sum over ranks, added in rank order (every rank gets the same floats). */
static inline int sti_allreduce(pt_nccl *self, float *buf, size_t count, pt_error *err)
{
    sti_record r = {STI_ALLREDUCE, self->index, self->rank, sti_stream(self), 0, {{0}}};
    r.ops[0].count = count;
    sti_log(&r);
    sti_world *w = self->w;
    struct timespec until;
    sti_deadline(&until);
    int rc = 0;
    pthread_mutex_lock(&sti.lock);
    while (w->ar_left > 0 && rc == 0) /* the last one's result is still being read */
        if (pthread_cond_timedwait(&sti.cond, &sti.lock, &until))
            rc = PT_ETIMEOUT;
    unsigned gen = w->ar_gen;
    w->part[self->rank] = malloc(count * sizeof(float) + 1);
    memcpy(w->part[self->rank], buf, count * sizeof(float));
    w->ar_count = count;
    if (++w->ar_arrived == w->size) {
        free(w->ar_sum);
        w->ar_sum = calloc(count + 1, sizeof(float));
        for (int k = 0; k < w->size; k++) {
            for (size_t i = 0; i < count; i++)
                w->ar_sum[i] += w->part[k][i];
            free(w->part[k]);
            w->part[k] = NULL;
        }
        w->ar_arrived = 0;
        w->ar_left = w->size;
        w->ar_gen++;
        pthread_cond_broadcast(&sti.cond);
    }
    while (gen == w->ar_gen && rc == 0)
        if (pthread_cond_timedwait(&sti.cond, &sti.lock, &until))
            rc = PT_ETIMEOUT;
    if (rc == 0) {
        memcpy(buf, w->ar_sum, count * sizeof(float));
        if (--w->ar_left == 0)
            pthread_cond_broadcast(&sti.cond);
    }
    pthread_mutex_unlock(&sti.lock);
    return rc < 0
               ? pt_error_set(err, rc, "stand-in nccl: all-reduce of rank %d timed out", self->rank)
               : 0;
}

static inline int sti_wait(pt_nccl *self, int timeout_ms, pt_error *err)
{
    (void)self, (void)err;
    pthread_mutex_lock(&sti.lock);
    sti.waits += timeout_ms > 0;
    pthread_mutex_unlock(&sti.lock);
    return 0;
}

/* Installs the stand-in as the process's CUDA module (before anything loads
 * the real one); returns its backend. */
static inline const pt_backend *sti_install(void)
{
    pt_cuda_module *m = &sti.module;
    if (m->abi == 0) {
        sti.be = *pt_backend_cpu();
        sti.be.name = "cuda-stand-in";
        sti.be.alloc = sti_alloc;
        sti.be.free = sti_free;
        *m = (pt_cuda_module){
            .abi = PT_CUDA_MODULE_ABI,
            .size = sizeof *m,
            .backend_size = sizeof(pt_backend),
            .device_probe = sti_device_probe,
            .device_count = sti_device_count,
            .device_name = sti_device_name,
            .device_bus_id = sti_device_name,
            .error_count = sti_error_count,
            .backend_create = sti_backend_create,
            .backend_destroy = sti_backend_destroy,
            .backend_is_cuda = sti_backend_is_cuda,
            .backend_device = sti_backend_device,
            .backend_stream = sti_backend_stream,
            .backend_bind = sti_backend_bind,
            .backend_mem_info = sti_backend_mem_info,
            .nccl_load = sti_nccl_load,
            .nccl_id_new = sti_id_new,
            .nccl_create = sti_create,
            .nccl_split = sti_split,
            .nccl_destroy = sti_destroy,
            .nccl_rank = sti_rank,
            .nccl_size = sti_size,
            .nccl_allreduce = sti_allreduce,
            .nccl_p2p = sti_p2p,
            .nccl_wait = sti_wait,
        };
    }
    pt_error err = {0};
    if (pt_cuda_module_set(m, &err) < 0 && pt_cuda_module_loaded() != m) {
        fprintf(stderr, "stand-in: %s\n", err.msg);
        return NULL;
    }
    return &sti.be;
}

/* Forgets the record (the worlds stay). */
static inline void sti_log_clear(void)
{
    pthread_mutex_lock(&sti.lock);
    sti.log_n = 0;
    sti.waits = 0;
    pthread_mutex_unlock(&sti.lock);
}

/* ---- would a real NCCL deadlock? -------------------------------------- */

/* A stream's calls as the replay sees them: record rec, ops [lo, hi). */
typedef struct sti_unit {
    int rec, lo, hi;
} sti_unit;

typedef struct sti_replay {
    int streams;
    sti_unit **unit; /* per stream */
    int *len, *head;
    int *ord;   /* [rec * PT_NCCL_GROUP_MAX + op]: ordinal among its kind and pair */
    char *done; /* [rec * PT_NCCL_GROUP_MAX + op] */
} sti_replay;

#define STI_AT(rec, op) ((rec)*PT_NCCL_GROUP_MAX + (op))

/* Units per stream (split: one per operation) and every op's ordinal: the
 * k-th send from a to b in a world matches the k-th receive at b from a,
 * the k-th all-reduce of a rank the k-th of every other rank. */
static inline void sti_replay_init(sti_replay *rp, int streams, int split)
{
    int n = sti.log_n;
    rp->streams = streams;
    rp->unit = calloc((size_t)streams, sizeof *rp->unit);
    rp->len = calloc((size_t)streams, sizeof *rp->len);
    rp->head = calloc((size_t)streams, sizeof *rp->head);
    rp->ord = calloc((size_t)n * PT_NCCL_GROUP_MAX + 1, sizeof *rp->ord);
    rp->done = calloc((size_t)n * PT_NCCL_GROUP_MAX + 1, 1);
    int *count = calloc((size_t)STI_WORLDS * STI_RANKS * STI_RANKS * 2, sizeof *count);
    int *ars = calloc((size_t)STI_WORLDS * STI_RANKS, sizeof *ars);
    for (int s = 0; s < streams; s++)
        rp->unit[s] = malloc((size_t)(n * PT_NCCL_GROUP_MAX + 1) * sizeof(sti_unit));
    for (int i = 0; i < n; i++) {
        const sti_record *r = &sti.log[i];
        int ops = r->kind == STI_GROUP ? r->n : 1;
        if (r->kind == STI_ALLREDUCE)
            rp->ord[STI_AT(i, 0)] = ars[r->world * STI_RANKS + r->rank]++;
        for (int k = 0; r->kind == STI_GROUP && k < r->n; k++) {
            int src = r->ops[k].send ? r->rank : r->ops[k].peer;
            int dst = r->ops[k].send ? r->ops[k].peer : r->rank;
            rp->ord[STI_AT(i, k)] =
                count[((r->world * STI_RANKS + src) * STI_RANKS + dst) * 2 + r->ops[k].send]++;
        }
        if (r->stream < 0 || r->stream >= streams)
            continue;
        for (int k = 0; k < (split ? ops : 1); k++)
            rp->unit[r->stream][rp->len[r->stream]++] =
                (sti_unit){i, split ? k : 0, split ? k + 1 : ops};
    }
    free(count);
    free(ars);
}

static inline void sti_replay_free(sti_replay *rp)
{
    for (int s = 0; s < rp->streams; s++)
        free(rp->unit[s]);
    free(rp->unit);
    free(rp->len);
    free(rp->head);
    free(rp->ord);
    free(rp->done);
}

static inline const sti_unit *sti_head(const sti_replay *rp, int s)
{
    return rp->head[s] < rp->len[s] ? &rp->unit[s][rp->head[s]] : NULL;
}

/* Marks send/recv op k of record i and its partner done when the partner's
 * unit heads its stream too; 1 when it did. */
static inline int sti_match_p2p(sti_replay *rp, int i, int k)
{
    const sti_record *r = &sti.log[i];
    for (int t = 0; t < rp->streams; t++) {
        const sti_unit *v = sti_head(rp, t);
        const sti_record *p = v ? &sti.log[v->rec] : NULL;
        if (!p || p->kind != STI_GROUP || p->world != r->world || p->rank != r->ops[k].peer)
            continue;
        for (int q = v->lo; q < v->hi; q++)
            if (p->ops[q].peer == r->rank && p->ops[q].send != r->ops[k].send &&
                rp->ord[STI_AT(v->rec, q)] == rp->ord[STI_AT(i, k)]) {
                rp->done[STI_AT(i, k)] = rp->done[STI_AT(v->rec, q)] = 1;
                return 1;
            }
    }
    return 0;
}

/* Marks all-reduce record i and every member's done when it heads all of
 * their streams; 1 when it did. */
static inline int sti_match_allreduce(sti_replay *rp, int i)
{
    const sti_record *r = &sti.log[i];
    int at_head = 0;
    for (int t = 0; t < rp->streams; t++) {
        const sti_unit *v = sti_head(rp, t);
        const sti_record *p = v ? &sti.log[v->rec] : NULL;
        at_head += p && p->kind == STI_ALLREDUCE && p->world == r->world &&
                   rp->ord[STI_AT(v->rec, 0)] == rp->ord[STI_AT(i, 0)];
    }
    if (at_head < sti.worlds[r->world].size)
        return 0;
    for (int t = 0; t < rp->streams; t++) {
        const sti_unit *v = sti_head(rp, t);
        const sti_record *p = v ? &sti.log[v->rec] : NULL;
        if (p && p->kind == STI_ALLREDUCE && p->world == r->world)
            rp->done[STI_AT(v->rec, 0)] = 1;
    }
    return 1;
}

/* One pass: match what the heads allow, then advance every stream whose
 * head unit is complete. 1 when anything moved. */
static inline int sti_replay_pass(sti_replay *rp)
{
    int moved = 0;
    for (int s = 0; s < rp->streams; s++) {
        const sti_unit *u = sti_head(rp, s);
        for (int k = u ? u->lo : 0; u && k < u->hi; k++)
            if (!rp->done[STI_AT(u->rec, k)])
                moved |= sti.log[u->rec].kind == STI_GROUP ? sti_match_p2p(rp, u->rec, k)
                                                           : sti_match_allreduce(rp, u->rec);
    }
    for (int s = 0; s < rp->streams; s++) {
        const sti_unit *u = sti_head(rp, s);
        int complete = u != NULL;
        for (int k = u ? u->lo : 0; u && k < u->hi; k++)
            complete &= rp->done[STI_AT(u->rec, k)];
        if (complete) {
            rp->head[s]++;
            moved = 1;
        }
    }
    return moved;
}

/* Replays the record with NCCL's blocking semantics (see the header
 * comment) over streams 0..streams-1. Returns 0 when every call completes;
 * else 1, with what each stuck stream waits in (why). split: every group as
 * separate calls, as the executor issued them before it grouped. */
static inline int sti_deadlock(int streams, int split, char *why, size_t cap)
{
    sti_replay rp;
    sti_replay_init(&rp, streams, split);
    while (sti_replay_pass(&rp))
        ;
    int stuck = 0;
    size_t used = 0;
    if (why && cap)
        why[0] = '\0';
    for (int s = 0; s < streams; s++) {
        const sti_unit *u = sti_head(&rp, s);
        if (!u)
            continue;
        stuck = 1;
        const sti_record *r = &sti.log[u->rec];
        if (!why || used >= cap)
            continue;
        used +=
            (size_t)snprintf(why + used, cap - used, "%sstream %d waits in %s", used ? "; " : "", s,
                             r->kind == STI_GROUP ? "a group:" : "an all-reduce");
        for (int k = u->lo; r->kind == STI_GROUP && k < u->hi && used < cap; k++)
            used += (size_t)snprintf(why + used, cap - used, " %s %d (%zu floats)",
                                     r->ops[k].send ? "send to" : "recv from", r->ops[k].peer,
                                     r->ops[k].count);
    }
    sti_replay_free(&rp);
    return stuck;
}

#endif
