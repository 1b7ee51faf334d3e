/* Run records read: the one reader and its line checks, also used by the
 * writer (protocol/record_write.c) before it writes a console line. See
 * protocol/record.h; docs/formats.md, "Run record". */
#include "protocol/record.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/record_internal.h"
#include "protocol/telemetry.h"
#include "protocol/telemetry_scan.h"

#define SOURCE_MAX      512         /* "path:line" in messages */
#define MSG_KEY         ",\"msg\":" /* what comes before a verbatim frame */
#define MSG_KEY_LEN     (sizeof MSG_KEY - 1)
#define ARENA_CHUNK     (64u << 10) /* bytes per string chunk of a record */
#define ENTRIES_FIRST   1024
#define NAME_MAX_B      PT_MSG_NAME_MAX /* agent state */
#define REASON_MAX      (4 * PT_ERROR_MAX)
#define TEXT_MAX        (PT_MSG_PATH_MAX + 1)
#define FOLD_PREFIX_MIN (sizeof "{\"t\":0,\"kind\":\"fold\"" - 1)

static const char *const kind_names[PT_RECORD_KIND_COUNT] = {
#define PT_RECORD_KIND_NAME(id, name) name,
    PT_RECORD_KINDS(PT_RECORD_KIND_NAME)
#undef PT_RECORD_KIND_NAME
};

const char *pt_record_kind_name(pt_record_line_kind kind)
{
    return (unsigned)kind < PT_RECORD_KIND_COUNT ? kind_names[kind] : "?";
}

static int kind_parse(const char *name)
{
    for (int k = 0; k < PT_RECORD_KIND_COUNT; k++)
        if (!strcmp(kind_names[k], name))
            return k;
    return -1;
}

static int channel_ok(const char *c)
{
    return c && (!strcmp(c, "control") || !strcmp(c, "telemetry"));
}

/* ---- strings owned by a record: one arena, freed at once ------------------------ */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
} chunk;

static void *arena_alloc(chunk **a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!*a || (*a)->cap - (*a)->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        chunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = *a;
        c->used = 0;
        c->cap = cap;
        *a = c;
    }
    void *p = (char *)(*a)->data + (*a)->used;
    (*a)->used += n;
    return p;
}

static char *arena_strndup(chunk **a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static void arena_free(chunk **a)
{
    while (*a) {
        chunk *next = (*a)->next;
        free(*a);
        *a = next;
    }
}

/* ---- one line, checked ------------------------------------------------------------ */

/* out = a + b (cut to cap): the reader names every line's source, and
 * snprintf for each of half a million lines was a tenth of a load. */
static void cat2(char *out, size_t cap, const char *a, size_t amax, const char *b)
{
    size_t n = strnlen(a, amax < cap - 1 ? amax : cap - 1);
    memcpy(out, a, n);
    size_t m = strnlen(b, cap - 1 - n);
    memcpy(out + n, b, m);
    out[n + m] = '\0';
}

/* out = "SOURCE:LINE". */
static void source_line(char *out, size_t cap, const char *source, int64_t line)
{
    char digits[24], *d = digits + sizeof digits;
    uint64_t v = line < 0 ? 0 : (uint64_t)line;
    *--d = '\0';
    do
        *--d = (char)('0' + v % 10);
    while ((v /= 10) && d > digits + 1);
    *--d = ':';
    cat2(out, cap, source, 480, d);
}

/* What checking a line needs besides the line. */
typedef struct line_ctx {
    const char *source;     /* the file */
    int64_t lineno;         /* 1-based */
    int version;            /* of the session line; 0 before it */
    chunk **arena;          /* where the entry's strings go */
    pt_record_summary *sum; /* NULL: not summed (the writer's check) */
    pt_telemetry_rx *rx;    /* NULL: telemetry sequences not tracked */
    int fast;               /* 1: metrics and fold lines may take record_scan.c's way */
    /* the newest plan (version 4): frames of its stages of stage_fold_min
     * replicas or more are not sequence-checked here (the writer counted
     * their gaps into the "sfold" lines) */
    const pt_plan *plan;
    int64_t plan_gen;
    int stage_fold_min; /* 0: no stage folded per stage */
} line_ctx;

enum { S_REQUIRED = 1, S_EMPTY_OK = 2, S_NULL_OK = 4 };

/* A string member copied into the arena; absent (optional) or null
 * (S_NULL_OK) leaves *out NULL. */
static int get_str(const line_ctx *c, pt_jr *jr, const cJSON *obj, const char *path,
                   const char *key, int flags, size_t max, const char **out)
{
    *out = NULL;
    const cJSON *item = pt_jr_item(obj, key);
    if (!item || ((flags & S_NULL_OK) && cJSON_IsNull(item)))
        return item || !(flags & S_REQUIRED) ? 0 : pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
    if (!cJSON_IsString(item) || !item->valuestring)
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be a string%s",
                          flags & S_NULL_OK ? " or null" : "");
    size_t n = strlen(item->valuestring);
    if (n == 0 && !(flags & S_EMPTY_OK))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must not be empty");
    if (n >= max)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "too long (%zu bytes, at most %zu)", n,
                          max - 1);
    if (!(*out = arena_strndup(c->arena, item->valuestring, n)))
        return pt_jr_fail(jr, PT_ENOMEM, path, key, "out of memory");
    return 0;
}

static int get_i64(pt_jr *jr, const cJSON *obj, const char *key, int64_t min, int64_t *out)
{
    return pt_jr_int64(jr, obj, "", key, PT_JR_REQUIRED, 0, min, PT_JSON_INT_MAX - 1, out);
}

/* "channel": control or telemetry. */
static int get_channel(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    int rc = get_str(c, jr, o, "", "channel", S_REQUIRED, NAME_MAX_B, &e->channel);
    if (rc == 0 && !channel_ok(e->channel))
        rc = pt_jr_fail(jr, PT_EINVAL, "", "channel", "\"%s\" is not control or telemetry",
                        e->channel);
    return rc;
}

static int check_session(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {
        "t", "kind", "v", "unix_s", "control", "telemetry", "heartbeat_ms", "missed_heartbeats",
        NULL};
    int64_t v;
    int rc;
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_i64(jr, o, "v", 0, &v)) < 0)
        return rc;
    if (v < PT_RECORD_VERSION_MIN || v > PT_RECORD_VERSION)
        return pt_jr_fail(jr, PT_EINVAL, "", "v",
                          "unsupported record version %lld (this build reads %d to %d)",
                          (long long)v, PT_RECORD_VERSION_MIN, PT_RECORD_VERSION);
    e->version = (int)v;
    if ((rc = get_i64(jr, o, "unix_s", 0, &e->unix_s)) < 0 ||
        (rc = get_str(c, jr, o, "", "control", S_REQUIRED, PT_MSG_ENDPOINT_MAX, &e->control)) < 0 ||
        (rc = get_str(c, jr, o, "", "telemetry", S_REQUIRED, PT_MSG_ENDPOINT_MAX, &e->telemetry)) <
            0 ||
        (rc = pt_jr_int(jr, o, "", "heartbeat_ms", PT_JR_REQUIRED, 0, 1, 1 << 30,
                        &e->heartbeat_ms)) < 0 ||
        (rc = pt_jr_int(jr, o, "", "missed_heartbeats", PT_JR_REQUIRED, 0, 1, 1 << 30,
                        &e->missed_heartbeats)) < 0)
        return rc;
    return 0;
}

