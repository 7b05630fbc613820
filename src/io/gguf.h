/* gguf.h — read GGUF files (llama.cpp's format, versions 2 and 3; layout in
 * gguf_format.h): the metadata, the tensor table, and tensors dequantized to fp32.
 *
 * The file is mapped once and every count, length and offset is checked against
 * it while the header is parsed, so what zt_gguf_open returns can be used without
 * further checks: every string and array lies inside the file; every key and
 * tensor name is valid UTF-8 and unique; every tensor has a known type, 1 to 4
 * dimensions whose product fits, a first dimension that is a whole number of its
 * type's blocks, an offset aligned to general.alignment, and bytes inside the
 * data section that overlap no other tensor's.  A fault is ZT_EINPUT naming the
 * file and the field (contract §5).
 *
 * Dequantization follows ggml's reference (dequantize_row_*) for F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K, bit for bit in fp32: each value is
 * the same fp32 products and sums in the same order (ISO C, no fused
 * multiply-add), which is what the gguf package's numpy dequantizer computes
 * too.  Other quantized types (Q5_0, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K) are read
 * but refused when a tensor of theirs is dequantized, naming tensor and type. */
#ifndef ZT_GGUF_H
#define ZT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"
#include "../model/config.h"
#include "gguf_format.h"

typedef struct zt_gguf zt_gguf;

/* A string inside the mapping (not NUL-terminated). */
typedef struct zt_gguf_str {
    const char *s;
    uint64_t len;
} zt_gguf_str;

/* One metadata entry.  type is its value type; an array has elem (its elements'
 * type) and count; a scalar has count 1.  val points at the value's bytes in the
 * mapping (a scalar's little-endian bytes, or an array's first element); strs
 * lists the strings of a STRING value (1) or a string array (count). */
typedef struct zt_gguf_kv {
    const char *key;      /* NUL-terminated, owned by the file object */
    uint32_t type, elem;
    uint64_t count;
    const uint8_t *val;
    zt_gguf_str *strs;
} zt_gguf_kv;

#define ZT_GGUF_MAX_DIMS 4

typedef struct zt_gguf_tensor {
    const char *name;     /* NUL-terminated, owned by the file object */
    uint32_t type;        /* zt_ggml_type */
    int ndim;
    int64_t dims[ZT_GGUF_MAX_DIMS]; /* ggml order: dims[0] is the innermost (a row's length) */
    int64_t numel;
    const uint8_t *data;  /* in the mapping */
    size_t nbytes;
} zt_gguf_tensor;

/* 1 when path names a regular file that starts with the GGUF magic. */
int zt_gguf_is_file(const char *path);
int zt_gguf_open(const char *path, zt_gguf **out, zt_err *err);
void zt_gguf_close(zt_gguf *g);
const char *zt_gguf_path(const zt_gguf *g);
uint32_t zt_gguf_version(const zt_gguf *g);

int zt_gguf_kv_count(const zt_gguf *g);
const zt_gguf_kv *zt_gguf_kv_at(const zt_gguf *g, int i);
const zt_gguf_kv *zt_gguf_find(const zt_gguf *g, const char *key); /* NULL if absent */
/* Typed reads of key; absent keys leave *out alone and return ZT_OK with
 * *present 0 (present may be NULL when the caller has a default).  A value of
 * the wrong type, or an integer that does not fit, is ZT_EINPUT naming the key. */
int zt_gguf_get_int(const zt_gguf *g, const char *key, int64_t *out, int *present, zt_err *err);
int zt_gguf_get_float(const zt_gguf *g, const char *key, double *out, int *present, zt_err *err);
int zt_gguf_get_bool(const zt_gguf *g, const char *key, int *out, int *present, zt_err *err);
int zt_gguf_get_str(const zt_gguf *g, const char *key, zt_gguf_str *out, int *present, zt_err *err);
/* Element i of a numeric array kv (i < kv->count) as an int64 (a float element is
 * truncated) or a double. */
int64_t zt_gguf_arr_int(const zt_gguf_kv *kv, uint64_t i);
double zt_gguf_arr_float(const zt_gguf_kv *kv, uint64_t i);

int zt_gguf_tensor_count(const zt_gguf *g);
const zt_gguf_tensor *zt_gguf_tensor_at(const zt_gguf *g, int i);
const zt_gguf_tensor *zt_gguf_tensor_find(const zt_gguf *g, const char *name);

/* Tensor t's numel values as fp32 into out. */
int zt_gguf_dequantize(const zt_gguf *g, const zt_gguf_tensor *t, float *out, zt_err *err);

/* The model configuration the metadata describes, as transformers' GGUF loader
 * derives it: general.architecture "llama" (Llama, Mistral, SmolLM2) or "qwen2"
 * (q/k/v biases), and the ARCH.* keys (block_count, embedding_length,
 * feed_forward_length, attention.head_count(_kv), attention.key_length or
 * rope.dimension_count, rope.freq_base, attention.layer_norm_rms_epsilon,
 * context_length); the vocabulary from token_embd's rows; tied embeddings when
 * there is no output.weight.  Rope scaling and other architectures are refused. */
int zt_gguf_config(const zt_gguf *g, zt_llama_config *cfg, zt_err *err);

/* The parameter HF calls hf_name (shape [rows, cols], or [rows] when cols is 0)
 * as fp32 into out: its GGUF tensor (gguf_format.h's name map), dequantized, with
 * llama.cpp's converter's permutation of the q and k rows undone for the llama
 * architecture (it interleaves each head's two rotary halves; n_heads of q,
 * n_kv_heads of k).  ZT_EINPUT when the tensor is missing or its shape differs. */
int zt_gguf_read_param(const zt_gguf *g, const zt_llama_config *cfg, const char *hf_name, int64_t rows,
                       int64_t cols, float *out, zt_err *err);

#endif
