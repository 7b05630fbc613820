/* attention.cu — causal grouped-query attention on the device, flash-style: tiles of
 * 64 queries by 64 keys in shared memory, an online softmax in fp32, no T x T matrix
 * anywhere; the forward saves the log-sum-exp of each softmax row and the backward
 * recomputes the probabilities from it (kernels.h, attention.c, attention16.c).
 *
 * Shapes: qkv (B, T, W), W = (nh + 2*nkv)*hd, rows [q heads | k heads | v heads];
 * out (B, T, nh*hd); lse (B, nh, T).  Query head h reads kv head h / (nh/nkv).  For one
 * (b, h) and query i, the keys j it sees (j <= i, and with a sliding window w > 0 also
 * i - j < w, as the CPU kernels and transformers mask), scale = 1/sqrt(hd):
 *   s_ij = scale * (q_i . k_j),  lse_i = log sum_j exp(s_ij),  p_ij = exp(s_ij - lse_i),
 *   out_i = sum_j p_ij v_j.
 *
 * Forward (one block per (query block, head, sequence); each warp owns 8 of the 64
 * queries).  Key blocks kb = 0..qb are visited in order; per block and query, with the
 * running max m and sum l:
 *   m' = max(m, max_j s_ij),  c = exp(m - m'),  p_ij = exp(s_ij - m'),
 *   l  = l c + sum_j p_ij,    o = o c + sum_j p_ij v_j,
 * and at the end out_i = o / l, lse_i = m + log l (a block where a query sees no key,
 * which only a window makes possible, leaves its m, l and o as they were).  Key
 * blocks no query of the block sees are skipped.  A lane computes the scores of two
 * keys (each q . k a chain of fmas over d in increasing order), the warp takes their
 * max, and p_ij is passed from lane to lane while each lane accumulates its own slice
 * of the head dimension of o.
 *
 * Backward, with D_i = dout_i . out_i (= sum_j p_ij dp_ij):
 *   dp_ij = dout_i . v_j,   ds_ij = p_ij (dp_ij - D_i)   (the softmax Jacobian),
 *   dv_j = sum_i p_ij dout_i,   dk_j = scale sum_i ds_ij q_i,   dq_i = scale sum_j ds_ij k_j.
 * dk and dv sum over the queries of every head of a kv group, dq over the keys, so the
 * backward is two kernels, each the sole writer of what it sums (no atomics, results
 * the same on every run): one block per (key block, kv head, sequence) walks the
 * group's heads and the query blocks at and after its keys for dk and dv; one block per
 * (query block, head, sequence) walks the key blocks up to its queries for dq.  Both
 * recompute p and ds through one device function (score_grad), so they agree by
 * construction.
 *
 * The arithmetic follows attention.c operation for operation: the same 64-key blocks
 * (so the same running max after each block), scores and dp as fma chains over d from
 * zero, exp as vmath.h's zt_expf_fast, p and ds from the same expressions, every
 * accumulation (o, l, dv, dk, dq) in the same order (keys, queries, heads, blocks in
 * increasing order).  So the fp32 results are the CPU's bits when its build uses fma
 * (x86-64 with FMA), up to the order of D's sum and of adding exact zeros.
 *
 * bf16 operands (bf16 compute, scratch != NULL, as in attention16.c): q, k, v, p (in
 * P V and P^T dout), dout and ds are rounded to bf16 before their products; the
 * products are then exact in fp32 and accumulate in fp32 in the order above (which is
 * attention16.c's order on CPUs without AVX512-BF16; with it, the CPU's dot-product
 * instruction pairs terms differently).  The softmax statistics, lse, D and all outputs
 * stay fp32.  The scratch holds K and V rounded to bf16, (B, nkv, T, hd) each, packed
 * once per call.
 *
 * Head dimensions up to 256 (attention.c's limit); the shared memory a block needs,
 * about 75 KB at hd = 128 and 148 KB at hd = 256, must fit the device's opt-in limit. */
