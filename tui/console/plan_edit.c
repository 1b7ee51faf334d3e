/* The plan view's editing model (see plan_edit.h). */
#include "protocol/clock.h"
#include "tui/console/plan_edit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/interleave.h"

/* A plan with its program and simulation. Two of them alternate: the
 * candidate of an edit is simulated in the spare one and swapped in on
 * success, so a refused edit leaves the current one untouched. */
typedef struct slot {
    pt_plan *plan;
    pt_program prog;
    pt_sim *sim;
    pt_sim_result res;
} slot;

struct pt_plan_edit {
    const pt_profile *profile;
    const pt_topology *topo;
    pt_profile *own_profile; /* set_costs' copies (profile and topo then point here) */
    pt_topology *own_topo;
    pt_cost *cost;
    slot cur, cand;
    pt_plan *undo[PT_PLAN_EDIT_UNDO_MAX];
    int undo_n;
    uint64_t version;
    double last_sim_s;
};

static void slot_release(slot *s)
{
    pt_plan_free(&s->plan);
    pt_program_release(&s->prog);
    pt_sim_free(&s->sim);
    memset(&s->res, 0, sizeof s->res);
}

static double gib(int64_t b)
{
    return (double)b / PT_BYTES_PER_GIB;
}

/* Explains why the simulated plan in s does not fit. */
static int not_fit_error(pt_plan_edit *e, const slot *s, pt_error *err)
{
    int rc = pt_cost_plan_memory(e->cost, s->plan, err);
    if (rc == PT_ENOFIT)
        return rc;
    const pt_sim_worker *w = &s->res.workers[s->res.worst_worker];
    const pt_worker *pw = &s->prog.workers[s->res.worst_worker];
    return pt_error_set(err, PT_ENOFIT,
                        "stage %d replica %d needs %.2f GiB at its peak, device %d has %.2f GiB",
                        pw->stage, pw->replica, gib(w->peak.total), pw->device, gib(w->limit));
}

/* Checks and simulates plan in e->cand (taking ownership of plan). On
 * success the candidate becomes current and the old plan goes to the undo
 * stack when push_undo is set. */
static int commit(pt_plan_edit *e, pt_plan *plan, int push_undo, pt_error *err)
{
    double t0 = pt_clock_s();
    int rc = pt_plan_check(plan, NULL, e->topo, "plan", err);
    if (rc == 0 && plan->layer_count != e->profile->layer_count)
        rc = pt_error_set(err, PT_EINVAL, "plan has %d layers, the profile %d", plan->layer_count,
                          e->profile->layer_count);
    pt_plan_free(&e->cand.plan);
    e->cand.plan = plan;
    if (rc == 0)
        rc = pt_sim_plan(e->cand.sim, plan, e->cost, NULL, &e->cand.prog, &e->cand.res, err);
    if (rc == 0 && e->cur.plan && e->cur.res.fits && !e->cand.res.fits)
        rc = not_fit_error(e, &e->cand, err);
    e->last_sim_s = pt_clock_s() - t0;
    if (rc < 0) {
        pt_plan_free(&e->cand.plan);
        return rc;
    }
    if (e->cur.plan && push_undo) {
        if (e->undo_n == PT_PLAN_EDIT_UNDO_MAX) {
            pt_plan_free(&e->undo[0]);
            memmove(e->undo, e->undo + 1, sizeof e->undo[0] * (PT_PLAN_EDIT_UNDO_MAX - 1));
            e->undo_n--;
        }
        e->undo[e->undo_n++] = e->cur.plan;
        e->cur.plan = NULL;
    }
    pt_plan_free(&e->cur.plan);
    slot t = e->cur;
    e->cur = e->cand;
    e->cand = t;
    e->version++;
    return 0;
}

