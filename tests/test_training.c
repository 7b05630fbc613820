/* test_training.c — the training semantics of contract §4 that parity alone does not pin:
 * accumulation, checkpointing, wrap policies, data order, schedules, bf16 master
 * rounding and padding.  Runs on the gqa_tied fixture model. */
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/io/safetensors.h"
#include "../src/io/tokens.h"
#include "../src/model/llama.h"
#include "../src/kernels/matmul.h"
#include "../src/model/layout.h"
#include "../src/train/batches.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "weights_cmp.h"
#include "tmpdir.h"

static const char *FIX = "tests/fixtures/gqa_tied";

/* Per-step losses, from the trainer's metrics. */
typedef struct loss_log {
    double *losses;
    int n, cap;
} loss_log;

static void record_loss(void *ctx, const zt_step_metrics *m)
{
    loss_log *l = ctx;
    if (l->n < l->cap)
        l->losses[l->n++] = m->loss;
}

/* The settings every test starts from, as `ztrain train` flags would give them. */
static zt_settings base_settings(void)
{
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = 16;
    st.batch = 2;
    st.accum = 1;
    st.max_steps = 4;
    st.lr = 1e-3;
    st.weight_decay = 0.1;
    st.seed = 0;
    return st;
}

static const zt_precision FP32 = ZT_PRECISION_ALL(ZT_F32);

/* Train with settings st under plan into a fresh temp dir; return the saved weights
 * (caller closes) and the per-step losses. */
