/* plan.c — resolve a request into the run's plan (see plan.h). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

void zt_plan_request_init(zt_plan_request *r)
{
    memset(r, 0, sizeof *r);
    r->face = ZT_FACE_DDP;
    r->sharding = ZT_SHARDING_UNSET;
    r->zero_stage = -1;
    r->wrap = ZT_WRAP_TRANSFORMER;
    r->min_num_params = 100000000;
    r->config_dtype = ZT_F32;
    r->forward_prefetch = r->overlap_comm = ZT_UNSET;
    r->prefetch_bucket = -1;
    r->limit_all_gathers = ZT_UNSET;
    r->ls_initial_scale_power = r->ls_window = r->ls_hysteresis = r->ls_min_scale = -1;
}

static const char *sharding_names[] = {"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                       "HYBRID_SHARD_ZERO2"};

int zt_sharding_parse(const char *s, zt_sharding *out)
{
    for (int i = 1; i <= 5; i++) {
        char num[2] = {(char)('0' + i), 0};
        if (!strcasecmp(s, sharding_names[i]) || !strcmp(s, num)) {
            *out = (zt_sharding)i;
            return 0;
        }
    }
    return -1;
}

const char *zt_sharding_name(zt_sharding s) { return s >= 1 && s <= 5 ? sharding_names[s] : "?"; }

const char *zt_face_name(zt_face f)
{
    return f == ZT_FACE_FSDP ? "FSDP" : f == ZT_FACE_DEEPSPEED ? "DEEPSPEED" : "MULTI_CPU";
}

/* Offload (docs/zero.md, Offload): what was asked, and what the engine does with
 * it.  On the CPU the state already lives in host memory, so nothing moves (a
 * reported no-op).  On a device, either request puts the sharded state (master,
 * m, v, Kahan) in host memory with AdamW on the host: the master shard is also the
 * parameter shard the stage 3 gathers read, so offload_param brings the optimizer
 * state with it, as FSDP's CPUOffload does.  Stage 0 shards nothing to move. */
static int resolve_offload(const zt_plan_request *r, zt_plan *p, zt_err *err)
{
    p->offload_requested = (r->offload_optimizer ? 1 : 0) | (r->offload_params ? 2 : 0);
    /* the delayed update overlaps the host's AdamW with the device's next step: it
     * needs both, the optimizer on the host and a device beside it */
    if (r->offload_delayed_update && !p->offload_requested)
        return zt_fail(err, ZT_EINPUT, "--offload_delayed_update (ztrain_offload_delayed_update) needs optimizer "
                       "offload to cpu (offload_optimizer_device: cpu, offload_param_device: cpu or "
                       "fsdp_offload_params: true): without it AdamW runs on the device and there is nothing to "
                       "delay");
    if (r->offload_delayed_update && !strcmp(p->device, "cpu"))
        return zt_fail(err, ZT_EINPUT, "--offload_delayed_update (ztrain_offload_delayed_update) needs a device "
                       "(--device cuda): on --device cpu offload moves nothing and AdamW has no device step to "
                       "overlap with");
    if (!p->offload_requested || !strcmp(p->device, "cpu"))
        return ZT_OK;
    if (p->stage == 0)
        return zt_fail(err, ZT_EINPUT, "offload to cpu on --device %s needs a sharded stage (ZeRO 1-3, FSDP "
                       "FULL_SHARD or SHARD_GRAD_OP): stage 0 has no shard to move", p->device);
    p->overlap.offload_optimizer = 1;
    p->overlap.offload_params = p->stage == 3 && (p->offload_requested & 2) ? 1 : 0;
    p->overlap.offload_delayed_update = r->offload_delayed_update ? 1 : 0;
    return ZT_OK;
}

/* The knobs that belong to one face, in one table: given under another face (or
 * plain data parallel), a knob is refused, naming it and how to choose its face.
 * Settings from flags and config files land in the request, so this is the only
 * place these rules live. */
