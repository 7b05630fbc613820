/* jinja_parse.c — the lexed pieces as a tree: statements (if, for, set,
 * generation) and expressions with jinja2's precedence, lowest first:
 *   x if c else y;  or;  and;  not;  comparisons and in;  + -;  ~;  * / // %;
 *   **;  unary -;  then a primary with its postfixes (.attr, [i], [a:b:c], (args))
 *   and its filters (| f(args)) and tests (is [not] t(args)).
 * Anything else — a statement or an operator outside that subset — is refused
 * with the template's line, never rendered approximately. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja_impl.h"

int jp_fail(jparser *ps, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return zt_fail(ps->err, ZT_EINPUT, "%s: line %d: %s", ps->name, ps->line, msg);
}

static jexpr *mk(jparser *ps, ekind k)
{
    jexpr *e = ja_alloc(ps->a, sizeof *e);
    if (e) {
        e->k = k;
        e->line = ps->line;
    }
    return e;
}

#define NEW(var, kind)                                                                              \
    jexpr *var = mk(ps, kind);                                                                      \
    if (!var)                                                                                       \
        return jp_fail(ps, "out of memory")
static int expect_op(jparser *ps, int op, const char *what)
{
    if (!jp_is_op(ps, op))
        return jp_fail(ps, "expected %s", what);
    return jp_next(ps);
}

static const char *tok_name(jparser *ps)
{
    return ps->tok.t == T_NAME ? ja_strdup(ps->a, ps->tok.s, ps->tok.n) : NULL;
}

/* "(a, b, k=v)" after the "(" was seen; also used by filters and tests. */
static int call_args(jparser *ps, jexpr *e)
{
    jexpr *args[32];
    const char *kw[32];
    size_t n = 0;
    TRY(jp_next(ps));
    while (!jp_is_op(ps, OP_RP)) {
        if (n == 32)
            return jp_fail(ps, "more than 32 arguments");
        kw[n] = NULL;
        if (ps->tok.t == T_NAME) { /* a keyword argument looks ahead for '=' */
            size_t save = ps->pos;
            int line = ps->line;
            jtok t = ps->tok;
            TRY(jp_next(ps));
            if (jp_is_op(ps, OP_ASSIGN)) {
                kw[n] = ja_strdup(ps->a, t.s, t.n);
                TRY(jp_next(ps));
            } else {
                ps->pos = save;
                ps->line = line;
                ps->tok = t;
            }
        }
        TRY(jp_expr(ps, &args[n]));
        n++;
        if (!jp_is_op(ps, OP_COMMA))
            break;
        TRY(jp_next(ps));
    }
    TRY(expect_op(ps, OP_RP, "')' closing the arguments"));
    e->args = ja_alloc(ps->a, (n + 1) * sizeof *e->args);
    e->kwnames = ja_alloc(ps->a, (n + 1) * sizeof *e->kwnames);
    if (!e->args || !e->kwnames)
        return jp_fail(ps, "out of memory");
    memcpy(e->args, args, n * sizeof *args);
    memcpy(e->kwnames, kw, n * sizeof *kw);
    e->nargs = n;
    return ZT_OK;
}

/* [a, b] or (a, b) or {k: v}: the items until the closer. */
static int seq_lit(jparser *ps, jexpr *e, int close, int pairs)
{
    jexpr *items[256];
    size_t n = 0;
    TRY(jp_next(ps));
    while (!jp_is_op(ps, close)) {
        if (n + 2 > 256)
            return jp_fail(ps, "a literal of more than 128 items");
        TRY(jp_expr(ps, &items[n++]));
        if (pairs) {
            TRY(expect_op(ps, OP_COLON, "':' in a dict literal"));
            TRY(jp_expr(ps, &items[n++]));
        }
        if (!jp_is_op(ps, OP_COMMA))
            break;
        TRY(jp_next(ps));
    }
    TRY(expect_op(ps, close, "the literal's closing bracket"));
    e->args = ja_alloc(ps->a, (n + 1) * sizeof *e->args);
    if (!e->args)
        return jp_fail(ps, "out of memory");
    memcpy(e->args, items, n * sizeof *items);
    e->nargs = n;
    return ZT_OK;
}

static int name_primary(jparser *ps, jexpr **out)
{
    static const char *lits[] = {"true", "True", "false", "False", "none", "None"};
    for (int i = 0; i < 6; i++)
        if (jp_is_name(ps, lits[i])) {
            NEW(e, E_LIT);
            e->lit = i < 2 ? jv_bool(1) : i < 4 ? jv_bool(0) : jv_none();
            *out = e;
            return jp_next(ps);
        }
    NEW(e, E_NAME);
    e->name = tok_name(ps);
    *out = e;
    return jp_next(ps);
}

