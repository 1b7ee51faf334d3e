/* pipetop-agent: registers with a console, obeys its plan, streams telemetry.
 *
 *   pipetop-agent --console tcp://HOST:PORT [--telemetry tcp://HOST:PORT]
 *                 [--device N|cpu|cuda:N[:PREC]] [--index N] [--name NAME]
 *                 [--data-bind ENDPOINT]
 *                 [--threads N] [--comm-timeout-ms MS]
 *                 [--key MYKEY.key --server-key CONSOLE.pub|Z85] [--grace-ms MS]
 *
 * This file is the control thread (see agent/agent.h): the DEALER to the
 * console, heartbeats, checks on every control message, and the hand-over
 * of requests to the worker thread (agent/worker.c). Exit status: 0 after a
 * bye or a signal, 1 when it could not start, 2 on a usage error, 3 when the
 * console went silent. */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/agent.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/opts.h"
#include "protocol/telemetry.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/blas_core.h"
#include "runtime/comm_nccl.h"
#include "runtime/trust.h"

#define NS_PER_MS         1000000LL
#define EXIT_USAGE        2
#define EXIT_NO_CONSOLE   3
#define THREADS_MAX       1024
#define NOTIFY_EP_FMT     "inproc://pt-agent-notify-%p"
#define MONITOR_EP_FMT    "inproc://pt-agent-monitor-%p"
#define DEFAULT_DATA_BIND "tcp://127.0.0.1:*"
#define MSG_FRAME_SLACK   4096 /* bytes beyond PT_MSG_MAX_BYTES a control frame may have */

typedef struct agent_args {
    const char *console, *telemetry, *name, *data_bind, *key_path, *server_key_arg;
    const char *checkpoint_root;
    int device, threads, comm_timeout_ms, grace_ms;
    pt_device_spec compute; /* --device cpu|cuda:N: where the worker computes */
    int device_given;       /* --device or --index was given */
} agent_args;

typedef struct agent {
    agent_args a;
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
    void *monitor;
    int link_down;       /* disconnected since the last handshake */
    int orphaned;        /* the console went silent during a run: in the grace period */
    int64_t orphaned_ns; /* when */
    uint64_t reattached; /* times a console picked this agent up again */
    uint64_t rejected, accepted;
    int leaving; /* 1 bye, 2 console lost, 3 signal */
    char why[PT_MSG_TEXT_MAX];
} agent;

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

static const char usage_text[] =
    "usage: pipetop-agent --console tcp://HOST:PORT [options]\n"
    "Runs one stage replica of a pipetop plan on this device: registers with the\n"
    "console, receives its stage and peers, trains, and streams telemetry.\n\n";

static int valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= PT_MSG_ID_MAX)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              strchr("._:@-", *s)))
            return 0;
    return 1;
}

/* --device: a topology index (a number, as pipetop run passes it) or a
 * compute device (runtime/backend_select.h). */
static int parse_device(const char *v, agent_args *a)
{
    if ((v[0] >= '0' && v[0] <= '9') || v[0] == '-') {
        char *end = NULL;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || *end || x < -1 || x > PT_MSG_MAX_INDEX - 1) {
            fprintf(stderr, "pipetop-agent: --device: \"%s\" is not an index in [-1, %d]\n", v,
                    PT_MSG_MAX_INDEX - 1);
            return -1;
        }
        a->device = (int)x;
        return 0;
    }
    pt_error e = {0};
    if (pt_device_spec_parse(v, &a->compute, &e) < 0) {
        fprintf(stderr, "pipetop-agent: --device: %s\n", e.msg);
        return -1;
    }
    if (a->compute.cuda)
        a->device = a->compute.index;
    return 0;
}

