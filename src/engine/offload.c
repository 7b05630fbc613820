/* offload.c — the sharded state in host memory (engine_impl.h, "offload.c"),
 * DeepSpeed's ZeRO-Offload and FSDP's CPUOffload on a device.
 *
 * Bytes per parameter that leave the device, for a shard group of G with an fp32
 * master (the AdamW case of the issue): master 4 + m 4 + v 4 (+ Kahan 2 with a
 * 16-bit master) out of the 16 the state takes, divided by G as the shards are.
 * What crosses the host-device link per step, per rank: the gradient shard down
 * (P/G master-dtype elements per unit) and the parameter shard up (P/G compute-
 * dtype elements per gather: once per step at stages 1-2, at every gather at
 * stage 3, where the shard lives on the host between its uses). */
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

size_t zt_offload_staging_bytes(const zt_layout *lay, zt_precision prec, int group_size)
{
    size_t S = max_shard(lay, group_size);
    return S * zt_dtype_size(prec.master) + S * zt_dtype_size(prec.compute);
}

int zt_offload_init(zt_engine *eng, zt_err *err)
{
    eng->host_grad_unit = -1;
    if (!eng->offload)
        return ZT_OK;
    size_t S = max_shard(eng->lay, eng->group_size);
    eng->host_grad_bytes = S * zt_dtype_size(eng->prec.master);
    eng->host_cast_bytes = S * zt_dtype_size(eng->prec.compute);
    eng->host_grad = zt_offload_state_alloc(eng, ZT_MEM_COMM, eng->host_grad_bytes);
    eng->host_cast = zt_offload_state_alloc(eng, ZT_MEM_COMM, eng->host_cast_bytes);
    if (!eng->host_grad || !eng->host_cast)
        return zt_fail(err, ZT_EFAIL, "out of pinned host memory for the offload's staging (%zu bytes)",
                       eng->host_grad_bytes + eng->host_cast_bytes);
    return ZT_OK;
}

void zt_offload_free(zt_engine *eng)
{
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

const void *zt_offload_grad(zt_engine *eng, int u)
{
    const zt_unit_state *us = &eng->units[u];
    if (eng->host_grad_unit != u) {
        /* stage 1 keeps the reduced shard at the front of its full-length buffer,
         * stages 2-3 hold only the shard: either way the first P/G elements */
        eng->be->to_host(eng->host_grad, us->grad, us->shard_numel * zt_dtype_size(us->grad_dt));
        eng->host_grad_unit = u;
    }
    return eng->host_grad;
}
