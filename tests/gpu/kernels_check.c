/* kernels_check.c — every entry of the CUDA backend's table against its CPU twin.
 *
 *   build-cuda/tests/gpu/kernels_check [--seed N] [--no-matmul] [--no-graphs] [--only GROUP] [--bench SHRINK]
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/core/dtype.h"
#include "../../src/core/rng.h"
#include "../../src/kernels/backend.h"
#include "../../src/kernels/backend_cuda.h"
#include "../../src/kernels/cuda/fast.h"
#include "../../src/kernels/cuda/mma_check.h"
#include "../../src/model/llama.h"

#define EXACT 0.0
#define FP32_TOL 1e-5
#define BF16_TOL (1.0 / 128 + 1e-5)
#define DOUBLE_TOL 1e-10

static const zt_backend *cpu, *gpu;
static uint64_t rng_state = 20261201;
static int n_passed, n_failed, n_skipped;
/* --no-graphs: for tools/cuda_emu/run.sh too, which cannot capture CUDA graphs (the
 * graph group is then reported as skipped) */
static int no_graphs;
/* --no-matmul: for tools/cuda_emu/run.sh, whose CPU emulation has no cuBLASLt; the
 * products are then reported as skipped, never as passed */
static int no_matmul;
/* --only NAME: run one group of checks (memory, matmul, embed, rmsnorm, rope, swiglu, bias,
 * transpose, xent, attention, cache, adamw, reductions, fast-norm, fast-xent, fast-attention,
 * fast-matmul, fast-step, fast-act16, graph, mma, cudnn-attention; `fast` runs the six fast-*
 * groups) */
static const char *only;
/* --bench SHRINK: time the fast kernels against the exact ones instead of checking
 * (run_bench; 1: the 1B model's shapes) */
static int bench;

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
        /* a copy down on the copy queue, waited for by its marker alone; then a marker
         * older than the event ring (backend.cu reuses its events): still covered */
        memset(pinned, 0, n * sizeof(float));
        gpu->to_host_async(pinned, b, n * sizeof(float));
        long first = gpu->copy_record();
        gpu->copy_wait_marker(first);
        report("to_host_async, copy_wait_marker", memcmp(pinned, x, n * sizeof(float)) ? 1.0 : 0.0, EXACT, NULL);
        memset(pinned, 0, n * sizeof(float));
        gpu->to_host_async(pinned, b, n * sizeof(float));
        first = gpu->copy_record();
        for (int i = 0; i < 200; i++)
            (void)gpu->copy_record();
        gpu->copy_wait_marker(first);
        report("copy_wait_marker, a marker the ring has reused", memcmp(pinned, x, n * sizeof(float)) ? 1.0 : 0.0,
               EXACT, NULL);
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

typedef void (*embed_backward_fn)(float *dwte, const float *dx, const int *tokens, int N, int C, int V, float beta);

/* beta 0 writes every row of a poisoned table without reading it: the CPU's add onto
 * a cleared table (rows no token names stay 0; the ids name only multiples of 4, so
 * most rows are such rows), within tol (the fast table's atomics reorder a sum) */
static void check_embed_store(const char *what, embed_backward_fn f, const float *dx, const int *tokens, int N,
                              int C, int V, double tol)
{
    float *want = host((size_t)V * C * sizeof(float));
    memset(want, 0, (size_t)V * C * sizeof(float));
    cpu->embed_backward(want, dx, tokens, N, C, V, 1.0f);
    float *ddx = dev(dx, (size_t)N * C * sizeof(float)), *d = dev(NULL, (size_t)V * C * sizeof(float));
    poison(d, (size_t)V * C * sizeof(float));
    f(d, ddx, tokens, N, C, V, 0.0f);
    check(what, d, want, ZT_F32, (size_t)V * C, tol);
    free(want);
}

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
    cpu->embed_backward(want, dx, tokens, N, C, V, 1.0f);
    float *ddx = dev(dx, (size_t)N * C * sizeof(float));
    float *d1 = dev(dwte, (size_t)V * C * sizeof(float)), *d2 = dev(dwte, (size_t)V * C * sizeof(float));
    gpu->embed_backward(d1, ddx, tokens, N, C, V, 1.0f);
    gpu->embed_backward(d2, ddx, tokens, N, C, V, 1.0f);
    check("embed backward (accumulates; repeated tokens)", d1, want, ZT_F32, (size_t)V * C, EXACT);
    check_same("embed backward, run twice: same bits", d1, d2, (size_t)V * C * sizeof(float));
    check_embed_store("embed backward, beta 0", gpu->embed_backward, dx, tokens, N, C, V, EXACT);
    free(wte), free(dx), free(dwte), free(want);
    dev_free_all();
}


typedef void (*norm_backward_fn)(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                                 const float *dy, const float *x, const float *w, const float *rstd, int N, int C);

/* The betas' store form (0): dx, its bf16 copy and dw written without being read (the
 * destinations poisoned), with the bits of the add (1) onto zeros, -0.0 included: dy's
 * row 1 is zero, so where a weight is negative a term is -0.0, which 0 + v makes +0.0
 * as the clear and the add did (rmsnorm.c). */
static void check_norm_store(const char *what, norm_backward_fn f, int N, int C)
{
    const size_t n = (size_t)N * C;
    float *x = randn(n, 1.0f), *w = randn((size_t)C, 1.0f), *dy = randn(n, 1.0f);
    float *zx = host(n * 4), *zw = host((size_t)C * 4);
    memset(dy + C, 0, (size_t)C * 4);
    float *dx_ = dev(x, n * 4), *dw_ = dev(w, (size_t)C * 4), *ddy = dev(dy, n * 4), *r = dev(NULL, (size_t)N * 4);
    float *y = dev(NULL, n * 4), *adx = dev(zx, n * 4), *adw = dev(zw, (size_t)C * 4);
    float *sdx = dev(NULL, n * 4), *sdw = dev(NULL, (size_t)C * 4);
    uint16_t *a16 = dev(NULL, n * 2), *s16 = dev(NULL, n * 2);
    gpu->rmsnorm_forward(y, ZT_F32, r, dx_, dw_, N, C, 1e-5f);
    poison(sdx, n * 4), poison(sdw, (size_t)C * 4);
    f(adx, a16, 1.0f, adw, 1.0f, ddy, dx_, dw_, r, N, C);
    f(sdx, s16, 0.0f, sdw, 0.0f, ddy, dx_, dw_, r, N, C);
    char name[160];
    snprintf(name, sizeof name, "%s dx stored (beta 0, over NaN) = added onto zeros (N %d)", what, N);
    check_same(name, sdx, adx, n * 4);
    snprintf(name, sizeof name, "%s dx bf16 copy, stored = added onto zeros (N %d)", what, N);
    check_same(name, s16, a16, n * 2);
    snprintf(name, sizeof name, "%s dw stored (beta 0, over NaN) = added onto zeros (N %d)", what, N);
    check_same(name, sdw, adw, (size_t)C * 4);
    free(x), free(w), free(dy), free(zx), free(zw);
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
        cpu->rmsnorm_backward(dx, dx16, 1.0f, dw, 1.0f, dy, x, w, rstd, N, C);
        float *ddx = dev(dx0, (size_t)N * C * 4), *ddw = dev(dw0, (size_t)C * 4);
        float *ddx2 = dev(dx0, (size_t)N * C * 4), *ddw2 = dev(dw0, (size_t)C * 4);
        uint16_t *d16 = b ? dev(NULL, (size_t)N * C * 2) : NULL;
        if (d16)
            poison(d16, (size_t)N * C * 2);
        float *ddy = dev(dy, (size_t)N * C * 4), *dxx = dev(x, (size_t)N * C * 4), *dww = dev(w, (size_t)C * 4);
        float *drs = dev(rstd, (size_t)N * 4);
        gpu->rmsnorm_backward(ddx, d16, 1.0f, ddw, 1.0f, ddy, dxx, dww, drs, N, C);
        gpu->rmsnorm_backward(ddx2, NULL, 1.0f, ddw2, 1.0f, ddy, dxx, dww, drs, N, C);
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
    check_norm_store("rmsnorm backward", gpu->rmsnorm_backward, N, C);
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
        cpu->bias_backward(db, (float)(1 - k), dy, N, D); /* k 1: the store form, over NaN below */
        float *dyv = dev(y0, (size_t)N * D * 4), *ddb = dev(db0, (size_t)D * 4), *ddy = dev(dy, (size_t)N * D * 4);
        void *db_ = dev(bh, (size_t)D * zt_dtype_size(dt));
        gpu->bias_forward(dyv, db_, dt, N, D);
        if (k)
            poison(ddb, (size_t)D * 4);
        gpu->bias_backward(ddb, (float)(1 - k), ddy, N, D);
        check(k ? "bias forward (bf16 bias)" : "bias forward (fp32)", dyv, y, ZT_F32, (size_t)N * D, EXACT);
        check(k ? "bias backward (column sums stored, beta 0)" : "bias backward (column sums added)", ddb, db, ZT_F32,
              (size_t)D, EXACT);
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
    /* ignored rows (completion-only loss): no loss and a zero gradient row, as on the CPU */
    targets[3] = targets[11] = ZT_IGNORE_INDEX;
    l1 = cpu->xent(want, NULL, logits, targets, N, V, gs);
    poison(dg, n * 4);
    check_scalar("xent loss with ignored rows", gpu->xent(dg, NULL, dl, targets, N, V, gs), l1, DOUBLE_TOL);
    check("xent dlogits with ignored rows (fp32)", dg, want, ZT_F32, n, FP32_TOL);
    cpu->xent(scratch, want16, logits, targets, N, V, gs);
    poison(d16, n * 2);
    gpu->xent(dg, d16, dl, targets, N, V, gs);
    check("xent dlogits with ignored rows (bf16)", d16, want16, ZT_BF16, n, BF16_TOL);
    free(logits), free(want), free(inplace), free(want16), free(scratch);
    dev_free_all();
}

/* ---- attention ------------------------------------------------------------------------- */

static void check_attention_case(int B, int T, int nh, int nkv, int hd, int window, zt_dtype opd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    size_t cs = cpu->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    size_t gs = gpu->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
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

/* Packed examples (backend.h's *_pos entries): positions restarting at each example,
 * examples inside and across 64-key blocks; the device's RoPE bit for bit and its
 * attention within the exact attention's tolerance of the CPU table's. */
static void fill_positions(int *pos, int B, int T)
{
    static const int lens[] = {1, 63, 2, 70, 9, 40, 64, 3};
    for (int b = 0, e = 0; b < B; b++)
        for (int t = 0, k = 0; t < T; t++, k++) {
            if (k == lens[e % 8])
                k = 0, e++;
            pos[b * T + t] = k;
        }
}

static void check_packed_attention_case(int B, int T, int nh, int nkv, int hd, int window, zt_dtype opd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    int *pos = host((size_t)B * T * sizeof(int));
    fill_positions(pos, B, T);
    size_t cs = cpu->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    size_t gs = gpu->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "packed, B=%d T=%d nh=%d nkv=%d hd=%d window=%d %s", B, T, nh, nkv, hd, window,
             cs ? "bf16 operands" : "fp32");
    void *cscratch = cs ? host(cs) : NULL;
    float *out = host(nout * 4), *lse = host(nlse * 4), *dqkv = host(nqkv * 4);
    cpu->attention_forward_pos(out, NULL, lse, qkv, cscratch, pos, B, T, nh, nkv, hd, window);
    cpu->attention_backward_pos(dqkv, dout, qkv, out, lse, cscratch, pos, B, T, nh, nkv, hd, window);
    const double tol = cs ? BF16_TOL : FP32_TOL;
    float *dq = dev(qkv, nqkv * 4), *ddo = dev(dout, nout * 4);
    void *gscratch = gs ? dev(NULL, gs) : NULL;
    float *dout_ = dev(NULL, nout * 4), *dlse = dev(NULL, nlse * 4), *ddq = dev(NULL, nqkv * 4);
    poison(dout_, nout * 4), poison(dlse, nlse * 4), poison(ddq, nqkv * 4);
    gpu->attention_forward_pos(dout_, NULL, dlse, dq, gscratch, pos, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "attention forward out (%s)", tag);
    check(name, dout_, out, ZT_F32, nout, tol);
    snprintf(name, sizeof name, "attention forward lse (%s)", tag);
    check(name, dlse, lse, ZT_F32, nlse, tol);
    float *dcout = dev(out, nout * 4), *dclse = dev(lse, nlse * 4);
    gpu->attention_backward_pos(ddq, ddo, dq, dcout, dclse, gscratch, pos, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "attention backward dqkv (%s)", tag);
    check(name, ddq, dqkv, ZT_F32, nqkv, tol);
    free(qkv), free(dout), free(pos), free(cscratch), free(out), free(lse), free(dqkv);
    dev_free_all();
}

static void check_packed(void)
{
    check_packed_attention_case(2, 150, 6, 2, 64, 0, ZT_F32);
    check_packed_attention_case(2, 150, 6, 2, 64, 0, ZT_BF16);
    check_packed_attention_case(1, 200, 4, 2, 64, 10, ZT_F32);
    check_packed_attention_case(1, 130, 2, 2, 128, 100, ZT_BF16);
    const int B = 2, T = 150, nh = 4, nkv = 2, hd = 64;
    const zt_rope_freqs f = {10000.0f, 0, 0, 0, 0, 0};
    const size_t tab = (size_t)T * hd / 2, n = (size_t)B * T * (nh + 2 * nkv) * hd;
    float *c = host(tab * 4), *s = host(tab * 4), *x = randn(n, 1.0f), *want = host(n * 4);
    int *pos = host((size_t)B * T * sizeof(int));
    fill_positions(pos, B, T);
    cpu->rope_tables(c, s, T, hd, &f);
    float *dc = dev(c, tab * 4), *ds = dev(s, tab * 4);
    for (int dir = 0; dir < 2; dir++) {
        memcpy(want, x, n * 4);
        float *dx = dev(x, n * 4);
        (dir ? cpu->rope_backward_pos : cpu->rope_forward_pos)(want, c, s, pos, B, T, nh, nkv, hd);
        (dir ? gpu->rope_backward_pos : gpu->rope_forward_pos)(dx, dc, ds, pos, B, T, nh, nkv, hd);
        char name[96];
        snprintf(name, sizeof name, "rope %s with positions (packed)", dir ? "backward" : "forward");
        check(name, dx, want, ZT_F32, n, EXACT);
    }
    free(c), free(s), free(x), free(want), free(pos);
    dev_free_all();
}

