/* config.h — the Llama architecture hyper-parameters (HF LlamaConfig / MistralConfig). */
#ifndef ZT_MODEL_CONFIG_H
#define ZT_MODEL_CONFIG_H

#include <stdint.h>
#include <string.h>

#include "../core/dtype.h"
#include "../core/status.h"

typedef struct zt_llama_config {
    int hidden_size;             /* C */
    int intermediate_size;       /* F */
    int num_hidden_layers;       /* L */
    int num_attention_heads;     /* nh */
    int num_key_value_heads;     /* nkv, divides nh (GQA); defaults to nh */
    int head_dim;                /* hd; defaults to C / nh */
    int vocab_size;              /* V */
    int max_position_embeddings;
    double rms_norm_eps;         /* default 1e-6 */
    double rope_theta;           /* default 10000 */
    int tie_word_embeddings;     /* default 0 (HF LlamaConfig's default is False) */
    double initializer_range;    /* default 0.02 */
    zt_dtype torch_dtype;        /* default fp32 */
    char model_type[16];         /* "llama", "mistral" or "qwen2" */
    int sliding_window;          /* config.json's sliding_window; 0 for null (no window) */
    /* rope_scaling {"rope_type": "llama3", ...} (Llama 3.1 / 3.2): rope_llama3 1 and its
     * four numbers, which rescale RoPE's low frequencies (kernels/rope_freq.h); 0: none */
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    double rope_original_max_position_embeddings;
    /* q, k and v projections carry biases (Qwen2ForCausalLM: always; o_proj has none) */
    int qkv_bias;
    int max_window_layers;       /* Qwen2's, kept for the round trip; inert without use_sliding_window */
} zt_llama_config;

/* The attention window the model computes with (kernels.h: 0 for none).  transformers
 * applies sliding_window in MistralForCausalLM only (LlamaModel never reads it), and
 * the reader refuses a Llama config whose window would matter, so only a Mistral
 * config has one. */
static inline int zt_llama_attention_window(const zt_llama_config *c)
{
    return strcmp(c->model_type, "mistral") == 0 ? c->sliding_window : 0;
}

/* A 64-bit digest of every field that changes what the model computes (sizes, eps,
 * RoPE and its llama3 scaling, tied lm_head, q/k/v biases, the attention window),
 * and of none that does not (config.c lists both): ranks that must compute the
 * same model compare it (train/trainer.c).  One home, so a new field is not
 * forgotten: config.c's size check fails the build until the field is sorted. */
uint64_t zt_llama_config_digest(const zt_llama_config *c);

/* Read config.json.  Known keys that change nothing ztrain computes (architectures,
 * token ids, transformers_version, use_cache, ...) are accepted; keys whose
 * non-default values ztrain does not implement (attention_bias, mlp_bias,
 * pretraining_tp, hidden_act other than silu, attention_dropout, Qwen2's
 * use_sliding_window) are accepted only at their inert value; rope_scaling (and
 * transformers 5's rope_parameters) only as null, rope_type "default" or "llama3";
 * layer_types only as ztrain's attention (all "full_attention", or all
 * "sliding_attention" with Mistral's window).  Keys of other architectures that
 * change the math (quantization_config, partial_rotary_factor, ...) are refused by
 * name; any other key is accepted as transformers accepts it, unused, with one
 * line on stderr naming it (once per file and process), and a saved model keeps
 * it (io/hf_carry.h).  model_type "qwen2" (Qwen2ForCausalLM) sets qkv_bias.
 * sliding_window is Mistral's window (a positive integer or null; absent means
 * MistralConfig's default, 4096); a Llama config may carry one only where it masks
 * nothing (at least max_position_embeddings), since transformers' Llama ignores it.  Sizes are checked for consistency (nh % nkv == 0, hd even, all
 * positive).  Errors: ZT_EINPUT naming the file and key. */
int zt_hf_config_read(const char *path, zt_llama_config *cfg, zt_err *err);
/* The same from len bytes of text already in memory; name stands for the file in
 * messages.  It prints no line about unknown keys. */
int zt_hf_config_parse(const char *name, const void *text, size_t len, zt_llama_config *cfg, zt_err *err);
/* Write config.json (atomic), with architectures/model_type so HF loads it. */
int zt_hf_config_write(const char *path, const zt_llama_config *cfg, zt_err *err);
/* Validate sizes (used by read, and by anything that builds a config in code). */
int zt_llama_config_check(const zt_llama_config *cfg, const char *where, zt_err *err);

#endif
