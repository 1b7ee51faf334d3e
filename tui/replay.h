/* Run records (protocol/record.h, the one reader) applied to a pt_store,
 * and a player that replays a record's entries at a chosen speed with pause
 * and single-step, on the record's own clock. */
#ifndef PT_TUI_REPLAY_H
#define PT_TUI_REPLAY_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/record.h"
#include "tui/store.h"

/* Applies entry i to store: plans, agents, events (shifted to the console
 * clock by the recorded offset), metrics, notes. The reader validated every
 * entry; a frame that cannot be decoded again (no memory) is noted. */
void pt_record_apply(pt_record *rec, int64_t i, pt_store *store);

/* ---- the player */
typedef struct pt_replay pt_replay;

/* Plays rec into store (both borrowed) at `speed` x real time (> 0). */
int pt_replay_new(pt_record *rec, pt_store *store, double speed, pt_replay **out);
void pt_replay_free(pt_replay **r_p); /* NULL-safe */

/* Applies every entry due at wall-clock now_ns (any monotonic clock; the
 * first call starts the playback). Returns the number applied. */
int64_t pt_replay_advance(pt_replay *r, int64_t now_ns);
/* Pauses (1) or resumes (0) at now_ns. */
void pt_replay_pause(pt_replay *r, int paused, int64_t now_ns);
int pt_replay_paused(const pt_replay *r);
/* Changes the speed (clamped to [0.01, 1000]) without jumping. */
void pt_replay_set_speed(pt_replay *r, double speed, int64_t now_ns);
double pt_replay_speed(const pt_replay *r);
/* Pauses and applies entries up to and including the metrics that end the
 * next step (or to the end). Returns the number applied. */
int64_t pt_replay_step(pt_replay *r, int64_t now_ns);
/* Applies everything left. */
int64_t pt_replay_to_end(pt_replay *r);
int pt_replay_done(const pt_replay *r);
/* Entries applied so far. */
int64_t pt_replay_position(const pt_replay *r);

#endif
