/* The session's control channel: messages to agents and their heartbeats,
 * silence and stalls, messages from agents (registration, keys, acks,
 * errors, bye), the byte budget per sender, and the poll that drives it all. */
#include "tui/control/session_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "protocol/quote.h"

/* ---- sending ---------------------------------------------------------------- */

/* Encodes and queues m for agent i (its seq and agent id are filled in). */
int session_send_to(pt_session *s, int i, pt_msg *m, pt_error *err)
{
    agent_entry *e = &s->agents[i];
    snprintf(m->agent, sizeof m->agent, "%s", e->pub.id);
    m->seq = e->tx_seq;
    char *text = NULL;
    size_t len = 0;
    int rc = pt_msg_encode(m, &text, &len, err);
    if (rc < 0)
        return rc;
    size_t idlen = strlen(e->pub.id);
    if (zmq_send(s->router, e->pub.id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT) != (int)idlen ||
        zmq_send(s->router, text, len, ZMQ_DONTWAIT) != (int)len) {
        s->counts.sends_failed++;
        rc = pt_error_set(err, PT_EIO, "session: send %s to %s: %s", pt_msg_type_name(m->type),
                          e->pub.id, zmq_strerror(errno));
    } else {
        e->tx_seq++;
        if (m->type != PT_MSG_HEARTBEAT && m->type != PT_MSG_ASSIGN)
            session_record_frame(s, PT_RECORD_SENT, "control", 0, text, len);
    }
    free(text);
    return rc;
}

int session_add_request(pt_session *s, int agent, pt_msg_type type, int64_t req)
{
    if (s->nreq == s->reqcap) {
        int cap = s->reqcap ? s->reqcap * 2 : 16;
        request *r = realloc(s->reqs, (size_t)cap * sizeof *r);
        if (!r)
            return PT_ENOMEM;
        s->reqs = r;
        s->reqcap = cap;
    }
    s->reqs[s->nreq++] = (request){req, agent, type};
    return 0;
}

int session_live(const agent_entry *e)
{
    return e->pub.state != PT_AGENT_DEAD && e->pub.state != PT_AGENT_GONE;
}

static void send_heartbeat(pt_session *s, int i, int64_t now)
{
    agent_entry *e = &s->agents[i];
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, e->pub.id);
    m.gen = e->pub.gen;
    m.u.heartbeat.hb = e->hb_out++;
    m.u.heartbeat.t_send = now;
    if (e->has_hb_in) {
        m.u.heartbeat.has_echo = 1;
        m.u.heartbeat.echo_hb = e->hb_in;
        m.u.heartbeat.echo_t_orig = e->hb_in_tsend;
        m.u.heartbeat.echo_t_recv = e->hb_in_trecv;
    }
    session_send_to(s, i, &m, NULL);
}

static void send_heartbeats(pt_session *s, int64_t now)
{
    for (int i = 0; i < s->n; i++)
        if (session_live(&s->agents[i]))
            send_heartbeat(s, i, now);
}

/* Silence past the heartbeat bound makes an agent stalled, past the stall
 * bound dead; a stalled agent heard from again has resumed. A stall is not
 * a failure: the agent's neighbours wait for its data, so the pipeline
 * pauses where it is and goes on when the agent does (a process stopped
 * for a while, a host under swap). */
static void check_silence(pt_session *s, int64_t now)
{
    int64_t bound = (int64_t)s->missed * s->hb_ms * NS_PER_MS;
    int64_t stall = (int64_t)s->stall_ms * NS_PER_MS;
    for (int i = 0; i < s->n; i++) {
        agent_entry *e = &s->agents[i];
        if (!session_live(e))
            continue;
        int64_t quiet = now - e->pub.last_heard_ns;
        char why[PT_MSG_TEXT_MAX];
        if (quiet <= bound) {
            if (e->pub.stalled) {
                e->pub.stalled = 0;
                snprintf(why, sizeof why, "heard from again after a stall");
                session_note(s, PT_NOTE_RESUMED, i, NULL, 0, why);
            }
            continue;
        }
        if (quiet > stall) {
            if (stall > bound)
                snprintf(why, sizeof why,
                         "stalled: missed %d heartbeats, nothing heard for %.1f s, beyond the "
                         "stall bound of %.1f s",
                         s->missed, (double)quiet / 1e9, (double)s->stall_ms / 1e3);
            else
                snprintf(why, sizeof why, "missed %d heartbeats (nothing heard for %.1f s)",
                         s->missed, (double)quiet / 1e9);
            e->pub.stalled = 0;
            pt_session_mark_dead(s, i, why);
        } else if (!e->pub.stalled) {
            e->pub.stalled = 1;
            snprintf(why, sizeof why,
                     "stalled: missed %d heartbeats (nothing heard for %.1f s); waiting up to "
                     "%.1f s for it",
                     s->missed, (double)quiet / 1e9, (double)s->stall_ms / 1e3);
            if (s->rec)
                pt_record_write_agent(s->rec, e->pub.id, "stalled", e->pub.step);
            session_note(s, PT_NOTE_STALLED, i, NULL, 0, why);
        }
    }
}

