/* An in-process pipeline: every worker of a schedule program as a thread of
 * this process, each with its own net, arena, optimizer, data feed and
 * communicator, the communicators connected over ZeroMQ (inproc by default).
 * Used by the tests and by `--local-threads` runs. Each worker is assembled by
 * runtime/stage.h (pt_stage_create, then pt_stage_wire over its
 * communicators), the same code an agent runs for its own workers over tcp.
 *
 * Parameters start from the net's deterministic initialisation from
 * init_seed, so every replica of a stage starts equal and a stage starts with
 * the weights those layers have in the whole model. */
#ifndef PT_RUNTIME_PIPELINE_H
#define PT_RUNTIME_PIPELINE_H

#include <stdint.h>

#include "planner/schedule.h"
#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "runtime/backend_select.h"
#include "runtime/data.h"
#include "runtime/executor.h"

#define PT_PIPELINE_TIMEOUT_MS 30000 /* default bound of every receive and all-reduce */

typedef enum pt_transport {
    PT_TRANSPORT_INPROC, /* inproc://, one shared ZeroMQ context */
    PT_TRANSPORT_IPC,    /* ipc:// sockets under /tmp */
    PT_TRANSPORT_TCP     /* tcp://127.0.0.1, ephemeral ports */
} pt_transport;

typedef struct pt_pipeline_config {
    const pt_model_spec *spec; /* read during create only */
    const pt_program *prog;    /* borrowed; must outlive the pipeline and stay unchanged */
    pt_optim_spec optim;       /* every worker's optimizer */
    uint64_t init_seed;        /* initial parameters (pt_net_config.seed) */
    const pt_dataset *data;    /* borrowed; must outlive the pipeline */
    uint64_t data_seed;        /* data order (runtime/feed.h) */
    int timeout_ms;            /* 0: PT_PIPELINE_TIMEOUT_MS */
    pt_transport transport;
    pt_exec_op_fn on_op; /* NULL, or called after every op, from the worker threads
                            concurrently: must be thread-safe */
    void *user;
    int digest; /* pt_exec_config.digest */
    /* Where the workers compute: NULL, the CPU backend; else every worker opens
     * its own backend on that device (on a GPU: its own stream and cuBLAS
     * handle, so several stages share the one GPU and exchange tensors through
     * host copies over ZeroMQ). */
    const pt_device_spec *device;
    /* For tests: NULL, or one backend every worker shares (it must be safe to
     * call from several threads at once, as the CPU backend is); overrides device. */
    const pt_backend *backend;
    /* Programs with hosts (interleaved): 1, one communicator rank per device that
     * its chunks' executors share, as an agent hosting all of its device's chunks
     * runs them (runtime/exec_host.h); 0, one rank per chunk worker. */
    int host_comm;
    /* Each shared-memory ring between two workers' communicators, in bytes
     * (pt_comm_config.shm_ring_bytes): 0, the comm default (8 MiB, mapped
     * populated). Tests whose messages are small pass less: every ring of
     * every pipeline they build is zeroed by the kernel as it is mapped. */
    size_t shm_ring_bytes;
} pt_pipeline_config;

typedef struct pt_pipeline pt_pipeline;

/* Builds every worker: its stage (runtime/stage.h: a net for its layers, own
 * arena, max_batch = its rows, max_slots = the program's micro-batches in
 * flight, recompute as planned; an optimizer; a data feed on stage 0 and the
 * last stage), communicators (a second one behind a pt_collective for workers with
 * asynchronous all-reduces), connected all-to-all, and its executor. On
 * success *out owns the pipeline; on failure *out is NULL and err names the
 * worker and the reason (PT_EINVAL, PT_ENOMEM, PT_EIO). */
int pt_pipeline_create(const pt_pipeline_config *cfg, pt_pipeline **out, pt_error *err);

/* Joins nothing (no thread outlives pt_pipeline_run), frees every worker.
 * NULL-safe; sets *pp_p = NULL. */
void pt_pipeline_destroy(pt_pipeline **pp_p);

/* Runs the program once on every worker, one thread each, with global batches
 * from iteration_base (pt_exec_run). Returns 0, or the first worker's error
 * (the others are stopped at their next op; a worker blocked in a receive
 * gives up after the timeout) with err naming the worker and op; then every
 * executor is reset, and since messages of the failed run may still be
 * queued, the pipeline should be destroyed rather than run again. */
int pt_pipeline_run(pt_pipeline *pp, int64_t iteration_base, pt_error *err);

/* Mean loss of window w (0..window_count-1) of the last run: the sum of the
 * last stage's replicas' losses over their label rows; 0 when out of range. */
double pt_pipeline_window_loss(const pt_pipeline *pp, int w);

int pt_pipeline_worker_count(const pt_pipeline *pp);
/* Worker w's objects (owned by the pipeline), or NULL when w is out of range. */
pt_net *pt_pipeline_net(pt_pipeline *pp, int w);
pt_optim *pt_pipeline_optim(pt_pipeline *pp, int w);
pt_exec *pt_pipeline_exec(pt_pipeline *pp, int w);
/* The figures of worker w's last run (zeroed when w is out of range). */
pt_exec_result pt_pipeline_result(const pt_pipeline *pp, int w);

/* Copies layer `layer` (global index) of replica `replica` of the stage that
 * holds it into host (count floats). Returns 0, PT_ERANGE (no such layer or
 * replica) or PT_EINVAL (count differs from the layer's parameter count). */
int pt_pipeline_get_layer(pt_pipeline *pp, int layer, int replica, float *host, int64_t count);

#endif
