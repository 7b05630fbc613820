/* tools/cuda_emu/cuda_runtime.h — just enough of CUDA, on the CPU, to run the CUDA
 * backend's kernels (src/kernels/cuda/*.cu) where there is no GPU.
 *
 * A dev-time tool (tools/cuda_emu/run.sh): the .cu files are compiled by g++ as C++
 * with this header in place of the toolkit's, after run.sh rewrites each launch
 * `k<<<grid, block, smem, stream>>>(args)` into `zt_emu_launch(k, grid, block, smem,
 * stream)(args)` and `extern __shared__ float sm[];` into a pointer to the block's
 * dynamic shared memory.  What it models, and so what it can check:
 *  - every thread of a block runs the kernel's code as a fiber (ucontext) on one OS
 *    thread; blocks run one after another, so `__shared__` variables (static here) are
 *    the block's shared memory;
 *  - __syncthreads and __syncwarp are barriers: a fiber that reaches one waits until
 *    every live thread of its block (warp) has reached it; a thread that returns early
 *    no longer counts, as on the GPU; a barrier that can never complete aborts with
 *    "barrier divergence";
 *  - __shfl_sync and __shfl_xor_sync exchange values through the warp at a barrier;
 *  - atomicAdd on floats (and atomicAdd, atomicMin on unsigned) is a read-modify-write: fibers switch only at barriers, so
 *    nothing interleaves with it (the GPU's order of the adds is not modelled);
 *  - device memory is host memory; streams run in order, synchronously.
 * So it checks the kernels' indexing, masks, synchronisation and arithmetic (fp32 and
 * fp64 on the CPU are the same IEEE operations, fmaf included), not the GPU's
 * scheduling, memory model or performance, and not cuBLASLt (matmul.cu is not built).
 * Fibers switch only at barriers and shuffles, so a missing __syncthreads between a
 * write and another thread's read is NOT caught (the writer has always run ahead). */
#ifndef ZT_CUDA_EMU_RUNTIME_H
#define ZT_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <map>

/* ---- the language ------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

/* the 16-byte vector types (a load or store of one is one access on the GPU) */
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
/* the warp's exchange: every lane posts v, then reads lane src's post */
uint64_t zt_emu_exchange(uint64_t v, int src);

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = zt_emu_exchange(u, src & 31);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    const int lane = (int)((threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31);
    return __shfl_sync(mask, v, lane ^ lane_mask);
}

/* the SFU's exp (a few ulp on the GPU): libm's here */
inline float __expf(float x) { return expf(x); }

inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}

inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}

inline unsigned atomicMin(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = v < old ? v : old;
    return old;
}

/* blocks run one after another here, each to its end: every write is seen by the next */
inline void __threadfence(void) {}

inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }

/* dynamic shared memory of the running block */
float *zt_emu_dyn_smem(void);
/* a number for the running block, new at every block of every launch (the warp
 * primitives of mma_sync.h key their per-thread state to it) */
unsigned long zt_emu_block_serial(void);
#define ZT_EMU_DYN_SMEM_BYTES (256u << 10)

/* ---- the runtime ---------------------------------------------------------------------- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
} cudaError_t;

typedef struct zt_emu_stream *cudaStream_t;
typedef struct zt_emu_event *cudaEvent_t;

enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };

struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
};

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
/* one queue: a second stream (offload's copy stream) is the same synchronous one */
enum { cudaStreamNonBlocking = 1 };
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
/* events: the stream runs synchronously, so every recorded event has completed */
enum { cudaEventDisableTiming = 2 };
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
/* no device clock here: every interval reads 0 ms (the profiler's clock is checked
 * on a GPU by tests/gpu/check.sh, and with a stand-in clock by tests/test_prof.c) */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventDestroy(cudaEvent_t e);
/* graphs: not emulated (capture answers cudaErrorNotSupported; kernels_check skips) */
typedef struct zt_emu_graph *cudaGraph_t;
typedef struct zt_emu_graph_exec *cudaGraphExec_t;
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal,
    cudaStreamCaptureModeThreadLocal,
    cudaStreamCaptureModeRelaxed
};
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

template <typename T>
inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}

template <typename T>
inline cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const T &sym, size_t bytes, size_t offset, cudaMemcpyKind,
                                             cudaStream_t = 0)
{
    memcpy(dst, (const char *)&sym + offset, bytes);
    return cudaSuccess;
}

/* The dynamic shared memory each kernel has been opted into (cudaFuncSetAttribute), as
 * the GPU keeps it: a launch that asks for more than 48 KB without it fails there, and
 * aborts here (zt_emu_launcher).  Setting a kernel's attribute to the value it already
 * has is refused too (cudaErrorInvalidValue, with a line on stderr): CUDA accepts it,
 * but it is a driver call per launch for nothing, and the backend sets each kernel's
 * once (common.cuh, zt_cu_allow_smem), which this holds it to. */
inline std::map<const void *, int> &zt_emu_smem_optin(void)
{
    static std::map<const void *, int> m;
    return m;
}

template <typename K>
inline cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute, int value)
{
    if (value > (int)ZT_EMU_DYN_SMEM_BYTES)
        return cudaErrorInvalidValue;
    int &cur = zt_emu_smem_optin()[(const void *)kernel];
    if (cur == value) {
        fprintf(stderr, "cuda_emu: cudaFuncSetAttribute set a kernel's dynamic shared memory to %d bytes again "
                        "(set it once per kernel)\n", value);
        return cudaErrorInvalidValue;
    }
    cur = value;
    return cudaSuccess;
}

/* ---- launches ------------------------------------------------------------------------- */

/* Run body once per thread of every block of grid x block (fibers, blocks in order). */
void zt_emu_run(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

template <typename K>
struct zt_emu_launcher {
    K *kernel;
    dim3 grid, block;
    size_t smem;
    template <typename... A>
    void operator()(A... args) const
    {
        if (smem > (48u << 10) && (size_t)zt_emu_smem_optin()[(const void *)kernel] < smem) {
            fprintf(stderr, "cuda_emu: bad launch: %zu bytes of dynamic shared memory, over 48 KB, and the kernel "
                            "was opted into %d (cudaFuncSetAttribute)\n", smem, zt_emu_smem_optin()[(const void *)kernel]);
            abort();
        }
        K *k = kernel;
        zt_emu_run(grid, block, smem, [k, args...]() { k(args...); });
    }
};

template <typename K>
inline zt_emu_launcher<K> zt_emu_launch(K *kernel, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t = 0)
{
    return zt_emu_launcher<K>{kernel, grid, block, smem};
}

#endif
