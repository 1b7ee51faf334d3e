/* The quick form of `pipetop run` (--stages/--schedule/--microbatches:
 * profile here, plan, run) and its summary: the last JSON line carries the
 * measured and predicted iteration time and, per stage replica, busy and
 * bubble fractions and peak memory by category, the memory that does not
 * depend on timing (weights, gradients, optimizer state) equal to the
 * simulator's; the run record holds the plan, every metric and the summary.
 * Also: Pipe-SGD over two replicas (its background all-reduce needs the
 * replicas to swap a second endpoint) and PipeDream (whole programs of
 * several iterations) run to the end. */
#include <sys/stat.h>

#include "tests/tui/run_util.h"

#define TDIR   "run_quick_itest.d"
#define RUN_MS 120000

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_quick_summary(void)
{
    ru_fresh_dir(TDIR);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/q", "--stages", "2", "--schedule", "1f1b-flush",
                "--microbatches", "4", "--iters", "6", NULL);
    REQUIRE(ru_run(run.v, TDIR "/q.out", TDIR "/q.err", RUN_MS) == 0);
    cJSON *s = ru_last_json(TDIR "/q.out");
    REQUIRE(s);
    CHECK(!strcmp(ru_str(s, "event"), "summary"));
    CHECK(num(s, "measured_iteration_ms") > 0);
    CHECK(num(s, "predicted_iteration_ms") > 0);
    CHECK_NEAR(num(s, "relative_error"),
               num(s, "measured_iteration_ms") / num(s, "predicted_iteration_ms") - 1, 1e-9);
    CHECK(num(s, "steps_measured") == 5); /* the first of 6 is left out */
    const cJSON *stages = cJSON_GetObjectItem(s, "stages");
    REQUIRE(cJSON_GetArraySize(stages) == 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *st = cJSON_GetArrayItem(stages, i);
        CHECK(num(st, "stage") == i && num(st, "replica") == 0);
        double busy = num(st, "busy_frac"), bubble = num(st, "bubble_frac");
        CHECK(busy > 0 && busy <= 1);
        CHECK_NEAR(busy + bubble, 1, 1e-9);
        CHECK(num(st, "predicted_busy_frac") > 0 && num(st, "predicted_busy_frac") <= 1);
        const cJSON *m = cJSON_GetObjectItem(st, "peak_memory_bytes");
        const cJSON *p = cJSON_GetObjectItem(st, "predicted_peak_memory_bytes");
        REQUIRE(m && p);
        CHECK(num(m, "weights") > 0);
        CHECK(num(m, "weights") == num(p, "weights"));
        CHECK(num(m, "grads") == num(p, "grads"));
        CHECK(num(m, "optim") == num(p, "optim"));
        CHECK(num(m, "acts") > 0 && num(m, "total") >= num(m, "weights") + num(m, "acts"));
    }
    CHECK(num(cJSON_GetObjectItem(s, "telemetry"), "dropped") == 0);
    cJSON_Delete(s);

    /* the plan it made and the profile it measured are kept */
    pt_error err = {0};
    char *text = NULL;
    CHECK(pt_file_read(TDIR "/q/plan.json", &text, NULL, &err) == 0);
    CHECK_STR_CONTAINS(text, "1f1b-flush");
    free(text);
    struct stat sb;
    CHECK(stat(TDIR "/q/profile.json", &sb) == 0);

    /* the record: JSON lines; the plan, metrics of 6 steps x 2 workers, the summary last */
    REQUIRE(pt_file_read(TDIR "/q/run.ndjson", &text, NULL, &err) == 0);
    int bad = 0, plans = 0, metrics = 0, summary_last = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            bad++;
            continue;
        }
        const char *kind = cJSON_GetObjectItem(j, "kind")->valuestring;
        const cJSON *msg = cJSON_GetObjectItem(j, "msg");
        plans += !strcmp(kind, "plan");
        /* the steps a metrics message stands for: 1, or a fold's "steps" */
        const cJSON *folded = msg ? cJSON_GetObjectItem(msg, "steps") : NULL;
        if (msg && !strcmp(cJSON_GetObjectItem(msg, "type")->valuestring, "metrics"))
            metrics += cJSON_IsNumber(folded) ? (int)folded->valuedouble : 1;
        summary_last = !strcmp(kind, "summary");
        cJSON_Delete(j);
    }
    free(text);
    CHECK(bad == 0);
    CHECK(plans == 1);
    CHECK(metrics == 12);
    CHECK(summary_last);
}

