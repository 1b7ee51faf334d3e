/* Run-record growth (issues 24 and 27: an hour of the 4-agent demo under
 * 100 MB, `replay` of it open in under 5 s). Produces the demo's telemetry
 * stream faster than real time: the demo's model (fmnist-mlp-deep) in 4
 * stages under DAPPLE, one agent per stage, each step's op events (per
 * micro-batch: receive, forward, send; receive, backward, send; then the
 * optimizer step) and one metrics message per agent per step, as the agents
 * send them at the demo's pace (one step every --step-ms; at over 50 ms per
 * step no metrics fold and no event sampling happen, docs/protocol.md,
 * "Telemetry thinning"), encoded with the real encoder and written through
 * the real record writer. Prints the record's size per simulated hour, then
 * times the reader (pt_record_load), a replay opened and played to its end
 * (pt_source_replay_new), and, with --pipetop, the real `pipetop status` and
 * `pipetop export --last 10`. Prints figures; never fails on time.
 *
 * --agents N > 4 makes the extra agents replicas of stage 0 (issue 27: 1,024
 * agents, a stage of 1,021 replicas, which record version 4 folds per stage);
 * frames go to the writer with their decoded message, as the console's do
 * (pt_record_write_telemetry); agent wK is the plan's rank K (stage 0's
 * replicas first). --slow K:PCT makes agent wK's compute ops PCT % longer (a
 * straggler for the readers to find in folded steps too).
 *
 *   build/record_growth [--hours H] [--agents N] [--step-ms MS] [--mb M]
 *                       [--no-fold] [--gzip] [--dir DIR] [--pipetop PATH]
 *                       [--slow A:PCT]
 * --gzip writes the record compressed (PT_RECORD_COMPRESS=1); --read-only
 * times the readers on the record DIR holds, written by an earlier run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/record.h"
#include "tui/record/source.h"
#include "tui/record/store.h"

#define MB        (1024.0 * 1024.0)
#define PATH_CAP  4096
#define EV_MAX    256
#define MS        1000000LL
#define DEMO_PLAN "tests/data/run-dapple4/run.ndjson" /* its plan line: the demo's 4 stages */

typedef struct cfg {
    double hours, step_ms;
    int agents, mb, fold, read_only;
    const char *dir, *pipetop, *source;
    int slow_agent; /* -1: none */
    double slow_pct;
} cfg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Times and figures vary as a real run's do (a repeated value would
 * compress better than a record of a real run). */