static zt_weights *run(const zt_settings *st, zt_plan plan, double *losses, int nlosses, char *tmpdir_out)
{
    char tmp[64];
    if (!tmpdir_make(tmp, sizeof tmp, "zt_train_"))
        return NULL;
    strcpy(tmpdir_out, tmp);
    zt_err err = {0};
    zt_train_args a;
    int rc = zt_train_args_from_settings(st, &plan, &a, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    char out[256];
    tmpdir_join(out, sizeof out, tmp, "out");
    a.model_dir = FIX;
    a.data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a.output_dir = out;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    for (int i = 0; i < nlosses; i++)
        losses[i] = NAN;
    loss_log ll = {losses, 0, nlosses};
    a.on_step = record_loss;
    a.on_step_ctx = &ll;
    zt_train_result res;
    if (rc == ZT_OK)
        rc = zt_train(&a, &res, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    zt_weights *w = NULL;
    if (rc == ZT_OK)
        ZT_CHECK_MSG(zt_weights_open(out, &w, &err) == ZT_OK, "%s", err.msg);
    return w;
}

/* The one settings -> args mapping carries every training setting, and names a
 * schedule it does not know. */
static void test_args_from_settings(void)
{
    zt_settings st;
    zt_settings_defaults(&st);
    st.block_size = 32, st.batch = 3, st.accum = 5, st.max_steps = 77, st.warmup_steps = 7;
    st.lr = 1e-2, st.weight_decay = 0.25, st.beta1 = 0.8, st.beta2 = 0.99, st.eps = 1e-6;
    st.max_grad_norm = 0.5, st.schedule = "cosine", st.seed = 9, st.shuffle = 1;
    st.checkpointing = 1, st.save_steps = 11;
    zt_plan plan = zt_plan_single(FP32, ZT_WRAP_NONE);
    zt_train_args a;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(a.block_size == 32 && a.batch_size == 3 && a.grad_accum == 5 && a.max_steps == 77);
    ZT_CHECK(a.warmup_steps == 7 && a.adam.lr == 1e-2 && a.adam.weight_decay == 0.25);
    ZT_CHECK(a.adam.beta1 == 0.8 && a.adam.beta2 == 0.99 && a.adam.eps == 1e-6 && a.max_grad_norm == 0.5);
    ZT_CHECK(a.schedule == ZT_LR_COSINE && a.seed == 9 && a.shuffle == 1 && a.checkpointing == 1);
    ZT_CHECK(a.save_steps == 11 && a.plan.wrap == ZT_WRAP_NONE && !a.hooks && !a.model_dir);
    st.schedule = "polynomial"; /* one of Trainer's that ztrain has, with Trainer's defaults */
    ZT_CHECK(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK && a.schedule == ZT_LR_POLYNOMIAL);
    st.schedule = "reduce_lr_on_plateau"; /* one of Trainer's that ztrain lacks */
    ZT_CHECK(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_EINPUT &&
             strstr(err.msg, "lr_scheduler_type") && strstr(err.msg, "reduce_lr_on_plateau"));
    st.schedule = "linear";
    st.optim = "adafactor"; /* Trainer's --optim names other than torch's AdamW */
    ZT_CHECK(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_EINPUT && strstr(err.msg, "--optim adafactor"));
    st.optim = "adamw_torch_fused";
    ZT_CHECK(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK);
}

static void cleanup(const char *tmp) { ZT_CHECK(tmpdir_remove(tmp) == 0); }

/* Same global batch as B=4 x A=1, B=2 x A=2 and B=1 x A=4: losses and weights agree
 * up to fp32 summation order.  Adam divides by sqrt(v), so a gradient element near
 * zero carries its rounding difference straight into its update; the weight
 * tolerance is therefore stated at lr 1e-4 (differences scale with lr). */
static void test_gradient_accumulation_matches_bigger_batch(void)
{
    double l1[4], l2[4], l3[4];
    char t1[64], t2[64], t3[64];
    zt_settings st = base_settings();
    zt_plan plan = zt_plan_single(FP32, ZT_WRAP_TRANSFORMER);
    st.lr = 1e-4;
    st.batch = 4;
    zt_weights *w1 = run(&st, plan, l1, 4, t1);
    st.batch = 2;
    st.accum = 2;
    zt_weights *w2 = run(&st, plan, l2, 4, t2);
    st.batch = 1;
    st.accum = 4;
    zt_weights *w3 = run(&st, plan, l3, 4, t3);
    for (int i = 0; i < 4; i++) {
        ZT_CHECK_CLOSE(l2[i], l1[i], 1e-6, 1e-6);
        ZT_CHECK_CLOSE(l3[i], l1[i], 1e-6, 1e-6);
    }
    ZT_CHECK_MSG(weights_diff(w2, w1) <= 1e-5, "A=2: %.3g", weights_diff(w2, w1));
    ZT_CHECK_MSG(weights_diff(w3, w1) <= 1e-5, "A=4: %.3g", weights_diff(w3, w1));
    zt_weights_close(w1);
    zt_weights_close(w2);
    zt_weights_close(w3);
    cleanup(t1);
    cleanup(t2);
    cleanup(t3);
}

/* estimate-memory's activation bytes are what the model allocates: for untied_odd
 * (V >= 16 C is false, head size 16: fp32 attention tiles) and a made-up wide-vocabulary
 * model with head size 32 (lm_head's transposed product, and in bf16 the bf16-operand
 * attention's packed K/V). */
static void test_activation_estimate_matches_allocation(void)
{
    zt_err err;
    for (int k = 0; k < 2; k++) {
        zt_llama_config c;
        ZT_CHECK(zt_hf_config_read(k == 0 ? "tests/fixtures/untied_odd/config.json"
                                          : "tests/fixtures/gqa_hd32/config.json",
                                   &c, &err) == ZT_OK);
        if (k == 1)
            c.vocab_size = 16 * c.hidden_size; /* the transposed lm_head product */
        zt_layout lay;
        zt_comm comm;
        zt_comm_create_local(&comm);
        ZT_CHECK(zt_layout_build(&lay, &c, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
        /* fp32 operands, and bf16 compute, whose product operands are bf16 buffers */
        for (zt_dtype cd = ZT_F32; cd <= ZT_BF16; cd++) {
            zt_engine *eng = NULL;
            ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, (zt_precision){.load = ZT_F32, .master = ZT_F32, .compute = cd, .reduce = ZT_F32, .save = ZT_F32},
                                    0, NULL, &comm, &err) == ZT_OK);
            for (int ckpt = 0; ckpt <= 1; ckpt++)
                for (int B = 1; B <= 3; B += 2) {
                    zt_model m;
                    zt_param_owner own = zt_engine_param_owner(eng);
                    ZT_CHECK(zt_model_init(&m, &c, &lay, &own, B, 24, ckpt, &err) == ZT_OK);
                    size_t est = zt_model_activation_bytes(&c, B, 24, ckpt, cd);
                    ZT_CHECK_MSG(m.act_bytes == est, "config %d %s B=%d ckpt=%d: %zu vs %zu", k,
                                 zt_dtype_name(cd), B, ckpt, m.act_bytes, est);
                    ZT_CHECK(m.head_transposed == (k == 1));
                    ZT_CHECK((m.attn_pack != NULL) == (k == 1 && cd == ZT_BF16));
                    zt_model_free(&m);
                }
            zt_engine_destroy(eng);
        }
        zt_layout_free(&lay);
    }
}

/* Recomputing layers in backward gives bit-identical training. */
static void test_gradient_checkpointing_is_exact(void)
{
    double l1[4], l2[4];
    char t1[64], t2[64];
    zt_settings st = base_settings();
    zt_plan plan = zt_plan_single(FP32, ZT_WRAP_TRANSFORMER);
    zt_weights *w1 = run(&st, plan, l1, 4, t1);
    st.checkpointing = 1;
    zt_weights *w2 = run(&st, plan, l2, 4, t2);
    for (int i = 0; i < 4; i++)
        ZT_CHECK(l1[i] == l2[i]);
    ZT_CHECK(weights_diff(w2, w1) == 0.0);
    zt_weights_close(w1);
    zt_weights_close(w2);
    cleanup(t1);
    cleanup(t2);
}

/* Units change where parameters live, never the numbers. */
static void test_wrap_policies_agree(void)
{
    double l1[4], l2[4], l3[4];
    char t1[64], t2[64], t3[64];
    zt_settings st = base_settings();
    zt_weights *w1 = run(&st, zt_plan_single(FP32, ZT_WRAP_TRANSFORMER), l1, 4, t1);
    zt_weights *w2 = run(&st, zt_plan_single(FP32, ZT_WRAP_NONE), l2, 4, t2);
    zt_plan by_size = zt_plan_single(FP32, ZT_WRAP_SIZE);
    by_size.min_num_params = 1;
    zt_weights *w3 = run(&st, by_size, l3, 4, t3);
    for (int i = 0; i < 4; i++) {
        ZT_CHECK(l1[i] == l2[i]);
        ZT_CHECK(l1[i] == l3[i]);
    }
    ZT_CHECK(weights_diff(w2, w1) == 0.0);
    ZT_CHECK(weights_diff(w3, w1) == 0.0);
    zt_weights_close(w1);
    zt_weights_close(w2);
    zt_weights_close(w3);
    cleanup(t1);
    cleanup(t2);
    cleanup(t3);
}

/* Fraction of elements that differ between two saved models. */
static double frac_changed(const zt_weights *a, const zt_weights *b)
{
    double changed = 0, total = 0;
    for (int i = 0; a && b && i < zt_weights_count(a); i++) {
        const zt_st_tensor *ta = zt_weights_get(a, i);
        const zt_st_tensor *tb = zt_weights_find(b, ta->name, NULL);
        for (int64_t k = 0; tb && k < ta->numel; k++)
            changed += zt_load_f32(ta->data, ta->dtype, (size_t)k) != zt_load_f32(tb->data, tb->dtype, (size_t)k);
        total += (double)ta->numel;
    }
    return total > 0 ? changed / total : 0;
}

/* bf16 master (FSDP memory-constrained): an Adam step of ~lr = 1e-6 is below half
 * a bf16 ulp for all but the tiniest weights (|w| < ~2.5e-4), so nearly every
 * update is lost; the fp32 master of the aligned mode keeps nearly all of them. */
static void test_bf16_master_loses_small_updates(void)
{
    double l[2];
    char t1[64], t2[64], t3[64];
    zt_settings st = base_settings();
    st.max_steps = 2;
    st.schedule = "constant";
    st.weight_decay = 0.0;
    st.lr = 0.0; /* no change: the loaded, bf16-rounded weights */
    const zt_precision bf16_master = {.load = ZT_BF16, .master = ZT_BF16, .compute = ZT_BF16,
                                      .reduce = ZT_BF16, .save = ZT_F32};
    const zt_precision fp32_master = {.load = ZT_BF16, .master = ZT_F32, .compute = ZT_BF16,
                                      .reduce = ZT_BF16, .save = ZT_F32};
    zt_plan lowmem_plan = zt_plan_single(bf16_master, ZT_WRAP_TRANSFORMER);
    zt_weights *start = run(&st, lowmem_plan, l, 2, t1);
    st.lr = 1e-6;
    zt_weights *lowmem = run(&st, lowmem_plan, l, 2, t2);
    zt_weights *aligned = run(&st, zt_plan_single(fp32_master, ZT_WRAP_TRANSFORMER), l, 2, t3);
    double lost = frac_changed(lowmem, start), kept = frac_changed(aligned, start);
    ZT_CHECK_MSG(lost < 0.02, "bf16 master changed %.3f of elements", lost);
    ZT_CHECK_MSG(kept > 0.9, "fp32 master changed only %.3f of elements", kept);
    zt_weights_close(start);
    zt_weights_close(lowmem);
    zt_weights_close(aligned);
    cleanup(t1);
    cleanup(t2);
    cleanup(t3);
}

static void test_lr_schedules(void)
{
    ZT_CHECK(zt_lr_factor(ZT_LR_CONSTANT, 5, 10, 3) == 1.0);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_CONSTANT_WARMUP, 1, 10, 4), 0.25, 1e-12, 1e-12);
    ZT_CHECK(zt_lr_factor(ZT_LR_CONSTANT_WARMUP, 4, 10, 4) == 1.0);
    ZT_CHECK(zt_lr_factor(ZT_LR_LINEAR, 0, 10, 2) == 0.0);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_LINEAR, 1, 10, 2), 0.5, 1e-12, 1e-12);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_LINEAR, 2, 10, 2), 1.0, 1e-12, 1e-12);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_LINEAR, 6, 10, 2), 0.5, 1e-12, 1e-12);
    ZT_CHECK(zt_lr_factor(ZT_LR_LINEAR, 12, 10, 2) == 0.0);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_COSINE, 6, 10, 2), 0.5, 1e-12, 1e-12);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_COSINE, 2, 10, 2), 1.0, 1e-12, 1e-12);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_COSINE, 4, 10, 2), 0.5 * (1 + cos(M_PI * 0.25)), 1e-12, 1e-12);
    ZT_CHECK_CLOSE(zt_lr_factor(ZT_LR_LINEAR, 3, 10, 0), 0.7, 1e-12, 1e-12);
}

