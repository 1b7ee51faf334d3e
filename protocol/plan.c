/* Plan: parser, writer, validator (docs/formats.md, "Plan"). */
#include "protocol/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/precision.h"

/* the plan's bound on chunks is the kind table's (protocol/sched_kind.h) */
_Static_assert(PT_PLAN_CHUNKS_MAX == PT_SCHED_CHUNKS_MAX, "one bound on model chunks per device");

static const char *const plan_keys[] = {
    "v", "model", "layers", "microbatch", "schedule", "optimizer", "stages", "precision", NULL};
static const char *const mb_keys[] = {"size", "count", NULL};
static const char *const sched_keys[] = {"kind",   "policy",      "vertical_sync",
                                         "chunks", "replication", NULL};
static const char *const sgd_keys[] = {"kind", "lr", "momentum", "weight_decay", NULL};
static const char *const adam_keys[] = {"kind", "lr",           "beta1", "beta2",
                                        "eps",  "weight_decay", NULL};
static const char *const stage_keys[] = {"layers", "replicas", "recompute", NULL};

/* Upper bound on a learning rate or weight decay; beyond it is a typo. */
#define OPTIM_VALUE_MAX 1e6

pt_optim_spec pt_optim_default(pt_optim_kind kind)
{
    pt_optim_spec o = {0};
    o.kind = kind;
    o.lr = kind == PT_OPTIM_ADAM ? PT_OPTIM_ADAM_LR : PT_OPTIM_SGD_LR;
    o.momentum = 0.9f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.weight_decay = 0.0f;
    return o;
}

/* ---- records ----------------------------------------------------------- */

pt_plan *pt_plan_new(int stage_count)
{
    if (stage_count < 0)
        return NULL;
    pt_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (stage_count > 0 && !(p->stages = calloc((size_t)stage_count, sizeof *p->stages))) {
        free(p);
        return NULL;
    }
    p->stage_count = stage_count;
    p->schedule = PT_SCHED_GPIPE;
    p->policy = 'A';
    p->chunks = 1;
    p->optimizer = pt_optim_default(PT_OPTIM_SGD);
    return p;
}

int pt_plan_round_robin(const pt_plan *plan)
{
    return plan && plan->replication == PT_REPL_ROUND_ROBIN &&
           pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_ROUND_ROBIN);
}

int pt_plan_rr_inflight(const pt_plan *plan, int s)
{
    int64_t R = 0;
    for (int v = s; v < plan->stage_count; v++)
        R += plan->stages[v].replica_count;
    int r = plan->stages[s].replica_count;
    return (int)((R + r - 1) / r);
}

const char *pt_replication_name(pt_replication replication)
{
    static const char *const names[] = {
        [PT_REPL_SPLIT_CONCAT] = "split-concat", [PT_REPL_ROUND_ROBIN] = "round-robin"};
    int k = (int)replication;
    return k >= 0 && k < (int)(sizeof names / sizeof *names) ? names[k] : NULL;
}

int pt_plan_set_replicas(pt_plan *plan, int s, const int *devices, int count)
{
    if (!plan || s < 0 || s >= plan->stage_count || count < 0 || (count > 0 && !devices))
        return PT_EINVAL;
    int *copy = NULL;
    if (count > 0) {
        if (!(copy = malloc((size_t)count * sizeof *copy)))
            return PT_ENOMEM;
        memcpy(copy, devices, (size_t)count * sizeof *copy);
    }
    free(plan->stages[s].replicas);
    plan->stages[s].replicas = copy;
    plan->stages[s].replica_count = count;
    return 0;
}

void pt_plan_free(pt_plan **plan_p)
{
    if (!plan_p || !*plan_p)
        return;
    pt_plan *p = *plan_p;
    for (int s = 0; s < p->stage_count && p->stages; s++)
        free(p->stages[s].replicas);
    free(p->stages);
    free(p);
    *plan_p = NULL;
}

int pt_plan_copy(const pt_plan *plan, pt_plan **out, pt_error *err)
{
    *out = pt_plan_clone(plan);
    return *out || !plan ? 0 : pt_error_set(err, PT_ENOMEM, "plan: out of memory");
}

pt_plan *pt_plan_clone(const pt_plan *plan)
{
    if (!plan)
        return NULL;
    pt_plan *c = pt_plan_new(plan->stage_count);
    if (!c)
        return NULL;
    pt_stage *stages = c->stages;
    *c = *plan;
    c->stages = stages;
    for (int s = 0; s < plan->stage_count; s++) {
        c->stages[s] = plan->stages[s];
        c->stages[s].replicas = NULL;
        c->stages[s].replica_count = 0;
        if (pt_plan_set_replicas(c, s, plan->stages[s].replicas, plan->stages[s].replica_count) <
            0) {
            pt_plan_free(&c);
            return NULL;
        }
    }
    return c;
}

