/* Control and telemetry messages: encoding a pt_msg as JSON text. The tree
 * it builds goes through the decoder's checker before it is printed, so
 * whatever encodes also decodes. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/message.h"
#include "protocol/message_internal.h"

/* ---- encoding -------------------------------------------------------------- */

/* cJSON's adders return NULL on no memory; `ok` collects that. */
typedef struct builder {
    int ok;
} builder;

static void add_int(builder *b, cJSON *o, const char *key, int64_t v)
{
    if (!cJSON_AddNumberToObject(o, key, (double)v))
        b->ok = 0;
}
static void add_num(builder *b, cJSON *o, const char *key, double v)
{
    if (!(isfinite(v) ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key)))
        b->ok = 0;
}
static void add_str(builder *b, cJSON *o, const char *key, const char *s)
{
    if (!cJSON_AddStringToObject(o, key, s))
        b->ok = 0;
}
static void add_opt_str(builder *b, cJSON *o, const char *key, const char *s)
{
    if (s[0])
        add_str(b, o, key, s);
}
static cJSON *add_obj(builder *b, cJSON *o, const char *key)
{
    cJSON *c = cJSON_AddObjectToObject(o, key);
    if (!c)
        b->ok = 0;
    return c;
}
static cJSON *add_arr(builder *b, cJSON *o, const char *key)
{
    cJSON *c = cJSON_AddArrayToObject(o, key);
    if (!c)
        b->ok = 0;
    return c;
}
static cJSON *push_obj(builder *b, cJSON *arr)
{
    cJSON *c = cJSON_CreateObject();
    if (!c || !cJSON_AddItemToArray(arr, c)) {
        cJSON_Delete(c);
        b->ok = 0;
        return NULL;
    }
    return c;
}

/* Embeds an assign's plan or model: its text from pt_msg_assign_texts,
 * verbatim (the same bytes in every worker's assign, not parsed again), or,
 * for a message that came with the struct (a decoded one), the struct
 * written now. A text that is not an object's ("{...}") is refused. */
static int add_embedded(builder *b, cJSON *o, const char *key, const char *text, cJSON *tree,
                        pt_error *err)
{
    char *made = NULL;
    if (!text && tree)
        text = made = pt_msg_internal_print_exact(tree);
    cJSON_Delete(tree);
    size_t n = text ? strlen(text) : 0;
    while (n && strchr(" \t\r\n", text[n - 1]))
        n--;
    const char *t = text ? text + strspn(text, " \t\r\n") : NULL;
    if (!t || !*t || *t != '{' || text[n - 1] != '}') {
        free(made);
        return text || made ? pt_error_set(err, PT_EINVAL,
                                           "message (assign): %s: not a JSON object text", key)
                            : pt_error_set(err, PT_EINVAL, "message (assign): %s: missing", key);
    }
    if (!cJSON_AddRawToObject(o, key, text))
        b->ok = 0;
    free(made);
    return 0;
}

/* ---- the body of each type -------------------------------------------------- */

static int body_register(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    const pt_msg_register *r = &m->u.reg;
    add_str(b, o, "host", r->host);
    add_int(b, o, "pid", r->pid);
    add_int(b, o, "device", r->device);
    add_opt_str(b, o, "device_name", r->device_name);
    add_opt_str(b, o, "gpu_bus_id", r->gpu_bus_id);
    add_str(b, o, "backend", r->backend);
    add_int(b, o, "memory_bytes", r->memory_bytes);
    if (r->cap_count < 0 || r->cap_count > PT_MSG_MAX_CAPS)
        return pt_error_set(err, PT_ERANGE,
                            "message (register): capabilities: %d entries, at most %d",
                            r->cap_count, PT_MSG_MAX_CAPS);
    cJSON *caps = add_arr(b, o, "capabilities");
    for (int i = 0; caps && i < r->cap_count; i++) {
        cJSON *c = cJSON_CreateString(r->caps[i]);
        if (!c || !cJSON_AddItemToArray(caps, c)) {
            cJSON_Delete(c);
            b->ok = 0;
        }
    }
    add_opt_str(b, o, "data_endpoint", r->data_endpoint);
    return 0;
}