void pt_session_mark_dead(pt_session *s, int i, const char *reason)
{
    if (!s || i < 0 || i >= s->n || !session_live(&s->agents[i]))
        return;
    agent_entry *e = &s->agents[i];
    snprintf(e->why_dead, sizeof e->why_dead, "%s", reason ? reason : "dead");
    char d[DESCRIBE_MAX], text[DESCRIBE_MAX + PT_MSG_TEXT_MAX + 8];
    session_describe(&e->pub, d, sizeof d);
    snprintf(text, sizeof text, "%s: %s", d, e->why_dead);
    session_set_state(s, i, PT_AGENT_DEAD);
    if (s->rec)
        pt_record_write_dead(s->rec, e->pub.id, text);
    session_drop_requests_of(s, i);
    session_note(s, PT_NOTE_DEAD, i, NULL, 0, text);
}

/* ---- receiving control ---------------------------------------------------------- */

static int add_agent(pt_session *s, const char *id)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        agent_entry *a = realloc(s->agents, (size_t)cap * sizeof *a);
        if (!a)
            return PT_ENOMEM;
        s->agents = a;
        s->cap = cap;
    }
    if (session_index_reserve(s) < 0)
        return PT_ENOMEM;
    agent_entry *e = &s->agents[s->n];
    memset(e, 0, sizeof *e);
    snprintf(e->pub.id, sizeof e->pub.id, "%s", id);
    e->pub.worker = e->pub.stage = e->pub.replica = -1;
    e->pub.step = e->pub.ckpt_step = e->pub.stop_step = -1;
    e->pub.device = -1;
    pt_clock_filter_init(&e->clk);
    session_index_add(s, s->n);
    return s->n++;
}

static int is_worker(const pt_session *s, int i)
{
    for (int w = 0; w < s->worker_count; w++)
        if (s->workers[w] == i)
            return 1;
    return 0;
}

static void on_register(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    int fresh = i < 0;
    if (fresh && (i = add_agent(s, m->agent)) < 0)
        return;
    agent_entry *e = &s->agents[i];
    const pt_msg_register *r = &m->u.reg;
    if (!fresh && m->seq == 0) {
        /* A new process under a known name: its numbering starts again. */
        pt_telemetry_rx_reset_agent(s->rx, e->pub.id);
        if (is_worker(s, i) && s->gen > 0)
            e->restarted = 1;
        e->pub.state = PT_AGENT_REGISTERED;
        e->pub.gen = 0;
        e->tx_seq = 0;
        e->has_hb_in = 0;
        pt_clock_filter_init(&e->clk);
        e->why_dead[0] = e->bye_reason[0] = '\0';
    }
    snprintf(e->pub.host, sizeof e->pub.host, "%s", r->host);
    e->pub.pid = r->pid;
    e->pub.device = r->device;
    snprintf(e->pub.device_name, sizeof e->pub.device_name, "%s", r->device_name);
    snprintf(e->pub.backend, sizeof e->pub.backend, "%s", r->backend);
    e->pub.memory_bytes = r->memory_bytes;
    snprintf(e->pub.data_endpoint, sizeof e->pub.data_endpoint, "%s", r->data_endpoint);
    snprintf(e->pub.gpu_bus_id, sizeof e->pub.gpu_bus_id, "%s", r->gpu_bus_id);
    e->pub.has_nccl = e->pub.simulated = 0;
    for (int c = 0; c < r->cap_count; c++) {
        e->pub.has_nccl |= !strcmp(r->caps[c], "nccl");
        e->pub.simulated |= !strcmp(r->caps[c], PT_MSG_CAP_SIMULATED);
    }
    e->pub.last_heard_ns = now;
    e->ctl_next_seq = m->seq + 1;
    send_heartbeat(s, i, now); /* its answer gives the first clock sample at once */
    session_note(s, PT_NOTE_REGISTERED, i, m, 0, NULL);
    if (!fresh && m->seq != 0) /* the same process reconnected: what it missed */
        session_resend_stops(s, i);
}

