/* engine.h — the owner of every parameter byte: master shards, gradients,
 * optimizer state and the gathered compute-dtype copies the model reads, for
 * ZeRO stages 0-3 and hybrid sharding (contract §2).
 *
 * Let G be the shard-group size (1 for stage 0), r this rank's place in it, and
 * P a unit's padded length (a multiple of G).  Per unit:
 *   master, m, v   P/G elements, master dtype       slice r of the flat buffer
 *   grad           stage 0-1: P elements (local accumulation, reduced at the step)
 *                  stage 2-3: P/G elements (reduce-scattered after each backward)
 *   gathered       P elements, compute dtype: persistent in stages 0-2 (refreshed
 *                  after each optimizer step), borrowed from a small pool between
 *                  acquire and release in stage 3 (or from a prefetch until then)
 * The engine is the model's parameter owner (model/param_owner.h,
 * zt_engine_param_owner): the model brackets its use of a unit with
 * acquire/release and its weight gradients with grad_begin/grad_end; grad_begin
 * hands out a zeroed fp32 staging buffer for the unit's full gradient (or the
 * accumulator itself, when it is fp32, still zero and local).  Between its products it calls
 * zt_engine_progress, which moves the collectives the overlap left in flight.  Gradients are sums over ranks of each
 * rank's share of the global-batch mean (the model's loss is already scaled by
 * 1/global tokens), so the reduction is a plain sum.
 *
 * Invariants checked at every hook: each unit's phase (zt_unit_phase) accepts the
 * hook, and the plan's dtypes (plan.c prints them) hold for the unit's buffers as
 * recorded where they were made or written: gathered buffers in the compute dtype,
 * reductions in the reduce dtype, master, gradient accumulators and optimizer
 * state in the master dtype.  Sizes come from one table (engine.c: unit_size,
 * shared_size) that both zt_engine_init and zt_engine_estimate read.  Buffers are
 * allocated, and every kernel run, through the backend table eng->be. */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"
#include "../core/dtype.h"
#include "../core/status.h"
#include "../kernels/backend.h"
#include "../model/layout.h"
#include "../model/param_owner.h"
#include "../plan/precision.h"
#include "optim.h"

/* Where a unit stands in the pass (FSDP's HandleTrainingState), checked at every
 * hook; a hook that finds a unit in a phase it does not accept stops the process
 * naming both (a broken invariant, not an input error).
 *   IDLE           not in use (the only phase zt_engine_step accepts)
 *   FORWARD        acquired for the forward; released, or (the root, held across
 *                  the whole pass) its gradient opened
 *   BACKWARD_PRE   acquired for backward and/or its gradient open (grad_begin)
 *   BACKWARD_POST  its gradient complete (grad_end), reduction started; released next
 * zt_engine_reset returns every unit to IDLE after a failed pass. */
typedef enum zt_unit_phase {
    ZT_UNIT_IDLE, ZT_UNIT_FORWARD, ZT_UNIT_BACKWARD_PRE, ZT_UNIT_BACKWARD_POST
} zt_unit_phase;

const char *zt_unit_phase_name(zt_unit_phase ph);

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
    int grad_zero;          /* grad holds only zeros (set by zero_grads, cleared by grad_end) */
    int grad_rounded;       /* every grad value is representable in the reduce dtype */
    int grad_sumsq_valid;   /* grad_sumsq is the sum of squares of grad as it stands */
    int reduced;            /* stage 0: this step's all-reduce of grad has started */
    double grad_sumsq;      /* computed by grad_end's last pass over grad, for the norm */
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

typedef struct zt_engine {
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
} zt_engine;

/* be: where the buffers live and the kernels run (zt_backend_cpu(), or a
 * device's table, bound to its device).  comm: the world's communicator
 * (zt_comm_create_local for one process); a device's buffers need a device path
 * (zt_comm_set_device): init puts a comm still on the host path on the staged
 * one.  Stage 0 replicates everything; 1 shards optimizer state; 2 also
 * gradients; 3 also parameters.  The layout must be padded to comm->shard_size. */
int zt_engine_init(zt_engine *eng, const zt_backend *be, const zt_layout *lay, zt_precision prec, int stage,
                   const zt_overlap *overlap, zt_comm *comm, zt_err *err);
