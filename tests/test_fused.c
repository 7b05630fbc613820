/* test_fused.c — the fused entries of backend.h (fused.h) and fast mode's use of them
 * in the model, on the emulated device (whose fast table runs the host's
 * compositions):
 *   - each fused entry against the entries it stands for: rmsnorm_residual_forward
 *     and matmul_out bit for bit; lmhead_xent bit for bit in one chunk and within
 *     fp32 / bf16 error in several (N not a multiple of the chunk, a prime V, ignored
 *     targets), its refusals as values;
 *   - a fast-mode model's training pass against exact mode's, in chunks of rows that
 *     do not divide N, tied and untied lm-heads, fp32 and bf16, with and without
 *     gradient checkpointing: the loss and every gradient;
 *   - the fast model's activation table lacks the (N, V) logits, and the estimate
 *     (zt_model_activation_bytes_in) says so; evaluation on a fast model still has
 *     its logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/core/rng.h"
#include "../src/io/hf_model.h"
#include "../src/io/tokens.h"
#include "../src/kernels/backend.h"
#include "../src/model/frozen.h"
#include "../src/model/layout.h"
#include "../src/model/llama.h"
#include "test.h"

/* ---- buffers on the emulated device ----------------------------------------------- */

static const zt_backend *emu_fast(void) { return zt_backend_emu_fast(); }

static void *up(const zt_backend *be, const void *host, size_t bytes)
{
    void *d = be->alloc(ZT_MEM_OTHER, bytes);
    if (host)
        be->to_device(d, host, bytes);
    return d;
}

static void *down(const zt_backend *be, const void *dev, size_t bytes)
{
    void *h = malloc(bytes);
    be->to_host(h, dev, bytes);
    return h;
}

static uint64_t rng = 12345;

static float *randn(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        /* the sum of 4 uniforms, centred: near enough to normal for the checks */
        double u = zt_rand_uniform(&rng) + zt_rand_uniform(&rng) + zt_rand_uniform(&rng) + zt_rand_uniform(&rng);
        x[i] = (float)((u - 2.0) * scale);
    }
    return x;
}

static void *as_dtype(const float *x, zt_dtype dt, size_t n)
{
    void *y = malloc(n * zt_dtype_size(dt));
    zt_convert(y, dt, x, ZT_F32, n);
    return y;
}

/* max |a - b| / max(max |b|, floor) over n fp32 values */
static double rel_diff(const float *a, const float *b, size_t n, double floor)
{
    double d = 0.0, s = floor;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / s;
}

/* ---- rmsnorm_residual_forward ------------------------------------------------------ */

static void residual_norm_case(zt_dtype delta_dt, zt_dtype y_dt)
{
    const zt_backend *be = emu_fast();
    const int N = 7, C = 48;
    const size_t n = (size_t)N * C, ys = zt_dtype_size(y_dt);
    float *x = randn(n, 1.0f), *d = randn(n, 0.5f), *w = randn(C, 1.0f);
    void *dh = as_dtype(d, delta_dt, n);
    /* the composition: accumulate, then the norm */
    float *ex = up(be, x, n * 4), *ew = up(be, w, C * 4), *er = up(be, NULL, N * 4);
    void *ed = up(be, dh, n * zt_dtype_size(delta_dt)), *ey = up(be, NULL, n * ys);
    be->accumulate(ex, ZT_F32, ed, delta_dt, n);
    be->rmsnorm_forward(ey, y_dt, er, ex, ew, N, C, 1e-5f);
    /* fused */
    float *fx = up(be, x, n * 4), *fr = up(be, NULL, N * 4);
    void *fy = up(be, NULL, n * ys);
    be->rmsnorm_residual_forward(fx, ed, delta_dt, fy, y_dt, fr, ew, N, C, 1e-5f);
    void *a[3] = {down(be, ex, n * 4), down(be, ey, n * ys), down(be, er, N * 4)};
    void *b[3] = {down(be, fx, n * 4), down(be, fy, n * ys), down(be, fr, N * 4)};
    ZT_CHECK_MSG(!memcmp(a[0], b[0], n * 4), "x + delta (%s)", zt_dtype_name(delta_dt));
    ZT_CHECK_MSG(!memcmp(a[1], b[1], n * ys), "y (%s)", zt_dtype_name(y_dt));
    ZT_CHECK(!memcmp(a[2], b[2], N * 4));
    for (int i = 0; i < 3; i++)
        free(a[i]), free(b[i]);
    be->free(ZT_MEM_OTHER, ex, n * 4), be->free(ZT_MEM_OTHER, ew, C * 4), be->free(ZT_MEM_OTHER, er, N * 4);
    be->free(ZT_MEM_OTHER, ed, n * zt_dtype_size(delta_dt)), be->free(ZT_MEM_OTHER, ey, n * ys);
    be->free(ZT_MEM_OTHER, fx, n * 4), be->free(ZT_MEM_OTHER, fr, N * 4), be->free(ZT_MEM_OTHER, fy, n * ys);
    free(x), free(d), free(w), free(dh);
}

