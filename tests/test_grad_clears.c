/* test_grad_clears.c — no memset of the gradients in a step (issue 42 point 3).
 *
 * The step's accumulators start empty (zero_grads clears nothing), every buffer the
 * engine hands the model is fresh (param_owner.h), and the model's first products
 * write with beta 0, the RMSNorm weights' (rmsnorm_backward's dw_beta), the q|k|v
 * bias's (bias_backward's beta) and the untied embedding's table (embed_backward's
 * beta: every row written; tied, the lm-head's product writes it first) included.
 * What is still cleared (docs/architecture.md, "One optimizer step") is padding, not
 * gradient: the part of a smaller unit's padding that a bigger unit sharing the
 * layers' staging may have written.  A counting wrapper over the table's `zero`
 * entry holds the step to exactly that list, offsets and sizes, wherever a gradient
 * buffer (an accumulator
 * or a staging buffer) is touched; and the residual stream's gradient (dres, an
 * activation) is never cleared: the final norm's dx stores into it (dx_beta 0).
 *
 * And the numbers are the old path's, bit for bit: the same steps run again with
 * the old path put back from outside (every accumulator zeroed before the step and
 * marked as holding a sum; every buffer handed out zeroed and said to hold a sum,
 * so every product adds with beta 1).  Before each step of the new path every
 * gradient buffer's parameter elements are filled with NaN, as a skipped fp16
 * step's infs would be, so a product or a reduction that read what it should
 * overwrite shows as a NaN.
 *
 * And the fp32 copies of the norm weights are made once a step, not once a
 * micro-batch (issue 42 point 4): the later micro-batches keep the first's
 * (zt_model_keep_norm_weights, as the trainer calls it), counted through the table's
 * `convert`, with the old path's bits (it converts in every pass). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/engine/engine.h"
/* the test reaches the engine's buffers (to poison them, to put the old path back
 * and to tell a gradient buffer from an activation) */
#include "../src/engine/engine_impl.h"
#include "../src/io/hf_model.h"
#include "../src/io/tokens.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "../src/train/weights.h"
#include "test.h"

enum { B = 2, T = 16, A = 2, STEPS = 2, MAX_ZEROS = 4096 };

/* ---- the counting table: every `zero` call, its buffer and size ------------ */

static const zt_backend *g_inner;
static zt_backend g_counting;
typedef struct {
    const void *p;
    size_t bytes;
} zero_call;
static zero_call g_zeros[MAX_ZEROS];
static int g_nzeros;

static void counting_zero(void *dst, size_t bytes)
{
    if (g_nzeros < MAX_ZEROS)
        g_zeros[g_nzeros] = (zero_call){dst, bytes};
    g_nzeros++;
    g_inner->zero(dst, bytes);
}

/* conversions into the model's fp32 norm weights [g_norm_lo, g_norm_hi): made once a
 * step (zt_model_keep_norm_weights for the later micro-batches, as the trainer does) */
static const float *g_norm_lo, *g_norm_hi;
static int g_nnorm;

static void counting_convert(void *dst, zt_dtype dd, const void *src, zt_dtype sd, size_t n)
{
    g_nnorm += (const float *)dst >= g_norm_lo && (const float *)dst < g_norm_hi;
    g_inner->convert(dst, dd, src, sd, n);
}

static const zt_backend *counting(const zt_backend *inner)
{
    g_inner = inner;
    g_counting = *inner;
    g_counting.zero = counting_zero;
    g_counting.convert = counting_convert;
    return &g_counting;
}

/* ---- the engine's owner, passed through (new path: each grad_begin logged, with
 * whether it handed out the unit's accumulator or a staging buffer) or with the old
 * path put back (zeroed buffers that hold a sum) ---- */

static zt_param_owner g_engine_owner;
static const zt_backend *g_old_be;
static const zt_layout *g_old_lay;
static zt_engine *g_eng;
static int g_old_path;
typedef struct {
    int unit, staged;
} begin_call;
static begin_call g_begins[256];
static int g_nbegins;

