/* test_post_processor.c — document boundaries against `tokenizers` and TRL.
 *
 * tests/fixtures/tokenizers/post/ (tools/make_post_processor_fixtures.py) holds
 * three tokenizers with the post_processors real models ship (Llama 2's BOS,
 * Llama 3's Sequence[ByteLevel, BOS], a BOS-and-EOS template whose EOS is the
 * eos token) and the ids the `tokenizers` package gives with and without
 * add_special_tokens.  zt_text_encode_document must give exactly those, and
 * the records joined as one stream with eos after each (never doubled). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../src/text/post_processor.h"
#include "../src/text/text_data.h"
#include "test.h"
#include "tok_fixture.h"

static int same_ids(const zt_ids *got, const cJSON *want)
{
    if ((int)got->n != cJSON_GetArraySize(want))
        return 0;
    for (size_t i = 0; i < got->n; i++)
        if (got->v[i] != cJSON_GetArrayItem(want, (int)i)->valueint)
            return 0;
    return 1;
}

/* Each case alone (no eos: the package's encode), then the records as a stream. */
static void check_fixture(const char *name)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/post/%s", name);
    zt_tokenizer *t;
    cJSON *exp;
    zt_err err = {0};
    if (!tok_fixture_open(dir, &t, &exp))
        return;
    ZT_CHECK(zt_tok_eos_id(t) == cJSON_GetObjectItem(exp, "eos_id")->valueint);
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        for (int special = 0; special < 2; special++) {
            zt_text_opts o = {"text", special, 0};
            zt_ids got = {0};
            ZT_CHECK(zt_text_encode_document(t, &o, text, strlen(text), 1, &got, &err) == ZT_OK);
            ZT_CHECK_MSG(same_ids(&got, cJSON_GetObjectItem(c, special ? "special" : "plain")),
                         "%s case %d add_special_tokens=%d: other ids than tokenizers'", name, k, special);
            zt_ids_free(&got);
        }
        k++;
    }
    for (int special = 0; special < 2; special++) {
        zt_text_opts o = {"text", special, 1};
        zt_ids got = {0};
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "records"))
            ZT_CHECK(zt_text_encode_document(t, &o, c->valuestring, strlen(c->valuestring), 1, &got, &err) == ZT_OK);
        ZT_CHECK_MSG(same_ids(&got, cJSON_GetObjectItem(exp, special ? "stream" : "stream_plain")),
                     "%s: the records' stream (add_special_tokens=%d) differs", name, special);
        zt_ids_free(&got);
    }
    zt_tok_free(t);
    cJSON_Delete(exp);
}

static void test_llama2_bos(void) { check_fixture("llama2_bos"); }
static void test_llama3_sequence_bos(void) { check_fixture("llama3_bos"); }
static void test_gpt2_bos_eos_not_doubled(void) { check_fixture("gpt2_bos_eos"); }

/* The start-up line says what is added, and each flag takes its part away. */
static void test_describe(void)
{
    zt_tokenizer *t = NULL;
    zt_err err = {0};
    ZT_CHECK(zt_tok_load("tests/fixtures/tokenizers/post/llama2_bos", &t, &err) == ZT_OK);
    if (!t)
        return;
    char line[400];
    zt_text_opts on = ZT_TEXT_OPTS_DEFAULTS, off = {"text", 0, 0};
    zt_text_describe_documents(t, &on, line, sizeof line);
    ZT_CHECK_MSG(strstr(line, "[1 <ids>]") && strstr(line, "eos 2 after it"), "%s", line);
    zt_text_describe_documents(t, &off, line, sizeof line);
    ZT_CHECK_MSG(strstr(line, "[<ids>]") && strstr(line, "--add_special_tokens false") &&
                 strstr(line, "--eos_between_documents false"), "%s", line);
    zt_tok_free(t);
}

/* Malformed templates are refused with the JSON path; an unknown processor
 * only where special tokens are asked for. */
static void test_refusals(void)
{
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}}],"
         "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}}",
         "no sequence \"A\""},
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\",\"type_id\":0}},"
         "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{}}",
         "\"<x>\" is not in special_tokens"},
        {"{\"type\":\"Sequence\",\"processors\":{}}", "post_processor.processors: expected a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i].json);
        zt_post_processor pp;
        zt_err err = {0};
        ZT_CHECK(zt_post_processor_load(j, "tokenizer.json", &pp, &err) == ZT_EINPUT);
        ZT_CHECK_MSG(strstr(err.msg, bad[i].want) != NULL, "%s", err.msg);
        cJSON_Delete(j);
    }
    cJSON *j = cJSON_Parse("{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",1],\"cls\":[\"[CLS]\",0]}");
    zt_post_processor pp;
    zt_err err = {0};
    ZT_CHECK(zt_post_processor_load(j, "tokenizer.json", &pp, &err) == ZT_OK);
    ZT_CHECK_MSG(strstr(pp.unsupported, "BertProcessing") != NULL, "%s", pp.unsupported);
    cJSON_Delete(j);
}

int main(void)
{
    ZT_RUN(test_llama2_bos);
    ZT_RUN(test_llama3_sequence_bos);
    ZT_RUN(test_gpt2_bos_eos_not_doubled);
    ZT_RUN(test_describe);
    ZT_RUN(test_refusals);
    ZT_TEST_MAIN_END();
}
