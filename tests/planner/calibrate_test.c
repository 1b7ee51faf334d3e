/* Calibration recovers known costs from a run record the simulator made.
 *
 * The "machine" is a true profile: a base profile whose layers are scaled by
 * known factors per stage of plan A (forward and backward differently), with
 * a known per-op overhead and optimizer bandwidth, on a topology with a known
 * link. Plan A (one stage replicated, so there are all-reduces) is simulated
 * on it; the timeline is written as a run record the way agents send it
 * (events messages through protocol/record's writer), read back, and
 * calibrated against the base profile. The fit must give each stage's
 * compute within 1 %, the link within 5 %, and a prediction for a different
 * plan B (other stage boundaries, another schedule) within 1 % of what the
 * true costs give -- while the base profile's prediction is far off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/calibrate.h"
#include "planner/cost.h"
#include "planner/simulate.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/plan.h"
#include "protocol/record.h"
#include "tests/test.h"

#define DIR   "calibrate_test.d"
#define MB    8
#define STEPS 4
#define NL    10

static const int widths[NL] = {256, 256, 128, 128, 512, 512, 64, 64, 10, 10};
static const char *const model_text =
    "{\"v\":1,\"name\":\"cal\",\"input\":{\"kind\":\"float\",\"shape\":[64]},\"layers\":["
    "{\"type\":\"linear\",\"out\":256},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":128},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":512},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":64},{\"type\":\"relu\"},"
    "{\"type\":\"linear\",\"out\":10},{\"type\":\"softmax_xent\",\"classes\":10}]}";

/* plan A's stages, layers [lo, hi), and the factors the "machine" applies */
static const int a_lo[3] = {0, 4, 6}, a_hi[3] = {4, 6, 10};
static const double f_fwd[3] = {1.8, 3.0, 2.2}, f_bwd[3] = {2.5, 1.4, 3.1};
#define TRUE_OVERHEAD_MS 0.02
#define TRUE_OPT_BPS     40e9
#define TRUE_BW          2.0e9
#define TRUE_LAT         40e-6
#define TRUE_WAKE_MS     0.3 /* a waiting receive returns this long after its send */

static pt_profile *base_profile(void)
{
    pt_profile *p = pt_profile_new(NL);
    CHECK(p != NULL);
    if (!p)
        return NULL;
    snprintf(p->model, sizeof p->model, "cal");
    snprintf(p->device, sizeof p->device, "test");
    snprintf(p->source, sizeof p->source, "measured");
    p->microbatch = MB;
    p->input_bytes = 64 * 4 * MB;
    int in = 64;
    for (int l = 0; l < NL; l++) {
        pt_profile_layer *L = &p->layers[l];
        int lin = l % 2 == 0;
        L->fwd_ms = lin ? 0.002 * in * widths[l] / 1000.0 : 0.01;
        L->bwd_ms = 2 * L->fwd_ms;
        L->recompute_ms = L->fwd_ms;
        L->act_bytes = (int64_t)widths[l] * 4 * MB;
        L->param_bytes = lin ? (int64_t)(in + 1) * widths[l] * 4 : 0;
        in = widths[l];
    }
    return p;
}

/* p's layers of plan A's stage s: base's, forward (and recompute) times
 * times ff[s], backward times fb[s]. */
static void scale_stages(pt_profile *p, const pt_profile *base, const double *ff, const double *fb)
{
    for (int s = 0; s < 3; s++)
        for (int l = a_lo[s]; l < a_hi[s]; l++) {
            p->layers[l] = base->layers[l];
            p->layers[l].fwd_ms *= ff[s];
            p->layers[l].recompute_ms *= ff[s];
            p->layers[l].bwd_ms *= fb[s];
        }
}

static pt_profile *true_profile(const pt_profile *base, int hold)
{
    pt_profile *p = pt_profile_new(NL);
    CHECK(p != NULL);
    if (!p)
        return NULL;
    pt_profile_layer *keep = p->layers;
    *p = *base;
    p->layers = keep;
    scale_stages(p, base, f_fwd, f_bwd);
    p->op_overhead_ms = TRUE_OVERHEAD_MS;
    p->opt_bytes_per_s = TRUE_OPT_BPS;
    p->sends_hold = hold;
    p->recv_wake_ms = TRUE_WAKE_MS;
    return p;
}

