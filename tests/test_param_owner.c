/* test_param_owner.c — the model reaches its parameters only through the owner
 * table (param_owner.h): the engine while training, the frozen weights for
 * evaluation.  Evaluation holds no gradient, optimizer or communication state,
 * and the two owners give the same numbers.  Runs on the gqa_tied fixture. */
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/engine/engine.h"
#include "../src/io/hf_model.h"
#include "../src/io/tokens.h"
#include "../src/model/frozen.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "../src/train/trainer.h"
#include "../src/train/weights.h"
#include "test.h"

static const char *FIX = "tests/fixtures/gqa_tied";
static const char *TOKENS = "tests/fixtures/gqa_tied/tokens.npy";
enum { B = 2, T = 16 };

/* The first batch of consecutive windows, as evaluation reads it. */
static void first_batch(const zt_llama_config *cfg, int *in, int *tg)
{
    zt_err err;
    zt_tokens tok;
    zt_batcher bat;
    ZT_CHECK(zt_tokens_load(TOKENS, &tok, &err) == ZT_OK);
    ZT_CHECK(zt_batcher_init(&bat, &tok, T, 0, 0, TOKENS, &err) == ZT_OK);
    zt_batcher_fill(&bat, 0, B, in, tg);
    for (int i = 0; i < B * T; i++)
        ZT_CHECK(in[i] >= 0 && in[i] < cfg->vocab_size);
    zt_batcher_free(&bat);
    zt_tokens_free(&tok);
}

static void frozen_sink(void *f, const zt_param *p, const void *src, zt_dtype dt)
{
    zt_frozen_set_param(f, p, src, dt);
}

/* Forward the first batch through a model whose parameters the engine owns (as
 * evaluation did before it had an owner of its own) or through frozen weights;
 * the loss sum and a copy of the logits come back. */
static double forward(int use_engine, zt_dtype cd, float *logits)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    zt_frozen_params fr;
    zt_model m;
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    zt_param_owner own;
    if (use_engine) {
        ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, (zt_precision){.load = ZT_F32, .master = ZT_F32, .compute = cd, .reduce = cd, .save = ZT_F32}, 0, NULL, &comm,
                                &err) == ZT_OK);
        ZT_CHECK(zt_hf_load_params(FIX, &lay, eng, &err) == ZT_OK);
        zt_engine_refresh_gathered(eng);
        own = zt_engine_param_owner(eng);
    } else {
        ZT_CHECK(zt_frozen_init(&fr, &lay, cd, zt_backend_cpu(), &err) == ZT_OK);
        ZT_CHECK(zt_hf_load_params_to(FIX, &lay, frozen_sink, &fr, &err) == ZT_OK);
        own = zt_frozen_owner(&fr);
    }
    ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK);
    int in[B * T], tg[B * T];
    first_batch(&cfg, in, tg);
    double loss = 0.0;
    ZT_CHECK_MSG(zt_model_forward(&m, in, tg, &loss, &err) == ZT_OK, "%s", err.msg);
    memcpy(logits, zt_model_logits(&m), sizeof(float) * B * T * (size_t)cfg.vocab_size);
    if (!use_engine) {
        /* forward only: a backward is refused as an error, and leaves nothing acquired */
        double l2;
        ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f, &l2, &err) == ZT_EINPUT);
        ZT_CHECK(strstr(err.msg, "no gradients") != NULL);
        for (int u = 0; u < lay.nunits; u++)
            ZT_CHECK(fr.acquired[u] == 0);
    }
    zt_model_free(&m);
    if (use_engine)
        zt_engine_destroy(eng);
    else
        zt_frozen_free(&fr);
    zt_layout_free(&lay);
    return loss;
}

/* The frozen weights give bit-identical logits and loss to the engine's gathered
 * copies, in fp32 and in bf16 compute. */
static void test_frozen_owner_matches_engine(void)
{
    zt_err err;
    zt_llama_config cfg;
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    size_t n = (size_t)B * T * (size_t)cfg.vocab_size;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (zt_dtype cd = ZT_F32; cd <= ZT_BF16; cd++) {
        double la = forward(1, cd, a), lb = forward(0, cd, b);
        ZT_CHECK_MSG(la == lb, "%s: loss %.9g (engine) vs %.9g (frozen)", zt_dtype_name(cd), la, lb);
        ZT_CHECK(memcmp(a, b, n * sizeof *a) == 0);
        ZT_CHECK(la > 0.0);
    }
    free(a);
    free(b);
}

