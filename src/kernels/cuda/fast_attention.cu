/* fast_attention.cu — the tensor-core attention's forward (fa_forward_kernel), its
 * launch, the table's size rule and forward entries (fast.h); the backward is
 * fast_attention_bwd.cu, the design and the shared pieces fast_attention.cuh. */
#include "fast_attention.cuh"

/* ---- forward: FlashAttention-2's layout, S and P in registers (mma_sync.cuh) ----------------
 *
 * A block owns 64 queries, a warp 16 of them; the warp's scores S (16 x 64) and output O
 * (16 x HD) live in its mma accumulators (mma_sync.cuh's layout: a lane holds rows g and
 * g + 8, columns 2t and 2t + 1 of each 8-column tile).  Per key tile: S = Q K^T (Q's and
 * K's operands by ldmatrix from shared memory), the online softmax on the accumulators
 * (a row's max and sum across its four lanes by shuffles), P rounded and packed to bf16x2
 * in registers, where two neighbouring 8-key tiles of accumulators are exactly the a
 * operand of P V over those 16 keys, and O = O corr + P V (V's operand by ldmatrix.trans).
 * K and V tiles come in by cp.async into a double buffer, the next tile's copies in
 * flight while this one computes.  RoPE: Q is rotated as its tile is staged (once per
 * block); K by a pass before the kernel (fa_rope_heads_kernel) into the scratch, once per
 * forward, where rotating each K tile in shared memory would redo it in every query block
 * that visits the tile (up to T / 64 times) and put a rotation and a barrier between a
 * tile's landing and its use. */

template <int HD>
static size_t fwd_smem(void)
{
    return 5 * (size_t)TB * fa_dims<HD>::LDH * sizeof(uint16_t); /* q, k[2], v[2] */
}

/* The running softmax state of a lane's two rows (g and g + 8 of the warp's 16). */
struct fa_rows {
    float m[2], l[2];
    int i[2];
};

/* The online softmax over one key tile at j0: s from scores (c = scale log2 e applied,
 * masked to -inf) to p = 2^(x - m'), m and l updated, o rescaled by 2^(m - m').  A row's
 * four lanes (t = 0..3) exchange their max and sum by shuffles. */
template <int HD>
__device__ __forceinline__ void fa_softmax(float (&s)[TB / 8][4], float (&o)[HD / 8][4], fa_rows &st, int j0, int t,
                                           int T, int window, float scale_log2)
{
    float mx[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f}, mnew[2], corr[2];
    bool none[2];
#pragma unroll
    for (int j = 0; j < TB / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e >> 1, key = j0 + j * 8 + 2 * t + (e & 1);
            s[j][e] = st.i[h] < T && zt_attn_visible(st.i[h], key, window) ? s[j][e] * scale_log2 : -INFINITY;
            mx[h] = fmaxf(mx[h], s[j][e]);
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2));
        mnew[h] = fmaxf(st.m[h], mx[h]);
        /* a row that has seen no key yet (a window, or a row past T) stays as it was:
         * 2^(-inf + inf) would be NaN */
        none[h] = mnew[h] == -INFINITY;
        corr[h] = none[h] ? 1.0f : exp2f(st.m[h] - mnew[h]);
    }
#pragma unroll
    for (int j = 0; j < TB / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e >> 1;
            s[j][e] = none[h] ? 0.0f : exp2f(s[j][e] - mnew[h]);
            lsum[h] += s[j][e];
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        lsum[h] += __shfl_xor_sync(FULL, lsum[h], 1);
        lsum[h] += __shfl_xor_sync(FULL, lsum[h], 2);
        st.l[h] = st.l[h] * corr[h] + lsum[h];
        st.m[h] = mnew[h];
    }
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] *= corr[e >> 1];
}

/* out_i = o_i / l_i (fp32 and/or bf16, each NULL: not wanted) and lse_i of the lane's rows */
template <int HD>
__device__ __forceinline__ void fa_write_rows(float *out, uint16_t *out16, float *lse, const float (&o)[HD / 8][4],
                                              const fa_rows &st, int b, int h, int T, int nh, int t)
{
    const size_t OW = (size_t)nh * HD;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = st.i[r];
        if (i >= T)
            continue;
        const size_t row = ((size_t)b * T + i) * OW + (size_t)h * HD;
        const float inv_l = 1.0f / st.l[r];
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            const int col = n * 8 + 2 * t;
            const float v0 = o[n][2 * r] * inv_l, v1 = o[n][2 * r + 1] * inv_l;
            if (out)
                out[row + col] = v0, out[row + col + 1] = v1;
            if (out16) {
                const uint32_t pk = zt_pack_bf16x2(v0, v1);
                out16[row + col] = (uint16_t)(pk & 0xffffu), out16[row + col + 1] = (uint16_t)(pk >> 16);
            }
        }
        if (t == 0)
            lse[((size_t)b * nh + h) * T + i] = (st.m[r] + log2f(st.l[r])) * LN2;
    }
}

