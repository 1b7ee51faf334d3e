/* DAPPLE's planner: partition, replication and placement minimising the
 * synchronous iteration latency (DAPPLE §IV).
 *
 * Objective (pt_planner_dapple_latency states it on a plan): the pipeline is
 * a chain of units, the stages and, between two stages, the boundary as its
 * own pseudo-stage (F = activation transfer, B = gradient transfer, both by
 * split-concat). With M micro-batches,
 *   L = max over pivots p, stages e <= p of
 *       sum_{v<p} F_v + core_p + sum_{e<=v<p} B_v + AR_e
 * i.e. warm-up up to the pivot p, the pivot's steady phase core_p, the
 * ending phase back to stage e and e's all-reduce and optimizer step. DAPPLE's
 * steady phase is core_p = M (F_p + B_p) (its (M-1)(F+B) plus the pivot's own
 * F and B); for a stage we also take the round trip the early-backward
 * schedule imposes: stage p runs the forward of micro-batch j + K_p only after
 * the backward of j, which needs j to go down the whole pipeline and back, so
 *   core_p = max(M (F_p + B_p), (q+1) RT_p + rho w_p, RT_p + M B_p + (M - K_p) F_p, ...)
 * with RT_p = sum_{v>=p} (F_v + B_v)
 * with K_p micro-batches in flight (policy A: min(S - p, M); policy B:
 * min(2(S - p) - 1, M)), M - 1 = q K_p + rho and w_p = F_p + B_p (F_p while
 * q = 0; see loop_bound). Without communication the round trip never
 * dominates and L is DAPPLE's (M + S - 1)(F + B); with slow links it charges
 * the bubbles that policy A leaves and that DAPPLE's pivot formula misses.
 * The pivot is the unit with the largest total, so L is the longest of these
 * critical paths.
 *
 * Policy. DAPPLE picks policy B (more warm-up micro-batches, more memory) when
 * the communication-to-computation ratio is high, because B hides transfers
 * that A exposes. The round-trip term is exactly that effect, so the search
 * runs once per policy (its in-flight counts and memory) and keeps the lower
 * latency, A on a tie; the ratio is reported.
 *
 * Search. DAPPLE memoises one best split per state TPL(j, m, g), which is not
 * exact for this objective because the pivot depends on the stages still to
 * come. We run the dynamic program from the last layer backwards instead:
 * a state is (first layer k of the suffix, device occupancy, the suffix's
 * first stage's replica count and whether it sits on one node), and holds the
 * Pareto front of (L, H, R) per stage count sigma over the suffix plans
 * reaching it, where H is L without the all-reduces, R the suffix's total
 * F + B, and sigma sets the next stage's in-flight count (its round trip and
 * its memory). Prepending a unit x with F, B, AR, core to a suffix gives
 *   L' = max(F + L, F + B + AR + H, core + AR),  H' = max(F + B + H, core),
 *   R' = F + B + R,
 * all monotone, so the front is exact and the search returns the optimum of
 * L over its space. Devices of a node are interchangeable, so an occupancy is kept in
 * canonical form: per class of identical nodes, how many nodes have each
 * number of free devices (plus the node of the suffix's first stage). Each
 * new stage takes r devices by one of DAPPLE's three placement policies,
 * applied in the order stages are added (last stage first):
 *   Fresh First   nodes with the most free devices first (whole free nodes);
 *   Append First  the node of the adjacent stage first, then partly used
 *                 nodes (fullest first), then fresh ones;
 *   Scatter First one device per node, round robin, most free first.
 * Branch and bound keeps it fast: a suffix whose L, or whose remaining
 * layers' work spread over the remaining devices (M * work / devices), is
 * already no better than the best complete plan is dropped, and a stage whose
 * own M(F+B) + AR reaches it ends the scan over its first layer. Above
 * DAPPLE_ALL_R_DEVICES devices the replica counts tried are 1..P and the
 * multiples of P (P devices per node). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_util.h"
#include "planner/planner.h"
#include "planner/schedule.h"

/* Up to this many devices every replica count is tried. */
#define DAPPLE_ALL_R_DEVICES 64
/* Relative precision of the memory need reported when nothing fits. */
#define DAPPLE_NEED_REL_TOL 0.005
/* Micro-batch counts tried by default. */
#define DAPPLE_MB_CHOICES 12

enum { POL_FF, POL_AF, POL_SF, POL_COUNT };
static const char *const pol_name[POL_COUNT] = {"fresh-first", "append-first", "scatter-first"};

typedef struct dclass {
    int size;     /* devices per node */
    int64_t mem;  /* smallest device memory in such a node */
    double speed; /* slowest device speed */
    int rep_dev;  /* a device with that speed (timing queries) */
    int key_off;  /* offset of its histogram in a key */
} dclass;

/* Result of placing one stage. */
typedef struct dalloc {
    int single_node; /* the node when every replica sits on one node, else -1 */
    int rep_dev;     /* slowest device used */
    int64_t mem;     /* smallest memory among the devices used */
    int nt;          /* nodes touched */
} dalloc;

typedef struct dapple {
    const pt_cost *cost;
    const pt_profile *prof;
    const pt_topology *topo;
    int N, G, nodes, pmb;
    pt_optim_kind optim;
    int64_t mem_override; /* > 0: every device has this memory (search for the need) */
    double max_speed;
    int *node_class, *node_size, *node_dev_off, *node_devs;
    dclass *cls;
    int ncls, key_len;
    /* replica counts tried */
    int *rset;
    int nr;
    /* scratch for placement */
    uint64_t *sortkey;
    int *take;
    int32_t *prev_keys; /* POL_COUNT keys: placements already tried for one r */
    int *live;          /* entries of the state being expanded */
    int live_cap;
    /* per run */
    int M, b;
    char policy;     /* 'A' or 'B': in-flight micro-batches and memory */
    double inc;      /* best complete L so far (all runs) */
    int inc_entry;   /* its final entry in this run, -1 */
    int feasibility; /* stop at the first complete plan */
    int found;
    long long evaluated;
    /* states */
    int ns, cap_s;
    int *s_k, *s_rfirst, *s_bnode, *s_free, *s_head, *s_nextk;
    int32_t *keys;  /* ns * key_len */
    uint16_t *occ;  /* ns * nodes free counts */
    int *klist;     /* N+1 heads */
    int *hash;      /* open addressing, hcap slots, -1 empty */
    uint64_t *hval; /* per state */
    int hcap;
    /* entries */
    int ne, cap_e;
    double *e_L, *e_H, *e_R, *e_Z;
    int *e_sigma, *e_parent, *e_first, *e_last, *e_r, *e_next;
    uint8_t *e_pol;
} dapple;

