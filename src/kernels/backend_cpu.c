/* backend_cpu.c — the host backend: the table of backend.h over the OpenMP
 * kernels and oneDNN's products.  Most entries are the kernels themselves; the
 * few adapters below fit a kernel to the table's shape. */
#include <string.h>

#include "act16.h"
#include "backend.h"
#include "fused.h"
#include "kernels.h"
#include "matmul.h"
#include "reductions.h"

static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_zero(void *dst, size_t bytes) { memset(dst, 0, bytes); }

/* The host is the device: its buffers are host memory, so moving bytes is a copy
 * and there is never anything to wait for. */
static void cpu_sync(void) {}
static void *cpu_stream(void) { return NULL; }

/* The bf16-operand attention (attention16.c) needs K/V scratch and serves the
 * head sizes it supports; the fp32 attention serves the rest. */
static size_t cpu_attention_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd)
{
    (void)nh;
    return opd == ZT_BF16 && zt_attention16_supported(hd) ? zt_attention16_pack_bytes(B, T, nkv, hd) : 0;
}

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t zt_attention_fast_scratch_bytes(int B, int T, int nh, int nkv, int hd, zt_dtype opd, zt_fast_scratch_at *at)
{
    const size_t rows = (size_t)B * nh * T, delta = align256(rows * sizeof(float));
    const size_t q16 = align256(rows * hd * sizeof(uint16_t)), do16 = q16;
    const size_t partials = nh > nkv ? 2 * rows * hd * sizeof(float) : 0;
    const size_t k16 = (size_t)B * nkv * T * hd * sizeof(uint16_t);
    const size_t fast = delta + q16 + do16 + (partials > k16 ? partials : k16);
    if (at)
        *at = (zt_fast_scratch_at){delta, delta + q16, delta + q16 + do16};
    const size_t pack = cpu_attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    if (!pack)
        return 0;
    return pack > fast ? pack : fast;
}

static void cpu_attention_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                  int B, int T, int nh, int nkv, int hd, int window)
{
    if (scratch)
        zt_attention16_forward(out, out_bf16, lse, qkv, scratch, B, T, nh, nkv, hd, window);
    else
        zt_attention_forward_copy16(out, out_bf16, lse, qkv, B, T, nh, nkv, hd, window);
}

static void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, void *scratch, int B, int T, int nh, int nkv, int hd,
                                   int window)
{
    if (scratch)
        zt_attention16_backward(dqkv, dout, qkv, out, lse, scratch, B, T, nh, nkv, hd, window);
    else
        zt_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window);
}

/* Packed examples (backend.h): the same kernels with positions. */
static void cpu_attention_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv, void *scratch,
                                      const int *pos, int B, int T, int nh, int nkv, int hd, int window)
{
    if (scratch)
        zt_attention16_forward_pos(out, out_bf16, lse, qkv, scratch, pos, B, T, nh, nkv, hd, window);
    else
        zt_attention_forward_pos(out, out_bf16, lse, qkv, pos, B, T, nh, nkv, hd, window);
}

static void cpu_attention_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, void *scratch, const int *pos, int B, int T, int nh,
                                       int nkv, int hd, int window)
{
    if (scratch)
        zt_attention16_backward_pos(dqkv, dout, qkv, out, lse, scratch, pos, B, T, nh, nkv, hd, window);
    else
        zt_attention_backward_pos(dqkv, dout, qkv, out, lse, pos, B, T, nh, nkv, hd, window);
}

/* The asynchronous step's entries (backend.h): on the host, "device memory" is
 * host memory, so they are the synchronous kernels writing where they are told. */
static void cpu_sumsq_into(double *dst, const void *x, zt_dtype dt, size_t n) { *dst = zt_sumsq(x, dt, n); }

static void cpu_sumsq_bf16_into(double *dst, const float *x, size_t n) { *dst = zt_sumsq_bf16(x, n); }

static void cpu_xent_into(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets,
                          int N, int V, float grad_scale, const zt_step_scalars *scale_src, double *loss_sum)
{
    if (scale_src) /* host memory: the host forms it */
        grad_scale = zt_step_grad_scale(scale_src);
    const double l = zt_xent_forward_backward(dlogits, dlogits_bf16, logits, targets, N, V, grad_scale);
    if (loss_sum) /* NULL: the gradient only (an lm-head chunk without a loss wanted) */
        *loss_sum += l;
}