/* Evaluation allocates no gradients, optimizer state, master copy or communication
 * buffers: only the weights in the compute dtype (and activations).  Before the
 * owner table it held the engine's full state; the figures are printed. */
static void test_eval_allocates_no_training_state(void)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    for (zt_dtype cd = ZT_F32; cd <= ZT_BF16; cd++) {
        size_t before[ZT_MEM_NCAT];
        for (int c = 0; c < ZT_MEM_NCAT; c++)
            before[c] = zt_mem_current(c);
        zt_mem_reset_peak();
        zt_eval_args a = {FIX, TOKENS, T, B, 1, cd, NULL, NULL};
        double loss = 0.0;
        long tokens = 0;
        ZT_CHECK_MSG(zt_eval(&a, &loss, &tokens, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK(tokens == B * T);
        size_t weights = lay.padded_numel * zt_dtype_size(cd);
        ZT_CHECK(zt_mem_peak(ZT_MEM_GRADS) == before[ZT_MEM_GRADS]);
        ZT_CHECK(zt_mem_peak(ZT_MEM_OPTIM) == before[ZT_MEM_OPTIM]);
        ZT_CHECK(zt_mem_peak(ZT_MEM_COMM) == before[ZT_MEM_COMM]);
        ZT_CHECK(zt_mem_peak(ZT_MEM_GATHERED) == before[ZT_MEM_GATHERED]);
        ZT_CHECK_MSG(zt_mem_peak(ZT_MEM_PARAMS) == before[ZT_MEM_PARAMS] + weights, "%zu vs %zu",
                     zt_mem_peak(ZT_MEM_PARAMS), weights);
        ZT_CHECK(zt_mem_peak(ZT_MEM_ACTIV) > 0);
        /* what the engine-owned evaluation held for the same plan (its estimate is
         * what it allocates: test_zero holds the two equal) */
        zt_engine_bytes old = zt_engine_estimate(&lay, (zt_precision){.load = ZT_F32, .master = ZT_F32, .compute = cd, .reduce = cd, .save = ZT_F32}, 0, 1,
                                                 NULL);
        size_t old_total = old.master + old.grads + old.optim + old.gathered + old.comm;
        ZT_CHECK(old.grads > 0 && old.optim > 0 && weights < old_total);
        printf("  eval %s, %zu parameters: engine-owned %zu bytes (master %zu, grads %zu, optimizer %zu, "
               "gathered %zu, comm %zu); frozen owner %zu bytes (weights only, grads 0, optimizer 0)\n",
               zt_dtype_name(cd), lay.numel, old_total, old.master, old.grads, old.optim, old.gathered,
               old.comm, weights);
        for (int c = 0; c < ZT_MEM_NCAT; c++)
            ZT_CHECK(zt_mem_current(c) == before[c]);
    }
    zt_layout_free(&lay);
}

/* ---- the backend seam: a counting table in place of the CPU's --------------- */

static const zt_backend *cpu;
static long n_matmul, n_matmul_out, n_norm_f, n_norm_b, n_att_f, n_att_b, n_xent, n_emb_f, n_emb_b, n_adamw, n_alloc;

static void *c_alloc(zt_mem_cat cat, size_t bytes)
{
    n_alloc++;
    return cpu->alloc(cat, bytes);
}
static int c_matmul(float *C, const void *A, zt_dtype a_dt, const void *Bm, zt_dtype b_dt, int M, int N, int K,
                    int ta, int tb, float beta, zt_dtype compute, zt_err *err)
{
    n_matmul++;
    return cpu->matmul(C, A, a_dt, Bm, b_dt, M, N, K, ta, tb, beta, compute, err);
}

static int c_matmul_out(void *D, zt_dtype d_dt, const void *R, const void *A, zt_dtype a_dt, const void *Bm,
                        zt_dtype b_dt, int M, int N, int K, int ta, int tb, zt_dtype compute, zt_err *err)
{
    n_matmul_out++;
    return cpu->matmul_out(D, d_dt, R, A, a_dt, Bm, b_dt, M, N, K, ta, tb, compute, err);
}
static void c_norm_f(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C, float eps)
{
    n_norm_f++;
    cpu->rmsnorm_forward(y, y_dt, rstd, x, w, N, C, eps);
}
static void c_norm_b(float *dx, uint16_t *dx16, float dxb, float *dw, float dwb, const float *dy, const float *x,
                     const float *w, const float *rstd, int N, int C)
{
    n_norm_b++;
    cpu->rmsnorm_backward(dx, dx16, dxb, dw, dwb, dy, x, w, rstd, N, C);
}
static void c_att_f(float *out, uint16_t *o16, float *lse, const float *qkv, void *scr, int Bn, int Tn, int nh,
                    int nkv, int hd, int window)
{
    n_att_f++;
    cpu->attention_forward(out, o16, lse, qkv, scr, Bn, Tn, nh, nkv, hd, window);
}
static void c_att_b(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, void *scr,
                    int Bn, int Tn, int nh, int nkv, int hd, int window)
{
    n_att_b++;
    cpu->attention_backward(dqkv, dout, qkv, out, lse, scr, Bn, Tn, nh, nkv, hd, window);
}
static double c_xent(float *dl, uint16_t *dl16, const float *lg, const int *tg, int N, int V, float gs)
{
    n_xent++;
    return cpu->xent(dl, dl16, lg, tg, N, V, gs);
}
static void c_emb_f(float *x, const void *wte, zt_dtype dt, const int *tok, int N, int C)
{
    n_emb_f++;
    cpu->embed_forward(x, wte, dt, tok, N, C);
}
static void c_emb_b(float *dw, const float *dx, const int *tok, int N, int C, int V, float beta)
{
    n_emb_b++;
    cpu->embed_backward(dw, dx, tok, N, C, V, beta);
}
static void c_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                         const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *st, zt_step_scalars *sc,
                         void *cast, zt_dtype cast_dt)
{
    n_adamw++;
    cpu->adamw_unit(p, m, v, g, comp, dt, n, segs, nsegs, st, sc, cast, cast_dt);
}

