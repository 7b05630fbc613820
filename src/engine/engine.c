/* engine.c — parameter, gradient and optimizer-state buffers for ZeRO stages
 * 0-3 over the collective interface (see engine.h). */
#include "engine_impl.h"
#include "async_step.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"

static size_t bytes_of(size_t numel, zt_dtype dt) { return numel * zt_dtype_size(dt); }

/* next_fwd / next_bwd from the layer order: the root unit comes first in the
 * forward (its embeddings) and first in the backward (its lm_head). */
static int unit_order(zt_engine *eng)
{
    const zt_layout *lay = eng->lay;
    size_t bytes = (size_t)lay->nunits * sizeof(int);
    eng->next_fwd = zt_alloc(ZT_MEM_OTHER, bytes);
    eng->next_bwd = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!eng->next_fwd || !eng->next_bwd)
        return ZT_EFAIL;
    for (int u = 0; u < lay->nunits; u++)
        eng->next_fwd[u] = eng->next_bwd[u] = -1;
    int prev = lay->root_unit;
    for (int l = 0; l < lay->num_layers; l++) {
        int u = lay->layer_unit[l];
        if (u == lay->root_unit || u == prev)
            continue;
        eng->next_fwd[prev] = u;
        if (prev != lay->root_unit)
            eng->next_bwd[u] = prev;
        prev = u;
    }
    if (prev != lay->root_unit)
        eng->next_bwd[lay->root_unit] = prev;
    return ZT_OK;
}

/* ---- unit phases (FSDP's HandleTrainingState) ------------------------------ */

const char *zt_unit_phase_name(zt_unit_phase ph)
{
    static const char *names[] = {"IDLE", "FORWARD", "BACKWARD_PRE", "BACKWARD_POST"};
    return ph >= ZT_UNIT_IDLE && ph <= ZT_UNIT_BACKWARD_POST ? names[ph] : "?";
}

#define PHASE(p) (1u << (p))

/* A hook found unit u in a phase it does not accept: the model broke the
 * protocol of param_owner.h, or the engine lost track.  A broken invariant, so
 * it stops the process (NDEBUG or not) with what was expected. */
static void expect_phase(const zt_engine *eng, int u, unsigned allowed, const char *hook)
{
    zt_unit_phase ph = eng->units[u].phase;
    if (allowed & PHASE(ph))
        return;
    char want[96] = "";
    for (int p = ZT_UNIT_IDLE; p <= ZT_UNIT_BACKWARD_POST; p++)
        if (allowed & PHASE(p)) {
            size_t len = strlen(want);
            snprintf(want + len, sizeof want - len, "%s%s", len ? " or " : "", zt_unit_phase_name(p));
        }
    fprintf(stderr, "ztrain: engine invariant broken: %s on unit %d in phase %s (expected %s)\n", hook, u,
            zt_unit_phase_name(ph), want);
    abort();
}

/* The plan's dtypes must hold for unit u's buffers (zt_engine_check_dtypes);
 * like a phase, a violation is a broken invariant. */
static void expect_dtypes(const zt_engine *eng, int u, const char *hook)
{
    const char *why = zt_engine_check_dtypes(eng, u);
    if (!why)
        return;
    fprintf(stderr, "ztrain: engine invariant broken: %s on unit %d: %s\n", hook, u, why);
    abort();
}

/* Unit u's gradient went through dtype dt on its way to the accumulator (the
 * buffer handed to the collective, or the rounding that stands for it on one
 * rank): recorded where it happens and held against the plan. */
static void reduced_through(zt_engine *eng, int u, zt_dtype dt, const char *hook)
{
    eng->units[u].reduced_dt = dt;
    eng->units[u].reduced_valid = 1;
    expect_dtypes(eng, u, hook);
}

zt_comm_device zt_engine_comm_device(const zt_backend *be)
{
    return (zt_comm_device){.to_host = be->to_host, .to_device = be->to_device, .copy = be->copy,
                            .host_alloc = be->host_alloc, .host_free = be->host_free, .stream = be->stream(),
                            .queue_host = be->queue_host, .host_address = be->host_address};
}

static void engine_free(zt_engine *eng);

/* Fill eng (zeroed by the caller); on failure everything it took is freed again. */
/* The buffers beside the units (engine_sizes.c's shared sizes): 1 when every one
 * that has a size was allocated. */
static int alloc_shared(zt_engine *eng, const zt_overlap *overlap)
{
    const zt_layout *lay = eng->lay;
    const zt_backend *be = eng->be;
    const int stage = eng->stage;
    /* Gradient staging is fp32: matrix products accumulate weight gradients in
     * fp32.  It is transient (one unit's backward), so it counts as a
     * communication buffer, not as model state. */
    zt_shared_sizes z = zt_eng_shared_size(lay, eng->prec, stage, eng->group_size, overlap);
    eng->staging_root_numel = z.staging_root_numel;
    eng->staging_layers_numel = z.staging_layers_numel;
    eng->staging_spare_numel = z.spare_numel;
    eng->comm_full_bytes = z.comm_full_bytes;
    eng->comm_shard_bytes = z.comm_shard_bytes;
    eng->comm_slices_bytes = z.comm_slices_bytes;
    eng->comm_gather_bytes = z.comm_gather_bytes;
    eng->reduce_piece = zt_eng_reduce_piece(lay, stage, eng->group_size, overlap);
    eng->gather_piece = zt_eng_gather_piece(lay, stage, eng->group_size, overlap);
    eng->pool_bytes = z.pool_bytes;
    eng->staging_root = be->alloc(ZT_MEM_COMM, z.staging_root_numel * sizeof(float));
    eng->staging_layers = be->alloc(ZT_MEM_COMM, z.staging_layers_numel * sizeof(float));
    eng->staging_spare = be->alloc(ZT_MEM_COMM, z.spare_numel * sizeof(float));
    eng->comm_full = be->alloc(ZT_MEM_COMM, z.comm_full_bytes);
    eng->comm_shard = be->alloc(ZT_MEM_COMM, z.comm_shard_bytes);
    eng->comm_slices = be->alloc(ZT_MEM_COMM, z.comm_slices_bytes);
    eng->comm_gather = be->alloc(ZT_MEM_COMM, z.comm_gather_bytes);
    int ok = (!z.staging_root_numel || eng->staging_root) && (!z.staging_layers_numel || eng->staging_layers) &&
             (!z.spare_numel || eng->staging_spare) && (!z.comm_full_bytes || eng->comm_full) &&
             (!z.comm_shard_bytes || eng->comm_shard) && (!z.comm_slices_bytes || eng->comm_slices) &&
             (!z.comm_gather_bytes || eng->comm_gather);
    assert(z.pool_slots <= ZT_GATHER_POOL);
    for (int i = 0; i < z.pool_slots; i++)
        ok = ok && (eng->pool[i] = be->alloc(ZT_MEM_GATHERED, z.pool_bytes));
    return ok;
}

