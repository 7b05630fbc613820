/* peft_adapter.h — LoRA adapters written in PEFT's format (docs/lora.md), which
 * PeftModel.from_pretrained(base, dir) loads:
 *   adapter_model.safetensors  every adapter tensor of the layout (model/lora.h), F32,
 *                              under the names PEFT saves them with
 *                              (base_model.model.<weight less .weight>.lora_A.weight)
 *   adapter_config.json        peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
 *                              target_modules, use_rslora, bias none, lora_dropout (the run's),
 *                              base_model_name_or_path, and PEFT's inert defaults
 * Each file is written atomically (core/fs.h); both are read back (train --adapter). */
#ifndef ZT_PEFT_ADAPTER_H
#define ZT_PEFT_ADAPTER_H

#include "../core/status.h"
#include "../model/layout.h"
#include "../model/lora.h"

/* vals[i]: parameter i's full values (fp32), read for the adapter tensors only;
 * base_model: the base model's directory as the run was given it. */
int zt_peft_adapter_write(const char *dir, const zt_layout *lay, const zt_lora *l, float *const *vals,
                          const char *base_model, zt_err *err);

/* Reading such a directory, ztrain's or PEFT's (train --adapter DIR).
 * dir/adapter_config.json into *l: r, lora_alpha, use_rslora, lora_dropout (absent: 0),
 * target_modules (absent: PEFT's default, q_proj v_proj).  Keys that change LoRA's math
 * and are not built (use_dora, rank_pattern, alpha_pattern, layers_to_transform,
 * modules_to_save, bias other than none, ...) are refused by name; every other key is
 * ignored (it does not change the loaded model).  ZT_EINPUT names the file and key. */
int zt_peft_adapter_read_config(const char *dir, zt_lora *l, zt_err *err);

/* dir/adapter_model.safetensors: each adapter tensor of lay (p->lora != 0), F32, BF16 or
 * F16 widened exactly to fp32, handed to sink(ctx, p, values) in layout order.  A tensor
 * missing, of another shape or dtype, or one the layout has no place for is ZT_EINPUT
 * naming the file and tensor. */
typedef int (*zt_peft_sink)(void *ctx, const zt_param *p, const float *vals, zt_err *err);
int zt_peft_adapter_read(const char *dir, const zt_layout *lay, zt_peft_sink sink, void *ctx, zt_err *err);

#endif
