/* merge_adapter.c — `ztrain merge-adapter BASE ADAPTER OUT`: LoRA adapters (a PEFT
 * adapter directory, PEFT's or ztrain's: io/peft_adapter.h) merged into the base model's
 * weights, W + s B A for each adapted projection (model/lora.h, zt_lora_merge), written
 * as a Hugging Face model directory in the base's dtype, with the base's config keys,
 * generation config and tokenizer carried (io/hf_carry.h): what PEFT's
 * merge_and_unload() followed by save_pretrained gives.  The whole model is held in
 * fp32 while merging. */
#include <stdio.h>
#include <string.h>

#include "../core/fs.h"
#include "../core/mem.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../io/peft_adapter.h"
#include "../model/lora.h"
#include "commands.h"
#include "flags.h"

typedef struct merge_state {
    const zt_layout *lay; /* the base's parameters first, then the adapters' */
    float **vals;         /* per parameter of lay, fp32 */
    zt_dtype dtype;       /* the base weights' dtype (the first tensor's) */
    int have_dtype, oom;
} merge_state;

static float *take(merge_state *m, int i, const void *src, zt_dtype dt)
{
    const zt_param *p = &m->lay->params[i];
    m->vals[i] = zt_alloc(ZT_MEM_OTHER, p->numel * sizeof(float));
    if (!m->vals[i]) {
        m->oom = 1;
        return NULL;
    }
    for (size_t k = 0; k < p->numel; k++)
        m->vals[i][k] = zt_load_f32(src, dt, k);
    return m->vals[i];
}

/* A base tensor: the plain layout's parameter i is the adapted layout's i (the adapters
 * follow the base's parameters). */
static void base_sink(void *ctx, const zt_param *p, const void *src, zt_dtype dt)
{
    merge_state *m = ctx;
    if (!m->have_dtype)
        m->dtype = dt, m->have_dtype = 1;
    for (int i = 0; i < m->lay->nparams; i++)
        if (!m->lay->params[i].lora && !strcmp(m->lay->params[i].name, p->name)) {
            take(m, i, src, dt);
            return;
        }
}

static int adapter_sink(void *ctx, const zt_param *p, const float *vals, zt_err *err)
{
    merge_state *m = ctx;
    int i = (int)(p - m->lay->params);
    if (!take(m, i, vals, ZT_F32))
        return zt_fail(err, ZT_EFAIL, "out of memory reading %s", p->name);
    return ZT_OK;
}

/* W += s B A for every adapted projection of every layer. */
static void merge_all(merge_state *m, const zt_lora *l)
{
    const zt_layout *lay = m->lay;
    double s = zt_lora_scale(l);
    for (int layer = 0; layer < lay->num_layers; layer++)
        for (int kind = 0; kind < ZT_P_NKINDS; kind++) {
            int ia = lay->lora_index[(layer * ZT_P_NKINDS + kind) * 2];
            int ib = lay->lora_index[(layer * ZT_P_NKINDS + kind) * 2 + 1];
            int iw = lay->param_index[layer * ZT_P_NKINDS + kind];
            if (ia < 0 || ib < 0 || iw < 0)
                continue;
            const zt_param *w = &lay->params[iw];
            zt_lora_merge(m->vals[iw], m->vals[ia], m->vals[ib], (int)w->shape[0], (int)w->shape[1], l->r, s);
        }
}

/* Read, merge, write: the base's weights into fp32, the adapters beside them. */
static int merge(const char *base, const char *adapter, const char *out, size_t max_shard, zt_err *err)
{
    zt_llama_config cfg;
    zt_lora l;
    zt_layout plain, lay;
    int rc = zt_hf_read_config_dir(base, &cfg, err);
    if (rc || (rc = zt_peft_adapter_read_config(adapter, &l, err)) ||
        (rc = zt_layout_build(&plain, &cfg, ZT_WRAP_NONE, 0, 1, err)))
        return rc;
    if ((rc = zt_layout_build(&lay, &cfg, ZT_WRAP_NONE, 0, 1, err)) || (rc = zt_lora_layout(&lay, &l, err))) {
        zt_layout_free(&plain);
        return rc;
    }
    merge_state m = {.lay = &lay, .vals = zt_alloc(ZT_MEM_OTHER, (size_t)lay.nparams * sizeof(float *))};
    if (!m.vals)
        rc = zt_fail(err, ZT_EFAIL, "out of memory merging into %s", out);
    else
        memset(m.vals, 0, (size_t)lay.nparams * sizeof(float *));
    if (!rc && !(rc = zt_hf_load_params_to(base, &plain, base_sink, &m, err)) && m.oom)
        rc = zt_fail(err, ZT_EFAIL, "out of memory reading %s", base);
    if (!rc && !(rc = zt_peft_adapter_read(adapter, &lay, adapter_sink, &m, err))) {
        merge_all(&m, &l);
        rc = zt_hf_save_tensors(out, &cfg, &plain, m.vals, m.dtype, max_shard, err);
    }
    for (int i = 0; m.vals && i < lay.nparams; i++)
        zt_free(ZT_MEM_OTHER, m.vals[i], m.vals[i] ? lay.params[i].numel * sizeof(float) : 0);
    zt_free(ZT_MEM_OTHER, m.vals, m.vals ? (size_t)lay.nparams * sizeof(float *) : 0);
    zt_layout_free(&plain);
    zt_layout_free(&lay);
    return rc;
}

int zt_cmd_merge_adapter(int argc, char **argv, zt_err *err)
{
    const char *max_shard = "5GB";
    zt_flag flags[] = {
        {"max_shard_size", ZT_FLAG_STR, &max_shard, "split the weights into shards above this size, e.g. 5GB, 200MB (default 5GB, as HF)", 1, 0, 0},
    };
    const char *usage = "usage: ztrain merge-adapter BASE_MODEL_DIR ADAPTER_DIR OUTPUT_DIR [--max_shard_size SIZE]";
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, 1, usage);
        return ZT_OK;
    }
    if (argc < 3 || !strncmp(argv[0], "--", 2) || !strncmp(argv[1], "--", 2) || !strncmp(argv[2], "--", 2))
        return zt_fail(err, ZT_EINPUT, "%s", usage);
    const char *base = argv[0], *adapter = argv[1], *out = argv[2];
    int rc = zt_flags_parse(flags, 1, argc - 3, argv + 3, "ztrain merge-adapter", err);
    size_t max_shard_bytes = 0;
    if (rc || (rc = zt_cli_parse_size("max_shard_size", max_shard, &max_shard_bytes, err)))
        return rc;
    if (zt_same_file(base, out) || zt_same_file(adapter, out))
        return zt_fail(err, ZT_EINPUT, "merge-adapter: OUTPUT_DIR %s is the %s directory; give another", out,
                       zt_same_file(base, out) ? "base model's" : "adapter's");
    if ((rc = zt_hf_check_outputs(out, err)) || (rc = merge(base, adapter, out, max_shard_bytes, err)) ||
        (rc = zt_hf_carry_model(out, base, NULL, err))) /* config keys, generation config, tokenizer */
        return rc;
    printf("merged %s into %s: %s\n", adapter, base, out);
    return ZT_OK;
}
