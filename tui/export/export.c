/* The export set: op spans normalised for trace and picture (see export.h). */
#include "tui/export/export.h"
#include "tui/record/replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/record.h"
#include "protocol/sched_kind.h"

#define ROWS_TRACKED 64 /* rows whose track counts the set keeps (tracks[][]) */

void pt_export_set_release(pt_export_set *set)
{
    if (!set)
        return;
    free(set->spans);
    free(set->rows);
    free(set->agents);
    free(set->mem);
    memset(set, 0, sizeof *set);
}

/* ---- normalising --------------------------------------------------------------- */

static int cmp_track_order(const void *a, const void *b)
{
    const pt_export_span *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    if (x->lane != y->lane)
        return x->lane < y->lane ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Every (row, lane) spread over as few tracks as keep its slices apart:
 * a span goes to the first track whose last slice ended by its start. */
static void assign_tracks(pt_export_set *set)
{
    double ends[PT_EXPORT_TRACKS_MAX];
    int n = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        pt_export_span *s = &set->spans[i];
        if (i == 0 || s->row != s[-1].row || s->lane != s[-1].lane)
            n = 0;
        int t = 0;
        while (t < n && ends[t] > s->start)
            t++;
        if (t == n) {
            if (n < PT_EXPORT_TRACKS_MAX)
                n++;
            else
                t = n - 1; /* beyond any real schedule: the last track takes it */
        }
        ends[t] = s->end;
        s->track = t;
        set->extra_tracks += t > 0;
        if (s->row < ROWS_TRACKED && set->tracks[s->row][s->lane] < t + 1)
            set->tracks[s->row][s->lane] = t + 1;
    }
}

typedef struct iter_key {
    int64_t gen, step;
    double lo, hi;
} iter_key;

static int cmp_iter_key(const void *a, const void *b)
{
    const iter_key *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

static int cmp_iter_lo(const void *a, const void *b)
{
    double x = ((const iter_key *)a)->lo, y = ((const iter_key *)b)->lo;
    return (x > y) - (x < y);
}

/* The time the iterations occupy, as disjoint intervals sorted by time:
 * *out (caller frees) gets *n of them; *iters the (gen, step) count. */
static int iteration_union(const pt_export_set *set, iter_key **out, int64_t *n, int64_t *iters)
{
    iter_key *k = malloc(sizeof *k * (size_t)(set->ops ? set->ops : 1));
    if (!k)
        return PT_ENOMEM;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *s = &set->spans[i];
        k[i] = (iter_key){s->gen, s->step, s->start, s->end};
    }
    qsort(k, (size_t)set->ops, sizeof *k, cmp_iter_key);
    int64_t m = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        if (m > 0 && k[m - 1].gen == k[i].gen && k[m - 1].step == k[i].step) {
            if (k[i].lo < k[m - 1].lo)
                k[m - 1].lo = k[i].lo;
            if (k[i].hi > k[m - 1].hi)
                k[m - 1].hi = k[i].hi;
        } else {
            k[m++] = k[i];
        }
    }
    *iters = m;
    qsort(k, (size_t)m, sizeof *k, cmp_iter_lo);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++) {
        if (u > 0 && k[i].lo <= k[u - 1].hi) {
            if (k[i].hi > k[u - 1].hi)
                k[u - 1].hi = k[i].hi;
        } else {
            k[u++] = k[i];
        }
    }
    *out = k;
    *n = u;
    return 0;
}

static int push_span(pt_export_set *set, int64_t *cap, const pt_export_span *s)
{
    if (set->count == *cap) {
        int64_t c = *cap ? *cap * 2 : 1024;
        pt_export_span *q = realloc(set->spans, sizeof *q * (size_t)c);
        if (!q)
            return PT_ENOMEM;
        set->spans = q;
        *cap = c;
    }
    set->spans[set->count++] = *s;
    return 0;
}

static int add_gap(pt_export_set *set, int64_t *cap, int row, double a, double b,
                   const pt_export_span *near)
{
    pt_export_span g;
    memset(&g, 0, sizeof g);
    g.start = a;
    g.end = b;
    g.row = row;
    g.stage = set->rows[row].stage;
    g.replica = set->rows[row].replica;
    g.mb = -1;
    g.version = -1;
    g.agent = near ? near->agent : -1;
    g.step = near ? near->step : 0;
    g.gen = near ? near->gen : 0;
    g.op = PT_OP_KIND_COUNT;
    g.lane = PT_LANE_COMPUTE;
    set->bubbles++;
    return push_span(set, cap, &g);
}

/* Appends the bubbles: per row, the union of the iterations minus the union
 * of the row's compute spans (ops are sorted by row, lane, start). */
