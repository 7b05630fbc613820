/* async_step.c — the engine's asynchronous step (see async_step.h). */
#include "async_step.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static size_t seg_table_bytes(int n) { return (size_t)n * sizeof(zt_adamw_seg); }

/* by lo; at one lo a gap marker first, so that the slice starting there follows it */
static int seg_cmp(const void *a, const void *b)
{
    const zt_adamw_seg *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->kind >= 0) - (y->kind >= 0);
}

/* Unit u's shard as segments (step_scalars.h): each owned slice of a parameter with
 * its decay, the gaps between them (padding, other ranks' slices) as kind -1.  At
 * most 2 * params + 1 segments; written into segs, returns the count. */
static int unit_segments(const zt_engine *eng, int u, zt_adamw_seg *segs)
{
    const zt_layout *lay = eng->lay;
    int n = 0;
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        size_t slo, plo, cnt;
        if (p->unit != u || !zt_engine_owned_range(eng, p, &slo, &plo, &cnt))
            continue;
        segs[n++] = (zt_adamw_seg){slo, p->decay ? 1 : 0};
        segs[n++] = (zt_adamw_seg){slo + cnt, -1}; /* its end: a gap unless a slice starts there */
    }
    qsort(segs, (size_t)n, sizeof *segs, seg_cmp);
    /* a gap marker at the start of a slice gives way to the slice; one at the shard's end goes */
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (segs[k].kind < 0 && ((k + 1 < n && segs[k + 1].lo == segs[k].lo) ||
                                 segs[k].lo >= eng->units[u].shard_numel))
            continue;
        segs[m++] = segs[k];
    }
    /* the shard's head, when no slice starts at 0 */
    if (m == 0 || segs[0].lo > 0) {
        memmove(segs + 1, segs, (size_t)m * sizeof *segs);
        segs[0] = (zt_adamw_seg){0, -1};
        m++;
    }
    return m;
}

int zt_async_init(zt_engine *eng, zt_err *err)
{
    const zt_backend *be = eng->be;
    const int U = eng->lay->nunits;
    zt_async *as = zt_alloc(ZT_MEM_OTHER, sizeof *as);
    if (!as)
        return zt_fail(err, ZT_EFAIL, "out of memory for the asynchronous step");
    eng->async = as;
    as->sc = be->alloc(ZT_MEM_OTHER, sizeof *as->sc);
    as->host = be->host_alloc(ZT_MEM_OTHER, sizeof *as->host);
    as->unit_sumsq = be->alloc(ZT_MEM_OTHER, (size_t)U * sizeof(double));
    as->segs = zt_alloc(ZT_MEM_OTHER, (size_t)U * sizeof *as->segs);
    as->nsegs = zt_alloc(ZT_MEM_OTHER, (size_t)U * sizeof *as->nsegs);
    int cap = 2 * eng->lay->nparams + 2;
    zt_adamw_seg *tmp = zt_alloc(ZT_MEM_OTHER, seg_table_bytes(cap));
    int ok = as->sc && as->host && as->unit_sumsq && as->segs && as->nsegs && tmp;
    for (int u = 0; ok && u < U; u++) {
        as->nsegs[u] = unit_segments(eng, u, tmp);
        as->segs[u] = be->alloc(ZT_MEM_OTHER, seg_table_bytes(as->nsegs[u]));
        ok = as->segs[u] != NULL;
        if (ok)
            be->to_device(as->segs[u], tmp, seg_table_bytes(as->nsegs[u]));
    }
    zt_free(ZT_MEM_OTHER, tmp, seg_table_bytes(cap));
    if (!ok)
        return zt_fail(err, ZT_EFAIL, "out of memory for the asynchronous step's scalars");
    return ZT_OK;
}

void zt_async_free(zt_engine *eng)
{
    zt_async *as = eng->async;
    if (!as)
        return;
    const zt_backend *be = eng->be;
    const int U = eng->lay->nunits;
    for (int u = 0; as->segs && u < U; u++)
        be->free(ZT_MEM_OTHER, as->segs[u], seg_table_bytes(as->nsegs[u]));
    zt_free(ZT_MEM_OTHER, as->segs, (size_t)U * sizeof *as->segs);
    zt_free(ZT_MEM_OTHER, as->nsegs, (size_t)U * sizeof *as->nsegs);
    be->free(ZT_MEM_OTHER, as->unit_sumsq, (size_t)U * sizeof(double));
    be->free(ZT_MEM_OTHER, as->sc, sizeof *as->sc);
    be->host_free(ZT_MEM_OTHER, as->host, sizeof *as->host);
    zt_free(ZT_MEM_OTHER, as, sizeof *as);
    eng->async = NULL;
}

/* the numbers only: the inputs were, or will be, uploaded for this step */
void zt_async_zero(zt_engine *eng) { eng->be->zero(eng->async->sc, ZT_STEP_OUTPUT_BYTES); }

double *zt_async_unit_sumsq(zt_engine *eng, int u) { return eng->async->unit_sumsq + u; }

/* Several ranks: the verdict is the world's (engine.h): the squares summed over the
 * shard group, the lowest bad unit over the world (as nunits - u, a max), judged on
 * the host by the same rule and written back for AdamW to read. */
