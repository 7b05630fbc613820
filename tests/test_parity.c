/* test_parity.c — ztrain against PyTorch on the fixtures of tools/make_fixtures.py.
 *
 * Given the same weights and tokens, for each fixture (GQA + tied embeddings;
 * untied with sizes that are not powers of two and head_dim != hidden/heads; a
 * Mistral with a sliding window shorter than the sequence):
 *   fp32: logits and loss of batch 0           rel err <= 1e-5
 *         every parameter's gradient           rel err <= 1e-4
 *         3 AdamW steps (warmup, clipping, wd): losses, grad norms and all
 *         final weights                        rel err <= 1e-5
 *   bf16 (fp32 master, bf16 matrix-product inputs, fp32 accumulation):
 *         logits, loss                         rel err <= 1e-2
 *         gradients                            rel err <= 5e-2 (bf16-rounded reduction)
 *         3-step losses                        rel err <= 1e-2
 * "rel err" of a tensor is max|ours - ref| / max|ref| (the fixture README gives
 * the reference's own fp32-vs-fp64 error, about 1e-6 for gradients). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/mem.h"
#include "../src/io/hf_model.h"
#include "../src/io/safetensors.h"
#include "../src/io/tokens.h"
#include "../src/kernels/matmul.h"
#include "../src/model/llama.h"
#include "../src/train/batches.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "../src/train/weights.h"
#include "test.h"
#include "tmpdir.h"

/* gqa_hd32 has the head size the bf16-operand attention takes (attention16.c); the other
 * two run the fp32 tile kernel in bf16 compute too.  mistral_window is a Mistral whose
 * sliding_window (50) is shorter than its block_size (160), with references computed by
 * transformers' MistralForCausalLM itself (tools/make_mistral_fixtures.py); head_dim 32,
 * so bf16 compute runs the windowed bf16-operand attention.  llama3_rope (Llama 3.1's
 * rope_scaling) and qwen2_bias (Qwen2's q/k/v biases, which take no weight decay) come
 * from transformers' LlamaForCausalLM and Qwen2ForCausalLM (tools/make_family_fixtures.py). */
static const char *fixtures[] = {"tests/fixtures/gqa_tied", "tests/fixtures/untied_odd",
                                 "tests/fixtures/gqa_hd32", "tests/fixtures/mistral_window",
                                 "tests/fixtures/llama3_rope", "tests/fixtures/qwen2_bias"};
#define NFIX ((int)(sizeof fixtures / sizeof fixtures[0]))

typedef struct fixture_args {
    int T, B, A, steps, max_steps, warmup;
    double lr, wd, b1, b2, eps, clip;
} fixture_args;

static fixture_args read_args(const char *dir)
{
    fixture_args a = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/train_args.json", dir);
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    ZT_CHECK_MSG(j != NULL, "cannot parse %s", path);
    if (!j)
        return a;
#define NUM(key) (cJSON_GetObjectItem(j, key) ? cJSON_GetObjectItem(j, key)->valuedouble : 0.0)
    a.T = (int)NUM("block_size");
    a.B = (int)NUM("batch_size");
    a.A = (int)NUM("grad_accum");
    a.steps = (int)NUM("steps");
    a.max_steps = (int)NUM("max_steps");
    a.warmup = (int)NUM("warmup_steps");
    a.lr = NUM("learning_rate");
    a.wd = NUM("weight_decay");
    a.b1 = NUM("adam_beta1");
    a.b2 = NUM("adam_beta2");
    a.eps = NUM("adam_epsilon");
    a.clip = NUM("max_grad_norm");
#undef NUM
    cJSON_Delete(j);
    return a;
}

/* max|a - b| / max|b| over n elements (b read as fp32 from the reference file) */
static double rel_err(const float *a, const zt_st_tensor *ref, size_t n)
{
    double maxd = 0.0, maxr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = zt_load_f32(ref->data, ref->dtype, i);
        double d = fabs((double)a[i] - r);
        if (d > maxd)
            maxd = d;
        if (fabs(r) > maxr)
            maxr = fabs(r);
    }
    return maxd / (maxr > 0 ? maxr : 1.0);
}

static const zt_st_tensor *ref_tensor(const zt_st_file *ref, const char *name)
{
    const zt_st_tensor *t = zt_st_find(ref, name);
    ZT_CHECK_MSG(t != NULL && t->has_zt_dtype, "reference tensor %s missing", name);
    return t;
}

