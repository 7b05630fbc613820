/* test_safetensors.c — the safetensors reader accepts what the reference writes,
 * refuses every malformed file with ZT_EINPUT naming the file and the fault,
 * never crashes on garbage, and the writer is atomic. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/json.h"
#include "../src/core/mem.h"
#include "../src/io/safetensors.h"
#include "test.h"
#include "tmpdir.h"

/* ------------------------------------------------------------ file helpers */

static char tmpdir[64];

/* A path inside the temp dir (a ring: a few can be live at once). */
static const char *P(const char *name) { return tmpdir_path(tmpdir, name); }

static unsigned char *read_bytes(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && len > 0 && fread(p, 1, (size_t)len, f) != (size_t)len)
        len = 0;
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* A safetensors file from a raw header: 8-byte length (the header's own unless
 * hlen is given), the header, then data_bytes of pattern. */
static void write_st_raw(const char *path, const char *header, size_t header_bytes, uint64_t hlen,
                         size_t data_bytes)
{
    size_t n = 8 + header_bytes + data_bytes;
    unsigned char *buf = malloc(n);
    for (int b = 0; b < 8; b++)
        buf[b] = (unsigned char)(hlen >> (8 * b));
    memcpy(buf + 8, header, header_bytes);
    for (size_t i = 0; i < data_bytes; i++)
        buf[8 + header_bytes + i] = (unsigned char)(i * 7 + 1);
    write_bytes(path, buf, n);
    free(buf);
}
static void write_st(const char *path, const char *header, size_t data_bytes)
{
    write_st_raw(path, header, strlen(header), strlen(header), data_bytes);
}

static int count_tmp_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}

/* Open must fail with ZT_EINPUT, and the message must name path and fault. */
static void expect_bad(const char *path, const char *word, const char *label)
{
    zt_st_file *f = NULL;
    zt_err err = {0};
    int rc = zt_st_open(path, &f, &err);
    if (getenv("ZT_TEST_VERBOSE"))
        fprintf(stderr, "  [%s] %s\n", label, err.msg);
    ZT_CHECK_MSG(rc == ZT_EINPUT, "%s: rc %d, msg \"%s\"", label, rc, err.msg);
    ZT_CHECK_MSG(f == NULL, "%s: file object returned on failure", label);
    ZT_CHECK_MSG(strstr(err.msg, path) != NULL, "%s: message lacks the path: %s", label, err.msg);
    ZT_CHECK_MSG(strstr(err.msg, word) != NULL, "%s: message lacks \"%s\": %s", label, word, err.msg);
    zt_st_close(f);
}

static void check_no_io_memory(void)
{
    ZT_CHECK_MSG(zt_mem_current(ZT_MEM_OTHER) == 0, "%zu bytes of I/O memory still allocated",
                 zt_mem_current(ZT_MEM_OTHER));
}

/* ------------------------------------------------------------------- tests */

