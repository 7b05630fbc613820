/* evaluate.h — held-out evaluation during training, as Hugging Face Trainer's
 * eval_strategy="steps": every eval_steps optimizer steps, the mean token
 * cross-entropy of the model as it stands on a separate token stream.
 *
 * The stream t[0..n) is cut into consecutive windows of at most T + 1 tokens, as
 * `ztrain eval` cuts it: window i = t[iT .. iT + len_i], inputs its first len_i
 * tokens and targets the last len_i, with len_i = min(T, n - 1 - iT).  Every
 * window but the last has len_i = T; a last window of fewer than T targets is
 * evaluated over its own length (its rows past len_i are padding, not counted, and
 * cannot change the counted ones: attention is causal).  So the n - 1 tokens that
 * have a token before them are each predicted exactly once, whatever B and W are.
 * The windows are sharded over the ranks
 * as a training step's micro-batches are (contract §4 with A = 1): round k gives rank r
 * windows [(kW + r)B, (kW + r + 1)B).  A rank whose slice runs past the last window
 * fills the rest with window 0 and does not count it, because every rank must run
 * the same forward passes: with ZeRO-3 they all-gather each unit together.
 *
 * Each window's loss (the sum over its len_i tokens, in double) is gathered to every
 * rank and the sum runs in window order, so the result does not depend on the
 * world size: it is the same number as long as a window's logits do not depend on
 * which row of the batch it sits in (tests/cli/eval_during_training.sh checks 1, 2
 * and 4 ranks). */
#ifndef ZT_EVALUATE_H
#define ZT_EVALUATE_H

#include "../comm/comm.h"
#include "../core/status.h"
#include "../io/tokens.h"
#include "../model/llama.h"

typedef struct zt_evaluator {
    zt_tokens tokens;
    zt_model model;          /* its own activations, for B rows of T */
    int B, T, V, W;
    long nwin, rounds;       /* windows; forward passes per rank */
    int *inputs, *targets;   /* (B, T) */
    double *mine, *all;      /* per-slot window losses: this rank's (rounds*B), every rank's (W*rounds*B) */
    int have_tokens, have_model;
    int32_t doc_eos;         /* padding-free: the eos that ends each document */
    int *pos;                /* padding-free: (B, T) positions of the pass, else NULL */
} zt_evaluator;

typedef struct zt_eval_result {
    double loss;             /* mean token cross-entropy over every window */
    double perplexity;       /* exp(loss) */
    long tokens;             /* the targets evaluated: n - 1 for the whole stream */
    double seconds;
} zt_eval_result;

/* Evaluate padding-free windows, as training reads them (batches.h:
 * zt_batcher_set_padding_free): documents end at eos, positions restart after it,
 * attention stays inside each, and an eos's target (the next document) does not count. */
int zt_evaluator_set_padding_free(zt_evaluator *ev, int32_t eos, zt_err *err);

/* Load the eval stream (path: .npy, .bin or .txt) for a model of cfg whose
 * parameters the owner serves, B windows of T tokens per forward pass per rank,
 * on W ranks; only the first max_windows windows (0: all).  ZT_EINPUT naming
 * the flag ("eval_data", "data") and path when it holds fewer than 2 tokens or a token outside the vocabulary.
 * mask_path (NULL: none): the loss mask of prompt-completion records
 * (io/tokens.h): a target whose mask is 0 (a prompt token) is not evaluated,
 * so the mean is over the completion tokens, as training's loss is. */
int zt_evaluator_open(zt_evaluator *ev, const char *path, const char *mask_path, const zt_llama_config *cfg,
                      const zt_layout *lay, const zt_param_owner *owner, int B, int T, int W, long max_windows,
                      const char *flag, zt_err *err);
void zt_evaluator_free(zt_evaluator *ev);

/* Collective (every rank of comm): evaluate the model as the owner holds it now. */
int zt_evaluator_run(zt_evaluator *ev, zt_comm *comm, zt_eval_result *out, zt_err *err);

#endif
