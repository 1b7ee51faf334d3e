/* The agent's worker thread, shared between its files (not for other
 * modules: agent/agent.h is the worker's face). The worker is one thread
 * that owns one generation's run at a time (run_state): worker.c holds its
 * state machine and the control thread's calls; worker_plane.c builds a
 * generation's stages (runtime/stage.h) at the assign and wires their data
 * plane at its first iteration; worker_telemetry.c publishes op events and
 * folded metrics; worker_ckpt.c saves and loads the chunks' checkpoints.
 *
 * Several chunks share the agent's one data-plane rank (the device's host
 * index, runtime/exec_host.h): each chunk has its own stage and collective,
 * run on its own thread, and the executors take turns in the device's host
 * order, so a hop to a chunk on another agent goes over the data plane and
 * the device runs one op at a time, as the simulator times it. */
#ifndef PT_AGENT_WORKER_INTERNAL_H
#define PT_AGENT_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent/agent.h"
#include "planner/schedule.h"
#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/comm.h"
#include "runtime/comm_nccl.h"
#include "runtime/data.h"
#include "runtime/exec_host.h"
#include "runtime/executor.h"
#include "runtime/stage.h"
#include "runtime/trust.h"

#define NS_PER_MS          1000000LL
#define BIND_RETRIES       50 /* the data port is re-bound after the previous socket closed */
#define BIND_RETRY_MS      20
#define EVENTS_INITIAL_CAP 1024
/* Telemetry thinning (docs/protocol.md, "Telemetry thinning"): metrics of
 * consecutive steps go out folded into one message at most every
 * FOLD_FLUSH_MS (and whenever the worker stops running); the op events of a
 * step go out for the first EVENTS_HEAD_STEPS and the last EVENTS_TAIL_STEPS
 * steps of a start, and in between for steps that are multiples of a power
 * of two chosen so that about EVENT_STEPS_PER_S steps a second are sent.
 * The stride depends on the step number only, the same on every worker
 * running at the pipeline's pace, so the sampled steps line up. */
#define FOLD_FLUSH_MS     50
#define EVENT_STEPS_PER_S 50
#define EVENTS_HEAD_STEPS 32
#define EVENTS_TAIL_STEPS 16
#define EVENT_STRIDE_MAX  4096
/* The replicas of a stage swap their collective endpoints under this tag. */
#define COLL_EXCHANGE_MB 0x00C011EC
#define STATE_NAME_MAX   32
/* Failed handshakes with one peer before wire_run gives up on it: every
 * peer is in this generation when it runs, so a refusal is a wrong key or a
 * peer that restarted, not a race to wait out (about 1.3 s of retries). */
#define WIRE_MAX_FAILURES 6

/* Most model chunks one agent runs (an interleaved plan's v). */
#define CHUNKS_MAX PT_SCHED_CHUNKS_MAX

struct run_state;

/* One model chunk of the run: a worker of the program, its stage
 * (runtime/stage.h) and its collective. */
typedef struct chunk {
    int worker, stage;
    pt_stage_replica *st; /* net, optimizer, feed, and the executor once wired */
    pt_collective *coll;
    /* one run of several chunks: each on its own thread */
    struct run_state *r;
    pthread_t th;
    int64_t base;
    int rc;
    pt_error err;
    pt_exec_result res;
} chunk;

/* Consecutive steps' metrics of one chunk folded into one message (n steps;
 * iter and rate: sums). */
typedef struct fold_slot {
    pt_msg_metrics m;
    int n;
    double iter, rate;
} fold_slot;

