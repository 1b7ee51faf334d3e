/* The complete examples in docs/formats.md parse with the reader of their
 * section, so the documentation cannot drift from the code. A ```json block
 * counts as a complete example when it holds "v"; fragments are skipped.
 * The run record's example is its ```ndjson block. */
#include <stdlib.h>
#include <string.h>

#include "protocol/ckpt_index.h"
#include "protocol/device.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tests/test.h"

static int parse_as(const char *section, const char *json, pt_error *err)
{
    int rc;
    if (!strcmp(section, "Model spec")) {
        pt_model_spec *m = NULL;
        rc = pt_model_spec_parse(json, "formats.md", &m, err);
        pt_model_spec_free(&m);
    } else if (!strcmp(section, "Profile")) {
        pt_profile *p = NULL;
        rc = pt_profile_parse(json, "formats.md", &p, err);
        pt_profile_free(&p);
    } else if (!strcmp(section, "Topology")) {
        pt_topology *t = NULL;
        rc = pt_topology_parse(json, "formats.md", &t, err);
        pt_topology_free(&t);
    } else if (!strcmp(section, "Device description")) {
        pt_device_desc d;
        rc = pt_device_parse(json, "formats.md", &d, err);
    } else if (!strcmp(section, "Checkpoint")) {
        pt_ckpt_index *ix = NULL;
        rc = pt_ckpt_index_parse(json, "formats.md", &ix, err);
        pt_ckpt_index_free(&ix);
    } else if (!strcmp(section, "Run record")) {
        pt_record *r = NULL;
        rc = pt_record_parse(json, strlen(json), "formats.md", &r, err);
        pt_record_free(&r);
    } else {
        pt_plan *p = NULL;
        rc = pt_plan_parse(json, "formats.md", &p, err);
        pt_plan_free(&p);
    }
    return rc;
}

static void test_examples_parse(void)
{
    char *text = NULL;
    pt_error err = {0};
    REQUIRE(pt_file_read(pt_test_path("docs/formats.md"), &text, NULL, &err) == 0);
    const char *sections[] = {"Model spec", "Profile",    "Topology",          "Plan",
                              "Checkpoint", "Run record", "Device description"};
    enum { SECTIONS = sizeof sections / sizeof sections[0] };
    int found[SECTIONS] = {0};
    char section[64] = "";
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        size_t len = next ? (size_t)(next - line) : strlen(line);
        if (!strncmp(line, "## ", 3)) {
            snprintf(section, sizeof section, "%.*s", (int)(len - 3), line + 3);
        } else if ((!strncmp(line, "```json", 7) || !strncmp(line, "```ndjson", 9)) && next) {
            char *end = strstr(next + 1, "\n```");
            REQUIRE(end != NULL);
            *end = '\0';
            const char *block = next + 1;
            for (int i = 0; i < SECTIONS; i++)
                if (!strcmp(section, sections[i]) && strstr(block, "\"v\"")) {
                    int rc = parse_as(section, block, &err);
                    CHECK_MSG(rc == 0, "%s example: %s", section, err.msg);
                    found[i]++;
                }
            next = end + 4;
        }
        line = next ? next + 1 : NULL;
    }
    for (int i = 0; i < SECTIONS; i++)
        CHECK_MSG(found[i] >= 1, "no complete example in section %s", sections[i]);
    free(text);
}

/* The plan's schedule.kind row names every kind of the table, and only those. */
static void test_schedule_kinds_listed(void)
{
    char *text = NULL;
    pt_error err = {0};
    REQUIRE(pt_file_read(pt_test_path("docs/formats.md"), &text, NULL, &err) == 0);
    char *row = strstr(text, "| `schedule.kind` |");
    REQUIRE(row != NULL);
    /* the third cell of the row: | field | type | values | meaning | */
    char *cell = row;
    for (int bar = 0; bar < 2 && cell; bar++)
        cell = strchr(cell + 1, '|');
    REQUIRE(cell != NULL);
    char *end = strchr(cell + 1, '|');
    REQUIRE(end != NULL);
    *end = '\0';
    for (int k = 0; k < pt_sched_kind_count(); k++) {
        char quoted[PT_SCHED_NAME_MAX + 2];
        snprintf(quoted, sizeof quoted, "`%s`", pt_sched_kind_name(k));
        CHECK_MSG(strstr(cell, quoted) != NULL, "docs/formats.md schedule.kind: %s missing",
                  quoted);
    }
    int ticks = 0;
    for (char *q = strchr(cell, '`'); q; q = strchr(q + 1, '`'))
        ticks++;
    CHECK_MSG(ticks == 2 * pt_sched_kind_count(), "docs/formats.md schedule.kind lists %d kinds",
              ticks / 2);
    free(text);
}

