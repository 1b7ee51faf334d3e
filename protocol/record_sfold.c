/* The writer's folding per stage (record version 4; docs/formats.md, "Run
 * record", "Folded stages"): outside the full-detail windows, the op events
 * and metrics of all replicas of a stage of many replicas become one "sfold"
 * line per step, which keeps what the timeline's band needs (each replica's
 * compute in the step: min, median, max, and which replica is the slowest)
 * and what the headline figures need (how many replicas reported, the
 * slowest iteration time, the loss). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/hash.h"
#include "protocol/json_util.h"
#include "protocol/record.h"
#include "protocol/record_internal.h"

#define SFOLD_OPEN 4 /* steps of one stage folded at once (replicas run a little apart) */
#define SFOLD_LAG  2 /* a step's line is written once a frame this many steps past it arrives */

/* One stage's step being folded. */
typedef struct sfold_acc {
    int open;
    int64_t step;
    int64_t event_frames, metric_frames, events;
    int64_t start_ns, end_ns;
    int64_t *busy; /* per replica: compute ns; -1: no events yet */
    double *iter;  /* iteration times reported, [0, niter) */
    int niter;
    double loss_sum, sps_sum;
    int loss_n;
    int64_t mem_peak;
    pt_record_fold_op ops[PT_OP_KIND_COUNT];
} sfold_acc;

/* A stage folded per stage. */
typedef struct sfold_stage {
    int replicas;                 /* in the plan; 0: not folded per stage */
    char (*agent)[PT_MSG_ID_MAX]; /* per replica, from its frames */
    int64_t dropped;              /* gaps seen since the stage's last line */
    sfold_acc acc[SFOLD_OPEN];
} sfold_stage;

/* An agent's newest sequence number. */
typedef struct seq_slot {
    char agent[PT_MSG_ID_MAX]; /* "" empty */
    int64_t seq;
} seq_slot;

struct pt_record_stagefold {
    int64_t gen;
    int stage_count;
    sfold_stage *stages;
    seq_slot *seqs; /* open addressing, at most half full */
    int seq_n, seq_cap;
    int64_t *scratch; /* for medians: the largest stage's replicas */
    double *scratch_d;
};

static void acc_free(sfold_acc *a)
{
    free(a->busy);
    free(a->iter);
}

void pt_record_stagefold_free(pt_record_stagefold **s_p)
{
    if (!s_p || !*s_p)
        return;
    pt_record_stagefold *s = *s_p;
    for (int i = 0; i < s->stage_count; i++) {
        for (int k = 0; k < SFOLD_OPEN; k++)
            acc_free(&s->stages[i].acc[k]);
        free(s->stages[i].agent);
    }
    free(s->stages);
    free(s->seqs);
    free(s->scratch);
    free(s->scratch_d);
    free(s);
    *s_p = NULL;
}

static int stage_init(sfold_stage *st, int replicas)
{
    st->replicas = replicas;
    if (!(st->agent = calloc((size_t)replicas, sizeof *st->agent)))
        return PT_ENOMEM;
    for (int k = 0; k < SFOLD_OPEN; k++) {
        st->acc[k].busy = malloc(sizeof *st->acc[k].busy * (size_t)replicas);
        st->acc[k].iter = malloc(sizeof *st->acc[k].iter * (size_t)replicas);
        if (!st->acc[k].busy || !st->acc[k].iter)
            return PT_ENOMEM;
    }
    return 0;
}

