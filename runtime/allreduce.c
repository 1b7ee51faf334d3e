/* Ring all-reduce over a pt_comm, and the collective thread that runs one in
 * the background. See runtime/comm.h for the contract.
 *
 * The ring as one pipeline: rank i (position in the group) first sends its own
 * chunk i to the right; then for global step s = 0 .. 2(p-1)-1 it receives
 * chunk (i-s-1) mod p from the left, adds it into buf (s < p-1: reduce-scatter)
 * or copies it (s >= p-1: all-gather), and forwards it to the right as step
 * s+1. After step p-2 rank i holds the full sum of chunk (i+1) mod p; the
 * all-gather circulates those sums. Each chunk travels in segments so a rank
 * forwards segment k while segment k+1 is on the wire.
 *
 * Copies: reduce-scatter forwards straight from buf (zero-copy over ZeroMQ;
 * the sums are never written again before the all-gather, which waits for
 * those sends to be released before it overwrites); the all-gather forwards
 * the received frame itself (reference-counted, no copy). Over shared memory
 * a send is one copy into the ring, a receive is read (summed, copied)
 * straight out of the ring, and segments are taken in the order they arrive
 * (allreduce_arrival_order), so none is copied aside into the stash; the
 * pass that reads a received segment also writes what it yields into the
 * ring to the right (apply_segment_fused), and a rank keeps at most
 * OWN_AHEAD of its own segments out, so the rings stay small and cached. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "runtime/comm_internal.h"

#define SEG_BITS 15 /* part = step << SEG_BITS | segment */
#define SEG_MAX  (1u << SEG_BITS)
/* Over rings: own segments sent and not yet back summed (see
 * allreduce_arrival_order). */
#define OWN_AHEAD 4u
/* Tag steps of the direct all-reduce, above every ring step (2(p-1)-1 <=
 * 509 for p <= PT_COMM_MAX_GROUP), so the two never match each other. */
#define DIRECT_REDUCE 510
#define DIRECT_GATHER 511
_Static_assert(2 * (PT_COMM_MAX_GROUP - 1) - 1 < DIRECT_REDUCE, "ring steps stay below");
_Static_assert(((DIRECT_GATHER << SEG_BITS) | (SEG_MAX - 1)) <= PT_COMM_TAG_PART_MAX,
               "direct steps fit a tag's part");

int pt_comm_group_init(pt_comm_group *group, const int *ranks, int n)
{
    if (!group || !ranks || n < 1 || n > PT_COMM_MAX_GROUP)
        return PT_EINVAL;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= PT_COMM_MAX_RANKS)
            return PT_EINVAL;
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return PT_EINVAL;
    }
    memset(group, 0, sizeof *group);
    group->size = n;
    memcpy(group->ranks, ranks, (size_t)n * sizeof *ranks);
    return 0;
}

static size_t chunk_off(size_t count, int p, int c)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    return (size_t)c * base + ((size_t)c < rem ? (size_t)c : rem);
}
static size_t chunk_len(size_t count, int p, int c)
{
    return count / (size_t)p + ((size_t)c < count % (size_t)p ? 1 : 0);
}
static uint32_t seg_count(size_t len)
{
    size_t n = (len + PT_COMM_SEGMENT_FLOATS - 1) / PT_COMM_SEGMENT_FLOATS;
    return n ? (uint32_t)n : 1; /* an empty chunk still travels, as one empty segment */
}
static uint64_t ring_tag(uint32_t id, int step, uint32_t seg)
{
    return pt_comm_tag(PT_COMM_ALLREDUCE, id, ((uint32_t)step << SEG_BITS) | seg);
}

static size_t seg_len(size_t len, uint32_t k)
{
    size_t s0 = (size_t)k * PT_COMM_SEGMENT_FLOATS;
    return len <= s0 ? 0 : len - s0 < PT_COMM_SEGMENT_FLOATS ? len - s0 : PT_COMM_SEGMENT_FLOATS;
}

/* One all-reduce in progress, as seen by one member. */
typedef struct ring {
    pt_comm *comm;
    uint32_t id;
    int p, me, left, right, steps;
    float *buf;
    size_t count;
} ring;

