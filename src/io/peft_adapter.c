/* peft_adapter.c — LoRA adapters in PEFT's format (peft_adapter.h). */
#include "peft_adapter.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "safetensors.h"

/* adapter_config.json: the adapter's own keys, then the defaults PEFT writes for a plain
 * LoRA (no DoRA, no patterns, nothing else saved), so a reader sees every key it expects. */
static int write_config(const char *path, const zt_lora *l, const char *base_model, zt_err *err)
{
    static const char *const names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                        "down_proj"};
    static const zt_param_kind kinds[] = {ZT_P_Q, ZT_P_K, ZT_P_V, ZT_P_O, ZT_P_GATE, ZT_P_UP, ZT_P_DOWN};
    cJSON *o = cJSON_CreateObject();
    cJSON *targets = cJSON_AddArrayToObject(o, "target_modules");
    int ok = o && targets;
    for (size_t i = 0; ok && i < sizeof kinds / sizeof kinds[0]; i++)
        if (l->targets >> kinds[i] & 1u)
            ok = cJSON_AddItemToArray(targets, cJSON_CreateString(names[i]));
    ok = ok && cJSON_AddStringToObject(o, "peft_type", "LORA") && cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM") &&
         cJSON_AddStringToObject(o, "base_model_name_or_path", base_model ? base_model : "") &&
         cJSON_AddNumberToObject(o, "r", l->r) && cJSON_AddNumberToObject(o, "lora_alpha", l->alpha) &&
         cJSON_AddNumberToObject(o, "lora_dropout", l->dropout) && cJSON_AddBoolToObject(o, "use_rslora", l->rslora) &&
         cJSON_AddStringToObject(o, "bias", "none") && cJSON_AddBoolToObject(o, "fan_in_fan_out", 0) &&
         cJSON_AddBoolToObject(o, "inference_mode", 1) && cJSON_AddBoolToObject(o, "init_lora_weights", 1) &&
         cJSON_AddBoolToObject(o, "use_dora", 0) && cJSON_AddNullToObject(o, "modules_to_save") &&
         cJSON_AddNullToObject(o, "layers_to_transform") && cJSON_AddNullToObject(o, "layers_pattern") &&
         cJSON_AddObjectToObject(o, "rank_pattern") && cJSON_AddObjectToObject(o, "alpha_pattern");
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return zt_json_write_text(path, text, 1, err);
}

int zt_peft_adapter_write(const char *dir, const zt_layout *lay, const zt_lora *l, float *const *vals,
                          const char *base_model, zt_err *err)
{
    int n = 0, rc = zt_mkdirs(dir, err);
    for (int i = 0; i < lay->nparams; i++)
        n += lay->params[i].lora != 0;
    zt_st_out *outs = rc ? NULL : zt_alloc(ZT_MEM_OTHER, (size_t)(n ? n : 1) * sizeof *outs);
    if (!rc && !outs)
        rc = zt_fail(err, ZT_EFAIL, "out of memory writing the adapters to %s", dir);
    for (int i = 0, k = 0; !rc && i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (p->lora)
            outs[k++] = (zt_st_out){.name = p->name, .dtype = ZT_F32, .ndim = 2,
                                    .shape = {p->shape[0], p->shape[1]}, .data = vals[i]};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc)
        rc = zt_st_write(path, outs, n, "pt", err);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (!rc)
        rc = write_config(path, l, base_model, err);
    zt_free(ZT_MEM_OTHER, outs, outs ? (size_t)(n ? n : 1) * sizeof *outs : 0);
    return rc;
}

/* ---- reading: adapter_config.json ------------------------------------------ */

/* Keys whose value changes the adapted model's math (or what a run would train) when
 * set, and which ztrain does not build: each must be absent or inert (null, false, {},
 * []).  Every other key (init_lora_weights, inference_mode, task_type, peft_version,
 * base_model_name_or_path, the initialisation methods' configs, ...) does not change
 * y = x W^T + s (x A^T) B^T once the weights are loaded, and is ignored, so a newer
 * PEFT's new inert keys still load. */
static const char *const unbuilt_keys[] = {
    "use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern",
    "modules_to_save", "fan_in_fan_out", "use_qalora", "lora_bias", "trainable_token_indices",
    "layer_replication", "target_parameters", "exclude_modules", "megatron_config", "use_bdlora",
    "alora_invocation_tokens", "velora_config", "monteclora_config", "arrow_config", "kasa_config"};

static int inert(const cJSON *v)
{
    return cJSON_IsNull(v) || cJSON_IsFalse(v) ||
           ((cJSON_IsObject(v) || cJSON_IsArray(v)) && cJSON_GetArraySize(v) == 0);
}

static int config_targets(const char *path, const cJSON *v, unsigned *targets, zt_err *err)
{
    enum { MAX = 16 };
    const char *names[MAX];
    int n = 0;
    if (cJSON_IsString(v))
        names[n++] = v->valuestring;
    else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0 && cJSON_GetArraySize(v) <= MAX)
        for (const cJSON *e = v->child; e; e = e->next) {
            if (!cJSON_IsString(e))
                return zt_fail(err, ZT_EINPUT, "%s: target_modules: expected names (strings)", path);
            names[n++] = e->valuestring;
        }
    else
        return zt_fail(err, ZT_EINPUT, "%s: target_modules: expected all-linear or a list of 1 to %d projection "
                       "names", path, MAX);
    char what[4200];
    snprintf(what, sizeof what, "%s: target_modules", path);
    return zt_lora_targets_parse(what, names, n, targets, err);
}

