/* Console-side session: agents, requests, heartbeats, telemetry, checkpoint
 * commits and the run record. See tui/session.h. */
#include "tui/control/session.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/fileio.h"
#include "protocol/record.h"
#include "runtime/comm_nccl.h"
#include "runtime/trust.h"

#define NS_PER_MS 1000000LL
#define RECV_BATCH_MAX                                                                             \
    4096 /* messages handled per socket per poll before heartbeats get a turn                      \
          */
#define SESSION_HWM_MSGS 100000
#define CTL_FRAMES_MAX   4 /* frames read from one ROUTER message before the rest is discarded */
#define DESCRIBE_MAX     192
#define REQ_FIRST        1

typedef struct agent_entry {
    pt_session_agent pub;
    int64_t ctl_next_seq; /* next control sequence number expected from it */
    int64_t tx_seq;       /* next sequence number of what the console sends it */
    int64_t hb_out;       /* heartbeats sent to it */
    int has_hb_in;        /* its newest heartbeat, to echo */
    int64_t hb_in, hb_in_tsend, hb_in_trecv;
    pt_clock_filter clk;
    int restarted; /* registered again while it was a worker of the current plan */
    char why_dead[PT_MSG_TEXT_MAX];
    char bye_reason[PT_MSG_TEXT_MAX];
    int64_t budget, budget_ns; /* control bytes it may still send, and when that was refilled */
    int64_t flood_noted_ns;    /* when its last "over budget" line went to the record */
} agent_entry;

/* A name bound to a key before its agent registered (pt_session_allow). */
typedef struct bound_name {
    char name[PT_MSG_ID_MAX];
    char key[PT_KEY_Z85_LEN + 1];
} bound_name;

typedef struct request {
    int64_t req;
    int agent;
    pt_msg_type type; /* assign, start, stop, checkpoint */
} request;

struct pt_session {
    uint64_t run_token; /* the data plane's (runtime/comm.h), random per session; 0: not yet */
    void *ctx, *router, *sub;
    pt_zap *zap; /* NULL: no CURVE */
    char public_key[PT_KEY_Z85_LEN + 1];
    bound_name *bound;
    int nbound, boundcap;
    /* the byte budget shared by senders not in the agent table */
    int64_t stranger_budget, stranger_budget_ns, stranger_noted_ns;
    char ctl_ep[PT_MSG_ENDPOINT_MAX], tel_ep[PT_MSG_ENDPOINT_MAX];
    pt_record_writer *rec; /* NULL: no run record */
    int hb_ms, missed;
    int stall_ms;             /* silence after which an agent is dead (>= the heartbeat bound) */
    char fatal[PT_ERROR_MAX]; /* why the session cannot go on (pt_session_fatal); "" none */
    char agent_ckpt[PT_MSG_PATH_MAX]; /* the checkpoint folder as assigns name it; "": ckpt_dir */
    int64_t next_hb_ns;
    agent_entry *agents;
    int n, cap;
    pt_telemetry_rx *rx;
    int64_t gen, next_req;
    request *reqs;
    int nreq, reqcap;
    int *workers; /* agent index of each worker of the current plan */
    int worker_count, stage_count;
    char ckpt_dir[PT_MSG_PATH_MAX];
    int64_t committed;
    int64_t kept[PT_SESSION_CKPT_KEEP]; /* steps this session committed, newest last */
    int kept_n;
    pt_session_listener listener;
    void *listener_user;
    pt_session_commit_fn commit;
    void *commit_user;
    pt_session_counts counts;
    /* A stop in two rounds (docs/protocol.md, "Stopping at one step"): hold
     * requests have ids in [hold_lo, hold_hi); hold_max is the highest step
     * their acks named; stop_at the common step then sent, -1 before. */
    int64_t hold_lo, hold_hi, hold_max, stop_at;
    char stop_reason[PT_MSG_TEXT_MAX];
};

static const char *const state_names[PT_AGENT_STATE_COUNT] = {
    "registered", "assigned", "running", "idle", "stopped", "failed", "dead", "gone"};

const char *pt_agent_state_name(pt_agent_state state)
{
    return (unsigned)state < PT_AGENT_STATE_COUNT ? state_names[state] : "?";
}

/* ---- small helpers ---------------------------------------------------------- */

static void note(pt_session *s, pt_session_note_kind kind, int agent, const pt_msg *msg,
                 int64_t step, const char *text)
{
    if (!s->listener)
        return;
    pt_session_note n = {kind, agent, msg, step, text};
    s->listener(s->listener_user, &n);
}

static void describe(const pt_session_agent *a, char *buf, size_t cap)
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
static void record_frame(pt_session *s, pt_record_line_kind kind, const char *channel,
                         int64_t offset_ns, const char *data, size_t len)
{
    if (s->rec)
        pt_record_write_frame(s->rec, kind, channel, offset_ns, data, len);
}

static void record_rejected(pt_session *s, const char *channel, const char *agent,
                            const char *reason)
{
    if (s->rec)
        pt_record_write_rejected(s->rec, channel, agent, reason);
}

