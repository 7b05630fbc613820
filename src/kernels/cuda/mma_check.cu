/* mma_check.cu — the kernel behind kernels_check's group `mma` (mma_check.h): each
 * primitive of mma_sync.cuh once, with everything it produced written out, registers
 * included, for the check to compare with plain loops over the documented layouts. */
#include "common.cuh"
#include "mma_check.h"
#include "mma_sync.cuh"

/* c's 16 x 8 block at column n0 as an accumulator (g = lane >> 2, t = lane & 3) */
__device__ static void acc_load(float (&d)[4], const float *c, int n0, int g, int t)
{
    d[0] = c[g * 16 + n0 + 2 * t], d[1] = c[g * 16 + n0 + 2 * t + 1];
    d[2] = c[(g + 8) * 16 + n0 + 2 * t], d[3] = c[(g + 8) * 16 + n0 + 2 * t + 1];
}

__device__ static void acc_store(float *o, const float (&d)[4], int n0, int g, int t)
{
    o[g * 16 + n0 + 2 * t] = d[0], o[g * 16 + n0 + 2 * t + 1] = d[1];
    o[(g + 8) * 16 + n0 + 2 * t] = d[2], o[(g + 8) * 16 + n0 + 2 * t + 1] = d[3];
}

__global__ void __launch_bounds__(32) mma_check_kernel(zt_cu_mma_out *o, const zt_cu_mma_in *in)
{
    extern __shared__ __align__(128) float sm[];
    uint16_t *ts = (uint16_t *)sm; /* a, bt, v: 16 rows of 32 bytes each */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* a in the first group, bt and v in the second: after wait_group 1 only a is sure */
    zt_cp_async16(ts + lane * 8, in->a + lane * 8);
    zt_cp_async_commit();
    zt_cp_async16(ts + 256 + lane * 8, in->bt + lane * 8);
    zt_cp_async16(ts + 512 + lane * 8, in->v + lane * 8);
    zt_cp_async_commit();
    zt_cp_async_wait<1>();
    __syncwarp();
    /* lane 8 m + i: row i of tile m, which starts at row 8 (m & 1), column 8 (m >> 1) */
    const int row = ((lane >> 3) & 1) * 8 + (lane & 7), col = (lane >> 4) * 8;
    uint32_t a[4], bt[4], v[4];
    zt_ldmatrix_x4(a, ts + row * 16 + col);
    zt_cp_async_wait<0>();
    __syncwarp();
    /* bt's tiles in the order b wants them: n 0-7 (k 0-7, k 8-15), then n 8-15 */
    zt_ldmatrix_x4(bt, ts + 256 + (col + (lane & 7)) * 16 + ((lane >> 3) & 1) * 8);
    zt_ldmatrix_x4_trans(v, ts + 512 + row * 16 + col);
    for (int m = 0; m < 4; m++) o->ld_a[lane][m] = a[m], o->ld_bt[lane][m] = bt[m], o->ld_v[lane][m] = v[m];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < 8; e++) o->tiles[k][lane * 8 + e] = ts[k * 256 + lane * 8 + e];

    float dbt[2][4], dv[2][4], e[2][4] = {};
    for (int j = 0; j < 2; j++) acc_load(dbt[j], in->c, 8 * j, g, t), acc_load(dv[j], in->c, 8 * j, g, t);
    zt_mma_16816_x2(dbt[0], dbt[1], a, bt); /* r[0], r[1]: n 0-7; r[2], r[3]: n 8-15 */
    zt_mma_16816_x2(dv[0], dv[1], a, v);
    /* the accumulators of the two 8-column tiles, packed, are the a operand over 16 columns */
    const uint32_t p[4] = {zt_pack_bf16x2(dbt[0][0], dbt[0][1]), zt_pack_bf16x2(dbt[0][2], dbt[0][3]),
                           zt_pack_bf16x2(dbt[1][0], dbt[1][1]), zt_pack_bf16x2(dbt[1][2], dbt[1][3])};
    zt_mma_16816_x2(e[0], e[1], p, v);
    for (int j = 0; j < 2; j++) {
        acc_store(o->d_bt, dbt[j], 8 * j, g, t);
        acc_store(o->d_v, dv[j], 8 * j, g, t);
        acc_store(o->e, e[j], 8 * j, g, t);
    }
    o->packed[lane] = zt_pack_bf16x2(in->x[2 * lane], in->x[2 * lane + 1]);
}

void zt_cu_mma_check(zt_cu_mma_out *out, const zt_cu_mma_in *in)
{
    mma_check_kernel<<<1, 32, 3 * 256 * sizeof(uint16_t), zt_cu.stream>>>(out, in);
    ZT_CU_LAUNCHED();
}
