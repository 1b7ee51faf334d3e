/* `pipetop export` of real runs made here with `pipetop run`: the demo's
 * shape (fmnist-mlp-deep in 4 stages under DAPPLE) and a plan with a
 * replicated middle stage (split-concat transfers). In each trace no two
 * slices of a track overlap, every SEND has its flow to the RECV of the
 * neighbouring stage with the same generation, step and micro-batch, starting
 * in the SEND and ending inside that RECV, never before it starts (the
 * agents' clock offsets put right by the transfers), and every slice carries step, generation (and
 * ops micro-batch and agent);
 * --last N and --steps A:B export exactly those iterations. */
#include "tests/tui/run_util.h"
#include "tests/tui/trace_check.h"

#define TDIR   "export_run_itest.d"
#define RUN_MS 300000
#define EXP_MS 60000

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

/* Exports run (a folder) with the extra options; returns the trace text
 * (caller frees) and the command's first output line in line. */
static char *export_trace(const char *run, const char *opt, const char *val, char *line, int cap)
{
    char out[512];
    snprintf(out, sizeof out, "%s.json", run);
    char *argv[] = {(char *)ru_bin("pipetop"),
                    "export",
                    (char *)run,
                    "--trace",
                    out,
                    (char *)opt,
                    (char *)val,
                    NULL};
    if (!opt)
        argv[5] = NULL;
    if (ru_run(argv, TDIR "/export.out", TDIR "/export.err", EXP_MS) != 0)
        return NULL;
    char *o = slurp(TDIR "/export.out");
    snprintf(line, (size_t)cap, "%s", o ? o : "");
    free(o);
    return slurp(out);
}

static void check_run(const char *run)
{
    char line[1024];
    char *text = export_trace(run, NULL, NULL, line, sizeof line);
    REQUIRE(text);
    tc_result r;
    REQUIRE(tc_check(text, &r) == 0);
    CHECK(r.ops > 100 && r.bubbles > 0 && r.tracks >= 3);
    CHECK(r.overlaps == 0);
    CHECK(r.no_args == 0);
    CHECK(r.sends > 0 && r.sends == r.recvs);
    CHECK(r.sends_with_flow == r.sends && r.bad_flows == 0);
    CHECK(r.backward_flows == 0);
    CHECK(!strstr(line, "without a receive"));
    /* the agent is named in the slices' args: worker 0's, by the name the
     * run gave it (random per run; the record's plan line says which) */
    char rec[512], names[1][RU_NAME_MAX], want[RU_NAME_MAX + 16];
    snprintf(rec, sizeof rec, "%s/run.ndjson", run);
    REQUIRE(ru_plan_workers(rec, names, NULL, 1) == 1);
    snprintf(want, sizeof want, "\"agent\":\"%s\"", names[0]);
    CHECK_STR_CONTAINS(text, want);
    free(text);

    REQUIRE((text = export_trace(run, "--last", "5", line, sizeof line)));
    CHECK_STR_CONTAINS(line, ": 5 iterations (steps 15-19)");
    REQUIRE(tc_check(text, &r) == 0);
    CHECK(r.overlaps == 0 && r.sends_with_flow == r.sends && r.bad_flows == 0);
    free(text);
    REQUIRE((text = export_trace(run, "--steps", "3:4", line, sizeof line)));
    CHECK_STR_CONTAINS(line, ": 2 iterations (steps 3-4)");
    free(text);
}

static void test_demo_shape(void)
{
    ru_fresh_dir(TDIR);
    char *argv[] = {(char *)ru_bin("pipetop"),
                    "run",
                    "--stages",
                    "4",
                    "--schedule",
                    "dapple",
                    "--microbatches",
                    "8",
                    "--microbatch-size",
                    "8",
                    "--model",
                    "fmnist-mlp-deep",
                    "--data",
                    "synthetic",
                    "--iters",
                    "20",
                    "--run-dir",
                    TDIR "/demo",
                    "--headless",
                    NULL};
    REQUIRE(ru_run(argv, TDIR "/demo.out", TDIR "/demo.err", RUN_MS) == 0);
    check_run(TDIR "/demo");
}

static void test_replicated_stage(void)
{
    pt_mkdir_p(TDIR, NULL);
    static const char plan[] =
        "{\"v\":1,\"model\":\"tiny-mlp\",\"layers\":8,\"microbatch\":{\"size\":8,\"count\":4},"
        "\"schedule\":{\"kind\":\"dapple\",\"policy\":\"A\"},\"optimizer\":{\"kind\":\"sgd\","
        "\"lr\":0.02,\"momentum\":0.9,\"weight_decay\":0},\"stages\":["
        "{\"layers\":[0,3],\"replicas\":[0],\"recompute\":false},"
        "{\"layers\":[3,6],\"replicas\":[1,2],\"recompute\":false},"
        "{\"layers\":[6,8],\"replicas\":[3],\"recompute\":false}]}";
    REQUIRE(pt_file_write_atomic(TDIR "/rep-plan.json", plan, strlen(plan), NULL) == 0);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    char *argv[] = {(char *)ru_bin("pipetop"),
                    "run",
                    "--plan",
                    TDIR "/rep-plan.json",
                    "--model",
                    model,
                    "--data",
                    "synthetic",
                    "--iters",
                    "20",
                    "--run-dir",
                    TDIR "/rep",
                    "--headless",
                    NULL};
    REQUIRE(ru_run(argv, TDIR "/rep.out", TDIR "/rep.err", RUN_MS) == 0);
    check_run(TDIR "/rep");
}

PT_TEST_MAIN({"demo_shape", test_demo_shape}, {"replicated_stage", test_replicated_stage})
