/* test_kernels.c — the fp32 Llama kernels against naive double-precision references.
 *
 * For each kernel:
 *  - forward: fp32 kernel vs a plain double reference written here, elementwise at
 *    FWD_TOL relative (with a floor for values near 0);
 *  - backward: fp32 analytic gradient vs central finite differences of the DOUBLE
 *    reference, L = sum(R o forward(x)) for a random projection R, so that fp32
 *    rounding noise cannot hide a wrong term; checked at GRAD_TOL relative;
 *  - the conventions of kernels.h: overwrite vs accumulate, in-place xent, v left
 *    alone by RoPE, T = 1 attention, GQA head mapping.
 * Sizes are deliberately not powers of two and the GQA groups are 3 and 2 wide; the
 * Llama head dimensions 64 and 128 run the kernels' register-tiled paths.  Also:
 * zt_expf's error against exp in double, and attention's bitwise reproducibility. */
#include "../src/kernels/amx.h"
#include "../src/kernels/backend.h"
#include "../src/kernels/kernels.h"
#include "../src/kernels/matmul.h"
#include "../src/kernels/vmath.h"
#include "test.h"

#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* fp32 kernels vs double reference: a few fp32 roundings on O(1) values. */
#define FWD_TOL 1e-5
#define FWD_FLOOR 1e-1
/* fp32 analytic gradient vs double finite differences (which are ~1e-9 exact). */
#define GRAD_TOL 1e-4
#define GRAD_FLOOR 1e-2
#define FD_EPS 1e-5

/* ---- helpers ---------------------------------------------------------------- */

static void check_bf16_of(const char *what, const uint16_t *got, const float *want, size_t n);

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

/* Uniform in [-1, 1), xorshift64*. */
static double rng_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) / (double)(1ull << 52) - 1.0;
}

static void fill(float *a, size_t n, double scale, double offset) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(offset + scale * rng_uniform());
}

static double *to_double(const float *a, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = a[i];
    return d;
}

/* Elementwise |got - want| <= tol * max(|want|, floor); prints the first few misses
 * and the worst one, then records one failed check. */
static void check_array(const char *what, const float *got, const double *want, size_t n,
                        double tol, double floor) {
    size_t nbad = 0, worst = 0;
    double worst_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double s = fabs(want[i]) > floor ? fabs(want[i]) : floor;
        double e = fabs((double)got[i] - want[i]) / s;
        if (!(e <= tol)) { /* also catches NaN */
            if (nbad < 3)
                fprintf(stderr, "  %s[%zu] = %.9g, expected %.9g (rel err %.3g)\n", what, i,
                        (double)got[i], want[i], e);
            nbad++;
        }
        if (!(e <= worst_err)) worst_err = e, worst = i;
    }
    ZT_CHECK_MSG(nbad == 0, "%s: %zu of %zu elements off (worst [%zu] rel err %.3g > %.3g)", what,
                 nbad, n, worst, worst_err, tol);
}

/* Central finite differences of a double loss over every element of in[0..n). */
typedef double (*loss_fn)(const double *in, void *ctx);

static double fd_grad_at(double *in, size_t i, loss_fn loss, void *ctx) {
    double x0 = in[i];
    in[i] = x0 + FD_EPS;
    double lp = loss(in, ctx);
    in[i] = x0 - FD_EPS;
    double lm = loss(in, ctx);
    in[i] = x0;
    return (lp - lm) / (2 * FD_EPS);
}

static void fd_grad(double *grad, double *in, size_t n, loss_fn loss, void *ctx) {
    for (size_t i = 0; i < n; i++) grad[i] = fd_grad_at(in, i, loss, ctx);
}

/* ---- exp (vmath.h) ------------------------------------------------------------- */

/* |y - e| in units of the last place of e's float binade (2^-149 for subnormals). */
static double ulp_error(float y, double e) {
    int ex;
    frexp(e, &ex); /* e = f * 2^ex, f in [0.5, 1) */
    double ulp = ldexp(1.0, ex - 24);
    if (ulp < 0x1p-149) ulp = 0x1p-149;
    return fabs((double)y - e) / ulp;
}

/* Max ulp error of zt_expf (fast = 0) or zt_expf_fast (fast = 1) against exp in double,
 * over float bit patterns stepped evenly through [-104, 0] and [0, 89]: every binade,
 * from subnormal results to the edge of overflow.  The evaluation is a simd loop, so in
 * an optimised build the vector code is what is measured.  Also counts the results
 * that are not the correctly rounded value. */
static double expf_sweep(int fast, long *count, long *not_rounded, double *worst_x) {
    enum { CHUNK = 4096, STRIDE = 1021 };
    static float xs[CHUNK], ys[CHUNK];
    double max_ulp = 0.0;
    *count = *not_rounded = 0;
    const float ends[2] = {-104.0f, 89.0f};
    for (int side = 0; side < 2; side++) {
        uint32_t bits = side == 0 ? 0x80000000u : 0u, end;
        memcpy(&end, &ends[side], sizeof end);
        while (bits <= end) {
            int n = 0;
            for (; n < CHUNK && bits <= end; n++, bits += STRIDE) memcpy(&xs[n], &bits, 4);
            if (fast) {
#pragma omp simd
                for (int i = 0; i < n; i++) ys[i] = zt_expf_fast(xs[i]);
            } else {
#pragma omp simd
                for (int i = 0; i < n; i++) ys[i] = zt_expf(xs[i]);
            }
            for (int i = 0; i < n; i++, (*count)++) {
                const double e = exp((double)xs[i]);
                *not_rounded += ys[i] != (float)e;
                if (e > FLT_MAX) { /* rounds to inf at the top of the range */
                    ZT_CHECK(isinf(ys[i]));
                    continue;
                }
                const double u = ulp_error(ys[i], e);
                if (u > max_ulp) max_ulp = u, *worst_x = xs[i];
            }
        }
    }
    return max_ulp;
}

static void test_expf_accuracy(void) {
    /* Exhaustive sweeps of all 2.2e9 floats in range gave 0.500003 ulp for zt_expf (36
     * results off the correctly rounded one) and 1.0103 ulp for zt_expf_fast. */
    for (int fast = 0; fast < 2; fast++) {
        long count, not_rounded;
        double worst_x = 0.0;
        const double max_ulp = expf_sweep(fast, &count, &not_rounded, &worst_x);
        const char *name = fast ? "zt_expf_fast" : "zt_expf";
        printf("info %s: %ld inputs in [-104, 89], max error %.4f ulp (x = %.9g), %.3g%% not "
               "correctly rounded\n",
               name, count, max_ulp, worst_x, 100.0 * not_rounded / count);
        if (fast) {
            ZT_CHECK_MSG(max_ulp <= 2.0, "%s error %.3f ulp at x = %.9g", name, max_ulp, worst_x);
        } else {
            ZT_CHECK_MSG(max_ulp <= 0.501 && not_rounded <= count / 100000,
                         "%s error %.4f ulp at x = %.9g, %ld results not correctly rounded", name,
                         max_ulp, worst_x, not_rounded);
        }
    }

    /* Ends of the range and special values, for both. */
    for (int fast = 0; fast < 2; fast++) {
        float (*e)(float) = fast ? zt_expf_fast : zt_expf;
        ZT_CHECK(e(0.0f) == 1.0f && e(-0.0f) == 1.0f);
        ZT_CHECK(e(-INFINITY) == 0.0f && e(-1000.0f) == 0.0f);
        ZT_CHECK(e(-103.5f) == 0x1p-149f); /* e^-103.5 = 0.8 * 2^-149, the smallest subnormal */
        ZT_CHECK(e(-104.0f) == 0.0f);      /* e^-104 < 2^-150 rounds to 0 */
        ZT_CHECK(isinf(e(INFINITY)) && isinf(e(89.0f)) && isinf(e(1e30f)));
        ZT_CHECK(e(88.72283f) < INFINITY);
        ZT_CHECK(isnan(e(NAN)) && isnan(e(-NAN)));
    }
}

/* ---- RMSNorm ------------------------------------------------------------------ */

static void rmsnorm_ref(double *y, double *rstd, const double *x, const double *w, int N, int C,
                        double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        if (rstd) rstd[n] = r;
        for (int c = 0; c < C; c++) y[n * C + c] = x[n * C + c] * r * w[c];
    }
}

