/* optim.c — AdamW shard step and LR schedules (see optim.h). */
#include "optim.h"

#include <math.h>
#include <string.h>

/* Load/store in the master dtype.  Both are inlined per dtype by the switch
 * outside the loop, so the fp32 path stays a plain vectorisable loop. */
#define ADAMW_LOOP(LOAD, STORE)                                                           \
    for (size_t i = 0; i < n; i++) {                                                      \
        float gi = LOAD(g, i) * clip;                                                     \
        float pi = LOAD(p, i) * decay;                                                    \
        float mi = LOAD(m, i) * b1 + gi * one_minus_b1;                                   \
        float vi = LOAD(v, i) * b2 + one_minus_b2 * gi * gi;                              \
        float denom = sqrtf(vi) / bc2_sqrt + epsf;                                        \
        pi = pi + neg_step * (mi / denom);                                                \
        STORE(p, i, pi);                                                                  \
        STORE(m, i, mi);                                                                  \
        STORE(v, i, vi);                                                                  \
    }

#define LD_F32(b, i) (((const float *)(b))[i])
#define ST_F32(b, i, x) (((float *)(b))[i] = (x))
#define LD_BF16(b, i) zt_bf16_to_f32(((const uint16_t *)(b))[i])
#define ST_BF16(b, i, x) (((uint16_t *)(b))[i] = zt_f32_to_bf16(x))
#define LD_F16(b, i) zt_f16_to_f32(((const uint16_t *)(b))[i])
#define ST_F16(b, i, x) (((uint16_t *)(b))[i] = zt_f32_to_f16(x))

void zt_adamw_step_shard(void *p, void *m, void *v, const void *g, zt_dtype dt, size_t n,
                         double lr, double wd, double beta1, double beta2, double eps, long t,
                         float clip_coef)
{
    /* Scalars are formed in double, as Python floats are in torch, then used as
     * fp32 operands, as torch's CPU kernels use them for fp32 tensors. */
    const float decay = (float)(1.0 - lr * wd);
    const float b1 = (float)beta1, one_minus_b1 = (float)(1.0 - beta1);
    const float b2 = (float)beta2, one_minus_b2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    const float neg_step = (float)(-(lr / bc1));
    const float bc2_sqrt = (float)sqrt(bc2);
    const float epsf = (float)eps;
    const float clip = clip_coef;
    switch (dt) {
    case ZT_F32: {
        float *restrict pp = p, *restrict mm = m, *restrict vv = v;
        const float *restrict gg = g;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float gi = gg[i] * clip;
            float mi = mm[i] * b1 + gi * one_minus_b1;
            float vi = vv[i] * b2 + one_minus_b2 * gi * gi;
            float denom = sqrtf(vi) / bc2_sqrt + epsf;
            pp[i] = pp[i] * decay + neg_step * (mi / denom);
            mm[i] = mi;
            vv[i] = vi;
        }
        break;
    }
    case ZT_BF16:
        ADAMW_LOOP(LD_BF16, ST_BF16);
        break;
    case ZT_F16:
        ADAMW_LOOP(LD_F16, ST_F16);
        break;
    }
}

double zt_lr_factor(zt_lr_schedule s, long u, long S, long w)
{
    if (s == ZT_LR_CONSTANT)
        return 1.0;
    if (u < w)
        return (double)u / (double)(w > 0 ? w : 1);
    switch (s) {
    case ZT_LR_CONSTANT_WARMUP:
        return 1.0;
    case ZT_LR_LINEAR: {
        double f = (double)(S - u) / (double)(S - w > 1 ? S - w : 1);
        return f > 0.0 ? f : 0.0;
    }
    case ZT_LR_COSINE: {
        double progress = (double)(u - w) / (double)(S - w > 1 ? S - w : 1);
        double f = 0.5 * (1.0 + cos(M_PI * progress));
        return f > 0.0 ? f : 0.0;
    }
    default:
        return 1.0;
    }
}

static const char *schedule_names[] = {"constant", "constant_with_warmup", "linear", "cosine"};

int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, schedule_names[i])) {
            *out = (zt_lr_schedule)i;
            return 0;
        }
    return -1;
}

const char *zt_lr_schedule_name(zt_lr_schedule s) { return schedule_names[s]; }
