/* Record version 4 (docs/formats.md, "Folded stages"): a stage of many
 * replicas is folded per stage outside the full-detail windows, one "sfold"
 * line per step for all its replicas; each line's band (min, median, max of
 * the replicas' compute in the step) and straggler are those of the unfolded
 * stream; the summary, the step series and the measured iteration time are
 * the same folded or not; a straggler of a folded step is named on replay's
 * status line, and the replay timeline draws a folded step as its stage's
 * row with the band and straggler the unfolded step's timeline has (where
 * the tail window has the step's frames too, as those); the writer counts a
 * gap in an agent's sequence numbers; a
 * version-3 record still loads, and a version-4 member in it is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/record.h"
#include "tests/test.h"
#include "tui/export/timeline_ascii.h"
#include "tui/record/bands.h"
#include "tui/record/figures.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define STEPS     40
#define REPLICAS  12 /* of stage 0: >= PT_RECORD_STAGE_FOLD_MIN */
#define STAGES    4
#define AGENTS    (REPLICAS + STAGES - 1)
#define SLOW_STEP 20 /* replica SLOW_REP of stage 0 computes twice as long */
#define SLOW_REP  7
#define GAP_STEP  10 /* agent w5 loses one message before this step's events */
#define MS        1000000LL

/* detail: 0-3 and 36-39; 10, 20, 30 for stages 1-3 only (stage 0 is folded per stage) */
static const pt_record_fold_opts FOLD = {4, 4, 10, 0, 0};

static char SOURCE[1024];
static int64_t busy[STEPS][REPLICAS]; /* stage 0's compute per replica, as written */

/* The dapple4 plan with REPLICAS replicas of stage 0 (as bench/record_growth
 * makes its 1,024 agents). */
static pt_plan *many_replicas(pt_model_spec **model)
{
    pt_record *src = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_load(SOURCE, &src, &err) == 0, "%s", err.msg);
    const pt_record_entry *pe = NULL;
    for (int64_t i = 0; src && i < pt_record_count(src) && !pe; i++)
        if (pt_record_at(src, i)->kind == PT_RECORD_PLAN)
            pe = pt_record_at(src, i);
    CHECK(pe != NULL);
    pt_plan *plan = pt_plan_clone(pe->plan);
    CHECK(pt_model_spec_parse(pe->model_json, "model", model, &err) == 0);
    int extra = REPLICAS - plan->stages[0].replica_count;
    int *reps = realloc(plan->stages[0].replicas, sizeof *reps * REPLICAS);
    CHECK(reps != NULL);
    for (int k = 0; k < extra; k++)
        reps[plan->stages[0].replica_count + k] = plan->stage_count + k;
    plan->stages[0].replicas = reps;
    plan->stages[0].replica_count = REPLICAS;
    plan->microbatch_size = REPLICAS;
    pt_record_free(&src);
    return plan;
}

