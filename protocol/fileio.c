#include "protocol/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int pt_file_write_atomic(const char *path, const void *data, size_t len, pt_error *err)
{
    return pt_file_write_atomic_mode(path, data, len, 0644, err);
}

int pt_file_write_atomic_mode(const char *path, const void *data, size_t len, unsigned mode,
                              pt_error *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp); /* a leftover of a crashed writer may carry a wider mode */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, (mode_t)mode);
    if (fd < 0)
        return pt_error_set(err, PT_EIO, "%s: %s", tmp, strerror(errno));
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
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
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
