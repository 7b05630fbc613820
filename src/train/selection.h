/* selection.h — Trainer's model selection at evaluation time: the best metric so
 * far and its checkpoint (metric_for_best_model, greater_is_better,
 * load_best_model_at_end), EarlyStoppingCallback's patience, and the log_history
 * a checkpoint's trainer_state.json carries.
 *
 * Trainer's order at an evaluation, kept here: EarlyStoppingCallback compares the
 * new value with the best *before* it, counting an evaluation as no improvement
 * unless it is better by more than the threshold (|new - best| > threshold); the
 * best is then replaced when the new value is better at all (np.less or
 * np.greater, no threshold); the run stops after the evaluation whose count
 * reaches the patience.  The checkpoint of the best evaluation's step, once saved,
 * is best_model_checkpoint, OUTPUT_DIR/checkpoint-N. */
#ifndef ZT_SELECTION_H
#define ZT_SELECTION_H

#include "../core/status.h"

struct cJSON;

/* What the flags ask (zt_train_args.select). */
typedef struct zt_select_args {
    int load_best_model_at_end;
    const char *metric;     /* metric_for_best_model: loss or eval_loss (NULL: eval_loss when asked for) */
    int greater_is_better;  /* -1: Trainer's default, false for a loss */
    long patience;          /* early_stopping_patience (0: no early stopping) */
    double threshold;       /* early_stopping_threshold */
} zt_select_args;

typedef struct zt_selection {
    int on;                 /* a metric is tracked */
    int greater;
    long patience, counter; /* EarlyStoppingCallback's patience and early_stopping_patience_counter */
    double threshold;
    int have_best;
    double best_metric;
    long best_step;         /* best_global_step (0: none) */
    char best_checkpoint[4200]; /* best_model_checkpoint ("" none) */
    struct cJSON *history;  /* log_history: a JSON array of Trainer's log records */
} zt_selection;

/* Check the flags against the run (early stopping and the best model need an
 * evaluation, the best model a checkpoint directory, and checkpoints where the
 * evaluations are, as Trainer requires) and start an empty history.  eval_every
 * and save_every: the steps between evaluations and saves (0: unknown / none). */
int zt_selection_init(zt_selection *s, const zt_select_args *a, int have_eval, const char *output_dir,
                      long eval_every, long save_every, zt_err *err);
void zt_selection_free(zt_selection *s);

/* A logging step's record and an evaluation's, in Trainer's key names. */
void zt_selection_log_train(zt_selection *s, long step, double epoch, double loss, double grad_norm, double lr);
/* Returns 1 when the run should stop here (early stopping's patience is spent). */
int zt_selection_on_eval(zt_selection *s, long step, double epoch, double eval_loss);
/* As checkpoint-STEP is written into output_dir: best_model_checkpoint. */
void zt_selection_on_save(zt_selection *s, const char *output_dir, long step);

/* Trainer's keys of trainer_state.json (log_history, best_metric, best_global_step,
 * best_model_checkpoint) into obj, and back from a resumed checkpoint's. */
void zt_selection_to_json(const zt_selection *s, struct cJSON *obj);
int zt_selection_from_json(zt_selection *s, const struct cJSON *obj, const char *name, zt_err *err);

#endif
