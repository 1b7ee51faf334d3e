/* The agent's control thread, shared by agent/main.c (arguments, keys,
 * sockets, start and exit) and agent/control.c (the loop: registration,
 * heartbeats both ways, the checks on every control message, the hand-over
 * of requests to the worker thread, the console's silence and restarts).
 * Not for other modules. See agent/agent.h. */
#ifndef PT_AGENT_CONTROL_H
#define PT_AGENT_CONTROL_H

#include <signal.h>
#include <stdint.h>

#include "agent/agent.h"
#include "protocol/keyfile.h"
#include "protocol/message.h"
#include "protocol/telemetry.h"
#include "runtime/backend_select.h"

typedef struct pt_agent_args {
    const char *console, *telemetry, *name, *data_bind, *key_path, *server_key_arg;
    const char *checkpoint_root;
    const char *observe; /* --observe DIR: relay a PyTorch run (agent/observe.c) */
    int device, threads, comm_timeout_ms, grace_ms;
    pt_device_spec compute; /* --device cpu|cuda:N: where the worker computes */
    int device_given;       /* --device or --index was given */
    /* --simulate (agent/sim.c, agent/sim_main.c): simulated agents */
    int simulate, count;
    const char *profile, *topology, *straggler, *fail;
    double noise;
    int64_t sim_seed;
    int silence_ms; /* --console-silence-ms (simulated agents only); 0: the heartbeat bound */
} pt_agent_args;

typedef struct pt_agent_ctl {
    pt_agent_args a;
    char id[PT_MSG_ID_MAX];
    char data_ep[PT_MSG_ENDPOINT_MAX];
    void *ctx, *dealer, *notify;
    pt_agent_worker *worker;
    const pt_backend *be; /* from a.compute, opened before the worker starts */
    int64_t gen;          /* generation accepted (assign) */
    int64_t tx_seq;       /* next control seq sent */
    int64_t rx_next;      /* next control seq expected from the console */
    int64_t hb_out;
    int has_hb_in; /* the console's newest heartbeat, to echo */
    int64_t hb_in, hb_in_tsend, hb_in_trecv;
    int64_t last_heard_ns;
    int64_t next_hb_ns; /* when the next heartbeat is due */
    int heard;          /* the console said something at all */
    pt_clock_filter clk;
    int curve; /* --key and --server-key given */
    pt_keyfile key;
    char server_key[PT_KEY_Z85_LEN + 1];
    /* Console restarts (CURVE and a grace only): the DEALER's monitor tells
     * when the link broke and when a console proved the key again. */
    struct pt_zmq_watch *monitor; /* the DEALER's events (CURVE only) */
    int link_down;                /* disconnected since the last handshake */
    int orphaned;                 /* the console went silent during a run: in the grace period */
    int64_t orphaned_ns;          /* when */
    uint64_t reattached;          /* times a console picked this agent up again */
    uint64_t rejected, accepted;
    int leaving;                         /* 1 bye, 2 console lost, 3 signal */
    const volatile sig_atomic_t *signal; /* nonzero: a signal asks the agent to leave */
    char why[PT_MSG_TEXT_MAX];
    int joined; /* pt_agent_ctl_close: the worker thread ended */
} pt_agent_ctl;

/* ---- agent/ctl_setup.c: set-up and tear-down (each says why on stderr and
 * returns -1 on failure) */
/* --key and --server-key into ag->key, ag->server_key; ag->curve = 1. */
int pt_agent_ctl_load_keys(pt_agent_ctl *ag);
/* Binds --data-bind once to learn the endpoint into ag->data_ep. */
int pt_agent_ctl_reserve_data(pt_agent_ctl *ag);
/* The DEALER (connected), the notify PAIR and the worker, in ctx (which
 * the caller terminates after pt_agent_ctl_close). sim: simulate (NULL:
 * train or observe), as agent sim_index of the process. */
int pt_agent_ctl_open(pt_agent_ctl *ag, void *ctx, const pt_agent_sim *sim, int sim_index);
/* Says bye, ends the worker (ag->joined), closes the sockets. */
void pt_agent_ctl_close(pt_agent_ctl *ag);

/* Most simulated agents in one process (--count). */
#define PT_AGENT_SIM_MAX 4096
/* --simulate: runs tmpl->a.count (at least 1) simulated agents, each a copy
 * of tmpl (arguments, keys, id as the base of their names) with its own
 * control loop on its own thread, and returns the exit status (as main's):
 * 0 when every agent left after a bye or a signal. agent/sim_main.c. */
int pt_agent_sim_main(const pt_agent_ctl *tmpl, const volatile sig_atomic_t *sig);

/* Sends m to the console (its agent name and sequence number filled in). */
void pt_agent_ctl_send(pt_agent_ctl *ag, pt_msg *m);
/* Sends this agent's register. */
void pt_agent_ctl_register(pt_agent_ctl *ag);
/* Runs until the agent leaves: ag->leaving and ag->why say why. */
void pt_agent_ctl_loop(pt_agent_ctl *ag);

#endif
