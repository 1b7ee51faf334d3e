/* Text from outside (an agent's error reason, a name it claimed) shown in
 * the console's own output: quoted, cut, and with anything that could
 * move a terminal's cursor or forge a line escaped, so that a peer can
 * neither pass its words off as pipetop's nor flood a log with one line. */
#ifndef PT_PROTOCOL_QUOTE_H
#define PT_PROTOCOL_QUOTE_H

#include <stddef.h>

/* Bytes of foreign text shown at most; the rest is cut with "...". */
#define PT_QUOTE_SHOWN_MAX 160

/* Writes "text" into out (cap bytes, always NUL-ended): in double quotes,
 * at most PT_QUOTE_SHOWN_MAX bytes of it, each byte outside printable ASCII
 * and each quote or backslash escaped (\xNN, \", \\), "..." after the
 * quote when cut. NULL text reads as "". Returns out. */
const char *pt_quote(const char *text, char *out, size_t cap);

#endif
