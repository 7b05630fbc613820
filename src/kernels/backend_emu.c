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
 * the CPU's numbers bit for bit.
 *
 * It also captures and replays, as a GPU's graphs do (backend.h, graph_begin):
 * while capturing, every entry that queues work is recorded with its arguments
 * instead of run, and a launch runs the list again.  A recorded call keeps what a
 * CUDA graph keeps: buffer handles (read and written anew at each replay), the host
 * memory behind token ids and uploads (read anew: a captured copy from page-locked
 * memory reads it at each launch), and the values of scalars and of argument structs
 * (copied at capture, as kernel arguments are).  So a learning rate passed in a
 * struct is baked into the graph here exactly as on a GPU, and a test of a captured
 * step against the same step run directly shows it.  An entry that waits for the
 * device or allocates is refused inside a capture: graph_end fails naming it.
 *
 * Its scope (what it models, what not) is written down in docs/gpu.md, "What the
 * emulators model, and what not", and frozen: a GPU feature it does not model is
 * checked on a GPU (kernels_check), not added here. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "act16.h"
#include "backend.h"
#include "fused.h"
#include "kernels.h"
#include "matmul.h"
#include "reductions.h"

#include "backend_emu_impl.h"

/* ---- calls and captures ----------------------------------------------------
 *
 * Every entry counts one call (zt_backend_emu_calls).  An entry that queues work
 * goes through defer(): run now, or, while capturing, appended to the graph with a
 * copy of its arguments.  An entry that waits or allocates goes through zt_emu_refused(),
 * which notes the first one called inside a capture for graph_end to report. */
static long calls;
static void called(void) { __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED); }
long zt_backend_emu_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

typedef void (*emu_run)(const void *args);
typedef struct emu_call {
    emu_run run;
    size_t off; /* its arguments' place in the graph's arena */
} emu_call;

struct zt_graph {
    emu_call *call;
    size_t ncalls, cap_calls;
    unsigned char *arena;
    size_t used, cap_arena;
};

static zt_graph *rec;          /* the graph being captured, NULL when none */
static const char *rec_refused; /* the first entry refused inside it */
static int rec_oom;
static int replay_rc;          /* a replayed matmul's failure, for graph_launch */
static zt_err replay_err;

/* p grown to hold want bytes (doubling), accounted; 0 when out of memory */
static int grow(void **p, size_t *cap, size_t want, size_t unit)
{
    if (want <= *cap)
        return 1;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < want)
        n *= 2;
    void *q = zt_alloc(ZT_MEM_OTHER, n * unit);
    if (!q)
        return 0;
    if (*p) {
        memcpy(q, *p, *cap * unit);
        zt_free(ZT_MEM_OTHER, *p, *cap * unit);
    }
    *p = q;
    *cap = n;
    return 1;
}

static void record(emu_run run, const void *args, size_t bytes)
{
    size_t off = (rec->used + 15) & ~(size_t)15; /* each copy aligned for any member */
    if (!grow((void **)&rec->call, &rec->cap_calls, rec->ncalls + 1, sizeof *rec->call) ||
        !grow((void **)&rec->arena, &rec->cap_arena, off + bytes, 1)) {
        rec_oom = 1;
        return;
    }
    memcpy(rec->arena + off, args, bytes);
    rec->call[rec->ncalls++] = (emu_call){run, off};
    rec->used = off + bytes;
}

static void defer(emu_run run, const void *args, size_t bytes)
{
    called();
    if (rec)
        record(run, args, bytes);
    else
        run(args);
}

/* An entry a capture cannot hold (it waits for the device or allocates): noted, then
 * run as usual (the capture has failed; graph_end says so). */
void zt_emu_refused(const char *entry)
{
    called();
    if (rec && !rec_refused)
        rec_refused = entry;
}

