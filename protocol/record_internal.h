/* What protocol/record_write.c shares with the reader in protocol/record.c;
 * not part of the record's public face. */
#ifndef PT_PROTOCOL_RECORD_INTERNAL_H
#define PT_PROTOCOL_RECORD_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/record.h"

/* Checks one line text[0..len) by the reader's rules, as the first line of a
 * record (after_session 0) or a later one of the version this build writes.
 * 0 or PT_EINVAL. */
int pt_record_internal_check(const char *text, size_t len, int after_session);
/* The pt_record_line_kind called name, or -1. */
int pt_record_internal_kind(const char *name);
/* 1 for "control" and "telemetry". */
int pt_record_internal_channel_ok(const char *channel);

/* The writer's folding of op events (protocol/record_fold.c). */
typedef struct pt_record_folder pt_record_folder;
int pt_record_folder_new(const pt_record_fold_opts *opts, pt_record_folder **out);
void pt_record_folder_free(pt_record_folder **f_p); /* NULL-safe */
/* A telemetry frame received with offset_ns (decoded: its message, already
 * decoded by the caller; NULL: decoded here): 1 when it was folded (and held
 * for the tail window; nothing more to write), 0 when it is to be written as
 * it came, a negative PT_E* code on no memory or a failed write. */
int pt_record_folder_frame(pt_record_writer *w, pt_record_folder *f, int64_t offset_ns,
                           const char *data, size_t len, const pt_msg *decoded);
/* A new generation of plan starts at resume_step: the previous one's
 * pending folds and held frames are written first. */
int pt_record_folder_plan(pt_record_writer *w, pt_record_folder *f, int64_t gen,
                          int64_t resume_step, const pt_plan *plan);

/* Folding per stage (protocol/record_sfold.c): the "sfold" lines of the
 * stages of plan generation gen with PT_RECORD_STAGE_FOLD_MIN replicas or
 * more. *out is NULL (and 0 returned) when the plan has no such stage. */
typedef struct pt_record_stagefold pt_record_stagefold;
int pt_record_stagefold_new(const pt_plan *plan, int64_t gen, pt_record_stagefold **out);
void pt_record_stagefold_free(pt_record_stagefold **s_p); /* NULL-safe */
/* 1 when (stage, replica) of generation gen is folded per stage (s may be NULL). */
int pt_record_stagefold_covers(const pt_record_stagefold *s, int64_t gen, int stage, int replica);
/* Notes an agent's sequence number on a frame of a covered stage: a gap is
 * counted in the stage's next line ("dropped"). 0 or PT_ENOMEM. */
int pt_record_stagefold_seq(pt_record_stagefold *s, int stage, const char *agent, int64_t seq);
/* Folds the events of m of covered stages (offset_ns: the sender's clock
 * minus the console's); a step's line is written when its stage's frames are
 * SFOLD_LAG steps past it. 0 or a negative PT_E* code (a failed write). */
int pt_record_stagefold_events(pt_record_writer *w, pt_record_stagefold *s, const pt_msg *m,
                               int64_t offset_ns);
/* Folds metrics message m (one step; of a covered stage). */
int pt_record_stagefold_metrics(pt_record_writer *w, pt_record_stagefold *s, const pt_msg *m);
/* Writes every open step's line, oldest first per stage. NULL-safe. */
int pt_record_stagefold_end(pt_record_writer *w, pt_record_stagefold *s);
/* Writes every pending fold and held frame (the record ends). */
int pt_record_folder_end(pt_record_writer *w, pt_record_folder *f);

/* Adds each op kind of ops (by kind) that counts events to the "ops" object
 * of a fold or sfold line: name -> [count, total_ns, min_ns, max_ns]. 1, or
 * 0 on no memory. */
int pt_record_internal_add_fold_ops(cJSON *ops, const pt_record_fold_op ops_in[PT_OP_KIND_COUNT]);

/* The writer's own output, for the folder: a console line (checked by the
 * reader's rules) and a frame line (tail: marked "tail":1). */
int pt_record_internal_put_line(pt_record_writer *w, const char *text);
int pt_record_internal_put_frame(pt_record_writer *w, pt_record_line_kind kind, const char *channel,
                                 int64_t offset_ns, const char *data, size_t len, int tail);

/* Reads text[0..len) as a record, as pt_record_parse does (lenient: as
 * pt_record_load does), with the fast scanners below (fast 1) or with the
 * general reader alone (fast 0): both give the same record or the same
 * error (record_scan_test.c compares them). */
int pt_record_internal_parse(const char *text, size_t len, const char *source, int fast,
                             int lenient, pt_record **out, pt_error *err);

/* The reader's fast way (protocol/record_scan.c) through the two lines that
 * make nearly all of a long record, in exactly the compact shape this
 * build's writer gives them. Each returns 1 when the text is that shape and
 * passes every check of the general reader, its output filled as the
 * general reader fills it; 0 when not (output unspecified): the general
 * reader then accepts the text or names what is wrong with it. */

/* A metrics frame (pt_msg_encode's text; no "steps"): *m as pt_msg_decode
 * gives it, but for the bytes of m->u past u.metrics, left as they were. */
int pt_record_scan_metrics(const char *text, size_t len, pt_msg *m);

#define PT_RECORD_SCAN_SEQS 256 /* a fold line of more frames goes the general way */

/* What a fold line says (its kind and checks are the reader's check_fold). */
typedef struct pt_record_scanned_fold {
    int64_t t, gen, step;
    char agent[PT_MSG_ID_MAX];
    pt_record_fold fold; /* events and frames summed */
    int nseq;
    int64_t seqs[PT_RECORD_SCAN_SEQS];
} pt_record_scanned_fold;

/* A whole "fold" line, line[0..len) (no newline), as the folder writes it. */
int pt_record_scan_fold(const char *line, size_t len, pt_record_scanned_fold *s);

#endif
