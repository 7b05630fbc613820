/* tokenizer.c — loading tokenizer.json and encoding/decoding (see tokenizer.h).
 *
 * Vocabulary keys live in "model space": for byte-level BPE the raw bytes a
 * token stands for (tokenizer.json spells them through GPT-2's byte-to-char
 * map, undone at load), for SentencePiece-style BPE the token's UTF-8 with "▁"
 * kept, since the normalizer turned spaces into "▁" before merging.  The
 * encoder then works on bytes either way. */
#include "tokenizer.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../core/input.h"
#include "../core/mem.h"
#include "bpe.h"
#include "post_processor.h"
#include "pretok.h"
#include "strmap.h"
#include "unicode.h"

enum { FAMILY_BYTE_LEVEL = 1, FAMILY_SENTENCEPIECE = 2 };
/* SentencePiece's "▁" before a segment (the text between added tokens):
 * Llama-2's Prepend normalizer puts one before every segment; the Metaspace
 * pre-tokenizer only when the segment does not already start with a space,
 * and with prepend_scheme "first" only for the segment at the start of the text. */
enum { SP_PREPEND_NEVER = 0, SP_PREPEND_EVERY, SP_PREPEND_METASPACE_ALWAYS, SP_PREPEND_METASPACE_FIRST };

typedef struct added_token {
    size_t content_off;     /* into strings */
    size_t len;
    int32_t id;
    int special;
} added_token;

struct zt_tokenizer {
    int family;
    zt_pretok_kind pretok;
    int add_prefix_space;   /* byte-level: a space before a segment not starting with one */
    int sp_normalizer;      /* SentencePiece: Llama-2's normalizer (Prepend + Replace) */
    int sp_prepend;         /* SentencePiece: when "▁" is put before a segment (SP_PREPEND_*) */
    int sp_split_words;     /* Metaspace split: every "▁" starts a new word */
    int dec_byte_fallback;  /* the decoder turns <0xNN> into the byte NN */
    int strip_leading;      /* SentencePiece decoder: Strip(" ", 1, 0) after Fuse */
    int byte_fallback, fuse_unk, ignore_merges;
    int sp_splits;          /* SentencePiece: text may be split where no token spans (below) */
    uint8_t *bigram;        /* 256 x 256 bits: byte pair (a, b) occurs inside some token */
    int32_t unk_id, eos_id, bos_id, pad_id;
    int32_t byte_id[256];   /* byte-level: the token of each byte; SentencePiece: <0xNN> (-1: none) */
    int vocab_size;

    zt_strmap vocab;        /* model-space key -> id */
    zt_merges merges;
    /* per id (vocab_size entries): decoded bytes and the tokenizer.json
     * spelling, as offsets + 1 into strings (0: no such id) */
    size_t *dec_off, *dec_len, *name_off;
    uint8_t *is_special;
    uint8_t *strings;       /* NUL-terminated byte strings, one accounted arena */
    size_t strings_len, strings_cap;

    added_token *added;
    int n_added, added_cap;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */
    zt_post_processor post;   /* what add_special_tokens=True puts around a sequence */
};

/* ---- ids ------------------------------------------------------------------- */

static int ids_reserve(zt_ids *ids, size_t need)
{
    if (need <= ids->cap)
        return ZT_OK;
    size_t ncap = ids->cap ? ids->cap : 256;
    while (ncap < need)
        ncap *= 2;
    int32_t *v = zt_alloc(ZT_MEM_OTHER, ncap * sizeof *v);
    if (!v)
        return ZT_EFAIL;
    if (ids->v) {
        memcpy(v, ids->v, ids->n * sizeof *v);
        zt_free(ZT_MEM_OTHER, ids->v, ids->cap * sizeof *v);
    }
    ids->v = v, ids->cap = ncap;
    return ZT_OK;
}

int zt_ids_push(zt_ids *ids, int32_t id)
{
    if (ids_reserve(ids, ids->n + 1))
        return ZT_EFAIL;
    ids->v[ids->n++] = id;
    return ZT_OK;
}

int zt_ids_append(zt_ids *ids, const int32_t *v, size_t n)
{
    if (n == 0) /* nothing: and memcpy may not take the NULL of an empty list */
        return ZT_OK;
    if (ids_reserve(ids, ids->n + n))
        return ZT_EFAIL;
    memcpy(ids->v + ids->n, v, n * sizeof *v);
    ids->n += n;
    return ZT_OK;
}

void zt_ids_free(zt_ids *ids)
{
    if (ids->v)
        zt_free(ZT_MEM_OTHER, ids->v, ids->cap * sizeof *ids->v);
    memset(ids, 0, sizeof *ids);
}

/* ---- GPT-2's byte <-> char map ------------------------------------------------
 * Printable Latin-1 bytes (! .. ~, ¡ .. ¬, ® .. ÿ) stand for themselves; the
 * other 68 bytes, in order, become U+0100, U+0101, ...  so every byte is a
 * visible character in tokenizer.json. */
static uint32_t byte_char[256];
static int char_byte(uint32_t cp)
{
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp < 0x100 + 68) {
        int k = (int)(cp - 0x100);
        for (int b = 0; b < 256; b++)
            if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) && k-- == 0)
                return b;
    }
    return -1;
}
static void init_byte_char(void)
{
    uint32_t next = 0x100;
    for (int b = 0; b < 256; b++)
        byte_char[b] = char_byte((uint32_t)b) == b ? (uint32_t)b : next++;
}

uint32_t zt_tok_byte_to_char(uint8_t b)
{
    if (!byte_char[1])
        init_byte_char();
    return byte_char[b];
}

int zt_tok_char_to_byte(uint32_t cp) { return char_byte(cp); }

/* Model-space key of a byte-level token string: its characters mapped back to
 * bytes.  Returns the length, or -1 if a character is not in the map (such a
 * token, e.g. an added token with a raw space, is never produced by merges). */
static long byte_level_key(const char *s, uint8_t *out)
{
    size_t n = strlen(s), i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        int l = zt_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l)
            return -1;
        int b = char_byte(cp);
        if (b < 0)
            return -1;
        out[k++] = (uint8_t)b;
        i += (size_t)l;
    }
    return (long)k;
}

/* ---- loading ----------------------------------------------------------------- */

/* The whole file, NUL-terminated, in a malloc'ed buffer.  missing_ok: a file
 * that does not exist gives *buf = NULL and ZT_OK (the optional configs). */
