/* protocol/opts: typed values and their ranges, "--a=v" and "--a v",
 * positional arguments in table order, every error with the program and the
 * option named, --help winning over bad arguments, and the generated help
 * listing every entry with its help in one aligned column. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/opts.h"
#include "tests/test.h"

#define ARGV_MAX 16
#define TEXT_MAX 4096

typedef struct vals {
    int flag, i;
    int64_t big;
    double x;
    const char *s, *pos1, *pos2;
} vals;

/* Parses the space-separated words of line (the first is the command) into v;
 * what was printed to the error stream goes to msg. */
static int parse(const char *line, vals *v, char *msg)
{
    static char buf[TEXT_MAX];
    snprintf(buf, sizeof buf, "%s", line);
    char *argv[ARGV_MAX];
    int argc = 0;
    for (char *w = strtok(buf, " "); w && argc < ARGV_MAX; w = strtok(NULL, " "))
        argv[argc++] = w;
    memset(v, 0, sizeof *v);
    pt_opt opts[] = {
        {"flag", PT_OPT_FLAG, &v->flag, 0, 0, 0, NULL, "a flag"},
        {"int", PT_OPT_INT, &v->i, -2, 10, 0, "N", "an int in [-2, 10]"},
        {"big", PT_OPT_INT64, &v->big, 0, 1e15, 0, NULL, "a large one"},
        {"x", PT_OPT_DOUBLE, &v->x, 0.5, 2, 0, "X", "a double\nin [0.5, 2]"},
        {"s", PT_OPT_STRING, &v->s, 0, 0, 0, "S", "a string"},
        {"FIRST", PT_OPT_ARG, &v->pos1, 1, 1, 0, NULL, "required"},
        {"SECOND", PT_OPT_ARG, &v->pos2, 0, 1, 0, NULL, "optional"},
    };
    FILE *err = tmpfile();
    int rc = pt_opts_parse_program("prog", argc, argv, opts, 7, err);
    rewind(err);
    size_t n = fread(msg, 1, TEXT_MAX - 1, err);
    msg[n] = '\0';
    fclose(err);
    return rc;
}

static void test_values(void)
{
    vals v;
    char msg[TEXT_MAX];
    CHECK(parse("prog a --flag --int 7 --big=123456789012 --x 1.5 --s=hello b", &v, msg) ==
          PT_OPTS_OK);
    CHECK(v.flag == 1 && v.i == 7 && v.big == 123456789012LL && v.x == 1.5);
    CHECK(v.s && !strcmp(v.s, "hello"));
    CHECK(v.pos1 && !strcmp(v.pos1, "a") && v.pos2 && !strcmp(v.pos2, "b"));
    CHECK(!msg[0]);
    CHECK(parse("prog only --int=-2", &v, msg) == PT_OPTS_OK);
    CHECK(v.i == -2 && !strcmp(v.pos1, "only") && v.pos2 == NULL && v.flag == 0);
}

static void expect_usage(const char *line, const char *text)
{
    vals v;
    char msg[TEXT_MAX];
    int rc = parse(line, &v, msg);
    CHECK_MSG(rc == PT_OPTS_USAGE, "%s: rc %d", line, rc);
    CHECK_MSG(!strncmp(msg, "prog: ", 6), "%s: message '%s' does not name the program", line, msg);
    CHECK_STR_CONTAINS(msg, text);
}

static void test_errors(void)
{
    expect_usage("prog a --int 11", "--int must be in [-2, 10], got 11");
    expect_usage("prog a --int 1.5", "--int needs an integer, got '1.5'");
    expect_usage("prog a --x 3", "--x must be in [0.5, 2], got 3");
    expect_usage("prog a --x nan", "--x needs a number, got 'nan'");
    expect_usage("prog a --int", "--int needs a value");
    expect_usage("prog a --s=", "--s needs a non-empty value");
    expect_usage("prog a --flag=1", "--flag takes no value");
    expect_usage("prog a --flag --flag", "--flag given twice");
    expect_usage("prog a --nope", "unknown option '--nope'");
    expect_usage("prog a --FIRST=x", "unknown option '--FIRST'"); /* positionals are not options */
    expect_usage("prog a b c", "unexpected argument 'c'");
    expect_usage("prog a -x", "unexpected argument '-x'");
    expect_usage("prog --flag", "FIRST is required");
}

static void test_help_first(void)
{
    vals v;
    char msg[TEXT_MAX];
    CHECK(parse("prog --nope --help", &v, msg) == PT_OPTS_HELP);
    CHECK(parse("prog -h", &v, msg) == PT_OPTS_HELP);
    CHECK(!msg[0]);
}

static void test_help_text(void)
{
    int flag = 0, n = 0;
    const char *s = NULL, *pos = NULL;
    pt_opt opts[] = {
        {"flag", PT_OPT_FLAG, &flag, 0, 0, 0, NULL, "the flag"},
        {"count", PT_OPT_INT, &n, 0, 9, 0, NULL, "how many\nsecond line"},
        {"name", PT_OPT_STRING, &s, 0, 0, 0, "NAME", "a name"},
        {"IN", PT_OPT_ARG, &pos, 1, 1, 0, NULL, "the input"},
        {"hidden", PT_OPT_FLAG, &flag, 0, 0, 0, NULL, NULL},
    };
    FILE *f = tmpfile();
    pt_opts_help(f, "usage: prog IN\n", opts, 5, "the end\n");
    rewind(f);
    char text[TEXT_MAX];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    CHECK_MSG(!strcmp(text, "usage: prog IN\n"
                            "  --flag       the flag\n"
                            "  --count N    how many\n"
                            "               second line\n"
                            "  --name NAME  a name\n"
                            "  IN           the input\n"
                            "the end\n"),
              "help text:\n%s", text);
    CHECK(!strstr(text, "hidden"));
}

/* The observer sees the program and the table before anything is parsed. */
static char seen_prog[64];
static int seen_n;
static void observe(const char *prog, const pt_opt *opts, int n, void *ctx)
{
    (void)opts;
    *(int *)ctx += 1;
    snprintf(seen_prog, sizeof seen_prog, "%s", prog); /* prog lives only during the call */
    seen_n = n;
}

static void test_observer(void)
{
    int calls = 0, flag = 0;
    pt_opt opts[] = {{"flag", PT_OPT_FLAG, &flag, 0, 0, 0, NULL, "f"}};
    char *argv[] = {"cmd", "--help", NULL};
    pt_opts_observe(observe, &calls);
    FILE *err = tmpfile();
    CHECK(pt_opts_parse("cmd", 2, argv, opts, 1, err) == PT_OPTS_HELP);
    pt_opts_observe(NULL, NULL);
    CHECK(pt_opts_parse("cmd", 2, argv, opts, 1, err) == PT_OPTS_HELP);
    fclose(err);
    CHECK(calls == 1);
    CHECK(!strcmp(seen_prog, "pipetop cmd") && seen_n == 1);
}

PT_TEST_MAIN({"values", test_values}, {"errors", test_errors}, {"help_first", test_help_first},
             {"help_text", test_help_text}, {"observer", test_observer})
