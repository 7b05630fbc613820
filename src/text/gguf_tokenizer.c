/* gguf_tokenizer.c — tokenizer.ggml.* metadata to tokenizer.json and friends
 * (gguf_tokenizer.h). */
#include "gguf_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "pretok.h"
#include "strmap.h"
#include "tokenizer.h"
#include "unicode.h"

/* The pre-tokenizer names transformers' GGUF loader maps to the Llama-3 split, and
 * those it maps to patterns ztrain does not implement; any other name gets
 * GPT-2's ByteLevel regex there, as here. */
static const char *const llama3_names[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                           "midm-2.0", "lfm2", "jina-v5-nano", "dbrx", "smaug-bpe"};
static const char *const other_split_names[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "qwen35",
                                                "tekken", "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct meta {
    int spm;                   /* model "llama": SentencePiece-style BPE; else "gpt2", byte-level */
    const zt_gguf_kv *tokens, *types, *merges, *scores;
    char pre[64];
    int64_t id[4];             /* bos, eos, unk, pad; -1: none */
    int add_bos, add_eos;      /* -1: not stated */
    zt_gguf_str chat_template; /* s NULL: none */
} meta;

static const char *const id_keys[4] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};

static int str_is(zt_gguf_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.s, lit, s.len); }

static int read_meta(const zt_gguf *g, meta *m, zt_err *err)
{
    const char *path = zt_gguf_path(g);
    zt_gguf_str model = {0}, pre = {0};
    int have = 0, rc;
    memset(m, 0, sizeof *m);
    if ((rc = zt_gguf_get_str(g, "tokenizer.ggml.model", &model, &have, err)))
        return rc;
    if (!have)
        return zt_fail(err, ZT_EINPUT, "%s: missing key \"tokenizer.ggml.model\" (the file carries no tokenizer)",
                       path);
    if (!str_is(model, "gpt2") && !str_is(model, "llama"))
        return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.model\" is \"%.*s\": only \"gpt2\" (byte-level "
                       "BPE) and \"llama\" (SentencePiece BPE) are converted", path,
                       (int)(model.len > 32 ? 32 : model.len), model.s);
    m->spm = str_is(model, "llama");
    m->tokens = zt_gguf_find(g, "tokenizer.ggml.tokens");
    m->merges = zt_gguf_find(g, "tokenizer.ggml.merges");
    m->types = zt_gguf_find(g, "tokenizer.ggml.token_type");
    m->scores = zt_gguf_find(g, "tokenizer.ggml.scores");
    if (!m->tokens || m->tokens->type != ZT_GGUF_ARRAY || m->tokens->elem != ZT_GGUF_STRING || !m->tokens->count)
        return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.tokens\" must be a non-empty array of strings", path);
    if (m->merges && (m->merges->type != ZT_GGUF_ARRAY || m->merges->elem != ZT_GGUF_STRING))
        return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.merges\" must be an array of strings", path);
    if (!m->merges && !m->spm)
        return zt_fail(err, ZT_EINPUT, "%s: missing key \"tokenizer.ggml.merges\" (a gpt2 tokenizer needs them)", path);
    /* SentencePiece files without merges: they are recovered from the scores */
    if (!m->merges && (!m->scores || m->scores->type != ZT_GGUF_ARRAY || m->scores->count != m->tokens->count ||
                       (m->scores->elem != ZT_GGUF_FLOAT32 && m->scores->elem != ZT_GGUF_FLOAT64)))
        return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.scores\" must be a float array as long as the "
                       "tokens (there are no merges)", path);
    if (m->types && (m->types->type != ZT_GGUF_ARRAY || !zt_gguf_vtype_size(m->types->elem) ||
                     m->types->elem == ZT_GGUF_FLOAT32 || m->types->elem == ZT_GGUF_FLOAT64 ||
                     m->types->count != m->tokens->count))
        return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.token_type\" must be an integer array as long as "
                       "the tokens", path);
    if ((rc = zt_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &have, err)))
        return rc;
    snprintf(m->pre, sizeof m->pre, "%.*s", have ? (int)(pre.len > 63 ? 63 : pre.len) : 0, have ? pre.s : "");
    for (int k = 0; k < 4; k++) {
        m->id[k] = -1;
        if ((rc = zt_gguf_get_int(g, id_keys[k], &m->id[k], NULL, err)))
            return rc;
        if (m->id[k] >= (int64_t)m->tokens->count)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is %lld, past the %llu tokens", path, id_keys[k],
                           (long long)m->id[k], (unsigned long long)m->tokens->count);
    }
    m->add_bos = m->add_eos = -1;
    if ((rc = zt_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &m->add_bos, NULL, err)) ||
        (rc = zt_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &m->add_eos, NULL, err)))
        return rc;
    if (m->spm && m->add_bos < 0)
        m->add_bos = 1; /* llama.cpp adds bos to a SentencePiece vocabulary that does not say otherwise */
    return zt_gguf_get_str(g, "tokenizer.chat_template", &m->chat_template, NULL, err);
}

