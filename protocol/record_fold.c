/* The writer's folding of op events (record version 3; docs/formats.md, "Run
 * record", "Folded op events"): events frames of steps outside the
 * full-detail window become one "fold" line per stage replica per step; the
 * frames of the newest steps are held and written verbatim (marked "tail")
 * when their generation ends or the record is closed. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/json_util.h"
#include "protocol/record.h"
#include "protocol/record_internal.h"
#include "protocol/telemetry_scan.h"

#define FOLD_SEQS_MAX 16 /* frames one fold line names; a busier step gets more lines */

/* One stage replica's events of the step being folded. */
typedef struct fold_acc {
    int used; /* a slot of the index: 0 empty */
    int stage, replica;
    int n; /* events folded so far, 0: none pending */
    int64_t gen, step;
    char agent[PT_MSG_ID_MAX];
    int64_t start_ns, end_ns, busy_ns; /* console clock */
    int nseq;
    int64_t seqs[FOLD_SEQS_MAX];
    pt_record_fold_op ops[PT_OP_KIND_COUNT];
} fold_acc;

/* A frame held for the tail window. */
typedef struct held_frame {
    int64_t offset_ns, gen, step_last;
    size_t len;
    char *data;
} held_frame;

struct pt_record_folder {
    pt_record_fold_opts opts;
    int64_t gen, gen_from; /* the current generation and its first step (-1: not known) */
    int64_t newest_step;   /* of the current generation's events, -1 none */
    fold_acc *acc;         /* open addressing on (stage, replica), at most half full */
    int acc_n, acc_cap;    /* used slots, slots (a power of two or 0) */
    held_frame *held;      /* a FIFO: [held_first, held_n) */
    int64_t held_first, held_n, held_cap;
    int64_t held_bytes;      /* of the held frames */
    int64_t head_bytes;      /* written whole for the current generation's head window */
    int64_t head_end;        /* the head window's last step once head_bytes filled it */
    int64_t max_step;        /* of the current generation's frames, -1 none */
    pt_record_stagefold *sf; /* the current plan's stages folded per stage; NULL none */
};

int pt_record_folder_new(const pt_record_fold_opts *opts, pt_record_folder **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PT_ENOMEM;
    (*out)->opts = *opts;
    (*out)->gen = -1;
    (*out)->gen_from = -1;
    (*out)->newest_step = -1;
    (*out)->head_end = INT64_MAX;
    (*out)->max_step = -1;
    return 0;
}

static void held_drop(pt_record_folder *f, int64_t upto)
{
    for (int64_t i = f->held_first; i < upto; i++) {
        f->held_bytes -= (int64_t)f->held[i].len;
        free(f->held[i].data);
    }
    f->held_first = upto;
    if (f->held_first == f->held_n)
        f->held_first = f->held_n = 0;
}

void pt_record_folder_free(pt_record_folder **f_p)
{
    if (!f_p || !*f_p)
        return;
    held_drop(*f_p, (*f_p)->held_n);
    free((*f_p)->held);
    free((*f_p)->acc);
    pt_record_stagefold_free(&(*f_p)->sf);
    free(*f_p);
    *f_p = NULL;
}

static unsigned acc_hash(int stage, int replica)
{
    return (unsigned)stage * 2654435761u ^ (unsigned)replica * 40503u;
}

static fold_acc *acc_slot(pt_record_folder *f, int stage, int replica)
{
    unsigned mask = (unsigned)f->acc_cap - 1, k = acc_hash(stage, replica) & mask;
    while (f->acc[k].used && (f->acc[k].stage != stage || f->acc[k].replica != replica))
        k = (k + 1) & mask;
    return &f->acc[k];
}

/* The accumulator of (stage, replica), made when new; NULL on no memory. */
static fold_acc *acc_get(pt_record_folder *f, int stage, int replica)
{
    if (2 * (f->acc_n + 1) > f->acc_cap) {
        int cap = f->acc_cap ? 2 * f->acc_cap : 16;
        fold_acc *old = f->acc, *grown = calloc((size_t)cap, sizeof *grown);
        if (!grown)
            return NULL;
        int old_cap = f->acc_cap;
        f->acc = grown;
        f->acc_cap = cap;
        for (int i = 0; i < old_cap; i++)
            if (old[i].used)
                *acc_slot(f, old[i].stage, old[i].replica) = old[i];
        free(old);
    }
    fold_acc *a = acc_slot(f, stage, replica);
    if (!a->used) {
        memset(a, 0, sizeof *a);
        a->used = 1;
        a->stage = stage;
        a->replica = replica;
        f->acc_n++;
    }
    return a;
}

