/* hf_carry.c — see hf_carry.h. */
#include "hf_carry.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/json.h"
#include "../core/mem.h"

#define CARRY_CONFIG_MAX (16u << 20)
/* the largest tokenizer file a directory may carry (Llama-3's tokenizer.json is 9 MB) */
#define CARRY_FILE_MAX (256ull << 20)

const char *const zt_hf_tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja", NULL,
};

/* Are a and b the same file?  (Both must exist.) */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Copy src to dst (atomically) when src exists; a missing src is no error. */
static int copy_if_present(const char *src, const char *dst, zt_err *err)
{
    struct stat sb;
    if (stat(src, &sb) != 0 && errno == ENOENT)
        return ZT_OK;
    if (same_file(src, dst))
        return ZT_OK;
    int fd;
    int rc = zt_open_input(src, NULL, &fd, &sb, err);
    if (rc)
        return rc;
    if ((unsigned long long)sb.st_size > CARRY_FILE_MAX) {
        close(fd);
        return zt_fail(err, ZT_EINPUT, "%s: %lld bytes, more than the %llu-byte limit of a tokenizer or "
                       "generation file", src, (long long)sb.st_size, CARRY_FILE_MAX);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = n ? zt_alloc(ZT_MEM_OTHER, n) : NULL;
    if (n && !buf) {
        close(fd);
        return zt_fail(err, ZT_EFAIL, "out of memory copying %s", src);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            rc = zt_fail(err, ZT_EFAIL, "%s: read error: %s", src, r ? strerror(errno) : "file shrank");
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (rc == ZT_OK) {
        zt_wpart part = {buf, n};
        rc = zt_write_atomic(dst, &part, 1, err);
    }
    zt_free(ZT_MEM_OTHER, buf, n);
    return rc;
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

/* dst's config.json completed with src_config's keys and the ids. */
static int merge_config(const char *dst_dir, const char *src_config, const zt_hf_token_ids *ids, zt_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dst_dir);
    if (src_config && same_file(src_config, path))
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
    int ok = cJSON_IsObject(dst.root);
    for (const cJSON *k = src.root ? src.root->child : NULL; ok && k; k = k->next) {
        if (cJSON_HasObjectItem(dst.root, k->string))
            continue;
        cJSON *copy = !strcmp(k->string, "dtype") /* transformers >= 4.56's name: the saved dtype */
                          ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(dst.root, "torch_dtype"), 1)
                          : cJSON_Duplicate(k, 1);
        ok = copy && cJSON_AddItemToObject(dst.root, k->string, copy);
    }
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
    if (source_dir)
        snprintf(cfg, sizeof cfg, "%s/config.json", source_dir);
    return zt_hf_carry(dst, source_dir ? cfg : NULL, source_dir, tokenizer_dir, NULL, err);
}
