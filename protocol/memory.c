#include "protocol/memory.h"

const char *pt_mem_kind_name(int kind)
{
    static const char *const names[PT_MEM_KIND_COUNT] = {"weights", "grads", "optim",
                                                         "acts",    "stash", "comm"};
    return kind >= 0 && kind < PT_MEM_KIND_COUNT ? names[kind] : 0;
}
