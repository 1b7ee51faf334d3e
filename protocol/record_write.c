/* Run records written (see protocol/record.h; docs/formats.md, "Run
 * record"): frames verbatim behind a small header, the console's own entries
 * checked by the reader's rules before they are written. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/record.h"
#include "protocol/record_internal.h"

/* ---- the writer -------------------------------------------------------------------- */

struct pt_record_writer {
    FILE *f;
    int started;      /* the session line is out */
    int failed_errno; /* first write error (errno), 0 none: sticky, see pt_record_writer_failed */
    char path[PT_MSG_PATH_MAX];
    pt_record_folder *fold; /* NULL: every frame verbatim */
    z_stream *z;            /* NULL: plain text; else a gzip stream (docs/formats.md) */
    int z_pending;          /* bytes went into z since its last flush */
    unsigned char zbuf[64 << 10];
};

/* Deflates what z holds with flush (Z_NO_FLUSH, Z_SYNC_FLUSH, Z_FINISH) and
 * writes the output. 0 or -1 (errno set by the write). */
static int z_drain(pt_record_writer *w, int flush)
{
    do {
        w->z->next_out = w->zbuf;
        w->z->avail_out = sizeof w->zbuf;
        int zr = deflate(w->z, flush);
        if (zr == Z_STREAM_ERROR)
            return -1;
        size_t n = sizeof w->zbuf - w->z->avail_out;
        if (n && fwrite(w->zbuf, 1, n, w->f) != n)
            return -1;
    } while (w->z->avail_out == 0);
    return 0;
}

/* Appends data[0..len) to the record, through the compressor when there is
 * one. 0 or -1 (errno set). */
static int out(pt_record_writer *w, const void *data, size_t len)
{
    if (!w->z)
        return fwrite(data, 1, len, w->f) == len ? 0 : -1;
    w->z->next_in = (Bytef *)(uintptr_t)data;
    w->z->avail_in = (uInt)len;
    w->z_pending = 1;
    int rc = z_drain(w, Z_NO_FLUSH);
    w->z->avail_in = 0;
    return rc;
}

static int outs(pt_record_writer *w, const char *s)
{
    return out(w, s, strlen(s));
}

/* Remembers the first failed write. A record cut in the middle must not
 * take more lines after the cut: a reader would take them for whole. */
static int io_failed(pt_record_writer *w)
{
    if (!w->failed_errno)
        w->failed_errno = errno ? errno : EIO;
    return PT_EIO;
}

int pt_record_writer_failed(const pt_record_writer *w, pt_error *err)
{
    if (!w || !w->failed_errno)
        return 0;
    pt_error_set(err, PT_EIO, "run record %s: write failed: %s", w->path,
                 strerror(w->failed_errno));
    return 1;
}

/* Checks a console line by the reader's rules, then appends it. */
int pt_record_internal_put_line(pt_record_writer *w, const char *text)
{
    if (pt_record_internal_check(text, strlen(text), w->started) < 0)
        return PT_EINVAL;
    if (w->failed_errno)
        return PT_EIO;
    errno = 0;
    if (outs(w, text) < 0 || out(w, "\n", 1) < 0)
        return io_failed(w);
    w->started = 1;
    return 0;
}