/* stages given by [lo, hi) with replica counts; devices numbered in order */
static pt_plan *make_plan(int S, const int *lo, const int *hi, const int *reps, const char *kind)
{
    char buf[2048];
    int n = snprintf(buf, sizeof buf,
                     "{\"v\":1,\"model\":\"cal\",\"layers\":%d,\"microbatch\":{\"size\":%d,"
                     "\"count\":4},\"schedule\":{\"kind\":\"%s\"},\"stages\":[",
                     NL, MB, kind);
    int dev = 0;
    for (int s = 0; s < S; s++) {
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s{\"layers\":[%d,%d],\"replicas\":[",
                      s ? "," : "", lo[s], hi[s]);
        for (int r = 0; r < reps[s]; r++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%d", r ? "," : "", dev++);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    }
    snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    pt_plan *p = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_plan_parse(buf, "plan", &p, &err) == 0, "%s", err.msg);
    return p;
}

static double sim_iter(const pt_plan *plan, const pt_profile *prof, const pt_topology *topo)
{
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    double t = -1;
    if (pt_cost_new(prof, topo, &cost, &err) == 0 && pt_sim_new(&sim) == 0 &&
        pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0)
        t = res.iter_s;
    CHECK_MSG(t > 0, "%s", err.msg);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    return t;
}

/* The simulator's shared-core stretch of each stage of plan (the mean over
 * its replicas). */
static void sim_stretch(const pt_plan *plan, const pt_profile *prof, const pt_topology *topo,
                        double *per_stage)
{
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    REQUIRE(pt_cost_new(prof, topo, &cost, &err) == 0 && pt_sim_new(&sim) == 0);
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0);
    for (int s = 0; s < prog.stage_count; s++) {
        double sum = 0;
        for (int w = prog.stage_worker[s]; w < prog.stage_worker[s + 1]; w++)
            sum += res.workers[w].core_stretch;
        per_stage[s] = sum / (prog.stage_worker[s + 1] - prog.stage_worker[s]);
    }
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
}

/* Simulates plan on the true costs and writes STEPS iterations of it as the
 * agents would report them: one events message per worker per step. */
static void write_record(const char *path, const pt_plan *plan, const pt_profile *prof,
                         const pt_topology *topo)
{
    pt_model_spec *model = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_parse(model_text, "model", &model, &err) == 0);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_cost_new(prof, topo, &cost, &err) == 0);
    REQUIRE(pt_sim_new(&sim) == 0);
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0);

    pt_record_writer *w = NULL;
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    pt_record_worker workers[16];
    REQUIRE(prog.worker_count <= 16);
    for (int k = 0; k < prog.worker_count; k++) {
        workers[k] =
            (pt_record_worker){k, "", prog.workers[k].stage, prog.workers[k].replica, 100 + k};
        snprintf(workers[k].agent, sizeof workers[k].agent, "w%d", k);
    }
    pt_record_plan rp = {1, plan, model, "synthetic", 1, "", 0, 0, prog.worker_count, workers};
    REQUIRE(pt_record_write_plan(w, &rp) == 0);
    int64_t period_ns = (int64_t)(res.makespan_s * 1e9) + 1000000; /* 1 ms between steps */
    int64_t seq[16] = {0};
    for (int step = 0; step < STEPS; step++)
        for (int k = 0; k < prog.worker_count; k++) {
            const pt_worker *x = &prog.workers[k];
            pt_msg m;
            pt_msg_init(&m, PT_MSG_EVENTS, workers[k].agent);
            m.seq = seq[k]++;
            m.gen = 1;
            m.u.events.count = x->op_end - x->op_begin;
            m.u.events.events = calloc((size_t)m.u.events.count, sizeof(pt_msg_event));
            REQUIRE(m.u.events.events != NULL);
            for (int i = x->op_begin; i < x->op_end; i++) {
                const pt_op *op = &prog.ops[i];
                const pt_sim_event *ev = &res.events[i];
                pt_msg_event *e = &m.u.events.events[i - x->op_begin];
                e->stage = x->stage;
                e->replica = x->replica;
                e->step = step;
                e->op = (pt_op_kind)op->kind;
                e->mb = pt_op_has_one_mb(op->kind) ? op->mb : -1;
                e->version = (pt_op_facts(op->kind) & PT_OPK_VERSION) ? op->version : -1;
                e->start_ns = step * period_ns + (int64_t)llround(ev->start * 1e9);
                e->end_ns = step * period_ns + (int64_t)llround(ev->end * 1e9);
                e->bytes =
                    (pt_op_facts(op->kind) & (PT_OPK_P2P | PT_OPK_COLLECTIVE)) ? op->bytes : 0;
            }
            char *text = NULL;
            size_t len = 0;
            CHECK_MSG(pt_msg_encode(&m, &text, &len, &err) == 0, "%s", err.msg);
            if (text)
                CHECK(pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", 0, text, len) == 0);
            free(text);
            pt_msg_clear(&m);
        }
    pt_record_writer_close(&w);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_model_spec_free(&model);
}

