/* tools/cuda_emu/mma.h — nvcuda::wmma on the CPU, for tools/cuda_emu: the warp-level
 * matrix products the fast attention (src/kernels/cuda/fast_attention.cu) runs on the
 * tensor cores, here as plain fp32 loops, so that those kernels run and are checked
 * without a GPU.
 *
 * What it models.  A fragment's layout across the lanes is opaque to a kernel (CUDA
 * documents no mapping of elements to lanes), so a correct kernel only loads, fills,
 * multiplies and stores whole fragments; here every lane keeps the whole 16 x 16 tile,
 * in fp32.  Each *_sync call is warp-collective, as on the GPU: it starts and ends with
 * __syncwarp, so a call some lanes skip is reported as barrier divergence, and a lane
 * cannot read a tile before every lane has stored it.  mma_sync computes
 * d = c + a b with each element's sum an fma chain over k in increasing order: products
 * of bf16 values are exact in fp32, and only the order of the fp32 sum differs from the
 * tensor cores' (which is unspecified), so results agree with the GPU's to fp32
 * rounding, the difference kernels_check's bounds allow for.
 * Only what the kernels use: 16 x 16 x 16 tiles, bf16 matrix_a / matrix_b in row or
 * column major, fp32 accumulators stored row-major; the pointer alignment and ldm rules
 * (32-byte aligned tiles, ldm a multiple of 8 bf16 or 4 fp32 elements) are checked, as
 * the GPU would fault or misread without them. */
#ifndef ZT_CUDA_EMU_MMA_H
#define ZT_CUDA_EMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "cuda_emu's wmma has 16 x 16 x 16 tiles only");
    float v[16 * 16]; /* the whole tile, row-major, in every lane */
};

inline void zt_emu_wmma_check(const void *p, unsigned ldm, unsigned elem_bytes, const char *what)
{
    if (((uintptr_t)p & 31u) || (ldm * elem_bytes) % 16u) {
        fprintf(stderr, "cuda_emu: wmma %s: pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes\n", what,
                p, ldm);
        abort();
    }
}

inline float zt_emu_bf16_value(__nv_bfloat16 h)
{
    const uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* a (or b) tile of bf16 from memory: element (r, c) at p[r ldm + c] (row-major) or
 * p[c ldm + r] (column-major) */
template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p, unsigned ldm)
{
    __syncwarp();
    zt_emu_wmma_check(p, ldm, 2, "load_matrix_sync");
    constexpr bool row = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r * 16 + c] = zt_emu_bf16_value(row ? p[r * ldm + c] : p[c * ldm + r]);
    __syncwarp();
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, float x)
{
    for (int e = 0; e < 16 * 16; e++) f.v[e] = x;
}

template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    __syncwarp();
    float t[16 * 16];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.v[r * 16 + n];
            for (int k = 0; k < 16; k++) s = fmaf(a.v[r * 16 + k], b.v[k * 16 + n], s);
            t[r * 16 + n] = s;
        }
    memcpy(d.v, t, sizeof t);
    __syncwarp();
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t layout)
{
    __syncwarp();
    zt_emu_wmma_check(p, ldm, 4, "store_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            const float x = f.v[r * 16 + c];
            if (layout == mem_row_major)
                p[r * ldm + c] = x;
            else
                p[c * ldm + r] = x;
        }
    __syncwarp();
}

} // namespace wmma
} // namespace nvcuda

#endif
