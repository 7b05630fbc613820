/* matmul.h — matrix products through oneDNN.
 *
 * One entry point covers the three products of a linear layer y = x W^T
 * (W stored (out, in) as in Hugging Face):
 *   forward  y (N,out)   = x (N,in) . W^T           trans_b = 1
 *   backward dx (N,in)   = dy (N,out) . W           (no transposes)
 *            dW (out,in) += dy^T (out,N) . x (N,in)  trans_a = 1, beta = 1
 * C is always fp32.  A and B may be fp32 or bf16 in memory; `compute` says which
 * arithmetic to use: ZT_BF16 means bf16 inputs with fp32 accumulation (inputs
 * stored in fp32 are rounded to bf16 into internal scratch first, as autocast
 * does), ZT_F32 means fp32 inputs (bf16 inputs are widened first).  When the CPU
 * lacks AVX512-BF16 (checked once at run time), bf16 compute runs fp32 FMAs on the
 * bf16-rounded values in an AVX2 kernel that converts while packing
 * (gemm_bf16.h), which gives the same rounding of inputs.
 *
 * oneDNN primitives are created once per distinct shape and kept in a cache, so
 * the training step does no primitive creation after its first iteration. */
#ifndef ZT_MATMUL_H
#define ZT_MATMUL_H

#include "../core/dtype.h"
#include "../core/status.h"

/* C(M,N) = beta*C + op(A)(M,K) . op(B)(K,N); op(A) = A^T when trans_a (A stored (K,M)),
 * op(B) = B^T when trans_b (B stored (N,K)).  beta is 0 or 1. Row-major, dense. */
int zt_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
              int K, int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err);

/* The argument rules of every backend's matmul (this one and the CUDA table's), in one
 * place: shapes non-negative, beta 0 or 1, the dtype pairs (fp16 compute takes fp16
 * or fp32 inputs; bf16 inputs go with bf16 or fp32 compute), no NULL buffer where
 * something is read or written.  On success *work says what is left to do:
 * ZT_MM_NOTHING (M or N is 0), ZT_MM_SCALE_C (K is 0: the empty sum, C = beta C, so
 * C is zeroed when beta is 0) or ZT_MM_PRODUCT. */
typedef enum { ZT_MM_NOTHING, ZT_MM_SCALE_C, ZT_MM_PRODUCT } zt_mm_work;
int zt_matmul_check_args(const float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt,
                         int M, int N, int K, float beta, zt_dtype compute, zt_mm_work *work,
                         zt_err *err);
/* The result-dtype rule of every entry that writes a product's result in a dtype of
 * its own (matmul_out, linear_act16, on each table): an fp32 result takes any compute,
 * a bf16 one only bf16 compute (its fp32 sum rounded once; a narrower result of a
 * wider compute would be a second, unasked rounding).  ZT_EINPUT naming the entry
 * and its product's shape (an M x K by K x N product) otherwise. */
int zt_result_dtype_check(const char *entry, int M, int N, int K, zt_dtype d_dt, zt_dtype compute, zt_err *err);

/* 1 when bf16 products run natively (AVX512-BF16 or AMX) on this CPU. */
int zt_matmul_has_native_bf16(void);
/* 1 when oneDNN's effective ISA includes AMX-BF16 (so DNNL_MAX_CPU_ISA below it says 0);
 * amx.c asks this before it asks Linux for the tile state. */
int zt_matmul_isa_has_amx(void);

/* Which path products in a compute dtype take: for bf16, the native oneDNN
 * primitive, else the AVX2/FMA kernel that converts while packing (gemm_bf16.h),
 * else (a build without AVX2/FMA) the fp32 primitive on converted copies; NONE for
 * fp32 and fp16 compute.  The name is what `ztrain env` and the plan line print. */
typedef enum zt_bf16_path {
    ZT_BF16_PATH_NONE,
    ZT_BF16_PATH_NATIVE,
    ZT_BF16_PATH_PACKED,
    ZT_BF16_PATH_COPIES,
} zt_bf16_path;
zt_bf16_path zt_matmul_bf16_path(zt_dtype compute);
const char *zt_matmul_bf16_path_name(void);
/* oneDNN's version string, e.g. "2.6.3", and the ISA it dispatches to. */
const char *zt_matmul_dnnl_version(void);
const char *zt_matmul_isa_name(void);

/* Measure the sustained rate of a square-ish product in the given compute dtype
 * (GFLOP/s, 2*M*N*K flops per product) with the current thread count. */
double zt_matmul_peak_gflops(zt_dtype compute);
/* The same over `rounds` timed rounds of at least round_s seconds each (after the
 * warm-up): the best round's rate, and the slowest's in *slowest when not NULL (how
 * steady the machine was).  *share, when not NULL: the largest, over the rounds, of
 * this process's CPU time over the round's wall time x the thread count; near 1 when
 * some round had the cores to itself, below when other processes took them in every
 * round (the best round is then not the peak).  0 on failure. */
double zt_matmul_peak_rounds(zt_dtype compute, int rounds, double round_s, double *slowest, double *share);

/* Release cached primitives and scratch (end of program; keeps ASan quiet). */
void zt_matmul_shutdown(void);

#endif
