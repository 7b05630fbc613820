/* trainer.c — training and evaluation loops (see trainer.h). */
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../core/prof.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../io/tokens.h"
#include "../kernels/matmul.h"
#include "../kernels/prof_backend.h"
#include "../model/config.h"
#include "../model/frozen.h"
#include "../model/llama.h"
#include "../plan/plan.h"
#include "../engine/loss_scale.h"
#include "../report/tfevents.h"
#include "batches.h"
#include "checkpoint.h"
#include "ckpt_identity.h"
#include "evaluate.h"
#include "peak.h"
#include "preempt.h"
#include "step_graph.h"
#include "weights.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything a run holds, so one cleanup path frees it whatever failed. */
typedef struct run_state {
    zt_llama_config cfg;
    zt_tokens tokens;
    zt_layout lay;
    zt_engine *eng;
    zt_frozen_params frozen;  /* evaluation's weights, instead of an engine */
    zt_model model;
    zt_batcher batcher;
    int *inputs, *targets;
    size_t io_bytes;
    int have_lay, have_frozen, have_model, have_batcher;
} run_state;

static void run_free(run_state *r)
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

/* Load config, data and weights; build layout, parameter owner, model and
 * batcher.  The owner is the engine for training, or with `frozen` the weights
 * alone in the plan's compute dtype (evaluation: no gradients, no optimizer). */
static int run_open(run_state *r, const char *model_dir, const char *data_path, const char *data_shown,
                    const char *mask_path, int T, int B,
                    const zt_plan *plan, const zt_backend *be, zt_comm *comm, int shuffle, uint64_t seed,
                    int checkpointing, int frozen, zt_err *err)
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
        if ((rc = zt_hf_load_params(model_dir, &r->lay, r->eng, err)))
            return rc;
        owner = zt_engine_param_owner(r->eng);
    }
    owner.act16 = plan->activations == ZT_PLAN_ACT_BF16;
    if ((rc = zt_model_init(&r->model, &r->cfg, &r->lay, &owner, B, T, checkpointing, err)))
        return rc;
    r->have_model = 1;
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

static void draw_progress(long step, long total, double loss, double eval_loss, double tps, double elapsed)
{
    const int width = 30;
    int filled = (int)((double)width * (double)step / (double)total);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double eta = step ? elapsed / (double)step * (double)(total - step) : 0.0;
    char ev[32] = "";
    if (!isnan(eval_loss)) /* the latest evaluation, once there is one */
        snprintf(ev, sizeof ev, " eval %.4f", eval_loss);
    fprintf(stderr, "\r[%s] %ld/%ld loss %.4f%s  %.0f tok/s  %.0fs left ", bar, step, total, loss, ev,
            tps, eta);
    if (step == total)
        fputc('\n', stderr);
    fflush(stderr);
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
    "plan (face, stage, groups, wrap, overlap)", "precision (dtypes)", "model config", "batch (B, A, T)",
    "optimizer hyper-parameters", "schedule and steps", "data (token stream)",
    "evaluation (eval data, eval_steps, per_device_eval_batch_size)"};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull
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

/* ---- the training loop ------------------------------------------------------
 *
 * zt_train: setup, then per step train_step (every micro-batch's forward and
 * backward), step_queue (the update queued, and the download of its numbers),
 * and, unless the step may run ahead (may_run_ahead), step_tail: the steps in
 * flight read in order (read_in_flight, step_finish: the skip, the norm, the loss)
 * and each logged (log_step), then evaluation and save_checkpoint when due.  In
 * exact mode a step is read at once; a run ahead keeps up to NRUNS steps in
 * flight.  Everything a run holds lives in one trainer, so one close path frees it
 * whatever failed. */

typedef struct trainer {
    const zt_train_args *a;     /* &args: the caller's, with the steps resolved (resolve_steps) */
    zt_train_args args;
    const zt_train_hooks *hooks;
    run_state r;
    int have_run;
    zt_comm local, *comm;
    int log_fd, have_log;       /* rank 0's JSONL (zt_open_output), written a whole record at a time */
    int rank0, talk, W;         /* talk: rank 0 and not quiet */
    double tokens_per_step;     /* B * A * W * T */
    double flops_per_token;
    zt_peak peak;               /* what MFU divides by (peak.h), raised when a step beats it */
    zt_loss_scaler scaler;
    int device_scaler;          /* fast mode: the scaler lives on the device, read back with each step */
    long first_step, nsteps;    /* steps first_step .. nsteps-1 (0-based) run here */
    double t_start;
    zt_step_metrics last;       /* the last step's metrics */
    int lost_streak, warned;    /* the lost-update audit */
    zt_evaluator ev;            /* held-out evaluation, when eval_data_path is set */
    int have_ev;
    double last_eval;           /* the latest eval loss (NaN before the first) */
    zt_ckpt_hparams hp;         /* what a checkpoint records and a resume must find unchanged */
    long nonfinite_streak;      /* steps in a row skipped on an inf or NaN (outside fp16 scaling) */
    long overflow_streak;       /* fp16: steps in a row skipped on an overflow */
    long applied, skipped;      /* this run's steps whose update was applied, and those skipped */
    char device[128];           /* this rank's device, as its backend describes it */
    char run_id[17];            /* every file of this run's checkpoints carries it (ckpt_identity.h) */
    long saved_n, saved_first, saved_last; /* this run's checkpoints: how many, first and last step */
    long log_every;             /* logging_steps resolved to steps */
    double loss_since_log;      /* summed step losses since the last log, as Trainer averages them */
    long steps_since_log;
    zt_tfevents tb;             /* --report_to tensorboard (rank 0) */
    int have_tb;
    double prev_finish;         /* when the last step's numbers came back (now_s; 0 before) */
    int lazy;                   /* fast mode: steps are read back at logged steps only */
    int depth;                  /* the steps that may be in flight unread (1 unless lazy) */
    int device_lr;              /* the schedule lives on the device (zt_engine_set_schedule) */
    int batch_n, batch_left;    /* the steps read back in the current batch, and those still to log */
    double batch_time;          /* their mean time: the window from the batch's start to its read */
    zt_step_graph sg;           /* the step captured as a graph (step_graph.h); sg.on 0: not */
    zt_selection sel;           /* best model, early stopping, log_history (selection.h) */
} trainer;

/* One optimizer step on its way: what train_step measured when it queued the step,
 * and what step_finish completes once the step's numbers are back (at once, or
 * after the next step's forward and backward when the host runs ahead). */
typedef struct step_run {
    zt_step_metrics m;
    double t0, wait0, progress0;  /* when the step began, and the comm clocks then */
    uint64_t before[ZT_COLL_NKINDS], link_before[ZT_NLINKS];
    double loss_sum;              /* exact mode: the micro-batches' losses (fast: read at the finish) */
    double counted;               /* the targets the global mean divides by */
    zt_graph_phase ph;            /* what the host does for the step (step_graph.h) */
} step_run;

