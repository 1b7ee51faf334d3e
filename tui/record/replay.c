/* Run records read back and replayed (see replay.h). */
#include "tui/record/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tui/record/bands.h"
#include "tui/record/progress.h"

#define REPLAY_SPEED_MIN 0.01
#define REPLAY_SPEED_MAX 1000.0

/* The agent row for id, created with "unknown" fields when absent. */
static pt_store_agent agent_row(pt_store *store, const char *id)
{
    int i = pt_store_find_agent(store, id);
    if (i >= 0)
        return *pt_store_agent_at(store, i);
    pt_store_agent a;
    memset(&a, 0, sizeof a);
    snprintf(a.id, sizeof a.id, "%s", id);
    a.device_index = -1;
    a.mem_free = -1;
    a.stage = a.replica = -1;
    a.step = -1;
    a.last_heard_ns = -1;
    a.hb_age_ms = -1;
    snprintf(a.state, sizeof a.state, "registered");
    return a;
}

static void apply_msg(pt_record *r, int64_t i, pt_store *store)
{
    const pt_record_entry *e = pt_record_at(r, i);
    pt_msg m;
    pt_error err = {0};
    if (pt_record_msg(r, i, &m, &err) < 0) {
        pt_store_note(store, "%s", err.msg);
        return;
    }
    int64_t off = e->offset_ns;
    int received = e->kind == PT_RECORD_RECV;
    pt_store_agent a = agent_row(store, m.agent);
    if (received)
        a.last_heard_ns = e->t;
    switch (m.type) {
    case PT_MSG_EVENTS:
        for (int k = 0; k < m.u.events.count; k++) {
            m.u.events.events[k].start_ns -= off;
            m.u.events.events[k].end_ns -= off;
        }
        pt_store_events(store, m.u.events.events, m.u.events.count, m.gen);
        break;
    case PT_MSG_METRICS:
        pt_store_metrics(store, &m.u.metrics, m.gen, e->t);
        if (m.u.metrics.step > a.step)
            a.step = m.u.metrics.step;
        if (m.u.metrics.device_total > 0) {
            a.mem_total = m.u.metrics.device_total;
            a.mem_free = m.u.metrics.device_free;
        }
        break;
    case PT_MSG_REGISTER:
        snprintf(a.host, sizeof a.host, "%s", m.u.reg.host);
        snprintf(a.device, sizeof a.device, "%s",
                 m.u.reg.device_name[0] ? m.u.reg.device_name : m.u.reg.backend);
        for (int c = 0; c < m.u.reg.cap_count; c++)
            if (!strcmp(m.u.reg.caps[c], PT_MSG_CAP_SIMULATED)) /* the label, everywhere */
                snprintf(a.device, sizeof a.device, "%s", PT_MSG_CAP_SIMULATED);
        a.device_index = m.u.reg.device;
        a.mem_total = m.u.reg.memory_bytes;
        a.pid = m.u.reg.pid;
        break;
    case PT_MSG_ERROR:
        snprintf(a.last_error, sizeof a.last_error, "%s", m.u.error.reason);
        break;
    case PT_MSG_BYE:
        if (received)
            snprintf(a.state, sizeof a.state, "gone");
        break;
    case PT_MSG_HEARTBEAT:
        if (m.u.heartbeat.step > a.step)
            a.step = m.u.heartbeat.step;
        break;
    default:
        break;
    }
    if (received && !strcmp(e->channel, "telemetry"))
        a.dropped = e->dropped;
    if (received || pt_store_find_agent(store, m.agent) >= 0)
        pt_store_set_agent(store, &a);
    pt_msg_clear(&m);
}

static void apply_plan(const pt_record_entry *e, pt_store *store)
{
    pt_store_set_plan(store, e->plan, e->gen);
    for (int w = 0; w < e->worker_count; w++) {
        const pt_record_worker *wk = &e->workers[w];
        pt_store_agent a = agent_row(store, wk->agent);
        a.stage = wk->stage;
        a.replica = wk->replica;
        a.pid = wk->pid;
        pt_store_set_agent(store, &a);
    }
    if (e->resume_step > 0)
        pt_store_note(store, "plan generation %lld resumes at step %lld", (long long)e->gen,
                      (long long)e->resume_step);
}

