/* test_jinja.c — the chat-template renderer against transformers' own
 * apply_chat_template: 17 real templates (tests/fixtures/chat_templates, sources
 * in its README) over 23 conversations each, with add_generation_prompt false
 * and true, rendered by tools/make_chat_template_fixture.py with transformers and
 * jinja2 into expected.json.  Each render must match byte for byte; each
 * conversation a template refuses must fail here too, with raise_exception's
 * message where the template raised one; the {% generation %} blocks must cover
 * the same text as transformers' assistant tracker. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/core/json.h"
#include "../src/core/mem.h"
#include "../src/text/jinja.h"
#include "test.h"

#define DIR "tests/fixtures/chat_templates/"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[len] = 0;
        *n = (size_t)len;
    }
    return b;
}

static int check_generation(const zt_jinja_out *o, const cJSON *want)
{
    if ((size_t)cJSON_GetArraySize(want) != o->ngen)
        return 0;
    for (size_t i = 0; i < o->ngen; i++) {
        const char *w = cJSON_GetArrayItem(want, (int)i)->valuestring;
        size_t n = o->gen[i].end - o->gen[i].start;
        if (strlen(w) != n || memcmp(o->text + o->gen[i].start, w, n) != 0)
            return 0;
    }
    return 1;
}

/* One case: render and compare; returns 1 when it agrees with transformers. */
static int check_case(const zt_jinja *t, const char *name, cJSON *vars, const cJSON *c, time_t now)
{
    zt_jinja_out o;
    zt_err err = {0};
    const cJSON *text = cJSON_GetObjectItem(c, "text"), *error = cJSON_GetObjectItem(c, "error");
    int rc = zt_jinja_render(t, vars, now, &o, &err);
    int conv = cJSON_GetObjectItem(c, "conversation")->valueint;
    int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
    if (text) {
        int same = rc == 0 && o.len == strlen(text->valuestring) && memcmp(o.text, text->valuestring, o.len) == 0;
        const cJSON *g = cJSON_GetObjectItem(c, "generation");
        if (same && g)
            same = check_generation(&o, g);
        if (!same)
            fprintf(stderr, "  %s conversation %d gen %d: %s\n", name, conv, gen, rc ? err.msg : "differs");
        if (!rc)
            zt_jinja_out_free(&o);
        return same;
    }
    if (rc == 0) {
        zt_jinja_out_free(&o);
        fprintf(stderr, "  %s conversation %d: rendered, transformers refused: %s\n", name, conv, error->valuestring);
        return 0;
    }
    if (rc != ZT_EINPUT)
        return 0;
    if (cJSON_IsTrue(cJSON_GetObjectItem(c, "raised"))) {
        char want[1024];
        snprintf(want, sizeof want, "raised an exception: %s", error->valuestring);
        if (!strstr(err.msg, want)) {
            fprintf(stderr, "  %s conversation %d: error '%s', wanted '%s'\n", name, conv, err.msg, want);
            return 0;
        }
    }
    return 1;
}

static void test_real_templates(void)
{
    zt_json doc;
    zt_err err = {0};
    size_t before = zt_mem_current(ZT_MEM_OTHER);
    ZT_CHECK(zt_json_parse_file(DIR "expected.json", 64u << 20, &doc, &err) == 0);
    if (!doc.root)
        return;
    size_t n;
    char *convs_text = slurp(DIR "conversations.json", &n);
    cJSON *convs = convs_text ? cJSON_Parse(convs_text) : NULL;
    ZT_CHECK(cJSON_GetArraySize(convs) >= 20);
    time_t now = (time_t)cJSON_GetObjectItem(doc.root, "now")->valuedouble;
    int templates = 0, cases = 0, agreed = 0;
    const cJSON *tp;
    cJSON_ArrayForEach(tp, cJSON_GetObjectItem(doc.root, "templates"))
    {
        const char *name = cJSON_GetObjectItem(tp, "name")->valuestring;
        char path[512];
        snprintf(path, sizeof path, DIR "%s.jinja", name);
        char *src = slurp(path, &n);
        zt_jinja *t = NULL;
        ZT_CHECK_MSG(src && zt_jinja_compile(path, src, n, &t, &err) == 0, "%s: %s", path, err.msg);
        free(src);
        if (!t)
            continue;
        templates++;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(tp, "cases"))
        {
            cJSON *vars = cJSON_Duplicate(cJSON_GetObjectItem(tp, "special_tokens"), 1);
            int conv = cJSON_GetObjectItem(c, "conversation")->valueint;
            cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(cJSON_GetArrayItem(convs, conv), 1));
            cJSON_AddBoolToObject(vars, "add_generation_prompt",
                                  cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")));
            cases++;
            agreed += check_case(t, name, vars, c, now);
            cJSON_Delete(vars);
        }
        zt_jinja_free(t);
    }
    printf("  %d templates, %d renders, %d agree with transformers\n", templates, cases, agreed);
    ZT_CHECK(templates >= 8);
    ZT_CHECK(cases >= templates * 40);
    ZT_CHECK(agreed == cases);
    cJSON_Delete(convs);
    free(convs_text);
    zt_json_free(&doc);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == before);
}

