/* optim.h — the optimizer's hyperparameters and the learning-rate schedules; the
 * AdamW step itself is a kernel (kernels/adamw.h). */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include <stddef.h>

#include "../core/status.h"
#include "../kernels/adamw.h"

typedef struct zt_adamw_hparams {
    double lr, weight_decay, beta1, beta2, eps;
} zt_adamw_hparams;

typedef enum zt_lr_schedule {
    ZT_LR_CONSTANT, ZT_LR_CONSTANT_WARMUP, ZT_LR_LINEAR, ZT_LR_COSINE, ZT_LR_COSINE_RESTARTS, ZT_LR_POLYNOMIAL,
    ZT_LR_COSINE_MIN_LR, ZT_LR_WSD, ZT_LR_INVERSE_SQRT,
    ZT_LR_NSCHEDULES
} zt_lr_schedule;

/* WSD's warmup_type and decay_type */
typedef enum zt_lr_shape { ZT_SHAPE_LINEAR, ZT_SHAPE_COSINE, ZT_SHAPE_1_SQRT } zt_lr_shape;

/* Trainer's lr_scheduler_kwargs, the keyword arguments get_scheduler passes to the
 * schedule's function; zt_lr_kwargs_defaults fills each function's own defaults. */
typedef struct zt_lr_kwargs {
    double num_cycles;   /* cosine 0.5, cosine_with_min_lr 0.5, WSD 0.5, cosine_with_restarts 1 */
    double lr_end, power; /* polynomial: 1e-7, 1.0 */
    double min_lr_rate;  /* cosine_with_min_lr (required: min_lr / lr or min_lr_rate); WSD's min_lr_ratio (0) */
    long num_decay_steps, num_stable_steps; /* WSD: the first required; the second -1 = S - w - decay */
    zt_lr_shape warmup_type, decay_type;    /* WSD: linear, cosine */
    long timescale;      /* inverse_sqrt: 0 = w, or 10000 when w is 0 */
} zt_lr_kwargs;

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
double zt_lr_value(zt_lr_schedule s, const zt_lr_kwargs *kw, double lr, long u, long S, long w);
double zt_lr_factor(zt_lr_schedule s, long u, long S, long w); /* the lr-free schedules at their defaults: value at lr 1 */
/* The three added schedules (kw: the kwargs as zt_lr_kwargs_parse leaves them; p as above,
 * a phase's own p for WSD):
 *   cosine_with_min_lr  r + (1-r)*0.5*(1+cos(2*pi*c*p)), floored at 0, r = min_lr_rate;
 *   warmup_stable_decay  warmup r + (1-r)*shape(u/max(1,w)), then 1 for the stable
 *     steps, then r + (1-r)*shape(p) over num_decay_steps (p from 0), then r;
 *   inverse_sqrt  1/sqrt((u + T - w)/T), timescale T. */
void zt_lr_kwargs_defaults(zt_lr_schedule s, zt_lr_kwargs *kw);
/* --lr_scheduler_kwargs: a JSON object of s's keyword arguments over its defaults
 * (NULL or "" or "{}": none), lr the base lr (min_lr is an absolute lr).  A key the
 * schedule's function does not take, a wrong type or range, and a required key
 * missing are ZT_EINPUT naming lr_scheduler_kwargs and the key. */
int zt_lr_kwargs_parse(const char *json, zt_lr_schedule s, double lr, zt_lr_kwargs *kw, zt_err *err);
/* The kwargs s takes, resolved, as one canonical JSON object (min_lr as the
 * min_lr_rate it gives; -1 and 0 for the defaults computed from S and w), so that a
 * checkpoint records them and a resume compares them as text: 0, or -1 when cap
 * is too small. */
int zt_lr_kwargs_format(zt_lr_schedule s, const zt_lr_kwargs *kw, char *buf, size_t cap);
int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out);
const char *zt_lr_schedule_list(void); /* "linear | cosine | ...", for help and errors */
const char *zt_lr_schedule_name(zt_lr_schedule s); /* checkpoints record and compare it */

#endif