static int add_bubbles(pt_export_set *set, int64_t *cap)
{
    iter_key *u = NULL;
    int64_t nu = 0;
    int rc = iteration_union(set, &u, &nu, &set->iterations);
    int64_t ops = set->ops, i = 0;
    for (int row = 0; row < set->row_count && rc == 0; row++) {
        while (i < ops && (set->spans[i].row < row ||
                           (set->spans[i].row == row && set->spans[i].lane != PT_LANE_COMPUTE)))
            i++;
        int64_t j = i, end = i;
        while (end < ops && set->spans[end].row == row && set->spans[end].lane == PT_LANE_COMPUTE)
            end++;
        double cover = -INFINITY;
        for (int64_t k = 0; k < nu && rc == 0; k++) {
            double t = u[k].lo > cover ? u[k].lo : cover;
            pt_export_span prev;
            int have_prev = j > i;
            if (have_prev)
                prev = set->spans[j - 1];
            while (j < end && set->spans[j].start < u[k].hi && rc == 0) {
                pt_export_span s = set->spans[j]; /* push_span may move the array */
                if (s.start > t)
                    rc = add_gap(set, cap, row, t, s.start, &s);
                if (s.end > t)
                    t = s.end;
                if (s.end > cover)
                    cover = s.end;
                prev = s;
                have_prev = 1;
                j++;
            }
            if (t < u[k].hi && rc == 0)
                rc = add_gap(set, cap, row, t, u[k].hi, have_prev ? &prev : NULL);
        }
        i = end;
    }
    free(u);
    return rc;
}

typedef struct p2p_key {
    int64_t gen, step, idx;
    int32_t mb, to_stage, down, replica;
    double start;
} p2p_key;

static int cmp_p2p(const void *a, const void *b)
{
    const p2p_key *x = a, *y = b;
#define CMP_(f)                                                                                    \
    if (x->f != y->f)                                                                              \
        return x->f < y->f ? -1 : 1;
    CMP_(gen)
    CMP_(step)
    CMP_(mb)
    CMP_(to_stage)
    CMP_(down)
    CMP_(replica)
    CMP_(start)
#undef CMP_
    return 0;
}

static int same_p2p(const p2p_key *x, const p2p_key *y)
{
    return x->gen == y->gen && x->step == y->step && x->mb == y->mb && x->to_stage == y->to_stage &&
           x->down == y->down;
}

/* Links a SEND and a RECV by a new flow id. */
static void link_flow(pt_export_set *set, const p2p_key *snd, const p2p_key *rcv)
{
    set->flows++;
    set->spans[snd->idx].flow = set->flows;
    set->spans[rcv->idx].flow = set->flows;
}

/* The pieces of one transfer (sends s[0..ns), receives r[0..nr), each
 * sorted by replica, then time): split-concat cuts a micro-batch's rows
 * into pieces in row order, each sender replica sending its pieces in that
 * order and each receiver replica receiving its pieces in it, so the p-th
 * send of the sorted list is the p-th receive. 0, or -1 (nothing linked)
 * when the two lists do not match piece by piece (counts or bytes). */
static int pair_pieces(pt_export_set *set, const p2p_key *s, int64_t ns, const p2p_key *r,
                       int64_t nr, char *used)
{
    if (ns != nr)
        return -1;
    for (int64_t p = 0; p < ns; p++)
        if (set->spans[s[p].idx].bytes != set->spans[r[p].idx].bytes)
            return -1;
    for (int64_t p = 0; p < ns; p++) {
        used[p] = 1;
        link_flow(set, &s[p], &r[p]);
    }
    return 0;
}

/* The fallback for a transfer cut short (a receive outside the record):
 * each send takes the first unused receive with its bytes, else any. */
static void pair_by_bytes(pt_export_set *set, const p2p_key *s, int64_t ns, const p2p_key *r,
                          int64_t nr, char *used)
{
    for (int64_t x = 0; x < ns; x++) {
        int64_t pick = -1;
        for (int pass = 0; pass < 2 && pick < 0; pass++)
            for (int64_t y = 0; y < nr && pick < 0; y++)
                if (!used[y] &&
                    (pass == 1 || set->spans[r[y].idx].bytes == set->spans[s[x].idx].bytes))
                    pick = y;
        if (pick < 0) {
            set->unmatched_sends++;
            continue;
        }
        used[pick] = 1;
        link_flow(set, &s[x], &r[pick]);
    }
}

