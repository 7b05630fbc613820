/* engine_sizes.c — what the engine allocates, buffer by buffer (engine_impl.h's
 * sizes): zt_engine_create allocates exactly these and zt_engine_estimate sums them,
 * so the estimate cannot drift from the allocation. */
#include "engine_impl.h"

static size_t bytes_of(size_t numel, zt_dtype dt) { return numel * zt_dtype_size(dt); }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Stage 3: unit u stays gathered between steps (DeepSpeed's param persistence:
 * fewer parameters than the threshold). */
int zt_eng_persistent_unit(const zt_layout *lay, int u, int stage, const zt_overlap *ov)
{
    return stage == 3 && ov && ov->persistence > 0 && lay->units[u].numel < (size_t)ov->persistence;
}

/* Stage 3's pool of gathered buffers (init and estimate agree on it): one for the
 * root unit and one for the layer unit in use, when they are not persistent, and
 * one per unit the prefetch may gather ahead.  How far ahead is bounded by the
 * depth, by how many of the smallest layer units fit the prefetch bucket (the next
 * unit always may), and by how many fit under max_live beside the root and the
 * largest layer unit. */
static int gather_pool_slots(const zt_layout *lay, int stage, const zt_overlap *ov, size_t *slot_numel)
{
    *slot_numel = 0;
    if (stage != 3)
        return 0;
    int root_np = !zt_eng_persistent_unit(lay, lay->root_unit, stage, ov), layers = 0;
    size_t min_layer = 0, max_layer = 0, root = lay->units[lay->root_unit].padded_numel;
    for (int u = 0; u < lay->nunits; u++) {
        size_t P = lay->units[u].padded_numel;
        if (zt_eng_persistent_unit(lay, u, stage, ov))
            continue;
        *slot_numel = max_sz(*slot_numel, P);
        if (u == lay->root_unit)
            continue;
        layers++;
        min_layer = !min_layer || P < min_layer ? P : min_layer;
        max_layer = max_sz(max_layer, P);
    }
    int prefetch = ov && (ov->forward_prefetch || ov->backward_prefetch != ZT_BACKWARD_PREFETCH_NONE);
    long ahead = prefetch && layers > 0 ? (ov->prefetch_depth > 0 ? ov->prefetch_depth : 1) : 0;
    if (ahead > 0 && ov->prefetch_bucket > 0) {
        long fit = (long)((size_t)ov->prefetch_bucket / min_layer);
        ahead = fit < 1 ? 1 : fit < ahead ? fit : ahead;
    }
    if (ahead > 0 && ov->max_live > 0) {
        size_t held = (root_np ? root : 0) + max_layer;
        long fit = (size_t)ov->max_live > held ? (long)(((size_t)ov->max_live - held) / min_layer) : 0;
        ahead = fit < ahead ? fit : ahead;
    }
    if (ahead > layers - 1)
        ahead = layers > 0 ? layers - 1 : 0;
    /* LoRA: a layer's adapter unit is held beside its base unit (llama.c), one slot more,
     * where layer units are gathered on demand at all */
    return root_np + (layers > 0) + (lay->layer_adapter_unit != NULL && layers > 0) + (int)ahead;
}

/* DeepSpeed's buckets split a unit's reduction (all-gather) into pieces of this many
 * elements per shard-group member, when some unit's shard is longer; 0: whole units. */
static size_t bucket_piece(const zt_layout *lay, long bucket, int G)
{
    if (bucket <= 0 || G <= 1)
        return 0;
    size_t piece = (size_t)bucket / (size_t)G, max_shard = 0;
    piece = piece ? piece : 1;
    for (int u = 0; u < lay->nunits; u++)
        max_shard = max_sz(max_shard, lay->units[u].padded_numel / (size_t)G);
    return max_shard > piece ? piece : 0;
}

size_t zt_eng_reduce_piece(const zt_layout *lay, int stage, int G, const zt_overlap *ov)
{
    return ov && stage >= 1 ? bucket_piece(lay, ov->reduce_bucket, G) : 0;
}

