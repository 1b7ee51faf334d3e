/* pipetop: plan, run and watch pipeline-parallel training. */
#include <stdio.h>
#include <string.h>

#include "tui/cli/commands.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: pipetop COMMAND [OPTIONS]   (pipetop COMMAND --help for its options)\n"
                 "       pipetop [console options]   the console (pipetop console --help)\n\n"
                 "commands:\n");
    for (const pt_command *c = pt_commands; c->name; c++)
        fprintf(out, "  %-16s %s\n", c->name, c->summary);
}

int main(int argc, char **argv)
{
    /* no sub-command (or only console options): the console */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") &&
                     strcmp(argv[1], "--version")))
        return pt_cmd_console(argc, argv);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pipetop 0.1.0\n");
        return 0;
    }
    for (const pt_command *c = pt_commands; c->name; c++)
        if (!strcmp(argv[1], c->name))
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "pipetop: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
