/* mem.c — accounted, aligned allocation (see mem.h). */
#include "mem.h"

#include <stdlib.h>
#include <string.h>

static size_t current[ZT_MEM_NCAT], peak[ZT_MEM_NCAT];

void *zt_alloc(zt_mem_cat cat, size_t bytes)
{
    if (bytes == 0)
        return NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return NULL;
    memset(p, 0, rounded);
    /* Counters are updated from the main thread only (allocation never happens
     * inside parallel regions), so no atomics are needed. */
    current[cat] += bytes;
    if (current[cat] > peak[cat])
        peak[cat] = current[cat];
    return p;
}

void zt_free(zt_mem_cat cat, void *p, size_t bytes)
{
    if (!p)
        return;
    current[cat] -= bytes;
    free(p);
}

size_t zt_mem_current(zt_mem_cat cat) { return current[cat]; }
size_t zt_mem_peak(zt_mem_cat cat) { return peak[cat]; }

void zt_mem_reset_peak(void)
{
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        peak[c] = current[c];
}

size_t zt_mem_total_current(void)
{
    size_t s = 0;
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        s += current[c];
    return s;
}

const char *zt_mem_cat_name(zt_mem_cat cat)
{
    static const char *names[ZT_MEM_NCAT] = {"params", "grads", "optimizer", "gathered",
                                             "comm", "activations", "other"};
    return names[cat];
}
