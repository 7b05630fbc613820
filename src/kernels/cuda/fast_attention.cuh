/* fast_attention.cuh — flash attention on the tensor cores: causal, grouped-query and
 * sliding-window attention with bf16 operands and fp32 accumulation, forward and
 * backward (fast.h): the design, and the pieces the forward (fast_attention.cu) and the
 * backward (fast_attention_bwd.cu) share.  The fast twin of attention.cu: the same shapes, mask
 * (attention_mask.cuh), outputs and meaning, within bf16 error of it.
 *
 * Shapes as attention.cu: qkv (B, T, W), W = (nh + 2 nkv) hd, rows [q | k | v heads];
 * out (B, T, nh hd); lse (B, nh, T); query head h reads kv head h / (nh / nkv).
 *
 * Every kernel is written in PTX's warp-level primitives (mma_sync.cuh: mma.sync
 * m16n8k16 with bf16 operands and fp32 accumulators, ldmatrix and ldmatrix.trans for the
 * operands, cp.async for the tiles, cvt to bf16x2 for the packed products),
 * FlashAttention-2's way: a warp owns 16 rows of a 64-row tile, its scores and gradients
 * (S, P; in the backward also dP and dS) never leave its mma registers, because two
 * neighbouring 8-column accumulator tiles, rounded and packed to bf16x2, are exactly the
 * a operand of the next product over those 16 columns.  Only the bf16 operand tiles
 * (Q, K, V, dO) pass through shared memory, double-buffered so that the next tile's
 * copies are in flight while this one computes.  The three kernels share two products:
 *   fa_scores: s (16 x 64, fp32) = A (16 x hd) B^T, B (64 x hd)   S, dP; S^T, dP^T
 *   fa_pv:     o (16 x hd, fp32) += P (16 x 64, packed) B (64 x hd)  P V, dS K; P^T dO, dS^T Q
 * the forward and dq with the queries as rows, dkv with the keys (S^T = K Q^T).  All
 * run without a GPU under tools/cuda_emu, which models the PTX primitives lane by lane
 * in their documented layouts (tools/cuda_emu/mma_sync.h; kernels_check's group `mma`
 * holds the model to plain loops, and on a GPU to the hardware).  None is Hopper's
 * wgmma (docs/gpu.md says what that leaves on the table).
 *
 * Operands are rounded to bf16 as they are staged in shared memory (from the fp32
 * activations, so no scratch is needed for them; fast mode's bf16 activations, the
 * _act16 entries, are staged as they are, by cp.async where their rows are aligned).
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
 * every head into the scratch (fa_delta_kernel, which also leaves dO there in bf16),
 * so that neither recomputes it per tile.  Both compute p and ds with one function (p_ds) from the same products, so they
 * agree by construction, and every sum has a fixed order: the results are the same bits
 * on every run.
 *
 * RoPE (fast mode's bf16 activations, the _act16 entries): qkv16 holds q and k as the
 * qkv product wrote them.  The forward's one q tile a block, and the dkv kernel's one k
 * tile, are rotated as they are staged (pair i of row t by the tables' cos and sin at t:
 * rope_freq.h's zt_rope_rotate in fp32 on the widened bf16 values, then rounded to the
 * bf16 operand); the tiles a kernel streams past every block (k for the forward and the
 * dq pass, q for the dkv pass) are rotated once per call into the scratch
 * (fa_rope_heads_kernel, the same expression and rounding), so that they come in by
 * cp.async as they lie, and the dq pass takes its q tile from that same copy.  The backward rotates dq and dk back (sin negated: the
 * rotation's transpose) as it writes them, so dqkv is the gradient of what the product
 * wrote and the model runs no RoPE pass of its own.
 *
 * Head sizes 32, 64, 96 and 128 (the CPU's bf16-operand sizes); other sizes and fp32
 * operands (no scratch) take the exact kernels.  Scratch: backend.h's
 * zt_attention_fast_scratch_bytes; the forward's rotated k takes its head; the
 * backward's D its head, then the rotated q and the bf16 dO, then the grouped dkv
 * partials, and the dq pass's rotated k, after the partials are summed, the same place. */
#ifndef ZT_CUDA_FAST_ATTENTION_CUH
#define ZT_CUDA_FAST_ATTENTION_CUH

#include "attention_mask.cuh"
#include "entries.cuh"
#include "smem_optin.cuh"
#include "fast.h"
#include "mma_sync.cuh"

