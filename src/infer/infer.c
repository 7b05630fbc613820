/* infer.c — the inference forward over a KV cache (see infer.h).
 *
 * Shapes for r new rows at positions pos..pos+r-1 (C hidden, F intermediate,
 * nh / nkv heads of hd, Dq = nh*hd, Dqkv = (nh + 2*nkv)*hd, V vocabulary):
 *   x (r, C) = embed[tokens]
 *   per layer:  n = rmsnorm(x)      qkv (r, Dqkv) = n Wqkv^T [+ bqkv], rope(q, k) at pos..
 *               cache[pos..] = k, v                 att (r, Dq) = attn(q, cache)
 *               h = x + att Wo^T    n = rmsnorm(h)  gu (r, 2F) = n Wgu^T
 *               x = h + swiglu(gu) Wdown^T
 *   logits (V) = rmsnorm(x[r-1]) Wlm^T             (only the last row) */
#include "infer.h"

#include <string.h>

#include "../core/mem.h"
#include "../io/hf_model.h"
#include "../kernels/backend.h"
#include "../model/llama.h"

/* Prompt chunks: a pass takes at most this many rows, so the scratch does not
 * grow with the prompt (a 1000-token prompt is 8 passes). */
#define ZT_INFER_MAX_ROWS 128

enum { MAX_BLOCKS = 24 };
typedef struct blocks {
    struct { void *p; size_t bytes; zt_mem_cat cat; } b[MAX_BLOCKS];
    int n;
} blocks;

static void *take(zt_infer *m, zt_mem_cat cat, size_t bytes)
{
    blocks *bl = m->alloc_list;
    if (bl->n == MAX_BLOCKS)
        return NULL;
    void *p = m->be->alloc(cat, bytes);
    if (!p)
        return NULL;
    bl->b[bl->n].p = p;
    bl->b[bl->n].bytes = bytes;
    bl->b[bl->n].cat = cat;
    bl->n++;
    if (cat == ZT_MEM_PARAMS)
        m->weight_bytes += bytes;
    else
        m->act_bytes += bytes;
    return p;
}

void zt_infer_free(zt_infer *m)
{
    if (m->logits_host && m->logits_host != m->logits)
        zt_free(ZT_MEM_ACTIV, m->logits_host, (size_t)m->cfg.vocab_size * sizeof(float));
    blocks *bl = m->alloc_list;
    if (bl) {
        for (int i = 0; i < bl->n; i++)
            m->be->free(bl->b[i].cat, bl->b[i].p, bl->b[i].bytes);
        zt_free(ZT_MEM_OTHER, bl, sizeof *bl);
    }
    if (m->have_frozen)
        zt_frozen_free(&m->frozen);
    if (m->lay.params)
        zt_layout_free(&m->lay);
    memset(m, 0, sizeof *m);
}

/* Loading: each tensor is rounded to the compute dtype into its place in the flat
 * buffer (the frozen owner's); norm weights also keep an fp32 copy for the norm kernels. */
static void load_sink(void *ctx, const zt_param *p, const void *data, zt_dtype dt)
{
    zt_infer *m = ctx;
    zt_frozen_set_param(&m->frozen, p, data, dt);
    const void *dst = (const char *)m->weights + p->offset * zt_dtype_size(m->compute);
    int row = p->kind == ZT_P_ATTN_NORM   ? 2 * p->layer
              : p->kind == ZT_P_MLP_NORM  ? 2 * p->layer + 1
              : p->kind == ZT_P_FINAL_NORM ? 2 * m->cfg.num_hidden_layers
                                           : -1;
    if (row >= 0) /* the norm kernels see the rounded weight, as the model computes with it */
        m->be->convert(m->norms + (size_t)row * m->cfg.hidden_size, ZT_F32, dst, m->compute, p->numel);
}

