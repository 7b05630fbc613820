/* hf_config.c — config.json of Hugging Face LlamaForCausalLM / MistralForCausalLM /
 * Qwen2ForCausalLM.
 *
 * Promise: a config that reads without error describes exactly the model ztrain
 * computes.  Every key is either understood, known to change nothing ztrain
 * computes, accepted only at the value that makes it inert, or refused by name
 * (contract §5: never silently ignored).  Integers must be JSON integer literals, as
 * HF's own constructors would fail on 64.0. */
#include "../model/config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/json_doc.h"

#define CONFIG_MAX_BYTES (16u << 20)
/* transformers' MistralConfig.sliding_window default (used when the key is absent). */
#define ZT_MISTRAL_DEFAULT_WINDOW 4096

/* config.json's own kinds (read by read_key; the schema engine walks the object). */
enum key_kind {
    K_INT = ZT_K_CUSTOM, /* JSON integer into an int field */
    K_INT_OR_NULL,  /* same, null meaning "use the default" */
    K_NUM,          /* finite JSON number into a double field */
    K_BOOL,         /* true/false into an int field */
    K_DTYPE,        /* "float32" | "bfloat16" | "float16" (or null) */
    K_MODEL_TYPE,   /* "llama" | "mistral" | "qwen2" */
    K_SILU,         /* only "silu" */
    K_FALSE,        /* only false (or absent) */
    K_NULL,         /* only null (or absent) */
    K_ROPE_SCALING, /* rope_scaling: null, or {"rope_type": "default" | "llama3", ...} */
    K_ROPE_PARAMS,  /* transformers 5: the same with "rope_theta" inside, or null */
    K_WINDOW,       /* sliding_window: null or a positive integer (settled in from_json) */
    K_ZERO,         /* only the number 0 */
    K_ONE,          /* only the integer 1 */
    K_ANY_STRING,   /* inert: a string or null */
    K_STRINGS,      /* inert: a list of strings or null */
    K_TOKEN_ID,     /* inert: an integer, a list of integers, or null */
    K_ANY_BOOL,     /* inert: true or false */
    K_LAYER_TYPES,  /* transformers 5's per-layer attention kinds (settled in from_json) */
};

#define F(field) offsetof(zt_llama_config, field), sizeof(((zt_llama_config *)0)->field)
#define INERT ZT_NO_FIELD, 0

static const zt_schema_key keys[] = {
    {.name = "hidden_size", .kind = K_INT, F(hidden_size), .required = 1},
    {.name = "intermediate_size", .kind = K_INT, F(intermediate_size), .required = 1},
    {.name = "num_hidden_layers", .kind = K_INT, F(num_hidden_layers), .required = 1},
    {.name = "num_attention_heads", .kind = K_INT, F(num_attention_heads), .required = 1},
    {.name = "vocab_size", .kind = K_INT, F(vocab_size), .required = 1},
    {.name = "num_key_value_heads", .kind = K_INT_OR_NULL, F(num_key_value_heads)},
    {.name = "head_dim", .kind = K_INT_OR_NULL, F(head_dim)},
    {.name = "max_position_embeddings", .kind = K_INT, F(max_position_embeddings)},
    {.name = "rms_norm_eps", .kind = K_NUM, F(rms_norm_eps)},
    {.name = "rope_theta", .kind = K_NUM, F(rope_theta)},
    {.name = "initializer_range", .kind = K_NUM, F(initializer_range)},
    {.name = "tie_word_embeddings", .kind = K_BOOL, F(tie_word_embeddings)},
    /* transformers >= 4.56 writes "dtype"; older versions "torch_dtype". */
    {.name = "torch_dtype", .kind = K_DTYPE, INERT},
    {.name = "dtype", .kind = K_DTYPE, INERT},
    {.name = "model_type", .kind = K_MODEL_TYPE, F(model_type)},
    {.name = "hidden_act", .kind = K_SILU, INERT},
    {.name = "attention_bias", .kind = K_FALSE, INERT},
    {.name = "mlp_bias", .kind = K_FALSE, INERT},
    {.name = "rope_scaling", .kind = K_ROPE_SCALING, INERT},
    {.name = "rope_parameters", .kind = K_ROPE_PARAMS, INERT},
    {.name = "sliding_window", .kind = K_WINDOW, F(sliding_window)},
    {.name = "attention_dropout", .kind = K_ZERO, INERT},
    {.name = "pretraining_tp", .kind = K_ONE, INERT},
    {.name = "architectures", .kind = K_STRINGS, INERT},
    {.name = "_name_or_path", .kind = K_ANY_STRING, INERT},
    {.name = "transformers_version", .kind = K_ANY_STRING, INERT},
    {.name = "bos_token_id", .kind = K_TOKEN_ID, INERT},
    {.name = "eos_token_id", .kind = K_TOKEN_ID, INERT},
    {.name = "pad_token_id", .kind = K_TOKEN_ID, INERT},
    {.name = "use_cache", .kind = K_ANY_BOOL, INERT},
    /* Qwen2: sliding-window attention only with use_sliding_window, which ztrain refuses;
     * without it sliding_window and max_window_layers change nothing */
    {.name = "use_sliding_window", .kind = K_FALSE, INERT},
    {.name = "max_window_layers", .kind = K_INT, F(max_window_layers)},
    {.name = "use_mrope", .kind = K_FALSE, INERT},
    /* transformers >= 4.5x: where a model was read from (a GGUF conversion writes this one) */
    {.name = "_model_name_or_path", .kind = K_ANY_STRING, INERT},
    {.name = "_commit_hash", .kind = K_ANY_STRING, INERT},
    {.name = "unk_token_id", .kind = K_TOKEN_ID, INERT},
    /* SmolLM2's nanotron export: a marker, and RoPE over (i, i + hd/2) pairs as
     * LlamaForCausalLM computes it (true would be nanotron's interleaved pairs) */
    {.name = "is_llama_config", .kind = K_ANY_BOOL, INERT},
    {.name = "rope_interleaved", .kind = K_FALSE, INERT},
    {.name = "layer_types", .kind = K_LAYER_TYPES, INERT},
};

