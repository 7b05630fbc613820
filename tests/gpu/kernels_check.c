/* kernels_check.c — every entry of the CUDA backend's table against its CPU twin.
 *
 *   build-cuda/tests/gpu/kernels_check [--seed N] [--no-matmul] [--only GROUP]
 *
 * Built by `make cuda`, run by tests/gpu/check.sh on a machine with a GPU (it is not
 * part of `make test`, which runs without one).  For each kernel and case: random
 * inputs (seeded), the same inputs to both tables, every device output poisoned with
 * NaN (all bits set) before the GPU runs (outputs a kernel accumulates into get the
 * same random start values on both devices instead), then the outputs compared.  One
 * line per check, "ok" or "FAIL", the measured error and its bound, then a summary.
 * Exit 0 when everything passed, 1 when anything failed, 3 when there is no CUDA device
 * (nothing was run, and nothing is reported as passed), 2 for bad usage.
 *
 * The error of an output is max_i |gpu_i - cpu_i| / max(|cpu_i|, rms(cpu)): relative
 * per element, with the output's root mean square as the floor for elements near zero
 * (a sum of K terms computed in two orders differs by ~sqrt(K) fp32 roundings of the
 * sum's typical size, not of its value where it happens to cancel).  NaN anywhere
 * fails.  Bounds:
 *  - EXACT (0): what must be the same bits — conversions (round to nearest even),
 *    copies, transposes, the embedding, the gradient passes, and the kernels whose
 *    CUDA code repeats the CPU's operations in the CPU's order (RoPE, SwiGLU, AdamW:
 *    see each .cu file).  Checked bit for bit.
 *  - FP32_TOL = 1e-5: fp32 results whose sums run in another order on the GPU
 *    (cuBLASLt's blocking, block-tree reductions, attention's D): a few fp32 roundings
 *    of the result's scale.
 *  - BF16_TOL = 2^-7 + 1e-5 for results with a bf16 rounding in their path: both
 *    devices round the same fp32 value with the same rule (round to nearest even), so
 *    most such values are identical; but where the fp32 value already differs in its
 *    last bits (the order of a sum, as above) and sits next to a bf16 rounding
 *    midpoint, the two roundings land on neighbouring bf16 values, one bf16 ulp apart:
 *    at most 2^-7 of the value (bf16 keeps 8 significant bits).  A value computed
 *    from such an operand (a bf16 probability or score gradient in attention, a
 *    product's bf16 input) moves by at most that fraction of the term it feeds, so
 *    2^-7 of the output's scale, plus the fp32 part, bounds every bf16 path.  A wrong
 *    kernel is off by O(1); a kernel that skipped the bf16 rounding is off by ~2^-9 on
 *    average, but in a way the fp32 twin (checked at 1e-5) would not be — both modes
 *    are checked.
 *  - double sums (sumsq, the cross-entropy loss, the AdamW audit's ratio): 1e-10; the
 *    audit's counts must be equal.
 * Determinism: the kernels that sum (attention, embedding backward, RMSNorm backward,
 * cross-entropy, sums of squares) are run twice and must give the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/dtype.h"
#include "../../src/core/rng.h"
#include "../../src/kernels/backend.h"
#include "../../src/kernels/backend_cuda.h"

#define EXACT 0.0
#define FP32_TOL 1e-5
#define BF16_TOL (1.0 / 128 + 1e-5)
#define DOUBLE_TOL 1e-10

static const zt_backend *cpu, *gpu;
static uint64_t rng_state = 20261201;
static int n_passed, n_failed, n_skipped;
/* --no-matmul: for tools/cuda_emu/run.sh, whose CPU emulation has no cuBLASLt; the
 * products are then reported as skipped, never as passed */
static int no_matmul;
/* --only NAME: run one group of checks (memory, matmul, embed, rmsnorm, rope, swiglu, bias,
 * transpose, xent, attention, cache, adamw, reductions) */
static const char *only;

/* ---- reporting ------------------------------------------------------------------------ */

static void report(const char *name, double err, double bound, const char *note)
{
    const int ok = err <= bound; /* NaN fails */
    printf("%s %-58s err %-10.3g bound %-9.3g%s\n", ok ? "ok  " : "FAIL", name, err, bound, note ? note : "");
    fflush(stdout);
    if (ok)
        n_passed++;
    else
        n_failed++;
}

static void die(const char *what, const zt_err *err)
{
    fprintf(stderr, "kernels_check: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

/* ---- buffers ------------------------------------------------------------------------- */

#define MAX_DEV 64
static struct { void *p; size_t bytes; } dev_bufs[MAX_DEV];
static int n_dev;

static void *host(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "kernels_check: out of host memory\n");
        exit(1);
    }
    return p;
}

static void up(void *d, const void *h, size_t bytes)
{
    zt_err err = {0};
    if (zt_cuda_upload(d, h, bytes, &err))
        die("upload", &err);
}

static void down(void *h, const void *d, size_t bytes)
{
    zt_err err = {0};
    if (zt_cuda_download(h, d, bytes, &err))
        die("download", &err);
}

/* A device buffer (freed by dev_free_all), holding a copy of h when h is not NULL. */
static void *dev(const void *h, size_t bytes)
{
    if (n_dev == MAX_DEV) {
        fprintf(stderr, "kernels_check: too many device buffers\n");
        exit(1);
    }
    void *d = gpu->alloc(ZT_MEM_OTHER, bytes);
    if (!d) {
        fprintf(stderr, "kernels_check: out of device memory (%zu bytes)\n", bytes);
        exit(1);
    }
    dev_bufs[n_dev].p = d, dev_bufs[n_dev].bytes = bytes, n_dev++;
    if (h)
        up(d, h, bytes);
    return d;
}

/* NaN in every fp32, bf16 and fp16 element: all bits set */
static void poison(void *d, size_t bytes)
{
    unsigned char *h = host(bytes);
    memset(h, 0xff, bytes);
    up(d, h, bytes);
    free(h);
}

static void dev_free_all(void)
{
    for (int i = 0; i < n_dev; i++)
        gpu->free(ZT_MEM_OTHER, dev_bufs[i].p, dev_bufs[i].bytes);
    n_dev = 0;
}

static float *randn(size_t n, float scale)
{
    float *x = host(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)zt_rand_normal(&rng_state) * scale;
    return x;
}

