/* trainer.c — training and evaluation loops (see trainer.h). */
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/mem.h"
#include "../io/hf_model.h"
#include "../io/tokens.h"
#include "../kernels/matmul.h"
#include "../model/llama.h"
#include "../plan/plan.h"
#include "../engine/loss_scale.h"
#include "batches.h"
#include "checkpoint.h"

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
    zt_engine eng;
    zt_model model;
    zt_batcher batcher;
    int *inputs, *targets;
    size_t io_bytes;
    int have_lay, have_eng, have_model, have_batcher;
} run_state;

static void run_free(run_state *r)
{
    zt_free(ZT_MEM_OTHER, r->inputs, r->io_bytes);
    zt_free(ZT_MEM_OTHER, r->targets, r->io_bytes);
    if (r->have_batcher)
        zt_batcher_free(&r->batcher);
    if (r->have_model)
        zt_model_free(&r->model);
    if (r->have_eng)
        zt_engine_free(&r->eng);
    if (r->have_lay)
        zt_layout_free(&r->lay);
    zt_tokens_free(&r->tokens);
}

/* Load config, data and weights; build layout, engine, model and batcher. */
static int run_open(run_state *r, const char *model_dir, const char *data_path, int T, int B,
                    const zt_plan *plan, zt_comm *comm, int shuffle, uint64_t seed, int checkpointing,
                    zt_err *err)
{
    memset(r, 0, sizeof *r);
    int rc;
    if ((rc = zt_hf_read_config_dir(model_dir, &r->cfg, err)))
        return rc;
    if (T > r->cfg.max_position_embeddings)
        return zt_fail(err, ZT_EINPUT,
                       "--block_size %d exceeds the model's max_position_embeddings %d (%s/config.json)",
                       T, r->cfg.max_position_embeddings, model_dir);
    if ((rc = zt_tokens_load(data_path, &r->tokens, err)))
        return rc;
    if (r->tokens.max_id >= r->cfg.vocab_size)
        return zt_fail(err, ZT_EINPUT, "%s: token id %d is outside the model's vocabulary (vocab_size %d)",
                       data_path, r->tokens.max_id, r->cfg.vocab_size);
    if ((rc = zt_layout_build(&r->lay, &r->cfg, plan->wrap, (size_t)plan->min_num_params,
                              comm->shard_size, err)))
        return rc;
    r->have_lay = 1;
    if ((rc = zt_engine_init(&r->eng, &r->lay, plan->prec, plan->stage, &plan->overlap, comm, err)))
        return rc;
    r->have_eng = 1;
    if ((rc = zt_hf_load_params(model_dir, &r->lay, &r->eng, err)))
        return rc;
    if ((rc = zt_model_init(&r->model, &r->cfg, &r->lay, &r->eng, B, T, checkpointing, err)))
        return rc;
    r->have_model = 1;
    if ((rc = zt_batcher_init(&r->batcher, &r->tokens, T, shuffle, seed, data_path, err)))
        return rc;
    r->have_batcher = 1;
    r->io_bytes = (size_t)B * T * sizeof(int);
    r->inputs = zt_alloc(ZT_MEM_OTHER, r->io_bytes);
    r->targets = zt_alloc(ZT_MEM_OTHER, r->io_bytes);
    if (!r->inputs || !r->targets)
        return zt_fail(err, ZT_EFAIL, "out of memory for batch buffers");
    return ZT_OK;
}

static void draw_progress(long step, long total, double loss, double tps, double elapsed)
{
    const int width = 30;
    int filled = (int)((double)width * (double)step / (double)total);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double eta = step ? elapsed / (double)step * (double)(total - step) : 0.0;
    fprintf(stderr, "\r[%s] %ld/%ld loss %.4f  %.0f tok/s  %.0fs left ", bar, step, total, loss,
            tps, eta);
    if (step == total)
        fputc('\n', stderr);
    fflush(stderr);
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
    snprintf(p.strategy, sizeof p.strategy, "data parallel (ZeRO-0)");
    return p;
}

