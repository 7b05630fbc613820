/* rmsnorm.c — RMSNorm as Hugging Face's LlamaRMSNorm computes it, fp32.
 *
 * Forward, per row n of x (N, C):
 *   rstd[n] = 1 / sqrt(mean_c(x[n,c]^2) + eps),   y[n,c] = (x[n,c] * rstd[n]) * w[c]
 * HF multiplies by rstd first and by the weight second; we keep that order so the
 * fp32 roundings are the same ones.
 *
 * Backward, with r = rstd[n], xhat = x*r and g = dy*w (the gradient reaching xhat):
 *   dw[c] = dw_beta dw[c] + sum_n dy[n,c] * xhat[n,c]
 *   dx[n,c] = dx_beta dx[n,c] + r * (g[c] - xhat[n,c] * mean_c(g * xhat))
 * The second line is d/dx of xhat = x / sqrt(mean(x^2)+eps): the direct term r*g
 * minus the part flowing through r, dr/dx = -r^3 x / C.
 *
 * A beta is 0 (store: the destination is not read, so it may hold anything, NaN
 * included) or 1 (add).  The store writes 0.0f + v, not v: the two differ only where
 * v is -0.0 (+0.0 + -0.0 = +0.0), and adding the zero keeps the bits of the clear-
 * then-add that the store replaces, sign of zero included.  That matters for dx, where
 * a -0.0 occurs (a row of zero dy, as an ignored target gives, with a negative weight)
 * and would reach dx's bf16 copy and the products that read it; dw's sums start from
 * +0.0 and so are never -0.0, but take the same form.  The add costs nothing against
 * the load it replaces. */
#include "kernels.h"

#include <assert.h>
#include <math.h>

/* Columns per dw task: a cache-friendly strip so each thread owns its slice of dw
 * and the column sum over N has no race and a fixed (deterministic) order. */
#define RMSNORM_DW_STRIP 64

void zt_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N,
                        int C, float eps) {
    assert(N >= 0 && C > 0 && (y_dt == ZT_F32 || y_dt == ZT_BF16));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict xr = x + (size_t)n * C;
        /* The mean of squares in double: torch sums in fp32 with a pairwise order that
         * is close to exact; a double sum rounded once is the closest we can get to it
         * without copying its exact order. */
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        float var = (float)(ss / C);
        float r = 1.0f / sqrtf(var + eps);
        rstd[n] = r;
        if (y_dt == ZT_F32) {
            float *restrict yr = (float *)y + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = (xr[c] * r) * w[c];
        } else {
            uint16_t *restrict yr = (uint16_t *)y + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = zt_f32_to_bf16((xr[c] * r) * w[c]);
        }
    }
}

void zt_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                         const float *dy, const float *x, const float *w, const float *rstd, int N,
                         int C) {
    assert(N >= 0 && C > 0 && (dx_beta == 0.0f || dx_beta == 1.0f) && (dw_beta == 0.0f || dw_beta == 1.0f));
    /* dx: rows are independent. */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict xr = x + (size_t)n * C;
        const float *restrict dyr = dy + (size_t)n * C;
        float *restrict dxr = dx + (size_t)n * C;
        const float r = rstd[n];
        double dot = 0.0; /* sum_c g * xhat, a reduction like the forward's mean */
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += (double)(dyr[c] * w[c]) * (xr[c] * r);
        const float m = (float)(dot / C);
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xhat = xr[c] * r;
            dxr[c] = (dx_beta != 0.0f ? dxr[c] : 0.0f) + r * (dyr[c] * w[c] - xhat * m);
        }
        if (dx_bf16) {
            uint16_t *restrict cr = dx_bf16 + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) cr[c] = zt_f32_to_bf16(dxr[c]);
        }
    }
    /* dw: a column reduction over all rows; strips of columns are independent.  The
     * sum over N (up to B*T, thousands) runs in double so it stays exact to fp32. */
    const int nstrip = (C + RMSNORM_DW_STRIP - 1) / RMSNORM_DW_STRIP;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nstrip; s++) {
        const int c0 = s * RMSNORM_DW_STRIP;
        const int nc = C - c0 < RMSNORM_DW_STRIP ? C - c0 : RMSNORM_DW_STRIP;
        double acc[RMSNORM_DW_STRIP] = {0};
        for (int n = 0; n < N; n++) {
            const float *restrict xr = x + (size_t)n * C + c0;
            const float *restrict dyr = dy + (size_t)n * C + c0;
            const float r = rstd[n];
            for (int c = 0; c < nc; c++) acc[c] += (double)(dyr[c] * (xr[c] * r));
        }
        for (int c = 0; c < nc; c++) dw[c0 + c] = (dw_beta != 0.0f ? dw[c0 + c] : 0.0f) + (float)acc[c];
    }
}