/* Sends segment k of chunk c of buf as `step`, zero-copy or copied. */
static int send_segment(const ring *r, int step, int c, uint32_t k, int zero_copy, pt_error *err)
{
    size_t off = chunk_off(r->count, r->p, c) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    size_t n = seg_len(chunk_len(r->count, r->p, c), k);
    uint64_t tag = ring_tag(r->id, step, k);
    if (zero_copy)
        return pt_comm_internal_send_ar_zc(r->comm, r->right, tag, r->buf + off, n, err);
    return pt_comm_send(r->comm, r->right, tag, r->buf + off, n, err);
}

#define ADD_BLOCK 16 /* floats per block of add_into: whole vector registers at -O2 */

/* dst[j] += in[j] for j < n; in may be unaligned (a tcp frame starts at any
 * byte, as ZeroMQ slices frames out of its read buffer). Fixed-size blocks
 * let the compiler use vector adds without alias checks; the sums are the
 * scalar ones, bit for bit (no reassociation, no fused multiply-add). */
static void add_into(float *restrict dst, const unsigned char *restrict in, size_t n)
{
    size_t j = 0;
    for (; j + ADD_BLOCK <= n; j += ADD_BLOCK) {
        float a[ADD_BLOCK], b[ADD_BLOCK];
        memcpy(a, dst + j, sizeof a);
        memcpy(b, in + j * sizeof(float), sizeof b);
        for (int i = 0; i < ADD_BLOCK; i++)
            a[i] += b[i];
        memcpy(dst + j, a, sizeof a);
    }
    for (; j < n; j++) {
        float x;
        memcpy(&x, in + j * sizeof x, sizeof x);
        dst[j] += x;
    }
}

/* Step s, segment k of chunk c, received in *f: add it into buf
 * (reduce-scatter) or copy it (all-gather), pass it on as step s+1, and
 * release the frame. */
static int apply_segment(const ring *r, int s, int c, uint32_t k, pt_comm_frame *f, pt_error *err)
{
    size_t n = seg_len(chunk_len(r->count, r->p, c), k);
    float *dst = r->buf + chunk_off(r->count, r->p, c) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    int rc = 0;
    if (f->bytes != n * sizeof(float)) {
        size_t got = f->bytes / sizeof(float);
        pt_comm_internal_frame_release(r->comm, f);
        return pt_error_set(err, PT_EINVAL,
                            "allreduce: rank %d: step %d from rank %d has %zu floats, expected %zu "
                            "(do all members pass the same count?)",
                            pt_comm_rank(r->comm), s, r->left, got, n);
    }
    if (s < r->p - 1)
        add_into(dst, f->data, n);
    else if (n)
        memcpy(dst, f->data, n * sizeof(float));
    if (s + 1 < r->p - 1) {
        /* Still reducing: this sum is not written again before the all-gather. */
        rc = send_segment(r, s + 1, c, k, 1, err);
    } else if (s + 1 == r->p - 1) {
        /* The first all-gather send: a copy, as buf is the caller's again once
         * the all-reduce returns. */
        rc = send_segment(r, s + 1, c, k, 0, err);
    } else if (s + 1 < r->steps) {
        rc = pt_comm_internal_forward(r->comm, r->right, ring_tag(r->id, s + 1, k), f, err);
    }
    pt_comm_internal_frame_release(r->comm, f);
    return rc;
}

/* sum_into's operands: out1[j] = a[j] + in[j] (or in[j] alone when a is
 * NULL), and the same into out2 when it is not NULL. out1 may be a. */
typedef struct fused {
    float *out1;
    const float *a;
    const unsigned char *in; /* the received segment, possibly unaligned */
} fused;

/* Adds (or copies) a block of floats from the received segment to one or
 * two places in a single pass: the data is read once, while in the caches,
 * and whatever it yields is written where it goes (buf, the ring to the
 * right) without a pass of its own. Sums as in add_into, bit for bit. */
