/* Fuzz harness for `pipetop export` (tui/export/): each input is a run
 * record (run.ndjson), read as export reads it, all of it and its last two
 * iterations, and written as a trace and as an SVG picture. Properties, each
 * an abort() when false: a refused record leaves an empty set and an error
 * naming the file; an accepted one writes a trace that is valid JSON whose
 * op events number what the set holds, and an SVG document; spans end no
 * earlier than they start. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tui/export/export.h"

static char g_dir[64], g_path[96];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_export: %s\n", what);
    abort();
}

static void remove_scratch(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

static void check_set(const pt_export_set *set)
{
    for (int64_t i = 0; i < set->count; i++)
        if (!(set->spans[i].end >= set->spans[i].start))
            fail("a span ends before it starts");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        fail("open_memstream");
    pt_export_counts counts = {0};
    pt_error err = {0};
    int rc = pt_export_trace_write(set, f, &counts, &err);
    fclose(f);
    if (rc < 0)
        fail("the trace of an accepted record could not be written");
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j)
        fail("the trace is not valid JSON");
    cJSON_Delete(j);
    free(text);
    if (counts.ops != set->ops)
        fail("the trace's op events are not the set's");
    text = NULL;
    f = open_memstream(&text, &len);
    if (!f)
        fail("open_memstream");
    pt_export_svg_opts o = {0};
    rc = pt_export_svg_write(set, NULL, &o, f, &err);
    fclose(f);
    if (rc < 0 || !strstr(text, "<svg") || !strstr(text, "</svg>"))
        fail("the SVG of an accepted record is not an SVG document");
    free(text);
}

static void try_export(const pt_export_select *sel)
{
    pt_export_set set;
    pt_error err = {0};
    if (pt_export_load_run(g_path, sel, &set, &err) < 0) {
        if (!strstr(err.msg, g_dir))
            fail("an error does not name the file");
        return;
    }
    check_set(&set);
    pt_export_set_release(&set);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/pt_fuzz_export.XXXXXX");
        if (!mkdtemp(g_dir))
            fail("mkdtemp");
        snprintf(g_path, sizeof g_path, "%s/run.ndjson", g_dir);
        atexit(remove_scratch);
    }
    FILE *f = fopen(g_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size))
        fail("cannot write the scratch record");
    fclose(f);
    try_export(NULL);
    pt_export_select last = {0, -1, 2};
    try_export(&last);
    return 0;
}