static void print_memory(FILE *f, const zt_engine *eng, const zt_model *m)
{
    zt_engine_bytes b = zt_engine_state_bytes(eng);
    const double MiB = 1048576.0;
    fprintf(f, "memory per rank: master params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, "
               "gathered params %.2f MiB, comm buffers %.2f MiB, activations %.2f MiB\n",
            (double)b.master / MiB, (double)b.grads / MiB, (double)b.optim / MiB,
            (double)b.gathered / MiB, (double)b.comm / MiB, (double)m->act_bytes / MiB);
    fprintf(f, "activations: %.0f bytes per token\n", (double)m->act_bytes / (double)m->N);
}

/* ---- all ranks agree before the first collective that moves data ---------- */

enum { D_PLAN, D_PRECISION, D_MODEL, D_BATCH, D_OPTIM, D_SCHEDULE, D_DATA, D_NFIELDS };
static const char *digest_field[D_NFIELDS] = {
    "plan (face, stage, groups, wrap, overlap)", "precision (dtypes)", "model config", "batch (B, A, T)",
    "optimizer hyper-parameters", "schedule and steps", "data (token stream)"};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull
#define MIX(h, x) ((h) = fnv((h), &(x), sizeof(x)))

static void make_digest(const zt_train_args *a, const run_state *r, uint64_t d[D_NFIELDS])
{
    for (int i = 0; i < D_NFIELDS; i++)
        d[i] = FNV0;
    const zt_plan *p = &a->plan;
    MIX(d[D_PLAN], p->face); MIX(d[D_PLAN], p->stage); MIX(d[D_PLAN], p->hybrid);
    MIX(d[D_PLAN], p->group_size); MIX(d[D_PLAN], p->wrap); MIX(d[D_PLAN], p->min_num_params);
    MIX(d[D_PLAN], a->checkpointing);
    d[D_PLAN] = fnv(d[D_PLAN], &p->overlap, sizeof p->overlap); /* same collectives in the same order */
    d[D_PRECISION] = fnv(d[D_PRECISION], &p->prec, sizeof p->prec);
    const zt_llama_config *c = &r->cfg;
    int ints[] = {c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
                  c->num_key_value_heads, c->head_dim, c->vocab_size, c->tie_word_embeddings};
    double dbls[] = {c->rms_norm_eps, c->rope_theta};
    d[D_MODEL] = fnv(fnv(d[D_MODEL], ints, sizeof ints), dbls, sizeof dbls);
    MIX(d[D_BATCH], a->batch_size); MIX(d[D_BATCH], a->grad_accum); MIX(d[D_BATCH], a->block_size);
    d[D_OPTIM] = fnv(d[D_OPTIM], &a->adam, sizeof a->adam);
    MIX(d[D_OPTIM], a->max_grad_norm);
    MIX(d[D_SCHEDULE], a->schedule); MIX(d[D_SCHEDULE], a->warmup_steps); MIX(d[D_SCHEDULE], a->max_steps);
    MIX(d[D_SCHEDULE], a->stop_after_steps); MIX(d[D_SCHEDULE], a->shuffle); MIX(d[D_SCHEDULE], a->seed);
    MIX(d[D_DATA], r->tokens.n);
    d[D_DATA] = fnv(d[D_DATA], r->tokens.ids, r->tokens.n * sizeof *r->tokens.ids);
}

