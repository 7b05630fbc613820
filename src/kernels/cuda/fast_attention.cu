/* fast_attention.cu — flash attention on the tensor cores: causal, grouped-query and
 * sliding-window attention with bf16 operands and fp32 accumulation, forward and
 * backward (fast.h).  The fast twin of attention.cu: the same shapes, mask
 * (attention_mask.cuh), outputs and meaning, within bf16 error of it.
 *
 * Shapes as attention.cu: qkv (B, T, W), W = (nh + 2 nkv) hd, rows [q | k | v heads];
 * out (B, T, nh hd); lse (B, nh, T); query head h reads kv head h / (nh / nkv).
 *
 * Why warp-level wmma (nvcuda::wmma, 16 x 16 x 16 bf16 tiles) rather than mma.sync PTX
 * or cuDNN: tools/cuda_emu gives wmma a CPU stand-in (tools/cuda_emu/mma.h), so these
 * kernels run, and are checked against the exact kernel, on a machine without a GPU;
 * inline PTX cannot run there, and cuDNN is a library the GPU machine's image may lack.
 * wmma compiles to the same HMMA tensor-core instructions as mma.sync (not Hopper's
 * wgmma; docs/gpu.md says what that leaves on the table).
 *
 * Tiles: 64 queries by 64 keys, 4 warps, each warp owning 16 rows.  Operands are
 * rounded to bf16 as they are staged in shared memory (from the fp32 activations, so no
 * scratch is needed; fast mode's bf16 activations, the _act16 entries, are staged as
 * they are); every product goes through two helpers:
 *   mm_abt:    C (16 x 64, fp32) = A (16 x hd) B^T, B (64 x hd)   scores, dP
 *   mm_ab_acc: acc (16 x hd, fp32) += A (16 x 64) B (64 x hd)      P V, P^T dO, dS^T Q, dS K
 * The elementwise parts (the online softmax, p and ds) read the fp32 tile a warp stored
 * in shared memory: lane pairs own a row, each lane its even or odd columns.
 *
 * In base-2 units, with c = scale log2(e) (scale = 1/sqrt(hd)):
 *   forward, per key tile:  x_ij = c s_ij,  m' = max(m, max_j x_ij),  p_ij = 2^(x_ij - m'),
 *                           l = l 2^(m - m') + sum_j p_ij,  o = o 2^(m - m') + P V,
 *   at the end:             out_i = o_i / l_i,  lse_i = (m_i + log2 l_i) ln 2;
 *   backward, from lse:     p_ij = 2^(c s_ij - lse_i log2 e),  D_i = dout_i . out_i,
 *                           ds_ij = p_ij (dout_i . v_j - D_i) scale,
 *                           dv_j = sum_i p_ij dout_i,  dk_j = sum_i ds_ij q_i,  dq_i = sum_j ds_ij k_j.
 * p and ds are rounded to bf16 for their products (as attention16.c and the exact
 * kernel do); l, lse and D use the unrounded fp32 values.  The backward is two kernels
 * without atomics: one block per (key tile, query head, sequence) sums its head's
 * share of dk and dv over the query tiles that see the keys; one block per (query tile,
 * head, sequence) sums dq over its key tiles.  With grouped queries a head's share
 * of dk and dv goes to its partials in the scratch, and a small pass (fa_dkv_sum_kernel)
 * adds each group's heads in head order: a group's heads run side by side rather than
 * one after another in one block (the 1B model at T 2048: 32 key tiles x 32 heads, not
 * x 8 kv heads each walking 4 heads).  Before them, one pass forms D for every query of
 * every head into the scratch (fa_delta_kernel), so that neither recomputes it per
 * tile.  Both compute p and ds with one function (p_ds) from the same products, so they
 * agree by construction, and every sum has a fixed order: the results are the same bits
 * on every run.
 *
 * RoPE (fast mode's bf16 activations, the _act16 entries): qkv16 holds q and k as the
 * qkv product wrote them, and each q and k tile is rotated as it is staged (pair i of row
 * t by the tables' cos and sin at t: rope_freq.h's zt_rope_rotate in fp32 on the widened
 * bf16 values, then rounded to the bf16 operand); the backward rotates dq and dk back
 * (sin negated: the rotation's transpose) as it writes them, so dqkv is the gradient of
 * what the product wrote and no RoPE pass runs on either side.
 *
 * Head sizes 32, 64, 96 and 128 (the CPU's bf16-operand sizes); other sizes and fp32
 * operands (no scratch) take the exact kernels. */
#include "attention_mask.cuh"
#include "entries.cuh"
#include "smem_optin.cuh"
#include "fast.h"

#include <cuda_bf16.h>
#include <mma.h>

using namespace nvcuda;

#define TB 64                    /* queries and keys per tile */
#define FWARPS 4                 /* warps per block, 16 rows each */
#define FTHREADS (FWARPS * 32)
#define LDP (TB + 8)             /* bf16 stride of a warp's 16 x 64 tile (a multiple of 8: wmma's rule) */
#define FULL 0xffffffffu
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt; /* B^T of a row-major tile */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* strides for head size HD: bf16 rows of a 64 x HD tile, fp32 rows of a warp's 16-row
 * tile (wide enough for 64 scores or HD outputs); both keep every 16 x 16 block on a
 * 32-byte boundary, as wmma's loads and stores require */
template <int HD>
struct fa_dims {
    static constexpr int LDH = HD + 8;
    static constexpr int LDF = (HD > TB ? HD : TB) + 4;
    static constexpr int NT = HD / 16; /* 16-wide slices of the head */
};