/* entry NAME's arguments as the struct NAME_a, and its body as NAME_run */
#define DEFER(name, ...)                                                                                   \
    do {                                                                                                   \
        name##_a a_ = {__VA_ARGS__};                                                                       \
        defer(name##_run, &a_, sizeof a_);                                                                 \
    } while (0)
#define RUNNER(name) static void name##_run(const void *p_)
#define A(name) const name##_a *a = p_

/* ---- memory and moves ---------------------------------------------------------- */

static void *emu_alloc(zt_mem_cat cat, size_t bytes)
{
    zt_emu_refused("alloc");
    return handle_of(zt_alloc(cat, bytes));
}
static void emu_free(zt_mem_cat cat, void *p, size_t bytes)
{
    zt_emu_refused("free");
    zt_free(cat, host_of(p), bytes);
}
static void *emu_host_alloc(zt_mem_cat cat, size_t bytes)
{
    zt_emu_refused("host_alloc");
    return zt_alloc(cat, bytes); /* staging memory is the host's */
}
static void emu_host_free(zt_mem_cat cat, void *p, size_t bytes)
{
    zt_emu_refused("host_free");
    zt_free(cat, p, bytes);
}

typedef struct { void *dst; const void *src; size_t bytes; } copy_a;
RUNNER(copy) { A(copy); memcpy(host_of(a->dst), host_of(a->src), a->bytes); }
static void emu_copy(void *dst, const void *src, size_t bytes) { DEFER(copy, dst, src, bytes); }

typedef struct { void *dst; size_t bytes; } zero_a;
RUNNER(zero) { A(zero); memset(host_of(a->dst), 0, a->bytes); }
static void emu_zero(void *dst, size_t bytes) { DEFER(zero, dst, bytes); }

typedef struct { void *dst; zt_dtype dst_dt; const void *src; zt_dtype src_dt; size_t n; } convert_a;
RUNNER(convert) { A(convert); zt_convert(host_of(a->dst), a->dst_dt, host_of(a->src), a->src_dt, a->n); }
static void emu_convert(void *dst, zt_dtype dst_dt, const void *src, zt_dtype src_dt, size_t n)
{
    DEFER(convert, dst, dst_dt, src, src_dt, n);
}

/* The host waits a GPU would make here (zt_backend_emu_waits): the moves, sync, and
 * the entries that return a number computed on the device. */
static long waits;
void zt_emu_waited(void) { __atomic_fetch_add(&waits, 1, __ATOMIC_RELAXED); }
long zt_backend_emu_waits(void) { return __atomic_load_n(&waits, __ATOMIC_RELAXED); }

static void emu_to_host(void *dst_host, const void *src, size_t bytes)
{
    zt_emu_refused("to_host");
    zt_emu_waited();
    memcpy(dst_host, host_of(src), bytes);
}

static void emu_to_device(void *dst, const void *src_host, size_t bytes)
{
    zt_emu_refused("to_device");
    zt_emu_waited();
    memcpy(host_of(dst), src_host, bytes);
}

static void emu_sync(void)
{
    zt_emu_refused("sync");
    zt_emu_waited();
    zt_emu_run_copies(-1);
}

static void emu_copy_wait(void)
{
    zt_emu_refused("copy_wait");
    zt_emu_waited();
    zt_emu_run_copies(-1);
}

static void *emu_stream(void)
{
    called();
    return NULL;
}

/* No wait: a GPU copies the bytes into a page-locked slot and queues the copy.  A
 * captured upload reads src_host at each replay (backend.h), as a captured copy from
 * page-locked memory does. */
typedef struct { void *dst; const void *src_host; size_t bytes; } upload_a;
RUNNER(upload) { A(upload); memcpy(host_of(a->dst), a->src_host, a->bytes); }
static void emu_upload(void *dst, const void *src_host, size_t bytes) { DEFER(upload, dst, src_host, bytes); }

/* ---- the kernels ----------------------------------------------------------------- */

typedef struct {
    float *C; const void *A; zt_dtype a_dt; const void *B; zt_dtype b_dt;
    int M, N, K, trans_a, trans_b; float beta; zt_dtype compute;
} matmul_a;
static int matmul_now(const matmul_a *a, zt_err *err)
{
    return zt_matmul(host_of(a->C), host_of(a->A), a->a_dt, host_of(a->B), a->b_dt, a->M, a->N, a->K, a->trans_a,
                     a->trans_b, a->beta, a->compute, err);
}
RUNNER(matmul)
{
    A(matmul);
    if (matmul_now(a, &replay_err) && replay_rc == ZT_OK)
        replay_rc = ZT_EFAIL;
}
static int emu_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                      int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err)
{
    matmul_a a = {C, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, compute};
    called();
    if (!rec)
        return matmul_now(&a, err);
    record(matmul_run, &a, sizeof a); /* a failure comes back from the launch */
    return ZT_OK;
}

/* token ids are host memory, kept as a pointer: a replay reads them anew */
typedef struct { float *x; const void *wte; zt_dtype wte_dt; const int *tokens; int N, C; } embed_forward_a;
RUNNER(embed_forward)
{
    A(embed_forward);
    zt_embed_forward(host_of(a->x), host_of(a->wte), a->wte_dt, a->tokens, a->N, a->C);
}
static void emu_embed_forward(float *x, const void *wte, zt_dtype wte_dt, const int *tokens, int N, int C)
{
    DEFER(embed_forward, x, wte, wte_dt, tokens, N, C);
}

typedef struct { float *dwte; const float *dx; const int *tokens; int N, C, V; float beta; } embed_backward_a;
RUNNER(embed_backward)
{
    A(embed_backward);
    zt_embed_backward(host_of(a->dwte), host_of(a->dx), a->tokens, a->N, a->C, a->V, a->beta);
}
static void emu_embed_backward(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta)
{
    DEFER(embed_backward, dwte, dx, tokens, N, C, V, beta);
}

typedef struct { void *y; zt_dtype y_dt; float *rstd; const float *x, *w; int N, C; float eps; } rmsnorm_forward_a;
RUNNER(rmsnorm_forward)
{
    A(rmsnorm_forward);
    zt_rmsnorm_forward(host_of(a->y), a->y_dt, host_of(a->rstd), host_of(a->x), host_of(a->w), a->N, a->C, a->eps);
}
static void emu_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                                float eps)
{
    DEFER(rmsnorm_forward, y, y_dt, rstd, x, w, N, C, eps);
}