/* n values of x (fp32) converted to dt, in a fresh host buffer */
static void *as_dtype(const float *x, zt_dtype dt, size_t n)
{
    void *h = host(n * zt_dtype_size(dt));
    zt_convert(h, dt, x, ZT_F32, n);
    return h;
}

/* ---- comparison ------------------------------------------------------------------------ */

/* max_i |got - want| / max(|want|, rms(want)); INFINITY on any NaN or inf mismatch */
static double rel_err(const void *got, const void *want, zt_dtype dt, size_t n)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) {
        double w = zt_load_f32(want, dt, i);
        ss += isfinite(w) ? w * w : 0.0;
    }
    double floor_ = n ? sqrt(ss / (double)n) : 0.0;
    if (floor_ == 0.0)
        floor_ = 1e-30;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = zt_load_f32(got, dt, i), w = zt_load_f32(want, dt, i);
        if (isnan(g) || isnan(w) || isinf(g) || isinf(w)) {
            if (!(isinf(g) && isinf(w) && g == w))
                return INFINITY;
            continue;
        }
        double s = fabs(w) > floor_ ? fabs(w) : floor_;
        double e = fabs(g - w) / s;
        if (e > worst)
            worst = e;
    }
    return worst;
}

/* Compare n elements of dt: device buffer d against the CPU's host buffer want.  A
 * bound of EXACT compares the bits. */
static void check(const char *name, const void *d, const void *want, zt_dtype dt, size_t n, double bound)
{
    size_t bytes = n * zt_dtype_size(dt);
    void *got = host(bytes);
    down(got, d, bytes);
    if (bound == EXACT) {
        size_t diff = 0, first = 0;
        const unsigned char *a = got, *b = want;
        size_t es = zt_dtype_size(dt);
        for (size_t i = 0; i < n; i++)
            if (memcmp(a + i * es, b + i * es, es)) {
                if (!diff)
                    first = i;
                diff++;
            }
        char note[160] = "";
        if (diff)
            snprintf(note, sizeof note, "  (%zu of %zu differ, first at %zu: %g vs %g)", diff, n, first,
                     (double)zt_load_f32(got, dt, first), (double)zt_load_f32(want, dt, first));
        /* differing bits fail even where the values compare equal (-0 and 0) */
        report(name, diff ? rel_err(got, want, dt, n) + 1e-300 : 0.0, bound, note);
    } else {
        report(name, rel_err(got, want, dt, n), bound, NULL);
    }
    free(got);
}

/* The device buffer d must hold the same bytes as the device buffer e (determinism). */
static void check_same(const char *name, const void *d, const void *e, size_t bytes)
{
    unsigned char *a = host(bytes), *b = host(bytes);
    down(a, d, bytes);
    down(b, e, bytes);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++)
        diff += a[i] != b[i];
    char note[64] = "";
    if (diff)
        snprintf(note, sizeof note, "  (%zu bytes differ)", diff);
    report(name, diff ? 1.0 : 0.0, EXACT, note);
    free(a);
    free(b);
}

static void check_scalar(const char *name, double got, double want, double bound)
{
    double s = fabs(want) > 1e-30 ? fabs(want) : 1e-30;
    report(name, isfinite(got) ? fabs(got - want) / s : INFINITY, bound, NULL);
}

/* ---- memory: alloc is zeroed, copy, zero, convert ------------------------------------- */

static void check_memory(void)
{
    const size_t n = 100003;
    float *x = randn(n, 1.0f), *zeros = host(n * sizeof(float));
    void *a = dev(NULL, n * sizeof(float));
    check("alloc: zero-filled", a, zeros, ZT_F32, n, EXACT);
    void *b = dev(x, n * sizeof(float));
    poison(a, n * sizeof(float));
    gpu->copy(a, b, n * sizeof(float));
    check("copy", a, x, ZT_F32, n, EXACT);
    gpu->zero(a, n * sizeof(float));
    check("zero", a, zeros, ZT_F32, n, EXACT);
    /* the entries that move bytes (backend.h): to_device, to_host, pinned staging */
    report("host_visible is 0 (device buffers)", gpu->host_visible == 0 ? 0.0 : 1.0, EXACT, NULL);
    report("stream is the compute stream", gpu->stream() && gpu->stream() == zt_cuda_stream() ? 0.0 : 1.0, EXACT,
           NULL);
    float *pinned = gpu->host_alloc(ZT_MEM_OTHER, n * sizeof(float));
    if (!pinned) {
        report("host_alloc (pinned staging)", INFINITY, EXACT, "  (NULL)");
    } else {
        memcpy(pinned, x, n * sizeof(float));
        poison(a, n * sizeof(float));
        gpu->to_device(a, pinned, n * sizeof(float));
        memset(pinned, 0, n * sizeof(float)); /* to_device has returned: the source is free again */
        gpu->sync();
        check("to_device from pinned memory", a, x, ZT_F32, n, EXACT);
        gpu->to_host(pinned, b, n * sizeof(float));
        report("to_host into pinned memory", memcmp(pinned, x, n * sizeof(float)) ? 1.0 : 0.0, EXACT, NULL);
        gpu->host_free(ZT_MEM_OTHER, pinned, n * sizeof(float));
    }

    /* conversions, including ties, subnormals, overflow, inf and NaN */
    float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* bf16 tie, even down */,
                       1.01171875f /* tie, odd: rounds up */, 65504.0f, 65520.0f /* fp16 inf */, 1e-8f,
                       5.96e-8f /* fp16 subnormal min */, 2.98e-8f, 1e-40f /* fp32 subnormal */, INFINITY,
                       -INFINITY, NAN, 3.3895313892515355e38f /* bf16 max */, 3.4e38f};
    const size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < ns; i++)
        x[i] = special[i];
    for (size_t i = ns; i < n; i++) /* wide exponents */
        x[i] = (float)(zt_rand_normal(&rng_state) * exp2(zt_rand_uniform(&rng_state) * 60.0 - 30.0));
    static const zt_dtype dts[] = {ZT_F32, ZT_BF16, ZT_F16};
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 3; t++) {
            zt_dtype sd = dts[s], dd = dts[t];
            void *src = as_dtype(x, sd, n); /* the source values, already in sd */
            void *want = host(n * zt_dtype_size(dd));
            cpu->convert(want, dd, src, sd, n);
            void *dsrc = dev(src, n * zt_dtype_size(sd));
            void *ddst = dev(NULL, n * zt_dtype_size(dd));
            poison(ddst, n * zt_dtype_size(dd));
            gpu->convert(ddst, dd, dsrc, sd, n);
            char name[96];
            snprintf(name, sizeof name, "convert %s -> %s", zt_dtype_name(sd), zt_dtype_name(dd));
            check(name, ddst, want, dd, n, EXACT);
            free(src);
            free(want);
        }
    free(x);
    free(zeros);
    dev_free_all();
}

