/* offload.c — the sharded state in host memory (engine_impl.h, "offload.c"),
 * DeepSpeed's ZeRO-Offload and FSDP's CPUOffload on a device.
 *
 * Bytes per parameter that leave the device, for a shard group of G with an fp32
 * master (the AdamW case of the issue): master 4 + m 4 + v 4 (+ Kahan 2 with a
 * 16-bit master) out of the 16 the state takes, divided by G as the shards are;
 * the host also holds a copy of the gradient shard at stages 2-3 (4 / G).
 * What crosses the host-device link per step, per rank:
 *   down  the gradient shard, P/G master-dtype elements per unit: at stages 2-3
 *         queued on the device's copy queue as each unit's reduction completes in
 *         the last backward, so the copies run beside the rest of the backward;
 *         at stage 1 at the step;
 *   up    the parameter shard, P/G compute-dtype elements per gather: once per
 *         step at stages 1-2, at every gather at stage 3 (the shard lives on the
 *         host between its uses). */
#include <string.h>

#include "../core/mem.h"
#include "engine_impl.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

int zt_offload_wanted(const zt_backend *be, int stage, const zt_overlap *ov)
{
    return ov && (ov->offload_optimizer || ov->offload_params) && stage >= 1 && !be->host_visible;
}

const zt_backend *zt_offload_state_table(const zt_backend *be, int offload)
{
    return offload ? zt_backend_cpu() : be;
}

void *zt_offload_state_alloc(const zt_engine *eng, zt_mem_cat cat, size_t bytes)
{
    if (!eng->offload)
        return eng->be->alloc(cat, bytes);
    void *p = eng->be->host_alloc(cat, bytes); /* pinned on a device; not zeroed (backend.h) */
    if (p) {
        memset(p, 0, bytes);
        zt_mem_host_account(cat, bytes);
    }
    return p;
}

void zt_offload_state_free(const zt_engine *eng, zt_mem_cat cat, void *p, size_t bytes)
{
    if (!eng->offload) {
        eng->be->free(cat, p, bytes);
        return;
    }
    if (!p)
        return;
    eng->be->host_free(cat, p, bytes);
    zt_mem_host_unaccount(cat, bytes);
}

/* The largest unit shard: what one staging buffer must hold. */
static size_t max_shard(const zt_layout *lay, int group_size)
{
    size_t m = 0;
    for (int u = 0; u < lay->nunits; u++)
        m = max_sz(m, lay->units[u].padded_numel / (size_t)group_size);
    return m;
}

/* Stages 2-3 copy each unit's gradient shard down as its reduction completes, so
 * each unit has a host shard of its own (as DeepSpeed's offloaded gradient
 * partition); stage 1 reduces at the step and stages one shard at a time. */
static int early_copies(int stage) { return stage >= 2; }

void zt_offload_staging_bytes(const zt_layout *lay, zt_precision prec, int stage, int group_size, size_t *grads,
                              size_t *cast)
{
    size_t S = max_shard(lay, group_size), g = S;
    if (early_copies(stage)) {
        g = 0;
        for (int u = 0; u < lay->nunits; u++)
            g += lay->units[u].padded_numel / (size_t)group_size;
    }
    *grads = g * zt_dtype_size(prec.master);
    *cast = S * zt_dtype_size(prec.compute);
}

int zt_offload_init(zt_engine *eng, zt_err *err)
{
    eng->host_grad_unit = -1;
    if (!eng->offload)
        return ZT_OK;
    size_t S = max_shard(eng->lay, eng->group_size);
    eng->host_cast_bytes = S * zt_dtype_size(eng->prec.compute);
    eng->host_cast = zt_offload_state_alloc(eng, ZT_MEM_COMM, eng->host_cast_bytes);
    int ok = eng->host_cast != NULL;
    if (early_copies(eng->stage)) {
        int n = eng->lay->nunits;
        eng->host_grads = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->host_grads);
        eng->host_grads_ready = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->host_grads_ready);
        ok = ok && eng->host_grads && eng->host_grads_ready;
        for (int u = 0; ok && u < n; u++) {
            size_t b = eng->units[u].shard_numel * zt_dtype_size(eng->units[u].grad_dt);
            ok = (eng->host_grads[u] = zt_offload_state_alloc(eng, ZT_MEM_GRADS, b)) != NULL;
            eng->host_grad_bytes += b;
        }
    } else {
        eng->host_grad_bytes = S * zt_dtype_size(eng->prec.master);
        ok = ok && (eng->host_grad = zt_offload_state_alloc(eng, ZT_MEM_COMM, eng->host_grad_bytes));
    }
    if (!ok)
        return zt_fail(err, ZT_EFAIL, "out of pinned host memory for the offload's gradient shards and staging "
                       "(%zu bytes)", eng->host_grad_bytes + eng->host_cast_bytes);
    return ZT_OK;
}

