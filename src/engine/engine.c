/* engine.c — parameter, gradient and optimizer-state buffers (see engine.h). */
#include "engine.h"

#include <math.h>
#include <string.h>

#include "../core/mem.h"

static size_t bytes_of(size_t numel, zt_dtype dt) { return numel * zt_dtype_size(dt); }

int zt_engine_init(zt_engine *eng, const zt_layout *lay, zt_precision prec, zt_err *err)
{
    memset(eng, 0, sizeof *eng);
    eng->lay = lay;
    eng->prec = prec;
    eng->group_size = 1;
    eng->group_rank = 0;
    eng->units = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nunits * sizeof *eng->units);
    if (!eng->units)
        return zt_fail(err, ZT_EFAIL, "out of memory for the engine's unit table");
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        size_t full = lay->units[u].padded_numel;
        us->shard_numel = full / (size_t)eng->group_size;
        us->master = zt_alloc(ZT_MEM_PARAMS, bytes_of(us->shard_numel, prec.master));
        us->grad = zt_alloc(ZT_MEM_GRADS, bytes_of(us->shard_numel, prec.master));
        us->m = zt_alloc(ZT_MEM_OPTIM, bytes_of(us->shard_numel, prec.master));
        us->v = zt_alloc(ZT_MEM_OPTIM, bytes_of(us->shard_numel, prec.master));
        us->gathered_alias = prec.compute == prec.master && eng->group_size == 1;
        us->gathered = us->gathered_alias ? us->master
                                          : zt_alloc(ZT_MEM_GATHERED, bytes_of(full, prec.compute));
        if (!us->master || !us->grad || !us->m || !us->v || !us->gathered) {
            zt_engine_free(eng);
            return zt_fail(err, ZT_EFAIL, "out of memory for unit %d's buffers (%zu elements)", u,
                           full);
        }
        if (u == lay->root_unit) {
            if (full > eng->staging_root_numel)
                eng->staging_root_numel = full;
        } else if (full > eng->staging_layers_numel) {
            eng->staging_layers_numel = full;
        }
    }
    /* Gradient staging is fp32: matrix products accumulate weight gradients in fp32. */
    eng->staging_root = zt_alloc(ZT_MEM_GRADS, eng->staging_root_numel * sizeof(float));
    eng->staging_layers = zt_alloc(ZT_MEM_GRADS, eng->staging_layers_numel * sizeof(float));
    if ((eng->staging_root_numel && !eng->staging_root) ||
        (eng->staging_layers_numel && !eng->staging_layers)) {
        zt_engine_free(eng);
        return zt_fail(err, ZT_EFAIL, "out of memory for gradient staging buffers");
    }
    return ZT_OK;
}

void zt_engine_free(zt_engine *eng)
{
    if (eng->units) {
        for (int u = 0; u < eng->lay->nunits; u++) {
            zt_unit_state *us = &eng->units[u];
            size_t mb = bytes_of(us->shard_numel, eng->prec.master);
            zt_free(ZT_MEM_PARAMS, us->master, mb);
            zt_free(ZT_MEM_GRADS, us->grad, mb);
            zt_free(ZT_MEM_OPTIM, us->m, mb);
            zt_free(ZT_MEM_OPTIM, us->v, mb);
            if (!us->gathered_alias)
                zt_free(ZT_MEM_GATHERED, us->gathered,
                        bytes_of(eng->lay->units[u].padded_numel, eng->prec.compute));
        }
        zt_free(ZT_MEM_OTHER, eng->units, (size_t)eng->lay->nunits * sizeof *eng->units);
    }
    zt_free(ZT_MEM_GRADS, eng->staging_root, eng->staging_root_numel * sizeof(float));
    zt_free(ZT_MEM_GRADS, eng->staging_layers, eng->staging_layers_numel * sizeof(float));
    memset(eng, 0, sizeof *eng);
}

/* The slice [lo, hi) of a parameter (unit-relative element offsets) that this
 * rank's shard holds, as offsets into the shard; returns 0 when it holds none. */
static int owned_range(const zt_engine *eng, const zt_param *p, size_t *shard_lo, size_t *param_lo,
                       size_t *count)
{
    size_t s = eng->units[p->unit].shard_numel;
    size_t own_lo = (size_t)eng->group_rank * s, own_hi = own_lo + s;
    size_t lo = p->offset > own_lo ? p->offset : own_lo;
    size_t hi = p->offset + p->numel < own_hi ? p->offset + p->numel : own_hi;
    if (lo >= hi)
        return 0;
    *shard_lo = lo - own_lo;
    *param_lo = lo - p->offset;
    *count = hi - lo;
    return 1;
}

void zt_engine_set_param(zt_engine *eng, const zt_param *p, const void *src, zt_dtype src_dt)
{
    size_t slo, plo, n;
    if (!owned_range(eng, p, &slo, &plo, &n))
        return;
    zt_unit_state *us = &eng->units[p->unit];
    for (size_t i = 0; i < n; i++) {
        float x = zt_load_f32(src, src_dt, plo + i);
        /* round to the load dtype first (torch_dtype), then store as master */
        float loaded = eng->prec.load == ZT_F32 ? x
                       : eng->prec.load == ZT_BF16 ? zt_round_bf16(x)
                                                   : zt_f16_to_f32(zt_f32_to_f16(x));
        zt_store_f32(us->master, eng->prec.master, slo + i, loaded);
    }
}

