/* Every pipetop command parses its arguments with protocol/opts, and its
 * --help (exit 0) lists every entry of the table it parses with, each with a
 * help text: the table is caught by the parser's observer while the command
 * prints its help, so a command that parsed some other way, or printed a
 * help of its own that misses an option, fails here. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/opts.h"
#include "tests/test.h"
#include "tui/cli/commands.h"

#define ENTRIES_MAX 64
#define NAME_CAP    64
#define HELP_CAP    (64 * 1024)

typedef struct caught {
    int calls, n;
    char name[ENTRIES_MAX][NAME_CAP];
    int positional[ENTRIES_MAX], has_help[ENTRIES_MAX];
} caught;

static void observe(const char *prog, const pt_opt *opts, int n, void *ctx)
{
    (void)prog;
    caught *c = ctx;
    c->calls++;
    c->n = n < ENTRIES_MAX ? n : ENTRIES_MAX;
    for (int i = 0; i < c->n; i++) {
        snprintf(c->name[i], NAME_CAP, "%s", opts[i].name);
        c->positional[i] = opts[i].type == PT_OPT_ARG;
        c->has_help[i] = opts[i].help && opts[i].help[0];
    }
}

/* Runs fn(argc, argv) with stdout captured into out; returns its status. */
static int run_captured(int (*fn)(int, char **), int argc, char **argv, char *out, size_t cap)
{
    char path[] = "/tmp/pipetop-help-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    int st = fn(argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, out, cap - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return st;
}

/* 1 when word occurs in text followed by a space, '=' or the end of a line. */
static int lists(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
        if ((p == text || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '='))
            return 1;
    return 0;
}

static void check_command(const char *label, int (*fn)(int, char **), int argc, char **argv)
{
    static char out[HELP_CAP];
    caught c;
    memset(&c, 0, sizeof c);
    pt_opts_observe(observe, &c);
    int st = run_captured(fn, argc, argv, out, sizeof out);
    pt_opts_observe(NULL, NULL);
    CHECK_MSG(st == 0, "%s --help: exit %d", label, st);
    CHECK_MSG(c.calls >= 1, "%s: did not parse its arguments with pt_opts", label);
    CHECK_MSG(c.n > 0, "%s: an empty option table", label);
    CHECK_MSG(!strncmp(out, "usage: ", 7), "%s --help does not start with usage:\n%s", label, out);
    for (int i = 0; i < c.n; i++) {
        char word[NAME_CAP + 2];
        snprintf(word, sizeof word, "%s%s", c.positional[i] ? "" : "--", c.name[i]);
        CHECK_MSG(c.has_help[i], "%s: %s has no help text", label, word);
        CHECK_MSG(lists(out, word), "%s --help does not list %s:\n%s", label, word, out);
    }
}

static void test_every_command(void)
{
    int count = 0;
    for (const pt_command *cmd = pt_commands; cmd->name; cmd++, count++) {
        char *argv[] = {(char *)cmd->name, "--help", NULL};
        check_command(cmd->name, cmd->run, 2, argv);
    }
    CHECK(count >= 13);
}

static void test_profile_analytic(void)
{
    char *argv[] = {"profile", "--analytic", "--help", NULL};
    check_command("profile --analytic", pt_cmd_profile, 3, argv);
}

static void test_profile_torch(void)
{
    char *argv[] = {"profile", "--torch", "m:f", "--help", NULL};
    check_command("profile --torch", pt_cmd_profile, 4, argv);
}

PT_TEST_MAIN({"every_command", test_every_command}, {"profile_analytic", test_profile_analytic},
             {"profile_torch", test_profile_torch})