static const zt_schema_section top = {0, "", keys, ZT_SCHEMA_NKEYS(keys)};

static const char *hf_dtype_name(zt_dtype dt)
{
    switch (dt) {
    case ZT_F32: return "float32";
    case ZT_BF16: return "bfloat16";
    case ZT_F16: return "float16";
    }
    return NULL;
}

static int hf_dtype_parse(const char *s, zt_dtype *out)
{
    for (int dt = ZT_F32; dt <= ZT_F16; dt++)
        if (strcmp(s, hf_dtype_name((zt_dtype)dt)) == 0) {
            *out = (zt_dtype)dt;
            return 0;
        }
    return -1;
}

static int is_number(const zt_node *v) { return v->type == ZT_NODE_INT || v->type == ZT_NODE_FLOAT; }

/* An integer; ZT_EINPUT naming key unless v is a JSON integer literal that fits an int. */
static int get_int(const char *path, const zt_node *v, const char *key, int *out, zt_err *err)
{
    if (v->type != ZT_NODE_INT)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a JSON integer (got %s)", path, key,
                       v->type == ZT_NODE_FLOAT ? "a non-integer number"
                       : v->type == ZT_NODE_STR ? "a string"
                                                : "another type");
    if (!v->in_range || v->integer < INT_MIN || v->integer > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is out of range for a 32-bit integer", path, key);
    *out = (int)v->integer;
    return ZT_OK;
}

static int is_int_literal(const zt_node *v, int64_t want)
{
    return v->type == ZT_NODE_INT && v->in_range && v->integer == want;
}

/* A rope_scaling or rope_parameters object as read. */
typedef struct rope_spec {
    int given;              /* a non-null object */
    int llama3;             /* rope_type "llama3" (else "default") */
    double num[4];          /* factor, low_freq_factor, high_freq_factor, original_max_position_embeddings */
    int have[4];
} rope_spec;

static const char *const rope_llama3_keys[4] = {"factor", "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings"};

/* What the keys say beyond the struct's fields, settled once all are read
 * (JSON objects have no key order to rely on). */
typedef struct read_state {
    int dtype_set;
    zt_dtype dtype;
    int theta_set;          /* rope_parameters.rope_theta given */
    double theta;
    int window_null;        /* sliding_window given as null */
    rope_spec scaling, params; /* rope_scaling, rope_parameters */
    int layers_given;       /* layer_types: its length, and how many say each kind */
    int layers_len, layers_full, layers_sliding;
    char unknown[512];      /* the keys ztrain does not know, quoted, for the one-line note */
    int nunknown;
} read_state;

/* "(got \"x\")" when v is a string: the value the message quotes. */
#define GOT(v) (v)->type == ZT_NODE_STR ? " (got \"" : "", (v)->type == ZT_NODE_STR ? (v)->text : "", \
               (v)->type == ZT_NODE_STR ? "\")" : ""

/* rope_scaling, or transformers 5's rope_parameters (key), into *rs: null, or an
 * object with rope_type ("type" in older configs) "default" or "llama3", Llama 3.1's
 * four numbers for "llama3", and rope_theta when with_theta (rope_parameters). */
