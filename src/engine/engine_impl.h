/* engine_impl.h — the engine's own bookkeeping, private to src/engine.
 *
 * Only the .c files of src/engine include this (make check-layers refuses a
 * private header, NAME_impl.h, included from another folder): everything else sees the opaque zt_engine of
 * engine.h and its functions, so where the buffers live (host, pinned host, a
 * device) and how they are laid out can change without any caller noticing.
 * Checkpoints reach the state through the state view (engine.h), the trainer
 * through the accessors. */
#ifndef ZT_ENGINE_IMPL_H
#define ZT_ENGINE_IMPL_H

#include "engine.h"

typedef struct zt_unit_state {
    zt_unit_phase phase;
    /* the dtype of each buffer as the code that made or last wrote it records it
     * (allocation from the size table, each gather, each gradient reduction),
     * held against the plan at the hooks (zt_engine_check_dtypes) */
    zt_dtype master_dt, grad_dt, optim_dt, gathered_dt;
    zt_dtype reduced_dt;    /* the dtype this step's gradient went through on its way */
    int reduced_valid;      /* reduced_dt is set (a gradient arrived since zero_grads) */
    size_t shard_numel;     /* P / G */
    size_t grad_numel;      /* P (stages 0-1) or P / G (stages 2-3) */
    void *master, *grad, *m, *v;
    void *comp;             /* Kahan compensation of master (P/G, master dtype), or NULL */
    void *gathered;         /* compute dtype, P elements; NULL while released in stage 3 */
    int gathered_alias;     /* gathered == master (stage 0, master dtype == compute dtype) */
    int gathered_own;       /* gathered is a buffer of the unit's own, kept between steps */
    int persistent;         /* stage 3: stays gathered (DeepSpeed's param persistence) */
    int pool_slot;          /* stage 3: which pool buffer, -1 none */
    float *staging;         /* fp32 full gradient while the unit's backward runs */
    int grad_empty;         /* grad holds nothing of this step: its elements are undefined (zero_grads
                             * clears nothing) but its padding, which holds zeros; the first write
                             * stores (grad_store), later ones add.  Set by zero_grads, cleared by
                             * the first write */
    int grad_rounded;       /* every grad value is representable in the reduce dtype */
    int grad_round_pending; /* the gradient is bf16(grad): its rounding to the bf16 reduce dtype is left to
                             * its readers (engine.c, "rounding pending"; zt_engine_grad_settle) */
    int reduced;            /* stage 0: this step's all-reduce of grad has started */
    int frozen_fresh;       /* a frozen unit's own gathered copy holds its master (set_param clears it) */
} zt_unit_state;

/* stage 3: the root unit, the unit in use and the ones prefetched */
#define ZT_GATHER_POOL (2 + ZT_PREFETCH_MAX)

/* A unit's reduction in pieces (DeepSpeed's reduce_bucket), under way: of its
 * pieces, `finished` are in the accumulator, the next `started - finished` in
 * flight in the slots, and those from offset `next` on not started; src is read
 * as each piece starts (engine.c, "reductions in pieces").  Four slots give a
 * piece four ticks to finish before its slot is wanted again: with two (DeepSpeed's
 * double buffer), waits came back whenever the ranks drifted apart under load. */
#define ZT_PIECE_SLOTS 4
typedef struct zt_pieces {
    int unit;                   /* -1: none */
    const void *src;            /* the unit's full gradient: P elements of src_dt */
    zt_dtype src_dt;
    int add;                    /* 1: added to the accumulator; 0: stored at its front */
    size_t next;                /* offset within a member's slice of the next piece */
    int started, finished;      /* pieces started / finished, for the slot ring */
    int per_tick;               /* pieces to start at each tick */
    zt_comm_op op[ZT_PIECE_SLOTS];
    size_t k[ZT_PIECE_SLOTS], n[ZT_PIECE_SLOTS];
} zt_pieces;