static uint64_t rng = 88172645463325252ULL;
static double unit(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static int64_t jitter(int64_t ns)
{
    return ns + (int64_t)((double)ns * 0.2 * (unit() - 0.5));
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double child_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int write_msg(pt_record_writer *w, pt_msg *m, int64_t offset_ns)
{
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    if (pt_msg_encode(m, &text, &len, &err) < 0) {
        fprintf(stderr, "record_growth: encode: %s\n", err.msg);
        return -1;
    }
    /* as the console writes it: the frame with the message it decoded to */
    int rc = pt_record_write_telemetry(w, offset_ns, text, len, m);
    free(text);
    return rc;
}

static void add_ev(pt_msg_event *ev, int *n, int stage, int64_t step, int mb, pt_op_kind op,
                   int64_t *t, int64_t dur, int64_t bytes)
{
    pt_msg_event *e = &ev[(*n)++];
    memset(e, 0, sizeof *e);
    e->stage = stage;
    e->step = step;
    e->mb = mb;
    e->op = op;
    e->version = (op == PT_OP_FWD || op == PT_OP_BWD || op == PT_OP_OPT_STEP) ? step : -1;
    dur = jitter(dur);
    e->start_ns = *t;
    e->end_ns = *t + dur;
    e->bytes = bytes;
    *t += dur + jitter(20000);
}

/* One step of one stage, as the agent's events message: 1F1B-like order,
 * compute ops `scale` times their length. */
static int step_events(pt_msg_event *ev, int stage, int stages, int mbs, int64_t step, int64_t t0,
                       double scale)
{
    int n = 0;
    int64_t t = t0 + stage * 2 * MS;
    for (int mb = 0; mb < mbs; mb++) {
        if (stage > 0)
            add_ev(ev, &n, stage, step, mb, PT_OP_RECV_ACT, &t, 300000 + mb * 1000, 16384);
        add_ev(ev, &n, stage, step, mb, PT_OP_FWD, &t,
               (int64_t)((2100000 + (step % 7) * 1000) * scale), 0);
        if (stage < stages - 1)
            add_ev(ev, &n, stage, step, mb, PT_OP_SEND_ACT, &t, 60000, 16384);
    }
    for (int mb = 0; mb < mbs; mb++) {
        if (stage < stages - 1)
            add_ev(ev, &n, stage, step, mb, PT_OP_RECV_GRAD, &t, 400000 + mb * 1000, 16384);
        add_ev(ev, &n, stage, step, mb, PT_OP_BWD, &t,
               (int64_t)((2300000 + (step % 5) * 1000) * scale), 0);
        if (stage > 0)
            add_ev(ev, &n, stage, step, mb, PT_OP_SEND_GRAD, &t, 60000, 16384);
    }
    add_ev(ev, &n, stage, step, -1, PT_OP_OPT_STEP, &t, (int64_t)(900000 * scale), 0);
    return n;
}

static void fill_metrics(pt_msg_metrics *mt, int stage, int stages, int64_t step, double step_ms)
{
    memset(mt, 0, sizeof *mt);
    mt->stage = stage;
    mt->step = step;
    mt->loss = stage == stages - 1 ? 2.3 / (1.0 + (double)step * 1e-3) * (0.9 + 0.2 * unit()) : NAN;
    mt->iter_ms = (double)jitter((int64_t)(step_ms * 1e6)) * 1e-6;
    mt->samples_per_s = 64.0 / (mt->iter_ms * 1e-3);
    for (int k = 0; k < PT_MSG_MEM_COUNT; k++) {
        mt->mem_cur[k] = 3151872 + k * 4096 + stage * 100000;
        mt->mem_peak[k] = mt->mem_cur[k] + (k == 3 ? 344064 + 4096 * (int64_t)(8 * unit()) : 0);
    }
    mt->total_cur = 16034232 + stage * 1000;
    mt->total_peak = mt->total_cur + 197312;
}

/* The session, the demo's plan for c->agents agents (its 4 stages with one
 * replica each when agents is 4; more agents are more replicas of stage 0). */
static pt_record_writer *open_record(const cfg *c, const char *path, int *stages)
{
    pt_record *src = NULL;
    pt_error err = {0};
    if (pt_record_load(c->source, &src, &err) < 0) {
        fprintf(stderr, "record_growth: %s\n", err.msg);
        return NULL;
    }
    const pt_record_entry *pe = NULL;
    for (int64_t i = 0; i < pt_record_count(src) && !pe; i++)
        if (pt_record_at(src, i)->kind == PT_RECORD_PLAN)
            pe = pt_record_at(src, i);
    pt_plan *plan = pe ? pt_plan_clone(pe->plan) : NULL;
    pt_model_spec *model = NULL;
    if (!plan || pt_model_spec_parse(pe->model_json, "model", &model, &err) < 0) {
        fprintf(stderr, "record_growth: %s: no plan (%s)\n", c->source, err.msg);
        pt_plan_free(&plan);
        pt_record_free(&src);
        return NULL;
    }
    plan->microbatch_count = c->mb;
    plan->microbatch_size = 64 / c->mb > 0 ? 64 / c->mb : 1;
    int extra = c->agents - plan->stage_count;
    if (extra > 0) { /* more replicas of stage 0 */
        int *reps = realloc(plan->stages[0].replicas,
                            sizeof *reps * (size_t)(plan->stages[0].replica_count + extra));
        plan->stages[0].replicas = reps;
        for (int k = 0; reps && k < extra; k++)
            reps[plan->stages[0].replica_count + k] = plan->stage_count + k;
        plan->stages[0].replica_count += reps ? extra : 0;
        plan->microbatch_size = plan->stages[0].replica_count; /* a row for each replica */
    }
    *stages = plan->stage_count;
    int nw = pt_plan_agent_count(plan);
    pt_record_worker *wk = calloc((size_t)nw, sizeof *wk);
    pt_record_writer *w = NULL;
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    if (wk && pt_record_writer_open(path, &ses, &w, &err) == 0) {
        if (!c->fold)
            pt_record_writer_set_fold(w, NULL, 1);
        int rank = 0;
        for (int s = 0; s < plan->stage_count; s++)
            for (int r = 0; r < plan->stages[s].replica_count; r++, rank++)
                wk[rank] = (pt_record_worker){rank, "", s, r, 1000 + rank};
        for (int i = 0; i < nw; i++)
            snprintf(wk[i].agent, sizeof wk[i].agent, "w%d", i);
        pt_record_plan rp = {1, plan, model, "fashion-mnist", 1, "", 0, 0, nw, wk};
        if (pt_record_write_plan(w, &rp) < 0) {
            fprintf(stderr, "record_growth: the plan line did not write\n");
            pt_record_writer_close(&w);
        }
    } else if (wk) {
        fprintf(stderr, "record_growth: %s\n", err.msg);
    }
    free(wk);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
    pt_record_free(&src);
    return w;
}

/* Writes the record; returns the steps written or -1. */
static int64_t produce(const cfg *c, const char *path)
{
    int stages = 0;
    pt_record_writer *w = open_record(c, path, &stages);
    if (!w)
        return -1;
    int64_t steps = (int64_t)(c->hours * 3600e3 / c->step_ms);
    int64_t *seq = calloc((size_t)c->agents, sizeof *seq);
    pt_msg_event *ev = malloc(sizeof *ev * EV_MAX);
    int rc = seq && ev ? 0 : -1;
    for (int64_t st = 0; st < steps && rc == 0; st++) {
        int64_t t0 = 1000 * MS + st * (int64_t)(c->step_ms * 1e6);
        for (int a = 0; a < c->agents && rc == 0; a++) {
            int stage = a < stages ? a : 0, replica = a < stages ? 0 : a - stages + 1;
            /* its name in the plan line: w<rank>, ranks by (stage, replica) */
            int rank = stage == 0 ? replica : c->agents - stages + stage;
            int64_t off = -131789783 + a * 1000003;
            pt_msg m;
            pt_msg_init(&m, PT_MSG_EVENTS, NULL);
            snprintf(m.agent, sizeof m.agent, "w%d", rank);
            m.gen = 1;
            m.seq = seq[a]++;
            double scale = rank == c->slow_agent ? 1.0 + c->slow_pct / 100.0 : 1.0;
            m.u.events.count = step_events(ev, stage, stages, c->mb, st, t0 + off, scale);
            for (int k = 0; k < m.u.events.count; k++)
                ev[k].replica = replica;
            m.u.events.events = ev;
            rc = write_msg(w, &m, off);
            pt_msg_init(&m, PT_MSG_METRICS, NULL);
            snprintf(m.agent, sizeof m.agent, "w%d", rank);
            m.gen = 1;
            m.seq = seq[a]++;
            fill_metrics(&m.u.metrics, stage, stages, st, c->step_ms);
            m.u.metrics.replica = replica;
            if (rc == 0)
                rc = write_msg(w, &m, off);
        }
        if (rc == 0 && st % 16 == 0)
            rc = pt_record_flush(w);
    }
    if (rc == 0)
        rc = pt_record_write_json(w, "summary", "{\"measured_iteration_ms\":57}");
    pt_record_writer_close(&w);
    free(seq);
    free(ev);
    return rc == 0 ? steps : -1;
}

static void time_cmd(const char *what, const char *cmd)
{
    double t = now_s(), c = child_cpu_s();
    int rc = system(cmd);
    printf("%-34s %7.3f s wall, %7.3f s CPU (exit %d): %s\n", what, now_s() - t, child_cpu_s() - c,
           rc, cmd);
}

static int parse(int argc, char **argv, cfg *c)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-fold"))
            c->fold = 0;
        else if (!strcmp(a, "--read-only"))
            c->read_only = 1;
        else if (!strcmp(a, "--gzip"))
            setenv("PT_RECORD_COMPRESS", "1", 1); /* the writer's switch */
        else if (!v)
            return -1;
        else if (!strcmp(a, "--hours"))
            c->hours = atof(v), i++;
        else if (!strcmp(a, "--agents"))
            c->agents = atoi(v), i++;
        else if (!strcmp(a, "--step-ms"))
            c->step_ms = atof(v), i++;
        else if (!strcmp(a, "--mb"))
            c->mb = atoi(v), i++;
        else if (!strcmp(a, "--dir"))
            c->dir = v, i++;
        else if (!strcmp(a, "--pipetop"))
            c->pipetop = v, i++;
        else if (!strcmp(a, "--source"))
            c->source = v, i++;
        else if (!strcmp(a, "--slow")) {
            if (sscanf(v, "%d:%lf", &c->slow_agent, &c->slow_pct) != 2 || c->slow_agent < 0 ||
                !(c->slow_pct > 0))
                return -1;
            i++;
        } else
            return -1;
    }
    if (c->slow_agent >= c->agents)
        return -1;
    return c->hours > 0 && c->agents >= 4 && c->step_ms > 0 && c->mb > 0 && c->mb <= 32 ? 0 : -1;
}

