/* jinja_eval.c — expressions evaluated over Python-like values, with jinja2's
 * default Undefined: a missing name, key or index is undefined, which prints
 * as nothing, is false, iterates as empty and compares unequal, while any
 * attribute, item, call or arithmetic on it is an error (as UndefinedError). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja_impl.h"

int jr_fail(jrender *r, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return zt_fail(r->err, ZT_EINPUT, "%s: line %d: %s", r->name, line, msg);
}

static const char *undef_what(const jexpr *e)
{
    return e->k == E_NAME || e->k == E_ATTR ? e->name : "value";
}

/* Code points of UTF-8 text: offsets of each, so str[i] and slices count as Python does. */
static size_t cp_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static size_t cp_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    for (size_t c = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == k)
                return i;
            c++;
        }
    }
    return n;
}

static int get_item(jrender *r, int line, jval obj, jval key, jval *out)
{
    *out = (jval){.t = JV_UNDEF};
    if (obj.t == JV_DICT) {
        const jval *v = jd_getv(obj.u.d, key);
        if (v)
            *out = *v;
        return ZT_OK;
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        long long n = obj.t == JV_LIST ? (long long)obj.u.l->n : (long long)cp_count(obj.u.s.s, obj.u.s.n);
        long long i = key.t == JV_INT ? key.u.i : key.u.b;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return ZT_OK;
        if (obj.t == JV_LIST)
            *out = obj.u.l->v[i];
        else {
            size_t a = cp_offset(obj.u.s.s, obj.u.s.n, (size_t)i), b = cp_offset(obj.u.s.s, obj.u.s.n, (size_t)i + 1);
            *out = jv_str(obj.u.s.s + a, b - a);
        }
        return ZT_OK;
    }
    if (obj.t == JV_UNDEF || obj.t == JV_NONE)
        return jr_fail(r, line, "cannot read an item or attribute of %s", obj.t == JV_NONE ? "None" : "an undefined value");
    return ZT_OK;
}

int jr_get_attr(jrender *r, int line, jval obj, jval key, int by_attr, jval *out)
{
    (void)by_attr;
    return get_item(r, line, obj, key, out);
}

static int slice_index(jrender *r, const jexpr *e, long long n, long long step, int which, long long *out)
{
    jval v = {.t = JV_UNDEF};
    if (e)
        TRY(jr_eval(r, e, &v));
    if (v.t == JV_UNDEF || v.t == JV_NONE) {
        *out = which == 0 ? (step > 0 ? 0 : n - 1) : (step > 0 ? n : -1);
        return ZT_OK;
    }
    if (v.t != JV_INT)
        return jr_fail(r, e->line, "slice indices must be integers");
    long long i = v.u.i;
    if (i < 0)
        i += n;
    if (step > 0)
        i = i < 0 ? 0 : i > n ? n : i;
    else
        i = i < -1 ? -1 : i > n - 1 ? n - 1 : i;
    *out = i;
    return ZT_OK;
}

/* Python's seq[a:b:c] on a list or a str (by code points). */
static int eval_slice(jrender *r, const jexpr *e, jval *out)
{
    jval obj, stepv = {.t = JV_UNDEF};
    TRY(jr_eval(r, e->obj, &obj));
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return jr_fail(r, e->line, "cannot slice a value of type %s", jv_type_name(obj));
    if (e->c)
        TRY(jr_eval(r, e->c, &stepv));
    long long step = stepv.t == JV_INT ? stepv.u.i : 1, a, b;
    if (step == 0)
        return jr_fail(r, e->line, "slice step cannot be zero");
    long long n = obj.t == JV_LIST ? (long long)obj.u.l->n : (long long)cp_count(obj.u.s.s, obj.u.s.n);
    if (step > n + 1 || step < -n - 1) /* one item at most: the same slice, without overflow */
        step = step > 0 ? n + 1 : -n - 1;
    TRY(slice_index(r, e->a, n, step, 0, &a));
    TRY(slice_index(r, e->b, n, step, 1, &b));
    jlist *l = jl_new(r->a);
    jbuf sb = {.a = r->a};
    if (!l)
        return jr_fail(r, e->line, "out of memory");
    for (long long i = a; step > 0 ? i < b : i > b; i += step) {
        if (obj.t == JV_LIST) {
            if (jl_push(r->a, l, obj.u.l->v[i]))
                return jr_fail(r, e->line, "out of memory");
        } else {
            size_t x = cp_offset(obj.u.s.s, obj.u.s.n, (size_t)i), y = cp_offset(obj.u.s.s, obj.u.s.n, (size_t)i + 1);
            jb_put(&sb, obj.u.s.s + x, y - x);
        }
    }
    if (sb.oom)
        return jr_fail(r, e->line, "out of memory");
    *out = obj.t == JV_LIST ? (jval){.t = JV_LIST, .u.l = l} : jv_str(sb.p ? sb.p : "", sb.n);
    return ZT_OK;
}