/* A token as tokenizer.json spells it: as the file has it when every character is
 * in the byte-level alphabet, else its UTF-8 bytes each spelled as their
 * character (transformers does the same).  *in_alphabet tells which.  NULL on
 * out of memory. */
static char *byte_level_spelling(zt_gguf_str s, int *in_alphabet)
{
    const uint8_t *p = (const uint8_t *)s.s;
    *in_alphabet = 1;
    for (size_t i = 0; i < s.len;) {
        uint32_t cp;
        int l = zt_utf8_decode(p + i, s.len - i, &cp);
        if (l <= 0 || zt_tok_char_to_byte(cp) < 0) {
            *in_alphabet = 0;
            break;
        }
        i += (size_t)l;
    }
    char *out = malloc(*in_alphabet ? s.len + 1 : 2 * s.len + 1);
    if (!out)
        return NULL;
    if (*in_alphabet) {
        memcpy(out, s.s, s.len);
        out[s.len] = 0;
        return out;
    }
    size_t k = 0;
    for (size_t i = 0; i < s.len; i++)
        k += (size_t)zt_utf8_encode(zt_tok_byte_to_char(p[i]), (uint8_t *)out + k);
    out[k] = 0;
    return out;
}

static int64_t type_of(const meta *m, uint64_t i) { return m->types ? zt_gguf_arr_int(m->types, i) : 1; }

static cJSON *added_token(int id, const char *content, int special)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddBoolToObject(a, "special", special);
    return a;
}

/* model.vocab and added_tokens: control tokens spelled in the alphabet are
 * special, user-defined ones plain added tokens.  Two tokens spelled alike would
 * make one vocabulary key for two ids: refused. */
static int vocab_and_added(const zt_gguf *g, const meta *m, cJSON *vocab, cJSON *added, zt_err *err)
{
    for (uint64_t i = 0; i < m->tokens->count; i++) {
        int alpha = 1;
        char *sp = m->spm ? strndup(m->tokens->strs[i].s, m->tokens->strs[i].len)
                          : byte_level_spelling(m->tokens->strs[i], &alpha);
        if (!sp)
            return zt_fail(err, ZT_EFAIL, "out of memory");
        if (cJSON_GetObjectItemCaseSensitive(vocab, sp)) {
            int rc = zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.tokens\": token %llu (\"%.64s\") appears twice",
                             zt_gguf_path(g), (unsigned long long)i, sp);
            free(sp);
            return rc;
        }
        cJSON_AddItemToObject(vocab, sp, cJSON_CreateNumber((double)i));
        int64_t ty = type_of(m, i);
        /* transformers' LlamaTokenizer also makes its own unk, bos and eos special */
        int dflt = m->spm && (!strcmp(sp, "<unk>") || !strcmp(sp, "<s>") || !strcmp(sp, "</s>"));
        if ((ty == 3 && alpha) || ty == 4 || dflt)
            cJSON_AddItemToArray(added, added_token((int)i, sp, ty != 4 || dflt));
        free(sp);
    }
    return ZT_OK;
}

/* {"type": type}, the start of every tokenizer.json component */
static cJSON *typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* A Split's or a Replace's pattern: {"Regex": value} or {"String": value}. */
static cJSON *pattern(const char *kind, const char *value)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, kind, value);
    return o;
}

/* GPT-2's byte-level step, as a pre-tokenizer (use_regex: with GPT-2's own
 * split) or a decoder (add_prefix_space true, as transformers writes it). */
