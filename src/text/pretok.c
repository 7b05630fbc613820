/* pretok.c — GPT-2 and Llama-3 pre-tokenizer patterns (see pretok.h).
 *
 * Each function below is one pattern's alternation, tried in order at position
 * i, the way a backtracking engine (Oniguruma, which `tokenizers` uses) would
 * try it.  The text is valid UTF-8 (the caller checks), so decoding never
 * fails here. */
#include "pretok.h"

#include "unicode.h"

const char zt_pretok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char zt_pretok_llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct ch {
    uint32_t cp;
    int len, cls; /* len 0: end of text */
} ch;

static ch at(const uint8_t *s, size_t n, size_t i)
{
    ch c = {0, 0, -1};
    if (i >= n)
        return c;
    if (s[i] < 0x80) {
        c.cp = s[i], c.len = 1;
    } else {
        c.len = zt_utf8_decode(s + i, n - i, &c.cp);
        if (!c.len) /* not reached with validated text; treat the byte as "other" */
            c.cp = 0xFFFD, c.len = 1;
    }
    c.cls = zt_uc_class(c.cp);
    return c;
}

/* End of the run of characters of class cls starting at i (at most max chars). */
static size_t run_of(const uint8_t *s, size_t n, size_t i, int cls, int max)
{
    for (int k = 0; k < max; k++) {
        ch c = at(s, n, i);
        if (!c.len || c.cls != cls)
            break;
        i += (size_t)c.len;
    }
    return i;
}

static int is_other(ch c) { return c.len && c.cls == ZT_UC_OTHER; }
static int is_crlf(ch c) { return c.len && (c.cp == '\r' || c.cp == '\n'); }

/* 's 't 're 've 'm 'll 'd after an apostrophe at i; case-insensitive for
 * Llama-3, where Unicode case folding also makes U+017F (long s) an 's'. */
static size_t contraction(const uint8_t *s, size_t n, size_t i, int icase)
{
    if (s[i] != '\'')
        return 0;
    ch a = at(s, n, i + 1);
    if (!a.len)
        return 0;
    uint32_t c1 = a.cp;
    if (icase) {
        if (c1 == 0x17F)
            c1 = 's';
        else if (c1 >= 'A' && c1 <= 'Z')
            c1 += 32;
    }
    size_t j = i + 1 + (size_t)a.len;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return j;
    uint32_t want = c1 == 'r' || c1 == 'v' ? 'e' : c1 == 'l' ? 'l' : 0;
    if (!want)
        return 0;
    ch b = at(s, n, j);
    uint32_t c2 = b.cp;
    if (icase && c2 >= 'A' && c2 <= 'Z')
        c2 += 32;
    return b.len && c2 == want ? j + (size_t)b.len : 0;
}

/* \s+(?!\S) then \s+: a run of white space, less its last character when a
 * non-space follows and the run is longer than one (that character then starts
 * the next piece, e.g. the space of " world"). */
static size_t spaces(const uint8_t *s, size_t n, size_t i)
{
    size_t j = i, last = i;
    for (;;) {
        ch c = at(s, n, j);
        if (!c.len || c.cls != ZT_UC_SPACE)
            break;
        last = j;
        j += (size_t)c.len;
    }
    if (j < n && last > i)
        return last;
    return j;
}

static size_t gpt2_next(const uint8_t *s, size_t n, size_t i)
{
    size_t e = contraction(s, n, i, 0);
    if (e)
        return e;
    ch c = at(s, n, i);
    /* " ?X+" for X = letters, numbers, others: an optional leading space. */
    size_t start = i;
    ch x = c;
    if (c.cp == ' ') {
        ch d = at(s, n, i + 1);
        if (d.len && d.cls != ZT_UC_SPACE)
            start = i + 1, x = d;
    }
    if (x.cls == ZT_UC_LETTER || x.cls == ZT_UC_NUMBER || x.cls == ZT_UC_OTHER)
        return run_of(s, n, start, x.cls, 1 << 30);
    return spaces(s, n, i);
}

static size_t llama3_next(const uint8_t *s, size_t n, size_t i)
{
    size_t e = contraction(s, n, i, 1);
    if (e)
        return e;
    ch c = at(s, n, i);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c.cls == ZT_UC_LETTER)
        return run_of(s, n, i, ZT_UC_LETTER, 1 << 30);
    if (c.cls != ZT_UC_NUMBER && !is_crlf(c)) {
        ch d = at(s, n, i + (size_t)c.len);
        if (d.len && d.cls == ZT_UC_LETTER)
            return run_of(s, n, i + (size_t)c.len, ZT_UC_LETTER, 1 << 30);
    }
    /* \p{N}{1,3} */
    if (c.cls == ZT_UC_NUMBER)
        return run_of(s, n, i, ZT_UC_NUMBER, 3);
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t start = i;
    ch x = c;
    if (c.cp == ' ') {
        ch d = at(s, n, i + 1);
        if (is_other(d))
            start = i + 1, x = d;
    }
    if (is_other(x)) {
        size_t j = run_of(s, n, start, ZT_UC_OTHER, 1 << 30);
        while (j < n && (s[j] == '\r' || s[j] == '\n'))
            j++;
        return j;
    }
    /* \s*[\r\n]+ : the white-space run up to and including its last CR or LF. */
    size_t j = i, end = 0;
    for (;;) {
        ch d = at(s, n, j);
        if (!d.len || d.cls != ZT_UC_SPACE)
            break;
        j += (size_t)d.len;
        if (is_crlf(d))
            end = j;
    }
    if (end)
        return end;
    return spaces(s, n, i);
}

size_t zt_pretok_next(zt_pretok_kind kind, const uint8_t *s, size_t n, size_t i)
{
    switch (kind) {
    case ZT_PRETOK_GPT2: return gpt2_next(s, n, i);
    case ZT_PRETOK_LLAMA3: return llama3_next(s, n, i);
    case ZT_PRETOK_NONE: break;
    }
    return n;
}