static void set_state(pt_session *s, int i, pt_agent_state st)
{
    agent_entry *e = &s->agents[i];
    if (e->pub.state == st)
        return;
    if (e->pub.state == PT_AGENT_DEAD || e->pub.state == PT_AGENT_GONE)
        return; /* final */
    e->pub.state = st;
    if (s->rec)
        pt_record_write_agent(s->rec, e->pub.id, pt_agent_state_name(st), e->pub.step);
    note(s, PT_NOTE_STATE, i, NULL, 0, NULL);
}

static void drop_requests_of(pt_session *s, int agent)
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
    if ((rc = setup_trust(s, cfg, err)) < 0)
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
    if (s->router)
        zmq_close(s->router);
    if (s->sub)
        zmq_close(s->sub);
    pt_zap_stop(&s->zap);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    pt_record_writer_close(&s->rec);
    pt_telemetry_rx_destroy(&s->rx);
    free(s->agents);
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

/* ---- sending ---------------------------------------------------------------- */

/* Encodes and queues m for agent i (its seq and agent id are filled in). */
static int send_to(pt_session *s, int i, pt_msg *m, pt_error *err)
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
            record_frame(s, PT_RECORD_SENT, "control", 0, text, len);
    }
    free(text);
    return rc;
}

static int add_request(pt_session *s, int agent, pt_msg_type type, int64_t req)
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

static int live(const agent_entry *e)
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
    send_to(s, i, &m, NULL);
}

static void send_heartbeats(pt_session *s, int64_t now)
{
    for (int i = 0; i < s->n; i++)
        if (live(&s->agents[i]))
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
        if (!live(e))
            continue;
        int64_t quiet = now - e->pub.last_heard_ns;
        char why[PT_MSG_TEXT_MAX];
        if (quiet <= bound) {
            if (e->pub.stalled) {
                e->pub.stalled = 0;
                snprintf(why, sizeof why, "heard from again after a stall");
                note(s, PT_NOTE_RESUMED, i, NULL, 0, why);
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
            note(s, PT_NOTE_STALLED, i, NULL, 0, why);
        }
    }
}

void pt_session_mark_dead(pt_session *s, int i, const char *reason)
{
    if (!s || i < 0 || i >= s->n || !live(&s->agents[i]))
        return;
    agent_entry *e = &s->agents[i];
    snprintf(e->why_dead, sizeof e->why_dead, "%s", reason ? reason : "dead");
    char d[DESCRIBE_MAX], text[DESCRIBE_MAX + PT_MSG_TEXT_MAX + 8];
    describe(&e->pub, d, sizeof d);
    snprintf(text, sizeof text, "%s: %s", d, e->why_dead);
    set_state(s, i, PT_AGENT_DEAD);
    if (s->rec)
        pt_record_write_dead(s->rec, e->pub.id, text);
    drop_requests_of(s, i);
    note(s, PT_NOTE_DEAD, i, NULL, 0, text);
}

/* ---- checkpoints -------------------------------------------------------------- */

/* Removes a step folder (plain files only, as agents write them). */
static void remove_step_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[PT_MSG_PATH_MAX + 300];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A run record that cannot be written stops the run: a record cut short
 * while the run went on would be a silent loss (it is what replay, export
 * and calibrate read). */
static void check_record(pt_session *s)
{
    pt_error err = {0};
    if (s->fatal[0] || !pt_record_writer_failed(s->rec, &err))
        return;
    snprintf(s->fatal, sizeof s->fatal, "%s", err.msg);
    note(s, PT_NOTE_FATAL, -1, NULL, 0, s->fatal);
}

int pt_session_fatal(const pt_session *s, pt_error *err)
{
    if (!s || !s->fatal[0])
        return 0;
    pt_error_set(err, PT_EIO, "%s", s->fatal);
    return 1;
}

void pt_session_set_agent_checkpoint_dir(pt_session *s, const char *dir)
{
    if (s)
        snprintf(s->agent_ckpt, sizeof s->agent_ckpt, "%s", dir ? dir : "");
}

void pt_session_set_stall_ms(pt_session *s, int stall_ms)
{
    if (s)
        s->stall_ms = stall_ms > s->missed * s->hb_ms ? stall_ms : s->missed * s->hb_ms;
}

int pt_session_stall_ms(const pt_session *s)
{
    return s ? s->stall_ms : 0;
}

