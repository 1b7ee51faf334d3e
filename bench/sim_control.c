/* sim_control: how long the run controller takes to register, assign, stop
 * at one step and commit a checkpoint of N agents, with N simulated agents
 * (pipetop-agent --simulate --count N, one process, per-run CURVE keys,
 * ipc sockets) on a plan of 4 stages of N/4 replicas of tiny-mlp:
 *
 *   register   spawn of the agents' process -> every agent registered
 *   assign     the assign sent -> every agent acknowledged it
 *   first step start -> every agent reported its first step
 *   stop       a two-round stop at one step while running, each agent
 *              saving its (simulated) checkpoint -> committed
 *   checkpoint a checkpoint asked of N idle agents -> committed
 *
 * and the CPU seconds of the console (this process) and of the agents'
 * process over the whole run.
 *
 *   sim_control [--agents N] [--dir DIR] [--patience-ms MS]
 *
 * --patience-ms: the agents take the console for gone after this much
 * silence instead of the heartbeat bound (3 s), to time a console that
 * stalls longer than that (say so beside the figures).
 *
 * Prints figures only; it never passes or fails on them. A phase that does
 * not complete is printed with the controller's reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/opts.h"
#include "tui/control/run.h"
#include "tui/control/session.h"

#define WAIT_MS   300000
#define PLAN_CAP  (1 << 20)
#define RUN_STEPS 4
/* tiny-mlp's layers on a made-up device, about 1 s per iteration of the
 * bench's plan: a cluster's pace (GPT-3 steps take seconds), so the figures
 * are the controller's, not a flood of telemetry. */
static const double FWD_MS[8] = {80, 16, 80, 16, 56, 16, 32, 16};
#define MODEL      "tests/data/run/tiny-mlp.json"
#define SOURCE_ENV "PT_SOURCE_DIR"

static double now_s(void)
{
    return (double)pt_clock_ns() / 1e9;
}

static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static char *plan_text(int n)
{
    char *t = malloc(PLAN_CAP);
    int r = n / 4, len = snprintf(t, PLAN_CAP,
                                  "{\"v\":1,\"model\":\"tiny-mlp\",\"layers\":8,"
                                  "\"microbatch\":{\"size\":%d,\"count\":4},"
                                  "\"schedule\":{\"kind\":\"1f1b-flush\"},"
                                  "\"optimizer\":{\"kind\":\"sgd\",\"lr\":0.01},\"stages\":[",
                                  n);
    for (int s = 0; s < 4; s++) {
        len += snprintf(t + len, PLAN_CAP - len, "%s{\"layers\":[%d,%d],\"replicas\":[",
                        s ? "," : "", 2 * s, 2 * s + 2);
        for (int k = 0; k < r; k++)
            len += snprintf(t + len, PLAN_CAP - len, "%s%d", k ? "," : "", s * r + k);
        len += snprintf(t + len, PLAN_CAP - len, "]}");
    }
    snprintf(t + len, PLAN_CAP - len, "]}");
    return t;
}

static int write_profile(const char *dir, char *path, size_t cap)
{
    char t[2048];
    int len = snprintf(t, sizeof t,
                       "{\"v\":1,\"model\":\"tiny-mlp\",\"device\":\"bench-device\","
                       "\"source\":\"analytic\",\"microbatch\":8,\"input_bytes\":2048,"
                       "\"layers\":[");
    for (int k = 0; k < 8; k++)
        len += snprintf(t + len, sizeof t - (size_t)len,
                        "%s{\"name\":\"l%d\",\"fwd_ms\":%g,\"bwd_ms\":%g,\"act_bytes\":3072,"
                        "\"param_bytes\":%d}",
                        k ? "," : "", k, FWD_MS[k], 2 * FWD_MS[k], k % 2 ? 0 : 36864);
    snprintf(t + len, sizeof t - (size_t)len, "]}");
    snprintf(path, cap, "%s/profile.json", dir);
    return pt_file_write_atomic(path, t, strlen(t), NULL);
}

static int write_topology(const char *dir, int n, char *path, size_t cap)
{
    char t[512];
    snprintf(t, sizeof t,
             "{\"v\":1,\"name\":\"sim-control-%d\",\"nodes\":[{\"name\":\"node\",\"repeat\":%d,"
             "\"count\":8,\"device\":{\"name\":\"gpu\",\"memory_gib\":16,\"speed\":1.0}}],"
             "\"links\":{\"intra\":{\"bandwidth_gbps\":100,\"latency_us\":5},"
             "\"inter\":{\"bandwidth_gbps\":25,\"latency_us\":20}}}",
             n, (n + 7) / 8);
    snprintf(path, cap, "%s/topology.json", dir);
    return pt_file_write_atomic(path, t, strlen(t), NULL);
}

/* Polls until every agent reported step `goal` or the run left TRAINING. */
static int wait_step(pt_run *run, int64_t goal)
{
    pt_session *s = pt_run_session(run);
    double until = now_s() + WAIT_MS / 1e3;
    while (pt_session_min_step(s) < goal && now_s() < until &&
           pt_run_get_state(run) == PT_RUN_TRAINING)
        pt_run_poll(run, 5, NULL);
    return pt_session_min_step(s) >= goal ? 0 : -1;
}