#include "attention_mask.cuh"
#include "entries.cuh"
#include "smem_optin.cuh"

extern "C" {
#include "../kernels.h"
}

#define BLK 64                 /* queries and keys per tile: attention.c's ZT_ATTN_BLOCK */
#define WARPS 8
#define QPW (BLK / WARPS)      /* rows (queries or keys) each warp owns */
#define THREADS (WARPS * 32)
#define MAX_HD 256
#define FULL 0xffffffffu

/* ---- the bf16 pack: K and V rounded, (B, nkv, T, hd) each ------------------------------ */

__global__ void pack_kv_kernel(uint16_t *kp, uint16_t *vp, const float *qkv, int B, int T, int nh, int nkv, int hd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const size_t total = (size_t)B * nkv * T * hd;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(k % hd);
        const size_t t = (k / hd) % T;
        const int kh = (int)((k / ((size_t)hd * T)) % nkv);
        const size_t b = k / ((size_t)hd * T * nkv);
        const float *row = qkv + (b * T + t) * W;
        kp[k] = zt_f32_to_bf16(row[(size_t)(nh + kh) * hd + d]);
        vp[k] = zt_f32_to_bf16(row[(size_t)(nh + nkv + kh) * hd + d]);
    }
}

/* element d of key / value t of kv head kh in sequence b: from the pack (bf16) or qkv */
template <bool M16>
__device__ __forceinline__ float load_k(const float *qkv, const uint16_t *kp, size_t W, int b, int T, int nh, int nkv,
                                        int kh, int hd, int t, int d)
{
    if (M16)
        return zt_bf16_to_f32(kp[(((size_t)b * nkv + kh) * T + t) * hd + d]);
    return qkv[((size_t)b * T + t) * W + (size_t)(nh + kh) * hd + d];
}

template <bool M16>
__device__ __forceinline__ float load_v(const float *qkv, const uint16_t *vp, size_t W, int b, int T, int nh, int nkv,
                                        int kh, int hd, int t, int d)
{
    if (M16)
        return zt_bf16_to_f32(vp[(((size_t)b * nkv + kh) * T + t) * hd + d]);
    return qkv[((size_t)b * T + t) * W + (size_t)(nh + nkv + kh) * hd + d];
}

/* the mask, shared with the fast kernels (attention_mask.cuh) */
/* pos: the sequence's positions inside each packed example (NULL: one example): query i
 * then also needs j >= i - pos[i], a key of its own example (kernels.h) */
__device__ __forceinline__ bool visible(int i, int j, int window, const int *pos)
{
    return zt_attn_visible(i, j, window) && (!pos || j >= i - pos[i]);
}

__device__ __forceinline__ int first_key_block(int i0, int window) { return zt_attn_first_key_block(i0, window, BLK); }

template <bool M16>
__device__ __forceinline__ float opnd(float x)
{
    return M16 ? zt_round_bf16(x) : x;
}

/* D_i = dout_i . out_i in fp32 (attention.c: an fma chain over d; attention16.c: a
 * plain sum of products, vectorised on the CPU, here in increasing d) */
template <bool M16>
__device__ __forceinline__ float dot_dout_out(const float *go, const float *o, int hd)
{
    float s = 0.0f;
    for (int d = 0; d < hd; d++)
        s = M16 ? s + go[d] * o[d] : fmaf(go[d], o[d], s);
    return s;
}

/* ---- the score tile: one home for s, p, dp and ds ---------------------------------------
 *
 * The forward and both backward kernels must compute the same s_ij (the backward's p is
 * exp(s - lse) with the forward's lse), and the two backward kernels the same p_ij and
 * ds_ij (each sums a different side of ds), so these are the only places that compute
 * them.  Each dot is an fma chain over d in increasing order from zero (attention.c's
 * tile order); the rows are contiguous (stride 1). */