typedef struct {
    int N, C;
    double eps;
    const double *R;
    double *x, *w, *y; /* the one being differentiated is the array fd_grad perturbs */
} rms_ctx;

static double rms_loss(const double *in, void *vctx) {
    (void)in; /* in aliases ctx->x or ctx->w */
    rms_ctx *c = vctx;
    rmsnorm_ref(c->y, NULL, c->x, c->w, c->N, c->C, c->eps);
    double L = 0;
    for (int i = 0; i < c->N * c->C; i++) L += c->R[i] * c->y[i];
    return L;
}

static void test_rmsnorm_forward(void) {
    rng_seed(1);
    /* C = 75 spans two 64-column dw strips; one row of large values checks scaling. */
    const int N = 2 * 9, C = 75;
    const float eps = 1e-5f;
    float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * C);
    float *y = malloc(sizeof(float) * N * C), rstd[18];
    fill(x, (size_t)N * C, 2.0, 0.1);
    for (int c = 0; c < C; c++) x[3 * C + c] *= 1000.0f;
    fill(w, C, 0.5, 1.0);
    zt_rmsnorm_forward(y, ZT_F32, rstd, x, w, N, C, eps);

    double *xd = to_double(x, (size_t)N * C), *wd = to_double(w, C);
    double *yd = malloc(sizeof(double) * N * C), rd[18];
    rmsnorm_ref(yd, rd, xd, wd, N, C, eps);
    check_array("rmsnorm y", y, yd, (size_t)N * C, FWD_TOL, FWD_FLOOR);
    check_array("rmsnorm rstd", rstd, rd, N, FWD_TOL, 0);
    free(x), free(w), free(y), free(xd), free(wd), free(yd);
}

static void test_rmsnorm_backward_accumulates(void) {
    rng_seed(2);
    const int N = 2 * 7, C = 75;
    const float eps = 1e-5f;
    const size_t NC = (size_t)N * C;
    float *x = malloc(sizeof(float) * NC), *w = malloc(sizeof(float) * C);
    float *y = malloc(sizeof(float) * NC), *dy = malloc(sizeof(float) * NC), rstd[14];
    float *dx = malloc(sizeof(float) * NC), *dw = malloc(sizeof(float) * C);
    fill(x, NC, 1.5, 0.2);
    fill(w, C, 0.5, 1.0);
    fill(dy, NC, 1.0, 0.0);
    zt_rmsnorm_forward(y, ZT_F32, rstd, x, w, N, C, eps);
    /* Pre-filled: the kernel must add to these, not overwrite them. */
    const float dx0 = 0.25f, dw0 = -0.5f;
    for (size_t i = 0; i < NC; i++) dx[i] = dx0;
    for (int c = 0; c < C; c++) dw[c] = dw0;
    zt_rmsnorm_backward(dx, NULL, 1.0f, dw, 1.0f, dy, x, w, rstd, N, C);

    double *R = to_double(dy, NC);
    rms_ctx ctx = {N, C, eps, R, to_double(x, NC), to_double(w, C), malloc(sizeof(double) * NC)};
    double *gx = malloc(sizeof(double) * NC), *gw = malloc(sizeof(double) * C);
    fd_grad(gx, ctx.x, NC, rms_loss, &ctx);
    fd_grad(gw, ctx.w, C, rms_loss, &ctx);
    for (size_t i = 0; i < NC; i++) gx[i] += dx0;
    for (int c = 0; c < C; c++) gw[c] += dw0;
    check_array("rmsnorm dx (accumulated)", dx, gx, NC, GRAD_TOL, GRAD_FLOOR);
    check_array("rmsnorm dw (accumulated)", dw, gw, C, GRAD_TOL, GRAD_FLOOR);

    /* A second call adds the same gradient again. */
    float *dx2 = malloc(sizeof(float) * NC);
    memcpy(dx2, dx, sizeof(float) * NC);
    zt_rmsnorm_backward(dx2, NULL, 1.0f, dw, 1.0f, dy, x, w, rstd, N, C);
    for (size_t i = 0; i < NC; i++) gx[i] = 2 * (gx[i] - dx0) + dx0;
    for (int c = 0; c < C; c++) gw[c] = 2 * (gw[c] - dw0) + dw0;
    check_array("rmsnorm dx (twice)", dx2, gx, NC, GRAD_TOL, GRAD_FLOOR);
    check_array("rmsnorm dw (twice)", dw, gw, C, GRAD_TOL, GRAD_FLOOR);

    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(dx2), free(R);
    free(ctx.x), free(ctx.w), free(ctx.y), free(gx), free(gw);
}

/* ---- RoPE ----------------------------------------------------------------------- */

/* Double rotation with the kernel's own fp32 tables, over all rows of qkv. */
static void rope_ref(double *y, const double *x, const float *cs, const float *sn, int B, int T,
                     int nh, int nkv, int hd) {
    const int W = (nh + 2 * nkv) * hd, half = hd / 2;
    memcpy(y, x, sizeof(double) * B * T * W);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh + nkv; h++) {
                const double *xr = x + (size_t)(b * T + t) * W + h * hd;
                double *yr = y + (size_t)(b * T + t) * W + h * hd;
                for (int i = 0; i < half; i++) {
                    double c = cs[t * half + i], s = sn[t * half + i];
                    yr[i] = xr[i] * c - xr[i + half] * s;
                    yr[i + half] = xr[i + half] * c + xr[i] * s;
                }
            }
}

typedef struct {
    int B, T, nh, nkv, hd;
    const float *cs, *sn;
    const double *R;
    double *y;
} rope_ctx;

static double rope_loss(const double *in, void *vctx) {
    rope_ctx *c = vctx;
    rope_ref(c->y, in, c->cs, c->sn, c->B, c->T, c->nh, c->nkv, c->hd);
    double L = 0;
    for (int i = 0; i < c->B * c->T * (c->nh + 2 * c->nkv) * c->hd; i++) L += c->R[i] * c->y[i];
    return L;
}

static void test_rope_tables(void) {
    /* Against the exact angle t * theta^(-2i/hd): fp32 tables differ by a few ulp of
     * the angle at these small positions. */
    const float thetas[2] = {10000.0f, 500000.0f};
    for (int k = 0; k < 2; k++) {
        const int T = 13, hd = 12, half = hd / 2;
        float cs[13 * 6], sn[13 * 6];
        zt_rope_tables(cs, sn, T, hd, &(zt_rope_freqs){.theta = thetas[k]});
        double cd[13 * 6], sd[13 * 6];
        for (int t = 0; t < T; t++)
            for (int i = 0; i < half; i++) {
                double a = t * pow(thetas[k], -2.0 * i / hd);
                cd[t * half + i] = cos(a);
                sd[t * half + i] = sin(a);
            }
        check_array("rope cos", cs, cd, (size_t)T * half, 1e-6, 1.0);
        check_array("rope sin", sn, sd, (size_t)T * half, 1e-6, 1.0);
        /* Position 0 is the identity; frequency 0 never rotates. */
        ZT_CHECK(cs[0] == 1.0f && sn[0] == 0.0f);
        for (int t = 0; t < T; t++) ZT_CHECK_CLOSE(cs[t * half], cos((double)t), 1e-7, 1.0);
    }
    /* HF's fp32 pipeline: the angle is (float)t * inv_freq with inv_freq rounded to
     * fp32, so at large positions the table follows that fp32 angle, not the exact
     * one.  cos of the fp32 angle, correctly rounded, is what we expect. */
    {
        const int T = 4000, hd = 8, half = 4;
        float *cs = malloc(sizeof(float) * T * half), *sn = malloc(sizeof(float) * T * half);
        zt_rope_tables(cs, sn, T, hd, &(zt_rope_freqs){.theta = 10000.0f});
        const int t = 3999, i = 1;
        float inv = 1.0f / (float)pow(10000.0, (double)(2.0f / 8.0f));
        float a = (float)t * inv;
        ZT_CHECK_CLOSE(cs[t * half + i], cos((double)a), 1e-7, 1.0);
        ZT_CHECK_CLOSE(sn[t * half + i], sin((double)a), 1e-7, 1.0);
        free(cs), free(sn);
    }
}

