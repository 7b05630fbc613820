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
    ZT_LR_CONSTANT, ZT_LR_CONSTANT_WARMUP, ZT_LR_LINEAR, ZT_LR_COSINE, ZT_LR_COSINE_RESTARTS, ZT_LR_POLYNOMIAL,
    ZT_LR_NSCHEDULES
} zt_lr_schedule;

/* transformers' defaults for the schedules that take more than (S, w): Trainer
 * passes no lr_scheduler_kwargs, so get_scheduler uses the functions' own. */
#define ZT_LR_RESTART_CYCLES 1.0 /* get_cosine_with_hard_restarts_schedule_with_warmup's num_cycles */
#define ZT_LR_POLY_END 1e-7      /* get_polynomial_decay_schedule_with_warmup's lr_end */
#define ZT_LR_POLY_POWER 1.0     /* and its power */

/* Multiplier of the base lr for update u (0-based) of S with w warmup updates;
 * every schedule but constant warms up as u<w ? u/max(1,w), then with
 * p = (u-w)/max(1,S-w) (HF's get_*_schedule_with_warmup):
 *   constant 1; constant_with_warmup 1;
 *   linear  max(0, (S-u)/max(1,S-w));
 *   cosine  max(0, 0.5*(1+cos(pi*p)));
 *   cosine_with_restarts  p>=1 ? 0 : max(0, 0.5*(1+cos(pi*((c*p) mod 1)))), c cycles;
 *   polynomial  u>S ? e/lr : ((lr-e)*(1-p)^k + e)/lr, with lr_end e and power k.
 * Only polynomial depends on the base lr; zt_lr_factor is zt_lr_value/lr. */
double zt_lr_value(zt_lr_schedule s, double lr, long u, long S, long w);
double zt_lr_factor(zt_lr_schedule s, long u, long S, long w); /* the lr-free schedules: value at lr 1 */
int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out);
const char *zt_lr_schedule_list(void); /* "linear | cosine | ...", for help and errors */
const char *zt_lr_schedule_name(zt_lr_schedule s); /* checkpoints record and compare it */

#endif
