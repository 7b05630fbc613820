/* infer.h — the Llama forward for inference: weights held whole in one process,
 * a KV cache, and new tokens appended a chunk at a time (prompt prefill) or one at
 * a time (decoding).
 *
 * Training's zt_model runs fixed (B, T) batches from position 0 and keeps every
 * activation for backward; here each call takes n new tokens at positions
 * pos..pos+n-1, stores their rotated keys and values in the cache, attends over
 * everything cached so far, and produces the logits of the last new token only.
 * The matrix products, RMSNorm, RoPE and SwiGLU are the training kernels; only the
 * attention over the cache is its own kernel (attention_cache.c).
 *
 * Dtypes: weights are held in the compute dtype (fp32 or bf16; loading rounds to
 * it as from_pretrained(torch_dtype=...) does); products take bf16 operands in bf16
 * compute, fp32 otherwise; the residual stream, norms, attention, softmax and
 * the cache are fp32. */
#ifndef ZT_INFER_H
#define ZT_INFER_H

#include <stddef.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../model/config.h"
#include "../model/frozen.h"
#include "../model/layout.h"

typedef struct zt_infer {
    zt_llama_config cfg;
    zt_layout lay;         /* one unit, no padding: offsets into weights */
    zt_dtype compute;      /* dtype of the weights and of the products */
    zt_dtype opd;          /* dtype of the norm and SwiGLU outputs fed to products */
    int cap;               /* positions the cache holds */
    int rows;              /* most new tokens one internal pass takes (longer prompts are chunked) */
    int threads;           /* attention threads (the scratch is sized for them) */
    int pos;               /* positions filled so far */
    const zt_backend *be;              /* the frozen owner's backend: buffers and kernels */
    zt_frozen_params frozen;           /* the weights, whole, in compute */
    int have_frozen;
    const void *weights;               /* frozen's one unit: lay.numel elements in compute */
    float *norms;          /* fp32 copies of the norm weights: (2L + 1, C), layer l's at 2l, 2l+1 */
    float *k_cache, *v_cache;          /* (L, nkv, cap, hd) each */
    float *rope_cos, *rope_sin;        /* (cap, hd/2) */
    float *x, *h, *qkv, *att, *gu;     /* (rows, C), (rows, C), (rows, Dqkv), (rows, Dq), (rows, 2F) */
    void *n, *act;                     /* (rows, C), (rows, F) in opd */
    float *rstd;                       /* (rows) */
    float *scores;                     /* attention scratch */
    float *logits;                     /* (V): the last new token's, where the backend computes */
    float *logits_host;                /* (V): the same on the host (logits itself on the CPU) */
    size_t weight_bytes, act_bytes;    /* accounted: ZT_MEM_PARAMS, ZT_MEM_ACTIV */
    void *alloc_list;                  /* internal: the blocks to free */
} zt_infer;

/* Load the Hugging Face directory dir for a context of cap positions (prompt plus
 * new tokens; at most max_position_embeddings).  compute: ZT_F32 or ZT_BF16.
 * threads: the threads the attention may use (the products use OpenMP's current
 * count).  be: where the weights and the cache live and the kernels run
 * (zt_backend_cpu(), or a device's table).  Errors: ZT_EINPUT naming the file or
 * the limit, ZT_EFAIL out of memory. */
int zt_infer_open(zt_infer *m, const char *dir, zt_dtype compute, int cap, int threads, const zt_backend *be,
                  zt_err *err);
void zt_infer_free(zt_infer *m);

/* Forget the cached positions (a new sequence). */
void zt_infer_reset(zt_infer *m);

/* Append n >= 1 tokens at positions pos..pos+n-1 and compute the logits of the last
 * one (zt_infer_logits).  ZT_EINPUT when a token is outside the vocabulary or the
 * cache would overflow (nothing is changed then). */
int zt_infer_forward(zt_infer *m, const int *tokens, int n, zt_err *err);
/* The last forward's logits (V floats), in host memory. */
const float *zt_infer_logits(const zt_infer *m);

#endif