static void test_rope_forward_backward(void) {
    rng_seed(3);
    const int B = 2, T = 9, nh = 6, nkv = 2, hd = 12;
    const int W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W;
    float cs[9 * 6], sn[9 * 6];
    zt_rope_tables(cs, sn, T, hd, &(zt_rope_freqs){.theta = 10000.0f});

    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    fill(x, n, 1.0, 0.0);
    memcpy(y, x, sizeof(float) * n);
    zt_rope_forward(y, cs, sn, B, T, nh, nkv, hd);
    double *xd = to_double(x, n), *yd = malloc(sizeof(double) * n);
    rope_ref(yd, xd, cs, sn, B, T, nh, nkv, hd);
    check_array("rope y", y, yd, n, FWD_TOL, FWD_FLOOR);
    int v_same = 1;
    for (int r = 0; r < B * T; r++)
        for (int c = (nh + nkv) * hd; c < W; c++) v_same &= y[r * W + c] == x[r * W + c];
    ZT_CHECK_MSG(v_same, "rope forward changed the v heads");

    /* Backward of L = sum R o rope(x) is rope_backward(R). */
    float *g = malloc(sizeof(float) * n);
    fill(g, n, 1.0, 0.0);
    double *R = to_double(g, n);
    zt_rope_backward(g, cs, sn, B, T, nh, nkv, hd);
    double *gd = malloc(sizeof(double) * n);
    rope_ctx ctx = {B, T, nh, nkv, hd, cs, sn, R, yd};
    fd_grad(gd, xd, n, rope_loss, &ctx);
    check_array("rope dx", g, gd, n, GRAD_TOL, GRAD_FLOOR);
    v_same = 1;
    for (int r = 0; r < B * T; r++)
        for (int c = (nh + nkv) * hd; c < W; c++) v_same &= g[r * W + c] == (float)R[r * W + c];
    ZT_CHECK_MSG(v_same, "rope backward changed the dv heads");
    free(x), free(y), free(xd), free(yd), free(g), free(R), free(gd);
}

static void test_rope_roundtrip_is_identity(void) {
    rng_seed(4);
    const int B = 2, T = 13, nh = 6, nkv = 3, hd = 8;
    const size_t n = (size_t)B * T * (nh + 2 * nkv) * hd;
    float cs[13 * 4], sn[13 * 4];
    zt_rope_tables(cs, sn, T, hd, &(zt_rope_freqs){.theta = 10000.0f});
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    fill(x, n, 3.0, 0.0);
    memcpy(y, x, sizeof(float) * n);
    zt_rope_forward(y, cs, sn, B, T, nh, nkv, hd);
    zt_rope_backward(y, cs, sn, B, T, nh, nkv, hd);
    double *xd = to_double(x, n);
    /* cos^2 + sin^2 = 1 up to fp32 rounding of the tables and products. */
    check_array("rope back(fwd(x))", y, xd, n, 1e-6, 1.0);
    free(x), free(y), free(xd);
}

/* ---- attention ------------------------------------------------------------------ */

/* Naive causal GQA attention in double: full score rows, explicit softmax.  With window > 0
 * query i sees keys j in (i - window, i], transformers' sliding-window mask written out. */
static void attn_ref(double *out, double *lse, const double *qkv, int B, int T, int nh, int nkv,
                     int hd, int window) {
    const int W = (nh + 2 * nkv) * hd, group = nh / nkv;
    const double scale = 1.0 / sqrt(hd);
    double *s = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < T; i++) {
                const int kh = h / group;
                const double *q = qkv + (size_t)(b * T + i) * W + h * hd;
                double m = -INFINITY;
                const int j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
                for (int j = j0; j <= i; j++) {
                    const double *k = qkv + (size_t)(b * T + j) * W + (nh + kh) * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[e] * k[e];
                    s[j] = d * scale;
                    if (s[j] > m) m = s[j];
                }
                double sum = 0;
                for (int j = j0; j <= i; j++) sum += exp(s[j] - m);
                double *o = out + (size_t)(b * T + i) * nh * hd + h * hd;
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int j = j0; j <= i; j++) {
                    const double p = exp(s[j] - m) / sum;
                    const double *v = qkv + (size_t)(b * T + j) * W + (nh + nkv + kh) * hd;
                    for (int e = 0; e < hd; e++) o[e] += p * v[e];
                }
                if (lse) lse[(size_t)(b * nh + h) * T + i] = m + log(sum);
            }
    free(s);
}

typedef struct {
    int B, T, nh, nkv, hd, window;
    const double *R;
    double *out;
} attn_ctx;

static double attn_loss(const double *in, void *vctx) {
    attn_ctx *c = vctx;
    attn_ref(c->out, NULL, in, c->B, c->T, c->nh, c->nkv, c->hd, c->window);
    double L = 0;
    for (int i = 0; i < c->B * c->T * c->nh * c->hd; i++) L += c->R[i] * c->out[i];
    return L;
}

/* Forward against the reference, and, when grad_stride > 0, backward against finite
 * differences at every grad_stride-th element of qkv (1: all of them; large head
 * dimensions make the double reference too slow to difference everything).
 * key_growth > 0 makes later keys larger so the running max of the online softmax
 * increases from block to block. */
static void attn_case_w(int B, int T, int nh, int nkv, int hd, int window, double key_growth,
                        int grad_stride, uint64_t seed) {
    rng_seed(seed);
    const int W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * no);
    float *lse = malloc(sizeof(float) * nl);
    fill(qkv, n, 1.0, 0.0);
    for (int r = 0; r < B * T; r++)
        for (int c = nh * hd; c < (nh + nkv) * hd; c++)
            qkv[(size_t)r * W + c] *= (float)(1.0 + key_growth * (r % T));
    zt_attention_forward(out, lse, qkv, B, T, nh, nkv, hd, window);

    double *qd = to_double(qkv, n), *od = malloc(sizeof(double) * no);
    double *ld = malloc(sizeof(double) * nl);
    attn_ref(od, ld, qd, B, T, nh, nkv, hd, window);
    char what[112];
    snprintf(what, sizeof what, "attention out (T=%d nh=%d nkv=%d hd=%d window=%d)", T, nh, nkv, hd,
             window);
    check_array(what, out, od, no, FWD_TOL, FWD_FLOOR);
    snprintf(what, sizeof what, "attention lse (T=%d nh=%d nkv=%d hd=%d window=%d)", T, nh, nkv, hd,
             window);
    check_array(what, lse, ld, nl, FWD_TOL, FWD_FLOOR);

    if (grad_stride > 0) {
        float *dout = malloc(sizeof(float) * no), *dqkv = malloc(sizeof(float) * n);
        fill(dout, no, 1.0, 0.0);
        /* dqkv is overwritten: garbage (NaN) left in it must not leak through. */
        for (size_t i = 0; i < n; i++) dqkv[i] = NAN;
        zt_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window);
        const size_t nsel = (n + grad_stride - 1) / grad_stride;
        double *R = to_double(dout, no), *gd = malloc(sizeof(double) * nsel);
        float *got = malloc(sizeof(float) * nsel);
        attn_ctx ctx = {B, T, nh, nkv, hd, window, R, od};
        for (size_t k = 0; k < nsel; k++) {
            got[k] = dqkv[k * grad_stride];
            gd[k] = fd_grad_at(qd, k * grad_stride, attn_loss, &ctx);
        }
        snprintf(what, sizeof what, "attention dqkv (T=%d nh=%d nkv=%d hd=%d window=%d)", T, nh, nkv,
                 hd, window);
        check_array(what, got, gd, nsel, GRAD_TOL, GRAD_FLOOR);
        free(dout), free(dqkv), free(R), free(gd), free(got);
    }
    free(qkv), free(out), free(lse), free(qd), free(od), free(ld);
}

static void attn_case(int B, int T, int nh, int nkv, int hd, double key_growth, int grad_stride,
                      uint64_t seed) {
    attn_case_w(B, T, nh, nkv, hd, 0, key_growth, grad_stride, seed);
}

static void test_attention_gqa(void) {
    attn_case(2, 11, 6, 2, 12, 0.0, 1, 5); /* groups of 3 */
    attn_case(2, 7, 6, 3, 8, 0.0, 1, 6);   /* groups of 2 */
    attn_case(1, 9, 4, 4, 10, 0.0, 1, 7);  /* plain multi-head */
    attn_case(2, 13, 3, 1, 6, 0.3, 1, 8);  /* multi-query, sharper softmax */
}

