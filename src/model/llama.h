/* llama.h — the Llama decoder (HF LlamaForCausalLM) forward and backward on one
 * micro-batch of B sequences of T tokens (N = B*T rows).
 *
 * The model owns activations only; parameters come from their owner through
 * acquire/release of units, and weight gradients go back through the owner's
 * grad_begin/grad_end (param_owner.h), so the same code runs replicated, sharded
 * or on a frozen copy of the weights. */
#ifndef ZT_LLAMA_H
#define ZT_LLAMA_H

#include "../core/status.h"
#include "../kernels/rope_freq.h"
#include "config.h"
#include "layout.h"
#include "lora.h"
#include "param_owner.h"

/* Buffers that only feed matrix products (norm outputs, the SwiGLU output, the
 * gradients entering a product) are stored in the model's operand dtype `opd`:
 * bf16 when the compute dtype is bf16, so the kernels that produce them write the
 * products' bf16 inputs directly and no product converts an operand; fp32 otherwise
 * (fp16 compute keeps fp32 operands, which the product rounds). */
typedef struct zt_layer_acts {
    float *x;            /* (N, C) layer input: kept even with checkpointing */
    void *n1;            /* attention RMSNorm output (N, C), opd */
    float *rstd1;        /* its 1/rms (N) */
    float *qkv;          /* (N, (nh+2nkv)*hd) after RoPE */
    float *att, *lse;    /* (N, nh*hd), (B, nh, T) */
    uint16_t *att16;     /* bf16 copy of att for the output projection, when opd is bf16 */
    float *h;            /* (N, C) residual after attention */
    void *n2;            /* MLP RMSNorm output (N, C), opd */
    float *rstd2;
    float *gu;           /* (N, 2F) gate | up */
    void *act;           /* (N, F) silu(gate) * up, opd */
    /* bf16 activations (act16 below): qkv as its product wrote it (before RoPE, which the
     * attention applies as it reads q and k) and gate | up in bf16, in place of
     * qkv and gu, and the attention output in att16 only (att is then NULL) */
    uint16_t *qkv16, *gu16;
} zt_layer_acts;

