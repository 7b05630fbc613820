/* test_gguf.c — the GGUF reader (src/io/gguf.h) against what transformers' GGUF
 * loader makes of the same files (tools/make_gguf_fixtures.py): the config, and
 * every parameter's fp32 bytes after dequantization and the q/k un-permutation
 * (SHA-256 equal, so bit-equal); on the fixtures, which hold every supported
 * tensor type, and on SmolLM2-135M-Instruct.  Then hostile files, each refused
 * with ZT_EINPUT naming the file and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../src/core/mem.h"
#include "../src/core/sha256.h"
#include "../src/io/gguf.h"
#include "../src/model/layout.h"
#include "../src/text/gguf_tokenizer.h"
#include "../src/text/tokenizer.h"
#include "test.h"
#include "tmpdir.h"

#define SMOLLM2_DEFAULT "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

static cJSON *json_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        rewind(f);
        buf = len > 0 ? malloc((size_t)len) : NULL;
        n = buf ? fread(buf, 1, (size_t)len, f) : 0;
    }
    if (f)
        fclose(f);
    cJSON *j = n ? cJSON_ParseWithLength(buf, n) : NULL;
    free(buf);
    return j;
}

/* Every GGUF name of a layer and of the model maps to its HF name and back, and
 * names outside the map are refused (gguf_format.h). */
