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
#include "rope_freq.h"
#include "step_scalars.h"

/* Every function entry of the table, in the struct's order, as one list: each
 * table (backend_cpu.c, backend_emu.c, cuda/backend.cu) is built by expanding it
 * with its own naming rule, X(alloc) -> `.alloc = cpu_alloc,`, so an entry added
 * here is an entry every table must implement (a missing one fails to compile
 * instead of being a NULL found at run time).  matmul_peak is not in the list: it
 * is optional, NULL for tables whose products run on the host's cores. */
#define ZT_BACKEND_ENTRIES(X)                                                                            \
    X(alloc) X(free) X(copy) X(zero) X(convert)                                                          \
    X(to_host) X(to_device) X(sync) X(to_host_async) X(to_device_async) X(copy_join) X(copy_wait)          \
    X(copy_record) X(copy_wait_marker)                                                                   \
    X(host_alloc) X(host_free) X(stream)                                                                 \
    X(matmul) X(embed_forward) X(embed_backward) X(rmsnorm_forward) X(rmsnorm_backward)                  \
    X(bias_forward) X(bias_backward)                                                                     \
    X(rope_tables) X(rope_forward) X(rope_backward)                                                      \
    X(attention_scratch_bytes) X(attention_forward) X(attention_backward)                                \
    X(attention_cache_scratch_bytes) X(attention_cache_forward)                                          \
    X(swiglu_forward) X(swiglu_backward) X(transpose) X(xent)                                            \
    X(rmsnorm_residual_forward) X(matmul_out) X(lmhead_xent)                                             \
    X(adamw_step) X(sumsq) X(accumulate) X(accumulate_bf16_rounded) X(round_bf16)                     \
    X(sumsq_into) X(sumsq_bf16_into) X(xent_into) X(step_verdict) X(adamw_unit)                         \
    X(upload) X(graph_begin) X(graph_end) X(graph_launch) X(graph_free)                                  \
    X(linear_act16) X(attention_forward_act16) X(attention_backward_act16)                               \
    X(swiglu_forward_act16) X(swiglu_backward_act16)

/* How a device's kernels compute (docs/gpu.md, "Kernel modes").  EXACT: the CPU's
 * bits (or the CPU's arithmetic in another summation order), and the step's numbers
 * come back to the host as each entry returns.  FAST: a device's fast kernels (FMA
 * contraction, atomics where the order of a sum does not matter to bf16 error) and
 * the asynchronous step (step_scalars.h).  The CPU has EXACT only. */
typedef enum zt_kernel_mode { ZT_KERNELS_EXACT, ZT_KERNELS_FAST } zt_kernel_mode;

/* A target that takes no part in the loss (a prompt token under completion-only
 * loss): torch's CrossEntropyLoss ignore_index default, as TRL's labels use it. */
#define ZT_IGNORE_INDEX (-100)

/* A captured sequence of a table's entries (graph_begin .. graph_end), replayed by
 * graph_launch: a CUDA graph on the GPU, a recorded list of calls on the emulated
 * device.  Opaque; each table defines its own. */
typedef struct zt_graph zt_graph;