static void try_commit(pt_session *s)
{
    if (!s->ckpt_dir[0] || !s->commit || s->worker_count == 0)
        return;
    int64_t n = INT64_MAX;
    for (int w = 0; w < s->worker_count; w++) {
        const agent_entry *e = &s->agents[s->workers[w]];
        if (e->pub.gen != s->gen)
            return;
        if (e->pub.ckpt_step < n)
            n = e->pub.ckpt_step;
    }
    if (n < 0 || n <= s->committed)
        return;
    char dir[PT_MSG_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/step-%lld", s->ckpt_dir, (long long)n);
    pt_error err = {0};
    int64_t t0 = pt_msg_now_ns();
    int rc = s->commit(s->commit_user, dir, n, s->stage_count, &err);
    if (rc == 0)
        rc = pt_ckpt_latest_save(s->ckpt_dir, n, &err);
    double commit_ms = (double)(pt_msg_now_ns() - t0) / 1e6;
    if (rc < 0) {
        /* A checkpoint that cannot be committed stops the run (it would go
         * on with nothing to resume from), and its half-written folder goes:
         * only committed steps stay in the checkpoint folder. */
        char text[PT_ERROR_MAX + 64];
        snprintf(text, sizeof text, "checkpoint step %lld: %s", (long long)n, err.msg);
        if (s->rec)
            pt_record_write_checkpoint_failed(s->rec, n, dir, text);
        remove_step_dir(dir);
        if (!s->fatal[0])
            snprintf(s->fatal, sizeof s->fatal, "%.440s (the step folder was removed)", text);
        note(s, PT_NOTE_ERROR, -1, NULL, n, text);
        return;
    }
    s->committed = n;
    if (s->rec)
        pt_record_write_checkpoint(s->rec, n, dir, commit_ms);
    if (s->kept_n == PT_SESSION_CKPT_KEEP) {
        char old[PT_MSG_PATH_MAX + 32];
        snprintf(old, sizeof old, "%s/step-%lld", s->ckpt_dir, (long long)s->kept[0]);
        remove_step_dir(old);
        memmove(s->kept, s->kept + 1, (PT_SESSION_CKPT_KEEP - 1) * sizeof s->kept[0]);
        s->kept_n--;
    }
    s->kept[s->kept_n++] = n;
    note(s, PT_NOTE_CHECKPOINT, -1, NULL, n, NULL);
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
    agent_entry *e = &s->agents[s->n];
    memset(e, 0, sizeof *e);
    snprintf(e->pub.id, sizeof e->pub.id, "%s", id);
    e->pub.worker = e->pub.stage = e->pub.replica = -1;
    e->pub.step = e->pub.ckpt_step = e->pub.stop_step = -1;
    e->pub.device = -1;
    pt_clock_filter_init(&e->clk);
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
    snprintf(e->pub.data_endpoint, sizeof e->pub.data_endpoint, "%s", r->data_endpoint);
    snprintf(e->pub.gpu_bus_id, sizeof e->pub.gpu_bus_id, "%s", r->gpu_bus_id);
    e->pub.has_nccl = 0;
    for (int c = 0; c < r->cap_count; c++)
        e->pub.has_nccl |= !strcmp(r->caps[c], "nccl");
    e->pub.last_heard_ns = now;
    e->ctl_next_seq = m->seq + 1;
    send_heartbeat(s, i, now); /* its answer gives the first clock sample at once */
    note(s, PT_NOTE_REGISTERED, i, m, 0, NULL);
}

static void on_hold_ack(pt_session *s, int64_t step);

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
        set_state(s, i, PT_AGENT_IDLE);
}

