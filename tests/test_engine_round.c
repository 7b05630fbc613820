/* test_engine_round.c — the one-rank bf16 reduce's rounding is no pass of its own
 * (engine.c, "rounding pending").  With an fp32 master and a bf16 reduce dtype on one
 * rank, every gradient passes through bf16; that rounding is done by its readers as
 * they read (the step's norm, read only; AdamW), not by a read-modify-write pass over
 * the gradients.  On the CPU's table and the emulated device's, at stages 0, 1 and 3
 * (a group of one: the gradient accumulates in place), one micro-batch a step or two:
 *   - a counting table over the real one sees no in-place rounding (round_bf16) in a
 *     step, of one micro-batch or two (the second micro-batch's accumulation rounds
 *     the first's values as it reads them: accumulate_bf16_rounded's round_acc, where
 *     a settle pass rounded them in place before);
 *   - the losses, norms and parameters after three clipped steps are bit for bit
 *     those of the same run whose gradients are rounded in place before each step
 *     (zt_engine_full_grads reads them: a reader that cannot round as it reads, so the
 *     rounding is done first, which is the separate pass's arithmetic).  That the
 *     second micro-batch's accumulation rounds the first's values at all (an engine
 *     that dropped round_acc would give both runs the same wrong numbers) is
 *     tests/cli/digests.sh's bf16_accum_r1 row, and kernels_check's reductions group
 *     checks the kernel's two forms on every table;
 *   - zt_engine_full_grads gives the rounded values (each one representable in bf16
 *     where the reduction's rounding comes last), the reference's bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/engine/engine.h"
#include "../src/io/hf_model.h"
#include "../src/io/tokens.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "../src/train/weights.h"
#include "test.h"

static const char *FIX = "tests/fixtures/gqa_tied";
static const char *TOKENS = "tests/fixtures/gqa_tied/tokens.npy";
enum { B = 2, T = 16, STEPS = 3 };

/* The table under test: the real one with round_bf16 (the rounding in place) counted. */
static const zt_backend *inner;
static long rounds;
static double counting_round_bf16(float *x, size_t n, int want_sumsq)
{
    rounds++;
    return inner->round_bf16(x, n, want_sumsq);
}

typedef struct run_out {
    double loss[STEPS], norm[STEPS];
    long rounds[STEPS]; /* in-place roundings during step s's passes and update */
    float **params, **grads;
    size_t *numel; /* per parameter */
    int nunits, nparams;
} run_out;

static float **values_alloc(const zt_layout *lay)
{
    float **v = malloc((size_t)lay->nparams * sizeof *v);
    for (int i = 0; i < lay->nparams; i++)
        v[i] = malloc(lay->params[i].numel * sizeof(float));
    return v;
}

static void values_free(float **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* STEPS steps of A micro-batches (window k of the fixture's tokens for the k-th
 * micro-batch overall) on table be at the given stage; with settle, the gradients are
 * read through zt_engine_full_grads before each step.  The parameters and gradients
 * after the last step come back in o. */
static void run(const zt_backend *be, int stage, int A, int settle, run_out *o)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    zt_model m;
    zt_tokens tok;
    zt_batcher bat;
    const zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16,
                               .save = ZT_F32};
    zt_backend counted = *be;
    inner = be;
    counted.round_bf16 = counting_round_bf16;
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(FIX, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_engine_create(&eng, &counted, &lay, prec, stage, NULL, &comm, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(zt_hf_load_params(FIX, &lay, eng, &err) == ZT_OK);
    zt_engine_refresh_gathered(eng);
    zt_param_owner own = zt_engine_param_owner(eng);
    ZT_CHECK_MSG(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(zt_tokens_load(TOKENS, &tok, &err) == ZT_OK);
    ZT_CHECK(zt_batcher_init(&bat, &tok, T, 0, 0, TOKENS, &err) == ZT_OK);
    o->nunits = lay.nunits;
    o->nparams = lay.nparams;
    o->params = values_alloc(&lay);
    o->grads = values_alloc(&lay);
    o->numel = malloc((size_t)lay.nparams * sizeof *o->numel);
    for (int i = 0; i < lay.nparams; i++)
        o->numel[i] = lay.params[i].numel;
    const zt_adamw_hparams hp = {1e-3, 0.1, 0.9, 0.999, 1e-8};
    int in[B * T], tg[B * T];
    for (int s = 0; s < STEPS; s++) {
        long r0 = rounds;
        double loss = 0.0, l;
        zt_engine_zero_grads(eng);
        for (int a = 0; a < A; a++) {
            zt_batcher_fill(&bat, (long)(s * A + a) * B, B, in, tg);
            zt_engine_sync_backward(eng, a == A - 1);
            ZT_CHECK(zt_model_forward_backward(&m, in, tg, 1.0f / (float)(A * B * T), &l, &err) == ZT_OK);
            loss += l;
        }
        if (settle)
            ZT_CHECK(zt_engine_full_grads(eng, o->grads, &err) == ZT_OK);
        /* a norm limit below the norm: clipping, hence the norm, reaches every parameter */
        ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 0.05, 1.0, &o->norm[s]) == 0);
        o->loss[s] = loss;
        o->rounds[s] = rounds - r0;
    }
    ZT_CHECK(zt_engine_full_grads(eng, o->grads, &err) == ZT_OK);
    ZT_CHECK(zt_engine_full_params(eng, o->params, &err) == ZT_OK);
    zt_batcher_free(&bat);
    zt_tokens_free(&tok);
    zt_model_free(&m);
    zt_engine_destroy(eng);
    zt_comm_free(&comm);
    zt_layout_free(&lay);
}

