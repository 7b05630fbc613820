/* fused.cu — the fused entries of backend.h in the exact CUDA table: each is the
 * composition of the exact entries it stands for, in the order the host's composition
 * (fused.h) runs them, so exact mode keeps the exact kernels' numbers.  The fast table
 * puts fast.h's fused kernels in their place (fast_table.cu). */
#include "entries.cuh"
#include "fast.h"

extern "C" {
#include "../backend_cuda.h"
#include "../fused.h"
#include "../matmul.h"
}

void zt_cu_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt, float *rstd,
                                    const float *w, int N, int C, float eps)
{
    zt_cu_accumulate(x, ZT_F32, delta, delta_dt, (size_t)N * C);
    zt_cu_rmsnorm_forward(y, y_dt, rstd, x, w, N, C, eps);
}

int zt_cu_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                     zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err)
{
    if (d_dt != ZT_F32) /* bf16: rounded once, in cuBLASLt's epilogue (the refusals are its) */
        return zt_cu_fast_matmul_out(D, d_dt, residual, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, compute, err);
    const float beta = residual ? 1.0f : 0.0f;
    zt_mm_work work;
    const int bad = zt_matmul_check_args((const float *)D, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (bad || work == ZT_MM_NOTHING)
        return bad;
    if (residual && residual != D) /* D = residual, then D += A B: the table's copy and matmul */
        ZT_CU_TRY(err, cudaMemcpyAsync(D, residual, (size_t)M * N * sizeof(float), cudaMemcpyDeviceToDevice,
                                       zt_cu.stream));
    return zt_cu_matmul((float *)D, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, compute, err);
}

/* fused.h's chunk loop over this, the exact, table's entries: matmul, xent_into (or
 * xent when no loss is wanted), matmul, matmul per chunk */
int zt_cu_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                      const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V, float grad_scale,
                      const zt_step_scalars *scale_src, zt_dtype compute, int chunk_rows, zt_err *err)
{
    int rc = zt_lmhead_xent_check_args(targets, N, C, V, chunk_rows, err);
    if (rc || N == 0)
        return rc;
    const zt_lmhead_chunk ch = zt_lmhead_xent_chunk(N, V, chunk_rows, dx != NULL || dw != NULL, compute);
    /* one chunk's logits and bf16 gradients: the exact xent uses the shared scratch
     * itself, so the chunk has an allocation of its own (exact mode waits anyway) */
    const size_t bytes = ch.logit_bytes + ch.grad16_bytes;
    void *chunk = NULL;
    if (cudaMalloc(&chunk, bytes) != cudaSuccess) {
        cudaGetLastError();
        return zt_fail(err, ZT_EFAIL, "out of device memory for %d rows of logits (V=%d)", ch.rows, V);
    }
    zt_mem_account(ZT_MEM_ACTIV, bytes);
    uint16_t *grad16 = ch.grad16_bytes ? (uint16_t *)((char *)chunk + ch.logit_bytes) : NULL;
    rc = zt_lmhead_xent_run(zt_backend_cuda_mode(ZT_KERNELS_EXACT), &ch, (float *)chunk, grad16, loss_sum, dx,
                            dw, dw_beta, x, x_dt, w, w_dt, targets, N, C, V, grad_scale, scale_src, compute,
                            err);
    ZT_CU(cudaFree(chunk)); /* waits for the chunk's last kernels */
    zt_mem_unaccount(ZT_MEM_ACTIV, bytes);
    return rc;
}
