/* prof_clock.cu — the profiler's clock on the GPU (backend_cuda.h, core/prof.h).
 *
 * A mark is a CUDA event recorded on the compute stream, or on the queue the mark
 * names (NCCL's stream): recording one costs the host a few microseconds and the
 * device nothing, and nothing waits for it until the profiled step's end, where
 * sync waits for the last event of each queue once and cudaEventElapsedTime reads
 * every mark against the step's first.  The events are a pool grown by doubling
 * (the first profiled step) and reused by every later one (reset). */
#include "common.cuh"

static cudaEvent_t *pool;
static long pool_cap, used;

static long mark(void *q)
{
    if (used == pool_cap) {
        long cap = pool_cap ? 2 * pool_cap : 4096;
        cudaEvent_t *p = (cudaEvent_t *)zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        for (long i = 0; i < pool_cap; i++)
            p[i] = pool[i];
        for (long i = pool_cap; i < cap; i++)
            if (cudaEventCreate(&p[i]) != cudaSuccess) { /* timing events (the default flags) */
                for (long j = pool_cap; j < i; j++)
                    cudaEventDestroy(p[j]);
                zt_free(ZT_MEM_OTHER, p, (size_t)cap * sizeof *p);
                return -1;
            }
        zt_free(ZT_MEM_OTHER, pool, (size_t)pool_cap * sizeof *pool);
        pool = p;
        pool_cap = cap;
    }
    cudaStream_t s = q ? (cudaStream_t)q : zt_cu.stream;
    if (cudaEventRecord(pool[used], s) != cudaSuccess)
        return -1;
    return used++;
}

/* every event recorded so far, on whichever queue: waiting for each is waiting for
 * the last of each queue (the earlier ones are already done then) */
static int sync_marks(zt_err *err)
{
    for (long i = used - 1; i >= 0; i--)
        ZT_CU_TRY(err, cudaEventSynchronize(pool[i]));
    return ZT_OK;
}

static int elapsed_us(long a, long b, double *us, zt_err *err)
{
    float ms = 0.0f;
    ZT_CU_TRY(err, cudaEventElapsedTime(&ms, pool[a], pool[b]));
    *us = 1e3 * (double)ms;
    return ZT_OK;
}

static void reset(void) { used = 0; }

static const zt_prof_clock cuda_clock = {"CUDA events", mark, sync_marks, elapsed_us, reset};

extern "C" const zt_prof_clock *zt_cuda_prof_clock(void) { return &cuda_clock; }
