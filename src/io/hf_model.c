/* hf_model.c — load and save Hugging Face model directories (see hf_model.h). */
#include "hf_model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/mem.h"
#include "../core/rng.h"
#include "gguf.h"
#include "safetensors.h"

/* `--model FILE.gguf`: a GGUF file stands for a whole model directory. */
/* A file with the GGUF magic, or named *.gguf (the reader then says what is wrong with it). */
static int is_gguf(const char *path)
{
    struct stat sb;
    size_t n = strlen(path);
    return zt_gguf_is_file(path) ||
           (n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode));
}

static int gguf_config(const char *path, zt_llama_config *cfg, zt_err *err)
{
    zt_gguf *g = NULL;
    int rc = zt_gguf_open(path, &g, err);
    if (rc == ZT_OK)
        rc = zt_gguf_config(g, cfg, err);
    zt_gguf_close(g);
    return rc;
}

int zt_hf_read_config_dir(const char *dir, zt_llama_config *cfg, zt_err *err)
{
    /* `--model out/model/config.json`: a model is its directory, as from_pretrained
     * takes it; say so rather than look for config.json/config.json */
    struct stat sb;
    if (is_gguf(dir))
        return gguf_config(dir, cfg, err);
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(dir, '/');
        int parent = slash ? (int)(slash - dir) : 0;
        return zt_fail(err, ZT_EINPUT, "--model %s: a model is the directory that holds config.json and the "
                       "weights, not a file; give --model %.*s", dir, parent ? parent : 1, parent ? dir : ".");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return zt_hf_config_read(path, cfg, err);
}

static int ignorable(const char *name)
{
    const char *s = strstr(name, "rotary_emb.inv_freq");
    return s && s[strlen("rotary_emb.inv_freq")] == '\0';
}

/* Index of the first inf or NaN among n values of dtype dt at data (which need
 * not be aligned), or n when all are finite: the exponent field all ones. */
static size_t first_nonfinite(const void *data, zt_dtype dt, size_t n, int *is_nan)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        if (dt == ZT_F32) {
            uint32_t u;
            memcpy(&u, b + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) {
                *is_nan = (u & 0x007fffffu) != 0;
                return i;
            }
        } else {
            uint16_t u;
            memcpy(&u, b + 2 * i, 2);
            uint16_t exp = dt == ZT_BF16 ? 0x7f80u : 0x7c00u;
            if ((u & exp) == exp) {
                *is_nan = (u & (uint16_t)~(exp | 0x8000u)) != 0;
                return i;
            }
        }
    }
    return n;
}

/* Training or evaluating on an inf or NaN weight gives a NaN model with every
 * step "skipped": refuse it at load, naming where it is. */
