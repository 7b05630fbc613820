/* kernels_micro.c — wall-clock micro-benchmark of the hand-written fp32 kernels.
 *
 * Times, at 1 and 2 OpenMP threads (or the counts given on the command line):
 *   attention forward + backward at B=8 T=256 nh=nkv=8 hd=64 and B=4 T=512 nh=12 nkv=4 hd=64;
 *   swiglu forward + backward at N=2048 F=1408;
 *   cross-entropy forward + backward at N=2048 V=32000 (out of place);
 *   rmsnorm forward + backward at N=2048 C=512.
 * Each case runs a warm-up and then REPS repetitions; the minimum and median (ms) are
 * printed.  Build from the repository root:
 *   gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -fno-math-errno -fopenmp bench/kernels_micro.c \
 *       src/kernels/{attention,attention16,rmsnorm,rope,swiglu,xent}.c \
 *       src/core/dtype.c -lm -o /tmp/kernels_micro
 * Usage: kernels_micro [-f SUBSTRING] [threads ...]   (default threads: 1 2); -f runs only
 * the cases whose name contains SUBSTRING. */
#include "../src/kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float urand(void) { /* uniform in [-1, 1) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) / (double)(1ull << 52) - 1.0);
}

static float *rand_array(size_t n, float scale) {
    float *a = malloc(n * sizeof *a);
    if (!a) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) a[i] = scale * urand();
    return a;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*bench_fn)(void *ctx);

static const char *filter = "";

static void report(const char *name, int threads, bench_fn fn, void *ctx) {
    if (!strstr(name, filter)) return;
    double t[REPS];
    fn(ctx); /* warm-up: page faults, caches, thread pool */
    for (int r = 0; r < REPS; r++) {
        double t0 = now_ms();
        fn(ctx);
        t[r] = now_ms() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    printf("%-44s threads=%d  min %8.2f ms  median %8.2f ms\n", name, threads, t[0], t[REPS / 2]);
    fflush(stdout);
}

/* ---- cases ---------------------------------------------------------------------- */

typedef struct {
    int B, T, nh, nkv, hd;
    float *qkv, *out, *lse, *dout, *dqkv;
    void *pack; /* bf16 K/V scratch of the bf16-operand kernels */
} attn_case;

static void attn_setup(attn_case *c) {
    const size_t W = (size_t)(c->nh + 2 * c->nkv) * c->hd, BT = (size_t)c->B * c->T;
    c->qkv = rand_array(BT * W, 1.0f);
    c->dqkv = rand_array(BT * W, 1.0f);
    c->out = rand_array(BT * c->nh * c->hd, 1.0f);
    c->dout = rand_array(BT * c->nh * c->hd, 1.0f);
    c->lse = rand_array((size_t)c->B * c->nh * c->T, 1.0f);
    c->pack = malloc(zt_attention16_pack_bytes(c->B, c->T, c->nkv, c->hd));
}

static void attn_run(void *vc) {
    attn_case *c = vc;
    zt_attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, 0);
    zt_attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv,
                          c->hd, 0);
}

static void attn_run_fwd(void *vc) {
    attn_case *c = vc;
    zt_attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, 0);
}

static void attn_run_bwd(void *vc) {
    attn_case *c = vc;
    zt_attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv,
                          c->hd, 0);
}

static void attn16_run_fwd(void *vc) {
    attn_case *c = vc;
    zt_attention16_forward(c->out, NULL, c->lse, c->qkv, c->pack, c->B, c->T, c->nh, c->nkv, c->hd, 0);
}

static void attn16_run_bwd(void *vc) {
    attn_case *c = vc;
    zt_attention16_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->pack, c->B, c->T, c->nh,
                            c->nkv, c->hd, 0);
}

typedef struct {
    int N, F;
    float *gu, *h, *dh, *dgu;
} swiglu_case;

static void swiglu_run(void *vc) {
    swiglu_case *c = vc;
    zt_swiglu_forward(c->h, ZT_F32, c->gu, c->N, c->F);
    zt_swiglu_backward(c->dgu, ZT_F32, c->dh, c->gu, c->N, c->F);
}

typedef struct {
    int N, V;
    float *logits, *work;
    int *targets;
} xent_case;