static void sum_into(float *out1, unsigned char *out2, const float *a, const unsigned char *in,
                     size_t n)
{
    size_t j = 0;
    for (; j + ADD_BLOCK <= n; j += ADD_BLOCK) {
        float x[ADD_BLOCK], y[ADD_BLOCK];
        memcpy(y, in + j * sizeof(float), sizeof y);
        if (a) {
            memcpy(x, a + j, sizeof x);
            for (int i = 0; i < ADD_BLOCK; i++)
                x[i] += y[i];
        } else {
            memcpy(x, y, sizeof x);
        }
        if (out1)
            memcpy(out1 + j, x, sizeof x);
        if (out2)
            memcpy(out2 + j * sizeof(float), x, sizeof x);
    }
    for (; j < n; j++) {
        float y;
        memcpy(&y, in + j * sizeof y, sizeof y);
        float x = a ? a[j] + y : y;
        if (out1)
            out1[j] = x;
        if (out2)
            memcpy(out2 + j * sizeof x, &x, sizeof x);
    }
}

/* pt_shm_fill_fn: the bytes [off, off + len) of the message to the right are
 * written by the same pass that reads the segment from the left. */
static void fused_fill(void *arg, unsigned char *dst, size_t off, size_t len)
{
    const fused *u = arg;
    size_t o = off / sizeof(float);
    sum_into(u->out1 ? u->out1 + o : NULL, dst, u->a ? u->a + o : NULL, u->in + off,
             len / sizeof(float));
}

/* apply_segment where the send to the right is a copy into its ring: the
 * add (or copy) and that send are one pass. A reduce-scatter step that is
 * not this rank's last writes its partial sum only into the ring (buf's copy
 * of that chunk is overwritten by the all-gather anyway); the last one
 * writes the full sum into buf and the ring; an all-gather step that passes
 * the segment on writes it into buf and the ring; the last step copies. */
static int apply_segment_fused(const ring *r, int s, int c, uint32_t k, pt_comm_frame *f,
                               pt_error *err)
{
    size_t n = seg_len(chunk_len(r->count, r->p, c), k);
    float *dst = r->buf + chunk_off(r->count, r->p, c) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    if (f->bytes != n * sizeof(float) || s + 1 >= r->steps)
        return apply_segment(r, s, c, k, f, err);
    fused u = {dst, s < r->p - 1 ? dst : NULL, f->data};
    if (s + 1 < r->p - 1)
        u.out1 = NULL; /* a partial sum: only the right needs it */
    int rc = pt_comm_internal_send_fill(r->comm, r->right, ring_tag(r->id, s + 1, k),
                                        n * sizeof(float), fused_fill, &u, err);
    pt_comm_internal_frame_release(r->comm, f);
    return rc;
}

static int recv_failed(int rc, pt_error *err)
{
    if (rc == PT_ETIMEOUT)
        pt_error_prefix(err, "allreduce");
    return rc;
}

/* Step s, segment k of chunk c: receive it from the left and apply it. The
 * received frame is read where it arrived (a ZeroMQ frame or the ring from
 * the left). */
static int ring_segment(const ring *r, int s, int c, uint32_t k, pt_error *err)
{
    pt_comm_frame f;
    int rc = pt_comm_internal_recv_frame(r->comm, r->left, ring_tag(r->id, s, k), &f, err);
    if (rc < 0)
        return recv_failed(rc, err);
    return apply_segment(r, s, c, k, &f, err);
}

static int step_chunk(const ring *r, int s)
{
    return ((r->me - s - 1) % r->p + r->p) % r->p;
}

/* The ring when every send to the right is a copy (shared memory): each
 * segment is taken in the order it arrives, whatever its step. The left
 * interleaves its own step-0 segments with the step-1 segments they yield,
 * so a receive of one step at a time would copy every other segment aside
 * (into the stash) and take it back later; in arrival order nothing is
 * copied aside. Each segment of each step still arrives in order, and is
 * applied exactly as in the step-by-step ring, so the sums are the same
 * bits. (With zero-copy sends this order is not safe: the all-gather would
 * overwrite sums ZeroMQ may still be reading, see pt_comm_allreduce.) */
