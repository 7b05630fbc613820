/* trainer.h — the training and evaluation loops (SPEC §4, §7).
 *
 * The command line fills zt_train_args; the trainer loads the model through the
 * engine, runs optimizer steps of A micro-batches each, logs JSONL metrics and
 * writes the final Hugging Face directory. */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <stdint.h>

#include "../core/status.h"
#include "../engine/engine.h"
#include "../engine/optim.h"
#include "../model/layout.h"

typedef struct zt_train_args {
    const char *model_dir, *data_path, *output_dir, *log_jsonl;
    zt_precision prec;
    zt_wrap_policy wrap;
    long min_num_params;
    int block_size, batch_size, grad_accum;
    long max_steps;         /* S of the LR schedule and the number of steps run */
    long stop_after_steps;  /* run only this many of the S steps (0: all); tests use it */
    zt_adamw_hparams adam;
    double max_grad_norm;
    zt_lr_schedule schedule;
    long warmup_steps;
    uint64_t seed;
    int shuffle;
    int checkpointing;
    long save_steps;     /* 0: only the final save */
    size_t max_shard_bytes; /* split saved weights into shards above this (0: one file) */
    int progress;        /* draw a progress bar on stderr */
    int quiet;
    double peak_gflops;  /* for MFU; <= 0: measure */
} zt_train_args;

typedef struct zt_train_result {
    double final_loss;   /* loss of the last optimizer step */
    long steps;
    double tokens_per_sec;
} zt_train_result;

int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err);

typedef struct zt_eval_args {
    const char *model_dir, *data_path;
    int block_size, batch_size;
    long max_batches;    /* 0: the whole stream */
    zt_dtype compute;
} zt_eval_args;

int zt_eval(const zt_eval_args *a, double *mean_loss, long *tokens, zt_err *err);

#endif
