/* Faults that lose nothing, against a real `pipetop run` (issue 13):
 * - SIGTERM: the run stops at one step with a committed checkpoint there and
 *   exits non-zero (128 + 15), saying so;
 * - one agent stopped (SIGSTOP) for 5 s, below the stall bound: the pipeline
 *   pauses (no step completes meanwhile) and goes on when it is continued;
 * - one agent stopped beyond the stall bound: the run stops naming it;
 * - a resume of an older step into the same folder is refused (`latest`
 *   never moves back).
 * Each time no agent process is left, no partial checkpoint folder, and the
 * last checkpoint resumes to the weights of an uninterrupted run. */
#include "tests/tui/fault_util.h"
#include "tui/control/session.h"

#define TDIR "run_stall_itest.d"
/* The stop of the short stall, and a stall bound well above it. */
#define SHORT_STALL_MS     5000
#define SHORT_BOUND_MS     20000
#define LONG_BOUND_MS      5000
#define HEARTBEAT_BOUND_MS (PT_SESSION_MISSED_HEARTBEATS * PT_SESSION_HEARTBEAT_MS)
#define CKPT_EVERY         "20"
#define EXIT_SIGTERM       (128 + SIGTERM)
/* The console's wait for agents to leave after bye (tui/control/run.h PT_RUN_EXIT_MS)
 * and scheduling slack. */
#define LEAVE_MS 15000

static void check_nothing_left(const pid_t *pids, int n, const char *ckdir)
{
    for (int w = 0; w < n; w++)
        CHECK_MSG(!fu_alive(pids[w]), "agent of worker %d (pid %d) is still running", w,
                  (int)pids[w]);
    CHECK(fu_partial_folders(ckdir) == 0);
}

static void test_sigterm(void)
{
    ru_fresh_dir(TDIR "/term");
    REQUIRE(fu_profile(TDIR) == 0);
    const char *extra[] = {"--checkpoint-every", CKPT_EVERY, NULL};
    pid_t console = fu_start(TDIR, TDIR "/term/run", TDIR "/term/ck", "1000000", TDIR "/term/out",
                             TDIR "/term/err", extra);
    REQUIRE(console > 0);
    pid_t pids[FU_MAX_AGENTS];
    REQUIRE(fu_wait_agents(TDIR "/term/run/run.ndjson", pids, NULL, console, FU_RUN_MS));
    REQUIRE(fu_wait_latest(TDIR "/term/ck", 40, console, FU_RUN_MS));
    REQUIRE(kill(console, SIGTERM) == 0);
    int status = ru_wait(console, FU_RUN_MS, NULL);
    CHECK_MSG(status == EXIT_SIGTERM, "exit status %d", status);
    char *err = NULL;
    pt_file_read(TDIR "/term/err", &err, NULL, NULL);
    CHECK_STR_CONTAINS(err, "interrupted by SIGTERM: stopped at step");
    free(err);
    /* the stop's checkpoint is at the step it stopped at, and committed */
    cJSON *last = ru_last_json(TDIR "/term/out");
    CHECK(last && !strcmp(ru_str(last, "event"), "summary"));
    CHECK(!strcmp(ru_str(last, "interrupted"), "SIGTERM"));
    const cJSON *cs = last ? cJSON_GetObjectItem(last, "checkpoint_step") : NULL;
    const cJSON *ls = last ? cJSON_GetObjectItem(last, "last_step") : NULL;
    CHECK(cJSON_IsNumber(cs) && (int64_t)cs->valuedouble == fu_latest(TDIR "/term/ck"));
    CHECK(cJSON_IsNumber(ls) && cJSON_IsNumber(cs) && ls->valuedouble + 1 == cs->valuedouble);
    cJSON_Delete(last);
    check_nothing_left(pids, 2, TDIR "/term/ck");
    double d = fu_resume_diff(TDIR, TDIR "/term", "resume", TDIR "/term/ck");
    CHECK_MSG(d >= 0 && d <= FU_WEIGHT_TOL, "resumed vs uninterrupted: %g", d);

    /* an older kept step resumed into the same folder would move latest
     * back: refused before any agent starts */
    int64_t latest = fu_latest(TDIR "/term/ck");
    char older[512];
    DIR *dir = opendir(TDIR "/term/ck");
    older[0] = '\0';
    for (struct dirent *de; dir && (de = readdir(dir));)
        if (!strncmp(de->d_name, "step-", 5) && atoll(de->d_name + 5) < latest)
            snprintf(older, sizeof older, TDIR "/term/ck/%s", de->d_name);
    if (dir)
        closedir(dir);
    REQUIRE(older[0]);
    const char *back[] = {"--resume", older, NULL};
    status = ru_wait(fu_start(TDIR, TDIR "/term/back", TDIR "/term/ck", "3", TDIR "/term/back.out",
                              TDIR "/term/back.err", back),
                     FU_RUN_MS, NULL);
    CHECK(status == 1);
    pt_file_read(TDIR "/term/back.err", &err, NULL, NULL);
    CHECK_STR_CONTAINS(err, "refused before starting any agent");
    CHECK_STR_CONTAINS(err, "newer than the resume step");
    free(err);
    CHECK(fu_latest(TDIR "/term/ck") == latest);
}

