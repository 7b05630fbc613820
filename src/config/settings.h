/* settings.h — everything a run is told, from flags and config files, and how
 * the sources combine into one plan request (contract §6).
 *
 * Precedence, lowest first: ztrain's defaults (Hugging Face TrainingArguments'
 * where they exist), the Accelerate YAML (--config_file), the DeepSpeed JSON
 * (--deepspeed_config_file or the YAML's deepspeed_config.deepspeed_config_file),
 * then flags given on the command line.  A flag always wins; a JSON value that is
 * not "auto" wins over a default; "auto" takes the run's value as Accelerate
 * resolves it.  The command line fills `given` so the files know what not to touch. */
#ifndef ZT_SETTINGS_H
#define ZT_SETTINGS_H

#include "../comm/comm.h"
#include "../plan/plan.h"
#include "accelerate.h"
#include "deepspeed.h"

typedef struct zt_settings {
    /* sources */
    const char *config_file, *deepspeed_config_file;
    /* plan */
    int use_fsdp, use_deepspeed, zero_stage, ranks_per_node;
    const char *torch_dtype, *mixed_precision, *strategy, *wrap, *reduce_dtype, *compensation;
    const char *backward_prefetch; /* FSDP; NULL: BACKWARD_PRE */
    const char *device;            /* --device cpu | cuda (emu: tests); NULL: cpu */
    const char *comm_backend;      /* --comm_backend auto | nccl | mpi; NULL: auto */
    const char *kernels;           /* --kernels exact | fast (the YAML's ztrain_kernels); NULL: fast on
                                    * cuda, exact elsewhere */
    const char *cuda_graphs;       /* --cuda_graphs auto | on | off (the YAML's ztrain_cuda_graphs); NULL: auto */
    const char *step, *activations; /* --step sync | async, --activations fp32 | bf16: one part of the
                                    * mode set by itself (plan.h); NULL: the kernels' preset */
    int forward_prefetch;          /* FSDP; -1: not said (off) */
    int limit_all_gathers;         /* FSDP; -1: not said (on) */
    int offload_delayed_update;    /* --offload_delayed_update (the YAML's ztrain_offload_delayed_update) */
    long min_num_params;
    /* training */
    int block_size, batch, accum, shuffle, checkpointing;
    long max_steps, warmup_steps, save_steps, seed;
    double lr, weight_decay, beta1, beta2, eps, max_grad_norm;
    const char *schedule;
    const char *schedule_kwargs; /* --lr_scheduler_kwargs (JSON; NULL: none) */
    const char *optim;           /* --optim: adamw_torch (default) and the names that mean the same AdamW */
    /* what the files said that the plan and the report need */
    int num_processes;            /* from the YAML; -1 absent */
    zt_accel_config accel;        /* as read (distributed_type "" when no file) */
    zt_ds_config ds;              /* as read (path "" when no file) */
    int have_ds;
    zt_ds_resolved ds_resolved;   /* after zt_settings_resolve with a DeepSpeed JSON */
    int allow_unresolved_auto;    /* no model is known (config show/validate without one):
                                   * a DeepSpeed "auto" that needs its hidden size stays
                                   * unresolved (-1 in ds_resolved) instead of failing */
    char ds_json_path[512];
    /* which settings the command line gave, by flag name */
    int (*given)(void *ctx, const char *flag);
    void *given_ctx;
} zt_settings;

void zt_settings_defaults(zt_settings *s);

/* The one path from what the user said to the plan: read the files named in s
 * (the YAML, then the JSON it or the flags name), fill every setting the command
 * line did not give, build the plan request (the ranks placed as topo says; NULL:
 * unknown, taken as one machine) and resolve it for a world of `world` ranks.
 * hidden_size and config_dtype (the model's) resolve DeepSpeed's "auto" values
 * and torch_dtype auto. */
int zt_settings_plan(zt_settings *s, int world, int hidden_size, zt_dtype config_dtype,
                     const zt_topology *topo, zt_plan *plan, zt_err *err);

#endif
