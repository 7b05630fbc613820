/* bpe_train.c — byte-level BPE training (see bpe_train.h).
 *
 * The text is pre-tokenized once into distinct words with counts.  Each word
 * is a list of symbol ids; a pair table holds, per adjacent pair (a, b), its
 * count over all words (weighted by word count) and the words it occurs in.
 * One merge step takes the most frequent pair from a max-heap, rewrites only
 * the words that hold it, and updates the counts of the pairs those words lose
 * and gain; heap entries whose count is out of date are skipped when popped.
 * Cost per merge: the length of the words touched, not the corpus. */
#include "bpe_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "bpe.h"
#include "pretok.h"
#include "strmap.h"
#include "text_data.h"
#include "unicode.h"

/* ---- growable arrays (accounted) ---------------------------------------------- */

typedef struct vec {
    void *p;
    size_t n, cap, elem;
} vec;

static int vec_push(vec *v, const void *x)
{
    if (v->n == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 16;
        void *q = zt_alloc(ZT_MEM_OTHER, ncap * v->elem);
        if (!q)
            return -1;
        if (v->p) {
            memcpy(q, v->p, v->n * v->elem);
            zt_free(ZT_MEM_OTHER, v->p, v->cap * v->elem);
        }
        v->p = q, v->cap = ncap;
    }
    memcpy((char *)v->p + v->n++ * v->elem, x, v->elem);
    return 0;
}

static void vec_free(vec *v)
{
    if (v->p)
        zt_free(ZT_MEM_OTHER, v->p, v->cap * v->elem);
    v->p = NULL, v->n = v->cap = 0;
}

#define VEC(T) ((vec){NULL, 0, 0, sizeof(T)})
#define AT(v, T, i) (((T *)(v).p)[i])

/* ---- training state ----------------------------------------------------------- */

typedef struct pair_info {
    int32_t a, b;
    int64_t count;
    vec words;      /* int32 word indices (may repeat, may be stale) */
    uint32_t stamp; /* last merge step that changed count */
} pair_info;

typedef struct heap_ent {
    int64_t count;
    int32_t a, b, pair;
} heap_ent;

typedef struct trainer {
    vec word_sym;     /* int32: all words' symbols, word w at [off[w], off[w] + len[w]) */
    vec word_off, word_len, word_count; /* size_t, int32, int64 */
    vec word_stamp;   /* uint32: last merge step that rewrote the word */
    zt_merges pair_index; /* (a, b) -> index into pairs (as "rank"; merged unused) */
    vec pairs;        /* pair_info */
    vec heap;         /* heap_ent, max by count then min (a, b) */
    vec tok_bytes;    /* uint8: all tokens' bytes */
    vec tok_off, tok_len; /* size_t, int32, per id */
    vec changed;      /* int32 pair indices changed in this step */
    vec merges;       /* int32 pairs (a, b) in rank order */
    zt_strmap tok_by_bytes;
} trainer;

static int heap_before(const heap_ent *x, const heap_ent *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    return x->a != y->a ? x->a < y->a : x->b < y->b;
}

