/* batches.c — data order (see batches.h). */
#include "batches.h"

#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "../core/rng.h"
#include "../kernels/backend.h"

int zt_batcher_init(zt_batcher *b, const zt_tokens *tokens, int T, int shuffle, uint64_t seed,
                    const char *data_path, zt_err *err)
{
    memset(b, 0, sizeof *b);
    b->tokens = tokens;
    b->T = T;
    b->shuffle = shuffle;
    b->seed = seed;
    b->perm_epoch = -1;
    if (tokens->n < (size_t)T + 1)
        return zt_fail(err, ZT_EINPUT,
                       "%s: %zu tokens is too short for --block_size %d (need at least %d)",
                       data_path, tokens->n, T, T + 1);
    b->nwin = (tokens->n - 1) / (size_t)T;
    if (shuffle) {
        b->perm = zt_alloc(ZT_MEM_OTHER, b->nwin * sizeof *b->perm);
        if (!b->perm)
            return zt_fail(err, ZT_EFAIL, "out of memory for the shuffle permutation");
    }
    return ZT_OK;
}

int zt_batcher_set_padding_free(zt_batcher *b, int32_t eos, int B, zt_err *err)
{
    b->doc_eos = eos;
    b->pos_n = (size_t)B * b->T;
    if (!(b->pos = zt_alloc(ZT_MEM_OTHER, b->pos_n * sizeof *b->pos)))
        return zt_fail(err, ZT_EFAIL, "out of memory for the padding-free positions");
    return ZT_OK;
}

static const int *g_sort_len; /* qsort has no context argument */

/* Longer first; equal lengths in stream order (TRL's sort is stable). */
static int longer_first(const void *x, const void *y)
{
    size_t i = *(const size_t *)x, j = *(const size_t *)y;
    int li = g_sort_len[i], lj = g_sort_len[j];
    return li != lj ? (li < lj ? 1 : -1) : (i > j) - (i < j);
}

/* Documents: each ends at an eos, the tail after the last one is one more; one
 * longer than T is truncated to T, or with split cut into pieces of T (the last
 * shorter), each a document of its own.  With start NULL, only how many. */
static size_t walk_docs(const zt_batcher *b, int split, size_t *start, int *len)
{
    const size_t n = b->tokens->n, T = (size_t)b->T;
    size_t nd = 0;
    for (size_t i = 0, s = 0; i < n; i++) {
        if (b->tokens->ids[i] != b->doc_eos && i + 1 < n)
            continue;
        for (size_t at = s; at <= i && (at == s || split); at += T, nd++)
            if (start) {
                start[nd] = at;
                len[nd] = i + 1 - at < T ? (int)(i + 1 - at) : (int)T;
            }
        s = i + 1;
    }
    return nd;
}

static int find_docs(zt_batcher *b, int split, zt_err *err)
{
    const size_t nd = walk_docs(b, split, NULL, NULL);
    b->doc_start = zt_alloc(ZT_MEM_OTHER, nd * sizeof *b->doc_start);
    b->doc_len = zt_alloc(ZT_MEM_OTHER, nd * sizeof *b->doc_len);
    b->bin_docs = zt_alloc(ZT_MEM_OTHER, nd * sizeof *b->bin_docs);
    b->bin_off = zt_alloc(ZT_MEM_OTHER, (nd + 1) * sizeof *b->bin_off);
    b->ndocs = nd;
    if (!b->doc_start || !b->doc_len || !b->bin_docs || !b->bin_off)
        return zt_fail(err, ZT_EFAIL, "out of memory for --packing's %zu documents", nd);
    walk_docs(b, split, b->doc_start, b->doc_len);
    return ZT_OK;
}

/* Best-fit decreasing, documents taken in order[].  The open bins with r free
 * tokens (0 < r < T) are a queue, first in first out, from qhead[r] to qtail[r]
 * through qnext[]; bit r of bits says that queue is not empty, so the best fit for a
 * document of L tokens is the first set bit at r >= L (none: a new bin).  Bin i's
 * documents are chained through next[] from head[i] to tail[i], used[i] tokens;
 * out: bin_off, bin_docs, nwin. */
