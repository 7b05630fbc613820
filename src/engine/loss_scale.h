/* loss_scale.h — dynamic loss scaling for fp16 compute, with DeepSpeed's rules
 * (deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler, contract §3).
 *
 * The loss is multiplied by `scale` before backward, so small fp16 gradients do
 * not flush to zero; gradients are divided by it before clipping and the step.
 * After every step:
 *   overflow (an inf or NaN in any rank's gradient): the step is skipped on every
 *     rank; if the hysteresis budget is down to 1 the scale halves (not below
 *     min_scale), otherwise the budget drops by one;
 *   no overflow: when (iteration - last overflow iteration) is a multiple of
 *     `window`, the scale doubles and the hysteresis budget is restored.
 * Defaults: scale 2^16, window 1000, hysteresis 2, min_scale 1. */
#ifndef ZT_LOSS_SCALE_H
#define ZT_LOSS_SCALE_H

/* the state and the rule: kernels/step_scalars.h (zt_loss_scaler_rule), shared
 * with the fast mode's verdict on the device */
#include "../kernels/step_scalars.h"

void zt_loss_scaler_init(zt_loss_scaler *s, double initial_scale_power, long window, int hysteresis,
                         double min_scale);
/* Record the outcome of one step (after its overflow check). */
void zt_loss_scaler_update(zt_loss_scaler *s, int overflow);

#endif
