/* fuzz_tokenizer.c — tokenizer.json (text/tokenizer.h) on arbitrary bytes.
 * Properties: a refusal is exit 2 naming the file; an accepted tokenizer has a
 * vocabulary, encodes a fixed multilingual text to ids inside it, and decodes
 * those ids without error (the ids it made are its own). */
#include "fuzz.h"

#include "../../src/text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("tokenizer.json", data, size);
    zt_err err = {0};
    zt_tokenizer *t = NULL;
    int rc = zt_tok_load_file(path, NULL, &t, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    int V = zt_tok_vocab_size(t);
    FUZZ_REQUIRE(V > 0, "accepted a tokenizer without a vocabulary");
    static const char text[] = "Hello, world! 123 w\xc3\xa9lt \xe6\x97\xa5\xe6\x9c\xac  \n\ttabs <s> end";
    zt_ids ids = {0};
    rc = zt_tok_encode(t, text, sizeof text - 1, 1, &ids, &err);
    /* a vocabulary may lack a byte's token (no byte fallback): a refusal then, never a bad id */
    if (rc == ZT_OK) {
        for (size_t i = 0; i < ids.n; i++)
            FUZZ_REQUIRE(ids.v[i] >= 0 && ids.v[i] < V, "id %d at %zu outside the vocabulary of %d", ids.v[i], i, V);
        char *out = NULL;
        size_t len = 0;
        FUZZ_REQUIRE(zt_tok_decode(t, ids.v, ids.n, 0, &out, &len, &err) == ZT_OK, "its own ids do not decode: %s",
                     err.msg);
        free(out);
    } else {
        FUZZ_REQUIRE(rc == ZT_EINPUT, "encoding failed other than as bad input: %s", err.msg);
    }
    zt_ids_free(&ids);
    zt_tok_free(t);
    return 0;
}
