/* Helpers for the fault tests (run_stall_itest, run_diskfull_itest): start
 * a real `pipetop run` of the tiny MLP under plan A (2 stages, gpipe), wait
 * for what it says on stdout (JSON lines) or leaves in its checkpoint folder,
 * and check what every fault must leave: no agent process, no partial
 * checkpoint folder, and a last checkpoint that resumes to the weights of an
 * uninterrupted run. */
#ifndef PT_TESTS_TUI_FAULT_UTIL_H
#define PT_TESTS_TUI_FAULT_UTIL_H

#include <dirent.h>
#include <sys/stat.h>

#include "tests/tui/run_util.h"

#define FU_RUN_MS     120000
#define FU_POLL_MS    20
#define FU_MAX_AGENTS 8
#define FU_TAIL_STEPS 3    /* steps a resume check trains past the checkpoint */
#define FU_WEIGHT_TOL 1e-5 /* synchronous runs: the same up to float rounding */

static inline void fu_nap(void)
{
    struct timespec ts = {0, FU_POLL_MS * RU_NS_PER_MS};
    nanosleep(&ts, NULL);
}

static inline const char *fu_model(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    return path;
}

static inline const char *fu_plan(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s", pt_test_path("tests/data/run/plan-a.json"));
    return path;
}

/* Measures the profile the runs share into dir/profile.json (once per dir). */
static inline int fu_profile(const char *dir)
{
    char out[512], log[512], err[512];
    snprintf(out, sizeof out, "%s/profile.json", dir);
    struct stat st;
    if (stat(out, &st) == 0)
        return 0;
    snprintf(log, sizeof log, "%s/profile.out", dir);
    snprintf(err, sizeof err, "%s/profile.err", dir);
    char *argv[] = {(char *)ru_bin("pipetop"),
                    "profile",
                    "--model",
                    (char *)fu_model(),
                    "--batch",
                    "16",
                    "--out",
                    out,
                    "--repeats",
                    "2",
                    NULL};
    return ru_run(argv, log, err, FU_RUN_MS);
}

/* Starts `pipetop run --json --headless` of plan A with the shared profile,
 * its record in rundir, stdout/stderr in out/err; extra: more arguments
 * (NULL-terminated list, at most 16). */
static inline pid_t fu_start(const char *dir, const char *rundir, const char *ckdir,
                             const char *iters, const char *out, const char *err,
                             const char *const *extra)
{
    static char prof[512];
    snprintf(prof, sizeof prof, "%s/profile.json", dir);
    char *argv[48];
    int k = 0;
    const char *base[] = {ru_bin("pipetop"), "run",    "--plan",    fu_plan(), "--model",
                          fu_model(),        "--data", "synthetic", "--iters", iters,
                          "--profile",       prof,     "--run-dir", rundir,    "--json",
                          "--headless",      NULL};
    for (int i = 0; base[i]; i++)
        argv[k++] = (char *)base[i];
    if (ckdir) {
        argv[k++] = "--checkpoint-dir";
        argv[k++] = (char *)ckdir;
    }
    for (int i = 0; extra && extra[i] && k < 46; i++)
        argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    return ru_start(argv, out, err);
}

/* Step `latest` of a checkpoint folder names; -1 none. */
static inline int64_t fu_latest(const char *ckdir)
{
    int64_t step = -1;
    if (pt_ckpt_latest_load(ckdir, &step, NULL) < 0)
        return -1;
    return step;
}

/* Waits until latest >= step (1), the process ended (0) or ms passed (0). */
static inline int fu_wait_latest(const char *ckdir, int64_t step, pid_t pid, int ms)
{
    int64_t t0 = ru_now_ms();
    while (ru_now_ms() - t0 < ms) {
        if (fu_latest(ckdir) >= step)
            return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return 0;
        fu_nap();
    }
    return 0;
}

/* How many JSON lines of path have "event": ev (and "agent": agent when not
 * NULL); *steps_before (may be NULL) gets the number of "step" lines before
 * the first such line (-1 when there is none). */
