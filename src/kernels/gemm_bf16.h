/* gemm_bf16.h — bf16 products on CPUs without AVX512-BF16: a packed AVX2/FMA
 * GEMM whose packing routines do the dtype conversion.
 *
 * Same contract as zt_matmul with compute = ZT_BF16 (matmul.h):
 *   C (M,N) fp32 = beta*C + op(A) . op(B),  beta 0 or 1,
 * where every input value is first rounded to bf16 (bf16 inputs are taken as
 * they are, fp32 inputs are rounded to nearest even), each product of two bf16
 * values is exact in fp32, and the sum is accumulated in fp32.  The result
 * differs from oneDNN's (native bf16 or fp32 on the rounded values) only in the
 * order of the fp32 additions.
 *
 * Why it exists: without native bf16 the product runs on FMA units for fp32, so
 * the only thing bf16 can save is memory traffic.  Converting the operands in a
 * separate pass before an fp32 library GEMM spends that saving twice over (read
 * bf16, write fp32, read fp32 again).  A GEMM packs its operands into
 * cache-sized panels anyway; here the packing reads bf16 and writes fp32, so the
 * conversion costs nothing beyond the copy every GEMM makes.
 *
 * zt_matmul calls this itself when bf16 compute has no native support;
 * nothing else needs to. */
#ifndef ZT_GEMM_BF16_H
#define ZT_GEMM_BF16_H

#include "../core/dtype.h"
#include "../core/status.h"

/* 1 when this build has the AVX2/FMA kernel (every x86-64 build: the Makefile
 * compiles it with -mavx2 -mfma) and this CPU can run it; 0 means zt_gemm_bf16
 * must not be called (on a build without the kernel it fails with ZT_EFAIL). */
int zt_gemm_bf16_available(void);

/* C(M,N) = beta*C + op(A)(M,K) . op(B)(K,N) on bf16-rounded inputs, as zt_matmul's
 * arguments (A, B fp32 or bf16; op(A) = A^T when trans_a, A stored (K,M); op(B) =
 * B^T when trans_b, B stored (N,K)).  Shapes must be positive and beta 0 or 1 (the
 * caller checks); ZT_EFAIL when the packing buffers cannot be allocated.  Uses
 * omp_get_max_threads() threads.  Not thread-safe (one shared packing buffer). */
int zt_gemm_bf16(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
                 int K, int trans_a, int trans_b, float beta, zt_err *err);

/* Release the packing buffers (accounted as ZT_MEM_OTHER). */
void zt_gemm_bf16_shutdown(void);

#endif
