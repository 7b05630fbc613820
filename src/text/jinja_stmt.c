/* jinja_stmt.c — the statements of the chat-template subset: if/elif/else,
 * for (one or two targets, an "if" filter, else), set (a name, or a
 * namespace's attribute), break/continue (jinja2.ext.loopcontrols, which
 * transformers loads) and generation/endgeneration (transformers' marker of the
 * assistant's text).  Any other statement is refused by name and line. */
#include <string.h>

#include "jinja_impl.h"

static int body_push(jparser *ps, jbody *b, jnode *n)
{
    if (b->count == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        jnode **p = ja_alloc(ps->a, cap * sizeof *p);
        if (!p)
            return jp_fail(ps, "out of memory");
        if (b->count)
            memcpy(p, b->n, b->count * sizeof *p);
        b->n = p;
        b->cap = cap;
    }
    b->n[b->count++] = n;
    return ZT_OK;
}

static jnode *node(jparser *ps, skind k)
{
    jnode *n = ja_alloc(ps->a, sizeof *n);
    if (n) {
        n->k = k;
        n->line = ps->line;
    }
    return n;
}

/* Point the expression lexer at piece i and read its first token. */
static int enter(jparser *ps, size_t i)
{
    ps->s = ps->p[i].s;
    ps->n = ps->p[i].n;
    ps->pos = 0;
    ps->line = ps->p[i].line;
    return jp_next(ps);
}

static int tag_done(jparser *ps)
{
    if (ps->tok.t != T_END)
        return jp_fail(ps, "unexpected '%.*s' at the end of the tag", (int)ps->tok.n, ps->tok.s);
    return ZT_OK;
}

static int parse_body(jparser *ps, const char *const *stops, jbody **out, const char **stopped);

static int name_tok(jparser *ps, const char **out)
{
    if (ps->tok.t != T_NAME)
        return jp_fail(ps, "expected a name");
    *out = ja_strdup(ps->a, ps->tok.s, ps->tok.n);
    return jp_next(ps);
}

static int parse_if(jparser *ps, jnode *n)
{
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    jexpr *conds[64];
    jbody *bodies[65];
    const char *stop;
    size_t k = 0;
    for (;;) {
        if (k == 64)
            return jp_fail(ps, "more than 64 elif branches");
        TRY(jp_expr(ps, &conds[k]));
        TRY(tag_done(ps));
        TRY(parse_body(ps, stops, &bodies[k], &stop));
        k++;
        if (strcmp(stop, "elif") != 0)
            break;
    }
    n->nconds = k;
    if (strcmp(stop, "else") == 0) {
        TRY(tag_done(ps));
        static const char *const end[] = {"endif", NULL};
        TRY(parse_body(ps, end, &bodies[k], &stop));
    } else
        bodies[k] = NULL;
    TRY(tag_done(ps));
    n->conds = ja_alloc(ps->a, k * sizeof *n->conds);
    n->bodies = ja_alloc(ps->a, (k + 1) * sizeof *n->bodies);
    if (!n->conds || !n->bodies)
        return jp_fail(ps, "out of memory");
    memcpy(n->conds, conds, k * sizeof *conds);
    memcpy(n->bodies, bodies, (k + 1) * sizeof *bodies);
    return ZT_OK;
}

static int parse_for(jparser *ps, jnode *n)
{
    static const char *const stops[] = {"else", "endfor", NULL};
    const char *stop;
    TRY(name_tok(ps, &n->target));
    if (jp_is_op(ps, OP_COMMA)) {
        TRY(jp_next(ps));
        TRY(name_tok(ps, &n->target2));
    }
    if (!jp_is_name(ps, "in"))
        return jp_fail(ps, "expected 'in' in the for loop");
    TRY(jp_next(ps));
    TRY(jp_expr_nocond(ps, &n->e));
    if (jp_is_name(ps, "if")) {
        TRY(jp_next(ps));
        TRY(jp_expr_nocond(ps, &n->cond));
    }
    if (jp_is_name(ps, "recursive"))
        return jp_fail(ps, "recursive loops are not supported");
    TRY(tag_done(ps));
    TRY(parse_body(ps, stops, &n->body, &stop));
    if (strcmp(stop, "else") == 0) {
        static const char *const end[] = {"endfor", NULL};
        TRY(tag_done(ps));
        TRY(parse_body(ps, end, &n->orelse, &stop));
    }
    return tag_done(ps);
}