static void test_attention_long_rows(void) {
    /* T > 64 crosses key blocks of the online softmax; growing keys force rescaling. */
    attn_case(1, 150, 6, 2, 8, 0.02, 0, 9);
    attn_case(1, 70, 2, 1, 4, 0.0, 1, 10);
}

static void test_attention_llama_head_dims(void) {
    /* Head dimensions of real models, where the kernel's register tiles (8 rows x 32 or
     * 16 lanes) carry the products; T = 150 leaves a ragged last block of 22 rows. */
    attn_case(2, 150, 4, 2, 64, 0.01, 0, 14);
    attn_case(1, 130, 2, 1, 128, 0.0, 0, 15);
    attn_case(1, 100, 2, 1, 64, 0.01, 97, 16);
    attn_case(1, 40, 3, 1, 48, 0.0, 13, 17);
}

/* The same input gives bit-identical outputs and gradients on every run and for any
 * thread count: every sum in the kernels has a fixed order (no atomics, no
 * thread-dependent split). */
static void test_attention_deterministic(void) {
    rng_seed(18);
    const int B = 2, T = 200, nh = 4, nkv = 2, hd = 64, W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(sizeof(float) * n), *dout = malloc(sizeof(float) * no);
    fill(qkv, n, 1.0, 0.0);
    fill(dout, no, 1.0, 0.0);
    float *out[3], *lse[3], *dqkv[3];
    const int threads[3] = {omp_get_max_threads(), omp_get_max_threads(), 1};
    for (int r = 0; r < 3; r++) {
        out[r] = malloc(sizeof(float) * no), lse[r] = malloc(sizeof(float) * nl);
        dqkv[r] = malloc(sizeof(float) * n);
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads[r]);
        zt_attention_forward(out[r], lse[r], qkv, B, T, nh, nkv, hd, 0);
        zt_attention_backward(dqkv[r], dout, qkv, out[r], lse[r], B, T, nh, nkv, hd, 0);
        omp_set_num_threads(saved);
    }
    for (int r = 1; r < 3; r++) {
        ZT_CHECK_MSG(memcmp(out[0], out[r], sizeof(float) * no) == 0,
                     "attention out differs between runs (%d vs %d threads)", threads[0],
                     threads[r]);
        ZT_CHECK_MSG(memcmp(lse[0], lse[r], sizeof(float) * nl) == 0,
                     "attention lse differs between runs (%d vs %d threads)", threads[0],
                     threads[r]);
        ZT_CHECK_MSG(memcmp(dqkv[0], dqkv[r], sizeof(float) * n) == 0,
                     "attention dqkv differs between runs (%d vs %d threads)", threads[0],
                     threads[r]);
    }
    for (int r = 0; r < 3; r++) free(out[r]), free(lse[r]), free(dqkv[r]);
    free(qkv), free(dout);
}

static void test_attention_t1(void) {
    /* One token: attention returns its own v; lse is its own score; dq = dk = 0 and
     * dv sums dout over the query heads of the group. */
    rng_seed(11);
    const int B = 2, T = 1, nh = 6, nkv = 2, hd = 12, W = (nh + 2 * nkv) * hd, group = 3;
    float qkv[2 * 120], out[2 * 72], lse[2 * 6], dout[2 * 72], dqkv[2 * 120];
    fill(qkv, (size_t)B * W, 1.0, 0.0);
    fill(dout, (size_t)B * nh * hd, 1.0, 0.0);
    zt_attention_forward(out, lse, qkv, B, T, nh, nkv, hd, 0);
    for (int i = 0; i < B * W; i++) dqkv[i] = NAN;
    zt_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, 0);
    int v_ok = 1, zero_ok = 1, dv_ok = 1;
    for (int b = 0; b < B; b++) {
        const float *row = qkv + b * W;
        for (int h = 0; h < nh; h++) {
            const int kh = h / group;
            double s = 0;
            for (int e = 0; e < hd; e++) {
                v_ok &= out[b * nh * hd + h * hd + e] == row[(nh + nkv + kh) * hd + e];
                s += (double)row[h * hd + e] * row[(nh + kh) * hd + e];
            }
            ZT_CHECK_CLOSE(lse[b * nh + h], s / sqrt(hd), FWD_TOL, FWD_FLOOR);
        }
        for (int c = 0; c < (nh + nkv) * hd; c++) zero_ok &= dqkv[b * W + c] == 0.0f;
        for (int kh = 0; kh < nkv; kh++)
            for (int e = 0; e < hd; e++) {
                double want = 0;
                for (int h = kh * group; h < (kh + 1) * group; h++)
                    want += dout[b * nh * hd + h * hd + e];
                dv_ok &= fabs(dqkv[b * W + (nh + nkv + kh) * hd + e] - want) <= 1e-6;
            }
    }
    ZT_CHECK_MSG(v_ok, "T=1 attention output is not the token's own v");
    ZT_CHECK_MSG(zero_ok, "T=1 attention dq or dk is not zero");
    ZT_CHECK_MSG(dv_ok, "T=1 attention dv is not the group's summed dout");
}

/* Mistral's sliding window (kernels.h): query i sees keys (i - window, i].  Windows around
 * the 64-wide tiles: 1 (each query sees only itself), shorter than a tile, one past a tile
 * boundary (whole key blocks skipped, tiles masked on both sides of the band, queries of a
 * block that see no key of its first block), and as long as T (nothing masked). */
static void test_attention_sliding_window(void) {
    attn_case_w(2, 11, 6, 2, 12, 4, 0.0, 1, 40);     /* small, every gradient differenced */
    attn_case_w(1, 9, 4, 4, 10, 1, 0.0, 1, 41);      /* window 1: out = own v, dq = dk = 0 */
    attn_case_w(1, 150, 4, 2, 16, 50, 0.02, 7, 42);  /* band across tiles, growing keys */
    attn_case_w(1, 200, 2, 1, 8, 65, 0.0, 11, 43);   /* one past a tile: blocks skipped */
    attn_case_w(2, 130, 2, 1, 64, 64, 0.01, 97, 44); /* exactly a tile, Llama head size */
    attn_case_w(1, 70, 2, 1, 4, 70, 0.0, 1, 45);     /* window = T: the causal result */
}

/* A window at least as long as the sequence masks nothing: the results are the plain
 * causal kernel's bit for bit (the window-0 path is the pre-window code, whose sums the
 * window only shortens), and a window shorter than T does change them. */
static void test_attention_window_wider_than_t_is_causal(void) {
    rng_seed(46);
    const int B = 2, T = 140, nh = 4, nkv = 2, hd = 32, W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(sizeof(float) * n), *dout = malloc(sizeof(float) * no);
    void *pack = malloc(zt_attention16_pack_bytes(B, T, nkv, hd));
    fill(qkv, n, 1.0, 0.0);
    fill(dout, no, 1.0, 0.0);
    const int windows[3] = {0, T, 100000};
    float *out[3], *lse[3], *dqkv[3], *out16[3], *dqkv16[3];
    for (int r = 0; r < 3; r++) {
        out[r] = malloc(sizeof(float) * no), lse[r] = malloc(sizeof(float) * nl);
        dqkv[r] = malloc(sizeof(float) * n);
        out16[r] = malloc(sizeof(float) * no), dqkv16[r] = malloc(sizeof(float) * n);
        zt_attention_forward(out[r], lse[r], qkv, B, T, nh, nkv, hd, windows[r]);
        zt_attention_backward(dqkv[r], dout, qkv, out[r], lse[r], B, T, nh, nkv, hd, windows[r]);
        zt_attention16_forward(out16[r], NULL, lse[r], qkv, pack, B, T, nh, nkv, hd, windows[r]);
        zt_attention16_backward(dqkv16[r], dout, qkv, out16[r], lse[r], pack, B, T, nh, nkv, hd,
                                windows[r]);
    }
    for (int r = 1; r < 3; r++) {
        ZT_CHECK_MSG(memcmp(out[0], out[r], sizeof(float) * no) == 0 &&
                         memcmp(dqkv[0], dqkv[r], sizeof(float) * n) == 0,
                     "fp32 attention with window %d differs from no window", windows[r]);
        ZT_CHECK_MSG(memcmp(out16[0], out16[r], sizeof(float) * no) == 0 &&
                         memcmp(dqkv16[0], dqkv16[r], sizeof(float) * n) == 0,
                     "bf16 attention with window %d differs from no window", windows[r]);
    }
    zt_attention_forward(out[1], lse[1], qkv, B, T, nh, nkv, hd, T - 1);
    ZT_CHECK_MSG(memcmp(out[0], out[1], sizeof(float) * no) != 0,
                 "window T - 1 left every output unchanged");
    for (int r = 0; r < 3; r++) free(out[r]), free(lse[r]), free(dqkv[r]), free(out16[r]), free(dqkv16[r]);
    free(qkv), free(dout), free(pack);
}

