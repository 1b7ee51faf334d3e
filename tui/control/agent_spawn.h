/* Starting local pipetop-agent processes: the run controller's spawn
 * (tui/control/run.h), which `pipetop run` and the console's live source both use;
 * `pipetop run` also sizes its profiling child with pt_agent_threads. */
#ifndef PT_TUI_AGENT_SPAWN_H
#define PT_TUI_AGENT_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#include "protocol/datadir.h" /* pt_exe_dir */
#include "protocol/error.h"
#include "tui/control/session.h"

#define PT_AGENT_BIN "pipetop-agent"

/* The path of pipetop-agent next to this program into bin (the build tree
 * and an install's bin/ both hold the two programs side by side); 0, or PT_EIO /
 * PT_ENOTFOUND with err naming the path and the reason. */
int pt_agent_binary(char *bin, size_t cap, pt_error *err);

/* OpenBLAS threads for each of `agents` agents sharing this machine's CPUs
 * (CPUs / agents, at least 1). */
int pt_agent_threads(int agents);

/* What else a spawned agent is given. */
typedef struct pt_agent_spawn_extra {
    const char *key_path;        /* its CURVE key pair (--key, with the session's public key as
                                    --server-key); NULL: plain */
    const char *checkpoint_root; /* --checkpoint-root; NULL: not passed */
    int comm_timeout_ms;         /* --comm-timeout-ms; 0: not passed */
    const char *data_bind;       /* --data-bind (an ipc:// endpoint); NULL: not passed */
    const char *compute;         /* where it computes, "cuda:N[:PREC]" (topology's device spec):
                                    passed as --device with the index as --index; NULL: --device
                                    INDEX alone (the CPU) */
    const char *observe;         /* --observe DIR (relay a PyTorch run); NULL: not passed */
    const char *const *more;     /* further arguments, NULL-terminated (at most
                                    PT_AGENT_SPAWN_MORE_MAX); NULL: none */
} pt_agent_spawn_extra;

#define PT_AGENT_SPAWN_MORE_MAX 16

/* Forks and execs one agent (bin) connected to the session's control and
 * telemetry endpoints, as device `device` under `name`, with stdout/stderr
 * to log_path and stdin from /dev/null, and the options of x (NULL: none).
 * The agent gets its own process group (the terminal's ^C reaches only the
 * console, which stops agents in order) and SIGTERM when the console dies.
 * `threads` is passed as --threads unless OPENBLAS_NUM_THREADS is set. Flush
 * stdio before calling. On success *pid is the child; on failure returns
 * PT_EIO (fork failed) with err set. */
int pt_agent_spawn(const char *bin, const pt_session *s, const char *name, int device, int threads,
                   const char *log_path, const pt_agent_spawn_extra *x, pid_t *pid, pt_error *err);

#endif
