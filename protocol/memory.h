/* Memory categories, one list for the whole program: the runtime's arenas
 * account bytes by them, the planner's memory model predicts them, and
 * telemetry carries them, so predicted and measured figures line up by index. */
#ifndef PT_PROTOCOL_MEMORY_H
#define PT_PROTOCOL_MEMORY_H

typedef enum pt_mem_kind {
    PT_MEM_WEIGHTS, /* the live parameter array */
    PT_MEM_GRADS,   /* gradient accumulators (and all-reduce buffers) */
    PT_MEM_OPTIM,   /* optimizer state (momentum, Adam moments) */
    PT_MEM_ACTS,    /* activations kept for backward, backward scratch */
    PT_MEM_STASH,   /* stashed / double-buffered weight versions beyond the live one */
    PT_MEM_COMM,    /* send / receive buffers */
    PT_MEM_KIND_COUNT
} pt_mem_kind;

/* "weights", "grads", "optim", "acts", "stash", "comm"; NULL out of range. */
const char *pt_mem_kind_name(int kind);

#endif
