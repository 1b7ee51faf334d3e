/* Predicted vs measured memory, cross-checked: for every schedule kind and a
 * few (S, M, replication, recompute) cases, on a small MLP and on the shipped
 * fmnist-mlp-deep and gpt-tiny, the program is simulated (planner/simulate.h)
 * with the profile `pipetop profile` records (input and layer outputs:
 * per-sample floats from pt_net_layer_elems x 4 x rows; parameters: each
 * layer's parameter count x 4; saved and scratch bytes read off each layer's
 * arena by pt_net_layer_memory, a split backward's keep bytes by
 * pt_net_layer_keep), then run by the in-process pipeline
 * (runtime/pipeline.h), and per worker:
 *
 *   in-flight micro-batches  predicted peak == most FWDs without their BWD in
 *                            the executor's events == the net slots the
 *                            executor's dry run asked for;
 *   weight versions          predicted peak == the executor's versions_peak;
 *   STASH, WEIGHTS, GRADS,   predicted peak == the arena's peak, exactly;
 *   OPTIM, COMM
 *   ACTS                     predicted peak == the arena's peak, exactly when
 *                            every region is a multiple of 64 bytes.
 *
 * ACTS holds the slots of the micro-batches in flight (input, output, inner
 * layers' outputs, saved bytes, labels) and the backward scratch laid out at
 * create. Each region of a slot and of the scratch is 64-byte aligned; the
 * exact cases use rows that are multiples of 16 samples so the padding is
 * zero (gpt-tiny's regions are multiples of 16 floats at any rows), and one
 * case with 2-sample rows checks the relation within the padding bound.
 * Every case also meets issue 10's bound: within 10 % in every category.
 *
 * The analytic model (pt_cost_stage_memory) gives the same figures as the
 * simulator (tests/planner/cost_test.c), so it is also checked here; and the
 * analytic profile's saved and scratch bytes (planner/analytic.h) equal the
 * measured ones for every layer of gpt-tiny and of the small GPT. */
#include "planner/analytic.h"
#include "planner/cost.h"
#include "planner/simulate.h"
#include "tests/runtime/exec_common.h"

#define FLOAT_BYTES  4
#define SAMPLE_COUNT 512 /* of the synthetic sets: a global batch of 5 x 32 fits */
#define ALIGN_BYTES  (PT_LAYER_ALIGN_FLOATS * FLOAT_BYTES)
#define ISSUE_TOL    0.10 /* issue 10: predicted within 10 % of measured */
#define STAGES_MAX   4
#define WINDOWS      2     /* asynchronous kinds: every peak is reached within two */
#define SMALL_STEP   1e-3f /* of the executor tests' learning rates */

/* A model under test: its spec, a data set for it and where S stages cut it. */
typedef struct model {
    pt_model_spec *spec; /* loaded (owned) or a static one */
    int owned;
    int bounded; /* held to issue 10's 10 %: the shipped models (the small MLP's
                    regions are so small that their padding alone can pass it) */
    pt_dataset *data;
    const int *cuts[STAGES_MAX + 1]; /* by stage count */
} model;

static const int cuts8_1[] = {0, 8}, cuts8_2[] = {0, 4, 8}, cuts8_3[] = {0, 2, 5, 8},
                 cuts8_4[] = {0, 2, 4, 6, 8};
static const int cuts34_1[] = {0, 34}, cuts34_2[] = {0, 17, 34}, cuts34_3[] = {0, 12, 23, 34},
                 cuts34_4[] = {0, 9, 17, 26, 34};

static void model_cuts(model *m)
{
    int n = m->spec->layer_count;
    const int *c8[] = {NULL, cuts8_1, cuts8_2, cuts8_3, cuts8_4};
    const int *c34[] = {NULL, cuts34_1, cuts34_2, cuts34_3, cuts34_4};
    for (int k = 1; k <= STAGES_MAX; k++)
        m->cuts[k] = n == 8 ? c8[k] : n == 34 ? c34[k] : NULL;
}

static pt_model_spec small_mlp;

static model model_small_mlp(void)
{
    model m = {0};
    small_mlp = ec_mlp();
    m.spec = &small_mlp;
    pt_dataset_synth_class_new(SAMPLE_COUNT, MLP_IN, MLP_CLASSES, DATA_SEED, PT_DATA_TRAIN, &m.data,
                               NULL);
    return m;
}

