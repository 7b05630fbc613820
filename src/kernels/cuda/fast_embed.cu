/* fast_embed.cu — the embedding's backward in fast mode (backend.h, zt_kernel_mode):
 * dwte[tokens[i], c] += dx[i, c] with one thread per (i, c) and fp32 atomics.
 *
 * No host sort and no per-call host work beyond the ids' upload: the exact kernel
 * (embed.cu) sorts the ids on the host on every call to add each token's rows in
 * embed.c's order.  Here rows of one token meet in the atomics in whatever order the
 * device runs them, so their fp32 sum may differ from the CPU's by the rounding of
 * a reordered sum (a few ulps of the row's magnitude, far inside bf16 error) and
 * may differ between runs.  Built with FMA contraction allowed (Makefile: fast_*.cu). */
#include "entries.cuh"
#include "fast.h"

__global__ void embed_backward_atomic_kernel(float *dwte, const float *dx, const int *tokens, int N, int C)
{
    const size_t total = (size_t)N * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / C, c = k % C;
        atomicAdd(dwte + (size_t)tokens[i] * C + c, dx[k]);
    }
}

void zt_cu_fast_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    int *dtok = (int *)zt_cu_scratch((size_t)N * sizeof(int));
    zt_cu_upload(dtok, tokens, (size_t)N * sizeof(int));
    embed_backward_atomic_kernel<<<zt_cu_blocks((size_t)N * C), ZT_CU_THREADS, 0, zt_cu.stream>>>(dwte, dx, dtok, N,
                                                                                                  C);
    ZT_CU_LAUNCHED();
}
