/* rmsnorm.cu — RMSNorm forward and backward on the device (kernels.h, rmsnorm.c).
 *
 * Forward, one block per row n of x (N, C):
 *   rstd[n] = 1 / sqrt(mean_c(x^2) + eps),  y[n,c] = (x[n,c] * rstd[n]) * w[c]
 * with the mean of squares summed in double (as rmsnorm.c does) and rounded once.
 * Backward, with r = rstd[n], xhat = x*r, g = dy*w:
 *   dx[n,c] += r * (g - xhat * mean_c(g * xhat))      (one block per row)
 *   dw[c]   += sum_n dy[n,c] * xhat[n,c]               (column sums, in double)
 * Every fp32 expression is rmsnorm.c's; only the order of the double sums differs
 * (the block's tree instead of a sequential loop, and dw's sum over rows in chunks
 * added in a fixed order), so results match the CPU's to fp32 rounding of the same
 * double — nearly always the same bits — and are the same on every run. */
#include "entries.cuh"

#define NORM_THREADS 256
/* rows per chunk of dw's column sums: enough chunks to fill the device at Llama's C */
#define DW_ROWS 64

template <bool BF16>
__global__ void rmsnorm_forward_kernel(void *y, float *rstd, const float *x, const float *w, int C, float eps)
{
    __shared__ double sh[32];
    const int n = blockIdx.x;
    const float *xr = x + (size_t)n * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        ss += (double)xr[c] * xr[c];
    ss = zt_d_block_sum(ss, sh);
    const float var = (float)(ss / C);
    const float r = 1.0f / sqrtf(var + eps);
    if (threadIdx.x == 0)
        rstd[n] = r;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = (xr[c] * r) * w[c];
        if (BF16)
            ((uint16_t *)y)[(size_t)n * C + c] = zt_f32_to_bf16(v);
        else
            ((float *)y)[(size_t)n * C + c] = v;
    }
}

void zt_cu_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                           float eps)
{
    if (N <= 0)
        return;
    if (y_dt == ZT_BF16)
        rmsnorm_forward_kernel<true><<<N, NORM_THREADS, 0, zt_cu.stream>>>(y, rstd, x, w, C, eps);
    else
        rmsnorm_forward_kernel<false><<<N, NORM_THREADS, 0, zt_cu.stream>>>(y, rstd, x, w, C, eps);
    ZT_CU_LAUNCHED();
}

__global__ void rmsnorm_dx_kernel(float *dx, uint16_t *dx_bf16, bool dx_add, const float *dy, const float *x,
                                  const float *w, const float *rstd, int C)
{
    __shared__ double sh[32];
    const int n = blockIdx.x;
    const size_t o = (size_t)n * C;
    const float r = rstd[n];
    double dot = 0.0; /* sum_c g * xhat */
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dot += (double)(dy[o + c] * w[c]) * (x[o + c] * r);
    dot = zt_d_block_sum(dot, sh);
    const float m = (float)(dot / C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = x[o + c] * r;
        const float d = (dx_add ? dx[o + c] : 0.0f) + r * (dy[o + c] * w[c] - xhat * m); /* rmsnorm.c: 0 + v */
        dx[o + c] = d;
        if (dx_bf16)
            dx_bf16[o + c] = zt_f32_to_bf16(d);
    }
}

/* partial[chunk][c] = sum over the chunk's rows, in order, of dy * xhat (double) */
__global__ void rmsnorm_dw_partial_kernel(double *partial, const float *dy, const float *x, const float *rstd, int N,
                                          int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const int n0 = blockIdx.y * DW_ROWS, n1 = n0 + DW_ROWS < N ? n0 + DW_ROWS : N;
    double acc = 0.0;
    for (int n = n0; n < n1; n++)
        acc += (double)(dy[(size_t)n * C + c] * (x[(size_t)n * C + c] * rstd[n]));
    partial[(size_t)blockIdx.y * C + c] = acc;
}

__global__ void rmsnorm_dw_sum_kernel(float *dw, bool dw_add, const double *partial, int nchunk, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double acc = 0.0;
    for (int k = 0; k < nchunk; k++)
        acc += partial[(size_t)k * C + c];
    dw[c] = (dw_add ? dw[c] : 0.0f) + (float)acc;
}

void zt_cu_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta, const float *dy,
                            const float *x, const float *w, const float *rstd, int N, int C)
{
    if (N <= 0)
        return;
    rmsnorm_dx_kernel<<<N, NORM_THREADS, 0, zt_cu.stream>>>(dx, dx_bf16, dx_beta != 0.0f, dy, x, w, rstd, C);
    ZT_CU_LAUNCHED();
    const int nchunk = (N + DW_ROWS - 1) / DW_ROWS;
    double *partial = (double *)zt_cu_scratch((size_t)nchunk * C * sizeof(double));
    const dim3 grid((unsigned)((C + NORM_THREADS - 1) / NORM_THREADS), (unsigned)nchunk);
    rmsnorm_dw_partial_kernel<<<grid, NORM_THREADS, 0, zt_cu.stream>>>(partial, dy, x, rstd, N, C);
    ZT_CU_LAUNCHED();
    rmsnorm_dw_sum_kernel<<<(C + NORM_THREADS - 1) / NORM_THREADS, NORM_THREADS, 0, zt_cu.stream>>>(
        dw, dw_beta != 0.0f, partial, nchunk, C);
    ZT_CU_LAUNCHED();
}