static int read_file(const char *path, char **buf, size_t *len, int missing_ok, zt_err *err)
{
    *buf = NULL, *len = 0;
    if (missing_ok && access(path, F_OK) != 0 && errno == ENOENT)
        return ZT_OK;
    int fd;
    struct stat st;
    int rc = zt_open_input(path, "tokenizer", &fd, &st, err); /* regular files only: never blocks */
    if (rc)
        return rc;
    size_t n = (size_t)st.st_size, got = 0;
    char *b = malloc(n + 1);
    while (b && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!b)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu bytes", path, n);
    if (got != n) {
        free(b);
        return zt_fail(err, ZT_EINPUT, "%s: read %zu of %zu bytes", path, got, n);
    }
    b[n] = 0;
    *buf = b, *len = n;
    return ZT_OK;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int is_null_or_absent(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v);
}
/* true/false of key; absent gives def; anything else gives -1. */
static int bool_of(const cJSON *o, const char *key, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return def;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

#define SP "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space */

static int refuse(zt_err *err, const char *file, const char *jpath, const char *what)
{
    return zt_fail(err, ZT_EINPUT, "%s: %s: %s", file, jpath, what);
}

/* normalizer: null, or Llama-2's Sequence[Prepend("▁"), Replace(" " -> "▁")]. */
static int load_normalizer(zt_tokenizer *t, const cJSON *n, const char *file, zt_err *err)
{
    if (!n || cJSON_IsNull(n))
        return ZT_OK;
    const char *type = str_of(n, "type");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    if (!type || strcmp(type, "Sequence") || cJSON_GetArraySize(list) != 2)
        return refuse(err, file, "normalizer",
                      "unsupported normalizer (supported: null, or Sequence[Prepend \"" SP "\", Replace \" \" -> \"" SP "\"] as Llama-2 and Mistral)");
    const cJSON *p = cJSON_GetArrayItem(list, 0), *r = cJSON_GetArrayItem(list, 1);
    const char *pt = str_of(p, "type"), *pp = str_of(p, "prepend");
    if (!pt || strcmp(pt, "Prepend") || !pp || strcmp(pp, SP))
        return refuse(err, file, "normalizer.normalizers[0]", "expected Prepend with prepend \"" SP "\"");
    const char *rt = str_of(r, "type"), *rc = str_of(r, "content");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(r, "pattern");
    const char *ps = str_of(pat, "String");
    if (!rt || strcmp(rt, "Replace") || !ps || strcmp(ps, " ") || !rc || strcmp(rc, SP))
        return refuse(err, file, "normalizer.normalizers[1]", "expected Replace with pattern {\"String\": \" \"} and content \"" SP "\"");
    t->sp_normalizer = 1;
    t->sp_prepend = SP_PREPEND_EVERY;
    return ZT_OK;
}

static int load_split(zt_tokenizer *t, const cJSON *s, const char *file, const char *jpath, zt_err *err)
{
    char path[128];
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const char *re = str_of(pat, "Regex");
    snprintf(path, sizeof path, "%s.pattern", jpath);
    if (!re)
        return refuse(err, file, path, "expected {\"Regex\": ...} with the GPT-2 or Llama-3 pattern");
    if (!strcmp(re, zt_pretok_gpt2_pattern))
        t->pretok = ZT_PRETOK_GPT2;
    else if (!strcmp(re, zt_pretok_llama3_pattern))
        t->pretok = ZT_PRETOK_LLAMA3;
    else
        return refuse(err, file, path, "unsupported split regex (supported: the GPT-2 and Llama-3 patterns)");
    const char *beh = str_of(s, "behavior");
    snprintf(path, sizeof path, "%s.behavior", jpath);
    if (!beh || strcmp(beh, "Isolated"))
        return refuse(err, file, path, "expected \"Isolated\"");
    snprintf(path, sizeof path, "%s.invert", jpath);
    if (bool_of(s, "invert", 0) != 0)
        return refuse(err, file, path, "expected false");
    return ZT_OK;
}

/* pre_tokenizer: null (SentencePiece), ByteLevel (use_regex: GPT-2 pattern),
 * or Sequence[Split(pattern), ByteLevel(use_regex false)] as Llama-3. */
static int load_pretokenizer(zt_tokenizer *t, const cJSON *p, const char *file, zt_err *err)
{
    if (!p || cJSON_IsNull(p))
        return ZT_OK;
    const char *type = str_of(p, "type");
    if (type && !strcmp(type, "ByteLevel")) {
        int ure = bool_of(p, "use_regex", 1), aps = bool_of(p, "add_prefix_space", 0);
        if (ure != 1)
            return refuse(err, file, "pre_tokenizer.use_regex", "expected true for a lone ByteLevel (false needs a Split before it)");
        if (aps < 0)
            return refuse(err, file, "pre_tokenizer.add_prefix_space", "expected true or false");
        t->family = FAMILY_BYTE_LEVEL;
        t->pretok = ZT_PRETOK_GPT2;
        t->add_prefix_space = aps;
        return ZT_OK;
    }
    if (type && !strcmp(type, "Metaspace")) {
        const char *r = str_of(p, "replacement"), *scheme = str_of(p, "prepend_scheme");
        int split = bool_of(p, "split", 1), aps = bool_of(p, "add_prefix_space", -2);
        if (!r || strcmp(r, SP))
            return refuse(err, file, "pre_tokenizer.replacement", "expected \"" SP "\"");
        if (split < 0)
            return refuse(err, file, "pre_tokenizer.split", "expected true or false");
        if (t->sp_normalizer)
            return refuse(err, file, "pre_tokenizer", "Metaspace after the Prepend/Replace normalizer is not supported");
        if (scheme && !strcmp(scheme, "always"))
            t->sp_prepend = SP_PREPEND_METASPACE_ALWAYS;
        else if (scheme && !strcmp(scheme, "first"))
            t->sp_prepend = SP_PREPEND_METASPACE_FIRST;
        else if (scheme && !strcmp(scheme, "never"))
            t->sp_prepend = SP_PREPEND_NEVER;
        else if (!scheme && aps >= 0) /* older files: add_prefix_space */
            t->sp_prepend = aps ? SP_PREPEND_METASPACE_ALWAYS : SP_PREPEND_NEVER;
        else
            return refuse(err, file, "pre_tokenizer.prepend_scheme", "expected \"always\", \"first\" or \"never\"");
        t->family = FAMILY_SENTENCEPIECE;
        t->sp_split_words = split;
        return ZT_OK;
    }
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        const cJSON *a = cJSON_GetArrayItem(list, 0), *b = cJSON_GetArrayItem(list, 1);
        const char *at = str_of(a, "type"), *bt = str_of(b, "type");
        if (cJSON_GetArraySize(list) != 2 || !at || strcmp(at, "Split") || !bt || strcmp(bt, "ByteLevel"))
            return refuse(err, file, "pre_tokenizer.pretokenizers",
                          "unsupported sequence (supported: [Split(regex), ByteLevel(use_regex false)] as Llama-3)");
        int rc = load_split(t, a, file, "pre_tokenizer.pretokenizers[0]", err);
        if (rc)
            return rc;
        if (bool_of(b, "use_regex", 1) != 0)
            return refuse(err, file, "pre_tokenizer.pretokenizers[1].use_regex", "expected false after a Split");
        if (bool_of(b, "add_prefix_space", 0) != 0)
            return refuse(err, file, "pre_tokenizer.pretokenizers[1].add_prefix_space", "expected false after a Split");
        t->family = FAMILY_BYTE_LEVEL;
        return ZT_OK;
    }
    return refuse(err, file, "pre_tokenizer.type",
                  "unsupported pre-tokenizer (supported: null, ByteLevel, Sequence[Split, ByteLevel], Metaspace)");
}

