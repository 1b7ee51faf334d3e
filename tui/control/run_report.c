/* Measured vs predicted figures of a run; see tui/control/run_report.h. */
#include "tui/control/run_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/schedule.h"
#include "protocol/figures.h"

typedef struct cell {
    int64_t busy_ns;
    double iter_ms;
    double loss; /* NaN: none */
    double rate; /* samples/s */
    int has_metrics;
    int has_events; /* agents send the events of some steps only (thinning) */
} cell;

struct pt_run_report {
    int workers, stages;
    int *stage_of, *replica_of, *rows; /* per worker */
    int last_lo, last_hi;              /* workers of the last stage */
    int64_t first, steps;
    cell *cells;                /* workers x steps */
    int64_t *step_lo, *step_hi; /* per step: earliest start, latest end of any worker's event
                                   (console clock ns); lo > hi: no event yet */
    int64_t peak[PT_MSG_MEM_COUNT + 1];
    int64_t *peaks;  /* workers x (categories + total) */
    int64_t *newest; /* per worker: the newest step of its metrics (first - 1: none) */
    pt_run_figures fig;
    pt_run_worker_figures *wf;
};

pt_run_report *pt_run_report_new(const pt_plan *plan, int64_t first_step, int64_t steps)
{
    pt_run_report *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    int n = pt_plan_device_count(plan);
    r->workers = n;
    r->stages = plan->stage_count;
    r->first = first_step;
    r->steps = steps > 0 ? steps : 1;
    r->stage_of = calloc((size_t)n, sizeof(int));
    r->replica_of = calloc((size_t)n, sizeof(int));
    r->rows = calloc((size_t)n, sizeof(int));
    r->cells = calloc((size_t)n * (size_t)r->steps, sizeof(cell));
    r->peaks = calloc((size_t)n * (PT_MSG_MEM_COUNT + 1), sizeof(int64_t));
    r->wf = calloc((size_t)n, sizeof *r->wf);
    r->newest = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    r->step_lo = malloc((size_t)r->steps * sizeof(int64_t));
    r->step_hi = malloc((size_t)r->steps * sizeof(int64_t));
    if (!r->stage_of || !r->replica_of || !r->rows || !r->cells || !r->peaks || !r->wf ||
        !r->step_lo || !r->step_hi || !r->newest) {
        pt_run_report_free(&r);
        return NULL;
    }
    int w = 0;
    for (int s = 0; s < plan->stage_count; s++) {
        if (s == plan->stage_count - 1)
            r->last_lo = w;
        for (int j = 0; j < plan->stages[s].replica_count; j++, w++) {
            int lo, hi;
            pt_sched_rows(plan->microbatch_size, plan->stages[s].replica_count, j, &lo, &hi);
            r->stage_of[w] = s;
            r->replica_of[w] = j;
            r->rows[w] = hi - lo;
        }
    }
    r->last_hi = w;
    for (int64_t k = 0; k < (int64_t)n * r->steps; k++)
        r->cells[k].loss = NAN;
    for (int i = 0; i < n; i++)
        r->newest[i] = first_step - 1;
    for (int64_t k = 0; k < r->steps; k++) {
        r->step_lo[k] = INT64_MAX;
        r->step_hi[k] = INT64_MIN;
    }
    return r;
}

void pt_run_report_free(pt_run_report **r_p)
{
    if (!r_p || !*r_p)
        return;
    pt_run_report *r = *r_p;
    free(r->stage_of);
    free(r->replica_of);
    free(r->rows);
    free(r->cells);
    free(r->peaks);
    free(r->wf);
    free(r->step_lo);
    free(r->step_hi);
    free(r->newest);
    free(r);
    *r_p = NULL;
}

static cell *at(pt_run_report *r, int w, int64_t step)
{
    if (w < 0 || w >= r->workers || step < r->first || step >= r->first + r->steps)
        return NULL;
    return &r->cells[(int64_t)w * r->steps + (step - r->first)];
}

/* The worker of (stage, replica), or w when the plan has none: an
 * interleaved plan's agent reports for every chunk of its device. */
static int worker_of(const pt_run_report *r, int stage, int replica, int w)
{
    for (int k = 0; k < r->workers; k++)
        if (r->stage_of[k] == stage && r->replica_of[k] == replica)
            return k;
    return w;
}

