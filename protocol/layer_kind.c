/* The table of layer kinds, generated from protocol/layer_kinds.h, and the
 * dispatchers over their facts. See protocol/layer_kind.h. */
#include "protocol/layer_kind.h"

#include <stdio.h>
#include <string.h>

typedef struct kind_row {
    const char *name;
    unsigned flags;
    const pt_layer_facts *facts;
} kind_row;

static const kind_row rows[PT_LAYER_KIND_COUNT] = {
#define PT_LAYER_ROW_(E, name, flags) [PT_LAYER_##E] = {#name, flags, &pt_layer_##name##_facts},
    PT_LAYER_LIST(PT_LAYER_ROW_)
#undef PT_LAYER_ROW_
};

static const kind_row *row_of(pt_layer_kind kind)
{
    if ((int)kind < 0 || kind >= PT_LAYER_KIND_COUNT)
        return NULL;
    return &rows[kind];
}

const pt_layer_facts *pt_layer_facts_of(pt_layer_kind kind)
{
    const kind_row *r = row_of(kind);
    return r ? r->facts : NULL;
}

const char *pt_layer_kind_name(pt_layer_kind kind)
{
    const kind_row *r = row_of(kind);
    return r ? r->name : NULL;
}

unsigned pt_layer_kind_flags(pt_layer_kind kind)
{
    const kind_row *r = row_of(kind);
    return r ? r->flags : 0;
}

int pt_layer_kind_parse(const char *name, pt_layer_kind *out)
{
    for (int k = 0; name && k < PT_LAYER_KIND_COUNT; k++)
        if (!strcmp(rows[k].name, name)) {
            *out = (pt_layer_kind)k;
            return 0;
        }
    return PT_ENOTFOUND;
}

int pt_layer_has_params(const pt_layer_spec *l)
{
    unsigned f = pt_layer_kind_flags(l->kind);
    if (f & PT_LKF_PARAMS)
        return 1;
    for (int j = 0; (f & PT_LKF_BODY) && j < l->body_count; j++)
        if (pt_layer_has_params(&l->body[j]))
            return 1;
    return 0;
}

int pt_layer_out_shape(const pt_layer_spec *l, int depth, int *rank, int *dims, pt_error *err)
{
    const pt_layer_facts *f = pt_layer_facts_of(l->kind);
    if (!f)
        return pt_error_set(err, PT_EINVAL, "%s: unknown layer kind %d", l->name, (int)l->kind);
    pt_jr jr = {"layer", err};
    pt_layer_shape_ctx c = {&jr, NULL, 0};
    pt_layer_shape io;
    memset(&io, 0, sizeof io);
    io.rank = *rank;
    memcpy(io.dims, dims, sizeof io.dims);
    io.out_elems = pt_layer_shape_elems(&io);
    int rc = f->shape(&c, l, l->name, depth, &io);
    if (rc < 0)
        return rc;
    *rank = io.rank;
    memcpy(dims, io.dims, sizeof io.dims);
    return 0;
}

void pt_layer_memory(const pt_layer_layout *x, const pt_layer_spec *l, int *rank, int *dims,
                     pt_layer_mem *m)
{
    const pt_layer_facts *f = pt_layer_facts_of(l->kind);
    memset(m, 0, sizeof *m);
    m->kernels = 1;
    if (f && f->memory)
        f->memory(x, l, *rank, dims, m);
    pt_layer_out_shape(l, 0, rank, dims, NULL); /* a valid spec: it fits */
}

void pt_layer_core(const pt_layer_spec *l, int rank, const int *dims, double e, int selective,
                   double *flops, double *bytes, int *kernels)
{
    const pt_layer_facts *f = pt_layer_facts_of(l->kind);
    if (f && f->core)
        f->core(l, rank, dims, e, selective, flops, bytes, kernels);
}

int pt_layer_tensors_of(pt_layer_tensors *t, const pt_layer_spec *l, int depth, int *rank,
                        int *dims, pt_error *err)
{
    if (depth > PT_MODEL_NESTING_MAX)
        return pt_error_set(err, PT_EINVAL, "residual bodies nested deeper than %d",
                            PT_MODEL_NESTING_MAX);
    const pt_layer_facts *f = pt_layer_facts_of(l->kind);
    if (!f)
        return pt_error_set(err, PT_EINVAL, "%s: unknown layer kind %d", l->name, (int)l->kind);
    int rc = f->tensors ? f->tensors(t, l, depth, *rank, dims, err) : 0;
    return rc < 0 ? rc : pt_layer_out_shape(l, depth, rank, dims, err);
}

void pt_layer_tensor_add(pt_layer_tensors *t, const char *name, int rank, int64_t d0, int64_t d1)
{
    char full[PT_LAYER_TENSOR_NAME_MAX];
    if (snprintf(full, sizeof full, "%s%s", t->prefix, name) < 0)
        full[0] = 0;
    t->add(t->user, full, rank, d0, d1);
}

int pt_layer_check_size(pt_jr *jr, const char *path, const char *key, int v)
{
    if (v < 1)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be > 0 (got %d)", v);
    if (v > PT_MODEL_DIM_MAX)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be <= %d (got %d)", PT_MODEL_DIM_MAX, v);
    return 0;
}

int64_t pt_layer_shape_elems(const pt_layer_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

void pt_layer_shape_str(char *out, size_t cap, const pt_layer_shape *s)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < s->rank && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", i ? "," : "", s->dims[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}