/* decoder: ByteLevel for byte-level; Llama-2's Sequence[Replace("▁" -> " "),
 * ByteFallback, Fuse, Strip(" ", 1, 0)] for SentencePiece. */
static int load_decoder(zt_tokenizer *t, const cJSON *d, const char *file, zt_err *err)
{
    const char *type = str_of(d, "type");
    if (t->family == FAMILY_BYTE_LEVEL) {
        if (!type || strcmp(type, "ByteLevel"))
            return refuse(err, file, "decoder", "a byte-level tokenizer needs the ByteLevel decoder");
        return ZT_OK;
    }
    if (type && !strcmp(type, "Metaspace")) {
        /* "▁" -> " ", and the first token loses its leading space unless prepend_scheme is never */
        const char *r = str_of(d, "replacement"), *scheme = str_of(d, "prepend_scheme");
        if (!r || strcmp(r, SP))
            return refuse(err, file, "decoder.replacement", "expected \"" SP "\"");
        int aps = bool_of(d, "add_prefix_space", 1);
        t->strip_leading = scheme ? strcmp(scheme, "never") != 0 : aps == 1;
        return ZT_OK;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
    static const char *want[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    if (!type || strcmp(type, "Sequence") || cJSON_GetArraySize(list) != 4)
        return refuse(err, file, "decoder",
                      "unsupported decoder (supported for SentencePiece-style BPE: Sequence[Replace, ByteFallback, Fuse, Strip] as Llama-2, or Metaspace)");
    for (int i = 0; i < 4; i++) {
        const cJSON *x = cJSON_GetArrayItem(list, i);
        const char *xt = str_of(x, "type");
        char path[64];
        snprintf(path, sizeof path, "decoder.decoders[%d]", i);
        if (!xt || strcmp(xt, want[i]))
            return refuse(err, file, path, i == 0 ? "expected Replace" : i == 1 ? "expected ByteFallback" : i == 2 ? "expected Fuse" : "expected Strip");
    }
    const cJSON *r = cJSON_GetArrayItem(list, 0), *s = cJSON_GetArrayItem(list, 3);
    const char *ps = str_of(cJSON_GetObjectItemCaseSensitive(r, "pattern"), "String"), *rc = str_of(r, "content");
    if (!ps || strcmp(ps, SP) || !rc || strcmp(rc, " "))
        return refuse(err, file, "decoder.decoders[0]", "expected Replace \"" SP "\" -> \" \"");
    const char *sc = str_of(s, "content");
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(s, "start"), *se = cJSON_GetObjectItemCaseSensitive(s, "stop");
    if (!sc || strcmp(sc, " ") || !cJSON_IsNumber(ss) || !cJSON_IsNumber(se) || ss->valuedouble > 1 ||
        ss->valuedouble < 0 || se->valuedouble != 0)
        return refuse(err, file, "decoder.decoders[3]", "expected Strip with content \" \", start 0 or 1, stop 0");
    t->strip_leading = ss->valuedouble == 1;
    t->dec_byte_fallback = 1;
    return ZT_OK;
}

/* Append s[0..len) and a NUL to the string arena; *off receives its offset. */
static int strings_add(zt_tokenizer *t, const void *s, size_t len, size_t *off)
{
    if (t->strings_len + len + 1 > t->strings_cap) {
        size_t ncap = t->strings_cap ? t->strings_cap : 1 << 16;
        while (ncap < t->strings_len + len + 1)
            ncap *= 2;
        uint8_t *p = zt_alloc(ZT_MEM_OTHER, ncap);
        if (!p)
            return ZT_EFAIL;
        if (t->strings) {
            memcpy(p, t->strings, t->strings_len);
            zt_free(ZT_MEM_OTHER, t->strings, t->strings_cap);
        }
        t->strings = p, t->strings_cap = ncap;
    }
    *off = t->strings_len;
    memcpy(t->strings + t->strings_len, s, len);
    t->strings[t->strings_len + len] = 0;
    t->strings_len += len + 1;
    return ZT_OK;
}

static const char *name_of(const zt_tokenizer *t, int32_t id)
{
    return t->name_off[id] ? (const char *)t->strings + t->name_off[id] - 1 : NULL;
}

static int set_token(zt_tokenizer *t, int32_t id, const char *name, const uint8_t *dec, size_t dec_len)
{
    if (t->name_off[id])
        return ZT_OK; /* an added token that is also in the model vocab keeps one entry */
    size_t n_off, d_off;
    if (strings_add(t, name, strlen(name), &n_off) || strings_add(t, dec, dec_len, &d_off))
        return ZT_EFAIL;
    t->name_off[id] = n_off + 1;
    t->dec_off[id] = d_off + 1;
    t->dec_len[id] = dec_len;
    return ZT_OK;
}

/* Decoded bytes of a model token: byte-level keys are already the bytes;
 * SentencePiece turns "▁" into a space and <0xNN> (with byte fallback) into a byte. */
static size_t sp_decoded(const zt_tokenizer *t, const char *s, uint8_t *out)
{
    size_t n = strlen(s), k = 0;
    unsigned v;
    char tail;
    if (t->dec_byte_fallback && n == 6 && sscanf(s, "<0x%2X%c", &v, &tail) == 2 && tail == '>') {
        out[0] = (uint8_t)v;
        return 1;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, SP, 3)) {
            out[k++] = ' ';
            i += 3;
        } else {
            out[k++] = (uint8_t)s[i++];
        }
    }
    return k;
}

static int is_fallback_or_unk(const zt_tokenizer *t, int32_t id)
{
    if (id == t->unk_id)
        return 1;
    for (int b = 0; b < 256; b++)
        if (t->family == FAMILY_SENTENCEPIECE && t->byte_id[b] == id)
            return 1;
    return 0;
}

/* model: the fields ztrain honours must have the values it implements (BPE, no
 * dropout, no subword prefix or suffix), the three switches must be booleans, and
 * vocab and merges must have their JSON types. */
static int check_model(zt_tokenizer *t, const cJSON *m, const char *file, zt_err *err)
{
    const char *type = str_of(m, "type");
    if (!type || strcmp(type, "BPE"))
        return refuse(err, file, "model.type", "unsupported model (supported: BPE)");
    if (!is_null_or_absent(m, "dropout"))
        return refuse(err, file, "model.dropout", "expected null (dropout makes encoding random)");
    const char *csp = str_of(m, "continuing_subword_prefix"), *ews = str_of(m, "end_of_word_suffix");
    if ((csp && *csp) || (!csp && !is_null_or_absent(m, "continuing_subword_prefix")))
        return refuse(err, file, "model.continuing_subword_prefix", "expected null or \"\"");
    if ((ews && *ews) || (!ews && !is_null_or_absent(m, "end_of_word_suffix")))
        return refuse(err, file, "model.end_of_word_suffix", "expected null or \"\"");
    t->fuse_unk = bool_of(m, "fuse_unk", 0);
    t->byte_fallback = bool_of(m, "byte_fallback", 0);
    t->ignore_merges = bool_of(m, "ignore_merges", 0);
    if (t->fuse_unk < 0 || t->byte_fallback < 0 || t->ignore_merges < 0)
        return refuse(err, file, "model", "fuse_unk, byte_fallback and ignore_merges must be true or false");
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "vocab")))
        return refuse(err, file, "model.vocab", "expected an object of token -> id");
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "merges")))
        return refuse(err, file, "model.merges", "expected an array");
    return ZT_OK;
}

