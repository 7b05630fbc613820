/* swiglu.c — the SwiGLU gate of the Llama MLP, fp32.
 *
 * gu (N, 2F) = [g | u] (gate and up projections from one matmul); h (N, F):
 *   h = silu(g) * u,   silu(g) = g * sigma(g) = g / (1 + exp(-g))
 * Backward, with sigma = sigma(g) and sigma' = sigma (1 - sigma):
 *   du = dh * silu(g)
 *   dg = dh * u * silu'(g),   silu'(g) = sigma + g sigma' = sigma (1 + g (1 - sigma))
 * For very negative g, exp(-g) overflows to inf and sigma, silu go to 0 cleanly
 * (g / inf = -0), so no NaN appears.  exp is zt_expf (vmath.h): the loops vectorise,
 * and it rounds as libm's expf does, so results are those of the scalar code. */
#include "kernels.h"
#include "vmath.h"

#include <assert.h>

void zt_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F) {
    assert(N >= 0 && F > 0 && (h_dt == ZT_F32 || h_dt == ZT_BF16));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict g = gu + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        /* torch's silu is x / (1 + exp(-x)); same expression, same rounding. */
        if (h_dt == ZT_F32) {
            float *restrict hr = (float *)h + (size_t)n * F;
#pragma omp simd
            for (int f = 0; f < F; f++) hr[f] = (g[f] / (1.0f + zt_expf(-g[f]))) * u[f];
        } else {
            uint16_t *restrict hr = (uint16_t *)h + (size_t)n * F;
#pragma omp simd
            for (int f = 0; f < F; f++)
                hr[f] = zt_f32_to_bf16((g[f] / (1.0f + zt_expf(-g[f]))) * u[f]);
        }
    }
}

/* One row of the backward; ST stores an fp32 value into the output dtype. */
#define SWIGLU_BACKWARD_ROW(ST)                                                    \
    _Pragma("omp simd")                                                            \
    for (int f = 0; f < F; f++) {                                                  \
        /* silu as the forward computes it, so du matches torch's dh * silu(g). */ \
        const float e = 1.0f + zt_expf(-g[f]);                                     \
        const float sig = 1.0f / e;                                                \
        const float silu = g[f] / e;                                               \
        du[f] = ST(dhr[f] * silu);                                                 \
        dg[f] = ST(dhr[f] * u[f] * sig * (1.0f + g[f] * (1.0f - sig)));            \
    }
#define AS_F32(x) (x)

void zt_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N,
                        int F) {
    assert(N >= 0 && F > 0 && (dgu_dt == ZT_F32 || dgu_dt == ZT_BF16));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict g = gu + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        const float *restrict dhr = dh + (size_t)n * F;
        if (dgu_dt == ZT_F32) {
            float *restrict dg = (float *)dgu + (size_t)n * 2 * F;
            float *restrict du = dg + F;
            SWIGLU_BACKWARD_ROW(AS_F32)
        } else {
            uint16_t *restrict dg = (uint16_t *)dgu + (size_t)n * 2 * F;
            uint16_t *restrict du = dg + F;
            SWIGLU_BACKWARD_ROW(zt_f32_to_bf16)
        }
    }
}
