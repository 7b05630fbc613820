/* gemm_bf16.c — the packed AVX2/FMA GEMM of the non-native bf16 path (see
 * gemm_bf16.h).
 *
 * The blocking is the classic three-level one (Goto's): for a column block of
 * at most NC columns and a range of depth blocks of KC (as many as fit
 * BP_BYTES), B is packed once into micro-panels of NR = 16 columns (kc x 16
 * floats each, contiguous: one micro-panel about fills L1), shared by all threads
 * (B stored (K,N) row by row across all panels, B stored (N,K) panel by panel:
 * either way B is read along its rows);
 * each thread then takes row blocks of about MC rows and, per depth block,
 * packs them into micro-panels of MR = 6 rows (kc x 6, the block fits L2) and
 * runs the 6 x 16 register-blocked micro-kernel over every (row panel, column
 * panel) pair.  The micro-kernel keeps the 6 x 16 tile of C in 12 ymm
 * registers and, per step of k, loads 16 values of B (2 registers) and
 * broadcasts 6 of A: 12 FMAs for 8 loads, which keeps both FMA pipes busy.
 *
 * The packing is where the dtypes meet: a bf16 input is widened (its 16 bits
 * become the top half of an fp32, exact), an fp32 input is rounded to nearest
 * even bf16 and widened back (zt_round_bf16 in 8 lanes, NaN kept NaN).  So the
 * micro-kernel only ever sees bf16 values held in fp32, their products are exact,
 * and C accumulates in fp32: the dtype contract of zt_matmul's bf16 compute.
 * Edge tiles are packed with zeros and computed into a local tile, of which only
 * the valid part reaches C.
 *
 * A's micro-panels are written with plain 8-lane stores, MR = 6 lanes apart and
 * in increasing order, so each store's two extra lanes are overwritten by the
 * next one (or by the next panel, packed after it; each thread's block has 8
 * floats of slack after its end for the last).  Masked stores would say the same
 * more directly, but AMD's CPUs run a masked store as a long microcoded sequence:
 * on an AVX2-only EPYC (Zen 3) they made A's packing cost 10 % of a product with
 * N = 256 (81 against 91 GFLOP/s on one core).
 *
 * beta: the first depth block stores (beta = 0) or adds to C (beta = 1); later
 * depth blocks add.  Threads write disjoint row blocks of C, so no reduction is
 * needed.  Blocks are handed out dynamically: on a shared machine one thread may
 * lose its core for a while, and the others then take its blocks. */
#include "gemm_bf16.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "../core/mem.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ZT_HAVE_GEMM_AVX2 1
#else
#define ZT_HAVE_GEMM_AVX2 0
#endif

/* The Makefile compiles this file with -mavx2 -mfma on x86-64 whatever the build's
 * -march, so the kernel exists in every build; whether this CPU may run it is asked
 * at run time. */
