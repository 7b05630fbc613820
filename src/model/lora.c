/* lora.c — the adapters' settings, their count and the plan line (lora.h). */
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dtype.h"
#include "../core/mem.h"
#include "../core/rng.h"
#include "../core/text.h"

/* The projection names in the layout's order of kinds, and their kinds. */
static const char *const target_names[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                           "gate_proj", "up_proj", "down_proj", NULL};
static const zt_param_kind target_kinds[] = {ZT_P_Q, ZT_P_K, ZT_P_V, ZT_P_O, ZT_P_GATE, ZT_P_UP, ZT_P_DOWN};
#define NTARGETS ((int)(sizeof target_kinds / sizeof target_kinds[0]))

static unsigned all_linear(void)
{
    unsigned m = 0;
    for (int i = 0; i < NTARGETS; i++)
        m |= 1u << target_kinds[i];
    return m;
}

/* One name (len bytes of s) into *targets. */
static int add_target(const char *what, const char *s, size_t len, unsigned *targets, zt_err *err)
{
    char name[32];
    if (len == 0 || len >= sizeof name)
        return zt_fail(err, ZT_EINPUT,
                       "%s: expected all-linear or projection names (q_proj, k_proj, v_proj, "
                       "o_proj, gate_proj, up_proj, down_proj), got '%.*s'",
                       what, (int)(len < 64 ? len : 64), s);
    memcpy(name, s, len);
    name[len] = 0;
    if (!strcmp(name, "all-linear")) {
        *targets |= all_linear();
        return ZT_OK;
    }
    int k = zt_index_of(name, target_names, 0);
    if (k >= 0) {
        *targets |= 1u << target_kinds[k];
        return ZT_OK;
    }
    const char *best = "all-linear";
    int bestd = zt_edit_distance(name, best);
    for (int i = 0; i < NTARGETS; i++)
        if (zt_edit_distance(name, target_names[i]) < bestd)
            bestd = zt_edit_distance(name, target_names[i]), best = target_names[i];
    char known[160];
    zt_join_names(known, sizeof known, target_names);
    return zt_fail(err, ZT_EINPUT,
                   "%s: unknown target '%s'%s%s%s; expected all-linear or names among %s "
                   "(the decoder layers' projections)",
                   what, name, bestd <= 3 ? " (did you mean '" : "", bestd <= 3 ? best : "",
                   bestd <= 3 ? "'?)" : "", known);
}

int zt_lora_targets_parse(const char *what, const char *const *names, int n, unsigned *targets, zt_err *err)
{
    *targets = 0;
    if (n == 0) { /* PEFT's default target modules for llama, mistral and qwen2 */
        *targets = 1u << ZT_P_Q | 1u << ZT_P_V;
        return ZT_OK;
    }
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        for (;;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            int rc = add_target(what, s, len, targets, err);
            if (rc)
                return rc;
            if (!comma)
                break;
            s = comma + 1;
        }
    }
    return ZT_OK;
}

void zt_lora_init_param(const zt_param *p, uint64_t seed, float *out)
{
    if (p->lora != 1) {
        memset(out, 0, p->numel * sizeof *out);
        return;
    }
    uint64_t state = seed ^ 0xcbf29ce484222325ull; /* FNV-1a over the name, from the seed */
    for (const unsigned char *c = (const unsigned char *)p->name; *c; c++)
        state = (state ^ *c) * 0x100000001b3ull;
    double bound = 1.0 / sqrt((double)p->shape[1]); /* gain sqrt(2 / (1 + 5)) times sqrt(3 / in) */
    for (size_t i = 0; i < p->numel; i++)
        out[i] = (float)(bound * (2.0 * zt_rand_uniform(&state) - 1.0));
}

void zt_lora_targets_text(unsigned targets, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int i = 0; i < NTARGETS; i++)
        if (targets >> target_kinds[i] & 1u)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "," : "", target_names[i]);
}

void zt_lora_merge(float *w, const float *a, const float *b, int out, int in, int r, double s)
{
    for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
            double acc = 0.0;
            for (int k = 0; k < r; k++)
                acc += (double)b[(size_t)o * r + k] * a[(size_t)k * in + i];
            float *wi = &w[(size_t)o * in + i];
            *wi = *wi + (float)(acc * s);
        }
}

