/* jinja_impl.h — the renderer's insides, shared by its files (private to src/text).
 *
 * A template goes through three stages: jinja_lex.c cuts the source into text
 * and tags with jinja2's whitespace rules already applied (trim_blocks,
 * lstrip_blocks, the '-' markers), jinja_parse.c builds a tree of statements and
 * expressions, and jinja_eval.c walks it over values (jinja_value.c) with the
 * filters, tests and methods of jinja_builtins.c.  Everything a compile or a
 * render allocates lives in an arena (jinja_arena_*), so one free releases it. */
#ifndef ZT_JINJA_IMPL_H
#define ZT_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../core/status.h"

/* Bounds that keep a hostile template finite: nesting of expressions and
 * blocks, statements executed in one render, bytes of one string. */
enum { JINJA_MAX_NEST = 200, JINJA_MAX_STEPS = 1000000, JINJA_MAX_BYTES = 64 << 20 };
/* All a compile or a render may allocate: past it, "out of memory". */
#define JINJA_MAX_ARENA ((size_t)256 << 20)

/* Return a failing status at once: the renderer's functions return 0 or a zt status. */
#define TRY(x)                                                                                      \
    do {                                                                                            \
        int rc_ = (x);                                                                              \
        if (rc_)                                                                                    \
            return rc_;                                                                             \
    } while (0)

/* ---- arena: accounted chunks, freed all at once ---- */
typedef struct jarena {
    struct jchunk *head;
    size_t total; /* bytes of all chunks, at most JINJA_MAX_ARENA */
} jarena;
void *ja_alloc(jarena *a, size_t bytes); /* zeroed; NULL when out of memory */
char *ja_strdup(jarena *a, const char *s, size_t n);
void ja_free_all(jarena *a);

/* ---- values: Python's types as jinja2 hands them to a template ---- */
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC } jtype;
struct jlist;
struct jdict;
typedef struct jval {
    jtype t;
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *s;
            size_t n;
        } s;
        struct jlist *l;
        struct jdict *d;
        int fn;
    } u;
} jval;
typedef struct jlist {
    jval *v;
    size_t n, cap;
} jlist;
typedef struct jdict {
    jval *k, *v;
    size_t n, cap;
    int ns; /* a namespace(): the one mutable object templates have */
} jdict;

/* A growing byte buffer in the arena. */
typedef struct jbuf {
    jarena *a;
    char *p;
    size_t n, cap;
    int oom;
} jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
void jb_puts(jbuf *b, const char *s);

jval jv_str(const char *s, size_t n);
jval jv_int(long long i);
jval jv_bool(int b);
jval jv_none(void);
jlist *jl_new(jarena *a);
int jl_push(jarena *a, jlist *l, jval v);
jdict *jd_new(jarena *a);
int jd_set(jarena *a, jdict *d, jval k, jval v);
const jval *jd_get(const jdict *d, const char *key, size_t n);
const jval *jd_getv(const jdict *d, jval k);
int jv_truthy(jval v);
int jv_equal(jval a, jval b);
/* Python's str() of v, appended to b (repr inside containers, as Python does). */
void jv_str_into(jbuf *b, jval v);
void jv_repr_into(jbuf *b, jval v);
/* json.dumps(v, ensure_ascii=False, indent, sort_keys=False): 0 ok, -1 not JSON-able. */
int jv_json_into(jbuf *b, jval v, int indent, int depth);
const char *jv_type_name(jval v);
struct cJSON;
/* A JSON document as template values: objects become dicts (key order kept). */
int jv_from_json(jarena *a, const struct cJSON *j, jval *out);

/* ---- the tree ---- */
typedef enum {
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_NOT,
    E_AND, E_OR, E_COND, E_LIST, E_DICT
} ekind;
typedef struct jexpr {
    ekind k;
    int line;
    int op;          /* E_BIN: the operator token */
    int negate;      /* E_TEST: `is not` */
    jval lit;        /* E_LIT */
    const char *name; /* E_NAME, E_ATTR, E_FILTER, E_TEST, E_CALL on a method */
    struct jexpr *a, *b, *c; /* operands; E_SLICE: start, stop, step (NULL = absent) */
    struct jexpr *obj;
    struct jexpr **args;
    const char **kwnames; /* kwnames[i] NULL for a positional argument */
    size_t nargs;
} jexpr;

