/* adamw.h — AdamW on one shard of a flat buffer (a backend kernel, backend.h).
 *
 * AdamW follows torch.optim.AdamW exactly (contract §4), with step t counted from 1:
 *   p <- p * (1 - lr*wd)
 *   m <- b1*m + (1-b1)*g ;  v <- b2*v + (1-b2)*g^2
 *   p <- p - (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * Arithmetic is fp32 in torch's operation order; p, m and v are stored in the
 * master dtype, so in the bf16 memory-constrained mode every stored value is
 * rounded to bf16 after the step and small updates are lost, as under FSDP. */
#ifndef ZT_ADAMW_H
#define ZT_ADAMW_H

#include <stddef.h>

#include "../core/dtype.h"
#include "step_scalars.h"

/* One step's scalars: lr and weight decay for this parameter group, Adam's betas
 * and eps, the step count t (from 1) and the clipping coefficient (<= 1), which
 * scales the gradient as torch's in-place clipping does before the step.  g_bf16
 * (fp32 storage only; ignored for 16-bit): each g is read as bf16(g), the rounding
 * to a bf16 reduce dtype that the engine left to this pass instead of a pass of its
 * own (engine.c, "rounding pending"); the step is then the bits of one over the
 * rounded gradient. */
typedef struct zt_adamw_step {
    double lr, weight_decay, beta1, beta2, eps;
    long t;
    float clip;
    int g_bf16;
} zt_adamw_step;

/* The lost-update audit: of the elements whose intended change
 * delta = -lr*wd*p - step*m/denom was non-zero (`updated`), how many kept their
 * stored value (`lost`: the change was rounded away), and the sum over updated
 * elements of |delta| / (half an ulp of p in the storage dtype) (`ratio_sum`):
 * below 1 on average, most updates cannot land.  A weight at exactly zero (LoRA's B
 * at its first step) is measured against half an ulp of its new value instead: half an
 * ulp of zero is the smallest subnormal, which made one such element outweigh every
 * other (a ratio of 1e33); an update from zero always lands, and this way it counts as
 * 2^(mb+1) to 2^(mb+2) half-ulps (mb the storage dtype's mantissa bits), what an update
 * the size of the weight counts. */
typedef struct zt_adamw_audit {
    double updated, lost, ratio_sum;
} zt_adamw_audit;

/* One AdamW step over n elements of p, m, v, g (all in dt).  comp, when not NULL,
 * is a Kahan compensation buffer in dt holding what rounding p to dt dropped so
 * far: the step applies to p + comp and the new rounding error goes back into
 * comp, so a bf16 master accumulates updates far below its ulp (2 more bytes
 * per parameter).  cast, when not NULL and dt is fp32, receives the new p
 * converted to cast_dt (the compute copy, written in the same pass instead of a
 * second pass over the master); it is ignored for a 16-bit dt.  audit (may be
 * NULL) is added to. */
void zt_adamw_step_shard(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                         const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit);

/* The same step over a unit's whole shard of n elements, for the asynchronous step
 * (backend.h, adamw_unit): each segment's elements take s->weight_decay (kind 1),
 * none (kind 0) or are left alone (kind -1); the learning rate and t are sc->lr and
 * sc->t (s->lr and s->t are not read: a captured step reads each step's from the
 * device), the clipping coefficient is sc->clip, nothing happens when sc->skip, and
 * the audit is added to sc's.  Element for
 * element the arithmetic is zt_adamw_step_shard's, so p, m, v, comp and cast are
 * the bits a call per parameter gives. */
void zt_adamw_step_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                        const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                        zt_dtype cast_dt);

/* The step's inputs in sc (step_scalars.h) for lr and t: sc->lr, sc->t and the fp32
 * scalars adamw_step forms from them with s's weight decay and betas, by the very
 * expressions zt_adamw_step_shard uses.  The host fills them and uploads them. */
void zt_adamw_unit_inputs(zt_step_scalars *sc, const zt_adamw_step *s, double lr, long t);

#endif
