/* A generation of the worker's run: its chunks' stages (runtime/stage.h)
 * and data plane built at the assign (socket bound, no connection), wired
 * at the generation's first iteration (docs/protocol.md, "Generations on the
 * data plane"), torn down at the next assign or when the agent leaves. See
 * agent/worker_internal.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "agent/worker_internal.h"
#include "protocol/fileio.h"
#include "runtime/backend_cuda.h"
#include "runtime/feed.h"
#include "runtime/net.h"
#include "runtime/optim.h"

/* ---- set-up and tear-down ------------------------------------------------------- */

void pt_wk_teardown(pt_agent_worker *w)
{
    run_state *r = &w->r;
    for (int c = 0; c < r->nch; c++) {
        pt_stage_unwire(r->ch[c].st);
        pt_collective_destroy(&r->ch[c].coll);
    }
    pt_exec_host_free(&r->host);
    pt_comm_destroy(&r->comm);
    pt_nccl_destroy(&r->nccl_replicas);
    pt_nccl_destroy(&r->nccl);
    pt_zap_stop(&r->data_zap);
    free(r->peer_keys);
    r->peer_keys = NULL;
    free(r->peer_eps);
    r->peer_eps = NULL;
    pthread_mutex_lock(&w->mu);
    void *ctx = r->data_ctx;
    int quitting = w->quit;
    w->abort_ctx = NULL;
    w->built = 0;
    pthread_mutex_unlock(&w->mu);
    /* Terminating releases the data port before the next bind. The sockets
     * do not linger (make_comm): a generation ends at a stop that every
     * worker reached, so nothing queued is still wanted, and a socket of it
     * reconnecting to a peer that moved on (whose new generation's ZAP
     * refuses it, or that is stopped) must not hold the next assign for the
     * data-plane timeout. A process on its way out does not wait either. */
    if (ctx && !quitting)
        zmq_ctx_term(ctx);
    r->data_ctx = NULL;
    for (int c = 0; c < r->nch; c++)
        pt_stage_destroy(&r->ch[c].st); /* after the context: zero-copy sends read its net */
    pt_dataset_free(&r->ds);
    if (r->ev_mu_ok)
        pthread_mutex_destroy(&r->ev_mu);
    pt_program_release(&r->prog);
    pt_plan_free(&r->plan);
    pt_model_spec_free(&r->spec);
    free(r->events);
    memset(r, 0, sizeof *r);
    r->last_saved = -1;
}

/* Floats holding the bytes of a string (exact small integers), for the
 * endpoint swap over the data plane. */
static int rank_of(const run_state *r, int worker)
{
    return r->ranks ? r->ranks[worker] : worker;
}

/* Swaps chunk c's collective endpoints with the other replicas of its stage
 * (workers [lo, hi)), over the data plane, one tag per chunk. */
static int exchange_coll_endpoints(run_state *r, int c, const char *mine,
                                   char (*eps)[PT_MSG_ENDPOINT_MAX], int lo, int hi, pt_error *err)
{
    float buf[PT_MSG_ENDPOINT_MAX];
    size_t n = strlen(mine);
    for (size_t i = 0; i < PT_MSG_ENDPOINT_MAX; i++)
        buf[i] = i < n ? (float)(unsigned char)mine[i] : 0.0f;
    uint64_t tag = pt_comm_tag(PT_COMM_USER, COLL_EXCHANGE_MB + (uint32_t)c, (uint32_t)r->gen);
    int me = r->ch[c].worker;
    for (int k = lo; k < hi; k++)
        if (k != me) {
            int rc = pt_comm_send(r->comm, rank_of(r, k), tag, buf, PT_MSG_ENDPOINT_MAX, err);
            if (rc < 0)
                return rc;
        }
    for (int k = lo; k < hi; k++) {
        if (k == me) {
            snprintf(eps[k - lo], PT_MSG_ENDPOINT_MAX, "%s", mine);
            continue;
        }
        float in[PT_MSG_ENDPOINT_MAX];
        int rc = pt_comm_recv(r->comm, rank_of(r, k), tag, in, PT_MSG_ENDPOINT_MAX, err);
        if (rc < 0)
            return rc;
        for (int i = 0; i < PT_MSG_ENDPOINT_MAX; i++) {
            float f = in[i];
            if (f < 0 || f > 255 || f != (float)(int)f)
                return pt_error_set(err, PT_EINVAL, "collective endpoint from rank %d is not text",
                                    k);
            eps[k - lo][i] = (char)(int)f;
        }
        eps[k - lo][PT_MSG_ENDPOINT_MAX - 1] = '\0';
    }
    return 0;
}

