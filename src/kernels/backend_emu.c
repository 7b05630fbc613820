/* backend_emu.c — the CPU kernels behind opaque handles: a test device.
 *
 * A device's buffers are not host memory, and nothing on a machine without a GPU
 * shows whether host code (the engine, checkpoints, weights, evaluation) ever
 * reads or writes one directly.  This table makes such a read fail at once: its
 * alloc returns the host buffer's address plus EMU_BIAS (2^62), which on x86-64
 * is a non-canonical address, so a load or store through it faults (SIGSEGV).
 * Pointer arithmetic on a handle still works (handle + k is the handle of
 * buffer + k), as it does on cudaMalloc'd pointers.  Every entry takes the bias
 * off its buffer arguments and runs the CPU kernel; token ids, returned scalars
 * and argument structs are host data (backend.h) and pass unchanged.  Bytes move
 * only through to_host / to_device, and host_visible is 0, so the engine and the
 * comm layer take the paths a GPU takes (the staged comm path included), with
 * the CPU's numbers bit for bit. */
#include <stdint.h>
#include <string.h>

#include "act16.h"
#include "backend.h"
#include "fused.h"
#include "kernels.h"
#include "matmul.h"
#include "reductions.h"

#define EMU_BIAS ((uintptr_t)1 << 62)

/* a host address as a handle, and back; NULL stays NULL (an alloc of 0 bytes, an absent buffer) */
static void *handle_of(const void *p) { return p ? (void *)((uintptr_t)p + EMU_BIAS) : NULL; }
static void *host_of(const void *p) { return p ? (void *)((uintptr_t)p - EMU_BIAS) : NULL; }

static void *emu_alloc(zt_mem_cat cat, size_t bytes) { return handle_of(zt_alloc(cat, bytes)); }
static void emu_free(zt_mem_cat cat, void *p, size_t bytes) { zt_free(cat, host_of(p), bytes); }
static void emu_copy(void *dst, const void *src, size_t bytes) { memcpy(host_of(dst), host_of(src), bytes); }
static void emu_zero(void *dst, size_t bytes) { memset(host_of(dst), 0, bytes); }
static void emu_convert(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, size_t n)
{
    zt_convert(host_of(dst), dst_dt, host_of(src), src_dt, n);
}

/* The host waits a GPU would make here (zt_backend_emu_waits): the moves, sync, and
 * the entries that return a number computed on the device. */
static long waits;
static void waited(void) { __atomic_fetch_add(&waits, 1, __ATOMIC_RELAXED); }
long zt_backend_emu_waits(void) { return __atomic_load_n(&waits, __ATOMIC_RELAXED); }

static void emu_to_host(void *dst_host, const void *src, size_t bytes)
{
    waited();
    memcpy(dst_host, host_of(src), bytes);
}

static void emu_to_device(void *dst, const void *src_host, size_t bytes)
{
    waited();
    memcpy(host_of(dst), src_host, bytes);
}

static void run_uploads(void);
static void emu_sync(void)
{
    waited();
    run_uploads();
}
static void *emu_stream(void) { return NULL; }

static int emu_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                      int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err)
{
    return zt_matmul(host_of(C), host_of(A), a_dt, host_of(B), b_dt, M, N, K, trans_a, trans_b, beta, compute, err);
}

static void emu_embed_forward(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C)
{
    zt_embed_forward(host_of(x), host_of(wte), wte_dt, tokens, N, C);
}

static void emu_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C)
{
    zt_embed_backward(host_of(dwte), host_of(dx), tokens, N, C);
}

static void emu_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                                float eps)
{
    zt_rmsnorm_forward(host_of(y), y_dt, host_of(rstd), host_of(x), host_of(w), N, C, eps);
}

static void emu_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float *dw, const float *dy, const float *x,
                                 const float *w, const float *rstd, int N, int C)
{
    zt_rmsnorm_backward_accumulate(host_of(dx), host_of(dx_bf16), host_of(dw), host_of(dy), host_of(x), host_of(w),
                                   host_of(rstd), N, C);
}

static void emu_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D)
{
    zt_bias_forward(host_of(y), host_of(b), b_dt, N, D);
}

static void emu_bias_backward(float *db, const float *dy, int N, int D)
{
    zt_bias_backward_accumulate(host_of(db), host_of(dy), N, D);
}

static void emu_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f)
{
    zt_rope_tables(host_of(cos_t), host_of(sin_t), T, hd, f);
}

static void emu_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                             int hd)
{
    zt_rope_forward(host_of(qkv), host_of(cos_t), host_of(sin_t), B, T, nh, nkv, hd);
}

static void emu_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                              int hd)
{
    zt_rope_backward(host_of(dqkv), host_of(cos_t), host_of(sin_t), B, T, nh, nkv, hd);
}

