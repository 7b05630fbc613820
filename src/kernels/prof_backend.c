/* prof_backend.c — every backend entry timed at the dispatch (prof_backend.h). */
#include "prof_backend.h"

#include "../core/prof.h"
#include "backend_cuda.h"

static const zt_backend *in; /* the table being profiled */
static zt_backend out;

#define SZ(dt) ((double)zt_dtype_size(dt))
/* one event around one call of the inner entry */
#define TIMED(name, cat, flops, bytes, call)                                                                 \
    do {                                                                                                     \
        int h_ = zt_prof_begin(name, cat, ZT_PROF_COMPUTE);                                                  \
        call;                                                                                                \
        zt_prof_end(h_, (flops), (bytes));                                                                   \
    } while (0)

double zt_attention_flops(int B, int T, int nh, int hd, int window, int backward)
{
    /* pairs (i, j) with j <= i and i - j < window: T(T+1)/2 without a window,
     * w(w+1)/2 + (T-w)·w with one (w < T) */
    double t = T, w = window;
    double pairs = window <= 0 || window >= T ? t * (t + 1) / 2 : w * (w + 1) / 2 + (t - w) * w;
    return (backward ? 10.0 : 4.0) * B * nh * (double)hd * pairs;
}

static void *p_alloc(zt_mem_cat cat, size_t bytes)
{
    void *p;
    TIMED("alloc", "memory", 0, 0, p = in->alloc(cat, bytes));
    return p;
}
static void p_free(zt_mem_cat cat, void *p, size_t bytes) { TIMED("free", "memory", 0, 0, in->free(cat, p, bytes)); }
static void p_copy(void *d, const void *s, size_t bytes) { TIMED("copy", "kernel", 0, 2.0 * bytes, in->copy(d, s, bytes)); }
static void p_zero(void *d, size_t bytes) { TIMED("zero", "kernel", 0, (double)bytes, in->zero(d, bytes)); }
static void p_convert(void *d, zt_dtype ddt, const void *s, zt_dtype sdt, size_t n)
{
    TIMED("convert", "kernel", 0, n * (SZ(ddt) + SZ(sdt)), in->convert(d, ddt, s, sdt, n));
}
static void p_to_host(void *d, const void *s, size_t bytes)
{
    TIMED("to_host", "transfer", 0, (double)bytes, in->to_host(d, s, bytes));
}
static void p_to_device(void *d, const void *s, size_t bytes)
{
    TIMED("to_device", "transfer", 0, (double)bytes, in->to_device(d, s, bytes));
}
static void p_sync(void) { TIMED("sync", "sync", 0, 0, in->sync()); }
/* offload's copies down beside the kernels: the queuing, and the wait that joins them */
static void p_to_host_async(void *d, const void *s, size_t bytes)
{
    TIMED("to_host_async", "transfer", 0, (double)bytes, in->to_host_async(d, s, bytes));
}
static void p_to_device_async(void *d, const void *s, size_t bytes)
{
    TIMED("to_device_async", "transfer", 0, (double)bytes, in->to_device_async(d, s, bytes));
}
static void p_copy_join(void) { TIMED("copy_join", "sync", 0, 0, in->copy_join()); }
static void p_copy_wait(void) { TIMED("copy_wait", "sync", 0, 0, in->copy_wait()); }
static long p_copy_record(void)
{
    long m = 0;
    TIMED("copy_record", "sync", 0, 0, m = in->copy_record());
    return m;
}
static void p_copy_wait_marker(long m) { TIMED("copy_wait_marker", "sync", 0, 0, in->copy_wait_marker(m)); }
static void p_upload(void *d, const void *s, size_t bytes)
{
    TIMED("upload", "transfer", 0, (double)bytes, in->upload(d, s, bytes));
}
/* a captured step (a profiled run takes none: the trainer turns graphs off) */
static int p_graph_begin(zt_err *err)
{
    int rc;
    TIMED("graph_begin", "graph", 0, 0, rc = in->graph_begin(err));
    return rc;
}
static int p_graph_end(zt_graph **g, zt_err *err)
{
    int rc;
    TIMED("graph_end", "graph", 0, 0, rc = in->graph_end(g, err));
    return rc;
}
static int p_graph_launch(const zt_graph *g, zt_err *err)
{
    int rc;
    TIMED("graph_launch", "graph", 0, 0, rc = in->graph_launch(g, err));
    return rc;
}
static void p_graph_free(zt_graph *g) { TIMED("graph_free", "graph", 0, 0, in->graph_free(g)); }
static void *p_host_alloc(zt_mem_cat cat, size_t bytes)
{
    void *p;
    TIMED("host_alloc", "memory", 0, 0, p = in->host_alloc(cat, bytes));
    return p;
}
static void p_host_free(zt_mem_cat cat, void *p, size_t bytes)
{
    TIMED("host_free", "memory", 0, 0, in->host_free(cat, p, bytes));
}
/* the emulated NCCL (backend.h): a collective queued as a kernel, timed as one of
 * the collectives it stands for; host_address only translates a handle */
