/* Socket monitor events, read without blocking. See runtime/zmq_watch.h. */
#include "runtime/zmq_watch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A monitor event's first frame: u16 event, u32 value (host order). */
#define EVENT_FRAME_BYTES 6
#define WATCH_EP_MAX      64

struct pt_zmq_watch {
    void *sock; /* the watched socket (not owned) */
    void *pair; /* receives the events */
};

int pt_zmq_watch_start(void *ctx, void *sock, int mask, pt_zmq_watch **out, pt_error *err)
{
    static atomic_uint serial;
    *out = NULL;
    pt_zmq_watch *w = calloc(1, sizeof *w);
    if (!w)
        return pt_error_set(err, PT_ENOMEM, "socket watch: out of memory");
    /* one inproc name per watch, also when a socket is watched again */
    char ep[WATCH_EP_MAX];
    snprintf(ep, sizeof ep, "inproc://pt-watch-%p-%u", sock, atomic_fetch_add(&serial, 1));
    w->sock = sock;
    if (zmq_socket_monitor(sock, ep, mask) != 0)
        goto fail;
    w->pair = zmq_socket(ctx, ZMQ_PAIR);
    /* No bound on the events waiting here: libzmq's I/O thread sends them
     * blocking, and a full queue (1,000 by default) stopped the socket's
     * I/O thread, and with it every connection, until they were read: a
     * console taking 2,048 agents' connections hung so in its teardown. */
    int unbounded = 0;
    if (w->pair)
        zmq_setsockopt(w->pair, ZMQ_RCVHWM, &unbounded, sizeof unbounded);
    if (!w->pair || zmq_connect(w->pair, ep) != 0)
        goto fail_monitor;
    *out = w;
    return 0;
fail_monitor : {
    int e = errno;
    if (w->pair)
        zmq_close(w->pair);
    zmq_socket_monitor(sock, NULL, 0);
    errno = e;
}
fail:
    free(w);
    return pt_error_set(err, errno == ETERM ? PT_ESTATE : PT_EIO, "socket watch: %s",
                        zmq_strerror(errno));
}

void *pt_zmq_watch_socket(const pt_zmq_watch *self)
{
    return self ? self->pair : NULL;
}

int pt_zmq_watch_next(pt_zmq_watch *self, int *event, int32_t *value)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, self->pair, ZMQ_DONTWAIT) < 0) {
        int e = errno;
        zmq_msg_close(&m);
        return e == ETERM ? PT_ESTATE : 0;
    }
    int ok = zmq_msg_size(&m) == EVENT_FRAME_BYTES && zmq_msg_more(&m);
    if (ok) {
        const unsigned char *d = zmq_msg_data(&m);
        uint16_t ev;
        uint32_t v;
        memcpy(&ev, d, sizeof ev);
        memcpy(&v, d + sizeof ev, sizeof v);
        *event = ev;
        *value = (int32_t)v;
    }
    /* the second frame names the endpoint: not needed */
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, self->pair, ZMQ_DONTWAIT) < 0)
            break;
    }
    zmq_msg_close(&m);
    return ok ? 1 : 0;
}

void pt_zmq_watch_stop(pt_zmq_watch **self_p)
{
    if (!self_p || !*self_p)
        return;
    pt_zmq_watch *w = *self_p;
    zmq_socket_monitor(w->sock, NULL, 0);
    zmq_close(w->pair);
    free(w);
    *self_p = NULL;
}

const char *pt_zmq_watch_describe(int event, int32_t value, char *buf, size_t size)
{
    switch (event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        snprintf(buf, size, "handshake succeeded");
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        snprintf(buf, size, "refused by the peer's allow-list (ZAP status %d)", (int)value);
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        snprintf(buf, size, "handshake protocol error %d (a key or security mismatch)", (int)value);
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        snprintf(buf, size, "handshake failed (errno %d: %s)", (int)value, zmq_strerror(value));
        break;
    default:
        snprintf(buf, size, "socket event 0x%x (value %d)", event, (int)value);
        break;
    }
    return buf;
}
