/* Whole-file reads and crash-safe writes shared by every format. */
#ifndef PT_PROTOCOL_FILEIO_H
#define PT_PROTOCOL_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "protocol/error.h"

/* Largest file pt_file_read accepts: 1 GiB. Every format pipetop reads whole
 * (specs, plans, profiles, records, checkpoint indexes, themes) is far below
 * it; a larger input is refused instead of exhausting memory. */
#define PT_FILE_READ_MAX (1LL << 30)

/* Opens path for reading when it is a regular file of at most cap bytes,
 * without blocking on a FIFO (O_NONBLOCK at open). On success *fd is an open
 * descriptor the caller closes and *size (if not NULL) its size. On failure
 * *fd is -1 and err names the path: PT_ENOTFOUND (missing), PT_EIO (cannot
 * open; or a FIFO, device, socket or directory: "not a regular file"),
 * PT_ERANGE (larger than cap, the limit stated in the message). */
int pt_file_open_regular(const char *path, long long cap, int *fd, long long *size, pt_error *err);

/* Reads a whole regular file of at most PT_FILE_READ_MAX bytes into a
 * NUL-terminated buffer the caller frees. On failure *out is NULL and err
 * names the path and the reason (errno, not a regular file, too large); the
 * codes are those of pt_file_open_regular. */
int pt_file_read(const char *path, char **out, size_t *len, pt_error *err);

/* Writes len bytes to path via "<path>.tmp.<pid>", fsync, rename, and fsync
 * of the directory, so a crash leaves either the old or the new file. */
int pt_file_write_atomic(const char *path, const void *data, size_t len, pt_error *err);

/* pt_file_write_atomic with the new file's mode (e.g. 0600 for a secret key:
 * the temporary file is created with it, so the data is never more readable). */
int pt_file_write_atomic_mode(const char *path, const void *data, size_t len, unsigned mode,
                              pt_error *err);

/* The save of every format: text (malloc'd, taken over and freed; NULL
 * reads as "out of memory", so a writer's result goes straight in) written
 * to path with pt_file_write_atomic. */
int pt_file_save_text(const char *path, char *text, pt_error *err);
/* A save streamed through a FILE: write(f, user, err) fills a temporary
 * file beside path ("<path>.tmp.<pid>"), which is flushed, fsynced and
 * renamed over path when write returns 0 (and removed when it fails), so
 * a reader sees the old file or the whole new one. */
int pt_file_save_stream(const char *path, int (*write)(FILE *f, void *user, pt_error *err),
                        void *user, pt_error *err);

/* mkdir -p; 0 or PT_EIO. */
int pt_mkdir_p(const char *path, pt_error *err);

/* Whether rel names a place inside some folder when joined to it: not
 * empty, not absolute, no ".." component (components are split at '/').
 * 0, or PT_EINVAL with why (a phrase, static) in *why when not NULL. For
 * paths that arrive from outside, e.g. a checkpoint folder on the wire. */
int pt_path_check_inside(const char *rel, const char **why);

/* out = root "/" rel, after pt_path_check_inside(rel). 0, or PT_EINVAL with
 * err naming rel and why (or the result too long for cap). */
int pt_path_join_inside(const char *root, const char *rel, char *out, size_t cap, pt_error *err);

#endif
