/* rope_freq.h — RoPE's inverse frequencies and its rotation of a pair, the one formulas the CPU tables (rope.c) and
 * the CUDA tables (cuda/rope.cu) both evaluate, so the two give the same bits.
 *
 * Default (HF's _compute_default_rope_parameters), for pair i < hd/2:
 *   inv_freq_i = 1 / theta^(2i/hd)
 * Llama 3.1's "llama3" rope_type (HF's _compute_llama3_parameters) rescales the long
 * wavelengths, with L = original_max_position_embeddings, lo = low_freq_factor,
 * hi = high_freq_factor, s = factor and the wavelength w = 2 pi / inv_freq:
 *   w < L/hi                 (high frequencies)  inv_freq          unchanged
 *   w > L/lo                 (low frequencies)   inv_freq / s
 *   otherwise (medium)       (1 - g) inv_freq / s + g inv_freq,   g = (L/w - lo) / (hi - lo)
 * so positions seen in pre-training keep their angles at high frequency and the
 * slowest rotations stretch by s.  torch evaluates it in fp32 tensor ops, one rounding
 * each, with the Python numbers (s, lo, L, 2 pi, hi - lo) rounded to fp32 where they
 * meet a tensor; `a / t` for a tensor t is t.reciprocal() * a.  Every step below is
 * rounded where torch rounds it (ISO C and nvcc --fmad=false contract nothing). */
#ifndef ZT_ROPE_FREQ_H
#define ZT_ROPE_FREQ_H

#include <math.h>

#ifdef __CUDACC__
#define ZT_ROPE_HD __host__ __device__
#else
#define ZT_ROPE_HD
#endif

/* The frequencies a model's config asks for (model/config.h fills it). */
typedef struct zt_rope_freqs {
    float theta;  /* rope_theta, rounded to fp32 as the default formula's base */
    int llama3;   /* 0: the default frequencies; 1: Llama 3.1's scaling below */
    double factor, low_freq_factor, high_freq_factor, original_max_position_embeddings;
} zt_rope_freqs;

/* inv_freq of pair i of a head of hd dimensions, in fp32 as transformers computes it. */
static inline ZT_ROPE_HD float zt_rope_inv_freq(const zt_rope_freqs *f, int i, int hd)
{
    /* 1.0 / (theta ** (arange(0, hd, 2).float() / hd)); pow in double, rounded once */
    const float expo = (float)(2 * i) / (float)hd;
    const float inv = 1.0f / (float)pow((double)f->theta, (double)expo);
    if (!f->llama3)
        return inv;
    const double L = f->original_max_position_embeddings;
    const float s = (float)f->factor, lo = (float)f->low_freq_factor;
    const float low_wavelen = (float)(L / f->low_freq_factor);   /* Python floats, then fp32 */
    const float high_wavelen = (float)(L / f->high_freq_factor);
    const float wavelen = (1.0f / inv) * (float)(2.0 * 3.14159265358979323846);
    float scaled = wavelen > low_wavelen ? inv / s : inv;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float g = ((1.0f / wavelen) * (float)L - lo) / (float)(f->high_freq_factor - f->low_freq_factor);
        scaled = (1.0f - g) * scaled / s + g * scaled;
    }
    return scaled;
}

/* One pair's rotation (HF's rotate_half), with c = cos a and s = sin a of its angle, or
 * s = -sin a for the rotation by -a (the transpose: RoPE's backward):
 *   y1 = x1 c - x2 s,  y2 = x2 c + x1 s.
 * The one expression rope.c, rope.cu and the fast attention's tile loads
 * (fast_attention.cu) evaluate; negating s is exact, so the backward's bits are those of
 * rotating by the negated angle's tables. */
typedef struct zt_rope_pair {
    float y1, y2;
} zt_rope_pair;

static inline ZT_ROPE_HD zt_rope_pair zt_rope_rotate(float x1, float x2, float c, float s)
{
    zt_rope_pair r = {x1 * c - x2 * s, x2 * c + x1 * s};
    return r;
}

#endif
