/* optim.c — learning-rate schedules (see optim.h; the AdamW step is kernels/adamw.c). */
#include "optim.h"

#include <math.h>
#include <string.h>

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