static void test_rmsnorm_residual_is_its_composition(void)
{
    residual_norm_case(ZT_F32, ZT_F32);
    residual_norm_case(ZT_BF16, ZT_F32);
    residual_norm_case(ZT_F32, ZT_BF16);
    residual_norm_case(ZT_BF16, ZT_BF16);
}

/* ---- matmul_out --------------------------------------------------------------------- */

/* residual: 0 none, 1 a buffer of its own, 2 D itself (x += f(x) in place) */
static void matmul_out_case(zt_dtype d_dt, zt_dtype compute, int M, int N, int K, int ta, int tb, int residual)
{
    const zt_backend *be = emu_fast();
    zt_err err = {0};
    const size_t mn = (size_t)M * N, ds = zt_dtype_size(d_dt);
    float *A = randn((size_t)M * K, 1.0f), *B = randn((size_t)K * N, 1.0f), *R = randn(mn, 4.0f);
    void *Rd = as_dtype(R, d_dt, mn);
    void *dA = up(be, A, (size_t)M * K * 4), *dB = up(be, B, (size_t)K * N * 4);
    /* what it stands for: the fp32 product into the fp32 residual (widened), once rounded */
    float *Rw = malloc(mn * 4);
    zt_convert(Rw, ZT_F32, Rd, d_dt, mn);
    float *want_acc = up(be, residual ? Rw : NULL, mn * 4);
    ZT_CHECK(be->matmul(want_acc, dA, ZT_F32, dB, ZT_F32, M, N, K, ta, tb, residual ? 1.0f : 0.0f, compute, &err) ==
             ZT_OK);
    float *acc = down(be, want_acc, mn * 4);
    void *want = as_dtype(acc, d_dt, mn);
    /* fused */
    void *D = up(be, residual == 2 ? Rd : NULL, mn * ds), *dR = residual == 1 ? up(be, Rd, mn * ds) : NULL;
    const void *res = residual == 2 ? D : dR;
    ZT_CHECK_MSG(be->matmul_out(D, d_dt, res, dA, ZT_F32, dB, ZT_F32, M, N, K, ta, tb, compute, &err) == ZT_OK, "%s",
                 err.msg);
    void *got = down(be, D, mn * ds);
    ZT_CHECK_MSG(!memcmp(got, want, mn * ds), "matmul_out %s, compute %s, %dx%dx%d, trans %d%d, residual %d",
                 zt_dtype_name(d_dt), zt_dtype_name(compute), M, N, K, ta, tb, residual);
    if (dR) { /* the residual is read, not written */
        void *r = down(be, dR, mn * ds);
        ZT_CHECK(!memcmp(r, Rd, mn * ds));
        free(r);
        be->free(ZT_MEM_OTHER, dR, mn * ds);
    }
    free(got), free(want), free(acc), free(Rw), free(A), free(B), free(R), free(Rd);
    be->free(ZT_MEM_OTHER, want_acc, mn * 4), be->free(ZT_MEM_OTHER, D, mn * ds);
    be->free(ZT_MEM_OTHER, dA, (size_t)M * K * 4), be->free(ZT_MEM_OTHER, dB, (size_t)K * N * 4);
}

static void test_matmul_out_is_its_composition(void)
{
    for (int r = 0; r < 3; r++) {
        matmul_out_case(ZT_F32, ZT_F32, 5, 9, 13, 0, 1, r);
        matmul_out_case(ZT_F32, ZT_BF16, 7, 3, 33, 1, 0, r);
        matmul_out_case(ZT_BF16, ZT_BF16, 5, 9, 13, 0, 1, r);
        matmul_out_case(ZT_BF16, ZT_BF16, 6, 11, 17, 1, 1, r);
    }
    /* a bf16 result needs bf16 compute: refused as a value */
    const zt_backend *be = emu_fast();
    zt_err err = {0};
    float *a = up(be, NULL, 64), *b = up(be, NULL, 64);
    void *d = up(be, NULL, 32);
    ZT_CHECK(be->matmul_out(d, ZT_BF16, NULL, a, ZT_F32, b, ZT_F32, 4, 4, 4, 0, 0, ZT_F32, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "bf16 result needs bf16 compute") != NULL, "%s", err.msg);
    be->free(ZT_MEM_OTHER, a, 64), be->free(ZT_MEM_OTHER, b, 64), be->free(ZT_MEM_OTHER, d, 32);
}

/* ---- lmhead_xent -------------------------------------------------------------------- */

typedef struct xent_out {
    double loss;
    float *dx, *dw;
} xent_out;

enum { XN = 37, XC = 24, XV = 301 }; /* N prime, V prime: no chunk size divides them */

/* The path it stands for: the whole (N, V) logits by matmul, xent, the two gradient
 * products (as the model's exact mode runs them). */
