/* gguf_export.c — see gguf_export.h. */
#include "gguf_export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/dtype.h"
#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../model/config.h"
#include "../model/layout.h"
#include "gguf_format.h"
#include "hf_model.h"
#include "safetensors.h"

#define GGUF_VERSION 3
#define TOKENIZER_MAX (256u << 20)
/* llama.cpp's token types (tokenizer.ggml.token_type) */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

int zt_gguf_outtype_parse(const char *s, zt_gguf_outtype *out)
{
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (zt_gguf_outtype)i;
            return 0;
        }
    return -1;
}

/* ---- bytes: a growing buffer (accounted), and GGUF's little-endian scalars ---- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = zt_alloc(ZT_MEM_OTHER, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        if (b->p)
            zt_free(ZT_MEM_OTHER, b->p, b->cap);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void buf_free(buf *b)
{
    if (b->p)
        zt_free(ZT_MEM_OTHER, b->p, b->cap);
    memset(b, 0, sizeof *b);
}

static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_strn(buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(buf *b, const char *s) { put_strn(b, s, strlen(s)); }

/* The metadata section: its bytes and the count of its key-value pairs. */
typedef struct meta {
    buf b;
    uint64_t n;
} meta;

static void kv(meta *m, const char *key, uint32_t type)
{
    put_str(&m->b, key);
    put_u32(&m->b, type);
    m->n++;
}
/* A scalar value of type t (its size from gguf_format's table), little-endian as
 * this machine stores it. */
static void kv_scalar(meta *m, const char *key, uint32_t t, const void *v)
{
    kv(m, key, t);
    put(&m->b, v, (size_t)zt_gguf_vtype_size(t));
}
static void kv_u32(meta *m, const char *key, uint32_t v) { kv_scalar(m, key, ZT_GGUF_UINT32, &v); }
static void kv_f32(meta *m, const char *key, float v) { kv_scalar(m, key, ZT_GGUF_FLOAT32, &v); }
static void kv_str(meta *m, const char *key, const char *s) { kv(m, key, ZT_GGUF_STRING), put_str(&m->b, s); }
static void kv_bool(meta *m, const char *key, int v)
{
    const uint8_t x = v != 0;
    kv_scalar(m, key, ZT_GGUF_BOOL, &x);
}
static void kv_array(meta *m, const char *key, uint32_t elem, uint64_t count)
{
    kv(m, key, ZT_GGUF_ARRAY);
    put_u32(&m->b, elem);
    put_u64(&m->b, count);
}

/* ---- the tensors ---- */

typedef struct xtensor {
    char name[96];
    const zt_st_tensor *src; /* NULL: the data is gen (rope_freqs) */
    const float *gen;
    long rows, cols;         /* cols innermost; a 1-D tensor has rows 1 */
    int ndim;
    uint32_t type;
    int heads;               /* > 0: rows reordered per head (q_proj, k_proj) */
    size_t bytes;
} xtensor;

typedef struct exporter {
    zt_llama_config cfg;
    zt_layout lay;
    int lay_built;
    zt_weights *w;
    xtensor *t;
    int nt;
    meta m;
    buf head;                /* header, metadata, tensor infos, padding */
    unsigned char *out;      /* one tensor's bytes, padded */
    size_t out_cap;
    float *row;              /* one source row as f32 */
    void *raw;               /* the same row's bytes as stored */
    size_t row_cap;          /* elements of row and raw */
    float rope[512];         /* rope_freqs: head_dim / 2 factors */
    int q8_fallbacks;
} exporter;

static size_t pad_to(size_t n, size_t a) { return (n + a - 1) / a * a; }

static size_t row_bytes(uint32_t type, long cols)
{
    const zt_ggml_type_info *ti = zt_ggml_type_get(type);
    return (size_t)(cols / ti->block) * (size_t)ti->bytes;
}

/* ggml's quantize_row_q8_0 reference: blocks of 32 as an f16 scale d = max|x| / 127
 * and 32 int8 q = roundf(x * (1/d)) (0 for an all-zero block). */
