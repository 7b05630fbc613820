/* hf_carry.c — see hf_carry.h. */
#include "hf_carry.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "gguf.h"
#include "../model/config.h"

#define CARRY_CONFIG_MAX (16u << 20)
/* the largest tokenizer file a directory may carry (Llama-3's tokenizer.json is 9 MB) */
#define CARRY_FILE_MAX (256ull << 20)

const char *const zt_hf_tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja", NULL,
};

int zt_hf_check_outputs(const char *dir, zt_err *err)
{
    static const char *const model_files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                              "generation_config.json", NULL};
    char path[4400];
    int rc = ZT_OK;
    for (int i = 0; model_files[i] && rc == ZT_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, model_files[i]);
        rc = zt_check_output_path(path, "a file the model save writes", err);
    }
    for (int i = 0; zt_hf_tokenizer_files[i] && rc == ZT_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, zt_hf_tokenizer_files[i]);
        rc = zt_check_output_path(path, "a file the model save writes", err);
    }
    DIR *d = rc == ZT_OK ? opendir(dir) : NULL; /* shards of any count the save may write or remove */
    struct dirent *e;
    while (d && rc == ZT_OK && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "model-", 6) || len < 18 || strcmp(e->d_name + len - 12, ".safetensors"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        rc = zt_check_output_path(path, "a file the model save writes", err);
    }
    if (d)
        closedir(d);
    return rc;
}

/* Copy src to dst (atomically) when src exists; a missing src is no error. */
static int copy_if_present(const char *src, const char *dst, zt_err *err)
{
    struct stat sb;
    if (stat(src, &sb) != 0 && errno == ENOENT)
        return ZT_OK;
    if (zt_same_file(src, dst))
        return ZT_OK;
    return zt_copy_file(src, dst, CARRY_FILE_MAX, "a tokenizer or generation file", err);
}

