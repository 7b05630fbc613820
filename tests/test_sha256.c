/* test_sha256.c — SHA-256 against the FIPS 180-4 example digests, with the
 * input fed whole and in uneven pieces (the token cache keys depend on it). */
#include <string.h>

#include "../src/core/sha256.h"
#include "test.h"

static void digest_of(const char *msg, size_t piece, char hex[65])
{
    zt_sha256 s;
    uint8_t d[32];
    zt_sha256_init(&s);
    size_t n = strlen(msg);
    for (size_t i = 0; i < n; i += piece)
        zt_sha256_update(&s, msg + i, n - i < piece ? n - i : piece);
    zt_sha256_final(&s, d);
    zt_sha256_hex(d, hex);
}

static void test_fips_examples(void)
{
    static const struct { const char *msg, *hex; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (size_t piece = 1; piece <= 64; piece += 7) {
            char hex[65];
            digest_of(v[i].msg, piece, hex);
            ZT_CHECK_MSG(!strcmp(hex, v[i].hex), "message %zu in pieces of %zu: %s", i, piece, hex);
        }
}

int main(void)
{
    ZT_RUN(test_fips_examples);
    ZT_TEST_MAIN_END();
}