int pt_record_stagefold_new(const pt_plan *plan, int64_t gen, pt_record_stagefold **out)
{
    *out = NULL;
    int most = 0;
    for (int i = 0; plan && i < plan->stage_count; i++)
        most = plan->stages[i].replica_count > most ? plan->stages[i].replica_count : most;
    if (most < PT_RECORD_STAGE_FOLD_MIN)
        return 0;
    pt_record_stagefold *s = calloc(1, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    s->gen = gen;
    s->stage_count = plan->stage_count;
    s->stages = calloc((size_t)plan->stage_count, sizeof *s->stages);
    s->scratch = malloc(sizeof *s->scratch * (size_t)most);
    s->scratch_d = malloc(sizeof *s->scratch_d * (size_t)most);
    int rc = s->stages && s->scratch && s->scratch_d ? 0 : PT_ENOMEM;
    for (int i = 0; rc == 0 && i < plan->stage_count; i++)
        if (plan->stages[i].replica_count >= PT_RECORD_STAGE_FOLD_MIN)
            rc = stage_init(&s->stages[i], plan->stages[i].replica_count);
    if (rc < 0) {
        pt_record_stagefold_free(&s);
        return rc;
    }
    *out = s;
    return 0;
}

int pt_record_stagefold_covers(const pt_record_stagefold *s, int64_t gen, int stage, int replica)
{
    return s && gen == s->gen && stage >= 0 && stage < s->stage_count && replica >= 0 &&
           replica < s->stages[stage].replicas;
}

static int64_t *seq_slot_of(pt_record_stagefold *s, const char *agent, int *fresh)
{
    if (2 * (s->seq_n + 1) > s->seq_cap) {
        int cap = s->seq_cap ? 2 * s->seq_cap : 256;
        seq_slot *old = s->seqs, *grown = calloc((size_t)cap, sizeof *grown);
        if (!grown)
            return NULL;
        int old_cap = s->seq_cap;
        s->seqs = grown;
        s->seq_cap = cap;
        s->seq_n = 0;
        for (int i = 0; i < old_cap; i++)
            if (old[i].agent[0]) {
                int f;
                *seq_slot_of(s, old[i].agent, &f) = old[i].seq;
            }
        free(old);
    }
    unsigned mask = (unsigned)s->seq_cap - 1, k = (unsigned)pt_hash_str(agent) & mask;
    while (s->seqs[k].agent[0] && strcmp(s->seqs[k].agent, agent) != 0)
        k = (k + 1) & mask;
    *fresh = !s->seqs[k].agent[0];
    if (*fresh) {
        snprintf(s->seqs[k].agent, sizeof s->seqs[k].agent, "%s", agent);
        s->seq_n++;
    }
    return &s->seqs[k].seq;
}

int pt_record_stagefold_seq(pt_record_stagefold *s, int stage, const char *agent, int64_t seq)
{
    int fresh;
    int64_t *last = seq_slot_of(s, agent, &fresh);
    if (!last)
        return PT_ENOMEM;
    if (!fresh && seq > *last + 1)
        s->stages[stage].dropped += seq - *last - 1;
    if (fresh || seq > *last)
        *last = seq;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The band of a: busy min, lower median, max, the straggler. */
static void band(pt_record_stagefold *s, const sfold_stage *st, const sfold_acc *a, int64_t v[3],
                 int *straggler, int *replicas)
{
    int n = 0;
    *straggler = -1;
    for (int r = 0; r < st->replicas; r++)
        if (a->busy[r] >= 0) {
            if (*straggler < 0 || a->busy[r] > a->busy[*straggler])
                *straggler = r;
            s->scratch[n++] = a->busy[r];
        }
    *replicas = n;
    if (!n)
        return;
    qsort(s->scratch, (size_t)n, sizeof *s->scratch, cmp_i64);
    v[0] = s->scratch[0];
    v[1] = s->scratch[(n - 1) / 2];
    v[2] = s->scratch[n - 1];
}

static int add_triple(cJSON *o, const char *key, const double v[3])
{
    cJSON *arr = cJSON_CreateArray();
    int ok = arr && cJSON_AddItemToObject(o, key, arr);
    if (!ok)
        cJSON_Delete(arr);
    for (int i = 0; ok && i < 3; i++) {
        cJSON *x = cJSON_CreateObject(); /* pt_jr_add_number's exact text, then moved */
        ok = x && pt_jr_add_number(x, "v", v[i]);
        cJSON *num = ok ? cJSON_DetachItemFromObject(x, "v") : NULL;
        cJSON_Delete(x);
        ok = num && cJSON_AddItemToArray(arr, num);
    }
    return ok;
}

/* The op events part of the line: replicas, times, band, straggler, ops. */
static int events_json(pt_record_stagefold *s, cJSON *o, const sfold_stage *st, const sfold_acc *a)
{
    int64_t v[3] = {0, 0, 0};
    int straggler, replicas;
    band(s, st, a, v, &straggler, &replicas);
    int ok = pt_jr_add_number(o, "replicas", replicas);
    if (!ok || !replicas)
        return ok;
    const double b[3] = {(double)v[0], (double)v[1], (double)v[2]};
    cJSON *sg = NULL, *ops = NULL;
    ok = pt_jr_add_number(o, "start_ns", (double)a->start_ns) &&
         pt_jr_add_number(o, "end_ns", (double)a->end_ns) && add_triple(o, "busy_ns", b) &&
         (sg = cJSON_AddObjectToObject(o, "straggler")) &&
         pt_jr_add_number(sg, "replica", straggler) &&
         cJSON_AddStringToObject(sg, "agent", st->agent[straggler]) &&
         (ops = cJSON_AddObjectToObject(o, "ops"));
    ok = ok && pt_record_internal_add_fold_ops(ops, a->ops);
    return ok;
}

/* The metrics part: iteration times, loss, throughput, memory. */
static int metrics_json(pt_record_stagefold *s, cJSON *o, const sfold_acc *a)
{
    if (!a->niter)
        return 1;
    memcpy(s->scratch_d, a->iter, sizeof *a->iter * (size_t)a->niter);
    qsort(s->scratch_d, (size_t)a->niter, sizeof *s->scratch_d, cmp_d);
    const double v[3] = {s->scratch_d[0], s->scratch_d[(a->niter - 1) / 2],
                         s->scratch_d[a->niter - 1]};
    return add_triple(o, "iter_ms", v) &&
           (!a->loss_n || pt_jr_add_number(o, "loss", a->loss_sum / a->loss_n)) &&
           pt_jr_add_number(o, "samples_per_s", a->sps_sum / a->niter) &&
           pt_jr_add_number(o, "mem_peak", (double)a->mem_peak);
}

/* Writes a's line and closes it. */
static int acc_emit(pt_record_writer *w, pt_record_stagefold *s, int stage, sfold_acc *a)
{
    sfold_stage *st = &s->stages[stage];
    cJSON *o = cJSON_CreateObject(), *fr = NULL;
    const double frames[2] = {(double)a->event_frames, (double)a->metric_frames};
    int ok = o && pt_jr_add_number(o, "t", (double)pt_msg_now_ns()) &&
             cJSON_AddStringToObject(o, "kind", "sfold") &&
             pt_jr_add_number(o, "gen", (double)s->gen) && pt_jr_add_number(o, "stage", stage) &&
             pt_jr_add_number(o, "step", (double)a->step) &&
             (fr = cJSON_CreateDoubleArray(frames, 2)) && cJSON_AddItemToObject(o, "frames", fr) &&
             pt_jr_add_number(o, "dropped", (double)st->dropped) && events_json(s, o, st, a) &&
             metrics_json(s, o, a);
    if (o && !ok && fr && !cJSON_GetObjectItem(o, "frames"))
        cJSON_Delete(fr);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int rc = text ? pt_record_internal_put_line(w, text) : PT_ENOMEM;
    free(text);
    st->dropped = 0;
    a->open = 0;
    return rc;
}

static void acc_open(sfold_acc *a, int replicas, int64_t step)
{
    int64_t *busy = a->busy;
    double *iter = a->iter;
    memset(a, 0, sizeof *a);
    a->busy = busy;
    a->iter = iter;
    for (int r = 0; r < replicas; r++)
        busy[r] = -1;
    a->open = 1;
    a->step = step;
}

/* The accumulator of (stage, step), opened when new (the stage's oldest
 * step written to make room); lines of steps SFOLD_LAG behind are written. */
static sfold_acc *acc_get(pt_record_writer *w, pt_record_stagefold *s, int stage, int64_t step,
                          int *rc)
{
    sfold_stage *st = &s->stages[stage];
    sfold_acc *found = NULL, *free_a = NULL, *oldest = NULL;
    for (int k = 0; k < SFOLD_OPEN; k++) {
        sfold_acc *a = &st->acc[k];
        if (a->open && a->step <= step - SFOLD_LAG) {
            int r = acc_emit(w, s, stage, a);
            *rc = *rc < 0 ? *rc : r;
        }
        if (a->open && a->step == step)
            found = a;
        else if (!a->open && !free_a)
            free_a = a;
        else if (a->open && (!oldest || a->step < oldest->step))
            oldest = a;
    }
    if (found)
        return found;
    if (!free_a) {
        int r = acc_emit(w, s, stage, oldest);
        *rc = *rc < 0 ? *rc : r;
        free_a = oldest;
    }
    acc_open(free_a, st->replicas, step);
    return free_a;
}

int pt_record_stagefold_events(pt_record_writer *w, pt_record_stagefold *s, const pt_msg *m,
                               int64_t offset_ns)
{
    int rc = 0;
    sfold_acc *a = NULL;
    int64_t a_stage = -1;
    for (int k = 0; k < m->u.events.count; k++) {
        const pt_msg_event *x = &m->u.events.events[k];
        if (!pt_record_stagefold_covers(s, m->gen, x->stage, x->replica) || !pt_op_info_of(x->op))
            continue;
        if (!a || a->step != x->step || a_stage != x->stage) {
            a = acc_get(w, s, x->stage, x->step, &rc);
            a_stage = x->stage;
            a->event_frames++; /* a frame split over steps counts in each */
            snprintf(s->stages[x->stage].agent[x->replica], PT_MSG_ID_MAX, "%s", m->agent);
        }
        int64_t b = x->start_ns - offset_ns, e = x->end_ns - offset_ns, d = e - b;
        if (!a->events || b < a->start_ns)
            a->start_ns = b;
        if (!a->events || e > a->end_ns)
            a->end_ns = e;
        if (a->busy[x->replica] < 0)
            a->busy[x->replica] = 0;
        if (pt_op_lane(x->op) == PT_LANE_COMPUTE)
            a->busy[x->replica] += d;
        pt_record_fold_op *op = &a->ops[x->op];
        op->min_ns = op->count == 0 || d < op->min_ns ? d : op->min_ns;
        op->max_ns = op->count == 0 || d > op->max_ns ? d : op->max_ns;
        op->total_ns += d;
        op->count++;
        a->events++;
    }
    return rc;
}

int pt_record_stagefold_metrics(pt_record_writer *w, pt_record_stagefold *s, const pt_msg *m)
{
    const pt_msg_metrics *x = &m->u.metrics;
    int rc = 0;
    sfold_acc *a = acc_get(w, s, x->stage, x->step, &rc);
    a->metric_frames++;
    if (a->niter < s->stages[x->stage].replicas)
        a->iter[a->niter++] = x->iter_ms;
    if (!isnan(x->loss)) {
        a->loss_sum += x->loss;
        a->loss_n++;
    }
    a->sps_sum += x->samples_per_s;
    if (x->total_peak > a->mem_peak)
        a->mem_peak = x->total_peak;
    return rc;
}

int pt_record_stagefold_end(pt_record_writer *w, pt_record_stagefold *s)
{
    int rc = 0;
    for (int i = 0; s && i < s->stage_count; i++)
        for (;;) { /* oldest step first */
            sfold_acc *oldest = NULL;
            for (int k = 0; k < SFOLD_OPEN; k++)
                if (s->stages[i].acc[k].open &&
                    (!oldest || s->stages[i].acc[k].step < oldest->step))
                    oldest = &s->stages[i].acc[k];
            if (!oldest)
                break;
            int r = acc_emit(w, s, i, oldest);
            rc = rc < 0 ? rc : r;
        }
    return rc;
}
