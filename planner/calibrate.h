/* Calibration: fit the cost model to what a run measured.
 *
 * From a run record's op events (protocol/record.h) of one plan generation,
 * fits (docs/formats.md, "Calibrated profiles"):
 * - per stage, a factor for forward, backward and recompute time: the
 *   measured FWD (BWD, RECOMPUTE) of the stage's replicas over the base
 *   profile's prediction for the same rows on the same device (with the
 *   simulator's shared-core slowdown where the topology's node shares
 *   cores, so the fitted times are per op on cores of its own). Every layer
 *   of the stage is scaled by it, so the base profile gives the relative
 *   weights of the layers inside a stage and the stage's measured compute is
 *   reproduced exactly;
 * - the optimizer step's streaming bandwidth from the OPT_STEP durations
 *   (least squares through the origin of time against bytes touched);
 * - point-to-point latency and bandwidth, per link class (intra-node,
 *   inter-node), by least squares of SEND_* durations against bytes;
 * - all-reduce latency and bandwidth from the ALLREDUCE ops (the shortest
 *   replica's duration of each collective, which excludes waiting for the
 *   others), by least squares on the ring formula of planner/cost.h;
 * - whether sends hold their worker (the op after a send starts only once
 *   the send has ended: the CPU runtime's sends copy and queue on the
 *   worker's thread); the profile then says runtime.sends_hold, and the
 *   simulator keeps the worker until its send ends;
 * - the receiver's wake-up: over the receives that started before their
 *   message's send ended (they waited), the mean time from the send's end to
 *   the receive's, on the console's clock (the agents' clocks less their
 *   offsets); the profile says runtime.recv_wake_ms, and the simulator's
 *   waiting receives return that long after their send. On 2 cores it is
 *   about 0.1 ms with 2 agents and 0.6-1.3 ms with 3 or 4: with more
 *   runnable agents than cores a woken receiver waits for a core;
 * - a per-op overhead: the time between consecutive ops of a worker
 *   that is not spent in an op or waiting (gaps between the end of one
 *   blocking op -- compute, receive, synchronous all-reduce, AR_WAIT, and
 *   sends when they hold the worker -- and
 *   the start of the next, divided by the ops issued in between: the
 *   simulator charges it before every op after the first).
 * Every figure is robust to a shared machine, whose load stretches some
 * iterations several times over: it is fitted on the steps whose slowest
 * worker's span lies between the quartiles (the middle half, the typical
 * iteration; the run's measured_iteration_ms is the median iteration), as
 * the mean over those steps of each step's mean. Ops are taken in the order
 * their events arrived (the order a worker issued them). The
 * first `skip_steps` steps of each worker are warm-up and left out.
 *
 * Pure: reads the record, the base profile and the topology, writes a new
 * profile; no files, no clock. */
#ifndef PT_PLANNER_CALIBRATE_H
#define PT_PLANNER_CALIBRATE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/profile.h"
#include "protocol/record.h"
#include "protocol/topology.h"

/* Steps left out at the start of a generation when the caller says -1:
 * the first iteration allocates, faults pages in and warms caches. */
#define PT_CAL_SKIP_STEPS_DEFAULT 1

typedef struct pt_cal_opts {
    int64_t gen;      /* generation to fit; -1: the newest one with op events */
    int skip_steps;   /* warm-up steps to leave out; -1: PT_CAL_SKIP_STEPS_DEFAULT, but
                         never so many that no step is left */
    const char *run;  /* written as origin.run (NULL: "") */
    const char *base; /* written as origin.base (NULL: "") */
    const char *date; /* written as origin.date (NULL: "") */
} pt_cal_opts;

/* A fitted link: how it was fitted, from how many ops. */
typedef enum pt_cal_link_how {
    PT_CAL_LINK_NONE,    /* no ops: the topology's link is kept */
    PT_CAL_LINK_FIT,     /* latency and bandwidth by least squares */
    PT_CAL_LINK_BW_ONLY, /* one size only: the latency kept, the bandwidth fitted */
    PT_CAL_LINK_FLAT     /* time did not grow with bytes: latency = mean time, bandwidth kept */
} pt_cal_link_how;