/* A stage's step folded over its replicas: its metrics into the series, the
 * straggler heard and, when it is one by the timeline's rule
 * (tui/record/bands.h), named on the status line. */
static void apply_sfold(const pt_record_entry *e, pt_store *store)
{
    const pt_record_sfold *f = e->sfold;
    if (f->metric_frames) {
        pt_msg_metrics m;
        memset(&m, 0, sizeof m);
        m.stage = f->stage;
        m.replica = f->straggler < 0 ? 0 : f->straggler;
        m.step = e->step;
        m.loss = f->loss;
        m.iter_ms = f->iter_max_ms;
        m.samples_per_s = f->samples_per_s;
        pt_store_metrics_folded(store, &m, (int)f->metric_frames, e->gen, e->t);
    }
    if (!f->replicas || !e->agent)
        return;
    /* the stage's agents were heard at this step (which of them the line
     * does not say: all of them, as they run in step) */
    pt_store_stage_heard(store, f->stage, e->step, e->t);
    pt_store_folded(store, &(pt_store_fold){e->gen, e->step, f->stage, PT_TL_ALL_REPLICAS,
                                            f->replicas, f->straggler, f->start_ns, f->end_ns,
                                            f->busy_min_ns, f->busy_median_ns, f->busy_max_ns});
    double over = f->busy_median_ns > 0
                      ? 100.0 * ((double)f->busy_max_ns / (double)f->busy_median_ns - 1.0)
                      : 0;
    if (over >= PT_BANDS_STRAGGLER_PCT_DEF)
        pt_store_note(store,
                      "step %lld: stage %d replica %d (%s) computed %.0f %% over the stage "
                      "median (folded: %d replicas, %.1f / %.1f / %.1f ms min / median / max)",
                      (long long)e->step, f->stage, f->straggler, e->agent, over, f->replicas,
                      (double)f->busy_min_ns / 1e6, (double)f->busy_median_ns / 1e6,
                      (double)f->busy_max_ns / 1e6);
}

void pt_record_apply(pt_record *rec, int64_t i, pt_store *store)
{
    const pt_record_entry *e = pt_record_at(rec, i);
    if (!e)
        return;
    if (e->t > pt_store_now(store))
        pt_store_set_now(store, e->t);
    switch (e->kind) {
    case PT_RECORD_RECV:
    case PT_RECORD_SENT:
        apply_msg(rec, i, store);
        break;
    case PT_RECORD_PLAN:
        apply_plan(e, store);
        break;
    case PT_RECORD_AGENT:
    case PT_RECORD_DEAD: {
        pt_store_agent a = agent_row(store, e->agent);
        if (e->kind == PT_RECORD_DEAD) {
            snprintf(a.state, sizeof a.state, "dead");
            snprintf(a.last_error, sizeof a.last_error, "%s", e->reason);
            pt_store_note(store, "%s dead: %s", e->agent, e->reason);
        } else {
            snprintf(a.state, sizeof a.state, "%s", e->state);
            a.step = e->step;
        }
        pt_store_set_agent(store, &a);
        break;
    }
    case PT_RECORD_FOLD: { /* a folded step: the agent was heard; the timeline shows the step */
        pt_store_agent a = agent_row(store, e->agent);
        a.last_heard_ns = e->t;
        a.dropped = e->dropped;
        pt_store_set_agent(store, &a);
        const pt_record_fold *f = e->fold;
        pt_store_folded(store, &(pt_store_fold){e->gen, e->step, f->stage, f->replica, 1,
                                                f->replica, f->start_ns, f->end_ns, f->busy_ns,
                                                f->busy_ns, f->busy_ns});
        break;
    }
    case PT_RECORD_SFOLD:
        apply_sfold(e, store);
        break;
    case PT_RECORD_CHECKPOINT:
        pt_store_note(store, "checkpoint of step %lld committed", (long long)e->step);
        break;
    case PT_RECORD_CHECKPOINT_FAILED:
        pt_store_note(store, "checkpoint failed: %s", e->reason);
        break;
    default:
        break; /* session, rejected, summary, failed: nothing on screen */
    }
}

