/* precision.h — the precision plan: which dtype each role of a parameter byte
 * has, when collectives overlap compute, and the loss scaling that fp16 needs
 * (contract §1-§3, docs/precision.md).  Its one home: the plan resolves it
 * (zt_precision_resolve), the engine allocates and checks buffers by it, the
 * model computes in its compute dtype, and zt_plan_print shows it as a table.
 *
 * The two backends' rules:
 *   FSDP      master = load dtype when mixed_precision is no, else fp32
 *             (Accelerate's upcast); compute = mixed_precision dtype, else master
 *   DeepSpeed master and optimizer state always fp32; compute bf16/fp16 when
 *             enabled, else fp32
 *   plain data parallel: FSDP's rules
 * and for both: reduce = compute unless overridden, save = load, a Kahan
 * compensation only for a 16-bit master, an fp16 master refused (it would step
 * without loss scaling), dynamic loss scaling exactly when compute is fp16.
 * Below the plan, the model keeps the inputs of its matrix products in bf16 when
 * compute is bf16 and in fp32 otherwise (llama.h's operand dtype): a storage
 * format of the kernels, derived from the compute dtype, not a choice made here. */
#ifndef ZT_PLAN_PRECISION_H
#define ZT_PLAN_PRECISION_H

#include <stddef.h>

#include "../core/dtype.h"
#include "../core/status.h"

typedef struct zt_precision {
    zt_dtype load;     /* torch_dtype: weights are rounded to it when loaded */
    zt_dtype master;   /* flat params, gradient accumulation and optimizer state */
    zt_dtype compute;  /* gathered params and matrix-product inputs */
    zt_dtype reduce;   /* gradient reduction */
    zt_dtype save;     /* dtype of the saved model */
    int compensated;   /* Kahan-compensated 16-bit master (optim.h); ignored for an fp32 master */
} zt_precision;

/* Every role in one dtype (fp32 training, or a plain bf16 model). */
#define ZT_PRECISION_ALL(dt) \
    ((zt_precision){.load = (dt), .master = (dt), .compute = (dt), .reduce = (dt), .save = (dt)})

/* When collectives overlap computation (contract §2, Prefetch).  FSDP's and
 * DeepSpeed's settings resolve to these in plan.c.
 *   forward_prefetch   stage 3: when a unit is gathered in forward, start the
 *                      next unit's all-gather (FSDP forward_prefetch)
 *   backward_prefetch  stage 3: start the all-gather of the unit the backward
 *                      needs next before computing this unit's gradient (PRE) or
 *                      after it (POST); the forward's last unit stays gathered
 *                      for nothing in either case: it is gathered again
 *   overlap_reduce     stages 2-3: a unit's reduce-scatter runs while the previous
 *                      unit's backward computes (FSDP always; DeepSpeed
 *                      overlap_comm); off, it finishes inside grad_end.
 *                      Stage 0 on several ranks: in the backward that ends the
 *                      step's accumulation (zt_engine_sync_backward), a unit's
 *                      all-reduce starts when its gradient is complete (DDP's
 *                      buckets, FSDP NO_SHARD); off, all units reduce at the step
 * The limits below (DeepSpeed's and FSDP's knobs, counted in parameters; 0: no
 * limit) decide how much moves at once and what stays gathered:
 *   prefetch_depth     stage 3: units gathered ahead of use at most (FSDP's
 *                      limit_all_gathers, its default: 1, the next unit; without
 *                      it, as many as the gather pool holds, ZT_PREFETCH_MAX)
 *   prefetch_bucket    stage 3: the units gathered ahead hold at most this many
 *                      parameters, the next unit always allowed (DeepSpeed's
 *                      stage3_prefetch_bucket_size; 0 with prefetch on: depth 1)
 *   max_live           stage 3: parameters gathered at once, the unit in use and
 *                      the prefetched ones; a prefetch that would pass it waits
 *                      (stage3_max_live_parameters)
 *   persistence        stage 3: units of fewer parameters stay gathered from one
 *                      step to the next, refreshed after each optimizer step like
 *                      stage 2's (stage3_param_persistence_threshold)
 *   reduce_bucket      stages 1-3: a gradient is reduce-scattered in pieces of at
 *                      most this many elements, each finished before the next
 *                      (reduce_bucket_size): smaller communication buffers, more calls
 *   allgather_bucket   stages 1-2: updated parameters are all-gathered in pieces of
 *                      at most this many elements (allgather_bucket_size)
 * At most one reduce-scatter is in flight at a time.  The numbers do not depend on
 * any of this: the same sums run over the same values in the same order, only at
 * other times, in other pieces, or from other buffers. */
