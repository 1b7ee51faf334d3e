/* The agent's set-up and tear-down around its control loop (agent/control.h):
 * keys, the data endpoint, the sockets and the worker, shared by one agent
 * (agent/main.c) and a process of simulated agents (agent/sim_main.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/control.h"
#include "protocol/fileio.h"
#include "runtime/trust.h"
#include "runtime/zmq_watch.h"

#define MSG_FRAME_SLACK 4096 /* bytes beyond PT_MSG_MAX_BYTES a control frame may have */
#define NOTIFY_EP_FMT   "inproc://pt-agent-notify-%p"

/* The checkpoint root, absolute (what the worker joins an assign's folder
 * to): --checkpoint-root, made if missing, or the working directory. */
static int ckpt_root(const char *opt, char *out, size_t cap)
{
    pt_error err = {0};
    char *abs = NULL;
    if (opt && pt_mkdir_p(opt, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --checkpoint-root: %s\n", err.msg);
        return 0;
    }
    abs = realpath(opt ? opt : ".", NULL);
    if (!abs || strlen(abs) >= cap) {
        fprintf(stderr, "pipetop-agent: --checkpoint-root %s: %s\n", opt ? opt : ".",
                abs ? "path too long" : strerror(errno));
        free(abs);
        return 0;
    }
    snprintf(out, cap, "%s", abs);
    free(abs);
    return 1;
}

/* Binds an ephemeral data port once to learn it, and releases it: the
 * worker binds the same endpoint for every plan generation, so the endpoint
 * given in register stays valid for the agent's life. */
int pt_agent_ctl_reserve_data(pt_agent_ctl *ag)
{
    pt_error err = {0};
    if (pt_trust_check_bind(ag->a.data_bind, ag->curve, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --data-bind: %s\n", err.msg);
        return -1;
    }
    void *ctx = zmq_ctx_new();
    void *s = ctx ? zmq_socket(ctx, ZMQ_PULL) : NULL;
    int rc = -1;
    if (s && zmq_bind(s, ag->a.data_bind) == 0) {
        size_t len = sizeof ag->data_ep;
        if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ag->data_ep, &len) == 0)
            rc = 0;
    }
    if (rc < 0)
        fprintf(stderr, "pipetop-agent: cannot bind the data socket to %s: %s\n", ag->a.data_bind,
                zmq_strerror(errno));
    if (s)
        zmq_close(s);
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

int pt_agent_ctl_open(pt_agent_ctl *ag, void *ctx, const pt_agent_sim *sim, int sim_index)
{
    ag->ctx = ctx;
    if (!ag->ctx)
        return -1;
    ag->dealer = zmq_socket(ag->ctx, ZMQ_DEALER);
    ag->notify = zmq_socket(ag->ctx, ZMQ_PAIR);
    if (!ag->dealer || !ag->notify)
        return -1;
    int linger = 1000, hb_ivl = PT_AGENT_HEARTBEAT_MS;
    zmq_setsockopt(ag->dealer, ZMQ_ROUTING_ID, ag->id, strlen(ag->id));
    zmq_setsockopt(ag->dealer, ZMQ_LINGER, &linger, sizeof linger);
    /* Simulated agents send no ZMTP heartbeats of their own (the console's
     * are answered all the same, and the control heartbeats judge
     * silence): libzmq cancels a connection's heartbeat timer by a linear
     * walk of its I/O thread's timers on every message, which with
     * thousands of connections in one process took most of its CPU. */
    if (!sim)
        zmq_setsockopt(ag->dealer, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    int64_t max_msg = (int64_t)PT_MSG_MAX_BYTES + MSG_FRAME_SLACK;
    zmq_setsockopt(ag->dealer, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    pt_error terr = {0};
    if (ag->curve && pt_trust_client(ag->dealer, &ag->key, ag->server_key, &terr) < 0) {
        fprintf(stderr, "pipetop-agent: --key: %s\n", terr.msg);
        return -1;
    }
    /* With CURVE, the DEALER's events: a refused key is said at once (libzmq
     * never retries a refused handshake), and a console restart within the
     * grace is picked up (agent/control.c) */
    if (ag->curve &&
        pt_zmq_watch_start(ag->ctx, ag->dealer, ZMQ_EVENT_DISCONNECTED | PT_WATCH_HANDSHAKE_EVENTS,
                           &ag->monitor, &terr) < 0) {
        fprintf(stderr, "pipetop-agent: control monitor: %s\n", terr.msg);
        return -1;
    }
    if (zmq_connect(ag->dealer, ag->a.console) != 0) {
        fprintf(stderr, "pipetop-agent: --console %s: %s\n", ag->a.console, zmq_strerror(errno));
        return -1;
    }
    char ep[64];
    snprintf(ep, sizeof ep, NOTIFY_EP_FMT, (void *)ag);
    if (zmq_bind(ag->notify, ep) != 0)
        return -1;
    char root[PT_MSG_PATH_MAX];
    if (!ckpt_root(ag->a.checkpoint_root, root, sizeof root))
        return -1;
    pt_agent_worker_config wc = {ag->id,
                                 ag->ctx,
                                 ep,
                                 ag->data_ep,
                                 ag->a.telemetry,
                                 ag->a.comm_timeout_ms,
                                 ag->be,
                                 ag->curve ? &ag->key : NULL,
                                 ag->curve ? ag->server_key : NULL,
                                 root,
                                 ag->a.observe,
                                 sim,
                                 sim_index};
    pt_error err = {0};
    if (pt_agent_worker_start(&wc, &ag->worker, &err) < 0) {
        fprintf(stderr, "pipetop-agent: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* --key (a pair, mode 0600) and --server-key (a file or Z85). */
int pt_agent_ctl_load_keys(pt_agent_ctl *ag)
{
    pt_error err = {0};
    if (pt_keyfile_load(ag->a.key_path, &ag->key, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --key: %s\n", err.msg);
        return -1;
    }
    if (!ag->key.has_secret) {
        fprintf(stderr,
                "pipetop-agent: --key: %s holds no secret key (give the NAME.key of "
                "pipetop keys --out DIR/NAME)\n",
                ag->a.key_path);
        return -1;
    }
    if (pt_key_arg_public(ag->a.server_key_arg, ag->server_key, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --server-key: %s\n", err.msg);
        return -1;
    }
    ag->curve = 1;
    return 0;
}

void pt_agent_ctl_close(pt_agent_ctl *ag)
{
    {
        /* Also after the console's bye: it then knows this agent left rather
         * than went silent. */
        pt_msg m;
        pt_msg_init(&m, PT_MSG_BYE, NULL);
        m.gen = ag->gen;
        snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "%s", ag->why);
        pt_agent_ctl_send(ag, &m);
    }
    ag->joined = pt_agent_worker_destroy(&ag->worker, PT_AGENT_JOIN_MS) == 0;
    fprintf(stderr,
            "pipetop-agent %s: leaving: %s; control messages: %llu accepted, %llu rejected\n",
            ag->id, ag->why, (unsigned long long)ag->accepted, (unsigned long long)ag->rejected);
    pt_zmq_watch_stop(&ag->monitor);
    zmq_close(ag->dealer);
    zmq_close(ag->notify);
    ag->dealer = ag->notify = NULL;
}