/* ---- loading with progress */

#define MIB (1024.0 * 1024.0)

static void on_load_progress(int64_t done, int64_t total, void *arg)
{
    (void)total;
    pt_progress_update(arg, (int64_t)(done / MIB), NULL);
}

/* A record read with damaged lines is still read, and the user is told how
 * much of it was passed over and why, once. */
static void say_skipped(const pt_record *rec)
{
    pt_error first = {0};
    int64_t n = pt_record_skipped(rec, &first);
    if (n > 0)
        fprintf(stderr, "pipetop: passed over %lld bad line%s of the record (the first: %s)\n",
                (long long)n, n == 1 ? "" : "s", first.msg);
}

int pt_replay_load(const char *path, pt_record **out, pt_error *err)
{
    struct stat st;
    int rc;
    if (stat(path, &st) != 0 || st.st_size < PT_REPLAY_PROGRESS_BYTES) {
        rc = pt_record_load(path, out, err);
    } else {
        char label[128];
        snprintf(label, sizeof label, "reading %s (MiB)", path);
        pt_progress *p = pt_progress_new(stderr, label, (int64_t)(st.st_size / MIB), -1);
        rc = pt_record_load_progress(path, p ? on_load_progress : NULL, p, out, err);
        pt_progress_finish(&p, rc < 0 ? "failed" : "done");
    }
    if (rc == 0)
        say_skipped(*out);
    return rc;
}

/* ---- player ------------------------------------------------------------------ */

struct pt_replay {
    pt_record *rec;
    pt_store *store;
    double speed;
    int paused, started;
    int64_t pos;
    int64_t wall0, rec0; /* wall-clock and record time that correspond */
    int64_t paused_rec;  /* record time where it was paused */
    int64_t *plans;      /* entry index of each plan entry (a generation's start), ascending */
    int64_t nplans;
};

