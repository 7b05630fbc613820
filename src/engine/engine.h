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
 * hands out a fresh fp32 staging buffer for the unit's full gradient (or the
 * accumulator itself, when it is fp32, empty and local): fresh as param_owner.h
 * says, its parameters' elements undefined and its padding zeros, so the model's
 * first products write with beta 0 and nothing is cleared.  The accumulators are
 * not cleared either: zero_grads marks them empty, and the first gradient into each
 * stores where later ones add (docs/architecture.md, "One optimizer step").  Between its products it calls
 * zt_engine_progress, which moves the collectives the overlap left in flight.  Gradients are sums over ranks of each
 * rank's share of the global-batch mean (the model's loss is already scaled by
 * 1/global tokens), so the reduction is a plain sum.
 *
 * Invariants checked at every hook: each unit's phase (zt_unit_phase) accepts the
 * hook, and the plan's dtypes (plan.c prints them) hold for the unit's buffers as
 * recorded where they were made or written: gathered buffers in the compute dtype,
 * reductions in the reduce dtype, master, gradient accumulators and optimizer
 * state in the master dtype.  Sizes come from one table (engine.c: unit_size,
 * shared_size) that both zt_engine_create and zt_engine_estimate read.  Buffers are
 * allocated, and every kernel run, through the backend table it was made with. */
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

/* The engine is opaque: its bookkeeping is engine_impl.h, private to
 * src/engine.  Callers hold a pointer from zt_engine_create and reach the state
 * through the functions below (the state view for checkpoints, the accessors for
 * what the trainer reports), so where the buffers live can change under them. */
typedef struct zt_engine zt_engine;

/* be: where the buffers live and the kernels run (zt_backend_cpu(), or a
 * device's table, bound to its device).  comm: the world's communicator
 * (zt_comm_create_local for one process); a device's buffers need a device path
 * (zt_comm_set_device): create puts a comm still on the host path on the staged
 * one.  Stage 0 replicates everything; 1 shards optimizer state; 2 also
 * gradients; 3 also parameters.  The layout must be padded to comm->shard_size.
 * *out gets the engine (accounted, ZT_MEM_OTHER), NULL on failure; lay, be and
 * comm must outlive it. */
int zt_engine_create(zt_engine **out, const zt_backend *be, const zt_layout *lay, zt_precision prec, int stage,
                     const zt_overlap *overlap, zt_comm *comm, zt_err *err);
/* The backend's entries the comm layer needs for its device paths. */
zt_comm_device zt_engine_comm_device(const zt_backend *be);
/* Finish what is in flight and free every buffer and the engine; NULL is fine. */
void zt_engine_destroy(zt_engine *eng);

/* What the engine was made with. */
const zt_backend *zt_engine_backend(const zt_engine *eng);
const zt_layout *zt_engine_layout(const zt_engine *eng);
zt_comm *zt_engine_comm(const zt_engine *eng);
zt_precision zt_engine_precision(const zt_engine *eng);
/* The optimizer/parameter shard group: its size G (1 at stage 0) and this rank's
 * place r in it. */
int zt_engine_group_size(const zt_engine *eng);
int zt_engine_group_rank(const zt_engine *eng);
/* Host bytes of the engine's own table per unit (memory gates' lower bounds). */
size_t zt_engine_unit_table_bytes(void);

/* ---- the state a checkpoint saves: a view, wherever the buffers live ----------
 *
 * This rank's state tensors, in a fixed order: unit by unit, and in each unit
 * master, m, v, then comp (the Kahan compensation, only when the plan keeps
 * one).  Each is 1-D, shape [numel]: slice r of its unit's flat buffer of P
 * elements, numel = P/G starting at offset = r * P/G, in dtype (the master
 * dtype).  The bytes may be a device's: read and write copy them through the
 * backend's to_host and to_device, and map lends a host view that is the buffer
 * itself when the backend's buffers are host memory and a host copy otherwise,
 * so no caller learns, or needs to learn, where they live. */
