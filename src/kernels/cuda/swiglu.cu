/* swiglu.cu — the SwiGLU gate on the device (kernels.h, swiglu.c).
 *
 * gu (N, 2F) = [g | u], h (N, F):  h = silu(g) * u,  silu(g) = g / (1 + exp(-g)).
 * Backward (dgu overwritten, in dgu_dt):
 *   du = dh * silu(g),   dg = dh * u * sigma * (1 + g (1 - sigma)),  sigma = 1 / (1 + exp(-g)).
 * exp is vmath.h's zt_expf (common.cuh) and the expressions are swiglu.c's, so every
 * output is the CPU's bits. */
#include "entries.cuh"

template <bool BF16>
__global__ void swiglu_forward_kernel(void *h, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
        const float v = (g / (1.0f + zt_expf(-g))) * u;
        if (BF16)
            ((uint16_t *)h)[k] = zt_f32_to_bf16(v);
        else
            ((float *)h)[k] = v;
    }
}

void zt_cu_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    if (h_dt == ZT_BF16)
        swiglu_forward_kernel<true><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, gu, N, F);
    else
        swiglu_forward_kernel<false><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, gu, N, F);
    ZT_CU_LAUNCHED();
}

template <bool BF16>
__global__ void swiglu_backward_kernel(void *dgu, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const size_t ig = n * 2 * F + f, iu = ig + F;
        const float g = gu[ig], u = gu[iu], d = dh[k];
        /* silu as the forward computes it, so du matches torch's dh * silu(g) */
        const float e = 1.0f + zt_expf(-g);
        const float sig = 1.0f / e;
        const float silu = g / e;
        const float du = d * silu;
        const float dg = d * u * sig * (1.0f + g * (1.0f - sig));
        if (BF16) {
            ((uint16_t *)dgu)[ig] = zt_f32_to_bf16(dg);
            ((uint16_t *)dgu)[iu] = zt_f32_to_bf16(du);
        } else {
            ((float *)dgu)[ig] = dg;
            ((float *)dgu)[iu] = du;
        }
    }
}

void zt_cu_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    if (dgu_dt == ZT_BF16)
        swiglu_backward_kernel<true><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dh, gu, N, F);
    else
        swiglu_backward_kernel<false><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dh, gu, N, F);
    ZT_CU_LAUNCHED();
}
