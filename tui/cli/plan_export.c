/* A plan in a PyTorch framework's terms (see plan_export.h). */
#include "tui/cli/plan_export.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "planner/interleave.h"
#include "planner/schedule.h"
#include "tui/cli/inputs.h"

#define KEY_MAX     PT_NAME_MAX
#define CELL_MAX    32
#define STEP_LIMIT  (1 << 22) /* time steps of a CSV: a bound no real plan reaches */
#define KIND_BIT(k) (1u << (k))

/* What each framework runs (docs/torch.md, "What each framework takes"). */
typedef struct fw_info {
    const char *name, *display;
    int names;         /* names layers by FQN: needs the profile */
    unsigned kinds;    /* synchronous kinds it runs, KIND_BIT(pt_sched_kind); 0: every one */
    int policy_a_only; /* dapple runs only as policy A (1F1B's warm-up) */
    int recompute;     /* 0: none at all; 1: every stage or none */
    const char *limit; /* what it runs, in words */
    /* writes its file (pt_fw_write) */
    int (*write)(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                 pt_error *err);
} fw_info;

static int write_torch(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                       pt_error *err);
static int write_torchtitan(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                            pt_error *err);
static int write_deepspeed(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                           pt_error *err);
static int write_megatron(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                          pt_error *err);

static const fw_info fws[PT_FW_COUNT] = {
    {"torch", "torch.distributed.pipelining", 1, 0, 0, 0,
     "its schedules are synchronous (a flush every step); the CSV has no recompute action",
     write_torch},
    {"torchtitan", "torchtitan", 1, 0, 0, 1,
     "it runs torch's synchronous schedules; activation checkpointing is for every layer or none",
     write_torchtitan},
    {"deepspeed", "DeepSpeed's PipelineModule", 0,
     KIND_BIT(PT_SCHED_1F1B_FLUSH) | KIND_BIT(PT_SCHED_DAPPLE), 1, 1,
     "it runs 1F1B with a flush (TrainSchedule) on one stage per rank, the same data-parallel "
     "degree on every stage",
     write_deepspeed},
    {"megatron", "Megatron-Core", 1,
     KIND_BIT(PT_SCHED_1F1B_FLUSH) | KIND_BIT(PT_SCHED_DAPPLE) | KIND_BIT(PT_SCHED_INTERLEAVED), 1,
     1, "it runs 1F1B and interleaved 1F1B, cut between transformer layers", write_megatron},
};

int pt_fw_parse(const char *name, pt_fw *out, pt_error *err)
{
    for (int i = 0; i < PT_FW_COUNT; i++)
        if (!strcmp(name, fws[i].name)) {
            *out = (pt_fw)i;
            return 0;
        }
    return pt_error_set(err, PT_ENOTFOUND,
                        "--to: unknown framework \"%s\" (torch, torchtitan, deepspeed, megatron)",
                        name);
}

const char *pt_fw_name(pt_fw fw)
{
    return fws[fw].name;
}

int pt_fw_needs_names(pt_fw fw)
{
    return fws[fw].names;
}

