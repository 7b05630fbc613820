/* mem.h — accounted allocation.
 *
 * Every buffer ztrain allocates belongs to one category, so the memory report
 * (per rank: params, grads, optimizer state, gathered params, communication
 * buffers, activations) is a sum of what was really allocated, not a guess.
 * Allocations are 64-byte aligned (one cache line, one AVX-512 vector) and
 * zero-filled. */
#ifndef ZT_MEM_H
#define ZT_MEM_H

#include <stddef.h>

typedef enum zt_mem_cat {
    ZT_MEM_PARAMS,    /* master parameters (owned shard) */
    ZT_MEM_GRADS,     /* gradient accumulators */
    ZT_MEM_OPTIM,     /* optimizer state (m, v) */
    ZT_MEM_GATHERED,  /* compute-dtype gathered parameters */
    ZT_MEM_COMM,      /* communication staging buffers */
    ZT_MEM_ACTIV,     /* activations and their gradients */
    ZT_MEM_OTHER,     /* everything else: scratch, data, I/O */
    ZT_MEM_NCAT
} zt_mem_cat;

void *zt_alloc(zt_mem_cat cat, size_t bytes); /* NULL on failure; bytes 0 gives NULL */
void zt_free(zt_mem_cat cat, void *p, size_t bytes); /* bytes must match zt_alloc's */
/* Count bytes that another allocator handed out (a GPU's device memory) in cat, as
 * zt_alloc counts its own, and uncount them when they are freed; the report then
 * sums what the rank holds in each role on whichever device holds it. */
void zt_mem_account(zt_mem_cat cat, size_t bytes);
void zt_mem_unaccount(zt_mem_cat cat, size_t bytes);
size_t zt_mem_current(zt_mem_cat cat);
size_t zt_mem_peak(zt_mem_cat cat);
/* Start measuring peaks from here: each category's peak becomes its current bytes. */
void zt_mem_reset_peak(void);
const char *zt_mem_cat_name(zt_mem_cat cat);
/* Of what is counted above, the bytes that a device run keeps in host memory on
 * purpose (offloaded state, docs/zero.md): counted by the code that puts them
 * there, beside (not instead of) its accounted allocation, so a report can split
 * each category into device bytes (current - host) and host bytes. */
void zt_mem_host_account(zt_mem_cat cat, size_t bytes);
void zt_mem_host_unaccount(zt_mem_cat cat, size_t bytes);
size_t zt_mem_host_current(zt_mem_cat cat);

#endif