int pt_plan_rank_count(const pt_plan *plan)
{
    if (!plan)
        return 0;
    return plan->chunks > 1 ? plan->stage_count / plan->chunks : plan->stage_count;
}

int pt_plan_agent_count(const pt_plan *plan)
{
    int n = 0, P = pt_plan_rank_count(plan);
    for (int s = 0; plan && s < P; s++)
        n += plan->stages[s].replica_count;
    return n;
}

int pt_plan_device_count(const pt_plan *plan)
{
    int n = 0;
    for (int s = 0; plan && s < plan->stage_count; s++)
        n += plan->stages[s].replica_count;
    return n;
}

/* ---- validation -------------------------------------------------------- */

typedef struct use {
    int device, stage, index;
} use;

static int cmp_use(const void *a, const void *b)
{
    const use *x = a, *y = b;
    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Every device at most once over all stages. Reports the first repeated use
 * in plan order, naming where the device was used before. */
static int check_devices(pt_jr *jr, const pt_plan *p)
{
    int n = pt_plan_device_count(p);
    if (n == 0)
        return 0;
    use *u = malloc((size_t)n * sizeof *u);
    if (!u)
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    int k = 0;
    for (int s = 0; s < pt_plan_rank_count(p); s++)
        for (int r = 0; r < p->stages[s].replica_count; r++)
            u[k++] = (use){p->stages[s].replicas[r], s, r};
    n = k; /* an interleaved plan's later chunks repeat its first ranks' devices */
    qsort(u, (size_t)n, sizeof *u, cmp_use);
    const use *dup = NULL, *prev = NULL;
    for (int i = 1; i < n; i++)
        if (u[i].device == u[i - 1].device) {
            int j = i;
            while (j > 0 && u[j - 1].device == u[i].device)
                j--;
            if (!dup || u[i].stage < dup->stage ||
                (u[i].stage == dup->stage && u[i].index < dup->index)) {
                dup = &u[i];
                prev = &u[j];
            }
        }
    int rc = 0;
    if (dup) {
        char path[PT_JPATH_MAX];
        snprintf(path, sizeof path, "stages[%d].replicas[%d]", dup->stage, dup->index);
        rc = pt_jr_fail(jr, PT_EINVAL, path, NULL,
                        "device %d is used twice (also by stages[%d].replicas[%d])", dup->device,
                        prev->stage, prev->index);
    }
    free(u);
    return rc;
}

static int check_optimizer(pt_jr *jr, const pt_optim_spec *o)
{
    const char *p = "optimizer";
    if (o->kind != PT_OPTIM_SGD && o->kind != PT_OPTIM_ADAM)
        return pt_jr_fail(jr, PT_EINVAL, p, "kind", "unknown optimizer kind %d", (int)o->kind);
    if (!(o->lr > 0.0f && o->lr <= OPTIM_VALUE_MAX))
        return pt_jr_fail(jr, PT_ERANGE, p, "lr", "must be > 0 (got %g)", (double)o->lr);
    if (!(o->weight_decay >= 0.0f && o->weight_decay <= OPTIM_VALUE_MAX))
        return pt_jr_fail(jr, PT_ERANGE, p, "weight_decay", "must be >= 0 (got %g)",
                          (double)o->weight_decay);
    if (o->kind == PT_OPTIM_SGD) {
        if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
            return pt_jr_fail(jr, PT_ERANGE, p, "momentum", "must be in [0, 1) (got %g)",
                              (double)o->momentum);
        return 0;
    }
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return pt_jr_fail(jr, PT_ERANGE, p, "beta1", "must be in [0, 1) (got %g)",
                          (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return pt_jr_fail(jr, PT_ERANGE, p, "beta2", "must be in [0, 1) (got %g)",
                          (double)o->beta2);
    if (!(o->eps > 0.0f && o->eps <= 1.0f))
        return pt_jr_fail(jr, PT_ERANGE, p, "eps", "must be in (0, 1] (got %g)", (double)o->eps);
    return 0;
}

/* Stages cover [0, layer_count) once, in order, each non-empty. */
static int check_stages(pt_jr *jr, const pt_plan *p)
{
    int next = 0;
    for (int s = 0; s < p->stage_count; s++) {
        const pt_stage *st = &p->stages[s];
        char path[PT_JPATH_MAX];
        snprintf(path, sizeof path, "stages[%d]", s);
        int f = st->first, l = st->last;
        if (f >= l)
            return pt_jr_fail(jr, PT_EINVAL, path, "layers", "[%d,%d) is empty", f, l);
        if (f < 0)
            return pt_jr_fail(jr, PT_ERANGE, path, "layers", "[%d,%d) starts before layer 0", f, l);
        if (l > p->layer_count)
            return pt_jr_fail(jr, PT_ERANGE, path, "layers",
                              "[%d,%d) goes past the model's %d layers", f, l, p->layer_count);
        if (f < next)
            return pt_jr_fail(jr, PT_EINVAL, path, "layers",
                              "[%d,%d) overlaps stages[%d] [%d,%d): layers [%d,%d) are covered "
                              "twice",
                              f, l, s - 1, p->stages[s - 1].first, p->stages[s - 1].last, f,
                              next < l ? next : l);
        if (f > next)
            return pt_jr_fail(jr, PT_EINVAL, path, "layers",
                              "[%d,%d) leaves layers [%d,%d) not covered by any stage (stages "
                              "must cover the layers in order)",
                              f, l, next, f);
        next = l;
        if (st->replica_count < 1 || !st->replicas)
            return pt_jr_fail(jr, PT_EINVAL, path, "replicas", "must not be empty");
        for (int r = 0; r < st->replica_count; r++)
            if (st->replicas[r] < 0 || st->replicas[r] >= PT_PLAN_DEVICE_MAX) {
                char rpath[PT_JPATH_MAX];
                pt_jr_join_index(rpath, sizeof rpath, path, "replicas", r);
                return pt_jr_fail(jr, PT_ERANGE, rpath, NULL, "must be in [0, %d) (got %d)",
                                  PT_PLAN_DEVICE_MAX, st->replicas[r]);
            }
        if (st->replica_count > p->microbatch_size && !pt_plan_round_robin(p))
            return pt_jr_fail(jr, PT_EINVAL, path, "replicas",
                              "%d replicas share a micro-batch of %d samples; each needs at "
                              "least one",
                              st->replica_count, p->microbatch_size);
    }
    if (next < p->layer_count) {
        char path[PT_JPATH_MAX];
        snprintf(path, sizeof path, "stages[%d]", p->stage_count - 1);
        return pt_jr_fail(jr, PT_EINVAL, path, "layers",
                          "ends at layer %d: layers [%d,%d) are not covered by any stage", next,
                          next, p->layer_count);
    }
    return 0;
}

/* Interleaved placement: stage_count = S·v chunks, S >= 2 ranks, chunk c of
 * rank d (stages[d + c·S]) on stages[d]'s devices, M a multiple of S (each
 * micro-batch group of S goes through the chunks together, as in Megatron). */
static int check_chunks(pt_jr *jr, const pt_plan *p)
{
    if (!pt_sched_kind_has(p->schedule, PT_SCHED_OPT_CHUNKS)) {
        if (p->chunks > 1)
            return pt_jr_fail(jr, PT_EINVAL, "schedule", "chunks",
                              "%d chunks per device, but only the interleaved schedule places "
                              "several (must be 1)",
                              p->chunks);
        return 0;
    }
    int v = p->chunks, lo, hi;
    pt_sched_kind_chunks(p->schedule, &lo, &hi); /* the kind table's chunk columns */
    if (v < lo || v > hi)
        return pt_jr_fail(jr, PT_ERANGE, "schedule", "chunks",
                          "must be in [%d, %d] for %s (got %d)", lo, hi,
                          pt_sched_kind_name(p->schedule), v);
    if (p->stage_count % v)
        return pt_jr_fail(jr, PT_EINVAL, "", "stages",
                          "%d stages cannot be %d chunks per device: an interleaved plan lists "
                          "S·v chunk stages in model order",
                          p->stage_count, v);
    int S = p->stage_count / v;
    if (S < 2)
        return pt_jr_fail(jr, PT_EINVAL, "", "stages",
                          "%d stages of %d chunks is one device: interleaving needs at least 2 "
                          "pipeline ranks",
                          p->stage_count, v);
    if (p->microbatch_count % S)
        return pt_jr_fail(jr, PT_EINVAL, "microbatch", "count",
                          "%d is not a multiple of the %d pipeline ranks (the interleaved "
                          "schedule sends micro-batches through the chunks in groups of S, as "
                          "Megatron-LM requires)",
                          p->microbatch_count, S);
    for (int s = S; s < p->stage_count; s++) {
        const pt_stage *a = &p->stages[s % S], *b = &p->stages[s];
        int same = a->replica_count == b->replica_count;
        for (int r = 0; same && r < a->replica_count; r++)
            same = a->replicas[r] == b->replicas[r];
        if (!same) {
            char path[PT_JPATH_MAX];
            snprintf(path, sizeof path, "stages[%d]", s);
            return pt_jr_fail(jr, PT_EINVAL, path, "replicas",
                              "chunk %d of pipeline rank %d must be on the devices of "
                              "stages[%d] (device d holds chunks d, d+S, ...)",
                              s / S, s % S, s % S);
        }
        if (b->recompute != a->recompute) {
            char path[PT_JPATH_MAX];
            snprintf(path, sizeof path, "stages[%d]", s);
            return pt_jr_fail(jr, PT_EINVAL, path, "recompute",
                              "must equal stages[%d]'s: the chunks of a device recompute "
                              "alike",
                              s % S);
        }
    }
    return 0;
}

/* Round-robin replication: only kinds that read it; not with vertical sync
 * once a stage is replicated (a version is a round of that stage's replicas,
 * not a point of stage 0's history). */
static int check_replication(pt_jr *jr, const pt_plan *p)
{
    if (p->replication != PT_REPL_SPLIT_CONCAT && p->replication != PT_REPL_ROUND_ROBIN)
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "replication", "unknown value %d",
                          (int)p->replication);
    if (p->replication == PT_REPL_ROUND_ROBIN &&
        !pt_sched_kind_has(p->schedule, PT_SCHED_OPT_ROUND_ROBIN)) {
        char list[256];
        pt_sched_kind_list(PT_SCHED_OPT_ROUND_ROBIN, list, sizeof list);
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "replication",
                          "round-robin: only the %s schedule hands whole micro-batches to replicas",
                          list);
    }
    int replicated = 0;
    for (int s = 0; s < p->stage_count; s++)
        replicated |= p->stages[s].replica_count > 1;
    if (pt_plan_round_robin(p) && p->vertical_sync && replicated)
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "vertical_sync",
                          "not with round-robin replication of a replicated stage (set "
                          "\"replication\": \"split-concat\")");
    return 0;
}

