/* adamw.c — the AdamW step over one shard of a flat buffer (see adamw.h). */
#include "adamw.h"

#include <math.h>
#include <string.h>

/* 1 / (half an ulp of x) in a format with mb explicit mantissa bits (23 fp32,
 * 7 bf16, 10 fp16): half an ulp is 2^(E - mb - 1) for x's exponent E, so its
 * inverse is the power of two with biased exponent 254 + mb + 1 - e, built from
 * the bits (a multiply in the hot loop instead of a divide).  Near zero, where
 * that leaves the float range, it saturates at 2^127. */
static inline float inv_half_ulp(float x, int mb)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    int e = (int)((u >> 23) & 0xffu);
    int k = 254 + mb + 1 - e;
    k = k > 254 ? 254 : k;
    uint32_t r = (uint32_t)k << 23;
    float f;
    memcpy(&f, &r, 4);
    return f;
}

#define LD_F32(b, i) (((const float *)(b))[i])
#define ST_F32(b, i, x) (((float *)(b))[i] = (x))
#define LD_BF16(b, i) zt_bf16_to_f32(((const uint16_t *)(b))[i])
#define ST_BF16(b, i, x) (((uint16_t *)(b))[i] = zt_f32_to_bf16(x))
#define RN_BF16(x) zt_round_bf16(x)
#define LD_F16(b, i) zt_f16_to_f32(((const uint16_t *)(b))[i])
#define ST_F16(b, i, x) (((uint16_t *)(b))[i] = zt_f32_to_f16(x))
#define RN_F16(x) zt_round_f16(x)

/* The loop for 16-bit storage.  The arithmetic is fp32 in torch's order; p, m and v
 * are rounded to the storage dtype when stored (contract §3).  COMP (a literal 0 or 1)
 * says whether a Kahan compensation buffer is carried; the audit is counted without
 * branches (nz = 1 where the intended change is non-zero), as in the fp32 loop, so
 * that the loop vectorises: with an `if` around the audit it ran element by element,
 * about 12x slower than the fp32 loop. */
#define ADAMW_LOOP_16(LOAD, STORE, ROUND, MB, COMP)                                       \
    _Pragma("omp parallel for simd reduction(+ : updated, lost, ratio) schedule(static)") \
    for (size_t i = 0; i < n; i++) {                                                      \
        float gi = LOAD(g, i) * clip;                                                     \
        float p0 = LOAD(p, i), c0 = COMP ? LOAD(comp, i) : 0.0f;                          \
        float mi = LOAD(m, i) * b1 + gi * one_minus_b1;                                   \
        float vi = LOAD(v, i) * b2 + one_minus_b2 * gi * gi;                              \
        float denom = sqrtf(vi) / bc2_sqrt + epsf;                                        \
        float step = neg_step * (mi / denom);                                             \
        float exact = p0 + c0;                 /* what the master would hold unrounded */ \
        float target = exact * decay + step;                                              \
        float p1 = ROUND(target);                                                         \
        float c1 = COMP ? ROUND(target - p1) : 0.0f;                                      \
        float delta = exact * (decay - 1.0f) + step;                                      \
        float nz = delta != 0.0f ? 1.0f : 0.0f;                                           \
        updated += nz;                                                                    \
        lost += nz * (p1 + c1 == exact ? 1.0f : 0.0f);                                    \
        ratio += nz * fabsf(delta) * inv_half_ulp(p0 != 0.0f ? p0 : p1, MB);              \
        STORE(p, i, p1);                                                                  \
        if (COMP)                                                                         \
            STORE(comp, i, c1);                                                           \
        STORE(m, i, mi);                                                                  \
        STORE(v, i, vi);                                                                  \
    }

/* The fp32 loop; GRAD(x) is the gradient as read (x itself, or bf16(x): g_bf16),
 * CAST stores the new value p1 of element i into the cast copy. */
#define ADAMW_LOOP_F32(GRAD, CAST)                                                        \
    do {                                                                                  \
        float *restrict pp = p, *restrict mm = m, *restrict vv = v;                       \
        const float *restrict gg = g;                                                     \
        _Pragma("omp parallel for simd reduction(+ : updated, lost, ratio) schedule(static)") \
        for (size_t i = 0; i < n; i++) {                                                  \
            float gi = GRAD(gg[i]) * clip;                                                \
            float mi = mm[i] * b1 + gi * one_minus_b1;                                    \
            float vi = vv[i] * b2 + one_minus_b2 * gi * gi;                               \
            float denom = sqrtf(vi) / bc2_sqrt + epsf;                                    \
            float step = neg_step * (mi / denom);                                         \
            float p0 = pp[i];                                                             \
            float p1 = p0 * decay + step;                                                 \
            float delta = p0 * (decay - 1.0f) + step;                                     \
            float nz = delta != 0.0f ? 1.0f : 0.0f;                                       \
            updated += nz;                                                                \
            lost += nz * (p1 == p0 ? 1.0f : 0.0f);                                        \
            ratio += nz * fabsf(delta) * inv_half_ulp(p0 != 0.0f ? p0 : p1, 23);          \
            pp[i] = p1;                                                                   \
            mm[i] = mi;                                                                   \
            vv[i] = vi;                                                                   \
            CAST;                                                                         \
        }                                                                                 \
    } while (0)

