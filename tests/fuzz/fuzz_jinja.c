/* fuzz_jinja.c — the chat-template renderer (src/text/jinja.h) on arbitrary
 * template text.  Properties: compiling either succeeds or is a refusal (exit 2)
 * naming the template; a compiled template renders a fixed conversation, with
 * and without add_generation_prompt, either to text or to a refusal naming the
 * template (never a crash or a hang: nesting, statements and sizes are bounded);
 * two renders of the same input agree byte for byte; {% generation %} spans lie
 * inside the text; and every byte the renderer allocated is given back. */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "../../src/core/mem.h"
#include "../../src/text/jinja.h"

static const char conversation[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"héllo {{ x }}\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>ok</think> Hi!\"},"
    "{\"role\": \"user\", \"content\": \"\", \"n\": 3, \"f\": 0.5, \"l\": [1, null, true]}]}";

static void render_twice(const zt_jinja *t, cJSON *vars, int gen)
{
    zt_jinja_out a, b;
    zt_err e1 = {0}, e2 = {0};
    cJSON_AddBoolToObject(vars, "add_generation_prompt", gen);
    int rc = zt_jinja_render(t, vars, 86400, &a, &e1);
    int rc2 = zt_jinja_render(t, vars, 86400, &b, &e2);
    cJSON_DeleteItemFromObject(vars, "add_generation_prompt");
    FUZZ_REQUIRE(rc == rc2, "two renders: %d then %d", rc, rc2);
    if (rc) {
        fuzz_refusal(rc, &e1, "t.jinja");
        FUZZ_REQUIRE(!strcmp(e1.msg, e2.msg), "two refusals differ: %s / %s", e1.msg, e2.msg);
        return;
    }
    FUZZ_REQUIRE(a.len == b.len && !memcmp(a.text, b.text, a.len), "two renders differ");
    FUZZ_REQUIRE(a.text[a.len] == 0, "the text is not NUL-terminated");
    for (size_t i = 0; i < a.ngen; i++)
        FUZZ_REQUIRE(a.gen[i].start <= a.gen[i].end && a.gen[i].end <= a.len, "a generation span outside the text");
    zt_jinja_out_free(&a);
    zt_jinja_out_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t before = zt_mem_current(ZT_MEM_OTHER);
    zt_jinja *t = NULL;
    zt_err err = {0};
    int rc = zt_jinja_compile("t.jinja", (const char *)data, size, &t, &err);
    if (rc) {
        fuzz_refusal(rc, &err, "t.jinja");
    } else {
        cJSON *vars = cJSON_Parse(conversation);
        FUZZ_REQUIRE(vars != NULL, "the fixed conversation does not parse");
        render_twice(t, vars, 0);
        render_twice(t, vars, 1);
        cJSON_Delete(vars);
        zt_jinja_free(t);
    }
    FUZZ_REQUIRE(zt_mem_current(ZT_MEM_OTHER) == before, "%zu bytes not given back",
                 zt_mem_current(ZT_MEM_OTHER) - before);
    return 0;
}