static void quantize_q8_0(const float *x, long n, unsigned char *dst)
{
    for (long b = 0; b < n / 32; b++, x += 32, dst += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = zt_f32_to_f16(d);
        memcpy(dst, &dh, 2);
        for (int j = 0; j < 32; j++)
            dst[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
    }
}

static void encode_row(uint32_t type, const float *x, long n, unsigned char *dst)
{
    switch (type) {
    case ZT_GGML_F16: zt_convert(dst, ZT_F16, x, ZT_F32, (size_t)n); break;
    case ZT_GGML_BF16: zt_convert(dst, ZT_BF16, x, ZT_F32, (size_t)n); break;
    case ZT_GGML_Q8_0: quantize_q8_0(x, n, dst); break;
    default: memcpy(dst, x, (size_t)n * 4); break;
    }
}

/* The source row of output row r: llama.cpp's layout of a head's rows is HF's with
 * the two halves interleaved (gguf_export.h). */
static long source_row(const xtensor *t, long r)
{
    if (t->heads <= 0)
        return r;
    const long hd = t->rows / t->heads, h = r / hd, k = r % hd;
    return h * hd + (k % 2) * (hd / 2) + k / 2;
}

/* Part i of the file: 0 the head, then each tensor's bytes padded to the alignment. */
static int get_part(void *ctx, int i, zt_wpart *part, zt_err *err)
{
    exporter *e = ctx;
    (void)err;
    if (i == 0) {
        part->data = e->head.p;
        part->bytes = e->head.n;
        return ZT_OK;
    }
    const xtensor *t = &e->t[i - 1];
    const size_t rb = row_bytes(t->type, t->cols), padded = pad_to(t->bytes, ZT_GGUF_DEFAULT_ALIGNMENT);
    for (long r = 0; r < t->rows; r++) {
        const float *x = t->gen;
        if (t->src) {
            const size_t es = zt_dtype_size(t->src->dtype);
            /* the mapped file's rows need not be aligned for their dtype: copy first */
            memcpy(e->raw, (const char *)t->src->data + (size_t)source_row(t, r) * (size_t)t->cols * es,
                   (size_t)t->cols * es);
            zt_convert(e->row, ZT_F32, e->raw, t->src->dtype, (size_t)t->cols);
            x = e->row;
        }
        encode_row(t->type, x, t->cols, e->out + (size_t)r * rb);
    }
    memset(e->out + t->bytes, 0, padded - t->bytes);
    part->data = e->out;
    part->bytes = padded;
    return ZT_OK;
}

/* The type a tensor is written in: F32 for vectors (llama.cpp keeps norms in F32),
 * the outtype for matrices, F16 for a Q8_0 matrix whose rows do not fill blocks. */
static uint32_t tensor_type(exporter *e, int ndim, long cols, zt_gguf_outtype ot)
{
    static const uint32_t types[] = {ZT_GGML_F32, ZT_GGML_F16, ZT_GGML_BF16, ZT_GGML_Q8_0};
    if (ndim < 2)
        return ZT_GGML_F32;
    if (ot == ZT_GGUF_OUT_Q8_0 && cols % 32 != 0) {
        e->q8_fallbacks++;
        return ZT_GGML_F16;
    }
    return types[ot];
}

/* Llama 3.1's rope scaling as llama.cpp carries it: per frequency f_i = theta^(-2i/hd)
 * with wavelength w = 2 pi / f_i, the factor the frequency is divided by: 1 where
 * w < L / high_freq_factor, factor where w > L / low_freq_factor, and between them
 * 1 / ((1 - s) / factor + s) with s = (L / w - low) / (high - low). */
static void rope_factors(const zt_llama_config *c, float *out)
{
    const double L = c->rope_original_max_position_embeddings, lo = c->rope_low_freq_factor,
                 hi = c->rope_high_freq_factor, factor = c->rope_factor;
    for (int i = 0; i < c->head_dim / 2; i++) {
        const float f = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / c->head_dim));
        const double w = 2 * M_PI / f;
        if (w < L / hi)
            out[i] = 1.0f;
        else if (w > L / lo)
            out[i] = (float)factor;
        else {
            const double s = (L / w - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - s) / factor + s));
        }
    }
}