double zt_lora_scale(const zt_lora *l) { return l->rslora ? l->alpha / sqrt((double)l->r) : l->alpha / l->r; }

size_t zt_lora_trainable(const zt_lora *l, const zt_layout *lay)
{
    size_t n = 0;
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (p->layer >= 0 && p->ndim == 2 && !p->lora && (l->targets >> p->kind & 1u))
            n += (size_t)l->r * (size_t)(p->shape[0] + p->shape[1]);
    }
    return n;
}

/* The adapter parameters of layer l (A's, then B's) appended to lay->params from index
 * *n on, in unit u from offset *off. */
static void add_layer_adapters(zt_layout *lay, const zt_lora *l, int layer, int u, int *n, size_t *off)
{
    for (int ab = 1; ab <= 2; ab++)
        for (int i = 0; i < NTARGETS; i++) {
            const zt_param *w = zt_layout_param(lay, layer, target_kinds[i]);
            if (!(l->targets >> target_kinds[i] & 1u))
                continue;
            zt_param *p = &lay->params[*n];
            memset(p, 0, sizeof *p);
            /* "model.layers.L.self_attn.q_proj.weight" less ".weight" */
            snprintf(p->name, sizeof p->name, "base_model.model.%.*s.lora_%c.weight",
                     (int)(strlen(w->name) - strlen(".weight")), w->name, ab == 1 ? 'A' : 'B');
            p->kind = w->kind;
            p->lora = ab;
            p->layer = layer;
            p->ndim = 2;
            p->shape[0] = ab == 1 ? l->r : w->shape[0];
            p->shape[1] = ab == 1 ? w->shape[1] : l->r;
            p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
            p->unit = u;
            p->offset = *off;
            p->decay = 1;
            *off += p->numel;
            lay->lora_index[((size_t)layer * ZT_P_NKINDS + (size_t)w->kind) * 2 + (size_t)(ab - 1)] = (*n)++;
        }
}

int zt_lora_layout(zt_layout *lay, const zt_lora *l, zt_err *err)
{
    int L = lay->num_layers, nb = lay->nbase, na = 0, per = 0;
    for (int u = 0; u < nb; u++)
        na += lay->units[u].num_layers > 0;
    for (int i = 0; i < NTARGETS; i++)
        per += 2 * (int)(l->targets >> target_kinds[i] & 1u);
    size_t nidx = ((size_t)L + 1) * ZT_P_NKINDS * 2;
    zt_unit *units = realloc(lay->units, (size_t)(nb + na) * sizeof *units);
    if (units)
        lay->units = units;
    zt_param *params = units ? realloc(lay->params, (size_t)(lay->nparams + L * per) * sizeof *params) : NULL;
    if (params)
        lay->params = params;
    lay->layer_adapter_unit = calloc((size_t)L + 1, sizeof *lay->layer_adapter_unit);
    lay->lora_index = malloc(nidx * sizeof *lay->lora_index);
    if (!units || !params || !lay->layer_adapter_unit || !lay->lora_index) {
        zt_layout_free(lay);
        return zt_fail(err, ZT_EFAIL, "out of memory building the LoRA adapters' layout");
    }
    for (size_t i = 0; i < nidx; i++)
        lay->lora_index[i] = -1;
    size_t g = (size_t)lay->shard_group;
    for (int b = 0, u = nb; b < nb; b++) {
        lay->units[b].frozen = 1;
        if (lay->units[b].num_layers == 0)
            continue;
        zt_unit *au = &lay->units[u];
        *au = (zt_unit){
            .first_layer = lay->units[b].first_layer, .num_layers = lay->units[b].num_layers, .adapts = b};
        size_t off = 0;
        for (int layer = au->first_layer; layer < au->first_layer + au->num_layers; layer++) {
            lay->layer_adapter_unit[layer] = u;
            add_layer_adapters(lay, l, layer, u, &lay->nparams, &off);
        }
        au->numel = off;
        au->padded_numel = (off + g - 1) / g * g;
        lay->numel += au->numel;
        lay->padded_numel += au->padded_numel;
        u++;
    }
    lay->nunits = nb + na;
    return ZT_OK;
}