static int read_rope(const char *path, const char *key, const zt_node *v, rope_spec *rs, read_state *st,
                     int with_theta, zt_err *err)
{
    if (v->type == ZT_NODE_NULL)
        return ZT_OK;
    if (v->type != ZT_NODE_MAP)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be an object or null", path, key);
    rs->given = 1;
    const char *type = NULL;
    for (const zt_node *m = v->child; m; m = m->next) {
        const char *mk = m->key->text;
        int k = 0;
        while (k < 4 && strcmp(mk, rope_llama3_keys[k]) != 0)
            k++;
        if (strcmp(mk, "rope_type") == 0 || strcmp(mk, "type") == 0) {
            if (m->type != ZT_NODE_STR || (strcmp(m->text, "default") != 0 && strcmp(m->text, "llama3") != 0))
                return zt_fail(err, ZT_EINPUT,
                               "%s: key \"%s.%s\"%s%s%s is not supported (allowed: \"default\", \"llama3\")",
                               path, key, mk, GOT(m));
            if (type && strcmp(type, m->text) != 0)
                return zt_fail(err, ZT_EINPUT, "%s: keys \"%s.rope_type\" and \"%s.type\" disagree", path, key,
                               key);
            type = m->text;
        } else if (k < 4) {
            if (!is_number(m) || !isfinite(m->num) || !(m->num > 0))
                return zt_fail(err, ZT_EINPUT, "%s: key \"%s.%s\" must be a positive number", path, key, mk);
            rs->num[k] = m->num;
            rs->have[k] = 1;
        } else if (with_theta && strcmp(mk, "rope_theta") == 0) {
            if (!is_number(m) || !isfinite(m->num))
                return zt_fail(err, ZT_EINPUT, "%s: key \"%s.rope_theta\" must be a finite number", path, key);
            st->theta = m->num;
            st->theta_set = 1;
        } else {
            return zt_fail(err, ZT_EINPUT,
                           "%s: key \"%s.%s\" is not supported (allowed: rope_type, factor, low_freq_factor, "
                           "high_freq_factor, original_max_position_embeddings%s)",
                           path, key, mk, with_theta ? ", rope_theta" : "");
        }
    }
    rs->llama3 = type && strcmp(type, "llama3") == 0; /* no rope_type: the default frequencies */
    for (int k = 0; k < 4; k++) {
        if (rs->llama3 && !rs->have[k])
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" with rope_type \"llama3\" needs \"%s\"", path, key,
                           rope_llama3_keys[k]);
        if (!rs->llama3 && rs->have[k])
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s.%s\" is only meaningful with rope_type \"llama3\"",
                           path, key, rope_llama3_keys[k]);
    }
    /* g = (L/w - lo) / (hi - lo) divides by hi - lo (rope_freq.h) */
    if (rs->llama3 && !(rs->num[2] > rs->num[1]))
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s.high_freq_factor\" (%g) must be larger than low_freq_factor (%g)",
                       path, key, rs->num[2], rs->num[1]);
    return ZT_OK;
}

/* layer_types: null, or a list of "full_attention" / "sliding_attention", counted
 * (check_layer_types settles them once the sizes and the window are known). */
static int read_layer_types(const char *path, const char *key, const zt_node *v, read_state *st, zt_err *err)
{
    if (v->type == ZT_NODE_NULL)
        return ZT_OK;
    if (v->type != ZT_NODE_LIST)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a list of strings", path, key);
    st->layers_given = 1;
    for (const zt_node *e = v->child; e; e = e->next, st->layers_len++) {
        if (e->type == ZT_NODE_STR && strcmp(e->text, "full_attention") == 0)
            st->layers_full++;
        else if (e->type == ZT_NODE_STR && strcmp(e->text, "sliding_attention") == 0)
            st->layers_sliding++;
        else
            return zt_fail(err, ZT_EINPUT,
                           "%s: key \"%s\": entry %d%s%s%s is not supported (allowed: \"full_attention\", "
                           "\"sliding_attention\")", path, key, st->layers_len, GOT(e));
    }
    return ZT_OK;
}

/* A key whose one supported value ztrain checks (the architectures it implements). */
static int read_fixed(const char *path, const char *key, int kind, const zt_node *v, zt_err *err)
{
    switch (kind) {
    case K_SILU:
        if (v->type != ZT_NODE_STR || strcmp(v->text, "silu") != 0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only \"silu\" is supported%s%s%s", path, key,
                           GOT(v));
        return ZT_OK;
    case K_FALSE:
        if (v->type != ZT_NODE_BOOL || v->boolean)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only false is supported (%s)", path, key,
                           strcmp(key, "use_sliding_window") == 0 ? "no sliding window in Qwen2 models"
                           : strcmp(key, "use_mrope") == 0       ? "no multimodal RoPE"
                           : strcmp(key, "rope_interleaved") == 0
                               ? "RoPE rotates the pairs (i, i + head_dim/2), as LlamaForCausalLM does"
                                                                 : "the only biases ztrain implements are "
                                                                   "Qwen2's q/k/v biases, model_type \"qwen2\"");
        return ZT_OK;
    case K_NULL:
        if (v->type != ZT_NODE_NULL)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only null is supported", path, key);
        return ZT_OK;
    case K_ZERO:
        if (!is_number(v) || v->num != 0.0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only 0 is supported (no dropout)", path, key);
        return ZT_OK;
    case K_ONE:
        if (!is_int_literal(v, 1))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only 1 is supported", path, key);
        return ZT_OK;
    default:
        break;
    }
    return zt_fail(err, ZT_EFAIL, "%s: internal: key kind for \"%s\"", path, key);
}

