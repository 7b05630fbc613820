/* fast_xent.cu — cross-entropy fused with the lm-head's products, chunked over rows, so
 * that fp32 logits for the whole batch never exist (fast.h).
 *
 * x (N, C) the final norm's output, w (V, C) the lm-head weight (Hugging Face's
 * (out, in)), targets[n] on the host (ZT_IGNORE_INDEX: no loss, a zero gradient row).  For each chunk of R rows [n0, n0 + R):
 *   logits (R, V) fp32   = x_chunk w^T                         (matmul, compute dtype)
 *   per row n, t = targets[n], m = max_v z_v, S = sum_v e^(z_v - m):
 *     loss_n = m + log S - z_t,
 *     dlogits_nv = (e^(z_v - m) / S - [v == t]) grad_scale     (bf16 for bf16 compute)
 *   dx_chunk (R, C)      = dlogits w                            (matmul, overwrites)
 *   dw (V, C)           += dlogits^T x_chunk                    (matmul, beta 1)
 * Only one chunk's logits (R V fp32, plus R V bf16 for bf16 compute) are in memory at a
 * time: at Llama's V = 32000 and T 2048, 250 MB of fp32 logits become R / 2048 of that.
 * The losses stay on the device: each row's loss (double) goes to a slot, and one block
 * adds the N slots to *loss_sum by a tree of fixed shape (add_losses_kernel), so the sum
 * has a fixed order and the host reads it when it wants (no synchronisation here).
 *
 * Against the exact path (the table's matmul, xent and matmul): the same products on
 * the same operands, the row's max and loss the same expressions; the sum S in fp32
 * with the hardware exp (__expf) instead of zt_expf in double, so the losses agree to
 * fp32 rounding and the bf16 gradients to one bf16 rounding. */
#include "entries.cuh"
#include "fast.h"

extern "C" {
#include "../fused.h"
}

#define XT_THREADS 512

__device__ __forceinline__ float block_sum_f(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

/* One block per row of the chunk: the loss into row_loss[n], the gradient over the
 * logits in place (fp32) or into d16 (bf16).  The gradient scale: host_scale, or
 * formed from the step's scalars sc as the kernel runs (fast mode's backward). */
__global__ void fused_xent_rows_kernel(float *logits, uint16_t *d16, const int *targets, double *row_loss, int V,
                                       float host_scale, const zt_step_scalars *sc, int want_grad)
{
    const float grad_scale = sc ? zt_step_grad_scale(sc) : host_scale;
    __shared__ float shf[32];
    const int n = blockIdx.x;
    float *z = logits + (size_t)n * V;
    const int t = targets[n];
    if (t == ZT_IGNORE_INDEX) { /* no loss, a zero gradient row (xent.c); the whole block leaves */
        if (threadIdx.x == 0)
            row_loss[n] = 0.0;
        for (int v = threadIdx.x; want_grad && v < V; v += blockDim.x) {
            if (d16)
                d16[(size_t)n * V + v] = 0;
            else
                z[v] = 0.0f;
        }
        return;
    }
    const float zt = z[t]; /* read before anything is written (the reductions synchronise) */
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
    const float m = zt_d_block_max(mx, shf);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += __expf(z[v] - m);
    s = block_sum_f(s, shf);
    if (threadIdx.x == 0)
        row_loss[n] = ((double)m + log((double)s)) - (double)zt;
    if (!want_grad)
        return;
    const float k = grad_scale / s;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float g = __expf(z[v] - m) * k;
        if (v == t)
            g -= grad_scale;
        if (d16)
            d16[(size_t)n * V + v] = zt_f32_to_bf16(g);
        else
            z[v] = g;
    }
}

/* *loss_sum += sum_n row_loss[n] by one block of LOSS_THREADS: thread i sums rows i,
 * i + LOSS_THREADS, ... in order, then the block's tree (zt_d_block_sum: warps'
 * butterflies, then the warps' sums).  A fixed order for a fixed block size, so the same
 * bits every run; N / LOSS_THREADS dependent adds instead of N on one thread (2,048 for
 * the 1B model at T 2048: about as long as the lm-head's last product, on the
 * step's critical path). */
#define LOSS_THREADS 256
__global__ void add_losses_kernel(double *loss_sum, const double *row_loss, int N)
{
    __shared__ double sh[32];
    double acc = 0.0;
    for (int n = threadIdx.x; n < N; n += LOSS_THREADS) acc += row_loss[n];
    acc = zt_d_block_sum(acc, sh);
    if (threadIdx.x == 0)
        *loss_sum += acc;
}

int zt_cu_fast_lmhead_xent(double *loss_sum, float *dx, float *dw, float dw_beta, const void *x,
                           zt_dtype x_dt, const void *w, zt_dtype w_dt, const int *targets, int N, int C,
                           int V, float grad_scale, const zt_step_scalars *scale_src, zt_dtype compute,
                           int chunk_rows, zt_err *err)
{
    int bad = zt_lmhead_xent_check_args(targets, N, C, V, chunk_rows, err); /* the rules of every table's */
    if (bad || N == 0)
        return bad;
    const int R = chunk_rows < N ? chunk_rows : N;
    const int grad = dx != NULL || dw != NULL;
    const int bf16_grad = grad && compute == ZT_BF16;
    const zt_dtype g_dt = bf16_grad ? ZT_BF16 : ZT_F32;
    /* scratch: N targets, N row losses, one chunk of logits (and of bf16 gradients) */
    const size_t tgt_bytes = ((size_t)N * sizeof(int) + 15) & ~(size_t)15;
    const size_t loss_bytes = (size_t)N * sizeof(double);
    const size_t logit_bytes = (size_t)R * V * sizeof(float);
    char *base = (char *)zt_cu_scratch(tgt_bytes + loss_bytes + logit_bytes + (bf16_grad ? (size_t)R * V * 2 : 0));
    int *dtgt = (int *)base;
    double *row_loss = (double *)(base + tgt_bytes);
    float *logits = (float *)(base + tgt_bytes + loss_bytes);
    uint16_t *d16 = bf16_grad ? (uint16_t *)(base + tgt_bytes + loss_bytes + logit_bytes) : NULL;
    zt_cu_upload(dtgt, targets, (size_t)N * sizeof(int));
    const size_t xs = zt_dtype_size(x_dt);
    for (int n0 = 0; n0 < N; n0 += R) {
        const int r = N - n0 < R ? N - n0 : R;
        const void *xc = (const char *)x + (size_t)n0 * C * xs;
        int rc = zt_cu_matmul(logits, xc, x_dt, w, w_dt, r, V, C, 0, 1, 0.0f, compute, err);
        if (rc)
            return rc;
        fused_xent_rows_kernel<<<r, XT_THREADS, 0, zt_cu.stream>>>(logits, d16, dtgt + n0, row_loss + n0, V,
                                                                   grad_scale, scale_src, grad);
        ZT_CU_LAUNCHED();
        const void *g = bf16_grad ? (const void *)d16 : (const void *)logits;
        if (dx && (rc = zt_cu_matmul(dx + (size_t)n0 * C, g, g_dt, w, w_dt, r, C, V, 0, 0, 0.0f, compute, err)))
            return rc;
        if (dw &&
            (rc = zt_cu_matmul(dw, g, g_dt, xc, x_dt, V, C, r, 1, 0, n0 ? 1.0f : dw_beta, compute, err)))
            return rc;
    }
    if (loss_sum) {
        add_losses_kernel<<<1, LOSS_THREADS, 0, zt_cu.stream>>>(loss_sum, row_loss, N);
        ZT_CU_LAUNCHED();
    }
    return ZT_OK;
}