void session_on_hold_ack(pt_session *s, int64_t step);

static int take_request(pt_session *s, int agent, int64_t req, pt_msg_type type)
{
    for (int j = 0; j < s->nreq; j++)
        if (s->reqs[j].agent == agent && s->reqs[j].req == req &&
            (type == PT_MSG_TYPE_COUNT || s->reqs[j].type == type)) {
            s->reqs[j] = s->reqs[--s->nreq];
            return 1;
        }
    return 0;
}

static void on_heartbeat(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    agent_entry *e = &s->agents[i];
    const pt_msg_heartbeat *h = &m->u.heartbeat;
    e->has_hb_in = 1;
    e->hb_in = h->hb;
    e->hb_in_tsend = h->t_send;
    e->hb_in_trecv = now;
    if (h->data_dropped >= 0)
        e->pub.data_dropped = h->data_dropped;
    if (h->has_echo &&
        pt_clock_filter_add(&e->clk, h->echo_t_orig, h->echo_t_recv, h->t_send, now) == 0) {
        e->pub.clock_known =
            pt_clock_filter_get(&e->clk, &e->pub.clock_offset_ns, &e->pub.clock_delay_ns) == 0;
    }
    if (h->state[0])
        snprintf(e->pub.reported, sizeof e->pub.reported, "%s", h->state);
    if (h->step > e->pub.step)
        e->pub.step = h->step;
    if (!strcmp(h->state, "idle") && e->pub.state == PT_AGENT_RUNNING && m->gen == s->gen)
        session_set_state(s, i, PT_AGENT_IDLE);
}

void session_reject(pt_session *s, int i, const char *channel, const char *agent,
                    const char *reason)
{
    if (!strcmp(channel, "control")) {
        s->counts.control_rejected++;
        if (i >= 0)
            s->agents[i].pub.control_rejected++;
    } else {
        s->counts.telemetry_rejected++;
    }
    session_say_rejected(s, i, channel, agent, reason);
}

/* The key a name is bound to before it registered ("" none). */
static const char *bound_key(const pt_session *s, const char *name)
{
    for (int k = 0; k < s->nbound; k++)
        if (!strcmp(s->bound[k].name, name))
            return s->bound[k].key;
    return "";
}

/* Refuses a message whose CURVE key is not the one its name is bound to:
 * the key of the agent's first register, or the one the controller bound
 * the name to. Names are claims; keys are proven by the handshake. */
/* The first name key is bound to (pt_session_allow with a name: a spawned
 * agent's, an allow-list's agent=NAME) when name is not one of them; NULL
 * when name is one, or the key is bound to no name. */
static const char *key_bound_elsewhere(const pt_session *s, const char *key, const char *name)
{
    const char *other = NULL;
    for (int k = 0; k < s->nbound; k++)
        if (!strcmp(s->bound[k].key, key)) {
            if (!strcmp(s->bound[k].name, name))
                return NULL;
            if (!other)
                other = s->bound[k].name;
        }
    return other;
}

int session_key_refused(pt_session *s, const char *channel, int i, const pt_msg *m, const char *key)
{
    if (!s->zap || !key)
        return 0;
    char why[PT_ERROR_MAX];
    const char *mine = key_bound_elsewhere(s, key, m->agent);
    if (mine) {
        snprintf(why, sizeof why,
                 "%s (%s) from %s: sent with key %.8s..., which is bound to the name %s", channel,
                 pt_msg_type_name(m->type), m->agent, key, mine);
        session_reject(s, -1, channel, m->agent, why);
        return 1;
    }
    const char *want = i >= 0 ? s->agents[i].pub.public_key : bound_key(s, m->agent);
    if (!want[0] || !strcmp(want, key))
        return 0;
    snprintf(why, sizeof why,
             "%s (%s) from %s: sent with key %.8s..., but the name belongs to key %.8s...", channel,
             pt_msg_type_name(m->type), m->agent, key, want);
    session_reject(s, -1, channel, m->agent, why); /* not the named agent's doing */
    return 1;
}