/* The backend's entries the comm layer needs for its device paths. */
zt_comm_device zt_engine_comm_device(const zt_backend *be);
void zt_engine_free(zt_engine *eng);

/* Set one parameter from a full tensor of numel elements (any dtype): rounded to
 * the load dtype, stored in the master dtype (the owned slice only). */
void zt_engine_set_param(zt_engine *eng, const zt_param *p, const void *src, zt_dtype src_dt);
/* Collective: every parameter's full value as fp32 into vals[i] (numel each),
 * gathered from the shards of every rank. */
int zt_engine_full_params(zt_engine *eng, float **vals, zt_err *err);
/* Collective: the same for the accumulated (reduced) gradients, after zt_engine_reduce_grads. */
int zt_engine_full_grads(zt_engine *eng, float **vals, zt_err *err);

/* Refresh every gathered buffer from the masters (after loading or a step). */
void zt_engine_refresh_gathered(zt_engine *eng);

/* The engine as the model's parameter owner (param_owner.h): the table's entries
 * are the hooks below.  eng must outlive the model. */
zt_param_owner zt_engine_param_owner(zt_engine *eng);

/* The hooks, in the order param_owner.h gives. */
const void *zt_engine_acquire(zt_engine *eng, int unit, zt_pass pass);
void zt_engine_release(zt_engine *eng, int unit);
float *zt_engine_grad_begin(zt_engine *eng, int unit);
void zt_engine_grad_end(zt_engine *eng, int unit);
/* Whether the next backward is the last before the step (the trainer says so for
 * its last micro-batch; PyTorch DDP's no_sync is the opposite).  Stage 0 on several
 * ranks then all-reduces each unit as soon as its gradient is complete.  Off (the
 * default), everything reduces at the step. */
void zt_engine_sync_backward(zt_engine *eng, int sync);
/* Let collectives in flight move (the model calls it between its products); cheap
 * when none is. */
void zt_engine_progress(zt_engine *eng);
/* Finish every collective in flight and drop a prefetched unit (before the
 * gradients are read or the parameters change). */
void zt_engine_drain(zt_engine *eng);
/* A pass failed midway: finish what is in flight and return every unit to idle
 * (released, no gradient open).  A gradient that was being accumulated in place
 * holds part of a micro-batch; the caller discards the step (zero_grads). */
void zt_engine_reset(zt_engine *eng);

void zt_engine_zero_grads(zt_engine *eng);
/* Stages 0-1: reduce the locally accumulated gradients (done by zt_engine_step;
 * exposed so tests can read reduced gradients).  Idempotent within a step. */
void zt_engine_reduce_grads(zt_engine *eng);

/* Clip by the global gradient norm and take one AdamW step at learning rate lr.
 * grad_unscale divides out a loss scale (1 without one): the norm, the clipping
 * and the step see gradient * grad_unscale.  Returns the pre-clip global L2 norm
 * (fp32 semantics) in *grad_norm, and 1 when the gradient held an inf or NaN on
 * any rank: then the step is skipped on every rank and nothing changes. */
int zt_engine_step(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                   double grad_unscale, double *grad_norm);

/* The plan's dtype invariants for unit's buffers as recorded (zt_unit_state):
 * gathered parameters (while there are some) in the compute dtype, master,
 * gradients and optimizer state in the master dtype, and the gradient's reduction
 * (once one happened this step) in the reduce dtype.  Returns the first violation
 * as text, NULL when all hold; the engine stops on one at acquire, grad_end, the
 * step's reduction and the step. */
const char *zt_engine_check_dtypes(const zt_engine *eng, int unit);

/* Tests only: make this rank's accumulated gradient non-finite (an inf in its
 * first owned element), as an fp16 overflow would. */
void zt_engine_inject_nonfinite(zt_engine *eng);

/* Bytes of model state this rank holds, by role (for the accounting tests). */
typedef struct zt_engine_bytes {
    size_t master, grads, optim, gathered, comm;
} zt_engine_bytes;
zt_engine_bytes zt_engine_state_bytes(const zt_engine *eng);
/* What zt_engine_init would allocate for this layout, plan and shard group,
 * without allocating (estimate-memory, config show). */
zt_engine_bytes zt_engine_estimate(const zt_layout *lay, zt_precision prec, int stage, int group_size,
                                   const zt_overlap *overlap);

#endif