/* The saved scaler state, under this plan's settings. */
static void restore_scaler(zt_loss_scaler *s, const zt_loss_scaler *saved)
{
    s->scale = saved->scale;
    s->cur_hysteresis = saved->cur_hysteresis;
    s->iter = saved->iter;
    s->last_overflow_iter = saved->last_overflow_iter;
    s->skipped = saved->skipped;
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
    char products[96];
    int cpu_kernels = !strcmp(a->plan.device, "cpu") || !strcmp(a->plan.device, "emu") || !a->plan.device[0];
    snprintf(products, sizeof products, "bf16 products: %s", zt_matmul_bf16_path_name());
    zt_plan_print(stdout, &a->plan, cpu_kernels && a->plan.prec.compute == ZT_BF16 ? products : NULL);
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
static double epoch_at(const trainer *t, long step)
{
    return (double)step * (double)samples_per_step(t) / (double)t->r.batcher.nwin;
}

/* Step `step` (1-based) ends an epoch when it reads the last window of one:
 * floor(step*G/nwin) > floor((step-1)*G/nwin). */
static int epoch_ends(const trainer *t, long step)
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
                              t->depth + 1, err);
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

/* Open everything, check that the ranks agree, resume if asked. */
static int train_setup(trainer *t, const zt_train_args *a, zt_err *err)
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
                  &a->plan, be, comm, a->shuffle, a->seed, a->checkpointing, 0, err);
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
        zt_ckpt_load_args la = {&a->plan, &t->hp, a->override_checkpoint_args, a->allow_precision_change, t->talk};
        if ((rc = zt_ckpt_resolve(a->resume_dir, a->output_dir, comm, dir, err)) ||
            (rc = zt_comm_agree(comm, zt_ckpt_load(dir, &la, t->r.eng, &resumed, err), err)) ||
            (rc = zt_comm_agree(comm, resume_selection(t, dir, err), err)))
            return rc;
    }
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
        t->first_step = resumed.step;
        restore_scaler(&t->scaler, &resumed.scaler);
    }
    if (pl->ls.on) /* fast mode: the device divides out and updates the scale from here on */
        t->device_scaler = zt_engine_seed_loss_scale(t->r.eng, &t->scaler);
    if (zt_engine_runs_ahead(t->r.eng) && (rc = zt_comm_agree(comm, device_schedule(t, err), err)))
        return rc;
    t->last.loss = NAN;
    t->t_start = now_s();
    return ZT_OK;
}

/* A failing matrix product is not bad input: stop every rank.  The others are
 * inside (or about to enter) this step's collectives and would wait for this
 * rank forever, so on several ranks the job is aborted here, with its error. */
static int step_failed(const trainer *t, int rc, const zt_err *err)
{
    if (t->W > 1) {
        fprintf(stderr, "ztrain: error: rank %d: %s\n", t->comm->rank, err->msg);
        fflush(stderr);
        zt_comm_abort(1);
    }
    return rc;
}