template <int HD, typename IN>
__global__ void __launch_bounds__(FTHREADS) fa_forward_kernel(float *out, uint16_t *out16, float *lse,
                                                               const IN *qkv, fa_src<IN> ksrc, int T, int nh,
                                                               int nkv, int window, float scale_log2, fa_rope rope,
                                                               bool async)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDH = fa_dims<HD>::LDH;
    uint16_t *qs = (uint16_t *)sm, *kbuf = qs + TB * LDH, *vbuf = kbuf + 2 * TB * LDH; /* k[2], v[2] */
    const fa_qblock<HD, IN> q(qkv, ksrc, T, nh, nkv, window, kbuf, vbuf);
    const int qb = q.qb, i0 = q.i0, h = q.h, b = q.b, kb0 = q.kb0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    q.fetch(0, kb0, T, async);
    load_tile_rope<HD>(qs, q.seq + (size_t)h * HD, q.W, i0, T, rope);
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    fa_rows st = {{-INFINITY, -INFINITY}, {0.0f, 0.0f}, {i0 + warp * 16 + g, i0 + warp * 16 + g + 8}};
    for (int kb = kb0; kb <= qb; kb++) {
        const int cur = q.advance(kb, T, async);
        __syncthreads(); /* this tile (and, the first time, q) is in shared memory for every warp */
        float s[TB / 8][4];
        fa_scores<HD>(s, qs + warp * 16 * LDH, kbuf + cur * TB * LDH, lane);
        fa_softmax<HD>(s, o, st, kb * TB, t, T, window, scale_log2);
        fa_pv<HD>(o, s, vbuf + cur * TB * LDH, lane);
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    fa_write_rows<HD>(out, out16, lse, o, st, b, h, T, nh, t);
}

/* ---- launching ------------------------------------------------------------------------- */

/* scratch: the caller's attention scratch (zt_cu_fast_attention_scratch_bytes), whose
 * head takes the rotated K, 2 B nkv T HD bytes (fa_rope_heads_kernel), when rope has
 * tables */
template <int HD, typename IN>
static void forward_hd(float *out, uint16_t *out16, float *lse, const IN *qkv, void *scratch, int B, int T, int nh,
                       int nkv, int window, fa_rope rope)
{
    const size_t smem = fwd_smem<HD>(), W = (size_t)(nh + 2 * nkv) * HD;
    const float scale_log2 = (float)(LOG2E / sqrt((double)HD));
    /* K read where the product wrote it, or rotated into the scratch first (bf16 only:
     * the fp32 entries have no RoPE) */
    fa_src<IN> ksrc = {qkv + (size_t)nh * HD, (size_t)T * W, (size_t)HD, W};
    if constexpr (sizeof(IN) == sizeof(uint16_t)) {
        if (rope.cos) {
            uint16_t *kr = (uint16_t *)scratch;
            const size_t n = (size_t)B * nkv * T * (HD / 2);
            fa_rope_heads_kernel<HD, IN><<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(
                kr, qkv, rope, B, T, W, nh, nkv);
            ZT_CU_LAUNCHED();
            ksrc = fa_src<IN>{kr, (size_t)nkv * T * HD, (size_t)T * HD, (size_t)HD};
        }
    }
    /* cp.async moves aligned 16-byte chunks of bf16 (the rows are: W and HD are multiples of 8) */
    const bool async = sizeof(IN) == sizeof(uint16_t) && aligned16(qkv) && aligned16(ksrc.base);
    zt_cu_allow_smem<fa_forward_kernel<HD, IN>>(smem, "fast attention");
    const dim3 grid((unsigned)((T + TB - 1) / TB), (unsigned)nh, (unsigned)B);
    fa_forward_kernel<HD, IN><<<grid, FTHREADS, smem, zt_cu.stream>>>(out, out16, lse, qkv, ksrc, T, nh, nkv, window,
                                                                  scale_log2, rope, async);
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

void zt_cu_fast_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch, int B,
                                  int T, int nh, int nkv, int hd, int window)
{
    if (!fast_path(scratch, B, T, nh, nkv, hd, window)) {
        zt_cu_attention_forward(out, out_bf16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
        return;
    }
    if (B == 0 || T == 0)
        return;
    FA_DISPATCH(forward_hd, float, out, out_bf16, lse, qkv, scratch, B, T, nh, nkv, window, fa_rope{NULL, NULL});
}

/* bf16 activations (backend.h's _act16 entries): the same kernel staging bf16 qkv as it
 * is, q and k rotated by RoPE (fa_rope_heads_kernel for k); the output in bf16 only; the
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
    FA_DISPATCH(forward_hd, uint16_t, (float *)NULL, out16, lse, qkv16, scratch, B, T, nh, nkv, window, rope);
}
