/* Control and telemetry messages between the console and the agents.
 *
 * Control: the console binds a ZeroMQ ROUTER, each agent connects a DEALER;
 * telemetry: agents PUB, the console SUBs. Every message is one frame of
 * UTF-8 JSON text, an object with "v": 1 and a "type", described with an
 * example of each in docs/protocol.md. This module turns messages into text
 * (pt_msg_encode) and text into checked messages (pt_msg_decode); it knows no
 * sockets. The envelope, in every message:
 *
 *   "v": 1, "type": "...", "agent": "<id>" (the agent that sends it, or the
 *   one a console message is for), "seq": n (per sender and channel, from 0,
 *   +1 per message), "gen": g (plan generation, 0 before the first assign)
 *
 * and "req": r (>= 1) in requests (assign, start, stop, checkpoint) and in
 * the replies that echo it (ack, checkpoint_ack; optionally error).
 *
 * Integers travel as JSON numbers and must be exact: below 2^53. Times are
 * nanoseconds on the sender's clock, pt_msg_now_ns(); see protocol/telemetry.h
 * for the clock-offset estimate that lines them up. */
#ifndef PT_PROTOCOL_MESSAGE_H
#define PT_PROTOCOL_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/op.h"

#define PT_MSG_VERSION      1
#define PT_MSG_MAX_BYTES    (16u << 20) /* longest message text accepted */
#define PT_MSG_ID_MAX       64          /* agent id, NUL included: [A-Za-z0-9._:@-]+ */
#define PT_MSG_NAME_MAX     64          /* backend, capability, state, device name */
#define PT_MSG_HOST_MAX     256
#define PT_MSG_ENDPOINT_MAX 256
#define PT_MSG_PATH_MAX     1024
#define PT_MSG_TEXT_MAX     512 /* reasons */
#define PT_MSG_NCCL_ID_MAX  257 /* 128 bytes as hex, NUL included */
#define PT_MSG_KEY_MAX      41  /* a CURVE public key, 40 Z85 characters, NUL included */
#define PT_MSG_MAX_CAPS     32
#define PT_MSG_MAX_PEERS    4096
#define PT_MSG_MAX_EVENTS   65536              /* per events batch */
#define PT_MSG_MAX_INDEX    4096               /* stages, replicas, devices are below this */
#define PT_MSG_MAX_RANK     4096               /* data-plane ranks are below this */
#define PT_MSG_INT_MAX      9007199254740991LL /* 2^53 - 1: exact as a JSON number */

typedef enum pt_msg_type {
    PT_MSG_REGISTER,       /* agent -> console: who I am */
    PT_MSG_ASSIGN,         /* console -> agent: plan, stage, replica, peers (request) */
    PT_MSG_ACK,            /* agent -> console: request done (assign, start, stop) */
    PT_MSG_START,          /* console -> agent: run N steps (request) */
    PT_MSG_STOP,           /* console -> agent: hold, or stop at a step (request) */
    PT_MSG_CHECKPOINT,     /* console -> agent: save at a step (request) */
    PT_MSG_CHECKPOINT_ACK, /* agent -> console: saved step, where */
    PT_MSG_HEARTBEAT,      /* both ways: liveness and clock samples */
    PT_MSG_ERROR,          /* both ways: something failed, with the reason */
    PT_MSG_BYE,            /* both ways: the sender is leaving */
    PT_MSG_EVENTS,         /* telemetry: a batch of op events */
    PT_MSG_METRICS,        /* telemetry: one iteration's metrics */
    PT_MSG_TYPE_COUNT
} pt_msg_type;

/* Wire name ("register", "checkpoint_ack"...); NULL for an invalid type. */
const char *pt_msg_type_name(pt_msg_type type);
/* PT_MSG_TYPE_COUNT when name is not a message type. */
pt_msg_type pt_msg_type_parse(const char *name);

/* Who may send a type (bit mask). */
enum { PT_MSG_BY_CONSOLE = 1, PT_MSG_BY_AGENT = 2 };
unsigned pt_msg_type_senders(pt_msg_type type);
/* 1 for requests (assign, start, stop, checkpoint), which need "req" >= 1. */
int pt_msg_type_is_request(pt_msg_type type);

/* Memory categories, in the order and with the names of runtime/tensor.h's
 * pt_mem_kind ("weights", "grads", "optim", "acts", "stash", "comm"). */