static void p_queue_host(void (*run)(const void *args), const void *args, size_t bytes)
{
    TIMED("queue_host", "collective", 0, 0, in->queue_host(run, args, bytes));
}
static void *p_host_address(const void *buf)
{
    void *p;
    TIMED("host_address", "memory", 0, 0, p = in->host_address(buf));
    return p;
}
static int p_matmul_peak(zt_dtype compute, double *gflops, char *what, size_t cap, zt_err *err)
{
    int rc;
    TIMED("matmul_peak", "setup", 0, 0, rc = in->matmul_peak(compute, gflops, what, cap, err));
    return rc;
}
static int p_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                    int ta, int tb, float beta, zt_dtype compute, zt_err *err)
{
    int rc;
    TIMED("matmul", "kernel", 2.0 * M * N * (double)K, 0,
          rc = in->matmul(C, A, a_dt, B, b_dt, M, N, K, ta, tb, beta, compute, err));
    return rc;
}
static void p_embed_forward(float *x, const void *wte, zt_dtype dt, const int *tokens, int N, int C)
{
    TIMED("embed_forward", "kernel", 0, (double)N * C * (4 + SZ(dt)) + 4.0 * N,
          in->embed_forward(x, wte, dt, tokens, N, C));
}
static void p_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta)
{
    /* dx read, the named rows read and written; with beta 0 every row written once */
    TIMED("embed_backward", "kernel", 0, 12.0 * N * C + 4.0 * N + (beta == 0.0f ? 4.0 * V * C : 0.0),
          in->embed_backward(dwte, dx, tokens, N, C, V, beta));
}
static void p_rmsnorm_forward(void *y, zt_dtype ydt, float *rstd, const float *x, const float *w, int N, int C,
                              float eps)
{
    TIMED("rmsnorm_forward", "kernel", 0, (double)N * C * (4 + SZ(ydt)) + 4.0 * C + 4.0 * N,
          in->rmsnorm_forward(y, ydt, rstd, x, w, N, C, eps));
}
static void p_rmsnorm_backward(float *dx, uint16_t *dx16, float dxb, float *dw, float dwb, const float *dy,
                               const float *x, const float *w, const float *rstd, int N, int C)
{
    /* dy and x read, dx written (and read where it adds), dx16 written, w read, dw
     * written (and read where it adds) */
    TIMED("rmsnorm_backward", "kernel", 0,
          (double)N * C * (12 + (dxb != 0.0f ? 4 : 0) + (dx16 ? 2 : 0)) + (8.0 + (dwb != 0.0f ? 4 : 0)) * C + 4.0 * N,
          in->rmsnorm_backward(dx, dx16, dxb, dw, dwb, dy, x, w, rstd, N, C));
}
static void p_bias_forward(float *y, const void *b, zt_dtype bdt, int N, int D)
{
    /* y read and written, b read */
    TIMED("bias_forward", "kernel", 0, 8.0 * N * D + D * SZ(bdt), in->bias_forward(y, b, bdt, N, D));
}
static void p_bias_backward(float *db, float beta, const float *dy, int N, int D)
{
    TIMED("bias_backward", "kernel", 0, 4.0 * N * D + (beta != 0.0f ? 8.0 : 4.0) * D,
          in->bias_backward(db, beta, dy, N, D));
}
static void p_rope_tables(float *c, float *s, int T, int hd, const zt_rope_freqs *f)
{
    TIMED("rope_tables", "kernel", 0, 4.0 * T * hd, in->rope_tables(c, s, T, hd, f));
}
static void p_rope_forward(float *qkv, const float *c, const float *s, int B, int T, int nh, int nkv, int hd)
{
    TIMED("rope_forward", "kernel", 0, 8.0 * B * T * (nh + nkv) * hd + 4.0 * T * hd,
          in->rope_forward(qkv, c, s, B, T, nh, nkv, hd));
}
static void p_rope_backward(float *dqkv, const float *c, const float *s, int B, int T, int nh, int nkv, int hd)
{
    TIMED("rope_backward", "kernel", 0, 8.0 * B * T * (nh + nkv) * hd + 4.0 * T * hd,
          in->rope_backward(dqkv, c, s, B, T, nh, nkv, hd));
}
static void p_attention_forward(float *o, uint16_t *o16, float *lse, const float *qkv, void *scratch, int B, int T,
                                int nh, int nkv, int hd, int window)
{
    TIMED("attention_forward", "kernel", zt_attention_flops(B, T, nh, hd, window, 0), 0,
          in->attention_forward(o, o16, lse, qkv, scratch, B, T, nh, nkv, hd, window));
}
static void p_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *o, const float *lse,
                                 void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    TIMED("attention_backward", "kernel", zt_attention_flops(B, T, nh, hd, window, 1), 0,
          in->attention_backward(dqkv, dout, qkv, o, lse, scratch, B, T, nh, nkv, hd, window));
}
static void p_rope_forward_pos(float *qkv, const float *c, const float *s, const int *pos, int B, int T, int nh,
                               int nkv, int hd)
{
    TIMED("rope_forward", "kernel", 0, 8.0 * B * T * (nh + nkv) * hd + 4.0 * T * hd,
          in->rope_forward_pos(qkv, c, s, pos, B, T, nh, nkv, hd));
}
static void p_rope_backward_pos(float *dqkv, const float *c, const float *s, const int *pos, int B, int T, int nh,
                                int nkv, int hd)
{
    TIMED("rope_backward", "kernel", 0, 8.0 * B * T * (nh + nkv) * hd + 4.0 * T * hd,
          in->rope_backward_pos(dqkv, c, s, pos, B, T, nh, nkv, hd));
}
/* flops as the causal attention counts them: an upper bound for packed examples */
static void p_attention_forward_pos(float *o, uint16_t *o16, float *lse, const float *qkv, void *scratch,
                                    const int *pos, int B, int T, int nh, int nkv, int hd, int window)
{
    TIMED("attention_forward", "kernel", zt_attention_flops(B, T, nh, hd, window, 0), 0,
          in->attention_forward_pos(o, o16, lse, qkv, scratch, pos, B, T, nh, nkv, hd, window));
}
static void p_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *o,
                                     const float *lse, void *scratch, const int *pos, int B, int T, int nh, int nkv,
                                     int hd, int window)
{
    TIMED("attention_backward", "kernel", zt_attention_flops(B, T, nh, hd, window, 1), 0,
          in->attention_backward_pos(dqkv, dout, qkv, o, lse, scratch, pos, B, T, nh, nkv, hd, window));
}
static void p_attention_cache_forward(float *o, const float *q, size_t qs, const float *k, const float *v, int cap,
                                      int pos0, int n, int nh, int nkv, int hd, int window, float *scratch,
                                      int threads)
{
    /* new row i sees min(pos0 + i + 1, window) cached keys: 4·hd FLOPs per key and head */
    double keys = 0;
    for (int i = 0; i < n; i++) {
        int k_i = pos0 + i + 1;
        keys += window > 0 && window < k_i ? window : k_i;
    }
    TIMED("attention_cache_forward", "kernel", 4.0 * nh * hd * keys, 0,
          in->attention_cache_forward(o, q, qs, k, v, cap, pos0, n, nh, nkv, hd, window, scratch, threads));
}
static void p_swiglu_forward(void *h, zt_dtype hdt, const float *gu, int N, int F)
{
    TIMED("swiglu_forward", "kernel", 0, (double)N * F * (8 + SZ(hdt)), in->swiglu_forward(h, hdt, gu, N, F));
}
static void p_swiglu_backward(void *dgu, zt_dtype dt, const float *dh, const float *gu, int N, int F)
{
    TIMED("swiglu_backward", "kernel", 0, (double)N * F * (12 + 2 * SZ(dt)), in->swiglu_backward(dgu, dt, dh, gu, N, F));
}
static void p_transpose(float *d, const float *s, int rows, int cols)
{
    TIMED("transpose", "kernel", 0, 8.0 * rows * cols, in->transpose(d, s, rows, cols));
}
static double p_xent(float *dl, uint16_t *dl16, const float *logits, const int *targets, int N, int V, float gs)
{
    double r;
    TIMED("xent", "kernel", 0, (double)N * V * (4 + (dl ? 4 : 0) + (dl16 ? 2 : 0)) + 4.0 * N,
          r = in->xent(dl, dl16, logits, targets, N, V, gs));
    return r;
}
static void p_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                         const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    /* p, m, v read and written, g read (fp32), comp read and written, cast written */
    double bytes = n * (6 * SZ(dt) + 4 + (comp ? 2 * SZ(dt) : 0) + (cast ? SZ(cast_dt) : 0));
    TIMED("adamw_step", "kernel", 0, bytes, in->adamw_step(p, m, v, g, comp, dt, n, s, cast, cast_dt, audit));
}
static double p_sumsq(const void *x, zt_dtype dt, size_t n)
{
    double r;
    TIMED("sumsq", "kernel", 0, n * SZ(dt), r = in->sumsq(x, dt, n));
    return r;
}
static void p_accumulate(void *acc, zt_dtype adt, const void *x, zt_dtype xdt, size_t n)
{
    TIMED("accumulate", "kernel", 0, n * (2 * SZ(adt) + SZ(xdt)), in->accumulate(acc, adt, x, xdt, n));
}
static void p_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols)
{
    double n = (double)rows * cols;
    TIMED("scale_add", "kernel", 2.0 * n, 12.0 * n, in->scale_add(y, ldy, a, x, ldx, rows, cols));
}
static void p_accumulate_bf16_rounded(float *acc, int round_acc, const float *x, size_t n)
{
    TIMED("accumulate_bf16_rounded", "kernel", 0, 12.0 * n, in->accumulate_bf16_rounded(acc, round_acc, x, n));
}
static double p_round_bf16(float *x, size_t n, int want)
{
    double r;
    TIMED("round_bf16", "kernel", 0, 8.0 * n, r = in->round_bf16(x, n, want));
    return r;
}

