/* kernels.h — the hand-written compute kernels of the Llama block, fp32 arithmetic.
 *
 * Activations are row-major; N = B*T token rows.  The arithmetic is fp32 throughout.
 * Outputs that only ever feed matrix products (norm outputs, the SwiGLU output and
 * its input gradient, the attention output, the logits' and residual stream's
 * gradients) can also be written in bf16 for bf16 compute: each such bf16 value is
 * the round-to-nearest-even of the fp32 value the kernel computes, so a product
 * fed with it sees exactly what rounding its fp32 operand (autocast) would give,
 * without a separate conversion pass.  Conventions:
 *  - forward functions overwrite their outputs;
 *  - backward functions OVERWRITE input gradients (dx, dqkv, dgu) unless the name
 *    says _accumulate, and ACCUMULATE (+=) weight gradients (dw), because weight
 *    gradients sum over micro-batches;
 *  - all kernels parallelise with OpenMP over rows / heads and never allocate
 *    per call beyond small stack scratch (the step loop does not allocate).
 * Packed layouts follow the flat parameter order: a layer's q, k, v projections
 * are contiguous, so one matmul yields qkv rows of width (nh + 2*nkv)*hd laid out
 * [q heads | k heads | v heads]; gate and up are contiguous, so one matmul yields
 * gu rows of width 2F laid out [gate | up]. */
#ifndef ZT_KERNELS_H
#define ZT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "rope_freq.h"

/* Embedding lookup: x (N, C) fp32 row i = row tokens[i] of wte (V, C) in dt.
 * Backward: dwte[tokens[i]] += dx[i] in increasing i (fp32; rows of a repeated token
 * sum), onto dwte (beta 1) or onto zeros (beta 0: dwte not read, every row written). */
void zt_embed_forward(float *x, const void *wte, zt_dtype dt, const int *tokens, int N, int C);
void zt_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta);

/* RMSNorm (HF LlamaRMSNorm): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
 * x: (N, C) fp32; y: (N, C) in y_dt (ZT_F32 or ZT_BF16); w: (C); rstd: (N) saved for
 * backward (which needs x and rstd, never y). */
void zt_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N,
                        int C, float eps);
/* dx = dx_beta dx + d/dx, dw = dw_beta dw + d/dw (dx is the residual stream's
 * gradient, which adds; each beta 0: store, the destination not read, or 1: add;
 * rmsnorm.c says why a store is 0 + v).  When dx_bf16 is not NULL it receives the
 * bf16 rounding of the updated dx (N, C). */
void zt_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                         const float *dy, const float *x, const float *w, const float *rstd, int N,
                         int C);

/* Bias of a linear layer (bias.c): y (N, D) += b (D) in b_dt, after the product;
 * backward db (D) = beta db + the column sums of dy (N, D), over n in order, in fp32
 * (beta 0: store, db not read; 1: add). */
void zt_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D);
void zt_bias_backward(float *db, float beta, const float *dy, int N, int D);

/* Rotary embeddings, HF's rotate_half convention: for i < hd/2, with
 * f_i = theta^(-2i/hd) and angle a = pos * f_i,
 *   y[i] = x[i] cos a - x[i + hd/2] sin a,   y[i + hd/2] = x[i + hd/2] cos a + x[i] sin a.
 * Tables cos, sin: (T, hd/2), computed as HF does (inv_freq and pos*inv_freq in fp32);
 * f gives theta and, for Llama 3.1, the scaling of the frequencies (rope_freq.h). */
void zt_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f);
/* Rotate the q and k heads of qkv (B, T, (nh + 2*nkv)*hd) in place; positions are 0..T-1. */
void zt_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                     int nkv, int hd);
/* Backward of the rotation (its transpose: rotate by -a), in place on the dq, dk parts of dqkv. */
void zt_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                      int nkv, int hd);
/* The same with each token's position from pos (B, T) (packed examples: positions restart
 * at each example, transformers' position_ids), each < T, the tables' length; pos NULL:
 * the functions above. */
void zt_rope_forward_pos(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                         int nh, int nkv, int hd);
void zt_rope_backward_pos(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                          int nh, int nkv, int hd);

