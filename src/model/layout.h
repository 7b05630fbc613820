/* layout.h — where every Llama parameter lives (contract §2).
 *
 * Parameters are grouped into units (FSDP's wrapped modules).  Each unit owns one
 * flat buffer holding its parameters back to back in a fixed order, padded with
 * zeros at the end so its length divides the shard-group size; rank r of the group
 * owns the contiguous slice r.  The model computes through views (base + offset)
 * into a unit's gathered buffer, so it never knows whether a unit is sharded.
 *
 * Order inside a decoder-layer unit:
 *   input_layernorm, q_proj, k_proj, v_proj, [q_proj.bias, k_proj.bias, v_proj.bias],
 *   o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj
 * (the biases only with cfg->qkv_bias, Qwen2).  q, k, v are adjacent, so W_qkv
 * ((nh+2nkv)*hd, C) is one matrix view, and their biases b_qkv ((nh+2nkv)*hd) one
 * vector; gate, up are adjacent, so W_gu (2F, C) is one too.  The root unit holds embed_tokens, norm and
 * lm_head (absent when tied).  Wrap policies:
 *   TRANSFORMER_BASED_WRAP: root unit + one unit per layer (FSDP's usual Llama wrap)
 *   SIZE_BASED_WRAP:        consecutive layers grouped until min_num_params
 *   NO_WRAP:                the whole model in one unit (DeepSpeed stages 1-2) */
#ifndef ZT_LAYOUT_H
#define ZT_LAYOUT_H

#include <stddef.h>

#include "config.h"

typedef enum zt_param_kind {
    ZT_P_EMBED, ZT_P_ATTN_NORM, ZT_P_Q, ZT_P_K, ZT_P_V, ZT_P_O, ZT_P_MLP_NORM,
    ZT_P_GATE, ZT_P_UP, ZT_P_DOWN, ZT_P_FINAL_NORM, ZT_P_LM_HEAD,
    ZT_P_Q_BIAS, ZT_P_K_BIAS, ZT_P_V_BIAS, /* only with qkv_bias (Qwen2) */
    ZT_P_NKINDS
} zt_param_kind;

typedef struct zt_param {
    char name[80];      /* Hugging Face tensor name */
    zt_param_kind kind;
    int layer;          /* decoder layer index, -1 for root parameters */
    int ndim;
    long shape[2];
    size_t numel;
    int unit;           /* unit holding it */
    size_t offset;      /* element offset inside the unit's flat buffer */
    int decay;          /* weight decay applies: matrices yes, norm weights and biases no (contract §4) */
    int lora;           /* 0: a model weight; 1, 2: LoRA's A, B of the projection `kind` (lora.h) */
} zt_param;

typedef struct zt_unit {
    int first_layer, num_layers; /* decoder layers in this unit (num_layers 0: none) */
    int has_root;                /* holds embed_tokens / norm / lm_head */
    size_t numel;                /* sum of its parameters' numel */
    size_t padded_numel;         /* numel rounded up to a multiple of the shard group */
    int frozen;                  /* LoRA: a base unit, trained by no one (lora.h) */
    int adapts;                  /* LoRA: an adapter unit, the base unit whose layers it adapts; else -1 */
} zt_unit;

typedef enum zt_wrap_policy { ZT_WRAP_TRANSFORMER, ZT_WRAP_SIZE, ZT_WRAP_NONE } zt_wrap_policy;

typedef struct zt_layout {
    zt_param *params;
    int nparams;
    zt_unit *units;
    int nunits;
    int root_unit;        /* unit holding the root parameters */
    int *layer_unit;      /* layer -> unit */
    int *param_index;     /* [layer * ZT_P_NKINDS + kind] or root [L * NKINDS + kind] -> param, -1 */
    int num_layers;
    size_t numel;         /* sum over units, unpadded: the model's parameter count */
    size_t padded_numel;  /* sum over units, padded */
    int shard_group;      /* padding multiple */
    /* LoRA (zt_lora_layout, lora.h): the base units come first (nbase of them, frozen),
     * then one adapter unit for each base unit with decoder layers; NULL and nunits
     * without adapters */
    int nbase;
    int *layer_adapter_unit; /* layer -> its adapter unit */
    int *lora_index;         /* [(layer * ZT_P_NKINDS + kind) * 2 + (B ? 1 : 0)] -> param, -1 */
} zt_layout;

/* Build the layout for cfg.  min_num_params is used by ZT_WRAP_SIZE only;
 * shard_group >= 1 is the padding multiple.  Returns ZT_OK or ZT_EFAIL (alloc). */
int zt_layout_build(zt_layout *lay, const zt_llama_config *cfg, zt_wrap_policy wrap,
                    size_t min_num_params, int shard_group, zt_err *err);
void zt_layout_free(zt_layout *lay);

/* The parameter of a kind in a layer (layer -1 for root kinds); NULL if absent (lm_head when tied). */
const zt_param *zt_layout_param(const zt_layout *lay, int layer, zt_param_kind kind);
const zt_param *zt_layout_find(const zt_layout *lay, const char *name);

/* FSDP's names of the wrap policies (fsdp_auto_wrap_policy), indexed by
 * zt_wrap_policy and NULL-terminated: the one list that the Accelerate reader's
 * schema, the parser and the names below share. */
extern const char *const zt_wrap_policy_names[];
int zt_wrap_policy_parse(const char *s, zt_wrap_policy *out);
const char *zt_wrap_policy_name(zt_wrap_policy w);

#endif
