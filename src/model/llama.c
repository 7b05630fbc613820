/* llama.c — Llama forward and backward over units of flat parameters.
 *
 * Shapes: N = B*T rows, C hidden, F intermediate, nh / nkv heads of hd,
 * Dq = nh*hd, Dqkv = (nh + 2*nkv)*hd, V vocabulary.  Per decoder layer:
 *   n1 = rmsnorm(x)            qkv = n1 Wqkv^T [+ bqkv], rope(q, k)     att = attn(qkv)
 *   h  = x + att Wo^T          n2  = rmsnorm(h)                gu  = n2 Wgu^T
 *   out = h + swiglu(gu) Wdown^T
 * and at the top: x0 = embed[tokens], logits = rmsnorm(xL) Wlm^T,
 * loss = sum xent(logits, targets).  Backward walks the same steps in reverse;
 * `dres` carries the residual stream's gradient, to which each RMSNorm backward
 * adds its input gradient.  The residual adds are products with the residual in their
 * epilogue (the table's matmul_out).  In fast mode (a fast backend table) the training
 * pass computes logits, loss and lm_head's gradients together in chunks of rows
 * (lmhead_xent), so the (N, V) logits never exist. */
#include "llama.h"
#include "llama_lora.h"

#include <math.h>
#include <string.h>

#include "../core/mem.h"
#include "../core/prof.h"
#include "../core/rng.h"
#include "../kernels/backend.h"

zt_dtype zt_model_operand_dtype(zt_dtype compute) { return compute == ZT_BF16 ? ZT_BF16 : ZT_F32; }

zt_rope_freqs zt_model_rope_freqs(const zt_llama_config *c)
{
    return (zt_rope_freqs){(float)c->rope_theta, c->rope_llama3, c->rope_factor, c->rope_low_freq_factor,
                           c->rope_high_freq_factor, c->rope_original_max_position_embeddings};
}

/* lm_head's dn = dlogits (N, V) . W (V, C) reduces over the vocabulary.  When V is many
 * times C, oneDNN runs the transposed product dn^T = W^T dlogits^T faster: at N = 2048,
 * C = 768, V = 32000 on 2 threads, 12-13 % faster in fp32 and in bf16 (the transpose of
 * the (C, N) result back costs about 1 ms); at V = 4 C it is 5 % slower. */
#define HEAD_TRANSPOSED_RATIO 16

/* Fast mode's lm-head cross-entropy holds one chunk of rows' logits at a time: fp32
 * logits and bf16 gradients, V (4 + 2) bytes a row, within this budget, but never fewer
 * than XENT_CHUNK_MIN_ROWS rows: each chunk's dW += dlogits^T x reads and writes the
 * whole (V, C) fp32 gradient of lm_head, so a chunk of 349 rows (the budget's at
 * V = 32000) made N / 349 such passes where 1,024 rows make N / 1024 (at V = 32000 a
 * chunk of 1,024 rows is 188 MiB, against 250 MiB for all the fp32 logits at N = 2048). */
#define XENT_CHUNK_BUDGET ((size_t)64 << 20)
#define XENT_CHUNK_MIN_ROWS 1024

int zt_model_xent_chunk_rows(const zt_llama_config *c, int N)
{
    size_t r = XENT_CHUNK_BUDGET / ((size_t)c->vocab_size * (sizeof(float) + sizeof(uint16_t)));
    r = r < XENT_CHUNK_MIN_ROWS ? XENT_CHUNK_MIN_ROWS : r;
    return r > (size_t)N ? (N > 0 ? N : 1) : (int)r;
}

static int head_transposed_by_default(const zt_llama_config *c)
{
    return (size_t)c->vocab_size >= HEAD_TRANSPOSED_RATIO * (size_t)c->hidden_size;
}

/* ---- activation buffers: one size table, two uses ------------------------
 *
 * act_table lists every activation buffer the model holds, with its size and the
 * field that points to it, in allocation order (llm.c's fill_in_activation_sizes).
 * zt_model_init allocates exactly what it lists and zt_model_activation_bytes
 * sums the same list, so the estimate cannot drift from the allocation.
 *
 * Per layer: x (N, C) fp32, kept even with checkpointing; then the intermediates
 * n1, n2, act in the operand dtype, rstd1, rstd2, qkv, att, lse, h, gu in fp32 and
 * att16 in bf16 when operands are bf16.  With bf16 activations (m->act16) qkv, att
 * and gu are not held: qkv16 and gu16 (bf16) take the place of qkv and gu, att16
 * alone holds the attention output: 2 N (Dqkv + Dq + 2F) bytes a layer instead of
 * 4 N (Dqkv + Dq + 2F) + 2 N Dq.  The gate|up product writes bf16 (matmul_out), the
 * qkv product too, its bias in the product (linear_act16), and RoPE is applied where
 * the attention reads q and k (so qkv16 holds q and k before RoPE); its backward writes
 * the bf16 dqkv16 directly, so the fp32 dqkv is held only for a q/k/v bias.  With
 * checkpointing only layer 0 has intermediates, which every layer shares (refilled by
 * recomputation in backward).  Then the final norm, the logits (reused in place for
 * dlogits), the backward scratch, the rope tables, the norm weights' fp32 copies, lm_head's
 * transposed result when the vocabulary is wide, and the attention's scratch.  In fast mode
 * (fused_head) the logits, their bf16 gradient and lm_head's transposed result are
 * not there (lmhead_xent holds one chunk of rows: the CUDA tables in their scratch,
 * the host per call), and a device double for the loss is. */

typedef struct act_buf {
    void *field;  /* address of the pointer field (float *, uint16_t * or void *) */
    size_t bytes;
    void *p;      /* the allocation, once made */
} act_buf;

/* The table for m's shapes (cfg, B, T, checkpointing, opd, be).  With out NULL
 * it only counts and sums (m->layers may be NULL then).  Returns the count. */
