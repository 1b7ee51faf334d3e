/* Control and telemetry messages: names, init/clear, the checker and
 * decoding, acceptance. One checker (pt_msg_internal_check_tree) reads a
 * cJSON tree into a pt_msg; decode runs it on parsed text and encode
 * (message_encode.c) on the tree it built, so both refuse the same things. */
#include "protocol/message.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/sched_kind.h"
#include "protocol/keyfile.h"
#include "protocol/message_internal.h"

static const char *const type_names[PT_MSG_TYPE_COUNT] = {
    [PT_MSG_REGISTER] = "register",
    [PT_MSG_ASSIGN] = "assign",
    [PT_MSG_ACK] = "ack",
    [PT_MSG_START] = "start",
    [PT_MSG_STOP] = "stop",
    [PT_MSG_CHECKPOINT] = "checkpoint",
    [PT_MSG_CHECKPOINT_ACK] = "checkpoint_ack",
    [PT_MSG_HEARTBEAT] = "heartbeat",
    [PT_MSG_ERROR] = "error",
    [PT_MSG_BYE] = "bye",
    [PT_MSG_EVENTS] = "events",
    [PT_MSG_METRICS] = "metrics",
};

static const unsigned type_senders[PT_MSG_TYPE_COUNT] = {
    [PT_MSG_REGISTER] = PT_MSG_BY_AGENT,
    [PT_MSG_ASSIGN] = PT_MSG_BY_CONSOLE,
    [PT_MSG_ACK] = PT_MSG_BY_AGENT,
    [PT_MSG_START] = PT_MSG_BY_CONSOLE,
    [PT_MSG_STOP] = PT_MSG_BY_CONSOLE,
    [PT_MSG_CHECKPOINT] = PT_MSG_BY_CONSOLE,
    [PT_MSG_CHECKPOINT_ACK] = PT_MSG_BY_AGENT,
    [PT_MSG_HEARTBEAT] = PT_MSG_BY_CONSOLE | PT_MSG_BY_AGENT,
    [PT_MSG_ERROR] = PT_MSG_BY_CONSOLE | PT_MSG_BY_AGENT,
    [PT_MSG_BYE] = PT_MSG_BY_CONSOLE | PT_MSG_BY_AGENT,
    [PT_MSG_EVENTS] = PT_MSG_BY_AGENT,
    [PT_MSG_METRICS] = PT_MSG_BY_AGENT,
};

static const char *const mem_names[PT_MSG_MEM_COUNT] = {"weights", "grads", "optim",
                                                        "acts",    "stash", "comm"};

const char *pt_msg_type_name(pt_msg_type type)
{
    return (int)type >= 0 && type < PT_MSG_TYPE_COUNT ? type_names[type] : NULL;
}

pt_msg_type pt_msg_type_parse(const char *name)
{
    for (int t = 0; name && t < PT_MSG_TYPE_COUNT; t++)
        if (!strcmp(name, type_names[t]))
            return (pt_msg_type)t;
    return PT_MSG_TYPE_COUNT;
}

unsigned pt_msg_type_senders(pt_msg_type type)
{
    return (int)type >= 0 && type < PT_MSG_TYPE_COUNT ? type_senders[type] : 0;
}

int pt_msg_type_is_request(pt_msg_type type)
{
    return type == PT_MSG_ASSIGN || type == PT_MSG_START || type == PT_MSG_STOP ||
           type == PT_MSG_CHECKPOINT;
}

int pt_msg_internal_is_reply(pt_msg_type type)
{
    return type == PT_MSG_ACK || type == PT_MSG_CHECKPOINT_ACK;
}

const char *pt_msg_mem_name(int category)
{
    return category >= 0 && category < PT_MSG_MEM_COUNT ? mem_names[category] : NULL;
}

/* Compact, exact text of a tree we own, deleted. */
static int tree_text(cJSON *tree, char **out)
{
    *out = tree ? pt_msg_internal_print_exact(tree) : NULL;
    cJSON_Delete(tree);
    return *out ? 0 : PT_ENOMEM;
}

int pt_msg_assign_texts(const pt_plan *plan, const pt_model_spec *model, char **plan_json,
                        char **model_json, pt_error *err)
{
    *plan_json = *model_json = NULL;
    if (!plan || !model)
        return pt_error_set(err, PT_EINVAL, "message (assign): a plan and a model are needed");
    if (tree_text(pt_plan_to_tree(plan), plan_json) < 0 ||
        tree_text(pt_model_spec_to_tree(model), model_json) < 0) {
        free(*plan_json);
        *plan_json = NULL;
        return pt_error_set(err, PT_ENOMEM, "message (assign): out of memory");
    }
    return 0;
}

int64_t pt_msg_now_ns(void)
{
    static _Atomic int64_t origin;
    int64_t now = pt_clock_ns();
    int64_t o = atomic_load(&origin);
    if (o == 0) {
        int64_t want = now - 1; /* so the first reading is 1, and 0 means "unset" */
        if (!atomic_compare_exchange_strong(&origin, &o, want))
            return now - o; /* another thread set it first: o holds its value */
        return now - want;
    }
    return now - o;
}

