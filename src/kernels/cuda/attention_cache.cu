/* attention_cache.cu — causal grouped-query attention of n new query rows over a KV
 * cache, on the device (inference; kernels.h, attention_cache.c).
 *
 * Row i sits at position p = pos0 + i and attends to cache positions 0..p (with a
 * sliding window w > 0, max(0, p - w + 1)..p, as the CPU kernel); per query
 * head h, reading kv head g = h / (nh/nkv) of the (nkv, cap, hd) caches:
 *   s_j = (q . k_j) / sqrt(hd),   out = sum_j softmax(s)_j v_j
 * with the division after the dot product, as HF's eager attention (and the CPU
 * kernel) computes it.  One block per (row, head); its 8 warps take every 8th key and
 * keep an online softmax each (running max m, sum l, and the unnormalised output in
 * the lanes' slices of the head dimension), merged at the end:
 *   M = max_w m_w,  l = sum_w l_w e^(m_w - M),  out = sum_w o_w e^(m_w - M) / l.
 * So no score vector is stored and any cache length works.  The CPU kernel's two-pass
 * softmax divides each probability by the sum before the product with v; this one
 * divides once at the end: the same value up to fp32 rounding (a few ulp), and
 * expf here is CUDA's (within 2 ulp) rather than glibc's.  The kernel needs no scratch;
 * the table reports 256 bytes so that a caller who allocates "the scratch" gets a
 * valid buffer. */
#include "entries.cuh"

#define CW 8 /* warps per block */
#define FULL 0xffffffffu

template <int DL>
__global__ void __launch_bounds__(CW * 32) cache_kernel(float *out, const float *q, size_t q_stride,
                                                         const float *k_cache, const float *v_cache, int cap, int pos0,
                                                         int nh, int nkv, int hd, int window)
{
    __shared__ float sm_m[CW], sm_l[CW];
    __shared__ float sm_o[CW][DL * 32];
    const int i = blockIdx.x / nh, h = blockIdx.x % nh, g = h / (nh / nkv);
    const int last = pos0 + i;
    const int first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float root = sqrtf((float)hd);
    const float *qh = q + (size_t)i * q_stride + (size_t)h * hd;
    const float *kh = k_cache + (size_t)g * cap * hd;
    const float *vh = v_cache + (size_t)g * cap * hd;
    float qr[DL], o[DL];
#pragma unroll
    for (int t = 0; t < DL; t++) {
        const int d = lane + 32 * t;
        qr[t] = d < hd ? qh[d] : 0.0f;
        o[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = first + warp; j <= last; j += CW) {
        const float *kj = kh + (size_t)j * hd, *vj = vh + (size_t)j * hd;
        float part = 0.0f;
#pragma unroll
        for (int t = 0; t < DL; t++) {
            const int d = lane + 32 * t;
            if (d < hd)
                part = fmaf(qr[t], kj[d], part);
        }
        for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(FULL, part, off);
        const float s = part / root;
        const float mnew = fmaxf(m, s);
        const float c = expf(m - mnew), p = expf(s - mnew); /* m = -inf at first: c = 0 */
        l = l * c + p;
#pragma unroll
        for (int t = 0; t < DL; t++) {
            const int d = lane + 32 * t;
            o[t] = o[t] * c + (d < hd ? p * vj[d] : 0.0f);
        }
        m = mnew;
    }
    if (lane == 0)
        sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
    for (int t = 0; t < DL; t++) sm_o[warp][lane + 32 * t] = o[t];
    __syncthreads();
    if (warp != 0)
        return;
    float M = -INFINITY;
    for (int w = 0; w < CW; w++) M = fmaxf(M, sm_m[w]);
    float L = 0.0f, acc[DL];
#pragma unroll
    for (int t = 0; t < DL; t++) acc[t] = 0.0f;
    for (int w = 0; w < CW; w++) {
        if (sm_m[w] == -INFINITY) /* a warp that saw no key (fewer keys than warps) */
            continue;
        const float e = expf(sm_m[w] - M);
        L += sm_l[w] * e;
#pragma unroll
        for (int t = 0; t < DL; t++) acc[t] += sm_o[w][lane + 32 * t] * e;
    }
    float *orow = out + (size_t)i * nh * hd + (size_t)h * hd;
#pragma unroll
    for (int t = 0; t < DL; t++) {
        const int d = lane + 32 * t;
        if (d < hd)
            orow[d] = acc[t] / L;
    }
}

size_t zt_cu_attention_cache_scratch_bytes(int cap, int threads)
{
    (void)cap, (void)threads;
    return 256;
}

void zt_cu_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                   const float *v_cache, int cap, int pos0, int n, int nh, int nkv, int hd,
                                   int window, float *scratch, int threads)
{
    (void)scratch, (void)threads;
    if (n <= 0)
        return;
    if (hd <= 0 || hd > 256 || nkv <= 0 || nh % nkv != 0 || pos0 < 0 || pos0 + n > cap || window < 0) {
        fprintf(stderr, "ztrain: CUDA cache attention: bad shape n=%d pos0=%d cap=%d nh=%d nkv=%d hd=%d window=%d\n",
                n, pos0, cap, nh, nkv, hd, window);
        abort();
    }
    const unsigned grid = (unsigned)n * (unsigned)nh;
    if (hd <= 32)
        cache_kernel<1><<<grid, CW * 32, 0, zt_cu.stream>>>(out, q, q_stride, k_cache, v_cache, cap, pos0, nh, nkv, hd, window);
    else if (hd <= 64)
        cache_kernel<2><<<grid, CW * 32, 0, zt_cu.stream>>>(out, q, q_stride, k_cache, v_cache, cap, pos0, nh, nkv, hd, window);
    else if (hd <= 128)
        cache_kernel<4><<<grid, CW * 32, 0, zt_cu.stream>>>(out, q, q_stride, k_cache, v_cache, cap, pos0, nh, nkv, hd, window);
    else
        cache_kernel<8><<<grid, CW * 32, 0, zt_cu.stream>>>(out, q, q_stride, k_cache, v_cache, cap, pos0, nh, nkv, hd, window);
    ZT_CU_LAUNCHED();
}