typedef enum { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_GEN, S_BREAK, S_CONTINUE } skind;
typedef struct jnode {
    skind k;
    int line;
    const char *text; /* S_TEXT */
    size_t len;
    jexpr *e;          /* S_OUT, S_SET value, S_FOR iterable */
    jexpr *cond;       /* S_FOR filter */
    const char *target, *target2, *attr; /* S_SET name (attr for ns.attr); S_FOR one or two names */
    struct jbody *body, *orelse;         /* S_FOR, S_GEN */
    jexpr **conds;                       /* S_IF: conditions of if/elif */
    struct jbody **bodies;               /* S_IF: their bodies, then the else body */
    size_t nconds;
} jnode;
typedef struct jbody {
    jnode **n;
    size_t count, cap;
} jbody;

/* ---- lexing ---- */
typedef enum { P_TEXT, P_OUT, P_STMT } pkind;
typedef struct jpiece {
    pkind k;
    int line;
    const char *s; /* text, or a tag's inside (without delimiters and '-') */
    size_t n;
} jpiece;
int jinja_lex(jarena *a, const char *name, const char *src, size_t len, jpiece **out, size_t *count, zt_err *err);

/* Expression tokens. */
typedef enum { T_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP } ttype;
typedef struct jtok {
    ttype t;
    const char *s;
    size_t n;
    long long i;
    double f;
    int op; /* T_OP: one of the codes below */
} jtok;
enum {
    OP_LP = 1, OP_RP, OP_LB, OP_RB, OP_LC, OP_RC, OP_DOT, OP_COMMA, OP_COLON, OP_PIPE, OP_TILDE,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
    OP_ASSIGN, OP_IN, OP_NOTIN
};

typedef struct jparser {
    jarena *a;
    const char *name; /* the template's name, for errors */
    zt_err *err;
    jpiece *p;
    size_t np, ip;
    /* the tag under the cursor */
    const char *s;
    size_t n, pos;
    int line;
    int depth; /* nesting of expressions and blocks being parsed */
    jtok tok;
} jparser;
int jinja_parse(jparser *ps, jbody **out);
int jp_next(jparser *ps);          /* advance ps->tok */
int jp_fail(jparser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int jp_expr(jparser *ps, jexpr **out);
int jp_expr_nocond(jparser *ps, jexpr **out);
int jp_is_name(const jparser *ps, const char *word);
int jp_is_op(const jparser *ps, int op);

/* ---- rendering ---- */
typedef struct jscope {
    jdict *vars;
    struct jscope *up;
} jscope;
typedef struct jspan {
    size_t start, end;
} jspan;
typedef struct jrender {
    jarena *a;
    const char *name;
    zt_err *err;
    jbuf out;
    jscope *scope;
    time_t now;
    jspan *gen;
    size_t ngen, gencap;
    int depth;
    long steps; /* statements executed, against JINJA_MAX_STEPS */
} jrender;
int jr_eval(jrender *r, const jexpr *e, jval *out);
int jr_fail(jrender *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jr_filter(jrender *r, const jexpr *e, jval v, jval *out);
int jr_test(jrender *r, const jexpr *e, jval v, int *out);
int jr_method(jrender *r, const jexpr *e, jval obj, jval *args, size_t nargs, jval *out, int *found);
int jr_global_call(jrender *r, const jexpr *e, jval *args, const char **kw, size_t nargs, jval *out);
int jr_args(jrender *r, const jexpr *e, jval **vals);
int jr_get_attr(jrender *r, int line, jval obj, jval key, int by_attr, jval *out);
int jr_str(jrender *r, jval v, jval *out); /* str(v) as a value */

#endif
