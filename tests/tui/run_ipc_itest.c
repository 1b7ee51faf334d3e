/* A local run's sockets (issue 13): `pipetop run` without --external binds
 * the console and its spawned agents' data sockets at ipc:// endpoints in
 * a folder of its own, mode 0700 and owned by the user, not on loopback tcp;
 * the folder is gone when the run ends: finished, stopped by SIGTERM or by
 * SIGINT. $XDG_RUNTIME_DIR points at a folder of the test's, so it can see
 * that nothing else is left there either. */
#include <dirent.h>
#include <sys/stat.h>

#include "tests/tui/run_util.h"

#define TDIR   "run_ipc_itest.d"
#define RUN_MS 120000

static char xdg[256], model[1024], plan[1024];

/* Entries of a folder besides . and .. (-1: cannot be read). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* The run's socket folder from its record's control endpoint, checked:
 * ipc:// in a folder of our $XDG_RUNTIME_DIR, mode 0700, ours; the
 * telemetry endpoint and the agents' data endpoints in the same folder, and
 * no tcp:// endpoint anywhere. */
static void check_sockets(const char *record, char *folder, size_t cap)
{
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(record, ctl, tel, sizeof ctl, RUN_MS));
    CHECK_MSG(!strncmp(ctl, "ipc://", 6), "control endpoint %s", ctl);
    snprintf(folder, cap, "%s", ctl + 6);
    char *slash = strrchr(folder, '/');
    REQUIRE(slash);
    *slash = '\0';
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s/pipetop-", xdg);
    CHECK_MSG(!strncmp(folder, prefix, strlen(prefix)), "socket folder %s", folder);
    struct stat st;
    REQUIRE(stat(folder, &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK_MSG((st.st_mode & 07777) == 0700, "socket folder mode %o", st.st_mode & 07777);
    CHECK(st.st_uid == getuid());
    char want[300];
    snprintf(want, sizeof want, "ipc://%s/", folder);
    CHECK_MSG(!strncmp(tel, want, strlen(want)), "telemetry endpoint %s", tel);
    /* both agents registered, each with a data endpoint in the folder */
    int64_t t0 = ru_now_ms();
    char *text = NULL;
    int data = 0;
    while (data < 2 && ru_now_ms() - t0 < RUN_MS) {
        free(text);
        text = NULL;
        pt_file_read(record, &text, NULL, NULL);
        char key[320];
        snprintf(key, sizeof key, "\"data_endpoint\":\"%s", want);
        data = 0;
        for (const char *p = text; p && (p = strstr(p, key)); p++)
            data++;
        usleep(20000);
    }
    CHECK_MSG(data >= 2, "%d data endpoints in %s", data, folder);
    CHECK(text && !strstr(text, "tcp://"));
    free(text);
}

static pid_t start_run(const char *tag, const char *iters)
{
    char dir[256], ck[256], out[256], err[256];
    snprintf(dir, sizeof dir, TDIR "/%s", tag);
    snprintf(ck, sizeof ck, TDIR "/%s-ck", tag);
    snprintf(out, sizeof out, TDIR "/%s.out", tag);
    snprintf(err, sizeof err, TDIR "/%s.err", tag);
    ru_argv run;
    ru_run_argv(&run, model, dir, "--plan", plan, "--iters", iters, "--profile",
                TDIR "/profile.json", "--checkpoint-dir", ck, NULL);
    return ru_start(run.v, out, err);
}

static void setup(void)
{
    ru_fresh_dir(TDIR);
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-a.json"));
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model, "--batch", "16", "--out",
        TDIR "/profile.json",      "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, TDIR "/profile.out", TDIR "/profile.err", RUN_MS) == 0);
    /* short and absolute: an ipc path must fit a sockaddr_un */
    snprintf(xdg, sizeof xdg, "/tmp/pt-ipc-itest-%ld", (long)getpid());
    REQUIRE(mkdir(xdg, 0700) == 0 || errno == EEXIST);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
}

/* Stopped by a signal while training: exit 128 + sig, folder gone. */
static void run_and_signal(const char *tag, int sig)
{
    pid_t console = start_run(tag, "1000000");
    REQUIRE(console > 0);
    char rec[256], out[256], folder[256] = "";
    snprintf(rec, sizeof rec, TDIR "/%s/run.ndjson", tag);
    snprintf(out, sizeof out, TDIR "/%s.out", tag);
    check_sockets(rec, folder, sizeof folder);
    int64_t t0 = ru_now_ms();
    while (ru_steps_seen(out) < 3 && ru_now_ms() - t0 < RUN_MS)
        usleep(20000);
    REQUIRE(ru_steps_seen(out) >= 3);
    kill(console, sig);
    int st = ru_wait(console, RUN_MS, NULL);
    CHECK_MSG(st == 128 + sig, "%s: exit status %d", tag, st);
    struct stat sb;
    CHECK_MSG(stat(folder, &sb) != 0 && errno == ENOENT, "%s: %s is still there", tag, folder);
    CHECK_MSG(entries(xdg) == 0, "%s: %d entries left in %s", tag, entries(xdg), xdg);
}

static void test_finished(void)
{
    setup();
    pid_t console = start_run("done", "200");
    REQUIRE(console > 0);
    char folder[256] = "";
    check_sockets(TDIR "/done/run.ndjson", folder, sizeof folder);
    int st = ru_wait(console, RUN_MS, NULL);
    CHECK_MSG(st == 0, "exit status %d", st);
    struct stat sb;
    CHECK_MSG(stat(folder, &sb) != 0 && errno == ENOENT, "%s is still there", folder);
    CHECK_MSG(entries(xdg) == 0, "%d entries left in %s", entries(xdg), xdg);
}

static void test_sigterm(void)
{
    run_and_signal("term", SIGTERM);
}

static void test_sigint(void)
{
    run_and_signal("int", SIGINT);
    rmdir(xdg);
}

PT_TEST_MAIN({"finished", test_finished}, {"sigterm", test_sigterm}, {"sigint", test_sigint})
