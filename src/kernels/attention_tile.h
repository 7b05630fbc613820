/* attention_tile.h — the fp32 softmax steps on one score tile, shared by the fp32 attention
 * (attention.c) and the bf16-operand one (attention16.c), which differ only in how they
 * multiply tiles.
 *
 * A tile is ZT_ATTN_BLOCK keys by ZT_ATTN_BLOCK queries, stored transposed (key, query):
 * row jj holds one key's scores against the block's queries, one query per lane, so every
 * per-query statistic is a plain vector operation.
 *
 * Which keys a query sees.  With the tile's queries at positions i0 + ii and its keys at
 * j0 + jj, and delta = i0 - j0, key jj is visible to query ii when
 *   j <= i                    (causal):          ii >= jj - delta
 *   i - j < window, window>0  (sliding window):  ii <  jj - delta + window
 * as transformers' sliding_window_causal_mask_function has it (kv_idx > q_idx - window):
 * a query sees itself and the window - 1 keys before it.  window 0 means no window; then
 * only the diagonal tile (delta 0) masks anything, exactly as before windows existed.
 *
 * Packed examples (padding-free, as flash-attention's varlen entries): a sequence may
 * hold several examples, each token with its position pos_i inside its own example
 * (transformers' position_ids, restarting at 0).  Query i then also needs
 *   j >= i - pos_i            (same example):    jj >= lo[ii] = i - pos_i - j0
 * so attention stays inside each example; without positions lo[ii] = -j0 (start 0),
 * which masks nothing. */
#ifndef ZT_ATTENTION_TILE_H
#define ZT_ATTENTION_TILE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../core/dtype.h"
#include "vmath.h"

#define ZT_ATTN_BLOCK 64

/* The first query (ii) of a tile that sees key jj, and one past the last that does. */
static inline int zt_attn_first_query(int jj, int delta) { return jj - delta; }
static inline int zt_attn_end_query(int jj, int delta, int window)
{
    return window > 0 ? jj - delta + window : ZT_ATTN_BLOCK;
}

/* Each of the nq queries' first visible key, i - pos_i (pos: the sequence's positions,
 * NULL: one example, start 0), into qs; returns the smallest, before which no key of
 * the block is visible. */
static inline int zt_attn_query_starts(int *restrict qs, const int *pos, int i0, int nq)
{
    int lo = i0;
    for (int ii = 0; ii < nq; ii++) {
        qs[ii] = pos ? i0 + ii - pos[i0 + ii] : 0;
        lo = qs[ii] < lo ? qs[ii] : lo;
    }
    return lo;
}

/* lo[ii] = qs[ii] - j0: the start of each query's example as a key index of the block at j0. */
static inline void zt_attn_key_lo(int *restrict lo, const int *restrict qs, int nq, int j0)
{
    for (int ii = 0; ii < nq; ii++) lo[ii] = qs[ii] - j0;
}

/* The first key block a query block starting at i0 must visit: keys before i0 - window + 1
 * are outside every one of its queries' windows. */
static inline int zt_attn_first_key_block(int i0, int window)
{
    return window > 0 && i0 - window + 1 > 0 ? (i0 - window + 1) / ZT_ATTN_BLOCK : 0;
}

/* The first key block the queries [i0, i0 + nq) of one sequence visit: the window's
 * first, or the block of the earliest start of their examples (qs, filled here; pos:
 * the sequence's positions, NULL: one example) when later.  Blocks before it hold
 * only masked keys, whose terms are exact zeros, so skipping them changes nothing. */
static inline int zt_attn_first_block_pos(int *restrict qs, const int *pos, int i0, int nq, int window)
{
    const int kb = zt_attn_first_key_block(i0, window);
    const int lo = zt_attn_query_starts(qs, pos, i0, nq) / ZT_ATTN_BLOCK;
    return lo > kb ? lo : kb;
}

/* Forward, one key block of the online softmax.  On entry st holds the raw scores q.k of
 * nk keys by nq queries (delta, window: which are visible, see above); m, l are each
 * query's running max and sum, o its unnormalised output (nq rows of hd); lo: each
 * query's first visible key of the block (packed examples, above).  On exit st
 * holds the probabilities exp(s - m_new) (0 where masked), l and m are updated, and o is
 * rescaled by exp(m_old - m_new), ready for o += P V.  Without a window key 0 of every
 * block is visible to all its queries, so the new max is finite, and exp(-inf) = 0
 * rescales the empty start state.  With one, a query may see no key of this block yet
 * (its window starts in a later block): its max stays -inf, and the exponentials are
 * taken relative to 0 instead, so they give 0, never exp(-inf + inf) = NaN. */