enum {
    PT_MSG_MEM_WEIGHTS,
    PT_MSG_MEM_GRADS,
    PT_MSG_MEM_OPTIM,
    PT_MSG_MEM_ACTS,
    PT_MSG_MEM_STASH,
    PT_MSG_MEM_COMM,
    PT_MSG_MEM_COUNT
};
const char *pt_msg_mem_name(int category); /* NULL when out of range */

/* The register capability of a simulated agent (pipetop-agent --simulate):
 * it runs the schedule program with the simulator's durations, trains
 * nothing and sends no data to its peers (docs/protocol.md). */
#define PT_MSG_CAP_SIMULATED "simulated"

typedef struct pt_msg_register {
    char host[PT_MSG_HOST_MAX];
    int64_t pid;                                 /* >= 1 */
    int device;                                  /* index in the topology, -1: none */
    char device_name[PT_MSG_NAME_MAX];           /* optional ("" absent) */
    char backend[PT_MSG_NAME_MAX];               /* "cpu", "cuda" */
    int64_t memory_bytes;                        /* device memory, 0: unknown */
    int cap_count;                               /* 0..PT_MSG_MAX_CAPS */
    char caps[PT_MSG_MAX_CAPS][PT_MSG_NAME_MAX]; /* "zmq", "nccl", "recompute"... */
    char data_endpoint[PT_MSG_ENDPOINT_MAX];     /* optional: where its data comm is bound */
    char gpu_bus_id[PT_MSG_NAME_MAX]; /* optional: PCI bus id of its GPU ("" absent, CPU) */
} pt_msg_register;

typedef struct pt_msg_peer {
    int rank;                           /* data-plane rank, unique in the assign */
    int stage, replica;                 /* the stage replica it runs */
    char endpoint[PT_MSG_ENDPOINT_MAX]; /* its bound data endpoint */
    char key[PT_MSG_KEY_MAX];           /* optional: its CURVE public key (Z85), "" none */
} pt_msg_peer;

typedef struct pt_msg_assign {
    /* The plan and the model. Sending: plan_json and model_json, the compact
     * JSON object texts pt_msg_assign_texts made once for a generation,
     * embedded verbatim in every worker's assign (borrowed: pt_msg_clear
     * leaves them); when they are NULL, plan and model are written instead.
     * Received: plan and model, parsed once from the message (owned, freed
     * by pt_msg_clear); the texts are NULL. */
    const char *plan_json, *model_json;
    pt_plan *plan;
    pt_model_spec *model;
    int stage, replica; /* what this agent runs (its first model chunk) */
    int chunks;     /* optional ("chunks", 1 absent; 0 reads as 1): the model chunks this agent runs
                       on its device, stages stage, stage + S, ... (S the plan's pipeline ranks) of
                       an interleaved plan, each as replica `replica` (docs/protocol.md) */
    int rank;       /* its data-plane rank; must be one of peers[].rank */
    int peer_count; /* 1..PT_MSG_MAX_PEERS, this agent included */
    pt_msg_peer *peers; /* owned (sending with peers_json: borrowed) */
    /* Sending: the peers array as pt_msg_assign_peers_text made it once for
     * a generation, embedded verbatim in every worker's assign (borrowed);
     * peers and peer_count still describe it (this agent's own entry is
     * checked against them). NULL: peers written now. Received: NULL. */
    const char *peers_json;
    char data[PT_MSG_PATH_MAX];           /* data set: "fashion-mnist", "synthetic", a path */
    int64_t seed;                         /* >= 0 */
    char checkpoint_dir[PT_MSG_PATH_MAX]; /* optional */
    int64_t checkpoint_every;             /* steps between checkpoints, 0: only when asked */
    int64_t resume_step;                  /* first step to run (0: fresh start) */
    char telemetry[PT_MSG_ENDPOINT_MAX];  /* optional: where to connect the telemetry PUB */
    char nccl_id[PT_MSG_NCCL_ID_MAX];     /* optional: NCCL unique id, hex */
    uint64_t run_token; /* optional ("run_token": 16 hex digits; 0 absent): the data plane's run
                           token, carried by every data frame (runtime/comm.h) */
} pt_msg_assign;