/* the fused entries (backend.h, fused.h) */
static void p_rmsnorm_residual_forward(float *x, const void *d, zt_dtype ddt, void *y, zt_dtype ydt, float *rstd,
                                       const float *w, int N, int C, float eps)
{
    /* x read and written, delta read, y written */
    TIMED("rmsnorm_residual_forward", "kernel", 0, (double)N * C * (8 + SZ(ddt) + SZ(ydt)) + 4.0 * N,
          in->rmsnorm_residual_forward(x, d, ddt, y, ydt, rstd, w, N, C, eps));
}
static int p_matmul_out(void *D, zt_dtype d_dt, const void *res, const void *A, zt_dtype a_dt, const void *B,
                        zt_dtype b_dt, int M, int N, int K, int ta, int tb, zt_dtype compute, zt_err *err)
{
    int rc;
    TIMED("matmul_out", "kernel", 2.0 * M * N * (double)K, 0,
          rc = in->matmul_out(D, d_dt, res, A, a_dt, B, b_dt, M, N, K, ta, tb, compute, err));
    return rc;
}
static int p_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x, zt_dtype x_dt,
                         const void *w, zt_dtype w_dt, const int *targets, int N, int C, int V, float gs,
                         const zt_step_scalars *src, zt_dtype compute, int rows, zt_err *err)
{
    int rc;
    /* the logits' product, and one more for each gradient wanted */
    double flops = 2.0 * N * (double)C * V * (1 + (dx != NULL) + (dw != NULL));
    TIMED("lmhead_xent", "kernel", flops, 0,
          rc = in->lmhead_xent(loss_sum, dx, dw, dw_beta, x, x_dt, w, w_dt, targets, N, C, V, gs, src,
                               compute, rows, err));
    return rc;
}

