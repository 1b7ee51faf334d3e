/* What the console knows about a run: the ingest side of every data source
 * (live session, replay of a run record). Op events go, as decoded, into a
 * fixed ring, iteration metrics into per-step series (loss, throughput, iteration
 * time) that continue across restarts, memory into per-replica samples, and
 * agents into a table of display rows. Views read it; they never care where
 * the data came from.
 *
 * The ingest path (pt_store_events) is the console's hot path: it copies
 * events into the ring with no allocation and no search beyond the replica's
 * row (bench/console_ingest.c measures it with the decoding in front). */
#ifndef PT_TUI_STORE_H
#define PT_TUI_STORE_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/message.h"
#include "protocol/plan.h"
#include "protocol/profile.h"
#include "protocol/topology.h"
#include "tui/record/tline.h"

#define PT_STORE_SPANS_DEFAULT (1 << 18) /* op spans kept (oldest overwritten) */
#define PT_STORE_MEM_SAMPLES   (1 << 16) /* memory samples kept */
#define PT_STORE_NOTE_MAX      256       /* characters of the last note */
#define PT_STORE_STATE_MAX     32

typedef struct pt_store pt_store;

/* One iteration as the metrics of its replicas describe it. */
typedef struct pt_store_step {
    int64_t step;
    int64_t gen;  /* plan generation it ran under */
    int64_t t_ns; /* when its first metrics arrived (console clock) */
    double loss;  /* NaN when no replica reported one */
    double samples_per_s;
    double iter_ms;
    int reports; /* metrics messages folded in */
} pt_store_step;

/* One memory sample of a stage replica. */
typedef struct pt_store_mem {
    int64_t t_ns, step;
    int stage, replica;
    int64_t cur[PT_MSG_MEM_COUNT], peak[PT_MSG_MEM_COUNT];
    int64_t total_cur, total_peak;
} pt_store_mem;

/* One row of the agents view. */
typedef struct pt_store_agent {
    char id[PT_MSG_ID_MAX];
    char host[PT_MSG_HOST_MAX];
    char device[PT_MSG_NAME_MAX]; /* device name or backend */
    int device_index;
    int64_t mem_total; /* its device's memory, bytes; 0: unknown */
    int64_t mem_free;  /* the driver's free figure (GPU agents' metrics); -1: unknown */
    int64_t pid;
    int stage, replica; /* -1: not assigned */
    char state[PT_STORE_STATE_MAX];
    int64_t step;
    int64_t last_heard_ns; /* console clock, -1 never */
    int64_t hb_age_ms;     /* set by live sources; -1: derive from last_heard_ns */
    uint64_t dropped;      /* telemetry messages lost */
    char last_error[PT_MSG_TEXT_MAX];
} pt_store_agent;

/* span_cap: ring size (0: PT_STORE_SPANS_DEFAULT). *out owns a new store. */
int pt_store_new(int64_t span_cap, pt_store **out);
void pt_store_free(pt_store **s_p); /* NULL-safe */
/* A deep copy of s as it is now (a paused display reads it while s goes
 * on filling). 0, or PT_ENOMEM with *out NULL. */
int pt_store_clone(const pt_store *s, pt_store **out);
/* Forgets everything (agents, plan, series, spans). */
void pt_store_reset(pt_store *s);

/* Changes with every ingest: views redraw when it moved. */
uint64_t pt_store_version(const pt_store *s);

/* Ingests a batch of op events (times on the console clock, already offset
 * by the sender's clock offset), copied as they are into the ring. An event
 * whose op is not a pt_op_kind (pt_msg_decode refuses those) is counted and
 * skipped.
 * Returns the number of spans added. */
int pt_store_events(pt_store *s, const pt_msg_event *ev, int count, int64_t gen);
/* Ingests one iteration's metrics of a replica, arrived at t_ns. Of an
 * older generation than the store's (a late frame): its step and memory
 * sample are kept, but it is not the replica's newest memory. */
void pt_store_metrics(pt_store *s, const pt_msg_metrics *m, int64_t gen, int64_t t_ns);
/* Ingests one stage's metrics of one step folded over `reports` replicas (a
 * record's "sfold" line): the step counts `reports` reports, its iteration
 * time is at least m->iter_ms (give the slowest), its loss m->loss when
 * known; no memory sample (the line holds the stage's peak only). */
void pt_store_metrics_folded(pt_store *s, const pt_msg_metrics *m, int reports, int64_t gen,
                             int64_t t_ns);
/* Makes plan (copied) current as generation gen; a new generation marks a
 * restart in the series. 0 or PT_ENOMEM. */
