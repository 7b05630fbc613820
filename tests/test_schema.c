/* test_schema.c — the key-table engine behind the config readers (core/schema.h),
 * on a toy format of two sections built by hand: keys land in their fields, absent
 * ones stay absent and where each key was given is recorded; a duplicate, an
 * unknown key (with the closest name, or the section it belongs to), a value of
 * the wrong kind and a missing required key are refused naming the file, line and
 * key path; the format's own kinds reach its read_custom. */
#include <string.h>

#include "../src/core/mem.h"
#include "../src/core/schema.h"
#include "test.h"

typedef struct toy {
    zt_setting verbose, fast;
    char color[8];
    char name[16];
    int custom_calls;
} toy;

enum { K_COUNT = ZT_K_CUSTOM }; /* the toy's own kind: counts its calls */

static const char *const colors[] = {"red", "green", NULL};
static const char *const refused_colors[] = {"blue", NULL};

#define FIELD(m) offsetof(toy, m), sizeof(((toy *)0)->m)

static const zt_schema_key inner_keys[] = {
    {.name = "fast", .kind = ZT_K_BOOL, FIELD(fast), .autook = 1},
    {.name = "tags", .kind = ZT_K_STR_LIST, ZT_NO_FIELD, 0},
};
static const zt_schema_section inner = {1, "inner", inner_keys, ZT_SCHEMA_NKEYS(inner_keys)};

static const zt_schema_key top_keys[] = {
    {.name = "verbose", .kind = ZT_K_BOOL, FIELD(verbose)},
    {.name = "color", .kind = ZT_K_ENUM, FIELD(color), .allowed = colors, .icase = 1,
     .refused = refused_colors, .refusal = "blue is for tests of refusals"},
    {.name = "name", .kind = ZT_K_STR, FIELD(name), .required = 1},
    {.name = "inner", .kind = ZT_K_SECTION, ZT_NO_FIELD, 0, .section = &inner},
    {.name = "count", .kind = K_COUNT, ZT_NO_FIELD, 0},
};
static const zt_schema_section top = {0, "", top_keys, ZT_SCHEMA_NKEYS(top_keys)};
static const zt_schema_section *const sections[] = {&top, &inner};

static int read_count(zt_schema_reader *r, const zt_schema_key *k, const zt_node *v, const char *kp)
{
    (void)k, (void)v, (void)kp;
    ((toy *)r->target)->custom_calls++;
    return ZT_OK;
}

static const zt_schema_format toy_format = {
    .sections = sections, .nsections = 2, .has_lines = 1, .null_is_absent = 1,
    .list_word = "a list", .map_word = "a mapping", .numbers_as_written = 1,
    .section_want = "a mapping of %s keys", .read_custom = read_count,
};

/* A document built as a front end would: a mapping of (key, value) members. */
typedef struct builder {
    zt_doc doc;
    zt_node **tail[4];
    int depth, line;
} builder;

static zt_node *add(builder *b, const char *key, zt_node_type type, const char *text)
{
    b->line++;
    zt_node *k = zt_doc_node(&b->doc, ZT_NODE_STR, b->line, key, strlen(key));
    zt_node *v = zt_doc_node(&b->doc, type, b->line, text, strlen(text));
    ZT_CHECK(k && v);
    if (!k || !v)
        return NULL;
    v->key = k;
    v->boolean = !strcmp(text, "true");
    *b->tail[b->depth] = v;
    b->tail[b->depth] = &v->next;
    return v;
}

static void open_map(builder *b, const char *key)
{
    zt_node *m = add(b, key, ZT_NODE_MAP, "");
    if (m)
        b->tail[++b->depth] = &m->child;
}

static void start(builder *b)
{
    memset(b, 0, sizeof *b);
    b->line = 1; /* the document starts on line 1, its first key on line 2 */
    b->doc.root = zt_doc_node(&b->doc, ZT_NODE_MAP, 1, "", 0);
    b->tail[0] = &b->doc.root->child;
}

