/* step.c — the optimizer step's one entry and its pieces (engine.h): which update
 * runs (the synchronous one below, its offloaded branch on the host's cores, or the
 * asynchronous one of async_step.c) is decided here, above both, so the update
 * implementations call the engine's unit primitives (engine.c) and never the step.
 * docs/architecture.md, "One optimizer step", walks through it. */
#include "async_step.h"

#include <assert.h>
#include <math.h>
#include <string.h>

int zt_engine_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                   double grad_unscale, double *grad_norm)
{
    const zt_layout *lay = eng->lay;
    zt_dtype md = eng->prec.master;
    zt_engine_step_prelude(eng);
    /* Global L2 norm of the logical gradient: padding is zero, so the squares of
     * whole shards sum to it over the shard group; replicas hold the same shard
     * and are not summed again (contract §4). */
    if (eng->async) /* fast mode: the same step with its numbers kept on the device */
        return zt_async_step(eng, hp, lr, max_grad_norm, grad_unscale, grad_norm);
    zt_offload_step_begin(eng); /* offloaded: the copies down joined, a delayed update landed */
    double sumsq = 0.0;
    int first_bad = -1; /* the lowest unit whose shard here holds an inf or NaN */
    for (int u = 0; u < lay->nunits; u++) {
        const zt_unit_state *us = &eng->units[u];
        double s = us->grad_sumsq_valid ? us->grad_sumsq : eng->be->sumsq(us->grad, md, us->shard_numel);
        if (!isfinite(s) && first_bad < 0)
            first_bad = u;
        sumsq += s;
    }
    if (eng->group_size > 1)
        sumsq = zt_comm_sum_double(eng->comm, sumsq, ZT_SCOPE_SHARD);
    /* An inf or NaN anywhere makes some rank's sum non-finite; every rank must
     * agree to skip, so the verdict is a max over the world, of nunits - u for
     * the first bad unit u (0: none), which also names the lowest bad unit. */
    int code = first_bad >= 0 ? lay->nunits - first_bad : !isfinite(sumsq) ? 1 : 0;
    if (eng->comm->world > 1)
        code = zt_comm_max_int(eng->comm, code);
    int overflow = code > 0;
    eng->nonfinite_unit = overflow ? lay->nunits - code : -1;
    float norm = (float)(sqrt(sumsq) * grad_unscale);
    *grad_norm = norm;
    if (overflow) {
        memset(&eng->last_audit, 0, sizeof eng->last_audit);
        return 1;
    }
    float clip = zt_clip_coef(norm, max_grad_norm, grad_unscale); /* step_scalars.h */
    eng->optimizer_steps++;
    size_t es = zt_dtype_size(md), cs = zt_dtype_size(eng->prec.compute);
    zt_adamw_audit audit = {0};
    /* Unsharded (a group of one) with an fp32 master and a persistent compute copy:
     * AdamW writes the copy as it updates the master, so no second pass converts it. */
    int cast_in_step = eng->stage <= 2 && eng->group_size == 1 && md == ZT_F32 && !eng->offload;
    if (eng->offload) /* on the host's cores, unit by unit, the uploads beside them */
        return zt_offload_step(eng, hp, lr, clip);
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        size_t slo, plo, n;
        if (!zt_engine_owned_range(eng, p, &slo, &plo, &n))
            continue;
        zt_unit_state *us = &eng->units[p->unit];
        size_t b = slo * es;
        zt_adamw_step st = {lr, p->decay ? hp->weight_decay : 0.0, hp->beta1, hp->beta2, hp->eps,
                            eng->optimizer_steps, clip};
        void *cast = cast_in_step && !us->gathered_alias ? (char *)us->gathered + slo * cs : NULL;
        eng->sbe->adamw_step((char *)us->master + b, (char *)us->m + b, (char *)us->v + b,
                            (const char *)us->grad + b, us->comp ? (char *)us->comp + b : NULL, md, n,
                            &st, cast, eng->prec.compute, &audit);
    }
    if (eng->group_size > 1) { /* replicas of a group audit the same elements: sum the group only */
        audit.updated = zt_comm_sum_double(eng->comm, audit.updated, ZT_SCOPE_SHARD);
        audit.lost = zt_comm_sum_double(eng->comm, audit.lost, ZT_SCOPE_SHARD);
        audit.ratio_sum = zt_comm_sum_double(eng->comm, audit.ratio_sum, ZT_SCOPE_SHARD);
    }
    eng->last_audit = audit;
    if (!cast_in_step)
        zt_engine_refresh_gathered(eng);
    return 0;
}