static void change(pt_fw_changes *ch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void change(pt_fw_changes *ch, const char *fmt, ...)
{
    if (ch->count >= PT_FW_CHANGES_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ch->line[ch->count++], PT_FW_CHANGE_MAX, fmt, ap);
    va_end(ap);
}

/* ---- the rules: each finds what fw cannot express, refuses it or (flatten)
 * changes the plan, saying what changed ---------------------------------------------- */

typedef struct fit_ctx {
    const fw_info *f;
    pt_plan *plan; /* the copy being changed */
    const pt_profile *profile;
    int flatten;
    pt_fw_changes *ch;
    pt_error *err;
} fit_ctx;

static int refuse(fit_ctx *x, const char *field, const char *what, const char *flat)
{
    return pt_error_set(x->err, PT_EINVAL, "%s: %s; %s: %s%s%s%s", field, what, x->f->display,
                        x->f->limit, flat ? " (--flatten: " : "", flat ? flat : "",
                        flat ? ")" : "");
}

static int set_kind(fit_ctx *x, pt_sched_kind kind)
{
    x->plan->schedule = kind;
    x->plan->policy = 'A';
    x->plan->vertical_sync = 0;
    if (x->plan->replication == PT_REPL_ROUND_ROBIN &&
        !pt_sched_kind_has(kind, PT_SCHED_OPT_ROUND_ROBIN)) {
        change(x->ch,
               "schedule.replication: round-robin -> split-concat: %s splits every micro-batch "
               "over a stage's replicas",
               pt_sched_kind_name(kind));
        x->plan->replication = PT_REPL_SPLIT_CONCAT;
    }
    return 0;
}

static int rule_sync(fit_ctx *x)
{
    pt_plan *p = x->plan;
    if (pt_sched_kind_has(p->schedule, PT_SCHED_SYNCHRONOUS))
        return 0;
    char what[128];
    snprintf(what, sizeof what, "\"%s\" is asynchronous (no flush, stale weights)",
             pt_sched_kind_name(p->schedule));
    if (!x->flatten)
        return refuse(x, "schedule.kind", what, "1f1b-flush");
    change(x->ch,
           "schedule.kind: %s -> 1f1b-flush: %s flushes every step, so the run trains with fresh "
           "weights and gives up the asynchronous kind's throughput",
           pt_sched_kind_name(p->schedule), x->f->display);
    return set_kind(x, PT_SCHED_1F1B_FLUSH);
}

/* An interleaved plan re-cut into one chunk per device on the profile's
 * costs (deepspeed). */
static int unchunk(fit_ctx *x)
{
    if (!x->profile)
        return pt_error_set(x->err, PT_EINVAL,
                            "schedule.chunks: re-cutting %d chunks per device into one needs the "
                            "profile's costs: give --profile",
                            x->plan->chunks);
    pt_topology *topo = pt_inputs_local_topology(pt_inputs_plan_devices(x->plan));
    pt_cost *cost = NULL;
    pt_plan *one = NULL;
    int rc = topo ? pt_cost_new(x->profile, topo, &cost, x->err)
                  : pt_error_set(x->err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = pt_plan_rechunk(x->plan, cost, PT_SCHED_1F1B_FLUSH, 1, &one, x->err);
    pt_cost_free(&cost);
    pt_topology_free(&topo);
    if (rc < 0)
        return rc;
    change(x->ch,
           "schedule: interleaved (%d chunks per device) -> 1f1b-flush, stages: %d chunks -> %d "
           "stages re-cut on the profile's costs: %s runs one stage per rank",
           x->plan->chunks, x->plan->stage_count, one->stage_count, x->f->display);
    pt_plan_free(&x->plan);
    x->plan = one;
    return 0;
}

static int rule_kind(fit_ctx *x)
{
    pt_plan *p = x->plan;
    int kind_ok = !x->f->kinds || (x->f->kinds & KIND_BIT(p->schedule));
    int policy_ok = !(x->f->policy_a_only && p->schedule == PT_SCHED_DAPPLE && p->policy != 'A');
    if (kind_ok && policy_ok)
        return 0;
    char what[128];
    if (!kind_ok)
        snprintf(what, sizeof what, "\"%s\"", pt_sched_kind_name(p->schedule));
    else
        snprintf(what, sizeof what, "policy B (2(S-i)-1 warm-up forwards)");
    const char *field = kind_ok ? "schedule.policy" : "schedule.kind";
    if (!x->flatten)
        return refuse(x, field, what, "1f1b-flush");
    if (p->schedule == PT_SCHED_INTERLEAVED)
        return unchunk(x);
    change(x->ch, "%s: %s -> 1f1b-flush: %s runs 1F1B with a flush (S-i warm-up forwards)", field,
           what, x->f->display);
    return set_kind(x, PT_SCHED_1F1B_FLUSH);
}

static int rule_replicas(fit_ctx *x)
{
    pt_plan *p = x->plan;
    int lo = p->stages[0].replica_count, hi = lo, at = 0;
    for (int s = 1; s < p->stage_count; s++) {
        int r = p->stages[s].replica_count;
        if (r != lo && !at)
            at = s;
        lo = r < lo ? r : lo;
        hi = r > hi ? r : hi;
    }
    if (lo == hi)
        return 0;
    char field[48], what[128];
    snprintf(field, sizeof field, "stages[%d].replicas", at);
    snprintf(what, sizeof what, "stages run %d to %d replicas", lo, hi);
    if (!x->flatten) {
        char flat[64];
        snprintf(flat, sizeof flat, "every stage on its first %d replicas", lo);
        return pt_error_set(x->err, PT_EINVAL,
                            "%s: %s; %s gives every pipeline stage the same data-parallel degree "
                            "(--flatten: %s)",
                            field, what, x->f->display, flat);
    }
    for (int s = 0; s < p->stage_count; s++)
        if (p->stages[s].replica_count > lo) {
            change(x->ch,
                   "stages[%d].replicas: %d -> %d (its first %d devices): %s gives every stage the "
                   "same data-parallel degree, the smallest the plan has",
                   s, p->stages[s].replica_count, lo, lo, x->f->display);
            p->stages[s].replica_count = lo;
        }
    return 0;
}

static int rule_split_rows(fit_ctx *x)
{
    pt_plan *p = x->plan;
    int r = p->stages[0].replica_count;
    if (r <= 1 || p->microbatch_size % r == 0)
        return 0;
    int b = p->microbatch_size / r * r;
    char what[128], flat[96];
    snprintf(what, sizeof what, "%d samples do not split evenly over %d data-parallel replicas",
             p->microbatch_size, r);
    snprintf(flat, sizeof flat, "%d samples per micro-batch", b);
    if (b == 0 || !x->flatten)
        return pt_error_set(x->err, PT_EINVAL,
                            "microbatch.size: %s; %s runs one micro-batch size on every "
                            "replica%s%s%s",
                            what, x->f->display, b && !x->flatten ? " (--flatten: " : "",
                            b && !x->flatten ? flat : "", b && !x->flatten ? ")" : "");
    change(x->ch,
           "microbatch.size: %d -> %d: %s runs %d samples on each of %d replicas (the global batch "
           "goes from %d to %d)",
           p->microbatch_size, b, x->f->display, b / r, r, p->microbatch_size * p->microbatch_count,
           b * p->microbatch_count);
    p->microbatch_size = b;
    return 0;
}

static int rule_recompute(fit_ctx *x)
{
    pt_plan *p = x->plan;
    int on = 0, first = -1;
    for (int s = 0; s < p->stage_count; s++)
        if (p->stages[s].recompute) {
            on++;
            first = first < 0 ? s : first;
        }
    if (on == 0 || (x->f->recompute && on == p->stage_count))
        return 0;
    char field[48], what[96];
    snprintf(field, sizeof field, "stages[%d].recompute", first);
    snprintf(what, sizeof what, "%d of %d stages recompute", on, p->stage_count);
    int all = x->f->recompute; /* flatten: every stage recomputes, or (torch) none */
    if (!x->flatten)
        return refuse(x, field, what, all ? "every stage recomputes" : "no stage recomputes");
    for (int s = 0; s < p->stage_count; s++)
        p->stages[s].recompute = all;
    if (all)
        change(x->ch,
               "stages[*].recompute: %d of %d -> every stage: %s checkpoints every layer or "
               "none (more compute, less memory than the plan)",
               on, p->stage_count, x->f->display);
    else
        change(x->ch,
               "stages[*].recompute: %d of %d -> none: the CSV has no recompute action; wrap "
               "those stages' modules in torch.utils.checkpoint yourself",
               on, p->stage_count);
    return 0;
}

/* ---- Megatron: the layers' roles and the transformer layer each belongs to -------- */

/* The transformer layer an FQN belongs to: its name up to the first
 * component that is a number ("layers.3", "blocks.0" of "blocks.0.attn");
 * "" for a layer outside any (an embedding, a final norm, a head). */
static void block_key(const char *fqn, char *key, size_t cap)
{
    key[0] = '\0';
    const char *p = fqn;
    while (*p) {
        const char *end = strchr(p, '.');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int digits = n > 0;
        for (size_t i = 0; i < n; i++)
            digits &= p[i] >= '0' && p[i] <= '9';
        if (digits) {
            snprintf(key, cap, "%.*s", (int)(p + n - fqn), fqn);
            return;
        }
        if (!end)
            return;
        p = end + 1;
    }
}

/* role[i]: 'E' before the first transformer layer, 't' in one, 'L' after the
 * last. PT_EINVAL for a layer between transformer layers outside them. */
static int megatron_roles(const pt_profile *prof, char *role, pt_error *err)
{
    int n = prof->layer_count, first = -1, last = -1;
    char key[KEY_MAX];
    for (int i = 0; i < n; i++) {
        block_key(prof->layers[i].name, key, sizeof key);
        role[i] = key[0] ? 't' : '?';
        if (key[0]) {
            first = first < 0 ? i : first;
            last = i;
        }
    }
    for (int i = 0; i < n; i++) {
        if (role[i] != '?')
            continue;
        if (first >= 0 && i > first && i < last)
            return pt_error_set(err, PT_EINVAL,
                                "layers[%d] (\"%s\") lies between transformer layers but in none; "
                                "Megatron-Core's layout has a symbol for embedding (E), "
                                "transformer layers (t) and loss (L) only",
                                i, prof->layers[i].name);
        role[i] = first < 0 || i < first ? 'E' : 'L';
    }
    return 0;
}

/* The unit each layer belongs to, which Megatron's layout cannot cut:
 * its transformer layer's key, "E" for the layers before the first (the
 * embedding), "L" for those after the last (final norm, head and loss).
 * keys: layer_count * KEY_MAX bytes, the caller's. */
static void unit_keys(const pt_profile *prof, char (*keys)[KEY_MAX])
{
    int first = -1;
    for (int i = 0; i < prof->layer_count; i++) {
        block_key(prof->layers[i].name, keys[i], KEY_MAX);
        if (keys[i][0] && first < 0)
            first = i;
    }
    for (int i = 0; i < prof->layer_count; i++)
        if (!keys[i][0])
            snprintf(keys[i], KEY_MAX, "%s", first < 0 || i < first ? "E" : "L");
}

static int same_unit(char (*keys)[KEY_MAX], int a, int b)
{
    return !strcmp(keys[a], keys[b]);
}

/* A cut inside a unit (unit_keys) moves to its start, or, when that would
 * empty the stage before, its end. */
static int move_cut(fit_ctx *x, char (*keys)[KEY_MAX], int s)
{
    pt_plan *p = x->plan;
    const pt_profile *prof = x->profile;
    int l = p->stages[s].first, lo = l, hi = l;
    char field[48], what[192];
    snprintf(field, sizeof field, "stages[%d].layers", s);
    snprintf(what, sizeof what, "the cut before layer %d (\"%s\") is inside %s", l,
             prof->layers[l].name,
             !strcmp(keys[l], "E")   ? "the embedding"
             : !strcmp(keys[l], "L") ? "the loss head (final norm, output layer, loss)"
                                     : "a transformer layer");
    while (lo > 0 && same_unit(keys, lo - 1, lo))
        lo--;
    while (hi < p->layer_count && same_unit(keys, hi - 1, hi))
        hi++;
    int to = lo > p->stages[s - 1].first ? lo : hi;
    if (!x->flatten || to >= p->stages[s].last)
        return refuse(x, field, what, x->flatten ? NULL : "the cut moved to the unit's start");
    change(x->ch,
           "stages[%d].layers: [%d,%d) -> [%d,%d): %s cuts between transformer layers; the "
           "cut inside \"%s\" moved to %s",
           s, l, p->stages[s].last, to, p->stages[s].last, x->f->display, keys[l],
           to == lo ? "its start" : "its end");
    p->stages[s - 1].last = to;
    p->stages[s].first = to;
    return 0;
}

static int rule_blocks(fit_ctx *x)
{
    pt_plan *p = x->plan;
    char *role = malloc((size_t)p->layer_count);
    char(*keys)[KEY_MAX] = malloc((size_t)p->layer_count * KEY_MAX);
    int rc = role && keys ? megatron_roles(x->profile, role, x->err)
                          : pt_error_set(x->err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        unit_keys(x->profile, keys);
    for (int s = 1; rc == 0 && s < p->stage_count; s++)
        if (same_unit(keys, p->stages[s].first - 1, p->stages[s].first))
            rc = move_cut(x, keys, s);
    free(role);
    free(keys);
    return rc;
}

/* ---- fitting ------------------------------------------------------------------------ */

typedef int (*fit_rule)(fit_ctx *x);

int pt_fw_fit(pt_fw fw, const pt_plan *plan, const pt_profile *profile, int flatten, pt_plan **out,
              pt_fw_changes *changes, pt_error *err)
{
    *out = NULL;
    memset(changes, 0, sizeof *changes);
    if (profile && profile->layer_count != plan->layer_count)
        return pt_error_set(err, PT_EINVAL, "the profile has %d layers, the plan %d",
                            profile->layer_count, plan->layer_count);
    if (fws[fw].names && !profile)
        return pt_error_set(err, PT_EINVAL,
                            "%s names layers by their fully qualified names: give --profile (the "
                            "profile of pipetop profile --torch)",
                            fws[fw].display);
    fit_ctx x = {&fws[fw], pt_plan_clone(plan), profile, flatten, changes, err};
    if (!x.plan)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    const fit_rule rules[] = {rule_sync, rule_kind, rule_replicas, rule_split_rows, rule_recompute};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof rules / sizeof rules[0]; i++)
        rc = rules[i](&x);
    if (rc == 0 && fw == PT_FW_MEGATRON)
        rc = rule_blocks(&x);
    if (rc == 0)
        rc = pt_plan_check(x.plan, NULL, NULL, "plan", err);
    if (rc < 0) {
        pt_plan_free(&x.plan);
        return rc;
    }
    *out = x.plan;
    return 0;
}

/* ---- the per-rank schedule CSV ------------------------------------------------------ */

typedef struct action {
    int stage, mb;
    char kind; /* F, B, I, W */
} action;

static char action_letter(int op)
{
    switch (op) {
    case PT_OP_FWD:
        return 'F';
    case PT_OP_BWD:
        return 'B';
    case PT_OP_BWD_INPUT:
        return 'I';
    case PT_OP_BWD_WEIGHT:
        return 'W';
    default:
        return 0; /* not a compute action of the CSV (RECOMPUTE runs inside B) */
    }
}

/* Rank r's actions in program order (replica 0). */
static int rank_actions(const pt_program *prog, int r, action **out, int *n)
{
    int w = prog->stage_worker[r], h = pt_sched_host_of(prog, w);
    int len = pt_sched_host_len(prog, h), k = 0;
    action *a = malloc((size_t)(len > 0 ? len : 1) * sizeof *a);
    if (!a)
        return PT_ENOMEM;
    for (int i = 0; i < len; i++) {
        int oi = pt_sched_host_op(prog, h, i);
        const pt_op *op = &prog->ops[oi];
        char c = action_letter(op->kind);
        int owner = 0;
        while (owner + 1 < prog->worker_count && prog->workers[owner + 1].op_begin <= oi)
            owner++;
        if (c)
            a[k++] = (action){prog->workers[owner].stage, op->mb, c};
    }
    *out = a;
    *n = k;
    return 0;
}

/* Column of the action a needs from another stage, -2 when it needs none,
 * -1 while that one is not placed. */
static int need_col(const action *a, int S, int M, const int *fcol, const int *bcol)
{
    if (a->kind == 'F')
        return a->stage > 0 ? fcol[(a->stage - 1) * M + a->mb] : -2;
    if (a->kind == 'B' || a->kind == 'I')
        return a->stage < S - 1 ? bcol[(a->stage + 1) * M + a->mb] : -2;
    return -2;
}

typedef struct grid {
    int P, steps, cap;
    action *cell; /* [P][cap], stage -1: empty */
} grid;

static int grid_step(grid *g)
{
    if (g->steps == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        action *c = malloc((size_t)g->P * (size_t)cap * sizeof *c);
        if (!c)
            return PT_ENOMEM;
        for (int r = 0; r < g->P; r++)
            for (int t = 0; t < cap; t++)
                c[r * cap + t] = t < g->steps ? g->cell[r * g->cap + t] : (action){-1, 0, 0};
        free(g->cell);
        g->cell = c;
        g->cap = cap;
    }
    return g->steps++;
}

/* Lays the ranks' actions on lock-step time steps (see pt_fw_schedule_csv). */
static int lay_out(const pt_program *prog, action **acts, const int *n, grid *g, pt_error *err)
{
    int P = g->P, S = prog->stage_count, M = prog->mb_per_window, left = 0;
    int *fcol = malloc((size_t)S * M * sizeof *fcol), *bcol = malloc((size_t)S * M * sizeof *bcol);
    int *next = calloc((size_t)P, sizeof *next);
    int rc = fcol && bcol && next ? 0 : pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < S * M; i++)
        fcol[i] = bcol[i] = -1;
    for (int r = 0; r < P; r++)
        left += n[r];
    while (rc == 0 && left > 0) {
        int t = grid_step(g), placed = 0;
        if (t < 0 || t > STEP_LIMIT) {
            rc = pt_error_set(err, t < 0 ? PT_ENOMEM : PT_EINVAL, "schedule CSV: %s",
                              t < 0 ? "out of memory" : "too many time steps");
            break;
        }
        for (int r = 0; r < P; r++) {
            if (next[r] == n[r])
                continue;
            const action *a = &acts[r][next[r]];
            int need = need_col(a, S, M, fcol, bcol);
            if (need == -1 || need >= t)
                continue;
            g->cell[r * g->cap + t] = *a;
            if (a->kind == 'F')
                fcol[a->stage * M + a->mb] = t;
            else if (a->kind != 'W')
                bcol[a->stage * M + a->mb] = t;
            next[r]++;
            left--;
            placed++;
        }
        if (!placed) /* every rank waits for an action no rank can place */
            rc = pt_error_set(err, PT_EDEADLOCK,
                              "schedule CSV: the ranks' orders wait on each other");
    }
    free(fcol);
    free(bcol);
    free(next);
    return rc;
}

static int grid_text(const grid *g, char **text, pt_error *err)
{
    size_t cap = (size_t)g->P * (size_t)(g->steps + 1) * CELL_MAX + 1, len = 0;
    char *s = malloc(cap);
    if (!s)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int r = 0; r < g->P; r++) {
        for (int t = 0; t < g->steps; t++) {
            const action *a = &g->cell[r * g->cap + t];
            if (t > 0)
                s[len++] = ',';
            if (a->stage >= 0)
                len += (size_t)snprintf(s + len, cap - len, "%d%c%d", a->stage, a->kind, a->mb);
        }
        s[len++] = '\n';
    }
    s[len] = '\0';
    *text = s;
    return 0;
}

