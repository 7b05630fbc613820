/* act16.cu — the exact table's bf16-activation entries (backend.h's _act16, act16.c on
 * the host): the qkv product with its bias as matmul, bias_forward and one rounding; the
 * attention over bf16 qkv and out as the exact kernels on fp32 copies widened into the
 * entries' scratch (zt_cu_scratch), q and k rotated there by rope.cu and the gradient
 * rotated back there; SwiGLU over bf16 gu (act16.cuh, built with --fmad=false: act16.c's
 * bits).  The model calls these in fast mode only (the fast table has its own,
 * fast_act16.cu, fast_attention.cu and matmul.cu's); in the exact table they are the
 * compositions the fast ones answer to (kernels_check, groups fast-act16, fast-matmul). */
#include "act16.cuh"

extern "C" {
#include "../backend_cuda.h"
}
#include "../act16.h"

/* act16.h's compositions over this, the exact, table's entries, in the entries' scratch */
int zt_cu_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                       zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    float *acc = (float *)zt_cu_scratch((size_t)N * out * sizeof(float));
    return zt_linear_act16_run(zt_backend_cuda_mode(ZT_KERNELS_EXACT), acc, y16, x, x_dt, w, w_dt, b, b_dt, N, out,
                               in, compute, err);
}

void zt_cu_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    act16_swiglu_forward<false>(h16, gu16, N, F);
}

void zt_cu_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    act16_swiglu_backward<false>(dgu16, dh, gu16, N, F);
}

void zt_cu_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                   const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t nq = (size_t)B * T * (nh + 2 * nkv) * hd, no = (size_t)B * T * nh * hd;
    float *qkv = (float *)zt_cu_scratch((nq + no) * sizeof(float)), *out = qkv + nq;
    zt_attention_forward_act16_run(zt_backend_cuda_mode(ZT_KERNELS_EXACT), qkv, out, out16, lse, qkv16, cos_t, sin_t,
                                   scratch, B, T, nh, nkv, hd, window);
}

void zt_cu_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                    const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                    void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t nq = (size_t)B * T * (nh + 2 * nkv) * hd, no = (size_t)B * T * nh * hd;
    float *qkv = (float *)zt_cu_scratch((nq + no + (dqkv ? 0 : nq)) * sizeof(float)), *out = qkv + nq;
    float *g = dqkv ? dqkv : out + no; /* the fp32 gradient: the caller's, or scratch */
    zt_attention_backward_act16_run(zt_backend_cuda_mode(ZT_KERNELS_EXACT), qkv, out, g, dqkv16, dout, qkv16, out16,
                                    lse, cos_t, sin_t, scratch, B, T, nh, nkv, hd, window);
}
