/* `pipetop run` refuses a plan that does not fit the model, the devices,
 * memory or its schedule — and bad data — before any agent starts, with
 * the reason. */
#include <dirent.h>
#include <sys/stat.h>

#include "tests/tui/run_util.h"

#define TDIR   "run_refuse_itest.d"
#define RUN_MS 60000

/* Files named agent-* in the run folder (one per agent spawned). */
static int agent_logs(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += !strncmp(de->d_name, "agent-", 6);
    if (d)
        closedir(d);
    return n;
}

static void refused(const char *name, const char *plan, const char *topology, const char *data,
                    const char *reason)
{
    char model[1024], planp[1024], topo[1024], out[256], err[256], rd[256];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    snprintf(planp, sizeof planp, "%s", pt_test_path(plan));
    snprintf(topo, sizeof topo, "%s", topology ? pt_test_path(topology) : "");
    snprintf(out, sizeof out, TDIR "/%s.out", name);
    snprintf(err, sizeof err, TDIR "/%s.err", name);
    snprintf(rd, sizeof rd, TDIR "/%s", name);
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)ru_bin("pipetop");
    argv[k++] = "run";
    argv[k++] = "--plan";
    argv[k++] = planp;
    argv[k++] = "--model";
    argv[k++] = model;
    argv[k++] = "--data";
    argv[k++] = (char *)data;
    argv[k++] = "--iters";
    argv[k++] = "2";
    argv[k++] = "--profile";
    argv[k++] = TDIR "/profile.json";
    argv[k++] = "--run-dir";
    argv[k++] = rd;
    argv[k++] = "--json";
    if (topology) {
        argv[k++] = "--topology";
        argv[k++] = topo;
    }
    argv[k] = NULL;
    int st = ru_run(argv, out, err, RUN_MS);
    CHECK_MSG(st == 1, "%s: exit status %d", name, st);
    /* under --json the error is one JSON object on stderr with a stable code */
    char *text = NULL;
    pt_file_read(err, &text, NULL, NULL);
    cJSON *e = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(e && cJSON_IsObject(e), "%s: stderr is not a JSON object: %s", name, text);
    if (e) {
        CHECK_STR_CONTAINS(ru_str(e, "message"), "refused before starting any agent");
        CHECK_STR_CONTAINS(ru_str(e, "message"), reason);
        CHECK(!strcmp(ru_str(e, "command"), "run"));
        CHECK(ru_str(e, "error")[0] != 0 && strcmp(ru_str(e, "error"), "failed"));
    }
    cJSON_Delete(e);
    free(text);
    CHECK_MSG(agent_logs(rd) == 0, "%s: agents were started", name);
    /* a refused run leaves no run folder behind */
    CHECK_MSG(access(rd, F_OK) != 0, "%s: the refused run left %s", name, rd);
    cJSON *last = ru_last_json(out);
    CHECK(last && !strcmp(ru_str(last, "event"), "failed"));
    CHECK_STR_CONTAINS(ru_str(last, "reason"), reason);
    cJSON_Delete(last);
}

static void test_refusals(void)
{
    ru_fresh_dir(TDIR);
    char model[1024];
    snprintf(model, sizeof model, "%s", pt_test_path("tests/data/run/tiny-mlp.json"));
    char *prof[] = {
        (char *)ru_bin("pipetop"), "profile",   "--model", model, "--batch", "16", "--out",
        TDIR "/profile.json",      "--repeats", "2",       NULL};
    REQUIRE(ru_run(prof, TDIR "/profile.out", TDIR "/profile.err", RUN_MS) == 0);

    refused("model", "tests/data/run/plan-wrong-model.json", NULL, "synthetic",
            "plan is for \"fmnist-mlp\", not for \"tiny-mlp\"");
    refused("devices", "tests/data/run/plan-b.json", "tests/data/run/topo-two-devices.json",
            "synthetic", "stages[1].replicas[0]: device 2 does not exist");
    refused("memory", "tests/data/run/plan-a.json", "tests/data/run/topo-tiny-memory.json",
            "synthetic", "but the device has 64.00 KiB");
    refused("schedule", "tests/data/run/plan-2bw-too-few-mb.json", NULL, "synthetic",
            "fewer than the 2 stages");
    refused("data", "tests/data/run/plan-a.json", NULL, "no-such-data-set", "no-such-data-set");

    /* the control: the same plan, model and data run */
    char plan[1024];
    snprintf(plan, sizeof plan, "%s", pt_test_path("tests/data/run/plan-a.json"));
    ru_argv ok;
    ru_run_argv(&ok, model, TDIR "/ok", "--plan", plan, "--iters", "2", "--profile",
                TDIR "/profile.json", NULL);
    CHECK(ru_run(ok.v, TDIR "/ok.out", TDIR "/ok.err", RUN_MS) == 0);
    CHECK(agent_logs(TDIR "/ok") == 2);
}

PT_TEST_MAIN({"refusals", test_refusals})