/* Frames the data plane dropped (forged, replayed, stale, over the bound),
 * over both communicators; the worker thread's own reading. */
static void coll_stats(run_state *r, pt_comm_stats *b)
{
    memset(b, 0, sizeof *b);
    for (int c = 0; c < r->nch; c++) {
        pt_comm_stats x = {0};
        pt_collective_stats(r->ch[c].coll, &x);
        b->bad_msgs += x.bad_msgs;
        b->dropped_malformed += x.dropped_malformed;
        b->dropped_token += x.dropped_token;
        b->dropped_generation += x.dropped_generation;
        b->dropped_sender += x.dropped_sender;
        b->dropped_seq += x.dropped_seq;
        b->dropped_overflow += x.dropped_overflow;
        b->resend_asked += x.resend_asked;
        b->resent += x.resent;
        b->resend_unserved += x.resend_unserved;
        if (x.stash_peak_bytes > b->stash_peak_bytes)
            b->stash_peak_bytes = x.stash_peak_bytes;
    }
}

uint64_t pt_wk_data_dropped(run_state *r)
{
    pt_comm_stats a = {0}, b;
    pt_comm_stats_get(r->comm, &a);
    coll_stats(r, &b);
    return a.bad_msgs + b.bad_msgs;
}

/* The data plane's bounds, from the program: the largest message this
 * worker receives, and what may wait early in its buffer — every message
 * the program sends it in one pass (all its RECVs), twice, as the next
 * iteration's may come before this one's are taken, plus a stage's
 * gradients for an all-reduce neighbour that runs a chunk ahead, plus room
 * for the set-up messages. A buffer that would grow past it drops instead. */
#define STASH_SLACK_BYTES ((size_t)1 << 20)

static void data_bounds(run_state *r)
{
    size_t recv_bytes = 0, largest = (size_t)PT_COMM_SEGMENT_FLOATS * sizeof(float), grads = 0,
           grads_max = 0;
    /* the chunks of a device share the rank: their messages add up */
    for (int c = 0; c < r->nch; c++) {
        const pt_worker *pw = &r->prog.workers[r->ch[c].worker];
        const pt_net *net = pt_stage_net(r->ch[c].st);
        int64_t in_row = pt_net_in_elems(net) * (int64_t)sizeof(float);
        int64_t out_row = pt_net_out_elems(net) * (int64_t)sizeof(float);
        for (int i = pw->op_begin; i < pw->op_end; i++) {
            const pt_op *op = &r->prog.ops[i];
            int64_t rows = op->row_hi - op->row_lo;
            size_t b = op->kind == PT_OP_RECV_ACT    ? (size_t)(rows * in_row)
                       : op->kind == PT_OP_RECV_GRAD ? (size_t)(rows * out_row)
                                                     : 0;
            recv_bytes += b;
            if (b > largest)
                largest = b;
        }
        size_t g = (size_t)pt_net_param_count(net) * sizeof(float);
        grads += g;
        grads_max = g > grads_max ? g : grads_max;
    }
    r->max_msg = largest;
    r->stash_bound = 2 * recv_bytes + grads + STASH_SLACK_BYTES;
    r->coll_stash_bound = 2 * grads_max + STASH_SLACK_BYTES;
}

/* Says on stderr (the agent's log) what the data plane dropped, when that
 * grew: forged or stale frames are an attack or a bug worth a line. */
void pt_wk_log_dropped(pt_agent_worker *w, uint64_t dropped)
{
    if (dropped == w->dropped)
        return;
    pt_comm_stats a = {0}, b;
    pt_comm_stats_get(w->r.comm, &a);
    coll_stats(&w->r, &b);
    fprintf(stderr,
            "pipetop-agent %s: data plane dropped %llu frames (malformed %llu, token %llu, "
            "generation %llu, sender %llu, sequence %llu, over the %zu-byte early-arrival bound "
            "%llu); early-arrival peak %zu bytes; frames asked for again %llu times, sent "
            "again %llu (%llu asks not served)\n",
            w->id, (unsigned long long)dropped,
            (unsigned long long)(a.dropped_malformed + b.dropped_malformed),
            (unsigned long long)(a.dropped_token + b.dropped_token),
            (unsigned long long)(a.dropped_generation + b.dropped_generation),
            (unsigned long long)(a.dropped_sender + b.dropped_sender),
            (unsigned long long)(a.dropped_seq + b.dropped_seq), w->r.stash_bound,
            (unsigned long long)(a.dropped_overflow + b.dropped_overflow),
            a.stash_peak_bytes > b.stash_peak_bytes ? a.stash_peak_bytes : b.stash_peak_bytes,
            (unsigned long long)(a.resend_asked + b.resend_asked),
            (unsigned long long)(a.resent + b.resent),
            (unsigned long long)(a.resend_unserved + b.resend_unserved));
}