typedef struct setup {
    zt_llama_config cfg;
    zt_layout lay;
    zt_engine *eng;
    zt_model model;
    zt_tokens tokens;
    zt_batcher batcher;
    zt_comm comm;
    int *in, *tg;
} setup;

static int setup_open(setup *s, const char *dir, const fixture_args *fa, zt_precision prec)
{
    zt_err err = {0};
    char path[512];
    memset(s, 0, sizeof *s);
    snprintf(path, sizeof path, "%s/tokens.npy", dir);
    int rc = zt_hf_read_config_dir(dir, &s->cfg, &err);
    if (!rc) rc = zt_tokens_load(path, &s->tokens, &err);
    if (!rc) rc = zt_layout_build(&s->lay, &s->cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err);
    zt_comm_create_local(&s->comm);
    if (!rc) rc = zt_engine_create(&s->eng, zt_backend_cpu(), &s->lay, prec, 0, NULL, &s->comm, &err);
    if (!rc) rc = zt_hf_load_params(dir, &s->lay, s->eng, &err);
    if (!rc) zt_engine_refresh_gathered(s->eng);
    zt_param_owner own = rc ? (zt_param_owner){0} : zt_engine_param_owner(s->eng);
    if (!rc) rc = zt_model_init(&s->model, &s->cfg, &s->lay, &own, fa->B, fa->T, 0, &err);
    if (!rc) rc = zt_batcher_init(&s->batcher, &s->tokens, fa->T, 0, 0, path, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "setup %s: %s", dir, err.msg);
    s->in = malloc(sizeof(int) * (size_t)fa->B * fa->T);
    s->tg = malloc(sizeof(int) * (size_t)fa->B * fa->T);
    if (rc == ZT_OK)
        zt_batcher_fill(&s->batcher, 0, fa->B, s->in, s->tg);
    return rc;
}

static void setup_close(setup *s)
{
    free(s->in);
    free(s->tg);
    zt_batcher_free(&s->batcher);
    zt_model_free(&s->model);
    zt_engine_destroy(s->eng);
    zt_layout_free(&s->lay);
    zt_tokens_free(&s->tokens);
}

/* Forward batch 0 (logits, loss), then forward+backward (every gradient). */
static void check_batch0(const char *dir, zt_precision prec, const char *prefix, double tol_logits,
                         double tol_grad)
{
    fixture_args fa = read_args(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    zt_st_file *ref = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open(path, &ref, &err) == ZT_OK, "%s", err.msg);
    if (!ref)
        return;
    setup s;
    if (setup_open(&s, dir, &fa, prec) == ZT_OK) {
        int N = fa.B * fa.T;
        double loss_sum = 0;
        char name[160];
        ZT_CHECK(zt_model_forward(&s.model, s.in, s.tg, &loss_sum, &err) == ZT_OK);
        snprintf(name, sizeof name, "%slogits", prefix);
        const zt_st_tensor *t = ref_tensor(ref, name);
        if (t) {
            double e = rel_err(zt_model_logits(&s.model), t, (size_t)N * s.cfg.vocab_size);
            ZT_CHECK_MSG(e <= tol_logits, "%s %s: rel err %.3g > %.3g", dir, name, e, tol_logits);
        }
        snprintf(name, sizeof name, "%sloss", prefix);
        if ((t = ref_tensor(ref, name))) {
            float loss = (float)(loss_sum / N);
            double e = rel_err(&loss, t, 1);
            ZT_CHECK_MSG(e <= tol_logits, "%s %s: %.9g vs %.9g", dir, name, loss,
                         zt_load_f32(t->data, t->dtype, 0));
        }
        /* gradients of the mean loss, with lm_head's input gradient computed both ways
         * (directly, and as the transposed product used for wide vocabularies) */
        for (int transposed = 0; transposed <= 1; transposed++) {
            ZT_CHECK(zt_model_set_head_transposed(&s.model, transposed, &err) == ZT_OK);
            zt_engine_zero_grads(s.eng);
            ZT_CHECK(zt_model_forward_backward(&s.model, s.in, s.tg, 1.0f / (float)N, &loss_sum, &err) == ZT_OK);
            double worst = 0;
            float **g = calloc((size_t)s.lay.nparams, sizeof *g);
            for (int i = 0; i < s.lay.nparams; i++)
                g[i] = malloc(s.lay.params[i].numel * sizeof(float));
            ZT_CHECK(zt_engine_full_grads(s.eng, g, &err) == ZT_OK);
            for (int i = 0; i < s.lay.nparams; i++) {
                const zt_param *p = &s.lay.params[i];
                snprintf(name, sizeof name, "%sgrad.%s", prefix, p->name);
                if ((t = ref_tensor(ref, name))) {
                    double e = rel_err(g[i], t, p->numel);
                    if (e > worst)
                        worst = e;
                    ZT_CHECK_MSG(e <= tol_grad, "%s %s (lm_head %s): rel err %.3g > %.3g", dir, name,
                                 transposed ? "transposed" : "direct", e, tol_grad);
                }
                free(g[i]);
            }
            free(g);
            printf("     %s %s (lm_head input gradient %s): worst gradient rel err %.3g\n", dir,
                   prefix[0] ? prefix : "fp32.", transposed ? "transposed" : "direct", worst);
        }
    }
    setup_close(&s);
    zt_st_close(ref);
}

