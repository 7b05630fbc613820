/* bias.cu — the bias of a linear layer on the device (bias.c).
 *
 * Forward: y[n, j] += b[j], b widened from its dtype, one thread per element.
 * Backward: db[j] = beta db[j] + sum over n of dy[n, j] (beta 0: 0 + the sum, db not
 * read, as bias.c), one thread per column summing the rows in order in fp32, as bias.c
 * does, so the result is the CPU's bits; neighbouring threads read neighbouring columns
 * of a row, so each row's reads are coalesced. */
#include "entries.cuh"

__global__ void bias_forward_kernel(float *y, const void *b, zt_dtype b_dt, int N, int D)
{
    const size_t total = (size_t)N * D;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x)
        y[k] += zt_d_load(b, b_dt, k % (size_t)D);
}

__global__ void bias_backward_kernel(float *db, bool add, const float *dy, int N, int D)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < D; j += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++)
            acc += dy[(size_t)n * D + j];
        db[j] = (add ? db[j] : 0.0f) + acc;
    }
}

void zt_cu_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D)
{
    const size_t total = (size_t)N * D;
    if (total == 0)
        return;
    bias_forward_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(y, b, b_dt, N, D);
    ZT_CU_LAUNCHED();
}

void zt_cu_bias_backward(float *db, float beta, const float *dy, int N, int D)
{
    if (D == 0)
        return;
    bias_backward_kernel<<<zt_cu_blocks((size_t)D), ZT_CU_THREADS, 0, zt_cu.stream>>>(db, beta != 0.0f, dy, N, D);
    ZT_CU_LAUNCHED();
}