int pt_fw_schedule_csv(const pt_plan *plan, char **text, pt_error *err)
{
    *text = NULL;
    pt_program prog;
    memset(&prog, 0, sizeof prog);
    int rc = pt_sched_build(plan, NULL, NULL, &prog, err);
    int P = pt_plan_rank_count(plan);
    action **acts = rc == 0 ? calloc((size_t)P, sizeof *acts) : NULL;
    int *n = rc == 0 ? calloc((size_t)P, sizeof *n) : NULL;
    grid g = {P, 0, 0, NULL};
    if (rc == 0 && (!acts || !n))
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int r = 0; rc == 0 && r < P; r++)
        if (rank_actions(&prog, r, &acts[r], &n[r]) < 0)
            rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = lay_out(&prog, acts, n, &g, err);
    if (rc == 0)
        rc = grid_text(&g, text, err);
    for (int r = 0; acts && r < P; r++)
        free(acts[r]);
    free(acts);
    free(n);
    free(g.cell);
    pt_program_release(&prog);
    return rc;
}

/* ---- the frameworks' files ---------------------------------------------------------- */

/* The torch class that runs the same order without the CSV, where one does. */
static const char *torch_class(const pt_plan *p)
{
    static const struct {
        pt_sched_kind kind;
        const char *cls;
    } classes[] = {{PT_SCHED_GPIPE, "ScheduleGPipe"},
                   {PT_SCHED_1F1B_FLUSH, "Schedule1F1B"},
                   {PT_SCHED_INTERLEAVED, "ScheduleInterleaved1F1B"}};
    if (p->schedule == PT_SCHED_DAPPLE && p->policy == 'A')
        return "Schedule1F1B";
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (classes[i].kind == p->schedule)
            return classes[i].cls;
    return NULL;
}

