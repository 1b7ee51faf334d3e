/* Fuzz harness for the profile parser (libFuzzer, or replay_main.c over the
 * corpus). Properties, each an abort() when false: a refused input leaves no
 * record and an error that starts with the source name; an accepted one is
 * valid and survives to_json -> parse -> to_json unchanged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/profile.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_profile: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    pt_profile *x = NULL;
    pt_error err = {0};
    int rc = pt_profile_parse(text, "fuzz", &x, &err);
    free(text);
    if (rc < 0) {
        if (x)
            fail("a refused input left a record");
        if (err.code != rc || strncmp(err.msg, "fuzz: ", 6) != 0)
            fail("a refused input has no error naming its source");
        return 0;
    }
    if (!x)
        fail("an accepted input gave no record");

    char *json = pt_profile_to_json(x);
    pt_profile *back = NULL;
    if (!json || pt_profile_parse(json, "fuzz-again", &back, &err) != 0)
        fail("the writer's output does not parse");
    char *again = pt_profile_to_json(back);
    if (!again || strcmp(json, again) != 0)
        fail("to_json(parse(to_json(x))) differs from to_json(x)");
    free(again);
    free(json);
    pt_profile_free(&back);
    pt_profile_free(&x);
    return 0;
}