/* ---- the fast kernels (src/kernels/cuda/fast.h) against the exact ones --------------------
 *
 * Each fast kernel runs on the same device inputs as its exact twin (the table's entry),
 * and its outputs are compared with the exact kernel's, downloaded.  FAST_TOL: the
 * fast attention rounds its probabilities and score gradients to bf16 for the tensor
 * cores, as the exact kernel does, but from fp32 values computed another way (exp2 of
 * pre-scaled scores, tensor-core sums in another order), so where the exact kernel's
 * rounding lands on one bf16 neighbour the fast one may land on the other: a bf16 ulp,
 * 2^-8 relative, of a term, in either kernel, so two ulps (2^-7) of the output's scale
 * between them, plus the fp32 part.  A wrong mask, scale or index is off by O(1). */
#define FAST_TOL (2.0 / 128 + 1e-5)

static void check_fast_attention_case(int B, int T, int nh, int nkv, int hd, int window, zt_dtype opd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    const size_t gs = gpu->attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    const size_t fs = zt_cu_fast_attention_scratch_bytes(B, T, nh, nkv, hd, opd);
    const int tensor_cores = fs > 0 && zt_cu_fast_attention_supported(hd);
    char tag[128], name[200];
    snprintf(tag, sizeof tag, "B=%d T=%d nh=%d nkv=%d hd=%d window=%d %s", B, T, nh, nkv, hd, window,
             tensor_cores ? "tensor cores" : "exact fallback");
    /* backend.h's fast rule (the emulated device's fast table states it too, so the model's
     * estimate of a fast run is this size), 0 exactly where the exact kernel's is 0, and
     * never below it (the fallback runs in it); one buffer of that size serves both */
    snprintf(name, sizeof name, "fast attention scratch: the fast rule, at least the exact's (%s)", tag);
    const int rule = fs == zt_attention_fast_scratch_bytes(B, T, nh, nkv, hd, opd, NULL);
    report(name, rule && fs >= gs && (fs == 0) == (gs == 0) ? 0.0 : 1.0, EXACT, NULL);
    /* the fallback (fp32 operands, other head sizes) is the exact kernel: its bits */
    const double tol = tensor_cores ? FAST_TOL : EXACT;

    float *dq = dev(qkv, nqkv * 4), *ddo = dev(dout, nout * 4);
    void *scratch = fs ? dev(NULL, fs) : NULL;
    float *eo = dev(NULL, nout * 4), *el = dev(NULL, nlse * 4), *edq = dev(NULL, nqkv * 4);
    gpu->attention_forward(eo, NULL, el, dq, scratch, B, T, nh, nkv, hd, window);
    gpu->attention_backward(edq, ddo, dq, eo, el, scratch, B, T, nh, nkv, hd, window);
    float *want_o = host(nout * 4), *want_l = host(nlse * 4), *want_dq = host(nqkv * 4);
    down(want_o, eo, nout * 4), down(want_l, el, nlse * 4), down(want_dq, edq, nqkv * 4);
    uint16_t *want_o16 = as_dtype(want_o, ZT_BF16, nout);

    float *fo = dev(NULL, nout * 4), *fl = dev(NULL, nlse * 4), *fdq = dev(NULL, nqkv * 4);
    float *fo2 = dev(NULL, nout * 4), *fdq2 = dev(NULL, nqkv * 4), *fl2 = dev(NULL, nlse * 4);
    uint16_t *fo16 = dev(NULL, nout * 2);
    poison(fo, nout * 4), poison(fl, nlse * 4), poison(fo16, nout * 2), poison(fdq, nqkv * 4);
    zt_cu_fast_attention_forward(fo, fo16, fl, dq, scratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "fast attention forward out vs exact (%s)", tag);
    check(name, fo, want_o, ZT_F32, nout, tol);
    snprintf(name, sizeof name, "fast attention forward out bf16 copy vs exact (%s)", tag);
    check(name, fo16, want_o16, ZT_BF16, nout, tensor_cores ? FAST_TOL : BF16_TOL);
    snprintf(name, sizeof name, "fast attention forward lse vs exact (%s)", tag);
    check(name, fl, want_l, ZT_F32, nlse, tol);
    /* the backward from the exact forward's outputs, so it is checked on its own; dqkv
     * starts poisoned, so every element must be written (the q, k and v parts) */
    zt_cu_fast_attention_backward(fdq, ddo, dq, eo, el, scratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "fast attention backward dqkv vs exact (%s)", tag);
    check(name, fdq, want_dq, ZT_F32, nqkv, tol);
    /* no atomics: the same bits on every run */
    zt_cu_fast_attention_forward(fo2, NULL, fl2, dq, scratch, B, T, nh, nkv, hd, window);
    zt_cu_fast_attention_backward(fdq2, ddo, dq, eo, el, scratch, B, T, nh, nkv, hd, window);
    snprintf(name, sizeof name, "fast attention forward+backward twice: same bits (%s)", tag);
    unsigned char *a = host(nqkv * 4), *b = host(nqkv * 4), *c = host(nout * 4), *d = host(nout * 4);
    down(a, fdq, nqkv * 4), down(b, fdq2, nqkv * 4), down(c, fo, nout * 4), down(d, fo2, nout * 4);
    report(name, memcmp(a, b, nqkv * 4) || memcmp(c, d, nout * 4) ? 1.0 : 0.0, EXACT, NULL);
    free(a), free(b), free(c), free(d);
    free(qkv), free(dout), free(want_o), free(want_l), free(want_dq), free(want_o16);
    dev_free_all();
}

/* FAST_FP32_TOL: fp32 results of the fast kernels whose sums run in fp32 where the exact
 * kernels sum in double (RMSNorm's mean of squares and dot, dw's column sums, the
 * softmax's sum), or use the hardware exp (a few ulp): a sum of n terms in fp32 is off
 * by at most n 2^-24 of its magnitude, 2e-5 at the n = 300 of these checks, plus a few
 * ulp.  A wrong kernel is off by O(1). */
#define FAST_FP32_TOL 1e-4

/* The backward: dx and dw accumulate from the same random start on both.  N 37: one
 * chunk of 64 rows (fast_norm.cu); N 150: three, the last short, summed by the last
 * block to arrive, which must also leave the arrival count at 0 for the next call (a
 * second call here, whose dw must again be the exact one's). */
static void check_fast_rmsnorm_backward(int N, int C)
{
    const size_t n = (size_t)N * C;
    float *x = randn(n, 1.0f), *w = randn((size_t)C, 1.0f), *dy = randn(n, 1.0f), *dx0 = randn(n, 1.0f),
          *dw0 = randn((size_t)C, 1.0f);
    float *dx_ = dev(x, n * 4), *dw_ = dev(w, (size_t)C * 4), *ddy = dev(dy, n * 4);
    float *r = dev(NULL, (size_t)N * 4), *y = dev(NULL, n * 4);
    gpu->rmsnorm_forward(y, ZT_F32, r, dx_, dw_, N, C, 1e-5f);
    float *edx = dev(dx0, n * 4), *fdx = dev(dx0, n * 4), *edw = dev(dw0, (size_t)C * 4), *fdw = dev(dw0, (size_t)C * 4);
    uint16_t *e16 = dev(NULL, n * 2), *f16 = dev(NULL, n * 2);
    float *want_dx = host(n * 4), *want_dw = host((size_t)C * 4);
    uint16_t *want16 = host(n * 2);
    char name[160];
    for (int call = 1; call <= 2; call++) {
        poison(f16, n * 2);
        gpu->rmsnorm_backward(edx, e16, 1.0f, edw, 1.0f, ddy, dx_, dw_, r, N, C);
        zt_cu_fast_rmsnorm_backward(fdx, f16, 1.0f, fdw, 1.0f, ddy, dx_, dw_, r, N, C);
        down(want_dx, edx, n * 4), down(want_dw, edw, (size_t)C * 4), down(want16, e16, n * 2);
        snprintf(name, sizeof name, "fast rmsnorm backward dx (accumulated) vs exact (N %d, call %d)", N, call);
        check(name, fdx, want_dx, ZT_F32, n, FAST_FP32_TOL);
        snprintf(name, sizeof name, "fast rmsnorm backward dx bf16 copy vs exact (N %d, call %d)", N, call);
        check(name, f16, want16, ZT_BF16, n, BF16_TOL);
        snprintf(name, sizeof name, "fast rmsnorm backward dw (accumulated) vs exact (N %d, call %d)", N, call);
        check(name, fdw, want_dw, ZT_F32, (size_t)C, FAST_FP32_TOL);
    }
    free(x), free(w), free(dy), free(dx0), free(dw0), free(want_dx), free(want_dw), free(want16);
    dev_free_all();
}

/* C 300: one element at a time (not a multiple of 8); C 320: 16-byte vectors */
static void check_fast_rmsnorm(int C)
{
    const int N = 37;
    const float eps = 1e-5f;
    const size_t n = (size_t)N * C;
    float *x = randn(n, 1.0f), *w = randn((size_t)C, 1.0f), *delta = randn(n, 0.5f);
    float *dx_ = dev(x, n * 4), *dw_ = dev(w, (size_t)C * 4);
    char name[160];
    for (int bf = 0; bf < 2; bf++) { /* y in fp32, then in bf16 (the products' operand) */
        const zt_dtype y_dt = bf ? ZT_BF16 : ZT_F32;
        const size_t ys = n * zt_dtype_size(y_dt);
        void *ey = dev(NULL, ys), *fy = dev(NULL, ys);
        float *er = dev(NULL, (size_t)N * 4), *fr = dev(NULL, (size_t)N * 4);
        gpu->rmsnorm_forward(ey, y_dt, er, dx_, dw_, N, C, eps);
        poison(fy, ys), poison(fr, (size_t)N * 4);
        zt_cu_fast_rmsnorm_forward(fy, y_dt, fr, dx_, dw_, N, C, eps);
        void *want_y = host(ys);
        float *want_r = host((size_t)N * 4);
        down(want_y, ey, ys), down(want_r, er, (size_t)N * 4);
        snprintf(name, sizeof name, "fast rmsnorm forward y (%s) vs exact", zt_dtype_name(y_dt));
        check(name, fy, want_y, y_dt, n, bf ? BF16_TOL : FAST_FP32_TOL);
        snprintf(name, sizeof name, "fast rmsnorm forward rstd (y %s) vs exact", zt_dtype_name(y_dt));
        check(name, fr, want_r, ZT_F32, (size_t)N, FAST_FP32_TOL);
        free(want_y), free(want_r);
    }
    /* the residual add fused in: x += delta (fp32 or bf16), then the norm of the new x,
     * against the exact accumulate followed by the exact norm */
    for (int bf = 0; bf < 2; bf++) {
        const zt_dtype d_dt = bf ? ZT_BF16 : ZT_F32;
        void *dh = as_dtype(delta, d_dt, n);
        void *dd = dev(dh, n * zt_dtype_size(d_dt));
        float *ex = dev(x, n * 4), *fx = dev(x, n * 4);
        uint16_t *ey = dev(NULL, n * 2), *fy = dev(NULL, n * 2);
        float *er = dev(NULL, (size_t)N * 4), *fr = dev(NULL, (size_t)N * 4);
        gpu->accumulate(ex, ZT_F32, dd, d_dt, n);
        gpu->rmsnorm_forward(ey, ZT_BF16, er, ex, dw_, N, C, eps);
        poison(fy, n * 2), poison(fr, (size_t)N * 4);
        zt_cu_fast_rmsnorm_residual_forward(fx, dd, d_dt, fy, ZT_BF16, fr, dw_, N, C, eps);
        float *want_x = host(n * 4), *want_r = host((size_t)N * 4);
        uint16_t *want_y = host(n * 2);
        down(want_x, ex, n * 4), down(want_y, ey, n * 2), down(want_r, er, (size_t)N * 4);
        snprintf(name, sizeof name, "fast rmsnorm residual: x + delta (%s) vs exact accumulate", zt_dtype_name(d_dt));
        check(name, fx, want_x, ZT_F32, n, EXACT);
        snprintf(name, sizeof name, "fast rmsnorm residual: y (bf16) vs exact (delta %s)", zt_dtype_name(d_dt));
        check(name, fy, want_y, ZT_BF16, n, BF16_TOL);
        snprintf(name, sizeof name, "fast rmsnorm residual: rstd vs exact (delta %s)", zt_dtype_name(d_dt));
        check(name, fr, want_r, ZT_F32, (size_t)N, FAST_FP32_TOL);
        free(dh), free(want_x), free(want_r), free(want_y);
    }
    free(x), free(w), free(delta);
    dev_free_all();
    check_fast_rmsnorm_backward(N, C);
    check_fast_rmsnorm_backward(150, C);
    check_norm_store("fast rmsnorm backward", zt_cu_fast_rmsnorm_backward, 150, C);
}

/* A device copy of h whose first element sits off bytes past a 256-byte aligned start
 * (off 2 or 4: not 16-byte aligned, which the vector paths need) */
static void *dev_off(const void *h, size_t bytes, size_t off)
{
    unsigned char *d = dev(NULL, bytes + off);
    up(d + off, h, bytes);
    return d + off;
}

/* The two paths of fast_norm.cu give the same bits: C 320 (a multiple of 8) with every
 * pointer aligned takes the 16-byte accesses, and the same data with one operand an
 * element off its alignment takes the elementwise path, which must visit the columns in
 * the same order (a lane's groups of 8).  The forward with x off, the residual form with
 * a bf16 delta off, the backward with dy off (dx, its bf16 copy and dw, 150 rows). */
