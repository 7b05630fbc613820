/* tools/cuda_emu/matmul_stub.cpp — the CPU emulation has no cuBLASLt: matmul.cu is not
 * built, and these stand in for it, refusing every product (kernels_check --no-matmul
 * skips those checks, and says so). */
#include "entries.cuh"

int zt_cu_matmul(float *, const void *, zt_dtype, const void *, zt_dtype, int M, int N, int K, int, int, float,
                 zt_dtype, zt_err *err)
{
    return zt_fail(err, ZT_EFAIL, "matmul M=%d N=%d K=%d: cuBLASLt is not emulated (tools/cuda_emu)", M, N, K);
}

int zt_cu_matmul_init(zt_err *) { return ZT_OK; }
void zt_cu_matmul_shutdown(void) {}
void zt_cu_matmul_allow_tf32(int) {}

int zt_cu_matmul_peak(int, zt_dtype, double *tflops, zt_err *err)
{
    *tflops = 0.0;
    return zt_fail(err, ZT_EFAIL, "cuBLASLt is not emulated (tools/cuda_emu)");
}