/* A key that changes nothing ztrain computes: only its type is checked. */
static int read_shape_only(const char *path, const char *key, int kind, const zt_node *v, zt_err *err)
{
    switch (kind) {
    case K_ANY_STRING:
        if (v->type != ZT_NODE_STR && v->type != ZT_NODE_NULL)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a string", path, key);
        return ZT_OK;
    case K_STRINGS:
        if (v->type == ZT_NODE_NULL)
            return ZT_OK;
        if (v->type != ZT_NODE_LIST)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a list of strings", path, key);
        for (const zt_node *e = v->child; e; e = e->next)
            if (e->type != ZT_NODE_STR)
                return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a list of strings", path, key);
        return ZT_OK;
    case K_TOKEN_ID: {
        if (v->type == ZT_NODE_NULL || (v->type == ZT_NODE_INT && v->in_range))
            return ZT_OK;
        if (v->type == ZT_NODE_LIST) {
            const zt_node *e = v->child;
            while (e && e->type == ZT_NODE_INT && e->in_range)
                e = e->next;
            if (!e)
                return ZT_OK;
        }
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be an integer, a list of integers or null",
                       path, key);
    }
    case K_ANY_BOOL:
        if (v->type != ZT_NODE_BOOL)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be true or false", path, key);
        return ZT_OK;
    default:
        break;
    }
    return zt_fail(err, ZT_EFAIL, "%s: internal: key kind for \"%s\"", path, key);
}

/* Read member v of key kk into the config (r->target) or the read state (r->ctx). */
static int read_key(zt_schema_reader *r, const zt_schema_key *kk, const zt_node *v, const char *keypath)
{
    const char *key = kk->name, *path = r->path;
    read_state *st = r->ctx;
    zt_err *err = r->err;
    (void)keypath;
    switch (kk->kind) {
    case K_INT_OR_NULL:
        if (v->type == ZT_NODE_NULL)
            return ZT_OK; /* defaults are filled in after all keys are read */
        /* fall through */
    case K_INT:
        return get_int(path, v, key, zt_schema_field(r, kk), err);
    case K_NUM:
        if (!is_number(v) || !isfinite(v->num))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a finite number", path, key);
        *(double *)zt_schema_field(r, kk) = v->num;
        return ZT_OK;
    case K_BOOL:
        if (v->type != ZT_NODE_BOOL)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be true or false", path, key);
        *(int *)zt_schema_field(r, kk) = v->boolean;
        return ZT_OK;
    case K_DTYPE: {
        if (v->type == ZT_NODE_NULL)
            return ZT_OK;
        zt_dtype dt;
        if (v->type != ZT_NODE_STR || hf_dtype_parse(v->text, &dt) != 0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be \"float32\", \"bfloat16\" or \"float16\"",
                           path, key);
        if (st->dtype_set && dt != st->dtype)
            return zt_fail(err, ZT_EINPUT, "%s: keys \"torch_dtype\" and \"dtype\" disagree", path);
        st->dtype = dt;
        st->dtype_set = 1;
        return ZT_OK;
    }
    case K_MODEL_TYPE:
        if (v->type != ZT_NODE_STR || (strcmp(v->text, "llama") != 0 && strcmp(v->text, "mistral") != 0 &&
                                       strcmp(v->text, "qwen2") != 0))
            return zt_fail(err, ZT_EINPUT, "%s: key \"model_type\" must be \"llama\", \"mistral\" or \"qwen2\"%s%s%s",
                           path, GOT(v));
        zt_schema_set_string(r, kk, v->text);
        return ZT_OK;
    case K_SILU:
    case K_FALSE:
    case K_NULL:
    case K_ZERO:
    case K_ONE:
        return read_fixed(path, key, kk->kind, v, err);
    case K_ANY_STRING:
    case K_STRINGS:
    case K_TOKEN_ID:
    case K_ANY_BOOL:
        return read_shape_only(path, key, kk->kind, v, err);
    case K_ROPE_SCALING:
        return read_rope(path, key, v, &st->scaling, st, 0, err);
    case K_ROPE_PARAMS:
        return read_rope(path, key, v, &st->params, st, 1, err);
    case K_WINDOW: {
        if (v->type == ZT_NODE_NULL) {
            st->window_null = 1;
            return ZT_OK;
        }
        int *w = zt_schema_field(r, kk);
        int rc = get_int(path, v, key, w, err);
        if (rc == ZT_OK && *w < 1)
            rc = zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a positive integer or null (got %d)", path,
                         key, *w);
        return rc;
    }
    case K_LAYER_TYPES:
        return read_layer_types(path, key, v, st, err);
    }
    return zt_fail(err, ZT_EFAIL, "%s: internal: key kind for \"%s\"", path, key);
}

/* Keys of other transformers configs that change what the model computes, which
 * ztrain does not implement: refused by name rather than kept as inert. */
static const char *const math_keys[] = {
    "quantization_config", "partial_rotary_factor", "attn_logit_softcapping", "final_logit_softcapping",
    "logits_scaling", "embedding_multiplier", "residual_multiplier", "attention_multiplier",
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "use_qk_norm", "qk_layernorm", "no_rope_layers",
    "query_pre_attn_scalar", "rope_local_base_freq", "sliding_window_pattern", "text_config",
};

/* A key ztrain does not know: refused when it is one that changes the math;
 * otherwise accepted, as transformers accepts it (an attribute nothing reads),
 * listed for the note from_json prints, and kept when the model is saved (the
 * carry in io/hf_carry.c copies it). */
