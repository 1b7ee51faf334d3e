/* Predicted vs measured memory, cross-checked: for every schedule kind and a
 * few (S, M, replication, recompute) cases on a small MLP, the program is
 * simulated (planner/simulate.h) with a profile holding the model's real byte
 * sizes (input and layer outputs: per-sample floats from pt_net_layer_elems
 * x 4 x rows; parameters: each layer's parameter count x 4), then run by the
 * in-process pipeline (runtime/pipeline.h), and per worker:
 *
 *   in-flight micro-batches  predicted peak == most FWDs without their BWD in
 *                            the executor's events == the net slots the
 *                            executor's dry run asked for;
 *   weight versions          predicted peak == the executor's versions_peak;
 *   STASH, WEIGHTS, GRADS,   predicted peak == the arena's peak, exactly;
 *   OPTIM, COMM
 *   ACTS                     predicted peak + K x label bytes == the arena's
 *                            peak - the backward scratch, exactly.
 *
 * ACTS cannot be equal outright, for two reasons the profile cannot express:
 * the net allocates a backward scratch block at create (input-gradient
 * buffers and layer temporaries for one micro-batch; measured here on a twin
 * net of the same layers and rows), and the last stage's slot also keeps the
 * int32 labels of its micro-batch (rows x labels per sample x 4 bytes, K
 * slots). The slot's regions are 64-byte aligned; the exact cases use rows
 * that are multiples of 16 samples so the padding is zero, and one case with
 * 2-sample rows checks the relation within the padding bound.
 *
 * The analytic model (pt_cost_stage_memory) gives the same figures as the
 * simulator (tests/planner/cost_test.c), so it is also checked here. */
#include "planner/cost.h"
#include "planner/simulate.h"
#include "tests/runtime/exec_common.h"

#define FLOAT_BYTES  4
#define SAMPLE_COUNT 512 /* of the synthetic set: a global batch of 5 x 32 fits */
#define ALIGN_BYTES  (PT_LAYER_ALIGN_FLOATS * FLOAT_BYTES)

static const int cuts1[] = {0, 8};
static const int cuts2[] = {0, 4, 8};
static const int cuts3[] = {0, 2, 5, 8};
static const int cuts4[] = {0, 2, 4, 6, 8};

/* A profile of spec at `mb` samples per micro-batch with its real byte sizes. */
static pt_profile *real_profile(const pt_model_spec *spec, int mb)
{
    pt_net *whole = ec_whole_net(spec, 1);
    pt_profile *p = pt_profile_new(spec->layer_count);
    if (!whole || !p) {
        pt_net_destroy(&whole);
        pt_profile_free(&p);
        return NULL;
    }
    snprintf(p->model, sizeof p->model, "%s", spec->name);
    p->microbatch = mb;
    for (int l = 0; l < spec->layer_count; l++) {
        int64_t in, out, off, count;
        pt_net_layer_elems(whole, l, &in, &out);
        pt_net_layer_range(whole, l, &off, &count);
        if (l == 0)
            p->input_bytes = in * FLOAT_BYTES * mb;
        pt_profile_layer *L = &p->layers[l];
        snprintf(L->name, sizeof L->name, "l%d", l);
        L->fwd_ms = 1.0 + l % 3;
        L->bwd_ms = 2.0 + l % 2;
        L->recompute_ms = L->fwd_ms;
        L->act_bytes = out * FLOAT_BYTES * mb;
        L->param_bytes = count * FLOAT_BYTES;
    }
    pt_net_destroy(&whole);
    return p;
}

/* ACTS a net of layers [first,last) holds from create on without a slot in
 * flight and without recompute: the backward scratch. */
static int64_t scratch_bytes(const pt_model_spec *spec, int first, int last, int rows)
{
    pt_net_config nc = pt_net_config_default(spec);
    nc.first = first;
    nc.last = last;
    nc.max_batch = rows;
    nc.seed = INIT_SEED;
    pt_net *net = NULL;
    if (pt_net_create(spec, &nc, &net, NULL) < 0)
        return -1;
    pt_mem_stats st;
    pt_arena_stats(pt_net_arena(net), &st);
    pt_net_destroy(&net);
    return st.current[PT_MEM_ACTS];
}

/* Most micro-batches forwarded and not yet backwarded, from the events. */
static int inflight_peak(const ec_events *e, int w)
{
    int cur = 0, most = 0;
    for (int i = 0; i < e->n[w]; i++) {
        cur += (e->ev[w][i].kind == PT_OP_FWD) - (e->ev[w][i].kind == PT_OP_BWD);
        if (cur > most)
            most = cur;
    }
    return most;
}