static const void *old_acquire(void *c, int u, zt_pass p) { return g_engine_owner.ops->acquire(c, u, p); }
static void old_release(void *c, int u) { g_engine_owner.ops->release(c, u); }
static float *old_grad_begin(void *c, int u, int *fresh)
{
    float *g = g_engine_owner.ops->grad_begin(c, u, fresh);
    if (!g_old_path) {
        ZT_CHECK(*fresh == 1 && g_nbegins < 256);
        if (g_nbegins < 256)
            g_begins[g_nbegins++] = (begin_call){u, g != g_eng->units[u].grad};
        return g;
    }
    g_old_be->zero(g, g_old_lay->units[u].padded_numel * sizeof(float));
    *fresh = 0;
    return g;
}
static void old_grad_end(void *c, int u) { g_engine_owner.ops->grad_end(c, u); }
static void old_progress(void *c) { g_engine_owner.ops->progress(c); }
static void old_reset(void *c) { g_engine_owner.ops->reset(c); }

/* ---- one run ------------------------------------------------------------------ */

typedef struct {
    const char *fixture;
    const zt_backend *be;
    zt_precision prec;
    int stage;
    zt_wrap_policy wrap; /* SIZE: the first two layers in one unit, the rest one each */
    int shard_group;     /* the layout's padding multiple */
    int checkpointing;
} run_case;

typedef struct {
    double loss[STEPS], norm[STEPS];
    float **params;
    int nparams;
    size_t *numel;
} run_out;

static size_t bytes_of(size_t n, zt_dtype dt) { return n * zt_dtype_size(dt); }

/* Where p falls in a gradient buffer of eng: its byte offset there, or -1. */
static long grad_offset(const zt_engine *eng, const void *p)
{
    const char *q = p;
    struct {
        const void *b;
        size_t bytes;
    } bufs[3] = {{eng->staging_root, eng->staging_root_numel * sizeof(float)},
                 {eng->staging_layers, eng->staging_layers_numel * sizeof(float)},
                 {eng->staging_spare, eng->staging_spare_numel * sizeof(float)}};
    for (int i = 0; i < 3; i++)
        if (bufs[i].b && q >= (const char *)bufs[i].b && q < (const char *)bufs[i].b + bufs[i].bytes)
            return (long)(q - (const char *)bufs[i].b);
    for (int u = 0; u < eng->lay->nunits; u++) {
        const char *g = eng->units[u].grad;
        if (g && q >= g && q < g + bytes_of(eng->units[u].grad_numel, eng->prec.master))
            return (long)(q - g);
    }
    return -1;
}

/* The documented clears of a unit's gradient buffer as grad_begin handed it out
 * (staged: a staging buffer), as (byte offset, bytes) pairs into out. */
static int expected_clears(const zt_engine *eng, const zt_layout *lay, int u, int staged, long (*out)[2])
{
    int n = 0; /* no parameter's gradient: the norms, biases and the embedding store with beta 0 */
    /* a smaller unit's padding, in the layers' staging a bigger one also fills */
    size_t num = lay->units[u].numel, P = lay->units[u].padded_numel, big = eng->layers_numel_max;
    if (staged && u != lay->root_unit && big > num && P > num) {
        out[n][0] = (long)(num * sizeof(float));
        out[n++][1] = (long)(((big < P ? big : P) - num) * sizeof(float));
    }
    return n;
}

