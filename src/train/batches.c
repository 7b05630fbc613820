/* batches.c — data order (see batches.h). */
#include "batches.h"

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

void zt_batcher_free(zt_batcher *b)
{
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

void zt_batcher_fill(zt_batcher *b, long k0, int B, int *inputs, int *targets)
{
    int T = b->T;
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