/* Plan entries before entry pos: the generation shown (1-based; 0 before the first). */
static int64_t plans_before(const pt_replay *r, int64_t pos)
{
    int64_t lo = 0, hi = r->nplans;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (r->plans[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int pt_replay_new(pt_record *rec, pt_store *store, double speed, pt_replay **out)
{
    if (!out || !rec || !store)
        return PT_EINVAL;
    pt_replay *r = calloc(1, sizeof *r);
    if (!r)
        return PT_ENOMEM;
    /* the record is read once and does not grow: index its plan entries so
     * the header's "gen k/n" and the generation keys do not scan it */
    int64_t count = pt_record_count(rec);
    for (int64_t j = 0; j < count; j++)
        r->nplans += pt_record_at(rec, j)->kind == PT_RECORD_PLAN;
    if (r->nplans > 0 && !(r->plans = malloc((size_t)r->nplans * sizeof *r->plans))) {
        free(r);
        return PT_ENOMEM;
    }
    for (int64_t j = 0, k = 0; j < count; j++)
        if (pt_record_at(rec, j)->kind == PT_RECORD_PLAN)
            r->plans[k++] = j;
    r->rec = rec;
    r->store = store;
    r->speed = speed;
    pt_replay_set_speed(r, speed, 0);
    *out = r;
    return 0;
}

void pt_replay_free(pt_replay **r_p)
{
    if (r_p && *r_p) {
        free((*r_p)->plans);
        free(*r_p);
        *r_p = NULL;
    }
}

/* Record time that wall-clock now corresponds to. */
static int64_t rec_time(const pt_replay *r, int64_t now_ns)
{
    if (r->paused)
        return r->paused_rec;
    return r->rec0 + (int64_t)((double)(now_ns - r->wall0) * r->speed);
}

static void start(pt_replay *r, int64_t now_ns)
{
    if (r->started)
        return;
    r->started = 1;
    r->wall0 = now_ns;
    r->rec0 = pt_record_count(r->rec) ? pt_record_t_ns(r->rec, 0) : 0;
    r->paused_rec = r->rec0;
}

int64_t pt_replay_advance(pt_replay *r, int64_t now_ns)
{
    start(r, now_ns);
    int64_t until = rec_time(r, now_ns), n = 0;
    while (r->pos < pt_record_count(r->rec) && pt_record_t_ns(r->rec, r->pos) <= until) {
        pt_record_apply(r->rec, r->pos++, r->store);
        n++;
    }
    return n;
}

void pt_replay_pause(pt_replay *r, int paused, int64_t now_ns)
{
    start(r, now_ns);
    if (paused && !r->paused) {
        r->paused_rec = rec_time(r, now_ns);
        r->paused = 1;
    } else if (!paused && r->paused) {
        r->rec0 = r->paused_rec;
        r->wall0 = now_ns;
        r->paused = 0;
    }
}

int pt_replay_paused(const pt_replay *r)
{
    return r->paused;
}

void pt_replay_set_speed(pt_replay *r, double speed, int64_t now_ns)
{
    if (!(speed >= REPLAY_SPEED_MIN))
        speed = REPLAY_SPEED_MIN;
    if (speed > REPLAY_SPEED_MAX)
        speed = REPLAY_SPEED_MAX;
    if (r->started && !r->paused) {
        r->rec0 = rec_time(r, now_ns);
        r->wall0 = now_ns;
    }
    r->speed = speed;
}

double pt_replay_speed(const pt_replay *r)
{
    return r->speed;
}

static int is_metrics(const pt_record_entry *e)
{
    return e->kind == PT_RECORD_RECV && e->msg_type == PT_MSG_METRICS;
}

int64_t pt_replay_step(pt_replay *r, int64_t now_ns)
{
    pt_replay_pause(r, 1, now_ns);
    /* the next step is the one of the next metrics entry; it is complete at
     * its last metrics entry before any metrics of a later step (replicas
     * report the same step interleaved with other messages) */
    int64_t target = -1, last = -1;
    for (int64_t j = r->pos; j < pt_record_count(r->rec); j++) {
        if (!is_metrics(pt_record_at(r->rec, j)))
            continue;
        int64_t st = pt_record_at(r->rec, j)->step;
        if (target < 0)
            target = st;
        if (st == target)
            last = j;
        else if (st > target)
            break;
    }
    int64_t end = last < 0 ? pt_record_count(r->rec) : last + 1, n = 0;
    while (r->pos < end) {
        pt_record_apply(r->rec, r->pos++, r->store);
        n++;
    }
    if (r->pos > 0)
        r->paused_rec = pt_record_t_ns(r->rec, r->pos - 1);
    return n;
}

int64_t pt_replay_to_end(pt_replay *r)
{
    return pt_replay_seek(r, pt_record_count(r->rec), 0);
}

static int is_events(const pt_record_entry *e)
{
    return e->kind == PT_RECORD_RECV && e->msg_type == PT_MSG_EVENTS;
}

/* The step the entries before pos reach: the newest metrics step among them
 * (-1 when none). */
static int64_t step_before(const pt_record *rec, int64_t pos)
{
    for (int64_t j = pos - 1; j >= 0; j--) {
        const pt_record_entry *e = pt_record_at(rec, j);
        if (is_metrics(e))
            return e->step;
    }
    return -1;
}

int64_t pt_replay_seek(pt_replay *r, int64_t target, int64_t now_ns)
{
    int64_t count = pt_record_count(r->rec);
    if (target < 0)
        target = 0;
    if (target > count)
        target = count;
    pt_replay_pause(r, 1, now_ns);
    if (target < r->pos) {
        pt_store_reset(r->store);
        r->pos = 0;
    }
    /* Only the op events the timeline can still show are decoded: those of
     * the last PT_REPLAY_EVENT_STEPS steps before the target. Everything
     * else (plans, agents, metrics, notes) is applied, so the graphs and the
     * agents table are those of a replay played to the target. The reader's
     * index (each entry's kind and steps) makes the skip a scan, not a
     * decode. */
    int64_t reach = step_before(r->rec, target);
    int64_t keep_from = reach - PT_REPLAY_EVENT_STEPS;
    int64_t n = 0;
    for (; r->pos < target; r->pos++) {
        const pt_record_entry *e = pt_record_at(r->rec, r->pos);
        if (is_events(e) && e->step_last >= 0 && e->step_last < keep_from) {
            if (e->t > pt_store_now(r->store))
                pt_store_set_now(r->store, e->t);
            continue;
        }
        pt_record_apply(r->rec, r->pos, r->store);
        n++;
    }
    if (r->pos > 0)
        r->paused_rec = pt_record_t_ns(r->rec, r->pos - 1);
    else
        r->paused_rec = r->rec0;
    return n;
}

/* Position just past the last metrics entry of step `step` (replicas report
 * one step interleaved with other messages, up to the first metrics of a
 * later step); -1 when no metrics reach it. */
static int64_t end_of_step(const pt_record *rec, int64_t from, int64_t step)
{
    int64_t last = -1;
    for (int64_t j = from; j < pt_record_count(rec); j++) {
        const pt_record_entry *e = pt_record_at(rec, j);
        if (!is_metrics(e))
            continue;
        if (e->step == step)
            last = j;
        else if (last >= 0 && e->step > step)
            break;
    }
    return last < 0 ? -1 : last + 1;
}

int64_t pt_replay_seek_step(pt_replay *r, int64_t step, int64_t now_ns)
{
    if (step < 0)
        return pt_replay_seek(r, 0, now_ns);
    int64_t end = end_of_step(r->rec, 0, step);
    return end < 0 ? -1 : pt_replay_seek(r, end, now_ns);
}

int64_t pt_replay_step_back(pt_replay *r, int64_t now_ns)
{
    int64_t cur = step_before(r->rec, r->pos);
    if (cur < 0)
        return pt_replay_seek(r, 0, now_ns);
    /* the last metrics before pos ends step cur: go to the end of the step
     * before it (the entries of generation g+1 may run step cur again) */
    int64_t j = r->pos - 1;
    while (j >= 0 && !(is_metrics(pt_record_at(r->rec, j)) && pt_record_at(r->rec, j)->step != cur))
        j--;
    return pt_replay_seek(r, j < 0 ? 0 : j + 1, now_ns);
}

int64_t pt_replay_seek_generation(pt_replay *r, int delta, int64_t now_ns)
{
    /* generations start just after their plan entries; the target is the
     * start of the next one (delta > 0) or of the current / previous one */
    int64_t k = plans_before(r, r->pos); /* plans[k-1] starts the current one */
    if (delta > 0)
        return k < r->nplans ? pt_replay_seek(r, r->plans[k] + 1, now_ns) : -1;
    if (k == 0)
        return -1;
    /* just after the current generation's plan: go to the one before */
    int64_t to = r->pos <= r->plans[k - 1] + 1 ? (k >= 2 ? r->plans[k - 2] : -1) : r->plans[k - 1];
    return to < 0 ? -1 : pt_replay_seek(r, to + 1, now_ns);
}

int64_t pt_replay_rewind(pt_replay *r, int64_t now_ns)
{
    return pt_replay_seek(r, r->nplans > 0 ? r->plans[0] + 1 : 0, now_ns);
}

int64_t pt_replay_generation_count(const pt_replay *r, int64_t *current)
{
    if (current)
        *current = plans_before(r, r->pos);
    return r->nplans;
}

int pt_replay_done(const pt_replay *r)
{
    return r->pos >= pt_record_count(r->rec);
}

int64_t pt_replay_position(const pt_replay *r)
{
    return r->pos;
}