int zt_infer_open(zt_infer *m, const char *dir, zt_dtype compute, int cap, int threads, const zt_backend *be,
                  zt_err *err)
{
    memset(m, 0, sizeof *m);
    if (compute != ZT_F32 && compute != ZT_BF16)
        return zt_fail(err, ZT_EINPUT, "inference runs in fp32 or bf16, not %s", zt_dtype_name(compute));
    int rc = zt_hf_read_config_dir(dir, &m->cfg, err);
    if (rc)
        return rc;
    const zt_llama_config *c = &m->cfg;
    if (cap < 1 || cap > c->max_position_embeddings)
        return zt_fail(err, ZT_EINPUT,
                       "a context of %d positions (prompt + new tokens) does not fit the model's "
                       "max_position_embeddings %d (%s/config.json)", cap, c->max_position_embeddings, dir);
    m->compute = compute;
    m->opd = compute == ZT_BF16 ? ZT_BF16 : ZT_F32;
    m->cap = cap;
    m->threads = threads > 0 ? threads : 1;
    m->rows = cap < ZT_INFER_MAX_ROWS ? cap : ZT_INFER_MAX_ROWS;
    if (!(m->alloc_list = zt_alloc(ZT_MEM_OTHER, sizeof(blocks))))
        return zt_fail(err, ZT_EFAIL, "out of memory");
    if ((rc = zt_layout_build(&m->lay, c, ZT_WRAP_NONE, 0, 1, err))) {
        zt_infer_free(m);
        return rc;
    }
    size_t L = (size_t)c->num_hidden_layers, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t nkv = (size_t)c->num_key_value_heads, hd = (size_t)c->head_dim, R = (size_t)m->rows;
    size_t Dq = (size_t)c->num_attention_heads * hd, Dqkv = Dq + 2 * nkv * hd, V = (size_t)c->vocab_size;
    size_t od = zt_dtype_size(m->opd), cache = L * nkv * (size_t)cap * hd;
    if ((rc = zt_frozen_init(&m->frozen, &m->lay, compute, be, err))) {
        zt_infer_free(m);
        return rc;
    }
    m->have_frozen = 1;
    m->be = zt_frozen_owner(&m->frozen).backend; /* compute where the weights live */
    m->weights = m->frozen.units[0]; /* NO_WRAP: the whole model is one unit */
    m->weight_bytes = m->lay.units[0].padded_numel * zt_dtype_size(compute);
    if (!(m->norms = take(m, ZT_MEM_PARAMS, (2 * L + 1) * C * sizeof(float))) ||
        !(m->k_cache = take(m, ZT_MEM_ACTIV, cache * sizeof(float))) ||
        !(m->v_cache = take(m, ZT_MEM_ACTIV, cache * sizeof(float))) ||
        !(m->rope_cos = take(m, ZT_MEM_ACTIV, (size_t)cap * hd / 2 * sizeof(float))) ||
        !(m->rope_sin = take(m, ZT_MEM_ACTIV, (size_t)cap * hd / 2 * sizeof(float))) ||
        !(m->x = take(m, ZT_MEM_ACTIV, R * C * sizeof(float))) ||
        !(m->h = take(m, ZT_MEM_ACTIV, R * C * sizeof(float))) ||
        !(m->qkv = take(m, ZT_MEM_ACTIV, R * Dqkv * sizeof(float))) ||
        !(m->att = take(m, ZT_MEM_ACTIV, R * Dq * sizeof(float))) ||
        !(m->gu = take(m, ZT_MEM_ACTIV, R * 2 * F * sizeof(float))) ||
        !(m->n = take(m, ZT_MEM_ACTIV, R * C * od)) || !(m->act = take(m, ZT_MEM_ACTIV, R * F * od)) ||
        !(m->rstd = take(m, ZT_MEM_ACTIV, R * sizeof(float))) ||
        !(m->scores = take(m, ZT_MEM_ACTIV, m->be->attention_cache_scratch_bytes(cap, m->threads))) ||
        !(m->logits = take(m, ZT_MEM_ACTIV, V * sizeof(float))) ||
        !(m->logits_host = be->host_visible ? m->logits : zt_alloc(ZT_MEM_ACTIV, V * sizeof(float)))) {
        zt_infer_free(m);
        return zt_fail(err, ZT_EFAIL, "out of memory for a %zu-parameter model with a %d-position cache",
                       m->lay.numel, cap);
    }
    if ((rc = zt_hf_load_params_to(dir, &m->lay, load_sink, m, err))) {
        zt_infer_free(m);
        return rc;
    }
    zt_rope_freqs freqs = zt_model_rope_freqs(c);
    m->be->rope_tables(m->rope_cos, m->rope_sin, cap, (int)hd, &freqs);
    return ZT_OK;
}

void zt_infer_reset(zt_infer *m) { m->pos = 0; }

const float *zt_infer_logits(const zt_infer *m) { return m->logits_host; }

static const void *weight(const zt_infer *m, int layer, zt_param_kind kind)
{
    const zt_param *p = zt_layout_param(&m->lay, layer, kind);
    if (!p) /* tied: lm_head is embed_tokens */
        p = zt_layout_param(&m->lay, -1, ZT_P_EMBED);
    return (const char *)m->weights + p->offset * zt_dtype_size(m->compute);
}

/* y (r, out) = beta*y + x (r, in) . W^T, W (out, in) in the compute dtype. */
static int linear(const zt_infer *m, float *y, const void *x, zt_dtype x_dt, const void *w, int r,
                  int out, int in, float beta, zt_err *err)
{
    return m->be->matmul(y, x, x_dt, w, m->compute, r, out, in, 0, 1, beta, m->compute, err);
}

