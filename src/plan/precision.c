/* precision.c — the precision plan (see precision.h). */
#include "precision.h"

#include <stdio.h>
#include <string.h>

const char *zt_backward_prefetch_name(zt_backward_prefetch p)
{
    return p == ZT_BACKWARD_PREFETCH_PRE ? "BACKWARD_PRE" : p == ZT_BACKWARD_PREFETCH_POST ? "BACKWARD_POST"
                                                                                         : "NO_PREFETCH";
}

static int parse_dtype(const char *what, const char *s, zt_dtype *out, zt_err *err)
{
    if (zt_dtype_parse(s, out) != 0)
        return zt_fail(err, ZT_EINPUT, "%s: expected fp32, bf16 or fp16 (float32, bfloat16, float16), got '%s'",
                       what, s);
    return ZT_OK;
}

int zt_precision_resolve(const zt_precision_request *r, zt_precision *prec, int *mixed_out,
                         zt_loss_scaling *ls, zt_err *err)
{
    int rc;
    zt_dtype load = ZT_F32, mp = ZT_F32;
    if (r->torch_dtype && !strcmp(r->torch_dtype, "auto"))
        load = r->config_dtype;
    else if (r->torch_dtype && (rc = parse_dtype("torch_dtype", r->torch_dtype, &load, err)))
        return rc;
    int mixed = r->mixed_precision && strcmp(r->mixed_precision, "no") != 0;
    if (mixed && (rc = parse_dtype("mixed_precision", r->mixed_precision, &mp, err)))
        return rc;
    if (mixed && mp == ZT_F32)
        return zt_fail(err, ZT_EINPUT, "mixed_precision: expected no, bf16 or fp16, got '%s'", r->mixed_precision);
    zt_precision p = {.load = load, .save = load};
    if (r->deepspeed) {
        p.master = ZT_F32;
        p.compute = mixed ? mp : ZT_F32;
    } else {
        p.master = mixed ? ZT_F32 : load;
        p.compute = mixed ? mp : p.master;
    }
    p.reduce = p.compute;
    if (r->reduce_dtype && (rc = parse_dtype("reduce_dtype", r->reduce_dtype, &p.reduce, err)))
        return rc;
    if (r->master_compensation && strcmp(r->master_compensation, "none") != 0) {
        if (strcmp(r->master_compensation, "kahan") != 0)
            return zt_fail(err, ZT_EINPUT, "master_compensation: expected none or kahan, got '%s'",
                           r->master_compensation);
        if (p.master == ZT_F32)
            return zt_fail(err, ZT_EINPUT, "master_compensation kahan applies to a 16-bit master; this plan's "
                           "master is fp32 already (drop --mixed_precision or the compensation)");
        p.compensated = 1;
    }
    if (p.master == ZT_F16)
        return zt_fail(err, ZT_EINPUT,
                       "torch_dtype float16 without mixed precision would step fp16 master weights with no "
                       "loss scaling; use --mixed_precision fp16 (fp32 master, loss scaling) or bf16");
    /* DeepSpeed's DynamicLossScaler defaults, then what a JSON's fp16 block says */
    *ls = (zt_loss_scaling){.on = p.compute == ZT_F16, .initial_scale_power = 16, .min_scale = 1,
                            .window = 1000, .hysteresis = 2};
    if (ls->on && r->ls_initial_scale_power >= 0)
        ls->initial_scale_power = r->ls_initial_scale_power;
    if (ls->on && r->ls_window > 0)
        ls->window = (long)r->ls_window;
    if (ls->on && r->ls_hysteresis > 0)
        ls->hysteresis = (int)r->ls_hysteresis;
    if (ls->on && r->ls_min_scale > 0)
        ls->min_scale = r->ls_min_scale;
    *prec = p;
    *mixed_out = mixed;
    return ZT_OK;
}

void zt_precision_mode(const zt_precision *p, int fsdp, int deepspeed, char *buf, size_t cap)
{
    if (deepspeed)
        snprintf(buf, cap, "DeepSpeed");
    else if (p->master == ZT_F32 && p->compute == ZT_F32)
        snprintf(buf, cap, "fp32");
    else if (p->master != ZT_F32)
        snprintf(buf, cap, "%s memory-constrained", fsdp ? "FSDP" : "low-precision");
    else
        snprintf(buf, cap, "%s aligned", fsdp ? "FSDP" : "mixed precision");
    if (p->compensated)
        strncat(buf, " + Kahan", cap - strlen(buf) - 1);
}