#define TB 64                    /* queries and keys per tile */
#define FWARPS 4                 /* warps per block, 16 rows each */
#define FTHREADS (FWARPS * 32)
#define FULL 0xffffffffu
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* the bf16 row stride of a 64 x HD tile in shared memory: 8 elements (16 bytes) past HD,
 * so that every row starts on a 16-byte boundary (ldmatrix's and cp.async's rule) and the
 * 8 rows of 16 bytes one ldmatrix reads land in 8 different 16-byte quarters of the 128
 * bytes the banks serve at once (row r at 16 r or 80 r mod 128): no bank conflicts */
template <int HD>
struct fa_dims {
    static constexpr int LDH = HD + 8;
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

/* ---- shared by the forward and the backward: K and V sources, the products ------------ */

/* where row t of kv head kh of sequence b starts: base + b seq + kh head + t row */
template <typename IN>
struct fa_src {
    const IN *base;
    size_t seq, head, row;
};

/* Heads [head0, head0 + nheads) of qkv (rows of W elements) as bf16 rows (B, nheads, T,
 * HD) into dst, rotated by RoPE where rope has tables (the same expression and rounding
 * as load_tile_rope), else converted (as load_tile): the same operand bits as a tile
 * staged from qkv.  K for the forward and the dq pass, Q for the dk/dv blocks: each tile
 * of theirs is read by many blocks, and from dst it comes in by cp.async as it lies. */
template <int HD, typename IN>
__global__ void fa_rope_heads_kernel(uint16_t *dst, const IN *qkv, fa_rope rope, int B, int T, size_t W, int head0,
                                     int nheads)
{
    constexpr int H = HD / 2;
    const size_t n = (size_t)B * nheads * T * H;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k % H), t = (int)(k / H % T), bk = (int)(k / H / T), b = bk / nheads, hh = bk % nheads;
        const IN *x = qkv + ((size_t)b * T + t) * W + (size_t)(head0 + hh) * HD;
        uint16_t *o = dst + (size_t)bk * T * HD + (size_t)t * HD;
        if (!rope.cos) {
            o[i] = as_bf16(x[i]), o[i + H] = as_bf16(x[i + H]);
            continue;
        }
        const size_t ti = (size_t)t * H + i;
        const zt_rope_pair y = zt_rope_rotate(as_f32(x[i]), as_f32(x[i + H]), rope.cos[ti], rope.sin[ti]);
        o[i] = zt_f32_to_bf16(y.y1), o[i + H] = zt_f32_to_bf16(y.y2);
    }
}

/* Rows [r0, r0 + 64) of a K or V head into s (stride LDH) in 16-byte chunks: by cp.async
 * (bf16 sources, 16-byte aligned: the caller commits), or converted by plain loads;
 * rows at or past T are zeros (V's would otherwise meet p = 0 as 0 x NaN). */
template <int HD, typename IN>
__device__ __forceinline__ void fa_fetch_tile(uint16_t *s, const IN *head, size_t row, int r0, int T, bool async)
{
    constexpr int LDH = fa_dims<HD>::LDH, CH = HD / 8;
    for (int idx = threadIdx.x; idx < TB * CH; idx += FTHREADS) {
        const int r = idx / CH, c = idx % CH * 8;
        uint16_t *d = s + r * LDH + c;
        if (r0 + r >= T) {
            *(uint4 *)d = uint4{0u, 0u, 0u, 0u};
            continue;
        }
        const IN *x = head + (size_t)(r0 + r) * row + c;
        if constexpr (sizeof(IN) == sizeof(uint16_t))
            if (async) {
                zt_cp_async16(d, x);
                continue;
            }
#pragma unroll
        for (int e = 0; e < 8; e++) d[e] = as_bf16(x[e]);
    }
}

/* The forward's and the dq pass's block: one per (query tile, head h, sequence), the
 * longest rows first (blockIdx.x counts query tiles from the end), walking key tiles
 * kb0..qb with K and V double-buffered in kbuf[2] and vbuf[2] (TB x LDH each). */
template <int HD, typename IN>
struct fa_qblock {
    int qb, i0, h, b, kb0;
    size_t W;                  /* qkv's row: nh + 2 nkv heads */
    const IN *seq;             /* sequence b's first qkv row */
    const IN *khead, *vhead;   /* K (from ksrc) and V of the kv head h reads */
    size_t krow;               /* K's row stride (ksrc.row) */
    uint16_t *kbuf, *vbuf;