/* k . q: the raw score, before the scale */
__device__ __forceinline__ float score_dot(const float *k, const float *q, int hd)
{
    float s = 0.0f;
    for (int d = 0; d < hd; d++) s = fmaf(k[d], q[d], s);
    return s;
}

struct p_ds {
    float p, ds; /* p_ij, and scale * ds_ij (the factor both dk and dq take) */
};

/* For query i and key j (vis: i sees j): s = scale k_j.q_i, dp = v_j.dout_i,
 * p = exp(s - L_i), ds = p (dp - D_i) scale; both 0 where i does not see j. */
__device__ __forceinline__ p_ds score_grad(const float *k, const float *q, const float *v, const float *g, int hd,
                                           float L, float D, float scale, bool vis)
{
    const float s = score_dot(k, q, hd);
    float dp = 0.0f;
    for (int d = 0; d < hd; d++) dp = fmaf(v[d], g[d], dp);
    p_ds r;
    r.p = vis ? zt_expf_fast(s * scale - L) : 0.0f;
    r.ds = vis ? r.p * (dp - D) * scale : 0.0f;
    return r;
}

/* ---- forward ---------------------------------------------------------------------------- */

template <int DL, bool M16>
__global__ void __launch_bounds__(THREADS) attn_forward_kernel(float *out, uint16_t *out16, float *lse,
                                                                const float *qkv, const uint16_t *kp,
                                                                const uint16_t *vp, int T, int nh, int nkv, int hd,
                                                                int window, const int *pos, float scale)
{
    extern __shared__ float sm[];
    const int hp = hd + 1; /* padded rows: lane j reading row j, column d, hits bank (j + d) % 32 */
    float *ks = sm;              /* BLK x hp */
    float *vs = ks + BLK * hp;   /* BLK x hd */
    float *qrow = vs + BLK * hd; /* WARPS x hd: each warp's current query */
    const int nblk = (T + BLK - 1) / BLK;
    const int qb = nblk - 1 - (int)blockIdx.x; /* the most expensive blocks first */
    const int h = blockIdx.y, b = blockIdx.z;
    const int kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * hd, OW = (size_t)nh * hd;
    const int i0 = qb * BLK, nq = T - i0 < BLK ? T - i0 : BLK;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *qw = qrow + warp * hd;

    float o[QPW][DL], m[QPW], l[QPW];
#pragma unroll
    for (int r = 0; r < QPW; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < DL; t++) o[r][t] = 0.0f;
    }

    for (int kb = first_key_block(i0, window); kb <= qb; kb++) {
        const int j0 = kb * BLK, nk = kb < qb ? BLK : nq; /* the diagonal block is square */
        __syncthreads(); /* the previous block's tiles are no longer read */
        for (int idx = threadIdx.x; idx < nk * hd; idx += THREADS) {
            const int jj = idx / hd, d = idx % hd;
            ks[jj * hp + d] = load_k<M16>(qkv, kp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
            vs[jj * hd + d] = load_v<M16>(qkv, vp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < QPW; r++) {
            const int ii = warp * QPW + r;
            if (ii >= nq)
                break; /* warp-uniform */
            const float *qg = qkv + ((size_t)b * T + i0 + ii) * W + (size_t)h * hd;
            for (int d = lane; d < hd; d += 32) qw[d] = opnd<M16>(qg[d]);
            __syncwarp();
            /* scores of keys ja = lane and jb = lane + 32 */
            const int ja = lane, jb = lane + 32;
            const float da = score_dot(ks + ja * hp, qw, hd), db = score_dot(ks + jb * hp, qw, hd);
            const float sa = ja < nk && visible(i0 + ii, j0 + ja, window, pos ? pos + (size_t)b * T : nullptr) ? da * scale : -INFINITY;
            const float sb = jb < nk && visible(i0 + ii, j0 + jb, window, pos ? pos + (size_t)b * T : nullptr) ? db * scale : -INFINITY;
            const float mnew = fmaxf(m[r], zt_d_warp_max(fmaxf(sa, sb)));
            /* Without a window, key j0 is visible to every query of the block, so mnew is
             * finite; with one, a query may not have seen any key yet (mnew = -inf): then
             * nothing changes (corr 1, every p 0) instead of exp(-inf + inf) = NaN. */
            const bool none = mnew == -INFINITY;
            const float corr = none ? 1.0f : zt_expf_fast(m[r] - mnew);
            m[r] = mnew;
            const float pa = none ? 0.0f : zt_expf_fast(sa - mnew);
            const float pb = none ? 0.0f : zt_expf_fast(sb - mnew);
#pragma unroll
            for (int t = 0; t < DL; t++) o[r][t] *= corr;
            float lsum = 0.0f;
            for (int jj = 0; jj < nk; jj++) {
                const float pj = __shfl_sync(FULL, jj < 32 ? pa : pb, jj & 31);
                lsum += pj;
                const float pu = opnd<M16>(pj);
#pragma unroll
                for (int t = 0; t < DL; t++) {
                    const int d = lane + 32 * t;
                    if (d < hd)
                        o[r][t] = fmaf(pu, vs[jj * hd + d], o[r][t]);
                }
            }
            l[r] = l[r] * corr + lsum;
            __syncwarp(); /* qw is rewritten for the next query */
        }
    }
#pragma unroll
    for (int r = 0; r < QPW; r++) {
        const int ii = warp * QPW + r;
        if (ii >= nq)
            break;
        const size_t row = ((size_t)b * T + i0 + ii) * OW + (size_t)h * hd;
        const float inv_l = 1.0f / l[r];
#pragma unroll
        for (int t = 0; t < DL; t++) {
            const int d = lane + 32 * t;
            if (d < hd) {
                const float v = o[r][t] * inv_l;
                out[row + d] = v;
                if (out16)
                    out16[row + d] = zt_f32_to_bf16(v);
            }
        }
        if (lane == 0) /* logf as glibc's: the double log rounded once */
            lse[((size_t)b * nh + h) * T + i0 + ii] = m[r] + (float)log((double)l[r]);
    }
}

/* ---- backward: dk and dv -------------------------------------------------------------- */

template <int DL, bool M16>
__global__ void __launch_bounds__(THREADS) attn_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                                            const float *out, const float *lse, const uint16_t *kp,
                                                            const uint16_t *vp, int T, int nh, int nkv, int hd,
                                                            int window, const int *pos, float scale)
{
    extern __shared__ float sm[];
    const int hp = hd + 1;
    float *qs = sm;                  /* BLK x hp: the query block's q (lane = query) */
    float *dos = qs + BLK * hp;      /* BLK x hp: its dout */
    float *krow = dos + BLK * hp;    /* WARPS x hd: each warp's current key */
    float *vrow = krow + WARPS * hd; /* WARPS x hd: and value */
    float *Ls = vrow + WARPS * hd;   /* BLK */
    float *Ds = Ls + BLK;            /* BLK */
    const int nblk = (T + BLK - 1) / BLK;
    const int kb = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
    const int group = nh / nkv;
    const size_t W = (size_t)(nh + 2 * nkv) * hd, OW = (size_t)nh * hd;
    const int j0 = kb * BLK, nk = T - j0 < BLK ? T - j0 : BLK;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *kw = krow + warp * hd, *vw = vrow + warp * hd;

    float dk[QPW][DL], dv[QPW][DL];
#pragma unroll
    for (int r = 0; r < QPW; r++)
#pragma unroll
        for (int t = 0; t < DL; t++) dk[r][t] = 0.0f, dv[r][t] = 0.0f;

    const int qb_last = zt_attn_last_query_block(j0, nk, window, nblk, BLK);
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int qb = kb; qb <= qb_last; qb++) {
            const int i0 = qb * BLK, nq = T - i0 < BLK ? T - i0 : BLK;
            __syncthreads();
            for (int idx = threadIdx.x; idx < nq * hd; idx += THREADS) {
                const int ii = idx / hd, d = idx % hd;
                qs[ii * hp + d] = opnd<M16>(qkv[((size_t)b * T + i0 + ii) * W + (size_t)h * hd + d]);
                dos[ii * hp + d] = opnd<M16>(dout[((size_t)b * T + i0 + ii) * OW + (size_t)h * hd + d]);
            }
            if (threadIdx.x < nq) {
                const size_t row = ((size_t)b * T + i0 + threadIdx.x) * OW + (size_t)h * hd;
                Ls[threadIdx.x] = lse[((size_t)b * nh + h) * T + i0 + threadIdx.x];
                Ds[threadIdx.x] = dot_dout_out<M16>(dout + row, out + row, hd);
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < QPW; r++) {
                const int jj = warp * QPW + r;
                if (jj >= nk)
                    break;
                for (int d = lane; d < hd; d += 32) {
                    kw[d] = load_k<M16>(qkv, kp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
                    vw[d] = load_v<M16>(qkv, vp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
                }
                __syncwarp();
                /* queries ia = lane, ib = lane + 32: s = k . q and dp = v . dout */
                const int ia = lane, ib = lane + 32;
                const int j = j0 + jj;
                const bool va = ia < nq && visible(i0 + ia, j, window, pos ? pos + (size_t)b * T : nullptr), vb = ib < nq && visible(i0 + ib, j, window, pos ? pos + (size_t)b * T : nullptr);
                /* rows ia, ib < 64 of the tiles exist even past nq (their values unused) */
                const p_ds ra = score_grad(kw, qs + ia * hp, vw, dos + ia * hp, hd, Ls[ia], Ds[ia], scale, va);
                const p_ds rb = score_grad(kw, qs + ib * hp, vw, dos + ib * hp, hd, Ls[ib], Ds[ib], scale, vb);
                const float pa = ra.p, pb = rb.p, dsa = ra.ds, dsb = rb.ds;
                /* dv_j += p_ij dout_i, dk_j += (scale ds_ij) q_i over the queries that see
                 * key j: i from j (or the block's start) to j + window - 1 (or its end) */
                const int ii_lo = j - i0 > 0 ? j - i0 : 0;
                const int ii_hi = window > 0 && j + window - i0 < nq ? j + window - i0 : nq;
                for (int ii = ii_lo; ii < ii_hi; ii++) {
                    const float p = opnd<M16>(__shfl_sync(FULL, ii < 32 ? pa : pb, ii & 31));
                    const float ds = opnd<M16>(__shfl_sync(FULL, ii < 32 ? dsa : dsb, ii & 31));
#pragma unroll
                    for (int t = 0; t < DL; t++) {
                        const int d = lane + 32 * t;
                        if (d < hd) {
                            dv[r][t] = fmaf(p, dos[ii * hp + d], dv[r][t]);
                            dk[r][t] = fmaf(ds, qs[ii * hp + d], dk[r][t]);
                        }
                    }
                }
                __syncwarp();
            }
        }
    }
#pragma unroll
    for (int r = 0; r < QPW; r++) {
        const int jj = warp * QPW + r;
        if (jj >= nk)
            break;
        float *row = dqkv + ((size_t)b * T + j0 + jj) * W;
#pragma unroll
        for (int t = 0; t < DL; t++) {
            const int d = lane + 32 * t;
            if (d < hd) {
                row[(size_t)(nh + kh) * hd + d] = dk[r][t];
                row[(size_t)(nh + nkv + kh) * hd + d] = dv[r][t];
            }
        }
    }
}