static void check_fast_rmsnorm_paths(void)
{
    const int N = 37, C = 320, NB = 150;
    const float eps = 1e-5f;
    const size_t n = (size_t)NB * C;
    float *x = randn(n, 1.0f), *w = randn((size_t)C, 1.0f), *delta = randn(n, 0.5f), *dy = randn(n, 1.0f);
    uint16_t *d16 = as_dtype(delta, ZT_BF16, n);
    float *dw_ = dev(w, (size_t)C * 4), *xa = dev(x, n * 4), *xo = dev_off(x, n * 4, 4);
    uint16_t *ya = dev(NULL, n * 2), *yo = dev(NULL, n * 2);
    float *ra = dev(NULL, (size_t)NB * 4), *ro = dev(NULL, (size_t)NB * 4);
    zt_cu_fast_rmsnorm_forward(ya, ZT_BF16, ra, xa, dw_, N, C, eps);
    zt_cu_fast_rmsnorm_forward(yo, ZT_BF16, ro, xo, dw_, N, C, eps);
    check_same("fast rmsnorm forward y: vector and elementwise paths", ya, yo, (size_t)N * C * 2);
    check_same("fast rmsnorm forward rstd: vector and elementwise paths", ra, ro, (size_t)N * 4);
    uint16_t *da = dev(d16, n * 2), *dof = dev_off(d16, n * 2, 2);
    zt_cu_fast_rmsnorm_residual_forward(xa, da, ZT_BF16, ya, ZT_BF16, ra, dw_, N, C, eps);
    zt_cu_fast_rmsnorm_residual_forward(xo, dof, ZT_BF16, yo, ZT_BF16, ro, dw_, N, C, eps);
    check_same("fast rmsnorm residual x + delta: vector and elementwise paths", xa, xo, (size_t)N * C * 4);
    check_same("fast rmsnorm residual y: vector and elementwise paths", ya, yo, (size_t)N * C * 2);
    check_same("fast rmsnorm residual rstd: vector and elementwise paths", ra, ro, (size_t)N * 4);
    /* the backward at xa (as the residual left it) and the rstd of a forward over all rows */
    zt_cu_fast_rmsnorm_forward(ya, ZT_BF16, ra, xa, dw_, NB, C, eps);
    float *dya = dev(dy, n * 4), *dyo = dev_off(dy, n * 4, 4);
    float *dxa = dev(delta, n * 4), *dxo = dev(delta, n * 4), *dwa = dev(w, (size_t)C * 4), *dwo = dev(w, (size_t)C * 4);
    uint16_t *xa16 = dev(NULL, n * 2), *xo16 = dev(NULL, n * 2);
    zt_cu_fast_rmsnorm_backward(dxa, xa16, 1.0f, dwa, 1.0f, dya, xa, dw_, ra, NB, C);
    zt_cu_fast_rmsnorm_backward(dxo, xo16, 1.0f, dwo, 1.0f, dyo, xa, dw_, ra, NB, C);
    check_same("fast rmsnorm backward dx: vector and elementwise paths", dxa, dxo, n * 4);
    check_same("fast rmsnorm backward dx bf16 copy: vector and elementwise paths", xa16, xo16, n * 2);
    check_same("fast rmsnorm backward dw: vector and elementwise paths", dwa, dwo, (size_t)C * 4);
    free(x), free(w), free(delta), free(dy), free(d16);
    dev_free_all();
}

static void check_fast_swiglu(void)
{
    const int N = 33, F = 129;
    const size_t n = (size_t)N * F;
    float *gu = randn(2 * n, 2.0f), *dh = randn(n, 1.0f);
    float *dgu_ = dev(gu, 2 * n * 4), *ddh = dev(dh, n * 4);
    char name[128];
    for (int bf = 0; bf < 2; bf++) {
        const zt_dtype dt = bf ? ZT_BF16 : ZT_F32;
        const size_t es = zt_dtype_size(dt);
        void *eh = dev(NULL, n * es), *fh = dev(NULL, n * es), *eg = dev(NULL, 2 * n * es), *fg = dev(NULL, 2 * n * es);
        gpu->swiglu_forward(eh, dt, dgu_, N, F);
        gpu->swiglu_backward(eg, dt, ddh, dgu_, N, F);
        poison(fh, n * es), poison(fg, 2 * n * es);
        zt_cu_fast_swiglu_forward(fh, dt, dgu_, N, F);
        zt_cu_fast_swiglu_backward(fg, dt, ddh, dgu_, N, F);
        void *want_h = host(n * es), *want_g = host(2 * n * es);
        down(want_h, eh, n * es), down(want_g, eg, 2 * n * es);
        snprintf(name, sizeof name, "fast swiglu forward (%s) vs exact", zt_dtype_name(dt));
        check(name, fh, want_h, dt, n, bf ? BF16_TOL : FAST_FP32_TOL);
        snprintf(name, sizeof name, "fast swiglu backward (%s) vs exact", zt_dtype_name(dt));
        check(name, fg, want_g, dt, 2 * n, bf ? BF16_TOL : FAST_FP32_TOL);
        free(want_h), free(want_g);
    }
    free(gu), free(dh);
    dev_free_all();
}

/* The fused lm-head cross-entropy against the exact path: the whole (N, V) logits by
 * the table's matmul, its xent, then the two products of the gradient. */
/* The same against the exact table's lmhead_xent (fused.cu: the exact matmul and xent
 * chunk by chunk): in one chunk the exact path's calls; in several, the products on
 * fewer rows (cuBLASLt may pick another algorithm: fp32 sums in another order, and in
 * bf16 a dlogits term on its other bf16 neighbour), so the fast bounds. */