static void test_round_trip(void)
{
    float a[6] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
    uint16_t b[5], h[4];
    for (int i = 0; i < 5; i++)
        b[i] = zt_f32_to_bf16((float)i * 0.5f - 1.0f);
    for (int i = 0; i < 4; i++)
        h[i] = zt_f32_to_f16((float)i * 0.25f + 2.0f);
    float scalar = 42.0f;
    zt_st_out out[] = {
        {"model.embed_tokens.weight", ZT_F32, 2, {2, 3}, a},
        {"w.bf16", ZT_BF16, 1, {5}, b},
        {"empty", ZT_F32, 1, {0}, NULL},
        {"w.f16", ZT_F16, 2, {4, 1}, h},
        {"scalar", ZT_F32, 0, {0}, &scalar},
        {"we\"ird\\name\n\xc3\xbc", ZT_F32, 1, {1}, &scalar},
    };
    int n = (int)(sizeof out / sizeof out[0]);
    zt_err err = {0};
    const char *path = P("rt.safetensors");
    ZT_CHECK_MSG(zt_st_write(path, out, n, "pt", &err) == ZT_OK, "%s", err.msg);

    size_t bytes;
    unsigned char *raw = read_bytes(path, &bytes);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (raw ? raw[i] : 0);
    ZT_CHECK(hlen % 8 == 0);
    ZT_CHECK(bytes == 8 + hlen + 24 + 10 + 0 + 8 + 4 + 4);
    free(raw);
    ZT_CHECK(count_tmp_files(tmpdir) == 0);

    zt_st_file *f = NULL;
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (!f)
        return;
    ZT_CHECK(zt_st_count(f) == n);
    ZT_CHECK(strcmp(zt_st_path(f), path) == 0);
    for (int i = 0; i < n; i++) {
        const zt_st_tensor *t = zt_st_find(f, out[i].name);
        ZT_CHECK_MSG(t != NULL, "tensor %s missing", out[i].name);
        if (!t)
            continue;
        ZT_CHECK(t->has_zt_dtype && t->dtype == out[i].dtype);
        ZT_CHECK(t->ndim == out[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            ZT_CHECK(t->shape[d] == out[i].shape[d]);
            numel *= out[i].shape[d];
        }
        ZT_CHECK(t->numel == numel);
        ZT_CHECK(t->nbytes == (size_t)numel * zt_dtype_size(out[i].dtype));
        if (t->nbytes)
            ZT_CHECK(memcmp(t->data, out[i].data, t->nbytes) == 0);
    }
    /* Files come back in data order, which is the order written. */
    ZT_CHECK(strcmp(zt_st_get(f, 0)->name, "model.embed_tokens.weight") == 0);
    ZT_CHECK(strcmp(zt_st_get(f, 1)->name, "w.bf16") == 0);
    ZT_CHECK(zt_st_get(f, n) == NULL && zt_st_get(f, -1) == NULL);
    ZT_CHECK(strcmp(zt_st_find(f, "w.bf16")->st_dtype, "BF16") == 0);
    ZT_CHECK(zt_st_find(f, "absent") == NULL);
    const zt_st_tensor *bt = zt_st_find(f, "w.bf16");
    float v;
    uint16_t u;
    memcpy(&u, (const char *)bt->data + 2 * 3, 2);
    v = zt_bf16_to_f32(u);
    ZT_CHECK(v == 0.5f);
    const zt_st_tensor *ht = zt_st_find(f, "w.f16");
    memcpy(&u, (const char *)ht->data + 2 * 1, 2);
    ZT_CHECK(zt_f16_to_f32(u) == 2.25f);
    zt_st_close(f);
    check_no_io_memory();
}

static void test_reference_layouts_accepted(void)
{
    /* What other writers produce: spaces and newlines, keys in any order,
     * __metadata__ anywhere, non-float dtypes, zero-size tensors. */
    const char *hdr =
        "{\n  \"b\": {\"data_offsets\": [8, 16], \"shape\": [2], \"dtype\": \"I32\"},\n"
        "  \"a\": {\"dtype\": \"U8\", \"shape\": [2, 4], \"data_offsets\": [0, 8]},\n"
        "  \"z\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [16, 16]},\n"
        "  \"__metadata__\": {\"format\": \"pt\", \"note\": \"\\u00fc\\\"x\"}\n}      ";
    const char *path = P("ref.safetensors");
    write_st(path, hdr, 16);
    zt_st_file *f = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (f) {
        ZT_CHECK(zt_st_count(f) == 3);
        ZT_CHECK(strcmp(zt_st_get(f, 0)->name, "a") == 0);
        ZT_CHECK(strcmp(zt_st_get(f, 1)->name, "b") == 0);
        const zt_st_tensor *a = zt_st_find(f, "a");
        ZT_CHECK(a && !a->has_zt_dtype && strcmp(a->st_dtype, "U8") == 0 && a->numel == 8);
        const zt_st_tensor *z = zt_st_find(f, "z");
        ZT_CHECK(z && z->has_zt_dtype && z->dtype == ZT_BF16 && z->numel == 0 && z->nbytes == 0);
        ZT_CHECK(((const unsigned char *)zt_st_find(f, "b")->data)[0] == (unsigned char)(8 * 7 + 1));
    }
    zt_st_close(f);

    /* Every dtype the reference knows, 8 elements each (F4 and F6 pack
     * several elements into a byte). */
    static const struct { const char *name; int size; } dts[] = {
        {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8},
        {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},
        {"U32", 32}, {"F32", 32}, {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};
    char big[4096] = "{";
    size_t off = 0;
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        char e[128];
        snprintf(e, sizeof e, "%s\"t%zu\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[%zu,%zu]}",
                 i ? "," : "", i, dts[i].name, off, off + (size_t)dts[i].size);
        strcat(big, e);
        off += (size_t)dts[i].size;
    }
    strcat(big, "}");
    path = P("alldt.safetensors");
    write_st(path, big, off);
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (f)
        ZT_CHECK(zt_st_count(f) == 20 && zt_st_find(f, "t1")->nbytes == 4 && zt_st_find(f, "t2")->nbytes == 6);
    zt_st_close(f);

    /* Unknown keys in an entry are ignored and a null __metadata__ is no
     * metadata, as in the reference. */
    path = P("extra.safetensors");
    write_st(path, "{\"a\":{\"x\":[1.5,{\"y\":-3}],\"dtype\":\"U8\",\"z\":7,\"shape\":[2],\"w\":[9],"
                   "\"data_offsets\":[0,2]},\"__metadata__\":null}", 2);
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (f)
        ZT_CHECK(zt_st_count(f) == 1 && zt_st_find(f, "a")->shape[0] == 2 && zt_st_find(f, "a")->nbytes == 2);
    zt_st_close(f);

    /* No tensors at all is a valid (empty) file. */
    path = P("empty.safetensors");
    write_st(path, "{}      ", 0);
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (f)
        ZT_CHECK(zt_st_count(f) == 0 && zt_st_find(f, "a") == NULL);
    zt_st_close(f);
    check_no_io_memory();
}

static void test_truncated_and_oversized(void)
{
    const char *path = P("short.safetensors");
    write_bytes(path, "\x10\0\0\0\0", 5);
    expect_bad(path, "truncated", "5-byte file");
    write_bytes(path, "", 0);
    expect_bad(path, "truncated", "empty file");

    /* Header length 100 but only 20 bytes follow. */
    write_st_raw(path, "{\"a\":1}             ", 20, 100, 0);
    expect_bad(path, "truncated", "header past EOF");
    /* Header length 2^64-1: must not wrap around into a small number. */
    write_st_raw(path, "{}", 2, UINT64_MAX, 0);
    expect_bad(path, "oversized", "header length 2^64-1");
    write_st_raw(path, "{}", 2, 100000001, 0);
    expect_bad(path, "oversized", "header 100 MB + 1");

    expect_bad(P("does-not-exist.safetensors"), "cannot open", "missing file");
    mkdir(P("a-dir.safetensors"), 0755);
    expect_bad(P("a-dir.safetensors"), "regular file", "directory");
    check_no_io_memory();
}

static void test_malformed_table(void)
{
    static const struct {
        const char *label, *header;
        size_t data;
        const char *word;
    } cases[] = {
        {"not JSON", "{\"a\": ", 0, "JSON"},
        {"JSON array", "[1, 2]", 0, "not an object"},
        {"JSON string", "\"x\"", 0, "not an object"},
        {"empty header", "", 0, "JSON"},
        {"only spaces", "        ", 0, "JSON"},
        {"two values", "{}{}", 0, "JSON"},
        {"text after value", "{} x", 0, "JSON"},
        {"control byte as whitespace", "{\x01}", 0, "JSON"},
        {"byte order mark", "\xef\xbb\xbf{}", 0, "JSON"},
        {"leading zero", "{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, "JSON"},
        {"lone surrogate", "{\"\\ud800\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "JSON"},
        {"NUL escape in name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "NUL"},
        {"raw newline in string", "{\"a\nb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "control"},
        {"overlapping offsets",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"gap in offsets",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "gap"},
        {"first offset not 0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "gap"},
        {"offsets past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "past the end"},
        {"trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "trailing"},
        {"trailing bytes, no tensors", "{}", 8, "trailing"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype"},
        {"lower-case dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype"},
        {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype"},
        {"shape/span mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "mismatch"},
        {"duplicate names",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate"},
        {"duplicate __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate"},
        {"duplicate key in entry",
         "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "duplicate"},
        {"shape product overflow",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", 8, "overflow"},
        {"byte size overflow",
         "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8, "overflow"},
        {"shape entry past int64",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8, "overflow"},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative"},
        {"float shape 2.0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "integer"},
        {"float shape 2.5", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "integer"},
        {"exponent shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8, "integer"},
        {"string shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "integer"},
        {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "array"},
        {"too many dimensions",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "dimensions"},
        {"begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "begin > end"},
        {"one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0]}}", 0, "data_offsets"},
        {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[-8,-8]}}", 0, "non-negative"},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0]}}", 0, "missing"},
        {"F4 filling half a byte", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "whole number of bytes"},
        {"F6 span mismatch", "{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "mismatch"},
        {"entry not an object", "{\"a\":5}", 0, "not an object"},
        {"__metadata__ value not a string", "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__"},
        {"__metadata__ not an object", "{\"__metadata__\":[\"pt\"]}", 0, "__metadata__"},
    };
    const char *path = P("bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].header, cases[i].data);
        expect_bad(path, cases[i].word, cases[i].label);
    }

    /* Invalid UTF-8: a stray byte, an overlong '/', a UTF-16 surrogate, a cut
     * sequence at the end of the header. */
    static const char *utf8[] = {
        "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}\xe2\x82",
    };
    for (size_t i = 0; i < sizeof utf8 / sizeof utf8[0]; i++) {
        write_st(path, utf8[i], 1);
        expect_bad(path, "UTF-8", "invalid UTF-8");
    }
    /* Nesting deeper than cJSON's limit fails cleanly, without deep recursion. */
    static char deep[20100];
    strcpy(deep, "{\"a\":");
    memset(deep + 5, '[', 10000);
    memset(deep + 10005, ']', 10000);
    strcpy(deep + 20005, "}");
    write_st(path, deep, 0);
    expect_bad(path, "JSON", "deep nesting");
    /* A NUL byte inside the header (not JSON whitespace, though cJSON skips it). */
    write_st_raw(path, "{}\0     ", 8, 8, 0);
    expect_bad(path, "JSON", "NUL byte in header");
    check_no_io_memory();
}

/* Tiny deterministic generator so the garbage is the same on every run. */
static uint64_t rng_state;
static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void open_must_not_crash(const char *path, const char *label)
{
    zt_st_file *f = NULL;
    zt_err err = {0};
    int rc = zt_st_open(path, &f, &err);
    ZT_CHECK_MSG(rc == ZT_OK || rc == ZT_EINPUT, "%s: rc %d: %s", label, rc, err.msg);
    if (rc == ZT_OK) {
        /* Whatever was accepted must tile its data section. */
        size_t sum = 0;
        for (int i = 0; i < zt_st_count(f); i++)
            sum += zt_st_get(f, i)->nbytes;
        const zt_st_tensor *last = zt_st_count(f) ? zt_st_get(f, zt_st_count(f) - 1) : NULL;
        if (last && zt_st_count(f) > 0) {
            const char *first = zt_st_get(f, 0)->data;
            ZT_CHECK((size_t)((const char *)last->data + last->nbytes - first) == sum);
        }
    } else {
        ZT_CHECK_MSG(strstr(err.msg, path) != NULL, "%s: message lacks the path: %s", label, err.msg);
    }
    zt_st_close(f);
}

static void test_garbage_never_crashes(void)
{
    const char *path = P("garbage.safetensors");
    unsigned char buf[600];
    rng_state = 12345;
    /* Random bytes, random lengths. */
    for (int it = 0; it < 40; it++) {
        size_t n = rng() % sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)rng();
        write_bytes(path, buf, n);
        open_must_not_crash(path, "random bytes");
    }
    /* A plausible length and JSON-ish noise, to get past the length checks. */
    static const char alpha[] = "{}[]\":,0123456789-.eEaFIU8_ \n\\u\"dtypeshapedata_offsets";
    for (int it = 0; it < 80; it++) {
        size_t hn = 1 + rng() % 200, dn = rng() % 16;
        for (int b = 0; b < 8; b++)
            buf[b] = (unsigned char)((uint64_t)hn >> (8 * b));
        for (size_t i = 0; i < hn + dn; i++)
            buf[8 + i] = (unsigned char)alpha[rng() % (sizeof alpha - 1)];
        write_bytes(path, buf, 8 + hn + dn);
        open_must_not_crash(path, "JSON-ish noise");
    }
    /* Valid files with a few bytes changed. */
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
                      "\"__metadata__\":{\"format\":\"pt\"}}";
    size_t hn = strlen(hdr), total = 8 + hn + 12;
    for (int it = 0; it < 300; it++) {
        for (int b = 0; b < 8; b++)
            buf[b] = (unsigned char)((uint64_t)hn >> (8 * b));
        memcpy(buf + 8, hdr, hn);
        memset(buf + 8 + hn, 0x3f, 12);
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = rng() % (it % 10 == 0 ? total : hn + 8);
            buf[at] = (it & 1) ? (unsigned char)rng() : (unsigned char)alpha[rng() % (sizeof alpha - 1)];
        }
        write_bytes(path, buf, total - (it % 7 == 0 ? rng() % 6 : 0));
        open_must_not_crash(path, "mutated file");
    }
    check_no_io_memory();
}

static void test_writer_is_atomic(void)
{
    float x[4] = {1, 2, 3, 4};
    zt_st_out good[] = {{"a", ZT_F32, 1, {4}, x}, {"b", ZT_BF16, 1, {2}, x}};
    zt_err err = {0};
    const char *path = P("atomic.safetensors");
    ZT_CHECK_MSG(zt_st_write(path, good, 2, NULL, &err) == ZT_OK, "%s", err.msg);
    size_t n0, n1;
    unsigned char *before = read_bytes(path, &n0);

    /* A duplicate name is refused before anything touches the disk. */
    zt_st_out dup[] = {{"a", ZT_F32, 1, {1}, x}, {"c", ZT_F32, 1, {1}, x}, {"a", ZT_F32, 1, {2}, x}};
    ZT_CHECK(zt_st_write(path, dup, 3, "pt", &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "duplicate") && strstr(err.msg, path), "%s", err.msg);
    /* So are a negative dimension and missing data. */
    zt_st_out neg[] = {{"a", ZT_F32, 1, {-1}, x}};
    ZT_CHECK(zt_st_write(path, neg, 1, NULL, &err) == ZT_EINPUT);
    zt_st_out nodata[] = {{"a", ZT_F32, 1, {3}, NULL}};
    ZT_CHECK(zt_st_write(path, nodata, 1, NULL, &err) == ZT_EINPUT);
    zt_st_out meta[] = {{"__metadata__", ZT_F32, 1, {1}, x}};
    ZT_CHECK(zt_st_write(path, meta, 1, NULL, &err) == ZT_EINPUT);
    unsigned char *after = read_bytes(path, &n1);
    ZT_CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);
    ZT_CHECK(count_tmp_files(tmpdir) == 0);

    /* A failure at rename time (the target is a directory) removes the tmp file. */
    mkdir(P("target-is-dir"), 0755);
    ZT_CHECK(zt_st_write(P("target-is-dir"), good, 2, NULL, &err) != ZT_OK);
    ZT_CHECK_MSG(strstr(err.msg, "target-is-dir") != NULL, "%s", err.msg);
    ZT_CHECK(count_tmp_files(tmpdir) == 0);

    /* A directory that does not exist: bad input, message names the path. */
    ZT_CHECK(zt_st_write(P("no/such/dir/x.safetensors"), good, 2, NULL, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "no/such/dir/x.safetensors") != NULL, "%s", err.msg);

    /* A successful write replaces the old file as a whole. */
    ZT_CHECK(zt_st_write(path, good, 1, "pt", &err) == ZT_OK);
    after = read_bytes(path, &n1);
    ZT_CHECK(n1 != n0);
    free(after);
    free(before);
    zt_st_file *f = NULL;
    ZT_CHECK(zt_st_open(path, &f, &err) == ZT_OK && zt_st_count(f) == 1);
    zt_st_close(f);
    ZT_CHECK(count_tmp_files(tmpdir) == 0);
    check_no_io_memory();
}

static void test_many_tensors(void)
{
    enum { N = 5000 };
    static char names[N][24];
    static zt_st_out out[N];
    static float vals[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.w", N - i); /* not in name order */
        vals[i] = (float)i;
        out[i] = (zt_st_out){names[i], ZT_F32, 1, {1}, &vals[i]};
    }
    zt_err err = {0};
    const char *path = P("many.safetensors");
    ZT_CHECK_MSG(zt_st_write(path, out, N, "pt", &err) == ZT_OK, "%s", err.msg);
    zt_st_file *f = NULL;
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (f) {
        ZT_CHECK(zt_st_count(f) == N);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const zt_st_tensor *t = zt_st_find(f, names[i]);
            float v = -1;
            if (t)
                memcpy(&v, t->data, 4);
            bad += !t || v != (float)i || zt_st_get(f, i) != t;
        }
        ZT_CHECK(bad == 0);
    }
    zt_st_close(f);
    check_no_io_memory();
}

static void test_json_integers(void)
{
    zt_json j;
    zt_err err = {0};
    const char *txt = "[12, -3, 1.0, 1e2, 9223372036854775807, 9223372036854775808, -9223372036854775808, 0]";
    ZT_CHECK_MSG(zt_json_parse("t", "text", txt, strlen(txt), 0, &j, &err) == ZT_OK, "%s", err.msg);
    int64_t v = 0;
    ZT_CHECK(j.nnum == 8);
    ZT_CHECK(zt_json_int(&j, 0, &v) == 0 && v == 12);
    ZT_CHECK(zt_json_int(&j, 1, &v) == 0 && v == -3);
    ZT_CHECK(zt_json_int(&j, 2, &v) == 1);
    ZT_CHECK(zt_json_int(&j, 3, &v) == 1);
    ZT_CHECK(zt_json_int(&j, 4, &v) == 0 && v == INT64_MAX);
    ZT_CHECK(zt_json_int(&j, 5, &v) == 2);
    ZT_CHECK(zt_json_int(&j, 6, &v) == 0 && v == INT64_MIN);
    ZT_CHECK(zt_json_int(&j, 8, &v) == 1);
    ZT_CHECK(zt_json_count_numbers(j.root) == 8);
    zt_json_free(&j);
    /* Offsets in messages are counted from base. */
    ZT_CHECK(zt_json_parse("t", "text", "[1,  x]", 7, 100, &j, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "offset 105") != NULL, "%s", err.msg);
    check_no_io_memory();
}

/* zt_json_keep_number_text: a document read and printed again keeps every number
 * token as written (8.0 is not 8, 1E+2 is not 100), at any depth, with its key. */
static void test_json_number_text(void)
{
    zt_json j;
    zt_err err = {0};
    const char *txt = "{\"a\": 8.0, \"b\": [1E+2, {\"c\": -0.0, \"d\": 1e-05}, \"8.0\"], \"e\": 64,"
                      " \"f\": 123456789012345678901234567890, \"g\": 0.10000000000000001, \"h\": null}";
    ZT_CHECK_MSG(zt_json_parse("t", "text", txt, strlen(txt), 0, &j, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(zt_json_keep_number_text(&j) == 0);
    char *out = cJSON_PrintUnformatted(j.root);
    ZT_CHECK_MSG(out && strcmp(out, "{\"a\":8.0,\"b\":[1E+2,{\"c\":-0.0,\"d\":1e-05},\"8.0\"],\"e\":64,"
                                   "\"f\":123456789012345678901234567890,\"g\":0.10000000000000001,\"h\":null}") == 0,
                 "%s", out ? out : "(null)");
    /* the raw nodes copy with their keys, as hf_carry copies a source's keys */
    cJSON *copy = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(j.root, "b"), 1);
    char *cout = copy ? cJSON_PrintUnformatted(copy) : NULL;
    ZT_CHECK_MSG(cout && strcmp(cout, "[1E+2,{\"c\":-0.0,\"d\":1e-05},\"8.0\"]") == 0, "%s", cout ? cout : "(null)");
    cJSON_free(cout);
    cJSON_Delete(copy);
    cJSON_free(out);
    zt_json_free(&j);
    /* a document that is one number */
    ZT_CHECK(zt_json_parse("t", "text", " 2.50 ", 6, 0, &j, &err) == ZT_OK);
    ZT_CHECK(zt_json_keep_number_text(&j) == 0);
    out = cJSON_PrintUnformatted(j.root);
    ZT_CHECK_MSG(out && strcmp(out, "2.50") == 0, "%s", out ? out : "(null)");
    cJSON_free(out);
    zt_json_free(&j);
    check_no_io_memory();
}

/* --------------------------------------------------------- weights directory */

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static void write_shard(const char *path, const char *const *names, int n)
{
    float x[3] = {1, 2, 3};
    zt_st_out out[8];
    for (int i = 0; i < n; i++)
        out[i] = (zt_st_out){names[i], ZT_F32, 1, {3}, x};
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_write(path, out, n, "pt", &err) == ZT_OK, "%s", err.msg);
}

static void expect_weights_bad(const char *dir, const char *word1, const char *word2, const char *label)
{
    zt_weights *w = NULL;
    zt_err err = {0};
    int rc = zt_weights_open(dir, &w, &err);
    if (getenv("ZT_TEST_VERBOSE"))
        fprintf(stderr, "  [%s] %s\n", label, err.msg);
    ZT_CHECK_MSG(rc == ZT_EINPUT, "%s: rc %d: %s", label, rc, err.msg);
    ZT_CHECK(w == NULL);
    ZT_CHECK_MSG(strstr(err.msg, word1) != NULL, "%s: message lacks \"%s\": %s", label, word1, err.msg);
    ZT_CHECK_MSG(strstr(err.msg, word2) != NULL, "%s: message lacks \"%s\": %s", label, word2, err.msg);
    zt_weights_close(w);
}

static const char *S1 = "model-00001-of-00002.safetensors", *S2 = "model-00002-of-00002.safetensors";

static void make_sharded(const char *dir, const char *index)
{
    char p[512];
    mkdir(dir, 0755);
    static const char *n1[] = {"model.embed_tokens.weight", "model.norm.weight"};
    static const char *n2[] = {"lm_head.weight"};
    snprintf(p, sizeof p, "%s/%s", dir, S1);
    write_shard(p, n1, 2);
    snprintf(p, sizeof p, "%s/%s", dir, S2);
    write_shard(p, n2, 1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, index);
}

static void test_weights_dir(void)
{
    zt_err err = {0};
    zt_weights *w = NULL;
    char p[512];

    /* Single file. */
    const char *single = P("w-single");
    mkdir(single, 0755);
    static const char *names[] = {"model.norm.weight", "lm_head.weight"};
    snprintf(p, sizeof p, "%s/model.safetensors", single);
    write_shard(p, names, 2);
    ZT_CHECK_MSG(zt_weights_open(single, &w, &err) == ZT_OK, "%s", err.msg);
    if (w) {
        const char *file = NULL;
        ZT_CHECK(zt_weights_count(w) == 2);
        ZT_CHECK(zt_weights_find(w, "lm_head.weight", &file) != NULL && strcmp(file, p) == 0);
        ZT_CHECK(zt_weights_find(w, "nope", &file) == NULL && file == NULL);
        ZT_CHECK(strcmp(zt_weights_get(w, 0)->name, "model.norm.weight") == 0);
        ZT_CHECK(zt_weights_get(w, 2) == NULL);
    }
    zt_weights_close(w);

    /* Sharded, with an index. */
    const char *good_index =
        "{\"metadata\": {\"total_size\": 36}, \"weight_map\": {"
        "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
        "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
        "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}\n";
    const char *sharded = P("w-sharded");
    make_sharded(sharded, good_index);
    ZT_CHECK_MSG(zt_weights_open(sharded, &w, &err) == ZT_OK, "%s", err.msg);
    if (w) {
        const char *file = NULL;
        ZT_CHECK(zt_weights_count(w) == 3);
        const zt_st_tensor *t = zt_weights_find(w, "lm_head.weight", &file);
        ZT_CHECK(t && t->numel == 3 && file && strstr(file, S2) != NULL);
        t = zt_weights_find(w, "model.norm.weight", &file);
        ZT_CHECK(t && file && strstr(file, S1) != NULL);
        ZT_CHECK(zt_weights_find(w, "model.embed_tokens.weight", NULL) != NULL);
        /* Shards in file-name order, tensors in data order. */
        ZT_CHECK(strcmp(zt_weights_get(w, 0)->name, "model.embed_tokens.weight") == 0);
        ZT_CHECK(strcmp(zt_weights_get(w, 2)->name, "lm_head.weight") == 0);
    }
    zt_weights_close(w);

    /* The index points to a file that does not exist. */
    const char *d = P("w-missing-file");
    make_sharded(d, "{\"weight_map\": {\"lm_head.weight\": \"model-00003-of-00002.safetensors\"}}");
    expect_weights_bad(d, "model-00003-of-00002.safetensors", "cannot open", "missing shard");
    /* The index maps a name its shard lacks. */
    d = P("w-missing-tensor");
    make_sharded(d, "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                    "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                    "\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
                    "\"model.layers.0.mlp.up_proj.weight\": \"model-00002-of-00002.safetensors\"}}");
    expect_weights_bad(d, "model.layers.0.mlp.up_proj.weight", "no such tensor", "missing tensor");
    /* A shard holds a tensor the index does not list. */
    d = P("w-unmapped");
    make_sharded(d, "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                    "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_weights_bad(d, "model.norm.weight", "not listed", "unmapped tensor");
    /* A shard name that leaves the directory. */
    d = P("w-escape");
    make_sharded(d, "{\"weight_map\": {\"lm_head.weight\": \"../model-00002-of-00002.safetensors\"}}");
    expect_weights_bad(d, "model.safetensors.index.json", "file name", "path in weight_map");
    /* A name listed twice. */
    d = P("w-dup");
    make_sharded(d, "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                    "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    expect_weights_bad(d, "lm_head.weight", "duplicate", "duplicate weight_map entry");
    /* An index that is not JSON, and one without a weight_map. */
    d = P("w-notjson");
    make_sharded(d, "{\"weight_map\": ");
    expect_weights_bad(d, "model.safetensors.index.json", "JSON", "index not JSON");
    d = P("w-nomap");
    make_sharded(d, "{\"metadata\": {}}");
    expect_weights_bad(d, "model.safetensors.index.json", "weight_map", "no weight_map");
    d = P("w-unknown-key");
    make_sharded(d, "{\"weight_map\": {}, \"extra\": 1}");
    expect_weights_bad(d, "model.safetensors.index.json", "extra", "unknown index key");
    /* The same tensor in two shards. */
    d = P("w-two-shards");
    mkdir(d, 0755);
    static const char *a1[] = {"x", "y"}, *a2[] = {"y", "z"};
    snprintf(p, sizeof p, "%s/%s", d, S1);
    write_shard(p, a1, 2);
    snprintf(p, sizeof p, "%s/%s", d, S2);
    write_shard(p, a2, 2);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    write_text(p, "{\"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\","
                  "\"y\": \"model-00001-of-00002.safetensors\", \"z\": \"model-00002-of-00002.safetensors\"}}");
    expect_weights_bad(d, "\"y\"", "duplicate", "tensor in two shards");
    /* A bad shard is reported with the index that named it. */
    d = P("w-bad-shard");
    make_sharded(d, good_index);
    snprintf(p, sizeof p, "%s/%s", d, S2);
    write_bytes(p, "abc", 3);
    expect_weights_bad(d, S2, "truncated", "corrupt shard");

    /* Neither file: the message names the directory and both file names. */
    d = P("w-empty");
    mkdir(d, 0755);
    zt_weights_open(d, &w, &err);
    expect_weights_bad(d, "model.safetensors.index.json", "model.safetensors ", "empty dir");
    ZT_CHECK_MSG(strstr(err.msg, d) != NULL, "%s", err.msg);
    expect_weights_bad(P("w-nonexistent"), "w-nonexistent", "No such file", "no dir");
    check_no_io_memory();
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_st_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_round_trip);
    ZT_RUN(test_reference_layouts_accepted);
    ZT_RUN(test_truncated_and_oversized);
    ZT_RUN(test_malformed_table);
    ZT_RUN(test_garbage_never_crashes);
    ZT_RUN(test_writer_is_atomic);
    ZT_RUN(test_many_tensors);
    ZT_RUN(test_json_integers);
    ZT_RUN(test_json_number_text);
    ZT_RUN(test_weights_dir);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