/* ---- matmul ---------------------------------------------------------------------------- */

static void check_matmul_case(int M, int N, int K, int ta, int tb, float beta, zt_dtype a_dt, zt_dtype b_dt,
                              zt_dtype compute)
{
    float *A = randn((size_t)M * K, 1.0f), *B = randn((size_t)K * N, 1.0f), *C0 = randn((size_t)M * N, 1.0f);
    void *Ah = as_dtype(A, a_dt, (size_t)M * K), *Bh = as_dtype(B, b_dt, (size_t)K * N);
    float *want = host((size_t)M * N * sizeof(float));
    memcpy(want, C0, (size_t)M * N * sizeof(float));
    zt_err err = {0};
    if (cpu->matmul(want, Ah, a_dt, Bh, b_dt, M, N, K, ta, tb, beta, compute, &err))
        die("cpu matmul", &err);
    void *dA = dev(Ah, (size_t)M * K * zt_dtype_size(a_dt)), *dB = dev(Bh, (size_t)K * N * zt_dtype_size(b_dt));
    float *dC = dev(NULL, (size_t)M * N * sizeof(float));
    if (beta != 0.0f)
        up(dC, C0, (size_t)M * N * sizeof(float));
    else
        poison(dC, (size_t)M * N * sizeof(float)); /* beta = 0 must not read C */
    char name[128];
    snprintf(name, sizeof name, "matmul %dx%dx%d %s%s A %s B %s compute %s beta %g", M, N, K, ta ? "A^T " : "",
             tb ? "B^T" : "", zt_dtype_name(a_dt), zt_dtype_name(b_dt), zt_dtype_name(compute), (double)beta);
    if (gpu->matmul(dC, dA, a_dt, dB, b_dt, M, N, K, ta, tb, beta, compute, &err)) {
        report(name, INFINITY, 0, "  (error)");
        fprintf(stderr, "  %s\n", err.msg);
    } else {
        check(name, dC, want, ZT_F32, (size_t)M * N, FP32_TOL);
    }
    free(A), free(B), free(C0), free(Ah), free(Bh), free(want);
    dev_free_all();
}

static void check_matmul(void)
{
    if (no_matmul) {
        printf("skip matmul (every case): not run (--no-matmul)\n");
        n_skipped++;
        return;
    }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int bz = 0; bz < 2; bz++) {
                check_matmul_case(67, 45, 129, ta, tb, bz ? 1.0f : 0.0f, ZT_F32, ZT_F32, ZT_F32);
                check_matmul_case(67, 45, 129, ta, tb, bz ? 1.0f : 0.0f, ZT_BF16, ZT_BF16, ZT_BF16);
            }
    /* fp32 inputs rounded for bf16 and fp16 compute; bf16 inputs widened for fp32 */
    check_matmul_case(64, 96, 200, 0, 1, 0.0f, ZT_F32, ZT_BF16, ZT_BF16);
    check_matmul_case(64, 96, 200, 0, 1, 0.0f, ZT_F32, ZT_F32, ZT_F16);
    check_matmul_case(64, 96, 200, 0, 1, 1.0f, ZT_BF16, ZT_BF16, ZT_F32);
    /* a linear layer's three products at a Llama-like size */
    check_matmul_case(512, 768, 1024, 0, 1, 0.0f, ZT_BF16, ZT_BF16, ZT_BF16);
    check_matmul_case(512, 1024, 768, 0, 0, 0.0f, ZT_BF16, ZT_BF16, ZT_BF16);
    check_matmul_case(768, 1024, 512, 1, 0, 1.0f, ZT_BF16, ZT_BF16, ZT_BF16);
    check_matmul_case(512, 768, 1024, 0, 1, 0.0f, ZT_F32, ZT_F32, ZT_F32);
    /* an operand at an odd offset (2-byte aligned) still finds an algorithm */
    {
        const int M = 33, N = 40, K = 72;
        float *A = randn((size_t)M * K, 1.0f), *B = randn((size_t)K * N, 1.0f);
        uint16_t *Ah = as_dtype(A, ZT_BF16, (size_t)M * K), *Bh = as_dtype(B, ZT_BF16, (size_t)K * N);
        float *want = host((size_t)M * N * sizeof(float));
        zt_err err = {0};
        if (cpu->matmul(want, Ah, ZT_BF16, Bh, ZT_BF16, M, N, K, 0, 1, 0.0f, ZT_BF16, &err))
            die("cpu matmul", &err);
        uint16_t *dA = dev(NULL, ((size_t)M * K + 1) * 2), *dB = dev(Bh, (size_t)K * N * 2);
        up(dA + 1, Ah, (size_t)M * K * 2);
        float *dC = dev(NULL, (size_t)M * N * sizeof(float));
        poison(dC, (size_t)M * N * sizeof(float));
        if (gpu->matmul(dC, dA + 1, ZT_BF16, dB, ZT_BF16, M, N, K, 0, 1, 0.0f, ZT_BF16, &err)) {
            report("matmul, A at a 2-byte offset", INFINITY, 0, "  (error)");
            fprintf(stderr, "  %s\n", err.msg);
        } else {
            check("matmul, A at a 2-byte offset", dC, want, ZT_F32, (size_t)M * N, FP32_TOL);
        }
        free(A), free(B), free(Ah), free(Bh), free(want);
        dev_free_all();
    }
    /* bad arguments are errors, as on the CPU */
    {
        zt_err err = {0};
        int rc = gpu->matmul(NULL, NULL, ZT_F32, NULL, ZT_F32, 4, 4, 4, 0, 0, 0.5f, ZT_F32, &err);
        report("matmul refuses beta 0.5 (ZT_EINPUT)", rc == ZT_EINPUT ? 0.0 : 1.0, EXACT, NULL);
    }
}