/* Adds a received frame's events and metrics to the summary. */
static void sum_msg(pt_record_summary *s, const pt_record_entry *e, const pt_msg *m)
{
    if (!s || e->kind != PT_RECORD_RECV)
        return;
    if (m->type == PT_MSG_EVENTS) {
        s->event_msgs++;
        for (int k = 0; k < m->u.events.count; k++) {
            int64_t a = m->u.events.events[k].start_ns - e->offset_ns;
            int64_t b = m->u.events.events[k].end_ns - e->offset_ns;
            if (s->events == 0 || a < s->first_start_ns)
                s->first_start_ns = a;
            if (s->events == 0 || b > s->last_end_ns)
                s->last_end_ns = b;
            s->events++;
        }
    } else if (m->type == PT_MSG_METRICS) {
        s->metrics++;
        int64_t st = m->u.metrics.step;
        int64_t from = st - (m->u.metrics.steps > 1 ? m->u.metrics.steps - 1 : 0); /* a fold */
        if (s->first_step < 0 || from < s->first_step)
            s->first_step = from;
        if (st > s->last_step)
            s->last_step = st;
    }
}

/* Adds an sfold line's events and metrics to the summary. */
static void sum_sfold(pt_record_summary *s, const pt_record_entry *e, const pt_record_sfold *f)
{
    if (!s)
        return;
    if (f->replicas) {
        if (s->events == 0 || f->start_ns < s->first_start_ns)
            s->first_start_ns = f->start_ns;
        if (s->events == 0 || f->end_ns > s->last_end_ns)
            s->last_end_ns = f->end_ns;
        s->events += f->events;
        s->event_msgs += f->event_frames;
    }
    if (f->metric_frames) {
        s->metrics += f->metric_frames;
        if (s->first_step < 0 || e->step < s->first_step)
            s->first_step = e->step;
        if (e->step > s->last_step)
            s->last_step = e->step;
    }
}

/* 1 when m comes from a stage the writer folds per stage (version 4): its
 * sequence numbers are the writer's to count. */
static int stage_folded(const line_ctx *c, const pt_msg *m)
{
    if (!c->plan || c->stage_fold_min <= 0 || m->gen != c->plan_gen)
        return 0;
    int stage = m->type == PT_MSG_METRICS                           ? m->u.metrics.stage
                : m->type == PT_MSG_EVENTS && m->u.events.count > 0 ? m->u.events.events[0].stage
                                                                    : -1;
    return stage >= 0 && stage < c->plan->stage_count &&
           c->plan->stages[stage].replica_count >= c->stage_fold_min;
}

/* recv, sent: the header, then the frame (verbatim after "msg", or as the
 * string "frame" when it held a line break) through pt_msg_decode. */
static int frame_body(const line_ctx *c, pt_jr *jr, pt_record_entry *e, int64_t len);

static int check_frame(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t",   "kind",  "channel", "offset_ns",
                                       "len", "frame", "tail",    NULL};
    int rc;
    if (pt_jr_item(o, "msg"))
        return pt_jr_fail(jr, PT_EINVAL, "", "msg", "must be the last member of the line");
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_channel(c, jr, o, e)) < 0)
        return rc;
    if (e->kind == PT_RECORD_SENT && strcmp(e->channel, "control") != 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "channel", "the console sends on control only");
    if ((rc = pt_jr_int64(jr, o, "", "offset_ns", PT_JR_REQUIRED, 0, -(PT_JSON_INT_MAX - 1),
                          PT_JSON_INT_MAX - 1, &e->offset_ns)) < 0)
        return rc;
    int64_t tail = 0;
    if ((rc = pt_jr_int64(jr, o, "", "tail", PT_JR_OPTIONAL, 0, 0, 1, &tail)) < 0)
        return rc;
    if (tail && (c->version < 3 || e->kind != PT_RECORD_RECV))
        return pt_jr_fail(jr, PT_EINVAL, "", "tail",
                          "only a received frame of a version-3 record is a tail frame");
    e->tail = (int)tail;
    int64_t len = -1;
    if ((rc = pt_jr_int64(jr, o, "", "len", c->version >= 2 ? PT_JR_REQUIRED : PT_JR_OPTIONAL, -1,
                          0, PT_MSG_MAX_BYTES, &len)) < 0)
        return rc;
    const cJSON *escaped = pt_jr_item(o, "frame");
    if (escaped && e->frame)
        return pt_jr_fail(jr, PT_EINVAL, "", "frame", "given with msg: a line holds one frame");
    if (escaped) {
        if (!cJSON_IsString(escaped) || !escaped->valuestring)
            return pt_jr_fail(jr, PT_EINVAL, "", "frame", "must be a string");
        e->frame_len = strlen(escaped->valuestring);
        if (!(e->frame = arena_strndup(c->arena, escaped->valuestring, e->frame_len)))
            return pt_jr_fail(jr, PT_ENOMEM, "", "frame", "out of memory");
    }
    if (!e->frame)
        return pt_jr_fail(jr, PT_EINVAL, "", "msg", "missing (the frame)");
    return frame_body(c, jr, e, len);
}

/* The frame of a recv/sent line (e->frame), its header read: its length
 * (len, -1: not given) checked, decoded, noted in e and summed. */
static int frame_body(const line_ctx *c, pt_jr *jr, pt_record_entry *e, int64_t len)
{
    int rc;
    if (len >= 0 && (size_t)len != e->frame_len)
        return pt_jr_fail(jr, PT_EINVAL, "", "len",
                          "%lld, but the frame holds %zu bytes (a cut or edited line)",
                          (long long)len, e->frame_len);
    pt_msg m;
    if (!c->fast || !pt_record_scan_metrics(e->frame, e->frame_len, &m)) {
        char src[SOURCE_MAX + 8];
        cat2(src, sizeof src, jr->source, SOURCE_MAX, ": msg");
        /* events frames, most of a record, through the telemetry scanner
         * (the same results and errors as pt_msg_decode) */
        rc = c->fast ? pt_telemetry_decode(e->frame, e->frame_len, src, &m, jr->err)
                     : pt_msg_decode(e->frame, e->frame_len, src, &m, jr->err);
        if (rc < 0)
            return rc;
    }
    e->msg_type = m.type;
    e->gen = m.gen;
    if (!(e->agent = arena_strndup(c->arena, m.agent, strlen(m.agent)))) {
        pt_msg_clear(&m);
        return pt_jr_fail(jr, PT_ENOMEM, "", "msg", "out of memory");
    }
    if (m.type == PT_MSG_METRICS)
        e->step = e->step_last = m.u.metrics.step;
    for (int k = 0; m.type == PT_MSG_EVENTS && k < m.u.events.count; k++) {
        int64_t st = m.u.events.events[k].step;
        if (k == 0 || st < e->step)
            e->step = st;
        if (k == 0 || st > e->step_last)
            e->step_last = st;
    }
    if (!e->tail) /* a tail frame's events and sequence number came with its fold */
        sum_msg(c->sum, e, &m);
    pt_rx_counts counts;
    if (c->rx && e->kind == PT_RECORD_RECV && !strcmp(e->channel, "telemetry") &&
        (e->tail || stage_folded(c, &m) || pt_telemetry_rx_observe(c->rx, &m, NULL) != PT_ERANGE) &&
        pt_telemetry_rx_agent_counts(c->rx, m.agent, &counts) == 0)
        e->dropped = counts.dropped;
    pt_msg_clear(&m);
    return 0;
}

