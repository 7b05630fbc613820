/* strmap.c — byte-string hash map (see strmap.h).  Memory is accounted under
 * ZT_MEM_OTHER through zt_alloc-backed growth. */
#include "strmap.h"

#include <string.h>

#include "../core/mem.h"

uint64_t zt_strmap_hash(const void *key, size_t len)
{
    /* FNV-1a, then a final avalanche (splitmix64's) so the low bits that pick a
     * slot depend on every byte. */
    const uint8_t *p = key;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

void zt_strmap_init(zt_strmap *m) { memset(m, 0, sizeof *m); }

/* Grow the accounted byte array *p from old_n to new_n bytes. */
static int grow(uint8_t **p, size_t old_n, size_t new_n)
{
    uint8_t *q = zt_alloc(ZT_MEM_OTHER, new_n);
    if (!q)
        return -1;
    if (*p) {
        memcpy(q, *p, old_n);
        zt_free(ZT_MEM_OTHER, *p, old_n);
    }
    *p = q;
    return 0;
}

void zt_strmap_free(zt_strmap *m)
{
    if (m->slots)
        zt_free(ZT_MEM_OTHER, m->slots, m->cap * sizeof *m->slots);
    if (m->hashes) {
        zt_free(ZT_MEM_OTHER, m->hashes, m->entries_cap * sizeof *m->hashes);
        zt_free(ZT_MEM_OTHER, m->key_off, m->entries_cap * sizeof *m->key_off);
        zt_free(ZT_MEM_OTHER, m->key_len, m->entries_cap * sizeof *m->key_len);
        zt_free(ZT_MEM_OTHER, m->values, m->entries_cap * sizeof *m->values);
    }
    if (m->arena)
        zt_free(ZT_MEM_OTHER, m->arena, m->arena_cap);
    memset(m, 0, sizeof *m);
}

void zt_strmap_clear(zt_strmap *m)
{
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->n = 0;
    m->arena_len = 0;
}

long zt_strmap_find(const zt_strmap *m, const void *key, size_t len)
{
    if (!m->n)
        return -1;
    uint64_t h = zt_strmap_hash(key, len);
    for (size_t s = h & (m->cap - 1);; s = (s + 1) & (m->cap - 1)) {
        uint32_t e = m->slots[s];
        if (!e)
            return -1;
        e--;
        if (m->hashes[e] == h && m->key_len[e] == len && memcmp(m->arena + m->key_off[e], key, len) == 0)
            return e;
    }
}

static void place(zt_strmap *m, uint32_t e)
{
    size_t s = m->hashes[e] & (m->cap - 1);
    while (m->slots[s])
        s = (s + 1) & (m->cap - 1);
    m->slots[s] = e + 1;
}

long zt_strmap_put(zt_strmap *m, const void *key, size_t len, int32_t value, int *added)
{
    long found = zt_strmap_find(m, key, len);
    *added = 0;
    if (found >= 0)
        return found;
    if (len > UINT32_MAX || m->n >= UINT32_MAX - 1)
        return -1;
    /* keep the load factor at most 1/2 */
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 64;
        uint32_t *slots = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *slots);
        if (!slots)
            return -1;
        if (m->slots)
            zt_free(ZT_MEM_OTHER, m->slots, m->cap * sizeof *m->slots);
        m->slots = slots, m->cap = ncap;
        for (uint32_t e = 0; e < m->n; e++)
            place(m, e);
    }
    if (m->n == m->entries_cap) {
        /* all four arrays are reallocated or none is, so sizes stay consistent */
        size_t ncap = m->entries_cap ? m->entries_cap * 2 : 32;
        uint64_t *h = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *h);
        size_t *off = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *off);
        uint32_t *kl = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *kl);
        int32_t *v = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *v);
        if (!h || !off || !kl || !v) {
            if (h) zt_free(ZT_MEM_OTHER, h, ncap * sizeof *h);
            if (off) zt_free(ZT_MEM_OTHER, off, ncap * sizeof *off);
            if (kl) zt_free(ZT_MEM_OTHER, kl, ncap * sizeof *kl);
            if (v) zt_free(ZT_MEM_OTHER, v, ncap * sizeof *v);
            return -1;
        }
        if (m->hashes) {
            memcpy(h, m->hashes, m->n * sizeof *h);
            memcpy(off, m->key_off, m->n * sizeof *off);
            memcpy(kl, m->key_len, m->n * sizeof *kl);
            memcpy(v, m->values, m->n * sizeof *v);
            zt_free(ZT_MEM_OTHER, m->hashes, m->entries_cap * sizeof *m->hashes);
            zt_free(ZT_MEM_OTHER, m->key_off, m->entries_cap * sizeof *m->key_off);
            zt_free(ZT_MEM_OTHER, m->key_len, m->entries_cap * sizeof *m->key_len);
            zt_free(ZT_MEM_OTHER, m->values, m->entries_cap * sizeof *m->values);
        }
        m->hashes = h, m->key_off = off, m->key_len = kl, m->values = v;
        m->entries_cap = ncap;
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t ncap = m->arena_cap ? m->arena_cap : 1024;
        while (ncap < m->arena_len + len + 1)
            ncap *= 2;
        if (grow(&m->arena, m->arena_cap, ncap))
            return -1;
        m->arena_cap = ncap;
    }
    uint32_t e = (uint32_t)m->n++;
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    m->hashes[e] = zt_strmap_hash(key, len);
    m->key_off[e] = m->arena_len;
    m->key_len[e] = (uint32_t)len;
    m->values[e] = value;
    m->arena_len += len + 1;
    place(m, e);
    *added = 1;
    return e;
}