/* ---- backward: dq --------------------------------------------------------------------- */

template <int DL, bool M16>
__global__ void __launch_bounds__(THREADS) attn_dq_kernel(float *dqkv, const float *dout, const float *qkv,
                                                           const float *out, const float *lse, const uint16_t *kp,
                                                           const uint16_t *vp, int T, int nh, int nkv, int hd,
                                                           int window, const int *pos, float scale)
{
    extern __shared__ float sm[];
    const int hp = hd + 1;
    float *ks = sm;                   /* BLK x hp: the key block's k (lane = key) */
    float *vs = ks + BLK * hp;        /* BLK x hp: its v */
    float *qrow = vs + BLK * hp;      /* WARPS x hd: each warp's current query */
    float *dorow = qrow + WARPS * hd; /* WARPS x hd: and its dout */
    float *Ls = dorow + WARPS * hd;   /* BLK */
    float *Ds = Ls + BLK;             /* BLK */
    const int nblk = (T + BLK - 1) / BLK;
    const int qb = nblk - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kh = h / (nh / nkv);
    const size_t W = (size_t)(nh + 2 * nkv) * hd, OW = (size_t)nh * hd;
    const int i0 = qb * BLK, nq = T - i0 < BLK ? T - i0 : BLK;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *qw = qrow + warp * hd, *gw = dorow + warp * hd;

    if (threadIdx.x < nq) {
        const size_t row = ((size_t)b * T + i0 + threadIdx.x) * OW + (size_t)h * hd;
        Ls[threadIdx.x] = lse[((size_t)b * nh + h) * T + i0 + threadIdx.x];
        Ds[threadIdx.x] = dot_dout_out<M16>(dout + row, out + row, hd);
    }
    float dq[QPW][DL];
#pragma unroll
    for (int r = 0; r < QPW; r++)
#pragma unroll
        for (int t = 0; t < DL; t++) dq[r][t] = 0.0f;

    for (int kb = first_key_block(i0, window); kb <= qb; kb++) {
        const int j0 = kb * BLK, nk = kb < qb ? BLK : nq;
        __syncthreads();
        for (int idx = threadIdx.x; idx < nk * hd; idx += THREADS) {
            const int jj = idx / hd, d = idx % hd;
            ks[jj * hp + d] = load_k<M16>(qkv, kp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
            vs[jj * hp + d] = load_v<M16>(qkv, vp, W, b, T, nh, nkv, kh, hd, j0 + jj, d);
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < QPW; r++) {
            const int ii = warp * QPW + r;
            if (ii >= nq)
                break;
            const size_t qrow_at = ((size_t)b * T + i0 + ii) * W + (size_t)h * hd;
            const size_t orow_at = ((size_t)b * T + i0 + ii) * OW + (size_t)h * hd;
            for (int d = lane; d < hd; d += 32) {
                qw[d] = opnd<M16>(qkv[qrow_at + d]);
                gw[d] = opnd<M16>(dout[orow_at + d]);
            }
            __syncwarp();
            const int ja = lane, jb = lane + 32;
            const int i = i0 + ii;
            const bool va = ja < nk && visible(i, j0 + ja, window, pos ? pos + (size_t)b * T : nullptr), vb = jb < nk && visible(i, j0 + jb, window, pos ? pos + (size_t)b * T : nullptr);
            const float L = Ls[ii], D = Ds[ii];
            const p_ds ra = score_grad(ks + ja * hp, qw, vs + ja * hp, gw, hd, L, D, scale, va);
            const p_ds rb = score_grad(ks + jb * hp, qw, vs + jb * hp, gw, hd, L, D, scale, vb);
            const float dsa = ra.ds, dsb = rb.ds;
            /* dq_i += (scale ds_ij) k_j over the keys i sees: j from i - window + 1 (or the
             * block's start) to i (or its end) */
            const int jj_lo = window > 0 && i - window + 1 - j0 > 0 ? i - window + 1 - j0 : 0;
            const int jj_hi = i - j0 + 1 < nk ? i - j0 + 1 : nk;
            for (int jj = jj_lo; jj < jj_hi; jj++) {
                const float ds = opnd<M16>(__shfl_sync(FULL, jj < 32 ? dsa : dsb, jj & 31));
#pragma unroll
                for (int t = 0; t < DL; t++) {
                    const int d = lane + 32 * t;
                    if (d < hd)
                        dq[r][t] = fmaf(ds, ks[jj * hp + d], dq[r][t]);
                }
            }
            __syncwarp();
        }
    }
#pragma unroll
    for (int r = 0; r < QPW; r++) {
        const int ii = warp * QPW + r;
        if (ii >= nq)
            break;
        float *row = dqkv + ((size_t)b * T + i0 + ii) * W + (size_t)h * hd;
#pragma unroll
        for (int t = 0; t < DL; t++) {
            const int d = lane + 32 * t;
            if (d < hd)
                row[d] = dq[r][t];
        }
    }
}

/* ---- launching ------------------------------------------------------------------------- */

static size_t fwd_smem(int hd) { return sizeof(float) * ((size_t)BLK * (hd + 1) + (size_t)BLK * hd + (size_t)WARPS * hd); }
static size_t bwd_smem(int hd)
{
    return sizeof(float) * (2 * (size_t)BLK * (hd + 1) + 2 * (size_t)WARPS * hd + 2 * (size_t)BLK);
}

static void check_shape(int B, int T, int nh, int nkv, int hd, int window)
{
    if (hd <= 0 || hd > MAX_HD || nkv <= 0 || nh % nkv != 0 || B < 0 || T < 0 || window < 0) {
        fprintf(stderr,
                "ztrain: CUDA attention: unsupported shape B=%d T=%d nh=%d nkv=%d hd=%d window=%d (hd <= %d, nkv | nh)\n",
                B, T, nh, nkv, hd, window, MAX_HD);
        abort();
    }
}

/* The pack's two halves, filled from qkv; NULL, NULL without a scratch (fp32 operands). */
static void pack(void *scratch, const float *qkv, int B, int T, int nh, int nkv, int hd, uint16_t **kp, uint16_t **vp)
{
    *kp = *vp = NULL;
    if (!scratch)
        return;
    const size_t n = (size_t)B * nkv * T * hd;
    *kp = (uint16_t *)scratch;
    *vp = *kp + n;
    pack_kv_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(*kp, *vp, qkv, B, T, nh, nkv, hd);
    ZT_CU_LAUNCHED();
}

size_t zt_cu_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd)
{
    (void)nh;
    /* the CPU's rule (backend_cpu.c): bf16 operands for the head sizes attention16.c
     * serves, fp32 for the rest, so a precision mode means the same on both devices */
    if (opd != ZT_BF16 || !zt_attention16_supported(hd))
        return 0;
    return 2 * (size_t)B * nkv * T * hd * sizeof(uint16_t);
}

