/* The agent's control thread loop (see agent/agent.h and agent/control.h):
 * the DEALER to the console, heartbeats both ways, the checks on every
 * control message, the hand-over of requests to the worker thread, and the
 * judgement of the console's silence (grace for a console restart). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/control.h"
#include "protocol/fileio.h"
#include "runtime/comm_nccl.h"
#include "runtime/trust.h"
#include "runtime/zmq_watch.h"

#define NS_PER_MS 1000000LL

/* ---- sending --------------------------------------------------------------------- */

void pt_agent_ctl_send(pt_agent_ctl *ag, pt_msg *m)
{
    snprintf(m->agent, sizeof m->agent, "%s", ag->id);
    m->seq = ag->tx_seq;
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    if (pt_msg_encode(m, &text, &len, &err) < 0) {
        fprintf(stderr, "pipetop-agent %s: cannot encode %s: %s\n", ag->id,
                pt_msg_type_name(m->type), err.msg);
        return;
    }
    if (zmq_send(ag->dealer, text, len, ZMQ_DONTWAIT) == (int)len)
        ag->tx_seq++;
    free(text);
}

static void send_error(pt_agent_ctl *ag, int64_t gen, int64_t req, int stage, int replica, int code,
                       const char *reason)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ERROR, NULL);
    m.gen = gen;
    m.req = req;
    m.u.error.stage = stage;
    m.u.error.replica = replica;
    m.u.error.code = code <= 0 && code >= -1000 ? code : PT_EINVAL;
    snprintf(m.u.error.reason, sizeof m.u.error.reason, "%s", reason && reason[0] ? reason : "?");
    pt_agent_ctl_send(ag, &m);
}

/* step: acks of stop only, the step boundary held at / stopped at; -1: none. */
static void send_ack_step(pt_agent_ctl *ag, int64_t gen, int64_t req, pt_msg_type of, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ACK, NULL);
    m.gen = gen;
    m.req = req;
    m.u.ack.of = of;
    m.u.ack.step = of == PT_MSG_STOP && step >= 0 ? step : -1;
    pt_agent_ctl_send(ag, &m);
}

static void send_ack(pt_agent_ctl *ag, int64_t gen, int64_t req, pt_msg_type of)
{
    send_ack_step(ag, gen, req, of, -1);
}

static void send_heartbeat(pt_agent_ctl *ag)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.gen = ag->gen;
    m.u.heartbeat.hb = ag->hb_out++;
    m.u.heartbeat.t_send = pt_msg_now_ns();
    if (ag->has_hb_in) {
        m.u.heartbeat.has_echo = 1;
        m.u.heartbeat.echo_hb = ag->hb_in;
        m.u.heartbeat.echo_t_orig = ag->hb_in_tsend;
        m.u.heartbeat.echo_t_recv = ag->hb_in_trecv;
    }
    int64_t step = -1;
    pt_agent_worker_status(ag->worker, m.u.heartbeat.state, sizeof m.u.heartbeat.state, &step);
    m.u.heartbeat.step = step >= 0 ? step : -1;
    m.u.heartbeat.data_dropped = pt_agent_worker_data_dropped(ag->worker);
    pt_agent_ctl_send(ag, &m);
}

void pt_agent_ctl_register(pt_agent_ctl *ag)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_REGISTER, NULL);
    pt_msg_register *r = &m.u.reg;
    if (gethostname(r->host, sizeof r->host) != 0 || !r->host[0])
        snprintf(r->host, sizeof r->host, "localhost");
    r->host[sizeof r->host - 1] = '\0';
    r->pid = getpid();
    r->device = ag->a.device;
    pt_device_describe(ag->be, r->device_name, sizeof r->device_name);
    if (ag->a.simulate)
        snprintf(r->device_name, sizeof r->device_name, "%s", PT_MSG_CAP_SIMULATED);
    snprintf(r->backend, sizeof r->backend, "%s", ag->be->name);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    r->memory_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    int64_t gpu_free = 0;
    if (pt_backend_is_cuda(ag->be) &&
        pt_backend_cuda_mem_info(ag->be, &gpu_free, &r->memory_bytes) < 0)
        r->memory_bytes = 0;
    pt_cuda_device_bus_id(pt_backend_cuda_device(ag->be), r->gpu_bus_id, sizeof r->gpu_bus_id);
    r->cap_count = 2;
    snprintf(r->caps[0], sizeof r->caps[0], "zmq");
    snprintf(r->caps[1], sizeof r->caps[1], "recompute");
    if (pt_backend_is_cuda(ag->be) && pt_nccl_built())
        snprintf(r->caps[r->cap_count++], sizeof r->caps[0], "nccl");
    if (ag->a.simulate) /* the console labels the agent, the run and its record simulated */
        snprintf(r->caps[r->cap_count++], sizeof r->caps[0], "%s", PT_MSG_CAP_SIMULATED);
    snprintf(r->data_endpoint, sizeof r->data_endpoint, "%s", ag->data_ep);
    pt_agent_ctl_send(ag, &m);
}