static int refuse_nonfinite(const char *file, const zt_param *p, const void *data, zt_dtype dt, zt_err *err)
{
    size_t numel = (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
    int is_nan = 0;
    size_t bad = first_nonfinite(data, dt, numel, &is_nan);
    if (bad == numel)
        return ZT_OK;
    char at[64];
    if (p->ndim == 2)
        snprintf(at, sizeof at, "[%zu, %zu]", bad / (size_t)p->shape[1], bad % (size_t)p->shape[1]);
    else
        snprintf(at, sizeof at, "[%zu]", bad);
    return zt_fail(err, ZT_EINPUT, "%s: tensor %s holds a non-finite value (%s) at index %s (flat %zu); "
                   "refusing to train or evaluate on it", file, p->name, is_nan ? "nan" : "inf", at, bad);
}

/* A GGUF model: each parameter dequantized to fp32 (q and k rows put back in
 * HF's order) and handed to the sink as an HF directory's would be; a tensor
 * the layout does not name is refused as there. */
static int load_gguf(const char *path, const zt_layout *lay, zt_param_sink set, void *ctx, zt_err *err)
{
    zt_gguf *g = NULL;
    zt_llama_config cfg;
    int rc = zt_gguf_open(path, &g, err);
    if (rc == ZT_OK)
        rc = zt_gguf_config(g, &cfg, err);
    for (int i = 0; i < lay->nparams && rc == ZT_OK; i++) {
        const zt_param *p = &lay->params[i];
        int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 0;
        size_t bytes = (size_t)rows * (size_t)(cols ? cols : 1) * sizeof(float);
        float *buf = zt_alloc(ZT_MEM_OTHER, bytes);
        if (!buf) {
            rc = zt_fail(err, ZT_EFAIL, "%s: out of memory for %s", path, p->name);
            break;
        }
        rc = zt_gguf_read_param(g, &cfg, p->name, rows, cols, buf, err);
        if (rc == ZT_OK && (rc = refuse_nonfinite(path, p, buf, ZT_F32, err)) == ZT_OK)
            set(ctx, p, buf, ZT_F32);
        zt_free(ZT_MEM_OTHER, buf, bytes);
    }
    for (int i = 0; rc == ZT_OK && i < zt_gguf_tensor_count(g); i++) {
        const char *name = zt_gguf_tensor_at(g, i)->name;
        char hf[256];
        if (zt_gguf_name_to_hf(name, hf, sizeof hf) || !zt_layout_find(lay, hf))
            rc = zt_fail(err, ZT_EINPUT, "%s: unexpected tensor \"%s\" (not part of this Llama config)", path, name);
    }
    zt_gguf_close(g);
    return rc;
}

int zt_hf_load_params_to(const char *dir, const zt_layout *lay, zt_param_sink set, void *ctx,
                         zt_err *err)
{
    if (is_gguf(dir))
        return load_gguf(dir, lay, set, ctx, err);
    zt_weights *w = NULL;
    int rc = zt_weights_open(dir, &w, err);
    if (rc)
        return rc;
    for (int i = 0; i < lay->nparams && rc == ZT_OK; i++) {
        const zt_param *p = &lay->params[i];
        const char *file = NULL;
        const zt_st_tensor *t = zt_weights_find(w, p->name, &file);
        if (!t) {
            rc = zt_fail(err, ZT_EINPUT, "%s: tensor %s is missing (config.json describes it)", dir,
                         p->name);
            break;
        }
        int shape_ok = t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
                       (p->ndim == 1 || t->shape[1] == p->shape[1]);
        if (!shape_ok) {
            char got[128] = "";
            for (int d = 0; d < t->ndim && d < 4; d++) {
                size_t len = strlen(got);
                snprintf(got + len, sizeof got - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            }
            char want[64];
            if (p->ndim == 2)
                snprintf(want, sizeof want, "%ld, %ld", p->shape[0], p->shape[1]);
            else
                snprintf(want, sizeof want, "%ld", p->shape[0]);
            rc = zt_fail(err, ZT_EINPUT, "%s: tensor %s has shape [%s], expected [%s]", file,
                         p->name, got, want);
            break;
        }
        if (!t->has_zt_dtype) {
            rc = zt_fail(err, ZT_EINPUT, "%s: tensor %s has dtype %s, expected F32, BF16 or F16",
                         file, p->name, t->st_dtype);
            break;
        }
        if ((rc = refuse_nonfinite(file, p, t->data, t->dtype, err)))
            break;
        set(ctx, p, t->data, t->dtype);
    }
    for (int i = 0; i < zt_weights_count(w) && rc == ZT_OK; i++) {
        const zt_st_tensor *t = zt_weights_get(w, i);
        if (zt_layout_find(lay, t->name) || ignorable(t->name))
            continue;
        if (!strcmp(t->name, "lm_head.weight") && zt_layout_find(lay, "model.embed_tokens.weight"))
            continue; /* tied model saved with an explicit copy of the embedding */
        rc = zt_fail(err, ZT_EINPUT, "%s: unexpected tensor %s (not part of this Llama config)", dir,
                     t->name);
    }
    zt_weights_close(w);
    return rc;
}

/* One file when everything fits in max_shard_bytes (0: no limit), else shards
 * model-0000i-of-0000n.safetensors cut between tensors, as save_pretrained does,
 * plus model.safetensors.index.json.  The layout not written (single vs sharded)
 * is removed afterwards, so the directory never holds two disagreeing models. */
/* A shard's tensors are outs[first..]: the fill function is asked by global index. */
typedef struct shard_fill {
    zt_st_fill_fn fill;
    void *ctx;
    int first;
} shard_fill;

static int fill_shifted(void *ctx, int i, void *dst, zt_err *err)
{
    const shard_fill *sf = ctx;
    return sf->fill(sf->ctx, sf->first + i, dst, err);
}

/* outs written as given, or (fill non-NULL) each tensor made by fill just before
 * it is written. */
static int write_some(const char *path, const zt_st_out *outs, int first, int count, zt_st_fill_fn fill,
                      void *ctx, zt_err *err)
{
    if (!fill)
        return zt_st_write(path, outs + first, count, "pt", err);
    shard_fill sf = {fill, ctx, first};
    return zt_st_write_fill(path, outs + first, count, "pt", fill_shifted, &sf, err);
}

/* Remove the shard files model-K-of-M.safetensors of an earlier save that this
 * one (nshards files; 0: a single model.safetensors) did not write, as
 * save_pretrained removes the stale weight files of the same name: otherwise a
 * directory that held a 3-shard model keeps those shards beside a new one-file
 * model, and a reader that globs the directory (or a person) finds two models.
 * Other files in the directory are left alone. */
static void remove_stale_shards(const char *dir, int nshards)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int k = 0, m = 0, end = 0;
        if (sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &k, &m, &end) != 2 || e->d_name[end] != 0 ||
            strlen(e->d_name) != strlen("model-00001-of-00001.safetensors") || m == nshards)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
}

