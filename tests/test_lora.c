/* test_lora.c — LoRA (model/lora.h) against PEFT.
 *
 * The adapters' layout: for the cases of tests/fixtures/lora/counts.json
 * (tools/make_lora_fixtures.py), the adapter units hold exactly the tensors PEFT saves,
 * by name and shape, their sizes sum to PEFT's trainable count, the base units are
 * frozen, and A_q A_k A_v lie back to back (one view, as W_qkv).
 *
 * The model pass with adapters (zt_model_set_lora) against PEFT on transformers' model:
 * tests/fixtures/lora/model.safetensors (tools/make_lora_model_fixture.py) holds, for a
 * Llama with every projection adapted and a Qwen2 (biases, rsLoRA) with three, seeded
 * adapters (B non-zero) and batch 0's mean loss and adapter gradients.  The loss within
 * 1e-6 relative, each gradient within 3e-6 of its tensor's largest magnitude (PEFT's fp32
 * reference is itself 1.4e-6 of it away from float64, as its generator prints; ztrain is
 * 1.2e-6 from it), on the CPU (with and without gradient checkpointing) and the emulated
 * device; the owner is asked for the adapter units' gradients only.  Then three steps as
 * Trainer takes them (each batch's pass, the global norm, torch's clipping by the
 * engine's rule zt_clip_coef, the kernels' AdamW on the adapter units): losses, grad
 * norms and the adapters after them against PEFT with torch's AdamW (STEPS_TOL below).
 *
 * One LoRA linear against PEFT's own layer:
 * tests/fixtures/lora/linear.safetensors (tools/make_lora_linear_fixture.py: torch 2.15,
 * peft 0.21.2) holds, for two cases (scale 5/3, and rsLoRA's 7/sqrt(4)), the inputs x, W,
 * A, B (B non-zero), dy, and PEFT's y, dx, dA, dB in fp32.  ztrain's forward and backward
 * run through the CPU table and the emulated device's (buffers the host cannot read)
 * and must give them within 1e-6 of each tensor's largest magnitude (the products' sums
 * run in another order than torch's, and nothing else differs; an element-wise relative
 * measure would fail torch itself: its fp32 y is 3e-5 away from fp64 on an element of
 * 1e-3 that cancels terms of order 1, 7e-8 of the tensor's largest).  dA and dB start from a
 * non-zero value, since they accumulate as every weight gradient does.  A table without
 * scale_add is refused by name. */
#include <string.h>

#include "../src/core/mem.h"
#include "../src/core/rng.h"
#include "../src/comm/comm.h"
#include "../src/engine/engine.h"
#include "../src/io/hf_model.h"
#include "../src/io/safetensors.h"
#include "../src/io/tokens.h"
#include "../src/kernels/adamw.h"
#include "../src/kernels/step_scalars.h"
#include "../src/model/frozen.h"
#include "../src/model/llama.h"
#include "../src/train/weights.h"
#include "../src/model/layout.h"
#include "tok_fixture.h"
#include "../src/model/lora.h"
#include "test.h"

#define TOL 1e-6
#define MODEL_GRAD_TOL 3e-6
/* three AdamW steps: losses and grad norms against PEFT's fp32 run (ztrain is within
 * 1.9e-7); adapters against the float64 run of the same steps, absolute: fp32 torch is
 * 6.5e-7 from it, ztrain 1.3e-6 on one element of layer 1's gate_proj B (a gradient near
 * zero, where Adam's m / sqrt(v) magnifies rounding) and within 1e-7 everywhere else;
 * the steps move the adapters by up to 3e-3, so a wrong or lost update fails by far */
#define STEPS_TOL 1e-6
#define STEPS_ABS 2e-6
#define GRAD0 0.25f /* what dA and dB hold before the backward adds to them */

static const float *tensor(zt_st_file *f, const char *cname, const char *what, size_t numel)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%s", cname, what);
    const zt_st_tensor *t = zt_st_find(f, name);
    ZT_CHECK_MSG(t && t->dtype == ZT_F32 && (size_t)t->numel == numel, "%s missing or of another size", name);
    return t && (size_t)t->numel == numel ? t->data : NULL;
}

/* n floats of host onto the device (a fresh buffer of be's) */
static float *up(const zt_backend *be, const float *host, size_t n)
{
    float *d = be->alloc(ZT_MEM_OTHER, n * sizeof(float));
    be->to_device(d, host, n * sizeof(float));
    return d;
}

static void compare(const zt_backend *be, const char *what, const float *dev, const float *want, size_t n,
                    float base, double tol)
{
    float *got = zt_alloc(ZT_MEM_OTHER, n * sizeof(float));
    be->to_host(got, dev, n * sizeof(float));
    double worst = 0, largest = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = (double)want[i] + base;
        worst = fabs(got[i] - ref) > worst ? fabs(got[i] - ref) : worst;
        largest = fabs(ref) > largest ? fabs(ref) : largest;
    }
    ZT_CHECK_MSG(worst <= tol * largest, "%s on %s: worst error %.3g of the largest %.3g (above %.3g of it)",
                 what, be->name, worst, largest, tol);
    zt_free(ZT_MEM_OTHER, got, n * sizeof(float));
}