struct zt_engine {
    const zt_backend *be;       /* where the buffers live and the kernels run */
    const zt_layout *lay;
    zt_precision prec;
    int stage;                  /* ZeRO stage 0..3 */
    zt_comm *comm;
    int group_size, group_rank; /* optimizer/param shard group (1, 0 for stage 0) */
    zt_unit_state *units;
    float *staging_root;        /* root unit's staging (open across the whole backward) */
    float *staging_layers;      /* shared by non-root units, one open at a time */
    size_t staging_root_numel, staging_layers_numel, staging_spare_numel;
    size_t layers_numel_max;    /* the largest trained non-root unit's numel: how far the layers'
                                 * staging may hold a bigger unit's values beyond a smaller one's
                                 * parameters (grad_begin clears that part of its padding) */
    float *staging_spare;       /* overlapped fp32 reduce-scatter: a unit's staging is sent
                                 * while the next unit's backward fills this one */
    void *comm_full;            /* reduce-dtype copy of the largest unit's gradient (P) */
    void *comm_shard;           /* reduce-dtype result of a reduce-scatter (largest P/G) */
    void *comm_slices;          /* reduce-scatter's received slices (largest P, reduce dtype) */
    size_t comm_full_bytes, comm_shard_bytes, comm_slices_bytes;
    void *comm_gather;          /* all-gathers in pieces: this rank's piece, then the group's */
    size_t comm_gather_bytes;
    size_t reduce_piece, gather_piece; /* elements per member of a piece (reduce_bucket,
                                        * allgather_bucket); 0: whole units */
    void *pool[ZT_GATHER_POOL]; /* stage 3 gathered buffers */
    int pool_used[ZT_GATHER_POOL];
    size_t pool_bytes;
    /* overlap (zt_overlap): the collectives in flight */
    zt_overlap overlap;
    int *next_fwd, *next_bwd;   /* per unit: the layer unit the forward / backward needs next, -1 none */
    int in_backward;            /* a gradient was opened since the root was last acquired */
    int sync_backward;          /* the coming backward ends the step's accumulation */
    zt_comm_op queue_op[ZT_GATHER_POOL]; /* stage 3 prefetches in flight, oldest first */
    int queue_unit[ZT_GATHER_POOL];
    int nqueued;
    int gather_unit;            /* the oldest prefetch's unit, -1 none */
    zt_comm_op reduce_op;       /* stages 2-3 */
    int reduce_unit;            /* its unit, -1 none */
    zt_pieces pieces;           /* a reduction in pieces (reduce_bucket) */
    long ticks;                 /* zt_engine_progress calls so far */
    long ticks_at_grad_end;     /* ticks at the last grad_end that reduced */
    long ticks_per_unit;        /* ticks between the last two such grad_ends (0: none yet) */
    /* what the overlap did, counted since init (tests check it happens) */
    long prefetch_used;         /* acquires served by a prefetched all-gather */
    long prefetch_dropped;      /* prefetches finished unused */
    long reduce_overlapped;     /* reduce-scatters finished after their grad_end returned */
    long pieces_overlapped;     /* pieces of a reduction started by a tick after grad_end */
    long optimizer_steps;       /* t of AdamW, counts applied steps */
    int nonfinite_unit;         /* the last step: lowest unit whose gradient held an inf or NaN on
                                 * some rank (-1: none) */
    zt_adamw_audit last_audit;  /* the last step's lost-update audit, summed over the group */
    int grads_reduced;          /* stages 0-1: this step's reduction is done */
    /* offload (offload.c): the sharded state in host memory, AdamW on the host */
    int offload;                /* master, m, v, comp are host memory (page-locked) */
    const zt_backend *sbe;      /* the table of those buffers: the CPU's when offloaded, else be */
    void *host_grad;            /* a unit's gradient shard (master dtype), copied down for the step */
    void **host_casts;          /* per unit: its shard in the compute dtype, what every upload reads */
    int *cast_fresh;            /* per unit: host_casts[u] is the master as it stands for the device */
    int casts_alias;            /* host_casts[u] is the master shard itself (compute dtype = master's) */
    size_t host_grad_bytes, host_cast_bytes;
    int host_grad_unit;         /* the unit whose shard host_grad holds this step, -1 none */
    void **host_grads;          /* stages 2-3: per unit, its gradient shard copied down as its
                                 * reduction completes in the last backward (NULL otherwise) */
    int *host_grads_ready;      /* per unit: host_grads holds this step's shard (after copy_wait,
                                 * or after grad_markers[u]'s wait) */
    long *grad_markers;         /* per unit: the copy queue's marker after its shard's copy down,
                                 * -1 once waited for (or none queued) */
    int *reduce_order;          /* the units whose shards came down in this backward, in that order */
    int nreduce_order;
    /* the delayed update (offload.c): its thread's second sets, NULL without */
    struct zt_dpu *dpu;
    void **host_casts_next, **host_grads_next;
    int *cast_fresh_next;
    long grads_copied_early;    /* shards copied down during a backward, since create */
    long uploads_async;         /* shards uploaded on the copy queue (to_device_async), since create */
    struct zt_async *async;     /* the step's scalars and asynchronous step (async_step.h) */
    /* the steps queued (zt_engine_step_queue, or a captured one's zt_engine_step_readback)
     * and not yet finished: exact mode's one outcome waits here, fast mode's (up to
     * ZT_STEPS_IN_FLIGHT) in the readback slots the caller's ring names */
    int step_queued, queued_skip;
    double queued_norm;
};

