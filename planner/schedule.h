/* Schedule programs (DESIGN.md "one schedule, three consumers").
 *
 * A plan plus a schedule kind compiles into a program: for every stage replica
 * (a "worker": stage s, replica r, device d) the ordered ops it performs. The
 * simulator (planner/simulate.h) times the program on the cost model, the
 * runtime executes it unchanged, the console draws both.
 *
 * Execution contract (what the validator checks and the runtime implements):
 * - A worker executes its ops strictly in program order.
 * - SEND_* is asynchronous: it queues the rows and the worker goes on. RECV_*
 *   blocks until the matching send has arrived. A SEND matches the RECV with
 *   the same (src worker, dst worker, ACT|GRAD, mb, row_lo, row_hi); both carry
 *   the same bytes.
 * - ALLREDUCE is a collective of all replicas of one stage (group = stage);
 *   the k-th ALLREDUCE of every replica of a stage is the same collective.
 *   Synchronous ALLREDUCE blocks the worker until it completes; one flagged
 *   PT_OPF_ASYNC runs in the background and the next AR_WAIT on that worker
 *   (FIFO) blocks until it completes. Collectives of one stage run one at a
 *   time, in program order.
 * - Gradient buckets (PyTorch DDP's overlap): an ALLREDUCE reduces the
 *   gradients of layers [layer_lo, layer_hi) (layer_hi <= layer_lo: all of
 *   the worker's layers). The reductions of one OPT_STEP are issued last
 *   layer first, in contiguous buckets covering the worker's layers. An
 *   asynchronous bucket ALLREDUCE that follows a BWD with only SEND_GRAD and
 *   ALLREDUCE ops between is "hooked" to that BWD: it may start as soon as
 *   the BWD has finished the backward of the bucket's layers (the backward
 *   runs last layer first), i.e. while the BWD still computes the earlier
 *   layers; any other ALLREDUCE starts when the worker reaches it.
 * - Loading the input is part of FWD on stage 0; the loss is part of FWD on
 *   the last stage (and its gradient the start of BWD there).
 *
 * - Hosts (interleaved placement, docs/architecture.md): when host_count > 0
 *   several workers share one device and run as one sequence: host h issues
 *   the ops host_ops[host_begin[h] .. host_begin[h+1]) in that order, one at
 *   a time, each op being executed by the worker that owns it (a blocking
 *   RECV or collective blocks the whole host). Per worker the host order is
 *   its program order. When host_count is 0 every worker is alone on its
 *   device.
 *
 * Replicated stages use DAPPLE's split-concat by default: a micro-batch of
 * b samples entering a stage of r replicas is split into r contiguous row
 * ranges (pt_sched_rows); replica j of stage s sends to replica k of stage s+1
 * exactly the rows in both ranges (one-to-many, many-to-one, many-to-many),
 * gradients flow back the same way; every replica runs every micro-batch.
 * A kind with PT_SCHED_OPT_ROUND_ROBIN on a round-robin plan
 * (pt_plan_round_robin; prog->round_robin) runs PipeDream's replication
 * instead: replica j of a stage of r replicas runs whole micro-batches
 * j, j+r, j+2r, ... (all b rows; pt_sched_owns), micro-batch k goes from
 * replica k mod r_s of stage s to replica k mod r_{s+1} of stage s+1, and the
 * replicas' all-reduce and step cover the round [t·r, (t+1)·r) of micro-batches
 * they ran one each of. The program then covers a multiple of every stage's r
 * micro-batches.
 *
 * Weight versions: FWD/BWD/RECOMPUTE carry the version they read, OPT_STEP the
 * version it produces (it reads the newest version on that worker and applies
 * the gradients of micro-batches [mb, mb_end)). Versions 0 ..
 * initial_versions-1 exist at the start and all hold the initial weights. */
#ifndef PT_PLANNER_SCHEDULE_H
#define PT_PLANNER_SCHEDULE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/op.h"
#include "protocol/plan.h"
#include "protocol/profile.h"

/* Op kinds, their names, lanes and facts: protocol/op.h. */

enum {
    /* ALLREDUCE: runs in the background; a later AR_WAIT blocks on it (Pipe-SGD). */
    PT_OPF_ASYNC = 1,
    /* FWD/RECOMPUTE/BWD: weight stashing (PipeDream). The micro-batch's stash
     * holds the weight array its FWD read (no copy: an OPT_STEP steps out of
     * place while a stash holds the live weights); RECOMPUTE and BWD read the
     * stash; the stash lets go when the BWD ends. */
    PT_OPF_STASH = 2,
};