/* Stops agent w (w1: the last stage, whose losses make the step lines) for
 * a while below the bound: stalled, then resumed, and no step finished in
 * between; the run then goes on and a SIGTERM ends it cleanly. */
static void test_short_stall(void)
{
    ru_fresh_dir(TDIR "/short");
    REQUIRE(fu_profile(TDIR) == 0);
    char bound[32];
    snprintf(bound, sizeof bound, "%d", SHORT_BOUND_MS);
    const char *extra[] = {"--checkpoint-every", CKPT_EVERY, "--stall-ms", bound, NULL};
    pid_t console = fu_start(TDIR, TDIR "/short/run", TDIR "/short/ck", "1000000",
                             TDIR "/short/out", TDIR "/short/err", extra);
    REQUIRE(console > 0);
    pid_t pids[FU_MAX_AGENTS];
    char names[FU_MAX_AGENTS][RU_NAME_MAX];
    REQUIRE(fu_wait_agents(TDIR "/short/run/run.ndjson", pids, names, console, FU_RUN_MS));
    const char *w1 = names[1]; /* worker 1's agent, by the name the run gave it */
    REQUIRE(fu_wait_latest(TDIR "/short/ck", 40, console, FU_RUN_MS));
    REQUIRE(kill(pids[1], SIGSTOP) == 0);
    int64_t t0 = ru_now_ms();
    /* the console tells the stall after the heartbeat bound */
    CHECK(fu_wait_event(TDIR "/short/out", "stalled", w1, console, SHORT_STALL_MS + LEAVE_MS));
    int64_t told = ru_now_ms() - t0;
    CHECK_MSG(told >= HEARTBEAT_BOUND_MS - PT_SESSION_HEARTBEAT_MS, "stalled after %lld ms",
              (long long)told);
    /* the fault itself lasts SHORT_STALL_MS */
    while (ru_now_ms() - t0 < SHORT_STALL_MS)
        fu_nap();
    int steps_at_stall = 0;
    fu_count_event(TDIR "/short/out", "stalled", w1, &steps_at_stall);
    /* the steps printed by now, while w1 is still stopped (counting up to
     * the "resumed" line would also count steps w1 finished after SIGCONT,
     * before the console heard it again) */
    double loss[1];
    int ordered;
    int steps_stopped = ru_step_losses(TDIR "/short/out", 0, loss, 0, &ordered);
    REQUIRE(kill(pids[1], SIGCONT) == 0);
    CHECK(fu_wait_event(TDIR "/short/out", "resumed", w1, console, FU_RUN_MS));
    /* paused: no step finished while w1 was stopped (one may have been on
     * its way when the stall was told) */
    CHECK_MSG(steps_stopped - steps_at_stall <= 1, "%d steps finished during the stall",
              steps_stopped - steps_at_stall);
    CHECK_MSG(waitpid(console, NULL, WNOHANG) == 0, "the run ended during a stall below the bound");
    /* and it goes on: a checkpoint past the one before the stall */
    int64_t before = fu_latest(TDIR "/short/ck");
    CHECK(fu_wait_latest(TDIR "/short/ck", before + 40, console, FU_RUN_MS));
    CHECK(kill(console, SIGTERM) == 0);
    int status = ru_wait(console, FU_RUN_MS, NULL);
    CHECK_MSG(status == EXIT_SIGTERM, "exit status %d", status);
    if (status != EXIT_SIGTERM)
        fu_show(TDIR "/short/err");
    check_nothing_left(pids, 2, TDIR "/short/ck");
    double d = fu_resume_diff(TDIR, TDIR "/short", "resume", TDIR "/short/ck");
    CHECK_MSG(d >= 0 && d <= FU_WEIGHT_TOL, "resumed vs uninterrupted: %g", d);
}