static cJSON *stage_names(const pt_plan *p, const pt_profile *prof)
{
    cJSON *all = cJSON_CreateArray();
    for (int s = 0; all && s < p->stage_count; s++) {
        cJSON *one = cJSON_CreateArray();
        for (int l = p->stages[s].first; one && l < p->stages[s].last; l++)
            cJSON_AddItemToArray(one, cJSON_CreateString(prof->layers[l].name));
        cJSON_AddItemToArray(all, one);
    }
    return all;
}

static int write_torch(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                       pt_error *err)
{
    int P = pt_plan_rank_count(p), r = p->stages[0].replica_count;
    cJSON *o = cJSON_CreateObject(), *split = NULL, *ranks = NULL;
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "framework", "torch.distributed.pipelining");
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddNumberToObject(o, "pipeline_ranks", P);
    cJSON_AddNumberToObject(o, "stages", p->stage_count);
    cJSON_AddNumberToObject(o, "data_parallel", r);
    cJSON_AddNumberToObject(o, "microbatch_size", p->microbatch_size / r);
    cJSON_AddNumberToObject(o, "n_microbatches", p->microbatch_count);
    cJSON_AddStringToObject(o, "schedule_kind", pt_sched_kind_name(p->schedule));
    cJSON_AddStringToObject(o, "schedule_csv", csv);
    if (torch_class(p))
        cJSON_AddStringToObject(o, "schedule_class", torch_class(p));
    if ((split = cJSON_AddObjectToObject(o, "split_spec")))
        for (int s = 1; s < p->stage_count; s++)
            cJSON_AddStringToObject(split, prof->layers[p->stages[s].first].name, "BEGINNING");
    if ((ranks = cJSON_AddArrayToObject(o, "stage_to_rank")))
        for (int s = 0; s < p->stage_count; s++)
            cJSON_AddItemToArray(ranks, cJSON_CreateNumber(s % P));
    cJSON_AddItemToObject(o, "module_fqns_per_stage", stage_names(p, prof));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    fprintf(out, "%s\n", text);
    free(text);
    return 0;
}

