/* fast_attention_bwd.cu — the tensor-core attention's backward (fast.h): D once per
 * backward (fa_delta_kernel), dk and dv by key tiles (fa_dkv_kernel, and with grouped
 * queries fa_dkv_sum_kernel), dq by query tiles (fa_dq_kernel), their launches and the
 * backward entries.  The design, the math and the pieces shared with the forward
 * (fast_attention.cu) are in fast_attention.cuh. */
#include "fast_attention.cuh"

/* a gradient element into the fp32 and/or bf16 dqkv (each NULL: not wanted) */
__device__ __forceinline__ void put_grad(float *d32, uint16_t *d16, size_t at, float v)
{
    if (d32)
        d32[at] = v;
    if (d16)
        d16[at] = zt_f32_to_bf16(v);
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

/* D_i = dout_i . out_i (fp32, in the order d = 0, 1, ...) of query i of head h, and
 * dout_i in bf16 into o16 as it is read (the conversion a staged tile makes) */
template <int HD, typename IN>
__device__ __forceinline__ float delta_row(uint16_t *o16, const float *dout, const IN *out, int b, int h, int i,
                                           int T, int nh)
{
    const size_t row = ((size_t)b * T + i) * (size_t)nh * HD + (size_t)h * HD;
    float D = 0.0f;
    for (int d = 0; d < HD; d++) {
        D = fmaf(dout[row + d], as_f32(out[row + d]), D);
        o16[d] = as_bf16(dout[row + d]);
    }
    return D;
}

/* D for every (sequence, head, query), Dg (B, nh, T) as lse: once per backward, where
 * each dkv block would otherwise recompute it for every query tile it visits (once per
 * key tile that sees the query: T / 64 times at full causal length) and dq once more;
 * and dO in bf16, do16 (B, nh, T, HD), which the dkv blocks take by cp.async. */
template <int HD, typename IN>
__global__ void fa_delta_kernel(float *Dg, uint16_t *do16, const float *dout, const IN *out, int B, int T, int nh)
{
    const size_t n = (size_t)B * nh * T;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k % T), bh = (int)(k / T);
        Dg[k] = delta_row<HD>(do16 + k * HD, dout, out, bh / nh, bh % nh, i, T, nh);
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
 * fp32 to bf16 two values at a time (mma_sync.cuh's zt_pack_bf16x2: one cvt.rn.bf16x2.f32,
 * round to nearest even, as the forward packs P). */

/* 8 consecutive elements at p (16-byte aligned) as bf16 bits */
__device__ __forceinline__ uint4 bwd_bf16x8(const uint16_t *p) { return *(const uint4 *)p; }
__device__ __forceinline__ uint4 bwd_bf16x8(const float *p)
{
    const float4 a = ((const float4 *)p)[0], c = ((const float4 *)p)[1];
    uint4 v;
    v.x = zt_pack_bf16x2(a.x, a.y), v.y = zt_pack_bf16x2(a.z, a.w);
    v.z = zt_pack_bf16x2(c.x, c.y), v.w = zt_pack_bf16x2(c.z, c.w);
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
            v1.x = zt_pack_bf16x2(y1[0], y1[1]), v1.y = zt_pack_bf16x2(y1[2], y1[3]);
            v1.z = zt_pack_bf16x2(y1[4], y1[5]), v1.w = zt_pack_bf16x2(y1[6], y1[7]);
            v2.x = zt_pack_bf16x2(y2[0], y2[1]), v2.y = zt_pack_bf16x2(y2[2], y2[3]);
            v2.z = zt_pack_bf16x2(y2[4], y2[5]), v2.w = zt_pack_bf16x2(y2[6], y2[7]);
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
        *(uint32_t *)(d16 + at) = zt_pack_bf16x2(v0, v1);
}

/* ---- backward: dk and dv -------------------------------------------------------------- */

/* dkv's shared memory: the block's K and V tiles, and a double buffer of the query
 * tile's Q, dO, lse log2(e) and D (load_stats) */
template <int HD>
static size_t dkv_smem(void)
{
    return 6 * (size_t)TB * fa_dims<HD>::LDH * sizeof(uint16_t) + 4 * (size_t)TB * sizeof(float);
}

/* The query tile at i0 into one half of dkv's double buffer: Q (rotated by RoPE) and dO
 * as the backward's first passes left them in bf16 in the scratch (q16h, do16h: head h's
 * rows), by 16-byte cp.async (the caller commits); L2 and D (load_stats). */
template <int HD>
__device__ __forceinline__ void fa_dkv_stage(uint16_t *qs, uint16_t *dos, float *Ls, float *Ds,
                                             const uint16_t *q16h, const uint16_t *do16h, const float *Dg,
                                             const float *lse, int b, int h, int i0, int T, int nh)
{
    fa_fetch_tile<HD>(qs, q16h, HD, i0, T, true);
    fa_fetch_tile<HD>(dos, do16h, HD, i0, T, true);
    load_stats(Ls, Ds, Dg, lse, b, h, i0, T, nh);
}

/* P^T and scale dS^T of a warp's 16 keys by the query tile at i0, in place on the mma
 * accumulators: s (S^T = K Q^T) becomes P^T, dp (dP^T = V dO^T) becomes dS^T, by p_ds
 * (the dq kernel's function, so both agree).  The lane holds keys j and j + 8 and, of
 * each 8-query tile n, queries n 8 + 2t and the next: their L2 and D from Ls, Ds. */
__device__ __forceinline__ void fa_dkv_pds(float (&s)[TB / 8][4], float (&dp)[TB / 8][4], const float *Ls,
                                           const float *Ds, int j, int i0, int T, int window, float scale,
                                           float scale_log2, int t)
{
#pragma unroll
    for (int n = 0; n < TB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int col = n * 8 + 2 * t + (e & 1), key = j + 8 * (e >> 1), iq = i0 + col;
            const bool vis = key < T && iq < T && zt_attn_visible(iq, key, window);
            const fa_pds r = p_ds(s[n][e], dp[n][e], Ls[col], Ds[col], scale_log2, scale, vis);
            s[n][e] = r.p, dp[n][e] = r.ds;
        }
}

/* The lane's dk and dv from its accumulators (keys j and j + 8; of each 8-column tile n,
 * columns n 8 + 2t and the next) into h's partials (part: (B, nh, T, HD) for dk, then as
 * many for dv, at nd) or into dqkv, dk rotated back by RoPE at its key's position (the
 * rotation transposed: sin negated): columns i and i + HD/2 of a row lie in tiles n and
 * n + HD/16 of the same lane, so the rotation needs no exchange. */
template <int HD>
__device__ __forceinline__ void fa_dkv_write(float *dqkv, uint16_t *dqkv16, float *part, const float (&dk)[HD / 8][4],
                                             const float (&dv)[HD / 8][4], int b, int h, int kh, int j, int T,
                                             int nh, int nkv, fa_rope rope, int t)
{
    constexpr int H = HD / 2, NH = HD / 16;
    const size_t W = (size_t)(nh + 2 * nkv) * HD, nd = (size_t)gridDim.z * nh * T * HD;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = j + 8 * r;
        if (key >= T)
            continue;
        if (part) { /* fp32 and unrotated: fa_dkv_sum_kernel rotates the group's sum */
            const size_t at = (((size_t)b * nh + h) * T + key) * HD;
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                const int col = n * 8 + 2 * t;
                part[at + col] = dk[n][2 * r], part[at + col + 1] = dk[n][2 * r + 1];
                part[nd + at + col] = dv[n][2 * r], part[nd + at + col + 1] = dv[n][2 * r + 1];
            }
            continue;
        }
        const size_t row = ((size_t)b * T + key) * W, dko = row + (size_t)(nh + kh) * HD;
        const size_t dvo = row + (size_t)(nh + nkv + kh) * HD;
#pragma unroll
        for (int n = 0; n < NH; n++) {
            const int col = n * 8 + 2 * t;
            float y1[2], y2[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                y1[e] = dk[n][2 * r + e], y2[e] = dk[n + NH][2 * r + e];
                if (rope.cos) {
                    const size_t ti = (size_t)key * H + col + e;
                    const zt_rope_pair y = zt_rope_rotate(y1[e], y2[e], rope.cos[ti], -rope.sin[ti]);
                    y1[e] = y.y1, y2[e] = y.y2;
                }
            }
            put_grad2(dqkv, dqkv16, dko + col, y1[0], y1[1]);
            put_grad2(dqkv, dqkv16, dko + col + H, y2[0], y2[1]);
        }
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            put_grad2(dqkv, dqkv16, dvo + n * 8 + 2 * t, dv[n][2 * r], dv[n][2 * r + 1]);
    }
}