static int allreduce_arrival_order(const ring *r, pt_error *err)
{
    uint32_t done[2 * PT_COMM_MAX_GROUP] = {0};
    uint64_t total = 0;
    for (int s = 0; s < r->steps; s++)
        total += seg_count(chunk_len(r->count, r->p, step_chunk(r, s)));
    uint32_t own = seg_count(chunk_len(r->count, r->p, r->me)), sent = 0;
    uint64_t family = ring_tag(r->id, 0, 0), mask = ~(uint64_t)PT_COMM_TAG_PART_MAX;
    int rc;
    for (uint64_t taken = 0; taken < total; taken++) {
        /* This rank's own segment k comes back summed at step p-1: at most
         * OWN_AHEAD of them are out at a time, so a ring holds a few
         * segments (in the caches, its front reused) instead of filling up
         * with a whole chunk while the sums come back. */
        while (sent < own && sent < done[r->p - 1] + OWN_AHEAD)
            if ((rc = send_segment(r, 0, r->me, sent++, 0, err)) < 0)
                return rc;
        pt_comm_frame f;
        if ((rc = pt_comm_internal_recv_frame_any(r->comm, r->left, family, mask, &f, err)) < 0)
            return recv_failed(rc, err);
        uint32_t part = pt_comm_tag_part(f.tag), k = part & (SEG_MAX - 1);
        int s = (int)(part >> SEG_BITS);
        if (s >= r->steps || k != done[s] ||
            k >= seg_count(chunk_len(r->count, r->p, step_chunk(r, s)))) {
            pt_comm_internal_frame_release(r->comm, &f);
            return pt_error_set(err, PT_EPARSE,
                                "allreduce: rank %d: step %d segment %u from rank %d is out of "
                                "order (segment %u of that step expected)",
                                pt_comm_rank(r->comm), s, k, r->left, s < r->steps ? done[s] : 0);
        }
        if ((rc = apply_segment_fused(r, s, step_chunk(r, s), k, &f, err)) < 0)
            return rc;
        done[s]++;
    }
    for (; sent < own; sent++)
        if ((rc = send_segment(r, 0, r->me, sent, 0, err)) < 0)
            return rc;
    return 0;
}

/* The ring step by step (ZeroMQ, zero-copy sends): every segment of step s
 * before any of step s+1. */
static int allreduce_steps(const ring *r, pt_error *err)
{
    int rc, p = r->p, me = r->me;
    /* Step 0: this rank's own chunk, unreduced, one segment ahead of the
     * step-0 receives, so a rank never has much more than a segment in
     * flight per neighbour (a bounded shared-memory ring never fills up
     * with a whole chunk while both neighbours wait to send). */
    uint32_t own = seg_count(chunk_len(r->count, p, me));
    if ((rc = send_segment(r, 0, me, 0, 1, err)) < 0)
        return rc;
    uint32_t sent = 1;
    for (int s = 0; s < r->steps; s++) {
        int c = step_chunk(r, s);
        /* Before the all-gather overwrites chunks the reduce-scatter sent
         * zero-copy, ZeroMQ must have released them. */
        if (s == p - 1 && pt_comm_internal_wait_ar_zc(r->comm, pt_comm_timeout_ms(r->comm)) < 0)
            return pt_error_set(err, PT_ETIMEOUT,
                                "allreduce: rank %d: sends to rank %d not released within %d ms",
                                pt_comm_rank(r->comm), r->right, pt_comm_timeout_ms(r->comm));
        for (uint32_t k = 0; k < seg_count(chunk_len(r->count, p, c)); k++) {
            if (s == 0 && sent < own && (rc = send_segment(r, 0, me, sent++, 1, err)) < 0)
                return rc;
            if ((rc = ring_segment(r, s, c, k, err)) < 0)
                return rc;
        }
        for (; s == 0 && sent < own; sent++)
            if ((rc = send_segment(r, 0, me, sent, 1, err)) < 0)
                return rc;
    }
    return 0;
}

/* Segment k of chunk c of buf, copied, to group member d under `step`. */
static int send_to_member(const ring *r, const int *ranks, int d, int step, int c, uint32_t k,
                          pt_error *err)
{
    size_t off = chunk_off(r->count, r->p, c) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    size_t n = seg_len(chunk_len(r->count, r->p, c), k);
    return pt_comm_send(r->comm, ranks[d], ring_tag(r->id, step, k), r->buf + off, n, err);
}