/* Grows `count` parallel arrays (elems[a] bytes per element) to hold need. */
static int grow(int *cap, int need, int count, void ***arrs, const size_t *elems)
{
    if (need <= *cap)
        return 0;
    int nc = *cap ? *cap : 1024;
    while (nc < need)
        nc *= 2;
    for (int a = 0; a < count; a++) {
        void *q = realloc(*arrs[a], (size_t)nc * elems[a]);
        if (!q)
            return PT_ENOMEM;
        *arrs[a] = q;
    }
    *cap = nc;
    return 0;
}

static int grow_states(dapple *D, int need)
{
    if (need <= D->cap_s)
        return 0;
    int cap = D->cap_s;
    void **arrs[] = {(void **)&D->s_k,    (void **)&D->s_rfirst, (void **)&D->s_bnode,
                     (void **)&D->s_free, (void **)&D->s_head,   (void **)&D->s_nextk,
                     (void **)&D->hval};
    size_t el[] = {sizeof(int), sizeof(int), sizeof(int),     sizeof(int),
                   sizeof(int), sizeof(int), sizeof(uint64_t)};
    int rc = grow(&cap, need, 7, arrs, el);
    if (rc < 0)
        return rc;
    int32_t *k = realloc(D->keys, (size_t)cap * (size_t)D->key_len * sizeof *k);
    if (!k)
        return PT_ENOMEM;
    D->keys = k;
    uint16_t *o = realloc(D->occ, (size_t)cap * (size_t)D->nodes * sizeof *o);
    if (!o)
        return PT_ENOMEM;
    D->occ = o;
    D->cap_s = cap;
    return 0;
}

static int grow_entries(dapple *D, int need)
{
    void **arrs[] = {(void **)&D->e_L,     (void **)&D->e_H,     (void **)&D->e_R,
                     (void **)&D->e_Z,     (void **)&D->e_sigma, (void **)&D->e_parent,
                     (void **)&D->e_first, (void **)&D->e_last,  (void **)&D->e_r,
                     (void **)&D->e_next,  (void **)&D->e_pol};
    size_t el[] = {sizeof(double), sizeof(double), sizeof(double), sizeof(double),
                   sizeof(int),    sizeof(int),    sizeof(int),    sizeof(int),
                   sizeof(int),    sizeof(int),    sizeof(uint8_t)};
    return grow(&D->cap_e, need, 11, arrs, el);
}

