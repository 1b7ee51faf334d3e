/* protocol/quote.h: foreign text is quoted, escaped and cut. */
#include <string.h>

#include "protocol/quote.h"
#include "tests/test.h"

static void test_quote(void)
{
    char out[512];
    CHECK(!strcmp(pt_quote("plain text", out, sizeof out), "\"plain text\""));
    CHECK(!strcmp(pt_quote(NULL, out, sizeof out), "\"\""));
    /* a forged console line: its newline, quotes and escape bytes escaped */
    pt_quote("ok\"}\n{\"error\":\"x\x1b[2J", out, sizeof out);
    CHECK_STR_CONTAINS(out, "\\\"}\\x0a{\\\"error\\\"");
    CHECK_STR_CONTAINS(out, "\\x1b[2J");
    CHECK(!strchr(out, '\n') && !strchr(out, '\x1b'));
    /* long text: PT_QUOTE_SHOWN_MAX characters, then "..." */
    char big[1000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    pt_quote(big, out, sizeof out);
    CHECK(strlen(out) == PT_QUOTE_SHOWN_MAX + 2 + 3);
    CHECK(!strcmp(out + strlen(out) - 4, "\"..."));
    /* a small buffer is never overrun and stays terminated */
    char tiny[8];
    pt_quote(big, tiny, sizeof tiny);
    CHECK(strlen(tiny) < sizeof tiny && tiny[0] == '"');
}

PT_TEST_MAIN({"quote", test_quote})