static int is_num(jval v) { return v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT; }
static double num(jval v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b; }
static long long inum(jval v) { return v.t == JV_INT ? v.u.i : v.u.b; }

static int str_concat(jrender *r, int line, jval a, jval b, jval *out)
{
    jbuf buf = {.a = r->a};
    jv_str_into(&buf, a);
    jv_str_into(&buf, b);
    if (buf.oom)
        return jr_fail(r, line, "out of memory");
    *out = jv_str(buf.p ? buf.p : "", buf.n);
    return ZT_OK;
}

static int concat(jrender *r, int line, jval a, jval b, jval *out)
{
    if (a.t == JV_LIST && b.t == JV_LIST) {
        jlist *l = jl_new(r->a);
        for (size_t i = 0; l && i < a.u.l->n + b.u.l->n; i++)
            if (jl_push(r->a, l, i < a.u.l->n ? a.u.l->v[i] : b.u.l->v[i - a.u.l->n]))
                l = NULL;
        if (!l)
            return jr_fail(r, line, "out of memory");
        *out = (jval){.t = JV_LIST, .u.l = l};
        return ZT_OK;
    }
    return str_concat(r, line, a, b, out);
}

static int arith(jrender *r, const jexpr *e, jval a, jval b, jval *out)
{
    int op = e->op;
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return jr_fail(r, e->line, "arithmetic on an undefined value");
    if (op == OP_ADD && ((a.t == JV_STR && b.t == JV_STR) || (a.t == JV_LIST && b.t == JV_LIST)))
        return concat(r, e->line, a, b, out);
    if (op == OP_MUL && a.t == JV_STR && b.t == JV_INT) {
        jbuf buf = {.a = r->a};
        if (b.u.i > 0 && a.u.s.n && (size_t)b.u.i > JINJA_MAX_BYTES / a.u.s.n)
            return jr_fail(r, e->line, "a string of more than %d bytes", JINJA_MAX_BYTES);
        for (long long i = 0; i < b.u.i; i++)
            jb_put(&buf, a.u.s.s, a.u.s.n);
        *out = jv_str(buf.p ? buf.p : "", buf.n);
        return ZT_OK;
    }
    if (!is_num(a) || !is_num(b))
        return jr_fail(r, e->line, "unsupported operand types for an operator: %s and %s", jv_type_name(a),
                       jv_type_name(b));
    int ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
    if ((op == OP_DIV || op == OP_FDIV || op == OP_MOD) && num(b) == 0)
        return jr_fail(r, e->line, "division by zero");
    if (ints && op != OP_DIV && !(op == OP_POW && inum(b) < 0)) {
        long long x = inum(a), y = inum(b), z = 0;
        int over = 0;
        switch (op) {
        case OP_ADD: over = __builtin_add_overflow(x, y, &z); break;
        case OP_SUB: over = __builtin_sub_overflow(x, y, &z); break;
        case OP_MUL: over = __builtin_mul_overflow(x, y, &z); break;
        case OP_FDIV:
            over = x == LLONG_MIN && y == -1;
            z = over ? 0 : x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
            break;
        case OP_MOD: z = y == -1 ? 0 : x % y; if (z && ((z < 0) != (y < 0))) z += y; break;
        case OP_POW:
            z = 1;
            for (long long i = 0; i < y && !over; i++)
                over = __builtin_mul_overflow(z, x, &z);
            break;
        }
        if (over) /* Python would switch to a big integer */
            return jr_fail(r, e->line, "integer overflow (integers beyond 64 bits are not supported)");
        *out = jv_int(z);
        return ZT_OK;
    }
    double x = num(a), y = num(b), z = 0;
    switch (op) {
    case OP_ADD: z = x + y; break;
    case OP_SUB: z = x - y; break;
    case OP_MUL: z = x * y; break;
    case OP_DIV: z = x / y; break;
    case OP_FDIV: z = floor(x / y); break;
    case OP_MOD: z = fmod(x, y); if (z != 0 && ((z < 0) != (y < 0))) z += y; break;
    case OP_POW: z = pow(x, y); break;
    }
    *out = (jval){.t = JV_FLOAT, .u.f = z};
    return ZT_OK;
}