/* One block per (key tile, query head h, sequence): head h's share of dk and dv for the
 * 64 keys, summed over the query tiles that see them.  Without grouped queries that is
 * all of dk and dv, written to dqkv; with them, the share goes to h's partials `part`
 * (fp32, unrotated; fa_dkv_sum_kernel adds a group's heads).
 *
 * The forward's layout turned around (mma_sync.cuh): a warp owns 16 of the block's keys,
 * and per query tile S^T = K Q^T and dP^T = V dO^T accumulate in its mma registers (the
 * forward's fa_scores with K's and V's rows as the a operand, Q's and dO's as b); P^T
 * and dS^T are formed on the accumulators (fa_dkv_pds) and, packed to bf16x2, are the a
 * operands of dV += P^T dO and dK += dS^T Q (the forward's fa_pv, dO and Q by
 * ldmatrix.trans as it takes V).  dK and dV stay in registers across the query tiles.
 * The next query tile comes by cp.async into the other half of a double buffer while
 * this one computes (fa_dkv_stage, from q16 and do16: Q rotated and dO converted once per
 * backward, where each key tile's block would otherwise redo both for every query tile
 * it visits and could not take them by cp.async). */
template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_dkv_kernel(float *dqkv, uint16_t *dqkv16, float *part,
                                                           const uint16_t *q16, const uint16_t *do16, const IN *qkv,
                                                           const float *lse, const float *Dg, int T, int nh, int nkv,
                                                           int window, float scale, float scale_log2, fa_rope rope)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH;
    uint16_t *ks = (uint16_t *)sm, *vs = ks + TB * LDH, *qbuf = vs + TB * LDH, *dobuf = qbuf + 2 * TB * LDH;
    float *Lbuf = (float *)(dobuf + 2 * TB * LDH), *Dbuf = Lbuf + 2 * TB; /* q[2], do[2], L2[2], D[2] */
    const int nblk = (T + TB - 1) / TB;
    const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * HD, hrows = ((size_t)b * nh + h) * T * HD;
    const int j0 = kb * TB, nk = T - j0 < TB ? T - j0 : TB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
    const int j = j0 + warp * 16 + (lane >> 2); /* the lane's first key; its second is j + 8 */
    const IN *seq = qkv + (size_t)b * T * W;
    const uint16_t *q16h = q16 + hrows, *do16h = do16 + hrows;

    fa_dkv_stage<HD>(qbuf, dobuf, Lbuf, Dbuf, q16h, do16h, Dg, lse, b, h, j0, T, nh);
    zt_cp_async_commit();
    bwd_load_tile_rope<HD>(ks, seq + (size_t)(nh + kh) * HD, W, j0, T, rope);
    bwd_load_tile<HD>(vs, seq + (size_t)(nh + nkv + kh) * HD, W, j0, T);
    float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int qb_last = zt_attn_last_query_block(j0, nk, window, nblk, TB);
    for (int qb = kb; qb <= qb_last; qb++) {
        const int i0 = qb * TB, cur = (qb - kb) & 1, nxt = cur ^ 1;
        if (qb < qb_last) { /* the next tile into the other half, read by no one since the last barrier */
            fa_dkv_stage<HD>(qbuf + nxt * TB * LDH, dobuf + nxt * TB * LDH, Lbuf + nxt * TB, Dbuf + nxt * TB, q16h,
                             do16h, Dg, lse, b, h, i0 + TB, T, nh);
            zt_cp_async_commit();
            zt_cp_async_wait<1>();
        } else {
            zt_cp_async_wait<0>();
        }
        __syncthreads(); /* this tile (and, the first time, K and V) is in shared memory for every warp */
        const uint16_t *qs = qbuf + cur * TB * LDH, *dos = dobuf + cur * TB * LDH;
        const float *Ls = Lbuf + cur * TB, *Ds = Dbuf + cur * TB;
        float s[TB / 8][4], dp[TB / 8][4];
        fa_scores<HD>(s, ks + warp * 16 * LDH, qs, lane);   /* S^T = K Q^T */
        fa_scores<HD>(dp, vs + warp * 16 * LDH, dos, lane); /* dP^T = V dO^T */
        fa_dkv_pds(s, dp, Ls, Ds, j, i0, T, window, scale, scale_log2, t);
        fa_pv<HD>(dv, s, dos, lane); /* dV += P^T dO */
        fa_pv<HD>(dk, dp, qs, lane); /* dK += dS^T Q (scale inside ds) */
        __syncthreads();             /* every warp is done with this half before it is refilled */
    }
    fa_dkv_write<HD>(dqkv, dqkv16, part, dk, dv, b, h, kh, j, T, nh, nkv, rope, t);
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

