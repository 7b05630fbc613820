/* hf_config.c — config.json of Hugging Face LlamaForCausalLM / MistralForCausalLM.
 *
 * Promise: a config that reads without error describes exactly the model ztrain
 * computes.  Every key is either understood, known to change nothing ztrain
 * computes, accepted only at the value that makes it inert, or refused by name
 * (SPEC §5: never silently ignored).  Integers must be JSON integer literals, as
 * HF's own constructors would fail on 64.0. */
#include "../model/config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h" /* zt_json, zt_write_atomic */

#define CONFIG_MAX_BYTES (16u << 20)

typedef enum key_kind {
    K_INT,          /* JSON integer into an int field */
    K_INT_OR_NULL,  /* same, null meaning "use the default" */
    K_NUM,          /* finite JSON number into a double field */
    K_BOOL,         /* true/false into an int field */
    K_DTYPE,        /* "float32" | "bfloat16" | "float16" (or null) */
    K_MODEL_TYPE,   /* "llama" | "mistral" */
    K_SILU,         /* only "silu" */
    K_FALSE,        /* only false (or absent) */
    K_NULL,         /* only null (or absent) */
    K_ROPE_PARAMS,  /* transformers 5: {"rope_type": "default", "rope_theta": x} or null */
    K_WINDOW,       /* sliding_window: null, or an integer no sequence can reach */
    K_ZERO,         /* only the number 0 */
    K_ONE,          /* only the integer 1 */
    K_ANY_STRING,   /* inert: a string or null */
    K_STRINGS,      /* inert: a list of strings or null */
    K_TOKEN_ID,     /* inert: an integer, a list of integers, or null */
    K_ANY_BOOL,     /* inert: true or false */
} key_kind;

#define F(field) offsetof(zt_llama_config, field)

static const struct key {
    const char *name;
    key_kind kind;
    size_t off;
    int required;
} keys[] = {
    {"hidden_size", K_INT, F(hidden_size), 1},
    {"intermediate_size", K_INT, F(intermediate_size), 1},
    {"num_hidden_layers", K_INT, F(num_hidden_layers), 1},
    {"num_attention_heads", K_INT, F(num_attention_heads), 1},
    {"vocab_size", K_INT, F(vocab_size), 1},
    {"num_key_value_heads", K_INT_OR_NULL, F(num_key_value_heads), 0},
    {"head_dim", K_INT_OR_NULL, F(head_dim), 0},
    {"max_position_embeddings", K_INT, F(max_position_embeddings), 0},
    {"rms_norm_eps", K_NUM, F(rms_norm_eps), 0},
    {"rope_theta", K_NUM, F(rope_theta), 0},
    {"initializer_range", K_NUM, F(initializer_range), 0},
    {"tie_word_embeddings", K_BOOL, F(tie_word_embeddings), 0},
    /* transformers >= 4.56 writes "dtype"; older versions "torch_dtype". */
    {"torch_dtype", K_DTYPE, 0, 0},
    {"dtype", K_DTYPE, 0, 0},
    {"model_type", K_MODEL_TYPE, 0, 0},
    {"hidden_act", K_SILU, 0, 0},
    {"attention_bias", K_FALSE, 0, 0},
    {"mlp_bias", K_FALSE, 0, 0},
    {"rope_scaling", K_NULL, 0, 0},
    {"rope_parameters", K_ROPE_PARAMS, 0, 0},
    {"sliding_window", K_WINDOW, 0, 0},
    {"attention_dropout", K_ZERO, 0, 0},
    {"pretraining_tp", K_ONE, 0, 0},
    {"architectures", K_STRINGS, 0, 0},
    {"_name_or_path", K_ANY_STRING, 0, 0},
    {"transformers_version", K_ANY_STRING, 0, 0},
    {"bos_token_id", K_TOKEN_ID, 0, 0},
    {"eos_token_id", K_TOKEN_ID, 0, 0},
    {"pad_token_id", K_TOKEN_ID, 0, 0},
    {"use_cache", K_ANY_BOOL, 0, 0},
};
#define NKEYS (sizeof keys / sizeof keys[0])