/* The vocabulary's size, the largest id of the model and the added tokens + 1 (each
 * id checked to be an integer in [0, 1e9]), and the per-id tables for that size. */
static int size_vocab(zt_tokenizer *t, const cJSON *vocab, const cJSON *added, const char *file, zt_err *err)
{
    long max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e9 || e->valuedouble != (int32_t)e->valuedouble)
            return zt_fail(err, ZT_EINPUT, "%s: model.vocab[\"%s\"]: expected an id in [0, 1e9]", file, e->string);
        if (e->valuedouble > max_id)
            max_id = (long)e->valuedouble;
    }
    int i = 0;
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e9 || id->valuedouble != (int32_t)id->valuedouble)
            return zt_fail(err, ZT_EINPUT, "%s: added_tokens[%d].id: expected an id in [0, 1e9]", file, i);
        if (id->valuedouble > max_id)
            max_id = (long)id->valuedouble;
        i++;
    }
    if (max_id < 0)
        return refuse(err, file, "model.vocab", "empty vocabulary");
    t->vocab_size = (int)max_id + 1;
    size_t nv = (size_t)t->vocab_size;
    t->dec_off = zt_alloc(ZT_MEM_OTHER, nv * sizeof *t->dec_off);
    t->dec_len = zt_alloc(ZT_MEM_OTHER, nv * sizeof *t->dec_len);
    t->name_off = zt_alloc(ZT_MEM_OTHER, nv * sizeof *t->name_off);
    t->is_special = zt_alloc(ZT_MEM_OTHER, nv);
    t->bigram = zt_alloc(ZT_MEM_OTHER, 65536 / 8);
    if (!t->dec_off || !t->dec_len || !t->name_off || !t->is_special || !t->bigram)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu tokens", file, nv);
    return ZT_OK;
}

/* One entry of model.vocab (its id already checked by size_vocab): key -> id in
 * the map (byte-level keys are the bytes the token's characters stand for), the
 * id's name and decoded bytes, and the key's byte pairs in the bigram set. */
static int add_vocab_entry(zt_tokenizer *t, const cJSON *e, const char *file, zt_err *err)
{
    int32_t id = (int32_t)e->valuedouble;
    size_t sl = strlen(e->string);
    uint8_t *key = malloc(sl + 1);
    if (!key)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    long kl;
    if (t->family == FAMILY_BYTE_LEVEL) {
        kl = byte_level_key(e->string, key);
    } else {
        memcpy(key, e->string, sl);
        kl = (long)sl;
    }
    int added_new = 0, rc = ZT_OK;
    if (kl >= 0) {
        long at = zt_strmap_put(&t->vocab, key, (size_t)kl, id, &added_new);
        if (at < 0)
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
        else if (!added_new)
            rc = zt_fail(err, ZT_EINPUT, "%s: model.vocab[\"%s\"]: the same token as id %d", file, e->string,
                         t->vocab.values[at]);
    }
    if (!rc && t->name_off[id])
        rc = zt_fail(err, ZT_EINPUT, "%s: model.vocab[\"%s\"]: id %d is already \"%s\"", file, e->string, id,
                     name_of(t, id));
    if (!rc) {
        uint8_t *dec = malloc(sl + 1);
        size_t dl = 0;
        if (!dec) {
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
        } else {
            if (t->family == FAMILY_BYTE_LEVEL && kl >= 0)
                memcpy(dec, key, (size_t)(dl = (size_t)kl));
            else if (t->family == FAMILY_BYTE_LEVEL)
                memcpy(dec, e->string, dl = sl);
            else
                dl = sp_decoded(t, e->string, dec);
            if (set_token(t, id, e->string, dec, dl))
                rc = zt_fail(err, ZT_EFAIL, "out of memory");
            free(dec);
        }
    }
    for (long k = 0; k + 1 < kl; k++) {
        unsigned bit = (unsigned)key[k] << 8 | key[k + 1];
        t->bigram[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    }
    free(key);
    return rc;
}

/* The symbol of each byte (byte-level: its one-byte token; SentencePiece with
 * byte_fallback: <0xNN>; else none, -1) and model.unk_token's id (-1: none). */
static int load_byte_and_unk_ids(zt_tokenizer *t, const cJSON *m, const char *file, zt_err *err)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        uint8_t one = (uint8_t)b;
        long at;
        if (t->family == FAMILY_BYTE_LEVEL) {
            at = zt_strmap_find(&t->vocab, &one, 1);
        } else {
            snprintf(name, sizeof name, "<0x%02X>", b);
            at = t->byte_fallback ? zt_strmap_find(&t->vocab, name, 6) : -1;
        }
        t->byte_id[b] = at >= 0 ? t->vocab.values[at] : -1;
    }
    const char *unk = str_of(m, "unk_token");
    t->unk_id = -1;
    if (unk) {
        uint8_t key[256];
        long kl = t->family == FAMILY_BYTE_LEVEL && strlen(unk) < 64 ? byte_level_key(unk, key) : -1;
        long at = kl >= 0 ? zt_strmap_find(&t->vocab, key, (size_t)kl) : zt_strmap_find(&t->vocab, unk, strlen(unk));
        if (at < 0)
            return zt_fail(err, ZT_EINPUT, "%s: model.unk_token: \"%s\" is not in model.vocab", file, unk);
        t->unk_id = t->vocab.values[at];
    } else if (!is_null_or_absent(m, "unk_token")) {
        return refuse(err, file, "model.unk_token", "expected a string or null");
    }
    return ZT_OK;
}

/* model.merges[i], "left right" or [left, right]: rank i, merging left's and
 * right's ids into their concatenation's; all three must be in the vocabulary. */
