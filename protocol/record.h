/* Run records (docs/formats.md, "Run record"): what the console of a
 * distributed run received and decided, one JSON object per line
 * (runs/<id>/run.ndjson), written here and read back here.
 *
 * A record of what arrived is the bytes that arrived: every control or
 * telemetry frame the console accepted, and every request it sent, is stored
 * verbatim behind a small header ({"t","kind","channel","offset_ns","len"}),
 * never re-encoded. The console's own entries (the session, plans it
 * assigned, agent states, deaths, refusals, checkpoint commits, the end of
 * the run) are written by typed functions. One reader validates every line:
 * the header and console entries field by field, each frame with
 * pt_msg_decode, each plan with pt_plan_parse and pt_model_spec_parse; an
 * error reads "FILE:LINE: FIELD: REASON".
 *
 * Versions: the first line ("session") carries "v". Version 4 (written by
 * this build) is version 3 with the steps of a stage of many replicas
 * (PT_RECORD_STAGE_FOLD_MIN) outside the full-detail windows folded per
 * stage ("sfold": op events and metrics of all its replicas) and the windows
 * bounded in bytes; version 3 is version 2 with op events outside a
 * full-detail window folded into "fold" lines (pt_record_fold_opts); version 2 stores every
 * frame verbatim with its length; version 1 (earlier builds) stored a
 * re-encoding without "len". All three are read; any other version is
 * refused. With PT_RECORD_COMPRESS=1 in the environment the writer writes a
 * gzip stream, flushed with every pt_record_flush. */
#ifndef PT_PROTOCOL_RECORD_H
#define PT_PROTOCOL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/plan.h"

#define PT_RECORD_VERSION     4 /* what the writer writes */
#define PT_RECORD_VERSION_MIN 1 /* the oldest the reader reads */
#define PT_RECORD_FILE        "run.ndjson"

/* Every kind of line, with its name in the file. */
#define PT_RECORD_KINDS(X)                                                                         \
    X(SESSION, "session")                                                                          \
    X(PLAN, "plan")                                                                                \
    X(RECV, "recv")                                                                                \
    X(SENT, "sent")                                                                                \
    X(AGENT, "agent")                                                                              \
    X(DEAD, "dead")                                                                                \
    X(REJECTED, "rejected")                                                                        \
    X(CHECKPOINT, "checkpoint")                                                                    \
    X(CHECKPOINT_FAILED, "checkpoint_failed")                                                      \
    X(SUMMARY, "summary")                                                                          \
    X(FAILED, "failed")                                                                            \
    X(FOLD, "fold")                                                                                \
    X(SFOLD, "sfold")

typedef enum pt_record_line_kind {
#define PT_RECORD_KIND_ENUM(id, name) PT_RECORD_##id,
    PT_RECORD_KINDS(PT_RECORD_KIND_ENUM)
#undef PT_RECORD_KIND_ENUM
        PT_RECORD_KIND_COUNT
} pt_record_line_kind;

/* "recv", "plan", ...; "?" for a value out of range. */
const char *pt_record_kind_name(pt_record_line_kind kind);

/* ---- writing ---------------------------------------------------------------- */

typedef struct pt_record_writer pt_record_writer;

/* What the first line says about the console. */
typedef struct pt_record_session {
    const char *control, *telemetry; /* bound endpoints */
    int heartbeat_ms, missed_heartbeats;
} pt_record_session;

/* Creates path (and its folder) and writes the session line. On success *out
 * owns the writer; on failure *out is NULL and err names the path. */
int pt_record_writer_open(const char *path, const pt_record_session *session,
                          pt_record_writer **out, pt_error *err);
/* Folding of op events (version 3; docs/formats.md, "Folded op events"):
 * the events frames of a generation's first head_steps steps (from its
 * resume step), of every step that is a multiple of `every` (0: none) and
 * of its newest tail_steps steps are kept verbatim; every other step's op
 * events become one "fold" line per stage replica (per op kind: count,
 * total, min, max duration; the step's start, end and compute time). The
 * newest steps' frames are held in memory and written, marked "tail", when
 * the generation ends (a new plan) or the record is closed; their folds are
 * written as the steps pass, so a crash loses the detail of the tail, not
 * its summary. The head window also ends once its frames hold head_bytes
 * (0: no bound; the step then being written is finished whole), and the tail
 * window holds at most tail_bytes of frames (0: no bound; its oldest steps
 * go first). A stage of PT_RECORD_STAGE_FOLD_MIN replicas or more is folded
 * per stage rather than per replica: one "sfold" line per step for all its
 * replicas' op events and metrics (docs/formats.md, "Folded stages"). */
