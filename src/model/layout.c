/* layout.c — parameter order, units and padding (see layout.h). */
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int add_param(zt_layout *lay, int *cap, const char *name, zt_param_kind kind, int layer,
                     long rows, long cols)
{
    if (lay->nparams == *cap) {
        int ncap = *cap ? 2 * *cap : 32;
        zt_param *np = realloc(lay->params, (size_t)ncap * sizeof *np);
        if (!np)
            return -1;
        lay->params = np;
        *cap = ncap;
    }
    zt_param *p = &lay->params[lay->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    p->decay = cols != 0;
    return 0;
}

static size_t layer_numel(const zt_llama_config *c)
{
    size_t C = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    size_t q = (size_t)c->num_attention_heads * hd, kv = (size_t)c->num_key_value_heads * hd;
    size_t bias = c->qkv_bias ? q + 2 * kv : 0;
    return 2 * C + (q + 2 * kv) * C + bias + C * q + 3 * C * (size_t)c->intermediate_size;
}

/* Which layers each unit holds; the root unit is unit 0 and, for SIZE_BASED_WRAP /
 * NO_WRAP, it also takes the layers grouped with it. */
static void decide_units(zt_layout *lay, const zt_llama_config *cfg, zt_wrap_policy wrap, size_t min_num_params)
{
    int L = cfg->num_hidden_layers;
    if (wrap == ZT_WRAP_NONE) {
        lay->units[0].first_layer = 0;
        lay->units[0].num_layers = L;
        for (int l = 0; l < L; l++)
            lay->layer_unit[l] = 0;
    } else {
        /* Layers go to units 1.. ; size-based wrap packs consecutive layers until the
         * unit reaches min_num_params (FSDP's size_based_auto_wrap_policy). */
        size_t per = layer_numel(cfg), acc = 0;
        for (int l = 0; l < L; l++) {
            int start_new = wrap == ZT_WRAP_TRANSFORMER || lay->nunits == 1 || acc >= min_num_params;
            if (start_new) {
                lay->units[lay->nunits].first_layer = l;
                lay->nunits++;
                acc = 0;
            }
            lay->units[lay->nunits - 1].num_layers++;
            lay->layer_unit[l] = lay->nunits - 1;
            acc += per;
        }
    }
}

/* Layer l's parameters, in the fixed order of layout.h; nonzero when out of memory. */
static int add_layer_params(zt_layout *lay, int *cap, const zt_llama_config *cfg, int l)
{
    long C = cfg->hidden_size, F = cfg->intermediate_size;
    long q = (long)cfg->num_attention_heads * cfg->head_dim;
    long kv = (long)cfg->num_key_value_heads * cfg->head_dim;
    char name[80];
    /* rows: the shape code below; bias: a 1-D .bias of that many rows, only with qkv_bias */
    static const struct { const char *suffix; zt_param_kind kind; int rows, bias; } order[] = {
        {"input_layernorm", ZT_P_ATTN_NORM, 0, 0},
        {"self_attn.q_proj", ZT_P_Q, 1, 0},
        {"self_attn.k_proj", ZT_P_K, 2, 0},
        {"self_attn.v_proj", ZT_P_V, 2, 0},
        {"self_attn.q_proj", ZT_P_Q_BIAS, 1, 1},
        {"self_attn.k_proj", ZT_P_K_BIAS, 2, 1},
        {"self_attn.v_proj", ZT_P_V_BIAS, 2, 1},
        {"self_attn.o_proj", ZT_P_O, 3, 0},
        {"post_attention_layernorm", ZT_P_MLP_NORM, 0, 0},
        {"mlp.gate_proj", ZT_P_GATE, 4, 0},
        {"mlp.up_proj", ZT_P_UP, 4, 0},
        {"mlp.down_proj", ZT_P_DOWN, 5, 0},
    };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        long rows, cols;
        if (order[i].bias && !cfg->qkv_bias)
            continue;
        switch (order[i].rows) {
        case 0: rows = C; cols = 0; break;
        case 1: rows = q; cols = C; break;
        case 2: rows = kv; cols = C; break;
        case 3: rows = C; cols = q; break;
        case 4: rows = F; cols = C; break;
        default: rows = C; cols = F; break;
        }
        if (order[i].bias)
            cols = 0; /* a vector of the projection's rows: no weight decay (add_param) */
        snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, order[i].suffix,
                 order[i].bias ? "bias" : "weight");
        if (add_param(lay, cap, name, order[i].kind, l, rows, cols))
            return 1;
    }
    return 0;
}

/* Each parameter's unit and offset in array order (they were appended unit by
 * unit), the index by (layer, kind), and the units' sizes padded to the shard group. */