/* The activations' element types: fp32 (the exact path's qkv and out, rounded as they
 * are staged) or bf16 bits (fast mode's bf16 activations, backend.h's _act16 entries,
 * staged as they are). */
__device__ __forceinline__ uint16_t as_bf16(float x) { return zt_f32_to_bf16(x); }
__device__ __forceinline__ uint16_t as_bf16(uint16_t x) { return x; }
__device__ __forceinline__ float as_f32(float x) { return x; }
__device__ __forceinline__ float as_f32(uint16_t x) { return zt_bf16_to_f32(x); }

/* Rows [r0, r0 + 64) of a matrix of IN (row stride `stride`, HD columns from base),
 * as bf16 into s (stride LDH); rows at or past T are zeros. */
template <int HD, typename IN>
__device__ __forceinline__ void load_tile(uint16_t *s, const IN *base, size_t stride, int r0, int T)
{
    constexpr int LDH = fa_dims<HD>::LDH;
    for (int idx = threadIdx.x; idx < TB * HD; idx += FTHREADS) {
        const int r = idx / HD, d = idx % HD;
        s[r * LDH + d] = r0 + r < T ? as_bf16(base[(size_t)(r0 + r) * stride + d]) : (uint16_t)0;
    }
}

/* RoPE's tables (T, HD/2) for the q and k tiles; cos NULL: no rotation (the fp32 entries,
 * or an _act16 call without tables) */
struct fa_rope {
    const float *cos, *sin;
};

/* load_tile with each row's pairs rotated by RoPE at its position r0 + r in the sequence */
template <int HD, typename IN>
__device__ __forceinline__ void load_tile_rope(uint16_t *s, const IN *base, size_t stride, int r0, int T, fa_rope rope)
{
    if (!rope.cos) {
        load_tile<HD>(s, base, stride, r0, T);
        return;
    }
    constexpr int LDH = fa_dims<HD>::LDH, H = HD / 2;
    for (int idx = threadIdx.x; idx < TB * H; idx += FTHREADS) {
        const int r = idx / H, i = idx % H, t = r0 + r;
        uint16_t y1 = 0, y2 = 0;
        if (t < T) {
            const IN *x = base + (size_t)t * stride;
            const size_t ti = (size_t)t * H + i;
            const zt_rope_pair y = zt_rope_rotate(as_f32(x[i]), as_f32(x[i + H]), rope.cos[ti], rope.sin[ti]);
            y1 = zt_f32_to_bf16(y.y1), y2 = zt_f32_to_bf16(y.y2);
        }
        s[r * LDH + i] = y1, s[r * LDH + i + H] = y2;
    }
}

/* Column col of a gradient row g (fp32, HD wide) of the token at position t, rotated back
 * by RoPE (the transpose: sin negated) when rope has tables. */
template <int HD>
__device__ __forceinline__ float rope_back(const float *g, int col, int t, fa_rope rope)
{
    if (!rope.cos)
        return g[col];
    constexpr int H = HD / 2;
    const int i = col < H ? col : col - H;
    const size_t ti = (size_t)t * H + i;
    const zt_rope_pair y = zt_rope_rotate(g[i], g[i + H], rope.cos[ti], -rope.sin[ti]);
    return col < H ? y.y1 : y.y2;
}

/* a gradient element into the fp32 and/or bf16 dqkv (each NULL: not wanted) */
__device__ __forceinline__ void put_grad(float *d32, uint16_t *d16, size_t at, float v)
{
    if (d32)
        d32[at] = v;
    if (d16)
        d16[at] = zt_f32_to_bf16(v);
}

/* c (16 x 64 fp32, stride LDF) = a (16 x HD) . b^T with b (64 x HD): bf16 rows, stride LDH */
template <int HD>
__device__ __forceinline__ void mm_abt(float *c, const uint16_t *a, const uint16_t *b)
{
    constexpr int LDH = fa_dims<HD>::LDH, LDF = fa_dims<HD>::LDF, NT = fa_dims<HD>::NT;
    frag_a fa[NT];
#pragma unroll
    for (int kk = 0; kk < NT; kk++) wmma::load_matrix_sync(fa[kk], (const bf16 *)(a + kk * 16), LDH);
#pragma unroll
    for (int n = 0; n < TB / 16; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < NT; kk++) {
            frag_bt fb;
            wmma::load_matrix_sync(fb, (const bf16 *)(b + n * 16 * LDH + kk * 16), LDH);
            wmma::mma_sync(acc, fa[kk], fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, LDF, wmma::mem_row_major);
    }
}

/* acc[t] += a (16 x 64, bf16, stride LDP) . b (64 x HD, bf16 rows, stride LDH), t over
 * the HD/16 column slices of the result */
template <int HD>
__device__ __forceinline__ void mm_ab_acc(frag_c (&acc)[fa_dims<HD>::NT], const uint16_t *a, const uint16_t *b)
{
    constexpr int LDH = fa_dims<HD>::LDH, NT = fa_dims<HD>::NT;
    frag_a fa[TB / 16];
#pragma unroll
    for (int kk = 0; kk < TB / 16; kk++) wmma::load_matrix_sync(fa[kk], (const bf16 *)(a + kk * 16), LDP);
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int kk = 0; kk < TB / 16; kk++) {
            frag_b fb;
            wmma::load_matrix_sync(fb, (const bf16 *)(b + kk * 16 * LDH + t * 16), LDH);
            wmma::mma_sync(acc[t], fa[kk], fb, acc[t]);
        }
}

