/* A schedule kind added through the table alone: this file holds one
 * generator and one table entry, registers them at run time, and runs
 * `pipetop sim` (pt_cmd_sim, in-process) on a plan file naming the new kind.
 * The kind is GPipe under another name with its own copy of GPipe's order, so
 * every prediction must equal the one for "gpipe" on the same plan, and the
 * cost model, plan parsing and help must read its facts from the entry. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/cost.h"
#include "planner/sched_gen.h"
#include "planner/schedule.h"
#include "planner/simulate.h"
#include "protocol/fileio.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tests/test.h"
#include "tui/cli/commands.h"

/* ---- the new kind: one generator, one entry ----------------------------- */

/* GPipe's order, written again: every forward, every backward (last first),
 * the all-reduce of a replicated stage, one step. */
static int gen_relay(pt_program *p, pt_error *err)
{
    (void)err;
    int M = p->mb_per_window, rc;
    for (int w = 0; w < p->worker_count; w++) {
        pt_sched_gen_begin(p, w);
        for (int k = 0; k < M; k++)
            if ((rc = pt_sched_gen_fwd(p, w, k, 0, 0)) < 0)
                return rc;
        for (int k = M - 1; k >= 0; k--)
            if ((rc = pt_sched_gen_bwd(p, w, k, 0, 0)) < 0)
                return rc;
        if ((rc = pt_sched_gen_allreduce(p, w, 0, M, 0, 0)) < 0 ||
            (rc = pt_sched_gen_opt(p, w, 0, M, 1)) < 0)
            return rc;
        pt_sched_gen_end(p, w);
    }
    return 0;
}

static const pt_sched_info relay = {
    {.name = "gpipe-relay",
     .flags = PT_SCHED_SYNCHRONOUS,
     .inflight = pt_sched_kind_inflight_all,
     .weight_versions = pt_sched_kind_versions_one,
     .summary = "GPipe's order under another name (registered by a test)"},
    gen_relay};

/* ---- helpers -------------------------------------------------------------- */

/* REQUIRE for helpers that return a value: counts the failure, returns `val`. */
#define REQUIRE_OR(cond, val)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);             \
            pt_test_failures_++;                                                                   \
            return val;                                                                            \
        }                                                                                          \
    } while (0)

static pt_sched_kind relay_kind = PT_SCHED_KIND_MAX;
static char tmp_dir[] = "/tmp/pt_sched_register_XXXXXX";

static void register_once(void)
{
    if (relay_kind != PT_SCHED_KIND_MAX)
        return;
    pt_error err = {0};
    int rc = pt_sched_register(&relay, &relay_kind, &err);
    REQUIRE(rc == 0);
    REQUIRE(mkdtemp(tmp_dir) != NULL);
}

/* tests/data/sim/plan.json with its "schedule" object replaced by `sched`;
 * returns the path of the written file. */
static const char *write_plan(const char *tag, const char *sched)
{
    static char path[4][512];
    static int slot;
    char *out = path[slot++ % 4];
    pt_error err = {0};
    char *text = NULL;
    size_t len = 0;
    REQUIRE_OR(pt_file_read(pt_test_path("tests/data/sim/plan.json"), &text, &len, &err) == 0, "");
    char *a = strstr(text, "\"schedule\"");
    REQUIRE_OR(a != NULL, "");
    char *b = strchr(a, '}');
    REQUIRE_OR(b != NULL, "");
    snprintf(out, sizeof path[0], "%s/plan-%s.json", tmp_dir, tag);
    FILE *f = fopen(out, "w");
    REQUIRE_OR(f != NULL, "");
    fprintf(f, "%.*s\"schedule\": %s%s", (int)(a - text), text, sched, b + 1);
    fclose(f);
    free(text);
    return out;
}

/* Runs pt_cmd_sim with argv, its stdout and stderr going to files; returns
 * its exit status and the text of both (caller frees). */