static void test_name_map(void)
{
    const char *pairs[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output.weight", "lm_head.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"blk.17.attn_k.bias", "model.layers.17.self_attn.k_proj.bias"},
        {"blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight"},
        {"blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char a[128], b[128];
        ZT_CHECK_MSG(zt_gguf_name_to_hf(pairs[i][0], a, sizeof a) == 0 && !strcmp(a, pairs[i][1]), "%s -> %s",
                     pairs[i][0], a);
        ZT_CHECK_MSG(zt_gguf_name_from_hf(pairs[i][1], b, sizeof b) == 0 && !strcmp(b, pairs[i][0]), "%s -> %s",
                     pairs[i][1], b);
    }
    char x[64];
    const char *bad[] = {"blk.01.attn_q.weight", "blk..attn_q.weight", "blk.1.attn_qq.weight", "rope_freqs.weight"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ZT_CHECK_MSG(zt_gguf_name_to_hf(bad[i], x, sizeof x) == -1, "%s accepted", bad[i]);
    ZT_CHECK(zt_gguf_name_to_hf("blk.123.attn_q.weight", x, 20) == -1); /* too long for out */
}

static int int_of(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valueint; }
/* A token id of the reference config; null (none) as -1. */
static int id_or_none(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void check_config(const zt_llama_config *c, const cJSON *want, const char *file)
{
    ZT_CHECK_MSG(!strcmp(c->model_type, cJSON_GetObjectItem(want, "model_type")->valuestring), "%s", file);
    ZT_CHECK(c->hidden_size == int_of(want, "hidden_size"));
    ZT_CHECK(c->intermediate_size == int_of(want, "intermediate_size"));
    ZT_CHECK(c->num_hidden_layers == int_of(want, "num_hidden_layers"));
    ZT_CHECK(c->num_attention_heads == int_of(want, "num_attention_heads"));
    ZT_CHECK(c->num_key_value_heads == int_of(want, "num_key_value_heads"));
    ZT_CHECK(c->head_dim == int_of(want, "head_dim"));
    ZT_CHECK(c->vocab_size == int_of(want, "vocab_size"));
    ZT_CHECK(c->max_position_embeddings == int_of(want, "max_position_embeddings"));
    ZT_CHECK_MSG(c->rms_norm_eps == cJSON_GetObjectItem(want, "rms_norm_eps")->valuedouble, "%.17g",
                 c->rms_norm_eps);
    ZT_CHECK_MSG(c->rope_theta == cJSON_GetObjectItem(want, "rope_theta")->valuedouble, "%.17g", c->rope_theta);
    ZT_CHECK(c->tie_word_embeddings == cJSON_IsTrue(cJSON_GetObjectItem(want, "tie_word_embeddings")));
}

/* Every parameter of the layout, read as the loader reads it, hashes to
 * transformers' digest; and the reference lists no parameter the layout lacks. */
static void check_tensors(const zt_gguf *g, const zt_llama_config *cfg, const cJSON *want)
{
    zt_layout lay;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_layout_build(&lay, cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(cJSON_GetArraySize(want) == lay.nparams, "%d reference tensors, layout has %d",
                 cJSON_GetArraySize(want), lay.nparams);
    const cJSON *t;
    cJSON_ArrayForEach(t, want)
    {
        const char *name = cJSON_GetArrayItem(t, 0)->valuestring;
        const cJSON *shape = cJSON_GetArrayItem(t, 1);
        int64_t rows = cJSON_GetArrayItem(shape, 0)->valueint;
        int64_t cols = cJSON_GetArraySize(shape) == 2 ? cJSON_GetArrayItem(shape, 1)->valueint : 0;
        ZT_CHECK_MSG(zt_layout_find(&lay, name) != NULL, "%s is not in the layout", name);
        size_t bytes = (size_t)rows * (size_t)(cols ? cols : 1) * 4;
        float *buf = zt_alloc(ZT_MEM_OTHER, bytes);
        int rc = zt_gguf_read_param(g, cfg, name, rows, cols, buf, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s: %s", name, err.msg);
        uint8_t dig[32];
        char hex[65];
        zt_sha256 s;
        zt_sha256_init(&s);
        zt_sha256_update(&s, buf, bytes);
        zt_sha256_final(&s, dig);
        zt_sha256_hex(dig, hex);
        ZT_CHECK_MSG(rc || !strcmp(hex, cJSON_GetArrayItem(t, 2)->valuestring), "%s: fp32 bytes differ from "
                     "transformers' (first value %.9g)", name, (double)buf[0]);
        zt_free(ZT_MEM_OTHER, buf, bytes);
    }
    zt_layout_free(&lay);
}

/* The tokenizer files converted from the metadata: ztrain's tokenizer loads them
 * and gives the ids the `tokenizers` package gives with transformers' GGUF
 * conversion, line by line; the special ids and the chat template are carried. */
static void check_tokenizer(const zt_gguf *g, const cJSON *ref)
{
    char dir[64];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_gguf_tok_") != NULL);
    zt_err err = {0};
    int bos = -2, eos = -2, pad = -2;
    int rc = zt_gguf_tokenizer_save(g, dir, &bos, &eos, &pad, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    const cJSON *cfg = cJSON_GetObjectItem(ref, "config");
    ZT_CHECK(bos == id_or_none(cfg, "bos_token_id") && eos == id_or_none(cfg, "eos_token_id") &&
             pad == id_or_none(cfg, "pad_token_id"));
    zt_tokenizer *t = NULL;
    if (rc == ZT_OK) {
        rc = zt_tok_load(dir, &t, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    }
    const cJSON *lines = cJSON_GetObjectItem(ref, "corpus"), *ids = cJSON_GetObjectItem(ref, "ids");
    ZT_CHECK(cJSON_GetArraySize(lines) >= 10 && cJSON_GetArraySize(lines) == cJSON_GetArraySize(ids));
    for (int i = 0; t && i < cJSON_GetArraySize(lines); i++) {
        const char *text = cJSON_GetArrayItem(lines, i)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(ids, i);
        zt_ids got = {0};
        ZT_CHECK(zt_tok_encode(t, text, strlen(text), 1, &got, &err) == ZT_OK);
        int same = (int)got.n == cJSON_GetArraySize(want);
        for (size_t k = 0; same && k < got.n; k++)
            same = got.v[k] == cJSON_GetArrayItem(want, (int)k)->valueint;
        ZT_CHECK_MSG(same, "line %d (%.40s...): %zu ids, transformers gives %d", i, text, got.n,
                     cJSON_GetArraySize(want));
        zt_ids_free(&got);
    }
    if (t) {
        ZT_CHECK(zt_tok_bos_id(t) == bos && zt_tok_eos_id(t) == eos && zt_tok_pad_id(t) == pad);
        zt_tok_free(t);
    }
    cJSON *tc = json_file(tmpdir_path(dir, "tokenizer_config.json"));
    zt_gguf_str tmpl = {0};
    ZT_CHECK(zt_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL, &err) == ZT_OK && tmpl.s);
    const cJSON *ct = cJSON_GetObjectItem(tc, "chat_template");
    ZT_CHECK_MSG(cJSON_IsString(ct) && tmpl.s && strlen(ct->valuestring) == tmpl.len &&
                     !memcmp(ct->valuestring, tmpl.s, tmpl.len), "chat template not carried");
    cJSON_Delete(tc);
    tmpdir_remove(dir);
}

static void check_file(const char *gguf_path, const char *ref_path, uint32_t version)
{
    cJSON *ref = json_file(ref_path);
    ZT_CHECK_MSG(ref != NULL, "cannot read %s", ref_path);
    zt_gguf *g = NULL;
    zt_err err = {0};
    int rc = zt_gguf_open(gguf_path, &g, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    if (ref && rc == ZT_OK) {
        zt_llama_config cfg;
        ZT_CHECK(version == 0 || zt_gguf_version(g) == version);
        rc = zt_gguf_config(g, &cfg, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
        if (rc == ZT_OK) {
            check_config(&cfg, cJSON_GetObjectItem(ref, "config"), gguf_path);
            check_tensors(g, &cfg, cJSON_GetObjectItem(ref, "tensors"));
            check_tokenizer(g, ref);
        }
    }
    zt_gguf_close(g);
    cJSON_Delete(ref);
}

/* BF16, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, F16 and F32 in one GGUF v3 file;
 * GQA (k un-permuted with the KV heads); tied embeddings. */
static void test_mixed_types(void)
{
    check_file("tests/fixtures/gguf/mixed.gguf", "tests/fixtures/gguf/mixed.json", 3);
}

/* GGUF v2, two layers, an untied output.weight in Q8_0. */
static void test_untied_v2(void)
{
    check_file("tests/fixtures/gguf/untied_v2.gguf", "tests/fixtures/gguf/untied_v2.json", 2);
}

/* A SentencePiece ("llama") tokenizer without merges: they are recovered from the
 * scores as transformers recovers them; GQA with one KV head. */
static void test_spm(void)
{
    check_file("tests/fixtures/gguf/spm.gguf", "tests/fixtures/gguf/spm.json", 3);
}

/* Architecture qwen2: q/k/v biases, rows in HF's order (no un-permutation). */
static void test_qwen2(void)
{
    check_file("tests/fixtures/gguf/qwen2.gguf", "tests/fixtures/gguf/qwen2.json", 3);
}

/* The real model: must be installed (scripts/setup.sh), else this fails. */
static void test_smollm2(void)
{
    const char *p = getenv("ZT_SMOLLM2_GGUF");
    if (!p || !*p)
        p = SMOLLM2_DEFAULT;
    FILE *f = fopen(p, "rb");
    ZT_CHECK_MSG(f != NULL, "SmolLM2-135M-Instruct GGUF not found at %s: install it with scripts/setup.sh "
                 "(or point ZT_SMOLLM2_GGUF at it)", p);
    if (!f)
        return;
    fclose(f);
    check_file(p, "tests/fixtures/gguf/smollm2.json", 3);
}


/* ---- hostile files ------------------------------------------------------------
 * A small valid file built here field by field (two keys, two F32 tensors), then
 * one field at a time made wrong: each is refused with ZT_EINPUT, and the
 * message names the file and the field. */
typedef struct hbuf {
    uint8_t b[4096];
    size_t n;
} hbuf;

static void put(hbuf *h, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        h->b[h->n++] = (uint8_t)(v >> (8 * i));
}
static void put_str(hbuf *h, const char *s, uint64_t len)
{
    put(h, len, 8);
    memcpy(h->b + h->n, s, strlen(s));
    h->n += strlen(s);
}

/* The knobs a case turns; zero values give the valid file. */
typedef struct hostile {
    uint32_t magic, version, key_type, ttype, ndims;
    uint64_t ntensors, nkv, key_len, arr_count, dim0, dim1, off_b;
    const char *key;
    size_t cut; /* keep only this many bytes (0: all) */
} hostile;

static size_t build(hbuf *h, const hostile *x)
{
    h->n = 0;
    put(h, x->magic ? x->magic : 0x46554747u, 4);
    put(h, x->version ? x->version : 3, 4);
    put(h, x->ntensors ? x->ntensors : 2, 8);
    put(h, x->nkv ? x->nkv : 2, 8);
    const char *key = x->key ? x->key : "general.architecture";
    put_str(h, key, x->key_len ? x->key_len : strlen(key));
    put(h, x->key_type ? x->key_type : ZT_GGUF_STRING, 4);
    put_str(h, "llama", 5);
    put_str(h, "some.list", 9);
    put(h, ZT_GGUF_ARRAY, 4);
    put(h, ZT_GGUF_UINT32, 4);
    put(h, x->arr_count ? x->arr_count : 2, 8);
    put(h, 7, 4), put(h, 8, 4);
    for (int t = 0; t < 2; t++) {
        put_str(h, t ? "b" : "a", 1);
        put(h, t == 0 && x->ndims ? x->ndims : 2, 4);
        put(h, t == 0 && x->dim0 ? x->dim0 : 4, 8);
        put(h, t == 0 && x->dim1 ? x->dim1 : 2, 8);
        put(h, t == 0 && x->ttype ? x->ttype : ZT_GGML_F32, 4);
        put(h, t == 0 ? 0 : x->off_b ? x->off_b : 32, 8);
    }
    while (h->n % 32)
        h->b[h->n++] = 0;
    memset(h->b + h->n, 0, 64);
    h->n += 64;
    return x->cut ? x->cut : h->n;
}

static void expect_refusal(const char *dir, const char *name, const hostile *x, const char *field)
{
    hbuf h;
    size_t n = build(&h, x);
    const char *path = tmpdir_path(dir, name);
    write_bytes(path, h.b, n);
    zt_gguf *g = NULL;
    zt_err err = {0};
    int rc = zt_gguf_open(path, &g, &err);
    ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, path) && strstr(err.msg, field),
                 "%s: rc %d, message \"%s\" (expected one naming the file and \"%s\")", name, rc, err.msg, field);
    zt_gguf_close(g);
}

static void test_hostile_files(void)
{
    char dir[64];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_gguf_bad_") != NULL);
    hbuf h;
    hostile ok = {0};
    size_t full = build(&h, &ok);
    const char *path = tmpdir_path(dir, "ok.gguf");
    write_bytes(path, h.b, full);
    zt_gguf *g = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_gguf_open(path, &g, &err) == ZT_OK, "the valid file: %s", err.msg);
    ZT_CHECK(g && zt_gguf_tensor_count(g) == 2 && zt_gguf_tensor_find(g, "b")->data - zt_gguf_tensor_find(g, "a")->data == 32);
    zt_gguf_close(g);
    const struct { const char *name; hostile x; const char *field; } cases[] = {
        {"magic.gguf", {.magic = 0x46554746u}, "magic"},
        {"v1.gguf", {.version = 1}, "version 1"},
        {"bigendian.gguf", {.version = 0x03000000u}, "version"},
        {"ntensors.gguf", {.ntensors = UINT64_C(1) << 60}, "tensor_count"},
        {"nkv.gguf", {.nkv = UINT64_C(1) << 40}, "kv_count"},
        {"keylen.gguf", {.key_len = UINT64_C(1) << 40}, "key 0"},
        {"keyutf8.gguf", {.key = "general.\xff\xfe"}, "not valid UTF-8"},
        {"keytype.gguf", {.key_type = 13}, "unknown value type"},
        {"arrcount.gguf", {.arr_count = UINT64_C(1) << 61}, "some.list"},
        {"ttype.gguf", {.ttype = 99}, "unknown tensor type 99"},
        {"ndims.gguf", {.ndims = 5}, "5 dimensions"},
        {"overflow.gguf", {.dim0 = UINT64_C(1) << 32, .dim1 = UINT64_C(1) << 32}, "overflows"},
        {"zero_dim.gguf", {.dim1 = 0xffffffffffffffffu}, "tensor \"a\""},
        {"block.gguf", {.ttype = ZT_GGML_Q8_0}, "not a multiple of Q8_0's block"},
        {"offset.gguf", {.off_b = UINT64_C(1) << 40}, "offset out of range"},
        {"misaligned.gguf", {.off_b = 36}, "not a multiple of the alignment"},
        {"overlap.gguf", {.off_b = 0}, "overlap"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hostile x = cases[i].x;
        if (!strcmp(cases[i].name, "overlap.gguf"))
            x.dim1 = 4, x.off_b = 0; /* "a" is 64 bytes from 0, "b" from 0 too: build()'s 0 means 32 */
        expect_refusal(dir, cases[i].name, &x, cases[i].field);
    }
    /* every truncation of the valid file is refused, naming the file */
    for (size_t cut = 1; cut < full; cut++) {
        hostile x = {.cut = cut};
        expect_refusal(dir, "cut.gguf", &x, cut < 24 ? "too short" : "truncated");
    }
    tmpdir_remove(dir);
}

int main(void)
{
    ZT_RUN(test_name_map);
    ZT_RUN(test_mixed_types);
    ZT_RUN(test_untied_v2);
    ZT_RUN(test_spm);
    ZT_RUN(test_qwen2);
    ZT_RUN(test_smollm2);
    ZT_RUN(test_hostile_files);
    ZT_TEST_MAIN_END();
}
