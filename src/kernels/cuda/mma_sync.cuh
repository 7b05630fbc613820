/* mma_sync.cuh — the warp-level tensor-core primitives the fast attention's forward and
 * backward (fast_attention.cu, fast_attention_bwd.cu) are written in, one name each, with
 * PTX's meaning:
 *
 *   zt_mma_16816(d, a, b)        mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32:
 *                                d (16 x 8, fp32) += a (16 x 16, bf16) b (16 x 8, bf16)
 *   zt_ldmatrix_x4(r, p)         ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8 x 8
 *   zt_ldmatrix_x4_trans(r, p)   tiles of 16-bit elements from shared memory (.trans:
 *                                each transposed), lane 8 m + i giving row i of tile m
 *   zt_cp_async16(dst, src)      cp.async.cg.shared.global, 16 bytes, global to shared
 *   zt_cp_async_commit()         cp.async.commit_group: close the copies issued so far
 *   zt_cp_async_wait<N>()        cp.async.wait_group N: all but the last N groups landed
 *   zt_pack_bf16x2(lo, hi)       cvt.rn.bf16x2.f32: two fp32 to bf16 (nearest, ties to
 *                                even), lo in the low half
 *
 * The fragment layouts (the PTX ISA's, which these kernels rely on): with g = lane >> 2
 * (the group) and t = lane & 3 (the thread in the group), each 32-bit register holds
 * two bf16, the lower column (or row, for b) in the low half:
 *   a: a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
 *      a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 *   b: b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, 2t+9][g];
 *   c, d (fp32): d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1];
 *   ldmatrix: r[m] = tile m's row g, columns 2t and 2t+1 (.trans: rows 2t and 2t+1 of
 *      column g), from the row addresses lanes 8 m .. 8 m + 7 give (each 16-byte aligned).
 * So the accumulator of a product, packed by pairs, is already an a fragment: d[0], d[1]
 * and d[2], d[3] of two neighbouring 8-column tiles are a[0], a[1] and a[2], a[3] of the
 * next product over those 16 columns (the forward's P V reuses P so).
 *
 * Under nvcc: inline PTX (sm_80 and up).  Under tools/cuda_emu (ZT_CUDA_EMU): the
 * emulator's models of the same (tools/cuda_emu/mma_sync.h), warp-collective, which
 * follow these layouts lane by lane and abort on what the GPU would punish (a row or
 * copy address not 16-byte aligned or not in shared memory, a lane skipping a collective);
 * kernels_check's group `mma` holds both to plain loops. */
#ifndef ZT_CUDA_MMA_SYNC_CUH
#define ZT_CUDA_MMA_SYNC_CUH

#include <stdint.h>

#ifdef ZT_CUDA_EMU
#include <mma_sync.h>
#else

__device__ __forceinline__ void zt_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void zt_ldmatrix_x4(uint32_t (&r)[4], const void *row)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}

__device__ __forceinline__ void zt_ldmatrix_x4_trans(uint32_t (&r)[4], const void *row)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}

__device__ __forceinline__ void zt_cp_async16(void *dst, const void *src)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" : : "r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void zt_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" : : : "memory"); }

template <int N>
__device__ __forceinline__ void zt_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" : : "n"(N) : "memory");
}

/* (cvt's first source goes to the high half) */
__device__ __forceinline__ uint32_t zt_pack_bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#endif

/* d0 += a b and d1 += a b' for the two 8-column b operands an ldmatrix x4 gave: b[0], b[1]
 * and b[2], b[3] (16 columns of the product from one load) */
__device__ __forceinline__ void zt_mma_16816_x2(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[4])
{
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    zt_mma_16816(d0, a, b0);
    zt_mma_16816(d1, a, b1);
}

#endif