/* The accumulators acc (16 x HD) into the warp's fp32 tile w (stride LDF). */
template <int HD>
__device__ __forceinline__ void store_acc(float *w, const frag_c (&acc)[fa_dims<HD>::NT])
{
#pragma unroll
    for (int t = 0; t < fa_dims<HD>::NT; t++)
        wmma::store_matrix_sync(w + t * 16, acc[t], fa_dims<HD>::LDF, wmma::mem_row_major);
}

template <int HD>
__device__ __forceinline__ void zero_acc(frag_c (&acc)[fa_dims<HD>::NT])
{
#pragma unroll
    for (int t = 0; t < fa_dims<HD>::NT; t++) wmma::fill_fragment(acc[t], 0.0f);
}

/* p_ij and scale * ds_ij of one (query, key) pair from its score s and dp = dout_i . v_j:
 * the one place both backward kernels compute them.  L2 = lse_i log2(e). */
struct fa_pds {
    float p, ds;
};
__device__ __forceinline__ fa_pds p_ds(float s, float dp, float L2, float D, float scale_log2, float scale, bool vis)
{
    fa_pds r;
    r.p = vis ? exp2f(s * scale_log2 - L2) : 0.0f;
    r.ds = vis ? r.p * (dp - D) * scale : 0.0f;
    return r;
}

/* D_i = dout_i . out_i (fp32, in the order d = 0, 1, ...) of query i of head h */
template <int HD, typename IN>
__device__ __forceinline__ float delta_row(const float *dout, const IN *out, int b, int h, int i, int T, int nh)
{
    const size_t row = ((size_t)b * T + i) * (size_t)nh * HD + (size_t)h * HD;
    float D = 0.0f;
    for (int d = 0; d < HD; d++) D = fmaf(dout[row + d], as_f32(out[row + d]), D);
    return D;
}

/* D for every (sequence, head, query), Dg (B, nh, T) as lse: once per backward, where
 * each dkv block would otherwise recompute it for every query tile it visits (once per
 * key tile that sees the query: T / 64 times at full causal length) and dq once more. */
template <int HD, typename IN>
__global__ void fa_delta_kernel(float *Dg, const float *dout, const IN *out, int B, int T, int nh)
{
    const size_t n = (size_t)B * nh * T;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k % T), bh = (int)(k / T);
        Dg[k] = delta_row<HD>(dout, out, bh / nh, bh % nh, i, T, nh);
    }
}

/* D_i and lse_i log2(e) for the 64 rows of the query tile at i0 of head h (rows past T:
 * D 0, L2 +inf, so that p = 0); D read from Dg (fa_delta_kernel). */
__device__ __forceinline__ void load_stats(float *Ls, float *Ds, const float *Dg, const float *lse, int b, int h,
                                           int i0, int T, int nh)
{
    if (threadIdx.x < TB) {
        const int i = i0 + threadIdx.x;
        float L2 = INFINITY, D = 0.0f;
        if (i < T) {
            const size_t st = ((size_t)b * nh + h) * T + i;
            D = Dg[st];
            L2 = lse[st] * LOG2E;
        }
        Ls[threadIdx.x] = L2, Ds[threadIdx.x] = D;
    }
}

/* ---- the backward's tile loads and bf16 pairs ------------------------------------------
 * Copies for the backward alone (the forward keeps load_tile and load_tile_rope): 16-byte
 * accesses, 8 elements a thread, where a tile's rows are 16-byte aligned (the model's
 * buffers: cudaMalloc's 256-byte alignment, rows of (nh + 2 nkv) hd or nh hd elements,
 * hd a multiple of 32), the shared load_tile / load_tile_rope (one element) otherwise;
 * fp32 to bf16 two values at a time (one cvt.rn.bf16x2.f32; the emulator, which has no
 * PTX, rounds each with zt_f32_to_bf16: the same round-to-nearest-even). */

/* bf16 bits of lo and hi in one word, lo in the low half (the element at the lower address) */
__device__ __forceinline__ uint32_t bwd_pack_bf16x2(float lo, float hi)
{
#ifdef ZT_CUDA_EMU
    return (uint32_t)zt_f32_to_bf16(lo) | (uint32_t)zt_f32_to_bf16(hi) << 16;
#else
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
#endif
}

/* 8 consecutive elements at p (16-byte aligned) as bf16 bits */
__device__ __forceinline__ uint4 bwd_bf16x8(const uint16_t *p) { return *(const uint4 *)p; }
__device__ __forceinline__ uint4 bwd_bf16x8(const float *p)
{
    const float4 a = ((const float4 *)p)[0], c = ((const float4 *)p)[1];
    uint4 v;
    v.x = bwd_pack_bf16x2(a.x, a.y), v.y = bwd_pack_bf16x2(a.z, a.w);
    v.z = bwd_pack_bf16x2(c.x, c.y), v.w = bwd_pack_bf16x2(c.z, c.w);
    return v;
}

/* 8 consecutive elements at p (aligned as above) widened to fp32 */
__device__ __forceinline__ void bwd_f32x8(float (&f)[8], const float *p)
{
    const float4 a = ((const float4 *)p)[0], c = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = c.x, f[5] = c.y, f[6] = c.z, f[7] = c.w;
}
__device__ __forceinline__ void bwd_f32x8(float (&f)[8], const uint16_t *p)
{
    const uint4 v = *(const uint4 *)p;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++)
        f[2 * k] = zt_bf16_to_f32((uint16_t)w[k]), f[2 * k + 1] = zt_bf16_to_f32((uint16_t)(w[k] >> 16));
}

