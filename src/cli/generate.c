/* generate.c — `ztrain generate`: continue a prompt with a trained model, printing
 * the continuation to stdout token by token as it is generated. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/mem.h"
#include "../infer/generate.h"
#include "../io/hf_model.h"
#include "../text/chat.h"
#include "../text/tokenizer.h"
#include "commands.h"
#include "flags.h"
#include "gen_cli.h"
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
size_t zt_gen_tok_decode(void *ctx, int id, char *buf, size_t cap)
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

void zt_gen_emit_stdout(void *ctx, const char *text, size_t n)
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

/* --chat: the prompt as the user's message (after --system's, if any), through
 * the tokenizer's chat template with add_generation_prompt, as
 * apply_chat_template(messages, add_generation_prompt=True) gives it. */
static int chat_prompt(const char *tok_dir, const char *system, const char *prompt, zt_jinja_out *out, zt_err *err)
{
    if (!tok_dir)
        return zt_fail(err, ZT_EINPUT, "--chat needs a tokenizer with a chat template (--tokenizer, or the model "
                       "directory's tokenizer.json and tokenizer_config.json)");
    zt_chat *chat;
    int rc = zt_chat_load(tok_dir, &chat, err);
    if (rc)
        return zt_wrap(err, "--chat: ");
    cJSON *msgs = cJSON_CreateArray();
    const char *roles[2] = {"system", "user"}, *texts[2] = {system, prompt};
    for (int i = 0; i < 2 && msgs; i++) {
        cJSON *m = texts[i] ? cJSON_CreateObject() : NULL;
        if (texts[i] && (!m || !cJSON_AddStringToObject(m, "role", roles[i]) ||
                         !cJSON_AddStringToObject(m, "content", texts[i]) || !cJSON_AddItemToArray(msgs, m))) {
            cJSON_Delete(m);
            cJSON_Delete(msgs);
            msgs = NULL;
        }
    }
    rc = msgs ? zt_chat_render(chat, msgs, 1, out, err) : zt_fail(err, ZT_EFAIL, "out of memory");
    cJSON_Delete(msgs);
    zt_chat_free(chat);
    return rc;
}

/* Decoding settings: a flag given wins, then generation_config.json, then the
 * defaults of transformers' GenerationConfig (greedy unless do_sample; T 1,
 * top_k 50, top_p 1).  A --temperature above 0 without --do_sample samples, as
 * ztrain's generate always did.  max_new_tokens falls back to max_length minus
 * the prompt, then to 64 (the caller subtracts the prompt). */
zt_sampling zt_gen_sampling(const zt_gen_defaults *d, int do_sample, double temperature, int top_k, double top_p)
{
    if (do_sample < 0)
        do_sample = temperature > 0 ? 1 : d->do_sample > 0;
    double t = temperature >= 0 ? temperature : d->temperature >= 0 ? d->temperature : 1.0;
    zt_sampling s = {do_sample ? t : 0.0, top_k >= 0 ? top_k : d->top_k >= 0 ? d->top_k : 50,
                     top_p >= 0 ? top_p : d->top_p >= 0 ? d->top_p : 1.0};
    return s;
}

/* The model directory holds its tokenizer when ztrain saved it there, as
 * AutoTokenizer.from_pretrained(model) finds it. */
static const char *own_tokenizer(const char *model, const char *tok_dir)
{
    char own[4200];
    snprintf(own, sizeof own, "%s/tokenizer.json", model);
    return !tok_dir && access(own, F_OK) == 0 ? model : tok_dir;
}

/* Where the model's own files are: its directory, or for --model FILE.gguf a
 * private directory with the tokenizer and generation_config.json converted from
 * the file's metadata.  tok_dir defaults to it when it holds tokenizer.json. */
static int model_meta(const char *model, char *gguf_dir, size_t cap, const char **meta_dir,
                      const char **tok_dir, zt_err *err)
{
    int rc = zt_cli_gguf_tokenizer_dir(model, gguf_dir, cap, err);
    if (rc)
        return rc;
    *meta_dir = gguf_dir[0] ? gguf_dir : model;
    *tok_dir = own_tokenizer(*meta_dir, *tok_dir);
    return ZT_OK;
}

/* zt_gen_sampling's settings and the number of new tokens: the flag, else
 * generation_config.json's max_new_tokens, else its max_length (then
 * *max_length >= 0 and the caller subtracts the prompt), else 64. */
static int decoding(const char *model, int do_sample, double temperature, int top_k, double top_p, int *max_new,
                    int *max_length, zt_sampling *s, zt_err *err)
{
    zt_gen_defaults gd;
    int rc = zt_gen_read_defaults(model, &gd, err);
    if (rc)
        return rc;
    *s = zt_gen_sampling(&gd, do_sample, temperature, top_k, top_p);
    *max_length = *max_new < 0 && gd.max_new_tokens < 0 ? gd.max_length : -1;
    if (*max_new < 0)
        *max_new = gd.max_new_tokens >= 0 ? gd.max_new_tokens : *max_length >= 0 ? *max_length : 64;
    return ZT_OK;
}