/* ---- receiving ------------------------------------------------------------------- */

static void reject(pt_agent_ctl *ag, const pt_msg *m, const char *reason)
{
    ag->rejected++;
    fprintf(stderr, "pipetop-agent %s: rejected: %s\n", ag->id, reason);
    char text[PT_MSG_TEXT_MAX];
    snprintf(text, sizeof text, "rejected control message: %s", reason);
    /* A refused request is answered under its own id and generation. */
    send_error(ag, m ? m->gen : ag->gen, m && pt_msg_type_is_request(m->type) ? m->req : 0, -1, -1,
               PT_EINVAL, text);
}

static void handle(pt_agent_ctl *ag, const char *data, size_t len)
{
    int64_t now = pt_msg_now_ns();
    pt_msg m;
    pt_error err = {0};
    if (pt_msg_decode(data, len, "control", &m, &err) < 0) {
        reject(ag, NULL, err.msg);
        return;
    }
    char why[PT_ERROR_MAX];
    if (strcmp(m.agent, ag->id) != 0) {
        snprintf(why, sizeof why, "control (%s): addressed to \"%s\", not to %s",
                 pt_msg_type_name(m.type), m.agent, ag->id);
        reject(ag, &m, why);
        goto done;
    }
    if (m.seq < ag->rx_next) {
        snprintf(why, sizeof why, "control (%s): seq %lld out of order (expected %lld or later)",
                 pt_msg_type_name(m.type), (long long)m.seq, (long long)ag->rx_next);
        reject(ag, &m, why);
        goto done;
    }
    ag->rx_next = m.seq + 1;
    if (pt_msg_accept(&m, PT_MSG_AT_AGENT, ag->gen, &err) < 0) {
        reject(ag, &m, err.msg);
        goto done;
    }
    if (m.type == PT_MSG_ASSIGN && m.gen <= ag->gen) {
        snprintf(why, sizeof why, "control (assign): plan generation %lld is not newer than %lld",
                 (long long)m.gen, (long long)ag->gen);
        reject(ag, &m, why);
        goto done;
    }
    ag->accepted++;
    ag->last_heard_ns = now;
    ag->heard = 1;
    switch (m.type) {
    case PT_MSG_HEARTBEAT: {
        const pt_msg_heartbeat *h = &m.u.heartbeat;
        ag->has_hb_in = 1;
        ag->hb_in = h->hb;
        ag->hb_in_tsend = h->t_send;
        ag->hb_in_trecv = now;
        if (h->has_echo)
            pt_clock_filter_add(&ag->clk, h->echo_t_orig, h->echo_t_recv, h->t_send, now);
        /* Answered at once, so the console's clock samples hold no waiting time
         * here; the own period starts again. */
        send_heartbeat(ag);
        ag->next_hb_ns = now + (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
        break;
    }
    case PT_MSG_ASSIGN:
        ag->gen = m.gen;
        pt_agent_worker_assign(ag->worker, &m); /* takes the message */
        break;
    case PT_MSG_START:
        if (pt_agent_worker_begin(ag->worker, m.gen, m.req, m.u.start.steps) < 0)
            send_error(ag, m.gen, m.req, -1, -1, PT_ESTATE,
                       "start: no plan of this generation is set up");
        else
            send_ack(ag, m.gen, m.req, PT_MSG_START);
        break;
    case PT_MSG_STOP:
        if (m.u.stop.hold) /* answered at once: the console picks the common step from it */
            send_ack_step(ag, m.gen, m.req, PT_MSG_STOP, pt_agent_worker_hold(ag->worker));
        else
            pt_agent_worker_stop(ag->worker, m.gen, m.req, m.u.stop.at_step);
        break;
    case PT_MSG_CHECKPOINT:
        if (pt_agent_worker_checkpoint(ag->worker, m.gen, m.req, m.u.checkpoint.step) < 0)
            send_error(ag, m.gen, m.req, -1, -1, PT_ERANGE,
                       "checkpoint: no plan is set up, or too many requests are waiting");
        break;
    case PT_MSG_BYE:
        ag->leaving = 1;
        snprintf(ag->why, sizeof ag->why, "the console said bye%s%.400s",
                 m.u.bye.reason[0] ? ": " : "", m.u.bye.reason);
        break;
    case PT_MSG_ERROR:
        fprintf(stderr, "pipetop-agent %s: the console reports: %s\n", ag->id, m.u.error.reason);
        break;
    default:
        break; /* pt_msg_accept refused the agent-only types */
    }
done:
    pt_msg_clear(&m);
}

static void handle_note(pt_agent_ctl *ag, const pt_wnote *n)
{
    switch (n->kind) {
    case PT_WNOTE_SETUP:
        if (n->gen != ag->gen)
            break; /* a newer assign is already on its way to the worker */
        if (n->rc == 0)
            send_ack(ag, n->gen, n->req, PT_MSG_ASSIGN);
        else
            send_error(ag, n->gen, n->req, n->stage, n->replica, n->rc, n->text);
        break;
    case PT_WNOTE_CKPT: {
        if (n->req <= 0)
            break;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_CHECKPOINT_ACK, NULL);
        m.gen = n->gen;
        m.req = n->req;
        m.u.checkpoint_ack.step = n->step;
        snprintf(m.u.checkpoint_ack.dir, sizeof m.u.checkpoint_ack.dir, "%s", n->dir);
        pt_agent_ctl_send(ag, &m);
        break;
    }
    case PT_WNOTE_STOPPED:
        send_ack_step(ag, n->gen, n->req, PT_MSG_STOP, n->step);
        break;
    case PT_WNOTE_IDLE:
        send_heartbeat(ag); /* the console learns at once that the steps are done */
        break;
    case PT_WNOTE_FAILED:
        fprintf(stderr, "pipetop-agent %s: stage %d replica %d: %s\n", ag->id, n->stage, n->replica,
                n->text);
        send_error(ag, n->gen, n->req, n->stage, n->replica, n->rc, n->text);
        break;
    default:
        break;
    }
}