/* A member object printed and parsed by its format's own parser. */
static char *member_text(const cJSON *o, const char *key)
{
    const cJSON *item = pt_jr_item(o, key);
    return cJSON_IsObject(item) ? cJSON_PrintUnformatted(item) : NULL;
}

static int check_workers(const line_ctx *c, pt_jr *jr, const cJSON *o, const pt_plan *p,
                         pt_record_entry *e)
{
    static const char *const keys[] = {"worker", "agent", "stage", "replica", "pid", NULL};
    const cJSON *arr;
    int n, rc;
    if ((rc = pt_jr_array(jr, o, "", "workers", PT_JR_REQUIRED, 1, &arr, &n)) < 0)
        return rc;
    /* one per agent: per stage replica, or for an interleaved plan per device
     * (the replicas of its first S stages; each agent runs all its chunks) */
    if (n != pt_plan_agent_count(p))
        return pt_jr_fail(jr, PT_EINVAL, "", "workers", "%d workers for a plan of %d %s", n,
                          pt_plan_agent_count(p),
                          p->chunks > 1 ? "devices (interleaved)" : "stage replicas");
    pt_record_worker *w = arena_alloc(c->arena, sizeof *w * (size_t)n);
    if (!w)
        return pt_jr_fail(jr, PT_ENOMEM, "", "workers", "out of memory");
    int rank = 0;
    for (int s = 0; s < pt_plan_rank_count(p); s++)
        for (int r = 0; r < p->stages[s].replica_count; r++, rank++) {
            char path[PT_JPATH_MAX];
            pt_jr_join_index(path, sizeof path, "", "workers", rank);
            const cJSON *x = cJSON_GetArrayItem(arr, rank);
            pt_record_worker *wk = &w[rank];
            if ((rc = pt_jr_is_object(jr, x, path)) < 0 ||
                (rc = pt_jr_keys(jr, x, path, keys)) < 0 ||
                (rc = pt_jr_int(jr, x, path, "worker", PT_JR_REQUIRED, 0, rank, rank,
                                &wk->worker)) < 0 ||
                (rc = pt_jr_str(jr, x, path, "agent", PT_JR_REQUIRED, NULL, wk->agent,
                                sizeof wk->agent)) < 0 ||
                (rc = pt_jr_int(jr, x, path, "stage", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX,
                                &wk->stage)) < 0 ||
                (rc = pt_jr_int(jr, x, path, "replica", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX,
                                &wk->replica)) < 0 ||
                (rc = pt_jr_int64(jr, x, path, "pid", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX - 1,
                                  &wk->pid)) < 0)
                return rc;
            if (wk->stage != s || wk->replica != r)
                return pt_jr_fail(jr, PT_EINVAL, path, NULL,
                                  "is stage %d, replica %d; worker %d of the plan is stage %d, "
                                  "replica %d (workers go stage by stage, replica by replica)",
                                  wk->stage, wk->replica, rank, s, r);
        }
    e->worker_count = n;
    e->workers = w;
    return 0;
}

static int check_plan(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t",           "kind",           "gen",
                                       "plan",        "model",          "data",
                                       "seed",        "checkpoint_dir", "checkpoint_every",
                                       "resume_step", "workers",        "stage_fold_min",
                                       NULL};
    int rc;
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_i64(jr, o, "gen", 1, &e->gen)) < 0 ||
        (rc = pt_jr_int(jr, o, "", "stage_fold_min", PT_JR_OPTIONAL, 0, 1, PT_MSG_MAX_INDEX,
                        &e->stage_fold_min)) < 0)
        return rc;
    if (e->stage_fold_min && c->version < 4)
        return pt_jr_fail(jr, PT_EINVAL, "", "stage_fold_min",
                          "of record version 4 (this record is version %d)", c->version);
    char src[SOURCE_MAX + 8];
    pt_plan *plan = NULL;
    pt_model_spec *model = NULL;
    char *pt = member_text(o, "plan"), *mt = NULL;
    if (!pt) {
        rc = pt_jr_fail(jr, PT_EINVAL, "", "plan", "missing or not an object");
        goto done;
    }
    snprintf(src, sizeof src, "%s: plan", jr->source);
    if ((rc = pt_plan_parse(pt, src, &plan, jr->err)) < 0)
        goto done;
    if (!(mt = member_text(o, "model"))) {
        rc = pt_jr_fail(jr, PT_EINVAL, "", "model", "missing or not an object");
        goto done;
    }
    snprintf(src, sizeof src, "%s: model", jr->source);
    if ((rc = pt_model_spec_parse(mt, src, &model, jr->err)) < 0)
        goto done;
    snprintf(src, sizeof src, "%s: plan", jr->source);
    if ((rc = pt_plan_check(plan, model, NULL, src, jr->err)) < 0)
        goto done;
    if (!(e->model_json = arena_strndup(c->arena, mt, strlen(mt)))) {
        rc = pt_jr_fail(jr, PT_ENOMEM, "", "model", "out of memory");
        goto done;
    }
    if ((rc = get_str(c, jr, o, "", "data", S_REQUIRED, TEXT_MAX, &e->data)) < 0 ||
        (rc = pt_jr_int64(jr, o, "", "seed", PT_JR_REQUIRED, 0, -(PT_JSON_INT_MAX - 1),
                          PT_JSON_INT_MAX - 1, &e->seed)) < 0 ||
        (rc = get_str(c, jr, o, "", "checkpoint_dir", S_REQUIRED | S_EMPTY_OK, TEXT_MAX,
                      &e->checkpoint_dir)) < 0 ||
        (rc = get_i64(jr, o, "checkpoint_every", 0, &e->checkpoint_every)) < 0 ||
        (rc = get_i64(jr, o, "resume_step", 0, &e->resume_step)) < 0 ||
        (rc = check_workers(c, jr, o, plan, e)) < 0)
        goto done;
    e->plan = plan;
    plan = NULL;
done:
    free(pt);
    free(mt);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
    return rc;
}

static int check_agent(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t", "kind", "agent", "state", "step", NULL};
    int rc;
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 ||
        (rc = get_str(c, jr, o, "", "agent", S_REQUIRED, PT_MSG_ID_MAX, &e->agent)) < 0 ||
        (rc = get_str(c, jr, o, "", "state", S_REQUIRED, NAME_MAX_B, &e->state)) < 0)
        return rc;
    return get_i64(jr, o, "step", -1, &e->step);
}

