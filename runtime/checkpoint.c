/* Per-layer checkpoints; the format is in docs/formats.md ("Checkpoint"). */
#include "runtime/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"
#include "protocol/layer_kind.h"

#define PATH_BYTES 4096
/* Most parameter tensors one top-level layer may have (a residual body's included). */
#define MAX_LAYER_TENSORS 256
/* Alternative file names tried per tensor before giving up. */
#define MAX_NAME_SLOTS 8

/* ---- the tensors of a layer, from the spec ---- */

typedef struct tensor_list {
    pt_ckpt_tensor *out;
    int max, n;
} tensor_list;

static void add_tensor(void *user, const char *name, int rank, int64_t d0, int64_t d1)
{
    tensor_list *tl = user;
    if (tl->n < tl->max) {
        pt_ckpt_tensor *t = &tl->out[tl->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->rank = rank;
        t->shape[0] = d0;
        t->shape[1] = rank > 1 ? d1 : 0;
        t->count = rank > 1 ? d0 * d1 : d0;
    }
    tl->n++;
}

/* Appends the tensors of a chain of layers to tl (each kind's facts say
 * which: protocol/layer_kind.h), propagating the per-sample shape (rank,
 * dims) through it. */
static int chain_tensors(const pt_layer_spec *layers, int count, int *rank, int *dims,
                         tensor_list *tl, pt_error *err)
{
    pt_layer_tensors t = {add_tensor, tl, ""};
    for (int i = 0; i < count; i++) {
        int rc = pt_layer_tensors_of(&t, &layers[i], 0, rank, dims, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int pt_ckpt_layer_tensors(const pt_model_spec *spec, int layer, pt_ckpt_tensor *out, int max,
                          pt_error *err)
{
    if (layer < 0 || layer >= spec->layer_count)
        return pt_error_set(err, PT_EINVAL, "model %s: no layer %d", spec->name, layer);
    int rank = spec->input_rank, dims[PT_SHAPE_MAX] = {0};
    memcpy(dims, spec->input, sizeof(int) * (size_t)rank);
    tensor_list none = {NULL, 0, 0};
    int rc = chain_tensors(spec->layers, layer, &rank, dims, &none, err);
    if (rc < 0)
        return rc;
    tensor_list tl = {out, max, 0};
    rc = chain_tensors(&spec->layers[layer], 1, &rank, dims, &tl, err);
    return rc < 0 ? rc : tl.n;
}

/* ---- tensor files ---- */

/* The files hold little-endian float32; on a big-endian host swap in place. */
static void to_little_endian(float *v, int64_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        u = __builtin_bswap32(u);
        memcpy(&v[i], &u, 4);
    }
#else
    (void)v;
    (void)n;
#endif
}

static uint32_t crc_of(const void *data, size_t bytes)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *p = data;
    while (bytes > 0) {
        uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = crc32(crc, p, chunk);
        p += chunk;
        bytes -= chunk;
    }
    return (uint32_t)crc;
}

/* The index of the first element of v[0..n) that is not a finite number, or
 * -1: a checkpoint never holds one (a diverged run stops before its next
 * checkpoint, and a file that holds one is refused on load). */
static int64_t first_nonfinite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return -1;
}

int pt_ckpt_read_tensor(const char *dir, const pt_ckpt_tensor *t, float *host, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, t->file);
    /* a regular file only: a FIFO or device in the checkpoint folder would hang or never end */
    int fd;
    int rc = pt_file_open_regular(path, PT_CKPT_TENSOR_FLOATS_MAX * (long long)sizeof(float) + 1,
                                  &fd, NULL, err);
    if (rc < 0) {
        char why[PT_ERROR_MAX];
        snprintf(why, sizeof why, "%s", err ? err->msg : "");
        return pt_error_set(err, rc, "%s (tensor %s of the checkpoint)", why, t->name);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return pt_error_set(err, PT_EIO, "%s: %s (tensor %s of the checkpoint)", path,
                            strerror(errno), t->name);
    }
    size_t want = (size_t)t->count * sizeof(float);
    size_t got = fread(host, 1, want, f);
    int extra = fgetc(f) != EOF;
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return pt_error_set(err, PT_EIO, "%s: read error", path);
    if (got != want || extra)
        return pt_error_set(err, PT_EPARSE,
                            "%s: %s file size: tensor %s needs %lld floats (%zu bytes)%s%zu "
                            "bytes",
                            path, got < want ? "truncated" : "wrong", t->name, (long long)t->count,
                            want, got < want ? ", the file holds " : ", the file holds more than ",
                            got);
    uint32_t crc = crc_of(host, want);
    if (crc != t->crc32)
        return pt_error_set(err, PT_EPARSE,
                            "%s: crc32 mismatch: index.json says %u, the file's is %u "
                            "(corrupt or replaced file)",
                            path, t->crc32, crc);
    to_little_endian(host, t->count);
    int64_t nf = first_nonfinite(host, t->count);
    if (nf >= 0)
        return pt_error_set(err, PT_ERANGE,
                            "%s: element %lld of tensor %s is %g, not a finite number (the crc "
                            "matches: it was saved so); refusing to resume from it",
                            path, (long long)nf, t->name, (double)host[nf]);
    return 0;
}

