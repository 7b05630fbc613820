/* fuzz_deepspeed.c — the DeepSpeed JSON (zt_ds_config_read) on arbitrary bytes,
 * then "auto" resolved against TrainingArguments' defaults.  Properties: a
 * refusal is exit 2 naming the file; file and memory agree exactly; resolving an
 * accepted config either succeeds or names the file. */
#include "fuzz.h"

#include "../../src/config/deepspeed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("ds_config.json", data, size);
    zt_err e1 = {0}, e2 = {0};
    static zt_ds_config a, b;
    zt_ds_config_init(&a);
    zt_ds_config_init(&b);
    int rc = zt_ds_config_read(path, &a, &e1);
    int rc2 = zt_ds_config_parse(path, data, size, &b, &e2);
    if (rc) {
        fuzz_refusal(rc, &e1, path);
        FUZZ_REQUIRE(rc2 == rc, "file: %d, memory: %d (%s)", rc, rc2, e2.msg);
        return 0;
    }
    FUZZ_REQUIRE(rc2 == ZT_OK, "the file reads, the same bytes in memory do not: %s", e2.msg);
    FUZZ_REQUIRE(!memcmp(&a, &b, sizeof a), "file and memory give different configs");
    zt_ds_run run;
    zt_ds_run_init(&run);
    zt_ds_resolved res;
    rc = zt_ds_config_resolve(&a, &run, &res, &e1);
    if (rc)
        fuzz_refusal(rc, &e1, path);
    return 0;
}