static int check_dead(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t", "kind", "agent", "reason", NULL};
    int rc;
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 ||
        (rc = get_str(c, jr, o, "", "agent", S_REQUIRED, PT_MSG_ID_MAX, &e->agent)) < 0)
        return rc;
    return get_str(c, jr, o, "", "reason", S_REQUIRED, REASON_MAX, &e->reason);
}

static int check_rejected(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t", "kind", "channel", "agent", "reason", NULL};
    int rc;
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_channel(c, jr, o, e)) < 0)
        return rc;
    if ((rc = get_str(c, jr, o, "", "agent", S_REQUIRED | S_NULL_OK, PT_MSG_ID_MAX, &e->agent)) < 0)
        return rc;
    if (c->sum)
        c->sum->rejected++;
    return get_str(c, jr, o, "", "reason", S_REQUIRED, REASON_MAX, &e->reason);
}

static int check_checkpoint(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const ok_keys[] = {"t", "kind", "step", "dir", "commit_ms", NULL};
    static const char *const failed_keys[] = {"t", "kind", "step", "dir", "reason", NULL};
    int failed = e->kind == PT_RECORD_CHECKPOINT_FAILED, rc;
    const pt_jr_range nonneg = {0, INFINITY, 0, 0};
    if ((rc = pt_jr_keys(jr, o, "", failed ? failed_keys : ok_keys)) < 0 ||
        (rc = get_i64(jr, o, "step", 0, &e->step)) < 0 ||
        (rc = get_str(c, jr, o, "", "dir", S_REQUIRED, TEXT_MAX, &e->dir)) < 0)
        return rc;
    if (failed)
        return get_str(c, jr, o, "", "reason", S_REQUIRED, REASON_MAX, &e->reason);
    return pt_jr_num(jr, o, "", "commit_ms", PT_JR_REQUIRED, 0, nonneg, &e->commit_ms);
}

static int check_failed(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t", "kind", "reason", NULL};
    int rc = pt_jr_keys(jr, o, "", keys);
    return rc < 0 ? rc : get_str(c, jr, o, "", "reason", S_REQUIRED, REASON_MAX, &e->reason);
}

/* One op kind of a fold: [count, total_ns, min_ns, max_ns]. */
static int fold_op(pt_jr *jr, const cJSON *item, pt_record_fold_op *op)
{
    char path[PT_JPATH_MAX];
    snprintf(path, sizeof path, "ops.%s", item->string);
    double v[4];
    int n = cJSON_IsArray(item) ? cJSON_GetArraySize(item) : -1;
    for (int i = 0; i < 4 && n == 4; i++) {
        const cJSON *x = cJSON_GetArrayItem(item, i);
        v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v[i] < 0 || v[i] > (double)(PT_JSON_INT_MAX - 1) || v[i] != floor(v[i]))
            n = -1;
    }
    if (n != 4)
        return pt_jr_fail(jr, PT_EINVAL, path, NULL,
                          "must be [count, total_ns, min_ns, max_ns]: integers >= 0");
    *op = (pt_record_fold_op){(int64_t)v[0], (int64_t)v[1], (int64_t)v[2], (int64_t)v[3]};
    if (op->count < 1 || op->min_ns > op->max_ns || op->total_ns < op->max_ns ||
        (double)op->total_ns > (double)op->count * (double)op->max_ns)
        return pt_jr_fail(jr, PT_EINVAL, path, NULL,
                          "count %lld, total %lld, min %lld, max %lld do not agree",
                          (long long)op->count, (long long)op->total_ns, (long long)op->min_ns,
                          (long long)op->max_ns);
    return 0;
}

/* The "ops" object of a fold or sfold line into out (by kind, zeroed), the
 * events it counts added to *events. 0 or a PT_E* code (jr says why). */
static int fold_ops(pt_jr *jr, const cJSON *ops, pt_record_fold_op out[PT_OP_KIND_COUNT],
                    int64_t *events)
{
    const cJSON *item;
    int rc;
    cJSON_ArrayForEach(item, ops)
    {
        pt_op_kind k;
        if (!item->string || pt_op_parse(item->string, &k) < 0)
            return pt_jr_fail(jr, PT_EINVAL, "ops", item->string ? item->string : "?",
                              "not an op kind");
        if (out[k].count)
            return pt_jr_fail(jr, PT_EINVAL, "ops", item->string, "given twice");
        if ((rc = fold_op(jr, item, &out[k])) < 0)
            return rc;
        *events += out[k].count;
    }
    return 0;
}

/* A checked fold f of e: summed, and the sequence numbers of the frames it
 * stands for observed (seqs, a cJSON array, or arr[0..n)). */
static void fold_done(const line_ctx *c, pt_record_entry *e, pt_record_fold *f, const cJSON *seqs,
                      const int64_t *arr, int n)
{
    e->fold = f;
    if (c->sum) {
        pt_record_summary *s = c->sum;
        if (s->events == 0 || f->start_ns < s->first_start_ns)
            s->first_start_ns = f->start_ns;
        if (s->events == 0 || f->end_ns > s->last_end_ns)
            s->last_end_ns = f->end_ns;
        s->events += f->events;
        s->event_msgs += f->frames;
    }
    if (!c->rx)
        return;
    pt_msg m;
    memset(&m, 0, offsetof(pt_msg, u));
    snprintf(m.agent, sizeof m.agent, "%s", e->agent);
    m.gen = e->gen;
    m.type = PT_MSG_EVENTS;
    const cJSON *x = seqs ? seqs->child : NULL;
    for (int i = 0; seqs ? x != NULL : i < n; i++, x = x ? x->next : NULL) {
        m.seq = seqs ? (int64_t)x->valuedouble : arr[i];
        pt_telemetry_rx_observe(c->rx, &m, NULL);
    }
    pt_rx_counts counts;
    if (pt_telemetry_rx_agent_counts(c->rx, m.agent, &counts) == 0)
        e->dropped = counts.dropped;
}

/* A fold line record_scan.c read: what check_fold gives. */
static int fold_scanned(const line_ctx *c, pt_jr *jr, const pt_record_scanned_fold *s,
                        pt_record_entry *e)
{
    pt_record_fold *f = arena_alloc(c->arena, sizeof *f);
    if (!f || !(e->agent = arena_strndup(c->arena, s->agent, strlen(s->agent))))
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    *f = s->fold;
    e->t = s->t;
    e->kind = PT_RECORD_FOLD;
    e->gen = s->gen;
    e->step = e->step_last = s->step;
    fold_done(c, e, f, NULL, s->seqs, s->nseq);
    return 0;
}