/* the asynchronous step's entries (backend.h): the same work, results left on the device */
static void p_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n)
{
    TIMED("sumsq_into", "kernel", 0, n * SZ(dt), in->sumsq_into(dst, x, dt, n));
}
static void p_sumsq_bf16_into(double *dst, const float *x, size_t n)
{
    TIMED("sumsq_bf16_into", "kernel", 0, 4.0 * n, in->sumsq_bf16_into(dst, x, n));
}
static void p_xent_into(float *dl, uint16_t *dl16, const float *logits, const int *targets, int N, int V,
                        float gs, const zt_step_scalars *src, double *loss_sum)
{
    TIMED("xent_into", "kernel", 0, (double)N * V * (4 + (dl ? 4 : 0) + (dl16 ? 2 : 0)) + 4.0 * N,
          in->xent_into(dl, dl16, logits, targets, N, V, gs, src, loss_sum));
}
static void p_step_verdict(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_norm, double unscale)
{
    TIMED("step_verdict", "kernel", 0, 8.0 * nunits, in->step_verdict(sc, unit_sumsq, nunits, max_norm, unscale));
}
static void p_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                         const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc, void *cast,
                         zt_dtype cast_dt)
{
    /* as adamw_step's: p, m, v read and written, g read, comp read and written, cast written */
    double bytes = n * (6 * SZ(dt) + 4 + (comp ? 2 * SZ(dt) : 0) + (cast ? SZ(cast_dt) : 0));
    TIMED("adamw_unit", "kernel", 0, bytes, in->adamw_unit(p, m, v, g, comp, dt, n, segs, nsegs, s, sc, cast, cast_dt));
}

