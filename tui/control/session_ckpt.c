/* The session's checkpoints: a step is committed once every worker wrote
 * its layers, older step folders go, and a record or commit that cannot be
 * written stops the run. */
#include "tui/control/session_internal.h"

#define CHILD_RESULT_FD 3 /* the commit process's one descriptor besides stdio */

#include <dirent.h>
#include <errno.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/ckpt_index.h"

/* ---- checkpoints -------------------------------------------------------------- */

/* Removes a step folder and the plain files in it (as agents write them):
 * 1 when it is gone after, 0 when it is still there (no descriptor left to
 * open it with, or a file that would not go). Each pass lists the names
 * first and unlinks after, and a folder not empty after a pass (a listing
 * that skipped an entry) gets another. */
static int remove_step_dir(const char *dir)
{
    for (int pass = 0; pass < 3; pass++) {
        DIR *d = opendir(dir);
        if (!d)
            return access(dir, F_OK) != 0;
        char(*names)[256] = NULL;
        int n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            if (n == cap) {
                int nc = cap ? 2 * cap : 16;
                char(*g)[256] = realloc(names, (size_t)nc * sizeof *names);
                if (!g)
                    break;
                names = g;
                cap = nc;
            }
            snprintf(names[n++], sizeof names[0], "%s", de->d_name);
        }
        for (int k = 0; k < n; k++)
            unlinkat(dirfd(d), names[k], 0);
        closedir(d);
        free(names);
        if (rmdir(dir) == 0)
            return 1;
        int why = errno;
        if (access(dir, F_OK) != 0)
            return 1;
        if (why != ENOTEMPTY && why != EEXIST)
            return 0;
    }
    return 0;
}

/* The step folders strictly between two commits (from, to): steps some
 * worker wrote that never were complete (a worker's acknowledgement that
 * did not come, a save that failed after another worker's). Commits only go
 * forward, so none of them can be committed any more; they go, and the
 * record says which, as failed checkpoints (a folder without its index
 * would otherwise stay, looking like a checkpoint to whoever lists it). */
static void remove_uncommitted(pt_session *s, int64_t from, int64_t to)
{
    DIR *d = opendir(s->ckpt_dir);
    if (!d)
        return;
    int64_t gone[PT_SESSION_CKPT_KEEP * 4];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < (int)(sizeof gone / sizeof gone[0])) {
        char *end = NULL;
        if (strncmp(de->d_name, "step-", 5) != 0 || de->d_name[5] < '0' || de->d_name[5] > '9')
            continue;
        long long k = strtoll(de->d_name + 5, &end, 10);
        if (*end == '\0' && k > from && k < to)
            gone[n++] = k;
    }
    closedir(d); /* names first, removal after: readdir over a changing folder may skip */
    for (int k = 0; k < n; k++) {
        char dir[PT_MSG_PATH_MAX + 32], why[200];
        snprintf(dir, sizeof dir, "%s/step-%lld", s->ckpt_dir, (long long)gone[k]);
        int removed = remove_step_dir(dir);
        snprintf(why, sizeof why,
                 "never complete (not every worker acknowledged it) when step %lld was "
                 "committed: %s",
                 (long long)to, removed ? "its folder was removed" : "its folder is left on disk");
        if (s->rec)
            pt_record_write_checkpoint_failed(s->rec, gone[k], dir, why);
    }
}

/* A run record that cannot be written stops the run: a record cut short
 * while the run went on would be a silent loss (it is what replay, export
 * and calibrate read). */
void session_check_record(pt_session *s)
{
    pt_error err = {0};
    if (s->fatal[0] || !pt_record_writer_failed(s->rec, &err))
        return;
    snprintf(s->fatal, sizeof s->fatal, "%s", err.msg);
    session_note(s, PT_NOTE_FATAL, -1, NULL, 0, s->fatal);
}

int pt_session_fatal(const pt_session *s, pt_error *err)
{
    if (!s || !s->fatal[0])
        return 0;
    pt_error_set(err, PT_EIO, "%s", s->fatal);
    return 1;
}

void pt_session_set_agent_checkpoint_dir(pt_session *s, const char *dir)
{
    if (s)
        snprintf(s->agent_ckpt, sizeof s->agent_ckpt, "%s", dir ? dir : "");
}

void pt_session_set_stall_ms(pt_session *s, int stall_ms)
{
    if (s)
        s->stall_ms = stall_ms > s->missed * s->hb_ms ? stall_ms : s->missed * s->hb_ms;
}

int pt_session_stall_ms(const pt_session *s)
{
    return s ? s->stall_ms : 0;
}

/* Closes every descriptor from fd on (close_range, else one by one). */
static void close_from(int fd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)fd, ~0U, 0) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (long k = fd; k < max; k++)
        close((int)k);
}