size_t zt_eng_gather_piece(const zt_layout *lay, int stage, int G, const zt_overlap *ov)
{
    return ov && (stage == 1 || stage == 2) ? bucket_piece(lay, ov->allgather_bucket, G) : 0;
}

/* An overlapped fp32 reduce-scatter sends the staging itself, and overlapped
 * pieces read it until the last one starts, so a second staging takes the next
 * unit's gradient meanwhile. */
static int needs_spare_staging(const zt_layout *lay, zt_precision prec, int stage, int group_size,
                               const zt_overlap *ov)
{
    return stage >= 2 && group_size > 1 && ov && ov->overlap_reduce &&
           (prec.reduce == ZT_F32 || zt_eng_reduce_piece(lay, stage, group_size, ov));
}


/* ---- sizes: one table for the allocation and the estimate ------------------
 *
 * zt_eng_unit_size says what one unit holds, how long and in which dtype; zt_eng_shared_size
 * what the engine holds beside the units.  zt_engine_create allocates exactly
 * these and zt_engine_estimate sums them (llm.c's fill_in_activation_sizes), so
 * the estimate cannot drift from the allocation.  The dtypes are the plan's rule
 * applied to each buffer; each unit records them, and zt_engine_check_dtypes
 * holds them against the plan at every hook. */


zt_unit_sizes zt_eng_unit_size(const zt_layout *lay, int u, zt_precision prec, int stage, int G,
                            const zt_overlap *ov)
{
    zt_unit_sizes z = {0};
    z.trained = !lay->units[u].frozen;
    z.full = lay->units[u].padded_numel;
    z.shard_numel = z.full / (size_t)G;
    z.grad_numel = !z.trained ? 0 : stage <= 1 ? z.full : z.shard_numel;
    z.master_dt = z.grad_dt = z.optim_dt = prec.master;
    /* a frozen unit's shard in the load dtype: nothing is accumulated into it, so an fp32
     * upcast of bf16-loaded weights would only double its bytes (FSDP keeps a frozen
     * parameter as loaded) */
    z.master_dt = z.trained ? prec.master : prec.load;
    z.compensated = z.trained && prec.compensated && prec.master != ZT_F32;
    z.gathered_alias = stage == 0 && prec.compute == z.master_dt;
    z.gathered_own = (stage <= 2 && !z.gathered_alias) || zt_eng_persistent_unit(lay, u, stage, ov);
    z.gathered_dt = z.gathered_alias ? prec.master : prec.compute;
    return z;
}


zt_shared_sizes zt_eng_shared_size(const zt_layout *lay, zt_precision prec, int stage, int G,
                                const zt_overlap *overlap)
{
    zt_shared_sizes z = {0};
    size_t max_full = 0, max_shard = 0;
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_sizes us = zt_eng_unit_size(lay, u, prec, stage, G, overlap);
        if (!us.trained) /* staged and reduced never: a frozen unit has no gradient */
            continue;
        if (u == lay->root_unit)
            z.staging_root_numel = max_sz(z.staging_root_numel, us.full);
        else
            z.staging_layers_numel = max_sz(z.staging_layers_numel, us.full);
        max_full = max_sz(max_full, us.full);
        max_shard = max_sz(max_shard, us.shard_numel);
    }
    z.spare_numel = needs_spare_staging(lay, prec, stage, G, overlap) ? z.staging_layers_numel : 0;
    /* comm_full holds a unit's gradient in the reduce dtype when that is not
     * fp32 (or not the master dtype, for the stage 0-1 reduction); comm_shard
     * and comm_slices take a reduce-scatter's result and the slices it sums, so
     * they exist only when there is a group to talk to. */
    size_t rs = zt_dtype_size(prec.reduce);
    int need_full = prec.reduce != ZT_F32 || (stage <= 1 && prec.reduce != prec.master);
    z.comm_full_bytes = need_full ? max_full * rs : 0;
    z.comm_shard_bytes = G > 1 ? max_shard * rs : 0;
    z.comm_slices_bytes = G > 1 ? max_full * rs : 0;
    /* a reduction in pieces (reduce_bucket) holds one piece of every member per
     * slot: stages 2-3 need nothing longer; stage 1 still rounds whole gradients
     * in grad_end */
    size_t rp = zt_eng_reduce_piece(lay, stage, G, overlap), slots = ZT_PIECE_SLOTS;
    if (rp) {
        z.comm_shard_bytes = slots * rp * rs;
        z.comm_slices_bytes = slots * rp * (size_t)G * rs;
        z.comm_full_bytes =
            stage >= 2 ? slots * rp * (size_t)G * rs : max_sz(z.comm_full_bytes, slots * rp * (size_t)G * rs);
    }
    size_t gp = zt_eng_gather_piece(lay, stage, G, overlap);
    z.comm_gather_bytes = gp ? gp * (size_t)(G + 1) * zt_dtype_size(prec.compute) : 0;
    size_t slot_numel;
    z.pool_slots = gather_pool_slots(lay, stage, overlap, &slot_numel);
    z.pool_bytes = z.pool_slots ? bytes_of(slot_numel, prec.compute) : 0;
    return z;
}

