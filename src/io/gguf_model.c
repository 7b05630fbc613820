/* gguf_model.c — a GGUF file as a Llama-family model: its configuration from the
 * metadata and its parameters by Hugging Face name (gguf.h). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../core/mem.h"
#include "gguf.h"

/* key ARCH.suffix as an int field: required keys missing are refused by name. */
static int arch_int(const zt_gguf *g, const char *arch, const char *suffix, int required, int *out, zt_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v = 0;
    int present = 0;
    int rc = zt_gguf_get_int(g, key, &v, &present, err);
    if (rc)
        return rc;
    if (!present)
        return required ? zt_fail(err, ZT_EINPUT, "%s: missing key \"%s\"", zt_gguf_path(g), key) : ZT_OK;
    if (v <= 0 || v > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is %" PRId64 ", expected a positive 32-bit integer",
                       zt_gguf_path(g), key, v);
    *out = (int)v;
    return ZT_OK;
}

static int arch_float(const zt_gguf *g, const char *arch, const char *suffix, double *out, zt_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return zt_gguf_get_float(g, key, out, NULL, err);
}

/* What the file describes but ztrain's Llama does not compute: refused by name. */
static int refuse_unsupported(const zt_gguf *g, const char *arch, zt_err *err)
{
    char key[128];
    zt_gguf_str s;
    int present = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int rc = zt_gguf_get_str(g, key, &s, &present, err);
    if (rc)
        return rc;
    if (present && !(s.len == 4 && !memcmp(s.s, "none", 4)))
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is \"%.*s\": rope scaling from GGUF is not supported",
                       zt_gguf_path(g), key, (int)(s.len > 64 ? 64 : s.len), s.s);
    int64_t experts = 0;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if ((rc = zt_gguf_get_int(g, key, &experts, NULL, err)))
        return rc;
    if (experts > 0)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" is %" PRId64 ": mixture-of-experts models are not "
                       "supported", zt_gguf_path(g), key, experts);
    if (zt_gguf_tensor_find(g, "rope_freqs.weight"))
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"rope_freqs.weight\" (scaled RoPE frequencies) is not "
                       "supported", zt_gguf_path(g));
    return ZT_OK;
}

/* head_dim: attention.key_length where given, else rope.dimension_count (the
 * rotated width, which for these families is the whole head), else C / nh. */
static int head_dim(const zt_gguf *g, const char *arch, zt_llama_config *c, zt_err *err)
{
    int kl = 0, rd = 0, rc;
    if ((rc = arch_int(g, arch, "attention.key_length", 0, &kl, err)) ||
        (rc = arch_int(g, arch, "rope.dimension_count", 0, &rd, err)))
        return rc;
    if (kl && rd && kl != rd)
        return zt_fail(err, ZT_EINPUT, "%s: keys \"%s.attention.key_length\" (%d) and \"%s.rope.dimension_count\" "
                       "(%d) differ: partial rotary embeddings are not supported", zt_gguf_path(g), arch, kl, arch,
                       rd);
    c->head_dim = kl ? kl : rd;
    if (!c->head_dim)
        c->head_dim = c->hidden_size / c->num_attention_heads;
    if (!strcmp(arch, "qwen2") && c->head_dim * c->num_attention_heads != c->hidden_size)
        return zt_fail(err, ZT_EINPUT, "%s: head_dim %d is not hidden_size / heads, which Qwen2 always uses",
                       zt_gguf_path(g), c->head_dim);
    return ZT_OK;
}

