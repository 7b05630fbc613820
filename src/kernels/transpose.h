/* transpose.h — a 16 x 16 block of 32-bit words transposed in AVX-512 registers.
 *
 * dst[c*ldd + r] = src[r*lds + c] for r, c < 16: rows interleaved element by element,
 * then by pairs of elements, then 128-bit quarters moved twice so that one register
 * gathers a column — 64 shuffles instead of 256 scalar loads and strided stores.
 * Only defined where the compiler targets AVX-512 (callers keep a scalar path). */
#ifndef ZT_TRANSPOSE_H
#define ZT_TRANSPOSE_H

#ifdef __AVX512F__
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

static inline void zt_transpose16x16_u32(uint32_t *restrict dst, size_t ldd,
                                         const uint32_t *restrict src, size_t lds)
{
    __m512i a[16], b[16];
    for (int r = 0; r < 16; r++) a[r] = _mm512_loadu_si512(src + (size_t)r * lds);
    for (int r = 0; r < 16; r += 2) {
        b[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
        b[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
    }
    for (int r = 0; r < 16; r += 4)
        for (int k = 0; k < 2; k++) {
            a[r + k] = _mm512_unpacklo_epi64(b[r + k], b[r + k + 2]);
            a[r + k + 2] = _mm512_unpackhi_epi64(b[r + k], b[r + k + 2]);
        }
    for (int k = 0; k < 4; k++) {
        b[k] = _mm512_shuffle_i32x4(a[k], a[4 + k], 0x88);
        b[4 + k] = _mm512_shuffle_i32x4(a[k], a[4 + k], 0xdd);
        b[8 + k] = _mm512_shuffle_i32x4(a[8 + k], a[12 + k], 0x88);
        b[12 + k] = _mm512_shuffle_i32x4(a[8 + k], a[12 + k], 0xdd);
    }
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_shuffle_i32x4(b[k], b[8 + k], 0x88);
        a[8 + k] = _mm512_shuffle_i32x4(b[k], b[8 + k], 0xdd);
        a[4 + k] = _mm512_shuffle_i32x4(b[4 + k], b[12 + k], 0x88);
        a[12 + k] = _mm512_shuffle_i32x4(b[4 + k], b[12 + k], 0xdd);
    }
    /* the unpacks leave columns 1 and 2 of each group of four swapped */
    static const int col[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    for (int j = 0; j < 16; j++) _mm512_storeu_si512(dst + (size_t)col[j] * ldd, a[j]);
}
#endif

#endif