int zt_lora_describe(const zt_lora *l, const zt_llama_config *cfg, char *buf, size_t cap, zt_err *err)
{
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, ZT_WRAP_NONE, 0, 1, err);
    if (rc)
        return rc;
    size_t trainable = zt_lora_trainable(l, &lay), total = lay.numel + trainable;
    zt_layout_free(&lay);
    char targets[96];
    zt_lora_targets_text(l->targets, targets, sizeof targets);
    snprintf(buf, cap,
             "lora r=%d, alpha=%.9g (scale %.9g%s), targets %s, trainable %zu of %zu parameters (%.4f %%)",
             l->r, l->alpha, zt_lora_scale(l), l->rslora ? ", rsLoRA" : "", targets, trainable, total,
             total ? 100.0 * (double)trainable / (double)total : 0.0);
    return ZT_OK;
}

/* ---- one LoRA linear --------------------------------------------------------- */

static int linear_usable(const zt_lora_linear *l, zt_err *err)
{
    if (!l->be->scale_add)
        return zt_fail(err, ZT_EINPUT,
                       "LoRA: the %s device's table has no scale_add entry yet (the cpu, emu and cuda "
                       "tables have it)",
                       l->be->name);
    if (l->w_dt != ZT_F32 && l->w_dt != ZT_BF16 && l->w_dt != ZT_F16)
        return zt_fail(err, ZT_EINPUT, "LoRA: %s compute (fp32, bf16 and fp16 only)", zt_dtype_name(l->w_dt));
    if (l->x_dt != ZT_F32 && l->x_dt != l->w_dt)
        return zt_fail(err, ZT_EINPUT, "LoRA: %s inputs with %s compute", zt_dtype_name(l->x_dt),
                       zt_dtype_name(l->w_dt));
    return ZT_OK;
}

int zt_lora_keep(uint64_t key, int64_t row, int col, float p)
{
    uint64_t s = key ^ ((uint64_t)row << 32 | (uint32_t)col);
    return zt_rand_uniform(&s) >= (double)p;
}

/* out = in o m / (1 - p), or out += it (add), over the N x in elements: rows are
 * independent and each element's mask is a pure function of its place. */
static void drop_apply(const zt_lora_linear *l, const float *in, float *out, int add)
{
    float inv = 1.0f / (1.0f - l->p);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < l->N; i++)
        for (int j = 0; j < l->in; j++) {
            size_t k = (size_t)i * (size_t)l->in + (size_t)j;
            float v = zt_lora_keep(l->key, l->row0 + i, j, l->p) ? in[k] * inv : 0.0f;
            out[k] = add ? out[k] + v : v;
        }
}

/* The dropout: dst = src o m / (1 - p) where acc is NULL, else acc += src o m / (1 - p)
 * (src fp32 then).  The mask is drawn on the host, so every table draws it with the same
 * code: host memory in fp32 is used in place; a device's buffers, or bf16 input, are
 * staged through host copies. */
static int drop_rows(const zt_lora_linear *l, float *dst, const void *src, zt_dtype sdt, float *acc, zt_err *err)
{
    const zt_backend *be = l->be;
    if (be->host_visible && sdt == ZT_F32) {
        drop_apply(l, src, acc ? acc : dst, acc != NULL);
        return ZT_OK;
    }
    size_t n = (size_t)l->N * (size_t)l->in;
    float *h = zt_alloc(ZT_MEM_OTHER, n * sizeof(float)), *a = acc ? zt_alloc(ZT_MEM_OTHER, n * sizeof(float)) : NULL;
    if (!h || (acc && !a)) {
        zt_free(ZT_MEM_OTHER, h, h ? n * sizeof(float) : 0);
        zt_free(ZT_MEM_OTHER, a, a ? n * sizeof(float) : 0);
        return zt_fail(err, ZT_EFAIL, "LoRA dropout: out of memory for %zu floats", n);
    }
    be->to_host(h, src, n * zt_dtype_size(sdt));
    if (sdt == ZT_BF16) /* widen in place from the back: element i's 2 bytes lie below its 4 */
        for (size_t i = n; i-- > 0;)
            h[i] = zt_bf16_to_f32(((const uint16_t *)h)[i]);
    if (acc)
        be->to_host(a, acc, n * sizeof(float));
    drop_apply(l, h, acc ? a : h, acc != NULL);
    be->to_device(acc ? acc : dst, acc ? a : h, n * sizeof(float));
    zt_free(ZT_MEM_OTHER, h, n * sizeof(float));
    zt_free(ZT_MEM_OTHER, a, a ? n * sizeof(float) : 0);
    return ZT_OK;
}