typedef struct pt_msg_ack {
    pt_msg_type of; /* the request type acknowledged: assign, start or stop */
    int64_t step;   /* acks of stop only, optional (-1 absent): the step boundary (iterations
                     * done) where the agent holds (hold) or stopped (at_step) */
} pt_msg_ack;

typedef struct pt_msg_start {
    int64_t steps; /* steps to run, 0: until stop */
} pt_msg_start;

/* A stop comes in one of three forms (docs/protocol.md, "Stopping at one step"):
 * hold: start no new iteration after those already begun and ack at once
 * with ack.step = iterations begun; at_step >= 0: finish iterations up to
 * at_step - 1 (running them when needed), start none beyond, save, ack with
 * ack.step = at_step; neither (v1's first form): stop at the next boundary. */
typedef struct pt_msg_stop {
    char reason[PT_MSG_TEXT_MAX]; /* optional */
    int hold;                     /* optional boolean ("hold": true), 0 absent */
    int64_t at_step;              /* optional, -1 absent; not with hold */
} pt_msg_stop;

typedef struct pt_msg_checkpoint {
    int64_t step; /* save after this step; -1: after the current one */
} pt_msg_checkpoint;

typedef struct pt_msg_checkpoint_ack {
    int64_t step;              /* the step whose state was saved */
    char dir[PT_MSG_PATH_MAX]; /* where */
} pt_msg_checkpoint_ack;

/* NTP-style: a heartbeat carries its send time and, when it answers one,
 * echoes the other side's send time and the time it arrived. */
typedef struct pt_msg_heartbeat {
    int64_t hb;     /* heartbeat number, per sender */
    int64_t t_send; /* ns, sender clock */
    int has_echo;   /* 1: the fields below answer the peer's heartbeat echo_hb */
    int64_t echo_hb;
    int64_t echo_t_orig;         /* the peer's t_send of heartbeat echo_hb (peer clock) */
    int64_t echo_t_recv;         /* when it arrived here (sender clock) */
    char state[PT_MSG_NAME_MAX]; /* optional: "idle", "running", "stopping"... */
    int64_t step;                /* last finished step, -1: none */
    int64_t data_dropped;        /* optional, -1 absent: data-plane frames this agent dropped
                                    (forged, replayed, stale, over the early-arrival bound) */
} pt_msg_heartbeat;

typedef struct pt_msg_error_body {
    int stage, replica;           /* -1: not about a stage */
    int code;                     /* a PT_E* code (<= 0) */
    char reason[PT_MSG_TEXT_MAX]; /* required, non-empty */
} pt_msg_error_body;

typedef struct pt_msg_bye {
    char reason[PT_MSG_TEXT_MAX]; /* optional */
} pt_msg_bye;

typedef struct pt_msg_event {
    int stage, replica;
    int64_t step;             /* iteration */
    int mb;                   /* micro-batch, -1: none (OPT_STEP...) */
    pt_op_kind op;            /* travels as its name (pt_op_name); decode refuses others */
    int64_t version;          /* weight version, -1: none */
    int64_t start_ns, end_ns; /* sender clock; end_ns >= start_ns */
    int64_t bytes;            /* moved (SEND/RECV/ALLREDUCE), else 0 */
} pt_msg_event;

typedef struct pt_msg_events {
    int count;            /* 1..PT_MSG_MAX_EVENTS */
    pt_msg_event *events; /* owned */
} pt_msg_events;

/* Steps one metrics message may stand for (docs/protocol.md, "Telemetry
 * thinning"). */
#define PT_MSG_FOLD_MAX 256

typedef struct pt_msg_metrics {
    int stage, replica;
    int64_t step;
    double loss; /* NaN: not known on this stage (travels as null) */
    /* A fold: steps > 1 (0 and 1: one step, "steps" absent on the wire)
     * makes the message stand for steps step-steps+1 .. step, losses[k]
     * being the loss of step step-steps+1+k (NaN: not known) and loss that
     * of the last; samples_per_s and iter_ms are their means, memory as of
     * the last (peaks over them all). */
    int steps;
    double losses[PT_MSG_FOLD_MAX];
    double samples_per_s;                                          /* >= 0 */
    double iter_ms;                                                /* >= 0 */
    int64_t mem_cur[PT_MSG_MEM_COUNT], mem_peak[PT_MSG_MEM_COUNT]; /* bytes, peak >= cur */
    int64_t total_cur, total_peak; /* bytes; total_peak >= total_cur */
    /* the driver's own figures for a GPU (cudaMemGetInfo), bytes; 0, 0 when
     * absent (CPU agents); device_free <= device_total */
    int64_t device_free, device_total;
} pt_msg_metrics;

