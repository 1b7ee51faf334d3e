/* Run records read back and replayed (see replay.h). */
#include "tui/replay.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/checked.h"
#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/telemetry.h"

#define RECORD_KIND_MAX   24
#define REPLAY_SPEED_MIN  0.01
#define REPLAY_SPEED_MAX  1000.0
#define RECORD_SOURCE_MAX 256
/* Times and offsets in a record are ns (wall clock or relative): bounded so the
 * difference of any two fits in int64 (2^62 ns is 146 years). */
#define RECORD_NS_MAX (1LL << 62)

typedef struct entry {
    int64_t t;
    char kind[RECORD_KIND_MAX];
    cJSON *json; /* owned */
} entry;

struct pt_record {
    entry *e;
    int64_t n, cap;
    char source[RECORD_SOURCE_MAX];
    pt_telemetry_rx *rx; /* sequence tracking while applying */
    int64_t malformed;
    char *model_text; /* last pt_record_model_json answer */
};

static int push(pt_record *r, int64_t t, const char *kind, cJSON *json)
{
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 1024;
        entry *e = realloc(r->e, sizeof *e * (size_t)cap);
        if (!e)
            return PT_ENOMEM;
        r->e = e;
        r->cap = cap;
    }
    entry *x = &r->e[r->n++];
    x->t = t;
    snprintf(x->kind, sizeof x->kind, "%s", kind);
    x->json = json;
    return 0;
}

int pt_record_parse(const char *text, size_t len, const char *source, pt_record **out,
                    pt_error *err)
{
    if (!out)
        return pt_error_set(err, PT_EINVAL, "record: no output");
    *out = NULL;
    const char *src = source ? source : "record";
    pt_record *r = calloc(1, sizeof *r);
    if (!r || pt_telemetry_rx_create(PT_RX_FROM_FIRST, &r->rx) < 0) {
        free(r);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", src);
    }
    snprintf(r->source, sizeof r->source, "%s", src);
    size_t pos = 0;
    int64_t lineno = 0;
    int rc = 0;
    while (pos < len && rc == 0) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        lineno++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n)
            continue;
        cJSON *j = cJSON_ParseWithLength(line, n);
        const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "t") : NULL;
        const cJSON *kind = j ? cJSON_GetObjectItemCaseSensitive(j, "kind") : NULL;
        if (!j || !cJSON_IsObject(j) || !cJSON_IsNumber(t) || !cJSON_IsString(kind)) {
            cJSON_Delete(j);
            if (!nl)
                break; /* a truncated last line: the run was killed while writing */
            rc = pt_error_set(err, PT_EPARSE,
                              "%s: line %lld: not a run-record entry (a JSON object with a "
                              "number \"t\" and a string \"kind\")",
                              src, (long long)lineno);
            break;
        }
        int64_t t_ns;
        if (pt_double_to_i64(t->valuedouble, -RECORD_NS_MAX, RECORD_NS_MAX, &t_ns) < 0) {
            rc = pt_error_set(err, PT_ERANGE, "%s: line %lld: t: %g is outside [-2^62, 2^62] ns",
                              src, (long long)lineno, t->valuedouble);
            cJSON_Delete(j);
            break;
        }
        rc = push(r, t_ns, kind->valuestring, j);
        if (rc < 0) {
            cJSON_Delete(j);
            pt_error_set(err, rc, "%s: out of memory", src);
        }
    }
    if (rc < 0) {
        pt_record_free(&r);
        return rc;
    }
    *out = r;
    return 0;
}

int pt_record_load(const char *path, pt_record **out, pt_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (out)
        *out = NULL;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    rc = pt_record_parse(text, len, path, out, err);
    free(text);
    return rc;
}

void pt_record_free(pt_record **rec_p)
{
    if (!rec_p || !*rec_p)
        return;
    pt_record *r = *rec_p;
    for (int64_t i = 0; i < r->n; i++)
        cJSON_Delete(r->e[i].json);
    free(r->e);
    pt_telemetry_rx_destroy(&r->rx);
    free(r->model_text);
    free(r);
    *rec_p = NULL;
}

