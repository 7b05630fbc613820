/* attention_cache.c — causal grouped-query attention of new query rows over a
 * KV cache, fp32 (inference: prompt prefill and one-token decoding).
 *
 * Row i of the n new rows sits at position p = pos0 + i and attends to the cache
 * positions 0..p, which already hold its own key and value; with a sliding window
 * (Mistral's sliding_window, window > 0) only to max(0, p - window + 1)..p, the
 * keys transformers' sliding-window mask leaves it.  The cache keeps every position
 * (it never evicts), so a window only narrows the range read.  Per query head h,
 * reading kv head g = h / (nh / nkv):
 *   s_j = (q . k_j) / sqrt(hd),   P = softmax(s),   out = sum_j P_j v_j
 * with the division after the dot product and an explicit two-pass softmax, as
 * Hugging Face's eager LlamaAttention computes it in fp32 (matmul, / sqrt(hd),
 * softmax in fp32, matmul), so greedy decoding follows its argmax.
 *
 * The cache of one layer is (nkv, cap, hd): a head's keys are contiguous, so the
 * score loop streams through memory.  Work is split over (row, head) pairs; each
 * thread keeps its scores in its own slice of the caller's scratch. */
#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <omp.h>

size_t zt_attention_cache_scratch_floats(int cap, int threads)
{
    return (size_t)cap * (size_t)(threads > 0 ? threads : 1);
}

void zt_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                const float *v_cache, int cap, int pos0, int n, int nh, int nkv,
                                int hd, int window, float *scratch, int threads)
{
    assert(nkv > 0 && nh % nkv == 0 && pos0 >= 0 && pos0 + n <= cap && threads > 0 && window >= 0);
    const int group = nh / nkv;
    const float root = sqrtf((float)hd);
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int task = 0; task < n * nh; task++) {
        const int i = task / nh, h = task % nh, g = h / group, last = pos0 + i;
        const int first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
        const float *restrict qh = q + (size_t)i * q_stride + (size_t)h * hd;
        const float *restrict kh = k_cache + (size_t)g * cap * hd;
        const float *restrict vh = v_cache + (size_t)g * cap * hd;
        float *restrict s = scratch + (size_t)omp_get_thread_num() * cap;
        float mx = -INFINITY;
        for (int j = first; j <= last; j++) {
            const float *restrict kj = kh + (size_t)j * hd;
            float dot = 0.0f;
            #pragma omp simd reduction(+ : dot)
            for (int d = 0; d < hd; d++)
                dot += qh[d] * kj[d];
            s[j] = dot / root;
            mx = s[j] > mx ? s[j] : mx;
        }
        float sum = 0.0f;
        for (int j = first; j <= last; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        float *restrict o = out + (size_t)i * nh * hd + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            o[d] = 0.0f;
        for (int j = first; j <= last; j++) {
            const float p = s[j] / sum;
            const float *restrict vj = vh + (size_t)j * hd;
            #pragma omp simd
            for (int d = 0; d < hd; d++)
                o[d] += p * vj[d];
        }
    }
}