typedef struct {
    float *dx; uint16_t *dx_bf16; float dx_beta; float *dw; float dw_beta; const float *dy, *x, *w, *rstd; int N, C;
} rmsnorm_backward_a;
RUNNER(rmsnorm_backward)
{
    A(rmsnorm_backward);
    zt_rmsnorm_backward(host_of(a->dx), host_of(a->dx_bf16), a->dx_beta, host_of(a->dw), a->dw_beta, host_of(a->dy),
                        host_of(a->x), host_of(a->w), host_of(a->rstd), a->N, a->C);
}
static void emu_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                                 const float *dy, const float *x, const float *w, const float *rstd, int N, int C)
{
    DEFER(rmsnorm_backward, dx, dx_bf16, dx_beta, dw, dw_beta, dy, x, w, rstd, N, C);
}

typedef struct { float *y; const void *b; zt_dtype b_dt; int N, D; } bias_forward_a;
RUNNER(bias_forward) { A(bias_forward); zt_bias_forward(host_of(a->y), host_of(a->b), a->b_dt, a->N, a->D); }
static void emu_bias_forward(float *y, const void *b, zt_dtype b_dt, int N, int D)
{
    DEFER(bias_forward, y, b, b_dt, N, D);
}

typedef struct { float *db; float beta; const float *dy; int N, D; } bias_backward_a;
RUNNER(bias_backward) { A(bias_backward); zt_bias_backward(host_of(a->db), a->beta, host_of(a->dy), a->N, a->D); }
static void emu_bias_backward(float *db, float beta, const float *dy, int N, int D)
{
    DEFER(bias_backward, db, beta, dy, N, D);
}

typedef struct { float *cos_t, *sin_t; int T, hd; zt_rope_freqs f; } rope_tables_a; /* f: by value */
RUNNER(rope_tables) { A(rope_tables); zt_rope_tables(host_of(a->cos_t), host_of(a->sin_t), a->T, a->hd, &a->f); }
static void emu_rope_tables(float *cos_t, float *sin_t, int T, int hd, const zt_rope_freqs *f)
{
    DEFER(rope_tables, cos_t, sin_t, T, hd, *f);
}

typedef struct { float *qkv; const float *cos_t, *sin_t; int B, T, nh, nkv, hd; } rope_a;
static void rope_forward_run(const void *p_)
{
    const rope_a *a = p_;
    zt_rope_forward(host_of(a->qkv), host_of(a->cos_t), host_of(a->sin_t), a->B, a->T, a->nh, a->nkv, a->hd);
}
static void rope_backward_run(const void *p_)
{
    const rope_a *a = p_;
    zt_rope_backward(host_of(a->qkv), host_of(a->cos_t), host_of(a->sin_t), a->B, a->T, a->nh, a->nkv, a->hd);
}
static void emu_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv, int hd)
{
    rope_a a = {qkv, cos_t, sin_t, B, T, nh, nkv, hd};
    defer(rope_forward_run, &a, sizeof a);
}
static void emu_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int nh, int nkv,
                              int hd)
{
    rope_a a = {dqkv, cos_t, sin_t, B, T, nh, nkv, hd};
    defer(rope_backward_run, &a, sizeof a);
}

/* packed examples (backend.h): the CPU table's position entries, on decoded
 * buffers; the positions stay on the host, as token ids do */
typedef struct { float *qkv; const float *cos_t, *sin_t; const int *pos; int B, T, nh, nkv, hd; } rope_pos_a;
static void rope_forward_pos_run(const void *p_)
{
    const rope_pos_a *a = p_;
    zt_rope_forward_pos(host_of(a->qkv), host_of(a->cos_t), host_of(a->sin_t), a->pos, a->B, a->T, a->nh, a->nkv,
                        a->hd);
}
static void rope_backward_pos_run(const void *p_)
{
    const rope_pos_a *a = p_;
    zt_rope_backward_pos(host_of(a->qkv), host_of(a->cos_t), host_of(a->sin_t), a->pos, a->B, a->T, a->nh, a->nkv,
                         a->hd);
}
static void emu_rope_forward_pos(float *qkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                                 int nh, int nkv, int hd)
{
    rope_pos_a a = {qkv, cos_t, sin_t, pos, B, T, nh, nkv, hd};
    defer(rope_forward_pos_run, &a, sizeof a);
}
static void emu_rope_backward_pos(float *dqkv, const float *cos_t, const float *sin_t, const int *pos, int B, int T,
                                  int nh, int nkv, int hd)
{
    rope_pos_a a = {dqkv, cos_t, sin_t, pos, B, T, nh, nkv, hd};
    defer(rope_backward_pos_run, &a, sizeof a);
}