/* Receives segment k (n floats) from rank src under tag into *f, which the
 * caller releases; a frame of another size is an error naming `what`. */
static int recv_segment(const ring *r, int src, uint64_t tag, uint32_t k, size_t n,
                        const char *what, pt_comm_frame *f, pt_error *err)
{
    int rc = pt_comm_internal_recv_frame(r->comm, src, tag, f, err);
    if (rc < 0)
        return recv_failed(rc, err);
    if (f->bytes != n * sizeof(float)) {
        size_t got = f->bytes / sizeof(float);
        pt_comm_internal_frame_release(r->comm, f);
        return pt_error_set(err, PT_EINVAL,
                            "allreduce: rank %d: %s segment %u from rank %d has %zu floats, "
                            "expected %zu (do all members pass the same count?)",
                            pt_comm_rank(r->comm), what, k, src, got, n);
    }
    return 0;
}

/* Receives segment k of chunk c from member src under `step` into buf:
 * added (reduce) or copied (gather). */
static int take_from_member(const ring *r, const int *ranks, int src, int step, int c, uint32_t k,
                            int add, pt_error *err)
{
    size_t n = seg_len(chunk_len(r->count, r->p, c), k);
    float *dst = r->buf + chunk_off(r->count, r->p, c) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    pt_comm_frame f;
    int rc = recv_segment(r, ranks[src], ring_tag(r->id, step, k), k, n, add ? "reduce" : "gather",
                          &f, err);
    if (rc < 0)
        return rc;
    if (add)
        add_into(dst, f.data, n);
    else if (n)
        memcpy(dst, f.data, n * sizeof(float));
    pt_comm_internal_frame_release(r->comm, &f);
    return 0;
}

/* The last addend of segment k of this rank's own chunk, from member
 * me-1: summed into buf and, in the same pass, into the gather message to
 * member `first` (straight into its ring where it has one). */
static int last_addend(const ring *r, const int *ranks, int first, uint32_t k, pt_error *err)
{
    int src = (r->me + r->p - 1) % r->p;
    size_t n = seg_len(chunk_len(r->count, r->p, r->me), k);
    float *dst = r->buf + chunk_off(r->count, r->p, r->me) + (size_t)k * PT_COMM_SEGMENT_FLOATS;
    pt_comm_frame f;
    int rc =
        recv_segment(r, ranks[src], ring_tag(r->id, DIRECT_REDUCE, k), k, n, "reduce", &f, err);
    if (rc < 0)
        return rc;
    fused u = {dst, dst, f.data};
    pt_comm_internal_defer_wakes(r->comm, 1); /* the caller sends on, then wakes them all */
    rc = pt_comm_internal_send_fill(r->comm, ranks[first], ring_tag(r->id, DIRECT_GATHER, k),
                                    n * sizeof(float), fused_fill, &u, err);
    pt_comm_internal_frame_release(r->comm, &f);
    return rc;
}

/* The direct all-reduce (small buffers, a few ranks, when asked for; see
 * pt_comm_internal_allreduce_direct): member i sums chunk i itself, from
 * every member's copy of it, and sends the sum to every member. Two hand-offs
 * per all-reduce instead of the ring's 2(p-1) in sequence, the same bytes
 * per rank (2(p-1)/p of the buffer out and in). Chunk i is summed in the
 * ring's order, x_i + x_(i+1) + ... + x_(i-1) from the left (float addition
 * commutes, so a + b and b + a are the same bits): the results are the
 * ring's, bit for bit. Member i sends first to i-1, whose first source it
 * is, and takes from i+1 first. */