typedef struct pt_record_fold_opts {
    int64_t head_steps, tail_steps, every;
    int64_t head_bytes, tail_bytes;
} pt_record_fold_opts;
#define PT_RECORD_FOLD_HEAD       32
#define PT_RECORD_FOLD_TAIL       32
#define PT_RECORD_FOLD_EVERY      500
#define PT_RECORD_FOLD_HEAD_BYTES (16LL << 20) /* 16 MiB: 4 steps of 1,024 agents */
#define PT_RECORD_FOLD_TAIL_BYTES (64LL << 20) /* 64 MiB: 14 steps of 1,024 agents */
/* Replicas that make a stage folded per stage (a format constant: the reader
 * knows from the plan which agents' sequence numbers the sfold lines count). */
#define PT_RECORD_STAGE_FOLD_MIN 8

/* Folding on (opts; NULL: the defaults above) or off (off set). A new writer
 * folds with the defaults unless the environment has PT_RECORD_FOLD=0 (the
 * whole stream verbatim, as version 2 wrote it). Pending folds and held
 * frames are written first. Set it before a generation's plan line: that
 * line says whether its stages fold per stage (stage_fold_min, written only
 * while folding is on), so a generation whose plan line was written with
 * folding off gets no sfold lines. 0, PT_ENOMEM or PT_EIO. */
int pt_record_writer_set_fold(pt_record_writer *w, const pt_record_fold_opts *opts, int off);

/* Writes pending folds and held frames, flushes and closes. NULL-safe; sets
 * *w_p = NULL. */
void pt_record_writer_close(pt_record_writer **w_p);
/* Pushes what was written to the file (a crash then loses no whole line). */
int pt_record_flush(pt_record_writer *w);
/* 1 when a write or flush of this record has failed (a full disk, an I/O
 * error): err then names the file and the first error ("run record PATH:
 * write failed: No space left on device"); the record is cut from there and
 * every later write fails too. 0 otherwise. NULL-safe (0). */
int pt_record_writer_failed(const pt_record_writer *w, pt_error *err);

/* A frame as it was received (kind PT_RECORD_RECV) or sent (PT_RECORD_SENT)
 * on channel "control" or "telemetry": data[0..len) is written unchanged.
 * offset_ns is the sender's clock minus the console's. PT_EINVAL for another
 * kind or channel, PT_EIO when the file cannot be written. */
int pt_record_write_frame(pt_record_writer *w, pt_record_line_kind kind, const char *channel,
                          int64_t offset_ns, const char *data, size_t len);
/* pt_record_write_frame of a frame received on telemetry that the caller
 * has decoded already (decoded: the message data[0..len) decodes to, as
 * pt_msg_decode gave it): folding reads its events from it rather than
 * decoding the frame a second time (the console's hot path). */
int pt_record_write_telemetry(pt_record_writer *w, int64_t offset_ns, const char *data, size_t len,
                              const pt_msg *decoded);

/* One worker of a plan. */
typedef struct pt_record_worker {
    int worker;                /* rank, stage by stage and replica by replica */
    char agent[PT_MSG_ID_MAX]; /* the agent's id */
    int stage, replica;
    int64_t pid;
} pt_record_worker;

/* A plan assigned (a new generation). */
typedef struct pt_record_plan {
    int64_t gen;
    const pt_plan *plan;
    const pt_model_spec *model;
    const char *data;
    int64_t seed;
    const char *checkpoint_dir; /* NULL or "": none */
    int64_t checkpoint_every, resume_step;
    int worker_count;
    const pt_record_worker *workers;
} pt_record_plan;

/* The console's own entries. Each line is checked by the reader's rules
 * before it is written (PT_EINVAL, nothing written, when it would not read
 * back); PT_EIO when the file cannot be written. agent may be NULL in a
 * rejected entry (the sender is unknown). */
