/* test_act16.c — the bf16-activation entries of backend.h on the host (act16.c), each
 * against the exact composition of the CPU table's entries it stands for:
 *   - on the same bf16 inputs (widened) the composition's bits: the _act16 entry only
 *     moves where the rounding happens (RoPE into the rounding of the product's result,
 *     the attention and SwiGLU reading bf16 instead of fp32 copies);
 *   - against the fp32 path on the unrounded inputs (exact mode's activations) within
 *     bf16 error, the difference autocast's bf16 activations make: inputs rounded to
 *     bf16 (2^-9 relative each) move an output by a few of those, so the bound is
 *     2^-6 of the output's scale (max |got - want| / max(|want|, rms(want))); for the
 *     attention 2^-5, as its scores s = q.k / sqrt(hd) carry both operands' rounding
 *     times |s| (up to about 4 for unit-normal q and k) into the softmax's exponent,
 *     and the backward multiplies that by dout.v again; for dqkv 2^-4, as q and k are
 *     now rounded twice where the exact path with bf16 operands rounds them once (the
 *     product's bf16 result, then the rotated value as the attention's bf16 operand:
 *     measured 0.045 at hd 32, T 70, where rotating the fp32 result and rounding once
 *     gave 0.021; autocast rounds them four times, its bf16 RoPE rounding each of its
 *     three operations).  A wrong rotation, index or sign is off by O(1).
 * The CUDA entries answer to the same compositions on the device (kernels_check's
 * fast-act16 group). */
#include <stdint.h>
#include <string.h>

#include "../src/core/dtype.h"
#include "../src/core/rng.h"
#include "../src/kernels/backend.h"
#include "test.h"

#define ACT16_TOL (1.0 / 64)
#define ACT16_ATTN_TOL (1.0 / 32)
#define ACT16_ATTN_GRAD_TOL (1.0 / 16)

static uint64_t rng = 20261204;

static float *randn(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)zt_rand_normal(&rng) * scale;
    return x;
}

static uint16_t *bf16_of(const float *x, size_t n)
{
    uint16_t *y = malloc(n * sizeof *y);
    zt_convert(y, ZT_BF16, x, ZT_F32, n);
    return y;
}

static float *f32_of(const uint16_t *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    zt_convert(y, ZT_F32, x, ZT_BF16, n);
    return y;
}

