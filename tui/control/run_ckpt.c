/* Run checkpoints: the console's commit, --resume lookup and import. See
 * tui/control/run_ckpt.h. */
#include "tui/control/run_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "runtime/checkpoint.h"
#include "tui/control/session.h"

#define MANIFEST_FMT  "%s/stage-%d.json" /* agent/agent.h PT_AGENT_MANIFEST_FMT */
#define PATH_CAP      4096
#define COPY_BUF_SIZE 65536

int pt_run_ckpt_commit(void *user, const char *step_dir, int64_t step, int stage_count,
                       pt_error *err)
{
    (void)user;
    pt_ckpt_index **ix = calloc((size_t)stage_count, sizeof *ix);
    pt_ckpt_layer *all = NULL;
    int total = 0, rc = 0;
    if (!ix)
        return pt_error_set(err, PT_ENOMEM, "checkpoint commit: out of memory");
    for (int s = 0; s < stage_count && rc == 0; s++) {
        char path[PATH_CAP];
        snprintf(path, sizeof path, MANIFEST_FMT, step_dir, s);
        rc = pt_ckpt_index_read(path, &ix[s], err);
        if (rc == 0 && ix[s]->step != step)
            rc = pt_error_set(err, PT_EINVAL, "%s: step %lld, but step %lld is being committed",
                              path, (long long)ix[s]->step, (long long)step);
        if (rc == 0)
            total += ix[s]->layer_count;
    }
    if (rc == 0 && !(all = calloc((size_t)total + 1, sizeof *all)))
        rc = pt_error_set(err, PT_ENOMEM, "checkpoint commit: out of memory");
    int k = 0;
    for (int s = 0; s < stage_count && rc == 0; s++)
        for (int j = 0; j < ix[s]->layer_count; j++)
            all[k++] = ix[s]->layers[j]; /* shallow: tensors stay the manifests' */
    if (rc == 0)
        rc = pt_ckpt_commit(step_dir, ix[0], all, total, err);
    free(all);
    for (int s = 0; s < stage_count; s++)
        pt_ckpt_index_free(&ix[s]);
    free(ix);
    return rc;
}

int pt_run_ckpt_find(const char *path, char *root, int cap, int64_t *step, pt_error *err)
{
    char probe[PATH_CAP];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/%s", path, PT_SESSION_LATEST_FILE);
    int rc;
    if (stat(probe, &st) == 0) {
        if ((rc = pt_ckpt_latest_load(path, step, err)) < 0)
            return rc;
        snprintf(root, (size_t)cap, "%s", path);
    } else {
        snprintf(probe, sizeof probe, "%s/%s", path, PT_CKPT_INDEX_FILE);
        if (stat(probe, &st) != 0)
            return pt_error_set(err, PT_ENOTFOUND,
                                "--resume %s: neither %s nor %s is there: not a checkpoint folder",
                                path, PT_SESSION_LATEST_FILE, PT_CKPT_INDEX_FILE);
        pt_ckpt_index *ix = NULL;
        if ((rc = pt_ckpt_index_load(path, &ix, err)) < 0)
            return rc;
        *step = ix->step;
        pt_ckpt_index_free(&ix);
        /* a step folder must be called step-N inside its run's folder */
        char copy[PATH_CAP];
        snprintf(copy, sizeof copy, "%s", path);
        size_t n = strlen(copy);
        while (n > 1 && copy[n - 1] == '/')
            copy[--n] = '\0';
        char *slash = strrchr(copy, '/');
        const char *base = slash ? slash + 1 : copy;
        char want[64];
        snprintf(want, sizeof want, "step-%lld", (long long)*step);
        if (strcmp(base, want) != 0)
            return pt_error_set(err, PT_EINVAL,
                                "--resume %s: a step folder must be named %s (its index is at "
                                "step %lld)",
                                path, want, (long long)*step);
        if (slash)
            *slash = '\0';
        snprintf(root, (size_t)cap, "%s", slash ? (copy[0] ? copy : "/") : ".");
    }
    char dir[PATH_CAP];
    snprintf(dir, sizeof dir, "%s/step-%lld", root, (long long)*step);
    pt_ckpt_index *ix = NULL;
    if ((rc = pt_ckpt_index_load(dir, &ix, err)) < 0)
        return rc;
    if (ix->step != *step)
        rc = pt_error_set(err, PT_EINVAL, "%s/%s: step %lld, but %s says %lld", dir,
                          PT_CKPT_INDEX_FILE, (long long)ix->step, PT_SESSION_LATEST_FILE,
                          (long long)*step);
    pt_ckpt_index_free(&ix);
    return rc;
}