static int validate(pt_jr *jr, const pt_plan *p)
{
    if (p->layer_count < 1 || p->layer_count > PT_PLAN_LAYERS_MAX)
        return pt_jr_fail(jr, PT_ERANGE, "", "layers", "must be in [1, %d] (got %d)",
                          PT_PLAN_LAYERS_MAX, p->layer_count);
    if (p->microbatch_size < 1 || p->microbatch_size > PT_PLAN_MB_SIZE_MAX)
        return pt_jr_fail(jr, PT_ERANGE, "microbatch", "size", "must be > 0 (got %d)",
                          p->microbatch_size);
    if (p->microbatch_count < 1 || p->microbatch_count > PT_PLAN_MB_COUNT_MAX)
        return pt_jr_fail(jr, PT_ERANGE, "microbatch", "count", "must be > 0 (got %d)",
                          p->microbatch_count);
    if (!pt_sched_kind_name(p->schedule))
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "kind", "unknown schedule kind %d",
                          (int)p->schedule);
    if (p->policy != 'A' && p->policy != 'B')
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "policy", "must be \"A\" or \"B\"");
    if (p->stage_count < 1 || !p->stages)
        return pt_jr_fail(jr, PT_EINVAL, "", "stages", "must not be empty");
    if (p->stage_count > p->layer_count)
        return pt_jr_fail(jr, PT_EINVAL, "", "stages",
                          "%d stages for %d layers: more stages than layers", p->stage_count,
                          p->layer_count);
    int rc;
    if ((rc = check_optimizer(jr, &p->optimizer)) < 0 || (rc = check_stages(jr, p)) < 0 ||
        (rc = check_chunks(jr, p)) < 0 || (rc = check_replication(jr, p)) < 0)
        return rc;
    return check_devices(jr, p);
}

