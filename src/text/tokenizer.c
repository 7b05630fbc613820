/* tokenizer.c — loading tokenizer.json and decoding (see tokenizer.h; encoding is tokenizer_encode.c).
 *
 * Vocabulary keys live in "model space": for byte-level BPE the raw bytes a
 * token stands for (tokenizer.json spells them through GPT-2's byte-to-char
 * map, undone at load), for SentencePiece-style BPE the token's UTF-8 with "▁"
 * kept, since the normalizer turned spaces into "▁" before merging.  The
 * encoder then works on bytes either way. */
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../core/input.h"
#include "../core/mem.h"
#include "unicode.h"

#include "tokenizer_impl.h"

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

