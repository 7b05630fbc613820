/* embed.c — the token embedding lookup and its gradient (see kernels.h). */
#include <omp.h>
#include <string.h>

#include "kernels.h"

void zt_embed_forward(float *x, const void *wte, zt_dtype dt, const int *tokens, int N, int C)
{
    size_t es = zt_dtype_size(dt);
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        zt_convert(x + (size_t)i * C, ZT_F32, (const char *)wte + (size_t)tokens[i] * C * es, dt, (size_t)C);
}

/* Rows hitting the same token would race, so threads split the columns instead
 * of the rows.  With beta 0 the table is written whole first: on the host a clear
 * at memory bandwidth is how rows no token names get their zeros, and adding onto
 * them keeps the sums' bits (0 + v, then v's in increasing i).  The device tables
 * write each row once instead (cuda/embed.cu, cuda/fast_embed.cu), since there the
 * table is the step's traffic that counts. */
void zt_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta)
{
    if (beta == 0.0f) {
        #pragma omp parallel for schedule(static)
        for (int v = 0; v < V; v++)
            memset(dwte + (size_t)v * C, 0, (size_t)C * sizeof(float));
    }
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