int pt_plan_check(const pt_plan *plan, const pt_model_spec *model, const pt_topology *topo,
                  const char *source, pt_error *err)
{
    pt_jr jr = {source, err};
    if (!plan)
        return pt_jr_fail(&jr, PT_EINVAL, "", NULL, "no plan");
    int rc = validate(&jr, plan);
    if (rc < 0)
        return rc;
    if (model) {
        if (strcmp(plan->model, model->name))
            return pt_jr_fail(&jr, PT_EINVAL, "", "model", "plan is for \"%s\", not for \"%s\"",
                              plan->model, model->name);
        if (plan->layer_count != model->layer_count)
            return pt_jr_fail(&jr, PT_EINVAL, "", "layers", "%d, but model %s has %d layers",
                              plan->layer_count, model->name, model->layer_count);
    }
    if (topo) {
        for (int s = 0; s < plan->stage_count; s++)
            for (int r = 0; r < plan->stages[s].replica_count; r++)
                if (plan->stages[s].replicas[r] >= topo->device_count) {
                    char path[PT_JPATH_MAX];
                    snprintf(path, sizeof path, "stages[%d].replicas[%d]", s, r);
                    return pt_jr_fail(&jr, PT_ENOTFOUND, path, NULL,
                                      "device %d does not exist (topology %s has devices 0..%d)",
                                      plan->stages[s].replicas[r], topo->name,
                                      topo->device_count - 1);
                }
    }
    return 0;
}