static int unknown_key(zt_schema_reader *r, const zt_schema_section *s, const zt_node *m, const char *kp)
{
    (void)s, (void)kp;
    const char *name = m->key->text;
    for (size_t i = 0; i < sizeof math_keys / sizeof math_keys[0]; i++)
        if (strcmp(name, math_keys[i]) == 0)
            return zt_fail(r->err, ZT_EINPUT,
                           "%s: unsupported key \"%s\": it changes the model's math, and ztrain implements "
                           "LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM only",
                           r->path, name);
    read_state *st = r->ctx;
    size_t used = strlen(st->unknown);
    if (st->nunknown++ < 8 && used + strlen(name) + 5 < sizeof st->unknown)
        snprintf(st->unknown + used, sizeof st->unknown - used, "%s\"%s\"", used ? ", " : "", name);
    return ZT_OK;
}

static int duplicate_key(zt_schema_reader *r, const zt_node *m, const zt_node *first, const char *kp)
{
    (void)first, (void)kp;
    return zt_fail(r->err, ZT_EINPUT, "%s: duplicate key \"%s\"", r->path, m->key->text);
}

static const zt_schema_section *const sections[] = {&top};
static const zt_schema_format config_json = {
    .sections = sections, .nsections = 1, .unknown_first = 0, /* a repeated unknown key is a duplicate */
    .list_word = "an array", .map_word = "an object", .section_want = "an object of %s settings",
    .read_custom = read_key, .unknown_key = unknown_key, .duplicate_key = duplicate_key,
};

/* transformers 5's layer_types names each layer's attention: one entry a layer, all
 * "sliding_attention" where ztrain applies Mistral's window (to every layer), all
 * "full_attention" elsewhere (Qwen2's per-layer windows need use_sliding_window,
 * which is refused). */
static int check_layer_types(const char *path, const zt_llama_config *c, const read_state *st, zt_err *err)
{
    if (!st->layers_given)
        return ZT_OK;
    if (st->layers_len != c->num_hidden_layers)
        return zt_fail(err, ZT_EINPUT, "%s: key \"layer_types\" has %d entries, but num_hidden_layers is %d", path,
                       st->layers_len, c->num_hidden_layers);
    int window = zt_llama_attention_window(c);
    if (window && st->layers_sliding != st->layers_len)
        return zt_fail(err, ZT_EINPUT,
                       "%s: key \"layer_types\": %d \"full_attention\" layers with a sliding_window of %d; ztrain "
                       "applies Mistral's window to every layer (all \"sliding_attention\")",
                       path, st->layers_full, window);
    if (!window && st->layers_sliding)
        return zt_fail(err, ZT_EINPUT,
                       "%s: key \"layer_types\": \"sliding_attention\" layers need model_type \"mistral\" with a "
                       "sliding_window (ztrain implements no per-layer window)", path);
    return ZT_OK;
}

/* One line for the keys ztrain does not know, once per file and process (a run
 * reads its config more than once), as transformers keeps such keys quietly. */
static void note_unknown(const char *path, const read_state *st)
{
    static char last[512];
    if (strcmp(last, path) == 0)
        return;
    snprintf(last, sizeof last, "%s", path);
    fprintf(stderr, "ztrain: note: %s: key%s %s%s not used by ztrain; kept, and saved back with the model\n",
            path, st->nunknown > 1 ? "s" : "", st->unknown, st->nunknown > 8 ? " and more" : "");
}

