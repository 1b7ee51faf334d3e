/* Training precisions: the table of precision.h. */
#include "protocol/precision.h"

#include <string.h>

typedef struct precision_info {
    const char *name;
    int act_bytes, weight_bytes, master_bytes;
} precision_info;

static const precision_info table[PT_PRECISION_COUNT] = {
#define PT_PRECISION_ROW(id, name, act, weight, master) [id] = {name, act, weight, master},
    PT_PRECISION_LIST(PT_PRECISION_ROW)
#undef PT_PRECISION_ROW
};

static const precision_info *info(int p)
{
    return p >= 0 && p < PT_PRECISION_COUNT ? &table[p] : NULL;
}

const char *pt_precision_name(int p)
{
    return info(p) ? info(p)->name : NULL;
}

int pt_precision_parse(const char *name)
{
    for (int p = 0; name && p < PT_PRECISION_COUNT; p++)
        if (!strcmp(table[p].name, name))
            return p;
    return -1;
}

const char *pt_precision_names(void)
{
    return "fp32, tf32, bf16, fp16 or fp8";
}

int pt_precision_act_bytes(int p)
{
    return info(p) ? info(p)->act_bytes : 4;
}

int pt_precision_weight_bytes(int p)
{
    return info(p) ? info(p)->weight_bytes : 4;
}

int pt_precision_master_bytes(int p)
{
    return info(p) ? info(p)->master_bytes : 0;
}
