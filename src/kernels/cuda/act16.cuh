/* act16.cuh — the bf16-activation SwiGLU (backend.h's swiglu_*_act16) that the exact
 * table (act16.cu, --fmad=false: act16.c's bits) and the fast table (fast_act16.cu, FMA
 * contraction and the hardware exp) both build: one body and one pair of launchers,
 * instantiated by each file with its own FAST, so neither links the other's code (the
 * Makefile compiles the two files with different --fmad).
 *
 * SwiGLU with gu in bf16 (swiglu.cu's expressions on the widened values):
 *   h = silu(g) u,  du = dh silu(g),  dg = dh u sigma (1 + g (1 - sigma)).
 * (RoPE has no kernel here: the attention rotates q and k where it reads them,
 * fast_attention.cu, and the exact table's composition runs rope.cu, act16.cu.) */
#ifndef ZT_CUDA_ACT16_CUH
#define ZT_CUDA_ACT16_CUH

#include "entries.cuh"

/* A launch written once for nvcc and for tools/cuda_emu, which rewrites the <<<...>>> of
 * .cu files only (run.sh) and would leave a header's as it is. */
#ifdef ZT_CUDA_EMU
#define ACT16_LAUNCH(kernel, blocks) zt_emu_launch(kernel, blocks, ZT_CU_THREADS, 0, zt_cu.stream)
#else
#define ACT16_LAUNCH(kernel, blocks) kernel<<<blocks, ZT_CU_THREADS, 0, zt_cu.stream>>>
#endif

namespace {

template <bool FAST>
__device__ __forceinline__ float act16_exp(float x)
{
    return FAST ? __expf(x) : zt_expf(x);
}

template <bool FAST>
__global__ void act16_swiglu_forward_kernel(uint16_t *h, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const float g = zt_bf16_to_f32(gu[n * 2 * F + f]), u = zt_bf16_to_f32(gu[n * 2 * F + F + f]);
        h[k] = zt_f32_to_bf16((g / (1.0f + act16_exp<FAST>(-g))) * u);
    }
}

template <bool FAST>
__global__ void act16_swiglu_backward_kernel(uint16_t *dgu, const float *dh, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const size_t ig = n * 2 * F + f, iu = ig + F;
        const float g = zt_bf16_to_f32(gu[ig]), u = zt_bf16_to_f32(gu[iu]), d = dh[k];
        const float e = 1.0f + act16_exp<FAST>(-g);
        const float sig = 1.0f / e;
        const float silu = g / e;
        dgu[iu] = zt_f32_to_bf16(d * silu);
        dgu[ig] = zt_f32_to_bf16(d * u * sig * (1.0f + g * (1.0f - sig)));
    }
}

/* the launchers: one thread per (row, f), a grid-stride loop */
template <bool FAST>
void act16_swiglu_forward(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    ACT16_LAUNCH(act16_swiglu_forward_kernel<FAST>, zt_cu_blocks(total))(h16, gu16, N, F);
    ZT_CU_LAUNCHED();
}

template <bool FAST>
void act16_swiglu_backward(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    ACT16_LAUNCH(act16_swiglu_backward_kernel<FAST>, zt_cu_blocks(total))(dgu16, dh, gu16, N, F);
    ZT_CU_LAUNCHED();
}

} // namespace

#endif
