/* dtype.c — conversions between fp32, bf16 and fp16 (see dtype.h). */
#include "dtype.h"

#include <strings.h>

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
    if (sd == ZT_F32 && dd == ZT_F16) {
        const float *restrict s = src;
        uint16_t *restrict d = dst;
        #pragma omp parallel for simd schedule(static) if (n >= CONVERT_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            d[i] = zt_f32_to_f16(s[i]);
        return;
    }
    if (sd == ZT_F16 && dd == ZT_F32) {
        const uint16_t *restrict s = src;
        float *restrict d = dst;
        #pragma omp parallel for simd schedule(static) if (n >= CONVERT_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            d[i] = zt_f16_to_f32(s[i]);
        return;
    }
    /* between the two 16-bit formats, through fp32 (exact from either) */
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
