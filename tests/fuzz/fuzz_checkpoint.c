/* Fuzz harness for the checkpoint formats of protocol/ckpt_index.h: the
 * index and the latest pointer (libFuzzer, or replay_main.c over the corpus).
 * Properties, each an abort() when false: a refused input leaves no index
 * (no step) and an error that starts with the source name; an accepted index
 * has layers sorted by distinct index, plain file names and counts equal to
 * the product of their shapes, and survives to_json -> parse -> to_json
 * unchanged; an accepted latest gives a step >= 0 whose written form parses
 * back to it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ckpt_index.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_checkpoint: %s\n", what);
    abort();
}

static void check_valid(const pt_ckpt_index *ix)
{
    for (int l = 0; l < ix->layer_count; l++) {
        const pt_ckpt_layer *layer = &ix->layers[l];
        if (l > 0 && ix->layers[l - 1].index >= layer->index)
            fail("layers not sorted by distinct index");
        for (int t = 0; t < layer->tensor_count; t++) {
            const pt_ckpt_tensor *x = &layer->tensors[t];
            int64_t product = 1;
            for (int d = 0; d < x->rank; d++)
                product *= x->shape[d];
            if (product != x->count || x->count < 1)
                fail("count is not the product of the shape");
            if (!x->file[0] || strchr(x->file, '/') || !strcmp(x->file, "..") ||
                !strcmp(x->file, "."))
                fail("file name escapes the folder");
        }
    }
}

static void check_latest(const char *text)
{
    pt_error err = {0};
    int64_t step = -7;
    if (pt_ckpt_latest_parse(text, "fuzz", &step, &err) < 0) {
        if (step != -7)
            fail("a refused latest set the step");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("latest: error does not name the source");
        return;
    }
    if (step < 0)
        fail("latest: a negative step was accepted");
    char *again = pt_ckpt_latest_to_json(step);
    int64_t back = -1;
    if (!again || pt_ckpt_latest_parse(again, "fuzz2", &back, &err) < 0 || back != step)
        fail("latest: the written form does not read back");
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    pt_ckpt_index *ix = NULL;
    pt_error err = {0};
    int rc = pt_ckpt_index_parse(text, "fuzz", &ix, &err);
    check_latest(text);
    free(text);
    if (rc < 0) {
        if (ix)
            fail("refused input left an index");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("error does not name the source");
        return 0;
    }
    check_valid(ix);
    char *a = pt_ckpt_index_to_json(ix);
    pt_ckpt_index *again = NULL;
    if (!a || pt_ckpt_index_parse(a, "fuzz2", &again, &err) < 0)
        fail("written index does not parse");
    char *b = pt_ckpt_index_to_json(again);
    if (!b || strcmp(a, b) != 0)
        fail("to_json -> parse -> to_json changed the index");
    free(a);
    free(b);
    pt_ckpt_index_free(&ix);
    pt_ckpt_index_free(&again);
    return 0;
}