/* ---- the update rules the step's variants share (engine_impl.h) ---- */

void zt_engine_adamw_unit(zt_engine *eng, int u, const zt_adamw_hparams *hp, double lr, long t, float clip,
                          const void *g, zt_adamw_audit *audits)
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
        zt_adamw_step st = {lr, p->decay ? hp->weight_decay : 0.0, hp->beta1, hp->beta2, hp->eps, t, clip};
        eng->sbe->adamw_step((char *)us->master + b, (char *)us->m + b, (char *)us->v + b, (const char *)g + b,
                             us->comp ? (char *)us->comp + b : NULL, eng->prec.master, n, &st, NULL,
                             eng->prec.compute, &audits[i]);
    }
}

void zt_engine_sum_audits(zt_engine *eng, const zt_adamw_audit *audits)
{
    /* in the layout's order, one addition per parameter: the bits of the running
     * sum zt_engine_step keeps without offload */
    zt_adamw_audit audit = {0};
    for (int i = 0; i < eng->lay->nparams; i++) {
        audit.updated += audits[i].updated;
        audit.lost += audits[i].lost;
        audit.ratio_sum += audits[i].ratio_sum;
    }
    if (eng->group_size > 1) {
        audit.updated = zt_comm_sum_double(eng->comm, audit.updated, ZT_SCOPE_SHARD);
        audit.lost = zt_comm_sum_double(eng->comm, audit.lost, ZT_SCOPE_SHARD);
        audit.ratio_sum = zt_comm_sum_double(eng->comm, audit.ratio_sum, ZT_SCOPE_SHARD);
    }
    eng->last_audit = audit;
}

/* ---- the step in pieces (engine.h) --------------------------------------------- */

int zt_engine_runs_ahead(const zt_engine *eng) { return eng->async != NULL; }

int zt_engine_step_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr, zt_err *err)
{
    if (!eng->async)
        return zt_fail(err, ZT_EINPUT, "a captured step needs the asynchronous step (--kernels fast)");
    /* without the schedule on the device, t is optimizer_steps + 1: the step before
     * must be finished */
    assert(eng->async->sched || !eng->step_queued);
    zt_async_inputs(eng, hp, lr);
    return ZT_OK;
}

void zt_engine_step_launch(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                           double grad_unscale)
{
    assert(eng->async && "zt_engine_step_launch: the asynchronous step only");
    zt_engine_step_prelude(eng);
    zt_async_queue(eng, hp, lr, max_grad_norm, grad_unscale);
}

void zt_engine_step_readback(zt_engine *eng)
{
    /* one readback slot per step in flight; several only with the schedule on the
     * device (each step's lr and t are then decided there) */
    assert(eng->async && eng->step_queued < (eng->async->sched ? ZT_STEPS_IN_FLIGHT : 1));
    zt_async_readback(eng, (eng->step_head + eng->step_queued) % ZT_STEPS_IN_FLIGHT);
    eng->step_queued++;
}

void zt_engine_step_queue(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                          double grad_unscale)
{
    if (!eng->async) {
        assert(!eng->step_queued); /* exact mode: the whole step now, its one outcome kept for the finish */
        eng->queued_skip = zt_engine_step(eng, hp, lr, max_grad_norm, grad_unscale, &eng->queued_norm);
        eng->step_queued = 1;
        return;
    }
    zt_async_inputs(eng, hp, lr);
    zt_engine_step_launch(eng, hp, lr, max_grad_norm, grad_unscale);
    zt_engine_step_readback(eng);
}

int zt_engine_step_finish(zt_engine *eng, double *grad_norm)
{
    assert(eng->step_queued);
    if (!eng->async) {
        eng->step_queued = 0;
        *grad_norm = eng->queued_norm;
        return eng->queued_skip;
    }
    /* the oldest step in flight; the first read after a queue waits once, for all */
    const int slot = eng->step_head, wait = eng->step_arrived == 0;
    if (wait)
        eng->step_arrived = eng->step_queued;
    eng->step_head = (eng->step_head + 1) % ZT_STEPS_IN_FLIGHT;
    eng->step_queued--;
    eng->step_arrived--;
    return zt_async_finish(eng, slot, wait, grad_norm);
}
