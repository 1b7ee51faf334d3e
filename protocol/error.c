#include "protocol/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *pt_strerror(int code)
{
    switch (code) {
    case PT_OK:
        return "success";
    case PT_EINVAL:
        return "invalid argument";
    case PT_ENOMEM:
        return "out of memory";
    case PT_EIO:
        return "input/output error";
    case PT_EPARSE:
        return "parse error";
    case PT_ERANGE:
        return "value out of range";
    case PT_ENOTFOUND:
        return "not found";
    case PT_EUNSUPP:
        return "not supported";
    case PT_ENOFIT:
        return "does not fit in device memory";
    case PT_ETIMEOUT:
        return "timed out";
    case PT_ESTATE:
        return "not allowed in this state";
    case PT_EDEADLOCK:
        return "schedule deadlocks";
    case PT_EREFUSED:
        return "refused by the peer";
    default:
        return "unknown error";
    }
}

const char *pt_error_code_name(int code)
{
    switch (code) {
    case PT_OK:
        return "ok";
    case PT_EINVAL:
        return "invalid";
    case PT_ENOMEM:
        return "no_memory";
    case PT_EIO:
        return "io";
    case PT_EPARSE:
        return "parse";
    case PT_ERANGE:
        return "range";
    case PT_ENOTFOUND:
        return "not_found";
    case PT_EUNSUPP:
        return "unsupported";
    case PT_ENOFIT:
        return "no_fit";
    case PT_ETIMEOUT:
        return "timeout";
    case PT_ESTATE:
        return "state";
    case PT_EDEADLOCK:
        return "deadlock";
    case PT_EREFUSED:
        return "refused";
    default:
        return "failed";
    }
}

int pt_error_set(pt_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int pt_error_prefix(pt_error *err, const char *prefix)
{
    if (!err)
        return PT_EINVAL;
    char tmp[PT_ERROR_MAX];
    size_t n = strlen(prefix);
    if (n > PT_ERROR_MAX - 3)
        n = PT_ERROR_MAX - 3;
    memcpy(tmp, prefix, n);
    tmp[n] = ':';
    tmp[n + 1] = ' ';
    size_t rest = strnlen(err->msg, PT_ERROR_MAX - 1);
    if (rest > PT_ERROR_MAX - 3 - n)
        rest = PT_ERROR_MAX - 3 - n;
    memcpy(tmp + n + 2, err->msg, rest);
    tmp[n + 2 + rest] = '\0';
    memcpy(err->msg, tmp, sizeof tmp);
    return err->code;
}

void pt_error_clear(pt_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
