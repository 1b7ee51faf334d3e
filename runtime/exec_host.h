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

/* ---- one communicator rank per device ---------------------------------
 *
 * An agent that hosts every chunk of its device (docs/architecture.md,
 * "Several model chunks per device") has one data-plane rank, the host's
 * index, that all its chunks' executors share (pt_exec_config.ranks maps each
 * worker to pt_sched_host_of; they take turns, so the communicator is used by
 * one thread at a time, the turn's lock ordering the hand-overs). Two chunks
 * of one device then exchange messages with the same pair of ranks, so
 * everything that names a message carries the chunk as well: a transfer's
 * tag part holds, above the row, the chunk of the boundary it crosses (the
 * lower stage / ranks: the same number on both sides), and each chunk's
 * all-reduces number their rings from chunk << PT_EXEC_HOST_AR_CHUNK_SHIFT.
 * Programs without hosts keep the plain row and ids, on the wire as before. */
#define PT_EXEC_HOST_ROW_BITS       18 /* rows of a micro-batch in an interleaved tag */
#define PT_EXEC_HOST_AR_CHUNK_SHIFT 24 /* all-reduce ids of chunk c start at c << this */

/* The chunk of worker w's stage (0 for a program without hosts). */
static inline int pt_exec_host_chunk(const pt_program *p, int w)
{
    return p->host_count > 0 && p->rank_count > 0 ? p->workers[w].stage / p->rank_count : 0;
}

/* The tag part of a transfer of rows from row_lo between worker w and peer. */
static inline uint32_t pt_exec_host_tag_part(const pt_program *p, int w, int peer, int row_lo)
{
    if (p->host_count <= 0 || p->rank_count <= 0)
        return (uint32_t)row_lo;
    int a = p->workers[w].stage, b = p->workers[peer].stage;
    uint32_t chunk = (uint32_t)((a < b ? a : b) / p->rank_count);
    return (chunk << PT_EXEC_HOST_ROW_BITS) | (uint32_t)row_lo;
}

#endif