void pt_msg_init(pt_msg *m, pt_msg_type type, const char *agent)
{
    if (!m)
        return;
    memset(m, 0, sizeof *m);
    m->type = type;
    snprintf(m->agent, sizeof m->agent, "%s", agent ? agent : "");
    switch (type) {
    case PT_MSG_CHECKPOINT:
        m->u.checkpoint.step = -1;
        break;
    case PT_MSG_HEARTBEAT:
        m->u.heartbeat.step = -1;
        m->u.heartbeat.data_dropped = -1;
        break;
    case PT_MSG_ERROR:
        m->u.error.stage = -1;
        m->u.error.replica = -1;
        break;
    case PT_MSG_METRICS:
        m->u.metrics.loss = NAN;
        break;
    case PT_MSG_ACK:
        m->u.ack.of = PT_MSG_ASSIGN;
        m->u.ack.step = -1;
        break;
    case PT_MSG_STOP:
        m->u.stop.at_step = -1;
        break;
    case PT_MSG_REGISTER:
        m->u.reg.device = -1;
        break;
    default:
        break;
    }
}

void pt_msg_clear(pt_msg *m)
{
    if (!m)
        return;
    if (m->type == PT_MSG_ASSIGN) {
        pt_plan_free(&m->u.assign.plan);
        pt_model_spec_free(&m->u.assign.model);
        free(m->u.assign.peers);
    } else if (m->type == PT_MSG_EVENTS) {
        free(m->u.events.events);
    }
    memset(m, 0, sizeof *m);
}

/* ---- checking a tree ------------------------------------------------------- */

static int check_charset(pt_jr *jr, const char *path, const char *key, const char *s,
                         const char *extra, const char *what)
{
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (c && strchr(extra, c));
        if (!ok)
            return pt_jr_fail(jr, PT_EINVAL, path, key,
                              "character 0x%02x not allowed in %s (letters, digits and \"%s\")",
                              (unsigned char)c, what, extra);
    }
    return 0;
}

static int check_endpoint(pt_jr *jr, const char *path, const char *key, const char *ep)
{
    if (strncmp(ep, "tcp://", 6) && strncmp(ep, "ipc://", 6) && strncmp(ep, "inproc://", 9))
        return pt_jr_fail(jr, PT_EINVAL, path, key,
                          "\"%.64s\" is not a tcp://, ipc:// or inproc:// endpoint", ep);
    return 0;
}

/* An optional string; the empty string is allowed and means "absent". */
static int opt_str(pt_jr *jr, const cJSON *obj, const char *path, const char *key, char *out,
                   size_t cap)
{
    const cJSON *item = pt_jr_item(obj, key);
    if (item && cJSON_IsString(item) && item->valuestring && !item->valuestring[0]) {
        out[0] = '\0';
        return 0;
    }
    return pt_jr_str(jr, obj, path, key, PT_JR_OPTIONAL, "", out, cap);
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

#define REQ  PT_JR_REQUIRED
#define OPT  PT_JR_OPTIONAL
#define IMAX PT_MSG_INT_MAX
#define IDX  (PT_MSG_MAX_INDEX - 1)

static const char *const env_keys[] = {"v", "type", "agent", "seq", "gen", "req"};
#define ENV_KEYS 6

static const char *const *keys_of(pt_msg_type t)
{
    static const char *const reg[] = {
        "host",         "pid",          "device",        "device_name", "backend",
        "memory_bytes", "capabilities", "data_endpoint", "gpu_bus_id",  NULL};
    static const char *const assign[] = {
        "plan",        "model",     "stage",   "replica",        "rank",
        "peers",       "data",      "seed",    "checkpoint_dir", "checkpoint_every",
        "resume_step", "telemetry", "nccl_id", "run_token",      "chunks",
        NULL};
    static const char *const ack[] = {"of", "step", NULL};
    static const char *const stop[] = {"reason", "hold", "at_step", NULL};
    static const char *const start[] = {"steps", NULL};
    static const char *const reason[] = {"reason", NULL};
    static const char *const ckpt[] = {"step", NULL};
    static const char *const ckpt_ack[] = {"step", "dir", NULL};
    static const char *const hb[] = {"hb", "t_send", "echo", "state", "step", "data_dropped", NULL};
    static const char *const error[] = {"stage", "replica", "code", "reason", NULL};
    static const char *const events[] = {"events", NULL};
    static const char *const metrics[] = {"stage",         "replica", "step",   "loss",
                                          "samples_per_s", "iter_ms", "memory", "device",
                                          "steps",         "losses",  NULL};
    switch (t) {
    case PT_MSG_REGISTER:
        return reg;
    case PT_MSG_ASSIGN:
        return assign;
    case PT_MSG_ACK:
        return ack;
    case PT_MSG_START:
        return start;
    case PT_MSG_STOP:
        return stop;
    case PT_MSG_BYE:
        return reason;
    case PT_MSG_CHECKPOINT:
        return ckpt;
    case PT_MSG_CHECKPOINT_ACK:
        return ckpt_ack;
    case PT_MSG_HEARTBEAT:
        return hb;
    case PT_MSG_ERROR:
        return error;
    case PT_MSG_EVENTS:
        return events;
    case PT_MSG_METRICS:
        return metrics;
    default:
        return NULL;
    }
}

static int check_register(pt_jr *jr, const cJSON *o, pt_msg_register *r)
{
    TRY(pt_jr_str(jr, o, "", "host", REQ, NULL, r->host, sizeof r->host));
    TRY(pt_jr_int64(jr, o, "", "pid", REQ, 0, 1, 2147483647, &r->pid));
    TRY(pt_jr_int(jr, o, "", "device", REQ, -1, -1, IDX, &r->device));
    TRY(opt_str(jr, o, "", "device_name", r->device_name, sizeof r->device_name));
    TRY(opt_str(jr, o, "", "gpu_bus_id", r->gpu_bus_id, sizeof r->gpu_bus_id));
    TRY(pt_jr_str(jr, o, "", "backend", REQ, NULL, r->backend, sizeof r->backend));
    TRY(check_charset(jr, "", "backend", r->backend, "_-", "a backend name"));
    TRY(pt_jr_int64(jr, o, "", "memory_bytes", OPT, 0, 0, IMAX, &r->memory_bytes));
    const cJSON *caps;
    TRY(pt_jr_array(jr, o, "", "capabilities", OPT, 0, &caps, &r->cap_count));
    if (r->cap_count > PT_MSG_MAX_CAPS)
        return pt_jr_fail(jr, PT_ERANGE, "", "capabilities", "%d entries, at most %d", r->cap_count,
                          PT_MSG_MAX_CAPS);
    int i = 0;
    for (const cJSON *c = caps ? caps->child : NULL; c; c = c->next, i++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "capabilities", i);
        if (!cJSON_IsString(c) || !c->valuestring || !c->valuestring[0])
            return pt_jr_fail(jr, PT_EINVAL, path, NULL, "must be a non-empty string");
        if (strlen(c->valuestring) >= PT_MSG_NAME_MAX)
            return pt_jr_fail(jr, PT_ERANGE, path, NULL, "longer than %d characters",
                              PT_MSG_NAME_MAX - 1);
        TRY(check_charset(jr, path, NULL, c->valuestring, "_-.", "a capability"));
        snprintf(r->caps[i], sizeof r->caps[i], "%s", c->valuestring);
    }
    TRY(opt_str(jr, o, "", "data_endpoint", r->data_endpoint, sizeof r->data_endpoint));
    if (r->data_endpoint[0])
        TRY(check_endpoint(jr, "", "data_endpoint", r->data_endpoint));
    return 0;
}