int pt_record_write_plan(pt_record_writer *w, const pt_record_plan *plan);
int pt_record_write_agent(pt_record_writer *w, const char *agent, const char *state, int64_t step);
int pt_record_write_dead(pt_record_writer *w, const char *agent, const char *reason);
int pt_record_write_rejected(pt_record_writer *w, const char *channel, const char *agent,
                             const char *reason);
int pt_record_write_checkpoint(pt_record_writer *w, int64_t step, const char *dir,
                               double commit_ms);
int pt_record_write_checkpoint_failed(pt_record_writer *w, int64_t step, const char *dir,
                                      const char *reason);
/* An entry of `kind` whose members are those of fields_json (a JSON object
 * text, NULL for none): "summary" (any members) or "failed" ("reason"). */
int pt_record_write_json(pt_record_writer *w, const char *kind, const char *fields_json);

/* ---- reading ---------------------------------------------------------------- */

typedef struct pt_record pt_record;

/* One line of a record, as the reader validated it. Strings are owned by the
 * record; a member a kind does not have is NULL / 0 / -1. */
typedef struct pt_record_entry {
    int64_t t;    /* nanoseconds on the console's clock */
    int64_t line; /* 1-based line number in the source */
    pt_record_line_kind kind;
    /* recv, sent */
    const char *channel; /* "control" or "telemetry" */
    int64_t offset_ns;
    const char *frame; /* the frame's bytes (not NUL-terminated) */
    size_t frame_len;
    pt_msg_type msg_type;
    uint64_t dropped; /* recv on telemetry: the sender's sequence numbers missing so far */
    /* agent, dead, rejected (agent NULL when the sender was unknown); recv,
     * sent: the frame's sender or addressee */
    const char *agent;
    const char *state;  /* agent */
    const char *reason; /* dead, rejected, checkpoint_failed, failed */
    const char *dir;    /* checkpoint, checkpoint_failed */
    int64_t step;       /* agent, checkpoint, checkpoint_failed; a metrics frame's step; an
                           events frame's lowest step; else -1 */
    int64_t step_last;  /* a metrics frame's step, an events frame's highest; else -1 */
    double commit_ms;   /* checkpoint */
    /* plan: the generation it starts; recv, sent: the frame's generation */
    int64_t gen;
    const pt_plan *plan;
    const char *model_json; /* the model spec, JSON text */
    const char *data, *checkpoint_dir;
    int64_t seed, checkpoint_every, resume_step;
    int worker_count;
    const pt_record_worker *workers;
    /* session */
    int version;
    int64_t unix_s;
    const char *control, *telemetry;
    int heartbeat_ms, missed_heartbeats;
    /* summary: the members other than t and kind, as a JSON object text */
    const char *json;
    /* recv (version 3): 1 for a frame of the tail window written after its
     * fold (its events are counted by the fold; see pt_record_fold_opts) */
    int tail;
    /* fold: the summary of one stage replica's op events of one step (gen,
     * agent, step and step_last are set too) */
    const struct pt_record_fold *fold;
    /* sfold (version 4): one stage's op events and metrics of one step over
     * all its replicas (gen, step and step_last set; agent: the straggler's,
     * NULL when the line folds no op events) */
    const struct pt_record_sfold *sfold;
    /* plan (version 4): stages of at least this many replicas are folded per
     * stage outside the full-detail windows; 0: none */
    int stage_fold_min;
} pt_record_entry;

/* One op kind's events in a fold; durations in nanoseconds. */
typedef struct pt_record_fold_op {
    int64_t count, total_ns, min_ns, max_ns;
} pt_record_fold_op;

/* A "fold" line: times on the console's clock (the sender's offset applied). */
typedef struct pt_record_fold {
    int stage, replica;
    int64_t start_ns, end_ns; /* the first event's start, the last one's end */
    int64_t busy_ns;          /* time in compute ops; end - start - busy is the bubble */
    int64_t events, frames;   /* events folded, frames they came in */
    pt_record_fold_op ops[PT_OP_KIND_COUNT];
} pt_record_fold;

