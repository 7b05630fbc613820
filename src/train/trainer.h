/* trainer.h — the training and evaluation loops (contract §4, §7).
 *
 * The command line fills zt_train_args; the trainer loads the model through the
 * engine on every rank, checks that all ranks agree on what they are about to
 * do, runs optimizer steps of A micro-batches per rank, logs JSONL metrics on
 * rank 0 and writes the final Hugging Face directory. */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <stdint.h>

#include "../comm/comm.h"
#include "../core/mem.h"
#include "../core/status.h"
#include "../engine/engine.h"
#include "../engine/optim.h"
#include "../model/layout.h"
#include "../model/lora.h"
#include "../plan/plan.h"
#include "selection.h"

/* What one optimizer step measured; the trainer hands one to args.on_step on
 * every rank after every step, and writes the same numbers as a JSONL line. */
typedef struct zt_step_metrics {
    long step;                  /* 1-based */
    double loss;                /* mean token cross-entropy over the global batch (every rank's) */
    double grad_norm;           /* global L2 norm before clipping; inf or NaN on an fp16 overflow */
    double lr;                  /* the learning rate this step used */
    double tokens_per_sec;      /* per device */
    double step_time_s;
    double mfu;                 /* model FLOPs utilisation against the peak: at most 1 */
    double peak_gflops;         /* the peak this step's mfu divides by (peak.h) */
    double lost_update_fraction; /* of this rank's updated weights, those rounded away */
    double update_to_half_ulp;  /* mean |update| in half-ulps of the master weight */
    double loss_scale;          /* fp16: the scale this step's backward used (0 without scaling) */
    int skipped;                /* fp16: the step was skipped on overflow */
    size_t memory_bytes[ZT_MEM_NCAT];         /* this rank's current bytes per category on its device
                                               * (the CPU's, on the CPU), offloaded bytes left out */
    size_t host_memory_bytes[ZT_MEM_NCAT];    /* the bytes offload keeps in host memory (0 without) */
    uint64_t comm_bytes[ZT_COLL_NKINDS];      /* this rank's collective bytes in this step */
    uint64_t comm_calls[ZT_COLL_NKINDS];      /* and how many collectives moved them */
    uint64_t link_bytes[ZT_NLINKS];           /* the same, with its machine / with others (comm.h) */
    double comm_wait_s, comm_progress_s;      /* time blocked in / progressing collectives */
} zt_step_metrics;

/* Test seams.  Production runs pass no hooks (args.hooks = NULL); tests use them
 * to stop a run early or to make a step fail the way a broken kernel or an fp16
 * overflow would, without any test code in the step itself. */
typedef struct zt_train_hooks {
    long stop_after_steps;  /* run only this many of the S steps (0: all), as an interrupted job */
    /* before each micro-batch's forward and backward (step is 1-based); a
     * non-zero status fails this rank's step as a failing matrix product would */
    int (*before_forward)(void *ctx, long step, int micro, int rank, zt_err *err);
    /* after the step's backward, before the optimizer step (e.g. to plant an inf) */
    void (*before_update)(void *ctx, long step, int rank, zt_engine *eng);
    void *ctx;
} zt_train_hooks;

/* Trainer's eval_strategy and save_strategy.  UNSET: evaluate every eval_steps
 * (else once, after the last step) and save every save_steps (0: never). */
typedef enum zt_strategy { ZT_STRATEGY_UNSET, ZT_STRATEGY_NO, ZT_STRATEGY_STEPS, ZT_STRATEGY_EPOCH } zt_strategy;
/* --packing_strategy with --packing (TRL's names; wrapped is the stream's windows, 0) */
enum { ZT_PACK_BFD = 1, ZT_PACK_BFD_SPLIT = 2 };

