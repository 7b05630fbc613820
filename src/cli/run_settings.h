/* run_settings.h — what the commands that resolve a plan share (train, config,
 * estimate-memory): the plan and training flags, and the resolution from flags
 * and files to a plan (src/config/settings.h does the combining). */
#ifndef ZT_RUN_SETTINGS_H
#define ZT_RUN_SETTINGS_H

#include <stdio.h>

#include "../comm/comm.h"
#include "../config/settings.h"
#include "../model/config.h"
#include "../plan/plan.h"
#include "flags.h"

typedef struct flag_table {
    zt_flag *flags;
    int n;
} flag_table;

/* settings.h's `given` callback over a parsed flag table. */
int zt_flag_given(void *ctx, const char *name);

/* The flags every command that resolves a plan shares (train, config, estimate-memory). */
#define PLAN_FLAGS(S)                                                                                      \
    {"config_file", ZT_FLAG_STR, &(S).config_file, "Accelerate config YAML (distributed_type, mixed_precision, fsdp_config, deepspeed_config); flags override it", 1, 0, 0}, \
    {"deepspeed_config_file", ZT_FLAG_STR, &(S).deepspeed_config_file, "DeepSpeed JSON (\"auto\" resolved as Accelerate does); flags override it", 1, 0, 0}, \
    {"torch_dtype", ZT_FLAG_STR, &(S).torch_dtype, "load dtype: fp32 | bf16 | fp16 (or float32, bfloat16, float16) | auto (config's)", 1, 0, 0}, \
    {"mixed_precision", ZT_FLAG_STR, &(S).mixed_precision, "no | bf16 | fp16 (fp32 master; fp16 with loss scaling)", 1, 0, 0}, \
    {"use_fsdp", ZT_FLAG_BOOL, &(S).use_fsdp, "FSDP semantics (sharding strategy, dtype rules)", 1, 0, 0}, \
    {"fsdp_sharding_strategy", ZT_FLAG_STR, &(S).strategy, "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | HYBRID_SHARD_ZERO2 (or 1-5; default FULL_SHARD under FSDP)", 1, 0, 0}, \
    {"fsdp_auto_wrap_policy", ZT_FLAG_STR, &(S).wrap, "TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP (default TRANSFORMER_BASED_WRAP; DeepSpeed stages 0-2: NO_WRAP)", 1, 0, 0}, \
    {"fsdp_backward_prefetch", ZT_FLAG_STR, &(S).backward_prefetch, "stage 3: BACKWARD_PRE (default) | BACKWARD_POST | NO_PREFETCH: when the next unit's all-gather starts in backward", 1, 0, 0}, \
    {"fsdp_forward_prefetch", ZT_FLAG_BOOL, &(S).forward_prefetch, "stage 3: start the next unit's all-gather before computing this one's forward (default false)", 1, 0, 0}, \
    {"fsdp_limit_all_gathers", ZT_FLAG_BOOL, &(S).limit_all_gathers, "stage 3: at most two all-gathers in flight, the unit's and the next (default true); false prefetches as far as the gather pool holds (more memory)", 1, 0, 0}, \
    {"fsdp_min_num_params", ZT_FLAG_LONG, &(S).min_num_params, "unit size for SIZE_BASED_WRAP", 0, 1e15, 0}, \
    {"use_deepspeed", ZT_FLAG_BOOL, &(S).use_deepspeed, "DeepSpeed semantics (fp32 master always)", 1, 0, 0}, \
    {"zero_stage", ZT_FLAG_INT, &(S).zero_stage, "DeepSpeed ZeRO stage 0-3 (default 2)", 0, 3, 0}, \
    {"ranks_per_node", ZT_FLAG_INT, &(S).ranks_per_node, "hybrid sharding group size (default: all ranks)", 1, 1 << 20, 0}, \
    {"master_compensation", ZT_FLAG_STR, &(S).compensation, "none | kahan: Kahan-compensated bf16 master (2 more bytes/param, keeps sub-ulp updates)", 1, 0, 0}, \
    {"reduce_dtype", ZT_FLAG_STR, &(S).reduce_dtype, "gradient reduction dtype: fp32 | bf16 | fp16, or float32, ... (default: the compute dtype)", 1, 0, 0}, \
    {"device", ZT_FLAG_STR, &(S).device, "cpu (default) | cuda (make cuda): one GPU per rank, by its place on its machine", 1, 0, 0}, \
    {"offload_delayed_update", ZT_FLAG_BOOL, &(S).offload_delayed_update, "with offload to cpu on a device: the host's AdamW of step k runs beside step k+1, which uses step k-1's parameters (DeepSpeed's delayed parameter update; default false)", 1, 0, 0}, \
    {"kernels", ZT_FLAG_STR, &(S).kernels, "exact (bit parity with the CPU; the CPU's only mode) | fast (the default on --device cuda: fast kernels, an asynchronous step)", 1, 0, 0}, \
    {"cuda_graphs", ZT_FLAG_STR, &(S).cuda_graphs, "auto (default: on where it can be) | on | off: capture the fast step as a graph once and replay it (one rank, --kernels fast)", 1, 0, 0}, \
    {"step", ZT_FLAG_STR, &(S).step, "diagnosis: sync | async, the step alone (default: --kernels' preset, async with fast kernels and no offload)", 1, 0, 0}, \
    {"activations", ZT_FLAG_STR, &(S).activations, "diagnosis: fp32 | bf16 (bf16 compute), the activations alone (default: --kernels' preset, bf16 with fast kernels and bf16 compute)", 1, 0, 0}, \
    {"comm_backend", ZT_FLAG_STR, &(S).comm_backend, "--device cuda: auto (default: nccl when each rank has its own GPU) | nccl | mpi (staged through host memory); --device emu: auto (mpi) | nccl (its stand-in: collectives queued on the emulated device)", 1, 0, 0}, \
    {"block_size", ZT_FLAG_INT, &(S).block_size, "tokens per sequence (default 128)", 1, 1 << 20, 0}, \
    {"per_device_train_batch_size", ZT_FLAG_INT, &(S).batch, "sequences per micro-batch per rank (default 8)", 1, 1 << 20, 0}, \
    {"gradient_accumulation_steps", ZT_FLAG_INT, &(S).accum, "micro-batches per optimizer step (default 1)", 1, 1 << 20, 0}, \
    {"max_steps", ZT_FLAG_LONG, &(S).max_steps, "optimizer steps (default 100)", 1, 1e12, 0}, \
    {"learning_rate", ZT_FLAG_DOUBLE, &(S).lr, "peak learning rate (default 5e-5)", 0, 1e3, 0}, \
    {"weight_decay", ZT_FLAG_DOUBLE, &(S).weight_decay, "AdamW weight decay on matrices (default 0)", 0, 1e3, 0}, \
    {"adam_beta1", ZT_FLAG_DOUBLE, &(S).beta1, "default 0.9", 0, 0.999999, 0}, \
    {"adam_beta2", ZT_FLAG_DOUBLE, &(S).beta2, "default 0.999", 0, 0.999999999, 0}, \
    {"adam_epsilon", ZT_FLAG_DOUBLE, &(S).eps, "default 1e-8", 0, 1, 0}, \
    {"max_grad_norm", ZT_FLAG_DOUBLE, &(S).max_grad_norm, "clip the global gradient norm (0: off; default 1.0)", 0, 1e30, 0}, \
    {"lr_scheduler_type", ZT_FLAG_STR, &(S).schedule, "linear (default) | cosine | cosine_with_restarts | polynomial | constant | constant_with_warmup | cosine_with_min_lr | warmup_stable_decay | inverse_sqrt", 1, 0, 0}, \
    {"warmup_steps", ZT_FLAG_LONG, &(S).warmup_steps, "linear warmup steps (default 0)", 0, 1e12, 0}, \
    {"lr_scheduler_kwargs", ZT_FLAG_STR, &(S).schedule_kwargs, "the schedule's keyword arguments as a JSON object, as Trainer's: num_cycles (cosine, cosine_with_restarts), lr_end and power (polynomial), min_lr or min_lr_rate (cosine_with_min_lr, one required), num_decay_steps (required), num_stable_steps, warmup_type, decay_type, min_lr_ratio (warmup_stable_decay), timescale (inverse_sqrt)", 1, 0, 0}, \
    {"optim", ZT_FLAG_STR, &(S).optim, "adamw_torch (default) | adamw_torch_fused: both are torch's AdamW, which ztrain computes; other optimizers are refused", 1, 0, 0}, \
    {"gradient_checkpointing", ZT_FLAG_BOOL, &(S).checkpointing, "keep only layer inputs; recompute in backward", 1, 0, 0}


/* Read the model's config.json (for hidden_size and torch_dtype auto), combine
 * settings and files, and resolve the plan for a world of `world` ranks placed
 * as topo says (NULL: unknown, taken as one machine). */
int zt_resolve_run(zt_settings *st, const char *model_dir, const char *model_config, int world,
                   const zt_topology *topo, zt_llama_config *cfg, zt_plan *plan, zt_err *err);

/* The Accelerate YAML's notes (old key names read under their current ones), one
 * "ztrain: warning: ..." line each; after zt_resolve_run or zt_settings_plan. */
void zt_print_config_notes(const zt_settings *st, FILE *f);

#endif
