/* act16.h — the bf16-activation entries of backend.h on the host (act16.c): the
 * reference the emulated device's tables run, and what the CUDA fast kernels answer to
 * (docs/gpu.md, "Kernel modes").  Each is an exact composition of kernels.h's kernels
 * with its bf16 inputs widened (exactly: bf16 is a subset of fp32) and its outputs
 * rounded once to bf16. */
#ifndef ZT_ACT16_H
#define ZT_ACT16_H

#include <stdint.h>

/* qkv16 = bf16(rope(src)); rope.c's arithmetic, then one rounding */
void zt_rope_forward_act16(uint16_t *qkv16, const float *src, const float *cos_t, const float *sin_t, int B, int T,
                           int nh, int nkv, int hd);
/* dqkv16 = bf16(rope_backward(dqkv)) */
void zt_rope_backward_act16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t, int B,
                            int T, int nh, int nkv, int hd);
/* The CPU table's attention (attention16.c with a pack, attention.c without) on qkv16
 * and out16 widened into a temporary: a test device's kernel, so it allocates per call
 * (accounted, ZT_MEM_OTHER) instead of asking the model for fp32 room it would not
 * otherwise hold; it aborts, naming itself, when that allocation fails. */
void zt_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, void *pack, int B, int T, int nh,
                                int nkv, int hd, int window);
void zt_attention_backward_act16(float *dqkv, const float *dout, const uint16_t *qkv16, const uint16_t *out16,
                                 const float *lse, void *pack, int B, int T, int nh, int nkv, int hd, int window);
/* swiglu.c's arithmetic on gu in bf16: h16 = bf16(silu(g) u), dgu16 = bf16(dg | du) */
void zt_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F);
void zt_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F);

#endif
