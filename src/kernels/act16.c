/* act16.c — the bf16-activation entries on the host (act16.h).
 *
 * The qkv product: its fp32 sum, plus the bias, rounded once to bf16 (autocast's bf16
 * linear output), as cuBLASLt's BIAS epilogue computes it on the GPU.
 * RoPE is no pass of its own: the attention rotates q and k where it reads them (pair i
 * of each q and k head by a = pos f_i, rope.c's rotation of the widened bf16 values),
 * and its backward rotates dq and dk back (by -a, the rotation's transpose) before it
 * writes them, so the qkv the product wrote is what the backward's gradient is of.
 * SwiGLU: swiglu.c's expressions on the widened bf16 g and u (the one difference from
 * the exact entry: g and u were rounded to bf16 before, as autocast's linear output is).
 * Attention: the CPU table's kernels on widened copies (act16.h says why a temporary). */
#include "act16.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/mem.h"
#include "backend.h"
#include "fused.h"
#include "kernels.h"
#include "matmul.h"
#include "vmath.h"

int zt_linear_act16_run(const zt_backend *t, float *acc, uint16_t *y16, const void *x, zt_dtype x_dt, const void *w,
                        zt_dtype w_dt, const void *b, zt_dtype b_dt, int N, int out, int in, zt_dtype compute,
                        zt_err *err)
{
    if (zt_result_dtype_check("linear_act16", N, out, in, ZT_BF16, compute, err))
        return ZT_EINPUT;
    const int rc = t->matmul(acc, x, x_dt, w, w_dt, N, out, in, 0, 1, 0.0f, compute, err);
    if (rc)
        return rc;
    if (b)
        t->bias_forward(acc, b, b_dt, N, out);
    t->convert(y16, ZT_BF16, acc, ZT_F32, (size_t)N * (size_t)out);
    return ZT_OK;
}

void zt_attention_forward_act16_run(const zt_backend *t, float *qkv, float *out, uint16_t *out16, float *lse,
                                    const uint16_t *qkv16, const float *cos_t, const float *sin_t, void *scratch,
                                    int B, int T, int nh, int nkv, int hd, int window)
{
    t->convert(qkv, ZT_F32, qkv16, ZT_BF16, (size_t)B * T * (size_t)(nh + 2 * nkv) * hd);
    if (cos_t)
        t->rope_forward(qkv, cos_t, sin_t, B, T, nh, nkv, hd);
    t->attention_forward(out, out16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
}

void zt_attention_backward_act16_run(const zt_backend *t, float *qkv, float *out, float *g, uint16_t *dqkv16,
                                     const float *dout, const uint16_t *qkv16, const uint16_t *out16,
                                     const float *lse, const float *cos_t, const float *sin_t, void *scratch, int B,
                                     int T, int nh, int nkv, int hd, int window)
{
    const size_t n = (size_t)B * T, nq = n * (size_t)(nh + 2 * nkv) * hd, no = n * (size_t)nh * hd;
    t->convert(qkv, ZT_F32, qkv16, ZT_BF16, nq);
    t->convert(out, ZT_F32, out16, ZT_BF16, no);
    if (cos_t)
        t->rope_forward(qkv, cos_t, sin_t, B, T, nh, nkv, hd);
    t->attention_backward(g, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
    if (cos_t)
        t->rope_backward(g, cos_t, sin_t, B, T, nh, nkv, hd);
    if (dqkv16)
        t->convert(dqkv16, ZT_BF16, g, ZT_F32, nq);
}

/* an accounted fp32 temporary of n floats, NULL for n == 0; aborts naming who on
 * failure (act16.h: a test device's kernel) */
static float *temporary(size_t n, const char *who)
{
    if (n == 0)
        return NULL;
    float *w = zt_alloc(ZT_MEM_OTHER, n * sizeof(float));
    if (!w) {
        fprintf(stderr, "ztrain: %s: out of memory for a %zu-byte fp32 copy of its bf16 input\n", who,
                n * sizeof(float));
        abort();
    }
    return w;
}

int zt_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                    zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    const size_t n = (size_t)N * (size_t)out;
    float *acc = n ? zt_alloc(ZT_MEM_ACTIV, n * sizeof(float)) : NULL;
    if (n && !acc)
        return zt_fail(err, ZT_EFAIL, "out of memory for a %d x %d product", N, out);
    const int rc = zt_linear_act16_run(zt_backend_cpu(), acc, y16, x, x_dt, w, w_dt, b, b_dt, N, out, in, compute, err);
    if (acc)
        zt_free(ZT_MEM_ACTIV, acc, n * sizeof(float));
    return rc;
}

void zt_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                const float *sin_t, void *pack, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t n = (size_t)B * T, nq = n * (size_t)(nh + 2 * nkv) * hd, no = n * (size_t)nh * hd;
    float *qkv = temporary(nq, "attention_forward_act16");
    float *out = temporary(no, "attention_forward_act16");
    zt_attention_forward_act16_run(zt_backend_cpu(), qkv, out, out16, lse, qkv16, cos_t, sin_t, pack, B, T, nh, nkv,
                                   hd, window);
    zt_free(ZT_MEM_OTHER, out, no * sizeof(float));
    zt_free(ZT_MEM_OTHER, qkv, nq * sizeof(float));
}

void zt_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                 const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                 void *pack, int B, int T, int nh, int nkv, int hd, int window)
{
    const size_t n = (size_t)B * T, nq = n * (size_t)(nh + 2 * nkv) * hd, no = n * (size_t)nh * hd;
    float *qkv = temporary(nq, "attention_backward_act16");
    float *out = temporary(no, "attention_backward_act16");
    float *g = dqkv ? dqkv : temporary(nq, "attention_backward_act16"); /* the fp32 gradient */
    zt_attention_backward_act16_run(zt_backend_cpu(), qkv, out, g, dqkv16, dout, qkv16, out16, lse, cos_t, sin_t,
                                    pack, B, T, nh, nkv, hd, window);
    if (!dqkv)
        zt_free(ZT_MEM_OTHER, g, nq * sizeof(float));
    zt_free(ZT_MEM_OTHER, out, no * sizeof(float));
    zt_free(ZT_MEM_OTHER, qkv, nq * sizeof(float));
}

void zt_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *restrict g = gu16 + (size_t)n * 2 * F, *restrict u = g + F;
        uint16_t *restrict hr = h16 + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            const float gf = zt_bf16_to_f32(g[f]);
            hr[f] = zt_f32_to_bf16((gf / (1.0f + zt_expf(-gf))) * zt_bf16_to_f32(u[f]));
        }
    }
}

void zt_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    assert(N >= 0 && F > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *restrict g = gu16 + (size_t)n * 2 * F, *restrict u = g + F;
        const float *restrict dhr = dh + (size_t)n * F;
        uint16_t *restrict dg = dgu16 + (size_t)n * 2 * F, *restrict du = dg + F;
        for (int f = 0; f < F; f++) {
            /* swiglu.c's backward: sigma = 1 / (1 + e^-g), silu = g sigma,
             * du = dh silu,  dg = dh u sigma (1 + g (1 - sigma)) */
            const float gf = zt_bf16_to_f32(g[f]), uf = zt_bf16_to_f32(u[f]);
            const float e = 1.0f + zt_expf(-gf), sig = 1.0f / e, silu = gf / e;
            du[f] = zt_f32_to_bf16(dhr[f] * silu);
            dg[f] = zt_f32_to_bf16(dhr[f] * uf * sig * (1.0f + gf * (1.0f - sig)));
        }
    }
}
