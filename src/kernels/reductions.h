/* reductions.h — the engine's element-wise passes over flat gradient buffers:
 * accumulation across micro-batches and ranks, rounding to the reduce dtype, and
 * the sum of squares behind the global gradient norm.  OpenMP over elements,
 * static schedule, so every sum is the same for the same thread count.  And the
 * kernels' one sum along a vector inside a task (zt_dot_rows), kept here at the
 * build's default vector width (see the Makefile). */
#ifndef ZT_REDUCTIONS_H
#define ZT_REDUCTIONS_H

#include <stddef.h>

#include "../core/dtype.h"

/* acc[i] += x[i] for n elements, acc in acc_dt and x in x_dt; a 16-bit acc takes
 * the fp32 sum rounded once. */
void zt_accumulate(void *acc, zt_dtype acc_dt, const void *x, zt_dtype x_dt, size_t n);
/* acc[i] += bf16(x[i]) (fp32 acc and x): the reduce dtype's rounding fused into
 * the accumulation; with round_acc, acc[i] = bf16(acc[i]) + bf16(x[i]): a rounding
 * of acc left pending (the engine's "rounding pending") done as it is read, the bits
 * of rounding acc in place first. */
void zt_accumulate_bf16_rounded(float *acc, int round_acc, const float *x, size_t n);
/* x[i] = bf16(x[i]) in place (fp32 storage); with want_sumsq returns the sum of
 * squares of the rounded values (in double), else 0. */
double zt_round_bf16_inplace(float *x, size_t n, int want_sumsq);
/* y[i ldy + j] += a * x[i ldx + j] for i < rows, j < cols (fp32), the product rounded
 * before the sum: the build's ISO C mode (-std=c11) contracts no multiply-add, so the
 * two roundings of torch's y + x * a stay. */
void zt_scale_add(float *y, size_t ldy, float a, const float *x, size_t ldx, int rows, int cols);
/* Sum of squares of n elements of x in dt, in double. */
double zt_sumsq(const void *x, zt_dtype dt, size_t n);
/* Sum of squares of bf16(x[i]) (fp32 x, read only), in double: zt_round_bf16_inplace's
 * sum, in its order, without the write (the engine's norm of a gradient whose rounding
 * to the reduce dtype is left to AdamW). */
double zt_sumsq_bf16(const float *x, size_t n);
/* dots[r] = sum_d a[r*lda + d] * b[r*ldb + d] for r < rows, d < len, in fp32 (no
 * threads: called inside a task).  Out of line on purpose: a vectorised sum's order
 * follows the vector width, and the attention files that call it are built 512 bits
 * wide, so the sum stays in a file built at the default width and its digits do not
 * depend on that choice. */
void zt_dot_rows(float *dots, const float *a, size_t lda, const float *b, size_t ldb, int rows,
                 int len);

#endif