typedef struct {
    float *out; uint16_t *out_bf16; float *lse; const float *qkv; void *scratch; const int *pos;
    int B, T, nh, nkv, hd, window;
} attention_forward_pos_a;
RUNNER(attention_forward_pos)
{
    A(attention_forward_pos);
    zt_backend_cpu()->attention_forward_pos(host_of(a->out), host_of(a->out_bf16), host_of(a->lse), host_of(a->qkv),
                                            host_of(a->scratch), a->pos, a->B, a->T, a->nh, a->nkv, a->hd, a->window);
}
static void emu_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                      const int *pos, int B, int T, int nh, int nkv, int hd, int window)
{
    DEFER(attention_forward_pos, out, out_bf16, lse, qkv, scratch, pos, B, T, nh, nkv, hd, window);
}

typedef struct {
    float *dqkv; const float *dout, *qkv, *out, *lse; void *scratch; const int *pos; int B, T, nh, nkv, hd, window;
} attention_backward_pos_a;
RUNNER(attention_backward_pos)
{
    A(attention_backward_pos);
    zt_backend_cpu()->attention_backward_pos(host_of(a->dqkv), host_of(a->dout), host_of(a->qkv), host_of(a->out),
                                             host_of(a->lse), host_of(a->scratch), a->pos, a->B, a->T, a->nh, a->nkv,
                                             a->hd, a->window);
}
static void emu_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, void *scratch, const int *pos, int B, int T, int nh, int nkv,
                                       int hd, int window)
{
    DEFER(attention_backward_pos, dqkv, dout, qkv, out, lse, scratch, pos, B, T, nh, nkv, hd, window);
}

/* the CPU table's attention entries, on decoded buffers */
static size_t emu_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd)
{
    called();
    return zt_backend_cpu()->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
}
/* the fast table's: the CUDA fast table's size (backend.h's rule), so that a fast run here
 * allocates, and the model's estimate of a fast run states, what a GPU's does; the CPU
 * kernels use its head (the rule is never below theirs) */
static size_t emu_fast_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd)
{
    called();
    return zt_attention_fast_scratch_bytes(B, T, nh, nkv, hd, opd, NULL);
}

typedef struct {
    float *out; uint16_t *out_bf16; float *lse; const float *qkv; void *scratch; int B, T, nh, nkv, hd, window;
} attention_forward_a;
RUNNER(attention_forward)
{
    A(attention_forward);
    zt_backend_cpu()->attention_forward(host_of(a->out), host_of(a->out_bf16), host_of(a->lse), host_of(a->qkv),
                                        host_of(a->scratch), a->B, a->T, a->nh, a->nkv, a->hd, a->window);
}
static void emu_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                  int B, int T, int nh, int nkv, int hd, int window)
{
    DEFER(attention_forward, out, out_bf16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
}

typedef struct {
    float *dqkv; const float *dout, *qkv, *out, *lse; void *scratch; int B, T, nh, nkv, hd, window;
} attention_backward_a;
RUNNER(attention_backward)
{
    A(attention_backward);
    zt_backend_cpu()->attention_backward(host_of(a->dqkv), host_of(a->dout), host_of(a->qkv), host_of(a->out),
                                         host_of(a->lse), host_of(a->scratch), a->B, a->T, a->nh, a->nkv, a->hd,
                                         a->window);
}
static void emu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd, int window)
{
    DEFER(attention_backward, dqkv, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
}

static size_t emu_attention_cache_scratch_bytes(int cap, int threads)
{
    called();
    return zt_backend_cpu()->attention_cache_scratch_bytes(cap, threads);
}

/* generation's entry: no step captures it */
static void emu_attention_cache_forward(float *out, const float *q, size_t q_stride, const float *k_cache,
                                        const float *v_cache, int cap, int pos0, int n, int nh, int nkv, int hd,
                                        int window, float *scratch, int threads)
{
    zt_emu_refused("attention_cache_forward");
    zt_attention_cache_forward(host_of(out), host_of(q), q_stride, host_of(k_cache), host_of(v_cache), cap, pos0, n,
                               nh, nkv, hd, window, host_of(scratch), threads);
}

typedef struct { void *h; zt_dtype h_dt; const float *gu; int N, F; } swiglu_forward_a;
RUNNER(swiglu_forward)
{
    A(swiglu_forward);
    zt_swiglu_forward(host_of(a->h), a->h_dt, host_of(a->gu), a->N, a->F);
}
static void emu_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    DEFER(swiglu_forward, h, h_dt, gu, N, F);
}

typedef struct { void *dgu; zt_dtype dgu_dt; const float *dh, *gu; int N, F; } swiglu_backward_a;
RUNNER(swiglu_backward)
{
    A(swiglu_backward);
    zt_swiglu_backward(host_of(a->dgu), a->dgu_dt, host_of(a->dh), host_of(a->gu), a->N, a->F);
}
static void emu_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    DEFER(swiglu_backward, dgu, dgu_dt, dh, gu, N, F);
}

typedef struct { float *dst; const float *src; int rows, cols; } transpose_a;
RUNNER(transpose) { A(transpose); zt_transpose_f32(host_of(a->dst), host_of(a->src), a->rows, a->cols); }
static void emu_transpose(float *dst, const float *src, int rows, int cols) { DEFER(transpose, dst, src, rows, cols); }

