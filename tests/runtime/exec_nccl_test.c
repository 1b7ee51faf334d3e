/* The executor's NCCL path (runtime/executor.c, runtime/comm_nccl.h) against
 * a recording stand-in (tests/gpu/cuda_standin.h): every synchronous kind,
 * interleaved among them, on 2 and 4 stages and with a replicated stage,
 * trains to the single-device reference with its messages and all-reduces
 * over the stand-in's NCCL, each call waited for (bounded) before the next
 * op, and the record of its calls, replayed with
 * NCCL's blocking semantics (a send and its receive complete only while
 * both are at the head of their streams), completes: every send/recv pair
 * that must progress together was enqueued inside one group. The same
 * record with each group taken apart, as the executor issued its messages
 * before, deadlocks on 1f1b-flush, which is how the replay is shown able to
 * fail. */
#include "tests/gpu/cuda_standin.h"
#include "runtime/exec_nccl.h"
#include "tests/runtime/exec_common.h"

#define ITERS 2

typedef struct nccl_case {
    const char *name;
    pt_sched_kind kind;
    char policy;
    int stages, chunks;
    const int *cuts, *replicas;
    int mb_count;
    int must_group; /* ungrouped, this case's record deadlocks */
} nccl_case;

/* Communicators of n ranks from one new id into out[0..n) (stream of rank k:
 * first + k). */