/* ---- the model's elementwise and row kernels -------------------------------------------- */

static void check_embed(void)
{
    const int V = 50, C = 72, N = 64;
    int tokens[64];
    for (int i = 0; i < N; i++) /* many repeats */
        tokens[i] = (int)(zt_rand_next(&rng_state) % 11) * 4;
    float *wte = randn((size_t)V * C, 1.0f);
    for (int b = 0; b < 2; b++) {
        zt_dtype dt = b ? ZT_BF16 : ZT_F32;
        void *w = as_dtype(wte, dt, (size_t)V * C);
        float *want = host((size_t)N * C * sizeof(float));
        cpu->embed_forward(want, w, dt, tokens, N, C);
        void *dw = dev(w, (size_t)V * C * zt_dtype_size(dt));
        float *dx = dev(NULL, (size_t)N * C * sizeof(float));
        poison(dx, (size_t)N * C * sizeof(float));
        gpu->embed_forward(dx, dw, dt, tokens, N, C);
        check(dt == ZT_F32 ? "embed forward, fp32 table" : "embed forward, bf16 table", dx, want, ZT_F32,
              (size_t)N * C, EXACT);
        free(w), free(want);
        dev_free_all();
    }
    float *dx = randn((size_t)N * C, 1.0f), *dwte = randn((size_t)V * C, 1.0f);
    float *want = host((size_t)V * C * sizeof(float));
    memcpy(want, dwte, (size_t)V * C * sizeof(float));
    cpu->embed_backward(want, dx, tokens, N, C);
    float *ddx = dev(dx, (size_t)N * C * sizeof(float));
    float *d1 = dev(dwte, (size_t)V * C * sizeof(float)), *d2 = dev(dwte, (size_t)V * C * sizeof(float));
    gpu->embed_backward(d1, ddx, tokens, N, C);
    gpu->embed_backward(d2, ddx, tokens, N, C);
    check("embed backward (accumulates; repeated tokens)", d1, want, ZT_F32, (size_t)V * C, EXACT);
    check_same("embed backward, run twice: same bits", d1, d2, (size_t)V * C * sizeof(float));
    free(wte), free(dx), free(dwte), free(want);
    dev_free_all();
}

static void check_rmsnorm(void)
{
    const int N = 37, C = 200;
    const float eps = 1e-5f;
    float *x = randn((size_t)N * C, 2.0f), *w = randn(C, 1.0f);
    for (int b = 0; b < 2; b++) {
        zt_dtype yd = b ? ZT_BF16 : ZT_F32;
        void *y = host((size_t)N * C * zt_dtype_size(yd));
        float *rstd = host(N * sizeof(float));
        cpu->rmsnorm_forward(y, yd, rstd, x, w, N, C, eps);
        float *dx_ = dev(x, (size_t)N * C * 4), *dw_ = dev(w, (size_t)C * 4), *dr = dev(NULL, (size_t)N * 4);
        void *dy = dev(NULL, (size_t)N * C * zt_dtype_size(yd));
        poison(dy, (size_t)N * C * zt_dtype_size(yd));
        poison(dr, (size_t)N * 4);
        gpu->rmsnorm_forward(dy, yd, dr, dx_, dw_, N, C, eps);
        check(b ? "rmsnorm forward y (bf16)" : "rmsnorm forward y (fp32)", dy, y, yd, (size_t)N * C,
              b ? BF16_TOL : FP32_TOL);
        check("rmsnorm forward rstd", dr, rstd, ZT_F32, N, FP32_TOL);
        free(y), free(rstd);
        dev_free_all();
    }
    /* backward: dx and dw accumulate, dx_bf16 optional */
    float *rstd = host(N * sizeof(float)), *y = host((size_t)N * C * 4);
    cpu->rmsnorm_forward(y, ZT_F32, rstd, x, w, N, C, eps);
    float *dy = randn((size_t)N * C, 1.0f), *dx0 = randn((size_t)N * C, 1.0f), *dw0 = randn(C, 1.0f);
    for (int b = 0; b < 2; b++) {
        float *dx = host((size_t)N * C * 4), *dw = host((size_t)C * 4);
        uint16_t *dx16 = b ? host((size_t)N * C * 2) : NULL;
        memcpy(dx, dx0, (size_t)N * C * 4);
        memcpy(dw, dw0, (size_t)C * 4);
        cpu->rmsnorm_backward(dx, dx16, dw, dy, x, w, rstd, N, C);
        float *ddx = dev(dx0, (size_t)N * C * 4), *ddw = dev(dw0, (size_t)C * 4);
        float *ddx2 = dev(dx0, (size_t)N * C * 4), *ddw2 = dev(dw0, (size_t)C * 4);
        uint16_t *d16 = b ? dev(NULL, (size_t)N * C * 2) : NULL;
        if (d16)
            poison(d16, (size_t)N * C * 2);
        float *ddy = dev(dy, (size_t)N * C * 4), *dxx = dev(x, (size_t)N * C * 4), *dww = dev(w, (size_t)C * 4);
        float *drs = dev(rstd, (size_t)N * 4);
        gpu->rmsnorm_backward(ddx, d16, ddw, ddy, dxx, dww, drs, N, C);
        gpu->rmsnorm_backward(ddx2, NULL, ddw2, ddy, dxx, dww, drs, N, C);
        check(b ? "rmsnorm backward dx (+=), with bf16 copy" : "rmsnorm backward dx (+=)", ddx, dx, ZT_F32,
              (size_t)N * C, FP32_TOL);
        check("rmsnorm backward dw (+=)", ddw, dw, ZT_F32, C, FP32_TOL);
        if (d16)
            check("rmsnorm backward dx bf16 copy", d16, dx16, ZT_BF16, (size_t)N * C, BF16_TOL);
        else
            check_same("rmsnorm backward dw, run twice: same bits", ddw, ddw2, (size_t)C * 4);
        free(dx), free(dw), free(dx16);
        dev_free_all();
    }
    free(x), free(w), free(rstd), free(y), free(dy), free(dx0), free(dw0);
}

