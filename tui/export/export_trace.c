/* The Chrome trace-event writer of an export set (see export.h). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tui/export/export.h"

#define LANES 3 /* compute, comm, wait: tid = (replica * LANES + lane) * TRACKS + track */

static const char *lane_name(int lane)
{
    return lane == PT_LANE_COMPUTE ? "compute" : lane == PT_LANE_COMM ? "comm" : "wait";
}

static int tid_of(int replica, int lane, int track)
{
    return (replica * LANES + lane) * PT_EXPORT_TRACKS_MAX + track;
}

static int tracks_of(const pt_export_set *set, int row, int lane)
{
    if (row < 64 && set->tracks[row][lane] > 0)
        return set->tracks[row][lane];
    return 1;
}

/* Agent ids are [A-Za-z0-9._-] (protocol/message.c); anything else is
 * written as '?' so the JSON stays valid whatever the source. */
static void put_id(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(isalnum((unsigned char)*s) || strchr("._-:", *s) ? *s : '?', f);
}

/* The run's headline figures (export.h) as the trace's "otherData", which
 * Perfetto and chrome://tracing show as the trace's metadata. */
static void put_figures(FILE *f, const pt_export_set *set)
{
    if (!set->has_meas && !set->has_pred && !set->title[0] && !set->simulated)
        return;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    if (set->title[0])
        cJSON_AddStringToObject(o, "title", set->title);
    if (set->simulated)
        cJSON_AddBoolToObject(o, "simulated", 1);
    pt_fig_json(o, set->has_meas ? &set->meas : NULL, set->has_pred ? &set->pred : NULL);
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        fprintf(f, "\"otherData\":%s,", t);
    free(t);
    cJSON_Delete(o);
}

/* The separator before an event: none before the first. */
static void lead(FILE *f, int first)
{
    fputs(first ? "\n" : ",\n", f);
}

static void put_slice(FILE *f, const pt_export_set *set, const pt_export_span *s, int first)
{
    int bubble = s->op >= PT_OP_KIND_COUNT;
    const char *name = bubble ? "bubble" : pt_op_name(s->op);
    char cat[PT_OP_NAME_MAX];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof cat; i++)
        cat[i] = (char)tolower((unsigned char)name[i]);
    cat[i] = 0;
    lead(f, first);
    fprintf(f, "{\"name\":\"%s", name);
    if (!bubble && s->mb >= 0)
        fprintf(f, " mb%d", s->mb);
    fprintf(f,
            "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"step\":%lld,\"gen\":%lld",
            cat, s->start * PT_EXPORT_US_PER_S, (s->end - s->start) * PT_EXPORT_US_PER_S,
            s->stage + 1, tid_of(s->replica, s->lane, s->track), (long long)s->step,
            (long long)s->gen);
    if (!bubble)
        fprintf(f, ",\"mb\":%d,\"version\":%lld,\"bytes\":%lld", s->mb, (long long)s->version,
                (long long)s->bytes);
    if (s->agent >= 0 && s->agent < set->agent_count) {
        fputs(",\"agent\":\"", f);
        put_id(f, set->agents[s->agent]);
        fputc('"', f);
    }
    fputs("}}", f);
}

static int cmp_flow(const void *a, const void *b)
{
    const pt_export_span *x = *(const pt_export_span *const *)a,
                         *y = *(const pt_export_span *const *)b;
    if (x->flow != y->flow)
        return x->flow < y->flow ? -1 : 1;
    /* the SEND (flow start) before its RECV */
    return ((pt_op_facts(y->op) & PT_OPK_SEND) != 0) - ((pt_op_facts(x->op) & PT_OPK_SEND) != 0);
}

/* A point this far inside a slice's end binds to it in every viewer (a
 * point on a boundary may bind to the neighbour): half a microsecond, or
 * half the slice when it is shorter. */
#define FLOW_INSET_S 0.5e-6

static double inset(const pt_export_span *s)
{
    double half = (s->end - s->start) / 2;
    return half < FLOW_INSET_S ? half : FLOW_INSET_S;
}

/* Where a transfer's arrow starts and ends: at the SEND's end, or where the
 * data was received when that came first (the sender's thread may lose its
 * core between handing the data over and noting its end), and at the
 * RECV's end: never ending before it starts, "s" inside the SEND slice, "f"
 * (bound to the enclosing slice) inside the RECV slice. */
static void flow_times(const pt_export_span *snd, const pt_export_span *rcv, double *from,
                       double *to)
{
    double leave = snd->end < rcv->end ? snd->end : rcv->end;
    *from = leave - inset(snd);
    if (*from < snd->start)
        *from = snd->start;
    *to = rcv->end - inset(rcv);
    if (*to < *from)
        *to = *from;
}

