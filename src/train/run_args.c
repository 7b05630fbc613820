/* run_args.c — see run_args.h. */
#include "run_args.h"

#include <string.h>
#include <strings.h>

/* --optim: Trainer's optimizer names whose update is ztrain's AdamW (torch.optim.AdamW's
 * math; the fused kernel computes the same), and a refusal naming any other. */
static int check_optim(const char *name, zt_err *err)
{
    static const char *const same[] = {"adamw_torch", "adamw_torch_fused"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (!strcmp(name, same[i]))
            return ZT_OK;
    return zt_fail(err, ZT_EINPUT, "--optim %s: not supported; ztrain's optimizer is AdamW as torch computes it, "
                   "--optim adamw_torch (default) or adamw_torch_fused", name);
}

int zt_train_args_from_settings(const zt_settings *st, const zt_plan *plan, zt_train_args *a, zt_err *err)
{
    memset(a, 0, sizeof *a);
    if (zt_lr_schedule_parse(st->schedule, &a->schedule) != 0)
        return zt_fail(err, ZT_EINPUT, "lr_scheduler_type: expected %s, got '%s'", zt_lr_schedule_list(),
                       st->schedule);
    int rc = zt_lr_kwargs_parse(st->schedule_kwargs, a->schedule, st->lr, &a->schedule_kwargs, err);
    if (rc)
        return rc;
    /* transformers refuses the same: the decay would climb from lr up to lr_end */
    if (a->schedule == ZT_LR_POLYNOMIAL && !(st->lr > a->schedule_kwargs.lr_end))
        return zt_fail(err, ZT_EINPUT, "lr_scheduler_type polynomial: --learning_rate %g must be above its lr_end %g",
                       st->lr, a->schedule_kwargs.lr_end);
    if ((rc = check_optim(st->optim, err)))
        return rc;
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
