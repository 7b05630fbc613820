/* entries.cuh — the CUDA backend's implementations of the table's entries (backend.h),
 * one file per piece, gathered into the table by backend.cu.  Each has the signature
 * and the semantics of the CPU entry it stands for. */
#ifndef ZT_CUDA_ENTRIES_CUH
#define ZT_CUDA_ENTRIES_CUH

#include "common.cuh"

/* convert.cu */
void zt_cu_convert(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, size_t n);

/* matmul.cu */
int zt_cu_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                 int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err);
int zt_cu_matmul_init(zt_err *err);
void zt_cu_matmul_shutdown(void);
int zt_cu_matmul_peak(int dev, zt_dtype compute, double *tflops, zt_err *err);

/* embed.cu */
void zt_cu_embed_forward(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C);
void zt_cu_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta);
void zt_cu_embed_shutdown(void);

/* rmsnorm.cu */
void zt_cu_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                           float eps);
void zt_cu_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta, const float *dy,
                            const float *x, const float *w, const float *rstd, int N, int C);

/* bias.cu */
void zt_cu_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D);
void zt_cu_bias_backward(float *db, float beta, const float *dy, int N, int D);

/* rope.cu */
void zt_cu_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f);
void zt_cu_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                        int hd);
void zt_cu_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                         int hd);
/* packed examples (backend.h): pos (B, T) on the host, uploaded in stream order */
void zt_cu_rope_forward_pos(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T, int nh,
                            int nkv, int hd);
void zt_cu_rope_backward_pos(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                             int nh, int nkv, int hd);

/* attention.cu */
size_t zt_cu_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd);
/* window: 0 causal; > 0 also i - j < window (compat's sliding window, kernels.h) */
void zt_cu_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch, int B,
                             int T, int nh, int nkv, int hd, int window);
void zt_cu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd, int window);
/* packed examples (backend.h, kernels.h's zt_attention_forward_pos): pos (B, T) on the
 * host, uploaded in stream order; NULL: the entries above */
void zt_cu_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                 const int *pos, int B, int T, int nh, int nkv, int hd, int window);
void zt_cu_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, void *scratch, const int *pos, int B, int T, int nh, int nkv,
                                  int hd, int window);

/* attention_cache.cu */
size_t zt_cu_attention_cache_scratch_bytes(int cap, int threads);
void zt_cu_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                   const float *v_cache, int cap, int pos0, int n, int nh, int nkv, int hd,
                                   int window, float *scratch, int threads);

/* swiglu.cu */
void zt_cu_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F);
void zt_cu_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F);

/* act16.cu: the bf16 activations of fast mode (backend.h's _act16 entries) */
int zt_cu_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                       zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err);
void zt_cu_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                   const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd, int window);
void zt_cu_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                    const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                    void *scratch, int B, int T, int nh, int nkv, int hd, int window);
void zt_cu_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F);
void zt_cu_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F);

/* transpose.cu */
void zt_cu_transpose(float *dst, const float *src, int rows, int cols);

/* xent.cu */
double zt_cu_xent(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                  float grad_scale);
void zt_cu_xent_into(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                     float grad_scale, const zt_step_scalars *scale_src, double *loss_sum);

/* fused.cu: the fused entries as compositions of the exact ones (the fast table has fast.h's) */
void zt_cu_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt, float *rstd,
                                    const float *w, int N, int C, float eps);
int zt_cu_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                     zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err);
int zt_cu_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                      const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V, float grad_scale,
                      const zt_step_scalars *scale_src, zt_dtype compute, int chunk_rows, zt_err *err);

/* adamw.cu */
void zt_cu_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                      const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit);
void zt_cu_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                      const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                      zt_dtype cast_dt);

/* lora.cu */
void zt_cu_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols);

/* reductions.cu */
double zt_cu_sumsq(const void *x, zt_dtype dt, size_t n);
void zt_cu_accumulate(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n);
void zt_cu_accumulate_bf16_rounded(float *acc, int round_acc, const float *x, size_t n);
double zt_cu_round_bf16(float *x, size_t n, int want_sumsq);
/* the asynchronous step's reductions: results into device doubles, no wait */
void zt_cu_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n);
void zt_cu_sumsq_bf16_into(double *dst, const float *x, size_t n);
void zt_cu_step_verdict(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                        double grad_unscale);
/* *dst = (add ? *dst : 0) + the sum of partials[0..n), one block, a fixed order */
void zt_cu_sum_doubles_into(double *dst, const double *partials, int n, int add);
/* the same for `rows` rows of n partials into dst[0..rows), in one launch */
void zt_cu_sum_rows_into(double *dst, const double *partials, int n, int rows, int add);

#endif