/* The KV-cache kernel with a window, against the double reference: a sequence run as a
 * prefill of 37 rows then one row at a time, each row reading max(0, p - window + 1)..p of
 * the cache (which keeps every position). */
static void test_attention_cache_window(void) {
    rng_seed(47);
    const int T = 90, nh = 4, nkv = 2, hd = 16, W = (nh + 2 * nkv) * hd, cap = 96;
    const int windows[3] = {0, 1, 30};
    const size_t n = (size_t)T * W, no = (size_t)T * nh * hd;
    float *qkv = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * no);
    float *kc = calloc((size_t)nkv * cap * hd, sizeof(float)), *vc = calloc((size_t)nkv * cap * hd, sizeof(float));
    const int threads = 2;
    float *scratch = malloc(sizeof(float) * zt_attention_cache_scratch_floats(cap, threads));
    fill(qkv, n, 1.0, 0.0);
    for (int t = 0; t < T; t++)
        for (int g = 0; g < nkv; g++)
            for (int d = 0; d < hd; d++) {
                kc[((size_t)g * cap + t) * hd + d] = qkv[(size_t)t * W + (nh + g) * hd + d];
                vc[((size_t)g * cap + t) * hd + d] = qkv[(size_t)t * W + (nh + nkv + g) * hd + d];
            }
    double *qd = to_double(qkv, n), *od = malloc(sizeof(double) * no);
    for (int k = 0; k < 3; k++) {
        for (int pos = 0; pos < T;) {
            const int rows = pos == 0 ? 37 : 1;
            zt_attention_cache_forward(out + (size_t)pos * nh * hd, qkv + (size_t)pos * W, (size_t)W, kc, vc,
                                       cap, pos, rows, nh, nkv, hd, windows[k], scratch, threads);
            pos += rows;
        }
        attn_ref(od, NULL, qd, 1, T, nh, nkv, hd, windows[k]);
        char what[64];
        snprintf(what, sizeof what, "cache attention (window=%d)", windows[k]);
        check_array(what, out, od, no, FWD_TOL, FWD_FLOOR);
    }
    free(qkv), free(out), free(kc), free(vc), free(scratch), free(qd), free(od);
}

/* ---- attention with bf16 operands ---------------------------------------------------- */

/* ||got - want|| / ||want|| over n values. */
static double rel_l2(const float *got, const float *want, size_t n) {
    double e = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        e += d * d, w += (double)want[i] * want[i];
    }
    return sqrt(e / (w > 0 ? w : 1));
}

/* The bf16-operand kernels against the fp32 ones (themselves checked against the double
 * reference above), on the same inputs: rounding q, k, v, p, dout and ds to bf16 moves
 * every result by a few parts in 2^8, so the relative L2 error must lie between 1e-5
 * (the operands really were rounded) and 8e-3 (nothing else changed: a wrong mask,
 * pair or index gives errors of order 1).  lse, whose scores are sums of hd bf16
 * products, is held to the same band. */
static void attn16_case_w(int B, int T, int nh, int nkv, int hd, int window, uint64_t seed) {
    rng_seed(seed);
    const int W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(sizeof(float) * n), *dout = malloc(sizeof(float) * no);
    float *out = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * nl);
    float *out16 = malloc(sizeof(float) * no), *lse16 = malloc(sizeof(float) * nl);
    float *dqkv = malloc(sizeof(float) * n), *dqkv16 = malloc(sizeof(float) * n);
    uint16_t *obf = malloc(2 * no);
    void *pack = malloc(zt_attention16_pack_bytes(B, T, nkv, hd));
    fill(qkv, n, 1.0, 0.0);
    fill(dout, no, 1.0, 0.0);
    zt_attention_forward(out, lse, qkv, B, T, nh, nkv, hd, window);
    zt_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window);
    zt_attention16_forward(out16, obf, lse16, qkv, pack, B, T, nh, nkv, hd, window);
    for (size_t i = 0; i < n; i++) dqkv16[i] = NAN; /* overwritten, not accumulated */
    zt_attention16_backward(dqkv16, dout, qkv, out16, lse16, pack, B, T, nh, nkv, hd, window);
    check_bf16_of("attention16 out copy", obf, out16, no);
    const struct { const char *what; const float *got, *want; size_t n; } r[] = {
        {"out", out16, out, no}, {"lse", lse16, lse, nl}, {"dqkv", dqkv16, dqkv, n}};
    for (int k = 0; k < 3; k++) {
        double e = rel_l2(r[k].got, r[k].want, r[k].n);
        ZT_CHECK_MSG(e > 1e-5 && e < 8e-3, "attention16 %s (B=%d T=%d nh=%d nkv=%d hd=%d window=%d): "
                     "relative L2 error %.3g outside [1e-5, 8e-3]", r[k].what, B, T, nh, nkv, hd,
                     window, e);
    }
    free(qkv), free(dout), free(out), free(lse), free(out16), free(lse16), free(dqkv);
    free(dqkv16), free(obf), free(pack);
}

static void attn16_case(int B, int T, int nh, int nkv, int hd, uint64_t seed) {
    attn16_case_w(B, T, nh, nkv, hd, 0, seed);
}

static void test_attention16_against_fp32(void) {
    ZT_CHECK(zt_attention16_supported(64) && zt_attention16_supported(128));
    ZT_CHECK(!zt_attention16_supported(48) && !zt_attention16_supported(256));
    attn16_case(2, 150, 6, 2, 64, 31);  /* groups of 3, ragged last block of 22 */
    attn16_case(1, 71, 4, 4, 128, 32);  /* odd T: the last pair of keys has one key */
    attn16_case(3, 64, 2, 1, 64, 33);   /* exactly one block; multi-query */
    attn16_case(1, 200, 4, 2, 32, 34);  /* four blocks, the smallest head dimension */
    /* sliding windows: inside a tile, one past a tile, exactly a tile */
    attn16_case_w(2, 150, 4, 2, 64, 50, 36);
    attn16_case_w(1, 200, 2, 1, 32, 65, 37);
    attn16_case_w(1, 131, 4, 4, 128, 64, 38);
}

/* The AMX tile product against a double reference, for each shape of known zeros.
 * The gate follows oneDNN's ISA, so on CPUs (or DNNL_MAX_CPU_ISA caps) without AMX the
 * test checks that it stays closed.  With AMX: every product of bf16 values is exact in
 * fp32, so the fp32 sums of 64 terms must agree with the double ones to 1e-5 of the
 * sum of magnitudes; for the K shapes A holds the shape's zeros, so the steps skipped
 * must add nothing; the C tiles ZT_TILE_J_GE_I skips must be left as they were. */
static uint32_t bf16_pair(const float v[2]) {
    return (uint32_t)zt_f32_to_bf16(v[0]) | (uint32_t)zt_f32_to_bf16(v[1]) << 16;
}

static double bf16_half(uint32_t w, int h) {
    return zt_bf16_to_f32((uint16_t)(h ? w >> 16 : w & 0xffff));
}

