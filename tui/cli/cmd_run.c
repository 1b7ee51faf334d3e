/* pipetop run: a distributed training run on this machine. Validates the
 * plan against the model, the topology and memory, spawns one
 * pipetop-agent per stage replica, drives them through the run controller
 * (tui/control/run.h) and prints measured figures next to the simulator's
 * prediction for the same plan. --resume under another plan finds and
 * imports its checkpoint through tui/control/run_ckpt.h. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "planner/cost.h"
#include "planner/interleave.h"
#include "planner/planner.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/clock.h"
#include "protocol/datadir.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "runtime/data.h"
#include "tui/control/agent_spawn.h"
#include "protocol/opts.h"
#include "tui/cli/cli_error.h"
#include "tui/cli/commands.h"
#include "tui/cli/inputs.h"
#include "tui/record/figures.h"
#include "tui/record/progress.h"
#include "tui/control/run_ckpt.h"
#include "tui/control/run.h"
#include "tui/control/run_report.h"
#include "tui/control/session.h"

#define DEFAULT_SEED        1
#define DEFAULT_MB_SIZE     16
#define DEFAULT_PLANNER     "gpipe"
#define PROFILE_REPEATS     "5"
#define PROFILE_WARMUP      "2"
#define STAGE_REPEATS       "15" /* rounds of an in-place stage profile: robust to preemption */
#define PROFILE_ARGS_MAX    24
#define REGISTER_TIMEOUT_MS 30000
#define EXTERNAL_WAIT_MS    300000 /* --external: how long agents started by hand may take */
#define ASSIGN_TIMEOUT_MS   120000
#define STOP_TIMEOUT_MS     120000
#define PROFILE_TIMEOUT_MS  600000
#define POLL_MS             100
#define PLAIN_LINE_MS       1000
#define REAP_SLEEP_MS       20
#define PATH_CAP            4096
#define MAX_ITERS           (1LL << 40)
#define EXIT_SIGNAL_BASE    128 /* exit status after a stop on a signal: 128 + its number */

typedef struct run_args {
    const char *plan, *model, *data, *topology, *profile, *ckpt_dir, *resume, *run_dir, *schedule,
        *planner, *policy, *control_bind, *telemetry_bind, *key, *allow, *reattach;
    int64_t iters, epochs, ckpt_every, seed;
    int headless, json, stages, microbatches, mb_size, replicas, external, chunks;
    int stall_ms;
    int simulate; /* --simulate: simulated agents (docs/architecture.md) */
    double sim_noise;
    const char *sim_straggler, *sim_fail;
} run_args;

typedef struct run_ctx {
    run_args a;
    pt_inputs in; /* model, plan, topology, profile (tui/cli/inputs.h) */
    pt_program prog;
    pt_cost *cost;
    pt_sim *sim;
    pt_sim_result pred;
    pt_fig_pred fig; /* the summary's headline prediction and its label */
    int64_t data_count;
    char run_dir[PATH_CAP], ckpt_dir[PATH_CAP];
    int64_t resume_step, steps, target;
    pt_run *run;
    pt_session *s; /* the controller's */
    pt_run_report *report;
    int workers;
    int tty;
    double iter_ms; /* running mean of the iteration times reported */
    pt_progress *bar;
    int64_t next_step_out;
    double last_line_s;
    int64_t *first_heard; /* --reattach: per worker, the first step its metrics named; -1 none */
    int64_t adopt_step;   /* --reattach: the steps every worker had done when it was adopted */
} run_ctx;

static volatile sig_atomic_t g_interrupt;
static volatile sig_atomic_t g_signal_no; /* the first SIGINT/SIGTERM received */

static void on_sigint(int sig)
{
    if (!g_signal_no)
        g_signal_no = sig;
    g_interrupt++;
}

static const char usage_text[] =
    "usage: pipetop run --plan P --model M --data D [--iters N | --epochs N] [options]\n"
    "       pipetop run --stages S --schedule K --microbatches M --model M --data D ...\n"
    "Runs a plan with one pipetop-agent process per stage replica on this machine and\n"
    "prints measured iteration time, busy/bubble fractions and peak memory per stage\n"
    "replica next to the simulator's prediction.\n\n";

