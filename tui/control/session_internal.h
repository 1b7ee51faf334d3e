/* Internal to the session (tui/control/session*.c): its state and the
 * helpers its files share. Nothing else includes it. The session is split
 * by concern: session.c (create, sockets, keys, the agent table),
 * session_control.c (control messages in and out, heartbeats, poll),
 * session_telemetry.c (telemetry checks), session_ckpt.c (checkpoint
 * commits) and session_requests.c (assign, start, stop, bye). */
#ifndef PT_TUI_SESSION_INTERNAL_H
#define PT_TUI_SESSION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "protocol/record.h"
#include "runtime/trust.h"
#include "runtime/zmq_watch.h"
#include "tui/control/session.h"

#define NS_PER_MS 1000000LL
#define RECV_BATCH_MAX                                                                             \
    4096 /* messages handled per socket per poll before heartbeats get a turn                      \
          */
/* A telemetry drain stops after heartbeat_ms / TELEMETRY_BUDGET_DIV of work
 * (the clock read every TELEMETRY_CLOCK_EVERY messages), so that control is
 * read and heartbeats sent in time however far behind telemetry is. */
#define TELEMETRY_BUDGET_DIV  4
#define TELEMETRY_CLOCK_EVERY 16
#define SESSION_HWM_MSGS      100000
#define CTL_FRAMES_MAX        4 /* frames read from one ROUTER message before the rest is discarded */
#define DESCRIBE_MAX          192
#define REQ_FIRST             1

typedef struct agent_entry {
    pt_session_agent pub;
    int64_t ctl_next_seq; /* next control sequence number expected from it */
    int64_t tx_seq;       /* next sequence number of what the console sends it */
    int64_t hb_out;       /* heartbeats sent to it */
    int has_hb_in;        /* its newest heartbeat, to echo */
    int64_t hb_in, hb_in_tsend, hb_in_trecv;
    pt_clock_filter clk;
    int restarted; /* registered again while it was a worker of the current plan */
    char why_dead[PT_MSG_TEXT_MAX];
    char bye_reason[PT_MSG_TEXT_MAX];
    int64_t budget, budget_ns; /* control bytes it may still send, and when that was refilled */
    int64_t flood_noted_ns;    /* when its last "over budget" line went to the record */
} agent_entry;

/* A name bound to a key before its agent registered (pt_session_allow). */
typedef struct bound_name {
    char name[PT_MSG_ID_MAX];
    char key[PT_KEY_Z85_LEN + 1];
} bound_name;

/* A control connection by its descriptor (session_conns.c). */
typedef struct conn_slot {
    unsigned open : 1, spoke : 1, told : 1;
    int64_t since_ns; /* its accept */
} conn_slot;

typedef struct request {
    int64_t req;
    int agent;
    pt_msg_type type; /* assign, start, stop, checkpoint */
} request;

