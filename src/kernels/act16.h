/* act16.h — the bf16-activation entries of backend.h on the host (act16.c): the
 * reference the emulated device's tables run, and what the CUDA fast kernels answer to
 * (docs/gpu.md, "Kernel modes").  Each is an exact composition of kernels.h's kernels
 * with its bf16 inputs widened (exactly: bf16 is a subset of fp32) and its outputs
 * rounded once to bf16. */
#ifndef ZT_ACT16_H
#define ZT_ACT16_H

#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The compositions of the bf16-activation entries, written once over a table's own
 * entries (the host's, below, and the exact CUDA table's, cuda/act16.cu, as fused.h's
 * lm-head loop is): each caller hands in fp32 room of its own (acc N out floats; qkv
 * B T (nh + 2 nkv) hd, out B T nh hd, and g, the fp32 gradient, qkv's size), allocated
 * in its own way.
 *   linear: the result-dtype rule, t->matmul into acc, t->bias_forward (b NULL: none),
 *     t->convert to bf16: one rounding;
 *   attention forward: t->convert widens qkv16, t->rope_forward rotates q and k (cos_t
 *     NULL: not), t->attention_forward;
 *   attention backward: qkv16 and out16 widened, q and k rotated, t->attention_backward
 *     into g, g rotated back by t->rope_backward, then written as bf16 (dqkv16 NULL:
 *     not; g may be the caller's fp32 dqkv). */
struct zt_backend;
int zt_linear_act16_run(const struct zt_backend *t, float *acc, uint16_t *y16, const void *x, zt_dtype x_dt,
                        const void *w, zt_dtype w_dt, const void *b, zt_dtype b_dt, int N, int out, int in,
                        zt_dtype compute, zt_err *err);
void zt_attention_forward_act16_run(const struct zt_backend *t, float *qkv, float *out, uint16_t *out16, float *lse,
                                    const uint16_t *qkv16, const float *cos_t, const float *sin_t, void *scratch,
                                    int B, int T, int nh, int nkv, int hd, int window);
void zt_attention_backward_act16_run(const struct zt_backend *t, float *qkv, float *out, float *g,
                                     uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                     const uint16_t *out16, const float *lse, const float *cos_t,
                                     const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                     int window);

/* y16 = bf16(x w^T + b): matmul into an fp32 temporary, bias_forward, one rounding
 * (b NULL: zt_matmul_out's bf16 result, the same bits) */
int zt_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                    zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err);
/* The CPU table's attention (attention16.c with a pack, attention.c without) on qkv16
 * widened into a temporary and rotated there by rope_forward (cos_t NULL: not), and,
 * backward, its dqkv rotated back by rope_backward in the temporary before it is
 * written (fp32 dqkv and/or bf16 dqkv16): a test device's kernel, so it allocates per
 * call (accounted, ZT_MEM_OTHER) instead of asking the model for fp32 room it would not
 * otherwise hold; it aborts, naming itself, when that allocation fails. */
void zt_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                const float *sin_t, void *pack, int B, int T, int nh, int nkv, int hd, int window);
void zt_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                 const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                 void *pack, int B, int T, int nh, int nkv, int hd, int window);
/* swiglu.c's arithmetic on gu in bf16: h16 = bf16(silu(g) u), dgu16 = bf16(dg | du) */
void zt_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F);
void zt_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F);

#ifdef __cplusplus
}
#endif

#endif
