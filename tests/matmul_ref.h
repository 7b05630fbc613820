/* matmul_ref.h — what the product tests share (test_matmul.c, test_gemm_bf16.c):
 * random operands from a seeded LCG and the product computed in double.
 *
 * Each test program passes its own generator state (and keeps its own seed), so
 * one program's inputs do not change when the other's tests change. */
#ifndef ZT_TEST_MATMUL_REF_H
#define ZT_TEST_MATMUL_REF_H

#include <stdint.h>
#include <stdlib.h>

#include "../src/core/dtype.h"

/* Knuth's MMIX LCG: 64 bits of state, the top bits the random ones. */
static uint64_t zt_test_next(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return *rng;
}

/* Uniform in [-1, 1), from the top 24 bits. */
static float zt_test_urand(uint64_t *rng)
{
    return (float)((double)(zt_test_next(rng) >> 40) / (double)(1ull << 23) - 1.0);
}

/* A buffer of n random values stored in dtype dt (the caller frees it); `vals`
 * receives the values a product sees: as stored, and rounded to bf16 when
 * round_bf16 is set (bf16 compute rounds fp32 operands too). */
static void *zt_test_matrix(zt_dtype dt, size_t n, float *vals, int round_bf16, uint64_t *rng)
{
    void *buf = malloc(n * zt_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        zt_store_f32(buf, dt, i, zt_test_urand(rng));
        float v = zt_load_f32(buf, dt, i);
        vals[i] = round_bf16 ? zt_round_bf16(v) : v;
    }
    return buf;
}

/* ref (M,N) = beta*C0 + op(A).op(B) in double; a, b as stored (transposed or not:
 * A is (K,M) when ta, B is (N,K) when tb). */
static void zt_test_matmul_ref(double *ref, const float *c0, const float *a, const float *b, int M, int N, int K,
                               int ta, int tb, float beta)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = beta ? (double)c0[(size_t)m * N + n] : 0.0;
            for (int k = 0; k < K; k++) {
                double av = ta ? a[(size_t)k * M + m] : a[(size_t)m * K + k];
                double bv = tb ? b[(size_t)n * K + k] : b[(size_t)k * N + n];
                s += av * bv;
            }
            ref[(size_t)m * N + n] = s;
        }
}

#endif