static int check_agreement(const zt_train_args *a, const run_state *r, zt_comm *comm, zt_err *err)
{
    if (comm->world == 1)
        return ZT_OK;
    uint64_t mine[D_NFIELDS], *all = zt_alloc(ZT_MEM_OTHER, (size_t)comm->world * sizeof mine);
    if (!all)
        return zt_fail(err, ZT_EFAIL, "out of memory for the agreement check");
    make_digest(a, r, mine);
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

/* Every rank learns the worst status; the ranks that did not fail return it
 * with an empty message, so each error is printed once, by its own rank. */
static int agree(zt_comm *comm, int rc, zt_err *err)
{
    int worst = zt_comm_max_int(comm, rc);
    if (worst != ZT_OK && rc == ZT_OK)
        return zt_fail(err, worst, "%s", "");
    return rc;
}

int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err)
{
    run_state r;
    FILE *log = NULL;
    zt_comm local, *comm = a->comm;
    if (!comm) {
        zt_comm_create_local(&local);
        comm = &local;
    }
    const int rank0 = comm->rank == 0, W = comm->world;
    const int talk = rank0 && !a->quiet;
    int rc = run_open(&r, a->model_dir, a->data_path, a->block_size, a->batch_size, &a->plan, comm,
                      a->shuffle, a->seed, a->checkpointing, err);
    if (rc == ZT_OK && rank0 && a->log_jsonl && !(log = fopen(a->log_jsonl, "w")))
        rc = zt_fail(err, ZT_EINPUT, "--log_jsonl %s: cannot open for writing", a->log_jsonl);
    if ((rc = agree(comm, rc, err)))
        goto done;
    if ((rc = agree(comm, check_agreement(a, &r, comm, err), err)))
        goto done;
    zt_ckpt_state resumed = {0};
    if (a->resume_dir && (rc = agree(comm, zt_ckpt_load(a->resume_dir, &r.eng, &a->plan, &resumed, err), err)))
        goto done;
    zt_engine_refresh_gathered(&r.eng);
    memset(comm->bytes, 0, sizeof comm->bytes);

    const int B = a->batch_size, A = a->grad_accum, T = a->block_size;
    const double tokens_per_step = (double)B * A * W * T;
    const float grad_scale = (float)(1.0 / tokens_per_step);
    double flops_tok = zt_model_flops_per_token(&r.cfg, T, a->checkpointing);
    double peak = a->peak_gflops > 0 ? a->peak_gflops : zt_matmul_peak_gflops(a->plan.prec.compute);
    if (talk) {
        printf("model: %zu parameters, %d layers, hidden %d, vocab %d; %d units\n", r.lay.numel,
               r.cfg.num_hidden_layers, r.cfg.hidden_size, r.cfg.vocab_size, r.lay.nunits);
        zt_plan_print(stdout, &a->plan);
        printf("data: %zu tokens, %zu windows of %d; global batch %d x %d x %d = %.0f tokens/step\n",
               r.tokens.n, r.batcher.nwin, T, B, A, W, tokens_per_step);
        print_memory(stdout, &r.eng, &r.model);
        fflush(stdout);
    }

    long nsteps = a->stop_after_steps > 0 && a->stop_after_steps < a->max_steps ? a->stop_after_steps
                                                                                : a->max_steps;
    double t_start = now_s(), loss = NAN, tps = 0.0;
    uint64_t before[ZT_COLL_NKINDS] = {0}, step_bytes[ZT_COLL_NKINDS] = {0};
    int lost_streak = 0, warned = 0;
    zt_loss_scaler scaler;
    const zt_plan *pl = &a->plan;
    zt_loss_scaler_init(&scaler, pl->ls_initial_scale_power, pl->ls_window, pl->ls_hysteresis, pl->ls_min_scale);
    long first_step = 0;
    if (a->resume_dir) { /* the saved scaler state, under this plan's settings */
        first_step = resumed.step;
        scaler.scale = resumed.scaler.scale;
        scaler.cur_hysteresis = resumed.scaler.cur_hysteresis;
        scaler.iter = resumed.scaler.iter;
        scaler.last_overflow_iter = resumed.scaler.last_overflow_iter;
        scaler.skipped = resumed.scaler.skipped;
        if (talk)
            printf("resumed from %s at step %ld\n", a->resume_dir, first_step);
    }
    for (long s = first_step; s < nsteps; s++) {
        double t0 = now_s(), wait0 = comm->wait_s, progress0 = comm->progress_s;
        memcpy(before, comm->bytes, sizeof before);
        zt_engine_zero_grads(&r.eng);
        double loss_sum = 0.0;
        /* fp16: backward runs on loss * scale; the step divides it back out */
        double scale = pl->loss_scaling ? scaler.scale : 1.0;
        for (int micro = 0; micro < A; micro++) {
            long k0 = zt_sample_index(s, micro, comm->rank, B, A, W);
            zt_batcher_fill(&r.batcher, k0, B, r.inputs, r.targets);
            double ls = 0.0;
            /* the last micro-batch's backward may start the step's reduction */
            zt_engine_sync_backward(&r.eng, micro == A - 1);
            /* a failing matrix product is not bad input: stop every rank.  The others
             * are inside (or about to enter) this step's collectives and would wait
             * for this rank forever, so on several ranks the job is aborted here. */
            if (a->inject_failure_step == s + 1 && a->inject_failure_rank == comm->rank)
                rc = zt_fail(err, ZT_EFAIL, "injected failure at step %ld (tests)", s + 1);
            else
                rc = zt_model_step(&r.model, r.inputs, r.targets, 1, (float)(grad_scale * scale), &ls, err);
            if (rc) {
                if (W > 1) {
                    fprintf(stderr, "ztrain: error: rank %d: %s\n", comm->rank, err->msg);
                    fflush(stderr);
                    zt_comm_abort(1);
                }
                goto done;
            }
            loss_sum += ls;
        }
        zt_engine_sync_backward(&r.eng, 0);
        /* the schedule counts applied updates: a step skipped on fp16 overflow does
         * not advance it, as DeepSpeed's engine does not step its scheduler then */
        long u = r.eng.optimizer_steps;
        double lr = a->adam.lr * zt_lr_factor(a->schedule, u, a->max_steps, a->warmup_steps);
        double gnorm = 0.0;
        long inj = a->inject_nonfinite_step, inj_n = a->inject_nonfinite_count > 0 ? a->inject_nonfinite_count : 1;
        if (inj > 0 && s + 1 >= inj && s + 1 < inj + inj_n && a->inject_nonfinite_rank == comm->rank)
            zt_engine_inject_nonfinite(&r.eng);
        int skipped = zt_engine_step(&r.eng, &a->adam, lr, a->max_grad_norm, 1.0 / scale, &gnorm);
        if (pl->loss_scaling)
            zt_loss_scaler_update(&scaler, skipped);
        loss = zt_comm_sum_double(comm, loss_sum, ZT_SCOPE_WORLD) / tokens_per_step;
        for (int k = 0; k < ZT_COLL_NKINDS; k++)
            step_bytes[k] = comm->bytes[k] - before[k];
        double dt = now_s() - t0;
        double wait_s = comm->wait_s - wait0, progress_s = comm->progress_s - progress0;
        tps = tokens_per_step / dt / W;
        double mfu = peak > 0 ? flops_tok * tps / (peak * 1e9) : 0.0;
        /* lost-update audit: warn once when most updates vanish for several steps */
        const zt_adamw_audit *au = &r.eng.last_audit;
        double lost_frac = au->updated > 0 ? au->lost / au->updated : 0.0;
        double ulp_ratio = au->updated > 0 ? au->ratio_sum / au->updated : 0.0;
        lost_streak = lost_frac > 0.5 ? lost_streak + 1 : 0;
        if (lost_streak >= 3 && !warned && rank0) {
            fprintf(stderr, "%swarning: %.0f%% of parameter updates were rounded away in the last %d "
                    "steps (mean |update| = %.2f half-ulps of the %s master weights); the model is barely "
                    "training. Keep an fp32 master with --mixed_precision bf16 (Accelerate's upcast), or "
                    "compensate the bf16 master with --master_compensation kahan.\n",
                    a->progress ? "\n" : "", 100.0 * lost_frac, lost_streak, ulp_ratio,
                    zt_dtype_name(a->plan.prec.master));
            warned = 1;
        }
        if (log) {
            fprintf(log,
                    "{\"step\": %ld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                    "\"tokens_per_sec_per_device\": %.2f, \"step_time_s\": %.6f, \"mfu\": %.5f, "
                    "\"lost_update_fraction\": %.6f, \"update_to_half_ulp\": %.6g, \"loss_scale\": %.9g, "
                    "\"skipped\": %d, \"memory_bytes\": {",
                    s + 1, loss, isfinite(gnorm) ? gnorm : -1.0, lr, tps, dt, mfu, lost_frac, ulp_ratio,
                    pl->loss_scaling ? scale : 0.0, skipped);
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c),
                        zt_mem_current((zt_mem_cat)c), c + 1 < ZT_MEM_NCAT ? ", " : "");
            fprintf(log, "}, \"comm_bytes\": {");
            for (int k = 0; k < ZT_COLL_NKINDS; k++)
                fprintf(log, "\"%s\": %llu%s", zt_coll_kind_name((zt_coll_kind)k),
                        (unsigned long long)step_bytes[k], k + 1 < ZT_COLL_NKINDS ? ", " : "");
            fprintf(log, "}, \"comm_wait_s\": %.6f, \"comm_progress_s\": %.6f}\n", wait_s, progress_s);
            fflush(log);
        }
        if (a->progress && rank0)
            draw_progress(s + 1, nsteps, loss, tps, now_s() - t_start);
        if (a->save_steps > 0 && (s + 1) % a->save_steps == 0 && s + 1 < nsteps && a->output_dir) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/checkpoint-%ld", a->output_dir, s + 1);
            zt_ckpt_state cs = {s + 1, r.eng.optimizer_steps, scaler};
            if ((rc = zt_hf_save(dir, &r.cfg, &r.lay, &r.eng, a->plan.prec.save, a->max_shard_bytes,
                                 rank0, err)) ||
                (rc = zt_ckpt_save(dir, &r.eng, &a->plan, &cs, err)))
                goto done;
        }
    }
    double elapsed = now_s() - t_start;
    if (res) {
        res->final_loss = loss;
        res->steps = nsteps - first_step;
        res->tokens_per_sec = elapsed > 0 ? tokens_per_step * (double)(nsteps - first_step) / elapsed / W : 0.0;
        res->state = zt_engine_state_bytes(&r.eng);
        res->activation_bytes = r.model.act_bytes;
        memcpy(res->step_bytes, step_bytes, sizeof step_bytes);
        res->skipped_steps = scaler.skipped;
        res->loss_scale = pl->loss_scaling ? scaler.scale : 0.0;
        res->prefetch_used = r.eng.prefetch_used;
        res->prefetch_dropped = r.eng.prefetch_dropped;
        res->reduce_overlapped = r.eng.reduce_overlapped;
    }
    if (a->output_dir &&
        (rc = zt_hf_save(a->output_dir, &r.cfg, &r.lay, &r.eng, a->plan.prec.save, a->max_shard_bytes,
                         rank0, err)))
        goto done;
    if (talk) {
        printf("trained %ld steps in %.1f s (%.0f tokens/s per device); final loss %.4f\n", nsteps - first_step,
               elapsed, tokens_per_step * (double)(nsteps - first_step) / elapsed / W, loss);
        if (a->output_dir)
            printf("model saved to %s\n", a->output_dir);
    }
