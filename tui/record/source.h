/* Where the console's data comes from: a live session of agents, the replay
 * of a run record, or nothing but the simulator. Every source fills the same
 * pt_store, so the views never care which one is behind it.
 *
 * A source is a small vtable over an implementation; the console calls poll
 * on every turn of its loop (it must not block longer than timeout_ms), offers
 * it the keys the views did not use (replay: pause, step, speed), asks it to
 * apply an edited plan (live only: checkpoint, stop, re-assign, resume), and
 * closes it on quit, which stops every agent the source started. */
#ifndef PT_TUI_SOURCE_H
#define PT_TUI_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/plan.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define PT_SOURCE_DESC_MAX 160

typedef struct pt_source pt_source;

typedef struct pt_source_vt {
    const char *kind; /* "simulation", "replay", "live" */
    /* Brings new data into store; returns 1 when something changed, 0 when
     * not, a negative PT_E* code when the source failed for good. */
    int (*poll)(pt_source *src, pt_store *store, int64_t now_ns, int timeout_ms);
    /* Checkpoints, stops and restarts the run under plan (validated by the
     * caller's editor); refuses with PT_EUNSUPP / PT_ESTATE and a reason
     * that leaves the run untouched. NULL: not supported. */
    int (*apply)(pt_source *src, const pt_plan *plan, pt_error *err);
    /* A key the views did not take: 1 handled (msg may say what happened),
     * 0 not a key of this source. NULL: no keys. */
    int (*key)(pt_source *src, int ch, int64_t now_ns, char *msg, size_t cap);
    /* One line for the header ("replay 2x, paused, 40%"). */
    void (*describe)(pt_source *src, char *buf, size_t cap);
    /* Help lines for its keys, NULL-terminated ({"space", "pause"}...). */
    const char *const (*keys)[2];
    /* Stops what it started and frees src. */
    void (*close)(pt_source *src);
} pt_source_vt;

struct pt_source {
    const pt_source_vt *vt;
    void *impl;
};

/* A source that never brings data: the console shows the simulator's
 * prediction of the plan being edited. *out owns it. */
int pt_source_sim_new(pt_source **out);

/* A source replaying rec (taken over: freed on close) at speed, starting
 * paused when paused is set; to_end applies the whole record at once. */
int pt_source_replay_new(pt_record *rec, double speed, int paused, int to_end, pt_source **out);

/* Closes src (NULL-safe) and sets *src_p = NULL. */
void pt_source_close(pt_source **src_p);

#endif
