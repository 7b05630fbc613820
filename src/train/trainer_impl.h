/* trainer_impl.h — what the trainer's files share, private to src/train: the
 * run's state (trainer, run_state), one step on its way (step_run), and the
 * functions one file of the trainer calls in another.
 *   trainer.c      the step loop (zt_train), its checks, the saves
 *   train_open.c   opening a run (zt_train_setup) and `ztrain eval`
 *   train_log.c    the step's records, the progress line, evaluation */
#ifndef ZT_TRAINER_IMPL_H
#define ZT_TRAINER_IMPL_H

#include "trainer.h"


#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../core/prof.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../io/tokens.h"
#include "../kernels/matmul.h"
#include "../kernels/prof_backend.h"
#include "../model/config.h"
#include "../model/frozen.h"
#include "../model/llama.h"
#include "../plan/plan.h"
#include "../engine/loss_scale.h"
#include "../report/tfevents.h"
#include "batches.h"
#include "checkpoint.h"
#include "ckpt_identity.h"
#include "evaluate.h"
#include "peak.h"
#include "preempt.h"
#include "step_graph.h"
#include "weights.h"

/* Everything a run holds, so one cleanup path frees it whatever failed. */
typedef struct run_state {
    zt_llama_config cfg;
    zt_tokens tokens;
    zt_layout lay;
    zt_engine *eng;
    zt_frozen_params frozen;  /* evaluation's weights, instead of an engine */
    zt_model model;
    zt_batcher batcher;
    int *inputs, *targets;
    size_t io_bytes;
    int have_lay, have_frozen, have_model, have_batcher;
    uint64_t adapter_digest;  /* LoRA from --adapter: FNV-1a of the adapters read (0: none), which
                               * every rank must have read alike */
} run_state;

/* ---- the training loop ------------------------------------------------------
 *
 * zt_train: setup, then per step train_step (every micro-batch's forward and
 * backward), step_queue (the update queued, and the download of its numbers),
 * and, unless the step may run ahead (may_run_ahead), step_tail: the steps in
 * flight read in order (read_in_flight, step_finish: the skip, the norm, the loss)
 * and each logged (log_step), then evaluation and save_checkpoint when due.  In
 * exact mode a step is read at once; a run ahead keeps up to `depth` steps in
 * flight.  Everything a run holds lives in one trainer, so one close path frees it
 * whatever failed. */

typedef struct trainer {
    const zt_train_args *a;     /* &args: the caller's, with the steps resolved (resolve_steps) */
    zt_train_args args;
    const zt_train_hooks *hooks;
    run_state r;
    int have_run;
    zt_comm local, *comm;
    int log_fd, have_log;       /* rank 0's JSONL (zt_open_output), written a whole record at a time */
    int rank0, talk, W;         /* talk: rank 0 and not quiet */
    double tokens_per_step;     /* B * A * W * T */
    double flops_per_token;
    zt_peak peak;               /* what MFU divides by (peak.h), raised when a step beats it */
    zt_loss_scaler scaler;
    int device_scaler;          /* fast mode: the scaler lives on the device, read back with each step */
    long first_step, nsteps;    /* steps first_step .. nsteps-1 (0-based) run here */
    double t_start;
    zt_step_metrics last;       /* the last step's metrics */
    int lost_streak, warned;    /* the lost-update audit */
    zt_evaluator ev;            /* held-out evaluation, when eval_data_path is set */
    int have_ev;
    double last_eval;           /* the latest eval loss (NaN before the first) */
    zt_ckpt_hparams hp;         /* what a checkpoint records and a resume must find unchanged */
    long nonfinite_streak;      /* steps in a row skipped on an inf or NaN (outside fp16 scaling) */
    long overflow_streak;       /* fp16: steps in a row skipped on an overflow */
    long applied, skipped;      /* this run's steps whose update was applied, and those skipped */
    char device[128];           /* this rank's device, as its backend describes it */
    char run_id[17];            /* every file of this run's checkpoints carries it (ckpt_identity.h) */
    zt_ckpt_lora lora_id;       /* LoRA: the adapters' settings and the base's digest (on: computed) */
    long saved_n, saved_first, saved_last; /* this run's checkpoints: how many, first and last step */
    long log_every;             /* logging_steps resolved to steps */
    double loss_since_log;      /* summed step losses since the last log, as Trainer averages them */
    long steps_since_log;
    zt_tfevents tb;             /* --report_to tensorboard (rank 0) */
    int have_tb;
    double prev_finish;         /* when the last step's numbers came back (now_s; 0 before) */
    int lazy;                   /* fast mode: steps are read back at logged steps only */
    int depth;                  /* the steps that may be in flight unread (1 unless lazy) */
    int ring_size;              /* depth + 1: the slots of the ring of steps (zt_train), which
                                 * are the captured passes' token sets too */
    int device_lr;              /* the schedule lives on the device (zt_engine_set_schedule) */
    int batch_n, batch_left;    /* the steps read back in the current batch, and those still to log */
    double batch_time;          /* their mean time: the window from the batch's start to its read */
    zt_step_graph sg;           /* the step captured as a graph (step_graph.h); sg.on 0: not */
    zt_selection sel;           /* best model, early stopping, log_history (selection.h) */
} trainer;

/* One optimizer step on its way: what train_step measured when it queued the step,
 * and what step_finish completes once the step's numbers are back (at once, or
 * after the next step's forward and backward when the host runs ahead). */
typedef struct step_run {
    zt_step_metrics m;
    double t0, wait0, progress0;  /* when the step began, and the comm clocks then */
    uint64_t before[ZT_COLL_NKINDS], link_before[ZT_NLINKS];
    double loss_sum;              /* exact mode: the micro-batches' losses (fast: read at the finish) */
    double counted;               /* the targets the global mean divides by */
    zt_graph_phase ph;            /* what the host does for the step (step_graph.h) */
    int slot;                     /* its place in the ring of steps (trainer.c): its token set in
                                   * the captured passes and its readback slot in the engine */
} step_run;

/* train_open.c */
double zt_train_now(void); /* a monotonic clock, in seconds */
/* Open everything, check that the ranks agree, resume if asked. */
int zt_train_setup(trainer *t, const zt_train_args *a, zt_err *err);
void zt_train_run_free(run_state *r);
/* Trainer's epoch after `step` steps, and whether step `step` (1-based) ends one. */
/* LoRA: fill t->lora_id, the adapters' settings and the base's digest (local). */
int zt_train_lora_identity(trainer *t, zt_err *err);
double zt_train_epoch_at(const trainer *t, long step);
int zt_train_epoch_ends(const trainer *t, long step);

/* train_log.c */
/* A step's record, progress line and Trainer's log (collective where a log is). */
int zt_train_log_step(trainer *t, const zt_step_metrics *m, zt_err *err);
/* Is an evaluation due after step `step`, and run it (collective). */
int zt_train_eval_due(const trainer *t, long step);
int zt_train_evaluate(trainer *t, long step, zt_err *err);

#endif
