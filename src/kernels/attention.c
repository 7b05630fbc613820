/* attention.c — causal grouped-query attention, fp32, in tiles, without a T x T matrix.
 *
 * Shapes: qkv (B, T, W) with W = (nh + 2*nkv)*hd laid out [q heads | k heads | v heads];
 * out (B, T, nh*hd); lse (B, nh, T).  Query head h reads kv head h / (nh/nkv).
 * For one (b, h) and query i, with keys j <= i (and i - j < window when a sliding window
 * is set, attention_tile.h) and scale = 1/sqrt(hd):
 *   s_ij = scale * q_i . k_j,   lse_i = log sum_j exp(s_ij),   p_ij = exp(s_ij - lse_i)
 *   out_i = sum_j p_ij v_j
 * This equals softmax(q k^T / sqrt(hd) + causal mask) v, the HF eager path (with Mistral's
 * sliding-window mask when window > 0).  Key blocks wholly outside every window of a
 * query block are skipped.
 *
 * Both passes walk (query block) x (key block) tiles of ATTN_BLOCK x ATTN_BLOCK, keeping
 * only tiles in per-thread scratch; every product of two tiles is one call of mm_acc,
 * a small GEMM whose vector lanes run along contiguous rows and whose accumulators stay
 * in registers.  Score tiles are computed transposed, S^T = K_blk Q_blk^T (one query
 * per lane), so the softmax statistics of a query (running max, sum, lse, D) are plain
 * vector operations across lanes, with no horizontal reductions.  On the diagonal
 * tile, mm_acc skips the products the causal mask makes zero.
 *
 * Forward, per (b, h, query block), is an online softmax (flash-attention style): key
 * blocks are visited once, keeping a running max m and sum l per query; when the max
 * grows, l and the output accumulator are rescaled by exp(m_old - m_new); O += P V_blk.
 *
 * Backward, from dout, recomputing p = exp(s - lse) from the saved lse (the scores are
 * summed exactly as the forward sums them):
 *   D_i = dout_i . out_i  (= sum_j p_ij dp_ij),   dp_ij = dout_i . v_j
 *   ds_ij = p_ij (dp_ij - D_i)           (softmax Jacobian)
 *   dv_j += sum_i p_ij dout_i,  dk_j += scale sum_i ds_ij q_i,  dq_i += scale sum_j ds_ij k_j
 * dk and dv sum over the query heads of a group, so the backward is parallel over
 * (b, kv head): each task owns its dk, dv rows and the dq rows of its group's query
 * heads and accumulates them in place in dqkv, per query head and query block (whose
 * Q^T, dO^T panels are built once), over the key blocks up to the diagonal.
 *
 * Nothing races and every sum has a fixed order that does not depend on the thread
 * count, so results are bitwise reproducible for a given build.  exp is zt_expf_fast
 * (vmath.h): here it sits in the compute-bound inner loops. */
#include "kernels.h"
#include "attention_tile.h"
#include "vmath.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Largest head dimension the scratch holds (Llama uses 64 or 128). */
#define ATTN_MAX_HD 256
/* Queries and keys per tile: a tile of floats is 16 KB, and the GEMM lanes are full. */
#define ATTN_BLOCK ZT_ATTN_BLOCK
#define ATTN_TILE (ATTN_BLOCK * ATTN_BLOCK)

/* Per-thread scratch: two (hd x block) panels and two (block x block) tiles, 160 KB at
 * the largest hd — too much for an OpenMP worker's stack, and the kernels do not
 * allocate, so it is static, one copy per thread. */
static _Thread_local float attn_scratch[2 * ATTN_MAX_HD * ATTN_BLOCK + 2 * ATTN_TILE];

/* Register tile of mm_acc: MM_ROWS rows by MM_LANES columns of C, 16 AVX-512 registers. */
#define MM_ROWS 8
#define MM_LANES 32

/* C[0..R)[0..JV) += A B over k < K, for constant R <= MM_ROWS and JV <= MM_LANES (the
 * function is always inlined with literal R, JV: the loops unroll completely and acc
 * lives in registers for the whole k loop).  Layouts as in mm_acc. */