/* cJSON prints numbers with 15 significant digits whenever that reads back
 * within a relative epsilon, so 2^53 - 1 would come out as
 * 9.00719925474099e+15 and 0.1 + 0.2 as 0.3. This turns every number of a
 * tree we own into raw text that reads back exactly: integers in full, other
 * values with the fewest of 15, 16 or 17 digits that strtod returns
 * unchanged. 0, or PT_ENOMEM. */
static int exact_numbers(cJSON *item)
{
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item) && isfinite(item->valuedouble)) {
            double d = item->valuedouble;
            char buf[40];
            if (d == floor(d) && fabs(d) <= (double)PT_MSG_INT_MAX) {
                snprintf(buf, sizeof buf, "%lld", (long long)d);
            } else {
                for (int digits = 15; digits <= 17; digits++) {
                    snprintf(buf, sizeof buf, "%.*g", digits, d);
                    if (strtod(buf, NULL) == d)
                        break;
                }
            }
            char *raw = cJSON_malloc(strlen(buf) + 1);
            if (!raw)
                return PT_ENOMEM;
            memcpy(raw, buf, strlen(buf) + 1);
            item->type = cJSON_Raw;
            item->valuestring = raw;
        } else if ((cJSON_IsObject(item) || cJSON_IsArray(item)) &&
                   exact_numbers(item->child) < 0) {
            return PT_ENOMEM;
        }
    }
    return 0;
}

char *pt_msg_internal_print_exact(cJSON *root)
{
    if (exact_numbers(root) < 0)
        return NULL;
    char *text = cJSON_PrintUnformatted(root);
    if (!text)
        return NULL;
    char *copy = strdup(text);
    cJSON_free(text);
    return copy;
}

static int check_peer_list(pt_jr *jr, const cJSON *peers, pt_msg_assign *a, const char *const *keys,
                           int16_t *by_rank);

static int check_peers(pt_jr *jr, const cJSON *o, pt_msg_assign *a)
{
    const cJSON *peers = pt_jr_item(o, "peers");
    if (peers && cJSON_IsRaw(peers))
        return 0; /* pt_msg_assign_peers_text's, checked when it was made (message_encode.c) */
    TRY(pt_jr_array(jr, o, "", "peers", REQ, 1, &peers, &a->peer_count));
    if (a->peer_count > PT_MSG_MAX_PEERS)
        return pt_jr_fail(jr, PT_ERANGE, "", "peers", "%d entries, at most %d", a->peer_count,
                          PT_MSG_MAX_PEERS);
    a->peers = calloc((size_t)a->peer_count, sizeof *a->peers);
    if (!a->peers)
        return pt_jr_fail(jr, PT_ENOMEM, "", "peers", "out of memory");
    static const char *const keys[] = {"rank", "stage", "replica", "endpoint", "key", NULL};
    /* peers[] by rank (ranks are below PT_MSG_MAX_RANK): a repeated rank is
     * found in O(1), so a 1,024-peer assign is not a million comparisons */
    int16_t *by_rank = malloc(PT_MSG_MAX_RANK * sizeof *by_rank);
    if (!by_rank)
        return pt_jr_fail(jr, PT_ENOMEM, "", "peers", "out of memory");
    for (int r = 0; r < PT_MSG_MAX_RANK; r++)
        by_rank[r] = -1;
    int rc = check_peer_list(jr, peers, a, keys, by_rank);
    free(by_rank);
    return rc;
}