static void check_rope(void)
{
    const int B = 2, T = 70, nh = 4, nkv = 2;
    static const int hds[] = {64, 128};
    static const float thetas[] = {10000.0f, 500000.0f};
    for (int k = 0; k < 2; k++) {
        const int hd = hds[k];
        /* the second with Llama 3.1's rope_scaling: hd 128 at theta 5e5 has wavelengths in
         * all three of its bands (rope_freq.h) */
        const zt_rope_freqs f = {thetas[k], k == 1, 8.0, 1.0, 4.0, 8192.0};
        const size_t tab = (size_t)T * hd / 2, n = (size_t)B * T * (nh + 2 * nkv) * hd;
        float *c = host(tab * 4), *s = host(tab * 4);
        cpu->rope_tables(c, s, T, hd, &f);
        float *dc = dev(NULL, tab * 4), *ds = dev(NULL, tab * 4);
        poison(dc, tab * 4), poison(ds, tab * 4);
        gpu->rope_tables(dc, ds, T, hd, &f);
        char name[96];
        snprintf(name, sizeof name, "rope tables cos (hd %d, theta %g, llama3 %d)", hd, (double)thetas[k], f.llama3);
        check(name, dc, c, ZT_F32, tab, FP32_TOL);
        snprintf(name, sizeof name, "rope tables sin (hd %d, theta %g, llama3 %d)", hd, (double)thetas[k], f.llama3);
        check(name, ds, s, ZT_F32, tab, FP32_TOL);
        /* forward and backward from the same (CPU) tables */
        up(dc, c, tab * 4), up(ds, s, tab * 4);
        float *x = randn(n, 1.0f), *want = host(n * 4);
        for (int dir = 0; dir < 2; dir++) {
            memcpy(want, x, n * 4);
            float *dx = dev(x, n * 4);
            if (dir == 0) {
                cpu->rope_forward(want, c, s, B, T, nh, nkv, hd);
                gpu->rope_forward(dx, dc, ds, B, T, nh, nkv, hd);
            } else {
                cpu->rope_backward(want, c, s, B, T, nh, nkv, hd);
                gpu->rope_backward(dx, dc, ds, B, T, nh, nkv, hd);
            }
            snprintf(name, sizeof name, "rope %s in place (hd %d; v untouched)", dir ? "backward" : "forward", hd);
            check(name, dx, want, ZT_F32, n, EXACT);
        }
        free(c), free(s), free(x), free(want);
        dev_free_all();
    }
}

static void check_swiglu(void)
{
    const int N = 33, F = 300;
    float *gu = randn((size_t)N * 2 * F, 3.0f), *dh = randn((size_t)N * F, 1.0f);
    gu[0] = -200.0f, gu[1] = 200.0f; /* exp overflow and underflow */
    for (int b = 0; b < 2; b++) {
        zt_dtype dt = b ? ZT_BF16 : ZT_F32;
        size_t es = zt_dtype_size(dt);
        void *h = host((size_t)N * F * es), *dgu = host((size_t)N * 2 * F * es);
        cpu->swiglu_forward(h, dt, gu, N, F);
        cpu->swiglu_backward(dgu, dt, dh, gu, N, F);
        float *dgu_in = dev(gu, (size_t)N * 2 * F * 4), *ddh = dev(dh, (size_t)N * F * 4);
        void *dhout = dev(NULL, (size_t)N * F * es), *ddgu = dev(NULL, (size_t)N * 2 * F * es);
        poison(dhout, (size_t)N * F * es), poison(ddgu, (size_t)N * 2 * F * es);
        gpu->swiglu_forward(dhout, dt, dgu_in, N, F);
        gpu->swiglu_backward(ddgu, dt, ddh, dgu_in, N, F);
        check(b ? "swiglu forward (bf16 out)" : "swiglu forward (fp32)", dhout, h, dt, (size_t)N * F, EXACT);
        check(b ? "swiglu backward (bf16 out)" : "swiglu backward (fp32)", ddgu, dgu, dt, (size_t)N * 2 * F, EXACT);
        free(h), free(dgu);
        dev_free_all();
    }
    free(gu), free(dh);
}

/* the q/k/v biases (Qwen2): added to an fp32 product from fp32 or bf16 parameters, and
 * the gradient as column sums added to what is there (bias.c's order of sums: exact) */
static void check_bias(void)
{
    const int N = 70, D = 200;
    float *y0 = randn((size_t)N * D, 1.0f), *dy = randn((size_t)N * D, 1.0f), *b = randn((size_t)D, 1.0f);
    float *db0 = randn((size_t)D, 1.0f);
    for (int k = 0; k < 2; k++) {
        zt_dtype dt = k ? ZT_BF16 : ZT_F32;
        void *bh = host((size_t)D * 4);
        zt_convert(bh, dt, b, ZT_F32, (size_t)D);
        float *y = host((size_t)N * D * 4), *db = host((size_t)D * 4);
        memcpy(y, y0, (size_t)N * D * 4), memcpy(db, db0, (size_t)D * 4);
        cpu->bias_forward(y, bh, dt, N, D);
        cpu->bias_backward(db, dy, N, D);
        float *dyv = dev(y0, (size_t)N * D * 4), *ddb = dev(db0, (size_t)D * 4), *ddy = dev(dy, (size_t)N * D * 4);
        void *db_ = dev(bh, (size_t)D * zt_dtype_size(dt));
        gpu->bias_forward(dyv, db_, dt, N, D);
        gpu->bias_backward(ddb, ddy, N, D);
        check(k ? "bias forward (bf16 bias)" : "bias forward (fp32)", dyv, y, ZT_F32, (size_t)N * D, EXACT);
        check("bias backward (column sums)", ddb, db, ZT_F32, (size_t)D, EXACT);
        free(bh), free(y), free(db);
        dev_free_all();
    }
    free(y0), free(dy), free(b), free(db0);
}

static void check_transpose(void)
{
    const int R = 70, Cc = 45;
    float *x = randn((size_t)R * Cc, 1.0f), *want = host((size_t)R * Cc * 4);
    cpu->transpose(want, x, R, Cc);
    float *dx = dev(x, (size_t)R * Cc * 4), *dt = dev(NULL, (size_t)R * Cc * 4);
    poison(dt, (size_t)R * Cc * 4);
    gpu->transpose(dt, dx, R, Cc);
    check("transpose 70 x 45", dt, want, ZT_F32, (size_t)R * Cc, EXACT);
    free(x), free(want);
    dev_free_all();
}