static void check_exact_lmhead(float *dxx, void *dww, zt_dtype w_dt, const int *targets, int N, int C, int V,
                               float gs, zt_dtype compute, int chunk, const float *dw0, double want_loss,
                               float *edx, float *edw, const char *tag)
{
    const int bf = compute == ZT_BF16;
    char name[192];
    zt_err err = {0};
    const double start = -0.5;
    double *loss = dev(&start, sizeof start);
    float *gdx = dev(NULL, (size_t)N * C * 4), *gdw = dev(dw0, (size_t)V * C * 4);
    poison(gdx, (size_t)N * C * 4);
    if (gpu->lmhead_xent(loss, gdx, gdw, 1.0f, dxx, ZT_F32, dww, w_dt, targets, N, C, V, gs, NULL, compute,
                         chunk, &err)) {
        snprintf(name, sizeof name, "exact table's lm-head cross-entropy (%s)", tag);
        report(name, INFINITY, 0, "  (error)");
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    double got;
    down(&got, loss, sizeof got);
    const double tol = chunk >= N ? EXACT : bf ? FAST_TOL : FP32_TOL;
    snprintf(name, sizeof name, "exact table's lm-head cross-entropy: loss sum vs the whole logits (%s)", tag);
    check_scalar(name, got - start, want_loss, DOUBLE_TOL);
    float *want_dx = host((size_t)N * C * 4), *want_dw = host((size_t)V * C * 4);
    down(want_dx, edx, (size_t)N * C * 4), down(want_dw, edw, (size_t)V * C * 4);
    snprintf(name, sizeof name, "exact table's lm-head cross-entropy: dx vs the whole logits (%s)", tag);
    check(name, gdx, want_dx, ZT_F32, (size_t)N * C, tol);
    snprintf(name, sizeof name, "exact table's lm-head cross-entropy: dw vs the whole logits (%s)", tag);
    check(name, gdw, want_dw, ZT_F32, (size_t)V * C, tol);
    free(want_dx), free(want_dw);
}

/* The gradient scale formed on the device from the step's scalars (fast mode's
 * backward: backend.h, xent_into's scale_src) against the host's argument
 * zt_grad_scale(count, scale), in both tables' lmhead_xent: the same bits (the same
 * kernels, one fp32 scale).  Count 29 and scale 3 * 2^10, where rounding 1/29 to fp32
 * first changes the product's last bit; the argument passed with the scalars is
 * ignored. */
static void check_lmhead_scale_src(float *dxx, void *dww, zt_dtype w_dt, const int *targets, int N, int C, int V,
                                   zt_dtype compute, int chunk, const float *dw0, const char *tag)
{
    zt_step_scalars sc = {.count = 29.0, .ls_on = 1};
    sc.ls.scale = 3072.0;
    zt_step_scalars *dsc = dev(&sc, sizeof sc);
    const float gs = zt_grad_scale(29.0, 3072.0);
    const zt_backend *fast = zt_backend_cuda_mode(ZT_KERNELS_FAST);
    const zt_backend *tables[2] = {gpu, fast};
    for (int k = 0; k < 2 && tables[k]; k++) {
        float *dx[2], *dw[2];
        double *loss[2];
        int bad = 0;
        for (int i = 0; i < 2; i++) {
            zt_err err = {0};
            loss[i] = dev(NULL, sizeof(double)), dx[i] = dev(NULL, (size_t)N * C * 4);
            dw[i] = dev(dw0, (size_t)V * C * 4);
            bad |= tables[k]->lmhead_xent(loss[i], dx[i], dw[i], 1.0f, dxx, ZT_F32, dww, w_dt, targets, N, C,
                                          V, i ? 7.0f : gs, i ? dsc : NULL, compute, chunk, &err);
        }
        char name[224];
        snprintf(name, sizeof name, "%s lm-head cross-entropy: the scale from the device's step scalars is the "
                 "host's, bit for bit (%s)", k ? "fast" : "exact table's", tag);
        if (bad) {
            report(name, INFINITY, 0, "  (error)");
            continue;
        }
        check_same(name, dx[1], dx[0], (size_t)N * C * 4);
        check_same(name, dw[1], dw[0], (size_t)V * C * 4);
        check_same(name, loss[1], loss[0], sizeof(double));
    }
}

static void check_fast_xent_case(zt_dtype compute, zt_dtype w_dt, int chunk, int N)
{
    const int C = 64, V = 300;
    const float gs = 1.0f / N;
    float *x = randn((size_t)N * C, 1.0f), *w = randn((size_t)V * C, 0.3f), *dw0 = randn((size_t)V * C, 0.01f);
    int *targets = host((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++)
        targets[i] = (int)(zt_rand_uniform(&rng_state) * V) % V;
    targets[5] = targets[30] = ZT_IGNORE_INDEX; /* no loss, a zero gradient row */
    void *wh = as_dtype(w, w_dt, (size_t)V * C);
    float *dxx = dev(x, (size_t)N * C * 4);
    void *dww = dev(wh, (size_t)V * C * zt_dtype_size(w_dt));
    const int bf = compute == ZT_BF16;
    zt_err err = {0};
    char tag[96], name[192];
    snprintf(tag, sizeof tag, "compute %s, w %s, N %d, %d rows per chunk", zt_dtype_name(compute), zt_dtype_name(w_dt),
             N, chunk);
    /* exact */
    float *logits = dev(NULL, (size_t)N * V * 4), *edx = dev(NULL, (size_t)N * C * 4), *edw = dev(dw0, (size_t)V * C * 4);
    uint16_t *e16 = bf ? dev(NULL, (size_t)N * V * 2) : NULL;
    if (gpu->matmul(logits, dxx, ZT_F32, dww, w_dt, N, V, C, 0, 1, 0.0f, compute, &err))
        die("exact logits", &err);
    const double want_loss = gpu->xent(logits, e16, logits, targets, N, V, gs);
    const void *g = bf ? (const void *)e16 : (const void *)logits;
    if (gpu->matmul(edx, g, bf ? ZT_BF16 : ZT_F32, dww, w_dt, N, C, V, 0, 0, 0.0f, compute, &err) ||
        gpu->matmul(edw, g, bf ? ZT_BF16 : ZT_F32, dxx, ZT_F32, V, C, N, 1, 0, 1.0f, compute, &err))
        die("exact gradient products", &err);
    /* fused, the loss added to 1.5 already there */
    const double start = 1.5;
    double *floss = dev(&start, sizeof start);
    float *fdx = dev(NULL, (size_t)N * C * 4), *fdw = dev(dw0, (size_t)V * C * 4);
    poison(fdx, (size_t)N * C * 4);
    if (zt_cu_fast_lmhead_xent(floss, fdx, fdw, 1.0f, dxx, ZT_F32, dww, w_dt, targets, N, C, V, gs, NULL,
                               compute, chunk, &err)) {
        snprintf(name, sizeof name, "fast lm-head cross-entropy (%s)", tag);
        report(name, INFINITY, 0, "  (error)");
        fprintf(stderr, "  %s\n", err.msg);
    } else {
        double got;
        down(&got, floss, sizeof got);
        snprintf(name, sizeof name, "fast lm-head cross-entropy: loss sum on the device vs exact (%s)", tag);
        check_scalar(name, got - start, want_loss, FAST_FP32_TOL);
        float *want_dx = host((size_t)N * C * 4), *want_dw = host((size_t)V * C * 4);
        down(want_dx, edx, (size_t)N * C * 4), down(want_dw, edw, (size_t)V * C * 4);
        snprintf(name, sizeof name, "fast lm-head cross-entropy: dx vs exact (%s)", tag);
        check(name, fdx, want_dx, ZT_F32, (size_t)N * C, bf ? FAST_TOL : FAST_FP32_TOL);
        snprintf(name, sizeof name, "fast lm-head cross-entropy: dw (accumulated) vs exact (%s)", tag);
        check(name, fdw, want_dw, ZT_F32, (size_t)V * C, bf ? FAST_TOL : FAST_FP32_TOL);
        /* dw_beta 0 (a fresh gradient buffer, param_owner.h): the first chunk stores, so
         * the NaNs already in dw are never read */
        float *sdw = dev(NULL, (size_t)V * C * 4), *esdw = dev(NULL, (size_t)V * C * 4);
        poison(sdw, (size_t)V * C * 4);
        if (zt_cu_fast_lmhead_xent(NULL, NULL, sdw, 0.0f, dxx, ZT_F32, dww, w_dt, targets, N, C, V, gs, NULL,
                                   compute, chunk, &err) ||
            gpu->matmul(esdw, g, bf ? ZT_BF16 : ZT_F32, dxx, ZT_F32, V, C, N, 1, 0, 0.0f, compute, &err))
            die("the stored dw", &err);
        down(want_dw, esdw, (size_t)V * C * 4);
        snprintf(name, sizeof name, "fast lm-head cross-entropy: dw (stored over NaN, beta 0) vs exact (%s)",
                 tag);
        check(name, sdw, want_dw, ZT_F32, (size_t)V * C, bf ? FAST_TOL : FAST_FP32_TOL);
        free(want_dx), free(want_dw);
    }
    check_exact_lmhead(dxx, dww, w_dt, targets, N, C, V, gs, compute, chunk, dw0, want_loss, edx, edw, tag);
    check_lmhead_scale_src(dxx, dww, w_dt, targets, N, C, V, compute, chunk, dw0, tag);
    free(x), free(w), free(dw0), free(wh), free(targets);
    dev_free_all();
}

static void check_fast_xent(void)
{
    check_fast_xent_case(ZT_BF16, ZT_BF16, 10, 37); /* 4 chunks, the last one short */
    check_fast_xent_case(ZT_F32, ZT_F32, 16, 37);
    check_fast_xent_case(ZT_BF16, ZT_F32, 37, 37); /* one chunk */
    check_fast_xent_case(ZT_F32, ZT_F32, 64, 37);  /* one chunk, more rows than N */
    check_fast_xent_case(ZT_BF16, ZT_BF16, 128, 300); /* more rows than the loss sum's threads (256) */
    /* a target outside the vocabulary: refused as a value, nothing run */
    int bad[2] = {0, 300};
    zt_err err = {0};
    float *x = dev(NULL, 2 * 64 * 4), *w = dev(NULL, 300 * 64 * 4);
    const int rc = zt_cu_fast_lmhead_xent(NULL, NULL, NULL, 1.0f, x, ZT_F32, w, ZT_F32, bad, 2, 64, 300, 1.0f,
                                          NULL, ZT_F32, 1, &err);
    report("fast lm-head cross-entropy: a target outside [0, V) is refused (ZT_EINPUT)",
           rc == ZT_EINPUT && strstr(err.msg, "target 300 of row 1") ? 0.0 : 1.0, EXACT, NULL);
    dev_free_all();
}

/* The bf16-output product with the residual fused, against the table's fp32 product
 * (then the residual added in fp32 and the sum rounded once, on the CPU): the same
 * operands and accumulation, so one bf16 rounding of values equal to fp32 rounding. */
static void check_fast_matmul_case(int M, int N, int K, int ta, int tb, int with_residual, int in_place)
{
    float *A = randn((size_t)M * K, 1.0f), *B = randn((size_t)K * N, 1.0f), *R = randn((size_t)M * N, 4.0f);
    uint16_t *Ah = as_dtype(A, ZT_BF16, (size_t)M * K), *Bh = as_dtype(B, ZT_BF16, (size_t)K * N),
             *Rh = as_dtype(R, ZT_BF16, (size_t)M * N);
    void *dA = dev(Ah, (size_t)M * K * 2), *dB = dev(Bh, (size_t)K * N * 2);
    float *ref = dev(NULL, (size_t)M * N * 4);
    zt_err err = {0};
    if (gpu->matmul(ref, dA, ZT_BF16, dB, ZT_BF16, M, N, K, ta, tb, 0.0f, ZT_BF16, &err))
        die("exact product", &err);
    float *want = host((size_t)M * N * 4);
    down(want, ref, (size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)M * N; i++)
        want[i] = with_residual ? want[i] + zt_bf16_to_f32(Rh[i]) : want[i];
    uint16_t *want16 = as_dtype(want, ZT_BF16, (size_t)M * N);
    uint16_t *dD = dev(with_residual && in_place ? Rh : NULL, (size_t)M * N * 2);
    void *dR = with_residual ? (in_place ? (void *)dD : dev(Rh, (size_t)M * N * 2)) : NULL;
    if (!(with_residual && in_place))
        poison(dD, (size_t)M * N * 2);
    char name[160];
    snprintf(name, sizeof name, "fast matmul bf16 out %dx%dx%d %s%s%s vs exact", M, N, K, ta ? "A^T " : "",
             tb ? "B^T " : "", with_residual ? (in_place ? "+= residual in place" : "+ residual") : "");
    if (zt_cu_fast_matmul_out(dD, ZT_BF16, dR, dA, ZT_BF16, dB, ZT_BF16, M, N, K, ta, tb, ZT_BF16, &err)) {
        report(name, INFINITY, 0, "  (error)");
        fprintf(stderr, "  %s\n", err.msg);
    } else {
        check(name, dD, want16, ZT_BF16, (size_t)M * N, BF16_TOL);
    }
    free(A), free(B), free(R), free(Ah), free(Bh), free(Rh), free(want), free(want16);
    dev_free_all();
}

static void check_act16_linear(int N, int out, int in, int fast); /* below, with the _act16 checks */

static void check_fast_matmul(void)
{
    if (no_matmul) { /* the emulator's products are a loop: checking it would prove nothing */
        printf("skip fast matmul (every case): not run (--no-matmul)\n");
        n_skipped++;
        return;
    }
    check_fast_matmul_case(67, 45, 129, 0, 1, 0, 0);
    check_fast_matmul_case(64, 96, 200, 0, 1, 1, 0);
    check_fast_matmul_case(64, 96, 200, 0, 0, 1, 1);
    check_fast_matmul_case(96, 64, 130, 1, 0, 1, 1);
    check_act16_linear(67, 96, 130, 1); /* the bias in cuBLASLt's epilogue */
    /* a bf16 result needs bf16 compute */
    zt_err err = {0};
    float *d = dev(NULL, 16 * 4);
    const int rc = zt_cu_fast_matmul_out(d, ZT_BF16, NULL, d, ZT_F32, d, ZT_F32, 2, 2, 2, 0, 0, ZT_F32, &err);
    report("fast matmul: a bf16 result with fp32 compute is refused (ZT_EINPUT)", rc == ZT_EINPUT ? 0.0 : 1.0, EXACT,
           NULL);
    dev_free_all();
}

/* the overlay replaces exactly the sixteen entries fast.h names */
static void check_fast_table(void)
{
    zt_backend t;
    memcpy(&t, gpu, sizeof t); /* with its padding, for the memcmp below */
    zt_cu_fast_overlay(&t);
    const int replaced = t.attention_scratch_bytes == zt_cu_fast_attention_scratch_bytes &&
                         t.attention_forward == zt_cu_fast_attention_forward &&
                         t.attention_backward == zt_cu_fast_attention_backward &&
                         t.rmsnorm_forward == zt_cu_fast_rmsnorm_forward &&
                         t.rmsnorm_backward == zt_cu_fast_rmsnorm_backward &&
                         t.swiglu_forward == zt_cu_fast_swiglu_forward && t.swiglu_backward == zt_cu_fast_swiglu_backward &&
                         t.embed_backward == zt_cu_fast_embed_backward &&
                         t.rmsnorm_residual_forward == zt_cu_fast_rmsnorm_residual_forward &&
                         t.matmul_out == zt_cu_fast_matmul_out && t.lmhead_xent == zt_cu_fast_lmhead_xent &&
                         t.linear_act16 == zt_cu_fast_linear_act16 &&
                         t.attention_forward_act16 == zt_cu_cudnn_attention_forward_act16 &&
                         t.attention_backward_act16 == zt_cu_cudnn_attention_backward_act16 &&
                         t.swiglu_forward_act16 == zt_cu_fast_swiglu_forward_act16 &&
                         t.swiglu_backward_act16 == zt_cu_fast_swiglu_backward_act16;
    report("fast table: the sixteen fast entries in place", replaced ? 0.0 : 1.0, EXACT, NULL);
    /* the position entries (packed examples) are taken out: the fast kernels have none, and
     * the model refuses --padding_free and --packing on a table without them */
    const int no_pos = !t.rope_forward_pos && !t.rope_backward_pos && !t.attention_forward_pos &&
                       !t.attention_backward_pos;
    report("fast table: no position entries (packed examples refused)", no_pos ? 0.0 : 1.0, EXACT, NULL);
    /* every other entry unchanged: the copy with those sixteen put back is the table */
    t.attention_scratch_bytes = gpu->attention_scratch_bytes, t.attention_forward = gpu->attention_forward;
    t.attention_backward = gpu->attention_backward, t.rmsnorm_forward = gpu->rmsnorm_forward;
    t.rmsnorm_backward = gpu->rmsnorm_backward, t.swiglu_forward = gpu->swiglu_forward;
    t.swiglu_backward = gpu->swiglu_backward, t.embed_backward = gpu->embed_backward;
    t.rmsnorm_residual_forward = gpu->rmsnorm_residual_forward, t.matmul_out = gpu->matmul_out;
    t.lmhead_xent = gpu->lmhead_xent;
    t.linear_act16 = gpu->linear_act16;
    t.attention_forward_act16 = gpu->attention_forward_act16;
    t.attention_backward_act16 = gpu->attention_backward_act16;
    t.swiglu_forward_act16 = gpu->swiglu_forward_act16, t.swiglu_backward_act16 = gpu->swiglu_backward_act16;
    t.rope_forward_pos = gpu->rope_forward_pos, t.rope_backward_pos = gpu->rope_backward_pos;
    t.attention_forward_pos = gpu->attention_forward_pos, t.attention_backward_pos = gpu->attention_backward_pos;
    report("fast table: every other entry the exact one", memcmp(&t, gpu, sizeof t) ? 1.0 : 0.0, EXACT, NULL);
}

static void check_fast_norm(void)
{
    check_fast_table();
    check_fast_rmsnorm(300);
    check_fast_rmsnorm(320);
    check_fast_rmsnorm_paths();
    check_fast_swiglu();
}

static void check_fast_attention(void)
{
    /* head sizes 64 and 128 (Llama's), 32 and 96; grouped queries; T off the 64-row tiles */
    check_fast_attention_case(2, 150, 6, 2, 64, 0, ZT_BF16);
    check_fast_attention_case(1, 130, 4, 4, 128, 0, ZT_BF16);
    check_fast_attention_case(1, 100, 8, 1, 32, 0, ZT_BF16);
    check_fast_attention_case(1, 70, 2, 1, 96, 0, ZT_BF16);
    check_fast_attention_case(1, 1, 2, 1, 64, 0, ZT_BF16); /* one token */
    /* the dkv blocks per (key tile, query head): groups of 1, 2 and 4 heads (without and
     * with the partials and their sum in head order) over 7 key tiles, the last short */
    check_fast_attention_case(1, 421, 2, 2, 32, 0, ZT_BF16);
    check_fast_attention_case(1, 421, 4, 2, 32, 0, ZT_BF16);
    check_fast_attention_case(1, 421, 4, 1, 64, 0, ZT_BF16);
    /* sliding windows: inside a tile, across tiles, rows with no key in a whole tile */
    check_fast_attention_case(1, 200, 4, 2, 64, 10, ZT_BF16);
    check_fast_attention_case(1, 150, 4, 1, 64, 70, ZT_BF16);
    check_fast_attention_case(1, 130, 2, 2, 128, 100, ZT_BF16);
    check_fast_attention_case(1, 70, 2, 1, 64, 1, ZT_BF16);
    /* the exact fallback: fp32 operands, and a head size the tensor-core kernels do not serve */
    check_fast_attention_case(1, 90, 4, 2, 64, 0, ZT_F32);
    check_fast_attention_case(1, 77, 4, 2, 48, 0, ZT_BF16);
}

/* ---- bf16 activations (backend.h's _act16 entries) --------------------------------------
 *
 * Each against its exact composition on the same device inputs: the exact table's
 * entries (matmul, bias and convert; convert, rope, attention and rope's backward on
 * widened copies; swiglu on widened gu), which the
 * exact table's _act16 entry must match bit for bit and the fast one within bf16 error:
 * BF16_TOL where both round the same fp32 value computed in another order (one bf16
 * ulp, 2^-8, each side), FAST_TOL for the tensor-core attention (as above).  The CPU's
 * reference (act16.c) is held to the same compositions by tests/test_act16.c. */

/* linear_act16 (the qkv product writing bf16, its bias in the product) against the exact
 * table's matmul, bias_forward and convert: the exact entry bit for bit (under
 * tools/cuda_emu both run its stand-in products), the fast one (cuBLASLt's BIAS
 * epilogue) within one bf16 rounding, GPU only (--no-matmul skips it) */
static void check_act16_linear(int N, int out, int in, int fast)
{
    const size_t ny = (size_t)N * out;
    float *x = randn((size_t)N * in, 1.0f), *w = randn((size_t)out * in, 0.2f), *b = randn(out, 1.0f);
    uint16_t *x16 = as_dtype(x, ZT_BF16, (size_t)N * in), *w16 = as_dtype(w, ZT_BF16, (size_t)out * in);
    uint16_t *b16 = as_dtype(b, ZT_BF16, out);
    uint16_t *dx = dev(x16, (size_t)N * in * 2), *dw = dev(w16, (size_t)out * in * 2), *db = dev(b16, out * 2);
    float *acc = dev(NULL, ny * 4);
    uint16_t *e16 = dev(NULL, ny * 2), *y16 = dev(NULL, ny * 2), *want = host(ny * 2);
    zt_err err = {0};
    char name[160];
    for (int bias = 0; bias < 2; bias++) {
        if (gpu->matmul(acc, dx, ZT_BF16, dw, ZT_BF16, N, out, in, 0, 1, 0.0f, ZT_BF16, &err))
            die("exact product", &err);
        if (bias)
            gpu->bias_forward(acc, db, ZT_BF16, N, out);
        gpu->convert(e16, ZT_BF16, acc, ZT_F32, ny);
        down(want, e16, ny * 2);
        poison(y16, ny * 2);
        snprintf(name, sizeof name, "%s linear_act16 %dx%dx%d%s vs matmul + bias + convert", fast ? "fast" : "exact", N,
                 out, in, bias ? " with bias" : "");
        if ((fast ? zt_cu_fast_linear_act16 : gpu->linear_act16)(y16, dx, ZT_BF16, dw, ZT_BF16, bias ? db : NULL,
                                                                 ZT_BF16, N, out, in, ZT_BF16, &err)) {
            report(name, INFINITY, 0, "  (error)");
            fprintf(stderr, "  %s\n", err.msg);
        } else {
            check(name, y16, want, ZT_BF16, ny, fast ? BF16_TOL : EXACT);
        }
    }
    free(x), free(w), free(b), free(x16), free(w16), free(b16), free(want);
    dev_free_all();
}

/* F 129: one element a thread; F 136: 16-byte vectors, 17 of them a row (the launcher's
 * choice, act16.cuh) */
static void check_act16_swiglu(int N, int F)
{
    const size_t n = (size_t)N * F;
    float *gu = randn(2 * n, 2.0f), *dh = randn(n, 1.0f);
    uint16_t *gu16 = as_dtype(gu, ZT_BF16, 2 * n);
    uint16_t *d16 = dev(gu16, 2 * n * 2);
    float *dgu = dev(NULL, 2 * n * 4), *ddh = dev(dh, n * 4);
    gpu->convert(dgu, ZT_F32, d16, ZT_BF16, 2 * n); /* the composition's fp32 gu: the bf16 values widened */
    uint16_t *eh = dev(NULL, n * 2), *eg = dev(NULL, 2 * n * 2), *xh = dev(NULL, n * 2), *xg = dev(NULL, 2 * n * 2);
    uint16_t *fh = dev(NULL, n * 2), *fg = dev(NULL, 2 * n * 2);
    gpu->swiglu_forward(eh, ZT_BF16, dgu, N, F);
    gpu->swiglu_backward(eg, ZT_BF16, ddh, dgu, N, F);
    poison(xh, n * 2), poison(xg, 4 * n), poison(fh, n * 2), poison(fg, 4 * n);
    gpu->swiglu_forward_act16(xh, d16, N, F);
    gpu->swiglu_backward_act16(xg, ddh, d16, N, F);
    zt_cu_fast_swiglu_forward_act16(fh, d16, N, F);
    zt_cu_fast_swiglu_backward_act16(fg, ddh, d16, N, F);
    uint16_t *want_h = host(n * 2), *want_g = host(4 * n);
    down(want_h, eh, n * 2), down(want_g, eg, 4 * n);
    char name[128];
    snprintf(name, sizeof name, "exact swiglu_forward_act16 vs swiglu on widened gu (N %d F %d)", N, F);
    check(name, xh, want_h, ZT_BF16, n, EXACT);
    snprintf(name, sizeof name, "exact swiglu_backward_act16 vs swiglu on widened gu (N %d F %d)", N, F);
    check(name, xg, want_g, ZT_BF16, 2 * n, EXACT);
    snprintf(name, sizeof name, "fast swiglu_forward_act16 vs swiglu on widened gu (N %d F %d)", N, F);
    check(name, fh, want_h, ZT_BF16, n, BF16_TOL);
    snprintf(name, sizeof name, "fast swiglu_backward_act16 vs swiglu on widened gu (N %d F %d)", N, F);
    check(name, fg, want_g, ZT_BF16, 2 * n, BF16_TOL);
    free(gu), free(dh), free(gu16), free(want_h), free(want_g);
    dev_free_all();
}

/* The attention over the product's bf16 qkv with RoPE in it: q and k rotated as they are
 * read, dq and dk rotated back before they are written (fp32 and bf16 dqkv), against the
 * exact composition: widen, rope, attention, attention's backward, rope's backward.  T
 * spans several 64-row tiles, so a tile that rotates by the wrong position (its own row
 * instead of the sequence's), or a gradient left unrotated, is off by O(1). */
static void check_act16_attention(int B, int T, int nh, int nkv, int hd, int window, int rope)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T, nt = (size_t)T * (hd / 2);
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    uint16_t *qkv16 = as_dtype(qkv, ZT_BF16, nqkv);
    /* the fast table's size, which the exact entries also run in (check_fast_attention_case) */
    const size_t gs = zt_cu_fast_attention_scratch_bytes(B, T, nh, nkv, hd, ZT_BF16);
    const int tensor_cores = gs > 0 && zt_cu_fast_attention_supported(hd);
    char tag[128], name[200];
    snprintf(tag, sizeof tag, "B=%d T=%d nh=%d nkv=%d hd=%d window=%d %s%s", B, T, nh, nkv, hd, window,
             tensor_cores ? "tensor cores" : "exact fallback", rope ? "" : ", no rope tables");
    uint16_t *d16 = dev(qkv16, nqkv * 2);
    float *dq = dev(NULL, nqkv * 4), *ddo = dev(dout, nout * 4), *dc = dev(NULL, nt * 4), *ds = dev(NULL, nt * 4);
    const zt_rope_freqs f = {10000.0f, 0, 0, 0, 0, 0};
    gpu->rope_tables(dc, ds, T, hd, &f);
    gpu->convert(dq, ZT_F32, d16, ZT_BF16, nqkv);
    if (rope)
        gpu->rope_forward(dq, dc, ds, B, T, nh, nkv, hd);
    else /* the entries without tables: q and k as they are (the dkv kernel's cp.async path) */
        dc = ds = NULL;
    void *scratch = gs ? dev(NULL, gs) : NULL;
    /* the composition: the exact kernels on the widened, rotated qkv, backward on the
     * widened out16, its gradient rotated back */
    float *eo = dev(NULL, nout * 4), *el = dev(NULL, nlse * 4), *edq = dev(NULL, nqkv * 4), *eow = dev(NULL, nout * 4);
    uint16_t *eo16 = dev(NULL, nout * 2), *edq16 = dev(NULL, nqkv * 2);
    gpu->attention_forward(eo, eo16, el, dq, scratch, B, T, nh, nkv, hd, window);
    gpu->convert(eow, ZT_F32, eo16, ZT_BF16, nout);
    gpu->attention_backward(edq, ddo, dq, eow, el, scratch, B, T, nh, nkv, hd, window);
    if (rope)
        gpu->rope_backward(edq, dc, ds, B, T, nh, nkv, hd);
    gpu->convert(edq16, ZT_BF16, edq, ZT_F32, nqkv);
    uint16_t *want_o16 = host(nout * 2), *want_dq16 = host(nqkv * 2);
    float *want_l = host(nlse * 4), *want_dq = host(nqkv * 4);
    down(want_o16, eo16, nout * 2), down(want_l, el, nlse * 4), down(want_dq, edq, nqkv * 4);
    down(want_dq16, edq16, nqkv * 2);
    for (int fast = 0; fast < 2; fast++) {
        const double tol = fast && tensor_cores ? FAST_TOL : EXACT;
        const char *who = fast ? "fast" : "exact";
        uint16_t *o16 = dev(NULL, nout * 2), *g16 = dev(NULL, nqkv * 2), *g16b = dev(NULL, nqkv * 2);
        float *l = dev(NULL, nlse * 4), *g = dev(NULL, nqkv * 4);
        poison(o16, nout * 2), poison(l, nlse * 4), poison(g, nqkv * 4), poison(g16, nqkv * 2), poison(g16b, nqkv * 2);
        (fast ? zt_cu_fast_attention_forward_act16 : gpu->attention_forward_act16)(o16, l, d16, dc, ds, scratch, B, T,
                                                                                  nh, nkv, hd, window);
        snprintf(name, sizeof name, "%s attention_forward_act16 (rope on load) out16 vs exact (%s)", who, tag);
        check(name, o16, want_o16, ZT_BF16, nout, tol);
        snprintf(name, sizeof name, "%s attention_forward_act16 (rope on load) lse vs exact (%s)", who, tag);
        check(name, l, want_l, ZT_F32, nlse, tol);
        /* backward from the composition's lse and out16, so it is checked on its own: both
         * gradients, then the bf16 one alone (as the model asks without a qkv bias) */
        (fast ? zt_cu_fast_attention_backward_act16 : gpu->attention_backward_act16)(
            g, g16, ddo, d16, eo16, el, dc, ds, scratch, B, T, nh, nkv, hd, window);
        (fast ? zt_cu_fast_attention_backward_act16 : gpu->attention_backward_act16)(
            NULL, g16b, ddo, d16, eo16, el, dc, ds, scratch, B, T, nh, nkv, hd, window);
        snprintf(name, sizeof name, "%s attention_backward_act16 (rope back) dqkv vs exact (%s)", who, tag);
        check(name, g, want_dq, ZT_F32, nqkv, tol);
        snprintf(name, sizeof name, "%s attention_backward_act16 (rope back) dqkv16 vs exact (%s)", who, tag);
        check(name, g16, want_dq16, ZT_BF16, nqkv, tol);
        snprintf(name, sizeof name, "%s attention_backward_act16 dqkv16 alone vs exact (%s)", who, tag);
        check(name, g16b, want_dq16, ZT_BF16, nqkv, tol);
    }
    free(qkv), free(dout), free(qkv16), free(want_o16), free(want_l), free(want_dq), free(want_dq16);
    dev_free_all();
}

static void check_fast_act16(void)
{
    check_act16_linear(37, 48, 70, 0);
    check_act16_swiglu(33, 129);
    check_act16_swiglu(33, 136);
    check_act16_attention(2, 150, 6, 2, 64, 0, 1);
    check_act16_attention(1, 130, 4, 4, 128, 0, 1);
    check_act16_attention(1, 150, 4, 1, 64, 70, 1);
    check_act16_attention(1, 421, 4, 2, 32, 0, 1); /* groups of 2 over 7 key tiles: the sum's RoPE */
    check_act16_attention(1, 77, 4, 2, 48, 0, 1);  /* the exact fallback */
    check_act16_attention(1, 200, 4, 4, 64, 0, 0); /* no tables: dkv's cp.async staging of Q */
}

/* cuDNN's fused attention through the fast table's _act16 entries (fast_cudnn.cu) at
 * the model's shapes, against the exact composition (as check_act16_attention's) and
 * the own kernels.  The bound: the own kernels' (FAST_TOL: p and ds rounded to bf16 at
 * other values) plus one bf16 rounding more, of dq and dk, which cuDNN writes in bf16
 * before they are rotated back.  Each backward runs from its own forward's out16 and
 * lse (cuDNN's stats with cuDNN, the exact lse with the exact kernels: never mixed).
 * Where the shape does not take cuDNN (no cuDNN in the build or on the machine, not a
 * Hopper, ZT_ATTENTION=own, tools/cuda_emu), the comparisons are reported as not run,
 * never as passed, and the entries must then be the own kernels, bit for bit. */
#define CUDNN_TOL (3.0 / 128 + 1e-5)
static void check_cudnn_case(int B, int T, int nh, int nkv, int hd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd, nqkv = (size_t)B * T * W, nout = (size_t)B * T * nh * hd,
                 nlse = (size_t)B * nh * T, nt = (size_t)T * (hd / 2);
    char tag[128], name[240], words[256];
    snprintf(tag, sizeof tag, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    const int cudnn = zt_cu_cudnn_attention_used(B, T, nh, nkv, hd, 0);
    zt_cuda_attention_plan(B, T, nh, nkv, hd, 0, words, sizeof words);
    if (!cudnn && T > 300) { /* the fallback's bits are shown on the small shapes (the emulator is slow) */
        printf("skip cudnn-attention (%s): not run: %s\n", tag, words);
        n_skipped++;
        return;
    }
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    uint16_t *qkv16 = as_dtype(qkv, ZT_BF16, nqkv);
    const size_t gs = gpu->attention_scratch_bytes(B, T, nh, nkv, hd, ZT_BF16);
    uint16_t *d16 = dev(qkv16, nqkv * 2);
    float *ddo = dev(dout, nout * 4), *dc = dev(NULL, nt * 4), *ds = dev(NULL, nt * 4);
    const zt_rope_freqs f = {10000.0f, 0, 0, 0, 0, 0};
    gpu->rope_tables(dc, ds, T, hd, &f);
    void *scratch = dev(NULL, gs);
    /* the own kernels: the reference where cuDNN does not run, a second opinion where it does */
    uint16_t *oo16 = dev(NULL, nout * 2), *og16 = dev(NULL, nqkv * 2);
    float *ol = dev(NULL, nlse * 4);
    zt_cu_fast_attention_forward_act16(oo16, ol, d16, dc, ds, scratch, B, T, nh, nkv, hd, 0);
    zt_cu_fast_attention_backward_act16(NULL, og16, ddo, d16, oo16, ol, dc, ds, scratch, B, T, nh, nkv, hd, 0);
    uint16_t *co16 = dev(NULL, nout * 2), *cg16 = dev(NULL, nqkv * 2), *cg16b = dev(NULL, nqkv * 2);
    float *cl = dev(NULL, nlse * 4), *cg = dev(NULL, nqkv * 4);
    poison(co16, nout * 2), poison(cl, nlse * 4), poison(cg, nqkv * 4), poison(cg16, nqkv * 2), poison(cg16b, nqkv * 2);
    zt_cu_cudnn_attention_forward_act16(co16, cl, d16, dc, ds, scratch, B, T, nh, nkv, hd, 0);
    zt_cu_cudnn_attention_backward_act16(cg, cg16, ddo, d16, co16, cl, dc, ds, scratch, B, T, nh, nkv, hd, 0);
    zt_cu_cudnn_attention_backward_act16(NULL, cg16b, ddo, d16, co16, cl, dc, ds, scratch, B, T, nh, nkv, hd, 0);
    uint16_t *want_o16 = host(nout * 2), *want_g16 = host(nqkv * 2);
    float *want_l = host(nlse * 4);
    if (!cudnn) {
        printf("skip cudnn-attention (%s): not run: %s\n", tag, words);
        n_skipped++;
        down(want_o16, oo16, nout * 2), down(want_l, ol, nlse * 4), down(want_g16, og16, nqkv * 2);
        snprintf(name, sizeof name, "the table's attention_forward_act16 = own kernels: out16 (%s)", tag);
        check(name, co16, want_o16, ZT_BF16, nout, EXACT);
        snprintf(name, sizeof name, "the table's attention_forward_act16 = own kernels: lse (%s)", tag);
        check(name, cl, want_l, ZT_F32, nlse, EXACT);
        snprintf(name, sizeof name, "the table's attention_backward_act16 = own kernels: dqkv16 (%s)", tag);
        check(name, cg16b, want_g16, ZT_BF16, nqkv, EXACT);
    } else {
        /* the exact composition: widen, rotate, exact kernels, rotate back */
        float *eq = dev(NULL, nqkv * 4), *eo = dev(NULL, nout * 4), *el = dev(NULL, nlse * 4), *eg = dev(NULL, nqkv * 4);
        uint16_t *eo16 = dev(NULL, nout * 2), *eg16 = dev(NULL, nqkv * 2);
        gpu->convert(eq, ZT_F32, d16, ZT_BF16, nqkv);
        gpu->rope_forward(eq, dc, ds, B, T, nh, nkv, hd);
        gpu->attention_forward(eo, eo16, el, eq, scratch, B, T, nh, nkv, hd, 0);
        gpu->attention_backward(eg, ddo, eq, eo, el, scratch, B, T, nh, nkv, hd, 0);
        gpu->rope_backward(eg, dc, ds, B, T, nh, nkv, hd);
        gpu->convert(eg16, ZT_BF16, eg, ZT_F32, nqkv);
        float *want_g = host(nqkv * 4);
        down(want_o16, eo16, nout * 2), down(want_l, el, nlse * 4), down(want_g, eg, nqkv * 4);
        down(want_g16, eg16, nqkv * 2);
        snprintf(name, sizeof name, "cudnn attention out16 vs exact (%s)", tag);
        check(name, co16, want_o16, ZT_BF16, nout, CUDNN_TOL);
        snprintf(name, sizeof name, "cudnn attention stats vs exact lse (%s)", tag);
        check(name, cl, want_l, ZT_F32, nlse, CUDNN_TOL);
        snprintf(name, sizeof name, "cudnn attention backward dqkv vs exact (%s)", tag);
        check(name, cg, want_g, ZT_F32, nqkv, CUDNN_TOL);
        snprintf(name, sizeof name, "cudnn attention backward dqkv16 vs exact (%s)", tag);
        check(name, cg16, want_g16, ZT_BF16, nqkv, CUDNN_TOL);
        snprintf(name, sizeof name, "cudnn attention backward dqkv16 alone = with dqkv (%s)", tag);
        down(want_g16, cg16, nqkv * 2);
        check(name, cg16b, want_g16, ZT_BF16, nqkv, EXACT); /* deterministic, and the same with or without fp32 */
        down(want_o16, oo16, nout * 2), down(want_g16, og16, nqkv * 2);
        snprintf(name, sizeof name, "cudnn attention out16 vs own kernels (%s)", tag);
        check(name, co16, want_o16, ZT_BF16, nout, CUDNN_TOL);
        snprintf(name, sizeof name, "cudnn attention backward dqkv16 vs own kernels (%s)", tag);
        check(name, cg16, want_g16, ZT_BF16, nqkv, CUDNN_TOL);
        free(want_g);
    }
    free(qkv), free(dout), free(qkv16), free(want_o16), free(want_l), free(want_g16);
    dev_free_all();
}

static void check_cudnn_attention(void)
{
    check_cudnn_case(2, 300, 8, 2, 64);   /* T off cuDNN's and the own kernels' tiles */
    check_cudnn_case(1, 130, 4, 4, 128);  /* no grouping, hd 128 */
    check_cudnn_case(1, 2048, 32, 8, 64); /* the 1B model's layer */
    check_cudnn_case(1, 2048, 16, 4, 128);
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

/* g_bf16 (fp32 only): the device reads each gradient rounded to bf16 (zt_adamw_step's
 * g_bf16), the CPU's step without it takes the gradient rounded beforehand */
static void check_adamw_case(zt_dtype dt, int with_comp, int cast, zt_dtype cast_dt, int g_bf16)
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
        if (g_bf16) /* the CPU's gradient rounded here, the device's as it reads it */
            for (size_t i = 0; i < n; i++)
                ((float *)gh)[i] = zt_round_bf16(((float *)gh)[i]);
        cpu->adamw_step(ph, mh, vh, gh, with_comp ? ch : NULL, dt, n, &s, castc, cast_dt, &ca);
        if (dcast)
            poison(dcast, n * zt_dtype_size(cast_dt));
        s.g_bf16 = g_bf16;
        gpu->adamw_step(dp, dm, dvv, dg, dc, dt, n, &s, dcast, cast_dt, &ga);
        free(g), free(gh);
    }
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "%s master%s%s%s%s", zt_dtype_name(dt), with_comp ? ", Kahan" : "",
             cast ? ", cast to " : "", cast ? zt_dtype_name(cast_dt) : "", g_bf16 ? ", g read as bf16" : "");
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
    check_adamw_case(ZT_F32, 0, 0, ZT_F32, 0);
    check_adamw_case(ZT_F32, 0, 1, ZT_BF16, 0);
    check_adamw_case(ZT_F32, 0, 1, ZT_F16, 0);
    check_adamw_case(ZT_F32, 0, 1, ZT_F32, 0);
    check_adamw_case(ZT_BF16, 0, 0, ZT_F32, 0);
    check_adamw_case(ZT_BF16, 1, 0, ZT_F32, 0);
    check_adamw_case(ZT_F16, 0, 0, ZT_F32, 0);
    check_adamw_case(ZT_F16, 1, 0, ZT_F32, 0);
    /* the one-rank bf16 reduce's rounding left to AdamW (engine.c, "rounding pending") */
    check_adamw_case(ZT_F32, 0, 0, ZT_F32, 1);
    check_adamw_case(ZT_F32, 0, 1, ZT_BF16, 1);
}

