/* adamw.cu — AdamW over one shard of a flat buffer on the device (adamw.h).
 *
 * The arithmetic is adamw.c's, operation for operation: the scalars are formed in
 * double on the host exactly as there and used as fp32 operands; the per-element
 * expressions are the same fp32 expressions (no fma contraction: --fmad=false; sqrtf
 * and the division are IEEE), so p, m, v, the Kahan compensation and the cast copy
 * are the CPU's bits.  The lost-update audit counts the same events; its three sums
 * are taken in double per thread, per block and over the blocks in a fixed order, so
 * `updated` and `lost` (integers below 2^53) are exact and ratio_sum differs from the
 * CPU's only in the order of double additions.
 *
 * The asynchronous step's form (adamw_unit) is the same kernel over a unit's whole
 * shard in one launch: a block looks up once which segment its chunk of elements lies
 * in (a binary search over the unit's few dozen segments) for the weight decay, and
 * only a chunk that straddles two segments looks each element up; the clipping
 * coefficient and the skip flag are read from the device's step scalars, and the
 * audit's block sums are added to them there.  A thread takes 16 bytes of each array
 * at once (4 fp32 or 8 16-bit elements) with one vector load and store where every
 * array is 16-byte aligned.  Element for element it is the same arithmetic, so p, m,
 * v, comp and the cast copy are the bits of one launch per parameter.  With g_bf16
 * (fp32 storage) each gradient is rounded to bf16 as it is loaded: the engine's
 * one-rank bf16 reduce leaves that rounding to this pass (engine.c). */
#include "entries.cuh"

typedef struct adamw_consts {
    float decay, b1, one_minus_b1, b2, one_minus_b2, neg_step, bc2_sqrt, epsf, clip;
    bool g_bf16; /* fp32 storage: g read as bf16(g) (adamw.h, zt_adamw_step's g_bf16) */
} adamw_consts;

/* 1 / (half an ulp of x) with mb explicit mantissa bits (adamw.c's inv_half_ulp) */
__device__ __forceinline__ float inv_half_ulp(float x, int mb)
{
    const uint32_t u = __float_as_uint(x);
    int e = (int)((u >> 23) & 0xffu);
    int k = 254 + mb + 1 - e;
    k = k > 254 ? 254 : k;
    return __uint_as_float((uint32_t)k << 23);
}