struct pt_session {
    uint64_t run_token; /* the data plane's (runtime/comm.h), random per session; 0: not yet */
    void *ctx, *router, *sub;
    pt_zap *zap;             /* NULL: no CURVE */
    pt_zmq_watch *ctl_watch; /* the control socket's accepts and closes; NULL: none */
    conn_slot *conns;        /* [conn_cap], by descriptor */
    int conn_cap;
    int64_t silent_conns;     /* connections that sent nothing PT_SESSION_SILENT_MS after accept */
    int64_t refusals_told_ns; /* when refused handshakes were last reported */
    /* refused messages written one by one in the window that began at
     * reject_window_ns, and the ones only counted since */
    int64_t reject_window_ns, reject_lines, reject_quiet;
    int64_t refusals_untold; /* refused clients only counted, as of that report */
    char public_key[PT_KEY_Z85_LEN + 1];
    bound_name *bound;
    int nbound, boundcap;
    /* the byte budget shared by senders not in the agent table */
    int64_t stranger_budget, stranger_budget_ns, stranger_noted_ns;
    char ctl_ep[PT_MSG_ENDPOINT_MAX], tel_ep[PT_MSG_ENDPOINT_MAX];
    pt_record_writer *rec; /* NULL: no run record */
    int hb_ms, missed;
    int stall_ms;             /* silence after which an agent is dead (>= the heartbeat bound) */
    char fatal[PT_ERROR_MAX]; /* why the session cannot go on (pt_session_fatal); "" none */
    char agent_ckpt[PT_MSG_PATH_MAX]; /* the checkpoint folder as assigns name it; "": ckpt_dir */
    int64_t next_hb_ns;
    agent_entry *agents;
    int n, cap;
    /* agent index by id (session.c): open addressing, slots hold index + 1
     * (0 empty), at most half full; id_slot_n a power of two, or 0 */
    int *id_slots;
    int id_slot_n;
    pt_telemetry_rx *rx;
    int64_t gen, next_req;
    request *reqs;
    int nreq, reqcap;
    int *workers; /* agent index of each worker of the current plan */
    int worker_count, stage_count;
    char ckpt_dir[PT_MSG_PATH_MAX];
    int64_t committed;
    int commit_pipe[2];                 /* the commit process's result (session_ckpt.c); -1: none */
    int64_t kept[PT_SESSION_CKPT_KEEP]; /* steps this session committed, newest last */
    int kept_n;
    pt_session_listener listener;
    void *listener_user;
    pt_session_commit_fn commit;
    void *commit_user;
    pt_session_counts counts;
    /* A stop in two rounds (docs/protocol.md, "Stopping at one step"): hold
     * requests have ids in [hold_lo, hold_hi); hold_max is the highest step
     * their acks named; stop_at the common step then sent, -1 before. */
    int64_t hold_lo, hold_hi, hold_max, stop_at;
    char stop_reason[PT_MSG_TEXT_MAX];
};

/* ---- shared helpers ---------------------------------------------------------- */

/* session.c */
void session_note(pt_session *s, pt_session_note_kind kind, int agent, const pt_msg *msg,
                  int64_t step, const char *text);
void session_describe(const pt_session_agent *a, char *buf, size_t cap);
void session_record_frame(pt_session *s, pt_record_line_kind kind, const char *channel,
                          int64_t offset_ns, const char *data, size_t len);
void session_record_rejected(pt_session *s, const char *channel, const char *agent,
                             const char *reason);
/* A refused message's line in the record and note to the listener: the
 * first PT_SESSION_REJECT_LINES of every PT_SESSION_REJECT_WINDOW_MS, then
 * one line per window saying how many more were refused (a flood of junk
 * is counted, not written 20,000 times); agent may be NULL. */
void session_say_rejected(pt_session *s, int i, const char *channel, const char *agent,
                          const char *reason);
/* At a window's end: the line of the refusals only counted in it. */
void session_rejected_summary(pt_session *s, int64_t now);
void session_set_state(pt_session *s, int i, pt_agent_state st);
void session_drop_requests_of(pt_session *s, int agent);
/* The agent table's index by id (what pt_session_find_agent reads): room
 * for agent s->n, 0 or PT_ENOMEM (the table unchanged); then, once
 * s->agents[i] has its id, session_index_add. Agents are never removed
 * and their ids never change. */
int session_index_reserve(pt_session *s);
void session_index_add(pt_session *s, int i);
/* session_control.c */
int session_send_to(pt_session *s, int i, pt_msg *m, pt_error *err);
int session_add_request(pt_session *s, int agent, pt_msg_type type, int64_t req);
int session_live(const agent_entry *e);
void session_reject(pt_session *s, int i, const char *channel, const char *agent,
                    const char *reason);
int session_key_refused(pt_session *s, const char *channel, int i, const pt_msg *m,
                        const char *key);
/* session_conns.c */
/* A control message came in frame's connection. */
void session_conn_spoke(pt_session *s, zmq_msg_t *frame);
/* Counts and says the connections silent since PT_SESSION_SILENT_MS. */
void session_conns_check(pt_session *s, int64_t now);
/* session_telemetry.c */
int session_drain_telemetry(pt_session *s, pt_error *err);
/* session_ckpt.c */
void session_try_commit(pt_session *s);
void session_check_record(pt_session *s);
/* session_requests.c */
void session_on_hold_ack(pt_session *s, int64_t step);
/* Sends agent i's pending stops again (it registered again: a reconnect). */
void session_resend_stops(pt_session *s, int i);

#endif