/* ---- offload.c: where the sharded state lives ---------------------------------
 *
 * With eng->offload, the master shard, m, v and the Kahan buffer are host memory
 * from the backend's host_alloc (pinned on a device), and every kernel that reads
 * or writes them runs from eng->sbe, the CPU's table, on the host's cores; the
 * gradient, the gathered parameters and the communication buffers stay on the
 * device.  The bytes meet at two points: the step copies each unit's reduced
 * gradient shard down (zt_offload_prepare), and each gather uploads the shard in the
 * compute dtype (zt_offload_shard_to_compute).  The CPU kernels are the emulated
 * device's, so the numbers are the same bits either way. */

/* Whether an engine on be with this plan offloads (the plan asked, and be's
 * buffers are not host memory already: on the CPU it is a no-op). */
int zt_offload_wanted(const zt_backend *be, int stage, const zt_overlap *ov);
/* The table that runs the state's kernels: be, or the host's (the CPU's) when
 * offloaded, the one place the engine names a table it was not given. */
const zt_backend *zt_offload_state_table(const zt_backend *be, int offload);
/* A state buffer (master, m, v, comp) of bytes, zeroed, accounted to cat (and as
 * host bytes when offloaded), from be or host memory; and its free. */
void *zt_offload_state_alloc(const zt_engine *eng, zt_mem_cat cat, size_t bytes);
void zt_offload_state_free(const zt_engine *eng, zt_mem_cat cat, void *p, size_t bytes);
/* The host staging the offloaded step and gathers use; ZT_OK when not offloaded. */
int zt_offload_init(zt_engine *eng, zt_err *err);
void zt_offload_free(zt_engine *eng);
/* Bytes of that staging for a plan, all host: the gradient shards (every unit's at
 * stages 2-3 or with the delayed update, counted as gradients; one at stage 1, a
 * communication buffer) and every unit's compute-dtype shard (a communication
 * buffer); the delayed update doubles the per-unit sets. */
void zt_offload_staging_bytes(const zt_layout *lay, zt_precision prec, int stage, int group_size, int delayed,
                              size_t *grads, size_t *cast);