static double rel(double got, double want)
{
    return fabs(got - want) / fabs(want);
}

/* hold: the "machine"'s sends hold their worker (the CPU runtime's) or run
 * beside it (the simulator's default); cores > 0: its 8 devices share that
 * many cores, so plan A's 4 workers run slowed and plan B's 2 do not. */
static void recovers_known_costs_kind(int hold, int cores, const char *kind_a)
{
    pt_profile *base = base_profile();
    REQUIRE(base != NULL);
    pt_profile *truth = true_profile(base, hold);
    REQUIRE(truth != NULL);
    pt_link link = {TRUE_BW, TRUE_LAT};
    pt_topology *topo = pt_topology_uniform(1, 8, 1LL << 34, link, link);
    REQUIRE(topo != NULL);
    for (int d = 0; d < topo->device_count; d++)
        topo->devices[d].node_cores = cores;
    const int reps_a[3] = {1, 2, 1};
    pt_plan *plan_a = make_plan(3, a_lo, a_hi, reps_a, kind_a);
    REQUIRE(plan_a != NULL);
    /* plan A's 4 workers on the shared cores are stretched by how many
     * compute at once (planner/simulate.h): per stage, its workers' mean */
    double slow[3];
    sim_stretch(plan_a, truth, topo, slow);
    for (int s = 0; s < 3; s++)
        CHECK_MSG(cores == 0 ? slow[s] == 1.0 : slow[s] > 1.0 && slow[s] < 4.0 / cores,
                  "stage %d stretch %g on %d cores", s, slow[s], cores);
    const char *path = DIR "/run.ndjson";
    write_record(path, plan_a, truth, topo);

    pt_record *rec = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(path, &rec, &err) == 0);
    pt_profile *cal = NULL;
    pt_cal_fit fit;
    pt_cal_opts o = {-1, -1, DIR, "base", "2026-12-01T00:00:00Z"};
    int rc = pt_calibrate(rec, base, topo, &o, &cal, &fit, &err);
    REQUIRE(rc == 0 && cal != NULL);
    CHECK(fit.gen == 1 && fit.first_step == 1 && fit.last_step == STEPS - 1);
    CHECK(!strcmp(cal->origin.kind, "calibrated") && !strcmp(cal->origin.run, DIR));
    CHECK_MSG(fit.sends_hold == hold && cal->sends_hold == hold, "sends_hold %d, truth %d",
              fit.sends_hold, hold);

    /* each stage's compute, per replica op, within 1 % of the truth */
    pt_cost *tc = NULL, *cc = NULL;
    REQUIRE(pt_cost_new(truth, topo, &tc, &err) == 0);
    REQUIRE(pt_cost_new(cal, topo, &cc, &err) == 0);
    REQUIRE(fit.stage_count == 3);
    for (int s = 0; s < 3; s++) {
        int rows = MB / reps_a[s];
        /* measured: the true cost, slowed where cores are shared */
        double tf = slow[s] * pt_cost_fwd_s(tc, a_lo[s], a_hi[s], rows, 0) * 1e3;
        double tb = slow[s] * pt_cost_bwd_s(tc, a_lo[s], a_hi[s], rows, 0) * 1e3;
        CHECK_MSG(rel(fit.stages[s].fwd_ms, tf) < 0.01, "stage %d fwd %g vs %g", s,
                  fit.stages[s].fwd_ms, tf);
        CHECK_MSG(rel(fit.stages[s].bwd_ms, tb) < 0.01, "stage %d bwd %g vs %g", s,
                  fit.stages[s].bwd_ms, tb);
        CHECK_MSG(rel(fit.stages[s].fwd_scale, f_fwd[s]) < 0.01, "stage %d scale %g", s,
                  fit.stages[s].fwd_scale);
        /* and the calibrated profile has the true per-op costs, without the
         * slowdown, which the simulator adds for the plan it runs */
        CHECK(rel(slow[s] * pt_cost_fwd_s(cc, a_lo[s], a_hi[s], rows, 0) * 1e3, tf) < 0.01);
        CHECK(rel(slow[s] * pt_cost_bwd_s(cc, a_lo[s], a_hi[s], rows, 0) * 1e3, tb) < 0.01);
    }
    /* the link within 5 %; the overhead and optimizer bandwidth too */
    CHECK_MSG(fit.intra.how == PT_CAL_LINK_FIT, "intra fit: %s",
              pt_cal_link_how_name(fit.intra.how));
    CHECK_MSG(rel(fit.intra.link.bandwidth, TRUE_BW) < 0.05, "bandwidth %g",
              fit.intra.link.bandwidth);
    CHECK_MSG(rel(fit.intra.link.latency, TRUE_LAT) < 0.05, "latency %g", fit.intra.link.latency);
    CHECK(fit.allreduce.how != PT_CAL_LINK_NONE);
    CHECK_MSG(rel(fit.allreduce.link.bandwidth, TRUE_BW) < 0.05, "all-reduce bandwidth %g",
              fit.allreduce.link.bandwidth);
    /* and the profile carries it, for the simulator's all-reduces on one node */
    CHECK_MSG(rel(cal->ar_bytes_per_s, TRUE_BW) < 0.05, "profile's all-reduce bandwidth %g",
              cal->ar_bytes_per_s);
    CHECK_MSG(rel(fit.op_overhead_ms, TRUE_OVERHEAD_MS) < 0.05, "overhead %g ms",
              fit.op_overhead_ms);
    CHECK_MSG(rel(fit.opt_bytes_per_s, TRUE_OPT_BPS) < 0.05, "opt %g", fit.opt_bytes_per_s);
    /* the receiver's wake-up, from the receives that waited (there are some:
     * plan A's stages are unbalanced), and the profile carries it */
    CHECK_MSG(fit.recv_waits > 0 && rel(fit.recv_wake_ms, TRUE_WAKE_MS) < 0.01,
              "wake %g ms over %lld receives", fit.recv_wake_ms, (long long)fit.recv_waits);
    CHECK(cal->recv_wake_ms == fit.recv_wake_ms);

    /* a different plan: two stages split elsewhere, 1f1b-flush, no replica */
    pt_topology *ctopo = NULL;
    REQUIRE(pt_cal_topology(&fit, topo, &ctopo, &err) == 0);
    const int b_lo[2] = {0, 5}, b_hi[2] = {5, 10}, reps_b[2] = {1, 1};
    pt_plan *plan_b = make_plan(2, b_lo, b_hi, reps_b, "1f1b-flush");
    REQUIRE(plan_b != NULL);
    double t_true = sim_iter(plan_b, truth, topo);
    double t_cal = sim_iter(plan_b, cal, ctopo);
    double t_base = sim_iter(plan_b, base, topo);
    printf("sends %s, %d shared cores: plan B: true %.4f ms, calibrated %.4f ms, base %.4f ms\n",
           hold ? "hold" : "beside", cores, t_true * 1e3, t_cal * 1e3, t_base * 1e3);
    CHECK_MSG(rel(t_cal, t_true) < 0.01, "calibrated %g vs true %g", t_cal, t_true);
    /* the base profile alone is far off: the check above has something to find */
    CHECK(rel(t_base, t_true) > 0.3);
    /* the calibrated profile round-trips through its file format */
    char *text = pt_profile_to_json(cal);
    pt_profile *back = NULL;
    REQUIRE(text != NULL);
    CHECK_MSG(pt_profile_parse(text, "cal", &back, &err) == 0, "%s", err.msg);
    if (back) {
        CHECK(!strcmp(back->origin.kind, "calibrated") && back->origin.gen == 1);
        CHECK(!strcmp(back->origin.date, "2026-12-01T00:00:00Z"));
        CHECK(rel(back->op_overhead_ms, cal->op_overhead_ms) < 1e-12);
        CHECK(rel(back->opt_bytes_per_s, cal->opt_bytes_per_s) < 1e-12);
        CHECK(rel(back->ar_bytes_per_s, cal->ar_bytes_per_s) < 1e-12);
        CHECK(fabs(back->ar_latency_s - cal->ar_latency_s) < 1e-12);
        CHECK(back->sends_hold == hold);
        CHECK(rel(back->recv_wake_ms, cal->recv_wake_ms) < 1e-12);
    }
    free(text);
    pt_profile_free(&back);
    pt_cal_fit_clear(&fit);
    pt_cost_free(&tc);
    pt_cost_free(&cc);
    pt_topology_free(&ctopo);
    pt_plan_free(&plan_b);
    pt_profile_free(&cal);
    pt_record_free(&rec);
    pt_plan_free(&plan_a);
    pt_topology_free(&topo);
    pt_profile_free(&truth);
    pt_profile_free(&base);
}