/* A shipped model from models/, with synthetic data of its shape. */
static model model_shipped(const char *name)
{
    model m = {0};
    pt_error err = {0};
    if (pt_model_spec_find(name, &m.spec, &err) < 0) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return m;
    }
    m.owned = m.bounded = 1;
    const pt_layer_spec *tail = &m.spec->layers[m.spec->layer_count - 1];
    if (m.spec->input_kind == PT_INPUT_TOKENS)
        pt_dataset_synth_tokens_new(SAMPLE_COUNT, m.spec->input[0], m.spec->layers[0].vocab,
                                    DATA_SEED, PT_DATA_TRAIN, &m.data, &err);
    else
        pt_dataset_synth_class_new(SAMPLE_COUNT, pt_model_spec_input_elems(m.spec), tail->classes,
                                   DATA_SEED, PT_DATA_TRAIN, &m.data, &err);
    return m;
}

static void model_free(model *m)
{
    if (m->owned)
        pt_model_spec_free(&m->spec);
    pt_dataset_free(&m->data);
}

/* The profile `pipetop profile` records of spec at `mb` samples per
 * micro-batch, times made up: its real byte sizes. */
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
        pt_error err = {0};
        int rc = pt_net_layer_memory(spec, l, mb, NULL, &L->saved_bytes, &L->scratch_bytes, &err);
        CHECK_MSG(rc == 0, "%s layer %d: %s", spec->name, l, err.msg);
        rc = pt_net_layer_keep(spec, l, mb, NULL, &L->keep_bytes, &err);
        CHECK_MSG(rc == 0, "%s layer %d: %s", spec->name, l, err.msg);
    }
    pt_net_destroy(&whole);
    return p;
}

/* Most micro-batches forwarded and not yet backwarded, from the events. */
static int inflight_peak(const ec_events *e, int w)
{
    int cur = 0, most = 0;
    for (int i = 0; i < e->n[w]; i++) {
        int k = e->ev[w][i].kind;
        cur += (k == PT_OP_FWD) - (k == PT_OP_BWD || k == PT_OP_BWD_WEIGHT);
        if (cur > most)
            most = cur;
    }
    return most;
}

static double rel_err(int64_t predicted, int64_t measured)
{
    if (measured == 0)
        return predicted == 0 ? 0 : INFINITY;
    return fabs((double)(predicted - measured)) / (double)measured;
}

/* Worst relative error of ACTS and of the total seen so far, per model. */
static double worst_acts, worst_total;

/* Checks one worker of a simulated and run case. */
static void check_worker(const ec_case *c, const model *md, const pt_plan *plan,
                         const pt_cost *cost, const pt_program *prog, const pt_sim_result *res,
                         pt_pipeline *pp, const ec_events *events, int w, int exact)
{
    const pt_model_spec *spec = md->spec;
    const pt_worker *x = &prog->workers[w];
    const pt_sim_worker *sw = &res->workers[w];
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
              "%s: worker %d: predicted %d weight versions, held %d", c->name, w, sw->peak_versions,
              er.versions_peak);

    /* the analytic model agrees with the simulator */
    pt_mem_query q = {plan->schedule,
                      plan->policy,
                      plan->vertical_sync,
                      plan->optimizer.kind,
                      prog->stage_count,
                      x->stage,
                      x->first,
                      x->last,
                      rows,
                      prog->mb_per_window,
                      x->recompute,
                      prog->chunks};
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

    /* ACTS: the slots in flight and the backward scratch */
    int64_t predicted = sw->peak.bytes[PT_MEM_ACTS], measured = st.peak[PT_MEM_ACTS];
    CHECK(m.bytes[PT_MEM_ACTS] == predicted);
    CHECK(predicted > 0);
    /* every region of a slot (input, output, each inner layer's output and saved
     * area, labels), of the recompute block and of the scratch (one input
     * gradient per layer and the widest layer scratch) rounds up by less than
     * 64 bytes; a residual nests a few more (its body's regions) */
    int64_t regions = 0;
    for (int l = x->first; l < x->last; l++)
        regions +=
            4 + (spec->layers[l].kind == PT_LAYER_RESIDUAL ? 3 * spec->layers[l].body_count : 0);
    int64_t pad = exact ? 0 : (int64_t)(K + 2) * (regions + 2) * ALIGN_BYTES;
    int64_t d = measured - predicted;
    CHECK_MSG(d >= 0 && d <= pad,
              "%s: worker %d (stage %d, layers [%d,%d), %d rows, K %d%s): ACTS predicted %lld, "
              "measured %lld: difference %lld outside [0, %lld]",
              c->name, w, x->stage, x->first, x->last, rows, K, x->recompute ? ", recompute" : "",
              (long long)predicted, (long long)measured, (long long)d, (long long)pad);
    double e = rel_err(predicted, measured);
    CHECK_MSG(!md->bounded || e <= ISSUE_TOL,
              "%s: worker %d: ACTS predicted %lld, measured %lld: %.1f %% off", c->name, w,
              (long long)predicted, (long long)measured, 100 * e);
    if (e > worst_acts)
        worst_acts = e;
    /* the running total: the runtime's allocation order is the program's, so its
     * peak is the simulator's up to the padding */
    int64_t dt = st.total_peak - sw->peak.total;
    CHECK_MSG(dt >= 0 && dt <= pad, "%s: worker %d: total peak predicted %lld, measured %lld",
              c->name, w, (long long)sw->peak.total, (long long)st.total_peak);
    double et = rel_err(sw->peak.total, st.total_peak);
    if (et > worst_total)
        worst_total = et;
    if (getenv("EC_VERBOSE"))
        printf("  %-40s w%d s%d rows %2d K %d V %d: acts %9lld / %9lld, total %9lld / %9lld\n",
               c->name, w, x->stage, rows, K, sw->peak_versions, (long long)predicted,
               (long long)measured, (long long)sw->peak.total, (long long)st.total_peak);
}