static void run_case(const zt_backend *be, zt_st_file *f, const char *cname, int N, int out, int in, int r,
                     double scale)
{
    size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in, na = (size_t)r * in;
    size_t nb = (size_t)out * r, nt = (size_t)N * r;
    const float *x = tensor(f, cname, "x", nx), *w = tensor(f, cname, "w", nw),
                *a = tensor(f, cname, "a", na);
    const float *b = tensor(f, cname, "b", nb), *dy = tensor(f, cname, "dy", ny),
                *y = tensor(f, cname, "y", ny);
    const float *dx = tensor(f, cname, "dx", nx), *da = tensor(f, cname, "da", na);
    const float *db = tensor(f, cname, "db", nb);
    if (!x || !w || !a || !b || !dy || !y || !dx || !da || !db)
        return;
    float *fill = zt_alloc(ZT_MEM_OTHER, (na > nb ? na : nb) * sizeof(float));
    for (size_t i = 0; i < (na > nb ? na : nb); i++)
        fill[i] = GRAD0;
    float *dX = up(be, x, nx), *dW = up(be, w, nw), *dA = up(be, a, na), *dB = up(be, b, nb),
          *dDy = up(be, dy, ny);
    float *gA = up(be, fill, na), *gB = up(be, fill, nb);
    float *Y = be->alloc(ZT_MEM_OTHER, ny * 4), *T = be->alloc(ZT_MEM_OTHER, nt * 4);
    float *U = be->alloc(ZT_MEM_OTHER, ny * 4), *DT = be->alloc(ZT_MEM_OTHER, nt * 4);
    float *DX = be->alloc(ZT_MEM_OTHER, nx * 4);
    zt_lora_linear l = {be, ZT_F32,      N,      out,  in, r, (float)scale, dA,
                        dB, (size_t)out, ZT_F32, 0.0f, 0,  0, NULL,         0};
    zt_err err = {0};
    /* the frozen base's products, as the model computes them: y = x W^T, dx = dy W */
    ZT_CHECK(be->matmul(Y, dX, ZT_F32, dW, ZT_F32, N, out, in, 0, 1, 0.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_lora_forward(&l, Y, T, U, dX, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(be->matmul(DX, dDy, ZT_F32, dW, ZT_F32, N, in, out, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_lora_backward(&l, DX, gA, gB, U, DT, dDy, dX, T, &err) == ZT_OK, "%s", err.msg);
    char what[64];
    snprintf(what, sizeof what, "%s y", cname);
    compare(be, what, Y, y, ny, 0.0f, TOL);
    snprintf(what, sizeof what, "%s dx", cname);
    compare(be, what, DX, dx, nx, 0.0f, TOL);
    snprintf(what, sizeof what, "%s dA", cname);
    compare(be, what, gA, da, na, GRAD0, TOL);
    snprintf(what, sizeof what, "%s dB", cname);
    compare(be, what, gB, db, nb, GRAD0, TOL);
    float *bufs[] = {dX, dW, dA, dB, dDy, gA, gB, Y, T, U, DT, DX};
    size_t sizes[] = {nx, nw, na, nb, ny, na, nb, ny, nt, ny, nt, nx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->free(ZT_MEM_OTHER, bufs[i], sizes[i] * sizeof(float));
    zt_free(ZT_MEM_OTHER, fill, (na > nb ? na : nb) * sizeof(float));
}

/* Each case of a LoRA linear fixture (its metadata "cases": "name N out in r scale", ";"
 * between) through run: two cases in each file. */
typedef void (*linear_case_fn)(const zt_backend *be, zt_st_file *f, const char *cname, int N, int out, int in,
                               int r, double scale);

static void each_linear_case(const zt_backend *be, const char *path, linear_case_fn run)
{
    zt_st_file *f = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open(path, &f, &err) == ZT_OK, "%s", err.msg);
    if (!f)
        return;
    const char *cases = zt_st_metadata(f, "cases");
    ZT_CHECK(cases != NULL);
    int n = 0;
    for (const char *p = cases; p && *p; n++) {
        char name[32];
        int N, out, in, r;
        double scale;
        ZT_CHECK(sscanf(p, "%31s %d %d %d %d %lf", name, &N, &out, &in, &r, &scale) == 6);
        run(be, f, name, N, out, in, r, scale);
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    ZT_CHECK(n == 2);
    zt_st_close(f);
}

static void against_peft(const zt_backend *be)
{
    each_linear_case(be, "tests/fixtures/lora/linear.safetensors", run_case);
}

/* The case's target list as the flag takes it: none, one string, or a list. */
static int case_targets(const cJSON *c, unsigned *targets, zt_err *err)
{
    const cJSON *t = cJSON_GetObjectItem(c, "target_modules");
    const char *names[8];
    int n = 0;
    if (cJSON_IsString(t))
        names[n++] = t->valuestring;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e && n < 8; e = e->next)
        names[n++] = e->valuestring;
    return zt_lora_targets_parse("test", names, n, targets, err);
}

/* Every adapter tensor PEFT saves is in the layout, same name and shape, in its layer's
 * adapter unit; returns how many the layout holds. */
static int check_tensors(const zt_layout *lay, const cJSON *saved, const char *model)
{
    for (const cJSON *e = saved->child; e; e = e->next) {
        const char *name = cJSON_GetArrayItem(e, 0)->valuestring;
        const cJSON *shape = cJSON_GetArrayItem(e, 1);
        const zt_param *p = zt_layout_find(lay, name);
        ZT_CHECK_MSG(p != NULL, "%s: PEFT's %s is not in the layout", model, name);
        if (!p)
            continue;
        ZT_CHECK_MSG(p->shape[0] == cJSON_GetArrayItem(shape, 0)->valueint &&
                         p->shape[1] == cJSON_GetArrayItem(shape, 1)->valueint,
                     "%s: %s is %ld x %ld", model, name, p->shape[0], p->shape[1]);
        ZT_CHECK(p->lora && p->unit == lay->layer_adapter_unit[p->layer] && p->decay);
        ZT_CHECK(lay->lora_index[((size_t)p->layer * ZT_P_NKINDS + p->kind) * 2 + (size_t)(p->lora - 1)] ==
                 (int)(p - lay->params));
    }
    int n = 0;
    for (int i = 0; i < lay->nparams; i++)
        n += lay->params[i].lora != 0;
    return n;
}

static void layout_case(const cJSON *c, zt_wrap_policy wrap)
{
    const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s/config.json", model);
    zt_llama_config cfg;
    zt_layout lay;
    zt_err err = {0};
    zt_lora l = {.r = cJSON_GetObjectItem(c, "r")->valueint, .alpha = 1};
    if (!(zt_hf_config_read(path, &cfg, &err) == ZT_OK && case_targets(c, &l.targets, &err) == ZT_OK &&
          zt_layout_build(&lay, &cfg, wrap, 0, 3, &err) == ZT_OK &&
          zt_lora_layout(&lay, &l, &err) == ZT_OK)) {
        ZT_CHECK_MSG(0, "%s: %s", model, err.msg);
        return;
    }
    const cJSON *saved = cJSON_GetObjectItem(c, "adapter_tensors");
    ZT_CHECK_MSG(check_tensors(&lay, saved, model) == cJSON_GetArraySize(saved), "%s: adapters beyond PEFT's",
                 model);
    size_t adapters = 0;
    for (int u = 0; u < lay.nunits; u++) {
        const zt_unit *un = &lay.units[u];
        ZT_CHECK(u < lay.nbase ? un->frozen && un->adapts == -1 : !un->frozen && un->adapts >= 0);
        ZT_CHECK(un->padded_numel % 3 == 0 && un->padded_numel - un->numel < 3);
        if (u >= lay.nbase) {
            const zt_unit *b = &lay.units[un->adapts];
            ZT_CHECK(un->first_layer == b->first_layer && un->num_layers == b->num_layers);
            adapters += un->numel;
        }
    }
    ZT_CHECK(lay.nunits == lay.nbase + (wrap == ZT_WRAP_NONE ? 1 : cfg.num_hidden_layers));
    ZT_CHECK_MSG(adapters == (size_t)cJSON_GetObjectItem(c, "trainable")->valuedouble,
                 "%s: %zu adapter parameters", model, adapters);
    const int *ix = lay.lora_index;
    if ((l.targets >> ZT_P_Q & 1u) && (l.targets >> ZT_P_K & 1u) &&
        (l.targets >> ZT_P_V & 1u)) { /* layer 0 */
        const zt_param *aq = &lay.params[ix[ZT_P_Q * 2]], *ak = &lay.params[ix[ZT_P_K * 2]];
        const zt_param *av = &lay.params[ix[ZT_P_V * 2]];
        ZT_CHECK(ak->offset == aq->offset + aq->numel && av->offset == ak->offset + ak->numel);
    }
    zt_layout_free(&lay);
}

static void test_layout(void)
{
    cJSON *j = read_json("tests/fixtures/lora/counts.json");
    ZT_CHECK_MSG(j != NULL, "cannot read tests/fixtures/lora/counts.json");
    if (!j)
        return;
    int n = 0;
    for (const cJSON *c = cJSON_GetObjectItem(j, "cases")->child; c; c = c->next, n++) {
        layout_case(c, ZT_WRAP_TRANSFORMER);
        layout_case(c, ZT_WRAP_NONE);
    }
    ZT_CHECK(n == 5);
    cJSON_Delete(j);
}

/* PEFT's initialisation: every B zero; every A uniform within 1/sqrt(in), its second
 * moment that of U(-b, b), b^2/3 (over all A's, within 0.03 of 1/3 after scaling by b:
 * the mean of 5472 squares has a standard error of 0.004); a tensor's values follow its
 * name and the seed, not the wrap; another seed or another tensor gives others. */
static void test_init(void)
{
    zt_llama_config cfg;
    zt_layout a, b;
    zt_err err = {0};
    zt_lora l = {.r = 4, .alpha = 8, .targets = 0x7fu << ZT_P_Q};
    if (zt_hf_config_read("tests/fixtures/untied_odd/config.json", &cfg, &err) ||
        zt_layout_build(&a, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) || zt_lora_layout(&a, &l, &err) ||
        zt_layout_build(&b, &cfg, ZT_WRAP_NONE, 0, 4, &err) || zt_lora_layout(&b, &l, &err)) {
        ZT_CHECK_MSG(0, "%s", err.msg);
        return;
    }
    double m2 = 0;
    size_t n = 0, nb = 0;
    for (int i = 0; i < a.nparams; i++) {
        const zt_param *p = &a.params[i];
        if (!p->lora)
            continue;
        float *x = malloc(p->numel * sizeof *x), *y = malloc(p->numel * sizeof *y),
              *z = malloc(p->numel * sizeof *z);
        zt_lora_init_param(p, 42, x);
        zt_lora_init_param(zt_layout_find(&b, p->name), 42, y);
        zt_lora_init_param(p, 43, z);
        ZT_CHECK_MSG(!memcmp(x, y, p->numel * sizeof *x), "%s: another wrap, other values", p->name);
        double bound = 1.0 / sqrt((double)p->shape[1]);
        int same = 1;
        for (size_t j = 0; j < p->numel; j++) {
            if (p->lora == 2) {
                nb += x[j] != 0.0f;
                continue;
            }
            ZT_CHECK(fabs(x[j]) <= bound);
            m2 += (double)x[j] * x[j] / (bound * bound);
            n++;
            same &= x[j] == z[j];
        }
        ZT_CHECK_MSG(p->lora == 2 || !same, "%s: seed 43 gives seed 42's values", p->name);
        if (p->lora == 1 && i + 1 < a.nparams && a.params[i + 1].lora == 1) { /* the next A differs */
            float *w = malloc(a.params[i + 1].numel * sizeof *w);
            zt_lora_init_param(&a.params[i + 1], 42, w);
            ZT_CHECK(memcmp(x, w, 2 * sizeof *x));
            free(w);
        }
        free(x), free(y), free(z);
    }
    ZT_CHECK_MSG(nb == 0, "%zu non-zero B elements", nb);
    ZT_CHECK_MSG(n > 5000 && fabs(m2 / (double)n - 1.0 / 3.0) < 0.03,
                 "A's second moment %.4f of b^2 over %zu", m2 / (double)n, n);
    zt_layout_free(&a);
    zt_layout_free(&b);
}

/* ---- the model pass ------------------------------------------------------------ */

/* A frozen copy of the weights with a gradient buffer per unit, counting grad_begin. */
typedef struct lora_owner {
    zt_frozen_params fr;
    zt_param_owner inner;
    zt_param_owner_ops ops;
    float **grads;
    int *began;
} lora_owner;

static lora_owner *the_owner; /* the ops' context is the frozen weights'; the rest is here */

static const void *lo_acquire(void *ctx, int u, zt_pass pass)
{
    (void)pass;
    return the_owner->inner.ops->acquire(ctx, u, ZT_PASS_FORWARD);
}
static void lo_release(void *ctx, int u) { the_owner->inner.ops->release(ctx, u); }
static float *lo_grad_begin(void *ctx, int u, int *fresh)
{
    (void)ctx;
    *fresh = 0; /* a sum to add onto: zeros, cleared by the test */
    the_owner->began[u]++;
    return the_owner->grads[u];
}
static void lo_grad_end(void *ctx, int u) { (void)ctx, (void)u; }
static void lo_progress(void *ctx) { (void)ctx; }
static void lo_reset(void *ctx) { the_owner->inner.ops->reset(ctx); }

static void frozen_sink(void *f, const zt_param *p, const void *src, zt_dtype dt)
{
    zt_frozen_set_param(f, p, src, dt);
}

/* The owner over lay (base and adapters): the base from the fixture model's directory,
 * read through `plain` (the same layout without adapters: the same units and offsets),
 * the adapters from the case's tensors. */
static int owner_open(lora_owner *g, const zt_backend *be, const char *fix, const zt_layout *plain,
                      const zt_layout *lay, zt_st_file *f, const char *cname, zt_err *err)
{
    the_owner = g;
    if (zt_frozen_init(&g->fr, lay, ZT_F32, be, err) ||
        zt_hf_load_params_to(fix, plain, frozen_sink, &g->fr, err))
        return ZT_EFAIL;
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (!p->lora)
            continue;
        char name[128];
        snprintf(name, sizeof name, "%s.%s", cname, p->name);
        const zt_st_tensor *t = zt_st_find(f, name);
        ZT_CHECK_MSG(t && (size_t)t->numel == p->numel, "%s missing", name);
        if (t && (size_t)t->numel == p->numel)
            zt_frozen_set_param(&g->fr, p, t->data, ZT_F32);
    }
    g->inner = zt_frozen_owner(&g->fr);
    g->ops = (zt_param_owner_ops)ZT_PARAM_OWNER_OPS(lo_acquire, lo_release, lo_grad_begin, lo_grad_end,
                                                    lo_progress, lo_reset);
    g->grads = calloc((size_t)lay->nunits, sizeof *g->grads);
    g->began = calloc((size_t)lay->nunits, sizeof *g->began);
    for (int u = 0; u < lay->nunits; u++) {
        g->grads[u] = be->alloc(ZT_MEM_OTHER, lay->units[u].padded_numel * 4);
        be->zero(g->grads[u], lay->units[u].padded_numel * 4);
    }
    return ZT_OK;
}

static void owner_close(lora_owner *g, const zt_backend *be, const zt_layout *lay)
{
    for (int u = 0; u < lay->nunits; u++)
        be->free(ZT_MEM_OTHER, g->grads[u], lay->units[u].padded_numel * 4);
    free(g->grads);
    free(g->began);
    zt_frozen_free(&g->fr);
}

/* Every adapter gradient against PEFT's; only adapter units were asked for theirs. */
static void check_grads(const lora_owner *g, const zt_backend *be, const zt_layout *lay, zt_st_file *f,
                        const char *cname)
{
    for (int u = 0; u < lay->nunits; u++)
        ZT_CHECK_MSG(g->began[u] == (u >= lay->nbase), "%s: unit %d: %d grad_begin", cname, u, g->began[u]);
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        char name[128];
        snprintf(name, sizeof name, "%s.grad.%s", cname, p->name);
        const zt_st_tensor *t = p->lora ? zt_st_find(f, name) : NULL;
        if (!p->lora)
            continue;
        ZT_CHECK_MSG(t && (size_t)t->numel == p->numel, "%s missing", name);
        if (t && (size_t)t->numel == p->numel)
            compare(be, name, g->grads[p->unit] + p->offset, t->data, p->numel, 0.0f, MODEL_GRAD_TOL);
    }
}

/* Three AdamW steps over the adapters as Trainer takes them (the generator's settings):
 * each batch's pass, the global norm of the adapters' gradients and torch's clipping
 * (step_scalars.h, the engine's rules), the kernels' AdamW on each adapter unit. */
enum { STEPS = 3 };
static const struct {
    double lr, wd, b1, b2, eps, max_norm;
} HP = {1e-3, 0.1, 0.9, 0.95, 1e-8, 0.5};

static void run_steps(const zt_backend *be, zt_model *m, lora_owner *g, const zt_layout *lay, const zt_tokens *tok,
                      float losses[STEPS], float norms[STEPS])
{
    enum { B = 2, T = 16 };
    float **mv = calloc(2 * (size_t)lay->nunits, sizeof *mv);
    for (int u = lay->nbase; u < lay->nunits; u++)
        for (int k = 0; k < 2; k++) {
            mv[2 * u + k] = be->alloc(ZT_MEM_OTHER, lay->units[u].padded_numel * 4);
            be->zero(mv[2 * u + k], lay->units[u].padded_numel * 4);
        }
    zt_err err = {0};
    for (int s = 0; s < STEPS; s++) {
        int in[B * T], tg[B * T];
        for (int i = 0; i < B * T; i++)
            in[i] = tok->ids[s * B * T + i], tg[i] = tok->ids[s * B * T + i + 1];
        for (int u = lay->nbase; u < lay->nunits; u++)
            be->zero(g->grads[u], lay->units[u].padded_numel * 4);
        double loss = 0, sumsq = 0;
        ZT_CHECK_MSG(zt_model_forward_backward(m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK, "%s", err.msg);
        for (int u = lay->nbase; u < lay->nunits; u++)
            sumsq += be->sumsq(g->grads[u], ZT_F32, lay->units[u].padded_numel);
        losses[s] = (float)(loss / (B * T));
        norms[s] = (float)sqrt(sumsq);
        zt_adamw_step st = {HP.lr, HP.wd, HP.b1, HP.b2, HP.eps, s + 1, zt_clip_coef(norms[s], HP.max_norm, 1.0), 0};
        for (int u = lay->nbase; u < lay->nunits; u++)
            be->adamw_step(g->fr.units[u], mv[2 * u], mv[2 * u + 1], g->grads[u], NULL, ZT_F32,
                           lay->units[u].padded_numel, &st, NULL, ZT_F32, NULL);
    }
    for (int u = lay->nbase; u < lay->nunits; u++)
        for (int k = 0; k < 2; k++)
            be->free(ZT_MEM_OTHER, mv[2 * u + k], lay->units[u].padded_numel * 4);
    free(mv);
}

/* The three steps against PEFT's: losses and norms within STEPS_TOL relative, each
 * adapter (vals: host copies by parameter, NULL where not wanted) within STEPS_ABS of the
 * float64 run. */
static void check_steps_against(zt_st_file *f, const char *cname, const char *where, const zt_layout *lay,
                                float got[2][STEPS], float *const *vals)
{
    static const char *const what[2] = {"losses", "grad_norms"};
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s.%s", cname, what[k]);
        const zt_st_tensor *t = zt_st_find(f, name);
        ZT_CHECK_MSG(t && t->numel == STEPS, "%s missing", name);
        for (int s = 0; t && t->numel == STEPS && s < STEPS; s++)
            ZT_CHECK_MSG(fabs(got[k][s] - ((const float *)t->data)[s]) <= STEPS_TOL * fabs(((const float *)t->data)[s]),
                         "%s %s[%d] on %s: %.9g, PEFT's %.9g", cname, what[k], s, where, got[k][s],
                         ((const float *)t->data)[s]);
    }
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        char name[128];
        snprintf(name, sizeof name, "%s.step3_f64.%s", cname, p->name);
        const zt_st_tensor *t = p->lora ? zt_st_find(f, name) : NULL;
        if (!p->lora)
            continue;
        ZT_CHECK_MSG(t && !strcmp(t->st_dtype, "F64") && (size_t)t->numel == p->numel, "%s missing", name);
        if (!t || strcmp(t->st_dtype, "F64") || (size_t)t->numel != p->numel)
            continue;
        double worst = 0, want;
        for (size_t j = 0; j < p->numel; j++) {
            memcpy(&want, (const char *)t->data + j * sizeof want, sizeof want);
            worst = fabs(vals[i][j] - want) > worst ? fabs(vals[i][j] - want) : worst;
        }
        ZT_CHECK_MSG(worst <= STEPS_ABS, "%s on %s: %.3g from float64", name, where, worst);
    }
}

static void check_steps(const zt_backend *be, zt_model *m, lora_owner *g, const zt_layout *lay,
                        const zt_tokens *tok, zt_st_file *f, const char *cname)
{
    float got[2][STEPS];
    run_steps(be, m, g, lay, tok, got[0], got[1]);
    float **vals = calloc((size_t)lay->nparams, sizeof *vals);
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (!p->lora)
            continue;
        vals[i] = malloc(p->numel * sizeof(float));
        be->to_host(vals[i], (const float *)g->fr.units[p->unit] + p->offset, p->numel * sizeof(float));
    }
    check_steps_against(f, cname, be->name, lay, got, vals);
    for (int i = 0; i < lay->nparams; i++)
        free(vals[i]);
    free(vals);
}