int64_t pt_record_count(const pt_record *rec)
{
    return rec->n;
}
int64_t pt_record_t_ns(const pt_record *rec, int64_t i)
{
    return i >= 0 && i < rec->n ? rec->e[i].t : 0;
}
const char *pt_record_kind(const pt_record *rec, int64_t i)
{
    return i >= 0 && i < rec->n ? rec->e[i].kind : "";
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t num_of(const cJSON *o, const char *name, int64_t def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    int64_t x;
    return cJSON_IsNumber(v) &&
                   pt_double_to_i64(v->valuedouble, -PT_JSON_INT_MAX, PT_JSON_INT_MAX, &x) == 0
               ? x
               : def;
}

/* An optional ns offset: 0 when absent, -1 when present but not a number
 * within +-2^62 (so subtracting it from a 2^53-bounded time cannot overflow). */
static int offset_of(const cJSON *o, const char *name, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *out = 0;
    if (!v)
        return 0;
    return cJSON_IsNumber(v) ? pt_double_to_i64(v->valuedouble, -RECORD_NS_MAX, RECORD_NS_MAX, out)
                             : -1;
}

/* The agent row for id, created with "unknown" fields when absent. */
static pt_store_agent agent_row(pt_store *store, const char *id)
{
    int i = pt_store_find_agent(store, id);
    if (i >= 0)
        return *pt_store_agent_at(store, i);
    pt_store_agent a;
    memset(&a, 0, sizeof a);
    snprintf(a.id, sizeof a.id, "%s", id);
    a.device_index = -1;
    a.stage = a.replica = -1;
    a.step = -1;
    a.last_heard_ns = -1;
    a.hb_age_ms = -1;
    snprintf(a.state, sizeof a.state, "registered");
    return a;
}

/* Decodes the entry's "msg" member; 0 on success. */
static int decode_msg(pt_record *r, const entry *e, pt_msg *m, pt_error *err)
{
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e->json, "msg");
    if (!cJSON_IsObject(msg))
        return pt_error_set(err, PT_EPARSE, "%s: entry at t=%lld has no msg object", r->source,
                            (long long)e->t);
    char *text = cJSON_PrintUnformatted(msg);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = pt_msg_decode(text, strlen(text), r->source, m, err);
    free(text);
    return rc;
}

static void apply_msg(pt_record *r, const entry *e, pt_store *store)
{
    pt_msg m;
    pt_error err = {0};
    int64_t off;
    if (offset_of(e->json, "offset_ns", &off) < 0) {
        r->malformed++;
        pt_store_note(store, "%s: offset_ns: not a number within [-2^62, 2^62] ns", r->source);
        return;
    }
    if (decode_msg(r, e, &m, &err) < 0) {
        r->malformed++;
        pt_store_note(store, "%s", err.msg);
        return;
    }
    const char *channel = str_of(e->json, "channel");
    int received = !strcmp(e->kind, "recv");
    pt_store_agent a = agent_row(store, m.agent);
    if (received)
        a.last_heard_ns = e->t;
    switch (m.type) {
    case PT_MSG_EVENTS:
        for (int k = 0; k < m.u.events.count; k++) {
            m.u.events.events[k].start_ns -= off;
            m.u.events.events[k].end_ns -= off;
        }
        pt_store_events(store, m.u.events.events, m.u.events.count, m.gen);
        break;
    case PT_MSG_METRICS:
        pt_store_metrics(store, &m.u.metrics, m.gen, e->t);
        if (m.u.metrics.step > a.step)
            a.step = m.u.metrics.step;
        break;
    case PT_MSG_REGISTER:
        snprintf(a.host, sizeof a.host, "%s", m.u.reg.host);
        snprintf(a.device, sizeof a.device, "%s",
                 m.u.reg.device_name[0] ? m.u.reg.device_name : m.u.reg.backend);
        a.device_index = m.u.reg.device;
        a.pid = m.u.reg.pid;
        break;
    case PT_MSG_ERROR:
        snprintf(a.last_error, sizeof a.last_error, "%s", m.u.error.reason);
        break;
    case PT_MSG_BYE:
        if (received)
            snprintf(a.state, sizeof a.state, "gone");
        break;
    case PT_MSG_HEARTBEAT:
        if (m.u.heartbeat.step > a.step)
            a.step = m.u.heartbeat.step;
        break;
    default:
        break;
    }
    if (received && channel && !strcmp(channel, "telemetry")) {
        pt_telemetry_rx_observe(r->rx, &m, NULL);
        pt_rx_counts c;
        if (pt_telemetry_rx_agent_counts(r->rx, m.agent, &c) == 0)
            a.dropped = c.dropped;
    }
    if (received || pt_store_find_agent(store, m.agent) >= 0)
        pt_store_set_agent(store, &a);
    pt_msg_clear(&m);
}