/* An "sfold" line: one stage's step over all its replicas, times on the
 * console's clock. A replica's compute is its time in compute ops in the
 * step; the band is the min, (lower) median and max of those, and the
 * straggler the replica of the max (the timeline's band and straggler,
 * tui/record/bands.h). */
typedef struct pt_record_sfold {
    int stage;
    int replicas; /* replicas whose op events are folded; 0: metrics only */
    int64_t event_frames, metric_frames;
    int64_t events;           /* op events folded */
    int64_t dropped;          /* sequence numbers the writer saw missing (below) */
    int64_t start_ns, end_ns; /* the first event's start, the last one's end */
    int64_t busy_min_ns, busy_median_ns, busy_max_ns;
    int straggler; /* the replica of busy_max_ns; -1 when replicas is 0 */
    double iter_min_ms, iter_median_ms, iter_max_ms; /* of the metrics folded */
    double loss;                                     /* mean of the losses reported; NaN: none */
    double samples_per_s;                            /* mean */
    int64_t mem_peak;                                /* the largest total_peak reported, bytes */
    pt_record_fold_op ops[PT_OP_KIND_COUNT];
} pt_record_sfold;

/* Parses record text (len bytes); source names it in errors ("SOURCE:LINE:
 * FIELD: REASON"). The first entry must be the session line. A last line
 * without its newline that is not whole JSON (a run killed while writing) is
 * dropped; any other bad line is an error. On success *out owns a new record;
 * on failure *out is NULL. */
int pt_record_parse(const char *text, size_t len, const char *source, pt_record **out,
                    pt_error *err);
/* Reads and parses a file; errors start with its path. A file that starts
 * with the gzip magic bytes (PT_RECORD_COMPRESS=1 wrote it) is inflated
 * first, up to where its stream stops (a run still writing, or killed). Unlike
 * pt_record_parse, a file read is lenient, as the console is with frames: a
 * bad line after the session line is passed over and counted
 * (pt_record_skipped), so that one damaged line does not make a whole run
 * unreadable; the session line, and no memory, still fail. */
int pt_record_load(const char *path, pt_record **out, pt_error *err);
/* The same, calling progress(bytes parsed, bytes in all, arg) every few MiB
 * and once at the end, for large records (a 100 MB record takes seconds). */
typedef void (*pt_record_progress)(int64_t done, int64_t total, void *arg);
int pt_record_load_progress(const char *path, pt_record_progress progress, void *arg,
                            pt_record **out, pt_error *err);
void pt_record_free(pt_record **rec_p); /* NULL-safe; sets *rec_p = NULL */

/* Bad lines the read passed over; first (not NULL) gets the first one's
 * error ("FILE:LINE: FIELD: REASON") when there was one. */
int64_t pt_record_skipped(const pt_record *rec, pt_error *first);

int pt_record_version(const pt_record *rec);
int64_t pt_record_count(const pt_record *rec);
/* Entry i, or NULL when i is out of range. */
const pt_record_entry *pt_record_at(const pt_record *rec, int64_t i);
int64_t pt_record_t_ns(const pt_record *rec, int64_t i);     /* 0 out of range */
const char *pt_record_kind(const pt_record *rec, int64_t i); /* "" out of range */

/* Decodes the frame of a recv/sent entry into *out (caller pt_msg_clear's
 * it). The reader validated it, so this fails only on no memory or for an
 * entry without a frame (PT_EINVAL). */
int pt_record_msg(const pt_record *rec, int64_t i, pt_msg *out, pt_error *err);

/* The model spec text of the newest "plan" entry before entry i (i < 0: in
 * the whole record), NULL when none. Owned by the record. */
const char *pt_record_model_json(const pt_record *rec, int64_t before);

/* What the record holds, for export and `pipetop status`. */
typedef struct pt_record_summary {
    int64_t entries, event_msgs, events, metrics, plans;
    int64_t first_start_ns, last_end_ns; /* of received op events, console clock; 0 when none */
    int64_t first_step, last_step;       /* of received metrics, -1 when none */
    int64_t rejected;                    /* messages the console refused during the run */
} pt_record_summary;
void pt_record_summarize(const pt_record *rec, pt_record_summary *out);

#endif