static int contains(jrender *r, int line, jval item, jval seq, int *out)
{
    *out = 0;
    if (seq.t == JV_UNDEF)
        return ZT_OK;
    if (seq.t == JV_STR) {
        if (item.t != JV_STR)
            return jr_fail(r, line, "'in <string>' requires a string on the left, not %s", jv_type_name(item));
        if (!item.u.s.n) {
            *out = 1;
            return ZT_OK;
        }
        for (size_t i = 0; i + item.u.s.n <= seq.u.s.n; i++)
            if (memcmp(seq.u.s.s + i, item.u.s.s, item.u.s.n) == 0) {
                *out = 1;
                break;
            }
        return ZT_OK;
    }
    if (seq.t == JV_LIST) {
        for (size_t i = 0; i < seq.u.l->n && !*out; i++)
            *out = jv_equal(seq.u.l->v[i], item);
        return ZT_OK;
    }
    if (seq.t == JV_DICT && !seq.u.d->ns) {
        *out = jd_getv(seq.u.d, item) != NULL;
        return ZT_OK;
    }
    return jr_fail(r, line, "argument of type %s is not iterable", jv_type_name(seq));
}

static int order(jrender *r, const jexpr *e, jval a, jval b, jval *out)
{
    int c;
    if (is_num(a) && is_num(b))
        c = num(a) < num(b) ? -1 : num(a) > num(b);
    else if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        c = memcmp(a.u.s.s, b.u.s.s, m);
        if (!c)
            c = a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    } else
        return jr_fail(r, e->line, "cannot order %s and %s", jv_type_name(a), jv_type_name(b));
    int res = e->op == OP_LT ? c < 0 : e->op == OP_LE ? c <= 0 : e->op == OP_GT ? c > 0 : c >= 0;
    *out = jv_bool(res);
    return ZT_OK;
}

static int eval_bin(jrender *r, const jexpr *e, jval *out)
{
    jval a, b;
    TRY(jr_eval(r, e->a, &a));
    TRY(jr_eval(r, e->b, &b));
    switch (e->op) {
    case OP_TILDE: /* str(a) + str(b), an undefined side printing as nothing */
        return str_concat(r, e->line, a, b, out);
    case OP_EQ: *out = jv_bool(jv_equal(a, b)); return ZT_OK;
    case OP_NE: *out = jv_bool(!jv_equal(a, b)); return ZT_OK;
    case OP_LT: case OP_LE: case OP_GT: case OP_GE: return order(r, e, a, b, out);
    case OP_IN: case OP_NOTIN: {
        int in;
        TRY(contains(r, e->line, a, b, &in));
        *out = jv_bool(e->op == OP_IN ? in : !in);
        return ZT_OK;
    }
    default: return arith(r, e, a, b, out);
    }
}

static int eval_seq(jrender *r, const jexpr *e, jval *out)
{
    if (e->k == E_LIST) {
        jlist *l = jl_new(r->a);
        if (!l)
            return jr_fail(r, e->line, "out of memory");
        for (size_t i = 0; i < e->nargs; i++) {
            jval v;
            TRY(jr_eval(r, e->args[i], &v));
            if (jl_push(r->a, l, v))
                return jr_fail(r, e->line, "out of memory");
        }
        *out = (jval){.t = JV_LIST, .u.l = l};
        return ZT_OK;
    }
    jdict *d = jd_new(r->a);
    if (!d)
        return jr_fail(r, e->line, "out of memory");
    for (size_t i = 0; i + 1 < e->nargs; i += 2) {
        jval k, v;
        TRY(jr_eval(r, e->args[i], &k));
        TRY(jr_eval(r, e->args[i + 1], &v));
        if (jd_set(r->a, d, k, v))
            return jr_fail(r, e->line, "out of memory");
    }
    *out = (jval){.t = JV_DICT, .u.d = d};
    return ZT_OK;
}

int jr_args(jrender *r, const jexpr *e, jval **vals)
{
    *vals = ja_alloc(r->a, (e->nargs + 1) * sizeof **vals);
    if (!*vals)
        return jr_fail(r, e->line, "out of memory");
    for (size_t i = 0; i < e->nargs; i++)
        TRY(jr_eval(r, e->args[i], &(*vals)[i]));
    return ZT_OK;
}

