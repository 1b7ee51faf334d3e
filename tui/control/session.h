/* The console side of a distributed run: a session that coordinates agents
 * (DESIGN.md's diagram: console ROUTER <-> agent DEALER for control, agent
 * PUB -> console SUB for telemetry). No terminal code. The run controller
 * (tui/control/run.h) owns one and drives it for `pipetop run` and the console's
 * live source; the ncurses console draws what it tracks.
 *
 * What it does:
 * - binds a ROUTER (control) and a SUB (telemetry), on 127.0.0.1 ephemeral
 *   ports unless told otherwise;
 * - keeps a table of agents from their `register` (host, pid, device, data
 *   endpoint) and what they said since: state, step, heartbeat age, clock
 *   offset (NTP-style, from heartbeats), telemetry counts (dropped,
 *   duplicates, malformed), control messages rejected, last error;
 * - sends a heartbeat to every live agent each PT_SESSION_HEARTBEAT_MS and
 *   marks an agent dead when nothing came from it for
 *   PT_SESSION_MISSED_HEARTBEATS heartbeat periods;
 * - assigns a plan (a new generation), starts, stops, asks for checkpoints,
 *   and tracks the requests until they are answered;
 * - commits checkpoints: when every worker of the plan acknowledged step N,
 *   the commit hook writes the index of <checkpoint_dir>/step-N and the
 *   session then points <checkpoint_dir>/latest at it (docs/formats.md,
 *   "Run checkpoints");
 * - rejects and counts malformed, misaddressed, out-of-order and stale
 *   messages on both channels, and never stops because of one;
 * - writes everything it receives (and every plan and request it sends) to a
 *   run record, newline-delimited JSON (docs/formats.md, "Run record").
 *
 * Threads: a session is used by one thread. Every call returns within the
 * timeout it is given (sends never block: a full queue drops the message and
 * counts it). */
#ifndef PT_TUI_SESSION_H
#define PT_TUI_SESSION_H

#include <stdint.h>

#include "protocol/ckpt_index.h"
#include "protocol/error.h"
#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/telemetry.h"

/* Heartbeat period of the console, and how many periods of silence make an
 * agent dead: the heartbeat bound is their product. The agent uses the same
 * figures for the console (agent/agent.h). */
#define PT_SESSION_HEARTBEAT_MS 250
/* Refused handshakes are reported (record and listener) at most this often,
 * at most PT_SESSION_REFUSALS_TOLD clients at a time (a flood is counted,
 * not printed line by line). */
#define PT_SESSION_REFUSALS_MS   1000
#define PT_SESSION_REFUSALS_TOLD 8
/* Refused messages (malformed, forged, misaddressed, ...) are each written
 * to the record and told to the listener up to PT_SESSION_REJECT_LINES in
 * every PT_SESSION_REJECT_WINDOW_MS; past that they are counted, and one
 * line per window says how many. */
#define PT_SESSION_REJECT_LINES     20
#define PT_SESSION_REJECT_WINDOW_MS 10000
/* Live agent names one CURVE key may hold (docs/deploy.md: a key per agent,
 * or one shared by a node's agents): invented names past it are refused. */
#define PT_SESSION_NAMES_PER_KEY 64
/* A connection to the console's sockets must finish its handshake within
 * this (libzmq's default is 30 s): a flood of connections that never speak
 * holds descriptors this long at most. Agents finish theirs in ms. */
#define PT_SESSION_HANDSHAKE_MS 5000
/* A control connection that sent nothing this long after its accept is
 * counted (pt_session_silent_connections) and said in the record. */
#define PT_SESSION_SILENT_MS         5000
#define PT_SESSION_MISSED_HEARTBEATS 12
/* Default bind addresses: loopback, ephemeral port. */
#define PT_SESSION_DEFAULT_BIND "tcp://127.0.0.1:*"
/* Committed checkpoint steps kept in a checkpoint folder (older ones are removed). */
#define PT_SESSION_CKPT_KEEP 2
/* Name of the file pointing at the newest committed step in a checkpoint folder. */
#define PT_SESSION_LATEST_FILE PT_CKPT_LATEST_FILE