static int engine_init(zt_engine *eng, const zt_backend *be, const zt_layout *lay, zt_precision prec, int stage,
                       const zt_overlap *overlap, zt_comm *comm, zt_err *err)
{
    memset(eng, 0, sizeof *eng);
    eng->be = be;
    eng->lay = lay;
    eng->prec = prec;
    eng->stage = stage;
    eng->comm = comm;
    eng->group_size = stage == 0 ? 1 : comm->shard_size;
    eng->group_rank = stage == 0 ? 0 : comm->shard_rank;
    eng->gather_unit = eng->reduce_unit = eng->pieces.unit = eng->nonfinite_unit = -1;
    if (overlap)
        eng->overlap = *overlap;
    if (stage < 0 || stage > 3)
        return zt_fail(err, ZT_EINPUT, "ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    if (lay->shard_group % comm->shard_size != 0)
        return zt_fail(err, ZT_EFAIL, "layout padded to %d, not a multiple of the shard group %d",
                       lay->shard_group, comm->shard_size);
    /* a device's buffers cannot go to MPI as they are: unless the caller put the
     * collectives on NCCL, they go through host staging buffers */
    if (!be->host_visible && comm->path == ZT_COMM_HOST) {
        zt_comm_device dev = zt_engine_comm_device(be);
        int rc = zt_comm_set_device(comm, ZT_COMM_STAGED, &dev, err);
        if (rc)
            return rc;
    }
    /* offload (offload.c): the state buffers below come from host memory, run by the CPU's table */
    eng->offload = zt_offload_wanted(be, stage, overlap);
    eng->sbe = zt_offload_state_table(be, eng->offload);
    eng->units = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nunits * sizeof *eng->units);
    if (!eng->units || unit_order(eng) != ZT_OK) {
        engine_free(eng);
        return zt_fail(err, ZT_EFAIL, "out of memory for the engine's unit table");
    }
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        zt_unit_sizes z = zt_eng_unit_size(lay, u, prec, stage, eng->group_size, overlap);
        us->shard_numel = z.shard_numel;
        us->grad_numel = z.grad_numel;
        us->pool_slot = -1;
        us->phase = ZT_UNIT_IDLE;
        us->master_dt = z.master_dt;
        us->grad_dt = z.grad_dt;
        us->optim_dt = z.optim_dt;
        us->master = zt_offload_state_alloc(eng, ZT_MEM_PARAMS, bytes_of(z.shard_numel, z.master_dt));
        int ok = us->master != NULL;
        if (z.trained) { /* a frozen unit (LoRA's base) has none of these */
            /* zeroed by alloc: its padding stays zero, since every write into it
             * carries zeros there (grad_begin's contract) */
            us->grad = be->alloc(ZT_MEM_GRADS, bytes_of(z.grad_numel, z.grad_dt));
            if (u != lay->root_unit && lay->units[u].numel > eng->layers_numel_max)
                eng->layers_numel_max = lay->units[u].numel;
            us->m = zt_offload_state_alloc(eng, ZT_MEM_OPTIM, bytes_of(z.shard_numel, z.optim_dt));
            us->v = zt_offload_state_alloc(eng, ZT_MEM_OPTIM, bytes_of(z.shard_numel, z.optim_dt));
            ok = ok && us->grad && us->m && us->v;
        }
        if (z.compensated)
            ok = ok && (us->comp = zt_offload_state_alloc(eng, ZT_MEM_PARAMS, bytes_of(z.shard_numel, z.master_dt)));
        us->gathered_alias = z.gathered_alias;
        us->gathered_own = z.gathered_own;
        us->persistent = zt_eng_persistent_unit(lay, u, stage, overlap);
        if (z.gathered_alias) {
            us->gathered = us->master;
            us->gathered_dt = z.master_dt; /* what the buffer is: the master itself */
        } else if (z.gathered_own) {
            ok = ok && (us->gathered = be->alloc(ZT_MEM_GATHERED, bytes_of(z.full, z.gathered_dt)));
            us->gathered_dt = z.gathered_dt;
        } /* stage 3 (not persistent): gathered on demand; gathered_dt is set by each gather */
        if (!ok) {
            engine_free(eng);
            return zt_fail(err, ZT_EFAIL, "out of memory for unit %d's buffers (%zu elements)", u, z.full);
        }
    }
    if (!alloc_shared(eng, overlap)) {
        engine_free(eng);
        return zt_fail(err, ZT_EFAIL, "out of memory for gradient staging and communication buffers");
    }
    int rc = zt_offload_init(eng, err);
    /* the step's scalars (async_step.h) for every step: its verdict is the device's;
     * exact mode's step is the asynchronous one read back at once (zt_async_fast says
     * which runs ahead), an offloaded optimizer's AdamW the host's on the verdict's clip */
    if (rc == ZT_OK)
        rc = zt_async_init(eng, err);
    if (rc)
        engine_free(eng);
    return rc;
}