int zt_gemm_bf16_available(void)
{
#if ZT_HAVE_GEMM_AVX2
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

enum {
    MR = 6,     /* rows of a micro-tile: 6 broadcasts of A per k */
    NR = 16,    /* columns of a micro-tile: 2 ymm of B per k */
    KC = 512,   /* depth block: a B micro-panel kc x 16 is 32 KiB, in L1 or L2 */
    MC = 72,    /* row block: the packed A block mc x kc is 144 KiB, in L2 */
    NC = 4096,  /* column block: at most this many columns of B packed at once */
    BROWS = 16, /* rows of B (not transposed) per packing task */
};
/* KC = 512 rather than the 256 that keeps a B micro-panel well inside a 32 KiB L1:
 * each depth block reads and writes the whole tile of C once more, and over config
 * b's products of a training step (bench/, 1 and 2 threads, an AVX2-only Zen 3 EPYC)
 * 512 x 72 took 2-3 % less time than 256 x 144.  The micro-kernel needs 88 bytes
 * of A and B per 12 FMAs, which L2 delivers where L1 does not hold them.
 *
 * The packed B block: as many depth blocks of a column block as fit, in L3.
 * Packing several depth blocks at once means fewer barriers: the threads take
 * whole row blocks through every depth block of the range. */
#define BP_BYTES ((size_t)4 << 20)

/* The packing buffers: one shared B block, one A block per thread.  They only
 * grow, and are accounted as ZT_MEM_OTHER. */
static struct {
    float *bp;
    size_t bp_cap; /* bytes */
    float *ap;     /* nthr blocks of ap_stride floats */
    size_t ap_cap; /* bytes */
} gp;

static int reserve(float **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    float *n = zt_alloc(ZT_MEM_OTHER, need);
    if (!n)
        return -1;
    zt_free(ZT_MEM_OTHER, *p, *cap);
    *p = n;
    *cap = need;
    return 0;
}

void zt_gemm_bf16_shutdown(void)
{
    zt_free(ZT_MEM_OTHER, gp.bp, gp.bp_cap);
    zt_free(ZT_MEM_OTHER, gp.ap, gp.ap_cap);
    memset(&gp, 0, sizeof gp);
}

#if ZT_HAVE_GEMM_AVX2

/* ---- conversion while copying --------------------------------------------- */

/* 8 bf16 values at p, widened to fp32 (exact). */
static inline __m256 widen8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* 8 fp32 values at p, rounded to the nearest even bf16 and held in fp32: the
 * vector form of zt_round_bf16.  u + 0x7fff + (bit 16 of u), then clear the low
 * half; a NaN gets its quiet bit set and keeps its top half (no rounding into
 * the exponent). */
static inline __m256 round8(const float *p)
{
    __m256i u = _mm256_loadu_si256((const __m256i *)p);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    r = _mm256_blendv_epi8(r, q, nan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The bf16 value of src[off] (src of dtype dt) as fp32: one lane of the above. */
static inline float load1(const void *src, zt_dtype dt, size_t off)
{
    return dt == ZT_BF16 ? zt_bf16_to_f32(((const uint16_t *)src)[off]) : zt_round_bf16(((const float *)src)[off]);
}

/* src[off .. off+8) likewise, in 8 lanes. */
static inline __m256 load8(const void *src, zt_dtype dt, size_t off)
{
    return dt == ZT_BF16 ? widen8((const uint16_t *)src + off) : round8((const float *)src + off);
}

/* Transpose the 8 x 8 block r[0..8) in place: r[j] lane i <- r[i] lane j. */
static inline void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);     /* rows i, i+1 interleaved: columns 0,1 | 4,5 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]); /* columns 2,3 | 6,7 */
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);     /* column 0 | 4 of rows i..i+3 */
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee); /* column 1 | 5 */
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
        r[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
    }
}

/* Lanes 0 .. n-1 set: the store mask of a partial vector. */
static inline __m256i lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- packing -------------------------------------------------------------- */

/* One micro-panel of A: rows r0 .. r0+MR of op(A) (rows past M are zeros),
 * depth pc .. pc+kc, into ap[k*MR + i].  A is stored (M,K), or (K,M) when ta. */
static void pack_a_panel(float *restrict ap, const void *A, zt_dtype dt, int M, int K, int ta,
                         int r0, int pc, int kc)
{
    const int rows = M - r0 < MR ? M - r0 : MR;
    int k = 0;
    if (!ta) {
        /* Rows run along k: 8 steps of k of each row, transposed into 8 steps of
         * MR values (two zero rows pad the 8 x 8 block; their lanes spill into the
         * next step's, which the next store overwrites: see the top). */
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < rows ? load8(A, dt, (size_t)(r0 + i) * K + pc + k) : _mm256_setzero_ps();
            transpose8(r);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_ps(ap + (k + j) * MR, r[j]);
        }
        for (; k < kc; k++)
            for (int i = 0; i < MR; i++)
                ap[k * MR + i] = i < rows ? load1(A, dt, (size_t)(r0 + i) * K + pc + k) : 0.0f;
    } else {
        /* The MR values of one k are contiguous: one 8-lane load (while it stays
         * inside A), stored whole (the two lanes past MR spill as above). */
        const size_t end = (size_t)K * M;
        const __m256i keep = lanes(rows);
        for (; k < kc; k++) {
            const size_t off = (size_t)(pc + k) * M + r0;
            if (off + 8 <= end) {
                __m256 v = _mm256_and_ps(load8(A, dt, off), _mm256_castsi256_ps(keep));
                _mm256_storeu_ps(ap + k * MR, v);
            } else {
                for (int i = 0; i < MR; i++)
                    ap[k * MR + i] = i < rows ? load1(A, dt, off + i) : 0.0f;
            }
        }
    }
}

/* Rows k0 .. k1 of one depth block of B stored (K,N) (pc .. pc+kc deep), into all nq
 * micro-panels of the column block from jc: bp[q*kc*NR + k*NR + j] (columns past N are
 * zeros).  Each row of B is read once, front to back, and its 16-column pieces go to
 * their panels.  Packing panel by panel instead reads 64 bytes from each of kc rows N
 * floats apart: on an AVX-512 EPYC (Zen 4, limited to AVX2) the row order made the dW
 * product of the k and v projections of config b (256 x 768 x 2048, whose B block is
 * repacked for only 256 rows of A) 5-13 % faster, and no slower on the other shapes
 * of config b's step (bench/gemm_products.c). */
