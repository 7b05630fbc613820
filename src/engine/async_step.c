/* async_step.c — the engine's asynchronous step (see async_step.h). */
#include "async_step.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static size_t seg_table_bytes(int n) { return (size_t)n * sizeof(zt_adamw_seg); }

/* the readback slots: sc and mine for each slot of the caller's ring of steps */
static size_t ring_bytes(void) { return 2 * (size_t)ZT_STEP_SLOTS * sizeof(zt_step_scalars); }

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
    /* sc and mine side by side, so that a step's readback copies both in one launch */
    as->sc = be->alloc(ZT_MEM_OTHER, 2 * sizeof *as->sc);
    as->mine = as->sc ? as->sc + 1 : NULL;
    as->done = be->alloc(ZT_MEM_OTHER, ring_bytes());
    as->ready = be->host_alloc(ZT_MEM_OTHER, ring_bytes());
    as->unit_sumsq = be->alloc(ZT_MEM_OTHER, (size_t)U * sizeof(double));
    as->segs = zt_alloc(ZT_MEM_OTHER, (size_t)U * sizeof *as->segs);
    as->nsegs = zt_alloc(ZT_MEM_OTHER, (size_t)U * sizeof *as->nsegs);
    int cap = 2 * eng->lay->nparams + 2;
    zt_adamw_seg *tmp = zt_alloc(ZT_MEM_OTHER, seg_table_bytes(cap));
    int ok = as->sc && as->mine && as->done && as->ready && as->unit_sumsq && as->segs && as->nsegs && tmp;
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
    be->zero(as->unit_sumsq, (size_t)U * sizeof(double)); /* a frozen unit's square sum, never written */
    return ZT_OK;
}

void zt_async_free(zt_engine *eng)
{
    zt_async *as = eng->async;
    if (!as)
        return;
    const zt_backend *be = eng->be;
    const int U = eng->lay->nunits;
    if (eng->step_queued) /* no download may land in a freed buffer */
        be->copy_wait();
    for (int u = 0; as->segs && u < U; u++)
        be->free(ZT_MEM_OTHER, as->segs[u], seg_table_bytes(as->nsegs[u]));
    zt_free(ZT_MEM_OTHER, as->segs, (size_t)U * sizeof *as->segs);
    zt_free(ZT_MEM_OTHER, as->nsegs, (size_t)U * sizeof *as->nsegs);
    be->free(ZT_MEM_OTHER, as->unit_sumsq, (size_t)U * sizeof(double));
    be->free(ZT_MEM_OTHER, as->sc, 2 * sizeof *as->sc); /* mine with it */
    be->free(ZT_MEM_OTHER, as->done, ring_bytes());
    be->host_free(ZT_MEM_OTHER, as->ready, ring_bytes());
    be->free(ZT_MEM_OTHER, as->sched, (size_t)as->sched_len * sizeof *as->sched);
    zt_free(ZT_MEM_OTHER, as, sizeof *as);
    eng->async = NULL;
}

/* the numbers only: the inputs were, or will be, uploaded for this step */
void zt_async_zero(zt_engine *eng) { eng->be->zero(eng->async->sc, ZT_STEP_OUTPUT_BYTES); }

/* The verdict (engine.h: the norm over the shard group, a skip on every rank when
 * any holds an inf or NaN), on the device.  A group of one judges its units alone:
 * replicas hold the same reduced shard bit for bit, so they judge alike without a
 * collective.  A group of several: each member judges its own units into mine (its
 * sum of squares S_r in unit order, its lowest bad unit), the S_r are summed over
 * the group in place on the device (S = sum_r S_r), and sc is judged from the one
 * value S: 0 + S = S, so the norm is sqrt(S) * unscale, the host's sum of the same
 * S_r, and a bad unit anywhere made its member's
 * S_r, hence S, non-finite, so every member skips. */
static void judge_step(zt_engine *eng, double max_grad_norm, double grad_unscale)
{
    const zt_backend *be = eng->be;
    zt_async *as = eng->async;
    if (eng->group_size == 1) {
        be->step_verdict(as->sc, as->unit_sumsq, eng->lay->nunits, max_grad_norm, grad_unscale);
        return;
    }
    double *s_r = (double *)((char *)as->mine + offsetof(zt_step_scalars, sumsq)); /* an address, not a read */
    be->step_verdict(as->mine, as->unit_sumsq, eng->lay->nunits, max_grad_norm, grad_unscale);
    zt_comm_sum_doubles(eng->comm, s_r, 1, ZT_SCOPE_SHARD);
    be->step_verdict(as->sc, s_r, 1, max_grad_norm, grad_unscale);
}

