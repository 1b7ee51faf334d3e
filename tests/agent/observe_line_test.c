/* The lines pipetop_torch.Monitor writes to pipetop-agent --observe
 * (agent/observe_line.h): each kind parses to its fields, and every case of
 * tests/data/bad/observe (one line each) is refused with its .expect text. */
#include <dirent.h>
#include <math.h>
#include <string.h>

#include "agent/observe_line.h"
#include "protocol/fileio.h"
#include "protocol/op.h"
#include "tests/test.h"

#define MIN_BAD_CASES 10

static int parse(const char *line, pt_obs_line *l, pt_error *err)
{
    return pt_obs_parse(line, strlen(line), l, err);
}

static void test_good(void)
{
    pt_obs_line l;
    pt_error err = {0};
    CHECK(parse("pipetop-observe 1", &l, &err) == 0 && l.type == PT_OBS_HELLO_LINE);
    CHECK_MSG(parse("op 12 3 SEND_B 7 1000 2500", &l, &err) == 0, "%s", err.msg);
    CHECK(l.type == PT_OBS_OP && l.step == 12 && l.stage == 3 && l.op == PT_OP_SEND_GRAD &&
          l.mb == 7 && l.start_ns == 1000 && l.end_ns == 2500);
    const struct {
        const char *kind;
        int op;
    } kinds[] = {{"F", PT_OP_FWD},           {"B", PT_OP_BWD},           {"I", PT_OP_BWD_INPUT},
                 {"W", PT_OP_BWD_WEIGHT},    {"SEND_F", PT_OP_SEND_ACT}, {"RECV_F", PT_OP_RECV_ACT},
                 {"RECV_B", PT_OP_RECV_GRAD}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "op 0 0 %s 0 5 5", kinds[i].kind);
        CHECK_MSG(parse(line, &l, &err) == 0 && l.op == kinds[i].op, "%s: %s", line, err.msg);
    }
    CHECK_MSG(parse("step 4 2.5e-1 16 99", &l, &err) == 0, "%s", err.msg);
    CHECK(l.type == PT_OBS_STEP && l.step == 4 && l.loss == 0.25 && l.samples == 16 &&
          l.end_ns == 99);
    CHECK(parse("step 4 - 16 99", &l, &err) == 0 && isnan(l.loss));
    CHECK(parse("", &l, &err) == PT_EINVAL);
    CHECK(pt_obs_parse("op 1\0 0 F 0 1 2", 15, &l, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "NUL byte");
}

static void test_bad_files(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", pt_test_path("tests/data/bad/observe"));
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    int cases = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".txt"))
            continue;
        char path[1400], expect_path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expect_path, sizeof expect_path, "%.*s.expect", (int)strlen(path) - 4, path);
        char *text = NULL, *expect = NULL;
        size_t len = 0;
        pt_error err = {0};
        REQUIRE(pt_file_read(path, &text, &len, &err) == 0);
        REQUIRE(pt_file_read(expect_path, &expect, NULL, &err) == 0);
        while (len > 0 && text[len - 1] == '\n')
            len--;
        expect[strcspn(expect, "\n")] = '\0';
        pt_obs_line l;
        CHECK_MSG(pt_obs_parse(text, len, &l, &err) == PT_EINVAL, "%s was accepted", path);
        CHECK_MSG(strstr(err.msg, expect) != NULL, "%s: \"%s\" lacks \"%s\"", path, err.msg,
                  expect);
        free(text);
        free(expect);
        cases++;
    }
    closedir(d);
    CHECK_MSG(cases >= MIN_BAD_CASES, "only %d bad cases", cases);
}

PT_TEST_MAIN({"good", test_good}, {"bad_files", test_bad_files})
