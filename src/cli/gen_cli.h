/* gen_cli.h — what `generate` and `chat` share: the decoding settings resolved
 * from flags and generation_config.json, and the streaming of tokens to stdout. */
#ifndef ZT_GEN_CLI_H
#define ZT_GEN_CLI_H

#include <stddef.h>

#include "../core/dtype.h"
#include "../infer/generate.h"
#include "../model/config.h"

/* A flag's value when given (>= 0; do_sample 0/1), else generation_config.json's,
 * else transformers' GenerationConfig default. */
zt_sampling zt_gen_sampling(const zt_gen_defaults *d, int do_sample, double temperature, int top_k, double top_p);
/* zt_gen_text's decode for a zt_tokenizer (ctx): special tokens print nothing. */
size_t zt_gen_tok_decode(void *ctx, int id, char *buf, size_t cap);
void zt_gen_emit_stdout(void *ctx, const char *text, size_t n);
/* The compute dtype: --torch_dtype NAME when given (fp32 or bf16), else the
 * config's torch_dtype (bf16, or fp32 for any other); then refuse, before
 * allocating, a model whose weights and a KV cache of longest positions (capped
 * at max_position_embeddings) do not fit (--max_memory, or the device's
 * available memory). */
int zt_gen_compute(const zt_llama_config *cfg, const char *dtype_name, long longest, const char *device,
                   const char *max_memory, zt_dtype *compute, zt_err *err);

#endif