template <int DL, bool M16>
static void forward_dl(float *out, uint16_t *out16, float *lse, const float *qkv, const uint16_t *kp,
                       const uint16_t *vp, int B, int T, int nh, int nkv, int hd, int window, const int *pos,
                       float scale)
{
    const size_t smem = fwd_smem(hd);
    zt_cu_allow_smem<attn_forward_kernel<DL, M16>>(smem, "attention");
    const dim3 grid((unsigned)((T + BLK - 1) / BLK), (unsigned)nh, (unsigned)B);
    attn_forward_kernel<DL, M16><<<grid, THREADS, smem, zt_cu.stream>>>(out, out16, lse, qkv, kp, vp, T, nh, nkv, hd,
                                                                        window, pos, scale);
    ZT_CU_LAUNCHED();
}

template <int DL, bool M16>
static void backward_dl(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                        const uint16_t *kp, const uint16_t *vp, int B, int T, int nh, int nkv, int hd, int window,
                        const int *pos, float scale)
{
    const size_t smem = bwd_smem(hd);
    const unsigned nblk = (unsigned)((T + BLK - 1) / BLK);
    zt_cu_allow_smem<attn_dkv_kernel<DL, M16>>(smem, "attention");
    attn_dkv_kernel<DL, M16><<<dim3(nblk, (unsigned)nkv, (unsigned)B), THREADS, smem, zt_cu.stream>>>(
        dqkv, dout, qkv, out, lse, kp, vp, T, nh, nkv, hd, window, pos, scale);
    ZT_CU_LAUNCHED();
    zt_cu_allow_smem<attn_dq_kernel<DL, M16>>(smem, "attention");
    attn_dq_kernel<DL, M16><<<dim3(nblk, (unsigned)nh, (unsigned)B), THREADS, smem, zt_cu.stream>>>(
        dqkv, dout, qkv, out, lse, kp, vp, T, nh, nkv, hd, window, pos, scale);
    ZT_CU_LAUNCHED();
}

