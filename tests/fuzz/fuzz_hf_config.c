/* fuzz_hf_config.c — config.json (zt_hf_config_read) on arbitrary bytes.
 * Properties: a refusal is exit 2 naming the file; an accepted config passes
 * zt_llama_config_check, and written back with zt_hf_config_write it reads as
 * the same config. */
#include "fuzz.h"

#include "../../src/model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("config.json", data, size);
    zt_err err = {0};
    zt_llama_config a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int rc = zt_hf_config_read(path, &a, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    FUZZ_REQUIRE(zt_llama_config_check(&a, path, &err) == ZT_OK, "accepted, then fails its check: %s", err.msg);
    char back[256];
    snprintf(back, sizeof back, "%s/back.json", fuzz_dir());
    FUZZ_REQUIRE(zt_hf_config_write(back, &a, &err) == ZT_OK, "writing back failed: %s", err.msg);
    FUZZ_REQUIRE(zt_hf_config_read(back, &b, &err) == ZT_OK, "reading back failed: %s", err.msg);
    FUZZ_REQUIRE(a.hidden_size == b.hidden_size && a.intermediate_size == b.intermediate_size &&
                     a.num_hidden_layers == b.num_hidden_layers && a.num_attention_heads == b.num_attention_heads &&
                     a.num_key_value_heads == b.num_key_value_heads && a.head_dim == b.head_dim &&
                     a.vocab_size == b.vocab_size && a.max_position_embeddings == b.max_position_embeddings &&
                     a.rms_norm_eps == b.rms_norm_eps && a.rope_theta == b.rope_theta &&
                     a.tie_word_embeddings == b.tie_word_embeddings && a.initializer_range == b.initializer_range &&
                     a.torch_dtype == b.torch_dtype && !strcmp(a.model_type, b.model_type),
                 "the config changed in the write-back (hidden %d/%d, eps %g/%g, theta %g/%g)", a.hidden_size,
                 b.hidden_size, a.rms_norm_eps, b.rms_norm_eps, a.rope_theta, b.rope_theta);
    remove(back);
    return 0;
}
