#include "protocol/datadir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set by CMakeLists.txt for this file only. */
#ifndef PT_DATA_FROM_BIN
#define PT_DATA_FROM_BIN "../share/pipetop"
#endif

#define DATADIR_PATH_CAP PT_DATADIR_PATH_MAX
/* A folder counts as a data folder when it holds this one. */
#define DATADIR_MARKER "models"

int pt_exe_dir(char *out, size_t cap)
{
    char self[DATADIR_PATH_CAP];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return PT_EIO;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return PT_EIO;
    *slash = '\0';
    return (size_t)snprintf(out, cap, "%s", self) < cap ? 0 : PT_EIO;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int holds_marker(const char *dir)
{
    char p[DATADIR_PATH_CAP];
    int n = snprintf(p, sizeof p, "%s/%s", dir, DATADIR_MARKER);
    return n > 0 && (size_t)n < sizeof p && is_dir(p);
}

/* The installed data folder next to the program, canonical, or 0 chars. */
static void installed_dir(char *out, size_t cap)
{
    char exe[DATADIR_PATH_CAP], guess[DATADIR_PATH_CAP], real[PATH_MAX];
    out[0] = '\0';
    if (pt_exe_dir(exe, sizeof exe) < 0)
        return;
    int n = snprintf(guess, sizeof guess, "%s/%s", exe, PT_DATA_FROM_BIN);
    if (n > 0 && (size_t)n < sizeof guess && holds_marker(guess) && realpath(guess, real) &&
        strlen(real) < cap)
        snprintf(out, cap, "%s", real);
}

int pt_exe_build_dir(char *out, size_t cap)
{
#ifdef PT_BUILD_DIR
    char exe[DATADIR_PATH_CAP], build[PATH_MAX];
    if (pt_exe_dir(exe, sizeof exe) < 0 || !realpath(PT_BUILD_DIR, build))
        return PT_ENOTFOUND;
    size_t n = strlen(build);
    if (strncmp(exe, build, n) != 0 || (exe[n] != '\0' && exe[n] != '/'))
        return PT_ENOTFOUND;
    return (size_t)snprintf(out, cap, "%s", build) < cap ? 0 : PT_ENOTFOUND;
#else
    (void)out, (void)cap;
    return PT_ENOTFOUND;
#endif
}

/* 1 when the running program lies inside the build tree it was built in. */
static int in_build_tree(void)
{
    char build[DATADIR_PATH_CAP];
    return pt_exe_build_dir(build, sizeof build) == 0;
}

int pt_datadir(char *out, size_t cap, pt_error *err)
{
    if (!out || !cap)
        return pt_error_set(err, PT_EINVAL, "data folder: no buffer");
    installed_dir(out, cap);
    if (out[0])
        return 0;
    const char *env = getenv(PT_DATADIR_ENV);
    if (env && *env) {
        if ((size_t)snprintf(out, cap, "%s", env) >= cap)
            return pt_error_set(err, PT_EINVAL, "$%s: path too long", PT_DATADIR_ENV);
        return 0;
    }
#ifdef PT_SOURCE_DIR
    if (in_build_tree() && (size_t)snprintf(out, cap, "%s", PT_SOURCE_DIR) < cap)
        return 0;
#endif
    out[0] = '\0';
    return pt_error_set(err, PT_ENOTFOUND,
                        "no data folder: <program folder>/%s does not hold %s/, $%s is unset, "
                        "and the program is not in its build tree",
                        PT_DATA_FROM_BIN, DATADIR_MARKER, PT_DATADIR_ENV);
}

int pt_datadir_folder(const char *folder, char *out, size_t cap, pt_error *err)
{
    char dir[DATADIR_PATH_CAP];
    int rc = pt_datadir(dir, sizeof dir, err);
    if (rc < 0)
        return rc;
    if ((size_t)snprintf(out, cap, "%s/%s", dir, folder) >= cap)
        return pt_error_set(err, PT_EINVAL, "%s/%s: path too long", dir, folder);
    return 0;
}

int pt_datadir_find(const char *folder, const char *name, const char *ext, char *out, size_t cap,
                    pt_error *err)
{
    if (!name || !*name || !out || !cap)
        return pt_error_set(err, PT_EINVAL, "%s: no name given", folder ? folder : "data");
    struct stat st;
    if (strchr(name, '/') || stat(name, &st) == 0) {
        if ((size_t)snprintf(out, cap, "%s", name) >= cap)
            return pt_error_set(err, PT_EINVAL, "%.200s: path too long", name);
        return 0;
    }
    char dir[DATADIR_PATH_CAP];
    pt_error derr = {0};
    if (pt_datadir_folder(folder, dir, sizeof dir, &derr) < 0)
        return pt_error_set(err, PT_ENOTFOUND, "%.64s: no such file, and %s", name, derr.msg);
    if ((size_t)snprintf(out, cap, "%s/%s%s", dir, name, ext ? ext : "") >= cap)
        return pt_error_set(err, PT_EINVAL, "%.64s: path too long", name);
    if (stat(out, &st) == 0)
        return 0;
    return pt_error_set(err, PT_ENOTFOUND, "%.64s: no such file, nor %.300s", name, out);
}

const char *pt_datadir_resolve(const char *folder, const char *name, const char *ext, char *buf,
                               size_t cap)
{
    return pt_datadir_find(folder, name, ext, buf, cap, NULL) == 0 ? buf : name;
}

int pt_datadir_lookup(const char *what, const char *folder, const char *env, const char *name,
                      char *out, size_t cap, pt_error *err)
{
    if (!name || !*name || !out || !cap)
        return pt_error_set(err, PT_EINVAL, "%s: no name given", what);
    struct stat st;
    if (stat(name, &st) == 0) {
        if ((size_t)snprintf(out, cap, "%s", name) >= cap)
            return pt_error_set(err, PT_EINVAL, "%.200s: path too long", name);
        return 0;
    }
    if (strchr(name, '/'))
        return pt_error_set(err, PT_ENOTFOUND, "%.200s: no such %s file", name, what);
    const char *dir = env ? getenv(env) : NULL;
    if (dir && *dir) {
        if ((size_t)snprintf(out, cap, "%s/%s.json", dir, name) >= cap)
            return pt_error_set(err, PT_EINVAL, "%.200s/%.64s.json: path too long", dir, name);
        if (stat(out, &st) == 0)
            return 0;
    }
    char builtin[DATADIR_PATH_CAP];
    pt_error derr = {0};
    if (pt_datadir_folder(folder, builtin, sizeof builtin, &derr) < 0)
        return pt_error_set(err, PT_ENOTFOUND,
                            "%s \"%.64s\": not found (looked for the file %.64s and "
                            "$%s/%.64s.json%s; %.300s)",
                            what, name, name, env, name, dir && *dir ? "" : " (unset)", derr.msg);
    if ((size_t)snprintf(out, cap, "%s/%s.json", builtin, name) >= cap)
        return pt_error_set(err, PT_EINVAL, "%.200s/%.64s.json: path too long", builtin, name);
    if (stat(out, &st) == 0)
        return 0;
    return pt_error_set(err, PT_ENOTFOUND,
                        "%s \"%.64s\": not found (looked for the file %.64s, "
                        "$%s/%.64s.json%s and %.200s/%.64s.json)",
                        what, name, name, env, name, dir && *dir ? "" : " (unset)", builtin, name);
}