static void model_case(const zt_backend *be, int ckpt, zt_st_file *f, const char *cname, const char *model,
                       int r, int alpha, int rslora, const char *targets)
{
    enum { B = 2, T = 16 };
    char fix[128], path[160];
    snprintf(fix, sizeof fix, "tests/fixtures/%s", model);
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout plain, lay;
    zt_lora l = {.r = r, .alpha = alpha, .rslora = rslora};
    lora_owner g;
    memset(&g, 0, sizeof g);
    zt_model m;
    zt_tokens tok;
    snprintf(path, sizeof path, "%s/tokens.npy", fix);
    if (zt_hf_read_config_dir(fix, &cfg, &err) ||
        zt_lora_targets_parse("test", &targets, 1, &l.targets, &err) ||
        zt_layout_build(&plain, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) ||
        zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) || zt_lora_layout(&lay, &l, &err) ||
        owner_open(&g, be, fix, &plain, &lay, f, cname, &err) || zt_tokens_load(path, &tok, &err)) {
        ZT_CHECK_MSG(0, "%s: %s", cname, err.msg);
        return;
    }
    zt_param_owner own = g.inner;
    own.ops = &g.ops;
    int in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
        in[i] = tok.ids[i], tg[i] = tok.ids[i + 1];
    double loss = 0;
    ZT_CHECK_MSG(zt_model_init(&m, &cfg, &lay, &own, B, T, ckpt, &err) == ZT_OK &&
                     zt_model_set_lora(&m, &l, &err) == ZT_OK &&
                     zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK,
                 "%s: %s", cname, err.msg);
    /* what it allocated is what the estimates say */
    ZT_CHECK(m.act_bytes ==
             zt_model_activation_bytes(&cfg, B, T, ckpt, ZT_F32) +
                 zt_model_lora_activation_bytes(&cfg, B, T, &l, ZT_F32, 0));
    snprintf(path, sizeof path, "%s.loss", cname);
    const zt_st_tensor *want = zt_st_find(f, path);
    ZT_CHECK(want != NULL);
    if (want)
        ZT_CHECK_CLOSE(loss / (B * T), ((const float *)want->data)[0], 1e-6, 1e-6);
    check_grads(&g, be, &lay, f, cname);
    if (!ckpt)
        check_steps(be, &m, &g, &lay, &tok, f, cname);
    zt_model_free(&m);
    zt_tokens_free(&tok);
    owner_close(&g, be, &lay);
    zt_layout_free(&lay);
    zt_layout_free(&plain);
}

