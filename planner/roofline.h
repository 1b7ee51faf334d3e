/* The roofline floor of a layer's time: no micro-batch, however small, runs
 * a layer faster than its device lets it (docs/planners.md, "Cost model and
 * precision").
 *
 * For a profile with a roofline (pt_profile.roofline: the device's peak
 * FLOP/s at the profile's precision, its memory bandwidth BW and the least
 * time per kernel, launch), layer l's forward on b samples (b >= 1, the
 * profile measured at mb) is bounded below by
 *
 *   B_fwd(b) = max(flops·b/mb / peak, (weight_bytes + bytes·b/mb) / BW) + kernels·launch
 *
 * with the layer's roofline fields (pt_profile_layer); the backward computes
 * both gradients and writes the weight gradient:
 *
 *   B_bwd(b) = max(2·flops·b/mb / peak, 2·(weight_bytes + bytes·b/mb) / BW)
 *              + kernels_bwd·launch,   kernels_bwd = 2·kernels with parameters, else kernels
 *
 * and the recomputed forward as B_fwd. An imported profile knows no FLOPs or
 * activation traffic (0): its floor is its weights over the bandwidth plus
 * its launches.
 *
 * The cost model charges every time affine in the rows (planner/cost.h:
 * t(b) = t·(f + (1 - f)·b/mb), a fixed share f per layer and pass), so the
 * floor is folded into that form, pass by pass: the smallest f >= the
 * profile's own share for which the line meets B at b = 1 (capped at
 * PT_PROFILE_SHARE_MAX), then the time raised where the line would still
 * fall under B at b = 1 or climb slower than B's steepest slope. B is convex
 * and piecewise linear, so a line at or above it at b = 1 that climbs at least
 * as fast stays at or above it for every b >= 1: every micro-batch size and
 * every replica's share of one (rows >= 1) is charged at least its floor. A
 * profile measured above its floor keeps its times at mb (f may grow); the
 * floor is idempotent. */
#ifndef PT_PLANNER_ROOFLINE_H
#define PT_PLANNER_ROOFLINE_H

#include "protocol/profile.h"

/* Backward work relative to forward: an input gradient and a weight
 * gradient, each about a forward's FLOPs and traffic. */
#define PT_ROOFLINE_BWD_FACTOR 2.0
#define PT_ROOFLINE_MS_PER_S   1000.0
#define PT_ROOFLINE_US_PER_MS  1000.0

typedef enum pt_roofline_pass {
    PT_ROOFLINE_FWD,
    PT_ROOFLINE_BWD,
    PT_ROOFLINE_RECOMPUTE,
    PT_ROOFLINE_PASSES
} pt_roofline_pass;

/* B_pass(rows) of layer l in ms, as above; 0 for a profile without a
 * roofline, a layer out of range or rows <= 0. */
double pt_roofline_bound_ms(const pt_profile *profile, int layer, pt_roofline_pass pass,
                            double rows);

/* Folds the floor into profile's layers in place (fwd_ms, bwd_ms,
 * recompute_ms, the split halves scaled with bwd_ms, and the three passes'
 * fixed shares, pass_shares set); nothing for a profile without a roofline.
 * NULL-safe. */
void pt_roofline_floor(pt_profile *profile);

#endif