static xent_out xent_exact(const zt_backend *be, const void *x, const void *w, zt_dtype cd, const int *tg, float gs,
                           const float *dw0)
{
    zt_err err = {0};
    const int bf = cd == ZT_BF16;
    float *logits = up(be, NULL, (size_t)XN * XV * 4), *dx = up(be, NULL, (size_t)XN * XC * 4);
    float *dw = up(be, dw0, (size_t)XV * XC * 4);
    uint16_t *d16 = bf ? up(be, NULL, (size_t)XN * XV * 2) : NULL;
    ZT_CHECK(be->matmul(logits, x, cd, w, cd, XN, XV, XC, 0, 1, 0.0f, cd, &err) == ZT_OK);
    xent_out o = {be->xent(logits, d16, logits, tg, XN, XV, gs), NULL, NULL};
    const void *g = bf ? (const void *)d16 : (const void *)logits;
    ZT_CHECK(be->matmul(dx, g, cd, w, cd, XN, XC, XV, 0, 0, 0.0f, cd, &err) == ZT_OK);
    ZT_CHECK(be->matmul(dw, g, cd, x, cd, XV, XC, XN, 1, 0, 1.0f, cd, &err) == ZT_OK);
    o.dx = down(be, dx, (size_t)XN * XC * 4);
    o.dw = down(be, dw, (size_t)XV * XC * 4);
    be->free(ZT_MEM_OTHER, logits, (size_t)XN * XV * 4), be->free(ZT_MEM_OTHER, dx, (size_t)XN * XC * 4);
    be->free(ZT_MEM_OTHER, dw, (size_t)XV * XC * 4);
    if (d16)
        be->free(ZT_MEM_OTHER, d16, (size_t)XN * XV * 2);
    return o;
}

/* the fused entry, its loss added to 1.5 already in the device's double; its gradient
 * scale gs, or from the device's step scalars src (NULL: gs) */
static xent_out xent_fused_src(const zt_backend *be, const void *x, const void *w, zt_dtype cd, const int *tg,
                               float gs, const zt_step_scalars *src, const float *dw0, int rows)
{
    zt_err err = {0};
    const double start = 1.5;
    double *loss = up(be, &start, sizeof start);
    float *dx = up(be, NULL, (size_t)XN * XC * 4), *dw = up(be, dw0, (size_t)XV * XC * 4);
    ZT_CHECK_MSG(be->lmhead_xent(loss, dx, dw, 1.0f, x, cd, w, cd, tg, XN, XC, XV, gs, src, cd, rows, &err) ==
                     ZT_OK,
                 "%s", err.msg);
    xent_out o = {0};
    be->to_host(&o.loss, loss, sizeof o.loss);
    o.loss -= start;
    o.dx = down(be, dx, (size_t)XN * XC * 4);
    o.dw = down(be, dw, (size_t)XV * XC * 4);
    be->free(ZT_MEM_OTHER, loss, sizeof start), be->free(ZT_MEM_OTHER, dx, (size_t)XN * XC * 4);
    be->free(ZT_MEM_OTHER, dw, (size_t)XV * XC * 4);
    return o;
}

static xent_out xent_fused(const zt_backend *be, const void *x, const void *w, zt_dtype cd, const int *tg, float gs,
                           const float *dw0, int rows)
{
    return xent_fused_src(be, x, w, cd, tg, gs, NULL, dw0, rows);
}