static double emu_xent(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                       float grad_scale)
{
    zt_emu_refused("xent (returns the loss to the host)");
    zt_emu_waited();
    return zt_xent_forward_backward(host_of(dlogits), host_of(dlogits_bf16), host_of(logits), targets, N, V,
                                    grad_scale);
}

/* the fused entries: the host's compositions (fused.h), deferred as the kernels are
 * (a capture holds them); the loss stays in the device's buffer, so lmhead_xent waits
 * for nothing.  The two that can fail report it as matmul does: at once, or from the
 * launch that replays them. */
typedef struct {
    float *x;
    const void *delta;
    zt_dtype delta_dt;
    void *y;
    zt_dtype y_dt;
    float *rstd;
    const float *w;
    int N, C;
    float eps;
} rmsnorm_residual_forward_a;
RUNNER(rmsnorm_residual_forward)
{
    A(rmsnorm_residual_forward);
    zt_rmsnorm_residual_forward(host_of(a->x), host_of(a->delta), a->delta_dt, host_of(a->y), a->y_dt,
                                host_of(a->rstd), host_of(a->w), a->N, a->C, a->eps);
}
static void emu_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y,
                                         zt_dtype y_dt, float *rstd, const float *w, int N, int C, float eps)
{
    DEFER(rmsnorm_residual_forward, x, delta, delta_dt, y, y_dt, rstd, w, N, C, eps);
}

typedef struct {
    void *D;
    zt_dtype d_dt;
    const void *residual, *A;
    zt_dtype a_dt;
    const void *B;
    zt_dtype b_dt;
    int M, N, K, trans_a, trans_b;
    zt_dtype compute;
} matmul_out_a;
static int matmul_out_now(const matmul_out_a *a, zt_err *err)
{
    return zt_matmul_out(host_of(a->D), a->d_dt, host_of(a->residual), host_of(a->A), a->a_dt, host_of(a->B),
                         a->b_dt, a->M, a->N, a->K, a->trans_a, a->trans_b, a->compute, err);
}
RUNNER(matmul_out)
{
    A(matmul_out);
    if (matmul_out_now(a, &replay_err) && replay_rc == ZT_OK)
        replay_rc = ZT_EFAIL;
}
static int emu_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt,
                          const void *B, zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b,
                          zt_dtype compute, zt_err *err)
{
    matmul_out_a a = {D, d_dt, residual, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, compute};
    called();
    if (!rec)
        return matmul_out_now(&a, err);
    record(matmul_out_run, &a, sizeof a);
    return ZT_OK;
}

/* targets are host memory, kept as a pointer: a replay reads them anew; scale_src is
 * the device's, read when the entry runs (a replay takes the step's own scale) */
typedef struct {
    double *loss_sum;
    float *dx, *dw;
    float dw_beta;
    const void *x;
    zt_dtype x_dt;
    const void *w;
    zt_dtype w_dt;
    const int *targets;
    int N, C, V;
    float grad_scale;
    const zt_step_scalars *scale_src;
    zt_dtype compute;
    int chunk_rows;
} lmhead_xent_a;
static int lmhead_xent_now(const lmhead_xent_a *a, zt_err *err)
{
    return zt_lmhead_xent(host_of(a->loss_sum), host_of(a->dx), host_of(a->dw), a->dw_beta, host_of(a->x),
                          a->x_dt, host_of(a->w), a->w_dt, a->targets, a->N, a->C, a->V, a->grad_scale,
                          host_of(a->scale_src), a->compute, a->chunk_rows, err);
}
RUNNER(lmhead_xent)
{
    A(lmhead_xent);
    if (lmhead_xent_now(a, &replay_err) && replay_rc == ZT_OK)
        replay_rc = ZT_EFAIL;
}
static int emu_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x,
                           zt_dtype x_dt, const void *w, zt_dtype w_dt, const int *targets, int N, int C,
                           int V, float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute,
                           int chunk_rows, zt_err *err)
{
    lmhead_xent_a a = {loss_sum, dx, dw, dw_beta, x,          x_dt,      w,       w_dt,
                       targets,  N,  C,  V,       grad_scale, scale_src, compute, chunk_rows};
    called();
    if (!rec)
        return lmhead_xent_now(&a, err);
    record(lmhead_xent_run, &a, sizeof a);
    return ZT_OK;
}

/* without an audit it waits for nothing: s is copied at capture, as a kernel's arguments are */
typedef struct {
    void *p, *m, *v;
    const void *g;
    void *comp;
    zt_dtype dt;
    size_t n;
    zt_adamw_step s;
    void *cast;
    zt_dtype cast_dt;
} adamw_step_a;
RUNNER(adamw_step)
{
    A(adamw_step);
    zt_adamw_step_shard(host_of(a->p), host_of(a->m), host_of(a->v), host_of(a->g), host_of(a->comp), a->dt,
                        a->n, &a->s, host_of(a->cast), a->cast_dt, NULL);
}
static void emu_adamw_step(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                           const zt_adamw_step *s, void *cast, zt_dtype cast_dt, zt_adamw_audit *audit)
{
    if (!audit) {
        DEFER(adamw_step, p, m, v, g, comp, dt, n, *s, cast, cast_dt);
        return;
    }
    zt_emu_refused("adamw_step with an audit (returns it to the host)");
    zt_emu_waited();
    zt_adamw_step_shard(host_of(p), host_of(m), host_of(v), host_of(g), host_of(comp), dt, n, s, host_of(cast), cast_dt,
                        audit);
}

