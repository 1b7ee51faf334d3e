/* The roofline floor of a layer's time (the formulas are roofline.h's). */
#include "planner/roofline.h"

_Static_assert((int)PT_ROOFLINE_FWD == (int)PT_PROFILE_PASS_FWD &&
                   (int)PT_ROOFLINE_BWD == (int)PT_PROFILE_PASS_BWD &&
                   (int)PT_ROOFLINE_RECOMPUTE == (int)PT_PROFILE_PASS_RECOMPUTE,
               "the roofline's passes are the profile's");

/* One pass's bound as a max of two lines in the rows plus launches:
 * compute a1·b, memory beta + a2·b (ms per sample and ms), launches gamma. */
typedef struct terms {
    double a1, a2, beta, gamma;
} terms;

static terms terms_of(const pt_profile *p, const pt_profile_layer *l, pt_roofline_pass pass)
{
    const pt_profile_roofline *r = &p->roofline;
    double k = pass == PT_ROOFLINE_BWD ? PT_ROOFLINE_BWD_FACTOR : 1.0, mb = p->microbatch;
    int kernels = pass == PT_ROOFLINE_BWD && l->param_bytes > 0 ? 2 * l->kernels : l->kernels;
    terms t;
    t.a1 = k * l->flops / mb / r->peak_flops * PT_ROOFLINE_MS_PER_S;
    t.a2 = k * (double)l->bytes / mb / r->mem_bandwidth * PT_ROOFLINE_MS_PER_S;
    t.beta = k * (double)l->weight_bytes / r->mem_bandwidth * PT_ROOFLINE_MS_PER_S;
    t.gamma = kernels * r->launch_us / PT_ROOFLINE_US_PER_MS;
    return t;
}

static double bound(terms t, double rows)
{
    double compute = t.a1 * rows, memory = t.beta + t.a2 * rows;
    return (compute > memory ? compute : memory) + t.gamma;
}

static double steepest(terms t)
{
    return t.a1 > t.a2 ? t.a1 : t.a2;
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}

double pt_roofline_bound_ms(const pt_profile *p, int layer, pt_roofline_pass pass, double rows)
{
    if (!p || !p->roofline.has || layer < 0 || layer >= p->layer_count || !(rows > 0) ||
        p->microbatch < 1 || pass < 0 || pass >= PT_ROOFLINE_PASSES)
        return 0;
    return bound(terms_of(p, &p->layers[layer], pass), rows);
}

/* The layer's backward halves follow its backward when the floor raises it. */
static void scale_split(pt_profile_layer *l, double bwd_before)
{
    if (!l->split || l->bwd_ms == bwd_before)
        return;
    if (bwd_before > 0) {
        double k = l->bwd_ms / bwd_before;
        l->bwd_input_ms *= k;
        l->bwd_weight_ms *= k;
    } else {
        l->bwd_input_ms = l->param_bytes > 0 ? l->bwd_ms / 2 : l->bwd_ms;
        l->bwd_weight_ms = l->bwd_ms - l->bwd_input_ms;
    }
}

/* One pass: the smallest share >= f whose line t·(f + (1 - f)/mb) reaches
 * B(1), then the time raised where the line would still fall under B(1) or
 * climb slower than B. */
static void floor_pass(terms tm, double mb, double *t, double *f)
{
    double inv = 1.0 / mb;
    *t = max2(*t, bound(tm, mb));
    if (mb > 1 && *t > 0)
        *f = max2(*f, (bound(tm, 1) / *t - inv) / (1 - inv));
    if (*f > PT_PROFILE_SHARE_MAX)
        *f = PT_PROFILE_SHARE_MAX;
    double at_one = *f + (1 - *f) * inv;
    *t = max2(*t, max2(bound(tm, 1) / at_one, steepest(tm) * mb / (1 - *f)));
    if (!(*t > 0))
        *f = 0;
}

static void floor_layer(const pt_profile *p, pt_profile_layer *l)
{
    double t[PT_ROOFLINE_PASSES] = {l->fwd_ms, l->bwd_ms,
                                    l->recompute_ms > 0 ? l->recompute_ms : l->fwd_ms};
    double f[PT_ROOFLINE_PASSES];
    for (int x = 0; x < PT_ROOFLINE_PASSES; x++) {
        /* the passes of roofline.h and of the profile are the same three */
        f[x] = pt_profile_layer_share(l, (pt_profile_pass)x);
        floor_pass(terms_of(p, l, (pt_roofline_pass)x), p->microbatch, &t[x], &f[x]);
    }
    double bwd_before = l->bwd_ms;
    l->fwd_ms = t[PT_ROOFLINE_FWD];
    l->bwd_ms = t[PT_ROOFLINE_BWD];
    l->recompute_ms = t[PT_ROOFLINE_RECOMPUTE];
    l->fixed_share = f[PT_ROOFLINE_FWD];
    l->bwd_fixed_share = f[PT_ROOFLINE_BWD];
    l->recompute_fixed_share = f[PT_ROOFLINE_RECOMPUTE];
    l->pass_shares = 1;
    scale_split(l, bwd_before);
}

void pt_roofline_floor(pt_profile *p)
{
    if (!p || !p->roofline.has || p->microbatch < 1 || !(p->roofline.peak_flops > 0) ||
        !(p->roofline.mem_bandwidth > 0))
        return;
    for (int i = 0; i < p->layer_count; i++)
        floor_layer(p, &p->layers[i]);
}
