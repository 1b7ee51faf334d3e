/* Where the executor enqueues a program's messages when they go over NCCL
 * (runtime/executor.c, runtime/comm_nccl.h).
 *
 * The schedule programs order every worker's messages for buffered sends
 * (ZeroMQ: a send returns at once). An NCCL send or receive instead holds
 * its stream until the peer's matching call runs (for messages beyond
 * NCCL's internal buffers, assumed here), and calls that must progress
 * together have to be enqueued in one ncclGroupStart/End group. The plan
 * says, for every message op, at which op's place its group is enqueued:
 *
 *   1. every run of messages that follow one another in a worker's ops is
 *      one group, enqueued where the run starts (1f1b-flush's SEND_ACT(1),
 *      RECV_GRAD(0) on stage 0 and SEND_GRAD(0), RECV_ACT(1) on stage 1,
 *      which deadlock one by one);
 *   2. the plan is replayed with NCCL's blocking semantics over all workers
 *      (a send and its receive complete only while both of their groups head
 *      their streams; a synchronous all-reduce only while it heads every
 *      replica's); while it deadlocks, every send at the head of a stuck
 *      stream whose receive is not yet reachable is deferred to the next
 *      group of its worker that holds a receive (zb-h2 and interleaved
 *      1F1B need this: a stage's SEND_GRAD and its next RECV_ACT have a
 *      W pass or a forward between them), with the later sends to the same
 *      peer that it would overtake;
 *   3. a deferral is refused when an op it passes over may write the sent
 *      buffer: a BWD/BWD_INPUT for a SEND_GRAD (the input-gradient buffers
 *      are reused), any op of the same micro-batch's backward for a
 *      SEND_ACT.
 *
 * Messages between a pair of workers keep their order (NCCL matches the
 * k-th send with the k-th receive). The plan depends on the program only,
 * so every worker computes the same one. */
#ifndef PT_RUNTIME_EXEC_NCCL_H
#define PT_RUNTIME_EXEC_NCCL_H

#include "planner/schedule.h"
#include "protocol/error.h"

/* Fills at[prog->op_count]: for a SEND/RECV op, the index of the op at
 * whose place the group holding it is enqueued (its own run's start, or a
 * later run's start when deferred); -1 for every other op. Returns 0,
 * PT_EINVAL (the program's sends and receives do not pair up, or it has
 * hosts, whose chunks share one rank), PT_EDEADLOCK (no plan found: err
 * names where each stuck worker waits) or PT_ENOMEM. */
int pt_exec_nccl_plan(const pt_program *prog, int *at, pt_error *err);

#endif
