/* jinja_lex.c — a template's source cut into text and tags, and a tag cut into
 * expression tokens.
 *
 * Whitespace follows jinja2 in the environment transformers builds for chat
 * templates (trim_blocks and lstrip_blocks on, keep_trailing_newline off):
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}" etc. after it;
 *   - a block or comment tag eats the one newline right after it (trim_blocks);
 *   - spaces and tabs between a line's start and a block or comment tag go
 *     (lstrip_blocks), unless the tag opens with "+";
 *   - line ends are "\n" ("\r\n" and "\r" become "\n"), and one trailing newline
 *     of the source is dropped. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

/* jinja2's newline normalisation and the dropped last newline. */
static char *normalize(jarena *a, const char *src, size_t len, size_t *outlen)
{
    char *d = ja_alloc(a, len + 1);
    if (!d)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else
            d[n++] = src[i];
    }
    if (n && d[n - 1] == '\n')
        n--;
    d[n] = 0;
    *outlen = n;
    return d;
}

/* The end of a tag opened at p (after "{%" or "{{"): the closer's position,
 * skipping string literals; 0 if the tag never closes. */
static size_t tag_end(const char *s, size_t n, size_t p, char close)
{
    char q = 0;
    for (size_t i = p; i + 1 < n; i++) {
        if (q) {
            if (s[i] == '\\')
                i++;
            else if (s[i] == q)
                q = 0;
        } else if (s[i] == '\'' || s[i] == '"')
            q = s[i];
        else if (s[i] == close && s[i + 1] == '}')
            return i;
    }
    return 0;
}

static int line_at(const char *s, size_t pos)
{
    int line = 1;
    for (size_t i = 0; i < pos; i++)
        line += s[i] == '\n';
    return line;
}

typedef struct lexst {
    jarena *a;
    jpiece *v;
    size_t n, cap;
} lexst;

static int push(lexst *L, pkind k, int line, const char *s, size_t n)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        jpiece *p = ja_alloc(L->a, cap * sizeof *p);
        if (!p)
            return -1;
        if (L->n)
            memcpy(p, L->v, L->n * sizeof *p);
        L->v = p;
        L->cap = cap;
    }
    L->v[L->n++] = (jpiece){k, line, s, n};
    return 0;
}

/* The text before a tag, shortened as the tag's opening asks. */
static size_t text_before(const char *s, size_t tstart, size_t tend, char kind, char sign)
{
    size_t e = tend;
    if (sign == '-') {
        while (e > tstart && isspace((unsigned char)s[e - 1]))
            e--;
        return e;
    }
    if (kind == '{' || sign == '+')
        return e;
    /* lstrip_blocks: only blanks between the line's start and the tag. */
    size_t l = e;
    while (l > tstart && s[l - 1] != '\n')
        l--;
    int line_start = l > tstart || tstart == 0 || s[tstart - 1] == '\n';
    if (!line_start)
        return e;
    for (size_t i = l; i < e; i++)
        if (!isspace((unsigned char)s[i]))
            return e;
    return l;
}

int jinja_lex(jarena *a, const char *name, const char *src, size_t len, jpiece **out, size_t *count, zt_err *err)
{
    size_t n;
    const char *s = normalize(a, src, len, &n);
    lexst L = {.a = a};
    if (!s)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
    size_t pos = 0;
    while (pos <= n) {
        const char *o = pos < n ? s + pos : NULL;
        size_t open = n;
        for (const char *q = o; q && (q = memchr(q, '{', (size_t)(s + n - q))); q++)
            if (q + 1 < s + n && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                open = (size_t)(q - s);
                break;
            }
        char kind = open < n ? s[open + 1] : 0;
        char sign = open + 2 < n ? s[open + 2] : 0;
        if (sign != '-' && sign != '+')
            sign = 0;
        size_t te = open < n ? text_before(s, pos, open, kind, sign) : n;
        if (te > pos && push(&L, P_TEXT, line_at(s, pos), s + pos, te - pos))
            return zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
        if (open >= n)
            break;
        size_t in = open + 2 + (sign ? 1 : 0), close;
        if (kind == '#') {
            const char *c = strstr(s + in, "#}");
            close = c ? (size_t)(c - s) : 0;
        } else
            close = tag_end(s, n, in, kind == '{' ? '}' : '%');
        if (!close)
            return zt_fail(err, ZT_EINPUT, "%s: line %d: the tag opened here is never closed", name, line_at(s, open));
        int strip_after = close > in && s[close - 1] == '-';
        size_t inner_end = strip_after ? close - 1 : close;
        if (kind != '#' &&
            push(&L, kind == '{' ? P_OUT : P_STMT, line_at(s, open), s + in, inner_end > in ? inner_end - in : 0))
            return zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
        pos = close + 2;
        if (strip_after)
            while (pos < n && isspace((unsigned char)s[pos]))
                pos++;
        else if (kind != '{' && pos < n && s[pos] == '\n')
            pos++;
    }
    *out = L.v;
    *count = L.n;
    return ZT_OK;
}

