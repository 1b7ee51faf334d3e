/* pipetop-agent: registers with a console, obeys its plan, streams telemetry.
 *
 *   pipetop-agent --console tcp://HOST:PORT [--telemetry tcp://HOST:PORT]
 *                 [--device N|cpu|cuda:N[:PREC]] [--index N] [--name NAME]
 *                 [--data-bind ENDPOINT]
 *                 [--threads N] [--comm-timeout-ms MS]
 *                 [--key MYKEY.key --server-key CONSOLE.pub|Z85] [--grace-ms MS]
 *
 * This file starts the control thread (agent/control.h: arguments, device,
 * keys, sockets) and runs its loop (agent/control.c) until the agent leaves.
 * Exit status: 0 after a bye or a signal, 1 when it could not start, 2 on a
 * usage error, 3 when the console went silent, 4 when the console refused
 * this agent's key or handshake. */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/control.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/opts.h"
#include "protocol/telemetry.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/blas_core.h"
#include "runtime/comm_nccl.h"
#include "runtime/trust.h"
#include "runtime/zmq_watch.h"

#define EXIT_USAGE        2
#define EXIT_NO_CONSOLE   3
#define EXIT_REFUSED      4 /* the console refused this agent's key */
#define THREADS_MAX       1024
#define NOTIFY_EP_FMT     "inproc://pt-agent-notify-%p"
#define DEFAULT_DATA_BIND "tcp://127.0.0.1:*"
#define MSG_FRAME_SLACK   4096 /* bytes beyond PT_MSG_MAX_BYTES a control frame may have */

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
static int parse_device(const char *v, pt_agent_args *a)
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

static int parse_args(int argc, char **argv, pt_agent_args *a)
{
    *a = (pt_agent_args){.device = -1, .data_bind = DEFAULT_DATA_BIND, .grace_ms = -1};
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
        {"observe", PT_OPT_STRING, &a->observe, 0, 0, 0, "DIR",
         "relay a PyTorch run instead of training: its pipetop_torch.Monitor\n"
         "writes to DIR/rank-<r>.sock (DIR: mode 0700; docs/torch.md)"},
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
    if (a->observe && pt_agent_observe_dir_ok(a->observe) < 0)
        return EXIT_USAGE;
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

/* ---- set-up ------------------------------------------------------------------------- */

/* Binds an ephemeral data port once to learn it, and releases it: the
 * worker binds the same endpoint for every plan generation, so the endpoint
 * given in register stays valid for the agent's life. */
static int reserve_data_endpoint(pt_agent_ctl *ag)
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

static int open_sockets(pt_agent_ctl *ag)
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
    /* With CURVE, the DEALER's events: a refused key is said at once (libzmq
     * never retries a refused handshake), and a console restart within the
     * grace is picked up (agent/control.c) */
    if (ag->curve &&
        pt_zmq_watch_start(ag->ctx, ag->dealer, ZMQ_EVENT_DISCONNECTED | PT_WATCH_HANDSHAKE_EVENTS,
                           &ag->monitor, &terr) < 0) {
        fprintf(stderr, "pipetop-agent: control monitor: %s\n", terr.msg);
        return -1;
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
                                 root,
                                 ag->a.observe};
    pt_error err = {0};
    if (pt_agent_worker_start(&wc, &ag->worker, &err) < 0) {
        fprintf(stderr, "pipetop-agent: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* --key (a pair, mode 0600) and --server-key (a file or Z85). */
static int load_keys(pt_agent_ctl *ag)
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
static void device_from_env(pt_agent_args *a)
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

int main(int argc, char **argv)
{
    pt_blas_fixup_core(argv); /* may restart the process with faster BLAS kernels */
    umask(077);          /* checkpoints and logs are the user's alone, as the console's files */
    pt_fd_limit_raise(); /* its peers' connections, its data rings' files */
    pt_agent_ctl ag;
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
    ag.signal = &g_signal;
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
    pt_agent_ctl_register(&ag);
    pt_agent_ctl_loop(&ag);
    {
        /* Also after the console's bye: it then knows this agent left rather
         * than went silent. */
        pt_msg m;
        pt_msg_init(&m, PT_MSG_BYE, NULL);
        m.gen = ag.gen;
        snprintf(m.u.bye.reason, sizeof m.u.bye.reason, "%s", ag.why);
        pt_agent_ctl_send(&ag, &m);
    }
    int joined = pt_agent_worker_destroy(&ag.worker, PT_AGENT_JOIN_MS);
    fprintf(stderr,
            "pipetop-agent %s: leaving: %s; control messages: %llu accepted, %llu rejected\n",
            ag.id, ag.why, (unsigned long long)ag.accepted, (unsigned long long)ag.rejected);
    pt_zmq_watch_stop(&ag.monitor);
    zmq_close(ag.dealer);
    zmq_close(ag.notify);
    if (joined == 0) {
        zmq_ctx_term(ag.ctx); /* a worker that did not end may still hold sockets */
        pt_device_close(&ag.be);
    }
    return ag.leaving == 2 ? EXIT_NO_CONSOLE : ag.leaving == 4 ? EXIT_REFUSED : 0;
}
