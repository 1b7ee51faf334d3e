/* The console's run data (see store.h). */
#include "tui/record/store.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/hash.h"

/* Steps back from the newest where metrics of the same step are looked for. */
#define STEP_MERGE_WINDOW (4 * PT_MSG_FOLD_MAX) /* replicas fold the same steps apart */

/* An event in the ring as it arrived (times on the console clock) and the
 * plan generation it ran under: the store keeps the decoded event itself,
 * and pt_store_timeline turns it into a timeline span. */
typedef struct ring_event {
    pt_msg_event ev;
    int64_t gen;
} ring_event;

struct pt_store {
    uint64_t version;
    ring_event *ring;
    int64_t ring_cap, ring_head, ring_len; /* head: next write */
    int64_t last_step;
    pt_store_fold *folds; /* ring of PT_STORE_FOLDS, made at the first fold */
    int64_t fold_head, fold_len;
    pt_store_step *steps;
    int64_t step_n, step_cap;
    pt_store_mem *mem; /* ring */
    int64_t mem_head, mem_len;
    pt_store_mem *mem_latest; /* per (stage, replica) seen */
    int mem_latest_n, mem_latest_cap;
    /* mem_latest by (stage, replica): open addressing as agent_slots, so a
     * replay of many replicas' metrics stays linear */
    int *mem_slots;
    int mem_slot_n;
    pt_store_agent *agents;
    int agent_n, agent_cap;
    /* agent index by id: open addressing, slots hold index + 1 (0 empty),
     * at most half full, so a record of many agents replays in linear time */
    int *agent_slots;
    int agent_slot_n; /* a power of two, or 0 */
    pt_plan *plan;
    int64_t gen;
    pt_profile *cal_profile; /* the newest calibration */
    pt_topology *cal_topo;
    int64_t cal_gen;
    int cal_count;
    char note[PT_STORE_NOTE_MAX];
    uint64_t note_seq;
    int64_t now_ns;
    pt_store_counts counts;
};

