/* Exports and replay: the Chrome trace of a simulated program and of a
 * recorded run is valid JSON whose op events match the source one for one
 * (count, durations, and one clock offset per agent and generation), whose
 * bubbles fill exactly the idle time of every compute lane, whose slices
 * never overlap on a track, and whose every SEND has its flow to the RECV
 * of the neighbouring stage; --steps and --last choose iterations; the SVG
 * draws every op; the run record replays step by step and to the end into
 * the same spans the record holds. */
#include "tests/test.h"

#include <cjson/cJSON.h>

#include "planner/cost.h"
#include "planner/simulate.h"
#include "protocol/fileio.h"
#include "tui/export/export.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"
#include "tui/record/tline.h"
#include "tests/tui/trace_check.h"

#define US_TOL 0.0011 /* trace times are printed with 3 decimals of a microsecond */

static pt_profile *make_profile(int n)
{
    pt_profile *p = pt_profile_new(n);
    snprintf(p->model, sizeof p->model, "synthetic");
    p->microbatch = 8;
    p->input_bytes = 8 * 784 * 4;
    for (int i = 0; i < n; i++) {
        p->layers[i].fwd_ms = 1.0 + (i % 3);
        p->layers[i].bwd_ms = 2.0 + (i % 5);
        p->layers[i].recompute_ms = p->layers[i].fwd_ms;
        p->layers[i].act_bytes = 8 * 512 * 4;
        p->layers[i].param_bytes = 512 * 512 * 4;
    }
    return p;
}

/* A simulated program of `kind`: 3 stages, the middle one replicated twice. */
static int simulate_kind(pt_sched_kind kind, pt_program *prog, pt_sim_result *res, pt_sim **sim,
                         pt_cost **cost, pt_profile **prof, pt_topology **topo)
{
    *prof = make_profile(9);
    pt_link intra = {5e9, 20e-6}, inter = {1e9, 50e-6};
    *topo = pt_topology_uniform(1, 4, 1LL << 34, intra, inter);
    pt_plan *plan = pt_plan_new(3);
    snprintf(plan->model, sizeof plan->model, "synthetic");
    plan->layer_count = 9;
    plan->microbatch_size = 8;
    plan->microbatch_count = 6;
    plan->schedule = kind;
    int d0 = 0, d1[2] = {1, 2}, d2 = 3;
    plan->stages[0].first = 0, plan->stages[0].last = 3;
    plan->stages[1].first = 3, plan->stages[1].last = 6;
    plan->stages[2].first = 6, plan->stages[2].last = 9;
    pt_plan_set_replicas(plan, 0, &d0, 1);
    pt_plan_set_replicas(plan, 1, d1, 2);
    pt_plan_set_replicas(plan, 2, &d2, 1);
    int rc = pt_cost_new(*prof, *topo, cost, NULL);
    if (rc == 0)
        rc = pt_sim_new(sim);
    if (rc == 0)
        rc = pt_sim_plan(*sim, plan, *cost, NULL, prog, res, NULL);
    pt_plan_free(&plan);
    return rc;
}

/* The DAPPLE one. */
static int simulate(pt_program *prog, pt_sim_result *res, pt_sim **sim, pt_cost **cost,
                    pt_profile **prof, pt_topology **topo)
{
    return simulate_kind(PT_SCHED_DAPPLE, prog, res, sim, cost, prof, topo);
}

typedef struct trace_stats {
    int64_t ops, bubbles, counters, threads;
    double lo, hi;       /* of op events, us */
    double bubble_us[8]; /* per (pid-1)*2 + replica, compute-lane bubbles */
    int bad_pid;
} trace_stats;

