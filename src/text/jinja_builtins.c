/* jinja_builtins.c — the filters, tests, methods and global functions that
 * Hugging Face chat templates use, each behaving as its jinja2 or Python
 * original (trim is str.strip(), tojson is transformers' json.dumps with
 * ensure_ascii off, split is str.split).  A name outside this list is refused
 * with the template's line. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_impl.h"

static int oom(jrender *r, int line) { return jr_fail(r, line, "out of memory"); }

static jval as_list(jlist *l) { return (jval){.t = JV_LIST, .u.l = l}; }

/* Python's str.strip/lstrip/rstrip: whitespace, or the characters of chars. */
static jval strip(jval s, const jval *chars, int left, int right)
{
    const char *p = s.u.s.s;
    size_t a = 0, b = s.u.s.n;
    const char *set = chars && chars->t == JV_STR ? chars->u.s.s : NULL;
    size_t setn = set ? chars->u.s.n : 0;
#define STRIPPABLE(c) (set ? memchr(set, (c), setn) != NULL : isspace((unsigned char)(c)))
    while (left && a < b && STRIPPABLE(p[a]))
        a++;
    while (right && b > a && STRIPPABLE(p[b - 1]))
        b--;
#undef STRIPPABLE
    return jv_str(p + a, b - a);
}

static int map_case(jrender *r, const jexpr *e, jval s, int mode, jval *out)
{
    char *d = ja_alloc(r->a, s.u.s.n + 1);
    if (!d)
        return oom(r, e->line);
    int word_start = 1;
    for (size_t i = 0; i < s.u.s.n; i++) {
        unsigned char c = (unsigned char)s.u.s.s[i];
        /* 0 upper, 1 lower, 2 capitalize (first upper, rest lower), 3 title */
        int up = mode == 0 || (mode == 2 && i == 0) || (mode == 3 && word_start);
        d[i] = (char)(up ? toupper(c) : tolower(c));
        word_start = !isalpha(c);
    }
    *out = jv_str(d, s.u.s.n);
    return ZT_OK;
}

static int replace(jrender *r, const jexpr *e, jval s, jval *a, size_t n, jval *out)
{
    if (n < 2 || a[0].t != JV_STR || a[1].t != JV_STR || !a[0].u.s.n)
        return jr_fail(r, e->line, "replace expects two strings, the first not empty");
    long long limit = n > 2 && a[2].t == JV_INT ? a[2].u.i : -1;
    jbuf b = {.a = r->a};
    size_t i = 0;
    while (i < s.u.s.n) {
        if (limit != 0 && i + a[0].u.s.n <= s.u.s.n && memcmp(s.u.s.s + i, a[0].u.s.s, a[0].u.s.n) == 0) {
            jb_put(&b, a[1].u.s.s, a[1].u.s.n);
            i += a[0].u.s.n;
            limit--;
        } else
            jb_put(&b, s.u.s.s + i++, 1);
    }
    if (b.oom)
        return oom(r, e->line);
    *out = jv_str(b.p ? b.p : "", b.n);
    return ZT_OK;
}

/* str.split(sep=None, maxsplit=-1) */
static int split(jrender *r, const jexpr *e, jval s, jval *a, size_t n, jval *out)
{
    jlist *l = jl_new(r->a);
    long long max = n > 1 && a[1].t == JV_INT ? a[1].u.i : -1;
    const char *p = s.u.s.s;
    size_t len = s.u.s.n, i = 0;
    if (!l)
        return oom(r, e->line);
    if (n == 0 || a[0].t == JV_NONE) {
        for (;;) {
            while (i < len && isspace((unsigned char)p[i]))
                i++;
            if (i >= len)
                break;
            size_t j = i;
            if (max-- == 0)
                j = len;
            while (j < len && !isspace((unsigned char)p[j]))
                j++;
            size_t end = j;
            if (j == len && max < -1) /* the rest, stripped of trailing whitespace */
                while (end > i && isspace((unsigned char)p[end - 1]))
                    end--;
            if (jl_push(r->a, l, jv_str(p + i, end - i)))
                return oom(r, e->line);
            i = j;
        }
    } else {
        if (a[0].t != JV_STR || !a[0].u.s.n)
            return jr_fail(r, e->line, "split expects a non-empty separator");
        size_t m = a[0].u.s.n;
        for (;;) {
            size_t j = i;
            while (max != 0 && j + m <= len && memcmp(p + j, a[0].u.s.s, m) != 0)
                j++;
            if (max == 0 || j + m > len) {
                if (jl_push(r->a, l, jv_str(p + i, len - i)))
                    return oom(r, e->line);
                break;
            }
            if (jl_push(r->a, l, jv_str(p + i, j - i)))
                return oom(r, e->line);
            i = j + m;
            max--;
        }
    }
    *out = as_list(l);
    return ZT_OK;
}