static int read(builder *b, toy *t, zt_schema_reader *r, zt_err *err)
{
    memset(t, 0, sizeof *t);
    zt_schema_reader_init(r, &toy_format, "toy.yaml", t, NULL, err);
    int rc = zt_schema_read_map(r, &top, b->doc.root);
    const zt_schema_key *missing = rc == ZT_OK ? zt_schema_missing(r, &top) : NULL;
    if (missing)
        rc = zt_fail(err, ZT_EINPUT, "toy.yaml: %s: missing", missing->name);
    return rc;
}

static void test_values_land_in_fields(void)
{
    builder b;
    start(&b);
    add(&b, "name", ZT_NODE_STR, "x");
    add(&b, "color", ZT_NODE_STR, "GREEN");
    add(&b, "verbose", ZT_NODE_NULL, "");
    add(&b, "count", ZT_NODE_INT, "3");
    open_map(&b, "inner");
    add(&b, "fast", ZT_NODE_STR, "auto");
    toy t;
    zt_schema_reader r;
    zt_err err = {0};
    ZT_CHECK_MSG(read(&b, &t, &r, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(t.name, "x") && !strcmp(t.color, "green")); /* the canonical spelling */
    ZT_CHECK(t.verbose == ZT_UNSET && t.fast == ZT_AUTO && t.custom_calls == 1);
    ZT_CHECK(zt_schema_given(&r, &top, "name") == 2 && zt_schema_given(&r, &top, "color") == 3);
    ZT_CHECK(zt_schema_given(&r, &top, "verbose") == 0); /* null is absent */
    ZT_CHECK(zt_schema_given(&r, &inner, "fast") == 7 && r.nonempty[inner.id]);
    zt_doc_free(&b.doc);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void expect(builder *b, const char *want)
{
    toy t;
    zt_schema_reader r;
    zt_err err = {0};
    int rc = read(b, &t, &r, &err);
    ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, want), "want '%s', got rc %d '%s'", want, rc, err.msg);
    zt_doc_free(&b->doc);
}

static void test_refusals_name_file_line_and_key(void)
{
    builder b;
    start(&b);
    add(&b, "name", ZT_NODE_STR, "x");
    add(&b, "name", ZT_NODE_STR, "y");
    expect(&b, "toy.yaml:3: name: duplicate key (first given at line 2)");
    start(&b);
    add(&b, "colour", ZT_NODE_STR, "red");
    expect(&b, "toy.yaml:2: colour: unknown key (did you mean color?)");
    start(&b);
    add(&b, "fast", ZT_NODE_BOOL, "true");
    expect(&b, "toy.yaml:2: fast: unknown key here (it belongs under inner)");
    start(&b);
    open_map(&b, "inner");
    add(&b, "verbose", ZT_NODE_BOOL, "true");
    expect(&b, "toy.yaml:3: inner.verbose: unknown key here (it belongs at the top level)");
    start(&b);
    add(&b, "verbose", ZT_NODE_STR, "auto");
    expect(&b, "toy.yaml:2: verbose: expected true or false, got the string 'auto'");
    start(&b);
    add(&b, "color", ZT_NODE_STR, "blue");
    expect(&b, "color: 'blue' is refused: blue is for tests of refusals (allowed: red | green)");
    start(&b);
    add(&b, "color", ZT_NODE_INT, "7");
    expect(&b, "color: expected one of red | green, got the integer 7");
    start(&b);
    add(&b, "name", ZT_NODE_STR, "a name far too long");
    expect(&b, "name: is longer than 15 characters");
    start(&b);
    add(&b, "inner", ZT_NODE_LIST, "");
    expect(&b, "inner: expected a mapping of inner keys, got a list");
    start(&b);
    add(&b, "color", ZT_NODE_STR, "red");
    expect(&b, "toy.yaml: name: missing");
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

int main(void)
{
    ZT_RUN(test_values_land_in_fields);
    ZT_RUN(test_refusals_name_file_line_and_key);
    ZT_TEST_MAIN_END();
}