/* The text of section `name` ("## name" up to the next "## "). */
static char *section_of(const char *text, const char *name)
{
    char head[80];
    snprintf(head, sizeof head, "\n## %s\n", name);
    const char *a = strstr(text, head);
    if (!a)
        return NULL;
    const char *b = strstr(a + strlen(head), "\n## ");
    size_t n = b ? (size_t)(b - a) : strlen(a);
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, a, n);
        out[n] = '\0';
    }
    return out;
}

/* Every key a reader accepts is in its section: the reader lists them in
 * its "unknown field (known: ...)" error, which a key it does not know
 * provokes; each must appear as `prefix.key` (or, holding an object, as
 * one of its members `prefix.key.x`). */
static void check_keys(const char *doc, const char *section, const char *prefix, const char *json)
{
    pt_error err = {0};
    REQUIRE(parse_as(section, json, &err) < 0);
    const char *known = strstr(err.msg, "known: ");
    REQUIRE(known != NULL);
    char *sec = section_of(doc, section);
    REQUIRE(sec != NULL);
    char list[PT_ERROR_MAX];
    snprintf(list, sizeof list, "%s", known + strlen("known: "));
    char *end = strchr(list, ')');
    if (end)
        *end = '\0';
    int keys = 0;
    for (char *save = NULL, *k = strtok_r(list, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) {
        /* a key holding an object may be documented by its members (`microbatch.size`) */
        char want[160], member[160];
        snprintf(want, sizeof want, "`%s%s`", prefix, k);
        snprintf(member, sizeof member, "`%s%s.", prefix, k);
        CHECK_MSG(strstr(sec, want) || strstr(sec, member),
                  "docs/formats.md %s: %s is not documented", section, want);
        keys++;
    }
    CHECK(keys >= 3);
    free(sec);
}

#define LAYER "{\"name\": \"a\", \"fwd_ms\": 1, \"bwd_ms\": 2, \"act_bytes\": 4, \"param_bytes\": 8"
#define PROFILE_HEAD                                                                               \
    "{\"v\": 1, \"model\": \"m\", \"device\": \"d\", \"microbatch\": 1, \"input_bytes\": 0, "

static void test_fields_documented(void)
{
    char *doc = NULL;
    pt_error err = {0};
    REQUIRE(pt_file_read(pt_test_path("docs/formats.md"), &doc, NULL, &err) == 0);
    check_keys(doc, "Profile", "", PROFILE_HEAD "\"layers\": [" LAYER "}], \"zzz\": 1}");
    check_keys(doc, "Profile", "layers[i].", PROFILE_HEAD "\"layers\": [" LAYER ", \"zzz\": 1}]}");
    check_keys(doc, "Profile", "roofline.",
               PROFILE_HEAD "\"layers\": [" LAYER "}], \"roofline\": {\"zzz\": 1}}");
    check_keys(doc, "Profile", "runtime.",
               PROFILE_HEAD "\"layers\": [" LAYER "}], \"runtime\": {\"zzz\": 1}}");
    check_keys(doc, "Device description", "",
               "{\"v\": 1, \"name\": \"x\", \"peak_flops\": 1e12, \"mem_bandwidth\": 1e11, "
               "\"memory_bytes\": 1, \"zzz\": 1}");
    check_keys(doc, "Plan", "",
               "{\"v\": 1, \"model\": \"m\", \"layers\": 1, \"microbatch\": {\"size\": 1, "
               "\"count\": 1}, \"stages\": [{\"layers\": [0, 1], \"replicas\": [0]}], \"zzz\": 1}");
    free(doc);
}

PT_TEST_MAIN({"examples_parse", test_examples_parse}, {"fields_documented", test_fields_documented},
             {"schedule_kinds_listed", test_schedule_kinds_listed})