static void test_other_schedules(void)
{
    pt_mkdir_p(TDIR, NULL);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    ru_argv sgd;
    ru_run_argv(&sgd, model, TDIR "/sgd", "--stages", "1", "--replicas", "2", "--planner",
                "pipesgd", "--schedule", "pipesgd", "--microbatches", "2", "--iters", "4", NULL);
    CHECK(ru_run(sgd.v, TDIR "/sgd.out", TDIR "/sgd.err", RUN_MS) == 0);
    double loss[8];
    int ordered = 0;
    CHECK(ru_step_losses(TDIR "/sgd.out", 0, loss, 8, &ordered) == 4 && ordered);
    cJSON *s = ru_last_json(TDIR "/sgd.out");
    CHECK(s && cJSON_GetArraySize(cJSON_GetObjectItem(s, "stages")) == 2);
    cJSON_Delete(s);

    /* pipedream runs whole programs: 5 steps become a multiple of its windows */
    ru_argv pd;
    ru_run_argv(&pd, model, TDIR "/pd", "--stages", "2", "--schedule", "pipedream",
                "--microbatches", "4", "--iters", "5", NULL);
    CHECK(ru_run(pd.v, TDIR "/pd.out", TDIR "/pd.err", RUN_MS) == 0);
    s = ru_last_json(TDIR "/pd.out");
    double steps = num(s, "steps");
    CHECK(steps >= 5 && steps < 5 + 16);
    CHECK(ru_step_losses(TDIR "/pd.out", 0, loss, 8, &ordered) == (int)steps && ordered);
    cJSON_Delete(s);
}

/* interleaved: 2 planned devices re-cut into 2 chunks each, one agent per
 * device running both its chunks; the plan written has 4 chunk stages on
 * devices 0, 1, 0, 1 */
static void test_interleaved(void)
{
    pt_mkdir_p(TDIR, NULL);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    ru_argv il;
    ru_run_argv(&il, model, TDIR "/il", "--stages", "2", "--schedule", "interleaved", "--chunks",
                "2", "--microbatches", "4", "--iters", "3", NULL);
    CHECK(ru_run(il.v, TDIR "/il.out", TDIR "/il.err", RUN_MS) == 0);
    double loss[8];
    int ordered = 0;
    CHECK(ru_step_losses(TDIR "/il.out", 0, loss, 8, &ordered) == 3 && ordered);
    cJSON *s = ru_last_json(TDIR "/il.out");
    CHECK(s && cJSON_GetArraySize(cJSON_GetObjectItem(s, "stages")) == 4);
    cJSON_Delete(s);
    pt_plan *plan = NULL;
    pt_error err = {0};
    CHECK(pt_plan_load(TDIR "/il/plan.json", &plan, &err) == 0);
    if (plan) {
        CHECK(plan->chunks == 2 && plan->stage_count == 4);
        for (int k = 0; k < plan->stage_count; k++)
            CHECK(plan->stages[k].replicas[0] == plan->stages[k % 2].replicas[0]);
    }
    pt_plan_free(&plan);
    /* --chunks with a schedule that has none: a usage error before anything runs */
    ru_argv bad;
    ru_run_argv(&bad, model, TDIR "/bad", "--stages", "2", "--schedule", "1f1b-flush", "--chunks",
                "2", "--microbatches", "4", NULL);
    CHECK(ru_run(bad.v, TDIR "/bad.out", TDIR "/bad.err", RUN_MS) == 2);
    CHECK(access(TDIR "/bad/run.ndjson", F_OK) != 0); /* refused before the run began */
}

PT_TEST_MAIN({"quick_summary", test_quick_summary}, {"other_schedules", test_other_schedules},
             {"interleaved", test_interleaved})