static int parse_args(int argc, char **argv, run_args *a)
{
    *a = (run_args){.seed = DEFAULT_SEED, .mb_size = DEFAULT_MB_SIZE, .replicas = 1};
    pt_opt opts[] = {
        {"plan", PT_OPT_STRING, &a->plan, 0, 0, 0, "P", "plan file (protocol/plan.h)"},
        {"model", PT_OPT_STRING, &a->model, 0, 0, 0, "M",
         "model spec: a path or a name in models/"},
        {"data", PT_OPT_STRING, &a->data, 0, 0, 0, "D", "synthetic, fashion-mnist, or a path"},
        {"iters", PT_OPT_INT64, &a->iters, 1, (double)MAX_ITERS, 0, "N",
         "iterations to train (default: 1 epoch)"},
        {"epochs", PT_OPT_INT64, &a->epochs, 1, 1e6, 0, "N", "epochs to train, instead of --iters"},
        {"headless", PT_OPT_FLAG, &a->headless, 0, 0, 0, NULL,
         "plain lines only, never a progress bar"},
        {"json", PT_OPT_FLAG, &a->json, 0, 0, 0, NULL,
         "JSON lines on stdout; the last is the summary"},
        {"checkpoint-dir", PT_OPT_STRING, &a->ckpt_dir, 0, 0, 0, "DIR",
         "save per-layer checkpoints there (on stop, and every K;\n"
         "default: RUN-DIR/ckpt)"},
        {"checkpoint-every", PT_OPT_INT64, &a->ckpt_every, 1, (double)MAX_ITERS, 0, "K",
         "steps between checkpoints"},
        {"resume", PT_OPT_STRING, &a->resume, 0, 0, 0, "DIR",
         "continue from a checkpoint (a run's checkpoint folder or\n"
         "one of its step-N folders), under this plan; checkpoints\n"
         "go to this run's folder (--run-dir), not to DIR"},
        {"topology", PT_OPT_STRING, &a->topology, 0, 0, 0, "T",
         "topology file (default: one node, one CPU device per\n"
         "stage replica)"},
        {"seed", PT_OPT_INT64, &a->seed, 0, 9007199254740991.0, 0, "S",
         "initial weights and data order (default " PT_OPTS_STR(DEFAULT_SEED) ")"},
        {"profile", PT_OPT_STRING, &a->profile, 0, 0, 0, "P",
         "profile for the prediction (default: measured now)"},
        {"run-dir", PT_OPT_STRING, &a->run_dir, 0, 0, 0, "DIR",
         "where the run record goes (default runs/<timestamp>)"},
        {"stages", PT_OPT_INT, &a->stages, 1, PT_MSG_MAX_INDEX, 0, "S",
         "quick form, instead of --plan (with --schedule and --microbatches):\n"
         "profile the model here and plan it into S stages"},
        {"schedule", PT_OPT_STRING, &a->schedule, 0, 0, 0, "K", "quick form: the schedule kind"},
        {"microbatches", PT_OPT_INT, &a->microbatches, 1, PT_PLAN_MB_COUNT_MAX, 0, "M",
         "quick form: micro-batches per iteration"},
        {"microbatch-size", PT_OPT_INT, &a->mb_size, 1, PT_PLAN_MB_SIZE_MAX, 0, "B",
         "quick form: samples per micro-batch (default " PT_OPTS_STR(DEFAULT_MB_SIZE) ")"},
        {"replicas", PT_OPT_INT, &a->replicas, 1, PT_MSG_MAX_INDEX, 0, "R",
         "quick form: devices per stage offered (default 1)"},
        {"planner", PT_OPT_STRING, &a->planner, 0, 0, 0, "NAME",
         "planner for the quick form (default " DEFAULT_PLANNER ")"},
        {"policy", PT_OPT_STRING, &a->policy, 0, 0, 0, "A|B", "quick form, dapple: warm-up policy"},
        {"chunks", PT_OPT_INT, &a->chunks, 2, PT_PLAN_CHUNKS_MAX, 0, "V",
         "quick form, interleaved: model chunks per device (default 2);\n"
         "the S planned devices get S x V balanced chunks"},
        {"external", PT_OPT_FLAG, &a->external, 0, 0, 0, NULL,
         "start no agents: wait for agents started by hand\n"
         "(pipetop-agent --console EP --telemetry EP [--device D]);\n"
         "a worker goes to the agent of its device, else to one started\n"
         "without --device"},
        {"stall-ms", PT_OPT_INT, &a->stall_ms, 1, INT_MAX / 2, 0, "MS",
         "how long one agent may be silent (stopped, swapping) while the\n"
         "pipeline waits for it; longer, and the run stops naming it\n"
         "(default " PT_OPTS_STR(PT_RUN_STALL_MS) ")"},
        {"control-bind", PT_OPT_STRING, &a->control_bind, 0, 0, 0, "EP",
         "where the console's ROUTER binds (default " PT_SESSION_DEFAULT_BIND ")"},
        {"telemetry-bind", PT_OPT_STRING, &a->telemetry_bind, 0, 0, 0, "EP",
         "where the console's SUB binds (default " PT_SESSION_DEFAULT_BIND ")"},
        {"key", PT_OPT_STRING, &a->key, 0, 0, 0, "FILE",
         "the console's CURVE key pair (pipetop keys --out DIR/NAME: NAME.key);\n"
         "agents give its NAME.pub as --server-key"},
        {"allow", PT_OPT_STRING, &a->allow, 0, 0, 0, "FILE",
         "agents' public keys allowed to join, one per line (Z85 or a .pub file)"},
        {"simulate", PT_OPT_FLAG, &a->simulate, 0, 0, 0, NULL,
         "simulated agents: one pipetop-agent --simulate --count N runs the\n"
         "schedule program with the simulator's durations (no training;\n"
         "default profile: analytic)"},
        {"sim-noise", PT_OPT_DOUBLE, &a->sim_noise, 0, 0.9, 0, "F",
         "with --simulate: each op lasts 1 + F*U(-1,1) of its time"},
        {"sim-straggler", PT_OPT_STRING, &a->sim_straggler, 0, 0, 0, "K:PCT:STEP",
         "with --simulate: agent K is PCT percent slower from step STEP on"},
        {"sim-fail", PT_OPT_STRING, &a->sim_fail, 0, 0, 0, "K:STEP",
         "with --simulate: agent K fails at step STEP"},
        {"reattach", PT_OPT_STRING, &a->reattach, 0, 0, 0, "RUNDIR",
         "pick up the run of a console that died (its run folder), with the\n"
         "same --key, endpoints and options: its agents (--external, within\n"
         "their --grace-ms) register again and train on, nothing restarts"},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = pt_opts_command("run", argc, argv, opts, n, usage_text, NULL);
    if (rc >= 0)
        return rc;
    const char *why = NULL;
    int quick = a->stages || a->schedule || a->microbatches;
    if (!a->model || !a->data)
        why = "--model and --data are required";
    else if (!a->simulate && (a->sim_noise > 0 || a->sim_straggler || a->sim_fail))
        why = "--sim-noise, --sim-straggler and --sim-fail go with --simulate";
    else if (a->simulate && a->external)
        why = "--simulate starts its own agents: not with --external";
    else if (a->plan && quick)
        why = "--plan and the quick form (--stages/--schedule/--microbatches) exclude each other";
    else if (!a->plan && !(a->stages && a->schedule && a->microbatches))
        why = "give --plan, or all of --stages, --schedule and --microbatches";
    else if (a->iters && a->epochs)
        why = "--iters and --epochs exclude each other";
    else if (a->policy && strcmp(a->policy, "A") && strcmp(a->policy, "B"))
        why = "--policy must be A or B";
    else if (a->chunks && (!a->schedule || strcmp(a->schedule, "interleaved")))
        why =
            "--chunks goes with the quick form's --schedule interleaved (a plan file has its own)";
    if (why) {
        pt_cli_error("run", a->json, PT_CLI_USAGE, "%s (see pipetop run --help)", why);
        return 2;
    }
    return -1;
}

#define RM_DEPTH_MAX 8 /* a refused run folder holds a profile and ckpt/ at most */

/* ---- output ------------------------------------------------------------------------ */

static void say(run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run_ctx *c, const char *fmt, ...)
{
    if (c->a.json)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static void json_event(run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void json_event(run_ctx *c, const char *fmt, ...)
{
    if (!c->a.json)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

static void fail_json(run_ctx *c, const char *reason)
{
    if (!c->a.json)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "failed");
    cJSON_AddStringToObject(o, "reason", reason);
    if (c->run_dir[0])
        cJSON_AddStringToObject(o, "run_dir", c->run_dir);
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        printf("%s\n", t);
    fflush(stdout);
    free(t);
    cJSON_Delete(o);
}

/* ---- preparation ---------------------------------------------------------------------- */

/* Waits for a child with a bound; returns its wait status or -1 (killed). */
static int wait_child(pid_t pid, int timeout_ms)
{
    double end = pt_clock_s() + timeout_ms / 1e3;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 || pt_clock_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        struct timespec ts = {0, REAP_SLEEP_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* An argv built by option names (for `pipetop profile` in a child). */
typedef struct argv_list {
    char *v[PROFILE_ARGS_MAX + 1];
    int n;
} argv_list;

static void arg(argv_list *l, const char *name, const char *value)
{
    if (l->n + 2 > PROFILE_ARGS_MAX)
        return; /* PROFILE_ARGS_MAX holds every option below */
    l->v[l->n++] = (char *)name;
    if (value)
        l->v[l->n++] = (char *)value;
    l->v[l->n] = NULL;
}

/* Measures the model's profile with `pipetop profile` in a child process:
 * a fresh process, so the profile runs with the BLAS threads each of
 * `workers` agents will have and in memory of its own, as the agents do,
 * with its output in a log and a bound on its time, and nothing of this
 * controller's state (threads, sockets) around it. With plan_path, each
 * stage is measured whole and in place, every stage replica at once as the
 * agents will run (`pipetop profile --plan P --beside`), into
 * RUN/profile.json; without, layer by layer into RUN/<name>. */
/* The last lines of a log file, as one line ('|' between them), in out. */
static void log_tail(const char *path, char *out, size_t cap)
{
    char buf[PT_ERROR_MAX / 2];
    size_t n = 0;
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        fseek(f, end > (long)sizeof buf - 1 ? end - (long)sizeof buf + 1 : 0, SEEK_SET);
        n = fread(buf, 1, sizeof buf - 1, f);
    }
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n')
            buf[i] = '|';
    snprintf(out, cap, "%s", buf);
}

static int measure_profile(run_ctx *c, int mb, int workers, const char *plan_path, const char *name,
                           pt_error *err)
{
    char dir[PATH_CAP], self[PATH_CAP + 16], out[PATH_CAP + 32], log[PATH_CAP + 32], batch[16],
        th[16];
    if (pt_exe_dir(dir, sizeof dir) < 0)
        return pt_error_set(err, PT_EIO, "cannot find this program's folder (/proc/self/exe)");
    snprintf(self, sizeof self, "%s/pipetop", dir);
    snprintf(out, sizeof out, "%s/%s", c->run_dir, name);
    snprintf(log, sizeof log, "%s/%s.log", c->run_dir, plan_path ? "profile" : "profile-layers");
    snprintf(batch, sizeof batch, "%d", mb);
    snprintf(th, sizeof th, "%d", pt_agent_threads(workers));
    argv_list av = {{self, "profile"}, 2};
    arg(&av, "--model", c->a.model);
    arg(&av, "--batch", batch);
    arg(&av, "--out", out);
    arg(&av, "--repeats", plan_path ? STAGE_REPEATS : PROFILE_REPEATS);
    arg(&av, "--warmup", PROFILE_WARMUP);
    /* an op of a replicated stage covers fewer rows, and on small layers its
     * time is not linear in them (docs/formats.md, "Rows per op") */
    arg(&av, "--fixed-share", NULL);
    if (!getenv("OPENBLAS_NUM_THREADS"))
        arg(&av, "--threads", th);
    if (plan_path) {
        arg(&av, "--plan", plan_path);
        arg(&av, "--beside", NULL);
    }
    if (plan_path)
        say(c, "profiling %s's stages in place at micro-batch %d, beside each other ...\n",
            c->in.spec->name, mb);
    else
        say(c, "profiling %s at micro-batch %d on this machine ...\n", c->in.spec->name, mb);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return pt_error_set(err, PT_EIO, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(self, av.v);
        _exit(127);
    }
    int st = wait_child(pid, PROFILE_TIMEOUT_MS);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        /* the log's end goes into the message: a run folder this run made
         * is removed when it stops here, log and all */
        char tail[PT_ERROR_MAX / 2];
        log_tail(log, tail, sizeof tail);
        return pt_error_set(err, PT_EIO, "pipetop profile failed (%s): %s",
                            st < 0 ? "timed out" : "its last words follow", tail);
    }
    pt_profile_free(&c->in.profile);
    return pt_profile_load(out, &c->in.profile, err);
}

/* The planned stages' devices with the layers cut into --chunks chunks each
 * (planner/interleave.h). */
static int interleave(run_ctx *c, pt_error *err)
{
    pt_cost *cost = NULL;
    pt_plan *p = NULL;
    int rc = pt_cost_new(c->in.profile, c->in.topo, &cost, err);
    if (rc == 0)
        rc = pt_plan_rechunk(c->in.plan, cost, c->in.plan->schedule,
                             c->a.chunks ? c->a.chunks : PT_PLAN_CHUNKS_DEFAULT, &p, err);
    pt_cost_free(&cost);
    if (rc < 0)
        return pt_error_prefix(err, "--chunks");
    pt_plan_free(&c->in.plan);
    c->in.plan = p;
    return 0;
}

static int quick_plan(void *user, pt_inputs *in, pt_error *err)
{
    run_ctx *c = user;
    (void)in; /* c->in */
    pt_sched_kind kind;
    if (pt_sched_kind_parse(c->a.schedule, &kind) < 0)
        return pt_error_set(err, PT_EINVAL, "--schedule: unknown schedule \"%s\"", c->a.schedule);
    const char *planner = c->a.planner ? c->a.planner : DEFAULT_PLANNER;
    pt_planner_opts o;
    pt_planner_opts_default(&o);
    o.stages = c->a.stages;
    o.microbatch_sizes[0] = c->a.mb_size;
    o.microbatch_size_count = 1;
    pt_planner_report rep;
    int rc = pt_planner_run(planner, c->in.profile, c->in.topo, c->a.mb_size * c->a.microbatches,
                            &o, &c->in.plan, &rep, err);
    if (rc < 0)
        return rc;
    char chose[96] = "";
    if (c->in.plan->stage_count != c->a.stages) {
        /* the planner picks its own depth (only gpipe takes a stage count):
         * --stages is what the user asked for, so split into that many */
        snprintf(chose, sizeof chose,
                 "; %s chose %d stages, split into the %d of --stages by gpipe", planner,
                 c->in.plan->stage_count, c->a.stages);
        pt_plan_free(&c->in.plan);
        if ((rc = pt_planner_run("gpipe", c->in.profile, c->in.topo,
                                 c->a.mb_size * c->a.microbatches, &o, &c->in.plan, &rep, err)) < 0)
            return rc;
        if (c->in.plan->stage_count != c->a.stages)
            return pt_error_set(err, PT_EINVAL,
                                "--stages %d: the model cannot be split into %d stages here",
                                c->a.stages, c->a.stages);
    }
    c->in.plan->schedule = kind;
    if (c->a.policy)
        c->in.plan->policy = c->a.policy[0];
    c->in.plan->microbatch_size = c->a.mb_size;
    c->in.plan->microbatch_count = c->a.microbatches;
    if (pt_sched_kind_has(kind, PT_SCHED_OPT_CHUNKS) && (rc = interleave(c, err)) < 0)
        return rc;
    char path[PATH_CAP + 16];
    snprintf(path, sizeof path, "%s/plan.json", c->run_dir);
    say(c, "planned with %s: %d stages, schedule %s, %d x %d samples (%s)%s\n", planner,
        c->in.plan->stage_count, pt_sched_kind_name(kind), c->in.plan->microbatch_count,
        c->in.plan->microbatch_size, path, chose);
    return pt_plan_save(c->in.plan, path, err);
}

/* Before anything slow: the run folder, and a data set the model can read. */
static int check_data(void *user, pt_inputs *in, pt_error *err)
{
    run_ctx *c = user;
    pt_dataset *ds = NULL;
    int rc = pt_run_dir_make(c->a.run_dir, NULL, c->run_dir, sizeof c->run_dir, err);
    if (rc < 0 || (rc = pt_dataset_open(c->a.data, in->spec, PT_DATA_TRAIN, 1, &ds, err)) < 0)
        return rc;
    c->data_count = pt_dataset_count(ds);
    pt_dataset_free(&ds);
    return 0;
}

/* The default profile is measured here: each stage of the plan whole, in
 * place, beside the others; before the quick form has planned, layer by
 * layer on as many devices as it offers. */
static int measured(void *user, pt_inputs *in, pt_error *err)
{
    run_ctx *c = user;
    if (!in->plan)
        return measure_profile(c, c->a.mb_size, c->a.stages * c->a.replicas, NULL,
                               "profile-layers.json", err);
    char plan_path[PATH_CAP + 16];
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", c->run_dir);
    return measure_profile(c, in->plan->microbatch_size, pt_plan_device_count(in->plan),
                           c->a.plan ? c->a.plan : plan_path, "profile.json", err);
}

/* The profile and topology the prediction is made from, beside the run's
 * record, so status, replay, export and calibrate predict with what this
 * run did (tui/record/figures.h), on any machine. */
static int save_inputs(run_ctx *c, pt_error *err)
{
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%s/profile.json", c->run_dir);
    int rc = pt_profile_save(c->in.profile, path, err);
    snprintf(path, sizeof path, "%s/topology.json", c->run_dir);
    return rc < 0 ? rc : pt_topology_save(c->in.topo, path, err);
}

/* --simulate without --profile: an analytic one (nothing is measured for
 * agents that do not compute). */
static int analytic(void *user, pt_inputs *in, pt_error *err)
{
    run_ctx *c = user;
    int mb = in->plan ? in->plan->microbatch_size : c->a.mb_size;
    pt_profile_free(&in->profile);
    return pt_inputs_analytic_profile(in->spec, mb, &in->profile, err);
}

/* Everything that can be refused before an agent starts. */
static int prepare(run_ctx *c, pt_error *err)
{
    int rc;
    const run_args *a = &c->a;
    if (a->reattach && (!a->external || !a->key))
        return pt_error_set(err, PT_EINVAL,
                            "--reattach needs --external and --key: only agents started by hand "
                            "outlive their console, and they trust only a console with its key");
    pt_inputs_opts io = {.model = a->model,
                         .plan = a->plan,
                         .topology = a->topology,
                         .local_devices = a->plan ? 0 : a->stages * a->replicas,
                         .profile = a->profile,
                         .check_model = check_data,
                         .make_profile = a->simulate ? analytic : measured,
                         .make_plan = quick_plan,
                         .user = c};
    if ((rc = pt_inputs_resolve(&io, &c->in, err)) < 0)
        return rc;
    const char *src = a->plan ? a->plan : "plan";
    if ((rc = pt_cost_check_memory(c->in.plan, c->in.profile, c->in.topo, err)) < 0)
        return pt_error_prefix(err, src);
    if ((rc = pt_sched_build(c->in.plan, c->in.profile, NULL, &c->prog, err)) < 0 ||
        (rc = pt_sched_validate(&c->prog, err)) < 0)
        return pt_error_prefix(err, src);
    int64_t global = (int64_t)c->in.plan->microbatch_size * c->in.plan->microbatch_count;
    if (global > c->data_count)
        return pt_error_set(err, PT_EINVAL,
                            "%s: a global batch of %lld samples is more than the "
                            "%lld of data set %s",
                            src, (long long)global, (long long)c->data_count, a->data);
    if ((rc = pt_cost_new(c->in.profile, c->in.topo, &c->cost, err)) < 0 ||
        (rc = pt_sim_new(&c->sim)) < 0 ||
        (rc = pt_sim_run(c->sim, &c->prog, c->cost, &c->pred, err)) < 0 ||
        (rc = save_inputs(c, err)) < 0)
        return rc;
    c->workers = pt_sched_host_count(&c->prog); /* one agent per device */
    /* how many steps, in whole programs (asynchronous kinds cover several iterations) */
    int64_t per_epoch = c->data_count / global;
    c->steps = a->iters ? a->iters : (a->epochs ? a->epochs : 1) * per_epoch;
    int wc = c->prog.window_count > 0 ? c->prog.window_count : 1;
    if (c->steps % wc) {
        int64_t rounded = (c->steps / wc + 1) * wc;
        say(c, "note: schedule %s runs %d iterations per program; %lld steps become %lld\n",
            pt_sched_kind_name(c->in.plan->schedule), wc, (long long)c->steps, (long long)rounded);
        c->steps = rounded;
    }
    /* checkpoints go into the run's own folder unless --checkpoint-dir says
     * where: a resumed run never into the run it resumed from (the step it
     * starts from is imported into its folder) */
    if (a->resume || a->ckpt_dir || a->ckpt_every) {
        if (a->ckpt_dir)
            snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s", a->ckpt_dir);
        else
            snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%.4000s/ckpt", c->run_dir);
        if ((rc = pt_mkdir_p(c->ckpt_dir, err)) < 0)
            return rc;
    }
    if (a->resume) {
        char root[PATH_CAP];
        if ((rc = pt_run_ckpt_find(a->resume, root, sizeof root, &c->resume_step, err)) < 0 ||
            (rc = pt_run_ckpt_check_target(c->ckpt_dir, c->resume_step, err)) < 0 ||
            (rc = pt_run_ckpt_import(root, c->ckpt_dir, c->resume_step, err)) < 0)
            return rc;
    }
    c->target = c->resume_step + c->steps;
    return 0;
}

/* ---- agents ------------------------------------------------------------------------------- */

/* Agents here: one per device (per worker, but an interleaved plan's agent
 * holds every chunk of its device: host h is worker h of the first stages),
 * on that device, so the controller's mapping gives device w to agent w.
 * --external: the instructions. */
static int start_agents(run_ctx *c, pt_error *err)
{
    if (c->a.external) {
        const char *pub = pt_session_public_key(c->s);
        fprintf(c->a.json ? stderr : stdout,
                "waiting for %d agents: start each with\n  pipetop-agent --console %s "
                "--telemetry %s --device D%s%s%s%s%s\n",
                c->workers, pt_session_control_endpoint(c->s), pt_session_telemetry_endpoint(c->s),
                pub[0] ? " --server-key " : "", pub, pub[0] ? " --key MYKEY.key" : "",
                c->ckpt_dir[0] ? " --checkpoint-root " : "", c->ckpt_dir);
        fflush(stdout);
        return 0;
    }
    int *devices = calloc((size_t)c->workers, sizeof *devices);
    if (!devices)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int w = 0; w < c->workers; w++)
        devices[w] = c->prog.workers[w].device;
    int rc = pt_run_spawn_on(c->run, devices, c->in.topo, err);
    free(devices);
    return rc;
}

/* The controller's cancel hook: a second ^C abandons whatever it waits
 * for; while it still waits for its agents there is nothing to stop at a
 * step, so the first ^C or SIGTERM ends the wait. */
static int interrupted_twice(void *user, pt_error *err)
{
    const run_ctx *c = user;
    if (g_interrupt > 1) {
        pt_error_set(err, PT_ESTATE, "interrupted twice: abandoning the run");
        return 1;
    }
    if (g_interrupt && c && c->run && pt_run_get_state(c->run) == PT_RUN_WAITING) {
        pt_error_set(err, PT_ESTATE, "interrupted by %s while waiting for the agents",
                     g_signal_no == SIGTERM ? "SIGTERM" : "SIGINT");
        return 1;
    }
    return 0;
}

/* ---- the session's listener ----------------------------------------------------------------- */

/* A stalled agent pauses the pipeline; say so, and when it goes on. */
static void note_stall(run_ctx *c, const pt_session_note *n)
{
    const pt_session_agent *ag = pt_session_agent_at(c->s, n->agent);
    const char *id = ag ? ag->id : "?";
    int stalled = n->kind == PT_NOTE_STALLED;
    fprintf(stderr, "pipetop run: agent %s %s\n", id,
            stalled ? (n->text ? n->text : "stalled") : "resumed: the pipeline goes on");
    json_event(c, "{\"event\":\"%s\",\"agent\":\"%s\"}", stalled ? "stalled" : "resumed", id);
}

static void on_note(void *user, const pt_session_note *n)
{
    run_ctx *c = user;
    const pt_session_agent *ag = pt_session_agent_at(c->s, n->agent);
    int w = ag ? ag->worker : -1;
    /* a late frame's step and worker are its old plan's: the report and the
     * step lines are this generation's (the record keeps the frame) */
    if (n->msg && n->msg->gen < pt_session_generation(c->s))
        return;
    switch (n->kind) {
    case PT_NOTE_METRICS:
        pt_run_report_metrics(c->report, w, &n->msg->u.metrics);
        if (c->first_heard && w >= 0 && w < c->workers) {
            const pt_msg_metrics *mt = &n->msg->u.metrics;
            int64_t from = mt->step - (mt->steps > 1 ? mt->steps - 1 : 0);
            if (c->first_heard[w] < 0 || from < c->first_heard[w])
                c->first_heard[w] = from;
        }
        c->iter_ms = c->iter_ms > 0 ? 0.8 * c->iter_ms + 0.2 * n->msg->u.metrics.iter_ms
                                    : n->msg->u.metrics.iter_ms;
        break;
    case PT_NOTE_EVENTS:
        pt_run_report_events(c->report, w, &n->msg->u.events);
        break;
    case PT_NOTE_CHECKPOINT:
        json_event(c, "{\"event\":\"checkpoint\",\"step\":%lld}", (long long)n->step);
        if (!c->tty || c->a.headless)
            say(c, "checkpoint: step %lld in %s/step-%lld\n", (long long)n->step, c->ckpt_dir,
                (long long)n->step);
        break;
    case PT_NOTE_DEAD:
    case PT_NOTE_ERROR:
        pt_cli_error("run", c->a.json, PT_ESTATE, "%s", n->text ? n->text : "?");
        break;
    case PT_NOTE_REJECTED:
        pt_cli_error("run", c->a.json, PT_EINVAL, "rejected: %s", n->text ? n->text : "?");
        break;
    case PT_NOTE_STALLED:
    case PT_NOTE_RESUMED:
        note_stall(c, n);
        break;
    case PT_NOTE_FATAL:
        fprintf(stderr, "pipetop run: %s\n", n->text ? n->text : "?");
        break;
    default:
        break;
    }
}

/* Prints the steps whose loss is complete, in order; passes over those
 * whose loss was lost in telemetry (pt_run_report_step_lost), which would
 * otherwise hold back every later step line. */
static void show_steps(run_ctx *c)
{
    double loss, rate;
    while (c->next_step_out < c->target) {
        if (!pt_run_report_step(c->report, c->next_step_out, &loss, &rate)) {
            if (!pt_run_report_step_lost(c->report, c->next_step_out))
                break;
            c->next_step_out++;
            continue;
        }
        int64_t k = c->next_step_out++;
        json_event(c, "{\"event\":\"step\",\"step\":%lld,\"loss\":%.9g,\"samples_per_s\":%.6g}",
                   (long long)k, loss, rate);
        char fields[96];
        snprintf(fields, sizeof fields, "loss %.4f  %.0f samples/s", loss, rate);
        if (c->bar) {
            pt_progress_update(c->bar, k + 1 - c->resume_step, fields);
        } else if (!c->a.json &&
                   (pt_clock_s() - c->last_line_s >= PLAIN_LINE_MS / 1e3 || k + 1 == c->target)) {
            printf("step %lld/%lld  %s\n", (long long)k + 1, (long long)c->target, fields);
            fflush(stdout);
            c->last_line_s = pt_clock_s();
        }
    }
}

/* ---- the run ---------------------------------------------------------------------------- */

/* --reattach: the generation the dead console's record names, on its agents. */
static int adopt(run_ctx *c, const pt_run_job *job, pt_error *err)
{
    char(*names)[PT_MSG_ID_MAX] = calloc((size_t)c->workers, sizeof *names);
    const char **list = calloc((size_t)c->workers, sizeof *list);
    int64_t gen = 0;
    int n = 0, rc = 0;
    if (!names || !list)
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_run_read_last_plan(c->a.reattach, &gen, names, c->workers, &n, err);
    if (rc == 0 && n != c->workers)
        rc = pt_error_set(err, PT_EINVAL, "--reattach %s: its plan has %d workers, this one %d",
                          c->a.reattach, n, c->workers);
    for (int w = 0; rc == 0 && w < n; w++)
        list[w] = names[w];
    if (rc == 0)
        rc = pt_run_adopt(c->run, c->in.plan, job, gen, list, c->resume_step, c->target, err);
    if (rc == 0)
        say(c, "picked up generation %lld of %s\n", (long long)gen, c->a.reattach);
    free(names);
    free(list);
    return rc;
}

/* After a pick-up, the steps trained while no console listened have no
 * metrics here: the report goes on from the first step it has. */
/* --reattach: the steps trained while no console listened are never heard
 * of; step lines go on from the first step every worker's metrics reached
 * this console with (metrics come in folds a little behind the heartbeats'
 * step, so skipping up to the step the agents are at would skip for ever). */
static void skip_unheard(run_ctx *c)
{
    if (!c->a.reattach || !c->first_heard)
        return;
    /* what was trained before the adoption is the old console's (telemetry
     * its agents queued while no console listened may still come in) */
    int64_t from = c->adopt_step;
    int all = 1;
    for (int w = 0; w < c->workers; w++)
        all &= c->first_heard[w] >= 0;
    for (int w = 0; all && w < c->workers; w++)
        if (c->first_heard[w] > from)
            from = c->first_heard[w];
    double loss, rate;
    while (c->next_step_out < from &&
           !pt_run_report_step(c->report, c->next_step_out, &loss, &rate))
        c->next_step_out++;
}

static int train(run_ctx *c, pt_error *err)
{
    pt_run_job job = {c->in.spec, c->a.data, c->a.seed, c->ckpt_dir[0] ? c->ckpt_dir : NULL,
                      c->a.ckpt_every};
    int rc = c->a.reattach
                 ? adopt(c, &job, err)
                 : pt_run_assign(c->run, c->in.plan, &job, c->resume_step, ASSIGN_TIMEOUT_MS, err);
    if (rc < 0)
        return rc;
    if (c->a.reattach) /* heartbeats told the steps done before the adoption */
        c->adopt_step = pt_session_min_step(c->s) + 1;
    if (c->tty && !c->a.headless && !c->a.json)
        c->bar = pt_progress_new(stdout, "run", c->steps, 1);
    /* One start for all the steps. A stop (^C, or the end) is the
     * controller's stop at one step: every agent holds, then all stop at the
     * highest step any had begun, so none is left waiting for a neighbour's
     * data. */
    int stopping = 0;
    if (c->resume_step < c->target) {
        if (!c->a.reattach && (rc = pt_run_start(c->run, c->target - c->resume_step, err)) < 0)
            return rc;
        while (pt_run_get_state(c->run) == PT_RUN_TRAINING) {
            if ((rc = pt_run_poll(c->run, POLL_MS, err)) < 0)
                return rc;
            skip_unheard(c);
            show_steps(c);
            if (g_interrupt) {
                stopping = 1;
                say(c, "\nstopping (^C again to abandon) ...\n");
                break;
            }
        }
        if (pt_run_failure(c->run, err))
            return PT_ESTATE;
    }
    show_steps(c);
    pt_progress_finish(&c->bar, NULL);
    if ((rc = pt_run_stop(c->run, stopping ? "interrupted" : "done", STOP_TIMEOUT_MS, err)) < 0)
        return rc;
    if (stopping)
        say(c, "stopped at step %lld\n", (long long)pt_session_stop_step(c->s));
    show_steps(c);
    return 0;
}

static char *summary_extra(run_ctx *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "run_dir", c->run_dir);
    cJSON_AddStringToObject(o, "schedule", pt_sched_kind_name(c->in.plan->schedule));
    /* what the prediction stands on (tui/record/figures.h): "measured",
     * "analytic", "imported" or "calibrated from RUN" (docs/formats.md,
     * "Calibrated profiles"), and the label every screen gives it */
    pt_fig_json(o, NULL, &c->fig);
    cJSON_AddNumberToObject(o, "first_step", (double)c->resume_step);
    cJSON_AddNumberToObject(o, "steps", (double)c->steps);
    cJSON_AddNumberToObject(o, "last_step", (double)pt_session_min_step(c->s));
    double loss, rate;
    if (c->next_step_out > c->resume_step &&
        pt_run_report_step(c->report, c->next_step_out - 1, &loss, &rate) && isfinite(loss))
        cJSON_AddNumberToObject(o, "last_loss", loss);
    if (c->ckpt_dir[0]) {
        cJSON_AddStringToObject(o, "checkpoint_dir", c->ckpt_dir);
        cJSON_AddNumberToObject(o, "checkpoint_step", (double)pt_session_committed_step(c->s));
    }
    pt_session_counts k;
    pt_session_counts_get(c->s, &k);
    cJSON *t = cJSON_AddObjectToObject(o, "telemetry");
    if (t) {
        cJSON_AddNumberToObject(t, "received", (double)k.telemetry.received);
        cJSON_AddNumberToObject(t, "dropped", (double)k.telemetry.dropped);
        cJSON_AddNumberToObject(t, "duplicates", (double)k.telemetry.duplicates);
        cJSON_AddNumberToObject(t, "malformed", (double)k.telemetry.malformed);
        cJSON_AddNumberToObject(t, "stale", (double)k.telemetry.stale);
        /* of received: an older plan generation's, read after the next was applied */
        cJSON_AddNumberToObject(t, "late", (double)k.telemetry.late);
        /* decoded and refused: forged (another key's name), unregistered, control types */
        cJSON_AddNumberToObject(t, "rejected", (double)k.telemetry_rejected);
    }
    cJSON_AddNumberToObject(o, "control_rejected", (double)k.control_rejected);
    cJSON_AddNumberToObject(o, "control_flooded", (double)k.control_flooded);
    cJSON_AddNumberToObject(o, "stops_resent", (double)k.stops_resent);
    cJSON_AddNumberToObject(o, "handshakes_refused", (double)pt_session_refused_handshakes(c->s));
    cJSON_AddNumberToObject(o, "connections_silent", (double)pt_session_silent_connections(c->s));
    if (g_signal_no)
        cJSON_AddStringToObject(o, "interrupted", g_signal_no == SIGTERM ? "SIGTERM" : "SIGINT");
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* The summary's prediction as every other place makes it
 * (tui/record/figures.h): the run folder's newest calibration up to this
 * generation, when it holds one, else the profile the run was given. */
static void headline_prediction(run_ctx *c)
{
    pt_profile *p = NULL;
    pt_topology *t = NULL;
    int64_t cal_gen = -1, gen = pt_session_generation(c->s);
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    if (pt_fig_calibration_load(c->run_dir, gen, c->in.plan->layer_count, &p, &t, &cal_gen) == 0 &&
        pt_fig_simulate(c->in.plan, p, t, &sim, &prog, &res, NULL) == 0) {
        pt_sim_free(&c->sim);
        pt_program_release(&c->prog);
        c->sim = sim;
        c->prog = prog;
        c->pred = res;
        sim = NULL;
        memset(&prog, 0, sizeof prog);
    } else {
        cal_gen = -1;
    }
    pt_fig_pred_from(&c->pred, p ? p : c->in.profile, cal_gen, &c->fig);
    pt_sim_free(&sim);
    pt_program_release(&prog);
    pt_profile_free(&p);
    pt_topology_free(&t);
}

static void finish_report(run_ctx *c)
{
    headline_prediction(c);
    char *extra = summary_extra(c);
    char *json = pt_run_report_json(c->report, &c->pred, extra);
    if (json)
        pt_session_record(c->s, "summary", json);
    if (c->a.json) {
        if (json)
            printf("%s\n", json);
    } else {
        pt_run_report_print(c->report, &c->pred, c->fig.label, stdout);
        if (c->ckpt_dir[0] && pt_session_committed_step(c->s) >= 0)
            printf("\ncheckpoint: step %lld in %s (resume with --resume %s)\n",
                   (long long)pt_session_committed_step(c->s), c->ckpt_dir, c->ckpt_dir);
        printf("run record: %s/run.ndjson\n", c->run_dir);
    }
    fflush(stdout);
    free(extra);
    free(json);
}

static void cleanup(run_ctx *c)
{
    pt_progress_finish(&c->bar, NULL);
    pt_run_destroy(&c->run);
    c->s = NULL;
    pt_run_report_free(&c->report);
    free(c->first_heard);
    c->first_heard = NULL;
    pt_sim_free(&c->sim);
    pt_cost_free(&c->cost);
    pt_program_release(&c->prog);
    pt_profile_free(&c->in.profile);
    pt_topology_free(&c->in.topo);
    pt_plan_free(&c->in.plan);
    pt_model_spec_free(&c->in.spec);
}

/* Removes path and, for a folder, what it holds (not following links). */
static void remove_tree(const char *path, int depth)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode) && depth < RM_DEPTH_MAX) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[PATH_CAP];
            snprintf(sub, sizeof sub, "%.3800s/%.255s", path, e->d_name);
            remove_tree(sub, depth + 1);
        }
        if (d)
            closedir(d);
    }
    remove(path);
}