static int write_torchtitan(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                            pt_error *err)
{
    (void)err;
    int r = p->stages[0].replica_count;
    fprintf(out,
            "# pipetop export-plan --to torchtitan: %d stages of %s on %d pipeline ranks, "
            "schedule %s\n[parallelism]\npipeline_parallel_degree = %d\n"
            "pipeline_parallel_schedule_csv = \"%s\"\npipeline_parallel_microbatch_size = %d\n"
            "data_parallel_replicate_degree = %d\nmodule_fqns_per_model_part = [\n",
            p->stage_count, p->model, pt_plan_rank_count(p), pt_sched_kind_name(p->schedule),
            pt_plan_rank_count(p), csv, p->microbatch_size / r, r);
    for (int s = 0; s < p->stage_count; s++) {
        fputs("    [", out);
        for (int l = p->stages[s].first; l < p->stages[s].last; l++)
            fprintf(out, "%s\"%s\"", l > p->stages[s].first ? ", " : "", prof->layers[l].name);
        fputs("],\n", out);
    }
    fprintf(out,
            "]\n\n[training]\nlocal_batch_size = %d\n\n[activation_checkpoint]\nmode = \"%s\"\n",
            p->microbatch_size / r * p->microbatch_count, p->stages[0].recompute ? "full" : "none");
    return 0;
}

