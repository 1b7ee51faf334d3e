/* The run controller: one headless coordinator of a distributed run, used by
 * `pipetop run` (which prints over it) and by the console's live source
 * (which feeds the store from it). No terminal code.
 *
 * It owns a session (tui/control/session.h) and, when asked, the local agent
 * processes (tui/control/agent_spawn.h), and does for both callers:
 * - the run folder (pt_run_dir_make) with its record run.ndjson and the
 *   agents' logs agent-<name>.log;
 * - spawning agents, or waiting for agents started elsewhere, until enough
 *   have registered;
 * - mapping a plan's workers onto agents (pt_run_map: the one policy);
 * - assign (a new generation), start, the two-round stop at one step,
 *   checkpoint commits (tui/control/run_ckpt.h), restart under a new plan resuming at
 *   the step the stop committed;
 * - reaping agent processes (an end nobody asked for marks the agent dead)
 *   and ending them (bye, a bounded wait, then SIGKILL).
 *
 * States (pt_run_state), moved by the calls and by pt_run_poll:
 *
 *   WAITING --enough agents--> READY --assign--> ASSIGNED --start--> TRAINING
 *   TRAINING --every worker idle at the target step--> FINISHED
 *   ASSIGNED|TRAINING|FINISHED --stop--> STOPPED --assign/restart--> ASSIGNED
 *   any --a worker dead, failed or gone / an agent ended unregistered--> FAILED
 *   any --pt_run_end--> ENDED
 *
 * Blocking calls take a timeout and return within it; while they wait they
 * poll the session, reap processes and ask the cancel hook. A controller is
 * used by one thread. */
#ifndef PT_TUI_RUN_H
#define PT_TUI_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/topology.h"
#include "tui/control/session.h"

/* Agents' time to leave after bye before they are killed. */
#define PT_RUN_EXIT_MS 5000
/* Folder that default run folders go under. */
#define PT_RUN_DIR_ROOT "runs"
/* Name of the run record inside a run folder. */
#define PT_RUN_RECORD_FILE "run.ndjson"
/* Default stall bound: how long one agent may be silent (a stopped process,
 * a host under swap) while the pipeline waits for it, before the run stops
 * naming it (pt_session_set_stall_ms). */
#define PT_RUN_STALL_MS 30000
/* The checkpoint folder as assigns name it to agents started with the run's
 * checkpoint folder as their --checkpoint-root: that root itself. */
#define PT_RUN_AGENT_CKPT_DIR "."

typedef enum pt_run_state {
    PT_RUN_WAITING,  /* fewer agents registered than the controller waits for */
    PT_RUN_READY,    /* enough agents, no plan assigned */
    PT_RUN_ASSIGNED, /* every worker acknowledged its assign */
    PT_RUN_TRAINING, /* started */
    PT_RUN_FINISHED, /* every worker finished the steps it was started for, at one step */
    PT_RUN_STOPPED,  /* every worker acknowledged a stop at one step */
    PT_RUN_FAILED,   /* a worker is dead, failed or gone (pt_run_failure says which) */
    PT_RUN_ENDED,    /* agents told bye and their processes reaped */
    PT_RUN_STATE_COUNT
} pt_run_state;

/* "waiting", "ready", ...; "?" when out of range. */
const char *pt_run_state_name(pt_run_state state);

/* Makes the run folder: dir when given, else runs/<YYYYmmdd-HHMMSS>[-tag]-<pid>
 * (tag NULL or "": none), and locks it for this process (pt_dir_lock: a
 * folder holds one run at a time). The name goes to out (cap bytes). 0, or
 * PT_ESTATE (another process's run holds it: err names its pid), PT_EIO /
 * PT_EINVAL (name too long) with err set. */
int pt_run_dir_make(const char *dir, const char *tag, char *out, size_t cap, pt_error *err);

/* Abandons a blocking wait when it returns nonzero; it sets err to say why. */
typedef int (*pt_run_cancel_fn)(void *user, pt_error *err);

typedef struct pt_run_config {
    const char *run_dir;          /* an existing or new folder (made); required */
    const char *control_bind;     /* NULL: PT_SESSION_DEFAULT_BIND */
    const char *telemetry_bind;   /* NULL: PT_SESSION_DEFAULT_BIND */
    int agents;                   /* agents to wait for (>= 1) */
    pt_session_listener listener; /* the session's listener (NULL: none) */
    void *listener_user;
    pt_run_cancel_fn cancel; /* NULL: waits are never abandoned */
    void *cancel_user;
    /* Authentication (docs/architecture.md, "Trust"). key_path: the console's
     * key pair file (`pipetop keys`); allow_path: the allow-list of agent
     * keys (docs/formats.md, "Key files"). local_keys: without key_path, a
     * per-run key pair made in memory, so that spawned agents (each given a
     * per-run pair of its own in <run folder>/keys, mode 0700) talk CURVE
     * with no set-up. No key at all: no CURVE, loopback and ipc only. */
    const char *key_path;
    const char *allow_path;
    int local_keys;
    /* local_ipc: a run on this machine only. The console binds, and spawned
     * agents bind their data sockets at, ipc:// endpoints in a folder of
     * its own (pt_run_ipc_dir: $XDG_RUNTIME_DIR/pipetop-XXXXXX, else
     * /tmp/pipetop-XXXXXX, made mode 0700 so no other user can even
     * connect), removed when the controller ends. Ignored for a
     * control_bind or telemetry_bind given. 0: tcp on loopback
     * (PT_SESSION_DEFAULT_BIND), as agents elsewhere need. */
    int local_ipc;
} pt_run_config;

