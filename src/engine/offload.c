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
 *         host between its uses).
 *
 * Overlap.  Each unit keeps its shard in the compute dtype in pinned host memory
 * (host_casts, 2 bytes/parameter/G in bf16, as DeepSpeed keeps the fp16 copy of its
 * offloaded parameters; the master shard itself when it is in the compute dtype),
 * written by the host right after that unit's AdamW.  Every
 * upload reads it with to_device_async on the copy queue and the gather that reads
 * the slot comes after a copy_join, an event the device waits for: the host never
 * waits for an upload.  The step runs unit by unit in the order the gradient shards
 * came down (the backward's), and at stages 1-2 each unit's upload and all-gather
 * are queued as soon as its AdamW is done, so the device gathers unit u while the
 * host updates the next one.  At stage 3 the shard stays on the host and each
 * gather (prefetched or not) queues its upload the same way.  A host cast is only
 * rewritten at the next step, after copy_wait has joined every upload that read it.
 *
 * Delayed parameter update (DeepSpeed's DPU, --offload_delayed_update).  Step k
 * copies its gradient shards down as above, then hands AdamW to a host thread
 * (dpu_main) and returns: the device computes step k+1's forward and backward
 * while the host updates.  Step k+1 joins the thread and only then uploads the
 * parameters of update k, so with θ_j the master after j updates,
 *     step 1 and step 2 compute with θ_0, step s >= 3 with θ_{s-2},
 *     update s applies the gradient of step s, taken at θ_{s-2}, to θ_{s-1}.
 * The thread writes the master, m, v and a second set of host casts
 * (host_casts_next), and reads a second set of gradient shards, so the device's
 * reads (the current host casts) and writes (the gradient copies of the next
 * backward) never meet it.  zt_offload_flush joins it without uploading, so a
 * checkpoint (or the saved model) holds every update applied while the run's own
 * numbers do not change. */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
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

/* The largest trained unit's shard: what one gradient staging buffer must hold (a
 * frozen unit, LoRA's base, has no gradient). */
static size_t max_shard(const zt_layout *lay, int group_size)
{
    size_t m = 0;
    for (int u = 0; u < lay->nunits; u++)
        m = lay->units[u].frozen ? m : max_sz(m, lay->units[u].padded_numel / (size_t)group_size);
    return m;
}

/* Stages 2-3 copy each unit's gradient shard down as its reduction completes, so
 * each unit has a host shard of its own (as DeepSpeed's offloaded gradient
 * partition); stage 1 reduces at the step and stages one shard at a time. */
static int early_copies(int stage) { return stage >= 2; }

/* A gradient shard per unit: copied down in the backward (stages 2-3), or kept for
 * the delayed update's thread (any stage). */
static int per_unit_grads(int stage, int delayed) { return early_copies(stage) || delayed; }

/* The shards of every unit, or of the trained ones only (the gradients'). */
static size_t all_shards(const zt_layout *lay, int group_size, int trained_only)
{
    size_t n = 0;
    for (int u = 0; u < lay->nunits; u++)
        n += trained_only && lay->units[u].frozen ? 0 : lay->units[u].padded_numel / (size_t)group_size;
    return n;
}

/* The compute-dtype shards are the master shards themselves when the dtypes agree
 * (fp32 training): nothing to convert, and nothing writes the master while its
 * upload may run, since the step begins with a copy_wait.  The delayed update's
 * thread writes the master beside the device's uploads: it needs its own copies. */
static int casts_alias_master(zt_precision prec, int delayed) { return prec.compute == prec.master && !delayed; }

void zt_offload_staging_bytes(const zt_layout *lay, zt_precision prec, int stage, int group_size, int delayed,
                              size_t *grads, size_t *cast)
{
    size_t g = per_unit_grads(stage, delayed) ? all_shards(lay, group_size, 1) : max_shard(lay, group_size);
    int sets = delayed ? 2 : 1; /* the delayed update's thread works on a second set */
    *grads = g * zt_dtype_size(prec.master) * (per_unit_grads(stage, delayed) ? (size_t)sets : 1);
    size_t casts = all_shards(lay, group_size, 0) * zt_dtype_size(prec.compute) * (size_t)sets;
    *cast = casts_alias_master(prec, delayed) ? 0 : casts;
}

/* The delayed update's thread and what it was handed (offload.c's own). */
typedef struct zt_dpu {
    pthread_t thread;
    int running;    /* started, not joined */
    int unapplied;  /* joined, its parameters not yet uploaded (the next step does it) */
    zt_engine *eng;
    zt_adamw_hparams hp;
    double lr;
    long t;
    float clip;
    void **grads;             /* the gradient shards it reads (the set not being copied into) */
    int *order;               /* the units in step_order's order, fixed at the start */
    int *g_bf16;              /* per unit: its shard's rounding was pending at the start (grad_round_pending,
                               * which the next backward changes while the thread reads) */
    int threads;              /* the caller's OpenMP team size (a new thread starts with the default) */
    zt_adamw_audit *audits;   /* per parameter, summed by the main thread once joined */
} zt_dpu;

/* A host buffer per unit (per trained unit with trained_only: gradients). */
static void *host_set_alloc(zt_engine *eng, zt_mem_cat cat, void **set, size_t es, size_t *bytes, int trained_only)
{
    for (int u = 0; u < eng->lay->nunits; u++) {
        set[u] = NULL;
        if (trained_only && eng->lay->units[u].frozen)
            continue;
        size_t b = eng->units[u].shard_numel * es;
        if (!(set[u] = zt_offload_state_alloc(eng, cat, b)))
            return NULL;
        *bytes += b;
    }
    return set;
}

static void host_set_free(zt_engine *eng, zt_mem_cat cat, void **set, size_t es)
{
    for (int u = 0; set && u < eng->lay->nunits; u++)
        zt_offload_state_free(eng, cat, set[u], eng->units[u].shard_numel * es);
}

static void **table(size_t n) { return zt_alloc(ZT_MEM_OTHER, n * sizeof(void *)); }

int zt_offload_init(zt_engine *eng, zt_err *err)
{
    eng->host_grad_unit = -1;
    if (!eng->offload)
        return ZT_OK;
    int n = eng->lay->nunits, delayed = eng->overlap.offload_delayed_update;
    size_t gs = zt_dtype_size(eng->prec.master), cs = zt_dtype_size(eng->prec.compute);
    eng->host_casts = table(n);
    eng->cast_fresh = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->cast_fresh);
    eng->reduce_order = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->reduce_order);
    eng->casts_alias = casts_alias_master(eng->prec, delayed);
    int ok = eng->host_casts && eng->cast_fresh && eng->reduce_order;
    for (int u = 0; ok && eng->casts_alias && u < n; u++) {
        eng->host_casts[u] = eng->units[u].master;
        eng->cast_fresh[u] = 1;
    }
    ok = ok && (eng->casts_alias || host_set_alloc(eng, ZT_MEM_COMM, eng->host_casts, cs, &eng->host_cast_bytes, 0));
    if (ok && per_unit_grads(eng->stage, delayed)) {
        eng->host_grads = table(n);
        eng->host_grads_ready = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->host_grads_ready);
        eng->grad_markers = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->grad_markers);
        ok = eng->host_grads && eng->host_grads_ready && eng->grad_markers &&
             host_set_alloc(eng, ZT_MEM_GRADS, eng->host_grads, gs, &eng->host_grad_bytes, 1);
        for (int u = 0; ok && u < n; u++)
            eng->grad_markers[u] = -1;
    } else if (ok) {
        eng->host_grad_bytes = max_shard(eng->lay, eng->group_size) * gs;
        ok = (eng->host_grad = zt_offload_state_alloc(eng, ZT_MEM_COMM, eng->host_grad_bytes)) != NULL;
    }
    if (ok && delayed) {
        ok = (eng->dpu = zt_alloc(ZT_MEM_OTHER, sizeof *eng->dpu)) && (eng->host_casts_next = table(n)) &&
             (eng->cast_fresh_next = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->cast_fresh_next)) &&
             (eng->host_grads_next = table(n)) &&
             (eng->dpu->audits = zt_alloc(ZT_MEM_OTHER, (size_t)eng->lay->nparams * sizeof *eng->dpu->audits)) &&
             (eng->dpu->order = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->dpu->order)) &&
             (eng->dpu->g_bf16 = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *eng->dpu->g_bf16)) &&
             host_set_alloc(eng, ZT_MEM_COMM, eng->host_casts_next, cs, &eng->host_cast_bytes, 0) &&
             host_set_alloc(eng, ZT_MEM_GRADS, eng->host_grads_next, gs, &eng->host_grad_bytes, 1);
        if (eng->dpu)
            eng->dpu->eng = eng;
    }
    if (!ok)
        return zt_fail(err, ZT_EFAIL, "out of pinned host memory for the offload's gradient shards and staging "
                       "(%zu bytes)", eng->host_grad_bytes + eng->host_cast_bytes);
    return ZT_OK;
}