static int add_merge(zt_tokenizer *t, const cJSON *e, int i, const char *file, zt_err *err)
{
    char *left = NULL, *right = NULL, *dup = NULL;
    if (cJSON_IsString(e)) {
        dup = strdup(e->valuestring);
        char *sp = dup ? strchr(dup, ' ') : NULL;
        if (sp && !strchr(sp + 1, ' ')) {
            *sp = 0;
            left = dup, right = sp + 1;
        }
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
        left = cJSON_GetArrayItem(e, 0)->valuestring, right = cJSON_GetArrayItem(e, 1)->valuestring;
    }
    int rc = ZT_OK;
    if (!left) {
        rc = zt_fail(err, ZT_EINPUT, "%s: model.merges[%d]: expected \"left right\" or [\"left\", \"right\"]", file, i);
    } else {
        size_t ll = strlen(left), rl = strlen(right);
        uint8_t *k = malloc(ll + rl + 1);
        long kl = -1, kr = -1;
        if (!k) {
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
        } else {
            if (t->family == FAMILY_BYTE_LEVEL) {
                kl = byte_level_key(left, k);
                kr = kl >= 0 ? byte_level_key(right, k + kl) : -1;
            } else {
                memcpy(k, left, ll), memcpy(k + ll, right, rl);
                kl = (long)ll, kr = (long)rl;
            }
            long a = kl >= 0 ? zt_strmap_find(&t->vocab, k, (size_t)kl) : -1;
            long b = kr >= 0 ? zt_strmap_find(&t->vocab, k + kl, (size_t)kr) : -1;
            long c = kl >= 0 && kr >= 0 ? zt_strmap_find(&t->vocab, k, (size_t)(kl + kr)) : -1;
            if (a < 0 || b < 0 || c < 0)
                rc = zt_fail(err, ZT_EINPUT, "%s: model.merges[%d]: \"%s\", \"%s\" or their concatenation is not in model.vocab",
                             file, i, left, right);
            else if (zt_merges_add(&t->merges, t->vocab.values[a], t->vocab.values[b], i, t->vocab.values[c]) < 0)
                rc = zt_fail(err, ZT_EFAIL, "out of memory");
            /* a merge of a byte-fallback or unk symbol makes a token whose
             * text is not the input's: the bigram rule below cannot see it */
            else if (is_fallback_or_unk(t, t->vocab.values[a]) || is_fallback_or_unk(t, t->vocab.values[b]))
                t->sp_splits = 0;
            free(k);
        }
    }
    free(dup);
    return rc;
}

/* tokenizer.json's model: checked, then the vocabulary, the byte and unk symbols,
 * and the merges (rank = position in model.merges). */
static int load_model(zt_tokenizer *t, const cJSON *m, const cJSON *added, const char *file, zt_err *err)
{
    int rc = check_model(t, m, file, err);
    if (rc)
        return rc;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if ((rc = size_vocab(t, vocab, added, file, err)))
        return rc;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        if ((rc = add_vocab_entry(t, e, file, err)))
            return rc;
    }
    if ((rc = load_byte_and_unk_ids(t, m, file, err)))
        return rc;
    int nm = cJSON_GetArraySize(merges);
    if (zt_merges_init(&t->merges, (size_t)nm))
        return zt_fail(err, ZT_EFAIL, "out of memory for %d merges", nm);
    int i = 0;
    cJSON_ArrayForEach(e, merges)
    {
        if ((rc = add_merge(t, e, i, file, err)))
            return rc;
        i++;
    }
    return ZT_OK;
}

static int load_added(zt_tokenizer *t, const cJSON *added, const char *file, zt_err *err)
{
    int n = cJSON_GetArraySize(added);
    if (added && !cJSON_IsArray(added))
        return refuse(err, file, "added_tokens", "expected an array");
    t->added_cap = n ? n : 1;
    t->added = zt_alloc(ZT_MEM_OTHER, (size_t)t->added_cap * sizeof *t->added);
    if (!t->added)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, added)
    {
        char path[64];
        const char *content = str_of(e, "content");
        if (!content || !*content) {
            snprintf(path, sizeof path, "added_tokens[%d].content", i);
            return refuse(err, file, path, "expected a non-empty string");
        }
        static const char *flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (bool_of(e, flags[f], 0) != 0) {
                snprintf(path, sizeof path, "added_tokens[%d].%s", i, flags[f]);
                return refuse(err, file, path, "expected false (ztrain matches added tokens exactly)");
            }
        int normalized = bool_of(e, "normalized", 0), special = bool_of(e, "special", 0);
        if (normalized && t->sp_normalizer) {
            snprintf(path, sizeof path, "added_tokens[%d].normalized", i);
            return refuse(err, file, path, "expected false (matching after the normalizer is not supported)");
        }
        if (special < 0) {
            snprintf(path, sizeof path, "added_tokens[%d].special", i);
            return refuse(err, file, path, "expected true or false");
        }
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        added_token *a = &t->added[t->n_added++];
        a->len = strlen(content);
        a->id = id;
        a->special = special;
        if (strings_add(t, content, a->len, &a->content_off) ||
            set_token(t, id, content, (const uint8_t *)content, a->len))
            return zt_fail(err, ZT_EFAIL, "out of memory");
        t->is_special[id] = (uint8_t)special;
        t->added_first[(uint8_t)content[0]] = 1;
        i++;
    }
    return ZT_OK;
}

/* The post-processor's special tokens must be ids of this vocabulary: the
 * model's embedding has no row for another. */
static int load_post_processor(zt_tokenizer *t, const cJSON *pp, const char *file, zt_err *err)
{
    int rc = zt_post_processor_load(pp, file, &t->post, err);
    for (int i = 0; rc == ZT_OK && i < t->post.n_prefix + t->post.n_suffix; i++) {
        int32_t id = i < t->post.n_prefix ? t->post.prefix[i] : t->post.suffix[i - t->post.n_prefix];
        if (id >= t->vocab_size)
            rc = zt_fail(err, ZT_EINPUT, "%s: post_processor: special token id %d is outside the vocabulary (%d ids)",
                         file, (int)id, t->vocab_size);
    }
    return rc;
}

/* eos/bos/pad names from tokenizer_config.json, else special_tokens_map.json. */
static int load_special_names(zt_tokenizer *t, const char *dir, zt_err *err)
{
    static const char *files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    t->eos_id = t->bos_id = t->pad_id = -1;
    for (int f = 0; f < 2 && (t->eos_id < 0 || t->bos_id < 0 || t->pad_id < 0); f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        char *buf;
        size_t len;
        int rc = read_file(path, &buf, &len, 1, err);
        if (rc)
            return rc;
        if (!buf)
            continue;
        cJSON *root = cJSON_ParseWithLength(buf, len);
        free(buf);
        if (!root)
            return zt_fail(err, ZT_EINPUT, "%s: not valid JSON", path);
        static const char *keys[] = {"eos_token", "bos_token", "pad_token"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
            const char *name = cJSON_IsString(v) ? v->valuestring : str_of(v, "content");
            int32_t *dst = k == 0 ? &t->eos_id : k == 1 ? &t->bos_id : &t->pad_id;
            if (!name || *dst >= 0)
                continue;
            *dst = zt_tok_token_id(t, name);
            /* pad is only reported (init-model's pad_token_id): one outside the
             * vocabulary is left unset rather than refused, as it was before */
            if (*dst < 0 && k < 2) {
                zt_fail(err, ZT_EINPUT, "%s: %s \"%s\" is not a token of the tokenizer", path, keys[k], name);
                cJSON_Delete(root);
                return ZT_EINPUT;
            }
        }
        cJSON_Delete(root);
    }
    return ZT_OK;
}