/* the segment of element i: the last k with segs[k].lo <= i (segs[0].lo is 0) */
__device__ __forceinline__ int segment_of(const zt_adamw_seg *segs, int nsegs, size_t i)
{
    int lo = 0, hi = nsegs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (segs[mid].lo <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* A thread takes W consecutive elements, 16 bytes of the storage dtype; a block takes
 * blockDim.x * W of them, a chunk.  A chunk inside one segment has one kind, looked up
 * once by the block; one that straddles segments (STRADDLE) looks each element up and
 * goes one element at a time, so a gap's elements are never written. */
template <zt_dtype DT>
struct adamw_width {
    static constexpr int W = DT == ZT_F32 ? 4 : 8;
};
enum { STRADDLE = 2 }; /* beside the kinds -1 (gap), 0 (no decay), 1 (decay) */

/* cnt elements of buf (dtype T) from i as floats: one 16-byte load when vec (then cnt
 * is W and buf + i is 16-byte aligned), else one at a time */
template <zt_dtype T, int W>
__device__ __forceinline__ void vec_load(const void *buf, size_t i, int cnt, bool vec, float *x)
{
    if (vec && T == ZT_F32 && W == 4) {
        const float4 q = *(const float4 *)((const float *)buf + i);
        x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
    } else if (vec && T != ZT_F32 && W == 8) {
        const uint4 q = *(const uint4 *)((const uint16_t *)buf + i);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            /* little-endian: the lower address in the low half */
            const uint16_t lo = (uint16_t)(w[k] & 0xffffu), hi = (uint16_t)(w[k] >> 16);
            x[2 * k] = T == ZT_BF16 ? zt_bf16_to_f32(lo) : zt_f16_to_f32(lo);
            x[2 * k + 1] = T == ZT_BF16 ? zt_bf16_to_f32(hi) : zt_f16_to_f32(hi);
        }
    } else {
        for (int k = 0; k < cnt; k++) x[k] = zt_d_load(buf, T, i + k);
    }
}

/* x into buf (dtype T) from i, rounded as zt_d_store rounds: one store of W elements
 * when vec (4 16-bit values, a cast copy's, as two 32-bit words), else the elements
 * with on[k] one at a time */
template <zt_dtype T, int W>
__device__ __forceinline__ void vec_store(void *buf, size_t i, int cnt, bool vec, const bool *on, const float *x)
{
    if (vec && T == ZT_F32 && W == 4) {
        float4 q;
        q.x = x[0], q.y = x[1], q.z = x[2], q.w = x[3];
        *(float4 *)((float *)buf + i) = q;
    } else if (vec && T != ZT_F32) {
        uint32_t w[W / 2];
#pragma unroll
        for (int k = 0; k < W / 2; k++) {
            const uint32_t lo = T == ZT_BF16 ? zt_f32_to_bf16(x[2 * k]) : zt_f32_to_f16(x[2 * k]);
            const uint32_t hi = T == ZT_BF16 ? zt_f32_to_bf16(x[2 * k + 1]) : zt_f32_to_f16(x[2 * k + 1]);
            w[k] = lo | hi << 16;
        }
        uint32_t *d = (uint32_t *)((uint16_t *)buf + i);
        if (W == 8) {
            uint4 q;
            q.x = w[0], q.y = w[1 % (W / 2)], q.z = w[2 % (W / 2)], q.w = w[3 % (W / 2)];
            *(uint4 *)d = q;
        } else {
#pragma unroll
            for (int k = 0; k < W / 2; k++) d[k] = w[k];
        }
    } else {
        for (int k = 0; k < cnt; k++)
            if (on[k])
                zt_d_store(buf, T, i + k, x[k]);
    }
}

/* what a launch works on; cast is used for fp32 storage only */
typedef struct adamw_bufs {
    void *p, *m, *v;
    const void *g;
    void *comp, *cast;
} adamw_bufs;

/* the scalars that come from the device's step scalars in the unit form */
typedef struct adamw_run {
    float clip, decay, neg_step, bc2_sqrt;
} adamw_run;

typedef struct adamw_tally {
    double updated, lost, ratio;
} adamw_tally;

/* The update of elements i0 .. i0+cnt-1 (adamw.c's expressions, element by element);
 * dec[k] their decay factor, on[k] false for a gap's element (not touched). */
template <zt_dtype DT, bool COMP, int CAST>
__device__ __forceinline__ void adamw_group(const adamw_bufs &b, size_t i0, int cnt, bool vec, const bool *on,
                                            const float *dec, const adamw_consts &c, const adamw_run &r,
                                            adamw_tally &t)
{
    constexpr int W = adamw_width<DT>::W;
    constexpr zt_dtype CT = CAST == ZT_BF16 ? ZT_BF16 : CAST == ZT_F16 ? ZT_F16 : ZT_F32;
    const int mb = DT == ZT_F32 ? 23 : DT == ZT_BF16 ? 7 : 10;
    float p[W], m[W], v[W], g[W], cp[W];
    vec_load<DT, W>(b.p, i0, cnt, vec, p);
    vec_load<DT, W>(b.m, i0, cnt, vec, m);
    vec_load<DT, W>(b.v, i0, cnt, vec, v);
    vec_load<DT, W>(b.g, i0, cnt, vec, g);
    if (DT == ZT_F32 && c.g_bf16) /* the reduce dtype's rounding, left to this read */
        for (int k = 0; k < cnt; k++) g[k] = zt_round_bf16(g[k]);
    if (COMP)
        vec_load<DT, W>(b.comp, i0, cnt, vec, cp);
    for (int k = 0; k < cnt; k++) {
        if (!on[k])
            continue;
        const float gi = g[k] * r.clip, decay = dec[k];
        const float mi = m[k] * c.b1 + gi * c.one_minus_b1;
        const float vi = v[k] * c.b2 + c.one_minus_b2 * gi * gi;
        const float denom = sqrtf(vi) / r.bc2_sqrt + c.epsf;
        const float step = r.neg_step * (mi / denom);
        const float p0 = p[k];
        float p1, delta, nz;
        if (DT == ZT_F32) {
            p1 = p0 * decay + step;
            delta = p0 * (decay - 1.0f) + step;
            nz = delta != 0.0f ? 1.0f : 0.0f;
            t.lost += nz * (p1 == p0 ? 1.0f : 0.0f);
        } else {
            const float exact = p0 + (COMP ? cp[k] : 0.0f); /* what the master would hold unrounded */
            const float target = exact * decay + step;
            /* ROUND(x): the value the storage dtype keeps */
            p1 = DT == ZT_BF16 ? zt_round_bf16(target) : zt_f16_to_f32(zt_f32_to_f16(target));
            float c1 = 0.0f;
            if (COMP) {
                const float rr = target - p1;
                c1 = DT == ZT_BF16 ? zt_round_bf16(rr) : zt_f16_to_f32(zt_f32_to_f16(rr));
            }
            delta = exact * (decay - 1.0f) + step;
            nz = delta != 0.0f ? 1.0f : 0.0f;
            t.lost += nz * (p1 + c1 == exact ? 1.0f : 0.0f);
            cp[k] = c1;
        }
        t.updated += nz;
        t.ratio += nz * fabsf(delta) * inv_half_ulp(p0 != 0.0f ? p0 : p1, mb); /* adamw.h: a zero p0 */
        p[k] = p1, m[k] = mi, v[k] = vi;
    }
    if (DT == ZT_F32 && CAST >= 0)
        vec_store<CT, W>(b.cast, i0, cnt, vec, on, p);
    vec_store<DT, W>(b.p, i0, cnt, vec, on, p);
    if (COMP)
        vec_store<DT, W>(b.comp, i0, cnt, vec, on, cp);
    vec_store<DT, W>(b.m, i0, cnt, vec, on, m);
    vec_store<DT, W>(b.v, i0, cnt, vec, on, v);
}

/* One step over the shard; DT the storage dtype, COMP whether a Kahan buffer is
 * carried (16-bit only), CAST the cast copy's dtype (fp32 storage only; -1: none).
 * partials (NULL: no audit) receives each block's (updated, lost, ratio).
 * UNIT: the asynchronous step's launch over a unit (segs, sc); otherwise segs and sc
 * are NULL and c holds the decay and clip of the one parameter.  The loop runs over
 * chunks, the same count for every thread of a block, so its barriers are uniform. */
template <zt_dtype DT, bool COMP, int CAST>
__global__ void adamw_kernel(adamw_bufs b, size_t n, adamw_consts c, double *partials, const zt_adamw_seg *segs,
                             int nsegs, const zt_step_scalars *sc)
{
    constexpr int W = adamw_width<DT>::W;
    __shared__ double sh[32];
    __shared__ int chunk_kind;
    const bool unit = sc != NULL;
    adamw_tally t = {0.0, 0.0, 0.0};
    /* the unit's step takes lr and t's scalars from the device (its inputs, formed on
     * the host as consts_of does): a captured step replays with each step's own */
    const adamw_run r = unit ? adamw_run{sc->clip, sc->decay, sc->neg_step, sc->bc2_sqrt}
                             : adamw_run{c.clip, c.decay, c.neg_step, c.bc2_sqrt};
    if (unit && sc->skip)
        n = 0; /* a non-finite gradient: nothing changes, the audit adds zeros */
    const uintptr_t addr = (uintptr_t)b.p | (uintptr_t)b.m | (uintptr_t)b.v | (uintptr_t)b.g |
                           (COMP ? (uintptr_t)b.comp : 0) | (CAST >= 0 ? (uintptr_t)b.cast : 0);
    const bool aligned = (addr & 15u) == 0;
    const size_t chunk = (size_t)blockDim.x * W;
    for (size_t base = blockIdx.x * chunk; base < n; base += (size_t)gridDim.x * chunk) {
        int kind = 1;
        if (unit) {
            if (threadIdx.x == 0) {
                const size_t last = (base + chunk < n ? base + chunk : n) - 1;
                const int s = segment_of(segs, nsegs, base);
                chunk_kind = s + 1 < nsegs && segs[s + 1].lo <= last ? STRADDLE : segs[s].kind;
            }
            __syncthreads();
            kind = chunk_kind;
        }
        const size_t i0 = base + (size_t)threadIdx.x * W;
        if (i0 < n && kind >= 0) {
            const int cnt = n - i0 < (size_t)W ? (int)(n - i0) : W;
            bool on[W];
            float dec[W];
            for (int k = 0; k < W; k++) {
                const int kk = kind == STRADDLE && k < cnt ? segs[segment_of(segs, nsegs, i0 + k)].kind : kind;
                on[k] = k < cnt && kk >= 0;
                dec[k] = unit && kk == 0 ? 1.0f : r.decay; /* (float)(1 - lr * 0) */
            }
            const bool vec = aligned && cnt == W && kind != STRADDLE;
            adamw_group<DT, COMP, CAST>(b, i0, cnt, vec, on, dec, c, r, t);
        }
        if (unit)
            __syncthreads(); /* chunk_kind is read before thread 0 writes the next */
    }
    if (partials) {
        t.updated = zt_d_block_sum(t.updated, sh);
        t.lost = zt_d_block_sum(t.lost, sh);
        t.ratio = zt_d_block_sum(t.ratio, sh);
        if (threadIdx.x == 0) {
            partials[blockIdx.x] = t.updated;
            partials[gridDim.x + blockIdx.x] = t.lost;
            partials[2 * gridDim.x + blockIdx.x] = t.ratio;
        }
    }
}

/* the unit form's extra arguments (all NULL / 0 for one parameter) */
typedef struct unit_args {
    const zt_adamw_seg *segs;
    int nsegs;
    const zt_step_scalars *sc;
} unit_args;

template <zt_dtype DT, bool COMP, int CAST>
static void launch(unsigned nb, const adamw_bufs &b, size_t n, const adamw_consts &c, double *partials,
                   const unit_args &u)
{
    adamw_kernel<DT, COMP, CAST><<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(b, n, c, partials, u.segs, u.nsegs, u.sc);
    ZT_CU_LAUNCHED();
}

/* the grid: a thread per 16 bytes of the storage dtype, capped as every grid is */
static unsigned blocks_of(zt_dtype dt, size_t n)
{
    const size_t w = dt == ZT_F32 ? 4 : 8;
    return zt_cu_blocks((n + w - 1) / w);
}

/* adamw.c's scalars: formed in double, as Python floats are in torch, used as fp32 */
static adamw_consts consts_of(const zt_adamw_step *s)
{
    adamw_consts c;
    c.decay = (float)(1.0 - s->lr * s->weight_decay);
    c.b1 = (float)s->beta1, c.one_minus_b1 = (float)(1.0 - s->beta1);
    c.b2 = (float)s->beta2, c.one_minus_b2 = (float)(1.0 - s->beta2);
    const double bc1 = 1.0 - pow(s->beta1, (double)s->t), bc2 = 1.0 - pow(s->beta2, (double)s->t);
    c.neg_step = (float)(-(s->lr / bc1));
    c.bc2_sqrt = (float)sqrt(bc2);
    c.epsf = (float)s->eps;
    c.clip = s->clip;
    c.g_bf16 = s->g_bf16 != 0;
    return c;
}

/* the launch for dt, comp and cast; partials NULL: no audit */
static void dispatch(unsigned nb, const adamw_bufs &b, zt_dtype dt, size_t n, const adamw_consts &c,
                     zt_dtype cast_dt, double *partials, const unit_args &u)
{
    switch (dt) {
    case ZT_F32:
        /* fp32 needs no compensation: comp is ignored */
        if (!b.cast)
            launch<ZT_F32, false, -1>(nb, b, n, c, partials, u);
        else if (cast_dt == ZT_BF16)
            launch<ZT_F32, false, ZT_BF16>(nb, b, n, c, partials, u);
        else if (cast_dt == ZT_F16)
            launch<ZT_F32, false, ZT_F16>(nb, b, n, c, partials, u);
        else
            launch<ZT_F32, false, ZT_F32>(nb, b, n, c, partials, u);
        break;
    case ZT_BF16:
        if (b.comp)
            launch<ZT_BF16, true, -1>(nb, b, n, c, partials, u);
        else
            launch<ZT_BF16, false, -1>(nb, b, n, c, partials, u);
        break;
    case ZT_F16:
        if (b.comp)
            launch<ZT_F16, true, -1>(nb, b, n, c, partials, u);
        else
            launch<ZT_F16, false, -1>(nb, b, n, c, partials, u);
        break;
    }
}

void zt_cu_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                      const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    if (n == 0)
        return;
    const adamw_consts c = consts_of(s);
    const unsigned nb = blocks_of(dt, n);
    /* three rows of nb partials: updated, lost, ratio */
    double *partials = audit ? (double *)zt_cu_scratch(3 * (size_t)nb * sizeof(double)) : NULL;
    /* fp32 storage carries no compensation, 16-bit storage no cast copy */
    const adamw_bufs b = {p, m, v, g, dt == ZT_F32 ? NULL : comp, dt == ZT_F32 ? cast : NULL};
    dispatch(nb, b, dt, n, c, cast_dt, partials, unit_args{NULL, 0, NULL});
    if (audit) {
        audit->updated += zt_cu_sum_doubles(partials, (int)nb);
        audit->lost += zt_cu_sum_doubles(partials + nb, (int)nb);
        audit->ratio_sum += zt_cu_sum_doubles(partials + 2 * (size_t)nb, (int)nb);
    }
}

void zt_cu_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                      const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                      zt_dtype cast_dt)
{
    if (n == 0 || nsegs <= 0)
        return;
    const adamw_consts c = consts_of(s); /* the betas and eps; lr, t and clip come from sc */
    const unsigned nb = blocks_of(dt, n);
    double *partials = (double *)zt_cu_scratch(3 * (size_t)nb * sizeof(double));
    const adamw_bufs b = {p, m, v, g, dt == ZT_F32 ? NULL : comp, dt == ZT_F32 ? cast : NULL};
    dispatch(nb, b, dt, n, c, cast_dt, partials, unit_args{segs, nsegs, sc});
    /* the audit's three rows into the three consecutive doubles of sc: one more launch */
    static_assert(offsetof(zt_step_scalars, audit_lost) - offsetof(zt_step_scalars, audit_updated) == 8 &&
                      offsetof(zt_step_scalars, audit_ratio_sum) - offsetof(zt_step_scalars, audit_lost) == 8,
                  "the audit's sums are consecutive doubles");
    zt_cu_sum_rows_into(&sc->audit_updated, partials, (int)nb, 3, 1);
}
