/* deepspeed.h — DeepSpeed JSON config (contract §6), read strictly, "auto" resolved as Accelerate does.
 *
 * Two steps, as in Accelerate + DeepSpeed:
 *   zt_ds_config_read     the file into a zt_ds_config: every setting is the file's value,
 *                         "auto", or absent; nothing is filled in yet.
 *   zt_ds_config_resolve  "auto" filled from the run (per-device batch, accumulation,
 *                         world, hidden size, optimizer and schedule arguments), absent
 *                         settings given DeepSpeed's defaults, the batch numbers derived
 *                         and checked as DeepSpeed checks them, and the optimizer and
 *                         scheduler blocks mapped to ztrain's AdamW and schedules.
 *
 * Promise: a file that reads without error means one thing.  Every key is known (an
 * unknown one is refused with the closest known name), every value has its type and
 * range, contradictions between keys are refused, and the keys DeepSpeed configs
 * commonly carry that do not change the arithmetic (logging, bucketing flags, pinned
 * memory) are checked and ignored.  JSON null means absent, as DeepSpeed reads None.
 * Every failure is ZT_EINPUT with "FILE: KEY.PATH: what was wrong (allowed: ...)".
 *
 * What ztrain does not do is refused by name rather than approximated: NVMe offload,
 * optimizers other than Adam/AdamW (and Adam with adam_w_mode false), schedules other
 * than WarmupLR / WarmupDecayLR / WarmupCosineLR, a warmup that starts above 0, a cosine
 * floor above 0, warmup_type "log".  Two DeepSpeed defaults are read as ztrain's
 * schedules have it: an absent warmup_type (DeepSpeed's is log) warms up linearly, and
 * an absent cos_min_ratio (DeepSpeed's is 1e-4) decays to 0. */
#ifndef ZT_CONFIG_DEEPSPEED_H
#define ZT_CONFIG_DEEPSPEED_H

#include "../core/schema.h"
#include "../core/status.h"

/* A setting that may be a number or "auto": set 0 absent; set 1 and is_auto 1 "auto";
 * set 1 and is_auto 0 the number num. */
typedef struct zt_ds_value {
    int is_auto;
    int set;
    double num;
} zt_ds_value;

typedef struct zt_ds_config {
    char path[512];                   /* the file read, for messages */
    zt_ds_value train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps,
        gradient_clipping;            /* batch sizes whole numbers >= 1, clipping >= 0 */
    zt_setting bf16_enabled, fp16_enabled; /* ZT_AUTO: the run's mixed_precision decides,
                                       * which the plan resolves */
    double fp16_initial_scale_power, fp16_loss_scale_window, fp16_hysteresis, fp16_min_loss_scale,
        fp16_loss_scale;              /* as written; < 0 absent.  loss_scale 0 is dynamic. */
    char communication_data_type[8];  /* "" absent, fp32, bf16, fp16 */

    /* zero_optimization */
    int stage;                        /* 0..3; -1 absent (DeepSpeed's default is 0) */
    zt_setting overlap_comm, contiguous_gradients;
    zt_ds_value reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size,
        stage3_param_persistence_threshold, stage3_max_live_parameters; /* whole numbers >= 0 */
    zt_setting stage3_gather_16bit_weights_on_model_save; /* "auto" reads as Accelerate's
                                                    * false */
    char offload_optimizer_device[8], offload_param_device[8]; /* "", none, cpu */

    /* optimizer */
    char optimizer_type[16];          /* "" (no block: the run's own optimizer), AdamW, Adam.
                                       * Adam runs as AdamW: DeepSpeed's adam_w_mode default */
    zt_ds_value lr, weight_decay, eps, beta1, beta2; /* betas "auto" sets both is_auto */

    /* scheduler */
    char scheduler_type[24];          /* "", WarmupLR, WarmupDecayLR, WarmupCosineLR */
    zt_ds_value warmup_num_steps, total_num_steps, warmup_min_lr, warmup_max_lr;

    int activation_checkpointing;     /* the section is given: gradient checkpointing on */
} zt_ds_config;

/* Every setting absent, path "". */
void zt_ds_config_init(zt_ds_config *c);

/* Read the DeepSpeed JSON config at path into *c.  Returns ZT_OK, ZT_EINPUT
 * (unreadable, malformed, unknown key, wrong type, out of range, contradiction) or
 * ZT_EFAIL (out of memory); on failure *c is left unchanged. */
