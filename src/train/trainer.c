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
#include "batches.h"

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
                    zt_precision prec, zt_wrap_policy wrap, long min_num_params, int shuffle,
                    uint64_t seed, int checkpointing, zt_err *err)
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
    if ((rc = zt_layout_build(&r->lay, &r->cfg, wrap, (size_t)min_num_params, 1, err)))
        return rc;
    r->have_lay = 1;
    if ((rc = zt_engine_init(&r->eng, &r->lay, prec, err)))
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

static void print_memory(FILE *f, const zt_model *m)
{
    fprintf(f, "memory per rank:");
    for (int c = 0; c < ZT_MEM_NCAT; c++)
        fprintf(f, " %s %.1f MiB%s", zt_mem_cat_name((zt_mem_cat)c),
                (double)zt_mem_current((zt_mem_cat)c) / 1048576.0, c + 1 < ZT_MEM_NCAT ? "," : "");
    fprintf(f, "\nactivations: %.0f bytes per token\n", (double)m->act_bytes / (double)m->N);
}

int zt_train(const zt_train_args *a, zt_train_result *res, zt_err *err)
{
    run_state r;
    FILE *log = NULL;
    int rc = run_open(&r, a->model_dir, a->data_path, a->block_size, a->batch_size, a->prec,
                      a->wrap, a->min_num_params, a->shuffle, a->seed, a->checkpointing, err);
    if (rc)
        goto done;
    const int B = a->batch_size, A = a->grad_accum, W = 1, T = a->block_size;
    const double tokens_per_step = (double)B * A * W * T;
    const float grad_scale = (float)(1.0 / tokens_per_step);
    double flops_tok = zt_model_flops_per_token(&r.cfg, T, a->checkpointing);
    double peak = a->peak_gflops > 0 ? a->peak_gflops : zt_matmul_peak_gflops(a->prec.compute);

    if (a->log_jsonl && !(log = fopen(a->log_jsonl, "w"))) {
        rc = zt_fail(err, ZT_EINPUT, "--log_jsonl %s: cannot open for writing", a->log_jsonl);
        goto done;
    }
    if (!a->quiet) {
        printf("model: %zu parameters, %d layers, hidden %d, vocab %d; %d units (%s)\n",
               r.lay.numel, r.cfg.num_hidden_layers, r.cfg.hidden_size, r.cfg.vocab_size,
               r.lay.nunits, zt_wrap_policy_name(a->wrap));
        printf("precision: load %s | master %s | compute %s | reduce %s | optimizer %s\n",
               zt_dtype_name(a->prec.load), zt_dtype_name(a->prec.master),
               zt_dtype_name(a->prec.compute), zt_dtype_name(a->prec.reduce),
               zt_dtype_name(a->prec.master));
        printf("data: %zu tokens, %zu windows of %d; global batch %d x %d x %d = %.0f tokens/step\n",
               r.tokens.n, r.batcher.nwin, T, B, A, W, tokens_per_step);
        print_memory(stdout, &r.model);
        fflush(stdout);
    }

    long nsteps = a->stop_after_steps > 0 && a->stop_after_steps < a->max_steps ? a->stop_after_steps
                                                                                : a->max_steps;
    double t_start = now_s(), loss = NAN, tps = 0.0;
    for (long s = 0; s < nsteps; s++) {
        double t0 = now_s();
        zt_engine_zero_grads(&r.eng);
        double loss_sum = 0.0;
        for (int micro = 0; micro < A; micro++) {
            long k0 = zt_sample_index(s, micro, 0, B, A, W);
            zt_batcher_fill(&r.batcher, k0, B, r.inputs, r.targets);
            double ls = 0.0;
            if ((rc = zt_model_step(&r.model, r.inputs, r.targets, 1, grad_scale, &ls, err)))
                goto done;
            loss_sum += ls;
        }
        double lr = a->adam.lr * zt_lr_factor(a->schedule, s, a->max_steps, a->warmup_steps);
        double gnorm = 0.0;
        zt_engine_step(&r.eng, &a->adam, lr, a->max_grad_norm, &gnorm);
        loss = loss_sum / tokens_per_step;
        double dt = now_s() - t0;
        tps = tokens_per_step / dt / W;
        double mfu = peak > 0 ? flops_tok * tps / (peak * 1e9) : 0.0;
        if (log) {
            fprintf(log,
                    "{\"step\": %ld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                    "\"tokens_per_sec_per_device\": %.2f, \"step_time_s\": %.6f, \"mfu\": %.5f, "
                    "\"memory_bytes\": {",
                    s + 1, loss, gnorm, lr, tps, dt, mfu);
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                fprintf(log, "\"%s\": %zu%s", zt_mem_cat_name((zt_mem_cat)c),
                        zt_mem_current((zt_mem_cat)c), c + 1 < ZT_MEM_NCAT ? ", " : "");
            fprintf(log, "}}\n");
            fflush(log);
        }
        if (a->progress)
            draw_progress(s + 1, nsteps, loss, tps, now_s() - t_start);
        if (a->save_steps > 0 && (s + 1) % a->save_steps == 0 && s + 1 < nsteps &&
            a->output_dir) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/checkpoint-%ld", a->output_dir, s + 1);
            if ((rc = zt_hf_save(dir, &r.cfg, &r.lay, &r.eng, a->prec.save, a->max_shard_bytes, err)))
                goto done;
        }
    }
    double elapsed = now_s() - t_start;
    if (res) {
        res->final_loss = loss;
        res->steps = nsteps;
        res->tokens_per_sec = elapsed > 0 ? tokens_per_step * (double)nsteps / elapsed : 0.0;
    }
    if (a->output_dir && (rc = zt_hf_save(a->output_dir, &r.cfg, &r.lay, &r.eng, a->prec.save, a->max_shard_bytes, err)))
        goto done;
    if (!a->quiet) {
        printf("trained %ld steps in %.1f s (%.0f tokens/s); final loss %.4f\n", nsteps, elapsed,
               tokens_per_step * (double)nsteps / elapsed, loss);
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
    zt_precision prec = {ZT_F32, ZT_F32, a->compute, a->compute, ZT_F32};
    int rc = run_open(&r, a->model_dir, a->data_path, a->block_size, a->batch_size, prec,
                      ZT_WRAP_TRANSFORMER, 0, 0, 0, 0, err);
    if (rc)
        goto done;
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
