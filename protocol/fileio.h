/* Whole-file reads and crash-safe writes shared by every format. */
#ifndef PT_PROTOCOL_FILEIO_H
#define PT_PROTOCOL_FILEIO_H

#include <stddef.h>

#include "protocol/error.h"

/* Reads a whole file into a NUL-terminated buffer the caller frees. On
 * failure returns PT_EIO / PT_ENOTFOUND and err names the path and errno. */
int pt_file_read(const char *path, char **out, size_t *len, pt_error *err);

/* Writes len bytes to path via "<path>.tmp.<pid>", fsync, rename, and fsync
 * of the directory, so a crash leaves either the old or the new file. */
int pt_file_write_atomic(const char *path, const void *data, size_t len, pt_error *err);

/* mkdir -p; 0 or PT_EIO. */
int pt_mkdir_p(const char *path, pt_error *err);

#endif