/* ---- parsing ----------------------------------------------------------- */

/* A float field: read as a double in r, then checked again as a float so
 * values that round to a bound (0.99999999 -> 1.0f) are refused too. */
static int read_float(pt_jr *jr, const cJSON *obj, const char *path, const char *key, float def,
                      pt_jr_range r, float *out)
{
    double d;
    int rc = pt_jr_num(jr, obj, path, key, PT_JR_OPTIONAL, def, r, &d);
    if (rc < 0)
        return rc;
    float f = (float)d;
    double fd = f;
    if (!isfinite(fd) || (r.lo_open ? !(fd > r.lo) : !(fd >= r.lo)) ||
        (r.hi_open ? !(fd < r.hi) : !(fd <= r.hi)))
        return pt_jr_fail(jr, PT_ERANGE, path, key, "%.17g is out of range as a float", d);
    *out = f;
    return 0;
}

/* "precision": optional, a name of protocol/precision.h. */
static int parse_precision(pt_jr *jr, const cJSON *root, pt_plan *p)
{
    const cJSON *item = pt_jr_item(root, "precision");
    if (!item)
        return 0;
    if (!cJSON_IsString(item) || pt_precision_parse(item->valuestring) < 0)
        return pt_jr_fail(jr, PT_EINVAL, "", "precision", "not a precision (%s)",
                          pt_precision_names());
    snprintf(p->precision, sizeof p->precision, "%s", item->valuestring);
    return 0;
}

static int parse_optimizer(pt_jr *jr, const cJSON *root, pt_optim_spec *o)
{
    const cJSON *obj;
    int rc = pt_jr_object(jr, root, "", "optimizer", PT_JR_OPTIONAL, &obj);
    *o = pt_optim_default(PT_OPTIM_SGD);
    if (rc < 0 || !obj)
        return rc;
    const char *p = "optimizer";
    char kind[16];
    if ((rc = pt_jr_str(jr, obj, p, "kind", PT_JR_OPTIONAL, "sgd", kind, sizeof kind)) < 0)
        return rc;
    if (!strcmp(kind, "adam"))
        *o = pt_optim_default(PT_OPTIM_ADAM);
    else if (strcmp(kind, "sgd"))
        return pt_jr_fail(jr, PT_EINVAL, p, "kind", "unknown optimizer \"%s\" (sgd or adam)", kind);
    const pt_jr_range positive = {0.0, OPTIM_VALUE_MAX, 1, 0};
    const pt_jr_range non_negative = {0.0, OPTIM_VALUE_MAX, 0, 0};
    const pt_jr_range unit = {0.0, 1.0, 0, 1};
    const pt_jr_range eps = {0.0, 1.0, 1, 0};
    if ((rc = pt_jr_keys(jr, obj, p, o->kind == PT_OPTIM_ADAM ? adam_keys : sgd_keys)) < 0 ||
        (rc = read_float(jr, obj, p, "lr", o->lr, positive, &o->lr)) < 0 ||
        (rc = read_float(jr, obj, p, "weight_decay", o->weight_decay, non_negative,
                         &o->weight_decay)) < 0)
        return rc;
    if (o->kind == PT_OPTIM_SGD)
        return read_float(jr, obj, p, "momentum", o->momentum, unit, &o->momentum);
    if ((rc = read_float(jr, obj, p, "beta1", o->beta1, unit, &o->beta1)) < 0 ||
        (rc = read_float(jr, obj, p, "beta2", o->beta2, unit, &o->beta2)) < 0)
        return rc;
    return read_float(jr, obj, p, "eps", o->eps, eps, &o->eps);
}

/* An option given to a kind that does not read it: name the kinds that do. */
static int option_refused(pt_jr *jr, const char *key, unsigned flag, const char *what)
{
    char list[256];
    int n = pt_sched_kind_list(flag, list, sizeof list);
    return pt_jr_fail(jr, PT_EINVAL, "schedule", key, "only the %s schedule%s %s %s", list,
                      n == 1 ? "" : "s", n == 1 ? "has" : "have", what);
}

