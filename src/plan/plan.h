/* plan.h — one resolved plan per run (contract §1-§3).
 *
 * What the user asked for (flags, Accelerate YAML) is a zt_plan_request; the
 * plan is what ztrain will do: the backend face, the ZeRO stage, the shard
 * group, the wrap policy, the overlap and the precision plan (precision.h, which
 * holds the dtype rules of the two backends).  NO / MULTI_CPU (plain data
 * parallel) is stage 0 with FSDP's dtype rules.
 * Strategies map to stages: NO_SHARD 0, SHARD_GRAD_OP 2, FULL_SHARD 3,
 * HYBRID_SHARD 3 and HYBRID_SHARD_ZERO2 2 inside groups of one machine's
 * ranks (from MPI's topology; ranks_per_node overrides it).
 * Overlap: FSDP always overlaps its reduce-scatters and NO_SHARD's all-reduces
 * (they run on their own stream) and prefetches as backward_prefetch /
 * forward_prefetch say; DeepSpeed overlaps reduce-scatters when overlap_comm
 * (default: stage 3 only) and prefetches both ways in stage 3 unless
 * stage3_prefetch_bucket_size is 0; plain data parallel all-reduces during the
 * backward, as DDP's buckets do.  ZeRO-1 reduces at the step. */
#ifndef ZT_PLAN_H
#define ZT_PLAN_H

#include <stdio.h>

#include "../core/schema.h"
#include "../model/layout.h"
#include "precision.h"

typedef enum zt_face { ZT_FACE_DDP, ZT_FACE_FSDP, ZT_FACE_DEEPSPEED } zt_face;

typedef enum zt_sharding {
    ZT_SHARDING_UNSET = -1,
    ZT_SHARDING_FULL_SHARD = 1,      /* Accelerate's numbering: 1..5 */
    ZT_SHARDING_SHARD_GRAD_OP = 2,
    ZT_SHARDING_NO_SHARD = 3,
    ZT_SHARDING_HYBRID_SHARD = 4,
    ZT_SHARDING_HYBRID_SHARD_ZERO2 = 5,
} zt_sharding;

typedef struct zt_plan_request {
    zt_face face;
    const char *mixed_precision;  /* "no", "bf16", "fp16"; NULL: no */
    const char *torch_dtype;      /* load dtype name or "auto"; NULL: float32 */
    zt_dtype config_dtype;        /* config.json's torch_dtype, for "auto" */
    zt_sharding sharding;         /* FSDP strategy; UNSET: FULL_SHARD */
    int zero_stage;               /* DeepSpeed stage; -1: 2 */
    int wrap_set;
    zt_wrap_policy wrap;
    long min_num_params;
    const char *reduce_dtype;     /* override; NULL: as the face decides */
    int ranks_per_node;           /* hybrid group size override; 0: the machine's ranks */
    /* where the ranks run (MPI_Comm_split_type SHARED, zt_comm_topology):
     * machines 0 means unknown (no MPI: taken as one machine of `world` ranks);
     * machine_ranks 0 with machines > 0 means the machines hold different
     * numbers of ranks or not consecutive ones */
    int machines, machine_ranks;
    const char *master_compensation; /* "none" or "kahan"; NULL: none */
    /* overlap of collectives with compute (contract §2, Prefetch) */
    const char *backward_prefetch; /* FSDP: BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH; NULL: BACKWARD_PRE */
    zt_setting forward_prefetch;  /* FSDP; unset: off (FSDP's default) */
    zt_setting overlap_comm;      /* DeepSpeed; unset: on for stage 3 only (DeepSpeed's default) */
    long prefetch_bucket;         /* DeepSpeed stage3_prefetch_bucket_size; 0 turns prefetch off; -1: on */
    /* DeepSpeed's other sizes (zero_optimization, in parameters), as its JSON resolves
     * them; 0: not given (no JSON), no limit */
    long reduce_bucket, allgather_bucket, persistence, max_live;
    zt_setting limit_all_gathers; /* FSDP; unset: on (FSDP's default) */
    /* a DeepSpeed JSON's fp16 block (zt_precision_request's); < 0: DeepSpeed's default */
    double ls_initial_scale_power, ls_window, ls_hysteresis, ls_min_scale;
    const char *device;           /* cpu | cuda | emu (the test device, backend.h); NULL: cpu */
    const char *comm_backend;     /* auto | nccl | mpi; NULL: auto */
    const char *kernels;          /* exact | fast; NULL: fast on cuda, exact elsewhere: the preset of
                                   * the mode's parts below (zt_plan's kernels, step, activations) */
    const char *step;             /* sync | async; NULL: the kernels' preset (diagnosis: one part) */
    const char *activations;      /* fp32 | bf16; NULL: the kernels' preset (diagnosis: one part) */
    const char *cuda_graphs;      /* auto | on | off: the step captured as a graph; NULL: auto */
    int offload_optimizer;        /* offload_optimizer_device: cpu (DeepSpeed, Accelerate) */
    int offload_params;           /* offload_param_device: cpu, or fsdp_offload_params: true */
    int offload_delayed_update;   /* --offload_delayed_update (the YAML's ztrain_offload_delayed_update):
                                   * DeepSpeed's delayed parameter update, offload on a device only */
} zt_plan_request;

