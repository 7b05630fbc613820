/* train_open.c — opening a training run (zt_train_setup: the device, the model, the
 * data, the ranks' agreement, a resume) and `ztrain eval` (trainer_impl.h). */
#include "trainer_impl.h"

#include "../io/peft_adapter.h"
#include "../kernels/attention_choice.h"
#include "../kernels/backend_cuda.h"
#include "../kernels/tune.h"

double zt_train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zt_train_run_free(run_state *r)
{
    zt_free(ZT_MEM_OTHER, r->inputs, r->io_bytes);
    zt_free(ZT_MEM_OTHER, r->targets, r->io_bytes);
    if (r->have_batcher)
        zt_batcher_free(&r->batcher);
    if (r->have_model)
        zt_model_free(&r->model);
    zt_engine_destroy(r->eng);
    if (r->have_frozen)
        zt_frozen_free(&r->frozen);
    if (r->have_lay)
        zt_layout_free(&r->lay);
    zt_tokens_free(&r->tokens);
}

static void frozen_sink(void *f, const zt_param *p, const void *src, zt_dtype src_dt)
{
    zt_frozen_set_param(f, p, src, src_dt);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* An adapter's values into the engine, and into the digest the ranks compare. */
static int adapter_sink(void *ctx, const zt_param *p, const float *vals, zt_err *err)
{
    run_state *r = ctx;
    (void)err;
    zt_engine_set_param(r->eng, p, vals, ZT_F32);
    r->adapter_digest = fnv(r->adapter_digest ? r->adapter_digest : FNV0, vals, p->numel * sizeof *vals);
    return ZT_OK;
}

/* LoRA: the base weights into the engine through the layout without adapters (the same
 * units and offsets: the adapters' units follow the base's), then every adapter as PEFT
 * initialises it (lora.h), from the run's seed, or from the adapter directory. */
static int load_lora(run_state *r, const char *model_dir, const char *adapter, const zt_plan *plan, zt_comm *comm,
                     uint64_t seed, zt_err *err)
{
    zt_layout plain;
    int rc = zt_layout_build(&plain, &r->cfg, plan->wrap, (size_t)plan->min_num_params, comm->shard_size, err);
    if (rc)
        return rc;
    rc = zt_hf_load_params(model_dir, &plain, r->eng, err);
    zt_layout_free(&plain);
    if (rc || adapter)
        return rc ? rc : zt_peft_adapter_read(adapter, &r->lay, adapter_sink, r, err);
    for (int i = 0; i < r->lay.nparams; i++) {
        const zt_param *p = &r->lay.params[i];
        if (!p->lora)
            continue;
        float *buf = zt_alloc(ZT_MEM_OTHER, p->numel * sizeof *buf);
        if (!buf)
            return zt_fail(err, ZT_EFAIL, "out of memory initialising %s", p->name);
        zt_lora_init_param(p, seed, buf);
        zt_engine_set_param(r->eng, p, buf, ZT_F32);
        zt_free(ZT_MEM_OTHER, buf, p->numel * sizeof *buf);
    }
    return rc;
}

/* Load config, data and weights; build layout, parameter owner, model and
 * batcher.  The owner is the engine for training, or with `frozen` the weights
 * alone in the plan's compute dtype (evaluation: no gradients, no optimizer).
 * lora (training only): the layout's adapter units, the base frozen. */
static int run_open(run_state *r, const char *model_dir, const char *data_path, const char *data_shown,
                    const char *mask_path, int T, int B,
                    const zt_plan *plan, const zt_backend *be, zt_comm *comm, int shuffle, uint64_t seed,
                    int checkpointing, int frozen, const zt_lora *lora, const char *adapter, zt_err *err)
{
    memset(r, 0, sizeof *r);
    int rc;
    if ((rc = zt_hf_read_config_dir(model_dir, &r->cfg, err)))
        return rc;
    if (T > r->cfg.max_position_embeddings)
        return zt_fail(err, ZT_EINPUT,
                       "--block_size %d exceeds the model's max_position_embeddings %d (%s/config.json)",
                       T, r->cfg.max_position_embeddings, model_dir);
    if ((rc = zt_tokens_load(data_path, &r->tokens, err)) ||
        (mask_path && (rc = zt_tokens_load_mask(mask_path, &r->tokens, err))))
        return rc;
    if (r->tokens.max_id >= r->cfg.vocab_size)
        return zt_fail(err, ZT_EINPUT, "%s: token id %d is outside the model's vocabulary (vocab_size %d)",
                       data_path, r->tokens.max_id, r->cfg.vocab_size);
    if ((rc = zt_layout_build(&r->lay, &r->cfg, plan->wrap, (size_t)plan->min_num_params,
                              comm->shard_size, err)))
        return rc;
    r->have_lay = 1;
    if (lora && (rc = zt_lora_layout(&r->lay, lora, err)))
        return rc;
    zt_param_owner owner;
    if (frozen) {
        if ((rc = zt_frozen_init(&r->frozen, &r->lay, plan->prec.compute, be, err)))
            return rc;
        r->have_frozen = 1;
        if ((rc = zt_ckpt_check_model_dir(model_dir, err)) ||
            (rc = zt_hf_load_params_to(model_dir, &r->lay, frozen_sink, &r->frozen, err)))
            return rc;
        owner = zt_frozen_owner(&r->frozen);
    } else {
        if ((rc = zt_engine_create(&r->eng, be, &r->lay, plan->prec, plan->stage, &plan->overlap, comm, err)))
            return rc;
        if ((rc = lora ? load_lora(r, model_dir, adapter, plan, comm, seed, err)
                       : zt_hf_load_params(model_dir, &r->lay, r->eng, err)))
            return rc;
        owner = zt_engine_param_owner(r->eng);
    }
    owner.act16 = plan->activations == ZT_PLAN_ACT_BF16;
    if ((rc = zt_model_init(&r->model, &r->cfg, &r->lay, &owner, B, T, checkpointing, err)))
        return rc;
    r->have_model = 1;
    if (lora && (rc = zt_model_set_lora(&r->model, lora, err)))
        return rc;
    if (!frozen) { /* fast mode: the training loss stays on the device until the step reads it
                    * back, and its gradient scale is formed there */
        r->model.loss_sink = zt_engine_loss_sink(r->eng);
        r->model.grad_scale_src = zt_engine_grad_scale_src(r->eng);
    }
    if ((rc = zt_batcher_init(&r->batcher, &r->tokens, T, shuffle, seed, data_shown ? data_shown : data_path, err)))
        return rc;
    r->have_batcher = 1;
    r->io_bytes = (size_t)B * T * sizeof(int);
    r->inputs = zt_alloc(ZT_MEM_OTHER, r->io_bytes);
    r->targets = zt_alloc(ZT_MEM_OTHER, r->io_bytes);
    if (!r->inputs || !r->targets)
        return zt_fail(err, ZT_EFAIL, "out of memory for batch buffers");
    return ZT_OK;
}

static void print_memory(FILE *f, const zt_engine *eng, const zt_model *m)
{
    zt_engine_bytes b = zt_engine_state_bytes(eng);
    const double MiB = 1048576.0;
    fprintf(f, "memory per rank: master params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, "
               "gathered params %.2f MiB, comm buffers %.2f MiB, activations %.2f MiB\n",
            (double)b.master / MiB, (double)b.grads / MiB, (double)b.optim / MiB,
            (double)b.gathered / MiB, (double)b.comm / MiB, (double)m->act_bytes / MiB);
    if (b.host)
        fprintf(f, "memory per rank: of which offloaded to host memory %.2f MiB (master, optimizer state, "
                "staging); on the device %.2f MiB\n", (double)b.host / MiB,
                (double)(b.master + b.grads + b.optim + b.gathered + b.comm - b.host + m->act_bytes) / MiB);
    fprintf(f, "activations: %.0f bytes per token\n", (double)m->act_bytes / (double)m->N);
}

/* ---- all ranks agree before the first collective that moves data ---------- */

enum { D_PLAN, D_PRECISION, D_MODEL, D_BATCH, D_OPTIM, D_SCHEDULE, D_DATA, D_EVAL, D_NFIELDS };
static const char *digest_field[D_NFIELDS] = {
    "plan (face, stage, groups, wrap, overlap)", "precision (dtypes)", "model config (and LoRA's adapters)", "batch (B, A, T)",
    "optimizer hyper-parameters", "schedule and steps", "data (token stream)",
    "evaluation (eval data, eval_steps, per_device_eval_batch_size)"};

#define MIX(h, x) ((h) = fnv((h), &(x), sizeof(x)))

static void make_digest(const zt_train_args *a, const run_state *r, const zt_evaluator *ev, uint64_t d[D_NFIELDS])
{
    for (int i = 0; i < D_NFIELDS; i++)
        d[i] = FNV0;
    const zt_plan *p = &a->plan;
    MIX(d[D_PLAN], p->face); MIX(d[D_PLAN], p->stage); MIX(d[D_PLAN], p->hybrid);
    MIX(d[D_PLAN], p->group_size); MIX(d[D_PLAN], p->wrap); MIX(d[D_PLAN], p->min_num_params);
    MIX(d[D_PLAN], a->checkpointing);
    d[D_PLAN] = fnv(d[D_PLAN], &p->overlap, sizeof p->overlap); /* same collectives in the same order */
    d[D_PLAN] = fnv(fnv(d[D_PLAN], p->device, sizeof p->device), p->comm, sizeof p->comm); /* and on one path */
    d[D_PRECISION] = fnv(d[D_PRECISION], &p->prec, sizeof p->prec);
    d[D_MODEL] = zt_llama_config_digest(&r->cfg);
    int lora = a->lora != NULL;
    MIX(d[D_MODEL], lora);
    if (a->lora) { /* the adapters' units are gathered and reduced like the base's */
        MIX(d[D_MODEL], a->lora->r);
        MIX(d[D_MODEL], a->lora->alpha);
        MIX(d[D_MODEL], a->lora->rslora);
        MIX(d[D_MODEL], a->lora->targets);
        MIX(d[D_MODEL], r->adapter_digest); /* --adapter: the same adapters read */
    }
    MIX(d[D_BATCH], a->batch_size); MIX(d[D_BATCH], a->grad_accum); MIX(d[D_BATCH], a->block_size);
    d[D_OPTIM] = fnv(d[D_OPTIM], &a->adam, sizeof a->adam);
    MIX(d[D_OPTIM], a->max_grad_norm);
    MIX(d[D_SCHEDULE], a->schedule); MIX(d[D_SCHEDULE], a->warmup_steps); MIX(d[D_SCHEDULE], a->max_steps);
    MIX(d[D_SCHEDULE], a->shuffle); MIX(d[D_SCHEDULE], a->seed);
    MIX(d[D_DATA], r->tokens.n);
    d[D_DATA] = fnv(d[D_DATA], r->tokens.ids, r->tokens.n * sizeof *r->tokens.ids);
    if (r->tokens.loss_mask) /* the same targets count on every rank */
        d[D_DATA] = fnv(d[D_DATA], r->tokens.loss_mask, r->tokens.n);
    /* the same evaluations, or a rank would wait in another's ZeRO-3 all-gathers */
    MIX(d[D_EVAL], a->eval_steps);
    if (ev) {
        MIX(d[D_EVAL], ev->B); MIX(d[D_EVAL], ev->tokens.n);
        d[D_EVAL] = fnv(d[D_EVAL], ev->tokens.ids, ev->tokens.n * sizeof *ev->tokens.ids);
    }
}

static int check_agreement(const zt_train_args *a, const run_state *r, const zt_evaluator *ev, zt_comm *comm,
                           zt_err *err)
{
    if (comm->world == 1)
        return ZT_OK;
    uint64_t mine[D_NFIELDS], *all = zt_alloc(ZT_MEM_OTHER, (size_t)comm->world * sizeof mine);
    if (!all)
        return zt_fail(err, ZT_EFAIL, "out of memory for the agreement check");
    make_digest(a, r, ev, mine);
    zt_comm_allgather_bytes(comm, all, mine, sizeof mine);
    int rc = ZT_OK;
    for (int q = 0; q < comm->world && rc == ZT_OK; q++)
        for (int f = 0; f < D_NFIELDS; f++)
            if (all[q * D_NFIELDS + f] != all[f]) {
                /* every rank sees the mismatch and stops; rank 0 says which */
                if (comm->rank == 0)
                    rc = zt_fail(err, ZT_EINPUT, "rank %d and rank 0 resolved a different %s; every "
                                 "rank must run the same plan, model, settings and data", q, digest_field[f]);
                else
                    rc = zt_fail(err, ZT_EINPUT, "%s", "");
                break;
            }
    zt_free(ZT_MEM_OTHER, all, (size_t)comm->world * sizeof mine);
    return rc;
}

/* What a resume must find unchanged (checkpoint.c compares it field by field). */
static zt_ckpt_hparams run_hparams(const zt_train_args *a, const run_state *r, int W)
{
    zt_ckpt_hparams h = {
        .lr = a->adam.lr, .weight_decay = a->adam.weight_decay, .beta1 = a->adam.beta1,
        .beta2 = a->adam.beta2, .eps = a->adam.eps, .max_grad_norm = a->max_grad_norm,
        .schedule = a->schedule, .warmup_steps = a->warmup_steps, .max_steps = a->max_steps,
        .global_batch = (long)a->batch_size * a->grad_accum * W, .per_device_batch = a->batch_size,
        .grad_accum = a->grad_accum, .block_size = a->block_size, .shuffle = a->shuffle, .seed = a->seed,
        .data_tokens = r->tokens.n, .compute = a->plan.prec.compute};
    zt_lr_kwargs_format(a->schedule, &a->schedule_kwargs, h.schedule_kwargs, sizeof h.schedule_kwargs);
    h.data_digest = fnv(FNV0, r->tokens.ids, r->tokens.n * sizeof *r->tokens.ids);
    if (r->tokens.loss_mask) /* another mask is other data to resume on */
        h.data_digest = fnv(h.data_digest, r->tokens.loss_mask, r->tokens.n);
    return h;
}

/* The run's device: the backend table the plan names, bound to this rank's
 * device (one per rank, by its place on its machine), and the path of the
 * collectives for it: the host's buffers go to MPI as they are; a device's go
 * through NCCL when every rank has a GPU of its own (NCCL refuses two ranks on
 * one), else through host staging buffers and MPI.  Every rank takes the same
 * path (a max over the world), and an error on one is an error on all. */
static int open_device(const zt_plan *plan, zt_comm *comm, const zt_backend **out, char *desc, size_t cap,
                       zt_err *err)
{
    const char *name = plan->device[0] ? plan->device : "cpu";
    int rc = ZT_OK, devices = 0;
    const zt_backend *be = zt_backend_open(name, comm->topo.machine_rank, &devices, desc, cap, err);
    if (!be)
        rc = zt_wrap(err, "--device %s: ", name);
    else if (!(be = zt_backend_in_mode(be, plan->kernels == ZT_PLAN_KERNELS_FAST ? ZT_KERNELS_FAST : ZT_KERNELS_EXACT, err)))
        rc = ZT_EINPUT;
    else if (zt_prof_enabled()) /* --profile: every entry timed at the dispatch */
        be = zt_backend_profiled(be);
    int own_attention; /* a bad ZT_ATTENTION (kernels/attention_choice.h) stops a device's run here */
    if (!rc && strcmp(name, "cpu") != 0)
        rc = zt_attention_setting(&own_attention, err);
    /* the emulated device's ranks share it, its stand-in for NCCL included (comm.h) */
    int emu_nccl = be && !strcmp(be->name, "emu") && !strcmp(plan->comm, "nccl");
    int shared = be && !be->host_visible && comm->topo.machine_size > devices && !emu_nccl;
    if (rc == ZT_OK && shared && !strcmp(plan->comm, "nccl"))
        rc = zt_fail(err, ZT_EINPUT, "--comm_backend nccl: %d ranks on this machine share %d GPU%s, and NCCL refuses "
                     "two ranks on one GPU; use --comm_backend mpi (staged through host memory) or one rank per GPU",
                     comm->topo.machine_size, devices, devices == 1 ? "" : "s");
    if ((rc = zt_comm_agree(comm, rc, err)))
        return rc;
    *out = be;
    if (be->host_visible)
        return ZT_OK;
    int staged = strcmp(be->name, "cuda") != 0 || !strcmp(plan->comm, "mpi") || shared;
    staged = zt_comm_max_int(comm, staged);
    zt_comm_device dev = zt_engine_comm_device(be);
    zt_comm_path path = emu_nccl ? ZT_COMM_EMU : staged ? ZT_COMM_STAGED : ZT_COMM_NCCL;
    return zt_comm_agree(comm, zt_comm_set_device(comm, path, &dev, err), err);
}

/* The saved scaler state, under this plan's settings. */
static void restore_scaler(zt_loss_scaler *s, const zt_loss_scaler *saved)
{
    s->scale = saved->scale;
    s->cur_hysteresis = saved->cur_hysteresis;
    s->iter = saved->iter;
    s->last_overflow_iter = saved->last_overflow_iter;
    s->skipped = saved->skipped;
}

/* Fast mode's attention over bf16 activations (the _act16 entries) on a device: cuDNN's
 * fused attention or the own kernels, and why (kernels/attention_choice.h), after the
 * products on the plan line ("; attention cudnn"); nothing where the model does not call
 * those entries (exact kernels, fp32 activations, the CPU). */
static void attention_words(const trainer *t, char *out, size_t cap)
{
    const zt_train_args *a = t->a;
    const zt_llama_config *c = &t->r.cfg;
    if (!cap || a->plan.kernels != ZT_PLAN_KERNELS_FAST || a->plan.activations != ZT_PLAN_ACT_BF16)
        return;
    char words[256], why[160];
    const int nkv = c->num_key_value_heads, window = zt_llama_attention_window(c);
    if (!strcmp(a->plan.device, "cuda")) {
        zt_cuda_attention_plan(a->batch_size, a->block_size, c->num_attention_heads, nkv, c->head_dim, window, words,
                               sizeof words);
    } else { /* the emulated device runs the CPU's kernels: no cuDNN there */
        zt_attention_query q = {.device = a->plan.device, .hd = c->head_dim, .window = window,
                                .nh = c->num_attention_heads, .nkv = nkv};
        zt_attention_setting(&q.forced_own, &(zt_err){0});
        zt_attention_describe(zt_attention_choose(&q, why, sizeof why), why, words, sizeof words);
    }
    snprintf(out, cap, "; %s", words);
}

static void print_run(const trainer *t)
{
    const run_state *r = &t->r;
    const zt_train_args *a = t->a;
    printf("model: %zu parameters, %d layer%s, hidden %d, vocab %d; %d unit%s\n", r->lay.numel,
           r->cfg.num_hidden_layers, r->cfg.num_hidden_layers == 1 ? "" : "s", r->cfg.hidden_size, r->cfg.vocab_size,
           r->lay.nunits, r->lay.nunits == 1 ? "" : "s");
    /* bf16 on the CPU's kernels (cpu, and emu which runs them): which of the paths
     * of matmul.h the products take, native or the AVX2 kernel */
    char products[320];
    int cpu_kernels = !strcmp(a->plan.device, "cpu") || !strcmp(a->plan.device, "emu") || !a->plan.device[0];
    snprintf(products, sizeof products, "bf16 products: %s", zt_matmul_bf16_path_name());
    /* on a GPU: whether cuBLASLt's candidates are timed (kernels/tune.h); a bad
     * ZT_MATMUL_TUNE stopped the backend's set-up before this */
    int tuned = 1, cuda = !strcmp(a->plan.device, "cuda");
    zt_err tune_err;
    if (cuda)
        snprintf(products, sizeof products, "products: cuBLASLt, %s",
                 zt_tune_setting(&tuned, &tune_err) == ZT_OK && !tuned ? "the heuristic's first (ZT_MATMUL_TUNE=0)"
                                                                       : "timed once per shape");
    attention_words(t, products + strlen(products), sizeof products - strlen(products));
    zt_plan_print(stdout, &a->plan, cuda || (cpu_kernels && a->plan.prec.compute == ZT_BF16) ? products : NULL);
    printf("device: rank 0 on %s; collectives: %s\n", t->device, zt_comm_path_name(t->comm->path));
    printf("data: %zu tokens, %zu windows of %d; global batch %d x %d x %d = %.0f tokens/step\n",
           r->tokens.n, r->batcher.nwin, a->block_size, a->batch_size, a->grad_accum, t->W,
           t->tokens_per_step);
    print_memory(stdout, r->eng, &r->model);
    const zt_peak *pk = &t->peak;
    if (pk->source != ZT_PEAK_GIVEN && pk->threads == 0 && pk->gflops > 0)
        printf("mfu peak: %.4g GFLOP/s (%s products on %s; %s)\n", pk->gflops, zt_dtype_name(pk->dtype), pk->cpu,
               pk->source == ZT_PEAK_CACHED ? "raised by an earlier run, cached" : "measured on the device");
    else if (pk->source != ZT_PEAK_GIVEN && pk->gflops <= 0)
        printf("mfu peak: none (not measured; MFU is not reported)\n");
    else if (pk->source == ZT_PEAK_GIVEN)
        printf("mfu peak: %.4g GFLOP/s (--peak_gflops)\n", pk->gflops);
    else if (pk->source == ZT_PEAK_CACHED)
        printf("mfu peak: %.4g GFLOP/s (%s products, %d thread%s; cached in %s)\n", pk->gflops,
               zt_dtype_name(pk->dtype), pk->threads, pk->threads == 1 ? "" : "s", pk->cache_path);
    else
        printf("mfu peak: %.4g GFLOP/s (%s products, %d thread%s; best of %d rounds, slowest %.4g%s)\n",
               pk->gflops, zt_dtype_name(pk->dtype), pk->threads, pk->threads == 1 ? "" : "s", ZT_PEAK_ROUNDS,
               pk->slowest, pk->busy ? "; the machine was busy, not cached" : "");
    fflush(stdout);
}

/* Samples per optimizer step: B sequences x A micro-batches x W ranks. */
static long samples_per_step(const trainer *t)
{
    return (long)t->a->batch_size * t->a->grad_accum * t->W;
}

/* Trainer's epoch: the windows seen so far over the windows in the data. */
double zt_train_epoch_at(const trainer *t, long step)
{
    return (double)step * (double)samples_per_step(t) / (double)t->r.batcher.nwin;
}

/* Step `step` (1-based) ends an epoch when it reads the last window of one:
 * floor(step*G/nwin) > floor((step-1)*G/nwin). */
int zt_train_epoch_ends(const trainer *t, long step)
{
    long G = samples_per_step(t), n = (long)t->r.batcher.nwin;
    return step * G / n > (step - 1) * G / n;
}

/* What depends on the data's size, as Trainer resolves it: max_steps from
 * num_train_epochs (max_steps 0: the flag was not given), the warm-up from
 * warmup_ratio, logging_steps below 1 as a fraction of max_steps.  Every rank
 * loaded the same data, so every rank resolves the same numbers. */
static int resolve_steps(trainer *t, zt_err *err)
{
    zt_train_args *a = &t->args;
    if (t->r.batcher.nwin == 0)
        return zt_fail(err, ZT_EINPUT, "%s: fewer than %d tokens, not one window of --block_size %d", a->data_path,
                       a->block_size + 1, a->block_size);
    if (a->max_steps <= 0) {
        double steps = ceil(a->num_train_epochs * (double)t->r.batcher.nwin / (double)samples_per_step(t));
        a->max_steps = steps < 1.0 ? 1 : (long)steps;
    }
    if (a->warmup_steps == 0 && a->warmup_ratio > 0.0)
        a->warmup_steps = (long)ceil(a->warmup_ratio * (double)a->max_steps);
    double every = a->logging_steps > 0.0 ? a->logging_steps : 500.0;
    t->log_every = every < 1.0 ? (long)ceil(every * (double)a->max_steps) : (long)every;
    if (t->log_every < 1)
        t->log_every = 1;
    return ZT_OK;
}

/* The captured step (step_graph.h) where the plan says on and nothing of the run's
 * own stops it: --profile times each entry as it is called, and a test's hooks run
 * host code between the launches.  (A loss mask does not: each step's count of
 * targets is uploaded inside its captured passes, train_step.)  --cuda_graphs on
 * refuses them; auto says why it is off. */
static int open_graph(trainer *t, zt_err *err)
{
    const zt_plan *pl = &t->a->plan;
    const char *why = zt_prof_enabled() ? "--profile"
                      : t->hooks->before_forward || t->hooks->before_update ? "test hooks"
                      : !zt_comm_capturable(t->comm) ? "staged MPI collectives" /* comm auto on a GPU chose it */
                      : t->a->lora && t->a->lora->dropout > 0 ? "--lora_dropout" /* its mask is drawn on the host */
                      : NULL;
    int on = pl->graphs == ZT_PLAN_GRAPHS_ON && !why;
    if (pl->graphs == ZT_PLAN_GRAPHS_ON && why) {
        if (pl->graphs_forced)
            return zt_fail(err, ZT_EINPUT, "--cuda_graphs on: the step cannot be captured with %s (%s); use "
                           "--cuda_graphs auto or off", why, !strcmp(why, "staged MPI collectives")
                           ? "the ranks share GPUs, so their collectives go through host memory, not NCCL"
                           : "the host acts between the step's launches");
        if (t->talk)
            printf("graphs: off (%s)\n", why);
        /* and the plan line printed after it says the same */
        t->args.plan.graphs = ZT_PLAN_GRAPHS_OFF;
        snprintf(t->args.plan.graphs_why, sizeof t->args.plan.graphs_why, "%s", why);
    }
    return zt_step_graph_init(&t->sg, zt_engine_backend(t->r.eng), t->comm, on, t->a->grad_accum, t->r.io_bytes,
                              t->ring_size, err);
}

/* Fast mode: the learning rate of every step the run can apply, zt_lr_value of the
 * count u of updates applied before it (step_lr's), handed to the device once, whose
 * verdicts then pick each step's from the count they keep: so a step can be queued
 * before the host has read whether the steps before it were skipped. */
static int device_schedule(trainer *t, zt_err *err)
{
    const zt_train_args *a = t->a;
    long n = a->max_steps;
    double *lr = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *lr);
    if (!lr)
        return zt_fail(err, ZT_EFAIL, "out of memory for the learning-rate schedule (%ld steps)", n);
    for (long u = 0; u < n; u++)
        lr[u] = zt_lr_value(a->schedule, &a->schedule_kwargs, a->adam.lr, u, a->max_steps, a->warmup_steps);
    int rc = zt_engine_set_schedule(t->r.eng, &a->adam, lr, n, err);
    zt_free(ZT_MEM_OTHER, lr, (size_t)n * sizeof *lr);
    t->device_lr = rc == ZT_OK;
    return rc;
}