/* The scalars that depend on lr and t, formed in double as Python floats are in
 * torch, then used as fp32 operands (one home: the shard's step and the inputs a
 * unit's step reads from the device). */
static void step_consts(const zt_adamw_step *s, float *decay, float *neg_step, float *bc2_sqrt)
{
    const double bc1 = 1.0 - pow(s->beta1, (double)s->t), bc2 = 1.0 - pow(s->beta2, (double)s->t);
    *decay = (float)(1.0 - s->lr * s->weight_decay);
    *neg_step = (float)(-(s->lr / bc1));
    *bc2_sqrt = (float)sqrt(bc2);
}

void zt_adamw_unit_inputs(zt_step_scalars *sc, const zt_adamw_step *s, double lr, long t)
{
    zt_adamw_step st = *s;
    st.lr = lr;
    st.t = t;
    sc->lr = lr;
    sc->t = t;
    step_consts(&st, &sc->decay, &sc->neg_step, &sc->bc2_sqrt);
}

/* The fp32 step for each cast copy's dtype, the gradient read through GRAD */
#define ADAMW_F32_CASTS(GRAD)                                                             \
    do {                                                                                  \
        if (cast && cast_dt == ZT_BF16) {                                                 \
            uint16_t *restrict cc = cast;                                                 \
            ADAMW_LOOP_F32(GRAD, cc[i] = zt_f32_to_bf16(p1));                             \
        } else if (cast && cast_dt == ZT_F16) {                                           \
            uint16_t *restrict cc = cast;                                                 \
            ADAMW_LOOP_F32(GRAD, cc[i] = zt_f32_to_f16(p1));                              \
        } else if (cast && cast_dt == ZT_F32) {                                           \
            float *restrict cc = cast;                                                    \
            ADAMW_LOOP_F32(GRAD, cc[i] = p1);                                             \
        } else {                                                                          \
            ADAMW_LOOP_F32(GRAD, (void)0);                                                \
        }                                                                                 \
    } while (0)
#define AS_READ(x) (x)

void zt_adamw_step_shard(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                         const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    /* Scalars are formed in double, as Python floats are in torch, then used as
     * fp32 operands, as torch's CPU kernels use them for fp32 tensors. */
    float decay, neg_step, bc2_sqrt;
    step_consts(s, &decay, &neg_step, &bc2_sqrt);
    const float b1 = (float)s->beta1, one_minus_b1 = (float)(1.0 - s->beta1);
    const float b2 = (float)s->beta2, one_minus_b2 = (float)(1.0 - s->beta2);
    const float epsf = (float)s->eps;
    const float clip = s->clip;
    double updated = 0.0, lost = 0.0, ratio = 0.0;
    switch (dt) {
    case ZT_F32:
        /* fp32 needs no compensation: comp is ignored.  p*decay + step is kept as one
         * expression in torch's order (mul_ then addcdiv_). */
        if (s->g_bf16) /* the reduce dtype's rounding, as the gradient is read */
            ADAMW_F32_CASTS(RN_BF16);
        else
            ADAMW_F32_CASTS(AS_READ);
        break;
    case ZT_BF16:
        if (comp) {
            ADAMW_LOOP_16(LD_BF16, ST_BF16, RN_BF16, 7, 1);
        } else {
            ADAMW_LOOP_16(LD_BF16, ST_BF16, RN_BF16, 7, 0);
        }
        break;
    case ZT_F16:
        if (comp) {
            ADAMW_LOOP_16(LD_F16, ST_F16, RN_F16, 10, 1);
        } else {
            ADAMW_LOOP_16(LD_F16, ST_F16, RN_F16, 10, 0);
        }
        break;
    }
    if (audit) {
        audit->updated += updated;
        audit->lost += lost;
        audit->ratio_sum += ratio;
    }
}

void zt_adamw_step_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                        const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                        zt_dtype cast_dt)
{
    if (sc->skip)
        return;
    /* On the host the OpenMP loop over each segment is already one pass at full
     * width; the segments differ only in their decay. */
    const size_t es = zt_dtype_size(dt), cs = cast ? zt_dtype_size(cast_dt) : 0;
    zt_adamw_audit audit = {0};
    for (int k = 0; k < nsegs; k++) {
        size_t lo = segs[k].lo, hi = k + 1 < nsegs ? segs[k + 1].lo : n;
        if (segs[k].kind < 0 || hi <= lo)
            continue;
        zt_adamw_step st = *s;
        st.lr = sc->lr; /* the step's, from the device: never the captured s's */
        st.t = sc->t;
        st.weight_decay = segs[k].kind ? s->weight_decay : 0.0;
        st.clip = sc->clip;
        zt_adamw_step_shard((char *)p + lo * es, (char *)m + lo * es, (char *)v + lo * es, (const char *)g + lo * es,
                            comp ? (char *)comp + lo * es : NULL, dt, hi - lo, &st,
                            cast ? (char *)cast + lo * cs : NULL, cast_dt, &audit);
    }
    sc->audit_updated += audit.updated;
    sc->audit_lost += audit.lost;
    sc->audit_ratio_sum += audit.ratio_sum;
}