static void apply_plan(pt_record *r, const entry *e, pt_store *store)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(e->json, "plan");
    char *text = cJSON_IsObject(plan) ? cJSON_PrintUnformatted(plan) : NULL;
    pt_plan *p = NULL;
    pt_error err = {0};
    if (!text || pt_plan_parse(text, r->source, &p, &err) < 0) {
        r->malformed++;
        pt_store_note(store, "%s", text ? err.msg : "plan entry without a plan");
        free(text);
        return;
    }
    free(text);
    int64_t gen = num_of(e->json, "gen", pt_store_generation(store) + 1);
    pt_store_set_plan(store, p, gen);
    pt_plan_free(&p);
    const cJSON *workers = cJSON_GetObjectItemCaseSensitive(e->json, "workers");
    const cJSON *w;
    cJSON_ArrayForEach(w, workers)
    {
        const char *id = str_of(w, "agent");
        if (!id)
            continue;
        pt_store_agent a = agent_row(store, id);
        a.stage = (int)num_of(w, "stage", -1);
        a.replica = (int)num_of(w, "replica", -1);
        a.pid = num_of(w, "pid", a.pid);
        pt_store_set_agent(store, &a);
    }
    int64_t resume = num_of(e->json, "resume_step", 0);
    if (resume > 0)
        pt_store_note(store, "plan generation %lld resumes at step %lld", (long long)gen,
                      (long long)resume);
}

void pt_record_apply(pt_record *rec, int64_t i, pt_store *store)
{
    if (i < 0 || i >= rec->n)
        return;
    const entry *e = &rec->e[i];
    if (e->t > pt_store_now(store))
        pt_store_set_now(store, e->t);
    if (!strcmp(e->kind, "recv") || !strcmp(e->kind, "sent")) {
        apply_msg(rec, e, store);
    } else if (!strcmp(e->kind, "plan")) {
        apply_plan(rec, e, store);
    } else if (!strcmp(e->kind, "agent") || !strcmp(e->kind, "dead")) {
        const char *id = str_of(e->json, "agent");
        if (!id)
            return;
        pt_store_agent a = agent_row(store, id);
        if (!strcmp(e->kind, "dead")) {
            snprintf(a.state, sizeof a.state, "dead");
            const char *why = str_of(e->json, "reason");
            if (why) {
                snprintf(a.last_error, sizeof a.last_error, "%s", why);
                pt_store_note(store, "%s dead: %s", id, why);
            }
        } else {
            const char *st = str_of(e->json, "state");
            if (st)
                snprintf(a.state, sizeof a.state, "%s", st);
            a.step = num_of(e->json, "step", a.step);
        }
        pt_store_set_agent(store, &a);
    } else if (!strcmp(e->kind, "checkpoint")) {
        pt_store_note(store, "checkpoint of step %lld committed",
                      (long long)num_of(e->json, "step", -1));
    } else if (!strcmp(e->kind, "checkpoint_failed")) {
        const char *why = str_of(e->json, "reason");
        pt_store_note(store, "checkpoint failed: %s", why ? why : "?");
    }
}

void pt_record_summarize(const pt_record *rec, pt_record_summary *out)
{
    memset(out, 0, sizeof *out);
    out->entries = rec->n;
    out->first_step = out->last_step = -1;
    int have = 0;
    for (int64_t i = 0; i < rec->n; i++) {
        const entry *e = &rec->e[i];
        if (!strcmp(e->kind, "plan")) {
            out->plans++;
            continue;
        }
        if (strcmp(e->kind, "recv"))
            continue;
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e->json, "msg");
        const char *type = str_of(msg, "type");
        if (!type)
            continue;
        int64_t off;
        if (offset_of(e->json, "offset_ns", &off) < 0)
            continue; /* apply_msg counts it malformed */
        if (!strcmp(type, "events")) {
            out->event_msgs++;
            const cJSON *ev;
            cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(msg, "events"))
            {
                int64_t a = num_of(ev, "start_ns", 0) - off, b = num_of(ev, "end_ns", 0) - off;
                if (!have || a < out->first_start_ns)
                    out->first_start_ns = a;
                if (!have || b > out->last_end_ns)
                    out->last_end_ns = b;
                have = 1;
                out->events++;
            }
        } else if (!strcmp(type, "metrics")) {
            out->metrics++;
            int64_t st = num_of(msg, "step", -1);
            if (out->first_step < 0 || st < out->first_step)
                out->first_step = st;
            if (st > out->last_step)
                out->last_step = st;
        }
    }
    out->malformed = rec->malformed;
}

const char *pt_record_model_json(pt_record *rec, int64_t before)
{
    int64_t end = before < 0 || before > rec->n ? rec->n : before;
    for (int64_t i = end - 1; i >= 0; i--)
        if (!strcmp(rec->e[i].kind, "plan")) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(rec->e[i].json, "model");
            if (!cJSON_IsObject(m))
                continue;
            free(rec->model_text);
            rec->model_text = cJSON_PrintUnformatted(m);
            return rec->model_text;
        }
    return NULL;
}

/* ---- player ------------------------------------------------------------------ */