static int read_trace(const char *text, trace_stats *st)
{
    memset(st, 0, sizeof *st);
    st->lo = 1e300;
    st->hi = -1e300;
    cJSON *j = cJSON_Parse(text);
    if (!j)
        return -1;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
    {
        const char *ph = cJSON_GetObjectItemCaseSensitive(e, "ph")->valuestring;
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "cat"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        int pid = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "pid"));
        if (pid < 1)
            st->bad_pid++;
        if (!strcmp(ph, "M")) {
            st->threads += !strcmp(name, "thread_name");
        } else if (!strcmp(ph, "C")) {
            st->counters++;
        } else if (!strcmp(ph, "X")) {
            double ts = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "ts"));
            double dur = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "dur"));
            int tid = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "tid"));
            if (!strcmp(cat, "bubble")) {
                st->bubbles++;
                int k = (pid - 1) * 2 + tid / 300; /* tid = (replica * 3 + lane) * 100 + track */
                if (k >= 0 && k < 8)
                    st->bubble_us[k] += dur;
                continue;
            }
            st->ops++;
            if (ts < st->lo)
                st->lo = ts;
            if (ts + dur > st->hi)
                st->hi = ts + dur;
        }
    }
    cJSON_Delete(j);
    return 0;
}

static void test_trace_of_simulation(void)
{
    pt_program prog;
    memset(&prog, 0, sizeof prog);
    pt_sim_result res;
    pt_sim *sim = NULL;
    pt_cost *cost = NULL;
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    REQUIRE(simulate(&prog, &res, &sim, &cost, &prof, &topo) == 0);
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_from_sim(&tl, &prog, &res) == 0);
    CHECK(tl.count == prog.op_count);
    CHECK(tl.row_count == 4);
    char *text = NULL;
    size_t len = 0;
    pt_export_counts c;
    REQUIRE(pt_export_trace(&tl, NULL, 0, &text, &len, &c, NULL) == 0);
    CHECK(strlen(text) == len);
    trace_stats st;
    REQUIRE(read_trace(text, &st) == 0);
    CHECK(st.ops == prog.op_count && c.ops == st.ops);
    /* 4 replicas x compute/comm/wait, and a further track wherever a lane's
     * ops overlap (the simulator's sends do) */
    pt_export_set set;
    REQUIRE(pt_export_from_tline(&tl, NULL, 0, &set) == 0);
    int64_t tracks = 0;
    for (int r = 0; r < set.row_count; r++)
        for (int lane = 0; lane < 3; lane++)
            tracks += set.tracks[r][lane] ? set.tracks[r][lane] : 1;
    CHECK(st.threads == tracks && tracks >= 4 * 3);
    CHECK(c.tracks == tracks);
    pt_export_set_release(&set);
    tc_result tr;
    REQUIRE(tc_check(text, &tr) == 0);
    CHECK(tr.overlaps == 0);
    CHECK(tr.sends > 0 && tr.sends_with_flow == tr.sends && tr.bad_flows == 0);
    CHECK(st.bad_pid == 0);
    CHECK_NEAR(st.lo, 0.0, US_TOL);
    CHECK_NEAR(st.hi, res.makespan_s * 1e6, US_TOL);
    /* bubbles + busy time = the iteration, on every replica's compute lane */
    for (int w = 0; w < prog.worker_count; w++) {
        const pt_worker *wk = &prog.workers[w];
        int row = pt_tline_find_row(&tl, wk->stage, wk->replica);
        double busy = pt_tline_busy(&tl, row, tl.t0, tl.t1);
        int k = wk->stage * 2 + wk->replica;
        CHECK_NEAR(st.bubble_us[k] + busy * 1e6, (tl.t1 - tl.t0) * 1e6, 0.01 * 30);
        /* and the simulator agrees on the bubble fraction */
        CHECK_NEAR(st.bubble_us[k] / ((tl.t1 - tl.t0) * 1e6), res.workers[w].bubble_frac, 1e-6);
    }
    free(text);
    /* SVG: one op rectangle per non-wait span, valid document shape */
    char *svg = NULL;
    pt_export_svg_opts o = {.width_px = 800, .title = "a <title> & more"};
    REQUIRE(pt_export_svg(&tl, NULL, &o, &svg, &len, NULL) == 0);
    int64_t want = 0, got = 0;
    for (int64_t i = 0; i < tl.count; i++)
        want += tl.spans[i].lane != PT_LANE_WAIT;
    for (const char *p = svg; (p = strstr(p, "class=\"op\"")); p++)
        got++;
    CHECK(got == want);
    CHECK(!strncmp(svg, "<?xml", 5) && strstr(svg, "</svg>\n") == svg + len - 7);
    CHECK_STR_CONTAINS(svg, "a &lt;title&gt; &amp; more");
    CHECK(strstr(svg, "<title>") != NULL);
    free(svg);
    pt_tline_release(&tl);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&prof);
}