static int key_mismatch(pt_session *s, int i, const pt_msg *m, const char *key)
{
    return session_key_refused(s, "control", i, m, key);
}

/* An ack: the request it answers is no longer pending, and the agent's
 * state follows (assigned, running, holding for a stop, stopped). */
static void on_ack(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    (void)now;
    agent_entry *e = &s->agents[i];
    if (!take_request(s, i, m->req, m->u.ack.of)) {
        char why[PT_ERROR_MAX];
        snprintf(why, sizeof why, "control (ack) from %s: no %s request %lld is pending", m->agent,
                 pt_msg_type_name(m->u.ack.of), (long long)m->req);
        s->counts.control_received--;
        session_reject(s, i, "control", m->agent, why);
        return;
    }
    if (m->u.ack.of == PT_MSG_ASSIGN) {
        e->pub.gen = m->gen;
        session_set_state(s, i, PT_AGENT_ASSIGNED);
    } else if (m->u.ack.of == PT_MSG_START) {
        session_set_state(s, i, PT_AGENT_RUNNING);
    } else if (m->req >= s->hold_lo && m->req < s->hold_hi) {
        session_on_hold_ack(s, m->u.ack.step);
    } else {
        if (m->u.ack.step >= 0) {
            e->pub.stop_step = m->u.ack.step;
            if (m->u.ack.step - 1 > e->pub.step)
                e->pub.step = m->u.ack.step - 1;
        }
        session_set_state(s, i, PT_AGENT_STOPPED);
    }
}

static void on_checkpoint_ack(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    (void)now;
    agent_entry *e = &s->agents[i];
    if (m->req > 0)
        take_request(s, i, m->req, PT_MSG_CHECKPOINT);
    if (m->u.checkpoint_ack.step > e->pub.ckpt_step)
        e->pub.ckpt_step = m->u.checkpoint_ack.step;
    session_try_commit(s);
}

static void on_error(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    (void)now;
    agent_entry *e = &s->agents[i];
    snprintf(e->pub.last_error, sizeof e->pub.last_error, "%s", m->u.error.reason);
    int about_run =
        m->u.error.stage >= 0 || (m->req > 0 && take_request(s, i, m->req, PT_MSG_TYPE_COUNT));
    if (about_run) {
        session_drop_requests_of(s, i);
        session_set_state(s, i, PT_AGENT_FAILED);
    }
    /* the agent's own words, quoted and cut: not pipetop's */
    char said[PT_QUOTE_SHOWN_MAX * 4 + 8], text[PT_MSG_TEXT_MAX + 64], d[PT_ERROR_MAX];
    session_describe(&e->pub, d, sizeof d);
    snprintf(text, sizeof text, "%s reported: %s", d,
             pt_quote(m->u.error.reason, said, sizeof said));
    session_note(s, PT_NOTE_ERROR, i, m, 0, text);
}

static void on_bye(pt_session *s, int i, const pt_msg *m, int64_t now)
{
    (void)now;
    agent_entry *e = &s->agents[i];
    snprintf(e->bye_reason, sizeof e->bye_reason, "%s",
             m->u.bye.reason[0] ? m->u.bye.reason : "left");
    session_drop_requests_of(s, i);
    session_set_state(s, i, PT_AGENT_GONE);
}

/* What a registered agent's control message does, by type (register is
 * handled before; pt_msg_accept refuses the types only the console sends). */
typedef void (*control_handler)(pt_session *s, int i, const pt_msg *m, int64_t now);
static const control_handler on_control[PT_MSG_TYPE_COUNT] = {
    [PT_MSG_HEARTBEAT] = on_heartbeat,
    [PT_MSG_ACK] = on_ack,
    [PT_MSG_CHECKPOINT_ACK] = on_checkpoint_ack,
    [PT_MSG_ERROR] = on_error,
    [PT_MSG_BYE] = on_bye,
};

/* The checks every control message passes: its name is its routing id, it
 * registered (or registers now), its key is the name's, and it may send
 * this type in this generation. 0, or -1 after rejecting it. */