static void recovers_known_costs(int hold, int cores)
{
    recovers_known_costs_kind(hold, cores, "dapple");
}

static void test_recovers_known_costs(void)
{
    recovers_known_costs(0, 0);
}

/* plan A with the backward split (BWD_INPUT, BWD_WEIGHT gathered at the
 * end): its halves fit the whole backward */
static void test_recovers_known_costs_split(void)
{
    recovers_known_costs_kind(0, 0, "1f1b-gw");
}

static void test_recovers_known_costs_sends_hold(void)
{
    recovers_known_costs(1, 0);
}

static void test_recovers_known_costs_shared_cores(void)
{
    recovers_known_costs(1, 2);
}

static void test_no_events(void)
{
    const char *path = DIR "/empty.ndjson";
    pt_record_writer *w = NULL;
    pt_error err = {0};
    pt_record_session ses = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 250, 12};
    REQUIRE(pt_record_writer_open(path, &ses, &w, &err) == 0);
    pt_record_writer_close(&w);
    pt_record *rec = NULL;
    REQUIRE(pt_record_load(path, &rec, &err) == 0);
    pt_profile *base = base_profile(), *cal = (pt_profile *)1;
    pt_link link = {TRUE_BW, TRUE_LAT};
    pt_topology *topo = pt_topology_uniform(1, 8, 1LL << 34, link, link);
    pt_cal_fit fit;
    CHECK(pt_calibrate(rec, base, topo, NULL, &cal, &fit, &err) == PT_ENOTFOUND);
    CHECK(cal == NULL && fit.stages == NULL);
    CHECK_STR_CONTAINS(err.msg, "no op events");
    pt_topology_free(&topo);
    pt_profile_free(&base);
    pt_record_free(&rec);
}

