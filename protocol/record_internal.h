/* What protocol/record_write.c shares with the reader in protocol/record.c;
 * not part of the record's public face. */
#ifndef PT_PROTOCOL_RECORD_INTERNAL_H
#define PT_PROTOCOL_RECORD_INTERNAL_H

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
/* A new generation starts at resume_step: the previous one's pending folds
 * and held frames are written first. */
int pt_record_folder_plan(pt_record_writer *w, pt_record_folder *f, int64_t gen,
                          int64_t resume_step);
/* Writes every pending fold and held frame (the record ends). */
int pt_record_folder_end(pt_record_writer *w, pt_record_folder *f);

/* The writer's own output, for the folder: a console line (checked by the
 * reader's rules) and a frame line (tail: marked "tail":1). */
int pt_record_internal_put_line(pt_record_writer *w, const char *text);
int pt_record_internal_put_frame(pt_record_writer *w, pt_record_line_kind kind, const char *channel,
                                 int64_t offset_ns, const char *data, size_t len, int tail);

#endif
