/* Fuzz harness for the CURVE key-file parser (libFuzzer, or replay_main.c
 * over the corpus). Properties, each an abort() when false: a refused input
 * leaves a zeroed key and an error that starts with the source name; an
 * accepted one holds valid Z85 keys and survives format -> parse unchanged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/keyfile.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_keyfile: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_keyfile k, again;
    pt_error err = {0};
    if (pt_keyfile_parse((const char *)data, size, "fuzz", &k, &err) < 0) {
        if (k.public_z85[0] || k.has_secret)
            fail("refused input left a key");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("error does not name the source");
        return 0;
    }
    if (!pt_key_z85_valid(k.public_z85) || (k.has_secret && !pt_key_z85_valid(k.secret_z85)))
        fail("accepted key is not Z85");
    char text[512];
    int n = pt_keyfile_format(&k, 1, text, sizeof text);
    if (n < 0 || pt_keyfile_parse(text, (size_t)n, "fuzz2", &again, &err) < 0)
        fail("written key file does not parse");
    if (strcmp(k.public_z85, again.public_z85) || k.has_secret != again.has_secret ||
        strcmp(k.secret_z85, again.secret_z85))
        fail("format -> parse changed the key");
    return 0;
}