typedef struct face_knob {
    const char *knobs;   /* as the user writes them */
    int plural;          /* "need" rather than "needs" */
    zt_face face;
    int (*given)(const zt_plan_request *r);
    const char *hint;    /* after the face, "" or "; what the other face uses" */
} face_knob;

static int prefetch_given(const zt_plan_request *r)
{
    return r->backward_prefetch || r->forward_prefetch != ZT_UNSET;
}
static int sharding_given(const zt_plan_request *r) { return r->sharding != ZT_SHARDING_UNSET; }
static int limit_given(const zt_plan_request *r) { return r->limit_all_gathers != ZT_UNSET; }
static int zero_stage_given(const zt_plan_request *r) { return r->zero_stage >= 0; }

static const face_knob face_knobs[] = {
    {"fsdp_backward_prefetch and fsdp_forward_prefetch", 1, ZT_FACE_FSDP, prefetch_given,
     "; DeepSpeed prefetches by stage3_prefetch_bucket_size"},
    {"fsdp_sharding_strategy", 0, ZT_FACE_FSDP, sharding_given, ""},
    {"zero_stage", 0, ZT_FACE_DEEPSPEED, zero_stage_given, ""},
    {"fsdp_limit_all_gathers", 0, ZT_FACE_FSDP, limit_given, ""},
};

static int check_face_knobs(const zt_plan_request *r, zt_err *err)
{
    for (size_t i = 0; i < sizeof face_knobs / sizeof face_knobs[0]; i++) {
        const face_knob *k = &face_knobs[i];
        if (r->face != k->face && k->given(r))
            return zt_fail(err, ZT_EINPUT, "%s %s %s%s", k->knobs, k->plural ? "need" : "needs",
                           k->face == ZT_FACE_FSDP ? "FSDP (--use_fsdp or distributed_type FSDP)"
                                                   : "DeepSpeed (--use_deepspeed or distributed_type DEEPSPEED)",
                           k->hint);
    }
    return ZT_OK;
}

/* The kernel mode: fast by default on a GPU, exact elsewhere; the CPU has only its
 * exact kernels, and the emulated device takes both (it runs the fast mode's host
 * logic, the asynchronous step, on the CPU's kernels). */
static int resolve_kernels(const char *asked, const char *dev, zt_plan *p, zt_err *err)
{
    const char *k = asked ? asked : !strcmp(dev, "cuda") ? "fast" : "exact";
    if (strcmp(k, "exact") && strcmp(k, "fast"))
        return zt_fail(err, ZT_EINPUT, "--kernels '%s': expected exact or fast", k);
    if (!strcmp(k, "fast") && !strcmp(dev, "cpu"))
        return zt_fail(err, ZT_EINPUT, "--kernels fast needs a device (--device cuda): the CPU has exact kernels "
                       "only");
    p->kernels = !strcmp(k, "fast") ? ZT_PLAN_KERNELS_FAST : ZT_PLAN_KERNELS_EXACT;
    return ZT_OK;
}

/* One part of the mode given by itself (--step, --activations): index into names, or
 * -1 when not given (the preset's); a name outside them is ZT_EINPUT naming the flag. */
static int mode_part(const char *asked, const char *flag, const char *const names[2], int *out, zt_err *err)
{
    *out = -1;
    if (!asked)
        return ZT_OK;
    for (int i = 0; i < 2; i++)
        if (!strcmp(asked, names[i]))
            return *out = i, ZT_OK;
    return zt_fail(err, ZT_EINPUT, "--%s '%s': expected %s or %s", flag, asked, names[0], names[1]);
}

/* The step and the activations: the kernels' preset (fast: the asynchronous step, but
 * the host's with an offloaded optimizer, whose AdamW runs there; bf16 activations
 * where compute is bf16), or as asked.  The asynchronous step needs a device (its
 * scalars live in device memory) and no offloaded optimizer; bf16 activations need
 * bf16 compute. */
