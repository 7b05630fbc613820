/* test_tokenizer.c — ztrain's tokenizer against ids made by the `tokenizers`
 * package (tools/make_tokenizer_fixtures.py) for three small tokenizers it
 * trained: GPT-2-style and Llama-3-style byte-level BPE and Llama-2-style
 * SentencePiece BPE, on multilingual text (accents, CJK, emoji, mixed white
 * space, CRLF, inline special tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../src/core/mem.h"
#include "../src/text/tokenizer.h"
#include "test.h"
#include "tmpdir.h"
#include "tok_fixture.h"

static const char *families[] = {"gpt2", "llama3", "llama2"};

static zt_tokenizer *load(const char *family)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", family);
    zt_tokenizer *t = NULL;
    zt_err err = {0};
    int rc = zt_tok_load(dir, &t, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s: %s", family, err.msg);
    return t;
}

/* Every case's ids equal the fixture's, with one thread and with four threads
 * splitting the text into pieces of about 40 bytes; decoding gives the text
 * `tokenizers` decodes. */
static void check_family(const char *family)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", family);
    zt_tokenizer *t;
    cJSON *exp;
    if (!tok_fixture_open(dir, &t, &exp))
        return;
    ZT_CHECK(zt_tok_vocab_size(t) == cJSON_GetObjectItem(exp, "vocab_size")->valueint);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases"))
    {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(c, "ids");
        int n = cJSON_GetArraySize(ids);
        for (int pass = 0; pass < 2; pass++) {
            zt_ids got = {0};
            zt_err err = {0};
            int rc = pass == 0 ? zt_tok_encode(t, text, strlen(text), 1, &got, &err)
                               : zt_tok_encode_chunked(t, text, strlen(text), 4, 40, &got, &err);
            ZT_CHECK_MSG(rc == ZT_OK, "%s case %d: %s", family, k, err.msg);
            int same = (int)got.n == n;
            int first_diff = -1;
            for (int i = 0; same && i < n; i++)
                if (got.v[i] != cJSON_GetArrayItem(ids, i)->valueint)
                    same = 0, first_diff = i;
            ZT_CHECK_MSG(same, "%s case %d (%s): %zu ids, expected %d; first difference at %d", family, k,
                         pass ? "4 threads" : "1 thread", got.n, n, first_diff);
            if (pass == 0 && same) {
                char *dec = NULL;
                size_t dl = 0;
                rc = zt_tok_decode(t, got.v, got.n, 0, &dec, &dl, &err);
                const char *want = cJSON_GetObjectItem(c, "decoded")->valuestring;
                ZT_CHECK_MSG(rc == ZT_OK && dl == strlen(want) && !memcmp(dec, want, dl), "%s case %d: decoded '%s'",
                             family, k, dec ? dec : "(null)");
                free(dec);
            }
            zt_ids_free(&got);
        }
        k++;
    }
    ZT_CHECK(k > 20);
    cJSON_Delete(exp);
    zt_tok_free(t);
}

static void test_gpt2_byte_level_matches_tokenizers(void) { check_family("gpt2"); }
static void test_llama3_byte_level_matches_tokenizers(void) { check_family("llama3"); }
static void test_llama2_sentencepiece_matches_tokenizers(void) { check_family("llama2"); }
/* the same vocabularies with GPT-2's add_prefix_space, and with the Metaspace
 * pre-tokenizer (prepend_scheme first; always with split) of newer conversions */
static void test_gpt2_add_prefix_space_matches_tokenizers(void) { check_family("gpt2_prefix"); }
static void test_metaspace_first_matches_tokenizers(void) { check_family("llama2_metaspace_first"); }
static void test_metaspace_split_matches_tokenizers(void) { check_family("llama2_metaspace_split"); }
/* a tokenizer `ztrain tokenizer train` wrote: decoding gives the text back */
static void test_ztrain_trained_matches_tokenizers(void) { check_family("ztrain_trained"); }