/* The DEALER's events. A handshake the console refused ends that
 * connection for good (libzmq does not retry it), so the agent says why and
 * leaves rather than waiting out the console's silence. With a grace (a
 * console restart, docs/deploy.md): a broken link, then a handshake that
 * succeeds again, means a console holding the key picked this agent up:
 * it registers again. */
static void monitor_events(pt_agent_ctl *ag)
{
    int id;
    int32_t value;
    while (!ag->leaving && pt_zmq_watch_next(ag->monitor, &id, &value) == 1) {
        if (id == ZMQ_EVENT_DISCONNECTED) {
            ag->link_down = 1;
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
                   id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            char why[128];
            pt_zmq_watch_describe(id, value, why, sizeof why);
            ag->leaving = 4;
            snprintf(ag->why, sizeof ag->why,
                     "the console at %s refused this agent's handshake: %s: %s", ag->a.console, why,
                     id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                         ? "its public key is not on the console's allow-list (pipetop run "
                           "--allow)"
                         : "check --server-key (the console's public key) and --key");
            fprintf(stderr, "pipetop-agent %s: %s\n", ag->id, ag->why);
        } else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && ag->link_down && ag->a.grace_ms > 0) {
            ag->link_down = 0;
            ag->rx_next = 0;
            ag->has_hb_in = 0;
            pt_clock_filter_init(&ag->clk);
            ag->reattached++;
            char state[32] = "";
            int64_t done = -1;
            if (ag->worker)
                pt_agent_worker_status(ag->worker, state, sizeof state, &done);
            fprintf(stderr,
                    "pipetop-agent %s: a console holding the key reconnected%s; registering "
                    "again (generation %lld, last step done %lld)\n",
                    ag->id, ag->orphaned ? " within the grace period" : "", (long long)ag->gen,
                    (long long)done);
            pt_agent_ctl_register(ag);
            send_heartbeat(ag);
        } else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            ag->link_down = 0;
        }
    }
}

/* ---- main loop ------------------------------------------------------------------------ */

/* A poll that ended well after it was due means this process was not
 * running (SIGSTOP, a host under swap): the console's silence in that time
 * is no sign of its end, and its heartbeats are still on their way in. */