/* fold (version 3): one stage replica's op events of one step, summed. */
static int check_fold(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {"t",       "kind", "gen",      "agent",  "stage",
                                       "replica", "step", "start_ns", "end_ns", "busy_ns",
                                       "seqs",    "ops",  NULL};
    const int64_t big = PT_JSON_INT_MAX - 1;
    pt_record_fold *f = arena_alloc(c->arena, sizeof *f);
    const cJSON *seqs, *ops;
    int nseq, rc;
    if (!f)
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    memset(f, 0, sizeof *f);
    if (c->version < 3)
        return pt_jr_fail(jr, PT_EINVAL, "", "kind",
                          "\"fold\" lines are of record version 3 (this record is version %d)",
                          c->version);
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_i64(jr, o, "gen", 0, &e->gen)) < 0 ||
        (rc = get_str(c, jr, o, "", "agent", S_REQUIRED, PT_MSG_ID_MAX, &e->agent)) < 0 ||
        (rc = pt_jr_int(jr, o, "", "stage", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX, &f->stage)) <
            0 ||
        (rc = pt_jr_int(jr, o, "", "replica", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX,
                        &f->replica)) < 0 ||
        (rc = get_i64(jr, o, "step", 0, &e->step)) < 0 ||
        (rc = pt_jr_int64(jr, o, "", "start_ns", PT_JR_REQUIRED, 0, -big, big, &f->start_ns)) < 0 ||
        (rc = pt_jr_int64(jr, o, "", "end_ns", PT_JR_REQUIRED, 0, f->start_ns, big, &f->end_ns)) <
            0 ||
        (rc = get_i64(jr, o, "busy_ns", 0, &f->busy_ns)) < 0 ||
        (rc = pt_jr_array(jr, o, "", "seqs", PT_JR_REQUIRED, 1, &seqs, &nseq)) < 0 ||
        (rc = pt_jr_object(jr, o, "", "ops", PT_JR_REQUIRED, &ops)) < 0)
        return rc;
    e->step_last = e->step;
    f->frames = nseq;
    for (int i = 0; i < nseq; i++) {
        char path[PT_JPATH_MAX];
        int v;
        pt_jr_join_index(path, sizeof path, "", "seqs", i);
        if ((rc = pt_jr_elem_int(jr, cJSON_GetArrayItem(seqs, i), path, 0, INT32_MAX, &v)) < 0)
            return rc;
    }
    if ((rc = fold_ops(jr, ops, f->ops, &f->events)) < 0)
        return rc;
    if (f->events == 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "ops", "empty (a fold holds at least one event)");
    fold_done(c, e, f, seqs, NULL, 0);
    return 0;
}

/* [min, median, max] at key (integers when ints), in order. */
static int get_triple(pt_jr *jr, const cJSON *o, const char *key, int ints, double v[3])
{
    const cJSON *arr = pt_jr_item(o, key);
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    for (int i = 0; i < 3 && n == 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(arr, i);
        v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v[i] < 0 || v[i] > (double)(PT_JSON_INT_MAX - 1) || (ints && v[i] != floor(v[i])))
            n = -1;
    }
    if (n != 3)
        return pt_jr_fail(jr, PT_EINVAL, "", key, "must be [min, median, max]: %s >= 0",
                          ints ? "integers" : "numbers");
    if (v[0] > v[1] || v[1] > v[2])
        return pt_jr_fail(jr, PT_EINVAL, "", key, "min %g, median %g, max %g out of order", v[0],
                          v[1], v[2]);
    return 0;
}

/* sfold's op events part (replicas >= 1): times, band, straggler, ops. */
static int sfold_events(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e,
                        pt_record_sfold *f)
{
    const int64_t big = PT_JSON_INT_MAX - 1;
    const cJSON *sg, *ops;
    double b[3];
    int rc;
    if ((rc = pt_jr_int64(jr, o, "", "start_ns", PT_JR_REQUIRED, 0, -big, big, &f->start_ns)) < 0 ||
        (rc = pt_jr_int64(jr, o, "", "end_ns", PT_JR_REQUIRED, 0, f->start_ns, big, &f->end_ns)) <
            0 ||
        (rc = get_triple(jr, o, "busy_ns", 1, b)) < 0 ||
        (rc = pt_jr_object(jr, o, "", "straggler", PT_JR_REQUIRED, &sg)) < 0 ||
        (rc = pt_jr_int(jr, sg, "straggler", "replica", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX,
                        &f->straggler)) < 0 ||
        (rc = get_str(c, jr, sg, "straggler", "agent", S_REQUIRED, PT_MSG_ID_MAX, &e->agent)) < 0 ||
        (rc = pt_jr_object(jr, o, "", "ops", PT_JR_REQUIRED, &ops)) < 0)
        return rc;
    f->busy_min_ns = (int64_t)b[0];
    f->busy_median_ns = (int64_t)b[1];
    f->busy_max_ns = (int64_t)b[2];
    if ((rc = fold_ops(jr, ops, f->ops, &f->events)) < 0)
        return rc;
    if (f->events < f->replicas)
        return pt_jr_fail(jr, PT_EINVAL, "", "ops",
                          "%lld events for %d replicas (each folded replica has one at least)",
                          (long long)f->events, f->replicas);
    return 0;
}

/* sfold's metrics part (metric frames >= 1). */
static int sfold_metrics(pt_jr *jr, const cJSON *o, pt_record_sfold *f)
{
    const pt_jr_range pos = {0, INFINITY, 0, 0};
    double v[3];
    int rc;
    if ((rc = get_triple(jr, o, "iter_ms", 0, v)) < 0 ||
        (rc = pt_jr_num(jr, o, "", "loss", PT_JR_OPTIONAL, NAN, pos, &f->loss)) < 0 ||
        (rc = pt_jr_num(jr, o, "", "samples_per_s", PT_JR_REQUIRED, 0, pos, &f->samples_per_s)) <
            0 ||
        (rc = get_i64(jr, o, "mem_peak", 0, &f->mem_peak)) < 0)
        return rc;
    f->iter_min_ms = v[0];
    f->iter_median_ms = v[1];
    f->iter_max_ms = v[2];
    return 0;
}

/* sfold (version 4): one stage's op events and metrics of one step over all
 * its replicas. */