/* whether rows at base, `stride` elements apart, allow the 8-element accesses */
template <typename IN>
__device__ __forceinline__ bool bwd_rows_vec(const IN *base, size_t stride)
{
    return (uintptr_t)base % 16 == 0 && stride % 8 == 0;
}

/* load_tile for the backward: rows [r0, r0 + 64) of base into s (stride LDH), 8 bf16 a
 * thread where the rows allow it; rows at or past T are zeros */
template <int HD, typename IN>
__device__ __forceinline__ void bwd_load_tile(uint16_t *s, const IN *base, size_t stride, int r0, int T)
{
    if (!bwd_rows_vec(base, stride)) {
        load_tile<HD>(s, base, stride, r0, T);
        return;
    }
    constexpr int LDH = fa_dims<HD>::LDH, V = HD / 8;
    for (int idx = threadIdx.x; idx < TB * V; idx += FTHREADS) {
        const int r = idx / V, d = (idx % V) * 8;
        uint4 v = {0u, 0u, 0u, 0u};
        if (r0 + r < T)
            v = bwd_bf16x8(base + (size_t)(r0 + r) * stride + d);
        *(uint4 *)(s + r * LDH + d) = v;
    }
}

/* load_tile_rope for the backward: pairs (i, i + HD/2) rotated as load_tile_rope does
 * (zt_rope_rotate on the widened values), 8 pairs a thread where the rows and the
 * tables allow it */
template <int HD, typename IN>
__device__ __forceinline__ void bwd_load_tile_rope(uint16_t *s, const IN *base, size_t stride, int r0, int T,
                                                   fa_rope rope)
{
    constexpr int LDH = fa_dims<HD>::LDH, H = HD / 2, V = H / 8;
    if (!rope.cos) {
        bwd_load_tile<HD>(s, base, stride, r0, T);
        return;
    }
    if (!bwd_rows_vec(base, stride) || !bwd_rows_vec(rope.cos, H) || !bwd_rows_vec(rope.sin, H)) {
        load_tile_rope<HD>(s, base, stride, r0, T, rope);
        return;
    }
    for (int idx = threadIdx.x; idx < TB * V; idx += FTHREADS) {
        const int r = idx / V, i = (idx % V) * 8, t = r0 + r;
        uint4 v1 = {0u, 0u, 0u, 0u}, v2 = {0u, 0u, 0u, 0u};
        if (t < T) {
            const IN *x = base + (size_t)t * stride;
            float x1[8], x2[8], c[8], sn[8], y1[8], y2[8];
            bwd_f32x8(x1, x + i), bwd_f32x8(x2, x + i + H);
            bwd_f32x8(c, rope.cos + (size_t)t * H + i), bwd_f32x8(sn, rope.sin + (size_t)t * H + i);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const zt_rope_pair y = zt_rope_rotate(x1[k], x2[k], c[k], sn[k]);
                y1[k] = y.y1, y2[k] = y.y2;
            }
            v1.x = bwd_pack_bf16x2(y1[0], y1[1]), v1.y = bwd_pack_bf16x2(y1[2], y1[3]);
            v1.z = bwd_pack_bf16x2(y1[4], y1[5]), v1.w = bwd_pack_bf16x2(y1[6], y1[7]);
            v2.x = bwd_pack_bf16x2(y2[0], y2[1]), v2.y = bwd_pack_bf16x2(y2[2], y2[3]);
            v2.z = bwd_pack_bf16x2(y2[4], y2[5]), v2.w = bwd_pack_bf16x2(y2[6], y2[7]);
        }
        *(uint4 *)(s + r * LDH + i) = v1;
        *(uint4 *)(s + r * LDH + i + H) = v2;
    }
}

/* two adjacent gradient elements (at, at + 1; at even) into the fp32 and/or bf16 dqkv
 * (each NULL: not wanted), the bf16 pair as one word */
__device__ __forceinline__ void put_grad2(float *d32, uint16_t *d16, size_t at, float v0, float v1)
{
    if (d32)
        d32[at] = v0, d32[at + 1] = v1;
    if (d16)
        *(uint32_t *)(d16 + at) = bwd_pack_bf16x2(v0, v1);
}

/* ---- forward ---------------------------------------------------------------------------- */

template <int HD>
static size_t fwd_smem(void)
{
    typedef fa_dims<HD> d;
    return 3 * (size_t)TB * d::LDH * 2 + (size_t)FWARPS * 16 * d::LDF * 4 + (size_t)FWARPS * 16 * LDP * 2;
}

template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_forward_kernel(float *out, uint16_t *out16, float *lse,
                                                               const IN *qkv, int T, int nh, int nkv, int window,
                                                               float scale_log2, fa_rope rope)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH, LDF = fa_dims<HD>::LDF, NT = fa_dims<HD>::NT, OH = HD / 2;
    uint16_t *qs = (uint16_t *)sm, *ks = qs + TB * LDH, *vs = ks + TB * LDH;
    float *scr = (float *)(vs + TB * LDH);              /* FWARPS x 16 x LDF */
    uint16_t *ps = (uint16_t *)(scr + FWARPS * 16 * LDF); /* FWARPS x 16 x LDP */
    const int nblk = (T + TB - 1) / TB;
    const int qb = nblk - 1 - (int)blockIdx.x; /* the longest rows first */
    const int h = blockIdx.y, b = blockIdx.z, kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * HD, OW = (size_t)nh * HD;
    const int i0 = qb * TB, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = lane >> 1, half = lane & 1; /* this lane's row of the warp's 16, and its columns 2c + half */
    const int i = i0 + warp * 16 + r;
    float *sw = scr + warp * 16 * LDF;
    uint16_t *pw = ps + warp * 16 * LDP;
    const IN *seq = qkv + (size_t)b * T * W;

    load_tile_rope<HD>(qs, seq + (size_t)h * HD, W, i0, T, rope);
    float o[OH];