static void lmhead_case(zt_dtype cd)
{
    const zt_backend *be = emu_fast();
    float *x = randn((size_t)XN * XC, 1.0f), *w = randn((size_t)XV * XC, 0.3f), *dw0 = randn((size_t)XV * XC, 0.01f);
    int tg[XN];
    for (int i = 0; i < XN; i++)
        tg[i] = (int)(zt_rand_uniform(&rng) * XV) % XV;
    tg[3] = tg[20] = ZT_IGNORE_INDEX; /* completion-only loss: no loss, no gradient */
    tg[36] = XV - 1;
    void *xh = as_dtype(x, cd, (size_t)XN * XC), *wh = as_dtype(w, cd, (size_t)XV * XC);
    void *dx_ = up(be, xh, (size_t)XN * XC * zt_dtype_size(cd)), *dw_ = up(be, wh, (size_t)XV * XC * zt_dtype_size(cd));
    const float gs = 1.0f / XN;
    xent_out e = xent_exact(be, dx_, dw_, cd, tg, gs, dw0);
    /* one chunk (and more rows than N): the same calls, the same bits */
    for (int rows = XN; rows <= XN + 27; rows += 27) {
        xent_out f = xent_fused(be, dx_, dw_, cd, tg, gs, dw0, rows);
        ZT_CHECK_MSG(f.loss == e.loss, "%s, %d rows: loss %.17g vs %.17g", zt_dtype_name(cd), rows, f.loss, e.loss);
        ZT_CHECK(!memcmp(f.dx, e.dx, (size_t)XN * XC * 4));
        ZT_CHECK(!memcmp(f.dw, e.dw, (size_t)XV * XC * 4));
        free(f.dx), free(f.dw);
    }
    /* chunks that do not divide N: the rows' sums in another order (the loss), the
     * products' blocking and dw's sum over the chunks (fp32); in bf16 a logit that
     * moves by an fp32 ulp may round dlogits to its other bf16 neighbour, one bf16 ulp
     * (2^-8) of one term: the bounds 1e-6 (fp32) and 2^-8 (bf16) of the output's scale */
    const double tol = cd == ZT_BF16 ? 1.0 / 256 : 1e-6;
    double worst = 0.0;
    const int chunks[] = {1, 5, 10, 36};
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        xent_out f = xent_fused(be, dx_, dw_, cd, tg, gs, dw0, chunks[k]);
        ZT_CHECK_CLOSE(f.loss, e.loss, 1e-12, 1e-9);
        double ddx = rel_diff(f.dx, e.dx, (size_t)XN * XC, 1e-30), ddw = rel_diff(f.dw, e.dw, (size_t)XV * XC, 1e-30);
        ZT_CHECK_MSG(ddx <= tol && ddw <= tol, "%s, %d rows per chunk: dx %.3g, dw %.3g (bound %.3g)", zt_dtype_name(cd),
                     chunks[k], ddx, ddw, tol);
        worst = fmax(worst, fmax(ddx, ddw));
        /* the ignored rows: a zero input gradient */
        for (int c = 0; c < XC; c++)
            ZT_CHECK(f.dx[3 * XC + c] == 0.0f && f.dx[20 * XC + c] == 0.0f);
        free(f.dx), free(f.dw);
    }
    printf("     lmhead_xent %s: N %d, V %d, in chunks of 1-36 rows: worst relative difference %.2g\n",
           zt_dtype_name(cd), XN, XV, worst);
    /* the loss alone (evaluation's use): no gradient wanted */
    zt_err err = {0};
    double *loss = up(be, NULL, sizeof(double)), got;
    ZT_CHECK(be->lmhead_xent(loss, NULL, NULL, 1.0f, dx_, cd, dw_, cd, tg, XN, XC, XV, gs, NULL, cd, 8,
                             &err) == ZT_OK);
    be->to_host(&got, loss, sizeof got);
    ZT_CHECK_CLOSE(got, e.loss, 1e-12, 1e-9);
    be->free(ZT_MEM_OTHER, loss, sizeof(double));
    free(e.dx), free(e.dw), free(x), free(w), free(dw0), free(xh), free(wh);
    be->free(ZT_MEM_OTHER, dx_, (size_t)XN * XC * zt_dtype_size(cd));
    be->free(ZT_MEM_OTHER, dw_, (size_t)XV * XC * zt_dtype_size(cd));
}

static void test_lmhead_xent_against_the_whole_logits(void)
{
    lmhead_case(ZT_F32);
    lmhead_case(ZT_BF16);
}

/* The gradient scale formed from the device's step scalars (fast mode's backward:
 * backend.h, xent_into) is the host's argument to the bit, zt_grad_scale(count, scale)
 * (the trainer's expression: 1/count rounded to fp32, times the scale in double,
 * rounded once more), with fp16's scale on and off, and the argument is ignored: in
 * lmhead_xent on the emulated device (in chunks) and the CPU, and in xent_into. */