typedef enum zt_state_role { ZT_STATE_MASTER, ZT_STATE_M, ZT_STATE_V, ZT_STATE_COMP, ZT_STATE_NROLES } zt_state_role;
const char *zt_state_role_name(zt_state_role role); /* "master", "m", "v", "comp" */

typedef struct zt_state_tensor {
    char name[48];        /* "unit.<u>.<role>": its name in a checkpoint's shard file */
    int unit;
    zt_state_role role;
    zt_dtype dtype;
    size_t numel;         /* the shape: [numel] */
    size_t offset;        /* where this slice starts in the unit's flat buffer */
    size_t bytes;         /* numel * the dtype's size: what read, write and map move */
} zt_state_tensor;

/* How many state tensors this rank holds, and the i-th (0 <= i < count). */
int zt_engine_state_count(const zt_engine *eng);
zt_state_tensor zt_engine_state_tensor(const zt_engine *eng, int i);
/* Copy tensor i into host memory of its bytes, or from it (to_host / to_device). */
void zt_engine_state_read(const zt_engine *eng, int i, void *host);
void zt_engine_state_write(zt_engine *eng, int i, const void *host);
/* A host view of tensor i, its bytes long: with fill, holding its values (else
 * undefined until the caller writes it); NULL with err when a host copy cannot
 * be allocated.  Give it back with unmap; send writes what the caller put in it
 * into the tensor.  When the view is the buffer itself, writes reach the tensor
 * at once, sent or not, so a caller that may fail midway must treat the tensor
 * as undefined until it has written all of it (checkpoint loads do). */
void *zt_engine_state_map(zt_engine *eng, int i, int fill, zt_err *err);
void zt_engine_state_unmap(zt_engine *eng, int i, void *view, int send);

/* ---- what the trainer reports ------------------------------------------------ */

/* AdamW's t: optimizer steps applied (a resume sets it to the checkpoint's). */
long zt_engine_optimizer_steps(const zt_engine *eng);
void zt_engine_set_optimizer_steps(zt_engine *eng, long steps);
/* The last step: the lowest unit whose gradient held an inf or NaN on some rank,
 * -1 none (and before the first step). */
int zt_engine_nonfinite_unit(const zt_engine *eng);
/* The last step's lost-update audit, summed over the shard group. */
zt_adamw_audit zt_engine_last_audit(const zt_engine *eng);

/* What the overlap did since create (tests check it happens), and what is held
 * now between hooks (tests check a reset hands it all back). */
typedef struct zt_engine_stats {
    long prefetch_used;       /* acquires served by a prefetched all-gather */
    long prefetch_dropped;    /* prefetches finished unused */
    long reduce_overlapped;   /* reduce-scatters finished after their grad_end returned */
    long pieces_overlapped;   /* pieces of a reduction started by a tick after grad_end */
    int prefetch_unit;        /* the oldest prefetch in flight: its unit, -1 none */
    int pool_held;            /* stage 3 gather-pool buffers in use */
    int units_gathered;       /* units holding a pool buffer */
    int gradients_open;       /* units holding a staging buffer (between grad_begin and grad_end) */
    long grads_copied_early;  /* offload, stages 2-3: gradient shards queued down to the host as
                               * their reductions completed in a backward (docs/zero.md, Offload) */
    long uploads_async;       /* offload: parameter shards uploaded on the copy queue, the gather
                               * ordered after them on the device (no host wait) */
} zt_engine_stats;
zt_engine_stats zt_engine_get_stats(const zt_engine *eng);
/* Where unit stands in the pass (zt_unit_phase). */
zt_unit_phase zt_engine_unit_phase(const zt_engine *eng, int unit);

/* Set one parameter from a full tensor of numel elements (any dtype): rounded to
 * the load dtype, stored in the master dtype (the owned slice only). */
