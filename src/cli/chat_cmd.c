/* chat_cmd.c — `ztrain chat`: a conversation with a model, one user line at a
 * time from stdin (a "> " prompt when stdin is a terminal).  Each turn renders
 * the whole conversation with the tokenizer's chat template and
 * add_generation_prompt, generates until the end of turn (generation_config.json's
 * eos ids, and the tokenizer's eos), streams the reply, and keeps it (decoded
 * without special tokens) as the assistant's message, as a chat UI built on
 * apply_chat_template and generate does. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/mem.h"
#include "../core/text.h"
#include "../infer/generate.h"
#include "../io/hf_model.h"
#include "../text/chat.h"
#include "../text/tokenizer.h"
#include "commands.h"
#include "flags.h"
#include "gen_cli.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_EOS 16
enum { LINE_MAX_BYTES = 1 << 16 };

typedef struct chat_run {
    zt_infer m;
    zt_tokenizer *tok;
    zt_chat *chat;
    zt_gen_params p;
    int cap; /* the KV cache's positions: the longest conversation */
    int opened;
} chat_run;

/* text as a message; bytes that are not UTF-8 (a reply cut inside a character)
 * become U+FFFD, as transformers' decode(errors="replace") leaves them. */
static int add_message(cJSON *msgs, const char *role, const char *text, size_t len)
{
    cJSON *m = cJSON_CreateObject();
    cJSON *c = m ? cJSON_CreateString("") : NULL;
    char *copy = c ? cJSON_malloc(3 * len + 1) : NULL;
    if (!copy) {
        cJSON_Delete(m);
        cJSON_Delete(c);
        return ZT_EFAIL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t ok = zt_utf8_invalid_at((const unsigned char *)text + i, len - i);
        memcpy(copy + n, text + i, ok);
        n += ok;
        i += ok;
        if (i < len) {
            memcpy(copy + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i++;
        }
    }
    copy[n] = 0;
    cJSON_free(c->valuestring);
    c->valuestring = copy;
    if (!cJSON_AddStringToObject(m, "role", role) || !cJSON_AddItemToObject(m, "content", c)) {
        cJSON_Delete(m);
        return ZT_EFAIL;
    }
    return cJSON_AddItemToArray(msgs, m) ? ZT_OK : ZT_EFAIL;
}

/* One turn: render, encode, generate (streamed), keep the reply. */
static int turn(chat_run *r, cJSON *msgs, zt_err *err)
{
    zt_jinja_out text;
    zt_ids ids = {0};
    int rc = zt_chat_render(r->chat, msgs, 1, &text, err);
    if (rc)
        return rc;
    rc = zt_tok_encode(r->tok, text.text, text.len, 0, &ids, err);
    zt_jinja_out_free(&text);
    if (!rc && (long)ids.n + r->p.max_new_tokens > r->cap)
        rc = zt_fail(err, ZT_EINPUT, "the conversation (%zu tokens) plus --max_new_tokens %d exceed the context "
                     "of %d positions (--max_length)", ids.n, r->p.max_new_tokens, r->cap);
    size_t bytes = ((size_t)r->p.max_new_tokens + 1) * sizeof(int);
    int *out = rc ? NULL : zt_alloc(ZT_MEM_OTHER, bytes);
    if (!rc && !out)
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    zt_gen_result res;
    zt_gen_text stream = {zt_gen_tok_decode, zt_gen_emit_stdout, r->tok};
    if (!rc)
        rc = zt_generate(&r->m, ids.v, (int)ids.n, &r->p, &stream, out, &res, err);
    char *reply = NULL;
    size_t len = 0;
    if (!rc)
        rc = zt_tok_decode(r->tok, out, (size_t)res.n, 1, &reply, &len, err);
    if (!rc && add_message(msgs, "assistant", reply, len))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    if (!rc)
        printf("\n");
    free(reply);
    zt_free(ZT_MEM_OTHER, out, bytes);
    zt_ids_free(&ids);
    return rc;
}

static int chat_loop(chat_run *r, const char *system, zt_err *err)
{
    cJSON *msgs = cJSON_CreateArray();
    char *line = zt_alloc(ZT_MEM_OTHER, LINE_MAX_BYTES);
    int rc = msgs && line ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory");
    int tty = isatty(0);
    if (!rc && system && add_message(msgs, "system", system, strlen(system)))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    while (!rc) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        if (!fgets(line, LINE_MAX_BYTES, stdin))
            break;
        size_t n = strlen(line);
        if (n == LINE_MAX_BYTES - 1 && line[n - 1] != '\n') {
            rc = zt_fail(err, ZT_EINPUT, "stdin: a line longer than %d bytes", LINE_MAX_BYTES - 2);
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!n)
            continue;
        if (add_message(msgs, "user", line, n))
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
        else
            rc = turn(r, msgs, err);
    }
    cJSON_Delete(msgs);
    zt_free(ZT_MEM_OTHER, line, LINE_MAX_BYTES);
    return rc;
}

