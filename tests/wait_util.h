/* Bounded waits for tests that run other processes: each ends at its event
 * or at a deadline, and the caller fails naming what it waited for (no test
 * relies on ctest's TIMEOUT, or on its watchdog, to end a wait). */
#ifndef PT_TESTS_WAIT_UTIL_H
#define PT_TESTS_WAIT_UTIL_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline int64_t pt_wait_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Exit status of pid within ms (128 + signal when a signal ended it); -1
 * when it was still running after ms, then killed with SIGKILL and reaped. */
static inline int pt_wait_pid(pid_t pid, int ms)
{
    int64_t end = pt_wait_now_ms() + ms;
    int st;
    for (;;) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (got < 0 && errno != EINTR)
            return -2;
        if (pt_wait_now_ms() >= end)
            break;
        struct timespec ts = {0, 10000000}; /* reaping has no event to wait on */
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Lines from a pipe, each read with a deadline. */
typedef struct pt_wait_lines {
    int fd;
    char buf[8192];
    size_t len;
    int eof;
} pt_wait_lines;

/* The next line (without its newline) into line: 1; 0 at end of file; -1
 * when no whole line came before deadline_ms (pt_wait_now_ms's clock). */
static inline int pt_wait_line(pt_wait_lines *in, char *line, size_t cap, int64_t deadline_ms)
{
    for (;;) {
        char *nl = memchr(in->buf, '\n', in->len);
        if (nl || (in->eof && in->len) || in->len == sizeof in->buf) {
            size_t n = nl ? (size_t)(nl - in->buf) : in->len;
            size_t copy = n < cap - 1 ? n : cap - 1;
            memcpy(line, in->buf, copy);
            line[copy] = '\0';
            size_t used = nl ? n + 1 : n;
            memmove(in->buf, in->buf + used, in->len - used);
            in->len -= used;
            return 1;
        }
        if (in->eof)
            return 0;
        int64_t left = deadline_ms - pt_wait_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {in->fd, POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t got = read(in->fd, in->buf + in->len, sizeof in->buf - in->len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            in->eof = 1;
        else
            in->len += (size_t)got;
    }
}

#endif