/* The data plane's CURVE (docs/architecture.md, "Trust"): every receiving
 * socket is a server that lets in only the assign's peers (their keys came
 * over the authenticated control channel), every sending socket a client
 * that talks only to the peer holding the key the console named. */
static int data_socket_hook(void *user, void *sock, int peer, pt_error *err)
{
    run_state *r = user;
    if (!r->peer_keys)
        return 0;
    if (peer < 0)
        return pt_trust_server(sock, r->own_key, err);
    return pt_trust_client(sock, r->own_key, r->peer_keys[peer], err);
}

/* With CURVE, the assign's peer keys by rank and the ZAP handler of the
 * generation's data context. Every peer must have a key. */
static int setup_data_trust(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    if (!w->curve)
        return 0;
    int n = r->nranks;
    r->peer_keys = calloc((size_t)n, sizeof *r->peer_keys);
    const char **list = calloc((size_t)n + 1, sizeof *list);
    int rc = 0;
    if (!r->peer_keys || !list)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int k = 0; rc == 0 && k < as->peer_count; k++) {
        const pt_msg_peer *p = &as->peers[k];
        if (p->rank >= n)
            continue;
        if (!p->key[0])
            rc = pt_error_set(err, PT_EINVAL,
                              "assign: peer rank %d has no key, and this agent talks CURVE only",
                              p->rank);
        else
            snprintf(r->peer_keys[p->rank], sizeof r->peer_keys[0], "%s", p->key);
    }
    for (int k = 0; rc == 0 && k < n; k++) {
        if (!r->peer_keys[k][0])
            rc = pt_error_set(err, PT_EINVAL, "assign: no key for rank %d of %d", k, n);
        list[k] = r->peer_keys[k];
    }
    r->own_key = &w->key;
    if (rc == 0)
        rc = pt_zap_start(r->data_ctx, list, n, &r->data_zap, err);
    free(list);
    if (rc < 0) {
        free(r->peer_keys);
        r->peer_keys = NULL;
    }
    return rc;
}

static int make_comm(pt_agent_worker *w, const char *bind, size_t stash_bound, pt_comm **out,
                     pt_error *err)
{
    run_state *r = &w->r;
    pt_comm_config cc = {.rank = r->rank,
                         .size = r->nranks,
                         .bind_endpoint = bind,
                         .zmq_context = r->data_ctx,
                         .timeout_ms = w->comm_timeout_ms,
                         .run_token = r->run_token,
                         .generation = (uint64_t)r->gen,
                         .stash_limit_bytes = stash_bound,
                         .max_msg_bytes = r->max_msg,
                         /* a generation ends at a stop every worker reached
                          * (every message taken) or at a failure: teardown
                          * never waits on a peer that moved on */
                         .no_linger = 1};
    int rc = 0;
    for (int k = 0; k < BIND_RETRIES; k++) {
        rc = pt_comm_create_hooked(&cc, data_socket_hook, r, out, err);
        if (rc != PT_EIO)
            break;
        pt_wk_sleep_ms(BIND_RETRY_MS);
    }
    return rc;
}

/* Chunk c's collective (background all-reduces among its stage's replicas):
 * a second communicator with the same rank numbering, whose endpoints the
 * replicas swap over the first. */
