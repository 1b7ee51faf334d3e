/* Memory of the stage executor, measured by the arenas:
 * - activations: stage i's PT_MEM_ACTS peak over a run is exactly K_i slot
 *   blocks above its resting level, K_i = M for gpipe (it grows with M),
 *   min(S-i, M) for dapple policy A and 1f1b-flush (flat in M beyond S),
 *   min(2(S-i)-1, M) for policy B; with recompute a slot is only the stage
 *   input, output and labels;
 * - steady state: from the second run on no arena asks its backend for
 *   memory, for every schedule kind. */
#include "tests/runtime/exec_common.h"

static const int cuts4[] = {0, 2, 4, 6, 8};

static int64_t acts_extra(pt_pipeline *pp, int w, const int64_t *rest)
{
    pt_mem_stats st;
    pt_arena_stats(pt_net_arena(pt_pipeline_net(pp, w)), &st);
    return st.peak[PT_MEM_ACTS] - rest[w];
}

/* Runs one iteration and checks every stage's activation peak against K(i). */
static void check_acts(pt_sched_kind kind, char policy, int recompute, int M,
                       int (*K)(int S, int i, int M), int64_t *stage0_bytes)
{
    static const int rc_all[] = {1, 1, 1, 1};
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    char name[64];
    snprintf(name, sizeof name, "%s%c M=%d%s", pt_sched_kind_name(kind),
             kind == PT_SCHED_DAPPLE ? policy : ' ', M, recompute ? " recompute" : "");
    ec_case c = {.name = name,
                 .kind = kind,
                 .policy = policy,
                 .stages = 4,
                 .cuts = cuts4,
                 .recompute = recompute ? rc_all : NULL,
                 .mb_size = 2,
                 .mb_count = M,
                 .optim = PT_OPTIM_SGD};
    pt_program prog = {0};
    REQUIRE(ec_program(&c, spec.layer_count, &prog) == 0);
    pt_pipeline_config pc = {.spec = &spec,
                             .prog = &prog,
                             .optim = ec_optim(PT_OPTIM_SGD),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             .timeout_ms = 20000};
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    int rc = pt_pipeline_create(&pc, &pp, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    if (rc == 0) {
        int64_t rest[8];
        for (int w = 0; w < prog.worker_count; w++) {
            pt_mem_stats st;
            pt_arena_stats(pt_net_arena(pt_pipeline_net(pp, w)), &st);
            rest[w] = st.current[PT_MEM_ACTS];
        }
        rc = pt_pipeline_run(pp, 0, &err);
        CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
        for (int w = 0; rc == 0 && w < prog.worker_count; w++) {
            pt_net *net = pt_pipeline_net(pp, w);
            int want = K(4, prog.workers[w].stage, M);
            int64_t got = acts_extra(pp, w, rest);
            CHECK_MSG(got == want * pt_net_slot_bytes(net),
                      "%s: stage %d: activation peak %lld bytes above rest, expected %d slots "
                      "of %lld",
                      name, w, (long long)got, want, (long long)pt_net_slot_bytes(net));
            CHECK_MSG(pt_exec_get_needs(pt_pipeline_exec(pp, w))->max_slots == want,
                      "%s: stage %d: %d slots planned, expected %d", name, w,
                      pt_exec_get_needs(pt_pipeline_exec(pp, w))->max_slots, want);
            if (w == 0)
                *stage0_bytes = got;
        }
    }
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

static int k_gpipe(int S, int i, int M)
{
    (void)S;
    (void)i;
    return M;
}
static int k_policy_a(int S, int i, int M)
{
    return S - i < M ? S - i : M;
}
static int k_policy_b(int S, int i, int M)
{
    return 2 * (S - i) - 1 < M ? 2 * (S - i) - 1 : M;
}

static void test_activation_peaks(void)
{
    static const int Ms[] = {2, 4, 8};
    int64_t gp[3], da[3], db[3], fl[3], gr[3];
    for (int j = 0; j < 3; j++) {
        check_acts(PT_SCHED_GPIPE, 'A', 0, Ms[j], k_gpipe, &gp[j]);
        check_acts(PT_SCHED_DAPPLE, 'A', 0, Ms[j], k_policy_a, &da[j]);
        check_acts(PT_SCHED_DAPPLE, 'B', 0, Ms[j], k_policy_b, &db[j]);
        check_acts(PT_SCHED_1F1B_FLUSH, 'A', 0, Ms[j], k_policy_a, &fl[j]);
        check_acts(PT_SCHED_GPIPE, 'A', 1, Ms[j], k_gpipe, &gr[j]);
    }
    /* stage 0 (S = 4): gpipe grows with M, policy A stays at min(S, M) */
    CHECK(gp[0] < gp[1] && gp[1] < gp[2]);
    CHECK(gp[2] == 4 * gp[0]);
    CHECK(da[0] == gp[0]);         /* M = 2 < S: both hold M */
    CHECK(da[1] == da[2]);         /* M >= S: flat at S */
    CHECK(da[2] * 2 == gp[2]);     /* M = 8: S = 4 slots vs 8 */
    CHECK(db[2] * 8 == gp[2] * 7); /* policy B: 2S-1 = 7 of 8 */
    CHECK(fl[2] == da[2]);
    CHECK(gr[2] < gp[2]); /* recompute keeps less per micro-batch */
    if (getenv("EC_VERBOSE"))
        for (int j = 0; j < 3; j++)
            printf("  M=%d stage 0 activation bytes: gpipe %lld, gpipe+recompute %lld, dapple A "
                   "%lld, dapple B %lld\n",
                   Ms[j], (long long)gp[j], (long long)gr[j], (long long)da[j], (long long)db[j]);
}

/* Runs a program `runs` times and checks that runs 2..n make no backend
 * allocation on any worker. */
static void check_steady(const ec_case *c)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    pt_program prog = {0};
    REQUIRE(ec_program(c, spec.layer_count, &prog) == 0);
    pt_pipeline_config pc = {.spec = &spec,
                             .prog = &prog,
                             .optim = ec_optim(c->optim),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             .timeout_ms = 20000};
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    int rc = pt_pipeline_create(&pc, &pp, &err);
    CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    int64_t allocs[16] = {0};
    for (int k = 0; rc == 0 && k < 3; k++) {
        rc = pt_pipeline_run(pp, (int64_t)k * prog.window_count, &err);
        CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
        for (int w = 0; rc == 0 && w < prog.worker_count; w++) {
            pt_mem_stats st;
            pt_arena_stats(pt_net_arena(pt_pipeline_net(pp, w)), &st);
            if (k > 0)
                CHECK_MSG(st.backend_allocs == allocs[w],
                          "%s: worker %d allocated in run %d (%lld -> %lld)", c->name, w, k + 1,
                          (long long)allocs[w], (long long)st.backend_allocs);
            allocs[w] = st.backend_allocs;
        }
    }
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

static void test_steady_state(void)
{
    static const int cuts3[] = {0, 2, 5, 8}, mid2[] = {1, 2, 1}, rc_mid[] = {0, 1, 0};
    static const pt_sched_kind kinds[] = {PT_SCHED_GPIPE,     PT_SCHED_DAPPLE, PT_SCHED_1F1B_FLUSH,
                                          PT_SCHED_PIPEDREAM, PT_SCHED_2BW,    PT_SCHED_PIPESGD};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (int vs = 0; vs <= (kinds[k] == PT_SCHED_PIPEDREAM); vs++) {
            char name[64];
            snprintf(name, sizeof name, "steady %s%s", pt_sched_kind_name(kinds[k]),
                     vs ? " vsync" : "");
            ec_case c = {.name = name,
                         .kind = kinds[k],
                         .vsync = vs,
                         .stages = 3,
                         .cuts = cuts3,
                         .replicas = mid2,
                         .recompute = rc_mid,
                         .mb_size = 4,
                         .mb_count = 3,
                         .windows = 3,
                         .optim = PT_OPTIM_ADAM};
            check_steady(&c);
        }
    }
}

PT_TEST_MAIN({"activation_peaks", test_activation_peaks}, {"steady_state", test_steady_state})
