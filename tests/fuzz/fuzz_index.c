/* fuzz_index.c — zt_weights_open on a directory whose model.safetensors.index.json
 * is arbitrary bytes, beside one valid shard (shard.safetensors, tensor "w").
 * Properties: a refusal is exit 2 naming a path inside the directory; an accepted
 * index finds every tensor it lists by name, in a file of the directory. */
#include "fuzz.h"

#include "../../src/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int shard_written;
    zt_err err = {0};
    if (!shard_written) { /* one F32 tensor "w" of shape [2] */
        static const uint8_t shard[] = "\x40\0\0\0\0\0\0\0"
                                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}      "
                                       "\0\0\x80\x3f\0\0\0\x40";
        fuzz_write("shard.safetensors", shard, sizeof shard - 1);
        shard_written = 1;
    }
    fuzz_write("model.safetensors.index.json", data, size);
    const char *dir = fuzz_dir();
    zt_weights *w = NULL;
    int rc = zt_weights_open(dir, &w, &err);
    if (rc) {
        fuzz_refusal(rc, &err, dir);
        return 0;
    }
    int n = zt_weights_count(w);
    for (int i = 0; i < n; i++) {
        const zt_st_tensor *t = zt_weights_get(w, i);
        const char *file = NULL;
        FUZZ_REQUIRE(zt_weights_find(w, t->name, &file) == t, "%s: not found by name", t->name);
        FUZZ_REQUIRE(file && !strncmp(file, dir, strlen(dir)), "%s: in %s, outside %s", t->name,
                     file ? file : "(null)", dir);
    }
    zt_weights_close(w);
    return 0;
}