/* Pairs every SEND with a RECV of the same transfer (see export.h). */
static int add_flows(pt_export_set *set)
{
    int64_t ns = 0, nr = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        unsigned f = pt_op_facts(set->spans[i].op);
        ns += (f & PT_OPK_P2P) && (f & PT_OPK_SEND);
        nr += (f & PT_OPK_P2P) && (f & PT_OPK_RECV);
    }
    p2p_key *s = malloc(sizeof *s * (size_t)(ns + 1)), *r = malloc(sizeof *r * (size_t)(nr + 1));
    char *used = calloc((size_t)(nr + 1), 1);
    if (!s || !r || !used) {
        free(s);
        free(r);
        free(used);
        return PT_ENOMEM;
    }
    ns = nr = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *x = &set->spans[i];
        unsigned f = pt_op_facts(x->op);
        if (!(f & PT_OPK_P2P))
            continue;
        int next = (f & PT_OPK_NEXT) != 0;
        p2p_key k = {x->gen, x->step, i, x->mb, x->stage, 0, x->replica, x->start};
        if (f & PT_OPK_SEND) {
            k.to_stage = x->stage + (next ? 1 : -1);
            k.down = next;
            s[ns++] = k;
        } else {
            k.down = !next;
            r[nr++] = k;
        }
    }
    qsort(s, (size_t)ns, sizeof *s, cmp_p2p);
    qsort(r, (size_t)nr, sizeof *r, cmp_p2p);
    int64_t a = 0, c = 0;
    while (a < ns) {
        int64_t b = a;
        while (b < ns && same_p2p(&s[b], &s[a]))
            b++;
        while (c < nr && cmp_p2p(&r[c], &s[a]) < 0 && !same_p2p(&r[c], &s[a]))
            c++;
        int64_t d = c;
        while (d < nr && same_p2p(&r[d], &s[a]))
            d++;
        if (pair_pieces(set, s + a, b - a, r + c, d - c, used + c) < 0)
            pair_by_bytes(set, s + a, b - a, r + c, d - c, used + c);
        a = b;
        c = d;
    }
    free(s);
    free(r);
    free(used);
    return 0;
}

/* ---- clocks ------------------------------------------------------------------ */

/* A receive ends at least this long after its send started (no transfer is
 * quicker), so an arrow's ends never sit on a slice's boundary. */
#define CLOCK_MARGIN_S 2e-6

/* One agent in one generation: its spans share one clock offset. */
typedef struct clock_node {
    int32_t agent;
    int64_t gen;
    double adj; /* seconds added to its spans */
    int set;
} clock_node;

/* What the transfers between two clocks allow: x = adj[b] - adj[a] in
 * [lo, hi] keeps every receive's end at or after its send's start. */
typedef struct clock_edge {
    int a, b;
    double lo, hi;
} clock_edge;

static int node_of(clock_node **v, int *n, int *cap, int32_t agent, int64_t gen)
{
    for (int i = 0; i < *n; i++)
        if ((*v)[i].agent == agent && (*v)[i].gen == gen)
            return i;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        clock_node *q = realloc(*v, sizeof *q * (size_t)c);
        if (!q)
            return PT_ENOMEM;
        *v = q;
        *cap = c;
    }
    (*v)[*n] = (clock_node){agent, gen, 0, 0};
    return (*n)++;
}

static int edge_add(clock_edge **v, int *n, int *cap, int a, int b, double need)
{
    /* kept as a < b: a transfer b -> a bounds x from above */
    int flip = a > b;
    int lo = flip ? b : a, hi = flip ? a : b;
    for (int i = 0; i < *n; i++)
        if ((*v)[i].a == lo && (*v)[i].b == hi) {
            if (flip && -need < (*v)[i].hi)
                (*v)[i].hi = -need;
            else if (!flip && need > (*v)[i].lo)
                (*v)[i].lo = need;
            return 0;
        }
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        clock_edge *q = realloc(*v, sizeof *q * (size_t)c);
        if (!q)
            return PT_ENOMEM;
        *v = q;
        *cap = c;
    }
    (*v)[(*n)++] = (clock_edge){lo, hi, flip ? -INFINITY : need, flip ? -need : INFINITY};
    return 0;
}

/* The corrections when the transfers' bounds contradict each other: from
 * the first clock of each generation, along the transfers, each neighbour
 * moved as little as its own bound allows. */
static void clock_solve_tree(clock_node *nodes, int nn, const clock_edge *e, int ne)
{
    for (int root = 0; root < nn; root++) {
        if (nodes[root].set)
            continue;
        nodes[root].set = 1;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int i = 0; i < ne; i++) {
                int a = e[i].a, b = e[i].b;
                if (nodes[a].set == nodes[b].set)
                    continue;
                double x = e[i].lo <= e[i].hi ? (0 < e[i].lo   ? e[i].lo
                                                 : 0 > e[i].hi ? e[i].hi
                                                               : 0)
                                              : 0.5 * (e[i].lo + e[i].hi);
                if (nodes[a].set)
                    nodes[b].adj = nodes[a].adj + x;
                else
                    nodes[a].adj = nodes[b].adj - x;
                nodes[a].set = nodes[b].set = 1;
                moved = 1;
            }
        }
    }
}

/* The corrections: every bound at once, as a system of difference
 * constraints (adj[b] - adj[a] in [lo, hi]) solved by Bellman-Ford from a
 * source 0 away from every clock, which gives the largest solution <= 0:
 * no clock moves when the recorded offsets keep every transfer causal, and
 * each moves back only as far as some chain of transfers needs. A tree of
 * transfers alone (the fallback) leaves the others unchecked: with a
 * replicated stage the clocks form cycles, and a receive on another edge
 * of one still ended before its send started. */
