/* dtype.h — the one dtype-conversion module.
 *
 * ztrain stores tensors as fp32, bf16 or fp16.  bf16 is the top half of an fp32
 * (8 significant bits); rounding fp32 -> bf16 / fp16 is round-to-nearest-even, as
 * torch's .to() does, and NaN stays NaN.  Everything that narrows a value goes
 * through these functions, so "every stored value is rounded to its dtype"
 * (contract §3) has exactly one implementation.  The inline conversions are ZT_HD
 * (hostdev.h): the CUDA kernels call these same bodies. */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hostdev.h"

typedef enum zt_dtype { ZT_F32 = 0, ZT_BF16 = 1, ZT_F16 = 2 } zt_dtype;

ZT_HD static inline float zt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

ZT_HD static inline uint16_t zt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* Round an fp32 value to the nearest bf16 and back: the value bf16 storage keeps. */
ZT_HD static inline float zt_round_bf16(float f) { return zt_bf16_to_f32(zt_f32_to_bf16(f)); }

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.  fp32 -> fp16 rounds
 * to nearest even, overflows to inf (from 65520 up, the first value nearer 2^16 than
 * 65504), underflows gradually to subnormals, and turns every NaN into the quiet NaN
 * 0x7e00 with its sign.  Written without branches, every case computed and one
 * selected, so that loops over arrays vectorise (a call per element ran fp16 training
 * at half fp32's speed).  Rounding at bit b of an unsigned m: (m + 2^(b-1) - 1 + lsb) >> b
 * with lsb = (m >> b) & 1 carries exactly when the remainder is above half, or half
 * with an odd result (ties to even); a carry out of the mantissa raises the exponent,
 * as it should. */
ZT_HD static inline uint16_t zt_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    /* normal results (abs >= 2^-14): rebias the exponent 127 -> 15, round off 13 bits */
    const uint32_t r = abs - 0x38000000u;
    const uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
    /* subnormal results (2^-25 <= abs < 2^-14): the significand with its implicit bit,
     * whose value is mant * 2^(e - 150), in units of 2^-24: shifted right by 126 - e,
     * which lies in [14, 24] there (clamped so that other lanes shift by a defined amount) */
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int32_t e = (int32_t)(abs >> 23);
    const int32_t sh0 = 126 - e;
    const uint32_t sh = (uint32_t)(sh0 < 14 ? 14 : sh0 > 24 ? 24 : sh0);
    const uint32_t sub = (mant + (1u << (sh - 1)) - 1u + ((mant >> sh) & 1u)) >> sh;
    const uint32_t h = abs > 0x7f800000u   ? 0x7e00u /* NaN */
                       : abs >= 0x477ff000u ? 0x7c00u /* rounds to inf */
                       : abs >= 0x38800000u ? normal
                       : abs >= 0x33000000u ? sub
                                            : 0u; /* below half the smallest subnormal */
    return (uint16_t)(sign | h);
}

/* fp16 -> fp32 is exact; inf and NaN keep their mantissa bits.  A subnormal's value
 * mant * 2^-24 is normalised in integers (shifted until bit 10 is its leading one, by
 * k in [1, 10], in steps of 8, 4, 2, 1: the value is then 1.f * 2^(-14 - k)), since a
 * float operation, which GCC may not run speculatively under -ftrapping-math, would
 * put a branch in every loop using this. */
ZT_HD static inline float zt_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t m = mant, k = 0;
    k = m < 0x008u ? k + 8 : k, m = m < 0x008u ? m << 8 : m;
    k = m < 0x080u ? k + 4 : k, m = m < 0x080u ? m << 4 : m;
    k = m < 0x200u ? k + 2 : k, m = m < 0x200u ? m << 2 : m;
    k = m < 0x400u ? k + 1 : k, m = m < 0x400u ? m << 1 : m;
    const uint32_t sub = mant ? (113u - k) << 23 | (m & 0x3ffu) << 13 : 0u;
    const uint32_t u = exp == 0x1fu ? 0x7f800000u | (mant << 13)
                       : exp == 0u  ? sub
                                    : ((exp + 112u) << 23) | (mant << 13);
    const uint32_t v = sign | u;
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* Round an fp32 value to the nearest fp16 and back: the value fp16 storage keeps. */
ZT_HD static inline float zt_round_f16(float f) { return zt_f16_to_f32(zt_f32_to_f16(f)); }

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