static inline __attribute__((always_inline)) void mm_tile(float *restrict C, size_t ldc,
                                                          const float *restrict A, size_t ars,
                                                          size_t acs, const float *restrict B,
                                                          size_t ldb, int K, const int R,
                                                          const int JV) {
    float acc[MM_ROWS][MM_LANES];
    for (int r = 0; r < R; r++)
#pragma omp simd
        for (int j = 0; j < JV; j++) acc[r][j] = C[(size_t)r * ldc + j];
    for (int k = 0; k < K; k++) {
        const float *restrict b = B + (size_t)k * ldb;
        const float *ak = A + (size_t)k * acs;
        for (int r = 0; r < R; r++) {
            const float x = ak[(size_t)r * ars];
#pragma omp simd
            for (int j = 0; j < JV; j++) acc[r][j] = zt_fmaf(x, b[j], acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++)
#pragma omp simd
        for (int j = 0; j < JV; j++) C[(size_t)r * ldc + j] = acc[r][j];
}

/* The zero pattern of a product on a diagonal (causal) tile, which lets mm_acc skip
 * work; the skipped terms are exact zeros, so results are the same as MM_DENSE's. */
typedef enum {
    MM_DENSE,  /* no structure */
    MM_J_GE_I, /* only C(i, j) with j >= i is wanted (the others are masked later) */
    MM_K_LE_I, /* A(i, k) = 0 for k > i */
    MM_K_GE_I, /* A(i, k) = 0 for k < i */
} mm_shape;

/* Columns [j0, j0 + JV) of C += A B, rows in tiles of MM_ROWS then 1; each tile runs k
 * over the range where its rows of A can be nonzero. */
static inline __attribute__((always_inline)) void mm_cols(float *restrict C, size_t ldc,
                                                          const float *restrict A, size_t ars,
                                                          size_t acs, const float *restrict B,
                                                          size_t ldb, int M, int K, int j0,
                                                          const int JV, mm_shape shape) {
    if (shape == MM_J_GE_I && M > j0 + JV) M = j0 + JV;
    int i = 0;
    for (; i + MM_ROWS <= M; i += MM_ROWS) {
        const int k0 = shape == MM_K_GE_I ? i : 0;
        const int k1 = shape == MM_K_LE_I && i + MM_ROWS < K ? i + MM_ROWS : K;
        mm_tile(C + (size_t)i * ldc + j0, ldc, A + (size_t)i * ars + (size_t)k0 * acs, ars, acs,
                B + (size_t)k0 * ldb + j0, ldb, k1 - k0, MM_ROWS, JV);
    }
    for (; i < M; i++) {
        const int k0 = shape == MM_K_GE_I ? i : 0;
        const int k1 = shape == MM_K_LE_I && i + 1 < K ? i + 1 : K;
        mm_tile(C + (size_t)i * ldc + j0, ldc, A + (size_t)i * ars + (size_t)k0 * acs, ars, acs,
                B + (size_t)k0 * ldb + j0, ldb, k1 - k0, 1, JV);
    }
}

/* C += A B, a small GEMM: C(i, j) = C[i*ldc + j] for i < M, j < N (j contiguous),
 * A(i, k) = A[i*ars + k*acs] (any layout: read one scalar at a time and broadcast),
 * B(k, j) = B[k*ldb + j]; shape says which terms are known zeros.  Every C(i, j) is a
 * chain of fmas over k in increasing order, whatever the tiling, so results do not
 * depend on M, N or the tile taken (thread counts never enter). */
static void mm_acc(float *restrict C, size_t ldc, const float *restrict A, size_t ars, size_t acs,
                   const float *restrict B, size_t ldb, int M, int N, int K, mm_shape shape) {
    int j0 = 0;
    for (; j0 + MM_LANES <= N; j0 += MM_LANES)
        mm_cols(C, ldc, A, ars, acs, B, ldb, M, K, j0, MM_LANES, shape);
    if (j0 + MM_LANES / 2 <= N) {
        mm_cols(C, ldc, A, ars, acs, B, ldb, M, K, j0, MM_LANES / 2, shape);
        j0 += MM_LANES / 2;
    }
    if (j0 == N) return;
    /* The last N - j0 < 16 columns (small head dimensions, ragged last blocks). */
    if (shape == MM_J_GE_I && M > N) M = N;
    for (int i = 0; i < M; i++) {
        float *restrict c = C + (size_t)i * ldc;
        const int k0 = shape == MM_K_GE_I ? i : 0;
        const int k1 = shape == MM_K_LE_I && i + 1 < K ? i + 1 : K;
        for (int k = k0; k < k1; k++) {
            const float *restrict b = B + (size_t)k * ldb;
            const float x = A[(size_t)i * ars + (size_t)k * acs];
#pragma omp simd
            for (int j = j0; j < N; j++) c[j] = zt_fmaf(x, b[j], c[j]);
        }
    }
}

/* dst[d*ATTN_BLOCK + r] = src[r*lds + d] for r < nr, d < hd: a block of head vectors,
 * transposed so that the vectors' index becomes the lane. */
static void transpose_block(float *restrict dst, const float *restrict src, size_t lds, int nr,
                            int hd) {
    for (int r = 0; r < nr; r++)
        for (int d = 0; d < hd; d++) dst[(size_t)d * ATTN_BLOCK + r] = src[(size_t)r * lds + d];
}

void zt_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int nh, int nkv,
                          int hd, int window) {
    zt_attention_forward_pos(out, NULL, lse, qkv, NULL, B, T, nh, nkv, hd, window);
}

void zt_attention_forward_copy16(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                                 int B, int T, int nh, int nkv, int hd, int window) {
    zt_attention_forward_pos(out, out_bf16, lse, qkv, NULL, B, T, nh, nkv, hd, window);
}

void zt_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                              const int *pos, int B, int T, int nh, int nkv, int hd, int window) {
    assert(hd > 0 && hd <= ATTN_MAX_HD && window >= 0);
    assert(nkv > 0 && nh % nkv == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t OW = (size_t)nh * hd;
    const int group = nh / nkv;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */
    const int nblk = (T + ATTN_BLOCK - 1) / ATTN_BLOCK;
    const long ntask = (long)B * nh * nblk;

    /* One task per (b, h, query block).  Query block qb costs qb + 1 key blocks, so
     * tasks are handed out dynamically, the most expensive block of each head first. */
#pragma omp parallel for schedule(dynamic, 1)
    for (long task = 0; task < ntask; task++) {
        const int qb = nblk - 1 - (int)(task % nblk);
        const int h = (int)((task / nblk) % nh);
        const int b = (int)(task / ((long)nblk * nh));
        const int i0 = qb * ATTN_BLOCK;
        const int nq = T - i0 < ATTN_BLOCK ? T - i0 : ATTN_BLOCK;
        const float *base = qkv + (size_t)b * T * W;
        const float *kcol = base + (size_t)(nh + h / group) * hd;
        const float *vcol = base + (size_t)(nh + nkv + h / group) * hd;

        float *qt = attn_scratch;                 /* Q^T (hd, block) */
        float *o = qt + ATTN_MAX_HD * ATTN_BLOCK; /* unnormalised O (block, hd) */
        float *st = o + ATTN_MAX_HD * ATTN_BLOCK; /* S^T, then P^T (key, query) */
        float m[ATTN_BLOCK], l[ATTN_BLOCK];
        int qs[ATTN_BLOCK], lo[ATTN_BLOCK];
        transpose_block(qt, base + (size_t)i0 * W + (size_t)h * hd, W, nq, hd);
        memset(o, 0, sizeof(float) * (size_t)nq * hd);
        for (int ii = 0; ii < nq; ii++) m[ii] = -INFINITY, l[ii] = 0.0f;
        const int kb0 = zt_attn_first_block_pos(qs, pos ? pos + (size_t)b * T : NULL, i0, nq, window);

        for (int kb = kb0; kb <= qb; kb++) {
            const int j0 = kb * ATTN_BLOCK;
            const int nk = kb < qb ? ATTN_BLOCK : nq; /* the diagonal block is square */
            const int diag = kb == qb;
            memset(st, 0, sizeof(float) * ATTN_TILE);
            mm_acc(st, ATTN_BLOCK, kcol + (size_t)j0 * W, W, 1, qt, ATTN_BLOCK, nk, nq, hd,
                   diag ? MM_J_GE_I : MM_DENSE);

            zt_attn_key_lo(lo, qs, nq, j0);
            zt_attn_softmax_tile(st, o, hd, nq, nk, i0 - j0, window, lo, scale, m, l);
            /* O += P V_blk, with P(ii, jj) read from P^T. */
            mm_acc(o, hd, st, 1, ATTN_BLOCK, vcol + (size_t)j0 * W, W, nq, hd, nk,
                   diag ? MM_K_LE_I : MM_DENSE);
        }

        const size_t orow0 = ((size_t)b * T + i0) * OW + (size_t)h * hd;
        zt_attn_write_rows(out + orow0, out_bf16 ? out_bf16 + orow0 : NULL, OW,
                           lse + ((size_t)b * nh + h) * T + i0, o, hd, nq, m, l);
    }
}

void zt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int nh, int nkv, int hd, int window) {
    zt_attention_backward_pos(dqkv, dout, qkv, out, lse, NULL, B, T, nh, nkv, hd, window);
}