static void clock_solve(clock_node *nodes, int nn, const clock_edge *e, int ne)
{
    for (int i = 0; i < nn; i++)
        nodes[i].adj = 0;
    int changed = 1;
    for (int round = 0; changed && round <= nn; round++) {
        changed = 0;
        for (int i = 0; i < ne; i++) {
            int a = e[i].a, b = e[i].b;
            if (isfinite(e[i].hi) && nodes[a].adj + e[i].hi < nodes[b].adj - 1e-12) {
                nodes[b].adj = nodes[a].adj + e[i].hi;
                changed = 1;
            }
            if (isfinite(e[i].lo) && nodes[b].adj - e[i].lo < nodes[a].adj - 1e-12) {
                nodes[a].adj = nodes[b].adj - e[i].lo;
                changed = 1;
            }
        }
    }
    if (changed) { /* a contradiction (a cycle of bounds): the tree instead */
        for (int i = 0; i < nn; i++)
            nodes[i].adj = 0, nodes[i].set = 0;
        clock_solve_tree(nodes, nn, e, ne);
    }
}

/* The flow's pair: for id f, snd[f] and rcv[f] (span indices); *out
 * (caller frees) holds 2 * (flows + 1) entries. */
static int flow_pairs(const pt_export_set *set, int64_t **out)
{
    int64_t *p = malloc(sizeof *p * (size_t)(2 * (set->flows + 1)));
    if (!p)
        return PT_ENOMEM;
    for (int64_t i = 0; i < 2 * (set->flows + 1); i++)
        p[i] = -1;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *x = &set->spans[i];
        if (x->flow > 0 && x->flow <= set->flows)
            p[2 * x->flow + ((pt_op_facts(x->op) & PT_OPK_SEND) ? 0 : 1)] = i;
    }
    *out = p;
    return 0;
}

/* Agents' clocks are put on the console's by an offset estimated from
 * heartbeats, which a loaded host gets wrong by milliseconds: enough for a
 * receive to end before its send began. Each (agent, generation) clock is
 * moved by the least that makes every transfer causal (a receive ends no
 * earlier than its send starts), solved along the transfers between
 * neighbours. Then the set starts at 0 again. */
static int align_clocks(pt_export_set *set)
{
    int64_t *pair = NULL;
    clock_node *nodes = NULL;
    clock_edge *edges = NULL;
    int nn = 0, ncap = 0, ne = 0, ecap = 0;
    int rc = set->flows > 0 ? flow_pairs(set, &pair) : 0;
    for (int64_t f = 1; rc >= 0 && pair && f <= set->flows; f++) {
        int64_t si = pair[2 * f], ri = pair[2 * f + 1];
        if (si < 0 || ri < 0)
            continue;
        const pt_export_span *sd = &set->spans[si], *rv = &set->spans[ri];
        if (sd->agent < 0 || rv->agent < 0 || sd->gen != rv->gen)
            continue;
        int a = node_of(&nodes, &nn, &ncap, sd->agent, sd->gen);
        int b = a < 0 ? a : node_of(&nodes, &nn, &ncap, rv->agent, rv->gen);
        rc = b < 0    ? b
             : a == b ? 0
                      : edge_add(&edges, &ne, &ecap, a, b, sd->start - rv->end + CLOCK_MARGIN_S);
    }
    free(pair);
    if (rc >= 0 && nn > 0) {
        clock_solve(nodes, nn, edges, ne);
        double t0 = INFINITY;
        for (int64_t i = 0; i < set->ops; i++) {
            pt_export_span *x = &set->spans[i];
            for (int k = 0; x->agent >= 0 && k < nn; k++)
                if (nodes[k].agent == x->agent && nodes[k].gen == x->gen) {
                    x->start += nodes[k].adj;
                    x->end += nodes[k].adj;
                    break;
                }
            t0 = x->start < t0 ? x->start : t0;
        }
        for (int64_t i = 0; i < set->ops && t0 != 0; i++) {
            set->spans[i].start -= t0;
            set->spans[i].end -= t0;
        }
        for (int64_t i = 0; i < set->mem_count && t0 != 0; i++)
            set->mem[i].t -= t0;
        qsort(set->spans, (size_t)set->ops, sizeof *set->spans, cmp_track_order);
    }
    free(nodes);
    free(edges);
    return rc < 0 ? PT_ENOMEM : 0;
}

/* Sorts the ops, pairs sends with receives (and puts the clocks right by
 * them), spreads them over tracks, adds bubbles. */
static int normalise(pt_export_set *set, int64_t cap)
{
    if (set->count > 0) /* spans is NULL in a record without op events */
        qsort(set->spans, (size_t)set->count, sizeof *set->spans, cmp_track_order);
    set->ops = set->count;
    int rc = add_flows(set);
    if (rc == 0)
        rc = align_clocks(set);
    if (rc < 0)
        return rc;
    set->t0 = set->t1 = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *s = &set->spans[i];
        if (i == 0 || s->start < set->t0)
            set->t0 = s->start;
        if (i == 0 || s->end > set->t1)
            set->t1 = s->end;
        if (set->first_step < 0 || s->step < set->first_step)
            set->first_step = s->step;
        if (s->step > set->last_step)
            set->last_step = s->step;
    }
    assign_tracks(set);
    return add_bubbles(set, &cap);
}

