/* DAPPLE's planner: partition, replication and placement minimising the
 * synchronous iteration latency (DAPPLE §IV).
 *
 * Objective (pt_latency_critical_path, planner/latency.h, states it on a plan): the pipeline is
 * a chain of units, the stages and, between two stages, the boundary as its
 * own pseudo-stage (F = activation transfer, B = gradient transfer, both by
 * split-concat). With M micro-batches,
 *   L = max over pivots p, stages e <= p of
 *       sum_{v<p} F_v + core_p + sum_{e<=v<p} B_v + AR_e
 * i.e. warm-up up to the pivot p, the pivot's steady phase core_p, the
 * ending phase back to stage e and e's all-reduce and optimizer step (AR_e:
 * the part of e's bucketed gradient all-reduce that outlasts its last
 * backward, which it overlaps, pt_cost_overlapped_bwd_allreduce_s, plus the
 * step). DAPPLE's
 * steady phase is core_p = M (F_p + B_p) (its (M-1)(F+B) plus the pivot's own
 * F and B); for a stage we also take the round trip the early-backward
 * schedule imposes: stage p runs the forward of micro-batch j + K_p only after
 * the backward of j, which needs j to go down the whole pipeline and back, so
 *   core_p = max(M (F_p + B_p), (q+1) RT_p + rho w_p, RT_p + M B_p + (M - K_p) F_p, ...)
 * with RT_p = sum_{v>=p} (F_v + B_v)
 * with K_p micro-batches in flight (policy A: min(S - p, M); policy B:
 * min(2(S - p) - 1, M)), M - 1 = q K_p + rho and w_p = F_p + B_p (F_p while
 * q = 0; see pt_latency_loop_bound). Without communication the round trip never
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
 * own M(F+B) + AR reaches it ends the scan over its first layer. Large
 * instances (see DAPPLE_ALL_R_DEVICES) trade the proof for speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/latency.h"
#include "planner/plan_score.h"
#include "planner/plan_util.h"
#include "planner/planner.h"
#include "planner/schedule.h"

/* Up to this many devices and DAPPLE_MAX_CUTS layers the search is exact
 * over every replica count and all three placement policies. Beyond that it
 * expands at most DAPPLE_BEAM states per layer (the most promising by their
 * latency and the remaining work per free device) with one entry each: the
 * best plan found, not a proof; above this many devices it also tries only
 * replica counts 1, 2, 3, 4, 6, 8, 12, ... and Fresh and Append First. */
#define DAPPLE_ALL_R_DEVICES 16
#define DAPPLE_BEAM          128
/* Above DAPPLE_ALL_R_DEVICES devices (the beam regime) the search keeps
 * fewer states per layer, fewer stage boundaries and fewer micro-batch sizes,
 * so a 1,024-device cluster plans in well under a second; on the shipped
 * profiles over cluster-128x8 its plans simulate within a few per cent of the
 * wider search's (docs/planners.md). */
#define DAPPLE_SCALE_BEAM 32
/* Stages the exact pass may evaluate (about 0.1 s of CPU per million); past
 * it the search returns the best plan found so far, not a proven optimum. */
#define DAPPLE_EXACT_BUDGET     1500000LL
#define DAPPLE_SCALE_CUTS       48
#define DAPPLE_SCALE_MB_CHOICES 4
/* On large clusters, at most this many stage boundaries are considered:
 * above it the candidates are spaced by equal forward + backward work. */
#define DAPPLE_MAX_CUTS 128
/* Relative precision of the memory need reported when nothing fits. */
#define DAPPLE_NEED_REL_TOL 0.005
/* Relative slack on lower bounds, so that rounding never prunes a plan
 * whose computed latency would beat the incumbent. */
#define DAPPLE_BOUND_SLACK 1e-9
/* Most stage-cost slots kept for one layer (32 bytes each). */
#define DAPPLE_STAGE_COST_MAX (1 << 21)
/* Micro-batch counts tried by default. */
#define DAPPLE_MB_CHOICES 12
/* Final candidates kept for the simulator: the plans that improved the
 * incumbent last (over all runs), best bound first. */
#define DAPPLE_POOL 8

enum { POL_FF, POL_AF, POL_SF, POL_COUNT };
static const char *const pol_name[POL_COUNT] = {"fresh-first", "append-first", "scatter-first"};

typedef struct dclass {
    int size;     /* devices per node */
    int64_t mem;  /* smallest device memory in such a node */
    double speed; /* slowest device speed */
    int rep_dev;  /* a device with that speed (timing queries) */
    int key_off;  /* offset of its histogram in a key */
} dclass;

/* A stage of r devices placed by a policy on an occupancy, as expand saw it
 * (the placement depends on nothing else in a run). */
typedef struct dplaced {
    int status;     /* 0 not yet placed, 1 skipped (no room or a duplicate), 2 placed */
    int target_occ; /* occupancy after it, -1 when no device is left */
    int single_node, rep_dev, cls;
    double speed;
    int64_t mem;
} dplaced;

/* A slot of the state table: the state's key occ * (N+1) + k (-1: empty)
 * kept with its index, so a probe reads one cache line. */
typedef struct sslot {
    int64_t key;
    int s;
} sslot;

/* Result of placing one stage. */
typedef struct dalloc {
    int single_node; /* the node when every replica sits on one node, else -1 */
    int rep_dev;     /* slowest device used */
    double speed;    /* its speed */
    int64_t mem;     /* smallest memory among the devices used */
    int nt;          /* nodes touched */
    int cls;         /* class of the slowest device (its speed and rep_dev) */
} dalloc;

/* A stage's F, B and all-reduce + step at the layer being expanded, for a
 * first layer, replica count, one node or not and slowest class: the same
 * for every state at that layer (gen says which layer and run filled it). */
typedef struct dstagecost {
    double F, B, AR;
    int gen;
} dstagecost;

typedef struct dapple {
    const pt_cost *cost;
    const pt_profile *prof;
    const pt_topology *topo;
    int N, G, nodes, pmb;
    pt_optim_kind optim;
    int64_t mem_override; /* > 0: every device has this memory (search for the need) */
    double max_speed;
    double *pf, *pb;   /* prefix sums of the profile's forward / backward ms, as cost.c keeps:
                          the share that scales with rows */
    double *pfx, *pbx; /* and the rows-independent share (the layers' fixed_share) */
    int *node_class, *node_size, *node_dev_off, *node_devs;
    dclass *cls;
    int ncls, key_len;
    /* replica counts tried */
    int *rset;
    int nr;
    int *r_index;    /* G+1 entries: position of a replica count in rset, -1 */
    uint8_t *cut_ok; /* N+1 entries: 1 where a stage may start or end */
    int cuts_limited;
    double *bmemo; /* boundary times of this run: [src][dst][k][intra], NAN unknown */
    int npol;      /* placement policies tried: all three, or Fresh and Append First at scale */
    /* scratch for placement */
    uint64_t *sortkey;
    int *take;
    int *live; /* entries of the state being expanded */
    int live_cap;
    /* per run */
    int M, b;
    char policy;              /* 'A' or 'B': in-flight micro-batches and memory */
    char only_pol;            /* 'A' or 'B': search only that policy's runs (opts); 0: both */
    int mem_loose;            /* no stage of this run can exceed the smallest device memory */
    double inc;               /* best complete L so far (all runs) */
    int inc_entry;            /* its final entry in this run, -1 */
    int run_fin[DAPPLE_POOL]; /* this run's last complete entries that improved inc */
    int nrun_fin;
    pt_plan *pool[DAPPLE_POOL]; /* earlier incumbents, owned (see pool_push) */
    double pool_L[DAPPLE_POOL];
    int npool;
    int feasibility;    /* stop at the first complete plan */
    int greedy;         /* keep one entry per state (a quick first incumbent) */
    int beam;           /* > 0: expand at most this many states per layer (large clusters) */
    int beam_cut;       /* a run dropped states: the result is not proven optimal */
    long long eval_cap; /* > 0: the exact pass stops past this many evaluated stages */
    int budget_cut;     /* it stopped: the best plan found, not proven optimal */
    int budget_beam;    /* the budget ran out in the one-plan pass: the rest ran a beam */
    struct beam_item *beam_items; /* scratch */
    int beam_cap;
    double run_best; /* best complete latency seen in this run */
    int found;
    long long evaluated;
    /* occupancies: the canonical key without k, a representative free array,
     * the suffix's first stage's replicas and node (-1: several nodes) */
    int no, cap_o;
    int *o_rfirst, *o_bnode, *o_free;
    uint64_t *o_hval;
    int32_t *o_keys;   /* no * key_len */
    dplaced *o_placed; /* no * nr * POL_COUNT, filled as expand places stages */
    dstagecost *sc;    /* (N+1) * nr * 2 * ncls, or NULL when too large */
    double *pw;        /* N+1 entries: prefix_work_eval of this run */
    int sc_gen;
    uint16_t *o_fr; /* no * nodes free counts */
    int *ohash;     /* open addressing, ohcap slots, -1 empty */
    int ohcap;
    /* states: (occupancy, first layer k of the suffix) */
    int ns, cap_s;
    int *s_occ, *s_k, *s_head, *s_nextk;
    int *klist;          /* N+1 heads */
    struct sslot *shash; /* open addressing on occ * (N+1) + k */
    int shcap;
    /* entries */
    int ne, cap_e;
    double *e_L, *e_H, *e_R, *e_Z, *e_Q, *e_G;
    int *e_sigma, *e_parent, *e_first, *e_last, *e_r, *e_next;
    uint8_t *e_pol;
    uint8_t *e_rc; /* the entry's stage recomputes (it does not fit otherwise) */
} dapple;

