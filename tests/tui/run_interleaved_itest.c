/* `pipetop run` of interleaved plans on one agent per device: each agent runs
 * every model chunk of its device (assign "chunks"; device d holds chunks d,
 * d+S, ...), hops to the other device go over the data plane, and after K
 * steps the checkpointed weights and momentum equal single-device training
 * (`pipetop train`) on the same global batch, seed and data order within 1e-5:
 * v = 2 with a replicated rank and v = 3 on the MLP, v = 2 on gpt-tiny. The
 * run record shows one agent per device, not per chunk. */
#include "protocol/record.h"
#include "tests/tui/run_util.h"

#define DIR        "run_interleaved_itest.d"
#define RUN_MS     240000
#define STEPS      4
#define WEIGHT_TOL 1e-5

typedef struct il_case {
    const char *name, *plan, *model; /* model: a path under tests/ or a name in models/ */
    int devices, batch;              /* agents expected; global batch */
} il_case;

static int counts_in(const char *path, const char *needle)
{
    char *text = NULL;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return -1;
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(text);
    return n;
}

static void run_case(const il_case *c)
{
    char dir[128], model[1024], plan[1024], path[512], path2[512], out[256], err[256];
    snprintf(dir, sizeof dir, DIR "/%s", c->name);
    ru_fresh_dir(dir);
    snprintf(model, sizeof model, "%s", strchr(c->model, '/') ? pt_test_path(c->model) : c->model);
    snprintf(plan, sizeof plan, "%s", pt_test_path(c->plan));
    char batch[16], steps[16], control_steps[16], mb[16];
    snprintf(batch, sizeof batch, "%d", c->batch);
    snprintf(steps, sizeof steps, "%d", STEPS);
    snprintf(control_steps, sizeof control_steps, "%d", STEPS - 1);
    snprintf(mb, sizeof mb, "%d", c->batch / 4);

    snprintf(path, sizeof path, "%s/profile.json", dir);
    snprintf(out, sizeof out, "%s/profile.out", dir);
    snprintf(err, sizeof err, "%s/profile.err", dir);
    char *prof[] = {(char *)ru_bin("pipetop"),
                    "profile",
                    "--model",
                    model,
                    "--batch",
                    mb,
                    "--out",
                    path,
                    "--repeats",
                    "2",
                    NULL};
    REQUIRE(ru_run(prof, out, err, RUN_MS) == 0);

    char ck[256], rd[256];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(rd, sizeof rd, "%s/run", dir);
    snprintf(out, sizeof out, "%s/run.out", dir);
    snprintf(err, sizeof err, "%s/run.err", dir);
    ru_argv run;
    ru_run_argv(&run, model, rd, "--plan", plan, "--iters", steps, "--checkpoint-dir", ck,
                "--profile", path, NULL);
    int st = ru_run(run.v, out, err, RUN_MS);
    CHECK_MSG(st == 0, "%s: pipetop run exited %d (see %s)", c->name, st, err);
    if (st != 0)
        return;
    /* one agent per device: as many registrations as devices, and the plan's
     * workers (agents) in the record are the devices */
    snprintf(path, sizeof path, "%s/run.ndjson", rd);
    CHECK_MSG(counts_in(path, "\"type\":\"register\"") == c->devices,
              "%s: %d agents registered, want %d (one per device)", c->name,
              counts_in(path, "\"type\":\"register\""), c->devices);
    CHECK_MSG(counts_in(path, "\"agent\":\"w") >= c->devices, "%s: no agents", c->name);
    pt_record *rec = NULL;
    pt_error e = {0};
    CHECK_MSG(pt_record_load(path, &rec, &e) == 0, "%s: record: %s", c->name, e.msg);
    pt_record_free(&rec);

    /* single-device training on the same global batch, seed and order */
    char single[256], control[256];
    snprintf(single, sizeof single, "%s/single", dir);
    snprintf(control, sizeof control, "%s/control", dir);
    snprintf(out, sizeof out, "%s/single.out", dir);
    snprintf(err, sizeof err, "%s/single.err", dir);
    char *train[] = {(char *)ru_bin("pipetop"),
                     "train",
                     "--model",
                     model,
                     "--data",
                     "synthetic",
                     "--batch",
                     batch,
                     "--steps",
                     steps,
                     "--lr",
                     "0.05",
                     "--momentum",
                     "0.9",
                     "--seed",
                     "1",
                     "--eval-samples",
                     "0",
                     "--save",
                     single,
                     "--json",
                     NULL};
    REQUIRE(ru_run(train, out, err, RUN_MS) == 0);
    train[9] = control_steps;
    train[19] = control;
    snprintf(out, sizeof out, "%s/control.out", dir);
    REQUIRE(ru_run(train, out, err, RUN_MS) == 0);

    int tensors = 0;
    snprintf(path2, sizeof path2, "%s/step-%d", ck, STEPS);
    double d = ru_ckpt_diff(path2, single, &tensors);
    CHECK_MSG(d >= 0 && d <= WEIGHT_TOL,
              "%s: interleaved, one agent per device, vs single device: "
              "%g over %d tensors",
              c->name, d, tensors);
    CHECK(tensors > 0);
    printf("  %s: %d agents, weights vs single device %.2e over %d tensors", c->name, c->devices, d,
           tensors);
    /* the comparison tells K steps from K-1 */
    d = ru_ckpt_diff(control, single, &tensors);
    printf(", %d vs %d steps %.2e\n", STEPS - 1, STEPS, d);
    CHECK_MSG(d > 100 * WEIGHT_TOL, "%s: %d and %d steps differ by only %g", c->name, STEPS - 1,
              STEPS, d);
}

static void test_mlp_v2_replicated(void)
{
    il_case c = {"v2-rep", "tests/data/run/il-v2-rep.json", "tests/data/run/tiny-mlp.json", 3, 64};
    run_case(&c);
}

static void test_mlp_v3(void)
{
    il_case c = {"v3", "tests/data/run/il-v3.json", "tests/data/run/tiny-mlp.json", 2, 64};
    run_case(&c);
}

static void test_gpt_v2(void)
{
    il_case c = {"gpt-v2", "tests/data/run/il-gpt-v2.json", "gpt-tiny", 2, 16};
    run_case(&c);
}

PT_TEST_MAIN({"mlp_v2_replicated", test_mlp_v2_replicated}, {"mlp_v3", test_mlp_v3},
             {"gpt_v2", test_gpt_v2})
