/* Fuzz harness for the PipeDream graph.txt reader (libFuzzer, or
 * replay_main.c over the corpus). Properties, each an abort() when false: a
 * refused input leaves no profile and an error that starts with the source
 * name; an accepted one is a valid profile (its JSON reads back) whose
 * export reads back with the same layer count, figures and input bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_pipedream: %s: %s\n", what, detail);
    abort();
}

static void check_export(const pt_profile *p)
{
    char *text = pt_pipedream_to_text(p);
    if (!text)
        fail("export", "no text");
    pt_profile *q = NULL;
    pt_error err = {0};
    if (pt_pipedream_parse(text, strlen(text), "export", NULL, &q, NULL, &err) < 0)
        fail("export does not read back", err.msg);
    if (q->layer_count != p->layer_count || q->input_bytes != p->input_bytes)
        fail("export", "layer count or input bytes changed");
    for (int i = 0; i < p->layer_count; i++) {
        const pt_profile_layer *a = &p->layers[i], *b = &q->layers[i];
        if (a->fwd_ms != b->fwd_ms || a->bwd_ms != b->bwd_ms || a->act_bytes != b->act_bytes ||
            a->param_bytes != b->param_bytes)
            fail("export", "a layer's figures changed");
    }
    pt_profile_free(&q);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_profile *p = NULL;
    pt_error err = {0};
    int rc = pt_pipedream_parse((const char *)data, size, "fuzz", NULL, &p, NULL, &err);
    if (rc < 0) {
        if (p)
            fail("refused input left a profile", err.msg);
        if (strncmp(err.msg, "fuzz", 4))
            fail("error does not name the source", err.msg);
        return 0;
    }
    char *json = pt_profile_to_json(p);
    pt_profile *back = NULL;
    if (!json)
        fail("to_json", "NULL");
    if (pt_profile_parse(json, "json", &back, &err) < 0)
        fail("imported profile is not valid", err.msg);
    pt_profile_free(&back);
    free(json);
    check_export(p);
    pt_profile_free(&p);
    return 0;
}