void zt_async_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr)
{
    zt_async *as = eng->async;
    if (as->sched) /* the verdict takes them from the schedule on the device */
        return;
    zt_adamw_step st = {lr, hp->weight_decay, hp->beta1, hp->beta2, hp->eps, eng->optimizer_steps + 1, 1.0f, 0};
    zt_adamw_unit_inputs(&as->in, &st, lr, st.t);
    const size_t o = ZT_STEP_OUTPUT_BYTES; /* not the device's loss scale after them */
    eng->be->upload((char *)as->sc + o, (const char *)&as->in + o, ZT_STEP_INPUT_BYTES);
}

/* the units' squares (of bf16(grad) where its rounding is pending: read only, the
 * sum of the values AdamW reads), then the verdict */
static void queue_verdict(zt_engine *eng, double max_grad_norm, double grad_unscale)
{
    for (int u = 0; u < eng->lay->nunits; u++) {
        const zt_unit_state *us = &eng->units[u];
        double *dst = eng->async->unit_sumsq + u;
        if (!us->grad) /* a frozen unit's stays 0 (zt_async_init) */
            continue;
        if (us->grad_round_pending)
            eng->be->sumsq_bf16_into(dst, us->grad, us->shard_numel);
        else
            eng->be->sumsq_into(dst, us->grad, eng->prec.master, us->shard_numel);
    }
    judge_step(eng, max_grad_norm, grad_unscale);
}

/* A skipped step's report: which unit was bad, agreed over the world (every rank
 * skips), from this rank's own verdict (mine in a group of several). */
static int read_skip(zt_engine *eng, const zt_step_scalars *h)
{
    eng->nonfinite_unit = -1;
    if (h->skip)
        zt_engine_agree_nonfinite(eng, (eng->group_size > 1 ? h + 1 : h)->first_bad, 1);
    return h->skip;
}

int zt_async_verdict(zt_engine *eng, double max_grad_norm, double grad_unscale, double *grad_norm, float *clip)
{
    queue_verdict(eng, max_grad_norm, grad_unscale);
    zt_step_scalars h[2]; /* sc and, in a group of several, mine */
    eng->be->to_host(h, eng->async->sc, (eng->group_size > 1 ? 2 : 1) * sizeof *h);
    *grad_norm = h->norm;
    *clip = h->clip;
    if (read_skip(eng, h))
        memset(&eng->last_audit, 0, sizeof eng->last_audit);
    return h->skip;
}

void zt_async_queue(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm, double grad_unscale)
{
    const zt_backend *be = eng->be;
    const zt_layout *lay = eng->lay;
    zt_async *as = eng->async;
    const zt_dtype md = eng->prec.master;
    queue_verdict(eng, max_grad_norm, grad_unscale);
    /* AdamW, one launch per unit.  adamw_unit reads lr and t from the device's inputs
     * (zt_async_inputs), not from st: st's are the values of the step that queued it,
     * which a captured step would replay for ever.  t is the count this step makes if
     * applied, which the finish confirms (no other step is queued before it) */
    const int cast_in_step = zt_engine_cast_in_step(eng);
    zt_adamw_step st = {lr, hp->weight_decay, hp->beta1, hp->beta2, hp->eps, eng->optimizer_steps + 1, 1.0f, 0};
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        if (!us->grad) /* frozen: nothing to update */
            continue;
        void *cast = cast_in_step && !us->gathered_alias ? us->gathered : NULL;
        st.g_bf16 = us->grad_round_pending; /* the rounding left pending, done as g is read */
        be->adamw_unit(us->master, us->m, us->v, us->grad, us->comp, md, us->shard_numel, as->segs[u], as->nsegs[u],
                       &st, as->sc, cast, eng->prec.compute);
    }
}

/* Its numbers aside into the step's own slot, for the readback: the next step zeroes
 * sc at once, while the download may still be waiting for this step's kernels, and
 * up to ZT_STEPS_IN_FLIGHT steps may be queued before the host reads any of them
 * (each in the slot the caller's ring gives it).
 * The copy is outside the captured update (which would copy into one slot for ever):
 * one small launch on the compute queue, after the update, before the next passes. */
void zt_async_readback(zt_engine *eng, int slot)
{
    const zt_backend *be = eng->be;
    zt_async *as = eng->async;
    zt_step_scalars *done = as->done + 2 * slot;
    be->copy(done, as->sc, (eng->group_size > 1 ? 2 : 1) * sizeof *done); /* mine follows sc */
    be->to_host_async(as->ready + 2 * slot, done, (eng->group_size > 1 ? 2 : 1) * sizeof *done);
}