typedef struct pt_cal_link {
    pt_cal_link_how how;
    int ops;      /* ops (or collectives) fitted */
    pt_link link; /* bandwidth bytes/s, latency s */
    double rms_s; /* root mean square residual of the fit */
} pt_cal_link;

typedef struct pt_cal_stage {
    int first, last; /* layers [first, last) */
    int replicas;
    int fwd_ops, bwd_ops, rec_ops, opt_ops;
    double fwd_ms, bwd_ms, rec_ms, opt_ms;        /* measured means, per replica op */
    double fwd_base_ms, bwd_base_ms, rec_base_ms; /* the base profile's prediction */
    double fwd_scale, bwd_scale, rec_scale;       /* applied to the stage's layers */
} pt_cal_stage;

#define PT_CAL_STAGES_MAX 4096

/* What was fitted (filled by pt_calibrate; release with pt_cal_fit_clear). */
typedef struct pt_cal_fit {
    int64_t gen;
    int64_t first_step, last_step; /* range of the steps used */
    int64_t steps_used;            /* steps fitted (the middle half, after the warm-up) */
    int64_t events;                /* op events used */
    int stage_count;
    pt_cal_stage *stages; /* owned */
    pt_cal_link intra, inter, allreduce;
    double op_overhead_ms;
    int64_t gaps;           /* ops whose gap before them was measured */
    double opt_bytes_per_s; /* 0: no OPT_STEP measured */
    int sends_hold;         /* 1: the op after a send started only when it ended (>= 90 %) */
    double recv_wake_ms;    /* mean time from a send's end to its waiting receive's end */
    int64_t recv_waits;     /* receives that waited for their message (fitted) */
} pt_cal_fit;

/* Fits a calibrated profile to the op events of one generation of rec.
 * base gives the layers, their relative weights and bytes (it must match the
 * plan's model: same layer count); topo the devices' speeds and link
 * classes. On success *out owns a new profile (source and origin.kind
 * "calibrated") and *fit (may be NULL) says what was fitted. Returns
 * PT_ENOTFOUND (err says so) when the record has no op events or no plan for
 * the generation, PT_EINVAL when the plan does not match base or topo, or
 * a stage has no FWD or BWD measured, PT_ENOMEM. On failure *out is NULL and
 * *fit is empty. */
int pt_calibrate(const pt_record *rec, const pt_profile *base, const pt_topology *topo,
                 const pt_cal_opts *opts, pt_profile **out, pt_cal_fit *fit, pt_error *err);

/* A copy of topo whose links are the fitted ones: intra and inter from the
 * point-to-point fits where they were fitted; where a class has no
 * point-to-point ops, from the all-reduce fit when there is one (a
 * data-parallel run) and only intra-node ops were seen. Returns 0 or PT_ENOMEM;
 * *out owns the copy. */
int pt_cal_topology(const pt_cal_fit *fit, const pt_topology *topo, pt_topology **out,
                    pt_error *err);

/* Carries a calibration over to a plan whose agents run in other conditions
 * (another BLAS thread count: a plan with more or fewer agents on this
 * machine). cal was fitted on the base profile cal_base; onto is a profile
 * measured in the new plan's conditions (same model). Each layer of the
 * result is cal's layer times one factor per kind (forward, backward,
 * recompute) for the whole model: onto's total over cal_base's, or 1 when
 * the two were measured on the same device string (the same conditions:
 * their differences are noise). A whole-model factor keeps one layer's
 * measurement noise in either profile from moving the result. The split
 * backward follows onto's input/weight shares. So what calibration learnt
 * about running in place (stage compute, the per-op overhead, the
 * optimizer's bandwidth, whether sends hold) is kept and what the thread
 * count changes comes from onto. origin and the fitted runtime figures are
 * cal's; the bytes are onto's. On success *out owns a new profile;
 * PT_EINVAL when the three profiles are not of one model with one layer
 * count and micro-batch, PT_ENOMEM. */
int pt_cal_rebase(const pt_profile *cal, const pt_profile *cal_base, const pt_profile *onto,
                  pt_profile **out, pt_error *err);

/* Frees what fit owns and zeroes it. NULL-safe. */
void pt_cal_fit_clear(pt_cal_fit *fit);

/* Name of a link fit ("none", "fit", "bandwidth-only", "flat"). */
const char *pt_cal_link_how_name(pt_cal_link_how how);

#endif