static void pack_b_rows(float *restrict bp, const void *B, zt_dtype dt, int N, int jc, int nq, int pc, int kc,
                        int k0, int k1)
{
    const int full = (N - jc) / NR < nq ? (N - jc) / NR : nq; /* panels with all NR columns */
    for (int k = k0; k < k1; k++) {
        const size_t off = (size_t)(pc + k) * N + jc;
        for (int q = 0; q < full; q++) {
            float *d = bp + (size_t)q * kc * NR + (size_t)k * NR;
            _mm256_store_ps(d, load8(B, dt, off + (size_t)q * NR));
            _mm256_store_ps(d + 8, load8(B, dt, off + (size_t)q * NR + 8));
        }
        for (int q = full; q < nq; q++) {
            float *d = bp + (size_t)q * kc * NR + (size_t)k * NR;
            const int cols = N - jc - q * NR;
            for (int j = 0; j < NR; j++)
                d[j] = j < cols ? load1(B, dt, off + (size_t)q * NR + j) : 0.0f;
        }
    }
}

/* One micro-panel of B stored (N,K): columns c0 .. c0+NR of op(B) (columns past N
 * are zeros), depth pc .. pc+kc, into bp[k*NR + j].  Columns of op(B) run along k:
 * 8 columns x 8 steps of k at a time, transposed. */
static void pack_bt_panel(float *restrict bp, const void *B, zt_dtype dt, int N, int K, int c0, int pc, int kc)
{
    const int cols = N - c0 < NR ? N - c0 : NR;
    int k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int h = 0; h < NR; h += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = h + j < cols ? load8(B, dt, (size_t)(c0 + h + j) * K + pc + k) : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8; i++)
                _mm256_store_ps(bp + (k + i) * NR + h, r[i]);
        }
    for (; k < kc; k++)
        for (int j = 0; j < NR; j++)
            bp[k * NR + j] = j < cols ? load1(B, dt, (size_t)(c0 + j) * K + pc + k) : 0.0f;
}

/* ---- the micro-kernel ------------------------------------------------------ */

/* c (6 x 16, row stride ldc) = (acc ? c : 0) + ap (kc x 6) ^T . bp (kc x 16). */
static void micro_6x16(int kc, const float *restrict ap, const float *restrict bp, float *restrict c,
                       size_t ldc, int acc)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    /* C's tile is read (or written) only after the loop: start fetching it now,
     * so that its cache misses overlap the FMAs instead of following them. */
    for (int i = 0; i < MR; i++) {
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + NR - 1), _MM_HINT_T0);
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8), a;
        a = _mm256_broadcast_ss(ap + 0);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
        ap += MR;
        bp += NR;
    }
#define ZT_STORE_ROW(i, lo, hi)                                                         \
    do {                                                                                \
        float *r = c + (size_t)(i) * ldc;                                               \
        if (acc) {                                                                      \
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(r));                                 \
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(r + 8));                             \
        }                                                                               \
        _mm256_storeu_ps(r, lo);                                                        \
        _mm256_storeu_ps(r + 8, hi);                                                    \
    } while (0)
    ZT_STORE_ROW(0, c00, c01);
    ZT_STORE_ROW(1, c10, c11);
    ZT_STORE_ROW(2, c20, c21);
    ZT_STORE_ROW(3, c30, c31);
    ZT_STORE_ROW(4, c40, c41);
    ZT_STORE_ROW(5, c50, c51);
#undef ZT_STORE_ROW
}

/* The tile at C (rows x cols valid, row stride ldc), through a local full tile
 * when it is an edge tile. */