/* contract §4: rank r at micro-step a of step s starts at s*G + (a*W + r)*B. */
static void test_sample_order(void)
{
    ZT_CHECK(zt_sample_index(0, 0, 0, 2, 1, 1) == 0);
    ZT_CHECK(zt_sample_index(3, 0, 0, 2, 1, 1) == 6);
    ZT_CHECK(zt_sample_index(1, 1, 1, 2, 2, 3) == 12 + (1 * 3 + 1) * 2);
    /* the union over ranks and micro-steps of one step is exactly [s*G, (s+1)*G) */
    int B = 3, A = 2, W = 4, seen[48] = {0};
    for (int a = 0; a < A; a++)
        for (int r = 0; r < W; r++)
            for (int i = 0; i < B; i++)
                seen[zt_sample_index(2, a, r, B, A, W) - 2 * B * A * W + i]++;
    for (int i = 0; i < B * A * W; i++)
        ZT_CHECK(seen[i] == 1);
}

/* Completion-only loss: a target whose token the mask marks 0 (a prompt token)
 * is ZT_IGNORE_INDEX, the input never is; the count is the 1s among targets. */
static void test_loss_mask_targets(void)
{
    int32_t ids[17];
    uint8_t mask[17];
    for (int i = 0; i < 17; i++) {
        ids[i] = 100 + i;
        mask[i] = i % 5 >= 2; /* records of 5 tokens: 2 of prompt, 3 of completion */
    }
    zt_tokens tok = {ids, 17, 116, mask};
    zt_batcher b;
    zt_err err;
    ZT_CHECK(zt_batcher_init(&b, &tok, 4, 0, 0, "mem", &err) == ZT_OK);
    ZT_CHECK(b.nwin == 4);
    int in[8], tg[8];
    zt_batcher_fill(&b, 1, 2, in, tg); /* windows 1 and 2: tokens 4..12 */
    long counted = 0;
    for (int j = 0; j < 8; j++) {
        int w = 1 + j / 4, t = j % 4, pos = w * 4 + t; /* input token pos, target pos + 1 */
        ZT_CHECK(in[j] == 100 + pos);
        ZT_CHECK_MSG(tg[j] == (mask[pos + 1] ? 100 + pos + 1 : ZT_IGNORE_INDEX), "target %d: %d", j, tg[j]);
        counted += mask[pos + 1];
    }
    ZT_CHECK(zt_batcher_count_targets(&b, 1, 2) == counted);
    ZT_CHECK(counted == 4); /* of targets 5..12, those with i % 5 >= 2: 7, 8, 9, 12 */
    zt_batcher_free(&b);
    tok.loss_mask = NULL; /* without a mask every target counts */
    ZT_CHECK(zt_batcher_init(&b, &tok, 4, 0, 0, "mem", &err) == ZT_OK);
    ZT_CHECK(zt_batcher_count_targets(&b, 1, 2) == 8);
    zt_batcher_free(&b);
}

