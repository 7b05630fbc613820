/* settings.c — combine defaults, config files and flags (see settings.h). */
#include "settings.h"

#include <stdio.h>
#include <string.h>

#include "../model/layout.h" /* the wrap policy names (zt_wrap_policy_parse) */

void zt_settings_defaults(zt_settings *s)
{
    memset(s, 0, sizeof *s);
    s->zero_stage = -1;
    s->torch_dtype = "float32";
    s->mixed_precision = "no";
    s->min_num_params = 100000000;
    s->block_size = 128;
    s->batch = 8;
    s->accum = 1;
    s->max_steps = 100;
    s->seed = 42;
    s->shuffle = 1; /* Trainer's RandomSampler: a seeded permutation, new each epoch */
    s->lr = 5e-5;
    s->beta1 = 0.9;
    s->beta2 = 0.999;
    s->eps = 1e-8;
    s->max_grad_norm = 1.0;
    s->schedule = "linear";
    s->optim = "adamw_torch";
    s->num_processes = -1;
    s->forward_prefetch = -1;
    s->limit_all_gathers = -1;
    zt_accel_config_init(&s->accel);
    zt_ds_config_init(&s->ds);
}

static int given(const zt_settings *s, const char *flag) { return s->given && s->given(s->given_ctx, flag); }