/* Writes host[0..count) (little-endian) to dir/file via temporary name,
 * fsync and rename, and returns its crc32 in *crc. host is scratch: it may
 * be byte-swapped. */
static int write_tensor_file(const char *dir, const char *file, float *host, int64_t count,
                             uint32_t *crc, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int64_t bad = first_nonfinite(host, count);
    if (bad >= 0)
        return pt_error_set(err, PT_ERANGE,
                            "%s: element %lld of %lld is %g, not a finite number: a checkpoint "
                            "of a diverged run is not written",
                            path, (long long)bad, (long long)count, (double)host[bad]);
    to_little_endian(host, count);
    *crc = crc_of(host, (size_t)count * sizeof(float));
    return pt_file_write_atomic(path, host, (size_t)count * sizeof(float), err);
}

/* ---- saving ---- */

static int referenced(const pt_ckpt_index *ix, const char *file)
{
    for (int i = 0; ix && i < ix->layer_count; i++)
        for (int t = 0; t < ix->layers[i].tensor_count; t++)
            if (!strcmp(ix->layers[i].tensors[t].file, file))
                return 1;
    return 0;
}

/* A file name for tensor `name` of `layer` that the current index does not
 * reference: "layer003.weight.f32", else "layer003.weight.1.f32", ... */
static int pick_file_name(const pt_ckpt_index *cur, int layer, const char *name, char *out,
                          size_t cap, pt_error *err)
{
    for (int slot = 0; slot < MAX_NAME_SLOTS; slot++) {
        int n = slot == 0 ? snprintf(out, cap, "layer%03d.%s.f32", layer, name)
                          : snprintf(out, cap, "layer%03d.%s.%d.f32", layer, name, slot);
        if (n < 0 || (size_t)n >= cap)
            return pt_error_set(err, PT_EINVAL, "layer %d: tensor name %s is too long", layer,
                                name);
        if (!referenced(cur, out))
            return 0;
    }
    return pt_error_set(err, PT_EINVAL, "layer %d: every file name for %s is in use", layer, name);
}