static int primary(jparser *ps, jexpr **out)
{
    jtok t = ps->tok;
    if (t.t == T_STR || t.t == T_INT || t.t == T_FLOAT) {
        NEW(e, E_LIT);
        e->lit = t.t == T_STR ? jv_str(t.s, t.n) : t.t == T_INT ? jv_int(t.i) : (jval){.t = JV_FLOAT, .u.f = t.f};
        TRY(jp_next(ps));
        /* adjacent string literals join, as in Python */
        while (e->lit.t == JV_STR && ps->tok.t == T_STR) {
            char *s = ja_alloc(ps->a, e->lit.u.s.n + ps->tok.n + 1);
            if (!s)
                return jp_fail(ps, "out of memory");
            memcpy(s, e->lit.u.s.s, e->lit.u.s.n);
            memcpy(s + e->lit.u.s.n, ps->tok.s, ps->tok.n);
            e->lit = jv_str(s, e->lit.u.s.n + ps->tok.n);
            TRY(jp_next(ps));
        }
        *out = e;
        return ZT_OK;
    }
    if (t.t == T_NAME)
        return name_primary(ps, out);
    if (jp_is_op(ps, OP_LP)) {
        TRY(jp_next(ps));
        jexpr *first;
        TRY(jp_expr(ps, &first));
        if (jp_is_op(ps, OP_COMMA))
            return jp_fail(ps, "tuples are not supported");
        *out = first;
        return expect_op(ps, OP_RP, "')'");
    }
    if (jp_is_op(ps, OP_LB) || jp_is_op(ps, OP_LC)) {
        int dict = jp_is_op(ps, OP_LC);
        NEW(e, dict ? E_DICT : E_LIST);
        *out = e;
        return seq_lit(ps, e, dict ? OP_RC : OP_RB, dict);
    }
    return jp_fail(ps, "expected an expression, found '%.*s'", (int)(t.n ? t.n : 3), t.n ? t.s : "end");
}

/* [i] or [a:b:c], the "[" already seen. */
static int subscript(jparser *ps, jexpr *obj, jexpr **out)
{
    jexpr *part[3] = {NULL, NULL, NULL};
    int colons = 0;
    TRY(jp_next(ps));
    for (;;) {
        if (!jp_is_op(ps, OP_COLON) && !jp_is_op(ps, OP_RB))
            TRY(jp_expr(ps, &part[colons]));
        if (!jp_is_op(ps, OP_COLON))
            break;
        if (++colons > 2)
            return jp_fail(ps, "a slice has at most three parts");
        TRY(jp_next(ps));
    }
    TRY(expect_op(ps, OP_RB, "']'"));
    NEW(e, colons ? E_SLICE : E_ITEM);
    e->obj = obj;
    e->a = part[0];
    e->b = part[1];
    e->c = part[2];
    *out = e;
    return ZT_OK;
}

static int postfix(jparser *ps, jexpr **io)
{
    for (;;) {
        if (jp_is_op(ps, OP_DOT)) {
            TRY(jp_next(ps));
            if (ps->tok.t != T_NAME && ps->tok.t != T_INT)
                return jp_fail(ps, "expected a name after '.'");
            NEW(e, E_ATTR);
            e->obj = *io;
            if (ps->tok.t == T_INT) { /* x.0 is x[0] in jinja2 */
                e->k = E_ITEM;
                NEW(idx, E_LIT);
                idx->lit = jv_int(ps->tok.i);
                e->a = idx;
            } else
                e->name = tok_name(ps);
            *io = e;
            TRY(jp_next(ps));
        } else if (jp_is_op(ps, OP_LB)) {
            TRY(subscript(ps, *io, io));
        } else if (jp_is_op(ps, OP_LP)) {
            NEW(e, E_CALL);
            e->obj = *io;
            TRY(call_args(ps, e));
            *io = e;
        } else
            return ZT_OK;
    }
}

/* | filter(args) and is [not] test(args), left to right. */
static int filters(jparser *ps, jexpr **io)
{
    for (;;) {
        int is_filter = jp_is_op(ps, OP_PIPE), is_test = jp_is_name(ps, "is");
        if (!is_filter && !is_test)
            return ZT_OK;
        NEW(e, is_filter ? E_FILTER : E_TEST);
        e->obj = *io;
        TRY(jp_next(ps));
        if (is_test && jp_is_name(ps, "not")) {
            e->negate = 1;
            TRY(jp_next(ps));
        }
        if (ps->tok.t != T_NAME)
            return jp_fail(ps, "expected a %s name", is_filter ? "filter" : "test");
        e->name = tok_name(ps);
        TRY(jp_next(ps));
        if (jp_is_op(ps, OP_LP))
            TRY(call_args(ps, e));
        else if (is_test && (ps->tok.t == T_STR || ps->tok.t == T_INT || jp_is_name(ps, "none") ||
                             jp_is_name(ps, "true") || jp_is_name(ps, "false"))) {
            /* `x is equalto 3`: one argument without parentheses */
            e->args = ja_alloc(ps->a, sizeof *e->args);
            e->kwnames = ja_alloc(ps->a, sizeof *e->kwnames);
            if (!e->args || !e->kwnames)
                return jp_fail(ps, "out of memory");
            TRY(primary(ps, &e->args[0]));
            e->nargs = 1;
        }
        *io = e;
    }
}