typedef enum pt_agent_state {
    PT_AGENT_REGISTERED, /* registered, no plan yet */
    PT_AGENT_ASSIGNED,   /* acknowledged its assign: built its stage, bound its data socket */
    PT_AGENT_RUNNING,    /* acknowledged a start */
    PT_AGENT_IDLE,       /* finished the steps it was started for */
    PT_AGENT_STOPPED,    /* acknowledged a stop */
    PT_AGENT_FAILED,     /* reported an error about its stage */
    PT_AGENT_DEAD,       /* missed heartbeats, or its process ended */
    PT_AGENT_GONE,       /* said bye */
    PT_AGENT_STATE_COUNT
} pt_agent_state;

/* "registered", "assigned", ...; "?" when out of range. */
const char *pt_agent_state_name(pt_agent_state state);

/* One agent as the console knows it. Read-only for callers. */
typedef struct pt_session_agent {
    char id[PT_MSG_ID_MAX];
    char host[PT_MSG_HOST_MAX];
    int64_t pid;
    int device; /* index in the topology, -1 none */
    char device_name[PT_MSG_NAME_MAX];
    char backend[PT_MSG_NAME_MAX];
    int64_t memory_bytes; /* its device's memory as it registered (0: unknown) */
    char data_endpoint[PT_MSG_ENDPOINT_MAX];
    char gpu_bus_id[PT_MSG_NAME_MAX]; /* its GPU ("" on the CPU) */
    int has_nccl;                     /* it offered the "nccl" capability */
    int simulated; /* it offered the "simulated" capability: it has no data plane, and its
                      assigns list only its own peer entry (docs/protocol.md) */
    pt_agent_state state;
    char reported[PT_MSG_NAME_MAX]; /* the state its last heartbeat named ("running"...) */
    int worker;                     /* its worker (data-plane rank) in the plan; -1 none */
    int stage, replica;             /* -1 when not assigned */
    int64_t gen;                    /* plan generation it acknowledged */
    int64_t step;                   /* last finished step it reported; -1 none */
    int64_t ckpt_step;              /* last checkpoint step it acknowledged; -1 none */
    int64_t last_heard_ns;          /* console clock (pt_msg_now_ns) */
    int clock_known;                /* 1 once a heartbeat round trip gave an offset */
    int64_t clock_offset_ns;        /* its clock minus the console's */
    int64_t clock_delay_ns;         /* round trip of the sample used; |error| <= delay / 2 */
    uint64_t control_rejected;      /* control messages from it that were refused */
    uint64_t control_dropped;       /* gaps in its control sequence numbers */
    int64_t data_dropped;           /* data-plane frames it dropped (its heartbeat's); 0 none */
    char last_error[PT_MSG_TEXT_MAX];
    int has_metrics;
    pt_msg_metrics metrics; /* the newest iteration metrics */
    int64_t stop_step;      /* step boundary its last stop ack named (iterations done); -1 none */
    char public_key[PT_KEY_Z85_LEN + 1]; /* its CURVE key ("" without CURVE); its name is bound
                                            to it from the first register on */
    uint64_t control_flooded;            /* messages dropped unread: over its byte budget */
    int stalled; /* 1 while silent past the heartbeat bound but within the stall bound */
} pt_session_agent;

/* What happened, for a listener (the console's views, `pipetop run`). */
typedef enum pt_session_note_kind {
    PT_NOTE_REGISTERED, /* an agent registered (or registered again) */
    PT_NOTE_STATE,      /* an agent's state changed */
    PT_NOTE_DEAD,       /* an agent is dead: text says why */
    PT_NOTE_ERROR,      /* an agent reported an error: text is the reason */
    /* METRICS and EVENTS: msg->gen may be older than pt_session_generation
     * (late: sent under the previous plan, read after the next one was
     * applied): a measurement of that generation, whose stage, replica and
     * step are the old plan's, not the agent's current ones */
    PT_NOTE_METRICS,    /* msg: an iteration's metrics */
    PT_NOTE_EVENTS,     /* msg: op events, times already on the console's clock */
    PT_NOTE_CHECKPOINT, /* step: a checkpoint was committed */
    PT_NOTE_REJECTED,   /* a message was refused: text says why (agent may be -1) */
    PT_NOTE_STALLED,    /* an agent went silent past the heartbeat bound: text says for how long */
    PT_NOTE_RESUMED,    /* a stalled agent was heard from again: text says after how long */
    PT_NOTE_FATAL       /* the session cannot go on (its record could not be written): text */
} pt_session_note_kind;