struct pt_replay {
    pt_record *rec;
    pt_store *store;
    double speed;
    int paused, started;
    int64_t pos;
    int64_t wall0, rec0; /* wall-clock and record time that correspond */
    int64_t paused_rec;  /* record time where it was paused */
};

int pt_replay_new(pt_record *rec, pt_store *store, double speed, pt_replay **out)
{
    if (!out || !rec || !store)
        return PT_EINVAL;
    pt_replay *r = calloc(1, sizeof *r);
    if (!r)
        return PT_ENOMEM;
    r->rec = rec;
    r->store = store;
    r->speed = speed;
    pt_replay_set_speed(r, speed, 0);
    *out = r;
    return 0;
}

void pt_replay_free(pt_replay **r_p)
{
    if (r_p && *r_p) {
        free(*r_p);
        *r_p = NULL;
    }
}

/* Record time that wall-clock now corresponds to. */
static int64_t rec_time(const pt_replay *r, int64_t now_ns)
{
    if (r->paused)
        return r->paused_rec;
    return r->rec0 + (int64_t)((double)(now_ns - r->wall0) * r->speed);
}

static void start(pt_replay *r, int64_t now_ns)
{
    if (r->started)
        return;
    r->started = 1;
    r->wall0 = now_ns;
    r->rec0 = r->rec->n ? r->rec->e[0].t : 0;
    r->paused_rec = r->rec0;
}

int64_t pt_replay_advance(pt_replay *r, int64_t now_ns)
{
    start(r, now_ns);
    int64_t until = rec_time(r, now_ns), n = 0;
    while (r->pos < r->rec->n && r->rec->e[r->pos].t <= until) {
        pt_record_apply(r->rec, r->pos++, r->store);
        n++;
    }
    return n;
}

void pt_replay_pause(pt_replay *r, int paused, int64_t now_ns)
{
    start(r, now_ns);
    if (paused && !r->paused) {
        r->paused_rec = rec_time(r, now_ns);
        r->paused = 1;
    } else if (!paused && r->paused) {
        r->rec0 = r->paused_rec;
        r->wall0 = now_ns;
        r->paused = 0;
    }
}

int pt_replay_paused(const pt_replay *r)
{
    return r->paused;
}

void pt_replay_set_speed(pt_replay *r, double speed, int64_t now_ns)
{
    if (!(speed >= REPLAY_SPEED_MIN))
        speed = REPLAY_SPEED_MIN;
    if (speed > REPLAY_SPEED_MAX)
        speed = REPLAY_SPEED_MAX;
    if (r->started && !r->paused) {
        r->rec0 = rec_time(r, now_ns);
        r->wall0 = now_ns;
    }
    r->speed = speed;
}

double pt_replay_speed(const pt_replay *r)
{
    return r->speed;
}

static int is_metrics(const entry *e)
{
    if (strcmp(e->kind, "recv"))
        return 0;
    const char *type = str_of(cJSON_GetObjectItemCaseSensitive(e->json, "msg"), "type");
    return type && !strcmp(type, "metrics");
}

static int64_t metrics_step(const entry *e)
{
    return num_of(cJSON_GetObjectItemCaseSensitive(e->json, "msg"), "step", -1);
}

int64_t pt_replay_step(pt_replay *r, int64_t now_ns)
{
    pt_replay_pause(r, 1, now_ns);
    /* the next step is the one of the next metrics entry; it is complete at
     * its last metrics entry before any metrics of a later step (replicas
     * report the same step interleaved with other messages) */
    int64_t target = -1, last = -1;
    for (int64_t j = r->pos; j < r->rec->n; j++) {
        if (!is_metrics(&r->rec->e[j]))
            continue;
        int64_t st = metrics_step(&r->rec->e[j]);
        if (target < 0)
            target = st;
        if (st == target)
            last = j;
        else if (st > target)
            break;
    }
    int64_t end = last < 0 ? r->rec->n : last + 1, n = 0;
    while (r->pos < end) {
        pt_record_apply(r->rec, r->pos++, r->store);
        n++;
    }
    if (r->pos > 0)
        r->paused_rec = r->rec->e[r->pos - 1].t;
    return n;
}

int64_t pt_replay_to_end(pt_replay *r)
{
    int64_t n = 0;
    while (r->pos < r->rec->n) {
        pt_record_apply(r->rec, r->pos++, r->store);
        n++;
    }
    if (r->rec->n)
        r->paused_rec = r->rec->e[r->rec->n - 1].t;
    return n;
}

int pt_replay_done(const pt_replay *r)
{
    return r->pos >= r->rec->n;
}

int64_t pt_replay_position(const pt_replay *r)
{
    return r->pos;
}
