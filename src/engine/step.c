/* step.c — the optimizer step's one entry and its pieces (engine.h): which update
 * runs (the asynchronous one of async_step.c, read back at once in exact mode or
 * later in fast mode, or the offloaded one below, the unit loop with offload.c's
 * prepare and release hooks around each unit) is decided here, above all of them:
 * they call the engine's unit primitives (engine.c) and the shared rules
 * (step_rules.c), never the step nor each other, so the calls within src/engine
 * run one way.
 * docs/architecture.md, "One optimizer step", walks through it. */
#include "async_step.h"

#include <assert.h>
#include <string.h>

/* The offloaded update (t = eng->optimizer_steps), DeepSpeed's step() over its
 * sub-groups: the same unit loop as the device's, unit by unit in the order the
 * gradient shards came down, with two hooks around each unit's AdamW on the host's
 * cores: prepare (its gradient shard in host memory, waiting for its own copy down
 * only) and release (its compute-dtype host copy rewritten), after which its upload
 * and gather are queued, to run while the host updates the next unit.  With the
 * delayed update the loop runs on offload.c's thread instead. */
static int offload_update(zt_engine *eng, const zt_adamw_hparams *hp, double lr, float clip)
{
    if (zt_offload_update_delayed(eng, hp, lr, clip))
        return 0;
    int n = eng->lay->nunits, order[n];
    zt_adamw_audit audits[eng->lay->nparams];
    memset(audits, 0, sizeof audits);
    zt_offload_step_order(eng, order);
    for (int i = 0; i < n; i++) {
        int u = order[i];
        if (eng->lay->units[u].frozen) /* LoRA's base: nothing to update, its gathered copy stands */
            continue;
        const void *g = zt_offload_prepare(eng, u); /* a copy of grad: pending rounding and all */
        zt_engine_adamw_unit(eng, u, hp, lr, eng->optimizer_steps, clip, g, eng->units[u].grad_round_pending, audits);
        zt_offload_release(eng, u);
        zt_engine_refresh_unit(eng, u); /* stages 1-2 (and stage 3's persistent units) */
    }
    zt_engine_sum_audits(eng, audits);
    return 0;
}

/* The asynchronous update's launches after the prelude: the verdict and AdamW, then
 * the gathered copies refreshed. */
static void async_launch(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                         double grad_unscale)
{
    zt_async_queue(eng, hp, lr, max_grad_norm, grad_unscale);
    if (!zt_engine_cast_in_step(eng)) /* unchanged masters after a skip give the same copies */
        zt_engine_refresh_gathered(eng);
}

/* The asynchronous step taken whole: its inputs, its launches, its readback and the
 * read, nothing else in flight. */
static int async_whole_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                            double grad_unscale, double *grad_norm)
{
    assert(!eng->step_queued);
    zt_async_inputs(eng, hp, lr);
    async_launch(eng, hp, lr, max_grad_norm, grad_unscale);
    zt_async_readback(eng, 0); /* nothing else in flight: any slot */
    return zt_async_finish(eng, 0, 1, grad_norm);
}

int zt_engine_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                   double grad_unscale, double *grad_norm)
{
    zt_engine_step_prelude(eng);
    /* exact and fast mode alike: the verdict and AdamW on the device, the numbers read
     * at once (fast mode may instead queue it and read later: zt_engine_step_queue) */
    if (!eng->offload)
        return async_whole_step(eng, hp, lr, max_grad_norm, grad_unscale, grad_norm);
    if (zt_offload_step_begin(eng)) /* offloaded: the copies down joined; a delayed update landed */
        zt_engine_refresh_gathered(eng); /* its parameters become the ones the device computes with */
    float clip; /* the same verdict, read at once: AdamW is the host's */
    if (zt_async_verdict(eng, max_grad_norm, grad_unscale, grad_norm, &clip))
        return 1;
    eng->optimizer_steps++;
    return offload_update(eng, hp, lr, clip); /* on the host's cores, unit by unit, the uploads beside them */
}

/* ---- the step in pieces (engine.h) --------------------------------------------- */

int zt_engine_runs_ahead(const zt_engine *eng) { return zt_async_fast(eng); }

int zt_engine_step_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr, zt_err *err)
{
    if (!zt_async_fast(eng))
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
    async_launch(eng, hp, lr, max_grad_norm, grad_unscale);
}

void zt_engine_step_readback(zt_engine *eng, int slot)
{
    /* several steps in flight only with the schedule on the device (each step's lr
     * and t are then decided there) */
    assert(eng->async && eng->step_queued < (eng->async->sched ? ZT_STEPS_IN_FLIGHT : 1));
    assert(slot >= 0 && slot < ZT_STEP_SLOTS);
    zt_async_readback(eng, slot);
    eng->step_queued++;
}

void zt_engine_step_queue(zt_engine *eng, int slot, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                          double grad_unscale)
{
    if (!zt_async_fast(eng)) {
        assert(!eng->step_queued); /* exact mode: the whole step now, its one outcome kept for the finish */
        eng->queued_skip = zt_engine_step(eng, hp, lr, max_grad_norm, grad_unscale, &eng->queued_norm);
        eng->step_queued = 1;
        return;
    }
    zt_async_inputs(eng, hp, lr);
    zt_engine_step_launch(eng, hp, lr, max_grad_norm, grad_unscale);
    zt_engine_step_readback(eng, slot);
}

int zt_engine_step_finish(zt_engine *eng, int slot, int wait, double *grad_norm)
{
    assert(eng->step_queued);
    eng->step_queued--;
    if (!zt_async_fast(eng)) {
        *grad_norm = eng->queued_norm;
        return eng->queued_skip;
    }
    return zt_async_finish(eng, slot, wait, grad_norm);
}