/* One training step (forward, backward, AdamW) on the gqa_tied fixture with the
 * engine's and the model's kernels taken from table be; the loss and the updated
 * parameters come back. */
static double train_step(const zt_backend *be, float **params, zt_layout *lay_out)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_comm comm;
    zt_engine *eng = NULL;
    zt_model m;
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(lay_out, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    ZT_CHECK(zt_engine_create(&eng, be, lay_out, ZT_PRECISION_ALL(ZT_F32), 0, NULL, &comm, &err) == ZT_OK);
    ZT_CHECK(zt_hf_load_params(FIX, lay_out, eng, &err) == ZT_OK);
    zt_engine_refresh_gathered(eng);
    zt_param_owner own = zt_engine_param_owner(eng);
    ZT_CHECK(own.backend == be);
    ZT_CHECK(zt_model_init(&m, &cfg, lay_out, &own, B, T, 0, &err) == ZT_OK);
    int in[B * T], tg[B * T];
    first_batch(&cfg, in, tg);
    double loss = 0.0, norm = 0.0;
    zt_engine_zero_grads(eng);
    ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK);
    zt_adamw_hparams hp = {1e-3, 0.1, 0.9, 0.999, 1e-8};
    ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 1.0, 1.0, &norm) == 0);
    ZT_CHECK(zt_engine_full_params(eng, params, &err) == ZT_OK);
    zt_model_free(&m);
    zt_engine_destroy(eng);
    return loss;
}

/* The model and the engine run every kernel through their backend table: a
 * counting table that forwards to the CPU's sees each call (per layer: two norms,
 * one attention, four products forward (two with the residual added) and eight
 * backward, and one AdamW launch per unit over its shard: the step's verdict and
 * AdamW are the device's, adamw_unit, in exact mode too), and the numbers are
 * bit-identical to the CPU table's. */