/* r, lora_alpha, use_rslora, target_modules and the keys that must hold ztrain's
 * values, from the parsed object o of path. */
static int config_values(const char *path, const cJSON *o, zt_lora *l, zt_err *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA"))
        return zt_fail(err, ZT_EINPUT, "%s: peft_type: expected \"LORA\"", path);
    for (size_t i = 0; i < sizeof unbuilt_keys / sizeof unbuilt_keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, unbuilt_keys[i]);
        if (v && !inert(v))
            return zt_fail(err, ZT_EINPUT, "%s: %s is set, which changes LoRA's math and is not implemented "
                           "(expected null, false or empty)", path, unbuilt_keys[i]);
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "use_rslora");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "bias");
    if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > (1 << 20) || r->valuedouble != (int)r->valuedouble)
        return zt_fail(err, ZT_EINPUT, "%s: r: expected an integer from 1 to %d", path, 1 << 20);
    if (!cJSON_IsNumber(alpha) || !(alpha->valuedouble > 0) || !(alpha->valuedouble < 1e30))
        return zt_fail(err, ZT_EINPUT, "%s: lora_alpha: expected a number > 0", path);
    if (rs && !cJSON_IsBool(rs))
        return zt_fail(err, ZT_EINPUT, "%s: use_rslora: expected true or false", path);
    if (drop && !(cJSON_IsNumber(drop) && drop->valuedouble >= 0.0 && drop->valuedouble < 1.0))
        return zt_fail(err, ZT_EINPUT, "%s: lora_dropout: expected a probability from 0 to below 1", path);
    if (bias && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none")))
        return zt_fail(err, ZT_EINPUT, "%s: bias: only \"none\" is implemented (no bias is trained)", path);
    *l = (zt_lora){.r = (int)r->valuedouble, .alpha = alpha->valuedouble, .rslora = cJSON_IsTrue(rs),
                   .dropout = drop ? drop->valuedouble : 0.0};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    if (!t || cJSON_IsNull(t))
        return zt_lora_targets_parse("target_modules", NULL, 0, &l->targets, err); /* PEFT's default */
    return config_targets(path, t, &l->targets, err);
}

int zt_peft_adapter_read_config(const char *dir, zt_lora *l, zt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    zt_json j;
    int rc = zt_json_parse_file(path, 1 << 20, &j, err);
    if (rc)
        return rc;
    int oom = 0;
    const char *dup = zt_json_duplicate_key(j.root, &oom);
    if (oom)
        rc = zt_fail(err, ZT_EFAIL, "out of memory reading %s", path);
    else if (dup)
        rc = zt_fail(err, ZT_EINPUT, "%s: key %s appears twice", path, dup);
    else if (!cJSON_IsObject(j.root))
        rc = zt_fail(err, ZT_EINPUT, "%s: expected a JSON object", path);
    else
        rc = config_values(path, j.root, l, err);
    zt_json_free(&j);
    return rc;
}

/* ---- reading: adapter_model.safetensors ------------------------------------ */

static int read_tensors(const zt_st_file *f, const zt_layout *lay, zt_peft_sink sink, void *ctx, zt_err *err)
{
    const char *path = zt_st_path(f);
    int want = 0;
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        if (!p->lora)
            continue;
        want++;
        const zt_st_tensor *t = zt_st_find(f, p->name);
        if (!t)
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s is missing (the adapter's config and the model ask "
                           "for it)", path, p->name);
        if (!t->has_zt_dtype)
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s has dtype %s; expected F32, BF16 or F16", path, p->name,
                           t->st_dtype);
        if (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1]) {
            char got[160] = "";
            for (int d = 0, n = 0; d < t->ndim && n < (int)sizeof got - 24; d++)
                n += snprintf(got + n, sizeof got - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s: expected shape [%lld, %lld], got [%s]", path, p->name,
                           (long long)p->shape[0], (long long)p->shape[1], got);
        }
        float *buf = zt_alloc(ZT_MEM_OTHER, p->numel * sizeof *buf);
        if (!buf)
            return zt_fail(err, ZT_EFAIL, "out of memory reading %s from %s", p->name, path);
        for (size_t k = 0; k < p->numel; k++) /* F32, BF16 and F16 widen to fp32 exactly */
            buf[k] = zt_load_f32(t->data, t->dtype, k);
        int rc = sink(ctx, p, buf, err);
        zt_free(ZT_MEM_OTHER, buf, p->numel * sizeof *buf);
        if (rc)
            return rc;
    }
    for (int i = 0; want != zt_st_count(f) && i < zt_st_count(f); i++) { /* one the layout has no place for */
        const char *name = zt_st_get(f, i)->name;
        int known = 0;
        for (int k = 0; !known && k < lay->nparams; k++)
            known = lay->params[k].lora && !strcmp(lay->params[k].name, name);
        if (!known)
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s is not an adapter of this model with this config (r, "
                           "target_modules)", path, name);
    }
    return ZT_OK;
}

int zt_peft_adapter_read(const char *dir, const zt_layout *lay, zt_peft_sink sink, void *ctx, zt_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    zt_st_file *f = NULL;
    int rc = zt_st_open(path, &f, err);
    if (rc)
        return rc;
    rc = read_tensors(f, lay, sink, ctx, err);
    zt_st_close(f);
    return rc;
}