static void check_xent(void)
{
    const int N = 20, V = 1000;
    const float gs = 1.0f / N;
    int targets[20];
    for (int i = 0; i < N; i++)
        targets[i] = (int)(zt_rand_next(&rng_state) % V);
    float *logits = randn((size_t)N * V, 3.0f);
    const size_t n = (size_t)N * V;
    /* loss only */
    double want_loss = cpu->xent(NULL, NULL, logits, targets, N, V, gs);
    float *dl = dev(logits, n * 4);
    check_scalar("xent loss only (sum over rows)", gpu->xent(NULL, NULL, dl, targets, N, V, gs), want_loss, DOUBLE_TOL);
    /* separate gradient buffer */
    float *want = host(n * 4);
    double l1 = cpu->xent(want, NULL, logits, targets, N, V, gs);
    float *dg = dev(NULL, n * 4);
    poison(dg, n * 4);
    check_scalar("xent loss (with gradient)", gpu->xent(dg, NULL, dl, targets, N, V, gs), l1, DOUBLE_TOL);
    check("xent dlogits (fp32)", dg, want, ZT_F32, n, FP32_TOL);
    float *dg2 = dev(NULL, n * 4);
    gpu->xent(dg2, NULL, dl, targets, N, V, gs);
    check_same("xent dlogits, run twice: same bits", dg, dg2, n * 4);
    /* in place */
    float *inplace = host(n * 4);
    memcpy(inplace, logits, n * 4);
    cpu->xent(inplace, NULL, inplace, targets, N, V, gs);
    float *dip = dev(logits, n * 4);
    gpu->xent(dip, NULL, dip, targets, N, V, gs);
    check("xent dlogits in place (dlogits == logits)", dip, inplace, ZT_F32, n, FP32_TOL);
    /* bf16 gradient */
    uint16_t *want16 = host(n * 2);
    float *scratch = host(n * 4);
    cpu->xent(scratch, want16, logits, targets, N, V, gs);
    uint16_t *d16 = dev(NULL, n * 2);
    poison(d16, n * 2);
    gpu->xent(dg, d16, dl, targets, N, V, gs);
    check("xent dlogits (bf16)", d16, want16, ZT_BF16, n, BF16_TOL);
    free(logits), free(want), free(inplace), free(want16), free(scratch);
    dev_free_all();
}

/* ---- attention ------------------------------------------------------------------------- */

static void check_attention_case(int B, int T, int nh, int nkv, int hd, int window, zt_dtype opd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    size_t cs = cpu->attention_scratch_bytes(B, T, nkv, hd, opd), gs = gpu->attention_scratch_bytes(B, T, nkv, hd, opd);
    const int m16 = cs > 0;
    char tag[96];
    snprintf(tag, sizeof tag, "B=%d T=%d nh=%d nkv=%d hd=%d window=%d %s", B, T, nh, nkv, hd, window,
             m16 ? "bf16 operands" : "fp32");
    char name[160];
    snprintf(name, sizeof name, "attention scratch: both or neither (%s)", tag);
    report(name, (cs > 0) == (gs > 0) ? 0.0 : 1.0, EXACT, NULL);
    void *cscratch = cs ? host(cs) : NULL;
    float *out = host(nout * 4), *lse = host(nlse * 4), *dqkv = host(nqkv * 4);
    uint16_t *out16 = host(nout * 2);
    cpu->attention_forward(out, out16, lse, qkv, cscratch, B, T, nh, nkv, hd, window);
    cpu->attention_backward(dqkv, dout, qkv, out, lse, cscratch, B, T, nh, nkv, hd, window);
    const double tol = m16 ? BF16_TOL : FP32_TOL;

    float *dq = dev(qkv, nqkv * 4), *ddo = dev(dout, nout * 4);
    void *gscratch = gs ? dev(NULL, gs) : NULL;
    float *dout_ = dev(NULL, nout * 4), *dlse = dev(NULL, nlse * 4), *ddq = dev(NULL, nqkv * 4);
    float *dout2 = dev(NULL, nout * 4), *ddq2 = dev(NULL, nqkv * 4), *dlse2 = dev(NULL, nlse * 4);
    uint16_t *do16 = dev(NULL, nout * 2);
    poison(dout_, nout * 4), poison(dlse, nlse * 4), poison(ddq, nqkv * 4), poison(do16, nout * 2);
    if (gscratch)
        poison(gscratch, gs);
    gpu->attention_forward(dout_, do16, dlse, dq, gscratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "attention forward out (%s)", tag);
    check(name, dout_, out, ZT_F32, nout, tol);
    snprintf(name, sizeof name, "attention forward out bf16 copy (%s)", tag);
    check(name, do16, out16, ZT_BF16, nout, BF16_TOL);
    snprintf(name, sizeof name, "attention forward lse (%s)", tag);
    check(name, dlse, lse, ZT_F32, nlse, tol);
    /* the backward from the CPU's forward outputs, so it is checked on its own */
    float *dcout = dev(out, nout * 4), *dclse = dev(lse, nlse * 4);
    gpu->attention_backward(ddq, ddo, dq, dcout, dclse, gscratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "attention backward dqkv (%s)", tag);
    check(name, ddq, dqkv, ZT_F32, nqkv, tol);
    /* determinism */
    gpu->attention_forward(dout2, NULL, dlse2, dq, gscratch, B, T, nh, nkv, hd, window);
    gpu->attention_backward(ddq2, ddo, dq, dcout, dclse, gscratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "attention forward+backward twice: same bits (%s)", tag);
    unsigned char *a = host(nqkv * 4), *b = host(nqkv * 4), *c = host(nout * 4), *d = host(nout * 4);
    down(a, ddq, nqkv * 4), down(b, ddq2, nqkv * 4), down(c, dout_, nout * 4), down(d, dout2, nout * 4);
    report(name, memcmp(a, b, nqkv * 4) || memcmp(c, d, nout * 4) ? 1.0 : 0.0, EXACT, NULL);
    free(a), free(b), free(c), free(d);
    free(qkv), free(dout), free(cscratch), free(out), free(lse), free(dqkv), free(out16);
    dev_free_all();
}

