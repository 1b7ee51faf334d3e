/* Console-side session: create and destroy, the sockets and their keys, the
 * agent table and what it says of the run. See tui/control/session.h; the
 * rest of the session is in session_*.c (session_internal.h). */
#include "tui/control/session_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/fileio.h"
#include "protocol/hash.h"

static const char *const state_names[PT_AGENT_STATE_COUNT] = {
    "registered", "assigned", "running", "idle", "stopped", "failed", "dead", "gone"};

const char *pt_agent_state_name(pt_agent_state state)
{
    return (unsigned)state < PT_AGENT_STATE_COUNT ? state_names[state] : "?";
}

/* ---- small helpers ---------------------------------------------------------- */

void session_note(pt_session *s, pt_session_note_kind kind, int agent, const pt_msg *msg,
                  int64_t step, const char *text)
{
    if (!s->listener)
        return;
    pt_session_note n = {kind, agent, msg, step, text};
    s->listener(s->listener_user, &n);
}

void session_describe(const pt_session_agent *a, char *buf, size_t cap)
{
    if (a->stage >= 0)
        snprintf(buf, cap, "agent %s (stage %d, replica %d, pid %lld)", a->id, a->stage, a->replica,
                 (long long)a->pid);
    else
        snprintf(buf, cap, "agent %s (no stage, pid %lld)", a->id, (long long)a->pid);
}

/* The run record (protocol/record.h): frames as they arrived or left, and
 * the session's own entries. Writing is best-effort: a full disk must not
 * stop the run, so the results are not checked here. */
void session_record_frame(pt_session *s, pt_record_line_kind kind, const char *channel,
                          int64_t offset_ns, const char *data, size_t len)
{
    if (s->rec)
        pt_record_write_frame(s->rec, kind, channel, offset_ns, data, len);
}

void session_record_rejected(pt_session *s, const char *channel, const char *agent,
                             const char *reason)
{
    if (s->rec)
        pt_record_write_rejected(s->rec, channel, agent, reason);
}

void session_rejected_summary(pt_session *s, int64_t now)
{
    if (now - s->reject_window_ns < (int64_t)PT_SESSION_REJECT_WINDOW_MS * NS_PER_MS)
        return;
    if (s->reject_quiet > 0) {
        char why[160];
        snprintf(why, sizeof why,
                 "%lld more messages refused in %d s, counted but not written one by one",
                 (long long)s->reject_quiet, PT_SESSION_REJECT_WINDOW_MS / 1000);
        session_record_rejected(s, "control", NULL, why);
        session_note(s, PT_NOTE_REJECTED, -1, NULL, 0, why);
    }
    s->reject_window_ns = now;
    s->reject_lines = s->reject_quiet = 0;
}

void session_say_rejected(pt_session *s, int i, const char *channel, const char *agent,
                          const char *reason)
{
    session_rejected_summary(s, pt_msg_now_ns());
    if (s->reject_lines >= PT_SESSION_REJECT_LINES) {
        s->reject_quiet++;
        return;
    }
    s->reject_lines++;
    session_record_rejected(s, channel, agent, reason);
    session_note(s, PT_NOTE_REJECTED, i, NULL, 0, reason);
}

void session_set_state(pt_session *s, int i, pt_agent_state st)
{
    agent_entry *e = &s->agents[i];
    if (e->pub.state == st)
        return;
    if (e->pub.state == PT_AGENT_DEAD || e->pub.state == PT_AGENT_GONE)
        return; /* final */
    e->pub.state = st;
    if (s->rec)
        pt_record_write_agent(s->rec, e->pub.id, pt_agent_state_name(st), e->pub.step);
    session_note(s, PT_NOTE_STATE, i, NULL, 0, NULL);
}

void session_drop_requests_of(pt_session *s, int agent)
{
    int k = 0;
    for (int j = 0; j < s->nreq; j++)
        if (s->reqs[j].agent != agent)
            s->reqs[k++] = s->reqs[j];
    s->nreq = k;
}

