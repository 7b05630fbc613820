/* llama.c — Llama forward and backward over units of flat parameters.
 *
 * Shapes: N = B*T rows, C hidden, F intermediate, nh / nkv heads of hd,
 * Dq = nh*hd, Dqkv = (nh + 2*nkv)*hd, V vocabulary.  Per decoder layer:
 *   n1 = rmsnorm(x)            qkv = n1 Wqkv^T, rope(q, k)     att = attn(qkv)
 *   h  = x + att Wo^T          n2  = rmsnorm(h)                gu  = n2 Wgu^T
 *   out = h + swiglu(gu) Wdown^T
 * and at the top: x0 = embed[tokens], logits = rmsnorm(xL) Wlm^T,
 * loss = sum xent(logits, targets).  Backward walks the same steps in reverse;
 * `dres` carries the residual stream's gradient, to which each RMSNorm backward
 * adds its input gradient. */
#include "llama.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "../core/mem.h"
#include "../kernels/kernels.h"
#include "../kernels/matmul.h"

typedef struct alloc_rec {
    void *p;
    size_t bytes;
} alloc_rec;

typedef struct alloc_list {
    alloc_rec *recs;
    int n, cap;
} alloc_list;

static void *act_alloc_bytes(zt_model *m, size_t bytes)
{
    alloc_list *al = m->alloc_list;
    if (al->n == al->cap) {
        int ncap = al->cap ? 2 * al->cap : 64;
        alloc_rec *nr = zt_alloc(ZT_MEM_OTHER, (size_t)ncap * sizeof *nr);
        if (!nr)
            return NULL;
        if (al->recs) {
            memcpy(nr, al->recs, (size_t)al->n * sizeof *nr);
            zt_free(ZT_MEM_OTHER, al->recs, (size_t)al->cap * sizeof *nr);
        }
        al->recs = nr;
        al->cap = ncap;
    }
    void *p = zt_alloc(ZT_MEM_ACTIV, bytes);
    if (!p)
        return NULL;
    al->recs[al->n++] = (alloc_rec){p, bytes};
    m->act_bytes += bytes;
    return p;
}

static void *act_alloc(zt_model *m, size_t nelems, zt_dtype dt)
{
    return act_alloc_bytes(m, nelems * zt_dtype_size(dt));
}

zt_dtype zt_model_operand_dtype(zt_dtype compute) { return compute == ZT_BF16 ? ZT_BF16 : ZT_F32; }

/* lm_head's dn = dlogits (N, V) . W (V, C) reduces over the vocabulary.  When V is many
 * times C, oneDNN runs the transposed product dn^T = W^T dlogits^T faster: at N = 2048,
 * C = 768, V = 32000 on 2 threads, 12-13 % faster in fp32 and in bf16 (the transpose of
 * the (C, N) result back costs about 1 ms); at V = 4 C it is 5 % slower. */
#define HEAD_TRANSPOSED_RATIO 16

int zt_model_set_head_transposed(zt_model *m, int on, zt_err *err)
{
    if (on && !m->dnT &&
        !(m->dnT = act_alloc(m, (size_t)m->N * (size_t)m->cfg.hidden_size, ZT_F32))) {
        zt_model_free(m);
        return zt_fail(err, ZT_EFAIL, "out of memory for activations (B=%d, T=%d)", m->B, m->T);
    }
    m->head_transposed = on;
    return ZT_OK;
}

/* fp32 buffer of n floats; operand-dtype buffer of n elements; bf16 copy of n
 * elements only when operands are bf16 (otherwise NULL, and nothing allocated). */
#define F32(n) act_alloc(m, (n), ZT_F32)
#define OPD(n) act_alloc(m, (n), m->opd)
#define COPY16(ptr, n) (m->opd != ZT_BF16 || ((ptr) = act_alloc(m, (n), ZT_BF16)))