static size_t cpu_attention_cache_scratch_bytes(int cap, int threads)
{
    return zt_attention_cache_scratch_floats(cap, threads) * sizeof(float);
}

/* The host has no graphs: its entries run as they are called (backend.h). */
static int cpu_graph_begin(zt_err *err)
{
    return zt_fail(err, ZT_EINPUT, "the cpu device has no graphs: its kernels run as they are called");
}

static int cpu_graph_end(zt_graph **graph, zt_err *err)
{
    *graph = NULL;
    return cpu_graph_begin(err);
}

static int cpu_graph_launch(const zt_graph *graph, zt_err *err)
{
    (void)graph;
    return cpu_graph_begin(err);
}

static void cpu_graph_free(zt_graph *graph) { (void)graph; }

/* The entries that are a kernel as it is, under the table's naming rule
 * (ZT_BACKEND_ENTRIES: entry e is cpu_e). */
#define cpu_alloc zt_alloc
#define cpu_free zt_free
#define cpu_convert zt_convert
#define cpu_to_host cpu_copy
#define cpu_to_device cpu_copy
#define cpu_to_host_async cpu_copy /* the host copies at once */
#define cpu_to_device_async cpu_copy
#define cpu_copy_join cpu_sync /* one queue: nothing to order */
#define cpu_copy_wait cpu_sync
static long cpu_copy_record(void) { return 0; } /* every copy has landed already */
static void cpu_copy_wait_marker(long marker) { (void)marker; }
#define cpu_upload cpu_copy /* host memory: the copy is the upload */
#define cpu_host_alloc zt_alloc
#define cpu_host_free zt_free
#define cpu_matmul zt_matmul
#define cpu_embed_forward zt_embed_forward
#define cpu_embed_backward zt_embed_backward
#define cpu_rmsnorm_forward zt_rmsnorm_forward
#define cpu_rmsnorm_backward zt_rmsnorm_backward
#define cpu_bias_forward zt_bias_forward
#define cpu_bias_backward zt_bias_backward
#define cpu_rope_tables zt_rope_tables
#define cpu_rope_forward zt_rope_forward
#define cpu_rope_backward zt_rope_backward
#define cpu_attention_cache_forward zt_attention_cache_forward
#define cpu_swiglu_forward zt_swiglu_forward
#define cpu_swiglu_backward zt_swiglu_backward
#define cpu_transpose zt_transpose_f32
#define cpu_xent zt_xent_forward_backward
#define cpu_rmsnorm_residual_forward zt_rmsnorm_residual_forward
#define cpu_matmul_out zt_matmul_out
#define cpu_lmhead_xent zt_lmhead_xent
#define cpu_adamw_step zt_adamw_step_shard
#define cpu_sumsq zt_sumsq
#define cpu_accumulate zt_accumulate
#define cpu_accumulate_bf16_rounded zt_accumulate_bf16_rounded
#define cpu_round_bf16 zt_round_bf16_inplace
#define cpu_step_verdict zt_step_verdict
#define cpu_adamw_unit zt_adamw_step_unit
#define cpu_linear_act16 zt_linear_act16 /* the model calls these in fast mode only, */
/* which the CPU lacks: they serve the tests */
#define cpu_attention_forward_act16 zt_attention_forward_act16
#define cpu_attention_backward_act16 zt_attention_backward_act16
#define cpu_swiglu_forward_act16 zt_swiglu_forward_act16
#define cpu_swiglu_backward_act16 zt_swiglu_backward_act16

#define CPU_ENTRY(e) .e = cpu_##e,
static const zt_backend cpu = {
    .name = "cpu",
    .host_visible = 1,
    .kernels = ZT_KERNELS_EXACT,
    ZT_BACKEND_ENTRIES(CPU_ENTRY)
    .rope_forward_pos = zt_rope_forward_pos,
    .rope_backward_pos = zt_rope_backward_pos,
    .attention_forward_pos = cpu_attention_forward_pos,
    .attention_backward_pos = cpu_attention_backward_pos,
    .scale_add = zt_scale_add,
};

const zt_backend *zt_backend_cpu(void) { return &cpu; }
