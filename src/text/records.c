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

int zt_records_each(const char *path, const char *data, size_t len, const char *field, zt_record_fn fn, void *ctx,
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
        const cJSON *v = cJSON_IsObject(j.root) ? cJSON_GetObjectItemCaseSensitive(j.root, field) : NULL;
        if (!cJSON_IsObject(j.root))
            rc = zt_fail(err, ZT_EINPUT, "%s: line %ld is not a JSON object (JSON Lines: one object per line, the "
                         "text in \"%s\")", path, line, field);
        else if (!v)
            rc = zt_fail(err, ZT_EINPUT, "%s: line %ld has no \"%s\" (the text field; choose another with "
                         "--text_field)", path, line, field);
        else if (!cJSON_IsString(v))
            rc = zt_fail(err, ZT_EINPUT, "%s: line %ld: \"%s\" is not a string", path, line, field);
        else
            rc = fn(ctx, v->valuestring, strlen(v->valuestring), err);
        zt_json_free(&j);
        if (rc)
            return rc;
        records++;
    }
    if (records == 0)
        return zt_fail(err, ZT_EINPUT, "%s: no records (JSON Lines: one object per line)", path);
    return ZT_OK;
}