/* ---- backward: dq, S, dP and dS in registers (as the forward) --------------------------
 *
 * A block owns 64 queries, a warp 16 of them, for one head; per key tile the warp forms
 * S = Q K^T and dP = dO V^T in mma accumulators (fa_scores: Q's, dO's, K's and V's
 * operands by ldmatrix from shared memory, K and V as they lie, key-major), turns them
 * into dS = P o (dP - D) scale on the accumulators (p_ds, lse and D of the lane's two rows
 * in registers), and dQ += dS K by fa_pv: dS packed to bf16x2 is the a operand, K's b
 * operand by ldmatrix.trans as the forward's P V takes V.  K and V tiles come in by
 * cp.async into a double buffer while the previous tile computes (fa_fetch_tile: bf16
 * activations, 16-byte aligned).  Q (rotated by RoPE) and dO come by cp.async from the
 * bf16 copies the dkv pass read (q16, do16: made once per backward by fa_rope_heads_kernel
 * and fa_delta_kernel); K, as the forward's, is rotated by fa_rope_heads_kernel once per
 * backward into the scratch (dq_run), where rotating each K tile as it is staged would
 * redo it in every query block that visits the tile and keep K off cp.async. */

template <int HD>
static size_t dq_smem(void)
{
    return 6 * (size_t)TB * fa_dims<HD>::LDH * sizeof(uint16_t); /* q, dO, k[2], v[2] */
}

