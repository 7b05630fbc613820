/* ckpt_state.h — the two JSON documents that describe a checkpoint, and the
 * checks every number in them must pass before anything trusts it.
 *
 * trainer_state.json: where the run stands (step, AdamW's t, loss scaler, data
 * position, the shuffle's seed), the hyper-parameters it ran with, the plan it
 * was saved under and the command line.  zero/index.json: how the shards are
 * cut — per unit its length and padded length, per parameter its name, shape,
 * unit and flat offset — so any other plan can find each parameter's elements
 * (docs/checkpoints.md).
 *
 * Both readers take a parsed zt_json and validate every field: numbers must be
 * finite, whole where they count something, and in range; strings must name
 * something known.  A bad field is ZT_EINPUT naming the file and the key
 * ("trainer_state.json: loss_scaler.scale must be ..."). */
#ifndef ZT_CKPT_STATE_H
#define ZT_CKPT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../engine/loss_scale.h"
#include "../engine/optim.h"
#include "../model/layout.h"

struct zt_json;

/* What a resume must not change silently (compared field by field). */
typedef struct zt_ckpt_hparams {
    double lr, weight_decay, beta1, beta2, eps, max_grad_norm;
    zt_lr_schedule schedule;
    char schedule_kwargs[320];  /* zt_lr_kwargs_format of the run's (older checkpoints: the defaults') */
    long warmup_steps, max_steps;
    long global_batch;          /* sequences per optimizer step: B * A * W */
    int per_device_batch, grad_accum; /* informational: W may change, B*A*W may not */
    int block_size;
    int shuffle;
    uint64_t seed;              /* the shuffle's permutation seed (the run's only RNG) */
    uint64_t data_tokens, data_digest; /* FNV-1a of the token ids */
    zt_dtype compute;
} zt_ckpt_hparams;

/* The plan a checkpoint was written under. */
typedef struct zt_ckpt_plan {
    char face[16], strategy[40];
    int stage, world, group_size;
    zt_wrap_policy wrap;
    long min_num_params;
    zt_dtype master, compute, reduce;
    int compensated, loss_scaling;
} zt_ckpt_plan;

/* A LoRA checkpoint (docs/lora.md): the adapters' settings, which a resume must
 * find unchanged, and the identity of the base the adapters were trained on. */
typedef struct zt_ckpt_lora {
    int on;                   /* 0: full fine-tuning (the key is absent) */
    int r, rslora;
    double alpha;
    unsigned targets;         /* zt_lora's bit set: bit k for projection kind k (ZT_P_Q ..) */
    uint64_t base_digest;     /* zt_base_digest of the frozen base (weights.h) */
} zt_ckpt_lora;

typedef struct zt_ckpt_state {
    long step;                /* optimizer steps taken (the next step is step + 1) */
    long optimizer_steps;     /* AdamW's t: applied steps (the scheduler's position) */
    long samples_seen;        /* step * global batch: the data position */
    long epoch;               /* samples_seen / windows: the shuffle's epoch */
    zt_loss_scaler scaler;
    zt_ckpt_hparams hp;
    zt_ckpt_plan plan;
    char command_line[1024];  /* the run's flags, for the record */
    zt_ckpt_lora lora;        /* "lora" in trainer_state.json, absent for full fine-tuning */
    char run_id[17];          /* 16 hex digits every file of the checkpoint shares ("": written before
                               * identities; ckpt_identity.h) */
    /* written for Trainer's TrainerState (not read back here): the epoch as a
     * fraction, the run's intervals, and the selection (log_history, best_*; NULL:
     * none), which the trainer reads back itself (selection.h) */
    double epoch_fraction;
    long logging_steps, eval_steps, save_steps, train_batch_size;
    double num_train_epochs;
    const struct zt_selection *sel;
} zt_ckpt_state;

/* trainer_state.json as text (malloc'd; NULL when out of memory): Trainer's
 * TrainerState keys at the top, so transformers' TrainerState.load_from_json reads
 * it (epoch, global_step, max_steps, log_history, best_metric, best_global_step,
 * best_model_checkpoint, ...), and ztrain's own state as one of its
 * stateful_callbacks, "ztrain" (Trainer passes over names it does not know).  The
 * reader refuses a key given twice and a key it does not know, at every level
 * (as the YAML and DeepSpeed readers do); run_id alone may be absent, and older
 * checkpoints, with ztrain's state at the top, are read as they are. */
char *zt_ckpt_state_to_json(const zt_ckpt_state *st);
int zt_ckpt_state_from_json(const char *name, const struct zt_json *js, zt_ckpt_state *st, zt_err *err);

/* zero/index.json: the cut of the shards. */
typedef struct zt_ckpt_iunit {
    size_t numel, padded_numel;
} zt_ckpt_iunit;

typedef struct zt_ckpt_iparam {
    char name[80];
    int unit, ndim;
    long shape[2];
    size_t offset, numel;     /* element offset inside the unit's flat buffer */
} zt_ckpt_iparam;

typedef struct zt_ckpt_index {
    int group_size;           /* shard files: zero/shard-R-of-G.safetensors, R < G */
    zt_dtype master;          /* dtype of master, m, v (and comp) */
    int compensated;          /* Kahan compensation stored (unit.U.comp) */
    char run_id[17];          /* as trainer_state.json's ("": none recorded) */
    int nunits, nparams;
    zt_ckpt_iunit *units;
    zt_ckpt_iparam *params;
} zt_ckpt_index;

/* The index of a layout as sharded over group_size ranks. */
int zt_ckpt_index_from_layout(const zt_layout *lay, int group_size, zt_dtype master, int compensated,
                              zt_ckpt_index *ix, zt_err *err);
char *zt_ckpt_index_to_json(const zt_ckpt_index *ix);
int zt_ckpt_index_from_json(const char *name, const struct zt_json *js, zt_ckpt_index *ix, zt_err *err);
void zt_ckpt_index_free(zt_ckpt_index *ix);
/* The parameter named name, or NULL. */
const zt_ckpt_iparam *zt_ckpt_index_find(const zt_ckpt_index *ix, const char *name);

#endif