static int parse_args(int argc, char **argv, agent_args *a)
{
    *a = (agent_args){.device = -1, .data_bind = DEFAULT_DATA_BIND, .grace_ms = -1};
    const char *device = NULL;
    int index = -1;
    pt_opt opts[] = {
        {"console", PT_OPT_STRING, &a->console, 0, 0, 0, "EP",
         "the console's control endpoint (ROUTER)"},
        {"telemetry", PT_OPT_STRING, &a->telemetry, 0, 0, 0, "EP",
         "where to publish telemetry (default: what the console says)"},
        {"device", PT_OPT_STRING, &device, 0, 0, 0, "D",
         "N: this device's index in the topology (default -1: none);\n"
         "cpu or cuda:N[:fp32|tf32|bf16]: where to compute (default cpu),\n"
         "with N also the index unless --index says otherwise"},
        {"index", PT_OPT_INT, &index, -1, PT_MSG_MAX_INDEX - 1, 0, "N",
         "this device's index in the topology, beside --device cuda:N"},
        {"name", PT_OPT_STRING, &a->name, 0, 0, 0, "NAME",
         "agent id, [A-Za-z0-9._:@-] (default HOST-PID)"},
        {"data-bind", PT_OPT_STRING, &a->data_bind, 0, 0, 0, "EP",
         "where the data socket binds (default " DEFAULT_DATA_BIND ")"},
        {"threads", PT_OPT_INT, &a->threads, 1, THREADS_MAX, 0, "N", "OpenBLAS threads"},
        {"checkpoint-root", PT_OPT_STRING, &a->checkpoint_root, 0, 0, 0, "DIR",
         "the run folder checkpoints are written under: an assign names a\n"
         "folder inside it, never an absolute path or one through \"..\"\n"
         "(default: the working directory)"},
        {"comm-timeout-ms", PT_OPT_INT, &a->comm_timeout_ms, 1, INT_MAX, 0, "MS",
         "bound of every data-plane wait (default " PT_OPTS_STR(PT_AGENT_COMM_TIMEOUT_MS) ")"},
        {"key", PT_OPT_STRING, &a->key_path, 0, 0, 0, "FILE",
         "this agent's CURVE key pair (pipetop keys --out DIR/NAME: NAME.key);\n"
         "its NAME.pub goes on the console's allow-list"},
        {"server-key", PT_OPT_STRING, &a->server_key_arg, 0, 0, 0, "K",
         "the console's public key: its NAME.pub file or the 40 Z85 characters;\n"
         "the agent talks to no console that cannot prove it holds this key"},
        {"grace-ms", PT_OPT_INT, &a->grace_ms, 0, INT_MAX, 0, "MS",
         "with --key: keep training this long after the console went silent,\n"
         "for a console with the same key to pick the run up (default " PT_OPTS_STR(
             PT_AGENT_CONSOLE_GRACE_MS) ")"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = pt_opts_parse_program("pipetop-agent", argc, argv, opts, n, stderr);
    if (rc == PT_OPTS_HELP) {
        pt_opts_help(stdout, usage_text, opts, n, NULL);
        return 0;
    }
    if (rc != PT_OPTS_OK)
        return EXIT_USAGE;
    if (device && parse_device(device, a) < 0)
        return EXIT_USAGE;
    a->device_given = device != NULL || pt_opts_find(opts, n, "index")->seen;
    if (a->grace_ms > 0 && !a->key_path) {
        fprintf(stderr, "pipetop-agent: --grace-ms needs --key and --server-key: without CURVE a "
                        "new console cannot prove it is the one that started the run\n");
        return EXIT_USAGE;
    }
    if (a->grace_ms < 0)
        a->grace_ms = a->key_path ? PT_AGENT_CONSOLE_GRACE_MS : 0;
    if (!a->key_path != !a->server_key_arg) {
        fprintf(stderr, "pipetop-agent: --key and --server-key go together (make keys with "
                        "pipetop keys --out DIR/NAME)\n");
        return EXIT_USAGE;
    }
    if (pt_opts_find(opts, n, "index")->seen)
        a->device = index;
    if (!a->console) {
        fprintf(stderr, "pipetop-agent: --console is required (see --help)\n");
        return EXIT_USAGE;
    }
    if (a->name && !valid_id(a->name)) {
        fprintf(stderr,
                "pipetop-agent: --name: \"%s\" must be 1-63 characters of "
                "[A-Za-z0-9._:@-]\n",
                a->name);
        return EXIT_USAGE;
    }
    return -1;
}

/* The checkpoint root, absolute (what the worker joins an assign's folder
 * to): --checkpoint-root, made if missing, or the working directory. */
static int ckpt_root(const char *opt, char *out, size_t cap)
{
    pt_error err = {0};
    char *abs = NULL;
    if (opt && pt_mkdir_p(opt, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --checkpoint-root: %s\n", err.msg);
        return 0;
    }
    abs = realpath(opt ? opt : ".", NULL);
    if (!abs || strlen(abs) >= cap) {
        fprintf(stderr, "pipetop-agent: --checkpoint-root %s: %s\n", opt ? opt : ".",
                abs ? "path too long" : strerror(errno));
        free(abs);
        return 0;
    }
    snprintf(out, cap, "%s", abs);
    free(abs);
    return 1;
}

/* ---- sending --------------------------------------------------------------------- */

static void send_msg(agent *ag, pt_msg *m)
{
    snprintf(m->agent, sizeof m->agent, "%s", ag->id);
    m->seq = ag->tx_seq;
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    if (pt_msg_encode(m, &text, &len, &err) < 0) {
        fprintf(stderr, "pipetop-agent %s: cannot encode %s: %s\n", ag->id,
                pt_msg_type_name(m->type), err.msg);
        return;
    }
    if (zmq_send(ag->dealer, text, len, ZMQ_DONTWAIT) == (int)len)
        ag->tx_seq++;
    free(text);
}

static void send_error(agent *ag, int64_t gen, int64_t req, int stage, int replica, int code,
                       const char *reason)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ERROR, NULL);
    m.gen = gen;
    m.req = req;
    m.u.error.stage = stage;
    m.u.error.replica = replica;
    m.u.error.code = code <= 0 && code >= -1000 ? code : PT_EINVAL;
    snprintf(m.u.error.reason, sizeof m.u.error.reason, "%s", reason && reason[0] ? reason : "?");
    send_msg(ag, &m);
}

/* step: acks of stop only, the step boundary held at / stopped at; -1: none. */
static void send_ack_step(agent *ag, int64_t gen, int64_t req, pt_msg_type of, int64_t step)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_ACK, NULL);
    m.gen = gen;
    m.req = req;
    m.u.ack.of = of;
    m.u.ack.step = of == PT_MSG_STOP && step >= 0 ? step : -1;
    send_msg(ag, &m);
}