static int affix(jrender *r, const jexpr *e, jval s, jval *a, size_t n, int end, jval *out)
{
    if (n < 1 || (a[0].t != JV_STR && a[0].t != JV_LIST))
        return jr_fail(r, e->line, "%s expects a string", end ? "endswith" : "startswith");
    size_t k = a[0].t == JV_LIST ? a[0].u.l->n : 1;
    for (size_t i = 0; i < k; i++) {
        jval x = a[0].t == JV_LIST ? a[0].u.l->v[i] : a[0];
        if (x.t != JV_STR)
            return jr_fail(r, e->line, "%s expects strings", end ? "endswith" : "startswith");
        if (x.u.s.n <= s.u.s.n && memcmp(s.u.s.s + (end ? s.u.s.n - x.u.s.n : 0), x.u.s.s, x.u.s.n) == 0) {
            *out = jv_bool(1);
            return ZT_OK;
        }
    }
    *out = jv_bool(0);
    return ZT_OK;
}

static int items_of(jrender *r, int line, jval d, jval *out)
{
    jlist *l = jl_new(r->a);
    if (!l)
        return oom(r, line);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jlist *pair = jl_new(r->a);
        if (!pair || jl_push(r->a, pair, d.u.d->k[i]) || jl_push(r->a, pair, d.u.d->v[i]) ||
            jl_push(r->a, l, as_list(pair)))
            return oom(r, line);
    }
    *out = as_list(l);
    return ZT_OK;
}

static int str_method(jrender *r, const jexpr *e, jval s, jval *a, size_t n, jval *out, int *found)
{
    const char *m = e->obj->name;
    *found = 1;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        *out = strip(s, n ? &a[0] : NULL, m[0] != 'r', m[0] != 'l');
        return ZT_OK;
    }
    if (!strcmp(m, "upper")) return map_case(r, e, s, 0, out);
    if (!strcmp(m, "lower")) return map_case(r, e, s, 1, out);
    if (!strcmp(m, "capitalize")) return map_case(r, e, s, 2, out);
    if (!strcmp(m, "title")) return map_case(r, e, s, 3, out);
    if (!strcmp(m, "split")) return split(r, e, s, a, n, out);
    if (!strcmp(m, "startswith")) return affix(r, e, s, a, n, 0, out);
    if (!strcmp(m, "endswith")) return affix(r, e, s, a, n, 1, out);
    if (!strcmp(m, "replace")) return replace(r, e, s, a, n, out);
    *found = 0;
    return ZT_OK;
}

int jr_method(jrender *r, const jexpr *e, jval obj, jval *a, size_t n, jval *out, int *found)
{
    const char *m = e->obj->name;
    *found = 0;
    if (obj.t == JV_STR)
        return str_method(r, e, obj, a, n, out, found);
    if (obj.t != JV_DICT || obj.u.d->ns)
        return ZT_OK;
    *found = 1;
    if (!strcmp(m, "items"))
        return items_of(r, e->line, obj, out);
    if (!strcmp(m, "get")) {
        const jval *v = n ? jd_getv(obj.u.d, a[0]) : NULL;
        *out = v ? *v : n > 1 ? a[1] : jv_none();
        return ZT_OK;
    }
    if (!strcmp(m, "keys") || !strcmp(m, "values")) {
        jlist *l = jl_new(r->a);
        for (size_t i = 0; l && i < obj.u.d->n; i++)
            if (jl_push(r->a, l, m[0] == 'k' ? obj.u.d->k[i] : obj.u.d->v[i]))
                l = NULL;
        if (!l)
            return oom(r, e->line);
        *out = as_list(l);
        return ZT_OK;
    }
    *found = 0;
    return ZT_OK;
}

static long long length_of(jval v)
{
    if (v.t == JV_STR) {
        long long c = 0;
        for (size_t i = 0; i < v.u.s.n; i++)
            c += ((unsigned char)v.u.s.s[i] & 0xC0) != 0x80;
        return c;
    }
    return v.t == JV_LIST ? (long long)v.u.l->n : v.t == JV_DICT ? (long long)v.u.d->n : 0;
}

/* The argument named kw, or positional argument pos, or NULL. */
static jval *arg(const jexpr *e, jval *a, const char *kw, size_t pos)
{
    for (size_t i = 0; i < e->nargs; i++)
        if (e->kwnames[i] && !strcmp(e->kwnames[i], kw))
            return &a[i];
    size_t p = 0;
    for (size_t i = 0; i < e->nargs; i++)
        if (!e->kwnames[i] && p++ == pos)
            return &a[i];
    return NULL;
}

