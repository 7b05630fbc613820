/* vmath.h — exp written so that `#pragma omp simd` loops vectorise, fp32 in and out.
 *
 * libm's expf is an opaque call: a loop that calls it stays scalar.  These are the same
 * function built from arithmetic and bit operations only, so gcc inlines them and
 * vectorises the loop around them.  Both use the Cody-Waite construction
 *   n = round(x / ln2),  r = x - n ln2 (|r| <= ln2/2; ln2 split in a short head, so
 *   that n * head is exact, and a tail),  e^x = e^r * 2^n with 2^n built in the
 *   exponent bits,
 * and both return +0 below e^-104 (so exp(-inf) = 0, as masked softmax entries need),
 * +inf above e^89 (exp(+inf) = inf), NaN for NaN; subnormal results are rounded once.
 *
 *  - zt_expf evaluates in double (degree-10 Taylor polynomial, error < 2^-42) and rounds
 *    once to float: max error 0.500003 ulp; only 36 of the 2.2e9 floats in [-104, 89]
 *    miss the correctly rounded result, so it returns what libm's expf returns (itself
 *    correctly rounded in all but ~0.06% of cases).  Used by the elementwise kernels
 *    (SwiGLU, cross-entropy), where memory traffic hides much of its cost and whose
 *    results thereby stay those of the scalar libm code that was checked against
 *    PyTorch (tests/test_parity.c's 3-step fp32 weights sit at its 1e-5 tolerance, the
 *    fp32 reference's own error, and notice even 1-ulp changes in these kernels).
 *  - zt_expf_fast evaluates in float (Cephes degree-7 polynomial): max error 1.0103 ulp
 *    over all floats in [-104, 89] (for |x| < 30 about one result in ten is not the
 *    correctly rounded one), at ~2.5x the speed.  Used by attention's softmax tiles,
 *    where exp sits in the compute-bound inner loops.
 * tests/test_kernels.c (test_expf_accuracy) measures both.
 *
 * No float comparison selects a value here: gcc turns `c ? a : b` on floats into
 * branches that, with the default -ftrapping-math, keep the loop from vectorising once
 * a float-to-double conversion sits behind them.  The clamping is done on the bits. */
#ifndef ZT_VMATH_H
#define ZT_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/hostdev.h"

/* fma where the target has the instruction (one rounding, vectorised as vfmadd) and a
 * product plus a sum otherwise: without FMA, fma is a slow library call, and no caller
 * needs the single rounding for correctness.  Every CUDA device has fma, so the device
 * code (nvcc's device pass, __CUDA_ARCH__, and tools/cuda_emu's CPU stand-in for it,
 * ZT_CUDA_EMU) always takes fmaf: these bodies are also the CUDA kernels' exp
 * (ZT_HD, hostdev.h), bit for bit the CPU's on a CPU with FMA. */
#if defined(__FMA__) || defined(__CUDA_ARCH__) || defined(ZT_CUDA_EMU)
#define zt_fmaf(a, b, c) fmaf((a), (b), (c))
#define zt_fma(a, b, c) fma((a), (b), (c))
#else
#define zt_fmaf(a, b, c) ((a) * (b) + (c))
#define zt_fma(a, b, c) ((a) * (b) + (c))
#endif

/* x clamped to [-104, 89], and *nan_bits = the bits that turn the result into a quiet
 * NaN when x is NaN (0 otherwise; a NaN is clamped like any large value).  An integer
 * min on the magnitude's bits, which order like the magnitudes. */
ZT_HD static inline float zt_exp_clamp(float x, uint32_t *nan_bits) {
    uint32_t xu;
    memcpy(&xu, &x, sizeof xu);
    const uint32_t mag = xu & 0x7fffffffu;
    const uint32_t lim = (xu >> 31) ? 0x42D00000u /* 104.0f */ : 0x42B20000u /* 89.0f */;
    const uint32_t magc = mag < lim ? mag : lim;
    *nan_bits = (uint32_t)(mag > 0x7f800000u) * 0x7fc00000u;
    const uint32_t cu = (xu & 0x80000000u) | magc;
    float c;
    memcpy(&c, &cu, sizeof c);
    return c;
}

