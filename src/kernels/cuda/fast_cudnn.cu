/* fast_cudnn.cu — the fast table's attention_forward_act16 / attention_backward_act16:
 * cuDNN's fused flash attention (cudnn_attention.h) where attention_choice.h takes it,
 * the own tensor-core kernels (fast_attention.cu) everywhere else.
 *
 * The choice is made once per shape (B, T, heads, head size, window) and kept for the
 * run, with cuDNN's two graphs built at that moment, so a forward and its backward
 * always run the same kernels: the own kernels' lse and cuDNN's stats (both the
 * natural-log log-sum-exp of each query's scaled scores, but not the same bits) never
 * meet.  The plan line asks first (zt_cuda_attention_plan), outside any capture; a
 * shape met first inside a graph capture, where nothing may be built or allocated,
 * takes the own kernels.
 *
 * The model's entries read q and k before RoPE.  cuDNN's attention has no rotation on
 * load, so the cuDNN path rotates q and k first, into bf16 scratch (each pair widened,
 * zt_rope_rotate in fp32, rounded once: the operand the own kernels stage), and
 * rotates dq and dk back after its backward (the transpose rotation) as it writes
 * them; dv goes straight where it belongs.  dout arrives in fp32 and is rounded to
 * bf16 for cuDNN, as the own kernels round it when they stage it.  Scratch: the
 * backend's (zt_cu_scratch, accounted as ZT_MEM_OTHER like the exact entries' widened
 * copies), grown at the first, uncaptured, call.
 *
 * Without ZT_HAVE_CUDNN (make cuda found no cuDNN; tools/cuda_emu) the entries are the
 * own kernels and the plan line says "built without cuDNN". */
#include "common.cuh"
#include "fast.h"

extern "C" {
#include "../attention_choice.h"
#include "../rope_freq.h"
}

#ifdef ZT_HAVE_CUDNN
#include "cudnn_attention.h"
#endif

#include <string.h>

#define CACHE_SHAPES 16

static struct attn_shape {
    int B, T, nh, nkv, hd, window;
    int cudnn;
    char why[160];
#ifdef ZT_HAVE_CUDNN
    zt_cudnn_sdpa *g;
    size_t ws_fwd, ws_bwd;
#endif
} shapes[CACHE_SHAPES];
static int nshapes;

/* What the choice needs to know of this run beside the shape. */
static void fill_query(zt_attention_query *q)
{
    zt_err err;
    memset(q, 0, sizeof *q);
    if (zt_attention_setting(&q->forced_own, &err)) /* refused at set-up (train_open.c); own here */
        q->forced_own = 1;
#ifdef ZT_HAVE_CUDNN
    q->built = 1;
#endif
#ifdef ZT_CUDA_EMU
    q->device = "cuda_emu";
#else
    ZT_CU(cudaDeviceGetAttribute(&q->cc_major, cudaDevAttrComputeCapabilityMajor, zt_cu.device));
    ZT_CU(cudaDeviceGetAttribute(&q->cc_minor, cudaDevAttrComputeCapabilityMinor, zt_cu.device));
#endif
#ifdef ZT_HAVE_CUDNN
    static char load_why[256];
    if (q->built && !q->forced_own && q->cc_major == 9 && !zt_cudnn_load(&q->version, load_why, sizeof load_why))
        q->load_error = load_why;
#endif
}

/* The shape's choice, made (and cuDNN's graphs built) at its first call. */
static struct attn_shape *shape_of(int B, int T, int nh, int nkv, int hd, int window)
{
    for (int i = 0; i < nshapes; i++) {
        struct attn_shape *s = &shapes[i];
        if (s->B == B && s->T == T && s->nh == nh && s->nkv == nkv && s->hd == hd && s->window == window)
            return s;
    }
    if (nshapes == CACHE_SHAPES) { /* more shapes than a run has (evaluation's last batch adds one): */
        static struct attn_shape beyond; /* the own kernels for the rest, forward and backward alike */
        snprintf(beyond.why, sizeof beyond.why, "more than %d attention shapes in the run", CACHE_SHAPES);
        return &beyond;
    }
    struct attn_shape *s = &shapes[nshapes++];
    memset(s, 0, sizeof *s);
    s->B = B, s->T = T, s->nh = nh, s->nkv = nkv, s->hd = hd, s->window = window;
    zt_attention_query q;
    fill_query(&q);
    q.hd = hd, q.window = window, q.nh = nh, q.nkv = nkv;
    s->cudnn = zt_attention_choose(&q, s->why, sizeof s->why);
    if (s->cudnn && zt_cu.capturing) {
        s->cudnn = 0;
        snprintf(s->why, sizeof s->why, "shape first met inside a graph capture");
    }
#ifdef ZT_HAVE_CUDNN
    if (s->cudnn && !(s->g = zt_cudnn_sdpa_build(zt_cu.stream, B, T, nh, nkv, hd, &s->ws_fwd, &s->ws_bwd, s->why,
                                                 sizeof s->why)))
        s->cudnn = 0;
#endif
    return s;
}