static int check_peer_list(pt_jr *jr, const cJSON *peers, pt_msg_assign *a, const char *const *keys,
                           int16_t *by_rank)
{
    int i = 0, self_found = 0;
    for (const cJSON *p = peers->child; p; p = p->next, i++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "peers", i);
        pt_msg_peer *q = &a->peers[i];
        TRY(pt_jr_is_object(jr, p, path));
        TRY(pt_jr_keys(jr, p, path, keys));
        TRY(pt_jr_int(jr, p, path, "rank", REQ, 0, 0, PT_MSG_MAX_RANK - 1, &q->rank));
        TRY(pt_jr_int(jr, p, path, "stage", REQ, 0, 0, IDX, &q->stage));
        TRY(pt_jr_int(jr, p, path, "replica", REQ, 0, 0, IDX, &q->replica));
        TRY(pt_jr_str(jr, p, path, "endpoint", REQ, NULL, q->endpoint, sizeof q->endpoint));
        TRY(check_endpoint(jr, path, "endpoint", q->endpoint));
        TRY(opt_str(jr, p, path, "key", q->key, sizeof q->key));
        if (q->key[0] && !pt_key_z85_valid(q->key))
            return pt_jr_fail(jr, PT_EINVAL, path, "key", "not 40 characters of Z85");
        if (by_rank[q->rank] >= 0)
            return pt_jr_fail(jr, PT_EINVAL, path, "rank", "%d is also the rank of peers[%d]",
                              q->rank, by_rank[q->rank]);
        by_rank[q->rank] = (int16_t)i;
        if (q->rank == a->rank) {
            self_found = 1;
            if (q->stage != a->stage || q->replica != a->replica)
                return pt_jr_fail(jr, PT_EINVAL, path, NULL,
                                  "this agent's own entry says stage %d replica %d, the assign "
                                  "says stage %d replica %d",
                                  q->stage, q->replica, a->stage, a->replica);
        }
    }
    if (!self_found)
        return pt_jr_fail(jr, PT_EINVAL, "", "rank", "%d is not among peers[].rank", a->rank);
    return 0;
}

int pt_msg_internal_check_peers(const cJSON *o, pt_error *err)
{
    pt_jr jr = {"message (assign)", err};
    pt_msg_assign a;
    memset(&a, 0, sizeof a);
    const cJSON *first = cJSON_GetArrayItem(pt_jr_item(o, "peers"), 0);
    /* the agent's own entry is each assign's to check (body_assign): here
     * it is taken to be the first */
    pt_jr_int(&jr, first, "", "rank", OPT, 0, 0, PT_MSG_MAX_RANK - 1, &a.rank);
    pt_jr_int(&jr, first, "", "stage", OPT, 0, 0, IDX, &a.stage);
    pt_jr_int(&jr, first, "", "replica", OPT, 0, 0, IDX, &a.replica);
    int rc = check_peers(&jr, o, &a);
    free(a.peers);
    return rc;
}

/* The plan or model of an assign, read once from the message's tree; the
 * encoder's check (pt_msg_encode) meets the texts it embedded verbatim
 * (raw items) and takes them as they are: they are pt_msg_assign_texts's. */
static int check_embedded(pt_jr *jr, const cJSON *o, const char *key, pt_plan **plan,
                          pt_model_spec **model)
{
    const cJSON *item = pt_jr_item(o, key);
    if (item && cJSON_IsRaw(item))
        return 0;
    TRY(pt_jr_object(jr, o, "", key, REQ, &item));
    char src[PT_JPATH_MAX + 64];
    snprintf(src, sizeof src, "%.200s: %s", jr->source, key);
    int rc = plan ? pt_plan_from_tree(item, src, plan, jr->err)
                  : pt_model_spec_from_tree(item, src, model, jr->err);
    return rc;
}