typedef struct zt_model {
    zt_llama_config cfg;
    const zt_layout *lay;
    zt_param_owner own;      /* who holds the parameters (a copy of the table) */
    int B, T, N;
    int checkpointing;       /* keep only layer inputs; recompute a layer in backward */
    zt_dtype opd;            /* dtype of the buffers that only feed matrix products */
    /* bf16 activations: fast kernels with bf16 compute keep qkv, the attention output
     * and gate | up in bf16, as autocast does (the residual stream, RMSNorm's arithmetic
     * and every gradient but the products' operands stay fp32); docs/gpu.md */
    int act16;
    zt_layer_acts *layers;   /* L + 1 entries; layers[L].x is the last layer's output */
    void *nf;                /* final norm output (N, C), opd */
    float *rstdf;            /* its 1/rms (N) */
    float *logits;           /* (N, V), reused in place for dlogits; fast mode: NULL until a
                              * forward-only pass (evaluation) needs it (logits_own_bytes) */
    uint16_t *dlogits16;     /* (N, V) bf16 dlogits, when opd is bf16 */
    float *dres, *dn, *dqkv, *datt, *dact; /* backward scratch, fp32 */
    void *dgu;                             /* (N, 2F) SwiGLU input gradient, opd */
    uint16_t *dres16, *dqkv16; /* bf16 copies of dres and dqkv, when opd is bf16 */
    void *attn_pack;         /* bf16 K/V scratch of the bf16-operand attention, or NULL */
    const int *pos;          /* packed examples: (B, T) positions inside each example, or NULL */
    int head_transposed;     /* lm_head's input gradient as a transposed product (see llama.c) */
    float *dnT;              /* (C, N) its result before the transpose, when head_transposed */
    float *rope_cos, *rope_sin;                  /* (T, hd/2) */
    float *norm_w;           /* (2 L + 1, C) fp32 copies of the norm weights when compute is not fp32 */
    int norm_w_kept;         /* the next pass reuses norm_w as made (zt_model_keep_norm_weights) */
    int *targets_scratch;
    size_t act_bytes;        /* total bytes of activation buffers (ZT_MEM_ACTIV) */
    const zt_backend *be;    /* the owner's backend: every kernel runs through it */
    void *bufs;              /* internal: the size table's entries, with their allocations */
    int nbufs;
    size_t dnT_own_bytes;    /* dnT allocated outside the table (set_head_transposed), else 0 */
    /* a device double (the backend's) that the backward's cross-entropy adds its loss
     * sum to, without waiting for the device (the fast mode's asynchronous step,
     * engine.h: zt_engine_loss_sink); *loss_sum is then 0.  NULL: returned as usual. */
    double *loss_sink;
    /* Fast mode's training step (engine.h: zt_engine_grad_scale_src): the device's
     * step scalars, from which the backward's cross-entropy (xent_into, lmhead_xent)
     * forms its gradient scale on the device (the step's count of targets times the
     * loss scale it runs at; backend.h, xent_into), so that a pass queued before the
     * step before is read back, or replayed from a graph, takes the step's own; the
     * grad_scale argument is then ignored there.  NULL: the argument. */
    const zt_step_scalars *grad_scale_src;
    /* Fast mode (the backend's kernels ZT_KERNELS_FAST): the training pass computes its
     * loss and the lm-head's gradients with lmhead_xent, xent_rows rows at a time, so
     * the (N, V) logits are not among its activations (tests may lower xent_rows, at
     * least 1, to cross chunk boundaries).  loss_dev: a device double for the loss
     * when there is no loss_sink. */
    int fused_head, xent_rows;
    double *loss_dev;
    size_t logits_own_bytes; /* logits allocated outside the table (fast mode's evaluation), else 0 */
    /* LoRA (zt_model_set_lora; docs/lora.md): the adapters' settings, t = x A^T of every
     * layer's targets (L x ntargets blocks of N x r, kept for the backward), the scratch u
     * (N x the widest output), dt (N x r), and the frozen norm weights' gradient, discarded
     * (C), and with bf16 operands the gate|up gradient in fp32 (N x 2F, where gate or up is
     * a target); lora_bytes: those allocations' sizes */
    int lora_on;
    zt_lora lora;
    float *lora_t, *lora_u, *lora_dt, *lora_dw, *lora_dy;
    /* with adapter dropout (lora.dropout > 0): lora_xd, the dropped input or dt A (N x the
     * widest input); lora_key and lora_row0, the micro-batch's (zt_model_set_lora_batch) */
    float *lora_xd;
    int lora_train; /* the pass is a training one (with its backward): dropout's only place */
    uint64_t lora_key;
    int64_t lora_row0;
#define ZT_LORA_BUFS 6
    size_t lora_bytes[ZT_LORA_BUFS];
} zt_model;

/* RoPE's frequencies as the config asks for them: rope_theta and, for Llama 3.1's
 * rope_scaling, its four numbers (kernels/rope_freq.h). */
zt_rope_freqs zt_model_rope_freqs(const zt_llama_config *cfg);

/* The operand dtype for a compute dtype (see zt_layer_acts). */
zt_dtype zt_model_operand_dtype(zt_dtype compute);

/* owner is copied; what it points to must outlive the model. */
int zt_model_init(zt_model *m, const zt_llama_config *cfg, const zt_layout *lay,
                  const zt_param_owner *owner, int B, int T, int checkpointing, zt_err *err);
void zt_model_free(zt_model *m);

/* Forward and backward of one micro-batch: inputs, targets (B, T).  Returns the
 * SUM of token cross-entropies in *loss_sum, and adds every weight's gradient of
 * grad_scale * loss_sum to the owner's gradient buffers (grad_scale = 1 / tokens
 * in the global batch gives the mean over it).  An owner that keeps no gradients
 * refuses it.  On an error (of either pass) every unit is handed back to the
 * owner (its reset). */
int zt_model_forward_backward(zt_model *m, const int *inputs, const int *targets, float grad_scale,
                              double *loss_sum, zt_err *err);