/* Index of (stage, replica) in the sorted rows, added when absent. */
static int row_of(pt_export_set *set, int *cap, int stage, int replica)
{
    int lo = 0, hi = set->row_count;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const pt_tl_row *r = &set->rows[mid];
        if (r->stage < stage || (r->stage == stage && r->replica < replica))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < set->row_count && set->rows[lo].stage == stage && set->rows[lo].replica == replica)
        return lo;
    if (set->row_count == *cap) {
        int c = *cap ? *cap * 2 : 16;
        pt_tl_row *q = realloc(set->rows, sizeof *q * (size_t)c);
        if (!q)
            return PT_ENOMEM;
        set->rows = q;
        *cap = c;
    }
    memmove(set->rows + lo + 1, set->rows + lo, sizeof *set->rows * (size_t)(set->row_count - lo));
    set->rows[lo] = (pt_tl_row){stage, replica};
    set->row_count++;
    return lo;
}

/* Row indices of the spans, once every row is known. */
static void fill_rows(pt_export_set *set)
{
    int cap = set->row_count;
    for (int64_t i = 0; i < set->count; i++)
        set->spans[i].row = row_of(set, &cap, set->spans[i].stage, set->spans[i].replica);
}

int pt_export_from_tline(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count,
                         pt_export_set *set)
{
    memset(set, 0, sizeof *set);
    set->first_step = set->last_step = -1;
    int rcap = 0;
    int64_t cap = 0;
    for (int r = 0; r < tl->row_count; r++)
        if (row_of(set, &rcap, tl->rows[r].stage, tl->rows[r].replica) < 0)
            goto nomem;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *t = &tl->spans[i];
        pt_export_span s;
        memset(&s, 0, sizeof s);
        s.start = t->start - tl->t0;
        s.end = t->end - tl->t0;
        s.step = t->step;
        s.mb = t->mb;
        s.version = -1;
        s.bytes = t->bytes;
        s.stage = tl->rows[t->row].stage;
        s.replica = tl->rows[t->row].replica;
        s.agent = -1;
        s.op = t->op;
        s.lane = t->lane;
        if (push_span(set, &cap, &s) < 0)
            goto nomem;
    }
    fill_rows(set);
    if (mem_count > 0 && mem) {
        if (!(set->mem = malloc(sizeof *mem * (size_t)mem_count)))
            goto nomem;
        memcpy(set->mem, mem, sizeof *mem * (size_t)mem_count);
        for (int64_t i = 0; i < mem_count; i++)
            set->mem[i].t -= tl->t0;
        set->mem_count = mem_count;
    }
    if (normalise(set, cap) < 0)
        goto nomem;
    return 0;
nomem:
    pt_export_set_release(set);
    return PT_ENOMEM;
}

/* ---- run records ---------------------------------------------------------------- */

/* An agent's clock offset in one generation: its last estimate. */
typedef struct agent_gen {
    const char *agent;
    int64_t gen, offset_ns;
    int seen; /* offset_ns set */
} agent_gen;

/* An open-addressing index (slots hold index + 1, 0 empty; at most half
 * full), so that finding an agent costs the same with 4 agents or 1,024. */
typedef struct name_ix {
    int *slots;
    int n; /* a power of two, or 0 */
} name_ix;

static unsigned name_hash(const char *name, int64_t gen)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)gen; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (unsigned)(h ^ (h >> 32));
}

/* The (agent, gen) pair's row in ag[0..), -1 when absent; *slot gets the
 * slot it has or would have. */
static int ag_find(const name_ix *ix, const agent_gen *ag, const char *agent, int64_t gen,
                   unsigned *slot)
{
    unsigned mask = (unsigned)ix->n - 1, k = name_hash(agent, gen) & mask;
    for (; ix->slots[k]; k = (k + 1) & mask) {
        const agent_gen *x = &ag[ix->slots[k] - 1];
        if (x->gen == gen && !strcmp(x->agent, agent))
            break;
    }
    *slot = k;
    return ix->slots[k] - 1;
}

/* Makes room in ix for count + 1 rows, re-indexing ag[0..count). 0 or PT_ENOMEM. */
static int ag_reserve(name_ix *ix, const agent_gen *ag, int count)
{
    if (2 * (count + 1) <= ix->n)
        return 0;
    name_ix g = {calloc((size_t)(ix->n ? 2 * ix->n : 64), sizeof(int)), ix->n ? 2 * ix->n : 64};
    if (!g.slots)
        return PT_ENOMEM;
    for (int i = 0; i < count; i++) {
        unsigned k;
        ag_find(&g, ag, ag[i].agent, ag[i].gen, &k);
        g.slots[k] = i + 1;
    }
    free(ix->slots);
    *ix = g;
    return 0;
}

typedef struct order_key {
    int64_t gen, step, order;
} order_key;