void zt_offload_free(zt_engine *eng)
{
    if (eng->host_grads) {
        eng->be->copy_wait(); /* no copy may land in a freed buffer */
        for (int u = 0; u < eng->lay->nunits; u++)
            zt_offload_state_free(eng, ZT_MEM_GRADS, eng->host_grads[u],
                                  eng->units[u].shard_numel * zt_dtype_size(eng->units[u].grad_dt));
    }
    if (eng->lay) {
        zt_free(ZT_MEM_OTHER, eng->host_grads, (size_t)eng->lay->nunits * sizeof *eng->host_grads);
        zt_free(ZT_MEM_OTHER, eng->host_grads_ready, (size_t)eng->lay->nunits * sizeof *eng->host_grads_ready);
    }
    eng->host_grads = NULL;
    eng->host_grads_ready = NULL;
    zt_offload_state_free(eng, ZT_MEM_COMM, eng->host_grad, eng->host_grad_bytes);
    zt_offload_state_free(eng, ZT_MEM_COMM, eng->host_cast, eng->host_cast_bytes);
    eng->host_grad = eng->host_cast = NULL;
}

void zt_offload_shard_to_compute(zt_engine *eng, int u, void *dst, size_t k, size_t n)
{
    const zt_unit_state *us = &eng->units[u];
    zt_dtype cd = eng->prec.compute;
    const void *src = (const char *)us->master + k * zt_dtype_size(us->master_dt);
    if (!eng->offload) {
        eng->be->convert(dst, cd, src, us->master_dt, n);
        return;
    }
    /* converted on the host's cores (the same rounding as the device's convert),
     * then one upload of the compute-dtype bytes, half the master's in bf16 */
    eng->sbe->convert(eng->host_cast, cd, src, us->master_dt, n);
    eng->be->to_device(dst, eng->host_cast, n * zt_dtype_size(cd));
}

void zt_offload_gather_master(zt_engine *eng, int u, void *full)
{
    const zt_unit_state *us = &eng->units[u];
    size_t P = eng->lay->units[u].padded_numel, es = zt_dtype_size(us->master_dt);
    /* this rank's shard into its own slot, the group fills the others in place */
    eng->be->to_device((char *)full + (size_t)eng->group_rank * us->shard_numel * es, us->master,
                       us->shard_numel * es);
    if (eng->group_size == 1)
        return;
    zt_comm_op op;
    zt_comm_start_allgather(eng->comm, &op, full, P, us->master_dt);
    zt_comm_wait(eng->comm, &op);
}

void zt_offload_grad_done(zt_engine *eng, int u)
{
    if (!eng->host_grads || u < 0)
        return;
    eng->host_grads_ready[u] = 0; /* the device's shard changed since any earlier copy */
    if (!eng->sync_backward || eng->reduce_unit == u || eng->pieces.unit == u)
        return; /* not the last micro-batch, or its reduction is still in flight */
    const zt_unit_state *us = &eng->units[u];
    eng->be->to_host_async(eng->host_grads[u], us->grad, us->shard_numel * zt_dtype_size(us->grad_dt));
    eng->host_grads_ready[u] = 1;
    eng->grads_copied_early++;
}

void zt_offload_step_begin(zt_engine *eng)
{
    eng->host_grad_unit = -1;
    if (eng->host_grads)
        eng->be->copy_wait();
}

void zt_offload_zero_grads(zt_engine *eng)
{
    if (!eng->host_grads)
        return;
    eng->be->copy_wait();
    memset(eng->host_grads_ready, 0, (size_t)eng->lay->nunits * sizeof *eng->host_grads_ready);
}

const void *zt_offload_grad(zt_engine *eng, int u)
{
    const zt_unit_state *us = &eng->units[u];
    if (eng->host_grads) { /* stages 2-3: copied during the backward, else now */
        if (!eng->host_grads_ready[u]) {
            eng->be->to_host(eng->host_grads[u], us->grad, us->shard_numel * zt_dtype_size(us->grad_dt));
            eng->host_grads_ready[u] = 1;
        }
        return eng->host_grads[u];
    }
    if (eng->host_grad_unit != u) {
        /* stage 1 keeps the reduced shard at the front of its full-length buffer,
         * stages 2-3 hold only the shard: either way the first P/G elements */
        eng->be->to_host(eng->host_grad, us->grad, us->shard_numel * zt_dtype_size(us->grad_dt));
        eng->host_grad_unit = u;
    }
    return eng->host_grad;
}
