/* train_vocab.h — `train`'s flags with Hugging Face TrainingArguments' names and
 * meanings that shape the run's length, logging, evaluation and saving:
 * --num_train_epochs, --warmup_ratio, --logging_steps, --eval_strategy,
 * --save_strategy, --report_to and --logging_dir.  Kept beside the command, as
 * train_eval.h is, so cmd_train only lists them and hands them on. */
#ifndef ZT_CLI_TRAIN_VOCAB_H
#define ZT_CLI_TRAIN_VOCAB_H

#include "../core/status.h"
#include "../train/trainer.h"
#include "run_settings.h"

typedef struct zt_cli_vocab {
    double num_train_epochs, warmup_ratio, logging_steps;
    const char *eval_strategy, *save_strategy, *report_to, *logging_dir;
    char tb_dir[4096]; /* the resolved logging_dir */
} zt_cli_vocab;

#define ZT_CLI_VOCAB_DEFAULTS {0.0, 0.0, 500.0, NULL, NULL, "none", NULL, ""}

#define TRAIN_VOCAB_FLAGS(V)                                                                                    \
    {"num_train_epochs", ZT_FLAG_DOUBLE, &(V).num_train_epochs, "passes over the data, fractions allowed: ceil(epochs x windows / global batch) steps; --max_steps wins when both are given, as in Trainer", 1e-9, 1e9, 0}, \
    {"warmup_ratio", ZT_FLAG_DOUBLE, &(V).warmup_ratio, "warm up over ceil(ratio x max_steps) steps when --warmup_steps is 0 (default 0)", 0, 1, 0}, \
    {"logging_steps", ZT_FLAG_DOUBLE, &(V).logging_steps, "a plain log line (and TensorBoard scalars) every N steps and after the last; below 1, a fraction of max_steps (default 500, as Trainer)", 1e-9, 1e12, 0}, \
    {"eval_strategy", ZT_FLAG_STR, &(V).eval_strategy, "no | steps (every --eval_steps, default --logging_steps) | epoch; default: every --eval_steps, else once after the last step", 1, 0, 0}, \
    {"save_strategy", ZT_FLAG_STR, &(V).save_strategy, "no | steps (every --save_steps, default 500) | epoch: when OUTPUT_DIR/checkpoint-N is written; default: every --save_steps if given", 1, 0, 0}, \
    {"report_to", ZT_FLAG_STR, &(V).report_to, "none (default) | tensorboard: event files under --logging_dir", 1, 0, 0}, \
    {"logging_dir", ZT_FLAG_STR, &(V).logging_dir, "TensorBoard's directory (default OUTPUT_DIR/runs/MonDD_HH-MM-SS_HOST, as Trainer)", 1, 0, 0}

/* Check the combination and copy it into the training arguments; given is the
 * parsed table (was --max_steps, --save_steps given?).  After zt_cli_eval_apply
 * and with a->output_dir set. */
int zt_cli_vocab_apply(zt_cli_vocab *v, const flag_table *given, zt_train_args *a, zt_err *err);

#endif