/* "unit 2 (layers 1-1)" or "unit 0 (embeddings, final norm, lm_head)". */
static void describe_unit(char *buf, size_t len, const zt_layout *lay, int u)
{
    const zt_unit *un = &lay->units[u];
    int n = snprintf(buf, len, "unit %d (", u);
    if (n < 0 || (size_t)n >= len)
        return;
    if (un->num_layers > 0)
        n += snprintf(buf + n, len - (size_t)n, "layers %d-%d%s", un->first_layer,
                      un->first_layer + un->num_layers - 1, un->has_root ? ", " : "");
    if (un->has_root && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, "embeddings, final norm, lm_head");
    if ((size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

/* What a run that stops on a failure leaves: "nothing saved from this run", or
 * the checkpoints it did save, the newest to resume from. */
static const char *saved_note(const trainer *t, char *buf, size_t cap)
{
    if (t->saved_n == 0)
        snprintf(buf, cap, "nothing saved from this run");
    else if (t->saved_n == 1)
        snprintf(buf, cap, "this run saved %s/checkpoint-%ld", t->a->output_dir, t->saved_last);
    else
        snprintf(buf, cap, "this run saved %ld checkpoints, checkpoint-%ld to checkpoint-%ld in %s (the newest: "
                 "%s/checkpoint-%ld)", t->saved_n, t->saved_first, t->saved_last, t->a->output_dir,
                 t->a->output_dir, t->saved_last);
    return buf;
}

/* Outside fp16's loss scaling, an inf or NaN in the loss or the gradient is not
 * an overflow to scale away: the run stops naming the step and the first unit,
 * unless --skip_nonfinite_steps N allows skipping it (the engine has already
 * left the parameters untouched), at most N steps in a row.  Every rank reaches
 * the same verdict (the loss and the engine's verdict are world-wide). */
static int check_finite(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    const zt_train_args *a = t->a;
    if (a->plan.ls.on || (!m->skipped && isfinite(m->loss))) {
        t->nonfinite_streak = 0;
        return ZT_OK;
    }
    char what[160] = "the loss";
    if (m->skipped) {
        int u = zt_engine_nonfinite_unit(t->r.eng);
        char unit[96] = "";
        if (u >= 0)
            describe_unit(unit, sizeof unit, &t->r.lay, u);
        snprintf(what, sizeof what, "the gradient%s%s", u >= 0 ? ", first (in model order) in " : "", unit);
    }
    t->nonfinite_streak++;
    if (m->skipped && t->nonfinite_streak <= a->skip_nonfinite_steps) {
        if (t->rank0)
            fprintf(stderr, "%sztrain: warning: step %ld: an inf or NaN in %s (loss %g); step skipped (%ld in a "
                    "row, at most %ld by --skip_nonfinite_steps)\n", a->progress ? "\n" : "", m->step, what,
                    m->loss, t->nonfinite_streak, a->skip_nonfinite_steps);
        return ZT_OK;
    }
    if (!t->rank0) /* rank 0 says it; the others stop with it */
        return zt_fail(err, ZT_EFAIL, "%s", "");
    char saved[700];
    if (m->skipped && a->skip_nonfinite_steps > 0)
        return zt_fail(err, ZT_EFAIL, "step %ld: an inf or NaN in %s (loss %g), %ld steps in a row, more than "
                       "--skip_nonfinite_steps %ld allows; stopping (%s)", m->step, what, m->loss,
                       t->nonfinite_streak, a->skip_nonfinite_steps, saved_note(t, saved, sizeof saved));
    return zt_fail(err, ZT_EFAIL, "step %ld: an inf or NaN in %s (loss %g); stopping instead of training on it "
                   "(%s; lower the learning rate, check the data, or allow skipping with --skip_nonfinite_steps N)",
                   m->step, what, m->loss, saved_note(t, saved, sizeof saved));
}

/* fp16: an overflow skips the step and halves the scale, but at min_loss_scale
 * the scale cannot fall further, so a model that overflows fp16 even at the floor
 * would skip every step and "train" without changing.  DeepSpeed raises at its
 * minimum scale; here the run stops (exit 1: the run failed, the input was not
 * malformed) once a step overflows at the floor after more than
 * --max_consecutive_skipped_steps skips in a row.  From 2^16 the floor 1 is
 * reached after 17 skips in a row (one spent on hysteresis 2, then 16 halvings).
 * Every rank reaches the same verdict: the overflow is world-wide. */
static int check_overflow(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    const zt_train_args *a = t->a;
    if (m->skipped)
        t->skipped++;
    else
        t->applied++;
    if (!a->plan.ls.on)
        return ZT_OK;
    t->overflow_streak = m->skipped ? t->overflow_streak + 1 : 0;
    /* m->loss_scale is the scale this step ran at, before the update halved it */
    int at_floor = m->loss_scale <= t->scaler.min_scale;
    if (!m->skipped || !at_floor || t->overflow_streak <= a->max_consecutive_skipped_steps)
        return ZT_OK;
    if (!t->rank0) /* rank 0 says it; the others stop with it */
        return zt_fail(err, ZT_EFAIL, "%s", "");
    char saved[700];
    return zt_fail(err, ZT_EFAIL, "%sstep %ld: fp16 overflow with the loss scale at its floor (min_loss_scale %g); "
                   "%ld steps skipped in a row, more than --max_consecutive_skipped_steps %ld allows; stopping "
                   "(%s; %ld of this run's %ld steps were applied): the model overflows "
                   "fp16 even unscaled; train in bf16 or fp32 (--mixed_precision bf16|no)",
                   a->progress ? "\n" : "", m->step, t->scaler.min_scale, t->overflow_streak,
                   a->max_consecutive_skipped_steps, saved_note(t, saved, sizeof saved), t->applied,
                   t->applied + t->skipped);
}

/* The numbers of a step that are complete once it is queued: its collectives and
 * memory (a next step queued before its finish must not count in them). */
static void measure_queued(trainer *t, step_run *run)
{
    const zt_comm *comm = t->comm;
    zt_step_metrics *m = &run->m;
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        m->comm_bytes[k] = comm->bytes[k] - run->before[k];
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        m->comm_calls[k] = comm->calls[k] - m->comm_calls[k];
    for (int k = 0; k < ZT_NLINKS; k++)
        m->link_bytes[k] = comm->link_bytes[k] - run->link_before[k];
    m->comm_wait_s = comm->wait_s - run->wait0;
    m->comm_progress_s = comm->progress_s - run->progress0;
    for (int c = 0; c < ZT_MEM_NCAT; c++) { /* the device's bytes and the offloaded host bytes apart */
        m->host_memory_bytes[c] = zt_mem_host_current((zt_mem_cat)c);
        m->memory_bytes[c] = zt_mem_current((zt_mem_cat)c) - m->host_memory_bytes[c];
    }
}

/* The numbers of a step known once its numbers are back.  Steps are read back in
 * batches (one at a time unless fast mode reads them at logged steps only: zt_train),
 * and each step of a batch gets the batch's mean time: the window from the first
 * step's start, or from the previous batch's read when the host queued it earlier
 * than that (running ahead), to this batch's read, over its steps.  In a run that
 * runs ahead, the device's time per step. */
static void measure_finished(trainer *t, step_run *run)
{
    zt_step_metrics *m = &run->m;
    if (t->batch_left <= 0) { /* the batch's first step: its read has just waited */
        double now = now_s(), start = run->t0 > t->prev_finish ? run->t0 : t->prev_finish;
        int n = t->batch_n > 0 ? t->batch_n : 1;
        t->batch_time = (now - start) / n;
        t->batch_left = n;
        t->prev_finish = now;
    }
    t->batch_left--;
    m->step_time_s = t->batch_time;
    m->tokens_per_sec = t->tokens_per_step / m->step_time_s / t->W;
    /* achieved FLOP/s per device against the peak, which a faster step raises
     * (peak.h): MFU is at most 1 by construction */
    double achieved = t->flops_per_token * m->tokens_per_sec * 1e-9;
    m->peak_gflops = zt_peak_admit(&t->peak, achieved, t->rank0, t->talk ? stderr : NULL);
    m->mfu = m->peak_gflops > 0 ? achieved / m->peak_gflops : 0.0;
    const zt_adamw_audit au = zt_engine_last_audit(t->r.eng);
    m->lost_update_fraction = au.updated > 0 ? au.lost / au.updated : 0.0;
    m->update_to_half_ulp = au.updated > 0 ? au.ratio_sum / au.updated : 0.0;
}

/* The learning rate of the coming step.  The schedule counts applied updates (a
 * step skipped on fp16 overflow does not advance it, as DeepSpeed's engine does not
 * step its scheduler then), so every step queued before must have been finished;
 * with the schedule on the device (fast mode) the device counts, and this is only a
 * placeholder until the step's own comes back (step_finish). */
static double step_lr(const trainer *t)
{
    const zt_train_args *a = t->a;
    long u = zt_engine_optimizer_steps(t->r.eng);
    return zt_lr_value(a->schedule, &a->schedule_kwargs, a->adam.lr, u, a->max_steps, a->warmup_steps);
}

/* Optimizer step s (0-based), its first half: A micro-batches of forward and
 * backward.  step_queue then queues the gradient reduction and one AdamW update of
 * this rank's shard, and step_finish reads the step's numbers back. */
static int train_step(trainer *t, long s, step_run *run, zt_err *err)
{
    const zt_train_args *a = t->a;
    const zt_plan *pl = &a->plan;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    const int B = a->batch_size, A = a->grad_accum;
    zt_step_metrics *m = &run->m;
    memset(run, 0, sizeof *run);
    m->step = s + 1;
    comm->step = s + 1; /* the flight recorder's context; the engine sets phase and unit */
    run->t0 = now_s(), run->wait0 = comm->wait_s, run->progress0 = comm->progress_s;
    memcpy(run->before, comm->bytes, sizeof run->before);
    memcpy(run->link_before, comm->link_bytes, sizeof run->link_before);
    memcpy(m->comm_calls, comm->calls, sizeof m->comm_calls); /* the counts before; measure_queued subtracts */

    /* the captured step (step_graph.h): the passes are one graph per token set, which
     * a capture holds and a replay skips the host's side of; the update is another,
     * launched by step_queue (the step before may still be queued: running ahead) */
    zt_step_graph *sg = &t->sg;
    const zt_graph_phase ph = zt_step_graph_passes_phase(sg);
    const int set = sg->on ? zt_step_graph_set(sg) : 0;
    /* fp16: backward runs on loss * scale; the step divides it back out */
    double scale = pl->ls.on ? t->scaler.scale : 1.0;
    double loss_sum = 0.0;
    /* the global mean loss divides by the targets that count: all B*A*W*T, or
     * under a loss mask the completion tokens of the step's G samples, which every
     * rank counts alike from the shared sample order (no collective); a step of
     * prompts only has no loss and no gradient */
    double counted = t->tokens_per_step;
    if (r->tokens.loss_mask) {
        long G = (long)B * A * t->W, n = zt_batcher_count_targets(&r->batcher, s * G, G);
        counted = n > 0 ? (double)n : 1.0;
    }
    int rc = ph == ZT_GRAPH_CAPTURE ? zt_step_graph_begin(sg, err) : ZT_OK;
    if (rc)
        return step_failed(t, rc, err);
    /* fast mode: the count goes to the device, where the backward forms its gradient
     * scale with the loss scale the device holds when it runs (the host's scale may
     * be a step behind when it runs ahead); a captured step uploads it from the
     * token set's own memory, refilled here before each launch */
    double *count = ph != ZT_GRAPH_OFF ? sg->count + set : &run->counted;
    *count = counted;
    if (ph != ZT_GRAPH_REPLAY) {
        zt_engine_zero_grads(r->eng);
        zt_engine_step_count(r->eng, count);
    }
    for (int micro = 0; micro < A; micro++) {
        long k0 = zt_sample_index(s, micro, comm->rank, B, A, t->W);
        /* a captured step reads each micro-batch's ids from its own fixed buffers */
        const int graphed = ph != ZT_GRAPH_OFF;
        int *inputs = graphed ? sg->inputs[set * A + micro] : r->inputs;
        int *targets = graphed ? sg->targets[set * A + micro] : r->targets;
        int hd = zt_prof_begin("data", "phase", ZT_PROF_COMPUTE);
        zt_batcher_fill(&r->batcher, k0, B, inputs, targets);
        zt_prof_end(hd, 0.0, 0.0);
        if (ph == ZT_GRAPH_REPLAY) /* the launch below runs the micro-batch */
            continue;
        /* the last micro-batch's backward may start the step's reduction */
        zt_engine_sync_backward(r->eng, micro == A - 1);
        double ls = 0.0;
        rc = t->hooks->before_forward ? t->hooks->before_forward(t->hooks->ctx, s + 1, micro, comm->rank, err)
                                      : ZT_OK;
        if (rc == ZT_OK)
            rc = zt_model_forward_backward(&r->model, inputs, targets, zt_grad_scale(counted, scale), &ls,
                                           err);
        if (rc)
            return step_failed(t, rc, err);
        loss_sum += ls;
    }
    zt_engine_sync_backward(r->eng, 0);
    if (ph == ZT_GRAPH_WARMUP || ph == ZT_GRAPH_CAPTURE) /* the last reduction ends in the passes' graph */
        zt_engine_drain(r->eng);
    if ((rc = zt_step_graph_run_passes(sg, ph, err)))
        return step_failed(t, rc, err);
    run->ph = zt_step_graph_phase(sg);
    run->loss_sum = loss_sum;
    run->counted = counted;
    m->loss_scale = pl->ls.on ? scale : 0.0;
    return ZT_OK;
}

/* Step s's second half: its update queued (a graphed step: its inputs uploaded, the
 * captured update launched), its numbers' download queued. */
static int step_queue(trainer *t, long s, step_run *run, zt_err *err)
{
    const zt_train_args *a = t->a;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    zt_step_metrics *m = &run->m;
    m->lr = step_lr(t);
    if (t->hooks->before_update)
        t->hooks->before_update(t->hooks->ctx, s + 1, comm->rank, r->eng);
    comm->phase = "optimizer";
    comm->unit = -1;
    int ho = zt_prof_begin("optimizer", "phase", ZT_PROF_COMPUTE);
    double scale = a->plan.ls.on ? m->loss_scale : 1.0;
    int rc = ZT_OK;
    if (run->ph == ZT_GRAPH_OFF) {
        zt_engine_step_queue(r->eng, &a->adam, m->lr, a->max_grad_norm, 1.0 / scale);
    } else {
        rc = zt_engine_step_inputs(r->eng, &a->adam, m->lr, err);
        if (rc == ZT_OK && run->ph == ZT_GRAPH_CAPTURE)
            rc = zt_step_graph_begin(&t->sg, err);
        if (rc == ZT_OK && run->ph != ZT_GRAPH_REPLAY) /* the warm-up runs them, the capture holds them */
            zt_engine_step_launch(r->eng, &a->adam, m->lr, a->max_grad_norm, 1.0 / scale);
        if (rc == ZT_OK && (rc = zt_step_graph_run(&t->sg, run->ph, err)) == ZT_OK)
            zt_engine_step_readback(r->eng);
    }
    zt_prof_end(ho, 0.0, 0.0);
    if (rc)
        return step_failed(t, rc, err);
    measure_queued(t, run);
    return ZT_OK;
}

/* A queued step's numbers: the skip, the norm, the loss (fast mode: read back with
 * them), the loss scale's update. */
static void step_finish(trainer *t, step_run *run)
{
    const zt_plan *pl = &t->a->plan;
    zt_comm *comm = t->comm;
    run_state *r = &t->r;
    zt_step_metrics *m = &run->m;
    m->skipped = zt_engine_step_finish(r->eng, &m->grad_norm);
    if (r->model.loss_sink) /* read back by the step with its other numbers */
        run->loss_sum = zt_engine_step_loss_sum(r->eng);
    if (t->device_lr) /* the device's schedule chose it: the host's step_lr, counted there */
        zt_engine_step_lr(r->eng, &m->lr);
    double used;
    if (t->device_scaler && zt_engine_step_loss_scale(r->eng, &t->scaler, &used)) /* updated by the verdict */
        m->loss_scale = used;
    else if (pl->ls.on)
        zt_loss_scaler_update(&t->scaler, m->skipped);
    comm->phase = "loss";
    m->loss = zt_comm_sum_double(comm, run->loss_sum, ZT_SCOPE_WORLD) / run->counted;
    measure_finished(t, run);
}

/* Warn once when most updates vanish in rounding for several steps in a row. */
static void audit_lost_updates(trainer *t, const zt_step_metrics *m)
{
    t->lost_streak = m->lost_update_fraction > 0.5 ? t->lost_streak + 1 : 0;
    if (t->lost_streak < 3 || t->warned || !t->rank0)
        return;
    fprintf(stderr, "%swarning: %.0f%% of parameter updates were rounded away in the last %d "
            "steps (mean |update| = %.2f half-ulps of the %s master weights); the model is barely "
            "training. Keep an fp32 master with --mixed_precision bf16 (Accelerate's upcast), or "
            "compensate the bf16 master with --master_compensation kahan.\n",
            t->a->progress ? "\n" : "", 100.0 * m->lost_update_fraction, t->lost_streak,
            m->update_to_half_ulp, zt_dtype_name(t->a->plan.prec.master));
    t->warned = 1;
}

/* A number, or null for an inf or NaN (which JSON cannot hold; jq and Python's
 * json refuse the bare words), recording which in *flags. */
static void json_num(FILE *f, const char *key, const char *fmt, double x, char *flags, size_t len)
{
    if (isfinite(x)) {
        fprintf(f, "\"%s\": ", key);
        fprintf(f, fmt, x);
        return;
    }
    fprintf(f, "\"%s\": null", key);
    size_t used = strlen(flags);
    snprintf(flags + used, len - used, "%s\"%s\": \"%s\"", used ? ", " : "", key,
             isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

/* One JSON object per step (docs/zero.md lists the fields).  A non-finite loss
 * or gradient norm is written as null, and "nonfinite" says which and what it
 * was, e.g. "nonfinite": {"loss": "nan", "grad_norm": "inf"}. */
static void write_jsonl(FILE *log, const zt_step_metrics *m)
{
    char flags[128] = "";
    fprintf(log, "{\"step\": %ld, ", m->step);
    json_num(log, "loss", "%.9g", m->loss, flags, sizeof flags);
    fprintf(log, ", ");
    json_num(log, "grad_norm", "%.9g", m->grad_norm, flags, sizeof flags);
    fprintf(log,
            ", \"lr\": %.9g, "
            "\"tokens_per_sec_per_device\": %.2f, \"step_time_s\": %.6f, \"mfu\": %.5f, \"peak_gflops\": %.6g, "
            "\"lost_update_fraction\": %.6f, \"update_to_half_ulp\": %.6g, \"loss_scale\": %.9g, "
            "\"skipped\": %d, ",
            m->lr, m->tokens_per_sec, m->step_time_s, m->mfu, m->peak_gflops, m->lost_update_fraction,
            m->update_to_half_ulp, m->loss_scale, m->skipped);
    if (flags[0])
        fprintf(log, "\"nonfinite\": {%s}, ", flags);
    fprintf(log, "\"memory_bytes\": {");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c), m->memory_bytes[c],
                c + 1 < ZT_MEM_NCAT ? ", " : "");
    fprintf(log, "}, \"host_memory_bytes\": {");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c), m->host_memory_bytes[c],
                c + 1 < ZT_MEM_NCAT ? ", " : "");
    fprintf(log, "}, \"comm_bytes\": {");
    for (int k = 0; k < ZT_COLL_NKINDS; k++)
        fprintf(log, "\"%s\": %llu%s", zt_coll_kind_name((zt_coll_kind)k),
                (unsigned long long)m->comm_bytes[k], k + 1 < ZT_COLL_NKINDS ? ", " : "");
    /* the same bytes by link: with ranks on this machine, with other machines */
    fprintf(log, "}, \"comm_link_bytes\": {\"intra_machine\": %llu, \"inter_machine\": %llu",
            (unsigned long long)m->link_bytes[ZT_LINK_INTRA], (unsigned long long)m->link_bytes[ZT_LINK_INTER]);
    fprintf(log, "}, \"comm_wait_s\": %.6f, \"comm_progress_s\": %.6f}\n", m->comm_wait_s, m->comm_progress_s);
    fflush(log);
}

/* A JSONL record is formatted into memory, then written whole (zt_write_record):
 * a full disk or a size limit never leaves half an object, and the failure is an
 * error naming the file.  fmt writes the record into the stream it is given. */
typedef void (*record_fn)(FILE *f, const void *what);
static int log_record(trainer *t, record_fn fmt, const void *what, zt_err *err)
{
    if (!t->have_log)
        return ZT_OK;
    char buf[16384];
    FILE *rec = fmemopen(buf, sizeof buf, "w");
    if (!rec)
        return zt_fail(err, ZT_EFAIL, "--log_jsonl %s: out of memory formatting a record", t->a->log_jsonl);
    fmt(rec, what);
    int bad = fflush(rec) != 0 || ferror(rec);
    long n = ftell(rec);
    fclose(rec);
    if (bad || n <= 0 || (size_t)n >= sizeof buf - 1)
        return zt_fail(err, ZT_EFAIL, "--log_jsonl %s: a record does not fit %zu bytes", t->a->log_jsonl, sizeof buf);
    int rc = zt_write_record(t->log_fd, t->a->log_jsonl, buf, (size_t)n, err);
    if (rc)
        zt_wrap(err, "--log_jsonl: ");
    return rc;
}

static void step_record(FILE *f, const void *m)
{
    write_jsonl(f, m);
}

/* Trainer's log, every logging_steps steps and after the last: the loss is the
 * mean of the steps' losses since the previous log, as Trainer reports it; the
 * learning rate and gradient norm are this step's.  On stdout as one plain line
 * (no progress bar is drawn then: a log file gets lines, not carriage returns)
 * and, with --report_to tensorboard, as scalars under Trainer's tags. */
/* One scalar into rank 0's event file (no file on the other ranks: ZT_OK).  A
 * failed write is an error, as the JSONL's is: the caller agrees on it with every
 * rank (tb_agree), so all of them stop instead of waiting for rank 0. */
static int tb_scalar(trainer *t, const char *tag, long step, double value, zt_err *err)
{
    if (!t->have_tb)
        return ZT_OK;
    int rc = zt_tfevents_scalar(&t->tb, tag, step, (float)value, err);
    if (rc)
        zt_wrap(err, "--report_to tensorboard: ");
    return rc;
}

/* Collective when events are written (--report_to tensorboard: the same on every
 * rank): every rank learns whether rank 0's writes succeeded. */
static int tb_agree(trainer *t, int rc, zt_err *err)
{
    return t->a->tensorboard_dir ? zt_comm_agree(t->comm, rc, err) : rc;
}

/* Collective on the steps that log (the same steps on every rank). */
static int log_trainer(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    t->loss_since_log += m->loss;
    t->steps_since_log++;
    if (m->step % t->log_every != 0 && m->step != t->nsteps)
        return ZT_OK;
    double loss = t->loss_since_log / (double)t->steps_since_log, epoch = epoch_at(t, m->step);
    t->loss_since_log = 0.0;
    t->steps_since_log = 0;
    if (t->talk && !t->a->progress) {
        printf("step %ld/%ld: loss %.4f, grad_norm %.4g, learning_rate %.6g, epoch %.2f\n", m->step, t->nsteps, loss,
               m->grad_norm, m->lr, epoch);
        fflush(stdout);
    }
    zt_selection_log_train(&t->sel, m->step, epoch, loss, m->grad_norm, m->lr);
    int rc = tb_scalar(t, "train/loss", m->step, loss, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/grad_norm", m->step, m->grad_norm, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/learning_rate", m->step, m->lr, err);
    if (rc == ZT_OK)
        rc = tb_scalar(t, "train/epoch", m->step, epoch, err);
    return tb_agree(t, rc, err);
}

/* Collective when there is a log: every rank learns whether rank 0 wrote it. */
static int log_step(trainer *t, const zt_step_metrics *m, zt_err *err)
{
    t->last = *m;
    audit_lost_updates(t, m);
    int rc = log_record(t, step_record, m, err);
    if (t->a->log_jsonl)
        rc = zt_comm_agree(t->comm, rc, err);
    if (rc)
        return rc;
    if (t->a->progress && t->rank0)
        draw_progress(m->step, t->nsteps, m->loss, t->last_eval, m->tokens_per_sec, now_s() - t->t_start);
    if (t->a->on_step)
        t->a->on_step(t->a->on_step_ctx, m);
    return log_trainer(t, m, err);
}

/* HF's eval_strategy: "steps" after every eval_steps-th step (its default,
 * logging_steps, when eval_steps is not given), "epoch" after each step that ends
 * an epoch, "no" never; unset: every eval_steps, or once after the last step. */
static int eval_due(const trainer *t, long step)
{
    if (!t->have_ev)
        return 0;
    switch (t->a->eval_strategy) {
    case ZT_STRATEGY_NO:
        return 0;
    case ZT_STRATEGY_EPOCH:
        return epoch_ends(t, step);
    case ZT_STRATEGY_STEPS:
        return step % (t->a->eval_steps > 0 ? t->a->eval_steps : t->log_every) == 0;
    default:
        return t->a->eval_steps > 0 ? step % t->a->eval_steps == 0 : step == t->nsteps;
    }
}

typedef struct eval_record_of {
    long step;
    const zt_eval_result *e;
} eval_record_of;

static void eval_record(FILE *f, const void *what)
{
    const eval_record_of *r = what;
    const zt_eval_result *e = r->e;
    char flags[128] = ""; /* non-finite values as null plus a flag, as in the step records */
    fprintf(f, "{\"step\": %ld, ", r->step);
    json_num(f, "eval_loss", "%.17g", e->loss, flags, sizeof flags);
    fprintf(f, ", ");
    json_num(f, "eval_perplexity", "%.17g", e->perplexity, flags, sizeof flags);
    fprintf(f, ", \"eval_tokens\": %ld, \"eval_runtime\": %.6f", e->tokens, e->seconds);
    if (flags[0])
        fprintf(f, ", \"nonfinite\": {%s}", flags);
    fprintf(f, "}\n");
}

/* Every rank alike (the eval loss is the same on each): the evaluation into the log
 * history and the selection; early stopping ends the run after this step (its
 * checkpoint, when one is due, is still written), as Trainer's should_training_stop. */
static int select_after_eval(trainer *t, long step, const zt_eval_result *e)
{
    if (!zt_selection_on_eval(&t->sel, step, epoch_at(t, step), e->loss) || step >= t->nsteps)
        return ZT_OK;
    if (t->talk)
        printf("%searly stopping after step %ld: %s did not improve by more than %g in %ld evaluations "
               "(best %.4f at step %ld)\n", t->a->progress ? "\n" : "", step, "eval_loss", t->sel.threshold,
               t->sel.patience, t->sel.best_metric, t->sel.best_step);
    t->nsteps = step;
    return ZT_OK;
}

/* Collective: the held-out loss of the model as it stands after `step`, as its own
 * JSONL record (HF's eval_loss, with its perplexity, after the step's record) and on
 * stdout, or on the progress line that log_step draws next. */
static int evaluate(trainer *t, long step, zt_err *err)
{
    zt_eval_result e;
    int rc = zt_evaluator_run(&t->ev, t->comm, &e, err);
    if (rc)
        return rc;
    t->last_eval = e.loss;
    if ((rc = tb_agree(t, tb_scalar(t, "eval/loss", step, e.loss, err), err)))
        return rc;
    eval_record_of rec = {step, &e};
    rc = log_record(t, eval_record, &rec, err);
    if (t->a->log_jsonl && (rc = zt_comm_agree(t->comm, rc, err)))
        return rc;
    /* with a progress bar, its next line shows the eval; after the last step the bar
     * has ended its line, so the result gets one of its own */
    if (t->talk && (!t->a->progress || step == t->nsteps))
        printf("step %ld: eval loss %.4f, perplexity %.2f (%ld tokens, %.1f s)\n", step, e.loss, e.perplexity,
               e.tokens, e.seconds);
    return select_after_eval(t, step, &e);
}

/* OUTPUT_DIR/checkpoint-N every save_steps (save_strategy steps or unset), or
 * after each step that ends an epoch (save_strategy epoch), and after the last
 * step of the schedule whenever checkpoints are saved at all, as Hugging Face's
 * Trainer does (a run can then be continued or inspected from its end, not only
 * from the last multiple of save_steps).  The final save writes OUTPUT_DIR itself
 * as well. */
static int checkpoint_due(const trainer *t, long step)
{
    const zt_train_args *a = t->a;
    if (!a->output_dir || a->save_strategy == ZT_STRATEGY_NO)
        return 0;
    if (a->save_strategy == ZT_STRATEGY_EPOCH)
        return epoch_ends(t, step) || step == a->max_steps;
    return a->save_steps > 0 && (step % a->save_steps == 0 || step == a->max_steps);
}

/* A /proc/self/status field in KiB (0 where there is none). */
static long proc_status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            kib = atol(line + n);
            break;
        }
    if (f)
        fclose(f);
    return kib;
}