static double emu_sumsq(const void *x, zt_dtype dt, size_t n)
{
    zt_emu_refused("sumsq (returns the sum to the host)");
    zt_emu_waited();
    return zt_sumsq(host_of(x), dt, n);
}

typedef struct { void *acc; zt_dtype acc_dt; const void *x; zt_dtype x_dt; size_t n; } accumulate_a;
RUNNER(accumulate) { A(accumulate); zt_accumulate(host_of(a->acc), a->acc_dt, host_of(a->x), a->x_dt, a->n); }
static void emu_accumulate(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n)
{
    DEFER(accumulate, acc, acc_dt, x, x_dt, n);
}

typedef struct { float *acc; int round_acc; const float *x; size_t n; } accumulate_bf16_rounded_a;
RUNNER(accumulate_bf16_rounded)
{
    A(accumulate_bf16_rounded);
    zt_accumulate_bf16_rounded(host_of(a->acc), a->round_acc, host_of(a->x), a->n);
}
static void emu_accumulate_bf16_rounded(float *acc, int round_acc, const float *x, size_t n)
{
    DEFER(accumulate_bf16_rounded, acc, round_acc, x, n);
}

typedef struct { float *y; size_t ldy; float a; const float *x; size_t ldx; int rows, cols; } scale_add_a;
RUNNER(scale_add) { A(scale_add); zt_scale_add(host_of(a->y), a->ldy, a->a, host_of(a->x), a->ldx, a->rows, a->cols); }
static void emu_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols)
{
    DEFER(scale_add, y, ldy, a, x, ldx, rows, cols);
}

typedef struct { float *x; size_t n; } round_bf16_a;
RUNNER(round_bf16) { A(round_bf16); zt_round_bf16_inplace(host_of(a->x), a->n, 0); }
static double emu_round_bf16(float *x, size_t n, int want_sumsq)
{
    if (!want_sumsq) {
        DEFER(round_bf16, x, n);
        return 0.0;
    }
    zt_emu_refused("round_bf16 with its sum (returns it to the host)");
    zt_emu_waited();
    return zt_round_bf16_inplace(host_of(x), n, want_sumsq);
}

/* the asynchronous step's entries: their numbers stay in the device's buffers, no wait */
typedef struct { double *dst; const void *x; zt_dtype dt; size_t n; } sumsq_into_a;
RUNNER(sumsq_into) { A(sumsq_into); *(double *)host_of(a->dst) = zt_sumsq(host_of(a->x), a->dt, a->n); }
static void emu_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n) { DEFER(sumsq_into, dst, x, dt, n); }

typedef struct { double *dst; const float *x; size_t n; } sumsq_bf16_into_a;
RUNNER(sumsq_bf16_into) { A(sumsq_bf16_into); *(double *)host_of(a->dst) = zt_sumsq_bf16(host_of(a->x), a->n); }
static void emu_sumsq_bf16_into(double *dst, const float *x, size_t n) { DEFER(sumsq_bf16_into, dst, x, n); }

/* the gradient scale from the device's scalars as the kernel runs (a replay: the step's own) */
typedef struct {
    float *dlogits; uint16_t *dlogits_bf16; const float *logits; const int *targets; int N, V; float grad_scale;
    const zt_step_scalars *scale_src;
    double *loss_sum;
} xent_into_a;
RUNNER(xent_into)
{
    A(xent_into);
    const float gs = a->scale_src ? zt_step_grad_scale(host_of(a->scale_src)) : a->grad_scale;
    const double l = zt_xent_forward_backward(host_of(a->dlogits), host_of(a->dlogits_bf16), host_of(a->logits),
                                              a->targets, a->N, a->V, gs);
    if (a->loss_sum) /* NULL: the gradient only */
        *(double *)host_of(a->loss_sum) += l;
}
static void emu_xent_into(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets,
                          int N, int V, float grad_scale, const zt_step_scalars *scale_src, double *loss_sum)
{
    DEFER(xent_into, dlogits, dlogits_bf16, logits, targets, N, V, grad_scale, scale_src, loss_sum);
}

