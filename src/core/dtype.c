/* dtype.c — conversions between fp32, bf16 and fp16 (see dtype.h). */
#include "dtype.h"

#include <math.h>
#include <strings.h>

uint16_t zt_f32_to_f16(float f)
{
    /* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
     * Round to nearest even, overflow to inf, gradual underflow to subnormals. */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return sign | 0x7e00u; /* NaN */
    if (abs >= 0x477ff000u)     /* >= 65520 rounds to inf */
        return sign | 0x7c00u;
    if (abs < 0x38800000u) { /* below 2^-14: subnormal or zero */
        if (abs < 0x33000000u) /* below half the smallest subnormal 2^-25 */
            return sign;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        /* value = mant * 2^(e-150); the f16 subnormal unit is 2^-24 */
        int shift = 126 - (int)(abs >> 23);
        uint32_t half = 1u << (shift - 1);
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t r = mant >> shift;
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = abs - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return sign | (uint16_t)r;
}

float zt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    } else {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

size_t zt_dtype_size(zt_dtype dt) { return dt == ZT_F32 ? 4 : 2; }

const char *zt_dtype_name(zt_dtype dt)
{
    switch (dt) {
    case ZT_F32: return "fp32";
    case ZT_BF16: return "bf16";
    case ZT_F16: return "fp16";
    }
    return "?";
}

int zt_dtype_parse(const char *s, zt_dtype *out)
{
    static const struct { const char *name; zt_dtype dt; } names[] = {
        {"fp32", ZT_F32}, {"float32", ZT_F32}, {"float", ZT_F32}, {"f32", ZT_F32},
        {"bf16", ZT_BF16}, {"bfloat16", ZT_BF16},
        {"fp16", ZT_F16}, {"float16", ZT_F16}, {"half", ZT_F16}, {"f16", ZT_F16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].dt;
            return 0;
        }
    return -1;
}

/* Conversions below this many elements stay on the calling thread: forking the
 * OpenMP pool costs more than the loop (and callers inside a parallel region, such
 * as the embedding lookup, convert one row at a time). */
#define CONVERT_PAR_MIN ((size_t)1 << 16)

void zt_convert(void *dst, zt_dtype dd, const void *src, zt_dtype sd, size_t n)
{
    if (dd == sd) {
        memmove(dst, src, n * zt_dtype_size(dd));
        return;
    }
    if (sd == ZT_F32 && dd == ZT_BF16) {
        const float *restrict s = src;
        uint16_t *restrict d = dst;
        #pragma omp parallel for simd schedule(static) if (n >= CONVERT_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            d[i] = zt_f32_to_bf16(s[i]);
        return;
    }
    if (sd == ZT_BF16 && dd == ZT_F32) {
        const uint16_t *restrict s = src;
        float *restrict d = dst;
        #pragma omp parallel for simd schedule(static) if (n >= CONVERT_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            d[i] = zt_bf16_to_f32(s[i]);
        return;
    }
    #pragma omp parallel for schedule(static) if (n >= CONVERT_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        zt_store_f32(dst, dd, i, zt_load_f32(src, sd, i));
}

/* memcpy loads: tensors mmapped from a safetensors file need not be aligned to
 * their element size, and this slow path is the one that reads them. */
float zt_load_f32(const void *buf, zt_dtype dt, size_t i)
{
    float f;
    uint16_t h;
    switch (dt) {
    case ZT_F32: memcpy(&f, (const char *)buf + 4 * i, 4); return f;
    case ZT_BF16: memcpy(&h, (const char *)buf + 2 * i, 2); return zt_bf16_to_f32(h);
    case ZT_F16: memcpy(&h, (const char *)buf + 2 * i, 2); return zt_f16_to_f32(h);
    }
    return 0.0f;
}

void zt_store_f32(void *buf, zt_dtype dt, size_t i, float v)
{
    switch (dt) {
    case ZT_F32: ((float *)buf)[i] = v; break;
    case ZT_BF16: ((uint16_t *)buf)[i] = zt_f32_to_bf16(v); break;
    case ZT_F16: ((uint16_t *)buf)[i] = zt_f32_to_f16(v); break;
    }
}
