/* fuzz_safetensors.c — zt_st_open on arbitrary bytes.
 * Properties: a refusal is exit 2 naming the file; an accepted file keeps its
 * promise (every tensor's bytes lie inside the file, numel x dtype size = bytes,
 * names unique and findable); and when every tensor has a ztrain dtype, writing
 * them with zt_st_write and reading that back gives the same names, shapes and
 * bytes. */
#include "fuzz.h"

#include <sys/stat.h>

#include "../../src/core/dtype.h"
#include "../../src/io/safetensors.h"

/* The format's dtypes, written out here rather than taken from the reader, in
 * bits: F4 and F6 pack several elements into a byte. */
static int st_dtype_bits(const char *d)
{
    static const struct {
        const char *name;
        int bits;
    } k[] = {{"BOOL", 8}, {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
             {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
             {"U16", 16}, {"F16", 16},    {"BF16", 16},   {"I32", 32},    {"U32", 32},
             {"F32", 32}, {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(d, k[i].name))
            return k[i].bits;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.safetensors", data, size);
    zt_err err = {0};
    zt_st_file *f = NULL;
    int rc = zt_st_open(path, &f, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    int n = zt_st_count(f), all_zt = 1;
    zt_st_out *outs = calloc((size_t)n + 1, sizeof *outs);
    FUZZ_REQUIRE(outs, "out of memory");
    for (int i = 0; i < n; i++) {
        const zt_st_tensor *t = zt_st_get(f, i);
        const uint8_t *p = t->data;
        /* the data lies in the mapping of the same bytes: compare with the input */
        FUZZ_REQUIRE(t->nbytes == 0 || (p && t->nbytes <= size), "%s: %zu bytes outside a %zu-byte file",
                     t->name, t->nbytes, size);
        int bits = st_dtype_bits(t->st_dtype);
        FUZZ_REQUIRE(bits > 0, "%s: accepted unknown dtype %s", t->name, t->st_dtype);
        FUZZ_REQUIRE((uint64_t)t->numel * (uint64_t)bits == (uint64_t)t->nbytes * 8,
                     "%s: numel %lld x %d bits != %zu bytes", t->name, (long long)t->numel, bits, t->nbytes);
        int64_t prod = 1;
        for (int d = 0; d < t->ndim; d++)
            prod *= t->shape[d];
        FUZZ_REQUIRE(prod == t->numel, "%s: shape product %lld != numel %lld", t->name, (long long)prod,
                     (long long)t->numel);
        FUZZ_REQUIRE(zt_st_find(f, t->name) == t, "%s: not found by its name (duplicate?)", t->name);
        all_zt &= t->has_zt_dtype;
        outs[i] = (zt_st_out){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
    }
    if (all_zt) { /* the writer exists for these dtypes: a round trip keeps everything */
        char back[256];
        snprintf(back, sizeof back, "%s/back.safetensors", fuzz_dir());
        rc = zt_st_write(back, outs, n, NULL, &err);
        FUZZ_REQUIRE(rc == ZT_OK, "writing back failed: %s", err.msg);
        zt_st_file *g = NULL;
        rc = zt_st_open(back, &g, &err);
        FUZZ_REQUIRE(rc == ZT_OK, "reading back what was written failed: %s", err.msg);
        FUZZ_REQUIRE(zt_st_count(g) == n, "wrote %d tensors, read %d", n, zt_st_count(g));
        for (int i = 0; i < n; i++) {
            const zt_st_tensor *a = zt_st_get(f, i), *b = zt_st_find(g, a->name);
            FUZZ_REQUIRE(b && b->ndim == a->ndim && !memcmp(a->shape, b->shape, sizeof a->shape) &&
                             b->nbytes == a->nbytes &&
                             (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes)),
                         "%s changed in the round trip", a->name);
        }
        zt_st_close(g);
        remove(back);
    }
    free(outs);
    zt_st_close(f);
    return 0;
}
