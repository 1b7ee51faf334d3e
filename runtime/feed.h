/* Data feed of a pipeline: maps (global batch, micro-batch, rows) onto the
 * samples of a data set, in the same order single-device training visits
 * them.
 *
 * Global batch t of B = b·M samples (b samples per micro-batch, M
 * micro-batches) lies in epoch e = t / P, where P = floor(n / B) global
 * batches fit in the n samples (the remainder of each epoch is skipped, since
 * a pipeline runs only whole global batches), at positions
 * [(t mod P)·B, (t mod P + 1)·B) of pt_data_order(n, seed, e). Micro-batch j
 * is positions [j·b, (j+1)·b) of it and row r of the micro-batch position
 * j·b + r. When B divides n this is exactly the order of `pipetop train
 * --batch B` (tui/cmd_train.c), so the weights can be compared with
 * single-device training on the same seed.
 *
 * Threads: a feed caches one epoch's order; each worker thread uses its own
 * feed (the data set may be shared: it is read-only). */
#ifndef PT_RUNTIME_FEED_H
#define PT_RUNTIME_FEED_H

#include <stdint.h>

#include "protocol/error.h"
#include "runtime/data.h"
#include "runtime/executor.h"

typedef struct pt_feed pt_feed;

/* A feed over `ds` (borrowed; must outlive the feed) with `mb_size` samples
 * per micro-batch and `mb_count` micro-batches per global batch. On success
 * *out owns it; on failure *out is NULL and the result is PT_EINVAL (err says
 * that the data set holds fewer samples than one global batch, or a size is
 * not positive) or PT_ENOMEM. */
int pt_feed_create(const pt_dataset *ds, uint64_t seed, int mb_size, int mb_count, pt_feed **out,
                   pt_error *err);

/* NULL-safe; sets *feed_p = NULL. */
void pt_feed_destroy(pt_feed **feed_p);

/* Sample index of row `row` of micro-batch mb of global batch t (no bounds
 * check on mb and row beyond the global batch: callers pass rows < b). */
int64_t pt_feed_sample(pt_feed *feed, int64_t t, int mb, int row);

/* The executor's load function over this feed (ctx = the feed). */
pt_exec_feed pt_feed_as_exec(pt_feed *feed);

/* Global batches per epoch (P above). */
int64_t pt_feed_batches_per_epoch(const pt_feed *feed);

#endif
