/* test_gemm_bf16.c — bf16 products on a CPU without native bf16.
 *
 * The program restricts oneDNN to AVX2 (DNNL_MAX_CPU_ISA, set before the first
 * oneDNN call), so on any machine it sees a CPU without AVX512-BF16, and
 * zt_matmul's bf16 compute takes the AVX2 kernel of gemm_bf16.c, which converts
 * while packing.  Given A and B in every transpose layout and dtype mix, with
 * beta 0 and 1, on shapes that cut every block of the kernel (micro-tiles of
 * 6 x 16, depth blocks of up to 256, row blocks, column blocks of 4096) at odd
 * places:
 *  - C equals beta*C0 + op(A).op(B) computed in double on the bf16-rounded
 *    values (fp32 accumulation: rel 1e-5, floor 1, as test_matmul.c);
 *  - C equals the previous path, oneDNN's fp32 primitive on bf16-rounded copies,
 *    within fp32 accumulation-order tolerance;
 *  - the packing rounds fp32 exactly as zt_round_bf16 does (ties to even, NaN
 *    stays NaN, overflow to inf), seen through a product with the identity;
 *  - C is bit-identical for 1, 2 and 3 threads (the depth order does not depend
 *    on how rows are split);
 *  - the packing buffers are accounted and released by zt_matmul_shutdown. */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/dtype.h"
#include "../src/core/mem.h"
#include "../src/kernels/gemm_bf16.h"
#include "../src/kernels/matmul.h"
#include "matmul_ref.h"
#include "test.h"

#define TOL 1e-5
#define FLOOR 1.0

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* One product through zt_matmul's bf16 compute, checked against the double
 * reference and against oneDNN's fp32 primitive on the rounded values.  Returns
 * the number of failed checks. */
static int check_case(int M, int N, int K, int ta, int tb, float beta, zt_dtype a_dt, zt_dtype b_dt)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *av = malloc(na * sizeof *av), *bv = malloc(nb * sizeof *bv);
    float *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0), *cf = malloc(nc * sizeof *cf);
    double *ref = malloc(nc * sizeof *ref);
    void *A = zt_test_matrix(a_dt, na, av, 1, &rng), *B = zt_test_matrix(b_dt, nb, bv, 1, &rng);
    for (size_t i = 0; i < nc; i++)
        c[i] = cf[i] = c0[i] = zt_test_urand(&rng);
    zt_test_matmul_ref(ref, c0, av, bv, M, N, K, ta, tb, beta);

    int before = zt_test_failed_checks;
    zt_err err = {0};
    int rc = zt_matmul(c, A, a_dt, B, b_dt, M, N, K, ta, tb, beta, ZT_BF16, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    /* the previous path: fp32 products of the rounded values in oneDNN */
    int rcf = zt_matmul(cf, av, ZT_F32, bv, ZT_F32, M, N, K, ta, tb, beta, ZT_F32, &err);
    ZT_CHECK_MSG(rcf == ZT_OK, "%s", err.msg);
    for (size_t i = 0; i < nc && rc == ZT_OK && rcf == ZT_OK; i++) {
        ZT_CHECK_CLOSE(c[i], ref[i], TOL, FLOOR);
        ZT_CHECK_CLOSE(c[i], cf[i], TOL, FLOOR);
        if (zt_test_failed_checks - before >= 3)
            break; /* a broken case would print M*N lines */
    }
    int bad = zt_test_failed_checks - before;
    if (bad)
        fprintf(stderr, "  ^ case M=%d N=%d K=%d ta=%d tb=%d beta=%g A=%s B=%s\n", M, N, K, ta, tb,
                (double)beta, zt_dtype_name(a_dt), zt_dtype_name(b_dt));
    free(av), free(bv), free(c), free(c0), free(cf), free(ref), free(A), free(B);
    return bad;
}

/* Each cuts the kernel's blocks somewhere else: below, at and past a micro-tile
 * (6 x 16), K at, past one and past two depth blocks (512; 513 splits into 2 of
 * 257, 1100 into 3 of 367), M past a row block (72) and not a multiple of the
 * thread count's split. */