/* Elements [k, k+n) of unit u's master shard in the compute dtype into dst, a
 * device buffer: converted where the master lives; offloaded, the host's
 * compute-dtype shard uploaded on the copy queue, with the kernels queued after it
 * (the gather) ordered after the upload on the device, not by a host wait. */
void zt_offload_shard_to_compute(zt_engine *eng, int u, void *dst, size_t k, size_t n);
/* Unit u's master shard gathered over the group into full (P elements, master
 * dtype, a device buffer), from the host. */
void zt_offload_gather_master(zt_engine *eng, int u, void *full);
/* The offloaded step's hooks around unit u's AdamW on the host (step.c's unit
 * loop, DeepSpeed's sub-groups).  prepare: its reduced gradient shard as host
 * memory the host's AdamW reads: the copy queued during the backward
 * (zt_offload_grad_done), waited for alone, or the device's grad copied down now,
 * once per unit and step.  release: its compute-dtype host copy rewritten from the
 * updated master, for the upload the caller queues next. */
const void *zt_offload_prepare(zt_engine *eng, int u);
void zt_offload_release(zt_engine *eng, int u);
/* The units in the order the step updates them: as their gradient shards came down
 * in the backward (the last layer first), then the others; returns the count. */
int zt_offload_step_order(zt_engine *eng, int *order);
/* Unit u's gradient may have changed (a grad_end, a reduction finished): in the
 * backward that ends the accumulation (sync_backward), stages 2-3, once nothing
 * for u is in flight, queue the copy of its final shard down (to_host_async). */
void zt_offload_grad_done(zt_engine *eng, int u);
/* The step begins: a delayed update of the last step is joined (1: one landed,
 * its parameters for the caller to upload and gather), the copies queued during the
 * backward are joined.  0 when not offloaded. */
int zt_offload_step_begin(zt_engine *eng);
/* With the delayed update (--offload_delayed_update): the step's AdamW (t =
 * eng->optimizer_steps) handed to the host thread, every shard down first; 1.  0
 * without it: the caller runs the unit loop itself. */
int zt_offload_update_delayed(zt_engine *eng, const zt_adamw_hparams *hp, double lr, float clip);
/* The gradients were cleared: no copy holds this step's shard. */
void zt_offload_zero_grads(zt_engine *eng);
/* The delayed update in flight, if any, is finished on the host (master, m, v,
 * and the audit); the device keeps its parameters until the next step. */
void zt_offload_flush(zt_engine *eng);
/* A delayed update is running on the host thread. */
int zt_offload_update_pending(const zt_engine *eng);
/* Unit u's master was written outside the step (loading, a checkpoint): its
 * compute-dtype host copy is made again before its next upload. */
void zt_offload_master_written(zt_engine *eng, int u);

/* ---- step_rules.c: the rules every step variant shares ---- */
/* The slice of parameter p this rank owns (shard offset, offset in p, count); 0
 * when it owns none of it: the loading, the saving and every update read it. */
int zt_engine_owned_range(const zt_engine *eng, const zt_param *p, size_t *shard_lo, size_t *param_lo,
                          size_t *count);
/* Unsharded (a group of one) with an fp32 master and a persistent compute copy, on
 * the device: AdamW writes the copy as it updates the master, so no second pass
 * converts it (zt_engine_refresh_gathered is skipped). */
int zt_engine_cast_in_step(const zt_engine *eng);
/* A step's audit summed over the shard group (replicas audit the same elements). */
zt_adamw_audit zt_engine_group_audit(zt_engine *eng, zt_adamw_audit audit);
/* The world's verdict from this rank's first bad unit (-1: none) and whether its sum
 * was non-finite: 1 to skip; sets eng->nonfinite_unit (collective when world > 1). */
int zt_engine_agree_nonfinite(zt_engine *eng, int first_bad, int nonfinite);
/* AdamW over the part of unit u's parameters this rank owns, on eng->sbe, with the
 * gradient shard g, read as bf16(g) with g_bf16 (a copy of a gradient whose rounding
 * was pending when it was taken); parameter i's audit added into audits[i]. */