static int sender_ok(pt_session *s, int i, const pt_msg *m, const char *id, size_t id_len,
                     const char *key)
{
    pt_error err = {0};
    char why[PT_ERROR_MAX];
    if (strcmp(m->agent, id) != 0 || id_len != strlen(m->agent)) {
        snprintf(why, sizeof why, "control (%s): agent \"%s\" is not the sender's routing id",
                 pt_msg_type_name(m->type), m->agent);
        session_reject(s, i, "control", i >= 0 ? id : NULL, why);
        return -1;
    }
    if (i < 0 && m->type != PT_MSG_REGISTER) {
        snprintf(why, sizeof why, "control (%s) from %s: not registered", pt_msg_type_name(m->type),
                 m->agent);
        session_reject(s, -1, "control", NULL, why);
        return -1;
    }
    if (key_mismatch(s, i, m, key))
        return -1;
    if (pt_msg_accept(m, PT_MSG_AT_CONSOLE, s->gen, &err) < 0) {
        session_reject(s, i, "control", m->agent, err.msg);
        return -1;
    }
    return 0;
}

/* A register: a new agent, or a known name again (a restarted process
 * starts its numbering at 0); the key it proved is bound to the name. */
static void take_register(pt_session *s, int i, const pt_msg *m, int64_t now, const char *body,
                          size_t len, const char *key)
{
    char why[PT_ERROR_MAX];
    if (i >= 0 && m->seq != 0 && m->seq < s->agents[i].ctl_next_seq) {
        snprintf(why, sizeof why, "control (register) from %s: seq %lld out of order", m->agent,
                 (long long)m->seq);
        session_reject(s, i, "control", m->agent, why);
        return;
    }
    if (i >= 0 && !session_live(&s->agents[i]) && m->seq != 0) {
        snprintf(why, sizeof why, "control (register) from %s: the agent is %s", m->agent,
                 pt_agent_state_name(s->agents[i].pub.state));
        session_reject(s, i, "control", m->agent, why);
        return;
    }
    if (i < 0 && key && key[0] && strcmp(bound_key(s, m->agent), key) != 0) {
        /* a key serves the agents of one node at most (keys may be shared
         * there): it cannot fill the table with invented names (names the
         * console bound to the key, as those of simulated agents sharing one
         * process's key, are not invented) */
        int held = 0;
        for (int j = 0; j < s->n; j++)
            held += session_live(&s->agents[j]) && !strcmp(s->agents[j].pub.public_key, key);
        if (held >= PT_SESSION_NAMES_PER_KEY) {
            snprintf(why, sizeof why,
                     "control (register) as %s: its key already holds %d live names, the most "
                     "one key may (the agents of one node)",
                     m->agent, held);
            session_reject(s, -1, "control", NULL, why);
            return;
        }
    }
    s->counts.control_received++;
    session_record_frame(s, PT_RECORD_RECV, "control", 0, body, len);
    on_register(s, i, m, now);
    if (s->zap && (i = pt_session_find_agent(s, m->agent)) >= 0)
        snprintf(s->agents[i].pub.public_key, sizeof s->agents[i].pub.public_key, "%s", key);
}

/* A registered agent's message must come from a live agent, in order; the
 * numbers it skipped are counted as dropped. 0, or -1 after rejecting it. */
static int in_order(pt_session *s, int i, const pt_msg *m)
{
    agent_entry *e = &s->agents[i];
    char why[PT_ERROR_MAX];
    if (!session_live(e)) {
        snprintf(why, sizeof why, "control (%s) from %s: the agent is %s",
                 pt_msg_type_name(m->type), m->agent, pt_agent_state_name(e->pub.state));
        session_reject(s, i, "control", m->agent, why);
        return -1;
    }
    if (m->seq < e->ctl_next_seq) {
        snprintf(why, sizeof why, "control (%s) from %s: seq %lld out of order (expected %lld)",
                 pt_msg_type_name(m->type), m->agent, (long long)m->seq,
                 (long long)e->ctl_next_seq);
        session_reject(s, i, "control", m->agent, why);
        return -1;
    }
    e->pub.control_dropped += (uint64_t)(m->seq - e->ctl_next_seq);
    e->ctl_next_seq = m->seq + 1;
    return 0;
}

