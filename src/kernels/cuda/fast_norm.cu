/* fast_norm.cu — the fast RMSNorm (with the residual add fused in) and SwiGLU (fast.h):
 * the meaning of rmsnorm.cu and swiglu.cu, with fp32 sums instead of double, one warp
 * per row instead of one block, and the hardware exp; within fp32 rounding of the
 * exact kernels (bf16 outputs: within one bf16 rounding).
 *
 * RMSNorm forward, row n of x (N, C), one warp:
 *   rstd_n = 1 / sqrt(sum_c x_nc^2 / C + eps),  y_nc = (x_nc rstd_n) w_c
 * the sum in fp32: each lane sums its columns c = lane, lane + 32, ..., then the warp's
 * butterfly.  The residual form first adds the block's output into the stream,
 * x_nc += delta_nc (x fp32, delta fp32 or bf16), writes x back and normalises it: the
 * add and the norm that follows it in a Llama block read x once.  (Its backward needs
 * nothing new: the exact and fast rmsnorm backward already accumulate into dx, the
 * residual stream's gradient.)
 * Backward, row n (one warp), r = rstd_n, xhat = x r, g = dy w:
 *   dx_nc += r (g_c - xhat_c mean_c(g xhat)),   dw_c += sum_n dy_nc xhat_nc,
 * dw as fp32 column sums over chunks of 64 rows, then the chunks in order (fixed order:
 * the same bits every run), all in one launch (fast_rmsnorm_backward_kernel).
 * SwiGLU: h = silu(g) u, silu(g) = g / (1 + e^-g), with __expf (the SFU's exp2 of a
 * pre-scaled argument: a few ulp, where zt_expf is 0.5); the backward's expressions are
 * swiglu.cu's. */
#include "entries.cuh"
#include "fast.h"

#define ROWS_PER_BLOCK 8 /* warps per block, one row each */
#define DW_ROWS 64
#define FULL 0xffffffffu

__device__ __forceinline__ float warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* ---- RMSNorm forward (with the residual add) ------------------------------------------ */

template <bool RESIDUAL>
__global__ void fast_rmsnorm_kernel(void *y, zt_dtype y_dt, float *rstd, float *x, const void *delta,
                                    zt_dtype delta_dt, const float *w, int N, int C, float eps)
{
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (n >= N)
        return; /* warp-uniform */
    float *xr = x + (size_t)n * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = xr[c];
        if (RESIDUAL) {
            v += zt_d_load(delta, delta_dt, (size_t)n * C + c);
            xr[c] = v;
        }
        ss = fmaf(v, v, ss);
    }
    ss = warp_sum_f(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (lane == 0)
        rstd[n] = r;
    for (int c = lane; c < C; c += 32) /* the row is in L1 from the first pass (this warp wrote it) */
        zt_d_store(y, y_dt, (size_t)n * C + c, (xr[c] * r) * w[c]);
}

static void rmsnorm_launch(bool residual, void *y, zt_dtype y_dt, float *rstd, float *x, const void *delta,
                           zt_dtype delta_dt, const float *w, int N, int C, float eps)
{
    if (N <= 0)
        return;
    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    if (residual)
        fast_rmsnorm_kernel<true><<<blocks, ROWS_PER_BLOCK * 32, 0, zt_cu.stream>>>(y, y_dt, rstd, x, delta,
                                                                                    delta_dt, w, N, C, eps);
    else
        fast_rmsnorm_kernel<false><<<blocks, ROWS_PER_BLOCK * 32, 0, zt_cu.stream>>>(y, y_dt, rstd, x, delta,
                                                                                     delta_dt, w, N, C, eps);
    ZT_CU_LAUNCHED();
}

void zt_cu_fast_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                                float eps)
{
    /* x is only read without the residual */
    rmsnorm_launch(false, y, y_dt, rstd, (float *)x, NULL, ZT_F32, w, N, C, eps);
}

void zt_cu_fast_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt,
                                         float *rstd, const float *w, int N, int C, float eps)
{
    rmsnorm_launch(true, y, y_dt, rstd, x, delta, delta_dt, w, N, C, eps);
}

/* ---- RMSNorm backward ---------------------------------------------------------------- */

