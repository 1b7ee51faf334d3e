/* The stage executor: runs one worker's ops of a schedule program
 * (planner/schedule.h) with real tensors — DESIGN.md's "one schedule, three
 * consumers": the simulator times the same program that this executes.
 *
 * A worker is one stage replica. Given the program, its worker index, a pt_net
 * for the worker's layers, an optimizer over the net's flat parameters, a
 * communicator whose ranks are the program's workers, and a data feed, one
 * call of pt_exec_run executes the worker's ops [op_begin, op_end) once, in
 * order, under the program's execution contract:
 *
 *   FWD        stage 0 loads its rows of the micro-batch through the feed;
 *              the last stage also loads their labels and computes the loss.
 *              PT_OPF_STASH: the weights read are stashed for this micro-batch
 *              (a copy, PT_MEM_STASH) and its RECOMPUTE/BWD read the stash.
 *   RECOMPUTE  re-runs the forward from the kept stage input (pt_net_recompute).
 *   BWD        accumulates gradients into the buffer of the optimizer step
 *              that covers the micro-batch (one buffer per step in flight:
 *              Pipe-SGD holds two) and writes the input gradient for SEND_GRAD.
 *   SEND_*     asynchronous: the rows are copied into ZeroMQ and the worker
 *              goes on; activations leave straight from the net's slot.
 *   RECV_*     blocks (bounded by the communicator's timeout) until the rows
 *              arrive; replicated stages exchange row ranges (split-concat).
 *   ALLREDUCE  sums the covered gradients over the stage's replicas (ring
 *              all-reduce). PT_OPF_ASYNC: handed to a pt_collective's thread
 *              (queued FIFO if one is running); AR_WAIT waits for the oldest.
 *   OPT_STEP   applies the covered gradients to the newest weights in place,
 *              producing `version`, then zeroes the buffer. A version that a
 *              later op still reads is copied out first (PT_MEM_STASH), so
 *              2BW holds two versions and PipeDream with vertical sync keeps
 *              the versions its micro-batches entered with.
 *
 * Data order. Iteration t of a run started with iteration_base i0 is global
 * batch i0 + t; program micro-batch mb belongs to iteration mb / M and is
 * samples [(mb % M)·b, (mb % M + 1)·b) of that global batch (b = mb_size,
 * M = mb_per_window); the worker's rows [row_lo, row_hi) of it are what the
 * feed loads. runtime/feed.h maps global batches onto a data set exactly as
 * single-device training with batch b·M does.
 *
 * Loss scale. A micro-batch's loss (and so every gradient) is scaled by
 * 1 / (samples applied by the optimizer step covering it × labels per
 * sample): b·M for the flush kinds, 2BW and Pipe-SGD (the mean over the
 * global batch), b for PipeDream (a step per micro-batch). Summing the
 * replicas' gradients in ALLREDUCE then gives exactly single-device gradients.
 *
 * Runs. A run executes the whole program: one iteration for the synchronous
 * kinds, window_count iterations (warm-up, steady state, drain) for the
 * asynchronous ones. Every run starts with all of versions
 * 0..initial_versions-1 equal to the net's current parameters, so running an
 * asynchronous program again continues training after a drain. Optimizer
 * state and step counts carry over. Gradients of micro-batches that no
 * OPT_STEP of the program covers are all-reduced as the program says and then
 * dropped (generated programs have none: Pipe-SGD's drains its last window).
 *
 * Memory. Activations are the net's (PT_MEM_ACTS, one slot per micro-batch in
 * flight), stashed and kept weight versions PT_MEM_STASH, extra gradient
 * buffers PT_MEM_GRADS, received rows and input gradients waiting to be sent
 * PT_MEM_COMM, all from the net's arena. Everything is sized by a dry run of
 * the ops at create; arena blocks freed during a run are reused by the next
 * allocation of the same size, so from the second run on the arena makes no
 * backend allocation (pt_mem_stats.backend_allocs stays constant).
 *
 * Backend: any. On the CPU backend the communicator and data feed read and
 * write the net's buffers directly. On a backend whose memory the host
 * cannot address (CUDA) the executor stages through host copies: the feed
 * loads into host memory that is uploaded, a message is downloaded before
 * its send and uploaded after its receive, and the ZeroMQ all-reduces run on
 * a host copy of the gradients. That is how stages sharing one GPU exchange
 * tensors; the extra input buffer is counted under PT_MEM_COMM.
 *
 * Threads: an executor, its net, optimizer and communicator are used by one
 * thread at a time (a pipeline runs one thread per worker). */
#ifndef PT_RUNTIME_EXECUTOR_H
#define PT_RUNTIME_EXECUTOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "planner/schedule.h"
#include "protocol/error.h"
#include "runtime/comm.h"
#include "runtime/net.h"
#include "runtime/optim.h"

/* What a worker needs, from a dry run of its ops: build its net with
 * first/last/max_batch/max_slots/recompute. */
