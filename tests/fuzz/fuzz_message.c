/* Fuzz harness for the control/telemetry message parser (libFuzzer, or
 * replay_main.c over the corpus). Properties, each an abort() when false:
 * a refused input leaves a zeroed message and an error that starts with the
 * source name; an accepted one encodes, and encode(decode(encode(m))) equals
 * encode(m); the telemetry receiver puts every frame in exactly one bucket;
 * the events scanner (protocol/telemetry_scan.h) takes only what
 * pt_msg_decode takes, with the same values, and pt_telemetry_decode gives
 * pt_msg_decode's result and error for every input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/message.h"
#include "protocol/telemetry.h"
#include "protocol/telemetry_scan.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_message: %s\n", what);
    abort();
}

/* The same events: the one field of a message that is a pointer. */
static int same_events(const pt_msg *a, const pt_msg *b)
{
    const pt_msg_events *x = &a->u.events, *y = &b->u.events;
    return x->count == y->count &&
           (x->count == 0 || !memcmp(x->events, y->events, (size_t)x->count * sizeof *x->events));
}

/* The scanner and pt_telemetry_decode against pt_msg_decode's rc, ref, e. */
static void check_scanner(const uint8_t *data, size_t size, int rc, const pt_msg *ref,
                          const pt_error *e)
{
    pt_msg fast, both;
    pt_error err = {0};
    if (pt_telemetry_scan_events((const char *)data, size, &fast)) {
        if (rc != 0 || fast.type != ref->type || strcmp(fast.agent, ref->agent) ||
            fast.seq != ref->seq || fast.gen != ref->gen || !same_events(&fast, ref))
            fail("the events scanner took what pt_msg_decode refuses or reads otherwise");
    } else {
        static const pt_msg zero;
        if (memcmp(&fast, &zero, sizeof fast) != 0)
            fail("the events scanner declined but left a message");
    }
    pt_msg_clear(&fast);
    int rc2 = pt_telemetry_decode((const char *)data, size, "fuzz", &both, &err);
    if (rc2 != rc || (rc < 0 && strcmp(err.msg, e->msg) != 0))
        fail("pt_telemetry_decode and pt_msg_decode differ");
    if (rc == 0 && ref->type == PT_MSG_EVENTS && !same_events(&both, ref))
        fail("pt_telemetry_decode and pt_msg_decode read other events");
    pt_msg_clear(&both);
}

static pt_telemetry_rx *rx;
static uint64_t fed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_msg m;
    pt_error err = {0};
    int rc = pt_msg_decode((const char *)data, size, "fuzz", &m, &err);
    check_scanner(data, size, rc, &m, &err);
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
