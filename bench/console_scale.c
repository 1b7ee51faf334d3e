/* The console at cluster scale (issue 27): what a frame of the timeline and
 * of the agents view costs with 1,024 agents against with 4.
 *
 * It writes a run record of S stages (the demo's plan, 4 stages) with R
 * replicas each: every agent's op events (1F1B order, as bench/record_growth
 * writes them) and metrics for a few steps, one replica optionally slower by
 * a percentage (a straggler), written with the real encoder and record
 * writer; replays it to its end into a store (the real replay source), then
 * draws each view into an ncurses screen on /dev/null, as the console does,
 * for a number of frames, timed with the CPU clock. Each frame rebuilds the
 * measured timeline, its bands and the agents table, as a frame after new
 * data does. Prints figures; never fails on time.
 *
 *   build/console_scale [--frames N] [--cols C] [--rows R]
 *       compares 4 agents (1 replica a stage) with 1,024 (256 a stage)
 *   build/console_scale --write DIR [--replicas R] [--steps N]
 *                       [--straggler STAGE:REPLICA:PCT]
 *       only writes DIR/run.ndjson (tests/tui/console_scale_test.sh replays it)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/record.h"
#include "tui/console/ui.h"
#include "tui/record/source.h"

#define DEMO_PLAN "tests/data/run-dapple4/run.ndjson" /* its plan line: the demo's 4 stages */
#define MS        1000000LL
#define EV_MAX    256
#define MB_COUNT  4 /* micro-batches a step */
#define STEP_NS   (60 * MS)
#define PATH_CAP  4096

typedef struct scale_cfg {
    int replicas, steps, frames, cols, rows;
    int slow_stage, slow_replica; /* -1: no straggler */
    double slow_pct;
    const char *write_dir;
} scale_cfg;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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
    e->start_ns = *t;
    e->end_ns = *t + dur;
    e->bytes = bytes;
    *t += dur + 20000;
}

/* One step of one replica: forwards then backwards, compute ops scaled by
 * slow (1: as every replica; 1.35: 35 % longer). */
static int step_events(pt_msg_event *ev, int stage, int stages, int64_t step, int64_t t0,
                       double slow)
{
    int n = 0;
    int64_t t = t0 + stage * 2 * MS;
    for (int mb = 0; mb < MB_COUNT; mb++) {
        if (stage > 0)
            add_ev(ev, &n, stage, step, mb, PT_OP_RECV_ACT, &t, 300000, 16384);
        add_ev(ev, &n, stage, step, mb, PT_OP_FWD, &t, (int64_t)(2100000 * slow), 0);
        if (stage < stages - 1)
            add_ev(ev, &n, stage, step, mb, PT_OP_SEND_ACT, &t, 60000, 16384);
    }
    for (int mb = 0; mb < MB_COUNT; mb++) {
        if (stage < stages - 1)
            add_ev(ev, &n, stage, step, mb, PT_OP_RECV_GRAD, &t, 400000, 16384);
        add_ev(ev, &n, stage, step, mb, PT_OP_BWD, &t, (int64_t)(2300000 * slow), 0);
        if (stage > 0)
            add_ev(ev, &n, stage, step, mb, PT_OP_SEND_GRAD, &t, 60000, 16384);
    }
    add_ev(ev, &n, stage, step, -1, PT_OP_OPT_STEP, &t, (int64_t)(900000 * slow), 0);
    return n;
}

static int write_msg(pt_record_writer *w, pt_msg *m)
{
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    if (pt_msg_encode(m, &text, &len, &err) < 0) {
        fprintf(stderr, "console_scale: encode: %s\n", err.msg);
        return -1;
    }
    int rc = pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", 0, text, len);
    free(text);
    return rc;
}

/* The demo's plan with c->replicas replicas a stage (devices numbered stage
 * by stage), and its model. 0 or -1 (said on stderr). */
