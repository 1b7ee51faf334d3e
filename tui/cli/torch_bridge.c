/* The PyTorch bridge from pipetop's side (see torch_bridge.h). */
#include "tui/cli/torch_bridge.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/datadir.h"

#define PATH_CAP  4096
#define ARGS_MAX  64
#define EXIT_EXEC 127 /* the child could not run the interpreter */

const char *pt_torch_python(const char *python)
{
    if (python && python[0])
        return python;
    const char *env = getenv(PT_TORCH_PYTHON_ENV);
    return env && env[0] ? env : PT_TORCH_PYTHON_DEFAULT;
}

int pt_torch_bridge_dir(char *out, size_t cap, pt_error *err)
{
    int rc = pt_datadir_folder(PT_TORCH_BRIDGE_DIR, out, cap, err);
    if (rc < 0)
        return rc;
    char pkg[PATH_CAP + 32];
    struct stat st;
    snprintf(pkg, sizeof pkg, "%s/pipetop_torch/__init__.py", out);
    if (stat(pkg, &st) != 0)
        return pt_error_set(err, PT_ENOTFOUND, "%s: the PyTorch bridge is not installed there",
                            out);
    return 0;
}

/* In the child: never returns. */
static void exec_python(const char *python, const char *bridge, const char *module,
                        const char *const *args)
{
    const char *old = getenv("PYTHONPATH");
    char path[2 * PATH_CAP];
    snprintf(path, sizeof path, "%s%s%s", bridge, old && old[0] ? ":" : "", old ? old : "");
    setenv("PYTHONPATH", path, 1);
    char *argv[ARGS_MAX + 4];
    int k = 0;
    argv[k++] = (char *)python;
    argv[k++] = "-m";
    argv[k++] = (char *)module;
    for (int i = 0; args && args[i] && k < ARGS_MAX + 3; i++)
        argv[k++] = (char *)args[i];
    argv[k] = NULL;
    execv(python, argv);
    fprintf(stderr, "%s: %s\n", python, strerror(errno));
    _exit(EXIT_EXEC);
}

int pt_torch_run(const char *python, const char *module, const char *const *args, pt_error *err)
{
    char bridge[PATH_CAP];
    int rc = pt_torch_bridge_dir(bridge, sizeof bridge, err);
    if (rc < 0)
        return rc;
    python = pt_torch_python(python);
    if (access(python, X_OK) != 0)
        return pt_error_set(err, PT_ENOTFOUND,
                            "%s: %s (install python3-torch, or name an interpreter with torch in "
                            "$" PT_TORCH_PYTHON_ENV ")",
                            python, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return pt_error_set(err, PT_EIO, "fork: %s", strerror(errno));
    if (pid == 0)
        exec_python(python, bridge, module, args);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return pt_error_set(err, PT_EIO, "waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        return pt_error_set(err, PT_EIO, "%s -m %s: killed by signal %d", python, module,
                            WTERMSIG(status));
    return pt_error_set(err, PT_EIO, "%s -m %s: exit status %d%s", python, module,
                        WEXITSTATUS(status),
                        WEXITSTATUS(status) == EXIT_EXEC ? " (cannot run the interpreter)" : "");
}

static cJSON *standin_layer(const char *type, const char *name)
{
    cJSON *l = cJSON_CreateObject();
    if (l &&
        (!cJSON_AddStringToObject(l, "type", type) || !cJSON_AddStringToObject(l, "name", name))) {
        cJSON_Delete(l);
        return NULL;
    }
    return l;
}

int pt_torch_standin_model(const pt_profile *profile, pt_model_spec **out, pt_error *err)
{
    *out = NULL;
    cJSON *root = cJSON_CreateObject(), *input = NULL, *layers = NULL;
    int ok = root && cJSON_AddNumberToObject(root, "v", 1) &&
             cJSON_AddStringToObject(root, "name", profile->model) &&
             (input = cJSON_AddArrayToObject(root, "input")) &&
             cJSON_AddItemToArray(input, cJSON_CreateNumber(2)) &&
             (layers = cJSON_AddArrayToObject(root, "layers"));
    for (int i = 0; ok && i < profile->layer_count; i++) {
        int last = i == profile->layer_count - 1;
        cJSON *l = standin_layer(last ? "softmax_xent" : "relu", profile->layers[i].name);
        ok = l && (!last || cJSON_AddNumberToObject(l, "classes", 2));
        if (l)
            cJSON_AddItemToArray(layers, l);
    }
    if (!ok) {
        cJSON_Delete(root);
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    }
    char src[PT_NAME_MAX + 32];
    snprintf(src, sizeof src, "the stand-in model of %s", profile->model);
    int rc = pt_model_spec_from_tree(root, src, out, err);
    cJSON_Delete(root);
    return rc;
}
