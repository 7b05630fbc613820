/* rope.cu — rotary embeddings on the device, HF's rotate_half convention (rope.c).
 *
 * Tables (T, hd/2) built as rope.c builds them: inv_freq by rope_freq.h's formula (the
 * default 1 / theta^(2i/hd), or Llama 3.1's scaling of it) rounded to fp32 where torch
 * rounds it, the angle t * inv_freq
 * in fp32, and pow, cos, sin evaluated in double and rounded once (CUDA's double
 * functions are within 2 ulp of double, so the fp32 result is the correctly rounded
 * one, as on the CPU, except for values within 2^-50 of a rounding midpoint).
 * Forward rotates pair i of each q and k head vector by a = pos * f_i:
 *   y1 = x1 cos a - x2 sin a,   y2 = x2 cos a + x1 sin a;
 * backward rotates by -a (the transpose of the rotation).  One thread per pair,
 * rope_freq.h's zt_rope_rotate (rope.c's too), so the results are the CPU's bits. */
#include "entries.cuh"

__global__ void rope_tables_kernel(float *cos_t, float *sin_t, int T, int hd, zt_rope_freqs f)
{
    const int half = hd / 2;
    const size_t total = (size_t)T * half;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(k / half), i = (int)(k % half);
        const float inv_freq = zt_rope_inv_freq(&f, i, hd); /* rope_freq.h, the CPU's formula */
        const float a = (float)t * inv_freq;
        cos_t[k] = (float)cos((double)a);
        sin_t[k] = (float)sin((double)a);
    }
}

void zt_cu_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f)
{
    const size_t total = (size_t)T * (hd / 2);
    if (total == 0)
        return;
    rope_tables_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(cos_t, sin_t, T, hd, *f);
    ZT_CU_LAUNCHED();
}

/* pairs (row, head < nh + nkv, i < hd/2); sign +1 rotates by +a, -1 by -a */
__global__ void rope_kernel(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int BT, int T, int nh,
                            int nkv, int hd, float sign)
{
    const int half = hd / 2, nrot = nh + nkv;
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t total = (size_t)BT * nrot * half;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k % half);
        const int h = (int)((k / half) % nrot);
        const size_t row = k / ((size_t)half * nrot);
        const int t = pos ? pos[row] : (int)(row % T); /* packed examples: the token's own position */
        float *x1 = qkv + row * W + (size_t)h * hd;
        float *x2 = x1 + half;
        const zt_rope_pair y =
            zt_rope_rotate(x1[i], x2[i], cos_t[(size_t)t * half + i], sign * sin_t[(size_t)t * half + i]);
        x1[i] = y.y1;
        x2[i] = y.y2;
    }
}

static void rope(float *qkv, const float *cos_t, const float *sin_t, const int *hpos, int B, int T, int nh, int nkv,
                 int hd, float sign)
{
    const size_t total = (size_t)B * T * (nh + nkv) * (hd / 2);
    if (total == 0)
        return;
    int *pos = nullptr;
    if (hpos) { /* the positions to the device, in stream order */
        pos = (int *)zt_cu_scratch((size_t)B * T * sizeof(int));
        zt_cu_upload(pos, hpos, (size_t)B * T * sizeof(int));
    }
    rope_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(qkv, cos_t, sin_t, pos, B * T, T, nh, nkv, hd,
                                                                         sign);
    ZT_CU_LAUNCHED();
}

void zt_cu_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv, int hd)
{
    rope(qkv, cos_t, sin_t, nullptr, B, T, nh, nkv, hd, 1.0f);
}

void zt_cu_rope_forward_pos(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T, int nh,
                            int nkv, int hd)
{
    rope(qkv, cos_t, sin_t, pos, B, T, nh, nkv, hd, 1.0f);
}

void zt_cu_rope_backward_pos(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                             int nh, int nkv, int hd)
{
    rope(dqkv, cos_t, sin_t, pos, B, T, nh, nkv, hd, -1.0f);
}

void zt_cu_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv, int hd)
{
    rope(dqkv, cos_t, sin_t, nullptr, B, T, nh, nkv, hd, -1.0f);
}
