/* Run records (docs/formats.md "Run record", written by tui/session.c) read
 * back: every line {"t": ns, "kind": ..., ...} becomes an entry that can be
 * applied to a pt_store, and a player replays the entries at a chosen speed
 * with pause and single-step, on the record's own clock.
 *
 * Kinds understood: "session", "plan" (plan, model, workers), "recv"/"sent"
 * (a control or telemetry message with the sender's clock offset), "agent"
 * (state change), "dead", "checkpoint", "checkpoint_failed", "rejected";
 * other kinds are kept and ignored, so newer records still replay. A line
 * that is not a JSON object with a numeric "t" and a string "kind" is an
 * error naming the file and the line, except a truncated last line (a run
 * that was killed while writing), which is dropped. */
#ifndef PT_TUI_REPLAY_H
#define PT_TUI_REPLAY_H

#include <stdint.h>

#include "protocol/error.h"
#include "tui/store.h"

typedef struct pt_record pt_record;

/* Loads a record. On success *out owns it; on failure *out is NULL. */
int pt_record_load(const char *path, pt_record **out, pt_error *err);
/* Parses record text (len bytes); source names it in errors. */
int pt_record_parse(const char *text, size_t len, const char *source, pt_record **out,
                    pt_error *err);
void pt_record_free(pt_record **rec_p); /* NULL-safe */

int64_t pt_record_count(const pt_record *rec);
int64_t pt_record_t_ns(const pt_record *rec, int64_t i); /* the entry's "t" */
const char *pt_record_kind(const pt_record *rec, int64_t i);

/* Applies entry i to store: plans, agents, events (shifted to the console
 * clock by the recorded offset), metrics, notes. A message that does not
 * decode is counted as malformed and noted, never fatal. */
void pt_record_apply(pt_record *rec, int64_t i, pt_store *store);

/* What the record holds, for tests, export and `pipetop status`. */
typedef struct pt_record_summary {
    int64_t entries, event_msgs, events, metrics, plans;
    int64_t first_start_ns, last_end_ns; /* of op events, console clock; 0 when none */
    int64_t first_step, last_step;       /* of metrics, -1 when none */
    int64_t malformed;
} pt_record_summary;
void pt_record_summarize(const pt_record *rec, pt_record_summary *out);

/* The model spec text (JSON) of the newest "plan" entry before entry i
 * (i < 0: in the whole record), NULL when none. Owned by the record, valid
 * until its next call. */
const char *pt_record_model_json(pt_record *rec, int64_t before);

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