static void reject(pt_session *s, int i, const char *channel, const char *agent, const char *reason)
{
    if (!strcmp(channel, "control")) {
        s->counts.control_rejected++;
        if (i >= 0)
            s->agents[i].pub.control_rejected++;
    } else {
        s->counts.telemetry_rejected++;
    }
    record_rejected(s, channel, agent, reason);
    note(s, PT_NOTE_REJECTED, i, NULL, 0, reason);
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

static int key_refused(pt_session *s, const char *channel, int i, const pt_msg *m, const char *key)
{
    if (!s->zap || !key)
        return 0;
    char why[PT_ERROR_MAX];
    const char *mine = key_bound_elsewhere(s, key, m->agent);
    if (mine) {
        snprintf(why, sizeof why,
                 "%s (%s) from %s: sent with key %.8s..., which is bound to the name %s", channel,
                 pt_msg_type_name(m->type), m->agent, key, mine);
        reject(s, -1, channel, m->agent, why);
        return 1;
    }
    const char *want = i >= 0 ? s->agents[i].pub.public_key : bound_key(s, m->agent);
    if (!want[0] || !strcmp(want, key))
        return 0;
    snprintf(why, sizeof why,
             "%s (%s) from %s: sent with key %.8s..., but the name belongs to key %.8s...", channel,
             pt_msg_type_name(m->type), m->agent, key, want);
    reject(s, -1, channel, m->agent, why); /* not the named agent's doing */
    return 1;
}

static int key_mismatch(pt_session *s, int i, const pt_msg *m, const char *key)
{
    return key_refused(s, "control", i, m, key);
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
        reject(s, i, "control", i >= 0 ? id : NULL, err.msg);
        return;
    }
    char why[PT_ERROR_MAX];
    if (strcmp(m.agent, id) != 0 || ident_len != strlen(m.agent)) {
        snprintf(why, sizeof why, "control (%s): agent \"%s\" is not the sender's routing id",
                 pt_msg_type_name(m.type), m.agent);
        reject(s, i, "control", i >= 0 ? id : NULL, why);
        goto done;
    }
    if (i < 0 && m.type != PT_MSG_REGISTER) {
        snprintf(why, sizeof why, "control (%s) from %s: not registered", pt_msg_type_name(m.type),
                 m.agent);
        reject(s, -1, "control", NULL, why);
        goto done;
    }
    if (key_mismatch(s, i, &m, key))
        goto done;
    if (pt_msg_accept(&m, PT_MSG_AT_CONSOLE, s->gen, &err) < 0) {
        reject(s, i, "control", m.agent, err.msg);
        goto done;
    }
    if (m.type == PT_MSG_REGISTER) {
        if (i >= 0 && m.seq != 0 && m.seq < s->agents[i].ctl_next_seq) {
            snprintf(why, sizeof why, "control (register) from %s: seq %lld out of order", m.agent,
                     (long long)m.seq);
            reject(s, i, "control", m.agent, why);
            goto done;
        }
        if (i >= 0 && !live(&s->agents[i]) && m.seq != 0) {
            snprintf(why, sizeof why, "control (register) from %s: the agent is %s", m.agent,
                     pt_agent_state_name(s->agents[i].pub.state));
            reject(s, i, "control", m.agent, why);
            goto done;
        }
        s->counts.control_received++;
        record_frame(s, PT_RECORD_RECV, "control", 0, body, len);
        on_register(s, i, &m, now);
        if (s->zap && (i = pt_session_find_agent(s, m.agent)) >= 0)
            snprintf(s->agents[i].pub.public_key, sizeof s->agents[i].pub.public_key, "%s", key);
        goto done;
    }
    agent_entry *e = &s->agents[i];
    if (!live(e)) {
        snprintf(why, sizeof why, "control (%s) from %s: the agent is %s", pt_msg_type_name(m.type),
                 m.agent, pt_agent_state_name(e->pub.state));
        reject(s, i, "control", m.agent, why);
        goto done;
    }
    if (m.seq < e->ctl_next_seq) {
        snprintf(why, sizeof why, "control (%s) from %s: seq %lld out of order (expected %lld)",
                 pt_msg_type_name(m.type), m.agent, (long long)m.seq, (long long)e->ctl_next_seq);
        reject(s, i, "control", m.agent, why);
        goto done;
    }
    e->pub.control_dropped += (uint64_t)(m.seq - e->ctl_next_seq);
    e->ctl_next_seq = m.seq + 1;
    e->pub.last_heard_ns = now;
    s->counts.control_received++;
    if (m.type != PT_MSG_HEARTBEAT)
        record_frame(s, PT_RECORD_RECV, "control", e->pub.clock_offset_ns, body, len);
    switch (m.type) {
    case PT_MSG_HEARTBEAT:
        on_heartbeat(s, i, &m, now);
        break;
    case PT_MSG_ACK:
        if (!take_request(s, i, m.req, m.u.ack.of)) {
            snprintf(why, sizeof why, "control (ack) from %s: no %s request %lld is pending",
                     m.agent, pt_msg_type_name(m.u.ack.of), (long long)m.req);
            s->counts.control_received--;
            reject(s, i, "control", m.agent, why);
            break;
        }
        if (m.u.ack.of == PT_MSG_ASSIGN) {
            e->pub.gen = m.gen;
            set_state(s, i, PT_AGENT_ASSIGNED);
        } else if (m.u.ack.of == PT_MSG_START) {
            set_state(s, i, PT_AGENT_RUNNING);
        } else if (m.req >= s->hold_lo && m.req < s->hold_hi) {
            on_hold_ack(s, m.u.ack.step);
        } else {
            if (m.u.ack.step >= 0) {
                e->pub.stop_step = m.u.ack.step;
                if (m.u.ack.step - 1 > e->pub.step)
                    e->pub.step = m.u.ack.step - 1;
            }
            set_state(s, i, PT_AGENT_STOPPED);
        }
        break;
    case PT_MSG_CHECKPOINT_ACK:
        if (m.req > 0)
            take_request(s, i, m.req, PT_MSG_CHECKPOINT);
        if (m.u.checkpoint_ack.step > e->pub.ckpt_step)
            e->pub.ckpt_step = m.u.checkpoint_ack.step;
        try_commit(s);
        break;
    case PT_MSG_ERROR: {
        snprintf(e->pub.last_error, sizeof e->pub.last_error, "%s", m.u.error.reason);
        int about_run =
            m.u.error.stage >= 0 || (m.req > 0 && take_request(s, i, m.req, PT_MSG_TYPE_COUNT));
        if (about_run) {
            drop_requests_of(s, i);
            set_state(s, i, PT_AGENT_FAILED);
        }
        note(s, PT_NOTE_ERROR, i, &m, 0, m.u.error.reason);
        break;
    }
    case PT_MSG_BYE:
        snprintf(e->bye_reason, sizeof e->bye_reason, "%s",
                 m.u.bye.reason[0] ? m.u.bye.reason : "left");
        drop_requests_of(s, i);
        set_state(s, i, PT_AGENT_GONE);
        break;
    default:
        break; /* register handled above; pt_msg_accept refused console-only types */
    }
done:
    pt_msg_clear(&m);
}

