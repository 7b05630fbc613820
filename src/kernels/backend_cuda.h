/* backend_cuda.h — the CUDA backend (src/kernels/cuda/) as the C side sees it.
 *
 * `make cuda` compiles the .cu files of src/kernels/cuda (nvcc, cuBLASLt) into
 * build-cuda/ with ZT_CUDA defined; the plain `make` compiles backend_cuda_none.c
 * instead, where every function below reports "this ztrain was built without CUDA
 * (make cuda)".  So this header needs no CUDA header, and callers need no #ifdef:
 * they ask for the table and get it, or get an error that says why not.
 *
 * The table (backend.h) runs every kernel on one compute stream of the current device,
 * in call order; entries that return a value to the host (xent, sumsq, round_bf16 with
 * want_sumsq, adamw_step with an audit) wait for it.  Buffers are device memory from
 * the table's alloc; what backend.h says stays on the host (token ids, targets, the
 * argument structs, the results) is uploaded and downloaded by the backend itself,
 * through a device scratch it owns.  A failing CUDA call inside an entry that cannot
 * return an error (a device fault, a launch error) is a broken invariant: it prints
 * the call, file:line and CUDA's message, and aborts.  matmul and alloc return their
 * failures as values.
 *
 * Numbers: each kernel keeps its CPU twin's dtype contract (kernels.h, matmul.h,
 * adamw.h, reductions.h) and, where it can, its exact operation order; docs/gpu.md
 * ("Kernels") lists what differs and by how much, and tests/gpu/kernels_check.c
 * measures it. */
#ifndef ZT_BACKEND_CUDA_H
#define ZT_BACKEND_CUDA_H

#include <stddef.h>

#include "../core/dtype.h"
#include "../core/prof.h"
#include "../core/status.h"
#include "backend.h"

/* The number of CUDA devices this process can see, in *count.  When there is none
 * (no device, no driver, a build without CUDA): ZT_EFAIL, *count = 0, and err says
 * "no CUDA device (why)" or "this ztrain was built without CUDA (make cuda)". */
int zt_cuda_device_count(int *count, zt_err *err);

/* What `ztrain env` prints per device. */
typedef struct zt_cuda_device {
    char name[256];
    int cc_major, cc_minor; /* compute capability */
    int sm_count;
    size_t total_bytes, free_bytes;
} zt_cuda_device;
int zt_cuda_device_info(int dev, zt_cuda_device *info, zt_err *err);

/* The measured rate of large products (cuBLASLt, 8192^3 by default; fewer when the
 * device has little memory) on device dev, in TFLOP/s (2*M*N*K flops per product):
 * compute ZT_BF16 is bf16 operands with fp32 accumulation, ZT_F32 is fp32 without
 * TF32. */
int zt_cuda_matmul_peak_tflops(int dev, zt_dtype compute, double *tflops, zt_err *err);

/* Make device dev current for this process (one GPU per rank: the caller picks it).
 * Call before the first zt_backend_cuda; afterwards the backend stays on its device. */
int zt_cuda_use_device(int dev, zt_err *err);

/* The CUDA table, set up on first use on the current device (stream, cuBLASLt handle
 * and workspace, scratch).  NULL with err filled when this build has no CUDA, no
 * device is visible or the setup fails. */
const zt_backend *zt_backend_cuda(zt_err *err);

/* The set-up CUDA table in a kernel mode (backend.h): the exact table zt_backend_cuda
 * returns, or its fast twin (the fast kernels, the asynchronous step's entries).
 * NULL before zt_backend_cuda succeeded. */
const zt_backend *zt_backend_cuda_mode(zt_kernel_mode mode);

/* CUDA graphs (docs/gpu.md, "What still waits for a GPU"): the work queued on the
 * compute stream between begin and end is captured instead of run, and each launch
 * replays it, with the same arguments and buffers, for one launch's host cost.  What
 * is captured must not wait for the device, allocate, or read host values that
 * change (so: the fast table's entries, the scratch already grown to size, no token
 * uploads).  The training step does not use them yet; kernels_check's `graph` group
 * checks a captured optimizer step against the same entries run directly.  Errors
 * (a device that cannot capture, a call that may not be captured) come back in err;
 * after a failed end the stream is out of capture. */
typedef struct zt_cuda_graph zt_cuda_graph;
int zt_cuda_graph_begin(zt_err *err);
int zt_cuda_graph_end(zt_cuda_graph **graph, zt_err *err);
int zt_cuda_graph_launch(const zt_cuda_graph *graph, zt_err *err);
void zt_cuda_graph_free(zt_cuda_graph *graph);

/* The backend's compute stream (a cudaStream_t), for events that order other streams
 * (NCCL's) against it; NULL before zt_backend_cuda succeeded. */
void *zt_cuda_stream(void);

/* Bytes between host memory and device buffers of the table, in stream order: an
 * upload may be followed by kernels at once, a download returns with the bytes there. */
int zt_cuda_upload(void *dev_dst, const void *host_src, size_t bytes, zt_err *err);
int zt_cuda_download(void *host_dst, const void *dev_src, size_t bytes, zt_err *err);
/* Wait for everything queued on the compute stream; reports a fault of an earlier
 * kernel as an error. */
int zt_cuda_synchronize(zt_err *err);

/* The profiler's clock for the device (core/prof.h): CUDA events recorded on the
 * compute stream (or on the queue a mark names, NCCL's), read at the profiled
 * step's end; NULL in a build without CUDA. */
const zt_prof_clock *zt_cuda_prof_clock(void);

/* Which kernels run fast mode's attention (the _act16 entries) for this shape, on this
 * device and build (attention_choice.h: cuDNN's fused attention, its graphs built now,
 * or the own kernels and why): the plan line's words ("attention cudnn", "attention own
 * kernels (sm_80)") in out.  Call outside a graph capture, after zt_backend_cuda. */
void zt_cuda_attention_plan(int B, int T, int nh, int nkv, int hd, int window, char *out, size_t cap);

/* Release the table's resources (end of program; the table is unusable afterwards). */
void zt_cuda_shutdown(void);

#endif