/* The tensors of net layer `layer` checked against the net's slice. */
static int layer_layout(const pt_model_spec *spec, pt_net *net, int layer, pt_ckpt_tensor *ts,
                        int *count, int64_t *offset, int64_t *floats, pt_error *err)
{
    int n = pt_ckpt_layer_tensors(spec, layer, ts, MAX_LAYER_TENSORS, err);
    if (n < 0)
        return n;
    if (n > MAX_LAYER_TENSORS)
        return pt_error_set(err, PT_EUNSUPP, "layer %d (%s): more than %d tensors", layer,
                            spec->layers[layer].name, MAX_LAYER_TENSORS);
    int rc = pt_net_layer_range(net, layer, offset, floats);
    if (rc < 0)
        return pt_error_set(err, rc, "layer %d is not in the net [%d, %d)", layer,
                            pt_net_first(net), pt_net_last(net));
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += ts[i].count;
    if (sum != *floats)
        return pt_error_set(err, PT_EUNSUPP,
                            "layer %d (%s): the net holds %lld parameters, its tensors %lld", layer,
                            spec->layers[layer].name, (long long)*floats, (long long)sum);
    *count = n;
    return 0;
}

static int write_one_layer(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                           const pt_ckpt_index *cur, int layer, int64_t step, pt_ckpt_tensor *ts,
                           float *host, pt_ckpt_layer *out, pt_error *err)
{
    int n;
    int64_t offset, floats;
    int rc = layer_layout(spec, net, layer, ts, &n, &offset, &floats, err);
    if (rc < 0)
        return rc;
    int states = optim ? pt_optim_state_count(optim) : 0;
    out->index = layer;
    out->step = step;
    snprintf(out->name, sizeof out->name, "%s", spec->layers[layer].name);
    out->tensor_count = n * (1 + states);
    if (out->tensor_count > 0 &&
        !(out->tensors = calloc((size_t)out->tensor_count, sizeof *out->tensors)))
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int s = -1; s < states; s++) {
        if (floats == 0)
            break;
        rc = s < 0 ? pt_net_get_layer(net, layer, NULL, host, floats)
                   : pt_optim_get_state(optim, s, offset, floats, host);
        if (rc < 0)
            return pt_error_set(err, rc, "layer %d: cannot read its %s", layer,
                                s < 0 ? "parameters" : pt_optim_state_name(optim, s));
        int64_t pos = 0;
        for (int i = 0; i < n; i++) {
            pt_ckpt_tensor *t = &out->tensors[(s + 1) * n + i];
            *t = ts[i];
            if (s >= 0 && snprintf(t->name, sizeof t->name, "%s.%s", ts[i].name,
                                   pt_optim_state_name(optim, s)) >= (int)sizeof t->name)
                return pt_error_set(err, PT_EINVAL, "layer %d: tensor name %s is too long", layer,
                                    ts[i].name);
            if ((rc = pick_file_name(cur, layer, t->name, t->file, sizeof t->file, err)) < 0 ||
                (rc = write_tensor_file(dir, t->file, host + pos, t->count, &t->crc32, err)) < 0)
                return rc;
            pos += t->count;
        }
    }
    return 0;
}

int pt_ckpt_write_layers(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                         int64_t step, pt_ckpt_layer **layers_out, int *count_out, pt_error *err)
{
    *layers_out = NULL;
    *count_out = 0;
    int rc = pt_mkdir_p(dir, err);
    if (rc < 0)
        return rc;
    pt_ckpt_index *cur = NULL;
    rc = pt_ckpt_index_load(dir, &cur, err);
    if (rc < 0 && rc != PT_ENOTFOUND)
        return rc;
    pt_error_clear(err);
    int first = pt_net_first(net), last = pt_net_last(net), count = last - first;
    int64_t max_floats = 0;
    for (int l = first; l < last; l++) {
        int64_t off, n;
        if (pt_net_layer_range(net, l, &off, &n) == 0 && n > max_floats)
            max_floats = n;
    }
    pt_ckpt_layer *layers = calloc((size_t)(count > 0 ? count : 1), sizeof *layers);
    pt_ckpt_tensor *ts = malloc(MAX_LAYER_TENSORS * sizeof *ts);
    float *host = malloc((size_t)(max_floats > 0 ? max_floats : 1) * sizeof(float));
    if (!layers || !ts || !host) {
        rc = pt_error_set(err, PT_ENOMEM, "%s: out of memory for the checkpoint", dir);
        goto done;
    }
    for (int l = first; l < last; l++) {
        rc =
            write_one_layer(dir, spec, net, optim, cur, l, step, ts, host, &layers[l - first], err);
        if (rc < 0) {
            pt_error_prefix(err, dir);
            goto done;
        }
    }
    *layers_out = layers;
    *count_out = count;
    layers = NULL;
done:
    pt_ckpt_layers_free(&layers, count);
    free(ts);
    free(host);
    pt_ckpt_index_free(&cur);
    return rc;
}