typedef struct zt_train_args {
    const char *model_dir, *data_path, *output_dir, *log_jsonl;
    const char *data_shown; /* --data as the user gave it, for messages (data_path may be the token cache; NULL: it) */
    zt_plan plan;
    zt_comm *comm;          /* NULL: one process */
    int block_size, batch_size, grad_accum;
    long max_steps;         /* S of the LR schedule and the number of steps run */
    zt_adamw_hparams adam;
    double max_grad_norm;
    zt_lr_schedule schedule;
    zt_lr_kwargs schedule_kwargs; /* --lr_scheduler_kwargs over the schedule's defaults */
    long warmup_steps;
    uint64_t seed;
    int shuffle;
    int checkpointing;
    long save_steps;        /* 0: only the final save; else also OUTPUT_DIR/checkpoint-N with run state */
    const char *resume_dir; /* continue from a checkpoint-N directory, or "latest" in output_dir (NULL: fresh) */
    long save_total_limit;  /* keep the newest N checkpoint-N directories (0: all) */
    int override_checkpoint_args; /* resume under changed hyper-parameters, printing each change */
    int allow_precision_change;   /* resume under another master dtype, converting the state */
    int sharded_only;       /* checkpoints hold only the shards (SHARDED_STATE_DICT), not the full HF model */
    const char *command_line; /* recorded in trainer_state.json (may be NULL) */
    size_t max_shard_bytes; /* split saved weights into shards above this (0: one file) */
    int progress;           /* draw a progress bar on stderr (rank 0) */
    int quiet;
    double peak_gflops;     /* for MFU; <= 0: the cached or calibrated peak (peak.h) */
    /* held-out evaluation (evaluate.h), as HF's eval_strategy="steps" */
    const char *eval_data_path; /* token stream evaluated during training (NULL: none) */
    const char *eval_mask_path; /* its loss mask (prompt-completion records; NULL: every token counts) */
    long eval_steps;            /* every N steps (0: once, after the last step) */
    int eval_batch_size;        /* windows per forward pass per rank */
    long skip_nonfinite_steps; /* outside fp16 scaling: steps with an inf/NaN that may be skipped in a
                                * row (0: the first one stops the run) */
    long max_consecutive_skipped_steps; /* fp16: overflows in a row tolerated once the loss scale is at its
                                         * floor; one more stops the run (0: the first overflow at the floor) */
    /* Trainer's vocabulary (contract §4): with max_steps 0, the run is
     * ceil(num_train_epochs * nwin / G) steps (G samples a step, nwin windows in
     * the data); warmup_steps 0 and warmup_ratio r > 0 mean ceil(r * max_steps) */
    double num_train_epochs;
    double warmup_ratio;
    double logging_steps;       /* a log every N steps; below 1, a fraction of max_steps (0: 500, Trainer's) */
    int eval_strategy, save_strategy; /* zt_strategy; ZT_STRATEGY_UNSET keeps ztrain's defaults */
    const char *tensorboard_dir; /* write TensorBoard event files here (NULL: none) */
    /* completion-only loss (TRL's): a token file of 0/1 beside data_path, 0 where
     * the token is a prompt token, never a target (NULL: every token is one) */
    const char *loss_mask_path;
    /* called on every rank after every step (NULL: none) */
    void (*on_step)(void *ctx, const zt_step_metrics *m);
    void *on_step_ctx;
    const zt_train_hooks *hooks; /* tests only; NULL in production */
    const char *tokenizer_dir; /* saved with the model and each checkpoint (NULL: the model_dir's tokenizer files) */
    zt_select_args select; /* Trainer's model selection and early stopping (selection.h) */
    /* TRL's padding_free: documents end at doc_eos inside each window; positions restart
     * at each and attention stays inside it (batches.h: zt_batcher_set_padding_free) */
    int padding_free;
    int32_t doc_eos;
    /* TRL's packing, strategy bfd or bfd_split (ZT_PACK_*; 0: the stream's
     * windows): documents bin-packed into the windows (batches.h:
     * zt_batcher_set_packing); doc_eos as above */
    int packing;
    /* LoRA (docs/lora.md): the base frozen, these adapters trained, initialised as PEFT
     * does from `seed`; NULL: every weight trained.  So far without saving, evaluation,
     * checkpoints or resuming, which are refused by name */
    const zt_lora *lora;
    /* with lora: a PEFT adapter directory (io/peft_adapter.h) whose tensors replace PEFT's
     * initialisation; NULL: initialised from `seed` */
    const char *lora_adapter;
} zt_train_args;

typedef struct zt_train_result {
    double final_loss;      /* loss of the last optimizer step */
    long steps;
    double tokens_per_sec;  /* per device */
    zt_engine_bytes state;  /* this rank's model-state bytes */
    size_t activation_bytes; /* the model's activation buffers */
    uint64_t step_bytes[ZT_COLL_NKINDS]; /* collective bytes of the last step */
    uint64_t step_calls[ZT_COLL_NKINDS]; /* and the number of collectives */
    long skipped_steps;     /* fp16: steps skipped on overflow */
    double loss_scale;      /* fp16: the final loss scale (0 without scaling) */
    long prefetch_used, prefetch_dropped, reduce_overlapped; /* the engine's overlap counters */
    long pieces_overlapped;
} zt_train_result;

/* Every rank calls it.  On an error elsewhere, a rank returns that code with an
 * empty message (the failing rank reports it). */
int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err);

typedef struct zt_eval_args {
    const char *model_dir, *data_path;
    int block_size, batch_size;
    long max_batches;    /* 0: the whole stream; else its first max_batches * batch_size windows */
    zt_dtype compute;
    const char *device;  /* --device (NULL: cpu) */
    const char *mask_path; /* prompt-completion records' loss mask: only completion tokens count (NULL: all) */
} zt_eval_args;

/* The mean token loss of the model on the data, every token counted whatever the
 * batch size (evaluate.h: a last window shorter than block_size is evaluated over
 * its own length); *tokens gets the predictions counted, n - 1 for n tokens. */
int zt_eval(const zt_eval_args *a, double *mean_loss, long *tokens, zt_err *err);

#endif