static int scaled_plan(const scale_cfg *c, pt_plan **plan, pt_model_spec **model)
{
    char path[PATH_CAP];
    const char *root = getenv("PT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/%s", root ? root : ".", DEMO_PLAN);
    pt_record *src = NULL;
    pt_error err = {0};
    if (pt_record_load(path, &src, &err) < 0) {
        fprintf(stderr, "console_scale: %s (run from the source tree or set PT_SOURCE_DIR)\n",
                err.msg);
        return -1;
    }
    const pt_record_entry *pe = NULL;
    for (int64_t i = 0; i < pt_record_count(src) && !pe; i++)
        if (pt_record_at(src, i)->kind == PT_RECORD_PLAN)
            pe = pt_record_at(src, i);
    *plan = pe ? pt_plan_clone(pe->plan) : NULL;
    int rc = *plan && pt_model_spec_parse(pe->model_json, "model", model, &err) == 0 ? 0 : -1;
    pt_record_free(&src);
    for (int s = 0; rc == 0 && s < (*plan)->stage_count; s++) {
        pt_stage *st = &(*plan)->stages[s];
        int *reps = realloc(st->replicas, sizeof *reps * (size_t)c->replicas);
        if (!reps)
            return -1;
        st->replicas = reps;
        st->replica_count = c->replicas;
        for (int r = 0; r < c->replicas; r++)
            reps[r] = s * c->replicas + r;
    }
    if (rc == 0) {
        (*plan)->microbatch_count = MB_COUNT;
        (*plan)->microbatch_size = c->replicas; /* a sample for each replica */
    } else {
        fprintf(stderr, "console_scale: %s: no plan\n", path);
    }
    return rc;
}

/* Agent a's id: "s2r017" (stage, replica), sorted as the plan orders them. */
static void agent_id(char *buf, size_t cap, int stage, int replica)
{
    snprintf(buf, cap, "s%dr%03d", stage, replica);
}

static int write_steps(const scale_cfg *c, pt_record_writer *w, int stages)
{
    pt_msg_event *ev = malloc(sizeof *ev * EV_MAX);
    int rc = ev ? 0 : -1;
    for (int64_t st = 0; st < c->steps && rc == 0; st++)
        for (int s = 0; s < stages && rc == 0; s++)
            for (int r = 0; r < c->replicas && rc == 0; r++) {
                double slow = s == c->slow_stage && r == c->slow_replica
                                  ? 1.0 + c->slow_pct / 100.0
                                  : 1.0 + 0.01 * (double)((r * 7 + s) % 5) / 4.0;
                pt_msg m;
                pt_msg_init(&m, PT_MSG_EVENTS, NULL);
                agent_id(m.agent, sizeof m.agent, s, r);
                m.gen = 1;
                m.seq = 2 * st;
                m.u.events.count = step_events(ev, s, stages, st, 1000 * MS + st * STEP_NS, slow);
                for (int k = 0; k < m.u.events.count; k++)
                    ev[k].replica = r;
                m.u.events.events = ev;
                rc = write_msg(w, &m);
                pt_msg_init(&m, PT_MSG_METRICS, NULL);
                agent_id(m.agent, sizeof m.agent, s, r);
                m.gen = 1;
                m.seq = 2 * st + 1;
                m.u.metrics.stage = s;
                m.u.metrics.replica = r;
                m.u.metrics.step = st;
                m.u.metrics.loss = s == stages - 1 ? 2.3 - 0.01 * (double)st : NAN;
                m.u.metrics.iter_ms = (double)STEP_NS / MS * slow;
                m.u.metrics.samples_per_s = 1000.0 / m.u.metrics.iter_ms;
                if (rc == 0)
                    rc = write_msg(w, &m);
            }
    free(ev);
    return rc;
}

