/* tools/cuda_emu/emu.cpp — the runtime behind tools/cuda_emu/cuda_runtime.h: threads of
 * a block as fibers with barriers, warp exchanges, and device memory as host memory. */
#include "cuda_runtime.h"

#include <ucontext.h>

#include <vector>

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

enum state { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct fiber {
    ucontext_t ctx;
    char *stack = nullptr;
    state st = RUNNABLE;
    dim3 tid;
};

constexpr size_t STACK_BYTES = 256u << 10;
constexpr int MAX_THREADS = 1024;

std::vector<fiber> fibers(MAX_THREADS);
ucontext_t scheduler;
int current = -1, nthreads = 0;
unsigned long block_serial;
const std::function<void()> *body_fn = nullptr;
uint64_t xbuf[MAX_THREADS];
alignas(64) float dyn_smem[ZT_EMU_DYN_SMEM_BYTES / sizeof(float)];

void trampoline(void)
{
    (*body_fn)();
    fibers[current].st = DONE;
    swapcontext(&fibers[current].ctx, &scheduler);
}

void wait_at(state s)
{
    fibers[current].st = s;
    swapcontext(&fibers[current].ctx, &scheduler);
}

[[noreturn]] void divergence(const char *what)
{
    fprintf(stderr, "cuda_emu: barrier divergence at %s (block %u,%u,%u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z);
    abort();
}

/* Release the barriers that every live thread has reached; 1 if any fiber can run. */
bool release(void)
{
    bool any_block = false, all_block = true;
    for (int t = 0; t < nthreads; t++) {
        if (fibers[t].st == DONE)
            continue;
        if (fibers[t].st == AT_BLOCK_BARRIER)
            any_block = true;
        else
            all_block = false;
    }
    if (any_block && all_block) {
        for (int t = 0; t < nthreads; t++)
            if (fibers[t].st == AT_BLOCK_BARRIER)
                fibers[t].st = RUNNABLE;
        return true;
    }
    bool progressed = false;
    for (int w = 0; w * 32 < nthreads; w++) {
        bool any = false, all = true;
        for (int t = w * 32; t < nthreads && t < w * 32 + 32; t++) {
            if (fibers[t].st == DONE)
                continue;
            if (fibers[t].st == AT_WARP_BARRIER)
                any = true;
            else
                all = false;
        }
        if (any && all) {
            for (int t = w * 32; t < nthreads && t < w * 32 + 32; t++)
                if (fibers[t].st == AT_WARP_BARRIER)
                    fibers[t].st = RUNNABLE;
            progressed = true;
        }
    }
    return progressed;
}

void run_block(void)
{
    for (int t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        if (!f.stack && !(f.stack = (char *)malloc(STACK_BYTES))) {
            fprintf(stderr, "cuda_emu: out of memory for fiber stacks\n");
            abort();
        }
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK_BYTES;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, trampoline, 0);
        f.st = RUNNABLE;
        f.tid = dim3(t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y));
    }
    for (;;) {
        bool ran = false, live = false;
        for (int t = 0; t < nthreads; t++) {
            if (fibers[t].st == DONE)
                continue;
            live = true;
            if (fibers[t].st != RUNNABLE)
                continue;
            current = t;
            threadIdx = fibers[t].tid;
            swapcontext(&scheduler, &fibers[t].ctx);
            ran = true;
        }
        if (!live)
            return;
        if (!ran && !release())
            divergence("a barrier some threads of the block never reach");
        if (ran)
            release();
    }
}

} // namespace

void __syncthreads(void) { wait_at(AT_BLOCK_BARRIER); }

void __syncwarp(unsigned mask)
{
    (void)mask;
    wait_at(AT_WARP_BARRIER);
}

uint64_t zt_emu_exchange(uint64_t v, int src)
{
    const int me = current, base = me & ~31;
    xbuf[me] = v;
    wait_at(AT_WARP_BARRIER); /* every lane has posted */
    if (base + src >= nthreads || fibers[base + src].st == DONE)
        divergence("a shuffle from a lane that has returned");
    const uint64_t r = xbuf[base + src];
    wait_at(AT_WARP_BARRIER); /* every lane has read before the next post */
    return r;
}

float *zt_emu_dyn_smem(void) { return dyn_smem; }
unsigned long zt_emu_block_serial(void) { return block_serial; }

void zt_emu_run(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    nthreads = (int)(block.x * block.y * block.z);
    if (nthreads < 1 || nthreads > MAX_THREADS || smem > ZT_EMU_DYN_SMEM_BYTES) {
        fprintf(stderr, "cuda_emu: bad launch: %d threads, %zu bytes of shared memory\n", nthreads, smem);
        abort();
    }
    blockDim = block;
    gridDim = grid;
    body_fn = &body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                /* shared memory starts as garbage on a GPU: poison it */
                memset(dyn_smem, 0xff, smem);
                block_serial++;
                run_block();
            }
}

/* ---- the runtime calls ---------------------------------------------------------------- */

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported (tools/cuda_emu has no graphs)";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0)
        return cudaErrorInvalidValue;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda_emu (the kernels on the CPU, tools/cuda_emu)");
    p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
    p->totalGlobalMem = (size_t)1 << 32;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = (size_t)1 << 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    (void)a, (void)d;
    *v = 232448; /* H100's opt-in shared memory per block */
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    /* garbage, as cudaMalloc's memory is: all bits set (NaN); aligned to 256 bytes, as
     * cudaMalloc's is (the kernels' 16-byte vector paths rely on it: act16.cuh) */
    *p = aligned_alloc(256, bytes ? (bytes + 255) & ~(size_t)255 : 256);
    if (!*p)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t)
{
    memset(p, v, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t)
{
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = (cudaStream_t)&scheduler; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = (cudaEvent_t)&scheduler; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 0.0f; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return cudaErrorNotSupported; }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) { *g = NULL; return cudaErrorNotSupported; }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t, unsigned long long)
{
    *e = NULL;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