static const int shapes[][3] = {{1, 1, 1},     {5, 15, 7},    {6, 16, 8},    {7, 17, 9},
                                {13, 33, 257}, {12, 32, 512}, {31, 3, 513},  {150, 47, 70},
                                {2, 100, 300}, {289, 20, 31}, {97, 129, 600}, {20, 40, 1100}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void check_all(zt_dtype a_dt, zt_dtype b_dt)
{
    for (int s = 0; s < NSHAPES; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int beta = 0; beta < 2; beta++)
                    check_case(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, (float)beta, a_dt, b_dt);
}

static void test_path_follows_the_isa(void)
{
    ZT_CHECK_MSG(strcmp(zt_matmul_isa_name(), "AVX2") == 0, "oneDNN dispatches to %s",
                 zt_matmul_isa_name());
    ZT_CHECK(zt_matmul_has_native_bf16() == 0);
    /* every x86-64 build has the kernel (the Makefile compiles it for AVX2/FMA); it
     * runs where the CPU has both */
    int cpu_can = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    ZT_CHECK(zt_gemm_bf16_available() == cpu_can);
    if (cpu_can) {
        ZT_CHECK(zt_matmul_bf16_path(ZT_BF16) == ZT_BF16_PATH_PACKED);
        ZT_CHECK(strstr(zt_matmul_bf16_path_name(), "AVX2 kernel") != NULL);
    } else {
        ZT_CHECK(zt_matmul_bf16_path(ZT_BF16) == ZT_BF16_PATH_COPIES);
    }
    ZT_CHECK(zt_matmul_bf16_path(ZT_F32) == ZT_BF16_PATH_NONE);
}

static void test_bf16_inputs(void) { check_all(ZT_BF16, ZT_BF16); }
static void test_f32_inputs_are_rounded(void) { check_all(ZT_F32, ZT_F32); }
static void test_mixed_inputs(void)
{
    check_all(ZT_F32, ZT_BF16);
    check_all(ZT_BF16, ZT_F32);
}

/* The shapes of a linear layer of the bench configs, shrunk in the token count:
 * the forward (trans_b), dx (none) and dW += (trans_a, beta 1), and the lm head's
 * (trans_a and trans_b); N past one column block of 4096, and K past what one
 * packed block of B holds. */
static void test_layer_shapes(void)
{
    check_case(70, 300, 512, 0, 1, 0.0f, ZT_BF16, ZT_BF16);
    check_case(70, 512, 300, 0, 0, 0.0f, ZT_BF16, ZT_BF16);
    check_case(300, 512, 70, 1, 0, 1.0f, ZT_BF16, ZT_BF16);
    check_case(64, 70, 1000, 1, 1, 0.0f, ZT_BF16, ZT_BF16);
    check_case(9, 4200, 40, 0, 1, 0.0f, ZT_BF16, ZT_BF16);
    check_case(9, 4200, 40, 1, 0, 1.0f, ZT_F32, ZT_F32);
    /* more depth than one packed B block holds (4096 columns x 3 depth blocks of 200) */
    check_case(7, 4200, 600, 0, 1, 1.0f, ZT_BF16, ZT_BF16);
    check_case(7, 4200, 600, 1, 0, 0.0f, ZT_BF16, ZT_F32);
}

/* C = A . I with A fp32: every element of C is the bf16 rounding of A's, as
 * zt_round_bf16 gives it, on bit patterns that hit every rounding case. */
static void test_rounding_matches_dtype_module(void)
{
    enum { M = 40, K = 13 }; /* 13 columns: 8 in vector lanes, 5 in the scalar tail */
    static const uint32_t special[] = {
        0x3f808000u, /* tie, even below: stays 0x3f80 */
        0x3f818000u, /* tie, odd below: rounds up to 0x3f82 */
        0x3f807fffu, /* just below a tie: down */
        0x3f808001u, /* just above a tie: up */
        0x7f7fffffu, /* FLT_MAX: past bf16's largest, rounds to inf */
        0xff7fffffu, /* -FLT_MAX: -inf */
        0x7fc00001u, /* quiet NaN */
        0x7f800001u, /* signalling NaN: must stay NaN, not become inf */
        0xffffffffu, /* NaN with every bit set: must not wrap to zero */
        0x00000001u, /* smallest subnormal: rounds to 0 */
        0x007fffffu, /* largest subnormal: rounds up to the smallest normal */
        0x80000000u, /* -0 */
    };
    const int nspecial = (int)(sizeof special / sizeof special[0]);
    float a[M * K], id[K * K], c[M * K];
    for (int i = 0; i < M * K; i++) {
        uint32_t u = i < nspecial ? special[i] : i % 3 == 0 ? (uint32_t)(zt_test_next(&rng) >> 32)
                                                               : (uint32_t)(zt_test_next(&rng) >> 32) & 0xbfffffffu;
        memcpy(&a[i], &u, 4);
    }
    for (int i = 0; i < K * K; i++)
        id[i] = i / K == i % K ? 1.0f : 0.0f;
    /* both layouts of A go through different packing loops */
    for (int ta = 0; ta < 2; ta++) {
        float at[M * K];
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++)
                at[k * M + m] = a[m * K + k];
        zt_err err = {0};
        int rc = zt_matmul(c, ta ? at : a, ZT_F32, id, ZT_F32, M, K, K, ta, 0, 0.0f, ZT_BF16, &err);
        ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
        int before = zt_test_failed_checks;
        for (int m = 0; m < M && rc == ZT_OK; m++)
            for (int k = 0; k < K; k++) {
                float want = zt_round_bf16(a[m * K + k]), got = c[m * K + k];
                /* A NaN or inf times the identity's zeros is NaN, so a row holding
                 * one is NaN wherever it is not the value itself. */
                int row_nonfinite = 0;
                for (int j = 0; j < K; j++)
                    row_nonfinite |= !isfinite(zt_round_bf16(a[m * K + j]));
                if (row_nonfinite)
                    ZT_CHECK_MSG(isnan(got) || got == want,
                                 "ta=%d A[%d][%d]=0x%08x gave %g, want NaN or %g", ta, m, k,
                                 (unsigned)((const uint32_t *)a)[m * K + k], (double)got, (double)want);
                else
                    ZT_CHECK_MSG(got == want, "ta=%d A[%d][%d]=0x%08x gave %.9g, want %.9g", ta, m, k,
                                 (unsigned)((const uint32_t *)a)[m * K + k], (double)got, (double)want);
                if (zt_test_failed_checks - before >= 5)
                    return;
            }
    }
    /* The NaN cases, one column at a time (no inf in the row): NaN in, NaN out. */
    float nanrow[K], out[K];
    for (int s = 6; s <= 8; s++) {
        for (int k = 0; k < K; k++)
            nanrow[k] = 0.5f;
        memcpy(&nanrow[s - 6], &special[s], 4);
        zt_err err = {0};
        ZT_CHECK(zt_matmul(out, nanrow, ZT_F32, id, ZT_F32, 1, K, K, 0, 0, 0.0f, ZT_BF16, &err) == ZT_OK);
        ZT_CHECK_MSG(isnan(out[s - 6]), "0x%08x gave %g", (unsigned)special[s], (double)out[s - 6]);
    }
}

