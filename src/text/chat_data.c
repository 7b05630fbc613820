/* chat_data.c — TRL's conversational records as ids and a loss mask (chat_data.h).
 *
 * As TRL's SFTTrainer tokenizes them (no eos added: the template ends the turns):
 *   {"messages": [...]}        ids of apply_chat_template(messages); the loss on
 *                              every token, or with assistant_only on the
 *                              {% generation %} text only;
 *   {"prompt": [...], "completion": [...]}
 *                              ids of apply_chat_template(prompt + completion);
 *                              the loss after the common prefix with the ids of
 *                              apply_chat_template(prompt, add_generation_prompt),
 *                              and with assistant_only on the generation text too.
 * transformers marks a token as the assistant's when it lies between the token
 * holding a generation block's first character and the one holding its last;
 * here a token's place in the text is the sum of the bytes of the tokens before
 * it, which holds for tokenizers whose tokens spell the text byte for byte. */
#include "chat_data.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/mem.h"
#include "../core/sha256.h"
#include "../io/table.h"
#include "../io/tokens.h"
#include "records.h"

int zt_chat_data_kind(const char *data, size_t len)
{
    /* the first record decides, as TRL's is_conversational looks at the first example */
    size_t pos = 0;
    while (pos < len && (data[pos] == ' ' || data[pos] == '\t' || data[pos] == '\r' || data[pos] == '\n'))
        pos++;
    const char *nl = pos < len ? memchr(data + pos, '\n', len - pos) : NULL;
    size_t end = nl ? (size_t)(nl - data) : len;
    cJSON *r = pos < len ? cJSON_ParseWithLength(data + pos, end - pos) : NULL;
    int kind = 0;
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r, "messages")))
        kind = ZT_CHAT_MESSAGES;
    else if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r, "prompt")) &&
             cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(r, "completion")))
        kind = ZT_CHAT_PROMPT_COMPLETION;
    cJSON_Delete(r);
    return kind;
}

typedef struct chat_sink {
    const char *path;
    const zt_tokenizer *t;
    const zt_chat *chat;
    int kind, assistant_only, threads;
    zt_ids *ids, *mask;
    zt_ids scratch;
} chat_sink;

/* mask[from..] &= inside a generation span, by each token's byte offset. */
static int assistant_mask(chat_sink *s, const zt_jinja_out *r, size_t from, long line, zt_err *err)
{
    size_t at = 0, any = 0;
    for (size_t i = from; i < s->ids->n; i++) {
        size_t n = 0;
        zt_tok_id_bytes(s->t, s->ids->v[i], &n);
        int in = 0;
        for (size_t g = 0; g < r->ngen && !in; g++) /* the token holds a byte of the span */
            in = r->gen[g].end > r->gen[g].start && at < r->gen[g].end && at + n > r->gen[g].start;
        s->mask->v[i] &= in;
        any += in;
        at += n;
    }
    if (at != r->len)
        return zt_fail(err, ZT_EINPUT, "%s: line %ld: --assistant_only_loss: this tokenizer's tokens do not spell "
                       "the rendered text byte for byte (%zu of %zu bytes), so the assistant's text cannot be "
                       "located", s->path, line, at, r->len);
    if (!any)
        return zt_fail(err, ZT_EINPUT, "%s: line %ld: --assistant_only_loss, but the record has no assistant "
                       "tokens (no text inside the template's {%% generation %%} blocks)", s->path, line);
    return ZT_OK;
}

static int render_ids(chat_sink *s, const cJSON *msgs, int gen_prompt, zt_ids *out, zt_jinja_out *r, zt_err *err)
{
    int rc = zt_chat_render(s->chat, msgs, gen_prompt, r, err);
    if (!rc)
        rc = zt_tok_encode(s->t, r->text, r->len, s->threads, out, err);
    return rc;
}

/* The number of leading ids a record's prompt shares with its whole conversation. */
static int prompt_prefix(chat_sink *s, const cJSON *prompt, size_t from, size_t *n, zt_err *err)
{
    zt_jinja_out r;
    s->scratch.n = 0;
    int rc = render_ids(s, prompt, 1, &s->scratch, &r, err);
    if (!rc)
        zt_jinja_out_free(&r);
    *n = 0;
    while (!rc && *n < s->scratch.n && from + *n < s->ids->n && s->scratch.v[*n] == s->ids->v[from + *n])
        (*n)++;
    return rc;
}