void zt_offload_free(zt_engine *eng)
{
    if (!eng->offload || !eng->lay)
        return;
    zt_offload_flush(eng);
    eng->be->copy_wait(); /* no copy may land in, or read from, a freed buffer */
    size_t n = (size_t)eng->lay->nunits, gs = zt_dtype_size(eng->prec.master), cs = zt_dtype_size(eng->prec.compute);
    host_set_free(eng, ZT_MEM_GRADS, eng->host_grads, gs);
    host_set_free(eng, ZT_MEM_GRADS, eng->host_grads_next, gs);
    if (!eng->casts_alias)
        host_set_free(eng, ZT_MEM_COMM, eng->host_casts, cs);
    host_set_free(eng, ZT_MEM_COMM, eng->host_casts_next, cs);
    zt_free(ZT_MEM_OTHER, eng->host_grads, n * sizeof(void *));
    zt_free(ZT_MEM_OTHER, eng->host_grads_next, n * sizeof(void *));
    zt_free(ZT_MEM_OTHER, eng->host_casts, n * sizeof(void *));
    zt_free(ZT_MEM_OTHER, eng->host_casts_next, n * sizeof(void *));
    zt_free(ZT_MEM_OTHER, eng->host_grads_ready, n * sizeof *eng->host_grads_ready);
    zt_free(ZT_MEM_OTHER, eng->grad_markers, n * sizeof *eng->grad_markers);
    zt_free(ZT_MEM_OTHER, eng->cast_fresh, n * sizeof *eng->cast_fresh);
    zt_free(ZT_MEM_OTHER, eng->cast_fresh_next, n * sizeof *eng->cast_fresh_next);
    zt_free(ZT_MEM_OTHER, eng->reduce_order, n * sizeof *eng->reduce_order);
    if (eng->dpu) {
        zt_free(ZT_MEM_OTHER, eng->dpu->audits, (size_t)eng->lay->nparams * sizeof *eng->dpu->audits);
        zt_free(ZT_MEM_OTHER, eng->dpu->order, n * sizeof *eng->dpu->order);
        zt_free(ZT_MEM_OTHER, eng->dpu->g_bf16, n * sizeof *eng->dpu->g_bf16);
        zt_free(ZT_MEM_OTHER, eng->dpu, sizeof *eng->dpu);
    }
    zt_offload_state_free(eng, ZT_MEM_COMM, eng->host_grad, eng->host_grad_bytes);
    eng->host_grads = eng->host_grads_next = eng->host_casts = eng->host_casts_next = NULL;
    eng->host_grads_ready = eng->cast_fresh = eng->cast_fresh_next = eng->reduce_order = NULL;
    eng->grad_markers = NULL;
    eng->dpu = NULL;
    eng->host_grad = NULL;
}

