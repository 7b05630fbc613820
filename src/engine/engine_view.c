/* engine_view.c — the engine seen from outside (see engine.h): the state view
 * checkpoints read and write, the accessors for what the trainer reports, and a
 * parameter's values in (loading: zt_engine_set_param) and out (the saved model,
 * the tests: zt_engine_full_params / _grads).
 * Everything here goes through the copies of the table that holds the state
 * (eng->sbe: the device's, or the CPU's when the state is offloaded), never
 * through a pointer into a buffer, unless that table's buffers are host memory. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "engine_impl.h"

const zt_backend *zt_engine_backend(const zt_engine *eng) { return eng->be; }
const zt_layout *zt_engine_layout(const zt_engine *eng) { return eng->lay; }
zt_comm *zt_engine_comm(const zt_engine *eng) { return eng->comm; }
zt_precision zt_engine_precision(const zt_engine *eng) { return eng->prec; }
int zt_engine_group_size(const zt_engine *eng) { return eng->group_size; }
int zt_engine_group_rank(const zt_engine *eng) { return eng->group_rank; }
size_t zt_engine_unit_table_bytes(void) { return sizeof(zt_unit_state); }

long zt_engine_optimizer_steps(const zt_engine *eng) { return eng->optimizer_steps; }
void zt_engine_set_optimizer_steps(zt_engine *eng, long steps) { eng->optimizer_steps = steps; }
int zt_engine_nonfinite_unit(const zt_engine *eng) { return eng->nonfinite_unit; }
zt_adamw_audit zt_engine_last_audit(const zt_engine *eng) { return eng->last_audit; }

zt_unit_phase zt_engine_unit_phase(const zt_engine *eng, int unit) { return eng->units[unit].phase; }

zt_engine_stats zt_engine_get_stats(const zt_engine *eng)
{
    zt_engine_stats s = {.prefetch_used = eng->prefetch_used, .prefetch_dropped = eng->prefetch_dropped,
                         .reduce_overlapped = eng->reduce_overlapped, .pieces_overlapped = eng->pieces_overlapped,
                         .prefetch_unit = eng->gather_unit, .grads_copied_early = eng->grads_copied_early,
                         .uploads_async = eng->uploads_async};
    for (int i = 0; i < ZT_GATHER_POOL; i++)
        s.pool_held += eng->pool_used[i] != 0;
    for (int u = 0; u < eng->lay->nunits; u++) {
        s.units_gathered += eng->units[u].pool_slot >= 0;
        s.gradients_open += eng->units[u].staging != NULL;
    }
    return s;
}

/* ---- the state view ------------------------------------------------------- */

static const char *const role_names[ZT_STATE_NROLES] = {"master", "m", "v", "comp"};

const char *zt_state_role_name(zt_state_role role)
{
    return role >= 0 && role < ZT_STATE_NROLES ? role_names[role] : "?";
}

/* The k-th trained unit: every unit, but for LoRA's frozen base units (layout.h), which
 * hold no optimizer state and are no part of a checkpoint's state. */
static int trained_unit(const zt_engine *eng, int k)
{
    for (int u = 0; u < eng->lay->nunits; u++)
        if (!eng->lay->units[u].frozen && k-- == 0)
            return u;
    return -1;
}

static int ntrained(const zt_engine *eng)
{
    int n = 0;
    for (int u = 0; u < eng->lay->nunits; u++)
        n += !eng->lay->units[u].frozen;
    return n;
}

/* Roles per unit: the compensation is the plan's, so every trained unit has one or none. */
static int roles(const zt_engine *eng)
{
    int u = trained_unit(eng, 0);
    return u >= 0 && eng->units[u].comp ? ZT_STATE_NROLES : ZT_STATE_COMP;
}

int zt_engine_state_count(const zt_engine *eng) { return ntrained(eng) * roles(eng); }

/* Tensor i is trained unit i / roles, role i % roles; its buffer and dtype. */
static void *state_buffer(const zt_engine *eng, int i, zt_dtype *dt)
{
    const zt_unit_state *us = &eng->units[trained_unit(eng, i / roles(eng))];
    switch ((zt_state_role)(i % roles(eng))) {
    case ZT_STATE_M:
        *dt = us->optim_dt;
        return us->m;
    case ZT_STATE_V:
        *dt = us->optim_dt;
        return us->v;
    case ZT_STATE_COMP:
        *dt = us->master_dt;
        return us->comp;
    default:
        *dt = us->master_dt;
        return us->master;
    }
}