static void test_amx_pmm(void) {
    const int isa_amx = strstr(zt_matmul_isa_name(), "AMX") != NULL;
    ZT_CHECK_MSG(zt_amx_usable() == isa_amx, "AMX gate %d, oneDNN ISA %s", zt_amx_usable(),
                 zt_matmul_isa_name());
    if (!zt_amx_usable()) {
        printf("     (oneDNN ISA %s: no AMX, the tile products run on AMX CPUs only)\n",
               zt_matmul_isa_name());
        return;
    }
    rng_seed(40);
    /* three column tiles, four row tiles, two steps; strides wider than the tiles */
    enum { M = 64, N = 48, Q = 32, ARS = Q + 3, LDB = N + 5, LDC = N + 7 };
    uint32_t *A = malloc(4 * M * ARS), *B = malloc(4 * Q * LDB);
    float *C = malloc(sizeof(float) * M * LDC), *C0 = malloc(sizeof(float) * M * LDC), v[2];
    for (int i = 0; i < Q * LDB; i++) fill(v, 2, 1.0, 0.0), B[i] = bf16_pair(v);
    fill(C0, (size_t)M * LDC, 1.0, 0.0);
    for (int case_ = 0; case_ < 2 * (ZT_TILE_K_GE_I + 1); case_++) {
        /* each shape accumulating into C (beta 1) and overwriting it (beta 0) */
        const int shape = case_ / 2, beta = case_ % 2;
        for (int i = 0; i < M; i++)
            for (int q = 0; q < ARS; q++) {
                fill(v, 2, 1.0, 0.0);
                for (int h = 0; h < 2; h++) {
                    const int k = 2 * q + h;
                    if ((shape == ZT_TILE_K_LE_I && k > i) || (shape == ZT_TILE_K_GE_I && k < i))
                        v[h] = 0.0f;
                }
                A[i * ARS + q] = bf16_pair(v);
            }
        memcpy(C, C0, sizeof(float) * M * LDC);
        zt_amx_begin();
        zt_amx_pmm(C, LDC, A, ARS, B, LDB, M, N, Q, (zt_tile_shape)shape, beta);
        zt_amx_end();
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                const float got = C[i * LDC + j];
                if (shape == ZT_TILE_J_GE_I && j / 16 < i / 16) {
                    ZT_CHECK(got == C0[i * LDC + j]);
                    continue;
                }
                double want = beta ? C0[i * LDC + j] : 0.0, mag = fabs(want);
                for (int q = 0; q < Q; q++)
                    for (int h = 0; h < 2; h++) {
                        const double t = bf16_half(A[i * ARS + q], h) * bf16_half(B[q * LDB + j], h);
                        want += t, mag += fabs(t);
                    }
                const double e = fabs(got - want) / mag;
                worst = e > worst ? e : worst;
            }
        ZT_CHECK_MSG(worst < 1e-5, "AMX tile product, shape %d beta %d: relative error %.3g", shape,
                     beta, worst);
    }
    free(A), free(B), free(C), free(C0);
}

/* Like the fp32 kernels: bit-identical for any thread count. */
static void test_attention16_deterministic(void) {
    rng_seed(35);
    const int B = 2, T = 130, nh = 4, nkv = 2, hd = 64, W = (nh + 2 * nkv) * hd;
    const size_t n = (size_t)B * T * W, no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
    float *qkv = malloc(sizeof(float) * n), *dout = malloc(sizeof(float) * no);
    void *pack = malloc(zt_attention16_pack_bytes(B, T, nkv, hd));
    fill(qkv, n, 1.0, 0.0);
    fill(dout, no, 1.0, 0.0);
    float *out[2], *lse[2], *dqkv[2];
    const int threads[2] = {omp_get_max_threads(), 1};
    for (int r = 0; r < 2; r++) {
        out[r] = malloc(sizeof(float) * no), lse[r] = malloc(sizeof(float) * nl);
        dqkv[r] = malloc(sizeof(float) * n);
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads[r]);
        zt_attention16_forward(out[r], NULL, lse[r], qkv, pack, B, T, nh, nkv, hd, 0);
        zt_attention16_backward(dqkv[r], dout, qkv, out[r], lse[r], pack, B, T, nh, nkv, hd, 0);
        omp_set_num_threads(saved);
    }
    ZT_CHECK(memcmp(out[0], out[1], sizeof(float) * no) == 0);
    ZT_CHECK(memcmp(lse[0], lse[1], sizeof(float) * nl) == 0);
    ZT_CHECK(memcmp(dqkv[0], dqkv[1], sizeof(float) * n) == 0);
    for (int r = 0; r < 2; r++) free(out[r]), free(lse[r]), free(dqkv[r]);
    free(qkv), free(dout), free(pack);
}

/* ---- transpose ------------------------------------------------------------------ */

static void test_transpose(void) {
    /* full 16 x 16 blocks, ragged rows and columns, and a single row */
    const int shapes[][2] = {{48, 32}, {37, 53}, {16, 5}, {1, 40}, {70, 16}};
    for (int k = 0; k < 5; k++) {
        const int R = shapes[k][0], C = shapes[k][1];
        float *a = malloc(sizeof(float) * R * C), *t = malloc(sizeof(float) * R * C);
        for (int i = 0; i < R * C; i++) a[i] = (float)i + 0.5f;
        zt_transpose_f32(t, a, R, C);
        int bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) bad += t[(size_t)c * R + r] != a[(size_t)r * C + c];
        ZT_CHECK_MSG(bad == 0, "transpose %d x %d: %d misplaced values", R, C, bad);
        free(a), free(t);
    }
}

/* ---- SwiGLU --------------------------------------------------------------------- */

static void swiglu_ref(double *h, const double *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double g = gu[(size_t)n * 2 * F + f], u = gu[(size_t)n * 2 * F + F + f];
            h[(size_t)n * F + f] = g / (1.0 + exp(-g)) * u;
        }
}

typedef struct {
    int N, F;
    const double *R;
    double *h;
} swiglu_ctx;

static double swiglu_loss(const double *in, void *vctx) {
    swiglu_ctx *c = vctx;
    swiglu_ref(c->h, in, c->N, c->F);
    double L = 0;
    for (int i = 0; i < c->N * c->F; i++) L += c->R[i] * c->h[i];
    return L;
}

static void test_swiglu(void) {
    rng_seed(12);
    const int N = 2 * 9, F = 37;
    const size_t ngu = (size_t)N * 2 * F, nh = (size_t)N * F;
    float *gu = malloc(sizeof(float) * ngu), *h = malloc(sizeof(float) * nh);
    float *dh = malloc(sizeof(float) * nh), *dgu = malloc(sizeof(float) * ngu);
    fill(gu, ngu, 4.0, 0.0);
    fill(dh, nh, 1.0, 0.0);
    zt_swiglu_forward(h, ZT_F32, gu, N, F);
    double *gud = to_double(gu, ngu), *hd = malloc(sizeof(double) * nh);
    swiglu_ref(hd, gud, N, F);
    check_array("swiglu h", h, hd, nh, FWD_TOL, FWD_FLOOR);

    for (size_t i = 0; i < ngu; i++) dgu[i] = NAN; /* overwritten, not accumulated */
    zt_swiglu_backward(dgu, ZT_F32, dh, gu, N, F);
    double *R = to_double(dh, nh), *gd = malloc(sizeof(double) * ngu);
    swiglu_ctx ctx = {N, F, R, hd};
    fd_grad(gd, gud, ngu, swiglu_loss, &ctx);
    check_array("swiglu dgu", dgu, gd, ngu, GRAD_TOL, GRAD_FLOOR);

    /* Saturated gates: exp(-g) overflows for g << 0; results must stay finite. */
    float gx[4] = {-200.0f, -90.0f, 90.0f, 200.0f}, ux[4] = {1.5f, 1.5f, 1.5f, 1.5f};
    float gux[8], hx[4], dhx[4] = {1, 1, 1, 1}, dgux[8];
    memcpy(gux, gx, sizeof gx), memcpy(gux + 4, ux, sizeof ux);
    zt_swiglu_forward(hx, ZT_F32, gux, 1, 4);
    zt_swiglu_backward(dgux, ZT_F32, dhx, gux, 1, 4);
    for (int f = 0; f < 4; f++) {
        ZT_CHECK(isfinite(hx[f]) && isfinite(dgux[f]) && isfinite(dgux[4 + f]));
        ZT_CHECK_CLOSE(hx[f], gx[f] > 0 ? gx[f] * ux[f] : 0.0, 1e-6, 1e-6);
        ZT_CHECK_CLOSE(dgux[f], gx[f] > 0 ? ux[f] : 0.0, 1e-6, 1e-6);
    }
    free(gu), free(h), free(dh), free(dgu), free(gud), free(hd), free(R), free(gd);
}

/* ---- cross-entropy -------------------------------------------------------------- */