static void xent_run(void *vc) {
    xent_case *c = vc;
    /* Out of place so every run sees the same logits (training runs in place; the
     * arithmetic and the number of passes are the same). */
    volatile double loss =
        zt_xent_forward_backward(c->work, NULL, c->logits, c->targets, c->N, c->V, 1.0f / c->N);
    (void)loss;
}

typedef struct {
    int N, C;
    float *x, *w, *y, *rstd, *dy, *dx, *dw;
} rms_case;

static void rms_run(void *vc) {
    rms_case *c = vc;
    zt_rmsnorm_forward(c->y, ZT_F32, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    zt_rmsnorm_backward(c->dx, NULL, 1.0f, c->dw, 1.0f, c->dy, c->x, c->w, c->rstd, c->N, c->C);
}

int main(int argc, char **argv) {
    int threads[8] = {1, 2}, nthreads = 2;
    int arg = 1;
    if (argc > 2 && strcmp(argv[1], "-f") == 0) filter = argv[2], arg = 3;
    if (argc > arg) {
        nthreads = 0;
        for (int i = arg; i < argc && nthreads < 8; i++) threads[nthreads++] = atoi(argv[i]);
    }

    attn_case a1 = {.B = 8, .T = 256, .nh = 8, .nkv = 8, .hd = 64};
    attn_case a2 = {.B = 4, .T = 512, .nh = 12, .nkv = 4, .hd = 64};
    attn_setup(&a1);
    attn_setup(&a2);
    swiglu_case s = {.N = 2048, .F = 1408};
    s.gu = rand_array((size_t)s.N * 2 * s.F, 4.0f);
    s.h = rand_array((size_t)s.N * s.F, 1.0f);
    s.dh = rand_array((size_t)s.N * s.F, 1.0f);
    s.dgu = rand_array((size_t)s.N * 2 * s.F, 1.0f);
    xent_case x = {.N = 2048, .V = 32000};
    x.logits = rand_array((size_t)x.N * x.V, 8.0f);
    x.work = rand_array((size_t)x.N * x.V, 1.0f);
    x.targets = malloc(sizeof(int) * x.N);
    for (int n = 0; n < x.N; n++) x.targets[n] = (n * 7919) % x.V;
    rms_case r = {.N = 2048, .C = 512};
    r.x = rand_array((size_t)r.N * r.C, 2.0f);
    r.w = rand_array(r.C, 1.0f);
    r.y = rand_array((size_t)r.N * r.C, 1.0f);
    r.rstd = rand_array(r.N, 1.0f);
    r.dy = rand_array((size_t)r.N * r.C, 1.0f);
    r.dx = rand_array((size_t)r.N * r.C, 0.0f);
    r.dw = rand_array(r.C, 0.0f);

    for (int k = 0; k < nthreads; k++) {
        omp_set_num_threads(threads[k]);
        report("attention fwd B=8 T=256 nh=nkv=8 hd=64", threads[k], attn_run_fwd, &a1);
        report("attention bwd B=8 T=256 nh=nkv=8 hd=64", threads[k], attn_run_bwd, &a1);
        report("attention f+b B=8 T=256 nh=nkv=8 hd=64", threads[k], attn_run, &a1);
        report("attention fwd B=4 T=512 nh=12 nkv=4 hd=64", threads[k], attn_run_fwd, &a2);
        report("attention bwd B=4 T=512 nh=12 nkv=4 hd=64", threads[k], attn_run_bwd, &a2);
        report("attention f+b B=4 T=512 nh=12 nkv=4 hd=64", threads[k], attn_run, &a2);
        report("attention16 fwd B=8 T=256 nh=nkv=8 hd=64", threads[k], attn16_run_fwd, &a1);
        report("attention16 bwd B=8 T=256 nh=nkv=8 hd=64", threads[k], attn16_run_bwd, &a1);
        report("attention16 fwd B=4 T=512 nh=12 nkv=4 hd=64", threads[k], attn16_run_fwd, &a2);
        report("attention16 bwd B=4 T=512 nh=12 nkv=4 hd=64", threads[k], attn16_run_bwd, &a2);
        report("swiglu f+b N=2048 F=1408", threads[k], swiglu_run, &s);
        report("xent f+b N=2048 V=32000", threads[k], xent_run, &x);
        report("rmsnorm f+b N=2048 C=512", threads[k], rms_run, &r);
    }
    return 0;
}