static int copy_layer(pt_ckpt_layer *dst, const pt_ckpt_layer *src)
{
    *dst = *src;
    dst->tensors = NULL;
    if (src->tensor_count == 0)
        return 0;
    dst->tensors = malloc((size_t)src->tensor_count * sizeof *dst->tensors);
    if (!dst->tensors)
        return PT_ENOMEM;
    memcpy(dst->tensors, src->tensors, (size_t)src->tensor_count * sizeof *dst->tensors);
    return 0;
}

/* Removes files the old entry of a replaced layer held that the new index no
 * longer references (best effort: a leftover file is only wasted space). */
static void remove_stale(const char *dir, const pt_ckpt_index *old, const pt_ckpt_index *now,
                         const pt_ckpt_layer *layers, int count)
{
    for (int i = 0; i < count; i++) {
        const pt_ckpt_layer *was = pt_ckpt_index_find(old, layers[i].index);
        for (int t = 0; was && t < was->tensor_count; t++) {
            if (referenced(now, was->tensors[t].file))
                continue;
            char path[PATH_BYTES];
            snprintf(path, sizeof path, "%s/%s", dir, was->tensors[t].file);
            unlink(path);
        }
    }
}

int pt_ckpt_commit(const char *dir, const pt_ckpt_index *header, const pt_ckpt_layer *layers,
                   int count, pt_error *err)
{
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_LOCK_FILE);
    int lock = open(path, O_RDWR | O_CREAT, 0644);
    if (lock < 0)
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    while (flock(lock, LOCK_EX) != 0 && errno == EINTR)
        ;
    pt_ckpt_index *old = NULL, *now = NULL;
    int rc = pt_ckpt_index_load(dir, &old, err);
    if (rc < 0 && rc != PT_ENOTFOUND)
        goto done;
    pt_error_clear(err);
    rc = PT_ENOMEM;
    int cap = (old ? old->layer_count : 0) + count;
    if (!(now = calloc(1, sizeof *now)) ||
        !(now->layers = calloc((size_t)(cap > 0 ? cap : 1), sizeof *now->layers)))
        goto nomem;
    snprintf(now->model, sizeof now->model, "%s", header->model);
    now->step = header->step;
    now->epoch = header->epoch;
    now->simulated = header->simulated;
    now->has_optimizer = header->has_optimizer;
    now->optimizer = header->optimizer;
    now->optim_steps = header->optim_steps;
    for (int i = 0; old && i < old->layer_count; i++) {
        int replaced = 0;
        for (int j = 0; j < count; j++)
            replaced |= layers[j].index == old->layers[i].index;
        if (!replaced && copy_layer(&now->layers[now->layer_count++], &old->layers[i]) < 0)
            goto nomem;
    }
    for (int j = 0; j < count; j++)
        if (copy_layer(&now->layers[now->layer_count++], &layers[j]) < 0)
            goto nomem;
    pt_ckpt_index_sort(now);
    snprintf(path, sizeof path, "%s/%s", dir, PT_CKPT_INDEX_FILE);
    if ((rc = pt_ckpt_index_save(now, path, err)) < 0)
        goto done;
    remove_stale(dir, old, now, layers, count);
    rc = 0;
    goto done;
nomem:
    rc = pt_error_set(err, PT_ENOMEM, "%s: out of memory", dir);
