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

/* The per-element expressions, on the widened bf16 values (swiglu.cu's) */
template <bool FAST>
__device__ __forceinline__ uint16_t act16_h(uint16_t g16, uint16_t u16)
{
    const float g = zt_bf16_to_f32(g16), u = zt_bf16_to_f32(u16);
    return zt_f32_to_bf16((g / (1.0f + act16_exp<FAST>(-g))) * u);
}

template <bool FAST>
__device__ __forceinline__ void act16_d(float d, uint16_t g16, uint16_t u16, uint16_t *dg, uint16_t *du)
{
    const float g = zt_bf16_to_f32(g16), u = zt_bf16_to_f32(u16);
    const float e = 1.0f + act16_exp<FAST>(-g);
    const float sig = 1.0f / e;
    const float silu = g / e;
    *du = zt_f32_to_bf16(d * silu);
    *dg = zt_f32_to_bf16(d * u * sig * (1.0f + g * (1.0f - sig)));
}

/* VEC consecutive elements at p: VEC 8, one 16-byte load or store (p 16-byte aligned:
 * the launcher's rule); VEC 1, one element.  bf16 pairs sit in a 32-bit word low
 * address first (little-endian, on the GPU and on the host alike). */
template <int VEC>
__device__ __forceinline__ void act16_load(const uint16_t *p, uint16_t *e)
{
    if (VEC == 8) {
        const uint4 v = *(const uint4 *)p;
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) e[2 * i] = (uint16_t)(w[i] & 0xffffu), e[2 * i + 1] = (uint16_t)(w[i] >> 16);
    } else {
        e[0] = p[0];
    }
}

template <int VEC>
__device__ __forceinline__ void act16_store(uint16_t *p, const uint16_t *e)
{
    if (VEC == 8) {
        uint4 v;
        v.x = e[0] | (uint32_t)e[1] << 16, v.y = e[2] | (uint32_t)e[3] << 16;
        v.z = e[4] | (uint32_t)e[5] << 16, v.w = e[6] | (uint32_t)e[7] << 16;
        *(uint4 *)p = v;
    } else {
        p[0] = e[0];
    }
}

template <int VEC>
__device__ __forceinline__ void act16_load_f32(const float *p, float *e)
{
    if (VEC == 8) {
        const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w, e[4] = b.x, e[5] = b.y, e[6] = b.z, e[7] = b.w;
    } else {
        e[0] = p[0];
    }
}

/* Geometry: x over a row's columns in groups of VEC (f = VEC (blockIdx.x blockDim.x +
 * threadIdx.x)), y over the rows with a stride of gridDim.y: 32-bit column indices and no
 * divide or modulo per element (a flat index over N F would need both, in 64 bits). */
template <bool FAST, int VEC>
__global__ void act16_swiglu_forward_kernel(uint16_t *h, const uint16_t *gu, int N, int F)
{
    const int f = VEC * (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (f >= F)
        return;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        const uint16_t *g = gu + (size_t)n * 2 * F + f;
        uint16_t ge[VEC], ue[VEC], he[VEC];
        act16_load<VEC>(g, ge), act16_load<VEC>(g + F, ue);
#pragma unroll
        for (int j = 0; j < VEC; j++) he[j] = act16_h<FAST>(ge[j], ue[j]);
        act16_store<VEC>(h + (size_t)n * F + f, he);
    }
}

template <bool FAST, int VEC>
__global__ void act16_swiglu_backward_kernel(uint16_t *dgu, const float *dh, const uint16_t *gu, int N, int F)
{
    const int f = VEC * (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (f >= F)
        return;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        const size_t ig = (size_t)n * 2 * F + f;
        uint16_t ge[VEC], ue[VEC], dg[VEC], du[VEC];
        float d[VEC];
        act16_load<VEC>(gu + ig, ge), act16_load<VEC>(gu + ig + F, ue), act16_load_f32<VEC>(dh + (size_t)n * F + f, d);
#pragma unroll
        for (int j = 0; j < VEC; j++) act16_d<FAST>(d[j], ge[j], ue[j], &dg[j], &du[j]);
        act16_store<VEC>(dgu + ig, dg), act16_store<VEC>(dgu + ig + F, du);
    }
}

/* 16-byte vectors where every row and pointer allows them (F a multiple of 8: the
 * Llama shapes), one element a thread otherwise */
static inline bool act16_vec8(int F, const void *a, const void *b, const void *c)
{
    return F % 8 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* blocks of ZT_CU_THREADS over a row's F / VEC groups, and rows over y (at most 65535:
 * the rest by the stride) */
static inline dim3 act16_grid(int N, int F, int vec)
{
    const int groups = (F + vec - 1) / vec;
    return dim3((unsigned)((groups + ZT_CU_THREADS - 1) / ZT_CU_THREADS), (unsigned)(N < 65535 ? N : 65535));
}

/* the launchers */
template <bool FAST>
void act16_swiglu_forward(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    if (N <= 0 || F <= 0)
        return;
    const bool vec = act16_vec8(F, h16, gu16, gu16);
    /* through a pointer: a template's comma would split the macro's arguments */
    const auto kernel = vec ? act16_swiglu_forward_kernel<FAST, 8> : act16_swiglu_forward_kernel<FAST, 1>;
    ACT16_LAUNCH(kernel, act16_grid(N, F, vec ? 8 : 1))(h16, gu16, N, F);
    ZT_CU_LAUNCHED();
}

template <bool FAST>
void act16_swiglu_backward(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    if (N <= 0 || F <= 0)
        return;
    const bool vec = act16_vec8(F, dgu16, dh, gu16);
    /* through a pointer: a template's comma would split the macro's arguments */
    const auto kernel = vec ? act16_swiglu_backward_kernel<FAST, 8> : act16_swiglu_backward_kernel<FAST, 1>;
    ACT16_LAUNCH(kernel, act16_grid(N, F, vec ? 8 : 1))(dgu16, dh, gu16, N, F);
    ZT_CU_LAUNCHED();
}

} // namespace

#endif