static int cmp_pair(const void *a, const void *b)
{
    const long *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Every element of every gradient buffer but the padding: NaN (new path), or the
 * accumulators zeroed and said to hold a sum (the old path's zero_grads). */
static void prepare_buffers(zt_engine *eng, int old_path)
{
    const zt_backend *be = eng->be;
    size_t most = eng->staging_root_numel > eng->staging_layers_numel ? eng->staging_root_numel
                                                                      : eng->staging_layers_numel;
    for (int u = 0; u < eng->lay->nunits; u++)
        if (eng->units[u].grad_numel > most)
            most = eng->units[u].grad_numel;
    float *nan = malloc(most * sizeof(float)); /* fp32 NaN bits, also NaN as two bf16 halves */
    for (size_t i = 0; i < most; i++)
        nan[i] = NAN;
    for (int u = 0; u < eng->lay->nunits; u++) {
        zt_unit_state *us = &eng->units[u];
        if (!us->grad)
            continue;
        if (old_path) {
            g_old_be->zero(us->grad, bytes_of(us->grad_numel, eng->prec.master));
            us->grad_empty = 0;
            continue;
        }
        /* the parameters' part of this rank's accumulator (one process: all of it) */
        size_t params = eng->lay->units[u].numel < us->grad_numel ? eng->lay->units[u].numel : us->grad_numel;
        be->to_device(us->grad, nan, bytes_of(params, eng->prec.master));
    }
    if (!old_path) {
        be->to_device(eng->staging_root, nan, eng->lay->units[eng->lay->root_unit].numel * sizeof(float));
        if (eng->staging_layers)
            be->to_device(eng->staging_layers, nan, eng->layers_numel_max * sizeof(float));
        if (eng->staging_spare)
            be->to_device(eng->staging_spare, nan, eng->layers_numel_max * sizeof(float));
    }
    free(nan);
}

/* The residual stream's gradient: NaN before each micro-batch (it holds the last
 * backward's d loss / d x otherwise, the same in both paths). */
static void poison_dres(const zt_model *m, const zt_backend *be)
{
    size_t n = (size_t)m->N * m->cfg.hidden_size;
    float *nan = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    be->to_device(m->dres, nan, n * sizeof(float));
    free(nan);
}

/* Step s's clears of a gradient buffer (the counting table's record) against the
 * documented ones, A times over; want and got are room for the lists. */
static void check_step_clears(const run_case *rc, const zt_engine *eng, const zt_layout *lay, const zt_model *m,
                              int s, long (*want)[2], long (*got)[2])
{
    int nwant = 0, ngot = 0;
    for (int i = 0; i < g_nbegins; i++)
        nwant += expected_clears(eng, lay, g_begins[i].unit, g_begins[i].staged, want + nwant);
    ZT_CHECK(g_nbegins == A * lay->nunits);
    ZT_CHECK(g_nzeros <= MAX_ZEROS);
    for (int i = 0; i < g_nzeros && i < MAX_ZEROS; i++) {
        ZT_CHECK_MSG(g_zeros[i].p != m->dres, "%s step %d: the residual gradient cleared", rc->fixture, s);
        long off = grad_offset(eng, g_zeros[i].p);
        if (off >= 0) {
            got[ngot][0] = off;
            got[ngot++][1] = (long)g_zeros[i].bytes;
        }
    }
    qsort(want, (size_t)nwant, sizeof *want, cmp_pair);
    qsort(got, (size_t)ngot, sizeof *got, cmp_pair);
    int same = nwant == ngot && memcmp(want, got, (size_t)ngot * sizeof *got) == 0;
    long got_bytes = 0, want_bytes = 0;
    for (int i = 0; i < ngot; i++)
        got_bytes += got[i][1];
    for (int i = 0; i < nwant; i++)
        want_bytes += want[i][1];
    ZT_CHECK_MSG(
        same,
        "%s step %d: %d clears of gradient buffers (%ld bytes), where %d are documented (%ld bytes)",
        rc->fixture, s, ngot, got_bytes, nwant, want_bytes);
}

static void run(const run_case *rc, int old_path, run_out *out)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    zt_model m;
    char dir[128], tok_path[160];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", rc->fixture);
    snprintf(tok_path, sizeof tok_path, "%s/tokens.npy", dir);
    zt_comm_create_local(&comm);
    ZT_CHECK(zt_hf_read_config_dir(dir, &cfg, &err) == ZT_OK);
    size_t min_params = 0;
    if (rc->wrap == ZT_WRAP_SIZE) { /* just over one layer: layers 0-1 in one unit */
        ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
        min_params = lay.units[lay.layer_unit[0]].numel + 1;
        zt_layout_free(&lay);
    }
    ZT_CHECK(zt_layout_build(&lay, &cfg, rc->wrap, min_params, rc->shard_group, &err) == ZT_OK);
    const zt_backend *be = old_path ? rc->be : counting(rc->be);
    g_old_be = rc->be;
    g_old_lay = &lay;
    ZT_CHECK_MSG(zt_engine_create(&eng, be, &lay, rc->prec, rc->stage, NULL, &comm, &err) == ZT_OK, "%s",
                 err.msg);
    ZT_CHECK(zt_hf_load_params(dir, &lay, eng, &err) == ZT_OK);
    zt_engine_refresh_gathered(eng);
    zt_param_owner own = zt_engine_param_owner(eng);
    static const zt_param_owner_ops old_ops = ZT_PARAM_OWNER_OPS(old_acquire, old_release, old_grad_begin,
                                                                 old_grad_end, old_progress, old_reset);
    g_engine_owner = own;
    g_eng = eng;
    g_old_path = old_path;
    own.ops = &old_ops;
    ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, rc->checkpointing, &err) == ZT_OK);
    zt_tokens tok;
    zt_batcher bat;
    ZT_CHECK(zt_tokens_load(tok_path, &tok, &err) == ZT_OK);
    ZT_CHECK(zt_batcher_init(&bat, &tok, T, 0, 0, tok_path, &err) == ZT_OK);
    long(*want)[2] = malloc(sizeof *want * (size_t)(lay.nparams + lay.nunits) * A * 2);
    long(*got)[2] = malloc(sizeof *got * MAX_ZEROS);
    const int L = cfg.num_hidden_layers;
    g_norm_lo = m.norm_w, g_norm_hi = m.norm_w ? m.norm_w + (size_t)(2 * L + 1) * cfg.hidden_size : NULL;
    for (int s = 0; s < STEPS; s++) {
        g_nzeros = g_nbegins = g_nnorm = 0; /* from the step's start: zero_grads is the step's */
        zt_engine_zero_grads(eng);
        prepare_buffers(eng, old_path);
        double loss = 0.0;
        for (int micro = 0; micro < A; micro++) {
            int in[B * T], tg[B * T];
            double l = 0.0;
            zt_batcher_fill(&bat, (long)(s * A + micro) * B, B, in, tg);
            zt_engine_sync_backward(eng, micro == A - 1);
            if (!old_path) /* the final norm's dx stores into it: what it held is not read */
                poison_dres(&m, be);
            if (!old_path && micro > 0) /* the old path converts them in every pass */
                zt_model_keep_norm_weights(&m);
            ZT_CHECK_MSG(zt_model_forward_backward(&m, in, tg, 1.0f / (A * B * T), &l, &err) == ZT_OK, "%s",
                         err.msg);
            loss += l;
        }
        zt_engine_sync_backward(eng, 0);
        zt_adamw_hparams hp = {1e-3, 0.1, 0.9, 0.999, 1e-8};
        ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 1.0, 1.0, &out->norm[s]) == 0);
        out->loss[s] = loss;
        if (old_path)
            continue;
        check_step_clears(rc, eng, &lay, &m, s, want, got);
        /* the fp32 norm weights: 2 L + 1 conversions a step (none with fp32 compute) */
        ZT_CHECK_MSG(g_nnorm == (m.own.compute != ZT_F32 ? 2 * L + 1 : 0),
                     "%s step %d: %d conversions of the norm weights", rc->fixture, s, g_nnorm);
    }
    free(want);
    free(got);
    out->nparams = lay.nparams;
    out->params = calloc((size_t)lay.nparams, sizeof *out->params);
    out->numel = calloc((size_t)lay.nparams, sizeof *out->numel);
    for (int i = 0; i < lay.nparams; i++) {
        out->numel[i] = lay.params[i].numel;
        out->params[i] = malloc(out->numel[i] * sizeof(float));
    }
    ZT_CHECK(zt_engine_full_params(eng, out->params, &err) == ZT_OK);
    zt_batcher_free(&bat);
    zt_tokens_free(&tok);
    zt_model_free(&m);
    zt_engine_destroy(eng);
    zt_layout_free(&lay);
}