static inline int fu_count_event(const char *path, const char *ev, const char *agent,
                                 int *steps_before)
{
    char *text = NULL;
    int n = 0, steps = 0;
    if (steps_before)
        *steps_before = -1;
    if (pt_file_read(path, &text, NULL, NULL) < 0)
        return 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const char *e = ru_str(j, "event");
        if (!strcmp(e, ev) && (!agent || !strcmp(ru_str(j, "agent"), agent))) {
            if (n == 0 && steps_before)
                *steps_before = steps;
            n++;
        }
        steps += !strcmp(e, "step");
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/* Waits until stdout file out has the event (1), or the process ended or ms
 * passed (0). */
static inline int fu_wait_event(const char *out, const char *ev, const char *agent, pid_t pid,
                                int ms)
{
    int64_t t0 = ru_now_ms();
    while (ru_now_ms() - t0 < ms) {
        if (fu_count_event(out, ev, agent, NULL) > 0)
            return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return fu_count_event(out, ev, agent, NULL) > 0;
        fu_nap();
    }
    return 0;
}

/* Agent pids of the plan's workers (worker w: pids[w]) and their names
 * (names may be NULL), from the run record's plan line; how many. */
static inline int fu_agent_pids(const char *record, pid_t *pids, char (*names)[RU_NAME_MAX],
                                int cap)
{
    return ru_plan_workers(record, names, pids, cap);
}

/* Waits for both agents of plan A to be in the record. */
static inline int fu_wait_agents(const char *record, pid_t *pids, char (*names)[RU_NAME_MAX],
                                 pid_t console, int ms)
{
    int64_t t0 = ru_now_ms();
    while (ru_now_ms() - t0 < ms) {
        if (fu_agent_pids(record, pids, names, FU_MAX_AGENTS) >= 2)
            return 1;
        if (waitpid(console, NULL, WNOHANG) == console)
            return 0;
        fu_nap();
    }
    return 0;
}

static inline int fu_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* Step folders of ckdir that are not whole committed checkpoints: above the
 * step latest names, or without an index.json. Prints each. */
static inline int fu_partial_folders(const char *ckdir)
{
    int64_t latest = fu_latest(ckdir);
    DIR *d = opendir(ckdir);
    if (!d)
        return 0;
    int bad = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "step-", 5) != 0)
            continue;
        char ix[1024];
        struct stat st;
        snprintf(ix, sizeof ix, "%s/%s/index.json", ckdir, de->d_name);
        long long n = atoll(de->d_name + 5);
        if (n > latest || stat(ix, &st) != 0) {
            fprintf(stderr, "partial checkpoint folder %s/%s (latest %lld), holding:", ckdir,
                    de->d_name, (long long)latest);
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", ckdir, de->d_name);
            DIR *in = opendir(sub);
            for (struct dirent *f; in && (f = readdir(in));)
                if (f->d_name[0] != '.')
                    fprintf(stderr, " %s", f->d_name);
            if (in)
                closedir(in);
            fprintf(stderr, "\n");
            bad++;
        }
    }
    closedir(d);
    return bad;
}

static inline void fu_show(const char *path)
{
    char *text = NULL;
    pt_file_read(path, &text, NULL, NULL);
    fprintf(stderr, "--- %s:\n%s\n", path, text ? text : "(none)");
    free(text);
}

/* The last complete checkpoint of ckdir (step S) resumed for FU_TAIL_STEPS
 * steps gives the weights and optimizer state of an uninterrupted run of
 * S + FU_TAIL_STEPS steps from scratch: the largest relative difference, or
 * -1 when a run failed or a tensor is missing. pdir: the folder of the
 * shared profile; name: a prefix for the two runs' files under dir. */
static inline double fu_resume_diff(const char *pdir, const char *dir, const char *name,
                                    const char *ckdir)
{
    int64_t s = fu_latest(ckdir);
    if (s < 0)
        return -1;
    char res_ck[512], ref_ck[512], rd[512], out[512], err[512], iters[32];
    snprintf(res_ck, sizeof res_ck, "%s/%s-resumed-ck", dir, name);
    snprintf(ref_ck, sizeof ref_ck, "%s/%s-fresh-ck", dir, name);
    ru_fresh_dir(res_ck);
    ru_fresh_dir(ref_ck);
    snprintf(iters, sizeof iters, "%d", FU_TAIL_STEPS);
    const char *resume[] = {"--resume", ckdir, NULL};
    snprintf(rd, sizeof rd, "%s/%s-resumed", dir, name);
    snprintf(out, sizeof out, "%s/%s-resumed.out", dir, name);
    snprintf(err, sizeof err, "%s/%s-resumed.err", dir, name);
    int st = ru_wait(fu_start(pdir, rd, res_ck, iters, out, err, resume), FU_RUN_MS, NULL);
    if (st != 0) {
        fu_show(err);
        return -1;
    }
    snprintf(iters, sizeof iters, "%lld", (long long)(s + FU_TAIL_STEPS));
    snprintf(rd, sizeof rd, "%s/%s-fresh", dir, name);
    snprintf(out, sizeof out, "%s/%s-fresh.out", dir, name);
    snprintf(err, sizeof err, "%s/%s-fresh.err", dir, name);
    st = ru_wait(fu_start(pdir, rd, ref_ck, iters, out, err, NULL), FU_RUN_MS, NULL);
    if (st != 0) {
        fu_show(err);
        return -1;
    }
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/step-%lld", res_ck, (long long)(s + FU_TAIL_STEPS));
    snprintf(b, sizeof b, "%s/step-%lld", ref_ck, (long long)(s + FU_TAIL_STEPS));
    int tensors = 0;
    double d = ru_ckpt_diff(a, b, &tensors);
    /* plan A: 4 linear layers, weight and bias, each with momentum */
    return tensors == 16 ? d : -1;
}

#endif