int pt_store_new(int64_t span_cap, pt_store **out)
{
    if (!out)
        return PT_EINVAL;
    *out = NULL;
    pt_store *s = calloc(1, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    s->ring_cap = span_cap > 0 ? span_cap : PT_STORE_SPANS_DEFAULT;
    s->ring = malloc(sizeof *s->ring * (size_t)s->ring_cap);
    s->mem = malloc(sizeof *s->mem * PT_STORE_MEM_SAMPLES);
    if (!s->ring || !s->mem) {
        pt_store_free(&s);
        return PT_ENOMEM;
    }
    s->last_step = -1;
    s->version = 1;
    *out = s;
    return 0;
}

void pt_store_free(pt_store **s_p)
{
    if (!s_p || !*s_p)
        return;
    pt_store *s = *s_p;
    free(s->ring);
    free(s->folds);
    free(s->steps);
    free(s->mem);
    free(s->mem_latest);
    free(s->mem_slots);
    free(s->agents);
    free(s->agent_slots);
    pt_plan_free(&s->plan);
    pt_profile_free(&s->cal_profile);
    pt_topology_free(&s->cal_topo);
    free(s);
    *s_p = NULL;
}

void pt_store_set_calibration(pt_store *s, pt_profile *profile, pt_topology *topo, int64_t gen)
{
    if (!profile || !topo) {
        pt_profile_free(&profile);
        pt_topology_free(&topo);
        return;
    }
    pt_profile_free(&s->cal_profile);
    pt_topology_free(&s->cal_topo);
    s->cal_profile = profile;
    s->cal_topo = topo;
    s->cal_gen = gen;
    s->cal_count++;
    s->version++;
}

int pt_store_calibration(const pt_store *s, const pt_profile **profile, const pt_topology **topo,
                         int64_t *gen)
{
    if (profile)
        *profile = s->cal_count ? s->cal_profile : NULL;
    if (topo)
        *topo = s->cal_count ? s->cal_topo : NULL;
    if (gen)
        *gen = s->cal_count ? s->cal_gen : -1;
    return s->cal_count;
}

void pt_store_reset(pt_store *s)
{
    s->ring_head = s->ring_len = 0;
    s->fold_head = s->fold_len = 0;
    s->last_step = -1;
    s->step_n = 0;
    s->mem_head = s->mem_len = 0;
    s->mem_latest_n = 0;
    if (s->mem_slots)
        memset(s->mem_slots, 0, sizeof *s->mem_slots * (size_t)s->mem_slot_n);
    s->agent_n = 0;
    if (s->agent_slots)
        memset(s->agent_slots, 0, sizeof *s->agent_slots * (size_t)s->agent_slot_n);
    pt_plan_free(&s->plan);
    s->gen = 0;
    pt_profile_free(&s->cal_profile);
    pt_topology_free(&s->cal_topo);
    s->cal_count = 0;
    s->note[0] = 0;
    s->now_ns = 0;
    memset(&s->counts, 0, sizeof s->counts);
    s->version++;
}

uint64_t pt_store_version(const pt_store *s)
{
    return s->version;
}

int pt_store_events(pt_store *s, const pt_msg_event *ev, int count, int64_t gen)
{
    int added = 0;
    for (int i = 0; i < count; i++) {
        const pt_msg_event *e = &ev[i];
        s->counts.events++;
        if (!pt_op_info_of(e->op)) { /* pt_msg_decode refuses these; other callers may not */
            s->counts.skipped++;
            continue;
        }
        ring_event *r = &s->ring[s->ring_head];
        r->ev = *e;
        r->gen = gen;
        if (++s->ring_head == s->ring_cap)
            s->ring_head = 0;
        if (s->ring_len < s->ring_cap)
            s->ring_len++;
        if (e->step > s->last_step && gen >= s->gen) /* not a late frame's */
            s->last_step = e->step;
        added++;
    }
    if (added) {
        s->counts.kept = (uint64_t)s->ring_len;
        s->version++;
    }
    return added;
}

void pt_store_folded(pt_store *s, const pt_store_fold *f)
{
    s->counts.folds++;
    if (!s->folds && !(s->folds = malloc(sizeof *s->folds * PT_STORE_FOLDS))) {
        s->counts.folds_lost++;
        return;
    }
    s->folds[s->fold_head] = *f;
    s->fold_head = (s->fold_head + 1) % PT_STORE_FOLDS;
    if (s->fold_len < PT_STORE_FOLDS)
        s->fold_len++;
    if (f->step > s->last_step)
        s->last_step = f->step;
    s->version++;
}

/* The slot of (stage, replica) in mem_slots: the one holding it, or the
 * empty one it would go to. */
static int mem_slot(const pt_store *s, int stage, int replica)
{
    unsigned mask = (unsigned)s->mem_slot_n - 1;
    unsigned k = ((unsigned)stage * 2654435761u ^ (unsigned)replica * 40503u) & mask;
    while (s->mem_slots[k] && (s->mem_latest[s->mem_slots[k] - 1].stage != stage ||
                               s->mem_latest[s->mem_slots[k] - 1].replica != replica))
        k = (k + 1) & mask;
    return (int)k;
}

static pt_store_mem *mem_latest_slot(pt_store *s, int stage, int replica)
{
    if (s->mem_slot_n) {
        int v = s->mem_slots[mem_slot(s, stage, replica)];
        if (v)
            return &s->mem_latest[v - 1];
    }
    if (s->mem_latest_n == s->mem_latest_cap) {
        int cap = s->mem_latest_cap ? s->mem_latest_cap * 2 : 16;
        pt_store_mem *m = realloc(s->mem_latest, sizeof *m * (size_t)cap);
        if (!m)
            return NULL;
        s->mem_latest = m;
        s->mem_latest_cap = cap;
    }
    if (2 * (s->mem_latest_n + 1) > s->mem_slot_n) {
        int n = s->mem_slot_n ? 2 * s->mem_slot_n : 64;
        int *slots = calloc((size_t)n, sizeof *slots);
        if (!slots)
            return NULL;
        free(s->mem_slots);
        s->mem_slots = slots;
        s->mem_slot_n = n;
        for (int i = 0; i < s->mem_latest_n; i++)
            s->mem_slots[mem_slot(s, s->mem_latest[i].stage, s->mem_latest[i].replica)] = i + 1;
    }
    pt_store_mem *m = &s->mem_latest[s->mem_latest_n++];
    memset(m, 0, sizeof *m);
    m->stage = stage;
    m->replica = replica;
    s->mem_slots[mem_slot(s, stage, replica)] = s->mem_latest_n;
    return m;
}

/* The step's entry, made when new, with m's loss and rates folded in
 * (replicas report the same step); NULL when out of memory. */
static pt_store_step *step_entry(pt_store *s, const pt_msg_metrics *m, int64_t gen, int64_t t_ns)
{
    pt_store_step *st = NULL;
    for (int64_t i = s->step_n - 1; i >= 0 && i >= s->step_n - STEP_MERGE_WINDOW; i--)
        if (s->steps[i].step == m->step && s->steps[i].gen == gen) {
            st = &s->steps[i];
            break;
        }
    if (!st) {
        if (s->step_n == s->step_cap) {
            int64_t cap = s->step_cap ? s->step_cap * 2 : 256;
            pt_store_step *n = realloc(s->steps, sizeof *n * (size_t)cap);
            if (!n)
                return NULL;
            s->steps = n;
            s->step_cap = cap;
        }
        st = &s->steps[s->step_n++];
        memset(st, 0, sizeof *st);
        st->step = m->step;
        st->gen = gen;
        st->t_ns = t_ns;
        st->loss = NAN;
    }
    if (!isnan(m->loss))
        st->loss = m->loss;
    /* every replica sees the same pipeline throughput; average what they say */
    st->samples_per_s = (st->samples_per_s * st->reports + m->samples_per_s) / (st->reports + 1);
    if (m->iter_ms > st->iter_ms)
        st->iter_ms = m->iter_ms;
    st->reports++;
    return st;
}

void pt_store_metrics(pt_store *s, const pt_msg_metrics *m, int64_t gen, int64_t t_ns)
{
    s->counts.metrics++;
    /* a fold (docs/protocol.md, "Telemetry thinning"): each of its steps
     * gets its entry, with its own loss; memory is as of the last */
    for (int k = 0; k + 1 < m->steps && k < PT_MSG_FOLD_MAX; k++) {
        pt_msg_metrics one = *m;
        one.steps = 1;
        one.step = m->step - m->steps + 1 + k;
        one.loss = m->losses[k];
        if (!step_entry(s, &one, gen, t_ns))
            return;
    }
    if (!step_entry(s, m, gen, t_ns))
        return;

    pt_store_mem *x = &s->mem[s->mem_head];
    x->t_ns = t_ns;
    x->step = m->step;
    x->stage = m->stage;
    x->replica = m->replica;
    memcpy(x->cur, m->mem_cur, sizeof x->cur);
    memcpy(x->peak, m->mem_peak, sizeof x->peak);
    x->total_cur = m->total_cur;
    x->total_peak = m->total_peak;
    /* a late frame of an older plan (docs/protocol.md: telemetry of an older
     * generation is recorded) is in the samples, not the stage's newest: the
     * new plan's stage of that number may be another layer range */
    pt_store_mem *latest = gen >= s->gen ? mem_latest_slot(s, m->stage, m->replica) : NULL;
    if (latest)
        *latest = *x;
    if (++s->mem_head == PT_STORE_MEM_SAMPLES)
        s->mem_head = 0;
    if (s->mem_len < PT_STORE_MEM_SAMPLES)
        s->mem_len++;
    if (t_ns > s->now_ns)
        s->now_ns = t_ns;
    s->version++;
}

void pt_store_metrics_folded(pt_store *s, const pt_msg_metrics *m, int reports, int64_t gen,
                             int64_t t_ns)
{
    pt_msg_metrics one = *m;
    one.steps = 1;
    pt_store_step *st = reports > 0 ? step_entry(s, &one, gen, t_ns) : NULL;
    if (!st)
        return;
    /* step_entry weighed the throughput as one report: weigh it as `reports` */
    int before = st->reports - 1;
    double sum = st->samples_per_s * (before + 1) - m->samples_per_s;
    st->reports += reports - 1;
    st->samples_per_s = (sum + m->samples_per_s * reports) / st->reports;
    s->counts.metrics += (uint64_t)reports;
    if (t_ns > s->now_ns)
        s->now_ns = t_ns;
    s->version++;
}

int pt_store_set_plan(pt_store *s, const pt_plan *plan, int64_t gen)
{
    pt_plan *c = pt_plan_clone(plan);
    if (!c)
        return PT_ENOMEM;
    pt_plan_free(&s->plan);
    s->plan = c;
    s->gen = gen;
    s->version++;
    return 0;
}

/* The slot of id: the one holding it, or the empty one it would go to. */
static int id_slot(const pt_store *s, const char *id)
{
    unsigned mask = (unsigned)s->agent_slot_n - 1;
    unsigned k = (unsigned)pt_hash_str(id) & mask;
    while (s->agent_slots[k] && strcmp(s->agents[s->agent_slots[k] - 1].id, id) != 0)
        k = (k + 1) & mask;
    return (int)k;
}

/* Makes room for one more agent in the index. 0 or PT_ENOMEM. */
static int index_reserve(pt_store *s)
{
    if (2 * (s->agent_n + 1) <= s->agent_slot_n)
        return 0;
    int n = s->agent_slot_n ? 2 * s->agent_slot_n : 64;
    int *slots = calloc((size_t)n, sizeof *slots);
    if (!slots)
        return PT_ENOMEM;
    free(s->agent_slots);
    s->agent_slots = slots;
    s->agent_slot_n = n;
    for (int i = 0; i < s->agent_n; i++)
        s->agent_slots[id_slot(s, s->agents[i].id)] = i + 1;
    return 0;
}

int pt_store_find_agent(const pt_store *s, const char *id)
{
    if (!s->agent_slot_n)
        return -1;
    int v = s->agent_slots[id_slot(s, id)];
    return v ? v - 1 : -1;
}

int pt_store_set_agent(pt_store *s, const pt_store_agent *a)
{
    int i = pt_store_find_agent(s, a->id);
    if (i < 0) {
        if (s->agent_n == s->agent_cap) {
            int cap = s->agent_cap ? s->agent_cap * 2 : 16;
            pt_store_agent *n = realloc(s->agents, sizeof *n * (size_t)cap);
            if (!n)
                return PT_ENOMEM;
            s->agents = n;
            s->agent_cap = cap;
        }
        if (index_reserve(s) < 0)
            return PT_ENOMEM;
        i = s->agent_n++;
        /* a new row is a change; comparing it would read the uninitialised
         * slot realloc gave (valgrind memcheck) */
        s->agents[i] = *a;
        s->agent_slots[id_slot(s, a->id)] = i + 1;
        s->version++;
        return 0;
    }
    if (memcmp(&s->agents[i], a, sizeof *a)) {
        s->agents[i] = *a;
        s->version++;
    }
    return 0;
}

void pt_store_stage_heard(pt_store *s, int stage, int64_t step, int64_t t_ns)
{
    int changed = 0;
    for (int i = 0; i < s->agent_n; i++) {
        pt_store_agent *a = &s->agents[i];
        if (a->stage != stage || a->step >= step)
            continue;
        a->step = step;
        a->last_heard_ns = t_ns;
        changed = 1;
    }
    s->version += (uint64_t)changed;
}

void pt_store_note(pt_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->note, sizeof s->note, fmt, ap);
    va_end(ap);
    s->note_seq++;
    s->version++;
}

