/* bias.c — the bias of a linear layer, fp32 (Qwen2's q, k and v projections).
 *
 * Forward, after the product y = x W^T (N, D):  y[n, j] += b[j], b read from its
 * dtype (the compute copy of the parameters) and widened to fp32, as nn.Linear adds
 * its bias to the fp32 product.
 * Backward: db[j] += sum over n of dy[n, j] (the bias's gradient is the column sums
 * of the output gradient); accumulated, like every weight gradient (kernels.h).
 * The sum runs over n in order, in fp32, one column at a time, so any split of the
 * columns (threads here, device threads in cuda/bias.cu) gives the same bits. */
#include "kernels.h"

#include <assert.h>

/* b[j] in fp32 from a buffer of dtype dt */
static inline float bias_at(const void *b, zt_dtype dt, int j)
{
    switch (dt) {
    case ZT_BF16: return zt_bf16_to_f32(((const uint16_t *)b)[j]);
    case ZT_F16: return zt_f16_to_f32(((const uint16_t *)b)[j]);
    default: return ((const float *)b)[j];
    }
}

void zt_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D)
{
    assert(N >= 0 && D > 0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *restrict row = y + (size_t)n * D;
        for (int j = 0; j < D; j++)
            row[j] += bias_at(b, b_dt, j);
    }
}

/* Columns in blocks of 64: each thread sums its block's rows in order (n ascending)
 * into a local vector, reading rows contiguously. */
#define BIAS_COLS 64

void zt_bias_backward(float *db, float beta, const float *dy, int N, int D)
{
    assert(N >= 0 && D > 0 && (beta == 0.0f || beta == 1.0f));
    const int nblocks = (D + BIAS_COLS - 1) / BIAS_COLS;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        const int j0 = blk * BIAS_COLS, nj = D - j0 < BIAS_COLS ? D - j0 : BIAS_COLS;
        float acc[BIAS_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *restrict row = dy + (size_t)n * D + j0;
            for (int j = 0; j < nj; j++)
                acc[j] += row[j];
        }
        for (int j = 0; j < nj; j++)
            db[j0 + j] = (beta != 0.0f ? db[j0 + j] : 0.0f) + acc[j]; /* 0 + acc: rmsnorm.c's store */
    }
}