static int parse_schedule(pt_jr *jr, const cJSON *root, pt_plan *p)
{
    const cJSON *obj;
    int rc = pt_jr_object(jr, root, "", "schedule", PT_JR_REQUIRED, &obj);
    if (rc < 0 || (rc = pt_jr_keys(jr, obj, "schedule", sched_keys)) < 0)
        return rc;
    char kind[PT_SCHED_NAME_MAX];
    if ((rc = pt_jr_str(jr, obj, "schedule", "kind", PT_JR_REQUIRED, NULL, kind, sizeof kind)) < 0)
        return rc;
    if (pt_sched_kind_parse(kind, &p->schedule) < 0) {
        char list[256];
        pt_sched_kind_list(0, list, sizeof list);
        return pt_jr_fail(jr, PT_EINVAL, "schedule", "kind", "unknown schedule \"%s\" (known: %s)",
                          kind, list);
    }
    p->policy = 'A';
    if (pt_jr_item(obj, "policy")) {
        if (!pt_sched_kind_has(p->schedule, PT_SCHED_OPT_POLICY))
            return option_refused(jr, "policy", PT_SCHED_OPT_POLICY, "a policy");
        char pol[8];
        if ((rc = pt_jr_str(jr, obj, "schedule", "policy", PT_JR_REQUIRED, NULL, pol, sizeof pol)) <
            0)
            return rc;
        if (strcmp(pol, "A") && strcmp(pol, "B"))
            return pt_jr_fail(jr, PT_EINVAL, "schedule", "policy",
                              "must be \"A\" or \"B\" (got \"%s\")", pol);
        p->policy = pol[0];
    }
    p->chunks = pt_sched_kind_has(p->schedule, PT_SCHED_OPT_CHUNKS) ? PT_PLAN_CHUNKS_DEFAULT : 1;
    if (pt_jr_item(obj, "chunks")) {
        if (!pt_sched_kind_has(p->schedule, PT_SCHED_OPT_CHUNKS))
            return option_refused(jr, "chunks", PT_SCHED_OPT_CHUNKS, "model chunks");
        int lo, hi;
        pt_sched_kind_chunks(p->schedule, &lo, &hi);
        if ((rc = pt_jr_int(jr, obj, "schedule", "chunks", PT_JR_REQUIRED, PT_PLAN_CHUNKS_DEFAULT,
                            lo, hi, &p->chunks)) < 0)
            return rc;
    }
    p->replication = pt_sched_kind_has(p->schedule, PT_SCHED_OPT_ROUND_ROBIN)
                         ? PT_REPL_ROUND_ROBIN
                         : PT_REPL_SPLIT_CONCAT;
    if (pt_jr_item(obj, "replication")) {
        if (!pt_sched_kind_has(p->schedule, PT_SCHED_OPT_ROUND_ROBIN))
            return option_refused(jr, "replication", PT_SCHED_OPT_ROUND_ROBIN,
                                  "a choice of replication");
        char rep[16];
        if ((rc = pt_jr_str(jr, obj, "schedule", "replication", PT_JR_REQUIRED, NULL, rep,
                            sizeof rep)) < 0)
            return rc;
        if (!strcmp(rep, "split-concat"))
            p->replication = PT_REPL_SPLIT_CONCAT;
        else if (!strcmp(rep, "round-robin"))
            p->replication = PT_REPL_ROUND_ROBIN;
        else
            return pt_jr_fail(jr, PT_EINVAL, "schedule", "replication",
                              "must be \"split-concat\" or \"round-robin\" (got \"%s\")", rep);
    }
    p->vertical_sync = 0;
    if (pt_jr_item(obj, "vertical_sync")) {
        if (!pt_sched_kind_has(p->schedule, PT_SCHED_OPT_VSYNC))
            return option_refused(jr, "vertical_sync", PT_SCHED_OPT_VSYNC, "vertical sync");
        rc = pt_jr_bool(jr, obj, "schedule", "vertical_sync", PT_JR_REQUIRED, 0, &p->vertical_sync);
    }
    return rc;
}