static int messages_of(chat_sink *s, const cJSON *rec, long line, const char *key, const cJSON **out, zt_err *err)
{
    *out = cJSON_GetObjectItemCaseSensitive(rec, key);
    if (!cJSON_IsArray(*out))
        return zt_fail(err, ZT_EINPUT, "%s: line %ld: \"%s\" is not a list of messages (conversational records: "
                       "every record like the first)", s->path, line, key);
    return ZT_OK;
}

static int on_record(void *ctx, const cJSON *rec, long line, zt_err *err)
{
    chat_sink *s = ctx;
    const cJSON *msgs = NULL, *prompt = NULL, *completion = NULL;
    cJSON *joined = NULL;
    int rc;
    if (s->kind == ZT_CHAT_MESSAGES)
        rc = messages_of(s, rec, line, "messages", &msgs, err);
    else if (!(rc = messages_of(s, rec, line, "prompt", &prompt, err)) &&
             !(rc = messages_of(s, rec, line, "completion", &completion, err))) {
        joined = cJSON_Duplicate(prompt, 1);
        for (const cJSON *m = completion->child; joined && m; m = m->next)
            if (!cJSON_AddItemToArray(joined, cJSON_Duplicate(m, 1)))
                break;
        rc = joined ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory");
    }
    msgs = joined ? joined : msgs;
    size_t from = s->ids->n, keep = 0;
    zt_jinja_out r = {0};
    if (!rc)
        rc = render_ids(s, msgs, 0, s->ids, &r, err);
    if (!rc && prompt)
        rc = prompt_prefix(s, prompt, from, &keep, err);
    for (size_t i = from; !rc && i < s->ids->n; i++)
        if (zt_ids_push(s->mask, i - from >= keep))
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
    if (!rc && s->assistant_only)
        rc = assistant_mask(s, &r, from, line, err);
    if (rc && rc != ZT_EFAIL && !strstr(err->msg, s->path))
        zt_wrap(err, "%s: line %ld: ", s->path, line);
    zt_jinja_out_free(&r);
    cJSON_Delete(joined);
    return rc;
}

int zt_chat_data_encode(const zt_tokenizer *t, const zt_chat *chat, const char *path, const char *data, size_t len,
                        int assistant_only, int threads, zt_ids *ids, zt_ids *mask, zt_err *err)
{
    int kind = zt_chat_data_kind(data, len);
    if (assistant_only && !zt_chat_has_generation(chat))
        return zt_fail(err, ZT_EINPUT, "--assistant_only_loss: the chat template has no {%% generation %%} "
                       "markers, so the assistant's tokens cannot be told apart (TRL refuses it too); put a "
                       "template that marks them in tokenizer_config.json, or train on the whole conversation");
    chat_sink s = {path, t, chat, kind, assistant_only, threads, ids, mask, {0}};
    int rc = zt_records_each_object(path, data, len, "TRL's conversational format", on_record, &s, err);
    zt_ids_free(&s.scratch);
    return rc;
}

static int hash_file(zt_sha256 *h, const char *path, zt_err *err)
{
    zt_text_file f;
    int rc = zt_text_file_open(path, &f, err);
    if (rc)
        return rc;
    uint64_t n = f.len;
    zt_sha256_update(h, &n, sizeof n);
    zt_sha256_update(h, f.data, f.len);
    zt_text_file_close(&f);
    return ZT_OK;
}

/* The cache key: the format, the flag, the tokenizer, its template and the data. */
static int chat_key(const char *tok_dir, const zt_text_file *tx, int assistant_only, char hex[65], zt_err *err)
{
    static const char tag[] = "ztrain token cache v1: conversational records through the chat template: int32 "
                              "ids and the loss mask; assistant only: ";
    char path[4200];
    zt_sha256 h;
    uint8_t d[32];
    zt_sha256_init(&h);
    zt_sha256_update(&h, tag, sizeof tag);
    zt_sha256_update(&h, assistant_only ? "1" : "0", 1);
    snprintf(path, sizeof path, "%s/tokenizer.json", tok_dir);
    int rc = hash_file(&h, path, err);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tok_dir);
    if (!rc)
        rc = hash_file(&h, path, err);
    zt_sha256_update(&h, tx->data, tx->len);
    zt_sha256_final(&h, d);
    zt_sha256_hex(d, hex);
    return rc;
}