int pt_store_set_plan(pt_store *s, const pt_plan *plan, int64_t gen);
/* Inserts or replaces the agent row with the same id. 0 or PT_ENOMEM. */
int pt_store_set_agent(pt_store *s, const pt_store_agent *a);
/* The agents of `stage` were heard at `step` (a record's "sfold" line): each
 * one whose row is at an earlier step moves to it, heard at t_ns. Linear in
 * the agents, with no search and no copy (a 1,024-agent hour has 3,600 such
 * lines). */
void pt_store_stage_heard(pt_store *s, int stage, int64_t step, int64_t t_ns);
/* A step whose op events a run record folded (protocol/record.h "fold" and
 * "sfold" lines): when it ran and its compute, times on the console clock.
 * replica PT_TL_ALL_REPLICAS: every replica of the stage (busy the band over
 * them, straggler the replica of the max); a replica's own: the three busy
 * figures equal. */
typedef struct pt_store_fold {
    int64_t gen, step;
    int stage, replica;
    int replicas, straggler;
    int64_t start_ns, end_ns;
    int64_t busy_min_ns, busy_median_ns, busy_max_ns;
} pt_store_fold;
#define PT_STORE_FOLDS (1 << 16) /* folded steps kept (oldest overwritten) */

/* Ingests a folded step (the timeline draws it as one, tline.h pt_tl_fold).
 * Dropped (counted in pt_store_counts.folds_lost) when its ring cannot be
 * allocated. */
void pt_store_folded(pt_store *s, const pt_store_fold *f);
/* Agents whose device is "simulated" (they registered the simulated
 * capability: pipetop-agent --simulate), live or from a record. */
int pt_store_simulated_agents(const pt_store *s);
/* Index of agent id or -1. */
int pt_store_find_agent(const pt_store *s, const char *id);
/* Records a line for the status bar ("agent-2 dead: ..."). */
void pt_store_note(pt_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets the console clock of the newest data (for heartbeat ages in replay). */
void pt_store_set_now(pt_store *s, int64_t now_ns);

/* ---- reading */
/* The newest calibration of the cost model from the run (tui/record/live.h): a
 * profile and topology fitted on generation gen, taken over (freed by the
 * store, which keeps only the newest; NULL-safe: a NULL profile or topology
 * frees the other and changes nothing). */
void pt_store_set_calibration(pt_store *s, pt_profile *profile, pt_topology *topo, int64_t gen);
/* How many calibrations arrived so far (0: none, and the outputs are NULL
 * and -1); the newest one's profile, topology and generation (any output
 * may be NULL). Valid until the next set_calibration or reset. */
int pt_store_calibration(const pt_store *s, const pt_profile **profile, const pt_topology **topo,
                         int64_t *gen);
const pt_plan *pt_store_plan(const pt_store *s); /* NULL before the first plan */
int64_t pt_store_generation(const pt_store *s);
int pt_store_agent_count(const pt_store *s);
const pt_store_agent *pt_store_agent_at(const pt_store *s, int i);
int64_t pt_store_step_count(const pt_store *s);
const pt_store_step *pt_store_step_at(const pt_store *s, int64_t i); /* oldest first */
int64_t pt_store_mem_count(const pt_store *s);
const pt_store_mem *pt_store_mem_at(const pt_store *s, int64_t i); /* oldest kept first */
/* The newest memory sample of (stage, replica), or NULL. */
const pt_store_mem *pt_store_mem_latest(const pt_store *s, int stage, int replica);
const char *pt_store_last_note(const pt_store *s); /* "" when none */
/* How many notes were recorded so far (a new note, even with the same text,
 * counts): the console tells a state change from an old line by it. */
uint64_t pt_store_note_seq(const pt_store *s);
int64_t pt_store_now(const pt_store *s);

/* Events ingested in all, kept in the ring now, and skipped (invalid op
 * kind); metrics; folded steps ingested and lost (no memory for their ring). */
typedef struct pt_store_counts {
    uint64_t events, kept, skipped, metrics, folds, folds_lost;
} pt_store_counts;
void pt_store_counts_get(const pt_store *s, pt_store_counts *out);

/* Newest step with events (of the store's generation or a newer one) or
 * folded (-1 none). */
int64_t pt_store_last_step(const pt_store *s);

/* Builds a timeline (tl cleared first) of the spans and folded steps of
 * steps [first_step, last_step] still in the rings (last_step < 0: up to
 * the newest), with times in seconds from the earliest of them (*origin_ns,
 * may be NULL, receives it). Only those of the current plan generation when
 * current_gen_only is set. 0 or PT_ENOMEM. */
int pt_store_timeline(const pt_store *s, int64_t first_step, int64_t last_step,
                      int current_gen_only, pt_tline *tl, int64_t *origin_ns);

#endif
