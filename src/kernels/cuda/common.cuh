/* common.cuh — what the CUDA backend's files share: checked CUDA calls, the backend's
 * state (device, stream, scratch), the dtype conversions on the device (bit for bit
 * those of core/dtype.h), exp as vmath.h computes it, and block reductions.
 *
 * The .cu files are compiled with --fmad=false: nvcc would otherwise contract a*b + c
 * into one fma, where the CPU kernels (ISO C, -ffp-contract=off) round the product
 * first.  Where the CPU asks for an fma (zt_fmaf in the attention tiles, vmath.h's
 * polynomials) the device code calls fmaf / fma explicitly, so the same expression
 * gives the same rounding on both devices.  Division and sqrt are IEEE (nvcc's
 * default -prec-div=true -prec-sqrt=true; never --use_fast_math). */
#ifndef ZT_CUDA_COMMON_CUH
#define ZT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "../../core/dtype.h"
#include "../../core/mem.h"
#include "../../core/status.h"
#include "../backend.h"
#include "../backend_cuda.h"
}

/* ---- checked calls ------------------------------------------------------------------ */

/* Inside a table entry that returns nothing: a failure is a device fault or a broken
 * invariant (a bad launch), reported with the call, file:line and CUDA's message. */
[[noreturn]] void zt_cu_die(const char *what, const char *msg, const char *file, int line);
#define ZT_CU(call)                                                                    \
    do {                                                                               \
        cudaError_t zt_e_ = (call);                                                    \
        if (zt_e_ != cudaSuccess)                                                      \
            zt_cu_die(#call, cudaGetErrorString(zt_e_), __FILE__, __LINE__);           \
    } while (0)
/* after every kernel launch: a bad configuration is reported here, at its line */
#define ZT_CU_LAUNCHED() ZT_CU(cudaGetLastError())

/* Where the caller takes an error: the same report as a zt_err, returned. */
#define ZT_CU_TRY(err, call)                                                           \
    do {                                                                               \
        cudaError_t zt_e_ = (call);                                                    \
        if (zt_e_ != cudaSuccess)                                                      \
            return zt_fail((err), ZT_EFAIL, "CUDA error at %s:%d: %s: %s", __FILE__, __LINE__, \
                           #call, cudaGetErrorString(zt_e_));                          \
    } while (0)

/* ---- the backend's state (backend.cu) ----------------------------------------------- */

typedef struct zt_cu_state {
    int ready, device;
    cudaStream_t stream;
    int max_smem_optin; /* bytes of shared memory a block may opt into */
    void *scratch;      /* device scratch of the entries (zt_cu_scratch) */
    size_t scratch_bytes;
    cudaStream_t copy_stream; /* to_host_async's queue, made at its first use (NULL before) */
    cudaEvent_t copy_ready;   /* recorded on stream: where the next copy may start */
} zt_cu_state;
extern zt_cu_state zt_cu;

/* Device scratch of at least bytes for one table entry, valid until the next call
 * (stream order makes reuse safe: a later upload into it runs after the kernels that
 * read it).  Growing waits for the stream, then reallocates (first steps only). */
void *zt_cu_scratch(size_t bytes);
/* Upload n host bytes into device memory in stream order (pageable source: the call
 * returns once the bytes are staged, so the host buffer may change afterwards). */
void zt_cu_upload(void *dst, const void *src, size_t bytes);
/* The sum, in a fixed order, of n doubles in device memory, returned to the host
 * (waits for the stream). */
double zt_cu_sum_doubles(const double *dev, int n);

/* Launch geometry: elementwise kernels use grid-stride loops over a grid capped here;
 * reductions use a grid that depends on n only, so their sums have a fixed order. */
#define ZT_CU_THREADS 256
#define ZT_CU_MAX_BLOCKS 4096
static inline unsigned zt_cu_blocks(size_t n)
{
    size_t b = (n + ZT_CU_THREADS - 1) / ZT_CU_THREADS;
    return (unsigned)(b < 1 ? 1 : b > ZT_CU_MAX_BLOCKS ? ZT_CU_MAX_BLOCKS : b);
}

/* ---- dtypes on the device: core/dtype.h's conversions, the same bits ---------------- */

__device__ __forceinline__ float zt_d_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t zt_d_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float zt_d_round_bf16(float f) { return zt_d_bf16_to_f32(zt_d_f32_to_bf16(f)); }

/* IEEE binary16, round to nearest even, overflow to inf, subnormals (dtype.c) */
__device__ __forceinline__ uint16_t zt_d_f32_to_f16(float f)
{
    uint32_t u = __float_as_uint(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return sign | 0x7e00u;
    if (abs >= 0x477ff000u)
        return sign | 0x7c00u;
    if (abs < 0x38800000u) {
        if (abs < 0x33000000u)
            return sign;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(abs >> 23);
        uint32_t half = 1u << (shift - 1);
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t r = mant >> shift;
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = abs - 0x38000000u;
    uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return sign | (uint16_t)r;
}

__device__ __forceinline__ float zt_d_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float f = (float)mant * 0x1p-24f; /* exact: mant < 2^10 */
        return sign ? -f : f;
    }
    uint32_t u = exp == 0x1f ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
    return __uint_as_float(u);
}

__device__ __forceinline__ float zt_d_load(const void *buf, zt_dtype dt, size_t i)
{
    switch (dt) {
    case ZT_F32: return ((const float *)buf)[i];
    case ZT_BF16: return zt_d_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ZT_F16: return zt_d_f16_to_f32(((const uint16_t *)buf)[i]);
    }
    return 0.0f;
}

__device__ __forceinline__ void zt_d_store(void *buf, zt_dtype dt, size_t i, float v)
{
    switch (dt) {
    case ZT_F32: ((float *)buf)[i] = v; break;
    case ZT_BF16: ((uint16_t *)buf)[i] = zt_d_f32_to_bf16(v); break;
    case ZT_F16: ((uint16_t *)buf)[i] = zt_d_f32_to_f16(v); break;
    }
}

/* ---- exp as vmath.h computes it (same constants, same operation order) --------------- */

/* x clamped to [-104, 89] on its bits; *nan_bits turns the result into a NaN for NaN x */
__device__ __forceinline__ float zt_d_exp_clamp(float x, uint32_t *nan_bits)
{
    const uint32_t xu = __float_as_uint(x);
    const uint32_t mag = xu & 0x7fffffffu;
    const uint32_t lim = (xu >> 31) ? 0x42D00000u : 0x42B20000u;
    const uint32_t magc = mag < lim ? mag : lim;
    *nan_bits = (uint32_t)(mag > 0x7f800000u) * 0x7fc00000u;
    return __uint_as_float((xu & 0x80000000u) | magc);
}

/* vmath.h's zt_expf: double evaluation rounded once (0.500003 ulp) */
__device__ __forceinline__ float zt_d_expf(float xf)
{
    uint32_t nan_bits;
    const double x = zt_d_exp_clamp(xf, &nan_bits);
    const double shifter = 0x1.8p52;
    const double t = fma(x, 0x1.71547652b82fep0, shifter);
    const double n = t - shifter;
    double r = x - n * 0x1.62e43p-1;
    r = fma(n, 0x1.05c610ca86c39p-29, r);
    double p = 1.0 / 3628800.0;
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    const uint64_t tb = (uint64_t)__double_as_longlong(t);
    const uint64_t sb = (tb - (0x4338000000000000ull - 1023u)) << 52;
    const float y = (float)(p * __longlong_as_double((long long)sb));
    return __uint_as_float(__float_as_uint(y) | nan_bits);
}

/* vmath.h's zt_expf_fast: float Cephes polynomial (1.01 ulp), the attention's exp */
__device__ __forceinline__ float zt_d_expf_fast(float xf)
{
    uint32_t nan_bits;
    const float x = zt_d_exp_clamp(xf, &nan_bits);
    const float shifter = 0x1.8p23f;
    const float t = fmaf(x, 0x1.715476p+0f, shifter);
    const float n = t - shifter;
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    const float y = fmaf(p, r * r, r) + 1.0f;
    const uint32_t tb = __float_as_uint(t);
    const uint32_t u = tb - (0x4B400000u - 150u);
    const uint32_t e1 = ((u >> 1) + 52u) << 23, e2 = ((u - (u >> 1)) + 52u) << 23;
    const float z = (y * __uint_as_float(e1)) * __uint_as_float(e2);
    return __uint_as_float(__float_as_uint(z) | nan_bits);
}

/* ---- block reductions (fixed order for a fixed block size) --------------------------- */

__device__ __forceinline__ double zt_d_warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float zt_d_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to
 * every thread.  sh: 32 doubles of shared memory.  Contains __syncthreads. */
__device__ __forceinline__ double zt_d_block_sum(double v, double *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zt_d_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : 0.0;
    return zt_d_warp_sum(t);
}

__device__ __forceinline__ float zt_d_block_max(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = zt_d_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : -INFINITY;
    return zt_d_warp_max(t);
}

#endif
