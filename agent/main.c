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
#define DEFAULT_DATA_BIND "tcp://127.0.0.1:*"

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
        {"simulate", PT_OPT_FLAG, &a->simulate, 0, 0, 0, NULL,
         "simulate instead of training: run the schedule program with the\n"
         "simulator's op durations (needs --profile and --topology)"},
        {"count", PT_OPT_INT, &a->count, 1, PT_AGENT_SIM_MAX, 0, "N",
         "with --simulate: N simulated agents in this process, named NAME-0..\n"
         "NAME-<N-1>, devices D..D+N-1 (D: --device, default 0)"},
        {"profile", PT_OPT_STRING, &a->profile, 0, 0, 0, "FILE", "with --simulate: the profile"},
        {"topology", PT_OPT_STRING, &a->topology, 0, 0, 0, "FILE", "with --simulate: the topology"},
        {"noise", PT_OPT_DOUBLE, &a->noise, 0, 0.9, 0, "F",
         "with --simulate: each op lasts 1 + F*U(-1,1) of its time (default 0)"},
        {"sim-seed", PT_OPT_INT64, &a->sim_seed, 0, PT_MSG_INT_MAX, 0, "N",
         "with --simulate: seed of the noise (default 0)"},
        {"straggler", PT_OPT_STRING, &a->straggler, 0, 0, 0, "K:PCT:STEP",
         "with --simulate: agent K's device is PCT percent slower from step STEP on\n"
         "(the others wait for it, as in a run)"},
        {"fail", PT_OPT_STRING, &a->fail, 0, 0, 0, "K:STEP",
         "with --simulate: agent K fails when it reaches step STEP"},
        {"console-silence-ms", PT_OPT_INT, &a->silence_ms, 1, INT_MAX, 0, "MS",
         "with --simulate: how long the console may be silent before the agents\n"
         "take it for gone (default: the heartbeat bound, " PT_OPTS_STR(
             PT_AGENT_MISSED_HEARTBEATS) " x " PT_OPTS_STR(PT_AGENT_HEARTBEAT_MS) " ms); longer,\n"
                                                                                  "to measure a "
                                                                                  "console that "
                                                                                  "stalls"},
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
    if (!a->simulate &&
        (a->count || a->profile || a->topology || a->straggler || a->fail || a->silence_ms)) {
        fprintf(stderr, "pipetop-agent: --count, --profile, --topology, --straggler and --fail "
                        "go with --simulate\n");
        return EXIT_USAGE;
    }
    if (a->simulate && (!a->profile || !a->topology || a->observe)) {
        fprintf(stderr, "pipetop-agent: --simulate needs --profile and --topology (the console's), "
                        "and not --observe\n");
        return EXIT_USAGE;
    }
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
    if (ag.a.key_path && pt_agent_ctl_load_keys(&ag) < 0)
        return 1;
    if (!ag.a.device_given && !ag.a.simulate)
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
    if (ag.a.simulate)
        return pt_agent_sim_main(&ag, &g_signal);
    void *ctx = zmq_ctx_new();
    if (pt_agent_ctl_reserve_data(&ag) < 0 || pt_agent_ctl_open(&ag, ctx, NULL, 0) < 0) {
        fprintf(stderr, "pipetop-agent %s: cannot start\n", ag.id);
        return 1;
    }
    pt_agent_ctl_register(&ag);
    pt_agent_ctl_loop(&ag);
    pt_agent_ctl_close(&ag);
    if (ag.joined) {
        zmq_ctx_term(ctx); /* a worker that did not end may still hold sockets */
        pt_device_close(&ag.be);
    }
    return ag.leaving == 2 ? EXIT_NO_CONSOLE : ag.leaving == 4 ? EXIT_REFUSED : 0;
}
