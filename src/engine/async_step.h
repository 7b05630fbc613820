/* async_step.h — the engine's asynchronous step, every step without an offloaded
 * optimizer: fast mode queues it and reads it later, exact mode reads it at once;
 * with one, its verdict (zt_async_verdict) before the host's AdamW (kernels/backend.h, zt_kernel_mode; docs/gpu.md, "The asynchronous step").
 * Internal to src/engine: engine.c (the scalars' life: init, zero) and step.c (the
 * step) call it, and it calls only step_rules.c.
 *
 * A step judged on the host reads a number back from the device for every unit's
 * sum of squares, for every parameter's AdamW audit and for every micro-batch's
 * loss; on a GPU each is a wait for the stream.  Here those numbers stay on the
 * device in one zt_step_scalars (kernels/step_scalars.h):
 *   - the backward's cross-entropy adds each micro-batch's loss sum into it
 *     (zt_engine_loss_sink), and each unit's sum of squares (of bf16(grad) where the
 *     one-rank bf16 reduce's rounding is pending: sumsq_bf16_into) goes into a device
 *     array;
 *   - the step sums the units' squares and judges the step there (skip on an inf
 *     or NaN; the clipping coefficient): step_verdict;
 *   - AdamW runs once per unit over its flat shard (adamw_unit), reading the verdict
 *     there and adding its audit there;
 *   - and the host reads the struct back once: the step's only wait on one rank.
 *     The step ends by copying the struct aside on the device (done) and queuing its
 *     download (ready), so the host may queue the next step's forward and backward
 *     before it waits for these numbers (zt_engine_step_queue / _finish: running
 *     ahead across steps).
 * Several ranks of a shard group must agree on the norm and the verdict before
 * AdamW: each rank judges its own units (mine), their sums of squares are added
 * over the group on the device (zt_comm_sum_doubles: on NCCL the host never sees
 * them; the staged path copies the one double down and up) and the step is judged
 * again from the group's sum.  Which unit was bad, a report only, is agreed over
 * the world by the host at the finish, on a skipped step. */
#ifndef ZT_ASYNC_STEP_H
#define ZT_ASYNC_STEP_H

#include "engine_impl.h"

typedef struct zt_async {
    zt_step_scalars *sc;        /* the step's scalars (device) */
    zt_step_scalars *mine;      /* a shard group of several: this rank's own verdict (device, sc + 1) */
    zt_step_scalars *done;      /* [2 * ZT_STEP_SLOTS]: each queued step's sc and mine, copied aside
                                 * into its slot (device): the next step zeroes and refills sc while
                                 * their download may still run */
    zt_step_scalars *ready;     /* [2 * ZT_STEP_SLOTS]: their downloads (host_alloc: page-locked on
                                 * a GPU), one slot per place in the ring, read at the finish */
    const zt_step_scalars *cur; /* the slot the last finished step was read from */
    zt_step_input *sched;       /* the schedule on the device (zt_engine_set_schedule), NULL before */
    long sched_len;
    double *unit_sumsq;         /* each unit's sum of squares this step (device, nunits) */
    zt_adamw_seg **segs;        /* per unit, its shard's segments (device), for adamw_unit */
    int *nsegs;
    double loss_sum;            /* the last step's, as read back */
    zt_step_scalars in;         /* the step's inputs as the host forms them (zt_async_inputs) */
    int ls_seeded;              /* fp16: the device holds the loss scale (zt_engine_seed_loss_scale) */
} zt_async;

/* Set up the step's device scalars and each unit's segment table (one upload each,
 * at init).  After the units' buffers exist. */
/* The plan's asynchronous step (fast mode; zt_overlap's async_step): the loss sink,
 * the device's loss scaler and schedule, running ahead.  Exact mode holds the same
 * scalars for the same verdict and AdamW, and reads them back at once. */
static inline int zt_async_fast(const zt_engine *eng) { return eng->async && eng->overlap.async_step; }

int zt_async_init(zt_engine *eng, zt_err *err);
void zt_async_free(zt_engine *eng);
/* A new step: its scalars to zero (on the device's queue, no wait). */
void zt_async_zero(zt_engine *eng);
/* The step's inputs into the device's scalars: lr and t (the count this step makes
 * if applied) with what AdamW forms from them, one upload, no wait. */
void zt_async_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr);
/* The step's launches, nothing read back, nothing waited for on one rank (a captured
 * step is these, with the gathered copies' refresh after them: step.c): the units'
 * squares, the verdict, AdamW per unit. */
void zt_async_queue(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                    double grad_unscale);
/* The verdict alone, read back at once (the offloaded step's, whose AdamW is the
 * host's): the units' squares and the verdict queued, then one read; the norm and
 * the clipping coefficient AdamW multiplies the gradient by; returns the skip (a
 * skipped step's bad unit agreed over the world, its audit zero). */
int zt_async_verdict(zt_engine *eng, double max_grad_norm, double grad_unscale, double *grad_norm, float *clip);
/* The step's numbers copied aside into slot `slot` (sc -> done) and their download
 * (done -> ready) queued, no wait; outside a capture (the CUDA table's copy has a
 * stream of its own, and the slot changes from step to step). */
void zt_async_readback(zt_engine *eng, int slot);
/* A queued step's numbers from slot `slot`: the wait for every download queued so
 * far when `wait` (one wait reads every step in flight), then the engine's counts
 * from them (the loss, the norm, the skip, the audit, the optimizer step count);
 * returns the skip. */
int zt_async_finish(zt_engine *eng, int slot, int wait, double *grad_norm);

/* engine.c: what every step does first (drain, reduce, the phase and dtype checks) */
void zt_engine_step_prelude(zt_engine *eng);

#endif
