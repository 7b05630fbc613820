/* test_hf_config.c — config.json as Hugging Face writes it reads to the Llama
 * hyper-parameters, with HF's defaults; every key ztrain would not honour is
 * refused by name; what ztrain writes reads back identically. */
#include <cjson/cJSON.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/mem.h"
#include "../src/model/config.h"
#include "test.h"
#include "tmpdir.h"

static char tmpdir[64];

static const char *P(const char *name) { return tmpdir_path(tmpdir, name); }

/* Parse json from memory (no file), named TMPDIR/config.json in messages. */
static int read_cfg(const char *json, zt_llama_config *c, zt_err *err)
{
    memset(c, 0, sizeof *c);
    return zt_hf_config_parse(P("config.json"), json, strlen(json), c, err);
}

/* Sizes every case needs; cases add hidden_size / heads (CORE has them). */
#define BASE "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"vocab_size\": 256"
#define CORE BASE ", \"hidden_size\": 64, \"num_attention_heads\": 4"

static void test_defaults(void)
{
    zt_llama_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_cfg("{" CORE "}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.hidden_size == 64 && c.intermediate_size == 128 && c.num_hidden_layers == 2);
    ZT_CHECK(c.num_attention_heads == 4 && c.vocab_size == 256);
    ZT_CHECK(c.num_key_value_heads == 4);     /* defaults to the head count */
    ZT_CHECK(c.head_dim == 16);               /* hidden / heads */
    ZT_CHECK(c.max_position_embeddings == 2048);
    ZT_CHECK(c.rms_norm_eps == 1e-6);
    ZT_CHECK(c.rope_theta == 10000.0);
    ZT_CHECK(c.tie_word_embeddings == 0);
    ZT_CHECK(c.initializer_range == 0.02);
    ZT_CHECK(c.torch_dtype == ZT_F32);
    ZT_CHECK(strcmp(c.model_type, "llama") == 0);
    /* null means "default" for the optional sizes, as in HF's constructor. */
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"num_key_value_heads\": null, \"head_dim\": null, \"torch_dtype\": null}",
                          &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.num_key_value_heads == 4 && c.head_dim == 16 && c.torch_dtype == ZT_F32);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_real_hf_configs(void)
{
    /* As transformers 4.4x writes a Llama (TinyLlama-like, GQA). */
    const char *llama =
        "{\n  \"_name_or_path\": \"x/y\",\n  \"architectures\": [\"LlamaForCausalLM\"],\n"
        "  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 1,\n"
        "  \"eos_token_id\": [2, 3],\n  \"pad_token_id\": null,\n  \"head_dim\": 64,\n"
        "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
        "  \"intermediate_size\": 5632,\n  \"max_position_embeddings\": 2048,\n  \"mlp_bias\": false,\n"
        "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 22,\n"
        "  \"num_key_value_heads\": 4,\n  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n"
        "  \"rope_scaling\": null,\n  \"rope_theta\": 10000.0,\n  \"tie_word_embeddings\": false,\n"
        "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.44.0\",\n"
        "  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n";
    zt_llama_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(read_cfg(llama, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.hidden_size == 2048 && c.intermediate_size == 5632 && c.num_hidden_layers == 22);
    ZT_CHECK(c.num_attention_heads == 32 && c.num_key_value_heads == 4 && c.head_dim == 64);
    ZT_CHECK(c.vocab_size == 32000 && c.rms_norm_eps == 1e-5 && c.rope_theta == 10000.0);
    ZT_CHECK(c.torch_dtype == ZT_BF16 && c.tie_word_embeddings == 0);

    const char *mistral =
        "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"sliding_window\": null,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 128, \"intermediate_size\": 256, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"vocab_size\": 1000, \"rope_theta\": 1000000.0,"
        " \"tie_word_embeddings\": true, \"dtype\": \"float16\", \"max_position_embeddings\": 4096}";
    ZT_CHECK_MSG(read_cfg(mistral, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(strcmp(c.model_type, "mistral") == 0);
    ZT_CHECK(c.num_attention_heads == 8 && c.num_key_value_heads == 2 && c.head_dim == 16);
    ZT_CHECK(c.rope_theta == 1e6 && c.tie_word_embeddings == 1 && c.torch_dtype == ZT_F16);
    ZT_CHECK(c.max_position_embeddings == 4096);
    /* As transformers 5.x saves them: RoPE settings under rope_parameters,
     * and MistralConfig's default 4096-token window (inert with 2048 positions). */
    const char *v5 =
        "{\"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 1, \"eos_token_id\": 2,"
        " \"head_dim\": 16, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 128, \"max_position_embeddings\": 2048, \"mlp_bias\": false,"
        " \"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2,"
        " \"num_key_value_heads\": 2, \"pad_token_id\": null, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-06,"
        " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"},"
        " \"tie_word_embeddings\": false, \"transformers_version\": \"5.24.0\", \"use_cache\": true,"
        " \"vocab_size\": 256, \"dtype\": \"bfloat16\", \"sliding_window\": 4096}";
    ZT_CHECK_MSG(read_cfg(v5, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.rope_theta == 500000.0 && c.num_key_value_heads == 2 && c.torch_dtype == ZT_BF16);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"rope_theta\": 5e5, \"rope_parameters\": {\"rope_theta\": 500000}}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.rope_theta == 500000.0);
    /* Keys that change nothing ztrain computes, as SmolLM2's export, transformers 5
     * and a user write them: accepted (and kept on save, test_config_corpus). */
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"_model_name_or_path\": \"x.gguf\", \"unk_token_id\": 0,"
                          " \"is_llama_config\": true, \"rope_interleaved\": false, \"my_key\": {\"a\": 1},"
                          " \"layer_types\": [\"full_attention\", \"full_attention\"]}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": 8,"
                          " \"layer_types\": [\"sliding_attention\", \"sliding_attention\"]}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.sliding_window == 8);
    /* the keys after an unknown one are read too */
    ZT_CHECK_MSG(read_cfg("{\"zz_first\": 1, " CORE ", \"rope_theta\": 5e5}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.rope_theta == 5e5 && c.hidden_size == 64);
    /* head_dim may differ from hidden / heads (as in some Mistral variants). */
    ZT_CHECK_MSG(read_cfg("{" BASE ", \"hidden_size\": 96, \"num_attention_heads\": 4, \"head_dim\": 32}",
                          &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.head_dim == 32);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_refused(void)
{
    static const struct {
        const char *label, *json, *word1, *word2;
    } cases[] = {
        {"quantization", "{" CORE ", \"quantization_config\": {}}", "quantization_config", "math"},
        {"partial rotary", "{" CORE ", \"partial_rotary_factor\": 0.5}", "partial_rotary_factor", "math"},
        {"softcapping", "{" CORE ", \"final_logit_softcapping\": 30.0}", "final_logit_softcapping", "math"},
        {"duplicate unknown key", "{" CORE ", \"foo\": 1, \"foo\": 2}", "\"foo\"", "duplicate"},
        {"rope_interleaved true", "{" CORE ", \"rope_interleaved\": true}", "rope_interleaved", "false"},
        {"is_llama_config string", "{" CORE ", \"is_llama_config\": \"yes\"}", "is_llama_config", "true or false"},
        {"layer_types sliding on llama", "{" CORE ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
         "layer_types", "mistral"},
        {"layer_types length", "{" CORE ", \"layer_types\": [\"full_attention\"]}", "layer_types", "num_hidden_layers"},
        {"layer_types kind", "{" CORE ", \"layer_types\": [\"full_attention\", \"chunked_attention\"]}",
         "layer_types", "chunked_attention"},
        {"layer_types full with window", "{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": 8,"
         " \"layer_types\": [\"full_attention\", \"full_attention\"]}", "layer_types", "every layer"},
        {"attention_bias true", "{" CORE ", \"attention_bias\": true}", "attention_bias", "false"},
        {"mlp_bias true", "{" CORE ", \"mlp_bias\": true}", "mlp_bias", "false"},
        {"hidden_act gelu", "{" CORE ", \"hidden_act\": \"gelu\"}", "hidden_act", "gelu"},
        {"rope_scaling linear", "{" CORE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}",
         "rope_scaling.type\" (got \"linear\")", "allowed: \"default\", \"llama3\""},
        {"rope_scaling yarn", "{" CORE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
         "rope_scaling.rope_type\" (got \"yarn\")", "allowed: \"default\", \"llama3\""},
        {"rope_scaling no type", "{" CORE ", \"rope_scaling\": {\"factor\": 4.0}}", "rope_scaling.factor", "llama3"},
        {"llama3 without original", "{" CORE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}}", "rope_scaling", "original_max_position_embeddings"},
        {"llama3 unknown member", "{" CORE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
         "\"beta_fast\": 32}}", "rope_scaling.beta_fast", "not supported"},
        {"llama3 factor 0", "{" CORE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0, "
         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
         "rope_scaling.factor", "positive"},
        {"llama3 high <= low", "{" CORE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
         "\"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
         "rope_scaling.high_freq_factor", "larger"},
        {"rope_scaling vs rope_parameters", "{" CORE ", \"rope_parameters\": "
         "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192}, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, "
         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
         "rope_parameters", "disagree"},
        {"qwen2 use_sliding_window", "{" CORE ", \"model_type\": \"qwen2\", \"use_sliding_window\": true}",
         "use_sliding_window", "false"},
        {"qwen2 head_dim", "{" CORE ", \"model_type\": \"qwen2\", \"head_dim\": 32}", "head_dim", "Qwen2"},
        {"use_mrope", "{" CORE ", \"model_type\": \"qwen2\", \"use_mrope\": true}", "use_mrope", "false"},
        {"llama sliding_window", "{" CORE ", \"sliding_window\": 1024}", "sliding_window", "mistral"},
        {"mistral window 0", "{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": 0}", "sliding_window",
         "positive"},
        {"mistral window -8", "{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": -8}", "sliding_window",
         "positive"},
        {"mistral window string", "{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": \"4096\"}",
         "sliding_window", "integer"},
        {"sliding_window < max", "{" CORE ", \"sliding_window\": 4096, \"max_position_embeddings\": 8192}",
         "sliding_window", "max_position_embeddings"},
        {"sliding_window float", "{" CORE ", \"sliding_window\": 4096.0}", "sliding_window", "integer"},
        {"rope_type llama3 without factors", "{" CORE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 5e5}}",
         "rope_parameters", "needs \"factor\""},
        {"rope_parameters factor", "{" CORE ", \"rope_parameters\": {\"rope_type\": \"default\", \"factor\": 8.0}}",
         "rope_parameters.factor", "only meaningful with rope_type \"llama3\""},
        {"rope_parameters yarn", "{" CORE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 8.0}}",
         "rope_parameters.rope_type", "allowed: \"default\", \"llama3\""},
        {"rope_theta disagree", "{" CORE ", \"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_theta\": 5e5}}",
         "rope_theta", "disagree"},
        {"rope_parameters list", "{" CORE ", \"rope_parameters\": [1]}", "rope_parameters", "object"},
        {"attention_dropout", "{" CORE ", \"attention_dropout\": 0.1}", "attention_dropout", "0"},
        {"pretraining_tp 2", "{" CORE ", \"pretraining_tp\": 2}", "pretraining_tp", "1"},
        {"pretraining_tp 1.0", "{" CORE ", \"pretraining_tp\": 1.0}", "pretraining_tp", "1"},
        {"hidden_size 64.0", "{" BASE ", \"hidden_size\": 64.0, \"num_attention_heads\": 4}", "hidden_size", "integer"},
        {"hidden_size 64.5", "{" BASE ", \"hidden_size\": 64.5, \"num_attention_heads\": 4}", "hidden_size", "integer"},
        {"hidden_size 6.4e1", "{" BASE ", \"hidden_size\": 6.4e1, \"num_attention_heads\": 4}", "hidden_size", "integer"},
        {"hidden_size string", "{" BASE ", \"hidden_size\": \"64\", \"num_attention_heads\": 4}", "hidden_size", "string"},
        {"hidden_size bool", "{" BASE ", \"hidden_size\": true, \"num_attention_heads\": 4}", "hidden_size", "integer"},
        {"hidden_size huge", "{" BASE ", \"hidden_size\": 3000000000, \"num_attention_heads\": 4}", "hidden_size", "range"},
        {"vocab negative", "{\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"vocab_size\": -5, "
                           "\"hidden_size\": 64, \"num_attention_heads\": 4}", "vocab_size", "positive"},
        {"nkv zero", "{" CORE ", \"num_key_value_heads\": 0}", "num_key_value_heads", "positive"},
        {"nh % nkv", "{" CORE ", \"num_key_value_heads\": 3}", "num_key_value_heads", "divisible"},
        {"odd head_dim", "{" BASE ", \"hidden_size\": 60, \"num_attention_heads\": 4}", "head_dim", "even"},
        {"odd explicit head_dim", "{" CORE ", \"head_dim\": 15}", "head_dim", "even"},
        {"hidden % heads", "{" BASE ", \"hidden_size\": 66, \"num_attention_heads\": 4}", "hidden_size", "divisible"},
        {"missing hidden_size", "{" BASE ", \"num_attention_heads\": 4}", "hidden_size", "missing"},
        {"duplicate key", "{" CORE ", \"hidden_size\": 64}", "hidden_size", "duplicate"},
        {"model_type gpt2", "{" CORE ", \"model_type\": \"gpt2\"}", "model_type", "gpt2"},
        {"torch_dtype int8", "{" CORE ", \"torch_dtype\": \"int8\"}", "torch_dtype", "float32"},
        {"dtype disagree", "{" CORE ", \"torch_dtype\": \"float32\", \"dtype\": \"bfloat16\"}", "dtype", "disagree"},
        {"rms_norm_eps 0", "{" CORE ", \"rms_norm_eps\": 0}", "rms_norm_eps", "positive"},
        {"rms_norm_eps string", "{" CORE ", \"rms_norm_eps\": \"1e-6\"}", "rms_norm_eps", "number"},
        {"rope_theta inf", "{" CORE ", \"rope_theta\": 1e999}", "rope_theta", "finite"},
        {"tie as number", "{" CORE ", \"tie_word_embeddings\": 1}", "tie_word_embeddings", "true or false"},
        {"eos as string", "{" CORE ", \"eos_token_id\": \"</s>\"}", "eos_token_id", "integer"},
        {"eos list with float", "{" CORE ", \"eos_token_id\": [1, 2.5]}", "eos_token_id", "integer"},
        {"architectures string", "{" CORE ", \"architectures\": \"LlamaForCausalLM\"}", "architectures", "list"},
        {"not JSON", "{" CORE ",}", "config.json", "JSON"},
        {"trailing comma free garbage", "{" CORE "} x", "config.json", "JSON"},
        {"JSON array", "[1, 2]", "config.json", "object"},
        {"empty file", "", "config.json", "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_llama_config c;
        zt_err err = {0};
        int rc = read_cfg(cases[i].json, &c, &err);
        if (getenv("ZT_TEST_VERBOSE"))
            fprintf(stderr, "  [%s] %s\n", cases[i].label, err.msg);
        ZT_CHECK_MSG(rc == ZT_EINPUT, "%s: rc %d: %s", cases[i].label, rc, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, P("config.json")) != NULL, "%s: no path: %s", cases[i].label, err.msg);
        ZT_CHECK_MSG(strstr(err.msg, cases[i].word1) && strstr(err.msg, cases[i].word2),
                     "%s: expected \"%s\" and \"%s\" in: %s", cases[i].label, cases[i].word1,
                     cases[i].word2, err.msg);
    }
    zt_llama_config c;
    zt_err err = {0};
    ZT_CHECK(zt_hf_config_read(P("absent.json"), &c, &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "absent.json") != NULL);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Mistral's sliding_window as transformers reads it: an integer is the window, null is
 * none, and an absent key is MistralConfig's default (4096).  Llama never applies one. */
static void test_sliding_window(void)
{
    zt_llama_config c;
    zt_err err = {0};
    /* Mistral-7B-v0.1: a 4096-token window over 32768 positions */
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": 4096,"
                          " \"max_position_embeddings\": 32768}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.sliding_window == 4096 && zt_llama_attention_window(&c) == 4096);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": 3}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(zt_llama_attention_window(&c) == 3);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"model_type\": \"mistral\"}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(zt_llama_attention_window(&c) == 4096);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"model_type\": \"mistral\", \"sliding_window\": null}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.sliding_window == 0 && zt_llama_attention_window(&c) == 0);
    /* Llama: a window that masks nothing is accepted and kept, never applied */
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"sliding_window\": 4096}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.sliding_window == 4096 && zt_llama_attention_window(&c) == 0);

    /* written and read back: Mistral with a window, Mistral without (null, not absent,
     * which would mean 4096), Llama with its inert window */
    const char *path = P("window.json");
    zt_llama_config w = {64, 128, 2, 4, 2, 16, 256, 512, 1e-6, 10000.0, 0, 0.02, ZT_F32, "mistral", 50, 0, 0, 0, 0, 0, 0, 0};
    zt_llama_config r;
    ZT_CHECK_MSG(zt_hf_config_write(path, &w, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(zt_hf_config_read(path, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.sliding_window == 50 && zt_llama_attention_window(&r) == 50);
    w.sliding_window = 0;
    ZT_CHECK(zt_hf_config_write(path, &w, &err) == ZT_OK && zt_hf_config_read(path, &r, &err) == ZT_OK);
    ZT_CHECK(r.sliding_window == 0);
    snprintf(w.model_type, sizeof w.model_type, "llama");
    w.sliding_window = 4096;
    ZT_CHECK(zt_hf_config_write(path, &w, &err) == ZT_OK && zt_hf_config_read(path, &r, &err) == ZT_OK);
    ZT_CHECK(r.sliding_window == 4096 && zt_llama_attention_window(&r) == 0);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_check(void)
{
    zt_llama_config c = {64, 128, 2, 8, 2, 8, 256, 512, 1e-6, 10000.0, 0, 0.02, ZT_BF16, "llama", 0, 0, 0, 0, 0, 0, 0, 0};
    zt_err err = {0};
    ZT_CHECK_MSG(zt_llama_config_check(&c, "init-model", &err) == ZT_OK, "%s", err.msg);
    c.num_key_value_heads = 3;
    ZT_CHECK(zt_llama_config_check(&c, "init-model", &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "init-model") && strstr(err.msg, "num_key_value_heads"));
    c.num_key_value_heads = 2, c.head_dim = 7;
    ZT_CHECK(zt_llama_config_check(&c, "x", &err) == ZT_EINPUT && strstr(err.msg, "head_dim"));
    c.head_dim = 8, c.num_hidden_layers = 0;
    ZT_CHECK(zt_llama_config_check(&c, "x", &err) == ZT_EINPUT && strstr(err.msg, "num_hidden_layers"));
    c.num_hidden_layers = 2;
    snprintf(c.model_type, sizeof c.model_type, "gpt2");
    ZT_CHECK(zt_llama_config_check(&c, "x", &err) == ZT_EINPUT && strstr(err.msg, "model_type"));
}

static void test_write_read_back(void)
{
    zt_llama_config c = {96, 200, 3, 6, 2, 24, 300, 1024, 1e-5, 500000.0, 1, 0.006, ZT_BF16, "llama", 0, 0, 0, 0, 0, 0, 0, 0};
    zt_err err = {0};
    const char *path = P("written.json");
    ZT_CHECK_MSG(zt_hf_config_write(path, &c, &err) == ZT_OK, "%s", err.msg);
    zt_llama_config r;
    ZT_CHECK_MSG(zt_hf_config_read(path, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(r.hidden_size == 96 && r.intermediate_size == 200 && r.num_hidden_layers == 3);
    ZT_CHECK(r.num_attention_heads == 6 && r.num_key_value_heads == 2 && r.head_dim == 24);
    ZT_CHECK(r.vocab_size == 300 && r.max_position_embeddings == 1024);
    /* Doubles are printed with enough digits to come back bit for bit. */
    ZT_CHECK(r.rms_norm_eps == 1e-5 && r.rope_theta == 500000.0 && r.initializer_range == 0.006);
    ZT_CHECK(r.tie_word_embeddings == 1 && r.torch_dtype == ZT_BF16);
    ZT_CHECK(strcmp(r.model_type, "llama") == 0);

    /* What HF needs to pick the class and dtype. */
    FILE *f = fopen(path, "rb");
    char text[4096] = {0};
    ZT_CHECK(f && fread(text, 1, sizeof text - 1, f) > 0);
    if (f)
        fclose(f);
    cJSON *j = cJSON_Parse(text);
    ZT_CHECK(j != NULL);
    cJSON *arch = cJSON_GetObjectItem(j, "architectures");
    ZT_CHECK(cJSON_IsArray(arch) && cJSON_GetArraySize(arch) == 1 &&
             strcmp(cJSON_GetArrayItem(arch, 0)->valuestring, "LlamaForCausalLM") == 0);
    ZT_CHECK(strcmp(cJSON_GetObjectItem(j, "torch_dtype")->valuestring, "bfloat16") == 0);
    ZT_CHECK(strcmp(cJSON_GetObjectItem(j, "hidden_act")->valuestring, "silu") == 0);
    ZT_CHECK(cJSON_GetObjectItem(j, "num_key_value_heads")->valueint == 2);
    cJSON_Delete(j);

    /* Mistral keeps its class name. */
    snprintf(c.model_type, sizeof c.model_type, "mistral");
    c.torch_dtype = ZT_F32;
    ZT_CHECK(zt_hf_config_write(path, &c, &err) == ZT_OK);
    ZT_CHECK(zt_hf_config_read(path, &r, &err) == ZT_OK && strcmp(r.model_type, "mistral") == 0 &&
             r.torch_dtype == ZT_F32);

    /* An invalid config is refused before any file is written. */
    c.num_key_value_heads = 4;
    ZT_CHECK(zt_hf_config_write(P("never.json"), &c, &err) == ZT_EINPUT);
    ZT_CHECK(access(P("never.json"), F_OK) != 0);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* Llama 3.1 / 3.2 and Qwen2.5 as their config.json files on the Hub have them (sizes
 * shrunk), and as transformers 5 writes Llama 3.1's; each reads to the scaling or the
 * biases, and what ztrain writes reads back to the same, with the class name. */
static void test_llama3_and_qwen2(void)
{
    zt_llama_config c;
    zt_err err = {0};
    const char *llama32 =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 16,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 128,"
        " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
        " \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2,"
        " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0,"
        " \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192,"
        " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true,"
        " \"vocab_size\": 256}";
    ZT_CHECK_MSG(read_cfg(llama32, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.rope_llama3 == 1 && c.rope_factor == 32.0 && c.rope_low_freq_factor == 1.0 &&
             c.rope_high_freq_factor == 4.0 && c.rope_original_max_position_embeddings == 8192.0);
    ZT_CHECK(c.rope_theta == 500000.0 && !c.qkv_bias && zt_llama_attention_window(&c) == 0);
    /* the older spelling "type", and transformers 5's rope_parameters with rope_theta inside */
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                          " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}", &c, &err) == ZT_OK,
                 "%s", err.msg);
    ZT_CHECK(c.rope_llama3 == 1 && c.rope_factor == 8.0);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
                          " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                          " \"original_max_position_embeddings\": 8192}}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.rope_llama3 == 1 && c.rope_theta == 500000.0 && c.rope_original_max_position_embeddings == 8192.0);
    ZT_CHECK_MSG(read_cfg("{" CORE ", \"rope_scaling\": {\"rope_type\": \"default\"}}", &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.rope_llama3 == 0);

    const char *qwen25 =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 128, \"max_position_embeddings\": 32768, \"max_window_layers\": 24,"
        " \"model_type\": \"qwen2\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2,"
        " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
        " \"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.40.1\", \"use_cache\": true, \"use_sliding_window\": false,"
        " \"vocab_size\": 256}";
    ZT_CHECK_MSG(read_cfg(qwen25, &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(c.qkv_bias == 1 && strcmp(c.model_type, "qwen2") == 0 && c.head_dim == 16);
    ZT_CHECK(c.max_window_layers == 24 && zt_llama_attention_window(&c) == 0); /* no use_sliding_window */

    /* written and read back, with the class transformers picks */
    const char *path = P("family.json");
    static const char *const arch[2] = {"LlamaForCausalLM", "Qwen2ForCausalLM"};
    for (int k = 0; k < 2; k++) {
        ZT_CHECK(read_cfg(k ? qwen25 : llama32, &c, &err) == ZT_OK);
        zt_llama_config r;
        ZT_CHECK_MSG(zt_hf_config_write(path, &c, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(zt_hf_config_read(path, &r, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK(r.rope_llama3 == c.rope_llama3 && r.rope_factor == c.rope_factor &&
                 r.rope_low_freq_factor == c.rope_low_freq_factor && r.rope_high_freq_factor == c.rope_high_freq_factor &&
                 r.rope_original_max_position_embeddings == c.rope_original_max_position_embeddings);
        ZT_CHECK(r.qkv_bias == c.qkv_bias && strcmp(r.model_type, c.model_type) == 0 &&
                 r.max_window_layers == c.max_window_layers && r.sliding_window == c.sliding_window);
        FILE *f = fopen(path, "rb");
        char text[4096] = {0};
        ZT_CHECK(f && fread(text, 1, sizeof text - 1, f) > 0);
        if (f)
            fclose(f);
        cJSON *j = cJSON_Parse(text);
        cJSON *a = j ? cJSON_GetObjectItem(j, "architectures") : NULL;
        ZT_CHECK_MSG(a && strcmp(cJSON_GetArrayItem(a, 0)->valuestring, arch[k]) == 0, "%s", text);
        cJSON *rs = j ? cJSON_GetObjectItem(j, "rope_scaling") : NULL;
        if (k == 0) {
            cJSON *t = cJSON_GetObjectItem(rs, "rope_type");
            ZT_CHECK_MSG(cJSON_IsObject(rs) && t && strcmp(t->valuestring, "llama3") == 0 &&
                         cJSON_GetObjectItem(rs, "factor")->valuedouble == 32.0, "%s", text);
        } else {
            /* Qwen2Config has no attention_bias: the class implies the biases */
            ZT_CHECK_MSG(cJSON_IsNull(rs) && !cJSON_GetObjectItem(j, "attention_bias") &&
                         cJSON_IsFalse(cJSON_GetObjectItem(j, "use_sliding_window")), "%s", text);
        }
        cJSON_Delete(j);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* zt_llama_config_digest (what ranks compare before training together): every
 * field that changes the numbers moves it, Llama 3.1's rope factors and Qwen2's
 * biases included; the fields that change nothing a step computes do not. */
static void test_config_digest(void)
{
    zt_llama_config base, c;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_hf_config_read("tests/fixtures/llama3_rope/config.json", &base, &err) == ZT_OK, "%s", err.msg);
    const uint64_t d0 = zt_llama_config_digest(&base);
#define MOVES(what, change)                                                                      \
    do {                                                                                         \
        c = base;                                                                                \
        change;                                                                                  \
        ZT_CHECK_MSG(zt_llama_config_digest(&c) != d0, "the digest ignores %s", what);           \
    } while (0)
#define KEEPS(what, change)                                                                      \
    do {                                                                                         \
        c = base;                                                                                \
        change;                                                                                  \
        ZT_CHECK_MSG(zt_llama_config_digest(&c) == d0, "the digest depends on inert %s", what);  \
    } while (0)
    MOVES("hidden_size", c.hidden_size *= 2);
    MOVES("intermediate_size", c.intermediate_size++);
    MOVES("num_hidden_layers", c.num_hidden_layers++);
    MOVES("num_attention_heads", c.num_attention_heads *= 2);
    MOVES("num_key_value_heads", c.num_key_value_heads = 4);
    MOVES("head_dim", c.head_dim = 8);
    MOVES("vocab_size", c.vocab_size++);
    MOVES("tie_word_embeddings", c.tie_word_embeddings = 0);
    MOVES("rms_norm_eps", c.rms_norm_eps = 1e-6);
    MOVES("rope_theta", c.rope_theta = 10000);
    MOVES("rope_scaling (llama3 off)", c.rope_llama3 = 0);
    MOVES("rope_scaling.factor", c.rope_factor = 16);
    MOVES("rope_scaling.low_freq_factor", c.rope_low_freq_factor = 2);
    MOVES("rope_scaling.high_freq_factor", c.rope_high_freq_factor = 8);
    MOVES("rope_scaling.original_max_position_embeddings", c.rope_original_max_position_embeddings = 32);
    MOVES("qkv_bias", c.qkv_bias = 1);
    MOVES("a Mistral window", (strcpy(c.model_type, "mistral"), c.sliding_window = 16));
    KEEPS("max_position_embeddings", c.max_position_embeddings *= 2);
    KEEPS("initializer_range", c.initializer_range = 0.02);
    KEEPS("torch_dtype", c.torch_dtype = ZT_BF16);
    KEEPS("max_window_layers", c.max_window_layers = 7);
    KEEPS("a Llama config's inert sliding_window", c.sliding_window = 4096);
    KEEPS("a Mistral config without a window", strcpy(c.model_type, "mistral"));
    /* without llama3 scaling its four numbers are never read */
    base.rope_llama3 = 0;
    const uint64_t d1 = zt_llama_config_digest(&base);
    c = base;
    c.rope_factor = 99;
    ZT_CHECK(zt_llama_config_digest(&c) == d1);
#undef MOVES
#undef KEEPS
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_cfg_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_defaults);
    ZT_RUN(test_real_hf_configs);
    ZT_RUN(test_refused);
    ZT_RUN(test_sliding_window);
    ZT_RUN(test_check);
    ZT_RUN(test_write_read_back);
    ZT_RUN(test_llama3_and_qwen2);
    ZT_RUN(test_config_digest);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