/* ---- receiving telemetry -------------------------------------------------------- */

/* A telemetry frame under a name whose key is not the sender's (CURVE): a
 * forgery. Checked before the frame's sequence number is tracked, so a
 * forged frame (say seq 2^53) cannot make the real agent's next frames look
 * old. 1 when refused. */
static int telemetry_forged(pt_session *s, const pt_msg *m, const char *key)
{
    return key_refused(s, "telemetry", pt_session_find_agent(s, m->agent), m, key);
}

static void handle_telemetry(pt_session *s, const char *body, size_t len, const char *key)
{
    pt_msg m;
    pt_error err = {0};
    int rc = pt_msg_decode(body, len, "telemetry", &m, &err);
    if (rc < 0) /* counted as malformed (for the agent, when its name can be read) */
        rc = pt_telemetry_rx_feed(s->rx, body, len, "telemetry", &m, &err);
    else if (telemetry_forged(s, &m, key)) {
        pt_msg_clear(&m);
        return;
    } else if ((rc = pt_telemetry_rx_observe(s->rx, &m, &err)) < 0)
        pt_msg_clear(&m);
    if (rc < 0) {
        record_rejected(s, "telemetry", NULL, err.msg);
        note(s, PT_NOTE_REJECTED, -1, NULL, 0, err.msg);
        return;
    }
    int i = pt_session_find_agent(s, m.agent);
    char why[PT_ERROR_MAX];
    if (m.type != PT_MSG_EVENTS && m.type != PT_MSG_METRICS) {
        snprintf(why, sizeof why, "telemetry (%s) from %s: not a telemetry message",
                 pt_msg_type_name(m.type), m.agent);
        reject(s, i, "telemetry", m.agent, why);
    } else if (i < 0) {
        snprintf(why, sizeof why, "telemetry (%s) from %s: not registered",
                 pt_msg_type_name(m.type), m.agent);
        reject(s, -1, "telemetry", m.agent, why);
    } else {
        agent_entry *e = &s->agents[i];
        int64_t off = e->pub.clock_offset_ns;
        record_frame(s, PT_RECORD_RECV, "telemetry", off, body, len);
        if (m.type == PT_MSG_METRICS) {
            e->pub.metrics = m.u.metrics;
            e->pub.has_metrics = 1;
            if (m.u.metrics.step > e->pub.step)
                e->pub.step = m.u.metrics.step;
            note(s, PT_NOTE_METRICS, i, &m, 0, NULL);
        } else {
            for (int k = 0; k < m.u.events.count; k++) {
                m.u.events.events[k].start_ns -= off;
                m.u.events.events[k].end_ns -= off;
            }
            note(s, PT_NOTE_EVENTS, i, &m, 0, NULL);
        }
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
        record_rejected(s, "control", i >= 0 ? id : NULL, why);
        note(s, PT_NOTE_REJECTED, i, NULL, 0, why);
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
            reject(s, i, "control", i >= 0 ? id : NULL, why);
        }
        for (int j = 0; j < nf; j++)
            zmq_msg_close(&f[j]);
    }
    return 0;
}

static int drain_telemetry(pt_session *s, pt_error *err)
{
    for (int k = 0; k < RECV_BATCH_MAX; k++) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s->sub, ZMQ_DONTWAIT) < 0) {
            int e = errno;
            zmq_msg_close(&part);
            if (e == EAGAIN || e == EINTR)
                return 0;
            return pt_error_set(err, PT_EIO, "session: telemetry receive: %s", zmq_strerror(e));
        }
        /* the ZAP handler's User-Id: the sender's CURVE key (NULL: plain) */
        handle_telemetry(s, zmq_msg_data(&part), zmq_msg_size(&part),
                         s->zap ? zmq_msg_gets(&part, "User-Id") : NULL);
        zmq_msg_close(&part);
    }
    return 0;
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
        if ((rc = drain_control(s, err)) < 0 || (rc = drain_telemetry(s, err)) < 0)
            return rc;
        int64_t now = pt_msg_now_ns();
        if (now >= s->next_hb_ns) {
            send_heartbeats(s, now);
            s->next_hb_ns = now + (int64_t)s->hb_ms * NS_PER_MS;
        }
        check_silence(s, now);
        int64_t until = deadline < s->next_hb_ns ? deadline : s->next_hb_ns;
        long wait_ms = until > now ? (long)((until - now + NS_PER_MS - 1) / NS_PER_MS) : 0;
        zmq_pollitem_t items[2] = {{s->router, 0, ZMQ_POLLIN, 0}, {s->sub, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, 2, wait_ms);
        if (n < 0 && errno != EINTR)
            return pt_error_set(err, PT_EIO, "session: poll: %s", zmq_strerror(errno));
        if (n > 0 && (items[0].revents & ZMQ_POLLIN) && (rc = drain_control(s, err)) < 0)
            return rc;
        if (n > 0 && (items[1].revents & ZMQ_POLLIN) && (rc = drain_telemetry(s, err)) < 0)
            return rc;
        pt_record_flush(s->rec);
        check_record(s);
        if (n != 0 || pt_msg_now_ns() >= deadline)
            return 0;
    }
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