static void test_kernels_run_through_the_backend_table(void)
{
    cpu = zt_backend_cpu();
    zt_backend counting = *cpu;
    counting.name = "counting";
    counting.alloc = c_alloc;
    counting.matmul = c_matmul;
    counting.matmul_out = c_matmul_out;
    counting.rmsnorm_forward = c_norm_f;
    counting.rmsnorm_backward = c_norm_b;
    counting.attention_forward = c_att_f;
    counting.attention_backward = c_att_b;
    counting.xent = c_xent;
    counting.embed_forward = c_emb_f;
    counting.embed_backward = c_emb_b;
    counting.adamw_unit = c_adamw_unit;
    zt_layout lay;
    float *pa[64], *pb[64];
    zt_err err;
    zt_llama_config cfg;
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    ZT_CHECK(lay.nparams <= 64);
    for (int i = 0; i < lay.nparams; i++) {
        pa[i] = malloc(lay.params[i].numel * sizeof(float));
        pb[i] = malloc(lay.params[i].numel * sizeof(float));
    }
    zt_layout la, lb;
    double l_cpu = train_step(cpu, pa, &la);
    double l_cnt = train_step(&counting, pb, &lb);
    ZT_CHECK(l_cpu == l_cnt);
    for (int i = 0; i < lay.nparams; i++)
        ZT_CHECK_MSG(memcmp(pa[i], pb[i], lay.params[i].numel * sizeof(float)) == 0, "%s", lay.params[i].name);
    long L = cfg.num_hidden_layers;
    ZT_CHECK_MSG(n_norm_f == 2 * L + 1 && n_norm_b == 2 * L + 1, "norms %ld %ld", n_norm_f, n_norm_b);
    ZT_CHECK(n_att_f == L && n_att_b == L);
    /* lm_head: 1 forward, 2 backward; the two residual adds a layer are products with
     * the residual (matmul_out) */
    ZT_CHECK_MSG(n_matmul == 10 * L + 3 && n_matmul_out == 2 * L, "%ld products, %ld with a residual", n_matmul,
                 n_matmul_out);
    ZT_CHECK(n_xent == 1 && n_emb_f == 1 && n_emb_b == 1);
    ZT_CHECK_MSG(n_adamw == lay.nunits, "%ld AdamW launches for %d units", n_adamw, lay.nunits);
    ZT_CHECK(n_alloc > 0); /* the model's activations come from the owner's backend */
    for (int i = 0; i < lay.nparams; i++) {
        free(pa[i]);
        free(pb[i]);
    }
    zt_layout_free(&la);
    zt_layout_free(&lb);
    zt_layout_free(&lay);
}

/* ---- a pass that fails midway hands every unit back ------------------------ */

static long fail_at, n_calls;
static int failing_matmul(float *C, const void *A, zt_dtype a_dt, const void *Bm, zt_dtype b_dt, int M, int N,
                          int K, int ta, int tb, float beta, zt_dtype compute, zt_err *err)
{
    if (++n_calls == fail_at)
        return zt_fail(err, ZT_EFAIL, "injected product failure");
    return cpu->matmul(C, A, a_dt, Bm, b_dt, M, N, K, ta, tb, beta, compute, err);
}

/* A product that fails in the middle of a backward (a layer unit and the root in
 * use, gradients open, stage 3 so units also hold pool slots) returns the error;
 * every unit is IDLE again, no pool slot is held, and the same micro-batch then
 * gives the loss and step of a run that never failed. */
static void test_failed_pass_hands_units_back(void)
{
    cpu = zt_backend_cpu();
    zt_backend failing = *cpu;
    failing.matmul = failing_matmul;
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    int in[B * T], tg[B * T];
    first_batch(&cfg, in, tg);
    double loss[2] = {0}, norm[2] = {0};
    for (int k = 0; k < 2; k++) { /* k = 1: a failed attempt first */
        zt_engine *eng = NULL;
        zt_model m;
        zt_overlap ov = {.forward_prefetch = 1, .backward_prefetch = ZT_BACKWARD_PREFETCH_PRE,
                         .overlap_reduce = 1};
        ZT_CHECK(zt_engine_create(&eng, &failing, &lay, ZT_PRECISION_ALL(ZT_F32), 3, &ov, &comm, &err) == ZT_OK);
        ZT_CHECK(zt_hf_load_params(FIX, &lay, eng, &err) == ZT_OK);
        zt_param_owner own = zt_engine_param_owner(eng);
        ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK);
        zt_engine_zero_grads(eng);
        n_calls = 0;
        /* forward: 4 products per layer and lm_head; the failure lands in the
         * backward of the last layer's unit */
        fail_at = k == 1 ? 4L * cfg.num_hidden_layers + 1 + 4 : 0;
        if (k == 1) {
            double l;
            ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &l, &err) == ZT_EFAIL);
            ZT_CHECK(strstr(err.msg, "injected") != NULL);
            for (int u = 0; u < lay.nunits; u++)
                ZT_CHECK_MSG(zt_engine_unit_phase(eng, u) == ZT_UNIT_IDLE, "unit %d: %s", u,
                             zt_unit_phase_name(zt_engine_unit_phase(eng, u)));
            zt_engine_stats es = zt_engine_get_stats(eng);
            ZT_CHECK_MSG(es.units_gathered == 0 && es.pool_held == 0 && es.gradients_open == 0,
                         "%d units gathered, %d pool buffers held, %d gradients open", es.units_gathered,
                         es.pool_held, es.gradients_open);
            zt_engine_zero_grads(eng); /* the failed micro-batch's partial gradient goes */
            fail_at = 0;
        }
        ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &loss[k], &err) == ZT_OK);
        zt_adamw_hparams hp = {1e-3, 0.1, 0.9, 0.999, 1e-8};
        ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 1.0, 1.0, &norm[k]) == 0);
        zt_model_free(&m);
        zt_engine_destroy(eng);
    }
    ZT_CHECK(loss[0] == loss[1] && norm[0] == norm[1] && norm[0] > 0.0);
    zt_layout_free(&lay);
}

