/* SGD with momentum and Adam over flat arrays, state in the arena. */
#include "runtime/optim.h"

#include <math.h>
#include <stdlib.h>

#define OPTIM_STATE_MAX 2

struct pt_optim {
    pt_optim_spec spec;
    pt_arena *arena;
    const pt_backend *be;
    int64_t count;
    int64_t steps;
    int nstate;
    float *state[OPTIM_STATE_MAX];
};

static int check_spec(const pt_optim_spec *s, pt_error *err)
{
    if (!(s->lr > 0.0f))
        return pt_error_set(err, PT_EINVAL, "optimizer.lr: %g must be positive", (double)s->lr);
    if (!(s->weight_decay >= 0.0f))
        return pt_error_set(err, PT_EINVAL, "optimizer.weight_decay: %g must not be negative",
                            (double)s->weight_decay);
    if (s->kind == PT_OPTIM_SGD) {
        if (!(s->momentum >= 0.0f && s->momentum < 1.0f))
            return pt_error_set(err, PT_EINVAL, "optimizer.momentum: %g is outside [0,1)",
                                (double)s->momentum);
        return 0;
    }
    if (s->kind != PT_OPTIM_ADAM)
        return pt_error_set(err, PT_EINVAL, "optimizer.kind: unknown kind %d", (int)s->kind);
    if (!(s->beta1 >= 0.0f && s->beta1 < 1.0f))
        return pt_error_set(err, PT_EINVAL, "optimizer.beta1: %g is outside [0,1)",
                            (double)s->beta1);
    if (!(s->beta2 >= 0.0f && s->beta2 < 1.0f))
        return pt_error_set(err, PT_EINVAL, "optimizer.beta2: %g is outside [0,1)",
                            (double)s->beta2);
    if (!(s->eps > 0.0f))
        return pt_error_set(err, PT_EINVAL, "optimizer.eps: %g must be positive", (double)s->eps);
    return 0;
}

int pt_optim_create(const pt_optim_spec *spec, pt_arena *arena, int64_t count, pt_optim **out,
                    pt_error *err)
{
    *out = NULL;
    if (!spec || !arena)
        return pt_error_set(err, PT_EINVAL, "optimizer: no spec or arena");
    int rc = check_spec(spec, err);
    if (rc < 0)
        return rc;
    if (count < 0)
        return pt_error_set(err, PT_EINVAL, "optimizer: count %lld is negative", (long long)count);
    pt_optim *o = calloc(1, sizeof *o);
    if (!o)
        return pt_error_set(err, PT_ENOMEM, "optimizer: out of memory");
    o->spec = *spec;
    o->arena = arena;
    o->be = pt_arena_backend(arena);
    o->count = count;
    o->nstate = spec->kind == PT_OPTIM_ADAM ? 2 : 1;
    for (int i = 0; i < o->nstate; i++) {
        o->state[i] = pt_arena_alloc_floats(arena, PT_MEM_OPTIM, count);
        if (!o->state[i]) {
            pt_optim_destroy(&o);
            return pt_error_set(err, PT_ENOMEM, "optimizer: out of memory for %lld floats",
                                (long long)count);
        }
    }
    pt_optim_reset(o);
    *out = o;
    return 0;
}

void pt_optim_destroy(pt_optim **optim_p)
{
    if (!optim_p || !*optim_p)
        return;
    pt_optim *o = *optim_p;
    for (int i = 0; i < o->nstate; i++)
        pt_arena_free(o->arena, o->state[i]);
    free(o);
    *optim_p = NULL;
}

void pt_optim_step(pt_optim *o, float *params, const float *grads)
{
    pt_optim_step_to(o, params, params, grads);
}

void pt_optim_step_to(pt_optim *o, const float *params, float *out, const float *grads)
{
    const pt_optim_spec *s = &o->spec;
    o->steps++;
    if (s->kind == PT_OPTIM_SGD) {
        o->be->sgd_update(o->be, o->count, s->lr, s->momentum, s->weight_decay, params, out, grads,
                          o->state[0]);
        return;
    }
    double t = (double)o->steps;
    float bc1 = (float)(1.0 - pow(s->beta1, t));
    float bc2 = (float)(1.0 - pow(s->beta2, t));
    o->be->adam_update(o->be, o->count, s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, bc1,
                       bc2, params, out, grads, o->state[0], o->state[1]);
}

const pt_optim_spec *pt_optim_get_spec(const pt_optim *o)
{
    return &o->spec;
}

void pt_optim_set_lr(pt_optim *o, float lr)
{
    o->spec.lr = lr;
}

int64_t pt_optim_count(const pt_optim *o)
{
    return o->count;
}

int64_t pt_optim_steps(const pt_optim *o)
{
    return o->steps;
}

void pt_optim_set_steps(pt_optim *o, int64_t steps)
{
    o->steps = steps;
}

int pt_optim_state_count(const pt_optim *o)
{
    return o->nstate;
}

const char *pt_optim_state_name(const pt_optim *o, int i)
{
    if (i < 0 || i >= o->nstate)
        return NULL;
    if (o->spec.kind == PT_OPTIM_SGD)
        return "momentum";
    return i == 0 ? "adam_m" : "adam_v";
}

static int check_range(const pt_optim *o, int i, int64_t offset, int64_t count)
{
    if (i < 0 || i >= o->nstate || offset < 0 || count < 0 || offset + count > o->count)
        return PT_ERANGE;
    return 0;
}

int pt_optim_get_state(pt_optim *o, int i, int64_t offset, int64_t count, float *host)
{
    if (check_range(o, i, offset, count) < 0)
        return PT_ERANGE;
    o->be->download(o->be, host, o->state[i] + offset, (size_t)count * sizeof(float));
    return 0;
}

int pt_optim_set_state(pt_optim *o, int i, int64_t offset, int64_t count, const float *host)
{
    if (check_range(o, i, offset, count) < 0)
        return PT_ERANGE;
    o->be->upload(o->be, o->state[i] + offset, host, (size_t)count * sizeof(float));
    return 0;
}

void pt_optim_reset(pt_optim *o)
{
    for (int i = 0; i < o->nstate; i++)
        o->be->fill(o->be, o->count, 0.0f, o->state[i]);
    o->steps = 0;
}
