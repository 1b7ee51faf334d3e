/* A watch on one ZeroMQ socket's connection events (zmq_socket_monitor):
 * whether its handshakes succeed or are refused, read without blocking.
 *
 * The data plane uses it to confirm that a PUSH socket reached the peer it
 * was meant for before anything is sent on it: a CURVE handshake that the
 * peer's ZAP handler refuses ends that connection for good (libzmq 4.3 does
 * not reconnect after a refused handshake), so a send that is not preceded
 * by a confirmed handshake could wait out the whole data-plane timeout.
 * Events are those of zmq.h (ZMQ_EVENT_*); the value is the event's value
 * (for a refused handshake, the ZAP status code the peer sent, e.g. 400).
 *
 * A watch belongs to the thread that uses its socket. */
#ifndef PT_RUNTIME_ZMQ_WATCH_H
#define PT_RUNTIME_ZMQ_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "protocol/error.h"

/* The events of a handshake's outcome. */
#define PT_WATCH_HANDSHAKE_EVENTS                                                                  \
    (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |                        \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

typedef struct pt_zmq_watch pt_zmq_watch;

/* Starts watching sock (of context ctx) for the events in mask. Call it
 * before the socket connects, or its first events are lost. On success
 * *out owns the watch; on failure *out is NULL and err says why. */
int pt_zmq_watch_start(void *ctx, void *sock, int mask, pt_zmq_watch **out, pt_error *err);

/* The socket to poll for ZMQ_POLLIN while waiting for an event. */
void *pt_zmq_watch_socket(const pt_zmq_watch *self);

/* Takes the next event without blocking: 1 and *event / *value set, 0 none
 * queued, PT_ESTATE the context was shut down. */
int pt_zmq_watch_next(pt_zmq_watch *self, int *event, int32_t *value);

/* Stops watching (the socket itself stays open) and frees the watch.
 * NULL-safe; sets *self_p = NULL. */
void pt_zmq_watch_stop(pt_zmq_watch **self_p);

/* Words for a handshake event: "refused by the peer's allow-list (ZAP 400)",
 * "protocol error", ... written into buf; returns buf. */
const char *pt_zmq_watch_describe(int event, int32_t value, char *buf, size_t size);

#endif
