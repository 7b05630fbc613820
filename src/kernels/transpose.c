/* transpose.c — dst (cols, rows) = src (rows, cols)^T for fp32 matrices, in 16 x 16
 * blocks (registers where the target has AVX-512, scalar at the ragged edges),
 * parallel over row strips. */
#include "kernels.h"
#include "transpose.h"

#include <string.h>

void zt_transpose_f32(float *dst, const float *src, int rows, int cols)
{
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0 < 16 ? rows - r0 : 16;
        int c0 = 0;
#ifdef __AVX512F__
        if (nr == 16)
            for (; c0 + 16 <= cols; c0 += 16)
                zt_transpose16x16_u32((uint32_t *)dst + (size_t)c0 * rows + r0, (size_t)rows,
                                      (const uint32_t *)src + (size_t)r0 * cols + c0, (size_t)cols);
#endif
        for (int c = c0; c < cols; c++)
            for (int r = r0; r < r0 + nr; r++)
                dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
    }
}