/* The resumed checkpoint's log history, best metric and early-stopping count, as
 * Trainer's resume keeps them (every rank reads them: each decides alike). */
static int resume_selection(trainer *t, const char *dir, zt_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    zt_json js;
    int rc = zt_json_parse_file(path, 64u << 20, &js, err);
    if (rc == ZT_OK) {
        rc = zt_selection_from_json(&t->sel, js.root, path, err);
        zt_json_free(&js);
    }
    return rc;
}

static int train_start(trainer *t, const zt_ckpt_state *resumed, zt_err *err);

/* LoRA: what a checkpoint records of the adapters and checks on resume (checkpoint.h):
 * their settings and the digest of the base they adapt (weights.h). */
int zt_train_lora_identity(trainer *t, zt_err *err)
{
    const zt_lora *l = t->a->lora;
    t->lora_id = (zt_ckpt_lora){.r = l->r, .alpha = l->alpha, .rslora = l->rslora, .targets = l->targets};
    int rc = zt_base_digest(t->a->model_dir, &t->r.cfg, &t->lora_id.base_digest, err);
    t->lora_id.on = rc == ZT_OK;
    return rc;
}

/* Open everything, check that the ranks agree, resume if asked. */
int zt_train_setup(trainer *t, const zt_train_args *a, zt_err *err)
{
    static const zt_train_hooks no_hooks = {0};
    memset(t, 0, sizeof *t);
    t->args = *a;
    a = t->a = &t->args;
    t->hooks = a->hooks ? a->hooks : &no_hooks;
    t->comm = a->comm;
    if (!t->comm) {
        zt_comm_create_local(&t->local);
        t->comm = &t->local;
    }
    zt_comm *comm = t->comm;
    t->rank0 = comm->rank == 0;
    t->W = comm->world;
    t->talk = t->rank0 && !a->quiet;
    const zt_backend *be = NULL;
    int rc = open_device(&a->plan, comm, &be, t->device, sizeof t->device, err);
    if (rc)
        return rc;
    rc = run_open(&t->r, a->model_dir, a->data_path, a->data_shown, a->loss_mask_path, a->block_size, a->batch_size,
                  &a->plan, be, comm, a->shuffle, a->seed, a->checkpointing, 0, a->lora, a->lora_adapter, err);
    t->have_run = 1;
    if (rc == ZT_OK && a->packing && a->eval_data_path)
        rc = zt_fail(err, ZT_EINPUT, "--packing with --eval_data: the evaluation does not pack documents; "
                     "evaluate with --padding_free instead");
    if (rc == ZT_OK && a->packing)
        rc = zt_batcher_set_packing(&t->r.batcher, a->doc_eos, a->batch_size, a->packing == ZT_PACK_BFD_SPLIT, err);
    else if (rc == ZT_OK && a->padding_free)
        rc = zt_batcher_set_padding_free(&t->r.batcher, a->doc_eos, a->batch_size, err);
    if (rc == ZT_OK && (a->padding_free || a->packing) &&
        (rc = zt_model_set_positions(&t->r.model, t->r.batcher.pos, err)) && a->packing)
        zt_wrap(err, "--packing: ");
    if (rc == ZT_OK)
        rc = resolve_steps(t, err);
    if (rc == ZT_OK && t->rank0 && a->tensorboard_dir)
        t->have_tb = (rc = zt_tfevents_open(&t->tb, a->tensorboard_dir, err)) == ZT_OK;
    if (rc == ZT_OK && t->rank0 && a->log_jsonl) {
        if ((rc = zt_open_output(a->log_jsonl, "the --log_jsonl log", &t->log_fd, err)) == ZT_OK)
            t->have_log = 1;
        else
            zt_wrap(err, "--log_jsonl: ");
    }
    if (rc == ZT_OK && a->eval_data_path) {
        zt_param_owner owner = zt_engine_param_owner(t->r.eng);
        owner.act16 = a->plan.activations == ZT_PLAN_ACT_BF16;
        rc = zt_evaluator_open(&t->ev, a->eval_data_path, a->eval_mask_path, &t->r.cfg, &t->r.lay, &owner,
                               a->eval_batch_size, a->block_size, comm->world, 0, "eval_data", err);
        t->have_ev = rc == ZT_OK;
        zt_lora eval_lora = a->lora ? *a->lora : (zt_lora){0};
        eval_lora.dropout = 0.0; /* evaluation is PEFT's eval mode: no dropout */
        if (rc == ZT_OK && a->lora) /* the model evaluated is the base with the adapters */
            rc = zt_model_set_lora(&t->ev.model, &eval_lora, err);
        if (rc == ZT_OK && a->padding_free)
            rc = zt_evaluator_set_padding_free(&t->ev, a->doc_eos, err);
    }
    /* fast mode reads steps back at the logged ones only (zt_train), fp16 too (its
     * backward takes the loss scale from the device: step_scalars.h); a profiled run
     * at each, as before: the profiler waits for the device at the end of every
     * profiled step anyway, and its trace then shows each step's read and record in
     * that step */
    t->lazy = rc == ZT_OK && zt_engine_runs_ahead(t->r.eng) && !zt_prof_enabled();
    t->depth = t->lazy ? (t->log_every < ZT_STEPS_IN_FLIGHT ? (int)t->log_every : ZT_STEPS_IN_FLIGHT) : 1;
    t->ring_size = t->depth + 1; /* at most ZT_STEP_SLOTS */
    if (rc == ZT_OK)
        rc = open_graph(t, err);
    t->last_eval = NAN;
    if ((rc = zt_comm_agree(comm, rc, err)))
        return rc;
    if ((rc = zt_comm_agree(comm, check_agreement(a, &t->r, t->have_ev ? &t->ev : NULL, comm, err), err)))
        return rc;
    if (a->output_dir && (rc = zt_comm_agree(comm, zt_ckpt_probe_output_dir(a->output_dir, err), err)))
        return rc;
    if (a->output_dir && (rc = zt_comm_agree(comm, zt_ckpt_new_run_id(comm, t->run_id, err), err)))
        return rc;
    t->hp = run_hparams(a, &t->r, t->W);
    zt_ckpt_state resumed = {0};
    if ((rc = zt_comm_agree(comm, zt_selection_init(&t->sel, &a->select, t->have_ev, a->output_dir, a->eval_steps,
                                                     a->save_steps, err), err)))
        return rc;
    if (a->resume_dir) {
        char dir[4096];
        zt_ckpt_load_args la = {&a->plan, &t->hp, a->override_checkpoint_args, a->allow_precision_change, t->talk,
                                a->lora ? &t->lora_id : NULL, a->model_dir};
        if ((a->lora && (rc = zt_comm_agree(comm, zt_train_lora_identity(t, err), err))) ||
            (rc = zt_ckpt_resolve(a->resume_dir, a->output_dir, comm, dir, err)) ||
            (rc = zt_comm_agree(comm, zt_ckpt_load(dir, &la, t->r.eng, &resumed, err), err)) ||
            (rc = zt_comm_agree(comm, resume_selection(t, dir, err), err)))
            return rc;
    }
    return train_start(t, &resumed, err);
}