int zt_ds_config_read(const char *path, zt_ds_config *c, zt_err *err);
/* The same from len bytes of text already in memory; name stands for the file in
 * messages. */
int zt_ds_config_parse(const char *name, const void *text, size_t len, zt_ds_config *c, zt_err *err);

/* What the run says, for "auto".  A field the run does not know: micro_batch <= 0,
 * grad_accum <= 0 (then 1, Accelerate's default), hidden_size <= 0, max_grad_norm < 0
 * (then 1.0), total_steps <= 0, warmup_steps < 0 (then 0).  An "auto" that needs an
 * unknown field is an error naming the key. */
typedef struct zt_ds_run {
    int micro_batch, grad_accum, world, hidden_size;
    int allow_unresolved;             /* 1: an "auto" that needs the unknown hidden size is
                                       * left unresolved (-1 in zt_ds_resolved) instead of
                                       * refused: `config show/validate` without a model */
    double lr, weight_decay, beta1, beta2, eps, max_grad_norm;
    long warmup_steps, total_steps;
} zt_ds_run;

/* TrainingArguments' defaults (per-device batch 8, accumulation 1, lr 5e-5, weight
 * decay 0, betas 0.9/0.999, eps 1e-8, max_grad_norm 1.0, no warmup), world 1, hidden
 * size and total steps unknown. */
void zt_ds_run_init(zt_ds_run *run);

typedef struct zt_ds_resolved {
    int micro_batch, grad_accum, train_batch_size; /* micro * accum * world == train_batch_size */
    double gradient_clipping;         /* 0: no clipping (DeepSpeed's default when absent) */
    long reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size,
        stage3_param_persistence_threshold, stage3_max_live_parameters; /* numel; -1: "auto"
                                       * left unresolved (zt_ds_run.allow_unresolved) */
    double lr, weight_decay, beta1, beta2, eps; /* the AdamW ztrain runs */
    long warmup_steps, total_steps;
    char schedule[24];                /* ztrain's schedule name (constant_with_warmup, linear,
                                       * cosine); "" without a scheduler block: the run's own */
} zt_ds_resolved;

/* Resolve c for the run, as Accelerate fills "auto" and DeepSpeed then completes and
 * checks the config:
 *   train_micro_batch_size_per_gpu  auto: the run's per-device batch
 *   gradient_accumulation_steps     auto: the run's
 *   train_batch_size                auto: micro * accumulation * world
 *     then, as DeepSpeed, the missing ones derived (tbs and micro: accumulation =
 *     tbs / (micro * world); tbs and accumulation: micro = tbs / (world * accumulation);
 *     tbs alone: accumulation 1; micro alone or with accumulation: tbs the product),
 *     each division exact, and tbs == micro * accumulation * world checked;
 *   gradient_clipping               auto: the run's max_grad_norm; absent: 0 (none)
 *   reduce_bucket_size              auto: H*H
 *   stage3_prefetch_bucket_size     auto: int(0.9*H*H)
 *   stage3_param_persistence_threshold auto: 10*H
 *   bucket sizes absent: DeepSpeed's defaults (5e8, 5e8, 5e7, 1e5, max live 1e9)
 *   optimizer.params  auto: the run's; absent: DeepSpeed's Adam defaults (lr 1e-3,
 *     betas 0.9/0.999, eps 1e-8, weight decay 0); no optimizer block: the run's
 *   scheduler         WarmupLR -> constant_with_warmup, WarmupDecayLR -> linear,
 *     WarmupCosineLR -> cosine; warmup_num_steps / total_num_steps auto: the run's,
 *     warmup absent: 1000 (DeepSpeed's); warmup_max_lr auto: the optimizer's lr.
 *     DeepSpeed trains at warmup_max_lr, so one that differs from the optimizer's lr
 *     (including WarmupLR's default 0.001 when absent) is refused.
 * fp16/bf16 "auto" is left to the plan (it follows the run's mixed_precision).
 * Returns ZT_OK, ZT_EINPUT (message "PATH: KEY: ...") or ZT_EFAIL (world < 1: a caller's bug). */
int zt_ds_config_resolve(const zt_ds_config *c, const zt_ds_run *run, zt_ds_resolved *out,
                         zt_err *err);

#endif
