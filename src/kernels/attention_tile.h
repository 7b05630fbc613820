/* attention_tile.h — the fp32 softmax steps on one score tile, shared by the fp32 attention
 * (attention.c) and the bf16-operand one (attention16.c), which differ only in how they
 * multiply tiles.
 *
 * A tile is ZT_ATTN_BLOCK keys by ZT_ATTN_BLOCK queries, stored transposed (key, query):
 * row jj holds one key's scores against the block's queries, one query per lane, so every
 * per-query statistic is a plain vector operation.  On the diagonal tile (diag) key jj is
 * visible to query ii only when jj <= ii. */
#ifndef ZT_ATTENTION_TILE_H
#define ZT_ATTENTION_TILE_H

#include <math.h>
#include <stddef.h>

#include "vmath.h"

#define ZT_ATTN_BLOCK 64

/* Forward, one key block of the online softmax.  On entry st holds the raw scores q.k of
 * nk keys by nq queries; m, l are each query's running max and sum, o its unnormalised
 * output (nq rows of hd).  On exit st holds the probabilities exp(s - m_new) (0 where
 * masked), l and m are updated, and o is rescaled by exp(m_old - m_new), ready for
 * o += P V.  Key 0 of every block is visible to all its queries, so the new max is
 * finite, and exp(-inf) = 0 rescales the empty start state. */
static inline void zt_attn_softmax_tile(float *restrict st, float *restrict o, int hd, int nq,
                                        int nk, int diag, float scale, float *restrict m,
                                        float *restrict l)
{
    float mnew[ZT_ATTN_BLOCK], corr[ZT_ATTN_BLOCK], lsum[ZT_ATTN_BLOCK];
    for (int ii = 0; ii < nq; ii++) mnew[ii] = m[ii];
    for (int jj = 0; jj < nk; jj++) {
        float *restrict srow = st + (size_t)jj * ZT_ATTN_BLOCK;
        const int first = diag ? jj : 0; /* first query that sees key jj */
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            float s = srow[ii] * scale;
            s = ii < first ? -INFINITY : s;
            srow[ii] = s;
            mnew[ii] = s > mnew[ii] ? s : mnew[ii];
        }
    }
#pragma omp simd
    for (int ii = 0; ii < nq; ii++) {
        corr[ii] = zt_expf_fast(m[ii] - mnew[ii]);
        m[ii] = mnew[ii];
        lsum[ii] = 0.0f;
    }
    for (int jj = 0; jj < nk; jj++) {
        float *restrict srow = st + (size_t)jj * ZT_ATTN_BLOCK;
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            const float p = zt_expf_fast(srow[ii] - m[ii]);
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
 * p = exp(scale s - L) (0 where masked) and dst holds scale * dS, with
 * dS = p (dP - D), the softmax Jacobian applied to dP. */
static inline void zt_attn_grad_tile(float *restrict pt, float *restrict dst, int nq, int nk,
                                     int diag, float scale, const float *restrict L,
                                     const float *restrict D)
{
    for (int jj = 0; jj < nk; jj++) {
        float *restrict prow = pt + (size_t)jj * ZT_ATTN_BLOCK;
        float *restrict dsrow = dst + (size_t)jj * ZT_ATTN_BLOCK;
        const int first = diag ? jj : 0;
#pragma omp simd
        for (int ii = 0; ii < nq; ii++) {
            const float e = zt_expf_fast(prow[ii] * scale - L[ii]);
            const float p = ii < first ? 0.0f : e;
            prow[ii] = p;
            dsrow[ii] = p * (dsrow[ii] - D[ii]) * scale;
        }
    }
}

#endif