/* Offload at stage 2 on the emulated device (docs/zero.md, Offload): in the
 * backward that ends the accumulation each unit's reduced gradient shard is queued
 * down to the host as its reduction completes (one copy per unit, counted in the
 * stats), and the step on the host's cores gives the parameters, bit for bit, of
 * the same step without offload. */
static void test_offload_copies_gradients_in_the_backward(void)
{
    float *vals[2][64] = {{0}};
    long early[2] = {0, 0};
    int nparams = 0, nunits = 0;
    for (int off = 0; off < 2; off++) {
        zt_err err = {0};
        zt_llama_config cfg;
        zt_layout lay;
        zt_comm comm;
        zt_engine *eng = NULL;
        zt_model m;
        zt_comm_create_local(&comm);
        ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
        ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
        zt_overlap ov = {.offload_optimizer = off};
        ZT_CHECK(zt_engine_create(&eng, zt_backend_emu(), &lay, ZT_PRECISION_ALL(ZT_F32), 2, &ov, &comm, &err) ==
                 ZT_OK);
        ZT_CHECK(zt_hf_load_params(FIX, &lay, eng, &err) == ZT_OK);
        zt_engine_refresh_gathered(eng);
        zt_param_owner own = zt_engine_param_owner(eng);
        ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK);
        int in[B * T], tg[B * T];
        first_batch(&cfg, in, tg);
        double loss = 0.0, norm = 0.0;
        zt_engine_zero_grads(eng);
        zt_engine_sync_backward(eng, 1);
        ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK);
        zt_engine_sync_backward(eng, 0);
        early[off] = zt_engine_get_stats(eng).grads_copied_early;
        zt_adamw_hparams hp = {1e-3, 0.1, 0.9, 0.999, 1e-8};
        ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 1.0, 1.0, &norm) == 0);
        nparams = lay.nparams < 64 ? lay.nparams : 64;
        nunits = lay.nunits;
        for (int i = 0; i < nparams; i++)
            vals[off][i] = malloc(lay.params[i].numel * sizeof(float));
        ZT_CHECK(lay.nparams <= 64 && zt_engine_full_params(eng, vals[off], &err) == ZT_OK);
        for (int i = 0; off == 1 && i < nparams; i++)
            ZT_CHECK_MSG(memcmp(vals[0][i], vals[1][i], lay.params[i].numel * sizeof(float)) == 0,
                         "%s differs after an offloaded step", lay.params[i].name);
        zt_model_free(&m);
        zt_engine_destroy(eng);
        zt_layout_free(&lay);
    }
    ZT_CHECK_MSG(early[0] == 0 && early[1] == nunits, "gradient shards copied in the backward: %ld without "
                 "offload, %ld with (want 0, %d)", early[0], early[1], nunits);
    for (int off = 0; off < 2; off++)
        for (int i = 0; i < nparams; i++)
            free(vals[off][i]);
}

int main(void)
{
    ZT_RUN(test_frozen_owner_matches_engine);
    ZT_RUN(test_eval_allocates_no_training_state);
    ZT_RUN(test_kernels_run_through_the_backend_table);
    ZT_RUN(test_failed_pass_hands_units_back);
    ZT_RUN(test_offload_copies_gradients_in_the_backward);
    ZT_TEST_MAIN_END();
}
