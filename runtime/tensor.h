/* Tensors and per-stage memory arenas with byte accounting by category.
 *
 * A pt_arena hands out device memory of one backend and counts the bytes in
 * use per category (weights, gradients, optimizer state, activations,
 * stashed weight versions, communication buffers): current and peak per
 * category and in total. A freed block is not returned to the backend but
 * kept in the arena's cache and handed out again to the next allocation of
 * the same size (any category), so code that frees and re-allocates the same
 * buffers every micro-batch (the net's per-slot activation blocks) does no
 * backend allocation in steady state while the accounting still shows only
 * what is live. pt_arena_trim gives the cache back.
 *
 * "current"/"peak" count live (allocated, not freed) bytes; "reserved"
 * counts bytes obtained from the backend, live or cached.
 *
 * Thread safety: an arena may be used from several threads (a comm thread
 * allocating PT_MEM_COMM buffers while the compute thread runs); each call
 * takes the arena's mutex. Allocation is not on any hot path.
 *
 * Tensors are float32, row-major; pt_tensor is a plain view (pointer +
 * shape) with no ownership of its own: the arena that allocated `data` owns
 * it until pt_tensor_free / pt_arena_free. */
#ifndef PT_RUNTIME_TENSOR_H
#define PT_RUNTIME_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"
#include "protocol/memory.h"
#include "runtime/backend.h"



typedef struct pt_mem_stats {
    int64_t current[PT_MEM_KIND_COUNT]; /* live bytes per category */
    int64_t peak[PT_MEM_KIND_COUNT];    /* highest current[k] since creation / reset */
    int64_t total_current;              /* sum of current[] */
    int64_t total_peak;                 /* highest total_current (not the sum of peaks) */
    int64_t reserved;                   /* bytes held from the backend, live + cached */
    int64_t reserved_peak;
    int64_t backend_allocs; /* calls to be->alloc so far: constant in a steady state */
} pt_mem_stats;

typedef struct pt_arena pt_arena;

/* Creates an empty arena on backend `be` (NULL: pt_backend_default()).
 * On success *out owns a new arena; on failure *out is NULL and the result is
 * PT_ENOMEM. */
int pt_arena_create(const pt_backend *be, pt_arena **out);

/* Frees every block the arena still holds, live or cached (NULL-safe; sets
 * *arena_p = NULL). Pointers from the arena are invalid afterwards. */
void pt_arena_destroy(pt_arena **arena_p);

const pt_backend *pt_arena_backend(const pt_arena *arena);

/* Device memory of `bytes` bytes (64-byte aligned, contents undefined)
 * counted under `kind`: a cached block of exactly that size when there is
 * one, else a new backend block. Returns NULL (nothing counted) when the
 * backend is out of memory or when the allocation would take `reserved`
 * above the limit set with pt_arena_set_limit. */
void *pt_arena_alloc(pt_arena *arena, pt_mem_kind kind, size_t bytes);

/* pt_arena_alloc of count floats. */
float *pt_arena_alloc_floats(pt_arena *arena, pt_mem_kind kind, int64_t count);

/* Returns a block to the arena's cache and stops counting it. NULL-safe; a
 * pointer this arena did not hand out (or already freed) is ignored and
 * returns PT_EINVAL, else 0. */
int pt_arena_free(pt_arena *arena, void *ptr);

/* Exchanges the categories of two live blocks of the same size (a weight
 * version that becomes the live weights and the live weights it replaces):
 * the per-category figures stay as they are. Returns 0, or PT_EINVAL (either
 * not live in this arena, or their sizes differ; nothing changes). */
int pt_arena_swap_kinds(pt_arena *arena, void *a, void *b);

/* Gives cached (freed) blocks back to the backend. */
void pt_arena_trim(pt_arena *arena);

/* Caps `reserved` at limit_bytes (0: no limit), e.g. a device's memory in a
 * simulated topology. Allocations beyond it fail with NULL. */
void pt_arena_set_limit(pt_arena *arena, int64_t limit_bytes);

/* Copies the figures into *out. */
void pt_arena_stats(pt_arena *arena, pt_mem_stats *out);

/* Sets every peak to the current value (start of a measured interval). */
void pt_arena_reset_peaks(pt_arena *arena);

#define PT_TENSOR_RANK_MAX 4

typedef struct pt_tensor {
    float *data; /* device memory; NULL for an empty tensor */
    int rank;
    int64_t dims[PT_TENSOR_RANK_MAX];
} pt_tensor;

/* Allocates a rank-`rank` tensor of shape dims[] from the arena under `kind`.
 * Returns 0, PT_EINVAL (rank outside 1..PT_TENSOR_RANK_MAX or a negative
 * dim) or PT_ENOMEM; on failure *out is zeroed. */
int pt_tensor_alloc(pt_arena *arena, pt_mem_kind kind, int rank, const int64_t *dims,
                    pt_tensor *out);

/* Returns the tensor's memory to the arena and zeroes *t (NULL-safe). */
void pt_tensor_free(pt_arena *arena, pt_tensor *t);

int64_t pt_tensor_numel(const pt_tensor *t); /* product of dims; 0 for NULL or rank 0 */

#endif
