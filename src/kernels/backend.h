/* backend.h — one table of compute functions per device: every kernel and matrix
 * product the model and the engine run, and the allocation of the buffers they
 * run on.
 *
 * The model and the engine never call a kernel by name: they hold a
 * `const zt_backend *` and call through it, so a second device plugs in as a
 * second table (backend_cpu.c; backend_emu.c for tests; the CUDA table in
 * src/kernels/cuda/ under make cuda).  Buffers passed to the table are opaque:
 * the CPU backend's are host memory, a CUDA backend's are device pointers from
 * its own alloc, and only the table reads or writes them (copy, zero, convert,
 * to_host, to_device included).  What stays on the host: token ids (the
 * `tokens` and `targets` arguments), the scalars returned (loss, sums of
 * squares), the AdamW audit and the small structs of arguments.
 *
 * The cost of the seam is one indirect call per kernel per layer (a few dozen
 * per micro-batch), against kernels that each run for micro- to milliseconds.
 *
 * The semantics of each entry are those of the CPU kernel it names (kernels.h,
 * matmul.h, adamw.h); a backend must give the same numbers, or say in its own
 * header how and why it differs. */
#ifndef ZT_BACKEND_H
#define ZT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/mem.h"
#include "../core/status.h"
#include "adamw.h"

/* Every function entry of the table, in the struct's order, as one list: each
 * table (backend_cpu.c, backend_emu.c, cuda/backend.cu) is built by expanding it
 * with its own naming rule, X(alloc) -> `.alloc = cpu_alloc,`, so an entry added
 * here is an entry every table must implement (a missing one fails to compile
 * instead of being a NULL found at run time).  matmul_peak is not in the list: it
 * is optional, NULL for tables whose products run on the host's cores. */
#define ZT_BACKEND_ENTRIES(X)                                                                            \
    X(alloc) X(free) X(copy) X(zero) X(convert)                                                          \
    X(to_host) X(to_device) X(sync) X(host_alloc) X(host_free) X(stream)                                 \
    X(matmul) X(embed_forward) X(embed_backward) X(rmsnorm_forward) X(rmsnorm_backward)                  \
    X(rope_tables) X(rope_forward) X(rope_backward)                                                      \
    X(attention_scratch_bytes) X(attention_forward) X(attention_backward)                                \
    X(attention_cache_scratch_bytes) X(attention_cache_forward)                                          \
    X(swiglu_forward) X(swiglu_backward) X(transpose) X(xent)                                            \
    X(adamw_step) X(sumsq) X(accumulate) X(accumulate_bf16_rounded) X(round_bf16)