static int make_comms(int n, int first, pt_nccl **out)
{
    char id[PT_NCCL_ID_HEX];
    pt_error err = {0};
    int rc = pt_nccl_id_new(id, sizeof id, &err);
    for (int k = 0; k < n && rc == 0; k++)
        if ((rc = pt_nccl_create(id, n, k, sti_install(), &out[k], &err)) == 0)
            sti_set_stream(out[k], first + k);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

/* One communicator of all workers (rank = worker), one per replicated stage. */
static int attach_nccl(pt_pipeline *pp, const pt_program *prog, pt_nccl **all, pt_nccl **reps)
{
    int nw = prog->worker_count, rc = make_comms(nw, 0, all);
    for (int s = 0; s < prog->stage_count && rc == 0; s++) {
        int w0 = prog->stage_worker[s], r = prog->stage_worker[s + 1] - w0;
        if (r > 1)
            rc = make_comms(r, w0, reps + w0);
    }
    for (int w = 0; w < nw && rc == 0; w++) {
        pt_error err = {0};
        rc = pt_exec_set_nccl(pt_pipeline_exec(pp, w), all[w], reps[w], &err);
        CHECK_MSG(rc == 0, "worker %d: %s", w, err.msg);
    }
    return rc;
}

/* Case c's program and in-process pipeline on the stand-in's backend (a
 * failed CHECK and an error code when either cannot be made). */
static int make_pipeline(const ec_case *c, const pt_model_spec *spec, const pt_dataset *ds,
                         pt_program *prog, pt_pipeline **pp)
{
    memset(prog, 0, sizeof *prog);
    *pp = NULL;
    int rc = ec_program_spec(c, spec, prog);
    CHECK_MSG(rc == 0, "%s: no program", c->name);
    pt_pipeline_config pc = {.spec = spec,
                             .prog = prog,
                             .optim = ec_optim(c->optim),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             .timeout_ms = 20000,
                             .backend = sti_install()};
    pt_error err = {0};
    if (rc == 0 && (rc = pt_pipeline_create(&pc, pp, &err)) < 0)
        CHECK_MSG(0, "%s: %s", c->name, err.msg);
    return rc;
}

/* Message ops of the program's workers, times the runs. */
static int message_ops(const pt_program *prog)
{
    int n = 0;
    for (int i = 0; i < prog->op_count; i++) {
        pt_op_kind k = prog->ops[i].kind;
        n += k == PT_OP_SEND_ACT || k == PT_OP_SEND_GRAD || k == PT_OP_RECV_ACT ||
             k == PT_OP_RECV_GRAD;
    }
    return n * ITERS;
}

static int logged_ops(void)
{
    int n = 0;
    for (int i = 0; i < sti.log_n; i++)
        n += sti.log[i].kind == STI_GROUP ? sti.log[i].n : 0;
    return n;
}

static void check_case(const nccl_case *nc)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = {.name = nc->name,
                 .kind = nc->kind,
                 .policy = nc->policy ? nc->policy : 'A',
                 .stages = nc->stages,
                 .cuts = nc->cuts,
                 .replicas = nc->replicas,
                 .mb_size = 2,
                 .mb_count = nc->mb_count,
                 .optim = PT_OPTIM_SGD,
                 .chunks = nc->chunks};
    pt_program prog;
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    int rc = make_pipeline(&c, &spec, ds, &prog, &pp);
    pt_nccl *all[EC_MAX_WORKERS] = {0}, *reps[EC_MAX_WORKERS] = {0};
    if (rc == 0 && attach_nccl(pp, &prog, all, reps) == 0) {
        sti_log_clear();
        for (int k = 0; k < ITERS && rc == 0; k++) {
            rc = pt_pipeline_run(pp, (int64_t)k * prog.window_count, &err);
            CHECK_MSG(rc == 0, "%s: run %d: %s", nc->name, k, err.msg);
        }
    }
    if (rc == 0) {
        /* the data arrived: the pipeline trained as one device does */
        pt_net *layout = ec_whole_net(&spec, 1);
        ec_weights got = {pt_net_param_count(layout), NULL}, want, short_by_one;
        got.w = calloc((size_t)got.count, sizeof(float));
        for (int s = 0; s < prog.stage_count; s++)
            ec_gather(pt_pipeline_net(pp, prog.stage_worker[s]), NULL, layout, &got);
        int64_t B = (int64_t)c.mb_size * c.mb_count;
        ec_ref_sync(&spec, ds, B, ITERS, c.optim, &want);
        ec_ref_sync(&spec, ds, B, ITERS - 1, c.optim, &short_by_one);
        ec_check_equal(nc->name, &got, &want, &short_by_one);
        free(got.w);
        free(want.w);
        free(short_by_one.w);
        pt_net_destroy(&layout);
        /* every message went over NCCL, and a real NCCL would not deadlock */
        CHECK_MSG(logged_ops() == message_ops(&prog), "%s: %d NCCL sends/recvs for %d messages",
                  nc->name, logged_ops(), message_ops(&prog));
        /* every group and all-reduce waited for (polled, bounded) before the next op */
        CHECK_MSG(sti.waits == sti.log_n, "%s: %d waits for %d NCCL calls", nc->name, sti.waits,
                  sti.log_n);
        char why[2048];
        int stuck = sti_deadlock(prog.worker_count, 0, why, sizeof why);
        CHECK_MSG(!stuck, "%s: NCCL would deadlock: %s", nc->name, why);
        int stuck_split = sti_deadlock(prog.worker_count, 1, why, sizeof why);
        if (nc->must_group)
            CHECK_MSG(stuck_split, "%s: without groups the replay should deadlock", nc->name);
        printf("  %-28s groups %5d  ops %5d  ungrouped: %s\n", nc->name, sti.log_n, logged_ops(),
               stuck_split ? "deadlock" : "completes");
    }
    for (int w = 0; w < EC_MAX_WORKERS; w++) {
        pt_nccl_destroy(&all[w]);
        pt_nccl_destroy(&reps[w]);
    }
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

static void test_sync_kinds(void)
{
    static const int cuts2[] = {0, 4, 8}, cuts4[] = {0, 2, 4, 6, 8};
    static const nccl_case cases[] = {
        {"gpipe S=2", PT_SCHED_GPIPE, 0, 2, 0, cuts2, NULL, 4, 0},
        {"gpipe S=4", PT_SCHED_GPIPE, 0, 4, 0, cuts4, NULL, 4, 0},
        {"dapple A S=2", PT_SCHED_DAPPLE, 'A', 2, 0, cuts2, NULL, 4, 1},
        {"dapple A S=4", PT_SCHED_DAPPLE, 'A', 4, 0, cuts4, NULL, 8, 1},
        {"dapple B S=4", PT_SCHED_DAPPLE, 'B', 4, 0, cuts4, NULL, 8, 1},
        {"1f1b-flush S=2", PT_SCHED_1F1B_FLUSH, 0, 2, 0, cuts2, NULL, 4, 1},
        {"1f1b-flush S=4", PT_SCHED_1F1B_FLUSH, 0, 4, 0, cuts4, NULL, 8, 1},
        {"zb-h1 S=2", PT_SCHED_ZB_H1, 0, 2, 0, cuts2, NULL, 4, 0},
        {"zb-h1 S=4", PT_SCHED_ZB_H1, 0, 4, 0, cuts4, NULL, 8, 0},
        {"zb-h2 S=4", PT_SCHED_ZB_H2, 0, 4, 0, cuts4, NULL, 8, 0},
        {"1f1b-gw S=4", PT_SCHED_1F1B_GW, 0, 4, 0, cuts4, NULL, 8, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

/* The all-reduce of a replicated stage on its own communicator, in the same
 * streams as the messages. */
static void test_replicated(void)
{
    static const int cuts3[] = {0, 2, 5, 8}, reps[] = {1, 2, 1};
    static const nccl_case c = {
        "dapple S=3 middle x2", PT_SCHED_DAPPLE, 'A', 3, 0, cuts3, reps, 4, 1};
    check_case(&c);
}

/* The record a worker would make running prog with NCCL: at its op i, the
 * group of the messages `at` puts there (at NULL: every message on its own
 * at its place, as before groups), and each synchronous all-reduce of a
 * replicated stage on that stage's communicator (world 1 + stage). */
static void record_program(const pt_program *prog, const int *at)
{
    sti_log_clear();
    for (int w = 0; w < prog->worker_count; w++) {
        const pt_worker *wk = &prog->workers[w];
        for (int i = wk->op_begin; i < wk->op_end; i++) {
            const pt_op *o = &prog->ops[i];
            int s = wk->stage, reps = prog->stage_worker[s + 1] - prog->stage_worker[s];
            if (o->kind == PT_OP_ALLREDUCE && !(o->flags & PT_OPF_ASYNC) && reps > 1) {
                sti_record r = {STI_ALLREDUCE, 1 + s, w - prog->stage_worker[s], w, 0, {{0}}};
                sti_log(&r);
                continue;
            }
            sti_record r = {STI_GROUP, 0, w, w, 0, {{0}}};
            for (int j = wk->op_begin; j < wk->op_end && r.n < PT_NCCL_GROUP_MAX; j++) {
                pt_op_kind k = prog->ops[j].kind;
                int msg = k == PT_OP_SEND_ACT || k == PT_OP_SEND_GRAD || k == PT_OP_RECV_ACT ||
                          k == PT_OP_RECV_GRAD;
                if (msg && (at ? at[j] == i : j == i))
                    r.ops[r.n++] = (pt_nccl_p2p){
                        k == PT_OP_SEND_ACT || k == PT_OP_SEND_GRAD, prog->ops[j].peer, NULL,
                        (size_t)(prog->ops[j].row_hi - prog->ops[j].row_lo)};
            }
            if (r.n)
                sti_log(&r);
        }
    }
    for (int s = 0; s < prog->stage_count; s++) /* the replay counts a world's members */
        if (1 + s < STI_WORLDS)
            sti.worlds[1 + s].size = prog->stage_worker[s + 1] - prog->stage_worker[s];
    sti.worlds[0].size = prog->worker_count;
}

/* The plan of every synchronous kind, interleaved included, over more shapes
 * than the runs above: replayed from the record its groups would make, it
 * completes; one message per call, the kinds marked deadlock. */
static void test_plans(void)
{
    static const int cuts[5][9] = {
        {0}, {0}, {0, 4, 8}, {0, 2, 4, 6, 8}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
    static const struct {
        pt_sched_kind kind;
        char policy;
        int chunks;
    } kinds[] = {{PT_SCHED_GPIPE, 0, 0},    {PT_SCHED_DAPPLE, 'A', 0},
                 {PT_SCHED_DAPPLE, 'B', 0}, {PT_SCHED_1F1B_FLUSH, 0, 0},
                 {PT_SCHED_ZB_H1, 0, 0},    {PT_SCHED_ZB_H2, 0, 0},
                 {PT_SCHED_1F1B_GW, 0, 0},  {PT_SCHED_INTERLEAVED, 0, 2}};
    pt_model_spec spec = ec_mlp();
    REQUIRE(sti_install());
    int plans = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int S = kinds[k].chunks ? 4 : 2; S <= 8; S *= 2)
            for (int m = 1; m <= 3; m++) {
                int ci = S == 2 ? 2 : S == 4 ? 3 : 4;
                ec_case c = {.name = "plan",
                             .kind = kinds[k].kind,
                             .policy = kinds[k].policy,
                             .stages = S,
                             .cuts = cuts[ci],
                             .mb_size = 2,
                             .mb_count = m * (kinds[k].chunks ? S / kinds[k].chunks : S),
                             .optim = PT_OPTIM_SGD,
                             .chunks = kinds[k].chunks};
                pt_program prog;
                memset(&prog, 0, sizeof prog);
                REQUIRE(ec_program_spec(&c, &spec, &prog) == 0);
                int *at = malloc((size_t)prog.op_count * sizeof *at);
                pt_error err = {0};
                int rc = pt_exec_nccl_plan(&prog, at, &err);
                const char *name = pt_sched_kind_name(kinds[k].kind);
                CHECK_MSG(rc == 0, "%s%c S=%d M=%d: %s", name,
                          kinds[k].policy ? kinds[k].policy : ' ', S, c.mb_count, err.msg);
                char why[2048];
                if (rc == 0) {
                    record_program(&prog, at);
                    CHECK_MSG(!sti_deadlock(prog.worker_count, 0, why, sizeof why),
                              "%s S=%d M=%d: the plan deadlocks: %s", name, S, c.mb_count, why);
                    plans++;
                }
                /* (interleaved with M = P micro-batches runs all forwards first) */
                if (kinds[k].kind == PT_SCHED_1F1B_FLUSH ||
                    (m > 1 &&
                     (kinds[k].kind == PT_SCHED_ZB_H2 || kinds[k].kind == PT_SCHED_INTERLEAVED))) {
                    record_program(&prog, NULL);
                    CHECK_MSG(sti_deadlock(prog.worker_count, 0, why, sizeof why),
                              "%s S=%d M=%d: one message per call should deadlock", name, S,
                              c.mb_count);
                }
                free(at);
                pt_program_release(&prog);
            }
    printf("  %d plans replayed\n", plans);
    sti_log_clear();
}

/* Chunks sharing a device take turns on one stream: the executor keeps them
 * on ZeroMQ and says so. */
static void test_hosts_refused(void)
{
    static const int cuts4[] = {0, 2, 4, 6, 8};
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = {.name = "interleaved",
                 .kind = PT_SCHED_INTERLEAVED,
                 .stages = 4,
                 .cuts = cuts4,
                 .mb_size = 2,
                 .mb_count = 4,
                 .optim = PT_OPTIM_SGD,
                 .chunks = 2};
    pt_program prog;
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    REQUIRE(make_pipeline(&c, &spec, ds, &prog, &pp) == 0);
    pt_nccl *all[4] = {0};
    REQUIRE(make_comms(4, 0, all) == 0);
    CHECK(pt_exec_set_nccl(pt_pipeline_exec(pp, 0), all[0], NULL, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "exchange over ZeroMQ, not NCCL");
    for (int w = 0; w < 4; w++)
        pt_nccl_destroy(&all[w]);
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

/* The replay itself: a hand-made record of the deadlock. */
static void test_replay(void)
{
    REQUIRE(sti_install());
    sti_log_clear();
    /* stage 0: SEND_ACT(1) then RECV_GRAD(0); stage 1: SEND_GRAD(0) then RECV_ACT(1) */
    sti_record a = {STI_GROUP, 0, 0, 0, 2, {{1, 1, NULL, 64}, {0, 1, NULL, 64}}};
    sti_record b = {STI_GROUP, 0, 1, 1, 2, {{1, 0, NULL, 64}, {0, 0, NULL, 64}}};
    sti_log(&a);
    sti_log(&b);
    char why[512];
    CHECK(sti_deadlock(2, 0, why, sizeof why) == 0);
    CHECK(sti_deadlock(2, 1, why, sizeof why) == 1);
    CHECK_STR_CONTAINS(why, "stream 0 waits in a group: send to 1");
    CHECK_STR_CONTAINS(why, "stream 1 waits in a group: send to 0");
    sti_log_clear();
}

PT_TEST_MAIN({"replay", test_replay}, {"plans", test_plans}, {"sync_kinds", test_sync_kinds},
             {"replicated", test_replicated}, {"hosts_refused", test_hosts_refused})
