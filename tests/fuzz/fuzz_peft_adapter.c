/* fuzz_peft_adapter.c — a PEFT adapter_config.json (zt_peft_adapter_read_config, what
 * `train --adapter DIR` reads first) on arbitrary bytes.
 * Properties: a refusal is exit 2 naming the file; an accepted config is a LoRA ztrain
 * builds: r >= 1, alpha > 0 and finite, at least one target, rsLoRA 0 or 1. */
#include "fuzz.h"

#include "../../src/io/peft_adapter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("adapter_config.json", data, size);
    zt_err err = {0};
    zt_lora l;
    memset(&l, 0, sizeof l);
    int rc = zt_peft_adapter_read_config(fuzz_dir(), &l, &err);
    if (rc) {
        fuzz_refusal(rc, &err, path);
        return 0;
    }
    FUZZ_REQUIRE(l.r >= 1 && l.alpha > 0 && l.alpha < 1e30 && l.targets != 0 && (l.rslora == 0 || l.rslora == 1),
                 "accepted an adapter ztrain cannot build: r %d, alpha %g, targets %#x, rslora %d", l.r, l.alpha,
                 l.targets, l.rslora);
    return 0;
}