static const char *record_path(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/run-dapple4/run.ndjson", getenv("PT_SOURCE_DIR"));
    return path;
}

/* One op event of the record as the agent's clock gave it. */
typedef struct raw_ev {
    char agent[PT_MSG_ID_MAX];
    int64_t gen, step;
    int mb, op;
    double start_us, dur_us;
} raw_ev;

static int64_t raw_events(const pt_record *rec, raw_ev **out)
{
    int64_t n = 0, cap = 0;
    raw_ev *v = NULL;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind != PT_RECORD_RECV || e->msg_type != PT_MSG_EVENTS)
            continue;
        pt_msg m;
        if (pt_record_msg(rec, i, &m, NULL) < 0)
            continue;
        for (int k = 0; k < m.u.events.count; k++) {
            if (n == cap)
                v = realloc(v, sizeof *v * (size_t)(cap = cap ? cap * 2 : 256));
            const pt_msg_event *ev = &m.u.events.events[k];
            raw_ev *r = &v[n++];
            snprintf(r->agent, sizeof r->agent, "%s", m.agent);
            r->gen = m.gen;
            r->step = ev->step;
            r->mb = ev->mb;
            r->op = ev->op;
            r->start_us = (double)ev->start_ns / 1e3;
            r->dur_us = (double)(ev->end_ns - ev->start_ns) / 1e3;
        }
        pt_msg_clear(&m);
    }
    *out = v;
    return n;
}