static int parse_compute(const char *name, zt_dtype *compute, zt_err *err)
{
    if (zt_dtype_parse(name, compute) != 0 || *compute == ZT_F16)
        return zt_fail(err, ZT_EINPUT, "--torch_dtype: expected fp32 or bf16 (float32, bfloat16), got '%s'", name);
    return ZT_OK;
}

/* Sizes before allocation, as for eval: the weights once in the compute dtype
 * and one sequence as long as the KV cache can grow (longest: the prompt has at
 * most one token per byte, plus the new tokens). */
static int gate(const zt_llama_config *cfg, zt_dtype compute, long longest, const char *device,
                const char *max_memory, zt_err *err)
{
    int T = longest < cfg->max_position_embeddings ? (int)longest : cfg->max_position_embeddings;
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = compute, .reduce = compute, .save = ZT_F32};
    zt_plan gplan = zt_plan_single(prec, ZT_WRAP_TRANSFORMER);
    char why[320];
    size_t max_mem = 0;
    int rc = max_memory ? zt_cli_parse_size("max_memory", max_memory, &max_mem, err) : ZT_OK;
    if (rc)
        return rc;
    size_t limit = zt_memory_limit_on(device, max_mem, 1, 0, why, sizeof why);
    return zt_memory_gate(cfg, &gplan, 1, T > 0 ? T : 1, 0, 0, NULL, limit, why, err);
}

int zt_gen_compute(const zt_llama_config *cfg, const char *dtype_name, long longest, const char *device,
                   const char *max_memory, zt_dtype *compute, zt_err *err)
{
    *compute = cfg->torch_dtype == ZT_BF16 ? ZT_BF16 : ZT_F32;
    int rc = dtype_name ? parse_compute(dtype_name, compute, err) : ZT_OK;
    return rc ? rc : gate(cfg, *compute, longest, device, max_memory, err);
}

static void report(int n_prompt, const zt_gen_result *res, zt_dtype compute, const char *desc)
{
    static const char *why[] = {"max_new_tokens", "end of sequence", "stop string"};
    fprintf(stderr, "\n[generate: %d prompt token%s in %.3f s; %d new token%s in %.3f s (%.1f tokens/s, %s); "
            "on %s; stopped by %s]\n", n_prompt, n_prompt == 1 ? "" : "s", res->prefill_s, res->n,
            res->n == 1 ? "" : "s", res->decode_s,
            res->decode_s > 0 ? res->n / res->decode_s : 0.0, zt_dtype_name(compute), desc, why[res->stopped_by]);
}

/* The prompt's ids: with --chat, the user's message (after --system's) rendered by
 * the tokenizer's chat template with add_generation_prompt, then encoded. */
static int prompt_tokens(const char *tok_dir, int chat, const char *system, const char *prompt,
                         const zt_llama_config *cfg, const char *model, int nthreads, zt_tokenizer **tok,
                         zt_ids *ids, zt_err *err)
{
    zt_jinja_out rendered = {0};
    int rc = chat ? chat_prompt(tok_dir, system, prompt, &rendered, err) : ZT_OK;
    if (rc == ZT_OK)
        rc = encode_prompt(tok_dir, chat ? rendered.text : prompt, cfg, model, nthreads, tok, ids, err);
    zt_jinja_out_free(&rendered);
    return rc;
}

/* --logits_out FILE: the logits at every position of the sequence (prompt and new
 * tokens), each token fed alone through the cache from position 0, written as a
 * safetensors file: "logits" (n, V) F32 and "ids" (n) as F32 (exact below 2^24), for
 * holding ztrain's forward against another implementation's on the same tokens. */
static int write_logits(zt_infer *m, const int *ids, int n, const char *path, zt_err *err)
{
    int V = m->cfg.vocab_size;
    size_t bytes = ((size_t)n * V + (size_t)n) * sizeof(float);
    float *buf = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!buf)
        return zt_fail(err, ZT_EFAIL, "out of memory for --logits_out");
    zt_infer_reset(m);
    int rc = ZT_OK;
    for (int i = 0; rc == ZT_OK && i < n; i++) {
        if ((rc = zt_infer_forward(m, &ids[i], 1, err)) == ZT_OK)
            memcpy(buf + (size_t)i * V, zt_infer_logits(m), (size_t)V * sizeof(float));
        buf[(size_t)n * V + i] = (float)ids[i];
    }
    zt_st_out outs[2] = {{.name = "logits", .dtype = ZT_F32, .ndim = 2, .shape = {n, V}, .data = buf},
                         {.name = "ids", .dtype = ZT_F32, .ndim = 1, .shape = {n}, .data = buf + (size_t)n * V}};
    if (rc == ZT_OK)
        rc = zt_st_write(path, outs, 2, "pt", err);
    zt_free(ZT_MEM_OTHER, buf, bytes);
    return rc;
}

