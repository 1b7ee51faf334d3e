/* Discrete-event simulator: runs a schedule program on the cost model.
 *
 * Every worker has a compute lane (FWD, BWD, RECOMPUTE, OPT_STEP), a
 * communication lane for point-to-point sends, and a collective stream for
 * all-reduces (as NCCL runs collectives on their own stream), so transfers
 * overlap compute as on a GPU with copy engines. Ops are issued in program
 * order:
 * - a compute op starts when the worker reached it and its compute lane is
 *   free; the worker goes on when it ends;
 * - a SEND starts when the worker reached it and its comm lane is free; the
 *   worker goes on at once (unless the profile says sends hold it); the
 *   data arrives at the receiver pt_cost_recv_wake_s after the send ends
 *   (latency + bytes/bandwidth of the link; the wake-up a calibration
 *   measured, 0 otherwise); the receiver's lanes are not used;
 * - a RECV ends when the worker reached it and the data has arrived; it
 *   occupies no lane (PT_LANE_WAIT);
 * - an ALLREDUCE starts when every replica of the stage reached it and the
 *   stage's previous all-reduce ended, and lasts the ring time
 *   (pt_cost_allreduce_s); a synchronous one holds the worker until it ends,
 *   an asynchronous one lets it go on until the matching AR_WAIT.
 * No lane is shared between workers, so start times follow from dependencies
 * alone: the simulation visits every op once, O(ops), with no allocation once
 * the pt_sim has grown to the program's size (on shared cores, below: a few
 * such passes, and the stretch's scratch is allocated per pass). Link
 * contention between different pairs of workers is not modelled.
 *
 * Shared cores: when the topology says a node's devices share C cores
 * (pt_device.node_cores, "cores" in the file), its workers' compute ops are
 * stretched by how many of them compute at once: at a moment when n workers
 * (hosts) of the node compute, each progresses at min(1, C / n) of its
 * speed (the OS shares the cores evenly). The simulator keeps its one-visit
 * timeline by giving each worker one stretch factor, the mean of
 * max(1, n(t) / C) over its own compute time (pt_core_stretch), found as a
 * fixed point: simulate with no stretch, measure every worker's stretch on
 * that timeline, simulate again with it, until no stretch changes by more
 * than 0.001 (at most 8 passes; each is O(ops log ops)). A pipeline's bubble
 * so gives its cores to the others: W workers on C cores are slowed by W / C
 * only when all of them compute all the time (data-parallel replicas in
 * lockstep), by less in a pipeline whose stages wait for each other.
 *
 * Hosts (interleaved placement): the workers of one host share its compute
 * and comm lanes and issue their ops in the host's order (prog->host_ops),
 * a blocked op holding the host back; memory, busy time and bubble are also
 * summed per host (pt_sim_host), the device's view.
 *
 * Memory is tracked per worker by the events, in program order: weights,
 * optimizer state, message buffers and the backward scratch are fixed;
 * activations (outputs and saved bytes) are allocated
 * by FWD (only the stage input and output with recomputation; RECOMPUTE adds
 * the rest) and freed by BWD; a gradient buffer is held from the first BWD
 * accumulating into it until the OPT_STEP that applies it (two at once in
 * pipesgd: the delayed gradient and the accumulating one); weight versions
 * held = one stash per in-flight micro-batch whose FWD has PT_OPF_STASH, plus
 * the versions a later op on that worker still reads, plus the newest one (an
 * OPT_STEP updates in place when nothing reads the old newest version any
 * more; versions 0..initial_versions-1 share one buffer; a stashing FWD that
 * is the last reader of a kept version takes that array over instead of
 * copying it). These are the runtime's rules (runtime/executor.h), so the
 * peaks are what its arenas measure; the analytic model of cost.h gives the
 * same peaks. */
#ifndef PT_PLANNER_SIMULATE_H
#define PT_PLANNER_SIMULATE_H

#include <stdint.h>

#include "planner/cost.h"
#include "planner/schedule.h"
#include "protocol/error.h"

/* One op's place on the timeline. events[i] describes prog->ops[i]. */
typedef struct pt_sim_event {
    double start, end; /* seconds from the start of the program */
    int32_t worker;
    uint8_t lane; /* pt_lane */
} pt_sim_event;