/* A run's mode, in named parts (docs/gpu.md, "Kernel modes"), each printed on the plan
 * line.  --kernels fast is the preset that sets them all (fast kernels, the asynchronous
 * step, bf16 activations where compute is bf16, graphs where the step can be captured);
 * --kernels exact sets exact kernels and a synchronous step with fp32 activations; each
 * part can also be set by itself (--step, --activations, --cuda_graphs) for diagnosis.
 *   kernels: the backend table's precision (kernels/backend.h, zt_kernel_mode): exact, the
 *     CPU's bits, or a device's fast kernels with the fused lm-head;
 *   step: sync, every number read back where the step makes it, or async, the verdict
 *     and AdamW on the device and the step's numbers read once (engine/async_step.h);
 *   activations: qkv, the attention's output and gu in fp32, or in bf16 (bf16 compute);
 *   graphs: the asynchronous step captured once and replayed, with why not when off. */
typedef enum { ZT_PLAN_KERNELS_EXACT, ZT_PLAN_KERNELS_FAST } zt_plan_kernels;
typedef enum { ZT_PLAN_STEP_SYNC, ZT_PLAN_STEP_ASYNC } zt_plan_step;
typedef enum { ZT_PLAN_ACT_FP32, ZT_PLAN_ACT_BF16 } zt_plan_act;
typedef enum { ZT_PLAN_GRAPHS_OFF, ZT_PLAN_GRAPHS_ON } zt_plan_graphs;

typedef struct zt_plan {
    zt_face face;
    int stage;
    int hybrid;
    int mixed;                    /* mixed precision on (compute differs from a bf16/fp32 master by policy) */
    int world, group_size;        /* group_size: ranks sharing one copy of the state */
    int machines, machine_ranks;  /* as in the request (1 x world when unknown) */
    zt_wrap_policy wrap;
    long min_num_params;
    zt_precision prec;
    zt_overlap overlap;           /* all off below the stages they apply to (prefetch 3, reduce 2-3) */
    zt_loss_scaling ls;           /* on with fp16 compute, DeepSpeed's rules */
    char mode[64];                /* "FSDP memory-constrained", "FSDP aligned", "DeepSpeed", "fp32" */
    char device[8];               /* "cpu", "cuda" or "emu": the backend table (kernels/backend.h) */
    char comm[8];                 /* "mpi", "nccl" or "auto" (a device: NCCL when every rank has a GPU
                                   * of its own, else MPI staged through host memory) */
    zt_plan_kernels kernels;      /* the mode's parts (above) */
    zt_plan_step step;            /* (overlap.async_step says it to the engine) */
    zt_plan_act activations;
    zt_plan_graphs graphs;        /* on: the step captured once and replayed (docs/gpu.md, "The
                                   * captured step") */
    char graphs_why[40];          /* off where auto found it cannot: why; "" otherwise */
    int graphs_forced;            /* --cuda_graphs on: the trainer refuses what stops it too */
    char strategy[40];            /* "FULL_SHARD (ZeRO-3)", "ZeRO-2", ... */
    int offload_requested;        /* 1 optimizer, 2 parameters (bits), as asked; overlap's
                                   * offload_* say what the engine does (0 on the CPU) */
} zt_plan;

void zt_plan_request_init(zt_plan_request *r);
/* Resolve for a world of `world` ranks; bad names and impossible combinations
 * (fp16 without loss scaling, ranks_per_node not dividing the world) are ZT_EINPUT. */
int zt_plan_resolve(const zt_plan_request *r, int world, zt_plan *out, zt_err *err);
/* The plan as contract §1's table row plus stage, group and wrap.  `products`, when
 * not NULL, ends the plan line: how the device runs the compute dtype's matrix
 * products (the caller, who opened the device, knows; e.g. "bf16 products: native"). */
/* The offload line of the plan (nothing when none was asked): where each buffer lives. */
void zt_plan_print_offload(FILE *f, const zt_plan *p);
void zt_plan_print(FILE *f, const zt_plan *p, const char *products);

/* A plan for one process with the given precision (tests and evaluation). */
zt_plan zt_plan_single(zt_precision prec, zt_wrap_policy wrap);

int zt_sharding_parse(const char *s, zt_sharding *out); /* names or "1".."5" */
const char *zt_sharding_name(zt_sharding s);
const char *zt_face_name(zt_face f);

#endif