/* The run's first step made ready: the gathered copies from the loaded (or resumed)
 * weights, the counters and the peak, the step range, the loss scaler and, in fast
 * mode, the schedule on the device. */
static int train_start(trainer *t, const zt_ckpt_state *resumed, zt_err *err)
{
    const zt_train_args *a = t->a;
    zt_comm *comm = t->comm;
    int rc;
    zt_engine_refresh_gathered(t->r.eng);
    memset(comm->bytes, 0, sizeof comm->bytes);
    memset(comm->link_bytes, 0, sizeof comm->link_bytes);

    t->tokens_per_step = (double)a->batch_size * a->grad_accum * t->W * a->block_size;
    t->flops_per_token = zt_model_flops_per_token(&t->r.cfg, a->block_size, a->checkpointing);
    zt_peak_resolve_on(&t->peak, zt_engine_backend(t->r.eng), a->plan.prec.compute, a->peak_gflops, 0, t->rank0,
                       t->talk ? stderr : NULL);
    if (t->talk)
        print_run(t);

    long stop = t->hooks->stop_after_steps;
    t->nsteps = stop > 0 && stop < a->max_steps ? stop : a->max_steps;
    const zt_plan *pl = &a->plan;
    zt_loss_scaler_init(&t->scaler, pl->ls.initial_scale_power, pl->ls.window, pl->ls.hysteresis,
                        pl->ls.min_scale);
    if (a->resume_dir) {
        t->first_step = resumed->step;
        restore_scaler(&t->scaler, &resumed->scaler);
    }
    if (pl->ls.on) /* fast mode: the device divides out and updates the scale from here on */
        t->device_scaler = zt_engine_seed_loss_scale(t->r.eng, &t->scaler);
    if (zt_engine_runs_ahead(t->r.eng) && (rc = zt_comm_agree(comm, device_schedule(t, err), err)))
        return rc;
    t->last.loss = NAN;
    t->t_start = zt_train_now();
    return ZT_OK;
}

