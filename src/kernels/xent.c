/* xent.c — softmax cross-entropy over the vocabulary, fused with its gradient, fp32.
 *
 * logits (N, V), targets (N) in [0, V) or ZT_IGNORE_INDEX (a row with neither loss nor
 * gradient).  Per row n, with m = max_v x_v:
 *   lse = m + log sum_v exp(x_v - m)        (shifting by m keeps exp from overflowing)
 *   loss_n = lse - x_target
 *   dlogits_v = (exp(x_v - lse) - [v == target]) * grad_scale
 * The gradient of loss_n is softmax minus the one-hot target; grad_scale carries the
 * 1/(number of tokens) of a mean loss and any loss scaling.  The returned value is the
 * SUM of loss_n in double, so callers can average over micro-batches exactly.
 *
 * dlogits may alias logits: each row reads x_target and the max before writing, and
 * later passes only rewrite element v from element v.  exp is zt_expf (vmath.h), which
 * rounds as libm's expf does, so every pass over the row vectorises; a row of V floats
 * (128 KB at V = 32000) stays in L2 between its passes. */
#include "backend.h"
#include "kernels.h"
#include "vmath.h"

#include <assert.h>
#include <math.h>
#include <string.h>

double zt_xent_forward_backward(float *dlogits, uint16_t *dlogits_bf16, const float *logits,
                                const int *targets, int N, int V, float grad_scale) {
    assert(N >= 0 && V > 0);
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        const int tgt = targets[n];
        if (tgt == ZT_IGNORE_INDEX) { /* no loss, no gradient through this row */
            if (dlogits_bf16)
                memset(dlogits_bf16 + (size_t)n * V, 0, (size_t)V * sizeof *dlogits_bf16);
            else if (dlogits)
                memset(dlogits + (size_t)n * V, 0, (size_t)V * sizeof *dlogits);
            continue;
        }
        assert(tgt >= 0 && tgt < V);
        const float xt = x[tgt];
        float m = x[0];
#pragma omp simd reduction(max : m)
        for (int v = 1; v < V; v++) m = x[v] > m ? x[v] : m;
        /* The sum of V (up to ~128k) terms in double: exact enough that the loss
         * matches torch's fp32 log_softmax to fp32 precision. */
        double sum = 0.0;
        if (dlogits) {
            float *d = dlogits + (size_t)n * V;
#pragma omp simd reduction(+ : sum)
            for (int v = 0; v < V; v++) {
                const float e = zt_expf(x[v] - m); /* x[v] is read before d[v] is written */
                d[v] = e;
                sum += e;
            }
            const float k = (float)(1.0 / sum) * grad_scale;
            if (dlogits_bf16) {
                /* only the bf16 gradient is wanted: scaled and rounded in one pass while
                 * the row is still in L2 (the fp32 row keeps the exponentials) */
                uint16_t *restrict d16 = dlogits_bf16 + (size_t)n * V;
#pragma omp simd
                for (int v = 0; v < V; v++) d16[v] = zt_f32_to_bf16(d[v] * k);
                d16[tgt] = zt_f32_to_bf16(d[tgt] * k - grad_scale);
            } else {
#pragma omp simd
                for (int v = 0; v < V; v++) d[v] *= k;
                d[tgt] -= grad_scale;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int v = 0; v < V; v++) sum += zt_expf(x[v] - m);
        }
        total += ((double)m + log(sum)) - (double)xt;
    }
    return total;
}