int pt_session_find_agent(const pt_session *s, const char *id)
{
    for (int i = 0; s && id && i < s->n; i++)
        if (!strcmp(s->agents[i].pub.id, id))
            return i;
    return -1;
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
        describe(&e->pub, d, sizeof d);
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
            describe(&s->agents[r->agent].pub, d, sizeof d);
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

/* ---- requests ------------------------------------------------------------------- */

/* The data-plane run token every assign hands out: random once per
 * session, or PT_RUN_TOKEN (16 hex digits) from the environment, so a test
 * can reproduce an attack by someone who knows it. */
static uint64_t data_run_token(pt_session *s)
{
    const char *env = getenv("PT_RUN_TOKEN");
    while (!s->run_token) {
        if (env && strlen(env) == 16 && strspn(env, "0123456789abcdef") == 16)
            s->run_token = strtoull(env, NULL, 16);
        else if (getrandom(&s->run_token, sizeof s->run_token, 0) != sizeof s->run_token)
            s->run_token = (uint64_t)pt_msg_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
        env = NULL;
    }
    return s->run_token;
}

static int record_plan(pt_session *s, const pt_session_plan *p)
{
    if (!s->rec)
        return 0;
    pt_record_worker *w = calloc((size_t)s->worker_count, sizeof *w);
    if (!w)
        return PT_ENOMEM;
    for (int k = 0; k < s->worker_count; k++) {
        const pt_session_agent *a = &s->agents[s->workers[k]].pub;
        w[k] = (pt_record_worker){
            .worker = k, .stage = a->stage, .replica = a->replica, .pid = a->pid};
        snprintf(w[k].agent, sizeof w[k].agent, "%s", a->id);
    }
    pt_record_plan rp = {s->gen,
                         p->plan,
                         p->model,
                         p->data,
                         p->seed,
                         p->checkpoint_dir,
                         p->checkpoint_every,
                         p->resume_step,
                         s->worker_count,
                         w};
    int rc = pt_record_write_plan(s->rec, &rp);
    free(w);
    return rc;
}

/* Fills the worker table from the plan: stage by stage, replica by replica;
 * for an interleaved plan one entry per device (the replicas of its first S
 * stages), whose agent runs every chunk of that device. */
static int map_workers(pt_session *s, const pt_session_plan *p, pt_error *err)
{
    int wc = pt_plan_agent_count(p->plan), P = pt_plan_rank_count(p->plan);
    if (wc < 1)
        return pt_error_set(err, PT_EINVAL, "session: the plan has no stage replicas");
    for (int w = 0; w < wc; w++) {
        int a = p->agents[w];
        if (a < 0 || a >= s->n)
            return pt_error_set(err, PT_EINVAL, "session: worker %d: agent index %d unknown", w, a);
        const agent_entry *e = &s->agents[a];
        if (!live(e) || e->pub.state == PT_AGENT_FAILED || e->pub.state == PT_AGENT_RUNNING)
            return pt_error_set(err, PT_ESTATE, "session: worker %d: agent %s is %s", w, e->pub.id,
                                pt_agent_state_name(e->pub.state));
        if (!e->pub.data_endpoint[0])
            return pt_error_set(err, PT_EINVAL,
                                "session: worker %d: agent %s registered no data endpoint", w,
                                e->pub.id);
        for (int v = 0; v < w; v++)
            if (p->agents[v] == a)
                return pt_error_set(err, PT_EINVAL, "session: agent %s is given workers %d and %d",
                                    e->pub.id, v, w);
    }
    int *workers = realloc(s->workers, (size_t)wc * sizeof *workers);
    if (!workers)
        return pt_error_set(err, PT_ENOMEM, "session: out of memory");
    s->workers = workers;
    s->worker_count = wc;
    s->stage_count = p->plan->stage_count;
    for (int i = 0; i < s->n; i++)
        s->agents[i].pub.worker = s->agents[i].pub.stage = s->agents[i].pub.replica = -1;
    int w = 0;
    for (int st = 0; st < P; st++)
        for (int r = 0; r < p->plan->stages[st].replica_count; r++, w++) {
            agent_entry *e = &s->agents[p->agents[w]];
            s->workers[w] = p->agents[w];
            e->pub.worker = w;
            e->pub.stage = st;
            e->pub.replica = r;
            e->pub.step = -1;
            e->pub.ckpt_step = -1;
            e->pub.stop_step = -1;
            e->restarted = 0;
        }
    return 0;
}

/* A fresh NCCL unique id for the next generation when its workers may use
 * NCCL (runtime/comm_nccl.h: every one on its own GPU), else "": they then
 * exchange tensors over the ZeroMQ data plane. One id per generation, the
 * same for every worker; made here, so the same path works across nodes. */
static void pick_nccl_id(pt_session *s, char *id, size_t cap)
{
    id[0] = '\0';
    pt_nccl_member *m = calloc((size_t)s->worker_count + 1, sizeof *m);
    if (!m)
        return;
    for (int w = 0; w < s->worker_count; w++) {
        const pt_session_agent *a = &s->agents[s->workers[w]].pub;
        m[w] = (pt_nccl_member){a->host, a->gpu_bus_id, a->has_nccl};
    }
    if (pt_nccl_members_ok(m, s->worker_count) && pt_nccl_id_new(id, cap, NULL) < 0)
        id[0] = '\0';
    free(m);
}

int pt_session_assign(pt_session *s, const pt_session_plan *p, pt_error *err)
{
    if (!s || !p || !p->plan || !p->model || !p->agents || !p->data)
        return pt_error_set(err, PT_EINVAL, "session: assign: plan, model, agents and data needed");
    if (p->resume_step > 0 && !p->checkpoint_dir)
        return pt_error_set(err, PT_EINVAL, "session: resume step %lld needs a checkpoint folder",
                            (long long)p->resume_step);
    char *plan_json = pt_plan_to_json(p->plan), *model_json = pt_model_spec_to_json(p->model);
    pt_msg_peer *peers = NULL;
    int rc = 0;
    if (!plan_json || !model_json) {
        rc = pt_error_set(err, PT_ENOMEM, "session: out of memory");
        goto done;
    }
    if ((rc = map_workers(s, p, err)) < 0)
        goto done;
    s->hold_lo = s->hold_hi = 0; /* a stop left unanswered belongs to the old generation */
    peers = calloc((size_t)s->worker_count, sizeof *peers);
    if (!peers) {
        rc = pt_error_set(err, PT_ENOMEM, "session: out of memory");
        goto done;
    }
    for (int w = 0; w < s->worker_count; w++) {
        const pt_session_agent *a = &s->agents[s->workers[w]].pub;
        peers[w].rank = w;
        peers[w].stage = a->stage;
        peers[w].replica = a->replica;
        snprintf(peers[w].endpoint, sizeof peers[w].endpoint, "%s", a->data_endpoint);
        /* the keys the handshakes proved: peers authenticate each other with them */
        snprintf(peers[w].key, sizeof peers[w].key, "%s", a->public_key);
    }
    char nccl_id[PT_MSG_NCCL_ID_MAX];
    pick_nccl_id(s, nccl_id, sizeof nccl_id);
    s->gen++;
    pt_telemetry_rx_set_generation(s->rx, s->gen);
    snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s", p->checkpoint_dir ? p->checkpoint_dir : "");
    s->committed = p->resume_step > 0 ? p->resume_step : -1;
    s->kept_n = 0;
    s->nreq = 0; /* requests of the previous generation can no longer be answered */
    record_plan(s, p);
    for (int w = 0; w < s->worker_count && rc == 0; w++) {
        int i = s->workers[w];
        const pt_session_agent *a = &s->agents[i].pub;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_ASSIGN, a->id);
        m.gen = s->gen;
        m.req = s->next_req++;
        pt_msg_assign *as = &m.u.assign;
        as->plan_json = plan_json;
        as->model_json = model_json;
        as->stage = a->stage;
        as->replica = a->replica;
        as->rank = w;
        as->chunks = p->plan->chunks > 1 ? p->plan->chunks : 1;
        as->peer_count = s->worker_count;
        as->peers = peers;
        snprintf(as->data, sizeof as->data, "%s", p->data);
        as->seed = p->seed;
        snprintf(as->checkpoint_dir, sizeof as->checkpoint_dir, "%s",
                 s->ckpt_dir[0] && s->agent_ckpt[0] ? s->agent_ckpt : s->ckpt_dir);
        as->checkpoint_every = p->checkpoint_every;
        as->resume_step = p->resume_step;
        snprintf(as->telemetry, sizeof as->telemetry, "%s", s->tel_ep);
        snprintf(as->nccl_id, sizeof as->nccl_id, "%s", nccl_id);
        as->run_token = data_run_token(s);
        rc = send_to(s, i, &m, err);
        if (rc == 0 && (rc = add_request(s, i, PT_MSG_ASSIGN, m.req)) < 0)
            pt_error_set(err, rc, "session: out of memory");
        /* plan, model and peers stay ours: not pt_msg_clear'd */
    }
done:
    free(plan_json);
    free(model_json);
    free(peers);
    return rc;
}