static double xent_ref(const double *x, const int *tg, int N, int V) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) m = fmax(m, x[(size_t)n * V + v]);
        for (int v = 0; v < V; v++) s += exp(x[(size_t)n * V + v] - m);
        total += m + log(s) - x[(size_t)n * V + tg[n]];
    }
    return total;
}

typedef struct {
    int N, V;
    const int *tg;
    double scale;
} xent_ctx;

static double xent_loss(const double *in, void *vctx) {
    xent_ctx *c = vctx;
    return c->scale * xent_ref(in, c->tg, c->N, c->V);
}

/* TRL's completion-only loss: rows whose target is ZT_IGNORE_INDEX add no loss and
 * get a zero gradient row (in place, and in bf16, where the logits were non-zero);
 * the other rows are exactly what they are without the ignored ones. */
static void test_xent_ignore_index(void) {
    rng_seed(17);
    const int N = 6, V = 29;
    const size_t n = (size_t)N * V;
    int tg[6] = {3, ZT_IGNORE_INDEX, 7, ZT_IGNORE_INDEX, ZT_IGNORE_INDEX, 28};
    int kept_tg[3] = {3, 7, 28}, kept_rows[3] = {0, 2, 5};
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n), *kx = malloc(sizeof(float) * 3 * V),
          *kd = malloc(sizeof(float) * 3 * V);
    uint16_t *d16 = malloc(sizeof(uint16_t) * n), *kd16 = malloc(sizeof(uint16_t) * 3 * V);
    fill(x, n, 4.0, 0.5);
    for (int r = 0; r < 3; r++) memcpy(kx + (size_t)r * V, x + (size_t)kept_rows[r] * V, sizeof(float) * V);
    const float scale = 0.25f;
    double got = zt_xent_forward_backward(d, NULL, x, tg, N, V, scale);
    double want = zt_xent_forward_backward(kd, NULL, kx, kept_tg, 3, V, scale);
    ZT_CHECK(got == want);
    ZT_CHECK(zt_xent_forward_backward(NULL, NULL, x, tg, N, V, scale) == want);
    int bad = 0;
    for (int r = 0, k = 0; r < N; r++) {
        for (int v = 0; v < V; v++)
            bad += tg[r] == ZT_IGNORE_INDEX ? d[(size_t)r * V + v] != 0.0f : d[(size_t)r * V + v] != kd[(size_t)k * V + v];
        k += tg[r] != ZT_IGNORE_INDEX;
    }
    ZT_CHECK_MSG(bad == 0, "%d gradient entries differ from the rows computed alone, or are not 0 on ignored rows", bad);
    /* in place, with the bf16 gradient: ignored rows of the bf16 buffer are 0 too */
    for (size_t i = 0; i < n; i++) d16[i] = 0x3f80; /* 1.0: stale values must be overwritten */
    memcpy(d, x, sizeof(float) * n);
    ZT_CHECK(zt_xent_forward_backward(d, d16, d, tg, N, V, scale) == want);
    zt_xent_forward_backward(kd, kd16, kx, kept_tg, 3, V, scale);
    bad = 0;
    for (int r = 0, k = 0; r < N; r++) {
        for (int v = 0; v < V; v++)
            bad += tg[r] == ZT_IGNORE_INDEX ? d16[(size_t)r * V + v] != 0 : d16[(size_t)r * V + v] != kd16[(size_t)k * V + v];
        k += tg[r] != ZT_IGNORE_INDEX;
    }
    ZT_CHECK_MSG(bad == 0, "%d bf16 gradient entries wrong", bad);
    free(x), free(d), free(kx), free(kd), free(d16), free(kd16);
}

static void test_xent(void) {
    rng_seed(13);
    const int N = 2 * 11, V = 37;
    const size_t n = (size_t)N * V;
    const float scale = 1.0f / N;
    int tg[22];
    for (int i = 0; i < N; i++) tg[i] = (int)((rng_uniform() + 1.0) * 0.5 * V) % V;
    tg[0] = 0, tg[1] = V - 1; /* both ends of the vocabulary */
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
    fill(x, n, 5.0, 0.0);
    double *xd = to_double(x, n);
    const double want = xent_ref(xd, tg, N, V);

    /* Out of place, then loss only, then in place: same loss, same gradient. */
    double got = zt_xent_forward_backward(d, NULL, x, tg, N, V, scale);
    ZT_CHECK_CLOSE(got, want, 1e-6, 1.0);
    ZT_CHECK_CLOSE(zt_xent_forward_backward(NULL, NULL, x, tg, N, V, scale), want, 1e-6, 1.0);
    double *gd = malloc(sizeof(double) * n);
    xent_ctx ctx = {N, V, tg, scale};
    fd_grad(gd, xd, n, xent_loss, &ctx);
    check_array("xent dlogits", d, gd, n, GRAD_TOL, GRAD_FLOOR * scale);

    float *inplace = malloc(sizeof(float) * n);
    memcpy(inplace, x, sizeof(float) * n);
    double got_in = zt_xent_forward_backward(inplace, NULL, inplace, tg, N, V, scale);
    ZT_CHECK(got_in == got);
    ZT_CHECK_MSG(memcmp(inplace, d, sizeof(float) * n) == 0,
                 "in-place dlogits differ from out-of-place");

    /* Rows of a softmax gradient sum to 0. */
    for (int r = 0; r < N; r++) {
        double s = 0;
        for (int v = 0; v < V; v++) s += d[(size_t)r * V + v];
        ZT_CHECK_CLOSE(s, 0.0, 1e-6, scale);
    }

    /* Huge logits: a shift by 1000 changes nothing (no overflow in exp). */
    float *xs = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) xs[i] = x[i] + 1000.0f;
    double *xsd = to_double(xs, n);
    double got_s = zt_xent_forward_backward(xs, NULL, xs, tg, N, V, scale);
    ZT_CHECK_CLOSE(got_s, xent_ref(xsd, tg, N, V), 1e-6, 1.0);
    ZT_CHECK(isfinite(got_s));
    check_array("xent dlogits (shifted by 1000)", xs, gd, n, 1e-3, GRAD_FLOOR * scale);

    free(x), free(d), free(xd), free(gd), free(inplace), free(xs), free(xsd);
}

/* ---- bf16 outputs ----------------------------------------------------------------- */

/* Every bf16 output is the round-to-nearest-even of the fp32 output the same kernel
 * writes in fp32 mode (kernels.h): compared bit for bit, so a kernel that rounded a
 * different value, truncated, or skipped elements fails. */
static void check_bf16_of(const char *what, const uint16_t *got, const float *want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != zt_f32_to_bf16(want[i]) && bad++ == 0) first = i;
    ZT_CHECK_MSG(bad == 0, "%s: %zu of %zu bf16 values are not the rounding of the fp32 ones "
                 "(first at %zu: 0x%04x, want 0x%04x from %.9g)", what, bad, n, first,
                 bad ? got[first] : 0, bad ? zt_f32_to_bf16(want[first]) : 0,
                 bad ? want[first] : 0.0);
}

/* A beta of 0 stores without reading (the destinations hold NaN here) and gives the bits
 * of a clear and an add, -0.0 included: a zero dy row with a negative weight makes
 * dx's term -0.0 (g = 0 * w < 0 and xhat * mean = +0), which a store of v would keep
 * where 0 + v gives +0.0.  The bias's db likewise. */