void zt_cuda_attention_plan(int B, int T, int nh, int nkv, int hd, int window, char *out, size_t cap)
{
    const struct attn_shape *s = shape_of(B, T, nh, nkv, hd, window);
    zt_attention_describe(s->cudnn, s->why, out, cap);
}

#ifdef ZT_HAVE_CUDNN
/* q and k of bf16 qkv rows (B T, W) rotated by RoPE into rows of (nh + nkv) hd; cos_t
 * NULL: copied as they are.  One thread per pair (i, i + hd/2) of a head. */
__global__ void cudnn_rope_in_kernel(uint16_t *qk, const uint16_t *qkv, const float *cos_t, const float *sin_t,
                                     size_t rows, int T, int heads, int hd, int W)
{
    const int H = hd / 2;
    const size_t n = rows * heads * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int p = (int)(i % H), h = (int)(i / H % heads);
        const size_t r = i / H / heads;
        const uint16_t *x = qkv + r * W + (size_t)h * hd;
        uint16_t *y = qk + r * (size_t)heads * hd + (size_t)h * hd;
        if (!cos_t) {
            y[p] = x[p], y[p + H] = x[p + H];
            continue;
        }
        const size_t t = (r % T) * H + p;
        const zt_rope_pair o = zt_rope_rotate(zt_bf16_to_f32(x[p]), zt_bf16_to_f32(x[p + H]), cos_t[t], sin_t[t]);
        y[p] = zt_f32_to_bf16(o.y1), y[p + H] = zt_f32_to_bf16(o.y2);
    }
}

__global__ void cudnn_round_kernel(uint16_t *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = zt_f32_to_bf16(x[i]);
}

/* cuDNN's bf16 gradient rows g (B T, W) to the entry's outputs: dq and dk rotated back
 * (sin negated) into dqkv (fp32, or NULL) and dqkv16 (bf16, or NULL; may be g itself),
 * dv widened into dqkv and copied into dqkv16 when that is not g.  One thread per pair
 * of a head of any of the nh + 2 nkv heads. */
