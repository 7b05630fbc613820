/* records.c — JSON Lines records (see records.h). */
#include "records.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../core/json.h"

int zt_records_is_jsonl(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot && (!strcasecmp(dot, ".jsonl") || !strcasecmp(dot, ".json"));
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Call on(ctx, record, line) for each object of the JSON Lines text, in order;
 * a line that is not valid JSON or not an object is ZT_EINPUT naming it. */
typedef zt_record_obj_fn object_fn;

static int each_object(const char *path, const char *data, size_t len, const char *expected, object_fn on, void *ctx,
                       zt_err *err)
{
    size_t records = 0;
    long line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        const char *s = data + pos;
        size_t n = end - pos;
        pos = end + 1;
        if (blank(s, n))
            continue;
        char what[64];
        snprintf(what, sizeof what, "line %ld", line);
        zt_json j;
        int rc = zt_json_parse(path, what, s, n, (size_t)(s - data), &j, err);
        if (rc)
            return rc;
        int oom = 0;
        const char *dup = cJSON_IsObject(j.root) ? zt_json_duplicate_key(j.root, &oom) : NULL;
        if (!cJSON_IsObject(j.root))
            rc = zt_fail(err, ZT_EINPUT, "%s: line %ld is not a JSON object (JSON Lines: one object per line, %s)",
                         path, line, expected);
        else if (oom)
            rc = zt_fail(err, ZT_EFAIL, "%s: line %ld: out of memory", path, line);
        else if (dup)
            rc = zt_fail(err, ZT_EINPUT, "%s: line %ld: duplicate key \"%.60s\" (which value was meant is "
                         "unclear: refused, as pyarrow refuses it)", path, line, dup);
        else
            rc = on(ctx, j.root, line, err);
        zt_json_free(&j);
        if (rc)
            return rc;
        records++;
    }
    if (records == 0)
        return zt_fail(err, ZT_EINPUT, "%s: no records (JSON Lines: one object per line)", path);
    return ZT_OK;
}

/* The string member name of a record, or ZT_EINPUT naming the line. */
static int string_member(const char *path, const cJSON *record, long line, const char *name, const char *hint,
                         const char **out, zt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(record, name);
    if (!v)
        return zt_fail(err, ZT_EINPUT, "%s: line %ld has no \"%s\"%s", path, line, name, hint);
    if (!cJSON_IsString(v))
        return zt_fail(err, ZT_EINPUT, "%s: line %ld: \"%s\" is not a string", path, line, name);
    *out = v->valuestring;
    return ZT_OK;
}

typedef struct text_ctx {
    const char *path, *field;
    zt_record_fn fn;
    void *ctx;
} text_ctx;

static int on_text(void *vc, const cJSON *record, long line, zt_err *err)
{
    text_ctx *c = vc;
    const char *text = NULL;
    int rc = string_member(c->path, record, line, c->field, " (the text field; choose another with --text_field)",
                           &text, err);
    return rc ? rc : c->fn(c->ctx, text, strlen(text), err);
}

int zt_records_each(const char *path, const char *data, size_t len, const char *field, zt_record_fn fn, void *ctx,
                    zt_err *err)
{
    char expected[96];
    snprintf(expected, sizeof expected, "the text in \"%.64s\"", field);
    text_ctx c = {path, field, fn, ctx};
    return each_object(path, data, len, expected, on_text, &c, err);
}

typedef struct pair_ctx {
    const char *path;
    zt_pair_fn fn;
    void *ctx;
} pair_ctx;

static int on_pair(void *vc, const cJSON *record, long line, zt_err *err)
{
    pair_ctx *c = vc;
    const char *prompt = NULL, *completion = NULL;
    const char *hint = " (prompt/completion records: every record needs both)";
    int rc = string_member(c->path, record, line, "prompt", hint, &prompt, err);
    if (!rc)
        rc = string_member(c->path, record, line, "completion", hint, &completion, err);
    return rc ? rc : c->fn(c->ctx, prompt, strlen(prompt), completion, strlen(completion), err);
}

int zt_records_each_pair(const char *path, const char *data, size_t len, zt_pair_fn fn, void *ctx, zt_err *err)
{
    pair_ctx c = {path, fn, ctx};
    return each_object(path, data, len, "\"prompt\" and \"completion\" strings", on_pair, &c, err);
}

/* 1 if the first non-blank line of the JSON Lines text is an object with a
 * string member of each of the n names, 0 otherwise (a broken first line too:
 * the readers proper name it). */
static int first_has_strings(const char *data, size_t len, const char *const *names, int n)
{
    size_t pos = 0;
    while (pos < len) { /* the first non-blank line */
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        if (!blank(data + pos, end - pos))
            break;
        pos = end + 1;
    }
    if (pos >= len)
        return 0;
    const char *nl = memchr(data + pos, '\n', len - pos);
    size_t m = nl ? (size_t)(nl - data) - pos : len - pos;
    zt_json j;
    zt_err ignored;
    if (zt_json_parse("", "", data + pos, m, 0, &j, &ignored) != ZT_OK)
        return 0;
    int yes = cJSON_IsObject(j.root);
    for (int i = 0; yes && i < n; i++)
        yes = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j.root, names[i]));
    zt_json_free(&j);
    return yes;
}

int zt_records_are_prompt_completion(const char *data, size_t len)
{
    static const char *const pc[2] = {"prompt", "completion"};
    return first_has_strings(data, len, pc, 2);
}

int zt_records_first_has(const char *data, size_t len, const char *field)
{
    return first_has_strings(data, len, &field, 1);
}

int zt_records_each_object(const char *path, const char *data, size_t len, const char *expected, zt_record_obj_fn fn,
                           void *ctx, zt_err *err)
{
    return each_object(path, data, len, expected, fn, ctx, err);
}