static int build_collective(pt_agent_worker *w, int c, pt_error *err)
{
    run_state *r = &w->r;
    int st = r->ch[c].stage, lo = r->prog.stage_worker[st], hi = r->prog.stage_worker[st + 1];
    pt_comm *c2 = NULL;
    char host_bind[PT_MSG_ENDPOINT_MAX];
    snprintf(host_bind, sizeof host_bind, "%s", w->data_ep);
    if (!strncmp(host_bind, "tcp://", 6)) {
        char *colon = strrchr(host_bind, ':');
        if (colon && colon > host_bind + 6)
            snprintf(colon, sizeof host_bind - (size_t)(colon - host_bind), ":*");
    } else if (c == 0) {
        snprintf(host_bind, sizeof host_bind, "%.240s.coll", w->data_ep);
    } else {
        snprintf(host_bind, sizeof host_bind, "%.236s.coll%d", w->data_ep, c);
    }
    int rc = make_comm(w, host_bind, r->coll_stash_bound, &c2, err);
    if (rc < 0)
        return rc;
    char(*peer_eps)[PT_MSG_ENDPOINT_MAX] = calloc((size_t)(hi - lo), sizeof *peer_eps);
    const char **all = calloc((size_t)r->nranks, sizeof *all);
    if (!peer_eps || !all)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = exchange_coll_endpoints(r, c, pt_comm_endpoint(c2), peer_eps, lo, hi, err);
    for (int k = lo; rc == 0 && k < hi; k++)
        all[rank_of(r, k)] = peer_eps[k - lo];
    if (rc == 0)
        rc = pt_comm_connect(c2, all, err);
    if (rc == 0)
        rc = pt_comm_await_peers(c2, w->comm_timeout_ms, WIRE_MAX_FAILURES, err);
    if (rc == 0)
        rc = pt_collective_create(&c2, &r->ch[c].coll, err);
    pt_comm_destroy(&c2);
    free(peer_eps);
    free(all);
    return rc;
}

/* The generation's data plane, at its assign: the context (with CURVE, its
 * ZAP handler allowing exactly the assign's peers) and the bound receiving
 * socket, and the peers' endpoints kept for pt_wk_wire_run. Nothing connects yet:
 * a peer may still be serving the previous generation, whose socket would
 * refuse this one's key (docs/protocol.md, "Generations on the data plane"). */
static int bind_comms(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    int n = r->nranks;
    r->data_ctx = zmq_ctx_new();
    if (!r->data_ctx)
        return pt_error_set(err, PT_EIO, "zmq_ctx_new: %s", zmq_strerror(errno));
    pthread_mutex_lock(&w->mu);
    w->abort_ctx = r->data_ctx;
    pthread_mutex_unlock(&w->mu);
    data_bounds(r);
    fprintf(stderr,
            "pipetop-agent %s: data plane: early-arrival buffer bound %zu bytes, messages up to "
            "%zu bytes\n",
            w->id, r->stash_bound, r->max_msg);
    if (!(r->peer_eps = calloc((size_t)n, sizeof *r->peer_eps)))
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int k = 0; k < as->peer_count; k++)
        if (as->peers[k].rank < n)
            snprintf(r->peer_eps[as->peers[k].rank], sizeof r->peer_eps[0], "%s",
                     as->peers[k].endpoint);
    for (int k = 0; k < n; k++)
        if (!r->peer_eps[k][0])
            return pt_error_set(err, PT_EINVAL, "assign: no peer has rank %d of %d", k, n);
    int rc = setup_data_trust(w, as, err);
    if (rc == 0)
        rc = make_comm(w, w->data_ep, r->stash_bound, &r->comm, err);
    return rc;
}

/* The NCCL communicators of an assign that carries an id (the console hands
 * one out only when every worker has its own GPU, runtime/comm_nccl.h): one
 * over all workers with the data-plane ranks, split into this stage's
 * replicas. Collective: every agent of the run calls it. Without an id, or on
 * the CPU, messages stay on the ZeroMQ data plane. */
static int build_nccl(pt_agent_worker *w, const pt_msg_assign *as, pt_error *err)
{
    run_state *r = &w->r;
    if (!as->nccl_id[0] || !pt_backend_is_cuda(w->be) || r->nch > 1)
        return 0; /* several chunks share one rank: their messages stay on ZeroMQ */
    int rc = pt_nccl_create(as->nccl_id, as->peer_count, as->rank, w->be, &r->nccl, err);
    if (rc == 0)
        rc = pt_nccl_split(r->nccl, r->stage, r->replica, &r->nccl_replicas, err);
    return rc;
}

/* The workers this agent runs, from the assign: its rank's worker, or with
 * "chunks" every chunk of its device (host `rank` of the program: stages
 * stage, stage+S, ... replica `replica`). The error names what disagrees. */
