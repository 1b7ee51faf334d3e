/* Fuzz harness for the lines of pipetop_torch.Monitor that pipetop-agent
 * --observe reads (agent/observe_line.h), libFuzzer or replay_main.c over
 * the corpus (tests/data/bad/observe): the input cut at newlines, every
 * piece parsed. Properties, each an abort() when false: a refused line
 * says why; an accepted op has its stage, micro-batch and kind in range and
 * ends no earlier than it starts; an accepted step has a finite loss or
 * none and samples in range. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/observe_line.h"
#include "protocol/op.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_observe: %s\n", what);
    abort();
}

static void one(const char *s, size_t n)
{
    pt_obs_line l;
    pt_error err = {0};
    if (pt_obs_parse(s, n, &l, &err) < 0) {
        if (!err.msg[0])
            fail("a refused line says nothing");
        return;
    }
    if (l.type == PT_OBS_OP &&
        (l.stage < 0 || l.stage >= PT_OBS_STAGE_MAX || l.mb < 0 || l.mb >= PT_OBS_MB_MAX ||
         l.op < 0 || l.op >= PT_OP_KIND_COUNT || l.end_ns < l.start_ns || l.start_ns < 0))
        fail("an op out of range");
    if (l.type == PT_OBS_STEP &&
        ((!isnan(l.loss) && !isfinite(l.loss)) || l.samples < 0 || l.samples >= PT_OBS_SAMPLES_MAX))
        fail("a step out of range");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *end = s + size;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        one(s, n);
        s += n + 1;
    }
    return 0;
}
