/* mma_check.h — one warp of the tensor-core primitives (mma_sync.cuh) on known tiles,
 * for kernels_check's group `mma`: under tools/cuda_emu it holds the emulator's models to
 * plain loops over the PTX ISA's layouts; on a GPU it shows that those models are the
 * hardware's (what the fast attention forward relies on).  A plain C header. */
#ifndef ZT_CUDA_MMA_CHECK_H
#define ZT_CUDA_MMA_CHECK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tiles (row-major, bf16 bits): a (16 x 16) and bt (16 x 16, B^T: rows are n, columns
 * k) as a product's operands are stored for ldmatrix, v (16 x 16, rows k, columns n) for
 * ldmatrix.trans; c (16 x 16 fp32) the accumulators' start; x: 32 pairs to pack. */
typedef struct {
    uint16_t a[256], bt[256], v[256];
    float c[256];
    float x[64];
} zt_cu_mma_in;

/* ld_*[lane][m]: the registers ldmatrix x4 gave each lane (tile m of the 16 x 16 tile:
 * rows 8 (m & 1) on, columns 8 (m >> 1) on); tiles: the three tiles as cp.async copied
 * them into shared memory; d_bt = c + a bt^T (b from bt by ldmatrix), d_v = c + a v (b
 * from v by ldmatrix.trans), e = bf16(d_bt) v with d_bt's accumulators packed in
 * registers as the a operand; packed[l] = bf16x2 of x[2 l] (low half), x[2 l + 1]. */
typedef struct {
    uint32_t ld_a[32][4], ld_bt[32][4], ld_v[32][4];
    uint16_t tiles[3][256];
    float d_bt[256], d_v[256], e[256];
    uint32_t packed[32];
} zt_cu_mma_out;

/* One warp over device copies of in and out, on the backend's stream. */
void zt_cu_mma_check(zt_cu_mma_out *out, const zt_cu_mma_in *in);

#ifdef __cplusplus
}
#endif

#endif