/* Simulates and runs case c on model md; `exact`: rows are multiples of the alignment. */
static void check_case(const ec_case *c, const model *md, const pt_profile *pf, int exact)
{
    const pt_model_spec *spec = md->spec;
    pt_plan *plan = ec_plan(c, spec->layer_count);
    pt_link link = {1e9, 1e-6};
    pt_topology *topo = pt_topology_uniform(1, 16, (int64_t)1 << 40, link, link);
    REQUIRE(md->data && pf && plan && topo);
    pt_cost *cost = NULL;
    pt_sim *sim = NULL;
    pt_program prog = {0};
    pt_sim_result res;
    pt_error err = {0};
    REQUIRE(pt_cost_new(pf, topo, &cost, &err) == 0 && pt_sim_new(&sim) == 0);
    int sync = pt_sched_kind_has(c->kind, PT_SCHED_SYNCHRONOUS);
    pt_sched_opts o = {.windows = sync ? 0 : c->windows};
    int rc = pt_sim_plan(sim, plan, cost, &o, &prog, &res, &err);
    CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    ec_events *events = ec_events_new();
    pt_pipeline *pp = NULL;
    if (rc == 0) {
        /* memory does not depend on the values; a small step keeps the 17 linear
         * layers of fmnist-mlp-deep finite on synthetic data (NaN would reach the
         * softmax's exp, which the sanitizer build refuses) */
        pt_optim_spec optim = ec_optim(c->optim);
        optim.lr *= SMALL_STEP;
        pt_pipeline_config pc = {.spec = spec,
                                 .prog = &prog,
                                 .optim = optim,
                                 .init_seed = INIT_SEED,
                                 .data = md->data,
                                 .data_seed = DATA_SEED,
                                 .timeout_ms = 20000,
                                 .on_op = ec_on_op,
                                 .user = events,
                                 .shm_ring_bytes = ec_ring_bytes(spec, c->mb_size)};
        rc = pt_pipeline_create(&pc, &pp, &err);
        CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    }
    if (rc == 0) {
        rc = pt_pipeline_run(pp, 0, &err);
        CHECK_MSG(rc == 0, "%s: %s", c->name, err.msg);
    }
    for (int w = 0; rc == 0 && w < prog.worker_count; w++)
        check_worker(c, md, plan, cost, &prog, &res, pp, events, w, exact);
    pt_pipeline_destroy(&pp);
    ec_events_free(events);
    pt_program_release(&prog);
    pt_sim_free(&sim);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    pt_plan_free(&plan);
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
    {PT_SCHED_ZB_H1, 'A', 0, "zb-h1"},
    {PT_SCHED_ZB_H2, 'A', 0, "zb-h2"},
    {PT_SCHED_1F1B_GW, 'A', 0, "1f1b-gw"},
};
#define VARIANTS (int)(sizeof variants / sizeof variants[0])