static int eval_call(jrender *r, const jexpr *e, jval *out)
{
    jval *args;
    if (e->obj->k == E_ATTR) {
        jval recv;
        int found = 0;
        TRY(jr_eval(r, e->obj->obj, &recv));
        if (recv.t == JV_UNDEF)
            return jr_fail(r, e->line, "'%s' is undefined", undef_what(e->obj->obj));
        TRY(jr_args(r, e, &args));
        TRY(jr_method(r, e, recv, args, e->nargs, out, &found));
        if (found)
            return ZT_OK;
        return jr_fail(r, e->line, "the method %s.%s() is not supported", jv_type_name(recv), e->obj->name);
    }
    jval fn;
    TRY(jr_eval(r, e->obj, &fn));
    if (fn.t != JV_FUNC)
        return jr_fail(r, e->line, "'%s' is not callable", e->obj->k == E_NAME ? e->obj->name : jv_type_name(fn));
    TRY(jr_args(r, e, &args));
    return jr_global_call(r, e, args, e->kwnames, e->nargs, out);
}

static int lookup(jrender *r, const jexpr *e, jval *out)
{
    size_t n = strlen(e->name);
    for (jscope *s = r->scope; s; s = s->up) {
        const jval *v = jd_get(s->vars, e->name, n);
        if (v) {
            *out = *v;
            return ZT_OK;
        }
    }
    static const char *funcs[] = {"raise_exception", "strftime_now", "namespace", "range", "dict"};
    for (int i = 0; i < 5; i++)
        if (strcmp(e->name, funcs[i]) == 0) {
            *out = (jval){.t = JV_FUNC, .u.fn = i};
            return ZT_OK;
        }
    *out = (jval){.t = JV_UNDEF};
    return ZT_OK;
}

static int eval_access(jrender *r, const jexpr *e, jval *out)
{
    jval obj, key;
    TRY(jr_eval(r, e->obj, &obj));
    if (obj.t == JV_UNDEF)
        return jr_fail(r, e->line, "'%s' is undefined", undef_what(e->obj));
    if (e->k == E_ATTR) {
        key = jv_str(e->name, strlen(e->name));
        if (obj.t != JV_DICT) { /* str and list attributes are methods, called elsewhere */
            *out = (jval){.t = JV_UNDEF};
            return obj.t == JV_NONE ? jr_fail(r, e->line, "'None' has no attribute '%s'", e->name) : ZT_OK;
        }
    } else
        TRY(jr_eval(r, e->a, &key));
    return get_item(r, e->line, obj, key, out);
}

int jr_eval(jrender *r, const jexpr *e, jval *out)
{
    jval a;
    switch (e->k) {
    case E_LIT: *out = e->lit; return ZT_OK;
    case E_NAME: return lookup(r, e, out);
    case E_ATTR: case E_ITEM: return eval_access(r, e, out);
    case E_SLICE: return eval_slice(r, e, out);
    case E_CALL: return eval_call(r, e, out);
    case E_FILTER:
        TRY(jr_eval(r, e->obj, &a));
        return jr_filter(r, e, a, out);
    case E_TEST: {
        int t;
        TRY(jr_eval(r, e->obj, &a));
        TRY(jr_test(r, e, a, &t));
        *out = jv_bool(e->negate ? !t : t);
        return ZT_OK;
    }
    case E_BIN: return eval_bin(r, e, out);
    case E_NEG:
        TRY(jr_eval(r, e->a, &a));
        if (!is_num(a))
            return jr_fail(r, e->line, "bad operand type for unary -: %s", jv_type_name(a));
        if (a.t != JV_FLOAT && inum(a) == LLONG_MIN)
            return jr_fail(r, e->line, "integer overflow (integers beyond 64 bits are not supported)");
        *out = a.t == JV_FLOAT ? (jval){.t = JV_FLOAT, .u.f = -a.u.f} : jv_int(-inum(a));
        return ZT_OK;
    case E_NOT:
        TRY(jr_eval(r, e->a, &a));
        *out = jv_bool(!jv_truthy(a));
        return ZT_OK;
    case E_AND: case E_OR:
        TRY(jr_eval(r, e->a, &a));
        if (jv_truthy(a) == (e->k == E_OR)) {
            *out = a;
            return ZT_OK;
        }
        return jr_eval(r, e->b, out);
    case E_COND:
        TRY(jr_eval(r, e->b, &a));
        if (jv_truthy(a))
            return jr_eval(r, e->a, out);
        if (!e->c) {
            *out = (jval){.t = JV_UNDEF};
            return ZT_OK;
        }
        return jr_eval(r, e->c, out);
    case E_LIST: case E_DICT: return eval_seq(r, e, out);
    }
    return jr_fail(r, e->line, "unknown expression");
}
