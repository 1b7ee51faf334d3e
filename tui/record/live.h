/* The live data source: an adapter over the run controller (tui/control/run.h)
 * with agents that this console spawns (pipetop demo) or that connect from
 * elsewhere (pipetop --agents N). It waits for the agents, assigns the plan,
 * starts training, and feeds the session's telemetry into the console's
 * store; agents are mapped to workers by the controller's one policy
 * (pt_run_map).
 *
 * Agents train from one start until stopped; a stop brings every stage to
 * one common step (the session's two-round stop, docs/protocol.md "Stopping
 * at one step"). Apply & restart (pt_source_vt.apply) refuses, leaving the
 * run as it is, when the run is not training or the plan needs a device no
 * live agent has; otherwise from the next poll on a thread of its own stops
 * the agents (each saves its layers: a checkpoint), waits until the
 * checkpoint is committed and assigns the new plan as a new generation
 * resuming from that step, while the console's loop goes on (keys, redraws;
 * what the session hears meanwhile is handed to the store by the loop's
 * polls), and the poll after it ended starts the run again. While it runs
 * the thread alone drives the controller; a second apply is refused. Closing stops the run and ends
 * every agent it spawned (bye, a bounded wait, then SIGKILL).
 *
 * Calibration: once each generation has cal_steps (default PT_LIVE_CAL_STEPS) steps in the
 * store, the source fits the cost model to that generation's ops in the run
 * record (planner/calibrate.h, against the profile and topology it was given)
 * and hands the calibrated profile and topology to the store
 * (pt_store_set_calibration), from where the console's plan editor predicts
 * with them (its status line says so; no store note, which would hide the
 * run's own), and the files are written to
 * RUN/calibrated-gen-G.json and RUN/calibrated-gen-G-topology.json. A fit
 * that fails (too few op events yet) is tried again a few steps later. */
#ifndef PT_TUI_LIVE_H
#define PT_TUI_LIVE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/record/source.h"

#define PT_LIVE_WAIT_MS    60000 /* bound on a stop / assign round trip */
#define PT_LIVE_EXIT_MS    5000  /* bound on the stop when the console quits */
#define PT_LIVE_REFRESH_MS 100   /* agent table refresh */
#define PT_LIVE_CAL_STEPS  10    /* steps of a generation before it is calibrated */
#define PT_LIVE_CAL_RETRY  4     /* more steps before a failed fit is tried again */

typedef struct pt_live_opts {
    const pt_plan *plan;        /* copied */
    const pt_model_spec *model; /* copied (as JSON) */
    const char *data;           /* "fashion-mnist", "synthetic" or a path */
    const char *listen;         /* control endpoint to bind; NULL: loopback, any port */
    int expect_agents;          /* agents to wait for (>= the plan's devices) */
    int spawn;                  /* 1: start expect_agents local pipetop-agent processes */
    const char *run_dir;        /* NULL: runs/<timestamp> */
    int64_t steps;              /* 0: train until stopped */
    int64_t seed;
    int64_t checkpoint_every;    /* 0: only on stop (apply & restart) */
    const pt_profile *profile;   /* copied; the base of calibration; NULL: no calibration */
    const pt_topology *topology; /* copied; needed with profile */
    int64_t cal_steps;           /* steps of a generation before it is calibrated:
                                    0: PT_LIVE_CAL_STEPS; < 0: never */
    /* An observed PyTorch run (docs/torch.md): the spawned agents relay its
     * processes' Monitors from sockets in this folder (pipetop-agent
     * --observe) instead of training; no checkpoints, and apply & restart
     * refuses with PT_LIVE_OBSERVED_WHY. NULL: agents train. */
    const char *observe_dir;
    /* 1: the agents are simulated (one pipetop-agent --simulate --count N,
     * docs/architecture.md, "Simulated agents") on profile and topology,
     * which are then required; written into the run folder for them. */
    int simulate;
    /* simulate: the straggler to inject ("K:PCT:STEP", pipetop-agent
     * --straggler; NULL: none), copied. */
    const char *sim_straggler;
    /* simulate: the failure to inject ("K:STEP", pipetop-agent --fail; NULL:
     * none), copied. */
    const char *sim_fail;
} pt_live_opts;

#define PT_LIVE_OBSERVED_WHY                                                                       \
    "an observed run cannot be restarted from here: it runs in its own PyTorch processes"

/* Creates the controller (run folder with ckpt/ and plan.json, the session
 * with its run record) and, with spawn, the agents. On failure *out is NULL
 * and err says why. */
int pt_source_live_new(const pt_live_opts *opts, pt_source **out, pt_error *err);

/* The run folder of a live source (NULL for other sources). */
const char *pt_source_live_run_dir(const pt_source *src);

#endif