int pt_session_adopt(pt_session *s, const pt_session_plan *p, int64_t gen, pt_error *err)
{
    if (!s || !p || !p->plan || !p->model || !p->agents || !p->data)
        return pt_error_set(err, PT_EINVAL, "session: adopt: plan, model, agents and data needed");
    if (gen <= s->gen || gen > PT_MSG_INT_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "session: adopt: generation %lld is not newer than %lld",
                            (long long)gen, (long long)s->gen);
    int rc = map_workers(s, p, err);
    if (rc < 0)
        return rc;
    s->gen = gen;
    pt_telemetry_rx_set_generation(s->rx, gen);
    snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s", p->checkpoint_dir ? p->checkpoint_dir : "");
    int64_t latest = -1;
    if (s->ckpt_dir[0] && pt_ckpt_latest_load(s->ckpt_dir, &latest, NULL) < 0)
        latest = -1;
    s->committed = latest;
    s->kept_n = 0;
    s->nreq = 0;
    s->hold_lo = s->hold_hi = 0;
    record_plan(s, p);
    for (int w = 0; w < s->worker_count; w++) {
        agent_entry *e = &s->agents[s->workers[w]];
        e->pub.gen = gen;
        set_state(s, s->workers[w], PT_AGENT_RUNNING);
    }
    return 0;
}