uint64_t pt_store_note_seq(const pt_store *s)
{
    return s->note_seq;
}

void pt_store_set_now(pt_store *s, int64_t now_ns)
{
    if (now_ns != s->now_ns) {
        s->now_ns = now_ns;
        s->version++;
    }
}

const pt_plan *pt_store_plan(const pt_store *s)
{
    return s->plan;
}
int64_t pt_store_generation(const pt_store *s)
{
    return s->gen;
}
int pt_store_agent_count(const pt_store *s)
{
    return s->agent_n;
}
int pt_store_simulated_agents(const pt_store *s)
{
    int n = 0;
    for (int i = 0; i < s->agent_n; i++)
        n += !strcmp(s->agents[i].device, PT_MSG_CAP_SIMULATED);
    return n;
}
const pt_store_agent *pt_store_agent_at(const pt_store *s, int i)
{
    return i >= 0 && i < s->agent_n ? &s->agents[i] : NULL;
}
int64_t pt_store_step_count(const pt_store *s)
{
    return s->step_n;
}
const pt_store_step *pt_store_step_at(const pt_store *s, int64_t i)
{
    return i >= 0 && i < s->step_n ? &s->steps[i] : NULL;
}
int64_t pt_store_mem_count(const pt_store *s)
{
    return s->mem_len;
}
const pt_store_mem *pt_store_mem_at(const pt_store *s, int64_t i)
{
    if (i < 0 || i >= s->mem_len)
        return NULL;
    int64_t first = (s->mem_head - s->mem_len + PT_STORE_MEM_SAMPLES) % PT_STORE_MEM_SAMPLES;
    return &s->mem[(first + i) % PT_STORE_MEM_SAMPLES];
}
const pt_store_mem *pt_store_mem_latest(const pt_store *s, int stage, int replica)
{
    if (!s->mem_slot_n)
        return NULL;
    int v = s->mem_slots[mem_slot(s, stage, replica)];
    return v ? &s->mem_latest[v - 1] : NULL;
}
const char *pt_store_last_note(const pt_store *s)
{
    return s->note;
}
int64_t pt_store_now(const pt_store *s)
{
    return s->now_ns;
}
void pt_store_counts_get(const pt_store *s, pt_store_counts *out)
{
    *out = s->counts;
}
int64_t pt_store_last_step(const pt_store *s)
{
    return s->last_step;
}