static size_t key_index(const char *name)
{
    size_t i = 0;
    while (i < NKEYS && strcmp(keys[i].name, name) != 0)
        i++;
    return i;
}

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

/* An integer from number token k; ZT_EINPUT naming key unless it is a JSON
 * integer literal that fits an int. */
static int get_int(const char *path, const zt_json *j, const cJSON *v, const char *key, size_t k,
                   int *out, zt_err *err)
{
    int64_t x = 0;
    int r = cJSON_IsNumber(v) ? zt_json_int(j, k, &x) : 1;
    if (r == 1)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a JSON integer (got %s)", path, key,
                       cJSON_IsNumber(v) ? "a non-integer number"
                       : cJSON_IsString(v) ? "a string"
                                           : "another type");
    if (r == 2 || x < INT_MIN || x > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is out of range for a 32-bit integer", path, key);
    *out = (int)x;
    return ZT_OK;
}

static int is_int_literal(const zt_json *j, size_t k, int64_t want)
{
    int64_t x;
    return zt_json_int(j, k, &x) == 0 && x == want;
}

/* What the keys say beyond the struct's fields, settled once all are read
 * (JSON objects have no key order to rely on). */
typedef struct read_state {
    int dtype_set;
    zt_dtype dtype;
    int theta_set;          /* rope_parameters.rope_theta given */
    double theta;
    int window_set;         /* sliding_window given as an integer */
    int window;
} read_state;