    __device__ __forceinline__ fa_qblock(const IN *qkv, fa_src<IN> ksrc, int T, int nh, int nkv, int window,
                                         uint16_t *kb, uint16_t *vb)
    {
        const int kh = (int)blockIdx.y / (nh / nkv);
        qb = (T + TB - 1) / TB - 1 - (int)blockIdx.x, i0 = qb * TB, h = blockIdx.y, b = blockIdx.z;
        W = (size_t)(nh + 2 * nkv) * HD, seq = qkv + (size_t)b * T * W;
        khead = ksrc.base + b * ksrc.seq + kh * ksrc.head, krow = ksrc.row;
        vhead = seq + (size_t)(nh + nkv + kh) * HD;
        kbuf = kb, vbuf = vb, kb0 = zt_attn_first_key_block(i0, window, TB);
    }
    /* key tile kb's K and V into buffer slot (committed as one cp.async group) */
    __device__ __forceinline__ void fetch(int slot, int kb, int T, bool async) const
    {
        constexpr int LDH = fa_dims<HD>::LDH;
        fa_fetch_tile<HD>(kbuf + slot * TB * LDH, khead, krow, kb * TB, T, async);
        fa_fetch_tile<HD>(vbuf + slot * TB * LDH, vhead, W, kb * TB, T, async);
        zt_cp_async_commit();
    }
    /* At the top of key tile kb's step: kb + 1's tiles on their way into the other slot
     * (read by no one since the last barrier), kb's landed for this thread; the caller's
     * barrier makes them every warp's.  Returns kb's slot. */
    __device__ __forceinline__ int advance(int kb, int T, bool async) const
    {
        const int cur = (kb - kb0) & 1;
        if (kb < qb) {
            fetch(cur ^ 1, kb + 1, T, async);
            zt_cp_async_wait<1>();
        } else {
            zt_cp_async_wait<0>();
        }
        return cur;
    }
};

/* s (16 x 64: 8 tiles of 8 keys) = the warp's Q rows (qw, stride LDH) K^T, K (64 x HD) at ks */
template <int HD>
__device__ __forceinline__ void fa_scores(float (&s)[TB / 8][4], const uint16_t *qw, const uint16_t *ks, int lane)
{
    constexpr int LDH = fa_dims<HD>::LDH;
#pragma unroll
    for (int j = 0; j < TB / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    /* ldmatrix's row addresses: lane 8 m + i gives row i of tile m; a's tiles are (rows
     * 0-7, 8-15) x (columns 0-7, 8-15) in that order, K's (keys 0-7 x dims 0-7, 8-15,
     * then keys 8-15), so that r[0], r[1] and r[2], r[3] are two b operands */
    const int ar = ((lane >> 3) & 1) * 8 + (lane & 7), ac = (lane >> 4) * 8;
    const int kr = (lane >> 4) * 8 + (lane & 7), kc = ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a[4];
        zt_ldmatrix_x4(a, qw + ar * LDH + kk * 16 + ac);
#pragma unroll
        for (int p = 0; p < TB / 16; p++) {
            uint32_t b[4];
            zt_ldmatrix_x4(b, ks + (p * 16 + kr) * LDH + kk * 16 + kc);
            zt_mma_16816_x2(s[2 * p], s[2 * p + 1], a, b);
        }
    }
}

/* o (16 x HD: HD / 8 tiles) += P V, P's 16 x 64 from the accumulators s, packed to bf16 */
template <int HD>
__device__ __forceinline__ void fa_pv(float (&o)[HD / 8][4], const float (&s)[TB / 8][4], const uint16_t *vs, int lane)
{
    constexpr int LDH = fa_dims<HD>::LDH;
    const int vr = ((lane >> 3) & 1) * 8 + (lane & 7), vc = (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < TB / 16; kk++) {
        const uint32_t a[4] = {zt_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), zt_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                               zt_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               zt_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            uint32_t b[4];
            zt_ldmatrix_x4_trans(b, vs + (kk * 16 + vr) * LDH + dp * 16 + vc);
            zt_mma_16816_x2(o[2 * dp], o[2 * dp + 1], a, b);
        }
    }
}

/* ---- launching: the host helpers of both files' launches and entries ------------------ */

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* the exact kernels check the shape for the fallback; these for the fast path */
static inline int fast_path(const void *scratch, int B, int T, int nh, int nkv, int hd, int window)
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

#endif