int zt_model_init(zt_model *m, const zt_llama_config *cfg, const zt_layout *lay,
                  const zt_param_owner *owner, int B, int T, int checkpointing, zt_err *err)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->lay = lay;
    m->own = *owner;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->checkpointing = checkpointing;
    m->opd = zt_model_operand_dtype(owner->compute);
    m->alloc_list = zt_alloc(ZT_MEM_OTHER, sizeof(alloc_list));
    if (!m->alloc_list)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    int L = cfg->num_hidden_layers, nh = cfg->num_attention_heads, nkv = cfg->num_key_value_heads;
    size_t N = (size_t)m->N, C = (size_t)cfg->hidden_size, F = (size_t)cfg->intermediate_size;
    size_t hd = (size_t)cfg->head_dim, Dq = (size_t)nh * hd, Dqkv = (size_t)(nh + 2 * nkv) * hd;
    size_t V = (size_t)cfg->vocab_size;
    m->layers = zt_alloc(ZT_MEM_OTHER, ((size_t)L + 1) * sizeof *m->layers);
    if (!m->layers)
        goto oom;
    /* With checkpointing every layer shares one set of intermediate buffers,
     * refilled by recomputation in backward; only x is per layer. */
    zt_layer_acts shared = {0};
    for (int l = 0; l <= L; l++) {
        zt_layer_acts *a = &m->layers[l];
        if (!(a->x = F32(N * C)))
            goto oom;
        if (l == L)
            break;
        if (checkpointing && l > 0) {
            float *x = a->x;
            *a = shared;
            a->x = x;
            continue;
        }
        if (!(a->n1 = OPD(N * C)) || !(a->rstd1 = F32(N)) || !(a->qkv = F32(N * Dqkv)) ||
            !(a->att = F32(N * Dq)) || !COPY16(a->att16, N * Dq) || !(a->lse = F32(N * (size_t)nh)) ||
            !(a->h = F32(N * C)) || !(a->n2 = OPD(N * C)) || !(a->rstd2 = F32(N)) ||
            !(a->gu = F32(N * 2 * F)) || !(a->act = OPD(N * F)))
            goto oom;
        if (l == 0)
            shared = *a;
    }
    if (!(m->nf = OPD(N * C)) || !(m->rstdf = F32(N)) || !(m->logits = F32(N * V)) ||
        !COPY16(m->dlogits16, N * V) || !(m->dres = F32(N * C)) || !COPY16(m->dres16, N * C) ||
        !(m->dn = F32(N * C)) || !(m->dqkv = F32(N * Dqkv)) || !COPY16(m->dqkv16, N * Dqkv) ||
        !(m->datt = F32(N * Dq)) || !(m->dgu = OPD(N * 2 * F)) || !(m->dact = F32(N * F)) ||
        !(m->rope_cos = F32((size_t)T * hd / 2)) || !(m->rope_sin = F32((size_t)T * hd / 2)) ||
        !(m->norm_w = F32(C)))
        goto oom;
    if (zt_model_set_head_transposed(m, V >= HEAD_TRANSPOSED_RATIO * C, err))
        return err->code;
    if (m->opd == ZT_BF16 && zt_attention16_supported((int)hd) &&
        !(m->attn_pack = act_alloc_bytes(m, zt_attention16_pack_bytes(B, T, nkv, (int)hd))))
        goto oom;
    zt_rope_tables(m->rope_cos, m->rope_sin, T, (int)hd, (float)cfg->rope_theta);
    return ZT_OK;
oom:
    zt_model_free(m);
    return zt_fail(err, ZT_EFAIL, "out of memory for activations (B=%d, T=%d)", B, T);
}

#undef F32
#undef OPD
#undef COPY16

void zt_model_free(zt_model *m)
{
    alloc_list *al = m->alloc_list;
    if (al) {
        for (int i = 0; i < al->n; i++)
            zt_free(ZT_MEM_ACTIV, al->recs[i].p, al->recs[i].bytes);
        zt_free(ZT_MEM_OTHER, al->recs, (size_t)al->cap * sizeof(alloc_rec));
        zt_free(ZT_MEM_OTHER, al, sizeof *al);
    }
    if (m->layers)
        zt_free(ZT_MEM_OTHER, m->layers, ((size_t)m->cfg.num_hidden_layers + 1) * sizeof *m->layers);
    memset(m, 0, sizeof *m);
}

