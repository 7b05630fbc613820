/* optim.c — learning-rate schedules (see optim.h; the AdamW step is kernels/adamw.c). */
#include "optim.h"

#include <math.h>
#include <string.h>

double zt_lr_value(zt_lr_schedule s, double lr, long u, long S, long w)
{
    if (s == ZT_LR_CONSTANT)
        return lr;
    if (u < w)
        return lr * (double)u / (double)(w > 0 ? w : 1);
    double span = (double)(S - w > 1 ? S - w : 1), progress = (double)(u - w) / span;
    switch (s) {
    case ZT_LR_CONSTANT_WARMUP:
        return lr;
    case ZT_LR_LINEAR: {
        double f = (double)(S - u) / span;
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_COSINE: {
        double f = 0.5 * (1.0 + cos(M_PI * progress));
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_COSINE_RESTARTS: {
        /* each of the c cycles decays from lr to 0 and restarts at lr ("hard"
         * restarts); after the last one the lr stays 0 */
        if (progress >= 1.0)
            return 0.0;
        double f = 0.5 * (1.0 + cos(M_PI * fmod(ZT_LR_RESTART_CYCLES * progress, 1.0)));
        return lr * (f > 0.0 ? f : 0.0);
    }
    case ZT_LR_POLYNOMIAL: {
        /* from lr down to lr_end over S-w updates, then lr_end; lr_end is an
         * absolute lr, so this schedule alone depends on the base lr */
        if (u > S)
            return ZT_LR_POLY_END;
        double remaining = 1.0 - (double)(u - w) / (double)(S - w > 0 ? S - w : 1);
        return (lr - ZT_LR_POLY_END) * pow(remaining, ZT_LR_POLY_POWER) + ZT_LR_POLY_END;
    }
    default:
        return lr;
    }
}

double zt_lr_factor(zt_lr_schedule s, long u, long S, long w) { return zt_lr_value(s, 1.0, u, S, w); }

static const char *schedule_names[ZT_LR_NSCHEDULES] = {"constant", "constant_with_warmup", "linear", "cosine",
                                                       "cosine_with_restarts", "polynomial"};

int zt_lr_schedule_parse(const char *s, zt_lr_schedule *out)
{
    for (int i = 0; i < ZT_LR_NSCHEDULES; i++)
        if (!strcmp(s, schedule_names[i])) {
            *out = (zt_lr_schedule)i;
            return 0;
        }
    return -1;
}

const char *zt_lr_schedule_name(zt_lr_schedule s) { return schedule_names[s]; }

const char *zt_lr_schedule_list(void)
{
    return "linear | cosine | cosine_with_restarts | polynomial | constant | constant_with_warmup";
}