static int best_fit_decreasing(zt_batcher *b, size_t *order, zt_err *err)
{
    const size_t nd = b->ndocs, T = (size_t)b->T, nwords = T / 64 + 1;
    size_t bytes = nd * 5 * sizeof(size_t) + 2 * T * sizeof(size_t) + nwords * 8;
    size_t *mem = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!mem)
        return zt_fail(err, ZT_EFAIL, "out of memory for --packing");
    size_t *head = mem, *tail = head + nd, *next = tail + nd, *qnext = next + nd, *used = qnext + nd;
    size_t *qhead = used + nd, *qtail = qhead + T;
    uint64_t *bits = (uint64_t *)(qtail + T);
    memset(bits, 0, nwords * 8);
    size_t nb = 0;
    for (size_t k = 0; k < nd; k++) {
        const size_t d = order[k], L = (size_t)b->doc_len[d];
        size_t r = L, bin;
        while (r < T && !(bits[r / 64] >> (r % 64) & 1)) /* the next set bit at or past L */
            r = bits[r / 64] >> (r % 64) ? r + 1 : (r / 64 + 1) * 64;
        if (r < T) { /* the oldest bin with r free */
            bin = qhead[r];
            if ((qhead[r] = qnext[bin]) == (size_t)-1)
                bits[r / 64] &= ~(1ull << (r % 64));
            next[tail[bin]] = d;
        } else {
            bin = nb++;
            head[bin] = d;
            used[bin] = 0;
        }
        tail[bin] = d;
        next[d] = (size_t)-1;
        if ((r = T - (used[bin] += L)) > 0) { /* at the back of room[r] */
            qnext[bin] = (size_t)-1;
            if (bits[r / 64] >> (r % 64) & 1)
                qnext[qtail[r]] = bin;
            else
                qhead[r] = bin, bits[r / 64] |= 1ull << (r % 64);
            qtail[r] = bin;
        }
    }
    size_t at = 0;
    for (size_t i = 0; i < nb; i++) {
        b->bin_off[i] = at;
        for (size_t d = head[i]; d != (size_t)-1; d = next[d])
            b->bin_docs[at++] = d;
    }
    b->bin_off[nb] = at;
    b->nwin = nb;
    zt_free(ZT_MEM_OTHER, mem, bytes);
    return ZT_OK;
}

int zt_batcher_set_packing(zt_batcher *b, int32_t eos, int B, int split, zt_err *err)
{
    int rc = zt_batcher_set_padding_free(b, eos, B, err);
    if (rc == ZT_OK)
        rc = find_docs(b, split, err);
    size_t *order = rc ? NULL : zt_alloc(ZT_MEM_OTHER, b->ndocs * sizeof *order);
    if (rc == ZT_OK && !order)
        rc = zt_fail(err, ZT_EFAIL, "out of memory for --packing");
    if (rc)
        return rc;
    for (size_t d = 0; d < b->ndocs; d++)
        order[d] = d;
    g_sort_len = b->doc_len;
    qsort(order, b->ndocs, sizeof *order, longer_first);
    zt_free(ZT_MEM_OTHER, b->perm, b->shuffle ? b->nwin * sizeof *b->perm : 0);
    b->perm = NULL;
    rc = best_fit_decreasing(b, order, err);
    zt_free(ZT_MEM_OTHER, order, b->ndocs * sizeof *order);
    if (rc == ZT_OK && b->shuffle && !(b->perm = zt_alloc(ZT_MEM_OTHER, b->nwin * sizeof *b->perm)))
        rc = zt_fail(err, ZT_EFAIL, "out of memory for the shuffle permutation");
    b->perm_epoch = -1;
    return rc;
}

void zt_batcher_free(zt_batcher *b)
{
    zt_free(ZT_MEM_OTHER, b->doc_start, b->ndocs * sizeof *b->doc_start); /* each may be NULL: no-op */
    zt_free(ZT_MEM_OTHER, b->doc_len, b->ndocs * sizeof *b->doc_len);
    zt_free(ZT_MEM_OTHER, b->bin_docs, b->ndocs * sizeof *b->bin_docs);
    zt_free(ZT_MEM_OTHER, b->bin_off, (b->ndocs + 1) * sizeof *b->bin_off);
    zt_free(ZT_MEM_OTHER, b->pos, b->pos ? b->pos_n * sizeof *b->pos : 0);
    zt_free(ZT_MEM_OTHER, b->perm, b->shuffle ? b->nwin * sizeof *b->perm : 0);
    memset(b, 0, sizeof *b);
}

