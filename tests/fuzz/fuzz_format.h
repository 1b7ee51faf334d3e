/* The one fuzz property every JSON format shares, written once:
 * PT_FUZZ_FORMAT(name, type, parse, to_json, free, check) defines
 * LLVMFuzzerTestOneInput for a format whose parser has the protocol/
 * contract. Each abort() marks a broken property: a refused input leaves no
 * record and an error that starts with the source name; an accepted one
 * passes check (a function returning NULL, or what is wrong) and survives
 * to_json -> parse -> to_json unchanged. */
#ifndef PT_TESTS_FUZZ_FORMAT_H
#define PT_TESTS_FUZZ_FORMAT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/error.h"

static inline void pt_fuzz_fail(const char *name, const char *what)
{
    fprintf(stderr, "fuzz_%s: %s\n", name, what);
    abort();
}

#define PT_FUZZ_FORMAT(NAME, TYPE, PARSE, TO_JSON, FREE, CHECK)                                    \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                                   \
    {                                                                                              \
        char *text = malloc(size + 1);                                                             \
        if (!text)                                                                                 \
            return 0;                                                                              \
        memcpy(text, data, size);                                                                  \
        text[size] = '\0';                                                                         \
        TYPE *x = NULL;                                                                            \
        pt_error err = {0};                                                                        \
        int rc = PARSE(text, "fuzz", &x, &err);                                                    \
        free(text);                                                                                \
        if (rc < 0) {                                                                              \
            if (x)                                                                                 \
                pt_fuzz_fail(NAME, "a refused input left a record");                               \
            if (err.code != rc || strncmp(err.msg, "fuzz: ", 6) != 0)                              \
                pt_fuzz_fail(NAME, "a refused input has no error naming its source");              \
            return 0;                                                                              \
        }                                                                                          \
        if (!x)                                                                                    \
            pt_fuzz_fail(NAME, "an accepted input gave no record");                                \
        const char *wrong = CHECK(x);                                                              \
        if (wrong)                                                                                 \
            pt_fuzz_fail(NAME, wrong);                                                             \
        char *json = TO_JSON(x);                                                                   \
        TYPE *back = NULL;                                                                         \
        if (!json || PARSE(json, "fuzz-again", &back, &err) != 0)                                  \
            pt_fuzz_fail(NAME, "the writer's output does not parse");                              \
        char *again = TO_JSON(back);                                                               \
        if (!again || strcmp(json, again) != 0)                                                    \
            pt_fuzz_fail(NAME, "to_json(parse(to_json(x))) differs from to_json(x)");              \
        free(again);                                                                               \
        free(json);                                                                                \
        FREE(&back);                                                                               \
        FREE(&x);                                                                                  \
        return 0;                                                                                  \
    }

#endif
