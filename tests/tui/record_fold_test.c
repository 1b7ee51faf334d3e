/* Record version 3 (docs/formats.md, "Folded op events"): the same run
 * written with folding off (every frame verbatim), on, and on with the
 * record compressed reads back to the same headline figures (measured and
 * predicted iteration time, steps, loss), the same summary (events, their
 * time span, steps), the same replay timeline for every full-detail step
 * (the head window, the every-M steps, the tail window written at the end),
 * no span for a folded step, and the same slices in `export --last N`; a
 * version-2 record is still read. A record cut inside its compressed stream
 * reads up to the cut. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "protocol/fileio.h"
#include "protocol/record.h"
#include "tests/test.h"
#include "tui/cli/inputs.h"
#include "tui/export/export.h"
#include "tui/record/figures.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define STEPS  60
#define AGENTS 4
#define MS     1000000LL

static char SOURCE[1024]; /* the dapple4 record: its plan, and a version-2 record */

static const pt_record_fold_opts FOLD = {8, 6, 20, 0, 0}; /* detail: 0-7, 20, 40, 54-59 */

static int is_detail(int64_t st)
{
    return st < FOLD.head_steps || st % FOLD.every == 0 || st >= STEPS - FOLD.tail_steps;
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

/* The same run every time: the dapple4 plan, STEPS steps of AGENTS stages. */
static void write_run(const char *path, int fold)
{
    pt_record *src = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_load(SOURCE, &src, &err) == 0, "%s", err.msg);
    const pt_record_entry *pe = NULL;
    for (int64_t i = 0; i < pt_record_count(src) && !pe; i++)
        if (pt_record_at(src, i)->kind == PT_RECORD_PLAN)
            pe = pt_record_at(src, i);
    CHECK(pe && pe->worker_count == AGENTS);
    pt_model_spec *model = NULL;
    CHECK(pt_model_spec_parse(pe->model_json, "model", &model, &err) == 0);
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    pt_record_writer *w = NULL;
    CHECK_MSG(pt_record_writer_open(path, &ses, &w, &err) == 0, "%s", err.msg);
    CHECK(pt_record_writer_set_fold(w, &FOLD, !fold) == 0);
    pt_record_plan rp = {1,  pe->plan, model, "synthetic",      1,
                         "", 0,        0,     pe->worker_count, pe->workers};
    CHECK(pt_record_write_plan(w, &rp) == 0);
    int64_t seq[AGENTS] = {0};
    unsigned r = 7;
    pt_msg_event ev[64];
    for (int64_t st = 0; st < STEPS; st++)
        for (int a = 0; a < AGENTS; a++) {
            int64_t off = -1000 * MS + a * 777, t = st * 50 * MS + a * MS;
            pt_msg m;
            pt_msg_init(&m, PT_MSG_EVENTS, pe->workers[a].agent);
            m.gen = 1;
            m.seq = seq[a]++;
            int n = 0;
            for (int mb = 0; mb < 4; mb++)
                for (int k = 0; k < 2; k++) {
                    r = r * 1103515245u + 12345u;
                    int64_t d = 1000000 + (r >> 16) % 100000;
                    ev[n] =
                        (pt_msg_event){a, 0, st, mb, k ? PT_OP_BWD : PT_OP_FWD, st, t, t + d, 0};
                    t += d + 1000;
                    n++;
                }
            ev[n++] = (pt_msg_event){a, 0, st, -1, PT_OP_OPT_STEP, st, t, t + 500000, 0};
            m.u.events.count = n;
            m.u.events.events = ev;
            put(w, &m, off);
            pt_msg_init(&m, PT_MSG_METRICS, pe->workers[a].agent);
            m.gen = 1;
            m.seq = seq[a]++;
            m.u.metrics.stage = a;
            m.u.metrics.step = st;
            m.u.metrics.loss = a == AGENTS - 1 ? 2.0 / (1.0 + (double)st) : NAN;
            r = r * 1103515245u + 12345u;
            m.u.metrics.iter_ms = 50.0 + (double)((r >> 16) % 1000) / 100.0;
            m.u.metrics.samples_per_s = 640.0;
            put(w, &m, off);
            if (a == 0 && st % 5 == 0)
                CHECK(pt_record_flush(w) == 0);
        }
    CHECK(pt_record_write_json(w, "summary", "{\"measured_iteration_ms\":50}") == 0);
    pt_record_writer_close(&w);
    pt_model_spec_free(&model);
    pt_record_free(&src);
}

/* The replay of rec played to its end. */
static pt_store *replayed(pt_record *rec)
{
    pt_store *s = NULL;
    CHECK(pt_store_new(0, &s) == 0);
    for (int64_t i = 0; i < pt_record_count(rec); i++)
        pt_record_apply(rec, i, s);
    return s;
}

/* Field by field: a span's tail is padding, which memcmp would read. */
static int same_spans(const pt_tl_span *x, const pt_tl_span *y, int n)
{
    for (int i = 0; i < n; i++)
        if (x[i].start != y[i].start || x[i].end != y[i].end || x[i].row != y[i].row ||
            x[i].mb != y[i].mb || x[i].step != y[i].step || x[i].bytes != y[i].bytes ||
            x[i].op != y[i].op || x[i].lane != y[i].lane)
            return 0;
    return 1;
}