int zt_cmd_generate(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *tok_dir = NULL, *prompt = NULL, *stop = NULL, *dtype_name = NULL;
    const char *device = "cpu", *max_memory = NULL, *system = NULL, *logits_out = NULL;
    int max_new = -1, top_k = -1, threads = 0, do_sample = -1, chat = 0;
    double temperature = -1, top_p = -1;
    long seed = 42;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "Hugging Face model directory (config.json + safetensors), or a GGUF file", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "directory with tokenizer.json (default: the model directory when it holds one, as ztrain saves it; else ids are bytes, vocab 256)", 1, 0, 0},
        {"prompt", ZT_FLAG_STR, &prompt, "the text to continue", 1, 0, 0},
        {"max_new_tokens", ZT_FLAG_INT, &max_new, "tokens to generate at most (default: generation_config.json's max_new_tokens, else its max_length minus the prompt, else 64)", 0, 1 << 24, 0},
        {"do_sample", ZT_FLAG_BOOL, &do_sample, "sample (true) or decode greedily (false); default: generation_config.json's do_sample, else false (--temperature > 0 alone samples)", 1, 0, 0},
        {"temperature", ZT_FLAG_DOUBLE, &temperature, "sampling: softmax(logits / T) (default: generation_config.json's, else 1); 0 = greedy", 0, 1e6, 0},
        {"top_k", ZT_FLAG_INT, &top_k, "sampling: keep the k most likely tokens (default: generation_config.json's, else 50, as HF; 0 = off)", 0, 1 << 30, 0},
        {"top_p", ZT_FLAG_DOUBLE, &top_p, "sampling: keep the smallest set with this much probability (default: generation_config.json's, else 1 = off)", 0, 1, 0},
        {"chat", ZT_FLAG_BOOL, &chat, "the prompt is a user message: render it with the tokenizer's chat template (add_generation_prompt) and stop at the end of the turn", 1, 0, 0},
        {"system", ZT_FLAG_STR, &system, "with --chat: a system message before the user's", 1, 0, 0},
        {"seed", ZT_FLAG_LONG, &seed, "seed of the sampler (default 42): the same seed gives the same text", 0, 9.2e18, 0},
        {"stop", ZT_FLAG_STR, &stop, "stop once the continuation contains this string (it is printed)", 1, 0, 0},
        {"torch_dtype", ZT_FLAG_STR, &dtype_name, "compute in fp32 | bf16 (or float32, bfloat16; default: the config's torch_dtype)", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
        {"device", ZT_FLAG_STR, &device, "cpu (default) | cuda (the first GPU; make cuda) | emu (the test device)", 1, 0, 0},
        {"max_memory", ZT_FLAG_STR, &max_memory, "bytes generation may use, e.g. 8GB (default: the available memory); a model estimated above it is refused before allocating", 1, 0, 0},
        {"logits_out", ZT_FLAG_STR, &logits_out, "FILE: also write the logits at every position of the prompt and the new tokens (safetensors: logits (n, V), ids (n))", 1, 0, 0},
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
    char gguf_dir[4096];
    const char *meta_dir;
    if ((rc = model_meta(model, gguf_dir, sizeof gguf_dir, &meta_dir, &tok_dir, err)))
        return rc;
    if (system && !chat)
        return zt_fail(err, ZT_EINPUT, "--system is a chat message: it needs --chat");
    zt_sampling sampling;
    int eos[MAX_EOS + 1], n_eos = 0, max_length;
    if ((rc = decoding(meta_dir, do_sample, temperature, top_k, top_p, &max_new, &max_length, &sampling, err)) ||
        (rc = zt_gen_read_eos(meta_dir, cfg.vocab_size, eos, MAX_EOS, &n_eos, err)))
        return rc;
    zt_dtype compute;
    if ((rc = zt_gen_compute(&cfg, dtype_name, (long)strlen(prompt) + max_new, device, max_memory, &compute, err)))
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
    if ((rc = prompt_tokens(tok_dir, chat, system, prompt, &cfg, model, nthreads, &tok, &prompt_ids, err)))
        goto done;
    int n_prompt = (int)prompt_ids.n;
    if (max_length >= 0) /* max_length counts the prompt, as transformers' does */
        max_new = max_length > n_prompt ? max_length - n_prompt : 0;
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
    memcpy(ids, prompt_ids.v, (size_t)n_prompt * sizeof *ids);
    zt_infer m;
    if ((rc = zt_infer_open(&m, model, compute, n_prompt + max_new, nthreads, be, err)))
        goto done;
    zt_gen_params p = {max_new, sampling, (uint64_t)seed, stop, eos, n_eos};
    zt_gen_text text = {tok ? zt_gen_tok_decode : byte_decode, zt_gen_emit_stdout, tok};
    zt_gen_result res;
    rc = zt_generate(&m, ids, n_prompt, &p, &text, ids + n_prompt, &res, err);
    if (rc == ZT_OK)
        report(n_prompt, &res, compute, desc);
    if (rc == ZT_OK && logits_out)
        rc = write_logits(&m, ids, n_prompt + res.n, logits_out, err);
    zt_infer_free(&m);
done:
    zt_free(ZT_MEM_OTHER, ids, id_bytes);
    zt_ids_free(&prompt_ids);
    if (tok)
        zt_tok_free(tok);
    return rc;
}