/* Packed examples (TRL's padding_free; flash-attention's varlen): pos (B, T), host
 * memory read at each pass (as the token ids are), is each token's position inside its own example (0 at its first
 * token, then +1: transformers' position_ids).  The passes that follow rotate by
 * these positions and let each token attend to its own example's earlier tokens
 * only, so every example's loss and gradients are those of the example alone.  NULL
 * (the default): positions 0..T-1, one example a row.  ZT_EINPUT, naming what refuses,
 * where the backend table has no such entries (backend.h) or activations are bf16
 * (act16, the fast kernels: their attention takes no positions). */
int zt_model_set_positions(zt_model *m, const int *pos, zt_err *err);

/* LoRA: the base frozen, the adapters trained (docs/lora.md).  m's layout must hold the
 * adapter units (zt_lora_layout, with the same l).  The passes that follow acquire each
 * layer's adapter unit with its base unit, add the adapters' parts to the targeted
 * projections (zt_lora_forward), and in the backward take gradients from the owner for
 * the adapter units only: no base unit's grad_begin is called, no base weight's gradient
 * computed.  ZT_EINPUT, naming what refuses, for a table without scale_add. */
int zt_model_set_lora(zt_model *m, const zt_lora *l, zt_err *err);
/* Adapter dropout's draw for the passes that follow (lora.h, zt_lora_linear): the mask of
 * layer l's target kind is keyed on (seed, step, l, kind) and row row0 + i of the pass's
 * rows, row0 = the micro-batch's first global sample index times T, so each token's mask
 * is the same on any rank count, accumulation, ZeRO stage or wrap, and in the
 * checkpointed recompute.  Without dropout, nothing to do. */
void zt_model_set_lora_batch(zt_model *m, uint64_t seed, long step, long first_sample);
/* The next pass reuses the fp32 norm weights the last pass made instead of converting
 * them again: for a step's later micro-batches, between which no weight changes (the
 * trainer), so that they are made once per step.  It holds for one pass; every other
 * pass converts. */
void zt_model_keep_norm_weights(zt_model *m);
/* The bytes zt_model_set_lora allocates beside zt_model_activation_bytes' (the same sizes),
 * for a model of compute dtype `compute`, with bf16 activations or not (act16). */
size_t zt_model_lora_activation_bytes(const zt_llama_config *cfg, int B, int T, const zt_lora *l, zt_dtype compute,
                                      int act16);

/* Forward only (evaluation): the SUM of token cross-entropies in *loss_sum, and
 * the logits for zt_model_logits. */
int zt_model_forward(zt_model *m, const int *inputs, const int *targets, double *loss_sum, zt_err *err);

/* Choose how lm_head's input gradient is computed: directly (dn = dlogits W), or as
 * the transposed product dn^T = W^T dlogits^T followed by a transpose, which oneDNN
 * runs faster when the vocabulary is much wider than the hidden size.  zt_model_init
 * picks by that rule; tests call this to check both ways. */
int zt_model_set_head_transposed(zt_model *m, int on, zt_err *err);

/* Logits (N, V) of the last forward without backward. */
const float *zt_model_logits(const zt_model *m);

/* Fast mode's lm-head chunk (lmhead_xent's chunk_rows) for N rows: a 64 MiB budget of
 * logits and their bf16 gradients, at least 1,024 rows, at most N. */
int zt_model_xent_chunk_rows(const zt_llama_config *cfg, int N);

/* Bytes zt_model_init allocates for activations on the CPU backend (estimate-memory):
 * the sum of the same size table the allocation walks, in exact mode. */
size_t zt_model_activation_bytes(const zt_llama_config *cfg, int B, int T, int checkpointing,
                                 zt_dtype compute);
/* The same for a training model in kernel mode `kernels` (backend.h) with bf16
 * activations asked or not (act16, param_owner.h's): fast mode holds no (N, V) logits
 * (nor their bf16 gradient, nor lm_head's transposed result), and bf16 activations
 * with bf16 compute keep qkv, the attention output and gate|up in bf16. */
size_t zt_model_activation_bytes_in(const zt_llama_config *cfg, int B, int T, int checkpointing, zt_dtype compute,
                                    zt_kernel_mode kernels, int act16);

/* Training FLOPs per token (forward + backward, 6 per weight in matrix products
 * plus causal attention), for MFU. */
double zt_model_flops_per_token(const zt_llama_config *cfg, int T, int checkpointing);

#endif
