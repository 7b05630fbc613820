/* common.cuh — what the CUDA backend's files share: checked CUDA calls, the backend's
 * state (device, stream, scratch), typed loads and stores (core/dtype.h's
 * conversions, which are also device functions), and block reductions.
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
#include "../vmath.h"
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
    cudaEvent_t copy_done;    /* recorded on copy_stream by copy_join: what stream waits for */
} zt_cu_state;
extern zt_cu_state zt_cu;

/* Device scratch of at least bytes for one table entry, valid until the next call
 * (stream order makes reuse safe: a later upload into it runs after the kernels that
 * read it).  Growing waits for the stream, then reallocates (first steps only). */
void *zt_cu_scratch(size_t bytes);
/* Upload n host bytes into device memory in stream order, through a page-locked slot
 * (backend.cu): the host buffer may change as soon as the call returns, and the host
 * does not wait for the device. */
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

/* ---- dtypes and exp on the device: the host's own bodies ---------------------------
 *
 * core/dtype.h's conversions and vmath.h's zt_expf / zt_expf_fast are ZT_HD
 * (core/hostdev.h), so the kernels call the very functions the CPU kernels call, and
 * get their bits: one home for each rule.  (vmath.h takes fmaf on the device, where
 * its CPU build takes it on CPUs with FMA.) */

__device__ __forceinline__ float zt_d_load(const void *buf, zt_dtype dt, size_t i)
{
    switch (dt) {
    case ZT_F32: return ((const float *)buf)[i];
    case ZT_BF16: return zt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ZT_F16: return zt_f16_to_f32(((const uint16_t *)buf)[i]);
    }
    return 0.0f;
}

__device__ __forceinline__ void zt_d_store(void *buf, zt_dtype dt, size_t i, float v)
{
    switch (dt) {
    case ZT_F32: ((float *)buf)[i] = v; break;
    case ZT_BF16: ((uint16_t *)buf)[i] = zt_f32_to_bf16(v); break;
    case ZT_F16: ((uint16_t *)buf)[i] = zt_f32_to_f16(v); break;
    }
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