const float *zt_model_logits(const zt_model *m) { return m->logits; }

/* ---- parameter views ---------------------------------------------------- */

typedef struct layer_weights {
    const void *attn_norm, *qkv, *o, *mlp_norm, *gu, *down; /* compute dtype */
} layer_weights;

typedef struct layer_grads {
    float *attn_norm, *qkv, *o, *mlp_norm, *gu, *down; /* fp32 staging */
} layer_grads;

static const void *view(const zt_model *m, const void *base, int layer, zt_param_kind kind)
{
    const zt_param *p = zt_layout_param(m->lay, layer, kind);
    return (const char *)base + p->offset * zt_dtype_size(m->own.compute);
}

static float *grad_view(const zt_model *m, float *base, int layer, zt_param_kind kind)
{
    return base + zt_layout_param(m->lay, layer, kind)->offset;
}

static layer_weights layer_views(const zt_model *m, const void *base, int l)
{
    /* q, k, v are adjacent in the flat buffer (layout.h), so q's view is W_qkv;
     * likewise gate's view is W_gu. */
    return (layer_weights){view(m, base, l, ZT_P_ATTN_NORM), view(m, base, l, ZT_P_Q),
                           view(m, base, l, ZT_P_O),         view(m, base, l, ZT_P_MLP_NORM),
                           view(m, base, l, ZT_P_GATE),      view(m, base, l, ZT_P_DOWN)};
}

static layer_grads layer_grad_views(const zt_model *m, float *base, int l)
{
    return (layer_grads){grad_view(m, base, l, ZT_P_ATTN_NORM), grad_view(m, base, l, ZT_P_Q),
                         grad_view(m, base, l, ZT_P_O),         grad_view(m, base, l, ZT_P_MLP_NORM),
                         grad_view(m, base, l, ZT_P_GATE),      grad_view(m, base, l, ZT_P_DOWN)};
}

/* Norm kernels read fp32 weights; in bf16 compute the weight is widened into a
 * small scratch vector first (C elements, negligible). */
static const float *norm_weight(zt_model *m, const void *w)
{
    if (m->own.compute == ZT_F32)
        return w;
    zt_convert(m->norm_w, ZT_F32, w, m->own.compute, (size_t)m->cfg.hidden_size);
    return m->norm_w;
}

/* ---- the parameter owner's hooks (param_owner.h) -------------------------- */

static const void *acquire(zt_model *m, int unit, zt_pass pass)
{
    return m->own.ops->acquire(m->own.ctx, unit, pass);
}
static void release(zt_model *m, int unit) { m->own.ops->release(m->own.ctx, unit); }
static float *grad_begin(zt_model *m, int unit) { return m->own.ops->grad_begin(m->own.ctx, unit); }
static void grad_end(zt_model *m, int unit) { m->own.ops->grad_end(m->own.ctx, unit); }
static void progress(zt_model *m) { m->own.ops->progress(m->own.ctx); }

/* ---- linear layer: y = x W^T with W (out, in) ---------------------------- */

/* After each product the owner may move collectives in flight (a prefetched
 * unit's all-gather, the previous unit's reduce-scatter): with one thread per
 * rank, MPI advances them only when called, and a product is the natural tick. */
static int linear_forward(zt_model *m, float *y, const void *x, const void *w, int out, int in,
                          float beta, zt_err *err)
{
    zt_dtype c = m->own.compute;
    int rc = zt_matmul(y, x, m->opd, w, c, m->N, out, in, 0, 1, beta, c, err);
    progress(m);
    return rc;
}