typedef struct pt_sim_worker {
    double busy_s;       /* compute-lane time inside [measure_lo, measure_hi) */
    double comm_s;       /* comm-lane time inside it */
    double busy_frac;    /* pt_op_busy_frac(busy_s, measure_hi - measure_lo): protocol/op.h */
    double bubble_frac;  /* 1 - busy_frac */
    double end_s;        /* end of its last op */
    pt_mem peak;         /* peak of each category; total = peak of the running sum */
    int64_t limit;       /* its device's memory */
    int peak_inflight;   /* micro-batches with activations held at once */
    int peak_versions;   /* weight versions held at once (live + stashed) */
    double core_stretch; /* >= 1: its compute ops' stretch from shared cores (1: none) */
} pt_sim_worker;

/* One device running several workers as one sequence (a host of an
 * interleaved program, planner/schedule.h); for other programs every worker
 * is its own host with the worker's figures. */
typedef struct pt_sim_host {
    int device;
    int worker_count;   /* workers (model chunks) on it */
    double busy_s;      /* compute time of its workers inside [measure_lo, measure_hi) */
    double busy_frac;   /* over that interval; its compute lane is shared, so <= 1 */
    double bubble_frac; /* 1 - busy_frac */
    int64_t peak_total; /* peak of the sum of its workers' memory */
    int64_t limit;      /* its device's memory */
    int peak_inflight;  /* chunk micro-batches with activations held at once, all chunks */
    int64_t cur_total;  /* running sums while simulating */
    int cur_inflight;
} pt_sim_host;

typedef struct pt_sim_result {
    double makespan_s;  /* end of the last op */
    double iter_s;      /* synchronous: makespan; asynchronous: steady-state time per window,
                           (finish[W-2] - finish[0]) / (W-2) for W >= 3 windows, where
                           finish[w] is the end of the last op of window w */
    double throughput;  /* samples per second: mb_per_window * mb_size / iter_s */
    double bubble_frac; /* mean of the hosts' bubble fractions (the workers' when every
                           worker is alone on its device) */
    double measure_lo, measure_hi; /* interval busy/bubble are measured over: [0, makespan) or
                                      the steady windows [finish[0], finish[W-2]) */
    int fits;         /* 1 when every host's peak total is within its device's memory */
    int worst_worker; /* worker with the largest peak total / limit */
    int worker_count;
    pt_sim_worker *workers; /* owned by the pt_sim; valid until its next run or free */
    int event_count;
    pt_sim_event *events; /* owned by the pt_sim; one per op, in op order */
    int host_count;       /* pt_sched_host_count(prog) */
    pt_sim_host *hosts;   /* owned by the pt_sim */
} pt_sim_result;

/* One worker's compute interval on a node whose devices share `cores`
 * cores (pt_core_stretch). */
typedef struct pt_core_span {
    double start, end;
    int worker; /* 0..workers-1 */
    int node;   /* spans of one node share its cores */
    int cores;  /* the node's cores, >= 1 */
} pt_core_span;

/* The shared-core stretch of each worker: over its spans, the mean of
 * max(1, n(t) / cores), n(t) the node's spans covering t (a worker's own
 * spans must not overlap). stretch[0..workers) gets it, 1 for a worker
 * without spans. Reorders spans. Used by the simulator on its timeline and by
 * calibration on a measured one (planner/calibrate.h). 0 or PT_ENOMEM. */
int pt_core_stretch(pt_core_span *spans, int64_t n, int workers, double *stretch);

/* Opaque simulator state: buffers grown to the largest program seen. */
typedef struct pt_sim pt_sim;

/* Returns 0 or PT_ENOMEM; on failure *out is NULL. */
int pt_sim_new(pt_sim **out);
/* NULL-safe; sets *sim_p = NULL. Invalidates results it returned. */
void pt_sim_free(pt_sim **sim_p);

/* Simulates prog on cost. Each op of a worker after its first starts no
 * earlier than pt_cost_op_overhead_s after the one before it was issued (the
 * runtime's time between ops; 0 unless the profile was calibrated). On
 * success fills *out (arrays owned by sim).
 * Returns PT_EINVAL (err names the op) when a SEND/RECV is unmatched or a
 * worker's device is outside the topology, PT_EDEADLOCK (err names the
 * blocked workers and ops) when the program cannot complete, PT_ENOMEM. */
int pt_sim_run(pt_sim *sim, const pt_program *prog, const pt_cost *cost, pt_sim_result *out,
               pt_error *err);

/* Builds the program of plan and simulates it in one call, reusing prog's
 * and sim's buffers (for the console's re-simulation on every edit and for
 * planners that check a candidate exactly). Same errors as pt_sched_build and
 * pt_sim_run. */
int pt_sim_plan(pt_sim *sim, const pt_plan *plan, const pt_cost *cost, const pt_sched_opts *opts,
                pt_program *prog, pt_sim_result *out, pt_error *err);

#endif
