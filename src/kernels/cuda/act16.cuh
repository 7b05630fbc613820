/* act16.cuh — the bf16-activation kernels (backend.h's _act16 entries) that the exact
 * table (act16.cu, --fmad=false: act16.c's bits) and the fast table (fast_act16.cu, FMA
 * contraction and the hardware exp) both build: one body, instantiated by each file with
 * its own FAST, so neither links the other's code.  The launches are in those files
 * (tools/cuda_emu rewrites launches in .cu files only).
 *
 * RoPE fused into a rounding, one thread per pair (row, head < nh + nkv, i < hd/2), the
 * v heads' elements by the same threads' strided loop:
 *   y1 = bf16(x1 cos a - x2 s),  y2 = bf16(x2 cos a + x1 s),  s = sign sin a
 * (sign +1 forward, -1 backward: the rotation's transpose), v: y = bf16(x).
 * SwiGLU with gu in bf16 (swiglu.cu's expressions on the widened values):
 *   h = silu(g) u,  du = dh silu(g),  dg = dh u sigma (1 + g (1 - sigma)). */
#ifndef ZT_CUDA_ACT16_CUH
#define ZT_CUDA_ACT16_CUH

#include "entries.cuh"

namespace {

template <bool FAST>
__device__ __forceinline__ float act16_exp(float x)
{
    return FAST ? __expf(x) : zt_expf(x);
}

template <bool FAST>
__global__ void act16_rope_kernel(uint16_t *y, const float *x, const float *cos_t, const float *sin_t, int BT, int T,
                                  int nh, int nkv, int hd, float sign)
{
    const int half = hd / 2, nrot = nh + nkv;
    const size_t W = (size_t)(nh + 2 * nkv) * hd, pairs = (size_t)BT * nrot * half;
    const size_t vw = (size_t)nkv * hd, vtotal = (size_t)BT * vw; /* the v heads, only rounded */
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < pairs; k += stride) {
        const int i = (int)(k % half);
        const int h = (int)((k / half) % nrot);
        const size_t row = k / ((size_t)half * nrot);
        const int t = (int)(row % T);
        const size_t o1 = row * W + (size_t)h * hd + i, o2 = o1 + half;
        const float c = cos_t[(size_t)t * half + i], si = sign * sin_t[(size_t)t * half + i];
        const float a = x[o1], b = x[o2];
        y[o1] = zt_f32_to_bf16(a * c - b * si);
        y[o2] = zt_f32_to_bf16(b * c + a * si);
    }
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < vtotal; k += stride) {
        const size_t o = (k / vw) * W + (size_t)nrot * hd + k % vw;
        y[o] = zt_f32_to_bf16(x[o]);
    }
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

} // namespace

#endif
