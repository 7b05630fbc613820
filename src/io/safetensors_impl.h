/* safetensors_impl.h — the accounted-memory helpers that safetensors.c (one
 * file) and weights_dir.c (a directory of them) share; private to src/io. */
#ifndef ZT_SAFETENSORS_IMPL_H
#define ZT_SAFETENSORS_IMPL_H

#include <string.h>

#include "../core/input.h"
#include "../core/mem.h"

/* Allocation helpers: zt_alloc(0) is NULL by contract, which must not read as
 * out-of-memory for an empty file, so callers check `bytes && !p`. */
static inline void *xalloc(size_t bytes) { return zt_alloc(ZT_MEM_OTHER, bytes); }
static inline void xfree(void *p, size_t bytes) { zt_free(ZT_MEM_OTHER, p, bytes); }

static inline char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xalloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}
static inline void xstrfree(char *s)
{
    if (s)
        xfree(s, strlen(s) + 1);
}

/* Open-time errno values: the path the user gave is wrong (exit 2) or the
 * machine failed (exit 1); one list for every reader (core/input.c). */
static inline int errno_code(int e) { return zt_errno_code(e); }

static inline int cmp_cstr_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#endif
