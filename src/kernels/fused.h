/* fused.h — the fused entries of backend.h on the host: the residual add with the
 * norm after it, the product that writes its result (bf16 or fp32) with a residual
 * added, and the lm-head's cross-entropy in chunks of rows (docs/gpu.md, "Fast
 * kernels").  Each is composed of the CPU kernels it stands for (kernels.h, matmul.h,
 * reductions.h), so on the host, and on the emulated device that runs them, a fused
 * entry gives the composition's numbers: exactly, or (the cross-entropy in chunks) up
 * to the order of its sums.  The CUDA table's fast mode has kernels of its own
 * (cuda/fast.h), checked against the exact ones within bf16 error. */
#ifndef ZT_FUSED_H
#define ZT_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "step_scalars.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x (N, C) fp32 += delta (N, C) in delta_dt (fp32 or bf16), then the RMSNorm of the
 * new x into y (y_dt) and rstd: zt_accumulate, then zt_rmsnorm_forward. */
void zt_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt, float *rstd,
                                 const float *w, int N, int C, float eps);

/* D (M, N) in d_dt = op(A) op(B) (+ residual (M, N) in d_dt; NULL: none; it may be
 * D itself), zt_matmul's arguments otherwise.  d_dt fp32: the residual copied into D,
 * then zt_matmul with beta 1 (the model's residual add as it always was).  d_dt bf16
 * (bf16 compute only): the product and the widened residual summed in fp32, rounded
 * to bf16 once, as cuBLASLt's epilogue does.  Another pair: ZT_EINPUT. */
int zt_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                  zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err);

/* The lm-head's cross-entropy and both its gradients, chunk_rows rows at a time, so
 * the (N, V) logits never exist: per chunk, logits = x w^T (zt_matmul in compute),
 * zt_xent_forward_backward (dlogits in bf16 for bf16 compute, in place otherwise),
 * dx = dlogits w (overwritten; NULL: not wanted), dw = dw_beta dw + dlogits^T x summed
 * over the chunks (dw_beta 0 or 1 is the first chunk's beta, 1 the others'; NULL: not
 * wanted); *loss_sum += the N rows' losses (NULL: not wanted); the gradient scale is
 * grad_scale, or with scale_src zt_step_grad_scale(scale_src) (backend.h, xent_into;
 * host memory here).  x (N, C) in x_dt, w
 * (V, C) in w_dt, targets on the host in [0, V) or ZT_IGNORE_INDEX.  The chunk's
 * logits are allocated per call (chunk_rows V (4 + 2) bytes, ZT_MEM_ACTIV).  A target
 * outside the vocabulary or a bad shape: ZT_EINPUT, before anything is written. */
int zt_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                   const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V, float grad_scale,
                   const zt_step_scalars *scale_src, zt_dtype compute, int chunk_rows, zt_err *err);

/* The argument rules of every table's lmhead_xent (the CUDA tables' too): the shape
 * and each target, as a value. */
int zt_lmhead_xent_check_args(const int *targets, int N, int C, int V, int chunk_rows, zt_err *err);

/* One chunk of an lm-head cross-entropy: its rows (chunk_rows, at most N), the bytes of
 * its fp32 logits (rows V 4) and of its bf16 gradients (rows V 2 when a gradient is
 * wanted with bf16 compute, the model's rule: bf16 gradients as the products' operands;
 * else 0). */
typedef struct zt_lmhead_chunk {
    int rows;
    size_t logit_bytes, grad16_bytes;
} zt_lmhead_chunk;
zt_lmhead_chunk zt_lmhead_xent_chunk(int N, int V, int chunk_rows, int grad, zt_dtype compute);

/* The chunk loop of every composed lmhead_xent (the host's, zt_lmhead_xent, and the
 * exact CUDA table's, cuda/fused.cu), over table t's own entries: per chunk of ch->rows
 * rows, t->matmul for logits = x w^T, t->xent_into adding the chunk's loss into
 * *loss_sum (t->xent, its sum dropped, when loss_sum and scale_src are NULL; with a
 * scale_src, in t's memory, xent_into forms the gradient scale from it), then t->matmul for
 * dx = dlogits w and dw += dlogits^T x (the first chunk's with dw_beta; each NULL: not
 * wanted).  logits and grad16 are
 * buffers of t's of ch's sizes, which the caller allocates in its own way; the
 * arguments are checked already (zt_lmhead_xent_check_args, N > 0).  The first failed
 * product's error comes back, the chunks after it not run. */
struct zt_backend;
int zt_lmhead_xent_run(const struct zt_backend *t, const zt_lmhead_chunk *ch, float *logits, uint16_t *grad16,
                       double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                       const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V,
                       float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute, zt_err *err);

#ifdef __cplusplus
}
#endif

#endif