/* Files of the ipc folder: the console's two sockets, and each spawned
 * agent's data socket <name>.data. */
#define PT_RUN_IPC_CONTROL   "control"
#define PT_RUN_IPC_TELEMETRY "telemetry"
#define PT_RUN_IPC_DATA_EXT  ".data"

/* Folder of a run folder holding the spawned agents' per-run key pairs
 * (mode 0700; removed when the controller ends). */
#define PT_RUN_KEYS_DIR "keys"

typedef struct pt_run pt_run;

/* Makes the folder and creates the session (its record in the folder, the
 * checkpoint commit hook set). On success *out owns a new controller; on
 * failure *out is NULL and err says what failed. */
int pt_run_create(const pt_run_config *cfg, pt_run **out, pt_error *err);

/* Settings for the agents pt_run_spawn starts, called before it. The stall
 * bound (ms; 0: PT_RUN_STALL_MS) goes to the session, and spawned agents
 * wait for a neighbour's data that long and more (--comm-timeout-ms), so a
 * stall shorter than the bound pauses the pipeline rather than failing a
 * neighbour. checkpoint_root (NULL: none) is the folder spawned agents may
 * write checkpoints under (--checkpoint-root; made absolute here); assigns
 * then name it as PT_RUN_AGENT_CKPT_DIR, and agents started elsewhere must
 * be given the same folder as their --checkpoint-root. pt_run_create sets
 * the default stall bound and no root. 0, or PT_EINVAL/PT_EIO with
 * err naming the folder. */
int pt_run_set_agents(pt_run *run, int stall_ms, const char *checkpoint_root, pt_error *err);

/* Agents pt_run_spawn starts after this relay a PyTorch run's Monitor
 * (pipetop-agent --observe dir, docs/torch.md) instead of training. dir
 * NULL: they train. The string is copied. */
void pt_run_set_observe(pt_run *run, const char *dir);

/* Simulated agents (pipetop-agent --simulate, docs/architecture.md,
 * "Simulated agents"): the files the agents read the profile and topology
 * from (the console's own, e.g. the run folder's profile.json and
 * topology.json), the noise, and the straggler ("K:PCT:STEP") and failure
 * ("K:STEP") to inject, NULL: none. */
typedef struct pt_run_sim {
    const char *profile, *topology;
    double noise;
    const char *straggler, *fail;
    int console_silence_ms; /* the agents' --console-silence-ms; 0: not passed */
} pt_run_sim;
/* pt_run_spawn after this starts one `pipetop-agent --simulate --count N`
 * process for its N agents instead of N training agents (sim NULL or
 * sim->profile NULL: training agents again). Strings are copied. 0, or
 * PT_EINVAL (no topology). */
int pt_run_set_simulate(pt_run *run, const pt_run_sim *sim, pt_error *err);
/* Starts the agents the controller waits for on this machine, agent k under
 * a name random per run (pt_run_agent_name: "w<k>-" and 12 hex digits from
 * getrandom, so no other key holder can guess it and register first) as
 * device devices[k] (devices NULL: device k), its output in
 * <run folder>/agent-<name>.log. Without this call the controller waits for
 * agents started elsewhere. 0, or PT_ENOTFOUND (no pipetop-agent next to
 * this program) / PT_EIO (fork) / PT_ESTATE (called twice); agents already
 * started are ended by pt_run_end / pt_run_destroy. */
int pt_run_spawn(pt_run *run, const int *devices, pt_error *err);

/* pt_run_spawn where topo (NULL: as pt_run_spawn) says where each device
 * computes: an agent whose device has "compute": "cuda:N" is started with
 * --device cuda:N[:PREC] --index D (pt_topology_device_spec), one on the CPU
 * with --device D. */
int pt_run_spawn_on(pt_run *run, const int *devices, const pt_topology *topo, pt_error *err);

/* The ipc folder of a local_ipc run ("" none). */
const char *pt_run_ipc_dir(const pt_run *run);

/* The name of spawned agent k (0 <= k < the agents started), NULL otherwise. */
const char *pt_run_agent_name(const pt_run *run, int k);

/* Ends the agents (pt_run_end with "the run is over" unless already ended)
 * and frees everything. NULL-safe; sets *run_p = NULL. */
void pt_run_destroy(pt_run **run_p);

/* The session, for its getters, counts and record (owned by the controller;
 * do not assign, start or stop through it). */
pt_session *pt_run_session(const pt_run *run);
const char *pt_run_dir(const pt_run *run);
pt_run_state pt_run_get_state(const pt_run *run);

