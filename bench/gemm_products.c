/* gemm_products.c — the matrix products of one training step of a bench config, in
 * bf16 compute against fp32 compute, side by side (issue 18 point 3).
 *
 * A step of config a or b makes, per layer, the forward, dx and dW products of the
 * q, k, v, o, gate, up and down projections, and once the three of the LM head
 * (bench/configs: hidden H, intermediate F, kv width 64 * nkv, vocabulary V, and
 * N = B * T tokens per rank).  Each distinct shape runs REPS times; per repetition
 * the two computes alternate, so drift in the machine's speed hits both; the fastest
 * repetition of each counts, weighted by how often the shape occurs in a step.
 *
 * The operands are those of the aligned mode: weights in bf16, activations and
 * their gradients in fp32 (rounded to bf16 by the product).  bf16 compute takes
 * whatever path zt_matmul takes on this CPU; run under DNNL_MAX_CPU_ISA=AVX2 to
 * compare gemm_bf16.c's kernel with oneDNN's AVX2 sgemm on an AVX-512 machine.
 * Build from the repository root (after make):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -fopenmp bench/gemm_products.c build/libztrain.a \
 *       -ldnnl -lyaml -lcjson -lxxhash -lm -o /tmp/gemm_products
 * Usage: [DNNL_MAX_CPU_ISA=AVX2] OMP_NUM_THREADS=T /tmp/gemm_products a|b [-v]
 * (-v prints each shape's GFLOP/s). */
#include "../src/kernels/matmul.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) /* uniform in [-0.5, 0.5) */
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) / (double)(1ull << 53) - 0.5);
}

static void *alloc_or_die(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "gemm_products: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* one product: C (m,n) = beta C + op(A) op(B); A of dtype a_dt, B of b_dt in bf16 compute */
typedef struct prod {
    const char *name;
    int m, n, k, ta, tb, beta;
    zt_dtype a_dt, b_dt;
    int count;
} prod;

/* time one product in fp32 compute (fp32 operands) and bf16 compute (the aligned
 * mode's operands), alternating; the fastest of reps in t[0] and t[1] */
static void time_prod(const prod *p, int reps, double t[2])
{
    size_t na = (size_t)p->m * p->k, nb = (size_t)p->k * p->n;
    size_t nc = (size_t)p->m * p->n;
    float *a = alloc_or_die(na * 4), *b = alloc_or_die(nb * 4), *c = alloc_or_die(nc * 4);
    uint16_t *a16 = alloc_or_die(na * 2), *b16 = alloc_or_die(nb * 2);
    memset(c, 0, nc * 4); /* beta = 1 products add to it */
    for (size_t i = 0; i < na; i++) a[i] = urand(), a16[i] = zt_f32_to_bf16(a[i]);
    for (size_t i = 0; i < nb; i++) b[i] = urand(), b16[i] = zt_f32_to_bf16(b[i]);
    const void *a_bf = p->a_dt == ZT_BF16 ? (const void *)a16 : a, *b_bf = p->b_dt == ZT_BF16 ? (const void *)b16 : b;
    t[0] = t[1] = 1e30;
    for (int r = 0; r < reps; r++)
        for (int which = 0; which < 2; which++) {
            zt_err err;
            double t0 = now_s();
            int rc = which == 0 ? zt_matmul(c, a, ZT_F32, b, ZT_F32, p->m, p->n, p->k, p->ta, p->tb, (float)p->beta, ZT_F32, &err)
                                : zt_matmul(c, a_bf, p->a_dt, b_bf, p->b_dt, p->m, p->n, p->k, p->ta, p->tb, (float)p->beta,
                                            ZT_BF16, &err);
            double dt = now_s() - t0;
            if (rc) {
                fprintf(stderr, "gemm_products: %s: %s\n", p->name, err.msg);
                exit(1);
            }
            if (dt < t[which]) t[which] = dt;
        }
    free(a), free(b), free(c), free(a16), free(b16);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "a") && strcmp(argv[1], "b"))) {
        fprintf(stderr, "usage: gemm_products a|b [-v]\n");
        return 2;
    }
    int verbose = argc > 2 && !strcmp(argv[2], "-v");
    /* bench/configs: a is H 512, F 1408, 8 layers, nkv 8, T 256 x B 8, V 256; b is H 768,
     * F 2048, 12 layers, nkv 4, T 512 x B 4, V 32000; heads of width 64 in both */
    int a = argv[1][0] == 'a';
    int H = a ? 512 : 768, F = a ? 1408 : 2048, L = a ? 8 : 12, KV = 64 * (a ? 8 : 4), V = a ? 256 : 32000, N = 2048;
    const zt_dtype f = ZT_F32, h = ZT_BF16;
    /* per projection (out, in, per layer): forward y = x W^T, dx = dy W, dW += dy^T x */
    struct { const char *name; int out, in, per_layer; } proj[] = {
        {"q,o", H, H, 2}, {"k,v", KV, H, 2}, {"gate,up", F, H, 2}, {"down", H, F, 1}, {"lm_head", V, H, 0}};
    prod ps[15];
    int np = 0;
    for (int i = 0; i < 5; i++) {
        int cnt = proj[i].per_layer ? proj[i].per_layer * L : 1;
        int o = proj[i].out, in = proj[i].in;
        ps[np++] = (prod){proj[i].name, N, o, in, 0, 1, 0, f, h, cnt};  /* forward */
        ps[np++] = (prod){proj[i].name, N, in, o, 0, 0, 0, f, h, cnt};  /* dx */
        ps[np++] = (prod){proj[i].name, o, in, N, 1, 0, 1, f, f, cnt};  /* dW */
    }
    static const char *kind[3] = {"forward", "dx", "dW"};
    double tot[2] = {0, 0}, flops = 0;
    for (int i = 0; i < np; i++) {
        double t[2], fl = 2.0 * ps[i].m * ps[i].n * ps[i].k;
        time_prod(&ps[i], ps[i].count > 1 ? 5 : 2, t);
        tot[0] += ps[i].count * t[0], tot[1] += ps[i].count * t[1], flops += ps[i].count * fl;
        if (verbose)
            printf("  %-8s %-7s %5d x %5d x %5d (x%2d): fp32 %6.1f  bf16 %6.1f GFLOP/s\n", ps[i].name, kind[i % 3],
                   ps[i].m, ps[i].n, ps[i].k, ps[i].count, fl / t[0] * 1e-9, fl / t[1] * 1e-9);
    }
    printf("config %s, %d threads, bf16 products: %s\n", argv[1], omp_get_max_threads(), zt_matmul_bf16_path_name());
    printf("a step's products (%.0f GFLOP): fp32 %.3f s, bf16 %.3f s, bf16/fp32 rate %.3f\n", flops * 1e-9,
           tot[0], tot[1], tot[0] / tot[1]);
    zt_matmul_shutdown();
    return 0;
}