/* One step at learning rate 0 on the fixture's tokens with a loss mask (NULL:
 * none): the step's loss. */
static double masked_step_loss(const char *mask_path)
{
    zt_settings st = base_settings();
    st.lr = 0.0, st.max_steps = 1;
    zt_train_args a;
    zt_err err = {0};
    double loss = NAN;
    ZT_CHECK(zt_train_args_from_settings(&st, &(zt_plan){0}, &a, &err) == ZT_OK);
    a.plan = zt_plan_single(FP32, ZT_WRAP_TRANSFORMER);
    a.model_dir = FIX;
    a.data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a.loss_mask_path = mask_path;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    loss_log ll = {&loss, 0, 1};
    a.on_step = record_loss;
    a.on_step_ctx = &ll;
    zt_train_result res;
    ZT_CHECK_MSG(zt_train(&a, &res, &err) == ZT_OK, "%s", err.msg);
    return loss;
}

/* TRL's completion-only loss: the step's loss is the mean over the targets the
 * mask keeps.  Two complementary masks M and 1-M split the targets, so with the
 * weights fixed (lr 0) count(M)*L(M) + count(1-M)*L(1-M) = count(all)*L(all); an
 * all-ones mask is the run without one, to the bit. */
static void test_completion_only_loss(void)
{
    zt_tokens tok;
    zt_err err = {0};
    ZT_CHECK(zt_tokens_load("tests/fixtures/gqa_tied/tokens.npy", &tok, &err) == ZT_OK);
    size_t n = tok.n;
    int32_t *m[3];
    char tmp[64], path[3][256];
    ZT_CHECK(tmpdir_make(tmp, sizeof tmp, "zt_mask_"));
    const char *names[3] = {"m.npy", "not_m.npy", "ones.npy"};
    for (int k = 0; k < 3; k++) {
        m[k] = malloc(n * sizeof *m[k]);
        for (size_t i = 0; i < n; i++) /* runs of 5 prompt tokens and 3 completion tokens */
            m[k][i] = k == 2 ? 1 : (int32_t)((i % 8 >= 5) ^ (k == 1));
        tmpdir_join(path[k], sizeof path[k], tmp, names[k]);
        ZT_CHECK(zt_tokens_write_npy(path[k], m[k], n, &err) == ZT_OK);
    }
    long count[3];
    for (int k = 0; k < 3; k++) { /* the targets of step 1's G = 2 samples of 16 */
        zt_tokens t = tok;
        uint8_t *u = malloc(n);
        for (size_t i = 0; i < n; i++)
            u[i] = (uint8_t)m[k][i];
        t.loss_mask = u;
        zt_batcher b;
        ZT_CHECK(zt_batcher_init(&b, &t, 16, 0, 0, "mem", &err) == ZT_OK);
        count[k] = zt_batcher_count_targets(&b, 0, 2);
        zt_batcher_free(&b);
        free(u);
    }
    ZT_CHECK(count[0] + count[1] == 32 && count[2] == 32 && count[0] > 0 && count[1] > 0);
    double l_m = masked_step_loss(path[0]), l_not = masked_step_loss(path[1]), l_ones = masked_step_loss(path[2]);
    double l_none = masked_step_loss(NULL);
    ZT_CHECK_MSG(l_ones == l_none, "all-ones mask %.17g, no mask %.17g", l_ones, l_none);
    ZT_CHECK_CLOSE(count[0] * l_m + count[1] * l_not, 32.0 * l_none, 1e-12, 1e-12);
    ZT_CHECK(fabs(l_m - l_none) > 1e-6); /* the mask changed what was averaged */
    /* a mask of another length, or with a value other than 0/1, is bad input */
    char bad[256];
    tmpdir_join(bad, sizeof bad, tmp, "bad.npy");
    m[2][3] = 2;
    ZT_CHECK(zt_tokens_write_npy(bad, m[2], n, &err) == ZT_OK);
    zt_tokens t2 = tok;
    t2.loss_mask = NULL;
    ZT_CHECK(zt_tokens_load_mask(bad, &t2, &err) == ZT_EINPUT && strstr(err.msg, "a loss-mask value of 2"));
    ZT_CHECK(zt_tokens_write_npy(bad, m[0], n - 1, &err) == ZT_OK);
    ZT_CHECK(zt_tokens_load_mask(bad, &t2, &err) == ZT_EINPUT && strstr(err.msg, "loss-mask values for"));
    ZT_CHECK(t2.loss_mask == NULL);
    for (int k = 0; k < 3; k++)
        free(m[k]);
    zt_tokens_free(&tok);
    ZT_CHECK(tmpdir_remove(tmp) == 0);
}

