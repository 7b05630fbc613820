/* weights.c — see weights.h. */
#include "weights.h"

#include <string.h>
#include <xxhash.h>

#include "../comm/comm.h"
#include "../core/mem.h"
#include "../io/peft_adapter.h"
#include "ckpt_identity.h"

static void engine_sink(void *eng, const zt_param *p, const void *src, zt_dtype src_dt)
{
    zt_engine_set_param(eng, p, src, src_dt);
}

int zt_hf_load_params(const char *dir, const zt_layout *lay, zt_engine *eng, zt_err *err)
{
    int rc = zt_ckpt_check_model_dir(dir, err);
    return rc ? rc : zt_hf_load_params_to(dir, lay, engine_sink, eng, err);
}

/* What a save writes from the gathered values (on the writer rank). */
typedef struct save_what {
    const zt_llama_config *cfg;
    zt_dtype dtype;
    size_t max_shard_bytes;
    const char *const *meta;
    const zt_lora *lora; /* LoRA: the adapters only, in PEFT's format */
    const char *base_model;
} save_what;

/* Collective: every parameter gathered to full tensors, then written as `what` says. */
static int save_gathered(const char *dir, const zt_layout *lay, zt_engine *eng, const save_what *what, int writer,
                         zt_err *err)
{
    float **vals = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *vals);
    int rc = vals ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    if (vals) /* LoRA: the adapters alone are gathered, not the frozen base */
        memset(vals, 0, (size_t)lay->nparams * sizeof *vals);
    for (int i = 0; i < lay->nparams && rc == ZT_OK; i++)
        if ((!what->lora || lay->params[i].lora) &&
            !(vals[i] = zt_alloc(ZT_MEM_OTHER, lay->params[i].numel * sizeof(float))))
            rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    /* every rank agrees on the status, whatever happened locally: all gather, or none */
    if ((rc = zt_comm_agree(zt_engine_comm(eng), rc, err)) == ZT_OK) {
        rc = zt_engine_full_params(eng, vals, err);
        if (rc == ZT_OK && writer)
            rc = what->lora ? zt_peft_adapter_write(dir, lay, what->lora, vals, what->base_model, err)
                            : zt_hf_save_tensors_meta(dir, what->cfg, lay, vals, what->dtype, what->max_shard_bytes,
                                                      what->meta, err);
    }
    for (int i = 0; vals && i < lay->nparams; i++)
        zt_free(ZT_MEM_OTHER, vals[i], vals[i] ? lay->params[i].numel * sizeof(float) : 0);
    zt_free(ZT_MEM_OTHER, vals, vals ? (size_t)lay->nparams * sizeof *vals : 0);
    return rc;
}

int zt_hf_save(const char *dir, const zt_llama_config *cfg, const zt_layout *lay, zt_engine *eng,
               zt_dtype dtype, size_t max_shard_bytes, const char *const *meta, int writer, zt_err *err)
{
    save_what what = {.cfg = cfg, .dtype = dtype, .max_shard_bytes = max_shard_bytes, .meta = meta};
    return save_gathered(dir, lay, eng, &what, writer, err);
}

int zt_lora_save(const char *dir, const zt_layout *lay, const zt_lora *l, zt_engine *eng, const char *base_model,
                 int writer, zt_err *err)
{
    save_what what = {.lora = l, .base_model = base_model};
    return save_gathered(dir, lay, eng, &what, writer, err);
}

/* Each parameter's hash, at its layout index (the reader hands them in file order). */
typedef struct digest_ctx {
    const zt_layout *lay;
    uint64_t *h;
    int oom;
} digest_ctx;

static void digest_sink(void *ctx, const zt_param *p, const void *src, zt_dtype src_dt)
{
    digest_ctx *d = ctx;
    float *f = zt_alloc(ZT_MEM_OTHER, p->numel * sizeof *f);
    if (!f) {
        d->oom = 1;
        return;
    }
    zt_convert(f, ZT_F32, src, src_dt, p->numel);
    XXH64_hash_t seed = XXH3_64bits(p->name, strlen(p->name));
    d->h[p - d->lay->params] = XXH3_64bits_withSeed(f, p->numel * sizeof *f, seed);
    zt_free(ZT_MEM_OTHER, f, p->numel * sizeof *f);
}

int zt_base_digest(const char *dir, const zt_llama_config *cfg, uint64_t *digest, zt_err *err)
{
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, ZT_WRAP_TRANSFORMER, 0, 1, err);
    if (rc)
        return rc;
    size_t bytes = (size_t)lay.nparams * sizeof(uint64_t);
    digest_ctx d = {&lay, zt_alloc(ZT_MEM_OTHER, bytes), 0};
    if (!d.h)
        rc = zt_fail(err, ZT_EFAIL, "out of memory for the digest of %s", dir);
    if (rc == ZT_OK && (rc = zt_hf_load_params_to(dir, &lay, digest_sink, &d, err)) == ZT_OK && d.oom)
        rc = zt_fail(err, ZT_EFAIL, "out of memory for the digest of %s", dir);
    if (rc == ZT_OK)
        *digest = XXH3_64bits(d.h, bytes);
    zt_free(ZT_MEM_OTHER, d.h, d.h ? bytes : 0);
    zt_layout_free(&lay);
    return rc;
}
