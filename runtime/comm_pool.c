/* The part of a communicator that in-flight messages may outlive: the
 * completion counter of the all-reduce's zero-copy sends and the pool of send
 * buffers. With a shared ZeroMQ context a message can still sit in a peer's
 * pipe after pt_comm_destroy, so this block is reference-counted: the
 * communicator holds one reference and every message that points into it
 * another; the last release frees it.
 *
 * The pool keeps the buffers of copying sends for reuse, in power-of-two size
 * classes, so a pipeline that sends the same activation sizes every
 * micro-batch stops allocating (and faulting in fresh pages) after its first
 * iteration. See comm_internal.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_internal.h"

#define POOL_MIN_SHIFT  12 /* 4 KiB: smaller sends use ZeroMQ's own allocation */
#define POOL_MAX_SHIFT  31 /* 2 GiB: larger ones are not pooled */
#define POOL_CLASSES    (POOL_MAX_SHIFT - POOL_MIN_SHIFT + 1)
#define POOL_MAX_CACHED ((size_t)512 << 20) /* bytes kept idle; beyond, buffers are freed */

typedef struct pool_buf {
    struct pool_buf *next;
    struct pt_comm_shared *owner;
    size_t cap; /* bytes of data */
    int cls;
    int pad_;
    /* data follows, 32-byte aligned */
} pool_buf;

#define BUF_HEADER (((sizeof(pool_buf) + 31) / 32) * 32)

struct pt_comm_shared {
    atomic_int refs;
    pt_comm_zc zc;
    pthread_mutex_t mu;
    int closing;
    pool_buf *free_list[POOL_CLASSES];
    size_t cached, in_use, peak; /* bytes */
};

pt_comm_shared *pt_comm_shared_new(void)
{
    pt_comm_shared *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    atomic_init(&s->refs, 1);
    atomic_init(&s->zc.pending, 0);
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void free_cache(pt_comm_shared *s)
{
    for (int c = 0; c < POOL_CLASSES; c++) {
        while (s->free_list[c]) {
            pool_buf *b = s->free_list[c];
            s->free_list[c] = b->next;
            s->cached -= b->cap;
            free(b);
        }
    }
}

static void unref(pt_comm_shared *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        free_cache(s);
        pthread_mutex_destroy(&s->mu);
        free(s);
    }
}

void pt_comm_shared_close(pt_comm_shared *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    free_cache(s);
    pthread_mutex_unlock(&s->mu);
    unref(s);
}

pt_comm_zc *pt_comm_shared_zc(pt_comm_shared *s)
{
    return &s->zc;
}

void pt_comm_shared_hold(pt_comm_shared *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void pt_comm_shared_zc_release(void *data, void *hint)
{
    (void)data;
    pt_comm_shared *s = hint;
    atomic_fetch_sub(&s->zc.pending, 1);
    unref(s);
}

/* Called by ZeroMQ, from any thread, when a pooled send buffer is free. */
static void pool_release(void *data, void *hint)
{
    (void)data;
    pool_buf *b = hint;
    pt_comm_shared *s = b->owner;
    pthread_mutex_lock(&s->mu);
    s->in_use -= b->cap;
    if (s->closing || s->cached + b->cap > POOL_MAX_CACHED) {
        free(b);
    } else {
        b->next = s->free_list[b->cls];
        s->free_list[b->cls] = b;
        s->cached += b->cap;
    }
    pthread_mutex_unlock(&s->mu);
    unref(s);
}

static int size_class(size_t bytes)
{
    int shift = POOL_MIN_SHIFT;
    while (shift < POOL_MAX_SHIFT && ((size_t)1 << shift) < bytes)
        shift++;
    return shift - POOL_MIN_SHIFT;
}

int pt_comm_shared_copy_msg(pt_comm_shared *s, zmq_msg_t *m, const void *data, size_t bytes)
{
    if (bytes < ((size_t)1 << POOL_MIN_SHIFT) || bytes > ((size_t)1 << POOL_MAX_SHIFT)) {
        if (zmq_msg_init_size(m, bytes) != 0)
            return PT_ENOMEM;
        if (bytes)
            memcpy(zmq_msg_data(m), data, bytes);
        return 0;
    }
    int cls = size_class(bytes);
    size_t cap = (size_t)1 << (cls + POOL_MIN_SHIFT);
    pthread_mutex_lock(&s->mu);
    pool_buf *b = s->free_list[cls];
    if (b) {
        s->free_list[cls] = b->next;
        s->cached -= cap;
    }
    s->in_use += cap;
    if (s->in_use + s->cached > s->peak)
        s->peak = s->in_use + s->cached;
    pthread_mutex_unlock(&s->mu);
    if (!b) {
        b = malloc(BUF_HEADER + cap);
        if (!b) {
            pthread_mutex_lock(&s->mu);
            s->in_use -= cap;
            pthread_mutex_unlock(&s->mu);
            return PT_ENOMEM;
        }
        b->owner = s;
        b->cap = cap;
        b->cls = cls;
    }
    unsigned char *payload = (unsigned char *)b + BUF_HEADER;
    memcpy(payload, data, bytes);
    pt_comm_shared_hold(s);
    if (zmq_msg_init_data(m, payload, bytes, pool_release, b) != 0) {
        pool_release(payload, b);
        return PT_ENOMEM;
    }
    return 0;
}

void pt_comm_shared_pool_bytes(pt_comm_shared *s, size_t *current, size_t *peak)
{
    pthread_mutex_lock(&s->mu);
    *current = s->in_use + s->cached;
    *peak = s->peak;
    pthread_mutex_unlock(&s->mu);
}