static int pick_chunks(run_state *r, const pt_msg_assign *as, pt_error *err)
{
    const pt_program *p = &r->prog;
    int v = as->chunks > 1 ? as->chunks : 1;
    if (v == 1) {
        r->ranks = NULL;
        r->nranks = p->worker_count;
        if (as->rank >= p->worker_count || as->peer_count != p->worker_count)
            return pt_error_set(err, PT_EINVAL,
                                "assign: rank %d and %d peers for a program of %d workers",
                                as->rank, as->peer_count, p->worker_count);
        const pt_worker *pw = &p->workers[as->rank];
        if (pw->stage != as->stage || pw->replica != as->replica)
            return pt_error_set(err, PT_EINVAL,
                                "assign: rank %d is stage %d replica %d in the plan's program, "
                                "not stage %d replica %d",
                                as->rank, pw->stage, pw->replica, as->stage, as->replica);
        r->nch = 1;
        r->ch[0].worker = as->rank;
        r->ch[0].stage = as->stage;
        return 0;
    }
    if (p->host_count <= 0 || p->chunks != v || v > CHUNKS_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "assign.chunks: %d model chunks per agent, but the plan's program "
                            "places %d per device",
                            v, p->host_count > 0 ? p->chunks : 1);
    int P = p->rank_count, h = as->rank;
    if (h >= p->host_count || as->peer_count != p->host_count)
        return pt_error_set(err, PT_EINVAL,
                            "assign: rank %d and %d peers for a program of %d devices", h,
                            as->peer_count, p->host_count);
    if (as->stage >= P || p->stage_worker[as->stage] + as->replica != h)
        return pt_error_set(err, PT_EINVAL,
                            "assign: rank %d is not stage %d replica %d's device (the first %d "
                            "stages' replicas, in order, are the devices)",
                            h, as->stage, as->replica, P);
    r->ranks = p->worker_host;
    r->nranks = p->host_count;
    r->nch = v;
    for (int c = 0; c < v; c++) {
        int st = as->stage + c * P, wk = p->stage_worker[st] + as->replica;
        if (wk >= p->stage_worker[st + 1] || p->worker_host[wk] != h)
            return pt_error_set(err, PT_EINVAL,
                                "assign: chunk %d (stage %d) has no replica %d on device %d", c, st,
                                as->replica, h);
        r->ch[c].worker = wk;
        r->ch[c].stage = st;
    }
    return 0;
}

/* Chunk c's stage: net, optimizer and feed (its layers and data). */
static int build_chunk(pt_agent_worker *w, const pt_msg_assign *as, int c, pt_error *err)
{
    run_state *r = &w->r;
    chunk *ch = &r->ch[c];
    ch->r = r;
    int rc = pt_stage_needs_data(&r->prog, ch->worker, err);
    if (rc > 0 && !r->ds)
        rc = pt_dataset_open(as->data, r->spec, PT_DATA_TRAIN, PT_AGENT_SYNTH_DATA_SEED, &r->ds,
                             err);
    if (rc < 0)
        return rc;
    pt_stage_config sc = {.prog = &r->prog,
                          .worker = ch->worker,
                          .spec = r->spec,
                          .optim = &r->plan->optimizer,
                          .backend = w->be,
                          .init_seed = (uint64_t)as->seed,
                          .data = r->ds,
                          .data_seed = (uint64_t)as->seed};
    return pt_stage_create(&sc, &ch->st, err);
}

static int build_exec(pt_agent_worker *w, int c, pt_error *err)
{
    run_state *r = &w->r;
    pt_stage_links l = {.comm = r->comm,
                        .coll = r->ch[c].coll,
                        .ranks = r->ranks,
                        .host = r->host,
                        .nccl = r->nccl,
                        .nccl_replicas = r->nccl_replicas,
                        .on_op = pt_wk_on_op,
                        .user = r,
                        .stop = &w->stop_flag};
    return pt_stage_wire(r->ch[c].st, &l, err);
}

/* The ranks this agent's workers exchange messages with, need[rank] set:
 * every replica of their stages (the collectives, and the swap of their
 * endpoints) and the other end of each of their sends and receives. At
 * 1,024 ranks that is a few dozen connections an agent, not 1,023. */
static int needed_ranks(const run_state *r, unsigned char *need)
{
    const pt_program *p = &r->prog;
    int n = 0;
    for (int c = 0; c < r->nch; c++) {
        int st = r->ch[c].stage;
        for (int k = p->stage_worker[st]; k < p->stage_worker[st + 1]; k++)
            need[rank_of(r, k)] = 1;
        const pt_worker *pw = &p->workers[r->ch[c].worker];
        for (int i = pw->op_begin; i < pw->op_end; i++)
            if ((pt_op_facts(p->ops[i].kind) & PT_OPK_P2P) && p->ops[i].peer >= 0)
                need[rank_of(r, p->ops[i].peer)] = 1;
    }
    need[r->rank] = 0;
    for (int k = 0; k < r->nranks; k++)
        n += need[k];
    return n;
}