void pt_run_report_events(pt_run_report *r, int w, const pt_msg_events *ev)
{
    for (int k = 0; r && k < ev->count; k++) {
        const pt_msg_event *e = &ev->events[k];
        cell *c = at(r, worker_of(r, e->stage, e->replica, w), e->step);
        if (!c)
            continue;
        c->has_events = 1;
        if (pt_op_is_compute(e->op))
            c->busy_ns += e->end_ns - e->start_ns;
        int64_t k = e->step - r->first;
        if (e->start_ns < r->step_lo[k])
            r->step_lo[k] = e->start_ns;
        if (e->end_ns > r->step_hi[k])
            r->step_hi[k] = e->end_ns;
    }
}

void pt_run_report_metrics(pt_run_report *r, int w, const pt_msg_metrics *m)
{
    if (!r)
        return;
    w = worker_of(r, m->stage, m->replica, w);
    if (w >= 0 && w < r->workers && m->step > r->newest[w])
        r->newest[w] = m->step;
    /* a fold stands for its steps, each with its own loss */
    int n = m->steps > 1 ? m->steps : 1;
    for (int k = 0; k < n; k++) {
        cell *c = at(r, w, m->step - n + 1 + k);
        if (!c)
            continue;
        c->iter_ms = m->iter_ms;
        c->loss = n > 1 ? m->losses[k] : m->loss;
        c->rate = m->samples_per_s;
        c->has_metrics = 1;
    }
    if (!at(r, w, m->step))
        return;
    int64_t *p = &r->peaks[(int64_t)w * (PT_MSG_MEM_COUNT + 1)];
    for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
        if (m->mem_peak[k] > p[k])
            p[k] = m->mem_peak[k];
    if (m->total_peak > p[PT_MSG_MEM_COUNT])
        p[PT_MSG_MEM_COUNT] = m->total_peak;
}

int pt_run_report_step(const pt_run_report *r, int64_t step, double *loss, double *rate)
{
    double sum = 0, rows = 0, slowest = INFINITY;
    for (int w = 0; w < r->workers; w++) {
        const cell *c = at((pt_run_report *)r, w, step);
        if (!c)
            return 0;
        if (c->has_metrics && c->rate < slowest)
            slowest = c->rate;
        if (w < r->last_lo || w >= r->last_hi)
            continue;
        if (!c->has_metrics || isnan(c->loss))
            return 0;
        sum += c->loss * r->rows[w];
        rows += r->rows[w];
    }
    *loss = rows > 0 ? sum / rows : NAN;
    *rate = isinf(slowest) ? 0 : slowest;
    return rows > 0;
}

int pt_run_report_step_lost(const pt_run_report *r, int64_t step)
{
    for (int w = r->last_lo; w < r->last_hi; w++) {
        const cell *c = at((pt_run_report *)r, w, step);
        if (c && !c->has_metrics && r->newest[w] > step)
            return 1;
    }
    return 0;
}

/* Step index k counts in the figures: every worker reported its metrics,
 * and it is not the left-out first step `skip` (-1: none). */
static int measured_step(const pt_run_report *r, int64_t k, int64_t skip)
{
    if (k == skip)
        return 0;
    /* busy and occupied time from the steps whose events every worker sent */
    for (int w = 0; w < r->workers; w++)
        if (!r->cells[(int64_t)w * r->steps + k].has_metrics ||
            !r->cells[(int64_t)w * r->steps + k].has_events)
            return 0;
    return 1;
}