/* Unit u's shard in the compute dtype, in host memory, as the master stands (converted
 * on the host's cores when the master was written since: loading, a checkpoint). */
static const void *host_cast(zt_engine *eng, int u)
{
    if (!eng->cast_fresh[u]) {
        const zt_unit_state *us = &eng->units[u];
        eng->be->copy_wait(); /* an upload queued earlier may still read it */
        eng->sbe->convert(eng->host_casts[u], eng->prec.compute, us->master, us->master_dt, us->shard_numel);
        eng->cast_fresh[u] = 1;
    }
    return eng->host_casts[u];
}

void zt_offload_shard_to_compute(zt_engine *eng, int u, void *dst, size_t k, size_t n)
{
    const zt_unit_state *us = &eng->units[u];
    zt_dtype cd = eng->prec.compute;
    if (!eng->offload) {
        const void *src = (const char *)us->master + k * zt_dtype_size(us->master_dt);
        eng->be->convert(dst, cd, src, us->master_dt, n);
        return;
    }
    /* the host's compute-dtype shard goes up on the copy queue; the gather that
     * reads dst is queued after the join, so only the device waits for it */
    size_t cs = zt_dtype_size(cd);
    eng->be->to_device_async(dst, (const char *)host_cast(eng, u) + k * cs, n * cs);
    eng->be->copy_join();
    eng->uploads_async++;
}

