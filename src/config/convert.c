/* convert.c — Accelerate YAML for the other backend (see convert.h). */
#include "convert.h"

#include <string.h>

#include "../model/layout.h" /* the wrap policy names (zt_wrap_policy_name) */

static const char *mp_name(const zt_plan *p)
{
    return p->mixed ? zt_dtype_name(p->prec.compute) : "'no'";
}

int zt_config_convert(FILE *f, FILE *notes, const zt_settings *s, const zt_plan *p, zt_face to,
                      zt_err *err)
{
    const char *src = s->config_file ? s->config_file : s->deepspeed_config_file ? s->deepspeed_config_file
                                                                                 : "the flags";
    if (p->hybrid)
        return zt_fail(err, ZT_EINPUT, "%s: hybrid sharding has no counterpart in Accelerate's DeepSpeed "
                       "config (ZeRO++ hpZ is not among its keys); nothing to convert", src);
    int num = s->num_processes > 0 ? s->num_processes : p->world;
    if (to == ZT_FACE_DEEPSPEED) {
        if (p->face == ZT_FACE_FSDP && p->prec.master != ZT_F32)
            return zt_fail(err, ZT_EINPUT, "%s: FSDP's memory-constrained mode (master in %s) has no DeepSpeed "
                           "counterpart: DeepSpeed always keeps an fp32 master. Convert the aligned mode "
                           "(mixed_precision bf16) instead", src, zt_dtype_name(p->prec.master));
        if (notes && p->face == ZT_FACE_FSDP && !p->mixed)
            fprintf(notes, "note: without mixed precision, FSDP keeps the master in the load dtype: with "
                    "--torch_dtype bfloat16 that is the memory-constrained mode, which DeepSpeed (always an fp32 "
                    "master) does not run\n");
        fprintf(f, "# DeepSpeed ZeRO-%d, converted by `ztrain config convert` from %s (%s, %s)\n", p->stage,
                src, zt_face_name(p->face), p->strategy);
        fprintf(f, "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n");
        fprintf(f, "mixed_precision: %s\nnum_machines: 1\nnum_processes: %d\n", mp_name(p), num);
        fprintf(f, "deepspeed_config:\n  zero_stage: %d\n", p->stage);
        fprintf(f, "  gradient_accumulation_steps: %d\n  gradient_clipping: %g\n", s->accum, s->max_grad_norm);
        fprintf(f, "  offload_optimizer_device: none\n  offload_param_device: none\n");
        fprintf(f, "  zero3_init_flag: false\n");
        if (p->stage == 3)
            fprintf(f, "  zero3_save_16bit_model: true\n");
        /* DeepSpeed's defaults: overlap_comm and prefetch both ways at ZeRO-3 only */
        int ds3 = p->stage == 3;
        if (notes && (p->overlap.overlap_reduce != ds3 || p->overlap.forward_prefetch != ds3 ||
                      p->overlap.backward_prefetch != (ds3 ? ZT_BACKWARD_PREFETCH_PRE : ZT_BACKWARD_PREFETCH_NONE)))
            fprintf(notes, "note: DeepSpeed's ZeRO-%d overlaps differently (overlap_comm %s, prefetch %s): the "
                    "collectives run at other times, the numbers do not change\n", p->stage, ds3 ? "on" : "off",
                    ds3 ? "both ways" : "none");
        if (notes && p->wrap != (p->stage == 3 ? ZT_WRAP_TRANSFORMER : ZT_WRAP_NONE))
            fprintf(notes, "note: DeepSpeed groups parameters its own way (%s at ZeRO-%d); the units change, "
                    "the numbers do not\n", p->stage == 3 ? "per layer" : "one flat buffer", p->stage);
        return ZT_OK;
    }
    if (to != ZT_FACE_FSDP)
        return zt_fail(err, ZT_EINPUT, "convert --to: expected deepspeed or fsdp");
    if (p->stage == 1)
        return zt_fail(err, ZT_EINPUT, "%s: ZeRO-1 shards only the optimizer state, which FSDP cannot do; "
                       "the nearest FSDP strategy is SHARD_GRAD_OP (ZeRO-2), a different plan", src);
    const char *strategy = p->stage == 0 ? "NO_SHARD" : p->stage == 2 ? "SHARD_GRAD_OP" : "FULL_SHARD";
    fprintf(f, "# FSDP %s, converted by `ztrain config convert` from %s (%s, %s)\n", strategy, src,
            zt_face_name(p->face), p->strategy);
    fprintf(f, "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\n");
    fprintf(f, "mixed_precision: %s\nnum_machines: 1\nnum_processes: %d\n", mp_name(p), num);
    fprintf(f, "fsdp_config:\n  fsdp_sharding_strategy: %s\n", strategy);
    fprintf(f, "  fsdp_auto_wrap_policy: %s\n", zt_wrap_policy_name(p->wrap));
    if (p->wrap == ZT_WRAP_TRANSFORMER)
        fprintf(f, "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n");
    if (p->wrap == ZT_WRAP_SIZE)
        fprintf(f, "  fsdp_min_num_params: %ld\n", p->min_num_params);
    /* the plan's prefetch where it applies (stage 3; DeepSpeed's ZeRO-3 prefetches both
     * ways), FSDP's defaults elsewhere */
    int s3 = p->stage == 3;
    fprintf(f, "  fsdp_backward_prefetch: %s\n  fsdp_forward_prefetch: %s\n",
            zt_backward_prefetch_name(s3 ? p->overlap.backward_prefetch : ZT_BACKWARD_PREFETCH_PRE),
            s3 && p->overlap.forward_prefetch ? "true" : "false");
    fprintf(f, "  fsdp_offload_params: false\n  fsdp_state_dict_type: FULL_STATE_DICT\n");
    fprintf(f, "  fsdp_use_orig_params: true\n  fsdp_sync_module_states: true\n");
    if (notes && p->face == ZT_FACE_DEEPSPEED && !p->mixed && p->prec.load != ZT_F32)
        fprintf(notes, "note: DeepSpeed kept an fp32 master for this %s-loaded model; FSDP without mixed "
                "precision keeps a %s master (memory-constrained). Run FSDP with --torch_dtype float32 or "
                "mixed_precision bf16 to keep DeepSpeed's numbers\n",
                zt_dtype_name(p->prec.load), zt_dtype_name(p->prec.load));
    return ZT_OK;
}