static void engine_free(zt_engine *eng)
{
    if (eng->units)
        zt_engine_drain(eng);
    zt_async_free(eng);
    zt_offload_free(eng); /* it reads the unit table */
    const zt_backend *be = eng->be;
    if (eng->units) {
        for (int u = 0; u < eng->lay->nunits; u++) {
            zt_unit_state *us = &eng->units[u];
            zt_offload_state_free(eng, ZT_MEM_PARAMS, us->master, bytes_of(us->shard_numel, us->master_dt));
            if (us->grad)
                be->free(ZT_MEM_GRADS, us->grad, bytes_of(us->grad_numel, us->grad_dt));
            if (us->m)
                zt_offload_state_free(eng, ZT_MEM_OPTIM, us->m, bytes_of(us->shard_numel, us->optim_dt));
            if (us->v)
                zt_offload_state_free(eng, ZT_MEM_OPTIM, us->v, bytes_of(us->shard_numel, us->optim_dt));
            zt_offload_state_free(eng, ZT_MEM_PARAMS, us->comp, bytes_of(us->shard_numel, us->master_dt));
            if (us->gathered_own)
                be->free(ZT_MEM_GATHERED, us->gathered, bytes_of(eng->lay->units[u].padded_numel, us->gathered_dt));
        }
        zt_free(ZT_MEM_OTHER, eng->units, (size_t)eng->lay->nunits * sizeof *eng->units);
    }
    if (be) {
        for (int i = 0; i < ZT_GATHER_POOL; i++)
            be->free(ZT_MEM_GATHERED, eng->pool[i], eng->pool_bytes);
        be->free(ZT_MEM_COMM, eng->staging_root, eng->staging_root_numel * sizeof(float));
        be->free(ZT_MEM_COMM, eng->staging_layers, eng->staging_layers_numel * sizeof(float));
        be->free(ZT_MEM_COMM, eng->staging_spare, eng->staging_spare_numel * sizeof(float));
        be->free(ZT_MEM_COMM, eng->comm_full, eng->comm_full_bytes);
        be->free(ZT_MEM_COMM, eng->comm_shard, eng->comm_shard_bytes);
        be->free(ZT_MEM_COMM, eng->comm_slices, eng->comm_slices_bytes);
        be->free(ZT_MEM_COMM, eng->comm_gather, eng->comm_gather_bytes);
    }
    if (eng->lay) {
        zt_free(ZT_MEM_OTHER, eng->next_fwd, (size_t)eng->lay->nunits * sizeof(int));
        zt_free(ZT_MEM_OTHER, eng->next_bwd, (size_t)eng->lay->nunits * sizeof(int));
    }
    memset(eng, 0, sizeof *eng);
}

int zt_engine_create(zt_engine **out, const zt_backend *be, const zt_layout *lay, zt_precision prec, int stage,
                     const zt_overlap *overlap, zt_comm *comm, zt_err *err)
{
    *out = NULL;
    zt_engine *eng = zt_alloc(ZT_MEM_OTHER, sizeof *eng);
    if (!eng)
        return zt_fail(err, ZT_EFAIL, "out of memory for the engine");
    int rc = engine_init(eng, be, lay, prec, stage, overlap, comm, err);
    if (rc) {
        zt_free(ZT_MEM_OTHER, eng, sizeof *eng);
        return rc;
    }
    *out = eng;
    return ZT_OK;
}

void zt_engine_destroy(zt_engine *eng)
{
    if (!eng)
        return;
    engine_free(eng);
    zt_free(ZT_MEM_OTHER, eng, sizeof *eng);
}


/* Start gathering unit u's compute-dtype parameters into dst (P elements): this
 * rank's shard is converted into its own slot of dst, and the group fills the
 * others (an in-place all-gather, so no send buffer is held while it runs). */
static void start_gather(zt_engine *eng, int u, void *dst, zt_comm_op *op)
{
    zt_unit_state *us = &eng->units[u];
    size_t P = eng->lay->units[u].padded_numel;
    zt_dtype cd = eng->prec.compute;
    void *mine = (char *)dst + (size_t)eng->group_rank * us->shard_numel * zt_dtype_size(cd);
    zt_offload_shard_to_compute(eng, u, mine, 0, us->shard_numel);
    zt_comm_start_allgather(eng->comm, op, dst, P, cd);
    us->gathered_dt = cd; /* what this gather writes, checked at acquire */
}

/* This rank's shard of unit u in the compute dtype, gathered over the group into dst (P). */
static void gather_compute(zt_engine *eng, int u, void *dst)
{
    zt_comm_op op;
    start_gather(eng, u, dst, &op);
    zt_comm_wait(eng->comm, &op);
}

/* Stages 1-2 with an all-gather bucket: unit u's shard converted and gathered a
 * piece at a time (a piece of every member per call), each member's piece copied to
 * its place in dst: the same values as one all-gather, in more, smaller calls. */
static void gather_in_pieces(zt_engine *eng, int u, void *dst)
{
    zt_unit_state *us = &eng->units[u];
    const size_t S = us->shard_numel, G = (size_t)eng->group_size, cs = zt_dtype_size(eng->prec.compute);
    char *mine = eng->comm_gather, *all = mine + eng->gather_piece * cs;
    for (size_t k = 0; k < S; k += eng->gather_piece) {
        size_t n = S - k < eng->gather_piece ? S - k : eng->gather_piece;
        zt_offload_shard_to_compute(eng, u, mine, k, n);
        zt_comm_allgather(eng->comm, all, mine, G * n, eng->prec.compute);
        for (size_t j = 0; j < G; j++)
            eng->be->copy((char *)dst + (j * S + k) * cs, all + j * n * cs, n * cs);
    }
    us->gathered_dt = eng->prec.compute;
}

