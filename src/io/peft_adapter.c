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
         cJSON_AddNumberToObject(o, "lora_dropout", 0.0) && cJSON_AddBoolToObject(o, "use_rslora", l->rslora) &&
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