ZT_HD static inline float zt_exp_set_nan(float y, uint32_t nan_bits) {
    uint32_t yu;
    memcpy(&yu, &y, sizeof yu);
    yu |= nan_bits; /* all exponent bits and the quiet bit: a quiet NaN, whatever y was */
    memcpy(&y, &yu, sizeof y);
    return y;
}

ZT_HD static inline float zt_expf(float xf) {
    uint32_t nan_bits;
    const double x = zt_exp_clamp(xf, &nan_bits);
    /* Adding 1.5 * 2^52 rounds to an integer held in the low mantissa bits. */
    const double shifter = 0x1.8p52;
    const double t = zt_fma(x, 0x1.71547652b82fep0 /* 1/ln2 */, shifter);
    const double n = t - shifter;
    /* ln2 = 0x1.62e43p-1 - 0x1.05c610ca86c39p-29: the head has 21 significant bits, so
     * n * head and x - n * head are exact; r is then within 2^-53 relative. */
    double r = x - n * 0x1.62e43p-1;
    r = zt_fma(n, 0x1.05c610ca86c39p-29, r);
    /* e^r = sum_{k <= 10} r^k / k!, truncation error < 0.35^11 / 11! < 2^-42. */
    double p = 1.0 / 3628800.0;
    p = zt_fma(p, r, 1.0 / 362880.0);
    p = zt_fma(p, r, 1.0 / 40320.0);
    p = zt_fma(p, r, 1.0 / 5040.0);
    p = zt_fma(p, r, 1.0 / 720.0);
    p = zt_fma(p, r, 1.0 / 120.0);
    p = zt_fma(p, r, 1.0 / 24.0);
    p = zt_fma(p, r, 1.0 / 6.0);
    p = zt_fma(p, r, 0.5);
    p = zt_fma(p, r, 1.0);
    p = zt_fma(p, r, 1.0);
    /* 2^n, n in [-150, 128], is a normal double: p * 2^n is exact and the conversion
     * to float is the one rounding (to a subnormal, 0 or inf where it must). */
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    const uint64_t sb = (tb - (0x4338000000000000ull - 1023u)) << 52;
    double s;
    memcpy(&s, &sb, sizeof s);
    return zt_exp_set_nan((float)(p * s), nan_bits);
}

ZT_HD static inline float zt_expf_fast(float xf) {
    uint32_t nan_bits;
    const float x = zt_exp_clamp(xf, &nan_bits);
    const float shifter = 0x1.8p23f;
    const float t = zt_fmaf(x, 0x1.715476p+0f /* 1/ln2 */, shifter);
    const float n = t - shifter;
    /* ln2 = 0.693359375 - 2.12194440e-4 (Cephes): the head has 9 significant bits, so
     * n * head is exact for |n| < 2^15 and x - n * head loses nothing. */
    float r = zt_fmaf(n, -0.693359375f, x);
    r = zt_fmaf(n, 2.12194440e-4f, r);
    /* e^r = 1 + r + r^2 P(r), P the Cephes degree-5 minimax polynomial. */
    float p = 1.9875691500e-4f;
    p = zt_fmaf(p, r, 1.3981999507e-3f);
    p = zt_fmaf(p, r, 8.3334519073e-3f);
    p = zt_fmaf(p, r, 4.1665795894e-2f);
    p = zt_fmaf(p, r, 1.6666665459e-1f);
    p = zt_fmaf(p, r, 5.0000001201e-1f);
    const float y = zt_fmaf(p, r * r, r) + 1.0f;
    /* 2^n as two factors 2^n1 * 2^n2, each a normal float, so that results in the
     * subnormal range are rounded once: with u = n + 150 in [0, 278] read from t's bits,
     * n1 = floor(u / 2) - 75 and n2 = n - n1 lie in [-75, 64]. */
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    const uint32_t u = tb - (0x4B400000u - 150u);
    const uint32_t e1 = ((u >> 1) + 52u) << 23, e2 = ((u - (u >> 1)) + 52u) << 23;
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    return zt_exp_set_nan((y * s1) * s2, nan_bits);
}

#endif
