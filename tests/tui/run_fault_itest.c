/* An agent killed with SIGKILL in the middle of a run: the console notices
 * within the heartbeat bound, the run stops with a message naming the agent
 * and its stage, the other agents leave on their own and no process is left
 * behind; the last checkpoint is intact (every tensor's CRC) and a run
 * resumes from it. */
#include <sys/stat.h>

#include "tests/tui/run_util.h"
#include "tui/control/session.h"

#define DIR         "run_fault_itest.d"
#define RUN_MS      120000
#define MAX_WORKERS 8
/* What the console may take to notice and end the run: the heartbeat bound,
 * plus its wait for the other agents to leave, plus scheduling slack. */
#define NOTICE_BOUND_MS (PT_SESSION_MISSED_HEARTBEATS * PT_SESSION_HEARTBEAT_MS + 5000)

static void show(const char *path)
{
    char *text = NULL;
    pt_file_read(path, &text, NULL, NULL);
    fprintf(stderr, "--- %s:\n%s\n", path, text ? text : "(none)");
    free(text);
}

static int64_t latest_step(const char *ckdir)
{
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/latest", ckdir);
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return -1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *s = j ? cJSON_GetObjectItem(j, "step") : NULL;
    int64_t step = cJSON_IsNumber(s) ? (int64_t)s->valuedouble : -1;
    cJSON_Delete(j);
    return step;
}

static int alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno != ESRCH;
}

static void test_kill_agent(void)
{
    ru_fresh_dir(DIR);
    char model[1024], plan[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-b.json"));
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model, "--batch", "16", "--out",
        DIR "/profile.json",       "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, DIR "/profile.out", DIR "/profile.err", RUN_MS) == 0);
    ru_argv run;
    ru_run_argv(&run, model, DIR "/run", "--plan", plan, "--iters", "1000000", "--checkpoint-dir",
                DIR "/ck", "--checkpoint-every", "40", "--profile", DIR "/profile.json",
                "--headless", NULL);
    pid_t console = ru_start(run.v, DIR "/run.out", DIR "/run.err");
    REQUIRE(console > 0);

    /* wait for two committed checkpoints, so the run is well under way */
    pid_t pids[MAX_WORKERS] = {0};
    int n = 0;
    int64_t t0 = ru_now_ms();
    while (ru_now_ms() - t0 < RUN_MS && latest_step(DIR "/ck") < 80 &&
           waitpid(console, NULL, WNOHANG) == 0) {
        struct timespec ts = {0, 50 * RU_NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    char names[MAX_WORKERS][RU_NAME_MAX];
    n = ru_plan_workers(DIR "/run/run.ndjson", names, pids, MAX_WORKERS);
    int64_t before = latest_step(DIR "/ck");
    int all_alive = n == 4; /* plan B has four stage replicas */
    for (int w = 0; w < n; w++)
        all_alive &= alive(pids[w]);
    if (!all_alive || before < 80) {
        show(DIR "/run.err");
        kill(console, SIGTERM);
        ru_wait(console, RUN_MS, NULL);
    }
    REQUIRE(all_alive && before >= 80);

    /* worker 2 runs stage 1 (plan B: stage 0 has replicas 0 and 1) */
    REQUIRE(kill(pids[2], SIGKILL) == 0);
    int64_t took = 0;
    int status = ru_wait(console, NOTICE_BOUND_MS, &took);
    CHECK_MSG(status == 1, "pipetop run exit status %d", status);
    CHECK_MSG(took < NOTICE_BOUND_MS, "took %lld ms", (long long)took);
    char *err = NULL;
    pt_file_read(DIR "/run.err", &err, NULL, NULL);
    char said[RU_NAME_MAX + 64];
    snprintf(said, sizeof said, "agent %s (stage 1, replica 0", names[2]);
    CHECK_STR_CONTAINS(err, said);
    CHECK_STR_CONTAINS(err, "signal 9");
    CHECK_STR_CONTAINS(err, "last checkpoint");
    free(err);
    cJSON *last = ru_last_json(DIR "/run.out");
    CHECK(last && !strcmp(ru_str(last, "event"), "failed"));
    CHECK_STR_CONTAINS(ru_str(last, "reason"), names[2]);
    cJSON_Delete(last);

    /* nobody left behind, and the others left because the console said so */
    for (int w = 0; w < n; w++)
        CHECK_MSG(!alive(pids[w]), "agent %s (pid %d) is still running", names[w], (int)pids[w]);
    for (int w = 0; w < n; w++) {
        if (w == 2)
            continue;
        char path[256], *log = NULL;
        snprintf(path, sizeof path, DIR "/run/agent-%s.log", names[w]);
        pt_file_read(path, &log, NULL, NULL);
        CHECK_STR_CONTAINS(log, "the console said bye");
        free(log);
    }

    /* the last checkpoint is whole: it loads, every tensor's CRC holds */
    int64_t step = latest_step(DIR "/ck");
    CHECK(step >= before && step % 40 == 0);
    char sd[256];
    snprintf(sd, sizeof sd, DIR "/ck/step-%lld", (long long)step);
    int tensors = 0;
    double d = ru_ckpt_diff(sd, sd, &tensors);
    CHECK_MSG(d == 0 && tensors == 16, "checkpoint %s: diff %g, %d tensors", sd, d, tensors);

    /* and a run resumes from it, under plan A, and goes on from that step */
    char plan_a[1024], step_s[32];
    snprintf(plan_a, sizeof plan_a, "%s", pt_test_path("tests/data/run/plan-a.json"));
    snprintf(step_s, sizeof step_s, "%lld", (long long)step);
    ru_argv resume;
    ru_run_argv(&resume, model, DIR "/run2", "--plan", plan_a, "--iters", "3", "--resume",
                DIR "/ck", "--profile", DIR "/profile.json", NULL);
    CHECK(ru_run(resume.v, DIR "/run2.out", DIR "/run2.err", RUN_MS) == 0);
    double loss[3];
    int ordered = 0;
    CHECK(ru_step_losses(DIR "/run2.out", step, loss, 3, &ordered) == 3 && ordered);
    /* into its own run folder: the folder it resumed from is left as it was */
    CHECK(latest_step(DIR "/run2/ckpt") == step + 3);
    CHECK(latest_step(DIR "/ck") == step);
}

/* An agent that stops answering without its process ending (SIGSTOP) is a
 * stall, not a death: tests/tui/run_stall_itest.c (below and beyond the
 * stall bound). */

PT_TEST_MAIN({"kill_agent", test_kill_agent})