int zt_async_finish(zt_engine *eng, int slot, int wait, double *grad_norm)
{
    zt_async *as = eng->async;
    /* the one wait for every step in flight: their numbers, for the log, the loss
     * scale and the schedule's count */
    if (wait)
        eng->be->copy_wait();
    const zt_step_scalars *h = as->ready + 2 * slot;
    as->cur = h;
    as->loss_sum = h->loss_sum;
    *grad_norm = h->norm;
    read_skip(eng, h);
    zt_adamw_audit audit = {h->audit_updated, h->audit_lost, h->audit_ratio_sum};
    if (h->skip)
        memset(&audit, 0, sizeof audit);
    else
        audit = zt_engine_group_audit(eng, audit);
    eng->last_audit = audit;
    if (!h->skip)
        eng->optimizer_steps++;
    return h->skip;
}

int zt_engine_set_schedule(zt_engine *eng, const zt_adamw_hparams *hp, const double *lr, long n, zt_err *err)
{
    zt_async *as = eng->async;
    if (!zt_async_fast(eng) || n <= 0)
        return ZT_OK;
    assert(!eng->step_queued && !as->sched);
    const zt_backend *be = eng->be;
    size_t bytes = (size_t)n * sizeof *as->sched;
    zt_step_input *tab = zt_alloc(ZT_MEM_OTHER, bytes);
    as->sched = be->alloc(ZT_MEM_OTHER, bytes);
    if (!tab || !as->sched) {
        zt_free(ZT_MEM_OTHER, tab, bytes);
        be->free(ZT_MEM_OTHER, as->sched, bytes);
        as->sched = NULL;
        return zt_fail(err, ZT_EFAIL, "out of memory for the learning-rate schedule on the device (%ld steps)", n);
    }
    as->sched_len = n;
    /* entry u: the inputs of the step that finds u updates applied, by the host's own
     * expressions (zt_adamw_unit_inputs with t = u + 1, zt_async_inputs's count) */
    for (long u = 0; u < n; u++) {
        zt_step_scalars in = {0};
        zt_adamw_step st = {lr[u], hp->weight_decay, hp->beta1, hp->beta2, hp->eps, u + 1, 1.0f, 0};
        zt_adamw_unit_inputs(&in, &st, lr[u], u + 1);
        tab[u] = (zt_step_input){in.lr, in.decay, in.neg_step, in.bc2_sqrt};
    }
    be->to_device(as->sched, tab, bytes);
    zt_free(ZT_MEM_OTHER, tab, bytes);
    /* the table's address and the count so far (a resume's) into the device's struct */
    as->in.sched = as->sched;
    as->in.sched_len = n;
    as->in.applied = eng->optimizer_steps;
    const size_t o = offsetof(zt_step_scalars, sched);
    be->to_device((char *)as->sc + o, (const char *)&as->in + o, ZT_STEP_SCHED_BYTES);
    return ZT_OK;
}

int zt_engine_step_lr(const zt_engine *eng, double *lr)
{
    const zt_async *as = eng->async;
    if (!as || !as->sched || !as->cur)
        return 0;
    *lr = as->cur->lr;
    return 1;
}

/* an address within the device struct, computed without reading it */
double *zt_engine_loss_sink(zt_engine *eng)
{
    return zt_async_fast(eng) ? (double *)((char *)eng->async->sc + offsetof(zt_step_scalars, loss_sum)) : NULL;
}

double zt_engine_step_loss_sum(const zt_engine *eng) { return zt_async_fast(eng) ? eng->async->loss_sum : 0.0; }

int zt_engine_seed_loss_scale(zt_engine *eng, const zt_loss_scaler *ls)
{
    zt_async *as = eng->async;
    if (!zt_async_fast(eng))
        return 0;
    assert(!eng->step_queued); /* the verdict of a queued step would update it first */
    as->in.ls = *ls;
    as->in.ls_used = ls->scale;
    as->in.ls_on = 1;
    as->ls_seeded = 1;
    /* the scaler only: not the passes' count nor the schedule's fields after it,
     * which the device advances */
    const size_t o = offsetof(zt_step_scalars, ls);
    eng->be->to_device((char *)as->sc + o, (const char *)&as->in + o, ZT_STEP_LS_BYTES);
    return 1;
}

void zt_engine_step_count(zt_engine *eng, const double *count_host)
{
    if (zt_async_fast(eng))
        eng->be->upload((char *)eng->async->sc + offsetof(zt_step_scalars, count), count_host,
                        sizeof(double));
}

const zt_step_scalars *zt_engine_grad_scale_src(const zt_engine *eng)
{
    return zt_async_fast(eng) ? eng->async->sc : NULL;
}

int zt_engine_step_loss_scale(const zt_engine *eng, zt_loss_scaler *ls, double *used)
{
    const zt_async *as = eng->async;
    if (!as || !as->ls_seeded)
        return 0;
    if (!as->cur)
        return 0;
    *ls = as->cur->ls;
    *used = as->cur->ls_used;
    return 1;
}