static int resolve_parts(const zt_plan_request *r, zt_plan *p, zt_err *err)
{
    static const char *const steps[2] = {"sync", "async"}, *const acts[2] = {"fp32", "bf16"};
    const int fast = p->kernels == ZT_PLAN_KERNELS_FAST;
    int step, act, rc;
    if ((rc = mode_part(r->step, "step", steps, &step, err)) ||
        (rc = mode_part(r->activations, "activations", acts, &act, err)))
        return rc;
    if (step < 0)
        step = fast && !p->overlap.offload_optimizer;
    if (act < 0)
        act = fast && p->prec.compute == ZT_BF16;
    if (step && !strcmp(p->device, "cpu"))
        return zt_fail(err, ZT_EINPUT, "--step async needs a device (--device cuda): on the CPU every number is "
                       "on the host already");
    if (step && p->overlap.offload_optimizer)
        return zt_fail(err, ZT_EINPUT, "--step async: the offloaded optimizer's AdamW runs on the host, so its step "
                       "is synchronous; use --step sync or no optimizer offload");
    if (act && p->prec.compute != ZT_BF16)
        return zt_fail(err, ZT_EINPUT, "--activations bf16 needs bf16 compute (got %s)",
                       zt_dtype_name(p->prec.compute));
    p->step = step ? ZT_PLAN_STEP_ASYNC : ZT_PLAN_STEP_SYNC;
    p->activations = act ? ZT_PLAN_ACT_BF16 : ZT_PLAN_ACT_FP32;
    p->overlap.async_step = step;
    return ZT_OK;
}

/* Where it runs: a name here; whether this build has it is the trainer's check
 * (kernels/backend.h: zt_backend_open). */
static int resolve_device(const zt_plan_request *r, zt_plan *p, zt_err *err)
{
    const char *dev = r->device ? r->device : "cpu", *cb = r->comm_backend ? r->comm_backend : "auto";
    if (strcmp(dev, "cpu") && strcmp(dev, "cuda") && strcmp(dev, "emu"))
        return zt_fail(err, ZT_EINPUT, "--device '%s': expected cpu or cuda", dev);
    if (strcmp(cb, "auto") && strcmp(cb, "nccl") && strcmp(cb, "mpi"))
        return zt_fail(err, ZT_EINPUT, "--comm_backend '%s': expected auto, nccl or mpi", cb);
    /* emu: its stand-in for NCCL, collectives queued on the device (comm.h, ZT_COMM_EMU) */
    if (!strcmp(cb, "nccl") && !strcmp(dev, "cpu"))
        return zt_fail(err, ZT_EINPUT, "--comm_backend nccl needs --device cuda (NCCL moves GPU buffers; "
                       "--device %s uses MPI)", dev);
    snprintf(p->device, sizeof p->device, "%s", dev);
    /* the host's buffers go to MPI as they are: only a device has a choice */
    snprintf(p->comm, sizeof p->comm, "%s", !strcmp(dev, "cpu") ? "mpi" : cb);
    return resolve_kernels(r->kernels, dev, p, err);
}

/* The face's stage, strategy and wrapping: FSDP's sharding strategy names a stage
 * (default FULL_SHARD), DeepSpeed's zero_stage is one (default 2), plain data
 * parallel is stage 0. */