void zt_engine_adamw_unit(zt_engine *eng, int u, const zt_adamw_hparams *hp, double lr, long t, float clip,
                          const void *g, int g_bf16, zt_adamw_audit *audits);
/* last_audit from per-parameter audits, summed in the layout's order and over the group. */
void zt_engine_sum_audits(zt_engine *eng, const zt_adamw_audit *audits);
/* ---- engine.c, for step.c and engine_view.c ---- */
/* Unit u's pending rounding (grad_round_pending) done in place, for a reader that
 * cannot round as it reads; nothing when none is pending. */
void zt_engine_grad_settle(zt_engine *eng, int u);
/* Unit u's own gathered copy made again from its master (stages 0-2, stage 3's
 * persistent units; nothing for the others). */
void zt_engine_refresh_unit(zt_engine *eng, int u);


/* ---- engine_sizes.c, for engine.c: the buffers' sizes and dtypes ---- */
typedef struct zt_unit_sizes {
    size_t full;             /* P, the unit's padded length */
    size_t shard_numel;      /* P / G */
    size_t grad_numel;       /* P (stages 0-1) or P / G (stages 2-3) */
    zt_dtype master_dt, grad_dt, optim_dt, gathered_dt;
    int compensated;         /* a Kahan buffer beside master (16-bit master only) */
    int gathered_alias;      /* gathered is master itself (stage 0, master dtype = compute dtype) */
    int gathered_own;        /* a persistent gathered buffer of P elements (stages 0-2, no alias;
                              * stage 3's persistent units) */
    int trained;             /* 0: a frozen unit (LoRA's base, layout.h): no gradient, m, v or Kahan
                              * buffer, its master the values the gathers read */
} zt_unit_sizes;

typedef struct zt_shared_sizes {
    size_t staging_root_numel;   /* fp32: the root unit's gradient, open across the backward */
    size_t staging_layers_numel; /* fp32: the largest layer unit's, one open at a time */
    size_t spare_numel;          /* fp32: a second one for the overlapped reduce-scatter, or 0 */
    size_t comm_full_bytes, comm_shard_bytes, comm_slices_bytes;
    size_t comm_gather_bytes;    /* all-gathers in pieces: one piece and the group's pieces */
    int pool_slots;              /* stage 3's gathered buffers */
    size_t pool_bytes;           /* each: the largest unit in the compute dtype */
} zt_shared_sizes;

/* Stage 3: unit u stays gathered between steps (DeepSpeed's param persistence). */
int zt_eng_persistent_unit(const zt_layout *lay, int u, int stage, const zt_overlap *ov);
/* The reduce-scatter's and the all-gather's piece, in elements (0: whole units). */
size_t zt_eng_reduce_piece(const zt_layout *lay, int stage, int G, const zt_overlap *ov);
size_t zt_eng_gather_piece(const zt_layout *lay, int stage, int G, const zt_overlap *ov);

zt_unit_sizes zt_eng_unit_size(const zt_layout *lay, int u, zt_precision prec, int stage, int G,
                               const zt_overlap *ov);
zt_shared_sizes zt_eng_shared_size(const zt_layout *lay, zt_precision prec, int stage, int G,
                                   const zt_overlap *overlap);

/* Reductions in pieces (engine_pieces.c, DeepSpeed's reduce_bucket): unit u's full
 * gradient src begins (its first piece started; add: onto the accumulator, by
 * grad_store's rule, else stored at its front), the next piece starts (a tick), and
 * the unit's reduction ends (what is left started and everything finished). */
void zt_eng_pieces_begin(zt_engine *eng, int u, const void *src, zt_dtype src_dt, int add);
void zt_eng_piece_start(zt_engine *eng);
void zt_eng_pieces_end(zt_engine *eng);

#endif