/* ---- create / destroy ------------------------------------------------------- */

static int bind_socket(void *sock, const char *ep, char *out, size_t cap, const char *what,
                       pt_error *err)
{
    int hwm = SESSION_HWM_MSGS, linger = 0;
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock, ep) != 0)
        return pt_error_set(err, PT_EIO, "session: bind %s socket to %s: %s", what, ep,
                            zmq_strerror(errno));
    size_t len = cap;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &len) != 0)
        return pt_error_set(err, PT_EIO, "session: %s socket: ZMQ_LAST_ENDPOINT: %s", what,
                            zmq_strerror(errno));
    out[cap - 1] = '\0';
    return 0;
}

/* CURVE on both sockets when the config has a key (the ZAP handler first,
 * then the server options), the size caps, and the refusal to bind beyond
 * loopback without CURVE. */
static int setup_trust(pt_session *s, const pt_session_config *cfg, pt_error *err)
{
    int64_t ctl_max = PT_SESSION_CONTROL_MAX_BYTES, tel_max = PT_SESSION_TELEMETRY_MAX_BYTES;
    zmq_setsockopt(s->router, ZMQ_MAXMSGSIZE, &ctl_max, sizeof ctl_max);
    zmq_setsockopt(s->sub, ZMQ_MAXMSGSIZE, &tel_max, sizeof tel_max);
    int curve = cfg->key != NULL;
    const char *ctl = cfg->control_bind ? cfg->control_bind : PT_SESSION_DEFAULT_BIND;
    const char *tel = cfg->telemetry_bind ? cfg->telemetry_bind : PT_SESSION_DEFAULT_BIND;
    int rc;
    if ((rc = pt_trust_check_bind(ctl, curve, err)) < 0 ||
        (rc = pt_trust_check_bind(tel, curve, err)) < 0)
        return rc;
    if (!curve)
        return 0;
    const char *list[PT_ZAP_ALLOW_MAX];
    int n = cfg->allowed_n > 0 ? cfg->allowed_n : 0;
    if (n > PT_ZAP_ALLOW_MAX)
        return pt_error_set(err, PT_ERANGE, "session: more than %d allowed keys", PT_ZAP_ALLOW_MAX);
    for (int k = 0; k < n; k++)
        list[k] = cfg->allowed[k];
    if ((rc = pt_zap_start(s->ctx, list, n, &s->zap, err)) < 0 ||
        (rc = pt_trust_server(s->router, cfg->key, err)) < 0 ||
        (rc = pt_trust_server(s->sub, cfg->key, err)) < 0)
        return rc;
    snprintf(s->public_key, sizeof s->public_key, "%s", cfg->key->public_z85);
    return 0;
}

int pt_session_allow(pt_session *s, const char *public_z85, const char *name, pt_error *err)
{
    if (!s || !s->zap)
        return pt_error_set(err, PT_ESTATE, "session: no CURVE: there is no allow-list");
    int rc = pt_zap_allow(s->zap, public_z85, err);
    if (rc < 0 || !name)
        return rc;
    if (s->nbound == s->boundcap) {
        int cap = s->boundcap ? s->boundcap * 2 : 8;
        bound_name *b = realloc(s->bound, (size_t)cap * sizeof *b);
        if (!b)
            return pt_error_set(err, PT_ENOMEM, "session: out of memory");
        s->bound = b;
        s->boundcap = cap;
    }
    bound_name *b = &s->bound[s->nbound++];
    snprintf(b->name, sizeof b->name, "%s", name);
    snprintf(b->key, sizeof b->key, "%s", public_z85);
    return 0;
}

const char *pt_session_public_key(const pt_session *s)
{
    return s ? s->public_key : "";
}

int64_t pt_session_refused_handshakes(const pt_session *s)
{
    return s && s->zap ? pt_zap_refused_count(s->zap) : 0;
}

