/* What protocol/record_write.c shares with the reader in protocol/record.c;
 * not part of the record's public face. */
#ifndef PT_PROTOCOL_RECORD_INTERNAL_H
#define PT_PROTOCOL_RECORD_INTERNAL_H

#include <stddef.h>

/* Checks one line text[0..len) by the reader's rules, as the first line of a
 * record (after_session 0) or a later one of the version this build writes.
 * 0 or PT_EINVAL. */
int pt_record_internal_check(const char *text, size_t len, int after_session);
/* The pt_record_line_kind called name, or -1. */
int pt_record_internal_kind(const char *name);
/* 1 for "control" and "telemetry". */
int pt_record_internal_channel_ok(const char *channel);

#endif