typedef struct pt_msg {
    pt_msg_type type;
    char agent[PT_MSG_ID_MAX];
    int64_t seq; /* >= 0 */
    int64_t gen; /* >= 0 */
    int64_t req; /* requests and replies: >= 1; 0 otherwise */
    union {
        pt_msg_register reg;
        pt_msg_assign assign;
        pt_msg_ack ack;
        pt_msg_start start;
        pt_msg_stop stop;
        pt_msg_checkpoint checkpoint;
        pt_msg_checkpoint_ack checkpoint_ack;
        pt_msg_heartbeat heartbeat;
        pt_msg_error_body error;
        pt_msg_bye bye;
        pt_msg_events events;
        pt_msg_metrics metrics;
    } u;
} pt_msg;

/* Zeroes *m and sets type, agent (truncated to fit; NULL: "") and the
 * defaults that are not zero: checkpoint.step -1, heartbeat.step -1,
 * heartbeat.data_dropped -1,
 * error stage/replica -1, metrics loss NaN, ack.of PT_MSG_ASSIGN, ack.step -1,
 * stop.at_step -1. */
void pt_msg_init(pt_msg *m, pt_msg_type type, const char *agent);

/* Frees what *m owns (plan/model text, peers, events) and zeroes it.
 * NULL-safe; safe on a zeroed or already cleared message. */
void pt_msg_clear(pt_msg *m);

/* The plan and model of a generation's assigns as compact JSON object
 * texts with exact numbers, encoded once (no parse) and shared by every
 * worker's pt_msg_assign (plan_json, model_json); the caller frees both.
 * 0, or PT_ENOMEM / PT_EINVAL (a NULL plan or model) with both NULL. */
int pt_msg_assign_texts(const pt_plan *plan, const pt_model_spec *model, char **plan_json,
                        char **model_json, pt_error *err);

/* The peers array of a generation's assigns as compact JSON text, made and
 * checked (as the decoder checks it) once and shared by every worker's
 * pt_msg_assign (peers_json): a 1,024-peer list is not written and checked
 * again for each of 1,024 workers. *out is the caller's to free. 0, or
 * PT_ERANGE / PT_EINVAL (err names the entry and field) / PT_ENOMEM. */
int pt_msg_assign_peers_text(const pt_msg_peer *peers, int n, char **out, pt_error *err);

/* Checks *m and writes it as compact JSON text: *out is a malloc'd,
 * NUL-terminated string the caller frees, *len (may be NULL) its length.
 * Refuses (PT_EINVAL/PT_ERANGE, err names the field) exactly what
 * pt_msg_decode would refuse, so whatever encodes also decodes. */
int pt_msg_encode(const pt_msg *m, char **out, size_t *len, pt_error *err);

/* Parses and checks len bytes of text (need not be NUL-terminated). On
 * success *out holds the message (free with pt_msg_clear); on failure *out is
 * zeroed and err says "<source> (<type>): <field>: <reason>" (source NULL:
 * "message"): PT_EPARSE not JSON / not an object / NUL byte inside,
 * PT_EINVAL missing or mistyped field, unknown type or field, wrong version,
 * PT_ERANGE value out of range or message too long. */
int pt_msg_decode(const char *data, size_t len, const char *source, pt_msg *out, pt_error *err);

/* Who receives: the console or an agent. */
enum { PT_MSG_AT_CONSOLE = 1, PT_MSG_AT_AGENT = 2 };

/* Whether a decoded message may be acted on by `at` whose current plan
 * generation is current_gen: the sender must be allowed to send the type
 * (PT_EINVAL otherwise), and its generation must be the current one
 * (PT_ESTATE for an older "stale" or a newer one), except that an assign may
 * bring a newer generation and register, heartbeat and bye are not bound to
 * one. */
int pt_msg_accept(const pt_msg *m, int at, int64_t current_gen, pt_error *err);

/* Nanoseconds on CLOCK_MONOTONIC since this process first called it (so
 * values stay far below 2^53): the clock of every time in messages. */
int64_t pt_msg_now_ns(void);

#endif
