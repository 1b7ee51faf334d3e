/* Decoding telemetry frames fast: a strict scanner for the "events" message,
 * the one a console receives by the hundred thousand per second.
 *
 * pt_msg_decode builds a cJSON tree per message and checks it field by field;
 * at 1,024 agents that is most of the console thread (docs/benchmarks.md,
 * "Console ingest"). The scanner reads the text once, straight into the
 * events array, and takes only messages it can prove pt_msg_decode takes
 * with the same values: plain integers (-1, 0, 1..2^53-1 without fraction,
 * exponent or leading zeros), strings of printable ASCII without escapes, no
 * comment ("_") or repeated keys, no bytes but space, tab, CR and LF between
 * tokens. It declines everything else, valid or not, and pt_telemetry_decode
 * then hands the frame to pt_msg_decode: so the wire format, what is
 * accepted and the error words are exactly pt_msg_decode's
 * (tests/protocol/telemetry_scan_test.c checks this against it). */
#ifndef PT_PROTOCOL_TELEMETRY_SCAN_H
#define PT_PROTOCOL_TELEMETRY_SCAN_H

#include <stddef.h>

#include "protocol/error.h"
#include "protocol/message.h"

/* The scanner alone. 1: text is an "events" message that pt_msg_decode
 * accepts, and *out holds what it would (caller pt_msg_clear's it).
 * 0: declined (not an events message, an unusual spelling, an error, no
 * memory); *out is zeroed. data may be NULL (declined). */
int pt_telemetry_scan_events(const char *data, size_t len, pt_msg *out);

/* pt_msg_decode with the scanner in front: the same contract, results and
 * errors (source names the stream in them), faster for events messages. */
int pt_telemetry_decode(const char *data, size_t len, const char *source, pt_msg *out,
                        pt_error *err);

#endif
