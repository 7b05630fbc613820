/* train_eval.h — `train`'s held-out evaluation flags (HF TrainingArguments names:
 * --eval_data FILE, --eval_steps N, --per_device_eval_batch_size B), kept beside
 * the command so cmd_train only lists them and hands them on. */
#ifndef ZT_CLI_TRAIN_EVAL_H
#define ZT_CLI_TRAIN_EVAL_H

#include "../core/status.h"
#include "../text/text_data.h"
#include "../train/trainer.h"

typedef struct zt_cli_eval {
    const char *data;
    long steps;
    int batch;
    char tokenized[4096]; /* the cached ids of a .txt --eval_data under --tokenizer */
    char mask[4096];      /* their loss mask, for prompt-completion records ("" when none) */
} zt_cli_eval;

#define ZT_CLI_EVAL_DEFAULTS {NULL, 0, 8, "", ""}

#define TRAIN_EVAL_FLAGS(E)                                                                                     \
    {"eval_data", ZT_FLAG_STR, &(E).data, "held-out data evaluated during training (.npy, .bin, .txt; .jsonl/.json, .parquet, .arrow, a save_to_disk directory with --tokenizer)", 1, 0, 0}, \
    {"eval_steps", ZT_FLAG_LONG, &(E).steps, "evaluate every N optimizer steps (default: once, after the last)", 1, 1e12, 0}, \
    {"per_device_eval_batch_size", ZT_FLAG_INT, &(E).batch, "eval windows per forward pass per rank (default 8)", 1, 1 << 20, 0}

/* Check the combination and copy it into the training arguments. */
int zt_cli_eval_apply(const zt_cli_eval *e, zt_train_args *a, zt_err *err);
/* With --tokenizer, a text --eval_data (.txt, .jsonl, .json, a table) is tokenized (and
 * cached) as --data is, and a->eval_data_path becomes the cached ids (with
 * prompt-completion records, a->eval_mask_path their loss mask: the evaluation
 * counts the completion tokens only, as training does); other files are ids
 * already. */
int zt_cli_eval_tokenize(zt_cli_eval *e, zt_train_args *a, const char *tokenizer, const zt_text_opts *o,
                         int model_vocab, zt_comm *comm, int rank, int threads, zt_err *err);

#endif