static void test_backward_store_forms(void) {
    rng_seed(3);
    const int N = 6, C = 75, D = 70;
    const size_t NC = (size_t)N * C;
    float *x = malloc(sizeof(float) * NC), *w = malloc(sizeof(float) * C), *y = malloc(sizeof(float) * NC);
    float *dy = malloc(sizeof(float) * NC), rstd[6];
    float *dx0 = calloc(NC, sizeof(float)), *dx1 = malloc(sizeof(float) * NC);
    float *dw0 = calloc(C, sizeof(float)), *dw1 = malloc(sizeof(float) * C);
    uint16_t *c0 = malloc(2 * NC), *c1 = malloc(2 * NC);
    fill(x, NC, 1.0, 0.3), fill(w, C, 2.0, 0.0), fill(dy, NC, 1.0, 0.0);
    for (int c = 0; c < C; c++) dy[2 * C + c] = 0.0f; /* row 2: no gradient, as an ignored target's */
    zt_rmsnorm_forward(y, ZT_F32, rstd, x, w, N, C, 1e-5f);
    for (size_t i = 0; i < NC; i++) dx1[i] = NAN;
    for (int c = 0; c < C; c++) dw1[c] = NAN;
    zt_rmsnorm_backward(dx0, c0, 1.0f, dw0, 1.0f, dy, x, w, rstd, N, C); /* onto zeros */
    zt_rmsnorm_backward(dx1, c1, 0.0f, dw1, 0.0f, dy, x, w, rstd, N, C); /* stored */
    int negzero = 0; /* the case that tells 0 + v from v apart is there */
    for (int c = 0; c < C; c++) negzero |= w[c] < 0.0f && x[2 * C + c] > 0.0f;
    ZT_CHECK(negzero);
    ZT_CHECK(memcmp(dx0, dx1, sizeof(float) * NC) == 0 && memcmp(c0, c1, 2 * NC) == 0);
    ZT_CHECK(memcmp(dw0, dw1, sizeof(float) * C) == 0);
    /* beta 1 onto the stored values: twice the gradient, as two adds onto zeros */
    zt_rmsnorm_backward(dx0, NULL, 1.0f, dw0, 1.0f, dy, x, w, rstd, N, C);
    zt_rmsnorm_backward(dx1, NULL, 1.0f, dw1, 1.0f, dy, x, w, rstd, N, C);
    ZT_CHECK(memcmp(dx0, dx1, sizeof(float) * NC) == 0 && memcmp(dw0, dw1, sizeof(float) * C) == 0);

    float *bdy = malloc(sizeof(float) * N * D), *db0 = calloc(D, sizeof(float)), *db1 = malloc(sizeof(float) * D);
    fill(bdy, (size_t)N * D, 1.0, 0.0);
    for (int j = 0; j < D; j++) db1[j] = NAN;
    zt_bias_backward(db0, 1.0f, bdy, N, D);
    zt_bias_backward(db1, 0.0f, bdy, N, D);
    ZT_CHECK(memcmp(db0, db1, sizeof(float) * D) == 0);
    zt_bias_backward(db0, 1.0f, bdy, N, D);
    zt_bias_backward(db1, 1.0f, bdy, N, D);
    ZT_CHECK(memcmp(db0, db1, sizeof(float) * D) == 0);
    free(x), free(w), free(y), free(dy), free(dx0), free(dx1), free(dw0), free(dw1), free(c0), free(c1);
    free(bdy), free(db0), free(db1);
}

static void test_bf16_outputs_are_rounded_fp32(void) {
    rng_seed(21);
    const int B = 2, T = 70, nh = 4, nkv = 2, hd = 64, C = 75, F = 37, V = 53;
    const int N = B * T, W = (nh + 2 * nkv) * hd;
    const size_t NC = (size_t)N * C;
    float *x = malloc(sizeof(float) * NC), *w = malloc(sizeof(float) * C), rstd[140];
    float *y = malloc(sizeof(float) * NC), *dy = malloc(sizeof(float) * NC);
    float *dx = malloc(sizeof(float) * NC), *dx2 = malloc(sizeof(float) * NC);
    float *dw = calloc(C, sizeof(float)), *dw2 = calloc(C, sizeof(float));
    uint16_t *y16 = malloc(2 * NC), *dx16 = malloc(2 * NC);
    fill(x, NC, 2.0, 0.1), fill(w, C, 0.5, 1.0), fill(dy, NC, 1.0, 0.0), fill(dx, NC, 0.3, 0.0);
    zt_rmsnorm_forward(y, ZT_F32, rstd, x, w, N, C, 1e-5f);
    zt_rmsnorm_forward(y16, ZT_BF16, rstd, x, w, N, C, 1e-5f);
    check_bf16_of("rmsnorm y", y16, y, NC);
    memcpy(dx2, dx, sizeof(float) * NC);
    zt_rmsnorm_backward(dx, NULL, 1.0f, dw, 1.0f, dy, x, w, rstd, N, C);
    zt_rmsnorm_backward(dx2, dx16, 1.0f, dw2, 1.0f, dy, x, w, rstd, N, C);
    ZT_CHECK(memcmp(dx, dx2, sizeof(float) * NC) == 0 && memcmp(dw, dw2, sizeof(float) * C) == 0);
    check_bf16_of("rmsnorm dx copy", dx16, dx, NC);

    const size_t ngu = (size_t)N * 2 * F, nf = (size_t)N * F;
    float *gu = malloc(sizeof(float) * ngu), *h = malloc(sizeof(float) * nf);
    float *dh = malloc(sizeof(float) * nf), *dgu = malloc(sizeof(float) * ngu);
    uint16_t *h16 = malloc(2 * nf), *dgu16 = malloc(2 * ngu);
    fill(gu, ngu, 4.0, 0.0), fill(dh, nf, 1.0, 0.0);
    zt_swiglu_forward(h, ZT_F32, gu, N, F);
    zt_swiglu_forward(h16, ZT_BF16, gu, N, F);
    check_bf16_of("swiglu h", h16, h, nf);
    zt_swiglu_backward(dgu, ZT_F32, dh, gu, N, F);
    zt_swiglu_backward(dgu16, ZT_BF16, dh, gu, N, F);
    check_bf16_of("swiglu dgu", dgu16, dgu, ngu);

    const size_t nq = (size_t)N * W, no = (size_t)N * nh * hd;
    float *qkv = malloc(sizeof(float) * nq), *out = malloc(sizeof(float) * no);
    float *out2 = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * (size_t)N * nh);
    uint16_t *out16 = malloc(2 * no);
    fill(qkv, nq, 1.0, 0.0);
    zt_attention_forward(out, lse, qkv, B, T, nh, nkv, hd, 0);
    zt_attention_forward_copy16(out2, out16, lse, qkv, B, T, nh, nkv, hd, 0);
    ZT_CHECK(memcmp(out, out2, sizeof(float) * no) == 0);
    check_bf16_of("attention out", out16, out, no);

    const size_t nv = (size_t)N * V;
    float *logits = malloc(sizeof(float) * nv), *d = malloc(sizeof(float) * nv);
    uint16_t *d16 = malloc(2 * nv);
    int *tg = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) tg[i] = (i * 7) % V;
    fill(logits, nv, 5.0, 0.0);
    float *scratch = malloc(sizeof(float) * nv);
    double l1 = zt_xent_forward_backward(d, NULL, logits, tg, N, V, 1.0f / N);
    ZT_CHECK(l1 == zt_xent_forward_backward(scratch, d16, logits, tg, N, V, 1.0f / N));
    ZT_CHECK(l1 == zt_xent_forward_backward(NULL, NULL, logits, tg, N, V, 1.0f / N));
    check_bf16_of("xent dlogits", d16, d, nv);
    free(scratch);

    free(x), free(w), free(y), free(dy), free(dx), free(dx2), free(dw), free(dw2), free(y16);
    free(dx16), free(gu), free(h), free(dh), free(dgu), free(h16), free(dgu16), free(qkv);
    free(out), free(out2), free(lse), free(out16), free(logits), free(d), free(d16), free(tg);
}

int main(void) {
    ZT_RUN(test_expf_accuracy);
    ZT_RUN(test_rmsnorm_forward);
    ZT_RUN(test_rmsnorm_backward_accumulates);
    ZT_RUN(test_backward_store_forms);
    ZT_RUN(test_rope_tables);
    ZT_RUN(test_rope_forward_backward);
    ZT_RUN(test_rope_roundtrip_is_identity);
    ZT_RUN(test_attention_gqa);
    ZT_RUN(test_attention_long_rows);
    ZT_RUN(test_attention_t1);
    ZT_RUN(test_attention_llama_head_dims);
    ZT_RUN(test_attention_deterministic);
    ZT_RUN(test_attention_sliding_window);
    ZT_RUN(test_attention_window_wider_than_t_is_causal);
    ZT_RUN(test_attention_cache_window);
    ZT_RUN(test_attention16_against_fp32);
    ZT_RUN(test_attention16_deterministic);
    ZT_RUN(test_amx_pmm);
    ZT_RUN(test_transpose);
    ZT_RUN(test_swiglu);
    ZT_RUN(test_xent);
    ZT_RUN(test_xent_ignore_index);
    ZT_RUN(test_bf16_outputs_are_rounded_fp32);
    ZT_TEST_MAIN_END();
}