static void add_peers(builder *b, cJSON *arr, const pt_msg_peer *peers, int n)
{
    for (int i = 0; arr && i < n; i++) {
        cJSON *p = push_obj(b, arr);
        if (!p)
            break;
        add_int(b, p, "rank", peers[i].rank);
        add_int(b, p, "stage", peers[i].stage);
        add_int(b, p, "replica", peers[i].replica);
        add_str(b, p, "endpoint", peers[i].endpoint);
        add_opt_str(b, p, "key", peers[i].key);
    }
}

/* With a peers text the decoder's check meets it raw: the agent's own entry
 * is checked here, on the peers it was made from, with the decoder's words. */
static int check_own_entry(const pt_msg_assign *a, pt_error *err)
{
    for (int i = 0; i < a->peer_count; i++) {
        const pt_msg_peer *q = &a->peers[i];
        if (q->rank != a->rank)
            continue;
        if (q->stage != a->stage || q->replica != a->replica)
            return pt_error_set(err, PT_EINVAL,
                                "message (assign): peers[%d]: this agent's own entry says stage "
                                "%d replica %d, the assign says stage %d replica %d",
                                i, q->stage, q->replica, a->stage, a->replica);
        return 0;
    }
    return pt_error_set(err, PT_EINVAL, "message (assign): rank: %d is not among peers[].rank",
                        a->rank);
}

int pt_msg_assign_peers_text(const pt_msg_peer *peers, int n, char **out, pt_error *err)
{
    *out = NULL;
    if (n < 1 || n > PT_MSG_MAX_PEERS || !peers)
        return pt_error_set(err, PT_ERANGE, "message (assign): peers: %d entries, 1 to %d", n,
                            PT_MSG_MAX_PEERS);
    builder b = {1};
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return pt_error_set(err, PT_ENOMEM, "message: out of memory");
    cJSON *arr = add_arr(&b, o, "peers");
    add_peers(&b, arr, peers, n);
    int rc = b.ok ? pt_msg_internal_check_peers(o, err)
                  : pt_error_set(err, PT_ENOMEM, "message: out of memory");
    if (rc == 0 && !(*out = pt_msg_internal_print_exact(arr)))
        rc = pt_error_set(err, PT_ENOMEM, "message: out of memory");
    cJSON_Delete(o);
    return rc;
}

static int body_assign(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    const pt_msg_assign *a = &m->u.assign;
    cJSON *plan = a->plan_json ? NULL : pt_plan_to_tree(a->plan);
    cJSON *model = a->model_json ? NULL : pt_model_spec_to_tree(a->model);
    int rc = add_embedded(b, o, "plan", a->plan_json, plan, err);
    if (rc < 0) {
        cJSON_Delete(model);
        return rc;
    }
    if ((rc = add_embedded(b, o, "model", a->model_json, model, err)) < 0)
        return rc;
    add_int(b, o, "stage", a->stage);
    add_int(b, o, "replica", a->replica);
    add_int(b, o, "rank", a->rank);
    if (a->chunks > 1)
        add_int(b, o, "chunks", a->chunks);
    if (a->peer_count < 0 || a->peer_count > PT_MSG_MAX_PEERS || (a->peer_count && !a->peers))
        return pt_error_set(err, PT_ERANGE, "message (assign): peers: %d entries, at most %d",
                            a->peer_count, PT_MSG_MAX_PEERS);
    if (a->peers_json) {
        if ((rc = check_own_entry(a, err)) < 0)
            return rc;
        size_t n = strlen(a->peers_json);
        if (n < 2 || a->peers_json[0] != '[' || a->peers_json[n - 1] != ']')
            return pt_error_set(err, PT_EINVAL, "message (assign): peers: not a JSON array text");
        if (!cJSON_AddRawToObject(o, "peers", a->peers_json))
            b->ok = 0;
    } else {
        add_peers(b, add_arr(b, o, "peers"), a->peers, a->peer_count);
    }
    add_str(b, o, "data", a->data);
    add_int(b, o, "seed", a->seed);
    add_opt_str(b, o, "checkpoint_dir", a->checkpoint_dir);
    add_int(b, o, "checkpoint_every", a->checkpoint_every);
    add_int(b, o, "resume_step", a->resume_step);
    add_opt_str(b, o, "telemetry", a->telemetry);
    add_opt_str(b, o, "nccl_id", a->nccl_id);
    if (a->run_token) {
        char tok[17];
        snprintf(tok, sizeof tok, "%016llx", (unsigned long long)a->run_token);
        add_str(b, o, "run_token", tok);
    }
    return 0;
}