static int send_all(pt_session *s, pt_msg_type type, const pt_msg *tmpl, pt_error *err);

/* A hold was acknowledged at `step`: once every hold is, every worker is
 * told to stop at the highest step named (none begins an iteration beyond
 * its own, so each can reach it). */
static void on_hold_ack(pt_session *s, int64_t step)
{
    if (step > s->hold_max)
        s->hold_max = step;
    for (int j = 0; j < s->nreq; j++)
        if (s->reqs[j].type == PT_MSG_STOP && s->reqs[j].req >= s->hold_lo &&
            s->reqs[j].req < s->hold_hi)
            return;
    s->hold_lo = s->hold_hi = 0;
    pt_msg m;
    pt_msg_init(&m, PT_MSG_STOP, NULL);
    snprintf(m.u.stop.reason, sizeof m.u.stop.reason, "%s", s->stop_reason);
    m.u.stop.at_step = s->hold_max > 0 ? s->hold_max : 0;
    s->stop_at = m.u.stop.at_step;
    pt_error err = {0};
    if (send_all(s, PT_MSG_STOP, &m, &err) < 0)
        s->counts.sends_failed++; /* pt_session_wait then reports the missing acks */
}

static int send_all(pt_session *s, pt_msg_type type, const pt_msg *tmpl, pt_error *err)
{
    if (s->worker_count == 0 || s->gen == 0)
        return pt_error_set(err, PT_ESTATE, "session: %s: no plan has been assigned",
                            pt_msg_type_name(type));
    for (int w = 0; w < s->worker_count; w++) {
        int i = s->workers[w];
        if (!live(&s->agents[i]))
            continue;
        pt_msg m = *tmpl;
        m.type = type;
        m.gen = s->gen;
        m.req = s->next_req++;
        int rc = send_to(s, i, &m, err);
        if (rc < 0)
            return rc;
        if (add_request(s, i, type, m.req) < 0)
            return pt_error_set(err, PT_ENOMEM, "session: out of memory");
    }
    return 0;
}

int pt_session_start(pt_session *s, int64_t steps, pt_error *err)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_START, NULL);
    m.u.start.steps = steps < 0 ? 0 : steps;
    return send_all(s, PT_MSG_START, &m, err);
}

int pt_session_stop(pt_session *s, const char *reason, pt_error *err)
{
    if (s->hold_hi > s->hold_lo)
        return 0; /* a stop is already on its way */
    pt_msg m;
    pt_msg_init(&m, PT_MSG_STOP, NULL);
    snprintf(m.u.stop.reason, sizeof m.u.stop.reason, "%s", reason ? reason : "");
    snprintf(s->stop_reason, sizeof s->stop_reason, "%s", m.u.stop.reason);
    m.u.stop.hold = 1;
    s->stop_at = -1;
    s->hold_max = 0;
    int64_t lo = s->next_req;
    int rc = send_all(s, PT_MSG_STOP, &m, err);
    if (rc < 0)
        return rc;
    if (s->next_req == lo) /* no live worker: nothing to stop */
        return 0;
    s->hold_lo = lo;
    s->hold_hi = s->next_req;
    return 0;
}

int64_t pt_session_stop_step(const pt_session *s)
{
    return s ? s->stop_at : -1;
}

int pt_session_checkpoint(pt_session *s, int64_t step, pt_error *err)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_CHECKPOINT, NULL);
    m.u.checkpoint.step = step < 0 ? -1 : step;
    return send_all(s, PT_MSG_CHECKPOINT, &m, err);
}

void pt_session_bye(pt_session *s, const char *reason)
{
    for (int i = 0; s && i < s->n; i++) {
        if (!live(&s->agents[i]))
            continue;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_BYE, NULL);
        m.gen = s->agents[i].pub.gen;
        snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "%s", reason ? reason : "");
        send_to(s, i, &m, NULL);
    }
    if (s)
        pt_record_flush(s->rec);
}

int pt_session_record(pt_session *s, const char *kind, const char *fields_json)
{
    if (!s || !kind)
        return PT_EINVAL;
    return s->rec ? pt_record_write_json(s->rec, kind, fields_json) : 0;
}
