/* backend.cu — the CUDA backend's table (backend.h) and its C interface
 * (backend_cuda.h): set-up on the current device, device memory (accounted in
 * core/mem.h's categories like the CPU's), copies, the entries' scratch. */
#include "entries.cuh"
#include "fast.h"

#include <string.h>

zt_cu_state zt_cu;

void zt_cu_die(const char *what, const char *msg, const char *file, int line)
{
    fprintf(stderr, "ztrain: CUDA error at %s:%d: %s: %s\n", file, line, what, msg);
    fflush(stderr);
    abort();
}

/* ---- memory ------------------------------------------------------------------------- */

/* Zeroed device memory, counted in cat; NULL for 0 bytes or when the device is full
 * (the caller reports it, as for the CPU's zt_alloc).  The memset is waited for, so
 * the buffer is zero for any stream that uses it next. */
static void *zt_cu_alloc(zt_mem_cat cat, size_t bytes)
{
    if (bytes == 0)
        return NULL;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is an answer, not a sticky error */
        return NULL;
    }
    ZT_CU(cudaMemsetAsync(p, 0, bytes, zt_cu.stream));
    ZT_CU(cudaStreamSynchronize(zt_cu.stream));
    zt_mem_account(cat, bytes);
    return p;
}

static void zt_cu_free(zt_mem_cat cat, void *p, size_t bytes)
{
    if (!p)
        return;
    ZT_CU(cudaFree(p)); /* waits for the kernels that may still read it */
    zt_mem_unaccount(cat, bytes);
}

static void zt_cu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        ZT_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, zt_cu.stream));
}

static void zt_cu_zero(void *dst, size_t bytes)
{
    if (bytes)
        ZT_CU(cudaMemsetAsync(dst, 0, bytes, zt_cu.stream));
}

/* host <- device after everything queued before it: the copy is queued on the
 * compute stream and waited for */
static void zt_cu_to_host(void *dst_host, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    ZT_CU(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, zt_cu.stream));
    ZT_CU(cudaStreamSynchronize(zt_cu.stream));
}

/* device <- host after everything queued before it; waited for, so that src_host
 * (pinned memory from host_alloc included, whose copies are truly asynchronous) may
 * be reused as soon as this returns */
static void zt_cu_to_device(void *dst, const void *src_host, size_t bytes)
{
    if (!bytes)
        return;
    ZT_CU(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, zt_cu.stream));
    ZT_CU(cudaStreamSynchronize(zt_cu.stream));
}

static void zt_cu_sync(void) { ZT_CU(cudaStreamSynchronize(zt_cu.stream)); }

/* A copy down on its own stream: it waits (an event) for what the compute stream
 * has queued so far, the last write of src, then runs while the compute stream goes
 * on.  Pinned dst (host_alloc) makes it truly asynchronous; copy_wait joins them. */
static void copy_queue_after_compute(void)
{
    if (!zt_cu.copy_stream) {
        ZT_CU(cudaStreamCreateWithFlags(&zt_cu.copy_stream, cudaStreamNonBlocking));
        ZT_CU(cudaEventCreateWithFlags(&zt_cu.copy_ready, cudaEventDisableTiming));
        ZT_CU(cudaEventCreateWithFlags(&zt_cu.copy_done, cudaEventDisableTiming));
    }
    ZT_CU(cudaEventRecord(zt_cu.copy_ready, zt_cu.stream));
    ZT_CU(cudaStreamWaitEvent(zt_cu.copy_stream, zt_cu.copy_ready, 0));
}

static void zt_cu_to_host_async(void *dst_host, const void *src, size_t bytes)
{
    if (bytes == 0)
        return;
    copy_queue_after_compute();
    ZT_CU(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, zt_cu.copy_stream));
}

/* A copy up on the same stream, after what the compute stream has queued so far (the
 * last reads of dst: a gather slot's previous unit); the kernels that read dst come
 * after a copy_join. */
static void zt_cu_to_device_async(void *dst, const void *src_host, size_t bytes)
{
    if (bytes == 0)
        return;
    copy_queue_after_compute();
    ZT_CU(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, zt_cu.copy_stream));
}