static void agree_verdict(zt_engine *eng, double max_grad_norm, double grad_unscale)
{
    zt_async *as = eng->async;
    const int U = eng->lay->nunits;
    zt_step_scalars *h = as->host;
    eng->be->to_host(h, as->sc, sizeof *h);
    double sumsq = h->sumsq;
    if (eng->group_size > 1)
        sumsq = zt_comm_sum_double(eng->comm, sumsq, ZT_SCOPE_SHARD);
    int code = h->first_bad >= 0 ? U - h->first_bad : !isfinite(sumsq) ? 1 : 0;
    code = zt_comm_max_int(eng->comm, code);
    zt_step_judge(h, sumsq, code > 0 ? U - code : -1, max_grad_norm, grad_unscale);
    eng->be->to_device(as->sc, h, sizeof *h);
}

void zt_async_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr)
{
    zt_async *as = eng->async;
    zt_adamw_step st = {lr, hp->weight_decay, hp->beta1, hp->beta2, hp->eps, eng->optimizer_steps + 1, 1.0f};
    zt_adamw_unit_inputs(&as->in, &st, lr, st.t);
    const size_t o = ZT_STEP_OUTPUT_BYTES;
    eng->be->upload((char *)as->sc + o, (const char *)&as->in + o, sizeof as->in - o);
}

void zt_async_queue(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm, double grad_unscale)
{
    const zt_backend *be = eng->be;
    const zt_layout *lay = eng->lay;
    zt_async *as = eng->async;
    const zt_dtype md = eng->prec.master;
    /* the units' squares not left by grad_end's rounding */
    for (int u = 0; u < lay->nunits; u++) {
        const zt_unit_state *us = &eng->units[u];
        if (!us->grad_sumsq_valid)
            be->sumsq_into(as->unit_sumsq + u, us->grad, md, us->shard_numel);
    }
    be->step_verdict(as->sc, as->unit_sumsq, lay->nunits, max_grad_norm, grad_unscale);
    if (eng->comm->world > 1)
        agree_verdict(eng, max_grad_norm, grad_unscale);
    /* AdamW, one launch per unit.  adamw_unit reads lr and t from the device's inputs
     * (zt_async_inputs), not from st: st's are the values of the step that queued it,
     * which a captured step would replay for ever */
    int cast_in_step = eng->stage <= 2 && eng->group_size == 1 && md == ZT_F32; /* zt_engine_step's rule */
    zt_adamw_step st = {lr, hp->weight_decay, hp->beta1, hp->beta2, hp->eps, eng->optimizer_steps + 1, 1.0f};
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        void *cast = cast_in_step && !us->gathered_alias ? us->gathered : NULL;
        be->adamw_unit(us->master, us->m, us->v, us->grad, us->comp, md, us->shard_numel, as->segs[u], as->nsegs[u],
                       &st, as->sc, cast, eng->prec.compute);
    }
    if (!cast_in_step) /* unchanged masters after a skip give the same copies */
        zt_engine_refresh_gathered(eng);
}

int zt_async_finish(zt_engine *eng, double *grad_norm)
{
    zt_async *as = eng->async;
    const zt_layout *lay = eng->lay;
    /* the step's one wait: its numbers, for the log, the loss scale and the schedule */
    const zt_step_scalars *h = as->host;
    eng->be->to_host(as->host, as->sc, sizeof *as->host);
    as->loss_sum = h->loss_sum;
    *grad_norm = h->norm;
    eng->nonfinite_unit = h->skip ? (h->first_bad >= 0 ? h->first_bad : lay->nunits - 1) : -1;
    zt_adamw_audit audit = {h->audit_updated, h->audit_lost, h->audit_ratio_sum};
    if (h->skip)
        memset(&audit, 0, sizeof audit);
    else if (eng->group_size > 1) { /* replicas of a group audit the same elements: sum the group only */
        audit.updated = zt_comm_sum_double(eng->comm, audit.updated, ZT_SCOPE_SHARD);
        audit.lost = zt_comm_sum_double(eng->comm, audit.lost, ZT_SCOPE_SHARD);
        audit.ratio_sum = zt_comm_sum_double(eng->comm, audit.ratio_sum, ZT_SCOPE_SHARD);
    }
    eng->last_audit = audit;
    if (!h->skip)
        eng->optimizer_steps++;
    return h->skip;
}

int zt_async_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm, double grad_unscale,
                  double *grad_norm)
{
    zt_async_inputs(eng, hp, lr);
    zt_async_queue(eng, hp, lr, max_grad_norm, grad_unscale);
    return zt_async_finish(eng, grad_norm);
}

/* The captured step's pieces (engine.h): the inputs before a launch, the finish after. */
int zt_engine_step_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr, zt_err *err)
{
    if (!eng->async)
        return zt_fail(err, ZT_EINPUT, "a captured step needs the asynchronous step (--kernels fast)");
    zt_async_inputs(eng, hp, lr);
    return ZT_OK;
}

int zt_engine_step_finish(zt_engine *eng, double *grad_norm) { return zt_async_finish(eng, grad_norm); }

/* an address within the device struct, computed without reading it */
double *zt_engine_loss_sink(zt_engine *eng)
{
    return eng->async ? (double *)((char *)eng->async->sc + offsetof(zt_step_scalars, loss_sum)) : NULL;
}

double zt_engine_step_loss_sum(const zt_engine *eng) { return eng->async ? eng->async->loss_sum : 0.0; }
