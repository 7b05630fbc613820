/* fuzz_tokens.c — zt_tokens_load on arbitrary bytes as .npy, .bin or .txt (the
 * first byte picks which).  Properties: a refusal is exit 2 naming the file; an
 * accepted stream is non-empty with ids in [0, 2^31) and max_id its maximum;
 * written back as .npy (zt_tokens_write_npy) it reads as the same ids. */
#include "fuzz.h"

#include "../../src/io/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *names[3] = {"t.npy", "t.bin", "t.txt"};
    const char *path = fuzz_write(names[data[0] % 3], data + 1, size - 1);
    zt_err err = {0};
    zt_tokens t = {0};
    int rc = zt_tokens_load(path, &t, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    FUZZ_REQUIRE(t.n > 0, "accepted an empty stream");
    int32_t mx = 0;
    for (size_t i = 0; i < t.n; i++) {
        FUZZ_REQUIRE(t.ids[i] >= 0, "id %d at %zu is negative", t.ids[i], i);
        if (t.ids[i] > mx)
            mx = t.ids[i];
    }
    FUZZ_REQUIRE(mx == t.max_id, "max_id %d, the largest id is %d", t.max_id, mx);
    char back[256];
    snprintf(back, sizeof back, "%s/back.npy", fuzz_dir());
    FUZZ_REQUIRE(zt_tokens_write_npy(back, t.ids, t.n, &err) == ZT_OK, "writing back failed: %s", err.msg);
    zt_tokens u = {0};
    FUZZ_REQUIRE(zt_tokens_load(back, &u, &err) == ZT_OK, "reading back failed: %s", err.msg);
    FUZZ_REQUIRE(u.n == t.n && !memcmp(u.ids, t.ids, t.n * sizeof *t.ids), "the ids changed in the round trip");
    zt_tokens_free(&u);
    zt_tokens_free(&t);
    remove(back);
    return 0;
}