/* The trainer's per-step metrics. */
typedef struct step_log {
    zt_step_metrics m[16];
    int n;
} step_log;

static void record_step(void *ctx, const zt_step_metrics *m)
{
    step_log *l = ctx;
    if (l->n < 16)
        l->m[l->n++] = *m;
}

/* Three optimizer steps through the real trainer; compare its metrics and saved weights. */
static void check_training(const char *dir, zt_precision prec, const char *prefix, double tol_loss,
                           double tol_weights)
{
    fixture_args fa = read_args(dir);
    char tmp[64];
    ZT_CHECK(tmpdir_make(tmp, sizeof tmp, "zt_parity_") != NULL);
    char out[600], data[600], refpath[600];
    tmpdir_join(out, sizeof out, tmp, "out");
    snprintf(data, sizeof data, "%s/tokens.npy", dir);
    snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
    /* the fixture's run, as the flags of `ztrain train` would give it */
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = fa.T;
    st.batch = fa.B;
    st.accum = fa.A;
    st.max_steps = fa.max_steps;
    st.lr = fa.lr;
    st.weight_decay = fa.wd;
    st.beta1 = fa.b1;
    st.beta2 = fa.b2;
    st.eps = fa.eps;
    st.max_grad_norm = fa.clip;
    st.warmup_steps = fa.warmup;
    st.seed = 0;
    zt_plan plan = zt_plan_single(prec, ZT_WRAP_TRANSFORMER);
    plan.prec.save = ZT_F32;
    zt_err err = {0};
    zt_train_args a;
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK, "%s", err.msg);
    a.model_dir = dir;
    a.data_path = data;
    a.output_dir = out;
    zt_train_hooks stop = {.stop_after_steps = fa.steps}; /* of the schedule's max_steps */
    a.hooks = &stop;
    step_log got = {0};
    a.on_step = record_step;
    a.on_step_ctx = &got;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    zt_train_result res;
    int rc = zt_train(&a, &res, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    zt_st_file *ref = NULL;
    ZT_CHECK_MSG(zt_st_open(refpath, &ref, &err) == ZT_OK, "%s", err.msg);
    if (rc != ZT_OK || !ref) {
        zt_st_close(ref);
        return;
    }
    /* per-step losses, grad norms and lrs from the JSONL */
    char name[160];
    snprintf(name, sizeof name, "%slosses", prefix);
    const zt_st_tensor *losses = ref_tensor(ref, name);
    snprintf(name, sizeof name, "%sgrad_norms", prefix);
    const zt_st_tensor *norms = ref_tensor(ref, name);
    const zt_st_tensor *lrs = ref_tensor(ref, "lrs");
    for (int step = 0; step < fa.steps && step < got.n; step++) {
        float l = (float)got.m[step].loss, g = (float)got.m[step].grad_norm, r = (float)got.m[step].lr;
        if (losses)
            ZT_CHECK_CLOSE(l, zt_load_f32(losses->data, losses->dtype, step), tol_loss, 1e-6);
        if (norms)
            ZT_CHECK_CLOSE(g, zt_load_f32(norms->data, norms->dtype, step), tol_loss * 10, 1e-6);
        if (lrs)
            ZT_CHECK_CLOSE(r, zt_load_f32(lrs->data, lrs->dtype, step), 1e-6, 1e-9);
    }
    ZT_CHECK_MSG(got.n == fa.steps, "%s: %d steps reported, expected %d", dir, got.n, fa.steps);
    if (tol_weights > 0) {
        zt_weights *w = NULL;
        ZT_CHECK_MSG(zt_weights_open(out, &w, &err) == ZT_OK, "%s", err.msg);
        double worst = 0;
        for (int i = 0; w && i < zt_weights_count(w); i++) {
            const zt_st_tensor *ours = zt_weights_get(w, i);
            snprintf(name, sizeof name, "step3.%s", ours->name);
            const zt_st_tensor *t = ref_tensor(ref, name);
            if (!t)
                continue;
            ZT_CHECK(ours->numel == t->numel && ours->dtype == ZT_F32);
            double e = rel_err(ours->data, t, (size_t)t->numel);
            if (e > worst)
                worst = e;
            ZT_CHECK_MSG(e <= tol_weights, "%s %s: rel err %.3g > %.3g", dir, name, e, tol_weights);
        }
        printf("     %s: worst weight rel err after %d steps %.3g\n", dir, fa.steps, worst);
        zt_weights_close(w);
    }
    zt_st_close(ref);
    ZT_CHECK(tmpdir_remove(tmp) == 0);
}