done:
    pt_ckpt_index_free(&old);
    pt_ckpt_index_free(&now);
    flock(lock, LOCK_UN);
    close(lock);
    return rc;
}

int pt_ckpt_save(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                 int64_t step, double epoch, pt_error *err)
{
    pt_ckpt_layer *layers = NULL;
    int count = 0;
    int rc = pt_ckpt_write_layers(dir, spec, net, optim, step, &layers, &count, err);
    if (rc < 0)
        return rc;
    pt_ckpt_index header = {.step = step, .epoch = epoch};
    snprintf(header.model, sizeof header.model, "%s", spec->name);
    if (optim) {
        header.has_optimizer = 1;
        header.optimizer = *pt_optim_get_spec(optim);
        header.optim_steps = pt_optim_steps(optim);
    }
    rc = pt_ckpt_commit(dir, &header, layers, count, err);
    pt_ckpt_layers_free(&layers, count);
    return rc;
}

/* ---- loading ---- */

static int same_shape(const pt_ckpt_tensor *a, const pt_ckpt_tensor *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static void shape_str(const pt_ckpt_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < t->rank && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* Finds tensor `want` (its name with an optional ".<state>" suffix) in the
 * entry and checks its shape; NULL when absent. */
static int find_checked(const char *ipath, const pt_ckpt_layer *entry, const pt_ckpt_tensor *want,
                        const char *state, const pt_ckpt_tensor **found, pt_error *err)
{
    char name[PT_CKPT_NAME_MAX];
    *found = NULL;
    if (snprintf(name, sizeof name, "%s%s%s", want->name, state ? "." : "", state ? state : "") >=
        (int)sizeof name)
        return 0; /* too long to be in any index */
    *found = pt_ckpt_layer_tensor(entry, name);
    if (*found && !same_shape(*found, want)) {
        char have[96], need[96];
        shape_str(*found, have, sizeof have);
        shape_str(want, need, sizeof need);
        return pt_error_set(err, PT_EINVAL,
                            "%s: layer %d (%s): tensor %s has shape %s, the model needs %s", ipath,
                            entry->index, entry->name, name, have, need);
    }
    return 0;
}

/* Checks the entry of one layer against the model and counts state tensors. */
static int check_entry(const char *ipath, const pt_model_spec *spec, const pt_ckpt_layer *entry,
                       const pt_ckpt_tensor *ts, int n, pt_optim *optim, int *state_found,
                       int *state_missing, pt_error *err)
{
    const char *want_name = spec->layers[entry->index].name;
    if (strcmp(entry->name, want_name))
        return pt_error_set(err, PT_EINVAL,
                            "%s: layer %d is \"%s\" in the checkpoint, \"%s\" in model %s", ipath,
                            entry->index, entry->name, want_name, spec->name);
    const pt_ckpt_tensor *t;
    int rc;
    for (int i = 0; i < n; i++) {
        if ((rc = find_checked(ipath, entry, &ts[i], NULL, &t, err)) < 0)
            return rc;
        if (!t)
            return pt_error_set(err, PT_EINVAL, "%s: layer %d (%s): tensor %s is missing", ipath,
                                entry->index, entry->name, ts[i].name);
        int states = optim ? pt_optim_state_count(optim) : 0;
        for (int s = 0; s < states; s++) {
            if ((rc = find_checked(ipath, entry, &ts[i], pt_optim_state_name(optim, s), &t, err)) <
                0)
                return rc;
            if (t)
                (*state_found)++;
            else
                (*state_missing)++;
        }
    }
    return 0;
}

int pt_ckpt_load(const char *dir, const pt_model_spec *spec, pt_net *net, pt_optim *optim,
                 pt_ckpt_info *info, pt_error *err)
{
    pt_ckpt_index *ix = NULL;
    int rc = pt_ckpt_index_load(dir, &ix, err);
    if (rc < 0)
        return rc;
    char ipath[PATH_BYTES];
    snprintf(ipath, sizeof ipath, "%s/%s", dir, PT_CKPT_INDEX_FILE);
    int first = pt_net_first(net), last = pt_net_last(net);
    pt_ckpt_tensor *ts = malloc(MAX_LAYER_TENSORS * sizeof *ts);
    float *host = NULL;
    int64_t max_floats = 1, step = -1;
    int step_layer = -1, found = 0, missing = 0;
    if (!ts) {
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
        goto done;
    }
    if (optim && !(ix->has_optimizer && ix->optimizer.kind == pt_optim_get_spec(optim)->kind))
        optim = NULL; /* other optimizer: its state means nothing to ours */
    /* Check everything before touching the net. */
    for (int l = first; l < last; l++) {
        int n;
        int64_t off, floats;
        if ((rc = layer_layout(spec, net, l, ts, &n, &off, &floats, err)) < 0)
            goto done;
        max_floats = floats > max_floats ? floats : max_floats;
        const pt_ckpt_layer *entry = pt_ckpt_index_find(ix, l);
        if (n == 0)
            continue;
        if (!entry) {
            rc = pt_error_set(err, PT_ENOTFOUND, "%s: layer %d (%s) of model %s is not in it",
                              ipath, l, spec->layers[l].name, spec->name);
            goto done;
        }
        if ((rc = check_entry(ipath, spec, entry, ts, n, optim, &found, &missing, err)) < 0)
            goto done;
        if (step >= 0 && entry->step != step) {
            rc = pt_error_set(err, PT_EINVAL,
                              "%s: layer %d is at step %lld, layer %d at step %lld: an "
                              "incomplete save mixed two checkpoints",
                              ipath, step_layer, (long long)step, l, (long long)entry->step);
            goto done;
        }
        step = entry->step;
        step_layer = l;
    }
    if (found && missing) {
        rc = pt_error_set(err, PT_EINVAL,
                          "%s: optimizer state is present for %d tensors and missing for %d", ipath,
                          found, missing);
        goto done;
    }
    if (!found)
        optim = NULL;
    if (!(host = malloc((size_t)max_floats * sizeof(float)))) {
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
        goto done;
    }
    for (int l = first; l < last; l++) {
        int n;
        int64_t off, floats;
        if ((rc = layer_layout(spec, net, l, ts, &n, &off, &floats, err)) < 0)
            goto done;
        if (n == 0)
            continue;
        const pt_ckpt_layer *entry = pt_ckpt_index_find(ix, l);
        int states = optim ? pt_optim_state_count(optim) : 0;
        for (int s = -1; s < states; s++) {
            int64_t pos = 0;
            for (int i = 0; i < n; i++) {
                const pt_ckpt_tensor *t;
                find_checked(ipath, entry, &ts[i], s < 0 ? NULL : pt_optim_state_name(optim, s), &t,
                             err);
                if ((rc = pt_ckpt_read_tensor(dir, t, host + pos, err)) < 0)
                    goto done;
                pos += t->count;
            }
            rc = s < 0 ? pt_net_set_layer(net, l, NULL, host, floats)
                       : pt_optim_set_state(optim, s, off, floats, host);
            if (rc < 0) {
                pt_error_set(err, rc, "layer %d: cannot set its %s", l,
                             s < 0 ? "parameters" : "optimizer state");
                goto done;
            }
        }
    }
    if (optim)
        pt_optim_set_steps(optim, ix->optim_steps);
    if (info) {
        *info = (pt_ckpt_info){.step = step >= 0 ? step : ix->step,
                               .epoch = ix->epoch,
                               .optim_loaded = optim != NULL,
                               .has_optimizer = ix->has_optimizer,
                               .optimizer = ix->optimizer};
    }
    rc = 0;
done:
    free(host);
    free(ts);
    pt_ckpt_index_free(&ix);
    return rc;
}