#pragma unroll
    for (int t = 0; t < OH; t++) o[t] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int kb = zt_attn_first_key_block(i0, window, TB); kb <= qb; kb++) {
        const int j0 = kb * TB;
        __syncthreads(); /* the last tiles are read (and, the first time, the q tile is written) */
        load_tile_rope<HD>(ks, seq + (size_t)(nh + kh) * HD, W, j0, T, rope);
        load_tile<HD>(vs, seq + (size_t)(nh + nkv + kh) * HD, W, j0, T);
        __syncthreads();
        mm_abt<HD>(sw, qs + warp * 16 * LDH, ks);
        __syncwarp();
        /* the online softmax of row r over this tile's 64 keys, two lanes per row */
        float x[TB / 2], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < TB / 2; c++) {
            const int col = 2 * c + half;
            x[c] = i < T && zt_attn_visible(i, j0 + col, window) ? sw[r * LDF + col] * scale_log2 : -INFINITY;
            mx = fmaxf(mx, x[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
        const float mnew = fmaxf(m, mx);
        /* a row that has seen no key yet (a window, or a row past T) stays as it was:
         * 2^(-inf + inf) would be NaN */
        const bool none = mnew == -INFINITY;
        const float corr = none ? 1.0f : exp2f(m - mnew);
        float lsum = 0.0f;
#pragma unroll
        for (int c = 0; c < TB / 2; c++) {
            const float p = none ? 0.0f : exp2f(x[c] - mnew);
            lsum += p;
            pw[r * LDP + 2 * c + half] = zt_f32_to_bf16(p);
        }
        lsum += __shfl_xor_sync(FULL, lsum, 1);
        l = l * corr + lsum;
        m = mnew;
        __syncwarp();
        frag_c acc[NT];
        zero_acc<HD>(acc);
        mm_ab_acc<HD>(acc, pw, vs);
        store_acc<HD>(sw, acc);
        __syncwarp();
#pragma unroll
        for (int t = 0; t < OH; t++) o[t] = o[t] * corr + sw[r * LDF + 2 * t + half];
        __syncwarp(); /* sw is the next tile's score tile */
    }
    if (i < T) {
        const size_t row = ((size_t)b * T + i) * OW + (size_t)h * HD;
        const float inv_l = 1.0f / l;
#pragma unroll
        for (int t = 0; t < OH; t++) {
            const float v = o[t] * inv_l;
            if (out)
                out[row + 2 * t + half] = v;
            if (out16)
                out16[row + 2 * t + half] = zt_f32_to_bf16(v);
        }
        if (half == 0)
            lse[((size_t)b * nh + h) * T + i] = (m + log2f(l)) * LN2;
    }
}

/* ---- backward: dk and dv -------------------------------------------------------------- */

template <int HD>
static size_t bwd_smem(void)
{
    typedef fa_dims<HD> d;
    return 4 * (size_t)TB * d::LDH * 2 + 2 * (size_t)FWARPS * 16 * d::LDF * 4 + 2 * (size_t)FWARPS * 16 * LDP * 2 +
           2 * (size_t)TB * 4;
}

/* One block per (key tile, query head h, sequence): head h's share of dk and dv for the
 * 64 keys, summed over the query tiles that see them.  Without grouped queries that is
 * all of dk and dv, written to dqkv; with them, the share goes to h's partials `part`
 * (fp32, unrotated; fa_dkv_sum_kernel adds a group's heads). */
template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_dkv_kernel(float *dqkv, uint16_t *dqkv16, float *part,
                                                           const float *dout, const IN *qkv, const float *lse,
                                                           const float *Dg, int T, int nh, int nkv, int window,
                                                           float scale, float scale_log2, fa_rope rope)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH, LDF = fa_dims<HD>::LDF, NT = fa_dims<HD>::NT;
    uint16_t *ks = (uint16_t *)sm, *vs = ks + TB * LDH, *qs = vs + TB * LDH, *dos = qs + TB * LDH;
    float *sT = (float *)(dos + TB * LDH); /* FWARPS x 16 x LDF: S^T (keys x queries) */
    float *dpT = sT + FWARPS * 16 * LDF;   /* and dP^T */
    uint16_t *pT = (uint16_t *)(dpT + FWARPS * 16 * LDF), *dsT = pT + FWARPS * 16 * LDP;
    float *Ls = (float *)(dsT + FWARPS * 16 * LDP), *Ds = Ls + TB;
    const int nblk = (T + TB - 1) / TB;
    const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * HD, OW = (size_t)nh * HD;
    const int j0 = kb * TB, nk = T - j0 < TB ? T - j0 : TB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 1, half = lane & 1;
    const int j = j0 + warp * 16 + r; /* this lane's key */
    float *sw = sT + warp * 16 * LDF, *dpw = dpT + warp * 16 * LDF;
    uint16_t *pw = pT + warp * 16 * LDP, *dsw = dsT + warp * 16 * LDP;
    const IN *seq = qkv + (size_t)b * T * W;

    bwd_load_tile_rope<HD>(ks, seq + (size_t)(nh + kh) * HD, W, j0, T, rope);
    bwd_load_tile<HD>(vs, seq + (size_t)(nh + nkv + kh) * HD, W, j0, T);
    frag_c dk[NT], dv[NT];
    zero_acc<HD>(dk);
    zero_acc<HD>(dv);
    const int qb_last = zt_attn_last_query_block(j0, nk, window, nblk, TB);
    for (int qb = kb; qb <= qb_last; qb++) {
        const int i0 = qb * TB;
        __syncthreads(); /* the last query tile is read */
        bwd_load_tile_rope<HD>(qs, seq + (size_t)h * HD, W, i0, T, rope);
        bwd_load_tile<HD>(dos, dout + (size_t)b * T * OW + (size_t)h * HD, OW, i0, T);
        load_stats(Ls, Ds, Dg, lse, b, h, i0, T, nh);
        __syncthreads();
        mm_abt<HD>(sw, ks + warp * 16 * LDH, qs);   /* S^T = K Q^T */
        mm_abt<HD>(dpw, vs + warp * 16 * LDH, dos); /* dP^T = V dO^T */
        __syncwarp();
        /* lane `half` of row r's pair takes columns 4c + 2 half and the next: a bf16 pair */
#pragma unroll 4
        for (int c = 0; c < TB / 4; c++) {
            const int col = 4 * c + 2 * half, iq = i0 + col;
            fa_pds e[2];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const bool vis = j < T && iq + k < T && zt_attn_visible(iq + k, j, window);
                e[k] = p_ds(sw[r * LDF + col + k], dpw[r * LDF + col + k], Ls[col + k], Ds[col + k], scale_log2, scale,
                            vis);
            }
            *(uint32_t *)(pw + r * LDP + col) = bwd_pack_bf16x2(e[0].p, e[1].p);
            *(uint32_t *)(dsw + r * LDP + col) = bwd_pack_bf16x2(e[0].ds, e[1].ds);
        }
        __syncwarp();
        mm_ab_acc<HD>(dv, pw, dos); /* dV += P^T dO */
        mm_ab_acc<HD>(dk, dsw, qs); /* dK += dS^T Q (scale inside ds) */
    }
    store_acc<HD>(sw, dv);
    store_acc<HD>(dpw, dk);
    __syncwarp();
    if (j >= T)
        return;
    if (part) { /* h's partials, (B, nh, T, HD) for dk, then as many for dv */
        const size_t at = (((size_t)b * nh + h) * T + j) * HD, nd = (size_t)gridDim.z * nh * T * HD;
#pragma unroll 4
        for (int c = 0; c < HD / 4; c++) {
            const int col = 4 * c + 2 * half;
            part[at + col] = dpw[r * LDF + col], part[at + col + 1] = dpw[r * LDF + col + 1];
            part[nd + at + col] = sw[r * LDF + col], part[nd + at + col + 1] = sw[r * LDF + col + 1];
        }
        return;
    }
    const size_t row = ((size_t)b * T + j) * W; /* dk rotated back by RoPE at position j, dv as it is */