static void forgive_own_stall(pt_agent_ctl *ag, int64_t *started, int64_t due_ns)
{
    int64_t late = pt_msg_now_ns() - due_ns;
    if (late <= (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS)
        return;
    ag->last_heard_ns += late;
    *started += late;
}

void pt_agent_ctl_loop(pt_agent_ctl *ag)
{
    ag->next_hb_ns = pt_msg_now_ns();
    int64_t started = ag->next_hb_ns;
    const int64_t silence =
        (ag->a.silence_ms > 0 ? (int64_t)ag->a.silence_ms
                              : (int64_t)PT_AGENT_MISSED_HEARTBEATS * PT_AGENT_HEARTBEAT_MS) *
        NS_PER_MS;
    while (!ag->leaving) {
        int64_t now = pt_msg_now_ns();
        if (*ag->signal) {
            ag->leaving = 3;
            snprintf(ag->why, sizeof ag->why, "signal %d", (int)*ag->signal);
            break;
        }
        if (now >= ag->next_hb_ns) {
            if (!ag->link_down) /* nothing piles up for the next console to refuse */
                send_heartbeat(ag);
            ag->next_hb_ns = now + (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
        }
        long wait_ms = (long)((ag->next_hb_ns - now + NS_PER_MS - 1) / NS_PER_MS);
        zmq_pollitem_t items[3] = {{ag->dealer, 0, ZMQ_POLLIN, 0},
                                   {ag->notify, 0, ZMQ_POLLIN, 0},
                                   {pt_zmq_watch_socket(ag->monitor), 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, ag->monitor ? 3 : 2, wait_ms);
        forgive_own_stall(ag, &started, now + (int64_t)wait_ms * NS_PER_MS);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why, "poll: %s", zmq_strerror(errno));
            break;
        }
        while (items[0].revents & ZMQ_POLLIN) {
            zmq_msg_t f;
            zmq_msg_init(&f);
            if (zmq_msg_recv(&f, ag->dealer, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&f);
                break;
            }
            int more = zmq_msg_more(&f);
            if (more) {
                /* One frame per message: drop the rest and count the message once. */
                zmq_msg_t g;
                while (more) {
                    zmq_msg_init(&g);
                    if (zmq_msg_recv(&g, ag->dealer, ZMQ_DONTWAIT) < 0)
                        more = 0;
                    else
                        more = zmq_msg_more(&g);
                    zmq_msg_close(&g);
                }
                reject(ag, NULL, "control: a message of several frames (one JSON frame expected)");
            } else {
                handle(ag, zmq_msg_data(&f), zmq_msg_size(&f));
            }
            zmq_msg_close(&f);
            if (ag->leaving)
                break;
        }
        if (ag->monitor && (items[2].revents & ZMQ_POLLIN))
            monitor_events(ag);
        while (items[1].revents & ZMQ_POLLIN) {
            pt_wnote note;
            int got = zmq_recv(ag->notify, &note, sizeof note, ZMQ_DONTWAIT);
            if (got != (int)sizeof note)
                break;
            handle_note(ag, &note);
        }
        /* judged after reading what was queued, so a busy moment here is not
         * taken for the console's silence */
        now = pt_msg_now_ns();
        int64_t quiet = now - (ag->heard ? ag->last_heard_ns : started);
        const int64_t grace = (int64_t)ag->a.grace_ms * NS_PER_MS;
        if (!ag->leaving && ag->orphaned && quiet <= silence) {
            ag->orphaned = 0; /* a console picked the run up */
        } else if (!ag->leaving && ag->heard && quiet > silence && grace > 0 && ag->gen > 0 &&
                   quiet <= silence + grace) {
            if (!ag->orphaned) {
                ag->orphaned = 1;
                ag->orphaned_ns = now;
                fprintf(stderr,
                        "pipetop-agent %s: the console at %s was silent for %.1f s; training on "
                        "for up to %.1f s for a console holding its key to pick the run up\n",
                        ag->id, ag->a.console, (double)quiet / 1e9, (double)grace / 1e9);
            }
        } else if (!ag->leaving && ag->heard && quiet > silence && grace > 0 && ag->gen > 0) {
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why,
                     "the console at %s was silent for %.1f s (a grace of %.1f s included)",
                     ag->a.console, (double)quiet / 1e9, (double)grace / 1e9);
        } else if (!ag->leaving &&
                   quiet > (ag->heard ? silence : (int64_t)PT_AGENT_FIRST_CONTACT_MS * NS_PER_MS)) {
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why, "the console at %s was silent for %.1f s",
                     ag->a.console, (double)quiet / 1e9);
        }
    }
}