int zt_tok_load_file(const char *file, const char *config_dir, zt_tokenizer **out, zt_err *err)
{
    *out = NULL;
    if (!byte_char[1])
        init_byte_char();
    char *buf;
    size_t len;
    int rc = read_file(file, &buf, &len, 0, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zt_fail(err, ZT_EINPUT, "%s: not valid JSON (expected a tokenizer.json object)", file);
    }
    zt_tokenizer *t = zt_alloc(ZT_MEM_OTHER, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return zt_fail(err, ZT_EFAIL, "out of memory");
    }
    zt_strmap_init(&t->vocab);
    t->sp_splits = 1;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!is_null_or_absent(root, "truncation"))
        rc = refuse(err, file, "truncation", "expected null (ztrain tokenizes whole documents)");
    else if (!is_null_or_absent(root, "padding"))
        rc = refuse(err, file, "padding", "expected null");
    else if (!cJSON_IsObject(model))
        rc = refuse(err, file, "model", "missing (expected a BPE model)");
    if (!rc)
        rc = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), file, err);
    if (!rc)
        rc = load_pretokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), file, err);
    if (!rc && !t->family) {
        /* no pre-tokenizer: SentencePiece-style, which needs its normalizer */
        if (!t->sp_normalizer)
            rc = refuse(err, file, "pre_tokenizer",
                        "null without the SentencePiece normalizer: neither byte-level nor SentencePiece-style BPE");
        t->family = FAMILY_SENTENCEPIECE;
    } else if (!rc && t->sp_normalizer && t->family == FAMILY_BYTE_LEVEL) {
        rc = refuse(err, file, "normalizer", "the SentencePiece normalizer with a byte-level pre-tokenizer is not supported");
    }
    if (!rc)
        rc = load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), file, err);
    if (!rc)
        rc = load_model(t, model, added, file, err);
    if (!rc)
        rc = load_added(t, added, file, err);
    if (!rc && t->family == FAMILY_SENTENCEPIECE && !t->byte_fallback && t->unk_id < 0)
        rc = refuse(err, file, "model", "SentencePiece-style BPE needs byte_fallback or an unk_token");
    if (!rc)
        rc = load_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), file, err);
    cJSON_Delete(root);
    if (!rc && config_dir)
        rc = load_special_names(t, config_dir, err);
    if (rc) {
        zt_tok_free(t);
        return rc;
    }
    *out = t;
    return ZT_OK;
}

int zt_tok_load(const char *dir, zt_tokenizer **out, zt_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", dir);
    return zt_tok_load_file(path, dir, out, err);
}

void zt_tok_free(zt_tokenizer *t)
{
    if (!t)
        return;
    size_t nv = (size_t)t->vocab_size;
    zt_free(ZT_MEM_OTHER, t->dec_off, nv * sizeof *t->dec_off);
    zt_free(ZT_MEM_OTHER, t->dec_len, nv * sizeof *t->dec_len);
    zt_free(ZT_MEM_OTHER, t->name_off, nv * sizeof *t->name_off);
    zt_free(ZT_MEM_OTHER, t->is_special, nv);
    zt_free(ZT_MEM_OTHER, t->bigram, 65536 / 8);
    zt_free(ZT_MEM_OTHER, t->added, (size_t)t->added_cap * sizeof *t->added);
    zt_free(ZT_MEM_OTHER, t->strings, t->strings_cap);
    zt_strmap_free(&t->vocab);
    zt_merges_free(&t->merges);
    zt_free(ZT_MEM_OTHER, t, sizeof *t);
}

int zt_tok_vocab_size(const zt_tokenizer *t) { return t->vocab_size; }
int32_t zt_tok_eos_id(const zt_tokenizer *t) { return t->eos_id; }
int32_t zt_tok_bos_id(const zt_tokenizer *t) { return t->bos_id; }
int32_t zt_tok_pad_id(const zt_tokenizer *t) { return t->pad_id; }
int zt_tok_is_special(const zt_tokenizer *t, int32_t id) { return id >= 0 && id < t->vocab_size && t->is_special[id]; }
const zt_post_processor *zt_tok_post_processor(const zt_tokenizer *t) { return &t->post; }

const char *zt_tok_family(const zt_tokenizer *t)
{
    return t->family == FAMILY_BYTE_LEVEL ? "byte-level BPE" : "SentencePiece-style BPE";
}

int32_t zt_tok_token_id(const zt_tokenizer *t, const char *token)
{
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp((const char *)t->strings + t->added[i].content_off, token))
            return t->added[i].id;
    for (int32_t id = 0; id < t->vocab_size; id++)
        if (name_of(t, id) && !strcmp(name_of(t, id), token))
            return id;
    return -1;
}

const uint8_t *zt_tok_id_bytes(const zt_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab_size || !t->dec_off[id])
        return NULL;
    *len = t->dec_len[id];
    return t->strings + t->dec_off[id] - 1;
}

int zt_tok_decode(const zt_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out, size_t *len,
                  zt_err *err)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        if (!zt_tok_id_bytes(t, ids[i], &l))
            return zt_fail(err, ZT_EINPUT, "decode: id %d at position %zu is not in the vocabulary (size %d)", ids[i], i,
                           t->vocab_size);
        total += l;
    }
    char *buf = malloc(total);
    if (!buf)
        return zt_fail(err, ZT_EFAIL, "decode: out of memory for %zu bytes", total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && t->is_special[ids[i]])
            continue;
        memcpy(buf + k, t->strings + t->dec_off[ids[i]] - 1, t->dec_len[ids[i]]);
        k += t->dec_len[ids[i]];
    }
    size_t start = t->strip_leading && k && buf[0] == ' ' ? 1 : 0;
    memmove(buf, buf + start, k - start);
    k -= start;
    buf[k] = 0;
    *out = buf, *len = k;
    return ZT_OK;
}

/* ---- encoding ----------------------------------------------------------------- */

/* ---- where SentencePiece text may be cut ------------------------------------
 * A cut at byte i (a character boundary) cannot change the ids when both
 * characters beside it are tokens of their own (so neither is unk, which
 * fuse_unk could join across) and the byte pair across it, in normalized form
 * (a space is "▁", E2 96 81), occurs inside no token: then no merge can make a
 * token spanning i, the two sides merge independently, and their ids
 * concatenated are the whole's.  Merges of byte-fallback or unk symbols would
 * escape this test, so such a vocabulary disables it (sp_splits = 0). */
static int sp_pair_free(const zt_tokenizer *t, uint8_t last, uint8_t first)
{
    unsigned bit = (unsigned)last << 8 | first;
    return !(t->bigram[bit >> 3] & (1u << (bit & 7)));
}

/* The character of s[a..b) that ends at i (exclusive) or starts at i is a token. */
static int sp_char_is_token(const zt_tokenizer *t, const uint8_t *s, size_t a, size_t b, size_t i, int before)
{
    size_t p = i, q = i;
    if (before) {
        p = i - 1;
        while (p > a && (s[p] & 0xC0) == 0x80)
            p--;
    } else {
        q = i + 1;
        while (q < b && (s[q] & 0xC0) == 0x80)
            q++;
        p = i, i = q;
    }
    if (s[p] == ' ') /* raw text: the normalizer makes it "▁" */
        return zt_strmap_find(&t->vocab, SP, 3) >= 0;
    return zt_strmap_find(&t->vocab, s + p, i - p) >= 0;
}