static cJSON *line_begin(const char *kind)
{
    cJSON *o = cJSON_CreateObject();
    if (o && (!pt_jr_add_number(o, "t", (double)pt_msg_now_ns()) ||
              !cJSON_AddStringToObject(o, "kind", kind))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Writes o (deleted here) when ok, which callers clear when an add failed. */
static int line_end(pt_record_writer *w, cJSON *o, int ok)
{
    char *text = o && ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return PT_ENOMEM;
    int rc = pt_record_internal_put_line(w, text);
    free(text);
    return rc;
}

static int add_str(cJSON *o, const char *key, const char *s)
{
    return (s ? cJSON_AddStringToObject(o, key, s) : cJSON_AddNullToObject(o, key)) != NULL;
}

int pt_record_writer_open(const char *path, const pt_record_session *session,
                          pt_record_writer **out, pt_error *err)
{
    if (!out || !path || !session)
        return pt_error_set(err, PT_EINVAL, "run record: path, session and out needed");
    *out = NULL;
    char dir[PT_MSG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    int rc;
    if (slash && slash != dir) {
        *slash = '\0';
        if ((rc = pt_mkdir_p(dir, err)) < 0)
            return rc;
    }
    pt_record_writer *w = calloc(1, sizeof *w);
    if (!w)
        return pt_error_set(err, PT_ENOMEM, "run record %s: out of memory", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    if (!(w->f = fopen(path, "w"))) {
        free(w);
        return pt_error_set(err, PT_EIO, "run record %s: %s", path, strerror(errno));
    }
    const char *gz = getenv("PT_RECORD_COMPRESS");
    if (gz && !strcmp(gz, "1")) {
        /* gzip (window 15 + 16), level 6: a record compresses about 10 times */
        if (!(w->z = calloc(1, sizeof *w->z)) ||
            deflateInit2(w->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free(w->z);
            w->z = NULL;
            pt_record_writer_close(&w);
            return pt_error_set(err, PT_ENOMEM, "run record %s: out of memory", path);
        }
    }
    cJSON *o = line_begin("session");
    int ok = o && pt_jr_add_number(o, "v", PT_RECORD_VERSION) &&
             pt_jr_add_number(o, "unix_s", (double)time(NULL)) &&
             add_str(o, "control", session->control) &&
             add_str(o, "telemetry", session->telemetry) &&
             pt_jr_add_number(o, "heartbeat_ms", session->heartbeat_ms) &&
             pt_jr_add_number(o, "missed_heartbeats", session->missed_heartbeats);
    if ((rc = line_end(w, o, ok)) < 0 || (rc = pt_record_flush(w)) < 0) {
        int e = w->failed_errno;
        pt_record_writer_close(&w);
        return pt_error_set(err, rc, "run record %s: cannot write the session line (%s)", path,
                            e ? strerror(e) : pt_strerror(rc));
    }
    const char *env = getenv("PT_RECORD_FOLD");
    if ((rc = pt_record_writer_set_fold(w, NULL, env && !strcmp(env, "0"))) < 0) {
        pt_record_writer_close(&w);
        return pt_error_set(err, rc, "run record %s: out of memory", path);
    }
    *out = w;
    return 0;
}

int pt_record_writer_set_fold(pt_record_writer *w, const pt_record_fold_opts *opts, int off)
{
    if (!w)
        return PT_EINVAL;
    int rc = w->fold ? pt_record_folder_end(w, w->fold) : 0;
    pt_record_folder_free(&w->fold);
    if (off)
        return rc;
    const pt_record_fold_opts def = {PT_RECORD_FOLD_HEAD, PT_RECORD_FOLD_TAIL, PT_RECORD_FOLD_EVERY,
                                     PT_RECORD_FOLD_HEAD_BYTES, PT_RECORD_FOLD_TAIL_BYTES};
    int r = pt_record_folder_new(opts ? opts : &def, &w->fold);
    return rc < 0 ? rc : r;
}

void pt_record_writer_close(pt_record_writer **w_p)
{
    if (!w_p || !*w_p)
        return;
    pt_record_writer *w = *w_p;
    if (w->fold && w->f)
        pt_record_folder_end(w, w->fold);
    pt_record_folder_free(&w->fold);
    if (w->z) {
        if (w->f && !w->failed_errno)
            z_drain(w, Z_FINISH);
        deflateEnd(w->z);
        free(w->z);
    }
    if (w->f)
        fclose(w->f);
    free(w);
    *w_p = NULL;
}

int pt_record_flush(pt_record_writer *w)
{
    if (!w)
        return 0;
    if (w->failed_errno)
        return PT_EIO;
    errno = 0;
    if (w->z && w->z_pending) { /* a sync flush ends the deflate block: all of it reads back */
        if (z_drain(w, Z_SYNC_FLUSH) < 0)
            return io_failed(w);
        w->z_pending = 0;
    }
    return fflush(w->f) == 0 ? 0 : io_failed(w);
}

int pt_record_write_frame(pt_record_writer *w, pt_record_line_kind kind, const char *channel,
                          int64_t offset_ns, const char *data, size_t len)
{
    if (!w || !data || (kind != PT_RECORD_RECV && kind != PT_RECORD_SENT) ||
        !pt_record_internal_channel_ok(channel))
        return PT_EINVAL;
    if (w->failed_errno)
        return PT_EIO;
    if (w->fold && kind == PT_RECORD_RECV && !strcmp(channel, "telemetry")) {
        int rc = pt_record_folder_frame(w, w->fold, offset_ns, data, len, NULL);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    return pt_record_internal_put_frame(w, kind, channel, offset_ns, data, len, 0);
}

int pt_record_write_telemetry(pt_record_writer *w, int64_t offset_ns, const char *data, size_t len,
                              const pt_msg *decoded)
{
    if (!w || !data || !decoded)
        return PT_EINVAL;
    if (w->failed_errno)
        return PT_EIO;
    if (w->fold) {
        int rc = pt_record_folder_frame(w, w->fold, offset_ns, data, len, decoded);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    return pt_record_internal_put_frame(w, PT_RECORD_RECV, "telemetry", offset_ns, data, len, 0);
}

int pt_record_internal_put_frame(pt_record_writer *w, pt_record_line_kind kind, const char *channel,
                                 int64_t offset_ns, const char *data, size_t len, int tail)
{
    if (w->failed_errno)
        return PT_EIO;
    errno = 0;
    char head[256];
    int n = snprintf(head, sizeof head,
                     "{\"t\":%lld,\"kind\":\"%s\",\"channel\":\"%s\",\"offset_ns\":%lld,"
                     "%s\"len\":%zu,",
                     (long long)pt_msg_now_ns(), pt_record_kind_name(kind), channel,
                     (long long)offset_ns, tail ? "\"tail\":1," : "", len);
    if (n < 0 || (size_t)n >= sizeof head || out(w, head, (size_t)n) < 0)
        return io_failed(w);
    if (!memchr(data, '\n', len) && !memchr(data, '\r', len)) {
        /* the common case: the frame, byte for byte, as the last member */
        if (outs(w, "\"msg\":") < 0 || out(w, data, len) < 0 || outs(w, "}\n") < 0)
            return io_failed(w);
        return 0;
    }
    /* a line break inside would split the line: the same bytes as a JSON string */
    char *copy = malloc(len + 1);
    cJSON *s = copy ? (memcpy(copy, data, len), copy[len] = '\0', cJSON_CreateString(copy)) : NULL;
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    int rc = text ? 0 : PT_ENOMEM;
    if (text && (outs(w, "\"frame\":") < 0 || outs(w, text) < 0 || outs(w, "}\n") < 0))
        rc = io_failed(w);
    free(text);
    cJSON_Delete(s);
    free(copy);
    return rc;
}

/* Adds the JSON text `text` (an object) as member key; 0 on failure. */
static int add_json(cJSON *o, const char *key, char *text)
{
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j)
        return 0;
    if (!cJSON_AddItemToObject(o, key, j)) {
        cJSON_Delete(j);
        return 0;
    }
    return 1;
}

int pt_record_write_plan(pt_record_writer *w, const pt_record_plan *p)
{
    if (!w || !p || !p->plan || !p->model || (p->worker_count > 0 && !p->workers))
        return PT_EINVAL;
    int frc = w->fold ? pt_record_folder_plan(w, w->fold, p->gen, p->resume_step, p->plan) : 0;
    if (frc < 0)
        return frc;
    cJSON *o = line_begin("plan");
    int ok = o && pt_jr_add_number(o, "gen", (double)p->gen) &&
             add_json(o, "plan", pt_plan_to_json(p->plan)) &&
             add_json(o, "model", pt_model_spec_to_json(p->model)) && add_str(o, "data", p->data) &&
             pt_jr_add_number(o, "seed", (double)p->seed) &&
             add_str(o, "checkpoint_dir", p->checkpoint_dir ? p->checkpoint_dir : "") &&
             pt_jr_add_number(o, "checkpoint_every", (double)p->checkpoint_every) &&
             pt_jr_add_number(o, "resume_step", (double)p->resume_step) &&
             (!w->fold || pt_jr_add_number(o, "stage_fold_min", PT_RECORD_STAGE_FOLD_MIN));
    cJSON *arr = ok ? cJSON_AddArrayToObject(o, "workers") : NULL;
    ok = ok && arr;
    for (int i = 0; ok && i < p->worker_count; i++) {
        const pt_record_worker *wk = &p->workers[i];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(arr, x) && pt_jr_add_number(x, "worker", wk->worker) &&
             add_str(x, "agent", wk->agent) && pt_jr_add_number(x, "stage", wk->stage) &&
             pt_jr_add_number(x, "replica", wk->replica) &&
             pt_jr_add_number(x, "pid", (double)wk->pid);
    }
    int rc = line_end(w, o, ok);
    return rc < 0 ? rc : pt_record_flush(w);
}

int pt_record_write_agent(pt_record_writer *w, const char *agent, const char *state, int64_t step)
{
    if (!w)
        return PT_EINVAL;
    cJSON *o = line_begin("agent");
    int ok = o && add_str(o, "agent", agent) && add_str(o, "state", state) &&
             pt_jr_add_number(o, "step", (double)step);
    return line_end(w, o, ok);
}

int pt_record_write_dead(pt_record_writer *w, const char *agent, const char *reason)
{
    if (!w)
        return PT_EINVAL;
    cJSON *o = line_begin("dead");
    int ok = o && add_str(o, "agent", agent) && add_str(o, "reason", reason);
    int rc = line_end(w, o, ok);
    return rc < 0 ? rc : pt_record_flush(w);
}

int pt_record_write_rejected(pt_record_writer *w, const char *channel, const char *agent,
                             const char *reason)
{
    if (!w)
        return PT_EINVAL;
    cJSON *o = line_begin("rejected");
    int ok = o && add_str(o, "channel", channel) && add_str(o, "agent", agent) &&
             add_str(o, "reason", reason);
    return line_end(w, o, ok);
}

int pt_record_write_checkpoint(pt_record_writer *w, int64_t step, const char *dir, double commit_ms)
{
    if (!w)
        return PT_EINVAL;
    cJSON *o = line_begin("checkpoint");
    int ok = o && pt_jr_add_number(o, "step", (double)step) && add_str(o, "dir", dir) &&
             pt_jr_add_number(o, "commit_ms", commit_ms);
    int rc = line_end(w, o, ok);
    return rc < 0 ? rc : pt_record_flush(w);
}

int pt_record_write_checkpoint_failed(pt_record_writer *w, int64_t step, const char *dir,
                                      const char *reason)
{
    if (!w)
        return PT_EINVAL;
    cJSON *o = line_begin("checkpoint_failed");
    int ok = o && pt_jr_add_number(o, "step", (double)step) && add_str(o, "dir", dir) &&
             add_str(o, "reason", reason);
    return line_end(w, o, ok);
}

int pt_record_write_json(pt_record_writer *w, const char *kind, const char *fields_json)
{
    if (!w || !kind)
        return PT_EINVAL;
    int k = pt_record_internal_kind(kind);
    if (k != PT_RECORD_SUMMARY && k != PT_RECORD_FAILED)
        return PT_EINVAL; /* the other kinds have their own writers */
    cJSON *fields = fields_json ? cJSON_Parse(fields_json) : NULL;
    if (fields_json && !cJSON_IsObject(fields)) {
        cJSON_Delete(fields);
        return PT_EINVAL;
    }
    cJSON *o = line_begin(kind);
    int ok = o != NULL;
    while (ok && fields && fields->child) {
        cJSON *item = cJSON_DetachItemViaPointer(fields, fields->child);
        if (!strcmp(item->string, "t") || !strcmp(item->string, "kind"))
            cJSON_Delete(item); /* the line's own */
        else
            cJSON_AddItemToObject(o, item->string, item);
    }
    cJSON_Delete(fields);
    int rc = line_end(w, o, ok);
    return rc < 0 ? rc : pt_record_flush(w);
}