static void test_windows_and_shuffle(void)
{
    int32_t ids[41];
    for (int i = 0; i < 41; i++)
        ids[i] = i;
    zt_tokens tok = {ids, 41, 40, NULL};
    zt_batcher b;
    zt_err err;
    ZT_CHECK(zt_batcher_init(&b, &tok, 8, 0, 0, "mem", &err) == ZT_OK);
    ZT_CHECK(b.nwin == 5);
    int in[16], tg[16];
    zt_batcher_fill(&b, 1, 2, in, tg); /* windows 1, 2 */
    ZT_CHECK(in[0] == 8 && tg[0] == 9 && in[7] == 15 && tg[7] == 16 && in[8] == 16);
    zt_batcher_fill(&b, 5, 1, in, tg); /* wraps to window 0 */
    ZT_CHECK(in[0] == 0);
    zt_batcher_free(&b);
    /* shuffled: each epoch is a permutation, seeded, different across epochs and seeds */
    int first[3][5];
    for (int run = 0; run < 3; run++) {
        ZT_CHECK(zt_batcher_init(&b, &tok, 8, 1, run < 2 ? 7 : 8, "mem", &err) == ZT_OK);
        int seen[5] = {0};
        for (int k = 0; k < 5; k++) {
            zt_batcher_fill(&b, k, 1, in, tg);
            first[run][k] = in[0] / 8;
            seen[in[0] / 8]++;
        }
        for (int w = 0; w < 5; w++)
            ZT_CHECK(seen[w] == 1);
        zt_batcher_free(&b);
    }
    ZT_CHECK(memcmp(first[0], first[1], sizeof first[0]) == 0);
    ZT_CHECK(memcmp(first[0], first[2], sizeof first[0]) != 0);
}