/* One decoder layer on r rows at positions pos..pos+r-1; x is updated in place. */
static int layer_forward(zt_infer *m, int l, int r, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    int C = c->hidden_size, F = c->intermediate_size, nh = c->num_attention_heads;
    int nkv = c->num_key_value_heads, hd = c->head_dim, Dq = nh * hd, Dqkv = (nh + 2 * nkv) * hd;
    float eps = (float)c->rms_norm_eps;
    const float *w_n1 = m->norms + (size_t)(2 * l) * C, *w_n2 = w_n1 + C;
    int rc;

    m->be->rmsnorm_forward(m->n, m->opd, m->rstd, m->x, w_n1, r, C, eps);
    /* q, k, v are adjacent in a layer (layout.h): q's view is W_qkv */
    if ((rc = linear(m, m->qkv, m->n, m->opd, weight(m, l, ZT_P_Q), r, Dqkv, C, 0.0f, err)))
        return rc;
    if (c->qkv_bias) /* q, k, v biases are adjacent too: q's is b_qkv */
        m->be->bias_forward(m->qkv, weight(m, l, ZT_P_Q_BIAS), m->compute, r, Dqkv);
    size_t half = (size_t)hd / 2;
    m->be->rope_forward(m->qkv, m->rope_cos + (size_t)m->pos * half, m->rope_sin + (size_t)m->pos * half, 1,
                    r, nh, nkv, hd);
    /* this layer's cache (nkv, cap, hd): row i's head g goes to position pos + i */
    size_t layer_cache = (size_t)nkv * m->cap * hd;
    float *kc = m->k_cache + (size_t)l * layer_cache, *vc = m->v_cache + (size_t)l * layer_cache;
    for (int i = 0; i < r; i++)
        for (int g = 0; g < nkv; g++) {
            const float *row = m->qkv + (size_t)i * Dqkv;
            size_t at = ((size_t)g * m->cap + (size_t)(m->pos + i)) * hd;
            m->be->copy(kc + at, row + (size_t)(nh + g) * hd, (size_t)hd * sizeof(float));
            m->be->copy(vc + at, row + (size_t)(nh + nkv + g) * hd, (size_t)hd * sizeof(float));
        }
    m->be->attention_cache_forward(m->att, m->qkv, (size_t)Dqkv, kc, vc, m->cap, m->pos, r, nh, nkv, hd,
                                   zt_llama_attention_window(c), m->scores, m->threads);
    m->be->copy(m->h, m->x, (size_t)r * C * sizeof(float));
    if ((rc = linear(m, m->h, m->att, ZT_F32, weight(m, l, ZT_P_O), r, C, Dq, 1.0f, err)))
        return rc;
    m->be->rmsnorm_forward(m->n, m->opd, m->rstd, m->h, w_n2, r, C, eps);
    /* gate and up are adjacent: gate's view is W_gu */
    if ((rc = linear(m, m->gu, m->n, m->opd, weight(m, l, ZT_P_GATE), r, 2 * F, C, 0.0f, err)))
        return rc;
    m->be->swiglu_forward(m->act, m->opd, m->gu, r, F);
    m->be->copy(m->x, m->h, (size_t)r * C * sizeof(float));
    return linear(m, m->x, m->act, m->opd, weight(m, l, ZT_P_DOWN), r, C, F, 1.0f, err);
}

/* r <= rows new tokens; the logits of the last when want_logits. */
static int pass(zt_infer *m, const int *tokens, int r, int want_logits, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    int C = c->hidden_size, L = c->num_hidden_layers, rc;
    const char *wte = weight(m, -1, ZT_P_EMBED);
    m->be->embed_forward(m->x, wte, m->compute, tokens, r, C);
    for (int l = 0; l < L; l++)
        if ((rc = layer_forward(m, l, r, err)))
            return rc;
    m->pos += r;
    if (!want_logits)
        return ZT_OK;
    m->be->rmsnorm_forward(m->n, m->opd, m->rstd, m->x + (size_t)(r - 1) * C, m->norms + (size_t)(2 * L) * C,
                       1, C, (float)c->rms_norm_eps);
    rc = linear(m, m->logits, m->n, m->opd, weight(m, -1, ZT_P_LM_HEAD), 1, c->vocab_size, C, 0.0f, err);
    if (rc == ZT_OK && m->logits_host != m->logits) /* sampling reads them on the host */
        m->be->to_host(m->logits_host, m->logits, (size_t)c->vocab_size * sizeof(float));
    return rc;
}

int zt_infer_forward(zt_infer *m, const int *tokens, int n, zt_err *err)
{
    if (n < 1)
        return zt_fail(err, ZT_EINPUT, "no tokens to run the model on");
    if (n > m->cap - m->pos)
        return zt_fail(err, ZT_EINPUT, "%d more tokens exceed the %d-position context (%d used)", n,
                       m->cap, m->pos);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return zt_fail(err, ZT_EINPUT, "token id %d is outside the model's vocabulary (vocab_size %d)",
                           tokens[i], m->cfg.vocab_size);
    for (int done = 0; done < n;) {
        int r = n - done < m->rows ? n - done : m->rows;
        int rc = pass(m, tokens + done, r, done + r == n, err);
        if (rc)
            return rc;
        done += r;
    }
    return ZT_OK;
}