zt_engine_bytes zt_engine_estimate(const zt_layout *lay, zt_precision prec, int stage, int group_size,
                                   const zt_overlap *overlap)
{
    /* the sum of the tables zt_engine_create allocates from */
    zt_engine_bytes b = {0};
    int G = stage == 0 ? 1 : group_size;
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_sizes z = zt_eng_unit_size(lay, u, prec, stage, G, overlap);
        b.master += bytes_of(z.shard_numel, z.master_dt) * (z.compensated ? 2 : 1);
        b.grads += bytes_of(z.grad_numel, z.grad_dt);
        b.optim += z.trained ? 2 * bytes_of(z.shard_numel, z.optim_dt) : 0;
        b.gathered += z.gathered_own ? bytes_of(z.full, z.gathered_dt) : 0;
    }
    zt_shared_sizes z = zt_eng_shared_size(lay, prec, stage, G, overlap);
    b.gathered += (size_t)z.pool_slots * z.pool_bytes;
    b.comm = (z.staging_root_numel + z.staging_layers_numel + z.spare_numel) * sizeof(float) + z.comm_full_bytes +
             z.comm_shard_bytes + z.comm_slices_bytes + z.comm_gather_bytes;
    if (overlap && (overlap->offload_optimizer || overlap->offload_params) && stage >= 1) {
        size_t hg, hc;
        zt_offload_staging_bytes(lay, prec, stage, G, overlap->offload_delayed_update, &hg, &hc);
        *(stage >= 2 || overlap->offload_delayed_update ? &b.grads : &b.comm) += hg;
        b.comm += hc;
        b.host = b.master + b.optim + hg + hc;
    }
    return b;
}

zt_engine_bytes zt_engine_state_bytes(const zt_engine *eng)
{
    /* what is allocated, buffer by buffer (the accounting tests hold it equal to
     * the estimate and to the allocator's counters) */
    zt_engine_bytes b = {0};
    for (int u = 0; u < eng->lay->nunits; u++) {
        const zt_unit_state *us = &eng->units[u];
        b.master += bytes_of(us->shard_numel, us->master_dt) * (us->comp ? 2 : 1);
        b.grads += bytes_of(us->grad_numel, us->grad_dt);
        b.optim += us->m ? 2 * bytes_of(us->shard_numel, us->optim_dt) : 0;
        if (us->gathered_own)
            b.gathered += bytes_of(eng->lay->units[u].padded_numel, us->gathered_dt);
    }
    for (int i = 0; i < ZT_GATHER_POOL; i++)
        if (eng->pool[i])
            b.gathered += eng->pool_bytes;
    b.comm = (eng->staging_root_numel + eng->staging_layers_numel + eng->staging_spare_numel) * sizeof(float) +
             eng->comm_full_bytes + eng->comm_shard_bytes + eng->comm_slices_bytes + eng->comm_gather_bytes +
             eng->host_cast_bytes;
    *(eng->host_grads ? &b.grads : &b.comm) += eng->host_grad_bytes;
    if (eng->offload)
        b.host = b.master + b.optim + eng->host_grad_bytes + eng->host_cast_bytes;
    return b;
}
