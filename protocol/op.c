/* The op vocabulary table (see op.h). */
#include "protocol/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/error.h"

static const pt_op_info ops[PT_OP_KIND_COUNT] = {
#define PT_OP_ROW_(kind, lane, paint, glyph, facts)                                                \
    [PT_OP_##kind] = {#kind, PT_LANE_##lane, PT_PAINT_##paint, glyph, facts},
    PT_OP_LIST(PT_OP_ROW_)
#undef PT_OP_ROW_
};

static const char *const paint_names[PT_PAINT_COUNT] = {
    "fwd",  "bwd",       "bwd-input", "bwd-weight", "recompute",
    "comm", "allreduce", "optstep",   "wait",       "bubble",
};

const pt_op_info *pt_op_info_of(int kind)
{
    return kind >= 0 && kind < PT_OP_KIND_COUNT ? &ops[kind] : NULL;
}

const char *pt_op_name(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i ? i->name : "?";
}

int pt_op_parse(const char *name, pt_op_kind *out)
{
    if (!name)
        return PT_ENOTFOUND;
    for (int k = 0; k < PT_OP_KIND_COUNT; k++)
        if (!strcmp(name, ops[k].name)) {
            *out = (pt_op_kind)k;
            return 0;
        }
    return PT_ENOTFOUND;
}

pt_lane pt_op_lane(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i ? i->lane : PT_LANE_WAIT;
}

bool pt_op_is_compute(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i && (i->facts & PT_OPK_COMPUTE);
}

unsigned pt_op_facts(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i ? i->facts : 0;
}

bool pt_op_has_one_mb(int kind)
{
    return pt_op_facts(kind) & PT_OPK_MB;
}

bool pt_op_is_mb_compute(int kind)
{
    unsigned f = pt_op_facts(kind);
    return (f & PT_OPK_COMPUTE) && (f & PT_OPK_MB);
}

char *pt_op_names_list(char *out, int cap, const char *sep)
{
    int n = 0;
    out[0] = 0;
    for (int k = 0; k < PT_OP_KIND_COUNT && n < cap; k++) {
        int w = snprintf(out + n, (size_t)(cap - n), "%s%s", k ? sep : "", ops[k].name);
        if (w < 0)
            break;
        n += w;
    }
    return out;
}

bool pt_op_has_mb(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i && (i->facts & (PT_OPK_MB | PT_OPK_MB_RANGE));
}

bool pt_op_has_version(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i && (i->facts & PT_OPK_VERSION);
}

pt_op_paint pt_op_paint_of(int kind)
{
    const pt_op_info *i = pt_op_info_of(kind);
    return i ? i->paint : PT_PAINT_BUBBLE;
}

const char *pt_paint_name(int paint)
{
    return paint >= 0 && paint < PT_PAINT_COUNT ? paint_names[paint] : "?";
}

static int cmp_lo(const void *a, const void *b)
{
    double x = ((const pt_op_iter *)a)->lo, y = ((const pt_op_iter *)b)->lo;
    return (x > y) - (x < y);
}

double pt_op_iters_time_s(pt_op_iter *it, int64_t n)
{
    if (!it || n <= 0)
        return 0.0;
    qsort(it, (size_t)n, sizeof *it, cmp_lo);
    double total = 0, lo = it[0].lo, hi = it[0].hi;
    for (int64_t i = 1; i < n; i++) {
        if (it[i].lo > hi) {
            total += hi > lo ? hi - lo : 0;
            lo = it[i].lo;
            hi = it[i].hi;
        } else if (it[i].hi > hi) {
            hi = it[i].hi;
        }
    }
    return total + (hi > lo ? hi - lo : 0);
}

double pt_op_busy_frac(double compute_s, double span_s)
{
    if (!(span_s > 0) || !(compute_s > 0))
        return 0.0;
    double f = compute_s / span_s;
    return f > 1.0 ? 1.0 : f;
}