static void check_attention(void)
{
    check_attention_case(2, 150, 6, 2, 64, 0, ZT_F32);
    check_attention_case(2, 150, 6, 2, 64, 0, ZT_BF16);
    check_attention_case(1, 64, 4, 4, 128, 0, ZT_F32);
    check_attention_case(1, 130, 4, 4, 128, 0, ZT_BF16);
    check_attention_case(1, 200, 8, 1, 32, 0, ZT_F32);   /* a group of 8 */
    check_attention_case(2, 77, 4, 2, 48, 0, ZT_BF16);   /* hd 48: fp32 operands on both devices */
    check_attention_case(1, 1, 2, 1, 64, 0, ZT_F32);     /* one token */
    check_attention_case(1, 90, 2, 1, 256, 0, ZT_F32);   /* the largest head */
    /* sliding windows: inside a block, across blocks, a whole block with no key for
     * some queries (window 10 at T = 200), and one key (window 1) */
    check_attention_case(1, 200, 4, 2, 64, 10, ZT_F32);
    check_attention_case(1, 200, 4, 2, 64, 10, ZT_BF16);
    check_attention_case(2, 150, 4, 1, 64, 70, ZT_F32);
    check_attention_case(1, 130, 2, 2, 128, 100, ZT_BF16);
    check_attention_case(1, 70, 2, 1, 64, 1, ZT_F32);
}

static void check_attention_cache(void)
{
    const int cap = 100, nh = 6, nkv = 2, hd = 64;
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    static const int cases[][3] = {{0, 1, 0}, {37, 5, 0}, {0, 12, 0}, {99, 1, 0}, {37, 5, 8}, {99, 1, 20}, {0, 12, 3}};
    for (int k = 0; k < 7; k++) {
        const int pos0 = cases[k][0], n = cases[k][1], window = cases[k][2];
        float *q = randn((size_t)n * W, 1.0f), *kc = randn((size_t)nkv * cap * hd, 1.0f),
              *vc = randn((size_t)nkv * cap * hd, 1.0f), *want = host((size_t)n * nh * hd * 4);
        float *scratch = host(cpu->attention_cache_scratch_bytes(cap, 2));
        cpu->attention_cache_forward(want, q, W, kc, vc, cap, pos0, n, nh, nkv, hd, window, scratch, 2);
        float *dq = dev(q, (size_t)n * W * 4), *dk = dev(kc, (size_t)nkv * cap * hd * 4),
              *dv = dev(vc, (size_t)nkv * cap * hd * 4), *dout = dev(NULL, (size_t)n * nh * hd * 4);
        float *gsc = dev(NULL, gpu->attention_cache_scratch_bytes(cap, 2));
        poison(dout, (size_t)n * nh * hd * 4);
        gpu->attention_cache_forward(dout, dq, W, dk, dv, cap, pos0, n, nh, nkv, hd, window, gsc, 2);
        char name[96];
        snprintf(name, sizeof name, "attention over a KV cache (pos0 %d, %d rows, window %d)", pos0, n, window);
        check(name, dout, want, ZT_F32, (size_t)n * nh * hd, FP32_TOL);
        free(q), free(kc), free(vc), free(want), free(scratch);
        dev_free_all();
    }
}

/* ---- the engine's kernels ---------------------------------------------------------------- */

static void check_adamw_case(zt_dtype dt, int with_comp, int cast, zt_dtype cast_dt)
{
    const size_t n = 10007;
    const size_t es = zt_dtype_size(dt);
    float *p = randn(n, 1.0f), *m = randn(n, 0.01f), *v = randn(n, 0.001f), *c = randn(n, 0.001f);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i]; /* second moments are non-negative */
    for (size_t i = 0; i < n; i += 97) /* some updates too small to land */
        p[i] = 1000.0f;
    void *ph = as_dtype(p, dt, n), *mh = as_dtype(m, dt, n), *vh = as_dtype(v, dt, n), *ch = as_dtype(c, dt, n);
    void *dp = dev(ph, n * es), *dm = dev(mh, n * es), *dvv = dev(vh, n * es), *dc = with_comp ? dev(ch, n * es) : NULL;
    void *castc = cast ? host(n * zt_dtype_size(cast_dt)) : NULL;
    void *dcast = cast ? dev(NULL, n * zt_dtype_size(cast_dt)) : NULL;
    zt_adamw_audit ca = {0}, ga = {0};
    for (long t = 1; t <= 3; t++) {
        float *g = randn(n, 0.1f);
        void *gh = as_dtype(g, dt, n);
        void *dg = dev(gh, n * es);
        zt_adamw_step s = {.lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .t = t,
                           .clip = t == 2 ? 0.5f : 1.0f};
        cpu->adamw_step(ph, mh, vh, gh, with_comp ? ch : NULL, dt, n, &s, castc, cast_dt, &ca);
        if (dcast)
            poison(dcast, n * zt_dtype_size(cast_dt));
        gpu->adamw_step(dp, dm, dvv, dg, dc, dt, n, &s, dcast, cast_dt, &ga);
        free(g), free(gh);
    }
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "%s master%s%s%s", zt_dtype_name(dt), with_comp ? ", Kahan" : "",
             cast ? ", cast to " : "", cast ? zt_dtype_name(cast_dt) : "");
    snprintf(name, sizeof name, "adamw p (%s, 3 steps)", tag);
    check(name, dp, ph, dt, n, EXACT);
    snprintf(name, sizeof name, "adamw m (%s)", tag);
    check(name, dm, mh, dt, n, EXACT);
    snprintf(name, sizeof name, "adamw v (%s)", tag);
    check(name, dvv, vh, dt, n, EXACT);
    if (dc) {
        snprintf(name, sizeof name, "adamw compensation (%s)", tag);
        check(name, dc, ch, dt, n, EXACT);
    }
    if (dcast && dt == ZT_F32) {
        snprintf(name, sizeof name, "adamw cast copy (%s)", tag);
        check(name, dcast, castc, cast_dt, n, EXACT);
    }
    snprintf(name, sizeof name, "adamw audit updated, lost: equal counts (%s)", tag);
    report(name, ga.updated == ca.updated && ga.lost == ca.lost ? 0.0 : 1.0, EXACT, NULL);
    if (ga.updated != ca.updated || ga.lost != ca.lost)
        printf("     gpu updated %.0f lost %.0f, cpu updated %.0f lost %.0f\n", ga.updated, ga.lost, ca.updated, ca.lost);
    snprintf(name, sizeof name, "adamw audit ratio sum (%s)", tag);
    check_scalar(name, ga.ratio_sum, ca.ratio_sum, DOUBLE_TOL);
    free(p), free(m), free(v), free(c), free(ph), free(mh), free(vh), free(ch), free(castc);
    dev_free_all();
}