static int open_record(pt_session *s, const char *path, pt_error *err)
{
    pt_record_session info = {s->ctl_ep, s->tel_ep, s->hb_ms, s->missed};
    return pt_record_writer_open(path, &info, &s->rec, err);
}

int pt_session_create(const pt_session_config *cfg, pt_session **out, pt_error *err)
{
    if (!out)
        return pt_error_set(err, PT_EINVAL, "session: out must not be NULL");
    *out = NULL;
    pt_session_config def = {0};
    if (!cfg)
        cfg = &def;
    if (cfg->heartbeat_ms < 0 || cfg->missed_heartbeats < 0)
        return pt_error_set(err, PT_EINVAL, "session: heartbeat figures must not be negative");
    pt_session *s = calloc(1, sizeof *s);
    if (!s)
        return pt_error_set(err, PT_ENOMEM, "session: out of memory");
    s->commit_pipe[0] = s->commit_pipe[1] = -1;
    s->hb_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : PT_SESSION_HEARTBEAT_MS;
    s->missed = cfg->missed_heartbeats ? cfg->missed_heartbeats : PT_SESSION_MISSED_HEARTBEATS;
    s->stall_ms = s->missed * s->hb_ms;
    s->next_req = REQ_FIRST;
    s->committed = -1;
    s->stop_at = -1;
    int rc = pt_telemetry_rx_create(0, &s->rx);
    if (rc < 0) {
        rc = pt_error_set(err, PT_ENOMEM, "session: out of memory");
        goto fail;
    }
    s->ctx = zmq_ctx_new();
    if (!s->ctx) {
        rc = pt_error_set(err, PT_EIO, "session: zmq_ctx_new: %s", zmq_strerror(errno));
        goto fail;
    }
    s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
    s->sub = zmq_socket(s->ctx, ZMQ_SUB);
    if (!s->router || !s->sub) {
        rc = pt_error_set(err, PT_EIO, "session: zmq_socket: %s", zmq_strerror(errno));
        goto fail;
    }
    zmq_setsockopt(s->sub, ZMQ_SUBSCRIBE, "", 0);
    /* A connection that never finishes its handshake (a keyless flood of
     * TCP connects) holds a descriptor until this ends it, not libzmq's
     * 30 s. The checkpoint commits run in a process of their own, whose
     * descriptors a flood cannot take (session_ckpt.c); the record's file
     * is open from the start. */
    int hs_ms = PT_SESSION_HANDSHAKE_MS;
    zmq_setsockopt(s->router, ZMQ_HANDSHAKE_IVL, &hs_ms, sizeof hs_ms);
    zmq_setsockopt(s->sub, ZMQ_HANDSHAKE_IVL, &hs_ms, sizeof hs_ms);
    /* A connection whose peer went silent (a cut network) is closed after
     * the heartbeat bound, as the agent closes its side: the agent's
     * reconnect under the same routing id is then taken, where a ROUTER
     * holding the stale connection drops it (a 5 s cut lost a run). The
     * routing id is the agent's name, bound to its key: a reconnect proves
     * the key again. */
    int hb_ivl = PT_SESSION_HEARTBEAT_MS,
        hb_timeout = PT_SESSION_HEARTBEAT_MS * PT_SESSION_MISSED_HEARTBEATS;
    zmq_setsockopt(s->router, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(s->router, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout);
    pt_fd_limit_raise();
    if (pipe(s->commit_pipe) != 0) {
        s->commit_pipe[0] = s->commit_pipe[1] = -1; /* commits then run in this process */
    } else { /* the agents this console starts must not hold it */
        fcntl(s->commit_pipe[0], F_SETFD, FD_CLOEXEC);
        fcntl(s->commit_pipe[1], F_SETFD, FD_CLOEXEC);
    }
    if ((rc = setup_trust(s, cfg, err)) < 0 ||
        (rc = pt_zmq_watch_start(s->ctx, s->router, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED,
                                 &s->ctl_watch, err)) < 0)
        goto fail;
    if ((rc =
             bind_socket(s->router, cfg->control_bind ? cfg->control_bind : PT_SESSION_DEFAULT_BIND,
                         s->ctl_ep, sizeof s->ctl_ep, "control", err)) < 0 ||
        (rc = bind_socket(s->sub,
                          cfg->telemetry_bind ? cfg->telemetry_bind : PT_SESSION_DEFAULT_BIND,
                          s->tel_ep, sizeof s->tel_ep, "telemetry", err)) < 0)
        goto fail;
    if (cfg->record_path && (rc = open_record(s, cfg->record_path, err)) < 0)
        goto fail;
    s->next_hb_ns = pt_msg_now_ns();
    *out = s;
    return 0;
fail:
    pt_session_destroy(&s);
    return rc;
}

void pt_session_destroy(pt_session **s_p)
{
    if (!s_p || !*s_p)
        return;
    pt_session *s = *s_p;
    pt_zmq_watch_stop(&s->ctl_watch);
    free(s->conns);
    if (s->router)
        zmq_close(s->router);
    if (s->sub)
        zmq_close(s->sub);
    pt_zap_stop(&s->zap);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    s->reject_window_ns = 0; /* the last window's count goes in the record too */
    s->listener = NULL;
    session_rejected_summary(s, pt_msg_now_ns());
    pt_record_writer_close(&s->rec);
    for (int k = 0; k < 2; k++)
        if (s->commit_pipe[k] >= 0)
            close(s->commit_pipe[k]);
    pt_telemetry_rx_destroy(&s->rx);
    free(s->agents);
    free(s->id_slots);
    free(s->reqs);
    free(s->workers);
    free(s->bound);
    free(s);
    *s_p = NULL;
}

const char *pt_session_control_endpoint(const pt_session *s)
{
    return s ? s->ctl_ep : NULL;
}
const char *pt_session_telemetry_endpoint(const pt_session *s)
{
    return s ? s->tel_ep : NULL;
}
void pt_session_set_listener(pt_session *s, pt_session_listener fn, void *user)
{
    s->listener = fn;
    s->listener_user = user;
}
void pt_session_set_commit(pt_session *s, pt_session_commit_fn fn, void *user)
{
    s->commit = fn;
    s->commit_user = user;
}

/* ---- table ---------------------------------------------------------------------- */

int pt_session_agent_count(const pt_session *s)
{
    return s ? s->n : 0;
}

const pt_session_agent *pt_session_agent_at(const pt_session *s, int i)
{
    return s && i >= 0 && i < s->n ? &s->agents[i].pub : NULL;
}

/* The table's index by id: every frame (a telemetry message, a heartbeat)
 * finds its agent in constant time, not by a scan of every agent. The slot
 * of id: the one holding it, or the empty one it would go to. */
static int id_slot(const pt_session *s, const char *id)
{
    unsigned mask = (unsigned)s->id_slot_n - 1;
    unsigned k = (unsigned)pt_hash_str(id) & mask;
    while (s->id_slots[k] && strcmp(s->agents[s->id_slots[k] - 1].pub.id, id) != 0)
        k = (k + 1) & mask;
    return (int)k;
}

/* Indexes agent i unless its id is indexed already (the first agent of a
 * name is the one found, as a scan in table order would). */
static void index_put(pt_session *s, int i)
{
    int k = id_slot(s, s->agents[i].pub.id);
    if (!s->id_slots[k])
        s->id_slots[k] = i + 1;
}

int session_index_reserve(pt_session *s)
{
    if (2 * (s->n + 1) <= s->id_slot_n)
        return 0;
    int n = s->id_slot_n ? 2 * s->id_slot_n : 16;
    int *slots = calloc((size_t)n, sizeof *slots);
    if (!slots)
        return PT_ENOMEM;
    free(s->id_slots);
    s->id_slots = slots;
    s->id_slot_n = n;
    for (int i = 0; i < s->n; i++)
        index_put(s, i);
    return 0;
}

void session_index_add(pt_session *s, int i)
{
    index_put(s, i);
}

int pt_session_find_agent(const pt_session *s, const char *id)
{
    if (!s || !id || !s->id_slot_n)
        return -1;
    int v = s->id_slots[id_slot(s, id)];
    return v ? v - 1 : -1;
}

int64_t pt_session_heartbeat_age_ms(const pt_session *s, int i)
{
    if (!s || i < 0 || i >= s->n)
        return -1;
    return (pt_msg_now_ns() - s->agents[i].pub.last_heard_ns) / NS_PER_MS;
}

int64_t pt_session_generation(const pt_session *s)
{
    return s ? s->gen : 0;
}

void pt_session_agent_telemetry(const pt_session *s, int i, pt_rx_counts *out)
{
    memset(out, 0, sizeof *out);
    if (s && i >= 0 && i < s->n)
        pt_telemetry_rx_agent_counts(s->rx, s->agents[i].pub.id, out);
}

void pt_session_counts_get(const pt_session *s, pt_session_counts *out)
{
    *out = s->counts;
    pt_telemetry_rx_totals(s->rx, &out->telemetry);
}

int pt_session_pending(const pt_session *s)
{
    return s ? s->nreq : 0;
}

int64_t pt_session_committed_step(const pt_session *s)
{
    return s ? s->committed : -1;
}

int64_t pt_session_min_step(const pt_session *s)
{
    if (!s || s->worker_count == 0)
        return -1;
    int64_t m = INT64_MAX;
    for (int w = 0; w < s->worker_count; w++) {
        int64_t st = s->agents[s->workers[w]].pub.step;
        if (st < m)
            m = st;
    }
    return m;
}

int pt_session_failure(const pt_session *s, pt_error *err)
{
    if (pt_session_fatal(s, err))
        return 1;
    for (int w = 0; s && w < s->worker_count; w++) {
        const agent_entry *e = &s->agents[s->workers[w]];
        char d[DESCRIBE_MAX];
        session_describe(&e->pub, d, sizeof d);
        switch (e->pub.state) {
        case PT_AGENT_DEAD:
            pt_error_set(err, PT_ESTATE, "%s: %s", d, e->why_dead);
            return 1;
        case PT_AGENT_FAILED:
            pt_error_set(err, PT_ESTATE, "%s failed: %s", d, e->pub.last_error);
            return 1;
        case PT_AGENT_GONE:
            pt_error_set(err, PT_ESTATE, "%s left: %s", d, e->bye_reason);
            return 1;
        default:
            if (e->restarted) {
                pt_error_set(err, PT_ESTATE, "%s registered again: its process restarted", d);
                return 1;
            }
        }
    }
    return 0;
}

int pt_session_wait(pt_session *s, int timeout_ms, pt_error *err)
{
    int64_t deadline = pt_msg_now_ns() + (int64_t)timeout_ms * NS_PER_MS;
    for (;;) {
        if (pt_session_failure(s, err))
            return PT_ESTATE;
        if (s->nreq == 0)
            return 0;
        int64_t now = pt_msg_now_ns();
        if (now >= deadline) {
            const request *r = &s->reqs[0];
            char d[DESCRIBE_MAX];
            session_describe(&s->agents[r->agent].pub, d, sizeof d);
            return pt_error_set(err, PT_ETIMEOUT,
                                "no answer to %s (request %lld) from %s within %d ms (%d requests "
                                "pending)",
                                pt_msg_type_name(r->type), (long long)r->req, d, timeout_ms,
                                s->nreq);
        }
        int rc = pt_session_poll(s, (int)((deadline - now + NS_PER_MS - 1) / NS_PER_MS), err);
        if (rc < 0)
            return rc;
    }
}