void zt_engine_refresh_unit(zt_engine *eng, int u)
{
    zt_unit_state *us = &eng->units[u];
    if (!us->gathered_own || us->frozen_fresh) /* a frozen unit never changes once gathered */
        return;
    us->frozen_fresh = eng->lay->units[u].frozen;
    if (eng->gather_piece)
        gather_in_pieces(eng, u, us->gathered);
    else
        gather_compute(eng, u, us->gathered);
}

void zt_engine_refresh_gathered(zt_engine *eng)
{
    /* stages 0-2: every unit's own gathered copy; stage 3: the persistent units'
     * (the others are gathered on demand) */
    for (int u = 0; u < eng->lay->nunits; u++)
        zt_engine_refresh_unit(eng, u);
}

/* Stage 3's pool of gathered buffers: a free slot for unit u, or -1. */
static int take_slot(zt_engine *eng, int u)
{
    for (int i = 0; i < ZT_GATHER_POOL; i++)
        if (eng->pool[i] && !eng->pool_used[i]) {
            eng->pool_used[i] = 1;
            eng->units[u].pool_slot = i;
            return i;
        }
    return -1;
}

static void free_slot(zt_engine *eng, int u)
{
    zt_unit_state *us = &eng->units[u];
    eng->pool_used[us->pool_slot] = 0;
    us->pool_slot = -1;
    us->gathered = NULL; /* resharded: only the master shard remains */
}

/* The prefetches in flight, oldest first; gather_unit mirrors the oldest (-1 none). */
static int queued(const zt_engine *eng, int u)
{
    for (int i = 0; i < eng->nqueued; i++)
        if (eng->queue_unit[i] == u)
            return i;
    return -1;
}

static void dequeue(zt_engine *eng, int i)
{
    for (int j = i + 1; j < eng->nqueued; j++) {
        eng->queue_unit[j - 1] = eng->queue_unit[j];
        eng->queue_op[j - 1] = eng->queue_op[j];
    }
    eng->nqueued--;
    eng->gather_unit = eng->nqueued ? eng->queue_unit[0] : -1;
}

/* Stage 3: start gathering the units after `from` in `next`'s order ahead of their
 * use, as far as the limits allow (precision.h): at most prefetch_depth units
 * ahead (those already gathered count), their parameters within prefetch_bucket
 * (the first always may), everything gathered within max_live, and a free slot of
 * the pool.  Persistent units are always gathered and are passed over. */
static void prefetch(zt_engine *eng, int from, const int *next)
{
    if (eng->stage != 3 || from < 0)
        return;
    const zt_overlap *ov = &eng->overlap;
    int depth = ov->prefetch_depth > 0 ? ov->prefetch_depth : 1, ahead = 0;
    size_t live = 0, bucket = 0;
    for (int u = 0; u < eng->lay->nunits; u++)
        if (eng->units[u].pool_slot >= 0)
            live += eng->lay->units[u].padded_numel;
    for (int i = 0; i < eng->nqueued; i++)
        bucket += eng->lay->units[eng->queue_unit[i]].padded_numel;
    for (int u = next[from]; u >= 0 && ahead < depth; u = next[u]) {
        zt_unit_state *us = &eng->units[u];
        size_t P = eng->lay->units[u].padded_numel;
        if (us->persistent)
            continue;
        if (us->pool_slot >= 0) { /* in use or already on its way */
            ahead++;
            continue;
        }
        if ((ov->prefetch_bucket > 0 && eng->nqueued > 0 && bucket + P > (size_t)ov->prefetch_bucket) ||
            (ov->max_live > 0 && live + P > (size_t)ov->max_live) || eng->nqueued >= ZT_GATHER_POOL)
            break;
        int slot = take_slot(eng, u);
        if (slot < 0)
            break;
        start_gather(eng, u, eng->pool[slot], &eng->queue_op[eng->nqueued]);
        eng->queue_unit[eng->nqueued++] = u;
        eng->gather_unit = eng->queue_unit[0];
        live += P;
        bucket += P;
        ahead++;
    }
}

/* Finish the prefetches that are not going to be used and give their slots back. */
static void drop_prefetch(zt_engine *eng)
{
    while (eng->nqueued > 0) {
        int u = eng->queue_unit[0];
        zt_comm_wait(eng->comm, &eng->queue_op[0]);
        dequeue(eng, 0);
        free_slot(eng, u);
        eng->prefetch_dropped++;
    }
}

const void *zt_engine_acquire(zt_engine *eng, int unit, zt_pass pass)
{
    zt_unit_state *us = &eng->units[unit];
    expect_phase(eng, unit, PHASE(ZT_UNIT_IDLE), pass == ZT_PASS_FORWARD ? "acquire(FORWARD)" : "acquire(BACKWARD)");
    if (unit == eng->lay->root_unit)
        eng->in_backward = 0; /* the root is acquired first: a new forward begins */
    eng->comm->unit = unit; /* the flight recorder's context */
    eng->comm->phase = eng->in_backward ? "backward" : "forward";
    int q = eng->stage == 3 ? queued(eng, unit) : -1;
    if (eng->stage == 3 && us->persistent) {
        /* stays gathered from step to step (refreshed after each one) */
    } else if (eng->stage == 3) {
        if (q >= 0) { /* prefetched: its data may still be arriving */
            zt_comm_wait(eng->comm, &eng->queue_op[q]);
            dequeue(eng, q);
            eng->prefetch_used++;
        } else {
            int slot = take_slot(eng, unit);
            if (slot < 0) { /* the pool is full of a prefetch the model did not follow */
                drop_prefetch(eng);
                slot = take_slot(eng, unit);
            }
            /* the model holds at most the root and one layer unit: a free slot exists */
            assert(slot >= 0 && "stage 3: more units acquired than the gather pool holds");
            gather_compute(eng, unit, eng->pool[slot]);
        }
        us->gathered = eng->pool[us->pool_slot];
    }
    if (eng->stage == 3 && !eng->in_backward && eng->overlap.forward_prefetch)
        prefetch(eng, unit, eng->next_fwd);
    us->phase = pass == ZT_PASS_FORWARD ? ZT_UNIT_FORWARD : ZT_UNIT_BACKWARD_PRE;
    assert(us->gathered != NULL);
    expect_dtypes(eng, unit, "acquire");
    return us->gathered;
}

