/* run_args.c — see run_args.h. */
#include "run_args.h"

#include <string.h>
#include <strings.h>

int zt_train_args_from_settings(const zt_settings *st, const zt_plan *plan, zt_train_args *a, zt_err *err)
{
    memset(a, 0, sizeof *a);
    if (zt_lr_schedule_parse(st->schedule, &a->schedule) != 0)
        return zt_fail(err, ZT_EINPUT, "lr_scheduler_type: expected %s, got '%s'", zt_lr_schedule_list(),
                       st->schedule);
    /* transformers refuses the same: the decay would climb from lr up to lr_end */
    if (a->schedule == ZT_LR_POLYNOMIAL && !(st->lr > ZT_LR_POLY_END))
        return zt_fail(err, ZT_EINPUT, "lr_scheduler_type polynomial: --learning_rate %g must be above its lr_end %g",
                       st->lr, ZT_LR_POLY_END);
    a->plan = *plan;
    a->block_size = st->block_size;
    a->batch_size = st->batch;
    a->grad_accum = st->accum;
    a->max_steps = st->max_steps;
    a->adam = (zt_adamw_hparams){.lr = st->lr, .weight_decay = st->weight_decay, .beta1 = st->beta1,
                                 .beta2 = st->beta2, .eps = st->eps};
    a->max_grad_norm = st->max_grad_norm;
    a->warmup_steps = st->warmup_steps;
    a->seed = (uint64_t)st->seed;
    a->shuffle = st->shuffle;
    a->checkpointing = st->checkpointing;
    a->save_steps = st->save_steps;
    /* what a checkpoint holds besides the shards: FSDP's SHARDED_STATE_DICT (and
     * LOCAL_STATE_DICT) gathers no full model; DeepSpeed's ZeRO-3 writes the
     * 16-bit model only with stage3_gather_16bit_weights_on_model_save, stages
     * 0-2 always (their engine holds the full weights) */
    const char *sd = st->accel.fsdp_state_dict_type;
    if (plan->face == ZT_FACE_FSDP)
        a->sharded_only = !strcasecmp(sd, "SHARDED_STATE_DICT") || !strcasecmp(sd, "LOCAL_STATE_DICT");
    else if (plan->face == ZT_FACE_DEEPSPEED)
        a->sharded_only = plan->stage == 3 && st->ds.stage3_gather_16bit_weights_on_model_save != ZT_YES;
    return ZT_OK;
}
