/* reductions.cu — the engine's passes over flat gradient buffers on the device
 * (reductions.h): accumulation, rounding to bf16 and sums of squares.
 *
 * Sums of squares are taken in double, as on the CPU: each thread sums its
 * grid-stride elements, each block sums its threads (zt_d_block_sum), and
 * zt_cu_sum_doubles sums the blocks' partials in one block.  The grid depends on n
 * only (zt_cu_blocks), so the order of every addition, and the result, is the same
 * on every run; against the CPU it differs only in the order of double additions
 * (relative difference ~1e-15). */
#include "entries.cuh"

#define SUM_THREADS 1024

/* where sum_doubles_kernel leaves its result for the host */
__device__ double sum_result;

/* partials[0..n) summed by one block of SUM_THREADS */
__global__ void sum_doubles_kernel(const double *partials, int n)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += partials[i];
    s = zt_d_block_sum(s, sh);
    if (threadIdx.x == 0)
        sum_result = s;
}

/* dst[r] (+)= the sum of row r of partials (rows of n), for each of `rows` rows */
__global__ void sum_doubles_into_kernel(double *dst, const double *partials, int n, int rows, int add)
{
    __shared__ double sh[32];
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            s += partials[(size_t)r * n + i];
        s = zt_d_block_sum(s, sh);
        if (threadIdx.x == 0)
            dst[r] = add ? dst[r] + s : s;
    }
}

void zt_cu_sum_doubles_into(double *dst, const double *partials, int n, int add)
{
    zt_cu_sum_rows_into(dst, partials, n, 1, add);
}

void zt_cu_sum_rows_into(double *dst, const double *partials, int n, int rows, int add)
{
    sum_doubles_into_kernel<<<1, SUM_THREADS, 0, zt_cu.stream>>>(dst, partials, n, rows, add);
    ZT_CU_LAUNCHED();
}

double zt_cu_sum_doubles(const double *dev, int n)
{
    sum_doubles_kernel<<<1, SUM_THREADS, 0, zt_cu.stream>>>(dev, n);
    ZT_CU_LAUNCHED();
    double h = 0.0;
    ZT_CU(cudaMemcpyFromSymbolAsync(&h, sum_result, sizeof h, 0, cudaMemcpyDeviceToHost, zt_cu.stream));
    ZT_CU(cudaStreamSynchronize(zt_cu.stream));
    return h;
}

__global__ void sumsq_kernel(double *partials, const void *x, zt_dtype dt, size_t n)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = zt_d_load(x, dt, i);
        s += v * v;
    }
    s = zt_d_block_sum(s, sh);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s;
}

double zt_cu_sumsq(const void *x, zt_dtype dt, size_t n)
{
    if (n == 0)
        return 0.0;
    const unsigned nb = zt_cu_blocks(n);
    double *partials = (double *)zt_cu_scratch(nb * sizeof(double));
    sumsq_kernel<<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(partials, x, dt, n);
    ZT_CU_LAUNCHED();
    return zt_cu_sum_doubles(partials, (int)nb);
}

/* acc[i] += x[i]: the fp32 sum, stored in acc's dtype (a 16-bit acc is rounded once) */
__global__ void accumulate_kernel(void *acc, zt_dtype ad, const void *x, zt_dtype xd, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zt_d_store(acc, ad, i, zt_d_load(acc, ad, i) + zt_d_load(x, xd, i));
}

__global__ void accumulate_f32_kernel(float *acc, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] += x[i];
}

void zt_cu_accumulate(void *acc, zt_dtype ad, const void *x, zt_dtype xd, size_t n)
{
    if (n == 0)
        return;
    if (ad == ZT_F32 && xd == ZT_F32)
        accumulate_f32_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>((float *)acc, (const float *)x, n);
    else
        accumulate_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(acc, ad, x, xd, n);
    ZT_CU_LAUNCHED();
}

/* round_acc: acc's own rounding, left pending by the engine, done as it is read */
__global__ void accumulate_bf16_rounded_kernel(float *acc, bool round_acc, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float a = acc[i];
        acc[i] = (round_acc ? zt_round_bf16(a) : a) + zt_round_bf16(x[i]);
    }
}

void zt_cu_accumulate_bf16_rounded(float *acc, int round_acc, const float *x, size_t n)
{
    if (n == 0)
        return;
    accumulate_bf16_rounded_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(acc, round_acc != 0, x, n);
    ZT_CU_LAUNCHED();
}

/* WRITE: x = bf16(x); with partials, also the blocks' sums of squares of the rounded
 * values (without WRITE only those: x is read, never written) */
template <bool WRITE>
__global__ void round_bf16_kernel(float *x, size_t n, double *partials)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float r = zt_round_bf16(x[i]);
        if (WRITE)
            x[i] = r;
        s += (double)r * (double)r;
    }
    if (partials) {
        s = zt_d_block_sum(s, sh);
        if (threadIdx.x == 0)
            partials[blockIdx.x] = s;
    }
}

double zt_cu_round_bf16(float *x, size_t n, int want_sumsq)
{
    if (n == 0)
        return 0.0;
    const unsigned nb = zt_cu_blocks(n);
    double *partials = want_sumsq ? (double *)zt_cu_scratch(nb * sizeof(double)) : NULL;
    round_bf16_kernel<true><<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(x, n, partials);
    ZT_CU_LAUNCHED();
    return want_sumsq ? zt_cu_sum_doubles(partials, (int)nb) : 0.0;
}

/* ---- the asynchronous step (step_scalars.h): the same kernels, results left on the device */

void zt_cu_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n)
{
    if (n == 0) {
        ZT_CU(cudaMemsetAsync(dst, 0, sizeof *dst, zt_cu.stream));
        return;
    }
    const unsigned nb = zt_cu_blocks(n);
    double *partials = (double *)zt_cu_scratch(nb * sizeof(double));
    sumsq_kernel<<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(partials, x, dt, n);
    ZT_CU_LAUNCHED();
    zt_cu_sum_doubles_into(dst, partials, (int)nb, 0);
}

void zt_cu_sumsq_bf16_into(double *dst, const float *x, size_t n)
{
    if (n == 0) {
        ZT_CU(cudaMemsetAsync(dst, 0, sizeof *dst, zt_cu.stream));
        return;
    }
    const unsigned nb = zt_cu_blocks(n);
    double *partials = (double *)zt_cu_scratch(nb * sizeof(double));
    /* read only: the kernel's store is compiled out (WRITE false) */
    round_bf16_kernel<false><<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(const_cast<float *>(x), n, partials);
    ZT_CU_LAUNCHED();
    zt_cu_sum_doubles_into(dst, partials, (int)nb, 0);
}

/* one thread: the engine's verdict rule (step_scalars.h), where the sums are */
__global__ void step_verdict_kernel(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                                    double grad_unscale)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        zt_step_verdict(sc, unit_sumsq, nunits, max_grad_norm, grad_unscale);
}

void zt_cu_step_verdict(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                        double grad_unscale)
{
    step_verdict_kernel<<<1, 32, 0, zt_cu.stream>>>(sc, unit_sumsq, nunits, max_grad_norm, grad_unscale);
    ZT_CU_LAUNCHED();
}
