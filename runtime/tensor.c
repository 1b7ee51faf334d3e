/* Arena: a table of backend blocks, each live (counted under a category) or
 * cached for reuse by the next allocation of the same size. */
#include "runtime/tensor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/error.h"

typedef struct block {
    void *ptr;
    size_t bytes;
    pt_mem_kind kind;
    int live;
} block;

struct pt_arena {
    const pt_backend *be;
    pthread_mutex_t lock;
    block *blocks;
    size_t count, cap;
    int64_t limit;
    pt_mem_stats stats;
};

int pt_arena_create(const pt_backend *be, pt_arena **out)
{
    *out = NULL;
    pt_arena *a = calloc(1, sizeof *a);
    if (!a)
        return PT_ENOMEM;
    a->be = be ? be : pt_backend_default();
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        return PT_ENOMEM;
    }
    *out = a;
    return 0;
}

void pt_arena_destroy(pt_arena **arena_p)
{
    if (!arena_p || !*arena_p)
        return;
    pt_arena *a = *arena_p;
    for (size_t i = 0; i < a->count; i++)
        a->be->free(a->be, a->blocks[i].ptr);
    free(a->blocks);
    pthread_mutex_destroy(&a->lock);
    free(a);
    *arena_p = NULL;
}

const pt_backend *pt_arena_backend(const pt_arena *arena)
{
    return arena->be;
}

static void count_live(pt_arena *a, pt_mem_kind kind, int64_t bytes)
{
    pt_mem_stats *s = &a->stats;
    s->current[kind] += bytes;
    s->total_current += bytes;
    if (s->current[kind] > s->peak[kind])
        s->peak[kind] = s->current[kind];
    if (s->total_current > s->total_peak)
        s->total_peak = s->total_current;
}

void *pt_arena_alloc(pt_arena *a, pt_mem_kind kind, size_t bytes)
{
    if (!a || (int)kind < 0 || kind >= PT_MEM_KIND_COUNT)
        return NULL;
    void *result = NULL;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->count; i++) {
        block *b = &a->blocks[i];
        if (!b->live && b->bytes == bytes) {
            b->live = 1;
            b->kind = kind;
            count_live(a, kind, (int64_t)bytes);
            result = b->ptr;
            goto done;
        }
    }
    if (a->limit > 0 && a->stats.reserved + (int64_t)bytes > a->limit)
        goto done;
    if (a->count == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        block *nb = realloc(a->blocks, cap * sizeof *nb);
        if (!nb)
            goto done;
        a->blocks = nb;
        a->cap = cap;
    }
    void *p = a->be->alloc(a->be, bytes);
    if (!p)
        goto done;
    a->stats.backend_allocs++;
    a->blocks[a->count++] = (block){p, bytes, kind, 1};
    a->stats.reserved += (int64_t)bytes;
    if (a->stats.reserved > a->stats.reserved_peak)
        a->stats.reserved_peak = a->stats.reserved;
    count_live(a, kind, (int64_t)bytes);
    result = p;
done:
    pthread_mutex_unlock(&a->lock);
    return result;
}

float *pt_arena_alloc_floats(pt_arena *arena, pt_mem_kind kind, int64_t count)
{
    if (count < 0)
        return NULL;
    return pt_arena_alloc(arena, kind, (size_t)count * sizeof(float));
}

int pt_arena_free(pt_arena *a, void *ptr)
{
    if (!a || !ptr)
        return 0;
    int rc = PT_EINVAL;
    pthread_mutex_lock(&a->lock);
    for (size_t i = a->count; i-- > 0;) {
        block *b = &a->blocks[i];
        if (b->ptr == ptr && b->live) {
            b->live = 0;
            a->stats.current[b->kind] -= (int64_t)b->bytes;
            a->stats.total_current -= (int64_t)b->bytes;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int pt_arena_swap_kinds(pt_arena *a, void *p, void *q)
{
    if (!a || !p || !q)
        return PT_EINVAL;
    block *x = NULL, *y = NULL;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->count; i++) {
        block *b = &a->blocks[i];
        if (b->live && b->ptr == p)
            x = b;
        if (b->live && b->ptr == q)
            y = b;
    }
    int rc = x && y && x->bytes == y->bytes ? 0 : PT_EINVAL;
    if (rc == 0) {
        pt_mem_kind k = x->kind;
        x->kind = y->kind;
        y->kind = k;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void pt_arena_trim(pt_arena *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    size_t kept = 0;
    for (size_t i = 0; i < a->count; i++) {
        block b = a->blocks[i];
        if (b.live) {
            a->blocks[kept++] = b;
        } else {
            a->be->free(a->be, b.ptr);
            a->stats.reserved -= (int64_t)b.bytes;
        }
    }
    a->count = kept;
    pthread_mutex_unlock(&a->lock);
}

void pt_arena_set_limit(pt_arena *a, int64_t limit_bytes)
{
    pthread_mutex_lock(&a->lock);
    a->limit = limit_bytes > 0 ? limit_bytes : 0;
    pthread_mutex_unlock(&a->lock);
}

void pt_arena_stats(pt_arena *a, pt_mem_stats *out)
{
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
}

void pt_arena_reset_peaks(pt_arena *a)
{
    pthread_mutex_lock(&a->lock);
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
        a->stats.peak[k] = a->stats.current[k];
    a->stats.total_peak = a->stats.total_current;
    a->stats.reserved_peak = a->stats.reserved;
    pthread_mutex_unlock(&a->lock);
}

int pt_tensor_alloc(pt_arena *arena, pt_mem_kind kind, int rank, const int64_t *dims,
                    pt_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (rank < 1 || rank > PT_TENSOR_RANK_MAX || !dims)
        return PT_EINVAL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return PT_EINVAL;
        n *= dims[i];
    }
    float *p = pt_arena_alloc_floats(arena, kind, n);
    if (!p)
        return PT_ENOMEM;
    out->data = p;
    out->rank = rank;
    memcpy(out->dims, dims, (size_t)rank * sizeof dims[0]);
    return 0;
}

void pt_tensor_free(pt_arena *arena, pt_tensor *t)
{
    if (!t)
        return;
    pt_arena_free(arena, t->data);
    memset(t, 0, sizeof *t);
}

int64_t pt_tensor_numel(const pt_tensor *t)
{
    if (!t || t->rank < 1)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}