/* dx = dy W (overwrite), dW += dy^T x; dy and x in the operand dtype. */
static int linear_backward(zt_model *m, float *dx, float *dw, const void *dy, const void *x,
                           const void *w, int out, int in, zt_err *err)
{
    zt_dtype c = m->own.compute;
    int rc = zt_matmul(dx, dy, m->opd, w, c, m->N, in, out, 0, 0, 0.0f, c, err);
    progress(m);
    if (rc == ZT_OK)
        rc = zt_matmul(dw, dy, m->opd, x, m->opd, out, in, m->N, 1, 0, 1.0f, c, err);
    progress(m);
    return rc;
}

/* The residual stream's gradient as a product operand: its bf16 copy, which every
 * update of dres refreshes, when operands are bf16. */
static const void *dres_operand(const zt_model *m)
{
    return m->dres16 ? (const void *)m->dres16 : (const void *)m->dres;
}

/* The attention output as a product operand: its bf16 copy when operands are bf16. */
static const void *att_operand(const zt_layer_acts *a)
{
    return a->att16 ? (const void *)a->att16 : (const void *)a->att;
}

/* ---- one decoder layer --------------------------------------------------- */

static int layer_forward(zt_model *m, int l, const void *base, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    zt_layer_acts *a = &m->layers[l];
    float *out = m->layers[l + 1].x;
    int N = m->N, C = c->hidden_size, F = c->intermediate_size, nh = c->num_attention_heads;
    int nkv = c->num_key_value_heads, hd = c->head_dim, Dq = nh * hd, Dqkv = (nh + 2 * nkv) * hd;
    float eps = (float)c->rms_norm_eps;
    layer_weights w = layer_views(m, base, l);
    int rc;

    zt_rmsnorm_forward(a->n1, m->opd, a->rstd1, a->x, norm_weight(m, w.attn_norm), N, C, eps);
    if ((rc = linear_forward(m, a->qkv, a->n1, w.qkv, Dqkv, C, 0.0f, err)))
        return rc;
    zt_rope_forward(a->qkv, m->rope_cos, m->rope_sin, m->B, m->T, nh, nkv, hd);
    if (m->attn_pack)
        zt_attention16_forward(a->att, a->att16, a->lse, a->qkv, m->attn_pack, m->B, m->T, nh, nkv,
                               hd);
    else
        zt_attention_forward_copy16(a->att, a->att16, a->lse, a->qkv, m->B, m->T, nh, nkv, hd);
    memcpy(a->h, a->x, (size_t)N * C * sizeof(float));
    if ((rc = linear_forward(m, a->h, att_operand(a), w.o, C, Dq, 1.0f, err)))
        return rc;
    zt_rmsnorm_forward(a->n2, m->opd, a->rstd2, a->h, norm_weight(m, w.mlp_norm), N, C, eps);
    if ((rc = linear_forward(m, a->gu, a->n2, w.gu, 2 * F, C, 0.0f, err)))
        return rc;
    zt_swiglu_forward(a->act, m->opd, a->gu, N, F);
    memcpy(out, a->h, (size_t)N * C * sizeof(float));
    return linear_forward(m, out, a->act, w.down, C, F, 1.0f, err);
}

