/* embed.c — the token embedding lookup and its gradient (see kernels.h). */
#include <omp.h>

#include "kernels.h"

void zt_embed_forward(float *x, const void *wte, zt_dtype dt, const int *tokens, int N, int C)
{
    size_t es = zt_dtype_size(dt);
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        zt_convert(x + (size_t)i * C, ZT_F32, (const char *)wte + (size_t)tokens[i] * C * es, dt, (size_t)C);
}

/* Rows hitting the same token would race, so threads split the columns instead
 * of the rows. */
void zt_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C)
{
    #pragma omp parallel
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        int lo = (int)((long)C * t / nt), hi = (int)((long)C * (t + 1) / nt);
        for (int i = 0; i < N; i++) {
            float *restrict drow = dwte + (size_t)tokens[i] * C;
            const float *restrict xrow = dx + (size_t)i * C;
            #pragma omp simd
            for (int j = lo; j < hi; j++)
                drow[j] += xrow[j];
        }
    }
}