static inline void zt_attn_softmax_tile(float *restrict st, float *restrict o, int hd, int nq,
                                        int nk, int delta, int window, const int *restrict lo,
                                        float scale, float *restrict m, float *restrict l)
{
    float mnew[ZT_ATTN_BLOCK], mref[ZT_ATTN_BLOCK], corr[ZT_ATTN_BLOCK], lsum[ZT_ATTN_BLOCK];
    for (int ii = 0; ii < nq; ii++) mnew[ii] = m[ii];
    for (int jj = 0; jj < nk; jj++) {
        float *restrict srow = st + (size_t)jj * ZT_ATTN_BLOCK;
        const int first = zt_attn_first_query(jj, delta), end = zt_attn_end_query(jj, delta, window);
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            float s = srow[ii] * scale;
            s = ii < first || ii >= end || jj < lo[ii] ? -INFINITY : s;
            srow[ii] = s;
            mnew[ii] = s > mnew[ii] ? s : mnew[ii];
        }
    }
#pragma omp simd
    for (int ii = 0; ii < nq; ii++) {
        mref[ii] = mnew[ii] == -INFINITY ? 0.0f : mnew[ii];
        corr[ii] = zt_expf_fast(m[ii] - mref[ii]);
        m[ii] = mnew[ii];
        lsum[ii] = 0.0f;
    }
    for (int jj = 0; jj < nk; jj++) {
        float *restrict srow = st + (size_t)jj * ZT_ATTN_BLOCK;
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            const float p = zt_expf_fast(srow[ii] - mref[ii]);
            srow[ii] = p;
            lsum[ii] += p;
        }
    }
    for (int ii = 0; ii < nq; ii++) {
        l[ii] = l[ii] * corr[ii] + lsum[ii];
        float *restrict orow = o + (size_t)ii * hd;
        const float c = corr[ii];
#pragma omp simd
        for (int d = 0; d < hd; d++) orow[d] *= c;
    }
}

/* Backward, one tile.  On entry pt holds the scores q.k and dst holds dP = dout.v (both
 * (key, query)); L is each query's lse and D = dout.out.  On exit pt holds
 * p = exp(scale s - L) (0 where masked: delta, window as above) and dst holds scale * dS,
 * with dS = p (dP - D), the softmax Jacobian applied to dP. */
static inline void zt_attn_grad_tile(float *restrict pt, float *restrict dst, int nq, int nk,
                                     int delta, int window, const int *restrict lo, float scale,
                                     const float *restrict L, const float *restrict D)
{
    for (int jj = 0; jj < nk; jj++) {
        float *restrict prow = pt + (size_t)jj * ZT_ATTN_BLOCK;
        float *restrict dsrow = dst + (size_t)jj * ZT_ATTN_BLOCK;
        const int first = zt_attn_first_query(jj, delta), end = zt_attn_end_query(jj, delta, window);
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            const float e = zt_expf_fast(prow[ii] * scale - L[ii]);
            const float p = ii < first || ii >= end || jj < lo[ii] ? 0.0f : e;
            prow[ii] = p;
            dsrow[ii] = p * (dsrow[ii] - D[ii]) * scale;
        }
    }
}

/* The end of a forward task: rows out_i = o_i / l_i of nq queries (row stride ow, and
 * their bf16 rounding when out_bf16 is not NULL) and lse_i = m_i + log l_i (stride 1). */
static inline void zt_attn_write_rows(float *restrict out, uint16_t *restrict out_bf16, size_t ow,
                                      float *restrict lse, const float *restrict o, int hd, int nq,
                                      const float *restrict m, const float *restrict l)
{
    for (int ii = 0; ii < nq; ii++) {
        float *restrict orow = out + (size_t)ii * ow;
        const float *restrict acc = o + (size_t)ii * hd;
        const float inv_l = 1.0f / l[ii];
#pragma omp simd
        for (int d = 0; d < hd; d++) orow[d] = acc[d] * inv_l;
        if (out_bf16) {
            uint16_t *restrict o16 = out_bf16 + (size_t)ii * ow;
#pragma omp simd
            for (int d = 0; d < hd; d++) o16[d] = zt_f32_to_bf16(orow[d]);
        }
        lse[ii] = m[ii] + logf(l[ii]);
    }
}

/* The start of a backward task for kv head kh of one sequence: every gradient it writes
 * (dq of the group's query heads, dk, dv; rows of width w) is a sum, so clear them. */
static inline void zt_attn_clear_grads(float *dbase, size_t w, int T, int nh, int nkv, int kh,
                                       int hd)
{
    const int group = nh / nkv;
    for (int t = 0; t < T; t++) {
        float *row = dbase + (size_t)t * w;
        memset(row + (size_t)kh * group * hd, 0, sizeof(float) * (size_t)group * hd);
        memset(row + (size_t)(nh + kh) * hd, 0, sizeof(float) * (size_t)hd);
        memset(row + (size_t)(nh + nkv + kh) * hd, 0, sizeof(float) * (size_t)hd);
    }
}

#endif
