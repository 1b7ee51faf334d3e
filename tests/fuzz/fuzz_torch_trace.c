/* Fuzz harness for the PyTorch profiler trace reader of `pipetop
 * import-trace` (tui/cli/torch_trace.h), libFuzzer or replay_main.c over the
 * corpus (tests/data/torch holds real-form traces, tests/data/bad/torch_trace
 * refused ones). Properties, each an abort() when false: a refused input
 * leaves an empty trace and an error naming the source; an accepted one's
 * ops are in time order with stages, micro-batches and durations in range,
 * and numbering its iterations puts every op kept in [0, iterations). Both
 * the built-in labels and a user's pattern are tried. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tui/cli/torch_trace.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_torch_trace: %s\n", what);
    abort();
}

static void one(const uint8_t *data, size_t size, const pt_tt_labels *lab)
{
    pt_tt_trace t;
    pt_error err = {0};
    int rc = pt_tt_parse((const char *)data, size, "fuzz", lab, -1, &t, &err);
    if (rc < 0) {
        if (t.ops || t.op_count || t.steps)
            fail("a refused trace kept ops");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("the error does not name the source");
        return;
    }
    for (int i = 0; i < t.op_count; i++) {
        const pt_tt_op *o = &t.ops[i];
        if (o->stage < 0 || o->stage >= PT_TT_STAGE_MAX || o->mb < 0 || o->mb >= PT_TT_MB_MAX ||
            !(o->dur >= 0) || !(o->ts >= 0))
            fail("an op out of range");
        if (i > 0 && o->ts < t.ops[i - 1].ts)
            fail("ops out of time order");
    }
    int64_t steps = pt_tt_assign_steps(&t);
    if (steps < 0)
        fail("no memory for the iterations");
    for (int i = 0; i < t.op_count; i++)
        if (t.ops[i].step < 0 || t.ops[i].step >= steps)
            fail("an op's iteration out of range");
    pt_tt_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_tt_labels builtin, custom;
    pt_error err = {0};
    if (pt_tt_labels_init(&builtin, NULL, &err) < 0 ||
        pt_tt_labels_init(&custom, "^s([0-9]+)-([A-Z_]+)-m([0-9]+)$", &err) < 0)
        fail("the labels do not compile");
    one(data, size, &builtin);
    one(data, size, &custom);
    pt_tt_labels_free(&builtin);
    pt_tt_labels_free(&custom);
    return 0;
}