zt_state_tensor zt_engine_state_tensor(const zt_engine *eng, int i)
{
    zt_state_tensor t = {.unit = trained_unit(eng, i / roles(eng)), .role = (zt_state_role)(i % roles(eng))};
    (void)state_buffer(eng, i, &t.dtype);
    t.numel = eng->units[t.unit].shard_numel;
    t.offset = (size_t)eng->group_rank * t.numel;
    t.bytes = t.numel * zt_dtype_size(t.dtype);
    snprintf(t.name, sizeof t.name, "unit.%d.%s", t.unit, role_names[t.role]);
    return t;
}

void zt_engine_state_read(const zt_engine *eng, int i, void *host)
{
    assert(!zt_offload_update_pending(eng) && "a delayed update must be flushed before the state is read");
    zt_dtype dt;
    const void *b = state_buffer(eng, i, &dt);
    eng->sbe->to_host(host, b, eng->units[trained_unit(eng, i / roles(eng))].shard_numel * zt_dtype_size(dt));
}

void zt_engine_state_write(zt_engine *eng, int i, const void *host)
{
    zt_dtype dt;
    void *b = state_buffer(eng, i, &dt);
    int u = trained_unit(eng, i / roles(eng));
    zt_offload_master_written(eng, u); /* flushes a delayed update first */
    eng->sbe->to_device(b, host, eng->units[u].shard_numel * zt_dtype_size(dt));
}

/* A host-memory backend lends the buffer itself: no copy, no second allocation
 * of the whole state for a save.  Any other lends a copy (ZT_MEM_OTHER). */
void *zt_engine_state_map(zt_engine *eng, int i, int fill, zt_err *err)
{
    /* a checkpoint holds every update applied: a delayed one is finished first */
    zt_offload_flush(eng);
    zt_dtype dt;
    void *b = state_buffer(eng, i, &dt);
    if (eng->sbe->host_visible) /* the CPU's buffers, or a device's state offloaded to the host */
        return b;
    size_t bytes = zt_engine_state_tensor(eng, i).bytes;
    void *view = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!view) {
        zt_fail(err, ZT_EFAIL, "out of host memory for a copy of unit %d's %s (%zu bytes)",
                trained_unit(eng, i / roles(eng)),
                role_names[i % roles(eng)], bytes);
        return NULL;
    }
    if (fill)
        zt_engine_state_read(eng, i, view);
    return view;
}

void zt_engine_state_unmap(zt_engine *eng, int i, void *view, int send)
{
    zt_dtype dt;
    if (view && send) /* written in place, or about to be */
        zt_offload_master_written(eng, trained_unit(eng, i / roles(eng)));
    if (!view || view == state_buffer(eng, i, &dt))
        return;
    if (send)
        zt_engine_state_write(eng, i, view);
    zt_free(ZT_MEM_OTHER, view, zt_engine_state_tensor(eng, i).bytes);
}

/* ---- a parameter's values in and out: loading, saving, the tests' views ---- */

void zt_engine_set_param(zt_engine *eng, const zt_param *p, const void *src, zt_dtype src_dt)
{
    size_t slo, plo, n;
    if (!zt_engine_owned_range(eng, p, &slo, &plo, &n))
        return;
    zt_unit_state *us = &eng->units[p->unit];
    size_t es = zt_dtype_size(us->master_dt);
    us->frozen_fresh = 0;
    zt_offload_master_written(eng, p->unit);
    /* the master is written in place on the host; a device's slice is made on the
     * host first and copied over */
    void *dst = eng->sbe->host_visible ? (char *)us->master + slo * es : zt_alloc(ZT_MEM_OTHER, n * es);
    if (!dst) {
        fprintf(stderr, "ztrain: error: out of host memory loading %s (%zu elements)\n", p->name, n);
        abort(); /* a sink has no way to fail (hf_model.h); loading needs this little */
    }
    for (size_t i = 0; i < n; i++) {
        float x = zt_load_f32(src, src_dt, plo + i);
        /* round to the load dtype first (torch_dtype), then store as master */
        float loaded = eng->prec.load == ZT_F32    ? x
                       : eng->prec.load == ZT_BF16 ? zt_round_bf16(x)
                                                   : zt_round_f16(x);
        zt_store_f32(dst, us->master_dt, i, loaded);
    }
    if (!eng->sbe->host_visible) {
        eng->be->to_device((char *)us->master + slo * es, dst, n * es);
        zt_free(ZT_MEM_OTHER, dst, n * es);
    }
}