/* Handles what arrives within timeout_ms, reaps ended agents and moves the
 * state (READY, FINISHED, FAILED). 0, or PT_EIO when the session cannot go on. */
int pt_run_poll(pt_run *run, int timeout_ms, pt_error *err);

/* Agents registered and usable (not dead, failed or gone, with a data endpoint). */
int pt_run_usable_agents(const pt_run *run);

/* Polls until enough agents registered (0: READY, or any later state), a
 * failure (PT_ESTATE), or timeout_ms (PT_ETIMEOUT saying how many registered). */
int pt_run_wait_agents(pt_run *run, int timeout_ms, pt_error *err);

/* The mapping policy: workers are taken stage by stage, replica by replica
 * (planner/schedule.h's numbering); worker w goes to a usable agent that
 * registered the device the plan gives w, and a worker whose device no
 * agent has goes to a usable agent that registered no device (-1), in
 * order of registration; each agent gets one worker. agents[w] gets the
 * agent's index (pt_plan_device_count entries). 0, or PT_ENOTFOUND naming
 * the stage, replica and device nobody can take, or PT_ENOMEM; on error
 * agents is left unspecified and nothing is sent. */
int pt_run_map(const pt_run *run, const pt_plan *plan, int *agents, pt_error *err);

/* What an assign needs besides the plan. Strings are copied; model must
 * stay valid until the next assign or the end of the controller. */
typedef struct pt_run_job {
    const pt_model_spec *model;
    const char *data;           /* "synthetic", "fashion-mnist" or a path */
    int64_t seed;               /* initial weights and data order */
    const char *checkpoint_dir; /* NULL: no checkpoints (restart is then refused) */
    int64_t checkpoint_every;   /* 0: only on stop / when asked */
} pt_run_job;

/* Maps plan (pt_run_map), assigns it as a new generation starting at
 * resume_step (0: fresh; > 0: from <checkpoint_dir>/step-<resume_step>) and
 * waits for every acknowledgement: ASSIGNED. 0, or the error of the mapping,
 * the session, a failure (PT_ESTATE), the cancel hook or the timeout. */
int pt_run_assign(pt_run *run, const pt_plan *plan, const pt_run_job *job, int64_t resume_step,
                  int timeout_ms, pt_error *err);

/* Picks up a run another console with the same key started (a console
 * restart; docs/deploy.md): generation gen of plan, worker w on the agent
 * named names[w] (the old console's record says which), started at
 * first_step for the steps up to target (-1: until stopped). Nothing is
 * sent: the agents, which re-registered with this controller, keep
 * training: TRAINING. 0, PT_ENOTFOUND (an agent of names is not registered
 * or not usable), or the session's error. */
int pt_run_adopt(pt_run *run, const pt_plan *plan, const pt_run_job *job, int64_t gen,
                 const char *const *names, int64_t first_step, int64_t target, pt_error *err);

/* The newest plan of a run record (<dir>/run.ndjson, or dir itself when it
 * is a file): its generation and, for each of its workers, the agent that
 * ran it (names[w], at most cap). 0, or PT_ENOTFOUND (no plan in it) /
 * PT_EPARSE / PT_ERANGE / the file's error, naming the file. */
int pt_run_read_last_plan(const char *dir, int64_t *gen, char (*names)[PT_MSG_ID_MAX], int cap,
                          int *n, pt_error *err);

/* Starts every worker for `steps` steps (0: until stopped): TRAINING. The
 * run is FINISHED once every worker is idle at resume_step + steps. 0 or
 * PT_ESTATE (not assigned). */
int pt_run_start(pt_run *run, int64_t steps, pt_error *err);

/* The step the current generation started from, and the step it ends at
 * (-1: until stopped). */
int64_t pt_run_first_step(const pt_run *run);
int64_t pt_run_target_step(const pt_run *run);

/* Stops every worker at one step (the session's two-round stop; each saves
 * a checkpoint there when the plan has a folder) and waits for the
 * acknowledgements: STOPPED. 0, or PT_ESTATE / PT_ETIMEOUT naming what is
 * still awaited / the cancel hook's error. */
int pt_run_stop(pt_run *run, const char *reason, int timeout_ms, pt_error *err);

/* Stops (as pt_run_stop, reason "apply & restart"), requires the stop's
 * checkpoint to be committed, and assigns plan as a new generation resuming
 * at that step with the last job: ASSIGNED (call pt_run_start to go on).
 * *resume_step gets the step. Refused with PT_ESTATE when the last job has
 * no checkpoint folder. */
int pt_run_restart(pt_run *run, const pt_plan *plan, int timeout_ms, int64_t *resume_step,
                   pt_error *err);

/* 1 with err saying which agent and why when the run failed (a worker dead,
 * failed or gone; an agent process that ended before registering); else 0. */
int pt_run_failure(const pt_run *run, pt_error *err);

/* Says bye to every agent, waits up to PT_RUN_EXIT_MS for the spawned ones
 * to exit, kills those left: ENDED. Idempotent. */
void pt_run_end(pt_run *run, const char *reason);

#endif
