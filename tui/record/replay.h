/* Run records (protocol/record.h, the one reader) applied to a pt_store,
 * and a player that replays a record's entries at a chosen speed with pause
 * and single-step, on the record's own clock. */
#ifndef PT_TUI_REPLAY_H
#define PT_TUI_REPLAY_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/record.h"
#include "tui/record/store.h"

/* Applies entry i to store: plans, agents, events (shifted to the console
 * clock by the recorded offset), metrics, notes. The reader validated every
 * entry; a frame that cannot be decoded again (no memory) is noted. */
void pt_record_apply(pt_record *rec, int64_t i, pt_store *store);

/* Loads a record (pt_record_load) with a progress bar on stderr when it is
 * at least PT_REPLAY_PROGRESS_BYTES large, so a big record never leaves the
 * terminal silent while it is read. */
#define PT_REPLAY_PROGRESS_BYTES (16 << 20)
int pt_replay_load(const char *path, pt_record **out, pt_error *err);

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
/* Applies everything left (as pt_replay_seek to the end). */
int64_t pt_replay_to_end(pt_replay *r);

/* Op events of this many steps before a seek's target are decoded (the
 * timeline view shows at most 64 iterations); older ones are skipped. */
#define PT_REPLAY_EVENT_STEPS 64
/* Seeks to entry position target (paused there): forward applies the
 * entries between, backward resets the store and applies from the start;
 * either way op events older than PT_REPLAY_EVENT_STEPS steps before the
 * target are skipped, so a seek costs a scan of the entries, not a decode
 * of the whole record. Returns the number of entries applied. */
int64_t pt_replay_seek(pt_replay *r, int64_t target, int64_t now_ns);
/* Seeks to the end of step `step`'s metrics (its first run in the record);
 * -1 when the record does not reach it. */
int64_t pt_replay_seek_step(pt_replay *r, int64_t step, int64_t now_ns);
/* Seeks back to the end of the step before the current one. */
int64_t pt_replay_step_back(pt_replay *r, int64_t now_ns);
/* Seeks to the start of the next (delta > 0) or previous generation (just
 * after its plan entry); -1 when there is none. */
int64_t pt_replay_seek_generation(pt_replay *r, int delta, int64_t now_ns);
/* Seeks back to the start of the first generation (just after its plan). */
int64_t pt_replay_rewind(pt_replay *r, int64_t now_ns);
/* Plan generations in the record; *current (may be NULL) the number of them
 * applied so far. */
int64_t pt_replay_generation_count(const pt_replay *r, int64_t *current);
int pt_replay_done(const pt_replay *r);
/* Entries applied so far. */
int64_t pt_replay_position(const pt_replay *r);

#endif
