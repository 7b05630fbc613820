/* gguf_export.h — a Hugging Face model directory as one GGUF v3 file, the format
 * llama.cpp and Ollama run (`ztrain export --format gguf`).
 *
 * What the file holds, as llama.cpp's own converter writes a LlamaForCausalLM
 * (and a MistralForCausalLM) or a Qwen2ForCausalLM:
 *   - metadata: general.architecture "llama" (or "qwen2"), general.name,
 *     general.file_type, general.quantization_version, and llama.* (or qwen2.*):
 *     block_count, context_length,
 *     embedding_length, feed_forward_length, attention.head_count(_kv),
 *     attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
 *     vocab_size; attention.key_length/value_length where head_dim is not
 *     hidden_size / heads;
 *   - every weight under its GGUF name (gguf_format.h's map).  q_proj and k_proj
 *     rows are reordered per head: HF's RoPE rotates the pairs (i, i + hd/2) of a
 *     head, llama.cpp's the adjacent pairs (2i, 2i + 1), so output row
 *     h*hd + 2i + s holds input row h*hd + s*hd/2 + i (s = 0, 1; k with the KV
 *     heads).  A reader that undoes it (gguf-in, transformers) gets HF's rows back.
 *     Qwen2's rows stay as they are (llama.cpp's qwen2 rotates as HF does), and
 *     its q/k/v biases go in as attn_q/k/v.bias;
 *   - 1-D tensors (the norms) in F32; 2-D ones in the outtype.  Q8_0 is ggml's
 *     reference quantize_row_q8_0: per block of 32, d = max|x| / 127, q = round(x / d)
 *     (half away from zero, x times the float 1/d), d stored as f16; a matrix whose
 *     rows are not a multiple of 32 falls back to F16, as the converter does;
 *   - Llama 3.1's rope scaling as the rope_freqs.weight tensor (hd/2 factors);
 *   - the tokenizer of DIR/tokenizer.json: a byte-level BPE as
 *     tokenizer.ggml.model "gpt2" (tokens, token_type, merges, the pre-tokenizer's
 *     llama.cpp name), a SentencePiece-style BPE (byte fallback) as "llama" (the
 *     same, byte pieces typed as bytes, and scores: -k for the token merge k
 *     makes, so llama.cpp's best-score-first merging follows BPE's order); its
 *     special token ids, add_bos_token, and tokenizer_config.json's chat_template.
 * The file is written atomically (core/fs.h), streamed one tensor at a time. */
#ifndef ZT_GGUF_EXPORT_H
#define ZT_GGUF_EXPORT_H

#include "../core/status.h"

typedef enum zt_gguf_outtype { ZT_GGUF_OUT_F32, ZT_GGUF_OUT_F16, ZT_GGUF_OUT_BF16, ZT_GGUF_OUT_Q8_0 } zt_gguf_outtype;

/* "f32", "f16", "bf16", "q8_0" -> *out; -1 for another name. */
int zt_gguf_outtype_parse(const char *s, zt_gguf_outtype *out);

typedef struct zt_gguf_export_info {
    int ntensors;
    int tokenizer;          /* 1 when the tokenizer went into the file */
    int f16_fallbacks;      /* Q8_0 matrices written in F16 (rows not a multiple of 32) */
    long long bytes;        /* the file's size */
} zt_gguf_export_info;

/* Write the model in model_dir (config.json, safetensors; the tokenizer files of
 * tok_dir, NULL: model_dir's) to path.  ZT_EINPUT names the file, key or tensor
 * that cannot be exported (a Mistral window that masks anything: llama.cpp's llama
 * architecture has none). */
int zt_gguf_export(const char *model_dir, const char *tok_dir, const char *path, zt_gguf_outtype type,
                   zt_gguf_export_info *info, zt_err *err);

#endif