void zt_offload_master_written(zt_engine *eng, int u)
{
    if (!eng->offload)
        return;
    zt_offload_flush(eng); /* the delayed update's thread writes the master too */
    if (eng->casts_alias) { /* the master is what goes up: no upload may still read it */
        eng->be->copy_wait();
        return;
    }
    eng->cast_fresh[u] = 0;
    if (eng->cast_fresh_next)
        eng->cast_fresh_next[u] = 0;
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
    if (!eng->host_grads || u < 0 || !early_copies(eng->stage))
        return;
    eng->host_grads_ready[u] = 0; /* the device's shard changed since any earlier copy */
    if (!eng->sync_backward || eng->reduce_unit == u || eng->pieces.unit == u)
        return; /* not the last micro-batch, or its reduction is still in flight */
    const zt_unit_state *us = &eng->units[u];
    eng->be->to_host_async(eng->host_grads[u], us->grad, us->shard_numel * zt_dtype_size(us->grad_dt));
    eng->grad_markers[u] = eng->be->copy_record(); /* the step waits for this copy alone */
    eng->host_grads_ready[u] = 1;
    if (eng->nreduce_order < eng->lay->nunits) /* once per unit (step_order drops repeats) */
        eng->reduce_order[eng->nreduce_order++] = u;
    eng->grads_copied_early++;
}

/* After a copy_wait: every copy down has landed, no marker is left to wait for. */
static void grad_markers_landed(zt_engine *eng)
{
    for (int u = 0; eng->grad_markers && u < eng->lay->nunits; u++)
        eng->grad_markers[u] = -1;
}

/* Every unit's shard was queued down in the backward, each behind a marker of its
 * own: the step waits for them one by one (zt_offload_prepare), not all at once. */
static int every_grad_marked(const zt_engine *eng)
{
    if (!eng->grad_markers)
        return 0;
    for (int u = 0; u < eng->lay->nunits; u++)
        if (!eng->lay->units[u].frozen && (!eng->host_grads_ready[u] || eng->grad_markers[u] < 0))
            return 0;
    return 1;
}

void zt_offload_zero_grads(zt_engine *eng)
{
    if (!eng->offload)
        return;
    eng->nreduce_order = 0;
    if (!eng->host_grads)
        return;
    eng->be->copy_wait();
    memset(eng->host_grads_ready, 0, (size_t)eng->lay->nunits * sizeof *eng->host_grads_ready);
    grad_markers_landed(eng);
}