typedef struct pt_op {
    uint8_t kind;  /* pt_op_kind */
    uint8_t flags; /* PT_OPF_* */
    uint16_t pad_; /* zero */
    int32_t mb;    /* micro-batch id in [0, program mb_count); ALLREDUCE/AR_WAIT/OPT_STEP: first
                      covered micro-batch */
    int32_t
        mb_end; /* ALLREDUCE/AR_WAIT/OPT_STEP: covered micro-batches are [mb, mb_end); else mb+1 */
    int32_t version; /* read (FWD/BWD/RECOMPUTE), produced (OPT_STEP), or read by the covered
                        BWDs (ALLREDUCE/AR_WAIT); -1 for SEND/RECV */
    int32_t peer; /* SEND/RECV: the other worker; ALLREDUCE/AR_WAIT: the group (stage); else -1 */
    int32_t row_lo, row_hi; /* samples of micro-batch mb covered; for SEND/RECV the rows moved */
    int64_t bytes; /* SEND/RECV: bytes moved; ALLREDUCE: gradient bytes per replica; OPT_STEP:
                      parameter bytes; else 0 */
    int32_t layer_lo, layer_hi; /* ALLREDUCE: the bucket's layers; 0, 0 (= all the
                                   worker's layers) on every other op */
} pt_op;

typedef struct pt_worker {
    int stage, replica, device;  /* device index in the topology */
    int first, last;             /* layers [first, last) */
    int row_lo, row_hi;          /* this replica's rows of every micro-batch */
    int replica_count;           /* of its stage */
    int recompute;               /* 1: RECOMPUTE precedes every BWD */
    int op_begin, op_end;        /* its ops are prog->ops[op_begin, op_end) */
    int64_t param_bytes;         /* of its layers */
    int64_t in_bytes, out_bytes; /* activation entering / leaving the stage per profile
                                    micro-batch (pt_sched_scale_bytes gives any rows) */
} pt_worker;

/* One gradient bucket of a stage: layers [lo, hi), their parameter bytes. */
typedef struct pt_bucket {
    int lo, hi;
    int64_t bytes;
} pt_bucket;

typedef struct pt_program {
    pt_sched_kind kind;
    char policy;          /* kinds with PT_SCHED_OPT_POLICY: 'A' or 'B' */
    int vertical_sync;    /* kinds with PT_SCHED_OPT_VSYNC */
    int round_robin;      /* 1: replicated stages take whole micro-batches round-robin */
    int synchronous;      /* 1: one iteration ending in a flush (PT_SCHED_SYNCHRONOUS) */
    pt_optim_kind optim;  /* optimizer, for its state and step cost */
    int stage_count;      /* S */
    int worker_count;     /* sum of replicas */
    pt_worker *workers;   /* owned; stage by stage, replica by replica */
    int *stage_worker;    /* owned, stage_count+1 entries: stage s has workers
                             [stage_worker[s], stage_worker[s+1]) */
    int mb_size;          /* samples per micro-batch */
    int mb_per_window;    /* M: micro-batches per iteration / optimizer window */
    int window_count;     /* iterations covered: 1 for synchronous kinds */
    int mb_count;         /* micro-batches covered: mb_per_window * window_count */
    int initial_versions; /* versions 0..initial_versions-1 exist at the start (>= 1) */
    int profile_mb;       /* samples of a profile micro-batch, the unit of the workers' bytes
                             (0: built without a profile, every bytes field 0) */
    int op_count, op_cap; /* ops used / allocated */
    pt_op *ops;           /* owned; worker by worker */
    int64_t bucket_bytes; /* gradient bucket size the program was built with (<= 0: one
                             synchronous all-reduce of the whole stage per step) */
    pt_bucket *buckets;   /* owned, bucket_cap allocated: stage s's buckets, last layer
                             first, are buckets[stage_bucket[s] .. stage_bucket[s+1]) */
    int *stage_bucket;    /* owned, stage_count+1 entries */
    int bucket_cap;
    /* Several model chunks per device (kinds with PT_SCHED_OPT_CHUNKS): the
     * program's stages are the plan's S·v chunk stages, chunk c of pipeline rank
     * d being stage d + c·S, and the workers of one device form a host. */
    int chunks;        /* v: model chunks per device; 1 for every other kind */
    int rank_count;    /* pipeline ranks: stage_count / chunks */
    int host_count;    /* hosts: one per (rank, replica); 0: every worker is its own */
    int *worker_host;  /* owned, worker_count entries: the host of each worker (host_count > 0) */
    int *host_begin;   /* owned, host_count+1 entries */
    int32_t *host_ops; /* owned, op_count entries: every host's ops in issue order */
    int host_cap, host_ops_cap, worker_host_cap;
} pt_program;