static int parse_stage(pt_jr *jr, const cJSON *obj, const char *path, pt_stage *st)
{
    int rc = pt_jr_is_object(jr, obj, path);
    if (rc < 0 || (rc = pt_jr_keys(jr, obj, path, stage_keys)) < 0)
        return rc;
    const cJSON *layers, *replicas;
    int n;
    char lpath[PT_JPATH_MAX];
    pt_jr_join(lpath, sizeof lpath, path, "layers");
    if ((rc = pt_jr_array(jr, obj, path, "layers", PT_JR_REQUIRED, 0, &layers, &n)) < 0)
        return rc;
    if (n != 2)
        return pt_jr_fail(jr, PT_EINVAL, lpath, NULL,
                          "must be [first, last) as two layer indices (got %d numbers)", n);
    char epath[PT_JPATH_MAX];
    pt_jr_join_index(epath, sizeof epath, lpath, NULL, 0);
    if ((rc = pt_jr_elem_int(jr, layers->child, epath, 0, PT_PLAN_LAYERS_MAX, &st->first)) < 0)
        return rc;
    pt_jr_join_index(epath, sizeof epath, lpath, NULL, 1);
    if ((rc = pt_jr_elem_int(jr, layers->child->next, epath, 0, PT_PLAN_LAYERS_MAX, &st->last)) < 0)
        return rc;
    if ((rc = pt_jr_array(jr, obj, path, "replicas", PT_JR_REQUIRED, 1, &replicas, &n)) < 0)
        return rc;
    if (n > PT_PLAN_DEVICE_MAX)
        return pt_jr_fail(jr, PT_ERANGE, path, "replicas", "more than %d replicas",
                          PT_PLAN_DEVICE_MAX);
    if (!(st->replicas = malloc((size_t)n * sizeof *st->replicas)))
        return pt_jr_fail(jr, PT_ENOMEM, "", NULL, "out of memory");
    st->replica_count = n;
    int r = 0;
    pt_jr quiet = {jr->source, NULL}; /* the same check, its path written only when it fails */
    for (const cJSON *e = replicas->child; e && r < n; e = e->next, r++) {
        if (pt_jr_elem_int(&quiet, e, "", 0, PT_PLAN_DEVICE_MAX - 1, &st->replicas[r]) == 0)
            continue; /* a 1,024-replica stage is not 1,024 snprintf'd paths */
        pt_jr_join_index(epath, sizeof epath, path, "replicas", r);
        if ((rc = pt_jr_elem_int(jr, e, epath, 0, PT_PLAN_DEVICE_MAX - 1, &st->replicas[r])) < 0)
            return rc;
    }
    return pt_jr_bool(jr, obj, path, "recompute", PT_JR_OPTIONAL, 0, &st->recompute);
}

int pt_plan_parse(const char *json, const char *source, pt_plan **out, pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    cJSON *root;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    rc = pt_plan_from_tree(root, source, out, err);
    cJSON_Delete(root);
    return rc;
}

int pt_plan_from_tree(const cJSON *root, const char *source, pt_plan **out, pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    int rc = pt_jr_check_root(&jr, root);
    if (rc < 0)
        return rc;
    pt_plan *p = NULL;
    const cJSON *mb, *stages;
    int n;
    if ((rc = pt_jr_keys(&jr, root, "", plan_keys)) < 0 ||
        (rc = pt_jr_array(&jr, root, "", "stages", PT_JR_REQUIRED, 1, &stages, &n)) < 0)
        goto done;
    if (!(p = pt_plan_new(n))) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    if ((rc = pt_jr_str(&jr, root, "", "model", PT_JR_REQUIRED, NULL, p->model, sizeof p->model)) <
            0 ||
        (rc = pt_jr_int(&jr, root, "", "layers", PT_JR_REQUIRED, 0, 1, PT_PLAN_LAYERS_MAX,
                        &p->layer_count)) < 0 ||
        (rc = pt_jr_object(&jr, root, "", "microbatch", PT_JR_REQUIRED, &mb)) < 0 ||
        (rc = pt_jr_keys(&jr, mb, "microbatch", mb_keys)) < 0 ||
        (rc = pt_jr_int(&jr, mb, "microbatch", "size", PT_JR_REQUIRED, 0, 1, PT_PLAN_MB_SIZE_MAX,
                        &p->microbatch_size)) < 0 ||
        (rc = pt_jr_int(&jr, mb, "microbatch", "count", PT_JR_REQUIRED, 0, 1, PT_PLAN_MB_COUNT_MAX,
                        &p->microbatch_count)) < 0 ||
        (rc = parse_schedule(&jr, root, p)) < 0 ||
        (rc = parse_optimizer(&jr, root, &p->optimizer)) < 0 ||
        (rc = parse_precision(&jr, root, p)) < 0)
        goto done;
    if (n > p->layer_count) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "", "stages",
                        "%d stages for %d layers: more stages than layers", n, p->layer_count);
        goto done;
    }
    int s = 0;
    for (const cJSON *e = stages->child; e && s < n; e = e->next, s++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "stages", s);
        if ((rc = parse_stage(&jr, e, path, &p->stages[s])) < 0)
            goto done;
    }
    rc = validate(&jr, p);
