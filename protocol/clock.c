/* The one clock helper (see clock.h). */
#include "protocol/clock.h"

#define NS_PER_S 1000000000LL

int64_t pt_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

double pt_clock_s(void)
{
    return pt_clock_of_s(CLOCK_MONOTONIC);
}

double pt_clock_of_s(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