static void check_adamw(void)
{
    check_adamw_case(ZT_F32, 0, 0, ZT_F32);
    check_adamw_case(ZT_F32, 0, 1, ZT_BF16);
    check_adamw_case(ZT_F32, 0, 1, ZT_F16);
    check_adamw_case(ZT_F32, 0, 1, ZT_F32);
    check_adamw_case(ZT_BF16, 0, 0, ZT_F32);
    check_adamw_case(ZT_BF16, 1, 0, ZT_F32);
    check_adamw_case(ZT_F16, 0, 0, ZT_F32);
    check_adamw_case(ZT_F16, 1, 0, ZT_F32);
}

static void check_reductions(void)
{
    const size_t n = 123457;
    float *x = randn(n, 1.0f), *y = randn(n, 1.0f);
    static const zt_dtype dts[] = {ZT_F32, ZT_BF16, ZT_F16};
    char name[96];
    for (int k = 0; k < 3; k++) {
        void *h = as_dtype(x, dts[k], n);
        void *d = dev(h, n * zt_dtype_size(dts[k]));
        double g1 = gpu->sumsq(d, dts[k], n), g2 = gpu->sumsq(d, dts[k], n);
        snprintf(name, sizeof name, "sumsq (%s)", zt_dtype_name(dts[k]));
        check_scalar(name, g1, cpu->sumsq(h, dts[k], n), DOUBLE_TOL);
        snprintf(name, sizeof name, "sumsq (%s), twice: same bits", zt_dtype_name(dts[k]));
        report(name, memcmp(&g1, &g2, sizeof g1) ? 1.0 : 0.0, EXACT, NULL);
        free(h);
        dev_free_all();
    }
    /* accumulate: every pair the CPU accepts */
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            void *acc = as_dtype(x, dts[a], n), *xx = as_dtype(y, dts[b], n);
            void *dacc = dev(acc, n * zt_dtype_size(dts[a])), *dx = dev(xx, n * zt_dtype_size(dts[b]));
            cpu->accumulate(acc, dts[a], xx, dts[b], n);
            gpu->accumulate(dacc, dts[a], dx, dts[b], n);
            snprintf(name, sizeof name, "accumulate %s += %s", zt_dtype_name(dts[a]), zt_dtype_name(dts[b]));
            check(name, dacc, acc, dts[a], n, EXACT);
            free(acc), free(xx);
            dev_free_all();
        }
    {
        float *acc = host(n * 4);
        memcpy(acc, x, n * 4);
        float *dacc = dev(x, n * 4), *dy = dev(y, n * 4);
        cpu->accumulate_bf16_rounded(acc, y, n);
        gpu->accumulate_bf16_rounded(dacc, dy, n);
        check("accumulate_bf16_rounded", dacc, acc, ZT_F32, n, EXACT);
        free(acc);
        dev_free_all();
    }
    for (int want = 0; want < 2; want++) {
        float *r = host(n * 4);
        memcpy(r, x, n * 4);
        float *dr = dev(x, n * 4);
        double cs = cpu->round_bf16(r, n, want), gs = gpu->round_bf16(dr, n, want);
        check(want ? "round_bf16 in place (with sumsq)" : "round_bf16 in place", dr, r, ZT_F32, n, EXACT);
        if (want)
            check_scalar("round_bf16 sumsq of the rounded values", gs, cs, DOUBLE_TOL);
        else
            report("round_bf16 without sumsq returns 0", gs == 0.0 ? 0.0 : 1.0, EXACT, NULL);
        free(r);
        dev_free_all();
    }
    free(x), free(y);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            char *end;
            rng_state = strtoull(argv[++i], &end, 10);
            if (*end) {
                fprintf(stderr, "kernels_check: --seed: expected an integer, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-matmul")) {
            no_matmul = 1;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: kernels_check [--seed N] [--no-matmul] [--only GROUP]\n");
            return 2;
        }
    }
    zt_err err = {0};
    int ndev = 0;
    if (zt_cuda_device_count(&ndev, &err)) { /* "no CUDA device (why)" */
        printf("kernels_check: %s\n", err.msg);
        printf("kernels_check: nothing was run\n");
        return 3;
    }
    cpu = zt_backend_cpu();
    gpu = zt_backend_cuda(&err);
    if (!gpu) { /* a device exists, but the backend cannot start on it: a failure */
        printf("FAIL setting up the CUDA backend: %s\n", err.msg);
        printf("kernels_check: 0 passed, 1 failed\n");
        return 1;
    }
    zt_cuda_device info;
    int dev_id = 0;
    if (!zt_cuda_device_info(dev_id, &info, &err))
        printf("kernels_check: device %d: %s (compute capability %d.%d), seed %llu\n", dev_id, info.name,
               info.cc_major, info.cc_minor, (unsigned long long)rng_state);
    static const struct { const char *name; void (*fn)(void); } groups[] = {
        {"memory", check_memory},       {"matmul", check_matmul},       {"embed", check_embed},
        {"rmsnorm", check_rmsnorm},     {"rope", check_rope},           {"swiglu", check_swiglu},       {"bias", check_bias},
        {"transpose", check_transpose}, {"xent", check_xent},           {"attention", check_attention},
        {"cache", check_attention_cache}, {"adamw", check_adamw},       {"reductions", check_reductions},
    };
    int ran = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        if (!only || !strcmp(only, groups[g].name)) {
            groups[g].fn();
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "kernels_check: --only %s: no such group of checks\n", only);
        return 2;
    }
    if (zt_cuda_synchronize(&err)) {
        printf("FAIL device fault at the end: %s\n", err.msg);
        n_failed++;
    }
    if (n_skipped)
        printf("kernels_check: %d passed, %d failed, %d skipped\n", n_passed, n_failed, n_skipped);
    else
        printf("kernels_check: %d passed, %d failed\n", n_passed, n_failed);
    zt_cuda_shutdown();
    return n_failed ? 1 : 0;
}
