/* act16.c — the bf16-activation entries on the host (act16.h).
 *
 * RoPE: pair i of each q and k head rotates by a = pos f_i (rope.c),
 *   y1 = x1 cos a - x2 sin a,  y2 = x2 cos a + x1 sin a   (backward: -a),
 * computed in fp32 from the fp32 input as rope.c does, then rounded once to bf16, so
 * qkv16 is bit for bit convert(rope(src)).  v is only rounded.
 * SwiGLU: swiglu.c's expressions on the widened bf16 g and u (the one difference from
 * the exact entry: g and u were rounded to bf16 before, as autocast's linear output is).
 * Attention: the CPU table's kernels on widened copies (act16.h says why a temporary). */
#include "act16.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/dtype.h"
#include "../core/mem.h"
#include "kernels.h"
#include "vmath.h"

/* one row (nh + 2 nkv heads of hd): the first nrot heads rotated by sign a, all rounded */
static void rope_round_row(uint16_t *restrict y, const float *restrict x, const float *restrict c,
                           const float *restrict s, int nrot, int nall, int hd, float sign)
{
    const int half = hd / 2;
    for (int h = 0; h < nrot; h++) {
        const float *x1 = x + (size_t)h * hd, *x2 = x1 + half;
        uint16_t *y1 = y + (size_t)h * hd, *y2 = y1 + half;
        for (int i = 0; i < half; i++) {
            float a = x1[i], b = x2[i], si = sign * s[i];
            y1[i] = zt_f32_to_bf16(a * c[i] - b * si);
            y2[i] = zt_f32_to_bf16(b * c[i] + a * si);
        }
    }
    for (size_t k = (size_t)nrot * hd; k < (size_t)nall * hd; k++) y[k] = zt_f32_to_bf16(x[k]);
}

static void rope_round(uint16_t *y, const float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                       int nkv, int hd, float sign)
{
    assert(hd % 2 == 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const int half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int row = 0; row < B * T; row++) {
        const int t = row % T;
        rope_round_row(y + row * W, x + row * W, cos_t + (size_t)t * half, sin_t + (size_t)t * half, nh + nkv,
                       nh + 2 * nkv, hd, sign);
    }
}

void zt_rope_forward_act16(uint16_t *qkv16, const float *src, const float *cos_t, const float *sin_t, int B, int T,
                           int nh, int nkv, int hd)
{
    rope_round(qkv16, src, cos_t, sin_t, B, T, nh, nkv, hd, 1.0f);
}

void zt_rope_backward_act16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t, int B,
                            int T, int nh, int nkv, int hd)
{
    rope_round(dqkv16, dqkv, cos_t, sin_t, B, T, nh, nkv, hd, -1.0f);
}

/* an fp32 copy of n bf16 values, accounted; NULL for n == 0 */
static float *widened(const uint16_t *x, size_t n, const char *who)
{
    if (n == 0)
        return NULL;
    float *w = zt_alloc(ZT_MEM_OTHER, n * sizeof(float));
    if (!w) {
        fprintf(stderr, "ztrain: %s: out of memory for a %zu-byte fp32 copy of its bf16 input\n", who,
                n * sizeof(float));
        abort();
    }
    if (x)
        zt_convert(w, ZT_F32, x, ZT_BF16, n);
    return w;
}

void zt_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, void *pack, int B, int T, int nh,
                                int nkv, int hd, int window)
{
    const size_t n = (size_t)B * T, nq = n * (size_t)(nh + 2 * nkv) * hd, no = n * (size_t)nh * hd;
    float *qkv = widened(qkv16, nq, "attention_forward_act16");
    float *out = widened(NULL, no, "attention_forward_act16");
    if (pack)
        zt_attention16_forward(out, out16, lse, qkv, pack, B, T, nh, nkv, hd, window);
    else
        zt_attention_forward_copy16(out, out16, lse, qkv, B, T, nh, nkv, hd, window);
    zt_free(ZT_MEM_OTHER, out, no * sizeof(float));
    zt_free(ZT_MEM_OTHER, qkv, nq * sizeof(float));
}

void zt_attention_backward_act16(float *dqkv, const float *dout, const uint16_t *qkv16, const uint16_t *out16,
                                 const float *lse, void *pack, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t n = (size_t)B * T, nq = n * (size_t)(nh + 2 * nkv) * hd, no = n * (size_t)nh * hd;
    float *qkv = widened(qkv16, nq, "attention_backward_act16");
    float *out = widened(out16, no, "attention_backward_act16");
    if (pack)
        zt_attention16_backward(dqkv, dout, qkv, out, lse, pack, B, T, nh, nkv, hd, window);
    else
        zt_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window);
    zt_free(ZT_MEM_OTHER, out, no * sizeof(float));
    zt_free(ZT_MEM_OTHER, qkv, nq * sizeof(float));
}

void zt_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *restrict g = gu16 + (size_t)n * 2 * F, *restrict u = g + F;
        uint16_t *restrict hr = h16 + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            const float gf = zt_bf16_to_f32(g[f]);
            hr[f] = zt_f32_to_bf16((gf / (1.0f + zt_expf(-gf))) * zt_bf16_to_f32(u[f]));
        }
    }
}

void zt_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *restrict g = gu16 + (size_t)n * 2 * F, *restrict u = g + F;
        const float *restrict dhr = dh + (size_t)n * F;
        uint16_t *restrict dg = dgu16 + (size_t)n * 2 * F, *restrict du = dg + F;
        for (int f = 0; f < F; f++) {
            /* swiglu.c's backward: sigma = 1 / (1 + e^-g), silu = g sigma,
             * du = dh silu,  dg = dh u sigma (1 + g (1 - sigma)) */
            const float gf = zt_bf16_to_f32(g[f]), uf = zt_bf16_to_f32(u[f]);
            const float e = 1.0f + zt_expf(-gf), sig = 1.0f / e, silu = gf / e;
            du[f] = zt_f32_to_bf16(dhr[f] * silu);
            dg[f] = zt_f32_to_bf16(dhr[f] * uf * sig * (1.0f + gf * (1.0f - sig)));
        }
    }
}
