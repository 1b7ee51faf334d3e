/* The schedule-kind registry: the built-in table and kinds added at run time. */
#include "protocol/sched_kind.h"

#include <stdio.h>
#include <string.h>

static int imin(int a, int b)
{
    return a < b ? a : b;
}

int pt_sched_kind_inflight_all(const pt_sched_shape *q)
{
    return q->microbatches;
}

int pt_sched_kind_inflight_1f1b(const pt_sched_shape *q)
{
    return imin(q->stages - q->stage, q->microbatches);
}

int pt_sched_kind_inflight_policy(const pt_sched_shape *q)
{
    int ahead = q->stages - q->stage;
    return q->policy == 'B' ? imin(2 * ahead - 1, q->microbatches) : imin(ahead, q->microbatches);
}

int pt_sched_kind_inflight_async(const pt_sched_shape *q)
{
    return q->stages - q->stage;
}

int pt_sched_kind_versions_one(const pt_sched_shape *q)
{
    (void)q;
    return 1;
}

int pt_sched_kind_versions_two(const pt_sched_shape *q)
{
    (void)q;
    return 2;
}

int pt_sched_kind_versions_stash(const pt_sched_shape *q)
{
    /* A stash holds the array its forward read, and an OPT_STEP steps out of
     * place while the live weights are held, so a stage holds one array per
     * version still read. Without vertical sync stage i has S-i micro-batches
     * in flight, each reading another version, the newest of them the live
     * weights: S-i arrays (the last stage 1: nothing stashed). With vertical
     * sync micro-batch k reads version k-S+1 on every stage: stage 0 as
     * without it (S), stage i > 0 its S-i stashes, the live weights and the
     * kept versions between the oldest one still to be read and the newest:
     * S-i+1 + (i-1) = S. */
    int S = q->stages, i = q->stage;
    return q->vertical_sync ? S : S - i;
}

int pt_sched_kind_inflight_zb_h1(const pt_sched_shape *q)
{
    if (q->recompute)
        return pt_sched_kind_inflight_1f1b(q);
    return q->stages < q->microbatches ? q->stages : q->microbatches;
}

int pt_sched_kind_inflight_zb_h2(const pt_sched_shape *q)
{
    if (q->recompute) {
        pt_sched_shape b = *q;
        b.policy = 'B';
        return pt_sched_kind_inflight_policy(&b);
    }
    int n = 2 * q->stages - 1 - q->stage;
    return n < q->microbatches ? n : q->microbatches;
}

int pt_sched_kind_inflight_gw(const pt_sched_shape *q)
{
    if (q->recompute) {
        pt_sched_shape b = *q;
        b.policy = 'B';
        return pt_sched_kind_inflight_policy(&b);
    }
    return q->microbatches;
}

int pt_sched_kind_hold_gw(const pt_sched_shape *q)
{
    return q->recompute ? 1 : q->microbatches;
}

int pt_sched_kind_hold_zb(const pt_sched_shape *q)
{
    int lag = q->recompute ? 0 : q->stage;
    return imin(lag + 1, q->microbatches);
}

int pt_sched_interleaved_warmup(int P, int v, int M, int r)
{
    int total = v * M;
    /* Megatron runs every unit forward first when M == P (its 1F1B phase would be empty) */
    if (M == P)
        return total;
    return imin(2 * (P - r - 1) + (v - 1) * P, total);
}

void pt_sched_interleaved_unit(int P, int v, int k, int backward, int *chunk, int *mb)
{
    int group = k % (P * v) / P;
    *chunk = backward ? v - 1 - group : group;
    *mb = k / (P * v) * P + k % P;
}

int pt_sched_kind_inflight_interleaved(const pt_sched_shape *q)
{
    int v = q->chunks > 1 ? q->chunks : 1, P = q->stages / v, M = q->microbatches;
    if (P < 1 || M < 1)
        return imin(1, M);
    int r = q->stage % P, c = q->stage / P, total = v * M;
    int W = pt_sched_interleaved_warmup(P, v, M, r), n = 0, peak = 0, ch, mb;
    for (int k = 0; k < total; k++) {
        pt_sched_interleaved_unit(P, v, k, 0, &ch, &mb);
        n += ch == c;
        peak = n > peak ? n : peak;
        if (k >= W) { /* steady state: forward unit k, then backward unit k - W */
            pt_sched_interleaved_unit(P, v, k - W, 1, &ch, &mb);
            n -= ch == c;
        }
    }
    return peak;
}