/* Depth blocks are summed in the same order however rows are split among
 * threads, so the result does not depend on the thread count, bit for bit. */
static void test_thread_count_does_not_change_bits(void)
{
    enum { M = 301, N = 77, K = 700 };
    float *av = malloc((size_t)M * K * sizeof *av), *bv = malloc((size_t)K * N * sizeof *bv);
    void *A = zt_test_matrix(ZT_BF16, (size_t)M * K, av, 1, &rng);
    void *B = zt_test_matrix(ZT_BF16, (size_t)K * N, bv, 1, &rng);
    float *c[3];
    const int saved = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        c[t] = malloc((size_t)M * N * sizeof(float));
        omp_set_num_threads(t + 1);
        zt_err err = {0};
        ZT_CHECK_MSG(zt_matmul(c[t], A, ZT_BF16, B, ZT_BF16, M, N, K, 0, 1, 0.0f, ZT_BF16, &err) == ZT_OK,
                     "%s", err.msg);
    }
    omp_set_num_threads(saved);
    ZT_CHECK(memcmp(c[0], c[1], (size_t)M * N * sizeof(float)) == 0);
    ZT_CHECK(memcmp(c[0], c[2], (size_t)M * N * sizeof(float)) == 0);
    for (int t = 0; t < 3; t++)
        free(c[t]);
    free(av), free(bv), free(A), free(B);
}

static void test_shutdown_releases_packing_buffers(void)
{
    check_case(150, 47, 300, 0, 0, 0.0f, ZT_BF16, ZT_BF16);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) > 0); /* packing buffers and oneDNN's cache */
    zt_matmul_shutdown();
    ZT_CHECK_MSG(zt_mem_current(ZT_MEM_OTHER) == 0, "%zu bytes left", zt_mem_current(ZT_MEM_OTHER));
    /* and the kernel starts over cleanly */
    check_case(7, 17, 9, 1, 1, 1.0f, ZT_F32, ZT_BF16);
    zt_matmul_shutdown();
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

int main(void)
{
    /* Before the first oneDNN call: oneDNN reads it once. */
    setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
    printf("     oneDNN %s, ISA %s, bf16 path: %s\n", zt_matmul_dnnl_version(), zt_matmul_isa_name(),
           zt_matmul_bf16_path_name());
    ZT_RUN(test_path_follows_the_isa);
    ZT_RUN(test_bf16_inputs);
    ZT_RUN(test_f32_inputs_are_rounded);
    ZT_RUN(test_mixed_inputs);
    ZT_RUN(test_layer_shapes);
    ZT_RUN(test_rounding_matches_dtype_module);
    ZT_RUN(test_thread_count_does_not_change_bits);
    ZT_RUN(test_shutdown_releases_packing_buffers);
    ZT_TEST_MAIN_END();
}