/* A run refused before any agent started leaves no run folder behind: the
 * folder this command made (and what prepare wrote into it, a measured
 * profile) goes. A folder that existed before is left alone. */
static void discard_run_dir(const run_ctx *c, int existed)
{
    if (existed || !c->run_dir[0])
        return;
    remove_tree(c->run_dir, 0);
}

/* --simulate: the agents read the profile and topology save_inputs wrote. */
static int set_simulate(run_ctx *c, pt_error *err)
{
    char prof[PATH_CAP + 32], topo[PATH_CAP + 32];
    snprintf(prof, sizeof prof, "%s/profile.json", c->run_dir);
    snprintf(topo, sizeof topo, "%s/topology.json", c->run_dir);
    pt_run_sim sim = {prof, topo, c->a.sim_noise, c->a.sim_straggler, c->a.sim_fail, 0};
    return pt_run_set_simulate(c->run, &sim, err);
}

/* The controller for the prepared run: its report, the session and the
 * agents' settings. 0, or 1 after saying why. */
static int open_run(run_ctx *c)
{
    pt_error err = {0};
    int rc = 0;
    pt_run_config cfg = {c->run_dir,
                         c->a.control_bind,
                         c->a.telemetry_bind,
                         c->workers,
                         on_note,
                         c,
                         interrupted_twice,
                         c,
                         c->a.key,
                         c->a.allow,
                         !c->a.external,
                         !c->a.external};
    c->report = pt_run_report_new(c->in.plan, c->resume_step, c->steps);
    if (!c->report || (rc = pt_run_create(&cfg, &c->run, &err)) < 0) {
        pt_cli_error("run", c->a.json, rc < 0 ? rc : PT_ENOMEM, "%s",
                     err.msg[0] ? err.msg : "out of memory");
        fail_json(c, err.msg);
        return 1;
    }
    c->s = pt_run_session(c->run);
    c->next_step_out = c->resume_step;
    if (c->a.reattach && (c->first_heard = malloc((size_t)c->workers * sizeof *c->first_heard)))
        for (int w = 0; w < c->workers; w++)
            c->first_heard[w] = -1;
    if (pt_run_set_agents(c->run, c->a.stall_ms, c->ckpt_dir[0] ? c->ckpt_dir : NULL, &err) < 0 ||
        (c->a.simulate && set_simulate(c, &err) < 0)) {
        fprintf(stderr, "pipetop run: %s\n", err.msg);
        fail_json(c, err.msg);
        return 1;
    }
    return 0;
}