static cJSON *byte_level(int add_prefix_space, int use_regex)
{
    cJSON *bl = typed("ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(bl, "trim_offsets", 1);
    cJSON_AddBoolToObject(bl, "use_regex", use_regex);
    return bl;
}

static cJSON *pre_tokenizer(const char *pre)
{
    for (size_t i = 0; i < NELEM(llama3_names); i++)
        if (!strcmp(pre, llama3_names[i])) {
            cJSON *seq = typed("Sequence"), *list = cJSON_CreateArray(), *split = typed("Split");
            cJSON_AddItemToObject(split, "pattern", pattern("Regex", zt_pretok_llama3_pattern));
            cJSON_AddStringToObject(split, "behavior", "Isolated");
            cJSON_AddBoolToObject(split, "invert", 0);
            cJSON_AddItemToArray(list, split);
            cJSON_AddItemToArray(list, byte_level(0, 0));
            cJSON_AddItemToObject(seq, "pretokenizers", list);
            return seq;
        }
    return byte_level(0, 1);
}

/* TemplateProcessing: "$A" with the bos token before it and/or eos after it. */
static cJSON *post_processor(const meta *m)
{
    cJSON *pp = cJSON_CreateObject(), *single = cJSON_CreateArray(), *pair = cJSON_CreateArray();
    cJSON *specials = cJSON_CreateObject();
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    for (int seq = 0; seq < 2; seq++) {
        cJSON *list = seq ? pair : single;
        for (int part = 0; part <= seq; part++) {
            int wrap[2] = {m->add_bos == 1 && m->id[0] >= 0, m->add_eos == 1 && m->id[1] >= 0};
            for (int side = 0; side < 3; side++) {
                if (side != 1 && !wrap[side / 2])
                    continue;
                cJSON *item = cJSON_CreateObject(), *body = cJSON_CreateObject();
                if (side == 1) {
                    cJSON_AddStringToObject(body, "id", part ? "B" : "A");
                } else {
                    zt_gguf_str s = m->tokens->strs[m->id[side / 2]];
                    char name[256];
                    snprintf(name, sizeof name, "%.*s", (int)(s.len > 255 ? 255 : s.len), s.s);
                    cJSON_AddStringToObject(body, "id", name);
                }
                cJSON_AddNumberToObject(body, "type_id", part);
                cJSON_AddItemToObject(item, side == 1 ? "Sequence" : "SpecialToken", body);
                cJSON_AddItemToArray(list, item);
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        if (!((k ? m->add_eos : m->add_bos) == 1 && m->id[k] >= 0))
            continue;
        zt_gguf_str s = m->tokens->strs[m->id[k]];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(s.len > 255 ? 255 : s.len), s.s);
        cJSON *e = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *toks = cJSON_CreateArray();
        cJSON_AddStringToObject(e, "id", name);
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)m->id[k]));
        cJSON_AddItemToArray(toks, cJSON_CreateString(name));
        cJSON_AddItemToObject(e, "ids", ids);
        cJSON_AddItemToObject(e, "tokens", toks);
        cJSON_AddItemToObject(specials, name, e);
    }
    cJSON_AddItemToObject(pp, "single", single);
    cJSON_AddItemToObject(pp, "pair", pair);
    cJSON_AddItemToObject(pp, "special_tokens", specials);
    return pp;
}

/* model.merges as [left, right] pairs: each "left right" of the file split at its
 * one space. */
static int merges_json(const zt_gguf *g, const meta *m, cJSON *out, zt_err *err)
{
    for (uint64_t i = 0; i < m->merges->count; i++) {
        zt_gguf_str s = m->merges->strs[i];
        const char *sp = memchr(s.s, ' ', s.len);
        if (!sp || sp == s.s || sp + 1 == s.s + s.len || memchr(sp + 1, ' ', (size_t)(s.s + s.len - sp - 1)))
            return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.merges\": merge %llu is not \"left right\"",
                           zt_gguf_path(g), (unsigned long long)i);
        char *buf = malloc(s.len + 1);
        if (!buf)
            return zt_fail(err, ZT_EFAIL, "out of memory");
        memcpy(buf, s.s, s.len);
        buf[s.len] = 0;
        buf[sp - s.s] = 0;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(buf));
        cJSON_AddItemToArray(pair, cJSON_CreateString(buf + (sp - s.s) + 1));
        cJSON_AddItemToArray(out, pair);
        free(buf);
    }
    return ZT_OK;
}

static cJSON *byte_level_decoder(void) { return byte_level(1, 1); }

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* "▁" for spaces, prepended at the start of the text only, words not split: what
 * transformers' LlamaTokenizer sets. */
static cJSON *metaspace(void)
{
    cJSON *p = typed("Metaspace");
    cJSON_AddStringToObject(p, "replacement", SP);
    cJSON_AddStringToObject(p, "prepend_scheme", "first");
    cJSON_AddBoolToObject(p, "split", 0);
    return p;
}

