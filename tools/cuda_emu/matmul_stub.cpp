/* tools/cuda_emu/matmul_stub.cpp — the CPU emulation has no cuBLASLt: matmul.cu is not
 * built, and this stands in for its products with a plain loop, so that the kernels
 * built around products (the fused cross-entropy of fast_xent.cu) run under the
 * emulator.  It follows the table's contract (matmul.h: the same argument rules, from
 * their one home; operands rounded to the compute dtype; fp32 C, beta 0 or 1), summing
 * each element in double.  It is not cuBLASLt, so kernels_check --no-matmul still skips
 * the product checks themselves: they would test this loop. */
#include "entries.cuh"
#include "fast.h"

extern "C" {
#include "../../src/kernels/matmul.h"
}

/* element (r, c) of op(X) for X stored row-major with `cols` columns (transposed: X^T) */
static float elem(const void *X, zt_dtype dt, int trans, int r, int c, int rows_op, int cols_op, zt_dtype compute)
{
    const size_t i = trans ? (size_t)c * rows_op + r : (size_t)r * cols_op + c;
    float v = zt_load_f32(X, dt, i);
    if (compute == ZT_BF16)
        v = zt_round_bf16(v);
    else if (compute == ZT_F16)
        v = zt_round_f16(v);
    return v;
}

int zt_cu_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                 int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err)
{
    zt_mm_work work;
    const int bad = zt_matmul_check_args(C, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (bad || work == ZT_MM_NOTHING)
        return bad;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)elem(A, a_dt, trans_a, m, k, M, K, compute) * elem(B, b_dt, trans_b, k, n, K, N, compute);
            C[(size_t)m * N + n] = (float)(beta != 0.0f ? (double)C[(size_t)m * N + n] + s : s);
        }
    return ZT_OK;
}

/* fast.h's bf16-output product, likewise a loop (kernels_check skips it with --no-matmul) */
int zt_cu_fast_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                          zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err)
{
    const size_t n = (size_t)M * N;
    float *acc = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!acc)
        return zt_fail(err, ZT_EFAIL, "matmul stand-in: out of memory");
    for (size_t i = 0; i < n; i++) acc[i] = residual ? zt_load_f32(residual, d_dt, i) : 0.0f;
    const int rc = zt_cu_matmul(acc, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, residual ? 1.0f : 0.0f, compute, err);
    if (!rc)
        zt_convert(D, d_dt, acc, ZT_F32, n);
    free(acc);
    return rc;
}

/* fast.h's bias product: the exact table's composition (act16.cu) over the loop above
 * (kernels_check skips the fast one with --no-matmul) */
int zt_cu_fast_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                            zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    return zt_cu_linear_act16(y16, x, x_dt, w, w_dt, b, b_dt, N, out, in, compute, err);
}

int zt_cu_matmul_init(zt_err *) { return ZT_OK; }
void zt_cu_matmul_shutdown(void) {}

int zt_cu_matmul_peak(int, zt_dtype, double *tflops, zt_err *err)
{
    *tflops = 0.0;
    return zt_fail(err, ZT_EFAIL, "cuBLASLt is not emulated (tools/cuda_emu)");
}
