/* schema.c — the config readers' key-table engine (see schema.h). */
#include "schema.h"

#include <assert.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "text.h"

/* ---- the document ------------------------------------------------------------ */

typedef struct block {
    struct block *next;
    size_t bytes;
    zt_node node;
    char text[];
} block;

zt_node *zt_doc_node(zt_doc *doc, zt_node_type type, int line, const char *text, size_t len)
{
    size_t bytes = sizeof(block) + len + 1;
    block *b = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    if (len)
        memcpy(b->text, text, len);
    b->text[len] = '\0';
    b->node.type = type;
    b->node.line = line;
    b->node.text = b->text;
    b->next = doc->blocks;
    doc->blocks = b;
    return &b->node;
}

void zt_doc_free(zt_doc *doc)
{
    block *b = doc->blocks;
    while (b) {
        block *next = b->next;
        zt_free(ZT_MEM_OTHER, b, b->bytes);
        b = next;
    }
    doc->blocks = NULL;
    doc->root = NULL;
}

/* ---- messages ---------------------------------------------------------------- */

void zt_schema_reader_init(zt_schema_reader *r, const zt_schema_format *fmt, const char *path,
                           void *target, void *ctx, zt_err *err)
{
    memset(r, 0, sizeof *r);
    r->fmt = fmt;
    r->path = path;
    r->target = target;
    r->ctx = ctx;
    r->err = err;
}

int zt_schema_bad(zt_schema_reader *r, int line, const char *keypath, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r->fmt->has_lines)
        return zt_fail(r->err, ZT_EINPUT, "%s:%d: %s: %s", r->path, line, keypath, what);
    return zt_fail(r->err, ZT_EINPUT, "%s: %s: %s", r->path, keypath, what);
}

const char *zt_schema_describe(const zt_schema_reader *r, const zt_node *v, char *buf, size_t cap)
{
    switch (v->type) {
    case ZT_NODE_NULL: return "null";
    case ZT_NODE_BOOL: snprintf(buf, cap, "the boolean %s", v->text); break;
    case ZT_NODE_INT:
    case ZT_NODE_FLOAT:
        if (r->fmt->numbers_as_written)
            snprintf(buf, cap, "the %s %.40s", v->type == ZT_NODE_INT ? "integer" : "number", v->text);
        else /* as a user would write it: 200000000, 0.0003, 1e-08 */
            snprintf(buf, cap, "the number %.15g", v->num);
        break;
    case ZT_NODE_STR: snprintf(buf, cap, "the string '%.60s'", v->text); break;
    case ZT_NODE_LIST: return r->fmt->list_word;
    case ZT_NODE_MAP: return r->fmt->map_word;
    }
    return buf;
}

int zt_schema_is_auto(const zt_node *v) { return v->type == ZT_NODE_STR && !strcmp(v->text, "auto"); }

void *zt_schema_field(zt_schema_reader *r, const zt_schema_key *k)
{
    assert(k->off != ZT_NO_FIELD);
    return (char *)r->target + k->off;
}

void zt_schema_set_string(zt_schema_reader *r, const zt_schema_key *k, const char *s)
{
    if (k->off == ZT_NO_FIELD)
        return;
    assert(strlen(s) < k->cap);
    snprintf(zt_schema_field(r, k), k->cap, "%s", s);
}

int zt_schema_unknown_key(zt_schema_reader *r, int line, const char *kp, const char *name,
                          const zt_schema_key *keys, int n, const zt_schema_section *self)
{
    /* A key from another section is misplaced rather than misspelt.  Sections that
     * share self's name (another optimizer's params) are the format's business. */
    const char *home = NULL;
    char homes_list[256] = "";
    int homes = 0;
    for (int i = 0; i < r->fmt->nsections; i++) {
        const zt_schema_section *o = r->fmt->sections[i];
        if (o == self || (self && !strcmp(o->name, self->name)))
            continue;
        for (int j = 0; j < o->nkeys; j++) {
            if (strcmp(name, o->keys[j].name) || (home && !strcmp(home, o->name)))
                continue;
            size_t used = strlen(homes_list);
            snprintf(homes_list + used, sizeof homes_list - used, "%s%s", homes ? " | " : "",
                     o->name[0] ? o->name : "(top level)");
            home = o->name, homes++;
        }
    }
    if (homes == 1)
        return zt_schema_bad(r, line, kp, "unknown key here (it belongs %s%s)",
                             home[0] ? "under " : "at the top level", home);
    if (homes > 1)
        return zt_schema_bad(r, line, kp, "unknown key here (it belongs under one of %s)", homes_list);
    int best = 0, bestd = INT_MAX;
    for (int j = 0; j < n; j++) {
        int d = zt_edit_distance(name, keys[j].name);
        if (d < bestd)
            bestd = d, best = j;
    }
    int len = (int)strnlen(name, 64);
    if (bestd <= 3 || bestd * 3 <= len)
        return zt_schema_bad(r, line, kp, "unknown key (did you mean %s?)", keys[best].name);
    return zt_schema_bad(r, line, kp, "unknown key (the closest known key is %s)", keys[best].name);
}

