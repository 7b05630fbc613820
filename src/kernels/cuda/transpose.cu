/* transpose.cu — dst (cols, rows) = src (rows, cols)^T, fp32 (kernels.h), through
 * 32 x 32 tiles in shared memory so that both the reads and the writes are
 * coalesced (the extra column keeps the tile's columns in different banks). */
#include "entries.cuh"

#define TILE 32
#define TILE_ROWS 8

__global__ void transpose_kernel(float *dst, const float *src, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols)
            tile[k][threadIdx.x] = src[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int c = c0 + k, r = r0 + threadIdx.x; /* dst row c, column r */
        if (r < rows && c < cols)
            dst[(size_t)c * rows + r] = tile[threadIdx.x][k];
    }
}

void zt_cu_transpose(float *dst, const float *src, int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    const dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE));
    transpose_kernel<<<grid, dim3(TILE, TILE_ROWS), 0, zt_cu.stream>>>(dst, src, rows, cols);
    ZT_CU_LAUNCHED();
}