static char *trace_of(const char *path, const pt_export_select *sel, pt_export_set *set)
{
    pt_error err = {0};
    if (pt_export_load_run(path, sel, set, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    int rc = pt_export_trace_write(set, f, NULL, &err);
    fclose(f);
    if (rc < 0) {
        free(text);
        return NULL;
    }
    return text;
}

static void test_trace_of_run_record(void)
{
    pt_record *rec = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(record_path(), &rec, &err) == 0);
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    CHECK(sum.events > 100 && sum.plans == 1 && sum.metrics > 0);
    raw_ev *raw = NULL;
    int64_t nraw = raw_events(rec, &raw);
    CHECK(nraw == sum.events);
    pt_record_free(&rec);

    pt_export_set set;
    char *text = trace_of(record_path(), NULL, &set);
    REQUIRE(text);
    CHECK(set.ops == sum.events);
    CHECK(set.row_count == 4);
    CHECK(set.mem_count == sum.metrics);
    CHECK(set.iterations == sum.last_step - sum.first_step + 1);
    CHECK_STR_CONTAINS(set.title, "fmnist-mlp-deep | 4 stages");
    CHECK_STR_CONTAINS(set.title, "dapple");
    tc_result r;
    REQUIRE(tc_check(text, &r) == 0);
    CHECK(r.ops == sum.events);
    CHECK(r.bubbles > 0); /* a 4-stage pipeline always idles somewhere */
    CHECK(r.overlaps == 0);
    CHECK(r.no_args == 0);
    CHECK(r.sends > 0 && r.sends == r.recvs);
    CHECK(r.sends_with_flow == r.sends && r.bad_flows == 0);
    /* every op is in the trace with its own duration, shifted by one offset
     * per agent and generation (the agent's clock is one clock) */
    cJSON *j = cJSON_Parse(text);
    const cJSON *e;
    int64_t matched = 0, shifted = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "traceEvents"))
    {
        if (strcmp(tc_str(e, "ph"), "X") || !strcmp(tc_str(e, "cat"), "bubble"))
            continue;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        for (int64_t i = 0; i < nraw; i++) {
            const raw_ev *x = &raw[i];
            char want[40];
            if (x->mb >= 0)
                snprintf(want, sizeof want, "%s mb%d", pt_op_name(x->op), x->mb);
            else
                snprintf(want, sizeof want, "%s", pt_op_name(x->op));
            if (x->step != (int64_t)tc_num(a, "step") || x->gen != (int64_t)tc_num(a, "gen") ||
                strcmp(x->agent, tc_str(a, "agent")) || strcmp(want, tc_str(e, "name")))
                continue;
            matched++;
            CHECK_NEAR(tc_num(e, "dur"), x->dur_us, US_TOL);
            /* the shift of this event against the first one of its agent */
            for (int64_t f = 0; f < nraw; f++)
                if (!strcmp(raw[f].agent, x->agent) && raw[f].gen == x->gen) {
                    double off0 = NAN;
                    const cJSON *g;
                    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(j, "traceEvents"))
                    {
                        const cJSON *ga = cJSON_GetObjectItemCaseSensitive(g, "args");
                        if (!strcmp(tc_str(g, "ph"), "X") &&
                            !strcmp(tc_str(ga, "agent"), x->agent) &&
                            (int64_t)tc_num(ga, "step") == raw[f].step &&
                            strcmp(tc_str(g, "cat"), "bubble") &&
                            tc_num(g, "dur") > raw[f].dur_us - US_TOL &&
                            tc_num(g, "dur") < raw[f].dur_us + US_TOL &&
                            fabs(tc_num(g, "ts") - tc_num(e, "ts") -
                                 (raw[f].start_us - x->start_us)) < 2 * US_TOL) {
                            off0 = 0;
                            break;
                        }
                    }
                    shifted += off0 == 0;
                    break;
                }
            break;
        }
    }
    CHECK(matched == sum.events);
    CHECK(shifted == sum.events);
    cJSON_Delete(j);
    free(text);
    free(raw);
    pt_export_set_release(&set);

    /* --last 2: the last two steps, every op of them */
    pt_export_select last2 = {0, -1, 2};
    REQUIRE((text = trace_of(record_path(), &last2, &set)));
    CHECK(set.iterations == 2 && set.first_step == sum.last_step - 1 &&
          set.last_step == sum.last_step);
    CHECK(set.ops * (sum.last_step - sum.first_step + 1) == sum.events * 2);
    REQUIRE(tc_check(text, &r) == 0);
    CHECK(r.overlaps == 0 && r.sends_with_flow == r.sends && r.bad_flows == 0);
    free(text);
    pt_export_set_release(&set);
    /* --steps A:B, inclusive */
    pt_export_select mid = {sum.first_step + 1, sum.first_step + 2, 0};
    REQUIRE((text = trace_of(record_path(), &mid, &set)));
    CHECK(set.iterations == 2 && set.first_step == sum.first_step + 1 &&
          set.last_step == sum.first_step + 2);
    free(text);
    pt_export_set_release(&set);

    /* a missing record is an error naming it */
    CHECK(pt_export_load_run("/nonexistent/run.ndjson", NULL, &set, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/run.ndjson");
}

/* The ts of the first op slice of agent `agent` in a trace (us), or NAN. */
static double first_ts(const char *text, const char *agent)
{
    cJSON *j = cJSON_Parse(text);
    double best = NAN;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "traceEvents"))
    {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (!strcmp(tc_str(e, "ph"), "X") && strcmp(tc_str(e, "cat"), "bubble") &&
            !strcmp(tc_str(a, "agent"), agent) && (isnan(best) || tc_num(e, "ts") < best))
            best = tc_num(e, "ts");
    }
    cJSON_Delete(j);
    return best;
}

/* An agent's clock offset wrong by 20 ms (the console's heartbeat estimate on
 * a loaded host gets it wrong by milliseconds) makes its receives end before
 * their sends start; the export puts that clock right by the transfers: every
 * flow still starts inside its SEND and ends inside its RECV, never before it
 * starts, and the agent's ops land within a few milliseconds of where the
 * record's own offsets put them. */