/* The model's tensors, in the layout's order, each checked against the weights. */
static int collect_tensors(exporter *e, const char *dir, zt_gguf_outtype ot, zt_err *err)
{
    const zt_llama_config *c = &e->cfg;
    e->t = zt_alloc(ZT_MEM_OTHER, sizeof(xtensor) * (size_t)(e->lay.nparams + 1));
    if (!e->t)
        return zt_fail(err, ZT_EFAIL, "out of memory listing %s's tensors", dir);
    for (int i = 0; i < e->lay.nparams; i++) {
        const zt_param *p = &e->lay.params[i];
        xtensor *t = &e->t[e->nt++];
        memset(t, 0, sizeof *t);
        const char *file = NULL;
        t->src = zt_weights_find(e->w, p->name, &file);
        if (!t->src)
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s is missing", dir, p->name);
        const long rows = p->ndim == 2 ? p->shape[0] : 1, cols = p->ndim == 2 ? p->shape[1] : p->shape[0];
        if (!t->src->has_zt_dtype || t->src->ndim != p->ndim || t->src->shape[0] != p->shape[0] ||
            (p->ndim == 2 && t->src->shape[1] != cols))
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s is not a float tensor of the config's shape", file, p->name);
        if (zt_gguf_name_from_hf(p->name, t->name, sizeof t->name) != 0)
            return zt_fail(err, ZT_EINPUT, "%s: tensor %s has no GGUF name", file, p->name);
        t->rows = rows, t->cols = cols, t->ndim = p->ndim;
        t->heads = c->qkv_bias       ? 0 /* qwen2: llama.cpp rotates as HF does */
                   : p->kind == ZT_P_Q ? c->num_attention_heads
                   : p->kind == ZT_P_K ? c->num_key_value_heads
                                       : 0;
        t->type = tensor_type(e, p->ndim, cols, ot);
        t->bytes = (size_t)rows * row_bytes(t->type, cols);
    }
    if (c->rope_llama3) {
        rope_factors(c, e->rope);
        xtensor *t = &e->t[e->nt++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "rope_freqs.weight");
        t->gen = e->rope, t->rows = 1, t->cols = c->head_dim / 2, t->ndim = 1, t->type = ZT_GGML_F32;
        t->bytes = (size_t)t->cols * 4;
    }
    return ZT_OK;
}

/* general.* and ARCH.*: the hyper-parameters llama.cpp's architecture reads, ARCH
 * being "llama" (Llama, Mistral) or "qwen2" (Qwen2: the q/k/v biases, and no row
 * reordering, its RoPE being HF's own half-split rotation). */
static void model_meta(exporter *e, const char *name, zt_gguf_outtype ot)
{
    static const uint32_t file_type[] = {0, 1, 32, 7}; /* llama_ftype: ALL_F32, MOSTLY_F16, _BF16, _Q8_0 */
    const zt_llama_config *c = &e->cfg;
    const char *arch = c->qkv_bias ? "qwen2" : "llama";
    meta *m = &e->m;
    kv_str(m, "general.architecture", arch);
    kv_str(m, "general.type", "model");
    kv_str(m, "general.name", name);
    kv_u32(m, "general.quantization_version", 2);
    kv_u32(m, "general.file_type", file_type[ot]);
    const struct { const char *key; uint32_t v; } u[] = {
        {"block_count", (uint32_t)c->num_hidden_layers},
        {"context_length", (uint32_t)c->max_position_embeddings},
        {"embedding_length", (uint32_t)c->hidden_size},
        {"feed_forward_length", (uint32_t)c->intermediate_size},
        {"attention.head_count", (uint32_t)c->num_attention_heads},
        {"attention.head_count_kv", (uint32_t)c->num_key_value_heads},
        {"vocab_size", (uint32_t)c->vocab_size},
        {"rope.dimension_count", (uint32_t)c->head_dim},
        /* only where head_dim is not hidden_size / heads */
        {"attention.key_length", (uint32_t)c->head_dim},
        {"attention.value_length", (uint32_t)c->head_dim},
    };
    const int nu = c->head_dim * c->num_attention_heads != c->hidden_size ? 10 : 8;
    char key[96];
    for (int i = 0; i < nu; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, u[i].key);
        kv_u32(m, key, u[i].v);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    kv_f32(m, key, (float)c->rope_theta);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    kv_f32(m, key, (float)c->rms_norm_eps);
}

