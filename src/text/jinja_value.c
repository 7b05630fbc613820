/* jinja_value.c — the renderer's values and their arena.
 *
 * Values behave as the Python objects jinja2 sees: str() and repr() print as
 * Python prints (True, None, ['a', 'b'], {'k': 1}), tojson prints as
 * json.dumps(ensure_ascii=False) does, truth is Python's truth.  Every byte
 * lives in an arena whose chunks are accounted (core/mem.h), released at once. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "jinja_impl.h"

struct jchunk {
    struct jchunk *next;
    size_t size, used;
};
enum { JA_CHUNK = 64 * 1024 };

void *ja_alloc(jarena *a, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    struct jchunk *c = a->head;
    if (!c || c->used + bytes > c->size) {
        size_t size = bytes > JA_CHUNK ? bytes : JA_CHUNK;
        size_t hdr = (sizeof(struct jchunk) + 15) & ~(size_t)15;
        if (size > JINJA_MAX_ARENA || a->total + size > JINJA_MAX_ARENA)
            return NULL;
        c = zt_alloc(ZT_MEM_OTHER, hdr + size);
        if (!c)
            return NULL;
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += size;
    }
    size_t hdr = (sizeof(struct jchunk) + 15) & ~(size_t)15;
    void *p = (char *)c + hdr + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *ja_strdup(jarena *a, const char *s, size_t n)
{
    char *p = ja_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

void ja_free_all(jarena *a)
{
    size_t hdr = (sizeof(struct jchunk) + 15) & ~(size_t)15;
    while (a->head) {
        struct jchunk *c = a->head;
        a->head = c->next;
        zt_free(ZT_MEM_OTHER, c, hdr + c->size);
    }
    a->total = 0;
}

void jb_put(jbuf *b, const char *s, size_t n)
{
    if (b->oom || !n)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = ja_alloc(b->a, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

jval jv_str(const char *s, size_t n) { return (jval){.t = JV_STR, .u.s = {s, n}}; }
jval jv_int(long long i) { return (jval){.t = JV_INT, .u.i = i}; }
jval jv_bool(int b) { return (jval){.t = JV_BOOL, .u.b = !!b}; }
jval jv_none(void) { return (jval){.t = JV_NONE}; }

jlist *jl_new(jarena *a) { return ja_alloc(a, sizeof(jlist)); }

int jl_push(jarena *a, jlist *l, jval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jval *p = ja_alloc(a, cap * sizeof *p);
        if (!p)
            return -1;
        if (l->n)
            memcpy(p, l->v, l->n * sizeof *p);
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *jd_new(jarena *a) { return ja_alloc(a, sizeof(jdict)); }

const jval *jd_getv(const jdict *d, jval k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

const jval *jd_get(const jdict *d, const char *key, size_t n) { return jd_getv(d, jv_str(key, n)); }

int jd_set(jarena *a, jdict *d, jval k, jval v)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) {
            d->v[i] = v;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jval *nk = ja_alloc(a, cap * sizeof *nk), *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nk || !nv)
            return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

int jv_truthy(jval v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->ns || v.u.d->n != 0;
    case JV_FUNC: return 1;
    }
    return 0;
}

static int is_num(jval v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(jval v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b; }

/* Python's ==: numbers by value (True == 1), containers element by element. */
int jv_equal(jval a, jval b)
{
    if (is_num(a) && is_num(b))
        return num(a) == num(b);
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.s, b.u.s.s, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n)
            return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return 0;
        return 1;
    case JV_DICT:
        if (a.u.d == b.u.d)
            return 1;
        if (a.u.d->ns || b.u.d->ns || a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jval *o = jd_getv(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o))
                return 0;
        }
        return 1;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

/* repr(float) as Python prints it: the shortest digits that read back the same. */
static void float_into(jbuf *b, double f)
{
    char tmp[40];
    if (isnan(f)) {
        jb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* Python writes 1e+16 as 1e+16 and 100.0 as 100.0: %g drops the ".0". */
    if (!strpbrk(tmp, ".e")) {
        jb_puts(b, tmp);
        jb_puts(b, ".0");
        return;
    }
    jb_puts(b, tmp);
}

static void repr_str_into(jbuf *b, const char *s, size_t n)
{
    /* Python picks single quotes unless the text has ' and no ". */
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == (unsigned char)q || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jb_put(b, esc, 2);
        } else if (c == '\n') jb_puts(b, "\\n");
        else if (c == '\r') jb_puts(b, "\\r");
        else if (c == '\t') jb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            jb_puts(b, esc);
        } else
            jb_put(b, (const char *)&c, 1);
    }
    jb_put(b, &q, 1);
}

/* A list's or a dict's repr: open, the items (key: value when keys) joined by
 * ", ", close, as Python prints them. */
static void repr_items(jbuf *b, const char *open, const char *close, const jval *keys, const jval *vals, size_t n)
{
    jb_puts(b, open);
    for (size_t i = 0; i < n; i++) {
        if (i)
            jb_puts(b, ", ");
        if (keys) {
            jv_repr_into(b, keys[i]);
            jb_puts(b, ": ");
        }
        jv_repr_into(b, vals[i]);
    }
    jb_puts(b, close);
}