static const char deepspeed_class[] =
    "class PipetopPipelineModule(PipelineModule):\n"
    "    \"\"\"A PipelineModule cut where the pipetop plan cuts: stage i builds layers\n"
    "    PARTS[i] .. PARTS[i+1]-1 of the layer list (DeepSpeed takes no explicit\n"
    "    boundaries itself, issue #2974). Build it with num_stages=PIPE_STAGES and\n"
    "    the layer list the profile was made of.\"\"\"\n\n"
    "    def _partition_layers(self, method=\"uniform\"):\n"
    "        if len(self._layer_specs) != PARTS[-1]:\n"
    "            raise ValueError(f\"the pipetop plan is for {PARTS[-1]} layers, this module \"\n"
    "                             f\"has {len(self._layer_specs)}\")\n"
    "        if self._topo.get_dim(\"pipe\") != PIPE_STAGES:\n"
    "            raise ValueError(f\"the pipetop plan has {PIPE_STAGES} stages\")\n"
    "        self.parts = list(PARTS)\n"
    "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
    "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n";

static int write_deepspeed(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                           pt_error *err)
{
    (void)csv;
    (void)err;
    int r = p->stages[0].replica_count;
    fprintf(
        out,
        "# pipetop export-plan --to deepspeed: the partition of a pipetop plan for DeepSpeed's\n"
        "# PipelineModule (1F1B with a flush). Import PipetopPipelineModule instead of\n"
        "# PipelineModule; the numbers below go into the DeepSpeed config.\n"
        "from deepspeed.pipe import PipelineModule\n\n"
        "PIPE_STAGES = %d\nDATA_PARALLEL = %d\nPARTS = [",
        p->stage_count, r);
    for (int s = 0; s < p->stage_count; s++)
        fprintf(out, "%d, ", p->stages[s].first);
    fprintf(out,
            "%d]\nTRAIN_MICRO_BATCH_SIZE_PER_GPU = %d\nGRADIENT_ACCUMULATION_STEPS = %d  # "
            "micro-batches per step\nTRAIN_BATCH_SIZE = %d\nACTIVATION_CHECKPOINT_INTERVAL = %d\n",
            p->layer_count, p->microbatch_size / r, p->microbatch_count,
            p->microbatch_size * p->microbatch_count, p->stages[0].recompute ? 1 : 0);
    if (prof) {
        fputs(
            "LAYER_NAMES = [  # the profile's layers, the order PipelineModule's list must have\n",
            out);
        for (int l = 0; l < p->layer_count; l++)
            fprintf(out, "    \"%s\",\n", prof->layers[l].name);
        fputs("]\n", out);
    }
    fprintf(out, "\n\n%s", deepspeed_class);
    return 0;
}