static int heap_push(trainer *tr, heap_ent e)
{
    if (vec_push(&tr->heap, &e))
        return -1;
    heap_ent *h = tr->heap.p;
    size_t i = tr->heap.n - 1;
    while (i > 0 && heap_before(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
    return 0;
}

static heap_ent heap_pop(trainer *tr)
{
    heap_ent *h = tr->heap.p;
    heap_ent top = h[0], last = h[--tr->heap.n];
    size_t i = 0, n = tr->heap.n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const heap_ent *best = &last;
        if (l < n && heap_before(&h[l], best))
            m = l, best = &h[l];
        if (r < n && heap_before(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (n)
        h[i] = last;
    return top;
}

/* Add delta occurrences of (a, b) in word w. */
static int pair_add(trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t w, uint32_t step)
{
    int32_t idx, unused;
    idx = zt_merges_find(&tr->pair_index, a, b, &unused);
    if (idx < 0) {
        pair_info p = {a, b, 0, VEC(int32_t), 0};
        idx = (int32_t)tr->pairs.n;
        if (vec_push(&tr->pairs, &p) || zt_merges_add(&tr->pair_index, a, b, idx, 0) < 0)
            return -1;
    }
    pair_info *p = &AT(tr->pairs, pair_info, idx);
    p->count += delta;
    if (delta > 0 && vec_push(&p->words, &w))
        return -1;
    if (p->stamp != step) {
        p->stamp = step;
        if (vec_push(&tr->changed, &idx))
            return -1;
    }
    return 0;
}

static int push_changed(trainer *tr)
{
    for (size_t i = 0; i < tr->changed.n; i++) {
        int32_t idx = AT(tr->changed, int32_t, i);
        pair_info *p = &AT(tr->pairs, pair_info, idx);
        if (p->count > 0 && heap_push(tr, (heap_ent){p->count, p->a, p->b, idx}))
            return -1;
    }
    tr->changed.n = 0;
    return 0;
}

static int add_token(trainer *tr, const uint8_t *bytes, size_t len, int32_t *id)
{
    int added;
    long e = zt_strmap_put(&tr->tok_by_bytes, bytes, len, (int32_t)tr->tok_off.n, &added);
    if (e < 0)
        return -1;
    *id = tr->tok_by_bytes.values[e];
    if (!added)
        return 0;
    size_t off = tr->tok_bytes.n;
    int32_t l = (int32_t)len;
    for (size_t i = 0; i < len; i++)
        if (vec_push(&tr->tok_bytes, &bytes[i]))
            return -1;
    return vec_push(&tr->tok_off, &off) || vec_push(&tr->tok_len, &l) ? -1 : 0;
}

/* Count the pre-tokenized pieces of every file into distinct words. */
static int count_words(trainer *tr, const char *const *paths, int n_paths, zt_bpe_train_report *rep, zt_err *err)
{
    zt_strmap words;
    zt_strmap_init(&words);
    int rc = ZT_OK;
    for (int f = 0; f < n_paths && !rc; f++) {
        zt_text_file tf;
        if ((rc = zt_text_file_open(paths[f], &tf, err)))
            break;
        const uint8_t *s = (const uint8_t *)tf.data;
        size_t bad = zt_utf8_validate(s, tf.len);
        if (bad < tf.len)
            rc = zt_fail(err, ZT_EINPUT, "%s: byte offset %zu is not valid UTF-8", paths[f], bad);
        for (size_t i = 0; !rc && i < tf.len;) {
            size_t j = zt_pretok_next(ZT_PRETOK_LLAMA3, s, tf.len, i);
            int added;
            long e = zt_strmap_put(&words, s + i, j - i, (int32_t)tr->word_count.n, &added);
            if (e < 0) {
                rc = zt_fail(err, ZT_EFAIL, "out of memory counting words");
                break;
            }
            if (added) {
                int64_t one = 1;
                size_t off = tr->word_sym.n;
                int32_t len = (int32_t)(j - i);
                uint32_t stamp = 0;
                for (size_t k = i; k < j; k++) {
                    int32_t id = 1 + s[k]; /* byte b is token 1 + b */
                    if (vec_push(&tr->word_sym, &id))
                        rc = ZT_EFAIL;
                }
                if (rc || vec_push(&tr->word_count, &one) || vec_push(&tr->word_off, &off) ||
                    vec_push(&tr->word_len, &len) || vec_push(&tr->word_stamp, &stamp))
                    rc = zt_fail(err, ZT_EFAIL, "out of memory counting words");
            } else {
                AT(tr->word_count, int64_t, words.values[e])++;
            }
            i = j;
        }
        rep->bytes += (long)tf.len;
        zt_text_file_close(&tf);
    }
    rep->words = (long)tr->word_count.n;
    zt_strmap_free(&words);
    return rc;
}

/* Merge (a, b) -> c in every word that holds it; returns -1 on memory. */
static int apply_merge(trainer *tr, int32_t pair_idx, int32_t c, uint32_t step)
{
    pair_info *p = &AT(tr->pairs, pair_info, pair_idx);
    int32_t a = p->a, b = p->b;
    vec words = p->words; /* pair_add may grow tr->pairs: keep our own copy of the list */
    p->words = VEC(int32_t);
    int rc = 0;
    for (size_t k = 0; k < words.n && !rc; k++) {
        int32_t w = AT(words, int32_t, k);
        if (AT(tr->word_stamp, uint32_t, w) == step)
            continue; /* listed twice */
        AT(tr->word_stamp, uint32_t, w) = step;
        int32_t *sym = &AT(tr->word_sym, int32_t, AT(tr->word_off, size_t, w));
        int32_t len = AT(tr->word_len, int32_t, w);
        int64_t cnt = AT(tr->word_count, int64_t, w);
        int has = 0;
        for (int32_t i = 0; i + 1 < len; i++)
            has |= sym[i] == a && sym[i + 1] == b;
        if (!has)
            continue; /* stale: an earlier merge consumed it */
        /* the word's old pairs leave, its new pairs arrive (weighted by its count) */
        for (int32_t i = 0; i + 1 < len && !rc; i++)
            rc = pair_add(tr, sym[i], sym[i + 1], -cnt, w, step);
        int32_t k2 = 0;
        for (int32_t i = 0; i < len; i++) {
            if (i + 1 < len && sym[i] == a && sym[i + 1] == b) {
                sym[k2++] = c;
                i++;
            } else {
                sym[k2++] = sym[i];
            }
        }
        AT(tr->word_len, int32_t, w) = k2;
        for (int32_t i = 0; i + 1 < k2 && !rc; i++)
            rc = pair_add(tr, sym[i], sym[i + 1], cnt, w, step);
    }
    vec_free(&words);
    return rc;
}

/* ---- writing the Hugging Face files ---------------------------------------------- */

/* A token's bytes spelled through GPT-2's byte-to-char map. */
static char *spell(const uint8_t *b, size_t n)
{
    static uint32_t map[256];
    if (!map['A']) {
        uint32_t next = 0x100;
        for (int x = 0; x < 256; x++) {
            int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
            map[x] = printable ? (uint32_t)x : next++;
        }
    }
    char *s = malloc(n * 2 + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++)
        o += zt_utf8_encode(map[b[i]], (uint8_t *)o);
    *o = 0;
    return s;
}

static cJSON *added_token_json(void)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", 0);
    cJSON_AddStringToObject(t, "content", ZT_BPE_EOS);
    cJSON_AddBoolToObject(t, "single_word", 0);
    cJSON_AddBoolToObject(t, "lstrip", 0);
    cJSON_AddBoolToObject(t, "rstrip", 0);
    cJSON_AddBoolToObject(t, "normalized", 0);
    cJSON_AddBoolToObject(t, "special", 1);
    return t;
}

static int write_json(const char *dir, const char *name, cJSON *j, zt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return zt_json_write_text(path, cJSON_Print(j), 1, err);
}

static int write_files(const trainer *tr, const char *dir, zt_err *err)
{
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *vocab = cJSON_CreateObject(),
          *merges = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddItemToArray(added, added_token_json());
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", zt_pretok_llama3_pattern);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(list, split);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
    cJSON_AddBoolToObject(bl, "trim_offsets", 1);
    cJSON_AddBoolToObject(bl, "use_regex", 0);
    cJSON_AddItemToArray(list, bl);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
    cJSON_AddBoolToObject(dec, "trim_offsets", 1);
    cJSON_AddBoolToObject(dec, "use_regex", 1);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    int ok = 1;
    cJSON_AddNumberToObject(vocab, ZT_BPE_EOS, 0);
    for (size_t id = 1; id < tr->tok_off.n && ok; id++) {
        char *s = spell(&AT(tr->tok_bytes, uint8_t, AT(tr->tok_off, size_t, id)), (size_t)AT(tr->tok_len, int32_t, id));
        ok = s && cJSON_AddNumberToObject(vocab, s, (double)id);
        free(s);
    }
    for (size_t m = 0; m < tr->merges.n / 2 && ok; m++) {
        int32_t ab[2] = {AT(tr->merges, int32_t, 2 * m), AT(tr->merges, int32_t, 2 * m + 1)};
        char *s[2];
        for (int k = 0; k < 2; k++)
            s[k] = spell(&AT(tr->tok_bytes, uint8_t, AT(tr->tok_off, size_t, ab[k])), (size_t)AT(tr->tok_len, int32_t, ab[k]));
        size_t l0 = s[0] ? strlen(s[0]) : 0, l1 = s[1] ? strlen(s[1]) : 0;
        char *joined = s[0] && s[1] ? malloc(l0 + l1 + 2) : NULL;
        if (joined) {
            /* "left right": the byte map never yields a space, so this is unambiguous */
            memcpy(joined, s[0], l0);
            joined[l0] = ' ';
            memcpy(joined + l0 + 1, s[1], l1 + 1);
            ok = cJSON_AddItemToArray(merges, cJSON_CreateString(joined));
        } else {
            ok = 0;
        }
        free(joined), free(s[0]), free(s[1]);
    }
    int rc = ok ? write_json(dir, "tokenizer.json", root, err) : zt_fail(err, ZT_EFAIL, "out of memory writing tokenizer.json");
    cJSON_Delete(root);
    if (rc)
        return rc;

    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON_AddStringToObject(cfg, "bos_token", ZT_BPE_EOS);
    cJSON_AddStringToObject(cfg, "eos_token", ZT_BPE_EOS);
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", 0);
    cJSON *dec_map = cJSON_AddObjectToObject(cfg, "added_tokens_decoder");
    cJSON *tok0 = added_token_json();
    cJSON_DeleteItemFromObject(tok0, "id");
    cJSON_AddItemToObject(dec_map, "0", tok0);
    rc = write_json(dir, "tokenizer_config.json", cfg, err);
    cJSON_Delete(cfg);
    if (rc)
        return rc;
    cJSON *map = cJSON_CreateObject();
    cJSON_AddStringToObject(map, "bos_token", ZT_BPE_EOS);
    cJSON_AddStringToObject(map, "eos_token", ZT_BPE_EOS);
    rc = write_json(dir, "special_tokens_map.json", map, err);
    cJSON_Delete(map);
    return rc;
}

/* ---- training ------------------------------------------------------------------- */

static void trainer_free(trainer *tr)
{
    for (size_t i = 0; i < tr->pairs.n; i++)
        vec_free(&AT(tr->pairs, pair_info, i).words);
    vec *all[] = {&tr->word_sym, &tr->word_off, &tr->word_len, &tr->word_count, &tr->word_stamp, &tr->pairs,
                  &tr->heap, &tr->tok_bytes, &tr->tok_off, &tr->tok_len, &tr->changed, &tr->merges};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vec_free(all[i]);
    zt_merges_free(&tr->pair_index);
    zt_strmap_free(&tr->tok_by_bytes);
}

int zt_bpe_train(const char *const *paths, int n_paths, int vocab_size, const char *out_dir,
                 zt_bpe_train_report *rep, zt_err *err)
{
    memset(rep, 0, sizeof *rep);
    if (vocab_size < 257)
        return zt_fail(err, ZT_EINPUT, "--vocab_size: %d is too small (at least 257: %s and the 256 bytes)", vocab_size,
                       ZT_BPE_EOS);
    trainer tr = {.word_sym = VEC(int32_t), .word_off = VEC(size_t), .word_len = VEC(int32_t),
                  .word_count = VEC(int64_t), .word_stamp = VEC(uint32_t), .pairs = VEC(pair_info),
                  .heap = VEC(heap_ent), .tok_bytes = VEC(uint8_t), .tok_off = VEC(size_t), .tok_len = VEC(int32_t),
                  .changed = VEC(int32_t), .merges = VEC(int32_t)};
    zt_strmap_init(&tr.tok_by_bytes);
    int rc = zt_merges_init(&tr.pair_index, 1 << 16) ? zt_fail(err, ZT_EFAIL, "out of memory") : ZT_OK;
    /* id 0: <|endoftext|> (not a byte string: it is matched as an added token); ids 1..256: bytes */
    size_t zero_off = 0;
    int32_t zero_len = 0, id;
    if (!rc && (vec_push(&tr.tok_off, &zero_off) || vec_push(&tr.tok_len, &zero_len)))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    for (int b = 0; b < 256 && !rc; b++) {
        uint8_t byte = (uint8_t)b;
        if (add_token(&tr, &byte, 1, &id))
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
    }
    if (!rc)
        rc = count_words(&tr, paths, n_paths, rep, err);
    /* initial pair counts */
    for (size_t w = 0; !rc && w < tr.word_count.n; w++) {
        const int32_t *sym = &AT(tr.word_sym, int32_t, AT(tr.word_off, size_t, w));
        int32_t len = AT(tr.word_len, int32_t, w);
        for (int32_t i = 0; i + 1 < len && !rc; i++)
            if (pair_add(&tr, sym[i], sym[i + 1], AT(tr.word_count, int64_t, w), (int32_t)w, 1))
                rc = zt_fail(err, ZT_EFAIL, "out of memory");
    }
    if (!rc && push_changed(&tr))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    uint32_t step = 1;
    while (!rc && (int)tr.tok_off.n < vocab_size && tr.heap.n) {
        heap_ent e = heap_pop(&tr);
        pair_info *p = &AT(tr.pairs, pair_info, e.pair);
        if (p->count != e.count || p->count <= 0)
            continue; /* out of date */
        /* the new token: the two byte strings joined (an existing one if equal) */
        size_t la = (size_t)AT(tr.tok_len, int32_t, e.a), lb = (size_t)AT(tr.tok_len, int32_t, e.b);
        uint8_t *joined = malloc(la + lb);
        if (!joined) {
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
            break;
        }
        memcpy(joined, &AT(tr.tok_bytes, uint8_t, AT(tr.tok_off, size_t, e.a)), la);
        memcpy(joined + la, &AT(tr.tok_bytes, uint8_t, AT(tr.tok_off, size_t, e.b)), lb);
        int32_t c;
        int bad = add_token(&tr, joined, la + lb, &c);
        free(joined);
        step++;
        if (bad || vec_push(&tr.merges, &e.a) || vec_push(&tr.merges, &e.b) || apply_merge(&tr, e.pair, c, step) ||
            push_changed(&tr))
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
    }
    rep->vocab_size = (int)tr.tok_off.n;
    rep->merges = (int)(tr.merges.n / 2);
    if (!rc && (rc = zt_mkdirs(out_dir, err))) /* with its parents, as save_pretrained does */
        zt_wrap(err, "--output_dir: ");
    if (!rc)
        rc = write_files(&tr, out_dir, err);
    trainer_free(&tr);
    return rc;
}
