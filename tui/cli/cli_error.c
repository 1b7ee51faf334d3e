/* Errors of the command line (see cli_error.h). */
#include "tui/cli/cli_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "protocol/error.h"

void pt_cli_error(const char *cmd, int json, int code, const char *fmt, ...)
{
    char msg[PT_ERROR_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!json) {
        fprintf(stderr, "pipetop %s: %s\n", cmd, msg);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", code == PT_CLI_USAGE ? "usage" : pt_error_code_name(code));
    cJSON_AddStringToObject(o, "command", cmd);
    cJSON_AddStringToObject(o, "message", msg);
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    if (t)
        fprintf(stderr, "%s\n", t);
    else /* out of memory: still one line a script can read */
        fprintf(stderr, "{\"error\":\"no_memory\",\"command\":\"%s\"}\n", cmd);
    free(t);
    cJSON_Delete(o);
}
