/* attention.c — causal grouped-query attention, fp32, without a T x T matrix.
 *
 * Shapes: qkv (B, T, W) with W = (nh + 2*nkv)*hd laid out [q heads | k heads | v heads];
 * out (B, T, nh*hd); lse (B, nh, T).  Query head h reads kv head h / (nh/nkv).
 * For one (b, h) and query i, with keys j <= i and scale = 1/sqrt(hd):
 *   s_j = scale * q_i . k_j,   lse_i = log sum_j exp(s_j),   p_j = exp(s_j - lse_i)
 *   out_i = sum_j p_j v_j
 * This equals softmax(q k^T / sqrt(hd) + causal mask) v, the HF eager path.
 *
 * Forward is an online softmax (flash-attention style): keys are visited once in
 * blocks, keeping a running max m, running sum l and an unnormalised output; when
 * the max grows, l and the output are rescaled by exp(m_old - m_new).
 *
 * Backward, from dout_i, recomputing p_j = exp(s_j - lse_i) from the saved lse:
 *   dv_j += p_j dout_i
 *   dp_j  = dout_i . v_j,   D_i = dout_i . out_i  (= sum_j p_j dp_j)
 *   ds_j  = p_j (dp_j - D_i)          (softmax Jacobian)
 *   dq_i  = scale * sum_j ds_j k_j,   dk_j += scale * ds_j q_i
 * dk and dv sum over the query heads of a group and over queries, so the backward
 * is parallel over (b, kv head): each task owns its dk, dv rows and the dq rows of
 * its group's query heads, and nothing races. */
#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Largest head dimension the stack scratch holds (Llama uses 64 or 128). */
#define ATTN_MAX_HD 256
/* Keys scored per block in the forward: one rescale per block instead of per key. */
#define ATTN_KEY_BLOCK 64

/* The simd reduction lets the compiler split the sum into vector lanes (a fixed,
 * deterministic order); without it strict IEEE order keeps the loop scalar. */
static inline float dot(const float *restrict a, const float *restrict b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

void zt_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int nh, int nkv,
                          int hd) {
    assert(hd > 0 && hd <= ATTN_MAX_HD);
    assert(nkv > 0 && nh % nkv == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t OW = (size_t)nh * hd;
    const int group = nh / nkv;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */
    const long ntask = (long)B * nh * T;

    /* One task per (b, h, i); consecutive tasks share (b, h) and so the same K, V.
     * Dynamic scheduling because query i costs i+1 keys. */
#pragma omp parallel for schedule(dynamic, 16)
    for (long task = 0; task < ntask; task++) {
        const int i = (int)(task % T);
        const int h = (int)((task / T) % nh);
        const int b = (int)(task / ((long)T * nh));
        const int kh = h / group;
        const float *base = qkv + (size_t)b * T * W;
        const float *restrict q = base + (size_t)i * W + (size_t)h * hd;
        const float *kcol = base + (size_t)(nh + kh) * hd;
        const float *vcol = base + (size_t)(nh + nkv + kh) * hd;

        float acc[ATTN_MAX_HD];
        float s[ATTN_KEY_BLOCK];
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        float m = -INFINITY, l = 0.0f;

        for (int j0 = 0; j0 <= i; j0 += ATTN_KEY_BLOCK) {
            const int nj = (i + 1 - j0) < ATTN_KEY_BLOCK ? (i + 1 - j0) : ATTN_KEY_BLOCK;
            float bm = -INFINITY;
            for (int jj = 0; jj < nj; jj++) {
                s[jj] = dot(q, kcol + (size_t)(j0 + jj) * W, hd) * scale;
                if (s[jj] > bm) bm = s[jj];
            }
            if (bm > m) {
                /* exp(-inf) = 0 on the first block, where acc and l are still 0. */
                const float corr = expf(m - bm);
                l *= corr;
                for (int d = 0; d < hd; d++) acc[d] *= corr;
                m = bm;
            }
            for (int jj = 0; jj < nj; jj++) {
                const float p = expf(s[jj] - m);
                const float *restrict v = vcol + (size_t)(j0 + jj) * W;
                l += p;
                for (int d = 0; d < hd; d++) acc[d] += p * v[d];
            }
        }
        float *restrict o = out + ((size_t)b * T + i) * OW + (size_t)h * hd;
        const float inv_l = 1.0f / l;
        for (int d = 0; d < hd; d++) o[d] = acc[d] * inv_l;
        lse[((size_t)b * nh + h) * T + i] = m + logf(l);
    }
}

void zt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int nh, int nkv, int hd) {
    assert(hd > 0 && hd <= ATTN_MAX_HD);
    assert(nkv > 0 && nh % nkv == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t OW = (size_t)nh * hd;
    const int group = nh / nkv;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */

#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int kh = 0; kh < nkv; kh++) {
            const float *base = qkv + (size_t)b * T * W;
            float *dbase = dqkv + (size_t)b * T * W;
            const float *kcol = base + (size_t)(nh + kh) * hd;
            const float *vcol = base + (size_t)(nh + nkv + kh) * hd;
            float *dkcol = dbase + (size_t)(nh + kh) * hd;
            float *dvcol = dbase + (size_t)(nh + nkv + kh) * hd;

            /* dk, dv are sums: clear this task's rows before accumulating. */
            for (int j = 0; j < T; j++) {
                memset(dkcol + (size_t)j * W, 0, (size_t)hd * sizeof(float));
                memset(dvcol + (size_t)j * W, 0, (size_t)hd * sizeof(float));
            }
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                for (int i = 0; i < T; i++) {
                    const float *restrict q = base + (size_t)i * W + (size_t)h * hd;
                    const float *restrict go = dout + ((size_t)b * T + i) * OW + (size_t)h * hd;
                    const float *restrict o = out + ((size_t)b * T + i) * OW + (size_t)h * hd;
                    const float L = lse[((size_t)b * nh + h) * T + i];
                    const float D = dot(go, o, hd);
                    float dq[ATTN_MAX_HD];
                    for (int d = 0; d < hd; d++) dq[d] = 0.0f;

                    for (int j = 0; j <= i; j++) {
                        const float *restrict k = kcol + (size_t)j * W;
                        const float *restrict v = vcol + (size_t)j * W;
                        float *restrict dk = dkcol + (size_t)j * W;
                        float *restrict dv = dvcol + (size_t)j * W;
                        const float p = expf(dot(q, k, hd) * scale - L);
                        const float ds = p * (dot(go, v, hd) - D);
                        const float dss = ds * scale;
                        for (int d = 0; d < hd; d++) {
                            dq[d] += ds * k[d];
                            dk[d] += dss * q[d];
                            dv[d] += p * go[d];
                        }
                    }
                    float *restrict dqo = dbase + (size_t)i * W + (size_t)h * hd;
                    for (int d = 0; d < hd; d++) dqo[d] = dq[d] * scale;
                }
            }
        }
    }
}