static int resolve_stage(const zt_plan_request *r, zt_plan *p, zt_err *err)
{
    if (r->face == ZT_FACE_FSDP) {
        zt_sharding s = r->sharding == ZT_SHARDING_UNSET ? ZT_SHARDING_FULL_SHARD : r->sharding;
        p->stage = s == ZT_SHARDING_NO_SHARD ? 0
                 : s == ZT_SHARDING_SHARD_GRAD_OP || s == ZT_SHARDING_HYBRID_SHARD_ZERO2 ? 2
                                                                                         : 3;
        p->hybrid = s == ZT_SHARDING_HYBRID_SHARD || s == ZT_SHARDING_HYBRID_SHARD_ZERO2;
        snprintf(p->strategy, sizeof p->strategy, "%s (ZeRO-%d%s)", zt_sharding_name(s), p->stage,
                 p->hybrid ? " in node groups" : "");
        p->wrap = r->wrap_set ? r->wrap : ZT_WRAP_TRANSFORMER;
    } else if (r->face == ZT_FACE_DEEPSPEED) {
        p->stage = r->zero_stage < 0 ? 2 : r->zero_stage;
        if (p->stage > 3)
            return zt_fail(err, ZT_EINPUT, "zero_stage: expected 0, 1, 2 or 3, got %d", p->stage);
        snprintf(p->strategy, sizeof p->strategy, "ZeRO-%d", p->stage);
        /* DeepSpeed flattens the whole model for stages 1-2 and fetches per layer in 3 */
        p->wrap = r->wrap_set ? r->wrap : p->stage == 3 ? ZT_WRAP_TRANSFORMER : ZT_WRAP_NONE;
    } else {
        p->stage = 0;
        snprintf(p->strategy, sizeof p->strategy, "data parallel (ZeRO-0)");
        /* plain data parallel has no flattening of its own; a unit per layer keeps
         * the fp32 gradient staging at one layer (plus the root) instead of the
         * whole model, as DDP's gradient buckets do */
        p->wrap = r->wrap_set ? r->wrap : ZT_WRAP_TRANSFORMER;
    }
    return ZT_OK;
}

/* The machines and the shard group: the world, or with hybrid sharding one
 * machine's ranks (or ranks_per_node), which must divide the world; stage 0 keeps
 * one whole copy per rank (group 1). */
static int resolve_groups(const zt_plan_request *r, int world, zt_plan *p, zt_err *err)
{
    int group = world;
    p->machines = r->machines > 0 ? r->machines : 1;
    p->machine_ranks = r->machines > 0 ? r->machine_ranks : world;
    if (p->hybrid && r->ranks_per_node <= 0 && !p->machine_ranks)
        return zt_fail(err, ZT_EINPUT,
                       "hybrid sharding: the %d ranks sit unevenly on %d machines (or a machine's ranks are "
                       "not consecutive), so a machine cannot be the shard group; start the same number of "
                       "ranks on each machine, mapped by slot (mpirun's default), or give --ranks_per_node",
                       world, p->machines);
    if (p->hybrid) {
        /* FSDP's HYBRID_SHARD shards inside a node and replicates across nodes */
        group = r->ranks_per_node > 0 ? r->ranks_per_node : p->machine_ranks;
        if (world % group != 0)
            return zt_fail(err, ZT_EINPUT,
                           "hybrid sharding: ranks_per_node %d does not divide the %d processes", group, world);
    } else if (r->ranks_per_node > 0) {
        return zt_fail(err, ZT_EINPUT, "ranks_per_node applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only");
    }
    p->group_size = p->stage == 0 ? 1 : group;
    return ZT_OK;
}

/* Overlap of collectives with compute, by the face's knobs and defaults, then
 * turned off below the stages it applies to (prefetch: 3; reduce: 2-3). */