/* ---- fast mode: its table's own kernels and the asynchronous step's entries --------------- */

static double down_double(const double *d)
{
    double h;
    down(&h, d, sizeof h);
    return h;
}

/* a device copy of n bytes of h at byte offset off of a buffer of its own: off not a
 * multiple of 16 takes the kernels' one-element-at-a-time paths */
static void *dev_at(const void *h, size_t n, size_t off)
{
    char *d = dev(NULL, n + off);
    up(d + off, h, n);
    return d + off;
}

/* adamw_unit against the CPU's (adamw.h: per-parameter AdamW's bits): segments with
 * and without decay and a gap, clip and skip read from the device's scalars; the
 * device's arrays start off elements into their buffers (1: unaligned) */
static void check_adamw_unit_case(const zt_backend *fast, zt_dtype dt, int with_comp, zt_dtype cast_dt, size_t off,
                                  int g_bf16)
{
    const size_t n = 10007, es = zt_dtype_size(dt);
    const zt_adamw_seg segs[] = {{0, 1}, {3001, -1}, {3100, 0}, {7000, 1}};
    float *p = randn(n, 1.0f), *m = randn(n, 0.01f), *v = randn(n, 0.001f), *c = randn(n, 0.001f);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    void *ph = as_dtype(p, dt, n), *mh = as_dtype(m, dt, n), *vh = as_dtype(v, dt, n), *ch = as_dtype(c, dt, n);
    void *dp = dev_at(ph, n * es, off * es), *dm = dev_at(mh, n * es, off * es), *dvv = dev_at(vh, n * es, off * es);
    void *dc = with_comp ? dev_at(ch, n * es, off * es) : NULL;
    const int cast = dt == ZT_F32;
    void *castc = cast ? host(n * zt_dtype_size(cast_dt)) : NULL;
    void *dcast = cast ? (char *)dev(NULL, (n + off) * zt_dtype_size(cast_dt)) + off * zt_dtype_size(cast_dt) : NULL;
    zt_adamw_seg *dsegs = dev(segs, sizeof segs);
    zt_step_scalars hs = {0};
    zt_step_scalars *dsc = dev(&hs, sizeof hs);
    for (long t = 1; t <= 3; t++) {
        float *g = randn(n, 0.1f);
        void *gh = as_dtype(g, dt, n);
        void *dg = dev_at(gh, n * es, off * es);
        zt_adamw_step s = {.lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .t = t};
        zt_step_scalars one = {.clip = t == 2 ? 0.5f : 1.0f, .skip = t == 3}; /* step 3 is skipped */
        hs.clip = one.clip, hs.skip = one.skip;
        up((char *)dsc + offsetof(zt_step_scalars, clip), &one.clip, sizeof one.clip);
        up((char *)dsc + offsetof(zt_step_scalars, skip), &one.skip, sizeof one.skip);
        /* lr and t: the step's inputs in the scalars, as the engine uploads them */
        zt_adamw_unit_inputs(&hs, &s, s.lr, s.t);
        up((char *)dsc + ZT_STEP_OUTPUT_BYTES, (char *)&hs + ZT_STEP_OUTPUT_BYTES,
           sizeof hs - ZT_STEP_OUTPUT_BYTES);
        if (g_bf16) /* as check_adamw_case: the CPU's gradient rounded beforehand */
            for (size_t i = 0; i < n; i++)
                ((float *)gh)[i] = zt_round_bf16(((float *)gh)[i]);
        cpu->adamw_unit(ph, mh, vh, gh, with_comp ? ch : NULL, dt, n, segs, 4, &s, &hs, castc, cast_dt);
        s.g_bf16 = g_bf16;
        fast->adamw_unit(dp, dm, dvv, dg, dc, dt, n, dsegs, 4, &s, dsc, dcast, cast_dt);
        free(g), free(gh);
    }
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "%s master%s%s%s%s%s", zt_dtype_name(dt), with_comp ? ", Kahan" : "",
             cast ? ", cast to " : "", cast ? zt_dtype_name(cast_dt) : "", off % 16 ? ", unaligned" : "",
             g_bf16 ? ", g read as bf16" : "");
    snprintf(name, sizeof name, "adamw_unit p (%s, 3 steps, the last skipped)", tag);
    check(name, dp, ph, dt, n, EXACT);
    snprintf(name, sizeof name, "adamw_unit m, v (%s)", tag);
    check(name, dm, mh, dt, n, EXACT);
    check(name, dvv, vh, dt, n, EXACT);
    if (dc) {
        snprintf(name, sizeof name, "adamw_unit compensation (%s)", tag);
        check(name, dc, ch, dt, n, EXACT);
    }
    if (cast) {
        snprintf(name, sizeof name, "adamw_unit cast copy (%s)", tag);
        check(name, dcast, castc, cast_dt, n, EXACT);
    }
    zt_step_scalars gs;
    down(&gs, dsc, sizeof gs);
    snprintf(name, sizeof name, "adamw_unit audit counts on the device (%s)", tag);
    report(name, gs.audit_updated == hs.audit_updated && gs.audit_lost == hs.audit_lost ? 0.0 : 1.0, EXACT, NULL);
    snprintf(name, sizeof name, "adamw_unit audit ratio sum on the device (%s)", tag);
    check_scalar(name, gs.audit_ratio_sum, hs.audit_ratio_sum, DOUBLE_TOL);
    free(p), free(m), free(v), free(c), free(ph), free(mh), free(vh), free(ch), free(castc);
    dev_free_all();
}