typedef struct commit_result {
    int rc, removed;
    char msg[PT_ERROR_MAX];
} commit_result;

/* The commit and the `latest` pointer; a failed commit's folder removed
 * when remove_failed (r->removed: 1 when it is gone). */
static void commit_here(pt_session *s, const char *dir, int64_t n, int remove_failed,
                        commit_result *r)
{
    pt_error e = {0};
    r->rc = s->commit(s->commit_user, dir, n, s->stage_count, &e);
    if (r->rc == 0)
        r->rc = pt_ckpt_latest_save(s->ckpt_dir, n, &e);
    r->removed = r->rc < 0 && remove_failed && remove_step_dir(dir);
    snprintf(r->msg, sizeof r->msg, "%s", e.msg);
}

/* The commit, here; when it fails, once more in a child process that
 * closes every descriptor the console holds (its connections among them):
 * a flood of connections can take every descriptor of this process (libzmq
 * accepts into any that frees up, so none can be held in reserve), and the
 * child has its own. The result comes back over a pipe made when the
 * session started (s->commit_pipe). A commit that fails there too fails
 * for another reason, and its folder is removed there, where there are the
 * descriptors to do it. Only a failure pays for the fork: a run that
 * checkpoints every few milliseconds forked faster than it heartbeated. */
static int commit_apart(pt_session *s, const char *dir, int64_t n, int *removed, pt_error *err)
{
    commit_result r = {0};
    commit_here(s, dir, n, s->commit_pipe[0] < 0, &r);
    pid_t pid = -1;
    if (r.rc < 0 && s->commit_pipe[0] >= 0) {
        fflush(NULL);
        pid = fork();
    }
    if (pid == 0) {
        dup2(s->commit_pipe[1], CHILD_RESULT_FD);
        close_from(CHILD_RESULT_FD + 1);
        commit_here(s, dir, n, 1, &r);
        _exit(write(CHILD_RESULT_FD, &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    if (pid > 0) {
        ssize_t got;
        do
            got = read(s->commit_pipe[0], &r, sizeof r);
        while (got < 0 && errno == EINTR);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        if (got != (ssize_t)sizeof r)
            r = (commit_result){PT_EIO, 0, "checkpoint commit: its process said nothing"};
    }
    *removed = r.removed;
    return r.rc < 0 ? pt_error_set(err, r.rc, "%s", r.msg) : 0;
}

void session_try_commit(pt_session *s)
{
    if (!s->ckpt_dir[0] || !s->commit || s->worker_count == 0)
        return;
    int64_t n = INT64_MAX;
    for (int w = 0; w < s->worker_count; w++) {
        const agent_entry *e = &s->agents[s->workers[w]];
        if (e->pub.gen != s->gen)
            return;
        if (e->pub.ckpt_step < n)
            n = e->pub.ckpt_step;
    }
    if (n < 0 || n <= s->committed)
        return;
    char dir[PT_MSG_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/step-%lld", s->ckpt_dir, (long long)n);
    pt_error err = {0};
    int64_t t0 = pt_msg_now_ns();
    int removed = 0;
    int rc = commit_apart(s, dir, n, &removed, &err);
    double commit_ms = (double)(pt_msg_now_ns() - t0) / 1e6;
    if (rc < 0) {
        /* A checkpoint that cannot be committed stops the run (it would go
         * on with nothing to resume from), and its half-written folder goes:
         * only committed steps stay in the checkpoint folder. */
        char text[PT_ERROR_MAX + 64];
        snprintf(text, sizeof text, "checkpoint step %lld: %s", (long long)n, err.msg);
        if (s->rec)
            pt_record_write_checkpoint_failed(s->rec, n, dir, text);
        int gone = removed || remove_step_dir(dir);
        /* what is on disk, as it is: latest still names the last commit */
        if (!s->fatal[0])
            snprintf(s->fatal, sizeof s->fatal, "%.400s (%s)", text,
                     gone ? "the step folder was removed"
                          : "the step folder is left on disk, not named by latest: remove it");
        session_note(s, PT_NOTE_ERROR, -1, NULL, n, text);
        return;
    }
    remove_uncommitted(s, s->committed, n);
    s->committed = n;
    if (s->rec)
        pt_record_write_checkpoint(s->rec, n, dir, commit_ms);
    if (s->kept_n == PT_SESSION_CKPT_KEEP) {
        char old[PT_MSG_PATH_MAX + 32];
        snprintf(old, sizeof old, "%s/step-%lld", s->ckpt_dir, (long long)s->kept[0]);
        remove_step_dir(old);
        memmove(s->kept, s->kept + 1, (PT_SESSION_CKPT_KEEP - 1) * sizeof s->kept[0]);
        s->kept_n--;
    }
    s->kept[s->kept_n++] = n;
    session_note(s, PT_NOTE_CHECKPOINT, -1, NULL, n, NULL);
}
