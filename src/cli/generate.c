/* generate.c — `ztrain generate`: continue a prompt with a trained model, printing
 * the continuation to stdout token by token as it is generated. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/mem.h"
#include "../infer/generate.h"
#include "../io/hf_model.h"
#include "../text/tokenizer.h"
#include "commands.h"
#include "flags.h"
#include "memory_gate.h"

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

/* With a tokenizer: each id's bytes in decoded text; special tokens (eos, ...) show
 * nothing, as decode(skip_special_tokens=True). */
static size_t tok_decode(void *ctx, int id, char *buf, size_t cap)
{
    const zt_tokenizer *t = ctx;
    size_t len = 0;
    const uint8_t *b = zt_tok_id_bytes(t, id, &len);
    if (!b || zt_tok_is_special(t, id))
        return 0;
    if (len <= cap)
        memcpy(buf, b, len);
    return len;
}

static void emit_stdout(void *ctx, const char *text, size_t n)
{
    (void)ctx;
    fwrite(text, 1, n, stdout);
    fflush(stdout); /* stream: each token is shown as soon as it exists */
}

/* The prompt's ids: the tokenizer's encoding (no special tokens added, as
 * encode(add_special_tokens=False)), or its bytes without a tokenizer. */
static int encode_prompt(const char *tok_dir, const char *prompt, const zt_llama_config *cfg,
                         const char *model, int threads, zt_tokenizer **tok, zt_ids *ids, zt_err *err)
{
    int rc;
    if (!tok_dir) {
        if (cfg->vocab_size != 256)
            return zt_fail(err, ZT_EINPUT, "%s: vocab_size is %d; without --tokenizer the ids are bytes, "
                           "which needs vocab_size 256", model, cfg->vocab_size);
        for (const char *c = prompt; *c; c++)
            if ((rc = zt_ids_push(ids, (unsigned char)*c)))
                return zt_fail(err, rc, "out of memory");
    } else {
        if ((rc = zt_tok_load(tok_dir, tok, err)))
            return rc;
        if (zt_tok_vocab_size(*tok) > cfg->vocab_size)
            return zt_fail(err, ZT_EINPUT, "--tokenizer %s has %d tokens, more than the model's vocab_size %d "
                           "(%s/config.json)", tok_dir, zt_tok_vocab_size(*tok), cfg->vocab_size, model);
        if ((rc = zt_tok_encode(*tok, prompt, strlen(prompt), threads, ids, err)))
            return zt_wrap(err, "--prompt: ");
    }
    if (ids->n == 0)
        return zt_fail(err, ZT_EINPUT, "--prompt is empty: generation needs at least one token");
    return ZT_OK;
}

