/* reductions.c — accumulation, rounding and sums of squares over flat buffers
 * (see reductions.h). */
#include "reductions.h"

void zt_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols)
{
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        float *yr = y + (size_t)i * ldy;
        const float *xr = x + (size_t)i * ldx;
        #pragma omp simd
        for (int j = 0; j < cols; j++) {
            float p = a * xr[j];
            yr[j] += p;
        }
    }
}

void zt_accumulate(void *acc, zt_dtype md, const void *x, zt_dtype xd, size_t n)
{
    if (md == ZT_F32 && xd == ZT_F32) {
        float *a = acc;
        const float *b = x;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    } else if (md == ZT_F32 && xd == ZT_BF16) {
        float *a = acc;
        const uint16_t *b = x;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] += zt_bf16_to_f32(b[i]);
    } else if (md == ZT_BF16 && (xd == ZT_F32 || xd == ZT_BF16)) {
        /* the memory-constrained mode's bf16 accumulators: the sum in fp32, rounded
         * once (what the generic path below does, in a loop that vectorises) */
        uint16_t *a = acc;
        if (xd == ZT_F32) {
            const float *b = x;
            #pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++)
                a[i] = zt_f32_to_bf16(zt_bf16_to_f32(a[i]) + b[i]);
        } else {
            const uint16_t *b = x;
            #pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++)
                a[i] = zt_f32_to_bf16(zt_bf16_to_f32(a[i]) + zt_bf16_to_f32(b[i]));
        }
    } else if (md == ZT_F32 && xd == ZT_F16) {
        float *a = acc;
        const uint16_t *b = x;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] += zt_f16_to_f32(b[i]);
    } else if (md == ZT_F16 && (xd == ZT_F32 || xd == ZT_F16)) {
        uint16_t *a = acc; /* fp16 accumulators: as the bf16 ones above */
        if (xd == ZT_F32) {
            const float *b = x;
            #pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++)
                a[i] = zt_f32_to_f16(zt_f16_to_f32(a[i]) + b[i]);
        } else {
            const uint16_t *b = x;
            #pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++)
                a[i] = zt_f32_to_f16(zt_f16_to_f32(a[i]) + zt_f16_to_f32(b[i]));
        }
    } else { /* one 16-bit format into the other */
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            zt_store_f32(acc, md, i, zt_load_f32(acc, md, i) + zt_load_f32(x, xd, i));
    }
}

void zt_accumulate_bf16_rounded(float *acc, int round_acc, const float *g, size_t n)
{
    if (round_acc) {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            acc[i] = zt_round_bf16(acc[i]) + zt_round_bf16(g[i]);
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        acc[i] += zt_round_bf16(g[i]);
}

double zt_round_bf16_inplace(float *acc, size_t n, int want_sumsq)
{
    if (!want_sumsq) {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            acc[i] = zt_round_bf16(acc[i]);
        return 0.0;
    }
    double s = 0.0;
    #pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = zt_round_bf16(acc[i]);
        acc[i] = x;
        s += (double)x * (double)x;
    }
    return s;
}

double zt_sumsq_bf16(const float *g, size_t n)
{
    double s = 0.0;
    #pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = zt_round_bf16(g[i]);
        s += (double)x * (double)x;
    }
    return s;
}

double zt_sumsq(const void *x, zt_dtype dt, size_t n)
{
    double s = 0.0;
    if (dt == ZT_F32) {
        const float *g = x;
        #pragma omp parallel for simd reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++)
            s += (double)g[i] * (double)g[i];
    } else if (dt == ZT_BF16) {
        const uint16_t *g = x;
        #pragma omp parallel for simd reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++) {
            double v = zt_bf16_to_f32(g[i]);
            s += v * v;
        }
    } else {
        /* fp16: in element order (no simd), as it always summed: a vector sum would
         * reassociate the double additions and move the norm's last bits */
        const uint16_t *g = x;
        #pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++) {
            double v = zt_f16_to_f32(g[i]);
            s += v * v;
        }
    }
    return s;
}

void zt_dot_rows(float *dots, const float *a, size_t lda, const float *b, size_t ldb, int rows,
                 int len)
{
    for (int r = 0; r < rows; r++) {
        const float *restrict x = a + (size_t)r * lda, *restrict y = b + (size_t)r * ldb;
        float s = 0.0f;
        #pragma omp simd reduction(+ : s)
        for (int d = 0; d < len; d++)
            s += x[d] * y[d];
        dots[r] = s;
    }
}
