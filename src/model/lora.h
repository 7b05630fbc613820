/* lora.h — LoRA adapters as PEFT defines them (docs/lora.md): beside each targeted
 * projection W (out x in) of the decoder layers, A (r x in) and B (out x r), and
 *   y = x W^T + s (x A^T) B^T,   s = alpha / r, or alpha / sqrt(r) with rsLoRA.
 * This header holds what the adapters are (rank, alpha, the scale's rule, the target
 * set) and what follows from a model's shapes alone: the count of trainable
 * parameters and the plan line.  Targets are named as PEFT and TRL name them. */
#ifndef ZT_LORA_H
#define ZT_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"
#include "../kernels/backend.h"
#include "config.h"
#include "layout.h"

typedef struct zt_lora {
    int r;            /* rank, >= 1 */
    double alpha;     /* the scale's numerator, > 0 */
    int rslora;       /* scale alpha / sqrt(r) (rsLoRA) instead of alpha / r */
    unsigned targets; /* bit (1u << kind) for each adapted projection kind (ZT_P_Q .. ZT_P_DOWN) */
    double dropout;   /* PEFT's lora_dropout p in [0, 1), in training only (zt_lora_linear's p) */
} zt_lora;

/* The target set from names as TRL's --lora_target_modules takes them: n values, each
 * "all-linear" (every projection of a decoder layer; PEFT leaves lm_head out) or
 * projection names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj),
 * several to a value when separated by commas; n = 0: PEFT's default for Llama,
 * Mistral and Qwen2, q_proj and v_proj.  ZT_EINPUT names `what` (the flag or key) and,
 * for an unknown name, the closest known one. */
int zt_lora_targets_parse(const char *what, const char *const *names, int n, unsigned *targets, zt_err *err);

/* The adapters into a built layout (layout.h; docs/lora.md, "Adapter units"): every
 * base unit becomes frozen, and each base unit that holds decoder layers gets an
 * adapter unit after the base units (in the same order), holding for each of those
 * layers the A (r x in) of each targeted projection in the order q, k, v, o, gate, up,
 * down, then their B (out x r) in the same order, so A_q A_k A_v is one (3r x C) view
 * where all three are targeted, as W_qkv is.  Named as PEFT saves them
 * (base_model.model.<the weight's name less .weight>.lora_A.weight), weight decay on,
 * padded to the shard group; lay->numel and padded_numel count them too.  Once only;
 * ZT_EFAIL when out of memory (the layout is then freed). */
int zt_lora_layout(zt_layout *lay, const zt_lora *l, zt_err *err);

/* PEFT's initialisation of one adapter tensor p (p->lora 1 or 2) into out (p->numel
 * floats): A kaiming-uniform with a = sqrt(5), uniform in [-1/sqrt(in), 1/sqrt(in)) for
 * in = A's columns; B zeros, so the adapted model starts as the base.  A's draw is the
 * run's seed mixed with the tensor's name, so its values depend on neither the wrap, the
 * shard group nor the other targets.  PEFT's distribution, not torch's numbers: the
 * parity tests give both sides the same adapters from a file instead. */
void zt_lora_init_param(const zt_param *p, uint64_t seed, float *out);

/* The target set as names, comma-separated in the layout's order (q_proj,v_proj); cap
 * >= 64 holds all seven. */
void zt_lora_targets_text(unsigned targets, char *buf, size_t cap);

/* s: alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT's `scaling`). */
double zt_lora_scale(const zt_lora *l);

/* The adapters' parameter count over a layout's decoder layers: r (in + out) for each
 * targeted projection matrix. */
size_t zt_lora_trainable(const zt_lora *l, const zt_layout *lay);

/* The plan line, as PEFT counts (get_nb_trainable_parameters: the total holds the
 * adapters and the base, a tied lm_head once):
 *   lora r=R, alpha=A (scale S), targets q_proj,v_proj, trainable N of M parameters (x %) */
int zt_lora_describe(const zt_lora *l, const zt_llama_config *cfg, char *buf, size_t cap, zt_err *err);

/* Merge one adapter into its weight, as PEFT's merge_and_unload: w (out x in, fp32) +=
 * s (B A), with A (r x in) and B (out x r) fp32; each element's product summed over r in
 * double, then scaled and rounded to fp32 (torch forms B A in fp32, then multiplies by s
 * and adds: the two agree within a few fp32 ulps of the delta). */
void zt_lora_merge(float *w, const float *a, const float *b, int out, int in, int r, double s);

/* The adapter's part of one LoRA linear of N rows through a backend table, beside the
 * frozen base's y = x W^T, which the caller computes (the model in its fused products):
 * A (r, in), B (out, r) in w_dt, the compute dtype (fp32, bf16 or fp16), x (N, in) in x_dt (the
 * model's operand dtype: fp32, or bf16 with bf16 compute) and every other buffer fp32, all
 * of the table's memory; y and dy are `out` columns of rows `ld` apart (q's block of qkv,
 * say; ld = out when they are whole).  With bf16 compute every product reads its operands
 * rounded to bf16 (t, du and dt too, as autocast's bf16 outputs would be) and sums in fp32;
 * the results and the scale's sums stay fp32, as the model's other products' do.  With s
 * the scale, as PEFT's forward and torch's autograd of it:
 *   forward   t = x A^T (N, r; kept for the backward), u = t B^T (N, out), y += s u
 *   backward  du = s dy;  dB += du^T t;  dt = du B (N, r);  dA += dt^T x;  dx += dt A
 * (dx holding the base's dy W already; no dW: the base is frozen).  u and du are scratch of
 * N out elements; dA, dB accumulate as every weight gradient does, or are stored by
 * their one product where grad_fresh says their buffers are fresh.  ZT_EINPUT where the
 * table has no scale_add, naming it. */
typedef struct zt_lora_linear {
    const zt_backend *be;
    zt_dtype w_dt;
    int N, out, in, r;
    float scale;
    const void *a, *b;
    size_t ld;
    zt_dtype x_dt; /* x's dtype (fp32 when left 0) */
    /* PEFT's lora_dropout on the adapter's input alone, in training:
     *   x~ = x o m / (1 - p),  m[i][j] = zt_lora_keep(key, row0 + i, j, p)
     * and x~ replaces x in t = x~ A^T and dA += dt^T x~, while dx += (dt A) o m / (1 - p).
     * The mask is a hash of (key, global row, column), drawn again in the backward rather
     * than stored (a stored mask would hold L x targets x N x in bytes); the caller's key
     * names the step, micro-batch, layer and target, and row0 is the first row's index
     * among all ranks' rows, so every rank count, ZeRO stage, wrap and recompute draws the
     * same mask for the same token.  p 0: no dropout, xd unused; else xd is scratch of N in
     * fp32 elements of the table's memory (staged through the host: one copy each way). */
    float p;
    uint64_t key;
    int64_t row0;
    float *xd;
    int grad_fresh; /* dA, dB's buffers are fresh (param_owner.h): stored (beta 0), not added */
} zt_lora_linear;

/* Whether dropout keeps element (row, col) under key: splitmix64 of key ^ (row << 32 | col),
 * its top 53 bits as u in [0, 1), kept when u >= p. */
int zt_lora_keep(uint64_t key, int64_t row, int col, float p);

int zt_lora_forward(const zt_lora_linear *l, float *y, float *t, float *u, const void *x, zt_err *err);
int zt_lora_backward(const zt_lora_linear *l, float *dx, float *da, float *db, float *du, float *dt,
                     const float *dy, const void *x, const float *t, zt_err *err);

#endif
