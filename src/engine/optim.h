/* optim.h — AdamW on one shard of a flat buffer, and the learning-rate schedules.
 *
 * AdamW follows torch.optim.AdamW exactly (SPEC §4), with step t counted from 1:
 *   p <- p * (1 - lr*wd)
 *   m <- b1*m + (1-b1)*g ;  v <- b2*v + (1-b2)*g^2
 *   p <- p - (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * Arithmetic is fp32 in torch's operation order; p, m and v are stored in the
 * master dtype, so in the bf16 memory-constrained mode every stored value is
 * rounded to bf16 after the step and small updates are lost, as under FSDP. */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include <stddef.h>

#include "../core/dtype.h"

typedef struct zt_adamw_hparams {
    double lr, weight_decay, beta1, beta2, eps;
} zt_adamw_hparams;

/* One AdamW step over n elements.  g is the gradient in the master dtype already
 * multiplied by nothing: clip_coef (<= 1) is applied here, as torch's clipping
 * scales the gradient in place before the step.  wd is 0 for norm weights. */
void zt_adamw_step_shard(void *p, void *m, void *v, const void *g, zt_dtype dt, size_t n,
                         double lr, double wd, double beta1, double beta2, double eps, long t,
                         float clip_coef);

typedef enum zt_lr_schedule {
    ZT_LR_CONSTANT, ZT_LR_CONSTANT_WARMUP, ZT_LR_LINEAR, ZT_LR_COSINE
} zt_lr_schedule;

/* Multiplier of the base lr for update u (0-based) of S with w warmup updates:
 *   constant 1; constant_with_warmup u<w ? u/w : 1;
 *   linear  u<w ? u/w : max(0, (S-u)/(S-w));
 *   cosine  u<w ? u/w : max(0, 0.5*(1+cos(pi*(u-w)/(S-w)))).  (HF's get_*_schedule_with_warmup) */
double zt_lr_factor(zt_lr_schedule s, long u, long S, long w);
int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out);
const char *zt_lr_schedule_name(zt_lr_schedule s);

#endif