/* The compute stream waits (on the device) for the copies queued so far. */
static void zt_cu_copy_join(void)
{
    if (!zt_cu.copy_stream)
        return;
    ZT_CU(cudaEventRecord(zt_cu.copy_done, zt_cu.copy_stream));
    ZT_CU(cudaStreamWaitEvent(zt_cu.stream, zt_cu.copy_done, 0));
}

static void zt_cu_copy_wait(void)
{
    if (zt_cu.copy_stream)
        ZT_CU(cudaStreamSynchronize(zt_cu.copy_stream));
}

/* Markers on the copy stream (backend.h, copy_record): marker m is event m mod
 * ZT_CU_MARKERS, recorded after the copies queued so far.  When the ring comes round
 * an event is recorded again later on the same stream, so waiting for it covers
 * every older marker it stood for: a stale marker waits longer, never too little. */
#define ZT_CU_MARKERS 64
static cudaEvent_t zt_cu_marker_ev[ZT_CU_MARKERS];
static long zt_cu_nmarkers;

static long zt_cu_copy_record(void)
{
    if (!zt_cu.copy_stream)
        return -1; /* nothing was ever queued: nothing to wait for */
    long m = zt_cu_nmarkers++;
    cudaEvent_t *e = &zt_cu_marker_ev[m % ZT_CU_MARKERS];
    if (!*e)
        ZT_CU(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    ZT_CU(cudaEventRecord(*e, zt_cu.copy_stream));
    return m;
}

static void zt_cu_copy_wait_marker(long marker)
{
    if (marker < 0 || marker >= zt_cu_nmarkers)
        return;
    ZT_CU(cudaEventSynchronize(zt_cu_marker_ev[marker % ZT_CU_MARKERS]));
}

/* page-locked host memory for staging, counted in cat; not zeroed (backend.h) */
static void *zt_cu_host_alloc(zt_mem_cat cat, size_t bytes)
{
    if (bytes == 0)
        return NULL;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    zt_mem_account(cat, bytes);
    return p;
}

static void zt_cu_host_free(zt_mem_cat cat, void *p, size_t bytes)
{
    if (!p)
        return;
    ZT_CU(cudaFreeHost(p));
    zt_mem_unaccount(cat, bytes);
}

static void *zt_cu_stream(void) { return (void *)zt_cu.stream; }

void *zt_cu_scratch(size_t bytes)
{
    if (bytes <= zt_cu.scratch_bytes)
        return zt_cu.scratch;
    if (zt_cu.capturing) /* growing waits and frees: a captured step runs once uncaptured first */
        zt_cu_die("zt_cu_scratch", "the scratch must grow inside a graph capture (run the step once before "
                  "capturing it)", __FILE__, __LINE__);
    size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes + bytes / 4;
    if (zt_cu.scratch) {
        ZT_CU(cudaStreamSynchronize(zt_cu.stream));
        ZT_CU(cudaFree(zt_cu.scratch));
        zt_mem_unaccount(ZT_MEM_OTHER, zt_cu.scratch_bytes);
        zt_cu.scratch = NULL;
        zt_cu.scratch_bytes = 0;
    }
    ZT_CU(cudaMalloc(&zt_cu.scratch, want));
    zt_mem_account(ZT_MEM_OTHER, want);
    zt_cu.scratch_bytes = want;
    return zt_cu.scratch;
}

/* Host values (token ids) reach the device through page-locked slots, so that their
 * upload never makes the host wait: a copy from pageable memory may wait for the
 * stream, one from page-locked memory does not.  The host copies the values into the
 * next slot (the caller's buffer is free at once) and queues the copy from it; the
 * slot's event says when the device has taken them, and the host reuses a slot only
 * after that, UPLOAD_SLOTS uploads later: a wait that happens only when the host has
 * run that far ahead of the device (three uploads per micro-batch). */
#define UPLOAD_SLOTS 16
static struct upload_slot {
    void *buf;
    size_t cap;
    cudaEvent_t taken;
    int queued;
} up_slots[UPLOAD_SLOTS];
static int up_next;

void zt_cu_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    if (zt_cu.capturing) {
        /* a slot's bytes would be replayed as they were, and its event waited for:
         * the captured copy reads src (page-locked, refilled before each launch) */
        ZT_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, zt_cu.stream));
        return;
    }
    struct upload_slot *s = &up_slots[up_next];
    up_next = (up_next + 1) % UPLOAD_SLOTS;
    if (s->queued)
        ZT_CU(cudaEventSynchronize(s->taken));
    if (!s->taken)
        ZT_CU(cudaEventCreateWithFlags(&s->taken, cudaEventDisableTiming));
    if (bytes > s->cap) {
        if (s->buf) {
            ZT_CU(cudaFreeHost(s->buf));
            zt_mem_unaccount(ZT_MEM_OTHER, s->cap);
        }
        s->cap = bytes < 4096 ? 4096 : bytes;
        ZT_CU(cudaMallocHost(&s->buf, s->cap));
        zt_mem_account(ZT_MEM_OTHER, s->cap);
    }
    memcpy(s->buf, src, bytes);
    ZT_CU(cudaMemcpyAsync(dst, s->buf, bytes, cudaMemcpyHostToDevice, zt_cu.stream));
    ZT_CU(cudaEventRecord(s->taken, zt_cu.stream));
    s->queued = 1;
}