static void send_ack(agent *ag, int64_t gen, int64_t req, pt_msg_type of)
{
    send_ack_step(ag, gen, req, of, -1);
}

static void send_heartbeat(agent *ag)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_HEARTBEAT, NULL);
    m.gen = ag->gen;
    m.u.heartbeat.hb = ag->hb_out++;
    m.u.heartbeat.t_send = pt_msg_now_ns();
    if (ag->has_hb_in) {
        m.u.heartbeat.has_echo = 1;
        m.u.heartbeat.echo_hb = ag->hb_in;
        m.u.heartbeat.echo_t_orig = ag->hb_in_tsend;
        m.u.heartbeat.echo_t_recv = ag->hb_in_trecv;
    }
    int64_t step = -1;
    pt_agent_worker_status(ag->worker, m.u.heartbeat.state, sizeof m.u.heartbeat.state, &step);
    m.u.heartbeat.step = step >= 0 ? step : -1;
    m.u.heartbeat.data_dropped = pt_agent_worker_data_dropped(ag->worker);
    send_msg(ag, &m);
}

static void send_register(agent *ag)
{
    pt_msg m;
    pt_msg_init(&m, PT_MSG_REGISTER, NULL);
    pt_msg_register *r = &m.u.reg;
    if (gethostname(r->host, sizeof r->host) != 0 || !r->host[0])
        snprintf(r->host, sizeof r->host, "localhost");
    r->host[sizeof r->host - 1] = '\0';
    r->pid = getpid();
    r->device = ag->a.device;
    pt_device_describe(ag->be, r->device_name, sizeof r->device_name);
    snprintf(r->backend, sizeof r->backend, "%s", ag->be->name);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    r->memory_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    int64_t gpu_free = 0;
    if (pt_backend_is_cuda(ag->be) &&
        pt_backend_cuda_mem_info(ag->be, &gpu_free, &r->memory_bytes) < 0)
        r->memory_bytes = 0;
    pt_cuda_device_bus_id(pt_backend_cuda_device(ag->be), r->gpu_bus_id, sizeof r->gpu_bus_id);
    r->cap_count = 2;
    snprintf(r->caps[0], sizeof r->caps[0], "zmq");
    snprintf(r->caps[1], sizeof r->caps[1], "recompute");
    if (pt_backend_is_cuda(ag->be) && pt_nccl_built())
        snprintf(r->caps[r->cap_count++], sizeof r->caps[0], "nccl");
    snprintf(r->data_endpoint, sizeof r->data_endpoint, "%s", ag->data_ep);
    send_msg(ag, &m);
}

