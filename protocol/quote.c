/* Foreign text, quoted and cut. See protocol/quote.h. */
#include "protocol/quote.h"

#include <stdio.h>
#include <string.h>

const char *pt_quote(const char *text, char *out, size_t cap)
{
    if (!out || cap == 0)
        return out;
    const char *t = text ? text : "";
    size_t o = 0, shown = 0;
    int cut = 0;
    if (o + 1 < cap)
        out[o++] = '"';
    for (; *t; t++) {
        unsigned char c = (unsigned char)*t;
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < ' ' || c > '~')
            snprintf(esc, sizeof esc, "\\x%02x", c);
        else
            snprintf(esc, sizeof esc, "%c", c);
        size_t n = strlen(esc);
        /* room for the closing quote, "..." and the NUL */
        if (shown >= PT_QUOTE_SHOWN_MAX || o + n + 5 > cap) {
            cut = 1;
            break;
        }
        memcpy(out + o, esc, n);
        o += n;
        shown++;
    }
    if (o + 1 < cap)
        out[o++] = '"';
    if (cut && o + 3 < cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}