int pt_plan_edit_new(const pt_plan *plan, const pt_profile *profile, const pt_topology *topo,
                     pt_plan_edit **out, pt_error *err)
{
    if (!out)
        return pt_error_set(err, PT_EINVAL, "plan editor: no output");
    *out = NULL;
    if (!plan || !profile || !topo)
        return pt_error_set(err, PT_EINVAL, "plan editor: needs a plan, a profile and a topology");
    pt_plan_edit *e = calloc(1, sizeof *e);
    if (!e)
        return pt_error_set(err, PT_ENOMEM, "plan editor: out of memory");
    e->profile = profile;
    e->topo = topo;
    int rc = pt_cost_new(profile, topo, &e->cost, err);
    if (rc == 0 && (pt_sim_new(&e->cur.sim) < 0 || pt_sim_new(&e->cand.sim) < 0))
        rc = pt_error_set(err, PT_ENOMEM, "plan editor: out of memory");
    pt_plan *copy = rc == 0 ? pt_plan_clone(plan) : NULL;
    if (rc == 0 && !copy)
        rc = pt_error_set(err, PT_ENOMEM, "plan editor: out of memory");
    if (rc == 0)
        rc = commit(e, copy, 0, err);
    if (rc < 0) {
        pt_plan_edit_free(&e);
        return rc;
    }
    e->version = 1;
    *out = e;
    return 0;
}

void pt_plan_edit_free(pt_plan_edit **e_p)
{
    if (!e_p || !*e_p)
        return;
    pt_plan_edit *e = *e_p;
    slot_release(&e->cur);
    slot_release(&e->cand);
    for (int i = 0; i < e->undo_n; i++)
        pt_plan_free(&e->undo[i]);
    pt_cost_free(&e->cost);
    pt_profile_free(&e->own_profile);
    pt_topology_free(&e->own_topo);
    free(e);
    *e_p = NULL;
}

int pt_plan_edit_set_costs(pt_plan_edit *e, const pt_profile *profile, const pt_topology *topo,
                           pt_error *err)
{
    if (!e || !profile || !topo)
        return pt_error_set(err, PT_EINVAL, "plan editor: needs a profile and a topology");
    char *pj = pt_profile_to_json(profile), *tj = pt_topology_to_json(topo);
    pt_profile *np = NULL;
    pt_topology *nt = NULL;
    pt_cost *nc = NULL;
    int rc = pj && tj ? 0 : pt_error_set(err, PT_ENOMEM, "plan editor: out of memory");
    if (rc == 0)
        rc = pt_profile_parse(pj, "profile", &np, err);
    if (rc == 0)
        rc = pt_topology_parse(tj, "topology", &nt, err);
    free(pj);
    free(tj);
    if (rc == 0 && np->layer_count != e->cur.plan->layer_count)
        rc = pt_error_set(err, PT_EINVAL, "profile has %d layers, the plan %d", np->layer_count,
                          e->cur.plan->layer_count);
    if (rc == 0)
        rc = pt_plan_check(e->cur.plan, NULL, nt, "plan", err);
    if (rc == 0)
        rc = pt_cost_new(np, nt, &nc, err);
    pt_plan *copy = rc == 0 ? pt_plan_clone(e->cur.plan) : NULL;
    if (rc == 0 && !copy)
        rc = pt_error_set(err, PT_ENOMEM, "plan editor: out of memory");
    if (rc < 0) {
        pt_cost_free(&nc);
        pt_topology_free(&nt);
        pt_profile_free(&np);
        return rc;
    }
    /* the new costs in, the old ones kept until the plan re-simulates */
    pt_cost *oc = e->cost;
    const pt_profile *op = e->profile;
    const pt_topology *ot = e->topo;
    e->cost = nc;
    e->profile = np;
    e->topo = nt;
    int fits = e->cur.res.fits;
    e->cur.res.fits = 0; /* a plan that no longer fits is still shown */
    rc = commit(e, copy, 0, err);
    if (rc < 0) {
        e->cur.res.fits = fits;
        e->cost = oc;
        e->profile = op;
        e->topo = ot;
        pt_cost_free(&nc);
        pt_topology_free(&nt);
        pt_profile_free(&np);
        return rc;
    }
    pt_cost_free(&oc);
    pt_profile_free(&e->own_profile);
    pt_topology_free(&e->own_topo);
    e->own_profile = np;
    e->own_topo = nt;
    return 0;
}