/* A calibration carried onto a profile measured in other conditions: onto
 * = base with layer l's times multiplied by (l + 2) on another device string
 * gives cal's times multiplied by one factor per kind, onto's total over
 * base's; measured on the same device string (the same conditions) cal's
 * times unchanged, whatever the noise between the two profiles; the bytes
 * are onto's and the fitted runtime figures stay cal's; profiles of another
 * model are refused. */
static void test_rebase(void)
{
    pt_profile *base = base_profile(), *cal = true_profile(base, 1), *onto = base_profile();
    REQUIRE(base && cal && onto);
    cal->op_overhead_ms = 0.25;
    cal->opt_bytes_per_s = 3e9;
    double of = 0, bf = 0, ob = 0, bb = 0;
    for (int l = 0; l < NL; l++) {
        bf += base->layers[l].fwd_ms;
        bb += base->layers[l].bwd_ms;
        onto->layers[l].fwd_ms *= l + 2;
        onto->layers[l].bwd_ms *= l + 2;
        onto->layers[l].recompute_ms *= l + 2;
        onto->layers[l].act_bytes += 8;
        of += onto->layers[l].fwd_ms;
        ob += onto->layers[l].bwd_ms;
    }
    CHECK(of > 2 * bf && ob > 2 * bb);
    for (int same = 0; same < 2; same++) {
        snprintf(onto->device, sizeof onto->device, "%s", same ? base->device : "cpu x1");
        REQUIRE(strcmp(base->device, "cpu x1") != 0);
        pt_profile *r = NULL;
        pt_error err = {0};
        CHECK_MSG(pt_cal_rebase(cal, base, onto, &r, &err) == 0, "%s", err.msg);
        REQUIRE(r != NULL);
        double ff = same ? 1 : of / bf, fb = same ? 1 : ob / bb;
        for (int l = 0; l < NL; l++) {
            CHECK(rel(r->layers[l].fwd_ms, cal->layers[l].fwd_ms * ff) < 1e-12);
            CHECK(rel(r->layers[l].bwd_ms, cal->layers[l].bwd_ms * fb) < 1e-12);
            CHECK(r->layers[l].act_bytes == onto->layers[l].act_bytes);
        }
        CHECK(!strcmp(r->device, onto->device));
        CHECK(r->op_overhead_ms == 0.25 && r->opt_bytes_per_s == 3e9);
        CHECK(r->sends_hold == cal->sends_hold);
        pt_profile_free(&r);
    }
    pt_profile *r = NULL;
    pt_error err = {0};
    snprintf(onto->model, sizeof onto->model, "other");
    CHECK(pt_cal_rebase(cal, base, onto, &r, &err) == PT_EINVAL && r == NULL);
    CHECK_STR_CONTAINS(err.msg, "\"other\"");
    pt_profile_free(&onto);
    pt_profile_free(&cal);
    pt_profile_free(&base);
}

