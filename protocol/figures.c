/* The headline figures' definitions (see figures.h). */
#include "protocol/figures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pt_fig_iter_ms(const double *ms, int64_t n, int *used)
{
    if (used)
        *used = 0;
    if (!ms || n <= 0)
        return 0;
    int64_t lo = n >= 2 ? 1 : 0;
    if (n - lo > PT_FIG_WINDOW_STEPS)
        lo = n - PT_FIG_WINDOW_STEPS;
    int k = (int)(n - lo);
    double v[PT_FIG_WINDOW_STEPS];
    memcpy(v, ms + lo, sizeof *v * (size_t)k);
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    if (used)
        *used = k;
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

const char *pt_fig_iter_label(int used, char *buf, size_t cap)
{
    if (used <= 0)
        snprintf(buf, cap, "no complete step yet");
    else if (used >= PT_FIG_WINDOW_STEPS)
        snprintf(buf, cap, "median of last %d steps", used);
    else
        snprintf(buf, cap, "median of %d step%s", used, used == 1 ? "" : "s");
    return buf;
}
