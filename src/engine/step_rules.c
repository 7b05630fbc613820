/* step_rules.c — the rules every variant of the optimizer step shares (the
 * synchronous one, its offloaded unit loop and delayed update, the asynchronous
 * one): which slice of a parameter this rank owns, when AdamW writes the compute
 * copy itself, how the lost-update audit and the bad unit are agreed over the ranks,
 * and AdamW over one unit.  Written once here, below every variant: this file
 * calls only comm and the backend tables, so no variant calls another through it. */
#include "engine_impl.h"

/* The part of parameter p inside this rank's shard, as (offset in the shard,
 * offset in the parameter, count); 0 when the shard holds none of it. */
int zt_engine_owned_range(const zt_engine *eng, const zt_param *p, size_t *shard_lo, size_t *param_lo,
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

int zt_engine_cast_in_step(const zt_engine *eng)
{
    return eng->stage <= 2 && eng->group_size == 1 && eng->prec.master == ZT_F32 && !eng->offload;
}

zt_adamw_audit zt_engine_group_audit(zt_engine *eng, zt_adamw_audit audit)
{
    if (eng->group_size > 1) { /* replicas of a group audit the same elements: sum the group only */
        audit.updated = zt_comm_sum_double(eng->comm, audit.updated, ZT_SCOPE_SHARD);
        audit.lost = zt_comm_sum_double(eng->comm, audit.lost, ZT_SCOPE_SHARD);
        audit.ratio_sum = zt_comm_sum_double(eng->comm, audit.ratio_sum, ZT_SCOPE_SHARD);
    }
    return audit;
}

/* An inf or NaN anywhere makes some rank's sum non-finite; every rank must agree,
 * so the agreement is a max over the world of nunits - u for this rank's first bad
 * unit u (1 when no unit was bad here but the sum was not finite, 0 when neither),
 * which also names the lowest bad unit. */
int zt_engine_agree_nonfinite(zt_engine *eng, int first_bad, int nonfinite)
{
    const int U = eng->lay->nunits;
    int code = first_bad >= 0 ? U - first_bad : nonfinite ? 1 : 0;
    if (eng->comm->world > 1)
        code = zt_comm_max_int(eng->comm, code);
    eng->nonfinite_unit = code > 0 ? U - code : -1;
    return code > 0;
}

void zt_engine_adamw_unit(zt_engine *eng, int u, const zt_adamw_hparams *hp, double lr, long t, float clip,
                          const void *g, int g_bf16, zt_adamw_audit *audits)
{
    const zt_layout *lay = eng->lay;
    size_t es = zt_dtype_size(eng->prec.master);
    zt_unit_state *us = &eng->units[u];
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        size_t slo, plo, n;
        if (p->unit != u || !zt_engine_owned_range(eng, p, &slo, &plo, &n))
            continue;
        size_t b = slo * es;
        zt_adamw_step st = {lr, p->decay ? hp->weight_decay : 0.0, hp->beta1, hp->beta2, hp->eps, t, clip, g_bf16};
        eng->sbe->adamw_step((char *)us->master + b, (char *)us->m + b, (char *)us->v + b, (const char *)g + b,
                             us->comp ? (char *)us->comp + b : NULL, eng->prec.master, n, &st, NULL,
                             eng->prec.compute, &audits[i]);
    }
}

void zt_engine_sum_audits(zt_engine *eng, const zt_adamw_audit *audits)
{
    /* in the layout's order, one addition per parameter, whichever order the units
     * were updated in */
    zt_adamw_audit audit = {0};
    for (int i = 0; i < eng->lay->nparams; i++) {
        audit.updated += audits[i].updated;
        audit.lost += audits[i].lost;
        audit.ratio_sum += audits[i].ratio_sum;
    }
    eng->last_audit = zt_engine_group_audit(eng, audit);
}
