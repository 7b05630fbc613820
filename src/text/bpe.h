/* bpe.h — the BPE merge step shared by both tokenizer families.
 *
 * A word is a sequence of symbol ids; merges (left id, right id) -> (rank,
 * merged id) are applied lowest rank first, and among equal ranks leftmost
 * first, as `tokenizers` does: a min-heap of candidate pairs over a linked list
 * of symbols, O(n log n) for a word of n symbols.  Candidates made stale by an
 * earlier merge are recognised when popped and skipped. */
#ifndef ZT_BPE_H
#define ZT_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct zt_merges {
    uint64_t *keys;   /* (left << 32 | right) + 1, 0 = empty slot */
    int32_t *rank, *merged;
    size_t cap;       /* power of 2 */
    size_t n;
} zt_merges;

int zt_merges_init(zt_merges *m, size_t expected);  /* ZT_OK or ZT_EFAIL */
void zt_merges_free(zt_merges *m);
/* Add a merge; returns 0, 1 if the pair was already present (kept at its first rank), -1 on memory. */
int zt_merges_add(zt_merges *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
/* rank of (left, right), -1 if no such merge; *merged gets the result id. */
int32_t zt_merges_find(const zt_merges *m, int32_t left, int32_t right, int32_t *merged);

/* Per-thread working memory of the merge loop. */
typedef struct zt_bpe_work {
    int32_t *sym, *prev, *next;
    size_t sym_cap;
    struct zt_bpe_cand *heap;
    size_t heap_n, heap_cap;
} zt_bpe_work;

void zt_bpe_work_free(zt_bpe_work *w);

/* Merge the word ids[0..n) in place; returns its new length (<= n), or -1 when
 * memory runs out. */
long zt_bpe_merge(const zt_merges *m, zt_bpe_work *w, int32_t *ids, size_t n);

#endif
