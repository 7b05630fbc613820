/* dtype.h — the one dtype-conversion module.
 *
 * ztrain stores tensors as fp32, bf16 or fp16.  bf16 is the top half of an fp32
 * (8 significant bits); rounding fp32 -> bf16 / fp16 is round-to-nearest-even, as
 * torch's .to() does, and NaN stays NaN.  Everything that narrows a value goes
 * through these functions, so "every stored value is rounded to its dtype"
 * (contract §3) has exactly one implementation. */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum zt_dtype { ZT_F32 = 0, ZT_BF16 = 1, ZT_F16 = 2 } zt_dtype;

static inline float zt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t zt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* Round an fp32 value to the nearest bf16 and back: the value bf16 storage keeps. */
static inline float zt_round_bf16(float f) { return zt_bf16_to_f32(zt_f32_to_bf16(f)); }

uint16_t zt_f32_to_f16(float f);
float zt_f16_to_f32(uint16_t h);

size_t zt_dtype_size(zt_dtype dt);
const char *zt_dtype_name(zt_dtype dt); /* "fp32", "bf16", "fp16" */
/* Accepts fp32/float32/float/no, bf16/bfloat16, fp16/float16/half. 0 on success. */
int zt_dtype_parse(const char *s, zt_dtype *out);

/* dst[i] = (dst dtype) src[i] for n elements; same dtype is a copy. */
void zt_convert(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, size_t n);

/* Read / write element i of a typed buffer as fp32 (slow path, for tests and I/O). */
float zt_load_f32(const void *buf, zt_dtype dt, size_t i);
void zt_store_f32(void *buf, zt_dtype dt, size_t i, float v);

#endif
