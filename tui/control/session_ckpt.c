/* The session's checkpoints: a step is committed once every worker wrote
 * its layers, older step folders go, and a record or commit that cannot be
 * written stops the run. */
#include "tui/control/session_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "protocol/ckpt_index.h"

/* ---- checkpoints -------------------------------------------------------------- */

/* Removes a step folder (plain files only, as agents write them). */
static void remove_step_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[PT_MSG_PATH_MAX + 300];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
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
    int rc = s->commit(s->commit_user, dir, n, s->stage_count, &err);
    if (rc == 0)
        rc = pt_ckpt_latest_save(s->ckpt_dir, n, &err);
    double commit_ms = (double)(pt_msg_now_ns() - t0) / 1e6;
    if (rc < 0) {
        /* A checkpoint that cannot be committed stops the run (it would go
         * on with nothing to resume from), and its half-written folder goes:
         * only committed steps stay in the checkpoint folder. */
        char text[PT_ERROR_MAX + 64];
        snprintf(text, sizeof text, "checkpoint step %lld: %s", (long long)n, err.msg);
        if (s->rec)
            pt_record_write_checkpoint_failed(s->rec, n, dir, text);
        remove_step_dir(dir);
        if (!s->fatal[0])
            snprintf(s->fatal, sizeof s->fatal, "%.440s (the step folder was removed)", text);
        session_note(s, PT_NOTE_ERROR, -1, NULL, n, text);
        return;
    }
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
