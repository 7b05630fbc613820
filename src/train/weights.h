/* weights.h — the engine's parameters from and to a Hugging Face model directory:
 * io/hf_model.h's checked reader and writer, joined to the engine's shards. */
#ifndef ZT_WEIGHTS_H
#define ZT_WEIGHTS_H

#include "../engine/engine.h"
#include "../io/hf_model.h"
#include "../model/lora.h"

/* Local (no communication): each rank fills its own shards (a checkpoint given
 * as dir has its model's identity checked first: zt_ckpt_check_model_dir).  Call
 * zt_engine_refresh_gathered (a collective) once every rank has loaded. */
int zt_hf_load_params(const char *dir, const zt_layout *lay, zt_engine *eng, zt_err *err);

/* Collective: gather the engine's parameters to full tensors and, on the writer
 * rank, write them as a HF directory in dtype (zt_hf_save_tensors_meta; meta
 * NULL: the plain {"format": "pt"}). */
int zt_hf_save(const char *dir, const zt_llama_config *cfg, const zt_layout *lay, zt_engine *eng,
               zt_dtype dtype, size_t max_shard_bytes, const char *const *meta, int writer, zt_err *err);

/* Collective: LoRA's adapters gathered to full tensors and, on the writer rank, written
 * into dir in PEFT's format (io/peft_adapter.h), base_model named in its config. */
int zt_lora_save(const char *dir, const zt_layout *lay, const zt_lora *l, zt_engine *eng, const char *base_model,
                 int writer, zt_err *err);

#endif