/* the CPU table's attention entries, on decoded buffers */
static size_t emu_attention_scratch_bytes(int B, int T, int nkv, int hd, zt_dtype opd)
{
    return zt_backend_cpu()->attention_scratch_bytes(B, T, nkv, hd, opd);
}

static void emu_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                  int B, int T, int nh, int nkv, int hd, int window)
{
    zt_backend_cpu()->attention_forward(host_of(out), host_of(out_bf16), host_of(lse), host_of(qkv), host_of(scratch),
                                        B, T, nh, nkv, hd, window);
}

static void emu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    zt_backend_cpu()->attention_backward(host_of(dqkv), host_of(dout), host_of(qkv), host_of(out), host_of(lse),
                                         host_of(scratch), B, T, nh, nkv, hd, window);
}

static size_t emu_attention_cache_scratch_bytes(int cap, int threads)
{
    return zt_backend_cpu()->attention_cache_scratch_bytes(cap, threads);
}

static void emu_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                        const float *v_cache, int cap, int pos0, int n, int nh, int nkv, int hd,
                                        int window, float *scratch, int threads)
{
    zt_attention_cache_forward(host_of(out), host_of(q), q_stride, host_of(k_cache), host_of(v_cache), cap, pos0, n,
                               nh, nkv, hd, window, host_of(scratch), threads);
}

static void emu_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    zt_swiglu_forward(host_of(h), h_dt, host_of(gu), N, F);
}

static void emu_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    zt_swiglu_backward(host_of(dgu), dgu_dt, host_of(dh), host_of(gu), N, F);
}

static void emu_transpose(float *dst, const float *src, int rows, int cols)
{
    zt_transpose_f32(host_of(dst), host_of(src), rows, cols);
}

static double emu_xent(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                       float grad_scale)
{
    waited();
    return zt_xent_forward_backward(host_of(dlogits), host_of(dlogits_bf16), host_of(logits), targets, N, V,
                                    grad_scale);
}

/* the fused entries: the host's compositions (fused.h); the loss stays in the
 * device's buffer, so lmhead_xent waits for nothing */
static void emu_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt,
                                         float *rstd, const float *w, int N, int C, float eps)
{
    zt_rmsnorm_residual_forward(host_of(x), host_of(delta), delta_dt, host_of(y), y_dt, host_of(rstd), host_of(w), N,
                                C, eps);
}

static int emu_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                          zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err)
{
    return zt_matmul_out(host_of(D), d_dt, host_of(residual), host_of(A), a_dt, host_of(B), b_dt, M, N, K, trans_a,
                         trans_b, compute, err);
}

static int emu_lmhead_xent(double *loss_sum, float *dx, float *dw, const void *x, zt_dtype x_dt, const void *w,
                           zt_dtype w_dt, const int *targets, int N, int C, int V, float grad_scale, zt_dtype compute,
                           int chunk_rows, zt_err *err)
{
    return zt_lmhead_xent(host_of(loss_sum), host_of(dx), host_of(dw), host_of(x), x_dt, host_of(w), w_dt, targets, N,
                          C, V, grad_scale, compute, chunk_rows, err);
}

static void emu_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                           const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    if (audit)
        waited();
    zt_adamw_step_shard(host_of(p), host_of(m), host_of(v), host_of(g), host_of(comp), dt, n, s, host_of(cast), cast_dt,
                        audit);
}

static double emu_sumsq(const void *x, zt_dtype dt, size_t n)
{
    waited();
    return zt_sumsq(host_of(x), dt, n);
}

static void emu_accumulate(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n)
{
    zt_accumulate(host_of(acc), acc_dt, host_of(x), x_dt, n);
}

static void emu_accumulate_bf16_rounded(float *acc, const float *x, size_t n)
{
    zt_accumulate_bf16_rounded(host_of(acc), host_of(x), n);
}

static double emu_round_bf16(float *x, size_t n, int want_sumsq)
{
    if (want_sumsq)
        waited();
    return zt_round_bf16_inplace(host_of(x), n, want_sumsq);
}

/* the asynchronous step's entries: their numbers stay in the device's buffers, no wait */
static void emu_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n)
{
    *(double *)host_of(dst) = zt_sumsq(host_of(x), dt, n);
}

static void emu_round_bf16_into(float *x, size_t n, double *sumsq)
{
    double s = zt_round_bf16_inplace(host_of(x), n, sumsq != NULL);
    if (sumsq)
        *(double *)host_of(sumsq) = s;
}

static void emu_xent_into(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N,
                          int V, float grad_scale, double *loss_sum)
{
    *(double *)host_of(loss_sum) += zt_xent_forward_backward(host_of(dlogits), host_of(dlogits_bf16),
                                                             host_of(logits), targets, N, V, grad_scale);
}