/* Stopped beyond the bound: the run stops, naming the agent, after the
 * bound and not long after; the stopped agent is killed. */
static void test_long_stall(void)
{
    ru_fresh_dir(TDIR "/long");
    REQUIRE(fu_profile(TDIR) == 0);
    char bound[32];
    snprintf(bound, sizeof bound, "%d", LONG_BOUND_MS);
    const char *extra[] = {"--checkpoint-every", CKPT_EVERY, "--stall-ms", bound, NULL};
    pid_t console = fu_start(TDIR, TDIR "/long/run", TDIR "/long/ck", "1000000", TDIR "/long/out",
                             TDIR "/long/err", extra);
    REQUIRE(console > 0);
    pid_t pids[FU_MAX_AGENTS];
    char names[FU_MAX_AGENTS][RU_NAME_MAX];
    REQUIRE(fu_wait_agents(TDIR "/long/run/run.ndjson", pids, names, console, FU_RUN_MS));
    REQUIRE(fu_wait_latest(TDIR "/long/ck", 40, console, FU_RUN_MS));
    REQUIRE(kill(pids[1], SIGSTOP) == 0);
    int64_t took = 0;
    int status = ru_wait(console, LONG_BOUND_MS + LEAVE_MS, &took);
    CHECK_MSG(status == 1, "exit status %d", status);
    CHECK_MSG(took >= LONG_BOUND_MS - PT_SESSION_HEARTBEAT_MS, "stopped after %lld ms",
              (long long)took);
    char *err = NULL;
    pt_file_read(TDIR "/long/err", &err, NULL, NULL);
    char said[RU_NAME_MAX + 64];
    snprintf(said, sizeof said, "stopped: agent %s (stage 1, replica 0", names[1]);
    CHECK_STR_CONTAINS(err, said);
    CHECK_STR_CONTAINS(err, "beyond the stall bound of 5.0 s");
    CHECK_STR_CONTAINS(err, "last checkpoint");
    free(err);
    cJSON *last = ru_last_json(TDIR "/long/out");
    CHECK(last && !strcmp(ru_str(last, "event"), "failed"));
    CHECK_STR_CONTAINS(ru_str(last, "reason"), names[1]);
    cJSON_Delete(last);
    check_nothing_left(pids, 2, TDIR "/long/ck");
    if (fu_alive(pids[1])) /* after a failed check: not left behind by the test either */
        kill(pids[1], SIGKILL);
    double d = fu_resume_diff(TDIR, TDIR "/long", "resume", TDIR "/long/ck");
    CHECK_MSG(d >= 0 && d <= FU_WEIGHT_TOL, "resumed vs uninterrupted: %g", d);
}

PT_TEST_MAIN({"sigterm", test_sigterm}, {"short_stall", test_short_stall},
             {"long_stall", test_long_stall})