/* Forward (pf, pfx) or backward (pb, pbx) time of layers [i, j) for rows
 * samples at a speed: the same arithmetic as pt_cost_fwd_s (its rows scaling,
 * pt_cost_rows_ms), on the planner's own prefix sums for the inner loop. */
static inline double span_s(const double *pre, const double *fix, int i, int j, int rows, int pmb,
                            double speed)
{
    return pt_cost_rows_ms((fix[j] - fix[i]) / 1000.0, (pre[j] - pre[i]) / 1000.0, rows, pmb) /
           speed;
}

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
    void **arrs[] = {(void **)&D->s_occ, (void **)&D->s_k, (void **)&D->s_head,
                     (void **)&D->s_nextk};
    size_t el[] = {sizeof(int), sizeof(int), sizeof(int), sizeof(int)};
    return grow(&D->cap_s, need, 4, arrs, el);
}

static int grow_occs(dapple *D, int need)
{
    if (need <= D->cap_o)
        return 0;
    int cap = D->cap_o;
    void **arrs[] = {(void **)&D->o_rfirst, (void **)&D->o_bnode, (void **)&D->o_free,
                     (void **)&D->o_hval};
    size_t el[] = {sizeof(int), sizeof(int), sizeof(int), sizeof(uint64_t)};
    int rc = grow(&cap, need, 4, arrs, el);
    if (rc < 0)
        return rc;
    int32_t *k = realloc(D->o_keys, (size_t)cap * (size_t)D->key_len * sizeof *k);
    if (!k)
        return PT_ENOMEM;
    D->o_keys = k;
    uint16_t *o = realloc(D->o_fr, (size_t)cap * (size_t)D->nodes * sizeof *o);
    if (!o)
        return PT_ENOMEM;
    D->o_fr = o;
    dplaced *pl = realloc(D->o_placed, (size_t)cap * (size_t)D->nr * POL_COUNT * sizeof *pl);
    if (!pl)
        return PT_ENOMEM;
    D->o_placed = pl;
    D->cap_o = cap;
    return 0;
}