static uint64_t hash_key(const int32_t *key, int len)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < len; i++) {
        h ^= (uint32_t)key[i];
        h *= 1099511628211ULL;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

static int rehash(dapple *D, int cap)
{
    int *h = malloc((size_t)cap * sizeof *h);
    if (!h)
        return PT_ENOMEM;
    for (int i = 0; i < cap; i++)
        h[i] = -1;
    for (int s = 0; s < D->ns; s++) {
        uint64_t x = D->hval[s];
        int i = (int)(x & (uint64_t)(cap - 1));
        while (h[i] >= 0)
            i = (i + 1) & (cap - 1);
        h[i] = s;
    }
    free(D->hash);
    D->hash = h;
    D->hcap = cap;
    return 0;
}

/* Canonical key of an occupancy: k, replicas of the suffix's first stage, the
 * boundary node's class and free count (or -1), then per class the number of
 * other nodes at each free count. */
static void make_key(const dapple *D, int k, int rfirst, const uint16_t *fr, int bnode,
                     int32_t *key)
{
    memset(key, 0, (size_t)D->key_len * sizeof *key);
    key[0] = k;
    key[1] = rfirst;
    key[2] = bnode >= 0 ? D->node_class[bnode] : -1;
    key[3] = bnode >= 0 ? fr[bnode] : -1;
    for (int n = 0; n < D->nodes; n++)
        if (n != bnode)
            key[D->cls[D->node_class[n]].key_off + fr[n]]++;
}

/* Finds or adds the state with this key; returns its index or PT_ENOMEM. */
static int state_get(dapple *D, const int32_t *key, const uint16_t *fr, int bnode, int free_total)
{
    uint64_t h = hash_key(key, D->key_len);
    int i = (int)(h & (uint64_t)(D->hcap - 1));
    while (D->hash[i] >= 0) {
        int s = D->hash[i];
        if (D->hval[s] == h &&
            !memcmp(D->keys + (size_t)s * D->key_len, key, (size_t)D->key_len * sizeof *key))
            return s;
        i = (i + 1) & (D->hcap - 1);
    }
    if (grow_states(D, D->ns + 1) < 0)
        return PT_ENOMEM;
    int s = D->ns++;
    D->s_k[s] = key[0];
    D->s_rfirst[s] = key[1];
    D->s_bnode[s] = bnode;
    D->s_free[s] = free_total;
    D->s_head[s] = -1;
    D->hval[s] = h;
    memcpy(D->keys + (size_t)s * D->key_len, key, (size_t)D->key_len * sizeof *key);
    memcpy(D->occ + (size_t)s * D->nodes, fr, (size_t)D->nodes * sizeof *fr);
    D->s_nextk[s] = D->klist[key[0]];
    D->klist[key[0]] = s;
    D->hash[i] = s;
    if ((int64_t)D->ns * 2 > D->hcap && rehash(D, D->hcap * 2) < 0)
        return PT_ENOMEM;
    return s;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Places r devices by policy pol on the occupancy fr (bnode: node of the
 * adjacent stage, -1 if none). Writes the new occupancy to nf and the devices
 * taken per node to D->take; returns 0, or -1 when fewer than r are free. */
static int place(dapple *D, const uint16_t *fr, int bnode, int r, int pol, uint16_t *nf, dalloc *a)
{
    int n = 0, nodes = D->nodes;
    const uint64_t low = (1ULL << 24) - 1;
    for (int i = 0; i < nodes; i++) {
        int f = fr[i];
        if (f == 0)
            continue;
        int c = D->node_class[i], size = D->cls[c].size;
        uint64_t isb = i == bnode;
        uint64_t key;
        if (pol == POL_AF) {
            uint64_t fresh = f == size;
            key = ((uint64_t)!isb << 62) | (fresh << 61) | ((uint64_t)f << 40) |
                  ((uint64_t)c << 24) | (uint64_t)i;
        } else {
            key = ((uint64_t)(0xFFFF - f) << 44) | ((uint64_t)c << 25) | (isb << 24) | (uint64_t)i;
        }
        D->sortkey[n++] = key;
    }
    qsort(D->sortkey, (size_t)n, sizeof *D->sortkey, cmp_u64);
    memcpy(nf, fr, (size_t)nodes * sizeof *nf);
    for (int i = 0; i < n; i++)
        D->take[i] = 0;
    int rem = r;
    if (pol == POL_SF) {
        while (rem > 0) {
            int progress = 0;
            for (int i = 0; i < n && rem > 0; i++) {
                int node = (int)(D->sortkey[i] & low);
                if (nf[node] > 0) {
                    nf[node]--;
                    D->take[i]++;
                    rem--;
                    progress = 1;
                }
            }
            if (!progress)
                return -1;
        }
    } else {
        for (int i = 0; i < n && rem > 0; i++) {
            int node = (int)(D->sortkey[i] & low);
            int t = nf[node] < rem ? nf[node] : rem;
            nf[node] = (uint16_t)(nf[node] - t);
            D->take[i] = t;
            rem -= t;
        }
        if (rem > 0)
            return -1;
    }
    a->single_node = -1;
    a->nt = 0;
    a->mem = INT64_MAX;
    double slow = INFINITY;
    for (int i = 0; i < n; i++) {
        if (!D->take[i])
            continue;
        int node = (int)(D->sortkey[i] & low);
        const dclass *c = &D->cls[D->node_class[node]];
        a->nt++;
        a->single_node = node;
        if (c->mem < a->mem)
            a->mem = c->mem;
        if (c->speed < slow) {
            slow = c->speed;
            a->rep_dev = c->rep_dev;
        }
    }
    if (a->nt != 1)
        a->single_node = -1;
    if (D->mem_override > 0)
        a->mem = D->mem_override;
    return 0;
}

static inline double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* Lower bound on the end of a stage's last backward from the early-backward
 * order alone, for a stage with F + B = w, forward F, round trip RT (its w
 * and everything after it) and K micro-batches in flight: micro-batch j + K
 * starts only after j's backward, so j = qK + rho starts after q round trips;
 * once past warm-up, consecutive forwards are a forward and a backward apart
 * (rho more steps of w; of F inside warm-up); its own round trip ends it. */
static inline double loop_bound(int M, int K, double RT, double w, double F)
{
    int q = (M - 1) / K, rho = (M - 1) % K;
    return (q + 1) * RT + rho * (q > 0 ? w : F);
}

/* What the search keeps of a suffix plan (all "smaller is better"):
 * L  its latency (longest critical path);
 * H  the longest path ending at the suffix's front without an all-reduce
 *    (what a stage prepended later adds its backward and all-reduce to);
 * R  its total F + B (the round trip of the last micro-batch through it);
 * Z  the longest time from the last micro-batch entering it to one of its
 *    stages finishing its all-reduce (its forwards, the backwards back to that
 *    stage, the all-reduce). */
typedef struct dval {
    double L, H, R, Z;
} dval;

/* Adds v to state s's front unless an entry with the same in-flight class
 * (sigma capped at M) is no worse in every field; removes the entries it
 * beats. sigma is not ordered: more stages after a stage let it keep more
 * micro-batches in flight (a shorter round-trip bound) but cost memory.
 * Returns the new entry, -1 when dominated, -2 on no memory. */
static int front_insert(dapple *D, int s, const dval *v, int sigma)
{
    int se = sigma < D->M ? sigma : D->M;
    int *link = &D->s_head[s];
    while (*link >= 0) {
        int e = *link;
        int ee = D->e_sigma[e] < D->M ? D->e_sigma[e] : D->M;
        if (ee == se && D->e_L[e] <= v->L && D->e_H[e] <= v->H && D->e_R[e] <= v->R &&
            D->e_Z[e] <= v->Z)
            return -1;
        if (ee == se && v->L <= D->e_L[e] && v->H <= D->e_H[e] && v->R <= D->e_R[e] &&
            v->Z <= D->e_Z[e]) {
            *link = D->e_next[e]; /* dominated: unlink (entry stays for back-pointers) */
            continue;
        }
        link = &D->e_next[e];
    }
    if (grow_entries(D, D->ne + 1) < 0)
        return -2;
    int e = D->ne++;
    D->e_L[e] = v->L;
    D->e_H[e] = v->H;
    D->e_R[e] = v->R;
    D->e_Z[e] = v->Z;
    D->e_sigma[e] = sigma;
    D->e_next[e] = D->s_head[s];
    D->s_head[s] = e;
    return e;
}

static int new_entry(dapple *D, const dval *v, int sigma)
{
    if (grow_entries(D, D->ne + 1) < 0)
        return -2;
    int e = D->ne++;
    D->e_L[e] = v->L;
    D->e_H[e] = v->H;
    D->e_R[e] = v->R;
    D->e_Z[e] = v->Z;
    D->e_sigma[e] = sigma;
    D->e_next[e] = -1;
    return e;
}

/* Prepends a stage (F, B, AR: all-reduce + step, K in flight) and, when the
 * suffix is not empty, the boundary (cf forward, cb backward) in front of
 * suffix `x` (NULL: empty). The critical paths through the new stage p:
 *   core + AR       its steady phase (M(F+B), the round-trip bound, its
 *                   last forward Y plus the last round trip and backward, or
 *                   the first round trip then every backward and the
 *                   forwards past warm-up)
 *   F + x.L         paths of the suffix, delayed by p's forward
 *   F + B + AR + H  paths of the suffix ending at p's all-reduce
 *   Y + x.Z         p's last forward, then the last micro-batch down the
 *                   suffix and back to a stage's all-reduce
 * where Y bounds the end of p's last forward: M F + (M-K) B behind its own
 * lane, and, past warm-up, F + the first round trip + (M-K)(F+B). */
static dval prepend(const dval *x, double F, double B, double AR, int K, int M, double cf,
                    double cb)
{
    double w = F + B;
    dval c = {-INFINITY, -INFINITY, 0, -INFINITY};
    if (x) {
        double cw = cf + cb;
        c.L = dmax(dmax(cf + x->L, cw + x->H), M * cw);
        c.H = dmax(cw + x->H, M * cw);
        c.R = cw + x->R;
        c.Z = dmax(cf + x->Z, c.R);
    }
    double Y = M * F + (M - K) * B;
    if (x && M > K)
        Y = dmax(Y, F + c.R + (M - K) * w);
    /* the first backward waits a whole round trip; then the stage still runs
     * every backward and the forwards past warm-up */
    double drain = F + c.R + M * B + (M - K) * F;
    double core = dmax(dmax(M * w, loop_bound(M, K, w + c.R, w, F)), dmax(Y + c.R + B, drain));
    dval v;
    v.L = dmax(dmax(F + c.L, w + AR + c.H), dmax(core + AR, Y + c.Z));
    v.H = dmax(w + c.H, core);
    v.R = w + c.R;
    v.Z = dmax(F + c.Z, v.R + AR);
    return v;
}

/* Work of layers [0, k) at b samples on a speed-1 device, seconds. */
static double prefix_work(const dapple *D, int k)
{
    return pt_cost_fwd_s(D->cost, 0, k, D->b, -1) + pt_cost_bwd_s(D->cost, 0, k, D->b, -1);
}

/* Largest k' in [lo, hi] with M * work(k') / (max_speed * free) < inc, or lo-1. */
static int prefix_cut(const dapple *D, int lo, int hi, int free_after)
{
    if (!isfinite(D->inc))
        return hi;
    double scale = D->M / (D->max_speed * free_after);
    if (prefix_work(D, lo) * scale >= D->inc)
        return lo - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (prefix_work(D, mid) * scale < D->inc)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Expands state s: every stage [k', k) on r devices placed by each policy. */
static int expand(dapple *D, int s, uint16_t *fr, uint16_t *nf, int32_t *key2)
{
    int k = D->s_k[s], rfirst = D->s_rfirst[s], bnode = D->s_bnode[s], free_total = D->s_free[s];
    /* a copy: state_get may move D->occ */
    memcpy(fr, D->occ + (size_t)s * D->nodes, (size_t)D->nodes * sizeof *fr);
    /* the entries still worth extending */
    int nl = 0;
    for (int e = D->s_head[s]; e >= 0; e = D->e_next[e]) {
        if (!(D->e_L[e] < D->inc))
            continue;
        if (nl == D->live_cap) {
            int nc = D->live_cap ? 2 * D->live_cap : 64;
            int *q = realloc(D->live, (size_t)nc * sizeof *q);
            if (!q)
                return PT_ENOMEM;
            D->live = q;
            D->live_cap = nc;
        }
        D->live[nl++] = e;
    }
    int *live = D->live;
    if (!nl || free_total == 0)
        return 0;
    if (isfinite(D->inc) && D->M * prefix_work(D, k) / (D->max_speed * free_total) >= D->inc)
        return 0;
    int M = D->M, b = D->b;
    int64_t act_k = k < D->N ? D->prof->layers[k - 1].act_bytes : 0;
    for (int ri = 0; ri < D->nr; ri++) {
        int r = D->rset[ri];
        if (r > free_total || r > b)
            break;
        int rows = pu_rows_max(b, r);
        int free_after = free_total - r;
        int nprev = 0, prev_same[POL_COUNT], prev_rep[POL_COUNT];
        int64_t prev_mem[POL_COUNT];
        for (int pol = 0; pol < POL_COUNT; pol++) {
            dalloc a;
            if (place(D, fr, bnode, r, pol, nf, &a) < 0)
                continue;
            int nb = a.single_node;
            int same = rfirst > 0 && nb >= 0 && nb == bnode;
            /* skip a policy whose placement is canonically the same as an earlier one */
            int32_t *pk = D->prev_keys + (size_t)nprev * D->key_len;
            make_key(D, 0, r, nf, nb, pk);
            int dup = 0;
            for (int q = 0; q < nprev && !dup; q++)
                dup = prev_same[q] == same && prev_mem[q] == a.mem && prev_rep[q] == a.rep_dev &&
                      !memcmp(D->prev_keys + (size_t)q * D->key_len, pk,
                              (size_t)D->key_len * sizeof *pk);
            if (dup)
                continue;
            prev_same[nprev] = same;
            prev_mem[nprev] = a.mem;
            prev_rep[nprev] = a.rep_dev;
            nprev++;
            pt_link arl = nb >= 0 ? D->topo->intra : D->topo->inter;
            pt_link bl = same ? D->topo->intra : D->topo->inter;
            double cf = 0, cb = 0;
            if (rfirst > 0) {
                cf = pu_boundary_s(bl, r, rfirst, b, act_k, D->pmb);
                cb = pu_boundary_s(bl, rfirst, r, b, act_k, D->pmb);
            }
            int kp_hi = k - 1;
            if (free_after > 0 && kp_hi >= 1) {
                kp_hi = prefix_cut(D, 1, kp_hi, free_after);
                if (kp_hi < 1)
                    kp_hi = 0; /* only the whole prefix as one stage can still win */
            } else {
                kp_hi = 0;
            }
            int have_key = 0;
            for (int kp = kp_hi; kp >= 0; kp--) {
                if (kp > 0 && free_after == 0)
                    continue;
                double F = pt_cost_fwd_s(D->cost, kp, k, rows, a.rep_dev);
                double B = pt_cost_bwd_s(D->cost, kp, k, rows, a.rep_dev);
                int64_t P = pt_cost_param_bytes(D->cost, kp, k);
                double AR = pt_cost_ring_allreduce_s(r, P, arl.latency, arl.bandwidth) +
                            pt_cost_opt_step_s(D->cost, P, D->optim, a.rep_dev);
                double w = F + B;
                if (M * w + AR >= D->inc)
                    break; /* the stage only grows as kp falls */
                D->evaluated++;
                if (kp > 0 && !have_key) {
                    make_key(D, kp, r, nf, nb, key2);
                    have_key = 1;
                }
                if (kp > 0)
                    key2[0] = kp;
                int target = -1;
                for (int li = 0; li < nl; li++) {
                    int e = live[li];
                    int sigma = D->e_sigma[e];
                    int S = sigma + 1 + (kp > 0), i = kp > 0;
                    int64_t mem = pu_stage_memory(D->cost, PT_SCHED_DAPPLE, D->policy, S, i, kp, k,
                                                  rows, M, 0, D->optim);
                    if (mem > a.mem)
                        continue;
                    int K = D->policy == 'B' ? 2 * sigma + 1 : sigma + 1; /* in flight */
                    if (K > M)
                        K = M;
                    dval suf = {D->e_L[e], D->e_H[e], D->e_R[e], D->e_Z[e]};
                    dval v = prepend(sigma > 0 ? &suf : NULL, F, B, AR, K, M, cf, cb);
                    double L = v.L;
                    if (L >= D->inc)
                        continue;
                    int ne;
                    if (kp == 0) {
                        ne = new_entry(D, &v, sigma + 1);
                        if (ne < -1)
                            return PT_ENOMEM;
                        D->inc = L;
                        D->inc_entry = ne;
                        D->found = 1;
                    } else {
                        if (target < 0) {
                            target = state_get(D, key2, nf, nb, free_after);
                            if (target < 0)
                                return PT_ENOMEM;
                        }
                        ne = front_insert(D, target, &v, sigma + 1);
                        if (ne < -1)
                            return PT_ENOMEM;
                        if (ne < 0)
                            continue;
                    }
                    D->e_parent[ne] = e;
                    D->e_first[ne] = kp;
                    D->e_last[ne] = k;
                    D->e_r[ne] = r;
                    D->e_pol[ne] = (uint8_t)pol;
                    if (kp == 0 && D->feasibility)
                        return 0;
                }
            }
        }
    }
    return 0;
}

/* One dynamic program for micro-batch count M. */
static int run_m(dapple *D, int M)
{
    D->M = M;
    D->ns = 0;
    D->ne = 0;
    D->inc_entry = -1;
    for (int k = 0; k <= D->N; k++)
        D->klist[k] = -1;
    for (int i = 0; i < D->hcap; i++)
        D->hash[i] = -1;
    int32_t *key = malloc((size_t)D->key_len * 2 * sizeof *key);
    uint16_t *fr = malloc((size_t)D->nodes * 2 * sizeof *fr);
    if (!key || !fr) {
        free(key);
        free(fr);
        return PT_ENOMEM;
    }
    int rc = 0;
    for (int n = 0; n < D->nodes; n++)
        fr[n] = (uint16_t)D->node_size[n];
    make_key(D, D->N, 0, fr, -1, key);
    int s0 = state_get(D, key, fr, -1, D->G);
    dval root = {-INFINITY, -INFINITY, 0, -INFINITY};
    int e0 = s0 >= 0 ? front_insert(D, s0, &root, 0) : -2;
    if (s0 < 0 || e0 < 0) {
        rc = PT_ENOMEM;
        goto out;
    }
    D->e_parent[e0] = -1;
    for (int k = D->N; k >= 1 && rc == 0; k--) {
        for (int s = D->klist[k]; s >= 0; s = D->s_nextk[s]) {
            rc = expand(D, s, fr, fr + D->nodes, key + D->key_len);
            if (rc < 0 || (D->feasibility && D->found))
                break;
        }
        if (D->feasibility && D->found)
            break;
    }
out:
    free(key);
    free(fr);
    return rc;
}

static void dapple_free(dapple *D)
{
    free(D->node_class);
    free(D->node_size);
    free(D->node_dev_off);
    free(D->node_devs);
    free(D->cls);
    free(D->rset);
    free(D->sortkey);
    free(D->take);
    free(D->prev_keys);
    free(D->live);
    free(D->s_k);
    free(D->s_rfirst);
    free(D->s_bnode);
    free(D->s_free);
    free(D->s_head);
    free(D->s_nextk);
    free(D->keys);
    free(D->occ);
    free(D->klist);
    free(D->hash);
    free(D->hval);
    free(D->e_L);
    free(D->e_H);
    free(D->e_R);
    free(D->e_Z);
    free(D->e_sigma);
    free(D->e_parent);
    free(D->e_first);
    free(D->e_last);
    free(D->e_r);
    free(D->e_next);
    free(D->e_pol);
}

static int dapple_init(dapple *D, const pt_cost *cost, const pt_topology *topo, pt_optim_kind optim)
{
    memset(D, 0, sizeof *D);
    D->cost = cost;
    D->prof = pt_cost_profile(cost);
    D->topo = topo;
    D->N = D->prof->layer_count;
    D->G = topo->device_count;
    D->nodes = topo->node_count;
    D->pmb = D->prof->microbatch;
    D->optim = optim;
    int nodes = D->nodes;
    D->node_class = calloc((size_t)nodes, sizeof(int));
    D->node_size = calloc((size_t)nodes, sizeof(int));
    D->node_dev_off = calloc((size_t)nodes + 1, sizeof(int));
    D->node_devs = calloc((size_t)D->G, sizeof(int));
    D->cls = calloc((size_t)nodes, sizeof(dclass));
    D->sortkey = calloc((size_t)nodes, sizeof(uint64_t));
    D->take = calloc((size_t)nodes, sizeof(int));
    D->klist = calloc((size_t)D->N + 1, sizeof(int));
    if (!D->node_class || !D->node_size || !D->node_dev_off || !D->node_devs || !D->cls ||
        !D->sortkey || !D->take || !D->klist)
        return PT_ENOMEM;
    for (int d = 0; d < D->G; d++)
        D->node_size[topo->devices[d].node]++;
    for (int n = 0; n < nodes; n++)
        D->node_dev_off[n + 1] = D->node_dev_off[n] + D->node_size[n];
    int *fill = calloc((size_t)nodes, sizeof(int));
    if (!fill)
        return PT_ENOMEM;
    for (int d = 0; d < D->G; d++) {
        int n = topo->devices[d].node;
        D->node_devs[D->node_dev_off[n] + fill[n]++] = d;
    }
    free(fill);
    /* node classes: same size, smallest memory and slowest speed */
    D->max_speed = 0;
    int pmax = 0;
    for (int n = 0; n < nodes; n++) {
        int64_t mem = INT64_MAX;
        double sp = INFINITY;
        int rep = -1;
        for (int i = D->node_dev_off[n]; i < D->node_dev_off[n + 1]; i++) {
            const pt_device *dv = &topo->devices[D->node_devs[i]];
            if (dv->memory_bytes < mem)
                mem = dv->memory_bytes;
            if (dv->speed < sp) {
                sp = dv->speed;
                rep = D->node_devs[i];
            }
            if (dv->speed > D->max_speed)
                D->max_speed = dv->speed;
        }
        int c;
        for (c = 0; c < D->ncls; c++)
            if (D->cls[c].size == D->node_size[n] && D->cls[c].mem == mem && D->cls[c].speed == sp)
                break;
        if (c == D->ncls) {
            D->cls[c].size = D->node_size[n];
            D->cls[c].mem = mem;
            D->cls[c].speed = sp;
            D->cls[c].rep_dev = rep;
            D->ncls++;
        }
        D->node_class[n] = c;
        if (D->node_size[n] > pmax)
            pmax = D->node_size[n];
    }
    D->key_len = 4;
    for (int c = 0; c < D->ncls; c++) {
        D->cls[c].key_off = D->key_len;
        D->key_len += D->cls[c].size + 1;
    }
    /* replica counts */
    D->rset = calloc((size_t)D->G, sizeof(int));
    if (!D->rset)
        return PT_ENOMEM;
    for (int r = 1; r <= D->G; r++)
        if (D->G <= DAPPLE_ALL_R_DEVICES || r <= pmax || r % pmax == 0)
            D->rset[D->nr++] = r;
    D->prev_keys = calloc((size_t)POL_COUNT * (size_t)D->key_len, sizeof(int32_t));
    if (!D->prev_keys)
        return PT_ENOMEM;
    D->hcap = 1 << 12;
    D->hash = malloc((size_t)D->hcap * sizeof(int));
    if (!D->hash)
        return PT_ENOMEM;
    return 0;
}

/* Replays the decisions of the chain ending at entry `fin` on concrete
 * devices and builds the plan. */
static pt_plan *build_plan(dapple *D, int fin)
{
    int S = 0;
    for (int e = fin; e >= 0 && D->e_parent[e] >= 0; e = D->e_parent[e])
        S++;
    if (S < 1)
        return NULL;
    int *cuts = malloc((size_t)(S + 1) * sizeof *cuts);
    int *rs = malloc((size_t)S * sizeof *rs), *pols = malloc((size_t)S * sizeof *pols);
    uint16_t *fr = malloc((size_t)D->nodes * 2 * sizeof *fr);
    int *used = calloc((size_t)D->nodes, sizeof *used);
    int *devs = malloc((size_t)D->G * sizeof *devs);
    pt_plan *p = NULL;
    if (!cuts || !rs || !pols || !fr || !used || !devs)
        goto out;
    int s = 0;
    for (int e = fin; s < S; e = D->e_parent[e], s++) {
        cuts[s] = D->e_first[e];
        rs[s] = D->e_r[e];
        pols[s] = D->e_pol[e];
    }
    cuts[S] = D->N;
    p = pu_plan_alloc(D->prof, S, cuts, PT_SCHED_DAPPLE, D->b, D->M, D->optim);
    if (!p)
        goto out;
    p->policy = D->policy;
    for (int n = 0; n < D->nodes; n++)
        fr[n] = (uint16_t)D->node_size[n];
    int bnode = -1;
    const uint64_t low = (1ULL << 24) - 1;
    for (s = S - 1; s >= 0; s--) {
        dalloc a;
        uint16_t *nf = fr + D->nodes;
        if (place(D, fr, bnode, rs[s], pols[s], nf, &a) < 0) {
            pt_plan_free(&p);
            goto out;
        }
        int cnt = 0;
        for (int i = 0; i < D->nodes && cnt < rs[s]; i++) {
            if (!D->take[i])
                continue;
            int node = (int)(D->sortkey[i] & low);
            for (int t = 0; t < D->take[i]; t++)
                devs[cnt++] = D->node_devs[D->node_dev_off[node] + used[node]++];
        }
        if (pt_plan_set_replicas(p, s, devs, cnt) < 0) {
            pt_plan_free(&p);
            goto out;
        }
        memcpy(fr, nf, (size_t)D->nodes * sizeof *fr);
        bnode = a.single_node;
    }
out:
    free(cuts);
    free(rs);
    free(pols);
    free(fr);
    free(used);
    free(devs);
    return p;
}

/* Unit times of a concrete plan for the latency model. */
typedef struct units {
    int S;
    double *F, *B, *AR; /* 2S-1 units: stage s at 2s, boundary s->s+1 at 2s+1 */
} units;

static int stages_share_node(const pt_topology *t, const pt_stage *a, const pt_stage *b)
{
    int node = -1;
    const pt_stage *st[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < st[k]->replica_count; r++) {
            int d = st[k]->replicas[r];
            if (d < 0 || d >= t->device_count)
                return 0;
            if (node < 0)
                node = t->devices[d].node;
            else if (t->devices[d].node != node)
                return 0;
        }
    return 1;
}

static int slowest_device(const pt_topology *t, const pt_stage *st)
{
    int best = st->replicas[0];
    for (int r = 1; r < st->replica_count; r++)
        if (t->devices[st->replicas[r]].speed < t->devices[best].speed)
            best = st->replicas[r];
    return best;
}

int pt_planner_dapple_latency(const pt_cost *cost, const pt_plan *plan, double *latency_s,
                              int *pivot, int *ending, pt_error *err)
{
    if (!cost || !plan || !latency_s)
        return pt_error_set(err, PT_EINVAL, "dapple latency: a cost model and a plan are required");
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    int S = plan->stage_count, U = 2 * S - 1, M = plan->microbatch_count, b = plan->microbatch_size;
    if (S < 1 || M < 1 || b < 1)
        return pt_error_set(err, PT_EINVAL, "plan: no stages or no micro-batches");
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &plan->stages[s];
        if (st->replica_count < 1 || st->first < 0 || st->last > pr->layer_count ||
            st->last <= st->first)
            return pt_error_set(err, PT_EINVAL, "plan: stages[%d]: layers or replicas invalid", s);
        for (int r = 0; r < st->replica_count; r++)
            if (st->replicas[r] < 0 || st->replicas[r] >= t->device_count)
                return pt_error_set(err, PT_EINVAL, "plan: stages[%d].replicas[%d]: no device %d",
                                    s, r, st->replicas[r]);
    }
    double *F = calloc((size_t)U * 3, sizeof *F);
    if (!F)
        return pt_error_set(err, PT_ENOMEM, "dapple latency: out of memory");
    double *B = F + U, *AR = B + U;
    for (int s = 0; s < S; s++) {
        const pt_stage *st = &plan->stages[s];
        int r = st->replica_count, rows = pu_rows_max(b, r), dev = slowest_device(t, st);
        F[2 * s] = pt_cost_fwd_s(cost, st->first, st->last, rows, dev);
        B[2 * s] = pt_cost_bwd_s(cost, st->first, st->last, rows, dev);
        if (st->recompute)
            B[2 * s] += pt_cost_recompute_s(cost, st->first, st->last, rows, dev);
        int64_t P = pt_cost_param_bytes(cost, st->first, st->last);
        AR[2 * s] = pt_cost_allreduce_s(cost, st->replicas, r, P) +
                    pt_cost_opt_step_s(cost, P, plan->optimizer.kind, dev);
        if (s + 1 < S) {
            const pt_stage *nx = &plan->stages[s + 1];
            pt_link l = stages_share_node(t, st, nx) ? t->intra : t->inter;
            int64_t bytes = pr->layers[st->last - 1].act_bytes;
            F[2 * s + 1] = pu_boundary_s(l, r, nx->replica_count, b, bytes, pr->microbatch);
            B[2 * s + 1] = pu_boundary_s(l, nx->replica_count, r, b, bytes, pr->microbatch);
        }
    }
    /* suffix work: RT[u] = sum over units v >= u of F_v + B_v */
    double *RT = calloc((size_t)U + 1, sizeof *RT);
    if (!RT) {
        free(F);
        return pt_error_set(err, PT_ENOMEM, "dapple latency: out of memory");
    }
    for (int u = U - 1; u >= 0; u--)
        RT[u] = RT[u + 1] + F[u] + B[u];
    double best = -INFINITY, pf = 0;
    int bu = 0, bi = 0;
    for (int p = 0; p < U; p++) {
        double w = F[p] + B[p], core = M * w, Y = -INFINITY;
        if (p % 2 == 0) {
            int K = pt_cost_inflight(plan->schedule, plan->policy, S, p / 2, M);
            if (K < 1)
                K = 1;
            if (K > M)
                K = M;
            Y = M * F[p] + (M - K) * B[p];
            if (M > K && p + 1 < U)
                Y = dmax(Y, F[p] + RT[p + 1] + (M - K) * w);
            double drain = F[p] + RT[p + 1] + M * B[p] + (M - K) * F[p];
            core = dmax(dmax(core, loop_bound(M, K, RT[p], w, F[p])),
                        dmax(Y + RT[p + 1] + B[p], drain));
        }
        /* endings at or before the pivot */
        double back = 0;
        for (int e = p; e >= 0; e--) {
            if (e < p)
                back += B[e];
            if (e % 2)
                continue;
            double v = pf + core + back + AR[e];
            if (v > best) {
                best = v;
                bu = p;
                bi = e / 2;
            }
        }
        /* endings after it: the last micro-batch goes down and back to e */
        if (p % 2 == 0) {
            double fwd = 0;
            for (int v = p + 1; v < U; v++)
                fwd += F[v];
            double bk = 0;
            for (int e = U - 1; e > p; e--) {
                bk += B[e];
                if (e % 2)
                    continue;
                double v = pf + Y + fwd + bk + AR[e];
                if (v > best) {
                    best = v;
                    bu = p;
                    bi = e / 2;
                }
            }
        }
        pf += F[p];
    }
    free(RT);
    free(F);
    *latency_s = best;
    if (pivot)
        *pivot = bu;
    if (ending)
        *ending = bi;
    return 0;
}

/* Communication-to-computation ratio of a plan: mean boundary transfer over
 * the mean of a stage's forward and backward. */
static double plan_acr(const pt_cost *cost, const pt_plan *p)
{
    if (p->stage_count < 2)
        return 0;
    const pt_topology *t = pt_cost_topology(cost);
    const pt_profile *pr = pt_cost_profile(cost);
    double comm = 0, comp = 0;
    int b = p->microbatch_size;
    for (int s = 0; s < p->stage_count; s++) {
        const pt_stage *st = &p->stages[s];
        int rows = pu_rows_max(b, st->replica_count), dev = slowest_device(t, st);
        comp += (pt_cost_fwd_s(cost, st->first, st->last, rows, dev) +
                 pt_cost_bwd_s(cost, st->first, st->last, rows, dev)) /
                2;
        if (s + 1 < p->stage_count) {
            const pt_stage *nx = &p->stages[s + 1];
            pt_link l = stages_share_node(t, st, nx) ? t->intra : t->inter;
            int64_t bytes = pr->layers[st->last - 1].act_bytes;
            double cf =
                pu_boundary_s(l, st->replica_count, nx->replica_count, b, bytes, pr->microbatch);
            double cb =
                pu_boundary_s(l, nx->replica_count, st->replica_count, b, bytes, pr->microbatch);
            comm += dmax(cf, cb);
        }
    }
    comm /= p->stage_count - 1;
    comp /= p->stage_count;
    return comp > 0 ? comm / comp : INFINITY;
}

/* Whether every stage fits with the DP's convention (largest share of rows
 * against the smallest memory of its devices) under policy `policy`. */
static int plan_fits(const dapple *D, const pt_plan *p, char policy)
{
    for (int s = 0; s < p->stage_count; s++) {
        const pt_stage *st = &p->stages[s];
        int64_t mem = pu_stage_memory(
            D->cost, PT_SCHED_DAPPLE, policy, p->stage_count, s, st->first, st->last,
            pu_rows_max(p->microbatch_size, st->replica_count), p->microbatch_count, 0, D->optim);
        int64_t lim = D->mem_override > 0 ? D->mem_override : pu_stage_min_memory(D->topo, st);
        if (mem > lim)
            return 0;
    }
    return 1;
}

/* Runs the DP over every micro-batch count; on success *best_plan is set. */
static int search(dapple *D, const int *mbs, int nmb, int global_batch, pt_plan **best_plan)
{
    *best_plan = NULL;
    D->inc = INFINITY;
    D->found = 0;
    /* larger micro-batch counts first: they usually give the smaller latency,
     * so the bound prunes the other runs harder */
    for (int i = 0; i < nmb; i++) {
        for (int pol = 0; pol < 2; pol++) {
            int b = mbs[i];
            D->b = b;
            D->policy = pol ? 'B' : 'A';
            double before = D->inc;
            int rc = run_m(D, global_batch / b);
            if (rc < 0) {
                pt_plan_free(best_plan);
                return rc;
            }
            if (D->inc < before && D->inc_entry >= 0) {
                pt_plan *p = build_plan(D, D->inc_entry);
                if (!p) {
                    pt_plan_free(best_plan);
                    return PT_ENOMEM;
                }
                pt_plan_free(best_plan);
                *best_plan = p;
            }
            if (D->feasibility && D->found)
                return 0;
        }
    }
    return 0;
}

int pt_planner_dapple(const pt_profile *profile, const pt_topology *topo, int global_batch,
                      const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                      pt_error *err)
{
    *out = NULL;
    double t0 = pu_now_s();
    pu_report_begin(report, "dapple",
                    "iteration latency: warm-up + pivot steady phase + ending with all-reduce");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    dapple D;
    rc = dapple_init(&D, cost, topo, opts->optim);
    if (rc < 0) {
        rc = pt_error_set(err, rc, "dapple: out of memory");
        goto out;
    }
    /* run_m sets D.b from the candidate; keep it in a local for clarity */
    int mbs[PT_PLANNER_MB_CHOICES_MAX];
    int nmb = pu_microbatch_candidates(opts, global_batch, DAPPLE_MB_CHOICES, mbs);
    pt_plan *plan = NULL;
    rc = search(&D, mbs, nmb, global_batch, &plan);
    if (rc < 0) {
        rc = pt_error_set(err, rc, "dapple: out of memory");
        goto out;
    }
    if (!plan) {
        /* nothing fits: find the smallest uniform memory under which a plan exists */
        int64_t limit =
            opts->memory_limit_bytes > 0 ? opts->memory_limit_bytes : pu_topology_min_memory(topo);
        int64_t lo = limit, hi = limit > 0 ? limit : 1;
        int feasible = 0;
        pt_plan *probe = NULL;
        D.feasibility = 1;
        for (int it = 0; it < 62 && rc == 0 && !feasible && hi < INT64_MAX / 2; it++) {
            hi *= 2;
            D.mem_override = hi;
            rc = search(&D, mbs, nmb, global_batch, &probe);
            pt_plan_free(&probe);
            feasible = rc == 0 && D.found;
        }
        while (rc == 0 && feasible && (double)(hi - lo) > DAPPLE_NEED_REL_TOL * (double)hi) {
            int64_t mid = lo + (hi - lo) / 2;
            D.mem_override = mid;
            rc = search(&D, mbs, nmb, global_batch, &probe);
            pt_plan_free(&probe);
            if (D.found)
                hi = mid;
            else
                lo = mid;
        }
        if (rc < 0) {
            rc = pt_error_set(err, rc, "dapple: out of memory");
            goto out;
        }
        rc = pu_error_nofit(err, report, "dapple", limit, feasible ? hi : 0,
                            "every partition, replication and placement over the micro-batch "
                            "sizes tried exceeds it");
        goto out;
    }
    /* the policy is the one whose latency is lower (A on a tie, as it keeps
     * fewer micro-batches in flight); report the other for comparison */
    double acr = plan_acr(cost, plan);
    double L = 0, L_other = INFINITY;
    int pivot = 0, ending = 0;
    pt_planner_dapple_latency(cost, plan, &L, &pivot, &ending, NULL);
    char other = plan->policy == 'A' ? 'B' : 'A';
    int other_fits = plan_fits(&D, plan, other);
    if (other_fits) {
        pt_plan *q = pt_plan_clone(plan);
        if (q) {
            q->policy = other;
            pt_planner_dapple_latency(cost, q, &L_other, NULL, NULL, NULL);
            pt_plan_free(&q);
        }
    }
    if (report) {
        report->objective_s = D.inc;
        report->iter_s = L;
        report->peak_memory_bytes = pu_plan_peak_memory(cost, plan, NULL);
        report->evaluated = D.evaluated;
        pu_why(report, "M=%d micro-batches of %d (tried %d sizes); %d stage%s, replicas",
               plan->microbatch_count, plan->microbatch_size, nmb, plan->stage_count,
               plan->stage_count > 1 ? "s" : "");
        for (int s = 0; s < plan->stage_count; s++)
            pu_why(report, "%s%d", s ? ":" : " ", plan->stages[s].replica_count);
        if (pivot % 2 == 0)
            pu_why(report, "; pivot stage %d", pivot / 2);
        else
            pu_why(report, "; pivot: the transfer between stages %d and %d", pivot / 2,
                   pivot / 2 + 1);
        pu_why(report, ", ending at stage %d's all-reduce and step", ending);
        pu_why(report, "; communication/computation %.2f: policy %c", acr, plan->policy);
        if (other_fits)
            pu_why(report, " (%c: %.3f ms)", other, L_other * 1e3);
        else
            pu_why(report, " (%c does not fit memory)", other);
        if (D.G > DAPPLE_ALL_R_DEVICES)
            pu_why(report, "; replica counts tried: 1..P and multiples of P");
    }
    *out = plan;
    rc = 0;
out:
    if (report)
        report->search_s = pu_now_s() - t0;
    dapple_free(&D);
    pt_cost_free(&cost);
    return rc;
}

/* Names of the placement policies, for messages and tests. */
const char *pt_planner_dapple_policy_name(int policy);
const char *pt_planner_dapple_policy_name(int policy)
{
    return policy >= 0 && policy < POL_COUNT ? pol_name[policy] : "?";
}
