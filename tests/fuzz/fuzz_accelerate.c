/* fuzz_accelerate.c — the Accelerate YAML (zt_accel_config_read) on arbitrary
 * bytes.  Properties: a refusal is exit 2 naming the file; reading the file and
 * parsing the same bytes from memory under the file's name agree exactly
 * (status, message and every field), and a second read gives the same config. */
#include "fuzz.h"

#include "../../src/config/accelerate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("accelerate.yaml", data, size);
    zt_err e1 = {0}, e2 = {0};
    static zt_accel_config a, b, c;
    zt_accel_config_init(&a);
    zt_accel_config_init(&b);
    zt_accel_config_init(&c);
    int rc = zt_accel_config_read(path, &a, &e1);
    int rc2 = zt_accel_config_parse(path, (const char *)data, size, &b, &e2);
    if (rc) {
        fuzz_refusal(rc, &e1, path);
        FUZZ_REQUIRE(rc2 == rc, "file: %d, memory: %d (%s)", rc, rc2, e2.msg);
        return 0;
    }
    FUZZ_REQUIRE(rc2 == ZT_OK, "the file reads, the same bytes in memory do not: %s", e2.msg);
    FUZZ_REQUIRE(!memcmp(&a, &b, sizeof a), "file and memory give different configs");
    FUZZ_REQUIRE(zt_accel_config_read(path, &c, &e1) == ZT_OK && !memcmp(&a, &c, sizeof a),
                 "a second read differs");
    return 0;
}