static int resolve_overlap(const zt_plan_request *r, zt_plan *p, zt_err *err)
{
    zt_overlap *ov = &p->overlap;
    if (r->face == ZT_FACE_FSDP) {
        ov->backward_prefetch = ZT_BACKWARD_PREFETCH_PRE;
        if (r->backward_prefetch) {
            zt_backward_prefetch k;
            for (k = ZT_BACKWARD_PREFETCH_NONE; k <= ZT_BACKWARD_PREFETCH_POST; k++)
                if (!strcasecmp(r->backward_prefetch, zt_backward_prefetch_name(k)))
                    break;
            if (k > ZT_BACKWARD_PREFETCH_POST)
                return zt_fail(err, ZT_EINPUT, "fsdp_backward_prefetch: expected BACKWARD_PRE, BACKWARD_POST or "
                               "NO_PREFETCH, got '%s'", r->backward_prefetch);
            ov->backward_prefetch = k;
        }
        ov->forward_prefetch = r->forward_prefetch == ZT_YES;
        ov->overlap_reduce = 1;
        /* limit_all_gathers: at most two all-gathers in flight, the unit's and the next */
        ov->prefetch_depth = r->limit_all_gathers == ZT_NO ? ZT_PREFETCH_MAX : 1;
    } else if (r->face == ZT_FACE_DEEPSPEED) {
        int prefetch = r->prefetch_bucket != 0;
        ov->backward_prefetch = prefetch ? ZT_BACKWARD_PREFETCH_PRE : ZT_BACKWARD_PREFETCH_NONE;
        ov->forward_prefetch = prefetch;
        ov->overlap_reduce = r->overlap_comm == ZT_UNSET ? p->stage == 3 : r->overlap_comm == ZT_YES;
        /* a bucket lets several units be gathered ahead; without one (no JSON), one */
        ov->prefetch_bucket = r->prefetch_bucket > 0 ? r->prefetch_bucket : 0;
        ov->prefetch_depth = r->prefetch_bucket > 0 ? ZT_PREFETCH_MAX : 1;
        ov->max_live = r->max_live > 0 ? r->max_live : 0;
        ov->persistence = r->persistence > 0 ? r->persistence : 0;
        ov->reduce_bucket = r->reduce_bucket > 0 ? r->reduce_bucket : 0;
        ov->allgather_bucket = r->allgather_bucket > 0 ? r->allgather_bucket : 0;
    } else { /* DDP all-reduces its gradient buckets during the backward */
        ov->overlap_reduce = 1;
    }
    if (p->stage < 3) {
        ov->forward_prefetch = 0;
        ov->backward_prefetch = ZT_BACKWARD_PREFETCH_NONE;
        ov->prefetch_depth = 0;
        ov->prefetch_bucket = ov->max_live = ov->persistence = 0;
    }
    if (p->stage == 0 || p->stage == 3)
        ov->allgather_bucket = 0; /* stage 0 gathers nothing; stage 3 gathers per unit (prefetch) */
    if (p->stage == 0)
        ov->reduce_bucket = 0; /* DeepSpeed's stage 0 all-reduces whole (allreduce_bucket_size, not read) */
    if (p->stage == 1) /* ZeRO-1 reduces at the step */
        ov->overlap_reduce = 0;
    return ZT_OK;
}

/* Whether the step is captured as a graph (docs/gpu.md, "The captured step"): it
 * must be the asynchronous step (fast kernels; the exact one waits for every number)
 * whose collectives, on several ranks, the device queues (NCCL, or the emulated
 * device's stand-in: a capture holds them; the staged path's copies wait for the
 * device and its MPI runs on the host, so it cannot), with nothing the host changes
 * between steps in an argument: offload's AdamW runs on the host.  (fp16's loss
 * scale is no such argument: the device keeps it and the backward reads it there,
 * step_scalars.h.)  comm auto on a GPU picks NCCL or the staged path only when the
 * ranks have their devices: the trainer refuses the staged one then.  auto: on
 * where it can be, else off with the reason; on where it cannot be is refused. */
static const char *graphs_blocked(const zt_plan *p)
{
    if (p->step != ZT_PLAN_STEP_ASYNC)
        return "synchronous step";
    if (p->world > 1 && (!strcmp(p->comm, "mpi") || (!strcmp(p->device, "emu") && strcmp(p->comm, "nccl"))))
        return "staged MPI collectives";
    if (p->overlap.offload_optimizer || p->overlap.offload_params)
        return "offload";
    return NULL;
}

