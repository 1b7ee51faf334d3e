/* Replicas of a stage folded into one band, and the stragglers among them:
 * what lets the console show a 1,024-replica run as one row per stage.
 *
 * A replica's figure is its compute-lane time per iteration over the steps
 * of a timeline (the time its device spent on forward, backward, recompute
 * and optimizer ops; waiting for a neighbour is not counted, so a replica
 * slowed by another does not look slow itself). A stage's band is the true
 * minimum, median and maximum of its replicas' figures; the median is the
 * lower median (element (n - 1) / 2 of the sorted figures), so it is always
 * one real replica's, whose ops the console draws for the stage. A straggler
 * is a replica whose figure is at least pct % over its stage's median.
 *
 * A stage whose steps in the timeline a run record folded over its replicas
 * (its one row PT_TL_ALL_REPLICAS, tline.h pt_tl_fold) has the band the
 * record kept: the mean over its steps of each step's min, median and max,
 * and as its straggler the replica of the slowest step's max, when that mean
 * max is pct % over the mean median. */
#ifndef PT_TUI_BANDS_H
#define PT_TUI_BANDS_H

#include "protocol/error.h"
#include "tui/record/tline.h"

#define PT_BANDS_STRAGGLER_PCT_DEF 20.0 /* % over the stage median that makes a straggler */

/* One stage's band over its replicas (the timeline's rows first_row ..
 * first_row + row_count - 1). */
typedef struct pt_band_stage {
    int stage;
    int first_row, row_count;
    double min_s, median_s, max_s; /* compute seconds per iteration */
    int min_row, median_row, max_row;
    int stragglers;       /* replicas of the stage that are stragglers */
    int replicas;         /* replicas the band is over (row_count, or a folded stage's count) */
    int folded;           /* 1: the band of steps folded over the replicas (no replica rows) */
    int folded_straggler; /* folded: the straggler's replica, -1 none */
} pt_band_stage;

/* The bands of a timeline, rebuilt by pt_bands_build; rows index the
 * timeline's rows (the same order: by stage, then replica). */
typedef struct pt_bands {
    int stage_count, stage_cap;
    pt_band_stage *stages; /* by stage number */
    int row_count, row_cap;
    pt_tl_row *rows; /* a copy of the timeline's rows */
    double *figure;  /* per row: compute seconds per iteration */
    double *slower;  /* per row: figure / its stage's median - 1 (0 when the median is 0) */
    int *stage_of;   /* per row: index into stages */
    unsigned char *straggler; /* per row: 1 when a straggler */
    int straggler_count;
    int *by_slowness; /* the stragglers' rows, the slowest first */
    double pct;       /* the rule it was built with */
} pt_bands;

/* Rebuilds b from tl (b's buffers reused; a zeroed b is empty) with the
 * straggler rule pct (%; <= 0: PT_BANDS_STRAGGLER_PCT_DEF). Linear in the
 * spans plus n log n in the rows. 0, or PT_ENOMEM with b emptied. */
int pt_bands_build(pt_bands *b, const pt_tline *tl, double pct);
/* Frees what b owns and zeroes it (NULL-safe). */
void pt_bands_release(pt_bands *b);
/* The row of (stage, replica), or -1 (a binary search). */
int pt_bands_find(const pt_bands *b, int stage, int replica);
/* The band of stage number `stage`, or NULL. */
const pt_band_stage *pt_bands_stage(const pt_bands *b, int stage);

#endif
