/* engine_view.c — the engine seen from outside (see engine.h): the state view
 * checkpoints read and write, and the accessors for what the trainer reports.
 * Everything here goes through the copies of the table that holds the state
 * (eng->sbe: the device's, or the CPU's when the state is offloaded), never
 * through a pointer into a buffer, unless that table's buffers are host memory. */
#include <assert.h>
#include <stdio.h>

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

/* Roles per unit: the compensation is the plan's, so every unit has one or none. */
static int roles(const zt_engine *eng) { return eng->units[0].comp ? ZT_STATE_NROLES : ZT_STATE_COMP; }

int zt_engine_state_count(const zt_engine *eng) { return eng->lay->nunits * roles(eng); }

/* Tensor i is unit i / roles, role i % roles; its buffer and dtype. */
static void *state_buffer(const zt_engine *eng, int i, zt_dtype *dt)
{
    const zt_unit_state *us = &eng->units[i / roles(eng)];
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
    zt_state_tensor t = {.unit = i / roles(eng), .role = (zt_state_role)(i % roles(eng))};
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
    eng->sbe->to_host(host, b, eng->units[i / roles(eng)].shard_numel * zt_dtype_size(dt));
}

void zt_engine_state_write(zt_engine *eng, int i, const void *host)
{
    zt_dtype dt;
    void *b = state_buffer(eng, i, &dt);
    zt_offload_master_written(eng, i / roles(eng)); /* flushes a delayed update first */
    eng->sbe->to_device(b, host, eng->units[i / roles(eng)].shard_numel * zt_dtype_size(dt));
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
        zt_fail(err, ZT_EFAIL, "out of host memory for a copy of unit %d's %s (%zu bytes)", i / roles(eng),
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
        zt_offload_master_written(eng, i / roles(eng));
    if (!view || view == state_buffer(eng, i, &dt))
        return;
    if (send)
        zt_engine_state_write(eng, i, view);
    zt_free(ZT_MEM_OTHER, view, zt_engine_state_tensor(eng, i).bytes);
}
