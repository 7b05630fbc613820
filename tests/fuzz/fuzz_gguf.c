/* fuzz_gguf.c — zt_gguf_open on arbitrary bytes, then what a load does with an
 * accepted file (config, dequantization, tokenizer conversion).
 * Properties: a refusal is exit 2 naming the file; an accepted file keeps the
 * reader's promise (gguf.h): every key found by its name, strings and arrays
 * inside the file, every tensor's bytes inside the file, numel = product of its
 * dims, nbytes = numel / block x block bytes, no two tensors overlapping; every
 * tensor of a supported type dequantizes, any other is refused with exit 2;
 * the config and the tokenizer conversion either succeed or refuse with exit 2. */
#include "fuzz.h"

#include "../../src/core/mem.h"
#include "../../src/io/gguf.h"
#include "../../src/text/gguf_tokenizer.h"

static void check_kvs(const zt_gguf *g, size_t size)
{
    for (int i = 0; i < zt_gguf_kv_count(g); i++) {
        const zt_gguf_kv *kv = zt_gguf_kv_at(g, i);
        FUZZ_REQUIRE(zt_gguf_find(g, kv->key) == kv, "key %s not found by its name (duplicate?)", kv->key);
        int es = zt_gguf_vtype_size(kv->elem);
        FUZZ_REQUIRE(!es || kv->count <= size / (uint64_t)es, "%s: %llu elements cannot fit %zu bytes", kv->key,
                     (unsigned long long)kv->count, size);
    }
}

static void check_tensors(const zt_gguf *g, size_t size)
{
    int n = zt_gguf_tensor_count(g);
    for (int i = 0; i < n; i++) {
        const zt_gguf_tensor *t = zt_gguf_tensor_at(g, i);
        const zt_ggml_type_info *ti = zt_ggml_type_get(t->type);
        FUZZ_REQUIRE(ti, "%s: accepted unknown type %u", t->name, t->type);
        int64_t prod = 1;
        for (int d = 0; d < t->ndim; d++)
            prod *= t->dims[d];
        FUZZ_REQUIRE(prod == t->numel && t->numel % ti->block == 0, "%s: numel %lld", t->name, (long long)t->numel);
        FUZZ_REQUIRE((uint64_t)t->numel / (uint64_t)ti->block * (uint64_t)ti->bytes == t->nbytes && t->nbytes <= size,
                     "%s: %zu bytes", t->name, t->nbytes);
        FUZZ_REQUIRE(zt_gguf_tensor_find(g, t->name) == t, "%s: not found by its name", t->name);
        for (int j = 0; j < i; j++) {
            const zt_gguf_tensor *u = zt_gguf_tensor_at(g, j);
            FUZZ_REQUIRE(t->data + t->nbytes <= u->data || u->data + u->nbytes <= t->data, "%s and %s overlap",
                         t->name, u->name);
        }
        if (t->numel > (1 << 20))
            continue; /* a lie about a tensor is caught above; dequantize the small ones */
        size_t bytes = (size_t)t->numel * sizeof(float);
        float *out = zt_alloc(ZT_MEM_OTHER, bytes);
        FUZZ_REQUIRE(out, "out of memory");
        zt_err err = {0};
        int rc = zt_gguf_dequantize(g, t, out, &err);
        if (rc)
            fuzz_refusal(rc, &err, zt_gguf_path(g));
        zt_free(ZT_MEM_OTHER, out, bytes);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.gguf", data, size);
    zt_err err = {0};
    zt_gguf *g = NULL;
    int rc = zt_gguf_open(path, &g, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    check_kvs(g, size);
    check_tensors(g, size);
    zt_llama_config cfg;
    if ((rc = zt_gguf_config(g, &cfg, &err)))
        fuzz_refusal(rc, &err, path);
    int bos, eos, pad;
    if ((rc = zt_gguf_tokenizer_save(g, fuzz_dir(), &bos, &eos, &pad, &err)))
        fuzz_refusal(rc, &err, path);
    zt_gguf_close(g);
    return 0;
}