typedef struct pt_session_note {
    pt_session_note_kind kind;
    int agent;         /* index in the agent table, -1: none / unknown sender */
    const pt_msg *msg; /* METRICS, EVENTS; NULL otherwise. Valid during the call */
    int64_t step;      /* CHECKPOINT */
    const char *text;  /* DEAD, ERROR, REJECTED; NULL otherwise */
} pt_session_note;

/* Called from inside pt_session_poll (and the calls that poll); must not
 * call back into the session except its read-only getters. */
typedef void (*pt_session_listener)(void *user, const pt_session_note *note);

/* Writes the index of a checkpoint step folder from the per-stage manifests
 * the agents left in it (stage_count stages). Returns 0 or a PT_E* code
 * with err set. The session passes it <checkpoint_dir>/step-<step>. */
typedef int (*pt_session_commit_fn)(void *user, const char *step_dir, int64_t step, int stage_count,
                                    pt_error *err);

typedef struct pt_session_config {
    const char *control_bind;   /* NULL: PT_SESSION_DEFAULT_BIND */
    const char *telemetry_bind; /* NULL: PT_SESSION_DEFAULT_BIND */
    const char *record_path;    /* run record to create (folders made), NULL: none */
    int heartbeat_ms;           /* 0: PT_SESSION_HEARTBEAT_MS */
    int missed_heartbeats;      /* 0: PT_SESSION_MISSED_HEARTBEATS */
    /* CURVE (docs/architecture.md, "Trust"): with key (the console's pair)
     * both sockets are CURVE servers and only agents whose public key is one
     * of allowed[0..allowed_n) (or added later, pt_session_allow) complete
     * the handshake. NULL: no CURVE, and then only loopback and ipc
     * endpoints may be bound (runtime/trust.h). Copied. */
    const pt_keyfile *key;
    const char (*allowed)[PT_KEY_Z85_LEN + 1];
    int allowed_n;
} pt_session_config;

typedef struct pt_session pt_session;

/* Binds both sockets and opens the run record. On success *out owns a new
 * session; on failure *out is NULL and err says which bind or file failed
 * (PT_EIO, PT_EINVAL bad endpoint or figures, PT_ENOMEM). */
int pt_session_create(const pt_session_config *cfg, pt_session **out, pt_error *err);

/* Bytes of one control message from an agent (ZMQ_MAXMSGSIZE on the ROUTER:
 * a peer sending more is disconnected by ZeroMQ before the frame is read)
 * and of one telemetry message (on the SUB). */
#define PT_SESSION_CONTROL_MAX_BYTES   (256 << 10)
#define PT_SESSION_TELEMETRY_MAX_BYTES ((int64_t)PT_MSG_MAX_BYTES + 4096)
/* Control bytes one peer may send per second (a token bucket holding up to
 * one second's worth): beyond it, its messages are dropped unread and
 * counted, so a flooding peer cannot starve the heartbeats of the others.
 * Agents send a few hundred bytes per heartbeat. */
#define PT_SESSION_PEER_BYTES_PER_S (4 << 20)

/* Allows one more agent key while running (CURVE sessions only): the run
 * controller's spawned agents. With name, that name is bound to the key: a
 * register under it from any other key is refused. 0, PT_ESTATE (no CURVE),
 * PT_EINVAL (not a key), PT_ERANGE (allow-list full), PT_ENOMEM. */
int pt_session_allow(pt_session *s, const char *public_z85, const char *name, pt_error *err);

/* The console's public key (Z85), "" without CURVE. */
const char *pt_session_public_key(const pt_session *s);

/* Handshakes refused by the allow-list (unknown key, no CURVE), 0 without CURVE. */
int64_t pt_session_refused_handshakes(const pt_session *s);
/* Control connections that sent nothing PT_SESSION_SILENT_MS after their
 * accept: a second connection under a routing id already connected (the
 * ROUTER ignores it), or a client that never finished its handshake or
 * never spoke. */
int64_t pt_session_silent_connections(const pt_session *s);

