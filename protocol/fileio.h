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
 * of the directory, so a crash leaves either the old or the new file. The
 * file's mode is 0666 less the umask (pipetop and its agent run with 077:
 * 0600). */
int pt_file_write_atomic(const char *path, const void *data, size_t len, pt_error *err);

/* pt_file_write_atomic with the new file's exact mode, the umask aside (0600
 * for a secret key, 0644 for a public one: the temporary file is created
 * with it, so the data is never more readable). */
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

/* mkdir -p (modes 0777 less the umask: 0700 in pipetop); 0 or PT_EIO. */
int pt_mkdir_p(const char *path, pt_error *err);

/* Descriptors held in reserve (a process-wide few, open on /dev/null), so
 * that the writes that must not fail -- a checkpoint's commit, the run
 * record -- find descriptors even when a flood of connections has taken
 * every other one: pt_fd_reserve_release closes them just before such a
 * write, pt_fd_reserve takes them again after (as many as it can now;
 * it is called again later). 0, or PT_EIO when it got fewer than n. */
#define PT_FD_RESERVE 16
int pt_fd_reserve(int n);
void pt_fd_reserve_release(void);

/* Raises this process's descriptor limit (RLIMIT_NOFILE) to its hard limit;
 * the new soft limit, or -1. */
long pt_fd_limit_raise(void);

/* Locks folder dir for this process (flock on dir/PT_DIR_LOCK_FILE, which
 * holds the holder's pid): a run folder belongs to one run at a time. The
 * lock lasts until the process ends (the descriptor is close-on-exec, so
 * processes it starts do not hold it); taking it again in the same process
 * is a no-op. PT_ESTATE, err naming the holder's pid, when another process
 * holds it; PT_EIO when the lock file cannot be made. */
#define PT_DIR_LOCK_FILE ".lock"
int pt_dir_lock(const char *dir, pt_error *err);
/* Whether some process holds dir's lock: 1 and *pid (not NULL) its pid
 * (0 if unknown), 0 when none does (or dir has no lock file). */
int pt_dir_lock_holder(const char *dir, long *pid);

/* Whether rel names a place inside some folder when joined to it: not
 * empty, not absolute, no ".." component (components are split at '/').
 * 0, or PT_EINVAL with why (a phrase, static) in *why when not NULL. For
 * paths that arrive from outside, e.g. a checkpoint folder on the wire. */
int pt_path_check_inside(const char *rel, const char **why);

/* out = root "/" rel, after pt_path_check_inside(rel). 0, or PT_EINVAL with
 * err naming rel and why (or the result too long for cap). */
int pt_path_join_inside(const char *root, const char *rel, char *out, size_t cap, pt_error *err);

#endif