/* Asks for a checkpoint of idle agents and polls until it is committed. */
static int checkpoint_idle(pt_run *run, int64_t step, pt_error *err)
{
    pt_session *s = pt_run_session(run);
    int rc = pt_session_checkpoint(s, -1, err);
    double until = now_s() + WAIT_MS / 1e3;
    while (rc == 0 && pt_session_committed_step(s) < step && now_s() < until &&
           !pt_run_failure(run, err))
        pt_run_poll(run, 5, NULL);
    return rc < 0 ? rc : pt_session_committed_step(s) >= step ? 0 : -1;
}

static void phase(const char *name, int n, double t, int rc, const pt_error *err)
{
    if (rc == 0)
        printf("  %-11s %9.3f s  (%7.1f us per agent)\n", name, t, t * 1e6 / n);
    else
        printf("  %-11s did not complete after %.1f s: %s\n", name, t, err->msg);
}

static int run_bench(int n, const char *dir, const char *src, int patience_ms)
{
    char prof[4096], model[4096], topo[4096], ckpt[4096];
    snprintf(model, sizeof model, "%s/%s", src, MODEL);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    pt_error err = {0};
    pt_plan *plan = NULL;
    pt_model_spec *spec = NULL;
    char *pt = plan_text(n);
    if (pt_mkdir_p(ckpt, &err) < 0 || write_topology(dir, n, topo, sizeof topo) < 0 ||
        write_profile(dir, prof, sizeof prof) < 0 || pt_plan_parse(pt, "plan", &plan, &err) < 0 ||
        pt_model_spec_load(model, &spec, &err) < 0) {
        fprintf(stderr, "sim_control: %s\n", err.msg);
        return 1;
    }
    free(pt);
    pt_run_config cfg = {.run_dir = dir, .agents = n, .local_keys = 1, .local_ipc = 1};
    pt_run *run = NULL;
    pt_run_sim sim = {prof, topo, 0, NULL, NULL, patience_ms};
    if (pt_run_create(&cfg, &run, &err) < 0 || pt_run_set_agents(run, 0, ckpt, &err) < 0 ||
        pt_run_set_simulate(run, &sim, &err) < 0) {
        fprintf(stderr, "sim_control: %s\n", err.msg);
        return 1;
    }
    pt_session *s = pt_run_session(run);
    printf("sim_control: %d simulated agents, 4 stages x %d replicas, CURVE, ipc%s\n", n, n / 4,
           patience_ms > 0 ? ", agents patient with a silent console" : "");
    double t = now_s();
    int rc = pt_run_spawn(run, NULL, &err);
    if (rc == 0)
        rc = pt_run_wait_agents(run, WAIT_MS, &err);
    phase("register", n, now_s() - t, rc, &err);
    pt_run_job job = {spec, "synthetic", 7, ckpt, 0};
    if (rc == 0) {
        t = now_s();
        rc = pt_run_assign(run, plan, &job, 0, WAIT_MS, &err);
        phase("assign", n, now_s() - t, rc, &err);
    }
    if (rc == 0) {
        t = now_s();
        rc = pt_run_start(run, 0, &err);
        if (rc == 0 && (rc = wait_step(run, 0)) < 0)
            pt_run_failure(run, &err);
        phase("first step", n, now_s() - t, rc, &err);
    }
    if (rc == 0 && (rc = wait_step(run, RUN_STEPS)) == 0) {
        t = now_s();
        rc = pt_run_stop(run, "bench stop", WAIT_MS, &err);
        phase("stop", n, now_s() - t, rc, &err);
        if (rc == 0)
            printf("  (stopped and committed at step %lld)\n",
                   (long long)pt_session_committed_step(s));
    }
    int64_t resume = pt_session_committed_step(s);
    if (rc == 0 && (rc = pt_run_assign(run, plan, &job, resume, WAIT_MS, &err)) == 0 &&
        (rc = pt_run_start(run, RUN_STEPS, &err)) == 0) {
        double until = now_s() + WAIT_MS / 1e3;
        while (pt_run_get_state(run) == PT_RUN_TRAINING && now_s() < until)
            pt_run_poll(run, 5, NULL);
        t = now_s();
        rc = checkpoint_idle(run, resume + RUN_STEPS, &err);
        phase("checkpoint", n, now_s() - t, rc, &err);
    }
    double console_cpu = cpu_s(RUSAGE_SELF);
    pt_run_destroy(&run); /* ends and reaps the agents' process */
    printf("  cpu: console %.2f s, agents' process %.2f s\n", console_cpu, cpu_s(RUSAGE_CHILDREN));
    pt_plan_free(&plan);
    pt_model_spec_free(&spec);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 1024, patience_ms = 0;
    const char *dir = "sim_control.d";
    pt_opt opts[] = {
        {"agents", PT_OPT_INT, &n, 4, 4096, 0, "N", "simulated agents, a multiple of 4"},
        {"dir", PT_OPT_STRING, &dir, 0, 0, 0, "DIR", "run folder (default sim_control.d)"},
        {"patience-ms", PT_OPT_INT, &patience_ms, 1, 3600000, 0, "MS",
         "the agents' --console-silence-ms (default: the heartbeat bound)"},
    };
    int rc = pt_opts_parse_program("sim_control", argc, argv, opts, 3, stderr);
    if (rc == PT_OPTS_HELP) {
        pt_opts_help(stdout, "usage: sim_control [--agents N] [--dir DIR] [--patience-ms MS]\n",
                     opts, 3, NULL);
        return 0;
    }
    if (rc != PT_OPTS_OK || n % 4)
        return 2;
    const char *src = getenv(SOURCE_ENV) ? getenv(SOURCE_ENV) : ".";
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    return run_bench(n, dir, src, patience_ms);
}