static void say_start(run_ctx *c)
{
    say(c,
        "run %s: %s%s, %d stages, %d stage replicas, schedule %s, %d x %d samples, steps "
        "%lld..%lld; predicted %.3f ms per iteration\n",
        c->run_dir, c->in.spec->name, c->a.simulate ? " (simulated agents)" : "",
        c->in.plan->stage_count, c->workers, pt_sched_kind_name(c->in.plan->schedule),
        c->in.plan->microbatch_count, c->in.plan->microbatch_size, (long long)c->resume_step,
        (long long)c->target - 1, c->pred.iter_s * 1e3);
    json_event(c,
               "{\"event\":\"start\",\"run_dir\":\"%s\",\"workers\":%d,\"first_step\":%lld,"
               "\"steps\":%lld,\"predicted_iteration_ms\":%.6g}",
               c->run_dir, c->workers, (long long)c->resume_step, (long long)c->steps,
               c->pred.iter_s * 1e3);
}

/* A run that stopped on an error: the agents end, the user learns why and
 * where to resume, and the record says so. */
static void report_failure(run_ctx *c, int rc, const pt_error *err)
{
    pt_progress_finish(&c->bar, NULL);
    char msg[PT_ERROR_MAX + 64];
    snprintf(msg, sizeof msg, "%s", err->msg[0] ? err->msg : pt_strerror(rc));
    pt_run_end(c->run, "the run stopped");
    char hint[2 * PATH_CAP + 96] = "";
    if (c->ckpt_dir[0] && pt_session_committed_step(c->s) >= 0)
        snprintf(hint, sizeof hint, "last checkpoint: step %lld in %s (resume with --resume %s)",
                 (long long)pt_session_committed_step(c->s), c->ckpt_dir, c->ckpt_dir);
    if (c->a.json) { /* one object: the failure and where to resume */
        pt_cli_error("run", 1, rc, "stopped: %s%s%s", msg, hint[0] ? "; " : "", hint);
    } else {
        pt_cli_error("run", 0, rc, "stopped: %s", msg);
        if (hint[0])
            pt_cli_error("run", 0, rc, "%s", hint);
    }
    pt_session_record_failed(c->s, msg);
    fail_json(c, msg);
}

