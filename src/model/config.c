/* config.c — what of a model's configuration changes the numbers (see config.h). */
#include "config.h"

#include <stddef.h>

/* A field added to zt_llama_config must be sorted here: hashed by
 * zt_llama_config_digest if it changes what the model computes, listed under
 * "not hashed" below if it does not.  This size (LP64: x86-64, aarch64) is the
 * tripwire that sends whoever adds one to this file. */
_Static_assert(sizeof(void *) != 8 || sizeof(zt_llama_config) == 136,
               "zt_llama_config changed: decide whether zt_llama_config_digest must hash the new field, "
               "then update this size");

/* FNV-1a, 64 bits, over n bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Hashed: every size, the norm's epsilon, RoPE's base and Llama 3.1's scaling (the
 * four numbers only when it is on: rope_freq.h reads them only then), the tied
 * lm_head, the q/k/v biases, and the attention window the model applies (Mistral's
 * sliding_window; a Llama or Qwen2 config's is inert, zt_llama_attention_window).
 * Not hashed, since they change nothing a step computes: max_position_embeddings
 * (a bound on T, which the batch already carries), initializer_range (init-model
 * only), torch_dtype (the load dtype, resolved into the precision plan),
 * model_type beyond the window (the class name written back), max_window_layers
 * (inert without use_sliding_window). */
uint64_t zt_llama_config_digest(const zt_llama_config *c)
{
    const int ints[] = {c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
                        c->num_key_value_heads, c->head_dim, c->vocab_size, c->tie_word_embeddings,
                        c->qkv_bias, zt_llama_attention_window(c), c->rope_llama3 != 0};
    uint64_t h = fnv(0xcbf29ce484222325ull, ints, sizeof ints);
    const double dbls[] = {c->rms_norm_eps, c->rope_theta};
    h = fnv(h, dbls, sizeof dbls);
    if (c->rope_llama3) {
        const double rope[] = {c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                               c->rope_original_max_position_embeddings};
        h = fnv(h, rope, sizeof rope);
    }
    return h;
}