static int allreduce_direct(const ring *r, const int *ranks, pt_error *err)
{
    int p = r->p, me = r->me, rc = 0;
    pt_comm_internal_defer_wakes(r->comm, 1);
    for (int i = 1; i < p && rc == 0; i++) {
        int d = (me - i + p) % p;
        uint32_t segs = seg_count(chunk_len(r->count, p, d));
        for (uint32_t k = 0; k < segs && rc == 0; k++)
            rc = send_to_member(r, ranks, d, DIRECT_REDUCE, d, k, err);
    }
    pt_comm_internal_defer_wakes(r->comm, 0);
    if (rc < 0)
        return rc;
    uint32_t own = seg_count(chunk_len(r->count, p, me));
    for (uint32_t k = 0; k < own; k++) {
        for (int i = 1; i < p - 1; i++)
            if ((rc = take_from_member(r, ranks, (me + i) % p, DIRECT_REDUCE, me, k, 1, err)) < 0)
                return rc;
        /* The last addend: one pass writes the sum into buf and into the
         * message to the first member; then segment k goes out to the
         * others, so their copies start while this rank sums the next. */
        rc = last_addend(r, ranks, (me - 1 + p) % p, k, err);
        for (int i = 2; i < p && rc == 0; i++)
            rc = send_to_member(r, ranks, (me - i + p) % p, DIRECT_GATHER, me, k, err);
        pt_comm_internal_defer_wakes(r->comm, 0);
        if (rc < 0)
            return rc;
    }
    for (int i = 1; i < p; i++) {
        int src = (me + i) % p;
        uint32_t segs = seg_count(chunk_len(r->count, p, src));
        for (uint32_t k = 0; k < segs; k++)
            if ((rc = take_from_member(r, ranks, src, DIRECT_GATHER, src, k, 0, err)) < 0)
                return rc;
    }
    return 0;
}

int pt_comm_internal_allreduce_direct(int p, size_t count)
{
    const char *e = getenv("PT_COMM_ALLREDUCE");
    return e && !strcmp(e, "direct") && p >= 3 && p <= PT_COMM_DIRECT_MAX_GROUP &&
           count <= PT_COMM_DIRECT_MAX_FLOATS;
}

int pt_comm_allreduce(pt_comm *self, pt_comm_group *group, float *buf, size_t count, int op,
                      pt_error *err)
{
    if (!self || !group || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "allreduce: NULL argument");
    if (op != PT_COMM_SUM && op != PT_COMM_AVERAGE)
        return pt_error_set(err, PT_EINVAL, "allreduce: unknown op %d", op);
    int p = group->size, me = -1;
    if (p < 1 || p > PT_COMM_MAX_GROUP)
        return pt_error_set(err, PT_EINVAL, "allreduce: group size %d is out of range [1, %d]", p,
                            PT_COMM_MAX_GROUP);
    for (int i = 0; i < p; i++)
        if (group->ranks[i] == pt_comm_rank(self))
            me = i;
    if (me < 0)
        return pt_error_set(err, PT_EINVAL, "allreduce: rank %d is not in the group",
                            pt_comm_rank(self));
    if (chunk_len(count, p, 0) > (size_t)SEG_MAX * PT_COMM_SEGMENT_FLOATS)
        return pt_error_set(err, PT_ERANGE, "allreduce: %zu floats over %d ranks is too large",
                            count, p);
    ring r = {self,
              group->next_id++,
              p,
              me,
              group->ranks[(me + p - 1) % p],
              group->ranks[(me + 1) % p],
              2 * (p - 1),
              buf,
              count};
    if (p == 1)
        return 0;
    int rc = pt_comm_internal_allreduce_direct(p, count) ? allreduce_direct(&r, group->ranks, err)
             : pt_comm_internal_copies_to(self, r.right) ? allreduce_arrival_order(&r, err)
                                                         : allreduce_steps(&r, err);
    if (rc < 0)
        return rc;
    if (op == PT_COMM_AVERAGE) {
        float fp = (float)p;
        for (size_t j = 0; j < count; j++)
            buf[j] /= fp;
    }
    return 0;
}

/* ---- the collective thread ------------------------------------------------ */

enum { COLL_IDLE, COLL_POSTED, COLL_RUNNING, COLL_DONE };

struct pt_collective {
    pt_comm *comm;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state, quit;
    pt_comm_group group;
    float *buf;
    size_t count;
    int op;
    int rc;
    pt_error err;
    pt_comm_stats stats;
};