static void handle_control(pt_session *s, const char *ident, size_t ident_len, const char *body,
                           size_t len, const char *key)
{
    int64_t now = pt_msg_now_ns();
    pt_msg m;
    pt_error err = {0};
    char id[PT_MSG_ID_MAX];
    snprintf(id, sizeof id, "%.*s", (int)(ident_len < sizeof id ? ident_len : sizeof id - 1),
             ident);
    int i = pt_session_find_agent(s, id);
    if (pt_msg_decode(body, len, "control", &m, &err) < 0) {
        session_reject(s, i, "control", i >= 0 ? id : NULL, err.msg);
        return;
    }
    if (sender_ok(s, i, &m, id, ident_len, key) < 0) {
        /* rejected */
    } else if (m.type == PT_MSG_REGISTER) {
        take_register(s, i, &m, now, body, len, key);
    } else if (in_order(s, i, &m) == 0) {
        agent_entry *e = &s->agents[i];
        e->pub.last_heard_ns = now;
        s->counts.control_received++;
        if (m.type != PT_MSG_HEARTBEAT)
            session_record_frame(s, PT_RECORD_RECV, "control", e->pub.clock_offset_ns, body, len);
        if (on_control[m.type])
            on_control[m.type](s, i, &m, now);
    }
    pt_msg_clear(&m);
}

/* ---- poll ---------------------------------------------------------------------- */

/* Takes bytes from the sender's budget (a token bucket refilled at
 * PT_SESSION_PEER_BYTES_PER_S, holding at most one second's worth); 1 when
 * the budget is spent: the message is then dropped unread and counted, and
 * the record gets one line per second per peer saying so. */
static int over_budget(pt_session *s, const char *ident, size_t ident_len, size_t bytes)
{
    char id[PT_MSG_ID_MAX];
    snprintf(id, sizeof id, "%.*s", (int)(ident_len < sizeof id ? ident_len : sizeof id - 1),
             ident);
    int i = pt_session_find_agent(s, id);
    int64_t *budget = i >= 0 ? &s->agents[i].budget : &s->stranger_budget;
    int64_t *at = i >= 0 ? &s->agents[i].budget_ns : &s->stranger_budget_ns;
    int64_t *noted = i >= 0 ? &s->agents[i].flood_noted_ns : &s->stranger_noted_ns;
    const int64_t rate = PT_SESSION_PEER_BYTES_PER_S, ns_per_s = 1000000000LL;
    int64_t now = pt_msg_now_ns();
    if (*at == 0) {
        *budget = rate;
    } else if (now > *at) {
        int64_t gain = (now - *at) >= ns_per_s ? rate : (now - *at) * rate / ns_per_s;
        *budget = *budget + gain > rate ? rate : *budget + gain;
    }
    *at = now;
    if ((int64_t)bytes <= *budget) {
        *budget -= (int64_t)bytes;
        return 0;
    }
    s->counts.control_flooded++;
    if (i >= 0)
        s->agents[i].pub.control_flooded++;
    if (now - *noted >= ns_per_s) {
        *noted = now;
        char why[160];
        snprintf(why, sizeof why,
                 "control: %s sends more than %d bytes/s; its messages are dropped unread",
                 i >= 0 ? id : "a sender not registered", PT_SESSION_PEER_BYTES_PER_S);
        session_say_rejected(s, i, "control", i >= 0 ? id : NULL, why);
    }
    return 1;
}

static int drain_control(pt_session *s, pt_error *err)
{
    for (int k = 0; k < RECV_BATCH_MAX; k++) {
        zmq_msg_t f[CTL_FRAMES_MAX];
        int nf = 0, more = 1, extra = 0;
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, s->router, ZMQ_DONTWAIT) < 0) {
                int e = errno;
                zmq_msg_close(&part);
                for (int j = 0; j < nf; j++)
                    zmq_msg_close(&f[j]);
                if (e == EAGAIN && nf == 0)
                    return 0;
                if (e == EAGAIN || e == EINTR)
                    return 0;
                return pt_error_set(err, PT_EIO, "session: control receive: %s", zmq_strerror(e));
            }
            more = zmq_msg_more(&part);
            if (nf < CTL_FRAMES_MAX)
                f[nf++] = part;
            else {
                zmq_msg_close(&part);
                extra++;
            }
        }
        session_conn_spoke(s, &f[0]);
        size_t bytes = 0;
        for (int j = 0; j < nf; j++)
            bytes += zmq_msg_size(&f[j]);
        const char *key = nf > 1 ? zmq_msg_gets(&f[1], "User-Id") : NULL;
        if (over_budget(s, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), bytes)) {
            /* dropped unread: counted in over_budget */
        } else if (nf == 2 && !extra) {
            handle_control(s, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), zmq_msg_data(&f[1]),
                           zmq_msg_size(&f[1]), key ? key : "");
        } else {
            char id[PT_MSG_ID_MAX], why[160];
            size_t il = zmq_msg_size(&f[0]);
            snprintf(id, sizeof id, "%.*s", (int)(il < sizeof id ? il : sizeof id - 1),
                     (const char *)zmq_msg_data(&f[0]));
            int i = pt_session_find_agent(s, id);
            snprintf(why, sizeof why, "control: a message of %d frames (one JSON frame expected)",
                     nf + extra - 1);
            session_reject(s, i, "control", i >= 0 ? id : NULL, why);
        }
        for (int j = 0; j < nf; j++)
            zmq_msg_close(&f[j]);
    }
    return 0;
}