static void put_flow(FILE *f, const pt_export_span *s, int start, double t)
{
    lead(f, 0);
    fprintf(f,
            "{\"name\":\"%s\",\"cat\":\"transfer\",\"ph\":\"%s\",\"id\":%lld,"
            "\"ts\":%.3f,\"pid\":%d,\"tid\":%d%s}",
            pt_op_info_of(s->op)->glyph == '>' ? "activation" : "gradient", start ? "s" : "f",
            (long long)s->flow, t * PT_EXPORT_US_PER_S, s->stage + 1,
            tid_of(s->replica, s->lane, s->track), start ? "" : ",\"bp\":\"e\"");
}

/* Flow events of every paired SEND and RECV (flow_times). */
static int put_flows(FILE *f, const pt_export_set *set)
{
    if (set->flows == 0)
        return 0;
    const pt_export_span **p = malloc(sizeof *p * (size_t)(2 * set->flows));
    if (!p)
        return PT_ENOMEM;
    int64_t n = 0;
    for (int64_t i = 0; i < set->ops; i++)
        if (set->spans[i].flow > 0 && n < 2 * set->flows)
            p[n++] = &set->spans[i];
    qsort(p, (size_t)n, sizeof *p, cmp_flow);
    for (int64_t i = 0; i + 1 < n; i++) {
        if (p[i]->flow != p[i + 1]->flow)
            continue;
        double from, to;
        flow_times(p[i], p[i + 1], &from, &to);
        put_flow(f, p[i], 1, from);
        put_flow(f, p[i + 1], 0, to);
        i++;
    }
    free(p);
    return 0;
}

int pt_export_trace_write(const pt_export_set *set, FILE *f, pt_export_counts *counts,
                          pt_error *err)
{
    pt_export_counts c = {0};
    fputs("{\"displayTimeUnit\":\"ms\",", f);
    put_figures(f, set);
    fputs("\"traceEvents\":[", f);
    int first = 1;
    int last_stage = -1;
    for (int r = 0; r < set->row_count; r++) {
        const pt_tl_row *row = &set->rows[r];
        if (row->stage != last_stage) {
            lead(f, first);
            first = 0;
            fprintf(f,
                    "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                    "\"args\":{\"name\":\"stage %d\"}}"
                    ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                    "\"args\":{\"sort_index\":%d}}",
                    row->stage + 1, row->stage, row->stage + 1, row->stage);
            last_stage = row->stage;
        }
        for (int lane = 0; lane < LANES; lane++)
            for (int t = 0; t < tracks_of(set, r, lane); t++) {
                int tid = tid_of(row->replica, lane, t);
                char extra[16] = "";
                if (t > 0)
                    snprintf(extra, sizeof extra, " %d", t + 1);
                lead(f, 0);
                fprintf(f,
                        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                        "\"args\":{\"name\":\"r%d %s%s\"}}"
                        ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                        "\"args\":{\"sort_index\":%d}}",
                        row->stage + 1, tid, row->replica, lane_name(lane), extra, row->stage + 1,
                        tid, tid);
                c.tracks++;
            }
    }
    for (int64_t i = 0; i < set->count; i++) {
        put_slice(f, set, &set->spans[i], first);
        first = 0;
        if (set->spans[i].op < PT_OP_KIND_COUNT)
            c.ops++;
        else
            c.bubbles++;
    }
    int rc = put_flows(f, set);
    c.flows = set->flows;
    for (int64_t i = 0; i < set->mem_count; i++) {
        const pt_export_mem *m = &set->mem[i];
        lead(f, first);
        first = 0;
        fprintf(f, "{\"name\":\"memory r%d\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{",
                m->replica, m->t * PT_EXPORT_US_PER_S, m->stage + 1);
        for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
            fprintf(f, "%s\"%s\":%lld", k ? "," : "", pt_msg_mem_name(k), (long long)m->bytes[k]);
        fputs("}}", f);
        c.counters++;
    }
    fputs("\n]}\n", f);
    if (counts)
        *counts = c;
    if (rc < 0)
        return pt_error_set(err, rc, "export: out of memory");
    if (ferror(f))
        return pt_error_set(err, PT_EIO, "export: cannot write the trace: %s", strerror(errno));
    return 0;
}

static int trace_writer(const pt_export_set *set, FILE *f, void *counts, pt_error *err)
{
    return pt_export_trace_write(set, f, counts, err);
}

int pt_export_trace(const pt_tline *tl, const pt_export_mem *mem, int64_t mem_count, char **out,
                    size_t *len, pt_export_counts *counts, pt_error *err)
{
    pt_export_set set;
    if (pt_export_from_tline(tl, mem, mem_count, &set) < 0)
        return pt_error_set(err, PT_ENOMEM, "export: out of memory");
    return pt_export_set_to_text(&set, trace_writer, counts, out, len, err);
}
