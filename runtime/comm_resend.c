/* What was sent to one peer over ZeroMQ, kept to be sent again: a window of
 * the newest frames (header and payload, copied), bounded in bytes. See
 * runtime/comm_internal.h. */
#include "runtime/comm_internal.h"

#include <stdlib.h>
#include <string.h>

#define RESEND_SLOTS_MIN 16

typedef struct resend_entry {
    uint64_t seq;
    unsigned char hdr[PT_COMM_HEADER_BYTES];
    void *data;
    size_t bytes;
} resend_entry;

struct pt_resend_store {
    resend_entry *e; /* ring of cap entries, oldest at head */
    int head, count, cap;
    size_t bytes, limit;
    uint64_t lost_upto; /* frames below this sequence number are no longer kept */
};

pt_resend_store *pt_resend_store_new(size_t limit_bytes, uint64_t first_seq)
{
    pt_resend_store *s = calloc(1, sizeof *s);
    if (s) {
        s->limit = limit_bytes;
        s->lost_upto = first_seq;
    }
    return s;
}

static void drop_oldest(pt_resend_store *s)
{
    resend_entry *o = &s->e[s->head];
    s->bytes -= o->bytes;
    s->lost_upto = o->seq + 1;
    free(o->data);
    o->data = NULL;
    s->head = (s->head + 1) % s->cap;
    s->count--;
}

void pt_resend_store_free(pt_resend_store **s_p)
{
    if (!s_p || !*s_p)
        return;
    pt_resend_store *s = *s_p;
    while (s->count)
        drop_oldest(s);
    free(s->e);
    free(s);
    *s_p = NULL;
}

static int grow(pt_resend_store *s)
{
    int nc = s->cap ? 2 * s->cap : RESEND_SLOTS_MIN;
    resend_entry *e = calloc((size_t)nc, sizeof *e);
    if (!e)
        return PT_ENOMEM;
    for (int k = 0; k < s->count; k++)
        e[k] = s->e[(s->head + k) % s->cap];
    free(s->e);
    s->e = e;
    s->head = 0;
    s->cap = nc;
    return 0;
}

int pt_resend_store_keep(pt_resend_store *s, const unsigned char *hdr, uint64_t seq,
                         const void *data, size_t bytes)
{
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) { /* not kept: a resend from here on cannot be served */
        while (s->count)
            drop_oldest(s);
        s->lost_upto = seq + 1;
        return PT_ENOMEM;
    }
    if (bytes)
        memcpy(copy, data, bytes);
    /* a frame kept whose send then failed: its number is used again */
    while (s->count && s->e[(s->head + s->count - 1) % s->cap].seq >= seq) {
        resend_entry *last = &s->e[(s->head + s->count - 1) % s->cap];
        s->bytes -= last->bytes;
        free(last->data);
        last->data = NULL;
        s->count--;
    }
    /* the newest always stays; older ones go while the window is over its bound */
    while (s->count && s->bytes + bytes > s->limit)
        drop_oldest(s);
    if (s->count == s->cap && grow(s) < 0)
        drop_oldest(s);
    resend_entry *n = &s->e[(s->head + s->count) % s->cap];
    n->seq = seq;
    memcpy(n->hdr, hdr, sizeof n->hdr);
    n->data = copy;
    n->bytes = bytes;
    s->count++;
    s->bytes += bytes;
    return 0;
}

int pt_resend_store_from(const pt_resend_store *s, uint64_t from, int *first)
{
    if (from < s->lost_upto)
        return PT_ENOTFOUND;
    int k = 0;
    while (k < s->count && s->e[(s->head + k) % s->cap].seq < from)
        k++;
    *first = k;
    return s->count - k;
}

void pt_resend_store_at(const pt_resend_store *s, int k, const unsigned char **hdr,
                        const void **data, size_t *bytes)
{
    const resend_entry *e = &s->e[(s->head + k) % s->cap];
    *hdr = e->hdr;
    *data = e->data;
    *bytes = e->bytes;
}

size_t pt_resend_store_bytes(const pt_resend_store *s)
{
    return s ? s->bytes : 0;
}