typedef struct zt_backend {
    const char *name;
    /* host_visible: the buffers alloc gives are host memory (the CPU's), so host
     * code may read and write them in place and the copies below are memcpy; code
     * that must work on a device checks it to stay zero-copy here.  0 (a device):
     * host code never dereferences a buffer from alloc, or an offset into one;
     * every read goes through to_host and every write through to_device. */
    int host_visible;

    /* ---- memory: zeroed, accounted to cat (mem.h); alloc of 0 bytes gives NULL */
    void *(*alloc)(zt_mem_cat cat, size_t bytes);
    void (*free)(zt_mem_cat cat, void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);  /* no overlap */
    void (*zero)(void *dst, size_t bytes);
    /* n elements from src_dt to dst_dt, round to nearest even (zt_convert) */
    void (*convert)(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, size_t n);

    /* ---- moving bytes between the buffers and the host
     * host <- buffer, after every kernel queued before it; dst_host holds the
     * bytes when it returns */
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    /* buffer <- host, after every kernel queued before it; src_host may be
     * reused as soon as it returns */
    void (*to_device)(void *dst, const void *src_host, size_t bytes);
    /* wait until every kernel and copy queued so far has finished */
    void (*sync)(void);
    /* host memory for staging copies (page-locked on a device, so its copies run
     * at full speed), accounted to cat as alloc's is; not zeroed */
    void *(*host_alloc)(zt_mem_cat cat, size_t bytes);
    void (*host_free)(zt_mem_cat cat, void *p, size_t bytes);
    /* the queue the kernels run on (a cudaStream_t), NULL on the host: the NCCL
     * path of comm orders its own queue after it with events */
    void *(*stream)(void);

    /* ---- the model's kernels (kernels.h, matmul.h) */
    int (*matmul)(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
                  int K, int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err);
    /* x (N, C) fp32 = rows tokens[i] of wte (V, C) in wte_dt; dwte[tokens[i]] += dx[i] */
    void (*embed_forward)(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C);
    void (*embed_backward)(float *dwte, const float *dx, const int *tokens, int N, int C);
    void (*rmsnorm_forward)(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N,
                            int C, float eps);
    void (*rmsnorm_backward)(float *dx, uint16_t *dx_bf16, float *dw, const float *dy, const float *x,
                             const float *w, const float *rstd, int N, int C);
    void (*rope_tables)(float *cos_t, float *sin_t, int T, int hd, float theta);
    void (*rope_forward)(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                         int nkv, int hd);
    void (*rope_backward)(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                          int nkv, int hd);
    /* Scratch the attention wants for operands in dtype opd (0: none); the
     * forward and backward then take a buffer of that size, refilled by each call. */
    size_t (*attention_scratch_bytes)(int B, int T, int nkv, int hd, zt_dtype opd);
    /* window: the sliding window (0: none), as kernels.h defines it. */
    void (*attention_forward)(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                              void *scratch, int B, int T, int nh, int nkv, int hd, int window);
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd,
                               int window);
    /* inference over a KV cache (kernels.h: zt_attention_cache_forward); the
     * scratch is attention_cache_scratch_bytes(cap, threads) */
    size_t (*attention_cache_scratch_bytes)(int cap, int threads);
    void (*attention_cache_forward)(float *out, const float *q, size_t q_stride, const float *k_cache,
                                    const float *v_cache, int cap, int pos0, int n, int nh, int nkv, int hd,
                                    int window, float *scratch, int threads);
    void (*swiglu_forward)(void *h, zt_dtype h_dt, const float *gu, int N, int F);
    void (*swiglu_backward)(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F);
    void (*transpose)(float *dst, const float *src, int rows, int cols);
    double (*xent)(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets,
                   int N, int V, float grad_scale);

    /* ---- the engine's kernels (reductions.h, adamw.h) */
    void (*adamw_step)(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                       const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit);
    double (*sumsq)(const void *x, zt_dtype dt, size_t n);
    void (*accumulate)(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n);
    void (*accumulate_bf16_rounded)(float *acc, const float *x, size_t n);
    double (*round_bf16)(float *x, size_t n, int want_sumsq);

    /* What MFU divides by on a device that runs the products itself: its measured
     * rate of large products in GFLOP/s for compute (bf16: bf16 operands with fp32
     * accumulation; fp32: without TF32), and in `what` the device's name for the
     * peak cache ("NVIDIA H200, sm_90").  NULL for a table whose products run on
     * the host's cores (cpu, emu): the peak is the CPU's then (train/peak.h). */
    int (*matmul_peak)(zt_dtype compute, double *gflops, char *what, size_t cap, zt_err *err);
} zt_backend;

/* The host backend: OpenMP kernels and oneDNN products. */
const zt_backend *zt_backend_cpu(void);

/* The CPU kernels behind opaque handles (backend_emu.c): every buffer from its
 * alloc is an address the host cannot dereference (a read or write faults), so a
 * run on it proves that host code reaches buffers only through to_host and
 * to_device, and its copies take the staged comm path a device takes.  A test
 * device: its numbers are the CPU's, bit for bit. */
const zt_backend *zt_backend_emu(void);

/* The table for a --device name ("cpu", "cuda" or "emu") on this rank's device:
 * the rank's place on its machine (local_rank, from MPI_COMM_TYPE_SHARED) picks
 * device local_rank mod the count, so each rank has its own GPU when the machine
 * has as many as ranks.  *devices gets the count (0 for the CPU), desc what the
 * device is ("cpu", "cuda:0 (NVIDIA H200, 139.8 GiB)").  NULL with ZT_EINPUT in
 * err for an unknown name, "cuda" in a build without CUDA (make cuda builds the
 * table of backend_cuda.h) or on a machine without a GPU.  Call before any of the
 * table's allocations (backend_open.c). */
const zt_backend *zt_backend_open(const char *device, int local_rank, int *devices, char *desc, size_t cap,
                                  zt_err *err);

#endif