static int cmp_order_gs(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static int cmp_order(const void *a, const void *b)
{
    int64_t x = ((const order_key *)a)->order, y = ((const order_key *)b)->order;
    return (x > y) - (x < y);
}

static int is_telemetry(const pt_record_entry *e)
{
    return e->kind == PT_RECORD_RECV && e->channel && !strcmp(e->channel, "telemetry") &&
           (e->msg_type == PT_MSG_EVENTS || e->msg_type == PT_MSG_METRICS) && e->agent;
}

/* The (gen, step) pairs wanted, sorted by (gen, step), from the selection.
 * *n 0 with *all set: every step in [sel->first, sel->last]. */
static int select_iterations(const pt_record *rec, const pt_export_select *sel, order_key **out,
                             int64_t *n)
{
    *out = NULL;
    *n = 0;
    if (!sel || sel->last_n <= 0)
        return 0;
    int64_t cap = 1024, m = 0;
    order_key *k = malloc(sizeof *k * (size_t)cap);
    if (!k)
        return PT_ENOMEM;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (!is_telemetry(e) || e->step < 0)
            continue;
        for (int64_t st = e->step; st <= e->step_last; st++) {
            if (m > 0 && k[m - 1].gen == e->gen && k[m - 1].step == st)
                continue;
            if (m == cap) {
                order_key *q = realloc(k, sizeof *k * (size_t)(cap *= 2));
                if (!q) {
                    free(k);
                    return PT_ENOMEM;
                }
                k = q;
            }
            k[m++] = (order_key){e->gen, st, i};
        }
    }
    qsort(k, (size_t)m, sizeof *k, cmp_order_gs);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || k[u - 1].gen != k[i].gen || k[u - 1].step != k[i].step)
            k[u++] = k[i];
    qsort(k, (size_t)u, sizeof *k, cmp_order);
    int64_t keep = sel->last_n < u ? sel->last_n : u;
    memmove(k, k + (u - keep), sizeof *k * (size_t)keep);
    qsort(k, (size_t)keep, sizeof *k, cmp_order_gs);
    *out = k;
    *n = keep;
    return 0;
}

static int wanted(const pt_export_select *sel, const order_key *keys, int64_t nkeys, int64_t gen,
                  int64_t step)
{
    if (sel && sel->last_n > 0) {
        order_key q = {gen, step, 0};
        int64_t lo = 0, hi = nkeys;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            const order_key *x = &keys[mid];
            if (x->gen < gen || (x->gen == gen && x->step < step))
                lo = mid + 1;
            else
                hi = mid;
        }
        (void)q;
        return lo < nkeys && keys[lo].gen == gen && keys[lo].step == step;
    }
    if (!sel)
        return 1;
    return step >= sel->first && (sel->last < 0 || step <= sel->last);
}

/* The agent's index in set->agents (added when new), looked up in ix (an
 * index of (name, 0) rows, kept in step with set->agents). */
static int agent_index(pt_export_set *set, int *cap, name_ix *ix, agent_gen **rows,
                       const char *name)
{
    unsigned k;
    int i = ix->n ? ag_find(ix, *rows, name, 0, &k) : -1;
    if (i >= 0)
        return i;
    if (set->agent_count == *cap) {
        int c = *cap ? *cap * 2 : 16;
        char(*q)[PT_MSG_ID_MAX] = realloc(set->agents, sizeof *q * (size_t)c);
        agent_gen *r = realloc(*rows, sizeof *r * (size_t)c);
        if (r)
            *rows = r;
        if (q)
            set->agents = q;
        if (!q || !r)
            return PT_ENOMEM;
        *cap = c;
        for (int j = 0; j < set->agent_count; j++) /* the names moved */
            (*rows)[j].agent = set->agents[j];
    }
    if (ag_reserve(ix, *rows, set->agent_count) < 0)
        return PT_ENOMEM;
    snprintf(set->agents[set->agent_count], PT_MSG_ID_MAX, "%s", name);
    (*rows)[set->agent_count] = (agent_gen){set->agents[set->agent_count], 0, 0, 0};
    ag_find(ix, *rows, name, 0, &k);
    ix->slots[k] = set->agent_count + 1;
    return set->agent_count++;
}

static int64_t offset_of(const name_ix *ix, const agent_gen *ag, const char *agent, int64_t gen,
                         int64_t fallback)
{
    unsigned k;
    int i = ix->n ? ag_find(ix, ag, agent, gen, &k) : -1;
    return i >= 0 ? ag[i].offset_ns : fallback;
}

/* 1 when a register the record received carries the "simulated"
 * capability (pipetop-agent --simulate). */
static int simulated_register(const pt_record_entry *e)
{
    if (e->kind != PT_RECORD_RECV || e->msg_type != PT_MSG_REGISTER || !e->frame)
        return 0;
    pt_msg m;
    if (pt_msg_decode(e->frame, e->frame_len, "record", &m, NULL) < 0)
        return 0;
    int sim = 0;
    for (int c = 0; m.type == PT_MSG_REGISTER && c < m.u.reg.cap_count; c++)
        sim |= !strcmp(m.u.reg.caps[c], PT_MSG_CAP_SIMULATED);
    pt_msg_clear(&m);
    return sim;
}

