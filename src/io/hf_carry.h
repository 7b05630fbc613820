/* hf_carry.h — what a saved model keeps of the directory it came from.
 *
 * ztrain writes config.json from the keys it computes with (zt_hf_config_write),
 * and the weights.  A Hugging Face directory carries more, which transformers
 * reads and ztrain has no use for: the special token ids and any other inert key
 * of config.json (bos_token_id, eos_token_id, transformers_version, ...),
 * generation_config.json, and the tokenizer's files.  Trainer.save_model keeps
 * them; so does ztrain, through zt_hf_carry, after each save (the final model,
 * each checkpoint-N, merge-weights, init-model). */
#ifndef ZT_HF_CARRY_H
#define ZT_HF_CARRY_H

#include "../core/status.h"

/* Special token ids written into config.json (-1: leave the key as it is). */
typedef struct zt_hf_token_ids {
    int bos, eos, pad;
} zt_hf_token_ids;

#define ZT_HF_TOKEN_IDS_NONE {-1, -1, -1}

/* The tokenizer files a Hugging Face directory may hold, as save_pretrained
 * writes them; NULL-terminated. */
extern const char *const zt_hf_tokenizer_files[];

/* Complete the model directory dst (its config.json written by ztrain):
 *   - every key of src_config (a config.json path; NULL: none) that dst's
 *     config.json lacks is added with its value; keys ztrain wrote keep ztrain's
 *     value, and a "dtype" key follows the written "torch_dtype"; every number
 *     of both files is printed as its source token was (8.0 stays 8.0);
 *   - ids (NULL: none) set bos_token_id, eos_token_id, pad_token_id;
 *   - src_dir/generation_config.json (src_dir NULL: none) is copied;
 *   - the tokenizer files present in tok_dir (NULL: src_dir) are copied.
 * A file that is dst's own is left alone.  Each file is written atomically.
 * ZT_EINPUT names a source that cannot be read or is not a JSON object. */
int zt_hf_carry(const char *dst, const char *src_config, const char *src_dir, const char *tok_dir,
                const zt_hf_token_ids *ids, zt_err *err);

/* The usual call: a model written from the one in source_dir (NULL: none), with
 * the tokenizer of tokenizer_dir (NULL: source_dir's). */
int zt_hf_carry_model(const char *dst, const char *source_dir, const char *tokenizer_dir, zt_err *err);

/* Before a run that will save a model into dir: every file such a save writes
 * or replaces there (config.json, model.safetensors, its index, any
 * model-*.safetensors shard, generation_config.json, the tokenizer files) is
 * absent or a regular file (or a symlink to one): ZT_EINPUT naming the first
 * FIFO, device, socket or directory in the way (zt_check_output_path), so that
 * it is refused before the first step rather than after the last. */
int zt_hf_check_outputs(const char *dir, zt_err *err);

#endif
