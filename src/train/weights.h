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

/* Local: the identity of the base model in dir that LoRA's adapters are trained on,
 * recorded in a LoRA checkpoint and checked on its resume.  A digest of the weights
 * as loaded, not of the files: each parameter's values widened to fp32 (exact from
 * bf16, fp16 and fp32) are hashed with its name (XXH3-64), and the parameters' hashes
 * combined in layout order; so the same numbers saved in another file format (GGUF
 * or safetensors), split into other shards or stored in a wider dtype give the same
 * digest, and any changed weight gives another.  It reads the weights once more
 * (every file the load read, through the page cache). */
int zt_base_digest(const char *dir, const zt_llama_config *cfg, uint64_t *digest, zt_err *err);

#endif