typedef struct pt_exec_needs {
    int stage, replica;
    int first, last;      /* layers [first, last) */
    int rows;             /* samples of every micro-batch this replica handles */
    int max_batch;        /* = rows */
    int max_slots;        /* micro-batches in flight at once (FWD done, BWD not) */
    int recompute;        /* the worker recomputes */
    int needs_input;      /* stage 0: the feed loads inputs */
    int needs_labels;     /* last stage: the feed loads labels */
    int needs_comm;       /* any SEND/RECV/ALLREDUCE */
    int needs_collective; /* an asynchronous ALLREDUCE among >= 2 replicas */
    int grad_buffers;     /* gradient buffers in use at once (the net's own is one) */
    int in_buffers;       /* received-activation buffers at once */
    int dy_buffers;       /* received-gradient buffers at once */
    int dx_buffers;       /* input-gradient buffers waiting to be sent at once */
    int max_version;      /* highest weight version the program names */
} pt_exec_needs;

/* Dry-runs worker `worker` of prog: checks that its ops can be executed (a
 * FWD before its BWD, all rows received before they are used, gradients of a
 * step all-reduced and waited for before it, versions produced before they
 * are read, ...) and fills *out. Returns 0 or PT_EINVAL with err naming the
 * worker and the op ("w3 s1r0 BWD mb 4 ...: ..."). Allocates temporary
 * memory (PT_ENOMEM). */
int pt_exec_needs_of(const pt_program *prog, int worker, pt_exec_needs *out, pt_error *err);

/* One op as executed, for telemetry (and tests). */
/* Consecutive BWD_WEIGHT ops of a worker (gathered weight gradients, the
 * 1f1b-gw kind) run as one pass of at most this many micro-batches; their
 * events share the pass's time evenly, one after the other. */
#define PT_EXEC_WEIGHT_RUN_MAX 64

typedef struct pt_exec_event {
    int worker, stage, replica;
    int op_index;       /* index into prog->ops */
    pt_op_kind kind;    /* from prog->ops[op_index] */
    int flags;          /* PT_OPF_* */
    int mb, mb_end;     /* as in the op (program micro-batch ids) */
    int64_t iteration;  /* global batch of mb: iteration_base + mb / M */
    int version;        /* the op's version */
    int used_version;   /* FWD/RECOMPUTE/BWD: the version the weight array actually read
                           holds (tracked independently of the op); OPT_STEP: the version
                           produced; else -1 */
    int peer;           /* the op's peer: worker (SEND/RECV) or stage (ALLREDUCE) */
    int row_lo, row_hi; /* the op's rows */
    int64_t bytes;      /* payload bytes moved (SEND/RECV, ALLREDUCE: the gradient
                           array), OPT_STEP: parameter bytes; else 0 */
    int64_t start_ns;   /* CLOCK_MONOTONIC */
    int64_t end_ns;
    int64_t queued_ns;       /* asynchronous ALLREDUCE: when it was queued for the collective
                                thread, inside the preceding BWD for a hooked bucket (before
                                start_ns); else 0 */
    double loss_sum;         /* FWD on a stage with the loss: sum over its label rows of
                                -log p (unscaled); else 0 */
    int64_t loss_count;      /* label rows in loss_sum */
    int versions_live;       /* weight arrays held after the op: the current one, kept
                                versions and micro-batch stashes */
    uint64_t weights_digest; /* pt_exec_config.digest: FNV-1a of the weights the op read
                                (FWD/RECOMPUTE/BWD) or produced (OPT_STEP); else 0 */
} pt_exec_event;

/* Called after every op on the executing thread; must not call back into the
 * executor. */
typedef void (*pt_exec_op_fn)(void *user, const pt_exec_event *ev);

/* Loads rows [row_lo, row_hi) of micro-batch mb (0..M-1) of global batch
 * `iteration`: (row_hi-row_lo)·input floats into x and (row_hi-row_lo)·labels
 * per sample int32 into labels; either may be NULL (not wanted). Host
 * memory. Returns 0 or a PT_E* code with err set. */
typedef int (*pt_exec_load_fn)(void *ctx, int64_t iteration, int mb, int row_lo, int row_hi,
                               float *x, int32_t *labels, pt_error *err);

typedef struct pt_exec_feed {
    pt_exec_load_fn load; /* NULL: none (only for workers that need no data) */
    void *ctx;
} pt_exec_feed;

