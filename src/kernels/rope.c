/* rope.c — rotary position embeddings, Hugging Face's rotate_half convention, fp32.
 *
 * Each q and k head vector x (hd) is split in halves x1 = x[0:hd/2], x2 = x[hd/2:hd];
 * pair i rotates by the angle a = pos * f_i, f_i = theta^(-2i/hd) (or Llama 3.1's
 * rescaling of it, rope_freq.h):
 *   y1 = x1 cos a - x2 sin a,   y2 = x2 cos a + x1 sin a.
 * qkv rows (B, T, (nh + 2*nkv)*hd) hold [q heads | k heads | v heads]; the first
 * nh + nkv heads are rotated, v is left alone.
 *
 * Backward: the rotation is orthogonal, so its Jacobian's transpose is the rotation
 * by -a:  dx1 = dy1 cos a + dy2 sin a,  dx2 = dy2 cos a - dy1 sin a. */
#include "kernels.h"

#include <assert.h>
#include <math.h>

/* HF builds the tables in fp32 step by step:
 *   inv_freq = zt_rope_inv_freq (rope_freq.h: the default or Llama 3.1's scaled one)
 *   freqs    = pos.float() * inv_freq;  cos = freqs.cos(), sin = freqs.sin()
 * Every intermediate is rounded to float here exactly where torch rounds it.  The
 * transcendental functions (pow, cos, sin) are evaluated in double and rounded once,
 * giving the correctly rounded fp32 value, which torch's (<= 1 ulp) fp32 versions
 * return almost always. */
void zt_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f) {
    assert(hd > 0 && hd % 2 == 0 && T >= 0);
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = zt_rope_inv_freq(f, i, hd);
        for (int t = 0; t < T; t++) {
            float a = (float)t * inv_freq;
            cos_t[(size_t)t * half + i] = (float)cos((double)a);
            sin_t[(size_t)t * half + i] = (float)sin((double)a);
        }
    }
}

/* Rotate nhead consecutive head vectors of one row by the row's angles; sign = +1
 * rotates by +a (forward), -1 by -a (backward). */
static inline void rope_row(float *restrict v, const float *restrict c, const float *restrict s,
                            int nhead, int hd, float sign) {
    const int half = hd / 2;
    for (int h = 0; h < nhead; h++) {
        float *restrict x1 = v + (size_t)h * hd;
        float *restrict x2 = x1 + half;
        for (int i = 0; i < half; i++) {
            zt_rope_pair y = zt_rope_rotate(x1[i], x2[i], c[i], sign * s[i]);
            x1[i] = y.y1;
            x2[i] = y.y2;
        }
    }
}

/* every row's q and k heads rotated by sign * a (rows are (b, t), at position pos[row],
 * or t = row % T without pos) */
static void rope_rows(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T, int nh,
                      int nkv, int hd, float sign) {
    assert(hd % 2 == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int row = 0; row < B * T; row++) {
        const int t = pos ? pos[row] : row % T;
        rope_row(qkv + row * W, cos_t + (size_t)t * half, sin_t + (size_t)t * half, nh + nkv, hd, sign);
    }
}

void zt_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                     int nkv, int hd) {
    rope_rows(qkv, cos_t, sin_t, NULL, B, T, nh, nkv, hd, 1.0f);
}

void zt_rope_forward_pos(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                         int nh, int nkv, int hd) {
    rope_rows(qkv, cos_t, sin_t, pos, B, T, nh, nkv, hd, 1.0f);
}

void zt_rope_backward_pos(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                          int nh, int nkv, int hd) {
    rope_rows(dqkv, cos_t, sin_t, pos, B, T, nh, nkv, hd, -1.0f);
}

void zt_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                      int nkv, int hd) {
    rope_rows(dqkv, cos_t, sin_t, NULL, B, T, nh, nkv, hd, -1.0f);
}