static void assign_offsets(zt_layout *lay)
{
    int L = lay->num_layers;
    int u = 0;
    size_t off = 0;
    for (int i = 0; i < lay->nparams; i++) {
        zt_param *p = &lay->params[i];
        int pu = p->layer < 0 ? lay->root_unit : lay->layer_unit[p->layer];
        if (pu != u) {
            lay->units[u].numel = off;
            u = pu;
            off = 0;
        }
        p->unit = pu;
        p->offset = off;
        off += p->numel;
        int row = p->layer < 0 ? L : p->layer;
        lay->param_index[row * ZT_P_NKINDS + p->kind] = i;
    }
    lay->units[u].numel = off;
    for (int k = 0; k < lay->nunits; k++) {
        size_t g = (size_t)lay->shard_group;
        lay->units[k].padded_numel = (lay->units[k].numel + g - 1) / g * g;
        lay->numel += lay->units[k].numel;
        lay->padded_numel += lay->units[k].padded_numel;
    }
}

int zt_layout_build(zt_layout *lay, const zt_llama_config *cfg, zt_wrap_policy wrap,
                    size_t min_num_params, int shard_group, zt_err *err)
{
    memset(lay, 0, sizeof *lay);
    int L = cfg->num_hidden_layers, cap = 0;
    long C = cfg->hidden_size, V = cfg->vocab_size;
    lay->num_layers = L;
    lay->shard_group = shard_group < 1 ? 1 : shard_group;

    /* Decide the units first: which layers each holds; the root unit is unit 0 and,
     * for SIZE_BASED_WRAP / NO_WRAP, it also takes the layers grouped with it. */
    lay->units = calloc((size_t)L + 1, sizeof *lay->units);
    lay->layer_unit = calloc((size_t)L + 1, sizeof *lay->layer_unit);
    lay->param_index = malloc(((size_t)L + 1) * ZT_P_NKINDS * sizeof *lay->param_index);
    if (!lay->units || !lay->layer_unit || !lay->param_index)
        goto oom;
    for (size_t i = 0; i < ((size_t)L + 1) * ZT_P_NKINDS; i++)
        lay->param_index[i] = -1;
    lay->root_unit = 0;
    lay->units[0].has_root = 1;
    lay->nunits = 1;
    decide_units(lay, cfg, wrap, min_num_params);
    lay->nbase = lay->nunits;
    for (int u = 0; u <= L; u++)
        lay->units[u].adapts = -1;

    /* Parameters, unit by unit, in the fixed order of layout.h. */
    for (int u = 0; u < lay->nunits; u++) {
        zt_unit *unit = &lay->units[u];
        if (unit->has_root) {
            if (add_param(lay, &cap, "model.embed_tokens.weight", ZT_P_EMBED, -1, V, C) ||
                add_param(lay, &cap, "model.norm.weight", ZT_P_FINAL_NORM, -1, C, 0))
                goto oom;
            if (!cfg->tie_word_embeddings &&
                add_param(lay, &cap, "lm_head.weight", ZT_P_LM_HEAD, -1, V, C))
                goto oom;
        }
        for (int l = unit->first_layer; l < unit->first_layer + unit->num_layers; l++) {
            if (add_layer_params(lay, &cap, cfg, l))
                goto oom;
        }
    }

    assign_offsets(lay);
    return ZT_OK;
oom:
    zt_layout_free(lay);
    return zt_fail(err, ZT_EFAIL, "out of memory building the parameter layout");
}

void zt_layout_free(zt_layout *lay)
{
    free(lay->params);
    free(lay->units);
    free(lay->layer_unit);
    free(lay->param_index);
    free(lay->layer_adapter_unit);
    free(lay->lora_index);
    memset(lay, 0, sizeof *lay);
}

const zt_param *zt_layout_param(const zt_layout *lay, int layer, zt_param_kind kind)
{
    int row = layer < 0 ? lay->num_layers : layer;
    int i = lay->param_index[row * ZT_P_NKINDS + kind];
    return i < 0 ? NULL : &lay->params[i];
}

const zt_param *zt_layout_find(const zt_layout *lay, const char *name)
{
    for (int i = 0; i < lay->nparams; i++)
        if (strcmp(lay->params[i].name, name) == 0)
            return &lay->params[i];
    return NULL;
}

const char *const zt_wrap_policy_names[] = {
    [ZT_WRAP_TRANSFORMER] = "TRANSFORMER_BASED_WRAP",
    [ZT_WRAP_SIZE] = "SIZE_BASED_WRAP",
    [ZT_WRAP_NONE] = "NO_WRAP",
    [ZT_WRAP_NONE + 1] = NULL,
};

int zt_wrap_policy_parse(const char *s, zt_wrap_policy *out)
{
    for (int w = ZT_WRAP_TRANSFORMER; w <= ZT_WRAP_NONE; w++)
        if (!strcmp(s, zt_wrap_policy_names[w])) {
            *out = (zt_wrap_policy)w;
            return 0;
        }
    return -1;
}

const char *zt_wrap_policy_name(zt_wrap_policy w)
{
    return zt_wrap_policy_names[w >= ZT_WRAP_TRANSFORMER && w <= ZT_WRAP_SIZE ? w : ZT_WRAP_NONE];
}
