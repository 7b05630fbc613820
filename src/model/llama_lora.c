/* llama_lora.c — LoRA's adapters beside the frozen projections of the Llama model
 * (llama.c calls these where a targeted projection runs; lora.h holds the adapter's
 * own products, this file where they sit in a layer: which projection, which columns of
 * q|k|v or gate|up, the dropout's key for the step).  Split from llama.c, whose passes
 * call them; the model's state is llama.h's zt_model. */
#include "llama_lora.h"

#include "../core/rng.h"
#include "../kernels/backend.h"

/* ---- LoRA's adapters beside the frozen projections (lora.h) --------------- */

static int lora_targets(const zt_model *m) { return __builtin_popcount(m->lora.targets); }

/* The adapter's A (b 0) or B (b 1) of projection `kind` in layer l. */
static const zt_param *lora_param(const zt_model *m, int l, zt_param_kind kind, int b)
{
    return &m->lay->params[m->lay->lora_index[((size_t)l * ZT_P_NKINDS + kind) * 2 + (size_t)b]];
}

/* Layer l's t = x A^T of projection kind: its block among the layer's targets. */
static float *lora_t(const zt_model *m, int l, zt_param_kind kind)
{
    size_t slot = (size_t)__builtin_popcount(m->lora.targets & ((1u << kind) - 1u));
    return m->lora_t + ((size_t)l * (size_t)lora_targets(m) + slot) * (size_t)m->N * (size_t)m->lora.r;
}

void zt_model_set_lora_batch(zt_model *m, uint64_t seed, long step, long first_sample)
{
    uint64_t s = seed; /* two splitmix64 rounds: the step's key from the run's seed */
    s = zt_rand_next(&s) ^ (uint64_t)step;
    m->lora_key = zt_rand_next(&s);
    m->lora_row0 = (int64_t)first_sample * m->T;
}

static zt_lora_linear lora_linear(const zt_model *m, int l, const void *abase, zt_param_kind kind, size_t ld)
{
    const zt_param *pa = lora_param(m, l, kind, 0), *pb = lora_param(m, l, kind, 1);
    size_t es = zt_dtype_size(m->own.compute);
    uint64_t key = (m->lora_key ^ ((uint64_t)l * ZT_P_NKINDS + (uint64_t)kind)); /* a third round: the linear's */
    key = zt_rand_next(&key);
    return (zt_lora_linear){m->be,
                            m->own.compute,
                            m->N,
                            (int)pb->shape[0],
                            (int)pa->shape[1],
                            m->lora.r,
                            (float)zt_lora_scale(&m->lora),
                            (const char *)abase + pa->offset * es,
                            (const char *)abase + pb->offset * es,
                            ld,
                            m->opd,
                            m->lora_train ? (float)m->lora.dropout : 0.0f,
                            key,
                            m->lora_row0,
                            m->lora_xd,
                            0};
}

int llama_lora_on(const zt_model *m, zt_param_kind kind)
{
    return m->lora_on && (m->lora.targets >> kind & 1u);
}

/* y's columns (rows ld apart) += the adapter's part of projection kind of layer l, where
 * it is targeted; x (in the operand dtype) its input. */
int llama_lora_forward(zt_model *m, int l, const void *abase, zt_param_kind kind, float *y, size_t ld,
                        const void *x, zt_err *err)
{
    if (!llama_lora_on(m, kind))
        return ZT_OK;
    zt_lora_linear ll = lora_linear(m, l, abase, kind, ld);
    int rc = zt_lora_forward(&ll, y, lora_t(m, l, kind), m->lora_u, x, err);
    m->own.ops->progress(m->own.ctx);
    return rc;
}

/* dx += the adapter's input gradient, and its dA, dB into the adapter unit's gradient
 * gabase, from dy's columns (rows ld apart). */
int llama_lora_backward(zt_model *m, int l, const void *abase, float *gabase, float gabeta,
                         zt_param_kind kind, float *dx, const void *dy, size_t ld, const void *x, zt_err *err)
{
    if (!llama_lora_on(m, kind))
        return ZT_OK;
    zt_lora_linear ll = lora_linear(m, l, abase, kind, ld);
    ll.grad_fresh = gabeta == 0.0f;
    int rc = zt_lora_backward(&ll, dx, gabase + lora_param(m, l, kind, 0)->offset,
                              gabase + lora_param(m, l, kind, 1)->offset, m->lora_u, m->lora_dt, dy, x,
                              lora_t(m, l, kind), err);
    m->own.ops->progress(m->own.ctx);
    return rc;
}

/* q, k and v's adapters, on their blocks of qkv (N, Dqkv) or dqkv: forward (gabase NULL)
 * or backward (dx, the input gradient, += theirs). */
int llama_lora_qkv(zt_model *m, int l, const void *abase, float *gabase, float gabeta, float *qkv, float *dx,
                    const void *x, zt_err *err)
{
    const zt_llama_config *c = &m->cfg;
    size_t Dq = (size_t)c->num_attention_heads * c->head_dim, Dkv = (size_t)c->num_key_value_heads * c->head_dim;
    size_t ld = Dq + 2 * Dkv, col[3] = {0, Dq, Dq + Dkv};
    static const zt_param_kind kinds[3] = {ZT_P_Q, ZT_P_K, ZT_P_V};
    int rc = ZT_OK;
    for (int i = 0; i < 3 && rc == ZT_OK; i++)
        rc = gabase ? llama_lora_backward(m, l, abase, gabase, gabeta, kinds[i], dx, qkv + col[i], ld, x, err)
                    : llama_lora_forward(m, l, abase, kinds[i], qkv + col[i], ld, x, err);
    return rc;
}

/* With bf16 activations the base's q|k|v and gate|up products are written in bf16 (qkv16,
 * gu16): the adapters' s u is added to that output widened to fp32 in lora_dy (exact) and
 * rounded back to bf16 once, as PEFT's base(x) + s u under autocast adds to the base's
 * bf16 output (PEFT rounds s u to bf16 before its bf16 add; this rounds the fp32 sum).
 * With B = 0 (the first step) the round trip is exact: the base's bits.  qkv: y16 is
 * q|k|v's product (N, Dqkv), else gate|up's (N, 2F). */
int llama_lora_forward16(zt_model *m, int l, const void *abase, void *y16, size_t cols, const void *x, int qkv,
                          zt_err *err)
{
    unsigned bits = qkv ? (1u << ZT_P_Q | 1u << ZT_P_K | 1u << ZT_P_V) : (1u << ZT_P_GATE | 1u << ZT_P_UP);
    if (!m->lora_on || !(m->lora.targets & bits))
        return ZT_OK;
    size_t n = (size_t)m->N * cols, F = (size_t)m->cfg.intermediate_size;
    float *y = m->lora_dy;
    m->be->convert(y, ZT_F32, y16, ZT_BF16, n);
    int rc = qkv ? llama_lora_qkv(m, l, abase, NULL, 1.0f, y, NULL, x, err)
                 : llama_lora_forward(m, l, abase, ZT_P_GATE, y, cols, x, err);
    if (rc == ZT_OK && !qkv)
        rc = llama_lora_forward(m, l, abase, ZT_P_UP, y + F, cols, x, err);
    if (rc == ZT_OK)
        m->be->convert(y16, ZT_BF16, y, ZT_F32, n);
    return rc;
}
