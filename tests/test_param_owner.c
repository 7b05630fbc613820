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
    zt_engine eng;
    zt_frozen_params fr;
    zt_model m;
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    zt_param_owner own;
    if (use_engine) {
        ZT_CHECK(zt_engine_init(&eng, &lay, (zt_precision){ZT_F32, ZT_F32, cd, cd, ZT_F32, 0}, 0, NULL, &comm,
                                &err) == ZT_OK);
        ZT_CHECK(zt_hf_load_params(FIX, &lay, &eng, &err) == ZT_OK);
        zt_engine_refresh_gathered(&eng);
        own = zt_engine_param_owner(&eng);
    } else {
        ZT_CHECK(zt_frozen_init(&fr, &lay, cd, &err) == ZT_OK);
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
        zt_engine_free(&eng);
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
        zt_eval_args a = {FIX, TOKENS, T, B, 1, cd};
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
        zt_engine_bytes old = zt_engine_estimate(&lay, (zt_precision){ZT_F32, ZT_F32, cd, cd, ZT_F32, 0}, 0, 1,
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

int main(void)
{
    ZT_RUN(test_frozen_owner_matches_engine);
    ZT_RUN(test_eval_allocates_no_training_state);
    ZT_TEST_MAIN_END();
}