typedef struct zt_backend {
    const char *name;
    zt_kernel_mode kernels;
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
    /* host <- buffer, queued after every kernel queued so far, without waiting for
     * it: on a device with a copy queue it runs there beside the kernels queued
     * later (offload's gradient shards, copied down during the backward).  dst_host
     * is host_alloc memory and holds the bytes once copy_wait returns (or the wait
     * for a marker recorded after it, copy_wait_marker); src is not written before
     * then.  The host's tables copy at once (to_host). */
    void (*to_host_async)(void *dst_host, const void *src, size_t bytes);
    /* buffer <- host on the same copy queue, queued after every kernel queued so far
     * (so whatever read dst before has finished), without waiting for it: offload's
     * updated parameters going up while the host updates the next unit and the
     * device computes.  src_host is host_alloc memory and must not be written until
     * copy_wait returns; dst holds the bytes for the kernels queued after a
     * copy_join, and not before.  The CPU's table copies at once. */
    void (*to_device_async)(void *dst, const void *src_host, size_t bytes);
    /* the kernels queued from now on wait, on the device, for every copy queued so
     * far (an event on the copy queue that the compute queue waits for); the host
     * does not wait.  The gather that reads an uploaded shard comes after one. */
    void (*copy_join)(void);
    /* the host waits until every to_host_async and to_device_async queued so far has
     * finished */
    void (*copy_wait)(void);
    /* A marker on the copy queue after every copy queued so far (a CUDA event on
     * the copy stream): copy_wait_marker(m) makes the host wait for the copies
     * queued before m was recorded, and not for those queued after, which go on
     * beside what the host does next (offload's step updates unit k on the host
     * while unit k+1's gradient shard is still coming down).  A marker is a count,
     * so an old one stays valid: waiting for a later point of the same queue covers
     * it.  The CPU's table copies at once: 0, and nothing to wait for. */
    long (*copy_record)(void);
    void (*copy_wait_marker)(long marker);
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
    /* x (N, C) fp32 = rows tokens[i] of wte (V, C) in wte_dt; dwte (V, C) = beta dwte +
     * the sum of dx's rows over the tokens naming each row, beta 0 (every row written,
     * dwte not read: a row no token names is 0) or 1 (add; only named rows touched) */
    void (*embed_forward)(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C);
    void (*embed_backward)(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta);
    void (*rmsnorm_forward)(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N,
                            int C, float eps);
    /* dx = dx_beta dx + d/dx, dw = dw_beta dw + d/dw, each beta 0 (store: not read)
     * or 1 (add), the store 0 + v (kernels.h) */
    void (*rmsnorm_backward)(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                             const float *dy, const float *x, const float *w, const float *rstd, int N, int C);
    /* y (N, D) += b (D) in b_dt; db (D) = beta db + column sums of dy (N, D) (kernels.h) */
    void (*bias_forward)(float *y, const void *b, zt_dtype b_dt, int N, int D);
    void (*bias_backward)(float *db, float beta, const float *dy, int N, int D);
    void (*rope_tables)(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f);
    void (*rope_forward)(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                         int nkv, int hd);
    void (*rope_backward)(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh,
                          int nkv, int hd);
    /* Scratch the attention wants for operands in dtype opd (0: none); the
     * forward and backward then take a buffer of that size, refilled by each call
     * (nh: the fast tables' backward keeps per-query-head sums there). */
    size_t (*attention_scratch_bytes)(int B, int T, int nh, int nkv, int hd, zt_dtype opd);
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
    /* targets in [0, V), or ZT_IGNORE_INDEX: no loss and a zero gradient row */
    double (*xent)(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets,
                   int N, int V, float grad_scale);

    /* ---- fused entries (fused.h; docs/gpu.md, "Fast kernels"): each stands for a few
     * of the entries above, with their numbers on the host's tables and the exact CUDA
     * table (a composition of those entries) and within bf16 error of them in a fast
     * table.  The model calls matmul_out for its residual adds in both modes, and
     * lmhead_xent for the training loss in fast mode. */
    /* x (N, C) fp32 += delta (N, C, fp32 or bf16), then rmsnorm_forward of the new x */
    void (*rmsnorm_residual_forward)(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt,
                                     float *rstd, const float *w, int N, int C, float eps);
    /* D (M, N) in d_dt (fp32, or bf16 with bf16 compute) = op(A) op(B) + residual (in
     * d_dt, or NULL; may be D), rounded once; matmul's rules otherwise */
    int (*matmul_out)(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                      zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err);
    /* the lm-head product, xent and both gradient products over chunk_rows rows at a
     * time (fused.h): dx (N, C) overwritten, dw (V, C) = dw_beta dw + the chunks' sum
     * (dw_beta 0 or 1, the first chunk's product's beta: 0 stores, dw not read), *loss_sum (a
     * buffer of the table's) += the loss sum, nothing waited for; each NULL: not
     * wanted.  The gradient scale as xent_into's (scale_src).  A target outside
     * [0, V) (ZT_IGNORE_INDEX aside): ZT_EINPUT. */
    int (*lmhead_xent)(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                       const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V,
                       float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute, int chunk_rows,
                       zt_err *err);

    /* ---- the engine's kernels (reductions.h, adamw.h) */
    void (*adamw_step)(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                       const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit);
    double (*sumsq)(const void *x, zt_dtype dt, size_t n);
    void (*accumulate)(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n);
    /* acc (fp32) = (round_acc ? bf16(acc) : acc) + bf16(x) (reductions.h) */
    void (*accumulate_bf16_rounded)(float *acc, int round_acc, const float *x, size_t n);
    double (*round_bf16)(float *x, size_t n, int want_sumsq);

    /* ---- the asynchronous step (step_scalars.h): each entry leaves its number in
     * device memory instead of returning it, so nothing waits for the device; the
     * engine uses them in fast mode.  Every pointer is a buffer of the table's. */
    /* *dst = sum of x_i^2 in double (sumsq's) */
    void (*sumsq_into)(double *dst, const void *x, zt_dtype dt, size_t n);
    /* *dst = sum of bf16(x_i)^2 in double, x (fp32) only read: round_bf16's sum of
     * squares, in its order, without its write (the norm of a gradient whose rounding
     * to the reduce dtype AdamW does as it reads it: zt_adamw_step's g_bf16) */
    void (*sumsq_bf16_into)(double *dst, const float *x, size_t n);
    /* xent, its loss sum added to *loss_sum (NULL: the gradient only).  The gradient scale: grad_scale when
     * scale_src is NULL (exact mode, and callers outside a training step); else
     * zt_step_grad_scale(scale_src), formed where and when the kernel runs from the
     * step's scalars (a buffer of the table's: the step's count of targets and the
     * loss scale the device holds), and grad_scale is ignored.  Why a pointer to the
     * scalars and not a float argument: a value is fixed when the entry is called
     * (or captured), but fast mode's step n+1 is queued before step n's readback,
     * whose fp16 overflow decides its loss scale, and a captured step replays with
     * each step's own count of targets (a loss mask); the device holds both.  Why
     * not a float in device memory: that float would need an entry of its own to
     * form it, where the scalars already hold both numbers and the kernel forms the
     * scale as it runs (a double division), with the host's expression and bits. */
    void (*xent_into)(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N,
                      int V, float grad_scale, const zt_step_scalars *scale_src, double *loss_sum);
    /* zt_step_verdict into *sc from the units' sums of squares */
    void (*step_verdict)(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                         double grad_unscale);
    /* AdamW over a unit's whole shard in one pass: adamw_step's arithmetic, the
     * weight decay of each element by its segment (segs: nsegs of them, a buffer of
     * the table's; kind 1 takes s->weight_decay, kind 0 none, kind -1 is skipped),
     * the clipping coefficient read from sc->clip instead of s->clip, nothing done
     * when sc->skip, and the audit added to sc's. */
    void (*adamw_unit)(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                       const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                       zt_dtype cast_dt);

    /* ---- the captured step (docs/gpu.md, "The captured step") */
    /* buffer <- bytes of host memory, in queue order, without waiting: the bytes are
     * taken at once (a device copies them into a page-locked slot of its own), so
     * src_host may change as soon as this returns.  Inside a capture the copy is
     * captured instead, from src_host itself, which a replay reads again: src_host
     * must then be host_alloc memory that outlives the graph, refilled before each
     * launch (the token ids of a captured step). */
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    /* From graph_begin to graph_end the entries called are captured instead of run;
     * graph_launch replays them with the same arguments: the same buffers (read and
     * written anew), the same host memory behind token ids and uploads (read anew),
     * and the same values of everything passed by value or through a host struct
     * (taken at capture: a learning rate that changes must be in a buffer).  Nothing
     * captured may wait for the device or allocate: graph_end fails naming the first
     * entry that did.  Tables without graphs (the CPU's) answer ZT_EINPUT. */
    int (*graph_begin)(zt_err *err);
    int (*graph_end)(zt_graph **graph, zt_err *err);
    int (*graph_launch)(const zt_graph *graph, zt_err *err);
    void (*graph_free)(zt_graph *graph);
    /* ---- bf16 activations (docs/gpu.md, "Kernel modes"): the model in fast mode with
     * bf16 compute keeps qkv, the attention output and gate|up in bf16, as autocast
     * does, and calls these in place of the qkv product, rope, attention and swiglu.  Each is the
     * composition of exact entries it names, within bf16 error of it: the rounding of
     * an input to bf16 that the exact path keeps in fp32 is the only difference (each
     * output element: one bf16 ulp of its inputs, 2^-8 relative). */
    /* y16 (N, out) = bf16(x (N, in) w^T + b): the qkv product writing the bf16 qkv, its
     * bias (b (out) in b_dt, or NULL) added to the fp32 sum before the one rounding
     * (cuBLASLt's BIAS epilogue in the fast CUDA table); w (out, in); compute must be
     * bf16 (ZT_EINPUT otherwise); matmul's argument rules otherwise. */
    int (*linear_act16)(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                        zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err);
    /* attention_forward over bf16 qkv as the product wrote it (before RoPE): q and k are
     * rotated by the tables cos_t, sin_t (T, hd/2) as they are read (cos_t NULL: read as
     * they are); its output in bf16 only (out16, the output projection's operand), lse
     * fp32; scratch as attention_forward's */
    void (*attention_forward_act16)(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                    const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                    int window);
    /* attention_backward reading qkv (before RoPE, rotated as the forward read it) and
     * out in bf16; the gradient of the unrotated qkv (RoPE's backward applied to dq and
     * dk before they are written), overwritten in fp32 into dqkv and rounded once into
     * dqkv16 (each NULL: not wanted) */
    void (*attention_backward_act16)(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                     const uint16_t *out16, const float *lse, const float *cos_t, const float *sin_t,
                                     void *scratch, int B, int T, int nh, int nkv, int hd, int window);
    /* swiglu_forward / swiglu_backward with gu (N, 2F) in bf16, h and dgu in bf16 */
    void (*swiglu_forward_act16)(uint16_t *h16, const uint16_t *gu16, int N, int F);
    void (*swiglu_backward_act16)(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F);

    /* What MFU divides by on a device that runs the products itself: its measured
     * rate of large products in GFLOP/s for compute (bf16: bf16 operands with fp32
     * accumulation; fp32: without TF32), and in `what` the device's name for the
     * peak cache ("NVIDIA H200, sm_90").  NULL for a table whose products run on
     * the host's cores (cpu, emu): the peak is the CPU's then (train/peak.h). */
    int (*matmul_peak)(zt_dtype compute, double *gflops, char *what, size_t cap, zt_err *err);

    /* The emulated device's stand-in for NCCL (comm.h, ZT_COMM_EMU; docs/gpu.md, "The
     * captured step"): run(args) queued in the device's order as a kernel is, so run at
     * once, or while capturing recorded with a copy of args (bytes) and run at each
     * launch; and the host address of one of the table's buffers, for that run to hand
     * to MPI.  Optional, as matmul_peak: NULL for every table but the emulated
     * device's (a GPU queues NCCL's collectives on its stream instead). */
    void (*queue_host)(void (*run)(const void *args), const void *args, size_t bytes);
    void *(*host_address)(const void *buf);

    /* Packed examples (TRL's padding_free and packing; flash-attention's varlen
     * entries): RoPE and the fp32-activation attention with pos (B, T), each token's
     * position inside its own example (host memory, as token ids are), so positions restart at
     * each example and attention stays inside it (kernels.h: zt_attention_forward_pos);
     * otherwise as rope_forward .. attention_backward.  Optional, as matmul_peak: NULL
     * in a table that has none, where the model refuses positions, naming the table. */
    void (*rope_forward_pos)(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                             int nh, int nkv, int hd);
    void (*rope_backward_pos)(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                              int nh, int nkv, int hd);
    void (*attention_forward_pos)(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                  const int *pos, int B, int T, int nh, int nkv, int hd, int window);
    void (*attention_backward_pos)(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, const int *pos, int B, int T, int nh, int nkv,
                                   int hd, int window);

    /* LoRA's scale (model/lora.h, docs/lora.md): y[i ldy + j] += a * x[i ldx + j] for rows x
     * cols fp32 elements (row strides ldy, ldx: a block of columns of a wider matrix, such as
     * q's in qkv), the product rounded before the sum (no fused multiply-add), as torch's
     * y + x * a.  Optional, as matmul_peak: NULL in a table that has none, where LoRA is
     * refused, naming the table. */
    void (*scale_add)(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols);
} zt_backend;