static void run_out_free(run_out *o)
{
    for (int i = 0; i < o->nparams; i++)
        free(o->params[i]);
    free(o->params);
    free(o->numel);
}

static void check_case(const run_case *rc, const char *what)
{
    run_out nw = {0}, old = {0};
    run(rc, 0, &nw);
    run(rc, 1, &old);
    for (int s = 0; s < STEPS; s++) {
        ZT_CHECK_MSG(nw.loss[s] == old.loss[s] && isfinite(nw.loss[s]),
                     "%s step %d: loss %.17g, old path %.17g", what, s, nw.loss[s], old.loss[s]);
        ZT_CHECK_MSG(nw.norm[s] == old.norm[s] && nw.norm[s] > 0.0, "%s step %d: norm %.17g, old path %.17g",
                     what, s, nw.norm[s], old.norm[s]);
    }
    ZT_CHECK(nw.nparams == old.nparams && nw.nparams > 0);
    for (int i = 0; i < nw.nparams && i < old.nparams; i++)
        ZT_CHECK_MSG(nw.params[i] && old.params[i] &&
                         memcmp(nw.params[i], old.params[i], nw.numel[i] * sizeof(float)) == 0,
                     "%s: parameter %d differs from the old path's", what, i);
    run_out_free(&nw);
    run_out_free(&old);
}

