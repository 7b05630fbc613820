/* lora_cli.h — `train`'s LoRA flags (TRL's ModelConfig names: --use_peft, --lora_r,
 * --lora_alpha, --lora_dropout, --lora_target_modules, --use_rslora; PEFT's bias as
 * --lora_bias), their checks, and the plan line (docs/lora.md). */
#ifndef ZT_CLI_LORA_H
#define ZT_CLI_LORA_H

#include "../config/accelerate.h"
#include "../core/status.h"
#include "../model/config.h"
#include "../model/lora.h"
#include "run_settings.h"

enum { ZT_CLI_LORA_MAX_TARGETS = 16 };

typedef struct zt_cli_lora {
    int use_peft, r, rslora;
    double alpha, dropout;
    const char *bias;
    const char *targets_shown; /* the table's destination for --lora_target_modules (its values leave
                                * argv before the flags are parsed: zt_cli_lora_take) */
    const char *targets[ZT_CLI_LORA_MAX_TARGETS];
    int ntargets;
    int targets_given;
    const char *adapter;       /* --adapter DIR: a PEFT adapter directory to start from */
    zt_accel_peft yaml;        /* the Accelerate YAML's LoRA keys (their strings live here) */
    zt_lora lora;              /* resolved by zt_cli_lora_check */
} zt_cli_lora;

/* TRL's defaults (lora_dropout 0.05 among them). */
#define ZT_CLI_LORA_DEFAULTS {.r = 16, .alpha = 32.0, .dropout = 0.05, .bias = "none"}

#define TRAIN_LORA_FLAGS(L)                                                                                      \
    {"use_peft", ZT_FLAG_BOOL, &(L).use_peft, "train LoRA adapters (PEFT's) instead of every weight (default false)", 1, 0, 0}, \
    {"lora_r", ZT_FLAG_INT, &(L).r, "the adapters' rank (default 16)", 1, 1 << 20, 0}, \
    {"lora_alpha", ZT_FLAG_DOUBLE, &(L).alpha, "the scale's numerator: scale alpha/r (default 32)", 1e-30, 1e30, 0}, \
    {"lora_dropout", ZT_FLAG_DOUBLE, &(L).dropout, "PEFT's dropout on the adapters' input, in training, from 0 to below 1 (default 0.05)", 0, 1, 0}, \
    {"lora_target_modules", ZT_FLAG_STR, &(L).targets_shown, "all-linear, or projection names (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj; spaces or commas) (default: q_proj v_proj, PEFT's)", 1, 0, 0}, \
    {"use_rslora", ZT_FLAG_BOOL, &(L).rslora, "rsLoRA: scale alpha/sqrt(r) (default false)", 1, 0, 0}, \
    {"lora_bias", ZT_FLAG_STR, &(L).bias, "PEFT's bias: none (the only one implemented; default none)", 1, 0, 0}, \
    {"adapter", ZT_FLAG_STR, &(L).adapter, "DIR: start from the adapters in DIR (adapter_model.safetensors and adapter_config.json, PEFT's or ztrain's) instead of PEFT's initialisation; its r, alpha, targets and rsLoRA apply", 1, 0, 0}

/* --lora_target_modules A B ...: its values out of argv (TRL's form), before the flags
 * are parsed. */
int zt_cli_lora_take(zt_cli_lora *l, int *argc, char **argv, zt_err *err);
/* After parsing: the settings the flags did not give taken from the Accelerate YAML's
 * LoRA keys (config_file; NULL: none), as a flag wins over the YAML everywhere
 * (config/settings.h); then the values checked, each refusal naming its flag or
 * FILE:LINE: KEY, into l->lora; with --adapter DIR, the adapter's config
 * (io/peft_adapter.h) gives them, and a setting given that disagrees with it is refused
 * naming both values. */
int zt_cli_lora_check(zt_cli_lora *l, const flag_table *table, const char *config_file, zt_err *err);
/* With --use_peft, once the model's config is read: the plan line on stdout (when
 * print). */
int zt_cli_lora_plan(const zt_cli_lora *l, const zt_llama_config *cfg, int print, zt_err *err);

#endif