static int check_assign(pt_jr *jr, const cJSON *o, pt_msg_assign *a)
{
    TRY(pt_jr_int(jr, o, "", "stage", REQ, 0, 0, IDX, &a->stage));
    TRY(pt_jr_int(jr, o, "", "replica", REQ, 0, 0, IDX, &a->replica));
    TRY(pt_jr_int(jr, o, "", "rank", REQ, 0, 0, PT_MSG_MAX_RANK - 1, &a->rank));
    TRY(pt_jr_int(jr, o, "", "chunks", OPT, 1, 1, PT_SCHED_CHUNKS_MAX, &a->chunks));
    TRY(check_peers(jr, o, a));
    TRY(pt_jr_str(jr, o, "", "data", REQ, NULL, a->data, sizeof a->data));
    TRY(pt_jr_int64(jr, o, "", "seed", REQ, 0, 0, IMAX, &a->seed));
    TRY(opt_str(jr, o, "", "checkpoint_dir", a->checkpoint_dir, sizeof a->checkpoint_dir));
    const char *why = NULL;
    if (a->checkpoint_dir[0] && pt_path_check_inside(a->checkpoint_dir, &why) < 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "checkpoint_dir",
                          "\"%s\" %s: it must be a folder inside the agent's checkpoint root",
                          a->checkpoint_dir, why);
    TRY(pt_jr_int64(jr, o, "", "checkpoint_every", OPT, 0, 0, IMAX, &a->checkpoint_every));
    TRY(pt_jr_int64(jr, o, "", "resume_step", OPT, 0, 0, IMAX, &a->resume_step));
    if (a->resume_step > 0 && !a->checkpoint_dir[0])
        return pt_jr_fail(jr, PT_EINVAL, "", "resume_step",
                          "%lld needs a checkpoint_dir to resume from", (long long)a->resume_step);
    TRY(opt_str(jr, o, "", "telemetry", a->telemetry, sizeof a->telemetry));
    if (a->telemetry[0])
        TRY(check_endpoint(jr, "", "telemetry", a->telemetry));
    TRY(opt_str(jr, o, "", "nccl_id", a->nccl_id, sizeof a->nccl_id));
    for (const char *p = a->nccl_id; *p; p++)
        if (!strchr("0123456789abcdefABCDEF", *p))
            return pt_jr_fail(jr, PT_EINVAL, "", "nccl_id", "must be hexadecimal digits");
    char tok[24] = "";
    TRY(opt_str(jr, o, "", "run_token", tok, sizeof tok));
    if (tok[0]) {
        if (strlen(tok) != 16 || strspn(tok, "0123456789abcdef") != 16)
            return pt_jr_fail(jr, PT_EINVAL, "", "run_token",
                              "must be 16 lower-case hexadecimal digits");
        a->run_token = strtoull(tok, NULL, 16);
    }
    /* last: the assign's own fields are named first when they are wrong */
    TRY(check_embedded(jr, o, "plan", &a->plan, NULL));
    TRY(check_embedded(jr, o, "model", NULL, &a->model));
    return 0;
}

static int check_heartbeat(pt_jr *jr, const cJSON *o, pt_msg_heartbeat *h)
{
    TRY(pt_jr_int64(jr, o, "", "hb", REQ, 0, 0, IMAX, &h->hb));
    TRY(pt_jr_int64(jr, o, "", "t_send", REQ, 0, 0, IMAX, &h->t_send));
    const cJSON *echo;
    TRY(pt_jr_object(jr, o, "", "echo", OPT, &echo));
    if (echo) {
        static const char *const keys[] = {"hb", "t_orig", "t_recv", NULL};
        TRY(pt_jr_keys(jr, echo, "echo", keys));
        h->has_echo = 1;
        TRY(pt_jr_int64(jr, echo, "echo", "hb", REQ, 0, 0, IMAX, &h->echo_hb));
        TRY(pt_jr_int64(jr, echo, "echo", "t_orig", REQ, 0, 0, IMAX, &h->echo_t_orig));
        TRY(pt_jr_int64(jr, echo, "echo", "t_recv", REQ, 0, 0, IMAX, &h->echo_t_recv));
        /* The answer leaves after the question arrived, on the sender's clock. */
        if (h->t_send < h->echo_t_recv)
            return pt_jr_fail(jr, PT_EINVAL, "", "t_send",
                              "%lld is before echo.t_recv %lld (same clock)", (long long)h->t_send,
                              (long long)h->echo_t_recv);
    }
    TRY(opt_str(jr, o, "", "state", h->state, sizeof h->state));
    TRY(check_charset(jr, "", "state", h->state, "_-", "a state name"));
    TRY(pt_jr_int64(jr, o, "", "step", OPT, -1, -1, IMAX, &h->step));
    TRY(pt_jr_int64(jr, o, "", "data_dropped", OPT, -1, 0, IMAX, &h->data_dropped));
    return 0;
}

/* The op of an event: one of the names of protocol/op.h. */
static int check_op(pt_jr *jr, const cJSON *x, const char *path, pt_op_kind *out)
{
    char name[PT_OP_NAME_MAX];
    TRY(pt_jr_str(jr, x, path, "op", REQ, NULL, name, sizeof name));
    TRY(check_charset(jr, path, "op", name, "_", "an op kind"));
    if (pt_op_parse(name, out) < 0) {
        char known[PT_OP_NAME_MAX * PT_OP_KIND_COUNT];
        return pt_jr_fail(jr, PT_EINVAL, path, "op", "unknown op kind \"%s\" (one of %s)", name,
                          pt_op_names_list(known, (int)sizeof known, ", "));
    }
    return 0;
}