#pragma unroll 4
    for (int c = 0; c < HD / 4; c++) {
        const int col = 4 * c + 2 * half;
        put_grad2(dqkv, dqkv16, row + (size_t)(nh + kh) * HD + col, rope_back<HD>(dpw + r * LDF, col, j, rope),
                  rope_back<HD>(dpw + r * LDF, col + 1, j, rope));
        put_grad2(dqkv, dqkv16, row + (size_t)(nh + nkv + kh) * HD + col, sw[r * LDF + col], sw[r * LDF + col + 1]);
    }
}

/* With grouped queries: dk and dv of each (sequence, key, kv head) as the sum of its
 * group's partials in head order (h = kh g, kh g + 1, ...: the same order on every run,
 * so the same bits), dk then rotated back by RoPE.  A thread per pair (i, i + HD/2) of
 * a key's head: RoPE's rotation mixes the two. */
template <int HD>
__global__ void fa_dkv_sum_kernel(float *dqkv, uint16_t *dqkv16, const float *part, int B, int T, int nh, int nkv,
                                  fa_rope rope)
{
    constexpr int H = HD / 2;
    const int group = nh / nkv;
    const size_t n = (size_t)B * T * nkv * H, nd = (size_t)B * nh * T * HD, W = (size_t)(nh + 2 * nkv) * HD;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k % H), kh = (int)(k / H % nkv), j = (int)(k / ((size_t)H * nkv) % T);
        const int b = (int)(k / ((size_t)H * nkv * T));
        float k1 = 0.0f, k2 = 0.0f, v1 = 0.0f, v2 = 0.0f;
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            const float *p = part + (((size_t)b * nh + h) * T + j) * HD;
            k1 += p[i], k2 += p[i + H], v1 += p[nd + i], v2 += p[nd + i + H];
        }
        if (rope.cos) {
            const size_t ti = (size_t)j * H + i;
            const zt_rope_pair y = zt_rope_rotate(k1, k2, rope.cos[ti], -rope.sin[ti]);
            k1 = y.y1, k2 = y.y2;
        }
        const size_t row = ((size_t)b * T + j) * W, dk = row + (size_t)(nh + kh) * HD;
        const size_t dv = row + (size_t)(nh + nkv + kh) * HD;
        put_grad(dqkv, dqkv16, dk + i, k1), put_grad(dqkv, dqkv16, dk + i + H, k2);
        put_grad(dqkv, dqkv16, dv + i, v1), put_grad(dqkv, dqkv16, dv + i + H, v2);
    }
}

/* ---- backward: dq --------------------------------------------------------------------- */