/* dx for row n, by the warp that owns it (lane: its columns c = lane, lane + 32, ...) */
__device__ __forceinline__ void rmsnorm_dx_row(float *dx, uint16_t *dx_bf16, const float *dy, const float *x,
                                               const float *w, float r, size_t o, int C, int lane)
{
    float dot = 0.0f; /* sum_c g xhat */
    for (int c = lane; c < C; c += 32) dot = fmaf(dy[o + c] * w[c], x[o + c] * r, dot);
    const float m = warp_sum_f(dot) / (float)C;
    for (int c = lane; c < C; c += 32) {
        const float d = dx[o + c] + r * (dy[o + c] * w[c] - x[o + c] * r * m);
        dx[o + c] = d;
        if (dx_bf16)
            dx_bf16[o + c] = zt_f32_to_bf16(d);
    }
}

/* The chunks that have written their partial dw (fast_rmsnorm_backward_kernel): the last
 * to arrive sums them and sets this back to 0 for the next launch (stream order). */
__device__ unsigned fast_rmsnorm_arrived;

/* The whole backward in one launch: block b owns the DW_ROWS rows of chunk b.  Its warps
 * write dx for those rows (a warp per row, ROWS_PER_BLOCK rows at a time), then its
 * threads write the chunk's partial dw, partial[b][c] = sum over the chunk's rows in
 * order of dy xhat (the rows it has just read: from L2, not from memory again); the last
 * block to arrive (a counter after a fence) adds the chunks in order into dw.  The same
 * sums in the same order as three launches would make: the same bits every run. */
__global__ void fast_rmsnorm_backward_kernel(float *dx, uint16_t *dx_bf16, float *dw, float *partial, const float *dy,
                                             const float *x, const float *w, const float *rstd, int N, int C)
{
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0 = blockIdx.x * DW_ROWS, n1 = n0 + DW_ROWS < N ? n0 + DW_ROWS : N;
    for (int n = n0 + warp; n < n1; n += ROWS_PER_BLOCK) /* warp-uniform */
        rmsnorm_dx_row(dx, dx_bf16, dy, x, w, rstd[n], (size_t)n * C, C, lane);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int n = n0; n < n1; n++) acc = fmaf(dy[(size_t)n * C + c], x[(size_t)n * C + c] * rstd[n], acc);
        partial[(size_t)blockIdx.x * C + c] = acc;
    }
    __threadfence(); /* this block's partials reach memory before its arrival is counted */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&fast_rmsnorm_arrived, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const volatile float *pv = partial; /* the other blocks' writes: past this SM's L1 */
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (unsigned k = 0; k < gridDim.x; k++) acc += pv[(size_t)k * C + c];
        dw[c] += acc;
    }
    if (threadIdx.x == 0)
        fast_rmsnorm_arrived = 0;
}

void zt_cu_fast_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float *dw, const float *dy, const float *x,
                                 const float *w, const float *rstd, int N, int C)
{
    if (N <= 0)
        return;
    const int nchunk = (N + DW_ROWS - 1) / DW_ROWS;
    float *partial = (float *)zt_cu_scratch((size_t)nchunk * C * sizeof(float));
    fast_rmsnorm_backward_kernel<<<(unsigned)nchunk, ROWS_PER_BLOCK * 32, 0, zt_cu.stream>>>(dx, dx_bf16, dw, partial,
                                                                                          dy, x, w, rstd, N, C);
    ZT_CU_LAUNCHED();
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

__global__ void fast_swiglu_forward_kernel(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
        zt_d_store(h, h_dt, k, g / (1.0f + __expf(-g)) * u);
    }
}

__global__ void fast_swiglu_backward_kernel(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const size_t ig = n * 2 * F + f, iu = ig + F;
        const float g = gu[ig], u = gu[iu], d = dh[k];
        const float e = 1.0f + __expf(-g);
        const float sig = 1.0f / e;
        zt_d_store(dgu, dgu_dt, ig, d * u * sig * (1.0f + g * (1.0f - sig)));
        zt_d_store(dgu, dgu_dt, iu, d * (g / e));
    }
}

void zt_cu_fast_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    fast_swiglu_forward_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, h_dt, gu, N, F);
    ZT_CU_LAUNCHED();
}

void zt_cu_fast_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    fast_swiglu_backward_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dgu_dt, dh, gu, N, F);
    ZT_CU_LAUNCHED();
}
