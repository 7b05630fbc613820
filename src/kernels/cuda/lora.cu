/* lora.cu — LoRA's scale on the device (backend.h's scale_add; reductions.c's
 * zt_scale_add): y[i ldy + j] += a * x[i ldx + j] over a block of rows x cols, one thread
 * per element.  The product is rounded before the sum (this file builds with
 * --fmad=false, and each element is one multiply and one add), so the result is the
 * CPU's bits. */
#include "entries.cuh"

__global__ void scale_add_kernel(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols)
{
    const size_t total = (size_t)rows * (size_t)cols;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / (size_t)cols, j = k % (size_t)cols;
        const float p = a * x[i * ldx + j];
        y[i * ldy + j] += p;
    }
}

void zt_cu_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols)
{
    const size_t total = (size_t)rows * (size_t)cols;
    if (total == 0)
        return;
    scale_add_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(y, ldy, a, x, ldx, rows, cols);
    ZT_CU_LAUNCHED();
}