const pt_plan *pt_plan_edit_plan(const pt_plan_edit *e)
{
    return e->cur.plan;
}
const pt_program *pt_plan_edit_program(const pt_plan_edit *e)
{
    return &e->cur.prog;
}
const pt_sim_result *pt_plan_edit_result(const pt_plan_edit *e)
{
    return &e->cur.res;
}
const pt_profile *pt_plan_edit_profile(const pt_plan_edit *e)
{
    return e->profile;
}
const pt_topology *pt_plan_edit_topology(const pt_plan_edit *e)
{
    return e->topo;
}
const pt_cost *pt_plan_edit_cost(const pt_plan_edit *e)
{
    return e->cost;
}
int pt_plan_edit_fits(const pt_plan_edit *e)
{
    return e->cur.res.fits;
}
uint64_t pt_plan_edit_version(const pt_plan_edit *e)
{
    return e->version;
}
double pt_plan_edit_last_sim_s(const pt_plan_edit *e)
{
    return e->last_sim_s;
}

int pt_plan_edit_stage_info(const pt_plan_edit *e, int stage, pt_plan_stage_info *out)
{
    const pt_program *p = &e->cur.prog;
    if (stage < 0 || stage >= p->stage_count || !out)
        return PT_EINVAL;
    memset(out, 0, sizeof *out);
    int n = 0;
    for (int w = p->stage_worker[stage]; w < p->stage_worker[stage + 1]; w++, n++) {
        const pt_sim_worker *sw = &e->cur.res.workers[w];
        if (sw->peak.total >= out->peak_bytes) {
            out->peak_bytes = sw->peak.total;
            out->peak = sw->peak;
        }
        if (out->limit_bytes == 0 || sw->limit < out->limit_bytes)
            out->limit_bytes = sw->limit;
        out->busy_frac += sw->busy_frac;
    }
    if (n)
        out->busy_frac /= n;
    return 0;
}

int pt_plan_edit_stage_of_layer(const pt_plan_edit *e, int layer)
{
    const pt_plan *p = e->cur.plan;
    for (int s = 0; s < p->stage_count; s++)
        if (layer >= p->stages[s].first && layer < p->stages[s].last)
            return s;
    return -1;
}

static pt_plan *clone_or_fail(pt_plan_edit *e, pt_error *err)
{
    pt_plan *p = pt_plan_clone(e->cur.plan);
    if (!p)
        pt_error_set(err, PT_ENOMEM, "out of memory");
    return p;
}

int pt_plan_edit_set_boundary(pt_plan_edit *e, int b, int layer, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    if (b < 1 || b >= cur->stage_count)
        return pt_error_set(err, PT_EINVAL, "no boundary %d (the plan has %d stages)", b,
                            cur->stage_count);
    if (layer <= cur->stages[b - 1].first)
        return pt_error_set(err, PT_EINVAL, "stage %d would have no layers", b - 1);
    if (layer >= cur->stages[b].last)
        return pt_error_set(err, PT_EINVAL, "stage %d would have no layers", b);
    if (layer == cur->stages[b].first)
        return 0;
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->stages[b - 1].last = layer;
    p->stages[b].first = layer;
    return commit(e, p, 1, err);
}

int pt_plan_edit_move_boundary(pt_plan_edit *e, int b, int delta, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    if (b < 1 || b >= cur->stage_count)
        return pt_error_set(err, PT_EINVAL, "no boundary %d (the plan has %d stages)", b,
                            cur->stage_count);
    return pt_plan_edit_set_boundary(e, b, cur->stages[b].first + delta, err);
}

/* used[d] = 1 for every device the plan uses (used has device_count entries). */
static void mark_used(const pt_plan *p, const pt_topology *t, unsigned char *used)
{
    memset(used, 0, (size_t)t->device_count);
    for (int s = 0; s < p->stage_count; s++)
        for (int r = 0; r < p->stages[s].replica_count; r++) {
            int d = p->stages[s].replicas[r];
            if (d >= 0 && d < t->device_count)
                used[d] = 1;
        }
}

/* A free device, preferring node `node` (-1: any); -1 when none is free. */
static int free_device(const pt_plan *p, const pt_topology *t, int node)
{
    unsigned char *used = malloc((size_t)t->device_count);
    if (!used)
        return -1;
    mark_used(p, t, used);
    int best = -1;
    for (int d = 0; d < t->device_count && best < 0; d++)
        if (!used[d] && (node < 0 || t->devices[d].node == node))
            best = d;
    for (int d = 0; d < t->device_count && best < 0; d++)
        if (!used[d])
            best = d;
    free(used);
    return best;
}