static void test_layout_padding_and_order(void)
{
    zt_llama_config c = {0};
    c.hidden_size = 10;
    c.intermediate_size = 7;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 4;
    c.vocab_size = 11;
    c.tie_word_embeddings = 0;
    zt_layout lay;
    zt_err err;
    ZT_CHECK(zt_layout_build(&lay, &c, ZT_WRAP_TRANSFORMER, 0, 3, &err) == ZT_OK);
    ZT_CHECK(lay.nunits == 4);
    size_t total = 0;
    for (int u = 0; u < lay.nunits; u++) {
        ZT_CHECK(lay.units[u].padded_numel % 3 == 0);
        ZT_CHECK(lay.units[u].padded_numel - lay.units[u].numel < 3);
        total += lay.units[u].numel;
    }
    ZT_CHECK(total == lay.numel);
    /* 11*10 embed + 10 norm + 11*10 lm_head + 3 layers * (2*10 + (8+4+4)*10 + 10*8 + 3*7*10) */
    ZT_CHECK(lay.numel == 110 + 10 + 110 + 3 * (20 + 160 + 80 + 210));
    /* q, k, v adjacent; gate, up adjacent (one matrix view each) */
    const zt_param *q = zt_layout_param(&lay, 1, ZT_P_Q), *k = zt_layout_param(&lay, 1, ZT_P_K);
    const zt_param *v = zt_layout_param(&lay, 1, ZT_P_V), *g = zt_layout_param(&lay, 1, ZT_P_GATE);
    const zt_param *up = zt_layout_param(&lay, 1, ZT_P_UP);
    ZT_CHECK(k->offset == q->offset + q->numel && v->offset == k->offset + k->numel);
    ZT_CHECK(up->offset == g->offset + g->numel);
    ZT_CHECK(!zt_layout_param(&lay, 0, ZT_P_ATTN_NORM)->decay && q->decay);
    ZT_CHECK(zt_layout_find(&lay, "lm_head.weight") != NULL);
    zt_layout_free(&lay);
    c.tie_word_embeddings = 1;
    ZT_CHECK(zt_layout_build(&lay, &c, ZT_WRAP_SIZE, 500, 1, &err) == ZT_OK);
    ZT_CHECK(zt_layout_find(&lay, "lm_head.weight") == NULL);
    ZT_CHECK(lay.nunits == 3); /* root + layers {0,1} (470 < 500, then 940) + {2} */
    zt_layout_free(&lay);
}

int main(void)
{
    ZT_RUN(test_args_from_settings);
    ZT_RUN(test_gradient_accumulation_matches_bigger_batch);
    ZT_RUN(test_gradient_checkpointing_is_exact);
    ZT_RUN(test_activation_estimate_matches_allocation);
    ZT_RUN(test_wrap_policies_agree);
    ZT_RUN(test_bf16_master_loses_small_updates);
    ZT_RUN(test_lr_schedules);
    ZT_RUN(test_sample_order);
    ZT_RUN(test_windows_and_shuffle);
    ZT_RUN(test_loss_mask_targets);
    ZT_RUN(test_completion_only_loss);
    ZT_RUN(test_layout_padding_and_order);
    zt_matmul_shutdown();
    ZT_TEST_MAIN_END();
}
