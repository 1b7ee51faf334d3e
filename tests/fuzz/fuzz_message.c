/* Fuzz harness for the control/telemetry message parser (libFuzzer, or
 * replay_main.c over the corpus). Properties, each an abort() when false:
 * a refused input leaves a zeroed message and an error that starts with the
 * source name; an accepted one encodes, and encode(decode(encode(m))) equals
 * encode(m); the telemetry receiver puts every frame in exactly one bucket. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/message.h"
#include "protocol/telemetry.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_message: %s\n", what);
    abort();
}

static pt_telemetry_rx *rx;
static uint64_t fed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_msg m;
    pt_error err = {0};
    int rc = pt_msg_decode((const char *)data, size, "fuzz", &m, &err);
    if (rc < 0) {
        static const pt_msg zero;
        if (memcmp(&m, &zero, sizeof m) != 0)
            fail("a refused input left a message");
        if (err.code != rc || strncmp(err.msg, "fuzz", 4) != 0)
            fail("a refused input has no error naming its source");
    } else {
        char *text = NULL, *again = NULL;
        if (pt_msg_encode(&m, &text, NULL, &err) != 0)
            fail("an accepted message does not encode");
        pt_msg back;
        if (pt_msg_decode(text, strlen(text), "fuzz-again", &back, &err) != 0)
            fail("the encoder's output does not decode");
        if (pt_msg_encode(&back, &again, NULL, &err) != 0 || strcmp(text, again) != 0)
            fail("encode(decode(encode(m))) differs from encode(m)");
        free(text);
        free(again);
        pt_msg_clear(&back);
        pt_msg_accept(&m, PT_MSG_AT_CONSOLE, 1, NULL);
        pt_msg_accept(&m, PT_MSG_AT_AGENT, 1, NULL);
    }
    pt_msg_clear(&m);

    if (!rx && pt_telemetry_rx_create(0, &rx) != 0)
        return 0;
    pt_msg got;
    pt_telemetry_rx_feed(rx, (const char *)data, size, NULL, &got, NULL);
    pt_msg_clear(&got);
    fed++;
    pt_rx_counts c;
    pt_telemetry_rx_totals(rx, &c);
    if (c.received + c.duplicates + c.stale + c.malformed != fed)
        fail("a frame was not counted exactly once");
    return 0;
}