/* On entry m->dres (and m->dres16) hold d loss / d out; on exit d loss / d x. */
static int layer_backward(zt_model *m, int l, const void *base, float *gbase, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    zt_layer_acts *a = &m->layers[l];
    int N = m->N, C = c->hidden_size, F = c->intermediate_size, nh = c->num_attention_heads;
    int nkv = c->num_key_value_heads, hd = c->head_dim, Dq = nh * hd, Dqkv = (nh + 2 * nkv) * hd;
    layer_weights w = layer_views(m, base, l);
    layer_grads g = layer_grad_views(m, gbase, l);
    int rc;

    /* MLP: out = h + act Wdown^T */
    if ((rc = linear_backward(m, m->dact, g.down, dres_operand(m), a->act, w.down, C, F, err)))
        return rc;
    zt_swiglu_backward(m->dgu, m->opd, m->dact, a->gu, N, F);
    if ((rc = linear_backward(m, m->dn, g.gu, m->dgu, a->n2, w.gu, 2 * F, C, err)))
        return rc;
    zt_rmsnorm_backward_accumulate(m->dres, m->dres16, g.mlp_norm, m->dn, a->h,
                                   norm_weight(m, w.mlp_norm), a->rstd2, N, C);
    /* attention: h = x + att Wo^T */
    if ((rc = linear_backward(m, m->datt, g.o, dres_operand(m), att_operand(a), w.o, C, Dq, err)))
        return rc;
    if (m->attn_pack)
        zt_attention16_backward(m->dqkv, m->datt, a->qkv, a->att, a->lse, m->attn_pack, m->B, m->T,
                                nh, nkv, hd);
    else
        zt_attention_backward(m->dqkv, m->datt, a->qkv, a->att, a->lse, m->B, m->T, nh, nkv, hd);
    zt_rope_backward(m->dqkv, m->rope_cos, m->rope_sin, m->B, m->T, nh, nkv, hd);
    const void *dqkv = m->dqkv;
    if (m->dqkv16) {
        zt_convert(m->dqkv16, ZT_BF16, m->dqkv, ZT_F32, (size_t)N * Dqkv);
        dqkv = m->dqkv16;
    }
    if ((rc = linear_backward(m, m->dn, g.qkv, dqkv, a->n1, w.qkv, Dqkv, C, err)))
        return rc;
    zt_rmsnorm_backward_accumulate(m->dres, m->dres16, g.attn_norm, m->dn, a->x,
                                   norm_weight(m, w.attn_norm), a->rstd1, N, C);
    return ZT_OK;
}

/* ---- embedding ----------------------------------------------------------- */

static void embed_forward(zt_model *m, float *x, const void *wte, const int *tokens)
{
    int C = m->cfg.hidden_size;
    zt_dtype dt = m->own.compute;
    size_t es = zt_dtype_size(dt);
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < m->N; i++)
        zt_convert(x + (size_t)i * C, ZT_F32, (const char *)wte + (size_t)tokens[i] * C * es, dt,
                   (size_t)C);
}

/* dwte[token] += dx[row].  Rows hitting the same token would race, so threads
 * split the columns instead of the rows. */
static void embed_backward(zt_model *m, float *dwte, const float *dx, const int *tokens)
{
    int C = m->cfg.hidden_size, N = m->N;
    #pragma omp parallel
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        int lo = (int)((long)C * t / nt), hi = (int)((long)C * (t + 1) / nt);
        for (int i = 0; i < N; i++) {
            float *restrict drow = dwte + (size_t)tokens[i] * C;
            const float *restrict xrow = dx + (size_t)i * C;
            #pragma omp simd
            for (int j = lo; j < hi; j++)
                drow[j] += xrow[j];
        }
    }
}

/* ---- whole model ---------------------------------------------------------- */

static int unit_of_layer(const zt_model *m, int l) { return m->lay->layer_unit[l]; }

/* One micro-batch's forward and, with backward, backward; an error returns with
 * units still acquired, which pass_or_reset hands back. */