static int body_ack(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    const char *of = pt_msg_type_name(m->u.ack.of);
    add_str(b, o, "of", of ? of : "?");
    if (m->u.ack.step != -1)
        add_int(b, o, "step", m->u.ack.step);
    return 0;
}

static int body_start(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    add_int(b, o, "steps", m->u.start.steps);
    return 0;
}

static int body_stop(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    add_opt_str(b, o, "reason", m->u.stop.reason);
    if (m->u.stop.hold && !cJSON_AddBoolToObject(o, "hold", 1))
        b->ok = 0;
    if (m->u.stop.at_step != -1)
        add_int(b, o, "at_step", m->u.stop.at_step);
    return 0;
}

static int body_bye(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    add_opt_str(b, o, "reason", m->u.bye.reason);
    return 0;
}

static int body_checkpoint(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    if (m->u.checkpoint.step != -1)
        add_int(b, o, "step", m->u.checkpoint.step);
    return 0;
}

static int body_checkpoint_ack(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    add_int(b, o, "step", m->u.checkpoint_ack.step);
    add_str(b, o, "dir", m->u.checkpoint_ack.dir);
    return 0;
}

static int body_heartbeat(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    const pt_msg_heartbeat *h = &m->u.heartbeat;
    add_int(b, o, "hb", h->hb);
    add_int(b, o, "t_send", h->t_send);
    if (h->has_echo) {
        cJSON *e = add_obj(b, o, "echo");
        if (e) {
            add_int(b, e, "hb", h->echo_hb);
            add_int(b, e, "t_orig", h->echo_t_orig);
            add_int(b, e, "t_recv", h->echo_t_recv);
        }
    }
    add_opt_str(b, o, "state", h->state);
    if (h->step != -1)
        add_int(b, o, "step", h->step);
    if (h->data_dropped != -1)
        add_int(b, o, "data_dropped", h->data_dropped);
    return 0;
}

static int body_error(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    if (m->u.error.stage != -1)
        add_int(b, o, "stage", m->u.error.stage);
    if (m->u.error.replica != -1)
        add_int(b, o, "replica", m->u.error.replica);
    if (m->u.error.code != 0)
        add_int(b, o, "code", m->u.error.code);
    add_str(b, o, "reason", m->u.error.reason);
    return 0;
}

static int body_events(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    const pt_msg_events *e = &m->u.events;
    if (e->count < 0 || e->count > PT_MSG_MAX_EVENTS || (e->count && !e->events))
        return pt_error_set(err, PT_ERANGE,
                            "message (events): events: %d events in one batch, at most %d",
                            e->count, PT_MSG_MAX_EVENTS);
    cJSON *arr = add_arr(b, o, "events");
    for (int i = 0; arr && i < e->count; i++) {
        const pt_msg_event *v = &e->events[i];
        if (!pt_op_info_of(v->op))
            return pt_error_set(err, PT_EINVAL,
                                "message (events): events[%d].op: %d is not an op kind", i,
                                (int)v->op);
        cJSON *x = push_obj(b, arr);
        if (!x)
            break;
        add_int(b, x, "stage", v->stage);
        add_int(b, x, "replica", v->replica);
        add_int(b, x, "step", v->step);
        add_int(b, x, "mb", v->mb);
        add_str(b, x, "op", pt_op_name(v->op));
        add_int(b, x, "version", v->version);
        add_int(b, x, "start_ns", v->start_ns);
        add_int(b, x, "end_ns", v->end_ns);
        add_int(b, x, "bytes", v->bytes);
    }
    return 0;
}

/* The loss of each step a fold covers (steps > 1). */
static void add_losses(builder *b, cJSON *o, const pt_msg_metrics *x)
{
    add_int(b, o, "steps", x->steps);
    cJSON *l = add_arr(b, o, "losses");
    for (int k = 0; l && k < x->steps && k < PT_MSG_FOLD_MAX; k++) {
        double v = x->losses[k];
        cJSON *n = isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
        if (!n || !cJSON_AddItemToArray(l, n)) {
            cJSON_Delete(n);
            b->ok = 0;
        }
    }
}