/* Restart VmHWM from the current resident set (Linux: "5" to clear_refs), so
 * the peak of what follows can be read. */
static void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* What trainer_state.json carries for Trainer's TrainerState beside ztrain's state:
 * the epoch, the intervals, and the selection, its best checkpoint first brought
 * up to this save (Trainer records the best step's checkpoint once it exists). */
static void trainer_state_fields(trainer *t, long step, zt_ckpt_state *cs)
{
    const zt_train_args *a = t->a;
    zt_selection_on_save(&t->sel, a->output_dir, step);
    cs->epoch_fraction = epoch_at(t, step);
    cs->logging_steps = t->log_every;
    cs->eval_steps = a->eval_steps > 0 ? a->eval_steps : t->log_every;
    cs->save_steps = a->save_steps;
    cs->train_batch_size = a->batch_size;
    cs->num_train_epochs = a->num_train_epochs > 0 ? ceil(a->num_train_epochs) : ceil(epoch_at(t, a->max_steps));
    cs->sel = &t->sel;
}

/* Collective: OUTPUT_DIR/checkpoint-STEP with everything a resume needs
 * (checkpoint.h): written aside, then renamed into place. */
static int save_checkpoint(trainer *t, long step, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    t->comm->phase = "checkpoint";
    zt_ckpt_state cs = {.step = step, .optimizer_steps = zt_engine_optimizer_steps(r->eng), .scaler = t->scaler,
                        .hp = t->hp, .plan = zt_ckpt_plan_of(&a->plan, t->W)};
    cs.samples_seen = step * t->hp.global_batch;
    cs.epoch = r->batcher.nwin ? cs.samples_seen / (long)r->batcher.nwin : 0;
    snprintf(cs.command_line, sizeof cs.command_line, "%s", a->command_line ? a->command_line : "");
    memcpy(cs.run_id, t->run_id, sizeof cs.run_id);
    trainer_state_fields(t, step, &cs);
    zt_ckpt_save_args sa = {a->output_dir, &r->cfg, &a->plan, !a->sharded_only, a->plan.prec.save,
                            a->max_shard_bytes, a->save_total_limit, a->model_dir, a->tokenizer_dir,
                            t->sel.best_checkpoint[0] ? t->sel.best_step : 0};
    char where[4096];
    zt_ckpt_save_report rep = {0};
    long rss0 = proc_status_kib("VmRSS:");
    reset_peak_rss();
    int rc = zt_ckpt_save(&sa, r->eng, &cs, where, &rep, err);
    if (rc == ZT_OK) { /* what a stop message can then say was saved */
        t->saved_first = t->saved_n++ ? t->saved_first : step;
        t->saved_last = step;
    }
    long peak = proc_status_kib("VmHWM:");
    if (rc == ZT_OK && t->talk) {
        const double MB = 1e6;
        printf("%scheckpoint saved to %s (%.2f s; %.1f MB: rank 0 wrote %.1f MB", a->progress ? "\n" : "", where,
               rep.seconds, (double)rep.bytes_total / MB, (double)rep.bytes_rank0 / MB);
        if (t->W > 1)
            printf(", each other rank at most %.1f MB", (double)rep.bytes_other_max / MB);
        if (rss0 > 0 && peak > 0)
            printf("; rank 0's peak memory during the save: +%.1f MiB", (double)(peak - rss0) / 1024.0);
        printf(")\n");
        fflush(stdout);
    }
    return rc;
}

/* Collective: the final model into OUTPUT_DIR: the weights as they stand, or with
 * --load_best_model_at_end the best checkpoint's (merged from its shards, as
 * merge-weights writes them), as Trainer loads the best model before its save. */
static int save_final_model(trainer *t, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    const zt_selection *s = &t->sel;
    if (!a->select.load_best_model_at_end || !s->best_checkpoint[0] || s->best_step == t->nsteps)
        return zt_comm_agree(t->comm, zt_hf_save(a->output_dir, &r->cfg, &r->lay, r->eng, a->plan.prec.save,
                                                 a->max_shard_bytes, NULL, t->rank0, err), err);
    int rc = t->rank0 ? zt_ckpt_merge(s->best_checkpoint, a->output_dir, &a->plan.prec.save, a->max_shard_bytes, err)
                      : ZT_OK;
    if ((rc = zt_comm_agree(t->comm, rc, err)))
        return rc;
    if (t->talk)
        printf("best model (eval_loss %.4f at step %ld) loaded from %s\n", s->best_metric, s->best_step,
               s->best_checkpoint);
    return ZT_OK;
}

/* The run's summary, the final save and the closing lines. */
static int train_finish(trainer *t, zt_train_result *res, zt_err *err)
{
    const zt_train_args *a = t->a;
    run_state *r = &t->r;
    long steps = t->nsteps - t->first_step;
    double elapsed = now_s() - t->t_start;
    if (res) {
        res->final_loss = t->last.loss;
        res->steps = steps;
        res->tokens_per_sec = elapsed > 0 ? t->tokens_per_step * (double)steps / elapsed / t->W : 0.0;
        res->state = zt_engine_state_bytes(r->eng);
        res->activation_bytes = r->model.act_bytes;
        memcpy(res->step_bytes, t->last.comm_bytes, sizeof res->step_bytes);
        memcpy(res->step_calls, t->last.comm_calls, sizeof res->step_calls);
        res->skipped_steps = t->scaler.skipped;
        res->loss_scale = a->plan.ls.on ? t->scaler.scale : 0.0;
        zt_engine_stats es = zt_engine_get_stats(r->eng);
        res->prefetch_used = es.prefetch_used;
        res->prefetch_dropped = es.prefetch_dropped;
        res->reduce_overlapped = es.reduce_overlapped;
        res->pieces_overlapped = es.pieces_overlapped;
    }
    /* the final model: rank 0 writes, every rank learns whether it did */
    int rc;
    if (a->output_dir && (rc = save_final_model(t, err)))
        return rc;
    /* and what the source model carried: config keys, generation config, tokenizer */
    if (a->output_dir &&
        (rc = zt_comm_agree(t->comm, t->rank0 ? zt_hf_carry_model(a->output_dir, a->model_dir, a->tokenizer_dir, err)
                                              : ZT_OK, err)))
        return rc;
    if (t->talk) {
        /* "trained" only when a step changed the weights; skipped steps are counted */
        if (t->applied == 0 && t->skipped > 0)
            printf("ran %ld steps, none applied (%ld skipped on %s)", steps, t->skipped,
                   a->plan.ls.on ? "fp16 overflow" : "an inf or NaN");
        else if (t->skipped > 0)
            printf("trained %ld steps (%ld applied, %ld skipped on %s)", steps, t->applied, t->skipped,
                   a->plan.ls.on ? "fp16 overflow" : "an inf or NaN");
        else
            printf("trained %ld step%s", steps, steps == 1 ? "" : "s");
        printf(" in %.1f s (%.0f tokens/s per device); final loss %.4f\n", elapsed,
               t->tokens_per_step * (double)steps / elapsed / t->W, t->last.loss);
        if (a->output_dir)
            printf("model saved to %s\n", a->output_dir);
    }
    return ZT_OK;
}

static void train_close(trainer *t)
{
    if (t->have_log)
        close(t->log_fd);
    if (t->have_tb)
        zt_tfevents_close(&t->tb);
    if (t->have_ev)
        zt_evaluator_free(&t->ev);
    zt_step_graph_free(&t->sg);
    zt_selection_free(&t->sel);
    if (t->have_run)
        run_free(&t->r);
    if (t->comm == &t->local) /* its staging buffers, if a device gave it some */
        zt_comm_free(&t->local);
}

/* After step `step`: has a SIGTERM or SIGINT reached any rank?  A max over the
 * ranks, so every rank stops after the same step even when the signal reached
 * only one (a launcher that signals the ranks one by one, a user's kill). */
static int stop_signal(const trainer *t)
{
    return zt_comm_max_int(t->comm, zt_preempt_requested());
}

/* The clean stop: a checkpoint of the step just finished (unless one was just
 * written), where it is, and the status main turns into exit 0 (SIGTERM, and
 * SIGUSR2, the stop request ztrain launch sends through mpirun) or 130 (SIGINT). */
static int stop_for_signal(trainer *t, long step, int sig, int saved, zt_err *err)
{
    const zt_train_args *a = t->a;
    char dir[4096] = "";
    int rc = ZT_OK;
    if (a->output_dir && !saved)
        rc = save_checkpoint(t, step, err);
    if (rc)
        return rc;
    if (a->output_dir)
        snprintf(dir, sizeof dir, "%s/checkpoint-%ld", a->output_dir, step);
    if (t->rank0) {
        printf("%sstopped by %s after step %ld of %ld: ", a->progress ? "\n" : "",
               sig == SIGINT ? "SIGINT" : sig == SIGUSR2 ? "SIGUSR2 (a stop request)" : "SIGTERM", step, a->max_steps);
        if (a->output_dir)
            printf("checkpoint saved to %s; continue with --resume_from_checkpoint latest\n", dir);
        else
            printf("nothing saved (no --output_dir)\n");
        fflush(stdout);
    }
    return sig == SIGINT ? ZT_EINTERRUPT : ZT_OK;
}

/* Running ahead (docs/gpu.md): may step n's (1-based) numbers be read after step
 * n+1's forward and backward are queued?  Only where the engine's step does not
 * wait by itself (fast mode), and only where nothing the host decides after step n
 * needs the state after step n, or changes what step n+1 computes:
 *   - an evaluation or a checkpoint after step n reads the state of step n;
 *   - the last step ends the run.
 * fp16's loss scale for step n+1's backward depends on step n's overflow, but the
 * device decides it (the verdict) and step n+1's backward reads it there
 * (zt_step_grad_scale), so fp16 runs ahead too; its floor stop, read from step n,
 * comes with step n+1's passes queued and its update not, and saves nothing, as
 * the synchronous run's does.
 * A graphed run (--cuda_graphs) runs ahead too: its passes and its update are
 * separate graphs, and a step's passes read another set of token buffers than any
 * step still in flight (step_graph.h).
 * What step n decides still comes out as the synchronous run's: its record and
 * progress line (written when it is read, in order), the non-finite stop and the
 * skip count (the schedule's step count, kept on the device: zt_engine_set_schedule),
 * and a stop request (answered before step n+1 begins: every step queued is read,
 * and the checkpoint holds the last). */
static int may_run_ahead(const trainer *t, long n)
{
    return zt_engine_runs_ahead(t->r.eng) && n < t->nsteps && !eval_due(t, n) && !checkpoint_due(t, n);
}

/* After step n ran ahead with `queued` steps unread: are they read after the next
 * step's passes?  Lazy (fast mode): at the logged steps
 * (--logging_steps), and when `depth` steps are in flight, the most the engine's
 * readback slots and the captured step's token sets hold; otherwise at every step. */
static int read_due(const trainer *t, long n, int queued)
{
    return !t->lazy || n % t->log_every == 0 || queued >= t->depth;
}

/* A queued step's end: its numbers back (the first of a batch waits for them all),
 * its record and progress line, the checks that may stop the run.  current: the
 * loop's own step, whose profiled window closes here (a step that ran ahead closes
 * its window when queued). */
static int step_tail(trainer *t, step_run *run, int current, zt_err *err)
{
    long step_now = t->comm->step;
    t->comm->step = run->m.step; /* the flight recorder names the step these collectives finish */
    step_finish(t, run);
    int hl = zt_prof_begin("log", "phase", ZT_PROF_COMPUTE);
    int rc = log_step(t, &run->m, err);
    zt_prof_end(hl, 0.0, 0.0);
    t->comm->step = step_now;
    if (rc)
        return rc;
    if (current && (rc = zt_prof_step_end(err))) /* waits for the device once, in a profiled step */
        return rc;
    if ((rc = check_finite(t, &run->m, err)) || (rc = check_overflow(t, &run->m, err)))
        return rc;
    return ZT_OK;
}

/* The steps in flight: runs[s % NRUNS] is step s's (0-based), steps lo .. lo+n-1 are
 * queued and not read yet.  One more run than the steps in flight: the next step's
 * passes fill its run while they are still unread. */
#define NRUNS (ZT_STEPS_IN_FLIGHT + 1)
typedef struct in_flight {
    step_run runs[NRUNS];
    long lo;
    int n;
} in_flight;

/* Read every step in flight, oldest first: one wait for them all (the engine's first
 * finish), then each one's record, progress line and checks in order, as the
 * synchronous run takes them.  A check that stops the run stops the reading there:
 * the later steps' records are never written, and nothing is saved (a stop on an inf
 * or NaN, or at fp16's floor, saves nothing), so what the device did after the
 * halting step is never seen.  current: the loop's own step (-1: none among them). */
static int read_in_flight(trainer *t, in_flight *f, long current, zt_err *err)
{
    int rc = ZT_OK;
    t->batch_n = f->n;
    t->batch_left = 0;
    while (rc == ZT_OK && f->n > 0) {
        long s = f->lo++;
        f->n--;
        rc = step_tail(t, &f->runs[s % NRUNS], s == current, err);
    }
    return rc;
}

int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err)
{
    trainer t;
    zt_preempt_install(); /* a first SIGTERM/SIGINT is a request, answered at a step boundary */
    int rc = train_setup(&t, a, err), stopped = 0, due = 0;
    in_flight *f = zt_alloc(ZT_MEM_OTHER, sizeof *f); /* nine step_runs: kept off the stack */
    if (f)
        f->lo = 0, f->n = 0;
    else if (rc == ZT_OK)
        rc = zt_fail(err, ZT_EFAIL, "out of memory for the steps in flight");
    for (long s = t.first_step; rc == ZT_OK && s < t.nsteps; s++) {
        step_run *run = &f->runs[s % NRUNS];
        if (f->n) { /* a stop request after the steps in flight, before this one begins */
            int sig = stop_signal(&t);
            if (sig) {
                long last = f->lo + f->n;
                if ((rc = read_in_flight(&t, f, -1, err)) == ZT_OK)
                    rc = stop_for_signal(&t, last, sig, 0, err);
                stopped = 1;
                break;
            }
        }
        zt_prof_step_begin(s + 1); /* --profile: a no-op outside --profile_steps */
        rc = train_step(&t, s, run, err);
        if (due && f->n) { /* the steps before: their numbers, now that this step's passes are queued */
            zt_err aerr = {0};
            int arc = read_in_flight(&t, f, -1, rc ? &aerr : err); /* a failed pass keeps its own error */
            rc = rc ? rc : arc;
        }
        due = 0;
        if (rc)
            break;
        if ((rc = step_queue(&t, s, run, err)))
            break;
        if (f->n++ == 0)
            f->lo = s;
        if (may_run_ahead(&t, s + 1)) {
            due = read_due(&t, s + 1, f->n);
            if ((rc = zt_prof_step_end(err)))
                break;
            continue;
        }
        if ((rc = read_in_flight(&t, f, s, err)))
            break;
        if (eval_due(&t, s + 1) && (rc = evaluate(&t, s + 1, err)))
            break;
        int saved = checkpoint_due(&t, s + 1);
        if (saved)
            rc = save_checkpoint(&t, s + 1, err);
        int sig = rc == ZT_OK && s + 1 < t.nsteps ? stop_signal(&t) : 0;
        if (sig) {
            rc = stop_for_signal(&t, s + 1, sig, saved, err);
            stopped = 1;
            break;
        }
    }
    if (rc == ZT_OK && !stopped)
        rc = train_finish(&t, res, err);
    train_close(&t);
    zt_free(ZT_MEM_OTHER, f, sizeof *f);
    zt_preempt_restore();
    return rc;
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
    run_free(&r);
    zt_comm_free(&local);
    return rc;
}
