/* generate.c — `ztrain generate`: continue a prompt with a trained model, printing
 * the continuation to stdout token by token as it is generated. */
#include <stdio.h>
#include <string.h>

#include "../core/mem.h"
#include "../infer/generate.h"
#include "../io/hf_model.h"
#include "commands.h"
#include "flags.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_EOS 16

/* Without a tokenizer, ids are bytes (vocabulary 256, as .txt training data). */
static size_t byte_decode(void *ctx, int id, char *buf, size_t cap)
{
    (void)ctx;
    if (cap >= 1)
        buf[0] = (char)(unsigned char)id;
    return 1;
}

static void emit_stdout(void *ctx, const char *text, size_t n)
{
    (void)ctx;
    fwrite(text, 1, n, stdout);
    fflush(stdout); /* stream: each token is shown as soon as it exists */
}

int zt_cmd_generate(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *prompt = NULL, *stop = NULL, *dtype_name = NULL;
    int max_new = 64, top_k = 50, threads = 0;
    double temperature = 0.0, top_p = 1.0;
    long seed = 42;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "Hugging Face model directory (config.json + safetensors)", 1, 0, 0},
        {"prompt", ZT_FLAG_STR, &prompt, "the text to continue", 1, 0, 0},
        {"max_new_tokens", ZT_FLAG_INT, &max_new, "tokens to generate at most (default 64)", 0, 1 << 24, 0},
        {"temperature", ZT_FLAG_DOUBLE, &temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)", 0, 1e6, 0},
        {"top_k", ZT_FLAG_INT, &top_k, "sampling: keep the k most likely tokens (default 50, as HF; 0 = off)", 0, 1 << 30, 0},
        {"top_p", ZT_FLAG_DOUBLE, &top_p, "sampling: keep the smallest set with this much probability (default 1 = off)", 0, 1, 0},
        {"seed", ZT_FLAG_LONG, &seed, "seed of the sampler (default 42): the same seed gives the same text", 0, 9.2e18, 0},
        {"stop", ZT_FLAG_STR, &stop, "stop once the continuation contains this string (it is printed)", 1, 0, 0},
        {"torch_dtype", ZT_FLAG_STR, &dtype_name, "compute in fp32 | bf16 (default: the config's torch_dtype)", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), "usage: ztrain generate --model DIR --prompt TEXT [flags]\n"
                       "Prints the continuation to stdout as it is generated; timing goes to stderr.");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc, argv, "ztrain generate", err);
    if (rc)
        return rc;
    if (!model || !prompt)
        return zt_fail(err, ZT_EINPUT, "ztrain generate: --model and --prompt are required");
    zt_llama_config cfg;
    if ((rc = zt_hf_read_config_dir(model, &cfg, err)))
        return rc;
    zt_dtype compute = cfg.torch_dtype == ZT_BF16 ? ZT_BF16 : ZT_F32;
    if (dtype_name && (zt_dtype_parse(dtype_name, &compute) != 0 || compute == ZT_F16))
        return zt_fail(err, ZT_EINPUT, "--torch_dtype: expected fp32 or bf16 (float32, bfloat16), got '%s'",
                       dtype_name);
    if (cfg.vocab_size != 256)
        return zt_fail(err, ZT_EINPUT, "%s: vocab_size is %d; without a tokenizer the ids are bytes, "
                       "which needs vocab_size 256", model, cfg.vocab_size);
    int n_prompt = (int)strlen(prompt);
    if (n_prompt == 0)
        return zt_fail(err, ZT_EINPUT, "--prompt is empty: generation needs at least one token");
    if ((long)n_prompt + max_new > cfg.max_position_embeddings)
        return zt_fail(err, ZT_EINPUT, "--prompt (%d tokens) plus --max_new_tokens %d exceed the model's "
                       "max_position_embeddings %d (%s/config.json)", n_prompt, max_new,
                       cfg.max_position_embeddings, model);
    int eos[MAX_EOS], n_eos = 0;
    if ((rc = zt_gen_read_eos(model, cfg.vocab_size, eos, MAX_EOS, &n_eos, err)))
        return rc;
    int nthreads = zt_cli_set_threads(threads);
    size_t id_bytes = ((size_t)n_prompt + (size_t)max_new + 1) * sizeof(int);
    int *ids = zt_alloc(ZT_MEM_OTHER, id_bytes);
    if (!ids)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (unsigned char)prompt[i];
    zt_infer m;
    if ((rc = zt_infer_open(&m, model, compute, n_prompt + max_new, nthreads, err))) {
        zt_free(ZT_MEM_OTHER, ids, id_bytes);
        return rc;
    }
    zt_gen_params p = {max_new, {temperature, top_k, top_p}, (uint64_t)seed, stop, eos, n_eos};
    zt_gen_text text = {byte_decode, emit_stdout, NULL};
    zt_gen_result res;
    rc = zt_generate(&m, ids, n_prompt, &p, &text, ids + n_prompt, &res, err);
    if (rc == ZT_OK) {
        static const char *why[] = {"max_new_tokens", "end of sequence", "stop string"};
        fprintf(stderr, "\n[generate: %d prompt tokens in %.3f s; %d new tokens in %.3f s (%.1f tokens/s, %s); "
                "stopped by %s]\n", n_prompt, res.prefill_s, res.n, res.decode_s,
                res.decode_s > 0 ? res.n / res.decode_s : 0.0, zt_dtype_name(compute), why[res.stopped_by]);
    }
    zt_infer_free(&m);
    zt_free(ZT_MEM_OTHER, ids, id_bytes);
    return rc;
}
