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
 * shard in one launch: each element finds its segment (a binary search over the
 * unit's few dozen segments) for its weight decay, the clipping coefficient and the
 * skip flag are read from the device's step scalars, and the audit's block sums are
 * added to them there.  Element for element it is the same arithmetic, so p, m, v,
 * comp and the cast copy are the bits of one launch per parameter. */
#include "entries.cuh"

typedef struct adamw_consts {
    float decay, b1, one_minus_b1, b2, one_minus_b2, neg_step, bc2_sqrt, epsf, clip;
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

/* One step over the shard; DT the storage dtype, COMP whether a Kahan buffer is
 * carried (16-bit only), CAST the cast copy's dtype (fp32 storage only; -1: none).
 * partials (NULL: no audit) receives each block's (updated, lost, ratio). */
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

/* UNIT: the asynchronous step's launch over a unit (segs, sc); otherwise segs and sc
 * are NULL and c holds the decay and clip of the one parameter */
template <zt_dtype DT, bool COMP, int CAST, bool UNIT>
__global__ void adamw_kernel(void *p, void *m, void *v, const void *g, void *comp, size_t n, adamw_consts c,
                             void *cast, double *partials, const zt_adamw_seg *segs, int nsegs,
                             const zt_step_scalars *sc)
{
    __shared__ double sh[32];
    double updated = 0.0, lost = 0.0, ratio = 0.0;
    const int mb = DT == ZT_F32 ? 23 : DT == ZT_BF16 ? 7 : 10;
    const float clip = UNIT ? sc->clip : c.clip;
    /* the unit's step takes lr and t's scalars from the device (its inputs, formed on
     * the host as consts_of does): a captured step replays with each step's own */
    const float kdecay = UNIT ? sc->decay : c.decay, neg_step = UNIT ? sc->neg_step : c.neg_step;
    const float bc2_sqrt = UNIT ? sc->bc2_sqrt : c.bc2_sqrt;
    if (UNIT && sc->skip)
        n = 0; /* a non-finite gradient: nothing changes, the audit adds zeros */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float decay = kdecay;
        if (UNIT) {
            const int kind = segs[segment_of(segs, nsegs, i)].kind;
            if (kind < 0)
                continue;
            decay = kind ? kdecay : 1.0f; /* (float)(1 - lr * 0) */
        }
        const float gi = zt_d_load(g, DT, i) * clip;
        const float mi = zt_d_load(m, DT, i) * c.b1 + gi * c.one_minus_b1;
        const float vi = zt_d_load(v, DT, i) * c.b2 + c.one_minus_b2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + c.epsf;
        const float step = neg_step * (mi / denom);
        const float p0 = zt_d_load(p, DT, i);
        float p1, delta, nz;
        if (DT == ZT_F32) {
            p1 = p0 * decay + step;
            delta = p0 * (decay - 1.0f) + step;
            nz = delta != 0.0f ? 1.0f : 0.0f;
            lost += nz * (p1 == p0 ? 1.0f : 0.0f);
            if (CAST == ZT_BF16)
                ((uint16_t *)cast)[i] = zt_f32_to_bf16(p1);
            else if (CAST == ZT_F16)
                ((uint16_t *)cast)[i] = zt_f32_to_f16(p1);
            else if (CAST == ZT_F32)
                ((float *)cast)[i] = p1;
            ((float *)p)[i] = p1;
        } else {
            const float c0 = COMP ? zt_d_load(comp, DT, i) : 0.0f;
            const float exact = p0 + c0; /* what the master would hold unrounded */
            const float target = exact * decay + step;
            /* ROUND(x): the value the storage dtype keeps */
            p1 = DT == ZT_BF16 ? zt_round_bf16(target) : zt_f16_to_f32(zt_f32_to_f16(target));
            float c1 = 0.0f;
            if (COMP) {
                const float r = target - p1;
                c1 = DT == ZT_BF16 ? zt_round_bf16(r) : zt_f16_to_f32(zt_f32_to_f16(r));
            }
            delta = exact * (decay - 1.0f) + step;
            nz = delta != 0.0f ? 1.0f : 0.0f;
            lost += nz * (p1 + c1 == exact ? 1.0f : 0.0f);
            zt_d_store(p, DT, i, p1);
            if (COMP)
                zt_d_store(comp, DT, i, c1);
        }
        updated += nz;
        ratio += nz * fabsf(delta) * inv_half_ulp(p0 != 0.0f ? p0 : p1, mb); /* adamw.h: a zero p0 */
        zt_d_store(m, DT, i, mi);
        zt_d_store(v, DT, i, vi);
    }
    if (partials) {
        updated = zt_d_block_sum(updated, sh);
        lost = zt_d_block_sum(lost, sh);
        ratio = zt_d_block_sum(ratio, sh);
        if (threadIdx.x == 0) {
            partials[blockIdx.x] = updated;
            partials[gridDim.x + blockIdx.x] = lost;
            partials[2 * gridDim.x + blockIdx.x] = ratio;
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
static void launch(unsigned nb, void *p, void *m, void *v, const void *g, void *comp, size_t n, const adamw_consts &c,
                   void *cast, double *partials, const unit_args &u)
{
    if (u.sc)
        adamw_kernel<DT, COMP, CAST, true><<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(p, m, v, g, comp, n, c, cast,
                                                                                   partials, u.segs, u.nsegs, u.sc);
    else
        adamw_kernel<DT, COMP, CAST, false><<<nb, ZT_CU_THREADS, 0, zt_cu.stream>>>(
            p, m, v, g, comp, n, c, cast, partials, (const zt_adamw_seg *)NULL, 0, (const zt_step_scalars *)NULL);
    ZT_CU_LAUNCHED();
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
    return c;
}

/* the launch for dt, comp and cast; partials NULL: no audit */
static void dispatch(unsigned nb, void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                     const adamw_consts &c, void *cast, zt_dtype cast_dt, double *partials, const unit_args &u)
{
    switch (dt) {
    case ZT_F32:
        /* fp32 needs no compensation: comp is ignored */
        if (!cast)
            launch<ZT_F32, false, -1>(nb, p, m, v, g, NULL, n, c, NULL, partials, u);
        else if (cast_dt == ZT_BF16)
            launch<ZT_F32, false, ZT_BF16>(nb, p, m, v, g, NULL, n, c, cast, partials, u);
        else if (cast_dt == ZT_F16)
            launch<ZT_F32, false, ZT_F16>(nb, p, m, v, g, NULL, n, c, cast, partials, u);
        else
            launch<ZT_F32, false, ZT_F32>(nb, p, m, v, g, NULL, n, c, cast, partials, u);
        break;
    case ZT_BF16:
        if (comp)
            launch<ZT_BF16, true, -1>(nb, p, m, v, g, comp, n, c, NULL, partials, u);
        else
            launch<ZT_BF16, false, -1>(nb, p, m, v, g, NULL, n, c, NULL, partials, u);
        break;
    case ZT_F16:
        if (comp)
            launch<ZT_F16, true, -1>(nb, p, m, v, g, comp, n, c, NULL, partials, u);
        else
            launch<ZT_F16, false, -1>(nb, p, m, v, g, NULL, n, c, NULL, partials, u);
        break;
    }
}

void zt_cu_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                      const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    if (n == 0)
        return;
    const adamw_consts c = consts_of(s);
    const unsigned nb = zt_cu_blocks(n);
    /* three rows of nb partials: updated, lost, ratio */
    double *partials = audit ? (double *)zt_cu_scratch(3 * (size_t)nb * sizeof(double)) : NULL;
    dispatch(nb, p, m, v, g, comp, dt, n, c, cast, cast_dt, partials, unit_args{NULL, 0, NULL});
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
    const unsigned nb = zt_cu_blocks(n);
    double *partials = (double *)zt_cu_scratch(3 * (size_t)nb * sizeof(double));
    dispatch(nb, p, m, v, g, comp, dt, n, c, cast, cast_dt, partials, unit_args{segs, nsegs, sc});
    /* the audit's three rows into the three consecutive doubles of sc: one more launch */
    static_assert(offsetof(zt_step_scalars, audit_lost) - offsetof(zt_step_scalars, audit_updated) == 8 &&
                      offsetof(zt_step_scalars, audit_ratio_sum) - offsetof(zt_step_scalars, audit_lost) == 8,
                  "the audit's sums are consecutive doubles");
    zt_cu_sum_rows_into(&sc->audit_updated, partials, (int)nb, 3, 1);
}
