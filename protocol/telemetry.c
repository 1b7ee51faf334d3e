/* Per-agent sequence tracking and clock-offset estimation; see telemetry.h. */
#include "protocol/telemetry.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/hash.h"
#include "protocol/telemetry_scan.h"

#define WORDS (PT_RX_WINDOW / 64)

typedef struct rx_agent {
    char id[PT_MSG_ID_MAX];
    int started;
    int64_t base;         /* first sequence number counted (0, or the first seen) */
    int64_t next;         /* one past the newest sequence number seen */
    uint64_t seen[WORDS]; /* bit (q % WINDOW): q in [next - WINDOW, next) arrived */
    pt_rx_counts c;
} rx_agent;

struct pt_telemetry_rx {
    unsigned flags;
    int64_t gen;
    int n, cap;
    rx_agent **agents;
    /* agent index by id: open addressing, slots hold index + 1 (0 empty), at
     * most half full, so a frame finds its agent in constant time and a
     * record of many agents reads in linear time */
    int *slots;
    int slot_n;                   /* a power of two, or 0 */
    uint64_t malformed_anonymous; /* no readable, known agent id */
};

int pt_telemetry_rx_create(unsigned flags, pt_telemetry_rx **out)
{
    if (!out)
        return PT_EINVAL;
    *out = calloc(1, sizeof **out);
    if (!*out)
        return PT_ENOMEM;
    (*out)->flags = flags;
    return 0;
}

void pt_telemetry_rx_destroy(pt_telemetry_rx **self_p)
{
    if (!self_p || !*self_p)
        return;
    pt_telemetry_rx *rx = *self_p;
    for (int i = 0; i < rx->n; i++)
        free(rx->agents[i]);
    free(rx->agents);
    free(rx->slots);
    free(rx);
    *self_p = NULL;
}

void pt_telemetry_rx_set_generation(pt_telemetry_rx *self, int64_t gen)
{
    if (self)
        self->gen = gen;
}

/* The slot of id: the one holding it, or the empty one it would go to. */
static int id_slot(const pt_telemetry_rx *rx, const char *id)
{
    unsigned mask = (unsigned)rx->slot_n - 1;
    unsigned k = (unsigned)pt_hash_str(id) & mask;
    while (rx->slots[k] && strcmp(rx->agents[rx->slots[k] - 1]->id, id) != 0)
        k = (k + 1) & mask;
    return (int)k;
}

static rx_agent *find(const pt_telemetry_rx *rx, const char *id)
{
    if (!rx->slot_n)
        return NULL;
    int v = rx->slots[id_slot(rx, id)];
    return v ? rx->agents[v - 1] : NULL;
}

/* Makes room for one more agent in the index. 0 or PT_ENOMEM. */
static int index_reserve(pt_telemetry_rx *rx)
{
    if (2 * (rx->n + 1) <= rx->slot_n)
        return 0;
    int n = rx->slot_n ? 2 * rx->slot_n : 16;
    int *slots = calloc((size_t)n, sizeof *slots);
    if (!slots)
        return PT_ENOMEM;
    free(rx->slots);
    rx->slots = slots;
    rx->slot_n = n;
    for (int i = 0; i < rx->n; i++)
        rx->slots[id_slot(rx, rx->agents[i]->id)] = i + 1;
    return 0;
}