/* A new plan of stage_count empty stages with everything else of cur (model,
 * layers, micro-batching, schedule and its options, replication, optimizer,
 * precision; chunks stay pt_plan_new's 1).
 * NULL: out of memory. */
static pt_plan *plan_like(const pt_plan *cur, int stage_count)
{
    pt_plan *p = pt_plan_new(stage_count);
    if (!p)
        return NULL;
    memcpy(p->model, cur->model, sizeof p->model);
    p->layer_count = cur->layer_count;
    p->microbatch_size = cur->microbatch_size;
    p->microbatch_count = cur->microbatch_count;
    p->schedule = cur->schedule;
    p->policy = cur->policy;
    p->vertical_sync = cur->vertical_sync;
    p->optimizer = cur->optimizer;
    p->replication = cur->replication;
    memcpy(p->precision, cur->precision, sizeof p->precision);
    return p;
}

int pt_plan_edit_split(pt_plan_edit *e, int layer, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    int s = pt_plan_edit_stage_of_layer(e, layer);
    if (s < 0)
        return pt_error_set(err, PT_EINVAL, "no layer %d", layer);
    if (layer == cur->stages[s].first)
        return pt_error_set(err, PT_EINVAL, "a stage already starts at layer %d", layer);
    int dev = free_device(cur, e->topo, e->topo->devices[cur->stages[s].replicas[0]].node);
    if (dev < 0)
        return pt_error_set(err, PT_ENOTFOUND, "no free device for a new stage (all %d in use)",
                            e->topo->device_count);
    pt_plan *p = plan_like(cur, cur->stage_count + 1);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    pt_stage *st = p->stages;
    int rc = 0;
    for (int i = 0, j = 0; i < cur->stage_count && rc == 0; i++) {
        const pt_stage *c = &cur->stages[i];
        st[j].first = c->first;
        st[j].last = c->last;
        st[j].recompute = c->recompute;
        rc = pt_plan_set_replicas(p, j, c->replicas, c->replica_count);
        if (i == s && rc == 0) {
            st[j].last = layer;
            j++;
            st[j].first = layer;
            st[j].last = c->last;
            st[j].recompute = c->recompute;
            rc = pt_plan_set_replicas(p, j, &dev, 1);
        }
        j++;
    }
    if (rc < 0) {
        pt_plan_free(&p);
        return pt_error_set(err, rc, "out of memory");
    }
    return commit(e, p, 1, err);
}

int pt_plan_edit_merge(pt_plan_edit *e, int b, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    if (b < 1 || b >= cur->stage_count)
        return pt_error_set(err, PT_EINVAL, "no boundary %d to remove (the plan has %d stages)", b,
                            cur->stage_count);
    pt_plan *p = plan_like(cur, cur->stage_count - 1);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0, j = 0; i < cur->stage_count && rc == 0; i++) {
        const pt_stage *c = &cur->stages[i];
        if (i == b) {
            p->stages[j - 1].last = c->last;
            continue;
        }
        p->stages[j].first = c->first;
        p->stages[j].last = c->last;
        p->stages[j].recompute = c->recompute;
        rc = pt_plan_set_replicas(p, j, c->replicas, c->replica_count);
        j++;
    }
    if (rc < 0) {
        pt_plan_free(&p);
        return pt_error_set(err, rc, "out of memory");
    }
    return commit(e, p, 1, err);
}