static void test_clock_alignment(void)
{
    char *text = NULL;
    REQUIRE(pt_file_read(record_path(), &text, NULL, NULL) == 0);
    const char *skewed = "export_test_skewed.ndjson";
    FILE *f = fopen(skewed, "w");
    REQUIRE(f);
    int moved = 0;
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            nl = line + strlen(line);
        char *off = strstr(line, "\"offset_ns\":");
        if (off && off < nl && strstr(line, "\"channel\":\"telemetry\"") &&
            strstr(line, "\"agent\":\"w2\"") && strstr(line, "\"agent\":\"w2\"") < nl) {
            char *end = NULL;
            long long v = strtoll(off + 12, &end, 10);
            fprintf(f, "%.*s%lld%.*s\n", (int)(off + 12 - line), line, v + 20000000LL,
                    (int)(nl - end), end);
            moved++;
        } else {
            fprintf(f, "%.*s\n", (int)(nl - line), line);
        }
        if (!*nl)
            break;
    }
    fclose(f);
    free(text);
    CHECK(moved > 0);
    pt_export_set set;
    char *orig = trace_of(record_path(), NULL, &set);
    pt_export_set_release(&set);
    char *sk = trace_of(skewed, NULL, &set);
    pt_export_set_release(&set);
    REQUIRE(orig && sk);
    tc_result r;
    REQUIRE(tc_check(sk, &r) == 0);
    CHECK_MSG(r.sends > 0 && r.sends_with_flow == r.sends && r.bad_flows == 0,
              "%ld sends, %ld with a flow, %ld bad flows (%ld backward)", r.sends,
              r.sends_with_flow, r.bad_flows, r.backward_flows);
    CHECK(r.backward_flows == 0 && r.overlaps == 0);
    /* w2 against w1: back to within 5 ms of the record's own offsets */
    double d0 = first_ts(orig, "w2") - first_ts(orig, "w1");
    double d1 = first_ts(sk, "w2") - first_ts(sk, "w1");
    CHECK_MSG(fabs(d1 - d0) < 5000, "w2 - w1: %.0f us in the record, %.0f us skewed by 20 ms", d0,
              d1);
    free(orig);
    free(sk);
}

/* Two slices of one lane that overlap go to two tracks; neither moves. */
static void test_overlap_tracks(void)
{
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_row(&tl, 0, 0) == 0);
    pt_tl_span a = {0.0, 2e-3, 0, 0, 0, 64, PT_OP_SEND_ACT, PT_LANE_COMM};
    pt_tl_span b = {1e-3, 3e-3, 0, 1, 0, 64, PT_OP_SEND_ACT, PT_LANE_COMM};
    pt_tl_span c = {0.0, 3e-3, 0, 0, 0, 0, PT_OP_FWD, PT_LANE_COMPUTE};
    REQUIRE(pt_tline_add(&tl, &a) == 0 && pt_tline_add(&tl, &b) == 0 && pt_tline_add(&tl, &c) == 0);
    pt_export_set set;
    REQUIRE(pt_export_from_tline(&tl, NULL, 0, &set) == 0);
    CHECK(set.ops == 3 && set.extra_tracks == 1 && set.tracks[0][PT_LANE_COMM] == 2);
    CHECK(set.unmatched_sends == 2); /* no receives at all */
    for (int64_t i = 0; i < set.ops; i++)
        if (set.spans[i].op == PT_OP_SEND_ACT)
            CHECK(set.spans[i].track == (set.spans[i].mb == 1));
    char *text = NULL;
    size_t len = 0;
    REQUIRE(pt_export_trace(&tl, NULL, 0, &text, &len, NULL, NULL) == 0);
    tc_result r;
    REQUIRE(tc_check(text, &r) == 0);
    CHECK(r.overlaps == 0 && r.tracks == 3);
    free(text);
    pt_export_set_release(&set);
    pt_tline_release(&tl);
}

