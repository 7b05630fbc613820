/* gguf_format.h — the GGUF file format's constants, shared by its reader and writer.
 *
 * A GGUF file (llama.cpp's model format, versions 2 and 3; all numbers little-endian):
 *   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
 *   kv_count × { string key, u32 value_type, value },
 *   tensor_count × { string name, u32 n_dims, u64 dims[n_dims] (innermost first),
 *                    u32 ggml_type, u64 offset (from the data section's start) },
 *   padding to general.alignment (default 32), then the data section.
 * A string is u64 length + bytes (no terminator); an array is u32 element type,
 * u64 count, then the elements.
 *
 * Tensor data comes in blocks: a type stores `block` consecutive elements of a row
 * in `bytes` bytes (F32: 1 in 4; Q8_0: 32 in 34 = an f16 scale and 32 int8). A row's
 * length must be a multiple of its type's block.  The type table below is the one
 * place those numbers live. */
#ifndef ZT_GGUF_FORMAT_H
#define ZT_GGUF_FORMAT_H

#include <stdint.h>

#define ZT_GGUF_MAGIC 0x46554747u   /* "GGUF" read as a little-endian u32 */
#define ZT_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types (the u32 after each key). */
typedef enum zt_gguf_vtype {
    ZT_GGUF_UINT8 = 0, ZT_GGUF_INT8 = 1, ZT_GGUF_UINT16 = 2, ZT_GGUF_INT16 = 3,
    ZT_GGUF_UINT32 = 4, ZT_GGUF_INT32 = 5, ZT_GGUF_FLOAT32 = 6, ZT_GGUF_BOOL = 7,
    ZT_GGUF_STRING = 8, ZT_GGUF_ARRAY = 9, ZT_GGUF_UINT64 = 10, ZT_GGUF_INT64 = 11,
    ZT_GGUF_FLOAT64 = 12,
    ZT_GGUF_VTYPE_COUNT
} zt_gguf_vtype;

/* Tensor types, numbered as ggml numbers them (gaps are retired types). */
typedef enum zt_ggml_type {
    ZT_GGML_F32 = 0, ZT_GGML_F16 = 1, ZT_GGML_Q4_0 = 2, ZT_GGML_Q4_1 = 3,
    ZT_GGML_Q5_0 = 6, ZT_GGML_Q5_1 = 7, ZT_GGML_Q8_0 = 8, ZT_GGML_Q8_1 = 9,
    ZT_GGML_Q2_K = 10, ZT_GGML_Q3_K = 11, ZT_GGML_Q4_K = 12, ZT_GGML_Q5_K = 13,
    ZT_GGML_Q6_K = 14, ZT_GGML_Q8_K = 15,
    ZT_GGML_BF16 = 30,
} zt_ggml_type;

/* The size in bytes of one metadata scalar of type t (0 for STRING, ARRAY and
 * unknown types, whose size is not fixed). */
int zt_gguf_vtype_size(uint32_t t);

/* One tensor type: its name as llama.cpp prints it, the elements a block holds and
 * the bytes a block takes. */
typedef struct zt_ggml_type_info {
    const char *name;
    int block;
    int bytes;
} zt_ggml_type_info;

/* The table entry of type t, or NULL for a type ztrain does not know. */
const zt_ggml_type_info *zt_ggml_type_get(uint32_t t);

/* The Hugging Face tensor name of a llama-architecture GGUF tensor name, written into
 * out (cap bytes): "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight",
 * "token_embd.weight" -> "model.embed_tokens.weight".  Returns 0 on success, -1 for a
 * name outside the map (or too long for out). */
int zt_gguf_name_to_hf(const char *gguf, char *out, int cap);
/* The inverse: a Hugging Face name to its GGUF name.  Returns 0 or -1 likewise. */
int zt_gguf_name_from_hf(const char *hf, char *out, int cap);

#endif
