/* gguf_format.c — GGUF's type table and llama tensor-name map (gguf_format.h). */
#include "gguf_format.h"

#include <stdio.h>
#include <string.h>

int zt_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case ZT_GGUF_UINT8: case ZT_GGUF_INT8: case ZT_GGUF_BOOL: return 1;
    case ZT_GGUF_UINT16: case ZT_GGUF_INT16: return 2;
    case ZT_GGUF_UINT32: case ZT_GGUF_INT32: case ZT_GGUF_FLOAT32: return 4;
    case ZT_GGUF_UINT64: case ZT_GGUF_INT64: case ZT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Block layouts, as ggml-common.h defines them:
 *   Q4_0: f16 d, 16 bytes of nibbles               (32 elements in 18 bytes)
 *   Q4_1: f16 d, f16 m, 16 bytes of nibbles        (32 in 20)
 *   Q5_0: f16 d, 4 bytes of high bits, 16 nibbles  (32 in 22)
 *   Q5_1: f16 d, f16 m, 4 high, 16 nibbles         (32 in 24)
 *   Q8_0: f16 d, 32 int8                           (32 in 34)
 *   Q8_1: f16 d, f16 s, 32 int8                    (32 in 36)
 *   K-quants: super-blocks of 256 (Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210,
 *   Q8_K 292 bytes). */
static const struct { uint32_t type; zt_ggml_type_info info; } types[] = {
    {ZT_GGML_F32, {"F32", 1, 4}},     {ZT_GGML_F16, {"F16", 1, 2}},
    {ZT_GGML_BF16, {"BF16", 1, 2}},   {ZT_GGML_Q4_0, {"Q4_0", 32, 18}},
    {ZT_GGML_Q4_1, {"Q4_1", 32, 20}}, {ZT_GGML_Q5_0, {"Q5_0", 32, 22}},
    {ZT_GGML_Q5_1, {"Q5_1", 32, 24}}, {ZT_GGML_Q8_0, {"Q8_0", 32, 34}},
    {ZT_GGML_Q8_1, {"Q8_1", 32, 36}}, {ZT_GGML_Q2_K, {"Q2_K", 256, 84}},
    {ZT_GGML_Q3_K, {"Q3_K", 256, 110}}, {ZT_GGML_Q4_K, {"Q4_K", 256, 144}},
    {ZT_GGML_Q5_K, {"Q5_K", 256, 176}}, {ZT_GGML_Q6_K, {"Q6_K", 256, 210}},
    {ZT_GGML_Q8_K, {"Q8_K", 256, 292}},
};

const zt_ggml_type_info *zt_ggml_type_get(uint32_t t) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == t) return &types[i].info;
    return NULL;
}

/* Per-layer names: GGUF's "blk.N.<short>" against HF's "model.layers.N.<long>". */
static const char *const layer_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
/* Whole-model names. */
static const char *const model_names[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Map src between the two naming schemes: from = 0 reads GGUF names, 1 reads HF. */
static int map_name(const char *src, int from, char *out, int cap) {
    static const char *const prefix[2] = {"blk.", "model.layers."};
    for (size_t i = 0; i < NELEM(model_names); i++)
        if (strcmp(src, model_names[i][from]) == 0)
            return snprintf(out, cap, "%s", model_names[i][!from]) < cap ? 0 : -1;
    size_t pl = strlen(prefix[from]);
    if (strncmp(src, prefix[from], pl) != 0) return -1;
    const char *p = src + pl;
    long layer = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 9) layer = layer * 10 + (*p++ - '0'), digits++;
    if (digits == 0 || *p != '.' || (digits > 1 && src[pl] == '0')) return -1;
    p++;
    for (size_t i = 0; i < NELEM(layer_names); i++)
        if (strcmp(p, layer_names[i][from]) == 0)
            return snprintf(out, cap, "%s%ld.%s", prefix[!from], layer, layer_names[i][!from]) < cap
                       ? 0 : -1;
    return -1;
}

int zt_gguf_name_to_hf(const char *gguf, char *out, int cap) { return map_name(gguf, 0, out, cap); }
int zt_gguf_name_from_hf(const char *hf, char *out, int cap) { return map_name(hf, 1, out, cap); }
