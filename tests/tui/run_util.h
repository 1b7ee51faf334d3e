/* Helpers for the `pipetop run` integration tests: run the real binaries
 * with a bound, read their JSON lines and compare per-layer checkpoints. */
#ifndef PT_TESTS_TUI_RUN_UTIL_H
#define PT_TESTS_TUI_RUN_UTIL_H

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "runtime/checkpoint.h"
#include "tests/test.h"

#define RU_NS_PER_MS 1000000LL

static inline int64_t ru_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / RU_NS_PER_MS;
}

/* A wait's bound that scales with the machine's load: base_ms times the
 * 1-minute load average per online CPU when that is above 1 (a load of 28 on
 * 2 cores gives 14x), times PT_TEST_TIME_SCALE when set. Only a hang meets
 * it: a wait ends at its event (a process exits, a line appears) first, so a
 * larger bound costs a passing test nothing. */
static inline int ru_budget_ms(int base_ms)
{
    double load = 0, scale = 1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(&load, 1) == 1 && cpus > 0 && load / (double)cpus > 1)
        scale = load / (double)cpus;
    const char *env = getenv("PT_TEST_TIME_SCALE");
    if (env && atof(env) > 0)
        scale *= atof(env);
    double ms = base_ms * scale;
    return ms >= INT32_MAX ? INT32_MAX : (int)ms;
}

/* Prints the last lines of a log to stderr under a heading: what a failing
 * check shows of the processes it ran. */
static inline void ru_show_tail(const char *what, const char *path)
{
    char cmd[1200];
    fprintf(stderr, "--- %s (%s), last lines:\n", what, path);
    fflush(stderr);
    snprintf(cmd, sizeof cmd, "tail -n 15 '%s' >&2", path);
    if (system(cmd) != 0)
        fprintf(stderr, "(unreadable)\n");
}

static inline const char *ru_bin(const char *name)
{
    static char buf[4][1024];
    static int slot;
    char *out = buf[slot++ % 4];
    const char *dir = getenv("PT_BUILD_DIR");
    snprintf(out, sizeof buf[0], "%s/%s", dir ? dir : ".", name);
    return out;
}

/* Removes a test's scratch folder from an earlier run (tests must not see
 * the checkpoints of the last one). */
static inline void ru_fresh_dir(const char *dir)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    pt_mkdir_p(dir, NULL);
}