/* Simulates and runs case c; `exact`: rows are multiples of the alignment. */
static void check_case(const ec_case *c, int exact)
{
    pt_model_spec spec = ec_mlp();
    pt_dataset *ds = NULL;
    pt_dataset_synth_class_new(SAMPLE_COUNT, MLP_IN, MLP_CLASSES, DATA_SEED, PT_DATA_TRAIN, &ds,
                               NULL);
    pt_profile *pf = real_profile(&spec, c->mb_size);
    pt_plan *plan = ec_plan(c, spec.layer_count);
    pt_link link = {1e9, 1e-6};
    pt_topology *topo = pt_topology_uniform(1, 16, (int64_t)1 << 40, link, link);
    REQUIRE(ds && pf && plan && topo);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    REQUIRE(pt_cost_new(pf, topo, &cost, &err) == 0 && pt_sim_new(&sim) == 0);
    int sync = pt_sched_kind_has(c->kind, PT_SCHED_SYNCHRONOUS);
    pt_sched_opts o = {0, sync ? 0 : c->windows};
    int rc = pt_sim_plan(sim, plan, cost, &o, &prog, &res, &err);
    CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    ec_events *events = ec_events_new();
    pt_pipeline *pp = NULL;
    if (rc == 0) {
        pt_pipeline_config pc = {.spec = &spec,
                                 .prog = &prog,
                                 .optim = ec_optim(c->optim),
                                 .init_seed = INIT_SEED,
                                 .data = ds,
                                 .data_seed = DATA_SEED,
                                 .timeout_ms = 20000,
                                 .on_op = ec_on_op,
                                 .user = events};
        rc = pt_pipeline_create(&pc, &pp, &err);
        CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    }
    if (rc == 0) {
        rc = pt_pipeline_run(pp, 0, &err);
        CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    }
    for (int w = 0; rc == 0 && w < prog.worker_count; w++) {
        const pt_worker *x = &prog.workers[w];
        const pt_sim_worker *sw = &res.workers[w];
        pt_net *net = pt_pipeline_net(pp, w);
        int rows = x->row_hi - x->row_lo, K = sw->peak_inflight;
        pt_mem_stats st;
        pt_arena_stats(pt_net_arena(net), &st);
        pt_exec_result er = pt_pipeline_result(pp, w);

        /* in flight and versions */
        int measured_k = inflight_peak(events, w);
        CHECK_MSG(K == measured_k, "%s: worker %d: predicted %d micro-batches in flight, ran %d",
                  c->name, w, K, measured_k);
        CHECK_MSG(pt_exec_get_needs(pt_pipeline_exec(pp, w))->max_slots == K,
                  "%s: worker %d: %d net slots for %d predicted in flight", c->name, w,
                  pt_exec_get_needs(pt_pipeline_exec(pp, w))->max_slots, K);
        CHECK_MSG(sw->peak_versions == er.versions_peak,
                  "%s: worker %d: predicted %d weight versions, held %d", c->name, w,
                  sw->peak_versions, er.versions_peak);

        /* the analytic model agrees with the simulator */
        pt_mem_query q = {plan->schedule,
                          plan->policy,
                          plan->vertical_sync,
                          plan->optimizer.kind,
                          prog.stage_count,
                          x->stage,
                          x->first,
                          x->last,
                          rows,
                          prog.mb_per_window,
                          x->recompute};
        pt_mem m;
        pt_cost_stage_memory(cost, &q, &m);

        /* every category but ACTS, exactly */
        const int exact_kinds[] = {PT_MEM_WEIGHTS, PT_MEM_GRADS, PT_MEM_OPTIM, PT_MEM_STASH,
                                   PT_MEM_COMM};
        for (size_t j = 0; j < sizeof exact_kinds / sizeof exact_kinds[0]; j++) {
            int k = exact_kinds[j];
            CHECK_MSG(sw->peak.bytes[k] == st.peak[k] && m.bytes[k] == st.peak[k],
                      "%s: worker %d (stage %d): %s predicted %lld (analytic %lld), measured %lld",
                      c->name, w, x->stage, pt_mem_kind_name(k), (long long)sw->peak.bytes[k],
                      (long long)m.bytes[k], (long long)st.peak[k]);
        }

        /* ACTS: + the labels of K slots on the last stage, - the backward scratch */
        int64_t labels =
            pt_net_has_loss(net) ? (int64_t)K * rows * pt_net_label_count(net) * FLOAT_BYTES : 0;
        int64_t scratch = scratch_bytes(&spec, x->first, x->last, rows);
        int64_t predicted = sw->peak.bytes[PT_MEM_ACTS];
        int64_t measured = st.peak[PT_MEM_ACTS] - scratch;
        CHECK(m.bytes[PT_MEM_ACTS] == predicted);
        CHECK(scratch > 0 && predicted > 0);
        /* every region of a slot (input, output, each inner layer's output, labels)
         * and of the recompute block rounds up by less than 64 bytes */
        int64_t pad = exact ? 0 : (int64_t)(K + 1) * (x->last - x->first + 2) * ALIGN_BYTES;
        if (exact) {
            CHECK_MSG(measured == predicted + labels,
                      "%s: worker %d (stage %d, %d rows, K %d%s): ACTS predicted %lld + labels "
                      "%lld, measured %lld above the scratch",
                      c->name, w, x->stage, rows, K, x->recompute ? ", recompute" : "",
                      (long long)predicted, (long long)labels, (long long)measured);
        } else {
            int64_t d = measured - predicted - labels;
            CHECK_MSG(d >= 0 && d < pad,
                      "%s: worker %d (stage %d, %d rows): ACTS measured %lld, predicted %lld + "
                      "labels %lld: padding %lld outside [0, %lld)",
                      c->name, w, x->stage, rows, (long long)measured, (long long)predicted,
                      (long long)labels, (long long)d, (long long)pad);
        }
        /* the running total never exceeds the sum of the category peaks */
        int64_t bound = scratch + labels + pad;
        for (int k = 0; k < PT_MEM_KIND_COUNT; k++)
            bound += sw->peak.bytes[k];
        CHECK(st.total_peak <= bound);
        if (getenv("EC_VERBOSE"))
            printf("  %-34s w%d s%d rows %2d K %d V %d: acts %6lld+%4lld = %6lld, stash %6lld, "
                   "comm %5lld\n",
                   c->name, w, x->stage, rows, K, sw->peak_versions, (long long)predicted,
                   (long long)labels, (long long)measured, (long long)st.peak[PT_MEM_STASH],
                   (long long)st.peak[PT_MEM_COMM]);
    }
    pt_pipeline_destroy(&pp);
    ec_events_free(events);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_plan_free(&plan);
    pt_profile_free(&pf);
    pt_dataset_free(&ds);
}