void zt_engine_get_param(const zt_engine *eng, const zt_param *p, float *dst)
{
    size_t slo, plo, n;
    if (!owned_range(eng, p, &slo, &plo, &n))
        return;
    const zt_unit_state *us = &eng->units[p->unit];
    zt_convert(dst + plo, ZT_F32, (const char *)us->master + slo * zt_dtype_size(eng->prec.master),
               eng->prec.master, n);
}

void zt_engine_get_grad(const zt_engine *eng, const zt_param *p, float *dst)
{
    size_t slo, plo, n;
    if (!owned_range(eng, p, &slo, &plo, &n))
        return;
    const zt_unit_state *us = &eng->units[p->unit];
    zt_convert(dst + plo, ZT_F32, (const char *)us->grad + slo * zt_dtype_size(eng->prec.master),
               eng->prec.master, n);
}

void zt_engine_refresh_gathered(zt_engine *eng)
{
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        if (!us->gathered_alias)
            zt_convert(us->gathered, eng->prec.compute, us->master, eng->prec.master,
                       us->shard_numel);
    }
}

const void *zt_engine_acquire(zt_engine *eng, int unit) { return eng->units[unit].gathered; }

void zt_engine_release(zt_engine *eng, int unit)
{
    (void)eng;
    (void)unit;
}

float *zt_engine_grad_begin(zt_engine *eng, int unit)
{
    zt_unit_state *us = &eng->units[unit];
    size_t full = eng->lay->units[unit].padded_numel;
    us->staging = unit == eng->lay->root_unit ? eng->staging_root : eng->staging_layers;
    memset(us->staging, 0, full * sizeof(float));
    return us->staging;
}

void zt_engine_grad_end(zt_engine *eng, int unit)
{
    zt_unit_state *us = &eng->units[unit];
    const float *g = us->staging;
    size_t n = us->shard_numel;
    zt_dtype rd = eng->prec.reduce, md = eng->prec.master;
    /* One rank: the reduction is the identity, but the gradient still passes
     * through the reduce dtype so that numbers do not depend on the world size. */
    if (md == ZT_F32 && rd == ZT_F32) {
        float *acc = us->grad;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            acc[i] += g[i];
    } else if (md == ZT_F32 && rd == ZT_BF16) {
        float *acc = us->grad;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            acc[i] += zt_round_bf16(g[i]);
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = g[i];
            if (rd == ZT_BF16)
                x = zt_round_bf16(x);
            else if (rd == ZT_F16)
                x = zt_f16_to_f32(zt_f32_to_f16(x));
            zt_store_f32(us->grad, md, i, zt_load_f32(us->grad, md, i) + x);
        }
    }
    us->staging = NULL;
}

void zt_engine_zero_grads(zt_engine *eng)
{
    for (int u = 0; u < eng->lay->nunits; u++)
        memset(eng->units[u].grad, 0, bytes_of(eng->units[u].shard_numel, eng->prec.master));
}

void zt_engine_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                    double *grad_norm)
{
    const zt_layout *lay = eng->lay;
    zt_dtype md = eng->prec.master;
    /* Global L2 norm of the logical gradient: padding is zero, so summing the
     * squares of whole shards is exact; summed over ranks (identity here). */
    double sumsq = 0.0;
    for (int u = 0; u < lay->nunits; u++) {
        const zt_unit_state *us = &eng->units[u];
        double s = 0.0;
        if (md == ZT_F32) {
            const float *g = us->grad;
            #pragma omp parallel for simd reduction(+ : s) schedule(static)
            for (size_t i = 0; i < us->shard_numel; i++)
                s += (double)g[i] * (double)g[i];
        } else {
            #pragma omp parallel for reduction(+ : s) schedule(static)
            for (size_t i = 0; i < us->shard_numel; i++) {
                double x = zt_load_f32(us->grad, md, i);
                s += x * x;
            }
        }
        sumsq += s;
    }
    float norm = (float)sqrt(sumsq);
    *grad_norm = norm;
    eng->last_grad_norm = norm;
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1 */
    float clip = 1.0f;
    if (max_grad_norm > 0.0) {
        float coef = (float)max_grad_norm / (norm + 1e-6f);
        if (coef < 1.0f)
            clip = coef;
    }
    eng->optimizer_steps++;
    size_t es = zt_dtype_size(md);
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        size_t slo, plo, n;
        if (!owned_range(eng, p, &slo, &plo, &n))
            continue;
        zt_unit_state *us = &eng->units[p->unit];
        size_t b = slo * es;
        zt_adamw_step_shard((char *)us->master + b, (char *)us->m + b, (char *)us->v + b,
                            (const char *)us->grad + b, md, n, lr, p->decay ? hp->weight_decay : 0.0,
                            hp->beta1, hp->beta2, hp->eps, eng->optimizer_steps, clip);
    }
    zt_engine_refresh_gathered(eng);
}
