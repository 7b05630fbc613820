/* optim.h — the optimizer's hyperparameters and the learning-rate schedules; the
 * AdamW step itself is a kernel (kernels/adamw.h). */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include <stddef.h>

#include "../kernels/adamw.h"

typedef struct zt_adamw_hparams {
    double lr, weight_decay, beta1, beta2, eps;
} zt_adamw_hparams;

typedef enum zt_lr_schedule {
    ZT_LR_CONSTANT, ZT_LR_CONSTANT_WARMUP, ZT_LR_LINEAR, ZT_LR_COSINE
} zt_lr_schedule;

/* Multiplier of the base lr for update u (0-based) of S with w warmup updates:
 *   constant 1; constant_with_warmup u<w ? u/w : 1;
 *   linear  u<w ? u/w : max(0, (S-u)/(S-w));
 *   cosine  u<w ? u/w : max(0, 0.5*(1+cos(pi*(u-w)/(S-w)))).  (HF's get_*_schedule_with_warmup) */
double zt_lr_factor(zt_lr_schedule s, long u, long S, long w);
int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out);
const char *zt_lr_schedule_name(zt_lr_schedule s); /* checkpoints record and compare it */

#endif