static int parse_set(jparser *ps, jnode *n)
{
    TRY(name_tok(ps, &n->target));
    if (jp_is_op(ps, OP_DOT)) {
        TRY(jp_next(ps));
        TRY(name_tok(ps, &n->attr));
    }
    if (jp_is_op(ps, OP_COMMA))
        return jp_fail(ps, "set with several targets is not supported");
    if (!jp_is_op(ps, OP_ASSIGN))
        return jp_fail(ps, "block set ({%% set x %%}...{%% endset %%}) is not supported");
    TRY(jp_next(ps));
    TRY(jp_expr(ps, &n->e));
    return tag_done(ps);
}

/* One statement tag, its keyword already the current token. */
static int statement(jparser *ps, jbody *b)
{
    static const struct {
        const char *kw;
        skind k;
    } kinds[] = {{"if", S_IF}, {"for", S_FOR}, {"set", S_SET}, {"generation", S_GEN},
                 {"break", S_BREAK}, {"continue", S_CONTINUE}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (!jp_is_name(ps, kinds[i].kw))
            continue;
        jnode *n = node(ps, kinds[i].k);
        if (!n)
            return jp_fail(ps, "out of memory");
        TRY(jp_next(ps));
        if (n->k == S_IF) TRY(parse_if(ps, n));
        else if (n->k == S_FOR) TRY(parse_for(ps, n));
        else if (n->k == S_SET) TRY(parse_set(ps, n));
        else if (n->k == S_GEN) {
            static const char *const end[] = {"endgeneration", NULL};
            const char *stop;
            TRY(tag_done(ps));
            TRY(parse_body(ps, end, &n->body, &stop));
            TRY(tag_done(ps));
        } else
            TRY(tag_done(ps));
        return body_push(ps, b, n);
    }
    if (ps->tok.t == T_NAME)
        return jp_fail(ps, "the statement '%.*s' is not supported", (int)ps->tok.n, ps->tok.s);
    return jp_fail(ps, "expected a statement name");
}

static const char *stop_word(jparser *ps, const char *const *stops)
{
    for (size_t i = 0; stops && stops[i]; i++)
        if (jp_is_name(ps, stops[i]))
            return stops[i];
    return NULL;
}

/* Pieces until a statement named in stops (NULL: until the end); *stopped is
 * that word, and the lexer is left after it. */
static int parse_body(jparser *ps, const char *const *stops, jbody **out, const char **stopped)
{
    jbody *b = ja_alloc(ps->a, sizeof *b);
    if (!b)
        return jp_fail(ps, "out of memory");
    *out = b;
    int open_line = ps->line;
    if (++ps->depth > JINJA_MAX_NEST)
        return jp_fail(ps, "blocks nested deeper than %d", JINJA_MAX_NEST);
    while (ps->ip < ps->np) {
        jpiece *pc = &ps->p[ps->ip++];
        jnode *n;
        if (pc->k == P_STMT) {
            TRY(enter(ps, ps->ip - 1));
            const char *w = stop_word(ps, stops);
            if (w) {
                *stopped = w;
                ps->depth--;
                return jp_next(ps);
            }
            TRY(statement(ps, b));
            continue;
        }
        if (!(n = node(ps, pc->k == P_TEXT ? S_TEXT : S_OUT)))
            return jp_fail(ps, "out of memory");
        n->line = pc->line;
        if (pc->k == P_TEXT) {
            n->text = pc->s;
            n->len = pc->n;
        } else {
            TRY(enter(ps, ps->ip - 1));
            TRY(jp_expr(ps, &n->e));
            TRY(tag_done(ps));
        }
        TRY(body_push(ps, b, n));
    }
    if (stops) {
        const char *end = stops[0];
        for (size_t i = 0; stops[i]; i++) /* name the end tag: endif, not elif */
            end = stops[i];
        ps->line = open_line;
        return jp_fail(ps, "the block opened here is never closed (expected {%% %s %%})", end);
    }
    ps->depth--;
    return ZT_OK;
}

int jinja_parse(jparser *ps, jbody **out)
{
    const char *stop = NULL;
    TRY(parse_body(ps, NULL, out, &stop));
    return ZT_OK;
}