/* ---- the generic kinds ---------------------------------------------------------- */

static int read_value(zt_schema_reader *r, const zt_schema_key *k, const zt_node *v, const char *kp)
{
    char got[96], allowed[256];
    if (v->type == ZT_NODE_NULL && r->fmt->null_is_absent)
        return ZT_OK; /* absent, as Python reads None */
    switch (k->kind) {
    case ZT_K_BOOL: {
        int is_auto = k->autook && zt_schema_is_auto(v);
        if (v->type != ZT_NODE_BOOL && !is_auto)
            return zt_schema_bad(r, v->line, kp, "expected %s, got %s",
                                 k->autook ? "true, false or \"auto\"" : "true or false",
                                 zt_schema_describe(r, v, got, sizeof got));
        if (k->fixed && v->boolean != k->want)
            return zt_schema_bad(r, v->line, kp, "must be %s (%s)", k->want ? "true" : "false", k->why);
        if (k->off != ZT_NO_FIELD)
            *(zt_setting *)zt_schema_field(r, k) = is_auto ? ZT_AUTO : v->boolean ? ZT_YES : ZT_NO;
        return ZT_OK;
    }
    case ZT_K_ENUM: {
        zt_join_names(allowed, sizeof allowed, k->allowed);
        if (v->type != ZT_NODE_STR)
            return zt_schema_bad(r, v->line, kp, "expected one of %s, got %s", allowed,
                                 zt_schema_describe(r, v, got, sizeof got));
        int i = zt_index_of(v->text, k->allowed, k->icase);
        if (i >= 0) {
            zt_schema_set_string(r, k, k->allowed[i]);
            return ZT_OK;
        }
        if (k->refused && zt_index_of(v->text, k->refused, k->icase) >= 0)
            return zt_schema_bad(r, v->line, kp, "'%s' is refused: %s (allowed: %s)", v->text,
                                 k->refusal, allowed);
        return zt_schema_bad(r, v->line, kp, "'%.80s' is not allowed (allowed: %s)", v->text, allowed);
    }
    case ZT_K_STR:
        if (v->type != ZT_NODE_STR)
            return zt_schema_bad(r, v->line, kp, "expected a string, got %s",
                                 zt_schema_describe(r, v, got, sizeof got));
        if (k->off != ZT_NO_FIELD && strlen(v->text) >= k->cap)
            return zt_schema_bad(r, v->line, kp, "is longer than %zu characters", k->cap - 1);
        zt_schema_set_string(r, k, v->text);
        return ZT_OK;
    case ZT_K_SECTION: {
        if (v->type != ZT_NODE_MAP) {
            char want[128];
            snprintf(want, sizeof want, r->fmt->section_want, k->section->name);
            return zt_schema_bad(r, v->line, kp, "expected %s, got %s", want,
                                 zt_schema_describe(r, v, got, sizeof got));
        }
        if (v->child)
            r->nonempty[k->section->id] = 1;
        return zt_schema_read_map(r, k->section, v);
    }
    case ZT_K_ANY_MAP:
        if (v->type != ZT_NODE_MAP)
            return zt_schema_bad(r, v->line, kp, "expected %s, got %s", r->fmt->map_word,
                                 zt_schema_describe(r, v, got, sizeof got));
        return ZT_OK;
    case ZT_K_STR_LIST:
        if (v->type != ZT_NODE_LIST)
            return zt_schema_bad(r, v->line, kp, "expected a list of strings, got %s",
                                 zt_schema_describe(r, v, got, sizeof got));
        for (const zt_node *item = v->child; item; item = item->next)
            if (item->type != ZT_NODE_STR)
                return zt_schema_bad(r, item->line, kp, "expected a list of strings, but an item is %s",
                                     zt_schema_describe(r, item, got, sizeof got));
        return ZT_OK;
    case ZT_K_SCALAR:
        if (v->type == ZT_NODE_LIST || v->type == ZT_NODE_MAP)
            return zt_schema_bad(r, v->line, kp, "expected a single value, got %s",
                                 zt_schema_describe(r, v, got, sizeof got));
        return ZT_OK;
    }
    assert(k->kind >= ZT_K_CUSTOM && r->fmt->read_custom);
    return r->fmt->read_custom(r, k, v, kp);
}

/* ---- the walk ------------------------------------------------------------------------ */

static int unknown_key(zt_schema_reader *r, const zt_schema_section *s, const zt_node *m, const char *kp)
{
    if (r->fmt->unknown_key)
        return r->fmt->unknown_key(r, s, m, kp);
    return zt_schema_unknown_key(r, m->key->line, kp, m->key->text, s->keys, s->nkeys, s);
}