int pt_record_internal_add_fold_ops(cJSON *ops, const pt_record_fold_op ops_in[PT_OP_KIND_COUNT])
{
    for (int k = 0; k < PT_OP_KIND_COUNT; k++) {
        const pt_record_fold_op *op = &ops_in[k];
        if (!op->count)
            continue;
        const double v[4] = {(double)op->count, (double)op->total_ns, (double)op->min_ns,
                             (double)op->max_ns};
        cJSON *arr = cJSON_CreateDoubleArray(v, 4);
        if (!arr || !cJSON_AddItemToObject(ops, pt_op_name(k), arr)) {
            cJSON_Delete(arr);
            return 0;
        }
    }
    return 1;
}

/* The fold line of a, as JSON text (caller frees); NULL on no memory. */
static char *fold_text(const fold_acc *a)
{
    cJSON *o = cJSON_CreateObject(), *seqs = NULL, *ops = NULL;
    int ok =
        o && pt_jr_add_number(o, "t", (double)pt_msg_now_ns()) &&
        cJSON_AddStringToObject(o, "kind", "fold") && pt_jr_add_number(o, "gen", (double)a->gen) &&
        cJSON_AddStringToObject(o, "agent", a->agent) && pt_jr_add_number(o, "stage", a->stage) &&
        pt_jr_add_number(o, "replica", a->replica) &&
        pt_jr_add_number(o, "step", (double)a->step) &&
        pt_jr_add_number(o, "start_ns", (double)a->start_ns) &&
        pt_jr_add_number(o, "end_ns", (double)a->end_ns) &&
        pt_jr_add_number(o, "busy_ns", (double)a->busy_ns) &&
        (seqs = cJSON_AddArrayToObject(o, "seqs")) && (ops = cJSON_AddObjectToObject(o, "ops"));
    for (int i = 0; ok && i < a->nseq; i++)
        ok = cJSON_AddItemToArray(seqs, cJSON_CreateNumber((double)a->seqs[i]));
    ok = ok && pt_record_internal_add_fold_ops(ops, a->ops);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

/* Writes a's fold line when it holds events, and empties it. */
static int acc_emit(pt_record_writer *w, fold_acc *a)
{
    if (!a->n)
        return 0;
    char *text = fold_text(a);
    int rc = text ? pt_record_internal_put_line(w, text) : PT_ENOMEM;
    free(text);
    a->n = 0;
    a->nseq = 0;
    memset(a->ops, 0, sizeof a->ops);
    return rc;
}

static int emit_all(pt_record_writer *w, pt_record_folder *f)
{
    int rc = 0;
    for (int i = 0; i < f->acc_cap; i++)
        if (f->acc[i].used && f->acc[i].n) {
            int r = acc_emit(w, &f->acc[i]);
            rc = rc < 0 ? rc : r;
        }
    return rc;
}

/* Writes the held frames verbatim, marked "tail", and forgets them. */
static int write_held(pt_record_writer *w, pt_record_folder *f)
{
    int rc = 0;
    for (int64_t i = f->held_first; i < f->held_n && rc == 0; i++) {
        const held_frame *h = &f->held[i];
        rc = pt_record_internal_put_frame(w, PT_RECORD_RECV, "telemetry", h->offset_ns, h->data,
                                          h->len, 1);
    }
    held_drop(f, f->held_n);
    return rc;
}

int pt_record_folder_end(pt_record_writer *w, pt_record_folder *f)
{
    int rc = emit_all(w, f);
    int r = pt_record_stagefold_end(w, f->sf);
    rc = rc < 0 ? rc : r;
    r = write_held(w, f);
    return rc < 0 ? rc : r;
}

/* The state of a new generation (gen, from its first step, -1: not known). */
static void gen_start(pt_record_folder *f, int64_t gen, int64_t from)
{
    f->gen = gen;
    f->gen_from = from;
    f->newest_step = -1;
    f->head_bytes = 0;
    f->head_end = INT64_MAX;
    f->max_step = -1;
}

int pt_record_folder_plan(pt_record_writer *w, pt_record_folder *f, int64_t gen,
                          int64_t resume_step, const pt_plan *plan)
{
    int rc = pt_record_folder_end(w, f);
    gen_start(f, gen, resume_step);
    pt_record_stagefold_free(&f->sf);
    int r = pt_record_stagefold_new(plan, gen, &f->sf);
    return rc < 0 ? rc : r;
}

static int head_step(const pt_record_folder *f, int64_t step)
{
    return step < f->gen_from + f->opts.head_steps && step <= f->head_end;
}

/* per_stage: of a stage folded per stage, whose every-M steps are folded
 * too (at 1,024 agents each was 5 MB, a quarter of the hour's record, and
 * its sfold line keeps the band; docs/formats.md, "Folded stages"). */
static int detail_step(const pt_record_folder *f, int64_t step, int per_stage)
{
    const pt_record_fold_opts *o = &f->opts;
    return head_step(f, step) || (!per_stage && o->every > 0 && step % o->every == 0);
}

/* A frame of step `step` goes out whole: the head window closes once it
 * holds head_bytes (after the newest step begun, which is finished whole). */
static void head_count(pt_record_folder *f, int64_t step, size_t len)
{
    if (!head_step(f, step) || f->opts.head_bytes <= 0)
        return;
    f->head_bytes += (int64_t)len;
    if (f->head_bytes >= f->opts.head_bytes && f->head_end == INT64_MAX)
        f->head_end = f->max_step;
}

/* Keeps a copy of the frame for the tail window and lets go of the frames
 * older than it. */
static int hold(pt_record_folder *f, const pt_msg *m, int64_t offset_ns, const char *data,
                size_t len)
{
    int64_t last = -1;
    for (int k = 0; k < m->u.events.count; k++)
        if (m->u.events.events[k].step > last)
            last = m->u.events.events[k].step;
    if (last > f->newest_step)
        f->newest_step = last;
    int64_t keep_from = f->newest_step - f->opts.tail_steps + 1, first = f->held_first;
    while (first < f->held_n && f->held[first].step_last < keep_from)
        first++;
    held_drop(f, first);
    if (f->opts.tail_steps <= 0 || last < keep_from)
        return 0;
    if (f->held_first > 0 && f->held_n == f->held_cap) { /* slide down before growing */
        memmove(f->held, f->held + f->held_first,
                sizeof *f->held * (size_t)(f->held_n - f->held_first));
        f->held_n -= f->held_first;
        f->held_first = 0;
    }
    if (f->held_n == f->held_cap) {
        int64_t cap = f->held_cap ? 2 * f->held_cap : 64;
        held_frame *g = realloc(f->held, sizeof *g * (size_t)cap);
        if (!g)
            return PT_ENOMEM;
        f->held = g;
        f->held_cap = cap;
    }
    held_frame *h = &f->held[f->held_n];
    if (!(h->data = malloc(len)))
        return PT_ENOMEM;
    memcpy(h->data, data, len);
    h->len = len;
    h->offset_ns = offset_ns;
    h->gen = m->gen;
    h->step_last = last;
    f->held_n++;
    f->held_bytes += (int64_t)len;
    /* bounded in bytes: the oldest steps go, whole, the newest one stays */
    while (f->opts.tail_bytes > 0 && f->held_bytes > f->opts.tail_bytes &&
           f->held[f->held_first].step_last < last) {
        int64_t drop = f->held[f->held_first].step_last, upto = f->held_first;
        while (upto < f->held_n && f->held[upto].step_last <= drop)
            upto++;
        held_drop(f, upto);
    }
    return 0;
}

/* Adds event x of frame m (received with offset_ns) to its accumulator;
 * first: x is the frame's first event, whose accumulator names the frame. */
static int fold_event(pt_record_writer *w, pt_record_folder *f, const pt_msg *m,
                      const pt_msg_event *x, int64_t offset_ns, int first)
{
    fold_acc *a = acc_get(f, x->stage, x->replica);
    if (!a)
        return PT_ENOMEM;
    int rc = 0;
    if (a->n && (a->step != x->step || a->gen != m->gen || strcmp(a->agent, m->agent) != 0 ||
                 (first && a->nseq == FOLD_SEQS_MAX)))
        rc = acc_emit(w, a);
    int64_t s = x->start_ns - offset_ns, e = x->end_ns - offset_ns;
    if (!a->n) {
        a->gen = m->gen;
        a->step = x->step;
        snprintf(a->agent, sizeof a->agent, "%s", m->agent);
        a->start_ns = s;
        a->end_ns = e;
        a->busy_ns = 0;
    }
    if (first)
        a->seqs[a->nseq++] = m->seq;
    a->start_ns = s < a->start_ns ? s : a->start_ns;
    a->end_ns = e > a->end_ns ? e : a->end_ns;
    if (pt_op_lane(x->op) == PT_LANE_COMPUTE)
        a->busy_ns += e - s;
    pt_record_fold_op *op = &a->ops[x->op];
    int64_t d = e - s;
    op->min_ns = op->count == 0 || d < op->min_ns ? d : op->min_ns;
    op->max_ns = op->count == 0 || d > op->max_ns ? d : op->max_ns;
    op->total_ns += d;
    op->count++;
    a->n++;
    return rc;
}

/* The stage and replica a telemetry message speaks for (its first event's;
 * -1, -1 for another type). */
static void msg_stage(const pt_msg *m, int *stage, int *replica)
{
    *stage = *replica = -1;
    if (m->type == PT_MSG_EVENTS && m->u.events.count > 0) {
        *stage = m->u.events.events[0].stage;
        *replica = m->u.events.events[0].replica;
    } else if (m->type == PT_MSG_METRICS) {
        *stage = m->u.metrics.stage;
        *replica = m->u.metrics.replica;
    }
}

/* A new generation seen in frames (no plan line started it here). */
static int gen_seen(pt_record_writer *w, pt_record_folder *f, const pt_msg *m)
{
    if (m->gen == f->gen)
        return 0;
    int rc = pt_record_folder_end(w, f);
    gen_start(f, m->gen, -1);
    return rc;
}

static int fold_events(pt_record_writer *w, pt_record_folder *f, const pt_msg *mp,
                       int64_t offset_ns, const char *data, size_t len);

/* Metrics message m of a stage folded per stage: 1 folded, 0 written whole
 * (a detail step, or several steps in one message), or PT_E*. */
static int fold_metrics(pt_record_writer *w, pt_record_folder *f, const pt_msg *m, size_t len)
{
    const pt_msg_metrics *x = &m->u.metrics;
    if (x->step > f->max_step)
        f->max_step = x->step;
    if (x->steps > 1 || detail_step(f, x->step, 1)) {
        head_count(f, x->step, len);
        return 0;
    }
    int rc = pt_record_stagefold_metrics(w, f->sf, m);
    return rc < 0 ? rc : 1;
}

static int fold_frame(pt_record_writer *w, pt_record_folder *f, int64_t offset_ns, const char *data,
                      size_t len, const pt_msg *m)
{
    int stage, replica, rc;
    msg_stage(m, &stage, &replica);
    /* a late frame (docs/protocol.md: an older generation's telemetry, read
     * after the next plan began) goes out whole: taking it for a new
     * generation would end the current one's folds, and the next frame of
     * the current one would start its head window over */
    if (stage < 0 || m->gen < f->gen)
        return 0;
    if ((rc = gen_seen(w, f, m)) < 0)
        return rc;
    int per_stage = pt_record_stagefold_covers(f->sf, m->gen, stage, replica);
    if (per_stage && (rc = pt_record_stagefold_seq(f->sf, stage, m->agent, m->seq)) < 0)
        return rc;
    if (m->type == PT_MSG_METRICS)
        return per_stage ? fold_metrics(w, f, m, len) : 0;
    return fold_events(w, f, m, offset_ns, data, len);
}

int pt_record_folder_frame(pt_record_writer *w, pt_record_folder *f, int64_t offset_ns,
                           const char *data, size_t len, const pt_msg *decoded)
{
    if (decoded)
        return fold_frame(w, f, offset_ns, data, len, decoded);
    pt_msg m;
    if (pt_telemetry_decode(data, len, "record", &m, NULL) < 0)
        return 0; /* written as it came: the reader says what is wrong with it */
    int rc = fold_frame(w, f, offset_ns, data, len, &m);
    pt_msg_clear(&m);
    return rc;
}

/* Folds events message m (data[0..len) as received) or says to write it
 * whole: pt_record_folder_frame's result. */
static int fold_events(pt_record_writer *w, pt_record_folder *f, const pt_msg *mp,
                       int64_t offset_ns, const char *data, size_t len)
{
    const pt_msg m = *mp; /* a shallow copy: the events stay the caller's */
    int rc = 0;
    for (int k = 0; k < m.u.events.count; k++) {
        int64_t st = m.u.events.events[k].step;
        if (f->gen_from < 0 || st < f->gen_from)
            f->gen_from = st < 0 ? 0 : st;
        if (st > f->max_step)
            f->max_step = st;
    }
    for (int k = 0; k < m.u.events.count; k++)
        if (detail_step(f, m.u.events.events[k].step,
                        pt_record_stagefold_covers(f->sf, m.gen, m.u.events.events[k].stage,
                                                   m.u.events.events[k].replica))) {
            head_count(f, m.u.events.events[0].step, len);
            return 0; /* a frame of a detail step goes out whole */
        }
    rc = pt_record_stagefold_events(w, f->sf, &m, offset_ns);
    int named = 0; /* the first event folded per replica names the frame */
    for (int k = 0; k < m.u.events.count && rc == 0; k++) {
        const pt_msg_event *x = &m.u.events.events[k];
        if (pt_op_info_of(x->op) &&
            !pt_record_stagefold_covers(f->sf, m.gen, x->stage, x->replica)) {
            rc = fold_event(w, f, &m, x, offset_ns, !named);
            named = 1;
        }
    }
    if (rc == 0 && (rc = hold(f, &m, offset_ns, data, len)) == 0)
        rc = 1;
    return rc;
}
