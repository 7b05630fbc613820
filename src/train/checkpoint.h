/* checkpoint.h — save a run so it can continue, under the same plan bit for
 * bit and under any other plan with the same master dtype (docs/checkpoints.md).
 *
 * OUTPUT_DIR/checkpoint-N/ holds
 *   config.json                        the model's configuration
 *   model.safetensors (or shards)      the full model as a HF directory, unless
 *                                      the plan saves sharded only
 *   zero/shard-R-of-G.safetensors      group rank R's slice of every unit:
 *                                      unit.U.master, unit.U.m, unit.U.v (and
 *                                      unit.U.comp with Kahan compensation), in
 *                                      the master dtype, exactly as held
 *   zero/index.json                    how the units are cut (ckpt_state.h)
 *   trainer_state.json                 step, optimizer, scaler, data position,
 *                                      hyper-parameters, plan, command line
 *   manifest.json                      size and XXH3 of every other file
 *
 * Crash consistency: everything is written into OUTPUT_DIR/.checkpoint-N.tmp-XXXXXX,
 * each file fsynced, the manifest last, then the directory is renamed into place
 * (exchanged atomically with an existing checkpoint-N, whose old copy is then
 * removed).  A kill at any moment leaves either the old or the new checkpoint-N,
 * never a mix; the leftover temporary directory is removed by the next save.
 *
 * Every write is agreed: after each file, all ranks learn the worst status, so
 * a failure on any rank fails the save on every rank (the failing rank's error
 * carries the message, the others an empty one). */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include "../engine/engine.h"
#include "../engine/loss_scale.h"
#include "../model/config.h"
#include "../plan/plan.h"
#include "ckpt_state.h"

typedef struct zt_ckpt_save_args {
    const char *output_dir;
    const zt_llama_config *cfg;
    const zt_plan *plan;
    int write_model;          /* also the full HF model (FULL_STATE_DICT) */
    zt_dtype model_dtype;
    size_t max_shard_bytes;
    long save_total_limit;    /* keep the newest N checkpoints (0: all) */
    /* what the checkpoint carries of the source model (io/hf_carry.h): its
     * config.json keys and generation_config.json from source_dir, the tokenizer
     * files from tokenizer_dir (NULL: source_dir's) */
    const char *source_dir, *tokenizer_dir;
    long keep_step;           /* rotation keeps checkpoint-keep_step too (the best model's; 0: none) */
    /* LoRA: no model, but the adapters in PEFT's format (adapter_model.safetensors,
     * adapter_config.json naming source_dir as the base), so that checkpoint-N is
     * also an adapter directory; the shards hold the adapter units' state only (the
     * engine's state view lists trained units) and trainer_state.json st->lora */
    const struct zt_lora *lora;
} zt_ckpt_save_args;

/* What a save cost (filled on rank 0): wall seconds, and the bytes written in
 * all, by rank 0 (model, metadata and its shard) and by the busiest other rank. */
typedef struct zt_ckpt_save_report {
    double seconds;
    uint64_t bytes_total, bytes_rank0, bytes_other_max;
} zt_ckpt_save_report;

/* Collective: write OUTPUT_DIR/checkpoint-<st->step>.  On success, *where
 * (optional, 4096 bytes) receives the directory and *rep (optional) the cost. */
int zt_ckpt_save(const zt_ckpt_save_args *sa, zt_engine *eng, const zt_ckpt_state *st, char *where,
                 zt_ckpt_save_report *rep, zt_err *err);

/* Collective: the checkpoint to resume from.  spec is a directory, or "latest":
 * the newest checkpoint-N in output_dir whose manifest verifies (damaged or
 * partial ones are skipped with a warning on stderr).  Rank 0 verifies every file
 * against the manifest; a named checkpoint that fails is ZT_EINPUT naming the
 * file.  dir (4096 bytes) receives the choice on every rank. */
int zt_ckpt_resolve(const char *spec, const char *output_dir, zt_comm *comm, char *dir, zt_err *err);

typedef struct zt_ckpt_load_args {
    const zt_plan *plan;
    const zt_ckpt_hparams *hp;   /* this run's */
    int override_args;           /* --override_checkpoint_args: print changes instead of refusing */
    int allow_precision_change;  /* --allow_precision_change: convert the master dtype */
    int talk;                    /* print what is done (rank 0) */
    /* LoRA: this run's adapters' settings and base digest (NULL: full fine-tuning),
     * compared with the checkpoint's; model_dir names the base in a refusal */
    const zt_ckpt_lora *lora;
    const char *model_dir;
} zt_ckpt_load_args;

/* Every rank: read DIR's trainer state, refuse changed hyper-parameters (naming
 * the field), compare the plans, and fill the engine's shards from the saved
 * ones, resharding when the cut differs.  *st receives the saved state.  A LoRA
 * checkpoint resumes only a LoRA run with the same r, alpha, rsLoRA and targets on
 * the same base (its digest), and fills the adapter units alone: the frozen base
 * was loaded from the model directory. */
int zt_ckpt_load(const char *dir, const zt_ckpt_load_args *la, zt_engine *eng, zt_ckpt_state *st,
                 zt_err *err);

/* What resuming DIR's plan under plan would do: 0 bit-exact (same cut, same
 * world), 1 resharded, 2 refused; why (256 bytes) says so in words. */
int zt_ckpt_compare_plans(const zt_ckpt_plan *saved, const zt_plan *plan, int allow_precision_change,
                          char *why, size_t cap);

/* The plan and hyper-parameters of this run, as trainer_state.json records them. */
zt_ckpt_plan zt_ckpt_plan_of(const zt_plan *plan, int world);

/* DIR is a complete checkpoint: its manifest lists trainer_state.json,
 * zero/index.json, config.json and every shard the index implies, every listed
 * file has its size and checksum, and both JSON documents pass their checks.
 * ZT_EINPUT naming the first file at fault. */
int zt_ckpt_verify(const char *dir, zt_err *err);

/* Read and validate DIR/trainer_state.json. */
int zt_ckpt_read_state(const char *dir, zt_ckpt_state *st, zt_err *err);

/* Write checkpoint DIR's model as a Hugging Face directory OUT (merge-weights):
 * verified first, then each parameter assembled from the shards and written in
 * dtype (NULL: config.json's torch_dtype, the save dtype) one at a time, in the
 * order and files a FULL_STATE_DICT save uses, so the result is byte for byte
 * what that save writes at the same step. */
int zt_ckpt_merge(const char *dir, const char *out, const zt_dtype *dtype, size_t max_shard_bytes, zt_err *err);

/* mkdir -p DIR, then create and remove a temporary file in it, so a directory
 * that cannot be written is refused before training (ZT_EINPUT naming it); and
 * every file the final model save writes there checked (zt_hf_check_outputs). */
int zt_ckpt_probe_output_dir(const char *dir, zt_err *err);

#endif