static const pt_sched_kind_info builtin[PT_SCHED_BUILTIN_COUNT] = {
#define PT_SCHED_INFO_(ID, name, flags, inflight, versions, hold, cmin, cmax, generator, summary)  \
    [PT_SCHED_##ID] = {name, flags, inflight, versions, summary, hold, cmin, cmax},
    PT_SCHED_KIND_LIST(PT_SCHED_INFO_)
#undef PT_SCHED_INFO_
};

static const pt_sched_kind_info *added[PT_SCHED_KIND_MAX - PT_SCHED_BUILTIN_COUNT];
static int added_count;

const pt_sched_kind_info *pt_sched_kind_info_of(int kind)
{
    if (kind >= 0 && kind < PT_SCHED_BUILTIN_COUNT)
        return &builtin[kind];
    if (kind >= PT_SCHED_BUILTIN_COUNT && kind < PT_SCHED_BUILTIN_COUNT + added_count)
        return added[kind - PT_SCHED_BUILTIN_COUNT];
    return NULL;
}

const char *pt_sched_kind_name(int kind)
{
    const pt_sched_kind_info *in = pt_sched_kind_info_of(kind);
    return in ? in->name : NULL;
}

int pt_sched_kind_count(void)
{
    return PT_SCHED_BUILTIN_COUNT + added_count;
}

int pt_sched_kind_parse(const char *name, pt_sched_kind *out)
{
    for (int k = 0; name && k < pt_sched_kind_count(); k++)
        if (!strcmp(pt_sched_kind_name(k), name)) {
            *out = (pt_sched_kind)k;
            return 0;
        }
    return PT_ENOTFOUND;
}

void pt_sched_kind_chunks(int kind, int *lo, int *hi)
{
    const pt_sched_kind_info *in = pt_sched_kind_info_of(kind);
    *lo = *hi = 1;
    if (!in || !(in->flags & PT_SCHED_OPT_CHUNKS))
        return;
    *lo = in->chunks_min > 0 ? in->chunks_min : 2;
    *hi = in->chunks_max > 0 ? in->chunks_max : PT_SCHED_CHUNKS_MAX;
}

int pt_sched_kind_split_hold(int kind, const pt_sched_shape *q)
{
    const pt_sched_kind_info *in = pt_sched_kind_info_of(kind);
    return in && in->split_hold ? in->split_hold(q) : 0;
}

bool pt_sched_kind_has(int kind, unsigned flags)
{
    const pt_sched_kind_info *in = pt_sched_kind_info_of(kind);
    return in && (in->flags & flags) == flags;
}

int pt_sched_kind_list(unsigned flags, char *buf, size_t cap)
{
    size_t n = 0;
    int found = 0;
    if (buf && cap)
        buf[0] = '\0';
    for (int k = 0; k < pt_sched_kind_count(); k++) {
        if (!pt_sched_kind_has(k, flags))
            continue;
        if (buf && n < cap) {
            int w = snprintf(buf + n, cap - n, "%s%s", found ? ", " : "", pt_sched_kind_name(k));
            n = w < 0 ? cap : n + (size_t)w;
        }
        found++;
    }
    return found;
}

static int valid_name(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= PT_SCHED_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '-'))
            return 0;
    return 1;
}

int pt_sched_kind_register(const pt_sched_kind_info *info, pt_sched_kind *out, pt_error *err)
{
    if (!info || !out)
        return pt_error_set(err, PT_EINVAL, "schedule kind: an entry and an id are required");
    if (!valid_name(info->name))
        return pt_error_set(err, PT_EINVAL,
                            "schedule kind \"%s\": name must be 1 to %d characters of [a-z0-9-]",
                            info->name ? info->name : "(null)", PT_SCHED_NAME_MAX - 1);
    pt_sched_kind dup;
    if (pt_sched_kind_parse(info->name, &dup) == 0)
        return pt_error_set(err, PT_EINVAL, "schedule kind \"%s\": name already taken", info->name);
    if (!info->inflight || !info->weight_versions || !info->summary)
        return pt_error_set(err, PT_EINVAL,
                            "schedule kind \"%s\": inflight, weight_versions and summary are "
                            "required",
                            info->name);
    int chunked = (info->flags & PT_SCHED_OPT_CHUNKS) != 0;
    int lo = info->chunks_min, hi = info->chunks_max;
    if (lo < 0 || hi < 0 || hi > PT_SCHED_CHUNKS_MAX || (lo && hi && lo > hi) ||
        (!chunked && (lo > 1 || hi > 1)) || (chunked && lo == 1))
        return pt_error_set(err, PT_EINVAL,
                            "schedule kind \"%s\": chunks %d..%d: one chunk per device without "
                            "the chunks option, 2..%d with it",
                            info->name, lo, hi, PT_SCHED_CHUNKS_MAX);
    if (info->flags & ~PT_SCHED_FLAGS_ALL)
        return pt_error_set(err, PT_EINVAL, "schedule kind \"%s\": unknown flags 0x%x", info->name,
                            info->flags & ~PT_SCHED_FLAGS_ALL);
    if (PT_SCHED_BUILTIN_COUNT + added_count >= PT_SCHED_KIND_MAX)
        return pt_error_set(err, PT_ERANGE, "schedule kind \"%s\": registry full (%d kinds)",
                            info->name, PT_SCHED_KIND_MAX);
    added[added_count] = info;
    *out = (pt_sched_kind)(PT_SCHED_BUILTIN_COUNT + added_count);
    added_count++;
    return 0;
}