static void test_replay_steps(void)
{
    pt_record *rec = NULL;
    REQUIRE(pt_record_load(record_path(), &rec, NULL) == 0);
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    pt_store *store = NULL;
    REQUIRE(pt_store_new(0, &store) == 0);
    pt_replay *r = NULL;
    REQUIRE(pt_replay_new(rec, store, 1.0, &r) == 0);
    /* at speed 1, nothing past the first instant is due at the start */
    pt_replay_advance(r, 1000);
    CHECK(pt_store_step_count(store) == 0);
    /* each step key adds exactly one step's metrics */
    for (int64_t k = 1; k <= 3; k++) {
        pt_replay_step(r, 2000);
        REQUIRE(pt_store_step_count(store) == k);
        CHECK(pt_store_step_at(store, k - 1)->step == sum.first_step + k - 1);
        CHECK(pt_store_step_at(store, k - 1)->reports == 4);
    }
    CHECK(pt_replay_paused(r));
    int64_t pos = pt_replay_position(r);
    pt_replay_advance(r, (int64_t)1e15); /* paused: time passing applies nothing */
    CHECK(pt_replay_position(r) == pos);
    pt_replay_pause(r, 0, (int64_t)1e15);
    pt_replay_set_speed(r, 1000, (int64_t)1e15);
    pt_replay_advance(r, (int64_t)1e15 + (int64_t)1e9); /* 1000 s of record time */
    CHECK(pt_replay_done(r));
    CHECK(pt_store_step_count(store) == sum.last_step - sum.first_step + 1);
    /* the loss is known (last stage reports it) and the plan came with the record */
    CHECK(!isnan(pt_store_step_at(store, pt_store_step_count(store) - 1)->loss));
    REQUIRE(pt_store_plan(store));
    CHECK(pt_store_plan(store)->stage_count == 4);
    CHECK(pt_store_agent_count(store) == 4);
    for (int i = 0; i < 4; i++) {
        const pt_store_agent *a = pt_store_agent_at(store, i);
        CHECK(a->stage >= 0 && a->stage < 4 && a->pid > 0 && a->dropped == 0);
    }
    /* the last 2 steps as a timeline: 4 rows, only those steps */
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    int64_t last = pt_store_last_step(store);
    REQUIRE(pt_store_timeline(store, last - 1, last, 1, &tl, NULL) == 0);
    CHECK(tl.row_count == 4 && tl.count > 0);
    int fwd_mb3 = 0;
    for (int64_t i = 0; i < tl.count; i++) {
        CHECK(tl.spans[i].step >= last - 1 && tl.spans[i].step <= last);
        fwd_mb3 += tl.spans[i].op == PT_OP_FWD && tl.spans[i].mb == 3;
    }
    CHECK(fwd_mb3 == 2 * 4); /* micro-batch 3's forward on each stage, twice */
    pt_tline_release(&tl);
    pt_replay_free(&r);
    pt_store_free(&store);
    pt_record_free(&rec);
}

#define SESSION_LINE                                                                               \
    "{\"t\":1,\"kind\":\"session\",\"v\":2,\"unix_s\":0,\"control\":\"tcp://c\","                  \
    "\"telemetry\":\"tcp://t\",\"heartbeat_ms\":250,\"missed_heartbeats\":12}\n"

/* The record of a run restarted twice: the body of run-dapple4 (its plan
 * entry and the steps after it) three times, each copy later in time. */
static void three_generations(char **text, size_t *len)
{
    *text = NULL;
    FILE *f = fopen(record_path(), "rb");
    REQUIRE(f);
    char line[1 << 16];
    size_t cap = 1 << 22, n = 0;
    char *out = malloc(cap);
    REQUIRE(out);
    long body = -1;
    int lineno = 0;
    for (int copy = 0; copy < 3; copy++) {
        if (copy > 0)
            REQUIRE(fseek(f, body, SEEK_SET) == 0);
        while (fgets(line, sizeof line, f)) {
            lineno++;
            if (copy == 0 && body < 0 && strstr(line, "\"kind\":\"plan\""))
                body = ftell(f) - (long)strlen(line);
            if (copy == 0 && body < 0) {
                n += (size_t)snprintf(out + n, cap - n, "%s", line);
                continue;
            }
            long long t = 0;
            REQUIRE(sscanf(line, "{\"t\":%lld,", &t) == 1);
            const char *rest = strchr(line, ',');
            n += (size_t)snprintf(out + n, cap - n, "{\"t\":%lld%s", t + copy * 1000000000LL, rest);
            REQUIRE(n < cap);
        }
    }
    fclose(f);
    *len = n;
    *text = out;
}

/* Generation keys: ".", ",", "R" and the header's "gen k/n" over a record
 * with three plan entries (the plan entries are indexed once). */