static void put(pt_record_writer *w, pt_msg *m, int64_t off)
{
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    CHECK_MSG(pt_msg_encode(m, &text, &len, &err) == 0, "%s", err.msg);
    CHECK(pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", off, text, len) == 0);
    free(text);
}

/* Agent a's stage and replica: w0..w{REPLICAS-1} stage 0, then one each. */
static void place(int a, int *stage, int *replica)
{
    *stage = a < REPLICAS ? 0 : a - REPLICAS + 1;
    *replica = a < REPLICAS ? a : 0;
}

static void write_step(pt_record_writer *w, int64_t st, int a, int64_t *seq, unsigned *r)
{
    int stage, rep;
    place(a, &stage, &rep);
    char id[16];
    snprintf(id, sizeof id, "w%d", a);
    int64_t off = -1000 * MS + a * 777, t = st * 50 * MS + stage * MS;
    pt_msg m;
    pt_msg_event ev[16];
    int n = 0;
    if (a == 5 && st == GAP_STEP)
        (*seq)++; /* a message lost on the way */
    for (int mb = 0; mb < 4; mb++)
        for (int k = 0; k < 2; k++) {
            *r = *r * 1103515245u + 12345u;
            int64_t d = 1000000 + (*r >> 16) % 100000;
            if (stage == 0 && rep == SLOW_REP && st == SLOW_STEP)
                d *= 2;
            ev[n++] =
                (pt_msg_event){stage, rep, st, mb, k ? PT_OP_BWD : PT_OP_FWD, st, t, t + d, 0};
            if (stage == 0)
                busy[st][rep] += d;
            t += d + 1000;
            ev[n++] = (pt_msg_event){stage, rep, st, mb, PT_OP_SEND_ACT, -1, t, t + 20000, 64};
            t += 21000;
        }
    pt_msg_init(&m, PT_MSG_EVENTS, id);
    m.gen = 1;
    m.seq = (*seq)++;
    m.u.events.count = n;
    m.u.events.events = ev;
    put(w, &m, off);
    pt_msg_init(&m, PT_MSG_METRICS, id);
    m.gen = 1;
    m.seq = (*seq)++;
    m.u.metrics.stage = stage;
    m.u.metrics.replica = rep;
    m.u.metrics.step = st;
    m.u.metrics.loss = stage == STAGES - 1 ? 2.0 / (1.0 + (double)st) : NAN;
    *r = *r * 1103515245u + 12345u;
    m.u.metrics.iter_ms = 50.0 + (double)((*r >> 16) % 1000) / 100.0;
    m.u.metrics.samples_per_s = 600.0 + a; /* replicas differ: the step averages them */
    m.u.metrics.total_cur = 1000 + a;
    m.u.metrics.total_peak = 2000 + a;
    put(w, &m, off);
}

static void write_run(const char *path, int fold)
{
    pt_model_spec *model = NULL;
    pt_plan *plan = many_replicas(&model);
    pt_record_worker wk[AGENTS];
    for (int a = 0; a < AGENTS; a++) {
        int stage, rep;
        place(a, &stage, &rep);
        wk[a] = (pt_record_worker){a, "", stage, rep, 1000 + a};
        snprintf(wk[a].agent, sizeof wk[a].agent, "w%d", a);
    }
    /* workers go stage by stage: stage 0's replicas are w0..w11 already */
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    pt_record_writer *w = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_writer_open(path, &ses, &w, &err) == 0, "%s", err.msg);
    CHECK(pt_record_writer_set_fold(w, &FOLD, !fold) == 0);
    pt_record_plan rp = {1, plan, model, "synthetic", 1, "", 0, 0, AGENTS, wk};
    CHECK(pt_record_write_plan(w, &rp) == 0);
    memset(busy, 0, sizeof busy);
    int64_t seq[AGENTS] = {0};
    unsigned r = 7;
    for (int64_t st = 0; st < STEPS; st++)
        for (int a = 0; a < AGENTS; a++)
            write_step(w, st, a, &seq[a], &r);
    pt_record_writer_close(&w);
    pt_plan_free(&plan);
    pt_model_spec_free(&model);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Every folded step of stage 0 has one line with the unfolded band. */
static void check_lines(const pt_record *r)
{
    int seen[STEPS] = {0};
    int64_t dropped = 0, stage0_frames = 0;
    for (int64_t i = 0; i < pt_record_count(r); i++) {
        const pt_record_entry *e = pt_record_at(r, i);
        if (e->kind == PT_RECORD_FOLD)
            CHECK_MSG(e->fold->stage != 0, "a per-replica fold of stage 0 (step %lld)",
                      (long long)e->step);
        if (e->kind == PT_RECORD_RECV && e->agent && atoi(e->agent + 1) < REPLICAS && !e->tail)
            stage0_frames++;
        if (e->kind != PT_RECORD_SFOLD)
            continue;
        const pt_record_sfold *f = e->sfold;
        int64_t st = e->step;
        CHECK(f->stage == 0 && st >= 4 && st < STEPS && !seen[st]);
        seen[st]++;
        CHECK(f->replicas == REPLICAS && f->event_frames == REPLICAS &&
              f->metric_frames == REPLICAS && f->events == REPLICAS * 16);
        int64_t v[REPLICAS];
        memcpy(v, busy[st], sizeof v);
        qsort(v, REPLICAS, sizeof *v, cmp_i64);
        int slowest = 0;
        for (int k = 1; k < REPLICAS; k++)
            slowest = busy[st][k] > busy[st][slowest] ? k : slowest;
        CHECK_MSG(f->busy_min_ns == v[0] && f->busy_median_ns == v[(REPLICAS - 1) / 2] &&
                      f->busy_max_ns == v[REPLICAS - 1] && f->straggler == slowest,
                  "step %lld: band %lld %lld %lld straggler %d, written %lld %lld %lld, %d",
                  (long long)st, (long long)f->busy_min_ns, (long long)f->busy_median_ns,
                  (long long)f->busy_max_ns, f->straggler, (long long)v[0],
                  (long long)v[(REPLICAS - 1) / 2], (long long)v[REPLICAS - 1], slowest);
        char id[16];
        snprintf(id, sizeof id, "w%d", slowest);
        CHECK(e->agent && !strcmp(e->agent, id));
        CHECK(f->mem_peak == 2000 + REPLICAS - 1 && isnan(f->loss));
        dropped += f->dropped;
    }
    for (int st = 4; st < STEPS; st++)
        CHECK_MSG(seen[st] == 1, "step %d: %d sfold lines", st, seen[st]);
    CHECK_MSG(dropped == 1, "%lld dropped", (long long)dropped);
    /* stage 0 verbatim: the head window's steps only (tail frames aside) */
    CHECK_MSG(stage0_frames == 4 * 2 * REPLICAS, "%lld frames of stage 0",
              (long long)stage0_frames);
    const pt_record_entry *slow = NULL;
    for (int64_t i = 0; i < pt_record_count(r) && !slow; i++)
        if (pt_record_at(r, i)->kind == PT_RECORD_SFOLD && pt_record_at(r, i)->step == SLOW_STEP)
            slow = pt_record_at(r, i);
    CHECK(slow && slow->sfold->straggler == SLOW_REP);
}

static pt_store *replayed(pt_record *rec, int64_t upto)
{
    pt_store *s = NULL;
    CHECK(pt_store_new(0, &s) == 0);
    for (int64_t i = 0; i < pt_record_count(rec) && i <= upto; i++)
        pt_record_apply(rec, i, s);
    return s;
}

/* The measured timeline of step st as the console builds it, and its bands. */
static void timeline_of(const pt_store *s, int64_t st, pt_tline *tl, pt_bands *b, int64_t *origin)
{
    CHECK(pt_store_timeline(s, st, st, 1, tl, origin) == 0);
    CHECK(pt_bands_build(b, tl, 0) == 0);
}

/* Stage 0's folded step st on the timeline of the folded record (y) against
 * its spans in the unfolded one (x): one row for all its replicas, ':' over
 * the time they ran, the same band and straggler. */
static void check_folded_step(const pt_store *x, const pt_store *y, int64_t st)
{
    pt_tline tx = {0}, ty = {0};
    pt_bands bx = {0}, by = {0};
    int64_t ox = 0, oy = 0;
    timeline_of(x, st, &tx, &bx, &ox);
    timeline_of(y, st, &ty, &by, &oy);
    /* stages 1-3 (one replica each) are folded per replica, a fold each,
     * but on every 10th step (in full there) */
    int row = pt_tline_find_row(&ty, 0, PT_TL_ALL_REPLICAS), mine = 0;
    const pt_tl_fold *f = NULL;
    for (int64_t i = 0; i < ty.fold_count; i++)
        if (ty.folds[i].row == row && row >= 0)
            f = &ty.folds[i], mine++;
    CHECK_MSG(row >= 0 && mine == 1 && ty.fold_count == (st % 10 ? STAGES : 1) &&
                  tx.fold_count == 0,
              "step %lld: %lld folds, %d of stage 0's row %d", (long long)st,
              (long long)ty.fold_count, mine, row);
    CHECK(pt_tline_find_row(&ty, 0, 0) < 0 && ox == oy);
    const pt_band_stage *sx = pt_bands_stage(&bx, 0), *sy = pt_bands_stage(&by, 0);
    REQUIRE(sx && sy && f);
    double lo = 1e300, hi = -1e300;
    for (int64_t i = 0; i < tx.count; i++)
        if (tx.rows[tx.spans[i].row].stage == 0) {
            lo = tx.spans[i].start < lo ? tx.spans[i].start : lo;
            hi = tx.spans[i].end > hi ? tx.spans[i].end : hi;
        }
    CHECK_MSG(f->start == lo && f->end == hi, "step %lld: [%g, %g) vs [%g, %g)", (long long)st,
              f->start, f->end, lo, hi);
    CHECK_MSG(sy->folded && !sx->folded && sy->replicas == REPLICAS && sx->replicas == REPLICAS &&
                  fabs(sy->min_s - sx->min_s) < 1e-12 &&
                  fabs(sy->median_s - sx->median_s) < 1e-12 && fabs(sy->max_s - sx->max_s) < 1e-12,
              "step %lld: folded band %g %g %g x%d, unfolded %g %g %g x%d", (long long)st,
              sy->min_s, sy->median_s, sy->max_s, sy->replicas, sx->min_s, sx->median_s, sx->max_s,
              sx->replicas);
    CHECK_MSG(sy->stragglers == (sx->stragglers > 0) && by.straggler_count == bx.straggler_count,
              "step %lld: stragglers %d / %d", (long long)st, sy->stragglers, sx->stragglers);
    if (sx->stragglers) {
        int rx = bx.by_slowness[0];
        CHECK(sy->folded_straggler == bx.rows[rx].replica);
        CHECK(fabs(by.slower[by.by_slowness[0]] - bx.slower[rx]) < 1e-9);
    }
    /* the chart: ':' where the stage ran, nothing of any replica's ops */
    pt_timeline_cell cells[100];
    pt_timeline_cells(&ty, row, PT_LANE_COMPUTE, f->start, f->end, 100, ty.t0, ty.t0, cells);
    int colons = 0;
    for (int c = 0; c < 100; c++)
        colons += cells[c].ch == PT_TIMELINE_FOLDED_FILL && cells[c].paint == PT_TIMELINE_FOLDED;
    CHECK_MSG(colons == 100, "step %lld: %d cells of 100 folded", (long long)st, colons);
    pt_tline_release(&tx);
    pt_tline_release(&ty);
    pt_bands_release(&bx);
    pt_bands_release(&by);
}

/* Replay's timeline of the folded record: a folded step shows (an ordinary
 * one and the straggler's), a step of the tail window shows its spans and no
 * fold, and the timeline's newest step is the newest folded one mid-way. */
static void check_timeline(pt_record *a, pt_record *b)
{
    pt_store *x = replayed(a, INT64_MAX), *y = replayed(b, INT64_MAX);
    check_folded_step(x, y, 12);
    check_folded_step(x, y, SLOW_STEP);
    pt_tline t = {0};
    CHECK(pt_store_timeline(y, STEPS - 2, STEPS - 2, 1, &t, NULL) == 0);
    CHECK_MSG(t.fold_count == 0 && t.count > 0 && pt_tline_find_row(&t, 0, SLOW_REP) >= 0,
              "tail step: %lld folds, %lld spans", (long long)t.fold_count, (long long)t.count);
    pt_tline_release(&t);
    pt_store_free(&x);
    pt_store_free(&y);
    /* half-way through the replay the timeline's newest step is folded */
    int64_t at = -1;
    for (int64_t i = 0; i < pt_record_count(b) && at < 0; i++)
        if (pt_record_at(b, i)->kind == PT_RECORD_SFOLD && pt_record_at(b, i)->step == 25)
            at = i;
    y = replayed(b, at);
    CHECK_MSG(pt_store_last_step(y) >= 25, "last step %lld", (long long)pt_store_last_step(y));
    pt_store_free(&y);
}

static void set_source(void)
{
    const char *root = getenv("PT_SOURCE_DIR");
    snprintf(SOURCE, sizeof SOURCE, "%s/tests/data/run-dapple4/run.ndjson", root ? root : ".");
}

static void test_stage_fold(void)
{
    set_source();
    char tmp[] = "/tmp/record_sfold_XXXXXX", plain[600], folded[600];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(plain, sizeof plain, "%s/plain/run.ndjson", tmp);
    snprintf(folded, sizeof folded, "%s/folded/run.ndjson", tmp);
    write_run(plain, 0);
    write_run(folded, 1);
    pt_record *a = NULL, *b = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_load(plain, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(pt_record_load(folded, &b, &err) == 0, "%s", err.msg);
    CHECK(pt_record_version(b) == 4 && pt_record_skipped(b, NULL) == 0);
    check_lines(b);

    pt_record_summary sa, sb;
    pt_record_summarize(a, &sa);
    pt_record_summarize(b, &sb);
    CHECK_MSG(sa.events == sb.events && sa.event_msgs == sb.event_msgs &&
                  sa.metrics == sb.metrics && sa.first_step == sb.first_step &&
                  sa.last_step == sb.last_step && sa.first_start_ns == sb.first_start_ns &&
                  sa.last_end_ns == sb.last_end_ns,
              "events %lld/%lld msgs %lld/%lld metrics %lld/%lld", (long long)sa.events,
              (long long)sb.events, (long long)sa.event_msgs, (long long)sb.event_msgs,
              (long long)sa.metrics, (long long)sb.metrics);

    pt_store *x = replayed(a, INT64_MAX), *y = replayed(b, INT64_MAX);
    CHECK(pt_store_step_count(x) == STEPS && pt_store_step_count(y) == STEPS);
    for (int64_t i = 0; i < STEPS && pt_store_step_count(y) == STEPS; i++) {
        const pt_store_step *p = pt_store_step_at(x, i), *q = pt_store_step_at(y, i);
        CHECK_MSG(p->step == q->step && p->reports == q->reports && p->iter_ms == q->iter_ms &&
                      p->loss == q->loss && fabs(p->samples_per_s - q->samples_per_s) < 1e-9,
                  "step %lld: reports %d/%d iter %g/%g samples/s %.17g/%.17g", (long long)p->step,
                  p->reports, q->reports, p->iter_ms, q->iter_ms, p->samples_per_s,
                  q->samples_per_s);
    }
    check_timeline(a, b);
    pt_fig_meas ma, mb;
    CHECK(pt_fig_measure_store(x, -1, &ma) == 0 && pt_fig_measure_store(y, -1, &mb) == 0);
    CHECK_MSG(ma.steps == 20 && ma.iter_ms == mb.iter_ms && ma.steps == mb.steps,
              "measured %g over %d, folded %g over %d", ma.iter_ms, ma.steps, mb.iter_ms, mb.steps);
    /* the agents view: stage 0's agents reached the last step */
    int w0 = pt_store_find_agent(y, "w0");
    CHECK(w0 >= 0 && pt_store_agent_at(y, w0)->step == STEPS - 1);
    pt_store_free(&x);
    pt_store_free(&y);

    /* the straggler is named on the status line when its step is replayed */
    int64_t at = -1;
    for (int64_t i = 0; i < pt_record_count(b) && at < 0; i++)
        if (pt_record_at(b, i)->kind == PT_RECORD_SFOLD && pt_record_at(b, i)->step == SLOW_STEP)
            at = i;
    y = replayed(b, at);
    CHECK_STR_CONTAINS(pt_store_last_note(y), "stage 0 replica 7 (w7)");
    pt_store_free(&y);
    pt_record_free(&a);
    pt_record_free(&b);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (!getenv("KEEP"))
        CHECK(system(cmd) == 0);
}

/* A version-3 record (an earlier build's) reads as it did; the version-4
 * member of a plan line, or an sfold line, is refused in it. */
static void test_old_format(void)
{
    set_source();
    static const char v3[] =
        "{\"t\":1,\"kind\":\"session\",\"v\":3,\"unix_s\":1796109446,\"control\":\"tcp://"
        "127.0.0.1:1\",\"telemetry\":\"tcp://127.0.0.1:2\",\"heartbeat_ms\":250,"
        "\"missed_heartbeats\":12}\n"
        "{\"t\":5,\"kind\":\"fold\",\"gen\":1,\"agent\":\"w0\",\"stage\":0,\"replica\":0,"
        "\"step\":40,\"start_ns\":100,\"end_ns\":900,\"busy_ns\":500,\"seqs\":[7],\"ops\":{"
        "\"FWD\":[2,500,200,300]}}\n";
    pt_record *r = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_parse(v3, strlen(v3), "v3", &r, &err) == 0, "%s", err.msg);
    CHECK(r && pt_record_version(r) == 3 && pt_record_count(r) == 2);
    const pt_record_entry *e = r ? pt_record_at(r, 1) : NULL;
    CHECK(e && e->kind == PT_RECORD_FOLD && e->fold->events == 2 && e->sfold == NULL);
    pt_record_free(&r);
    /* the dapple4 record (an earlier version) still loads, every line */
    CHECK(pt_record_load(SOURCE, &r, NULL) == 0 && pt_record_version(r) < 4 &&
          pt_record_skipped(r, NULL) == 0);
    pt_record_free(&r);
    char sf[1024];
    snprintf(sf, sizeof sf,
             "%.*s{\"t\":6,\"kind\":\"sfold\",\"gen\":1,\"stage\":0,\"step\":41,\"frames\":[0,1],"
             "\"dropped\":0,\"replicas\":0,\"iter_ms\":[1,1,1],\"samples_per_s\":1,"
             "\"mem_peak\":0}\n",
             (int)(strchr(v3, '\n') - v3 + 1), v3);
    CHECK(pt_record_parse(sf, strlen(sf), "v3", &r, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "\"sfold\" lines are of record version 4");
    sf[strlen("{\"t\":1,\"kind\":\"session\",\"v\":")] = '4';
    CHECK_MSG(pt_record_parse(sf, strlen(sf), "v4", &r, &err) == 0, "%s", err.msg);
    pt_record_free(&r);
}

PT_TEST_MAIN({"stage_fold", test_stage_fold}, {"old_format", test_old_format})