template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_dq_kernel(float *dqkv, uint16_t *dqkv16, const float *dout,
                                                          const IN *qkv, const float *lse, const float *Dg, int T,
                                                          int nh, int nkv, int window, float scale, float scale_log2,
                                                          fa_rope rope)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH, LDF = fa_dims<HD>::LDF, NT = fa_dims<HD>::NT;
    uint16_t *qs = (uint16_t *)sm, *dos = qs + TB * LDH, *ks = dos + TB * LDH, *vs = ks + TB * LDH;
    float *sS = (float *)(vs + TB * LDH); /* FWARPS x 16 x LDF: S (queries x keys) */
    float *dpS = sS + FWARPS * 16 * LDF;  /* and dP */
    uint16_t *dsS = (uint16_t *)(dpS + FWARPS * 16 * LDF);
    float *Ls = (float *)(dsS + FWARPS * 16 * LDP), *Ds = Ls + TB; /* (bwd_smem leaves one bf16 tile spare) */
    const int nblk = (T + TB - 1) / TB;
    const int qb = nblk - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * HD, OW = (size_t)nh * HD;
    const int i0 = qb * TB, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 1, half = lane & 1;
    const int ii = warp * 16 + r, i = i0 + ii; /* this lane's query */
    float *sw = sS + warp * 16 * LDF, *dpw = dpS + warp * 16 * LDF;
    uint16_t *dsw = dsS + warp * 16 * LDP;
    const IN *seq = qkv + (size_t)b * T * W;

    bwd_load_tile_rope<HD>(qs, seq + (size_t)h * HD, W, i0, T, rope);
    bwd_load_tile<HD>(dos, dout + (size_t)b * T * OW + (size_t)h * HD, OW, i0, T);
    load_stats(Ls, Ds, Dg, lse, b, h, i0, T, nh);
    frag_c dq[NT];
    zero_acc<HD>(dq);
    for (int kb = zt_attn_first_key_block(i0, window, TB); kb <= qb; kb++) {
        const int j0 = kb * TB;
        __syncthreads();
        bwd_load_tile_rope<HD>(ks, seq + (size_t)(nh + kh) * HD, W, j0, T, rope);
        bwd_load_tile<HD>(vs, seq + (size_t)(nh + nkv + kh) * HD, W, j0, T);
        __syncthreads();
        mm_abt<HD>(sw, qs + warp * 16 * LDH, ks);   /* S = Q K^T */
        mm_abt<HD>(dpw, dos + warp * 16 * LDH, vs); /* dP = dO V^T */
        __syncwarp();
        const float L2 = Ls[ii], D = Ds[ii];
#pragma unroll 4
        for (int c = 0; c < TB / 4; c++) { /* columns 4c + 2 half and the next: a bf16 pair */
            const int col = 4 * c + 2 * half;
            float ds[2];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const bool vis = i < T && zt_attn_visible(i, j0 + col + k, window);
                ds[k] = p_ds(sw[r * LDF + col + k], dpw[r * LDF + col + k], L2, D, scale_log2, scale, vis).ds;
            }
            *(uint32_t *)(dsw + r * LDP + col) = bwd_pack_bf16x2(ds[0], ds[1]);
        }
        __syncwarp();
        mm_ab_acc<HD>(dq, dsw, ks); /* dQ += dS K */
    }
    store_acc<HD>(sw, dq);
    __syncwarp();
    if (i < T) { /* dq rotated back by RoPE at position i */
        const size_t row = ((size_t)b * T + i) * W + (size_t)h * HD;
#pragma unroll 4
        for (int c = 0; c < HD / 4; c++) {
            const int col = 4 * c + 2 * half;
            put_grad2(dqkv, dqkv16, row + col, rope_back<HD>(sw + r * LDF, col, i, rope),
                      rope_back<HD>(sw + r * LDF, col + 1, i, rope));
        }
    }
}

/* ---- launching ------------------------------------------------------------------------- */

template <int HD, typename IN>
static void forward_hd(float *out, uint16_t *out16, float *lse, const IN *qkv, int B, int T, int nh, int nkv,
                       int window, fa_rope rope)
{
    const size_t smem = fwd_smem<HD>();
    const float scale_log2 = (float)(LOG2E / sqrt((double)HD));
    zt_cu_allow_smem<fa_forward_kernel<HD, IN>>(smem, "fast attention");
    const dim3 grid((unsigned)((T + TB - 1) / TB), (unsigned)nh, (unsigned)B);
    fa_forward_kernel<HD, IN><<<grid, FTHREADS, smem, zt_cu.stream>>>(out, out16, lse, qkv, T, nh, nkv, window,
                                                                  scale_log2, rope);
    ZT_CU_LAUNCHED();
}

/* The caller's scratch (zt_cu_fast_attention_scratch_bytes): D, B nh T floats
 * (fa_delta_kernel), at its head; with grouped queries the dkv blocks' per-head partials
 * where backend.h's rule puts them, which fa_dkv_sum_kernel adds into dqkv. */