/* Writes dir/run.ndjson. 0 or -1 (said on stderr). */
static int write_record(const scale_cfg *c, const char *dir)
{
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/run.ndjson", dir);
    pt_plan *plan = NULL;
    pt_model_spec *model = NULL;
    if (scaled_plan(c, &plan, &model) < 0) {
        pt_plan_free(&plan);
        pt_model_spec_free(&model);
        return -1;
    }
    int stages = plan->stage_count, nw = stages * c->replicas;
    pt_record_worker *wk = calloc((size_t)nw, sizeof *wk);
    pt_record_writer *w = NULL;
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    pt_error err = {0};
    int rc = wk && pt_record_writer_open(path, &ses, &w, &err) == 0 ? 0 : -1;
    for (int i = 0; rc == 0 && i < nw; i++) {
        wk[i] = (pt_record_worker){i, "", i / c->replicas, i % c->replicas, 0};
        agent_id(wk[i].agent, sizeof wk[i].agent, wk[i].stage, wk[i].replica);
    }
    pt_record_plan rp = {1, plan, model, "synthetic", 1, "", 0, 0, nw, wk};
    if (rc == 0)
        rc = pt_record_write_plan(w, &rp);
    for (int i = 0; rc == 0 && i < nw; i++)
        rc = pt_record_write_agent(w, wk[i].agent, "running", 0);
    if (rc == 0)
        rc = write_steps(c, w, stages);
    if (rc < 0)
        fprintf(stderr, "console_scale: %s: %s\n", path, err.msg[0] ? err.msg : "write failed");
    pt_record_writer_close(&w);
    free(wk);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
    return rc;
}

/* ---- frames */

/* A console's shared state over the store a replay of dir fills, with each
 * view's state, drawing into an ncurses screen on /dev/null. */
static int open_ui(const char *dir, const scale_cfg *c, pt_ui *ui)
{
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/run.ndjson", dir);
    memset(ui, 0, sizeof *ui);
    pt_config_default(&ui->cfg);
    pt_error err = {0};
    pt_record *rec = NULL;
    if (pt_theme_find("dark", &ui->theme, &err) < 0 || pt_record_load(path, &rec, &err) < 0 ||
        pt_store_new(0, &ui->store) < 0 || pt_source_replay_new(rec, 1.0, 1, 1, &ui->src) < 0) {
        fprintf(stderr, "console_scale: %s\n", err.msg);
        return -1;
    }
    ui->src->vt->poll(ui->src, ui->store, 0, 0);
    ui->live = ui->store;
    ui->tl.iters = ui->cfg.timeline_iters;
    ui->cost_cal_gen = -1;
    for (int i = 0; i < pt_view_count(); i++) {
        const pt_view_class *v = pt_view_at(i);
        ui->state[i] = v->state_size ? calloc(1, v->state_size) : NULL;
        if (v->init)
            v->init(ui, ui->state[i]);
    }
    ui->rows = c->rows;
    ui->cols = c->cols;
    pt_ui_colors_init(ui);
    return 0;
}

static void close_ui(pt_ui *ui)
{
    for (int i = 0; i < pt_view_count(); i++) {
        const pt_view_class *v = pt_view_at(i);
        if (v->fini && ui->state[i])
            v->fini(ui->state[i]);
        free(ui->state[i]);
    }
    pt_source_close(&ui->src);
    pt_ui_figures_release(ui);
    pt_store_free(&ui->store);
    pt_tline_release(&ui->tl.meas);
    pt_tline_release(&ui->tl.pred);
    pt_bands_release(&ui->tl.meas_bands);
    pt_bands_release(&ui->tl.pred_bands);
}

/* CPU ms per frame of view `name`: every frame after new data (rebuild:
 * the timeline and bands are rebuilt) or a redraw of the same data. */
static double frame_ms(pt_ui *ui, const char *name, int frames, int rebuild)
{
    ui->view = pt_view_find(name);
    double t = cpu_s();
    for (int f = 0; f < frames; f++) {
        if (rebuild)
            ui->tl.meas_version = 0; /* as after an ingest: the timeline is rebuilt */
        ui->now_ns = (int64_t)f * 250 * MS;
        pt_ui_figures_update(ui);
        pt_view_layout(ui->view, ui, ui->state[ui->view], ui->rows, ui->cols, &ui->layout);
        erase();
        pt_view_at(ui->view)->draw(ui, ui->state[ui->view]);
        refresh();
    }
    return (cpu_s() - t) * 1e3 / frames;
}