static int check_events(pt_jr *jr, const cJSON *o, pt_msg_events *e)
{
    const cJSON *arr;
    TRY(pt_jr_array(jr, o, "", "events", REQ, 1, &arr, &e->count));
    if (e->count > PT_MSG_MAX_EVENTS)
        return pt_jr_fail(jr, PT_ERANGE, "", "events", "%d events in one batch, at most %d",
                          e->count, PT_MSG_MAX_EVENTS);
    e->events = calloc((size_t)e->count, sizeof *e->events);
    if (!e->events)
        return pt_jr_fail(jr, PT_ENOMEM, "", "events", "out of memory");
    static const char *const keys[] = {"stage",   "replica",  "step",   "mb",    "op",
                                       "version", "start_ns", "end_ns", "bytes", NULL};
    int i = 0;
    for (const cJSON *x = arr->child; x; x = x->next, i++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "events", i);
        pt_msg_event *v = &e->events[i];
        TRY(pt_jr_is_object(jr, x, path));
        TRY(pt_jr_keys(jr, x, path, keys));
        TRY(pt_jr_int(jr, x, path, "stage", REQ, 0, 0, IDX, &v->stage));
        TRY(pt_jr_int(jr, x, path, "replica", REQ, 0, 0, IDX, &v->replica));
        TRY(pt_jr_int64(jr, x, path, "step", REQ, 0, 0, IMAX, &v->step));
        TRY(pt_jr_int(jr, x, path, "mb", REQ, 0, -1, 2147483647, &v->mb));
        TRY(check_op(jr, x, path, &v->op));
        TRY(pt_jr_int64(jr, x, path, "version", OPT, -1, -1, IMAX, &v->version));
        TRY(pt_jr_int64(jr, x, path, "start_ns", REQ, 0, 0, IMAX, &v->start_ns));
        TRY(pt_jr_int64(jr, x, path, "end_ns", REQ, 0, 0, IMAX, &v->end_ns));
        if (v->end_ns < v->start_ns)
            return pt_jr_fail(jr, PT_EINVAL, path, "end_ns", "%lld is before start_ns %lld",
                              (long long)v->end_ns, (long long)v->start_ns);
        TRY(pt_jr_int64(jr, x, path, "bytes", OPT, 0, 0, IMAX, &v->bytes));
    }
    return 0;
}

static int check_cur_peak(pt_jr *jr, const cJSON *mem, const char *key, int64_t *cur, int64_t *peak)
{
    const cJSON *c;
    TRY(pt_jr_object(jr, mem, "memory", key, OPT, &c));
    *cur = *peak = 0;
    if (!c)
        return 0;
    char path[PT_JPATH_MAX];
    pt_jr_join(path, sizeof path, "memory", key);
    static const char *const keys[] = {"cur", "peak", NULL};
    TRY(pt_jr_keys(jr, c, path, keys));
    TRY(pt_jr_int64(jr, c, path, "cur", REQ, 0, 0, IMAX, cur));
    TRY(pt_jr_int64(jr, c, path, "peak", REQ, 0, 0, IMAX, peak));
    if (*peak < *cur)
        return pt_jr_fail(jr, PT_EINVAL, path, "peak", "%lld is below cur %lld", (long long)*peak,
                          (long long)*cur);
    return 0;
}

static int check_metrics(pt_jr *jr, const cJSON *o, pt_msg_metrics *m)
{
    static const pt_jr_range nonneg = {0, INFINITY, 0, 0};
    TRY(pt_jr_int(jr, o, "", "stage", REQ, 0, 0, IDX, &m->stage));
    TRY(pt_jr_int(jr, o, "", "replica", REQ, 0, 0, IDX, &m->replica));
    TRY(pt_jr_int64(jr, o, "", "step", REQ, 0, 0, IMAX, &m->step));
    const cJSON *loss = pt_jr_item(o, "loss");
    if (!loss || cJSON_IsNull(loss))
        m->loss = NAN;
    else
        TRY(pt_jr_num(jr, o, "", "loss", REQ, 0, (pt_jr_range){-INFINITY, INFINITY, 0, 0},
                      &m->loss));
    TRY(pt_jr_num(jr, o, "", "samples_per_s", REQ, 0, nonneg, &m->samples_per_s));
    TRY(pt_jr_num(jr, o, "", "iter_ms", OPT, 0, nonneg, &m->iter_ms));
    TRY(pt_jr_int(jr, o, "", "steps", OPT, 1, 1, PT_MSG_FOLD_MAX, &m->steps));
    if (m->step - m->steps + 1 < 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "steps", "%d steps end at step %lld: before step 0",
                          m->steps, (long long)m->step);
    const cJSON *losses;
    int nl = 0;
    TRY(pt_jr_array(jr, o, "", "losses", m->steps > 1 ? REQ : OPT, 1, &losses, &nl));
    if (losses && nl != m->steps)
        return pt_jr_fail(jr, PT_EINVAL, "", "losses", "%d losses for %d steps", nl, m->steps);
    for (int k = 0; k < m->steps; k++)
        m->losses[k] = NAN;
    for (int k = 0; losses && k < nl; k++) {
        const cJSON *v = cJSON_GetArrayItem(losses, k);
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
            m->losses[k] = v->valuedouble;
        else if (!cJSON_IsNull(v))
            return pt_jr_fail(jr, PT_EINVAL, "", "losses", "element %d is not a number or null", k);
    }
    if (!losses)
        m->losses[0] = m->loss;
    const cJSON *dev;
    TRY(pt_jr_object(jr, o, "", "device", OPT, &dev));
    if (dev) {
        static const char *const dev_keys[] = {"free", "total", NULL};
        TRY(pt_jr_keys(jr, dev, "device", dev_keys));
        TRY(pt_jr_int64(jr, dev, "device", "total", REQ, 0, 0, IMAX, &m->device_total));
        TRY(pt_jr_int64(jr, dev, "device", "free", REQ, 0, 0, m->device_total, &m->device_free));
    }
    const cJSON *mem;
    TRY(pt_jr_object(jr, o, "", "memory", OPT, &mem));
    if (!mem)
        return 0;
    const char *keys[PT_MSG_MEM_COUNT + 2];
    for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
        keys[k] = mem_names[k];
    keys[PT_MSG_MEM_COUNT] = "total";
    keys[PT_MSG_MEM_COUNT + 1] = NULL;
    TRY(pt_jr_keys(jr, mem, "memory", keys));
    for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
        TRY(check_cur_peak(jr, mem, mem_names[k], &m->mem_cur[k], &m->mem_peak[k]));
    TRY(check_cur_peak(jr, mem, "total", &m->total_cur, &m->total_peak));
    return 0;
}

