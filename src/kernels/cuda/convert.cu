/* convert.cu — n elements from one dtype to another on the device (zt_convert):
 * round to nearest even through common.cuh's conversions, which are dtype.h's bit
 * for bit; the same dtype is a copy. */
#include "entries.cuh"

__global__ void convert_kernel(void *dst, zt_dtype dd, const void *src, zt_dtype sd, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zt_d_store(dst, dd, i, zt_d_load(src, sd, i));
}

/* the common pair, without the switch per element */
__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = zt_f32_to_bf16(src[i]);
}

void zt_cu_convert(void *dst, zt_dtype dd, const void *src, zt_dtype sd, size_t n)
{
    if (n == 0)
        return;
    if (dd == sd) {
        ZT_CU(cudaMemcpyAsync(dst, src, n * zt_dtype_size(dd), cudaMemcpyDeviceToDevice, zt_cu.stream));
        return;
    }
    if (sd == ZT_F32 && dd == ZT_BF16)
        f32_to_bf16_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>((uint16_t *)dst, (const float *)src, n);
    else
        convert_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(dst, dd, src, sd, n);
    ZT_CU_LAUNCHED();
}