/* Generator options. Zeroed = defaults. */
typedef struct pt_sched_opts {
    int microbatches;     /* M per window; 0: plan->microbatch_count */
    int windows;          /* asynchronous kinds: windows (of M micro-batches) covered; 0: enough to
                             reach the steady state, max(PT_SCHED_MIN_WINDOWS, ceil(2S/M) + 2).
                             Synchronous kinds accept only 0 or 1. */
    int64_t bucket_bytes; /* gradient all-reduce buckets: 0: PT_SCHED_BUCKET_BYTES; > 0:
                             this many parameter bytes at least per bucket (pt_sched_bucket_lo);
                             < 0: no overlap, one synchronous all-reduce of the whole stage
                             after its last backward */
} pt_sched_opts;

#define PT_SCHED_MIN_WINDOWS 4
/* Default gradient bucket: PyTorch DDP's bucket_cap_mb = 25. */
#define PT_SCHED_BUCKET_BYTES (25LL << 20)

/* The bucket rule (as DDP's, without its smaller first bucket): walking a
 * stage's layers from the last one down, a bucket closes at the first layer
 * where its parameter bytes reach cap, or at the stage's first layer. Returns
 * the first layer of the bucket that ends at layer hi (first < hi); when the
 * layers left below it hold no parameters they join it (no empty bucket).
 * cap <= 0 or a NULL profile: one bucket, `first`. */
int pt_sched_bucket_lo(const pt_profile *profile, int first, int hi, int64_t cap);

/* One schedule kind as the planner sees it: its facts (protocol/sched_kind.h:
 * name, summary, synchronous, options, in-flight and weight-version formulas)
 * and its generator. Built-in kinds come from PT_SCHED_KIND_LIST; a new
 * built-in kind is one generator file and one line there. */
typedef struct pt_sched_info {
    pt_sched_kind_info facts;
    /* Appends every worker's ops to prog, whose workers, sizes and versions the
     * common code of pt_sched_build has already set up (planner/sched_gen.h has
     * the emitters). 0 or PT_E*. */
    int (*generate)(pt_program *prog, pt_error *err);
} pt_sched_info;

/* The registry entry of a kind; NULL for an invalid kind or one registered
 * with protocol/ alone (pt_sched_kind_register), which has no generator. */
const pt_sched_info *pt_sched_info_of(pt_sched_kind kind);

/* Adds a kind at run time: enters info->facts into the protocol registry (so
 * plan files may name it) and keeps the generator. `info` must have static
 * storage. Returns 0 and the new id in *out, or PT_EINVAL (no generator, or
 * what pt_sched_kind_register refuses) / PT_ERANGE with err naming the
 * reason; nothing is registered on error. Not thread-safe: register at start,
 * before other threads build programs or parse plans. */
int pt_sched_register(const pt_sched_info *info, pt_sched_kind *out, pt_error *err);

/* Rows [*lo, *hi) of replica j among r replicas splitting b samples into
 * contiguous, near-equal ranges (the first b % r ranges are not larger:
 * lo = floor(b*j/r)). */
static inline void pt_sched_rows(int b, int r, int j, int *lo, int *hi)
{
    *lo = (int)((int64_t)b * j / r);
    *hi = (int)((int64_t)b * (j + 1) / r);
}

/* Whether worker x runs micro-batch mb: always under split-concat; under
 * round-robin when mb is its turn (mb mod r = its replica). */
static inline int pt_sched_owns(const pt_program *p, const pt_worker *x, int mb)
{
    return !p->round_robin || mb % x->replica_count == x->replica;
}

/* Bytes of `rows` samples of a tensor of `mb_bytes` bytes per profile
 * micro-batch of `profile_mb` samples (floor). Used for every SEND/RECV so both
 * ends agree. */
static inline int64_t pt_sched_scale_bytes(int64_t mb_bytes, int rows, int profile_mb)
{
    return profile_mb > 0 ? mb_bytes * rows / profile_mb : 0;
}

