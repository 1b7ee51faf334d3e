/* The turn of the workers of one host (planner/schedule.h "Hosts"): the model
 * chunks an interleaved program puts on one device. Each chunk keeps its own
 * executor (its net, optimizer, messages and all-reduces), run on its own
 * thread, but the executors take turns: before an op a worker waits until
 * that op is the host's next (prog->host_ops), and after it hands the turn on.
 * So the device runs one op at a time in the schedule's interleaved order,
 * exactly as the simulator times it, and a worker blocked in a receive holds
 * the device back as the program says.
 *
 * A host object is shared by its workers' threads (all calls are
 * thread-safe); pt_exec_config.host names it (runtime/executor.h). */
#ifndef PT_RUNTIME_EXEC_HOST_H
#define PT_RUNTIME_EXEC_HOST_H

#include <stdatomic.h>

#include "planner/schedule.h"
#include "protocol/error.h"

typedef struct pt_exec_host pt_exec_host;

/* The turn of host `host` of prog (prog->host_count > 0; borrowed, must
 * outlive the object). Returns 0 and *out, PT_EINVAL (no such host) or
 * PT_ENOMEM. */
int pt_exec_host_new(const pt_program *prog, int host, pt_exec_host **out, pt_error *err);
/* NULL-safe; sets *h_p = NULL. No thread may be waiting in it. */
void pt_exec_host_free(pt_exec_host **h_p);

/* Back to the host's first op, clearing an abort: call before every run,
 * while no worker of the host runs. */
void pt_exec_host_rewind(pt_exec_host *h);

/* Blocks until op `op_index` (an index into prog->ops) is the host's next op.
 * Returns 0, or PT_ESTATE when the host was aborted or `stop` (may be NULL)
 * became nonzero while waiting, or PT_EINVAL when op_index is not the host's
 * (err says which). */
int pt_exec_host_take(pt_exec_host *h, int op_index, const atomic_int *stop, pt_error *err);
/* The op taken has run: the turn passes to the host's next op. */
void pt_exec_host_give(pt_exec_host *h);
/* A worker of the host failed: every waiting and later take returns
 * PT_ESTATE until the next rewind. */
void pt_exec_host_abort(pt_exec_host *h);

#endif