static int act_table(const zt_model *m, act_buf *out, size_t *total)
{
    const zt_llama_config *c = &m->cfg;
    int L = c->num_hidden_layers, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    size_t N = (size_t)m->N, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t hd = (size_t)c->head_dim, Dq = (size_t)nh * hd, Dqkv = (size_t)(nh + 2 * nkv) * hd;
    size_t V = (size_t)c->vocab_size, T = (size_t)m->T;
    size_t o = zt_dtype_size(m->opd), c16 = m->opd == ZT_BF16 ? 2 : 0; /* bf16 copies: 0 bytes when not */
    size_t a32 = m->act16 ? 0 : 4, a16 = m->act16 ? 2 : 0; /* qkv, att, gu: fp32, or bf16 with act16 */
    int n = 0;
    *total = 0;
#define ADD(fld, nbytes)                                                          \
    do {                                                                          \
        size_t b_ = (nbytes);                                                     \
        if (b_) {                                                                 \
            if (out)                                                              \
                out[n] = (act_buf){(void *)&(fld), b_, NULL};                     \
            n++;                                                                  \
            *total += b_;                                                         \
        }                                                                         \
    } while (0)
    for (int l = 0; l <= L; l++) {
        ADD(m->layers[l].x, 4 * N * C);
        if (l == L || (m->checkpointing && l > 0))
            continue;
        ADD(m->layers[l].n1, o * N * C);
        ADD(m->layers[l].rstd1, 4 * N);
        ADD(m->layers[l].qkv, a32 * N * Dqkv);
        ADD(m->layers[l].qkv16, a16 * N * Dqkv);
        ADD(m->layers[l].att, a32 * N * Dq);
        ADD(m->layers[l].att16, c16 * N * Dq);
        ADD(m->layers[l].lse, 4 * N * (size_t)nh);
        ADD(m->layers[l].h, 4 * N * C);
        ADD(m->layers[l].n2, o * N * C);
        ADD(m->layers[l].rstd2, 4 * N);
        ADD(m->layers[l].gu, a32 * N * 2 * F);
        ADD(m->layers[l].gu16, a16 * N * 2 * F);
        ADD(m->layers[l].act, o * N * F);
    }
    ADD(m->nf, o * N * C);
    ADD(m->rstdf, 4 * N);
    const size_t head = m->fused_head ? 0 : 1; /* 0: fast mode's chunked lm-head */
    ADD(m->logits, head * 4 * N * V);
    ADD(m->dlogits16, head * c16 * N * V);
    ADD(m->dres, 4 * N * C);
    ADD(m->dres16, c16 * N * C);
    ADD(m->dn, 4 * N * C);
    /* with bf16 activations the attention's backward writes dqkv16 itself: the fp32
     * dqkv only for the q/k/v bias's gradient (its column sums) */
    ADD(m->dqkv, (m->act16 && !c->qkv_bias ? 0 : 4) * N * Dqkv);
    ADD(m->dqkv16, c16 * N * Dqkv);
    ADD(m->datt, 4 * N * Dq);
    ADD(m->dgu, o * N * 2 * F);
    ADD(m->dact, 4 * N * F);
    ADD(m->rope_cos, 4 * T * hd / 2);
    ADD(m->rope_sin, 4 * T * hd / 2);
    ADD(m->norm_w, 4 * C * (2 * (size_t)L + 1)); /* used only when compute is not fp32 */
    ADD(m->dnT, head && head_transposed_by_default(c) ? 4 * N * C : 0);
    ADD(m->loss_dev, (1 - head) * sizeof(double));
    ADD(m->attn_pack, m->be->attention_scratch_bytes(m->B, m->T, nh, nkv, (int)hd, m->opd));
#undef ADD
    return n;
}

/* The shapes act_table reads. */
static void set_shapes(zt_model *m, const zt_llama_config *cfg, const zt_backend *be, zt_dtype compute, int B,
                       int T, int checkpointing, zt_kernel_mode kernels, int act16)
{
    m->fused_head = kernels == ZT_KERNELS_FAST;
    m->cfg = *cfg;
    m->be = be;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->checkpointing = checkpointing;
    m->opd = zt_model_operand_dtype(compute);
    m->act16 = act16 && m->opd == ZT_BF16;
}

int zt_model_set_head_transposed(zt_model *m, int on, zt_err *err)
{
    size_t bytes = (size_t)m->N * (size_t)m->cfg.hidden_size * sizeof(float);
    if (on && !m->dnT) { /* not in the table (a narrow vocabulary): a buffer of its own */
        if (!(m->dnT = m->be->alloc(ZT_MEM_ACTIV, bytes)))
            return zt_fail(err, ZT_EFAIL, "out of memory for activations (B=%d, T=%d)", m->B, m->T);
        m->dnT_own_bytes = bytes;
        m->act_bytes += bytes;
    }
    m->head_transposed = on;
    return ZT_OK;
}

int zt_model_init(zt_model *m, const zt_llama_config *cfg, const zt_layout *lay,
                  const zt_param_owner *owner, int B, int T, int checkpointing, zt_err *err)
{
    memset(m, 0, sizeof *m);
    set_shapes(m, cfg, owner->backend, owner->compute, B, T, checkpointing, owner->backend->kernels, owner->act16);
    m->lay = lay;
    m->own = *owner;
    int L = cfg->num_hidden_layers;
    size_t total;
    m->nbufs = act_table(m, NULL, &total);
    m->layers = zt_alloc(ZT_MEM_OTHER, ((size_t)L + 1) * sizeof *m->layers);
    m->bufs = zt_alloc(ZT_MEM_OTHER, (size_t)m->nbufs * sizeof(act_buf));
    if (!m->layers || !m->bufs)
        goto oom;
    act_buf *bufs = m->bufs;
    act_table(m, bufs, &total);
    for (int i = 0; i < m->nbufs; i++) {
        if (!(bufs[i].p = m->be->alloc(ZT_MEM_ACTIV, bufs[i].bytes)))
            goto oom;
        /* the field is a float *, uint16_t * or void *: all object pointers, stored
         * through their bytes */
        memcpy(bufs[i].field, &bufs[i].p, sizeof bufs[i].p);
        m->act_bytes += bufs[i].bytes;
    }
    for (int l = 1; checkpointing && l < L; l++) { /* layer 0's intermediates, shared */
        float *x = m->layers[l].x;
        m->layers[l] = m->layers[0];
        m->layers[l].x = x;
    }
    m->head_transposed = !m->fused_head && head_transposed_by_default(cfg);
    m->xent_rows = zt_model_xent_chunk_rows(cfg, m->N);
    zt_rope_freqs freqs = zt_model_rope_freqs(cfg);
    m->be->rope_tables(m->rope_cos, m->rope_sin, T, cfg->head_dim, &freqs);
    return ZT_OK;
oom:
    zt_model_free(m);
    return zt_fail(err, ZT_EFAIL, "out of memory for activations (B=%d, T=%d)", B, T);
}

