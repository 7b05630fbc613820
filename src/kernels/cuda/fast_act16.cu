/* fast_act16.cu — the fast table's RoPE-with-rounding and bf16-gu SwiGLU (fast.h; the
 * kernels in act16.cuh): FMA contraction allowed and the hardware exp (__expf, a few
 * ulp), within one bf16 rounding of the exact entries (act16.cu). */
#include "act16.cuh"
#include "fast.h"

/* the launches (act16.cuh's kernels, FAST = true) */
static void rope16(uint16_t *y, const float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                   int hd, float sign)
{
    const size_t total = (size_t)B * T * (nh + nkv) * (hd / 2);
    if (total == 0)
        return;
    act16_rope_kernel<true><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(y, x, cos_t, sin_t, B * T, T, nh,
                                                                                    nkv, hd, sign);
    ZT_CU_LAUNCHED();
}

static void swiglu16_forward(uint16_t *h, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    act16_swiglu_forward_kernel<true><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, gu, N, F);
    ZT_CU_LAUNCHED();
}

static void swiglu16_backward(uint16_t *dgu, const float *dh, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    act16_swiglu_backward_kernel<true><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dh, gu, N, F);
    ZT_CU_LAUNCHED();
}

void zt_cu_fast_rope_forward_act16(uint16_t *qkv16, const float *src, const float *cos_t, const float *sin_t, int B,
                                   int T, int nh, int nkv, int hd)
{
    rope16(qkv16, src, cos_t, sin_t, B, T, nh, nkv, hd, 1.0f);
}

void zt_cu_fast_rope_backward_act16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t,
                                    int B, int T, int nh, int nkv, int hd)
{
    rope16(dqkv16, dqkv, cos_t, sin_t, B, T, nh, nkv, hd, -1.0f);
}

void zt_cu_fast_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    swiglu16_forward(h16, gu16, N, F);
}

void zt_cu_fast_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    swiglu16_backward(dgu16, dh, gu16, N, F);
}