static void test_replay_generations(void)
{
    size_t len = 0;
    char *text = NULL;
    three_generations(&text, &len);
    REQUIRE(text);
    pt_record *rec = NULL;
    REQUIRE(pt_record_parse(text, len, "three-gen", &rec, NULL) == 0);
    int64_t plans[4], np = 0;
    for (int64_t j = 0; j < pt_record_count(rec); j++)
        if (pt_record_at(rec, j)->kind == PT_RECORD_PLAN && np < 4)
            plans[np++] = j;
    REQUIRE(np == 3);
    pt_store *store = NULL;
    REQUIRE(pt_store_new(0, &store) == 0);
    pt_replay *r = NULL;
    REQUIRE(pt_replay_new(rec, store, 1.0, &r) == 0);
    int64_t cur = -1;
    CHECK(pt_replay_generation_count(r, &cur) == 3 && cur == 0);
    /* forward: just after each plan entry in turn, then nothing further */
    for (int g = 0; g < 3; g++) {
        CHECK(pt_replay_seek_generation(r, +1, 0) >= 0);
        CHECK(pt_replay_position(r) == plans[g] + 1);
        CHECK(pt_replay_generation_count(r, &cur) == 3 && cur == g + 1);
    }
    CHECK(pt_replay_seek_generation(r, +1, 0) < 0);
    /* back from the start of generation 3 goes to generation 2's start */
    CHECK(pt_replay_seek_generation(r, -1, 0) >= 0);
    CHECK(pt_replay_position(r) == plans[1] + 1);
    /* from inside generation 2 (a step into it), back is its own start */
    pt_replay_step(r, 0);
    CHECK(pt_replay_position(r) > plans[1] + 1);
    CHECK(pt_replay_generation_count(r, &cur) == 3 && cur == 2);
    CHECK(pt_replay_seek_generation(r, -1, 0) >= 0);
    CHECK(pt_replay_position(r) == plans[1] + 1);
    CHECK(pt_replay_seek_generation(r, -1, 0) >= 0);
    CHECK(pt_replay_position(r) == plans[0] + 1);
    CHECK(pt_replay_seek_generation(r, -1, 0) < 0); /* nothing before the first */
    pt_replay_seek_generation(r, +1, 0);
    pt_replay_seek_generation(r, +1, 0);
    CHECK(pt_replay_rewind(r, 0) >= 0);
    CHECK(pt_replay_position(r) == plans[0] + 1);
    CHECK(pt_replay_generation_count(r, &cur) == 3 && cur == 1);
    pt_replay_free(&r);
    pt_store_free(&store);
    pt_record_free(&rec);
    free(text);
}

