/* Command-line parsing for every pipetop command and for pipetop-agent, from
 * one table per command: each entry names an option, its type and range,
 * where the value goes, and its --help line, so parsing and --help cannot
 * disagree. "--name value" or "--name=value", typed and range-checked, with
 * errors that name the program, the option and the reason. Positional
 * arguments are entries of type PT_OPT_ARG, filled in table order. */
#ifndef PT_PROTOCOL_OPTS_H
#define PT_PROTOCOL_OPTS_H

#include <stdint.h>
#include <stdio.h>

typedef enum pt_opt_type {
    PT_OPT_FLAG,   /* no value; *(int *)out = 1 */
    PT_OPT_INT,    /* int in [min, max] */
    PT_OPT_INT64,  /* int64_t in [min, max] */
    PT_OPT_DOUBLE, /* finite double in [min, max] */
    PT_OPT_STRING, /* *(const char **)out = the argument (not copied) */
    PT_OPT_ARG     /* a positional argument, *(const char **)out; min 1: required */
} pt_opt_type;

typedef struct pt_opt {
    const char *name; /* without the dashes: "lr"; PT_OPT_ARG: its name in usage ("RUN") */
    pt_opt_type type;
    void *out;
    double min, max;  /* numbers: the range; PT_OPT_ARG: min 1 when required */
    int seen;         /* set to 1 by the parser when the option was given */
    const char *arg;  /* the value's name in --help ("GBS"); NULL: by type (N, X, S) */
    const char *help; /* its --help text; '\n' continues it on the next line; NULL: none */
} pt_opt;

/* A number macro as a string literal, for defaults in help texts:
 * "(default " PT_OPTS_STR(DEFAULT_BATCH) ")". */
#define PT_OPTS_STR(x)  PT_OPTS_STR_(x)
#define PT_OPTS_STR_(x) #x

enum { PT_OPTS_OK = 0, PT_OPTS_HELP = 1, PT_OPTS_USAGE = 2 };

/* Parses argv[1..argc) (argv[0] is the command) against opts[0..n) for
 * `pipetop CMD`. Returns PT_OPTS_OK, PT_OPTS_HELP (--help or -h given, nothing
 * else parsed), or PT_OPTS_USAGE after printing "pipetop CMD: <reason>" to err
 * for an unknown option, a missing or malformed value, a number out of range,
 * a repeated option, a positional argument the table has no place for, or a
 * required positional argument missing. */
int pt_opts_parse(const char *cmd, int argc, char **argv, pt_opt *opts, int n, FILE *err);

/* As pt_opts_parse for a program of its own: messages start "PROG: ". */
int pt_opts_parse_program(const char *prog, int argc, char **argv, pt_opt *opts, int n, FILE *err);

/* Prints the help of a command: `usage` (usage lines and a description) as
 * given, then one line per entry with help text, "  --name ARG  help", the
 * help aligned in one column and continued under it, then `tail` (NULL: none). */
void pt_opts_help(FILE *out, const char *usage, const pt_opt *opts, int n, const char *tail);

/* A command's whole handling of its arguments: pt_opts_parse, then on --help
 * pt_opts_help(stdout, usage, opts, n, tail) and 0; on a usage error (already
 * reported on stderr) 2; otherwise -1: the command goes on. */
int pt_opts_command(const char *cmd, int argc, char **argv, pt_opt *opts, int n, const char *usage,
                    const char *tail);

/* The entry called name, or NULL. */
const pt_opt *pt_opts_find(const pt_opt *opts, int n, const char *name);

/* Tests only: fn is called by every pt_opts_parse* with the program name and
 * the table, before parsing (NULL: no observer). Not thread-safe. */
typedef void (*pt_opts_observer)(const char *prog, const pt_opt *opts, int n, void *ctx);
void pt_opts_observe(pt_opts_observer fn, void *ctx);

#endif