void zt_engine_release(zt_engine *eng, int unit)
{
    zt_unit_state *us = &eng->units[unit];
    /* in backward, a unit goes back only once its gradient is complete; a frozen one
     * (LoRA's base, with no gradient) as soon as its backward has read it */
    expect_phase(eng, unit,
                 PHASE(ZT_UNIT_FORWARD) | PHASE(ZT_UNIT_BACKWARD_POST) | (us->grad ? 0 : PHASE(ZT_UNIT_BACKWARD_PRE)),
                 "release");
    us->phase = ZT_UNIT_IDLE;
    if (eng->stage == 3 && !us->persistent)
        free_slot(eng, unit);
}

/* Gradients accumulate on this rank, with nothing to communicate until the step. */
static int local_accumulation(const zt_engine *eng)
{
    return eng->stage <= 1 || (eng->group_size == 1 && eng->comm->replica_size == 1);
}

/* ---- rounding pending ---------------------------------------------------------
 *
 * With a bf16 reduce dtype and an fp32 master, a gradient that no collective
 * reduces (one rank: grad_end's local accumulation, reduce_grads' empty reduction)
 * still passes through the reduce dtype, so that the numbers do not depend on where
 * the reduction happens: every element is rounded to bf16.  As a pass of its own
 * that rounding reads and writes every gradient (8 bytes an element, 8.3 GB a step
 * for the 1B model).  Instead the unit is marked (grad_round_pending): its gradient
 * is bf16(grad), and whatever reads it rounds as it reads, or has the rounding done
 * first:
 *   - the step's norm, hence the non-finite verdict, the clipping coefficient and
 *     fp16's loss scale: sumsq_bf16_into, read only (async_step.c);
 *   - AdamW, hence the lost-update audit: zt_adamw_step's g_bf16 (adamw_unit on the
 *     device; offloaded, the host's AdamW on the copy brought down, with the mark as
 *     it stood when the copy was taken: step.c, offload.c's delayed update);
 *   - a reduction over ranks (start_early_allreduce, reduce_grads): its conversion
 *     to the reduce dtype rounds, and the reduced values clear the mark;
 *   - a later micro-batch's accumulation onto it (grad_end's fp32 accumulation of a
 *     bf16 reduce): accumulate_bf16_rounded's round_acc, acc = bf16(acc) + bf16(g),
 *     the bits of the rounding in place followed by the add;
 *   - anything else (zt_engine_full_grads, grad_end's other paths):
 *     zt_engine_grad_settle, the rounding in place, once.
 * zero_grads clears the mark (zeros are representable); inf stays inf. */
void zt_engine_grad_settle(zt_engine *eng, int u)
{
    zt_unit_state *us = &eng->units[u];
    if (!us->grad_round_pending)
        return;
    eng->be->round_bf16(us->grad, eng->lay->units[u].padded_numel, 0);
    us->grad_round_pending = 0;
    us->grad_rounded = 1;
}

/* n elements of x (x_dt) into unit u's accumulator (master dtype), from its front:
 * the step's first write stores (grad_empty: zero_grads cleared nothing, so what it
 * holds is undefined, an inf of a skipped step included), every later one adds.
 * The store is what adding onto zeros gave: 0 + x == x. */
static void grad_store(zt_engine *eng, int u, const void *x, zt_dtype x_dt, size_t n)
{
    zt_unit_state *us = &eng->units[u];
    if (us->grad_empty)
        eng->be->convert(us->grad, eng->prec.master, x, x_dt, n);
    else
        eng->be->accumulate(us->grad, eng->prec.master, x, x_dt, n);
    us->grad_empty = 0;
}

/* Finish the reduction in flight.  Stage 0: the all-reduced gradient is the
 * accumulator (back from the reduce dtype when that differs).  Stages 2-3: the
 * reduce-scatter's shard is added to the owner's accumulator (after summing over
 * hybrid replicas). */
static void finish_reduce(zt_engine *eng)
{
    zt_eng_pieces_end(eng);
    int u = eng->reduce_unit;
    if (u < 0)
        return;
    zt_unit_state *us = &eng->units[u];
    zt_comm *c = eng->comm;
    zt_dtype rd = eng->prec.reduce;
    zt_comm_wait(c, &eng->reduce_op);
    eng->reduce_unit = -1;
    if (eng->stage == 0) { /* start_early_allreduce reduced in comm_full when the dtypes differ */
        if (rd != eng->prec.master)
            eng->be->convert(us->grad, eng->prec.master, eng->comm_full, rd, eng->lay->units[u].padded_numel);
        us->grad_round_pending = 0; /* the reduced values replace what was pending */
        return;
    }
    if (c->replica_size > 1) /* hybrid: replicas hold the same slice; sum them */
        zt_comm_allreduce(c, eng->comm_shard, us->shard_numel, rd, ZT_SCOPE_REPLICA);
    grad_store(eng, u, eng->comm_shard, rd, us->shard_numel);
    zt_offload_grad_done(eng, u);
}