int main(int argc, char **argv)
{
    cfg c = {1.0, 57.0, 4, 8, 1, 0, "/tmp/record_growth", NULL, DEMO_PLAN, -1, 0};
    if (parse(argc, argv, &c) < 0) {
        fprintf(stderr, "usage: record_growth [--hours H] [--agents N>=4] [--step-ms MS] "
                        "[--mb M<=32] [--no-fold] [--gzip] [--read-only] [--dir DIR] [--pipetop "
                        "PATH] [--source REC] [--slow A:PCT]\n");
        return 2;
    }
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/run.ndjson", c.dir);
    double t = now_s(), cpu = cpu_s();
    int64_t steps = c.read_only ? 0 : produce(&c, path);
    if (steps < 0)
        return 1;
    double wr = now_s() - t;
    struct stat st;
    double mb = stat(path, &st) == 0 ? (double)st.st_size / MB : 0;
    const char *gz = getenv("PT_RECORD_COMPRESS");
    printf("record %s: %d agents, %lld steps at %.1f ms (%.3f simulated hours), folding %s, %s\n",
           path, c.agents, (long long)steps, c.step_ms, c.hours, c.fold ? "on" : "off",
           gz && !strcmp(gz, "1") ? "gzip" : "plain");
    printf("%-34s %9.1f MB (%.1f MB per hour), written in %.2f s (%.2f s CPU, encoding included)\n",
           "size", mb, mb / c.hours, wr, cpu_s() - cpu);

    pt_record *rec = NULL;
    pt_error err = {0};
    t = now_s();
    cpu = cpu_s();
    if (pt_record_load(path, &rec, &err) < 0) {
        fprintf(stderr, "record_growth: %s\n", err.msg);
        return 1;
    }
    printf("%-34s %7.3f s wall, %7.3f s CPU (%lld entries)\n", "pt_record_load", now_s() - t,
           cpu_s() - cpu, (long long)pt_record_count(rec));
    pt_record_free(&rec);

    t = now_s();
    cpu = cpu_s();
    pt_source *src = NULL;
    pt_store *store = NULL;
    if (pt_record_load(path, &rec, &err) < 0 || pt_store_new(0, &store) < 0 ||
        pt_source_replay_new(rec, 1.0, 1, 1, &src) < 0) {
        fprintf(stderr, "record_growth: replay: %s\n", err.msg);
        return 1;
    }
    src->vt->poll(src, store, 0, 0);
    printf("%-34s %7.3f s wall, %7.3f s CPU (%lld steps in the store)\n",
           "replay open, played to the end", now_s() - t, cpu_s() - cpu,
           (long long)pt_store_step_count(store));
    pt_source_close(&src);
    pt_store_free(&store);

    if (c.pipetop) {
        char cmd[3 * PATH_CAP];
        snprintf(cmd, sizeof cmd, "%s status %s >/dev/null", c.pipetop, c.dir);
        time_cmd("pipetop status", cmd);
        snprintf(cmd, sizeof cmd, "%s export %s --last 10 --trace %s/last10.json >/dev/null",
                 c.pipetop, c.dir, c.dir);
        time_cmd("pipetop export --last 10", cmd);
    }
    return 0;
}