static void test_xent_scale_from_the_device(void)
{
    const zt_backend *tables[2] = {emu_fast(), zt_backend_cpu()};
    /* (29, 3 * 2^10): where rounding 1/29 first changes the scale's last bit */
    static const double counts[] = {29.0, 37.0, 41.0, 32.0};
    static const double scales[] = {3.0 * 1024.0, 65536.0, 0.0, 0.0}; /* 0: no fp16 scale */
    for (int ti = 0; ti < 2; ti++) {
        const zt_backend *be = tables[ti];
        float *x = randn((size_t)XN * XC, 1.0f), *w = randn((size_t)XV * XC, 0.3f);
        float *dw0 = randn((size_t)XV * XC, 0.01f);
        int tg[XN];
        for (int i = 0; i < XN; i++)
            tg[i] = (int)(zt_rand_uniform(&rng) * XV) % XV;
        tg[7] = ZT_IGNORE_INDEX;
        float *dx_ = up(be, x, (size_t)XN * XC * 4), *dw_ = up(be, w, (size_t)XV * XC * 4);
        zt_step_scalars *dsc = up(be, NULL, sizeof(zt_step_scalars));
        for (int k = 0; k < 4; k++) {
            zt_step_scalars sc = {.count = counts[k], .ls_on = scales[k] > 0.0};
            sc.ls.scale = scales[k];
            be->to_device(dsc, &sc, sizeof sc);
            const double host_scale = scales[k] > 0.0 ? scales[k] : 1.0;
            const float gs = (float)((double)(float)(1.0 / counts[k]) * host_scale); /* the trainer's, spelt out */
            ZT_CHECK(zt_grad_scale(counts[k], host_scale) == gs && zt_step_grad_scale(&sc) == gs);
            xent_out h = xent_fused(be, dx_, dw_, ZT_F32, tg, gs, dw0, 10);
            xent_out d = xent_fused_src(be, dx_, dw_, ZT_F32, tg, 123.0f, dsc, dw0, 10);
            ZT_CHECK_MSG(h.loss == d.loss && !memcmp(h.dx, d.dx, (size_t)XN * XC * 4) &&
                             !memcmp(h.dw, d.dw, (size_t)XV * XC * 4),
                         "%s lmhead_xent, count %g, scale %g: the device's scale is not the host's", be->name,
                         counts[k], scales[k]);
            /* xent_into over logits of the same shape: dlogits in place, the loss added */
            float *lg = randn((size_t)XN * XV, 2.0f);
            float *a = up(be, lg, (size_t)XN * XV * 4), *b = up(be, lg, (size_t)XN * XV * 4);
            double *la = up(be, NULL, sizeof(double)), *lb = up(be, NULL, sizeof(double));
            be->xent_into(a, NULL, a, tg, XN, XV, gs, NULL, la);
            be->xent_into(b, NULL, b, tg, XN, XV, -5.0f, dsc, lb);
            float *ga = down(be, a, (size_t)XN * XV * 4), *gb = down(be, b, (size_t)XN * XV * 4);
            double sa, sb;
            be->to_host(&sa, la, sizeof sa), be->to_host(&sb, lb, sizeof sb);
            ZT_CHECK_MSG(sa == sb && !memcmp(ga, gb, (size_t)XN * XV * 4), "%s xent_into, count %g, scale %g",
                         be->name, counts[k], scales[k]);
            free(lg), free(ga), free(gb), free(h.dx), free(h.dw), free(d.dx), free(d.dw);
            be->free(ZT_MEM_OTHER, a, (size_t)XN * XV * 4), be->free(ZT_MEM_OTHER, b, (size_t)XN * XV * 4);
            be->free(ZT_MEM_OTHER, la, sizeof(double)), be->free(ZT_MEM_OTHER, lb, sizeof(double));
        }
        be->free(ZT_MEM_OTHER, dsc, sizeof(zt_step_scalars));
        be->free(ZT_MEM_OTHER, dx_, (size_t)XN * XC * 4), be->free(ZT_MEM_OTHER, dw_, (size_t)XV * XC * 4);
        free(x), free(w), free(dw0);
    }
}

/* A target outside the vocabulary, or a bad shape: refused as a value before anything
 * is written; no rows: nothing to do. */
static void test_lmhead_xent_refusals(void)
{
    const zt_backend *be = emu_fast();
    zt_err err = {0};
    float *x = up(be, NULL, 2 * 8 * 4), *w = up(be, NULL, 5 * 8 * 4);
    const float poison = 7.0f;
    float px[16];
    for (int i = 0; i < 16; i++)
        px[i] = poison;
    float *dx = up(be, px, sizeof px);
    double start = 2.0, got;
    double *loss = up(be, &start, sizeof start);
    int bad[2] = {0, 5};
    ZT_CHECK(be->lmhead_xent(loss, dx, NULL, 1.0f, x, ZT_F32, w, ZT_F32, bad, 2, 8, 5, 1.0f, NULL, ZT_F32, 1,
                             &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "target 5 of row 1 outside the vocabulary [0, 5)") != NULL, "%s", err.msg);
    int neg[2] = {-1, 0};
    ZT_CHECK(be->lmhead_xent(loss, dx, NULL, 1.0f, x, ZT_F32, w, ZT_F32, neg, 2, 8, 5, 1.0f, NULL, ZT_F32, 1,
                             &err) == ZT_EINPUT);
    int ok[2] = {0, 1};
    ZT_CHECK(be->lmhead_xent(loss, dx, NULL, 1.0f, x, ZT_F32, w, ZT_F32, ok, 2, 8, 5, 1.0f, NULL, ZT_F32, 0,
                             &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "rows per chunk 0") != NULL, "%s", err.msg);
    ZT_CHECK(be->lmhead_xent(loss, dx, NULL, 1.0f, x, ZT_F32, w, ZT_F32, ok, 0, 8, 5, 1.0f, NULL, ZT_F32, 4,
                             &err) == ZT_OK);
    float back[16];
    be->to_host(back, dx, sizeof back);
    be->to_host(&got, loss, sizeof got);
    ZT_CHECK(!memcmp(back, px, sizeof px) && got == start);
    be->free(ZT_MEM_OTHER, x, 64), be->free(ZT_MEM_OTHER, w, 160), be->free(ZT_MEM_OTHER, dx, sizeof px);
    be->free(ZT_MEM_OTHER, loss, sizeof start);
}

