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
    return 0;
}

static void held_drop(pt_record_folder *f, int64_t upto)
{
    for (int64_t i = f->held_first; i < upto; i++)
        free(f->held[i].data);
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
    for (int k = 0; ok && k < PT_OP_KIND_COUNT; k++) {
        const pt_record_fold_op *op = &a->ops[k];
        if (!op->count)
            continue;
        const double v[4] = {(double)op->count, (double)op->total_ns, (double)op->min_ns,
                             (double)op->max_ns};
        cJSON *arr = cJSON_CreateDoubleArray(v, 4);
        ok = arr && cJSON_AddItemToObject(ops, pt_op_name(k), arr);
        if (!ok)
            cJSON_Delete(arr);
    }
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
    int r = write_held(w, f);
    return rc < 0 ? rc : r;
}

int pt_record_folder_plan(pt_record_writer *w, pt_record_folder *f, int64_t gen,
                          int64_t resume_step)
{
    int rc = pt_record_folder_end(w, f);
    f->gen = gen;
    f->gen_from = resume_step;
    f->newest_step = -1;
    return rc;
}

static int detail_step(const pt_record_folder *f, int64_t step)
{
    const pt_record_fold_opts *o = &f->opts;
    return step < f->gen_from + o->head_steps || (o->every > 0 && step % o->every == 0);
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

static int fold_msg(pt_record_writer *w, pt_record_folder *f, const pt_msg *mp, int64_t offset_ns,
                    const char *data, size_t len);

int pt_record_folder_frame(pt_record_writer *w, pt_record_folder *f, int64_t offset_ns,
                           const char *data, size_t len, const pt_msg *decoded)
{
    if (decoded)
        return decoded->type == PT_MSG_EVENTS && decoded->u.events.count > 0
                   ? fold_msg(w, f, decoded, offset_ns, data, len)
                   : 0;
    pt_msg m;
    if (pt_msg_decode(data, len, "record", &m, NULL) < 0)
        return 0; /* written as it came: the reader says what is wrong with it */
    int rc = m.type == PT_MSG_EVENTS && m.u.events.count > 0
                 ? fold_msg(w, f, &m, offset_ns, data, len)
                 : 0;
    pt_msg_clear(&m);
    return rc;
}

/* Folds events message m (data[0..len) as received) or says to write it
 * whole: pt_record_folder_frame's result. */
static int fold_msg(pt_record_writer *w, pt_record_folder *f, const pt_msg *mp, int64_t offset_ns,
                    const char *data, size_t len)
{
    const pt_msg m = *mp; /* a shallow copy: the events stay the caller's */
    int rc = 0;
    if (m.gen != f->gen) { /* events of a generation no plan line started here */
        if ((rc = pt_record_folder_end(w, f)) < 0)
            goto done;
        f->gen = m.gen;
        f->gen_from = -1;
        f->newest_step = -1;
    }
    for (int k = 0; k < m.u.events.count; k++) {
        int64_t st = m.u.events.events[k].step;
        if (f->gen_from < 0 || st < f->gen_from)
            f->gen_from = st < 0 ? 0 : st;
    }
    for (int k = 0; k < m.u.events.count; k++)
        if (detail_step(f, m.u.events.events[k].step))
            goto done; /* a frame of a detail step goes out whole */
    for (int k = 0; k < m.u.events.count && rc == 0; k++)
        if (pt_op_info_of(m.u.events.events[k].op))
            rc = fold_event(w, f, &m, &m.u.events.events[k], offset_ns, k == 0);
    if (rc == 0 && (rc = hold(f, &m, offset_ns, data, len)) == 0)
        rc = 1;
done:
    return rc;
}