void zt_engine_set_param(zt_engine *eng, const zt_param *p, const void *src, zt_dtype src_dt);
/* Collective: every parameter's full value as fp32 into vals[i] (numel each),
 * gathered from the shards of every rank; vals[i] NULL: not wanted, and a unit with
 * no parameter wanted is not gathered (LoRA's save gathers its adapters alone).
 * Every rank passes the same NULLs. */
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
float *zt_engine_grad_begin(zt_engine *eng, int unit, int *fresh);
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

/* The step's gradients start empty (no memset: each accumulator's first gradient
 * stores, later ones add; a unit that got none reads as zeros at the step). */
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

/* The same step in pieces, so that the host can run ahead of the device across
 * steps (docs/gpu.md, "Running ahead") and capture the step as a graph (backend.h,
 * graph_begin; docs/gpu.md, "The captured step").
 *   step_queue   zt_engine_step's work, nothing read back: in fast mode step_inputs,
 *                step_launch and step_readback below; in exact mode the whole step,
 *                its outcome kept for the finish.
 *   step_finish  the step's numbers (with wait, first the one wait for every step
 *                queued so far) and what zt_engine_step returns (the skip; the norm
 *                in *grad_norm).
 * slot: the step's place in the caller's ring of steps (0 .. ZT_STEP_SLOTS-1), its
 * readback slot here, which no other step in flight holds; the steps are finished
 * in the order they were queued.
 * Between the two the caller may zero the gradients and run the next step's forwards
 * and backwards (they read the parameters the queued step writes, in the device's
 * order), and nothing else that reads the step's outcome: optimizer_steps, the
 * non-finite unit, the audit, the loss sum, the state (a checkpoint, an evaluation)
 * or another queue.
 * Fast mode's pieces of the queue, for a captured step:
 *   step_inputs    outside a capture, before the step's launches: lr and AdamW's t
 *                  (optimizer_steps + 1: the step before must be finished) into the
 *                  device's step scalars, one upload, no wait.  ZT_EINPUT in exact
 *                  mode.
 *   step_launch    the step's launches after the micro-batches (a capture holds
 *                  them): the reduction, the verdict, AdamW, the copies, the step's
 *                  numbers copied aside; nothing read back on one rank.  AdamW reads
 *                  the lr and t step_inputs uploaded, so a replay takes each step's own.
 *   step_readback  outside a capture, after the launches (or the graph's launch): the
 *                  download of the numbers copied aside, queued; step_finish waits
 *                  for it. */
void zt_engine_step_queue(zt_engine *eng, int slot, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                          double grad_unscale);
int zt_engine_step_finish(zt_engine *eng, int slot, int wait, double *grad_norm);
int zt_engine_step_inputs(zt_engine *eng, const zt_adamw_hparams *hp, double lr, zt_err *err);
void zt_engine_step_launch(zt_engine *eng, const zt_adamw_hparams *hp, double lr, double max_grad_norm,
                           double grad_unscale);
void zt_engine_step_readback(zt_engine *eng, int slot);
/* Steps in flight, in fast mode with the schedule on the device (set_schedule): up to
 * ZT_STEPS_IN_FLIGHT steps may be queued before the first is finished, each with a
 * readback slot of its own; step_finish reads the oldest, and the first finish after
 * a queue waits once for all of them (docs/gpu.md, "Running ahead").  Without the
 * schedule on the device (exact mode, or a caller that passes each step's lr), one.
 * Eight: enough for the host's work at a logged step (the records, the progress line)
 * to be paid once in several steps, and few enough that the token buffers a captured
 * step keeps per step in flight (step_graph.h) and the readback slots stay small. */
#define ZT_STEPS_IN_FLIGHT 8
/* The ring of a run's steps (the trainer's): the steps in flight and the one whose
 * passes are being queued.  A step's place in it is its readback slot here, its
 * token set in the captured passes (step_graph.h) and its record in the trainer. */
