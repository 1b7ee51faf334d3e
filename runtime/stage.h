/* One worker of a schedule program (a stage replica, or a model chunk of
 * one), assembled: the one place that turns a
 * program's worker into its net, optimizer, data feed and executor, for the
 * agent (agent/worker_plane.c, one worker or several model chunks per process)
 * and the in-process pipeline (runtime/pipeline.c, a thread per worker).
 *
 * Two steps, because the executor needs the data plane and the data plane
 * is wired after the stage is built (docs/protocol.md, "Generations on the
 * data plane"): pt_stage_create builds what the worker computes with
 * (from pt_exec_needs_of: its layers, batch rows, in-flight slots,
 * recomputation, feed); pt_stage_wire then makes its executor over the
 * communicators. */
#ifndef PT_RUNTIME_STAGE_H
#define PT_RUNTIME_STAGE_H

#include <stdint.h>

#include "planner/schedule.h"
#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/backend.h"
#include "runtime/data.h"
#include "runtime/executor.h"
#include "runtime/net.h"
#include "runtime/optim.h"

typedef struct pt_stage_config {
    const pt_program *prog;     /* borrowed; outlives the stage */
    int worker;                 /* index into prog->workers */
    const pt_model_spec *spec;  /* borrowed */
    const pt_optim_spec *optim; /* copied by the optimizer */
    const pt_backend *backend;  /* borrowed; NULL: the CPU backend */
    uint64_t init_seed;         /* the net's initial weights */
    const pt_dataset *data;     /* borrowed; required when the worker feeds inputs
                                   or labels (pt_stage_needs_data) */
    uint64_t data_seed;         /* the feed's sample order */
} pt_stage_config;

/* What the executor is wired to; every pointer borrowed (see pt_exec_config). */
typedef struct pt_stage_links {
    pt_comm *comm;
    pt_collective *coll;
    const int *ranks;
    struct pt_exec_host *host;
    struct pt_nccl *nccl, *nccl_replicas;
    pt_exec_op_fn on_op;
    void *user;
    const atomic_int *stop;
    int digest;
} pt_stage_links;

typedef struct pt_stage_replica pt_stage_replica;

/* 1 when the program's worker reads inputs or labels (give cfg->data), 0
 * not, <0 when its ops do not dry-run (err says why). */
int pt_stage_needs_data(const pt_program *prog, int worker, pt_error *err);

/* Builds the worker's net, optimizer and feed. On success *out owns a new
 * stage; on failure *out is NULL and err names what did not fit. */
int pt_stage_create(const pt_stage_config *cfg, pt_stage_replica **out, pt_error *err);

/* Makes the stage's executor over the links (once). 0 or the executor's
 * error; PT_ESTATE when it has one already. */
int pt_stage_wire(pt_stage_replica *st, const pt_stage_links *links, pt_error *err);

/* Frees the executor only, so that the communicators it sent from can be
 * closed before the buffers zero-copy sends may still reference (the net's)
 * are freed by pt_stage_destroy. NULL-safe; it can be wired again after. */
void pt_stage_unwire(pt_stage_replica *st);

/* The stage's parts (owned by the stage; the executor NULL before wiring). */
const pt_exec_needs *pt_stage_needs(const pt_stage_replica *st);
pt_net *pt_stage_net(pt_stage_replica *st);
pt_optim *pt_stage_optim(pt_stage_replica *st);
pt_exec *pt_stage_exec(pt_stage_replica *st);
struct pt_feed *pt_stage_feed(pt_stage_replica *st); /* NULL: the worker reads no data */

/* Frees the executor, then optimizer, net and feed. NULL-safe; sets *st_p = NULL. */
void pt_stage_destroy(pt_stage_replica **st_p);

#endif