static void compare(const zt_backend *be, int stage, int A)
{
    run_out got, ref;
    run(be, stage, A, 0, &got);
    run(be, stage, A, 1, &ref);
    const char *where = be->host_visible ? "cpu" : "emu";
    /* stages 2-3 round each micro-batch's reduction and add them: with two, a sum of
     * bf16 values, nothing pending at the step; else the last rounding is the
     * reduction's, so every value is bf16, and it is pending at the step */
    const int last_rounded = stage <= 1 || A == 1;
    for (int s = 0; s < STEPS; s++) {
        /* nothing rounds in place, with one micro-batch or two (the second's accumulation
         * rounds the first's values as it reads them); the reference rounds each unit
         * before its step where a rounding is pending then (not at stages 2-3 with
         * two: their last operation is the add) */
        ZT_CHECK_MSG(got.rounds[s] == 0, "%s stage %d A %d step %d: %ld in-place roundings, want none", where, stage,
                     A, s, got.rounds[s]);
        ZT_CHECK_MSG(ref.rounds[s] >= (last_rounded ? got.nunits : 0), "%s stage %d A %d: the reference rounded %ld units",
                     where, stage, A, ref.rounds[s]);
        ZT_CHECK_MSG(got.loss[s] == ref.loss[s] && got.norm[s] == ref.norm[s],
                     "%s stage %d A %d step %d: loss %.17g norm %.17g, rounded first: %.17g %.17g", where, stage, A,
                     s, got.loss[s], got.norm[s], ref.loss[s], ref.norm[s]);
    }
    size_t bad_p = 0, bad_g = 0, unrounded = 0;
    for (int i = 0; i < got.nparams; i++) {
        size_t n = got.numel[i];
        bad_p += memcmp(got.params[i], ref.params[i], n * sizeof(float)) != 0;
        bad_g += memcmp(got.grads[i], ref.grads[i], n * sizeof(float)) != 0;
        for (size_t e = 0; e < n; e++)
            unrounded += got.grads[i][e] != zt_round_bf16(got.grads[i][e]);
    }
    ZT_CHECK_MSG(bad_p == 0, "%s stage %d A %d: %zu parameters differ from the run rounded first", where, stage, A,
                 bad_p);
    ZT_CHECK_MSG(bad_g == 0 && (unrounded == 0 || !last_rounded),
                 "%s stage %d A %d: full_grads: %zu tensors differ from the reference, %zu values not bf16", where,
                 stage, A, bad_g, unrounded);
    values_free(got.params, got.nparams);
    values_free(got.grads, got.nparams);
    values_free(ref.params, ref.nparams);
    values_free(ref.grads, ref.nparams);
    free(got.numel);
    free(ref.numel);
}

static void test_no_rounding_pass_on_the_cpu(void)
{
    for (int stage = 0; stage <= 3; stage += stage == 1 ? 2 : 1)
        for (int A = 1; A <= 2; A++)
            compare(zt_backend_cpu(), stage, A);
}

static void test_no_rounding_pass_on_the_emulated_device(void)
{
    for (int stage = 0; stage <= 3; stage += stage == 1 ? 2 : 1)
        for (int A = 1; A <= 2; A++)
            compare(zt_backend_emu(), stage, A);
}

int main(void)
{
    ZT_RUN(test_no_rounding_pass_on_the_cpu);
    ZT_RUN(test_no_rounding_pass_on_the_emulated_device);
    ZT_TEST_MAIN_END();
}