template <int HD, typename IN>
static void backward_hd(float *dqkv, uint16_t *dqkv16, const float *dout, const IN *qkv, const IN *out,
                        const float *lse, void *scratch, int B, int T, int nh, int nkv, int window, fa_rope rope)
{
    const size_t smem = bwd_smem<HD>();
    const float scale = (float)(1.0 / sqrt((double)HD)), scale_log2 = (float)(LOG2E / sqrt((double)HD));
    const unsigned nblk = (unsigned)((T + TB - 1) / TB);
    size_t part_at;
    zt_attention_fast_scratch_bytes(B, T, nh, nkv, HD, ZT_BF16, &part_at);
    float *Dg = (float *)scratch, *part = nh > nkv ? (float *)((char *)scratch + part_at) : NULL;
    fa_delta_kernel<HD, IN><<<zt_cu_blocks((size_t)B * nh * T), ZT_CU_THREADS, 0, zt_cu.stream>>>(Dg, dout, out, B, T,
                                                                                                nh);
    ZT_CU_LAUNCHED();
    zt_cu_allow_smem<fa_dkv_kernel<HD, IN>>(smem, "fast attention");
    fa_dkv_kernel<HD, IN><<<dim3(nblk, (unsigned)nh, (unsigned)B), FTHREADS, smem, zt_cu.stream>>>(
        dqkv, dqkv16, part, dout, qkv, lse, Dg, T, nh, nkv, window, scale, scale_log2, rope);
    ZT_CU_LAUNCHED();
    if (part) {
        const size_t n = (size_t)B * T * nkv * (HD / 2);
        fa_dkv_sum_kernel<HD><<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(dqkv, dqkv16, part, B, T, nh, nkv,
                                                                                  rope);
        ZT_CU_LAUNCHED();
    }
    zt_cu_allow_smem<fa_dq_kernel<HD, IN>>(smem, "fast attention");
    fa_dq_kernel<HD, IN><<<dim3(nblk, (unsigned)nh, (unsigned)B), FTHREADS, smem, zt_cu.stream>>>(
        dqkv, dqkv16, dout, qkv, lse, Dg, T, nh, nkv, window, scale, scale_log2, rope);
    ZT_CU_LAUNCHED();
}

int zt_cu_fast_attention_supported(int hd) { return hd == 32 || hd == 64 || hd == 96 || hd == 128; }

/* backend.h's rule for the fast tables: the exact kernels' (bf16 operands or none, and
 * enough for the fp32 and odd-size cases to fall back to them), or the backward's D and
 * per-head partials where those need more. */
size_t zt_cu_fast_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd)
{
    return zt_attention_fast_scratch_bytes(B, T, nh, nkv, hd, opd, NULL);
}

/* the exact kernels check the shape for the fallback; these for the fast path */
static int fast_path(const void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    if (!scratch || !zt_cu_fast_attention_supported(hd))
        return 0;
    if (nkv <= 0 || nh % nkv != 0 || B < 0 || T < 0 || window < 0) {
        fprintf(stderr, "ztrain: CUDA fast attention: unsupported shape B=%d T=%d nh=%d nkv=%d hd=%d window=%d\n", B,
                T, nh, nkv, hd, window);
        abort();
    }
    return 1;
}

#define FA_DISPATCH(FN, IN, ...)                                 \
    do {                                                         \
        switch (hd) {                                            \
        case 32: FN<32, IN>(__VA_ARGS__); break;                 \
        case 64: FN<64, IN>(__VA_ARGS__); break;                 \
        case 96: FN<96, IN>(__VA_ARGS__); break;                 \
        default: FN<128, IN>(__VA_ARGS__); break;                \
        }                                                        \
    } while (0)

void zt_cu_fast_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch, int B,
                                  int T, int nh, int nkv, int hd, int window)
{
    if (!fast_path(scratch, B, T, nh, nkv, hd, window)) {
        zt_cu_attention_forward(out, out_bf16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
        return;
    }
    if (B == 0 || T == 0)
        return;
    FA_DISPATCH(forward_hd, float, out, out_bf16, lse, qkv, B, T, nh, nkv, window, fa_rope{NULL, NULL});
}

void zt_cu_fast_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    if (!fast_path(scratch, B, T, nh, nkv, hd, window)) {
        zt_cu_attention_backward(dqkv, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
        return;
    }
    if (B == 0 || T == 0)
        return;
    FA_DISPATCH(backward_hd, float, dqkv, (uint16_t *)NULL, dout, qkv, out, lse, scratch,
                B, T, nh, nkv, window, fa_rope{NULL, NULL});
}

/* bf16 activations (backend.h's _act16 entries): the same kernels staging bf16 qkv (and,
 * backward, reading bf16 out for D) as they are, q and k rotated by RoPE as they are
 * staged and dq, dk rotated back as they are written; the output in bf16 only; the
 * shapes the tensor-core kernels do not serve take the exact table's entries (the exact
 * kernels on widened copies, act16.cu). */
void zt_cu_fast_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                        const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                        int window)
{
    if (!fast_path(scratch, B, T, nh, nkv, hd, window)) {
        zt_cu_attention_forward_act16(out16, lse, qkv16, cos_t, sin_t, scratch, B, T, nh, nkv, hd, window);
        return;
    }
    if (B == 0 || T == 0)
        return;
    const fa_rope rope = {cos_t, cos_t ? sin_t : NULL};
    FA_DISPATCH(forward_hd, uint16_t, (float *)NULL, out16, lse, qkv16, B, T, nh, nkv, window, rope);
}

void zt_cu_fast_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                         const uint16_t *out16, const float *lse, const float *cos_t,
                                         const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                         int window)
{
    if (!fast_path(scratch, B, T, nh, nkv, hd, window)) {
        zt_cu_attention_backward_act16(dqkv, dqkv16, dout, qkv16, out16, lse, cos_t, sin_t, scratch, B, T, nh, nkv,
                                       hd, window);
        return;
    }
    if (B == 0 || T == 0)
        return;
    const fa_rope rope = {cos_t, cos_t ? sin_t : NULL};
    FA_DISPATCH(backward_hd, uint16_t, dqkv, dqkv16, dout, qkv16, out16, lse, scratch,
                B, T, nh, nkv, window, rope);
}
