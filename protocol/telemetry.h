/* Receiving side of the telemetry (and control) stream: per-agent sequence
 * tracking that counts dropped, duplicated, reordered, stale and malformed
 * messages; and the NTP-style clock-offset estimate from heartbeats.
 * Sockets are the caller's: feed it the frames a SUB (or ROUTER) received. */
#ifndef PT_PROTOCOL_TELEMETRY_H
#define PT_PROTOCOL_TELEMETRY_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/message.h"

/* Sequence numbers tracked behind the newest one: a message older than this
 * can no longer be told from a duplicate and counts as stale. */
#define PT_RX_WINDOW     1024
#define PT_RX_MAX_AGENTS 4096
/* After an agent's first message, a sequence number further than this past
 * the newest one is refused (and counted stale) without moving the window:
 * an agent never loses 2^24 of its own messages in a row, and taking a forged
 * 2^53 would make every genuine one after it "too old". */
#define PT_RX_JUMP_MAX (1LL << 24)

/* Every message fed counts in exactly one of received, duplicates, stale and
 * malformed; dropped and reordered describe the sequence, late is a part of
 * received. */
typedef struct pt_rx_counts {
    uint64_t received;   /* accepted: a new sequence number, of the current generation, or
                            telemetry of an older one (late) */
    uint64_t dropped;    /* sequence numbers skipped and not (yet) arrived */
    uint64_t duplicates; /* a sequence number seen before: rejected */
    uint64_t reordered;  /* arrived after a later one (the gap it filled is no longer dropped) */
    uint64_t stale;      /* older than the window or a jump past PT_RX_JUMP_MAX; telemetry of a
                            generation newer than the current (once there is one); another type
                            of an older generation: rejected */
    uint64_t malformed;  /* could not be decoded (or over PT_RX_MAX_AGENTS agents): rejected */
    uint64_t late;       /* of received: events or metrics of an older plan generation (sent
                            before the next plan was applied, read after): measurement to
                            record, nothing to act on */
} pt_rx_counts;

typedef struct pt_telemetry_rx pt_telemetry_rx;

enum {
    /* Count from the first sequence number seen instead of from 0, so a
     * subscriber that joins late does not count what it missed as dropped. */
    PT_RX_FROM_FIRST = 1
};

/* Creates a receiver (flags: PT_RX_*). *out owns it; PT_ENOMEM on failure. */
int pt_telemetry_rx_create(unsigned flags, pt_telemetry_rx **out);
void pt_telemetry_rx_destroy(pt_telemetry_rx **self_p); /* NULL-safe; sets *self_p = NULL */

/* The current plan generation (0: none yet). Of messages bound to a
 * generation: events and metrics of an older one are accepted and counted
 * late (the caller records them but must not act on them), of a newer one
 * refused as stale while gen > 0; any other type of an older one is
 * refused as stale. */
void pt_telemetry_rx_set_generation(pt_telemetry_rx *self, int64_t gen);

/* Decodes one frame and tracks its sequence number. Returns 0 when the
 * message is new and of the current generation, or late telemetry (see
 * pt_telemetry_rx_set_generation; out->gen tells which): *out holds it
 * (caller pt_msg_clear's it). Otherwise *out is zeroed and the message counted: PT_EPARSE /
 * PT_EINVAL / PT_ERANGE malformed (also counted for the agent when its "agent" could be read),
 * PT_ESTATE duplicate or stale, PT_ERANGE too many agents; err says which. source names the stream
 * in errors (NULL: "telemetry"). */
int pt_telemetry_rx_feed(pt_telemetry_rx *self, const char *data, size_t len, const char *source,
                         pt_msg *out, pt_error *err);

/* The sequence tracking of pt_telemetry_rx_feed for a message decoded
 * elsewhere: 0 accept (late telemetry too), PT_ESTATE duplicate/stale,
 * PT_ERANGE too many agents. */
int pt_telemetry_rx_observe(pt_telemetry_rx *self, const pt_msg *m, pt_error *err);

/* Forgets an agent's sequence state (not its counts), e.g. when it registers
 * again after a restart and numbers from 0 anew. PT_ENOTFOUND if unknown. */
int pt_telemetry_rx_reset_agent(pt_telemetry_rx *self, const char *agent);

/* Counts for one agent (PT_ENOTFOUND if never seen), or summed over all
 * agents plus malformed messages without a readable agent. */
int pt_telemetry_rx_agent_counts(const pt_telemetry_rx *self, const char *agent, pt_rx_counts *out);
void pt_telemetry_rx_totals(const pt_telemetry_rx *self, pt_rx_counts *out);

/* Agents seen, in order of first appearance; the id is owned by the receiver. */
int pt_telemetry_rx_agent_count(const pt_telemetry_rx *self);
const char *pt_telemetry_rx_agent_id(const pt_telemetry_rx *self, int i);

/* ---- clock offset ------------------------------------------------------------
 * A asks at t1 (A's clock), B receives at t2 and answers at t3 (B's clock), A
 * receives at t4 (A's clock). With symmetric paths:
 *   offset = ((t2 - t1) + (t3 - t4)) / 2   (B's clock minus A's clock)
 *   delay  = (t4 - t1) - (t3 - t2)         (round trip without B's hold time)
 * and the error of offset is at most delay / 2. A time tB on B's clock is
 * tB - offset on A's. In heartbeats: t1 = echo.t_orig, t2 = echo.t_recv,
 * t3 = t_send of the answer, t4 = when the answer arrived. */
int pt_clock_offset(int64_t t1, int64_t t2, int64_t t3, int64_t t4, int64_t *offset,
                    int64_t *delay);

/* NTP's clock filter: keeps the last PT_CLOCK_SAMPLES samples and trusts the
 * one with the smallest delay. Zero-initialise, or pt_clock_filter_init. */
#define PT_CLOCK_SAMPLES 8
typedef struct pt_clock_filter {
    int n, next;
    int64_t offset[PT_CLOCK_SAMPLES], delay[PT_CLOCK_SAMPLES];
} pt_clock_filter;

void pt_clock_filter_init(pt_clock_filter *f);
/* Adds a sample from the four times; PT_EINVAL (sample ignored) when they are
 * inconsistent (t4 < t1, t3 < t2 or a negative delay). */
int pt_clock_filter_add(pt_clock_filter *f, int64_t t1, int64_t t2, int64_t t3, int64_t t4);
/* The best estimate: 0, or PT_ENOTFOUND before the first sample. */
int pt_clock_filter_get(const pt_clock_filter *f, int64_t *offset, int64_t *delay);

#endif