static int same_timeline(const pt_store *a, const pt_store *b, int64_t step)
{
    pt_tline x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    int64_t ox = 0, oy = 0;
    CHECK(pt_store_timeline(a, step, step, 0, &x, &ox) == 0);
    CHECK(pt_store_timeline(b, step, step, 0, &y, &oy) == 0);
    int same = x.count == y.count && x.count > 0 && ox == oy && x.row_count == y.row_count &&
               same_spans(x.spans, y.spans, x.count);
    pt_tline_release(&x);
    pt_tline_release(&y);
    return same;
}

static int64_t spans_of(const pt_store *s, int64_t step)
{
    pt_tline x;
    memset(&x, 0, sizeof x);
    CHECK(pt_store_timeline(s, step, step, 0, &x, NULL) == 0);
    int64_t n = x.count;
    pt_tline_release(&x);
    return n;
}

/* The export of the last n steps of both records holds the same slices
 * (op spans, bubbles, flows; memory samples carry the console's clock at
 * writing, which differs from one write to the next). */
static int same_export_spans(const pt_export_span *x, const pt_export_span *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i].start != y[i].start || x[i].end != y[i].end || x[i].step != y[i].step ||
            x[i].gen != y[i].gen || x[i].version != y[i].version || x[i].bytes != y[i].bytes ||
            x[i].mb != y[i].mb || x[i].stage != y[i].stage || x[i].replica != y[i].replica ||
            x[i].agent != y[i].agent || x[i].row != y[i].row || x[i].track != y[i].track ||
            x[i].flow != y[i].flow || x[i].op != y[i].op || x[i].lane != y[i].lane)
            return 0;
    return 1;
}

static int same_export(const char *pa, const char *pb, int64_t n)
{
    pt_export_set x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    pt_export_select sel = {0, -1, n};
    pt_error err = {0};
    CHECK_MSG(pt_export_load_run(pa, &sel, &x, &err) == 0, "%s", err.msg);
    CHECK_MSG(pt_export_load_run(pb, &sel, &y, &err) == 0, "%s", err.msg);
    int same = x.count > 0 && x.count == y.count && x.ops == y.ops && x.bubbles == y.bubbles &&
               x.flows == y.flows && x.iterations == y.iterations && x.iterations == n &&
               x.first_step == y.first_step && x.last_step == y.last_step &&
               same_export_spans(x.spans, y.spans, x.count);
    pt_export_set_release(&x);
    pt_export_set_release(&y);
    return same;
}

/* Everything a reader shows of the run in dir/run.ndjson agrees with the
 * plain record's. */
static void agrees(const char *plain_dir, const char *dir, const char *what)
{
    char pp[1024], p[1024];
    snprintf(pp, sizeof pp, "%s/run.ndjson", plain_dir);
    snprintf(p, sizeof p, "%s/run.ndjson", dir);
    pt_record *ra = NULL, *rb = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_record_load(pp, &ra, &err) == 0, "%s", err.msg);
    CHECK_MSG(pt_record_load(p, &rb, &err) == 0, "%s", err.msg);
    CHECK(pt_record_version(rb) == PT_RECORD_VERSION);
    pt_record_summary a, b;
    pt_record_summarize(ra, &a);
    pt_record_summarize(rb, &b);
    CHECK_MSG(a.events == b.events && a.event_msgs == b.event_msgs && a.metrics == b.metrics &&
                  a.plans == b.plans && a.first_start_ns == b.first_start_ns &&
                  a.last_end_ns == b.last_end_ns && a.first_step == b.first_step &&
                  a.last_step == b.last_step,
              "%s: events %lld/%lld, msgs %lld/%lld, span %lld-%lld / %lld-%lld", what,
              (long long)a.events, (long long)b.events, (long long)a.event_msgs,
              (long long)b.event_msgs, (long long)a.first_start_ns, (long long)a.last_end_ns,
              (long long)b.first_start_ns, (long long)b.last_end_ns);
    CHECK(a.events == (int64_t)STEPS * AGENTS * 9);
    pt_fig_meas ma, mb;
    pt_fig_pred pa, pb;
    int ha = 0, hb = 0;
    CHECK(pt_inputs_run_figures(ra, plain_dir, -1, &ma, &pa, &ha) == 0);
    CHECK(pt_inputs_run_figures(rb, dir, -1, &mb, &pb, &hb) == 0);
    CHECK_MSG(ma.iter_ms == mb.iter_ms && ma.steps == mb.steps && ma.last_step == mb.last_step &&
                  !strcmp(ma.label, mb.label) && ma.steps > 0,
              "%s: measured %.6f (%s) / %.6f (%s)", what, ma.iter_ms, ma.label, mb.iter_ms,
              mb.label);
    CHECK_MSG(ha == hb && (!ha || (pa.iter_ms == pb.iter_ms && !strcmp(pa.label, pb.label))),
              "%s: predicted %.6f / %.6f", what, pa.iter_ms, pb.iter_ms);
    pt_store *sa = replayed(ra), *sb = replayed(rb);
    CHECK(pt_store_step_count(sa) == STEPS && pt_store_step_count(sb) == STEPS);
    for (int64_t i = 0; i < STEPS; i++) {
        const pt_store_step *x = pt_store_step_at(sa, i), *y = pt_store_step_at(sb, i);
        CHECK(x->step == y->step && x->iter_ms == y->iter_ms && x->reports == y->reports &&
              (x->loss == y->loss || (isnan(x->loss) && isnan(y->loss))));
    }
    int folded = strstr(what, "folded") != NULL;
    for (int64_t st = 0; st < STEPS; st++) {
        if (!folded || is_detail(st))
            CHECK_MSG(same_timeline(sa, sb, st), "%s: the timeline of step %lld differs", what,
                      (long long)st);
        else
            CHECK_MSG(spans_of(sb, st) == 0, "%s: folded step %lld has spans", what, (long long)st);
    }
    CHECK_MSG(same_export(pp, p, FOLD.tail_steps), "%s: export --last %lld differs", what,
              (long long)FOLD.tail_steps);
    pt_store_free(&sa);
    pt_store_free(&sb);
    pt_record_free(&ra);
    pt_record_free(&rb);
}