static int body_metrics(builder *b, cJSON *o, const pt_msg *m, pt_error *err)
{
    (void)err;
    const pt_msg_metrics *x = &m->u.metrics;
    add_int(b, o, "stage", x->stage);
    add_int(b, o, "replica", x->replica);
    add_int(b, o, "step", x->step);
    add_num(b, o, "loss", x->loss);
    add_num(b, o, "samples_per_s", x->samples_per_s);
    add_num(b, o, "iter_ms", x->iter_ms);
    if (x->steps > 1)
        add_losses(b, o, x);
    cJSON *mem = add_obj(b, o, "memory");
    for (int k = 0; mem && k <= PT_MSG_MEM_COUNT; k++) {
        cJSON *c = add_obj(b, mem, k < PT_MSG_MEM_COUNT ? pt_msg_mem_name(k) : "total");
        if (!c)
            break;
        add_int(b, c, "cur", k < PT_MSG_MEM_COUNT ? x->mem_cur[k] : x->total_cur);
        add_int(b, c, "peak", k < PT_MSG_MEM_COUNT ? x->mem_peak[k] : x->total_peak);
    }
    if (x->device_total > 0) {
        cJSON *d = add_obj(b, o, "device");
        if (d) {
            add_int(b, d, "free", x->device_free);
            add_int(b, d, "total", x->device_total);
        }
    }
    return 0;
}

typedef int (*body_writer)(builder *b, cJSON *o, const pt_msg *m, pt_error *err);
static const body_writer write_body[PT_MSG_TYPE_COUNT] = {
    [PT_MSG_REGISTER] = body_register,
    [PT_MSG_ASSIGN] = body_assign,
    [PT_MSG_ACK] = body_ack,
    [PT_MSG_START] = body_start,
    [PT_MSG_STOP] = body_stop,
    [PT_MSG_BYE] = body_bye,
    [PT_MSG_CHECKPOINT] = body_checkpoint,
    [PT_MSG_CHECKPOINT_ACK] = body_checkpoint_ack,
    [PT_MSG_HEARTBEAT] = body_heartbeat,
    [PT_MSG_ERROR] = body_error,
    [PT_MSG_EVENTS] = body_events,
    [PT_MSG_METRICS] = body_metrics,
};

int pt_msg_encode(const pt_msg *m, char **out, size_t *len, pt_error *err)
{
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!m || !out)
        return pt_error_set(err, PT_EINVAL, "message: encode: NULL argument");
    const char *type = pt_msg_type_name(m->type);
    if (!type)
        return pt_error_set(err, PT_EINVAL, "message: type: %d is not a message type",
                            (int)m->type);
    builder b = {1};
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return pt_error_set(err, PT_ENOMEM, "message: out of memory");
    add_int(&b, o, "v", PT_MSG_VERSION);
    add_str(&b, o, "type", type);
    add_str(&b, o, "agent", m->agent);
    add_int(&b, o, "seq", m->seq);
    add_int(&b, o, "gen", m->gen);
    if (pt_msg_type_is_request(m->type) || pt_msg_internal_is_reply(m->type) ||
        (m->type == PT_MSG_ERROR && m->req != 0))
        add_int(&b, o, "req", m->req);
    int rc = write_body[m->type]
                 ? write_body[m->type](&b, o, m, err)
                 : pt_error_set(err, PT_EINVAL, "message: type: %d has no body", (int)m->type);
    if (rc == 0 && !b.ok)
        rc = pt_error_set(err, PT_ENOMEM, "message: out of memory");
    if (rc == 0) {
        /* The decoder's checks, on the very tree that will be sent. */
        pt_msg check;
        rc = pt_msg_internal_check_tree(o, "message", &check, err);
        pt_msg_clear(&check);
    }
    char *text = rc == 0 ? pt_msg_internal_print_exact(o) : NULL;
    cJSON_Delete(o);
    if (rc < 0)
        return rc;
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "message: out of memory");
    size_t n = strlen(text);
    if (n > PT_MSG_MAX_BYTES) {
        free(text);
        return pt_error_set(err, PT_ERANGE, "message (%s): %zu bytes, longer than the %u allowed",
                            type, n, PT_MSG_MAX_BYTES);
    }
    *out = text;
    if (len)
        *len = n;
    return 0;
}