static cJSON *spm_decoder(void)
{
    cJSON *d = typed("Sequence"), *list = cJSON_CreateArray(), *r = typed("Replace"), *st = typed("Strip");
    cJSON_AddItemToObject(r, "pattern", pattern("String", SP));
    cJSON_AddStringToObject(r, "content", " ");
    cJSON_AddStringToObject(st, "content", " ");
    cJSON_AddNumberToObject(st, "start", 1);
    cJSON_AddNumberToObject(st, "stop", 0);
    cJSON_AddItemToArray(list, r);
    cJSON_AddItemToArray(list, typed("ByteFallback"));
    cJSON_AddItemToArray(list, typed("Fuse"));
    cJSON_AddItemToArray(list, st);
    cJSON_AddItemToObject(d, "decoders", list);
    return d;
}

/* A merge recovered from the vocabulary: token `of` split into two tokens. */
typedef struct cand {
    int32_t l, r;
    uint32_t of, lcp, rcp; /* the token it makes; the halves' lengths in characters */
    double score;
    size_t seq;            /* position before the final sort (ties keep it, as Python's sort) */
} cand;

static int by_ids(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return x->l != y->l ? (x->l > y->l) - (x->l < y->l) : (x->r > y->r) - (x->r < y->r);
}

/* Best first: higher score, then longer left half, then longer right half. */
static int by_rank(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    if (x->lcp != y->lcp)
        return x->lcp < y->lcp ? 1 : -1;
    if (x->rcp != y->rcp)
        return x->rcp < y->rcp ? 1 : -1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Every way to cut each token (in order) into two tokens of the vocabulary, each
 * token's cuts ordered by the halves' ids; then all of them best first by the
 * whole token's score (transformers' generate_merges, which the GGUF loader uses
 * when the file has no merges). */
static int collect_cuts(const meta *m, const zt_strmap *ids, cand **out, size_t *n, size_t *cap)
{
    for (uint64_t i = 0; i < m->tokens->count; i++) {
        const uint8_t *s = (const uint8_t *)m->tokens->strs[i].s;
        size_t len = m->tokens->strs[i].len, first = *n;
        uint32_t chars_left = 0;
        for (size_t at = 0; at < len;) {
            uint32_t cp;
            int l = zt_utf8_decode(s + at, len - at, &cp);
            at += l > 0 ? (size_t)l : 1;
            if (at >= len)
                break;
            chars_left++;
            long a = zt_strmap_find(ids, s, at), b = zt_strmap_find(ids, s + at, len - at);
            if (a < 0 || b < 0)
                continue;
            if (*n == *cap) {
                size_t nc = *cap ? 2 * *cap : 4096;
                cand *p = realloc(*out, nc * sizeof *p);
                if (!p)
                    return ZT_EFAIL;
                *out = p, *cap = nc;
            }
            (*out)[(*n)++] = (cand){ids->values[a], ids->values[b], (uint32_t)i, chars_left, 0,
                                    zt_gguf_arr_float(m->scores, i), 0};
        }
        for (size_t k = first; k < *n; k++) /* right half: the token's characters less the left's */
            (*out)[k].rcp = chars_left + 1 - (*out)[k].lcp;
        if (*n > first) /* an empty qsort's NULL base is not qsort's to take */
            qsort(*out + first, *n - first, sizeof **out, by_ids);
    }
    return ZT_OK;
}

static int merges_from_scores(const meta *m, cJSON *merges, zt_err *err)
{
    zt_strmap ids;
    zt_strmap_init(&ids);
    cand *c = NULL;
    size_t n = 0, cap = 0;
    int rc = ZT_OK, added;
    for (uint64_t i = 0; i < m->tokens->count && rc == ZT_OK; i++)
        if (zt_strmap_put(&ids, m->tokens->strs[i].s, m->tokens->strs[i].len, (int32_t)i, &added) < 0)
            rc = ZT_EFAIL;
    if (rc == ZT_OK)
        rc = collect_cuts(m, &ids, &c, &n, &cap);
    for (size_t k = 0; k < n; k++)
        c[k].seq = k;
    if (rc == ZT_OK && n)
        qsort(c, n, sizeof *c, by_rank);
    for (size_t k = 0; k < n && rc == ZT_OK; k++) {
        zt_gguf_str l = m->tokens->strs[c[k].l], r = m->tokens->strs[c[k].r];
        char *ls = strndup(l.s, l.len), *rs = strndup(r.s, r.len);
        cJSON *pair = cJSON_CreateArray();
        if (!ls || !rs || !pair)
            rc = ZT_EFAIL;
        else
            cJSON_AddItemToArray(pair, cJSON_CreateString(ls)), cJSON_AddItemToArray(pair, cJSON_CreateString(rs));
        cJSON_AddItemToArray(merges, pair);
        free(ls), free(rs);
    }
    free(c);
    zt_strmap_free(&ids);
    return rc ? zt_fail(err, ZT_EFAIL, "out of memory recovering the merges") : ZT_OK;
}

