/* The session's requests: assigning a plan (one generation), adopting one,
 * start, the two-round stop, checkpoints, bye and the record's entries. */
#include "tui/control/session_internal.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/comm_nccl.h"

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
        if (!session_live(e) || e->pub.state == PT_AGENT_FAILED || e->pub.state == PT_AGENT_RUNNING)
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
    /* the plan, model and peers cross the wire as one text each, made once
     * here and embedded as the same bytes in every worker's assign */
    char *plan_json = NULL, *model_json = NULL, *peers_json = NULL;
    pt_msg_peer *peers = NULL;
    int rc = pt_msg_assign_texts(p->plan, p->model, &plan_json, &model_json, err);
    if (rc < 0)
        goto done;
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
    if ((rc = pt_msg_assign_peers_text(peers, s->worker_count, &peers_json, err)) < 0)
        goto done;
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
        if (a->simulated) { /* no data plane: its own entry, not 1,024 it never reads */
            as->peer_count = 1;
            as->peers = &peers[w];
        } else {
            as->peer_count = s->worker_count;
            as->peers = peers;
            as->peers_json = peers_json;
        }
        snprintf(as->data, sizeof as->data, "%s", p->data);
        as->seed = p->seed;
        snprintf(as->checkpoint_dir, sizeof as->checkpoint_dir, "%s",
                 s->ckpt_dir[0] && s->agent_ckpt[0] ? s->agent_ckpt : s->ckpt_dir);
        as->checkpoint_every = p->checkpoint_every;
        as->resume_step = p->resume_step;
        snprintf(as->telemetry, sizeof as->telemetry, "%s", s->tel_ep);
        snprintf(as->nccl_id, sizeof as->nccl_id, "%s", nccl_id);
        as->run_token = data_run_token(s);
        rc = session_send_to(s, i, &m, err);
        if (rc == 0 && (rc = session_add_request(s, i, PT_MSG_ASSIGN, m.req)) < 0)
            pt_error_set(err, rc, "session: out of memory");
        /* plan, model and peers stay ours: not pt_msg_clear'd */
    }
done:
    free(plan_json);
    free(model_json);
    free(peers_json);
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
        session_set_state(s, s->workers[w], PT_AGENT_RUNNING);
    }
    return 0;
}

static int send_all(pt_session *s, pt_msg_type type, const pt_msg *tmpl, pt_error *err);

/* A hold was acknowledged at `step`: once every hold is, every worker is
 * told to stop at the highest step named (none begins an iteration beyond
 * its own, so each can reach it). */
void session_on_hold_ack(pt_session *s, int64_t step)
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
        if (!session_live(&s->agents[i]))
            continue;
        pt_msg m = *tmpl;
        m.type = type;
        m.gen = s->gen;
        m.req = s->next_req++;
        int rc = session_send_to(s, i, &m, err);
        if (rc < 0)
            return rc;
        if (session_add_request(s, i, type, m.req) < 0)
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

/* A stop sent on a connection that broke before the agent read it is lost
 * with it: ZeroMQ drops what a dead pipe held. When the same process
 * registers again (its reconnect), each stop still pending for it is sent
 * once more under its own id: a hold is answered with the first horizon
 * again, a stop at a step names the same step (agent/worker.c), so an agent
 * that did read it loses nothing by the repeat. */
void session_resend_stops(pt_session *s, int i)
{
    for (int j = 0; j < s->nreq; j++) {
        const request *r = &s->reqs[j];
        if (r->agent != i || r->type != PT_MSG_STOP)
            continue;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_STOP, NULL);
        snprintf(m.u.stop.reason, sizeof m.u.stop.reason, "%s", s->stop_reason);
        m.u.stop.hold = r->req >= s->hold_lo && r->req < s->hold_hi;
        if (!m.u.stop.hold)
            m.u.stop.at_step = s->stop_at;
        m.gen = s->gen;
        m.req = r->req;
        if (session_send_to(s, i, &m, NULL) < 0)
            s->counts.sends_failed++;
        else
            s->counts.stops_resent++;
    }
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
        if (!session_live(&s->agents[i]))
            continue;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_BYE, NULL);
        m.gen = s->agents[i].pub.gen;
        snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "%s", reason ? reason : "");
        session_send_to(s, i, &m, NULL);
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

int pt_session_record_failed(pt_session *s, const char *reason)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "reason", reason ? reason : "?")) {
        cJSON_Delete(o);
        return PT_ENOMEM;
    }
    char *fields = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int rc = fields ? pt_session_record(s, "failed", fields) : PT_ENOMEM;
    free(fields);
    return rc;
}