static void make_perm(zt_batcher *b, long epoch)
{
    uint64_t s = b->seed * 0x100000001b3ull + (uint64_t)epoch + 1;
    for (size_t i = 0; i < b->nwin; i++)
        b->perm[i] = (uint32_t)i;
    for (size_t i = b->nwin; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(zt_rand_next(&s) % i);
        uint32_t t = b->perm[i - 1];
        b->perm[i - 1] = b->perm[j];
        b->perm[j] = t;
    }
    b->perm_epoch = epoch;
}

/* The window sample k reads. */
static size_t window_of(zt_batcher *b, long k)
{
    long epoch = k / (long)b->nwin;
    size_t w = (size_t)(k % (long)b->nwin);
    if (b->shuffle) {
        if (epoch != b->perm_epoch)
            make_perm(b, epoch);
        w = b->perm[w];
    }
    return w;
}

/* Window w's target t counts: not masked out (a prompt token), and with padding-free
 * windows not the step from a document's last token (its eos) into the next. */
static int target_counts(const zt_batcher *b, size_t w, int t)
{
    const size_t at = w * (size_t)b->T + (size_t)t;
    if (b->tokens->loss_mask && !b->tokens->loss_mask[at + 1])
        return 0;
    return !b->pos || b->tokens->ids[at] != b->doc_eos;
}

/* Packed window w's row: its documents from position 0, then padding; with in
 * NULL, only how many targets count.  The count either way.  Target j of a document counts unless it is the
 * document's last token or a masked-out (prompt) token. */
static long fill_packed(const zt_batcher *b, size_t w, int *in, int *tg, int *pos)
{
    const int32_t *ids = b->tokens->ids;
    const uint8_t *mask = b->tokens->loss_mask;
    long count = 0;
    int t = 0;
    for (size_t k = b->bin_off[w]; k < b->bin_off[w + 1]; k++) {
        const size_t s = b->doc_start[b->bin_docs[k]];
        const int L = b->doc_len[b->bin_docs[k]];
        for (int j = 0; j < L; j++, t++) {
            int counts = j + 1 < L && (!mask || mask[s + j + 1]);
            count += counts;
            if (in) {
                in[t] = ids[s + j];
                tg[t] = counts ? ids[s + j + 1] : ZT_IGNORE_INDEX;
                pos[t] = j;
            }
        }
    }
    for (; in && t < b->T; t++)
        in[t] = b->doc_eos, tg[t] = ZT_IGNORE_INDEX, pos[t] = 0;
    return count;
}

void zt_batcher_fill(zt_batcher *b, long k0, int B, int *inputs, int *targets)
{
    int T = b->T;
    if (b->bin_off) {
        for (int i = 0; i < B; i++)
            fill_packed(b, window_of(b, k0 + i), inputs + i * T, targets + i * T, b->pos + i * T);
        return;
    }
    const uint8_t *mask = b->tokens->loss_mask;
    for (int i = 0; i < B; i++) {
        size_t w = window_of(b, k0 + i);
        const int32_t *src = b->tokens->ids + w * (size_t)T;
        for (int t = 0; t < T; t++) {
            inputs[i * T + t] = src[t];
            targets[i * T + t] = src[t + 1];
        }
        if (mask || b->pos)
            for (int t = 0; t < T; t++)
                if (!target_counts(b, w, t))
                    targets[i * T + t] = ZT_IGNORE_INDEX;
        if (b->pos) /* a document starts at the window's start and after each eos */
            for (int t = 0; t < T; t++)
                b->pos[i * T + t] = t == 0 || src[t - 1] == b->doc_eos ? 0 : b->pos[i * T + t - 1] + 1;
    }
}

long zt_batcher_count_targets(zt_batcher *b, long k0, long n)
{
    if (!b->tokens->loss_mask && !b->pos)
        return n * b->T;
    long count = 0;
    for (long i = 0; i < n; i++) {
        const size_t w = window_of(b, k0 + i);
        if (b->bin_off) {
            count += fill_packed(b, w, NULL, NULL, NULL);
            continue;
        }
        for (int t = 0; t < b->T; t++)
            count += target_counts(b, w, t);
    }
    return count;
}

long zt_sample_index(long step, int micro, int rank, int B, int A, int W)
{
    long G = (long)B * A * W;
    return step * G + ((long)micro * W + rank) * B;
}