static int measure(const scale_cfg *c)
{
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = out && in ? newterm("xterm-256color", out, in) : NULL;
    if (!scr) {
        fprintf(stderr, "console_scale: no curses screen on /dev/null (TERM xterm-256color)\n");
        return 1;
    }
    resizeterm(c->rows, c->cols);
    start_color();
    const int reps[2] = {1, 256};
    double ms[2][4] = {{0}};
    int agents[2] = {0};
    for (int k = 0; k < 2; k++) {
        scale_cfg w = *c;
        w.replicas = reps[k];
        char dir[] = "/tmp/console_scale.XXXXXX";
        pt_ui ui;
        if (!mkdtemp(dir) || write_record(&w, dir) < 0 || open_ui(dir, c, &ui) < 0)
            return 1;
        agents[k] = pt_store_agent_count(ui.store);
        for (int v = 0; v < 4; v++)
            ms[k][v] = frame_ms(&ui, v % 2 ? "agents" : "timeline", c->frames, v < 2);
        close_ui(&ui);
        char cmd[PATH_CAP];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "console_scale: %s left behind\n", dir);
    }
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
    printf("console frame, %dx%d, %d frames each (CPU ms/frame)\n", c->cols, c->rows, c->frames);
    printf("%-34s %10s %10s %8s\n", "view", "4 agents", "1024", "ratio");
    const char *names[4] = {"timeline, new data (rebuilt)", "agents, new data (rebuilt)",
                            "timeline, same data", "agents, same data"};
    for (int v = 0; v < 4; v++)
        printf("%-34s %10.3f %10.3f %8.1f\n", names[v], ms[0][v], ms[1][v],
               ms[0][v] > 0 ? ms[1][v] / ms[0][v] : 0);
    printf("(agents in the stores: %d and %d)\n", agents[0], agents[1]);
    return 0;
}

static int parse(int argc, char **argv, scale_cfg *c)
{
    for (int i = 1; i + 1 < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--write"))
            c->write_dir = v;
        else if (!strcmp(a, "--replicas"))
            c->replicas = atoi(v);
        else if (!strcmp(a, "--steps"))
            c->steps = atoi(v);
        else if (!strcmp(a, "--frames"))
            c->frames = atoi(v);
        else if (!strcmp(a, "--cols"))
            c->cols = atoi(v);
        else if (!strcmp(a, "--rows"))
            c->rows = atoi(v);
        else if (strcmp(a, "--straggler") ||
                 sscanf(v, "%d:%d:%lf", &c->slow_stage, &c->slow_replica, &c->slow_pct) != 3)
            return -1;
    }
    if (argc % 2 == 0) /* an option without its value */
        return -1;
    return c->replicas >= 1 && c->replicas <= 1024 && c->steps >= 1 && c->steps <= 1000 &&
                   c->frames >= 1 && c->cols >= 80 && c->rows >= 24
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    scale_cfg c = {256, 4, 50, 120, 40, -1, -1, 0, NULL};
    if (parse(argc, argv, &c) < 0) {
        fprintf(stderr, "usage: console_scale [--frames N] [--cols C>=80] [--rows R>=24]\n"
                        "       console_scale --write DIR [--replicas 1..1024] [--steps N] "
                        "[--straggler STAGE:REPLICA:PCT]\n");
        return 2;
    }
    if (c.write_dir) {
        if (write_record(&c, c.write_dir) < 0)
            return 1;
        printf("%s/run.ndjson: 4 stages x %d replicas, %d steps\n", c.write_dir, c.replicas,
               c.steps);
        return 0;
    }
    return measure(&c);
}