/* Tied embeddings, fp32, stage 0 on the CPU: the first micro-batch's products go
 * straight into the accumulators (beta 0), the second's into the staging. */
static void test_tied_fp32(void)
{
    run_case rc = {"gqa_tied", zt_backend_cpu(), ZT_PRECISION_ALL(ZT_F32), 0, ZT_WRAP_TRANSFORMER, 1, 0};
    check_case(&rc, "gqa_tied fp32 stage 0");
}

/* Untied (the embedding's table written with beta 0 over NaN), bf16 products and reduction into fp32
 * masters, padded units of unequal size (a smaller unit's padding cleared where the
 * bigger one wrote), gradient checkpointing. */
static void test_untied_bf16_padded(void)
{
    zt_precision p = {
        .load = ZT_F32, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16, .save = ZT_F32};
    run_case rc = {"untied_odd", zt_backend_cpu(), p, 1, ZT_WRAP_SIZE, 7, 1};
    check_case(&rc, "untied_odd bf16 stage 1 size-wrap");
}

/* Qwen2's biases, bf16 masters (no in-place path: the first micro-batch's staging is
 * stored into the accumulator), stage 3 on the emulated device. */
static void test_bias_bf16_master_emu(void)
{
    run_case rc = {"qwen2_bias", zt_backend_emu(), ZT_PRECISION_ALL(ZT_BF16), 3, ZT_WRAP_TRANSFORMER, 2, 0};
    check_case(&rc, "qwen2_bias bf16 stage 3 emu");
}

/* Fast mode on the emulated device: the fused lm-head (lmhead_xent's first chunk with
 * beta 0 onto the tied table) and the asynchronous step. */
static void test_fast_tied(void)
{
    zt_precision p = {
        .load = ZT_F32, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16, .save = ZT_F32};
    run_case rc = {"gqa_tied", zt_backend_emu_fast(), p, 2, ZT_WRAP_TRANSFORMER, 1, 0};
    check_case(&rc, "gqa_tied fast emu stage 2");
}

int main(void)
{
    ZT_RUN(test_tied_fp32);
    ZT_RUN(test_untied_bf16_padded);
    ZT_RUN(test_bias_bf16_master_emu);
    ZT_RUN(test_fast_tied);
    ZT_TEST_MAIN_END();
}
