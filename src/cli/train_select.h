/* train_select.h — `train`'s model selection flags, Trainer's names: the best model
 * by an evaluation metric, loaded at the end, and EarlyStoppingCallback's two
 * settings (src/train/selection.h does the work). */
#ifndef ZT_CLI_TRAIN_SELECT_H
#define ZT_CLI_TRAIN_SELECT_H

#include "../train/selection.h"

#define ZT_CLI_SELECT_DEFAULTS {0, NULL, -1, 0, 0.0}

#define TRAIN_SELECT_FLAGS(S)                                                                                   \
    {"load_best_model_at_end", ZT_FLAG_BOOL, &(S).load_best_model_at_end, "write the best evaluated checkpoint's model to --output_dir at the end, not the last step's (needs --eval_data, --save_steps a multiple of --eval_steps)", 1, 0, 0}, \
    {"metric_for_best_model", ZT_FLAG_STR, &(S).metric, "the evaluation metric that picks the best model: loss or eval_loss (default eval_loss)", 1, 0, 0}, \
    {"greater_is_better", ZT_FLAG_BOOL, &(S).greater_is_better, "a higher metric is better (default false: a loss)", 1, 0, 0}, \
    {"early_stopping_patience", ZT_FLAG_LONG, &(S).patience, "stop after this many evaluations in a row without improvement (EarlyStoppingCallback's; default 0: never)", 0, 1e12, 0}, \
    {"early_stopping_threshold", ZT_FLAG_DOUBLE, &(S).threshold, "an improvement counts only when the metric moves by more than this (default 0)", 0, 1e30, 0}

#endif
