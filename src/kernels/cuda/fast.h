/* fast.h — the CUDA backend's fast kernels: entries for the table's `fast` mode
 * (docs/gpu.md, "Fast kernels"), each with the signature and the meaning of the
 * backend.h entry it stands for (the three fused entries, which stand for several, have
 * their own), computed faster and within bf16 error of the exact kernel (tensor cores, fp32 sums in another order, FMA contraction allowed), instead of
 * bit for bit the CPU's.  Each is checked against its exact twin by
 * tests/gpu/kernels_check (groups fast-*, `--only fast`), on a GPU and under
 * tools/cuda_emu (all but the cuBLASLt product, fast-matmul).
 *
 * A plain C header: zt_cu_fast_overlay (below) builds the fast table from them. */
#ifndef ZT_CUDA_FAST_H
#define ZT_CUDA_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "../../core/dtype.h"
#include "../../core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- attention (fast_attention.cu, fast_attention_bwd.cu): tensor-core flash attention with bf16 operands
 *
 * The backend.h entries attention_scratch_bytes / attention_forward /
 * attention_backward.  With a scratch (bf16 compute, head sizes 32, 64, 96 and 128:
 * the CPU's rule for bf16 operands), q, k, v, p, dout and ds are bf16 operands of
 * warp-level tensor-core products with fp32 accumulation (mma.sync m16n8k16, forward
 * and backward); the softmax statistics, lse, D and every output stay fp32.  Without a scratch (fp32
 * compute, or another head size) they run the exact kernels of attention.cu.  Causal,
 * grouped-query and sliding-window attention as the exact kernel; deterministic (no
 * atomics: each backward kernel is the sole writer of what it sums, and a group's
 * per-head dk and dv are added in head order).  The scratch's size is backend.h's
 * zt_attention_fast_scratch_bytes. */
size_t zt_cu_fast_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd);
void zt_cu_fast_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                  int B, int T, int nh, int nkv, int hd, int window);
void zt_cu_fast_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd,
                                   int window);
/* 1 when the tensor-core kernels serve this head size (the others take the exact path) */
int zt_cu_fast_attention_supported(int hd);
/* backend.h's attention_forward_act16 / attention_backward_act16: the same kernels over
 * bf16 qkv as the product wrote it, q and k rotated by RoPE (cos_t, sin_t: the (T, hd/2)
 * tables; NULL: not rotated) as their tiles are staged (the forward's k once per call,
 * into the scratch), and, backward, dq and dk rotated
 * back (the transpose rotation) before they are written into dqkv (fp32) and/or dqkv16
 * (bf16); bf16 out read for D; the output in bf16 only.  Without the tensor-core path,
 * the exact table's entries (exact kernels on widened copies, act16.cu). */
void zt_cu_fast_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                        const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                        int window);
void zt_cu_fast_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                         const uint16_t *out16, const float *lse, const float *cos_t,
                                         const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                         int window);

/* ---- the same two entries through cuDNN's fused attention (fast_cudnn.cu): cuDNN where
 * attention_choice.h takes it for the shape (chosen once per shape, cuDNN's graphs built
 * then), the two entries above otherwise; the fast table's attention_*_act16 */
void zt_cu_cudnn_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                         const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                         int window);
void zt_cu_cudnn_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                          const uint16_t *out16, const float *lse, const float *cos_t,
                                          const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                          int window);
/* 1 when the two entries above run cuDNN for this shape (the choice made at its first call) */
int zt_cu_cudnn_attention_used(int B, int T, int nh, int nkv, int hd, int window);

/* ---- SwiGLU over bf16 gu (fast_act16.cu): backend.h's swiglu_forward_act16,
 * swiglu_backward_act16, with FMA contraction and the hardware exp */
void zt_cu_fast_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F);
void zt_cu_fast_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F);

/* ---- RMSNorm and SwiGLU (fast_norm.cu): fp32 sums, a warp per row, the hardware exp
 *
 * rmsnorm_forward / rmsnorm_backward / swiglu_forward / swiglu_backward of backend.h. */