void zt_engine_progress(zt_engine *eng)
{
    zt_pieces *pc = &eng->pieces;
    for (int i = 0; i < eng->nqueued; i++)
        zt_comm_test(eng->comm, &eng->queue_op[i]);
    if (eng->reduce_unit >= 0)
        zt_comm_test(eng->comm, &eng->reduce_op);
    for (int i = pc->finished; i < pc->started; i++)
        zt_comm_test(eng->comm, &pc->op[i % ZT_PIECE_SLOTS]);
    eng->ticks++;
    /* the next pieces, whatever the tests said (see "reductions in pieces") */
    for (int i = 0; i < pc->per_tick && pc->unit >= 0 && pc->next < eng->units[pc->unit].shard_numel; i++) {
        zt_eng_piece_start(eng);
        eng->pieces_overlapped++;
    }
}

void zt_engine_sync_backward(zt_engine *eng, int sync) { eng->sync_backward = sync; }

/* Stage 0 on several ranks, in the backward that ends the step's accumulation:
 * unit u's gradient is complete, so its all-reduce starts now and runs while the
 * units before it compute theirs.  The same call, on the same buffer, as the
 * reduction at the step would make. */
static void start_early_allreduce(zt_engine *eng, int u)
{
    zt_unit_state *us = &eng->units[u];
    zt_dtype rd = eng->prec.reduce, md = eng->prec.master;
    if (eng->stage != 0 || eng->comm->world == 1 || !eng->overlap.overlap_reduce || !eng->sync_backward)
        return;
    finish_reduce(eng); /* one in flight at a time: comm_full is reused */
    size_t P = eng->lay->units[u].padded_numel;
    void *buf = us->grad;
    if (rd != md) {
        eng->be->convert(eng->comm_full, rd, us->grad, md, P);
        buf = eng->comm_full;
    }
    us->reduced = 1; /* convert reads a pending rounding's values rounded: rd is bf16 then */
    zt_comm_start_allreduce(eng->comm, &eng->reduce_op, buf, P, rd, ZT_SCOPE_WORLD);
    eng->reduce_unit = u;
    eng->reduce_overlapped++;
}

void zt_engine_drain(zt_engine *eng)
{
    finish_reduce(eng);
    drop_prefetch(eng);
}

void zt_engine_reset(zt_engine *eng)
{
    zt_engine_drain(eng);
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        us->staging = NULL;
        us->phase = ZT_UNIT_IDLE;
        if (us->pool_slot >= 0)
            free_slot(eng, u);
    }
    eng->in_backward = 0;
}

float *zt_engine_grad_begin(zt_engine *eng, int unit, int *fresh)
{
    zt_unit_state *us = &eng->units[unit];
    const zt_unit *lu = &eng->lay->units[unit];
    size_t full = lu->padded_numel;
    /* a unit acquired for backward, or one held since the forward (the root) */
    expect_phase(eng, unit, PHASE(ZT_UNIT_FORWARD) | PHASE(ZT_UNIT_BACKWARD_PRE), "grad_begin");
    assert(us->staging == NULL && "grad_begin twice");
    assert(us->grad && "grad_begin on a frozen unit (LoRA's base keeps no gradient)");
    us->phase = ZT_UNIT_BACKWARD_PRE;
    assert(!us->reduced && "gradient accumulated after its all-reduce began: zt_engine_sync_backward(eng, 0) "
                           "for every micro-batch but the last");
    eng->in_backward = 1;
    eng->comm->unit = unit;
    eng->comm->phase = "backward";
    if (eng->overlap.backward_prefetch == ZT_BACKWARD_PREFETCH_PRE)
        prefetch(eng, unit, eng->next_bwd);
    /* Every buffer handed out is fresh (param_owner.h): the model's first products
     * write it with beta 0, so nothing is cleared here.  An fp32 accumulator with
     * nothing in it yet takes the products directly: what grad_end would store in it
     * is the staging itself (rounded to the reduce dtype), so the staging and the
     * extra pass are skipped; its padding holds zeros since its allocation. */
    *fresh = 1;
    if (local_accumulation(eng) && eng->prec.master == ZT_F32 && us->grad_empty && us->grad_numel == full &&
        (eng->prec.reduce == ZT_F32 || eng->prec.reduce == ZT_BF16)) {
        us->staging = us->grad;
        return us->staging;
    }
    float *staging = unit == eng->lay->root_unit ? eng->staging_root : eng->staging_layers;
    if ((eng->reduce_unit >= 0 && eng->reduce_op.send == staging) || eng->pieces.src == staging) {
        /* a reduction in flight still reads this staging: take the spare, or wait */
        if (staging == eng->staging_layers && eng->staging_spare)
            staging = eng->staging_spare;
        else
            finish_reduce(eng);
    }
    us->staging = staging;
    /* The padding must read as zeros (grad_end reduces and adds all P elements, and
     * the norm and AdamW read the accumulator's).  The root's staging is its own,
     * and units of one size (one layer each) never write beyond each other's
     * parameters; only where a bigger unit shares the staging (SIZE_BASED_WRAP's
     * unequal groups) is the part of the padding it may have written cleared: fewer
     * than the difference in size, decided from the layout alone, so a captured
     * step clears the same at every replay. */
    size_t dirty = unit == eng->lay->root_unit ? lu->numel : eng->layers_numel_max;
    if (dirty > lu->numel && full > lu->numel)
        eng->be->zero(staging + lu->numel, ((dirty < full ? dirty : full) - lu->numel) * sizeof(float));
    return us->staging;
}