/* hd -> the number of head-dimension elements per lane (1, 2, 4, 8), and the mode */
#define DISPATCH(FN, M16, ...)                                   \
    do {                                                         \
        if (hd <= 32) FN<1, M16>(__VA_ARGS__);                   \
        else if (hd <= 64) FN<2, M16>(__VA_ARGS__);              \
        else if (hd <= 128) FN<4, M16>(__VA_ARGS__);             \
        else FN<8, M16>(__VA_ARGS__);                            \
    } while (0)

/* The positions on the device (scratch of the backend, stream-ordered), or NULL. */
static const int *device_positions(const int *pos, int B, int T)
{
    if (!pos)
        return nullptr;
    int *dpos = (int *)zt_cu_scratch((size_t)B * T * sizeof(int));
    zt_cu_upload(dpos, pos, (size_t)B * T * sizeof(int));
    return dpos;
}

void zt_cu_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch, int B, int T,
                             int nh, int nkv, int hd, int window)
{
    zt_cu_attention_forward_pos(out, out_bf16, lse, qkv, scratch, nullptr, B, T, nh, nkv, hd, window);
}

void zt_cu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                              void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    zt_cu_attention_backward_pos(dqkv, dout, qkv, out, lse, scratch, nullptr, B, T, nh, nkv, hd, window);
}