done:
    if (log)
        fclose(log);
    run_free(&r);
    return rc;
}

int zt_eval(const zt_eval_args *a, double *mean_loss, long *tokens, zt_err *err)
{
    run_state r;
    zt_plan plan = zt_plan_single((zt_precision){ZT_F32, ZT_F32, a->compute, a->compute, ZT_F32, 0},
                                  ZT_WRAP_TRANSFORMER);
    zt_comm local;
    zt_comm_create_local(&local);
    int rc = run_open(&r, a->model_dir, a->data_path, a->block_size, a->batch_size, &plan, &local, 0,
                      0, 0, err);
    if (rc)
        goto done;
    zt_engine_refresh_gathered(&r.eng);
    /* Whole batches of consecutive windows; the tail that does not fill a batch is dropped. */
    long nbatches = (long)(r.batcher.nwin / (size_t)a->batch_size);
    if (a->max_batches > 0 && a->max_batches < nbatches)
        nbatches = a->max_batches;
    if (nbatches == 0) {
        rc = zt_fail(err, ZT_EINPUT, "%s: fewer than %d windows of %d tokens; nothing to evaluate",
                     a->data_path, a->batch_size, a->block_size);
        goto done;
    }
    double sum = 0.0;
    for (long b = 0; b < nbatches; b++) {
        zt_batcher_fill(&r.batcher, b * a->batch_size, a->batch_size, r.inputs, r.targets);
        double ls = 0.0;
        if ((rc = zt_model_step(&r.model, r.inputs, r.targets, 0, 0.0f, &ls, err)))
            goto done;
        sum += ls;
    }
    *tokens = nbatches * a->batch_size * a->block_size;
    *mean_loss = sum / (double)*tokens;
done:
    run_free(&r);
    return rc;
}