static void upload_shutdown(void)
{
    for (int i = 0; i < UPLOAD_SLOTS; i++) {
        struct upload_slot *s = &up_slots[i];
        if (s->buf) {
            cudaFreeHost(s->buf);
            zt_mem_unaccount(ZT_MEM_OTHER, s->cap);
        }
        if (s->taken)
            cudaEventDestroy(s->taken);
    }
    memset(up_slots, 0, sizeof up_slots);
    up_next = 0;
}

/* The table's device's peak, for MFU (backend.h). */
static int cu_matmul_peak(zt_dtype compute, double *gflops, char *what, size_t cap, zt_err *err)
{
    zt_cuda_device info;
    double tflops = 0.0;
    *gflops = 0.0;
    int rc = zt_cuda_device_info(zt_cu.device, &info, err);
    if (rc == ZT_OK)
        rc = zt_cu_matmul_peak(zt_cu.device, compute, &tflops, err);
    if (rc)
        return rc;
    snprintf(what, cap, "%s, sm_%d%d", info.name, info.cc_major, info.cc_minor);
    *gflops = tflops * 1e3;
    return ZT_OK;
}

/* the table's graph entries (backend.h): the C interface's graphs under the table's name */
static int zt_cu_graph_begin(zt_err *err) { return zt_cuda_graph_begin(err); }
static int zt_cu_graph_end(zt_graph **graph, zt_err *err)
{
    return zt_cuda_graph_end(reinterpret_cast<zt_cuda_graph **>(graph), err);
}
static int zt_cu_graph_launch(const zt_graph *graph, zt_err *err)
{
    return zt_cuda_graph_launch(reinterpret_cast<const zt_cuda_graph *>(graph), err);
}
static void zt_cu_graph_free(zt_graph *graph) { zt_cuda_graph_free(reinterpret_cast<zt_cuda_graph *>(graph)); }

/* ---- the table ---------------------------------------------------------------------- */

/* entry e is zt_cu_e (ZT_BACKEND_ENTRIES): the statics above, the kernels of entries.cuh;
 * C++ wants the designators in the struct's order, which the list keeps */
#define CUDA_ENTRY(e) .e = zt_cu_##e,
static const zt_backend cuda_table = {
    .name = "cuda",
    .kernels = ZT_KERNELS_EXACT,
    .host_visible = 0,
    ZT_BACKEND_ENTRIES(CUDA_ENTRY)
    .matmul_peak = cu_matmul_peak,
    .queue_host = nullptr, /* the emulated device's; a GPU queues NCCL's collectives itself */
    .host_address = nullptr,
    .rope_forward_pos = zt_cu_rope_forward_pos,
    .rope_backward_pos = zt_cu_rope_backward_pos,
    .attention_forward_pos = zt_cu_attention_forward_pos,
    .attention_backward_pos = zt_cu_attention_backward_pos,
    .scale_add = nullptr, /* LoRA's, none on the GPU yet: LoRA is refused there, naming the table */
};

