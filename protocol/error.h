/* Status codes and error messages shared by every library of pipetop.
 *
 * Functions in protocol/, planner/ and runtime/ return 0 or a negative PT_E*
 * code and never exit the process. Where a function takes a pt_error *, it
 * fills it on failure with a message that names the file, the field and the
 * reason ("plan.json: stages[2].layers: [12,9) is empty"). */
#ifndef PT_PROTOCOL_ERROR_H
#define PT_PROTOCOL_ERROR_H

#include <stddef.h>

enum {
    PT_OK = 0,
    PT_EINVAL = -1,    /* invalid argument or input */
    PT_ENOMEM = -2,    /* out of memory */
    PT_EIO = -3,       /* read, write, fsync or rename failed */
    PT_EPARSE = -4,    /* not valid JSON or not the expected format */
    PT_ERANGE = -5,    /* a number out of its allowed range */
    PT_ENOTFOUND = -6, /* a file, layer, device or name that does not exist */
    PT_EUNSUPP = -7,   /* valid but not supported by this build */
    PT_ENOFIT = -8,    /* does not fit the device memory */
    PT_ETIMEOUT = -9,  /* a peer did not answer in time */
    PT_ESTATE = -10,   /* call not allowed in the current state */
    PT_EDEADLOCK = -11, /* a schedule program that cannot complete */
    PT_EREFUSED = -12   /* a peer refused this side's key or handshake */
};

#define PT_ERROR_MAX 512

typedef struct pt_error {
    int code;               /* the PT_E* code; 0 when no error was recorded */
    char msg[PT_ERROR_MAX]; /* "file: field: reason" */
} pt_error;

/* Words for a PT_E* code; never NULL. */
const char *pt_strerror(int code);
/* A stable machine name of a code ("invalid", "not_found", "no_fit"...), as
 * the `error` field of the command line's --json errors (docs/formats.md);
 * "failed" for a code it does not know. */
const char *pt_error_code_name(int code);

/* Records code and a printf-style message in err (NULL-safe) and returns
 * code, so callers can write `return pt_error_set(err, PT_EINVAL, ...)`. */
int pt_error_set(pt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in err with "prefix: " (NULL-safe); used to
 * add the file name to a message made by a parser of text. Returns err->code. */
int pt_error_prefix(pt_error *err, const char *prefix);

/* Clears err (NULL-safe). */
void pt_error_clear(pt_error *err);

#endif