/* One message size: a plan without replicas sends one activation size
 * (4 KiB here, true time TRUE_LAT + bytes / TRUE_BW). Against a link on
 * which those bytes take less than its latency, the time is per-message
 * overhead: a flat fit, the link's bandwidth kept. Against a link on which
 * they take longer (a slow one), the latency is kept and the bandwidth
 * fitted through the rest: the true bandwidth. */
static void test_one_size_links(void)
{
    pt_profile *base = base_profile();
    REQUIRE(base != NULL);
    pt_profile *truth = true_profile(base, 1);
    REQUIRE(truth != NULL);
    pt_link link = {TRUE_BW, TRUE_LAT};
    pt_topology *topo = pt_topology_uniform(1, 8, 1LL << 34, link, link);
    REQUIRE(topo != NULL);
    const int lo[2] = {0, 4}, hi[2] = {4, 10}, reps[2] = {1, 1};
    pt_plan *plan = make_plan(2, lo, hi, reps, "1f1b-flush");
    REQUIRE(plan != NULL);
    const char *path = DIR "/one-size.ndjson";
    write_record(path, plan, truth, topo);
    pt_record *rec = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(path, &rec, &err) == 0);
    const double bytes = 128.0 * 4 * MB, t_send = TRUE_LAT + bytes / TRUE_BW;
    for (int slow = 0; slow < 2; slow++) {
        /* the link calibration starts from: bytes take 1/20 or 2.5x its latency */
        pt_link keep = {slow ? bytes / (2.5 * TRUE_LAT) : 20 * bytes / TRUE_LAT, TRUE_LAT};
        pt_topology *kt = pt_topology_uniform(1, 8, 1LL << 34, keep, keep);
        REQUIRE(kt != NULL);
        pt_profile *cal = NULL;
        pt_cal_fit fit;
        REQUIRE(pt_calibrate(rec, base, kt, NULL, &cal, &fit, &err) == 0);
        CHECK(fit.intra.ops > 0);
        if (!slow) {
            CHECK_MSG(fit.intra.how == PT_CAL_LINK_FLAT, "fit %s",
                      pt_cal_link_how_name(fit.intra.how));
            CHECK_MSG(rel(fit.intra.link.latency, t_send) < 0.01, "latency %g, true time %g",
                      fit.intra.link.latency, t_send);
            CHECK(fit.intra.link.bandwidth == keep.bandwidth);
        } else {
            CHECK_MSG(fit.intra.how == PT_CAL_LINK_BW_ONLY, "fit %s",
                      pt_cal_link_how_name(fit.intra.how));
            CHECK(fit.intra.link.latency == TRUE_LAT);
            CHECK_MSG(rel(fit.intra.link.bandwidth, TRUE_BW) < 0.05, "bandwidth %g",
                      fit.intra.link.bandwidth);
        }
        pt_cal_fit_clear(&fit);
        pt_profile_free(&cal);
        pt_topology_free(&kt);
    }
    pt_record_free(&rec);
    pt_plan_free(&plan);
    pt_topology_free(&topo);
    pt_profile_free(&truth);
    pt_profile_free(&base);
}