/* Fast mode (backend.h, zt_kernel_mode): the exact table with the fast kernels in
 * place of their exact twins.  The engine takes the asynchronous step on it.  A fast
 * kernel is built from a fast_*.cu file (FMA contraction allowed, Makefile) and
 * checked against its exact twin by tests/gpu/kernels_check. */
static zt_backend cuda_fast;

static void make_fast_table(void)
{
    cuda_fast = cuda_table;
    cuda_fast.kernels = ZT_KERNELS_FAST;
    zt_cu_fast_overlay(&cuda_fast); /* fast.h: which entries, in one place */
}

/* ---- the C interface (backend_cuda.h) ----------------------------------------------- */

extern "C" int zt_cuda_device_count(int *count, zt_err *err)
{
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (e == cudaErrorInsufficientDriver) /* also what a machine without the driver answers */
            return zt_fail(err, ZT_EFAIL, "no CUDA device (no usable NVIDIA driver: %s)", cudaGetErrorString(e));
        return zt_fail(err, ZT_EFAIL, "no CUDA device (%s)", cudaGetErrorString(e));
    }
    if (n < 1)
        return zt_fail(err, ZT_EFAIL, "no CUDA device (the driver reports none)");
    *count = n;
    return ZT_OK;
}

extern "C" int zt_cuda_device_info(int dev, zt_cuda_device *info, zt_err *err)
{
    memset(info, 0, sizeof *info);
    cudaDeviceProp prop;
    ZT_CU_TRY(err, cudaGetDeviceProperties(&prop, dev));
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->total_bytes = prop.totalGlobalMem;
    int prev = 0;
    ZT_CU_TRY(err, cudaGetDevice(&prev));
    ZT_CU_TRY(err, cudaSetDevice(dev));
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(prev);
    if (e != cudaSuccess)
        return zt_fail(err, ZT_EFAIL, "device %d: cudaMemGetInfo: %s", dev, cudaGetErrorString(e));
    info->free_bytes = free_b;
    return ZT_OK;
}

extern "C" int zt_cuda_matmul_peak_tflops(int dev, zt_dtype compute, double *tflops, zt_err *err)
{
    return zt_cu_matmul_peak(dev, compute, tflops, err);
}

extern "C" int zt_cuda_use_device(int dev, zt_err *err)
{
    int n = 0;
    int rc = zt_cuda_device_count(&n, err);
    if (rc)
        return rc;
    if (dev < 0 || dev >= n)
        return zt_fail(err, ZT_EINPUT, "CUDA device %d does not exist (this machine has %d: 0..%d)", dev, n, n - 1);
    if (zt_cu.ready && dev != zt_cu.device)
        return zt_fail(err, ZT_EFAIL, "the CUDA backend is already set up on device %d, not %d", zt_cu.device, dev);
    ZT_CU_TRY(err, cudaSetDevice(dev));
    return ZT_OK;
}