typedef struct {
    zt_step_scalars *sc; const double *unit_sumsq; int nunits; double max_grad_norm, grad_unscale;
} step_verdict_a;
RUNNER(step_verdict)
{
    A(step_verdict);
    /* the schedule's address in the struct is a buffer of this table's, as a GPU's
     * device pointer is: the verdict reads it through host_of, as a GPU's thread reads
     * device memory, and the struct keeps the handle */
    zt_step_scalars *sc = host_of(a->sc);
    const zt_step_input *sched = sc->sched;
    sc->sched = host_of(sched);
    zt_step_verdict(sc, host_of(a->unit_sumsq), a->nunits, a->max_grad_norm, a->grad_unscale);
    sc->sched = sched;
}
static void emu_step_verdict(zt_step_scalars *sc, const double *unit_sumsq, int nunits, double max_grad_norm,
                             double grad_unscale)
{
    DEFER(step_verdict, sc, unit_sumsq, nunits, max_grad_norm, grad_unscale);
}

/* s is copied at capture (a GPU passes it as the kernel's arguments) */
typedef struct {
    void *p, *m, *v; const void *g; void *comp; zt_dtype dt; size_t n; const zt_adamw_seg *segs; int nsegs;
    zt_adamw_step s; zt_step_scalars *sc; void *cast; zt_dtype cast_dt;
} adamw_unit_a;
RUNNER(adamw_unit)
{
    A(adamw_unit);
    zt_adamw_step_unit(host_of(a->p), host_of(a->m), host_of(a->v), host_of(a->g), host_of(a->comp), a->dt, a->n,
                       host_of(a->segs), a->nsegs, &a->s, host_of(a->sc), host_of(a->cast), a->cast_dt);
}
static void emu_adamw_unit(void *p, void *m, void *v, const void *g, void *comp, zt_dtype dt, size_t n,
                           const zt_adamw_seg *segs, int nsegs, const zt_adamw_step *s, zt_step_scalars *sc,
                           void *cast, zt_dtype cast_dt)
{
    DEFER(adamw_unit, p, m, v, g, comp, dt, n, segs, nsegs, *s, sc, cast, cast_dt);
}

/* the bf16 activations of fast mode (act16.h): the host's reference, in both tables,
 * deferred like every kernel (recorded inside a capture) */
typedef struct {
    uint16_t *y16;
    const void *x;
    zt_dtype x_dt;
    const void *w;
    zt_dtype w_dt;
    const void *b;
    zt_dtype b_dt;
    int N, out, in;
    zt_dtype compute;
} linear_act16_a;
static int linear_act16_now(const linear_act16_a *a, zt_err *err)
{
    return zt_linear_act16(host_of(a->y16), host_of(a->x), a->x_dt, host_of(a->w), a->w_dt, host_of(a->b), a->b_dt,
                           a->N, a->out, a->in, a->compute, err);
}
RUNNER(linear_act16)
{
    A(linear_act16);
    if (linear_act16_now(a, &replay_err) && replay_rc == ZT_OK)
        replay_rc = ZT_EFAIL;
}
static int emu_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                            zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    linear_act16_a a = {y16, x, x_dt, w, w_dt, b, b_dt, N, out, in, compute};
    called();
    if (!rec)
        return linear_act16_now(&a, err);
    record(linear_act16_run, &a, sizeof a);
    return ZT_OK;
}

typedef struct {
    uint16_t *out16;
    float *lse;
    const uint16_t *qkv16;
    const float *cos_t, *sin_t;
    void *scratch;
    int B, T, nh, nkv, hd, window;
} attention_forward_act16_a;
RUNNER(attention_forward_act16)
{
    A(attention_forward_act16);
    zt_attention_forward_act16(host_of(a->out16), host_of(a->lse), host_of(a->qkv16), host_of(a->cos_t),
                               host_of(a->sin_t), host_of(a->scratch), a->B, a->T, a->nh, a->nkv, a->hd, a->window);
}
static void emu_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                        const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                        int window)
{
    DEFER(attention_forward_act16, out16, lse, qkv16, cos_t, sin_t, scratch, B, T, nh, nkv, hd, window);
}

typedef struct {
    float *dqkv;
    uint16_t *dqkv16;
    const float *dout;
    const uint16_t *qkv16, *out16;
    const float *lse, *cos_t, *sin_t;
    void *scratch;
    int B, T, nh, nkv, hd, window;
} attention_backward_act16_a;
RUNNER(attention_backward_act16)
{
    A(attention_backward_act16);
    zt_attention_backward_act16(host_of(a->dqkv), host_of(a->dqkv16), host_of(a->dout), host_of(a->qkv16),
                                host_of(a->out16), host_of(a->lse), host_of(a->cos_t), host_of(a->sin_t),
                                host_of(a->scratch), a->B, a->T, a->nh, a->nkv, a->hd, a->window);
}
static void emu_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                         const uint16_t *out16, const float *lse, const float *cos_t,
                                         const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                         int window)
{
    DEFER(attention_backward_act16, dqkv, dqkv16, dout, qkv16, out16, lse, cos_t, sin_t, scratch, B, T, nh, nkv, hd,
          window);
}

typedef struct { uint16_t *h16; const uint16_t *gu16; int N, F; } swiglu_forward_act16_a;
RUNNER(swiglu_forward_act16)
{
    A(swiglu_forward_act16);
    zt_swiglu_forward_act16(host_of(a->h16), host_of(a->gu16), a->N, a->F);
}
static void emu_swiglu_forward_act16(uint16_t *h16, const uint16_t *gu16, int N, int F)
{
    DEFER(swiglu_forward_act16, h16, gu16, N, F);
}

