/* frozen.c — the loaded weights as a forward-only parameter owner (see frozen.h). */
#include "frozen.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"

int zt_frozen_init(zt_frozen_params *f, const zt_layout *lay, zt_dtype dtype, const zt_backend *be, zt_err *err)
{
    memset(f, 0, sizeof *f);
    f->be = be;
    f->lay = lay;
    f->dtype = dtype;
    size_t n = (size_t)lay->nunits;
    f->units = zt_alloc(ZT_MEM_OTHER, n * sizeof *f->units);
    f->acquired = zt_alloc(ZT_MEM_OTHER, n * sizeof *f->acquired);
    int ok = f->units && f->acquired;
    for (int u = 0; ok && u < lay->nunits; u++)
        ok = (f->units[u] = be->alloc(ZT_MEM_PARAMS, lay->units[u].padded_numel * zt_dtype_size(dtype))) != NULL;
    if (!ok) {
        zt_frozen_free(f);
        return zt_fail(err, ZT_EFAIL, "out of memory for the model's weights (%zu elements)", lay->padded_numel);
    }
    return ZT_OK;
}

void zt_frozen_free(zt_frozen_params *f)
{
    if (f->lay && f->units)
        for (int u = 0; u < f->lay->nunits; u++)
            f->be->free(ZT_MEM_PARAMS, f->units[u], f->lay->units[u].padded_numel * zt_dtype_size(f->dtype));
    if (f->lay) {
        zt_free(ZT_MEM_OTHER, f->units, (size_t)f->lay->nunits * sizeof *f->units);
        zt_free(ZT_MEM_OTHER, f->acquired, (size_t)f->lay->nunits * sizeof *f->acquired);
    }
    memset(f, 0, sizeof *f);
}

void zt_frozen_set_param(zt_frozen_params *f, const zt_param *p, const void *src, zt_dtype src_dt)
{
    size_t es = zt_dtype_size(f->dtype);
    void *at = (char *)f->units[p->unit] + p->offset * es;
    /* in place on the host; a device's copy is made on the host and sent over */
    void *dst = f->be->host_visible ? at : zt_alloc(ZT_MEM_OTHER, p->numel * es);
    if (!dst) {
        fprintf(stderr, "ztrain: error: out of host memory loading %s (%zu elements)\n", p->name, p->numel);
        abort(); /* a sink has no way to fail (hf_model.h); loading needs this little */
    }
    for (size_t i = 0; i < p->numel; i++)
        zt_store_f32(dst, f->dtype, i, zt_load_f32(src, src_dt, i));
    if (dst != at) {
        f->be->to_device(at, dst, p->numel * es);
        zt_free(ZT_MEM_OTHER, dst, p->numel * es);
    }
}

static const void *frozen_acquire(void *ctx, int unit, zt_pass pass)
{
    zt_frozen_params *f = ctx;
    assert(pass == ZT_PASS_FORWARD && "frozen parameters serve forward passes only");
    (void)pass;
    f->acquired[unit]++;
    return f->units[unit];
}

static void frozen_release(void *ctx, int unit)
{
    zt_frozen_params *f = ctx;
    assert(f->acquired[unit] > 0 && "release without acquire");
    f->acquired[unit]--;
}

static void frozen_progress(void *ctx) { (void)ctx; }

static void frozen_reset(void *ctx)
{
    zt_frozen_params *f = ctx;
    memset(f->acquired, 0, (size_t)f->lay->nunits * sizeof *f->acquired);
}

zt_param_owner zt_frozen_owner(zt_frozen_params *f)
{
    /* no gradients: forward passes only */
    static const zt_param_owner_ops ops = ZT_PARAM_OWNER_OPS(frozen_acquire, frozen_release, NULL, NULL,
                                                             frozen_progress, frozen_reset);
    return (zt_param_owner){.ops = &ops, .ctx = f, .compute = f->dtype, .backend = f->be,
                            .act16 = zt_owner_preset_act16(f->be)};
}