static cJSON *tokenizer_json(const zt_gguf *g, const meta *m, zt_err *err, int *rc)
{
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject();
    cJSON *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", m->spm ? metaspace() : pre_tokenizer(m->pre));
    cJSON_AddItemToObject(root, "post_processor", post_processor(m));
    cJSON_AddItemToObject(root, "decoder", m->spm ? spm_decoder() : byte_level_decoder());
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", m->spm);
    cJSON_AddBoolToObject(model, "byte_fallback", m->spm);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(root, "model", model);
    if ((*rc = vocab_and_added(g, m, vocab, added, err)) ||
        (*rc = m->merges ? merges_json(g, m, merges, err) : merges_from_scores(m, merges, err))) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The token's text as a JSON string value, or null. */
static void add_token_name(cJSON *o, const char *key, const meta *m, int k)
{
    if (m->id[k] < 0) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    zt_gguf_str s = m->tokens->strs[m->id[k]];
    char *buf = malloc(s.len + 1);
    if (!buf)
        return;
    memcpy(buf, s.s, s.len);
    buf[s.len] = 0;
    cJSON_AddStringToObject(o, key, buf);
    free(buf);
}

static cJSON *tokenizer_config(const meta *m)
{
    cJSON *o = cJSON_CreateObject();
    if (m->add_bos >= 0)
        cJSON_AddBoolToObject(o, "add_bos_token", m->add_bos);
    if (m->add_eos >= 0)
        cJSON_AddBoolToObject(o, "add_eos_token", m->add_eos);
    add_token_name(o, "bos_token", m, 0);
    if (m->chat_template.s) {
        char *t = malloc(m->chat_template.len + 1);
        if (t) {
            memcpy(t, m->chat_template.s, m->chat_template.len);
            t[m->chat_template.len] = 0;
            cJSON_AddStringToObject(o, "chat_template", t);
            free(t);
        }
    }
    add_token_name(o, "eos_token", m, 1);
    add_token_name(o, "pad_token", m, 3);
    cJSON_AddStringToObject(o, "tokenizer_class", "PreTrainedTokenizerFast");
    add_token_name(o, "unk_token", m, 2);
    return o;
}

static cJSON *generation_config(const meta *m)
{
    cJSON *o = cJSON_CreateObject();
    static const char *const keys[4] = {"bos_token_id", "eos_token_id", NULL, "pad_token_id"};
    for (int k = 0; k < 4; k++)
        if (keys[k] && m->id[k] >= 0)
            cJSON_AddNumberToObject(o, keys[k], (double)m->id[k]);
    return o;
}

/* dir/name from j (consumed), printed with cJSON's indentation, through the one
 * JSON writer (core/json.h: atomic, newline-terminated). */
static int write_json(const char *dir, const char *name, cJSON *j, zt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return zt_json_write_text(path, text, 1, err);
}

int zt_gguf_tokenizer_save(const zt_gguf *g, const char *dir, int *bos, int *eos, int *pad, zt_err *err)
{
    meta m;
    int rc = read_meta(g, &m, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < NELEM(other_split_names); i++)
        if (!strcmp(m.pre, other_split_names[i]))
            return zt_fail(err, ZT_EINPUT, "%s: key \"tokenizer.ggml.pre\" is \"%s\", whose split pattern ztrain's "
                           "tokenizer does not implement (supported: GPT-2's and Llama-3's)", zt_gguf_path(g), m.pre);
    cJSON *tj = tokenizer_json(g, &m, err, &rc);
    if (rc || (rc = write_json(dir, "tokenizer.json", tj, err)) ||
        (rc = write_json(dir, "tokenizer_config.json", tokenizer_config(&m), err)) ||
        (rc = write_json(dir, "generation_config.json", generation_config(&m), err)))
        return rc;
    *bos = (int)m.id[0], *eos = (int)m.id[1], *pad = (int)m.id[3];
    return ZT_OK;
}
