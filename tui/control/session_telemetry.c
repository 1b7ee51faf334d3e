/* The session's telemetry channel: every frame checked (decoded, its key,
 * its sequence, its sender registered) before it is recorded and passed on. */
#include "tui/control/session_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "protocol/telemetry_scan.h"

/* ---- receiving telemetry -------------------------------------------------------- */

/* A telemetry frame under a name whose key is not the sender's (CURVE): a
 * forgery. Checked before the frame's sequence number is tracked, so a
 * forged frame (say seq 2^53) cannot make the real agent's next frames look
 * old. 1 when refused. */
static int telemetry_forged(pt_session *s, const pt_msg *m, const char *key)
{
    return session_key_refused(s, "telemetry", pt_session_find_agent(s, m->agent), m, key);
}

static void handle_telemetry(pt_session *s, const char *body, size_t len, const char *key)
{
    pt_msg m;
    pt_error err = {0};
    int rc = pt_telemetry_decode(body, len, "telemetry", &m, &err);
    if (rc < 0) /* counted as malformed (for the agent, when its name can be read) */
        rc = pt_telemetry_rx_feed(s->rx, body, len, "telemetry", &m, &err);
    else if (telemetry_forged(s, &m, key)) {
        pt_msg_clear(&m);
        return;
    } else if ((rc = pt_telemetry_rx_observe(s->rx, &m, &err)) < 0)
        pt_msg_clear(&m);
    if (rc < 0) {
        session_say_rejected(s, -1, "telemetry", NULL, err.msg);
        return;
    }
    int i = pt_session_find_agent(s, m.agent);
    char why[PT_ERROR_MAX];
    if (m.type != PT_MSG_EVENTS && m.type != PT_MSG_METRICS) {
        snprintf(why, sizeof why, "telemetry (%s) from %s: not a telemetry message",
                 pt_msg_type_name(m.type), m.agent);
        session_reject(s, i, "telemetry", m.agent, why);
    } else if (i < 0) {
        snprintf(why, sizeof why, "telemetry (%s) from %s: not registered",
                 pt_msg_type_name(m.type), m.agent);
        session_reject(s, -1, "telemetry", m.agent, why);
    } else {
        agent_entry *e = &s->agents[i];
        int64_t off = e->pub.clock_offset_ns;
        if (s->rec) /* best-effort, as session_record_frame */
            pt_record_write_telemetry(s->rec, off, body, len, &m);
        /* late (an older generation's, read after the next plan was
         * applied): recorded and passed on with its gen, but not the
         * agent's newest metrics or step, which the controller acts on (its
         * step may lie past where the new generation resumed) */
        int late = m.gen < s->gen;
        if (m.type == PT_MSG_METRICS) {
            if (!late) {
                e->pub.metrics = m.u.metrics;
                e->pub.has_metrics = 1;
                if (m.u.metrics.step > e->pub.step)
                    e->pub.step = m.u.metrics.step;
            }
            session_note(s, PT_NOTE_METRICS, i, &m, 0, NULL);
        } else {
            for (int k = 0; k < m.u.events.count; k++) {
                m.u.events.events[k].start_ns -= off;
                m.u.events.events[k].end_ns -= off;
            }
            session_note(s, PT_NOTE_EVENTS, i, &m, 0, NULL);
        }
    }
    pt_msg_clear(&m);
}

int session_drain_telemetry(pt_session *s, pt_error *err)
{
    /* a backlog of big events messages is seconds of decoding: past the
     * budget the rest waits (queued, not lost) while heartbeats are read and
     * sent, else a console behind on telemetry takes its agents for dead */
    int64_t until = pt_msg_now_ns() + (int64_t)s->hb_ms * NS_PER_MS / TELEMETRY_BUDGET_DIV;
    for (int k = 0; k < RECV_BATCH_MAX; k++) {
        if (k % TELEMETRY_CLOCK_EVERY == TELEMETRY_CLOCK_EVERY - 1 && pt_msg_now_ns() > until)
            return 0;
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