done:
    if (rc < 0)
        pt_plan_free(&p);
    *out = p;
    return rc;
}

int pt_plan_load(const char *path, pt_plan **out, pt_error *err)
{
    *out = NULL;
    char *text;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_plan_parse(text, path, out, err);
    free(text);
    return rc;
}

/* ---- writing ----------------------------------------------------------- */

static int add_optimizer(cJSON *root, const pt_optim_spec *o)
{
    cJSON *obj = cJSON_AddObjectToObject(root, "optimizer");
    if (!obj)
        return PT_ENOMEM;
    int ok = cJSON_AddStringToObject(obj, "kind", o->kind == PT_OPTIM_ADAM ? "adam" : "sgd") &&
             pt_jr_add_number(obj, "lr", pt_jr_short_float(o->lr));
    if (o->kind == PT_OPTIM_ADAM)
        ok = ok && pt_jr_add_number(obj, "beta1", pt_jr_short_float(o->beta1)) &&
             pt_jr_add_number(obj, "beta2", pt_jr_short_float(o->beta2)) &&
             pt_jr_add_number(obj, "eps", pt_jr_short_float(o->eps));
    else
        ok = ok && pt_jr_add_number(obj, "momentum", pt_jr_short_float(o->momentum));
    ok = ok && pt_jr_add_number(obj, "weight_decay", pt_jr_short_float(o->weight_decay));
    return ok ? 0 : PT_ENOMEM;
}

static int add_stage(cJSON *arr, const pt_stage *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return PT_ENOMEM;
    cJSON_AddItemToArray(arr, o);
    int range[2] = {st->first, st->last};
    cJSON *layers = cJSON_CreateIntArray(range, 2);
    cJSON *reps = cJSON_CreateIntArray(st->replicas ? st->replicas : range,
                                       st->replicas ? st->replica_count : 0);
    if (!layers || !reps) {
        cJSON_Delete(layers);
        cJSON_Delete(reps);
        return PT_ENOMEM;
    }
    cJSON_AddItemToObject(o, "layers", layers);
    cJSON_AddItemToObject(o, "replicas", reps);
    return cJSON_AddBoolToObject(o, "recompute", st->recompute) ? 0 : PT_ENOMEM;
}

char *pt_plan_to_json(const pt_plan *plan)
{
    return pt_jr_print_and_delete(pt_plan_to_tree(plan));
}

cJSON *pt_plan_to_tree(const pt_plan *plan)
{
    if (!plan)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON *mb, *sched, *stages;
    if (!pt_jr_add_number(root, "v", PT_FORMAT_VERSION) ||
        !cJSON_AddStringToObject(root, "model", plan->model) ||
        !pt_jr_add_number(root, "layers", plan->layer_count) ||
        !(mb = cJSON_AddObjectToObject(root, "microbatch")) ||
        !pt_jr_add_number(mb, "size", plan->microbatch_size) ||
        !pt_jr_add_number(mb, "count", plan->microbatch_count) ||
        !(sched = cJSON_AddObjectToObject(root, "schedule")))
        goto fail;
    const char *kind = pt_sched_kind_name(plan->schedule);
    if (!cJSON_AddStringToObject(sched, "kind", kind ? kind : "?"))
        goto fail;
    if (pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_POLICY)) {
        char pol[2] = {plan->policy, '\0'};
        if (!cJSON_AddStringToObject(sched, "policy", pol))
            goto fail;
    }
    if (pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_VSYNC) &&
        !cJSON_AddBoolToObject(sched, "vertical_sync", plan->vertical_sync))
        goto fail;
    if (pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_CHUNKS) &&
        !pt_jr_add_number(sched, "chunks", plan->chunks))
        goto fail;
    if (pt_sched_kind_has(plan->schedule, PT_SCHED_OPT_ROUND_ROBIN) &&
        !cJSON_AddStringToObject(
            sched, "replication",
            pt_replication_name(plan->replication) ? pt_replication_name(plan->replication) : "?"))
        goto fail;
    if (add_optimizer(root, &plan->optimizer) < 0 ||
        (plan->precision[0] && pt_precision_parse(plan->precision) >= 0 &&
         !cJSON_AddStringToObject(root, "precision", plan->precision)) ||
        !(stages = cJSON_AddArrayToObject(root, "stages")))
        goto fail;
    for (int s = 0; s < plan->stage_count; s++)
        if (add_stage(stages, &plan->stages[s]) < 0)
            goto fail;
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

int pt_plan_save(const pt_plan *plan, const char *path, pt_error *err)
{
    return pt_file_save_text(path, pt_plan_to_json(plan), err);
}