/* In raw text s[a..b): may it be cut at i? */
static int sp_split_ok(const zt_tokenizer *t, const uint8_t *s, size_t a, size_t b, size_t i)
{
    if ((s[i] & 0xC0) == 0x80)
        return 0; /* not a character boundary */
    uint8_t last = s[i - 1] == ' ' ? 0x81 : s[i - 1], first = s[i] == ' ' ? 0xE2 : s[i];
    return sp_pair_free(t, last, first) && sp_char_is_token(t, s, a, b, i, 1) && sp_char_is_token(t, s, a, b, i, 0);
}

/* Per-thread state: the merge loop's memory, a word cache (piece -> ids, for
 * byte-level BPE where the same words recur), and scratch for symbols. */
typedef struct encoder {
    zt_bpe_work work;
    zt_strmap cache;     /* piece bytes -> offset into cache_ids */
    zt_ids cache_ids;    /* [len, ids...] per cached piece */
    zt_ids sym;
    uint8_t *norm;       /* normalized text (SentencePiece) */
    size_t norm_cap;
} encoder;

enum { CACHE_MAX_ENTRIES = 1 << 16, CACHE_MAX_PIECE = 256 };

static void encoder_free(encoder *e)
{
    zt_bpe_work_free(&e->work);
    zt_strmap_free(&e->cache);
    zt_ids_free(&e->cache_ids);
    zt_ids_free(&e->sym);
    if (e->norm)
        zt_free(ZT_MEM_OTHER, e->norm, e->norm_cap);
}

/* Initial symbol of one character c[0..len): its token if the vocabulary has
 * it; else its bytes <0xNN> (byte fallback, all or nothing); else unk (fused
 * with a preceding unk when fuse_unk); else nothing, as `tokenizers` drops it. */
static int push_char(const zt_tokenizer *t, encoder *e, const uint8_t *c, size_t len)
{
    long at = len == 1 && t->family == FAMILY_BYTE_LEVEL ? -2 : zt_strmap_find(&t->vocab, c, len);
    if (at == -2) {
        if (t->byte_id[c[0]] >= 0)
            return zt_ids_push(&e->sym, t->byte_id[c[0]]);
    } else if (at >= 0) {
        return zt_ids_push(&e->sym, t->vocab.values[at]);
    }
    if (t->byte_fallback && t->family == FAMILY_SENTENCEPIECE) {
        int all = 1;
        for (size_t i = 0; i < len; i++)
            all &= t->byte_id[c[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < len; i++)
                if (zt_ids_push(&e->sym, t->byte_id[c[i]]))
                    return ZT_EFAIL;
            return ZT_OK;
        }
    }
    if (t->unk_id < 0)
        return ZT_OK;
    if (t->fuse_unk && e->sym.n && e->sym.v[e->sym.n - 1] == t->unk_id)
        return ZT_OK;
    return zt_ids_push(&e->sym, t->unk_id);
}

/* BPE of one word w[0..n) (byte-level: symbols are bytes; SentencePiece:
 * UTF-8 characters), appended to out. */
static int encode_word(const zt_tokenizer *t, encoder *e, const uint8_t *w, size_t n, zt_ids *out)
{
    if (t->ignore_merges) {
        long at = zt_strmap_find(&t->vocab, w, n);
        if (at >= 0)
            return zt_ids_push(out, t->vocab.values[at]);
    }
    int cacheable = n <= CACHE_MAX_PIECE;
    if (cacheable) {
        long at = zt_strmap_find(&e->cache, w, n);
        if (at >= 0) {
            const int32_t *c = e->cache_ids.v + e->cache.values[at];
            return zt_ids_append(out, c + 1, (size_t)c[0]);
        }
    }
    e->sym.n = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = 1;
        if (t->family == FAMILY_SENTENCEPIECE && w[i] >= 0x80) {
            uint32_t cp;
            cl = (size_t)zt_utf8_decode(w + i, n - i, &cp);
        }
        if (push_char(t, e, w + i, cl))
            return ZT_EFAIL;
        i += cl;
    }
    long k = zt_bpe_merge(&t->merges, &e->work, e->sym.v, e->sym.n);
    if (k < 0)
        return ZT_EFAIL;
    if (cacheable) {
        if (e->cache.n >= CACHE_MAX_ENTRIES) {
            zt_strmap_clear(&e->cache);
            e->cache_ids.n = 0;
        }
        int added;
        if (e->cache_ids.n + (size_t)k + 1 < INT32_MAX &&
            zt_strmap_put(&e->cache, w, n, (int32_t)e->cache_ids.n, &added) >= 0 && added)
            if (zt_ids_push(&e->cache_ids, (int32_t)k) || zt_ids_append(&e->cache_ids, e->sym.v, (size_t)k))
                return ZT_EFAIL;
    }
    return zt_ids_append(out, e->sym.v, (size_t)k);
}

/* Encode s[0..n), a stretch of text between added tokens.  seg_start: 1 when
 * it begins a segment (where a prefix space or "▁" may be added), 2 when that
 * segment also begins the text, 0 otherwise. */
static int encode_chunk(const zt_tokenizer *t, encoder *e, const uint8_t *s, size_t n, int seg_start, zt_ids *out)
{
    if (t->family == FAMILY_BYTE_LEVEL) {
        const uint8_t *text = s;
        uint8_t *tmp = NULL;
        if (seg_start && t->add_prefix_space && n && s[0] != ' ') {
            if (!(tmp = malloc(n + 1)))
                return ZT_EFAIL;
            tmp[0] = ' ';
            memcpy(tmp + 1, s, n);
            text = tmp, n++;
        }
        int rc = ZT_OK;
        for (size_t i = 0; i < n && !rc;) {
            size_t j = zt_pretok_next(t->pretok, text, n, i);
            rc = encode_word(t, e, text + i, j - i, out);
            i = j;
        }
        free(tmp);
        return rc;
    }
    /* SentencePiece: spaces -> "▁", "▁" prepended to a segment, one BPE word */
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    size_t need = n + 2 * spaces + 3;
    if (need > e->norm_cap) {
        if (e->norm)
            zt_free(ZT_MEM_OTHER, e->norm, e->norm_cap);
        e->norm_cap = need * 2;
        if (!(e->norm = zt_alloc(ZT_MEM_OTHER, e->norm_cap))) {
            e->norm_cap = 0;
            return ZT_EFAIL;
        }
    }
    size_t k = 0;
    int starts_spaced = n && (s[0] == ' ' || (n >= 3 && !memcmp(s, SP, 3)));
    int prepend = seg_start && n &&
                  (t->sp_prepend == SP_PREPEND_EVERY ||
                   (t->sp_prepend == SP_PREPEND_METASPACE_ALWAYS && !starts_spaced) ||
                   (t->sp_prepend == SP_PREPEND_METASPACE_FIRST && seg_start == 2 && !starts_spaced));
    if (prepend)
        memcpy(e->norm, SP, 3), k = 3;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            memcpy(e->norm + k, SP, 3), k += 3;
        else
            e->norm[k++] = s[i];
    }
    /* Cut before each "▁" where no token can span (see sp_split_ok): words,
     * small heaps, and a cache hit for every word seen before.  Metaspace with
     * split cuts before every "▁" by definition. */
    const uint8_t *w = e->norm;
    size_t w0 = 0;
    int sp_is_token = t->sp_splits && zt_strmap_find(&t->vocab, SP, 3) >= 0;
    for (size_t i = 1; (sp_is_token || t->sp_split_words) && i + 2 < k; i++) {
        if (w[i] != 0xE2 || w[i + 1] != 0x96 || w[i + 2] != 0x81)
            continue;
        if (!t->sp_split_words && (!sp_pair_free(t, w[i - 1], 0xE2) || !sp_char_is_token(t, w, w0, k, i, 1)))
            continue;
        int rc = encode_word(t, e, w + w0, i - w0, out);
        if (rc)
            return rc;
        w0 = i;
    }
    return k > w0 ? encode_word(t, e, w + w0, k - w0, out) : ZT_OK;
}