int pt_plan_edit_replicas(pt_plan_edit *e, int stage, int delta, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    if (stage < 0 || stage >= cur->stage_count)
        return pt_error_set(err, PT_EINVAL, "no stage %d", stage);
    const pt_stage *c = &cur->stages[stage];
    int n = c->replica_count + delta;
    if (n < 1)
        return pt_error_set(err, PT_EINVAL, "stage %d cannot have fewer than 1 replica", stage);
    if (delta == 0)
        return 0;
    int *devs = malloc(sizeof(int) * (size_t)(n > c->replica_count ? n : c->replica_count));
    if (!devs)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    memcpy(devs, c->replicas, sizeof(int) * (size_t)c->replica_count);
    pt_plan *p = NULL;
    int rc = 0;
    if (delta > 0) {
        pt_plan *tmp = clone_or_fail(e, err);
        if (!tmp) {
            free(devs);
            return PT_ENOMEM;
        }
        for (int k = c->replica_count; k < n && rc == 0; k++) {
            int d = free_device(tmp, e->topo, e->topo->devices[devs[0]].node);
            if (d < 0) {
                rc = pt_error_set(err, PT_ENOTFOUND,
                                  "no free device for another replica of stage %d (all %d in use)",
                                  stage, e->topo->device_count);
                break;
            }
            devs[k] = d;
            rc = pt_plan_set_replicas(tmp, stage, devs, k + 1);
        }
        p = tmp;
    } else {
        p = clone_or_fail(e, err);
        if (p)
            rc = pt_plan_set_replicas(p, stage, devs, n);
        else
            rc = PT_ENOMEM;
    }
    free(devs);
    if (rc < 0) {
        pt_plan_free(&p);
        return rc;
    }
    if (p->microbatch_size < n) {
        pt_plan_free(&p);
        return pt_error_set(err, PT_EINVAL,
                            "stage %d would have %d replicas for micro-batches of %d samples",
                            stage, n, cur->microbatch_size);
    }
    return commit(e, p, 1, err);
}

int pt_plan_edit_place(pt_plan_edit *e, int stage, int replica, int device, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    if (stage < 0 || stage >= cur->stage_count)
        return pt_error_set(err, PT_EINVAL, "no stage %d", stage);
    if (replica < 0 || replica >= cur->stages[stage].replica_count)
        return pt_error_set(err, PT_EINVAL, "stage %d has no replica %d", stage, replica);
    if (device < 0 || device >= e->topo->device_count)
        return pt_error_set(err, PT_EINVAL, "no device %d (the topology has %d)", device,
                            e->topo->device_count);
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    int old = p->stages[stage].replicas[replica];
    for (int s = 0; s < p->stage_count; s++)
        for (int r = 0; r < p->stages[s].replica_count; r++)
            if (p->stages[s].replicas[r] == device)
                p->stages[s].replicas[r] = old;
    p->stages[stage].replicas[replica] = device;
    return commit(e, p, 1, err);
}

/* The current plan under `kind` with v chunks per device: re-cut on the same
 * devices (pt_plan_rechunk) when v differs from the plan's, else a copy.
 * NULL on error (err says why; *rc the code). */
static pt_plan *with_chunks(pt_plan_edit *e, pt_sched_kind kind, int v, int *rc, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    pt_plan *p = NULL;
    if ((cur->chunks > 1 ? cur->chunks : 1) == v) {
        if (!(p = clone_or_fail(e, err)))
            *rc = PT_ENOMEM;
        else
            p->schedule = kind;
        return p;
    }
    *rc = pt_plan_rechunk(cur, e->cost, kind, v, &p, err);
    if (*rc == 0)
        p->policy = cur->policy, p->vertical_sync = cur->vertical_sync;
    return p;
}

int pt_plan_edit_schedule(pt_plan_edit *e, pt_sched_kind kind, pt_error *err)
{
    if (!pt_sched_kind_name(kind))
        return pt_error_set(err, PT_EINVAL, "no schedule kind %d", (int)kind);
    /* a kind that takes chunks starts at its fewest (the table's chunks_min) and
     * keeps the plan's when it has some; any other kind gets one per device */
    int lo, hi, have = e->cur.plan->chunks > 1 ? e->cur.plan->chunks : 1, rc = 0;
    pt_sched_kind_chunks(kind, &lo, &hi);
    int v = have >= lo && have <= hi ? have : lo;
    pt_plan *p = with_chunks(e, kind, v, &rc, err);
    if (!p)
        return rc;
    return commit(e, p, 1, err);
}

int pt_plan_edit_kind(pt_plan_edit *e, pt_sched_kind kind, pt_error *err)
{
    const char *name = pt_sched_kind_name(kind);
    if (!name)
        return pt_error_set(err, PT_EINVAL, "no schedule kind %d", (int)kind);
    const pt_plan *cur = e->cur.plan;
    int lo, hi, v = cur->chunks > 1 ? cur->chunks : 1;
    pt_sched_kind_chunks(kind, &lo, &hi);
    if (v < lo)
        return pt_error_set(err, PT_EINVAL,
                            "%s runs %d to %d model chunks on each device and this plan has one "
                            "stage per device; S keeps every stage boundary, so it skips %s (V "
                            "re-cuts the layers into %d chunks per device: the boundaries move)",
                            name, lo, hi, name, lo);
    if (v > hi)
        return pt_error_set(err, PT_EINVAL,
                            "this plan is %d model chunks on each of %d devices, which %s cannot "
                            "run; S keeps every stage boundary, so it skips %s (V past the most "
                            "chunks goes back to one stage per device: the boundaries move)",
                            v, pt_plan_rank_count(cur), name, name);
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->schedule = kind;
    return commit(e, p, 1, err);
}