/* The host backend: OpenMP kernels and oneDNN products. */
const zt_backend *zt_backend_cpu(void);

/* The CPU kernels behind opaque handles (backend_emu.c): every buffer from its
 * alloc is an address the host cannot dereference (a read or write faults), so a
 * run on it proves that host code reaches buffers only through to_host and
 * to_device, and its copies take the staged comm path a device takes.  A test
 * device: its numbers are the CPU's, bit for bit. */
const zt_backend *zt_backend_emu(void);

/* The emulated device in fast mode: the same kernels (so the same numbers), with
 * kernels = ZT_KERNELS_FAST, so the engine takes the asynchronous step on it. */
const zt_backend *zt_backend_emu_fast(void);

/* The fast tables' attention scratch (the CUDA fast table's tensor-core kernels; the
 * emulated device's fast table states the same size, so that the model's estimate of a
 * fast run, which asks that table, is what a GPU allocates): 0 where the exact rule
 * (backend_cpu.c) gives 0 (no bf16 operands), else the larger of the exact rule's size
 * (the exact kernels' fallback runs in it) and what the fast backward keeps there, each
 * part 256-aligned, at the byte offsets in *at (NULL: not wanted):
 *   D, B nh T floats, at the head;
 *   q16: Q as the dk/dv and dq blocks read it, bf16, rotated by RoPE, (B, nh, T, hd);
 *   do16: dO in bf16, (B, nh, T, hd) (both made once, so that those blocks take them by
 *   cp.async);
 *   partials: with grouped queries (nh > nkv) the dk and dv blocks' per-query-head
 *   partials, 2 B nh T hd floats, and after their sum the dq pass's rotated K, B nkv T
 *   hd bf16, in the same place (room for the larger). */