void zt_cu_fast_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                                float eps);
void zt_cu_fast_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                                 const float *dy, const float *x, const float *w, const float *rstd, int N, int C);
/* The residual add fused into the norm after it (a new entry, for a model step that
 * uses it): x (N, C) fp32 += delta (N, C, fp32 or bf16), then rmsnorm_forward of the
 * new x into y.  The backward is rmsnorm_backward's, whose dx_beta 1 adds into dx. */
void zt_cu_fast_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt,
                                         float *rstd, const float *w, int N, int C, float eps);
void zt_cu_fast_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F);
void zt_cu_fast_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F);

/* ---- products that write bf16, with the residual add fused (matmul.cu, cuBLASLt)
 *
 * D (M, N) in d_dt = op(A) op(B) (+ residual), the table's matmul otherwise (its
 * argument rules, operands rounded to `compute`, fp32 accumulation).  d_dt fp32, or bf16
 * with bf16 compute (rounded once, in cuBLASLt's epilogue: no fp32 product in memory).
 * residual (M, N) in d_dt, or NULL: added in the same epilogue (cuBLASLt's beta = 1 with
 * C = residual); it may be D itself (x += f(x) in place).  Errors as the table's matmul;
 * another d_dt / compute pair is refused with ZT_EINPUT. */
int zt_cu_fast_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                          zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err);
/* backend.h's linear_act16: y16 (N, out) = bf16(x w^T + b) in one product, the bias (bf16)
 * in cuBLASLt's BIAS epilogue; without a bias, zt_cu_fast_matmul_out's bf16 result; with
 * a bias in another dtype, the exact table's composition (act16.cu) */
int zt_cu_fast_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                            zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err);

/* ---- cross-entropy fused with the lm-head (fast_xent.cu): chunks of rows, so fp32
 * logits for the whole batch never exist.
 *
 * x (N, C) in x_dt, the lm-head weight w (V, C) in w_dt, targets (N) on the host.
 * Per chunk of chunk_rows rows: logits = x w^T (the table's matmul in `compute`), the
 * softmax cross-entropy, dlogits = (softmax - onehot) grad_scale (bf16 for bf16
 * compute; with the step's scalars scale_src, a device buffer, grad_scale is
 * zt_step_grad_scale of them, formed as the kernel runs: backend.h, xent_into),
 * dx = dlogits w (dx (N, C) fp32, overwritten; NULL: not wanted) and dw += dlogits^T x
 * (the first chunk's product with beta dw_beta: 0 stores)
 * (dw (V, C) fp32; NULL: not wanted).  *loss_sum (a device double; NULL: not wanted)
 * += the sum of the N row losses, in row order, on the device: nothing
 * here waits for the device.  Memory: chunk_rows V (4 + 2) bytes of the backend's
 * scratch.  A target ZT_IGNORE_INDEX: no loss and a zero gradient row (as xent).  A
 * target outside [0, V) or a bad shape: ZT_EINPUT (fused.h's rules); a failed product:
 * its error. */
int zt_cu_fast_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x,
                           zt_dtype x_dt, const void *w, zt_dtype w_dt, const int *targets, int N, int C,
                           int V, float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute,
                           int chunk_rows, zt_err *err);

/* ---- the embedding's backward (fast_embed.cu): fp32 atomics, no host sort; the
 * backend.h entry embed_backward, summing a repeated token's rows in the device's order */
void zt_cu_fast_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta);

/* ---- the fast table (fast_table.cu)
 *
 * Puts the fast kernels that share backend.h's signatures in place of the exact ones in
 * *t (a copy of the CUDA table): attention_scratch_bytes, attention_forward,
 * attention_backward, rmsnorm_forward, rmsnorm_backward, swiglu_forward,
 * swiglu_backward, embed_backward, the three fused entries above
 * (rmsnorm_residual_forward, matmul_out, lmhead_xent, whose exact twins are
 * compositions of the exact entries, fused.cu), and the six _act16 entries (whose
 * exact twins are act16.cu's).  Every other entry stays the exact one. */
struct zt_backend;
void zt_cu_fast_overlay(struct zt_backend *t);

#ifdef __cplusplus
}
#endif

#endif