static void tile(int kc, const float *ap, const float *bp, float *C, size_t ldc, int rows, int cols,
                 int acc)
{
    if (rows == MR && cols == NR) {
        micro_6x16(kc, ap, bp, C, ldc, acc);
        return;
    }
    float t[MR * NR] __attribute__((aligned(32)));
    micro_6x16(kc, ap, bp, t, NR, 0);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            C[(size_t)i * ldc + j] = (acc ? C[(size_t)i * ldc + j] : 0.0f) + t[i * NR + j];
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

int zt_gemm_bf16(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
                 int K, int trans_a, int trans_b, float beta, zt_err *err)
{
    const int nthr = omp_get_max_threads();
    /* Depth blocks of equal size (<= KC), so no block is a sliver. */
    const int nkb = ceil_div(K, KC), kcb = ceil_div(K, nkb);
    /* Row blocks: about MC rows, their count a multiple of the thread count;
     * rounded up to whole micro-panels. */
    int nmb = ceil_div(M, MC);
    nmb = ceil_div(nmb, nthr) * nthr;
    const int mcb = ceil_div(ceil_div(M, nmb), MR) * MR;
    nmb = ceil_div(M, mcb);
    /* Column blocks of at most NC columns; B is packed for as many depth blocks
     * at once as fit BP_BYTES (all of K for most of config a's shapes), so that
     * the threads meet at a barrier only twice per such depth range. */
    const int ncb = ceil_div(N, NR) * NR < NC ? ceil_div(N, NR) * NR : NC;
    int per = (int)(BP_BYTES / ((size_t)kcb * ncb * sizeof(float)));
    per = per < 1 ? 1 : per > nkb ? nkb : per;
    const int kdb = per * kcb; /* depth range packed at once */
    const int nbr = ceil_div(kcb, BROWS);

    size_t bp_need = (size_t)kdb * ncb * sizeof(float);
    size_t ap_stride = (size_t)kcb * mcb + 8; /* floats per thread, with the stores' slack */
    if (reserve(&gp.bp, &gp.bp_cap, bp_need) ||
        reserve(&gp.ap, &gp.ap_cap, ap_stride * nthr * sizeof(float)))
        return zt_fail(err, ZT_EFAIL, "matmul M=%d N=%d K=%d: out of memory for the bf16 packing buffers",
                       M, N, K);
    float *bpall = gp.bp, *apall = gp.ap;
    const size_t ldc = (size_t)N;

#pragma omp parallel num_threads(nthr)
    {
        float *ap = apall + ap_stride * omp_get_thread_num();
        for (int jc = 0; jc < N; jc += ncb) {
            const int nc = N - jc < ncb ? N - jc : ncb, nq = ceil_div(nc, NR);
            for (int pd = 0; pd < K; pd += kdb) {
                const int kd = K - pd < kdb ? K - pd : kdb, nb = ceil_div(kd, kcb);
                /* B's block: depth block b (from pd + b*kcb) has its panels from
                 * b*kcb*nq*NR floats on, panel q at q*kc*NR more. */
                if (trans_b) {
#pragma omp for schedule(dynamic) collapse(2)
                    for (int b = 0; b < nb; b++)
                        for (int q = 0; q < nq; q++) {
                            const int pc = pd + b * kcb, kc = K - pc < kcb ? K - pc : kcb;
                            pack_bt_panel(bpall + (size_t)b * kcb * nq * NR + (size_t)q * kc * NR, B, b_dt, N,
                                          K, jc + q * NR, pc, kc);
                        }
                } else {
                    /* in pieces of BROWS rows of B, so that the threads share the packing */
#pragma omp for schedule(dynamic) collapse(2)
                    for (int b = 0; b < nb; b++)
                        for (int r = 0; r < nbr; r++) {
                            const int pc = pd + b * kcb, kc = K - pc < kcb ? K - pc : kcb;
                            if (r * BROWS < kc)
                                pack_b_rows(bpall + (size_t)b * kcb * nq * NR, B, b_dt, N, jc, nq, pc, kc,
                                            r * BROWS, r * BROWS + BROWS < kc ? r * BROWS + BROWS : kc);
                        }
                }
                /* (the loop's barrier: B's block is complete before anyone uses it) */
#pragma omp for schedule(dynamic)
                for (int mb = 0; mb < nmb; mb++) {
                    const int ic = mb * mcb, mc = M - ic < mcb ? M - ic : mcb, np = ceil_div(mc, MR);
                    for (int b = 0; b < nb; b++) {
                        const int pc = pd + b * kcb, kc = K - pc < kcb ? K - pc : kcb;
                        const int acc = pc > 0 || beta != 0.0f;
                        const float *bp = bpall + (size_t)b * kcb * nq * NR;
                        for (int p = 0; p < np; p++)
                            pack_a_panel(ap + (size_t)p * kc * MR, A, a_dt, M, K, trans_a, ic + p * MR, pc, kc);
                        for (int q = 0; q < nq; q++) {
                            const int c0 = jc + q * NR, cols = N - c0 < NR ? N - c0 : NR;
                            for (int p = 0; p < np; p++) {
                                const int r0 = ic + p * MR, rows = M - r0 < MR ? M - r0 : MR;
                                tile(kc, ap + (size_t)p * kc * MR, bp + (size_t)q * kc * NR,
                                     C + (size_t)r0 * ldc + c0, ldc, rows, cols, acc);
                            }
                        }
                    }
                }
                /* (and its barrier: nobody repacks B while another still reads it) */
            }
        }
    }
    return ZT_OK;
}

#else /* no AVX2/FMA in this build: zt_matmul keeps its oneDNN path */

int zt_gemm_bf16(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
                 int K, int trans_a, int trans_b, float beta, zt_err *err)
{
    (void)C, (void)A, (void)a_dt, (void)B, (void)b_dt, (void)trans_a, (void)trans_b, (void)beta;
    return zt_fail(err, ZT_EFAIL, "matmul M=%d N=%d K=%d: this build has no AVX2/FMA bf16 kernel", M, N, K);
}

#endif