/* Refused handshakes, at most every PT_SESSION_REFUSALS_MS: each refused
 * client (public key and address) once, in the record and to the listener,
 * then only a count of those past the ZAP handler's table. A refused
 * client never reaches the session otherwise: its handshake fails. */
static void report_refusals(pt_session *s, int64_t now)
{
    if (!s->zap || now - s->refusals_told_ns < (int64_t)PT_SESSION_REFUSALS_MS * NS_PER_MS)
        return;
    s->refusals_told_ns = now;
    pt_zap_refusal r[PT_SESSION_REFUSALS_TOLD];
    int64_t untold = 0;
    int n = pt_zap_take_refusals(s->zap, r, PT_SESSION_REFUSALS_TOLD, &untold);
    for (int k = 0; k < n; k++) {
        char why[PT_MSG_TEXT_MAX];
        if (r[k].key[0])
            snprintf(why, sizeof why,
                     "handshake refused: public key %s from %s: %s (%lld tries so far)", r[k].key,
                     r[k].address[0] ? r[k].address : "?", r[k].why, (long long)r[k].count);
        else
            snprintf(why, sizeof why, "handshake refused: a client from %s: %s (%lld tries so far)",
                     r[k].address[0] ? r[k].address : "?", r[k].why, (long long)r[k].count);
        session_record_rejected(s, "control", NULL, why);
        session_note(s, PT_NOTE_REJECTED, -1, NULL, 0, why);
    }
    if (untold > s->refusals_untold) {
        char why[PT_MSG_TEXT_MAX];
        snprintf(why, sizeof why,
                 "handshake refused: %lld more handshakes from clients past the first %d",
                 (long long)(untold - s->refusals_untold), PT_ZAP_REFUSALS_MAX);
        s->refusals_untold = untold;
        session_record_rejected(s, "control", NULL, why);
        session_note(s, PT_NOTE_REJECTED, -1, NULL, 0, why);
    }
}

int pt_session_poll(pt_session *s, int timeout_ms, pt_error *err)
{
    if (!s)
        return pt_error_set(err, PT_EINVAL, "session: NULL");
    int64_t deadline = pt_msg_now_ns() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * NS_PER_MS;
    for (;;) {
        /* What queued up while the caller was away is read before anyone is
         * judged silent: a console that was itself busy (a checkpoint's
         * fsyncs) must not take its agents for dead. */
        int rc;
        if ((rc = drain_control(s, err)) < 0 || (rc = session_drain_telemetry(s, err)) < 0)
            return rc;
        int64_t now = pt_msg_now_ns();
        if (now >= s->next_hb_ns) {
            send_heartbeats(s, now);
            s->next_hb_ns = now + (int64_t)s->hb_ms * NS_PER_MS;
        }
        check_silence(s, now);
        report_refusals(s, now);
        session_conns_check(s, now);
        session_rejected_summary(s, now);
        int64_t until = deadline < s->next_hb_ns ? deadline : s->next_hb_ns;
        long wait_ms = until > now ? (long)((until - now + NS_PER_MS - 1) / NS_PER_MS) : 0;
        zmq_pollitem_t items[2] = {{s->router, 0, ZMQ_POLLIN, 0}, {s->sub, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, 2, wait_ms);
        if (n < 0 && errno != EINTR)
            return pt_error_set(err, PT_EIO, "session: poll: %s", zmq_strerror(errno));
        if (n > 0 && (items[0].revents & ZMQ_POLLIN) && (rc = drain_control(s, err)) < 0)
            return rc;
        if (n > 0 && (items[1].revents & ZMQ_POLLIN) && (rc = session_drain_telemetry(s, err)) < 0)
            return rc;
        pt_record_flush(s->rec);
        session_check_record(s);
        if (n != 0 || pt_msg_now_ns() >= deadline)
            return 0;
    }
}
