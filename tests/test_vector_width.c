/* test_vector_width.c — the kernels the Makefile builds 512 bits wide give the same bits
 * as the same sources built 256 bits wide.
 *
 * attention.c, attention16.c and swiglu.c get -mprefer-vector-width=512 on x86-64 (see
 * the Makefile): their loops hold one query or one element per lane and never sum
 * across lanes, so the width may change their speed but not a single result.  This test
 * keeps that true as the code changes: the Makefile builds the three files a second
 * time with -mprefer-vector-width=256 and every entry point renamed to w256_*, and the
 * test runs both builds on the same inputs (both attentions forward and backward with
 * head dimensions 32, 64 and 128, ragged blocks and sliding windows, and SwiGLU into
 * fp32 and bf16 with a ragged tail) and compares the outputs byte for byte.  A sum
 * across lanes in one of these files (as attention16's D = dout . out was before it
 * moved to reductions.c) makes it fail.  A build without AVX-512 has one width only, and
 * says so. */
#include "../src/kernels/kernels.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

void w256_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int nh, int nkv,
                            int hd, int window);
void w256_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int nh, int nkv, int hd, int window);
void w256_attention16_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                              void *pack, int B, int T, int nh, int nkv, int hd, int window);
void w256_attention16_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, void *pack, int B, int T, int nh, int nkv, int hd,
                               int window);
void w256_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F);
void w256_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F);

static uint64_t rng = 88172645463325252ull;

static float *random_floats(size_t n, float scale)
{
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        a[i] = scale * (float)((double)(rng >> 40) / (double)(1 << 23) - 1.0);
    }
    return a;
}

#define SAME(what, a, b, bytes, ...) \
    ZT_CHECK_MSG(memcmp(a, b, bytes) == 0, what " differs between 512- and 256-bit builds: " __VA_ARGS__)

static void test_attention_same_bits(void)
{
    /* B, T, nh, nkv, hd, window: Llama's shapes, a ragged last block, windows */
    static const int cases[][6] = {{2, 256, 12, 4, 64, 0}, {1, 200, 8, 2, 64, 0}, {1, 300, 4, 4, 128, 100},
                                   {1, 96, 4, 2, 32, 0},   {1, 130, 6, 3, 64, 37}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], nh = cases[c][2], nkv = cases[c][3];
        const int hd = cases[c][4], win = cases[c][5];
        const size_t W = (size_t)(nh + 2 * nkv) * hd, N = (size_t)B * T, no = N * nh * hd;
        const size_t nl = (size_t)B * nh * T;
        float *qkv = random_floats(N * W, 1.5f), *dout = random_floats(no, 1.0f);
        float *out[2], *lse[2], *dqkv[2];
        uint16_t *o16[2];
        void *pack = malloc(zt_attention16_pack_bytes(B, T, nkv, hd));
        for (int w = 0; w < 2; w++) {
            out[w] = malloc(no * sizeof(float)), lse[w] = malloc(nl * sizeof(float));
            dqkv[w] = malloc(N * W * sizeof(float)), o16[w] = malloc(no * sizeof(uint16_t));
        }
        /* bf16 operands (the AMX or AVX512-BF16 tile products where the CPU has them) */
        zt_attention16_forward(out[0], o16[0], lse[0], qkv, pack, B, T, nh, nkv, hd, win);
        zt_attention16_backward(dqkv[0], dout, qkv, out[0], lse[0], pack, B, T, nh, nkv, hd, win);
        w256_attention16_forward(out[1], o16[1], lse[1], qkv, pack, B, T, nh, nkv, hd, win);
        w256_attention16_backward(dqkv[1], dout, qkv, out[1], lse[1], pack, B, T, nh, nkv, hd, win);
        SAME("attention16 forward", out[0], out[1], no * sizeof(float), "case %zu", c);
        SAME("attention16 bf16 output", o16[0], o16[1], no * sizeof(uint16_t), "case %zu", c);
        SAME("attention16 lse", lse[0], lse[1], nl * sizeof(float), "case %zu", c);
        SAME("attention16 backward", dqkv[0], dqkv[1], N * W * sizeof(float), "case %zu", c);
        /* fp32 */
        zt_attention_forward(out[0], lse[0], qkv, B, T, nh, nkv, hd, win);
        zt_attention_backward(dqkv[0], dout, qkv, out[0], lse[0], B, T, nh, nkv, hd, win);
        w256_attention_forward(out[1], lse[1], qkv, B, T, nh, nkv, hd, win);
        w256_attention_backward(dqkv[1], dout, qkv, out[1], lse[1], B, T, nh, nkv, hd, win);
        SAME("attention forward", out[0], out[1], no * sizeof(float), "case %zu", c);
        SAME("attention lse", lse[0], lse[1], nl * sizeof(float), "case %zu", c);
        SAME("attention backward", dqkv[0], dqkv[1], N * W * sizeof(float), "case %zu", c);
        for (int w = 0; w < 2; w++) free(out[w]), free(lse[w]), free(dqkv[w]), free(o16[w]);
        free(qkv), free(dout), free(pack);
    }
}

static void test_swiglu_same_bits(void)
{
    enum { N = 77, F = 1411 }; /* F not a multiple of any vector width: a scalar tail */
    float *gu = random_floats((size_t)N * 2 * F, 8.0f), *dh = random_floats((size_t)N * F, 1.0f);
    float *h[2], *dgu[2];
    uint16_t *h16[2], *dgu16[2];
    for (int w = 0; w < 2; w++) {
        h[w] = malloc(sizeof(float) * N * F), dgu[w] = malloc(sizeof(float) * N * 2 * F);
        h16[w] = malloc(sizeof(uint16_t) * N * F), dgu16[w] = malloc(sizeof(uint16_t) * N * 2 * F);
    }
    zt_swiglu_forward(h[0], ZT_F32, gu, N, F), w256_swiglu_forward(h[1], ZT_F32, gu, N, F);
    zt_swiglu_forward(h16[0], ZT_BF16, gu, N, F), w256_swiglu_forward(h16[1], ZT_BF16, gu, N, F);
    zt_swiglu_backward(dgu[0], ZT_F32, dh, gu, N, F), w256_swiglu_backward(dgu[1], ZT_F32, dh, gu, N, F);
    zt_swiglu_backward(dgu16[0], ZT_BF16, dh, gu, N, F);
    w256_swiglu_backward(dgu16[1], ZT_BF16, dh, gu, N, F);
    SAME("swiglu forward", h[0], h[1], sizeof(float) * N * F, "fp32");
    SAME("swiglu forward", h16[0], h16[1], sizeof(uint16_t) * N * F, "bf16");
    SAME("swiglu backward", dgu[0], dgu[1], sizeof(float) * N * 2 * F, "fp32");
    SAME("swiglu backward", dgu16[0], dgu16[1], sizeof(uint16_t) * N * 2 * F, "bf16");
    for (int w = 0; w < 2; w++) free(h[w]), free(dgu[w]), free(h16[w]), free(dgu16[w]);
    free(gu), free(dh);
}

int main(void)
{
#ifndef __AVX512F__
    printf("     (this build has no AVX-512: both builds of the kernels use the same vectors)\n");
#endif
    ZT_RUN(test_attention_same_bits);
    ZT_RUN(test_swiglu_same_bits);
    ZT_TEST_MAIN_END();
}