static int copy_file(const char *from, const char *to, pt_error *err)
{
    int in = open(from, O_RDONLY), out = -1, rc = 0;
    if (in >= 0)
        out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) {
        rc = pt_error_set(err, PT_EIO, "copy %s to %s: %s", from, to, strerror(errno));
    } else {
        char *buf = malloc(COPY_BUF_SIZE);
        ssize_t n = 0;
        while (buf && (n = read(in, buf, COPY_BUF_SIZE)) > 0)
            if (write(out, buf, (size_t)n) != n) {
                n = -1;
                break;
            }
        if (!buf || n < 0 || fsync(out) != 0)
            rc = pt_error_set(err, PT_EIO, "copy %s to %s: %s", from, to, strerror(errno));
        free(buf);
    }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

int pt_run_ckpt_import(const char *src_root, const char *dst_root, int64_t step, pt_error *err)
{
    char a[PATH_CAP], b[PATH_CAP], ra[PATH_MAX], rb[PATH_MAX];
    snprintf(a, sizeof a, "%s/step-%lld", src_root, (long long)step);
    snprintf(b, sizeof b, "%s/step-%lld", dst_root, (long long)step);
    int rc = pt_mkdir_p(dst_root, err);
    if (rc < 0)
        return rc;
    if (realpath(src_root, ra) && realpath(dst_root, rb) && !strcmp(ra, rb))
        return 0;
    if ((rc = pt_mkdir_p(b, err)) < 0)
        return rc;
    DIR *d = opendir(a);
    if (!d)
        return pt_error_set(err, PT_EIO, "%s: %s", a, strerror(errno));
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char from[PATH_CAP + 256], to[PATH_CAP + 256];
        snprintf(from, sizeof from, "%s/%s", a, de->d_name);
        snprintf(to, sizeof to, "%s/%s", b, de->d_name);
        unlink(to);
        if (link(from, to) != 0)
            rc = copy_file(from, to, err);
    }
    closedir(d);
    if (rc == 0)
        rc = pt_ckpt_latest_save(dst_root, step, err);
    return rc;
}

/* "step-N" with N a plain decimal: 1 and *n, else 0. */
static int step_folder_name(const char *name, int64_t *n)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5])
        return 0;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (*p - '0');
    }
    *n = v;
    return 1;
}

static void remove_plain_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    rmdir(dir);
}

int pt_run_ckpt_sweep(const char *checkpoint_dir)
{
    int64_t latest = -1;
    if (pt_ckpt_latest_load(checkpoint_dir, &latest, NULL) < 0)
        latest = -1;
    DIR *d = opendir(checkpoint_dir);
    if (!d)
        return 0;
    /* names first, removal after: readdir over a folder being changed may
     * skip entries */
    int64_t *gone = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        if (!step_folder_name(de->d_name, &step) || step <= latest)
            continue;
        if (n == cap) {
            int nc = cap ? 2 * cap : 8;
            int64_t *g = realloc(gone, (size_t)nc * sizeof *g);
            if (!g)
                break;
            gone = g;
            cap = nc;
        }
        gone[n++] = step;
    }
    closedir(d);
    for (int k = 0; k < n; k++) {
        char path[PATH_CAP + 32];
        snprintf(path, sizeof path, "%s/step-%lld", checkpoint_dir, (long long)gone[k]);
        remove_plain_dir(path);
    }
    free(gone);
    return n;
}

int pt_run_ckpt_check_target(const char *dst_root, int64_t step, pt_error *err)
{
    int64_t latest = -1;
    pt_error e = {0};
    int rc = pt_ckpt_latest_load(dst_root, &latest, &e);
    if (rc == PT_ENOTFOUND)
        return 0;
    if (rc < 0)
        return pt_error_set(err, rc, "%s", e.msg);
    if (latest > step)
        return pt_error_set(err, PT_ESTATE,
                            "%s/%s names step %lld, newer than the resume step %lld: a run "
                            "resumed there would move it back; give another --checkpoint-dir",
                            dst_root, PT_CKPT_LATEST_FILE, (long long)latest, (long long)step);
    return 0;
}