/* Closes the sockets and the record. Sends nothing (call pt_session_bye
 * first to let agents go). NULL-safe; sets *s_p = NULL. */
void pt_session_destroy(pt_session **s_p);

/* The endpoints actually bound (ephemeral ports resolved), for agents'
 * --console and --telemetry. Owned by the session. */
const char *pt_session_control_endpoint(const pt_session *s);
const char *pt_session_telemetry_endpoint(const pt_session *s);

/* Listener and commit hook (either NULL: none). Without a commit hook,
 * checkpoint acknowledgements are tracked but nothing is committed. */
void pt_session_set_listener(pt_session *s, pt_session_listener fn, void *user);
void pt_session_set_commit(pt_session *s, pt_session_commit_fn fn, void *user);

/* Handles whatever arrives within timeout_ms (0: only what is queued),
 * sends due heartbeats, marks silent agents dead. Returns 0, or PT_EIO when
 * a socket failed (the session cannot go on). */
int pt_session_poll(pt_session *s, int timeout_ms, pt_error *err);

/* The agent table, in order of first registration. */
int pt_session_agent_count(const pt_session *s);
const pt_session_agent *pt_session_agent_at(const pt_session *s, int i); /* NULL if out of range */
int pt_session_find_agent(const pt_session *s, const char *id);          /* index or -1 */
/* Milliseconds since anything was heard from agent i; -1 if out of range. */
int64_t pt_session_heartbeat_age_ms(const pt_session *s, int i);

/* Marks agent i dead now (e.g. its process was seen to exit), with a reason
 * ("exited: killed by signal 9"). No-op when it is already dead or gone. */
void pt_session_mark_dead(pt_session *s, int i, const char *reason);

/* Current plan generation (0 before the first assign). */
int64_t pt_session_generation(const pt_session *s);

/* A plan to run: which agent runs each worker of the plan's schedule
 * program (stage by stage, replica by replica, as planner/schedule.h
 * numbers them), and what they all need. */
typedef struct pt_session_plan {
    const pt_plan *plan;        /* read during the call */
    const pt_model_spec *model; /* read during the call */
    const int *agents;          /* worker w runs on agent agents[w]; pt_plan_device_count entries */
    const char *data;           /* "synthetic", "fashion-mnist" or a path */
    int64_t seed;               /* initial weights and data order */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int64_t checkpoint_every;   /* steps between checkpoints; 0: only on stop / when asked */
    int64_t resume_step;        /* 0: fresh; > 0: load <checkpoint_dir>/step-<resume_step> */
} pt_session_plan;

/* Starts a new generation and sends each worker's agent its assign (the
 * plan, the model, its stage/replica/rank, every peer's data endpoint, the
 * telemetry endpoint). Agents must be registered with a data endpoint and
 * alive, each used once. Returns 0 (acknowledgements are awaited with
 * pt_session_wait) or PT_EINVAL/PT_ESTATE with err naming the agent. */
int pt_session_assign(pt_session *s, const pt_session_plan *p, pt_error *err);

/* Picks up a run another console (holding the same key) assigned, as
 * generation gen, without sending anything: the agents keep running it.
 * p->agents are the registered agents that run each worker (the old
 * console's record names them); they become RUNNING workers of gen, the
 * checkpoint folder's newest committed step (its `latest`) counts as
 * committed. 0, or PT_EINVAL/PT_ESTATE as pt_session_assign, or PT_EINVAL
 * when gen is not newer than the session's. */
int pt_session_adopt(pt_session *s, const pt_session_plan *p, int64_t gen, pt_error *err);

/* Requests to every worker of the current plan: start `steps` steps (0:
 * until stopped), stop, save a checkpoint after `step` (-1: the current
 * one). 0, or PT_ESTATE before an assign.
 *
 * A stop brings every worker to the same step in two rounds
 * (docs/protocol.md, "Stopping at one step"): a hold to each, which each
 * answers at once with the number of iterations it has begun; when all have
 * answered (inside pt_session_poll), a stop with at_step = the highest, which
 * each acknowledges once it has finished exactly that many and saved a
 * checkpoint (when the plan has a folder). pt_session_wait returns when the
 * second round is acknowledged. A stop while one is under way does nothing. */