static int run_test(jrender *r, const jexpr *e, const char *name, jval v, jval *a, size_t n, int *out);

/* selectattr/rejectattr(attr, test, arg) and select/reject(test, arg). */
static int select_items(jrender *r, const jexpr *e, jval v, jval *a, int keep, int by_attr, jval *out)
{
    jlist *l = jl_new(r->a);
    if (!l)
        return oom(r, e->line);
    if (v.t != JV_LIST && v.t != JV_UNDEF)
        return jr_fail(r, e->line, "%s expects a list", e->name);
    size_t first = by_attr ? 1 : 0;
    for (size_t i = 0; v.t == JV_LIST && i < v.u.l->n; i++) {
        jval x = v.u.l->v[i];
        if (by_attr) {
            if (e->nargs < 1 || a[0].t != JV_STR)
                return jr_fail(r, e->line, "%s expects an attribute name", e->name);
            TRY(jr_get_attr(r, e->line, x, a[0], 1, &x));
        }
        int t;
        if (e->nargs > first) {
            if (a[first].t != JV_STR)
                return jr_fail(r, e->line, "%s expects a test name", e->name);
            TRY(run_test(r, e, a[first].u.s.s, x, a + first + 1, e->nargs - first - 1, &t));
        } else
            t = jv_truthy(x);
        if (t == keep && jl_push(r->a, l, v.u.l->v[i]))
            return oom(r, e->line);
    }
    *out = as_list(l);
    return ZT_OK;
}

static int join(jrender *r, const jexpr *e, jval v, jval *a, jval *out)
{
    jval *sep = arg(e, a, "d", 0);
    jbuf b = {.a = r->a};
    if (v.t != JV_LIST)
        return jr_fail(r, e->line, "join expects a list");
    for (size_t i = 0; i < v.u.l->n; i++) {
        if (i && sep)
            jv_str_into(&b, *sep);
        jv_str_into(&b, v.u.l->v[i]);
    }
    if (b.oom)
        return oom(r, e->line);
    *out = jv_str(b.p ? b.p : "", b.n);
    return ZT_OK;
}

static int filter_more(jrender *r, const jexpr *e, jval v, jval *a, jval *out)
{
    const char *f = e->name;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return select_items(r, e, v, a, f[0] == 's', 1, out);
    if (!strcmp(f, "select") || !strcmp(f, "reject"))
        return select_items(r, e, v, a, f[0] == 's', 0, out);
    if (!strcmp(f, "map")) {
        jval *attr = arg(e, a, "attribute", 99);
        jlist *l = jl_new(r->a);
        if (!attr || attr->t != JV_STR || v.t != JV_LIST)
            return jr_fail(r, e->line, "only map(attribute='name') on a list is supported");
        for (size_t i = 0; l && i < v.u.l->n; i++) {
            jval x;
            TRY(jr_get_attr(r, e->line, v.u.l->v[i], *attr, 1, &x));
            if (jl_push(r->a, l, x))
                l = NULL;
        }
        if (!l)
            return oom(r, e->line);
        *out = as_list(l);
        return ZT_OK;
    }
    if (!strcmp(f, "list")) {
        if (v.t == JV_LIST) {
            *out = v;
            return ZT_OK;
        }
        if (v.t == JV_DICT) {
            jval items;
            TRY(items_of(r, e->line, v, &items));
            jlist *l = jl_new(r->a);
            for (size_t i = 0; l && i < items.u.l->n; i++)
                if (jl_push(r->a, l, items.u.l->v[i].u.l->v[0]))
                    l = NULL;
            if (!l)
                return oom(r, e->line);
            *out = as_list(l);
            return ZT_OK;
        }
    }
    return jr_fail(r, e->line, "the filter '%s' is not supported", f);
}