/* The string member k of o, or "" (never NULL). */
static inline const char *ru_str(const cJSON *o, const char *k)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Starts argv (argv[0] a path) with stdout and stderr into files. */
static inline pid_t ru_start(char *const argv[], const char *out, const char *err)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o >= 0)
            dup2(o, STDOUT_FILENO);
        if (e >= 0)
            dup2(e, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Exit status within ms (128 + signal when killed by one; -1: still running
 * after ms, then killed). *took_ms (may be NULL) gets the wait. */
static inline int ru_wait(pid_t pid, int ms, int64_t *took_ms)
{
    int64_t t0 = ru_now_ms();
    int st;
    while (ru_now_ms() - t0 < ms) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (took_ms)
                *took_ms = ru_now_ms() - t0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        struct timespec ts = {0, 10 * RU_NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static inline int ru_run(char *const argv[], const char *out, const char *err, int ms)
{
    return ru_wait(ru_start(argv, out, err), ms, NULL);
}

/* A `pipetop run` command line: the base every run test starts from plus
 * its own flags. ru_run_argv fills a->v (what ru_start and ru_run take). */
#define RU_ARGV_MAX 48
typedef struct ru_argv {
    char bin[1024];
    char *v[RU_ARGV_MAX];
} ru_argv;

/* a->v = {pipetop, run, EXTRA..., --model model, --data synthetic,
 * --run-dir dir, --json}: EXTRA is the NULL-ended list of flags and values
 * after dir (strings that must outlive a). Returns a->v. */
static inline char *const *ru_run_argv(ru_argv *a, const char *model, const char *dir, ...)
{
    const char *tail[] = {"--model", model, "--data", "synthetic", "--run-dir", dir, "--json"};
    const int ntail = (int)(sizeof tail / sizeof tail[0]);
    int k = 0;
    snprintf(a->bin, sizeof a->bin, "%s", ru_bin("pipetop"));
    a->v[k++] = a->bin;
    a->v[k++] = "run";
    va_list ap;
    va_start(ap, dir);
    for (const char *s; (s = va_arg(ap, const char *));) {
        if (k >= RU_ARGV_MAX - ntail - 1) {
            fprintf(stderr, "ru_run_argv: more than %d flags; raise RU_ARGV_MAX\n", k);
            abort();
        }
        a->v[k++] = (char *)s;
    }
    va_end(ap);
    for (int j = 0; j < ntail; j++)
        a->v[k++] = (char *)tail[j];
    a->v[k] = NULL;
    return a->v;
}

/* The last line of a file parsed as JSON (NULL if none). */
static inline cJSON *ru_last_json(const char *path)
{
    char *text = NULL;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return NULL;
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n')
        text[--n] = '\0';
    char *line = strrchr(text, '\n');
    cJSON *j = cJSON_Parse(line ? line + 1 : text);
    free(text);
    return j;
}

/* Losses of the {"event":"step"} lines: loss[step - first] for steps in
 * [first, first + cap); returns how many lines there were, and sets
 * *in_order to whether their steps were first, first+1, ... */
static inline int ru_step_losses(const char *path, int64_t first, double *loss, int cap,
                                 int *in_order)
{
    char *text = NULL;
    *in_order = 1;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return 0;
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *ev = j ? cJSON_GetObjectItem(j, "event") : NULL;
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "step")) {
            int64_t step = (int64_t)cJSON_GetObjectItem(j, "step")->valuedouble;
            if (step != first + n)
                *in_order = 0;
            if (step >= first && step < first + cap)
                loss[step - first] = cJSON_GetObjectItem(j, "loss")->valuedouble;
            n++;
        }
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/* Largest per-tensor relative L2 difference between two checkpoint
 * folders over every tensor of a (weights and optimizer state), or -1 when
 * a tensor is missing or unreadable (CRC, size). *tensors counts them. */
static inline double ru_ckpt_diff(const char *a, const char *b, int *tensors)
{
    pt_ckpt_index *ia = NULL, *ib = NULL;
    pt_error err = {0};
    double worst = -1;
    *tensors = 0;
    if (pt_ckpt_index_load(a, &ia, &err) < 0 || pt_ckpt_index_load(b, &ib, &err) < 0) {
        fprintf(stderr, "ru_ckpt_diff: %s\n", err.msg);
        goto done;
    }
    worst = 0;
    for (int l = 0; l < ia->layer_count; l++) {
        const pt_ckpt_layer *la = &ia->layers[l];
        const pt_ckpt_layer *lb = pt_ckpt_index_find(ib, la->index);
        for (int t = 0; t < la->tensor_count; t++) {
            const pt_ckpt_tensor *ta = &la->tensors[t];
            const pt_ckpt_tensor *tb = lb ? pt_ckpt_layer_tensor(lb, ta->name) : NULL;
            if (!tb || tb->count != ta->count) {
                worst = -1;
                goto done;
            }
            float *x = malloc((size_t)ta->count * sizeof(float));
            float *y = malloc((size_t)ta->count * sizeof(float));
            if (!x || !y || pt_ckpt_read_tensor(a, ta, x, &err) < 0 ||
                pt_ckpt_read_tensor(b, tb, y, &err) < 0) {
                fprintf(stderr, "ru_ckpt_diff: %s\n", err.msg);
                free(x);
                free(y);
                worst = -1;
                goto done;
            }
            double num = 0, den = 0;
            for (int64_t i = 0; i < ta->count; i++) {
                num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
                den += (double)y[i] * y[i];
            }
            double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (rel > worst)
                worst = rel;
            (*tensors)++;
            free(x);
            free(y);
        }
    }
done:
    pt_ckpt_index_free(&ia);
    pt_ckpt_index_free(&ib);
    return worst;
}

/* The workers of the newest plan in a run record (its "plan" line's
 * workers: agent name and pid, worker by worker), so that tests find the
 * agents by the names the run gave them (random per run) rather than by
 * guessing. names (cap entries of RU_NAME_MAX) and pids may be NULL.
 * Returns how many workers (0: no plan yet; a line still being written is
 * skipped). */
#define RU_NAME_MAX 64
static inline int ru_plan_workers(const char *record, char (*names)[RU_NAME_MAX], pid_t *pids,
                                  int cap)
{
    char *text = NULL;
    for (int w = 0; w < cap; w++) {
        if (names)
            names[w][0] = '\0';
        if (pids)
            pids[w] = 0;
    }
    if (pt_file_read(record, &text, NULL, NULL) < 0)
        return 0;
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"kind\":\"plan\""))
            continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *ws = j ? cJSON_GetObjectItem(j, "workers") : NULL;
        if (!cJSON_IsArray(ws) || strcmp(ru_str(j, "kind"), "plan")) {
            cJSON_Delete(j);
            continue;
        }
        n = 0;
        const cJSON *w;
        cJSON_ArrayForEach(w, ws)
        {
            if (n >= cap)
                break;
            const cJSON *pid = cJSON_GetObjectItem(w, "pid");
            if (names)
                snprintf(names[n], RU_NAME_MAX, "%s", ru_str(w, "agent"));
            if (pids)
                pids[n] = cJSON_IsNumber(pid) ? (pid_t)pid->valuedouble : 0;
            n++;
        }
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/* The console's endpoints from the first (session) line of its run record:
 * 1 when both were there. */
static inline int ru_endpoints(const char *record, char *ctl, char *tel, size_t cap)
{
    char *text = NULL;
    if (pt_file_read(record, &text, NULL, NULL) < 0)
        return 0;
    char *nl = strchr(text, '\n');
    int ok = 0;
    if (nl) {
        *nl = '\0';
        cJSON *j = cJSON_Parse(text);
        snprintf(ctl, cap, "%s", ru_str(j, "control"));
        snprintf(tel, cap, "%s", ru_str(j, "telemetry"));
        ok = ctl[0] && tel[0];
        cJSON_Delete(j);
    }
    free(text);
    return ok;
}

/* Waits up to ms for the record's endpoints; 1 when found. */
static inline int ru_wait_endpoints(const char *record, char *ctl, char *tel, size_t cap, int ms)
{
    int64_t t0 = ru_now_ms();
    while (!ru_endpoints(record, ctl, tel, cap) && ru_now_ms() - t0 < ms) {
        struct timespec ts = {0, 20 * RU_NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    return ctl[0] && tel[0];
}

/* {"event":"step"} lines of a `pipetop run --json` output so far. */
static inline int ru_steps_seen(const char *out)
{
    double loss[1];
    int ordered;
    return ru_step_losses(out, 0, loss, 0, &ordered);
}

/* An agent started by hand (as on another host): every member but ctl,
 * tel, device and name may be NULL (not passed; out and err: /dev/null). */
typedef struct ru_agent {
    const char *ctl, *tel, *device, *name;
    const char *key, *server_key; /* --key, --server-key */
    const char *grace_ms;         /* --grace-ms */
    const char *root;             /* --checkpoint-root */
    const char *out, *err;
    const char *data_bind; /* --data-bind */
} ru_agent;

static inline pid_t ru_start_agent(const ru_agent *a)
{
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)ru_bin("pipetop-agent");
    const char *opt[][2] = {{"--console", a->ctl},
                            {"--telemetry", a->tel},
                            {"--device", a->device},
                            {"--name", a->name},
                            {"--key", a->key},
                            {"--server-key", a->server_key},
                            {"--grace-ms", a->grace_ms},
                            {"--checkpoint-root", a->root},
                            {"--data-bind", a->data_bind}};
    for (size_t j = 0; j < sizeof opt / sizeof opt[0]; j++)
        if (opt[j][1]) {
            argv[k++] = (char *)opt[j][0];
            argv[k++] = (char *)opt[j][1];
        }
    argv[k] = NULL;
    return ru_start(argv, a->out ? a->out : "/dev/null", a->err ? a->err : "/dev/null");
}

/* An undisturbed `pipetop run` of plan and model on synthetic data with
 * seed for iters steps (its profile given), checkpoints into ck, its run
 * folder dir, --json output to out/err: the reference an attacked or
 * faulted run's weights are compared with. Its exit status. */
static inline int ru_reference_run(const char *plan, const char *model, const char *seed,
                                   int64_t iters, const char *profile, const char *ck,
                                   const char *dir, const char *out, const char *err, int ms)
{
    char n[32];
    snprintf(n, sizeof n, "%lld", (long long)iters);
    ru_argv a;
    ru_run_argv(&a, model, dir, "--plan", plan, "--seed", seed, "--iters", n, "--profile", profile,
                "--checkpoint-dir", ck, NULL);
    return ru_run(a.v, out, err, ms);
}

#endif
