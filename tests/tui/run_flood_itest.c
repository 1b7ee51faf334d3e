/* A keyless flood cannot stop a keyed run (issue 25, item 1): a console
 * limited to 1,024 descriptors (as `ulimit -n 1024`) trains a 2-stage run
 * with per-run keys while 4,000 TCP connections to its control port are
 * opened and never speak. The run trains to its end and commits every
 * checkpoint (the commit gets the descriptors held in reserve; a handshake
 * that never comes is ended after PT_SESSION_HANDSHAKE_MS), and its weights
 * equal those of the same run undisturbed. */
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "tests/tui/run_util.h"

#define TDIR        "run_flood_itest.d"
#define RUN_MS      240000
#define FLOOD       4000
#define CONSOLE_FDS 1024
#define ITERS       "60"
#define ITERS_N     60

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
    ru_argv ref;
    ru_run_argv(&ref, model, TDIR "/ref", "--stages", "2", "--schedule", "gpipe", "--microbatches",
                "2", "--iters", ITERS, "--checkpoint-every", "10", "--checkpoint-dir",
                TDIR "/ref-ck", NULL);
    REQUIRE(ru_run(ref.v, TDIR "/ref.out", TDIR "/ref.err", ru_budget_ms(RUN_MS)) == 0);

    ru_argv run;
    ru_run_argv(&run, model, TDIR "/run", "--stages", "2", "--schedule", "gpipe", "--microbatches",
                "2", "--iters", ITERS, "--checkpoint-every", "10", "--checkpoint-dir", TDIR "/ck",
                "--control-bind", "tcp://127.0.0.1:*", NULL);
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
    int st = ru_wait(console, ru_budget_ms(RUN_MS), NULL);
    for (int k = 0; k < FLOOD; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    CHECK_MSG(st == 0, "pipetop run under the flood: exit %d", st);
    if (st != 0)
        ru_show_tail("pipetop run", TDIR "/run.err");
    cJSON *s = ru_last_json(TDIR "/run.out");
    const cJSON *last = s ? cJSON_GetObjectItem(s, "last_step") : NULL;
    CHECK_MSG(cJSON_IsNumber(last) && last->valuedouble == ITERS_N - 1, "last step %g",
              cJSON_IsNumber(last) ? last->valuedouble : -1);
    cJSON_Delete(s);
    char a[300], b[300];
    snprintf(a, sizeof a, TDIR "/ck/step-%d", ITERS_N);
    snprintf(b, sizeof b, TDIR "/ref-ck/step-%d", ITERS_N);
    int tensors = 0;
    double diff = ru_ckpt_diff(a, b, &tensors);
    CHECK_MSG(diff == 0 && tensors > 0,
              "weights after the flood: relative difference %g over %d "
              "tensors",
              diff, tensors);
}

PT_TEST_MAIN({"flood", test_flood})
