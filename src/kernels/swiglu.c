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

void zt_swiglu_forward(float *h, const float *gu, int N, int F) {
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict g = gu + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        float *restrict hr = h + (size_t)n * F;
        /* torch's silu is x / (1 + exp(-x)); same expression, same rounding. */
#pragma omp simd
        for (int f = 0; f < F; f++) hr[f] = (g[f] / (1.0f + zt_expf(-g[f]))) * u[f];
    }
}

void zt_swiglu_backward(float *dgu, const float *dh, const float *gu, int N, int F) {
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict g = gu + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        const float *restrict dhr = dh + (size_t)n * F;
        float *restrict dg = dgu + (size_t)n * 2 * F;
        float *restrict du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            /* silu as the forward computes it, so du matches torch's dh * silu(g). */
            const float e = 1.0f + zt_expf(-g[f]);
            const float sig = 1.0f / e;
            const float silu = g[f] / e;
            du[f] = dhr[f] * silu;
            dg[f] = dhr[f] * u[f] * sig * (1.0f + g[f] * (1.0f - sig));
        }
    }
}
