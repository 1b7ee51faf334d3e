/* Long-option parsing shared by the single-device commands (train,
 * profile): "--name value" or "--name=value", typed and range-checked, with
 * errors that name the command, the option and the reason. */
#ifndef PT_TUI_CMD_OPTS_H
#define PT_TUI_CMD_OPTS_H

#include <stdint.h>
#include <stdio.h>

typedef enum pt_opt_type {
    PT_OPT_FLAG,   /* no value; *(int *)out = 1 */
    PT_OPT_INT,    /* int in [min, max] */
    PT_OPT_INT64,  /* int64_t in [min, max] */
    PT_OPT_DOUBLE, /* finite double in [min, max] */
    PT_OPT_STRING  /* *(const char **)out = the argument (not copied) */
} pt_opt_type;

typedef struct pt_opt {
    const char *name; /* without the dashes: "lr" */
    pt_opt_type type;
    void *out;
    double min, max; /* numbers only */
    int seen;        /* set to 1 by the parser when the option was given */
} pt_opt;

enum { PT_OPTS_OK = 0, PT_OPTS_HELP = 1, PT_OPTS_USAGE = 2 };

/* Parses argv[1..argc) (argv[0] is the command) against opts[0..n). Returns
 * PT_OPTS_OK, PT_OPTS_HELP (--help or -h given), or PT_OPTS_USAGE after
 * printing "pipetop CMD: <reason>" to err for an unknown option, a missing
 * or malformed value, a number out of range, a repeated option or a
 * positional argument. */
int pt_opts_parse(const char *cmd, int argc, char **argv, pt_opt *opts, int n, FILE *err);

/* The entry called name, or NULL. */
const pt_opt *pt_opts_find(const pt_opt *opts, int n, const char *name);

#endif