/* ---- the tokenizer ---- */

/* The first object in the tree j (j included) whose "type" is type. */
static const cJSON *find_type(const cJSON *j, const char *type)
{
    if (!j)
        return NULL;
    const cJSON *t = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "type") : NULL;
    if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0)
        return j;
    for (const cJSON *c = j->child; c; c = c->next) {
        const cJSON *f = find_type(c, type);
        if (f)
            return f;
    }
    return NULL;
}

/* llama.cpp's name for a byte-level pre-tokenizer (tokenizer.ggml.pre), which picks
 * the splitting regex at load time: Llama 3's regex (digits in runs of up to 3),
 * Qwen2's (single digits), SmolLM2's digit splitter before GPT-2's byte level, or
 * GPT-2's alone; NULL for another. */
static const char *pre_name(const cJSON *pre)
{
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const cJSON *split = find_type(pre, "Split"), *digits = find_type(pre, "Digits");
    const cJSON *re = split ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"),
                                                               "Regex")
                            : NULL;
    if (split)
        return !cJSON_IsString(re)                      ? NULL
               : strcmp(re->valuestring, llama3) == 0 ? "llama-bpe"
               : strcmp(re->valuestring, qwen2) == 0  ? "qwen2"
                                                      : NULL;
    if (digits && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(digits, "individual_digits")))
        return find_type(pre, "ByteLevel") ? "smollm" : NULL;
    return find_type(pre, "ByteLevel") ? "gpt-2" : NULL;
}

/* The id of token text s in tokenizer.json (added tokens first), or -1. */
static int token_id(const cJSON *tj, const char *s)
{
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *a;
    cJSON_ArrayForEach(a, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content"), *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (cJSON_IsString(c) && cJSON_IsNumber(id) && strcmp(c->valuestring, s) == 0)
            return id->valueint;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, s);
    return cJSON_IsNumber(id) ? id->valueint : -1;
}

/* tokenizer_config.json's special tokens (a string, or an object with "content"),
 * add_bos_token, and chat_template (else chat_template.jinja's text). */
static int add_specials(meta *m, const char *dir, const cJSON *tj, zt_err *err)
{
    static const char *const keys[][2] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                          {"eos_token", "tokenizer.ggml.eos_token_id"},
                                          {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                          {"pad_token", "tokenizer.ggml.padding_token_id"}};
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    struct stat sb;
    zt_json cj = {0};
    int rc = stat(path, &sb) == 0 ? zt_json_parse_file(path, TOKENIZER_MAX, &cj, err) : ZT_OK;
    if (rc)
        return rc;
    for (int i = 0; cj.root && i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cj.root, keys[i][0]);
        if (cJSON_IsObject(v))
            v = cJSON_GetObjectItemCaseSensitive(v, "content");
        int id = cJSON_IsString(v) ? token_id(tj, v->valuestring) : -1;
        if (id >= 0)
            kv_u32(m, keys[i][1], (uint32_t)id);
    }
    const cJSON *bos = cj.root ? cJSON_GetObjectItemCaseSensitive(cj.root, "add_bos_token") : NULL;
    if (cJSON_IsBool(bos))
        kv_bool(m, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(bos));
    const cJSON *tmpl = cj.root ? cJSON_GetObjectItemCaseSensitive(cj.root, "chat_template") : NULL;
    const int have_template = cJSON_IsString(tmpl);
    if (have_template)
        kv_str(m, "tokenizer.chat_template", tmpl->valuestring);
    if (cj.root)
        zt_json_free(&cj);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (!have_template && stat(path, &sb) == 0) {
        FILE *f = fopen(path, "rb");
        char *text = f && sb.st_size < TOKENIZER_MAX ? zt_alloc(ZT_MEM_OTHER, (size_t)sb.st_size + 1) : NULL;
        size_t got = text ? fread(text, 1, (size_t)sb.st_size, f) : 0;
        if (f)
            fclose(f);
        if (!text || got != (size_t)sb.st_size) {
            if (text)
                zt_free(ZT_MEM_OTHER, text, (size_t)sb.st_size + 1);
            return zt_fail(err, ZT_EINPUT, "%s: cannot read the chat template", path);
        }
        text[got] = 0;
        kv_str(m, "tokenizer.chat_template", text);
        zt_free(ZT_MEM_OTHER, text, (size_t)sb.st_size + 1);
    }
    return ZT_OK;
}