void zt_engine_grad_end(zt_engine *eng, int unit)
{
    zt_unit_state *us = &eng->units[unit];
    const float *g = us->staging;
    size_t P = eng->lay->units[unit].padded_numel;
    zt_dtype rd = eng->prec.reduce, md = eng->prec.master;
    expect_phase(eng, unit, PHASE(ZT_UNIT_BACKWARD_PRE), "grad_end");
    assert(g != NULL && "grad_end without grad_begin");
    us->phase = ZT_UNIT_BACKWARD_POST;
    /* the root's gradient closes the backward: nothing comes after it */
    if (eng->overlap.backward_prefetch == ZT_BACKWARD_PREFETCH_POST && unit != eng->lay->root_unit)
        prefetch(eng, unit, eng->next_bwd);
    if (g == us->grad) { /* written in place (grad_begin): only the rounding is left */
        us->grad_empty = 0;
        /* to bf16 it is left to the readers ("rounding pending" above): no pass here */
        zt_dtype through = rd == ZT_BF16 ? ZT_BF16 : ZT_F32;
        us->grad_round_pending = rd == ZT_BF16;
        us->grad_rounded = !us->grad_round_pending;
        us->staging = NULL;
        reduced_through(eng, unit, through, "grad_end");
        start_early_allreduce(eng, unit);
        zt_offload_grad_done(eng, unit);
        return;
    }
    /* the sums below add onto the rounded values: the fused accumulation rounds them
     * as it reads them (round_acc), every other path has them rounded first */
    const int fused = local_accumulation(eng) && rd == ZT_BF16 && md == ZT_F32;
    const int round_acc = fused && us->grad_round_pending;
    if (!fused)
        zt_engine_grad_settle(eng, unit);
    us->grad_round_pending = 0;
    us->grad_rounded = 0; /* a sum of rounded values need not be representable */
    if (local_accumulation(eng)) {
        /* Local accumulation: stages 0-1 reduce at the step, and a group of one
         * has nothing to reduce.  The gradient still passes through the reduce
         * dtype, so the numbers do not depend on where the reduction happens;
         * bf16 into an fp32 accumulator is fused into one pass. */
        if (fused) {
            const size_t n = eng->stage <= 1 ? P : us->shard_numel;
            assert(!us->grad_empty && "an empty fp32 accumulator is written in place (grad_begin)");
            assert((!round_acc || n == P) && "a pending rounding covers the whole unit (a group of one)");
            eng->be->accumulate_bf16_rounded(us->grad, round_acc, g, n);
            reduced_through(eng, unit, ZT_BF16, "grad_end");
        } else if (rd == ZT_F32) {
            grad_store(eng, unit, g, ZT_F32, P);
            reduced_through(eng, unit, ZT_F32, "grad_end");
        } else {
            eng->be->convert(eng->comm_full, rd, g, ZT_F32, P);
            grad_store(eng, unit, eng->comm_full, rd, P);
            reduced_through(eng, unit, rd, "grad_end");
        }
    } else {
        /* Stages 2-3: reduce-scatter now, in the reduce dtype, into the owner's
         * shard; with overlap it runs while the next unit's backward computes. */
        zt_comm *c = eng->comm;
        finish_reduce(eng); /* one in flight at a time: its buffers are reused here */
        const void *full = g;
        zt_dtype through = rd; /* fp32, or the dtype the gradient is converted to */
        if (rd != ZT_F32 && !eng->reduce_piece) {
            eng->be->convert(eng->comm_full, rd, g, ZT_F32, P);
            full = eng->comm_full;
        }
        reduced_through(eng, unit, through, "grad_end");
        if (eng->reduce_piece) { /* reduce_bucket: in pieces */
            if (eng->ticks_at_grad_end > 0)
                eng->ticks_per_unit = eng->ticks - eng->ticks_at_grad_end;
            eng->ticks_at_grad_end = eng->ticks;
            zt_eng_pieces_begin(eng, unit, g, ZT_F32, 1);
            if (!eng->overlap.overlap_reduce)
                zt_eng_pieces_end(eng);
            else
                eng->reduce_overlapped++;
        } else if (eng->group_size > 1) {
            zt_comm_start_reduce_scatter(c, &eng->reduce_op, eng->comm_shard, full, eng->comm_slices, P, rd);
            eng->reduce_unit = unit;
            if (!eng->overlap.overlap_reduce)
                finish_reduce(eng);
            else
                eng->reduce_overlapped++;
        } else { /* a group of one (hybrid with one rank per node) owns the whole unit */
            if (c->replica_size > 1)
                zt_comm_allreduce(c, (void *)full, us->shard_numel, rd, ZT_SCOPE_REPLICA);
            grad_store(eng, unit, full, rd, us->shard_numel);
        }
    }
    us->staging = NULL;
    start_early_allreduce(eng, unit);
    zt_offload_grad_done(eng, unit); /* unless its reduction is still in flight */
}

/* The step's gradients start empty: nothing is cleared (for the 1B model that was a
 * 4.2 GB memset a step), the first write of each accumulator stores (grad_store,
 * grad_begin's fresh buffers) and the model's first products write with beta 0. */
void zt_engine_zero_grads(zt_engine *eng)
{
    finish_reduce(eng);         /* it would store into the emptied accumulator */
    zt_offload_zero_grads(eng); /* and copies down still reading it finish first */
    for (int u = 0; u < eng->lay->nunits; u++) {
        eng->units[u].grad_empty = 1;
        eng->units[u].grad_rounded = 1; /* what it will hold if nothing comes (zeros) is representable */
        eng->units[u].grad_round_pending = 0;
        eng->units[u].reduced = 0;
        eng->units[u].reduced_valid = 0;
    }
    eng->grads_reduced = 0;
    zt_async_zero(eng);
}

/* A unit that took no gradient since zero_grads (a step with no backward through it:
 * some tests; never a training step, whose backward opens every trained unit) reads
 * as zeros at the step, as when zero_grads cleared every accumulator. */