/* eos/bos come from tokenizer_config.json; special tokens are flagged. */
static void test_special_ids(void)
{
    static const char *eos[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (int f = 0; f < 3; f++) {
        zt_tokenizer *t = load(families[f]);
        if (!t)
            continue;
        int32_t id = zt_tok_eos_id(t);
        ZT_CHECK(id >= 0 && id == zt_tok_token_id(t, eos[f]));
        ZT_CHECK(zt_tok_is_special(t, id));
        ZT_CHECK(zt_tok_bos_id(t) >= 0);
        zt_tok_free(t);
    }
}

/* Text that is not UTF-8 is refused with its byte offset. */
static void test_invalid_utf8_refused(void)
{
    zt_tokenizer *t = load("gpt2");
    if (!t)
        return;
    zt_ids ids = {0};
    zt_err err = {0};
    int rc = zt_tok_encode(t, "ab\xff" "c", 4, 1, &ids, &err);
    ZT_CHECK(rc == ZT_EINPUT && strstr(err.msg, "byte offset 2"));
    zt_ids_free(&ids);
    zt_tok_free(t);
}

/* A tokenizer.json with something unsupported is refused, naming the JSON path. */
static void test_unsupported_refused_with_path(void)
{
    static const struct { const char *from, *to, *path; } edits[] = {
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type"},
        {"\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"", "pre_tokenizer.pretokenizers[0].behavior"},
        {"\\\\p{N}{1,3}", "\\\\p{N}{1,4}", "pre_tokenizer.pretokenizers[0].pattern"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}", "normalizer"},
        {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout"},
    };
    char *src = NULL;
    FILE *f = fopen("tests/fixtures/tokenizers/llama3/tokenizer.json", "rb");
    ZT_CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    src = calloc(1, (size_t)n + 1);
    ZT_CHECK(fread(src, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    char dir[256];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_tok_") != NULL);
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        char *at = strstr(src, edits[e].from);
        ZT_CHECK_MSG(at != NULL, "fixture lacks %s", edits[e].from);
        if (!at)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        FILE *o = fopen(path, "wb");
        fwrite(src, 1, (size_t)(at - src), o);
        fputs(edits[e].to, o);
        fputs(at + strlen(edits[e].from), o);
        fclose(o);
        zt_tokenizer *t = NULL;
        zt_err err = {0};
        int rc = zt_tok_load(dir, &t, &err);
        ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, edits[e].path), "edit %zu: rc %d, '%s'", e, rc, err.msg);
        zt_tok_free(t);
    }
    tmpdir_remove(dir);
    free(src);
}

/* The tokenizer and the encoder's per-thread state are accounted memory, all
 * returned when freed. */
static void test_memory_accounted_and_returned(void)
{
    size_t before = zt_mem_current(ZT_MEM_OTHER);
    for (int f = 0; f < 3; f++) {
        zt_tokenizer *t = load(families[f]);
        if (!t)
            continue;
        ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) > before);
        static const char text[] = "Hello world, naïve café 日本語 🙂 <s> and </s>\n\nmore text here\n";
        zt_ids ids = {0};
        zt_err err = {0};
        ZT_CHECK(zt_tok_encode_chunked(t, text, sizeof text - 1, 3, 8, &ids, &err) == ZT_OK && ids.n > 0);
        zt_ids_free(&ids);
        zt_tok_free(t);
    }
    ZT_CHECK_MSG(zt_mem_current(ZT_MEM_OTHER) == before, "%zu bytes still accounted", zt_mem_current(ZT_MEM_OTHER) - before);
}

int main(void)
{
    ZT_RUN(test_gpt2_byte_level_matches_tokenizers);
    ZT_RUN(test_llama3_byte_level_matches_tokenizers);
    ZT_RUN(test_llama2_sentencepiece_matches_tokenizers);
    ZT_RUN(test_gpt2_add_prefix_space_matches_tokenizers);
    ZT_RUN(test_metaspace_first_matches_tokenizers);
    ZT_RUN(test_metaspace_split_matches_tokenizers);
    ZT_RUN(test_ztrain_trained_matches_tokenizers);
    ZT_RUN(test_special_ids);
    ZT_RUN(test_invalid_utf8_refused);
    ZT_RUN(test_unsupported_refused_with_path);
    ZT_RUN(test_memory_accounted_and_returned);
    ZT_TEST_MAIN_END();
}