/* s (the scores S of the key tile at j0, dP in dp) becomes dS in place, scale inside:
 * p_ds on each of the lane's elements (rows st.i[0], st.i[1], keys j0 + 8 j + 2 t + e & 1) */
__device__ __forceinline__ void dq_ds(float (&s)[TB / 8][4], const float (&dp)[TB / 8][4], const int (&i)[2],
                                      const float (&L2)[2], const float (&D)[2], int j0, int t, int T, int window,
                                      float scale_log2, float scale)
{
#pragma unroll
    for (int j = 0; j < TB / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e >> 1, key = j0 + j * 8 + 2 * t + (e & 1);
            const bool vis = i[h] < T && zt_attn_visible(i[h], key, window);
            s[j][e] = p_ds(s[j][e], dp[j][e], L2[h], D[h], scale_log2, scale, vis).ds;
        }
}

/* dq of the lane's rows (HD / 8 tiles of 8 columns, rows i[0], i[1]) into dqkv / dqkv16,
 * rotated back by RoPE: columns c and c + HD/2 (a pair) sit in tiles n and n + HD/16 of
 * the same lane, at the same place. */
template <int HD>
__device__ __forceinline__ void dq_write_rows(float *dqkv, uint16_t *dqkv16, const float (&o)[HD / 8][4],
                                              const int (&i)[2], int b, int h, int T, size_t W, int t, fa_rope rope)
{
    constexpr int H = HD / 2, NH = H / 8;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (i[r] >= T)
            continue;
        const size_t row = ((size_t)b * T + i[r]) * W + (size_t)h * HD;
#pragma unroll
        for (int n = 0; n < NH; n++) {
            const int col = n * 8 + 2 * t;
            float y1[2] = {o[n][2 * r], o[n][2 * r + 1]}, y2[2] = {o[n + NH][2 * r], o[n + NH][2 * r + 1]};
            if (rope.cos)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const size_t ti = (size_t)i[r] * H + col + e;
                    const zt_rope_pair y = zt_rope_rotate(y1[e], y2[e], rope.cos[ti], -rope.sin[ti]);
                    y1[e] = y.y1, y2[e] = y.y2;
                }
            put_grad2(dqkv, dqkv16, row + col, y1[0], y1[1]);
            put_grad2(dqkv, dqkv16, row + col + H, y2[0], y2[1]);
        }
    }
}

