/* test_dtype.c — the fp16 conversions of core/dtype.h against an independent oracle.
 *
 * The oracle works in double, where every fp32 and fp16 value and every scaling by a
 * power of two is exact: for finite x, with E = max(floor(log2 |x|), -14) (fp16's
 * smallest normal exponent), the nearest fp16 is r * 2^(E - 10) with
 * r = nearbyint(|x| * 2^(10 - E)) (the default rounding mode: nearest, ties to even),
 * and its bits are ((E + 15) << 10) + r - 1024; that one formula gives the subnormals
 * (E = -14: the bits are r), the step up to the next binade when r reaches 2048, and
 * overflow (bits from 0x7c00 up are inf).  NaN becomes 0x7e00 with its sign.
 *
 * Which fp32 inputs: for normal results the rounding happens at bit 13 of the fp32
 * bits, so every value of the upper 19 bits (sign, exponent, the 10 kept mantissa
 * bits) is taken with each low-13-bit pattern that sits at or next to a decision
 * (0, 1, half - 1, half, half + 1, all ones) and one random pattern; for subnormal
 * results the rounding bit lies higher, 14 to 24 bits up, and each of those exponents
 * gets the same patterns at its own position; then 2^22 random bit patterns.  The
 * array conversions (zt_convert, whose loops are vectorised) must agree with the
 * scalar function on the same values, element for element. */
#include "../src/core/dtype.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint16_t oracle_f16(float x) {
    const uint16_t sign = (uint16_t)(signbit(x) ? 0x8000u : 0u);
    if (isnan(x))
        return sign | 0x7e00u;
    const double a = fabs((double)x);
    if (a == 0.0)
        return sign;
    if (isinf(x))
        return sign | 0x7c00u;
    int E = ilogb(a);
    E = E < -14 ? -14 : E;
    const double r = nearbyint(ldexp(a, 10 - E));
    const double b = (double)((E + 15) << 10) + r - 1024.0;
    return sign | (uint16_t)(b >= 0x7c00 ? 0x7c00 : b);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rand32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* The inputs described above, in one array. */
static uint32_t *inputs(size_t *count) {
    const size_t cap = ((size_t)1 << 19) * 7 + 2 * 11 * 1024 * 7 + ((size_t)1 << 22);
    uint32_t *u = malloc(sizeof(uint32_t) * cap);
    size_t n = 0;
    for (uint32_t hi = 0; hi < (1u << 19); hi++) {
        const uint32_t low[7] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, rand32() & 0x1fff};
        for (int k = 0; k < 7; k++) u[n++] = hi << 13 | low[k];
    }
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t e = 102; e <= 112; e++) {
            const uint32_t sh = 126 - e, half = 1u << (sh - 1); /* the significand's rounding bit */
            for (uint32_t up = 0; up < (1u << (24 - sh)); up++) {
                const uint32_t low[7] = {0, 1, half - 1, half, half + 1, 2 * half - 1,
                                         rand32() & (2 * half - 1)};
                for (int k = 0; k < 7; k++) {
                    /* the 24-bit significand, its implicit bit 23 set: up above bit sh,
                     * low below (for sh = 24 the implicit bit is part of low) */
                    const uint32_t sig = up << sh | low[k];
                    if (sig >> 23 == 1)
                        u[n++] = s << 31 | e << 23 | (sig & 0x7fffffu);
                }
            }
        }
    for (size_t i = 0; i < ((size_t)1 << 22); i++) u[n++] = rand32() << 16 ^ rand32();
    *count = n;
    return u;
}

static void test_f32_to_f16_is_nearest_even(void) {
    size_t n;
    uint32_t *u = inputs(&n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = from_bits(u[i]);
        if (zt_f32_to_f16(x) != oracle_f16(x) && bad++ == 0)
            first = i;
    }
    ZT_CHECK_MSG(bad == 0, "%zu of %zu fp32 values rounded wrongly; first 0x%08x: got 0x%04x, "
                 "nearest even 0x%04x", bad, n, bad ? u[first] : 0,
                 bad ? zt_f32_to_f16(from_bits(u[first])) : 0, bad ? oracle_f16(from_bits(u[first])) : 0);
    /* the named edges: the largest finite, the first value that overflows, ties */
    ZT_CHECK(zt_f32_to_f16(65504.0f) == 0x7bffu && zt_f32_to_f16(65519.996f) == 0x7bffu);
    ZT_CHECK(zt_f32_to_f16(65520.0f) == 0x7c00u && zt_f32_to_f16(-INFINITY) == 0xfc00u);
    ZT_CHECK(zt_f32_to_f16(0x1p-25f) == 0 && zt_f32_to_f16(0x1.000002p-25f) == 1);
    ZT_CHECK(zt_f32_to_f16(0x1.8p-24f) == 2 && zt_f32_to_f16(-0.0f) == 0x8000u);
    ZT_CHECK(zt_f32_to_f16(from_bits(0xffc00001u)) == 0xfe00u); /* NaN: quiet, sign kept */
    free(u);
}

/* Every fp16 bit pattern: the value in double, and back to the same bits. */
static void test_f16_to_f32_is_exact(void) {
    size_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t e = h >> 10 & 0x1f, m = h & 0x3ff;
        const float f = zt_f16_to_f32((uint16_t)h);
        int ok = !!signbit(f) == !!(h & 0x8000u);
        if (e == 31) /* inf and NaN keep the mantissa bits */
            ok = ok && (bits_of(f) & 0x7fffffffu) == (0x7f800000u | m << 13);
        else
            ok = ok && fabs((double)f) == (e ? ldexp(1024.0 + m, (int)e - 25) : ldexp(m, -24)) &&
                 zt_f32_to_f16(f) == h;
        bad += !ok;
    }
    ZT_CHECK_MSG(bad == 0, "%zu of 65536 fp16 values converted wrongly", bad);
}

/* zt_convert's loops and zt_round_f16 give the scalar conversions' values. */
static void test_array_conversions_agree(void) {
    size_t n;
    uint32_t *u = inputs(&n);
    uint16_t *h = malloc(2 * n);
    float *f = malloc(4 * n);
    zt_convert(h, ZT_F16, u, ZT_F32, n);
    zt_convert(f, ZT_F32, h, ZT_F16, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = from_bits(u[i]);
        const uint16_t want = zt_f32_to_f16(x);
        const float back = zt_f16_to_f32(want);
        bad += h[i] != want || bits_of(f[i]) != bits_of(back) ||
               bits_of(zt_round_f16(x)) != bits_of(back);
    }
    ZT_CHECK_MSG(bad == 0, "%zu of %zu array conversions differ from the scalar ones", bad, n);
    free(u), free(h), free(f);
}

int main(void) {
    ZT_RUN(test_f32_to_f16_is_nearest_even);
    ZT_RUN(test_f16_to_f32_is_exact);
    ZT_RUN(test_array_conversions_agree);
    ZT_TEST_MAIN_END();
}