/* Plan shapes: rows of every replica a multiple of 16 samples (exact). */
typedef struct shape {
    const char *name;
    int stages;
    const int *replicas, *recompute;
    int mb_size, mb_count;
    pt_optim_kind optim;
} shape;

/* Shape number `index` of a run: the small MLP runs every variant on it, the
 * shipped models every other one (alternating with the index, so each
 * variant still meets two or three shapes), which halves the sanitizer
 * build's run. */
static void run_shape(const shape *sh, int index, const model *md, int exact)
{
    REQUIRE(md->spec && md->cuts[sh->stages]);
    pt_profile *pf = real_profile(md->spec, sh->mb_size); /* the same for every variant */
    REQUIRE(pf);
    for (int v = 0; v < VARIANTS; v++) {
        if ((variants[v].kind == PT_SCHED_2BW && sh->mb_count < sh->stages) ||
            (md->owned && (v + index) % 2))
            continue;
        char name[128];
        snprintf(name, sizeof name, "%s: %s, %s", md->spec->name, variants[v].name, sh->name);
        ec_case c = {.name = name,
                     .kind = variants[v].kind,
                     .policy = variants[v].policy,
                     .vsync = variants[v].vsync,
                     .stages = sh->stages,
                     .cuts = md->cuts[sh->stages],
                     .replicas = sh->replicas,
                     .recompute = sh->recompute,
                     .mb_size = sh->mb_size,
                     .mb_count = sh->mb_count,
                     .windows = WINDOWS,
                     .optim = sh->optim};
        check_case(&c, md, pf, exact);
    }
    pt_profile_free(&pf);
}

static const shape four_stages[] = {
    {"S=4 M=4", 4, NULL, NULL, 16, 4, PT_OPTIM_SGD},
    {"S=4 M=6 recompute adam", 4, NULL, (const int[]){1, 1, 1, 1}, 16, 6, PT_OPTIM_ADAM},
};
static const shape replicated[] = {
    {"S=3 M=3 middle x2 recompute", 3, (const int[]){1, 2, 1}, (const int[]){0, 1, 0}, 32, 3,
     PT_OPTIM_SGD},
    {"S=2 M=5 first x2 recompute adam", 2, (const int[]){2, 1}, (const int[]){1, 1}, 32, 5,
     PT_OPTIM_ADAM},
    {"S=1 M=2 x2", 1, (const int[]){2}, NULL, 32, 2, PT_OPTIM_SGD},
};
/* 2-sample rows: the slot's regions are padded, the relation holds within it. */
static const shape padded[] = {
    {"S=2 M=3 second x3 recompute, 6 samples", 2, (const int[]){1, 3}, (const int[]){0, 1}, 6, 3,
     PT_OPTIM_SGD},
};
#define COUNT(a) (int)(sizeof(a) / sizeof(a)[0])

/* Every shape on the small MLP; the shipped models skip the second four-stage
 * one (recompute and adam are covered by the replicated shapes). */
static void run_all(model *md, int with_padded)
{
    model_cuts(md);
    worst_acts = worst_total = 0;
    int index = 0;
    for (int i = 0; i < COUNT(four_stages); i++)
        if (i == 0 || !md->owned)
            run_shape(&four_stages[i], index++, md, 1);
    for (int i = 0; i < COUNT(replicated); i++)
        run_shape(&replicated[i], index++, md, 1);
    for (int i = 0; with_padded && i < COUNT(padded); i++)
        run_shape(&padded[i], index++, md, 0);
    printf("  %s: worst ACTS error %.2f %%, worst total error %.2f %%\n",
           md->spec ? md->spec->name : "?", 100 * worst_acts, 100 * worst_total);
}

static void test_small_mlp(void)
{
    model md = model_small_mlp();
    run_all(&md, 1);
    model_free(&md);
}

/* Under AddressSanitizer (CI's sanitizer stage) fmnist-mlp-deep is left to
 * the native run: its layers (linear, ReLU, softmax cross-entropy) and every
 * shape run on the small MLP there too, at a fifth of the sanitizer's CPU
 * (18 of the test's 36 s); the shipped model's 10 % bound is arithmetic the
 * native run checks. */
