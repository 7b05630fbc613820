/* xent.cu — softmax cross-entropy fused with the logits' gradient, on the device
 * (kernels.h, xent.c).
 *
 * One block per row n of logits (N, V), target t = targets[n] (uploaded from the host;
 * ZT_IGNORE_INDEX: loss 0 and a zero gradient row, as xent.c):
 *   m = max_v x_v,  S = sum_v exp(x_v - m) (double),  loss_n = (m + log S) - x_t
 *   dlogits_v = exp(x_v - m) * ((float)(1/S) * grad_scale) - [v == t] grad_scale
 * exp is vmath.h's zt_expf and the fp32 expressions are xent.c's; S is summed in double
 * in the block's tree order instead of xent.c's vector order (a relative difference
 * of ~1e-16 in S, which reaches the fp32 gradient as at most one rounding flip).
 * dlogits may be logits itself: a row's x_t and max are read before anything is
 * written, and every later pass rewrites element v from element v only.  With
 * dlogits_bf16 the gradient goes there, rounded once, and dlogits holds the
 * exponentials (scratch), as on the CPU.  The returned sum of the N losses is summed
 * over rows in a fixed order, in double.  With the step's scalars (xent_into's
 * scale_src, fast mode's backward) grad_scale is zt_step_grad_scale of them, formed
 * by each thread as the kernel runs: the step's count of targets and the loss scale
 * the device holds then (step_scalars.h, the host's expression and bits). */
#include "entries.cuh"

#define XENT_THREADS 1024

__global__ void xent_kernel(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int V,
                            float host_scale, const zt_step_scalars *sc, double *row_loss)
{
    const float grad_scale = sc ? zt_step_grad_scale(sc) : host_scale;
    __shared__ double shd[32];
    __shared__ float shf[32];
    const int n = blockIdx.x;
    const float *x = logits + (size_t)n * V;
    const int tgt = targets[n];
    if (tgt == ZT_IGNORE_INDEX) { /* the whole block leaves together: tgt is the row's */
        if (dlogits_bf16)
            for (int v = threadIdx.x; v < V; v += blockDim.x)
                dlogits_bf16[(size_t)n * V + v] = 0;
        else if (dlogits)
            for (int v = threadIdx.x; v < V; v += blockDim.x)
                dlogits[(size_t)n * V + v] = 0.0f;
        if (threadIdx.x == 0)
            row_loss[n] = 0.0;
        return;
    }
    const float xt = x[tgt]; /* read before any write (the reductions below synchronise) */
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = x[v] > mx ? x[v] : mx;
    const float m = zt_d_block_max(mx, shf);
    double sum = 0.0;
    float *d = dlogits ? dlogits + (size_t)n * V : NULL;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float e = zt_expf(x[v] - m); /* x[v] is read before d[v] is written */
        if (d)
            d[v] = e;
        sum += e;
    }
    sum = zt_d_block_sum(sum, shd);
    if (d) {
        const float k = (float)(1.0 / sum) * grad_scale;
        if (dlogits_bf16) {
            uint16_t *d16 = dlogits_bf16 + (size_t)n * V;
            for (int v = threadIdx.x; v < V; v += blockDim.x) {
                float g = d[v] * k;
                if (v == tgt)
                    g = g - grad_scale;
                d16[v] = zt_f32_to_bf16(g);
            }
        } else {
            for (int v = threadIdx.x; v < V; v += blockDim.x) {
                float g = d[v] * k;
                if (v == tgt)
                    g = g - grad_scale;
                d[v] = g;
            }
        }
    }
    if (threadIdx.x == 0)
        row_loss[n] = ((double)m + log(sum)) - (double)xt;
}

/* the rows' losses of xent_kernel, queued; NULL for no rows */
static double *xent_queue(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N,
                          int V, float grad_scale, const zt_step_scalars *sc)
{
    if (N <= 0)
        return NULL;
    for (int n = 0; n < N; n++) /* xent.c asserts the same; out of range would read outside the row */
        if ((targets[n] < 0 || targets[n] >= V) && targets[n] != ZT_IGNORE_INDEX) {
            fprintf(stderr, "ztrain: cross-entropy: target %d of row %d outside the vocabulary [0, %d)\n", targets[n],
                    n, V);
            abort();
        }
    double *row_loss = (double *)zt_cu_scratch((size_t)N * (sizeof(double) + sizeof(int)));
    int *dtgt = (int *)(row_loss + N);
    zt_cu_upload(dtgt, targets, (size_t)N * sizeof(int));
    xent_kernel<<<N, XENT_THREADS, 0, zt_cu.stream>>>(dlogits, dlogits_bf16, logits, dtgt, V, grad_scale, sc,
                                                      row_loss);
    ZT_CU_LAUNCHED();
    return row_loss;
}

/* the asynchronous step's: the rows' sum added to *loss_sum on the device (NULL: the
 * loss not wanted, the gradient only) */
void zt_cu_xent_into(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                     float grad_scale, const zt_step_scalars *scale_src, double *loss_sum)
{
    double *row_loss = xent_queue(dlogits, dlogits_bf16, logits, targets, N, V, grad_scale, scale_src);
    if (row_loss && loss_sum)
        zt_cu_sum_doubles_into(loss_sum, row_loss, N, 1);
}

double zt_cu_xent(float *dlogits, uint16_t *dlogits_bf16, const float *logits, const int *targets, int N, int V,
                  float grad_scale)
{
    double *row_loss = xent_queue(dlogits, dlogits_bf16, logits, targets, N, V, grad_scale, NULL);
    return row_loss ? zt_cu_sum_doubles(row_loss, N) : 0.0;
}