static int filter_str(jrender *r, const jexpr *e, jval v, jval *a, jval *out, int *done)
{
    const char *f = e->name;
    *done = 1;
    if (!strcmp(f, "trim")) {
        if (v.t != JV_STR) { /* jinja2's trim works on str(value) */
            TRY(jr_str(r, v, &v));
        }
        *out = strip(v, arg(e, a, "chars", 0), 1, 1);
        return ZT_OK;
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        TRY(jr_str(r, v, &v));
        return map_case(r, e, v, f[0] == 'u' ? 0 : f[0] == 'l' ? 1 : f[0] == 'c' ? 2 : 3, out);
    }
    if (!strcmp(f, "replace")) {
        TRY(jr_str(r, v, &v));
        return replace(r, e, v, a, e->nargs, out);
    }
    if (!strcmp(f, "string")) return jr_str(r, v, out);
    if (!strcmp(f, "tojson")) {
        jval *ind = arg(e, a, "indent", 0);
        jbuf b = {.a = r->a};
        if (jv_json_into(&b, v, ind && ind->t == JV_INT ? (int)ind->u.i : -1, 0))
            return jr_fail(r, e->line, "tojson: a value of type %s is not JSON serializable", jv_type_name(v));
        if (b.oom)
            return oom(r, e->line);
        *out = jv_str(b.p ? b.p : "", b.n);
        return ZT_OK;
    }
    if (!strcmp(f, "join")) return join(r, e, v, a, out);
    *done = 0;
    return ZT_OK;
}

int jr_filter(jrender *r, const jexpr *e, jval v, jval *out)
{
    jval *a;
    int done;
    const char *f = e->name;
    TRY(jr_args(r, e, &a));
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jval *dv = arg(e, a, "default_value", 0), *b = arg(e, a, "boolean", 1);
        int use = v.t == JV_UNDEF || (b && jv_truthy(*b) && !jv_truthy(v));
        *out = use ? (dv ? *dv : jv_str("", 0)) : v;
        return ZT_OK;
    }
    if (!strcmp(f, "safe")) {
        *out = v;
        return ZT_OK;
    }
    TRY(filter_str(r, e, v, a, out, &done));
    if (done)
        return ZT_OK;
    if (v.t == JV_UNDEF && strcmp(f, "length") && strcmp(f, "count") && strcmp(f, "list"))
        return jr_fail(r, e->line, "the filter '%s' got an undefined value", f);
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        *out = jv_int(length_of(v));
        return ZT_OK;
    }
    if (!strcmp(f, "items")) {
        if (v.t != JV_DICT)
            return jr_fail(r, e->line, "items expects a mapping, not %s", jv_type_name(v));
        return items_of(r, e->line, v, out);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (v.t != JV_LIST)
            return jr_fail(r, e->line, "%s expects a list", f);
        *out = v.u.l->n ? v.u.l->v[f[0] == 'f' ? 0 : v.u.l->n - 1] : (jval){.t = JV_UNDEF};
        return ZT_OK;
    }
    if (!strcmp(f, "int")) {
        if (v.t == JV_INT || v.t == JV_BOOL) *out = jv_int(v.t == JV_INT ? v.u.i : v.u.b);
        else if (v.t == JV_FLOAT) *out = jv_int((long long)v.u.f);
        else if (v.t == JV_STR) *out = jv_int(strtoll(v.u.s.s, NULL, 10));
        else *out = jv_int(0);
        return ZT_OK;
    }
    if (!strcmp(f, "reverse") && v.t == JV_LIST) {
        jlist *l = jl_new(r->a);
        for (size_t i = v.u.l->n; l && i-- > 0;)
            if (jl_push(r->a, l, v.u.l->v[i]))
                l = NULL;
        if (!l)
            return oom(r, e->line);
        *out = as_list(l);
        return ZT_OK;
    }
    return filter_more(r, e, v, a, out);
}

static int type_test(const char *t, jval v, int *out)
{
    static const struct {
        const char *name;
        unsigned mask;
    } types[] = {{"none", 1u << JV_NONE}, {"string", 1u << JV_STR}, {"mapping", 1u << JV_DICT},
                 {"boolean", 1u << JV_BOOL}, {"integer", 1u << JV_INT}, {"float", 1u << JV_FLOAT},
                 {"number", 1u << JV_INT | 1u << JV_FLOAT | 1u << JV_BOOL},
                 {"iterable", 1u << JV_STR | 1u << JV_LIST | 1u << JV_DICT | 1u << JV_UNDEF},
                 {"sequence", 1u << JV_STR | 1u << JV_LIST | 1u << JV_DICT},
                 {"defined", ~(1u << JV_UNDEF)}, {"undefined", 1u << JV_UNDEF}, {"callable", 1u << JV_FUNC}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(t, types[i].name)) {
            *out = (types[i].mask >> v.t) & 1;
            return 1;
        }
    return 0;
}