static int check_body(pt_jr *jr, const cJSON *o, pt_msg *m)
{
    switch (m->type) {
    case PT_MSG_REGISTER:
        return check_register(jr, o, &m->u.reg);
    case PT_MSG_ASSIGN:
        return check_assign(jr, o, &m->u.assign);
    case PT_MSG_ACK: {
        char of[32];
        TRY(pt_jr_str(jr, o, "", "of", REQ, NULL, of, sizeof of));
        pt_msg_type t = pt_msg_type_parse(of);
        if (!pt_msg_type_is_request(t) || t == PT_MSG_CHECKPOINT)
            return pt_jr_fail(jr, PT_EINVAL, "", "of",
                              "\"%s\" is not an acknowledged request (assign, start, stop)", of);
        m->u.ack.of = t;
        TRY(pt_jr_int64(jr, o, "", "step", OPT, -1, 0, IMAX, &m->u.ack.step));
        if (m->u.ack.step >= 0 && t != PT_MSG_STOP)
            return pt_jr_fail(jr, PT_EINVAL, "", "step", "only an ack of stop carries a step");
        return 0;
    }
    case PT_MSG_START:
        return pt_jr_int64(jr, o, "", "steps", REQ, 0, 0, IMAX, &m->u.start.steps);
    case PT_MSG_STOP:
        TRY(opt_str(jr, o, "", "reason", m->u.stop.reason, sizeof m->u.stop.reason));
        TRY(pt_jr_bool(jr, o, "", "hold", OPT, 0, &m->u.stop.hold));
        TRY(pt_jr_int64(jr, o, "", "at_step", OPT, -1, 0, IMAX, &m->u.stop.at_step));
        if (m->u.stop.hold && m->u.stop.at_step >= 0)
            return pt_jr_fail(jr, PT_EINVAL, "", "at_step",
                              "a stop either holds or names a step, not both");
        return 0;
    case PT_MSG_BYE:
        return opt_str(jr, o, "", "reason", m->u.bye.reason, sizeof m->u.bye.reason);
    case PT_MSG_CHECKPOINT:
        return pt_jr_int64(jr, o, "", "step", OPT, -1, -1, IMAX, &m->u.checkpoint.step);
    case PT_MSG_CHECKPOINT_ACK:
        TRY(pt_jr_int64(jr, o, "", "step", REQ, 0, 0, IMAX, &m->u.checkpoint_ack.step));
        return pt_jr_str(jr, o, "", "dir", REQ, NULL, m->u.checkpoint_ack.dir,
                         sizeof m->u.checkpoint_ack.dir);
    case PT_MSG_HEARTBEAT:
        return check_heartbeat(jr, o, &m->u.heartbeat);
    case PT_MSG_ERROR:
        TRY(pt_jr_int(jr, o, "", "stage", OPT, -1, -1, IDX, &m->u.error.stage));
        TRY(pt_jr_int(jr, o, "", "replica", OPT, -1, -1, IDX, &m->u.error.replica));
        TRY(pt_jr_int(jr, o, "", "code", OPT, 0, -1000, 0, &m->u.error.code));
        return pt_jr_str(jr, o, "", "reason", REQ, NULL, m->u.error.reason,
                         sizeof m->u.error.reason);
    case PT_MSG_EVENTS:
        return check_events(jr, o, &m->u.events);
    case PT_MSG_METRICS:
        return check_metrics(jr, o, &m->u.metrics);
    default:
        return pt_jr_fail(jr, PT_EINVAL, "", "type", "not a message type");
    }
}

