/* gguf_tokenizer.h — a GGUF file's tokenizer (tokenizer.ggml.* metadata) as the
 * Hugging Face files transformers' GGUF loader builds from it (docs/text.md).
 *
 * Supported: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token
 * types) and "llama" (SentencePiece-style BPE: Metaspace "first", byte fallback;
 * merges from the file, or recovered from tokenizer.ggml.scores as transformers
 * recovers them: every cut of a token into two tokens, ranked by the token's
 * score, then the longer left half, then the longer right half).
 * For gpt2, tokenizer.ggml.pre chooses the pre-tokenizer as transformers does:
 * the Llama-3 split for llama3, llama-v3, llama-bpe, falcon3, smaug-bpe, dbrx and
 * the other names it maps to that pattern; GPT-2's ByteLevel regex for every
 * name it does not map (smollm, gpt2, default, none).  Names it maps to a
 * pattern ztrain's tokenizer does not implement (qwen2, tekken, gpt-4o, ...) and
 * other models (t5, gemma's) are refused by name.
 * Control tokens (token type 3) become special added tokens (for llama also
 * <unk>, <s> and </s>, as transformers' LlamaTokenizer adds them), user-defined ones
 * (type 4) plain added tokens.  A llama tokenizer adds bos unless the file says
 * otherwise (tokenizer.ggml.add_bos_token), as llama.cpp and transformers do. */
#ifndef ZT_GGUF_TOKENIZER_H
#define ZT_GGUF_TOKENIZER_H

#include "../core/status.h"
#include "../io/gguf.h"

/* Write DIR/tokenizer.json, DIR/tokenizer_config.json (bos/eos/pad/unk tokens,
 * add_bos_token/add_eos_token, tokenizer.chat_template as "chat_template") and
 * DIR/generation_config.json (the bos/eos/pad ids), each atomically.  *bos,
 * *eos, *pad receive the special ids (-1: none), for config.json. */
int zt_gguf_tokenizer_save(const zt_gguf *g, const char *dir, int *bos, int *eos, int *pad, zt_err *err);

#endif
