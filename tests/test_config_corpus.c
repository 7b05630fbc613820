/* test_config_corpus.c — every config.json of tests/fixtures/configs/ (published
 * models' files and transformers 4.4x / 5.x saves; the README there names each
 * source) reads, and a model saved from it writes the same config.json back: the
 * writer (zt_hf_config_write) and the carry of the source's keys (zt_hf_carry), as
 * every save runs them, compared with the source as parsed JSON, every key, value
 * and type (integer or float literal) kept and no key added. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>

#include "../src/core/json.h"
#include "../src/core/mem.h"
#include "../src/io/hf_carry.h"
#include "../src/model/config.h"
#include "test.h"
#include "tmpdir.h"

#define CORPUS "tests/fixtures/configs"

static char tmpdir[64];

/* Is the number token t an integer literal (no fraction, no exponent)? */
static int int_literal(const char *t) { return !strpbrk(t, ".eE"); }

/* a and b the same JSON value, numbers compared by value and by literal kind;
 * the first difference is described in why. */
static int same_json(const cJSON *a, const cJSON *b, const char *key, char *why, size_t cap)
{
    if ((a->type & 0xff) != (b->type & 0xff)) {
        snprintf(why, cap, "key \"%s\": types differ", key);
        return 0;
    }
    if (cJSON_IsRaw(a)) { /* a number, as its source token */
        if (strtod(a->valuestring, NULL) != strtod(b->valuestring, NULL) ||
            int_literal(a->valuestring) != int_literal(b->valuestring)) {
            snprintf(why, cap, "key \"%s\": %s against %s", key, a->valuestring, b->valuestring);
            return 0;
        }
        return 1;
    }
    if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring) != 0) {
        snprintf(why, cap, "key \"%s\": \"%s\" against \"%s\"", key, a->valuestring, b->valuestring);
        return 0;
    }
    if (cJSON_IsArray(a) || cJSON_IsObject(a)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) {
            snprintf(why, cap, "key \"%s\": %d members against %d", key, cJSON_GetArraySize(a),
                     cJSON_GetArraySize(b));
            return 0;
        }
        const cJSON *y = b->child;
        for (const cJSON *x = a->child; x; x = x->next, y = y->next) {
            const cJSON *o = cJSON_IsObject(a) ? cJSON_GetObjectItemCaseSensitive(b, x->string) : y;
            if (!o) {
                snprintf(why, cap, "key \"%s\" is missing", x->string);
                return 0;
            }
            if (!same_json(x, o, x->string ? x->string : key, why, cap))
                return 0;
        }
    }
    return 1;
}

/* The saved config.json of a model read from src equals src. */
static void check_round_trip(const char *src)
{
    zt_llama_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_hf_config_read(src, &c, &err) == ZT_OK, "%s", err.msg);
    if (err.code)
        return;
    ZT_CHECK_MSG(zt_hf_config_write(tmpdir_path(tmpdir, "config.json"), &c, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(zt_hf_carry(tmpdir, src, NULL, NULL, NULL, &err) == ZT_OK, "%s", err.msg);
    zt_json in, out;
    ZT_CHECK(zt_json_parse_file(src, 1 << 20, &in, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_json_parse_file(tmpdir_path(tmpdir, "config.json"), 1 << 20, &out, &err) == ZT_OK, "%s",
                 err.msg);
    ZT_CHECK(zt_json_keep_number_text(&in) == 0 && zt_json_keep_number_text(&out) == 0);
    char why[512] = "";
    ZT_CHECK_MSG(same_json(in.root, out.root, "(top)", why, sizeof why), "%s: saved back with %s", src, why);
    ZT_CHECK_MSG(cJSON_GetArraySize(in.root) == cJSON_GetArraySize(out.root), "%s: %d keys saved back, %d read",
                 src, cJSON_GetArraySize(out.root), cJSON_GetArraySize(in.root));
    zt_json_free(&in);
    zt_json_free(&out);
}

static void test_corpus(void)
{
    DIR *d = opendir(CORPUS);
    ZT_CHECK_MSG(d != NULL, "cannot open %s (run from the repository root)", CORPUS);
    if (!d)
        return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
        check_round_trip(path);
        n++;
    }
    closedir(d);
    ZT_CHECK_MSG(n >= 12, "%d config files in %s, want at least 12", n, CORPUS);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

/* A model whose config changes on save (here the dtype) writes the new value, and
 * still keeps the source's other keys, its own one included. */
static void test_changed_value_kept(void)
{
    const char *src = tmpdir_path(tmpdir, "src.json");
    static const char text[] =
        "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"vocab_size\": 256,"
        " \"num_attention_heads\": 4, \"dtype\": \"bfloat16\", \"my_run_name\": {\"a\": [1, 2.0]}}";
    write_bytes(src, text, sizeof text - 1);
    zt_llama_config c;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_hf_config_read(src, &c, &err) == ZT_OK, "%s", err.msg);
    c.torch_dtype = ZT_F32;
    ZT_CHECK(zt_hf_config_write(tmpdir_path(tmpdir, "config.json"), &c, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_hf_carry(tmpdir, src, NULL, NULL, NULL, &err) == ZT_OK, "%s", err.msg);
    zt_json out;
    ZT_CHECK(zt_json_parse_file(tmpdir_path(tmpdir, "config.json"), 1 << 20, &out, &err) == ZT_OK);
    if (err.code)
        return;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(out.root, "dtype");
    ZT_CHECK(cJSON_IsString(dt) && strcmp(dt->valuestring, "float32") == 0);
    const cJSON *mine = cJSON_GetObjectItemCaseSensitive(out.root, "my_run_name");
    ZT_CHECK(cJSON_IsObject(mine) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mine, "a")) == 2);
    zt_json_free(&out);
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_corpus_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_corpus);
    ZT_RUN(test_changed_value_kept);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