static int run_test(jrender *r, const jexpr *e, const char *t, jval v, jval *a, size_t n, int *out)
{
    if (type_test(t, v, out))
        return ZT_OK;
    if (!strcmp(t, "true") || !strcmp(t, "false")) {
        *out = v.t == JV_BOOL && v.u.b == (t[0] == 't');
        return ZT_OK;
    }
    if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==") || !strcmp(t, "sameas") ||
        !strcmp(t, "ne") || !strcmp(t, "!=")) {
        if (n < 1)
            return jr_fail(r, e->line, "the test '%s' needs an argument", t);
        int eq = !strcmp(t, "sameas") ? (v.t == a[0].t && jv_equal(v, a[0])) : jv_equal(v, a[0]);
        *out = (t[0] == 'n' || t[0] == '!') ? !eq : eq;
        return ZT_OK;
    }
    if (!strcmp(t, "in")) {
        if (n < 1 || a[0].t != JV_LIST)
            return jr_fail(r, e->line, "the test 'in' needs a list");
        *out = 0;
        for (size_t i = 0; i < a[0].u.l->n && !*out; i++)
            *out = jv_equal(v, a[0].u.l->v[i]);
        return ZT_OK;
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        long long d = t[0] == 'd' ? (n && a[0].t == JV_INT && a[0].u.i ? a[0].u.i : 0) : 2;
        if (v.t != JV_INT || !d)
            return jr_fail(r, e->line, "the test '%s' needs integers", t);
        long long m = ((v.u.i % d) + d) % d;
        *out = t[0] == 'o' ? m == 1 : m == 0;
        return ZT_OK;
    }
    return jr_fail(r, e->line, "the test '%s' is not supported", t);
}

int jr_test(jrender *r, const jexpr *e, jval v, int *out)
{
    jval *a;
    TRY(jr_args(r, e, &a));
    return run_test(r, e, e->name, v, a, e->nargs, out);
}

int jr_str(jrender *r, jval v, jval *out)
{
    if (v.t == JV_STR) {
        *out = v;
        return ZT_OK;
    }
    jbuf b = {.a = r->a};
    jv_str_into(&b, v);
    if (b.oom)
        return oom(r, 0);
    *out = jv_str(b.p ? b.p : "", b.n);
    return ZT_OK;
}

static int call_range(jrender *r, const jexpr *e, jval *a, size_t n, jval *out)
{
    long long lo = 0, hi, step = 1;
    for (size_t i = 0; i < n; i++)
        if (a[i].t != JV_INT)
            return jr_fail(r, e->line, "range expects integers");
    if (n == 1) hi = a[0].u.i;
    else if (n == 2 || n == 3) {
        lo = a[0].u.i;
        hi = a[1].u.i;
        step = n == 3 ? a[2].u.i : 1;
    } else
        return jr_fail(r, e->line, "range expects 1 to 3 arguments");
    if (!step || ((double)hi - (double)lo) / (double)step > 100000)
        return jr_fail(r, e->line, "range: a zero step or more than 100000 items");
    jlist *l = jl_new(r->a);
    for (long long i = lo; l && (step > 0 ? i < hi : i > hi); i += step)
        if (jl_push(r->a, l, jv_int(i)))
            l = NULL;
    if (!l)
        return oom(r, e->line);
    *out = as_list(l);
    return ZT_OK;
}

/* raise_exception, strftime_now, namespace, range, dict — in lookup()'s order. */
int jr_global_call(jrender *r, const jexpr *e, jval *a, const char **kw, size_t n, jval *out)
{
    jval fn;
    TRY(jr_eval(r, e->obj, &fn));
    if (fn.u.fn == 0) {
        jval msg = {.t = JV_STR, .u.s = {"", 0}};
        if (n)
            TRY(jr_str(r, a[0], &msg));
        return jr_fail(r, e->line, "the template raised an exception: %.*s", (int)msg.u.s.n, msg.u.s.s);
    }
    if (fn.u.fn == 1) {
        char buf[256];
        struct tm tm;
        if (n != 1 || a[0].t != JV_STR)
            return jr_fail(r, e->line, "strftime_now expects one format string");
        localtime_r(&r->now, &tm);
        size_t k = strftime(buf, sizeof buf, a[0].u.s.s, &tm);
        *out = jv_str(ja_strdup(r->a, buf, k), k);
        return out->u.s.s ? ZT_OK : oom(r, e->line);
    }
    if (fn.u.fn == 3)
        return call_range(r, e, a, n, out);
    jdict *d = jd_new(r->a);
    if (!d)
        return oom(r, e->line);
    d->ns = fn.u.fn == 2;
    for (size_t i = 0; i < n; i++) {
        if (!kw[i])
            return jr_fail(r, e->line, "%s() takes keyword arguments only", d->ns ? "namespace" : "dict");
        if (jd_set(r->a, d, jv_str(kw[i], strlen(kw[i])), a[i]))
            return oom(r, e->line);
    }
    *out = (jval){.t = JV_DICT, .u.d = d};
    return ZT_OK;
}