static int resolve_graphs(const char *asked, zt_plan *p, zt_err *err)
{
    const char *g = asked ? asked : "auto";
    if (strcmp(g, "auto") && strcmp(g, "on") && strcmp(g, "off"))
        return zt_fail(err, ZT_EINPUT, "--cuda_graphs '%s': expected auto, on or off", g);
    const char *why = graphs_blocked(p);
    if (!strcmp(g, "on") && why)
        return zt_fail(err, ZT_EINPUT, "--cuda_graphs on: the step cannot be captured here (%s); it needs "
                       "--kernels fast (on several ranks, NCCL's collectives), without offload", why);
    p->graphs = strcmp(g, "off") && !why ? ZT_PLAN_GRAPHS_ON : ZT_PLAN_GRAPHS_OFF;
    /* why not, where auto found the asynchronous step cannot be captured (a synchronous
     * step is reason enough, said by its own part) */
    snprintf(p->graphs_why, sizeof p->graphs_why, "%s",
             strcmp(g, "off") && why && p->step == ZT_PLAN_STEP_ASYNC ? why : "");
    p->graphs_forced = !strcmp(g, "on");
    return ZT_OK;
}

int zt_plan_resolve(const zt_plan_request *r, int world, zt_plan *p, zt_err *err)
{
    memset(p, 0, sizeof *p);
    p->face = r->face;
    p->world = world;
    p->min_num_params = r->min_num_params;
    int rc;
    if ((rc = check_face_knobs(r, err)) || (rc = resolve_device(r, p, err)))
        return rc;
    zt_precision_request pr = {
        .deepspeed = r->face == ZT_FACE_DEEPSPEED, .torch_dtype = r->torch_dtype,
        .config_dtype = r->config_dtype, .mixed_precision = r->mixed_precision,
        .reduce_dtype = r->reduce_dtype, .master_compensation = r->master_compensation,
        .ls_initial_scale_power = r->ls_initial_scale_power, .ls_window = r->ls_window,
        .ls_hysteresis = r->ls_hysteresis, .ls_min_scale = r->ls_min_scale,
    };
    if ((rc = zt_precision_resolve(&pr, &p->prec, &p->mixed, &p->ls, err)) || (rc = resolve_stage(r, p, err)) ||
        (rc = resolve_groups(r, world, p, err)) || (rc = resolve_overlap(r, p, err)) ||
        (rc = resolve_offload(r, p, err)) || (rc = resolve_parts(r, p, err)) ||
        (rc = resolve_graphs(r->cuda_graphs, p, err)))
        return rc;
    zt_precision_mode(&p->prec, r->face == ZT_FACE_FSDP, r->face == ZT_FACE_DEEPSPEED, p->mode, sizeof p->mode);
    return ZT_OK;
}

zt_plan zt_plan_single(zt_precision prec, zt_wrap_policy wrap)
{
    zt_plan p;
    memset(&p, 0, sizeof p);
    p.face = ZT_FACE_DDP;
    p.world = p.group_size = 1;
    p.wrap = wrap;
    p.min_num_params = 1;
    p.prec = prec;
    p.mixed = prec.compute != prec.master;
    snprintf(p.mode, sizeof p.mode, "%s", prec.master == ZT_F32 && prec.compute == ZT_F32 ? "fp32" : "custom");
    snprintf(p.device, sizeof p.device, "cpu");
    snprintf(p.comm, sizeof p.comm, "mpi");
    p.kernels = ZT_PLAN_KERNELS_EXACT;
    p.step = ZT_PLAN_STEP_SYNC;
    p.activations = ZT_PLAN_ACT_FP32;
    p.graphs = ZT_PLAN_GRAPHS_OFF;
    snprintf(p.strategy, sizeof p.strategy, "data parallel (ZeRO-0)");
    return p;
}

