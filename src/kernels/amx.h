/* amx.h — bf16 tile products on Intel AMX, for the hand-written kernels.
 *
 * oneDNN runs the linear layers' bf16 products on AMX where the CPU has it; the
 * attention tiles (attention16.c) are ztrain's own products and use this module on
 * the same CPUs, so a bf16 step does not leave a fifth of its time on AVX-512
 * while the rest runs on tiles.
 *
 * An AMX tile register holds 16 rows of 64 bytes.  TDPBF16PS C, A, B computes, for a
 * C tile of 16 x 16 fp32 values, an A tile of 16 rows of 16 bf16 pairs and a B tile
 * of 16 rows of pairs by 16 columns,
 *   C(i, j) += sum_q A(i, 2q) B(2q, j) + A(i, 2q+1) B(2q+1, j)     (q < 16)
 * with products and sums in fp32 (inputs and outputs denormals flushed, round to
 * nearest even), which is the arithmetic of AVX512-BF16's vdpbf16ps on 16 columns.
 * B's rows are pairs along the summed index, one 32-bit word per (pair, column) —
 * the same "pairs" words attention16.c already builds; A's rows are pairs along the
 * summed index, contiguous.
 *
 * Use: zt_amx_usable() once (it asks Linux for the tile state; oneDNN does the same
 * for its own kernels), then in each thread zt_amx_begin() before products and
 * zt_amx_end() after, since the tile configuration belongs to the thread and oneDNN
 * sets its own. */
#ifndef ZT_AMX_H
#define ZT_AMX_H

#include <stddef.h>
#include <stdint.h>

/* Which terms of a product are known zeros (see zt_amx_pmm).  i is C's row, j its
 * column, k the summed index counted in elements (pair q holds k = 2q, 2q+1). */
typedef enum zt_tile_shape {
    ZT_TILE_DENSE,
    ZT_TILE_J_GE_I, /* only C(i, j) with j >= i is wanted */
    ZT_TILE_K_LE_I, /* A(i, k) = 0 for k > i */
    ZT_TILE_K_GE_I, /* A(i, k) = 0 for k < i */
} zt_tile_shape;

/* 1 when this process may run AMX bf16 tiles: the CPU has them, oneDNN's effective ISA
 * includes them (so DNNL_MAX_CPU_ISA turns both off together) and Linux granted the
 * tile state.  Decided once. */
int zt_amx_usable(void);

/* Load / release this thread's tile configuration (every tile 16 rows x 64 bytes). */
void zt_amx_begin(void);
void zt_amx_end(void);

/* 1 when zt_amx_pmm takes an M x N product summing Q pairs: whole tiles only. */
static inline int zt_amx_fits(int M, int N, int Q) { return M % 16 == 0 && N % 16 == 0 && Q % 16 == 0; }

/* C(i, j) = beta C(i, j) + sum_q A(i, q) . B(q, j) for i < M, j < N, q < Q, beta 0 or 1,
 * where A(i, q) = A[i*ars + q] and B(q, j) = B[q*ldb + j] are words of two bf16 values
 * (low half the even element) and C is fp32 with row stride ldc.  beta 0 starts the
 * tiles from zero instead of loading C (the same values as C zeroed first).  shape lets
 * whole 16 x 16 tiles or 16-pair steps of known zeros be skipped (the rest of their zero
 * terms are added, exactly); with ZT_TILE_J_GE_I the skipped C tiles are left as they
 * were, whatever beta.  Requires zt_amx_fits(M, N, Q) and zt_amx_begin() on this
 * thread. */
void zt_amx_pmm(float *C, size_t ldc, const uint32_t *A, size_t ars, const uint32_t *B,
                size_t ldb, int M, int N, int Q, zt_tile_shape shape, int beta);

#endif