/* the embedding's backward with atomics: the CPU's sum in another order */
static void check_fast_embed(const zt_backend *fast)
{
    const int V = 50, C = 72, N = 64;
    int tokens[64];
    for (int i = 0; i < N; i++)
        tokens[i] = (int)(zt_rand_next(&rng_state) % 11) * 4;
    float *dx = randn((size_t)N * C, 1.0f), *dwte = randn((size_t)V * C, 1.0f);
    float *want = host((size_t)V * C * sizeof(float));
    memcpy(want, dwte, (size_t)V * C * sizeof(float));
    cpu->embed_backward(want, dx, tokens, N, C, V, 1.0f);
    float *ddx = dev(dx, (size_t)N * C * sizeof(float)), *d = dev(dwte, (size_t)V * C * sizeof(float));
    fast->embed_backward(d, ddx, tokens, N, C, V, 1.0f);
    check("fast embed backward (atomics; repeated tokens)", d, want, ZT_F32, (size_t)V * C, FP32_TOL);
    check_embed_store("fast embed backward, beta 0", fast->embed_backward, dx, tokens, N, C, V, FP32_TOL);
    free(dx), free(dwte), free(want);
    dev_free_all();
}

/* sums of squares and the loss into device doubles */
static void check_fast_sums(const zt_backend *fast)
{
    const size_t n = 123457;
    float *x = randn(n, 1.0f);
    double *dd = dev(NULL, 2 * sizeof(double));
    static const zt_dtype dts[] = {ZT_F32, ZT_BF16, ZT_F16};
    char name[96];
    for (int k = 0; k < 3; k++) {
        void *h = as_dtype(x, dts[k], n);
        void *d = dev(h, n * zt_dtype_size(dts[k]));
        fast->sumsq_into(dd, d, dts[k], n);
        snprintf(name, sizeof name, "sumsq_into (%s)", zt_dtype_name(dts[k]));
        check_scalar(name, down_double(dd), cpu->sumsq(h, dts[k], n), DOUBLE_TOL);
        free(h);
    }
    {
        float *want = host(n * 4);
        memcpy(want, x, n * 4);
        double s = cpu->round_bf16(want, n, 1);
        float *d = dev(x, n * 4);
        fast->sumsq_bf16_into(dd + 1, d, n);
        /* read only: d keeps x's bits, the sum is the rounding pass's */
        check("sumsq_bf16_into leaves its input", d, x, ZT_F32, n, EXACT);
        check_scalar("sumsq_bf16_into sum of squares", down_double(dd + 1), s, DOUBLE_TOL);
    }
    {
        const int N = 20, V = 1000;
        int targets[20];
        for (int i = 0; i < N; i++)
            targets[i] = (int)(zt_rand_next(&rng_state) % V);
        float *logits = randn((size_t)N * V, 3.0f), *want = host((size_t)N * V * 4);
        double l = cpu->xent(want, NULL, logits, targets, N, V, 0.05f);
        double start = 1.5; /* it adds */
        up(dd, &start, sizeof start);
        float *dl = dev(logits, (size_t)N * V * 4);
        fast->xent_into(dl, NULL, dl, targets, N, V, 0.05f, NULL, dd);
        check_scalar("xent_into loss (added to the device's sum)", down_double(dd), start + l, DOUBLE_TOL);
        check("xent_into dlogits in place", dl, want, ZT_F32, (size_t)N * V, FP32_TOL);
        /* the gradient scale formed on the device from the step's scalars (fast mode's
         * backward: its count of targets, the loss scale held there) is the host's
         * zt_grad_scale to the bit, fp16's scale on (29, 3 * 2^10: 1/29 rounded to fp32
         * first changes the last bit) and off; the argument beside them is ignored */
        for (int on = 0; on < 2; on++) {
            zt_step_scalars sc = {.count = 29.0, .ls_on = on};
            sc.ls.scale = 3072.0;
            zt_step_scalars *dsc = dev(&sc, sizeof sc);
            const float gs = zt_grad_scale(29.0, on ? 3072.0 : 1.0);
            float *a = dev(logits, (size_t)N * V * 4), *b = dev(logits, (size_t)N * V * 4);
            double *la = dev(NULL, sizeof(double)), *lb = dev(NULL, sizeof(double));
            fast->xent_into(a, NULL, a, targets, N, V, gs, NULL, la);
            fast->xent_into(b, NULL, b, targets, N, V, -3.0f, dsc, lb);
            check_same(on ? "xent_into: the scale from the device's step scalars (fp16 on) is the host's"
                          : "xent_into: the scale from the device's step scalars (fp16 off) is the host's",
                       b, a, (size_t)N * V * 4);
            check_same("xent_into: its loss with the device's scale", lb, la, sizeof(double));
        }
        free(logits);
    }
    free(x);
    dev_free_all();
}

/* the step's verdict, fp16's loss scale and the schedule on the device against the host */
static void check_fast_verdicts(const zt_backend *fast)
{
    /* the verdict on the device against the host's rule, finite and not */
    for (int bad = 0; bad < 2; bad++) {
        double sums[5] = {1.5, 2.25, 0.0, 7.0, 3.0};
        if (bad)
            sums[3] = INFINITY;
        zt_step_scalars want = {0}, got;
        zt_step_verdict(&want, sums, 5, 1.0, 0.25);
        double *ds = dev(sums, sizeof sums);
        zt_step_scalars *dsc = dev(NULL, sizeof got);
        fast->step_verdict(dsc, ds, 5, 1.0, 0.25);
        down(&got, dsc, sizeof got);
        report(bad ? "step_verdict (an inf: skip, first bad unit)" : "step_verdict (norm, clip)",
               got.skip == want.skip && got.first_bad == want.first_bad && got.norm == want.norm &&
               got.clip == want.clip && got.sumsq == want.sumsq ? 0.0 : 1.0, EXACT, NULL);
    }
    /* fp16's loss scale held on the device: the verdict divides out its scale and
     * updates it (hysteresis 2: the first overflow spends it, the second halves) */
    zt_step_scalars lw = {.ls = {.scale = 1024.0, .min_scale = 1.0, .window = 2, .hysteresis = 2,
                                 .cur_hysteresis = 2, .last_overflow_iter = -1}, .ls_on = 1};
    zt_step_scalars *lsc = dev(&lw, sizeof lw);
    for (int k = 0; k < 4; k++) {
        double sums[2] = {4.0, k == 1 || k == 2 ? INFINITY : 12.0};
        double *ds = dev(sums, sizeof sums);
        zt_step_scalars got;
        zt_step_verdict(&lw, sums, 2, 1.0, 1.0);
        fast->step_verdict(lsc, ds, 2, 1.0, 1.0);
        down(&got, lsc, sizeof got);
        report("step_verdict with the loss scale on the device (its update, the unscale)",
               got.skip == lw.skip && got.norm == lw.norm && got.clip == lw.clip && got.ls_used == lw.ls_used &&
               !memcmp(&got.ls, &lw.ls, sizeof lw.ls) ? 0.0 : 1.0, EXACT, NULL);
    }
    /* the learning-rate schedule on the device: each verdict takes its step's inputs
     * from entry `applied` of the table and counts the step unless it skips (the host's
     * rule, zt_step_take_input); four steps, the second skipped, against the host */
    {
        zt_step_input tab[3];
        for (int u = 0; u < 3; u++) {
            zt_step_scalars in = {0};
            zt_adamw_step st = {1e-3 * (u + 1), 0.1, 0.9, 0.999, 1e-8, u + 1, 1.0f, 0};
            zt_adamw_unit_inputs(&in, &st, st.lr, st.t);
            tab[u] = (zt_step_input){in.lr, in.decay, in.neg_step, in.bc2_sqrt};
        }
        zt_step_input *dtab = dev(tab, sizeof tab);
        zt_step_scalars sw = {.sched = tab, .sched_len = 3, .applied = 0};
        zt_step_scalars sd = sw;
        sd.sched = dtab;
        zt_step_scalars *ssc = dev(&sd, sizeof sd);
        for (int k = 0; k < 4; k++) {
            double sums[2] = {4.0, k == 1 ? INFINITY : 12.0};
            double *ds = dev(sums, sizeof sums);
            zt_step_scalars got;
            zt_step_verdict(&sw, sums, 2, 1.0, 1.0);
            fast->step_verdict(ssc, ds, 2, 1.0, 1.0);
            down(&got, ssc, sizeof got);
            report("step_verdict with the schedule on the device (the step's inputs, the applied count)",
                   got.skip == sw.skip && got.lr == sw.lr && got.t == sw.t && got.decay == sw.decay &&
                   got.neg_step == sw.neg_step && got.bc2_sqrt == sw.bc2_sqrt && got.applied == sw.applied
                       ? 0.0 : 1.0, EXACT, NULL);
        }
    }
    dev_free_all();
}