/* Weight stashing: a pipedream run (a step after every backward, nothing
 * copied) on a "machine" whose stages run at their own speeds, calibrated,
 * predicts another pipedream plan and a 1f1b-flush plan within 1 %: the
 * stashing boundary needs no term of its own. */
static void test_stashing(void)
{
    static const double g[3] = {1.8, 3.0, 2.2};
    pt_profile *base = base_profile(), *truth = true_profile(base, 1);
    REQUIRE(base && truth);
    scale_stages(truth, base, g, g);
    pt_link link = {TRUE_BW, TRUE_LAT};
    pt_topology *topo = pt_topology_uniform(1, 8, 1LL << 34, link, link);
    REQUIRE(topo != NULL);
    const int reps[3] = {1, 1, 1};
    pt_plan *plan_a = make_plan(3, a_lo, a_hi, reps, "pipedream");
    REQUIRE(plan_a != NULL);
    const char *path = DIR "/stash.ndjson";
    write_record(path, plan_a, truth, topo);
    pt_record *rec = NULL;
    pt_error err = {0};
    REQUIRE(pt_record_load(path, &rec, &err) == 0);
    pt_profile *cal = NULL;
    pt_cal_fit fit;
    pt_cal_opts o = {-1, -1, DIR, "base", ""};
    REQUIRE(pt_calibrate(rec, base, topo, &o, &cal, &fit, &err) == 0);
    pt_cost *tc = NULL;
    REQUIRE(pt_cost_new(truth, topo, &tc, &err) == 0);
    for (int s = 0; s < 3; s++) {
        double tf = pt_cost_fwd_s(tc, a_lo[s], a_hi[s], MB, 0) * 1e3;
        CHECK_MSG(rel(fit.stages[s].fwd_ms, tf) < 0.01, "stage %d fwd %g vs %g", s,
                  fit.stages[s].fwd_ms, tf);
    }
    pt_topology *ctopo = NULL;
    REQUIRE(pt_cal_topology(&fit, topo, &ctopo, &err) == 0);
    const int b_lo[2] = {0, 5}, b_hi[2] = {5, 10}, reps_b[2] = {1, 1};
    const char *kinds[2] = {"pipedream", "1f1b-flush"};
    for (int k = 0; k < 2; k++) {
        pt_plan *plan_b = make_plan(2, b_lo, b_hi, reps_b, kinds[k]);
        REQUIRE(plan_b != NULL);
        double t_true = sim_iter(plan_b, truth, topo), t_cal = sim_iter(plan_b, cal, ctopo);
        CHECK_MSG(rel(t_cal, t_true) < 0.01, "%s: calibrated %g vs true %g", kinds[k], t_cal,
                  t_true);
        pt_plan_free(&plan_b);
    }
    pt_topology_free(&ctopo);
    pt_cost_free(&tc);
    pt_cal_fit_clear(&fit);
    pt_profile_free(&cal);
    pt_record_free(&rec);
    pt_plan_free(&plan_a);
    pt_topology_free(&topo);
    pt_profile_free(&truth);
    pt_profile_free(&base);
}

PT_TEST_MAIN({"recovers_known_costs", test_recovers_known_costs},
             {"recovers_known_costs_split", test_recovers_known_costs_split},
             {"rebase", test_rebase}, {"stashing", test_stashing},
             {"one_size_links", test_one_size_links},
             {"recovers_known_costs_sends_hold", test_recovers_known_costs_sends_hold},
             {"recovers_known_costs_shared_cores", test_recovers_known_costs_shared_cores},
             {"no_events", test_no_events})
