#include "protocol/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of_mode(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a plain file";
}

int pt_file_open_regular(const char *path, long long cap, int *fd, long long *size, pt_error *err)
{
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return pt_error_set(err, errno == ENOENT ? PT_ENOTFOUND : PT_EIO, "%s: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return pt_error_set(err, PT_EIO, "%s: not a regular file (%s)", path,
                            kind_of_mode(st.st_mode));
    }
    if ((long long)st.st_size > cap) {
        close(f);
        return pt_error_set(err, PT_ERANGE, "%s: %lld bytes is above the limit of %lld bytes", path,
                            (long long)st.st_size, cap);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    if (size)
        *size = (long long)st.st_size;
    return 0;
}

int pt_file_read(const char *path, char **out, size_t *len, pt_error *err)
{
    *out = NULL;
    int fd;
    long long size;
    int rc = pt_file_open_regular(path, PT_FILE_READ_MAX, &fd, &size, err);
    if (rc < 0)
        return rc;
    /* the size is a hint: the file may grow or shrink while it is read, and
     * the cap holds for what is actually read */
    size_t cap = (size_t)size + 2 > 4096 ? (size_t)size + 2 : 4096, n = 0; /* +2: room to see EOF */
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if ((long long)n >= PT_FILE_READ_MAX) {
                free(buf);
                close(fd);
                return pt_error_set(err, PT_ERANGE, "%s: more than the limit of %lld bytes", path,
                                    (long long)PT_FILE_READ_MAX);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                close(fd);
                return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return pt_error_set(err, PT_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return 0;
}

static void fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

/* The end of every atomic write: fsync and close fd (the open temporary
 * tmp), rename it over path and fsync the folder; tmp is removed on failure. */
static int commit_tmp(int fd, const char *tmp, const char *path, pt_error *err)
{
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return pt_error_set(err, PT_EIO, "%s: fsync: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return pt_error_set(err, PT_EIO, "%s: rename: %s", path, strerror(e));
    }
    fsync_dir_of(path);
    return 0;
}

int pt_file_save_text(const char *path, char *text, pt_error *err)
{
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", path);
    int rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

int pt_file_save_stream(const char *path, int (*write)(FILE *f, void *user, pt_error *err),
                        void *user, pt_error *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    int rc = write(f, user, err);
    if (fflush(f) != 0 && rc == 0)
        rc = pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    if (rc < 0) {
        fclose(f);
        unlink(tmp);
        return rc;
    }
    int fd = dup(fileno(f));
    fclose(f);
    if (fd < 0) {
        unlink(tmp);
        return pt_error_set(err, PT_EIO, "%s: %s", tmp, strerror(errno));
    }
    return commit_tmp(fd, tmp, path, err);
}

/* mode: the file's exact mode; FILE_MODE_UMASK: 0666 less the process's
 * umask (pipetop and its agent set 077: docs/deploy.md, "Files"). */
#define FILE_MODE_UMASK 0x10000u

int pt_file_write_atomic(const char *path, const void *data, size_t len, pt_error *err)
{
    return pt_file_write_atomic_mode(path, data, len, FILE_MODE_UMASK, err);
}

int pt_file_write_atomic_mode(const char *path, const void *data, size_t len, unsigned mode,
                              pt_error *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp); /* a leftover of a crashed writer may carry a wider mode */
    int exact = mode != FILE_MODE_UMASK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, exact ? (mode_t)(mode & 07777) : 0666);
    if (fd < 0)
        return pt_error_set(err, PT_EIO, "%s: %s", tmp, strerror(errno));
    if (exact && fchmod(fd, (mode_t)(mode & 07777)) != 0) { /* the umask takes no part */
        int e = errno;
        close(fd);
        unlink(tmp);
        return pt_error_set(err, PT_EIO, "%s: chmod: %s", tmp, strerror(e));
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return pt_error_set(err, PT_EIO, "%s: write: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    return commit_tmp(fd, tmp, path, err);
}

int pt_mkdir_p(const char *path, pt_error *err)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return pt_error_set(err, PT_EINVAL, "%s: bad directory name", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) /* the umask decides */
                return pt_error_set(err, PT_EIO, "%s: mkdir: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    return 0;
}

int pt_path_check_inside(const char *rel, const char **why)
{
    const char *w = NULL;
    if (!rel || !rel[0])
        w = "is empty";
    else if (rel[0] == '/')
        w = "is an absolute path";
    for (const char *p = rel; !w && *p;) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            w = "has a \"..\" component";
        p += n;
        while (*p == '/')
            p++;
    }
    if (why)
        *why = w;
    return w ? PT_EINVAL : 0;
}

int pt_path_join_inside(const char *root, const char *rel, char *out, size_t cap, pt_error *err)
{
    const char *why = NULL;
    if (pt_path_check_inside(rel, &why) < 0)
        return pt_error_set(err, PT_EINVAL, "\"%s\" %s: only a folder inside %s is allowed",
                            rel ? rel : "", why, root);
    int n =
        strcmp(rel, ".") ? snprintf(out, cap, "%s/%s", root, rel) : snprintf(out, cap, "%s", root);
    if (n < 0 || (size_t)n >= cap)
        return pt_error_set(err, PT_EINVAL, "%s/%s: path too long", root, rel);
    return 0;
}

/* ---- folder locks ---- */

#define LOCKS_MAX 16 /* folders one process locks (a console restarting runs keeps one) */
static struct {
    char path[4096];
    int fd;
} held_locks[LOCKS_MAX];
static int held_count;

static long lock_pid(int fd)
{
    char buf[32] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    return n > 0 ? strtol(buf, NULL, 10) : 0;
}

int pt_dir_lock(const char *dir, pt_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, PT_DIR_LOCK_FILE) >= (int)sizeof path)
        return pt_error_set(err, PT_EINVAL, "%s: name too long", dir);
    for (int i = 0; i < held_count; i++)
        if (!strcmp(held_locks[i].path, path))
            return 0;
    if (held_count == LOCKS_MAX)
        return pt_error_set(err, PT_ERANGE, "%s: more than %d folders locked", dir, LOCKS_MAX);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = lock_pid(fd);
        close(fd);
        if (e == EWOULDBLOCK)
            return pt_error_set(err, PT_ESTATE,
                                "%s is in use by another run (pid %ld holds %s): give another "
                                "--run-dir, or wait for it to end",
                                dir, pid, path);
        return pt_error_set(err, PT_EIO, "%s: flock: %s", path, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(e));
    }
    snprintf(held_locks[held_count].path, sizeof held_locks[0].path, "%s", path);
    held_locks[held_count++].fd = fd;
    return 0;
}

int pt_dir_lock_holder(const char *dir, long *pid)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, PT_DIR_LOCK_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (pid)
        *pid = held ? lock_pid(fd) : 0;
    close(fd); /* also drops the shared lock when it was taken */
    return held;
}

/* ---- descriptors ---- */

static int reserved_fd[PT_FD_RESERVE];
static int reserved_n;

int pt_fd_reserve(int n)
{
    if (n > PT_FD_RESERVE)
        n = PT_FD_RESERVE;
    while (reserved_n < n) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return PT_EIO;
        reserved_fd[reserved_n++] = fd;
    }
    return 0;
}

void pt_fd_reserve_release(void)
{
    while (reserved_n > 0)
        close(reserved_fd[--reserved_n]);
}

long pt_fd_limit_raise(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return -1;
    if (r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0)
            return -1;
    }
    return r.rlim_cur == RLIM_INFINITY ? LONG_MAX : (long)r.rlim_cur;
}
