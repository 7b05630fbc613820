/* jinja.c — compile and render (jinja.h): runs the statements of the tree.
 *
 * Scopes follow jinja2: a for loop opens a scope of its own (kept across its
 * iterations), so a {% set %} inside a loop is gone after it — the reason
 * templates carry state in a namespace() — while if blocks share their scope. */
#include <cjson/cJSON.h>
#include <string.h>

#include "../core/mem.h"
#include "jinja.h"
#include "jinja_impl.h"

struct zt_jinja {
    jarena arena;
    jbody *root;
    char *name;
    int has_gen;
};

enum { JR_BREAK = 1, JR_CONTINUE = 2 };
enum { MAX_DEPTH = 64 };

static int exec_body(jrender *r, const jbody *b, int *ctl);

static int set_var(jrender *r, const jnode *n, jval v)
{
    size_t len = strlen(n->target);
    if (n->attr) {
        const jval *ns = NULL;
        for (jscope *s = r->scope; s && !ns; s = s->up)
            ns = jd_get(s->vars, n->target, len);
        if (!ns || ns->t != JV_DICT || !ns->u.d->ns)
            return jr_fail(r, n->line, "cannot set '%s.%s': '%s' is not a namespace", n->target, n->attr, n->target);
        if (jd_set(r->a, ns->u.d, jv_str(n->attr, strlen(n->attr)), v))
            return jr_fail(r, n->line, "out of memory");
        return ZT_OK;
    }
    if (jd_set(r->a, r->scope->vars, jv_str(n->target, len), v))
        return jr_fail(r, n->line, "out of memory");
    return ZT_OK;
}

static int bind(jrender *r, const jnode *n, jval item)
{
    jdict *vars = r->scope->vars;
    if (!n->target2)
        return jd_set(r->a, vars, jv_str(n->target, strlen(n->target)), item) ? jr_fail(r, n->line, "out of memory")
                                                                                : ZT_OK;
    if (item.t != JV_LIST || item.u.l->n != 2)
        return jr_fail(r, n->line, "cannot unpack a %s into %s, %s", jv_type_name(item), n->target, n->target2);
    if (jd_set(r->a, vars, jv_str(n->target, strlen(n->target)), item.u.l->v[0]) ||
        jd_set(r->a, vars, jv_str(n->target2, strlen(n->target2)), item.u.l->v[1]))
        return jr_fail(r, n->line, "out of memory");
    return ZT_OK;
}

/* The values a for loop walks: a list's items, a dict's keys, a str's characters. */
static int iter_items(jrender *r, const jnode *n, jval v, jlist **out)
{
    jlist *l = jl_new(r->a);
    if (!l)
        return jr_fail(r, n->line, "out of memory");
    if (v.t == JV_LIST)
        *l = *v.u.l;
    else if (v.t == JV_DICT && !v.u.d->ns) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jl_push(r->a, l, v.u.d->k[i]))
                return jr_fail(r, n->line, "out of memory");
    } else if (v.t == JV_STR) {
        for (size_t i = 0; i < v.u.s.n;) {
            size_t k = 1;
            while (i + k < v.u.s.n && ((unsigned char)v.u.s.s[i + k] & 0xC0) == 0x80)
                k++;
            if (jl_push(r->a, l, jv_str(v.u.s.s + i, k)))
                return jr_fail(r, n->line, "out of memory");
            i += k;
        }
    } else if (v.t != JV_UNDEF)
        return jr_fail(r, n->line, "'%s' object is not iterable", jv_type_name(v));
    *out = l;
    return ZT_OK;
}

/* The loop's filter ("for x in xs if cond") applies before loop.* is counted. */
static int filter_items(jrender *r, const jnode *n, jlist *in, jlist **out)
{
    if (!n->cond) {
        *out = in;
        return ZT_OK;
    }
    jlist *l = jl_new(r->a);
    if (!l)
        return jr_fail(r, n->line, "out of memory");
    for (size_t i = 0; i < in->n; i++) {
        jval c;
        TRY(bind(r, n, in->v[i]));
        TRY(jr_eval(r, n->cond, &c));
        if (jv_truthy(c) && jl_push(r->a, l, in->v[i]))
            return jr_fail(r, n->line, "out of memory");
    }
    *out = l;
    return ZT_OK;
}