/* Causal grouped-query attention, scale 1/sqrt(hd); query head h reads kv head h / (nh/nkv).
 * qkv: (B, T, (nh + 2*nkv)*hd) after RoPE; out: (B, T, nh*hd); lse: (B, nh, T), the
 * log-sum-exp of each softmax row, saved so backward recomputes probabilities without
 * ever storing a T x T matrix.
 * window: Mistral's sliding window, 0 for none.  The query at position i sees the keys j
 * with j <= i and, when window > 0, i - j < window (transformers' sliding-window causal
 * mask: itself and the window - 1 keys before it).  window 0 gives exactly the plain
 * causal results. */
void zt_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int nh, int nkv,
                          int hd, int window);
/* The same, also writing the bf16 rounding of out into out_bf16 (B, T, nh*hd) when it
 * is not NULL (the output projection's operand; backward still reads the fp32 out). */
void zt_attention_forward_copy16(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                                 int B, int T, int nh, int nkv, int hd, int window);
/* dqkv (same shape as qkv) is overwritten with the gradients of q, k and v. */
void zt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int nh, int nkv, int hd, int window);
/* Packed examples (padding-free): pos (B, T) is each token's position inside its own
 * example (transformers' position_ids: 0 at an example's first token, then +1), and
 * query i sees only the keys j with i - pos_i <= j <= i (and the window), the keys of
 * its own example: each example's results are those of the example alone.  pos NULL:
 * the functions above. */
void zt_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                              const int *pos, int B, int T, int nh, int nkv, int hd, int window);
void zt_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int *pos, int B, int T, int nh, int nkv, int hd,
                               int window);

/* Inference: the attention of n new query rows over a KV cache (attention_cache.c).
 * Row i is at position p = pos0 + i and attends to cache positions 0..p, or with a
 * window > 0 to max(0, p - window + 1)..p.  q: the rows' nh query heads (after RoPE),
 * q_stride floats apart; k_cache, v_cache: one layer's (nkv, cap, hd), already holding
 * the new rows' keys and values; out (n, nh*hd).  scratch:
 * zt_attention_cache_scratch_floats(cap, threads) floats; the kernel runs on that many
 * threads. */
size_t zt_attention_cache_scratch_floats(int cap, int threads);
void zt_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                const float *v_cache, int cap, int pos0, int n, int nh, int nkv,
                                int hd, int window, float *scratch, int threads);

/* The same attention with bf16 operands in every tile product (q, k, v, probabilities,
 * dout, score gradients; fp32 accumulation and softmax), for bf16 compute
 * (attention16.c).  pack is scratch of zt_attention16_pack_bytes(B, T, nkv, hd) bytes,
 * refilled by each call.  Only for head dimensions zt_attention16_supported accepts. */
int zt_attention16_supported(int hd);
size_t zt_attention16_pack_bytes(int B, int T, int nkv, int hd);
/* ..._pos: packed examples, as zt_attention_forward_pos (pos NULL: the functions below). */
void zt_attention16_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                                void *pack, const int *pos, int B, int T, int nh, int nkv, int hd, int window);
void zt_attention16_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, void *pack, const int *pos, int B, int T, int nh, int nkv,
                                 int hd, int window);
void zt_attention16_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                            void *pack, int B, int T, int nh, int nkv, int hd, int window);
void zt_attention16_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, void *pack, int B, int T, int nh, int nkv, int hd,
                             int window);

/* SwiGLU: h = silu(g) * u with gu (N, 2F) = [g | u] fp32, h (N, F) in h_dt. */
void zt_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F);
/* dgu (N, 2F) in dgu_dt (ZT_F32 or ZT_BF16), overwritten. */
void zt_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F);

/* dst (cols, rows) = src (rows, cols) transposed, fp32 (no aliasing). */
void zt_transpose_f32(float *dst, const float *src, int rows, int cols);

/* Softmax cross-entropy over logits (N, V) with int targets in [0, V), or
 * ZT_IGNORE_INDEX (backend.h): that row's loss is 0 and its gradient row all zeros.
 * Returns the SUM of the N token losses (double).  When dlogits is non-NULL it
 * receives (softmax - onehot) * grad_scale; dlogits may equal logits (in place),
 * so only one fp32 logits buffer is ever needed.  When dlogits_bf16 is also
 * non-NULL, the gradient goes there instead, as the bf16 rounding of the fp32 value
 * the kernel would have written into dlogits, which then serves as scratch. */
double zt_xent_forward_backward(float *dlogits, uint16_t *dlogits_bf16, const float *logits,
                                const int *targets, int N, int V, float grad_scale);

#endif