/* The config in j (freed here) into *cfg; note: print the line about unknown keys. */
static int from_json(const char *path, zt_json *jp, zt_llama_config *cfg, int note, zt_err *err)
{
    zt_llama_config c;
    memset(&c, 0, sizeof c);
    c.max_position_embeddings = 2048;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.tie_word_embeddings = 0;
    c.initializer_range = 0.02;
    c.torch_dtype = ZT_F32;
    snprintf(c.model_type, sizeof c.model_type, "llama");

    if (!cJSON_IsObject(jp->root)) {
        zt_json_free(jp);
        return zt_fail(err, ZT_EINPUT, "%s: config is not a JSON object", path);
    }
    zt_doc doc;
    int rc = zt_json_doc(jp, path, &doc, err);
    zt_json_free(jp);
    if (rc)
        return rc;
    read_state st = {0};
    zt_schema_reader r;
    zt_schema_reader_init(&r, &config_json, path, &c, &st, err);
    rc = zt_schema_read_map(&r, &top, doc.root);
    zt_doc_free(&doc);
    const zt_schema_key *missing = rc == ZT_OK ? zt_schema_missing(&r, &top) : NULL;
    if (missing)
        rc = zt_fail(err, ZT_EINPUT, "%s: missing required key \"%s\"", path, missing->name);
    if (rc)
        return rc;

    if (st.dtype_set)
        c.torch_dtype = st.dtype;
    if (st.theta_set) {
        if (zt_schema_given(&r, &top, "rope_theta") && c.rope_theta != st.theta)
            return zt_fail(err, ZT_EINPUT, "%s: keys \"rope_theta\" and \"rope_parameters.rope_theta\" disagree",
                           path);
        c.rope_theta = st.theta;
    }
    /* rope_scaling (transformers 4) and rope_parameters (5) must agree where both say something */
    const rope_spec *rs = st.params.given ? &st.params : &st.scaling;
    if (st.params.given && st.scaling.given &&
        (st.params.llama3 != st.scaling.llama3 || memcmp(st.params.num, st.scaling.num, sizeof st.params.num)))
        return zt_fail(err, ZT_EINPUT, "%s: keys \"rope_scaling\" and \"rope_parameters\" disagree", path);
    if (rs->llama3) {
        c.rope_llama3 = 1;
        c.rope_factor = rs->num[0];
        c.rope_low_freq_factor = rs->num[1];
        c.rope_high_freq_factor = rs->num[2];
        c.rope_original_max_position_embeddings = rs->num[3];
    }
    /* Qwen2ForCausalLM: q/k/v biases always, head_dim always hidden_size / heads */
    int qwen2 = strcmp(c.model_type, "qwen2") == 0;
    c.qkv_bias = qwen2;
    if (qwen2 && zt_schema_given(&r, &top, "head_dim") && c.num_attention_heads > 0 &&
        c.head_dim * c.num_attention_heads != c.hidden_size)
        return zt_fail(err, ZT_EINPUT,
                       "%s: key \"head_dim\" (%d) is not hidden_size / num_attention_heads (%d / %d), which "
                       "Qwen2ForCausalLM always uses",
                       path, c.head_dim, c.hidden_size, c.num_attention_heads);
    /* Mistral: MistralForCausalLM masks keys more than sliding_window - 1 positions
     * back; an absent key is MistralConfig's default, 4096 (null: no window).
     * Llama: transformers' LlamaModel never reads the key, so a window short enough
     * to mask something would be silently ignored there; refuse it rather than
     * guess which of the two the user meant. */
    int has_window = zt_schema_given(&r, &top, "sliding_window") != 0; /* a non-null value */
    if (strcmp(c.model_type, "mistral") == 0) {
        if (!has_window && !st.window_null)
            c.sliding_window = ZT_MISTRAL_DEFAULT_WINDOW;
    } else if (!qwen2 && has_window && c.sliding_window < c.max_position_embeddings) {
        return zt_fail(err, ZT_EINPUT,
                       "%s: key \"sliding_window\" (%d) is shorter than max_position_embeddings (%d), but transformers' LlamaForCausalLM ignores sliding_window: set \"model_type\": \"mistral\" for sliding-window attention, or null",
                       path, c.sliding_window, c.max_position_embeddings);
    }
    /* HF's defaults: no num_key_value_heads means multi-head attention, no
     * head_dim means hidden_size split evenly over the heads.  An explicit 0
     * is not "absent": it stays and fails the check below. */
    if (!zt_schema_given(&r, &top, "num_key_value_heads"))
        c.num_key_value_heads = c.num_attention_heads;
    if (!zt_schema_given(&r, &top, "head_dim") && c.num_attention_heads > 0) {
        if (c.hidden_size % c.num_attention_heads != 0)
            return zt_fail(err, ZT_EINPUT,
                           "%s: hidden_size (%d) is not divisible by num_attention_heads (%d) and no head_dim is given",
                           path, c.hidden_size, c.num_attention_heads);
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if ((rc = zt_llama_config_check(&c, path, err)) || (rc = check_layer_types(path, &c, &st, err)))
        return rc;
    if (note && st.nunknown)
        note_unknown(path, &st);
    *cfg = c;
    return ZT_OK;
}

int zt_hf_config_read(const char *path, zt_llama_config *cfg, zt_err *err)
{
    zt_json j;
    int rc = zt_json_parse_file(path, CONFIG_MAX_BYTES, &j, err);
    return rc ? rc : from_json(path, &j, cfg, 1, err);
}

int zt_hf_config_parse(const char *name, const void *text, size_t len, zt_llama_config *cfg, zt_err *err)
{
    if (len > CONFIG_MAX_BYTES)
        return zt_fail(err, ZT_EINPUT, "%s: file is %zu bytes, more than the %u-byte limit", name, len,
                       CONFIG_MAX_BYTES);
    zt_json j;
    int rc = zt_json_parse(name, "file", text, len, 0, &j, err);
    return rc ? rc : from_json(name, &j, cfg, 0, err);
}

/* Values that parse but no model has, refused before they become all-inf
 * weights, NaN at step 1 or a gradient of zero (issue 44):
 *  - initializer_range above 1: N(0, sigma) weights with sigma > 1 already
 *    saturate every activation; 1e300 rounds to inf in fp32;
 *  - rope_theta below 1 or above 1e12: inv_freq = theta^(-2i/d) grows past 1
 *    (and overflows to inf for tiny theta) below 1; published models use 1e4..1e8;
 *  - rms_norm_eps outside [1e-30, 0.1]: below, it rounds to 0 in fp32 and a zero
 *    row divides by 0; above, it swamps mean(x^2) (1e300 gives a zero gradient);
 *  - head_dim above 2048 (published models: 64..256);
 *  - a parameter count (embedding, lm_head and every layer's matrices) above
 *    2^48: the sizes' product overflows the byte counts long before. */
static int check_ranges(const zt_llama_config *cfg, const char *where, zt_err *err)
{
    if (cfg->initializer_range > 1.0)
        return zt_fail(err, ZT_EINPUT, "%s: initializer_range %g is out of range (at most 1; models use about 0.02)",
                       where, cfg->initializer_range);
    if (cfg->rope_theta < 1.0 || cfg->rope_theta > 1e12)
        return zt_fail(err, ZT_EINPUT, "%s: rope_theta %g is out of range (1 to 1e12; models use 1e4 to 1e8)", where,
                       cfg->rope_theta);
    if (cfg->rms_norm_eps < 1e-30 || cfg->rms_norm_eps > 0.1)
        return zt_fail(err, ZT_EINPUT, "%s: rms_norm_eps %g is out of range (1e-30 to 0.1; models use 1e-6 to 1e-5)",
                       where, cfg->rms_norm_eps);
    if (cfg->head_dim > 2048)
        return zt_fail(err, ZT_EINPUT, "%s: head_dim %d is out of range (at most 2048; models use 64 to 256)", where,
                       cfg->head_dim);
    const double h = cfg->hidden_size, q = (double)cfg->num_attention_heads * cfg->head_dim,
                 kv = (double)cfg->num_key_value_heads * cfg->head_dim;
    const double layer = 2 * h + 2 * h * q + 2 * h * kv + 3 * h * cfg->intermediate_size;
    const double total = (double)cfg->num_hidden_layers * layer + 2 * (double)cfg->vocab_size * h + h;
    if (total > 281474976710656.0) /* 2^48 */
        return zt_fail(err, ZT_EINPUT, "%s: hidden_size %d, intermediate_size %d, num_hidden_layers %d, "
                       "num_attention_heads x head_dim %.0f and vocab_size %d make %.3g parameters: out of range "
                       "(at most 2^48)", where, cfg->hidden_size, cfg->intermediate_size, cfg->num_hidden_layers, q,
                       cfg->vocab_size, total);
    return ZT_OK;
}

int zt_llama_config_check(const zt_llama_config *cfg, const char *where, zt_err *err)
{
    const struct { const char *name; int v; } sizes[] = {
        {"hidden_size", cfg->hidden_size},
        {"intermediate_size", cfg->intermediate_size},
        {"num_hidden_layers", cfg->num_hidden_layers},
        {"num_attention_heads", cfg->num_attention_heads},
        {"num_key_value_heads", cfg->num_key_value_heads},
        {"head_dim", cfg->head_dim},
        {"vocab_size", cfg->vocab_size},
        {"max_position_embeddings", cfg->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return zt_fail(err, ZT_EINPUT, "%s: %s must be positive (got %d)", where, sizes[i].name,
                           sizes[i].v);
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return zt_fail(err, ZT_EINPUT,
                       "%s: num_attention_heads (%d) is not divisible by num_key_value_heads (%d)", where,
                       cfg->num_attention_heads, cfg->num_key_value_heads);
    /* RoPE rotates (even, odd) pairs of each head. */
    if (cfg->head_dim % 2 != 0)
        return zt_fail(err, ZT_EINPUT, "%s: head_dim (%d) must be even for rotary embeddings", where,
                       cfg->head_dim);
    /* q_proj has nh*hd rows; kernels index it with int. */
    if ((long long)cfg->num_attention_heads * cfg->head_dim > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: num_attention_heads * head_dim is too large", where);
    if (!(cfg->rms_norm_eps > 0) || !isfinite(cfg->rms_norm_eps))
        return zt_fail(err, ZT_EINPUT, "%s: rms_norm_eps must be a positive finite number", where);
    if (!(cfg->rope_theta > 0) || !isfinite(cfg->rope_theta))
        return zt_fail(err, ZT_EINPUT, "%s: rope_theta must be a positive finite number", where);
    if (!(cfg->initializer_range >= 0) || !isfinite(cfg->initializer_range))
        return zt_fail(err, ZT_EINPUT, "%s: initializer_range must be a non-negative finite number", where);
    if (!hf_dtype_name(cfg->torch_dtype))
        return zt_fail(err, ZT_EINPUT, "%s: torch_dtype is not float32, bfloat16 or float16", where);
    if (cfg->sliding_window < 0)
        return zt_fail(err, ZT_EINPUT, "%s: sliding_window must be positive, or 0 for none", where);
    if (!memchr(cfg->model_type, 0, sizeof cfg->model_type) ||
        (strcmp(cfg->model_type, "llama") != 0 && strcmp(cfg->model_type, "mistral") != 0 &&
         strcmp(cfg->model_type, "qwen2") != 0))
        return zt_fail(err, ZT_EINPUT, "%s: model_type must be \"llama\", \"mistral\" or \"qwen2\"", where);
    if (cfg->qkv_bias != (strcmp(cfg->model_type, "qwen2") == 0))
        return zt_fail(err, ZT_EINPUT, "%s: q/k/v biases come with model_type \"qwen2\" and only with it", where);
    if (cfg->rope_llama3) {
        const double v[4] = {cfg->rope_factor, cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                             cfg->rope_original_max_position_embeddings};
        for (int k = 0; k < 4; k++)
            if (!(v[k] > 0) || !isfinite(v[k]))
                return zt_fail(err, ZT_EINPUT, "%s: rope_scaling.%s must be a positive finite number", where,
                               rope_llama3_keys[k]);
        if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
            return zt_fail(err, ZT_EINPUT, "%s: rope_scaling.high_freq_factor must be larger than low_freq_factor",
                           where);
    }
    return check_ranges(cfg, where, err);
}

/* sliding_window as read: Mistral always writes it (null for no window, since an
 * absent key would mean 4096); Llama only when it carried one; Qwen2 its inert value. */
static int add_window(cJSON *o, const zt_llama_config *cfg, int mistral)
{
    if (cfg->sliding_window > 0)
        return cJSON_AddNumberToObject(o, "sliding_window", cfg->sliding_window) != NULL;
    return !mistral || cJSON_AddNullToObject(o, "sliding_window") != NULL;
}

/* v as a JSON float that reads back to the same double and keeps a decimal point
 * (8.0, not 8): transformers' rope validation wants floats for the llama3 factors and
 * warns on an integer. */
static int add_float(cJSON *o, const char *key, double v)
{
    char text[40];
    for (int prec = 15; prec <= 17; prec++) { /* the shortest that reads back; 17 always does */
        snprintf(text, sizeof text, "%.*g", prec, v);
        if (strtod(text, NULL) == v)
            break;
    }
    if (!strpbrk(text, ".eEn"))
        strcat(text, ".0");
    return cJSON_AddRawToObject(o, key, text) != NULL;
}

/* rope_scaling as transformers 4 writes it (transformers 5 reads it too): null, or
 * Llama 3.1's object, the factors as floats, original_max_position_embeddings as an
 * integer where it is one (transformers checks both types). */
static int add_rope_scaling(cJSON *o, const zt_llama_config *cfg)
{
    if (!cfg->rope_llama3)
        return cJSON_AddNullToObject(o, "rope_scaling") != NULL;
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    return rs && cJSON_AddStringToObject(rs, "rope_type", "llama3") && add_float(rs, "factor", cfg->rope_factor) &&
           add_float(rs, "low_freq_factor", cfg->rope_low_freq_factor) &&
           add_float(rs, "high_freq_factor", cfg->rope_high_freq_factor) &&
           cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                   cfg->rope_original_max_position_embeddings);
}

/* The keys only one family has: Llama's and Mistral's inert switches, or Qwen2's
 * (whose biases the architecture implies; Qwen2Config has no attention_bias). */
static int add_family_keys(cJSON *o, const zt_llama_config *cfg)
{
    if (cfg->qkv_bias)
        return cJSON_AddFalseToObject(o, "use_sliding_window") &&
               cJSON_AddNumberToObject(o, "max_window_layers", cfg->max_window_layers);
    return cJSON_AddFalseToObject(o, "attention_bias") && cJSON_AddFalseToObject(o, "mlp_bias");
}

static const char *architecture(const zt_llama_config *cfg)
{
    return strcmp(cfg->model_type, "mistral") == 0 ? "MistralForCausalLM"
           : strcmp(cfg->model_type, "qwen2") == 0 ? "Qwen2ForCausalLM"
                                                   : "LlamaForCausalLM";
}

int zt_hf_config_write(const char *path, const zt_llama_config *cfg, zt_err *err)
{
    int rc = zt_llama_config_check(cfg, path, err);
    if (rc)
        return rc;
    int mistral = strcmp(cfg->model_type, "mistral") == 0;
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    int ok = o && arch &&
             cJSON_AddItemToArray(arch, cJSON_CreateString(architecture(cfg))) &&
             cJSON_AddStringToObject(o, "model_type", cfg->model_type) &&
             cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size) &&
             cJSON_AddNumberToObject(o, "intermediate_size", cfg->intermediate_size) &&
             cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->num_hidden_layers) &&
             cJSON_AddNumberToObject(o, "num_attention_heads", cfg->num_attention_heads) &&
             cJSON_AddNumberToObject(o, "num_key_value_heads", cfg->num_key_value_heads) &&
             cJSON_AddNumberToObject(o, "head_dim", cfg->head_dim) &&
             cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size) &&
             cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position_embeddings) &&
             add_float(o, "rms_norm_eps", cfg->rms_norm_eps) &&
             add_float(o, "rope_theta", cfg->rope_theta) &&
             cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings != 0) &&
             add_float(o, "initializer_range", cfg->initializer_range) &&
             cJSON_AddStringToObject(o, "torch_dtype", hf_dtype_name(cfg->torch_dtype)) &&
             cJSON_AddStringToObject(o, "hidden_act", "silu") &&
             add_family_keys(o, cfg) &&
             add_float(o, "attention_dropout", 0.0) &&
             (cfg->qkv_bias || cJSON_AddNumberToObject(o, "pretraining_tp", 1)) &&
             add_rope_scaling(o, cfg) &&
             add_window(o, cfg, mistral);
    /* the float-typed keys of transformers' config classes through add_float, as
     * Python writes them (10000.0, 1e-05); cJSON would print 10000 */
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return zt_json_write_text(path, text, 1, err);
}