static int check_sfold(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    static const char *const keys[] = {
        "t",       "kind",     "gen",      "stage",         "step",     "frames",
        "dropped", "replicas", "start_ns", "end_ns",        "busy_ns",  "straggler",
        "ops",     "iter_ms",  "loss",     "samples_per_s", "mem_peak", NULL};
    pt_record_sfold *f = arena_alloc(c->arena, sizeof *f);
    const cJSON *fr;
    int nfr, rc;
    if (!f)
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    memset(f, 0, sizeof *f);
    f->straggler = -1;
    f->loss = NAN;
    if (c->version < 4)
        return pt_jr_fail(jr, PT_EINVAL, "", "kind",
                          "\"sfold\" lines are of record version 4 (this record is version %d)",
                          c->version);
    if ((rc = pt_jr_keys(jr, o, "", keys)) < 0 || (rc = get_i64(jr, o, "gen", 0, &e->gen)) < 0 ||
        (rc = pt_jr_int(jr, o, "", "stage", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX, &f->stage)) <
            0 ||
        (rc = get_i64(jr, o, "step", 0, &e->step)) < 0 ||
        (rc = pt_jr_array(jr, o, "", "frames", PT_JR_REQUIRED, 2, &fr, &nfr)) < 0 ||
        (rc = get_i64(jr, o, "dropped", 0, &f->dropped)) < 0 ||
        (rc = pt_jr_int(jr, o, "", "replicas", PT_JR_REQUIRED, 0, 0, PT_MSG_MAX_INDEX,
                        &f->replicas)) < 0)
        return rc;
    const cJSON *x0 = cJSON_GetArrayItem(fr, 0), *x1 = cJSON_GetArrayItem(fr, 1);
    if (nfr != 2 || !cJSON_IsNumber(x0) || !cJSON_IsNumber(x1) || x0->valuedouble < 0 ||
        x1->valuedouble < 0 || x0->valuedouble != floor(x0->valuedouble) ||
        x1->valuedouble != floor(x1->valuedouble) || x0->valuedouble + x1->valuedouble < 1 ||
        x0->valuedouble > (double)INT32_MAX || x1->valuedouble > (double)INT32_MAX)
        return pt_jr_fail(jr, PT_EINVAL, "", "frames",
                          "must be [events frames, metrics frames]: integers >= 0, not both 0");
    f->event_frames = (int64_t)x0->valuedouble;
    f->metric_frames = (int64_t)x1->valuedouble;
    e->step_last = e->step;
    if ((f->replicas > 0) != (f->event_frames > 0))
        return pt_jr_fail(jr, PT_EINVAL, "", "replicas",
                          "%d replicas for %lld events frames (both 0 or both > 0)", f->replicas,
                          (long long)f->event_frames);
    if ((f->replicas && (rc = sfold_events(c, jr, o, e, f)) < 0) ||
        (f->metric_frames && (rc = sfold_metrics(jr, o, f)) < 0))
        return rc;
    if (!f->replicas && (pt_jr_item(o, "ops") || pt_jr_item(o, "busy_ns")))
        return pt_jr_fail(jr, PT_EINVAL, "", "ops", "given for 0 replicas");
    if (!f->metric_frames && pt_jr_item(o, "iter_ms"))
        return pt_jr_fail(jr, PT_EINVAL, "", "iter_ms", "given for 0 metrics frames");
    e->sfold = f; /* its dropped is the line's own count, not an agent's running one */
    sum_sfold(c->sum, e, f);
    return 0;
}

/* The summary of `pipetop run` belongs to that command (docs/console.md):
 * any members, kept as text. */
static int check_summary(const line_ctx *c, pt_jr *jr, const cJSON *o, pt_record_entry *e)
{
    cJSON *copy = cJSON_Duplicate(o, 1);
    if (copy) {
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "t");
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "kind");
    }
    char *text = copy ? cJSON_PrintUnformatted(copy) : NULL;
    cJSON_Delete(copy);
    if (!text || !(e->json = arena_strndup(c->arena, text, strlen(text)))) {
        free(text);
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    }
    free(text);
    return 0;
}

typedef int (*check_fn)(const line_ctx *, pt_jr *, const cJSON *, pt_record_entry *);

/* Each kind's reader, in the order of PT_RECORD_KINDS. */
static const check_fn checks[PT_RECORD_KIND_COUNT] = {
    [PT_RECORD_SESSION] = check_session,
    [PT_RECORD_PLAN] = check_plan,
    [PT_RECORD_RECV] = check_frame,
    [PT_RECORD_SENT] = check_frame,
    [PT_RECORD_AGENT] = check_agent,
    [PT_RECORD_DEAD] = check_dead,
    [PT_RECORD_REJECTED] = check_rejected,
    [PT_RECORD_CHECKPOINT] = check_checkpoint,
    [PT_RECORD_CHECKPOINT_FAILED] = check_checkpoint,
    [PT_RECORD_SUMMARY] = check_summary,
    [PT_RECORD_FAILED] = check_failed,
    [PT_RECORD_FOLD] = check_fold,
    [PT_RECORD_SFOLD] = check_sfold,
};

/* Parses text[0..n) as one JSON value; NULL when it is not one (or more
 * than one). Reads text in place: no copy, no NUL needed. */