/* x~, the adapter's input: x itself, or its dropped copy in xd. */
static int adapter_input(const zt_lora_linear *l, const void *x, const void **xin, zt_dtype *dt, zt_err *err)
{
    *xin = x;
    *dt = l->x_dt;
    if (l->p <= 0.0f)
        return ZT_OK;
    *xin = l->xd;
    *dt = ZT_F32;
    return drop_rows(l, l->xd, x, l->x_dt, NULL, err);
}

int zt_lora_forward(const zt_lora_linear *l, float *y, float *t, float *u, const void *x, zt_err *err)
{
    const zt_backend *be = l->be;
    zt_dtype c = l->w_dt;
    const void *xin;
    zt_dtype xdt;
    int rc = linear_usable(l, err);
    if (rc == ZT_OK)
        rc = adapter_input(l, x, &xin, &xdt, err);
    if (rc == ZT_OK)
        rc = be->matmul(t, xin, xdt, l->a, c, l->N, l->r, l->in, 0, 1, 0.0f, c, err);
    if (rc == ZT_OK)
        rc = be->matmul(u, t, ZT_F32, l->b, c, l->N, l->out, l->r, 0, 1, 0.0f, c, err);
    if (rc == ZT_OK) /* PEFT scales after B: y + (t B^T) s, each step rounded as torch does */
        be->scale_add(y, l->ld, l->scale, u, (size_t)l->out, l->N, l->out);
    return rc;
}

int zt_lora_backward(const zt_lora_linear *l, float *dx, float *da, float *db, float *du, float *dt,
                     const float *dy, const void *x, const float *t, zt_err *err)
{
    const zt_backend *be = l->be;
    zt_dtype c = l->w_dt;
    size_t n = (size_t)l->N * (size_t)l->out;
    int rc = linear_usable(l, err);
    if (rc)
        return rc;
    be->zero(du, n * sizeof(float)); /* du = 0 + s dy: s dy rounded once, as autograd's dy * s */
    be->scale_add(du, (size_t)l->out, l->scale, dy, l->ld, l->N, l->out);
    const float gbeta = l->grad_fresh ? 0.0f : 1.0f;
    rc = be->matmul(db, du, ZT_F32, t, ZT_F32, l->out, l->r, l->N, 1, 0, gbeta, c, err);
    if (rc == ZT_OK)
        rc = be->matmul(dt, du, ZT_F32, l->b, c, l->N, l->r, l->out, 0, 0, 0.0f, c, err);
    const void *xin;
    zt_dtype xdt;
    if (rc == ZT_OK) /* the same mask as the forward's: the same key and rows */
        rc = adapter_input(l, x, &xin, &xdt, err);
    if (rc == ZT_OK)
        rc = be->matmul(da, dt, ZT_F32, xin, xdt, l->r, l->in, l->N, 1, 0, gbeta, c, err);
    if (rc == ZT_OK && l->p > 0.0f) { /* dx += (dt A) o m / (1 - p), dt A formed in xd */
        rc = be->matmul(l->xd, dt, ZT_F32, l->a, c, l->N, l->in, l->r, 0, 0, 0.0f, c, err);
        return rc ? rc : drop_rows(l, NULL, l->xd, ZT_F32, dx, err);
    }
    if (rc == ZT_OK) /* autograd's sum of the base's and the adapter's input gradients */
        rc = be->matmul(dx, dt, ZT_F32, l->a, c, l->N, l->in, l->r, 0, 0, 1.0f, c, err);
    return rc;
}
