/* test_matmul.c — zt_matmul against a naive double-precision product.
 *
 * Given A and B (fp32 or bf16 in memory) in every transpose layout, with beta 0
 * and 1, C equals beta*C0 + op(A).op(B) computed in double on the values the
 * compute dtype sees: the fp32 values for fp32 compute, the bf16-rounded values
 * for bf16 compute.  Accumulation is fp32 in both cases, so the tolerance is
 * fp32's (rel 1e-5 with a floor of 1 for sums that cancel).  This runs whichever
 * bf16 path the CPU takes; test_gemm_bf16.c forces the non-native one. */
#include <stdint.h>
#include <string.h>

#include "../src/core/dtype.h"
#include "../src/core/mem.h"
#include "../src/kernels/matmul.h"
#include "matmul_ref.h"
#include "test.h"

#define TOL 1e-5
#define FLOOR 1.0

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* One product checked element by element; returns the number of mismatches. */
static int check_case(int M, int N, int K, int ta, int tb, float beta, zt_dtype a_dt,
                      zt_dtype b_dt, zt_dtype compute)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *av = malloc(na * sizeof *av), *bv = malloc(nb * sizeof *bv);
    float *c = calloc(nc, sizeof *c), *c0 = calloc(nc, sizeof *c0);
    double *ref = malloc(nc * sizeof *ref);
    void *A = zt_test_matrix(a_dt, na, av, 0, &rng), *B = zt_test_matrix(b_dt, nb, bv, 0, &rng);
    for (size_t i = 0; i < nc; i++)
        c[i] = c0[i] = zt_test_urand(&rng);
    /* bf16 compute sees bf16-rounded inputs whatever their storage. */
    if (compute == ZT_BF16) {
        for (size_t i = 0; i < na; i++)
            av[i] = zt_round_bf16(av[i]);
        for (size_t i = 0; i < nb; i++)
            bv[i] = zt_round_bf16(bv[i]);
    }
    zt_test_matmul_ref(ref, c0, av, bv, M, N, K, ta, tb, beta);

    zt_err err = {0};
    int rc = zt_matmul(c, A, a_dt, B, b_dt, M, N, K, ta, tb, beta, compute, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    int before = zt_test_failed_checks;
    for (size_t i = 0; i < nc && rc == ZT_OK; i++) {
        ZT_CHECK_CLOSE(c[i], ref[i], TOL, FLOOR);
        if (zt_test_failed_checks - before >= 3)
            break; /* a broken case would print M*N lines */
    }
    int bad = zt_test_failed_checks - before;
    if (bad)
        fprintf(stderr, "  ^ case M=%d N=%d K=%d ta=%d tb=%d beta=%g A=%s B=%s compute=%s\n", M,
                N, K, ta, tb, (double)beta, zt_dtype_name(a_dt), zt_dtype_name(b_dt),
                zt_dtype_name(compute));
    free(av), free(bv), free(c), free(c0), free(ref), free(A), free(B);
    return bad;
}

static const int shapes[][3] = {{7, 13, 29}, {1, 37, 19}, {23, 1, 11}, {64, 48, 80}, {1, 1, 1}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* Every shape x transpose combination x beta for one dtype configuration. */
static void check_all(zt_dtype a_dt, zt_dtype b_dt, zt_dtype compute)
{
    for (int s = 0; s < NSHAPES; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int beta = 0; beta < 2; beta++)
                    check_case(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, (float)beta,
                               a_dt, b_dt, compute);
}

static void test_f32_all_layouts(void) { check_all(ZT_F32, ZT_F32, ZT_F32); }
static void test_bf16_compute_bf16_inputs(void) { check_all(ZT_BF16, ZT_BF16, ZT_BF16); }
static void test_bf16_compute_f32_inputs(void) { check_all(ZT_F32, ZT_F32, ZT_BF16); }
static void test_f32_compute_bf16_inputs(void) { check_all(ZT_BF16, ZT_BF16, ZT_F32); }
static void test_mixed_inputs(void)
{
    check_all(ZT_F32, ZT_BF16, ZT_BF16);
    check_all(ZT_BF16, ZT_F32, ZT_F32);
}

/* Big enough for oneDNN's blocked kernels and the parallel conversion loops. */
static void test_larger_shapes(void)
{
    check_case(300, 200, 260, 0, 1, 0.0f, ZT_F32, ZT_F32, ZT_BF16); /* forward  */
    check_case(300, 260, 200, 0, 0, 0.0f, ZT_F32, ZT_F32, ZT_BF16); /* dx       */
    check_case(200, 260, 300, 1, 0, 1.0f, ZT_F32, ZT_F32, ZT_BF16); /* dW += .. */
    check_case(200, 260, 300, 1, 0, 1.0f, ZT_F32, ZT_F32, ZT_F32);
}

/* The same shapes again hit cached primitives, re-pointed at new buffers; beta=1
 * twice on one C accumulates twice. */
static void test_repeated_calls_reuse_cache(void)
{
    for (int rep = 0; rep < 2; rep++) {
        check_case(7, 13, 29, 0, 1, 0.0f, ZT_F32, ZT_F32, ZT_F32);
        check_case(7, 13, 29, 1, 0, 1.0f, ZT_BF16, ZT_BF16, ZT_BF16);
    }
    enum { M = 5, N = 6, K = 9 };
    float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = zt_test_urand(&rng);
    for (int i = 0; i < K * N; i++)
        b[i] = zt_test_urand(&rng);
    double ref[M * N];
    float zero[M * N] = {0};
    zt_test_matmul_ref(ref, zero, a, b, M, N, K, 0, 0, 0.0f);
    zt_err err = {0};
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, M, N, K, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, M, N, K, 0, 0, 1.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, M, N, K, 0, 0, 1.0f, ZT_F32, &err) == ZT_OK);
    for (int i = 0; i < M * N; i++)
        ZT_CHECK_CLOSE(c[i], 3.0 * ref[i], TOL, FLOOR);
}