/* ---- the model in fast mode against exact mode -------------------------------------- */

/* Frozen weights (frozen.h) with a gradient buffer per unit: an owner for one pass. */
typedef struct grad_owner {
    zt_frozen_params fr;
    zt_param_owner inner;
    zt_param_owner_ops ops;
    float **grads;
    const zt_layout *lay;
} grad_owner;

static grad_owner *the_owner; /* the ops' context is the frozen weights'; the grads are here */

static const void *go_acquire(void *ctx, int u, zt_pass pass)
{
    (void)pass; /* the frozen weights serve forward passes; the backward reads the same */
    return the_owner->inner.ops->acquire(ctx, u, ZT_PASS_FORWARD);
}
static void go_release(void *ctx, int u) { the_owner->inner.ops->release(ctx, u); }
static float *go_grad_begin(void *ctx, int u, int *fresh)
{
    (void)ctx;
    *fresh = 0; /* a sum to add onto: zeros, cleared by the test */
    return the_owner->grads[u];
}
static void go_grad_end(void *ctx, int u) { (void)ctx, (void)u; }
static void go_progress(void *ctx) { (void)ctx; }
static void go_reset(void *ctx) { the_owner->inner.ops->reset(ctx); }

static void frozen_sink(void *f, const zt_param *p, const void *src, zt_dtype dt)
{
    zt_frozen_set_param(f, p, src, dt);
}

typedef struct pass_out {
    double loss;
    float **grads; /* per unit, host copies */
    size_t act_bytes, est_bytes;
    zt_model m;
} pass_out;