void zt_schema_note(zt_schema_reader *r, const char *fmt, ...)
{
    if (r->nnotes >= ZT_SCHEMA_MAX_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes[r->nnotes++], ZT_SCHEMA_NOTE_LEN, fmt, ap);
    va_end(ap);
}

static int key_index(const zt_schema_section *s, const char *name)
{
    int j = 0;
    while (j < s->nkeys && strcmp(s->keys[j].name, name))
        j++;
    return j;
}

/* Member m of map, given under an old name of key j of s (fmt->renamed): refused when
 * the new name is given too, else noted. */
static int read_renamed(zt_schema_reader *r, const zt_schema_section *s, const zt_node *map,
                        const zt_node *m, int j, const char *kp)
{
    const char *sec = s->name, *dot = s->name[0] ? "." : "", *now = s->keys[j].name;
    for (const zt_node *p = map->child; p; p = p->next)
        if (p->key->type == ZT_NODE_STR && !strcmp(p->key->text, now)) {
            if (r->fmt->has_lines)
                return zt_schema_bad(r, m->key->line, kp, "is the old name of %s%s%s, which is also given "
                                     "(line %d); keep only %s", sec, dot, now, p->key->line, now);
            return zt_schema_bad(r, m->key->line, kp, "is the old name of %s%s%s, which is also given; "
                                 "keep only %s", sec, dot, now, now);
        }
    if (r->fmt->has_lines)
        zt_schema_note(r, "%s:%d: %s is deprecated; read as %s%s%s, its current name (rename it)", r->path,
                       m->key->line, kp, sec, dot, now);
    else
        zt_schema_note(r, "%s: %s is deprecated; read as %s%s%s, its current name (rename it)", r->path, kp,
                       sec, dot, now);
    return ZT_OK;
}

int zt_schema_read_map(zt_schema_reader *r, const zt_schema_section *s, const zt_node *map)
{
    assert(s->id >= 0 && s->id < ZT_SCHEMA_MAX_SECTIONS && s->nkeys <= ZT_SCHEMA_MAX_KEYS);
    char kp[200], got[96], now[128];
    for (const zt_node *m = map->child; m; m = m->next) {
        const zt_node *key = m->key;
        if (key->type != ZT_NODE_STR) {
            snprintf(kp, sizeof kp, "%s", s->name[0] ? s->name : "(top level)");
            return zt_schema_bad(r, key->line, kp, "keys must be names, got %s",
                                 zt_schema_describe(r, key, got, sizeof got));
        }
        snprintf(kp, sizeof kp, "%s%s%.100s", s->name, s->name[0] ? "." : "", key->text);
        int j = key_index(s, key->text);
        const char *renamed = NULL;
        if (j == s->nkeys && r->fmt->renamed && (renamed = r->fmt->renamed(s, key->text, now, sizeof now))) {
            j = key_index(s, renamed);
            assert(j < s->nkeys); /* the format renames to a key of the section */
            int rc = read_renamed(r, s, map, m, j, kp);
            if (rc != ZT_OK)
                return rc;
        }
        int unknown = j == s->nkeys;
        if (unknown && r->fmt->unknown_first)
            return unknown_key(r, s, m, kp);
        for (const zt_node *p = map->child; p != m; p = p->next)
            if (!strcmp(p->key->text, key->text)) {
                if (r->fmt->duplicate_key)
                    return r->fmt->duplicate_key(r, m, p, kp);
                if (r->fmt->has_lines)
                    return zt_schema_bad(r, key->line, kp, "duplicate key (first given at line %d)",
                                         p->key->line);
                return zt_schema_bad(r, key->line, kp, "duplicate key");
            }
        if (unknown) { /* a format may accept it (config.json keeps keys it does not know) */
            int rc = unknown_key(r, s, m, kp);
            if (rc != ZT_OK)
                return rc;
            continue;
        }
        int rc = read_value(r, &s->keys[j], m, kp);
        if (rc != ZT_OK)
            return rc;
        r->seen[s->id][j] = 1;
        if (m->type != ZT_NODE_NULL)
            r->line[s->id][j] = key->line > 0 ? key->line : 1;
    }
    return ZT_OK;
}

int zt_schema_given(const zt_schema_reader *r, const zt_schema_section *s, const char *name)
{
    for (int j = 0; j < s->nkeys; j++)
        if (!strcmp(s->keys[j].name, name))
            return r->line[s->id][j];
    assert(!"no such key");
    return 0;
}

const zt_schema_key *zt_schema_missing(const zt_schema_reader *r, const zt_schema_section *s)
{
    for (int j = 0; j < s->nkeys; j++)
        if (s->keys[j].required && !r->seen[s->id][j])
            return &s->keys[j];
    return NULL;
}