int pt_session_start(pt_session *s, int64_t steps, pt_error *err);
int pt_session_stop(pt_session *s, const char *reason, pt_error *err);
int pt_session_checkpoint(pt_session *s, int64_t step, pt_error *err);

/* The step every worker was told to stop at by the current or last stop
 * (iterations done); -1 before the holds are all answered. */
int64_t pt_session_stop_step(const pt_session *s);

/* Sends bye to every agent that is not dead or gone. */
void pt_session_bye(pt_session *s, const char *reason);

/* Requests sent and not yet answered. */
int pt_session_pending(const pt_session *s);

/* Polls until no request is pending (0), a worker of the current plan is
 * dead, failed or gone (PT_ESTATE, err from pt_session_failure), or
 * timeout_ms passed (PT_ETIMEOUT naming what is still awaited). */
int pt_session_wait(pt_session *s, int timeout_ms, pt_error *err);

/* 1 and err says which agent (id, stage, replica, pid) and why, when a
 * worker of the current plan is dead, failed or gone, or what failed when
 * the run record could not be written or a checkpoint not committed
 * (pt_session_fatal); else 0. */
int pt_session_failure(const pt_session *s, pt_error *err);

/* Lowest step every worker of the current plan has finished (-1 none). */
int64_t pt_session_min_step(const pt_session *s);

/* Newest committed checkpoint step (-1 none). */
int64_t pt_session_committed_step(const pt_session *s);

/* Counts over the whole session. */
typedef struct pt_session_counts {
    uint64_t control_received; /* accepted control messages */
    uint64_t control_rejected; /* refused: malformed, misaddressed, out of order, stale, unknown */
    pt_rx_counts telemetry;    /* pt_telemetry_rx totals */
    uint64_t telemetry_rejected; /* decoded but refused: a control type, unknown agent */
    uint64_t sends_failed;       /* messages the ROUTER could not queue */
    uint64_t control_flooded;    /* dropped unread: a peer over PT_SESSION_PEER_BYTES_PER_S */
    uint64_t stops_resent;       /* pending stops sent again to an agent that reconnected */
} pt_session_counts;
void pt_session_counts_get(const pt_session *s, pt_session_counts *out);

/* Telemetry counts of agent i (zeroed if none). */
void pt_session_agent_telemetry(const pt_session *s, int i, pt_rx_counts *out);

/* Appends the end of a run to the run record (pt_record_write_json): kind
 * "summary" or "failed", with the members of fields_json (a JSON object text;
 * NULL: none). 0, PT_EINVAL for another kind, a fields_json that is not an
 * object or a line the record's reader would refuse, PT_EIO. No record: 0
 * and nothing written. */
int pt_session_record(pt_session *s, const char *kind, const char *fields_json);
/* The "failed" entry with its reason (any text; JSON-escaped here). */
int pt_session_record_failed(pt_session *s, const char *reason);

/* What stops the run though no agent failed: a write of the run record that
 * failed (file and errno), or a checkpoint that could not be committed (its
 * step folder, already removed, and why). 1 with err set, else 0. Once set it
 * stays; pt_session_failure reports it too. */
int pt_session_fatal(const pt_session *s, pt_error *err);

/* How long an agent may be silent before it is taken for dead. Past the
 * heartbeat bound it is *stalled* (PT_NOTE_STALLED; pt_session_agent.stalled:
 * its neighbours wait for its data, so the pipeline pauses); heard from
 * again it resumes (PT_NOTE_RESUMED); past stall_ms it is dead. A new
 * session has the heartbeat bound (dead at once, no stall); 0 or anything
 * below the heartbeat bound sets that. pt_session_stall_ms: the bound in use. */
void pt_session_set_stall_ms(pt_session *s, int stall_ms);

/* What an assign names as the checkpoint folder: a path relative to each
 * agent's checkpoint root (agents refuse absolute paths and "..", see
 * pipetop-agent --checkpoint-root), e.g. "." when agents were started with
 * the run's checkpoint folder as their root. NULL or "" (the default): the
 * plan's checkpoint_dir as given. */
void pt_session_set_agent_checkpoint_dir(pt_session *s, const char *dir);
int pt_session_stall_ms(const pt_session *s);

#endif