#define ZT_STEP_SLOTS (ZT_STEPS_IN_FLIGHT + 1)
/* Fast mode: the learning-rate schedule on the device.  lr[u] (u < n, n at least
 * the steps the run can apply) is the learning rate of the step that finds u updates
 * applied before it; the device's verdict of each step takes its inputs from entry
 * `applied` (from optimizer_steps now: a resume's count) and counts the step unless
 * it skips (step_scalars.h, zt_step_take_input), so a step may be queued before the
 * steps before it are read back.  From then on the lr passed to the step is not read
 * (step_lr gives the device's).  One upload, n * 24 bytes of device memory; a no-op
 * in exact mode. */
int zt_engine_set_schedule(zt_engine *eng, const zt_adamw_hparams *hp, const double *lr, long n, zt_err *err);
/* The learning rate the last finished step took from the device's schedule; 0 when
 * there is none (exact mode, or no set_schedule). */
int zt_engine_step_lr(const zt_engine *eng, double *lr);
/* 1 when the queue returns before the device has done the step (fast mode): only
 * then does running ahead save a wait. */
int zt_engine_runs_ahead(const zt_engine *eng);

/* Fast mode (a backend with kernels ZT_KERNELS_FAST): the device double the
 * backward's cross-entropy adds its loss sum to (the model's loss sink), zeroed by
 * zt_engine_zero_grads and read back with the step's other numbers by
 * zt_engine_step; NULL in exact mode, where the loss comes back with each pass. */
double *zt_engine_loss_sink(zt_engine *eng);
/* Fast mode: the loss sum of the last step, as zt_engine_step read it back. */
double zt_engine_step_loss_sum(const zt_engine *eng);
/* Fast mode with fp16's loss scale: hand the scaler's state to the device once
 * (at set-up, after a resume's restore), where every later step's verdict divides
 * out its scale and updates it with the step's overflow (step_scalars.h,
 * zt_step_judge).  0 in exact mode (nothing to hand: the host updates its own). */
int zt_engine_seed_loss_scale(zt_engine *eng, const zt_loss_scaler *ls);
/* Fast mode: the count of targets the coming step's loss is the mean over, into
 * the device's scalars (step_scalars.h, count), one upload queued before the step's
 * micro-batches, no wait; nothing in exact mode.  Outside a capture the bytes are
 * taken at once; inside one (a captured step's passes) the upload is captured from
 * count_host, which must then be host_alloc memory refilled before each launch
 * (backend.h, upload). */
void zt_engine_step_count(zt_engine *eng, const double *count_host);
/* Fast mode: the device's step scalars, from which the backward's cross-entropy
 * forms its gradient scale (zt_step_grad_scale: the count above and the loss scale
 * the step runs at); NULL in exact mode, where the scale is the host's argument. */
const zt_step_scalars *zt_engine_grad_scale_src(const zt_engine *eng);
/* The device's scaler as the last finished step left it (after its update) into
 * *ls, and the scale that step ran at into *used; 0 when it has none (exact mode,
 * or never seeded). */
int zt_engine_step_loss_scale(const zt_engine *eng, zt_loss_scaler *ls, double *used);

/* The plan's dtype invariants for unit's buffers as recorded (zt_unit_state, engine_impl.h):
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
    size_t host;    /* of the above, the bytes offloaded to host memory (0 without offload):
                     * the device holds the sum less host */
} zt_engine_bytes;
zt_engine_bytes zt_engine_state_bytes(const zt_engine *eng);
/* What zt_engine_create would allocate for this layout, plan and shard group,
 * without allocating (estimate-memory, config show); overlap's offload_* (set by
 * the plan on a device only) move the sharded state's bytes into host. */
zt_engine_bytes zt_engine_estimate(const zt_layout *lay, zt_precision prec, int stage, int group_size,
                                   const zt_overlap *overlap);

#endif