static void check_fast_step(void)
{
    const zt_backend *fast = zt_backend_cuda_mode(ZT_KERNELS_FAST);
    report("fast table: kernels = fast", fast && fast->kernels == ZT_KERNELS_FAST ? 0.0 : 1.0, EXACT, NULL);
    if (!fast)
        return;
    check_fast_embed(fast);
    check_fast_sums(fast);
    check_fast_verdicts(fast);
    check_adamw_unit_case(fast, ZT_F32, 0, ZT_BF16, 0, 0);
    check_adamw_unit_case(fast, ZT_BF16, 1, ZT_BF16, 0, 0);
    check_adamw_unit_case(fast, ZT_F16, 0, ZT_F16, 0, 0);
    check_adamw_unit_case(fast, ZT_F32, 0, ZT_F32, 1, 0);
    check_adamw_unit_case(fast, ZT_BF16, 1, ZT_BF16, 1, 0);
    /* the one-rank bf16 reduce's rounding left to AdamW, vector and scalar paths */
    check_adamw_unit_case(fast, ZT_F32, 0, ZT_BF16, 0, 1);
    check_adamw_unit_case(fast, ZT_F32, 0, ZT_BF16, 1, 1);
}

/* One optimizer step of the asynchronous step on one unit: its sums of squares, the
 * verdict and AdamW, all on the device. */
typedef struct graph_bufs {
    float *p, *m, *v;
    uint16_t *cast;
    double *sums;
    zt_step_scalars *sc;
} graph_bufs;

static const zt_adamw_step graph_hp = {.lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                       .t = 1};

/* Step k's inputs (lr and t change every step, as a schedule's do) into b's scalars
 * through the fast table's upload, outside any capture, as the engine does. */
static void graph_inputs(const zt_backend *fast, const graph_bufs *b, int k)
{
    static zt_step_scalars in;
    zt_adamw_unit_inputs(&in, &graph_hp, 1e-3 * (k + 1), k + 1);
    fast->upload((char *)b->sc + ZT_STEP_OUTPUT_BYTES, (char *)&in + ZT_STEP_OUTPUT_BYTES,
                 sizeof in - ZT_STEP_OUTPUT_BYTES);
}

static void graph_step(const zt_backend *fast, const graph_bufs *b, const float *g, const zt_adamw_seg *segs, size_t n)
{
    const zt_adamw_step s = graph_hp; /* its lr and t are not read by adamw_unit: the scalars' are */
    fast->zero(b->sc, ZT_STEP_OUTPUT_BYTES);
    fast->sumsq_into(b->sums, g, ZT_F32, n / 2);
    fast->sumsq_into(b->sums + 1, g + n / 2, ZT_F32, n - n / 2);
    fast->step_verdict(b->sc, b->sums, 2, 0.5, 1.0);
    fast->adamw_unit(b->p, b->m, b->v, g, NULL, ZT_F32, n, segs, 4, &s, b->sc, b->cast, ZT_BF16);
}

static graph_bufs graph_bufs_of(const float *p, const float *m, const float *v, size_t n)
{
    graph_bufs b = {dev(p, n * 4), dev(m, n * 4), dev(v, n * 4), dev(NULL, n * 2), dev(NULL, 2 * sizeof(double)),
                    dev(NULL, sizeof(zt_step_scalars))};
    return b;
}

/* A captured step replayed three times gives the bits of the same entries run three
 * times: capture records what the fast table queues, with nothing that waits or
 * allocates inside it (backend_cuda.h). */
static void check_graph(void)
{
    if (no_graphs) {
        printf("skip graph (every case): not run (--no-graphs)\n");
        n_skipped++;
        return;
    }
    const zt_backend *fast = zt_backend_cuda_mode(ZT_KERNELS_FAST);
    const size_t n = 10007;
    const zt_adamw_seg segs[] = {{0, 1}, {3001, -1}, {3100, 0}, {7000, 1}};
    float *p = randn(n, 1.0f), *m = randn(n, 0.01f), *v = randn(n, 0.001f), *g = randn(n, 0.1f);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    zt_adamw_seg *dsegs = dev(segs, sizeof segs);
    float *dg = dev(g, n * 4);
    graph_bufs a = graph_bufs_of(p, m, v, n), b = graph_bufs_of(p, m, v, n);
    for (int k = 0; k < 3; k++) { /* directly; this also grows the scratch before the capture */
        graph_inputs(fast, &a, k);
        graph_step(fast, &a, dg, dsegs, n);
    }
    /* captured once through the table's graph entries, replayed three times with
     * each step's lr and t uploaded before its launch: baked into the graph, they
     * would give the first step's three times */
    zt_err err = {0};
    zt_graph *graph = NULL;
    int rc = fast->graph_begin(&err);
    if (rc == ZT_OK) {
        graph_step(fast, &b, dg, dsegs, n);
        rc = fast->graph_end(&graph, &err);
    }
    for (int k = 0; rc == ZT_OK && k < 3; k++) {
        graph_inputs(fast, &b, k);
        rc = fast->graph_launch(graph, &err);
    }
    report("graph: capture and three launches, lr and t changing", rc == ZT_OK ? 0.0 : 1.0, EXACT,
           rc ? err.msg : NULL);
    if (rc == ZT_OK) {
        float *want = host(n * 4);
        down(want, a.p, n * 4);
        check("graph: p after three replays", b.p, want, ZT_F32, n, EXACT);
        down(want, a.m, n * 4);
        check("graph: m after three replays", b.m, want, ZT_F32, n, EXACT);
        down(want, a.v, n * 4);
        check("graph: v after three replays", b.v, want, ZT_F32, n, EXACT);
        zt_step_scalars sa, sb;
        down(&sa, a.sc, sizeof sa);
        down(&sb, b.sc, sizeof sb);
        report("graph: step scalars (verdict, audit) after three replays", memcmp(&sa, &sb, sizeof sa) ? 1.0 : 0.0,
               EXACT, NULL);
    }
    if (graph)
        fast->graph_free(graph);
    free(p), free(m), free(v), free(g);
    dev_free_all();
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
    { /* LoRA's scale: a block of 37 of 101 columns (q's block of qkv, say) of 1009 rows */
        const int rows = 1009, cols = 37;
        const size_t ldy = 101, ldx = 53;
        float *yy = host(rows * ldy * 4);
        memcpy(yy, x, rows * ldy * 4);
        float *dyy = dev(x, rows * ldy * 4), *dxx = dev(y, rows * ldx * 4);
        cpu->scale_add(yy + 7, ldy, 5.0f / 3.0f, y, ldx, rows, cols);
        gpu->scale_add(dyy + 7, ldy, 5.0f / 3.0f, dxx, ldx, rows, cols);
        check("scale_add (a block of columns)", dyy, yy, ZT_F32, rows * ldy, EXACT);
        free(yy);
        dev_free_all();
    }
    for (int round_acc = 0; round_acc < 2; round_acc++) { /* 1: acc's pending rounding done as it is read */
        float *acc = host(n * 4);
        memcpy(acc, x, n * 4);
        float *dacc = dev(x, n * 4), *dy = dev(y, n * 4);
        cpu->accumulate_bf16_rounded(acc, round_acc, y, n);
        gpu->accumulate_bf16_rounded(dacc, round_acc, dy, n);
        check(round_acc ? "accumulate_bf16_rounded, acc rounded as read" : "accumulate_bf16_rounded", dacc, acc,
              ZT_F32, n, EXACT);
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

/* ---- the tensor-core primitives (mma_sync.cuh, through mma_check.cu) ---------------------
 *
 * What the fast attention forward relies on, against plain loops over the PTX ISA's
 * layouts (g = lane >> 2, t = lane & 3): each lane's ldmatrix registers, the tiles
 * cp.async copied, the products with b from ldmatrix and ldmatrix.trans, the product
 * whose a operand is an accumulator packed to bf16x2, and the packing itself.  Under
 * tools/cuda_emu this holds the emulator's models to the layouts; on a GPU it shows that
 * the models are the hardware's.  Registers, copies and packing are exact; the products
 * within FP32_TOL (the tensor cores' order of the fp32 sum is unspecified). */

/* the two 16-bit values (lo, hi) of a 32-bit register */
static uint32_t mma_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* lanes and tiles whose ldmatrix register differs from the layout's: tile m covers rows
 * r0.. and columns c0.. of the 16 x 16 tile s (row-major); a lane holds row g, columns
 * 2t, 2t + 1 of it, or with trans rows 2t, 2t + 1 of column g */
static int mma_ld_faults(const uint32_t (*got)[4], const uint16_t *s, int n_major, int trans)
{
    int bad = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int m = 0; m < 4; m++) {
            const int g = lane >> 2, t = lane & 3;
            const int r0 = n_major ? (m >> 1) * 8 : (m & 1) * 8, c0 = n_major ? (m & 1) * 8 : (m >> 1) * 8;
            const uint32_t want = trans ? mma_pair(s[(r0 + 2 * t) * 16 + c0 + g], s[(r0 + 2 * t + 1) * 16 + c0 + g])
                                        : mma_pair(s[(r0 + g) * 16 + c0 + 2 * t], s[(r0 + g) * 16 + c0 + 2 * t + 1]);
            bad += got[lane][m] != want;
        }
    return bad;
}

/* c + x y (16 x 16, fp32), x and y bf16 bits read as x[r 16 + k] and y[k ys + n yn] */
static void mma_ref(float *d, const float *c, const uint16_t *x, const uint16_t *y, int ys, int yn)
{
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c ? c[r * 16 + n] : 0.0f;
            for (int k = 0; k < 16; k++) s = fmaf(zt_bf16_to_f32(x[r * 16 + k]), zt_bf16_to_f32(y[k * ys + n * yn]), s);
            d[r * 16 + n] = s;
        }
}

static void check_mma(void)
{
    zt_cu_mma_in in;
    zt_cu_mma_out out;
    float *r = randn(3 * 256 + 256 + 64, 1.0f);
    for (int i = 0; i < 256; i++)
        in.a[i] = zt_f32_to_bf16(r[i]), in.bt[i] = zt_f32_to_bf16(r[256 + i]), in.v[i] = zt_f32_to_bf16(r[512 + i]);
    memcpy(in.c, r + 768, sizeof in.c);
    memcpy(in.x, r + 1024, sizeof in.x);
    /* ties the packing must break to even: 1 + 2^-8 (down to 1), 1 + 3 2^-8 (up), negative */
    in.x[0] = 1.0f + 0x1p-8f, in.x[1] = 1.0f + 0x3p-8f, in.x[2] = -(1.0f + 0x1p-8f), in.x[3] = -(1.0f + 0x3p-8f);
    free(r);
    zt_cu_mma_in *din = dev(&in, sizeof in);
    zt_cu_mma_out *dout = dev(NULL, sizeof out);
    poison(dout, sizeof out);
    zt_cu_mma_check(dout, din);
    down(&out, dout, sizeof out);
    dev_free_all();

    report("mma: ldmatrix x4 registers, lane by lane (a)", mma_ld_faults(out.ld_a, in.a, 0, 0), EXACT, NULL);
    report("mma: ldmatrix x4 registers, lane by lane (b^T rows)", mma_ld_faults(out.ld_bt, in.bt, 1, 0), EXACT, NULL);
    report("mma: ldmatrix x4 trans registers, lane by lane (v)", mma_ld_faults(out.ld_v, in.v, 0, 1), EXACT, NULL);
    const int copied = !memcmp(out.tiles[0], in.a, 512) && !memcmp(out.tiles[1], in.bt, 512) &&
                       !memcmp(out.tiles[2], in.v, 512);
    report("mma: cp.async 16-byte copies in two groups", copied ? 0.0 : 1.0, EXACT, NULL);
    float want[256];
    mma_ref(want, in.c, in.a, in.bt, 1, 16);
    report("mma: m16n8k16 c + a b, b by ldmatrix from b^T", rel_err(out.d_bt, want, ZT_F32, 256), FP32_TOL, NULL);
    mma_ref(want, in.c, in.a, in.v, 16, 1);
    report("mma: m16n8k16 c + a v, b by ldmatrix.trans", rel_err(out.d_v, want, ZT_F32, 256), FP32_TOL, NULL);
    uint16_t p[256]; /* the device's own accumulators, rounded: only the reuse is checked */
    for (int i = 0; i < 256; i++) p[i] = zt_f32_to_bf16(out.d_bt[i]);
    mma_ref(want, NULL, p, in.v, 16, 1);
    report("mma: accumulators packed as the next a operand (P V)", rel_err(out.e, want, ZT_F32, 256), FP32_TOL, NULL);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        bad += out.packed[l] != mma_pair(zt_f32_to_bf16(in.x[2 * l]), zt_f32_to_bf16(in.x[2 * l + 1]));
    report("mma: fp32x2 to bf16x2, nearest even", bad, EXACT, NULL);
}