static cJSON *parse_exact(const char *text, size_t n)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j)
        return NULL;
    while (end && end < text + n && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (end != text + n) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Where the frame of a recv/sent line is: after the first ,"msg": up to the
 * line's closing brace. In JSON text a quote inside a string is escaped, so
 * the bytes ,"msg": are always a member key; the header members before it are
 * scalars. 0 when the line has no such member. */
static size_t frame_span(const char *line, size_t n, const char **frame, size_t *flen)
{
    const char *m = NULL;
    for (size_t i = 0; i + MSG_KEY_LEN <= n; i++)
        if (line[i] == ',' && !memcmp(line + i, MSG_KEY, MSG_KEY_LEN)) {
            m = line + i;
            break;
        }
    size_t end = n;
    while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\t' || line[end - 1] == '\r'))
        end--;
    if (!m || end == 0 || line[end - 1] != '}' || line + end - 1 < m + MSG_KEY_LEN)
        return 0;
    *frame = m + MSG_KEY_LEN;
    *flen = (size_t)(line + end - 1 - *frame);
    return (size_t)(m - line);
}

/* Reads lit at *p; 1 when it is there (and *p moves past it). */
static int lit(const char **p, const char *end, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(end - *p) < n || memcmp(*p, s, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* An integer of at most 15 digits (below PT_JSON_INT_MAX), sign allowed
 * when neg_ok; 1 when read. */
static int lit_int(const char **p, const char *end, int neg_ok, int64_t *out)
{
    int neg = neg_ok && *p < end && **p == '-';
    const char *q = *p + neg;
    int64_t v = 0;
    int n = 0;
    while (q < end && *q >= '0' && *q <= '9' && n < 16) {
        v = v * 10 + (*q++ - '0');
        n++;
    }
    if (n == 0 || n > 15 || (n > 1 && (*p)[neg] == '0'))
        return 0;
    *out = neg ? -v : v;
    *p = q;
    return 1;
}

/* The header of a frame line exactly as this build's writer writes it,
 * line[0..head) ({"t":T,"kind":K,"channel":C,"offset_ns":O,["tail":1,]"len":N),
 * read without a JSON parse: half a million of them make an hour of the
 * demo. 1 when it is one (e and *len filled), 0 when the line goes the
 * general way (which also says what is wrong with it). */
static int fast_header(const line_ctx *c, const char *line, size_t head, pt_record_entry *e,
                       int64_t *len)
{
    const char *p = line, *end = line + head;
    int64_t t, off, tail = 0;
    if (c->version < 2 || !lit(&p, end, "{\"t\":") || !lit_int(&p, end, 0, &t) ||
        !lit(&p, end, ",\"kind\":\""))
        return 0;
    if (lit(&p, end, "recv\""))
        e->kind = PT_RECORD_RECV;
    else if (lit(&p, end, "sent\""))
        e->kind = PT_RECORD_SENT;
    else
        return 0;
    if (!lit(&p, end, ",\"channel\":\""))
        return 0;
    if (lit(&p, end, "control\""))
        e->channel = "control";
    else if (e->kind == PT_RECORD_RECV && lit(&p, end, "telemetry\""))
        e->channel = "telemetry";
    else
        return 0;
    if (!lit(&p, end, ",\"offset_ns\":") || !lit_int(&p, end, 1, &off) || !lit(&p, end, ","))
        return 0;
    if (lit(&p, end, "\"tail\":1,")) {
        if (c->version < 3 || e->kind != PT_RECORD_RECV)
            return 0;
        tail = 1;
    }
    if (!lit(&p, end, "\"len\":") || !lit_int(&p, end, 0, len) || *len > PT_MSG_MAX_BYTES ||
        p != end)
        return 0;
    e->t = t;
    e->offset_ns = off;
    e->tail = (int)tail;
    return 1;
}

static void entry_init(pt_record_entry *e, int64_t lineno)
{
    memset(e, 0, sizeof *e);
    e->line = lineno;
    e->step = e->step_last = -1;
    e->msg_type = PT_MSG_TYPE_COUNT;
}

/* Checks one line into *e (strings in c->arena). */
static int parse_line(const line_ctx *c, const char *line, size_t n, pt_record_entry *e,
                      pt_error *err)
{
    char src[SOURCE_MAX];
    source_line(src, sizeof src, c->source, c->lineno);
    pt_jr jr = {src, err};
    entry_init(e, c->lineno);
    if (c->fast && c->version >= 3 && n > FOLD_PREFIX_MIN) {
        pt_record_scanned_fold sf;
        if (pt_record_scan_fold(line, n, &sf))
            return fold_scanned(c, &jr, &sf, e);
    }
    const char *frame = NULL;
    size_t flen = 0, head = frame_span(line, n, &frame, &flen);
    cJSON *root = NULL;
    int64_t len = -1;
    if (head > 0 && fast_header(c, line, head, e, &len)) {
        e->frame = frame;
        e->frame_len = flen;
        return frame_body(c, &jr, e, len);
    }
    entry_init(e, c->lineno);
    if (head > 0) {
        /* the header alone: the line up to ,"msg": and a closing brace */
        char *h = malloc(head + 2);
        if (!h)
            return pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        memcpy(h, line, head);
        memcpy(h + head, "}", 2);
        root = parse_exact(h, head + 1);
        free(h);
        const cJSON *k = root ? pt_jr_item(root, "kind") : NULL;
        /* a header without its channel may be a line whose msg is not last:
         * read whole, it then says so */
        cJSON *whole = root && !pt_jr_item(root, "channel") ? parse_exact(line, n) : NULL;
        cJSON_Delete(whole);
        if (!cJSON_IsString(k) || whole ||
            (strcmp(k->valuestring, "recv") != 0 && strcmp(k->valuestring, "sent") != 0)) {
            cJSON_Delete(root);
            root = NULL;
            head = 0; /* not a frame line: read it whole */
        }
    }
    if (head == 0) {
        frame = NULL;
        flen = 0;
        root = parse_exact(line, n);
        if (!root)
            return pt_jr_fail(&jr, PT_EPARSE, "", NULL, "not valid JSON");
    }
    int rc;
    char kind[32];
    if (!cJSON_IsObject(root)) {
        rc = pt_jr_fail(&jr, PT_EPARSE, "", NULL,
                        "not a run-record line (a JSON object with \"t\" and \"kind\")");
        goto done;
    }
    if ((rc = pt_jr_int64(&jr, root, "", "t", PT_JR_REQUIRED, 0, 0, PT_JSON_INT_MAX - 1, &e->t)) <
            0 ||
        (rc = pt_jr_str(&jr, root, "", "kind", PT_JR_REQUIRED, NULL, kind, sizeof kind)) < 0)
        goto done;
    int k = kind_parse(kind);
    if (k < 0) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "kind",
                        "unknown kind \"%s\" (known: session, plan, recv, sent, agent, dead, "
                        "rejected, checkpoint, checkpoint_failed, summary, failed, fold, sfold)",
                        kind);
        goto done;
    }
    e->kind = (pt_record_line_kind)k;
    if (c->version == 0 && e->kind != PT_RECORD_SESSION) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "kind",
                        "\"%s\" before the session line (a record starts with \"session\")", kind);
        goto done;
    }
    if (c->version != 0 && e->kind == PT_RECORD_SESSION) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "kind", "a second session line");
        goto done;
    }
    e->frame = frame;
    e->frame_len = flen;
    rc = checks[e->kind](c, &jr, root, e);
done:
    cJSON_Delete(root);
    if (rc < 0) {
        pt_plan *p = (pt_plan *)e->plan;
        pt_plan_free(&p);
        e->plan = NULL;
    }
    return rc;
}

/* ---- the reader -------------------------------------------------------------------- */

struct pt_record {
    char *text; /* the file; frames point into it */
    size_t len;
    pt_record_entry *e;
    int64_t n, cap;
    chunk *arena;
    int version;
    pt_record_summary sum;
    int64_t skipped;     /* bad lines a lenient read passed over */
    pt_error first_skip; /* the first one's error */
};

static int push(pt_record *r, const pt_record_entry *e)
{
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : ENTRIES_FIRST;
        pt_record_entry *x = realloc(r->e, sizeof *x * (size_t)cap);
        if (!x)
            return PT_ENOMEM;
        r->e = x;
        r->cap = cap;
    }
    r->e[r->n++] = *e;
    return 0;
}

/* Bytes between two progress reports while parsing. */
#define RECORD_PROGRESS_BYTES (4 << 20)

/* owned: text is a malloc'd, NUL-terminated buffer the record takes over
 * (freed here on failure), not copied: a large record is not held twice. */
static int parse_text(const char *text, size_t len, int owned, const char *source, int lenient,
                      int fast, pt_record_progress progress, void *arg, pt_record **out,
                      pt_error *err)
{
    const char *src = source && *source ? source : "record";
    if (!out) {
        if (owned)
            free((char *)text);
        return pt_error_set(err, PT_EINVAL, "%s: no output", src);
    }
    *out = NULL;
    pt_record *r = calloc(1, sizeof *r);
    if (r && owned)
        r->text = (char *)text;
    else if (r && (r->text = malloc(len + 1)) && len)
        memcpy(r->text, text, len);
    if (!r || !r->text) {
        if (owned)
            free((char *)text);
        free(r);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", src);
    }
    r->text[len] = '\0';
    r->len = len;
    r->sum.first_step = r->sum.last_step = -1;
    line_ctx c = {src, 0, 0, &r->arena, &r->sum, NULL, fast, NULL, -1, 0};
    if (pt_telemetry_rx_create(PT_RX_FROM_FIRST, &c.rx) < 0) {
        pt_record_free(&r);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", src);
    }
    size_t pos = 0, reported = 0;
    int rc = 0;
    while (pos < len && rc == 0) {
        if (progress && pos - reported >= RECORD_PROGRESS_BYTES) {
            progress((int64_t)pos, (int64_t)len, arg);
            reported = pos;
        }
        const char *line = r->text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        c.lineno++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n)
            continue;
        if (!nl) {
            cJSON *whole = parse_exact(line, n);
            cJSON_Delete(whole);
            if (!whole)
                break; /* a truncated last line: the run was killed while writing */
        }
        pt_record_entry e;
        if ((rc = parse_line(&c, line, n, &e, err)) < 0) {
            /* a lenient read passes over a bad line after the session's, as
             * the console passes over a bad frame: counted, the first kept */
            if (!lenient || r->n == 0 || rc == PT_ENOMEM)
                break;
            if (!r->skipped++ && err)
                r->first_skip = *err;
            rc = 0;
            continue;
        }
        if (e.kind == PT_RECORD_SESSION)
            c.version = r->version = e.version;
        if (e.kind == PT_RECORD_PLAN) {
            r->sum.plans++;
            c.plan = e.plan;
            c.plan_gen = e.gen;
            c.stage_fold_min = e.stage_fold_min;
        }
        if ((rc = push(r, &e)) < 0) {
            pt_plan *p = (pt_plan *)e.plan;
            pt_plan_free(&p);
            pt_error_set(err, rc, "%s: out of memory", src);
        }
    }
    pt_telemetry_rx_destroy(&c.rx);
    if (rc == 0 && r->n == 0)
        rc = pt_error_set(err, PT_EINVAL, "%s: empty record (no session line)", src);
    if (rc < 0) {
        pt_record_free(&r);
        return rc;
    }
    r->sum.entries = r->n;
    if (progress)
        progress((int64_t)len, (int64_t)len, arg);
    *out = r;
    return 0;
}

