/* Checks of an exported Chrome trace that hold for any run: no two slices
 * of a track overlap, and every SEND slice starts a flow ("s" inside it)
 * that ends ("f", bound to the enclosing slice) inside a RECV slice of the
 * neighbouring stage for the same generation, step and micro-batch, never
 * before it starts. */
#ifndef PT_TESTS_TUI_TRACE_CHECK_H
#define PT_TESTS_TUI_TRACE_CHECK_H

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define TC_US_TOL 0.0015 /* ts and dur are printed to 0.001 us, rounded apart */

typedef struct tc_slice {
    double ts, end;
    int pid, tid;
    const cJSON *ev;
} tc_slice;

typedef struct tc_result {
    long slices, ops, bubbles, overlaps, sends, recvs, sends_with_flow, bad_flows, no_args;
    long backward_flows; /* flows whose "f" is earlier than their "s" (counted in bad_flows too) */
    long tracks;
} tc_result;

static int tc_cmp(const void *a, const void *b)
{
    const tc_slice *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid - y->pid;
    if (x->tid != y->tid)
        return x->tid - y->tid;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

static double tc_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e300;
}

static const char *tc_str(const cJSON *o, const char *k)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return s ? s : "";
}

/* The slice of track (pid, tid) that holds ts, or NULL (slices sorted). */
static const tc_slice *tc_at(const tc_slice *s, long n, int pid, int tid, double ts)
{
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (s[mid].pid < pid || (s[mid].pid == pid && s[mid].tid < tid) ||
            (s[mid].pid == pid && s[mid].tid == tid && s[mid].ts <= ts))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const tc_slice *c = &s[lo - 1];
    return c->pid == pid && c->tid == tid && c->ts <= ts && ts <= c->end ? c : NULL;
}

static int tc_is(const cJSON *ev, const char *prefix)
{
    return !strncmp(tc_str(ev, "name"), prefix, strlen(prefix));
}

/* Parses text and fills *r; 0, or -1 when it is not a trace. */
static int tc_check(const char *text, tc_result *r)
{
    memset(r, 0, sizeof *r);
    cJSON *j = cJSON_Parse(text);
    const cJSON *evs = j ? cJSON_GetObjectItemCaseSensitive(j, "traceEvents") : NULL;
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(j);
        return -1;
    }
    long n = cJSON_GetArraySize(evs), k = 0;
    tc_slice *s = malloc(sizeof *s * (size_t)(n + 1));
    const cJSON *e;
    cJSON_ArrayForEach(e, evs)
    {
        if (strcmp(tc_str(e, "ph"), "X") != 0)
            continue;
        double ts = tc_num(e, "ts"), dur = tc_num(e, "dur");
        s[k++] = (tc_slice){ts, ts + dur, (int)tc_num(e, "pid"), (int)tc_num(e, "tid"), e};
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        int bubble = !strcmp(tc_str(e, "cat"), "bubble");
        r->bubbles += bubble;
        r->ops += !bubble;
        if (tc_num(args, "step") < 0 || tc_num(args, "gen") < 0 ||
            (!bubble && tc_num(args, "mb") < -1))
            r->no_args++;
    }
    r->slices = k;
    qsort(s, (size_t)k, sizeof *s, tc_cmp);
    for (long i = 0; i < k; i++) {
        if (i == 0 || s[i].pid != s[i - 1].pid || s[i].tid != s[i - 1].tid)
            r->tracks++;
        else if (s[i].ts < s[i - 1].end - TC_US_TOL)
            r->overlaps++;
        r->sends += tc_is(s[i].ev, "SEND_");
        r->recvs += tc_is(s[i].ev, "RECV_");
    }
    /* flows: the "s" of each id, then its "f" */
    cJSON_ArrayForEach(e, evs)
    {
        if (strcmp(tc_str(e, "ph"), "s") != 0)
            continue;
        double id = tc_num(e, "id");
        const tc_slice *from =
            tc_at(s, k, (int)tc_num(e, "pid"), (int)tc_num(e, "tid"), tc_num(e, "ts"));
        const cJSON *f = NULL, *x;
        cJSON_ArrayForEach(x, evs) if (!strcmp(tc_str(x, "ph"), "f") && tc_num(x, "id") == id)
        {
            f = x;
            break;
        }
        const tc_slice *to =
            f ? tc_at(s, k, (int)tc_num(f, "pid"), (int)tc_num(f, "tid"), tc_num(f, "ts")) : NULL;
        int ok = from && to && tc_is(from->ev, "SEND_") && tc_is(to->ev, "RECV_") && f &&
                 !strcmp(tc_str(f, "bp"), "e") && abs(from->pid - to->pid) == 1;
        if (ok) {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(from->ev, "args"),
                        *b = cJSON_GetObjectItemCaseSensitive(to->ev, "args");
            ok =
                tc_num(a, "step") == tc_num(b, "step") && tc_num(a, "mb") == tc_num(b, "mb") &&
                tc_num(a, "gen") == tc_num(b, "gen") &&
                /* activations flow down the pipeline, gradients up */
                (tc_is(from->ev, "SEND_ACT") ? to->pid == from->pid + 1 : to->pid == from->pid - 1);
        }
        if (f && tc_num(f, "ts") < tc_num(e, "ts") - TC_US_TOL) {
            r->backward_flows++;
            ok = 0;
        }
        if (ok)
            r->sends_with_flow++;
        else
            r->bad_flows++;
    }
    free(s);
    cJSON_Delete(j);
    return 0;
}

#endif