typedef struct {
    size_t q16, do16, partials;
} zt_fast_scratch_at;
size_t zt_attention_fast_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd, zt_fast_scratch_at *at);

/* Host waits a real device would make that the emulated device has counted since
 * the process started: every to_host, to_device, sync and copy_wait, and every
 * entry that returns a number computed from buffers (xent, sumsq, round_bf16 with
 * its sum, adamw_step with an audit), each of which a GPU ends by waiting for its
 * stream; not to_host_async, to_device_async, copy_join or copy_record, which a
 * GPU queues (their wait is copy_wait's or copy_wait_marker's, one each).  The fast mode's tests hold a step to one (its
 * readback); offload's (test_offload.c) hold the uploads to none. */
long zt_backend_emu_waits(void);

/* The emulated device's copies down (to_host_async) are held on its copy queue
 * until a copy_wait, a sync or a copy_wait_marker past them, as late as a GPU's
 * copy stream may finish them.  This counts the copy_wait_marker calls that
 * returned with a copy down still queued behind the marker: host work that ran
 * beside a download, as offload's step overlaps unit k's AdamW with unit k+1's
 * gradient shard coming down (test_offload.c). */
long zt_backend_emu_overlapped_waits(void);

/* Calls into the emulated device's table since the process started, every entry
 * counted once (a graph's launch is one call, whatever it replays): the host's cost
 * of a step, which a captured step brings down to a handful. */
long zt_backend_emu_calls(void);

/* The same device's table in mode `mode` (be itself when it is in that mode);
 * NULL with ZT_EINPUT in err where there is none (the CPU has no fast mode). */
const zt_backend *zt_backend_in_mode(const zt_backend *be, zt_kernel_mode mode, zt_err *err);

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