const pt_run_figures *pt_run_report_figures(pt_run_report *r)
{
    double *slow = calloc((size_t)r->steps, sizeof(double));
    int ns = 0;
    /* the first step with metrics from everyone is left out when more follow */
    int64_t k0 = -1, count = 0;
    for (int64_t k = 0; k < r->steps; k++) {
        int all = 1;
        for (int w = 0; w < r->workers && all; w++)
            all = r->cells[(int64_t)w * r->steps + k].has_metrics;
        if (all) {
            if (k0 < 0)
                k0 = k;
            count++;
        }
    }
    int skip_first = count >= 2;
    /* busy and bubble as protocol/op.h defines them, over the steps measured
     * (metrics from every worker, the first left out): compute time / the
     * time those steps' spans occupy */
    char *meas = calloc((size_t)r->steps, 1);
    for (int64_t k = 0; meas && k < r->steps; k++)
        meas[k] = (char)measured_step(r, k, skip_first ? k0 : -1);
    pt_op_iter *iters = calloc((size_t)r->steps, sizeof *iters);
    int64_t n_iters = 0, origin = INT64_MAX;
    for (int64_t k = 0; k < r->steps; k++)
        if (r->step_lo[k] < origin)
            origin = r->step_lo[k];
    for (int64_t k = 0; iters && meas && k < r->steps; k++) {
        if (!meas[k] || r->step_lo[k] > r->step_hi[k])
            continue;
        iters[n_iters].step = r->first + k;
        iters[n_iters].lo = (double)(r->step_lo[k] - origin) * 1e-9;
        iters[n_iters].hi = (double)(r->step_hi[k] - origin) * 1e-9;
        n_iters++;
    }
    double occupied_s = pt_op_iters_time_s(iters, n_iters);
    free(iters);
    for (int w = 0; w < r->workers; w++) {
        pt_run_worker_figures *f = &r->wf[w];
        memset(f, 0, sizeof *f);
        f->stage = r->stage_of[w];
        f->replica = r->replica_of[w];
        double iter_ms = 0;
        int64_t busy_ns = 0;
        for (int64_t k = 0; k < r->steps; k++) {
            const cell *c = &r->cells[(int64_t)w * r->steps + k];
            if (meas && meas[k])
                busy_ns += c->busy_ns;
            if (!c->has_metrics || (skip_first && k == k0))
                continue;
            iter_ms += c->iter_ms;
            f->steps++;
        }
        f->iter_ms = f->steps ? iter_ms / f->steps : 0;
        f->busy = pt_op_busy_frac((double)busy_ns * 1e-9, occupied_s);
        f->bubble = 1 - f->busy;
        const int64_t *p = &r->peaks[(int64_t)w * (PT_MSG_MEM_COUNT + 1)];
        memcpy(f->peak, p, sizeof f->peak);
        f->peak_total = p[PT_MSG_MEM_COUNT];
    }
    free(meas);
    /* the headline figure as protocol/figures.h defines it: per complete
     * step its slowest worker, the generation's first step left out there */
    for (int64_t k = 0; slow && k < r->steps; k++) {
        double m = -1;
        for (int w = 0; w < r->workers; w++) {
            const cell *c = &r->cells[(int64_t)w * r->steps + k];
            if (!c->has_metrics) {
                m = -1;
                break;
            }
            if (c->iter_ms > m)
                m = c->iter_ms;
        }
        if (m >= 0)
            slow[ns++] = m;
    }
    int used = 0;
    r->fig.iteration_ms = pt_fig_iter_ms(slow, ns, &used);
    r->fig.steps_measured = used;
    r->fig.mean_iteration_ms = 0;
    for (int64_t k = ns - used; k < ns; k++)
        r->fig.mean_iteration_ms += slow[k] / (double)used;
    free(slow);
    r->fig.worker_count = r->workers;
    r->fig.workers = r->wf;
    return &r->fig;
}

static double rel_err(double measured, double predicted)
{
    return predicted > 0 ? (measured - predicted) / predicted : NAN;
}

void pt_run_report_print(pt_run_report *r, const pt_sim_result *pred, const char *pred_label,
                         FILE *out)
{
    const pt_run_figures *f = pt_run_report_figures(r);
    double p_ms = pred ? pred->iter_s * 1e3 : 0;
    char label[PT_FIG_LABEL_MAX];
    fprintf(out, "\niteration time: measured %.3f ms (%s), predicted %.3f ms%s%s%s",
            f->iteration_ms, pt_fig_iter_label(f->steps_measured, label, sizeof label), p_ms,
            pred_label ? " (" : "", pred_label ? pred_label : "", pred_label ? ")" : "");
    if (p_ms > 0 && f->steps_measured > 0)
        fprintf(out, ", relative error %+.1f%%", 100 * rel_err(f->iteration_ms, p_ms));
    fprintf(out, "\n\n%-9s %10s %10s %8s %8s %8s %8s %12s %12s\n", "stage/rep", "iter ms",
            "pred ms", "busy", "pred", "bubble", "pred", "peak MiB", "pred MiB");
    for (int w = 0; w < f->worker_count; w++) {
        const pt_run_worker_figures *x = &f->workers[w];
        const pt_sim_worker *sw = pred && w < pred->worker_count ? &pred->workers[w] : NULL;
        char name[24];
        snprintf(name, sizeof name, "s%d r%d", x->stage, x->replica);
        fprintf(out, "%-9s %10.3f %10.3f %8.3f %8.3f %8.3f %8.3f %12.2f %12.2f\n", name, x->iter_ms,
                p_ms, x->busy, sw ? sw->busy_frac : NAN, x->bubble, sw ? sw->bubble_frac : NAN,
                (double)x->peak_total / (1 << 20), sw ? (double)sw->peak.total / (1 << 20) : NAN);
    }
    fprintf(out, "\npeak memory by category (MiB, measured / predicted):\n");
    for (int w = 0; w < f->worker_count; w++) {
        const pt_run_worker_figures *x = &f->workers[w];
        const pt_sim_worker *sw = pred && w < pred->worker_count ? &pred->workers[w] : NULL;
        fprintf(out, "  s%d r%d:", x->stage, x->replica);
        for (int k = 0; k < PT_MSG_MEM_COUNT; k++)
            fprintf(out, " %s %.2f/%.2f", pt_msg_mem_name(k), (double)x->peak[k] / (1 << 20),
                    sw && k < PT_MEM_KIND_COUNT ? (double)sw->peak.bytes[k] / (1 << 20) : NAN);
        fputc('\n', out);
    }
}

