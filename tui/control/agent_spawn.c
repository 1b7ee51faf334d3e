#include "tui/control/agent_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define SELF_PATH_CAP 4096

int pt_agent_binary(char *bin, size_t cap, pt_error *err)
{
    char dir[SELF_PATH_CAP];
    if (pt_exe_dir(dir, sizeof dir) < 0)
        return pt_error_set(err, PT_EIO, "cannot find this program's folder (/proc/self/exe)");
    if ((size_t)snprintf(bin, cap, "%s/%s", dir, PT_AGENT_BIN) >= cap)
        return pt_error_set(err, PT_EIO, "%s/%s: path too long", dir, PT_AGENT_BIN);
    if (access(bin, X_OK) != 0)
        return pt_error_set(err, PT_ENOTFOUND, "%s: %s (build the pipetop-agent target)", bin,
                            strerror(errno));
    return 0;
}

int pt_agent_threads(int agents)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return agents > 0 && cpus > agents ? (int)(cpus / agents) : 1;
}

/* In the child: never returns. */
static void exec_agent(const char *bin, const pt_session *s, const char *name, const char *dev,
                       const char *th, const char *log_path, const pt_agent_spawn_extra *x)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) {
        dup2(nul, STDIN_FILENO);
        close(nul);
    }
    char *argv[26 + PT_AGENT_SPAWN_MORE_MAX + 1];
    int k = 0;
    argv[k++] = (char *)bin;
    argv[k++] = "--console";
    argv[k++] = (char *)pt_session_control_endpoint(s);
    argv[k++] = "--telemetry";
    argv[k++] = (char *)pt_session_telemetry_endpoint(s);
    argv[k++] = "--device";
    if (x && x->compute) {
        argv[k++] = (char *)x->compute;
        argv[k++] = "--index";
    }
    argv[k++] = (char *)dev;
    argv[k++] = "--name";
    argv[k++] = (char *)name;
    if (x && x->key_path) {
        argv[k++] = "--key";
        argv[k++] = (char *)x->key_path;
        argv[k++] = "--server-key";
        argv[k++] = (char *)pt_session_public_key(s);
    }
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        argv[k++] = "--threads";
        argv[k++] = (char *)th;
    }
    char comm[32];
    if (x && x->checkpoint_root) {
        argv[k++] = "--checkpoint-root";
        argv[k++] = (char *)x->checkpoint_root;
    }
    if (x && x->comm_timeout_ms > 0) {
        snprintf(comm, sizeof comm, "%d", x->comm_timeout_ms);
        argv[k++] = "--comm-timeout-ms";
        argv[k++] = comm;
    }
    if (x && x->data_bind) {
        argv[k++] = "--data-bind";
        argv[k++] = (char *)x->data_bind;
    }
    if (x && x->observe) {
        argv[k++] = "--observe";
        argv[k++] = (char *)x->observe;
    }
    for (int j = 0; x && x->more && x->more[j] && j < PT_AGENT_SPAWN_MORE_MAX; j++)
        argv[k++] = (char *)x->more[j];
    argv[k] = NULL;
    execv(bin, argv);
    _exit(127);
}

int pt_agent_spawn(const char *bin, const pt_session *s, const char *name, int device, int threads,
                   const char *log_path, const pt_agent_spawn_extra *x, pid_t *pid, pt_error *err)
{
    char dev[16], th[16];
    snprintf(dev, sizeof dev, "%d", device);
    snprintf(th, sizeof th, "%d", threads);
    pid_t p = fork();
    if (p < 0)
        return pt_error_set(err, PT_EIO, "fork: %s", strerror(errno));
    if (p == 0)
        exec_agent(bin, s, name, dev, th, log_path, x);
    *pid = p;
    return 0;
}
