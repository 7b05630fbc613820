/* embed.cu — the token embedding and its gradient on the device (kernels.h, embed.c).
 *
 * The token ids live on the host (backend.h); each call uploads them into the
 * backend's scratch.  Forward: x[i, c] = wte[tokens[i], c] converted to fp32.
 *
 * Backward: dwte[tokens[i]] += dx[i].  Rows with the same token add into the same
 * row of dwte, so a thread per (i, c) would need atomics, whose order (and so the
 * fp32 rounding of the sum) changes from run to run.  Instead the host sorts the row
 * indices by token (stable: rows of one token stay in increasing i), and one block per
 * distinct token adds its rows in that order, one thread per column, starting from
 * the stored dwte value.  That is embed.c's order exactly (each of its threads walks i
 * upwards over its columns), so the gradient is the CPU's bits and the same on every
 * run, with no atomics.  The sort costs O(N log N) on the host per call (N = B*T ids,
 * well under a millisecond at N = 16k).
 *
 * beta 0 (a fresh gradient buffer, backend.h): the named rows' sums start from 0
 * instead of the stored value, and the rows no token names are written as zeros by
 * a kernel that finds a row's token in the sorted distinct tokens: every row is
 * written once and none read, where a clear of the table and an add would write it,
 * then read and write the named rows again. */
#include "entries.cuh"

#include <string.h>

__global__ void embed_forward_kernel(float *x, const void *wte, zt_dtype dt, const int *tokens, int N, int C)
{
    const size_t total = (size_t)N * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / C, c = k % C;
        x[k] = zt_d_load(wte, dt, (size_t)tokens[i] * C + c);
    }
}

void zt_cu_embed_forward(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    int *dtok = (int *)zt_cu_scratch((size_t)N * sizeof(int));
    zt_cu_upload(dtok, tokens, (size_t)N * sizeof(int));
    embed_forward_kernel<<<zt_cu_blocks((size_t)N * C), ZT_CU_THREADS, 0, zt_cu.stream>>>(x, wte, wte_dt, dtok, N, C);
    ZT_CU_LAUNCHED();
}

/* Block b adds the rows rows[start[b] .. start[b+1]) of dx into row token[b] of dwte,
 * onto the stored value (add) or onto 0 (store: 0 + v, as onto a cleared table). */
__global__ void embed_backward_kernel(float *dwte, const float *dx, const int *rows, const int *start,
                                      const int *token, int C, int add)
{
    const int b = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float *d = dwte + (size_t)token[b] * C + c;
    float acc = add ? *d : 0.0f;
    for (int k = start[b]; k < start[b + 1]; k++)
        acc += dx[(size_t)rows[k] * C + c];
    *d = acc;
}

/* Block v writes zeros into row v of dwte unless v is one of the U sorted distinct
 * tokens (a binary search, the same for every thread of the block). */
__global__ void embed_zero_unnamed_kernel(float *dwte, const int *token, int U, int C)
{
    const int v = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    int lo = 0, hi = U; /* the first token >= v is token[lo] */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (token[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (c < C && (lo == U || token[lo] != v))
        dwte[(size_t)v * C + c] = 0.0f;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* host staging for the sort, grown as needed */
static struct {
    uint64_t *keys;
    int *idx; /* rows, then start, then token: 3N + 1 ints */
    size_t cap;
} hs;

void zt_cu_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta)
{
    const unsigned cblocks = (unsigned)((C + ZT_CU_THREADS - 1) / ZT_CU_THREADS);
    if (C <= 0 || V <= 0)
        return;
    if (N <= 0) { /* no token: a store writes zeros, an add leaves the table */
        if (beta == 0.0f)
            embed_zero_unnamed_kernel<<<dim3((unsigned)V, cblocks), ZT_CU_THREADS, 0, zt_cu.stream>>>(dwte, nullptr,
                                                                                                      0, C);
        ZT_CU_LAUNCHED();
        return;
    }
    if ((size_t)N > hs.cap) {
        zt_free(ZT_MEM_OTHER, hs.keys, hs.cap * sizeof(uint64_t));
        zt_free(ZT_MEM_OTHER, hs.idx, (3 * hs.cap + 1) * sizeof(int));
        hs.cap = (size_t)N;
        hs.keys = (uint64_t *)zt_alloc(ZT_MEM_OTHER, hs.cap * sizeof(uint64_t));
        hs.idx = (int *)zt_alloc(ZT_MEM_OTHER, (3 * hs.cap + 1) * sizeof(int));
        if (!hs.keys || !hs.idx) {
            fprintf(stderr, "ztrain: embedding backward: out of host memory for %d ids\n", N);
            abort();
        }
    }
    /* key = token << 32 | row: sorting the keys sorts by token, then by row */
    for (int i = 0; i < N; i++)
        hs.keys[i] = ((uint64_t)(uint32_t)tokens[i] << 32) | (uint32_t)i;
    qsort(hs.keys, (size_t)N, sizeof(uint64_t), cmp_u64);
    int *rows = hs.idx, *start = rows + N, *token = NULL;
    int U = 0;
    for (int k = 0; k < N; k++) {
        rows[k] = (int)(uint32_t)hs.keys[k];
        if (k == 0 || (hs.keys[k] >> 32) != (hs.keys[k - 1] >> 32))
            start[U++] = k;
    }
    start[U] = N;
    token = start + U + 1;
    for (int u = 0; u < U; u++)
        token[u] = (int)(hs.keys[start[u]] >> 32);
    const size_t ints = (size_t)N + (size_t)U + 1 + (size_t)U;
    int *dev = (int *)zt_cu_scratch(ints * sizeof(int));
    zt_cu_upload(dev, hs.idx, ints * sizeof(int));
    if (beta == 0.0f) {
        embed_zero_unnamed_kernel<<<dim3((unsigned)V, cblocks), ZT_CU_THREADS, 0, zt_cu.stream>>>(
            dwte, dev + N + U + 1, U, C);
        ZT_CU_LAUNCHED();
    }
    embed_backward_kernel<<<dim3((unsigned)U, cblocks), ZT_CU_THREADS, 0, zt_cu.stream>>>(
        dwte, dx, dev, dev + N, dev + N + U + 1, C, beta != 0.0f);
    ZT_CU_LAUNCHED();
}

void zt_cu_embed_shutdown(void)
{
    zt_free(ZT_MEM_OTHER, hs.keys, hs.cap * sizeof(uint64_t));
    zt_free(ZT_MEM_OTHER, hs.idx, (3 * hs.cap + 1) * sizeof(int));
    memset(&hs, 0, sizeof hs);
}