/* LoRA's buffers (zt_model's lora_t, lora_u, lora_dt, lora_dw, lora_dy, lora_xd), in bytes, for N
 * rows: the size table of zt_model_set_lora and of the estimate alike.  lora_dy holds fp32
 * copies of what the base writes in bf16 and the adapters must add to or read (the
 * adapters' scaled sums read and write fp32; bf16 to fp32 is exact): SwiGLU's gate|up
 * gradient (N, 2F) where operands are bf16 and gate or up is a target; with bf16
 * activations (act16) also the gate|up product gu16 (N, 2F) and the q|k|v product and its
 * gradient qkv16, dqkv16 (N, Dqkv) where q, k or v is a target.  One buffer: its uses never
 * overlap.  Where no such copy is needed it is not held.  lora_xd, an adapter's dropped
 * input (N, max(C, F)), only with dropout. */
static size_t lora_sizes(const zt_llama_config *c, int rows, const zt_lora *l, zt_dtype compute, int act16,
                         size_t bytes[ZT_LORA_BUFS])
{
    size_t N = (size_t)rows, r = (size_t)l->r, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t Dq = (size_t)c->num_attention_heads * (size_t)c->head_dim;
    size_t widest = C > F ? (C > Dq ? C : Dq) : (F > Dq ? F : Dq);
    size_t ntargets = (size_t)__builtin_popcount(l->targets);
    size_t Dqkv = (size_t)(c->num_attention_heads + 2 * c->num_key_value_heads) * (size_t)c->head_dim;
    int bf16 = zt_model_operand_dtype(compute) == ZT_BF16, wide16 = bf16 && act16;
    int mlp = (l->targets >> ZT_P_GATE & 1u) || (l->targets >> ZT_P_UP & 1u);
    int qkv = (l->targets & (1u << ZT_P_Q | 1u << ZT_P_K | 1u << ZT_P_V)) != 0;
    size_t dy_cols = bf16 && mlp ? 2 * F : 0;
    dy_cols = wide16 && qkv && Dqkv > dy_cols ? Dqkv : dy_cols;
    bytes[0] = (size_t)c->num_hidden_layers * ntargets * N * r * sizeof(float);
    bytes[1] = N * widest * sizeof(float);
    bytes[2] = N * r * sizeof(float);
    bytes[3] = C * sizeof(float);
    bytes[4] = N * dy_cols * sizeof(float);
    bytes[5] = l->dropout > 0.0 ? N * (C > F ? C : F) * sizeof(float) : 0; /* lora_xd: inputs C or F wide */
    size_t total = 0;
    for (int i = 0; i < ZT_LORA_BUFS; i++) {
        bytes[i] += !bytes[i]; /* none needed: one byte, so every buffer exists */
        total += bytes[i];
    }
    return total;
}

size_t zt_model_lora_activation_bytes(const zt_llama_config *cfg, int B, int T, const zt_lora *l, zt_dtype compute,
                                      int act16)
{
    size_t bytes[ZT_LORA_BUFS];
    return lora_sizes(cfg, B * T, l, compute, act16, bytes);
}

int zt_model_set_lora(zt_model *m, const zt_lora *l, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    if (!m->lay->lora_index || m->lora_on)
        return zt_fail(err, ZT_EINPUT, "LoRA: the layout holds no adapter units (zt_lora_layout), or the model "
                       "has its adapters already");
    if (!m->be->scale_add)
        return zt_fail(err, ZT_EINPUT, "LoRA: the %s device's table has no scale_add entry yet (the cpu, emu and cuda "
                       "tables have it)", m->be->name);
    m->lora = *l;
    lora_sizes(c, m->N, l, m->own.compute, m->act16, m->lora_bytes);
    float **bufs[ZT_LORA_BUFS] = {&m->lora_t, &m->lora_u, &m->lora_dt, &m->lora_dw, &m->lora_dy, &m->lora_xd};
    for (int i = 0; i < ZT_LORA_BUFS; i++) {
        if (!(*bufs[i] = m->be->alloc(ZT_MEM_ACTIV, m->lora_bytes[i])))
            return zt_fail(err, ZT_EFAIL, "out of memory for LoRA's activations (B=%d, T=%d)", m->B, m->T);
        m->act_bytes += m->lora_bytes[i];
    }
    m->lora_on = 1;
    return ZT_OK;
}

int zt_model_set_positions(zt_model *m, const int *pos, zt_err *err)
{
    const zt_backend *be = m->be;
    if (pos && (!be->rope_forward_pos || !be->rope_backward_pos || !be->attention_forward_pos ||
                !be->attention_backward_pos))
        return zt_fail(err, ZT_EINPUT, "packed examples (--padding_free): the %s device's %s kernels do not "
                       "take positions yet (the exact kernels of the cpu, emu and cuda devices do)", be->name,
                       be->kernels == ZT_KERNELS_FAST ? "fast" : "exact");
    if (pos && m->act16)
        return zt_fail(err, ZT_EINPUT, "packed examples (--padding_free): the bf16-activation attention "
                       "(fast kernels with bf16 compute) does not take positions yet; use the exact kernels");
    m->pos = pos;
    return ZT_OK;
}

void zt_model_free(zt_model *m)
{
    act_buf *bufs = m->bufs;
    for (int i = 0; bufs && i < m->nbufs; i++)
        if (bufs[i].p)
            m->be->free(ZT_MEM_ACTIV, bufs[i].p, bufs[i].bytes);
    zt_free(ZT_MEM_OTHER, m->bufs, (size_t)m->nbufs * sizeof(act_buf));
    if (m->dnT_own_bytes)
        m->be->free(ZT_MEM_ACTIV, m->dnT, m->dnT_own_bytes);
    if (m->logits_own_bytes)
        m->be->free(ZT_MEM_ACTIV, m->logits, m->logits_own_bytes);
    if (m->layers)
        zt_free(ZT_MEM_OTHER, m->layers, ((size_t)m->cfg.num_hidden_layers + 1) * sizeof *m->layers);
    float *lora_bufs[ZT_LORA_BUFS] = {m->lora_t, m->lora_u, m->lora_dt, m->lora_dw, m->lora_dy, m->lora_xd};
    for (int i = 0; i < ZT_LORA_BUFS; i++)
        if (lora_bufs[i])
            m->be->free(ZT_MEM_ACTIV, lora_bufs[i], m->lora_bytes[i]);
    memset(m, 0, sizeof *m);
}

const float *zt_model_logits(const zt_model *m) { return m->logits; }

/* ---- parameter views ---------------------------------------------------- */

typedef struct layer_weights {
    const void *attn_norm, *qkv, *o, *mlp_norm, *gu, *down; /* compute dtype */
    const void *qkv_b;                                      /* b_qkv, NULL without qkv_bias */
} layer_weights;

