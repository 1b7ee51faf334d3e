/* The control socket's connections, each by its descriptor, from its
 * accept to its close: one that has sent nothing PT_SESSION_SILENT_MS after
 * its accept is counted and said once. Among them is a second connection
 * under a routing id already connected: libzmq 4.3's ROUTER leaves it open
 * and never reads it, and says so nowhere (ZMQ_ROUTER_NOTIFY is a draft API
 * Debian's libzmq is built without); also a client that never finished its
 * handshake or never spoke. */
#include "tui/control/session_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

#define CONN_SLOTS_MIN 64

/* The slot of descriptor fd, grown to hold it; NULL on no memory. */
static conn_slot *slot_of(pt_session *s, int fd)
{
    if (fd < 0)
        return NULL;
    if (fd >= s->conn_cap) {
        int nc = s->conn_cap ? s->conn_cap : CONN_SLOTS_MIN;
        while (nc <= fd)
            nc *= 2;
        conn_slot *g = realloc(s->conns, (size_t)nc * sizeof *g);
        if (!g)
            return NULL;
        for (int k = s->conn_cap; k < nc; k++)
            g[k] = (conn_slot){0};
        s->conns = g;
        s->conn_cap = nc;
    }
    return &s->conns[fd];
}

/* Takes the socket events queued: an accept opens a descriptor's slot, a
 * close ends it. */
static void take_events(pt_session *s, int64_t now)
{
    int ev;
    int32_t value;
    while (s->ctl_watch && pt_zmq_watch_next(s->ctl_watch, &ev, &value) == 1) {
        conn_slot *c = slot_of(s, value);
        if (!c)
            continue;
        if (ev == ZMQ_EVENT_ACCEPTED)
            *c = (conn_slot){.open = 1, .since_ns = now};
        else if (ev == ZMQ_EVENT_DISCONNECTED)
            c->open = 0;
    }
}

void session_conn_spoke(pt_session *s, zmq_msg_t *frame)
{
    int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    if (fd < 0 || !s->ctl_watch)
        return;
    conn_slot *c = fd < s->conn_cap ? &s->conns[fd] : NULL;
    if (!c || !c->open) /* its accept may be queued still */
        take_events(s, pt_msg_now_ns());
    c = slot_of(s, fd);
    if (c) {
        c->open = 1;
        c->spoke = 1;
    }
}

void session_conns_check(pt_session *s, int64_t now)
{
    take_events(s, now);
    int64_t silent = 0;
    const int64_t bound = (int64_t)PT_SESSION_SILENT_MS * 1000000;
    for (int fd = 0; fd < s->conn_cap; fd++) {
        conn_slot *c = &s->conns[fd];
        if (c->open && !c->spoke && !c->told && now - c->since_ns >= bound) {
            c->told = 1;
            silent++;
        }
    }
    if (!silent)
        return;
    s->silent_conns += silent;
    char why[PT_MSG_TEXT_MAX];
    snprintf(why, sizeof why,
             "connection: %lld control connection%s sent nothing %.0f s after %s accept (%lld so "
             "far): a second connection under a routing id already connected (the socket "
             "ignores it), or a client that did not finish its handshake or never spoke",
             (long long)silent, silent == 1 ? "" : "s", PT_SESSION_SILENT_MS / 1000.0,
             silent == 1 ? "its" : "their", (long long)s->silent_conns);
    session_record_rejected(s, "control", NULL, why);
    session_note(s, PT_NOTE_REJECTED, -1, NULL, 0, why);
}

int64_t pt_session_silent_connections(const pt_session *s)
{
    return s ? s->silent_conns : 0;
}