/* With bf16 activations (the plan's activations part, fast mode's preset with bf16
 * compute) the model allocates what the two estimates say (zt_model_activation_bytes_in's
 * table and LoRA's, lora_dy among it: the widened bf16 q|k|v and gate|up products and
 * gradients), for target sets that need the q|k|v copy, the gate|up one, both, or none. */
static void test_act16_sizes(void)
{
    enum { B = 2, T = 16 };
    static const char *sets[] = {"q_proj,v_proj", "gate_proj", "all-linear", "o_proj,down_proj"};
    zt_err err = {0};
    zt_llama_config cfg;
    if (zt_hf_read_config_dir("tests/fixtures/gqa_tied", &cfg, &err)) {
        ZT_CHECK_MSG(0, "%s", err.msg);
        return;
    }
    const zt_backend *be = zt_backend_cpu();
    for (int i = 0; i < 4; i++)
        for (int ckpt = 0; ckpt < 2; ckpt++) {
            zt_lora l = {.r = 4, .alpha = 8};
            zt_layout lay;
            zt_frozen_params fr;
            zt_model m;
            memset(&m, 0, sizeof m);
            if (zt_lora_targets_parse("test", &sets[i], 1, &l.targets, &err) ||
                zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) || zt_lora_layout(&lay, &l, &err) ||
                zt_frozen_init(&fr, &lay, ZT_BF16, be, &err)) {
                ZT_CHECK_MSG(0, "%s: %s", sets[i], err.msg);
                return;
            }
            zt_param_owner own = zt_frozen_owner(&fr);
            own.act16 = 1;
            ZT_CHECK_MSG(zt_model_init(&m, &cfg, &lay, &own, B, T, ckpt, &err) == ZT_OK &&
                             zt_model_set_lora(&m, &l, &err) == ZT_OK,
                         "%s: %s", sets[i], err.msg);
            ZT_CHECK_MSG(m.act16 && m.act_bytes == zt_model_activation_bytes_in(&cfg, B, T, ckpt, ZT_BF16,
                                                                               ZT_KERNELS_EXACT, 1) +
                                                   zt_model_lora_activation_bytes(&cfg, B, T, &l, ZT_BF16, 1),
                         "%s, checkpointing %d: allocated %zu", sets[i], ckpt, m.act_bytes);
            zt_model_free(&m);
            zt_frozen_free(&fr);
            zt_layout_free(&lay);
        }
}