static void test_record_errors(void)
{
    pt_record *rec = NULL;
    pt_error err = {0};
    const char *bad = SESSION_LINE "{\"kind\":\"plan\"}\n{\"t\":3,\"kind\":\"x\"}\n";
    CHECK(pt_record_parse(bad, strlen(bad), "r.ndjson", &rec, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "r.ndjson:2: t: missing");
    CHECK(rec == NULL);
    /* a truncated last line is dropped */
    const char *cut = SESSION_LINE "{\"t\":2,\"kind\":\"agent\",\"age";
    REQUIRE(pt_record_parse(cut, strlen(cut), "r.ndjson", &rec, &err) == 0);
    CHECK(pt_record_count(rec) == 1);
    pt_record_free(&rec);
    /* a message that does not decode is refused with its line and field */
    const char *junk = SESSION_LINE "{\"t\":5,\"kind\":\"recv\",\"channel\":\"telemetry\","
                                    "\"offset_ns\":0,\"len\":7,\"msg\":{\"v\":9}}\n";
    CHECK(pt_record_parse(junk, strlen(junk), "j.ndjson", &rec, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "j.ndjson:2: msg: v: unsupported version 9");
    CHECK(rec == NULL);
}

static void test_store_ring(void)
{
    /* a ring of 8 keeps the newest 8 spans */
    pt_store *s = NULL;
    REQUIRE(pt_store_new(8, &s) == 0);
    pt_msg_event ev[20];
    memset(ev, 0, sizeof ev);
    for (int i = 0; i < 20; i++) {
        ev[i].stage = i % 2;
        ev[i].step = i;
        ev[i].mb = i;
        ev[i].op = i == 7 ? PT_OP_KIND_COUNT : PT_OP_FWD; /* not a kind: skipped */
        ev[i].start_ns = i * 1000;
        ev[i].end_ns = i * 1000 + 500;
    }
    CHECK(pt_store_events(s, ev, 20, 0) == 19);
    pt_store_counts c;
    pt_store_counts_get(s, &c);
    CHECK(c.events == 20 && c.skipped == 1 && c.kept == 8);
    pt_tline tl;
    memset(&tl, 0, sizeof tl);
    int64_t origin = 0;
    REQUIRE(pt_store_timeline(s, 0, -1, 0, &tl, &origin) == 0);
    CHECK(tl.count == 8 && origin == 12000);
    CHECK_NEAR(tl.t1, (19 * 1000 + 500 - 12000) * 1e-9, 1e-15);
    pt_tline_release(&tl);
    pt_store_free(&s);
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The fill colour of the first SVG rect of op `name`, into col[8]. */
static int fill_of(const char *svg, const char *name, char *col)
{
    char key[64];
    snprintf(key, sizeof key, "data-op=\"%s\"", name);
    const char *p = strstr(svg, key);
    p = p ? strstr(p, "fill=\"") : NULL;
    if (!p)
        return -1;
    snprintf(col, 8, "%.7s", p + 6);
    return 0;
}

/* A zero-bubble program's trace and SVG draw the two halves of the backward
 * apart: BWD_INPUT and BWD_WEIGHT events, one of each per micro-batch and
 * worker and no whole BWD; in the SVG their own colours, patterns and
 * legend entries, which an unsplit program's SVG does not list. */
static void test_split_backward(void)
{
    pt_program prog = {0};
    pt_sim_result res;
    pt_sim *sim = NULL;
    pt_cost *cost = NULL;
    pt_profile *prof = NULL;
    pt_topology *topo = NULL;
    REQUIRE(simulate_kind(PT_SCHED_ZB_H1, &prog, &res, &sim, &cost, &prof, &topo) == 0);
    pt_tline tl = {0};
    REQUIRE(pt_tline_from_sim(&tl, &prog, &res) == 0);
    char *trace = NULL, *svg = NULL;
    REQUIRE(pt_export_trace(&tl, NULL, 0, &trace, NULL, NULL, NULL) == 0);
    int per = prog.worker_count * prog.mb_count;
    CHECK_MSG(count_of(trace, "\"name\":\"BWD_INPUT mb") == per, "%d BWD_INPUT events, want %d",
              count_of(trace, "\"name\":\"BWD_INPUT mb"), per);
    CHECK(count_of(trace, "\"name\":\"BWD_WEIGHT mb") == per);
    CHECK(count_of(trace, "\"name\":\"BWD mb") == 0);
    REQUIRE(pt_export_svg(&tl, NULL, NULL, &svg, NULL, NULL) == 0);
    CHECK(count_of(svg, "data-op=\"BWD_INPUT\"") == per);
    CHECK(count_of(svg, "data-op=\"BWD_WEIGHT\"") == per);
    char b[8] = "", w[8] = "";
    REQUIRE(fill_of(svg, "BWD_INPUT", b) == 0 && fill_of(svg, "BWD_WEIGHT", w) == 0);
    CHECK_MSG(strcmp(b, w) != 0, "B and W share the colour %s", b);
    CHECK(strstr(svg, "url(#rhatch)") != NULL); /* W differs without colour too */
    CHECK(strstr(svg, ">input gradient<") && strstr(svg, ">weight gradient<"));
    free(trace);
    free(svg);
    pt_tline_release(&tl);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    /* unsplit: no such legend entries */
    pt_cost_free(&cost);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
    REQUIRE(simulate(&prog, &res, &sim, &cost, &prof, &topo) == 0);
    memset(&tl, 0, sizeof tl);
    REQUIRE(pt_tline_from_sim(&tl, &prog, &res) == 0);
    REQUIRE(pt_export_svg(&tl, NULL, NULL, &svg, NULL, NULL) == 0);
    CHECK(strstr(svg, ">weight gradient<") == NULL && strstr(svg, "data-op=\"BWD\"") != NULL);
    free(svg);
    pt_tline_release(&tl);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_profile_free(&prof);
    pt_topology_free(&topo);
}

PT_TEST_MAIN({"split_backward", test_split_backward},
             {"trace_of_simulation", test_trace_of_simulation},
             {"trace_of_run_record", test_trace_of_run_record},
             {"clock_alignment", test_clock_alignment}, {"overlap_tracks", test_overlap_tracks},
             {"replay_steps", test_replay_steps}, {"replay_generations", test_replay_generations},
             {"record_errors", test_record_errors}, {"store_ring", test_store_ring})
