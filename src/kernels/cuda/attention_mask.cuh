/* attention_mask.cuh — which keys a query sees, for every attention kernel of the CUDA
 * backend (the exact attention.cu and the tensor-core fast_attention.cu): causal, and
 * with a sliding window w > 0 also i - j < w (kernels.h's rule, transformers' mask).
 * One home, so the exact and the fast kernels cannot disagree on the mask. */
#ifndef ZT_CUDA_ATTENTION_MASK_CUH
#define ZT_CUDA_ATTENTION_MASK_CUH

#include "common.cuh"

/* query i sees key j */
__device__ __forceinline__ bool zt_attn_visible(int i, int j, int window)
{
    return j <= i && (window == 0 || i - j < window);
}

/* The first key block (of blk keys) that a query block starting at i0 sees any key of. */
__device__ __forceinline__ int zt_attn_first_key_block(int i0, int window, int blk)
{
    return window > 0 && i0 - window + 1 > 0 ? (i0 - window + 1) / blk : 0;
}

/* The last query block (of blk queries) that sees a key of the key block [j0, j0 + nk):
 * its last key is seen by queries up to j0 + nk - 1 + window - 1. */
__device__ __forceinline__ int zt_attn_last_query_block(int j0, int nk, int window, int nblk, int blk)
{
    int last = nblk - 1;
    if (window > 0 && (j0 + nk - 2 + window) / blk < last)
        last = (j0 + nk - 2 + window) / blk;
    return last;
}

#endif
