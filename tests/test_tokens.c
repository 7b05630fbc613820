/* test_tokens.c — token files load to the ids they hold, whatever integer type a
 * .npy uses, and every malformed file is ZT_EINPUT naming the file and fault. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/core/mem.h"
#include "../src/io/tokens.h"
#include "test.h"
#include "tmpdir.h"

static char tmpdir[64];

static const char *P(const char *name) { return tmpdir_path(tmpdir, name); }

/* A .npy as numpy lays it out: magic, version, header length (2 bytes for
 * version 1, 4 for 2 and 3), the dict padded with spaces and a '\n' so the data
 * is 64-byte aligned, then data. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t bytes)
{
    unsigned char buf[4096];
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major, buf[7] = 0;
    for (size_t b = 0; b < pre - 8; b++)
        buf[8 + b] = (unsigned char)(hlen >> (8 * b));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    if (bytes)
        memcpy(buf + total, data, bytes);
    write_bytes(path, buf, total + bytes);
}

static void expect_ids(const char *path, const int32_t *want, size_t n, const char *label)
{
    zt_tokens t;
    zt_err err = {0};
    int rc = zt_tokens_load(path, &t, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s: %s", label, err.msg);
    if (rc)
        return;
    ZT_CHECK_MSG(t.n == n, "%s: n = %zu, expected %zu", label, t.n, n);
    int32_t max = 0;
    for (size_t i = 0; i < n && i < t.n; i++) {
        ZT_CHECK_MSG(t.ids[i] == want[i], "%s: ids[%zu] = %d, expected %d", label, i, t.ids[i], want[i]);
        if (want[i] > max)
            max = want[i];
    }
    ZT_CHECK_MSG(t.max_id == max, "%s: max_id %d, expected %d", label, t.max_id, max);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == n * sizeof(int32_t));
    zt_tokens_free(&t);
    ZT_CHECK(t.ids == NULL && t.n == 0);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void expect_bad(const char *path, const char *word, const char *label)
{
    zt_tokens t;
    zt_err err = {0};
    int rc = zt_tokens_load(path, &t, &err);
    if (getenv("ZT_TEST_VERBOSE"))
        fprintf(stderr, "  [%s] %s\n", label, err.msg);
    ZT_CHECK_MSG(rc == ZT_EINPUT, "%s: rc %d: %s", label, rc, err.msg);
    ZT_CHECK_MSG(t.ids == NULL && t.n == 0, "%s: output not empty on failure", label);
    ZT_CHECK_MSG(strstr(err.msg, path) != NULL, "%s: message lacks the path: %s", label, err.msg);
    ZT_CHECK_MSG(strstr(err.msg, word) != NULL, "%s: message lacks \"%s\": %s", label, word, err.msg);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
    zt_tokens_free(&t);
}

static void test_npy_round_trip(void)
{
    int32_t ids[] = {0, 5, 65535, 2147483647, 7};
    zt_err err = {0};
    const char *path = P("rt.npy");
    ZT_CHECK_MSG(zt_tokens_write_npy(path, ids, 5, &err) == ZT_OK, "%s", err.msg);
    expect_ids(path, ids, 5, "written npy");

    /* Byte for byte what numpy.save writes for np.array([...], dtype='<i4'). */
    FILE *f = fopen(path, "rb");
    unsigned char head[128];
    ZT_CHECK(f && fread(head, 1, sizeof head, f) == sizeof head);
    if (f)
        fclose(f);
    const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }";
    ZT_CHECK(memcmp(head, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    ZT_CHECK(memcmp(head + 10, dict, strlen(dict)) == 0);
    ZT_CHECK(head[127] == '\n');

    DIR *d = opendir(tmpdir);
    int tmps = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        tmps += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    ZT_CHECK(tmps == 0);
    ZT_CHECK(zt_tokens_write_npy(P("no/such/dir/x.npy"), ids, 5, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "no/such/dir/x.npy") != NULL, "%s", err.msg);
}

static void test_npy_integer_types(void)
{
    const char *path = P("types.npy");
    int32_t want[] = {1, 200, 3};
    uint8_t u1[] = {1, 200, 3};
    int8_t i1[] = {1, 100, 3};
    uint16_t u2[] = {1, 200, 3};
    int16_t i2[] = {1, 200, 3};
    uint32_t u4[] = {1, 200, 3};
    int64_t i8[] = {1, 200, 3};
    uint64_t u8[] = {1, 200, 3};
    write_npy(path, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u1, 3);
    expect_ids(path, want, 3, "|u1");
    int32_t want_i1[] = {1, 100, 3};
    write_npy(path, 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", i1, 3);
    expect_ids(path, want_i1, 3, "|i1");
    write_npy(path, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", u2, 6);
    expect_ids(path, want, 3, "<u2");
    write_npy(path, 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", i2, 6);
    expect_ids(path, want, 3, "<i2");
    write_npy(path, 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (3,), }", u4, 12);
    expect_ids(path, want, 3, "<u4");
    write_npy(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", i8, 24);
    expect_ids(path, want, 3, "<i8");
    write_npy(path, 1, "{'descr': '<u8', 'fortran_order': False, 'shape': (3,), }", u8, 24);
    expect_ids(path, want, 3, "<u8");
    /* Format versions 2.0 and 3.0 (4-byte header length), keys in another
     * order, double quotes, no trailing comma, a Python 2 long. */
    write_npy(path, 2, "{'fortran_order': False, 'shape': (3,), 'descr': '<u2'}", u2, 6);
    expect_ids(path, want, 3, "version 2.0");
    write_npy(path, 3, "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (3L,)}", u2, 6);
    expect_ids(path, want, 3, "version 3.0");
}

static void test_npy_malformed(void)
{
    const char *path = P("bad.npy");
    int32_t d6[6] = {1, 2, 3, 4, 5, 6};
    float f3[3] = {1, 2, 3};
    static const struct {
        const char *label, *dict;
        size_t bytes;
        const char *word;
    } cases[] = {
        {"2-D", "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24, "2-D"},
        {"0-D", "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", 4, "0-D"},
        {"shape not a tuple", "{'descr': '<i4', 'fortran_order': False, 'shape': (6), }", 24, "tuple"},
        {"negative shape", "{'descr': '<i4', 'fortran_order': False, 'shape': (-6,), }", 24, "shape"},
        {"float dtype", "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12, "integer"},
        {"bool dtype", "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 3, "integer"},
        {"fortran order", "{'descr': '<i4', 'fortran_order': True, 'shape': (6,), }", 24, "Fortran"},
        {"big-endian", "{'descr': '>i4', 'fortran_order': False, 'shape': (6,), }", 24, "little-endian"},
        {"'|' on a 4-byte type", "{'descr': '|i4', 'fortran_order': False, 'shape': (6,), }", 24, "little-endian"},
        {"truncated data", "{'descr': '<i4', 'fortran_order': False, 'shape': (7,), }", 24, "truncated"},
        {"trailing data", "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 24, "trailing"},
        {"empty array", "{'descr': '<i4', 'fortran_order': False, 'shape': (0,), }", 0, "empty"},
        {"unknown key", "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 24, "unexpected key"},
        {"duplicate key", "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (6,)}", 24, "duplicate"},
        {"missing key", "{'descr': '<i4', 'shape': (6,)}", 24, "missing"},
        {"structured dtype", "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (6,)}", 24, "descr"},
        {"text after dict", "{'descr': '<i4', 'fortran_order': False, 'shape': (6,)} x", 24, "after"},
        {"not a dict", "descr", 24, "'{'"},
        {"fortran_order not bool", "{'descr': '<i4', 'fortran_order': 0, 'shape': (6,)}", 24, "fortran_order"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_npy(path, 1, cases[i].dict, strstr(cases[i].label, "float") ? (void *)f3 : (void *)d6,
                  cases[i].bytes);
        expect_bad(path, cases[i].word, cases[i].label);
    }

    /* Values that are not token ids: the message gives the index. */
    int32_t neg[] = {1, 2, -1};
    write_npy(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", neg, 12);
    expect_bad(path, "index 2", "negative token");
    expect_bad(path, "negative", "negative token");
    uint32_t big[] = {1, 2147483648u};
    write_npy(path, 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", big, 8);
    expect_bad(path, "index 1", "token >= 2^31");
    int64_t big8[] = {(int64_t)1 << 40};
    write_npy(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", big8, 8);
    expect_bad(path, "2^31", "int64 token >= 2^31");

    /* The preamble itself. */
    write_bytes(path, "\x93NUMPZ\x01\x00\x10\x00{}", 12);
    expect_bad(path, "magic", "bad magic");
    write_bytes(path, "\x93NUMPY\x04\x00\x10\x00{}", 12);
    expect_bad(path, "version", "version 4.0");
    write_bytes(path, "\x93NUMPY\x01\x01\x10\x00{}", 12);
    expect_bad(path, "version", "version 1.1");
    write_bytes(path, "\x93NUMPY\x01\x00\xff\x00{'descr'", 17);
    expect_bad(path, "truncated", "header past EOF");
    write_bytes(path, "\x93NUMPY\x02\x00\x01", 9);
    expect_bad(path, "truncated", "9-byte file");
    write_bytes(path, "\x93NUMPY\x02\x00\x01\x00\x00", 11);
    expect_bad(path, "truncated", "cut v2 preamble");
    write_bytes(path, "", 0);
    expect_bad(path, "empty", "empty .npy");
}

/* Deterministic garbage must be refused without a crash. */
static void test_npy_garbage(void)
{
    const char *path = P("garbage.npy");
    uint64_t s = 99;
    unsigned char buf[300];
    static const char alpha[] = "{}()',: 0123456789<|iuf'descrfortran_ordershapeTrueFalseL\n";
    for (int it = 0; it < 200; it++) {
        size_t n = 10 + (size_t)(it % 250);
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t hl = (size_t)(s >> 33) % 280;
        buf[8] = (unsigned char)hl, buf[9] = 0;
        for (size_t i = 10; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = it % 2 ? (unsigned char)alpha[(s >> 33) % (sizeof alpha - 1)] : (unsigned char)(s >> 40);
        }
        write_bytes(path, buf, n);
        zt_tokens t;
        zt_err err = {0};
        int rc = zt_tokens_load(path, &t, &err);
        ZT_CHECK_MSG(rc == ZT_OK || rc == ZT_EINPUT, "rc %d: %s", rc, err.msg);
        zt_tokens_free(&t);
    }
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

static void test_bin(void)
{
    const char *path = P("data.bin");
    unsigned char raw[] = {1, 0, 0x34, 0x12, 0xff, 0xff, 0, 0};
    int32_t want[] = {1, 0x1234, 65535, 0};
    write_bytes(path, raw, sizeof raw);
    expect_ids(path, want, 4, ".bin");
    write_bytes(path, raw, 7);
    expect_bad(path, "odd", "odd-length .bin");
    write_bytes(path, raw, 0);
    expect_bad(path, "empty", "empty .bin");
}

static void test_txt(void)
{
    const char *path = P("data.txt");
    const char *text = "h\xc3\xa9llo\n";
    int32_t want[] = {'h', 0xc3, 0xa9, 'l', 'l', 'o', '\n'};
    write_bytes(path, text, strlen(text));
    expect_ids(path, want, 7, ".txt");
    write_bytes(path, "", 0);
    expect_bad(path, "empty", "empty .txt");
}

static void test_paths(void)
{
    write_bytes(P("data.csv"), "1,2", 3);
    expect_bad(P("data.csv"), "unknown", "unknown extension");
    write_bytes(P("noext"), "1,2", 3);
    expect_bad(P("noext"), ".npy", "no extension");
    expect_bad(P("missing.npy"), "cannot open", "missing file");
    mkdir(P("dir.bin"), 0755);
    expect_bad(P("dir.bin"), "regular file", "directory");
}

int main(void)
{
    if (!tmpdir_make(tmpdir, sizeof tmpdir, "zt_tok_")) {
        perror("mkdtemp");
        return 1;
    }
    ZT_RUN(test_npy_round_trip);
    ZT_RUN(test_npy_integer_types);
    ZT_RUN(test_npy_malformed);
    ZT_RUN(test_npy_garbage);
    ZT_RUN(test_bin);
    ZT_RUN(test_txt);
    ZT_RUN(test_paths);
    tmpdir_remove(tmpdir);
    ZT_TEST_MAIN_END();
}