typedef struct layer_grads {
    float *attn_norm, *qkv, *o, *mlp_norm, *gu, *down; /* fp32 staging */
    float *qkv_b;
    float beta; /* 0: the unit's buffer is fresh, each gradient's one write overwrites; 1: adds */
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
    /* likewise q's bias view is b_qkv */
    return (layer_weights){view(m, base, l, ZT_P_ATTN_NORM), view(m, base, l, ZT_P_Q),
                           view(m, base, l, ZT_P_O),         view(m, base, l, ZT_P_MLP_NORM),
                           view(m, base, l, ZT_P_GATE),      view(m, base, l, ZT_P_DOWN),
                           m->cfg.qkv_bias ? view(m, base, l, ZT_P_Q_BIAS) : NULL};
}

static layer_grads layer_grad_views(const zt_model *m, float *base, float beta, int l)
{
    if (!base) /* LoRA: the base is frozen, no gradient of its own */
        return (layer_grads){0};
    return (layer_grads){grad_view(m, base, l, ZT_P_ATTN_NORM),
                         grad_view(m, base, l, ZT_P_Q),
                         grad_view(m, base, l, ZT_P_O),
                         grad_view(m, base, l, ZT_P_MLP_NORM),
                         grad_view(m, base, l, ZT_P_GATE),
                         grad_view(m, base, l, ZT_P_DOWN),
                         m->cfg.qkv_bias ? grad_view(m, base, l, ZT_P_Q_BIAS) : NULL,
                         beta};
}

/* A norm weight in fp32, as the norm kernels take it: w itself with fp32 compute, else
 * its fp32 copy in slot k of norm_w (2 l: layer l's attention norm, 2 l + 1 its MLP
 * norm, 2 L the final norm), converted when the forward pass meets it (fresh) and
 * reused by the backward and a checkpointed layer's recomputation: the weights do not
 * change within a pass, nor between a step's micro-batches (zt_model_keep_norm_weights:
 * a later micro-batch's forward is not fresh). */
static const float *norm_weight(zt_model *m, const void *w, int k, int fresh)
{
    if (m->own.compute == ZT_F32)
        return w;
    float *dst = m->norm_w + (size_t)k * m->cfg.hidden_size;
    if (fresh)
        m->be->convert(dst, ZT_F32, w, m->own.compute, (size_t)m->cfg.hidden_size);
    return dst;
}

/* ---- the parameter owner's hooks (param_owner.h) -------------------------- */

static const void *acquire(zt_model *m, int unit, zt_pass pass)
{
    return m->own.ops->acquire(m->own.ctx, unit, pass);
}
static void release(zt_model *m, int unit) { m->own.ops->release(m->own.ctx, unit); }
/* The unit's gradient buffer, and in *beta how its first write goes: 0 where the owner
 * hands it out fresh (param_owner.h: overwritten, the padding already zeros), 1 where
 * it holds a sum to add onto.  Each gradient is written once per pass, so its one
 * product takes *beta; the embedding's, written twice when tied, is the exception
 * (model_pass). */
static float *grad_begin(zt_model *m, int unit, float *beta)
{
    int fresh = 0;
    float *g = m->own.ops->grad_begin(m->own.ctx, unit, &fresh);
    *beta = fresh ? 0.0f : 1.0f;
    return g;
}
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
    int rc = m->be->matmul(y, x, m->opd, w, c, m->N, out, in, 0, 1, beta, c, err);
    progress(m);
    return rc;
}

/* y = residual + x W^T (fp32): the residual add in the product's epilogue, so no copy
 * of the residual stream goes first (the exact tables: that copy, then the product
 * with beta 1, as before; the fast CUDA table: cuBLASLt's beta 1 with C = residual). */
static int linear_residual(zt_model *m, float *y, const float *residual, const void *x, const void *w, int out,
                           int in, zt_err *err)
{
    zt_dtype c = m->own.compute;
    int rc = m->be->matmul_out(y, ZT_F32, residual, x, m->opd, w, c, m->N, out, in, 0, 1, c, err);
    progress(m);
    return rc;
}

/* dx = dy W (overwrite), dW = dw_beta dW + dy^T x (dw NULL: a frozen W, none); dy and x
 * in the operand dtype. */
static int linear_backward(zt_model *m, float *dx, float *dw, float dw_beta, const void *dy, const void *x,
                           const void *w, int out, int in, zt_err *err)
{
    zt_dtype c = m->own.compute;
    int rc = m->be->matmul(dx, dy, m->opd, w, c, m->N, in, out, 0, 0, 0.0f, c, err);
    progress(m);
    if (rc == ZT_OK && dw)
        rc = m->be->matmul(dw, dy, m->opd, x, m->opd, out, in, m->N, 1, 0, dw_beta, c, err);
    progress(m);
    return rc;
}

/* The beta of a norm weight's gradient: the unit's, or 0 where the weight is frozen
 * (LoRA) and dw goes to a scratch that nothing reads (stored, never read either). */