int pt_plan_edit_chunks(pt_plan_edit *e, int v, pt_error *err)
{
    pt_sched_kind kind = e->cur.plan->schedule;
    int lo, hi, rc = 0;
    pt_sched_kind_chunks(kind, &lo, &hi);
    if (lo == hi)
        return pt_error_set(err, PT_EUNSUPP,
                            "model chunks per device do not apply to %s (interleaved takes "
                            "them; S changes the schedule)",
                            pt_sched_kind_name(kind));
    if (v < lo || v > hi)
        return pt_error_set(err, PT_EINVAL, "%s takes %d to %d model chunks per device, not %d",
                            pt_sched_kind_name(kind), lo, hi, v);
    pt_plan *p = with_chunks(e, kind, v, &rc, err);
    if (!p)
        return rc;
    return commit(e, p, 1, err);
}

int pt_plan_edit_policy(pt_plan_edit *e, char policy, pt_error *err)
{
    if (policy != 'A' && policy != 'B')
        return pt_error_set(err, PT_EINVAL, "policy must be A or B, not '%c'", policy);
    if (!pt_sched_kind_has(e->cur.plan->schedule, PT_SCHED_OPT_POLICY))
        return pt_error_set(err, PT_EUNSUPP,
                            "the warm-up policy does not apply to %s (dapple reads it; S "
                            "changes the schedule)",
                            pt_sched_kind_name(e->cur.plan->schedule));
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->policy = policy;
    return commit(e, p, 1, err);
}

int pt_plan_edit_toggle_vsync(pt_plan_edit *e, pt_error *err)
{
    if (!pt_sched_kind_has(e->cur.plan->schedule, PT_SCHED_OPT_VSYNC))
        return pt_error_set(err, PT_EUNSUPP,
                            "vertical sync does not apply to %s (pipedream reads it; S "
                            "changes the schedule)",
                            pt_sched_kind_name(e->cur.plan->schedule));
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->vertical_sync = !p->vertical_sync;
    return commit(e, p, 1, err);
}

int pt_plan_edit_toggle_recompute(pt_plan_edit *e, int stage, pt_error *err)
{
    if (stage < 0 || stage >= e->cur.plan->stage_count)
        return pt_error_set(err, PT_EINVAL, "no stage %d", stage);
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->stages[stage].recompute = !p->stages[stage].recompute;
    return commit(e, p, 1, err);
}

int pt_plan_edit_microbatch(pt_plan_edit *e, int size, int count, pt_error *err)
{
    if (size < 1 || size > PT_PLAN_MB_SIZE_MAX)
        return pt_error_set(err, PT_EINVAL, "micro-batch size %d is outside 1..%d", size,
                            PT_PLAN_MB_SIZE_MAX);
    if (count < 1 || count > PT_PLAN_MB_COUNT_MAX)
        return pt_error_set(err, PT_EINVAL, "micro-batch count %d is outside 1..%d", count,
                            PT_PLAN_MB_COUNT_MAX);
    const pt_plan *cur = e->cur.plan;
    for (int s = 0; s < cur->stage_count; s++)
        if (cur->stages[s].replica_count > size)
            return pt_error_set(err, PT_EINVAL,
                                "micro-batches of %d samples cannot be split over the %d "
                                "replicas of stage %d",
                                size, cur->stages[s].replica_count, s);
    pt_plan *p = clone_or_fail(e, err);
    if (!p)
        return PT_ENOMEM;
    p->microbatch_size = size;
    p->microbatch_count = count;
    return commit(e, p, 1, err);
}

int pt_plan_edit_replace(pt_plan_edit *e, const pt_plan *plan, pt_error *err)
{
    if (!plan)
        return pt_error_set(err, PT_EINVAL, "no plan");
    pt_plan *p = pt_plan_clone(plan);
    if (!p)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    return commit(e, p, 1, err);
}

