/* step_scalars.h — the optimizer step's scalars where the device keeps them: the
 * fast mode's asynchronous step (docs/gpu.md, "The asynchronous step").
 *
 * In exact mode every entry that yields a number (a loss, a sum of squares, the
 * AdamW audit) returns it to the host, which on a GPU means waiting for the device
 * inside the step, several hundred times a step.  The fast mode's entries instead
 * leave their numbers in one small struct in device memory: the loss and the units'
 * sums of squares accumulate there, the verdict (skip on an inf or NaN, the clipping
 * coefficient) is computed there from them, AdamW reads the verdict there and adds
 * its audit there, and the host reads the struct once, at the end of the step.
 *
 * The rules below (clipping, the non-finite verdict) are the engine's in both
 * modes, written once for the host and the device (ZT_HD). */
#ifndef ZT_STEP_SCALARS_H
#define ZT_STEP_SCALARS_H

#include <math.h>
#include <stddef.h>

#include "../core/hostdev.h"

/* DeepSpeed's dynamic loss scaler (engine/loss_scale.h states the rule and its
 * defaults): the state, and the update after each step, here so that the fast
 * mode's verdict can apply it on the device (zt_step_judge) with the host's
 * arithmetic, and the exact step's host update calls the same function. */
typedef struct zt_loss_scaler {
    double scale, min_scale;
    long window;
    int hysteresis;          /* DeepSpeed's delayed_shift */
    int cur_hysteresis;
    long iter, last_overflow_iter;
    long skipped;            /* steps skipped so far */
} zt_loss_scaler;

/* After a step: an overflow halves the scale (not below min_scale) once the
 * hysteresis budget is down to 1, else spends one of it; `window` steps without
 * one since the last double the scale and restore the budget (DeepSpeed's default,
 * consecutive_hysteresis off: the budget comes back only when the scale grows). */
ZT_HD static inline void zt_loss_scaler_rule(zt_loss_scaler *s, int overflow)
{
    if (overflow) {
        if (s->hysteresis == 1 || s->cur_hysteresis == 1)
            s->scale = fmax(s->scale / 2.0, s->min_scale);
        else
            s->cur_hysteresis--;
        s->last_overflow_iter = s->iter;
        s->skipped++;
    } else if ((s->iter - s->last_overflow_iter) % s->window == 0) {
        s->cur_hysteresis = s->hysteresis;
        s->scale *= 2.0;
    }
    s->iter++;
}

/* One step's inputs in the schedule on the device (zt_step_scalars.sched): what
 * zt_adamw_unit_inputs forms for the learning rate of the step that makes t = i + 1
 * applied updates (entry i), with adamw.c's expressions and roundings. */
typedef struct zt_step_input {
    double lr;
    float decay, neg_step, bc2_sqrt;
} zt_step_input;

typedef struct zt_step_scalars {
    double loss_sum;        /* the step's summed token losses (xent_into adds each micro-batch's) */
    double sumsq;           /* the squared gradient norm before unscaling: the units' sums, in unit order */
    double audit_updated, audit_lost, audit_ratio_sum; /* the lost-update audit (adamw.h), added by adamw_unit */
    float norm;             /* sqrt(sumsq) * grad_unscale, as fp32: the pre-clip global norm */
    float clip;             /* what AdamW multiplies the gradient by (zt_clip_coef) */
    int first_bad;          /* the lowest unit whose sum of squares is not finite, -1 none */
    int skip;               /* 1: an inf or NaN in the gradient: AdamW changes nothing */
    /* The step's inputs, from here on: written by the host once per step before
     * adamw_unit runs (one upload, zt_adamw_unit_inputs), never zeroed with the
     * numbers above (ZT_STEP_OUTPUT_BYTES), so that a captured step replays with
     * each step's own learning rate and t instead of the ones it was captured with.
     * decay, neg_step and bc2_sqrt are what adamw.c forms from them in double and
     * uses as fp32 (1 - lr*wd, -lr/(1 - beta1^t), sqrt(1 - beta2^t)), so the device
     * needs no pow of its own. */
    double lr;
    long t;
    float decay, neg_step, bc2_sqrt;
    /* fp16's loss scale on the device (ls_on 1), from here on: seeded by the host
     * once (zt_engine_seed_loss_scale), then updated by the verdict after every step
     * with that step's skip (zt_step_judge), never by the step's upload of its inputs
     * nor zeroed with its numbers.  ls_used is the scale the step ran at, the one
     * the verdict divides out (read back with the step: the host's record). */
    zt_loss_scaler ls;
    double ls_used;
    int ls_on;
    /* The passes' input, from here on: the count of targets the step's loss is the
     * mean over (all B A W T, or a loss mask's completion tokens), uploaded before
     * each step's micro-batches (zt_engine_step_count: inside a captured step's
     * passes, from the token set's own host memory), so the backward forms its
     * gradient scale here (zt_step_grad_scale) and a replay reads each step's own.
     * Neither the step's inputs above nor the seeding of the scale touch it. */
    double count;
    /* The learning-rate schedule on the device, from here on (zt_engine_set_schedule;
     * docs/gpu.md, "Running ahead"): sched[i] holds the inputs of the step that finds
     * i updates applied before it, for i < sched_len, and applied counts the updates
     * the verdicts have let through.  The verdict of a step takes its inputs from
     * sched[applied] and then advances applied unless it skips: the host's rule (the
     * schedule counts applied steps) decided where the skip is known, so that a step
     * queued before the host has read the one before still gets the learning rate and
     * t the host would have given it.  sched NULL: the host uploads the inputs. */
    const zt_step_input *sched;
    long sched_len;
    long applied;
} zt_step_scalars;