/* tokens (by id; ids nothing names are "[PAD<id>]", unused, as the converter pads
 * up to vocab_size), their types (added special tokens control, other added ones
 * user-defined), and merges as "a b" strings (tokenizer.json has either form). */
static int add_vocab(meta *m, const cJSON *tj, int n, int spm, const char *path, zt_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *x;
    /* every id must have its row in token_embd (llama.cpp checks the counts agree) */
    const cJSON *lists[2] = {vocab, added};
    for (int l = 0; l < 2; l++)
        cJSON_ArrayForEach(x, lists[l]) {
            const cJSON *id = l ? cJSON_GetObjectItemCaseSensitive(x, "id") : x;
            const cJSON *text = l ? cJSON_GetObjectItemCaseSensitive(x, "content") : NULL;
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= n)
                return zt_fail(err, ZT_EINPUT, "%s: token \"%s\" has an id outside the model's vocab_size (%d)", path,
                               l ? (cJSON_IsString(text) ? text->valuestring : "?") : x->string, n);
        }
    const char **tok = zt_alloc(ZT_MEM_OTHER, sizeof *tok * (size_t)n);
    int32_t *type = zt_alloc(ZT_MEM_OTHER, sizeof *type * (size_t)n);
    if (!tok || !type) {
        zt_free(ZT_MEM_OTHER, tok, tok ? sizeof *tok * (size_t)n : 0);
        zt_free(ZT_MEM_OTHER, type, type ? sizeof *type * (size_t)n : 0);
        return zt_fail(err, ZT_EFAIL, "out of memory reading %s", path);
    }
    for (int i = 0; i < n; i++)
        tok[i] = NULL, type[i] = TOK_UNUSED;
    cJSON_ArrayForEach(x, vocab) {
        tok[x->valueint] = x->string;
        /* SentencePiece's byte pieces <0xXX> and unknown piece have types of their own */
        unsigned hex;
        char end;
        type[x->valueint] = spm && strlen(x->string) == 6 && sscanf(x->string, "<0x%2X%c", &hex, &end) == 2 && end == '>'
                                ? TOK_BYTE
                                : TOK_NORMAL;
    }
    cJSON_ArrayForEach(x, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content"), *id = cJSON_GetObjectItemCaseSensitive(x, "id");
        if (cJSON_IsString(c) && cJSON_IsNumber(id) && id->valueint >= 0 && id->valueint < n) {
            tok[id->valueint] = c->valuestring;
            type[id->valueint] = spm && cJSON_IsString(unk) && !strcmp(c->valuestring, unk->valuestring) ? TOK_UNKNOWN
                                 : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "special"))      ? TOK_CONTROL
                                                                                                    : TOK_USER_DEFINED;
        }
    }
    kv_array(m, "tokenizer.ggml.tokens", ZT_GGUF_STRING, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        char padname[32];
        snprintf(padname, sizeof padname, "[PAD%d]", i);
        put_str(&m->b, tok[i] ? tok[i] : padname);
    }
    kv_array(m, "tokenizer.ggml.token_type", ZT_GGUF_INT32, (uint64_t)n);
    put(&m->b, type, sizeof *type * (size_t)n);
    zt_free(ZT_MEM_OTHER, tok, sizeof *tok * (size_t)n);
    zt_free(ZT_MEM_OTHER, type, sizeof *type * (size_t)n);
    return ZT_OK;
}