static void emu_step_verdict(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                             double grad_unscale)
{
    zt_step_verdict(host_of(sc), host_of(unit_sumsq), nunits, max_grad_norm, grad_unscale);
}

static void emu_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                           const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc,
                           void *cast, zt_dtype cast_dt)
{
    zt_adamw_step_unit(host_of(p), host_of(m), host_of(v), host_of(g), host_of(comp), dt, n, host_of(segs), nsegs, s,
                       host_of(sc), host_of(cast), cast_dt);
}

/* the bf16 activations of fast mode (act16.h): the host's reference, in both tables */
static void emu_rope_forward_act16(uint16_t *qkv16, const float *src, const float *cos_t, const float *sin_t, int B,
                                   int T, int nh, int nkv, int hd)
{
    zt_rope_forward_act16(host_of(qkv16), host_of(src), host_of(cos_t), host_of(sin_t), B, T, nh, nkv, hd);
}

static void emu_rope_backward_act16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t,
                                    int B, int T, int nh, int nkv, int hd)
{
    zt_rope_backward_act16(host_of(dqkv16), host_of(dqkv), host_of(cos_t), host_of(sin_t), B, T, nh, nkv, hd);
}

static void emu_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, void *scratch, int B,
                                        int T, int nh, int nkv, int hd, int window)
{
    zt_attention_forward_act16(host_of(out16), host_of(lse), host_of(qkv16), host_of(scratch), B, T, nh, nkv, hd,
                               window);
}

static void emu_attention_backward_act16(float *dqkv, const float *dout, const uint16_t *qkv16,
                                         const uint16_t *out16, const float *lse, void *scratch, int B, int T, int nh,
                                         int nkv, int hd, int window)
{
    zt_attention_backward_act16(host_of(dqkv), host_of(dout), host_of(qkv16), host_of(out16), host_of(lse),
                                host_of(scratch), B, T, nh, nkv, hd, window);
}

static void emu_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    zt_swiglu_forward_act16(host_of(h16), host_of(gu16), N, F);
}

static void emu_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    zt_swiglu_backward_act16(host_of(dgu16), host_of(dh), host_of(gu16), N, F);
}

/* The copy queue.  Down: at once (src is not written before copy_wait, backend.h),
 * and no wait counted, since a device queues it and goes on.  Up: held back until
 * the next copy_join, copy_wait or sync, as late as a device's copy queue may run
 * it, so that a host writing the staging buffer before copy_wait, or a kernel
 * reading the destination without a copy_join, gets the bytes a GPU could give
 * (stale ones) and a test sees them, instead of passing by the luck of one queue. */
#define EMU_UPLOADS 256
static struct {
    void *dst;
    const void *src;
    size_t bytes;
} uploads[EMU_UPLOADS];
static int nuploads;

static void run_uploads(void)
{
    for (int i = 0; i < nuploads; i++)
        memcpy(host_of(uploads[i].dst), uploads[i].src, uploads[i].bytes);
    nuploads = 0;
}

static void emu_to_host_async(void *dst_host, const void *src, size_t bytes) { memcpy(dst_host, host_of(src), bytes); }

static void emu_to_device_async(void *dst, const void *src_host, size_t bytes)
{
    if (nuploads == EMU_UPLOADS) /* a full queue runs: a device may run its copies at any time */
        run_uploads();
    uploads[nuploads].dst = dst;
    uploads[nuploads].src = src_host;
    uploads[nuploads++].bytes = bytes;
}

static void emu_copy_join(void) { run_uploads(); } /* the device waits, the host does not */

static void emu_copy_wait(void)
{
    waited();
    run_uploads();
}
#define emu_host_alloc zt_alloc /* staging memory is the host's */
#define emu_host_free zt_free

#define EMU_ENTRY(e) .e = emu_##e,
static const zt_backend emu = {
    .name = "emu",
    .kernels = ZT_KERNELS_EXACT,
    .host_visible = 0,
    ZT_BACKEND_ENTRIES(EMU_ENTRY)
};

/* fast mode: the same kernels (a GPU's fast variants have no CPU twins to run), so
 * the asynchronous step's host logic runs here with the CPU's numbers; the model's
 * fast path (bf16 activations) calls the _act16 entries, the host's reference */
static const zt_backend emu_fast = {
    .name = "emu",
    .kernels = ZT_KERNELS_FAST,
    .host_visible = 0,
    ZT_BACKEND_ENTRIES(EMU_ENTRY)
};

const zt_backend *zt_backend_emu(void) { return &emu; }
const zt_backend *zt_backend_emu_fast(void) { return &emu_fast; }