/* The i-th folded step kept, oldest first. */
static const pt_store_fold *fold_at(const pt_store *s, int64_t i)
{
    return &s->folds[(s->fold_head - s->fold_len + i + PT_STORE_FOLDS) % PT_STORE_FOLDS];
}

static int in_view(const pt_store *s, int64_t step, int64_t gen, int64_t first, int64_t last,
                   int current_gen_only)
{
    return step >= first && step <= last && (!current_gen_only || gen == s->gen);
}

/* The timeline's rows of spans and its origin (the earliest start of what
 * pt_store_timeline draws; a fold starts where its step's first event did). */
static int timeline_rows(const pt_store *s, int64_t first, int64_t last, int current_gen_only,
                         pt_tline *tl, int64_t *origin)
{
    int64_t start = (s->ring_head - s->ring_len + s->ring_cap) % s->ring_cap;
    for (int64_t i = 0; i < s->ring_len; i++) {
        const ring_event *q = &s->ring[(start + i) % s->ring_cap];
        if (!in_view(s, q->ev.step, q->gen, first, last, current_gen_only))
            continue;
        if (pt_tline_row(tl, q->ev.stage, q->ev.replica) < 0)
            return PT_ENOMEM;
        if (q->ev.start_ns < *origin)
            *origin = q->ev.start_ns;
    }
    for (int64_t i = 0; i < s->fold_len; i++) {
        const pt_store_fold *f = fold_at(s, i);
        if (!in_view(s, f->step, f->gen, first, last, current_gen_only))
            continue;
        if (f->start_ns < *origin)
            *origin = f->start_ns;
    }
    return 0;
}