/* Everything one generation's run owns (worker thread only). */
typedef struct run_state {
    int64_t gen;
    pt_model_spec *spec;
    pt_plan *plan;
    pt_program prog;
    int worker, stage, replica; /* the first chunk's */
    int rank, nranks;           /* data-plane rank and count: workers, or hosts when hosted */
    const int *ranks;           /* every worker's rank: NULL (its index) or prog.worker_host */
    chunk ch[CHUNKS_MAX];
    int nch;
    pt_exec_host *host;    /* several chunks: the device's turn */
    const pt_backend *be;  /* the agent's (NULL: CPU), bound on the chunks' threads too */
    pthread_mutex_t ev_mu; /* chunks' threads append events concurrently */
    int ev_mu_ok;
    pt_dataset *ds;
    void *data_ctx;
    pt_zap *data_zap;                      /* CURVE: allows exactly the assign's peers */
    char (*peer_eps)[PT_MSG_ENDPOINT_MAX]; /* [nranks] the assign's data endpoints by rank */
    int wired; /* connected to the peers, collectives and executors built (wire_run) */
    char (*peer_keys)[PT_KEY_Z85_LEN + 1]; /* [worker_count] by rank; NULL: plain */
    const pt_keyfile *own_key;
    pt_comm *comm;
    pt_nccl *nccl, *nccl_replicas; /* an assign with an nccl_id on a CUDA backend */
    char ckpt_dir[PT_MSG_PATH_MAX];
    int64_t ckpt_every;
    int64_t last_saved; /* step of the newest checkpoint written by this run, -1 none */
    pt_msg_event *events;
    int nev, evcap;
    int64_t ns_base;             /* pt_clock_ns() - pt_msg_now_ns() */
    uint64_t run_token;          /* the assign's: every data frame carries it */
    size_t stash_bound, max_msg; /* bytes: early-arrival buffer, largest message */
    size_t coll_stash_bound;
} run_state;

typedef struct ckpt_req {
    int64_t req, step;
} ckpt_req;

struct pt_wk_ops;

struct pt_agent_worker {
    char id[PT_MSG_ID_MAX];
    char data_ep[PT_MSG_ENDPOINT_MAX];
    char tel_fixed[PT_MSG_ENDPOINT_MAX];
    char tel_connected[PT_MSG_ENDPOINT_MAX];
    void *ctx;
    char notify_ep[PT_MSG_ENDPOINT_MAX];
    char ckpt_root[PT_MSG_PATH_MAX];   /* checkpoints only under here (absolute) */
    char observe_dir[PT_MSG_PATH_MAX]; /* --observe: relay a PyTorch run (agent/observe.c) */
    int comm_timeout_ms;
    const pt_backend *be; /* NULL: the CPU backend */
    int curve;            /* key and server_key set: every socket talks CURVE */
    pt_keyfile key;
    char server_key[PT_KEY_Z85_LEN + 1];
    pthread_t th;
    int started;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* commands (mu) */
    pt_msg *assign;
    int running;        /* a start is being served */
    int64_t start_req;  /* its request id: periodic checkpoints are acknowledged under it */
    int64_t run_target; /* iterations done at which it ends; -1: until stopped */
    int has_stop;
    int64_t stop_req;
    int64_t stop_at; /* the stop's at_step: run until this many iterations are done; -1 none */
    int hold;        /* a hold is in force: begin no iteration at or beyond hold_at */
    int64_t hold_at;
    int in_run;      /* an iteration (program) is executing... */
    int64_t run_end; /* ...and `done` will be this when it finishes */
    ckpt_req ckpts[PT_AGENT_CKPT_REQ_MAX];
    int nckpt;
    int quit;
    void *abort_ctx; /* the data context while a run exists: shut down to abort */
    /* status (mu) */
    char state[STATE_NAME_MAX];
    int64_t done;     /* iterations completed */
    uint64_t dropped; /* data-plane frames dropped, as of the last run of steps */
    int64_t gen;      /* generation built */
    int built;
    int exited;

    atomic_int stop_flag; /* the executor's: stop before the next op */
    /* worker thread only */
    void *pub, *notify;
    int64_t tel_seq;
    run_state r;
    /* telemetry thinning: one metrics fold being gathered per chunk (so an
     * agent running several chunks folds each one's consecutive steps), when
     * one last went out, and the events' step stride from the smoothed
     * iteration time */
    fold_slot folds[CHUNKS_MAX];
    int64_t fold_sent_ns;
    double iter_ema_ms;
    int64_t start_step;          /* (mu) done when the current start began */
    const pt_agent_sim *sim;     /* --simulate (agent/sim.c), NULL: trains */
    const struct pt_wk_ops *ops; /* what pt_wk_loop runs (set by it) */
    int sim_index;
};

/* ---- agent/worker.c: the worker's state machine, one for training and simulated agents */

/* What differs between a training worker and a simulated one; assign,
 * start, hold, stop at a step, checkpoint requests, idling and failure are
 * handled around them by one loop, pt_wk_loop. ctx is the caller's. */