static int loop_var(jrender *r, const jnode *n, const jlist *items, size_t i)
{
    jdict *d = jd_new(r->a);
    long long len = (long long)items->n, k = (long long)i;
    static const char *keys[] = {"index0", "index", "revindex0", "revindex", "first", "last", "length"};
    jval vals[] = {jv_int(k), jv_int(k + 1), jv_int(len - k - 1), jv_int(len - k), jv_bool(k == 0),
                   jv_bool(k == len - 1), jv_int(len)};
    if (!d)
        return jr_fail(r, n->line, "out of memory");
    for (int j = 0; j < 7; j++)
        if (jd_set(r->a, d, jv_str(keys[j], strlen(keys[j])), vals[j]))
            return jr_fail(r, n->line, "out of memory");
    if ((i > 0 && jd_set(r->a, d, jv_str("previtem", 8), items->v[i - 1])) ||
        (i + 1 < items->n && jd_set(r->a, d, jv_str("nextitem", 8), items->v[i + 1])) ||
        jd_set(r->a, r->scope->vars, jv_str("loop", 4), (jval){.t = JV_DICT, .u.d = d}))
        return jr_fail(r, n->line, "out of memory");
    return ZT_OK;
}

static int exec_for(jrender *r, const jnode *n)
{
    jval v;
    jlist *all = NULL, *items = NULL;
    TRY(jr_eval(r, n->e, &v));
    TRY(iter_items(r, n, v, &all));
    jscope scope = {.vars = jd_new(r->a), .up = r->scope};
    if (!scope.vars)
        return jr_fail(r, n->line, "out of memory");
    r->scope = &scope;
    int rc = filter_items(r, n, all, &items);
    for (size_t i = 0; !rc && i < items->n; i++) {
        int ctl = 0;
        rc = bind(r, n, items->v[i]);
        if (!rc)
            rc = loop_var(r, n, items, i);
        if (!rc)
            rc = exec_body(r, n->body, &ctl);
        if (ctl == JR_BREAK)
            break;
    }
    if (!rc && items->n == 0 && n->orelse) {
        int ctl = 0;
        rc = exec_body(r, n->orelse, &ctl);
    }
    r->scope = scope.up;
    return rc;
}

static int exec_node(jrender *r, const jnode *n, int *ctl)
{
    jval v;
    if (++r->steps > JINJA_MAX_STEPS)
        return jr_fail(r, n->line, "the template ran more than %d statements", JINJA_MAX_STEPS);
    if (r->out.n > JINJA_MAX_BYTES)
        return jr_fail(r, n->line, "the output grew past %d bytes", JINJA_MAX_BYTES);
    switch (n->k) {
    case S_TEXT: jb_put(&r->out, n->text, n->len); return ZT_OK;
    case S_OUT:
        TRY(jr_eval(r, n->e, &v));
        jv_str_into(&r->out, v);
        return ZT_OK;
    case S_IF:
        for (size_t i = 0; i < n->nconds; i++) {
            TRY(jr_eval(r, n->conds[i], &v));
            if (jv_truthy(v))
                return exec_body(r, n->bodies[i], ctl);
        }
        return n->bodies[n->nconds] ? exec_body(r, n->bodies[n->nconds], ctl) : ZT_OK;
    case S_FOR:
        if (++r->depth > MAX_DEPTH)
            return jr_fail(r, n->line, "loops nested deeper than %d", MAX_DEPTH);
        TRY(exec_for(r, n));
        r->depth--;
        return ZT_OK;
    case S_SET:
        TRY(jr_eval(r, n->e, &v));
        return set_var(r, n, v);
    case S_GEN: {
        size_t start = r->out.n;
        TRY(exec_body(r, n->body, ctl));
        if (r->ngen == r->gencap) {
            size_t cap = r->gencap ? r->gencap * 2 : 16;
            jspan *p = ja_alloc(r->a, cap * sizeof *p);
            if (!p)
                return jr_fail(r, n->line, "out of memory");
            if (r->ngen)
                memcpy(p, r->gen, r->ngen * sizeof *p);
            r->gen = p;
            r->gencap = cap;
        }
        r->gen[r->ngen++] = (jspan){start, r->out.n};
        return ZT_OK;
    }
    case S_BREAK: *ctl = JR_BREAK; return ZT_OK;
    case S_CONTINUE: *ctl = JR_CONTINUE; return ZT_OK;
    }
    return ZT_OK;
}