/* ---- the engine ------------------------------------------------------------------ */

static int rank, world = 1; /* MPI's: tests/cli/lora_mpi.sh runs this under mpirun -np 2 */

/* The engine over the adapters' layout at `stage` on the world's ranks: the base units
 * frozen (no gradient, m or v: the state's gradient and optimizer bytes are the
 * adapters' alone, and the estimate says the same), the three steps through
 * zt_engine_step against PEFT's as check_steps holds them.  PEFT's batch of two rows is
 * the global batch: on two ranks each takes one row, and the loss is their sum. */
static void engine_case(int stage, zt_st_file *f, const char *cname, const char *model, int r, int alpha,
                        int rslora, const char *targets)
{
    enum { B = 2, T = 16 };
    char fix[128], path[160];
    snprintf(fix, sizeof fix, "tests/fixtures/%s", model);
    snprintf(path, sizeof path, "%s/tokens.npy", fix);
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout plain, lay;
    zt_lora l = {.r = r, .alpha = alpha, .rslora = rslora};
    zt_tokens tok;
    zt_comm comm;
    zt_engine *eng = NULL;
    int G = stage == 0 ? 1 : world, rows = B / world; /* this rank's rows of the global batch */
    ZT_CHECK_MSG(B % world == 0, "the engine's LoRA tests run on 1 or 2 ranks, not %d", world);
    if (B % world)
        return;
    zt_comm_create_local(&comm);
    zt_precision prec = ZT_PRECISION_ALL(ZT_F32);
    if (zt_hf_read_config_dir(fix, &cfg, &err) || zt_lora_targets_parse("test", &targets, 1, &l.targets, &err) ||
        zt_layout_build(&plain, &cfg, ZT_WRAP_TRANSFORMER, 0, world, &err) ||
        zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, world, &err) || zt_lora_layout(&lay, &l, &err) ||
        zt_tokens_load(path, &tok, &err) || (world > 1 && zt_comm_create(&comm, G, &err)) ||
        zt_engine_create(&eng, zt_backend_cpu(), &lay, prec, stage, NULL, &comm, &err) ||
        zt_hf_load_params(fix, &plain, eng, &err)) {
        ZT_CHECK_MSG(0, "%s stage %d: %s", cname, stage, err.msg);
        return;
    }
    size_t adapters = 0;
    for (int i = 0; i < lay.nparams; i++) {
        const zt_param *p = &lay.params[i];
        char name[128];
        snprintf(name, sizeof name, "%s.%s", cname, p->name);
        const zt_st_tensor *t = p->lora ? zt_st_find(f, name) : NULL;
        if (t && (size_t)t->numel == p->numel)
            zt_engine_set_param(eng, p, t->data, ZT_F32);
        adapters += p->lora ? p->numel : 0;
    }
    zt_engine_refresh_gathered(eng);
    /* the state a checkpoint holds: the adapter units' master, m and v, no base unit's */
    ZT_CHECK(zt_engine_state_count(eng) == 3 * (lay.nunits - lay.nbase));
    for (int i = 0; i < zt_engine_state_count(eng); i++)
        ZT_CHECK(zt_engine_state_tensor(eng, i).unit == lay.nbase + i / 3);
    size_t padded = 0; /* the adapter units' lengths, padded to the world */
    for (int u = lay.nbase; u < lay.nunits; u++)
        padded += lay.units[u].padded_numel;
    zt_engine_bytes b = zt_engine_state_bytes(eng), e = zt_engine_estimate(&lay, prec, stage, G, NULL);
    ZT_CHECK(b.grads == e.grads && b.optim == e.optim && b.master == e.master);
    size_t gwant = (stage <= 1 ? padded : padded / (size_t)G) * 4, owant = 2 * padded / (size_t)G * 4;
    ZT_CHECK_MSG(padded >= adapters && b.grads == gwant && b.optim == owant, "%s stage %d: %zu gradient and %zu "
                 "optimizer bytes for %zu adapter parameters", cname, stage, b.grads, b.optim, adapters);
    zt_param_owner own = zt_engine_param_owner(eng);
    zt_model m;
    ZT_CHECK_MSG(zt_model_init(&m, &cfg, &lay, &own, rows, T, 0, &err) == ZT_OK &&
                     zt_model_set_lora(&m, &l, &err) == ZT_OK,
                 "%s", err.msg);
    float got[2][STEPS];
    zt_adamw_hparams hp = {HP.lr, HP.wd, HP.b1, HP.b2, HP.eps};
    for (int s = 0; s < STEPS; s++) {
        int in[B * T], tg[B * T], at = (s * B + rank * rows) * T; /* sample k = tokens[kT : kT + T + 1] */
        for (int i = 0; i < rows * T; i++)
            in[i] = tok.ids[at + i], tg[i] = tok.ids[at + i + 1];
        double loss = 0, norm = 0;
        zt_engine_zero_grads(eng);
        ZT_CHECK_MSG(zt_model_forward_backward(&m, in, tg, 1.0f / (B * T), &loss, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK(zt_engine_step(eng, &hp, HP.lr, HP.max_norm, 1.0, &norm) == 0);
        float sum = (float)loss; /* the ranks' sums of token losses, summed */
        if (world > 1)
            zt_comm_allreduce(&comm, &sum, 1, ZT_F32, ZT_SCOPE_WORLD);
        got[0][s] = sum / (B * T);
        got[1][s] = (float)norm;
    }
    float **vals = calloc((size_t)lay.nparams, sizeof *vals);
    for (int i = 0; i < lay.nparams; i++)
        vals[i] = malloc(lay.params[i].numel * sizeof(float));
    ZT_CHECK(zt_engine_full_params(eng, vals, &err) == ZT_OK);
    char where[32];
    snprintf(where, sizeof where, "the engine at stage %d", stage);
    check_steps_against(f, cname, where, &lay, got, vals);
    for (int i = 0; i < lay.nparams; i++)
        free(vals[i]);
    free(vals);
    zt_model_free(&m);
    zt_engine_destroy(eng);
    if (world > 1)
        zt_comm_free(&comm);
    zt_tokens_free(&tok);
    zt_layout_free(&lay);
    zt_layout_free(&plain);
}

static void engine_against_peft(int stage)
{
    zt_st_file *f = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open("tests/fixtures/lora/model.safetensors", &f, &err) == ZT_OK, "%s", err.msg);
    const char *cases = f ? zt_st_metadata(f, "cases") : NULL;
    for (const char *p = cases; p && *p;) {
        char name[32], model[32], targets[128];
        int r, alpha, rslora;
        ZT_CHECK(sscanf(p, "%31s %31s %d %d %d %127[^;]", name, model, &r, &alpha, &rslora, targets) == 6);
        engine_case(stage, f, name, model, r, alpha, rslora, targets);
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    if (f)
        zt_st_close(f);
}

/* The frozen base in the load dtype (docs/lora.md, "The frozen base in the engine"): a
 * bf16-loaded model under DeepSpeed's aligned plan (fp32 master) and FSDP's flat bf16 plan,
 * at every stage, on the world's ranks.  What zt_engine_create allocates, role by role
 * (the allocator's counters), is zt_engine_estimate's, which estimate-memory and the gate
 * print; the master is the frozen shards in bf16 and the adapters' in the master dtype;
 * no staging or reduction buffer is sized for a frozen unit (the root unit, frozen, has
 * none: the buffers are at least its fp32 staging smaller than with every unit trained).
 * With the optimizer offloaded (stages 1-3) the state's bytes are the estimate's, the
 * host's included, and at stages 2-3 the host's gradient shards the adapters' alone. */
static void frozen_sizes(zt_precision prec, const char *what)
{
    static const zt_mem_cat cats[5] = {ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_OPTIM, ZT_MEM_GATHERED, ZT_MEM_COMM};
    zt_llama_config cfg;
    zt_layout lay;
    zt_err err = {0};
    zt_lora l = {.r = 4, .alpha = 8, .targets = 0x7fu << ZT_P_Q};
    if (zt_hf_read_config_dir("tests/fixtures/gqa_tied", &cfg, &err) ||
        zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, world, &err) || zt_lora_layout(&lay, &l, &err)) {
        ZT_CHECK_MSG(0, "%s", err.msg);
        return;
    }
    for (int stage = 0; stage <= 3; stage++) {
        int G = stage == 0 ? 1 : world;
        zt_comm comm;
        zt_comm_create_local(&comm);
        if (G > 1 && zt_comm_create(&comm, G, &err) != ZT_OK) {
            ZT_CHECK_MSG(0, "%s", err.msg);
            break;
        }
        size_t before[5], got[5];
        for (int i = 0; i < 5; i++)
            before[i] = zt_mem_current(cats[i]);
        zt_engine *eng = NULL;
        ZT_CHECK_MSG(zt_engine_create(&eng, zt_backend_cpu(), &lay, prec, stage, NULL, &comm, &err) == ZT_OK, "%s",
                     err.msg);
        for (int i = 0; i < 5; i++)
            got[i] = zt_mem_current(cats[i]) - before[i];
        zt_engine_bytes e = zt_engine_estimate(&lay, prec, stage, G, NULL);
        size_t want[5] = {e.master, e.grads, e.optim, e.gathered, e.comm}, master = 0;
        for (int i = 0; i < 5; i++)
            ZT_CHECK_MSG(got[i] == want[i], "%s stage %d: role %d allocated %zu bytes, estimated %zu", what, stage,
                         i, got[i], want[i]);
        for (int u = 0; u < lay.nunits; u++)
            master += lay.units[u].padded_numel / (size_t)G *
                      zt_dtype_size(lay.units[u].frozen ? prec.load : prec.master);
        ZT_CHECK_MSG(e.master == master, "%s stage %d: master %zu bytes, want %zu", what, stage, e.master, master);
        for (int u = 0; u < lay.nunits; u++)
            lay.units[u].frozen ^= u < lay.nbase; /* every unit trained, for the comparison */
        zt_engine_bytes all = zt_engine_estimate(&lay, prec, stage, G, NULL);
        for (int u = 0; u < lay.nunits; u++)
            lay.units[u].frozen ^= u < lay.nbase;
        ZT_CHECK_MSG(e.comm + lay.units[lay.root_unit].padded_numel * sizeof(float) <= all.comm,
                     "%s stage %d: %zu communication bytes, %zu with every unit trained", what, stage, e.comm,
                     all.comm);
        zt_engine_destroy(eng);
        /* offloaded (stages 1-3, the emulated device): the host's gradient shards are the
         * trained units' only, and the state's bytes are the estimate's, host included */
        zt_overlap ov = {.offload_optimizer = 1};
        eng = NULL;
        if (stage >= 1 &&
            zt_engine_create(&eng, zt_backend_emu(), &lay, prec, stage, &ov, &comm, &err) == ZT_OK) {
            zt_engine_bytes b = zt_engine_state_bytes(eng), o = zt_engine_estimate(&lay, prec, stage, G, &ov);
            ZT_CHECK_MSG(b.master == o.master && b.grads == o.grads && b.optim == o.optim &&
                             b.gathered == o.gathered && b.comm == o.comm && b.host == o.host,
                         "%s stage %d offloaded: the state's bytes are not the estimate's (host %zu, %zu)", what,
                         stage, b.host, o.host);
            size_t trained = 0;
            for (int u = lay.nbase; u < lay.nunits; u++)
                trained += lay.units[u].padded_numel / (size_t)G * zt_dtype_size(prec.master);
            ZT_CHECK_MSG(stage < 2 || b.grads == 2 * trained, /* the device's shards and the host's */
                         "%s stage %d offloaded: %zu gradient bytes, want %zu", what, stage, b.grads, 2 * trained);
        } else
            ZT_CHECK_MSG(stage == 0, "%s stage %d offloaded: %s", what, stage, err.msg);
        zt_engine_destroy(eng);
        if (G > 1)
            zt_comm_free(&comm);
    }
    zt_layout_free(&lay);
}

