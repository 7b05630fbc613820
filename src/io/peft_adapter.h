/* peft_adapter.h — LoRA adapters written in PEFT's format (docs/lora.md), which
 * PeftModel.from_pretrained(base, dir) loads:
 *   adapter_model.safetensors  every adapter tensor of the layout (model/lora.h), F32,
 *                              under the names PEFT saves them with
 *                              (base_model.model.<weight less .weight>.lora_A.weight)
 *   adapter_config.json        peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
 *                              target_modules, use_rslora, bias none, lora_dropout 0,
 *                              base_model_name_or_path, and PEFT's inert defaults
 * Each file is written atomically (core/fs.h). */
#ifndef ZT_PEFT_ADAPTER_H
#define ZT_PEFT_ADAPTER_H

#include "../core/status.h"
#include "../model/layout.h"
#include "../model/lora.h"

/* vals[i]: parameter i's full values (fp32), read for the adapter tensors only;
 * base_model: the base model's directory as the run was given it. */
int zt_peft_adapter_write(const char *dir, const zt_layout *lay, const zt_lora *l, float *const *vals,
                          const char *base_model, zt_err *err);

#endif