__global__ void cudnn_rope_out_kernel(float *dqkv, uint16_t *dqkv16, const uint16_t *g, const float *cos_t,
                                      const float *sin_t, size_t rows, int T, int nqk, int heads, int hd)
{
    const int H = hd / 2, W = heads * hd;
    const size_t n = rows * heads * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int p = (int)(i % H), h = (int)(i / H % heads);
        const size_t r = i / H / heads, a = r * W + (size_t)h * hd + p, b = a + H;
        float y1 = zt_bf16_to_f32(g[a]), y2 = zt_bf16_to_f32(g[b]);
        if (h < nqk && cos_t) {
            const size_t t = (r % T) * H + p;
            const zt_rope_pair o = zt_rope_rotate(y1, y2, cos_t[t], -sin_t[t]);
            y1 = o.y1, y2 = o.y2;
        }
        if (dqkv)
            dqkv[a] = y1, dqkv[b] = y2;
        if (dqkv16)
            dqkv16[a] = zt_f32_to_bf16(y1), dqkv16[b] = zt_f32_to_bf16(y2);
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

static void cudnn_failed(const char *msg) { zt_cu_die("cuDNN's fused attention", msg, __FILE__, __LINE__); }

static void rope_in(uint16_t *qk, const uint16_t *qkv16, const float *cos_t, const float *sin_t, int B, int T, int nh,
                    int nkv, int hd)
{
    const size_t rows = (size_t)B * T, n = rows * (nh + nkv) * (hd / 2);
    cudnn_rope_in_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(qk, qkv16, cos_t, sin_t, rows, T,
                                                                               nh + nkv, hd, (nh + 2 * nkv) * hd);
    ZT_CU_LAUNCHED();
}

static void cudnn_forward(const struct attn_shape *s, uint16_t *out16, float *lse, const uint16_t *qkv16,
                          const float *cos_t, const float *sin_t)
{
    const int nh = s->nh, nkv = s->nkv, hd = s->hd;
    const size_t qk = align256((size_t)s->B * s->T * (nh + nkv) * hd * 2);
    uint16_t *rot = (uint16_t *)zt_cu_scratch(qk + s->ws_fwd);
    rope_in(rot, qkv16, cos_t, sin_t, s->B, s->T, nh, nkv, hd);
    char why[256];
    if (zt_cudnn_sdpa_forward(s->g, rot, rot + (size_t)nh * hd, qkv16 + (size_t)(nh + nkv) * hd, out16, lse,
                              (char *)rot + qk, why, sizeof why))
        cudnn_failed(why);
}

static void cudnn_backward(const struct attn_shape *s, float *dqkv, uint16_t *dqkv16, const float *dout,
                           const uint16_t *qkv16, const uint16_t *out16, const float *lse, const float *cos_t,
                           const float *sin_t)
{
    const int nh = s->nh, nkv = s->nkv, hd = s->hd, W = (nh + 2 * nkv) * hd;
    const size_t rows = (size_t)s->B * s->T, no = rows * nh * hd;
    const size_t qk = align256(rows * (nh + nkv) * hd * 2), d16 = align256(no * 2);
    const size_t stage = dqkv16 ? 0 : align256(rows * W * 2);
    char *base = (char *)zt_cu_scratch(qk + d16 + stage + s->ws_bwd);
    uint16_t *rot = (uint16_t *)base, *do16 = (uint16_t *)(base + qk);
    uint16_t *g = dqkv16 ? dqkv16 : (uint16_t *)(base + qk + d16);
    rope_in(rot, qkv16, cos_t, sin_t, s->B, s->T, nh, nkv, hd);
    cudnn_round_kernel<<<zt_cu_blocks(no), ZT_CU_THREADS, 0, zt_cu.stream>>>(do16, dout, no);
    ZT_CU_LAUNCHED();
    char why[256];
    if (zt_cudnn_sdpa_backward(s->g, rot, rot + (size_t)nh * hd, qkv16 + (size_t)(nh + nkv) * hd, out16, do16, lse, g,
                               g + (size_t)nh * hd, g + (size_t)(nh + nkv) * hd, base + qk + d16 + stage, why,
                               sizeof why))
        cudnn_failed(why);
    const size_t n = rows * (nh + 2 * nkv) * (hd / 2);
    cudnn_rope_out_kernel<<<zt_cu_blocks(n), ZT_CU_THREADS, 0, zt_cu.stream>>>(dqkv, dqkv16, g, cos_t, sin_t, rows,
                                                                                s->T, nh + nkv, nh + 2 * nkv, hd);
    ZT_CU_LAUNCHED();
}
#endif

void zt_cu_cudnn_attention_forward_act16(uint16_t *out16, float *lse, const uint16_t *qkv16, const float *cos_t,
                                         const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                         int window)
{
    const struct attn_shape *s = B > 0 && T > 0 ? shape_of(B, T, nh, nkv, hd, window) : NULL;
#ifdef ZT_HAVE_CUDNN
    if (s && s->cudnn) {
        cudnn_forward(s, out16, lse, qkv16, cos_t, cos_t ? sin_t : NULL);
        return;
    }
#endif
    (void)s;
    zt_cu_fast_attention_forward_act16(out16, lse, qkv16, cos_t, sin_t, scratch, B, T, nh, nkv, hd, window);
}

void zt_cu_cudnn_attention_backward_act16(float *dqkv, uint16_t *dqkv16, const float *dout, const uint16_t *qkv16,
                                          const uint16_t *out16, const float *lse, const float *cos_t,
                                          const float *sin_t, void *scratch, int B, int T, int nh, int nkv, int hd,
                                          int window)
{
    const struct attn_shape *s = B > 0 && T > 0 ? shape_of(B, T, nh, nkv, hd, window) : NULL;
#ifdef ZT_HAVE_CUDNN
    if (s && s->cudnn) {
        cudnn_backward(s, dqkv, dqkv16, dout, qkv16, out16, lse, cos_t, cos_t ? sin_t : NULL);
        return;
    }
#endif
    (void)s;
    zt_cu_fast_attention_backward_act16(dqkv, dqkv16, dout, qkv16, out16, lse, cos_t, sin_t, scratch, B, T, nh, nkv,
                                        hd, window);
}

int zt_cu_cudnn_attention_used(int B, int T, int nh, int nkv, int hd, int window)
{
    return shape_of(B, T, nh, nkv, hd, window)->cudnn;
}