static cJSON *mem_object(const int64_t *bytes, int64_t total)
{
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; o && k < PT_MSG_MEM_COUNT; k++)
        cJSON_AddNumberToObject(o, pt_msg_mem_name(k), (double)bytes[k]);
    if (o)
        cJSON_AddNumberToObject(o, "total", (double)total);
    return o;
}

static void add_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

char *pt_run_report_json(pt_run_report *r, const pt_sim_result *pred, const char *extra_json)
{
    const pt_run_figures *f = pt_run_report_figures(r);
    double p_ms = pred ? pred->iter_s * 1e3 : 0;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "event", "summary");
    add_num(o, "measured_iteration_ms", f->iteration_ms);
    add_num(o, "mean_iteration_ms", f->mean_iteration_ms);
    add_num(o, "predicted_iteration_ms", p_ms);
    add_num(o, "relative_error", rel_err(f->iteration_ms, p_ms));
    cJSON_AddNumberToObject(o, "steps_measured", f->steps_measured);
    char label[PT_FIG_LABEL_MAX];
    cJSON_AddStringToObject(o, "measured_label",
                            pt_fig_iter_label(f->steps_measured, label, sizeof label));
    if (pred)
        add_num(o, "predicted_bubble_frac", pred->bubble_frac);
    cJSON *arr = cJSON_AddArrayToObject(o, "stages");
    for (int w = 0; arr && w < f->worker_count; w++) {
        const pt_run_worker_figures *x = &f->workers[w];
        const pt_sim_worker *sw = pred && w < pred->worker_count ? &pred->workers[w] : NULL;
        cJSON *s = cJSON_CreateObject();
        if (!s)
            break;
        cJSON_AddItemToArray(arr, s);
        cJSON_AddNumberToObject(s, "stage", x->stage);
        cJSON_AddNumberToObject(s, "replica", x->replica);
        add_num(s, "iteration_ms", x->iter_ms);
        add_num(s, "busy_frac", x->busy);
        add_num(s, "bubble_frac", x->bubble);
        cJSON_AddItemToObject(s, "peak_memory_bytes", mem_object(x->peak, x->peak_total));
        if (sw) {
            add_num(s, "predicted_busy_frac", sw->busy_frac);
            add_num(s, "predicted_bubble_frac", sw->bubble_frac);
            int64_t pb[PT_MSG_MEM_COUNT] = {0};
            for (int k = 0; k < PT_MSG_MEM_COUNT && k < PT_MEM_KIND_COUNT; k++)
                pb[k] = sw->peak.bytes[k];
            cJSON_AddItemToObject(s, "predicted_peak_memory_bytes", mem_object(pb, sw->peak.total));
            add_num(s, "busy_relative_error", rel_err(x->busy, sw->busy_frac));
        }
    }
    if (extra_json) {
        cJSON *e = cJSON_Parse(extra_json);
        if (e && cJSON_IsObject(e)) {
            cJSON *it = e->child;
            while (it) {
                cJSON *next = it->next;
                cJSON_DetachItemViaPointer(e, it);
                /* a member the report has is replaced: one key, one value
                 * (deleted, then added: cJSON's replace frees the key it is
                 * given when that is the new item's own) */
                cJSON_DeleteItemFromObjectCaseSensitive(o, it->string);
                cJSON_AddItemToObject(o, it->string, it);
                it = next;
            }
        }
        cJSON_Delete(e);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}
