/* Errors of the command line: "pipetop CMD: MESSAGE" on stderr, or under
 * --json one JSON object on one line of stderr,
 *   {"error": CODE, "command": CMD, "message": MESSAGE}
 * where CODE is stable for scripts (pt_error_code_name: "invalid",
 * "not_found", "no_fit"... and "usage" for a bad command line; see
 * docs/formats.md, "JSON output of the commands"). */
#ifndef PT_TUI_CLI_ERROR_H
#define PT_TUI_CLI_ERROR_H

/* The code of a usage error (exit status 2), beside the PT_E* codes. */
#define PT_CLI_USAGE 1

/* Prints an error of command cmd in text or (json set) as a JSON object;
 * code is a PT_E* code or PT_CLI_USAGE. */
void pt_cli_error(const char *cmd, int json, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