const void *zt_offload_prepare(zt_engine *eng, int u)
{
    const zt_unit_state *us = &eng->units[u];
    if (eng->host_grads) { /* stages 2-3: copied during the backward, else now */
        if (eng->host_grads_ready[u] && eng->grad_markers[u] >= 0) {
            /* its copy and those queued before it (the copy queue runs in order),
             * not those after: they come down while the host updates this unit */
            eng->be->copy_wait_marker(eng->grad_markers[u]);
            eng->grad_markers[u] = -1;
        }
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

/* The units in the order the step updates them: as their gradient shards came down
 * in the backward (the last layer first), then any other (stage 1: in order). */
int zt_offload_step_order(zt_engine *eng, int *order)
{
    int n = eng->lay->nunits, k = 0;
    char seen[n];
    memset(seen, 0, (size_t)n);
    for (int i = 0; i < eng->nreduce_order; i++)
        if (!seen[eng->reduce_order[i]]) {
            seen[eng->reduce_order[i]] = 1;
            order[k++] = eng->reduce_order[i];
        }
    for (int u = 0; u < n; u++)
        if (!seen[u])
            order[k++] = u;
    return k;
}

static void *dpu_main(void *arg)
{
    zt_dpu *d = arg;
    zt_engine *eng = d->eng;
    int n = eng->lay->nunits;
    omp_set_num_threads(d->threads); /* --threads holds for the host's AdamW too */
    memset(d->audits, 0, (size_t)eng->lay->nparams * sizeof *d->audits);
    for (int i = 0; i < n; i++) {
        int u = d->order[i];
        const zt_unit_state *us = &eng->units[u];
        if (eng->lay->units[u].frozen) /* no update; its cast is remade when gathered (cast_fresh) */
            continue;
        zt_engine_adamw_unit(eng, u, &d->hp, d->lr, d->t, d->clip, d->grads[u], d->g_bf16[u], d->audits);
        eng->sbe->convert(eng->host_casts_next[u], eng->prec.compute, us->master, us->master_dt, us->shard_numel);
        eng->cast_fresh_next[u] = 1;
    }
    return NULL;
}

void zt_offload_flush(zt_engine *eng)
{
    zt_dpu *d = eng->dpu;
    if (!d || !d->running)
        return;
    pthread_join(d->thread, NULL);
    d->running = 0;
    d->unapplied = 1;
}

int zt_offload_update_pending(const zt_engine *eng) { return eng->dpu && eng->dpu->running; }

/* The delayed update of the last step is joined and its parameters become the ones
 * the device computes with: the host casts change sets (the caller then uploads and
 * gathers them: zt_offload_step_begin).  1 when an update landed. */
static int dpu_land(zt_engine *eng)
{
    zt_offload_flush(eng);
    zt_dpu *d = eng->dpu;
    if (!d->unapplied)
        return 0;
    d->unapplied = 0;
    /* summed over the group here, where every rank is (a flush may come from one
     * rank's save only) */
    zt_engine_sum_audits(eng, d->audits);
    void **c = eng->host_casts;
    eng->host_casts = eng->host_casts_next;
    eng->host_casts_next = c;
    int *f = eng->cast_fresh;
    eng->cast_fresh = eng->cast_fresh_next;
    eng->cast_fresh_next = f;
    return 1;
}

int zt_offload_step_begin(zt_engine *eng)
{
    if (!eng->offload)
        return 0;
    eng->host_grad_unit = -1;
    int landed = eng->dpu && dpu_land(eng);
    /* Every shard came down behind its own marker: the step waits for each just
     * before its unit's AdamW, in the order they were queued, so the host updates
     * unit k while unit k+1's copy is still running.  Waiting for unit u's marker
     * also finishes every upload queued before it (one queue, in order), and every
     * upload that read unit u's host cast was queued before u's gradient was
     * complete (a unit is not gathered again in the backward that finished it): so
     * no upload still reads a host cast when the step rewrites it.  The delayed
     * update's thread needs all shards at once. */
    if (!eng->dpu && every_grad_marked(eng))
        return landed;
    /* otherwise the gradient copies of the backward land together, and no upload
     * still reads a host cast the step is about to rewrite */
    eng->be->copy_wait();
    grad_markers_landed(eng);
    return landed;
}

void zt_offload_release(zt_engine *eng, int u)
{
    if (eng->casts_alias) /* the master itself goes up */
        return;
    const zt_unit_state *us = &eng->units[u];
    eng->sbe->convert(eng->host_casts[u], eng->prec.compute, us->master, us->master_dt, us->shard_numel);
    eng->cast_fresh[u] = 1;
}

int zt_offload_update_delayed(zt_engine *eng, const zt_adamw_hparams *hp, double lr, float clip)
{
    zt_dpu *d = eng->dpu;
    if (!d)
        return 0;
    int n = eng->lay->nunits;
    for (int u = 0; u < n; u++) { /* every shard on the host, then the thread takes the update */
        if (eng->lay->units[u].frozen)
            continue;
        (void)zt_offload_prepare(eng, u);
        d->g_bf16[u] = eng->units[u].grad_round_pending;
        (void)host_cast(eng, u); /* the device's set complete before the thread starts */
    }
    d->grads = eng->host_grads;
    zt_offload_step_order(eng, d->order);
    d->hp = *hp;
    d->threads = omp_get_max_threads();
    d->lr = lr;
    d->t = eng->optimizer_steps;
    d->clip = clip;
    /* the next backward copies into the other set while the thread reads this one */
    eng->host_grads = eng->host_grads_next;
    eng->host_grads_next = d->grads;
    if (pthread_create(&d->thread, NULL, dpu_main, d) == 0)
        d->running = 1;
    else { /* no thread to be had: the same update, not overlapped */
        dpu_main(d);
        d->unapplied = 1;
    }
    return 1;
}
