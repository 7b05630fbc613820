/* fuzz_checkpoint.c — libFuzzer harness for the checkpoint readers (issue 12,
 * point 7): the first byte picks the document, the rest is its text.
 *   0  trainer_state.json  (zt_ckpt_state_from_json)
 *   1  zero/index.json     (zt_ckpt_index_from_json)
 *   2  manifest.json       (zt_manifest_from_json)
 * Built with clang -fsanitize=fuzzer,address,undefined,float-cast-overflow
 * (make fuzz), so a double cast to an integer out of range, an overflow or an
 * out-of-bounds access is a crash.  Every accepted document is also checked
 * against the readers' promises (counts in range, offsets inside units). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/json.h"
#include "../../src/train/ckpt_state.h"
#include "../../src/train/manifest.h"

static void check_state(const zt_ckpt_state *st)
{
    if (st->step < 0 || st->step > st->hp.max_steps || st->optimizer_steps < 0 ||
        st->optimizer_steps > st->step || st->samples_seen != st->step * st->hp.global_batch ||
        !(st->scaler.scale > 0) || st->plan.world % st->plan.group_size != 0)
        abort();
    if (st->lora.on && (st->lora.r < 1 || !(st->lora.alpha > 0) || st->lora.targets == 0)) /* a LoRA checkpoint's */
        abort();
}

static void check_index(const zt_ckpt_index *ix)
{
    for (int i = 0; i < ix->nparams; i++) {
        const zt_ckpt_iparam *p = &ix->params[i];
        if (p->unit < 0 || p->unit >= ix->nunits || p->offset + p->numel > ix->units[p->unit].numel)
            abort();
        if (zt_ckpt_index_find(ix, p->name) != p)
            abort();
    }
    for (int u = 0; u < ix->nunits; u++)
        if (ix->units[u].padded_numel % (size_t)ix->group_size || ix->units[u].numel > ix->units[u].padded_numel)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 3;
    zt_json js;
    zt_err err;
    if (zt_json_parse("fuzz.json", "document", data + 1, size - 1, 1, &js, &err) != ZT_OK)
        return 0;
    if (which == 0) {
        zt_ckpt_state st;
        if (zt_ckpt_state_from_json("trainer_state.json", &js, &st, &err) == ZT_OK) {
            check_state(&st);
            free(zt_ckpt_state_to_json(&st)); /* what was accepted can be written back */
        }
    } else if (which == 1) {
        zt_ckpt_index ix;
        if (zt_ckpt_index_from_json("index.json", &js, &ix, &err) == ZT_OK) {
            check_index(&ix);
            free(zt_ckpt_index_to_json(&ix));
            zt_ckpt_index_free(&ix);
        }
    } else {
        zt_manifest m;
        if (zt_manifest_from_json("manifest.json", &js, &m, &err) == ZT_OK)
            zt_manifest_free(&m);
    }
    zt_json_free(&js);
    return 0;
}
