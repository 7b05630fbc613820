/* cudnn_attention.h — cuDNN's fused flash attention behind a C face (cudnn_attention.cc,
 * the one C++ file of the CUDA backend: the cudnn-frontend headers' graph API).  Built
 * only where `make cuda` finds cuDNN's headers and library (ZT_HAVE_CUDNN); the caller,
 * fast_cudnn.cu, decides when to use it (attention_choice.h).
 *
 * libcudnn is opened at run time (dlopen), never linked: a ztrain built with cuDNN runs
 * where the library is absent, and says so.  The graphs are built once per shape and
 * kept for the run (never freed: a shape is never met for the last time before the
 * process ends); each execution only binds the pointers.  Nothing here allocates device
 * memory for the attention's data (cuDNN's handle keeps its own small state): the caller
 * hands each execution a workspace of the size the build reported, from its own
 * accounted memory.
 *
 * Shapes, for B sequences of T tokens, nh query heads over nkv kv heads of hd, with
 * qk_stride = (nh + nkv) hd and v_stride = (nh + 2 nkv) hd:
 *   q, k   bf16 rows of qk_stride elements: q heads at column 0, k heads at nh hd
 *   v      bf16 rows of v_stride elements (the qkv product's rows: v at (nh + nkv) hd of
 *          its row; the caller passes the pointer to v's first column)
 *   o, dO  bf16 (B, T, nh hd)
 *   stats  fp32 (B, nh, T): the log-sum-exp of each query's scaled scores (natural log)
 *   dq, dk, dv  bf16 rows of v_stride elements, at the columns q, k and v have in qkv
 * Causal (top-left), scale 1/sqrt(hd), fp32 softmax and accumulation. */
#ifndef ZT_CUDA_CUDNN_ATTENTION_H
#define ZT_CUDA_CUDNN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens libcudnn once (later calls answer the same): 1 and *version (cudnnGetVersion),
 * or 0 with why filled (the loader's message). */
int zt_cudnn_load(long *version, char *why, size_t cap);

/* A shape's forward and backward graphs, built on the current device for work queued
 * on stream (a cudaStream_t); NULL with why filled when cuDNN refuses the shape or the
 * build fails.  *ws_fwd and *ws_bwd: the workspace bytes each execution needs. */
typedef struct zt_cudnn_sdpa zt_cudnn_sdpa;
zt_cudnn_sdpa *zt_cudnn_sdpa_build(void *stream, int B, int T, int nh, int nkv, int hd, size_t *ws_fwd,
                                   size_t *ws_bwd, char *why, size_t cap);

/* Queue the forward (o, stats) or the backward (dq, dk, dv) on the build's stream; 0 on
 * success, else -1 with why filled. */
int zt_cudnn_sdpa_forward(zt_cudnn_sdpa *g, const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,
                          float *stats, void *workspace, char *why, size_t cap);
int zt_cudnn_sdpa_backward(zt_cudnn_sdpa *g, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const uint16_t *o, const uint16_t *dO, const float *stats, uint16_t *dq, uint16_t *dk,
                           uint16_t *dv, void *workspace, char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