int zt_cmd_generate(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *tok_dir = NULL, *prompt = NULL, *stop = NULL, *dtype_name = NULL;
    const char *device = "cpu", *max_memory = NULL;
    int max_new = 64, top_k = 50, threads = 0;
    double temperature = 0.0, top_p = 1.0;
    long seed = 42;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "Hugging Face model directory (config.json + safetensors), or a GGUF file", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "directory with tokenizer.json (default: the model directory when it holds one, as ztrain saves it; else ids are bytes, vocab 256)", 1, 0, 0},
        {"prompt", ZT_FLAG_STR, &prompt, "the text to continue", 1, 0, 0},
        {"max_new_tokens", ZT_FLAG_INT, &max_new, "tokens to generate at most (default 64)", 0, 1 << 24, 0},
        {"temperature", ZT_FLAG_DOUBLE, &temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)", 0, 1e6, 0},
        {"top_k", ZT_FLAG_INT, &top_k, "sampling: keep the k most likely tokens (default 50, as HF; 0 = off)", 0, 1 << 30, 0},
        {"top_p", ZT_FLAG_DOUBLE, &top_p, "sampling: keep the smallest set with this much probability (default 1 = off)", 0, 1, 0},
        {"seed", ZT_FLAG_LONG, &seed, "seed of the sampler (default 42): the same seed gives the same text", 0, 9.2e18, 0},
        {"stop", ZT_FLAG_STR, &stop, "stop once the continuation contains this string (it is printed)", 1, 0, 0},
        {"torch_dtype", ZT_FLAG_STR, &dtype_name, "compute in fp32 | bf16 (or float32, bfloat16; default: the config's torch_dtype)", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
        {"device", ZT_FLAG_STR, &device, "cpu (default) | cuda (the first GPU; make cuda) | emu (the test device)", 1, 0, 0},
        {"max_memory", ZT_FLAG_STR, &max_memory, "bytes generation may use, e.g. 8GB (default: the available memory); a model estimated above it is refused before allocating", 1, 0, 0},
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
    char own_tok[4200], gguf_dir[64];
    snprintf(own_tok, sizeof own_tok, "%s/tokenizer.json", model);
    if (!tok_dir && access(own_tok, F_OK) == 0) /* saved with the model: AutoTokenizer.from_pretrained(model) */
        tok_dir = model;
    /* --model FILE.gguf: the tokenizer and generation_config.json converted from its metadata */
    if ((rc = zt_cli_gguf_tokenizer_dir(model, gguf_dir, sizeof gguf_dir, err)))
        return rc;
    if (gguf_dir[0] && !tok_dir)
        tok_dir = gguf_dir;
    zt_dtype compute = cfg.torch_dtype == ZT_BF16 ? ZT_BF16 : ZT_F32;
    if (dtype_name && (zt_dtype_parse(dtype_name, &compute) != 0 || compute == ZT_F16))
        return zt_fail(err, ZT_EINPUT, "--torch_dtype: expected fp32 or bf16 (float32, bfloat16), got '%s'",
                       dtype_name);
    /* sizes before allocation, as for eval: the weights once in the compute dtype
     * and one sequence as long as the KV cache can grow (the prompt has at most
     * one token per byte) */
    long longest = (long)strlen(prompt) + max_new;
    int T = longest < cfg.max_position_embeddings ? (int)longest : cfg.max_position_embeddings;
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = compute, .reduce = compute, .save = ZT_F32};
    zt_plan gplan = zt_plan_single(prec, ZT_WRAP_TRANSFORMER);
    char why[320];
    size_t max_mem = 0;
    if (max_memory && (rc = zt_cli_parse_size("max_memory", max_memory, &max_mem, err)))
        return rc;
    size_t limit = zt_memory_limit_on(device, max_mem, 1, 0, why, sizeof why);
    if ((rc = zt_memory_gate(&cfg, &gplan, 1, T > 0 ? T : 1, 0, 0, limit, why, err)))
        return rc;
    int eos[MAX_EOS + 1], n_eos = 0;
    if ((rc = zt_gen_read_eos(gguf_dir[0] ? gguf_dir : model, cfg.vocab_size, eos, MAX_EOS, &n_eos, err)))
        return rc;
    int nthreads = zt_cli_set_threads(threads), devices = 0;
    char desc[160];
    const zt_backend *be = zt_backend_open(device, 0, &devices, desc, sizeof desc, err);
    if (!be)
        return zt_wrap(err, "--device %s: ", device);
    zt_tokenizer *tok = NULL;
    zt_ids prompt_ids = {0};
    int *ids = NULL;
    size_t id_bytes = 0;
    if ((rc = encode_prompt(tok_dir, prompt, &cfg, model, nthreads, &tok, &prompt_ids, err)))
        goto done;
    int n_prompt = (int)prompt_ids.n;
    if ((long)n_prompt + max_new > cfg.max_position_embeddings) {
        rc = zt_fail(err, ZT_EINPUT, "--prompt (%d tokens) plus --max_new_tokens %d exceed the model's "
                     "max_position_embeddings %d (%s/config.json)", n_prompt, max_new,
                     cfg.max_position_embeddings, model);
        goto done;
    }
    if (tok && zt_tok_eos_id(tok) >= 0) /* HF stops at the tokenizer's eos too */
        eos[n_eos++] = zt_tok_eos_id(tok);
    id_bytes = ((size_t)n_prompt + (size_t)max_new + 1) * sizeof(int);
    if (!(ids = zt_alloc(ZT_MEM_OTHER, id_bytes))) {
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_prompt; i++)
        ids[i] = prompt_ids.v[i];
    zt_infer m;
    if ((rc = zt_infer_open(&m, model, compute, n_prompt + max_new, nthreads, be, err)))
        goto done;
    zt_gen_params p = {max_new, {temperature, top_k, top_p}, (uint64_t)seed, stop, eos, n_eos};
    zt_gen_text text = {tok ? tok_decode : byte_decode, emit_stdout, tok};
    zt_gen_result res;
    rc = zt_generate(&m, ids, n_prompt, &p, &text, ids + n_prompt, &res, err);
    if (rc == ZT_OK) {
        static const char *why[] = {"max_new_tokens", "end of sequence", "stop string"};
        fprintf(stderr, "\n[generate: %d prompt token%s in %.3f s; %d new token%s in %.3f s (%.1f tokens/s, %s); "
                "on %s; stopped by %s]\n", n_prompt, n_prompt == 1 ? "" : "s", res.prefill_s, res.n,
                res.n == 1 ? "" : "s", res.decode_s,
                res.decode_s > 0 ? res.n / res.decode_s : 0.0, zt_dtype_name(compute), desc, why[res.stopped_by]);
    }
    zt_infer_free(&m);
done:
    zt_free(ZT_MEM_OTHER, ids, id_bytes);
    zt_ids_free(&prompt_ids);
    if (tok)
        zt_tok_free(tok);
    return rc;
}