/* merges as "a b" strings (tokenizer.json has either form). */
static int add_merges(meta *m, const cJSON *tj, const char *path, zt_err *err)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges"), *x;
    kv_array(m, "tokenizer.ggml.merges", ZT_GGUF_STRING, (uint64_t)cJSON_GetArraySize(merges));
    cJSON_ArrayForEach(x, merges) {
        if (cJSON_IsString(x)) {
            put_str(&m->b, x->valuestring);
        } else if (cJSON_GetArraySize(x) == 2 && cJSON_IsString(x->child) && cJSON_IsString(x->child->next)) {
            const char *a = x->child->valuestring, *b = x->child->next->valuestring;
            put_u64(&m->b, strlen(a) + 1 + strlen(b));
            put(&m->b, a, strlen(a)), put(&m->b, " ", 1), put(&m->b, b, strlen(b));
        } else {
            return zt_fail(err, ZT_EINPUT, "%s: model.merges holds an entry that is neither \"a b\" nor [a, b]", path);
        }
    }
    return ZT_OK;
}

/* One vocabulary entry, for the sorted index add_scores searches. */
typedef struct vocab_entry {
    const char *text;
    int id;
} vocab_entry;

static int by_text(const void *a, const void *b)
{
    return strcmp(((const vocab_entry *)a)->text, ((const vocab_entry *)b)->text);
}

/* SentencePiece's scores, which llama.cpp's "llama" tokenizer merges by (the
 * adjacent pair whose joined token scores highest first): a token that merge k of
 * tokenizer.json makes scores -k (its first such merge), so merges apply in BPE's
 * order; a token no merge makes scores below all of them. */
static int add_scores(meta *m, const cJSON *tj, int n, const char *path, zt_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *x;
    const int nv = cJSON_GetArraySize(vocab);
    float *score = zt_alloc(ZT_MEM_OTHER, sizeof *score * (size_t)n);
    vocab_entry *idx = nv ? zt_alloc(ZT_MEM_OTHER, sizeof *idx * (size_t)nv) : NULL;
    char *joined = zt_alloc(ZT_MEM_OTHER, 4096);
    int rc = ZT_OK, k = 0;
    if (!score || (nv && !idx) || !joined) {
        rc = zt_fail(err, ZT_EFAIL, "out of memory reading %s", path);
        goto done;
    }
    for (int i = 0; i < n; i++)
        score[i] = -1e6f - (float)i;
    cJSON_ArrayForEach(x, vocab) idx[k++] = (vocab_entry){x->string, x->valueint};
    qsort(idx, (size_t)nv, sizeof *idx, by_text);
    k = 0;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(model, "merges")) {
        const char *a = cJSON_IsString(x) ? x->valuestring : cJSON_IsString(x->child) ? x->child->valuestring : "";
        const char *b = cJSON_IsString(x) ? strchr(a, ' ') : x->child && cJSON_IsString(x->child->next)
                                                                  ? x->child->next->valuestring : NULL;
        size_t la = cJSON_IsString(x) && b ? (size_t)(b - a) : strlen(a);
        if (cJSON_IsString(x) && b)
            b++;
        if (b && la + strlen(b) < 4096) {
            snprintf(joined, 4096, "%.*s%s", (int)la, a, b);
            const vocab_entry key = {joined, 0}, *hit = bsearch(&key, idx, (size_t)nv, sizeof *idx, by_text);
            if (hit && hit->id >= 0 && hit->id < n && score[hit->id] < -1e5f)
                score[hit->id] = -(float)k;
        }
        k++;
    }
    kv_array(m, "tokenizer.ggml.scores", ZT_GGUF_FLOAT32, (uint64_t)n);
    put(&m->b, score, sizeof *score * (size_t)n);