static void test_bad_arguments_are_errors(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {9, 9, 9, 9};
    zt_err err = {0};
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, 2, 2, 2, 0, 0, 0.5f, ZT_F32, &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "beta") != NULL);
    ZT_CHECK(zt_matmul(c, a, ZT_F16, b, ZT_F32, 2, 2, 2, 0, 0, 0.0f, ZT_F32, &err) == ZT_EINPUT);
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, -1, 2, 2, 0, 0, 0.0f, ZT_F32, &err) == ZT_EINPUT);
    /* Empty products: M = 0 touches nothing, K = 0 gives beta*C. */
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, 0, 2, 2, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK(c[0] == 9.0f);
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, 2, 2, 0, 0, 0, 1.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK(c[0] == 9.0f);
    ZT_CHECK(zt_matmul(c, a, ZT_F32, b, ZT_F32, 2, 2, 0, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    ZT_CHECK(c[0] == 0.0f && c[3] == 0.0f);
}

/* The argument rules every backend's matmul shares (zt_matmul_check_args, called by the
 * CPU's and the CUDA table's): what each shape leaves to do, and the refusals with
 * nothing to do. */
static void test_shared_argument_rules(void)
{
    float a[4] = {0}, b[4] = {0}, c[4] = {0};
    zt_err err = {0};
    zt_mm_work w = ZT_MM_PRODUCT;
    ZT_CHECK(zt_matmul_check_args(c, a, ZT_F32, b, ZT_F32, 2, 2, 2, 0.0f, ZT_F32, &w, &err) == ZT_OK);
    ZT_CHECK(w == ZT_MM_PRODUCT);
    ZT_CHECK(zt_matmul_check_args(c, a, ZT_F32, b, ZT_F32, 2, 2, 0, 1.0f, ZT_F32, &w, &err) == ZT_OK);
    ZT_CHECK(w == ZT_MM_SCALE_C);
    ZT_CHECK(zt_matmul_check_args(NULL, NULL, ZT_F32, NULL, ZT_F32, 0, 2, 2, 0.0f, ZT_F32, &w, &err) == ZT_OK);
    ZT_CHECK(w == ZT_MM_NOTHING);
    /* bf16 operands with fp16 compute, fp16 with bf16 compute, a NULL operand */
    ZT_CHECK(zt_matmul_check_args(c, a, ZT_BF16, b, ZT_F32, 2, 2, 2, 0.0f, ZT_F16, &w, &err) == ZT_EINPUT);
    ZT_CHECK(w == ZT_MM_NOTHING && strstr(err.msg, "unsupported dtypes") != NULL);
    ZT_CHECK(zt_matmul_check_args(c, a, ZT_F16, b, ZT_F32, 2, 2, 2, 0.0f, ZT_BF16, &w, &err) == ZT_EINPUT);
    ZT_CHECK(zt_matmul_check_args(c, NULL, ZT_F32, b, ZT_F32, 2, 2, 2, 0.0f, ZT_F32, &w, &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "NULL buffer") != NULL);
}

static void test_peak_is_positive(void)
{
    double f32 = zt_matmul_peak_gflops(ZT_F32), bf16 = zt_matmul_peak_gflops(ZT_BF16);
    ZT_CHECK(f32 > 0.0 && isfinite(f32));
    ZT_CHECK(bf16 > 0.0 && isfinite(bf16));
    printf("     peak fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", f32, bf16);
}

static void test_shutdown_releases_scratch(void)
{
    zt_matmul_shutdown();
    ZT_CHECK_MSG(zt_mem_current(ZT_MEM_OTHER) == 0, "%zu bytes left",
                 zt_mem_current(ZT_MEM_OTHER));
    /* The module starts over cleanly after a shutdown. */
    check_case(7, 13, 29, 1, 1, 1.0f, ZT_F32, ZT_BF16, ZT_BF16);
    zt_matmul_shutdown();
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == 0);
}

int main(void)
{
    printf("     oneDNN %s, ISA %s, native bf16 %s\n", zt_matmul_dnnl_version(),
           zt_matmul_isa_name(), zt_matmul_has_native_bf16() ? "yes" : "no");
    ZT_RUN(test_f32_all_layouts);
    ZT_RUN(test_bf16_compute_bf16_inputs);
    ZT_RUN(test_bf16_compute_f32_inputs);
    ZT_RUN(test_f32_compute_bf16_inputs);
    ZT_RUN(test_mixed_inputs);
    ZT_RUN(test_larger_shapes);
    ZT_RUN(test_repeated_calls_reuse_cache);
    ZT_RUN(test_bad_arguments_are_errors);
    ZT_RUN(test_shared_argument_rules);
    ZT_RUN(test_peak_is_positive);
    ZT_RUN(test_shutdown_releases_scratch);
    ZT_TEST_MAIN_END();
}