int pt_msg_internal_check_tree(const cJSON *root, const char *src_base, pt_msg *m, pt_error *err)
{
    char src[256];
    pt_jr jr = {src_base, err};
    memset(m, 0, sizeof *m);
    char type[32];
    int rc = pt_jr_str(&jr, root, "", "type", REQ, NULL, type, sizeof type);
    if (rc == PT_ERANGE)
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "type", "unknown message type (too long)");
    if (rc < 0)
        return rc;
    m->type = pt_msg_type_parse(type);
    if (m->type == PT_MSG_TYPE_COUNT) {
        memset(m, 0, sizeof *m);
        return pt_jr_fail(&jr, PT_EINVAL, "", "type",
                          "unknown message type \"%s\" (known: register, assign, ack, start, "
                          "stop, checkpoint, checkpoint_ack, heartbeat, error, bye, events, "
                          "metrics)",
                          type);
    }
    snprintf(src, sizeof src, "%.200s (%s)", src_base, type);
    jr.source = src;

    const char *keys[40];
    int n = 0;
    for (int i = 0; i < ENV_KEYS; i++)
        keys[n++] = env_keys[i];
    for (const char *const *k = keys_of(m->type); *k; k++)
        keys[n++] = *k;
    keys[n] = NULL;
    if ((rc = pt_jr_keys(&jr, root, "", keys)) < 0)
        goto fail;
    if ((rc = pt_jr_str(&jr, root, "", "agent", REQ, NULL, m->agent, sizeof m->agent)) < 0 ||
        (rc = check_charset(&jr, "", "agent", m->agent, "._:@-", "an agent id")) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "seq", REQ, 0, 0, IMAX, &m->seq)) < 0 ||
        (rc = pt_jr_int64(&jr, root, "", "gen", REQ, 0, 0, IMAX, &m->gen)) < 0)
        goto fail;
    int needs_req = pt_msg_type_is_request(m->type) || pt_msg_internal_is_reply(m->type);
    if (needs_req || m->type == PT_MSG_ERROR) {
        rc = pt_jr_int64(&jr, root, "", "req", needs_req ? REQ : OPT, 0, needs_req ? 1 : 0, IMAX,
                         &m->req);
    } else if (pt_jr_item(root, "req")) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "req", "not allowed in a %s message", type);
    }
    if (rc < 0)
        goto fail;
    /* The union's non-zero defaults, then the body. */
    pt_msg_type t = m->type;
    char agent[PT_MSG_ID_MAX];
    int64_t seq = m->seq, gen = m->gen, req = m->req;
    memcpy(agent, m->agent, sizeof agent);
    pt_msg_init(m, t, agent);
    m->seq = seq;
    m->gen = gen;
    m->req = req;
    if ((rc = check_body(&jr, root, m)) < 0)
        goto fail;
    return 0;
fail:
    pt_msg_clear(m);
    return rc;
}

int pt_msg_decode(const char *data, size_t len, const char *source, pt_msg *out, pt_error *err)
{
    const char *src = source && *source ? source : "message";
    if (!out)
        return pt_error_set(err, PT_EINVAL, "%s: no message to fill", src);
    memset(out, 0, sizeof *out);
    if (!data)
        return pt_error_set(err, PT_EINVAL, "%s: no text", src);
    if (len > PT_MSG_MAX_BYTES)
        return pt_error_set(err, PT_ERANGE, "%s: %zu bytes, longer than the %u allowed", src, len,
                            PT_MSG_MAX_BYTES);
    if (memchr(data, '\0', len))
        return pt_error_set(err, PT_EPARSE, "%s: not valid JSON: contains a NUL byte", src);
    char *text = malloc(len + 1);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", src);
    memcpy(text, data, len);
    text[len] = '\0';
    pt_jr jr = {src, err};
    cJSON *root = NULL;
    int rc = pt_jr_parse(&jr, text, &root);
    free(text);
    if (rc < 0)
        return rc;
    rc = pt_msg_internal_check_tree(root, src, out, err);
    cJSON_Delete(root);
    return rc;
}

/* ---- acceptance ------------------------------------------------------------ */

int pt_msg_accept(const pt_msg *m, int at, int64_t current_gen, pt_error *err)
{
    if (!m || (at != PT_MSG_AT_CONSOLE && at != PT_MSG_AT_AGENT))
        return pt_error_set(err, PT_EINVAL, "message: accept: bad argument");
    const char *type = pt_msg_type_name(m->type);
    if (!type)
        return pt_error_set(err, PT_EINVAL, "message: not a message type");
    unsigned need = at == PT_MSG_AT_CONSOLE ? PT_MSG_BY_AGENT : PT_MSG_BY_CONSOLE;
    if (!(pt_msg_type_senders(m->type) & need))
        return pt_error_set(err, PT_EINVAL, "message (%s) from %s: only %s sends %s", type,
                            m->agent, at == PT_MSG_AT_CONSOLE ? "the console" : "an agent", type);
    if (m->type == PT_MSG_REGISTER || m->type == PT_MSG_HEARTBEAT || m->type == PT_MSG_BYE)
        return 0;
    if (m->gen < current_gen)
        return pt_error_set(err, PT_ESTATE,
                            "message (%s) from %s: stale: plan generation %lld is older than the "
                            "current %lld",
                            type, m->agent, (long long)m->gen, (long long)current_gen);
    if (m->gen > current_gen && m->type != PT_MSG_ASSIGN)
        return pt_error_set(err, PT_ESTATE,
                            "message (%s) from %s: plan generation %lld is newer than the current "
                            "%lld (no assign for it yet)",
                            type, m->agent, (long long)m->gen, (long long)current_gen);
    return 0;
}
