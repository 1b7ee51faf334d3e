/* pipetop-agent: one process per device (DESIGN.md, agent/).
 *
 * Two threads. The control thread (agent/control.c) owns the DEALER to the
 * console: it registers, heartbeats both ways, checks and counts every
 * control message, and turns requests into commands for the worker. The
 * worker thread (agent/worker*.c) owns everything of the run: it builds its
 * stage replica from an assign (net, optimizer, data feed, communicators,
 * executor), runs the schedule program iteration by iteration, publishes
 * telemetry on its PUB socket and saves checkpoints; it reports back to the
 * control thread over an inproc PAIR socket, so the control thread wakes up
 * for it in the same zmq_poll as for the console.
 *
 * Steps. A "step" counted by checkpoints, `start.steps` and resume_step is a
 * number of iterations (global batches) completed: a checkpoint at step 4
 * holds the weights after iterations 0..3 and a run resumed from it begins
 * with iteration (global batch) 4. Heartbeat and metrics steps are the index
 * of the iteration finished (3 in that example). */
#ifndef PT_AGENT_AGENT_H
#define PT_AGENT_AGENT_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "runtime/backend.h"

/* Heartbeat period and the periods of silence after which the console is
 * taken for gone: the same figures as the console's (tui/session.h). */
#define PT_AGENT_HEARTBEAT_MS      250
#define PT_AGENT_MISSED_HEARTBEATS 12
/* With CURVE (--key), how long an agent with a run keeps training after its
 * console went silent, waiting for a console that proves the same key to
 * pick the run up (--grace-ms; docs/deploy.md, "Console restarts"). Without
 * CURVE a new console cannot prove it is the same, so there is no grace. */
#define PT_AGENT_CONSOLE_GRACE_MS 60000
/* How long a freshly started agent waits for the console's first word. */
#define PT_AGENT_FIRST_CONTACT_MS 30000
/* Bound of every data-plane receive and all-reduce (runtime/comm.h). */
#define PT_AGENT_COMM_TIMEOUT_MS 30000
/* How long the control thread waits for the worker to finish when leaving. */
#define PT_AGENT_JOIN_MS 5000
/* Checkpoint requests held at once (more are refused). */
#define PT_AGENT_CKPT_REQ_MAX 16
/* Synthetic data has a fixed seed of its own, as in `pipetop train`
 * (tui/cmd_train.c), so a pipelined run sees the same samples. */
#define PT_AGENT_SYNTH_DATA_SEED 20261129u
/* Manifest a stage leaves in a checkpoint step folder for the console's
 * commit: "stage-<s>.json" (docs/formats.md, "Run checkpoints"). */
#define PT_AGENT_MANIFEST_FMT "stage-%d.json"

/* What the worker tells the control thread. */
typedef enum pt_wnote_kind {
    PT_WNOTE_SETUP,   /* assign handled: rc 0 ready, else text says why */
    PT_WNOTE_STEP,    /* a run finished: step = iterations done */
    PT_WNOTE_CKPT,    /* a checkpoint was saved (or already there): step, dir, req */
    PT_WNOTE_STOPPED, /* a stop request is done: req */
    PT_WNOTE_IDLE,    /* the steps of the last start are done */
    PT_WNOTE_FAILED   /* the run failed: rc, text */
} pt_wnote_kind;

typedef struct pt_wnote {
    int kind;
    int rc;
    int stage, replica;
    int64_t gen, req, step;
    char text[PT_MSG_TEXT_MAX];
    char dir[PT_MSG_PATH_MAX];
} pt_wnote;

typedef struct pt_agent_worker pt_agent_worker;

/* --simulate (agent/sim.c): the worker executes the schedule program with
 * the simulator's op durations (planner/simulate.h) for the same plan,
 * profile and topology as the console, paced by the wall clock, and emits
 * the telemetry a training agent emits; no tensors, no data plane. One is
 * shared, read-only, by every simulated agent of a process. */
typedef struct pt_agent_sim_cache pt_agent_sim_cache;

typedef struct pt_agent_sim {
    /* One simulation per plan generation for all the process's agents
     * (pt_agent_sim_cache_new), NULL: each agent simulates on its own. */
    pt_agent_sim_cache *cache;
    const struct pt_profile *profile; /* borrowed; outlive the workers */
    const struct pt_topology *topo;
    double noise;     /* each op's duration times 1 + noise * U(-1, 1); 0: exact */
    uint64_t seed;    /* of the noise */
    int straggler;    /* agent index (--count) slower from straggler_step on; -1 none */
    double slow_frac; /* by this fraction (0.5: 50 % longer) */
    int64_t straggler_step;
    int straggler_device; /* the straggler's device, slowed in the simulation; -1 none */
    int fail_agent;       /* agent index that fails when it reaches fail_step; -1 none */
    int64_t fail_step;
} pt_agent_sim;

