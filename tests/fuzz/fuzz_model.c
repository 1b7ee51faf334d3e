/* Fuzz harness for the model spec parser (libFuzzer, or replay_main.c over
 * the corpus); the shared properties are in fuzz_format.h. */
#include "protocol/model.h"
#include "tests/fuzz/fuzz_format.h"

static const char *check(const pt_model_spec *x)
{
    pt_layer_shape *shapes = calloc((size_t)x->layer_count, sizeof *shapes);
    int bad = !shapes || pt_model_spec_shapes(x, shapes, NULL) != 0;
    free(shapes);
    return bad ? "a parsed spec failed shape inference" : NULL;
}

PT_FUZZ_FORMAT("model", pt_model_spec, pt_model_spec_parse, pt_model_spec_to_json,
               pt_model_spec_free, check)