static int nest(jparser *ps);

static int unary(jparser *ps, jexpr **out)
{
    if (jp_is_op(ps, OP_SUB) || jp_is_op(ps, OP_ADD)) {
        int neg = jp_is_op(ps, OP_SUB);
        TRY(jp_next(ps));
        jexpr *x;
        TRY(nest(ps));
        TRY(unary(ps, &x));
        ps->depth--;
        if (!neg) {
            *out = x;
            return ZT_OK;
        }
        NEW(e, E_NEG);
        e->a = x;
        *out = e;
        return filters(ps, out);
    }
    TRY(primary(ps, out));
    TRY(postfix(ps, out));
    return filters(ps, out);
}

/* Binary levels, from tightest: pow, mul, concat, add. */
static int binary_level(jparser *ps, int level, jexpr **out)
{
    static const int level_ops[4][4] = {{OP_POW}, {OP_MUL, OP_DIV, OP_FDIV, OP_MOD}, {OP_TILDE}, {OP_ADD, OP_SUB}};
    TRY(level == 0 ? unary(ps, out) : binary_level(ps, level - 1, out));
    for (;;) {
        int op = 0;
        for (int i = 0; i < 4; i++)
            if (level_ops[level][i] && jp_is_op(ps, level_ops[level][i]))
                op = level_ops[level][i];
        if (!op)
            return ZT_OK;
        TRY(jp_next(ps));
        NEW(e, E_BIN);
        e->op = op;
        e->a = *out;
        TRY(level == 0 ? unary(ps, &e->b) : binary_level(ps, level - 1, &e->b));
        *out = e;
    }
}

static int compare(jparser *ps, jexpr **out)
{
    TRY(binary_level(ps, 3, out));
    for (;;) {
        int op = 0;
        if (ps->tok.t == T_OP && ps->tok.op >= OP_EQ && ps->tok.op <= OP_GE)
            op = ps->tok.op;
        else if (jp_is_name(ps, "in"))
            op = OP_IN;
        else if (jp_is_name(ps, "not")) { /* "not in" */
            size_t save = ps->pos;
            int line = ps->line;
            jtok t = ps->tok;
            TRY(jp_next(ps));
            if (!jp_is_name(ps, "in")) {
                ps->pos = save;
                ps->line = line;
                ps->tok = t;
                return ZT_OK;
            }
            op = OP_NOTIN;
        }
        if (!op)
            return ZT_OK;
        TRY(jp_next(ps));
        NEW(e, E_BIN);
        e->op = op;
        e->a = *out;
        TRY(binary_level(ps, 3, &e->b));
        *out = e;
    }
}

static int not_expr(jparser *ps, jexpr **out)
{
    if (jp_is_name(ps, "not")) {
        TRY(jp_next(ps));
        NEW(e, E_NOT);
        TRY(nest(ps));
        TRY(not_expr(ps, &e->a));
        ps->depth--;
        *out = e;
        return ZT_OK;
    }
    return compare(ps, out);
}

static int logic(jparser *ps, int is_or, jexpr **out)
{
    TRY(is_or ? logic(ps, 0, out) : not_expr(ps, out));
    while (jp_is_name(ps, is_or ? "or" : "and")) {
        TRY(jp_next(ps));
        NEW(e, is_or ? E_OR : E_AND);
        e->a = *out;
        TRY(is_or ? logic(ps, 0, &e->b) : not_expr(ps, &e->b));
        *out = e;
    }
    return ZT_OK;
}

static int nest(jparser *ps)
{
    if (++ps->depth > JINJA_MAX_NEST)
        return jp_fail(ps, "expressions nested deeper than %d", JINJA_MAX_NEST);
    return ZT_OK;
}

int jp_expr(jparser *ps, jexpr **out)
{
    TRY(nest(ps));
    TRY(logic(ps, 1, out));
    ps->depth--;
    if (jp_is_name(ps, "if")) {
        NEW(e, E_COND);
        e->a = *out;
        TRY(jp_next(ps));
        TRY(logic(ps, 1, &e->b));
        if (jp_is_name(ps, "else")) {
            TRY(jp_next(ps));
            TRY(jp_expr(ps, &e->c));
        }
        *out = e;
    }
    return ZT_OK;
}

/* An expression without the trailing "if": a for loop's iterable, whose "if"
 * is the loop's filter. */
int jp_expr_nocond(jparser *ps, jexpr **out) { return logic(ps, 1, out); }