/* A compressed record cut anywhere reads up to the cut. */
static void test_cut_gzip(const char *dir)
{
    char p[1024], cut[1024];
    snprintf(p, sizeof p, "%s/run.ndjson", dir);
    snprintf(cut, sizeof cut, "%s/cut.ndjson", dir);
    char *text = NULL;
    size_t len = 0;
    CHECK(pt_file_read(p, &text, &len, NULL) == 0 && len > 100);
    CHECK((unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b);
    int64_t prev = 0;
    for (size_t at = len / 4; at < len; at += len / 4) {
        CHECK(pt_file_write_atomic(cut, text, at, NULL) == 0);
        pt_record *r = NULL;
        pt_error err = {0};
        CHECK_MSG(pt_record_load(cut, &r, &err) == 0, "cut at %zu: %s", at, err.msg);
        CHECK(pt_record_count(r) >= prev && pt_record_count(r) > 1);
        prev = pt_record_count(r);
        pt_record_free(&r);
    }
    free(text);
}

static void test_fold_agrees(void)
{
    const char *root = getenv("PT_SOURCE_DIR");
    snprintf(SOURCE, sizeof SOURCE, "%s/tests/data/run-dapple4/run.ndjson", root ? root : ".");
    char tmp[] = "/tmp/record_fold_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char plain[600], folded[600], gz[600], path[1024];
    snprintf(plain, sizeof plain, "%s/plain", tmp);
    snprintf(folded, sizeof folded, "%s/folded", tmp);
    snprintf(gz, sizeof gz, "%s/gz", tmp);
    snprintf(path, sizeof path, "%s/run.ndjson", plain);
    write_run(path, 0);
    snprintf(path, sizeof path, "%s/run.ndjson", folded);
    write_run(path, 1);
    setenv("PT_RECORD_COMPRESS", "1", 1);
    snprintf(path, sizeof path, "%s/run.ndjson", gz);
    write_run(path, 1);
    unsetenv("PT_RECORD_COMPRESS");

    /* the folded record holds fold lines and tail frames, and is smaller */
    pt_record *r = NULL;
    snprintf(path, sizeof path, "%s/run.ndjson", folded);
    CHECK(pt_record_load(path, &r, NULL) == 0);
    int64_t folds = 0, tails = 0;
    for (int64_t i = 0; i < pt_record_count(r); i++) {
        folds += pt_record_at(r, i)->kind == PT_RECORD_FOLD;
        tails += pt_record_at(r, i)->tail;
    }
    /* a tail step is folded as it passes, then written whole at the end */
    CHECK_MSG(folds == (STEPS - 8 - 2) * AGENTS && tails == 6 * AGENTS,
              "%lld folds, %lld tail frames", (long long)folds, (long long)tails);
    pt_record_free(&r);
    struct stat a, b, c;
    snprintf(path, sizeof path, "%s/run.ndjson", plain);
    CHECK(stat(path, &a) == 0);
    snprintf(path, sizeof path, "%s/run.ndjson", folded);
    CHECK(stat(path, &b) == 0);
    snprintf(path, sizeof path, "%s/run.ndjson", gz);
    CHECK(stat(path, &c) == 0);
    CHECK_MSG(b.st_size < a.st_size && c.st_size < b.st_size, "sizes %lld, %lld, %lld",
              (long long)a.st_size, (long long)b.st_size, (long long)c.st_size);

    agrees(plain, plain, "plain");
    agrees(plain, folded, "folded");
    agrees(plain, gz, "folded, compressed");
    test_cut_gzip(gz);
    /* version 2 still reads (a record of an earlier build) */
    CHECK(pt_record_load(SOURCE, &r, NULL) == 0 && pt_record_version(r) <= 2);
    pt_record_free(&r);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (!getenv("KEEP"))
        CHECK(system(cmd) == 0);
}

PT_TEST_MAIN({"fold_agrees", test_fold_agrees})
