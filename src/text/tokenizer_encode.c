/* tokenizer_encode.c — encoding text into ids (see tokenizer.h), and the id
 * lists it fills.  The tokenizer it reads is loaded by tokenizer.c; model-space
 * keys are described there.  The encoder works on bytes for both families. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "tokenizer_impl.h"
#include "unicode.h"

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
