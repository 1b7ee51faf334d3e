/* Optimizers over flat parameter/gradient arrays (a pt_net's, or any
 * version of them): SGD with momentum and Adam, as PyTorch defines them (see
 * the sgd_update / adam_update kernels in runtime/backend.h).
 *
 * State arrays (SGD: one, the momentum buffer; Adam: two, first and second
 * moments) have the arrays' size and live in the arena as PT_MEM_OPTIM,
 * zero at creation. The step counter t counts pt_optim_step calls (Adam's
 * bias correction uses t after the increment). For checkpoints, state is read
 * and written per range of the flat arrays — a layer's range from
 * pt_net_layer_range — in host memory, so it can be reassembled under a
 * different partition. */
#ifndef PT_RUNTIME_OPTIM_H
#define PT_RUNTIME_OPTIM_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/plan.h"
#include "runtime/tensor.h"

typedef struct pt_optim pt_optim;

/* Creates an optimizer for arrays of `count` floats with the arena's
 * backend. The spec is copied. On success *out owns it; on failure *out is
 * NULL and the result is PT_EINVAL (lr <= 0, momentum/betas outside [0,1),
 * eps <= 0, negative weight decay, count < 0; err names the field) or
 * PT_ENOMEM. */
int pt_optim_create(const pt_optim_spec *spec, pt_arena *arena, int64_t count, pt_optim **out,
                    pt_error *err);

/* Frees the state back to the arena. NULL-safe; sets *optim_p = NULL. */
void pt_optim_destroy(pt_optim **optim_p);

/* One update of params (device, count floats) from grads (device), then
 * t += 1. Gradients are read, not cleared. */
void pt_optim_step(pt_optim *optim, float *params, const float *grads);

/* The same update written to out (count floats, not overlapping params),
 * leaving params as they were: the executor steps this way when a weight
 * stash or a kept version still reads the old weights, instead of copying
 * them out first. The same floats as pt_optim_step. */
void pt_optim_step_to(pt_optim *optim, const float *params, float *out, const float *grads);

const pt_optim_spec *pt_optim_get_spec(const pt_optim *optim);
void pt_optim_set_lr(pt_optim *optim, float lr);         /* for learning-rate schedules */
int64_t pt_optim_count(const pt_optim *optim);           /* floats per array */
int64_t pt_optim_steps(const pt_optim *optim);           /* t */
void pt_optim_set_steps(pt_optim *optim, int64_t steps); /* restoring a checkpoint */

/* Number of state arrays: 1 for SGD, 2 for Adam. */
int pt_optim_state_count(const pt_optim *optim);
/* Name of state array i ("momentum"; "adam_m", "adam_v"), NULL when out of range. */
const char *pt_optim_state_name(const pt_optim *optim, int i);
/* Copies floats [offset, offset+count) of state array i to / from HOST memory.
 * Returns 0 or PT_ERANGE (i or the range outside the arrays). */
int pt_optim_get_state(pt_optim *optim, int i, int64_t offset, int64_t count, float *host);
int pt_optim_set_state(pt_optim *optim, int i, int64_t offset, int64_t count, const float *host);
/* Zeroes all state and sets t = 0. */
void pt_optim_reset(pt_optim *optim);

#endif