static int encode_to_cache(const char *path, const zt_text_file *tx, const char *tok_dir, int assistant_only,
                           int threads, const char *out_path, const char *mask_path, int *vocab, zt_err *err)
{
    zt_tokenizer *t = NULL;
    zt_chat *chat = NULL;
    zt_ids ids = {0}, mask = {0};
    int rc = zt_tok_load(tok_dir, &t, err);
    if (!rc)
        *vocab = zt_tok_vocab_size(t);
    if (!rc)
        rc = zt_chat_load(tok_dir, &chat, err);
    if (!rc)
        rc = zt_chat_data_encode(t, chat, path, tx->data, tx->len, assistant_only, threads, &ids, &mask, err);
    if (!rc)
        rc = zt_tokens_write_npy(mask_path, mask.v, mask.n, err);
    if (!rc)
        rc = zt_tokens_write_npy(out_path, ids.v, ids.n, err);
    zt_ids_free(&ids);
    zt_ids_free(&mask);
    zt_chat_free(chat);
    if (t)
        zt_tok_free(t);
    return rc;
}

int zt_chat_cached_tokens(const char *path, const char *data, size_t len, const char *tok_dir, const char *cache_dir,
                          int assistant_only, int threads, char *out_path, size_t cap, int *hit, int *vocab,
                          zt_err *err)
{
    zt_text_file tx = {data, len, NULL};
    char hex[65], mask_path[4200];
    *hit = 0;
    int rc = chat_key(tok_dir, &tx, assistant_only, hex, err);
    if (!rc && (snprintf(out_path, cap, "%s/%s.npy", cache_dir, hex) >= (int)cap ||
                zt_text_mask_path(out_path, mask_path, sizeof mask_path) != 0))
        rc = zt_fail(err, ZT_EINPUT, "%s: path too long", cache_dir);
    if (!rc && access(out_path, R_OK) == 0) {
        zt_tokenizer *t = NULL;
        *hit = 1;
        if (!(rc = zt_tok_load(tok_dir, &t, err)))
            *vocab = zt_tok_vocab_size(t);
        if (t)
            zt_tok_free(t);
    } else if (!rc && !(rc = zt_mkdirs(cache_dir, err)))
        rc = encode_to_cache(path, &tx, tok_dir, assistant_only, threads, out_path, mask_path, vocab, err);
    return rc;
}

/* A table's conversational columns as JSON Lines records, in accounted memory. */
typedef struct jsonl_buf {
    char *p;
    size_t n, cap;
    int messages;
} jsonl_buf;

static int put(jsonl_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = zt_alloc(ZT_MEM_OTHER, cap);
        if (!p)
            return -1;
        if (b->n)
            memcpy(p, b->p, b->n);
        zt_free(ZT_MEM_OTHER, b->p, b->cap);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int table_row(void *ctx, const char *const *vals, const size_t *lens, zt_err *err)
{
    jsonl_buf *b = ctx;
    int bad = b->messages ? put(b, "{\"messages\": ", 13) || put(b, vals[0], lens[0])
                          : put(b, "{\"prompt\": ", 11) || put(b, vals[0], lens[0]) ||
                                put(b, ", \"completion\": ", 16) || put(b, vals[1], lens[1]);
    if (bad || put(b, "}\n", 2))
        return zt_fail(err, ZT_EFAIL, "out of memory for the table's records");
    return ZT_OK;
}

int zt_chat_table_records(const char *path, char **data, size_t *len, size_t *cap, zt_err *err)
{
    static const char *const msgs[] = {"messages"}, *const pc[] = {"prompt", "completion"};
    jsonl_buf b = {0};
    int yes = 0, rc = zt_table_has_columns(path, msgs, 1, &yes, err);
    b.messages = yes;
    if (!rc && !yes)
        rc = zt_table_has_columns(path, pc, 2, &yes, err);
    if (!rc && yes)
        rc = zt_table_each_row_json(path, b.messages ? msgs : pc, b.messages ? 1 : 2, table_row, &b, err);
    if (rc || !yes || !zt_chat_data_kind(b.p, b.n)) { /* not conversational: text_data.h reads it */
        zt_free(ZT_MEM_OTHER, b.p, b.cap);
        b = (jsonl_buf){0};
    }
    *data = b.p;
    *len = b.n;
    *cap = b.cap;
    return rc;
}
