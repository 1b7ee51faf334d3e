/* `pipetop run --resume DIR --plan NEW`: 4 steps under plan A (2 stages,
 * gpipe), checkpointed, then 4 more under plan B (3 stages, the first
 * replicated twice, the second recomputing, dapple policy B) must give the
 * weights, optimizer state and losses of 8 uninterrupted steps under plan A
 * — and both must equal single-device training (`pipetop train`) with the
 * same global batch, seed and data order, since synchronous schedules are
 * single-device training (DESIGN.md). No step is lost or repeated. Each
 * agent under plan B connects to the peers it exchanges messages with and
 * no other (its stage's replicas, the ends of its sends and receives). */
#include <glob.h>
#include <sys/stat.h>

#include "tests/tui/run_util.h"

#define DIR        "run_resume_itest.d"
#define RUN_MS     120000
#define STEPS_A    4
#define STEPS_ALL  8
#define WEIGHT_TOL 1e-5
#define LOSS_TOL   1e-5

static char *model(void)
{
    static char path[1024]; /* pt_test_path's buffers are reused */
    snprintf(path, sizeof path, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    return path;
}

static int run_plan(const char *plan, const char *iters, const char *ckdir, const char *resume,
                    const char *name)
{
    char out[256], err[256], rd[256];
    snprintf(out, sizeof out, DIR "/%s.out", name);
    snprintf(err, sizeof err, DIR "/%s.err", name);
    snprintf(rd, sizeof rd, DIR "/%s.run", name);
    char *argv[32];
    int k = 0;
    argv[k++] = (char *)ru_bin("pipetop");
    argv[k++] = "run";
    argv[k++] = "--plan";
    argv[k++] = (char *)plan;
    argv[k++] = "--model";
    argv[k++] = model();
    argv[k++] = "--data";
    argv[k++] = "synthetic";
    argv[k++] = "--iters";
    argv[k++] = (char *)iters;
    argv[k++] = "--checkpoint-dir";
    argv[k++] = (char *)ckdir;
    argv[k++] = "--profile";
    argv[k++] = DIR "/profile.json";
    argv[k++] = "--run-dir";
    argv[k++] = rd;
    argv[k++] = "--json";
    if (resume) {
        argv[k++] = "--resume";
        argv[k++] = (char *)resume;
    }
    argv[k] = NULL;
    int st = ru_run(argv, out, err, RUN_MS);
    if (st != 0) {
        char *text = NULL;
        pt_file_read(err, &text, NULL, NULL);
        fprintf(stderr, "%s: exit %d: %s\n", name, st, text ? text : "");
        free(text);
    }
    return st;
}

/* The peers each agent of run folder dir says it wired to ("wired to K of
 * N peers" in its log), as a count of agents per K: per[K]. */
static void wired_peers(const char *dir, int *per, int cap)
{
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/agent-*.log", dir);
    glob_t g;
    REQUIRE(glob(pattern, 0, NULL, &g) == 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *text = NULL;
        CHECK(pt_file_read(g.gl_pathv[i], &text, NULL, NULL) == 0);
        const char *at = text ? strstr(text, "wired to ") : NULL;
        int k = -1, n = -1;
        CHECK_MSG(at && sscanf(at, "wired to %d of %d peers", &k, &n) == 2 && k >= 0 && k < cap,
                  "%s: no \"wired to K of N peers\"", g.gl_pathv[i]);
        if (k >= 0 && k < cap)
            per[k]++;
        free(text);
    }
    globfree(&g);
}

static void test_resume_under_new_plan(void)
{
    ru_fresh_dir(DIR);
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model(), "--batch", "16", "--out",
        DIR "/profile.json",       "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, DIR "/profile.out", DIR "/profile.err", RUN_MS) == 0);
    char plan_a[1024], plan_b[1024];
    snprintf(plan_a, sizeof plan_a, "%s", pt_test_path("tests/data/run/plan-a.json"));
    snprintf(plan_b, sizeof plan_b, "%s", pt_test_path("tests/data/run/plan-b.json"));

    REQUIRE(run_plan(plan_a, "4", DIR "/ck-a", NULL, "a") == 0);
    REQUIRE(run_plan(plan_b, "4", DIR "/ck-b", DIR "/ck-a", "b") == 0);
    REQUIRE(run_plan(plan_a, "8", DIR "/ck-full", NULL, "full") == 0);

    /* steps: a 0..3, b 4..7 (none lost, none repeated), full 0..7 */
    double la[STEPS_ALL], lb[STEPS_ALL], lf[STEPS_ALL];
    int ordered;
    CHECK(ru_step_losses(DIR "/a.out", 0, la, STEPS_ALL, &ordered) == STEPS_A && ordered);
    CHECK(ru_step_losses(DIR "/b.out", STEPS_A, lb, STEPS_ALL, &ordered) == STEPS_ALL - STEPS_A &&
          ordered);
    CHECK(ru_step_losses(DIR "/full.out", 0, lf, STEPS_ALL, &ordered) == STEPS_ALL && ordered);
    for (int k = 0; k < STEPS_A; k++)
        CHECK_NEAR(la[k], lf[k], LOSS_TOL * fabs(lf[k]));
    for (int k = 0; k < STEPS_ALL - STEPS_A; k++)
        CHECK_NEAR(lb[k], lf[STEPS_A + k], LOSS_TOL * fabs(lf[STEPS_A + k]));
    /* the loss moved: the comparison above is not between constants */
    CHECK(fabs(lf[STEPS_ALL - 1] - lf[0]) > 0.05);

    /* plan B's workers: s0r0 and s0r1 (all-reduce together, each sends to
     * s1), s1 (from both, to s2), s2: 2, 2, 3 and 1 of 3 peers */
    int per[4] = {0};
    wired_peers(DIR "/b.run", per, 4);
    CHECK_MSG(per[0] == 0 && per[1] == 1 && per[2] == 2 && per[3] == 1,
              "agents wired to 0..3 peers: %d %d %d %d (want 0 1 2 1)", per[0], per[1], per[2],
              per[3]);

    cJSON *sb = ru_last_json(DIR "/b.out");
    REQUIRE(sb);
    CHECK(!strcmp(ru_str(sb, "event"), "summary"));
    CHECK(cJSON_GetObjectItem(sb, "first_step")->valuedouble == STEPS_A);
    CHECK(cJSON_GetObjectItem(sb, "checkpoint_step")->valuedouble == STEPS_ALL);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sb, "stages")) == 4); /* plan B's replicas */
    cJSON_Delete(sb);

    /* weights and momentum after 8 steps */
    int tensors = 0;
    double d = ru_ckpt_diff(DIR "/ck-b/step-8", DIR "/ck-full/step-8", &tensors);
    CHECK_MSG(d >= 0 && d <= WEIGHT_TOL, "resumed vs uninterrupted: %g over %d tensors", d,
              tensors);
    CHECK(tensors == 16); /* 4 linear layers x (weight, bias) x (value, momentum) */
    /* the same comparison tells 4 steps from 8 */
    d = ru_ckpt_diff(DIR "/ck-a/step-4", DIR "/ck-full/step-8", &tensors);
    CHECK_MSG(d > 1e-3, "step 4 vs step 8 differ by only %g", d);

    /* single-device training on the same global batch (16 x 4), seed and order */
    char *train[] = {(char *)ru_bin("pipetop"),
                     "train",
                     "--model",
                     model(),
                     "--data",
                     "synthetic",
                     "--batch",
                     "64",
                     "--steps",
                     "8",
                     "--lr",
                     "0.05",
                     "--momentum",
                     "0.9",
                     "--seed",
                     "1",
                     "--eval-samples",
                     "0",
                     "--save",
                     DIR "/single",
                     "--json",
                     NULL};
    REQUIRE(ru_run(train, DIR "/single.out", DIR "/single.err", RUN_MS) == 0);
    d = ru_ckpt_diff(DIR "/ck-full/step-8", DIR "/single", &tensors);
    CHECK_MSG(d >= 0 && d <= WEIGHT_TOL, "pipelined vs single device: %g", d);
    d = ru_ckpt_diff(DIR "/ck-b/step-8", DIR "/single", &tensors);
    CHECK_MSG(d >= 0 && d <= WEIGHT_TOL, "resumed under plan B vs single device: %g", d);
}

PT_TEST_MAIN({"resume_under_new_plan", test_resume_under_new_plan})