/* ---- receiving ------------------------------------------------------------------- */

static void reject(agent *ag, const pt_msg *m, const char *reason)
{
    ag->rejected++;
    fprintf(stderr, "pipetop-agent %s: rejected: %s\n", ag->id, reason);
    char text[PT_MSG_TEXT_MAX];
    snprintf(text, sizeof text, "rejected control message: %s", reason);
    /* A refused request is answered under its own id and generation. */
    send_error(ag, m ? m->gen : ag->gen, m && pt_msg_type_is_request(m->type) ? m->req : 0, -1, -1,
               PT_EINVAL, text);
}

static void handle(agent *ag, const char *data, size_t len)
{
    int64_t now = pt_msg_now_ns();
    pt_msg m;
    pt_error err = {0};
    if (pt_msg_decode(data, len, "control", &m, &err) < 0) {
        reject(ag, NULL, err.msg);
        return;
    }
    char why[PT_ERROR_MAX];
    if (strcmp(m.agent, ag->id) != 0) {
        snprintf(why, sizeof why, "control (%s): addressed to \"%s\", not to %s",
                 pt_msg_type_name(m.type), m.agent, ag->id);
        reject(ag, &m, why);
        goto done;
    }
    if (m.seq < ag->rx_next) {
        snprintf(why, sizeof why, "control (%s): seq %lld out of order (expected %lld or later)",
                 pt_msg_type_name(m.type), (long long)m.seq, (long long)ag->rx_next);
        reject(ag, &m, why);
        goto done;
    }
    ag->rx_next = m.seq + 1;
    if (pt_msg_accept(&m, PT_MSG_AT_AGENT, ag->gen, &err) < 0) {
        reject(ag, &m, err.msg);
        goto done;
    }
    if (m.type == PT_MSG_ASSIGN && m.gen <= ag->gen) {
        snprintf(why, sizeof why, "control (assign): plan generation %lld is not newer than %lld",
                 (long long)m.gen, (long long)ag->gen);
        reject(ag, &m, why);
        goto done;
    }
    ag->accepted++;
    ag->last_heard_ns = now;
    ag->heard = 1;
    switch (m.type) {
    case PT_MSG_HEARTBEAT: {
        const pt_msg_heartbeat *h = &m.u.heartbeat;
        ag->has_hb_in = 1;
        ag->hb_in = h->hb;
        ag->hb_in_tsend = h->t_send;
        ag->hb_in_trecv = now;
        if (h->has_echo)
            pt_clock_filter_add(&ag->clk, h->echo_t_orig, h->echo_t_recv, h->t_send, now);
        /* Answered at once, so the console's clock samples hold no waiting time
         * here; the own period starts again. */
        send_heartbeat(ag);
        ag->next_hb_ns = now + (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
        break;
    }
    case PT_MSG_ASSIGN:
        ag->gen = m.gen;
        pt_agent_worker_assign(ag->worker, &m); /* takes the message */
        break;
    case PT_MSG_START:
        if (pt_agent_worker_begin(ag->worker, m.gen, m.req, m.u.start.steps) < 0)
            send_error(ag, m.gen, m.req, -1, -1, PT_ESTATE,
                       "start: no plan of this generation is set up");
        else
            send_ack(ag, m.gen, m.req, PT_MSG_START);
        break;
    case PT_MSG_STOP:
        if (m.u.stop.hold) /* answered at once: the console picks the common step from it */
            send_ack_step(ag, m.gen, m.req, PT_MSG_STOP, pt_agent_worker_hold(ag->worker));
        else
            pt_agent_worker_stop(ag->worker, m.gen, m.req, m.u.stop.at_step);
        break;
    case PT_MSG_CHECKPOINT:
        if (pt_agent_worker_checkpoint(ag->worker, m.gen, m.req, m.u.checkpoint.step) < 0)
            send_error(ag, m.gen, m.req, -1, -1, PT_ERANGE,
                       "checkpoint: no plan is set up, or too many requests are waiting");
        break;
    case PT_MSG_BYE:
        ag->leaving = 1;
        snprintf(ag->why, sizeof ag->why, "the console said bye%s%.400s",
                 m.u.bye.reason[0] ? ": " : "", m.u.bye.reason);
        break;
    case PT_MSG_ERROR:
        fprintf(stderr, "pipetop-agent %s: the console reports: %s\n", ag->id, m.u.error.reason);
        break;
    default:
        break; /* pt_msg_accept refused the agent-only types */
    }
done:
    pt_msg_clear(&m);
}

static void handle_note(agent *ag, const pt_wnote *n)
{
    switch (n->kind) {
    case PT_WNOTE_SETUP:
        if (n->gen != ag->gen)
            break; /* a newer assign is already on its way to the worker */
        if (n->rc == 0)
            send_ack(ag, n->gen, n->req, PT_MSG_ASSIGN);
        else
            send_error(ag, n->gen, n->req, n->stage, n->replica, n->rc, n->text);
        break;
    case PT_WNOTE_CKPT: {
        if (n->req <= 0)
            break;
        pt_msg m;
        pt_msg_init(&m, PT_MSG_CHECKPOINT_ACK, NULL);
        m.gen = n->gen;
        m.req = n->req;
        m.u.checkpoint_ack.step = n->step;
        snprintf(m.u.checkpoint_ack.dir, sizeof m.u.checkpoint_ack.dir, "%s", n->dir);
        send_msg(ag, &m);
        break;
    }
    case PT_WNOTE_STOPPED:
        send_ack_step(ag, n->gen, n->req, PT_MSG_STOP, n->step);
        break;
    case PT_WNOTE_IDLE:
        send_heartbeat(ag); /* the console learns at once that the steps are done */
        break;
    case PT_WNOTE_FAILED:
        fprintf(stderr, "pipetop-agent %s: stage %d replica %d: %s\n", ag->id, n->stage, n->replica,
                n->text);
        send_error(ag, n->gen, n->req, n->stage, n->replica, n->rc, n->text);
        break;
    default:
        break;
    }
}

/* ---- set-up ------------------------------------------------------------------------- */

/* Binds an ephemeral data port once to learn it, and releases it: the
 * worker binds the same endpoint for every plan generation, so the endpoint
 * given in register stays valid for the agent's life. */
static int reserve_data_endpoint(agent *ag)
{
    pt_error err = {0};
    if (pt_trust_check_bind(ag->a.data_bind, ag->curve, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --data-bind: %s\n", err.msg);
        return -1;
    }
    void *ctx = zmq_ctx_new();
    void *s = ctx ? zmq_socket(ctx, ZMQ_PULL) : NULL;
    int rc = -1;
    if (s && zmq_bind(s, ag->a.data_bind) == 0) {
        size_t len = sizeof ag->data_ep;
        if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ag->data_ep, &len) == 0)
            rc = 0;
    }
    if (rc < 0)
        fprintf(stderr, "pipetop-agent: cannot bind the data socket to %s: %s\n", ag->a.data_bind,
                zmq_strerror(errno));
    if (s)
        zmq_close(s);
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

static int open_sockets(agent *ag)
{
    ag->ctx = zmq_ctx_new();
    if (!ag->ctx)
        return -1;
    ag->dealer = zmq_socket(ag->ctx, ZMQ_DEALER);
    ag->notify = zmq_socket(ag->ctx, ZMQ_PAIR);
    if (!ag->dealer || !ag->notify)
        return -1;
    int linger = 1000, hb_ivl = PT_AGENT_HEARTBEAT_MS;
    zmq_setsockopt(ag->dealer, ZMQ_ROUTING_ID, ag->id, strlen(ag->id));
    zmq_setsockopt(ag->dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(ag->dealer, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    int64_t max_msg = (int64_t)PT_MSG_MAX_BYTES + MSG_FRAME_SLACK;
    zmq_setsockopt(ag->dealer, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    pt_error terr = {0};
    if (ag->curve && pt_trust_client(ag->dealer, &ag->key, ag->server_key, &terr) < 0) {
        fprintf(stderr, "pipetop-agent: --key: %s\n", terr.msg);
        return -1;
    }
    if (ag->curve && ag->a.grace_ms > 0) {
        char mep[64];
        snprintf(mep, sizeof mep, MONITOR_EP_FMT, (void *)ag);
        ag->monitor = zmq_socket(ag->ctx, ZMQ_PAIR);
        if (!ag->monitor ||
            zmq_socket_monitor(ag->dealer, mep,
                               ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0 ||
            zmq_connect(ag->monitor, mep) != 0) {
            fprintf(stderr, "pipetop-agent: control monitor: %s\n", zmq_strerror(errno));
            return -1;
        }
    }
    if (zmq_connect(ag->dealer, ag->a.console) != 0) {
        fprintf(stderr, "pipetop-agent: --console %s: %s\n", ag->a.console, zmq_strerror(errno));
        return -1;
    }
    char ep[64];
    snprintf(ep, sizeof ep, NOTIFY_EP_FMT, (void *)ag);
    if (zmq_bind(ag->notify, ep) != 0)
        return -1;
    char root[PT_MSG_PATH_MAX];
    if (!ckpt_root(ag->a.checkpoint_root, root, sizeof root))
        return -1;
    pt_agent_worker_config wc = {ag->id,
                                 ag->ctx,
                                 ep,
                                 ag->data_ep,
                                 ag->a.telemetry,
                                 ag->a.comm_timeout_ms,
                                 ag->be,
                                 ag->curve ? &ag->key : NULL,
                                 ag->curve ? ag->server_key : NULL,
                                 root};
    pt_error err = {0};
    if (pt_agent_worker_start(&wc, &ag->worker, &err) < 0) {
        fprintf(stderr, "pipetop-agent: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* --key (a pair, mode 0600) and --server-key (a file or Z85). */
static int load_keys(agent *ag)
{
    pt_error err = {0};
    if (pt_keyfile_load(ag->a.key_path, &ag->key, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --key: %s\n", err.msg);
        return -1;
    }
    if (!ag->key.has_secret) {
        fprintf(stderr,
                "pipetop-agent: --key: %s holds no secret key (give the NAME.key of "
                "pipetop keys --out DIR/NAME)\n",
                ag->a.key_path);
        return -1;
    }
    if (pt_key_arg_public(ag->a.server_key_arg, ag->server_key, &err) < 0) {
        fprintf(stderr, "pipetop-agent: --server-key: %s\n", err.msg);
        return -1;
    }
    ag->curve = 1;
    return 0;
}

/* Without --device: the GPU a launcher gave this task. Slurm starts one
 * task per GPU with SLURM_LOCALID = the task's index on its node; when the
 * task sees one GPU (CUDA_VISIBLE_DEVICES bound per task, --gpus-per-task=1)
 * that is cuda:0, else the SLURM_LOCALID-th visible one. Without Slurm, a
 * CUDA_VISIBLE_DEVICES naming exactly one GPU means cuda:0. A GPU that then
 * cannot be opened falls back to the CPU (pt_device_open's caller). */
static void device_from_env(agent_args *a)
{
    const char *local = getenv("SLURM_LOCALID"), *visible = getenv("CUDA_VISIBLE_DEVICES");
    int nvis = 0;
    if (visible && visible[0]) {
        nvis = 1;
        for (const char *p = visible; *p; p++)
            nvis += *p == ',';
    }
    long idx = -1;
    char *end = NULL;
    if (local && local[0]) {
        errno = 0;
        long l = strtol(local, &end, 10);
        if (errno || *end || l < 0 || l >= PT_MSG_MAX_INDEX) {
            fprintf(stderr,
                    "pipetop-agent: SLURM_LOCALID=\"%s\" is not a task index; using the CPU\n",
                    local);
            return;
        }
        idx = nvis == 1 ? 0 : l;
        if (nvis > 1 && l >= nvis) {
            fprintf(stderr,
                    "pipetop-agent: SLURM_LOCALID=%ld but CUDA_VISIBLE_DEVICES=%s names %d GPUs; "
                    "using the CPU\n",
                    l, visible, nvis);
            return;
        }
    } else if (nvis == 1 && strcmp(visible, "-1") != 0) {
        idx = 0;
    }
    if (idx < 0)
        return;
    char spec[32];
    snprintf(spec, sizeof spec, "cuda:%ld", idx);
    pt_device_spec d;
    if (pt_device_spec_parse(spec, &d, NULL) < 0)
        return;
    fprintf(stderr,
            "pipetop-agent: no --device: %s from SLURM_LOCALID=%s CUDA_VISIBLE_DEVICES=%s\n", spec,
            local ? local : "(unset)", visible ? visible : "(unset)");
    a->compute = d;
}

/* The DEALER's monitor (a console restart, docs/deploy.md): a broken link
 * stops the heartbeats; a handshake after it (a console that proved the
 * key of --server-key, so the one this agent trusts) starts a new session:
 * its numbering starts again and the agent registers anew, telling it the
 * generation and step it is at through the heartbeat that follows. */
static void monitor_events(agent *ag)
{
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, ag->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, ag->monitor, 0);
        uint16_t id = 0;
        if (zmq_msg_size(&ev) >= sizeof id)
            memcpy(&id, zmq_msg_data(&ev), sizeof id);
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
        if (id == ZMQ_EVENT_DISCONNECTED) {
            ag->link_down = 1;
        } else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && ag->link_down) {
            ag->link_down = 0;
            ag->rx_next = 0;
            ag->has_hb_in = 0;
            pt_clock_filter_init(&ag->clk);
            ag->reattached++;
            char state[32] = "";
            int64_t done = -1;
            if (ag->worker)
                pt_agent_worker_status(ag->worker, state, sizeof state, &done);
            fprintf(stderr,
                    "pipetop-agent %s: a console holding the key reconnected%s; registering "
                    "again (generation %lld, last step done %lld)\n",
                    ag->id, ag->orphaned ? " within the grace period" : "", (long long)ag->gen,
                    (long long)done);
            send_register(ag);
            send_heartbeat(ag);
        }
    }
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- main loop ------------------------------------------------------------------------ */

/* A poll that ended well after it was due means this process was not
 * running (SIGSTOP, a host under swap): the console's silence in that time
 * is no sign of its end, and its heartbeats are still on their way in. */
static void forgive_own_stall(agent *ag, int64_t *started, int64_t due_ns)
{
    int64_t late = pt_msg_now_ns() - due_ns;
    if (late <= (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS)
        return;
    ag->last_heard_ns += late;
    *started += late;
}

static void loop(agent *ag)
{
    ag->next_hb_ns = pt_msg_now_ns();
    int64_t started = ag->next_hb_ns;
    const int64_t silence = (int64_t)PT_AGENT_MISSED_HEARTBEATS * PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
    while (!ag->leaving) {
        int64_t now = pt_msg_now_ns();
        if (g_signal) {
            ag->leaving = 3;
            snprintf(ag->why, sizeof ag->why, "signal %d", (int)g_signal);
            break;
        }
        if (now >= ag->next_hb_ns) {
            if (!ag->link_down) /* nothing piles up for the next console to refuse */
                send_heartbeat(ag);
            ag->next_hb_ns = now + (int64_t)PT_AGENT_HEARTBEAT_MS * NS_PER_MS;
        }
        long wait_ms = (long)((ag->next_hb_ns - now + NS_PER_MS - 1) / NS_PER_MS);
        zmq_pollitem_t items[3] = {{ag->dealer, 0, ZMQ_POLLIN, 0},
                                   {ag->notify, 0, ZMQ_POLLIN, 0},
                                   {ag->monitor, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, ag->monitor ? 3 : 2, wait_ms);
        forgive_own_stall(ag, &started, now + (int64_t)wait_ms * NS_PER_MS);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why, "poll: %s", zmq_strerror(errno));
            break;
        }
        while (items[0].revents & ZMQ_POLLIN) {
            zmq_msg_t f;
            zmq_msg_init(&f);
            if (zmq_msg_recv(&f, ag->dealer, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&f);
                break;
            }
            int more = zmq_msg_more(&f);
            if (more) {
                /* One frame per message: drop the rest and count the message once. */
                zmq_msg_t g;
                while (more) {
                    zmq_msg_init(&g);
                    if (zmq_msg_recv(&g, ag->dealer, ZMQ_DONTWAIT) < 0)
                        more = 0;
                    else
                        more = zmq_msg_more(&g);
                    zmq_msg_close(&g);
                }
                reject(ag, NULL, "control: a message of several frames (one JSON frame expected)");
            } else {
                handle(ag, zmq_msg_data(&f), zmq_msg_size(&f));
            }
            zmq_msg_close(&f);
            if (ag->leaving)
                break;
        }
        if (ag->monitor && (items[2].revents & ZMQ_POLLIN))
            monitor_events(ag);
        while (items[1].revents & ZMQ_POLLIN) {
            pt_wnote note;
            int got = zmq_recv(ag->notify, &note, sizeof note, ZMQ_DONTWAIT);
            if (got != (int)sizeof note)
                break;
            handle_note(ag, &note);
        }
        /* judged after reading what was queued, so a busy moment here is not
         * taken for the console's silence */
        now = pt_msg_now_ns();
        int64_t quiet = now - (ag->heard ? ag->last_heard_ns : started);
        const int64_t grace = (int64_t)ag->a.grace_ms * NS_PER_MS;
        if (!ag->leaving && ag->orphaned && quiet <= silence) {
            ag->orphaned = 0; /* a console picked the run up */
        } else if (!ag->leaving && ag->heard && quiet > silence && grace > 0 && ag->gen > 0 &&
                   quiet <= silence + grace) {
            if (!ag->orphaned) {
                ag->orphaned = 1;
                ag->orphaned_ns = now;
                fprintf(stderr,
                        "pipetop-agent %s: the console at %s was silent for %.1f s; training on "
                        "for up to %.1f s for a console holding its key to pick the run up\n",
                        ag->id, ag->a.console, (double)quiet / 1e9, (double)grace / 1e9);
            }
        } else if (!ag->leaving && ag->heard && quiet > silence && grace > 0 && ag->gen > 0) {
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why,
                     "the console at %s was silent for %.1f s (a grace of %.1f s included)",
                     ag->a.console, (double)quiet / 1e9, (double)grace / 1e9);
        } else if (!ag->leaving &&
                   quiet > (ag->heard ? silence : (int64_t)PT_AGENT_FIRST_CONTACT_MS * NS_PER_MS)) {
            ag->leaving = 2;
            snprintf(ag->why, sizeof ag->why, "the console at %s was silent for %.1f s",
                     ag->a.console, (double)quiet / 1e9);
        }
    }
}

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv); /* may restart the process with faster BLAS kernels */
    agent ag;
    memset(&ag, 0, sizeof ag);
    int st = parse_args(argc, argv, &ag.a);
    if (st >= 0)
        return st;
    pt_msg_now_ns(); /* fixes the origin of every time this agent sends */
    if (ag.a.threads > 0)
        openblas_set_num_threads(ag.a.threads);
    if (ag.a.name) {
        snprintf(ag.id, sizeof ag.id, "%s", ag.a.name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        for (char *p = host; *p; p++)
            if (!valid_id((char[]){*p, '\0'}))
                *p = '-';
        snprintf(ag.id, sizeof ag.id, "%.40s-%ld", host, (long)getpid());
    }
    pt_clock_filter_init(&ag.clk);
    if (ag.a.key_path && load_keys(&ag) < 0)
        return 1;
    if (!ag.a.device_given)
        device_from_env(&ag.a);
    {
        pt_error err = {0};
        if (pt_device_open(&ag.a.compute, &ag.be, &err) < 0 && !ag.a.device_given &&
            ag.a.compute.cuda) {
            fprintf(stderr, "pipetop-agent: %s; computing on the CPU\n", err.msg);
            ag.a.compute = (pt_device_spec){0};
            err = (pt_error){0};
            if (pt_device_open(&ag.a.compute, &ag.be, &err) == 0)
                err.msg[0] = '\0';
        }
        if (!ag.be) {
            fprintf(stderr, "pipetop-agent: --device: %s\n", err.msg);
            return 1;
        }
    }
    install_signals();
    if (reserve_data_endpoint(&ag) < 0 || open_sockets(&ag) < 0) {
        fprintf(stderr, "pipetop-agent %s: cannot start\n", ag.id);
        return 1;
    }
    send_register(&ag);
    loop(&ag);
    {
        /* Also after the console's bye: it then knows this agent left rather
         * than went silent. */
        pt_msg m;
        pt_msg_init(&m, PT_MSG_BYE, NULL);
        m.gen = ag.gen;
        snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "%s", ag.why);
        send_msg(&ag, &m);
    }
    int joined = pt_agent_worker_destroy(&ag.worker, PT_AGENT_JOIN_MS);
    fprintf(stderr,
            "pipetop-agent %s: leaving: %s; control messages: %llu accepted, %llu rejected\n",
            ag.id, ag.why, (unsigned long long)ag.accepted, (unsigned long long)ag.rejected);
    if (ag.monitor) {
        zmq_socket_monitor(ag.dealer, NULL, 0);
        zmq_close(ag.monitor);
    }
    zmq_close(ag.dealer);
    zmq_close(ag.notify);
    if (joined == 0) {
        zmq_ctx_term(ag.ctx); /* a worker that did not end may still hold sockets */
        pt_device_close(&ag.be);
    }
    return ag.leaving == 2 ? EXIT_NO_CONSOLE : 0;
}