/* One schedule variant: kind, dapple policy, pipedream vertical sync. */
typedef struct variant {
    pt_sched_kind kind;
    char policy;
    int vsync;
    const char *name;
} variant;

static const variant variants[] = {
    {PT_SCHED_GPIPE, 'A', 0, "gpipe"},
    {PT_SCHED_DAPPLE, 'A', 0, "dapple A"},
    {PT_SCHED_DAPPLE, 'B', 0, "dapple B"},
    {PT_SCHED_1F1B_FLUSH, 'A', 0, "1f1b-flush"},
    {PT_SCHED_PIPEDREAM, 'A', 0, "pipedream"},
    {PT_SCHED_PIPEDREAM, 'A', 1, "pipedream vsync"},
    {PT_SCHED_2BW, 'A', 0, "2bw"},
    {PT_SCHED_PIPESGD, 'A', 0, "pipesgd"},
};
#define VARIANTS (int)(sizeof variants / sizeof variants[0])

/* Plan shapes: rows of every replica a multiple of 16 samples (exact). */
typedef struct shape {
    const char *name;
    int stages;
    const int *cuts, *replicas, *recompute;
    int mb_size, mb_count;
    pt_optim_kind optim;
} shape;

static void run_shape(const shape *sh, int exact)
{
    for (int v = 0; v < VARIANTS; v++) {
        if (variants[v].kind == PT_SCHED_2BW && sh->mb_count < sh->stages)
            continue;
        char name[96];
        snprintf(name, sizeof name, "%s, %s", variants[v].name, sh->name);
        ec_case c = {.name = name,
                     .kind = variants[v].kind,
                     .policy = variants[v].policy,
                     .vsync = variants[v].vsync,
                     .stages = sh->stages,
                     .cuts = sh->cuts,
                     .replicas = sh->replicas,
                     .recompute = sh->recompute,
                     .mb_size = sh->mb_size,
                     .mb_count = sh->mb_count,
                     .windows = 3,
                     .optim = sh->optim};
        check_case(&c, exact);
    }
}

static void test_four_stages(void)
{
    shape sh = {"S=4 M=4", 4, cuts4, NULL, NULL, 16, 4, PT_OPTIM_SGD};
    run_shape(&sh, 1);
    sh.name = "S=4 M=6 recompute adam";
    sh.recompute = (const int[]){1, 1, 1, 1};
    sh.mb_count = 6;
    sh.optim = PT_OPTIM_ADAM;
    run_shape(&sh, 1);
}

static void test_replicated(void)
{
    shape sh = {"S=3 M=3 middle x2 recompute", 3,  cuts3, (const int[]){1, 2, 1},
                (const int[]){0, 1, 0},        32, 3,     PT_OPTIM_SGD};
    run_shape(&sh, 1);
    sh = (shape){"S=2 M=5 first x2 recompute adam",
                 2,
                 cuts2,
                 (const int[]){2, 1},
                 (const int[]){1, 1},
                 32,
                 5,
                 PT_OPTIM_ADAM};
    run_shape(&sh, 1);
    sh = (shape){"S=1 M=2 x2", 1, cuts1, (const int[]){2}, NULL, 32, 2, PT_OPTIM_SGD};
    run_shape(&sh, 1);
}

/* 2-sample rows: the slot's regions are padded, the relation holds within it. */
static void test_padded(void)
{
    shape sh = {"S=2 M=3 second x3 recompute, 6 samples",
                2,
                cuts2,
                (const int[]){1, 3},
                (const int[]){0, 1},
                6,
                3,
                PT_OPTIM_SGD};
    run_shape(&sh, 0);
}

PT_TEST_MAIN({"four_stages", test_four_stages}, {"replicated", test_replicated},
             {"padded", test_padded})