void jv_repr_into(jbuf *b, jval v)
{
    if (v.t == JV_STR)
        repr_str_into(b, v.u.s.s, v.u.s.n);
    else if (v.t == JV_LIST)
        repr_items(b, "[", "]", NULL, v.u.l->v, v.u.l->n);
    else if (v.t == JV_DICT && !v.u.d->ns)
        repr_items(b, "{", "}", v.u.d->k, v.u.d->v, v.u.d->n);
    else
        jv_str_into(b, v);
}

void jv_str_into(jbuf *b, jval v)
{
    char tmp[32];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts(b, "None"); return;
    case JV_BOOL: jb_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v.u.i); jb_puts(b, tmp); return;
    case JV_FLOAT: float_into(b, v.u.f); return;
    case JV_STR: jb_put(b, v.u.s.s, v.u.s.n); return;
    case JV_DICT:
        if (v.u.d->ns) {
            jb_puts(b, "<Namespace>");
            return;
        }
        jv_repr_into(b, v);
        return;
    case JV_LIST: jv_repr_into(b, v); return;
    case JV_FUNC: jb_puts(b, "<function>"); return;
    }
}

static void json_str_into(jbuf *b, const char *s, size_t n)
{
    jb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': jb_puts(b, "\\\""); break;
        case '\\': jb_puts(b, "\\\\"); break;
        case '\n': jb_puts(b, "\\n"); break;
        case '\r': jb_puts(b, "\\r"); break;
        case '\t': jb_puts(b, "\\t"); break;
        case '\b': jb_puts(b, "\\b"); break;
        case '\f': jb_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                jb_puts(b, esc);
            } else
                jb_put(b, (const char *)&c, 1);
        }
    }
    jb_puts(b, "\"");
}

static void json_nl(jbuf *b, int indent, int depth)
{
    jb_puts(b, "\n");
    for (int i = 0; i < indent * depth; i++)
        jb_puts(b, " ");
}

/* json.dumps: ", " and ": " without indent; "," then a newline and the indent with it. */
int jv_json_into(jbuf *b, jval v, int indent, int depth)
{
    char tmp[32];
    int is_list = v.t == JV_LIST;
    size_t n = is_list ? v.u.l->n : v.t == JV_DICT ? v.u.d->n : 0;
    switch (v.t) {
    case JV_NONE: jb_puts(b, "null"); return 0;
    case JV_BOOL: jb_puts(b, v.u.b ? "true" : "false"); return 0;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v.u.i); jb_puts(b, tmp); return 0;
    case JV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f))
            jb_puts(b, isnan(v.u.f) ? "NaN" : v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            float_into(b, v.u.f);
        return 0;
    case JV_STR: json_str_into(b, v.u.s.s, v.u.s.n); return 0;
    case JV_LIST:
    case JV_DICT:
        if (v.t == JV_DICT && v.u.d->ns)
            return -1;
        jb_puts(b, is_list ? "[" : "{");
        for (size_t i = 0; i < n; i++) {
            if (i)
                jb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                json_nl(b, indent, depth + 1);
            if (!is_list) {
                jval k = v.u.d->k[i];
                if (k.t != JV_STR)
                    return -1;
                json_str_into(b, k.u.s.s, k.u.s.n);
                jb_puts(b, ": ");
            }
            if (jv_json_into(b, is_list ? v.u.l->v[i] : v.u.d->v[i], indent, depth + 1))
                return -1;
        }
        if (indent >= 0 && n)
            json_nl(b, indent, depth);
        jb_puts(b, is_list ? "]" : "}");
        return 0;
    default: return -1;
    }
}

const char *jv_type_name(jval v)
{
    static const char *names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "function"};
    return names[v.t];
}

int jv_from_json(jarena *a, const cJSON *j, jval *out)
{
    if (cJSON_IsNull(j)) *out = jv_none();
    else if (cJSON_IsBool(j)) *out = jv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        *out = jv_str(ja_strdup(a, j->valuestring, n), n);
        if (!out->u.s.s)
            return -1;
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9e15 && !strpbrk(j->valuestring ? j->valuestring : "", ".eE"))
            *out = jv_int((long long)d);
        else
            *out = (jval){.t = JV_FLOAT, .u.f = d};
    } else if (cJSON_IsArray(j)) {
        jlist *l = jl_new(a);
        if (!l)
            return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            jval v;
            if (jv_from_json(a, c, &v) || jl_push(a, l, v))
                return -1;
        }
        *out = (jval){.t = JV_LIST, .u.l = l};
    } else if (cJSON_IsObject(j)) {
        jdict *d = jd_new(a);
        if (!d)
            return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            jval v;
            size_t n = strlen(c->string);
            if (jv_from_json(a, c, &v) || jd_set(a, d, jv_str(ja_strdup(a, c->string, n), n), v))
                return -1;
        }
        *out = (jval){.t = JV_DICT, .u.d = d};
    } else
        return -1;
    return 0;
}