int zt_gguf_config(const zt_gguf *g, zt_llama_config *cfg, zt_err *err)
{
    const char *path = zt_gguf_path(g);
    zt_gguf_str a;
    int present = 0, rc = zt_gguf_get_str(g, "general.architecture", &a, &present, err);
    if (rc)
        return rc;
    if (!present)
        return zt_fail(err, ZT_EINPUT, "%s: missing key \"general.architecture\"", path);
    char arch[16];
    if (!((a.len == 5 && !memcmp(a.s, "llama", 5)) || (a.len == 5 && !memcmp(a.s, "qwen2", 5))))
        return zt_fail(err, ZT_EINPUT, "%s: key \"general.architecture\" is \"%.*s\" (supported: \"llama\", "
                       "\"qwen2\")", path, (int)(a.len > 64 ? 64 : a.len), a.s);
    snprintf(arch, sizeof arch, "%.*s", (int)a.len, a.s);
    zt_llama_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "%s", arch);
    c.qkv_bias = !strcmp(arch, "qwen2");
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.initializer_range = 0.02;
    c.torch_dtype = ZT_F32;
    c.max_position_embeddings = 2048;
    if (c.qkv_bias)
        c.max_window_layers = 28; /* Qwen2Config's default; inert without a sliding window */
    if ((rc = refuse_unsupported(g, arch, err)) ||
        (rc = arch_int(g, arch, "embedding_length", 1, &c.hidden_size, err)) ||
        (rc = arch_int(g, arch, "feed_forward_length", 1, &c.intermediate_size, err)) ||
        (rc = arch_int(g, arch, "block_count", 1, &c.num_hidden_layers, err)) ||
        (rc = arch_int(g, arch, "attention.head_count", 1, &c.num_attention_heads, err)) ||
        (rc = arch_int(g, arch, "context_length", 0, &c.max_position_embeddings, err)) ||
        (rc = arch_float(g, arch, "rope.freq_base", &c.rope_theta, err)) ||
        (rc = arch_float(g, arch, "attention.layer_norm_rms_epsilon", &c.rms_norm_eps, err)))
        return rc;
    c.num_key_value_heads = c.num_attention_heads;
    if ((rc = arch_int(g, arch, "attention.head_count_kv", 0, &c.num_key_value_heads, err)) ||
        (rc = head_dim(g, arch, &c, err)))
        return rc;
    /* the vocabulary is the embedding's row count (its tokens list says the same
     * where present; the tokenizer conversion checks that) */
    const zt_gguf_tensor *emb = zt_gguf_tensor_find(g, "token_embd.weight");
    if (!emb || emb->ndim != 2)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"token_embd.weight\" is missing or not 2-D", path);
    if (emb->dims[1] > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"token_embd.weight\" has too many rows", path);
    c.vocab_size = (int)emb->dims[1];
    c.tie_word_embeddings = zt_gguf_tensor_find(g, "output.weight") == NULL;
    if ((rc = zt_llama_config_check(&c, path, err)))
        return rc;
    *cfg = c;
    return ZT_OK;
}

/* llama.cpp's converter stores each q (k) head's rows with the two rotary halves
 * interleaved: HF row h*hd + a*(hd/2) + b sits at GGUF row h*hd + 2b + a
 * (a in {0, 1}, b < hd/2).  Gather them back, one row of cols values at a time. */
static void unpermute_rows(const float *src, float *dst, int64_t rows, int64_t cols, int64_t heads)
{
    int64_t hd = rows / heads, half = hd / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t a = 0; a < 2; a++)
            for (int64_t b = 0; b < half; b++)
                memcpy(dst + (h * hd + a * half + b) * cols, src + (h * hd + 2 * b + a) * cols,
                       (size_t)cols * sizeof(float));
}

/* The heads whose rows were permuted in tensor gname, or 0 for none. */
static int64_t permuted_heads(const zt_llama_config *cfg, const char *gname)
{
    if (strcmp(cfg->model_type, "qwen2") == 0)
        return 0; /* llama.cpp runs qwen2 with NeoX rotary: its converter keeps HF's order */
    static const char q[] = ".attn_q.weight", k[] = ".attn_k.weight";
    size_t n = strlen(gname), s = sizeof q - 1;
    if (n > s && !strcmp(gname + n - s, q))
        return cfg->num_attention_heads;
    if (n > s && !strcmp(gname + n - s, k))
        return cfg->num_key_value_heads;
    return 0;
}

int zt_gguf_read_param(const zt_gguf *g, const zt_llama_config *cfg, const char *hf_name, int64_t rows,
                       int64_t cols, float *out, zt_err *err)
{
    const char *path = zt_gguf_path(g);
    char gname[256];
    if (zt_gguf_name_from_hf(hf_name, gname, sizeof gname))
        return zt_fail(err, ZT_EINPUT, "%s: parameter %s has no GGUF name", path, hf_name);
    const zt_gguf_tensor *t = zt_gguf_tensor_find(g, gname);
    if (!t)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\" (%s) is missing", path, gname, hf_name);
    int want_nd = cols ? 2 : 1;
    if (t->ndim != want_nd || t->dims[0] != (cols ? cols : rows) || (cols && t->dims[1] != rows))
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\" has %d dims [%" PRId64 ", %" PRId64 "] (innermost "
                       "first), expected [%" PRId64 ", %" PRId64 "] for %s", path, gname, t->ndim, t->dims[0],
                       t->ndim > 1 ? t->dims[1] : 1, cols ? cols : rows, cols ? rows : 1, hf_name);
    int64_t heads = permuted_heads(cfg, gname);
    if (!heads)
        return zt_gguf_dequantize(g, t, out, err);
    size_t bytes = (size_t)t->numel * sizeof(float);
    float *tmp = zt_alloc(ZT_MEM_OTHER, bytes);
    if (!tmp)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for tensor \"%s\"", path, gname);
    int rc = zt_gguf_dequantize(g, t, tmp, err);
    if (rc == ZT_OK)
        unpermute_rows(tmp, out, rows, cols, heads);
    zt_free(ZT_MEM_OTHER, tmp, bytes);
    return rc;
}