static void fill_empty_grads(zt_engine *eng)
{
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        if (us->grad && us->grad_empty)
            eng->be->zero(us->grad, bytes_of(us->grad_numel, eng->prec.master));
        us->grad_empty = 0;
    }
}

void zt_engine_reduce_grads(zt_engine *eng)
{
    finish_reduce(eng);
    fill_empty_grads(eng);
    if (eng->stage >= 2 || eng->grads_reduced)
        return;
    eng->grads_reduced = 1;
    zt_comm *c = eng->comm;
    zt_dtype rd = eng->prec.reduce, md = eng->prec.master;
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        size_t P = eng->lay->units[u].padded_numel;
        void *buf = us->grad;
        if (us->reduced || !us->grad) /* all-reduced during the backward; frozen */
            continue;
        /* the reduction below runs in rd, or is the in-place rounding to bf16 */
        reduced_through(eng, u, rd, "reduce_grads");
        if (c->world == 1 && rd == ZT_BF16 && md == ZT_F32) {
            /* one rank (stage 0, or stage 1 in a group of one): the reduction is empty,
             * and the round trip through the reduce dtype is a rounding, left pending
             * for the step's readers ("rounding pending"), where it was a pass in place
             * (stage 1: two, through comm_full); nothing when the values are rounded */
            us->grad_round_pending = us->grad_round_pending || !us->grad_rounded;
            continue;
        }
        /* below, the conversion to rd rounds a pending rounding's values as it reads
         * them (rd is bf16 then), and the reduced values replace them */
        us->grad_round_pending = 0;
        if (eng->reduce_piece) { /* stage 1 with a reduce bucket (stage 0 has none) */
            zt_eng_pieces_begin(eng, u, us->grad, md, 0);
            zt_eng_pieces_end(eng);
            continue;
        }
        if (rd != md) {
            eng->be->convert(eng->comm_full, rd, us->grad, md, P);
            buf = eng->comm_full;
        }
        if (eng->stage == 0) {
            /* replicated: all-reduce over every rank */
            zt_comm_allreduce(c, buf, P, rd, ZT_SCOPE_WORLD);
            if (buf != us->grad)
                eng->be->convert(us->grad, md, buf, rd, P);
        } else {
            /* stage 1: reduce-scatter; the owned shard goes to the front of grad */
            void *shard = buf;
            if (eng->group_size > 1) {
                zt_comm_reduce_scatter(c, eng->comm_shard, buf, eng->comm_slices, P, rd);
                shard = eng->comm_shard;
            }
            if (c->replica_size > 1)
                zt_comm_allreduce(c, shard, us->shard_numel, rd, ZT_SCOPE_REPLICA);
            if (shard != us->grad)
                eng->be->convert(us->grad, md, shard, rd, us->shard_numel);
        }
    }
}

/* What every step does before its norms (async_step.h): the collectives finished
 * and the gradients reduced, every unit idle and in its dtypes. */
void zt_engine_step_prelude(zt_engine *eng)
{
    zt_engine_drain(eng); /* a prefetched unit would hold parameters from before the step */
    zt_engine_reduce_grads(eng);
    for (int u = 0; u < eng->lay->nunits; u++) {
        expect_phase(eng, u, PHASE(ZT_UNIT_IDLE), "step");
        assert(eng->units[u].staging == NULL);
        expect_dtypes(eng, u, "step");
    }
}

void zt_engine_inject_nonfinite(zt_engine *eng)
{
    finish_reduce(eng);
    /* one element of the master dtype, written where the gradient lives (bf16(inf) is
     * inf: a pending rounding stays pending) */
    unsigned char inf[4];
    zt_store_f32(inf, eng->prec.master, 0, INFINITY);
    eng->be->to_device(eng->units[0].grad, inf, zt_dtype_size(eng->prec.master));
}

const char *zt_engine_check_dtypes(const zt_engine *eng, int unit)
{
    const zt_unit_state *us = &eng->units[unit];
    if (us->gathered && us->gathered_dt != eng->prec.compute)
        return "gathered parameters are not in the compute dtype";
    if (us->master_dt != (eng->lay->units[unit].frozen ? eng->prec.load : eng->prec.master))
        return "master parameters are not in the master dtype (a frozen unit's: the load dtype)";
    if (us->grad_dt != eng->prec.master)
        return "gradient accumulators are not in the master dtype";
    if (us->optim_dt != eng->prec.master)
        return "optimizer state is not in the master dtype";
    if (us->reduced_valid && us->reduced_dt != eng->prec.reduce)
        return "gradients are reduced in a dtype other than the plan's reduce dtype";
    return NULL;
}


/* ---- the model's parameter owner (param_owner.h) ----------------------------- */

static const void *owner_acquire(void *eng, int unit, zt_pass pass) { return zt_engine_acquire(eng, unit, pass); }
static void owner_release(void *eng, int unit) { zt_engine_release(eng, unit); }
static float *owner_grad_begin(void *eng, int unit, int *fresh)
{
    return zt_engine_grad_begin(eng, unit, fresh);
}
static void owner_grad_end(void *eng, int unit) { zt_engine_grad_end(eng, unit); }
static void owner_progress(void *eng) { zt_engine_progress(eng); }
static void owner_reset(void *eng) { zt_engine_reset(eng); }

zt_param_owner zt_engine_param_owner(zt_engine *eng)
{
    static const zt_param_owner_ops ops = ZT_PARAM_OWNER_OPS(owner_acquire, owner_release, owner_grad_begin,
                                                             owner_grad_end, owner_progress, owner_reset);
    return (zt_param_owner){.ops = &ops, .ctx = eng, .compute = eng->prec.compute, .backend = eng->be,
                            .act16 = zt_owner_preset_act16(eng->be)};
}
