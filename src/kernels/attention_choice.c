/* attention_choice.c — cuDNN's fused attention or the own kernels (attention_choice.h). */
#include "attention_choice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reasons in the order a reader asks them: asked not to, cannot (the device, the
 * build, the GPU, the library), then the shape.  The first that holds is the one said. */
int zt_attention_choose(const zt_attention_query *q, char *why, size_t cap)
{
    if (q->forced_own)
        snprintf(why, cap, "ZT_ATTENTION=own");
    else if (q->device)
        snprintf(why, cap, "device %s", q->device);
    else if (!q->built)
        snprintf(why, cap, "built without cuDNN");
    else if (q->cc_major != 9)
        snprintf(why, cap, "sm_%d%d", q->cc_major, q->cc_minor);
    else if (q->load_error)
        snprintf(why, cap, "libcudnn not found: %s", q->load_error);
    else if (q->version < ZT_CUDNN_MIN_VERSION)
        snprintf(why, cap, "cuDNN %ld.%ld.%ld older than %d.%d.0", q->version / 10000, q->version / 100 % 100,
                 q->version % 100, ZT_CUDNN_MIN_VERSION / 10000, ZT_CUDNN_MIN_VERSION / 100 % 100);
    /* the frontend refuses bf16 attention on these two for known bugs */
    else if (q->version == 91000 || q->version == 91001)
        snprintf(why, cap, "cuDNN 9.10.%ld has known attention bugs", q->version % 100);
    else if (q->hd != 64 && q->hd != 128)
        snprintf(why, cap, "head_dim %d", q->hd);
    else if (q->window > 0)
        snprintf(why, cap, "sliding window %d", q->window);
    else if (q->nkv <= 0 || q->nh % q->nkv != 0)
        snprintf(why, cap, "%d heads over %d kv heads", q->nh, q->nkv);
    else {
        if (cap)
            why[0] = '\0';
        return 1;
    }
    return 0;
}

int zt_attention_setting(int *forced_own, zt_err *err)
{
    const char *v = getenv("ZT_ATTENTION");
    *forced_own = 0;
    if (!v || !v[0] || !strcmp(v, "auto"))
        return ZT_OK;
    if (!strcmp(v, "own")) {
        *forced_own = 1;
        return ZT_OK;
    }
    return zt_fail(err, ZT_EINPUT,
                   "ZT_ATTENTION=%s: expected auto (cuDNN's fused attention where it serves the run, the default) or "
                   "own (ztrain's own attention kernels, for reproducible comparisons)",
                   v);
}

void zt_attention_describe(int cudnn, const char *why, char *out, size_t cap)
{
    if (cudnn)
        snprintf(out, cap, "attention cudnn");
    else
        snprintf(out, cap, "attention own kernels (%s)", why);
}