/* The cross-entropy's gradient scale: the gradient of the mean loss over `count`
 * targets times fp16's loss scale (1 without one), the trainer's expression:
 * 1/count rounded to fp32 first, then times the scale in double, rounded to fp32
 * once more.  The exact step passes it to the backward as an argument; fast mode's
 * backward forms it where its kernel runs from the step scalars (below), so a step
 * queued before the previous step's readback (running ahead) or replayed from a
 * graph takes the scale the device holds then and its own count, with these bits. */
ZT_HD static inline float zt_grad_scale(double count, double loss_scale)
{
    const float inv = (float)(1.0 / count);
    return (float)((double)inv * loss_scale);
}

/* The same from the device's scalars: the step's count and the scale it runs at
 * (the verdict before it has updated ls; the step's own verdict records it in
 * ls_used). */
ZT_HD static inline float zt_step_grad_scale(const zt_step_scalars *s)
{
    return zt_grad_scale(s->count, s->ls_on ? s->ls.scale : 1.0);
}

/* The bytes of the struct a new step zeroes: the numbers it makes, not its inputs. */
#define ZT_STEP_SCHED_BYTES (sizeof(zt_step_scalars) - offsetof(zt_step_scalars, sched))
#define ZT_STEP_OUTPUT_BYTES offsetof(zt_step_scalars, lr)
/* The step's inputs uploaded each step: from lr up to the device's loss scale. */
#define ZT_STEP_INPUT_BYTES (offsetof(zt_step_scalars, ls) - ZT_STEP_OUTPUT_BYTES)
/* The device's loss scaler, which the host seeds once: from ls up to count. */
#define ZT_STEP_LS_BYTES (offsetof(zt_step_scalars, count) - offsetof(zt_step_scalars, ls))

/* One run of a unit's shard for the AdamW launch over the whole shard: elements
 * [lo, next segment's lo) (the last: to the shard's end) are a parameter with
 * weight decay (kind 1), one without (kind 0), or no parameter at all (kind -1:
 * padding or another rank's slice of a parameter, left untouched).  Sorted by lo,
 * the first at 0. */
typedef struct zt_adamw_seg {
    size_t lo;
    int kind;
} zt_adamw_seg;

/* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when
 * below 1 (max_grad_norm 0: no clipping); a loss scale's 1/scale is folded in, so
 * AdamW scales the stored gradient once. */
ZT_HD static inline float zt_clip_coef(float norm, double max_grad_norm, double grad_unscale)
{
    float clip = 1.0f;
    if (max_grad_norm > 0.0) {
        float coef = (float)max_grad_norm / (norm + 1e-6f);
        if (coef < 1.0f)
            clip = coef;
    }
    if (grad_unscale != 1.0)
        clip = (float)(clip * grad_unscale);
    return clip;
}

/* With the schedule on the device: the judged step's inputs from sched[applied]
 * (t = applied + 1, as the host's optimizer_steps + 1), and applied advanced unless
 * the step skips.  An index past the table (never, while the table covers max_steps)
 * keeps the last entry rather than read outside it. */
ZT_HD static inline void zt_step_take_input(zt_step_scalars *s)
{
    long i = s->applied < s->sched_len ? s->applied : s->sched_len - 1;
    const zt_step_input *in = &s->sched[i];
    s->lr = in->lr;
    s->t = i + 1;
    s->decay = in->decay;
    s->neg_step = in->neg_step;
    s->bc2_sqrt = in->bc2_sqrt;
    if (!s->skip)
        s->applied++;
}

/* The verdict from the global sum of squares and the lowest non-finite unit
 * (-1: none): skip when the gradient held an inf or NaN, else the norm and the
 * clipping coefficient.  With the loss scale on the device (ls_on), the step
 * divides out the device's scale, 1 / scale as the host forms it (grad_unscale
 * is ignored), and the scaler takes the step's overflow: an fp16 skip. */
ZT_HD static inline void zt_step_judge(zt_step_scalars *s, double sumsq, int first_bad, double max_grad_norm,
                                       double grad_unscale)
{
    if (s->ls_on) {
        s->ls_used = s->ls.scale;
        grad_unscale = 1.0 / s->ls.scale;
    }
    s->sumsq = sumsq;
    s->first_bad = first_bad;
    s->skip = first_bad >= 0 || !isfinite(sumsq);
    s->norm = (float)(sqrt(sumsq) * grad_unscale);
    s->clip = s->skip ? 0.0f : zt_clip_coef(s->norm, max_grad_norm, grad_unscale);
    if (s->ls_on)
        zt_loss_scaler_rule(&s->ls, s->skip);
    if (s->sched)
        zt_step_take_input(s);
}

/* One rank's verdict from its units' sums of squares, summed in unit order. */
ZT_HD static inline void zt_step_verdict(zt_step_scalars *s, const double *unit_sumsq, int nunits,
                                         double max_grad_norm, double grad_unscale)
{
    double sumsq = 0.0;
    int bad = -1;
    for (int u = 0; u < nunits; u++) {
        if (!isfinite(unit_sumsq[u]) && bad < 0)
            bad = u;
        sumsq += unit_sumsq[u];
    }
    zt_step_judge(s, sumsq, bad, max_grad_norm, grad_unscale);
}

#endif