/* The model, tokenizer and template, sized for a conversation of cap positions. */
static int open_run(chat_run *r, const char *model, const char *tok_dir, const char *dtype_name,
                    const char *device, int threads, zt_err *err)
{
    zt_llama_config cfg;
    int rc = zt_hf_read_config_dir(model, &cfg, err);
    if (rc)
        return rc;
    if (r->cap <= 0 || r->cap > cfg.max_position_embeddings)
        r->cap = cfg.max_position_embeddings < 4096 ? cfg.max_position_embeddings : 4096;
    zt_dtype compute;
    char desc[160];
    if ((rc = zt_gen_compute(&cfg, dtype_name, r->cap, device, NULL, &compute, err)))
        return rc;
    if ((rc = zt_tok_load(tok_dir, &r->tok, err)) || (rc = zt_chat_load(tok_dir, &r->chat, err)))
        return rc;
    int devices = 0, nthreads = zt_cli_set_threads(threads);
    const zt_backend *be = zt_backend_open(device, 0, &devices, desc, sizeof desc, err);
    if (!be)
        return zt_wrap(err, "--device %s: ", device);
    if (zt_tok_vocab_size(r->tok) > cfg.vocab_size)
        return zt_fail(err, ZT_EINPUT, "%s has %d tokens, more than the model's vocab_size %d", tok_dir,
                       zt_tok_vocab_size(r->tok), cfg.vocab_size);
    rc = zt_infer_open(&r->m, model, compute, r->cap, nthreads, be, err);
    r->opened = rc == ZT_OK;
    return rc;
}

int zt_cmd_chat(int argc, char **argv, zt_err *err)
{
    const char *model = NULL, *tok_dir = NULL, *system = NULL, *dtype_name = NULL, *device = "cpu";
    int max_new = -1, top_k = -1, threads = 0, do_sample = -1, cap = 0;
    double temperature = -1, top_p = -1;
    long seed = 42;
    zt_flag flags[] = {
        {"model", ZT_FLAG_STR, &model, "Hugging Face model directory with its tokenizer (tokenizer.json, tokenizer_config.json with a chat_template)", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "directory with tokenizer.json and tokenizer_config.json (default: the model directory)", 1, 0, 0},
        {"system", ZT_FLAG_STR, &system, "a system message opening the conversation", 1, 0, 0},
        {"max_new_tokens", ZT_FLAG_INT, &max_new, "tokens per reply at most (default: generation_config.json's, else 256)", 1, 1 << 24, 0},
        {"do_sample", ZT_FLAG_BOOL, &do_sample, "sample (true) or decode greedily (false); default: generation_config.json's", 1, 0, 0},
        {"temperature", ZT_FLAG_DOUBLE, &temperature, "sampling temperature (default: generation_config.json's, else 1)", 0, 1e6, 0},
        {"top_k", ZT_FLAG_INT, &top_k, "sampling: the k most likely tokens (default: generation_config.json's, else 50)", 0, 1 << 30, 0},
        {"top_p", ZT_FLAG_DOUBLE, &top_p, "sampling: nucleus mass (default: generation_config.json's, else 1)", 0, 1, 0},
        {"seed", ZT_FLAG_LONG, &seed, "seed of the sampler (default 42)", 0, 9.2e18, 0},
        {"max_length", ZT_FLAG_INT, &cap, "positions the conversation may fill (default: max_position_embeddings, at most 4096)", 1, 1 << 24, 0},
        {"torch_dtype", ZT_FLAG_STR, &dtype_name, "compute in fp32 | bf16 (default: the config's torch_dtype)", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
        {"device", ZT_FLAG_STR, &device, "cpu (default) | cuda | emu", 1, 0, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), "usage: ztrain chat --model DIR [flags]\n"
                       "Reads one user message per line from stdin and streams each reply to stdout.");
        return ZT_OK;
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc, argv, "ztrain chat", err);
    if (rc)
        return rc;
    if (!model)
        return zt_fail(err, ZT_EINPUT, "ztrain chat: --model is required");
    zt_gen_defaults gd;
    if ((rc = zt_gen_read_defaults(model, &gd, err)))
        return rc;
    int eos[MAX_EOS + 1];
    chat_run r = {.cap = cap};
    r.p = (zt_gen_params){max_new >= 0 ? max_new : gd.max_new_tokens >= 0 ? gd.max_new_tokens : 256,
                          zt_gen_sampling(&gd, do_sample, temperature, top_k, top_p), (uint64_t)seed, NULL, eos, 0};
    rc = open_run(&r, model, tok_dir ? tok_dir : model, dtype_name, device, threads, err);
    if (!rc && !(rc = zt_gen_read_eos(model, zt_tok_vocab_size(r.tok), eos, MAX_EOS, &r.p.n_eos, err))) {
        if (zt_tok_eos_id(r.tok) >= 0)
            eos[r.p.n_eos++] = zt_tok_eos_id(r.tok);
        rc = chat_loop(&r, system, err);
    }
    if (r.opened)
        zt_infer_free(&r.m);
    zt_chat_free(r.chat);
    if (r.tok)
        zt_tok_free(r.tok);
    return rc;
}