static void test_engine_frozen_sizes(void)
{
    zt_precision aligned = {.load = ZT_BF16, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16,
                            .save = ZT_BF16};
    frozen_sizes(aligned, "aligned bf16");
    frozen_sizes(ZT_PRECISION_ALL(ZT_BF16), "flat bf16");
}

static void test_engine_stage0(void) { engine_against_peft(0); }
static void test_engine_stage1(void) { engine_against_peft(1); }
static void test_engine_stage2(void) { engine_against_peft(2); }
static void test_engine_stage3(void) { engine_against_peft(3); }

static void model_against_peft(const zt_backend *be, int ckpt)
{
    zt_st_file *f = NULL;
    zt_err err = {0};
    ZT_CHECK_MSG(zt_st_open("tests/fixtures/lora/model.safetensors", &f, &err) == ZT_OK, "%s", err.msg);
    const char *cases = f ? zt_st_metadata(f, "cases") : NULL;
    ZT_CHECK(cases != NULL);
    int n = 0;
    for (const char *p = cases; p && *p; n++) {
        char name[32], model[32], targets[128];
        int r, alpha, rslora;
        ZT_CHECK(sscanf(p, "%31s %31s %d %d %d %127[^;]", name, model, &r, &alpha, &rslora, targets) == 6);
        model_case(be, ckpt, f, name, model, r, alpha, rslora, targets);
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    ZT_CHECK(n == 2);
    if (f)
        zt_st_close(f);
}

static void test_model_cpu(void) { model_against_peft(zt_backend_cpu(), 0); }
static void test_model_emu(void) { model_against_peft(zt_backend_emu(), 0); }
/* gradient checkpointing: each layer's forward, its adapters' t included, recomputed */
static void test_model_checkpointing(void) { model_against_peft(zt_backend_cpu(), 1); }

/* bf16 compute (tests/fixtures/lora/linear_bf16.safetensors, tools/make_lora_bf16_fixture.py:
 * torch 2.15, peft 0.21.2): x, A and B held in bf16 as the model holds them.  Against the
 * stated rule (lora.h: bf16-rounded operands, fp32 sums; the generator's float64) within
 * BF16_RULE_TOL of each tensor's largest magnitude: the products' fp32 sums in another
 * order, nothing else; fp32 compute instead is 1e-3 off.  Against PEFT's layer under
 * bf16 autocast within BF16_PEFT_TOL: autocast also rounds every output to bf16 (the
 * generator prints 1.6e-3 to 5.2e-3 between the two references). */
#define BF16_RULE_TOL 1e-5
#define BF16_PEFT_TOL 1e-2

static void *up16(const zt_backend *be, const float *host, size_t n)
{
    float *d = up(be, host, n);
    void *h = be->alloc(ZT_MEM_OTHER, n * 2);
    be->convert(h, ZT_BF16, d, ZT_F32, n);
    be->free(ZT_MEM_OTHER, d, n * sizeof(float));
    return h;
}

static void run_case_bf16(const zt_backend *be, zt_st_file *f, const char *cname, int N, int out, int in, int r,
                          double scale)
{
    size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in, na = (size_t)r * in;
    size_t nb = (size_t)out * r, nt = (size_t)N * r, nmax = na > nb ? na : nb;
    const float *x = tensor(f, cname, "x", nx), *w = tensor(f, cname, "w", nw), *a = tensor(f, cname, "a", na);
    const float *b = tensor(f, cname, "b", nb), *dy = tensor(f, cname, "dy", ny);
    if (!x || !w || !a || !b || !dy)
        return;
    float *fill = zt_alloc(ZT_MEM_OTHER, nmax * sizeof(float));
    for (size_t i = 0; i < nmax; i++)
        fill[i] = GRAD0;
    void *X = up16(be, x, nx), *Wt = up16(be, w, nw), *A = up16(be, a, na), *Bm = up16(be, b, nb);
    float *DY = up(be, dy, ny), *gA = up(be, fill, na), *gB = up(be, fill, nb);
    float *Y = be->alloc(ZT_MEM_OTHER, ny * 4), *T = be->alloc(ZT_MEM_OTHER, nt * 4);
    float *U = be->alloc(ZT_MEM_OTHER, ny * 4), *DT = be->alloc(ZT_MEM_OTHER, nt * 4);
    float *DX = be->alloc(ZT_MEM_OTHER, nx * 4);
    zt_lora_linear l = {be, ZT_BF16,     N,       out,  in, r, (float)scale, A,
                        Bm, (size_t)out, ZT_BF16, 0.0f, 0,  0, NULL,         0};
    zt_err err = {0};
    /* the frozen base's products, as the model computes them with bf16 compute */
    ZT_CHECK(be->matmul(Y, X, ZT_BF16, Wt, ZT_BF16, N, out, in, 0, 1, 0.0f, ZT_BF16, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_lora_forward(&l, Y, T, U, X, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(be->matmul(DX, DY, ZT_F32, Wt, ZT_BF16, N, in, out, 0, 0, 0.0f, ZT_BF16, &err) == ZT_OK);
    ZT_CHECK_MSG(zt_lora_backward(&l, DX, gA, gB, U, DT, DY, X, T, &err) == ZT_OK, "%s", err.msg);
    const char *refs[2] = {"ref", "peft"};
    const double tols[2] = {BF16_RULE_TOL, BF16_PEFT_TOL};
    for (int k = 0; k < 2; k++) {
        char key[32], what[64];
        const float *got[4] = {Y, DX, gA, gB};
        const char *names[4] = {"y", "dx", "da", "db"};
        size_t ns[4] = {ny, nx, na, nb};
        for (int i = 0; i < 4; i++) {
            snprintf(key, sizeof key, "%s.%s", refs[k], names[i]);
            const float *want = tensor(f, cname, key, ns[i]);
            snprintf(what, sizeof what, "bf16 %s %s against %s", cname, names[i], refs[k]);
            if (want)
                compare(be, what, got[i], want, ns[i], i >= 2 ? GRAD0 : 0.0f, tols[k]);
        }
    }
    void *bufs[] = {X, Wt, A, Bm, DY, gA, gB, Y, T, U, DT, DX};
    size_t sizes[] = {nx * 2, nw * 2, na * 2, nb * 2, ny * 4, na * 4, nb * 4, ny * 4, nt * 4, ny * 4, nt * 4, nx * 4};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->free(ZT_MEM_OTHER, bufs[i], sizes[i]);
    zt_free(ZT_MEM_OTHER, fill, nmax * sizeof(float));
}

static void against_autocast(const zt_backend *be)
{
    each_linear_case(be, "tests/fixtures/lora/linear_bf16.safetensors", run_case_bf16);
}

static void test_linear_bf16_cpu(void) { against_autocast(zt_backend_cpu()); }
static void test_linear_bf16_emu(void) { against_autocast(zt_backend_emu()); }

static void test_linear_cpu(void) { against_peft(zt_backend_cpu()); }
static void test_linear_emu(void) { against_peft(zt_backend_emu()); }

/* A table without scale_add (the CUDA tables so far) is refused, naming it. */
static void test_no_scale_add(void)
{
    zt_backend be = *zt_backend_cpu();
    be.scale_add = NULL;
    be.name = "nosuch";
    float x[2] = {1, 2}, w[2] = {1, 1}, y[1], t[1], u[1];
    zt_lora_linear l = {&be, ZT_F32, 1, 1, 2, 1, 2.0f, w, w, 1, ZT_F32, 0.0f, 0, 0, NULL, 0};
    zt_err err = {0};
    ZT_CHECK(zt_lora_forward(&l, y, t, u, x, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "nosuch device's table has no scale_add") != NULL, "%s", err.msg);
}

/* n floats of host onto the device in dtype dt (fp32, or bf16 rounded to nearest even) */
static void *up_as(const zt_backend *be, const float *host, size_t n, zt_dtype dt)
{
    if (dt == ZT_F32)
        return up(be, host, n);
    uint16_t *h = zt_alloc(ZT_MEM_OTHER, n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = zt_f32_to_bf16(host[i]);
    void *d = be->alloc(ZT_MEM_OTHER, n * 2);
    be->to_device(d, h, n * 2);
    zt_free(ZT_MEM_OTHER, h, n * 2);
    return d;
}

/* Adapter dropout (lora.h): the linear with p > 0 equals the linear without dropout on
 * x~ = x o m / (1 - p) in fp32, the test forming x~ from zt_lora_keep itself, with fp32
 * compute, and with bf16 compute and bf16 x (widened, scaled, then read rounded to bf16 by
 * the products, as torch's bf16 dropout rounds x * m / (1 - p)): y and t from x~,
 * dA from x~, dx = dx0 + (dt A) o m / (1 - p) (dx0 non-zero, the base's part), dB as is.
 * A backward that forgot the mask (on x or on dx) fails here.  The mask drops about p
 * of the elements, and another key or row draws another mask. */
static void dropout_case(const zt_backend *be, zt_dtype c)
{
    enum { N = 6, OUT = 5, IN = 7, R = 3 };
    const float p = 0.3f, dx0 = 0.5f;
    const uint64_t key = 0x1234567ull;
    const int64_t row0 = 40;
    float x[N * IN], xt[N * IN], a[R * IN], b[OUT * R], dy[N * OUT], zero[N * IN] = {0}, half[N * IN];
    uint64_t s = 7;
    for (int i = 0; i < N * IN; i++) {
        x[i] = (float)zt_rand_normal(&s);
        x[i] = c == ZT_BF16 ? zt_round_bf16(x[i]) : x[i];
        half[i] = dx0;
        xt[i] = zt_lora_keep(key, row0 + i / IN, i % IN, p) ? x[i] * (1.0f / (1.0f - p)) : 0.0f;
    }
    for (int i = 0; i < R * IN; i++)
        a[i] = (float)zt_rand_normal(&s);
    for (int i = 0; i < OUT * R; i++)
        b[i] = (float)zt_rand_normal(&s);
    for (int i = 0; i < N * OUT; i++)
        dy[i] = (float)zt_rand_normal(&s);
    float *got[5], *want[5]; /* y, dx, dA, dB, dt A (want only) */
    size_t n[5] = {N * OUT, N * IN, R * IN, OUT * R, N * IN};
    size_t es = zt_dtype_size(c);
    void *A = up_as(be, a, R * IN, c), *B = up_as(be, b, OUT * R, c);
    float *Dy = up(be, dy, N * OUT);
    float *T = be->alloc(ZT_MEM_OTHER, N * R * 4), *U = be->alloc(ZT_MEM_OTHER, N * OUT * 4);
    float *Dt = be->alloc(ZT_MEM_OTHER, N * R * 4), *Xd = be->alloc(ZT_MEM_OTHER, N * IN * 4);
    zt_err err = {0};
    for (int drop = 0; drop < 2; drop++) {
        float **o = drop ? got : want;
        void *X = drop ? up_as(be, x, N * IN, c) : up(be, xt, N * IN);
        o[0] = up(be, zero, N * OUT), o[1] = up(be, drop ? half : zero, N * IN);
        o[2] = up(be, zero, R * IN), o[3] = up(be, zero, OUT * R);
        zt_lora_linear l = {be,  c,    N,  OUT, IN, R, 1.5f, A, B, OUT, drop ? c : ZT_F32, drop ? p : 0.0f,
                            key, row0, Xd, 0};
        ZT_CHECK_MSG(zt_lora_forward(&l, o[0], T, U, X, &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK_MSG(zt_lora_backward(&l, o[1], o[2], o[3], U, Dt, Dy, X, T, &err) == ZT_OK, "%s", err.msg);
        be->free(ZT_MEM_OTHER, X, N * IN * (drop ? es : 4));
    }
    float h[N * IN]; /* want's dx is dt A alone: masked and added to dx0 here */
    be->to_host(h, want[1], sizeof h);
    for (int i = 0; i < N * IN; i++)
        h[i] = dx0 + (zt_lora_keep(key, row0 + i / IN, i % IN, p) ? h[i] * (1.0f / (1.0f - p)) : 0.0f);
    be->to_device(want[1], h, sizeof h);
    const char *names[4] = {"dropout y", "dropout dx", "dropout dA", "dropout dB"};
    for (int k = 0; k < 4; k++) {
        float w[N * IN];
        be->to_host(w, want[k], n[k] * 4);
        compare(be, names[k], got[k], w, n[k], 0.0f, 1e-6);
        be->free(ZT_MEM_OTHER, got[k], n[k] * 4);
        be->free(ZT_MEM_OTHER, want[k], n[k] * 4);
    }
    void *bufs[] = {A, B, Dy, T, U, Dt, Xd};
    size_t sizes[] = {R * IN * es, OUT * R * es, N * OUT * 4, N * R * 4, N * OUT * 4, N * R * 4, N * IN * 4};
    for (int k = 0; k < 7; k++)
        be->free(ZT_MEM_OTHER, bufs[k], sizes[k]);
}

static void test_dropout_cpu(void) { dropout_case(zt_backend_cpu(), ZT_F32); }
static void test_dropout_emu(void) { dropout_case(zt_backend_emu(), ZT_F32); }
static void test_dropout_bf16_cpu(void) { dropout_case(zt_backend_cpu(), ZT_BF16); }
static void test_dropout_bf16_emu(void) { dropout_case(zt_backend_emu(), ZT_BF16); }

static void test_dropout_mask(void)
{
    int dropped = 0, differ_key = 0, differ_row = 0;
    for (int i = 0; i < 100; i++)
        for (int j = 0; j < 100; j++) {
            int k = zt_lora_keep(9, i, j, 0.25f);
            dropped += !k;
            differ_key += k != zt_lora_keep(10, i, j, 0.25f);
            differ_row += k != zt_lora_keep(9, i + 100, j, 0.25f);
        }
    ZT_CHECK_MSG(dropped > 2300 && dropped < 2700, "dropped %d of 10000 at p 0.25", dropped);
    ZT_CHECK_MSG(differ_key > 3000 && differ_row > 3000, "masks alike: %d %d", differ_key, differ_row);
    ZT_CHECK(zt_lora_keep(9, 1, 2, 0.0f));
}

int main(int argc, char **argv)
{
    if (zt_comm_init_mpi(&argc, &argv, &rank, &world) != ZT_OK)
        return 1;
    if (rank == 0)
        printf("     world of %d rank%s\n", world, world == 1 ? "" : "s");
    else if (!freopen("/dev/null", "w", stdout)) /* one report, from rank 0; failures still reach stderr */
        return 1;
    ZT_RUN(test_layout);
    ZT_RUN(test_init);
    ZT_RUN(test_model_cpu);
    ZT_RUN(test_model_emu);
    ZT_RUN(test_model_checkpointing);
    ZT_RUN(test_act16_sizes);
    ZT_RUN(test_engine_stage0);
    ZT_RUN(test_engine_stage1);
    ZT_RUN(test_engine_stage2);
    ZT_RUN(test_engine_stage3);
    ZT_RUN(test_engine_frozen_sizes);
    ZT_RUN(test_linear_cpu);
    ZT_RUN(test_linear_emu);
    ZT_RUN(test_linear_bf16_cpu);
    ZT_RUN(test_linear_bf16_emu);
    ZT_RUN(test_no_scale_add);
    ZT_RUN(test_dropout_cpu);
    ZT_RUN(test_dropout_emu);
    ZT_RUN(test_dropout_bf16_cpu);
    ZT_RUN(test_dropout_bf16_emu);
    ZT_RUN(test_dropout_mask);
    zt_comm_finalize_mpi();
    if (rank != 0)
        return zt_tests_failed ? 1 : 0;
    ZT_TEST_MAIN_END();
}
