/* test_chat_data.c — TRL's conversational records through the chat template
 * (src/text/chat_data.c) against TRL's own SFTTrainer tokenization
 * (tests/fixtures/chat_data, tools/make_chat_data_fixture.py): the same ids, and
 * the same tokens left in the loss, for messages records and conversational
 * prompt/completion records, with assistant_only_loss off and on; a template
 * without {% generation %} markers is refused for assistant_only_loss. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/json.h"
#include "../src/core/mem.h"
#include "../src/text/chat_data.h"
#include "test.h"

#define DIR "tests/fixtures/chat_data"

/* Encode file with ztrain and compare with TRL's rows, all records end to end. */
static int same_as_trl(const zt_tokenizer *t, const zt_chat *chat, const char *file, const cJSON *rows, int assistant_only)
{
    char path[256];
    zt_text_file f;
    zt_err err = {0};
    zt_ids ids = {0}, mask = {0};
    snprintf(path, sizeof path, DIR "/%s", file);
    if (zt_text_file_open(path, &f, &err))
        return 0;
    int rc = zt_chat_data_encode(t, chat, path, f.data, f.len, assistant_only, 1, &ids, &mask, &err);
    zt_text_file_close(&f);
    ZT_CHECK_MSG(rc == 0, "%s", err.msg);
    size_t at = 0, bad = 0, masked = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows)
    {
        const cJSON *id, *m = cJSON_GetObjectItem(r, "mask")->child;
        cJSON_ArrayForEach(id, cJSON_GetObjectItem(r, "input_ids"))
        {
            bad += at >= ids.n || ids.v[at] != id->valueint || mask.v[at] != m->valueint;
            masked += m->valueint;
            at++;
            m = m->next;
        }
    }
    int ok = !rc && at == ids.n && bad == 0;
    if (!ok)
        fprintf(stderr, "  %s assistant_only=%d: %zu ids (TRL %zu), %zu differ\n", file, assistant_only, ids.n, at,
                bad);
    /* the check means something only if TRL's mask leaves some tokens out */
    ZT_CHECK(assistant_only == 0 || masked < at);
    zt_ids_free(&ids);
    zt_ids_free(&mask);
    return ok;
}

static void test_ids_and_masks_equal_trl(void)
{
    zt_json doc;
    zt_err err = {0};
    zt_tokenizer *t = NULL;
    zt_chat *chat = NULL;
    ZT_CHECK(zt_json_parse_file(DIR "/expected.json", 16u << 20, &doc, &err) == 0);
    ZT_CHECK_MSG(zt_tok_load(DIR, &t, &err) == 0 && zt_chat_load(DIR, &chat, &err) == 0, "%s", err.msg);
    if (!t || !chat || !doc.root)
        return;
    int files = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(doc.root, "files"))
    {
        ZT_CHECK(same_as_trl(t, chat, f->string, cJSON_GetObjectItem(f, "all"), 0));
        ZT_CHECK(same_as_trl(t, chat, f->string, cJSON_GetObjectItem(f, "assistant_only"), 1));
        files++;
    }
    ZT_CHECK(files == 2);
    zt_chat_free(chat);
    zt_tok_free(t);
    zt_json_free(&doc);
}

/* SmolLM2's template marks nothing: assistant_only_loss is refused, as TRL does. */
static void test_template_without_generation_refused(void)
{
    zt_tokenizer *t = NULL;
    zt_chat *chat = NULL;
    zt_err err = {0};
    zt_ids ids = {0}, mask = {0};
    const char *rec = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n";
    ZT_CHECK(zt_tok_load("tests/fixtures/generate_chat", &t, &err) == 0);
    ZT_CHECK(zt_chat_load("tests/fixtures/generate_chat", &chat, &err) == 0);
    if (!t || !chat)
        return;
    ZT_CHECK(zt_chat_data_kind(rec, strlen(rec)) == ZT_CHAT_MESSAGES);
    ZT_CHECK(zt_chat_data_encode(t, chat, "m.jsonl", rec, strlen(rec), 1, 1, &ids, &mask, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "no {% generation %} markers"), "%s", err.msg);
    ZT_CHECK(zt_chat_data_encode(t, chat, "m.jsonl", rec, strlen(rec), 0, 1, &ids, &mask, &err) == 0);
    ZT_CHECK(ids.n > 0 && ids.n == mask.n);
    zt_ids_free(&ids);
    zt_ids_free(&mask);
    zt_chat_free(chat);
    zt_tok_free(t);
}

int main(void)
{
    ZT_RUN(test_ids_and_masks_equal_trl);
    ZT_RUN(test_template_without_generation_refused);
    ZT_TEST_MAIN_END();
}