static int write_weights(const char *dir, const zt_st_out *outs, int n, zt_dtype dtype,
                         size_t max_shard_bytes, zt_st_fill_fn fill, void *ctx, zt_err *err)
{
    char path[4096], index[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    size_t total = 0, es = zt_dtype_size(dtype);
    for (int i = 0; i < n; i++)
        total += (size_t)outs[i].shape[0] * (size_t)(outs[i].ndim == 2 ? outs[i].shape[1] : 1) * es;
    int rc;
    if (max_shard_bytes == 0 || total <= max_shard_bytes) {
        if ((rc = write_some(path, outs, 0, n, fill, ctx, err)))
            return rc;
        unlink(index);
        remove_stale_shards(dir, 0);
        return ZT_OK;
    }
    /* shard boundaries: start a new shard when the next tensor would overflow it */
    int *shard_of = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *shard_of);
    if (!shard_of)
        return zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    int nshards = 0;
    size_t acc = 0;
    for (int i = 0; i < n; i++) {
        size_t b = (size_t)outs[i].shape[0] * (size_t)(outs[i].ndim == 2 ? outs[i].shape[1] : 1) * es;
        if (nshards == 0 || (acc > 0 && acc + b > max_shard_bytes)) {
            nshards++;
            acc = 0;
        }
        shard_of[i] = nshards - 1;
        acc += b;
    }
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
    rc = ZT_OK;
    for (int s = 0, first = 0; s < nshards && rc == ZT_OK; s++) {
        int last = first;
        while (last < n && shard_of[last] == s)
            last++;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = write_some(path, outs, first, last - first, fill, ctx, err);
        for (int i = first; i < last; i++)
            cJSON_AddStringToObject(map, outs[i].name, name);
        first = last;
    }
    char *text = rc == ZT_OK ? cJSON_Print(root) : NULL;
    if (rc == ZT_OK && !text)
        rc = zt_fail(err, ZT_EFAIL, "out of memory writing %s", index);
    if (rc == ZT_OK) {
        zt_wpart part = {text, strlen(text)};
        rc = zt_write_atomic(index, &part, 1, err);
    }
    if (rc == ZT_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
        remove_stale_shards(dir, nshards);
    }
    free(text);
    cJSON_Delete(root);
    zt_free(ZT_MEM_OTHER, shard_of, (size_t)n * sizeof *shard_of);
    return rc;
}

int zt_hf_save_tensors(const char *dir, const zt_llama_config *cfg, const zt_layout *lay,
                       float *const *values, zt_dtype dtype, size_t max_shard_bytes, zt_err *err)
{
    int rc = zt_mkdirs(dir, err);
    if (rc)
        return rc;
    zt_st_out *outs = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *outs);
    void **conv = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *conv);
    if (!outs || !conv) {
        rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
        goto done;
    }
    for (int i = 0; i < lay->nparams; i++) {
        const zt_param *p = &lay->params[i];
        const void *data = values[i];
        if (dtype != ZT_F32) {
            conv[i] = zt_alloc(ZT_MEM_OTHER, p->numel * zt_dtype_size(dtype));
            if (!conv[i]) {
                rc = zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
                goto done;
            }
            zt_convert(conv[i], dtype, values[i], ZT_F32, p->numel);
            data = conv[i];
        }
        outs[i] = (zt_st_out){.name = p->name, .dtype = dtype, .ndim = p->ndim, .data = data};
        outs[i].shape[0] = p->shape[0];
        outs[i].shape[1] = p->shape[1];
    }
    if ((rc = write_weights(dir, outs, lay->nparams, dtype, max_shard_bytes, NULL, NULL, err)))
        goto done;
    char path[4096];
    zt_llama_config c = *cfg;
    c.torch_dtype = dtype;
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = zt_hf_config_write(path, &c, err);
done:
    if (conv)
        for (int i = 0; i < lay->nparams; i++)
            zt_free(ZT_MEM_OTHER, conv[i], conv[i] ? lay->params[i].numel * zt_dtype_size(dtype) : 0);
    zt_free(ZT_MEM_OTHER, conv, (size_t)lay->nparams * sizeof *conv);
    zt_free(ZT_MEM_OTHER, outs, (size_t)lay->nparams * sizeof *outs);
    return rc;
}