static rx_agent *find_or_add(pt_telemetry_rx *rx, const char *id)
{
    rx_agent *a = find(rx, id);
    if (a || rx->n >= PT_RX_MAX_AGENTS)
        return a;
    if (rx->n == rx->cap) {
        int cap = rx->cap ? rx->cap * 2 : 8;
        rx_agent **grown = realloc(rx->agents, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        rx->agents = grown;
        rx->cap = cap;
    }
    if (index_reserve(rx) < 0 || !(a = calloc(1, sizeof *a)))
        return NULL;
    memcpy(a->id, id, strnlen(id, PT_MSG_ID_MAX - 1));
    rx->agents[rx->n++] = a;
    rx->slots[id_slot(rx, a->id)] = rx->n;
    return a;
}

static int bit_get(const rx_agent *a, int64_t q)
{
    uint64_t i = (uint64_t)q % PT_RX_WINDOW;
    return (int)((a->seen[i / 64] >> (i % 64)) & 1u);
}
static void bit_set(rx_agent *a, int64_t q, int on)
{
    uint64_t i = (uint64_t)q % PT_RX_WINDOW;
    if (on)
        a->seen[i / 64] |= (uint64_t)1 << (i % 64);
    else
        a->seen[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* The plan-generation rule (docs/protocol.md, "Envelope"), after the
 * sequence number was tracked: 0 to take m (counting a late one), or
 * PT_ESTATE, the caller counting it stale. Telemetry is measurement that
 * nothing acts on: events and metrics of an older generation, still queued
 * when the next plan was applied, are what happened and are taken (late);
 * one of a newer generation than any plan sent is refused, except while no
 * plan is current (gen 0: a console picking a run up hears its agents
 * before it adopts their generation). Any other type bound to a generation
 * is refused when older, as pt_msg_accept refuses it on control. */
static int generation_check(const pt_telemetry_rx *rx, rx_agent *a, const pt_msg *m, pt_error *err)
{
    if (m->type == PT_MSG_REGISTER || m->type == PT_MSG_HEARTBEAT || m->type == PT_MSG_BYE ||
        m->gen == rx->gen)
        return 0;
    int telemetry = m->type == PT_MSG_EVENTS || m->type == PT_MSG_METRICS;
    if (telemetry && m->gen < rx->gen) {
        a->c.late++;
        return 0;
    }
    if (m->gen < rx->gen)
        return pt_error_set(err, PT_ESTATE,
                            "telemetry: agent %s: seq %lld: stale: plan generation %lld is older "
                            "than the current %lld",
                            a->id, (long long)m->seq, (long long)m->gen, (long long)rx->gen);
    if (telemetry && rx->gen > 0)
        return pt_error_set(err, PT_ESTATE,
                            "telemetry: agent %s: seq %lld: stale: plan generation %lld is newer "
                            "than the current %lld (no plan of it was sent)",
                            a->id, (long long)m->seq, (long long)m->gen, (long long)rx->gen);
    return 0;
}

int pt_telemetry_rx_observe(pt_telemetry_rx *self, const pt_msg *m, pt_error *err)
{
    if (!self || !m)
        return pt_error_set(err, PT_EINVAL, "telemetry: NULL argument");
    rx_agent *a = find_or_add(self, m->agent);
    if (!a) {
        self->malformed_anonymous++; /* every frame counts in one bucket */
        return pt_error_set(err, PT_ERANGE, "telemetry: agent %s: more than %d agents", m->agent,
                            PT_RX_MAX_AGENTS);
    }
    int64_t s = m->seq;
    int first = !a->started; /* the first frame of an agent sets where it counts from */
    if (!a->started) {
        a->started = 1;
        a->base = a->next = (self->flags & PT_RX_FROM_FIRST) ? s : 0;
        memset(a->seen, 0, sizeof a->seen);
    }
    if (!first && s >= a->next && s - a->next > PT_RX_JUMP_MAX) {
        /* no agent skips this many of its own messages: a forgery or a
         * corrupt sender; taking it would make every later genuine message
         * look too old */
        a->c.stale++;
        return pt_error_set(err, PT_ESTATE,
                            "telemetry: agent %s: seq %lld jumps %lld past the newest (%lld); "
                            "refused",
                            a->id, (long long)s, (long long)(s - a->next),
                            (long long)(a->next - 1));
    }
    if (s >= a->next) {
        int64_t gap = s - a->next;
        a->c.dropped += (uint64_t)gap;
        if (gap >= PT_RX_WINDOW)
            memset(a->seen, 0, sizeof a->seen);
        else
            for (int64_t q = a->next; q < s; q++)
                bit_set(a, q, 0);
        bit_set(a, s, 1);
        a->next = s + 1;
    } else if (a->next - s > PT_RX_WINDOW) {
        a->c.stale++;
        return pt_error_set(err, PT_ESTATE,
                            "telemetry: agent %s: seq %lld is too old to tell (newest %lld)", a->id,
                            (long long)s, (long long)(a->next - 1));
    } else if (bit_get(a, s)) {
        a->c.duplicates++;
        return pt_error_set(err, PT_ESTATE, "telemetry: agent %s: seq %lld is a duplicate", a->id,
                            (long long)s);
    } else {
        bit_set(a, s, 1);
        if (s >= a->base)
            a->c.dropped--; /* it was counted missing when a later one came */
        a->c.reordered++;
    }
    int rc = generation_check(self, a, m, err);
    if (rc < 0) {
        a->c.stale++;
        return rc;
    }
    a->c.received++;
    return 0;
}

/* The "agent" of text that failed to decode, if it is JSON with a known one. */
static rx_agent *blame(pt_telemetry_rx *rx, const char *data, size_t len)
{
    if (len > PT_MSG_MAX_BYTES || memchr(data, '\0', len))
        return NULL;
    cJSON *root = cJSON_ParseWithLength(data, len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "agent");
    rx_agent *a = cJSON_IsString(id) && id->valuestring ? find(rx, id->valuestring) : NULL;
    cJSON_Delete(root);
    return a;
}

int pt_telemetry_rx_feed(pt_telemetry_rx *self, const char *data, size_t len, const char *source,
                         pt_msg *out, pt_error *err)
{
    if (!self || !out)
        return pt_error_set(err, PT_EINVAL, "telemetry: NULL argument");
    int rc = pt_telemetry_decode(data, len, source ? source : "telemetry", out, err);
    if (rc < 0) {
        rx_agent *a = data ? blame(self, data, len) : NULL;
        if (a)
            a->c.malformed++;
        else
            self->malformed_anonymous++;
        return rc;
    }
    rc = pt_telemetry_rx_observe(self, out, err);
    if (rc < 0)
        pt_msg_clear(out);
    return rc;
}

int pt_telemetry_rx_reset_agent(pt_telemetry_rx *self, const char *agent)
{
    rx_agent *a = self && agent ? find(self, agent) : NULL;
    if (!a)
        return PT_ENOTFOUND;
    a->started = 0;
    a->next = a->base = 0;
    memset(a->seen, 0, sizeof a->seen);
    return 0;
}

int pt_telemetry_rx_agent_counts(const pt_telemetry_rx *self, const char *agent, pt_rx_counts *out)
{
    const rx_agent *a = self && agent ? find(self, agent) : NULL;
    if (!a || !out)
        return PT_ENOTFOUND;
    *out = a->c;
    return 0;
}

void pt_telemetry_rx_totals(const pt_telemetry_rx *self, pt_rx_counts *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!self)
        return;
    for (int i = 0; i < self->n; i++) {
        const pt_rx_counts *c = &self->agents[i]->c;
        out->received += c->received;
        out->dropped += c->dropped;
        out->duplicates += c->duplicates;
        out->reordered += c->reordered;
        out->stale += c->stale;
        out->late += c->late;
        out->malformed += c->malformed;
    }
    out->malformed += self->malformed_anonymous;
}

int pt_telemetry_rx_agent_count(const pt_telemetry_rx *self)
{
    return self ? self->n : 0;
}

const char *pt_telemetry_rx_agent_id(const pt_telemetry_rx *self, int i)
{
    return self && i >= 0 && i < self->n ? self->agents[i]->id : NULL;
}

/* ---- clock offset ------------------------------------------------------------ */

int pt_clock_offset(int64_t t1, int64_t t2, int64_t t3, int64_t t4, int64_t *offset, int64_t *delay)
{
    if (t4 < t1 || t3 < t2)
        return PT_EINVAL;
    int64_t d = (t4 - t1) - (t3 - t2);
    if (d < 0)
        return PT_EINVAL;
    if (offset)
        *offset = ((t2 - t1) + (t3 - t4)) / 2;
    if (delay)
        *delay = d;
    return 0;
}

void pt_clock_filter_init(pt_clock_filter *f)
{
    if (f)
        memset(f, 0, sizeof *f);
}

int pt_clock_filter_add(pt_clock_filter *f, int64_t t1, int64_t t2, int64_t t3, int64_t t4)
{
    int64_t off, d;
    if (!f || pt_clock_offset(t1, t2, t3, t4, &off, &d) < 0)
        return PT_EINVAL;
    f->offset[f->next] = off;
    f->delay[f->next] = d;
    f->next = (f->next + 1) % PT_CLOCK_SAMPLES;
    if (f->n < PT_CLOCK_SAMPLES)
        f->n++;
    return 0;
}

int pt_clock_filter_get(const pt_clock_filter *f, int64_t *offset, int64_t *delay)
{
    if (!f || f->n == 0)
        return PT_ENOTFOUND;
    int best = 0;
    for (int i = 1; i < f->n; i++)
        if (f->delay[i] < f->delay[best])
            best = i;
    if (offset)
        *offset = f->offset[best];
    if (delay)
        *delay = f->delay[best];
    return 0;
}
