/* accelerate.h — Hugging Face Accelerate config YAML (contract §6), read strictly.
 *
 * zt_accel_config_read turns the file `accelerate config` writes (or one written
 * by hand in the same shape) into a zt_accel_config, in which every setting is
 * either the file's value or "absent" (ZT_UNSET for yes/no settings, -1, "" or < 0
 * as noted per field); the
 * plan, not this reader, decides what an absent setting means.
 *
 * Promise: a file that reads without error means one thing.  Every key is
 * known (an unknown one is refused with the closest known name), every value
 * has its type and range, contradictions between keys are refused, and what
 * only matters on GPUs or TPUs is accepted and ignored.  Values follow the
 * YAML 1.2 core schema: `true`/`false` are booleans, `no` and `yes` are the
 * strings Accelerate means by them; `null` (or an empty value) means absent.
 * Anchors are allowed, aliases and tags are not; one document per file.
 * Names older Accelerate versions wrote are read as Accelerate still reads them
 * (fsdp_backward_prefetch_policy as fsdp_backward_prefetch, fsdp_config keys without
 * the fsdp_ prefix, a top-level fp16: true as mixed_precision: fp16, dynamo_backend),
 * each with a note in `notes` naming the current key.
 * Every failure is ZT_EINPUT with "FILE:LINE: KEY.PATH: what was wrong (allowed: ...)". */
#ifndef ZT_CONFIG_ACCELERATE_H
#define ZT_CONFIG_ACCELERATE_H

#include "../core/schema.h"
#include "../core/status.h"

#define ZT_ACCEL_MAX_NOTES 6

/* PEFT's LoRA settings (docs/lora.md, "YAML keys"): TRL's ModelConfig names at the top
 * level (use_peft, lora_r, ...) or LoraConfig's own under peft_config: (r, ...), read
 * into one record; their meaning is checked where the flags' is (cli/lora_cli.c), so
 * a key and its flag are refused with the same words. */
enum { ZT_PEFT_USE, ZT_PEFT_R, ZT_PEFT_ALPHA, ZT_PEFT_DROPOUT, ZT_PEFT_TARGETS, ZT_PEFT_RSLORA,
       ZT_PEFT_BIAS, ZT_PEFT_NKEYS };
typedef struct zt_accel_peft {
    zt_setting use_peft, use_rslora;
    int r;                            /* >= 1, -1 absent */
    double alpha, dropout;            /* >= 0, < 0 absent */
    char bias[16];                    /* none | all | lora_only, "" absent */
    char targets[256];                /* a list's items joined by commas, or the string */
    int line[ZT_PEFT_NKEYS];          /* where each setting was given, 0 absent */
    char key[ZT_PEFT_NKEYS][32];      /* its key as written: lora_r or peft_config.r */
    int section_line;                 /* peft_config: given (it means use_peft: true) */
} zt_accel_peft;

typedef struct zt_accel_config {
    char distributed_type[16];        /* NO | MULTI_CPU | FSDP | DEEPSPEED (required) */
    char mixed_precision[8];          /* no | bf16 | fp16; "" absent */
    int num_processes;                /* >= 1; -1 absent */
    int num_machines, machine_rank;   /* >= 1, 0..num_machines-1; -1 absent */
    /* torchrun's rendezvous: read and shown by launch; MPI does its own */
    char main_process_ip[256];        /* "" absent */
    int main_process_port;            /* 1..65535, -1 absent */
    /* mpirun_config (MULTI_CPU): the hosts for mpirun, and oneCCL's worker threads
     * (Accelerate sets CCL_WORKER_COUNT; ztrain's collectives are Open MPI's) */
    char mpirun_hostfile[512];        /* Open MPI hostfile, "" absent */
    int mpirun_ccl;                   /* >= 0, -1 absent */

    /* fsdp_config (only with distributed_type FSDP) */
    int fsdp_sharding_strategy;       /* 1..5 (zt_sharding's numbering), -1 absent.  The
                                       * effective strategy, whichever key gave it:
                                       * fsdp_reshard_after_forward true is 1 (FULL_SHARD),
                                       * false is 2 (SHARD_GRAD_OP); its FSDP1 form
                                       * (a strategy name) is that strategy. */
    zt_setting fsdp_reshard_after_forward; /* FSDP2's boolean as written */
    int fsdp_version;                 /* 1 or 2, -1 absent */
    char fsdp_auto_wrap_policy[32];   /* TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP */
    char fsdp_transformer_layer_cls_to_wrap[64]; /* LlamaDecoderLayer | MistralDecoderLayer */
    long fsdp_min_num_params;         /* >= 0, -1 absent */
    char fsdp_backward_prefetch[16];  /* BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH */
    zt_setting use_cpu;               /* use_cpu: true pins the run to the CPU (--device cpu) */
    zt_setting ztrain_offload_delayed_update; /* ztrain's own top-level key (--offload_delayed_update) */
    char ztrain_kernels[8];           /* exact | fast: ztrain's own top-level key (Accelerate has
                                       * none; --kernels), "" absent */
    char ztrain_cuda_graphs[8];       /* auto | on | off: ztrain's own key (--cuda_graphs), "" absent */
    zt_setting fsdp_forward_prefetch, fsdp_offload_params, fsdp_cpu_ram_efficient_loading,
        fsdp_sync_module_states, fsdp_use_orig_params, fsdp_activation_checkpointing;
    char fsdp_state_dict_type[24];    /* FULL_STATE_DICT | SHARDED_STATE_DICT | LOCAL_STATE_DICT */

    /* deepspeed_config (only with distributed_type DEEPSPEED) */
    int zero_stage;                   /* 0..3, -1 absent */
    char offload_optimizer_device[8], offload_param_device[8]; /* none | cpu ("" absent) */
    zt_setting zero3_init_flag, zero3_save_16bit_model;
    int gradient_accumulation_steps;  /* >= 1, -1 absent */
    double gradient_clipping;         /* >= 0; < 0 absent */
    char deepspeed_config_file[512];  /* as written (relative to the working directory) */

    zt_accel_peft peft;               /* the LoRA keys (above) */

    zt_setting legacy_fp16;           /* the old top-level fp16: true|false (read into
                                       * mixed_precision when that is absent) */

    char path[512];                   /* the file read, for messages */
    /* warnings for the user: old key names read under their current ones, as Accelerate
     * reads them ("FILE:LINE: KEY is deprecated; read as NEW ..."); the caller prints them */
    char notes[ZT_ACCEL_MAX_NOTES][ZT_SCHEMA_NOTE_LEN];
    int nnotes;
} zt_accel_config;

/* Every setting absent, path "". */
void zt_accel_config_init(zt_accel_config *c);

/* Read the Accelerate config YAML at path into *c.  Returns ZT_OK, ZT_EINPUT
 * (unreadable, malformed, unknown key, wrong type, out of range, contradiction)
 * or ZT_EFAIL (out of memory); on failure *c is left unchanged. */
int zt_accel_config_read(const char *path, zt_accel_config *c, zt_err *err);
/* The same from len bytes of text already in memory; name stands for the file in
 * messages. */
int zt_accel_config_parse(const char *name, const char *text, size_t len, zt_accel_config *c,
                          zt_err *err);

#endif
