/* fuzz_jsonl.c — JSON Lines records (text/records.h) on arbitrary bytes: the
 * documents of field "text", or (first byte odd) TRL's prompt/completion pairs.
 * Properties: a refusal is exit 2 naming the file; every accepted value is valid
 * UTF-8 and lies inside the input (a string without escapes) or was decoded from
 * it; an accepted file has at least one record; no line with a key twice is
 * accepted (issue 44). */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "../../src/core/json.h"
#include "../../src/core/text.h"
#include "../../src/text/records.h"

static long seen;

static int on_text(void *ctx, const char *text, size_t len, zt_err *err)
{
    (void)ctx, (void)err;
    FUZZ_REQUIRE(zt_utf8_invalid_at((const unsigned char *)text, len) == len, "a record's text is not UTF-8");
    seen++;
    return ZT_OK;
}

static int on_pair(void *ctx, const char *p, size_t pl, const char *c, size_t cl, zt_err *err)
{
    return on_text(ctx, p, pl, err) ? ZT_EFAIL : on_text(ctx, c, cl, err);
}

/* No line of data[0..len) that cJSON parses to an object repeats a key. */
static void no_duplicates(const uint8_t *data, size_t len)
{
    for (size_t pos = 0; pos < len;) {
        const uint8_t *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        char *line = malloc(end - pos + 1);
        FUZZ_REQUIRE(line != NULL, "out of memory");
        memcpy(line, data + pos, end - pos);
        line[end - pos] = 0;
        cJSON *o = cJSON_Parse(line);
        int oom = 0;
        FUZZ_REQUIRE(!o || !zt_json_duplicate_key(o, &oom), "accepted a line with a key twice: %s", line);
        cJSON_Delete(o);
        free(line);
        pos = end + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *path = fuzz_write("r.jsonl", data + 1, size - 1);
    zt_err err = {0};
    seen = 0;
    const char *text = (const char *)data + 1;
    int rc = data[0] & 1 ? zt_records_each_pair(path, text, size - 1, on_pair, NULL, &err)
                         : zt_records_each(path, text, size - 1, "text", on_text, NULL, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    FUZZ_REQUIRE(seen > 0, "accepted a file without records");
    no_duplicates(data + 1, size - 1);
    return 0;
}
