/* json_doc.c — zt_json to zt_doc (see json_doc.h). */
#include "json_doc.h"

#include <cjson/cJSON.h>
#include <string.h>

/* The length of the number token at s. */
static size_t number_len(const char *s)
{
    size_t n = 0;
    while (s[n] && strchr("+-0123456789.eE", s[n]))
        n++;
    return n;
}

/* The node for item; *k is the index of the next number token (the tokens are in
 * document order, the order of this pre-order walk). */
static zt_node *convert(const zt_json *j, const cJSON *item, zt_doc *doc, size_t *k)
{
    zt_node *n = NULL;
    if (cJSON_IsNull(item)) {
        n = zt_doc_node(doc, ZT_NODE_NULL, 0, "null", 4);
    } else if (cJSON_IsBool(item)) {
        int t = cJSON_IsTrue(item);
        n = zt_doc_node(doc, ZT_NODE_BOOL, 0, t ? "true" : "false", t ? 4 : 5);
        if (n)
            n->boolean = t;
    } else if (cJSON_IsNumber(item)) {
        const char *tok = *k < j->nnum ? j->text + j->nums[*k] : "";
        int64_t x = 0;
        int r = zt_json_int(j, *k, &x);
        n = zt_doc_node(doc, r == 1 ? ZT_NODE_FLOAT : ZT_NODE_INT, 0, tok, number_len(tok));
        if (n) {
            n->num = item->valuedouble;
            n->integer = x;
            n->in_range = r == 0;
        }
        ++*k;
    } else if (cJSON_IsString(item)) {
        n = zt_doc_node(doc, ZT_NODE_STR, 0, item->valuestring, strlen(item->valuestring));
    } else if (cJSON_IsArray(item) || cJSON_IsObject(item)) {
        int obj = cJSON_IsObject(item);
        n = zt_doc_node(doc, obj ? ZT_NODE_MAP : ZT_NODE_LIST, 0, "", 0);
        zt_node **tail = n ? &n->child : NULL;
        for (const cJSON *c = item->child; n && c; c = c->next) {
            zt_node *v = convert(j, c, doc, k);
            zt_node *key = obj && v ? zt_doc_node(doc, ZT_NODE_STR, 0, c->string, strlen(c->string)) : NULL;
            if (!v || (obj && !key))
                return NULL;
            v->key = key;
            *tail = v;
            tail = &v->next;
        }
    }
    return n;
}

int zt_json_doc(const zt_json *j, const char *path, zt_doc *doc, zt_err *err)
{
    size_t k = 0;
    memset(doc, 0, sizeof *doc);
    doc->root = convert(j, j->root, doc, &k);
    if (!doc->root) {
        zt_doc_free(doc);
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", path);
    }
    return ZT_OK;
}