typedef enum zt_backward_prefetch {
    ZT_BACKWARD_PREFETCH_NONE, ZT_BACKWARD_PREFETCH_PRE, ZT_BACKWARD_PREFETCH_POST
} zt_backward_prefetch;

#define ZT_PREFETCH_MAX 6 /* units gathered ahead at most (the pool holds 2 more) */

typedef struct zt_overlap {
    int forward_prefetch;
    zt_backward_prefetch backward_prefetch;
    int overlap_reduce;
    int prefetch_depth;     /* 0 means 1 */
    long prefetch_bucket, max_live, persistence, reduce_bucket, allgather_bucket;
    /* Where the sharded state lives (docs/zero.md, Offload): 1 puts each rank's master
     * shard, m, v and Kahan buffers in page-locked host memory and runs AdamW on the
     * host's cores (offload_optimizer), or the stage 3 parameter shard with them
     * (offload_param, fsdp_offload_params: the master shard is the parameter shard).
     * The plan sets them only on a device whose buffers are not host memory; on the
     * CPU everything already lives on the host and they stay 0. */
    int offload_optimizer, offload_params;
    /* DeepSpeed's delayed parameter update (--offload_delayed_update): the host's
     * AdamW of step k runs beside step k+1's forward and backward, which use the
     * parameters of update k-1 (engine/offload.c).  Only with offload_optimizer. */
    int offload_delayed_update;
    /* The plan's step (plan.h, zt_plan_step): 1 the asynchronous step (engine/async_step.h),
     * which the engine then takes; never with offload_optimizer (its AdamW is the host's). */
    int async_step;
} zt_overlap;

const char *zt_backward_prefetch_name(zt_backward_prefetch p);

/* Dynamic loss scaling (fp16 compute), DeepSpeed's parameters. */
typedef struct zt_loss_scaling {
    int on;
    double initial_scale_power, min_scale; /* 16, 1 */
    long window;                           /* 1000 */
    int hysteresis;                        /* 2 */
} zt_loss_scaling;

/* What the user asked for, as names; NULL means the backend's default. */
typedef struct zt_precision_request {
    int deepspeed;                   /* DeepSpeed's rules (else FSDP's) */
    const char *torch_dtype;         /* load dtype name or "auto"; NULL: float32 */
    zt_dtype config_dtype;           /* config.json's torch_dtype, for "auto" */
    const char *mixed_precision;     /* "no", "bf16", "fp16"; NULL: no */
    const char *reduce_dtype;        /* override */
    const char *master_compensation; /* "none" or "kahan" */
    /* a DeepSpeed JSON's fp16 block; < 0 (or 0 for the last three): DeepSpeed's default */
    double ls_initial_scale_power, ls_window, ls_hysteresis, ls_min_scale;
} zt_precision_request;

/* The dtypes, whether mixed precision is on, and the loss scaling.  Bad names and
 * impossible combinations are ZT_EINPUT naming the setting. */
int zt_precision_resolve(const zt_precision_request *r, zt_precision *prec, int *mixed,
                         zt_loss_scaling *ls, zt_err *err);

/* The mode in the docs' words: "fp32", "FSDP aligned", "FSDP memory-constrained",
 * "DeepSpeed", "... + Kahan". */
void zt_precision_mode(const zt_precision *prec, int fsdp, int deepspeed, char *buf, size_t cap);

#endif