static int model_pass(zt_model *m, const int *inputs, const int *targets, int backward,
                      float grad_scale, double *loss_sum, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    const zt_layout *lay = m->lay;
    int L = c->num_hidden_layers, C = c->hidden_size, V = c->vocab_size, N = m->N;
    int root = lay->root_unit, rc = ZT_OK;
    zt_dtype cd = m->own.compute;
    size_t es = zt_dtype_size(cd);

    const void *root_base = acquire(m, root, ZT_PASS_FORWARD);
    const zt_param *pe = zt_layout_param(lay, -1, ZT_P_EMBED);
    const zt_param *plm = zt_layout_param(lay, -1, ZT_P_LM_HEAD);
    if (!plm)
        plm = pe; /* tied: lm_head is embed_tokens */
    const void *wte = (const char *)root_base + pe->offset * es;
    const void *wlm = (const char *)root_base + plm->offset * es;
    const void *wnorm = (const char *)root_base + zt_layout_param(lay, -1, ZT_P_FINAL_NORM)->offset * es;

    embed_forward(m, m->layers[0].x, wte, inputs);
    /* A layer unit is acquired before its first layer and released after its
     * last (stage 3 gathers it then and frees it after). */
    const void *base = NULL;
    for (int l = 0; l < L; l++) {
        int u = unit_of_layer(m, l);
        if (u == root)
            base = root_base;
        else if (l == 0 || unit_of_layer(m, l - 1) != u)
            base = acquire(m, u, ZT_PASS_FORWARD);
        if ((rc = layer_forward(m, l, base, err)))
            return rc;
        if (u != root && (l == L - 1 || unit_of_layer(m, l + 1) != u))
            release(m, u);
    }
    zt_rmsnorm_forward(m->nf, m->opd, m->rstdf, m->layers[L].x, norm_weight(m, wnorm), N, C,
                       (float)c->rms_norm_eps);
    if ((rc = linear_forward(m, m->logits, m->nf, wlm, V, C, 0.0f, err)))
        return rc;
    *loss_sum = zt_xent_forward_backward(backward ? m->logits : NULL, backward ? m->dlogits16 : NULL,
                                         m->logits, targets, N, V, grad_scale);
    if (!backward) {
        release(m, root);
        return ZT_OK;
    }

    /* Backward.  The root unit's gradient stays open from lm_head to embed. */
    float *groot = grad_begin(m, root);
    float *dlm = groot + plm->offset;
    const void *dlogits = m->dlogits16 ? (const void *)m->dlogits16 : (const void *)m->logits;
    if (m->head_transposed) { /* dn^T = W^T dlogits^T, dW += dlogits^T nf */
        rc = zt_matmul(m->dnT, wlm, cd, dlogits, m->opd, C, N, V, 1, 1, 0.0f, cd, err);
        if (rc == ZT_OK) {
            zt_transpose_f32(m->dn, m->dnT, C, N);
            rc = zt_matmul(dlm, dlogits, m->opd, m->nf, m->opd, V, C, N, 1, 0, 1.0f, cd, err);
        }
    } else {
        rc = linear_backward(m, m->dn, dlm, dlogits, m->nf, wlm, V, C, err);
    }
    if (rc)
        return rc;
    memset(m->dres, 0, (size_t)N * C * sizeof(float));
    zt_rmsnorm_backward_accumulate(m->dres, m->dres16,
                                   groot + zt_layout_param(lay, -1, ZT_P_FINAL_NORM)->offset, m->dn,
                                   m->layers[L].x, norm_weight(m, wnorm), m->rstdf, N, C);
    float *gunit = NULL;
    for (int l = L - 1; l >= 0; l--) {
        int u = unit_of_layer(m, l);
        int unit_first = l == 0 || unit_of_layer(m, l - 1) != u;
        int unit_last = l == L - 1 || unit_of_layer(m, l + 1) != u;
        if (u == root) {
            base = root_base;
            gunit = groot;
        } else if (unit_last) {
            base = acquire(m, u, ZT_PASS_BACKWARD);
            gunit = grad_begin(m, u);
        }
        if (m->checkpointing && (rc = layer_forward(m, l, base, err)))
            return rc;
        if ((rc = layer_backward(m, l, base, gunit, err)))
            return rc;
        if (u != root && unit_first) {
            grad_end(m, u);
            release(m, u);
        }
    }
    embed_backward(m, groot + pe->offset, m->dres, inputs);
    grad_end(m, root);
    release(m, root);
    return ZT_OK;
}

