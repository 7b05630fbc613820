/* bpe.c — BPE merges: the pair table and the merge loop (see bpe.h). */
#include "bpe.h"

#include <string.h>

#include "../core/mem.h"

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int zt_merges_init(zt_merges *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    size_t cap = 64;
    while (cap < expected * 2 + 1)
        cap *= 2;
    m->keys = zt_alloc(ZT_MEM_OTHER, cap * sizeof *m->keys);
    m->rank = zt_alloc(ZT_MEM_OTHER, cap * sizeof *m->rank);
    m->merged = zt_alloc(ZT_MEM_OTHER, cap * sizeof *m->merged);
    m->cap = cap;
    if (!m->keys || !m->rank || !m->merged) {
        zt_merges_free(m);
        return 1;
    }
    return 0;
}

void zt_merges_free(zt_merges *m)
{
    if (m->keys)
        zt_free(ZT_MEM_OTHER, m->keys, m->cap * sizeof *m->keys);
    if (m->rank)
        zt_free(ZT_MEM_OTHER, m->rank, m->cap * sizeof *m->rank);
    if (m->merged)
        zt_free(ZT_MEM_OTHER, m->merged, m->cap * sizeof *m->merged);
    memset(m, 0, sizeof *m);
}

static size_t slot_of(const zt_merges *m, uint64_t key)
{
    size_t s = mix(key) & (m->cap - 1);
    while (m->keys[s] && m->keys[s] != key)
        s = (s + 1) & (m->cap - 1);
    return s;
}

int zt_merges_add(zt_merges *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    if ((m->n + 1) * 2 > m->cap) {
        zt_merges big;
        if (zt_merges_init(&big, m->cap))
            return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t s = slot_of(&big, m->keys[i]);
                big.keys[s] = m->keys[i], big.rank[s] = m->rank[i], big.merged[s] = m->merged[i];
            }
        big.n = m->n;
        zt_merges_free(m);
        *m = big;
    }
    uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    size_t s = slot_of(m, key);
    if (m->keys[s])
        return 1;
    m->keys[s] = key, m->rank[s] = rank, m->merged[s] = merged;
    m->n++;
    return 0;
}

int32_t zt_merges_find(const zt_merges *m, int32_t left, int32_t right, int32_t *merged)
{
    if (!m->n || left < 0 || right < 0)
        return -1;
    uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    size_t s = slot_of(m, key);
    if (!m->keys[s])
        return -1;
    *merged = m->merged[s];
    return m->rank[s];
}

/* ---- the merge loop --------------------------------------------------------- */

typedef struct zt_bpe_cand {
    int32_t rank, pos; /* pair (pos, next[pos]) merges at this rank */
} zt_bpe_cand;

static int cand_less(zt_bpe_cand a, zt_bpe_cand b)
{
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static int heap_push(zt_bpe_work *w, zt_bpe_cand c)
{
    if (w->heap_n == w->heap_cap) {
        size_t ncap = w->heap_cap ? w->heap_cap * 2 : 64;
        zt_bpe_cand *h = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *h);
        if (!h)
            return -1;
        if (w->heap) {
            memcpy(h, w->heap, w->heap_n * sizeof *h);
            zt_free(ZT_MEM_OTHER, w->heap, w->heap_cap * sizeof *h);
        }
        w->heap = h, w->heap_cap = ncap;
    }
    size_t i = w->heap_n++;
    while (i > 0 && cand_less(c, w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
    return 0;
}

static zt_bpe_cand heap_pop(zt_bpe_work *w)
{
    zt_bpe_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        zt_bpe_cand best = last;
        if (l < w->heap_n && cand_less(w->heap[l], best))
            m = l, best = w->heap[l];
        if (r < w->heap_n && cand_less(w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (w->heap_n)
        w->heap[i] = last;
    return top;
}

void zt_bpe_work_free(zt_bpe_work *w)
{
    if (w->sym) {
        zt_free(ZT_MEM_OTHER, w->sym, w->sym_cap * sizeof(int32_t));
        zt_free(ZT_MEM_OTHER, w->prev, w->sym_cap * sizeof(int32_t));
        zt_free(ZT_MEM_OTHER, w->next, w->sym_cap * sizeof(int32_t));
    }
    if (w->heap)
        zt_free(ZT_MEM_OTHER, w->heap, w->heap_cap * sizeof *w->heap);
    memset(w, 0, sizeof *w);
}

static int push_pair(const zt_merges *m, zt_bpe_work *w, int32_t pos)
{
    if (pos < 0 || w->next[pos] < 0)
        return 0;
    int32_t merged, nx = w->next[pos];
    int32_t rank = zt_merges_find(m, w->sym[pos], w->sym[nx], &merged);
    return rank < 0 ? 0 : heap_push(w, (zt_bpe_cand){rank, pos});
}

long zt_bpe_merge(const zt_merges *m, zt_bpe_work *w, int32_t *ids, size_t n)
{
    if (n < 2)
        return (long)n;
    if (n > INT32_MAX)
        return -1;
    if (n > w->sym_cap) {
        size_t ncap = w->sym_cap ? w->sym_cap : 64;
        while (ncap < n)
            ncap *= 2;
        int32_t *s = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *s), *p = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *p),
                *x = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *x);
        if (!s || !p || !x) {
            zt_free(ZT_MEM_OTHER, s, ncap * sizeof *s);
            zt_free(ZT_MEM_OTHER, p, ncap * sizeof *p);
            zt_free(ZT_MEM_OTHER, x, ncap * sizeof *x);
            return -1;
        }
        if (w->sym) {
            zt_free(ZT_MEM_OTHER, w->sym, w->sym_cap * sizeof *s);
            zt_free(ZT_MEM_OTHER, w->prev, w->sym_cap * sizeof *s);
            zt_free(ZT_MEM_OTHER, w->next, w->sym_cap * sizeof *s);
        }
        w->sym = s, w->prev = p, w->next = x, w->sym_cap = ncap;
    }
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = ids[i];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (push_pair(m, w, (int32_t)i))
            return -1;
    /* A removed symbol gets sym = -1, so a stale candidate at its position, or
     * one whose pair changed (its rank differs now), is skipped. */
    while (w->heap_n) {
        zt_bpe_cand c = heap_pop(w);
        int32_t pos = c.pos, nx = w->next[pos], merged;
        if (w->sym[pos] < 0 || nx < 0 || zt_merges_find(m, w->sym[pos], w->sym[nx], &merged) != c.rank)
            continue;
        w->sym[pos] = merged;
        w->sym[nx] = -1;
        w->next[pos] = w->next[nx];
        if (w->next[nx] >= 0)
            w->prev[w->next[nx]] = pos;
        if (push_pair(m, w, w->prev[pos]) || push_pair(m, w, pos))
            return -1;
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = w->next[i])
        ids[k++] = w->sym[i];
    return (long)k;
}