/* A piece of the work: text [start, end), or one added token (added >= 0). */
typedef struct chunk {
    size_t start, end;
    int32_t added;
    int seg_start;
    zt_ids ids;
} chunk;

typedef struct chunk_list {
    chunk *v;
    size_t n, cap;
} chunk_list;

static int chunk_add(chunk_list *l, size_t start, size_t end, int32_t added, int seg_start)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        chunk *v = realloc(l->v, ncap * sizeof *v);
        if (!v)
            return ZT_EFAIL;
        l->v = v, l->cap = ncap;
    }
    l->v[l->n++] = (chunk){start, end, added, seg_start, {0}};
    return ZT_OK;
}

/* Longest added token at s[i..n), or -1. */
static int match_added(const zt_tokenizer *t, const uint8_t *s, size_t n, size_t i)
{
    int best = -1;
    size_t best_len = 0;
    for (int a = 0; a < t->n_added; a++) {
        const added_token *x = &t->added[a];
        if (x->len > best_len && x->len <= n - i && !memcmp(s + i, t->strings + x->content_off, x->len))
            best = a, best_len = x->len;
    }
    return best;
}

/* Split a segment [a, b) into chunks of about `target` bytes at points where
 * encoding the parts separately gives the same ids as encoding the whole:
 *   byte-level: after "x\n" (x an ASCII non-space) and before a non-space --
 *     every pattern's pieces end there (a piece holds a space only as its first
 *     character, or is all white space, or ends in CR/LF), so pre-tokenization
 *     restarts there.  The lone '\n' matters for GPT-2's \s+(?!\S): a longer
 *     white-space run gives up its last character before a non-space but not
 *     at the end of a piece of text;
 *   SentencePiece: where sp_split_ok says no token can span. */
static int split_segment(const zt_tokenizer *t, const uint8_t *s, size_t a, size_t b, size_t target, chunk_list *l)
{
    int can = t->family == FAMILY_BYTE_LEVEL || t->sp_splits;
    size_t start = a;
    int first = a == 0 ? 2 : 1;
    for (size_t i = a + target; can && i < b; i++) {
        if (t->family == FAMILY_BYTE_LEVEL) {
            if (s[i - 1] != '\n')
                continue;
            uint8_t before = i >= a + 2 ? s[i - 2] : ' ';
            if (before >= 0x80 || before == ' ' || (before >= '\t' && before <= '\r'))
                continue;
            uint32_t cp;
            int l = zt_utf8_decode(s + i, b - i, &cp);
            if (!l || zt_uc_class(cp) == ZT_UC_SPACE)
                continue;
        } else if (!sp_split_ok(t, s, a, b, i)) {
            continue;
        }
        if (chunk_add(l, start, i, -1, first))
            return ZT_EFAIL;
        first = 0;
        start = i;
        i = start + target - 1;
    }
    return start < b ? chunk_add(l, start, b, -1, first) : ZT_OK;
}

int zt_tok_encode(const zt_tokenizer *t, const char *text, size_t len, int threads, zt_ids *out, zt_err *err)
{
    return zt_tok_encode_chunked(t, text, len, threads, 1 << 16, out, err);
}

int zt_tok_encode_chunked(const zt_tokenizer *t, const char *text, size_t len, int threads, size_t chunk_bytes,
                          zt_ids *out, zt_err *err)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t bad = zt_utf8_validate(s, len);
    if (bad < len)
        return zt_fail(err, ZT_EINPUT, "byte offset %zu is not valid UTF-8 (byte 0x%02X)", bad, s[bad]);
    if (threads <= 0)
        threads = omp_get_max_threads();
    /* 1. added tokens cut the text into segments (longest match, left to right) */
    chunk_list l = {0};
    /* pieces even on one thread: SentencePiece merges a whole piece at once, and
     * a smaller heap stays in cache */
    size_t target = chunk_bytes ? chunk_bytes : (size_t)-1 / 2;
    size_t seg = 0;
    int rc = ZT_OK;
    for (size_t i = 0; i < len && !rc;) {
        int a = t->added_first[s[i]] ? match_added(t, s, len, i) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        if (seg < i)
            rc = split_segment(t, s, seg, i, target, &l);
        if (!rc)
            rc = chunk_add(&l, i, i + t->added[a].len, t->added[a].id, 0);
        i += t->added[a].len;
        seg = i;
    }
    if (!rc && seg < len)
        rc = split_segment(t, s, seg, len, target, &l);
    if (rc) {
        free(l.v);
        return zt_fail(err, ZT_EFAIL, "encode: out of memory");
    }
    /* 2. chunks are encoded in parallel, each thread with its own encoder */
    int failed = 0;
    int nt = (size_t)threads > l.n ? (int)(l.n ? l.n : 1) : threads;
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        encoder e;
        memset(&e, 0, sizeof e);
        zt_strmap_init(&e.cache);
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < l.n; c++) {
            chunk *ch = &l.v[c];
            if (failed)
                continue;
            if (ch->added >= 0)
                failed |= zt_ids_push(&ch->ids, ch->added) != ZT_OK;
            else
                failed |= encode_chunk(t, &e, s + ch->start, ch->end - ch->start, ch->seg_start, &ch->ids) != ZT_OK;
        }
        encoder_free(&e);
    }
    /* 3. concatenated in order */
    size_t total = 0;
    for (size_t c = 0; c < l.n; c++)
        total += l.v[c].ids.n;
    if (!failed && ids_reserve(out, out->n + total))
        failed = 1;
    for (size_t c = 0; c < l.n; c++) {
        if (!failed)
            zt_ids_append(out, l.v[c].ids.v, l.v[c].ids.n);
        zt_ids_free(&l.v[c].ids);
    }
    free(l.v);
    return failed ? zt_fail(err, ZT_EFAIL, "encode: out of memory") : ZT_OK;
}
