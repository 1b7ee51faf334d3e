/* Every file under tests/data/bad/<format>/ must be refused by its loader
 * with a message that starts with the file's path and contains the text of
 * the matching <case>.expect (which names the field and the reason). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ckpt_index.h" /* index.json cases: tests/runtime/checkpoint_test.c */
#include "protocol/device.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"
#include "tests/test.h"

/* Each format keeps at least this many bad cases (issue 2). */
#define MIN_CASES_PER_FORMAT 8

static int load_model(const char *path, pt_error *err)
{
    pt_model_spec *m = (pt_model_spec *)1;
    int rc = pt_model_spec_load(path, &m, err);
    CHECK(m == NULL);
    pt_model_spec_free(&m);
    return rc;
}

static int load_profile(const char *path, pt_error *err)
{
    pt_profile *p = (pt_profile *)1;
    int rc = pt_profile_load(path, &p, err);
    CHECK(p == NULL);
    pt_profile_free(&p);
    return rc;
}

static int load_device(const char *path, pt_error *err)
{
    pt_device_desc d;
    memset(&d, 0x5a, sizeof d);
    int rc = pt_device_load(path, &d, err);
    CHECK(d.name[0] == '\0' && d.peak_flops == 0); /* zeroed on failure */
    return rc;
}

static int load_topology(const char *path, pt_error *err)
{
    pt_topology *t = (pt_topology *)1;
    int rc = pt_topology_load(path, &t, err);
    CHECK(t == NULL);
    pt_topology_free(&t);
    return rc;
}

static int load_plan(const char *path, pt_error *err)
{
    pt_plan *p = (pt_plan *)1;
    int rc = pt_plan_load(path, &p, err);
    CHECK(p == NULL);
    pt_plan_free(&p);
    return rc;
}

static int load_latest(const char *path, pt_error *err)
{
    char *text = NULL;
    int rc = pt_file_read(path, &text, NULL, err);
    int64_t step = -7;
    if (rc == 0)
        rc = pt_ckpt_latest_parse(text, path, &step, err);
    CHECK(step == -7); /* untouched on failure */
    free(text);
    return rc;
}

static int load_record(const char *path, pt_error *err)
{
    pt_record *r = (pt_record *)1;
    int rc = pt_record_load(path, &r, err);
    CHECK(r == NULL);
    pt_record_free(&r);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ext: the cases' file ending; a line-numbered format (records) puts the
 * line right after the path: "PATH:LINE: FIELD: REASON", and its .expect
 * starts with the line. */
static void run_format_ext(const char *format, const char *ext, int line_numbered,
                           int (*load)(const char *, pt_error *))
{
    size_t ext_len = strlen(ext);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", pt_test_path("tests/data/bad/"));
    strncat(dir, format, sizeof dir - strlen(dir) - 1);
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > ext_len && !strcmp(e->d_name + len - ext_len, ext))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    CHECK_MSG(n >= MIN_CASES_PER_FORMAT, "%s: only %d bad cases", format, n);
    for (int i = 0; i < n; i++) {
        char path[1200], expect_path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(expect_path, sizeof expect_path, "%s", path);
        strcpy(expect_path + strlen(expect_path) - ext_len, ".expect");
        char *expect = NULL;
        pt_error ferr = {0};
        CHECK_MSG(pt_file_read(expect_path, &expect, NULL, &ferr) == 0, "%s", ferr.msg);
        if (!expect) {
            free(names[i]);
            continue;
        }
        size_t el = strlen(expect);
        while (el > 0 && (expect[el - 1] == '\n' || expect[el - 1] == '\r'))
            expect[--el] = '\0';
        CHECK_MSG(el > 0, "%s is empty", expect_path);
        pt_error err = {0};
        int rc = load(path, &err);
        CHECK_MSG(rc < 0, "%s was accepted", path);
        CHECK_MSG(err.code == rc, "%s: err.code %d, rc %d", path, err.code, rc);
        /* The message names the file first, then the field and reason. */
        char prefix[1210];
        snprintf(prefix, sizeof prefix, "%s%s", path, line_numbered ? ":" : ": ");
        CHECK_MSG(!strncmp(err.msg, prefix, strlen(prefix)),
                  "%s: message \"%s\" does not start "
                  "with the path",
                  names[i], err.msg);
        CHECK_MSG(line_numbered ? !strncmp(err.msg + strlen(prefix), expect, el)
                                : strstr(err.msg, expect) != NULL,
                  "%s/%s: \"%s\" does not contain \"%s\"", format, names[i], err.msg, expect);
        free(expect);
        free(names[i]);
    }
}

static void run_format(const char *format, int (*load)(const char *, pt_error *))
{
    run_format_ext(format, ".json", 0, load);
}

static void test_model(void)
{
    run_format("model", load_model);
}

static void test_profile(void)
{
    run_format("profile", load_profile);
}

static void test_device(void)
{
    run_format("device", load_device);
}

static void test_topology(void)
{
    run_format("topology", load_topology);
}

static void test_plan(void)
{
    run_format("plan", load_plan);
}

static void test_latest(void)
{
    run_format("latest", load_latest);
}

static void test_record(void)
{
    run_format_ext("record", ".ndjson", 1, load_record);
}

/* A missing file is a clear error too, not a crash. */
static void test_missing_file(void)
{
    pt_error err = {0};
    pt_plan *p = NULL;
    CHECK(pt_plan_load("/nonexistent/plan.json", &p, &err) == PT_ENOTFOUND);
    CHECK(p == NULL);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/plan.json");
}

PT_TEST_MAIN({"model", test_model}, {"profile", test_profile}, {"device", test_device},
             {"topology", test_topology}, {"plan", test_plan}, {"latest", test_latest},
             {"record", test_record}, {"missing_file", test_missing_file})
