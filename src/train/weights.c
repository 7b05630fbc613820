/* weights.c — see weights.h. */
#include "weights.h"

#include "../comm/comm.h"
#include "../core/mem.h"
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

int zt_hf_save(const char *dir, const zt_llama_config *cfg, const zt_layout *lay, zt_engine *eng,
               zt_dtype dtype, size_t max_shard_bytes, const char *const *meta, int writer, zt_err *err)
{
    float **vals = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *vals);
    int rc = vals ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    for (int i = 0; i < lay->nparams && rc == ZT_OK; i++)
        if (!(vals[i] = zt_alloc(ZT_MEM_OTHER, lay->params[i].numel * sizeof(float))))
            rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    /* every rank agrees on the status, whatever happened locally: all gather, or none */
    if ((rc = zt_comm_agree(zt_engine_comm(eng), rc, err)) == ZT_OK) {
        rc = zt_engine_full_params(eng, vals, err);
        if (rc == ZT_OK && writer)
            rc = zt_hf_save_tensors_meta(dir, cfg, lay, vals, dtype, max_shard_bytes, meta, err);
    }
    for (int i = 0; vals && i < lay->nparams; i++)
        zt_free(ZT_MEM_OTHER, vals[i], vals[i] ? lay->params[i].numel * sizeof(float) : 0);
    zt_free(ZT_MEM_OTHER, vals, vals ? (size_t)lay->nparams * sizeof *vals : 0);
    return rc;
}