/* The last plan of generation gen (or the newest one before it), for the
 * title, which starts "simulated" for a run of simulated agents; the
 * figures follow when the caller has them (pt_export_set_figures). */
static void make_title(pt_export_set *set, const pt_record *rec, int64_t gen)
{
    const pt_plan *plan = NULL;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind == PT_RECORD_PLAN && e->plan && (e->gen <= gen || !plan))
            plan = e->plan;
        if (!set->simulated)
            set->simulated = simulated_register(e);
    }
    char stages[128] = "";
    size_t at = 0;
    for (int s = 0; plan && s < plan->stage_count && at + 8 < sizeof stages; s++)
        at += (size_t)snprintf(stages + at, sizeof stages - at, "%s%d", s ? "," : "",
                               plan->stages[s].replica_count);
    if (plan)
        snprintf(set->title, sizeof set->title,
                 "%s%s | %d stages (replicas %s) | %s, %d x %d | gen %lld, steps %lld-%lld",
                 set->simulated ? "simulated agents: " : "", plan->model, plan->stage_count, stages,
                 pt_sched_kind_name(plan->schedule), plan->microbatch_count, plan->microbatch_size,
                 (long long)gen, (long long)set->first_step, (long long)set->last_step);
}

void pt_export_set_figures(pt_export_set *set, const pt_fig_meas *meas, const pt_fig_pred *pred)
{
    set->has_meas = meas && meas->steps > 0;
    set->has_pred = pred != NULL;
    if (set->has_meas)
        set->meas = *meas;
    if (set->has_pred)
        set->pred = *pred;
    size_t n = strlen(set->title);
    if (set->has_meas && n + 1 < sizeof set->title)
        n += (size_t)snprintf(set->title + n, sizeof set->title - n,
                              "%smeasured %.3f ms/iteration (%s)", n ? ": " : "", meas->iter_ms,
                              meas->label);
    if (set->has_pred && n + 1 < sizeof set->title)
        snprintf(set->title + n, sizeof set->title - n, "%spredicted %.3f ms (%s)",
                 n ? (set->has_meas ? ", " : ": ") : "", pred->iter_ms, pred->label);
}

/* Adds the selected events and memory samples of the record to set. */
static int gather(const pt_record *rec, const pt_export_select *sel, const order_key *keys,
                  int64_t nkeys, pt_export_set *set, int64_t *cap, int64_t *max_gen, pt_error *err)
{
    int nag = 0, agcap = 0, acap = 0, rcap = 0;
    agent_gen *ag = NULL, *names = NULL;
    name_ix agix = {0}, nameix = {0};
    int rc = 0;
    for (int64_t i = 0; i < pt_record_count(rec) && rc == 0; i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (!is_telemetry(e))
            continue;
        unsigned slot;
        if ((rc = ag_reserve(&agix, ag, nag)) < 0)
            break;
        int k = ag_find(&agix, ag, e->agent, e->gen, &slot);
        if (k < 0) {
            if (nag == agcap) {
                agcap = agcap ? agcap * 2 : 16;
                agent_gen *q = realloc(ag, sizeof *q * (size_t)agcap);
                if (!q) {
                    rc = PT_ENOMEM;
                    break;
                }
                ag = q;
            }
            k = nag++;
            ag[k].agent = e->agent;
            ag[k].gen = e->gen;
            ag[k].seen = 0;
            agix.slots[slot] = k + 1;
        }
        if (!e->tail || !ag[k].seen) /* a tail frame comes late: its offset is an old one */
            ag[k].offset_ns = e->offset_ns;
        ag[k].seen = 1;
    }
    int64_t origin = INT64_MAX;
    /* two passes: the origin (earliest selected start), then the spans */
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int64_t i = 0; i < pt_record_count(rec) && rc == 0; i++) {
            const pt_record_entry *e = pt_record_at(rec, i);
            if (!is_telemetry(e))
                continue;
            int any = 0;
            for (int64_t st = e->step; st <= e->step_last && !any; st++)
                any = wanted(sel, keys, nkeys, e->gen, st);
            if (!any || (pass == 0 && e->msg_type != PT_MSG_EVENTS))
                continue;
            pt_msg m;
            if ((rc = pt_record_msg(rec, i, &m, err)) < 0)
                break;
            int64_t off = offset_of(&agix, ag, e->agent, e->gen, e->offset_ns);
            int ai = pass ? agent_index(set, &acap, &nameix, &names, e->agent) : 0;
            if (ai < 0)
                rc = PT_ENOMEM;
            if (e->msg_type == PT_MSG_EVENTS)
                for (int k = 0; k < m.u.events.count && rc == 0; k++) {
                    const pt_msg_event *ev = &m.u.events.events[k];
                    if (!wanted(sel, keys, nkeys, e->gen, ev->step))
                        continue;
                    if (pass == 0) {
                        if (ev->start_ns - off < origin)
                            origin = ev->start_ns - off;
                        continue;
                    }
                    pt_export_span s;
                    memset(&s, 0, sizeof s);
                    s.start = (double)(ev->start_ns - off - origin) * 1e-9;
                    s.end = (double)(ev->end_ns - off - origin) * 1e-9;
                    s.step = ev->step;
                    s.gen = e->gen;
                    s.version = ev->version;
                    s.bytes = ev->bytes;
                    s.mb = ev->mb;
                    s.stage = ev->stage;
                    s.replica = ev->replica;
                    s.agent = ai;
                    s.op = (uint8_t)ev->op;
                    s.lane = (uint8_t)pt_op_lane(ev->op);
                    if (e->gen > *max_gen)
                        *max_gen = e->gen;
                    if (row_of(set, &rcap, s.stage, s.replica) < 0 || push_span(set, cap, &s) < 0)
                        rc = PT_ENOMEM;
                }
            else if (pass == 1 && origin != INT64_MAX) {
                const pt_msg_metrics *mt = &m.u.metrics;
                pt_export_mem *q = realloc(set->mem, sizeof *q * (size_t)(set->mem_count + 1));
                if (!q) {
                    rc = PT_ENOMEM;
                } else {
                    set->mem = q;
                    pt_export_mem *x = &set->mem[set->mem_count++];
                    x->t = (double)(e->t - origin) * 1e-9;
                    x->stage = mt->stage;
                    x->replica = mt->replica;
                    memcpy(x->bytes, mt->mem_cur, sizeof x->bytes);
                    x->total = mt->total_cur;
                }
            }
            pt_msg_clear(&m);
        }
    free(ag);
    free(agix.slots);
    free(names);
    free(nameix.slots);
    if (rc == PT_ENOMEM)
        pt_error_set(err, rc, "export: out of memory");
    return rc;
}