static void model_pass(const char *fix, const zt_backend *be, zt_dtype cd, int ckpt, int rows, pass_out *o)
{
    enum { B = 2, T = 16 };
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    char path[256];
    ZT_CHECK(zt_hf_read_config_dir(fix, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    grad_owner g;
    memset(&g, 0, sizeof g);
    the_owner = &g;
    ZT_CHECK(zt_frozen_init(&g.fr, &lay, cd, be, &err) == ZT_OK);
    ZT_CHECK(zt_hf_load_params_to(fix, &lay, frozen_sink, &g.fr, &err) == ZT_OK);
    g.inner = zt_frozen_owner(&g.fr);
    g.ops = (zt_param_owner_ops)ZT_PARAM_OWNER_OPS(go_acquire, go_release, go_grad_begin, go_grad_end, go_progress,
                                                   go_reset);
    g.grads = calloc((size_t)lay.nunits, sizeof *g.grads);
    for (int u = 0; u < lay.nunits; u++)
        g.grads[u] = be->alloc(ZT_MEM_OTHER, lay.units[u].padded_numel * 4);
    zt_param_owner own = g.inner;
    own.ops = &g.ops;
    zt_model *m = &o->m;
    ZT_CHECK_MSG(zt_model_init(m, &cfg, &lay, &own, B, T, ckpt, &err) == ZT_OK, "%s", err.msg);
    if (rows)
        m->xent_rows = rows;
    o->act_bytes = m->act_bytes;
    o->est_bytes = zt_model_activation_bytes_in(&cfg, B, T, ckpt, cd, be->kernels, zt_owner_preset_act16(be));
    zt_tokens tok;
    snprintf(path, sizeof path, "%s/tokens.npy", fix);
    ZT_CHECK(zt_tokens_load(path, &tok, &err) == ZT_OK);
    int in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        in[i] = tok.ids[i];
        tg[i] = tok.ids[i + 1];
    }
    tg[5] = ZT_IGNORE_INDEX;
    ZT_CHECK_MSG(zt_model_forward_backward(m, in, tg, 1.0f / (B * T), &o->loss, &err) == ZT_OK, "%s", err.msg);
    o->grads = calloc((size_t)lay.nunits, sizeof *o->grads);
    for (int u = 0; u < lay.nunits; u++) {
        o->grads[u] = down(be, g.grads[u], lay.units[u].padded_numel * 4);
        be->free(ZT_MEM_OTHER, g.grads[u], lay.units[u].padded_numel * 4);
    }
    zt_model_free(m);
    free(g.grads);
    zt_frozen_free(&g.fr);
    zt_tokens_free(&tok);
    zt_layout_free(&lay);
}

static void compare_case(const char *fix, zt_dtype cd, int ckpt, int rows)
{
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    ZT_CHECK(zt_hf_read_config_dir(fix, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    pass_out e, f;
    model_pass(fix, zt_backend_emu(), cd, ckpt, 0, &e);
    model_pass(fix, zt_backend_emu_fast(), cd, ckpt, rows, &f);
    /* bounds as in lmhead_xent's test: the loss's sum order only; the gradients within
     * one bf16 ulp of a dlogits term in bf16, fp32 sums in another order in fp32.  With
     * bf16 compute fast mode also keeps bf16 activations (qkv, attention output,
     * gate|up: test_act16.c), so there the loss is within bf16 error (2^-8) and the
     * gradients within 2^-5 of their scale: the activations' rounding (2^-9) carried
     * through both layers' backward, the attention's scores amplifying it (test_act16.c
     * measures 2^-6 on one attention); the one-chunk bits are the fp32 cases'. */
    const int act16 = cd == ZT_BF16;
    const double tol = act16 ? 1.0 / 32 : 1e-5;
    ZT_CHECK_CLOSE(f.loss, e.loss, act16 ? 1.0 / 256 : 1e-12, 1e-9);
    double worst = 0.0;
    for (int u = 0; u < lay.nunits; u++) {
        size_t n = lay.units[u].padded_numel;
        double d = rel_diff(f.grads[u], e.grads[u], n, 1e-30);
        worst = fmax(worst, d);
        ZT_CHECK_MSG(d <= tol, "%s %s ckpt %d, %d rows: unit %d gradient differs by %.3g (bound %.3g)", fix,
                     zt_dtype_name(cd), ckpt, rows, u, d, tol);
        /* q/k/v biases (Qwen2) on their own scale: their gradient is the column sums of
         * dqkv after RoPE's backward, which bf16 activations take a path of their own to
         * (llama.c) and which the whole unit's scale would hide */
        for (int l = 0; l < cfg.num_hidden_layers; l++) {
            const zt_param *pb = zt_layout_param(&lay, l, ZT_P_Q_BIAS);
            if (!pb || pb->unit != u)
                continue;
            const size_t nb = (size_t)(cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim;
            const double db = rel_diff(f.grads[u] + pb->offset, e.grads[u] + pb->offset, nb, 1e-30);
            ZT_CHECK_MSG(db <= tol, "%s %s layer %d: the q/k/v bias gradient differs by %.3g (bound %.3g)", fix,
                         zt_dtype_name(cd), l, db, tol);
            worst = fmax(worst, db);
        }
        if (rows == 0 && !act16) /* one chunk: the exact path's calls, the same bits */
            ZT_CHECK_MSG(!memcmp(f.grads[u], e.grads[u], n * 4), "%s unit %d: one chunk is not bit-exact", fix, u);
        free(f.grads[u]), free(e.grads[u]);
    }
    if (rows == 0 && !act16)
        ZT_CHECK(f.loss == e.loss);
    free(f.grads), free(e.grads);
    /* the allocation is the estimate in each mode, and fast mode's lacks the logits */
    ZT_CHECK(e.act_bytes == e.est_bytes && f.act_bytes == f.est_bytes);
    const size_t N = 2 * 16, V = (size_t)cfg.vocab_size, c16 = cd == ZT_BF16 ? 2 : 0;
    const size_t dnT = cfg.vocab_size >= 16 * cfg.hidden_size ? N * (size_t)cfg.hidden_size * 4 : 0;
    /* bf16 activations: 2 N (Dqkv + 2 Dq + 2F) bytes less for each layer held */
    const size_t hd = (size_t)cfg.head_dim, Dq = (size_t)cfg.num_attention_heads * hd;
    const size_t Dqkv = Dq + 2 * (size_t)cfg.num_key_value_heads * hd, F = (size_t)cfg.intermediate_size;
    const size_t held = ckpt ? 1 : (size_t)cfg.num_hidden_layers;
    /* and the fp32 dqkv, which the attention's backward no longer writes, unless a q/k/v
     * bias needs its column sums */
    const size_t a16 = act16 ? held * 2 * N * (Dqkv + 2 * Dq + 2 * F) + (cfg.qkv_bias ? 0 : 4 * N * Dqkv) : 0;
    /* and the fast tables' attention scratch (backend.h: with bf16 operands and grouped
     * queries it also holds the backward's per-head partials) in place of the exact one */
    const int nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads;
    const size_t fs = zt_attention_fast_scratch_bytes(2, 16, nh, nkv, (int)hd, zt_model_operand_dtype(cd), NULL);
    const size_t es = zt_backend_cpu()->attention_scratch_bytes(2, 16, nh, nkv, (int)hd, zt_model_operand_dtype(cd));
    ZT_CHECK_MSG(e.act_bytes + fs - es - f.act_bytes == N * V * (4 + c16) + dnT - sizeof(double) + a16,
                 "%zu - %zu", e.act_bytes, f.act_bytes);
    printf("     %-24s %-4s ckpt %d, %2d rows per chunk: loss %.9f vs %.9f, worst gradient difference %.2g\n", fix,
           zt_dtype_name(cd), ckpt, rows ? rows : 32, f.loss, e.loss, worst);
    zt_layout_free(&lay);
}

static void test_fast_model_pass_against_exact(void)
{
    compare_case("tests/fixtures/gqa_tied", ZT_F32, 0, 0); /* one chunk: bit for bit */
    compare_case("tests/fixtures/gqa_tied", ZT_BF16, 0, 0);
    compare_case("tests/fixtures/gqa_tied", ZT_BF16, 0, 5); /* tied: dW_lm and the embedding's in one buffer */
    compare_case("tests/fixtures/gqa_tied", ZT_F32, 1, 7);  /* checkpointing recomputes layer_forward */
    compare_case("tests/fixtures/untied_odd", ZT_F32, 0, 5);
    compare_case("tests/fixtures/untied_odd", ZT_BF16, 1, 3);
    compare_case("tests/fixtures/qwen2_bias", ZT_BF16, 0, 0); /* q/k/v biases: RoPE undone in fp32 */
    /* head size 32: bf16 operands, so the fast tables' larger attention scratch, which the
     * estimate of a fast run must state (groups of 2: the per-head partials) */
    compare_case("tests/fixtures/gqa_hd32", ZT_BF16, 0, 0);
}

/* Evaluation on a fast model: a forward-only pass still returns the logits (allocated
 * on first use, outside the training table) and exact mode's loss, within bf16 error
 * (bf16 compute: fast mode keeps bf16 activations; 2^-8 for the loss, 2^-6 of the
 * logits' scale, as test_act16.c's bounds for one layer's outputs). */
static void test_fast_model_evaluates(void)
{
    enum { B = 2, T = 16 };
    const char *fix = "tests/fixtures/untied_odd";
    zt_err err = {0};
    zt_llama_config cfg;
    zt_layout lay;
    ZT_CHECK(zt_hf_read_config_dir(fix, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, &err) == ZT_OK);
    double loss[2];
    float *logits[2];
    const size_t nl = (size_t)B * T * cfg.vocab_size;
    int in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
        in[i] = (i * 7) % cfg.vocab_size, tg[i] = (i * 11 + 3) % cfg.vocab_size;
    for (int k = 0; k < 2; k++) {
        const zt_backend *be = k ? zt_backend_emu_fast() : zt_backend_emu();
        zt_frozen_params fr;
        ZT_CHECK(zt_frozen_init(&fr, &lay, ZT_BF16, be, &err) == ZT_OK);
        ZT_CHECK(zt_hf_load_params_to(fix, &lay, frozen_sink, &fr, &err) == ZT_OK);
        zt_param_owner own = zt_frozen_owner(&fr);
        zt_model m;
        ZT_CHECK(zt_model_init(&m, &cfg, &lay, &own, B, T, 0, &err) == ZT_OK);
        size_t before = m.act_bytes;
        ZT_CHECK(k == 0 || zt_model_logits(&m) == NULL);
        ZT_CHECK_MSG(zt_model_forward(&m, in, tg, &loss[k], &err) == ZT_OK, "%s", err.msg);
        ZT_CHECK(m.act_bytes == before + (k ? nl * 4 : 0));
        logits[k] = down(be, zt_model_logits(&m), nl * 4);
        zt_model_free(&m);
        zt_frozen_free(&fr);
    }
    ZT_CHECK_CLOSE(loss[1], loss[0], 1.0 / 256, 1e-9);
    const double d = rel_diff(logits[1], logits[0], nl, 1e-30);
    ZT_CHECK_MSG(d <= 1.0 / 64, "logits differ by %.3g of their scale", d);
    printf("     evaluation, bf16: loss %.9f (fast) vs %.9f (exact), logits within %.2g\n", loss[1], loss[0], d);
    free(logits[0]), free(logits[1]);
    zt_layout_free(&lay);
}

/* The model's lm-head chunk (zt_model_xent_chunk_rows): the 64 MiB budget of fp32
 * logits and bf16 gradients where it holds more than 1,024 rows, else 1,024 rows (so
 * the (V, C) gradient of lm_head is read and written once per 1,024 rows at least),
 * never more than N. */
static void test_lmhead_chunk_rows(void)
{
    zt_llama_config c = {0};
    c.vocab_size = 32000; /* the budget's 349 rows: raised to 1,024 */
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 2048) == 1024);
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 1500) == 1024);
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 700) == 700);
    c.vocab_size = 128256; /* 87 rows in the budget */
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 8192) == 1024);
    c.vocab_size = 4096; /* the budget holds 2,730 rows */
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 8192) == (64 << 20) / (4096 * 6));
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 2048) == 2048);
    ZT_CHECK(zt_model_xent_chunk_rows(&c, 0) == 1);
}

int main(void)
{
    ZT_RUN(test_rmsnorm_residual_is_its_composition);
    ZT_RUN(test_matmul_out_is_its_composition);
    ZT_RUN(test_lmhead_xent_against_the_whole_logits);
    ZT_RUN(test_lmhead_xent_refusals);
    ZT_RUN(test_lmhead_chunk_rows);
    ZT_RUN(test_xent_scale_from_the_device);
    ZT_RUN(test_fast_model_pass_against_exact);
    ZT_RUN(test_fast_model_evaluates);
    ZT_TEST_MAIN_END();
}