#if defined(__SANITIZE_ADDRESS__)
#define PT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PT_UNDER_ASAN 1
#endif
#endif

static void test_fmnist_mlp_deep(void)
{
#ifdef PT_UNDER_ASAN
    printf("  (under AddressSanitizer: fmnist-mlp-deep runs in the native build)\n");
    return;
#endif
    model md = model_shipped("fmnist-mlp-deep");
    run_all(&md, 1);
    model_free(&md);
}

static void test_gpt_tiny(void)
{
    model md = model_shipped("gpt-tiny");
    run_all(&md, 1);
    model_free(&md);
}

/* The analytic profile's saved and scratch bytes are the measured ones, layer
 * by layer (the GPT blocks: residual attention and residual MLP), at a few
 * micro-batch sizes. */
static void check_analytic(const pt_model_spec *spec, int batch)
{
    pt_device_desc dev = {0};
    snprintf(dev.name, sizeof dev.name, "test");
    dev.peak_flops = 1e12;
    dev.mem_bandwidth = 1e11;
    dev.memory_bytes = (int64_t)1 << 30;
    pt_profile *ap = NULL;
    pt_error err = {0};
    int arc = pt_analytic_profile(spec, &dev, batch, NULL, &ap, &err);
    CHECK_MSG(arc == 0, "%s", err.msg);
    REQUIRE(arc == 0);
    int blocks = 0;
    for (int l = 0; l < spec->layer_count; l++) {
        int64_t saved = -1, scratch = -1, keep = -1;
        REQUIRE(pt_net_layer_memory(spec, l, batch, NULL, &saved, &scratch, &err) == 0);
        REQUIRE(pt_net_layer_keep(spec, l, batch, NULL, &keep, &err) == 0);
        CHECK_MSG(ap->layers[l].keep_bytes == keep,
                  "%s layer %d (%s) at batch %d: analytic keep %lld, measured %lld", spec->name, l,
                  spec->layers[l].name, batch, (long long)ap->layers[l].keep_bytes,
                  (long long)keep);
        CHECK_MSG(ap->layers[l].saved_bytes == saved && ap->layers[l].scratch_bytes == scratch,
                  "%s layer %d (%s) at batch %d: analytic saved %lld scratch %lld, measured "
                  "%lld, %lld",
                  spec->name, l, spec->layers[l].name, batch, (long long)ap->layers[l].saved_bytes,
                  (long long)ap->layers[l].scratch_bytes, (long long)saved, (long long)scratch);
        blocks += spec->layers[l].kind == PT_LAYER_RESIDUAL && saved > 0;
    }
    CHECK(blocks >= 2); /* an attention block and an MLP block, both keeping something */
    pt_profile_free(&ap);
}

static void test_analytic_matches_measured(void)
{
    pt_model_spec *gpt = NULL;
    pt_error err = {0};
    REQUIRE(pt_model_spec_find("gpt-tiny", &gpt, &err) == 0);
    check_analytic(gpt, 1);
    check_analytic(gpt, 16);
    pt_model_spec_free(&gpt);
    /* the small GPT's shapes ([5, 8], 2 heads) are not multiples of the alignment:
     * at 16 samples every region is */
    pt_model_spec small = ec_gpt();
    /* a spec file must state layernorm's eps (the runtime reads 0 as the default) */
    ec_gpt_attn[0].eps = ec_gpt_mlp[0].eps = ec_gpt_layers[3].eps = PT_LAYERNORM_EPS_DEFAULT;
    check_analytic(&small, 16);
}

/* Fused attention (issue 28): gpt-tiny with "fused": true on its attention
 * layers. The planner's memory model (the analytic profile: each attention
 * keeps its softmax statistics, no T x T probabilities) equals what each
 * layer's net measures, and a profile of those predicted bytes predicts the
 * executor's ACTS peak exactly, on a 2-stage 1F1B run and a 2-stage
 * zero-bubble run (split backward: dqkv kept over the saved Q, K, V), in
 * SGD and Adam. */
