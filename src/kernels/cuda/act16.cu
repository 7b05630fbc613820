/* act16.cu — the exact table's bf16-activation entries (backend.h's _act16, act16.c on
 * the host): RoPE fused into the rounding and SwiGLU over bf16 gu (act16.cuh, built with
 * --fmad=false: act16.c's bits), and the attention over bf16 qkv and out as the exact
 * kernels on fp32 copies widened into the entries' scratch (zt_cu_scratch).  The model
 * calls these in fast mode only (the fast table has its own, fast_act16.cu and
 * fast_attention.cu); in the exact table they are the composition the fast ones answer
 * to (kernels_check, group fast-act16). */
#include "act16.cuh"

/* the launches (act16.cuh's kernels, FAST = false) */
static void rope16(uint16_t *y, const float *x, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                   int hd, float sign)
{
    const size_t total = (size_t)B * T * (nh + nkv) * (hd / 2);
    if (total == 0)
        return;
    act16_rope_kernel<false><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(y, x, cos_t, sin_t, B * T, T, nh,
                                                                                    nkv, hd, sign);
    ZT_CU_LAUNCHED();
}

static void swiglu16_forward(uint16_t *h, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    act16_swiglu_forward_kernel<false><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, gu, N, F);
    ZT_CU_LAUNCHED();
}

static void swiglu16_backward(uint16_t *dgu, const float *dh, const uint16_t *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    act16_swiglu_backward_kernel<false><<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dh, gu, N, F);
    ZT_CU_LAUNCHED();
}

void zt_cu_rope_forward_act16(uint16_t *qkv16, const float *src, const float *cos_t, const float *sin_t, int B, int T,
                              int nh, int nkv, int hd)
{
    rope16(qkv16, src, cos_t, sin_t, B, T, nh, nkv, hd, 1.0f);
}

void zt_cu_rope_backward_act16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t, int B,
                               int T, int nh, int nkv, int hd)
{
    rope16(dqkv16, dqkv, cos_t, sin_t, B, T, nh, nkv, hd, -1.0f);
}

void zt_cu_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    swiglu16_forward(h16, gu16, N, F);
}

void zt_cu_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    swiglu16_backward(dgu16, dh, gu16, N, F);
}

void zt_cu_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, void *scratch, int B, int T,
                                   int nh, int nkv, int hd, int window)
{
    const size_t nq = (size_t)B * T * (nh + 2 * nkv) * hd, no = (size_t)B * T * nh * hd;
    float *qkv = (float *)zt_cu_scratch((nq + no) * sizeof(float)), *out = qkv + nq;
    zt_cu_convert(qkv, ZT_F32, qkv16, ZT_BF16, nq);
    zt_cu_attention_forward(out, out16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
}

void zt_cu_attention_backward_act16(float *dqkv, const float *dout, const uint16_t *qkv16, const uint16_t *out16,
                                    const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t nq = (size_t)B * T * (nh + 2 * nkv) * hd, no = (size_t)B * T * nh * hd;
    float *qkv = (float *)zt_cu_scratch((nq + no) * sizeof(float)), *out = qkv + nq;
    zt_cu_convert(qkv, ZT_F32, qkv16, ZT_BF16, nq);
    zt_cu_convert(out, ZT_F32, out16, ZT_BF16, no);
    zt_cu_attention_backward(dqkv, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
}