static const struct {
    const char *s;
    int op;
} ops[] = {{"//", OP_FDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE},
           {"(", OP_LP},    {")", OP_RP},   {"[", OP_LB},   {"]", OP_RB},   {"{", OP_LC},   {"}", OP_RC},
           {".", OP_DOT},   {",", OP_COMMA}, {":", OP_COLON}, {"|", OP_PIPE}, {"~", OP_TILDE}, {"+", OP_ADD},
           {"-", OP_SUB},   {"*", OP_MUL},  {"/", OP_DIV},  {"%", OP_MOD},  {"<", OP_LT},   {">", OP_GT},
           {"=", OP_ASSIGN}};

/* A string literal's Python escapes, decoded into the arena. */
static int string_tok(jparser *ps, char q)
{
    const char *s = ps->s;
    size_t i = ps->pos + 1;
    char *d = ja_alloc(ps->a, ps->n - ps->pos + 1);
    size_t n = 0;
    if (!d)
        return jp_fail(ps, "out of memory");
    for (; i < ps->n && s[i] != q; i++) {
        if (s[i] != '\\' || i + 1 >= ps->n) {
            d[n++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n': d[n++] = '\n'; break;
        case 't': d[n++] = '\t'; break;
        case 'r': d[n++] = '\r'; break;
        case '0': d[n++] = '\0'; break;
        case '\\': case '\'': case '"': d[n++] = c; break;
        case '\n': break;
        default: return jp_fail(ps, "the string escape \\%c is not supported", c);
        }
    }
    if (i >= ps->n)
        return jp_fail(ps, "a string literal is never closed");
    ps->tok = (jtok){.t = T_STR, .s = d, .n = n};
    ps->pos = i + 1;
    return ZT_OK;
}

static int number_tok(jparser *ps)
{
    const char *s = ps->s + ps->pos;
    char *end;
    size_t k = 0;
    while (ps->pos + k < ps->n && (isdigit((unsigned char)s[k]) || s[k] == '_'))
        k++;
    int is_float = ps->pos + k + 1 < ps->n && s[k] == '.' && isdigit((unsigned char)s[k + 1]);
    char tmp[64];
    size_t m = 0;
    for (size_t i = 0; ps->pos + i < ps->n && m < sizeof tmp - 1; i++) {
        char c = s[i];
        if (!(isdigit((unsigned char)c) || c == '_' || (is_float && (c == '.' || c == 'e' || c == 'E'))))
            break;
        if (c != '_')
            tmp[m++] = c;
        k = i + 1;
    }
    tmp[m] = 0;
    if (is_float)
        ps->tok = (jtok){.t = T_FLOAT, .f = strtod(tmp, &end)};
    else
        ps->tok = (jtok){.t = T_INT, .i = strtoll(tmp, &end, 10)};
    ps->pos += k;
    return ZT_OK;
}

int jp_next(jparser *ps)
{
    while (ps->pos < ps->n && isspace((unsigned char)ps->s[ps->pos]))
        ps->line += ps->s[ps->pos++] == '\n';
    if (ps->pos >= ps->n) {
        ps->tok = (jtok){.t = T_END};
        return ZT_OK;
    }
    const char *s = ps->s + ps->pos;
    if (*s == '\'' || *s == '"')
        return string_tok(ps, *s);
    if (isdigit((unsigned char)*s))
        return number_tok(ps);
    if (isalpha((unsigned char)*s) || *s == '_') {
        size_t k = 0;
        while (ps->pos + k < ps->n && (isalnum((unsigned char)s[k]) || s[k] == '_'))
            k++;
        ps->tok = (jtok){.t = T_NAME, .s = s, .n = k};
        ps->pos += k;
        return ZT_OK;
    }
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t k = strlen(ops[i].s);
        if (ps->pos + k <= ps->n && memcmp(s, ops[i].s, k) == 0) {
            ps->tok = (jtok){.t = T_OP, .op = ops[i].op, .s = s, .n = k};
            ps->pos += k;
            return ZT_OK;
        }
    }
    return jp_fail(ps, "unexpected character '%c'", *s);
}

int jp_is_name(const jparser *ps, const char *word)
{
    return ps->tok.t == T_NAME && strlen(word) == ps->tok.n && memcmp(ps->tok.s, word, ps->tok.n) == 0;
}

int jp_is_op(const jparser *ps, int op) { return ps->tok.t == T_OP && ps->tok.op == op; }