/* Render src over vars (JSON text) at time now; the status, with the text or error in buf. */
static int render(const char *src, const char *vars, time_t now, char *buf, size_t cap)
{
    zt_jinja *t;
    zt_err err = {0};
    zt_jinja_out o;
    int rc = zt_jinja_compile("t.jinja", src, strlen(src), &t, &err);
    if (!rc) {
        cJSON *v = cJSON_Parse(vars);
        rc = zt_jinja_render(t, v, now, &o, &err);
        cJSON_Delete(v);
        zt_jinja_free(t);
    }
    snprintf(buf, cap, "%s", rc ? err.msg : o.text);
    if (!rc)
        zt_jinja_out_free(&o);
    return rc;
}

static void test_refuses_with_line(void)
{
    char buf[1024];
    ZT_CHECK(render("a\n{% macro m() %}x{% endmacro %}", "{}", 0, buf, sizeof buf) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(buf, "t.jinja: line 2: the statement 'macro' is not supported"), "%s", buf);
    ZT_CHECK(render("\n\n{{ x | wordcount }}", "{\"x\": \"a b\"}", 0, buf, sizeof buf) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(buf, "line 3: the filter 'wordcount' is not supported"), "%s", buf);
    ZT_CHECK(render("{% if x %}never closed", "{}", 0, buf, sizeof buf) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(buf, "line 1") && strstr(buf, "never closed"), "%s", buf);
    ZT_CHECK(render("{{ 'a' + 1 }}", "{}", 0, buf, sizeof buf) == ZT_EINPUT);
    ZT_CHECK(render("{{ x.y }}", "{}", 0, buf, sizeof buf) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(buf, "'x' is undefined"), "%s", buf);
}

static void test_strftime_now_is_injected(void)
{
    char buf[256];
    ZT_CHECK(render("{{ strftime_now('%d %b %Y') }}", "{}", 86400 * 365, buf, sizeof buf) == 0);
    ZT_CHECK_MSG(strcmp(buf, "01 Jan 1971") == 0, "%s", buf);
}

/* Python semantics the real templates lean on, checked on their own. */
static void test_python_semantics(void)
{
    static const struct {
        const char *src, *vars, *want;
    } cases[] = {
        {"{{ xs[::-1] | join(',') }}|{{ xs[1:] | length }}", "{\"xs\": [1, 2, 3]}", "3,2,1|2"},
        {"{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
         "{\"xs\": [1, 2, 3]}", "6"},
        {"{% for x in xs %}{% set y = x %}{% endfor %}[{{ y }}]", "{\"xs\": [1]}", "[]"},
        {"{{ {'a': [1, 'b', none, true]} | tojson }} {{ {'a': 1} }}", "{}", "{\"a\": [1, \"b\", null, true]} {'a': 1}"},
        {"{{ 'a,b,,c'.split(',') }} {{ '  x y '.split() }}", "{}", "['a', 'b', '', 'c'] ['x', 'y']"},
        {"{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;"},
        {"  {% if true %}\n  x\n  {% endif %}\n", "{}", "  x\n"},
        {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }} {{ 'ab' * 2 }}", "{}", "3 -4 1 0.5 abab"},
        {"{{ 'é' | length }} {{ 'héllo'[1] }}", "{}", "1 é"},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = render(cases[i].src, cases[i].vars, 0, buf, sizeof buf);
        ZT_CHECK_MSG(rc == 0 && strcmp(buf, cases[i].want) == 0, "case %zu: got '%s'", i, buf);
    }
}

int main(void)
{
    /* the fixture pins strftime_now's clock in UTC */
    setenv("TZ", "UTC", 1);
    tzset();
    ZT_RUN(test_real_templates);
    ZT_RUN(test_refuses_with_line);
    ZT_RUN(test_strftime_now_is_injected);
    ZT_RUN(test_python_semantics);
    ZT_TEST_MAIN_END();
}