static void *coll_main(void *arg)
{
    pt_collective *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        /* Waits without a bound: pt_collective_destroy sets quit and signals. */
        while (c->state != COLL_POSTED && !c->quit)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit && c->state != COLL_POSTED)
            break;
        c->state = COLL_RUNNING;
        pt_comm_group g = c->group;
        float *buf = c->buf;
        size_t count = c->count;
        int op = c->op;
        pthread_mutex_unlock(&c->mu);

        pt_error e;
        pt_error_clear(&e);
        int rc = pt_comm_allreduce(c->comm, &g, buf, count, op, &e);
        pt_comm_stats st;
        pt_comm_stats_get(c->comm, &st);

        pthread_mutex_lock(&c->mu);
        c->rc = rc;
        c->err = e;
        c->stats = st;
        c->state = COLL_DONE;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int pt_collective_create(pt_comm **comm_p, pt_collective **out, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!comm_p || !*comm_p || !out)
        return pt_error_set(err, PT_EINVAL, "collective: NULL argument");
    pt_collective *c = calloc(1, sizeof *c);
    if (!c)
        return pt_error_set(err, PT_ENOMEM, "collective: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->comm = *comm_p;
    c->state = COLL_IDLE;
    /* The mutex hand-off is the full barrier ZeroMQ asks for when sockets
     * move to another thread. */
    int e = pthread_create(&c->thread, NULL, coll_main, c);
    if (e != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return pt_error_set(err, PT_EIO, "collective: pthread_create: %s", strerror(e));
    }
    *comm_p = NULL;
    *out = c;
    return 0;
}

int pt_collective_start(pt_collective *self, pt_comm_group *group, float *buf, size_t count, int op,
                        pt_error *err)
{
    if (!self || !group || (!buf && count))
        return pt_error_set(err, PT_EINVAL, "collective: NULL argument");
    pthread_mutex_lock(&self->mu);
    if (self->state != COLL_IDLE) {
        pthread_mutex_unlock(&self->mu);
        return pt_error_set(err, PT_ESTATE,
                            "collective: an all-reduce is in flight or not yet waited for");
    }
    self->group = *group;
    self->buf = buf;
    self->count = count;
    self->op = op;
    self->state = COLL_POSTED;
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    group->next_id++; /* the thread's copy advances the same way */
    return 0;
}

int pt_collective_test(pt_collective *self)
{
    if (!self)
        return 1;
    pthread_mutex_lock(&self->mu);
    int done = self->state == COLL_IDLE || self->state == COLL_DONE;
    pthread_mutex_unlock(&self->mu);
    return done;
}

int pt_collective_wait(pt_collective *self, int timeout_ms, pt_error *err)
{
    if (!self)
        return pt_error_set(err, PT_EINVAL, "collective: NULL argument");
    struct timespec dl = pt_clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&self->mu);
    while (self->state == COLL_POSTED || self->state == COLL_RUNNING) {
        if (pthread_cond_timedwait(&self->cv, &self->mu, &dl) == ETIMEDOUT &&
            (self->state == COLL_POSTED || self->state == COLL_RUNNING)) {
            pthread_mutex_unlock(&self->mu);
            return pt_error_set(err, PT_ETIMEOUT,
                                "collective: all-reduce still running after "
                                "%d ms",
                                timeout_ms);
        }
    }
    int rc = 0;
    if (self->state == COLL_DONE) {
        rc = self->rc;
        if (rc < 0 && err)
            *err = self->err;
        self->state = COLL_IDLE;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

void pt_collective_stats(pt_collective *self, pt_comm_stats *out)
{
    if (!self || !out)
        return;
    pthread_mutex_lock(&self->mu);
    *out = self->stats;
    pthread_mutex_unlock(&self->mu);
}

void pt_collective_destroy(pt_collective **self_p)
{
    if (!self_p || !*self_p)
        return;
    pt_collective *c = *self_p;
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    /* An operation in flight ends within its receive timeouts. */
    pthread_join(c->thread, NULL);
    pt_comm_destroy(&c->comm);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *self_p = NULL;
}
