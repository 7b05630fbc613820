/* run_args.h — the trainer's arguments from resolved settings.
 *
 * The one mapping from what the user said (zt_settings: flags, the Accelerate
 * YAML and the DeepSpeed JSON, combined by zt_settings_plan) to what the trainer
 * runs.  `ztrain train` and the tests build their zt_train_args through it, so
 * a setting cannot reach the trainer by one path and not by the other. */
#ifndef ZT_RUN_ARGS_H
#define ZT_RUN_ARGS_H

#include "../config/settings.h"
#include "trainer.h"

/* Fill a (zeroed first) with plan and st's training settings: sequence, batch and
 * accumulation, steps, AdamW, clipping, schedule, warmup, seed, shuffle,
 * checkpointing and save_steps.  What is not a setting (paths, the communicator,
 * the progress bar, resuming) is the caller's.  A schedule name that is not one
 * of ztrain's is ZT_EINPUT naming lr_scheduler_type. */
int zt_train_args_from_settings(const zt_settings *st, const zt_plan *plan, zt_train_args *a, zt_err *err);

#endif