size_t zt_model_activation_bytes(const zt_llama_config *cfg, int B, int T, int checkpointing,
                                 zt_dtype compute)
{
    /* the same buffers zt_model_init allocates (a test holds the two equal) */
    size_t N = (size_t)B * T, C = (size_t)cfg->hidden_size, F = (size_t)cfg->intermediate_size;
    size_t L = (size_t)cfg->num_hidden_layers, nh = (size_t)cfg->num_attention_heads;
    size_t hd = (size_t)cfg->head_dim, Dq = nh * hd;
    size_t Dqkv = (nh + 2 * (size_t)cfg->num_key_value_heads) * hd, V = (size_t)cfg->vocab_size;
    size_t o = zt_dtype_size(zt_model_operand_dtype(compute)); /* operand bytes */
    size_t c16 = zt_model_operand_dtype(compute) == ZT_BF16 ? 2 : 0; /* bf16 copies */
    /* per layer: rstd1 rstd2 qkv att lse h gu (fp32), n1 n2 act (operand), att16 */
    size_t per_layer = 4 * (2 * N + N * Dqkv + N * Dq + N * nh + N * C + N * 2 * F) +
                       o * (2 * N * C + N * F) + c16 * N * Dq;
    size_t layers_with_intermediates = checkpointing ? (L > 0 ? 1 : 0) : L;
    size_t bytes = 4 * (L + 1) * N * C + layers_with_intermediates * per_layer;
    bytes += o * N * C + 4 * (N + N * V) + c16 * N * V;          /* nf, rstdf, logits, dlogits16 */
    bytes += 4 * (2 * N * C + N * Dqkv + N * Dq + N * F);         /* dres dn dqkv datt dact */
    bytes += o * N * 2 * F + c16 * (N * C + N * Dqkv);            /* dgu, dres16 dqkv16 */
    bytes += 4 * (2 * ((size_t)T * hd / 2) + C);                  /* rope tables, norm weight */
    if (V >= HEAD_TRANSPOSED_RATIO * C)                           /* dnT */
        bytes += 4 * N * C;
    if (c16 && zt_attention16_supported((int)hd))                 /* bf16 attention's K/V */
        bytes += zt_attention16_pack_bytes(B, T, cfg->num_key_value_heads, (int)hd);
    return bytes;
}

double zt_model_flops_per_token(const zt_llama_config *c, int T, int checkpointing)
{
    double C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    double nh = c->num_attention_heads, nkv = c->num_key_value_heads, V = c->vocab_size;
    double per_layer = C * (nh + 2 * nkv) * hd + nh * hd * C + 3 * C * F; /* matrix weights */
    double matrix = c->num_hidden_layers * per_layer + V * C;            /* + lm_head */
    /* causal attention: q k^T and p v, 2 flops per MAC, about T/2 keys per query */
    double attn = c->num_hidden_layers * 2.0 * 2.0 * nh * hd * (T + 1) / 2.0;
    double fwd = 2.0 * matrix + attn;
    /* backward is twice the forward; checkpointing recomputes the layers' forward */
    double layers_fwd = 2.0 * c->num_hidden_layers * per_layer + attn;
    return 3.0 * fwd + (checkpointing ? layers_fwd : 0.0);
}

/* A failed pass hands every unit back to the owner (its reset). */
static int pass_or_reset(zt_model *m, const int *inputs, const int *targets, int backward,
                         float grad_scale, double *loss_sum, zt_err *err)
{
    int rc = model_pass(m, inputs, targets, backward, grad_scale, loss_sum, err);
    if (rc)
        m->own.ops->reset(m->own.ctx);
    return rc;
}

int zt_model_forward_backward(zt_model *m, const int *inputs, const int *targets, float grad_scale,
                              double *loss_sum, zt_err *err)
{
    if (!m->own.ops->grad_begin)
        return zt_fail(err, ZT_EINPUT, "backward pass over parameters that keep no gradients");
    return pass_or_reset(m, inputs, targets, 1, grad_scale, loss_sum, err);
}

int zt_model_forward(zt_model *m, const int *inputs, const int *targets, double *loss_sum, zt_err *err)
{
    return pass_or_reset(m, inputs, targets, 0, 0.0f, loss_sum, err);
}
