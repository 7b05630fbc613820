/* chat.c — tokenizer_config.json's chat template and special tokens (chat.h). */
#include "chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../core/json.h"
#include "../core/mem.h"

struct zt_chat {
    zt_jinja *tmpl;
    cJSON *special; /* {"bos_token": "<s>", ...}: the strings the template may print */
};

static const char *token_text(const cJSON *v)
{
    if (cJSON_IsString(v))
        return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content"); /* an AddedToken written as a dict */
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* A string, or transformers' list of named templates ("default" is the one used). */
static const char *template_text(const cJSON *t)
{
    if (cJSON_IsString(t))
        return t->valuestring;
    const cJSON *e;
    cJSON_ArrayForEach(e, t)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 && cJSON_IsString(body))
            return body->valuestring;
    }
    return NULL;
}

static int read_special(zt_chat *c, const cJSON *root)
{
    static const char *keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                 "pad_token", "cls_token", "mask_token"};
    if (!(c->special = cJSON_CreateObject()))
        return -1;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *s = token_text(cJSON_GetObjectItemCaseSensitive(root, keys[i]));
        if (s && !cJSON_AddStringToObject(c->special, keys[i], s))
            return -1;
    }
    return 0;
}

int zt_chat_load(const char *dir, zt_chat **out, zt_err *err)
{
    char path[4200];
    zt_json j;
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    int rc = zt_json_parse_file(path, 64u << 20, &j, err);
    if (rc)
        return rc;
    const char *src = template_text(cJSON_GetObjectItemCaseSensitive(j.root, "chat_template"));
    zt_chat *c = zt_alloc(ZT_MEM_OTHER, sizeof *c);
    if (!src)
        rc = zt_fail(err, ZT_EINPUT, "%s: no \"chat_template\" (a string, or a list with a \"default\" entry): "
                     "this tokenizer has no chat template to render conversations with", path);
    else if (!c || read_special(c, j.root))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    else {
        char name[4300];
        snprintf(name, sizeof name, "%s: chat_template", path);
        rc = zt_jinja_compile(name, src, strlen(src), &c->tmpl, err);
    }
    zt_json_free(&j);
    if (rc) {
        zt_chat_free(c);
        return rc;
    }
    *out = c;
    return ZT_OK;
}

void zt_chat_free(zt_chat *c)
{
    if (!c)
        return;
    zt_jinja_free(c->tmpl);
    cJSON_Delete(c->special);
    zt_free(ZT_MEM_OTHER, c, sizeof *c);
}

int zt_chat_has_generation(const zt_chat *c) { return zt_jinja_has_generation(c->tmpl); }

int zt_chat_render(const zt_chat *c, const cJSON *messages, int add_generation_prompt, zt_jinja_out *out,
                   zt_err *err)
{
    cJSON *vars = cJSON_Duplicate(c->special, 1);
    cJSON *msgs = cJSON_Duplicate(messages, 1);
    int rc;
    if (!vars || !msgs || !cJSON_AddItemToObject(vars, "messages", msgs)) {
        cJSON_Delete(msgs);
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    } else if (!cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    else
        rc = zt_jinja_render(c->tmpl, vars, time(NULL), out, err);
    cJSON_Delete(vars);
    return rc;
}