/* One block per (query tile, head h, sequence): dq of the 64 queries, summed over the key
 * tiles they see in key order.  Q and dO from q16 and do16 (bf16, (B, nh, T, HD)); K from
 * ksrc (qkv's, or rotated in the scratch); async: K and V by cp.async (bf16, 16-byte
 * aligned rows). */
template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_dq_kernel(float *dqkv, uint16_t *dqkv16, const uint16_t *q16,
                                                          const uint16_t *do16, const IN *qkv, fa_src<IN> ksrc,
                                                          const float *lse,
                                                          const float *Dg, int T, int nh, int nkv, int window,
                                                          float scale, float scale_log2, fa_rope rope, bool async)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH;
    uint16_t *qs = (uint16_t *)sm, *dos = qs + TB * LDH, *kbuf = dos + TB * LDH, *vbuf = kbuf + 2 * TB * LDH;
    const fa_qblock<HD, IN> q(qkv, ksrc, T, nh, nkv, window, kbuf, vbuf);
    const int qb = q.qb, i0 = q.i0, h = q.h, b = q.b, kb0 = q.kb0;
    const size_t hrows = ((size_t)b * nh + h) * T * HD; /* head h's rows in q16 and do16 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    fa_fetch_tile<HD>(qs, q16 + hrows, HD, i0, T, true);
    fa_fetch_tile<HD>(dos, do16 + hrows, HD, i0, T, true);
    q.fetch(0, kb0, T, async); /* its commit takes Q's and dO's copies into the same group */
    const int i[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8}; /* the lane's rows */
    float L2[2], D[2]; /* rows past T: D 0, L2 +inf (p = 0) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const size_t st = ((size_t)b * nh + h) * T + i[r];
        L2[r] = i[r] < T ? lse[st] * LOG2E : INFINITY, D[r] = i[r] < T ? Dg[st] : 0.0f;
    }
    float dq[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int kb = kb0; kb <= qb; kb++) {
        const int cur = q.advance(kb, T, async);
        __syncthreads(); /* this tile (and, the first time, q and dO) is in shared memory */
        const uint16_t *ks = kbuf + cur * TB * LDH;
        float s[TB / 8][4], dp[TB / 8][4];
        fa_scores<HD>(s, qs + warp * 16 * LDH, ks, lane);                   /* S = Q K^T */
        fa_scores<HD>(dp, dos + warp * 16 * LDH, vbuf + cur * TB * LDH, lane); /* dP = dO V^T */
        dq_ds(s, dp, i, L2, D, kb * TB, t, T, window, scale_log2, scale);
        fa_pv<HD>(dq, s, ks, lane); /* dQ += dS K */
        __syncthreads();            /* every warp is done with this buffer before it is refilled */
    }
    dq_write_rows<HD>(dqkv, dqkv16, dq, i, b, h, T, q.W, t, rope);
}

/* ---- launching ------------------------------------------------------------------------- */

/* The dq pass, after the dkv pass and its sum, so that kr, the partials' place in the
 * scratch, is free: with RoPE, K rotated into kr first (fa_rope_heads_kernel, as the
 * forward), 2 B nkv T HD bytes, which backend.h's rule always leaves there. */
