/* fast_embed.cu — the embedding's backward in fast mode (backend.h, zt_kernel_mode):
 * dwte[tokens[i], c] += dx[i, c] with one thread per (i, c) and fp32 atomics.
 *
 * No host sort and no per-call host work beyond the ids' upload (a captured step
 * replays the upload with the step's ids, so nothing may be decided from them on the
 * host): the exact kernel (embed.cu) sorts the ids on the host on every call to add
 * each token's rows in embed.c's order.  Here rows of one token meet in the atomics
 * in whatever order the device runs them, so their fp32 sum may differ from the
 * CPU's by the rounding of a reordered sum (a few ulps of the row's magnitude, far
 * inside bf16 error) and may differ between runs.
 *
 * beta 0 (a fresh gradient buffer): every row is written once and none cleared
 * first.  Each row's first token is found on the device (atomicMin of the row index
 * i into a per-row mark, order-free), then one pass over the table writes a named
 * row's first dx row (0 + v, as onto a cleared table) and zeros elsewhere, and the
 * other rows of a repeated token add by atomics.  The table is written once where a
 * clear and the atomics wrote it and then read and wrote the named rows again; the
 * mark (V unsigned ints in the scratch) is what it costs.  Built with FMA
 * contraction allowed (Makefile: fast_*.cu). */
#include "entries.cuh"
#include "fast.h"

#define NO_TOKEN 0xffffffffu

__global__ void embed_backward_atomic_kernel(float *dwte, const float *dx, const int *tokens, int N, int C,
                                             const unsigned *first)
{
    const size_t total = (size_t)N * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / C, c = k % C;
        if (!first || first[tokens[i]] != (unsigned)i) /* a first row was stored already */
            atomicAdd(dwte + (size_t)tokens[i] * C + c, dx[k]);
    }
}

__global__ void embed_mark_clear_kernel(unsigned *first, int V)
{
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < (size_t)V; v += (size_t)gridDim.x * blockDim.x)
        first[v] = NO_TOKEN;
}

__global__ void embed_mark_first_kernel(unsigned *first, const int *tokens, int N)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N; i += (size_t)gridDim.x * blockDim.x)
        atomicMin(first + tokens[i], (unsigned)i);
}

/* dwte[v] = dx[first[v]] (0 + v) where a token names row v, else 0 */
__global__ void embed_store_first_kernel(float *dwte, const float *dx, const unsigned *first, int V, int C)
{
    const size_t total = (size_t)V * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const unsigned i = first[k / C];
        dwte[k] = i == NO_TOKEN ? 0.0f : 0.0f + dx[(size_t)i * C + k % C];
    }
}

void zt_cu_fast_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta)
{
    if (C <= 0 || V <= 0 || (N <= 0 && beta != 0.0f))
        return;
    const size_t n = N > 0 ? (size_t)N : 0;
    int *dtok = (int *)zt_cu_scratch((n + (size_t)V) * sizeof(int));
    unsigned *first = NULL;
    zt_cu_upload(dtok, tokens, n * sizeof(int));
    if (beta == 0.0f) {
        first = (unsigned *)(dtok + n);
        embed_mark_clear_kernel<<<zt_cu_blocks((size_t)V), ZT_CU_THREADS, 0, zt_cu.stream>>>(first, V);
        ZT_CU_LAUNCHED();
        if (N > 0) {
            embed_mark_first_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(first, dtok, N);
            ZT_CU_LAUNCHED();
        }
        embed_store_first_kernel<<<zt_cu_blocks((size_t)V * C), ZT_CU_THREADS, 0, zt_cu.stream>>>(dwte, dx, first,
                                                                                                   V, C);
        ZT_CU_LAUNCHED();
    }
    if (N <= 0)
        return;
    embed_backward_atomic_kernel<<<zt_cu_blocks(n * C), ZT_CU_THREADS, 0, zt_cu.stream>>>(dwte, dx, dtok, N, C,
                                                                                          first);
    ZT_CU_LAUNCHED();
}
