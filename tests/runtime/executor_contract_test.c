/* The stage executor's contract apart from the numbers: bad programs and
 * mismatched nets are refused naming the op or the field; a receive that
 * never completes times out naming the worker and the op, a failed run must
 * be reset, a stop flag stops it; the events cover every op in order with
 * the bytes moved; the ipc and tcp transports give bit-identical weights to
 * inproc; the data feed follows the single-device order. */
#include <dirent.h>
#include <unistd.h>

#include "protocol/clock.h"
#include "runtime/feed.h"
#include "tests/runtime/exec_common.h"

static const int cuts2[] = {0, 4, 8};
static const int cuts3[] = {0, 2, 5, 8};
static const int mid2[] = {1, 2, 1};

static ec_case small_case(pt_sched_kind kind)
{
    ec_case c = {.name = "contract",
                 .kind = kind,
                 .policy = 'A',
                 .stages = 2,
                 .cuts = cuts2,
                 .mb_size = 4,
                 .mb_count = 2,
                 .windows = 3,
                 .optim = PT_OPTIM_SGD};
    return c;
}

static void test_timeout_and_reset(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = small_case(PT_SCHED_GPIPE);
    pt_program prog = {0};
    REQUIRE(ec_program(&c, spec.layer_count, &prog) == 0);
    pt_pipeline_config pc = {.spec = &spec,
                             .prog = &prog,
                             .optim = ec_optim(PT_OPTIM_SGD),
                             .init_seed = INIT_SEED,
                             .data = ds,
                             .data_seed = DATA_SEED,
                             .timeout_ms = 300};
    pt_pipeline *pp = NULL;
    pt_error err = {0};
    REQUIRE(pt_pipeline_create(&pc, &pp, &err) == 0);
    /* worker 1 alone: its first op waits for activations worker 0 never sends */
    pt_exec *ex = pt_pipeline_exec(pp, 1);
    int64_t t0 = pt_clock_ns();
    int rc = pt_exec_run(ex, 0, NULL, &err);
    double waited_ms = (double)(pt_clock_ns() - t0) / 1e6;
    CHECK(rc == PT_ETIMEOUT);
    CHECK_STR_CONTAINS(err.msg, "worker 1");
    CHECK_STR_CONTAINS(err.msg, "RECV_ACT");
    CHECK(waited_ms >= 250 && waited_ms < 5000);
    /* a failed run must be reset first */
    CHECK(pt_exec_run(ex, 0, NULL, &err) == PT_ESTATE);
    CHECK_STR_CONTAINS(err.msg, "reset");
    pt_exec_reset(ex);
    /* then the whole pipeline runs */
    rc = pt_pipeline_run(pp, 0, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    pt_pipeline_destroy(&pp);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

/* Worker 0 of a copy of prog whose ops i and j are swapped. */
static int needs_after_swap(const pt_program *prog, int i, int j, pt_error *err)
{
    pt_program q = *prog;
    q.ops = malloc((size_t)prog->op_count * sizeof(pt_op));
    memcpy(q.ops, prog->ops, (size_t)prog->op_count * sizeof(pt_op));
    pt_op t = q.ops[i];
    q.ops[i] = q.ops[j];
    q.ops[j] = t;
    pt_exec_needs ne;
    int rc = pt_exec_needs_of(&q, 0, &ne, err);
    free(q.ops);
    return rc;
}

static int find_op(const pt_program *p, int w, int kind, int mb)
{
    for (int i = p->workers[w].op_begin; i < p->workers[w].op_end; i++)
        if (p->ops[i].kind == kind && p->ops[i].mb == mb)
            return i;
    return -1;
}

static void test_bad_programs(void)
{
    ec_case c = small_case(PT_SCHED_GPIPE);
    c.stages = 3;
    c.cuts = cuts3;
    c.replicas = mid2;
    pt_program prog = {0};
    REQUIRE(ec_program(&c, 8, &prog) == 0);
    pt_error err = {0};
    pt_exec_needs ne;
    REQUIRE(pt_exec_needs_of(&prog, 0, &ne, &err) == 0);
    CHECK(ne.max_slots == 2 && ne.needs_input && !ne.needs_labels && ne.rows == 4);
    /* a backward before its forward */
    int f = find_op(&prog, 0, PT_OP_FWD, 0), b = find_op(&prog, 0, PT_OP_BWD, 0);
    REQUIRE(f >= 0 && b > f);
    CHECK(needs_after_swap(&prog, f, b, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "worker 0");
    CHECK_STR_CONTAINS(err.msg, "BWD");
    /* an optimizer step before the last backward it applies */
    int o = find_op(&prog, 0, PT_OP_OPT_STEP, 0), b1 = find_op(&prog, 0, PT_OP_BWD, 1);
    CHECK(needs_after_swap(&prog, o, b1, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "OPT_STEP");
    /* a step on a replicated stage without its all-reduce */
    pt_program q = prog;
    q.ops = malloc((size_t)prog.op_count * sizeof(pt_op));
    memcpy(q.ops, prog.ops, (size_t)prog.op_count * sizeof(pt_op));
    int a = find_op(&q, 1, PT_OP_ALLREDUCE, 0);
    REQUIRE(a >= 0);
    q.ops[a].kind = PT_OP_AR_WAIT;
    CHECK(pt_exec_needs_of(&q, 1, &ne, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "waits");
    q.ops[a] = prog.ops[a];
    q.ops[a].row_lo = 99;
    q.ops[a].kind = PT_OP_RECV_ACT;
    CHECK(pt_exec_needs_of(&q, 1, &ne, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "rows");
    free(q.ops);
    CHECK(pt_exec_needs_of(&prog, 99, &ne, &err) == PT_EINVAL);
    pt_program_release(&prog);
}

/* The executor built by hand, as an agent does for its one worker. */
static void test_manual_worker(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    static const int cuts1[] = {0, 8};
    ec_case c = small_case(PT_SCHED_GPIPE);
    c.stages = 1;
    c.cuts = cuts1;
    pt_program prog = {0};
    REQUIRE(ec_program(&c, 8, &prog) == 0);
    pt_exec_needs ne;
    pt_error err = {0};
    REQUIRE(pt_exec_needs_of(&prog, 0, &ne, &err) == 0);
    CHECK(!ne.needs_comm);
    pt_net_config nc = pt_net_config_default(&spec);
    nc.first = ne.first;
    nc.last = 3; /* wrong: the stage is [0, 8) */
    nc.max_batch = ne.max_batch;
    nc.max_slots = ne.max_slots;
    nc.seed = INIT_SEED;
    pt_net *net = NULL;
    REQUIRE(pt_net_create(&spec, &nc, &net, &err) == 0);
    pt_optim *opt = NULL;
    pt_optim_spec os = ec_optim(PT_OPTIM_SGD);
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, &err) == 0);
    pt_feed *feed = NULL;
    REQUIRE(pt_feed_create(ds, DATA_SEED, prog.mb_size, prog.mb_per_window, &feed, &err) == 0);
    atomic_int stop = 0;
    pt_exec_config ec = {.prog = &prog,
                         .worker = 0,
                         .net = net,
                         .optim = opt,
                         .feed = pt_feed_as_exec(feed),
                         .stop = &stop};
    pt_exec *ex = NULL;
    CHECK(pt_exec_create(&ec, &ex, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "layers");
    CHECK(ex == NULL);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
    nc.last = ne.last;
    REQUIRE(pt_net_create(&spec, &nc, &net, &err) == 0);
    ec.net = net;
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net) - 1, &opt, &err) == 0);
    ec.optim = opt;
    CHECK(pt_exec_create(&ec, &ex, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "optimizer");
    pt_optim_destroy(&opt);
    REQUIRE(pt_optim_create(&os, pt_net_arena(net), pt_net_param_count(net), &opt, &err) == 0);
    ec.optim = opt;
    ec.feed.load = NULL;
    CHECK(pt_exec_create(&ec, &ex, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "feed");
    ec.feed = pt_feed_as_exec(feed);
    REQUIRE(pt_exec_create(&ec, &ex, &err) == 0);
    pt_exec_result res;
    CHECK(pt_exec_run(ex, 0, &res, &err) == 0);
    CHECK(res.ops == prog.workers[0].op_end - prog.workers[0].op_begin);
    CHECK(res.loss_count == (int64_t)prog.mb_size * prog.mb_per_window);
    CHECK(res.busy_ns > 0 && res.busy_ns <= res.wall_ns);
    atomic_store(&stop, 1);
    CHECK(pt_exec_run(ex, 1, NULL, &err) == PT_ESTATE);
    CHECK_STR_CONTAINS(err.msg, "stopped");
    pt_exec_reset(ex);
    atomic_store(&stop, 0);
    CHECK(pt_exec_run(ex, 1, NULL, &err) == 0);
    pt_exec_destroy(&ex);
    CHECK(ex == NULL);
    pt_feed_destroy(&feed);
    pt_optim_destroy(&opt);
    pt_net_destroy(&net);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

static void test_events(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = small_case(PT_SCHED_DAPPLE);
    c.stages = 3;
    c.cuts = cuts3;
    c.replicas = mid2;
    c.mb_count = 3;
    ec_run r;
    REQUIRE(ec_run_case(&c, &spec, ds, 1, &r) == 0);
    double loss = 0;
    int64_t count = 0;
    for (int w = 0; w < r.prog.worker_count; w++) {
        const pt_worker *wk = &r.prog.workers[w];
        pt_net *net = pt_pipeline_net(r.pp, w);
        CHECK(r.events->n[w] == wk->op_end - wk->op_begin);
        int64_t prev_end = 0;
        for (int i = 0; i < r.events->n[w]; i++) {
            const pt_exec_event *e = &r.events->ev[w][i];
            const pt_op *op = &r.prog.ops[wk->op_begin + i];
            CHECK(e->op_index == wk->op_begin + i && e->kind == op->kind && e->mb == op->mb);
            CHECK(e->start_ns <= e->end_ns && e->start_ns >= prev_end);
            prev_end = e->end_ns;
            int64_t rows = op->row_hi - op->row_lo;
            if (op->kind == PT_OP_SEND_ACT || op->kind == PT_OP_RECV_GRAD)
                CHECK(e->bytes == rows * pt_net_out_elems(net) * 4);
            if (op->kind == PT_OP_RECV_ACT || op->kind == PT_OP_SEND_GRAD)
                CHECK(e->bytes == rows * pt_net_in_elems(net) * 4);
            if (op->kind == PT_OP_FWD && wk->stage == 2) {
                CHECK(e->loss_count == rows && e->loss_sum > 0);
                loss += e->loss_sum;
                count += e->loss_count;
            }
            CHECK(e->iteration == 0);
        }
    }
    CHECK(count == (int64_t)c.mb_size * c.mb_count);
    CHECK_NEAR(loss / (double)count, pt_pipeline_window_loss(r.pp, 0), 1e-6);
    ec_run_free(&r);
    pt_dataset_free(&ds);
}

static void test_transports(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    ec_case c = small_case(PT_SCHED_PIPESGD);
    c.stages = 3;
    c.cuts = cuts3;
    c.replicas = mid2;
    pt_program prog = {0};
    REQUIRE(ec_program(&c, 8, &prog) == 0);
    float *w[3] = {0};
    int64_t n = 0;
    for (int t = 0; t < 3; t++) {
        pt_pipeline_config pc = {.spec = &spec,
                                 .prog = &prog,
                                 .optim = ec_optim(PT_OPTIM_SGD),
                                 .init_seed = INIT_SEED,
                                 .data = ds,
                                 .data_seed = DATA_SEED,
                                 .timeout_ms = 20000,
                                 .transport = (pt_transport)t};
        pt_pipeline *pp = NULL;
        pt_error err = {0};
        int rc = pt_pipeline_create(&pc, &pp, &err);
        CHECK_MSG(rc == 0, "transport %d: %s", t, err.msg);
        if (rc == 0 && (rc = pt_pipeline_run(pp, 0, &err)) < 0)
            CHECK_MSG(0, "transport %d: %s", t, err.msg);
        if (rc == 0) {
            pt_net *net = pt_pipeline_net(pp, 1); /* a replica of the middle stage */
            n = pt_net_param_count(net);
            w[t] = malloc((size_t)n * sizeof(float));
            memcpy(w[t], pt_net_params(net), (size_t)n * sizeof(float));
        }
        pt_pipeline_destroy(&pp);
    }
    /* the ipc pipeline removed its socket files */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "pt-pipe-%ld-", (long)getpid());
    DIR *dir = opendir("/tmp");
    int left = 0;
    for (struct dirent *de; dir && (de = readdir(dir));)
        left += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (dir)
        closedir(dir);
    CHECK_MSG(left == 0, "%d ipc socket files left in /tmp", left);
    CHECK(w[0] && w[1] && w[2]);
    if (w[0] && w[1] && w[2]) {
        CHECK(memcmp(w[0], w[1], (size_t)n * sizeof(float)) == 0);
        CHECK(memcmp(w[0], w[2], (size_t)n * sizeof(float)) == 0);
    }
    for (int t = 0; t < 3; t++)
        free(w[t]);
    pt_program_release(&prog);
    pt_dataset_free(&ds);
}

static void test_feed(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    pt_feed *feed = NULL;
    pt_error err = {0};
    /* 7 x 4 = 28 samples per global batch: 3 per epoch of 96, the rest skipped */
    REQUIRE(pt_feed_create(ds, DATA_SEED, 7, 4, &feed, &err) == 0);
    CHECK(pt_feed_batches_per_epoch(feed) == 3);
    int64_t idx[28];
    for (int64_t t = 0; t < 7; t++) {
        ec_batch_indices(SYNTH_COUNT, 28, t, idx);
        int same = 1;
        for (int mb = 0; mb < 4; mb++)
            for (int r = 0; r < 7; r++)
                same &= pt_feed_sample(feed, t, mb, r) == idx[mb * 7 + r];
        CHECK_MSG(same, "global batch %lld differs", (long long)t);
    }
    /* the loader refuses rows outside the micro-batch */
    pt_exec_feed f = pt_feed_as_exec(feed);
    float x[8 * MLP_IN];
    CHECK(f.load(f.ctx, 0, 0, 0, 8, x, NULL, &err) == PT_ERANGE);
    CHECK(f.load(f.ctx, 0, 4, 0, 1, x, NULL, &err) == PT_ERANGE);
    pt_feed_destroy(&feed);
    CHECK(pt_feed_create(ds, DATA_SEED, 50, 2, &feed, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "fewer than one global batch");
    pt_dataset_free(&ds);
}

/* pt_net_recompute: a recompute followed by the backward gives the gradients
 * of a net that keeps its activations, also when another slot's recompute
 * overwrote the shared block in between (backward then reruns it). */
static void test_net_recompute(void)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = ec_data(&spec);
    REQUIRE(ds);
    int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    ec_batch b;
    ec_load(ds, idx, 8, &b);
    pt_net *net[2] = {0};
    for (int k = 0; k < 2; k++) {
        pt_net_config nc = pt_net_config_default(&spec);
        nc.max_batch = 4;
        nc.max_slots = 2;
        nc.recompute = k;
        nc.seed = INIT_SEED;
        REQUIRE(pt_net_create(&spec, &nc, &net[k], NULL) == 0);
        for (int s = 0; s < 2; s++)
            REQUIRE(pt_net_forward(net[k], s, NULL, b.x + s * 4 * MLP_IN, 4, b.labels + s * 4, NULL,
                                   NULL) == 0);
    }
    CHECK(pt_net_recompute(net[1], 0, NULL) == 0);
    CHECK(pt_net_backward(net[1], 0, NULL, NULL, NULL, NULL) == 0);
    CHECK(pt_net_recompute(net[1], 0, NULL) == PT_ESTATE); /* no longer in flight */
    CHECK(pt_net_recompute(net[0], 1, NULL) == 0);         /* no-op without recompute */
    CHECK(pt_net_backward(net[0], 0, NULL, NULL, NULL, NULL) == 0);
    int64_t n = pt_net_param_count(net[0]);
    CHECK(memcmp(pt_net_grads(net[0]), pt_net_grads(net[1]), (size_t)n * sizeof(float)) == 0);
    /* slot 1: recompute, another forward clobbers the block, backward reruns */
    CHECK(pt_net_recompute(net[1], 1, NULL) == 0);
    REQUIRE(pt_net_forward(net[1], 0, NULL, b.x, 4, b.labels, NULL, NULL) == 0);
    CHECK(pt_net_backward(net[1], 1, NULL, NULL, NULL, NULL) == 0);
    CHECK(pt_net_backward(net[0], 1, NULL, NULL, NULL, NULL) == 0);
    CHECK(memcmp(pt_net_grads(net[0]), pt_net_grads(net[1]), (size_t)n * sizeof(float)) == 0);
    CHECK(pt_net_release(net[1], 0) == 0);
    pt_net_destroy(&net[0]);
    pt_net_destroy(&net[1]);
    ec_batch_free(&b);
    pt_dataset_free(&ds);
}

PT_TEST_MAIN({"net_recompute", test_net_recompute}, {"timeout_and_reset", test_timeout_and_reset},
             {"bad_programs", test_bad_programs}, {"manual_worker", test_manual_worker},
             {"events", test_events}, {"transports", test_transports}, {"feed", test_feed})
