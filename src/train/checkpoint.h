/* checkpoint.h — save and resume a run so it continues bit for bit.
 *
 * OUTPUT_DIR/checkpoint-N/ holds
 *   config.json, model.safetensors     the full model, as a Hugging Face directory
 *   zero/rank-R-of-W.safetensors       rank R's shards: for every unit u,
 *                                      unit.u.master, unit.u.m, unit.u.v (and
 *                                      unit.u.comp with Kahan compensation), in
 *                                      the master dtype, exactly as held
 *   trainer_state.json                 written last, by rank 0, once every rank's
 *                                      shard is on disk: the step, AdamW's t, the
 *                                      loss scaler, and the plan it was saved under
 * Resuming needs the same world size, stage, shard group, wrap and dtypes (the
 * shards are kept as they are; re-sharding on resume is not done), and refuses a
 * mismatch by name. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include "../engine/engine.h"
#include "../engine/loss_scale.h"
#include "../plan/plan.h"

typedef struct zt_ckpt_state {
    long step;                /* optimizer steps taken (the next step is step + 1) */
    long optimizer_steps;     /* AdamW's t: applied steps */
    zt_loss_scaler scaler;
} zt_ckpt_state;

/* Collective: every rank writes its shards, then rank 0 the trainer state. */
int zt_ckpt_save(const char *dir, zt_engine *eng, const zt_plan *plan, const zt_ckpt_state *st,
                 zt_err *err);
/* Every rank: check the saved plan against this one and restore its shards. */
int zt_ckpt_load(const char *dir, zt_engine *eng, const zt_plan *plan, zt_ckpt_state *st, zt_err *err);

#endif