static int run_sim(const char **args, int n, char **out, char **errtext)
{
    char opath[600], epath[600];
    snprintf(opath, sizeof opath, "%s/stdout", tmp_dir);
    snprintf(epath, sizeof epath, "%s/stderr", tmp_dir);
    char *argv[16];
    REQUIRE_OR(n < 15, -1);
    argv[0] = "sim";
    for (int i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    argv[n + 1] = NULL;
    fflush(stdout);
    fflush(stderr);
    int save_out = dup(1), save_err = dup(2);
    int fo = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE_OR(save_out >= 0 && save_err >= 0 && fo >= 0 && fe >= 0, -1);
    dup2(fo, 1);
    dup2(fe, 2);
    int status = pt_cmd_sim(n + 1, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(save_out, 1);
    dup2(save_err, 2);
    close(fo);
    close(fe);
    close(save_out);
    close(save_err);
    size_t len;
    pt_error err = {0};
    REQUIRE_OR(pt_file_read(opath, out, &len, &err) == 0, -1);
    REQUIRE_OR(pt_file_read(epath, errtext, &len, &err) == 0, -1);
    return status;
}

/* pipetop sim --json on a plan file; returns the parsed prediction. */
static cJSON *sim_json(const char *plan)
{
    const char *args[] = {"--json",
                          "--plan",
                          plan,
                          "--profile",
                          pt_test_path("tests/data/sim/profile.json"),
                          "--topology",
                          pt_test_path("tests/data/sim/topology.json")};
    char *out = NULL, *err = NULL;
    int status = run_sim(args, 7, &out, &err);
    CHECK_MSG(status == 0, "pipetop sim %s: %s", plan, err ? err : "");
    cJSON *j = cJSON_Parse(out);
    CHECK_MSG(j != NULL, "not JSON: %s", out);
    free(out);
    free(err);
    return j;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK_MSG(cJSON_IsNumber(v), "no number \"%s\"", key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_registry(void)
{
    register_once();
    CHECK(relay_kind >= PT_SCHED_BUILTIN_COUNT && (int)relay_kind < pt_sched_kind_count());
    pt_sched_kind k = PT_SCHED_GPIPE;
    CHECK(pt_sched_kind_parse("gpipe-relay", &k) == 0 && k == relay_kind);
    CHECK(pt_sched_info_of(relay_kind) == &relay);
    CHECK(pt_sched_kind_has(relay_kind, PT_SCHED_SYNCHRONOUS));
    CHECK(!pt_sched_kind_has(relay_kind, PT_SCHED_OPT_POLICY));
    char list[512];
    int sync_builtin = 0;
    for (int k = 0; k < PT_SCHED_BUILTIN_COUNT; k++)
        sync_builtin += pt_sched_kind_has(k, PT_SCHED_SYNCHRONOUS);
    CHECK(sync_builtin >= 3); /* gpipe, dapple, 1f1b-flush at least */
    CHECK(pt_sched_kind_list(PT_SCHED_SYNCHRONOUS, list, sizeof list) == sync_builtin + 1);
    CHECK_STR_CONTAINS(list, "gpipe-relay");

    /* refusals register nothing */
    int count = pt_sched_kind_count();
    pt_error err = {0};
    pt_sched_kind id;
    CHECK(pt_sched_register(&relay, &id, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "already taken");
    static const pt_sched_info no_gen = {{.name = "no-generator",
                                          .inflight = pt_sched_kind_inflight_1f1b,
                                          .weight_versions = pt_sched_kind_versions_one,
                                          .summary = "none"},
                                         NULL};
    CHECK(pt_sched_register(&no_gen, &id, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no generator");
    static const pt_sched_info bad_name = {{.name = "Bad Name",
                                            .inflight = pt_sched_kind_inflight_1f1b,
                                            .weight_versions = pt_sched_kind_versions_one,
                                            .summary = "bad"},
                                           gen_relay};
    CHECK(pt_sched_register(&bad_name, &id, &err) == PT_EINVAL);
    static const pt_sched_info no_formula = {{.name = "no-formula", .summary = "none"}, gen_relay};
    CHECK(pt_sched_register(&no_formula, &id, &err) == PT_EINVAL);
    /* chunk columns: several chunks only with the chunks option, never one with it */
    static const pt_sched_info many_chunks = {{.name = "many-chunks",
                                               .inflight = pt_sched_kind_inflight_1f1b,
                                               .weight_versions = pt_sched_kind_versions_one,
                                               .summary = "bad",
                                               .chunks_min = 2,
                                               .chunks_max = 4},
                                              gen_relay};
    CHECK(pt_sched_register(&many_chunks, &id, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "chunks 2..4");
    static const pt_sched_info one_chunk = {{.name = "one-chunk",
                                             .flags = PT_SCHED_OPT_CHUNKS,
                                             .inflight = pt_sched_kind_inflight_1f1b,
                                             .weight_versions = pt_sched_kind_versions_one,
                                             .summary = "bad",
                                             .chunks_min = 1},
                                            gen_relay};
    CHECK(pt_sched_register(&one_chunk, &id, &err) == PT_EINVAL);
    CHECK(pt_sched_kind_count() == count);
    CHECK(pt_sched_kind_parse("no-generator", &id) == PT_ENOTFOUND);
}

/* The same plan under gpipe and under the new kind: equal predictions. */
static void test_sim_runs_new_kind(void)
{
    register_once();
    cJSON *g = sim_json(write_plan("gpipe", "{\"kind\": \"gpipe\"}"));
    cJSON *r = sim_json(write_plan("relay", "{\"kind\": \"gpipe-relay\"}"));
    cJSON *d = sim_json(write_plan("dapple", "{\"kind\": \"dapple\"}"));
    REQUIRE(g && r && d);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "schedule");
    CHECK(cJSON_IsString(name) && !strcmp(name->valuestring, "gpipe-relay"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "synchronous")));
    CHECK(num(r, "windows") == 1);
    CHECK(num(g, "iteration_ms") > 0);
    CHECK_NEAR(num(r, "iteration_ms"), num(g, "iteration_ms"), 1e-12);
    CHECK_NEAR(num(r, "bubble_frac"), num(g, "bubble_frac"), 1e-12);
    CHECK_NEAR(num(r, "samples_per_s"), num(g, "samples_per_s"), 1e-9);
    /* the plan's kind matters: dapple on the same plan is faster (the
     * comparison above would not notice a sim that ignored the kind) */
    CHECK(num(d, "iteration_ms") < num(g, "iteration_ms") - 1e-1);
    const cJSON *gw = cJSON_GetObjectItemCaseSensitive(g, "workers");
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(r, "workers");
    REQUIRE(cJSON_GetArraySize(gw) == 4 && cJSON_GetArraySize(rw) == 4);
    for (int w = 0; w < 4; w++) {
        const cJSON *a = cJSON_GetArrayItem(gw, w), *b = cJSON_GetArrayItem(rw, w);
        CHECK_NEAR(num(b, "busy_frac"), num(a, "busy_frac"), 1e-12);
        CHECK(num(b, "peak_inflight") == num(a, "peak_inflight"));
        CHECK(num(b, "peak_versions") == 1);
        CHECK(num(b, "peak_inflight") == 6); /* every micro-batch, as GPipe */
        CHECK(num(cJSON_GetObjectItemCaseSensitive(b, "peak_memory_bytes"), "total") ==
              num(cJSON_GetObjectItemCaseSensitive(a, "peak_memory_bytes"), "total"));
    }
    cJSON_Delete(g);
    cJSON_Delete(r);
    cJSON_Delete(d);

    /* the text report names the kind */
    const char *args[] = {"--plan",     write_plan("relay", "{\"kind\": \"gpipe-relay\"}"),
                          "--profile",  pt_test_path("tests/data/sim/profile.json"),
                          "--topology", pt_test_path("tests/data/sim/topology.json")};
    char *out = NULL, *err = NULL;
    CHECK(run_sim(args, 6, &out, &err) == 0);
    CHECK_STR_CONTAINS(out, "schedule      gpipe-relay, 3 stages, 4 workers");
    free(out);
    free(err);
}

/* Plan files: options the entry does not read are refused, the kind is
 * written back by name, --help lists it. */
static void test_plan_and_help(void)
{
    register_once();
    const char *bad = write_plan("relay-policy", "{\"kind\": \"gpipe-relay\", \"policy\": \"B\"}");
    const char *args[] = {"--plan",     bad,
                          "--profile",  pt_test_path("tests/data/sim/profile.json"),
                          "--topology", pt_test_path("tests/data/sim/topology.json")};
    char *out = NULL, *err = NULL;
    CHECK(run_sim(args, 6, &out, &err) == 1);
    CHECK_STR_CONTAINS(err, "schedule.policy: only the dapple schedule has a policy");
    free(out);
    free(err);

    pt_plan *plan = NULL;
    pt_error perr = {0};
    REQUIRE(pt_plan_load(write_plan("relay", "{\"kind\": \"gpipe-relay\"}"), &plan, &perr) == 0);
    CHECK(plan->schedule == relay_kind);
    char *json = pt_plan_to_json(plan);
    REQUIRE(json);
    CHECK_STR_CONTAINS(json, "\"gpipe-relay\"");
    pt_plan *back = NULL;
    CHECK(pt_plan_parse(json, "round trip", &back, &perr) == 0 && back->schedule == relay_kind);
    free(json);
    pt_plan_free(&back);
    pt_plan_free(&plan);

    const char *help[] = {"--help"};
    CHECK(run_sim(help, 1, &out, &err) == 0);
    CHECK_STR_CONTAINS(out, "gpipe-relay");
    CHECK_STR_CONTAINS(out, "GPipe's order under another name");
    free(out);
    free(err);
}

/* The cost model reads the entry's formulas: its analytic memory equals the
 * simulator's event-tracked peaks (and gpipe's) category by category. With
 * M = 6 > S - i, a fallback to a 1F1B in-flight count would differ. */
static void test_cost_model_reads_entry(void)
{
    register_once();
    pt_error err = {0};
    pt_plan *plan = NULL;
    pt_profile *pf = NULL;
    pt_topology *topo = NULL;
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    REQUIRE(pt_plan_load(write_plan("relay", "{\"kind\": \"gpipe-relay\"}"), &plan, &err) == 0);
    REQUIRE(pt_profile_load(pt_test_path("tests/data/sim/profile.json"), &pf, &err) == 0);
    REQUIRE(pt_topology_load(pt_test_path("tests/data/sim/topology.json"), &topo, &err) == 0);
    REQUIRE(pt_cost_new(pf, topo, &cost, &err) == 0 && pt_sim_new(&sim) == 0);
    REQUIRE(pt_sim_plan(sim, plan, cost, NULL, &prog, &res, &err) == 0);
    CHECK(pt_sched_validate(&prog, &err) == 0);
    int w = 0;
    for (int s = 0; s < plan->stage_count; s++)
        for (int r = 0; r < plan->stages[s].replica_count; r++, w++) {
            pt_mem m, g;
            pt_cost_replica_memory(cost, plan, s, r, &m);
            plan->schedule = PT_SCHED_GPIPE;
            pt_cost_replica_memory(cost, plan, s, r, &g);
            plan->schedule = relay_kind;
            for (int k = 0; k < PT_MEM_KIND_COUNT; k++) {
                CHECK_MSG(m.bytes[k] == res.workers[w].peak.bytes[k],
                          "stage %d replica %d %s: model %lld sim %lld", s, r, pt_mem_kind_name(k),
                          (long long)m.bytes[k], (long long)res.workers[w].peak.bytes[k]);
                CHECK(m.bytes[k] == g.bytes[k]);
            }
            CHECK(pt_cost_inflight(relay_kind, 'A', plan->stage_count, s, 6) == 6);
        }
    CHECK(pt_cost_plan_memory(cost, plan, &err) == 0);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_profile_free(&pf);
    pt_plan_free(&plan);
}

static void cleanup(void)
{
    const char *names[] = {"plan-gpipe.json",        "plan-relay.json", "plan-dapple.json",
                           "plan-relay-policy.json", "stdout",          "stderr"};
    char p[700];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp_dir, names[i]);
        unlink(p);
    }
    rmdir(tmp_dir);
}

PT_TEST_MAIN({"registry", test_registry}, {"sim runs the new kind", test_sim_runs_new_kind},
             {"plan files and help", test_plan_and_help},
             {"cost model reads the entry", test_cost_model_reads_entry}, {"cleanup", cleanup})