/* Builds the program of plan->schedule. prog must be zeroed or a program from
 * an earlier build (its buffers are reused, so re-building on every keystroke
 * does not allocate once capacity suffices). profile gives the bytes of
 * activations, gradients and parameters; NULL leaves every bytes field 0.
 * A round-robin program's default window count is the smallest at least the
 * usual one whose micro-batches are a multiple of every stage's replicas.
 * On error prog is left empty (op_count 0, worker_count 0) but keeps its
 * buffers, and err names the field: a stage whose replica count exceeds the
 * micro-batch size (split-concat), 2bw with M < S, a profile whose layer
 * count differs, round-robin windows whose micro-batches some stage's
 * replicas do not divide. */
int pt_sched_build(const pt_plan *plan, const pt_profile *profile, const pt_sched_opts *opts,
                   pt_program *prog, pt_error *err);

/* The windows of M micro-batches pt_sched_build makes plan's program cover
 * when opts asks for `asked` (0: the default): 1 for a synchronous kind;
 * asked, or max(PT_SCHED_MIN_WINDOWS, ceil(2S/M) + 2), for an asynchronous
 * one, rounded up to whole rounds of every stage under round-robin. 0 with
 * *out, or PT_EINVAL / PT_ERANGE with err saying why (asked windows of a
 * synchronous kind or mid-round, rounds past 2^20 windows). O(S). */
int pt_sched_window_count(const pt_plan *plan, int M, int asked, int *out, pt_error *err);

/* Hosts of a program: the number of independently running sequences (the
 * hosts, or the workers when host_count is 0), host h's op count and its k-th
 * op in issue order, and the host of worker w. O(1). */
static inline int pt_sched_host_count(const pt_program *p)
{
    return p->host_count > 0 ? p->host_count : p->worker_count;
}
static inline int pt_sched_host_of(const pt_program *p, int w)
{
    return p->host_count > 0 ? p->worker_host[w] : w;
}
static inline int pt_sched_host_len(const pt_program *p, int h)
{
    return p->host_count > 0 ? p->host_begin[h + 1] - p->host_begin[h]
                             : p->workers[h].op_end - p->workers[h].op_begin;
}
static inline int pt_sched_host_op(const pt_program *p, int h, int k)
{
    return p->host_count > 0 ? p->host_ops[p->host_begin[h] + k] : p->workers[h].op_begin + k;
}

/* Frees what prog owns and zeroes it (NULL-safe). */
void pt_program_release(pt_program *prog);

/* Checks any program (generated or hand-written) and returns 0, or PT_EINVAL /
 * PT_EDEADLOCK with err naming the worker, the op index and the reason:
 * - well-formed ops: kind, peer of the adjacent stage, mb and rows in range;
 * - every RECV matched by exactly one SEND with equal bytes, and vice versa;
 * - per worker and micro-batch: one FWD and one BWD, FWD first, RECOMPUTE
 *   between them exactly when the worker recomputes, RECV_ACT before the FWD
 *   and SEND_ACT after it, RECV_GRAD before the BWD and SEND_GRAD after it;
 *   the BWD may instead be split into BWD_INPUT (which takes the BWD's place
 *   for RECOMPUTE, RECV_GRAD and SEND_GRAD) and a later BWD_WEIGHT (which
 *   completes the backward: OPT_STEP and ALLREDUCE must follow it);
 *   FWD, RECOMPUTE and BWD read the same version (weight stashing), which must
 *   exist (initial or produced by an earlier OPT_STEP on that worker);
 * - OPT_STEP after every BWD it covers, each BWD covered at most once (exactly
 *   once in a synchronous program), produced versions increasing; on a
 *   replicated stage every OPT_STEP is preceded by an ALLREDUCE (or an AR_WAIT
 *   on one) covering the same micro-batches, and all replicas issue the same
 *   collectives in the same order;
 * - deadlock freedom: the program run with blocking receives and collectives
 *   completes; otherwise the message names the blocked workers and their ops. */
int pt_sched_validate(const pt_program *prog, pt_error *err);

/* For every op, the index of its partner: SEND <-> matching RECV, -1 for other
 * ops. match must hold prog->op_count entries; scratch (may be NULL) must hold
 * pt_sched_match_scratch(prog) entries or the call allocates its own. Returns
 * 0, PT_ENOMEM, or PT_EINVAL with err naming an unmatched or doubly matched op.
 * Used by the validator and the simulator; O(op_count). */
int pt_sched_match(const pt_program *prog, int32_t *match, int32_t *scratch, pt_error *err);
int64_t pt_sched_match_scratch(const pt_program *prog);

/* Writes one op as text ("w3 s1r0 BWD mb 4 v 2 rows [0,8)") into buf (always
 * NUL-terminated); returns buf. */
char *pt_sched_op_str(const pt_program *prog, int op_index, char *buf, int cap);

#endif