typedef struct pt_agent_worker_config {
    const char *agent_id;      /* copied */
    void *zmq_ctx;             /* the agent's context: PUB and the notify PAIR */
    const char *notify_ep;     /* inproc endpoint the control thread bound (PAIR) */
    const char *data_endpoint; /* where this agent's data socket binds (resolved) */
    const char *telemetry;     /* --telemetry, or NULL: take the assign's */
    int comm_timeout_ms;       /* 0: PT_AGENT_COMM_TIMEOUT_MS */
    const pt_backend *backend; /* --device: borrowed, outlives the worker; NULL: the CPU */
    /* CURVE (--key, --server-key): the agent's pair and the console's public
     * key, for the telemetry PUB; NULL: plain. Copied. */
    const pt_keyfile *key;
    const char *server_key;
    /* --checkpoint-root: the only folder checkpoints are written under (and
     * resumed from); an assign's checkpoint_dir is a folder inside it, never
     * absolute, never through "..". Copied; must not be NULL. */
    const char *checkpoint_root;
    /* --observe DIR: relay a PyTorch run's Monitor instead of training
     * (agent/observe.c); NULL: train. Copied. */
    const char *observe;
    /* --simulate: simulate instead of training (NULL: train); sim_index is
     * this agent's index among the process's simulated agents. */
    const pt_agent_sim *sim;
    int sim_index;
} pt_agent_worker_config;

/* The simulated agents' shared simulations (agent/sim.c): 0 or PT_ENOMEM;
 * free after every worker using it ended (NULL-safe, sets *cache_p NULL). */
int pt_agent_sim_cache_new(pt_agent_sim_cache **out);
void pt_agent_sim_cache_free(pt_agent_sim_cache **cache_p);

/* --observe DIR: 0 when DIR is a folder of this user's with mode 0700 (no
 * one else can reach the sockets in it), else -1 after saying why on
 * stderr (agent/observe.c). */
int pt_agent_observe_dir_ok(const char *dir);

/* Starts the worker thread. On success *out owns it. PT_ENOMEM / PT_EIO. */
int pt_agent_worker_start(const pt_agent_worker_config *cfg, pt_agent_worker **out, pt_error *err);

/* Commands, from the control thread; each returns at once. */
/* Takes *assign (zeroed on return): a new generation to build. */
void pt_agent_worker_assign(pt_agent_worker *w, pt_msg *assign);
/* Runs `steps` more iterations (0: until stopped) for start request `req`,
 * whose id also acknowledges the periodic checkpoints of the run.
 * PT_ESTATE when generation gen is not built. */
int pt_agent_worker_begin(pt_agent_worker *w, int64_t gen, int64_t req, int64_t steps);
/* Holds (a stop with "hold"): from now on begins no iteration at or beyond
 * the number of iterations begun so far (finished, plus the program in
 * progress), and returns that number; the run then waits there for a stop.
 * A second hold keeps the lower horizon. */
int64_t pt_agent_worker_hold(pt_agent_worker *w);
/* Stops for request req. at_step >= 0: first finishes iterations up to
 * at_step - 1, running them even after the last start's steps are done (an
 * agent already at or past at_step stops at the boundary it is at); -1: stops
 * after the current run. Either way it saves a checkpoint when the plan has
 * a folder and reports PT_WNOTE_STOPPED with the step it stopped at. */
void pt_agent_worker_stop(pt_agent_worker *w, int64_t gen, int64_t req, int64_t at_step);
/* Saves after `step` iterations (-1: after the current run). PT_ERANGE when
 * too many requests are waiting. */
int pt_agent_worker_checkpoint(pt_agent_worker *w, int64_t gen, int64_t req, int64_t step);
/* Abandons the run at once: the executor stops before its next op and any
 * blocked receive returns (the data context is shut down). */
void pt_agent_worker_abort(pt_agent_worker *w);

/* Heartbeat figures: the state name ("waiting", "setting-up", "ready",
 * "running", "holding", "stopping", "idle", "stopped", "failed") and the last finished step (-1).
 */
void pt_agent_worker_status(pt_agent_worker *w, char *state, int cap, int64_t *step);
/* Data-plane frames the current plan's communicators dropped (forged,
 * replayed, stale, over the early-arrival bound), as of the last finished
 * run of steps; for the heartbeat's data_dropped. */
int64_t pt_agent_worker_data_dropped(pt_agent_worker *w);

/* Aborts, waits up to timeout_ms for the thread and frees it. Returns 0, or
 * PT_ETIMEOUT when the thread did not end (it is then left running: the
 * process is about to exit). NULL-safe; sets *w_p = NULL. */
int pt_agent_worker_destroy(pt_agent_worker **w_p, int timeout_ms);

#endif
