/* fused.c — the fused entries on the host, composed of the CPU kernels (fused.h). */
#include "fused.h"

#include <string.h>

#include "../core/mem.h"
#include "backend.h"
#include "kernels.h"
#include "matmul.h"
#include "reductions.h"

void zt_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt, float *rstd,
                                 const float *w, int N, int C, float eps)
{
    zt_accumulate(x, ZT_F32, delta, delta_dt, (size_t)N * (size_t)C);
    zt_rmsnorm_forward(y, y_dt, rstd, x, w, N, C, eps);
}

int zt_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                  zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err)
{
    if (zt_result_dtype_check("matmul", M, N, K, d_dt, compute, err))
        return ZT_EINPUT;
    const float beta = residual ? 1.0f : 0.0f;
    zt_mm_work work;
    int rc = zt_matmul_check_args(D, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (rc || work == ZT_MM_NOTHING)
        return rc;
    const size_t n = (size_t)M * (size_t)N;
    if (d_dt == ZT_F32) { /* D = residual, then D += A B in place */
        if (residual && residual != D)
            memcpy(D, residual, n * sizeof(float));
        return zt_matmul(D, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, compute, err);
    }
    /* bf16: acc = residual + A B in fp32, rounded once */
    float *acc = zt_alloc(ZT_MEM_ACTIV, n * sizeof(float));
    if (!acc)
        return zt_fail(err, ZT_EFAIL, "out of memory for a %d x %d product", M, N);
    if (residual)
        zt_convert(acc, ZT_F32, residual, ZT_BF16, n);
    rc = zt_matmul(acc, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, compute, err);
    if (rc == ZT_OK)
        zt_convert(D, ZT_BF16, acc, ZT_F32, n);
    zt_free(ZT_MEM_ACTIV, acc, n * sizeof(float));
    return rc;
}

int zt_lmhead_xent_check_args(const int *targets, int N, int C, int V, int chunk_rows, zt_err *err)
{
    if (N < 0 || C <= 0 || V <= 0 || chunk_rows <= 0)
        return zt_fail(err, ZT_EINPUT, "fused cross-entropy: bad shape N=%d C=%d V=%d rows per chunk %d", N, C, V,
                       chunk_rows);
    for (int n = 0; n < N; n++) /* out of range would read outside the row */
        if ((targets[n] < 0 || targets[n] >= V) && targets[n] != ZT_IGNORE_INDEX)
            return zt_fail(err, ZT_EINPUT, "fused cross-entropy: target %d of row %d outside the vocabulary [0, %d)",
                           targets[n], n, V);
    return ZT_OK;
}

zt_lmhead_chunk zt_lmhead_xent_chunk(int N, int V, int chunk_rows, int grad, zt_dtype compute)
{
    zt_lmhead_chunk ch;
    ch.rows = chunk_rows < N ? chunk_rows : N;
    ch.logit_bytes = (size_t)ch.rows * V * sizeof(float);
    ch.grad16_bytes = grad && compute == ZT_BF16 ? (size_t)ch.rows * V * sizeof(uint16_t) : 0;
    return ch;
}

int zt_lmhead_xent_run(const zt_backend *t, const zt_lmhead_chunk *ch, float *logits, uint16_t *grad16,
                       double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                       const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V,
                       float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute, zt_err *err)
{
    const int R = ch->rows, grad = dx != NULL || dw != NULL;
    /* the gradient the products read: the bf16 copy where there is one, else the
     * fp32 gradient xent wrote over the logits */
    const zt_dtype g_dt = ch->grad16_bytes ? ZT_BF16 : ZT_F32;
    const void *g = ch->grad16_bytes ? (const void *)grad16 : (const void *)logits;
    const size_t xs = zt_dtype_size(x_dt);
    for (int n0 = 0; n0 < N; n0 += R) {
        const int r = N - n0 < R ? N - n0 : R;
        const void *xc = (const char *)x + (size_t)n0 * C * xs;
        int rc = t->matmul(logits, xc, x_dt, w, w_dt, r, V, C, 0, 1, 0.0f, compute, err);
        if (rc)
            return rc;
        float *dl = grad ? logits : NULL;
        uint16_t *dl16 = ch->grad16_bytes ? grad16 : NULL;
        if (loss_sum || scale_src) /* the scale from the step scalars: xent_into forms it where it runs */
            t->xent_into(dl, dl16, logits, targets + n0, r, V, grad_scale, scale_src, loss_sum);
        else
            (void)t->xent(dl, dl16, logits, targets + n0, r, V, grad_scale);
        if (dx && (rc = t->matmul(dx + (size_t)n0 * C, g, g_dt, w, w_dt, r, C, V, 0, 0, 0.0f, compute, err)))
            return rc;
        if (dw && (rc = t->matmul(dw, g, g_dt, xc, x_dt, V, C, r, 1, 0, n0 ? 1.0f : dw_beta, compute, err)))
            return rc;
    }
    return ZT_OK;
}

int zt_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                   const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V, float grad_scale,
                   const zt_step_scalars *scale_src, zt_dtype compute, int chunk_rows, zt_err *err)
{
    int rc = zt_lmhead_xent_check_args(targets, N, C, V, chunk_rows, err);
    if (rc || N == 0)
        return rc;
    const zt_lmhead_chunk ch = zt_lmhead_xent_chunk(N, V, chunk_rows, dx != NULL || dw != NULL, compute);
    float *logits = zt_alloc(ZT_MEM_ACTIV, ch.logit_bytes);
    uint16_t *grad16 = ch.grad16_bytes ? zt_alloc(ZT_MEM_ACTIV, ch.grad16_bytes) : NULL;
    if (!logits || (ch.grad16_bytes && !grad16))
        rc = zt_fail(err, ZT_EFAIL, "out of memory for %d rows of logits (V=%d)", ch.rows, V);
    else
        rc = zt_lmhead_xent_run(zt_backend_cpu(), &ch, logits, grad16, loss_sum, dx, dw, dw_beta, x, x_dt, w,
                                w_dt, targets, N, C, V, grad_scale, scale_src, compute, err);
    zt_free(ZT_MEM_ACTIV, logits, ch.logit_bytes);
    if (grad16)
        zt_free(ZT_MEM_ACTIV, grad16, ch.grad16_bytes);
    return rc;
}