/* A (stage, step, replica) the timeline has spans of. */
typedef struct span_key {
    int64_t step;
    int stage, replica;
} span_key;

static int key_cmp(const void *pa, const void *pb)
{
    const span_key *a = pa, *b = pb;
    if (a->stage != b->stage)
        return a->stage < b->stage ? -1 : 1;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return (a->replica > b->replica) - (a->replica < b->replica);
}

/* 1 when the sorted keys k[0..n) hold (stage, step) of any replica
 * (replica PT_TL_ALL_REPLICAS) or of that replica. */
static int key_has(const span_key *k, int64_t n, int stage, int64_t step, int replica)
{
    span_key want = {step, stage, replica < 0 ? INT32_MIN : replica};
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (key_cmp(&k[mid], &want) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && k[lo].stage == stage && k[lo].step == step &&
           (replica < 0 || k[lo].replica == replica);
}

/* The (stage, step, replica) of tl's spans, sorted, into *out (caller
 * frees): a folded step is drawn only where its spans are not (a record's
 * tail window holds both). 0 or PT_ENOMEM. */
static int span_keys(const pt_tline *tl, span_key **out, int64_t *n)
{
    *n = 0;
    *out = malloc(sizeof **out * (size_t)(tl->count ? tl->count : 1));
    if (!*out)
        return PT_ENOMEM;
    for (int64_t i = 0; i < tl->count; i++) {
        const pt_tl_span *sp = &tl->spans[i];
        (*out)[(*n)++] = (span_key){sp->step, tl->rows[sp->row].stage, tl->rows[sp->row].replica};
    }
    qsort(*out, (size_t)*n, sizeof **out, key_cmp);
    return 0;
}

/* The folded steps of the view that have no spans, into tl. */
static int timeline_folds(const pt_store *s, int64_t first, int64_t last, int current_gen_only,
                          int64_t origin, pt_tline *tl)
{
    span_key *keys = NULL;
    int64_t nk = 0;
    if (s->fold_len && span_keys(tl, &keys, &nk) < 0)
        return PT_ENOMEM;
    int rc = 0;
    for (int64_t i = 0; i < s->fold_len && rc == 0; i++) {
        const pt_store_fold *f = fold_at(s, i);
        if (!in_view(s, f->step, f->gen, first, last, current_gen_only) ||
            key_has(keys, nk, f->stage, f->step, f->replica))
            continue;
        int row = pt_tline_row(tl, f->stage, f->replica);
        if (row < 0) {
            rc = PT_ENOMEM;
            break;
        }
        pt_tl_fold tf = {(double)(f->start_ns - origin) * 1e-9,
                         (double)(f->end_ns - origin) * 1e-9,
                         (double)f->busy_min_ns * 1e-9,
                         (double)f->busy_median_ns * 1e-9,
                         (double)f->busy_max_ns * 1e-9,
                         f->step,
                         row,
                         f->replicas,
                         f->straggler};
        rc = pt_tline_add_fold(tl, &tf);
    }
    free(keys);
    return rc;
}

int pt_store_timeline(const pt_store *s, int64_t first_step, int64_t last_step,
                      int current_gen_only, pt_tline *tl, int64_t *origin_ns)
{
    pt_tline_clear(tl);
    if (last_step < 0)
        last_step = s->last_step;
    int64_t origin = INT64_MAX;
    if (timeline_rows(s, first_step, last_step, current_gen_only, tl, &origin) < 0)
        return PT_ENOMEM;
    int64_t start = (s->ring_head - s->ring_len + s->ring_cap) % s->ring_cap;
    for (int64_t i = 0; i < s->ring_len; i++) {
        const ring_event *q = &s->ring[(start + i) % s->ring_cap];
        const pt_msg_event *r = &q->ev;
        if (!in_view(s, r->step, q->gen, first_step, last_step, current_gen_only))
            continue;
        pt_tl_span sp;
        sp.start = (double)(r->start_ns - origin) * 1e-9;
        sp.end = (double)(r->end_ns - origin) * 1e-9;
        sp.row = pt_tline_find_row(tl, r->stage, r->replica);
        sp.mb = r->mb;
        sp.step = r->step;
        sp.bytes = r->bytes;
        sp.op = (uint8_t)r->op;
        sp.lane = (uint8_t)pt_op_lane(r->op);
        if (pt_tline_add(tl, &sp) < 0)
            return PT_ENOMEM;
    }
    if (timeline_folds(s, first_step, last_step, current_gen_only, origin, tl) < 0)
        return PT_ENOMEM;
    if (origin_ns)
        *origin_ns = origin == INT64_MAX ? 0 : origin;
    return 0;
}

/* A copy of n elements of size sz (NULL for none); *ok cleared on no memory. */
static void *dup_array(const void *src, size_t n, size_t sz, int *ok)
{
    if (!src || n == 0)
        return NULL;
    void *d = malloc(n * sz);
    if (!d)
        *ok = 0;
    else
        memcpy(d, src, n * sz);
    return d;
}

int pt_store_clone(const pt_store *s, pt_store **out)
{
    *out = NULL;
    pt_store *c = malloc(sizeof *c);
    if (!c)
        return PT_ENOMEM;
    *c = *s;
    int ok = 1;
    c->ring = dup_array(s->ring, (size_t)s->ring_cap, sizeof *s->ring, &ok);
    c->folds = dup_array(s->folds, s->folds ? PT_STORE_FOLDS : 0, sizeof *s->folds, &ok);
    c->steps = dup_array(s->steps, (size_t)s->step_cap, sizeof *s->steps, &ok);
    c->mem = dup_array(s->mem, PT_STORE_MEM_SAMPLES, sizeof *s->mem, &ok);
    c->mem_latest = dup_array(s->mem_latest, (size_t)s->mem_latest_cap, sizeof *s->mem_latest, &ok);
    c->agents = dup_array(s->agents, (size_t)s->agent_cap, sizeof *s->agents, &ok);
    c->agent_slots = dup_array(s->agent_slots, (size_t)s->agent_slot_n, sizeof(int), &ok);
    c->mem_slots = dup_array(s->mem_slots, (size_t)s->mem_slot_n, sizeof(int), &ok);
    c->plan = NULL;
    c->cal_profile = NULL;
    c->cal_topo = NULL;
    if (ok && s->plan && !(c->plan = pt_plan_clone(s->plan)))
        ok = 0;
    if (ok && s->cal_profile) {
        char *pj = pt_profile_to_json(s->cal_profile), *tj = pt_topology_to_json(s->cal_topo);
        ok = pj && tj && pt_profile_parse(pj, "calibration", &c->cal_profile, NULL) == 0 &&
             pt_topology_parse(tj, "calibration", &c->cal_topo, NULL) == 0;
        free(pj);
        free(tj);
    }
    if (!ok || !c->ring || !c->mem) {
        pt_store_free(&c);
        return PT_ENOMEM;
    }
    *out = c;
    return 0;
}
