/* strmap.h — a hash map from byte strings to int32 values (open addressing,
 * linear probing, keys copied into one arena).  Used for the vocabulary, the
 * per-thread word cache of the encoder and the trainer's word counts. */
#ifndef ZT_STRMAP_H
#define ZT_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct zt_strmap {
    uint32_t *slots;     /* entry index + 1, or 0 for empty; capacity a power of 2 */
    size_t cap;
    uint64_t *hashes;    /* per entry */
    size_t *key_off;     /* per entry: offset of its key in arena */
    uint32_t *key_len;
    int32_t *values;
    size_t n, entries_cap;
    uint8_t *arena;
    size_t arena_len, arena_cap;
} zt_strmap;

uint64_t zt_strmap_hash(const void *key, size_t len);

void zt_strmap_init(zt_strmap *m);
void zt_strmap_free(zt_strmap *m);
void zt_strmap_clear(zt_strmap *m);

/* Index of the entry for key, or -1. */
long zt_strmap_find(const zt_strmap *m, const void *key, size_t len);
/* Insert key with value (or find it): returns its entry index, -1 on out of
 * memory; *added says whether it was new. */
long zt_strmap_put(zt_strmap *m, const void *key, size_t len, int32_t value, int *added);

static inline const uint8_t *zt_strmap_key(const zt_strmap *m, long e) { return m->arena + m->key_off[e]; }

#endif
