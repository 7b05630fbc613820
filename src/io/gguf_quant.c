/* gguf_quant.c — GGUF tensor types to fp32, as ggml's reference dequantizers
 * define them (gguf.h: zt_gguf_dequantize).
 *
 * Every product and sum below is written in the order ggml writes it, in fp32,
 * and ISO C does not fuse a*b + c into one rounding, so each value is bit-equal
 * to ggml's reference and to the gguf package's numpy version of it.
 *
 * Block layouts (little-endian; d, m, dmin are fp16):
 *   Q8_0  d, int8 q[32]                            x = d*q
 *   Q4_0  d, u8 qs[16]: element j low nibble,      x = d*(nibble - 8)
 *         element j+16 high nibble
 *   Q4_1  d, m, qs[16] as Q4_0                     x = d*nibble + m
 *   Q4_K  super-block of 256 = 8 sub-blocks of 32: d, dmin, 12 bytes holding eight
 *         6-bit scales and eight 6-bit mins, qs[128]; each 64 elements use one 32-byte
 *         run of qs, low nibbles for the first 32, high for the next:
 *                                                  x = (d*sc)*q - (dmin*mn)
 *   Q5_K  as Q4_K with qh[32] before qs: bit (2k or 2k+1) of qh[l] is the fifth bit
 *         of element l of the k-th 64-run's two halves
 *   Q6_K  ql[128], qh[64], int8 scales[16], d (at the end): 6-bit q = low 4 bits
 *         from ql, high 2 from qh, minus 32; 16 sub-blocks of 16:  x = (d*sc)*q */
#include <string.h>

#include "../core/dtype.h"
#include "gguf.h"

static float f16_at(const uint8_t *p) { return zt_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        int lo = (b[2 + j] & 0xF) - 8, hi = (b[2 + j] >> 4) - 8;
        y[j] = (float)lo * d;
        y[j + 16] = (float)hi * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 0xF) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* Scale and min j (0..7) of a K-quant super-block's 12 packed bytes: the first
 * four are the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four
 * take their low 4 bits from bytes 8-11 and their top 2 bits from the spare top
 * bits of bytes 0-3 (scales) and 4-7 (mins). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K (has_high 0) and Q5_K (has_high 1): qh, when present, precedes qs. */
static void deq_k45(const uint8_t *b, float *y, int has_high)
{
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 16 + (has_high ? 32 : 0);
    for (int run = 0; run < 4; run++) {
        int sc, mn;
        scale_min_k4(2 * run, scales, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(2 * run + 1, scales, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        int u1 = 1 << (2 * run), u2 = 2 << (2 * run);
        for (int l = 0; l < 32; l++) {
            int hi1 = has_high && (qh[l] & u1) ? 16 : 0, hi2 = has_high && (qh[l] & u2) ? 16 : 0;
            y[l] = d1 * (float)((ql[l] & 0xF) + hi1) - m1;
            y[l + 32] = d2 * (float)((ql[l] >> 4) + hi2) - m2;
        }
        ql += 32;
        y += 64;
    }
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        ql += 64;
        qh += 32;
        sc += 8;
        y += 128;
    }
}

int zt_gguf_dequantize(const zt_gguf *g, const zt_gguf_tensor *t, float *out, zt_err *err)
{
    const zt_ggml_type_info *ti = zt_ggml_type_get(t->type);
    size_t n = (size_t)t->numel, nb = n / (size_t)ti->block;
    const uint8_t *p = t->data;
    switch (t->type) {
    case ZT_GGML_F32:
        memcpy(out, p, n * 4);
        return ZT_OK;
    case ZT_GGML_F16:
        for (size_t i = 0; i < n; i++)
            out[i] = f16_at(p + 2 * i);
        return ZT_OK;
    case ZT_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            out[i] = zt_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return ZT_OK;
    default:
        break;
    }
    void (*deq)(const uint8_t *, float *) = t->type == ZT_GGML_Q8_0   ? deq_q8_0
                                            : t->type == ZT_GGML_Q4_0 ? deq_q4_0
                                            : t->type == ZT_GGML_Q4_1 ? deq_q4_1
                                            : t->type == ZT_GGML_Q6_K ? deq_q6_k
                                                                      : NULL;
    int k45 = t->type == ZT_GGML_Q4_K ? 0 : t->type == ZT_GGML_Q5_K ? 1 : -1;
    if (!deq && k45 < 0)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\" has type %s, which ztrain does not dequantize "
                       "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)", zt_gguf_path(g), t->name,
                       ti->name);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = p + i * (size_t)ti->bytes;
        float *y = out + i * (size_t)ti->block;
        if (deq)
            deq(b, y);
        else
            deq_k45(b, y, k45);
    }
    return ZT_OK;
}