template <int HD, typename IN>
static void dq_run(float *dqkv, uint16_t *dqkv16, const uint16_t *q16, const uint16_t *do16, const IN *qkv,
                   const float *lse, const float *Dg, void *kr, int B, int T, int nh, int nkv, int window,
                   fa_rope rope)
{
    const size_t W = (size_t)(nh + 2 * nkv) * HD, smem = dq_smem<HD>();
    const float scale = (float)(1.0 / sqrt((double)HD)), scale_log2 = (float)(LOG2E / sqrt((double)HD));
    fa_src<IN> ksrc = {qkv + (size_t)nh * HD, (size_t)T * W, (size_t)HD, W};
    if constexpr (sizeof(IN) == sizeof(uint16_t)) { /* (the fp32 entries have no RoPE) */
        if (rope.cos) {
            const size_t n = (size_t)B * nkv * T * (HD / 2);
            fa_rope_heads_kernel<HD, IN><<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>((uint16_t *)kr, qkv, rope,
                                                                                             B, T, W, nh, nkv);
            ZT_CU_LAUNCHED();
            ksrc = fa_src<IN>{(const uint16_t *)kr, (size_t)nkv * T * HD, (size_t)T * HD, (size_t)HD};
        }
    }
    /* cp.async moves aligned 16-byte chunks of bf16 (the rows are: W and HD are multiples of 8) */
    const bool async = sizeof(IN) == sizeof(uint16_t) && aligned16(qkv) && aligned16(ksrc.base);
    const unsigned nblk = (unsigned)((T + TB - 1) / TB);
    zt_cu_allow_smem<fa_dq_kernel<HD, IN>>(smem, "fast attention");
    fa_dq_kernel<HD, IN><<<dim3(nblk, (unsigned)nh, (unsigned)B), FTHREADS, smem, zt_cu.stream>>>(
        dqkv, dqkv16, q16, do16, qkv, ksrc, lse, Dg, T, nh, nkv, window, scale, scale_log2, rope, async);
    ZT_CU_LAUNCHED();
}

/* The caller's scratch (zt_cu_fast_attention_scratch_bytes), where backend.h's rule puts
 * each part: D, B nh T floats, and dO in bf16 (fa_delta_kernel); Q rotated by RoPE, or
 * converted, in bf16 (fa_rope_heads_kernel); with grouped queries the dkv blocks'
 * per-head partials, which fa_dkv_sum_kernel adds into dqkv; then the dq pass. */
template <int HD, typename IN>
static void backward_hd(float *dqkv, uint16_t *dqkv16, const float *dout, const IN *qkv, const IN *out,
                        const float *lse, void *scratch, int B, int T, int nh, int nkv, int window, fa_rope rope)
{
    const float scale = (float)(1.0 / sqrt((double)HD)), scale_log2 = (float)(LOG2E / sqrt((double)HD));
    const unsigned nblk = (unsigned)((T + TB - 1) / TB);
    zt_fast_scratch_at at;
    zt_attention_fast_scratch_bytes(B, T, nh, nkv, HD, ZT_BF16, &at);
    char *sc = (char *)scratch;
    float *Dg = (float *)sc, *part = nh > nkv ? (float *)(sc + at.partials) : NULL;
    uint16_t *q16 = (uint16_t *)(sc + at.q16), *do16 = (uint16_t *)(sc + at.do16);
    fa_delta_kernel<HD, IN><<<zt_cu_blocks((size_t)B * nh * T), ZT_CU_THREADS, 0, zt_cu.stream>>>(Dg, do16, dout, out,
                                                                                                B, T, nh);
    ZT_CU_LAUNCHED();
    const size_t n = (size_t)B * nh * T * (HD / 2);
    fa_rope_heads_kernel<HD, IN><<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(
        q16, qkv, rope, B, T, (size_t)(nh + 2 * nkv) * HD, 0, nh);
    ZT_CU_LAUNCHED();
    zt_cu_allow_smem<fa_dkv_kernel<HD, IN>>(dkv_smem<HD>(), "fast attention");
    fa_dkv_kernel<HD, IN><<<dim3(nblk, (unsigned)nh, (unsigned)B), FTHREADS, dkv_smem<HD>(), zt_cu.stream>>>(
        dqkv, dqkv16, part, q16, do16, qkv, lse, Dg, T, nh, nkv, window, scale, scale_log2, rope);
    ZT_CU_LAUNCHED();
    if (part) {
        const size_t n = (size_t)B * T * nkv * (HD / 2);
        fa_dkv_sum_kernel<HD><<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(dqkv, dqkv16, part, B, T, nh, nkv,
                                                                                  rope);
        ZT_CU_LAUNCHED();
    }
    dq_run<HD, IN>(dqkv, dqkv16, q16, do16, qkv, lse, Dg, sc + at.partials, B, T, nh, nkv, window, rope);
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

/* bf16 activations (backend.h's _act16 entries): the same kernels staging bf16 qkv (and
 * reading bf16 out for D) as they are, q and k rotated by RoPE as they are staged and
 * dq, dk rotated back as they are written; the shapes the tensor-core kernels do not
 * serve take the exact table's entries (the exact kernels on widened copies, act16.cu). */
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