typedef struct pt_wk_ops {
    /* builds generation m (w->mu not held): its pt_wk_assigned note sent */
    void (*assign)(pt_agent_worker *w, void *ctx, pt_msg *m);
    /* one run of the program from w->done (w->mu not held): 0 or PT_E* */
    int (*run_once)(pt_agent_worker *w, void *ctx, pt_error *err);
    /* writes this agent's part of checkpoint `step`, naming its folder in
     * dir: 0 or PT_E*; NULL: the training agent's weights (worker_ckpt.c) */
    int (*save)(pt_agent_worker *w, int64_t step, char *dir, size_t cap, pt_error *err);
    /* nothing to do: waits on w->cv (w->mu held, and held again on return) */
    void (*idle)(pt_agent_worker *w, void *ctx);
} pt_wk_ops;

/* Runs the state machine until w->quit, w->mu not held on entry or return. */
void pt_wk_loop(pt_agent_worker *w, const pt_wk_ops *ops, void *ctx);

/* ---- agent/worker.c: state and notes to the control thread */
void pt_wk_notify(pt_agent_worker *w, const pt_wnote *n);
void pt_wk_notify_simple(pt_agent_worker *w, int kind, int64_t req, int64_t step, int rc,
                         const char *text);
void pt_wk_sleep_ms(int ms);
void pt_wk_set_state(pt_agent_worker *w, const char *st);

/* An assign answered: generation gen built (rc 0: "ready", done iterations
 * done) or not ("failed"), then n goes to the control thread. */
void pt_wk_assigned(pt_agent_worker *w, int64_t gen, int64_t done, int rc, const pt_wnote *n);
/* pt_wk_assigned with the setup note of assign m: built (rc 0, resuming at
 * its resume_step) or not (why, else rc's words). */
void pt_wk_setup_done(pt_agent_worker *w, const pt_msg *m, int rc, const char *why);
/* A run of the program from done to after iterations ended well: done
 * moves on, the control thread hears of the step, and the checkpoints due
 * (every checkpoint_every, and asked for up to after) are written. */
void pt_wk_ran(pt_agent_worker *w, int64_t done, int64_t after);
/* The worker thread's last act: closes its PUB and notify sockets and marks
 * it exited (w->exited, broadcast on w->cv). */
void pt_wk_exit(pt_agent_worker *w);

/* ---- agent/worker_telemetry.c: events and metrics on the PUB socket */
void pt_wk_connect_telemetry(pt_agent_worker *w, const char *ep);
void pt_wk_on_op(void *user, const pt_exec_event *ev);
void pt_wk_publish_events(pt_agent_worker *w);
void pt_wk_flush_metrics(pt_agent_worker *w);
int pt_wk_folds_pending(const pt_agent_worker *w);
int pt_wk_events_wanted(const pt_agent_worker *w, int64_t start, int64_t done, int64_t after,
                        int64_t target);
void pt_wk_publish_metrics(pt_agent_worker *w, const pt_exec_result *res, int64_t first_step);
/* Adds one step's metrics of chunk c to its fold, sent when due. */
void pt_wk_fold_metrics(pt_agent_worker *w, int c, const pt_msg_metrics *mt);

/* ---- agent/observe.c: the worker of pipetop-agent --observe */
void *pt_wk_observe_main(void *arg);

/* ---- agent/sim.c: the worker of pipetop-agent --simulate */
void *pt_wk_sim_main(void *arg);

/* ---- agent/worker_ckpt.c: checkpoints of the run's chunks */
int pt_wk_load_resume(pt_agent_worker *w, int64_t step, pt_error *err);
void pt_wk_do_save(pt_agent_worker *w, int64_t step, int64_t req);
void pt_wk_serve_ckpt_requests(pt_agent_worker *w, int64_t done, int all);

/* ---- agent/worker_plane.c: a generation's stages and data plane, built and torn down */
void pt_wk_teardown(pt_agent_worker *w);
int pt_wk_build_run(pt_agent_worker *w, const pt_msg *m, pt_error *err);
int pt_wk_wire_run(pt_agent_worker *w, pt_error *err);
uint64_t pt_wk_data_dropped(run_state *r);
void pt_wk_log_dropped(pt_agent_worker *w, uint64_t dropped);

#endif