int pt_plan_edit_undo(pt_plan_edit *e, pt_error *err)
{
    if (e->undo_n == 0)
        return pt_error_set(err, PT_ESTATE, "nothing to undo");
    pt_plan *p = e->undo[--e->undo_n];
    /* the previous plan was valid when it was current; fit rules may differ
     * now only if it did not fit, which commit allows when the current one
     * does not fit either, so force it through by re-checking as a first plan */
    int fits = e->cur.res.fits;
    e->cur.res.fits = 0;
    int rc = commit(e, p, 0, err);
    if (rc < 0) {
        e->cur.res.fits = fits;
        return rc;
    }
    return 0;
}

int pt_plan_edit_predict(pt_plan_edit *e, const pt_plan *plan, double *iter_s, pt_error *err)
{
    int rc = pt_plan_check(plan, NULL, e->topo, "plan", err);
    if (rc < 0)
        return rc;
    rc = pt_sim_plan(e->cand.sim, plan, e->cost, NULL, &e->cand.prog, &e->cand.res, err);
    if (rc < 0)
        return rc;
    if (iter_s)
        *iter_s = e->cand.res.iter_s;
    return 0;
}

int pt_plan_edit_run_planner(pt_plan_edit *e, const char *name, pt_plan_edit_gain *gain,
                             pt_error *err)
{
    const pt_planner_info *info = pt_planner_find(name);
    if (!info) {
        char names[256] = "";
        for (int i = 0; i < pt_planner_count(); i++) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", pt_planner_get(i)->name);
        }
        return pt_error_set(err, PT_ENOTFOUND, "no planner '%s' (known: %s)", name ? name : "",
                            names);
    }
    const pt_plan *cur = e->cur.plan;
    int global = cur->microbatch_size * cur->microbatch_count;
    pt_planner_opts opts;
    pt_planner_opts_default(&opts);
    opts.optim = cur->optimizer.kind;
    /* dapple and gpipe pick the fastest synchronous kind that fits (the report
     * lists each kind's simulated time and memory) */
    opts.kinds = PT_PLANNER_KINDS_SYNC;
    pt_plan_edit_gain g;
    memset(&g, 0, sizeof g);
    g.old_iter_s = e->cur.res.iter_s;
    g.old_throughput = e->cur.res.throughput;
    pt_plan *p = NULL;
    int rc = pt_planner_run(name, e->profile, e->topo, global, &opts, &p, &g.report, err);
    if (rc < 0)
        return rc;
    p->optimizer = cur->optimizer;
    rc = commit(e, p, 1, err);
    if (rc < 0)
        return rc;
    g.new_iter_s = e->cur.res.iter_s;
    g.new_throughput = e->cur.res.throughput;
    g.gain = g.old_iter_s > 0 ? (g.old_iter_s - g.new_iter_s) / g.old_iter_s : 0;
    if (gain)
        *gain = g;
    return 0;
}

int pt_plan_edit_resplit(pt_plan_edit *e, int size_dir, int count_dir, pt_error *err)
{
    const pt_plan *cur = e->cur.plan;
    int size = cur->microbatch_size, count = cur->microbatch_count;
    int global = size * count;
    if (size_dir > 0) {
        if (global % (size * 2))
            return pt_error_set(err, PT_EINVAL,
                                "micro-batches of %d samples do not divide the global batch of "
                                "%d (g G change the global batch)",
                                size * 2, global);
        size *= 2;
        count = global / size;
    } else if (size_dir < 0) {
        if (size % 2)
            return pt_error_set(err, PT_EINVAL,
                                "micro-batches of %d samples cannot be halved (g G change the "
                                "global batch of %d)",
                                size, global);
        size /= 2;
        count = global / size;
    } else if (count_dir != 0) {
        int c = count + count_dir;
        while (c >= 1 && c <= global && global % c)
            c += count_dir;
        if (c < 1 || c > global)
            return pt_error_set(err, PT_EINVAL,
                                "no %s micro-batches split the global batch of %d evenly (g G "
                                "change it)",
                                count_dir > 0 ? "more" : "fewer", global);
        count = c;
        size = global / c;
    }
    return pt_plan_edit_microbatch(e, size, count, err);
}