int pt_export_load_run(const char *record_path, const pt_export_select *sel, pt_export_set *set,
                       pt_error *err)
{
    memset(set, 0, sizeof *set);
    set->first_step = set->last_step = -1;
    pt_record *rec = NULL;
    int rc = pt_replay_load(record_path, &rec, err);
    if (rc == 0)
        rc = pt_export_from_record(rec, sel, set, err);
    pt_record_free(&rec);
    return rc;
}

int pt_export_from_record(const pt_record *rec, const pt_export_select *sel, pt_export_set *set,
                          pt_error *err)
{
    memset(set, 0, sizeof *set);
    set->first_step = set->last_step = -1;
    int rc = 0;
    order_key *keys = NULL;
    int64_t nkeys = 0, cap = 0, max_gen = 0;
    if ((rc = select_iterations(rec, sel, &keys, &nkeys)) < 0)
        pt_error_set(err, rc, "export: out of memory");
    if (rc == 0)
        rc = gather(rec, sel, keys, nkeys, set, &cap, &max_gen, err);
    free(keys);
    if (rc == 0) {
        fill_rows(set);
        if ((rc = normalise(set, cap)) < 0)
            pt_error_set(err, rc, "export: out of memory");
    }
    if (rc == 0)
        make_title(set, rec, max_gen);
    if (rc < 0)
        pt_export_set_release(set);
    return rc;
}

int pt_export_write(const char *path, const char *text, size_t len, pt_error *err)
{
    return pt_file_write_atomic(path, text, len, err);
}

int pt_export_last_window(const pt_export_set *set, int64_t n, double *t0, double *t1)
{
    *t0 = set->t0;
    *t1 = set->t1;
    iter_key *u = malloc(sizeof *u * (size_t)(set->ops ? set->ops : 1));
    if (!u)
        return PT_ENOMEM;
    for (int64_t i = 0; i < set->ops; i++) {
        const pt_export_span *s = &set->spans[i];
        u[i] = (iter_key){s->gen, s->step, s->start, s->end};
    }
    qsort(u, (size_t)set->ops, sizeof *u, cmp_iter_key);
    int64_t m = 0;
    for (int64_t i = 0; i < set->ops; i++) {
        if (m > 0 && u[m - 1].gen == u[i].gen && u[m - 1].step == u[i].step) {
            if (u[i].lo < u[m - 1].lo)
                u[m - 1].lo = u[i].lo;
            if (u[i].hi > u[m - 1].hi)
                u[m - 1].hi = u[i].hi;
        } else {
            u[m++] = u[i];
        }
    }
    qsort(u, (size_t)m, sizeof *u, cmp_iter_lo);
    if (n > 0 && m > n) {
        *t0 = u[m - n].lo;
        for (int64_t i = m - n; i < m; i++)
            if (u[i].hi > *t1)
                *t1 = u[i].hi;
    }
    free(u);
    return 0;
}

int pt_export_set_to_text(pt_export_set *set, pt_export_writer write, void *arg, char **out,
                          size_t *len, pt_error *err)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) {
        pt_export_set_release(set);
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    }
    int rc = write(set, f, arg, err);
    fclose(f);
    pt_export_set_release(set);
    if (rc < 0) {
        free(text);
        return rc;
    }
    *out = text;
    if (len)
        *len = n;
    return 0;
}
