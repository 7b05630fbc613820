/* loss_scale.c — DeepSpeed's dynamic loss scaler (see loss_scale.h). */
#include "loss_scale.h"

#include <math.h>

void zt_loss_scaler_init(zt_loss_scaler *s, double initial_scale_power, long window, int hysteresis,
                         double min_scale)
{
    s->scale = pow(2.0, initial_scale_power);
    s->min_scale = min_scale;
    s->window = window > 0 ? window : 1;
    s->hysteresis = s->cur_hysteresis = hysteresis > 0 ? hysteresis : 1;
    s->iter = 0;
    s->last_overflow_iter = -1;
    s->skipped = 0;
}

void zt_loss_scaler_update(zt_loss_scaler *s, int overflow) { zt_loss_scaler_rule(s, overflow); }