static void test_gpt_tiny_fused(void)
{
    model md = model_shipped("gpt-tiny");
    REQUIRE(md.spec);
    int fused = 0;
    for (int i = 0; i < md.spec->layer_count; i++)
        for (int j = 0; j < md.spec->layers[i].body_count; j++)
            if (md.spec->layers[i].body[j].kind == PT_LAYER_ATTENTION)
                fused += md.spec->layers[i].body[j].fused = 1;
    REQUIRE(fused >= 2);
    model_cuts(&md);
    const int mb = 16;
    check_analytic(md.spec, 1);
    check_analytic(md.spec, mb);
    pt_profile *pf = real_profile(md.spec, mb), *ap = NULL;
    pt_device_desc dev = {.peak_flops = 1e12, .mem_bandwidth = 1e11};
    pt_error err = {0};
    REQUIRE(pf && pt_analytic_profile(md.spec, &dev, mb, NULL, &ap, &err) == 0);
    for (int l = 0; l < md.spec->layer_count; l++) {
        pf->layers[l].saved_bytes = ap->layers[l].saved_bytes;
        pf->layers[l].scratch_bytes = ap->layers[l].scratch_bytes;
        pf->layers[l].keep_bytes = ap->layers[l].keep_bytes;
    }
    static const struct {
        pt_sched_kind kind;
        const char *name;
        pt_optim_kind optim;
    } runs[] = {{PT_SCHED_1F1B_FLUSH, "gpt-tiny fused: 1f1b-flush S=2 M=4", PT_OPTIM_SGD},
                {PT_SCHED_ZB_H1, "gpt-tiny fused: zb-h1 S=2 M=4 adam", PT_OPTIM_ADAM}};
    worst_acts = worst_total = 0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        ec_case c = {.name = runs[i].name,
                     .kind = runs[i].kind,
                     .policy = 'A',
                     .stages = 2,
                     .cuts = md.cuts[2],
                     .mb_size = mb,
                     .mb_count = 4,
                     .windows = WINDOWS,
                     .optim = runs[i].optim};
        check_case(&c, &md, pf, 1);
    }
    printf("  gpt-tiny fused: worst ACTS error %.2f %%, worst total error %.2f %%\n",
           100 * worst_acts, 100 * worst_total);
    pt_profile_free(&ap);
    pt_profile_free(&pf);
    model_free(&md);
}

/* Interleaved: 2 devices of 2 chunks each (4 chunk stages), and with a
 * replicated rank; every chunk worker's peaks as predicted, on the small MLP
 * and on the shipped fmnist-mlp-deep and gpt-tiny (issue 10: every schedule
 * of both; layouts k_lo..k_hi: 0 unreplicated, 1 rank 0 x2). */
static void interleaved_on(model *md, int k_lo, int k_hi)
{
    model_cuts(md);
    REQUIRE(md->spec && md->cuts[4]);
    pt_profile *pf = real_profile(md->spec, 32);
    REQUIRE(pf);
    static const int first2[] = {2, 1};
    worst_acts = worst_total = 0;
    for (int k = k_lo; k <= k_hi; k++) {
        char name[128];
        snprintf(name, sizeof name, "%s: interleaved v=2, S=2 M=4%s", md->spec->name,
                 k ? " rank 0 x2" : "");
        ec_case c = {.name = name,
                     .kind = PT_SCHED_INTERLEAVED,
                     .stages = 4,
                     .cuts = md->cuts[4],
                     .replicas = k ? first2 : NULL,
                     .mb_size = 32,
                     .mb_count = 4,
                     .optim = PT_OPTIM_SGD,
                     .chunks = 2};
        check_case(&c, md, pf, 1);
    }
    printf("  %s interleaved: worst ACTS error %.2f %%, worst total error %.2f %%\n",
           md->spec->name, 100 * worst_acts, 100 * worst_total);
    pt_profile_free(&pf);
}

static void test_interleaved(void)
{
    model small = model_small_mlp(), fm = model_shipped("fmnist-mlp-deep"),
          gpt = model_shipped("gpt-tiny");
    /* both layouts on the small MLP, one each on the shipped models (the
     * sanitizer build's time) */
    interleaved_on(&small, 0, 1);
    interleaved_on(&fm, 0, 0);
    interleaved_on(&gpt, 1, 1);
    model_free(&small);
    model_free(&fm);
    model_free(&gpt);
}

PT_TEST_MAIN({"small_mlp", test_small_mlp}, {"fmnist_mlp_deep", test_fmnist_mlp_deep},
             {"gpt_tiny", test_gpt_tiny}, {"interleaved", test_interleaved},
             {"analytic_matches_measured", test_analytic_matches_measured},
             {"gpt_tiny_fused", test_gpt_tiny_fused})