void zt_plan_print(FILE *f, const zt_plan *p, const char *products)
{
    char where[64] = "";
    if (p->world > 1 && p->machine_ranks > 0)
        snprintf(where, sizeof where, " (%d machine%s x %d)", p->machines, p->machines == 1 ? "" : "s",
                 p->machine_ranks);
    else if (p->world > 1)
        snprintf(where, sizeof where, " (on %d machines, unevenly)", p->machines);
    /* the mode's parts, each by name; graphs off with why where auto found it cannot */
    char why[48] = "";
    if (p->graphs == ZT_PLAN_GRAPHS_OFF && p->graphs_why[0])
        snprintf(why, sizeof why, " (%s)", p->graphs_why);
    fprintf(f, "plan: %s, %s, %d rank%s%s, shard group %d, %s, device %s, comm %s, kernels %s, step %s, "
            "activations %s, graphs %s%s%s%s\n",
            zt_face_name(p->face), p->strategy, p->world, p->world == 1 ? "" : "s", where, p->group_size,
            zt_wrap_policy_name(p->wrap), p->device[0] ? p->device : "cpu", p->comm[0] ? p->comm : "mpi",
            p->kernels == ZT_PLAN_KERNELS_FAST ? "fast" : "exact", p->step == ZT_PLAN_STEP_ASYNC ? "async" : "sync",
            p->activations == ZT_PLAN_ACT_BF16 ? "bf16" : "fp32", p->graphs == ZT_PLAN_GRAPHS_ON ? "on" : "off", why,
            products ? ", " : "", products ? products : "");
    fprintf(f, "| mode | load | mixed precision | flat params / master | compute | reduce | optimizer |\n");
    fprintf(f, "| %s | %s | %s | %s | %s | %s | %s |\n", p->mode, zt_dtype_name(p->prec.load),
            p->mixed ? zt_dtype_name(p->prec.compute) : "no",
            zt_dtype_name(p->prec.master), zt_dtype_name(p->prec.compute), zt_dtype_name(p->prec.reduce),
            zt_dtype_name(p->prec.master));
    if (p->stage == 0 && p->world > 1)
        fprintf(f, "overlap: all-reduce %s\n", p->overlap.overlap_reduce
                ? "of each unit during the last micro-batch's backward" : "at the step");
    if (p->stage >= 2)
        fprintf(f, "overlap: reduce-scatter %s; prefetch forward %s, backward %s\n",
                p->overlap.overlap_reduce ? "during the next unit's backward" : "inside each unit's backward",
                p->stage < 3 ? "-" : p->overlap.forward_prefetch ? "on" : "off",
                p->stage < 3 ? "- (parameters stay gathered)" : zt_backward_prefetch_name(p->overlap.backward_prefetch));
    zt_plan_print_offload(f, p);
    const zt_overlap *o = &p->overlap;
    if (o->reduce_bucket || o->allgather_bucket || o->prefetch_bucket || o->max_live || o->persistence ||
        o->prefetch_depth > 1)
        fprintf(f, "limits: reduce bucket %ld, all-gather bucket %ld, prefetch %d unit%s ahead within %ld, "
                "max live %ld, persistent below %ld parameters (0: none)\n", o->reduce_bucket, o->allgather_bucket,
                o->prefetch_depth, o->prefetch_depth == 1 ? "" : "s", o->prefetch_bucket, o->max_live,
                o->persistence);
}

void zt_plan_print_offload(FILE *f, const zt_plan *p)
{
    if (!p->offload_requested)
        return;
    if (!p->overlap.offload_optimizer) {
        fprintf(f, "offload: to cpu requested; on this CPU host parameters and optimizer state already live in "
                "host memory, so nothing moves\n");
        return;
    }
    fprintf(f, "offload: master shard, m, v%s in pinned host memory, AdamW on the host's cores; gradient "
            "shard reduced on the %s, copied to the host %s; %s; compute-dtype shards in pinned host memory, "
            "uploaded on the copy queue, the gathers waiting for them on the device\n",
            p->prec.compensated && p->prec.master != ZT_F32 ? ", Kahan" : "", p->device,
            p->stage >= 2 ? "as each unit's reduction completes in the last backward" : "at the step",
            p->stage == 3 ? "parameter shard uploaded before each all-gather (prefetched with it)"
                          : "each unit's parameters uploaded and gathered as soon as the host has updated it");
    if (p->overlap.offload_delayed_update)
        fprintf(f, "offload: delayed parameter update: the host's AdamW of step k runs beside step k+1's forward "
                "and backward, which use the parameters of step k-1 (steps 1 and 2 the initial ones); a "
                "checkpoint holds every update applied\n");
}