/* the bf16 activations of fast mode (backend.h) */
static int p_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                          zt_dtype b_dt, int N, int out, int inn, zt_dtype compute, zt_err *err)
{
    int rc;
    TIMED("linear_act16", "kernel", 2.0 * N * out * (double)inn, 0,
          rc = in->linear_act16(y16, x, x_dt, w, w_dt, b, b_dt, N, out, inn, compute, err));
    return rc;
}
static void p_attention_forward_act16(uint16_t *o16, float *lse, const uint16_t *qkv16, const float *c,
                                      const float *s, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    TIMED("attention_forward_act16", "kernel", zt_attention_flops(B, T, nh, hd, window, 0), 0,
          in->attention_forward_act16(o16, lse, qkv16, c, s, scratch, B, T, nh, nkv, hd, window));
}
static void p_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                       const uint16_t *o16, const float *lse, const float *c, const float *s,
                                       void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    TIMED("attention_backward_act16", "kernel", zt_attention_flops(B, T, nh, hd, window, 1), 0,
          in->attention_backward_act16(dqkv, dqkv16, dout, qkv16, o16, lse, c, s, scratch, B, T, nh, nkv, hd,
                                       window));
}
static void p_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    TIMED("swiglu_forward_act16", "kernel", 0, 6.0 * N * F, in->swiglu_forward_act16(h16, gu16, N, F));
}
static void p_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    TIMED("swiglu_backward_act16", "kernel", 0, 12.0 * N * F, in->swiglu_backward_act16(dgu16, dh, gu16, N, F));
}

/* An entry the inner table lacks stays NULL; entries added to backend.h later
 * pass through untimed until they are listed here (tests/test_prof.c finds them). */
#define WRAP(f) out.f = in->f ? p_##f : NULL

const zt_backend *zt_backend_profiled(const zt_backend *inner)
{
    in = inner;
    out = *inner;
    WRAP(alloc);
    WRAP(free);
    WRAP(copy);
    WRAP(zero);
    WRAP(convert);
    WRAP(to_host);
    WRAP(to_device);
    WRAP(sync);
    WRAP(to_host_async);
    WRAP(to_device_async);
    WRAP(copy_join);
    WRAP(copy_wait);
    WRAP(copy_record);
    WRAP(copy_wait_marker);
    WRAP(host_alloc);
    WRAP(host_free);
    WRAP(matmul_peak);
    WRAP(rope_forward_pos);
    WRAP(rope_backward_pos);
    WRAP(attention_forward_pos);
    WRAP(attention_backward_pos);
    WRAP(scale_add);
    WRAP(queue_host);
    WRAP(host_address);
    WRAP(matmul);
    WRAP(embed_forward);
    WRAP(embed_backward);
    WRAP(rmsnorm_forward);
    WRAP(rmsnorm_backward);
    WRAP(bias_forward);
    WRAP(bias_backward);
    WRAP(rope_tables);
    WRAP(rope_forward);
    WRAP(rope_backward);
    WRAP(attention_forward);
    WRAP(attention_backward);
    WRAP(attention_cache_forward);
    WRAP(swiglu_forward);
    WRAP(swiglu_backward);
    WRAP(transpose);
    WRAP(xent);
    WRAP(rmsnorm_residual_forward);
    WRAP(matmul_out);
    WRAP(lmhead_xent);
    WRAP(adamw_step);
    WRAP(sumsq);
    WRAP(accumulate);
    WRAP(accumulate_bf16_rounded);
    WRAP(round_bf16);
    WRAP(sumsq_into);
    WRAP(sumsq_bf16_into);
    WRAP(xent_into);
    WRAP(step_verdict);
    WRAP(adamw_unit);
    WRAP(upload);
    WRAP(graph_begin);
    WRAP(graph_end);
    WRAP(graph_launch);
    WRAP(graph_free);
    WRAP(linear_act16);
    WRAP(attention_forward_act16);
    WRAP(attention_backward_act16);
    WRAP(swiglu_forward_act16);
    WRAP(swiglu_backward_act16);
    /* a device that runs its kernels on a stream is timed by events on it */
    zt_prof_set_clock(inner->stream && inner->stream() ? zt_cuda_prof_clock() : NULL);
    return &out;
}
