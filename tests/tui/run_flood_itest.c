/* A keyless flood cannot stop a keyed run (issue 25, item 1): a console
 * limited to 1,024 descriptors (as `ulimit -n 1024`) trains a 2-stage run
 * with per-run keys while 4,000 TCP connections to its control port are
 * opened and never speak. The run trains on, commits every checkpoint and
 * stops at a step on ^C with a checkpoint there (the commit gets the descriptors held in reserve; a
 * handshake that never comes is ended after PT_SESSION_HANDSHAKE_MS), and its weights equal those
 * of the same run undisturbed. */
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "tests/tui/run_util.h"

#define TDIR        "run_flood_itest.d"
#define RUN_MS      240000
#define FLOOD       4000
#define CONSOLE_FDS 1024
#define AFTER_FLOOD 30 /* steps the run goes on once the flood is in */

/* pipetop run with RLIMIT_NOFILE soft = hard = CONSOLE_FDS. */
static pid_t start_limited(char *const argv[], const char *out, const char *err)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = {CONSOLE_FDS, CONSOLE_FDS};
        setrlimit(RLIMIT_NOFILE, &r);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o >= 0)
            dup2(o, STDOUT_FILENO);
        if (e >= 0)
            dup2(e, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* The port of "tcp://127.0.0.1:PORT", or 0. */
static int port_of(const char *ep)
{
    const char *colon = strrchr(ep, ':');
    return colon ? atoi(colon + 1) : 0;
}

/* Opens n TCP connections to port (non-blocking connects, never a byte
 * sent) into fds; returns how many connect() calls did not fail at once. */
static int flood(int port, int *fds, int n)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = 0;
    for (int k = 0; k < n; k++) {
        fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[k] < 0)
            continue;
        if (connect(fds[k], (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS)
            ok++;
    }
    return ok;
}

/* Descriptors process pid holds now (its /proc/PID/fd entries). */
static int open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 2;
}

static void test_flood(void)
{
    ru_fresh_dir(TDIR);
    struct rlimit mine = {FLOOD + 256, FLOOD + 256};
    REQUIRE(setrlimit(RLIMIT_NOFILE, &mine) == 0 || getuid() != 0);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run", "--stages", "2", "--schedule", "gpipe", "--microbatches",
                "2", "--iters", "1000000", "--checkpoint-every", "10", "--checkpoint-dir",
                TDIR "/ck", "--control-bind", "tcp://127.0.0.1:*", NULL);
    pid_t console = start_limited(run.v, TDIR "/run.out", TDIR "/run.err");
    REQUIRE(console > 0);
    char ctl[256] = "", tel[256] = "";
    REQUIRE(ru_wait_endpoints(TDIR "/run/run.ndjson", ctl, tel, sizeof ctl, RUN_MS));
    int port = port_of(ctl);
    REQUIRE(port > 0);
    /* once it trains: its first checkpoint is still to come */
    int64_t t0 = ru_now_ms();
    while (ru_steps_seen(TDIR "/run.out") < 2 && ru_now_ms() - t0 < ru_budget_ms(RUN_MS))
        usleep(5000);
    REQUIRE(ru_steps_seen(TDIR "/run.out") >= 2);
    static int fds[FLOOD];
    int opened = flood(port, fds, FLOOD);
    CHECK_MSG(opened >= CONSOLE_FDS, "only %d of %d connections started", opened, FLOOD);
    /* the attack is real: the console's descriptors run out */
    int most = 0;
    t0 = ru_now_ms();
    while (most < CONSOLE_FDS / 2 && ru_now_ms() - t0 < 10000) {
        int n = open_fds(console);
        most = n > most ? n : most;
        usleep(10000);
    }
    printf("the flood: %d connections started, the console held up to %d descriptors of %d\n",
           opened, most, CONSOLE_FDS);
    CHECK_MSG(most >= CONSOLE_FDS / 2, "the console held at most %d of its %d descriptors", most,
              CONSOLE_FDS);
    /* it trains on through the flood, then stops at a step on ^C (a run
     * of fixed length could end before the flood reached it) */
    int at_flood = ru_steps_seen(TDIR "/run.out");
    t0 = ru_now_ms();
    while (ru_steps_seen(TDIR "/run.out") < at_flood + AFTER_FLOOD &&
           ru_now_ms() - t0 < ru_budget_ms(RUN_MS) && kill(console, 0) == 0)
        usleep(5000);
    CHECK_MSG(ru_steps_seen(TDIR "/run.out") >= at_flood + AFTER_FLOOD,
              "%d steps after the flood began, want %d", ru_steps_seen(TDIR "/run.out") - at_flood,
              AFTER_FLOOD);
    kill(console, SIGINT);
    int st = ru_wait(console, ru_budget_ms(RUN_MS), NULL);
    for (int k = 0; k < FLOOD; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    CHECK_MSG(st == 128 + SIGINT, "pipetop run under the flood: exit %d (want %d, ^C)", st,
              128 + SIGINT);
    if (st != 128 + SIGINT)
        ru_show_tail("pipetop run", TDIR "/run.err");
    /* the checkpoint it stopped with equals the same run, undisturbed, to
     * that step */
    long step = -1;
    FILE *f = fopen(TDIR "/ck/latest", "r");
    char text[512] = "";
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    const char *at = strstr(text, "\"step\":");
    if (at)
        step = strtol(at + 7, NULL, 10);
    CHECK_MSG(step > at_flood, "latest checkpoint step %ld, the flood began at step %d", step,
              at_flood);
    REQUIRE(step > at_flood);
    char iters[32];
    snprintf(iters, sizeof iters, "%ld", step);
    ru_argv ref;
    ru_run_argv(&ref, model, TDIR "/ref", "--stages", "2", "--schedule", "gpipe", "--microbatches",
                "2", "--iters", iters, "--checkpoint-every", "10", "--checkpoint-dir",
                TDIR "/ref-ck", NULL);
    REQUIRE(ru_run(ref.v, TDIR "/ref.out", TDIR "/ref.err", ru_budget_ms(RUN_MS)) == 0);
    char a[300], b[300];
    snprintf(a, sizeof a, TDIR "/ck/step-%ld", step);
    snprintf(b, sizeof b, TDIR "/ref-ck/step-%ld", step);
    int tensors = 0;
    double diff = ru_ckpt_diff(a, b, &tensors);
    CHECK_MSG(diff == 0 && tensors > 0,
              "weights after the flood: relative difference %g over %d tensors at step %ld", diff,
              tensors, step);
}

PT_TEST_MAIN({"flood", test_flood})
