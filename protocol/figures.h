/* The headline figures, defined once for every screen and file that shows
 * them: `pipetop run`'s summary (tui/control/run_report.h), `status` (text
 * and --json), `replay`, `export` (trace, SVG, --compare) and the console's
 * header, plan view, timeline footer and stats view. tui/record/figures.h
 * applies these definitions to a store or a run folder.
 *
 * Measured iteration time, of one plan generation:
 *
 *   the median, over the newest PT_FIG_WINDOW_STEPS steps of the
 *   generation, of each step's slowest worker's iteration time (the largest
 *   `iter_ms` of the step's metrics), counting only steps every worker of the
 *   plan reported metrics for, and leaving out the generation's first such
 *   step when more follow (it pays for first-touch allocation and
 *   connection set-up, which the simulator does not model).
 *
 * The median because a loaded host's bursts move a mean; the newest window
 * because that is what a user watching a run (or tuning it) asks about, and
 * what `status` of a finished run then agrees with. The label says both
 * (pt_fig_iter_label: "median of last 20 steps").
 *
 * Predicted iteration time (tui/record/figures.h): the simulator's on the
 * generation's plan, with the run's newest calibration up to that generation
 * (RUN/calibrated-gen-K.json, K <= the generation) when there is one, else
 * with the profile the run was given; labelled "calibrated" or "analytic"
 * and with the profile's origin. */
#ifndef PT_PROTOCOL_FIGURES_H
#define PT_PROTOCOL_FIGURES_H

#include <stddef.h>
#include <stdint.h>

/* Steps the measured iteration time is the median of (the newest ones). */
#define PT_FIG_WINDOW_STEPS 20
/* Room for a figure's label, NUL included. */
#define PT_FIG_LABEL_MAX 96

/* The measured iteration time (ms) from ms[0..n): the slowest worker's
 * iteration time of each complete step of one generation, oldest first.
 * Leaves out ms[0] when n >= 2, then takes the median of the newest
 * PT_FIG_WINDOW_STEPS. *used (may be NULL) gets the steps it is the median
 * of; 0 (and a return of 0) when n <= 0. ms is not changed. */
double pt_fig_iter_ms(const double *ms, int64_t n, int *used);

/* The words that say what pt_fig_iter_ms computed, for labels:
 * "median of last 20 steps" (or "median of 3 steps" while the window is not
 * full; "no complete step yet" for 0). Returns buf. */
const char *pt_fig_iter_label(int used, char *buf, size_t cap);

#endif