done:
    if (score)
        zt_free(ZT_MEM_OTHER, score, sizeof *score * (size_t)n);
    if (idx)
        zt_free(ZT_MEM_OTHER, idx, sizeof *idx * (size_t)nv);
    if (joined)
        zt_free(ZT_MEM_OTHER, joined, 4096);
    return rc;
}

/* dir's tokenizer into the metadata when it is a byte-level BPE ("gpt2") or a
 * SentencePiece-style one ("llama", with scores); *done says whether it was.
 * Another kind (WordPiece, Unigram) is left out, with a line saying so. */
static int add_tokenizer(exporter *e, const char *dir, int *done, zt_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    struct stat sb;
    *done = 0;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        fprintf(stderr, "ztrain: note: %s has no tokenizer.json; the GGUF file carries no tokenizer\n", dir);
        return ZT_OK;
    }
    zt_json tj;
    int rc = zt_json_parse_file(path, TOKENIZER_MAX, &tj, err);
    if (rc)
        return rc;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj.root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(tj.root, "pre_tokenizer");
    const int bpe = cJSON_IsString(mtype) && strcmp(mtype->valuestring, "BPE") == 0;
    /* SentencePiece-style BPE (Llama 2, Mistral): pieces with "▁" for spaces and
     * byte fallback; llama.cpp's "llama" type */
    const int spm = bpe && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    if (!bpe || (!spm && !find_type(pre, "ByteLevel"))) {
        fprintf(stderr, "ztrain: note: %s is neither a byte-level nor a SentencePiece-style BPE tokenizer; the GGUF "
                "file carries no tokenizer\n", path);
        zt_json_free(&tj);
        return ZT_OK;
    }
    const char *pname = spm ? "default" : pre_name(pre);
    if (!pname)
        fprintf(stderr, "ztrain: note: %s: a pre-tokenizer llama.cpp has no name for; written as \"default\"\n", path);
    kv_str(&e->m, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    kv_str(&e->m, "tokenizer.ggml.pre", pname ? pname : "default");
    rc = add_vocab(&e->m, tj.root, e->cfg.vocab_size, spm, path, err);
    if (rc == ZT_OK && spm)
        rc = add_scores(&e->m, tj.root, e->cfg.vocab_size, path, err);
    if (rc == ZT_OK)
        rc = add_merges(&e->m, tj.root, path, err);
    if (rc == ZT_OK)
        rc = add_specials(&e->m, dir, tj.root, err);
    zt_json_free(&tj);
    *done = rc == ZT_OK;
    return rc;
}

/* ---- the file ---- */

/* magic, version, counts, the metadata, each tensor's name, dims (innermost first),
 * type and offset in the data section, then padding to the alignment. */
static void build_head(exporter *e)
{
    buf *h = &e->head;
    put_u32(h, ZT_GGUF_MAGIC);
    put_u32(h, GGUF_VERSION);
    put_u64(h, (uint64_t)e->nt);
    put_u64(h, e->m.n);
    put(h, e->m.b.p, e->m.b.n);
    uint64_t offset = 0;
    for (int i = 0; i < e->nt; i++) {
        const xtensor *t = &e->t[i];
        put_str(h, t->name);
        put_u32(h, (uint32_t)t->ndim);
        put_u64(h, (uint64_t)t->cols);
        if (t->ndim == 2)
            put_u64(h, (uint64_t)t->rows);
        put_u32(h, t->type);
        put_u64(h, offset);
        offset += pad_to(t->bytes, ZT_GGUF_DEFAULT_ALIGNMENT);
    }
    static const unsigned char zeros[ZT_GGUF_DEFAULT_ALIGNMENT];
    put(h, zeros, pad_to(h->n, ZT_GGUF_DEFAULT_ALIGNMENT) - h->n);
}