/* Gather a unit's shards of buf (dt, shard_numel each) into full (P). */
static void gather_unit(zt_engine *eng, int u, void *full, const void *shard, zt_dtype dt)
{
    size_t P = eng->lay->units[u].padded_numel;
    if (eng->group_size == 1) {
        eng->be->copy(full, shard, P * zt_dtype_size(dt));
        return;
    }
    zt_comm_allgather(eng->comm, full, shard, P, dt);
}

/* Whether any parameter of unit u is asked for (vals[i] not NULL). */
static int unit_wanted(const zt_engine *eng, float *const *vals, int u)
{
    for (int i = 0; i < eng->lay->nparams; i++)
        if (eng->lay->params[i].unit == u && vals[i])
            return 1;
    return 0;
}

static int full_values(zt_engine *eng, float **vals, int grads, zt_err *err)
{
    /* Saving and tests are not training traffic: leave the counters as they were. */
    zt_comm saved = *eng->comm;
    size_t maxP = 0;
    for (int u = 0; u < eng->lay->nunits; u++)
        if (eng->lay->units[u].padded_numel > maxP && unit_wanted(eng, vals, u))
            maxP = eng->lay->units[u].padded_numel;
    size_t bytes = maxP * sizeof(float); /* the widest dtype a master or gradient has */
    /* each unit is gathered where the buffers live, then read on the host */
    const zt_backend *be = eng->be;
    void *full = be->alloc(ZT_MEM_OTHER, bytes);
    void *host = be->host_visible ? full : zt_alloc(ZT_MEM_OTHER, bytes);
    if (!full || !host) {
        be->free(ZT_MEM_OTHER, full, bytes);
        if (host != full)
            zt_free(ZT_MEM_OTHER, host, bytes);
        return zt_fail(err, ZT_EFAIL, "out of memory gathering parameters");
    }
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        size_t P = eng->lay->units[u].padded_numel;
        if (!unit_wanted(eng, vals, u)) /* the same on every rank: all skip its collective */
            continue;
        /* stage 0-1 gradients are full-length after the reduction (stage 1 keeps the
         * reduced shard at the front of the buffer) */
        if (grads) /* the gradient as the step reads it: a pending rounding done */
            zt_engine_grad_settle(eng, u);
        const void *src = grads ? us->grad : us->master;
        zt_dtype dt = grads ? eng->prec.master : us->master_dt; /* a frozen master: the load dtype */
        if (grads && eng->stage == 0)
            be->copy(full, src, us->grad_numel * zt_dtype_size(dt));
        else if (!grads && eng->offload)
            zt_offload_gather_master(eng, u, full);
        else
            gather_unit(eng, u, full, src, dt);
        if (host != full)
            be->to_host(host, full, P * zt_dtype_size(dt));
        for (int i = 0; i < eng->lay->nparams; i++) {
            const zt_param *p = &eng->lay->params[i];
            if (p->unit == u && vals[i])
                zt_convert(vals[i], ZT_F32, (char *)host + p->offset * zt_dtype_size(dt), dt, p->numel);
        }
    }
    if (host != full)
        zt_free(ZT_MEM_OTHER, host, bytes);
    be->free(ZT_MEM_OTHER, full, bytes);
    memcpy(eng->comm->bytes, saved.bytes, sizeof saved.bytes);
    memcpy(eng->comm->calls, saved.calls, sizeof saved.calls);
    return ZT_OK;
}

int zt_engine_full_params(zt_engine *eng, float **vals, zt_err *err)
{
    zt_offload_flush(eng); /* the saved model holds every update applied */
    return full_values(eng, vals, 0, err);
}

int zt_engine_full_grads(zt_engine *eng, float **vals, zt_err *err)
{
    zt_engine_reduce_grads(eng);
    return full_values(eng, vals, 1, err);
}