/* `ztrain eval`: the evaluator of training (evaluate.h) on one rank, over the
 * model's weights frozen in the compute dtype: every token of the stream, the
 * last partial batch and a last window shorter than T included, so the mean is
 * the same at any batch size. */
int zt_eval(const zt_eval_args *a, double *mean_loss, long *tokens, zt_err *err)
{
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = a->compute, .reduce = a->compute,
                         .save = ZT_F32};
    zt_plan plan = zt_plan_single(prec, ZT_WRAP_TRANSFORMER);
    snprintf(plan.device, sizeof plan.device, "%s", a->device ? a->device : "cpu");
    zt_comm local;
    zt_comm_create_local(&local);
    const zt_backend *be = NULL;
    char desc[128];
    run_state r;
    zt_evaluator ev;
    memset(&r, 0, sizeof r); /* run_free below must find nothing to free on an early error */
    memset(&ev, 0, sizeof ev);
    int rc = open_device(&plan, &local, &be, desc, sizeof desc, err);
    if (rc == ZT_OK && (rc = zt_hf_read_config_dir(a->model_dir, &r.cfg, err)) == ZT_OK &&
        a->block_size > r.cfg.max_position_embeddings)
        rc = zt_fail(err, ZT_EINPUT, "--block_size %d exceeds the model's max_position_embeddings %d (%s/config.json)",
                     a->block_size, r.cfg.max_position_embeddings, a->model_dir);
    if (rc == ZT_OK && (rc = zt_layout_build(&r.lay, &r.cfg, plan.wrap, 0, 1, err)) == ZT_OK)
        r.have_lay = 1;
    if (rc == ZT_OK && (rc = zt_frozen_init(&r.frozen, &r.lay, prec.compute, be, err)) == ZT_OK)
        r.have_frozen = 1;
    if (rc == ZT_OK && (rc = zt_ckpt_check_model_dir(a->model_dir, err)) == ZT_OK)
        rc = zt_hf_load_params_to(a->model_dir, &r.lay, frozen_sink, &r.frozen, err);
    if (rc == ZT_OK) {
        zt_param_owner owner = zt_frozen_owner(&r.frozen);
        long max_windows = a->max_batches > 0 ? a->max_batches * a->batch_size : 0;
        rc = zt_evaluator_open(&ev, a->data_path, a->mask_path, &r.cfg, &r.lay, &owner, a->batch_size,
                               a->block_size, 1, max_windows, "data", err);
    }
    zt_eval_result res;
    if (rc == ZT_OK && (rc = zt_evaluator_run(&ev, &local, &res, err)) == ZT_OK) {
        *mean_loss = res.loss;
        *tokens = res.tokens;
    }
    zt_evaluator_free(&ev);
    zt_train_run_free(&r);
    zt_comm_free(&local);
    return rc;
}