/* max_i |a_i - b_i| / max(|b_i|, rms(b)), a and b in dt */
static double rel_err(const void *a, const void *b, zt_dtype dt, size_t n)
{
    double ss = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)zt_load_f32(b, dt, i) * zt_load_f32(b, dt, i);
    double floor_ = n ? sqrt(ss / (double)n) : 1.0;
    for (size_t i = 0; i < n; i++) {
        double x = zt_load_f32(a, dt, i), y = zt_load_f32(b, dt, i);
        double s = fabs(y) > floor_ ? fabs(y) : floor_, e = fabs(x - y) / s;
        if (!(e <= worst)) /* NaN too */
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* linear_act16 against matmul, bias_forward and convert (with a bias), and matmul_out's
 * bf16 result (without); fp32 compute refused */
static void test_linear_act16(void)
{
    const zt_backend *be = zt_backend_cpu();
    const int N = 7, out = 24, in = 33;
    const size_t ny = (size_t)N * out;
    float *x = randn((size_t)N * in, 1.0f), *w = randn((size_t)out * in, 0.3f), *b = randn(out, 1.0f);
    uint16_t *x16 = bf16_of(x, (size_t)N * in), *w16 = bf16_of(w, (size_t)out * in), *b16 = bf16_of(b, out);
    float *acc = malloc(ny * 4);
    uint16_t *got = malloc(ny * 2), *want = malloc(ny * 2);
    zt_err err = {0};
    for (int bias = 0; bias < 2; bias++) {
        memset(got, 0xff, ny * 2);
        ZT_CHECK(be->linear_act16(got, x16, ZT_BF16, w16, ZT_BF16, bias ? b16 : NULL, ZT_BF16, N, out, in, ZT_BF16,
                                  &err) == ZT_OK);
        ZT_CHECK(be->matmul(acc, x16, ZT_BF16, w16, ZT_BF16, N, out, in, 0, 1, 0.0f, ZT_BF16, &err) == ZT_OK);
        if (bias)
            be->bias_forward(acc, b16, ZT_BF16, N, out);
        be->convert(want, ZT_BF16, acc, ZT_F32, ny);
        ZT_CHECK_MSG(same_bits(got, want, ny * 2), "linear_act16 (bias %d) differs from matmul + bias + convert",
                     bias);
    }
    /* the bias is really added: the result differs from the product without it */
    ZT_CHECK(be->matmul_out(want, ZT_BF16, NULL, x16, ZT_BF16, w16, ZT_BF16, N, out, in, 0, 1, ZT_BF16, &err) ==
             ZT_OK);
    ZT_CHECK(!same_bits(got, want, ny * 2));
    ZT_CHECK(be->linear_act16(got, x, ZT_F32, w, ZT_F32, NULL, ZT_F32, N, out, in, ZT_F32, &err) == ZT_EINPUT);
    free(x), free(w), free(b), free(x16), free(w16), free(b16), free(acc), free(got), free(want);
}

static void test_swiglu_act16(void)
{
    const zt_backend *be = zt_backend_cpu();
    const int N = 13, F = 70;
    const size_t n = (size_t)N * F;
    float *gu = randn(2 * n, 2.0f), *dh = randn(n, 1.0f);
    uint16_t *gu16 = bf16_of(gu, 2 * n);
    float *guw = f32_of(gu16, 2 * n); /* the bf16 values, widened */
    uint16_t *h = malloc(n * 2), *hw = malloc(n * 2), *h32 = malloc(n * 2);
    uint16_t *dg = malloc(4 * n), *dgw = malloc(4 * n), *dg32 = malloc(4 * n);
    be->swiglu_forward_act16(h, gu16, N, F);
    be->swiglu_backward_act16(dg, dh, gu16, N, F);
    be->swiglu_forward(hw, ZT_BF16, guw, N, F);
    be->swiglu_backward(dgw, ZT_BF16, dh, guw, N, F);
    be->swiglu_forward(h32, ZT_BF16, gu, N, F);
    be->swiglu_backward(dg32, ZT_BF16, dh, gu, N, F);
    ZT_CHECK_MSG(same_bits(h, hw, n * 2), "swiglu_forward_act16 differs from swiglu on the widened gu");
    ZT_CHECK_MSG(same_bits(dg, dgw, n * 4), "swiglu_backward_act16 differs from swiglu on the widened gu");
    double ef = rel_err(h, h32, ZT_BF16, n), eb = rel_err(dg, dg32, ZT_BF16, 2 * n);
    ZT_CHECK_MSG(ef <= ACT16_TOL && eb <= ACT16_TOL, "vs fp32 gu: forward %.3g, backward %.3g > %.3g", ef, eb,
                 ACT16_TOL);
    printf("     swiglu act16 vs fp32 gu: forward %.2g, backward %.2g (bound %.3g)\n", ef, eb, ACT16_TOL);
    free(gu), free(dh), free(gu16), free(guw), free(h), free(hw), free(h32), free(dg), free(dgw), free(dg32);
}

/* attention_forward_act16 / attention_backward_act16, RoPE in them, with and without the
 * bf16-operand pack (head size 32: attention16.c; 16: the fp32 kernel): qkv16 is the
 * product's bf16 result before RoPE, which the entries rotate where they read q and k
 * and whose gradient they write (rotated back); T 70 spans more than one 64-row tile of
 * the GPU kernels. */
static void attention_case(int hd, int window)
{
    const zt_backend *be = zt_backend_cpu();
    const int B = 2, T = 70, nh = 4, nkv = 2;
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nq = (size_t)B * T * W, no = (size_t)B * T * nh * hd;
    const size_t nl = (size_t)B * nh * T, ps = be->attention_scratch_bytes(B, T, nh, nkv, hd, ZT_BF16);
    const size_t nt = (size_t)T * hd / 2;
    void *pack = ps ? malloc(ps) : NULL;
    float *c = malloc(nt * 4), *s = malloc(nt * 4);
    const zt_rope_freqs f = {10000.0f, 0, 0, 0, 0, 0};
    be->rope_tables(c, s, T, hd, &f);
    float *qkv = randn(nq, 1.0f), *dout = randn(no, 1.0f);
    uint16_t *q16 = bf16_of(qkv, nq);
    /* the act16 entries: fp32 and bf16 gradients, and the bf16 one alone */
    uint16_t *o16 = malloc(no * 2), *dq16 = malloc(nq * 2), *dq16b = malloc(nq * 2);
    float *lse = malloc(nl * 4), *dq = malloc(nq * 4);
    be->attention_forward_act16(o16, lse, q16, c, s, pack, B, T, nh, nkv, hd, window);
    be->attention_backward_act16(dq, dq16, dout, q16, o16, lse, c, s, pack, B, T, nh, nkv, hd, window);
    be->attention_backward_act16(NULL, dq16b, dout, q16, o16, lse, c, s, pack, B, T, nh, nkv, hd, window);
    /* the composition on the widened inputs: rope, attention, attention's backward, rope's
     * backward: its bits */
    float *qw = f32_of(q16, nq);
    be->rope_forward(qw, c, s, B, T, nh, nkv, hd);
    float *ow = malloc(no * 4), *lw = malloc(nl * 4), *dqw = malloc(nq * 4), *o16w = f32_of(o16, no);
    uint16_t *ow16 = malloc(no * 2), *dqw16 = malloc(nq * 2);
    be->attention_forward(ow, ow16, lw, qw, pack, B, T, nh, nkv, hd, window);
    be->attention_backward(dqw, dout, qw, o16w, lw, pack, B, T, nh, nkv, hd, window);
    be->rope_backward(dqw, c, s, B, T, nh, nkv, hd);
    be->convert(dqw16, ZT_BF16, dqw, ZT_F32, nq);
    ZT_CHECK_MSG(same_bits(o16, ow16, no * 2) && same_bits(lse, lw, nl * 4), "hd %d: forward_act16 differs", hd);
    ZT_CHECK_MSG(same_bits(dq, dqw, nq * 4), "hd %d: backward_act16 differs from the composition", hd);
    ZT_CHECK_MSG(same_bits(dq16, dqw16, nq * 2) && same_bits(dq16b, dqw16, nq * 2),
                 "hd %d: backward_act16's bf16 dqkv is not its fp32 one rounded", hd);
    /* the exact path on fp32 activations (rope in place, attention, rope's backward):
     * within bf16 error */
    float *q32 = malloc(nq * 4), *o32 = malloc(no * 4), *l32 = malloc(nl * 4), *dq32 = malloc(nq * 4);
    memcpy(q32, qkv, nq * 4);
    be->rope_forward(q32, c, s, B, T, nh, nkv, hd);
    be->attention_forward(o32, NULL, l32, q32, pack, B, T, nh, nkv, hd, window);
    be->attention_backward(dq32, dout, q32, o32, l32, pack, B, T, nh, nkv, hd, window);
    be->rope_backward(dq32, c, s, B, T, nh, nkv, hd);
    double eo = rel_err(o16w, o32, ZT_F32, no), eg = rel_err(dq, dq32, ZT_F32, nq);
    ZT_CHECK_MSG(eo <= ACT16_ATTN_TOL && eg <= ACT16_ATTN_GRAD_TOL, "hd %d vs fp32 qkv: out %.3g, dqkv %.3g", hd, eo,
                 eg);
    printf("     attention act16 hd %d%s window %d vs fp32 qkv: out %.2g (bound %.3g), dqkv %.2g (bound %.3g)\n", hd,
           pack ? " (bf16 operands)" : "", window, eo, ACT16_ATTN_TOL, eg, ACT16_ATTN_GRAD_TOL);
    /* without the tables the entries read q and k as they are */
    float *qplain = f32_of(q16, nq);
    be->attention_forward_act16(o16, lse, q16, NULL, NULL, pack, B, T, nh, nkv, hd, window);
    be->attention_forward(ow, ow16, lw, qplain, pack, B, T, nh, nkv, hd, window);
    ZT_CHECK_MSG(same_bits(o16, ow16, no * 2), "hd %d: without tables, not the attention of qkv16 as it is", hd);
    free(qplain);
    free(pack), free(c), free(s), free(qkv), free(dout), free(q16), free(o16), free(dq16), free(dq16b), free(lse);
    free(dq), free(qw), free(ow), free(lw), free(dqw), free(o16w), free(ow16), free(dqw16), free(q32), free(o32);
    free(l32), free(dq32);
}

static void test_attention_act16(void)
{
    attention_case(32, 0);
    attention_case(16, 0);
    attention_case(32, 9);
}

int main(void)
{
    ZT_RUN(test_linear_act16);
    ZT_RUN(test_swiglu_act16);
    ZT_RUN(test_attention_act16);
    ZT_TEST_MAIN_END();
}