/* The generation's first iteration: connects to the peers it talks to
 * (needed_ranks) and waits for each handshake, then swaps the replicas' collective endpoints and
 * builds the executors. It runs only after the console's start, which the console sends once every
 * worker acknowledged its assign, so every peer has bound this generation's socket by then: nothing
 * connects to another generation's. A handshake that still fails is retried a few times, then
 * reported naming the peer (never waited on for the data-plane timeout). */
int pt_wk_wire_run(pt_agent_worker *w, pt_error *err)
{
    run_state *r = &w->r;
    int n = r->nranks, linked = 0;
    int64_t t0 = pt_msg_now_ns();
    const char **eps = calloc((size_t)n, sizeof *eps);
    unsigned char *need = calloc((size_t)n, 1);
    if (!eps || !need) {
        free(eps);
        free(need);
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    }
    linked = needed_ranks(r, need);
    for (int k = 0; k < n; k++)
        eps[k] = need[k] ? r->peer_eps[k] : NULL; /* NULL: never talked to */
    int rc = pt_comm_connect(r->comm, eps, err);
    free(eps);
    free(need);
    if (rc == 0)
        rc = pt_comm_await_peers(r->comm, w->comm_timeout_ms, WIRE_MAX_FAILURES, err);
    for (int c = 0; c < r->nch && rc == 0; c++)
        if (pt_stage_needs(r->ch[c].st)->needs_collective)
            rc = build_collective(w, c, err);
    for (int c = 0; c < r->nch && rc == 0; c++)
        rc = build_exec(w, c, err);
    if (rc < 0)
        return pt_error_prefix(err, "data plane");
    r->wired = 1;
    fprintf(stderr,
            "pipetop-agent %s: data plane: generation %lld wired to %d of %d peers in %.1f ms\n",
            w->id, (long long)r->gen, linked, n - 1, (double)(pt_msg_now_ns() - t0) / NS_PER_MS);
    return 0;
}

/* Builds the run of an assign; the error says what did not fit. */
int pt_wk_build_run(pt_agent_worker *w, const pt_msg *m, pt_error *err)
{
    run_state *r = &w->r;
    const pt_msg_assign *as = &m->u.assign;
    r->gen = m->gen;
    r->run_token = m->u.assign.run_token;
    r->last_saved = -1;
    r->ns_base = pt_clock_ns() - pt_msg_now_ns();
    int rc;
    if ((rc = pt_model_spec_copy(as->model, &r->spec, err)) < 0 ||
        (rc = pt_plan_copy(as->plan, &r->plan, err)) < 0 ||
        (rc = pt_plan_check(r->plan, r->spec, NULL, "assign.plan", err)) < 0 ||
        (rc = pt_sched_build(r->plan, NULL, NULL, &r->prog, err)) < 0)
        return rc;
    if ((rc = pick_chunks(r, as, err)) < 0)
        return rc;
    r->worker = r->ch[0].worker;
    r->stage = as->stage;
    r->replica = as->replica;
    r->rank = as->rank;
    r->be = w->be;
    if (r->nch > 1) {
        if (pthread_mutex_init(&r->ev_mu, NULL) != 0)
            return pt_error_set(err, PT_ENOMEM, "agent: no mutex for the chunks' events");
        r->ev_mu_ok = 1;
        if ((rc = pt_exec_host_new(&r->prog, r->rank, &r->host, err)) < 0)
            return rc;
    }
    for (int c = 0; c < r->nch; c++)
        if ((rc = build_chunk(w, as, c, err)) < 0)
            return rc;
    /* the wire names a folder inside our root, checked again here: the
     * message checker refuses the rest, but a path is trusted only where
     * it is used */
    r->ckpt_dir[0] = '\0';
    if (as->checkpoint_dir[0] &&
        (rc = pt_path_join_inside(w->ckpt_root, as->checkpoint_dir, r->ckpt_dir, sizeof r->ckpt_dir,
                                  err)) < 0)
        return pt_error_prefix(err, "assign.checkpoint_dir");
    r->ckpt_every = as->checkpoint_every;
    if (as->resume_step > 0 && (rc = pt_wk_load_resume(w, as->resume_step, err)) < 0)
        return rc;
    if ((rc = bind_comms(w, as, err)) < 0 || (rc = build_nccl(w, as, err)) < 0)
        return rc;
    return 0; /* pt_wk_wire_run connects at the first iteration */
}