/* Apply member v (key kk, first number token k) to cfg. */
static int apply_key(const char *path, const zt_json *j, const struct key *kk, const cJSON *v,
                     size_t k, zt_llama_config *cfg, read_state *st, zt_err *err)
{
    const char *key = kk->name;
    char *field = (char *)cfg + kk->off;
    switch (kk->kind) {
    case K_INT_OR_NULL:
        if (cJSON_IsNull(v))
            return ZT_OK; /* defaults are filled in after all keys are read */
        /* fall through */
    case K_INT:
        return get_int(path, j, v, key, k, (int *)(void *)field, err);
    case K_NUM:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a finite number", path, key);
        memcpy(field, &v->valuedouble, sizeof(double));
        return ZT_OK;
    case K_BOOL:
        if (!cJSON_IsBool(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be true or false", path, key);
        *(int *)(void *)field = cJSON_IsTrue(v);
        return ZT_OK;
    case K_DTYPE: {
        if (cJSON_IsNull(v))
            return ZT_OK;
        zt_dtype dt;
        if (!cJSON_IsString(v) || hf_dtype_parse(v->valuestring, &dt) != 0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be \"float32\", \"bfloat16\" or \"float16\"",
                           path, key);
        if (st->dtype_set && dt != st->dtype)
            return zt_fail(err, ZT_EINPUT, "%s: keys \"torch_dtype\" and \"dtype\" disagree", path);
        st->dtype = dt;
        st->dtype_set = 1;
        return ZT_OK;
    }
    case K_MODEL_TYPE:
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "llama") != 0 && strcmp(v->valuestring, "mistral") != 0))
            return zt_fail(err, ZT_EINPUT, "%s: key \"model_type\" must be \"llama\" or \"mistral\"%s%s%s",
                           path, cJSON_IsString(v) ? " (got \"" : "",
                           cJSON_IsString(v) ? v->valuestring : "", cJSON_IsString(v) ? "\")" : "");
        snprintf(cfg->model_type, sizeof cfg->model_type, "%s", v->valuestring);
        return ZT_OK;
    case K_SILU:
        if (!cJSON_IsString(v) || strcmp(v->valuestring, "silu") != 0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only \"silu\" is supported%s%s%s", path, key,
                           cJSON_IsString(v) ? " (got \"" : "", cJSON_IsString(v) ? v->valuestring : "",
                           cJSON_IsString(v) ? "\")" : "");
        return ZT_OK;
    case K_FALSE:
        if (!cJSON_IsFalse(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only false is supported (no biases in ztrain's Llama)",
                           path, key);
        return ZT_OK;
    case K_NULL:
        if (!cJSON_IsNull(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only null is supported", path, key);
        return ZT_OK;
    case K_ROPE_PARAMS:
        if (cJSON_IsNull(v))
            return ZT_OK;
        if (!cJSON_IsObject(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be an object or null", path, key);
        for (const cJSON *m = v->child; m; m = m->next) {
            if (strcmp(m->string, "rope_type") == 0) {
                if (!cJSON_IsString(m) || strcmp(m->valuestring, "default") != 0)
                    return zt_fail(err, ZT_EINPUT,
                                   "%s: key \"rope_parameters.rope_type\": only \"default\" is supported (no RoPE scaling)",
                                   path);
            } else if (strcmp(m->string, "rope_theta") == 0) {
                if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble))
                    return zt_fail(err, ZT_EINPUT, "%s: key \"rope_parameters.rope_theta\" must be a finite number",
                                   path);
                st->theta = m->valuedouble;
                st->theta_set = 1;
            } else {
                return zt_fail(err, ZT_EINPUT,
                               "%s: key \"rope_parameters.%s\" is not supported (only rope_type \"default\" and rope_theta)",
                               path, m->string);
            }
        }
        return ZT_OK;
    case K_WINDOW:
        if (cJSON_IsNull(v))
            return ZT_OK;
        st->window_set = 1;
        return get_int(path, j, v, key, k, &st->window, err);
    case K_ZERO:
        if (!cJSON_IsNumber(v) || v->valuedouble != 0.0)
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only 0 is supported (no dropout)", path, key);
        return ZT_OK;
    case K_ONE:
        if (!cJSON_IsNumber(v) || !is_int_literal(j, k, 1))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\": only 1 is supported", path, key);
        return ZT_OK;
    case K_ANY_STRING:
        if (!cJSON_IsString(v) && !cJSON_IsNull(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a string", path, key);
        return ZT_OK;
    case K_STRINGS:
        if (cJSON_IsNull(v))
            return ZT_OK;
        if (!cJSON_IsArray(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a list of strings", path, key);
        for (const cJSON *e = v->child; e; e = e->next)
            if (!cJSON_IsString(e))
                return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a list of strings", path, key);
        return ZT_OK;
    case K_TOKEN_ID: {
        if (cJSON_IsNull(v))
            return ZT_OK;
        int64_t x;
        if (cJSON_IsNumber(v) && zt_json_int(j, k, &x) == 0)
            return ZT_OK;
        if (cJSON_IsArray(v)) {
            size_t kk2 = k;
            const cJSON *e = v->child;
            for (; e; e = e->next)
                if (!cJSON_IsNumber(e) || zt_json_int(j, kk2++, &x) != 0)
                    break;
            if (!e)
                return ZT_OK;
        }
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be an integer, a list of integers or null",
                       path, key);
    }
    case K_ANY_BOOL:
        if (!cJSON_IsBool(v))
            return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be true or false", path, key);
        return ZT_OK;
    }
    return zt_fail(err, ZT_EFAIL, "%s: internal: key kind for \"%s\"", path, key);
}

int zt_hf_config_read(const char *path, zt_llama_config *cfg, zt_err *err)
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

    zt_json j;
    int rc = zt_json_parse_file(path, CONFIG_MAX_BYTES, &j, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(j.root)) {
        zt_json_free(&j);
        return zt_fail(err, ZT_EINPUT, "%s: config is not a JSON object", path);
    }
    int seen[NKEYS] = {0}, given[NKEYS] = {0}; /* given: present and not null */
    read_state st = {0};
    size_t k = 0; /* index of the next number token, in document order */
    for (const cJSON *m = j.root->child; m && rc == ZT_OK; m = m->next) {
        size_t nk = zt_json_count_numbers(m);
        size_t i = key_index(m->string);
        if (i == NKEYS)
            rc = zt_fail(err, ZT_EINPUT,
                         "%s: unsupported key \"%s\" (ztrain implements LlamaForCausalLM / MistralForCausalLM only)",
                         path, m->string);
        else if (seen[i]++)
            rc = zt_fail(err, ZT_EINPUT, "%s: duplicate key \"%s\"", path, m->string);
        else
            rc = apply_key(path, &j, &keys[i], m, k, &c, &st, err);
        if (i < NKEYS)
            given[i] = !cJSON_IsNull(m);
        k += nk;
    }
    for (size_t i = 0; i < NKEYS && rc == ZT_OK; i++)
        if (keys[i].required && !seen[i])
            rc = zt_fail(err, ZT_EINPUT, "%s: missing required key \"%s\"", path, keys[i].name);
    zt_json_free(&j);
    if (rc)
        return rc;

    if (st.dtype_set)
        c.torch_dtype = st.dtype;
    if (st.theta_set) {
        if (given[key_index("rope_theta")] && c.rope_theta != st.theta)
            return zt_fail(err, ZT_EINPUT, "%s: keys \"rope_theta\" and \"rope_parameters.rope_theta\" disagree",
                           path);
        c.rope_theta = st.theta;
    }
    /* A window at least as long as any sequence the model accepts masks
     * nothing; a shorter one would change the attention ztrain computes. */
    if (st.window_set && st.window < c.max_position_embeddings)
        return zt_fail(err, ZT_EINPUT,
                       "%s: key \"sliding_window\" (%d) is shorter than max_position_embeddings (%d): sliding-window attention is not supported (use null)",
                       path, st.window, c.max_position_embeddings);
    /* HF's defaults: no num_key_value_heads means multi-head attention, no
     * head_dim means hidden_size split evenly over the heads.  An explicit 0
     * is not "absent": it stays and fails the check below. */
    if (!given[key_index("num_key_value_heads")])
        c.num_key_value_heads = c.num_attention_heads;
    if (!given[key_index("head_dim")] && c.num_attention_heads > 0) {
        if (c.hidden_size % c.num_attention_heads != 0)
            return zt_fail(err, ZT_EINPUT,
                           "%s: hidden_size (%d) is not divisible by num_attention_heads (%d) and no head_dim is given",
                           path, c.hidden_size, c.num_attention_heads);
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    rc = zt_llama_config_check(&c, path, err);
    if (rc)
        return rc;
    *cfg = c;
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
    if (!memchr(cfg->model_type, 0, sizeof cfg->model_type) ||
        (strcmp(cfg->model_type, "llama") != 0 && strcmp(cfg->model_type, "mistral") != 0))
        return zt_fail(err, ZT_EINPUT, "%s: model_type must be \"llama\" or \"mistral\"", where);
    return ZT_OK;
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
             cJSON_AddItemToArray(arch, cJSON_CreateString(mistral ? "MistralForCausalLM" : "LlamaForCausalLM")) &&
             cJSON_AddStringToObject(o, "model_type", cfg->model_type) &&
             cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size) &&
             cJSON_AddNumberToObject(o, "intermediate_size", cfg->intermediate_size) &&
             cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->num_hidden_layers) &&
             cJSON_AddNumberToObject(o, "num_attention_heads", cfg->num_attention_heads) &&
             cJSON_AddNumberToObject(o, "num_key_value_heads", cfg->num_key_value_heads) &&
             cJSON_AddNumberToObject(o, "head_dim", cfg->head_dim) &&
             cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size) &&
             cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position_embeddings) &&
             cJSON_AddNumberToObject(o, "rms_norm_eps", cfg->rms_norm_eps) &&
             cJSON_AddNumberToObject(o, "rope_theta", cfg->rope_theta) &&
             cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings != 0) &&
             cJSON_AddNumberToObject(o, "initializer_range", cfg->initializer_range) &&
             cJSON_AddStringToObject(o, "torch_dtype", hf_dtype_name(cfg->torch_dtype)) &&
             cJSON_AddStringToObject(o, "hidden_act", "silu") &&
             cJSON_AddFalseToObject(o, "attention_bias") &&
             cJSON_AddFalseToObject(o, "mlp_bias") &&
             cJSON_AddNumberToObject(o, "attention_dropout", 0.0) &&
             cJSON_AddNumberToObject(o, "pretraining_tp", 1) &&
             cJSON_AddNullToObject(o, "rope_scaling") &&
             (!mistral || cJSON_AddNullToObject(o, "sliding_window"));
    /* cJSON prints doubles with enough digits to read back the same value. */
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory building config.json", path);
    zt_wpart parts[2] = {{text, strlen(text)}, {"\n", 1}};
    rc = zt_write_atomic(path, parts, 2, err);
    cJSON_free(text);
    return rc;
}