int zt_hf_save_streamed(const char *dir, const zt_llama_config *cfg, const zt_layout *lay, zt_dtype dtype,
                        size_t max_shard_bytes, zt_st_fill_fn fill, void *ctx, zt_err *err)
{
    int rc = zt_mkdirs(dir, err);
    if (rc)
        return rc;
    zt_st_out *outs = zt_alloc(ZT_MEM_OTHER, (size_t)lay->nparams * sizeof *outs);
    if (!outs)
        return zt_fail(err, ZT_EFAIL, "out of memory saving %s", dir);
    for (int i = 0; i < lay->nparams; i++) { /* as zt_hf_save_tensors, so the bytes are the same */
        const zt_param *p = &lay->params[i];
        outs[i] = (zt_st_out){.name = p->name, .dtype = dtype, .ndim = p->ndim, .data = NULL};
        outs[i].shape[0] = p->shape[0];
        outs[i].shape[1] = p->shape[1];
    }
    rc = write_weights(dir, outs, lay->nparams, dtype, max_shard_bytes, fill, ctx, err);
    if (rc == ZT_OK) {
        char path[4096];
        zt_llama_config c = *cfg;
        c.torch_dtype = dtype;
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = zt_hf_config_write(path, &c, err);
    }
    zt_free(ZT_MEM_OTHER, outs, (size_t)lay->nparams * sizeof *outs);
    return rc;
}

int zt_hf_init_random(const char *dir, const zt_llama_config *cfg, uint64_t seed, zt_dtype dtype,
                      size_t max_shard_bytes, size_t *numel, zt_err *err)
{
    zt_layout lay;
    int rc = zt_layout_build(&lay, cfg, ZT_WRAP_TRANSFORMER, 0, 1, err);
    if (rc)
        return rc;
    float **vals = zt_alloc(ZT_MEM_OTHER, (size_t)lay.nparams * sizeof *vals);
    if (!vals)
        rc = zt_fail(err, ZT_EFAIL, "out of memory initialising a model for %s", dir);
    uint64_t state = seed;
    for (int i = 0; rc == ZT_OK && i < lay.nparams; i++) {
        const zt_param *p = &lay.params[i];
        if (!(vals[i] = zt_alloc(ZT_MEM_OTHER, p->numel * sizeof(float)))) {
            rc = zt_fail(err, ZT_EFAIL, "out of memory initialising %s", p->name);
            break;
        }
        /* HF's _init_weights: matrices N(0, initializer_range), norm weights 1, biases 0 */
        int bias = p->kind == ZT_P_Q_BIAS || p->kind == ZT_P_K_BIAS || p->kind == ZT_P_V_BIAS;
        for (size_t j = 0; j < p->numel; j++)
            vals[i][j] = p->ndim == 2 ? (float)(cfg->initializer_range * zt_rand_normal(&state)) : bias ? 0.0f : 1.0f;
    }
    if (rc == ZT_OK)
        rc = zt_hf_save_tensors(dir, cfg, &lay, vals, dtype, max_shard_bytes, err);
    if (rc == ZT_OK && numel)
        *numel = lay.numel;
    for (int i = 0; vals && i < lay.nparams; i++)
        zt_free(ZT_MEM_OTHER, vals[i], vals[i] ? lay.params[i].numel * sizeof(float) : 0);
    zt_free(ZT_MEM_OTHER, vals, vals ? (size_t)lay.nparams * sizeof *vals : 0);
    zt_layout_free(&lay);
    return rc;
}