static int set_id(cJSON *o, const char *key, int id)
{
    if (id < 0)
        return 1;
    cJSON *v = cJSON_CreateNumber(id);
    if (!v)
        return 0;
    if (cJSON_HasObjectItem(o, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(o, key, v) != 0;
    return cJSON_AddItemToObject(o, key, v) != 0;
}

/* Equal as values: numbers (raw nodes holding their source token, after
 * zt_json_keep_number_text) by the double they denote, so 100000 equals 100000.0;
 * objects whatever their key order. */
static int same_value(const cJSON *a, const cJSON *b)
{
    if (cJSON_IsRaw(a) && cJSON_IsRaw(b))
        return strtod(a->valuestring, NULL) == strtod(b->valuestring, NULL);
    if ((a->type & 0xff) != (b->type & 0xff))
        return 0;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsArray(a) || cJSON_IsObject(a)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return 0;
        const cJSON *y = b->child;
        for (const cJSON *x = a->child; x; x = x->next, y = y->next) {
            const cJSON *other = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(b, x->string) : y;
            if (!other || !same_value(x, other))
                return 0;
        }
    }
    return 1; /* true, false, null */
}

/* What o says as a config (the model ztrain would compute and save): 0 and *c, or
 * -1 when it does not read. */
static int read_config(const cJSON *o, zt_llama_config *c)
{
    char *text = cJSON_PrintUnformatted(o);
    zt_err err = {0};
    int rc = text ? zt_hf_config_parse("config.json", text, strlen(text), c, &err) : -1;
    cJSON_free(text);
    return rc == ZT_OK ? 0 : -1;
}

/* Do a and b describe the same saved model: the same math (the digest) and the
 * same values of the keys the digest leaves out (model/config.c lists them)? */
static int same_config(const zt_llama_config *a, const zt_llama_config *b)
{
    return zt_llama_config_digest(a) == zt_llama_config_digest(b) &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->initializer_range == b->initializer_range && a->torch_dtype == b->torch_dtype &&
           strcmp(a->model_type, b->model_type) == 0 && a->max_window_layers == b->max_window_layers &&
           a->sliding_window == b->sliding_window;
}

/* The source's keys into the written config o: a key ztrain wrote with the value
 * the source gave keeps the source's token (100000 stays an integer), one it
 * changed keeps ztrain's, one ztrain does not write is copied ("dtype",
 * transformers >= 4.56's name, follows the written "torch_dtype").  Then each key
 * ztrain wrote that the source lacked is dropped where the config reads the same
 * without it (an explicit default such as head_dim or rope_scaling: null), so a
 * model saved unchanged has the source's config.json, key for key.  The class
 * keys stay: transformers needs them to pick the model. 0, or -1 out of memory. */
static int merge_keys(cJSON *o, const cJSON *src)
{
    for (const cJSON *k = src->child; k; k = k->next) {
        cJSON *mine = cJSON_GetObjectItemCaseSensitive(o, k->string);
        if (mine && !same_value(mine, k))
            continue;
        const cJSON *from = k;
        if (!mine && !strcmp(k->string, "dtype") && cJSON_GetObjectItemCaseSensitive(o, "torch_dtype") &&
            !same_value(cJSON_GetObjectItemCaseSensitive(o, "torch_dtype"), k))
            from = cJSON_GetObjectItemCaseSensitive(o, "torch_dtype");
        cJSON *copy = cJSON_Duplicate(from, 1);
        if (!copy || !(mine ? cJSON_ReplaceItemInObjectCaseSensitive(o, k->string, copy)
                            : cJSON_AddItemToObject(o, k->string, copy)))
            return -1;
    }
    zt_llama_config want, without;
    if (read_config(o, &want) != 0)
        return 0; /* not a config ztrain reads: leave every key */
    for (int i = 0; i < cJSON_GetArraySize(o);) {
        cJSON *k = cJSON_GetArrayItem(o, i);
        if (cJSON_HasObjectItem(src, k->string) || !strcmp(k->string, "architectures") ||
            !strcmp(k->string, "model_type")) {
            i++;
            continue;
        }
        cJSON_DetachItemViaPointer(o, k);
        if (read_config(o, &without) == 0 && same_config(&want, &without)) {
            cJSON_Delete(k);
        } else if (!cJSON_InsertItemInArray(o, i++, k)) { /* back in its place */
            cJSON_Delete(k);
            return -1;
        }
    }
    return 0;
}

/* dst's config.json completed with src_config's keys and the ids. */
static int merge_config(const char *dst_dir, const char *src_config, const zt_hf_token_ids *ids, zt_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dst_dir);
    if (src_config && zt_same_file(src_config, path))
        src_config = NULL; /* its keys are the ones written */
    if (!src_config && !ids)
        return ZT_OK;
    zt_json dst, src = {0};
    int rc = zt_json_parse_file(path, CARRY_CONFIG_MAX, &dst, err);
    if (rc)
        return rc;
    if (src_config && (rc = zt_json_parse_file(src_config, CARRY_CONFIG_MAX, &src, err))) {
        zt_json_free(&dst);
        return rc;
    }
    if (src.root && !cJSON_IsObject(src.root)) {
        rc = zt_fail(err, ZT_EINPUT, "%s: not a JSON object", src_config);
        goto done;
    }
    /* Numbers are printed back as they were written (8.0 stays 8.0: transformers
     * checks that rope_scaling's factors are floats), in both files. */
    if (zt_json_keep_number_text(&dst) || (src.root && zt_json_keep_number_text(&src))) {
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory completing config.json", path);
        goto done;
    }
    int ok = cJSON_IsObject(dst.root) && (!src.root || merge_keys(dst.root, src.root) == 0);
    if (ok && ids)
        ok = set_id(dst.root, "bos_token_id", ids->bos) && set_id(dst.root, "eos_token_id", ids->eos) &&
             set_id(dst.root, "pad_token_id", ids->pad);
    char *text = ok ? cJSON_Print(dst.root) : NULL;
    if (!text) {
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory completing config.json", path);
        goto done;
    }
    rc = zt_json_write_text(path, text, 1, err);
done:
    zt_json_free(&dst);
    if (src.root)
        zt_json_free(&src);
    return rc;
}

int zt_hf_carry(const char *dst, const char *src_config, const char *src_dir, const char *tok_dir,
                const zt_hf_token_ids *ids, zt_err *err)
{
    int rc = merge_config(dst, src_config, ids, err);
    char from[4200], to[4200];
    if (rc == ZT_OK && src_dir) {
        snprintf(from, sizeof from, "%s/generation_config.json", src_dir);
        snprintf(to, sizeof to, "%s/generation_config.json", dst);
        rc = copy_if_present(from, to, err);
    }
    const char *tdir = tok_dir ? tok_dir : src_dir;
    for (int i = 0; rc == ZT_OK && tdir && zt_hf_tokenizer_files[i]; i++) {
        snprintf(from, sizeof from, "%s/%s", tdir, zt_hf_tokenizer_files[i]);
        snprintf(to, sizeof to, "%s/%s", dst, zt_hf_tokenizer_files[i]);
        rc = copy_if_present(from, to, err);
    }
    return rc;
}

int zt_hf_carry_model(const char *dst, const char *source_dir, const char *tokenizer_dir, zt_err *err)
{
    char cfg[4200];
    /* a GGUF model has no files to carry; its converted tokenizer directory (the
     * CLI's, with generation_config.json) stands in for it */
    if (source_dir && zt_gguf_is_file(source_dir))
        return zt_hf_carry(dst, NULL, tokenizer_dir, tokenizer_dir, NULL, err);
    if (source_dir)
        snprintf(cfg, sizeof cfg, "%s/config.json", source_dir);
    return zt_hf_carry(dst, source_dir ? cfg : NULL, source_dir, tokenizer_dir, NULL, err);
}
