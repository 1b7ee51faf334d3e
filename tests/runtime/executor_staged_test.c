/* The executor's host-staging path, which a GPU backend takes (its memory is
 * not host-addressable), exercised on the CPU: a copy of the CPU backend's
 * table is a backend the executor does not recognise as the CPU's, so the
 * feed, the messages between stages and both kinds of all-reduce go through
 * host copies and upload/download. Synchronous schedules must still equal
 * single-device training (1e-5) and Pipe-SGD the stale reference; the copy
 * counts its downloads and uploads, so a run that bypassed staging fails. */
#include <stdatomic.h>

#include "runtime/backend_cuda.h"
#include "tests/runtime/exec_common.h"

#define ITERS 2

static pt_backend staged;
static atomic_long downloads, uploads;
static void (*cpu_download)(const pt_backend *, void *, const void *, size_t);
static void (*cpu_upload)(const pt_backend *, void *, const void *, size_t);

static void count_download(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    atomic_fetch_add(&downloads, 1);
    cpu_download(be, dst, src, bytes);
}

static void count_upload(const pt_backend *be, void *dst, const void *src, size_t bytes)
{
    atomic_fetch_add(&uploads, 1);
    cpu_upload(be, dst, src, bytes);
}

static void use_staged_backend(void)
{
    staged = *pt_backend_cpu();
    staged.name = "cpu-staged";
    cpu_download = staged.download;
    cpu_upload = staged.upload;
    staged.download = count_download;
    staged.upload = count_upload;
    ec_backend = &staged;
}

/* every micro-batch's input is uploaded, every message staged both ways */
static void check_staged(const ec_case *c, const ec_run *r, const ec_weights *want, int before)
{
    (void)r, (void)want, (void)before;
    CHECK_MSG(atomic_load(&uploads) >= (long)c->mb_count * ITERS,
              "%s: %ld uploads: the run did not stage", c->name, atomic_load(&uploads));
    CHECK_MSG(atomic_load(&downloads) > 0, "%s: no downloads", c->name);
}

static void run_sync(const ec_case *c)
{
    atomic_store(&downloads, 0);
    atomic_store(&uploads, 0);
    ec_check_sync(c, ITERS, check_staged);
}

static void test_backend_is_not_cpu(void)
{
    CHECK(ec_backend != pt_backend_cpu());
    CHECK(!pt_backend_is_cuda(ec_backend));
}

static void test_sync_kinds(void)
{
    static const int cuts2[] = {0, 4, 8}, cuts4[] = {0, 2, 4, 6, 8};
    static const struct {
        pt_sched_kind kind;
        const char *name;
    } kinds[] = {{PT_SCHED_GPIPE, "gpipe"},
                 {PT_SCHED_DAPPLE, "dapple"},
                 {PT_SCHED_1F1B_FLUSH, "1f1b-flush"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s S=2 staged", kinds[k].name);
        ec_case c = {.name = name,
                     .kind = kinds[k].kind,
                     .policy = 'A',
                     .stages = 2,
                     .cuts = cuts2,
                     .mb_size = 3,
                     .mb_count = 4,
                     .optim = PT_OPTIM_SGD};
        run_sync(&c);
        snprintf(name, sizeof name, "%s S=4 staged", kinds[k].name);
        c.stages = 4;
        c.cuts = cuts4;
        run_sync(&c);
    }
}

/* A replicated stage: the synchronous all-reduce runs on a host copy. */
static void test_replicated_adam(void)
{
    static const int cuts3[] = {0, 2, 5, 8};
    ec_case c = {.name = "dapple S=3 middle x2 adam staged",
                 .kind = PT_SCHED_DAPPLE,
                 .policy = 'A',
                 .stages = 3,
                 .cuts = cuts3,
                 .replicas = (const int[]){1, 2, 1},
                 .mb_size = 4,
                 .mb_count = 4,
                 .optim = PT_OPTIM_ADAM};
    run_sync(&c);
}

static void test_gpt(void)
{
    static const int cuts_gpt[] = {0, 1, 3, 6};
    ec_case c = {.name = "1f1b-flush gpt S=3 staged",
                 .kind = PT_SCHED_1F1B_FLUSH,
                 .policy = 'A',
                 .stages = 3,
                 .cuts = cuts_gpt,
                 .mb_size = 2,
                 .mb_count = 3,
                 .optim = PT_OPTIM_SGD, /* not Adam: executor_sync_test's test_gpt says why */
                 .gpt = 1};
    run_sync(&c);
}

/* Pipe-SGD: the asynchronous all-reduce downloads at its start and uploads
 * when it is collected. */
static void test_pipesgd(void)
{
    static const int cuts1[] = {0, 8};
    ec_case c = {.name = "pipesgd x3 staged",
                 .kind = PT_SCHED_PIPESGD,
                 .stages = 1,
                 .cuts = cuts1,
                 .replicas = (const int[]){3},
                 .mb_size = 6,
                 .mb_count = 2,
                 .windows = 4,
                 .optim = PT_OPTIM_SGD};
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_run r;
    int rc = ec_run_case(&c, &spec, ds, 1, &r);
    CHECK_MSG(rc == 0, "%s: run failed (%d)", c.name, rc);
    if (rc == 0) {
        int64_t B = (int64_t)c.mb_size * c.mb_count;
        ec_weights want, control;
        ec_ref_stale(&spec, ds, B, c.windows, c.windows, c.optim, &want);
        ec_ref_sync(&spec, ds, B, c.windows, c.optim, &control);
        ec_check_equal(c.name, &r.w, &want, &control);
        CHECK_MSG(r.replicas_equal, "%s: replicas differ", c.name);
        free(want.w);
        free(control.w);
    }
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

int main(int argc, char **argv)
{
    use_staged_backend();
    static const struct pt_test_case cases[] = {{"backend_is_not_cpu", test_backend_is_not_cpu},
                                                {"sync_kinds", test_sync_kinds},
                                                {"replicated_adam", test_replicated_adam},
                                                {"gpt", test_gpt},
                                                {"pipesgd", test_pipesgd}};
    int failed = 0;
    pt_test_watchdog_arm_();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1]))
            continue;
        int before = pt_test_failures_;
        pt_test_case_now_ = cases[i].name;
        cases[i].fn();
        int ok = pt_test_failures_ == before;
        printf("%s %s\n", ok ? "ok  " : "FAIL", cases[i].name);
        failed += !ok;
    }
    return failed ? 1 : 0;
}