static const char *strategy_names[] = {"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                       "HYBRID_SHARD_ZERO2"};

/* The Accelerate YAML: keys the reader accepted and that change a CPU run. */
static void apply_accelerate(zt_settings *s)
{
    const zt_accel_config *ac = &s->accel;
    int fsdp = !strcmp(ac->distributed_type, "FSDP"), ds = !strcmp(ac->distributed_type, "DEEPSPEED");
    if (!given(s, "use_fsdp") && !given(s, "use_deepspeed")) {
        s->use_fsdp = fsdp;
        s->use_deepspeed = ds;
    }
    s->num_processes = ac->num_processes;
    if (ac->mixed_precision[0] && !given(s, "mixed_precision"))
        s->mixed_precision = ac->mixed_precision;
    if (ac->use_cpu == ZT_YES && !given(s, "device")) /* use_cpu: false leaves the choice to --device */
        s->device = "cpu";
    /* Accelerate's MULTI_GPU: DDP (stage 0, neither FSDP nor DeepSpeed) on GPUs */
    if (!strcmp(ac->distributed_type, "MULTI_GPU") && !given(s, "device"))
        s->device = "cuda";
    if (ac->ztrain_kernels[0] && !given(s, "kernels"))
        s->kernels = ac->ztrain_kernels;
    if (ac->ztrain_offload_delayed_update != ZT_UNSET && !given(s, "offload_delayed_update"))
        s->offload_delayed_update = ac->ztrain_offload_delayed_update == ZT_YES;
    if (ac->ztrain_cuda_graphs[0] && !given(s, "cuda_graphs"))
        s->cuda_graphs = ac->ztrain_cuda_graphs;
    if (fsdp && ac->fsdp_sharding_strategy >= 1 && !given(s, "fsdp_sharding_strategy"))
        s->strategy = strategy_names[ac->fsdp_sharding_strategy];
    if (fsdp && ac->fsdp_auto_wrap_policy[0] && !given(s, "fsdp_auto_wrap_policy"))
        s->wrap = ac->fsdp_auto_wrap_policy;
    if (fsdp && ac->fsdp_min_num_params >= 0 && !given(s, "fsdp_min_num_params"))
        s->min_num_params = ac->fsdp_min_num_params;
    if (fsdp && ac->fsdp_backward_prefetch[0] && !given(s, "fsdp_backward_prefetch"))
        s->backward_prefetch = ac->fsdp_backward_prefetch;
    if (fsdp && ac->fsdp_forward_prefetch != ZT_UNSET && !given(s, "fsdp_forward_prefetch"))
        s->forward_prefetch = ac->fsdp_forward_prefetch == ZT_YES;
    if (fsdp && ac->fsdp_activation_checkpointing == ZT_YES && !given(s, "gradient_checkpointing"))
        s->checkpointing = 1;
    if (ds && ac->zero_stage >= 0 && !given(s, "zero_stage"))
        s->zero_stage = ac->zero_stage;
    if (ds && ac->gradient_accumulation_steps > 0 && !given(s, "gradient_accumulation_steps"))
        s->accum = ac->gradient_accumulation_steps;
    if (ds && ac->gradient_clipping >= 0 && !given(s, "max_grad_norm"))
        s->max_grad_norm = ac->gradient_clipping;
    if (ds && ac->deepspeed_config_file[0] && !given(s, "deepspeed_config_file"))
        s->deepspeed_config_file = ac->deepspeed_config_file;
}

/* The DeepSpeed JSON.  A flag the user gave turns the matching key into "auto",
 * so the resolution takes the flag's value (and still checks train_batch_size). */
static int apply_deepspeed(zt_settings *s, int world, int hidden, zt_err *err)
{
    zt_ds_config *c = &s->ds;
    if (s->use_fsdp)
        return zt_fail(err, ZT_EINPUT, "%s: a DeepSpeed config cannot be used with FSDP (--use_fsdp or "
                       "distributed_type FSDP)", c->path);
    s->use_deepspeed = 1;
    if (c->activation_checkpointing && !given(s, "gradient_checkpointing")) /* the flag wins, as over any file */
        s->checkpointing = 1;
    zt_ds_value auto_v = {1, 1, 0};
    if (given(s, "per_device_train_batch_size"))
        c->train_micro_batch_size_per_gpu = auto_v;
    if (given(s, "gradient_accumulation_steps"))
        c->gradient_accumulation_steps = auto_v;
    if (given(s, "max_grad_norm"))
        c->gradient_clipping = auto_v;
    if (given(s, "learning_rate"))
        c->lr = auto_v;
    if (given(s, "weight_decay"))
        c->weight_decay = auto_v;
    if (given(s, "adam_beta1"))
        c->beta1 = auto_v;
    if (given(s, "adam_beta2"))
        c->beta2 = auto_v;
    if (given(s, "adam_epsilon"))
        c->eps = auto_v;
    if (given(s, "warmup_steps"))
        c->warmup_num_steps = auto_v;
    if (given(s, "max_steps"))
        c->total_num_steps = auto_v;
    zt_ds_run run;
    zt_ds_run_init(&run);
    run.micro_batch = s->batch;
    run.grad_accum = s->accum;
    run.world = world;
    run.hidden_size = hidden;
    run.allow_unresolved = s->allow_unresolved_auto;
    run.lr = s->lr;
    run.weight_decay = s->weight_decay;
    run.beta1 = s->beta1;
    run.beta2 = s->beta2;
    run.eps = s->eps;
    run.max_grad_norm = s->max_grad_norm;
    run.warmup_steps = s->warmup_steps;
    run.total_steps = s->max_steps;
    zt_ds_resolved *r = &s->ds_resolved;
    int rc = zt_ds_config_resolve(c, &run, r, err);
    if (rc)
        return rc;
    s->batch = r->micro_batch;
    s->accum = r->grad_accum;
    s->max_grad_norm = r->gradient_clipping;
    s->lr = r->lr;
    s->weight_decay = r->weight_decay;
    s->beta1 = r->beta1;
    s->beta2 = r->beta2;
    s->eps = r->eps;
    if (r->schedule[0] && !given(s, "lr_scheduler_type"))
        s->schedule = r->schedule;
    s->warmup_steps = r->warmup_steps;
    s->max_steps = r->total_steps;
    if (c->stage >= 0 && !given(s, "zero_stage"))
        s->zero_stage = c->stage;
    /* precision: an explicit enabled flag decides unless --mixed_precision was
     * given; "auto" (or no section) takes the YAML's mixed_precision, as in
     * Accelerate's DeepSpeed template; an explicit value that disagrees with the
     * YAML is a contradiction */
    if (!given(s, "mixed_precision")) {
        const char *json_mp = c->bf16_enabled == ZT_YES ? "bf16"
                              : c->fp16_enabled == ZT_YES ? "fp16"
                              : c->bf16_enabled == ZT_NO && (c->fp16_enabled == ZT_NO || c->fp16_enabled == ZT_UNSET)
                                  ? "no"
                                  : NULL;
        const char *yaml_mp = s->config_file && s->accel.mixed_precision[0] ? s->accel.mixed_precision : NULL;
        if (json_mp && yaml_mp && strcmp(json_mp, yaml_mp) != 0)
            return zt_fail(err, ZT_EINPUT, "%s: mixed_precision is %s, but %s's bf16/fp16 sections say %s; set "
                           "\"enabled\": \"auto\" in the JSON to let mixed_precision choose, or make them agree",
                           s->config_file, yaml_mp, c->path, json_mp);
        if (json_mp)
            s->mixed_precision = json_mp;
    }
    if (c->communication_data_type[0] && !given(s, "reduce_dtype"))
        s->reduce_dtype = c->communication_data_type;
    if (c->fp16_loss_scale > 0)
        return zt_fail(err, ZT_EINPUT, "%s: fp16.loss_scale %g: a static loss scale is not supported; "
                       "use 0 (dynamic, DeepSpeed's default)", c->path, c->fp16_loss_scale);
    return ZT_OK;
}

/* Read the files named in s and fill every setting the command line did not
 * give; then the plan request. */
static int resolve_request(zt_settings *s, int world, int hidden_size, zt_dtype config_dtype,
                           zt_plan_request *req, zt_err *err)
{
    int rc;
    if (s->config_file) {
        if ((rc = zt_accel_config_read(s->config_file, &s->accel, err)))
            return rc;
        apply_accelerate(s);
    }
    if (s->use_fsdp && s->use_deepspeed)
        return zt_fail(err, ZT_EINPUT, "--use_fsdp and --use_deepspeed exclude each other");
    if (s->config_file && s->accel.use_cpu == ZT_YES && s->device && strcmp(s->device, "cpu") != 0)
        return zt_fail(err, ZT_EINPUT, "--device %s contradicts %s's use_cpu: true; drop one of them", s->device,
                       s->config_file);
    if (s->config_file && !strcmp(s->accel.distributed_type, "MULTI_GPU") && s->device && strcmp(s->device, "cuda"))
        return zt_fail(err, ZT_EINPUT, "--device %s contradicts %s's distributed_type: MULTI_GPU (--device cuda); "
                       "use MULTI_CPU for CPUs", s->device, s->config_file);
    if (s->deepspeed_config_file) {
        snprintf(s->ds_json_path, sizeof s->ds_json_path, "%s", s->deepspeed_config_file);
        if ((rc = zt_ds_config_read(s->ds_json_path, &s->ds, err)))
            return rc;
        s->have_ds = 1;
        if ((rc = apply_deepspeed(s, world, hidden_size, err)))
            return rc;
    }
    zt_plan_request_init(req);
    req->face = s->use_fsdp ? ZT_FACE_FSDP : s->use_deepspeed ? ZT_FACE_DEEPSPEED : ZT_FACE_DDP;
    req->mixed_precision = s->mixed_precision;
    req->torch_dtype = s->torch_dtype;
    req->config_dtype = config_dtype;
    req->zero_stage = s->zero_stage;
    req->min_num_params = s->min_num_params;
    req->reduce_dtype = s->reduce_dtype;
    req->ranks_per_node = s->ranks_per_node;
    req->master_compensation = s->compensation;
    req->backward_prefetch = s->backward_prefetch;
    req->device = s->device;
    req->comm_backend = s->comm_backend;
    req->kernels = s->kernels;
    req->offload_delayed_update = s->offload_delayed_update;
    req->cuda_graphs = s->cuda_graphs;
    req->step = s->step;
    req->activations = s->activations;
    req->forward_prefetch = s->forward_prefetch < 0 ? ZT_UNSET : s->forward_prefetch ? ZT_YES : ZT_NO;
    req->limit_all_gathers = s->limit_all_gathers < 0 ? ZT_UNSET : s->limit_all_gathers ? ZT_YES : ZT_NO;
    if (s->have_ds) {
        const zt_ds_config *c = &s->ds;
        req->overlap_comm = c->overlap_comm;
        const zt_ds_resolved *dr = &s->ds_resolved; /* -1: unresolved (no model): no limit */
        req->prefetch_bucket = dr->stage3_prefetch_bucket_size;
        req->reduce_bucket = dr->reduce_bucket_size > 0 ? dr->reduce_bucket_size : 0;
        req->allgather_bucket = dr->allgather_bucket_size > 0 ? dr->allgather_bucket_size : 0;
        req->persistence = dr->stage3_param_persistence_threshold > 0 ? dr->stage3_param_persistence_threshold : 0;
        req->max_live = dr->stage3_max_live_parameters > 0 ? dr->stage3_max_live_parameters : 0;
        req->ls_initial_scale_power = c->fp16_initial_scale_power;
        req->ls_window = c->fp16_loss_scale_window;
        req->ls_hysteresis = c->fp16_hysteresis;
        req->ls_min_scale = c->fp16_min_loss_scale;
    }
    /* offload, as either file asks for it (the plan says what moves: zt_plan_print_offload) */
    const zt_accel_config *ac = &s->accel;
    req->offload_optimizer = !strcmp(ac->offload_optimizer_device, "cpu") ||
                             (s->have_ds && !strcmp(s->ds.offload_optimizer_device, "cpu"));
    req->offload_params = ac->fsdp_offload_params == ZT_YES || !strcmp(ac->offload_param_device, "cpu") ||
                          (s->have_ds && !strcmp(s->ds.offload_param_device, "cpu"));
    if (s->strategy && zt_sharding_parse(s->strategy, &req->sharding) != 0)
        return zt_fail(err, ZT_EINPUT, "fsdp_sharding_strategy: expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                       "HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1-5), got '%s'", s->strategy);
    if (s->wrap) {
        if (zt_wrap_policy_parse(s->wrap, &req->wrap) != 0)
            return zt_fail(err, ZT_EINPUT, "fsdp_auto_wrap_policy: expected TRANSFORMER_BASED_WRAP, "
                           "SIZE_BASED_WRAP or NO_WRAP, got '%s'", s->wrap);
        req->wrap_set = 1;
    }
    return ZT_OK;
}

int zt_settings_plan(zt_settings *s, int world, int hidden_size, zt_dtype config_dtype,
                     const zt_topology *topo, zt_plan *plan, zt_err *err)
{
    zt_plan_request req;
    int rc = resolve_request(s, world, hidden_size, config_dtype, &req, err);
    if (rc)
        return rc;
    if (topo) {
        req.machines = topo->machines;
        req.machine_ranks = topo->machine_ranks;
    }
    return zt_plan_resolve(&req, world, plan, err);
}