void zt_cu_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                 const int *hpos, int B, int T, int nh, int nkv, int hd, int window)
{
    check_shape(B, T, nh, nkv, hd, window);
    if (B == 0 || T == 0)
        return;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */
    uint16_t *kp, *vp;
    pack(scratch, qkv, B, T, nh, nkv, hd, &kp, &vp);
    const int *pos = device_positions(hpos, B, T);
    if (scratch)
        DISPATCH(forward_dl, true, out, out_bf16, lse, qkv, kp, vp, B, T, nh, nkv, hd, window, pos, scale);
    else
        DISPATCH(forward_dl, false, out, out_bf16, lse, qkv, kp, vp, B, T, nh, nkv, hd, window, pos, scale);
}

void zt_cu_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                                  void *scratch, const int *hpos, int B, int T, int nh, int nkv, int hd, int window)
{
    check_shape(B, T, nh, nkv, hd, window);
    if (B == 0 || T == 0)
        return;
    const float scale = (float)(1.0 / sqrt((double)hd));
    uint16_t *kp, *vp;
    pack(scratch, qkv, B, T, nh, nkv, hd, &kp, &vp);
    const int *pos = device_positions(hpos, B, T);
    if (scratch)
        DISPATCH(backward_dl, true, dqkv, dout, qkv, out, lse, kp, vp, B, T, nh, nkv, hd, window, pos, scale);
    else
        DISPATCH(backward_dl, false, dqkv, dout, qkv, out, lse, kp, vp, B, T, nh, nkv, hd, window, pos, scale);
}