static int grow_entries(dapple *D, int need)
{
    void **arrs[] = {(void **)&D->e_L,     (void **)&D->e_H,      (void **)&D->e_R,
                     (void **)&D->e_Z,     (void **)&D->e_Q,      (void **)&D->e_G,
                     (void **)&D->e_sigma, (void **)&D->e_parent, (void **)&D->e_first,
                     (void **)&D->e_last,  (void **)&D->e_r,      (void **)&D->e_next,
                     (void **)&D->e_pol,   (void **)&D->e_rc};
    size_t el[] = {sizeof(double), sizeof(double), sizeof(double),  sizeof(double), sizeof(double),
                   sizeof(double), sizeof(int),    sizeof(int),     sizeof(int),    sizeof(int),
                   sizeof(int),    sizeof(int),    sizeof(uint8_t), sizeof(uint8_t)};
    return grow(&D->cap_e, need, 14, arrs, el);
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

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Rebuilds the occupancy table with newcap slots. */
static int rehash(int **table, int *cap, int newcap, int n, const dapple *D)
{
    int *h = malloc((size_t)newcap * sizeof *h);
    if (!h)
        return PT_ENOMEM;
    for (int i = 0; i < newcap; i++)
        h[i] = -1;
    for (int x = 0; x < n; x++) {
        int i = (int)(D->o_hval[x] & (uint64_t)(newcap - 1));
        while (h[i] >= 0)
            i = (i + 1) & (newcap - 1);
        h[i] = x;
    }
    free(*table);
    *table = h;
    *cap = newcap;
    return 0;
}

/* Canonical key of an occupancy: 0 (room for a layer index), replicas of
 * the suffix's first stage, the boundary node's class and free count (or -1),
 * then per class the number of other nodes at each free count. */
static void make_key(const dapple *D, int rfirst, const uint16_t *fr, int bnode, int32_t *key)
{
    memset(key, 0, (size_t)D->key_len * sizeof *key);
    if (D->feasibility && D->ncls == 1) {
        /* whether a plan fits depends on nothing but how many devices are
         * left when all nodes are alike: every policy places r devices
         * whenever r are free, and their memory is the same */
        int free_total = 0;
        for (int n = 0; n < D->nodes; n++)
            free_total += fr[n];
        key[1] = free_total;
        key[2] = key[3] = -1;
        return;
    }
    key[1] = rfirst;
    key[2] = bnode >= 0 ? D->node_class[bnode] : -1;
    key[3] = bnode >= 0 ? fr[bnode] : -1;
    for (int n = 0; n < D->nodes; n++)
        if (n != bnode)
            key[D->cls[D->node_class[n]].key_off + fr[n]]++;
}

/* Finds or adds the occupancy with this key; returns its id or PT_ENOMEM. */
static int occ_get(dapple *D, const int32_t *key, const uint16_t *fr, int rfirst, int bnode,
                   int free_total)
{
    uint64_t h = hash_key(key, D->key_len);
    int i = (int)(h & (uint64_t)(D->ohcap - 1));
    while (D->ohash[i] >= 0) {
        int o = D->ohash[i];
        if (D->o_hval[o] == h &&
            !memcmp(D->o_keys + (size_t)o * D->key_len, key, (size_t)D->key_len * sizeof *key))
            return o;
        i = (i + 1) & (D->ohcap - 1);
    }
    if (grow_occs(D, D->no + 1) < 0)
        return PT_ENOMEM;
    int o = D->no++;
    D->o_rfirst[o] = rfirst;
    D->o_bnode[o] = bnode;
    D->o_free[o] = free_total;
    D->o_hval[o] = h;
    memcpy(D->o_keys + (size_t)o * D->key_len, key, (size_t)D->key_len * sizeof *key);
    memcpy(D->o_fr + (size_t)o * D->nodes, fr, (size_t)D->nodes * sizeof *fr);
    memset(D->o_placed + (size_t)o * D->nr * POL_COUNT, 0,
           (size_t)D->nr * POL_COUNT * sizeof *D->o_placed);
    D->ohash[i] = o;
    if ((int64_t)D->no * 2 > D->ohcap && rehash(&D->ohash, &D->ohcap, D->ohcap * 2, D->no, D) < 0)
        return PT_ENOMEM;
    return o;
}

/* Home slot of state (o, k) before masking: the layers of one occupancy
 * are neighbours, so expand's scan over a stage's first layer stays in a few
 * cache lines. */
static inline uint64_t state_slot(int o, int k)
{
    return mix64((uint64_t)o) + (uint64_t)k;
}

/* Rebuilds the state table with newcap slots. */
static int state_rehash(dapple *D, int newcap)
{
    sslot *h = malloc((size_t)newcap * sizeof *h);
    if (!h)
        return PT_ENOMEM;
    for (int i = 0; i < newcap; i++)
        h[i].key = -1;
    for (int x = 0; x < D->ns; x++) {
        int64_t key = (int64_t)D->s_occ[x] * (D->N + 1) + D->s_k[x];
        int i = (int)(state_slot(D->s_occ[x], D->s_k[x]) & (uint64_t)(newcap - 1));
        while (h[i].key >= 0)
            i = (i + 1) & (newcap - 1);
        h[i].key = key;
        h[i].s = x;
    }
    free(D->shash);
    D->shash = h;
    D->shcap = newcap;
    return 0;
}

/* Finds or adds the state (occupancy o, layer k); its index or PT_ENOMEM. */
static int state_get(dapple *D, int o, int k)
{
    int64_t key = (int64_t)o * (D->N + 1) + k;
    uint64_t h = state_slot(o, k);
    int i = (int)(h & (uint64_t)(D->shcap - 1));
    while (D->shash[i].key >= 0) {
        if (D->shash[i].key == key)
            return D->shash[i].s;
        i = (i + 1) & (D->shcap - 1);
    }
    if (grow_states(D, D->ns + 1) < 0)
        return PT_ENOMEM;
    int s = D->ns++;
    D->s_occ[s] = o;
    D->s_k[s] = k;
    D->s_head[s] = -1;
    D->s_nextk[s] = D->klist[k];
    D->klist[k] = s;
    D->shash[i].key = key;
    D->shash[i].s = s;
    if ((int64_t)D->ns * 2 > D->shcap && state_rehash(D, D->shcap * 2) < 0)
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
    if (n > 32) {
        qsort(D->sortkey, (size_t)n, sizeof *D->sortkey, cmp_u64);
    } else {
        for (int i = 1; i < n; i++) {
            uint64_t x = D->sortkey[i];
            int j = i;
            for (; j > 0 && D->sortkey[j - 1] > x; j--)
                D->sortkey[j] = D->sortkey[j - 1];
            D->sortkey[j] = x;
        }
    }
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
            a->speed = c->speed;
            a->cls = D->node_class[node];
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

/* What the search keeps of a suffix plan (all "smaller is better"):
 * L  its latency (longest critical path);
 * H  the longest path ending at the suffix's front without an all-reduce
 *    (what a stage prepended later adds its backward and all-reduce to);
 * R  its total F + B (the round trip of the last micro-batch through it);
 * Z  the longest time from the last micro-batch entering it to one of its
 *    stages finishing its all-reduce (its forwards, the backwards back to that
 *    stage, the all-reduce);
 * Q  its first stage's forward plus M of its activation sends (what that
 *    stage's communication lane carries besides the gradients it will send
 *    to the stage prepended next);
 * G  when its first stage can have finished the backward of micro-batch 0,
 *    counted from that micro-batch entering it: every stage runs its K
 *    warm-up forwards before its first backward, so the first gradient waits
 *    for the warm-ups of all stages after it. */
typedef struct dval {
    double L, H, R, Z, Q, G;
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
    if (D->feasibility && *link >= 0) {
        /* only existence matters: fewer stages after a stage never cost it
         * memory, so the entry with the fewest is the one to keep */
        if (D->e_sigma[*link] <= sigma)
            return -1;
        *link = D->e_next[*link];
    } else if (D->greedy && *link >= 0) {
        if (D->e_L[*link] <= v->L)
            return -1;
        *link = D->e_next[*link];
    }
    while (*link >= 0) {
        int e = *link;
        int ee = D->e_sigma[e] < D->M ? D->e_sigma[e] : D->M;
        if (ee == se && D->e_L[e] <= v->L && D->e_H[e] <= v->H && D->e_R[e] <= v->R &&
            D->e_Z[e] <= v->Z && D->e_Q[e] <= v->Q && D->e_G[e] <= v->G)
            return -1;
        if (ee == se && v->L <= D->e_L[e] && v->H <= D->e_H[e] && v->R <= D->e_R[e] &&
            v->Z <= D->e_Z[e] && v->Q <= D->e_Q[e] && v->G <= D->e_G[e]) {
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
    D->e_Q[e] = v->Q;
    D->e_G[e] = v->G;
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
    D->e_Q[e] = v->Q;
    D->e_G[e] = v->G;
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
 *   lane + AR       the next stage's communication lane (its forward, then
 *                   M activation and M gradient sends), p's last backward
 * where Y bounds the end of p's last forward: M F + (M-K) B behind its own
 * lane, and, past warm-up, F + the first round trip + (M-K)(F+B). */
static dval prepend(const dval *x, double F, double B, double AR, int K, int M, double cf,
                    double cb)
{
    double w = F + B;
    dval c = {-INFINITY, -INFINITY, 0, -INFINITY, 0, 0};
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
    /* the first backward waits for the warm-up forwards here and for the
     * first gradient, which waits for the warm-ups downstream (S); then the
     * stage still runs every backward and the forwards past warm-up */
    double S = K * F;
    if (x)
        S = dmax(S, F + cf + x->G + cb);
    double drain = dmax(F + c.R, S) + M * B + (M - K) * F;
    double core =
        dmax(dmax(M * w, pt_latency_loop_bound(M, K, w + c.R, w, F)), dmax(Y + c.R + B, drain));
    dval v;
    v.L = dmax(dmax(F + c.L, w + AR + c.H), dmax(core + AR, Y + c.Z));
    v.H = dmax(w + c.H, core);
    v.R = w + c.R;
    v.Z = dmax(F + c.Z, v.R + AR);
    v.Q = F + M * cf;
    v.G = S + B;
    if (x) {
        /* the next stage's communication lane: its activation sends and the
         * gradients it sends back here, M of each, after its first forward;
         * then this stage's last backward */
        double lane = F + cf + x->Q + M * cb + B;
        v.L = dmax(v.L, lane + AR);
        v.H = dmax(v.H, lane);
    }
    return v;
}

/* Work of layers [0, k) at b samples on a speed-1 device, seconds. */
static double prefix_work_eval(const dapple *D, int k)
{
    return span_s(D->pf, D->pfx, 0, k, D->b, D->pmb, 1.0) +
           span_s(D->pb, D->pbx, 0, k, D->b, D->pmb, 1.0);
}

/* The same, from the table run_m fills for the run's micro-batch. */
static inline double prefix_work(const dapple *D, int k)
{
    return D->pw[k];
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

/* Split-concat transfer across the boundary before layer k (src replicas to
 * dst replicas, one node or not) for this run's micro-batch, memoised. */
static double boundary(dapple *D, int intra, int src, int dst, int k, int64_t bytes)
{
    size_t i = (((size_t)D->r_index[src] * D->nr + D->r_index[dst]) * (size_t)(D->N + 1) + k) * 2 +
               (intra ? 1 : 0);
    double v = D->bmemo[i];
    if (v != v) {
        v = pu_boundary_s(intra ? D->topo->intra : D->topo->inter, src, dst, D->b, bytes, D->pmb);
        D->bmemo[i] = v;
    }
    return v;
}

/* What expand knows while it tries the stages ending at one state's layer. */
typedef struct xctx {
    int s, k, o, rfirst, bnode, free_total, nl;
    double lmin;   /* smallest L among the live entries */
    int64_t act_k; /* the activation crossing boundary k */
    uint16_t *fr, *nf;
    int32_t *key2;
    /* the stage being tried: r replicas (rset[ri]) placed by pol */
    int ri, r, rows, free_after, pol, target_occ;
    dalloc a;
    double cf, cb; /* its boundary to the suffix, forward and backward */
} xctx;

/* The state's entries still worth extending, into D->live; PT_ENOMEM. */
static int live_entries(dapple *D, xctx *x)
{
    x->nl = 0;
    x->lmin = INFINITY;
    for (int e = D->s_head[x->s]; e >= 0; e = D->e_next[e]) {
        if (!(D->e_L[e] < D->inc))
            continue;
        if (x->nl == D->live_cap) {
            int nc = D->live_cap ? 2 * D->live_cap : 64;
            int *q = realloc(D->live, (size_t)nc * sizeof *q);
            if (!q)
                return PT_ENOMEM;
            D->live = q;
            D->live_cap = nc;
        }
        D->live[x->nl++] = e;
        if (D->e_L[e] < x->lmin)
            x->lmin = D->e_L[e];
    }
    return 0;
}

/* Placements already tried for one replica count at this state: a policy
 * whose placement is canonically the same as an earlier one is skipped. */
typedef struct xprev {
    int n, same[POL_COUNT], rep[POL_COUNT], occ[POL_COUNT], one[POL_COUNT];
    int64_t mem[POL_COUNT];
} xprev;

/* Places x->r devices by x->pol on the state's occupancy into x->a and
 * x->target_occ: once per run per (occupancy, r, policy), the result kept in
 * D->o_placed. 1 when the stage can be tried, 0 when not (no room, or a
 * duplicate), PT_ENOMEM. */
static int placement(dapple *D, xctx *x, xprev *pv)
{
    size_t pi = ((size_t)x->o * D->nr + x->ri) * POL_COUNT + x->pol;
    x->target_occ = -1;
    if (D->o_placed[pi].status == 1)
        return 0;
    if (D->o_placed[pi].status == 2) {
        const dplaced *m = &D->o_placed[pi];
        x->target_occ = m->target_occ;
        x->a = (dalloc){m->single_node, m->rep_dev, m->speed, m->mem, 0, m->cls};
        return 1;
    }
    D->o_placed[pi].status = 1;
    if (place(D, x->fr, x->bnode, x->r, x->pol, x->nf, &x->a) < 0)
        return 0;
    int nb = x->a.single_node, same = x->rfirst > 0 && nb >= 0 && nb == x->bnode;
    if (x->free_after > 0) {
        make_key(D, x->r, x->nf, nb, x->key2);
        x->target_occ = occ_get(D, x->key2, x->nf, x->r, nb, x->free_after);
        if (x->target_occ < 0)
            return PT_ENOMEM;
    }
    for (int q = 0; q < pv->n; q++)
        if (pv->same[q] == same && pv->mem[q] == x->a.mem && pv->rep[q] == x->a.rep_dev &&
            pv->occ[q] == x->target_occ && pv->one[q] == (nb >= 0))
            return 0;
    pv->same[pv->n] = same;
    pv->mem[pv->n] = x->a.mem;
    pv->rep[pv->n] = x->a.rep_dev;
    pv->occ[pv->n] = x->target_occ;
    pv->one[pv->n] = nb >= 0;
    pv->n++;
    dplaced *m = &D->o_placed[pi]; /* occ_get may have moved the array */
    *m =
        (dplaced){2, x->target_occ, x->a.single_node, x->a.rep_dev, x->a.cls, x->a.speed, x->a.mem};
    return 1;
}

/* The stage [kp, k) on the placed devices: its B and AR (all-reduce outlasting
 * its last backward, plus the step), from the per-layer memo when current. */
static void stage_b_ar(dapple *D, const xctx *x, int kp, dstagecost *sc, double F, double *B,
                       double *AR)
{
    if (sc && sc->gen == D->sc_gen) {
        *B = sc->B;
        *AR = sc->AR;
        return;
    }
    pt_link arl = x->a.single_node >= 0 ? D->topo->intra : D->topo->inter;
    *B = span_s(D->pb, D->pbx, kp, x->k, x->rows, D->pmb, x->a.speed);
    int64_t P = pt_cost_param_bytes(D->cost, kp, x->k);
    /* the all-reduce overlaps the stage's last backward; AR is the part that
     * outlasts it, then the step */
    *AR = pt_cost_overlapped_bwd_ring_s(D->cost, x->r, arl.latency, arl.bandwidth, kp, x->k,
                                        x->rows, x->a.rep_dev, 0) -
          pt_cost_bwd_s(D->cost, kp, x->k, x->rows, x->a.rep_dev) +
          pt_cost_opt_step_s(D->cost, P, D->optim, x->a.rep_dev);
    if (sc)
        *sc = (dstagecost){F, *B, *AR, D->sc_gen};
}

/* Records a complete plan (kp == 0) as the new incumbent. -2 on no memory,
 * else its entry. */
static int new_incumbent(dapple *D, const dval *v, int sigma)
{
    int ne = new_entry(D, v, sigma);
    if (ne < -1)
        return ne;
    D->inc = v->L;
    D->inc_entry = ne;
    if (D->nrun_fin == DAPPLE_POOL) {
        memmove(D->run_fin, D->run_fin + 1, (DAPPLE_POOL - 1) * sizeof *D->run_fin);
        D->nrun_fin--;
    }
    D->run_fin[D->nrun_fin++] = ne;
    D->found = 1;
    if (v->L < D->run_best)
        D->run_best = v->L;
    return ne;
}

/* Prepends the stage [kp, k) (F, B, AR) to every live entry that it fits
 * (recomputing when only that fits) and keeps what is not dominated.
 * 0, 1 when a feasibility search has its plan, PT_ENOMEM. */
static int extend_entries(dapple *D, xctx *x, int kp, double F, double B, double AR, double lb_fwd)
{
    int M = D->M, target = -1;
    double rec = -1; /* the stage's recompute forward, once needed */
    for (int li = 0; li < x->nl; li++) {
        int e = D->live[li], sigma = D->e_sigma[e];
        int S = sigma + 1 + (kp > 0), i = kp > 0, recompute = 0;
        double Be = B;
        /* a stage that does not fit recomputes when that fits: it keeps only
         * its input per micro-batch in flight and pays a second forward
         * before each backward */
        if (!D->mem_loose || D->mem_override > 0) {
            int64_t mem = pu_stage_memory(D->cost, PT_SCHED_DAPPLE, D->policy, S, i, kp, x->k,
                                          x->rows, M, 0, D->optim);
            if (mem > x->a.mem) {
                mem = pu_stage_memory(D->cost, PT_SCHED_DAPPLE, D->policy, S, i, kp, x->k, x->rows,
                                      M, 1, D->optim);
                if (mem > x->a.mem)
                    continue;
                if (rec < 0)
                    rec = pt_cost_recompute_s(D->cost, kp, x->k, x->rows, x->a.rep_dev);
                recompute = 1;
                Be = B + rec;
            }
        }
        int K = D->policy == 'B' ? 2 * sigma + 1 : sigma + 1; /* in flight */
        K = K > M ? M : K;
        dval suf = {D->e_L[e], D->e_H[e], D->e_R[e], D->e_Z[e], D->e_Q[e], D->e_G[e]};
        dval v = prepend(sigma > 0 ? &suf : NULL, F, Be, AR, K, M, x->cf, x->cb);
        if (v.L + lb_fwd >= D->inc)
            continue;
        int ne;
        if (kp == 0) {
            ne = new_incumbent(D, &v, sigma + 1);
        } else {
            if (target < 0 && (target = state_get(D, x->target_occ, kp)) < 0)
                return PT_ENOMEM;
            ne = front_insert(D, target, &v, sigma + 1);
        }
        if (ne < -1)
            return PT_ENOMEM;
        if (ne < 0)
            continue;
        D->e_parent[ne] = e;
        D->e_first[ne] = kp;
        D->e_last[ne] = x->k;
        D->e_r[ne] = x->r;
        D->e_pol[ne] = (uint8_t)x->pol;
        D->e_rc[ne] = (uint8_t)recompute;
        if (kp == 0 && D->feasibility)
            return 1;
    }
    return 0;
}

/* Every first layer kp of the placed stage, from the largest that can still
 * win down: 0, 1 (feasibility found), PT_ENOMEM. */
static int expand_stage(dapple *D, xctx *x)
{
    int k = x->k, b = D->b, nb = x->a.single_node;
    int kp_hi = 0;
    if (x->free_after > 0 && k - 1 >= 1) {
        kp_hi = prefix_cut(D, 1, k - 1, x->free_after);
        if (kp_hi < 1)
            kp_hi = 0; /* only the whole prefix as one stage can still win */
    }
    /* every stage still to come before kp runs its forward before this suffix
     * starts (L' >= F + L), each on at most r_left replicas: lb_fwd =
     * work_fwd(0, kp) * lb_scale bounds that delay */
    int r_left = x->free_after < b ? x->free_after : b;
    double lb_scale =
        r_left > 0 ? b / (1000.0 * D->pmb * D->max_speed * r_left) * (1.0 - DAPPLE_BOUND_SLACK)
                   : 0.0;
    dstagecost *scrow =
        D->sc ? D->sc + ((size_t)(x->ri * 2 + (nb >= 0)) * D->ncls + x->a.cls) * (D->N + 1) : NULL;
    for (int kp = kp_hi; kp >= 0; kp--) {
        if (kp > 0 && (x->free_after == 0 || !D->cut_ok[kp]))
            continue;
        dstagecost *sc = scrow ? &scrow[kp] : NULL;
        double F = sc && sc->gen == D->sc_gen
                       ? sc->F
                       : span_s(D->pf, D->pfx, kp, k, x->rows, D->pmb, x->a.speed);
        double lb_fwd = kp > 0 ? (D->pf[kp] - D->pf[0]) * lb_scale : 0.0;
        if ((F + x->lmin + lb_fwd) * (1.0 - DAPPLE_BOUND_SLACK) >= D->inc) {
            /* with r <= r_left, F grows by at least what lb_fwd loses as kp
             * falls: no smaller kp can do better */
            if (x->r <= r_left || kp == 0)
                break;
            continue;
        }
        double B, AR;
        stage_b_ar(D, x, kp, sc, F, &B, &AR);
        if (D->M * (F + B) + AR >= D->inc)
            break; /* the stage only grows as kp falls */
        D->evaluated++;
        int rc = extend_entries(D, x, kp, F, B, AR, lb_fwd);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Expands state s: every stage [k', k) on r devices placed by each policy. */
static int expand(dapple *D, int s, uint16_t *fr, uint16_t *nf, int32_t *key2)
{
    xctx x = {.s = s, .k = D->s_k[s], .o = D->s_occ[s], .fr = fr, .nf = nf, .key2 = key2};
    x.rfirst = D->o_rfirst[x.o];
    x.bnode = D->o_bnode[x.o];
    x.free_total = D->o_free[x.o];
    /* a copy: occ_get may move D->o_fr */
    memcpy(fr, D->o_fr + (size_t)x.o * D->nodes, (size_t)D->nodes * sizeof *fr);
    if (live_entries(D, &x) < 0)
        return PT_ENOMEM;
    if (!x.nl || x.free_total == 0)
        return 0;
    if (isfinite(D->inc) && D->M * prefix_work(D, x.k) / (D->max_speed * x.free_total) >= D->inc)
        return 0;
    x.act_k = x.k < D->N ? D->prof->layers[x.k - 1].act_bytes : 0;
    for (x.ri = 0; x.ri < D->nr; x.ri++) {
        x.r = D->rset[x.ri];
        if (x.r > x.free_total || x.r > D->b)
            break;
        x.rows = pu_rows_max(D->b, x.r);
        x.free_after = x.free_total - x.r;
        xprev pv = {0};
        for (x.pol = 0; x.pol < D->npol; x.pol++) {
            int rc = placement(D, &x, &pv);
            if (rc < 0)
                return rc;
            if (rc == 0)
                continue;
            int nb = x.a.single_node, same = x.rfirst > 0 && nb >= 0 && nb == x.bnode;
            x.cf = x.cb = 0;
            if (x.rfirst > 0) {
                x.cf = boundary(D, same, x.r, x.rfirst, x.k, x.act_k);
                x.cb = boundary(D, same, x.rfirst, x.r, x.k, x.act_k);
            }
            if ((rc = expand_stage(D, &x)) < 0)
                return rc;
            if (rc == 1) /* a feasibility search found its plan */
                return 0;
        }
    }
    return 0;
}

/* Estimated final latency of the best completion of state s: its best
 * entry delayed by the remaining layers' forward spread over its free
 * devices, or those layers' work spread over them, whichever is larger. */
static double state_estimate(const dapple *D, int s, int k, double fwd_k)
{
    double best = INFINITY;
    for (int e = D->s_head[s]; e >= 0; e = D->e_next[e])
        if (D->e_L[e] < best)
            best = D->e_L[e];
    int free_total = D->o_free[D->s_occ[s]];
    if (free_total > 0) {
        double per = D->max_speed * free_total;
        best = dmax(best + fwd_k / per, D->M * prefix_work(D, k) / per);
    }
    return best;
}

typedef struct beam_item {
    double est;
    int s;
} beam_item;

static int cmp_beam(const void *a, const void *b)
{
    const beam_item *x = a, *y = b;
    if (x->est != y->est)
        return x->est < y->est ? -1 : 1;
    return (x->s > y->s) - (x->s < y->s);
}

/* Moves the k smallest items (cmp_beam order) to a[0..k), unordered:
 * quickselect, O(n) on average. */
static void select_smallest(beam_item *a, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        beam_item pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_beam(&a[i], &pivot) < 0)
                i++;
            while (cmp_beam(&a[j], &pivot) > 0)
                j--;
            if (i <= j) {
                beam_item t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (k <= j + 1)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
}

/* Keeps the D->beam states at layer k with the best estimates (ties by
 * index, so runs are deterministic); the others are unlinked from klist. */
static int keep_best_states(dapple *D, int k, int n)
{
    if (n > D->beam_cap) {
        beam_item *q = realloc(D->beam_items, (size_t)n * sizeof *q);
        if (!q)
            return PT_ENOMEM;
        D->beam_items = q;
        D->beam_cap = n;
    }
    int c = 0;
    double fwd_k = pt_cost_fwd_s(D->cost, 0, k, D->b, -1); /* the same for every state */
    for (int s = D->klist[k]; s >= 0; s = D->s_nextk[s]) {
        D->beam_items[c].s = s;
        D->beam_items[c].est = state_estimate(D, s, k, fwd_k);
        c++;
    }
    int kept = c < D->beam ? c : D->beam;
    select_smallest(D->beam_items, c, kept);
    D->klist[k] = -1;
    for (int i = kept - 1; i >= 0; i--) {
        D->s_nextk[D->beam_items[i].s] = D->klist[k];
        D->klist[k] = D->beam_items[i].s;
    }
    return 0;
}

/* One dynamic program for micro-batch count M. */
/* Whether memory cannot bind in this run: an upper bound on any stage
 * replica's memory (every parameter with its gradient, optimizer state and
 * weights, M micro-batches of every activation and saved byte at b rows,
 * the whole model's backward scratch, plus the largest boundary in and out)
 * within the smallest device memory. */
static int memory_loose(const dapple *D, int M)
{
    int64_t P = pt_cost_param_bytes(D->cost, 0, D->N), big = 0;
    for (int k = 0; k <= D->N; k++) {
        int64_t x = pt_cost_boundary_bytes(D->cost, k, D->b);
        if (x > big)
            big = x;
    }
    double bound = (double)P * 3 + (double)pt_cost_optim_state_bytes(D->cost, P, D->optim) +
                   (double)M * ((double)big + (double)pt_cost_act_bytes(D->cost, 0, D->N, D->b) +
                                (double)pt_cost_saved_bytes(D->cost, 0, D->N, D->b)) +
                   (double)pt_cost_scratch_bytes(D->cost, 0, D->N, D->b) + 2.0 * (double)big;
    int64_t lim = INT64_MAX;
    for (int c = 0; c < D->ncls; c++)
        if (D->cls[c].mem < lim)
            lim = D->cls[c].mem;
    return bound <= (double)lim;
}

static int run_m(dapple *D, int M)
{
    D->M = M;
    D->mem_loose = memory_loose(D, M);
    for (int k = 0; k <= D->N; k++)
        D->pw[k] = prefix_work_eval(D, k);
    D->ns = 0;
    D->ne = 0;
    D->inc_entry = -1;
    D->nrun_fin = 0;
    D->run_best = INFINITY;
    for (int k = 0; k <= D->N; k++)
        D->klist[k] = -1;
    size_t nmemo = (size_t)D->nr * D->nr * (size_t)(D->N + 1) * 2;
    for (size_t i = 0; i < nmemo; i++)
        D->bmemo[i] = NAN;
    D->no = 0;
    for (int i = 0; i < D->ohcap; i++)
        D->ohash[i] = -1;
    for (int i = 0; i < D->shcap; i++)
        D->shash[i].key = -1;
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
    make_key(D, 0, fr, -1, key);
    int o0 = occ_get(D, key, fr, 0, -1, D->G);
    int s0 = o0 >= 0 ? state_get(D, o0, D->N) : o0;
    dval root = {-INFINITY, -INFINITY, 0, -INFINITY, 0, 0};
    int e0 = s0 >= 0 ? front_insert(D, s0, &root, 0) : -2;
    if (s0 < 0 || e0 < 0) {
        rc = PT_ENOMEM;
        goto out;
    }
    D->e_parent[e0] = -1;
    for (int k = D->N; k >= 1 && rc == 0; k--) {
        D->sc_gen++; /* stage costs depend on k and this run's micro-batch */
        int n = 0;
        for (int s = D->klist[k]; s >= 0; s = D->s_nextk[s])
            n++;
        if (D->beam > 0 && n > D->beam) {
            rc = keep_best_states(D, k, n);
            if (rc < 0)
                break;
            D->beam_cut = 1;
        }
        for (int s = D->klist[k]; s >= 0; s = D->s_nextk[s]) {
            rc = expand(D, s, fr, fr + D->nodes, key + D->key_len);
            if (rc < 0 || (D->feasibility && D->found))
                break;
            if (D->eval_cap > 0 && D->evaluated > D->eval_cap) {
                D->budget_cut = 1;
                break;
            }
        }
        if ((D->feasibility && D->found) || D->budget_cut)
            break;
    }
out:
    free(key);
    free(fr);
    return rc;
}

static void pool_clear(dapple *D);

static void dapple_free(dapple *D)
{
    pool_clear(D);
    free(D->node_class);
    free(D->node_size);
    free(D->node_dev_off);
    free(D->node_devs);
    free(D->cls);
    free(D->rset);
    free(D->r_index);
    free(D->cut_ok);
    free(D->pf);
    free(D->pb);
    free(D->pfx);
    free(D->pbx);
    free(D->bmemo);
    free(D->sortkey);
    free(D->take);
    free(D->live);
    free(D->beam_items);
    free(D->s_k);
    free(D->s_occ);
    free(D->o_rfirst);
    free(D->o_bnode);
    free(D->o_free);
    free(D->o_hval);
    free(D->o_keys);
    free(D->o_fr);
    free(D->o_placed);
    free(D->sc);
    free(D->pw);
    free(D->ohash);
    free(D->shash);
    free(D->s_head);
    free(D->s_nextk);
    free(D->klist);
    free(D->e_L);
    free(D->e_H);
    free(D->e_R);
    free(D->e_Z);
    free(D->e_Q);
    free(D->e_G);
    free(D->e_sigma);
    free(D->e_parent);
    free(D->e_first);
    free(D->e_last);
    free(D->e_r);
    free(D->e_next);
    free(D->e_pol);
    free(D->e_rc);
}

/* Replica counts tried on large clusters: 1, 2, 3, 4, 6, 8, 12, 16, ... */
static int dapple_coarse_r(int r)
{
    while (r % 2 == 0)
        r /= 2;
    return r == 1 || r == 3;
}

/* Node classes: nodes of the same size, smallest memory and slowest speed
 * share one (the canonical occupancy keys count nodes per class). */
static void dapple_classes(dapple *D, const pt_topology *topo)
{
    int nodes = D->nodes;
    D->max_speed = 0;
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
    }
    D->key_len = 4;
    for (int c = 0; c < D->ncls; c++) {
        D->cls[c].key_off = D->key_len;
        D->key_len += D->cls[c].size + 1;
    }
}

/* The replica counts tried (every one up to DAPPLE_ALL_R_DEVICES devices,
 * else dapple_coarse_r's) and the boundary memo. 0 or PT_ENOMEM. */
static int dapple_replicas(dapple *D)
{
    D->rset = calloc((size_t)D->G, sizeof(int));
    if (!D->rset)
        return PT_ENOMEM;
    for (int r = 1; r <= D->G; r++)
        if (D->G <= DAPPLE_ALL_R_DEVICES || dapple_coarse_r(r))
            D->rset[D->nr++] = r;
    D->r_index = malloc(((size_t)D->G + 1) * sizeof(int));
    D->bmemo = malloc((size_t)D->nr * D->nr * (size_t)(D->N + 1) * 2 * sizeof(double));
    if (!D->r_index || !D->bmemo)
        return PT_ENOMEM;
    for (int r = 0; r <= D->G; r++)
        D->r_index[r] = -1;
    for (int i = 0; i < D->nr; i++)
        D->r_index[D->rset[i]] = i;
    D->npol = D->G <= DAPPLE_ALL_R_DEVICES ? POL_COUNT : POL_SF;
    return 0;
}

/* Prefix sums of the profile's forward and backward ms: the share that
 * scales with rows and the fixed share. 0 or PT_ENOMEM. */
static int dapple_prefix(dapple *D)
{
    D->pf = malloc(((size_t)D->N + 1) * sizeof(double));
    D->pw = malloc(((size_t)D->N + 1) * sizeof(double));
    D->pb = malloc(((size_t)D->N + 1) * sizeof(double));
    D->pfx = malloc(((size_t)D->N + 1) * sizeof(double));
    D->pbx = malloc(((size_t)D->N + 1) * sizeof(double));
    if (!D->pf || !D->pb || !D->pw || !D->pfx || !D->pbx)
        return PT_ENOMEM;
    D->pf[0] = D->pb[0] = D->pfx[0] = D->pbx[0] = 0;
    for (int l = 0; l < D->N; l++) {
        const pt_profile_layer *L = &D->prof->layers[l];
        double fs = pt_profile_layer_share(L, PT_PROFILE_PASS_FWD),
               bs = pt_profile_layer_share(L, PT_PROFILE_PASS_BWD);
        D->pf[l + 1] = D->pf[l] + L->fwd_ms * (1 - fs);
        D->pb[l + 1] = D->pb[l] + L->bwd_ms * (1 - bs);
        D->pfx[l + 1] = D->pfx[l] + L->fwd_ms * fs;
        D->pbx[l + 1] = D->pbx[l] + L->bwd_ms * bs;
    }
    return 0;
}

/* Where a stage may start or end: every boundary, or on many layers the
 * candidates nearest to equal shares of the work. 0 or PT_ENOMEM. */
static int dapple_cuts(dapple *D, const pt_cost *cost)
{
    D->cut_ok = calloc((size_t)D->N + 1, 1);
    if (!D->cut_ok)
        return PT_ENOMEM;
    int maxcuts = D->G > DAPPLE_ALL_R_DEVICES ? DAPPLE_SCALE_CUTS : DAPPLE_MAX_CUTS;
    if (D->N <= maxcuts) {
        memset(D->cut_ok, 1, (size_t)D->N + 1);
    } else {
        /* boundaries nearest to equal shares of the forward + backward work */
        double total =
            pt_cost_fwd_s(cost, 0, D->N, D->pmb, -1) + pt_cost_bwd_s(cost, 0, D->N, D->pmb, -1);
        int j = 0;
        for (int c = 1; c < maxcuts; c++) {
            double target = total * c / maxcuts;
            while (j < D->N && pt_cost_fwd_s(cost, 0, j + 1, D->pmb, -1) +
                                       pt_cost_bwd_s(cost, 0, j + 1, D->pmb, -1) <=
                                   target)
                j++;
            D->cut_ok[j > 0 ? j : 1] = 1;
        }
        D->cut_ok[0] = D->cut_ok[D->N] = 1;
        D->cuts_limited = 1;
    }
    return 0;
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
    dapple_classes(D, topo);
    int rc = dapple_replicas(D);
    if (rc < 0 || (rc = dapple_prefix(D)) < 0 || (rc = dapple_cuts(D, cost)) < 0)
        return rc;
    /* stage costs per layer, when small enough to keep (zeroed: gen 0 is never current) */
    size_t nsc = (size_t)(D->N + 1) * (size_t)D->nr * 2 * (size_t)D->ncls;
    if (nsc <= DAPPLE_STAGE_COST_MAX)
        D->sc = calloc(nsc, sizeof *D->sc);
    /* exact on small instances; a beam on large ones */
    D->beam = D->G <= DAPPLE_ALL_R_DEVICES && D->N <= DAPPLE_MAX_CUTS ? 0
              : D->G > DAPPLE_ALL_R_DEVICES                           ? DAPPLE_SCALE_BEAM
                                                                      : DAPPLE_BEAM;
    D->ohcap = D->shcap = 1 << 12;
    D->ohash = malloc((size_t)D->ohcap * sizeof(int));
    D->shash = malloc((size_t)D->shcap * sizeof *D->shash);
    if (!D->ohash || !D->shash)
        return PT_ENOMEM;
    return 0;
}

/* Places a plan on concrete devices: stage s takes rs[s] devices by policy
 * pols[s], from the last stage to the first, as the search does. NULL when
 * the devices run out or on no memory. */
static pt_plan *place_plan(dapple *D, int S, const int *cuts, const int *rs, const int *pols,
                           const uint8_t *rcs, int b, int M, char policy)
{
    uint16_t *fr = malloc((size_t)D->nodes * 2 * sizeof *fr);
    int *used = calloc((size_t)D->nodes, sizeof *used);
    int *devs = malloc((size_t)D->G * sizeof *devs);
    pt_plan *p = NULL;
    if (!fr || !used || !devs)
        goto out;
    p = pu_plan_alloc(D->prof, S, cuts, PT_SCHED_DAPPLE, b, M, D->optim);
    if (!p)
        goto out;
    p->policy = policy;
    for (int n = 0; n < D->nodes; n++)
        fr[n] = (uint16_t)D->node_size[n];
    int bnode = -1;
    const uint64_t low = (1ULL << 24) - 1;
    for (int s = S - 1; s >= 0; s--) {
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
        p->stages[s].recompute = rcs ? rcs[s] : 0;
        memcpy(fr, nf, (size_t)D->nodes * sizeof *fr);
        bnode = a.single_node;
    }
out:
    free(fr);
    free(used);
    free(devs);
    return p;
}

/* The plan of the chain of decisions ending at entry `fin`. */
static pt_plan *build_plan(dapple *D, int fin)
{
    int S = 0;
    for (int e = fin; e >= 0 && D->e_parent[e] >= 0; e = D->e_parent[e])
        S++;
    if (S < 1)
        return NULL;
    int *cuts = malloc((size_t)(S + 1) * sizeof *cuts);
    int *rs = malloc((size_t)S * sizeof *rs), *pols = malloc((size_t)S * sizeof *pols);
    uint8_t *rcs = malloc((size_t)S);
    pt_plan *p = NULL;
    if (cuts && rs && pols && rcs) {
        int s = 0;
        for (int e = fin; s < S; e = D->e_parent[e], s++) {
            cuts[s] = D->e_first[e];
            rs[s] = D->e_r[e];
            pols[s] = D->e_pol[e];
            rcs[s] = D->e_rc[e];
        }
        cuts[S] = D->N;
        p = place_plan(D, S, cuts, rs, pols, rcs, D->b, D->M, D->policy);
    }
    free(rcs);
    free(cuts);
    free(rs);
    free(pols);
    return p;
}

/* Whether every stage fits with the DP's convention (largest share of rows
 * against the smallest memory of its devices) under policy `policy`, turning
 * recomputation on for each stage that fits only with it, as the DP does. */
static int plan_fits(const dapple *D, pt_plan *p, char policy)
{
    for (int s = 0; s < p->stage_count; s++) {
        pt_stage *st = &p->stages[s];
        int64_t lim = D->mem_override > 0 ? D->mem_override : pu_stage_min_memory(D->topo, st);
        st->recompute = 0;
        for (int rc = 0; rc <= 1; rc++) {
            int64_t mem =
                pu_stage_memory(D->cost, PT_SCHED_DAPPLE, policy, p->stage_count, s, st->first,
                                st->last, pu_rows_max(p->microbatch_size, st->replica_count),
                                p->microbatch_count, rc, D->optim);
            if (mem <= lim)
                break;
            if (rc == 1)
                return 0;
            st->recompute = 1;
        }
    }
    return 1;
}

/* Keeps plan (owned; NULL is ignored) among the final candidates, dropping
 * the one with the largest bound when full; freed at once in a feasibility
 * search. 0 or PT_ENOMEM (plan freed). */
static int pool_push(dapple *D, pt_plan *plan)
{
    if (!plan)
        return 0;
    double L = INFINITY;
    int rc = D->feasibility ? 0 : pt_latency_critical_path(D->cost, plan, &L, NULL, NULL, NULL);
    if (D->feasibility || rc < 0) {
        pt_plan_free(&plan);
        return rc == PT_ENOMEM ? rc : 0;
    }
    if (D->npool == DAPPLE_POOL) {
        int worst = 0;
        for (int i = 1; i < D->npool; i++)
            if (D->pool_L[i] > D->pool_L[worst])
                worst = i;
        if (D->pool_L[worst] <= L) {
            pt_plan_free(&plan);
            return 0;
        }
        pt_plan_free(&D->pool[worst]);
        D->pool[worst] = D->pool[--D->npool];
        D->pool_L[worst] = D->pool_L[D->npool];
    }
    D->pool[D->npool] = plan;
    D->pool_L[D->npool++] = L;
    return 0;
}

static void pool_clear(dapple *D)
{
    for (int i = 0; i < D->npool; i++)
        pt_plan_free(&D->pool[i]);
    D->npool = 0;
}

/* One run for micro-batch size mbs[i/2] and policy A (i even) or B; keeps
 * the plan when it beats the incumbent. */
static int run_one(dapple *D, const int *mbs, int i, int global_batch, pt_plan **best_plan)
{
    if (D->only_pol && (i % 2 ? 'B' : 'A') != D->only_pol)
        return 0;
    D->b = mbs[i / 2];
    D->policy = i % 2 ? 'B' : 'A';
    double before = D->inc;
    int rc = run_m(D, global_batch / D->b);
    if (rc < 0)
        return rc;
    if (D->inc < before && D->inc_entry >= 0) {
        pt_plan *p = build_plan(D, D->inc_entry);
        if (!p)
            return PT_ENOMEM;
        if (pool_push(D, *best_plan) < 0) {
            pt_plan_free(&p);
            return PT_ENOMEM;
        }
        *best_plan = p;
        /* the run's earlier improvements are candidates for the simulator too */
        for (int i = 0; i + 1 < D->nrun_fin && !D->feasibility; i++) {
            pt_plan *q = build_plan(D, D->run_fin[i]);
            if (!q || pool_push(D, q) < 0)
                return PT_ENOMEM;
        }
    }
    return 0;
}

/* Stage counts of the seeds: 1, 2, 3, 4, 6, 9, ... growing by half, and
 * Smax = min(layers, devices) last: one stage per device is the balanced
 * pipeline a large model needs (GPT-3's 196 layers do not split well into
 * the 63 stages the sequence reaches on 64 devices). */
static int seed_next_stages(int S, int Smax)
{
    int n = S < 4 ? S + 1 : S + S / 2;
    return S < Smax && n > Smax ? Smax : n;
}

/* Simple plans of the search's space, evaluated directly, as a first
 * incumbent: S balanced stages (seed_next_stages) each on G/S devices placed
 * Fresh First, for every micro-batch size and policy.
 * quick[run] gets each run's best. */
static int seed(dapple *D, const int *mbs, int nmb, int global_batch, pt_plan **best_plan,
                double *quick)
{
    int N = D->N, G = D->G, Smax = N < G ? N : G;
    int *cuts = malloc((size_t)(Smax + 1) * sizeof *cuts);
    int *rs = malloc((size_t)Smax * sizeof *rs), *pols = calloc((size_t)Smax, sizeof *pols);
    int rc = 0;
    if (!cuts || !rs || !pols)
        rc = PT_ENOMEM;
    for (int S = 1; S <= Smax && rc == 0; S = seed_next_stages(S, Smax)) {
        pu_balanced_partition(D->cost, N, S, NULL, 0, cuts, &rc);
        for (int i = 0; i < 2 * nmb && rc == 0; i++) {
            int b = mbs[i / 2], r = G / S < b ? G / S : b;
            char policy = i % 2 ? 'B' : 'A';
            if (D->only_pol && policy != D->only_pol)
                continue;
            if (r < 1)
                continue;
            for (int s = 0; s < S; s++) {
                rs[s] = r;
                pols[s] = POL_FF;
            }
            pt_plan *p = place_plan(D, S, cuts, rs, pols, NULL, b, global_batch / b, policy);
            if (!p) {
                rc = PT_ENOMEM;
                break;
            }
            double L = INFINITY;
            if (plan_fits(D, p, policy) &&
                pt_latency_critical_path(D->cost, p, &L, NULL, NULL, NULL) == 0) {
                if (L < quick[i])
                    quick[i] = L;
                if (L < D->inc) {
                    D->inc = L;
                    if (pool_push(D, *best_plan) < 0) {
                        rc = PT_ENOMEM;
                        break;
                    }
                    *best_plan = p;
                    p = NULL;
                }
            }
            pt_plan_free(&p);
        }
    }
    free(cuts);
    free(rs);
    free(pols);
    return rc;
}

/* Runs the DP over every micro-batch size and policy; on success *best_plan
 * is the best plan. A first pass keeping one entry per state finds a good
 * plan fast; the exact pass then runs the sizes in the order of that pass's
 * results, pruned by the plan it found (which it keeps unless it beats it). */
static int search(dapple *D, const int *mbs, int nmb, int global_batch, pt_plan **best_plan)
{
    *best_plan = NULL;
    D->inc = INFINITY;
    D->found = 0;
    int runs = 2 * nmb, order[2 * PT_PLANNER_MB_CHOICES_MAX];
    double quick[2 * PT_PLANNER_MB_CHOICES_MAX];
    for (int i = 0; i < runs; i++) {
        order[i] = i;
        quick[i] = INFINITY;
    }
    int rc = 0;
    if (!D->feasibility) {
        rc = seed(D, mbs, nmb, global_batch, best_plan, quick);
        for (int i = 1; i < runs; i++)
            for (int j = i; j > 0 && quick[order[j]] < quick[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        D->greedy = 1;
        /* the one-plan-per-state pass within the work budget too: past it the
         * rest of the search keeps the scale tier's beam of states per layer */
        D->eval_cap = D->beam > 0 ? 0 : DAPPLE_EXACT_BUDGET;
        for (int k = 0; k < runs && rc == 0; k++) {
            int i = order[k];
            rc = run_one(D, mbs, i, global_batch, best_plan);
            if (D->run_best < quick[i])
                quick[i] = D->run_best;
            if (D->budget_cut) {
                D->budget_cut = 0;
                D->eval_cap = 0;
                D->beam = DAPPLE_SCALE_BEAM;
                D->budget_beam = 1;
            }
        }
        D->greedy = 0;
        /* best first */
        for (int i = 1; i < runs; i++)
            for (int j = i; j > 0 && quick[order[j]] < quick[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    }
    /* on large instances the beam already makes the result a heuristic: the
     * one-entry pass is the search (and the feasibility search uses it too) */
    D->greedy = D->beam > 0;
    /* the exact pass runs within a work budget (the greedy pass's plan, and
     * every run's improvements, stay candidates) */
    D->eval_cap = D->feasibility ? 0 : D->evaluated + DAPPLE_EXACT_BUDGET;
    for (int i = 0; i < runs && rc == 0 && !D->budget_cut && !(D->beam > 0 && !D->feasibility);
         i++) {
        rc = run_one(D, mbs, order[i], global_batch, best_plan);
        if (D->feasibility && D->found)
            break;
    }
    D->greedy = 0;
    if (rc < 0)
        pt_plan_free(best_plan);
    return rc;
}

/* Nothing fits: the smallest uniform memory under which a plan exists, by
 * doubling from the limit then bisecting to DAPPLE_NEED_REL_TOL (0: none up
 * to 2^62), into *need. 0 or PT_ENOMEM. */
static int memory_need(dapple *D, const int *mbs, int nmb, int global_batch, int64_t limit,
                       int64_t *need)
{
    int64_t lo = limit, hi = limit > 0 ? limit : 1;
    int feasible = 0, rc = 0;
    pt_plan *probe = NULL;
    D->feasibility = 1;
    for (int it = 0; it < 62 && rc == 0 && !feasible && hi < INT64_MAX / 2; it++) {
        hi *= 2;
        D->mem_override = hi;
        rc = search(D, mbs, nmb, global_batch, &probe);
        pt_plan_free(&probe);
        feasible = rc == 0 && D->found;
    }
    while (rc == 0 && feasible && (double)(hi - lo) > DAPPLE_NEED_REL_TOL * (double)hi) {
        int64_t mid = lo + (hi - lo) / 2;
        D->mem_override = mid;
        rc = search(D, mbs, nmb, global_batch, &probe);
        pt_plan_free(&probe);
        if (D->found)
            hi = mid;
        else
            lo = mid;
    }
    *need = feasible ? hi : 0;
    return rc;
}

/* The pool, best closed form first. */
static void pool_sort(dapple *D)
{
    for (int i = 1; i < D->npool; i++)
        for (int j = i; j > 0 && D->pool_L[j] < D->pool_L[j - 1]; j--) {
            pt_plan *tp = D->pool[j];
            double tl = D->pool_L[j];
            D->pool[j] = D->pool[j - 1];
            D->pool_L[j] = D->pool_L[j - 1];
            D->pool[j - 1] = tp;
            D->pool_L[j - 1] = tl;
        }
}

/* Appends where the plan came from (the search's regime) to report->why. */
static void why_regime(pt_planner_report *report, const dapple *D)
{
    if (D->G > DAPPLE_ALL_R_DEVICES)
        pu_why(report, "; large cluster: replica counts 1,2,3,4,6,8,12,..., fresh/append-first "
                       "placement");
    if (D->cuts_limited)
        pu_why(report, "; %d candidate stage boundaries",
               D->G > DAPPLE_ALL_R_DEVICES ? DAPPLE_SCALE_CUTS : DAPPLE_MAX_CUTS);
    if (D->budget_beam)
        pu_why(report, "; the exact search's work budget ran out: a beam of states per layer "
                       "after it");
    if (D->budget_cut)
        pu_why(report,
               "; the exact search stopped after %lld stages evaluated: the best plan found, not "
               "proven optimal",
               D->eval_cap);
    if (D->beam > 0)
        pu_why(report,
               "; large instance: one plan per state and at most %d states per layer, so the best "
               "plan found, not proven optimal",
               D->beam);
}

static void dapple_report(pt_planner_report *report, const dapple *D, const pt_cost *cost,
                          const pt_plan *plan, int nmb, double T, double bound, int simulated)
{
    double acr = pt_latency_comm_ratio(cost, plan), L = 0;
    int pivot = 0, ending = 0;
    pt_latency_critical_path(cost, plan, &L, &pivot, &ending, NULL);
    report->objective_s = T;
    report->bound_s = bound;
    report->iter_s = T;
    report->peak_memory_bytes = pu_plan_peak_memory(cost, plan, NULL);
    report->evaluated = D->evaluated;
    pu_why(report, "M=%d micro-batches of %d (tried %d sizes); %d stage%s, replicas",
           plan->microbatch_count, plan->microbatch_size, nmb, plan->stage_count,
           plan->stage_count > 1 ? "s" : "");
    for (int s = 0; s < plan->stage_count; s++)
        pu_why(report, "%s%d", s ? ":" : " ", plan->stages[s].replica_count);
    pu_why(report,
           "; simulated best of %d final candidates (search bound %.3f ms, this plan's critical "
           "path %.3f ms",
           simulated, bound * 1e3, L * 1e3);
    if (pivot % 2 == 0)
        pu_why(report, ", pivot stage %d", pivot / 2);
    else
        pu_why(report, ", pivot the transfer between stages %d and %d", pivot / 2, pivot / 2 + 1);
    pu_why(report, ", ending at stage %d's all-reduce and step)", ending);
    pu_why(report, "; communication/computation %.2f", acr);
    pu_why_kinds(report);
    pu_why_recompute(report, cost, (pt_plan *)plan);
    why_regime(report, D);
}

/* The final candidates (the DP's best and the incumbents before it),
 * simulated in the order of their closed form (pu_pick): *out the fastest
 * that fits. 0 or a PT_E* code. */
static int pick_final(dapple *D, const pt_cost *cost, const pt_planner_opts *opts, pt_plan *plan,
                      int nmb, pt_plan **out, pt_planner_report *report)
{
    double bound = D->inc;
    if (pool_push(D, plan) < 0)
        return PT_ENOMEM;
    pool_sort(D);
    pu_scorer sc;
    if (pu_scorer_init(&sc, cost) < 0)
        return PT_ENOMEM;
    sc.only_policy = opts->dapple_policy;
    double T = INFINITY;
    int simulated = 0;
    int bi = pu_pick(&sc, D->pool, D->pool_L, D->npool, opts->kinds, PT_SCHED_DAPPLE, report, &T,
                     &simulated);
    pu_scorer_release(&sc);
    if (bi < 0)
        return bi;
    *out = D->pool[bi];
    D->pool[bi] = NULL;
    if (report)
        dapple_report(report, D, cost, *out, nmb, T, bound, simulated);
    return 0;
}

int pt_planner_dapple(const pt_profile *profile, const pt_topology *topo, int global_batch,
                      const pt_planner_opts *opts, pt_plan **out, pt_planner_report *report,
                      pt_error *err)
{
    if (opts->objective == PT_OBJECTIVE_DAPPLE)
        return pt_planner_dapple_paper(profile, topo, global_batch, opts, out, report, err);
    *out = NULL;
    double t0 = pt_clock_s();
    pu_report_begin(report, "dapple",
                    "simulated iteration time (search bound: DAPPLE's critical path)");
    pt_cost *cost = NULL;
    int rc = pt_cost_new(profile, topo, &cost, err);
    if (rc < 0)
        return rc;
    dapple D;
    int mbs[PT_PLANNER_MB_CHOICES_MAX], nmb = 0;
    pt_plan *plan = NULL;
    if ((rc = dapple_init(&D, cost, topo, opts->optim)) == 0) {
        D.only_pol = opts->dapple_policy;
        nmb = pu_microbatch_candidates(
            opts, global_batch,
            topo->device_count > DAPPLE_ALL_R_DEVICES ? DAPPLE_SCALE_MB_CHOICES : DAPPLE_MB_CHOICES,
            mbs);
        rc = search(&D, mbs, nmb, global_batch, &plan);
    }
    if (rc < 0) {
        rc = pt_error_set(err, rc, "dapple: out of memory");
    } else if (!plan) {
        int64_t limit =
            opts->memory_limit_bytes > 0 ? opts->memory_limit_bytes : pu_topology_min_memory(topo);
        int64_t need = 0;
        rc = memory_need(&D, mbs, nmb, global_batch, limit, &need) < 0
                 ? pt_error_set(err, PT_ENOMEM, "dapple: out of memory")
                 : pu_error_nofit(err, report, "dapple", limit, need,
                                  "every partition, replication and placement over the "
                                  "micro-batch sizes tried exceeds it");
    } else if ((rc = pick_final(&D, cost, opts, plan, nmb, out, report)) < 0) {
        rc = pt_error_set(err, rc, "dapple: simulating the candidates failed");
    }
    if (report)
        report->search_s = pt_clock_s() - t0;
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