typedef struct { uint16_t *dgu16; const float *dh; const uint16_t *gu16; int N, F; } swiglu_backward_act16_a;
RUNNER(swiglu_backward_act16)
{
    A(swiglu_backward_act16);
    zt_swiglu_backward_act16(host_of(a->dgu16), host_of(a->dh), host_of(a->gu16), a->N, a->F);
}
static void emu_swiglu_backward_act16(uint16_t *dgu16, const float *dh, const uint16_t *gu16, int N, int F)
{
    DEFER(swiglu_backward_act16, dgu16, dh, gu16, N, F);
}


/* ---- graphs ----------------------------------------------------------------------- */

static void graph_free_now(zt_graph *g)
{
    if (!g)
        return;
    zt_free(ZT_MEM_OTHER, g->call, g->cap_calls * sizeof *g->call);
    zt_free(ZT_MEM_OTHER, g->arena, g->cap_arena);
    zt_free(ZT_MEM_OTHER, g, sizeof *g);
}

static int emu_graph_begin(zt_err *err)
{
    called();
    if (rec)
        return zt_fail(err, ZT_EFAIL, "emu: graph_begin inside a capture");
    if (!(rec = zt_alloc(ZT_MEM_OTHER, sizeof *rec)))
        return zt_fail(err, ZT_EFAIL, "emu: out of memory for a graph");
    rec_refused = NULL;
    rec_oom = 0;
    return ZT_OK;
}

static int emu_graph_end(zt_graph **graph, zt_err *err)
{
    called();
    *graph = NULL;
    if (!rec)
        return zt_fail(err, ZT_EFAIL, "emu: graph_end without graph_begin");
    zt_graph *g = rec;
    rec = NULL;
    if (rec_refused || rec_oom) {
        graph_free_now(g);
        return rec_oom ? zt_fail(err, ZT_EFAIL, "emu: out of memory for a graph")
                       : zt_fail(err, ZT_EFAIL, "a captured step called %s, which waits for the device or allocates",
                                 rec_refused);
    }
    *graph = g;
    return ZT_OK;
}

/* the recorded calls in their order, as a GPU replays a graph's nodes */
static int emu_graph_launch(const zt_graph *g, zt_err *err)
{
    called();
    replay_rc = ZT_OK;
    for (size_t i = 0; i < g->ncalls; i++)
        g->call[i].run(g->arena + g->call[i].off);
    if (replay_rc) {
        *err = replay_err;
        return replay_rc;
    }
    return ZT_OK;
}

static void emu_graph_free(zt_graph *g)
{
    called();
    graph_free_now(g);
}

/* ---- the emulated NCCL (backend.h, queue_host) ------------------------------------ */

/* deferred as a kernel is: the comm layer's collective runs in queue order, now or at
 * each launch of the graph that captured it */
static void emu_queue_host(void (*run)(const void *args), const void *args, size_t bytes) { defer(run, args, bytes); }
static void *emu_host_address(const void *buf) { return host_of(buf); }

#define EMU_ENTRY(e) .e = emu_##e,
static const zt_backend emu = {
    .name = "emu",
    .kernels = ZT_KERNELS_EXACT,
    .host_visible = 0,
    ZT_BACKEND_ENTRIES(EMU_ENTRY)
    .queue_host = emu_queue_host,
    .host_address = emu_host_address,
    /* exact kernels only: a captured fast step would replay the positions of the
     * last micro-batch filled (one host buffer), so the fast table has none */
    .rope_forward_pos = emu_rope_forward_pos,
    .rope_backward_pos = emu_rope_backward_pos,
    .attention_forward_pos = emu_attention_forward_pos,
    .attention_backward_pos = emu_attention_backward_pos,
    .scale_add = emu_scale_add,
};

/* fast mode: the same kernels (a GPU's fast variants have no CPU twins to run), so
 * the asynchronous step's host logic runs here with the CPU's numbers; the model's
 * fast path (bf16 activations) calls the _act16 entries, the host's reference */
static const zt_backend emu_fast = {
    .name = "emu",
    .kernels = ZT_KERNELS_FAST,
    .host_visible = 0,
    ZT_BACKEND_ENTRIES(EMU_ENTRY)
    .queue_host = emu_queue_host,
    .host_address = emu_host_address,
    .scale_add = emu_scale_add, /* LoRA's, as the CUDA fast table keeps the exact one's */
};

/* emu_fast with its own attention scratch size: set here, not in the initializer,
 * where it would override ZT_BACKEND_ENTRIES' entry (-Woverride-init) */
static zt_backend emu_fast_table;
static void emu_fast_make(void)
{
    emu_fast_table = emu_fast;
    emu_fast_table.attention_scratch_bytes = emu_fast_attention_scratch_bytes;
}

const zt_backend *zt_backend_emu(void) { return &emu; }
const zt_backend *zt_backend_emu_fast(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, emu_fast_make);
    return &emu_fast_table;
}
