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
#include "../matmul.h"
}

int zt_cu_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                       zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    if (compute != ZT_BF16)
        return zt_fail(err, ZT_EINPUT, "linear_act16 N=%d out=%d in=%d: a bf16 result needs bf16 compute (got %s)", N,
                       out, in, zt_dtype_name(compute));
    const size_t n = (size_t)N * out;
    zt_mm_work work;
    const int bad = zt_matmul_check_args((const float *)y16, x, x_dt, w, w_dt, N, out, in, 0.0f, compute, &work, err);
    if (bad || work == ZT_MM_NOTHING)
        return bad;
    float *acc = (float *)zt_cu_scratch(n * sizeof(float));
    const int rc = zt_cu_matmul(acc, x, x_dt, w, w_dt, N, out, in, 0, 1, 0.0f, compute, err);
    if (rc)
        return rc;
    if (b)
        zt_cu_bias_forward(acc, b, b_dt, N, out);
    zt_cu_convert(y16, ZT_BF16, acc, ZT_F32, n);
    return ZT_OK;
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
    zt_cu_convert(qkv, ZT_F32, qkv16, ZT_BF16, nq);
    if (cos_t)
        zt_cu_rope_forward(qkv, cos_t, sin_t, B, T, nh, nkv, hd);
    zt_cu_attention_forward(out, out16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
}

void zt_cu_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                    const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                    void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t nq = (size_t)B * T * (nh + 2 * nkv) * hd, no = (size_t)B * T * nh * hd;
    float *qkv = (float *)zt_cu_scratch((nq + no + (dqkv ? 0 : nq)) * sizeof(float)), *out = qkv + nq;
    float *g = dqkv ? dqkv : out + no; /* the fp32 gradient: the caller's, or scratch */
    zt_cu_convert(qkv, ZT_F32, qkv16, ZT_BF16, nq);
    zt_cu_convert(out, ZT_F32, out16, ZT_BF16, no);
    if (cos_t)
        zt_cu_rope_forward(qkv, cos_t, sin_t, B, T, nh, nkv, hd);
    zt_cu_attention_backward(g, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
    if (cos_t)
        zt_cu_rope_backward(g, cos_t, sin_t, B, T, nh, nkv, hd);
    if (dqkv16)
        zt_cu_convert(dqkv16, ZT_BF16, g, ZT_F32, nq);
}