/* ---- --bench: the fast kernels' time against the exact ones, at the 1B model's shapes ----
 *
 * Not a check (nothing passes or fails): each kernel runs once to warm up, then `reps`
 * times between two waits for the device, and the median per call is printed with the
 * rate it implies, so that one GPU run says what the fast mode buys kernel by kernel.
 * Host clock around a synchronised region: launch costs are included. */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* kinds of work a bench runs, so that one timing loop serves every kernel */
typedef struct bench_args {
    int kind; /* 0 attention forward, 1 attention backward, 2 rmsnorm fwd+bwd, 3 swiglu fwd+bwd, 4 lm-head xent */
    int fast;
    int cudnn; /* attention: the pair timed is the own kernels ("own") and cuDNN's (fast_cudnn.cu, "cudnn") */
    float *a, *b, *c, *d, *e, *f;
    uint16_t *q16, *o16, *g16; /* attention: bf16 qkv, out and dqkv, as the model's step holds them */
    float *cos_t, *sin_t;      /* attention: the RoPE tables the model's step passes */
    void *scratch;
    int B, T, nh, nkv, hd, N, C, F, V;
    const int *targets;
    double *loss;
} bench_args;

static void bench_once(const bench_args *x)
{
    zt_err err = {0};
    switch (x->kind) {
    case 0: /* the _act16 entries the model's fast step calls: bf16 qkv, RoPE applied as q and k are staged */
        if (x->cudnn) {
            (x->fast ? zt_cu_cudnn_attention_forward_act16 : zt_cu_fast_attention_forward_act16)(
                x->o16, x->c, x->q16, x->cos_t, x->sin_t, x->scratch, x->B, x->T, x->nh, x->nkv, x->hd, 0);
            break;
        }
        (x->fast ? zt_cu_fast_attention_forward_act16 : gpu->attention_forward_act16)(
            x->o16, x->c, x->q16, x->cos_t, x->sin_t, x->scratch, x->B, x->T, x->nh, x->nkv, x->hd, 0);
        break;
    case 1: /* bf16 dqkv only, as the model asks without a qkv bias */
        if (x->cudnn) { /* out16 and lse from the same kernels' forward (bench_cudnn runs it first) */
            (x->fast ? zt_cu_cudnn_attention_backward_act16 : zt_cu_fast_attention_backward_act16)(
                NULL, x->g16, x->e, x->q16, x->o16, x->c, x->cos_t, x->sin_t, x->scratch, x->B, x->T, x->nh, x->nkv,
                x->hd, 0);
            break;
        }
        (x->fast ? zt_cu_fast_attention_backward_act16 : gpu->attention_backward_act16)(
            NULL, x->g16, x->e, x->q16, x->o16, x->c, x->cos_t, x->sin_t, x->scratch, x->B, x->T, x->nh, x->nkv, x->hd,
            0);
        break;
    case 2:
        (x->fast ? zt_cu_fast_rmsnorm_forward : gpu->rmsnorm_forward)(x->b, ZT_BF16, x->c, x->a, x->f, x->N, x->C, 1e-5f);
        (x->fast ? zt_cu_fast_rmsnorm_backward : gpu->rmsnorm_backward)(x->d, NULL, 1.0f, x->e, 1.0f, x->a, x->a, x->f,
                                                                       x->c, x->N, x->C);
        break;
    case 3:
        (x->fast ? zt_cu_fast_swiglu_forward : gpu->swiglu_forward)(x->b, ZT_BF16, x->a, x->N, x->F);
        (x->fast ? zt_cu_fast_swiglu_backward : gpu->swiglu_backward)(x->d, ZT_BF16, x->c, x->a, x->N, x->F);
        break;
    case 4:
        if (x->fast) {
            zt_llama_config shape = {0};
            shape.vocab_size = x->V;
            const int rows = zt_model_xent_chunk_rows(&shape, x->N); /* the model's chunk */
            if (zt_cu_fast_lmhead_xent(x->loss, x->d, x->e, 1.0f, x->a, ZT_BF16, x->f, ZT_BF16, x->targets,
                                       x->N, x->C, x->V, 1.0f / x->N, NULL, ZT_BF16, rows, &err))
                die("bench: fused cross-entropy", &err);
        } else {
            if (gpu->matmul(x->b, x->a, ZT_BF16, x->f, ZT_BF16, x->N, x->V, x->C, 0, 1, 0.0f, ZT_BF16, &err))
                die("bench: logits", &err);
            gpu->xent(x->b, (uint16_t *)x->c, x->b, x->targets, x->N, x->V, 1.0f / x->N);
            if (gpu->matmul(x->d, x->c, ZT_BF16, x->f, ZT_BF16, x->N, x->C, x->V, 0, 0, 0.0f, ZT_BF16, &err) ||
                gpu->matmul(x->e, x->c, ZT_BF16, x->a, ZT_BF16, x->V, x->C, x->N, 1, 0, 1.0f, ZT_BF16, &err))
                die("bench: gradient products", &err);
        }
        break;
    }
}

/* median seconds per call; flops (or bytes, with unit "GB/s") give the rate */
static void bench_row(const char *name, bench_args *x, double work, const char *unit)
{
    enum { REPS = 7 };
    double t[2][REPS];
    for (int f = 0; f < 2; f++) {
        x->fast = f;
        bench_once(x);
        gpu->sync();
        for (int r = 0; r < REPS; r++) {
            const double t0 = now_s();
            bench_once(x);
            gpu->sync();
            t[f][r] = now_s() - t0;
        }
        qsort(t[f], REPS, sizeof t[f][0], cmp_double);
    }
    const double e = t[0][REPS / 2], f = t[1][REPS / 2];
    printf("bench %-46s %s %9.3f ms %8.1f %-7s %s %9.3f ms %8.1f %-7s x%.2f\n", name, x->cudnn ? "own" : "exact",
           e * 1e3, work / e * 1e-12, unit, x->cudnn ? "cudnn" : "fast", f * 1e3, work / f * 1e-12, unit, e / f);
    fflush(stdout);
}

/* The same two entries, the own kernels against cuDNN's (check.sh sets the cudnn times
 * beside SDPA's); where the shape does not take cuDNN, one line saying why. */
static void bench_cudnn(bench_args *x, double fl)
{
    char name[96], words[256];
    if (!zt_cu_cudnn_attention_used(x->B, x->T, x->nh, x->nkv, x->hd, 0)) {
        zt_cuda_attention_plan(x->B, x->T, x->nh, x->nkv, x->hd, 0, words, sizeof words);
        printf("bench cudnn attention (hd %d): not run: %s\n", x->hd, words);
        return;
    }
    x->cudnn = 1;
    x->kind = 0;
    snprintf(name, sizeof name, "cudnn attention_forward_act16 (hd %d, rope)", x->hd);
    bench_row(name, x, fl, "TFLOP/s");
    /* timing only: both backwards read cuDNN's out16 and stats, which mean what the own
     * kernels' lse means (each query's log-sum-exp), so neither's time depends on it */
    x->kind = 1;
    zt_cu_cudnn_attention_forward_act16(x->o16, x->c, x->q16, x->cos_t, x->sin_t, x->scratch, x->B, x->T, x->nh,
                                        x->nkv, x->hd, 0);
    snprintf(name, sizeof name, "cudnn attention_backward_act16 (hd %d, rope)", x->hd);
    bench_row(name, x, 2.5 * fl, "TFLOP/s");
    x->cudnn = 0;
}

/* shrink: 1 for the 1B model's shapes; S divides T, the hidden size, the FFN, the
 * vocabulary and the heads (down to 4 over 1; a quick run of the same code, e.g. under
 * tools/cuda_emu) */
static void run_bench(int shrink)
{
    /* tests/gpu/llama_1b: hidden 2048, 32 heads of 64 over 8 kv heads, FFN 8192, vocab 32000, T 2048 */
    const int B = 1, T = 2048 / shrink, nh = 32 / shrink > 4 ? 32 / shrink : 4, nkv = 8 / shrink > 1 ? 8 / shrink : 1,
              hd = 64, C = 2048 / shrink, F = 8192 / shrink, V = 32000 / shrink, N = B * T;
    bench_args x;
    memset(&x, 0, sizeof x);
    x.B = B, x.T = T, x.nh = nh, x.nkv = nkv, x.hd = hd, x.N = N, x.C = C, x.F = F, x.V = V;
    printf("bench: B=%d T=%d heads %d over %d hidden %d FFN %d vocab %d, median of 7 calls after one warm-up; rates "
           "in TFLOP/s (attention: causal FLOPs, the backward counted as 2.5 forwards) or TB/s\n", B, T, nh, nkv, C, F,
           V);
    for (int h = 0; h < 2; h++) { /* hd 64 (the 1B model) and hd 128 (half the heads) */
        x.hd = h ? 128 : 64, x.nh = h ? nh / 2 : nh;
        const size_t Wh = (size_t)(x.nh + 2 * nkv) * x.hd, nout = (size_t)N * x.nh * x.hd;
        float *qkv = randn((size_t)N * Wh, 1.0f), *dout = randn(nout, 1.0f);
        uint16_t *qkv16 = as_dtype(qkv, ZT_BF16, (size_t)N * Wh);
        const zt_rope_freqs rf = {10000.0f, 0, 0, 0, 0, 0};
        x.cos_t = dev(NULL, (size_t)T * (x.hd / 2) * 4), x.sin_t = dev(NULL, (size_t)T * (x.hd / 2) * 4);
        gpu->rope_tables(x.cos_t, x.sin_t, T, x.hd, &rf);
        x.q16 = dev(qkv16, (size_t)N * Wh * 2), x.e = dev(dout, nout * 4);
        x.o16 = dev(NULL, nout * 2), x.c = dev(NULL, (size_t)B * x.nh * T * 4), x.g16 = dev(NULL, (size_t)N * Wh * 2);
        /* the fast table's size, which the exact entries' fallback also fits */
        x.scratch = dev(NULL, zt_cu_fast_attention_scratch_bytes(B, T, x.nh, nkv, x.hd, ZT_BF16));
        const double fl = 2.0 * B * x.nh * (double)T * T * x.hd; /* two products over the causal half */
        char name[96];
        x.kind = 0; /* tests/gpu/check.sh reads these two rows' `fast` times beside tests/gpu/sdpa_bench.py's */
        snprintf(name, sizeof name, "attention_forward_act16 (hd %d, rope)", x.hd);
        bench_row(name, &x, fl, "TFLOP/s");
        x.kind = 1;
        snprintf(name, sizeof name, "attention_backward_act16 (hd %d, rope)", x.hd);
        bench_row(name, &x, 2.5 * fl, "TFLOP/s");
        bench_cudnn(&x, fl);
        free(qkv), free(dout), free(qkv16);
        dev_free_all();
    }
    {
        float *xx = randn((size_t)N * C, 1.0f), *w = randn((size_t)C, 1.0f);
        x.a = dev(xx, (size_t)N * C * 4), x.f = dev(w, (size_t)C * 4), x.b = dev(NULL, (size_t)N * C * 2),
        x.c = dev(NULL, (size_t)N * 4), x.d = dev(NULL, (size_t)N * C * 4), x.e = dev(NULL, (size_t)C * 4);
        x.kind = 2; /* bytes: x read 3 times, y (bf16) written, dy read, dx read and written */
        bench_row("rmsnorm forward + backward", &x, (double)N * C * (3 * 4 + 2 + 4 + 8), "TB/s");
        free(xx), free(w);
        dev_free_all();
    }
    {
        float *gu = randn((size_t)N * 2 * F, 1.0f), *dh = randn((size_t)N * F, 1.0f);
        x.a = dev(gu, (size_t)N * 2 * F * 4), x.c = dev(dh, (size_t)N * F * 4), x.b = dev(NULL, (size_t)N * F * 2),
        x.d = dev(NULL, (size_t)N * 2 * F * 2);
        x.kind = 3; /* bytes: gu read twice, h written (bf16), dh read, dgu written (bf16) */
        bench_row("swiglu forward + backward", &x, (double)N * F * (16 + 2 + 4 + 4), "TB/s");
        free(gu), free(dh);
        dev_free_all();
    }
    {
        float *xx = randn((size_t)N * C, 1.0f), *w = randn((size_t)V * C, 0.02f);
        uint16_t *x16 = as_dtype(xx, ZT_BF16, (size_t)N * C), *w16 = as_dtype(w, ZT_BF16, (size_t)V * C);
        int *tg = host((size_t)N * sizeof(int));
        for (int i = 0; i < N; i++)
            tg[i] = (int)(zt_rand_uniform(&rng_state) * V) % V;
        const double zero = 0.0;
        x.a = dev(x16, (size_t)N * C * 2), x.f = dev(w16, (size_t)V * C * 2), x.b = dev(NULL, (size_t)N * V * 4),
        x.c = dev(NULL, (size_t)N * V * 2), x.d = dev(NULL, (size_t)N * C * 4), x.e = dev(NULL, (size_t)V * C * 4);
        x.loss = dev(&zero, sizeof zero);
        x.targets = tg;
        x.kind = 4; /* three products of 2 N V C */
        bench_row("lm-head + cross-entropy + its gradients", &x, 3 * 2.0 * N * (double)V * C, "TFLOP/s");
        free(xx), free(w), free(x16), free(w16), free(tg);
        dev_free_all();
    }
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
        } else if (!strcmp(argv[i], "--no-graphs")) {
            no_graphs = 1;
        } else if (!strcmp(argv[i], "--no-matmul")) {
            no_matmul = 1;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--bench") && i + 1 < argc) {
            char *end;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 64 || 2048 % v) {
                fprintf(stderr, "kernels_check: --bench: expected a divisor of 2048 from 1 to 64, got '%s'\n", argv[i]);
                return 2;
            }
            bench = (int)v;
        } else {
            fprintf(stderr,
                    "usage: kernels_check [--seed N] [--no-matmul] [--no-graphs] [--only GROUP] [--bench SHRINK]\n");
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
        {"fast-norm", check_fast_norm}, {"fast-xent", check_fast_xent}, {"fast-attention", check_fast_attention},
        {"fast-matmul", check_fast_matmul},     {"packed", check_packed},
        {"fast-step", check_fast_step},         {"fast-act16", check_fast_act16},
        {"graph", check_graph},             {"mma", check_mma},
        {"cudnn-attention", check_cudnn_attention},
    };
    if (bench) { /* timings only, no checks */
        run_bench(bench);
        zt_cuda_shutdown();
        return 0;
    }
    int ran = 0;
    const size_t only_len = only ? strlen(only) : 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) /* --only fast: every fast-* group */
        if (!only || !strcmp(only, groups[g].name) ||
            (!strncmp(only, groups[g].name, only_len) && groups[g].name[only_len] == '-')) {
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