int pt_record_parse(const char *text, size_t len, const char *source, pt_record **out,
                    pt_error *err)
{
    return parse_text(text, len, 0, source, 0, 1, NULL, NULL, out, err);
}

int pt_record_internal_parse(const char *text, size_t len, const char *source, int fast,
                             int lenient, pt_record **out, pt_error *err)
{
    return parse_text(text, len, 0, source, lenient, fast, NULL, NULL, out, err);
}

int pt_record_load(const char *path, pt_record **out, pt_error *err)
{
    return pt_record_load_progress(path, NULL, NULL, out, err);
}

/* A compressed record (gzip, docs/formats.md "Compression"): *text is
 * replaced by what it inflates to. A stream that stops short (a run that is
 * still writing, or was killed) gives what it holds up to there; the reader
 * then drops a cut last line as in a plain record. */
static int gunzip(const char *path, char **text, size_t *len, pt_error *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    size_t cap = *len * 8 + 4096, n = 0;
    char *outbuf = malloc(cap);
    int zr = Z_OK;
    z.next_in = (Bytef *)*text;
    z.avail_in = (uInt)*len;
    while (outbuf && zr == Z_OK) {
        if (n > (size_t)PT_FILE_READ_MAX) {
            inflateEnd(&z);
            free(outbuf);
            return pt_error_set(err, PT_ERANGE, "%s: inflates to more than %lld bytes", path,
                                (long long)PT_FILE_READ_MAX);
        }
        if (cap - n < 4096) {
            char *g = realloc(outbuf, cap * 2);
            if (!g) {
                free(outbuf);
                outbuf = NULL;
                break;
            }
            outbuf = g;
            cap *= 2;
        }
        z.next_out = (Bytef *)outbuf + n;
        z.avail_out = (uInt)(cap - n - 1); /* one byte kept for the NUL */
        zr = inflate(&z, Z_NO_FLUSH);
        n = cap - 1 - z.avail_out;
        if (zr == Z_BUF_ERROR && z.avail_in > 0 && z.avail_out == 0)
            zr = Z_OK; /* out of room only */
    }
    inflateEnd(&z);
    if (!outbuf)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    if (zr == Z_DATA_ERROR && n == 0) {
        free(outbuf);
        return pt_error_set(err, PT_EPARSE, "%s: not a gzip stream (%s)", path,
                            z.msg ? z.msg : "data error");
    }
    free(*text);
    *text = outbuf;
    *len = n;
    outbuf[n] = '\0';
    return 0;
}

int pt_record_load_progress(const char *path, pt_record_progress progress, void *arg,
                            pt_record **out, pt_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (out)
        *out = NULL;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    if (len >= 2 && (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b &&
        (rc = gunzip(path, &text, &len, err)) < 0) {
        free(text);
        return rc;
    }
    return parse_text(text, len, 1, path, 1, 1, progress, arg, out, err);
}

void pt_record_free(pt_record **rec_p)
{
    if (!rec_p || !*rec_p)
        return;
    pt_record *r = *rec_p;
    for (int64_t i = 0; i < r->n; i++) {
        pt_plan *p = (pt_plan *)r->e[i].plan;
        pt_plan_free(&p);
    }
    free(r->e);
    arena_free(&r->arena);
    free(r->text);
    free(r);
    *rec_p = NULL;
}

int64_t pt_record_skipped(const pt_record *rec, pt_error *first)
{
    if (!rec)
        return 0;
    if (first && rec->skipped)
        *first = rec->first_skip;
    return rec->skipped;
}

int pt_record_version(const pt_record *rec)
{
    return rec ? rec->version : 0;
}

int64_t pt_record_count(const pt_record *rec)
{
    return rec ? rec->n : 0;
}

const pt_record_entry *pt_record_at(const pt_record *rec, int64_t i)
{
    return rec && i >= 0 && i < rec->n ? &rec->e[i] : NULL;
}

int64_t pt_record_t_ns(const pt_record *rec, int64_t i)
{
    const pt_record_entry *e = pt_record_at(rec, i);
    return e ? e->t : 0;
}

const char *pt_record_kind(const pt_record *rec, int64_t i)
{
    const pt_record_entry *e = pt_record_at(rec, i);
    return e ? pt_record_kind_name(e->kind) : "";
}

int pt_record_msg(const pt_record *rec, int64_t i, pt_msg *out, pt_error *err)
{
    const pt_record_entry *e = pt_record_at(rec, i);
    if (!e || !e->frame) {
        memset(out, 0, sizeof *out);
        return pt_error_set(err, PT_EINVAL, "record: entry %lld holds no frame", (long long)i);
    }
    if (e->msg_type == PT_MSG_METRICS) { /* replay, status and export read every one again */
        memset(out, 0, sizeof *out);
        if (pt_record_scan_metrics(e->frame, e->frame_len, out))
            return 0;
    }
    return pt_telemetry_decode(e->frame, e->frame_len, "record", out, err);
}

const char *pt_record_model_json(const pt_record *rec, int64_t before)
{
    int64_t end = before < 0 || before > rec->n ? rec->n : before;
    for (int64_t i = end - 1; i >= 0; i--)
        if (rec->e[i].kind == PT_RECORD_PLAN)
            return rec->e[i].model_json;
    return NULL;
}

void pt_record_summarize(const pt_record *rec, pt_record_summary *out)
{
    *out = rec->sum;
}

int pt_record_internal_check(const char *text, size_t len, int after_session)
{
    chunk *arena = NULL;
    line_ctx c = {"record", 1, after_session ? PT_RECORD_VERSION : 0, &arena, NULL, NULL, 1, NULL,
                  -1,       0};
    pt_record_entry e;
    int rc = parse_line(&c, text, len, &e, NULL);
    pt_plan *p = (pt_plan *)e.plan;
    pt_plan_free(&p);
    arena_free(&arena);
    return rc < 0 ? PT_EINVAL : 0;
}

int pt_record_internal_kind(const char *name)
{
    return kind_parse(name);
}

int pt_record_internal_channel_ok(const char *channel)
{
    return channel_ok(channel);
}
