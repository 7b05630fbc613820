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
    zt_mem_account(cat, bytes);
    return p;
}

/* Atomic: the tokenizer's threads allocate their own output and caches inside
 * parallel regions.  The peak is raised by compare-and-swap. */
void zt_mem_account(zt_mem_cat cat, size_t bytes)
{
    size_t now = __atomic_add_fetch(&current[cat], bytes, __ATOMIC_RELAXED);
    size_t old = __atomic_load_n(&peak[cat], __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(&peak[cat], &old, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void zt_mem_unaccount(zt_mem_cat cat, size_t bytes) { __atomic_sub_fetch(&current[cat], bytes, __ATOMIC_RELAXED); }

void zt_free(zt_mem_cat cat, void *p, size_t bytes)
{
    if (!p)
        return;
    zt_mem_unaccount(cat, bytes);
    free(p);
}

size_t zt_mem_current(zt_mem_cat cat) { return current[cat]; }
size_t zt_mem_peak(zt_mem_cat cat) { return peak[cat]; }

void zt_mem_reset_peak(void)
{
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        peak[c] = current[c];
}

const char *zt_mem_cat_name(zt_mem_cat cat)
{
    static const char *names[ZT_MEM_NCAT] = {"params", "grads", "optimizer", "gathered",
                                             "comm", "activations", "other"};
    return names[cat];
}

static size_t host_current[ZT_MEM_NCAT];

void zt_mem_host_account(zt_mem_cat cat, size_t bytes) { __atomic_add_fetch(&host_current[cat], bytes, __ATOMIC_RELAXED); }
void zt_mem_host_unaccount(zt_mem_cat cat, size_t bytes)
{
    __atomic_sub_fetch(&host_current[cat], bytes, __ATOMIC_RELAXED);
}
size_t zt_mem_host_current(zt_mem_cat cat) { return host_current[cat]; }