extern "C" const zt_backend *zt_backend_cuda(zt_err *err)
{
    if (zt_cu.ready)
        return &cuda_table;
    int n = 0;
    if (zt_cuda_device_count(&n, err))
        return NULL;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaStreamCreate(&zt_cu.stream); /* blocking: ordered with the legacy default stream */
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&zt_cu.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) {
        zt_fail(err, ZT_EFAIL, "setting up the CUDA backend on device %d: %s", dev, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    zt_cu.device = dev;
    if (zt_cu_matmul_init(err)) {
        cudaStreamDestroy(zt_cu.stream);
        zt_cu.stream = NULL;
        return NULL;
    }
    zt_cu.ready = 1;
    make_fast_table();
    return &cuda_table;
}

extern "C" const zt_backend *zt_backend_cuda_mode(zt_kernel_mode mode)
{
    if (!zt_cu.ready)
        return NULL;
    return mode == ZT_KERNELS_FAST ? &cuda_fast : &cuda_table;
}

/* ---- CUDA graphs (backend_cuda.h) ----------------------------------------------------- */

struct zt_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" int zt_cuda_graph_begin(zt_err *err)
{
    if (!zt_cu.ready)
        return zt_fail(err, ZT_EFAIL, "the CUDA backend is not set up");
    /* thread-local: the watchdog thread's event queries stay legal during a capture */
    ZT_CU_TRY(err, cudaStreamBeginCapture(zt_cu.stream, cudaStreamCaptureModeThreadLocal));
    zt_cu.capturing = 1;
    return ZT_OK;
}

extern "C" int zt_cuda_graph_end(zt_cuda_graph **graph, zt_err *err)
{
    *graph = NULL;
    zt_cu.capturing = 0;
    cudaGraph_t g = NULL;
    ZT_CU_TRY(err, cudaStreamEndCapture(zt_cu.stream, &g));
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    if (e != cudaSuccess) {
        cudaGraphDestroy(g);
        return zt_fail(err, ZT_EFAIL, "instantiating a captured CUDA graph: %s", cudaGetErrorString(e));
    }
    zt_cuda_graph *z = (zt_cuda_graph *)zt_alloc(ZT_MEM_OTHER, sizeof *z);
    if (!z) {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(g);
        return zt_fail(err, ZT_EFAIL, "out of memory for a CUDA graph");
    }
    z->graph = g;
    z->exec = exec;
    *graph = z;
    return ZT_OK;
}

extern "C" int zt_cuda_graph_launch(const zt_cuda_graph *graph, zt_err *err)
{
    ZT_CU_TRY(err, cudaGraphLaunch(graph->exec, zt_cu.stream));
    return ZT_OK;
}

extern "C" void zt_cuda_graph_free(zt_cuda_graph *graph)
{
    if (!graph)
        return;
    cudaGraphExecDestroy(graph->exec);
    cudaGraphDestroy(graph->graph);
    zt_free(ZT_MEM_OTHER, graph, sizeof *graph);
}

extern "C" void *zt_cuda_stream(void) { return zt_cu.ready ? (void *)zt_cu.stream : NULL; }

extern "C" int zt_cuda_upload(void *dev_dst, const void *host_src, size_t bytes, zt_err *err)
{
    if (!zt_cu.ready)
        return zt_fail(err, ZT_EFAIL, "the CUDA backend is not set up");
    if (bytes)
        ZT_CU_TRY(err, cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, zt_cu.stream));
    return ZT_OK;
}

extern "C" int zt_cuda_download(void *host_dst, const void *dev_src, size_t bytes, zt_err *err)
{
    if (!zt_cu.ready)
        return zt_fail(err, ZT_EFAIL, "the CUDA backend is not set up");
    if (bytes) {
        ZT_CU_TRY(err, cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, zt_cu.stream));
        ZT_CU_TRY(err, cudaStreamSynchronize(zt_cu.stream));
    }
    return ZT_OK;
}

extern "C" int zt_cuda_synchronize(zt_err *err)
{
    if (!zt_cu.ready)
        return zt_fail(err, ZT_EFAIL, "the CUDA backend is not set up");
    ZT_CU_TRY(err, cudaStreamSynchronize(zt_cu.stream));
    return ZT_OK;
}

extern "C" void zt_cuda_shutdown(void)
{
    if (!zt_cu.ready)
        return;
    cudaStreamSynchronize(zt_cu.stream);
    zt_cu_matmul_shutdown();
    zt_cu_embed_shutdown();
    upload_shutdown();
    if (zt_cu.scratch) {
        cudaFree(zt_cu.scratch);
        zt_mem_unaccount(ZT_MEM_OTHER, zt_cu.scratch_bytes);
    }
    if (zt_cu.copy_stream) {
        cudaStreamSynchronize(zt_cu.copy_stream);
        cudaEventDestroy(zt_cu.copy_ready);
        cudaEventDestroy(zt_cu.copy_done);
        for (int i = 0; i < ZT_CU_MARKERS; i++)
            if (zt_cu_marker_ev[i])
                cudaEventDestroy(zt_cu_marker_ev[i]);
        memset(zt_cu_marker_ev, 0, sizeof zt_cu_marker_ev);
        zt_cu_nmarkers = 0;
        cudaStreamDestroy(zt_cu.copy_stream);
    }
    cudaStreamDestroy(zt_cu.stream);
    memset(&zt_cu, 0, sizeof zt_cu);
}