/* The buffers get_part fills: the largest tensor's bytes, and one row. */
static int alloc_buffers(exporter *e, zt_err *err)
{
    for (int i = 0; i < e->nt; i++) {
        e->out_cap = e->out_cap > pad_to(e->t[i].bytes, 32) ? e->out_cap : pad_to(e->t[i].bytes, 32);
        e->row_cap = e->row_cap > (size_t)e->t[i].cols ? e->row_cap : (size_t)e->t[i].cols;
    }
    e->out = zt_alloc(ZT_MEM_OTHER, e->out_cap);
    e->row = zt_alloc(ZT_MEM_OTHER, e->row_cap * 4);
    e->raw = zt_alloc(ZT_MEM_OTHER, e->row_cap * 4);
    if (!e->out || !e->row || !e->raw || e->head.oom || e->m.b.oom)
        return zt_fail(err, ZT_EFAIL, "out of memory building the GGUF file");
    return ZT_OK;
}

static void exporter_free(exporter *e)
{
    if (e->out)
        zt_free(ZT_MEM_OTHER, e->out, e->out_cap);
    if (e->row)
        zt_free(ZT_MEM_OTHER, e->row, e->row_cap * 4);
    if (e->raw)
        zt_free(ZT_MEM_OTHER, e->raw, e->row_cap * 4);
    if (e->t)
        zt_free(ZT_MEM_OTHER, e->t, sizeof(xtensor) * (size_t)(e->lay.nparams + 1));
    if (e->w)
        zt_weights_close(e->w);
    if (e->lay_built)
        zt_layout_free(&e->lay);
    buf_free(&e->m.b);
    buf_free(&e->head);
}

/* What GGUF's llama architecture cannot hold is refused rather than dropped. */
static int check_exportable(const char *dir, const zt_llama_config *c, zt_err *err)
{
    const int window = zt_llama_attention_window(c);
    if (window && window < c->max_position_embeddings)
        return zt_fail(err, ZT_EINPUT, "%s: sliding_window %d masks keys within max_position_embeddings (%d), and "
                       "GGUF's llama architecture has no window", dir, window, c->max_position_embeddings);
    if (c->head_dim / 2 > 512)
        return zt_fail(err, ZT_EINPUT, "%s: head_dim %d is larger than the 1024 exported", dir, c->head_dim);
    return ZT_OK;
}

int zt_gguf_export(const char *model_dir, const char *tok_dir, const char *path, zt_gguf_outtype ot,
                   zt_gguf_export_info *info, zt_err *err)
{
    exporter e;
    memset(&e, 0, sizeof e);
    memset(info, 0, sizeof *info);
    int rc = zt_hf_read_config_dir(model_dir, &e.cfg, err);
    if (rc || (rc = check_exportable(model_dir, &e.cfg, err)) ||
        (rc = zt_check_output_path(path, "the GGUF file", err)))
        return rc;
    if ((rc = zt_layout_build(&e.lay, &e.cfg, ZT_WRAP_NONE, 0, 1, err)))
        return rc;
    e.lay_built = 1;
    char name[256];
    size_t len = strlen(model_dir);
    while (len > 1 && model_dir[len - 1] == '/')
        len--;
    const char *base = model_dir + len;
    while (base > model_dir && base[-1] != '/')
        base--;
    snprintf(name, sizeof name, "%.*s", (int)(model_dir + len - base), base);
    if ((rc = zt_weights_open(model_dir, &e.w, err)) || (rc = collect_tensors(&e, model_dir, ot, err)))
        goto done;
    model_meta(&e, name, ot);
    if ((rc = add_tokenizer(&e, tok_dir ? tok_dir : model_dir, &info->tokenizer, err)))
        goto done;
    build_head(&e);
    if ((rc = alloc_buffers(&e, err)) || (rc = zt_write_atomic_fn(path, 1 + e.nt, get_part, &e, err)))
        goto done;
    info->ntensors = e.nt;
    info->f16_fallbacks = e.q8_fallbacks;
    info->bytes = (long long)e.head.n;
    for (int i = 0; i < e.nt; i++)
        info->bytes += (long long)pad_to(e.t[i].bytes, ZT_GGUF_DEFAULT_ALIGNMENT);
done:
    exporter_free(&e);
    return rc;
}
