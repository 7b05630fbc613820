/* tok_fixture.h — a fixture tokenizer directory (tests/fixtures/tokenizers/...)
 * and its expected.json, as the tokenizer tests read them. */
#ifndef ZT_TOK_FIXTURE_H
#define ZT_TOK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "../src/text/tokenizer.h"
#include "test.h"

static inline cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    cJSON *j = buf && got == (size_t)n ? cJSON_ParseWithLength(buf, (size_t)n) : NULL;
    free(buf);
    return j;
}

/* Load the tokenizer in dir and its expected.json; 0 (both freed, a check
 * failed) unless both load. */
static inline int tok_fixture_open(const char *dir, zt_tokenizer **t, cJSON **exp)
{
    char path[512];
    zt_err err = {0};
    snprintf(path, sizeof path, "%s/expected.json", dir);
    *t = NULL;
    ZT_CHECK_MSG(zt_tok_load(dir, t, &err) == ZT_OK, "%s: %s", dir, err.msg);
    *exp = read_json(path);
    ZT_CHECK_MSG(*exp != NULL, "cannot read %s", path);
    if (*t && *exp)
        return 1;
    zt_tok_free(*t);
    cJSON_Delete(*exp);
    return 0;
}

#endif