typedef struct pt_exec_config {
    const pt_program *prog; /* borrowed; must outlive the executor and stay unchanged */
    int worker;             /* index into prog->workers */
    pt_net *net;            /* borrowed: layers [first,last) of the worker, max_batch and
                               max_slots at least the needs, recompute as the worker */
    pt_optim *optim;        /* borrowed: over the net's param_count floats */
    pt_comm *comm;          /* borrowed: rank ranks[worker]; NULL only when !needs_comm */
    pt_collective *coll;    /* borrowed, for asynchronous all-reduces (needs_collective);
                               its communicator uses the same rank numbering */
    const int *ranks;       /* comm rank of every worker (copied); NULL: rank = worker */
    pt_exec_feed feed;      /* stage 0 and the last stage */
    pt_exec_op_fn on_op;    /* NULL: no events */
    void *user;
    const atomic_int *stop; /* NULL, or a flag: when it becomes nonzero, pt_exec_run stops
                               before the next op with PT_ESTATE ("stopped") */
    int digest;             /* 1: compute weights_digest (costs a pass over the weights) */
    /* GPU runs whose workers are on distinct GPUs (runtime/comm_nccl.h): NULL, or
     * borrowed NCCL communicators on the net's CUDA backend. nccl spans every worker
     * with the comm's rank numbering and carries the messages between stages;
     * nccl_replicas spans this stage's replicas and carries the synchronous
     * all-reduce. Asynchronous all-reduces stay on coll. */
    struct pt_nccl *nccl, *nccl_replicas;
    /* Programs with hosts (interleaved: several model chunks per device): NULL, or
     * the borrowed turn of the worker's host (runtime/exec_host.h), shared with the
     * other chunks' executors; every op then waits for its turn in the host's
     * order and hands it on after. NULL on such a program: the chunk runs its
     * own ops in order but not in turn with the device's other chunks (as when
     * each chunk is its own agent process); the results are the same, the
     * timing is not the schedule's. */
    struct pt_exec_host *host;
} pt_exec_config;

typedef struct pt_exec pt_exec;

/* Creates the executor of cfg->worker: dry-runs its ops (pt_exec_needs_of),
 * checks the net, optimizer, communicator, collective and feed against the
 * needs, and allocates every buffer a run uses. On success *out owns a new
 * executor (the borrowed objects stay the caller's); on failure *out is NULL
 * and the result is PT_EINVAL (err names what does not fit) or PT_ENOMEM. */
int pt_exec_create(const pt_exec_config *cfg, pt_exec **out, pt_error *err);

/* Replaces the executor's NCCL communicators (pt_exec_config.nccl and
 * .nccl_replicas; NULL: that traffic goes over ZeroMQ), checked as
 * pt_exec_create checks them (a CUDA backend, the worker's own rank). For a
 * driver that makes the communicators after its executors (a test's
 * in-process pipeline); between runs only. Returns 0 or PT_EINVAL, leaving
 * the executor unchanged. */
int pt_exec_set_nccl(pt_exec *ex, struct pt_nccl *nccl, struct pt_nccl *nccl_replicas,
                     pt_error *err);

/* Frees what the executor allocated (back to the net's arena). Waits (bounded
 * by the communicator's timeout) for an all-reduce still in flight on the
 * collective. NULL-safe; sets *ex_p = NULL. */
void pt_exec_destroy(pt_exec **ex_p);

/* Per-run figures. */
typedef struct pt_exec_result {
    int64_t ops;     /* ops executed */
    int windows;     /* iterations covered (prog->window_count) */
    double loss_sum; /* over the run's FWDs on this worker (last stage only) */
    int64_t loss_count;
    int versions_peak; /* most weight arrays held at once (current + kept + stashes) */
    int64_t busy_ns;   /* time in FWD/RECOMPUTE/BWD/OPT_STEP */
    int64_t wall_ns;   /* the whole run */
} pt_exec_result;

/* Executes the worker's ops once, with global batches starting at
 * iteration_base. res (may be NULL) receives the run's figures. Returns 0, or
 * the first error with err naming the worker and the op: PT_ETIMEOUT (a peer
 * did not send, or an all-reduce did not finish, within the timeout),
 * PT_ESTATE (stopped through cfg->stop), the feed's error, PT_ERANGE (a token
 * id or label out of range), PT_EIO. After an error the executor is left
 * mid-program: call pt_exec_reset before running again. */
int pt_exec_run(pt_exec *ex, int64_t iteration_base, pt_exec_result *res, pt_error *err);

/* Returns to the state between runs after a failed run: releases the net's
 * slots in flight, stashed and kept versions and pending buffers, zeroes the
 * gradient buffers, waits for (or gives up on, after the timeout) an
 * all-reduce in flight. The parameters keep whatever the last completed
 * OPT_STEP left. */
void pt_exec_reset(pt_exec *ex);

/* Loss of window w (0..windows-1) of the last run on this worker: the sum of
 * -log p over its label rows and their count (0, 0 when the worker has no
 * loss or w is out of range). */
void pt_exec_window_loss(const pt_exec *ex, int w, double *sum, int64_t *count);

/* The needs found at create. */
const pt_exec_needs *pt_exec_get_needs(const pt_exec *ex);

/* Gradient buffer i (0..grad_buffers-1; 0 is the net's own), for tests. */
float *pt_exec_grad_buffer(pt_exec *ex, int i);

/* FNV-1a 64 of count floats' bytes (host pointer): the weights digest. */
uint64_t pt_exec_digest(const float *x, int64_t count);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t pt_exec_now_ns(void);

#endif