static int write_megatron(const pt_plan *p, const pt_profile *prof, const char *csv, FILE *out,
                          pt_error *err)
{
    (void)csv;
    char *role = malloc((size_t)p->layer_count);
    char(*keys)[KEY_MAX] = malloc((size_t)p->layer_count * KEY_MAX);
    int rc = role && keys ? megatron_roles(prof, role, err)
                          : pt_error_set(err, PT_ENOMEM, "out of memory");
    int r = p->stages[0].replica_count;
    if (rc < 0) {
        free(role);
        free(keys);
        return rc;
    }
    unit_keys(prof, keys);
    fprintf(out, "--pipeline-model-parallel-size %d --pipeline-model-parallel-layout \"",
            pt_plan_rank_count(p));
    for (int s = 0; s < p->stage_count; s++) {
        const pt_stage *g = &p->stages[s];
        int e = 0, l = 0;
        for (int i = g->first; i < g->last; i++) {
            e |= role[i] == 'E';
            l |= role[i] == 'L';
        }
        fputs(s ? "|" : "", out);
        fputs(e ? "E" : "", out);
        for (int i = g->first; i < g->last; i++)
            if (role[i] == 't' && (i == g->first || !same_unit(keys, i - 1, i)))
                fputc('t', out);
        fputs(l ? "L" : "", out);
    }
    fprintf(out, "\" --micro-batch-size %d --global-batch-size %d --data-parallel-size %d",
            p->microbatch_size / r, p->microbatch_size * p->microbatch_count, r);
    if (p->stages[0].recompute)
        fputs(" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
              out);
    fputc('\n', out);
    free(role);
    free(keys);
    return 0;
}

int pt_fw_write(pt_fw fw, const pt_plan *plan, const pt_profile *profile, const char *csv_name,
                FILE *out, pt_error *err)
{
    return fws[fw].write(plan, profile, csv_name, out, err);
}
