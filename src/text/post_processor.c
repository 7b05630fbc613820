/* post_processor.c — tokenizer.json's post_processor (see post_processor.h). */
#include "post_processor.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

static int refuse(zt_err *err, const char *file, const char *jpath, const char *what)
{
    return zt_fail(err, ZT_EINPUT, "%s: %s: %s", file, jpath, what);
}

/* Append the ids of special token name (special_tokens[name].ids) to the prefix
 * (before the sequence) or the suffix (after it). */
static int add_special(const cJSON *specials, const char *name, int after, zt_post_processor *pp, const char *file,
                       const char *jpath, zt_err *err)
{
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids");
    if (!cJSON_IsArray(ids))
        return zt_fail(err, ZT_EINPUT, "%s: %s: special token \"%s\" is not in special_tokens (with its ids)", file,
                       jpath, name);
    const cJSON *id;
    cJSON_ArrayForEach(id, ids) {
        int *n = after ? &pp->n_suffix : &pp->n_prefix;
        int32_t *v = after ? pp->suffix : pp->prefix;
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX ||
            id->valuedouble != (double)(int32_t)id->valuedouble)
            return zt_fail(err, ZT_EINPUT, "%s: %s: special token \"%s\": ids must be token ids", file, jpath, name);
        if (*n == ZT_POST_MAX)
            return refuse(err, file, jpath, "more special token ids than ztrain supports (16 on each side)");
        v[(*n)++] = (int32_t)id->valuedouble;
    }
    return ZT_OK;
}

/* TemplateProcessing's "single": [SpecialToken...] Sequence "A" [SpecialToken...]. */
static int load_template(const cJSON *tp, const char *file, const char *jpath, zt_post_processor *pp, zt_err *err)
{
    char at[160];
    snprintf(at, sizeof at, "%s.single", jpath);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(tp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(tp, "special_tokens");
    if (!cJSON_IsArray(single))
        return refuse(err, file, at, "expected a list of pieces");
    int seen_a = 0, i = 0;
    const cJSON *piece;
    cJSON_ArrayForEach(piece, single) {
        snprintf(at, sizeof at, "%s.single[%d]", jpath, i++);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(piece, "SpecialToken");
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(piece, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp ? sp : seq, "id");
        if (!cJSON_IsString(id))
            return refuse(err, file, at, "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}}");
        if (seq) {
            if (strcmp(id->valuestring, "A") != 0 || seen_a)
                return refuse(err, file, at, "the single template must hold the sequence \"A\" exactly once");
            seen_a = 1;
        } else {
            int rc = add_special(specials, id->valuestring, seen_a, pp, file, at, err);
            if (rc)
                return rc;
        }
    }
    if (!seen_a)
        return refuse(err, file, at, "the single template has no sequence \"A\"");
    return ZT_OK;
}

static int load_one(const cJSON *p, const char *file, const char *jpath, zt_post_processor *pp, zt_err *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "TemplateProcessing"))
        return load_template(p, file, jpath, pp, err);
    if (!strcmp(t, "ByteLevel")) /* trims offsets; the ids are untouched */
        return ZT_OK;
    snprintf(pp->unsupported, sizeof pp->unsupported, "%.40s: unsupported post-processor \"%.40s\" (supported: "
             "TemplateProcessing, ByteLevel, a Sequence of them)", jpath, t);
    return ZT_OK;
}

int zt_post_processor_load(const cJSON *p, const char *file, zt_post_processor *out, zt_err *err)
{
    memset(out, 0, sizeof *out);
    if (!p || cJSON_IsNull(p))
        return ZT_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "Sequence") != 0)
        return load_one(p, file, "post_processor", out, err);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
    if (!cJSON_IsArray(list))
        return refuse(err, file, "post_processor.processors", "expected a list");
    int i = 0, rc = ZT_OK;
    const cJSON *q;
    cJSON_ArrayForEach(q, list) {
        char at[64];
        snprintf(at, sizeof at, "post_processor.processors[%d]", i++);
        if ((rc = load_one(q, file, at, out, err)))
            break;
    }
    return rc;
}
