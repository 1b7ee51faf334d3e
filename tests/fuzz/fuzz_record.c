/* Fuzz harness for the run-record reader (protocol/record.h) and its
 * replay into a store (tui/record/replay.h), libFuzzer or replay_main.c over the
 * corpus. Properties, each an abort() when false: a refused input leaves no
 * record and an error naming the source and the line; an accepted one starts
 * with a session line of a readable version, every frame it holds decodes
 * again (the reader validated it) and the decoded events (a tail frame's
 * left out, fold and sfold lines' added: record versions 3 and 4) add up to the summary's
 * count, it applies entry by entry to a store without harm, the
 * store never holds more events than the record's event messages carry, and
 * every span it keeps ends no earlier than it starts; the reader's fast
 * way and its general way alone give the same outcome and entries. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/record_internal.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define FUZZ_RING 64 /* small, so the ring wraps */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_record: %s\n", what);
    abort();
}

/* The reader's fast way (protocol/record_scan.c) and its general way alone
 * give the same outcome, error and entries. */
static void check_both_ways(const uint8_t *data, size_t size, int rc, const pt_record *rec,
                            const pt_error *err)
{
    pt_record *slow = NULL;
    pt_error es = {0};
    int rs = pt_record_internal_parse((const char *)data, size, "fuzz", 0, 0, &slow, &es);
    if (rs != rc || (rc < 0 && strcmp(es.msg, err->msg) != 0))
        fail("the fast and the general reader differ on a record");
    if (rc == 0 && pt_record_count(slow) != pt_record_count(rec))
        fail("the fast and the general reader hold different entry counts");
    for (int64_t i = 0; rc == 0 && i < pt_record_count(rec); i++) {
        const pt_record_entry *a = pt_record_at(rec, i), *b = pt_record_at(slow, i);
        if (a->kind != b->kind || a->t != b->t || a->gen != b->gen || a->step != b->step ||
            a->step_last != b->step_last || a->dropped != b->dropped ||
            a->msg_type != b->msg_type || !a->agent != !b->agent ||
            (a->agent && strcmp(a->agent, b->agent) != 0) || !a->fold != !b->fold ||
            (a->fold &&
             (a->fold->events != b->fold->events || a->fold->frames != b->fold->frames ||
              a->fold->start_ns != b->fold->start_ns || a->fold->end_ns != b->fold->end_ns ||
              a->fold->busy_ns != b->fold->busy_ns)))
            fail("the fast and the general reader read an entry differently");
    }
    pt_record_free(&slow);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_record *rec = NULL;
    pt_error err = {0};
    int rc = pt_record_parse((const char *)data, size, "fuzz", &rec, &err);
    check_both_ways(data, size, rc, rec, &err);
    if (rc < 0) {
        if (rec)
            fail("a refused record was returned");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("the error does not name the source");
        if (err.code != rc)
            fail("the error code differs from the return code");
        return 0;
    }
    const pt_record_entry *first = pt_record_at(rec, 0);
    if (!first || first->kind != PT_RECORD_SESSION ||
        pt_record_version(rec) < PT_RECORD_VERSION_MIN ||
        pt_record_version(rec) > PT_RECORD_VERSION)
        fail("an accepted record does not start with a readable session line");
    int64_t events = 0, tail_events = 0;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind == PT_RECORD_FOLD) {
            if (!e->fold || e->fold->events < 1 || e->fold->end_ns < e->fold->start_ns)
                fail("a fold line holds no events or ends before it starts");
            events += e->fold->events;
        }
        if (e->kind == PT_RECORD_SFOLD) {
            const pt_record_sfold *f = e->sfold;
            if (!f || (f->replicas > 0) != (f->events > 0) || f->end_ns < f->start_ns ||
                f->busy_min_ns > f->busy_median_ns || f->busy_median_ns > f->busy_max_ns)
                fail("an sfold line's events, times or band disagree");
            events += f->events;
        }
        if (e->kind != PT_RECORD_RECV && e->kind != PT_RECORD_SENT)
            continue;
        pt_msg m;
        if (pt_record_msg(rec, i, &m, &err) < 0)
            fail("a frame the reader accepted does not decode again");
        if (m.type != e->msg_type)
            fail("the frame's type differs from the one the reader noted");
        if (e->kind == PT_RECORD_RECV && m.type == PT_MSG_EVENTS)
            *(e->tail ? &tail_events : &events) += m.u.events.count;
        pt_msg_clear(&m);
    }
    pt_store *store = NULL;
    if (pt_store_new(FUZZ_RING, &store) < 0) {
        pt_record_free(&rec);
        return 0;
    }
    for (int64_t i = 0; i < pt_record_count(rec); i++)
        pt_record_apply(rec, i, store);
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    pt_store_counts c;
    pt_store_counts_get(store, &c);
    if (events != sum.events)
        fail("the summary's events differ from the frames'");
    if ((int64_t)c.events > sum.events + tail_events)
        fail("the store counted more events than the record holds");
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    if (pt_store_timeline(store, INT64_MIN, INT64_MAX, 0, &tl, NULL) == 0) {
        if (tl.count > FUZZ_RING)
            fail("the timeline holds more spans than the ring");
        for (int64_t i = 0; i < tl.count; i++)
            if (tl.spans[i].end < tl.spans[i].start)
                fail("a span ends before it starts");
    }
    pt_tline_release(&tl);
    pt_store_free(&store);
    pt_record_free(&rec);
    return 0;
}