static int exec_body(jrender *r, const jbody *b, int *ctl)
{
    for (size_t i = 0; i < b->count && !*ctl; i++) {
        TRY(exec_node(r, b->n[i], ctl));
        if (r->out.oom)
            return jr_fail(r, b->n[i]->line, "out of memory");
    }
    return ZT_OK;
}

static int body_has_gen(const jbody *b)
{
    for (size_t i = 0; b && i < b->count; i++) {
        const jnode *n = b->n[i];
        if (n->k == S_GEN || body_has_gen(n->body) || body_has_gen(n->orelse))
            return 1;
        for (size_t k = 0; n->k == S_IF && k <= n->nconds; k++)
            if (body_has_gen(n->bodies[k]))
                return 1;
    }
    return 0;
}

int zt_jinja_compile(const char *name, const char *src, size_t len, zt_jinja **out, zt_err *err)
{
    *out = NULL;
    zt_jinja *t = zt_alloc(ZT_MEM_OTHER, sizeof *t);
    if (!t)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
    t->name = ja_strdup(&t->arena, name, strlen(name));
    jparser ps = {.a = &t->arena, .name = t->name ? t->name : "template", .err = err};
    int rc = t->name ? jinja_lex(&t->arena, ps.name, src, len, &ps.p, &ps.np, err)
                     : zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
    if (!rc)
        rc = jinja_parse(&ps, &t->root);
    if (rc) {
        zt_jinja_free(t);
        return rc;
    }
    t->has_gen = body_has_gen(t->root);
    *out = t;
    return ZT_OK;
}

void zt_jinja_free(zt_jinja *t)
{
    if (!t)
        return;
    ja_free_all(&t->arena);
    zt_free(ZT_MEM_OTHER, t, sizeof *t);
}

int zt_jinja_has_generation(const zt_jinja *t) { return t->has_gen; }

static int copy_out(jrender *r, zt_jinja_out *out)
{
    out->len = r->out.n;
    out->text = zt_alloc(ZT_MEM_OTHER, out->len + 1);
    out->ngen = r->ngen;
    out->gen = r->ngen ? zt_alloc(ZT_MEM_OTHER, r->ngen * sizeof *out->gen) : NULL;
    if (!out->text || (r->ngen && !out->gen)) {
        zt_jinja_out_free(out);
        return zt_fail(r->err, ZT_EFAIL, "%s: out of memory", r->name);
    }
    if (out->len)
        memcpy(out->text, r->out.p, out->len);
    for (size_t i = 0; i < r->ngen; i++)
        out->gen[i] = (zt_jinja_span){r->gen[i].start, r->gen[i].end};
    return ZT_OK;
}

int zt_jinja_render(const zt_jinja *t, const cJSON *vars, time_t now, zt_jinja_out *out, zt_err *err)
{
    memset(out, 0, sizeof *out);
    jarena a = {0};
    jrender r = {.a = &a, .name = t->name, .err = err, .now = now};
    r.out.a = &a;
    jval root;
    int rc;
    if (!cJSON_IsObject(vars))
        rc = zt_fail(err, ZT_EINPUT, "%s: the template's variables must be a JSON object", t->name);
    else if (jv_from_json(&a, vars, &root))
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", t->name);
    else {
        jscope top = {.vars = root.u.d};
        int ctl = 0;
        r.scope = &top;
        rc = exec_body(&r, t->root, &ctl);
        if (!rc)
            rc = copy_out(&r, out);
    }
    ja_free_all(&a);
    return rc;
}

void zt_jinja_out_free(zt_jinja_out *o)
{
    if (o->text)
        zt_free(ZT_MEM_OTHER, o->text, o->len + 1);
    if (o->gen)
        zt_free(ZT_MEM_OTHER, o->gen, o->ngen * sizeof *o->gen);
    memset(o, 0, sizeof *o);
}