static float norm_dw_beta(const float *g, float beta)
{
    return g ? beta : 0.0f;
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

/* ---- the attention and the MLP's gate, in fp32 or bf16 activations ------ */

/* qkv = n1 Wqkv^T [+ b], RoPE, att = attention(qkv).  With bf16 activations the product
 * writes the bf16 qkv16 itself, its bias added in the product before the one rounding
 * (linear_act16: autocast's bf16 linear output), and the attention rotates q and k as it
 * reads them (its tile loads on the GPU), writing att16 only: no RoPE pass, and no fp32
 * qkv is ever written. */
static int attention_forward(zt_model *m, int l, const void *abase, zt_layer_acts *a, const layer_weights *w,
                             zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    int N = m->N, C = c->hidden_size, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    int hd = c->head_dim, Dqkv = (nh + 2 * nkv) * hd, window = zt_llama_attention_window(c);
    zt_dtype cd = m->own.compute;
    if (m->act16) {
        int rc = m->be->linear_act16(a->qkv16, a->n1, m->opd, w->qkv, cd, w->qkv_b, cd, N, Dqkv, C, cd, err);
        progress(m);
        if (rc == ZT_OK) /* the adapters add to the product before RoPE, as in fp32 below */
            rc = llama_lora_forward16(m, l, abase, a->qkv16, (size_t)Dqkv, a->n1, 1, err);
        if (rc == ZT_OK)
            m->be->attention_forward_act16(a->att16, a->lse, a->qkv16, m->rope_cos, m->rope_sin, m->attn_pack, m->B,
                                           m->T, nh, nkv, hd, window);
        return rc;
    }
    int rc = linear_forward(m, a->qkv, a->n1, w->qkv, Dqkv, C, 0.0f, err);
    if (rc)
        return rc;
    if (w->qkv_b) /* nn.Linear's bias, added to the product before RoPE */
        m->be->bias_forward(a->qkv, w->qkv_b, cd, N, Dqkv);
    if (m->lora_on &&
        (rc = llama_lora_qkv(m, l, abase, NULL, 1.0f, a->qkv, NULL, a->n1, err))) /* PEFT: base(x) + s u */
        return rc;
    if (m->pos) {
        m->be->rope_forward_pos(a->qkv, m->rope_cos, m->rope_sin, m->pos, m->B, m->T, nh, nkv, hd);
        m->be->attention_forward_pos(a->att, a->att16, a->lse, a->qkv, m->attn_pack, m->pos, m->B, m->T, nh, nkv,
                                     hd, window);
        return ZT_OK;
    }
    m->be->rope_forward(a->qkv, m->rope_cos, m->rope_sin, m->B, m->T, nh, nkv, hd);
    m->be->attention_forward(a->att, a->att16, a->lse, a->qkv, m->attn_pack, m->B, m->T, nh, nkv, hd, window);
    return ZT_OK;
}

/* gu = n2 Wgu^T, act = swiglu(gu).  With bf16 activations the product writes gu in
 * bf16 (matmul_out: the fp32 sum rounded once, autocast's bf16 linear output) and
 * SwiGLU reads it there. */
static int swiglu_forward(zt_model *m, int l, const void *abase, zt_layer_acts *a, const layer_weights *w,
                          zt_err *err)
{
    int N = m->N, C = m->cfg.hidden_size, F = m->cfg.intermediate_size;
    zt_dtype c = m->own.compute;
    if (!m->act16) {
        int rc = linear_forward(m, a->gu, a->n2, w->gu, 2 * F, C, 0.0f, err);
        if (rc == ZT_OK)
            rc = llama_lora_forward(m, l, abase, ZT_P_GATE, a->gu, 2 * (size_t)F, a->n2, err);
        if (rc == ZT_OK)
            rc = llama_lora_forward(m, l, abase, ZT_P_UP, a->gu + F, 2 * (size_t)F, a->n2, err);
        if (rc == ZT_OK)
            m->be->swiglu_forward(a->act, m->opd, a->gu, N, F);
        return rc;
    }
    int rc = m->be->matmul_out(a->gu16, ZT_BF16, NULL, a->n2, m->opd, w->gu, c, N, 2 * F, C, 0, 1, c, err);
    progress(m);
    if (rc == ZT_OK)
        rc = llama_lora_forward16(m, l, abase, a->gu16, 2 * (size_t)F, a->n2, 0, err);
    if (rc == ZT_OK)
        m->be->swiglu_forward_act16(a->act, a->gu16, N, F);
    return rc;
}

/* ---- one decoder layer --------------------------------------------------- */

/* fresh: the forward pass (the norm weights' fp32 copies made); else the recomputation
 * of a checkpointed layer in the backward */
static int layer_forward(zt_model *m, int l, const void *base, const void *abase, int fresh, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    zt_layer_acts *a = &m->layers[l];
    float *out = m->layers[l + 1].x;
    int N = m->N, C = c->hidden_size, F = c->intermediate_size, nh = c->num_attention_heads;
    int Dq = nh * c->head_dim;
    float eps = (float)c->rms_norm_eps;
    layer_weights w = layer_views(m, base, l);
    int rc;

    m->be->rmsnorm_forward(a->n1, m->opd, a->rstd1, a->x, norm_weight(m, w.attn_norm, 2 * l, fresh), N, C, eps);
    if ((rc = attention_forward(m, l, abase, a, &w, err)))
        return rc;
    /* LoRA's o and down parts are added after the residual: x + (att Wo^T) then + s u,
     * where PEFT adds s u first; the sums' order differs, within fp32 rounding */
    if ((rc = linear_residual(m, a->h, a->x, att_operand(a), w.o, C, Dq, err)) ||
        (rc = llama_lora_forward(m, l, abase, ZT_P_O, a->h, (size_t)C, att_operand(a), err)))
        return rc;
    m->be->rmsnorm_forward(a->n2, m->opd, a->rstd2, a->h, norm_weight(m, w.mlp_norm, 2 * l + 1, fresh), N, C, eps);
    if ((rc = swiglu_forward(m, l, abase, a, &w, err)))
        return rc;
    if ((rc = linear_residual(m, out, a->h, a->act, w.down, C, F, err)))
        return rc;
    return llama_lora_forward(m, l, abase, ZT_P_DOWN, out, (size_t)C, a->act, err);
}

/* On entry m->dres (and m->dres16) hold d loss / d out; on exit d loss / d x.  LoRA: gbase
 * NULL (the base frozen), abase and gabase the adapter unit's weights and gradient; gbeta and
 * gabeta 0 where those buffers are fresh (the step's first write), 1 where they hold a sum.
 * Dtypes of the input gradients (with bf16 operands): a bf16 operand that is a kernel's
 * output is written in bf16 by that kernel (dgu by SwiGLU's backward, dqkv16 by the act16
 * attention's, dres16 beside dres by the norm's, the lm-head's chunk by its loss; with
 * fp32 activations RoPE's backward and the bias's sums read dqkv in fp32 first), and
 * each product's dX stays fp32 because a consumer computes with it, not only converts
 * it: dact, SwiGLU's backward (dh in its arithmetic: a bf16 dact would round it first,
 * autocast's value, not the exact table's) and the adapters' adds; datt, the attention's
 * backward, which forms D = rowsum(dO o O) from the fp32 dO (its tiles round dO for the
 * products); dn, the norm's backward, whose dx accumulates into the fp32 residual sum. */
static int layer_backward(zt_model *m, int l, const void *base, float *gbase, float gbeta, const void *abase,
                          float *gabase, float gabeta, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    zt_layer_acts *a = &m->layers[l];
    int N = m->N, C = c->hidden_size, F = c->intermediate_size, nh = c->num_attention_heads;
    int nkv = c->num_key_value_heads, hd = c->head_dim, Dq = nh * hd, Dqkv = (nh + 2 * nkv) * hd;
    layer_weights w = layer_views(m, base, l);
    layer_grads g = layer_grad_views(m, gbase, gbeta, l);
    int rc;

    float *ndw = m->lora_on ? m->lora_dw : NULL; /* LoRA: a frozen norm weight's gradient, discarded */
    size_t ldc = (size_t)C, ld2f = 2 * (size_t)F;
    /* MLP: out = h + act Wdown^T */
    if ((rc = linear_backward(m, m->dact, g.down, g.beta, dres_operand(m), a->act, w.down, C, F, err)) ||
        (rc = llama_lora_backward(m, l, abase, gabase, gabeta, ZT_P_DOWN, m->dact, m->dres, ldc, a->act, err)))
        return rc;
    if (m->act16)
        m->be->swiglu_backward_act16(m->dgu, m->dact, a->gu16, N, F);
    else
        m->be->swiglu_backward(m->dgu, m->opd, m->dact, a->gu, N, F);
    float *dgu = m->dgu; /* the adapters read fp32: bf16 operands' dgu widened (lora_sizes) */
    if (m->lora_on && m->opd == ZT_BF16 && (llama_lora_on(m, ZT_P_GATE) || llama_lora_on(m, ZT_P_UP)))
        m->be->convert(dgu = m->lora_dy, ZT_F32, m->dgu, ZT_BF16, (size_t)N * ld2f);
    if ((rc = linear_backward(m, m->dn, g.gu, g.beta, m->dgu, a->n2, w.gu, 2 * F, C, err)) ||
        (rc = llama_lora_backward(m, l, abase, gabase, gabeta, ZT_P_GATE, m->dn, dgu, ld2f, a->n2, err)) ||
        (rc = llama_lora_backward(m, l, abase, gabase, gabeta, ZT_P_UP, m->dn, dgu + F, ld2f, a->n2, err)))
        return rc;
    m->be->rmsnorm_backward(m->dres, m->dres16, 1.0f, g.mlp_norm ? g.mlp_norm : ndw, norm_dw_beta(g.mlp_norm, g.beta),
                            m->dn, a->h, norm_weight(m, w.mlp_norm, 2 * l + 1, 0), a->rstd2, N, C);
    /* attention: h = x + att Wo^T */
    if ((rc = linear_backward(m, m->datt, g.o, g.beta, dres_operand(m), att_operand(a), w.o, C, Dq, err)) ||
        (rc = llama_lora_backward(m, l, abase, gabase, gabeta, ZT_P_O, m->datt, m->dres, ldc, att_operand(a), err)))
        return rc;
    const void *dqkv = m->dqkv;
    if (m->act16) { /* RoPE's backward inside the attention's; dqkv16 written there */
        m->be->attention_backward_act16(g.qkv_b ? m->dqkv : NULL, m->dqkv16, m->datt, a->qkv16, a->att16, a->lse,
                                        m->rope_cos, m->rope_sin, m->attn_pack, m->B, m->T, nh, nkv, hd,
                                        zt_llama_attention_window(c));
        dqkv = m->dqkv16;
    } else if (m->pos) {
        m->be->attention_backward_pos(m->dqkv, m->datt, a->qkv, a->att, a->lse, m->attn_pack, m->pos, m->B, m->T,
                                      nh, nkv, hd, zt_llama_attention_window(c));
        m->be->rope_backward_pos(m->dqkv, m->rope_cos, m->rope_sin, m->pos, m->B, m->T, nh, nkv, hd);
    } else {
        m->be->attention_backward(m->dqkv, m->datt, a->qkv, a->att, a->lse, m->attn_pack, m->B, m->T, nh, nkv,
                                  hd, zt_llama_attention_window(c));
        m->be->rope_backward(m->dqkv, m->rope_cos, m->rope_sin, m->B, m->T, nh, nkv, hd);
    }
    if (g.qkv_b) { /* dqkv is now the gradient of n1 Wqkv^T + b: db = its column sums */
        m->be->bias_backward(g.qkv_b, g.beta, m->dqkv, N, Dqkv);
    }
    if (m->dqkv16 && dqkv == m->dqkv) {
        m->be->convert(m->dqkv16, ZT_BF16, m->dqkv, ZT_F32, (size_t)N * Dqkv);
        dqkv = m->dqkv16;
    }
    if ((rc = linear_backward(m, m->dn, g.qkv, g.beta, dqkv, a->n1, w.qkv, Dqkv, C, err)))
        return rc;
    float *dqkv32 = m->dqkv; /* bf16 activations: the adapters read dqkv16 widened (lora_sizes) */
    if (m->lora_on && m->act16 && (llama_lora_on(m, ZT_P_Q) || llama_lora_on(m, ZT_P_K) || llama_lora_on(m, ZT_P_V)))
        m->be->convert(dqkv32 = m->lora_dy, ZT_F32, m->dqkv16, ZT_BF16, (size_t)N * Dqkv);
    if (m->lora_on && (rc = llama_lora_qkv(m, l, abase, gabase, gabeta, dqkv32, m->dn, a->n1, err)))
        return rc;
    m->be->rmsnorm_backward(m->dres, m->dres16, 1.0f, g.attn_norm ? g.attn_norm : ndw,
                            norm_dw_beta(g.attn_norm, g.beta), m->dn, a->x, norm_weight(m, w.attn_norm, 2 * l, 0),
                            a->rstd1, N, C);
    return ZT_OK;
}

/* ---- the lm-head ------------------------------------------------------------ */

/* Fast mode's evaluation: the (N, V) logits a forward-only pass returns
 * (zt_model_logits), allocated on its first call outside the size table, since the
 * training pass never needs them. */
static int own_logits(zt_model *m, zt_err *err)
{
    size_t bytes = (size_t)m->N * (size_t)m->cfg.vocab_size * sizeof(float);
    if (!(m->logits = m->be->alloc(ZT_MEM_ACTIV, bytes)))
        return zt_fail(err, ZT_EFAIL, "out of memory for the logits (B=%d, T=%d)", m->B, m->T);
    m->logits_own_bytes = bytes;
    m->act_bytes += bytes;
    return ZT_OK;
}

/* Fast mode's lm-head and loss in one entry (lmhead_xent, xent_rows rows at a time):
 * dn = dlogits W, dW_lm = dw_beta dW_lm + dlogits^T nf, and the loss sum into loss_sink
 * (read back with the step's other numbers, so *loss_sum is 0 and nothing waits here)
 * or, without a sink, through loss_dev to *loss_sum. */
static int head_xent_fused(zt_model *m, const int *targets, const void *wlm, float *dlm, float dw_beta,
                           float grad_scale, double *loss_sum, zt_err *err)
{
    zt_dtype cd = m->own.compute;
    double *dst = m->loss_sink ? m->loss_sink : m->loss_dev;
    if (!m->loss_sink)
        m->be->zero(m->loss_dev, sizeof(double));
    int rc = m->be->lmhead_xent(dst, m->dn, dlm, dw_beta, m->nf, m->opd, wlm, cd, targets, m->N,
                                m->cfg.hidden_size, m->cfg.vocab_size, grad_scale, m->grad_scale_src, cd,
                                m->xent_rows, err);
    progress(m);
    *loss_sum = 0.0;
    if (rc == ZT_OK && !m->loss_sink)
        m->be->to_host(loss_sum, m->loss_dev, sizeof(double));
    return rc;
}

/* ---- whole model ---------------------------------------------------------- */

static int unit_of_layer(const zt_model *m, int l) { return m->lay->layer_unit[l]; }

/* LoRA: layer l is the first / last of its adapter unit. */
static int adapter_first(const zt_model *m, int l)
{
    return l == 0 || m->lay->layer_adapter_unit[l - 1] != m->lay->layer_adapter_unit[l];
}
static int adapter_last(const zt_model *m, int l)
{
    const int *au = m->lay->layer_adapter_unit;
    return l == m->cfg.num_hidden_layers - 1 || au[l + 1] != au[l];
}

/* The (N, V) logits of the final norm's output, then their cross-entropy (with
 * backward, its gradient in place of the logits, or in dlogits16). */
static int head_loss(zt_model *m, const void *wlm, const int *targets, int backward, float grad_scale,
                     double *loss_sum, zt_err *err)
{
    int rc, N = m->N, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    if (!m->logits && (rc = own_logits(m, err)))
        return rc;
    if ((rc = linear_forward(m, m->logits, m->nf, wlm, V, C, 0.0f, err)))
        return rc;
    if (backward && m->loss_sink) {
        m->be->xent_into(m->logits, m->dlogits16, m->logits, targets, N, V, grad_scale, m->grad_scale_src,
                         m->loss_sink);
        *loss_sum = 0.0;
    } else {
        *loss_sum = m->be->xent(backward ? m->logits : NULL, backward ? m->dlogits16 : NULL, m->logits, targets,
                                N, V, grad_scale);
    }
    return ZT_OK;
}

/* The lm-head's backward: dn (the final norm's output gradient) and dW into dlm (stored
 * with dw_beta 0, added with 1). */
static int head_backward(zt_model *m, const int *targets, const void *wlm, float *dlm, float dw_beta,
                         float grad_scale, double *loss_sum, zt_err *err)
{
    int rc, N = m->N, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    zt_dtype cd = m->own.compute;
    const void *dlogits = m->dlogits16 ? (const void *)m->dlogits16 : (const void *)m->logits;
    if (m->fused_head) { /* the loss, dn = dlogits W and dW += dlogits^T nf, chunk by chunk */
        rc = head_xent_fused(m, targets, wlm, dlm, dw_beta, grad_scale, loss_sum, err);
    } else if (m->head_transposed) { /* dn^T = W^T dlogits^T, dW += dlogits^T nf */
        rc = m->be->matmul(m->dnT, wlm, cd, dlogits, m->opd, C, N, V, 1, 1, 0.0f, cd, err);
        if (rc == ZT_OK) {
            m->be->transpose(m->dn, m->dnT, C, N);
            if (dlm) /* NULL: a frozen lm_head (LoRA) */
                rc = m->be->matmul(dlm, dlogits, m->opd, m->nf, m->opd, V, C, N, 1, 0, dw_beta, cd, err);
        }
    } else {
        rc = linear_backward(m, m->dn, dlm, dw_beta, dlogits, m->nf, wlm, V, C, err);
    }
    return rc;
}

/* The decoder layers' backward, last to first: a layer unit is acquired again before its
 * last layer (and, without LoRA, its gradient opened) and handed back after its first;
 * with LoRA each adapter unit likewise, its gradient the only one opened. */
static int layers_backward(zt_model *m, const void *root_base, float *groot, float groot_beta, zt_err *err)
{
    const zt_layout *lay = m->lay;
    int L = m->cfg.num_hidden_layers, root = lay->root_unit, rc;
    const void *base = NULL, *abase = NULL;
    float *gunit = NULL, *gadapter = NULL, ubeta = 1.0f, abeta = 1.0f;
    for (int l = L - 1; l >= 0; l--) {
        int u = unit_of_layer(m, l);
        int unit_first = l == 0 || unit_of_layer(m, l - 1) != u;
        int unit_last = l == L - 1 || unit_of_layer(m, l + 1) != u;
        if (u == root) {
            base = root_base;
            gunit = groot;
            ubeta = groot_beta;
        } else if (unit_last) {
            base = acquire(m, u, ZT_PASS_BACKWARD);
            gunit = m->lora_on ? NULL : grad_begin(m, u, &ubeta);
        }
        if (m->lora_on && adapter_last(m, l)) {
            abase = acquire(m, lay->layer_adapter_unit[l], ZT_PASS_BACKWARD);
            gadapter = grad_begin(m, lay->layer_adapter_unit[l], &abeta);
        }
        if (m->checkpointing && (rc = layer_forward(m, l, base, abase, 0, err)))
            return rc;
        if ((rc = layer_backward(m, l, base, gunit, ubeta, abase, gadapter, abeta, err)))
            return rc;
        if (m->lora_on && adapter_first(m, l)) {
            grad_end(m, lay->layer_adapter_unit[l]);
            release(m, lay->layer_adapter_unit[l]);
        }
        if (u != root && unit_first) {
            if (gunit)
                grad_end(m, u);
            release(m, u);
        }
    }
    return ZT_OK;
}

/* One micro-batch's forward and, with backward, backward; an error returns with
 * units still acquired, which pass_or_reset hands back. */
static int model_pass(zt_model *m, const int *inputs, const int *targets, int backward,
                      float grad_scale, double *loss_sum, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    const zt_layout *lay = m->lay;
    int L = c->num_hidden_layers, C = c->hidden_size, N = m->N;
    int root = lay->root_unit, rc = ZT_OK;
    zt_dtype cd = m->own.compute;
    size_t es = zt_dtype_size(cd);
    const int fresh = !m->norm_w_kept; /* the fp32 norm weights made in this pass */
    m->norm_w_kept = 0;

    /* the profiler's phases (core/prof.h; nothing when no profile is recording) */
    int hf = zt_prof_begin("forward", "phase", ZT_PROF_COMPUTE);
    const void *root_base = acquire(m, root, ZT_PASS_FORWARD);
    const zt_param *pe = zt_layout_param(lay, -1, ZT_P_EMBED);
    const zt_param *plm = zt_layout_param(lay, -1, ZT_P_LM_HEAD);
    if (!plm)
        plm = pe; /* tied: lm_head is embed_tokens */
    const void *wte = (const char *)root_base + pe->offset * es;
    const void *wlm = (const char *)root_base + plm->offset * es;
    const void *wnorm = (const char *)root_base + zt_layout_param(lay, -1, ZT_P_FINAL_NORM)->offset * es;

    m->be->embed_forward(m->layers[0].x, wte, cd, inputs, N, C);
    /* A layer unit is acquired before its first layer and released after its
     * last (stage 3 gathers it then and frees it after). */
    const void *base = NULL, *abase = NULL;
    for (int l = 0; l < L; l++) {
        int u = unit_of_layer(m, l);
        if (u == root)
            base = root_base;
        else if (l == 0 || unit_of_layer(m, l - 1) != u)
            base = acquire(m, u, ZT_PASS_FORWARD);
        if (m->lora_on && adapter_first(m, l)) /* with its base unit (never the root: adapters are layers') */
            abase = acquire(m, lay->layer_adapter_unit[l], ZT_PASS_FORWARD);
        if ((rc = layer_forward(m, l, base, abase, fresh, err)))
            return rc;
        if (m->lora_on && adapter_last(m, l))
            release(m, lay->layer_adapter_unit[l]);
        if (u != root && (l == L - 1 || unit_of_layer(m, l + 1) != u))
            release(m, u);
    }
    m->be->rmsnorm_forward(m->nf, m->opd, m->rstdf, m->layers[L].x, norm_weight(m, wnorm, 2 * L, fresh), N, C,
                       (float)c->rms_norm_eps);
    if (!(backward && m->fused_head) && (rc = head_loss(m, wlm, targets, backward, grad_scale, loss_sum, err)))
        return rc;
    zt_prof_end(hf, 0.0, 0.0);
    if (!backward) {
        release(m, root);
        return ZT_OK;
    }

    /* Backward.  The root unit's gradient stays open from lm_head to embed; with LoRA the
     * base units take none, and each adapter unit's is open with its base unit. */
    int hb = zt_prof_begin("backward", "phase", ZT_PROF_COMPUTE);
    float gbeta = 1.0f;
    float *groot = m->lora_on ? NULL : grad_begin(m, root, &gbeta);
    float *dlm = groot ? groot + plm->offset : NULL;
    if ((rc = head_backward(m, targets, wlm, dlm, gbeta, grad_scale, loss_sum, err)))
        return rc;
    /* the residual stream's gradient starts here: the final norm's dx is its first
     * write (dx_beta 0 stores), and each layer's norms add to it */
    float *dwf = groot ? groot + zt_layout_param(lay, -1, ZT_P_FINAL_NORM)->offset : NULL;
    m->be->rmsnorm_backward(m->dres, m->dres16, 0.0f, dwf ? dwf : m->lora_dw, norm_dw_beta(dwf, gbeta), m->dn,
                            m->layers[L].x, norm_weight(m, wnorm, 2 * L, 0), m->rstdf, N, C);
    if ((rc = layers_backward(m, root_base, groot, gbeta, err)))
        return rc;
    if (groot) {
        /* untied, the table's first write takes gbeta (0: every row written, none
         * cleared first); tied, the lm-head's product wrote it first and the
         * embedding's rows add to it */
        m->be->embed_backward(groot + pe->offset, m->dres, inputs, N, C, m->cfg.vocab_size,
                              plm != pe ? gbeta : 1.0f);
        grad_end(m, root);
    }
    release(m, root);
    zt_prof_end(hb, 0.0, 0.0);
    return ZT_OK;
}

size_t zt_model_activation_bytes_in(const zt_llama_config *cfg, int B, int T, int checkpointing, zt_dtype compute,
                                    zt_kernel_mode kernels, int act16)
{
    zt_model shapes;
    memset(&shapes, 0, sizeof shapes);
    /* sizes a table states: the CPU's for exact mode; for fast mode the emulated
     * device's fast table, whose attention scratch is the GPU fast table's (backend.h's rule) */
    const zt_backend *be = kernels == ZT_KERNELS_FAST ? zt_backend_emu_fast() : zt_backend_cpu();
    set_shapes(&shapes, cfg, be, compute, B, T, checkpointing, kernels, act16);
    size_t total;
    act_table(&shapes, NULL, &total);
    return total;
}

size_t zt_model_activation_bytes(const zt_llama_config *cfg, int B, int T, int checkpointing,
                                 zt_dtype compute)
{
    return zt_model_activation_bytes_in(cfg, B, T, checkpointing, compute, ZT_KERNELS_EXACT, 0);
}

double zt_model_flops_per_token(const zt_llama_config *c, int T, int checkpointing)
{
    double C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    double nh = c->num_attention_heads, nkv = c->num_key_value_heads, V = c->vocab_size;
    double per_layer = C * (nh + 2 * nkv) * hd + nh * hd * C + 3 * C * F; /* matrix weights */
    double matrix = c->num_hidden_layers * per_layer + V * C;            /* + lm_head */
    /* causal attention: q k^T and p v, 2 flops per MAC, over the keys each query sees
     * on average: (T + 1) / 2 without a window; with window w < T, query i sees
     * min(i + 1, w) keys, which averages w - w (w - 1) / (2 T) */
    double w = zt_llama_attention_window(c), keys = (T + 1) / 2.0;
    if (w > 0 && w < T)
        keys = w - w * (w - 1) / (2.0 * T);
    double attn = c->num_hidden_layers * 2.0 * 2.0 * nh * hd * keys;
    double fwd = 2.0 * matrix + attn;
    /* backward is twice the forward; checkpointing recomputes the layers' forward */
    double layers_fwd = 2.0 * c->num_hidden_layers * per_layer + attn;
    return 3.0 * fwd + (checkpointing ? layers_fwd : 0.0);
}

/* A failed pass hands every unit back to the owner (its reset). */
static int pass_or_reset(zt_model *m, const int *inputs, const int *targets, int backward,
                         float grad_scale, double *loss_sum, zt_err *err)
{
    m->lora_train = backward;
    int rc = model_pass(m, inputs, targets, backward, grad_scale, loss_sum, err);
    if (rc)
        m->own.ops->reset(m->own.ctx);
    return rc;
}

void zt_model_keep_norm_weights(zt_model *m) { m->norm_w_kept = 1; }

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