/* Stopped cleanly at one step with its checkpoint, but not done: a script
 * or scheduler must not take it for a finished run. Returns the status. */
static int interrupted_status(run_ctx *c)
{
    if (!g_signal_no)
        return 0;
    fprintf(stderr, "pipetop run: interrupted by %s: stopped at step %lld",
            g_signal_no == SIGTERM ? "SIGTERM" : "SIGINT", (long long)pt_session_stop_step(c->s));
    if (c->ckpt_dir[0] && pt_session_committed_step(c->s) >= 0)
        fprintf(stderr, ", checkpoint step %lld in %s (resume with --resume %s)",
                (long long)pt_session_committed_step(c->s), c->ckpt_dir, c->ckpt_dir);
    fprintf(stderr, "\n");
    return EXIT_SIGNAL_BASE + g_signal_no;
}

int pt_cmd_run(int argc, char **argv)
{
    run_ctx c;
    memset(&c, 0, sizeof c);
    int st = parse_args(argc, argv, &c.a);
    if (st >= 0)
        return st;
    c.tty = isatty(STDOUT_FILENO);
    pt_error err = {0};
    struct stat before;
    int existed = c.a.run_dir && stat(c.a.run_dir, &before) == 0;
    int rc = prepare(&c, &err);
    if (rc < 0) {
        discard_run_dir(&c, existed);
        if (!existed)
            c.run_dir[0] = 0;
        pt_cli_error("run", c.a.json, rc, "refused before starting any agent: %s",
                     err.msg[0] ? err.msg : pt_strerror(rc));
        fail_json(&c, err.msg);
        cleanup(&c);
        return 1;
    }
    if (open_run(&c) != 0) {
        cleanup(&c);
        return 1;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    g_interrupt = 0;
    g_signal_no = 0;
    say_start(&c);
    int bound_ms = c.a.external ? EXTERNAL_WAIT_MS : REGISTER_TIMEOUT_MS;
    if ((rc = start_agents(&c, &err)) == 0 && (rc = pt_run_wait_agents(c.run, bound_ms, &err)) == 0)
        rc = train(&c, &err);
    int status = 1;
    if (rc < 0) {
        report_failure(&c, rc, &err);
    } else {
        pt_run_end(c.run, "the run is over");
        finish_report(&c);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc == 0)
        status = interrupted_status(&c);
    cleanup(&c);
    return status;
}