static const zt_precision FP32 = ZT_PRECISION_ALL(ZT_F32);
static const zt_precision BF16_ALIGNED = {.load = ZT_BF16, .master = ZT_F32, .compute = ZT_BF16,
                                          .reduce = ZT_BF16, .save = ZT_F32};

static void test_fp32_logits_loss_grads(void)
{
    for (int i = 0; i < NFIX; i++)
        check_batch0(fixtures[i], FP32, "", 1e-5, 1e-4);
}

static void test_fp32_three_adamw_steps(void)
{
    for (int i = 0; i < NFIX; i++)
        check_training(fixtures[i], FP32, "", 1e-5, 1e-5);
}

static void test_bf16_logits_loss_grads(void)
{
    for (int i = 0; i < NFIX; i++)
        check_batch0(fixtures[i], BF16_ALIGNED, "bf16.", 1e-2, 5e-2);
}

static void test_bf16_three_steps(void)
{
    for (int i = 0; i < NFIX; i++)
        check_training(fixtures[i], BF16_ALIGNED, "bf16.", 1e-2, 0);
}

/* RoPE's inverse frequencies equal transformers' bit for bit: Llama 3.1's scaling
 * (llama3_rope: pair 0 in the high band, 1 in the medium one, 2-7 in the low one) and
 * the default formula (qwen2_bias). */
static void test_rope_inv_freq_bit_exact(void)
{
    static const char *const dirs[] = {"tests/fixtures/llama3_rope", "tests/fixtures/qwen2_bias"};
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/reference.safetensors", dirs[k]);
        zt_st_file *ref = NULL;
        zt_err err = {0};
        zt_llama_config cfg;
        ZT_CHECK_MSG(zt_st_open(path, &ref, &err) == ZT_OK && zt_hf_read_config_dir(dirs[k], &cfg, &err) == ZT_OK,
                     "%s", err.msg);
        const zt_st_tensor *t = ref ? ref_tensor(ref, "rope.inv_freq") : NULL;
        if (t) {
            ZT_CHECK(t->numel == cfg.head_dim / 2 && cfg.rope_llama3 == (k == 0));
            zt_rope_freqs f = zt_model_rope_freqs(&cfg);
            for (int i = 0; i < cfg.head_dim / 2; i++) {
                float ours = zt_rope_inv_freq(&f, i, cfg.head_dim), hf = zt_load_f32(t->data, t->dtype, (size_t)i);
                ZT_CHECK_MSG(memcmp(&ours, &hf, sizeof ours) == 0, "%s pair %d: inv_freq %.9g, transformers %.9g",
                             dirs[k], i, ours, hf);
            }
        }
        zt_st_close(ref);
    }
}

int main(void)
{
    ZT_RUN(test_rope_inv_freq_bit_exact);
    ZT_RUN(test_fp32_logits_loss_grads);
    ZT_RUN(test_fp32_three_adamw_steps);
    ZT_RUN(test_bf16_logits_loss_grads);
    ZT_RUN(test_bf16_three_steps);
    zt_matmul_shutdown();
    ZT_TEST_MAIN_END();
}