void zt_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int *pos, int B, int T, int nh, int nkv, int hd,
                               int window) {
    assert(hd > 0 && hd <= ATTN_MAX_HD && window >= 0);
    assert(nkv > 0 && nh % nkv == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t OW = (size_t)nh * hd;
    const int group = nh / nkv;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */
    const int nblk = (T + ATTN_BLOCK - 1) / ATTN_BLOCK;

#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int kh = 0; kh < nkv; kh++) {
            const float *base = qkv + (size_t)b * T * W;
            float *dbase = dqkv + (size_t)b * T * W;
            const float *kcol = base + (size_t)(nh + kh) * hd;
            const float *vcol = base + (size_t)(nh + nkv + kh) * hd;
            float *dkcol = dbase + (size_t)(nh + kh) * hd;
            float *dvcol = dbase + (size_t)(nh + nkv + kh) * hd;

            float *qt = attn_scratch;                   /* O^T, then Q^T (hd, block) */
            float *got = qt + ATTN_MAX_HD * ATTN_BLOCK; /* dO^T (hd, block) */
            float *pt = got + ATTN_MAX_HD * ATTN_BLOCK; /* S^T, then P^T (key, query) */
            float *dst = pt + ATTN_TILE;                /* dP^T, then scale * dS^T */

            zt_attn_clear_grads(dbase, W, T, nh, nkv, kh, hd);
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float *lrow = lse + ((size_t)b * nh + h) * T;
                for (int qb = 0; qb < nblk; qb++) {
                    const int i0 = qb * ATTN_BLOCK;
                    const int nq = T - i0 < ATTN_BLOCK ? T - i0 : ATTN_BLOCK;
                    const float *q = base + (size_t)i0 * W + (size_t)h * hd;
                    const float *go = dout + ((size_t)b * T + i0) * OW + (size_t)h * hd;
                    float *dq = dbase + (size_t)i0 * W + (size_t)h * hd;

                    /* D_i = dout_i . out_i, one lane per query, summed over d in the
                     * order mm_acc sums dP: with a single key (out = v) dP - D is then
                     * exactly 0, as is the true gradient of q and k. */
                    float D[ATTN_BLOCK], L[ATTN_BLOCK];
                    int qs[ATTN_BLOCK], lo[ATTN_BLOCK];
                    const int kb0 = zt_attn_first_block_pos(qs, pos ? pos + (size_t)b * T : NULL, i0, nq, window);
                    transpose_block(qt, out + ((size_t)b * T + i0) * OW + (size_t)h * hd, OW, nq,
                                    hd);
                    transpose_block(got, go, OW, nq, hd);
                    for (int ii = 0; ii < nq; ii++) D[ii] = 0.0f, L[ii] = lrow[i0 + ii];
                    for (int d = 0; d < hd; d++) {
                        const float *restrict a = got + (size_t)d * ATTN_BLOCK;
                        const float *restrict o = qt + (size_t)d * ATTN_BLOCK;
#pragma omp simd
                        for (int ii = 0; ii < nq; ii++) D[ii] = zt_fmaf(a[ii], o[ii], D[ii]);
                    }
                    transpose_block(qt, q, W, nq, hd);

                    for (int kb = kb0; kb <= qb; kb++) {
                        const int j0 = kb * ATTN_BLOCK;
                        const int nk = kb < qb ? ATTN_BLOCK : nq; /* the diagonal block is square */
                        /* S^T = K Q^T and dP^T = V dO^T, tiles (key, query), summed exactly
                         * as the forward sums S^T. */
                        const int diag = kb == qb;
                        memset(pt, 0, sizeof(float) * ATTN_TILE);
                        memset(dst, 0, sizeof(float) * ATTN_TILE);
                        mm_acc(pt, ATTN_BLOCK, kcol + (size_t)j0 * W, W, 1, qt, ATTN_BLOCK, nk, nq,
                               hd, diag ? MM_J_GE_I : MM_DENSE);
                        mm_acc(dst, ATTN_BLOCK, vcol + (size_t)j0 * W, W, 1, got, ATTN_BLOCK, nk,
                               nq, hd, diag ? MM_J_GE_I : MM_DENSE);
                        zt_attn_key_lo(lo, qs, nq, j0);
                        zt_attn_grad_tile(pt, dst, nq, nk, i0 - j0, window, lo, scale, L, D);
                        /* dV += P^T dO,  dK += (scale dS)^T Q,  dQ += (scale dS) K. */
                        mm_acc(dvcol + (size_t)j0 * W, W, pt, ATTN_BLOCK, 1, go, OW, nk, hd, nq,
                               diag ? MM_K_GE_I : MM_DENSE);
                        mm_acc(dkcol + (size_t)j0 * W, W, dst, ATTN_BLOCK, 1, q, W, nk, hd, nq,
                               diag ? MM_K_GE_I : MM_DENSE);
                        mm_acc(dq, W, dst, 1, ATTN_BLOCK, kcol + (size_t)j0 * W, W, nq, hd, nk,
                               diag ? MM_K_LE_I : MM_DENSE);
                    }
                }
            }
        }
    }
}
