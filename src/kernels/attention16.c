/* attention16.c — causal grouped-query attention whose tile products take bf16 operands.
 *
 * The same algorithm as attention.c (flash-style tiles of ATTN16_BLOCK queries by
 * ATTN16_BLOCK keys, online softmax forward, recomputed probabilities backward, the
 * same fp32 softmax arithmetic, the same causal and sliding-window masks and the same
 * task split), for bf16 compute: every
 * operand of a tile product (q, k, v, the probabilities p, dout and the score
 * gradients ds) is rounded to bf16, products accumulate in fp32, as autocast's bmm
 * does.  The softmax statistics, lse, D = dout . out and all outputs stay fp32.
 *
 * Tile products run on pairs: AVX512-BF16's vdpbf16ps adds a[2q] b[2q] + a[2q+1] b[2q+1]
 * into each fp32 lane, so both operands hold bf16 values two by two along the summed
 * index, one 32-bit word per pair (low half: the even element).  pmm() below is
 *   C(i, j) += sum_q A2(i, q) . B2(q, j),   A2(i, q) = A[i*ars + q*acs],  B2(q, j) = B[q*ldb + j]
 * with j the lane index.  The operands are laid out for it:
 *  - K and V rows (bf16, natural layout: pairs run along the head dimension) and K and
 *    V pairs of keys (the word for key pair q and dimension d holds keys 2q, 2q+1) are
 *    packed once per call for the whole batch (zt_attention16_pack_bytes);
 *  - per query block, Q^T and dout^T (pairs along d, one query per lane) and Q, dout
 *    pairs of queries are built from the fp32 rows;
 *  - per tile, P and dS are packed from the fp32 tiles: pairs of keys per query lane, or
 *    pairs of queries along a key's row.
 * Where oneDNN's ISA has AMX, products whose sizes are whole tiles (16 rows, 16 columns, 16
 * pairs) run on AMX instead (amx.h), from the same pair words; the A operands of P V and
 * dS K are then transposed to AMX's rows of contiguous pairs (key_pairs_product).
 * Without AVX512-BF16, pmm() computes the same sums from the same bf16 values with fp32
 * fmas (each product of two bf16 values is exact in fp32), so results differ only in
 * the order of the fp32 additions.
 *
 * Requirements: hd a multiple of 32 and at most ATTN16_MAX_HD (Llama's 64 and 128);
 * zt_attention16_supported() says so and callers use attention.c otherwise. */
#include "kernels.h"
#include "amx.h"
#include "attention_tile.h"
#include "reductions.h"
#include "transpose.h"
#include "vmath.h"

#include <assert.h>
#include <math.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#define ATTN16_BLOCK ZT_ATTN_BLOCK
#define ATTN16_MAX_HD 128
#define ATTN16_TILE (ATTN16_BLOCK * ATTN16_BLOCK)
#define PAIRS_BLOCK (ATTN16_BLOCK / 2)
#define PAIRS_HD (ATTN16_MAX_HD / 2)

int zt_attention16_supported(int hd) { return hd > 0 && hd % 32 == 0 && hd <= ATTN16_MAX_HD; }

/* two bf16 values in one word: lo the even element, hi the odd one */
static inline uint32_t pair16(float lo, float hi)
{
    return (uint32_t)zt_f32_to_bf16(lo) | (uint32_t)zt_f32_to_bf16(hi) << 16;
}

/* ---- the pair product ------------------------------------------------------------ */

#define P_ROWS 8
#define P_LANES 32

/* rows [i, i+R) of columns [j0, j0+32), pairs [q0, q1); beta 0: from zero, not C */
static inline __attribute__((always_inline)) void ptile(float *restrict C, size_t ldc,
                                                        const uint32_t *restrict A, size_t ars,
                                                        size_t acs, const uint32_t *restrict B,
                                                        size_t ldb, int q0, int q1, const int R,
                                                        int beta)
{
#ifdef __AVX512BF16__
    __m512 acc[P_ROWS][2];
    for (int r = 0; r < R; r++) {
        acc[r][0] = beta ? _mm512_loadu_ps(C + (size_t)r * ldc) : _mm512_setzero_ps();
        acc[r][1] = beta ? _mm512_loadu_ps(C + (size_t)r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int q = q0; q < q1; q++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + (size_t)q * ldb);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + (size_t)q * ldb + 16);
        for (int r = 0; r < R; r++) {
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)A[(size_t)r * ars + (size_t)q * acs]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(C + (size_t)r * ldc, acc[r][0]);
        _mm512_storeu_ps(C + (size_t)r * ldc + 16, acc[r][1]);
    }
#else
    float acc[P_ROWS][P_LANES];
    for (int r = 0; r < R; r++)
#pragma omp simd
        for (int j = 0; j < P_LANES; j++) acc[r][j] = beta ? C[(size_t)r * ldc + j] : 0.0f;
    for (int q = q0; q < q1; q++) {
        const uint32_t *restrict b = B + (size_t)q * ldb;
        for (int r = 0; r < R; r++) {
            const uint32_t a = A[(size_t)r * ars + (size_t)q * acs];
            float alo, ahi;
            uint32_t ulo = a << 16, uhi = a & 0xffff0000u;
            memcpy(&alo, &ulo, 4);
            memcpy(&ahi, &uhi, 4);
#pragma omp simd
            for (int j = 0; j < P_LANES; j++) {
                uint32_t blo_u = b[j] << 16, bhi_u = b[j] & 0xffff0000u;
                float blo, bhi;
                memcpy(&blo, &blo_u, 4);
                memcpy(&bhi, &bhi_u, 4);
                acc[r][j] = zt_fmaf(ahi, bhi, zt_fmaf(alo, blo, acc[r][j]));
            }
        }
    }
    for (int r = 0; r < R; r++)
#pragma omp simd
        for (int j = 0; j < P_LANES; j++) C[(size_t)r * ldc + j] = acc[r][j];
#endif
}

/* C(i, j) = beta C(i, j) + sum_q A2(i, q) B2(q, j) for i < M, j < N (N a multiple of 32),
 * q < Q, beta 0 or 1 (0: C need not be zeroed first); shape says which terms are known
 * zeros (skipped a pair at a time, so some zero terms are still added, exactly), and with
 * ZT_TILE_J_GE_I the entries it skips (rows below the diagonal's blocks) keep their values
 * whatever beta, as in zt_amx_pmm. */
static void pmm(float *restrict C, size_t ldc, const uint32_t *restrict A, size_t ars, size_t acs,
                const uint32_t *restrict B, size_t ldb, int M, int N, int Q, zt_tile_shape shape,
                int beta, int amx)
{
    if (amx && acs == 1 && zt_amx_fits(M, N, Q)) {
        zt_amx_pmm(C, ldc, A, ars, B, ldb, M, N, Q, shape, beta);
        return;
    }
    assert(N % P_LANES == 0);
    for (int j0 = 0; j0 < N; j0 += P_LANES) {
        int m = shape == ZT_TILE_J_GE_I && M > j0 + P_LANES ? j0 + P_LANES : M;
        int i = 0;
        for (; i < m; i += P_ROWS) {
            const int R = m - i < P_ROWS ? m - i : P_ROWS;
            int q0 = shape == ZT_TILE_K_GE_I ? i / 2 : 0;
            int q1 = shape == ZT_TILE_K_LE_I ? (i + R + 1) / 2 : Q;
            q1 = q1 < Q ? q1 : Q;
            float *c = C + (size_t)i * ldc + j0;
            const uint32_t *a = A + (size_t)i * ars;
            const uint32_t *b = B + j0;
            if (R == P_ROWS)
                ptile(c, ldc, a, ars, acs, b, ldb, q0, q1, P_ROWS, beta);
            else
                for (int r = 0; r < R; r++) /* ragged rows one at a time */
                    ptile(c + (size_t)r * ldc, ldc, a + (size_t)r * ars, ars, acs, b, ldb,
                          shape == ZT_TILE_K_GE_I ? (i + r) / 2 : q0,
                          shape == ZT_TILE_K_LE_I ? ((i + r + 2) / 2 < Q ? (i + r + 2) / 2 : Q) : q1, 1,
                          beta);
        }
    }
}

/* ---- packing ---------------------------------------------------------------------- */

size_t zt_attention16_pack_bytes(int B, int T, int nkv, int hd)
{
    size_t rows = (size_t)B * nkv * T, pairs = (size_t)B * nkv * ((T + 1) / 2);
    return 2 * (rows * hd * sizeof(uint16_t) + pairs * hd * sizeof(uint32_t));
}

typedef struct pack16 {
    uint16_t *k, *v;      /* (B, nkv, T, hd) bf16 rows */
    uint32_t *kp, *vp;    /* (B, nkv, ceil(T/2), hd) pairs of keys */
} pack16;

static pack16 pack_views(void *pack, int B, int T, int nkv, int hd)
{
    size_t rows = (size_t)B * nkv * T * hd, pairs = (size_t)B * nkv * ((T + 1) / 2) * hd;
    pack16 p;
    p.kp = pack;
    p.vp = p.kp + pairs;
    p.k = (uint16_t *)(p.vp + pairs);
    p.v = p.k + rows;
    return p;
}

/* Round K and V of qkv (B, T, W) into the pack, as rows and as pairs of keys. */
static pack16 pack_kv(void *pack, const float *qkv, int B, int T, int nh, int nkv, int hd)
{
    const size_t W = (size_t)(nh + 2 * nkv) * hd;
    const int T2 = (T + 1) / 2;
    pack16 p = pack_views(pack, B, T, nkv, hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < nkv; kh++) {
            const float *kc = qkv + (size_t)b * T * W + (size_t)(nh + kh) * hd;
            const float *vc = kc + (size_t)nkv * hd;
            size_t hb = (size_t)b * nkv + kh;
            uint16_t *k = p.k + hb * T * hd, *v = p.v + hb * T * hd;
            uint32_t *kp = p.kp + hb * T2 * hd, *vp = p.vp + hb * T2 * hd;
            for (int t = 0; t < T; t++)
#pragma omp simd
                for (int d = 0; d < hd; d++) {
                    k[(size_t)t * hd + d] = zt_f32_to_bf16(kc[(size_t)t * W + d]);
                    v[(size_t)t * hd + d] = zt_f32_to_bf16(vc[(size_t)t * W + d]);
                }
            for (int q = 0; q < T2; q++) {
                const float *k0 = kc + (size_t)(2 * q) * W, *v0 = vc + (size_t)(2 * q) * W;
                const int odd = 2 * q + 1 < T;
#pragma omp simd
                for (int d = 0; d < hd; d++) {
                    kp[(size_t)q * hd + d] = pair16(k0[d], odd ? k0[W + d] : 0.0f);
                    vp[(size_t)q * hd + d] = pair16(v0[d], odd ? v0[W + d] : 0.0f);
                }
            }
        }
    return p;
}

/* Per-thread scratch of the kernels (the kernels do not allocate). */
static _Thread_local struct {
    uint32_t qt2[PAIRS_HD * ATTN16_BLOCK];   /* Q^T pairs along d */
    uint32_t dot2[PAIRS_HD * ATTN16_BLOCK];  /* dO^T pairs along d */
    uint32_t qp[PAIRS_BLOCK * ATTN16_MAX_HD];  /* Q pairs of queries */
    uint32_t dop[PAIRS_BLOCK * ATTN16_MAX_HD]; /* dO pairs of queries */
    uint32_t a2[ATTN16_TILE / 2];            /* a packed P or dS tile */
    uint32_t a2t[ATTN16_TILE / 2];           /* the same as AMX's A rows (key_pairs_product) */
    uint32_t rows[ATTN16_BLOCK * PAIRS_HD];  /* a block's rows in bf16, for pairs_along_d */
    float o[ATTN16_BLOCK * ATTN16_MAX_HD];   /* unnormalised O (block, hd) */
    float st[ATTN16_TILE], dst[ATTN16_TILE]; /* S^T / P^T and dP^T / dS^T (key, query) */
} s16;

/* dst[p*ATTN16_BLOCK + r] = pair(src[r][2p], src[r][2p+1]) for r < nr, p < hd/2: rows of a
 * block as pairs along d, one row per lane; lanes nr.. are zero.  A row of bf16 values
 * read as 32-bit words is already its pairs along d, so this is a conversion of the
 * rows followed by a transpose of 32-bit words. */
static void pairs_along_d(uint32_t *restrict dst, const float *restrict src, size_t lds, int nr,
                          int hd)
{
    uint32_t *rows = s16.rows; /* (row, pair) */
    const int np = hd / 2;
    for (int r = 0; r < ATTN16_BLOCK; r++) {
        uint16_t *restrict d16 = (uint16_t *)(rows + (size_t)r * np);
        const float *restrict sr = src + (size_t)r * lds;
        if (r < nr) {
#pragma omp simd
            for (int d = 0; d < hd; d++) d16[d] = zt_f32_to_bf16(sr[d]);
        } else {
            memset(d16, 0, sizeof(uint16_t) * (size_t)hd);
        }
    }
#ifdef __AVX512F__
    if (np % 16 == 0) {
        for (int r0 = 0; r0 < ATTN16_BLOCK; r0 += 16)
            for (int p0 = 0; p0 < np; p0 += 16)
                zt_transpose16x16_u32(dst + (size_t)p0 * ATTN16_BLOCK + r0, ATTN16_BLOCK,
                                      rows + (size_t)r0 * np + p0, (size_t)np);
        return;
    }
#endif
    for (int r = 0; r < ATTN16_BLOCK; r++)
        for (int p = 0; p < np; p++) dst[(size_t)p * ATTN16_BLOCK + r] = rows[(size_t)r * np + p];
}

/* dst[q*hd + d] = pair(src[2q][d], src[2q+1][d]) for 2q < nr: pairs of rows. */
static void pairs_of_rows(uint32_t *restrict dst, const float *restrict src, size_t lds, int nr,
                          int hd)
{
    for (int q = 0; q < (nr + 1) / 2; q++) {
        const float *r0 = src + (size_t)(2 * q) * lds;
        const int odd = 2 * q + 1 < nr;
#pragma omp simd
        for (int d = 0; d < hd; d++) dst[(size_t)q * hd + d] = pair16(r0[d], odd ? r0[lds + d] : 0.0f);
    }
}

/* From a (key, query) tile t: dst[q*ATTN16_BLOCK + i] = pair(t[2q][i], t[2q+1][i]), pairs of
 * keys with one query per lane (the A operand of P V and dS K). */
static void tile_key_pairs(uint32_t *restrict dst, const float *restrict t, int nk)
{
    for (int q = 0; q < (nk + 1) / 2; q++) {
        const float *r0 = t + (size_t)(2 * q) * ATTN16_BLOCK;
        const int odd = 2 * q + 1 < nk;
#pragma omp simd
        for (int i = 0; i < ATTN16_BLOCK; i++)
            dst[(size_t)q * ATTN16_BLOCK + i] = pair16(r0[i], odd ? r0[ATTN16_BLOCK + i] : 0.0f);
    }
}

/* From a (key, query) tile t: dst[j*PAIRS_BLOCK + r] = pair(t[j][2r], t[j][2r+1]) for j < nk,
 * pairs of queries along each key's row (the A operand of P^T dO and dS^T Q): the row
 * converted to bf16, queries nq.. zero. */
static void tile_query_pairs(uint32_t *restrict dst, const float *restrict t, int nk, int nq)
{
    for (int j = 0; j < nk; j++) {
        const float *restrict row = t + (size_t)j * ATTN16_BLOCK;
        uint16_t *restrict d16 = (uint16_t *)(dst + (size_t)j * PAIRS_BLOCK);
#pragma omp simd
        for (int i = 0; i < ATTN16_BLOCK; i++) d16[i] = i < nq ? zt_f32_to_bf16(row[i]) : 0;
    }
}

/* C(i, d) += sum over keys k of t(k, i) B(k, d) for i < nq, d < hd: the products O += P V and
 * dQ += dS K, whose A operand is the (key, query) tile t as pairs of keys per query.  The
 * AVX-512 path broadcasts one word of (pair, query) at a time (tile_key_pairs); AMX loads
 * A as rows of contiguous pairs, so the same words are transposed to (query, pair). */
static void key_pairs_product(float *restrict C, size_t ldc, const float *restrict t, int nk, int nq,
                              const uint32_t *restrict B, size_t ldb, int hd, zt_tile_shape shape,
                              int amx)
{
    const int nkp = (nk + 1) / 2;
    tile_key_pairs(s16.a2, t, nk);
    if (amx && zt_amx_fits(nq, hd, nkp)) {
#ifdef __AVX512F__
        for (int q0 = 0; q0 < nkp; q0 += 16)
            for (int i0 = 0; i0 < nq; i0 += 16)
                zt_transpose16x16_u32(s16.a2t + (size_t)i0 * PAIRS_BLOCK + q0, PAIRS_BLOCK,
                                      s16.a2 + (size_t)q0 * ATTN16_BLOCK + i0, ATTN16_BLOCK);
#else
        for (int i = 0; i < nq; i++)
            for (int q = 0; q < nkp; q++)
                s16.a2t[(size_t)i * PAIRS_BLOCK + q] = s16.a2[(size_t)q * ATTN16_BLOCK + i];
#endif
        zt_amx_pmm(C, ldc, s16.a2t, PAIRS_BLOCK, B, ldb, nq, hd, nkp, shape, 1);
        return;
    }
    pmm(C, ldc, s16.a2, 1, ATTN16_BLOCK, B, ldb, nq, hd, nkp, shape, 1, 0);
}

/* ---- forward ---------------------------------------------------------------------- */

void zt_attention16_forward(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                            void *pack, int B, int T, int nh, int nkv, int hd, int window)
{
    zt_attention16_forward_pos(out, out_bf16, lse, qkv, pack, NULL, B, T, nh, nkv, hd, window);
}

void zt_attention16_forward_pos(float *out, uint16_t *out_bf16, float *lse, const float *qkv,
                                void *pack, const int *pos, int B, int T, int nh, int nkv, int hd, int window)
{
    assert(zt_attention16_supported(hd) && nkv > 0 && nh % nkv == 0 && window >= 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd, OW = (size_t)nh * hd;
    const int group = nh / nkv, T2 = (T + 1) / 2;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* torch's hd**-0.5 */
    const int nblk = (T + ATTN16_BLOCK - 1) / ATTN16_BLOCK;
    const long ntask = (long)B * nh * nblk;
    const pack16 pk = pack_kv(pack, qkv, B, T, nh, nkv, hd);
    const int amx = zt_amx_usable();

#pragma omp parallel for schedule(dynamic, 1)
    for (long task = 0; task < ntask; task++) {
        if (amx)
            zt_amx_begin();
        const int qb = nblk - 1 - (int)(task % nblk);
        const int h = (int)((task / nblk) % nh);
        const int b = (int)(task / ((long)nblk * nh));
        const int i0 = qb * ATTN16_BLOCK;
        const int nq = T - i0 < ATTN16_BLOCK ? T - i0 : ATTN16_BLOCK;
        const size_t hb = (size_t)b * nkv + h / group;
        const uint32_t *krows = (const uint32_t *)(pk.k + hb * T * hd); /* pairs along d */
        const uint32_t *vpairs = pk.vp + hb * T2 * hd;
        float *o = s16.o, *st = s16.st;
        float m[ATTN16_BLOCK], l[ATTN16_BLOCK];
        int qs[ATTN16_BLOCK], lo[ATTN16_BLOCK];
        const int kb0 = zt_attn_first_block_pos(qs, pos ? pos + (size_t)b * T : NULL, i0, nq, window);
        pairs_along_d(s16.qt2, qkv + ((size_t)b * T + i0) * W + (size_t)h * hd, W, nq, hd);
        memset(o, 0, sizeof(float) * (size_t)nq * hd);
        for (int ii = 0; ii < nq; ii++) m[ii] = -INFINITY, l[ii] = 0.0f;

        for (int kb = kb0; kb <= qb; kb++) {
            const int j0 = kb * ATTN16_BLOCK;
            const int nk = kb < qb ? ATTN16_BLOCK : nq; /* the diagonal block is square */
            const int diag = kb == qb;
            /* the scores S^T = K Q^T, from zero: only the diagonal tile, whose product skips
             * the entries below its blocks, is cleared first */
            if (diag)
                memset(st, 0, sizeof(float) * ATTN16_TILE);
            pmm(st, ATTN16_BLOCK, krows + (size_t)j0 * (hd / 2), hd / 2, 1, s16.qt2, ATTN16_BLOCK,
                nk, ATTN16_BLOCK, hd / 2, diag ? ZT_TILE_J_GE_I : ZT_TILE_DENSE, 0, amx);
            zt_attn_key_lo(lo, qs, nq, j0);
            zt_attn_softmax_tile(st, o, hd, nq, nk, i0 - j0, window, lo, scale, m, l);
            /* O += P V_blk: P as pairs of keys per query, V as pairs of keys per d */
            key_pairs_product(o, hd, st, nk, nq, vpairs + (size_t)(j0 / 2) * hd, hd, hd,
                              diag ? ZT_TILE_K_LE_I : ZT_TILE_DENSE, amx);
        }

        const size_t orow0 = ((size_t)b * T + i0) * OW + (size_t)h * hd;
        zt_attn_write_rows(out + orow0, out_bf16 ? out_bf16 + orow0 : NULL, OW,
                           lse + ((size_t)b * nh + h) * T + i0, o, hd, nq, m, l);
        if (amx)
            zt_amx_end();
    }
}

/* ---- backward --------------------------------------------------------------------- */

void zt_attention16_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, void *pack, int B, int T, int nh, int nkv, int hd,
                             int window)
{
    zt_attention16_backward_pos(dqkv, dout, qkv, out, lse, pack, NULL, B, T, nh, nkv, hd, window);
}

void zt_attention16_backward_pos(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, void *pack, const int *pos, int B, int T, int nh, int nkv,
                                 int hd, int window)
{
    assert(zt_attention16_supported(hd) && nkv > 0 && nh % nkv == 0 && window >= 0);
    const size_t W = (size_t)(nh + 2 * nkv) * hd, OW = (size_t)nh * hd;
    const int group = nh / nkv, T2 = (T + 1) / 2;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int nblk = (T + ATTN16_BLOCK - 1) / ATTN16_BLOCK;
    const pack16 pk = pack_kv(pack, qkv, B, T, nh, nkv, hd);
    const int amx = zt_amx_usable();

#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int kh = 0; kh < nkv; kh++) {
            if (amx)
                zt_amx_begin();
            const float *base = qkv + (size_t)b * T * W;
            float *dbase = dqkv + (size_t)b * T * W;
            const size_t hb = (size_t)b * nkv + kh;
            const uint32_t *krows = (const uint32_t *)(pk.k + hb * T * hd);
            const uint32_t *vrows = (const uint32_t *)(pk.v + hb * T * hd);
            const uint32_t *kpairs = pk.kp + hb * T2 * hd;
            float *dkcol = dbase + (size_t)(nh + kh) * hd;
            float *dvcol = dbase + (size_t)(nh + nkv + kh) * hd;
            float *pt = s16.st, *dst = s16.dst;

            zt_attn_clear_grads(dbase, W, T, nh, nkv, kh, hd);
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float *lrow = lse + ((size_t)b * nh + h) * T;
                for (int qb = 0; qb < nblk; qb++) {
                    const int i0 = qb * ATTN16_BLOCK;
                    const int nq = T - i0 < ATTN16_BLOCK ? T - i0 : ATTN16_BLOCK;
                    const float *q = base + (size_t)i0 * W + (size_t)h * hd;
                    const float *go = dout + ((size_t)b * T + i0) * OW + (size_t)h * hd;
                    const float *ob = out + ((size_t)b * T + i0) * OW + (size_t)h * hd;
                    float *dq = dbase + (size_t)i0 * W + (size_t)h * hd;

                    /* D_i = dout_i . out_i in fp32 */
                    float D[ATTN16_BLOCK], L[ATTN16_BLOCK];
                    int qs[ATTN16_BLOCK], lo[ATTN16_BLOCK];
                    const int kb0 = zt_attn_first_block_pos(qs, pos ? pos + (size_t)b * T : NULL, i0, nq, window);
                    zt_dot_rows(D, go, OW, ob, OW, nq, hd);
                    for (int ii = 0; ii < nq; ii++) L[ii] = lrow[i0 + ii];
                    pairs_along_d(s16.qt2, q, W, nq, hd);
                    pairs_along_d(s16.dot2, go, OW, nq, hd);
                    pairs_of_rows(s16.qp, q, W, nq, hd);
                    pairs_of_rows(s16.dop, go, OW, nq, hd);

                    for (int kb = kb0; kb <= qb; kb++) {
                        const int j0 = kb * ATTN16_BLOCK;
                        const int nk = kb < qb ? ATTN16_BLOCK : nq;
                        const int diag = kb == qb;
                        if (diag) { /* as in the forward: the skipped entries must be 0 */
                            memset(pt, 0, sizeof(float) * ATTN16_TILE);
                            memset(dst, 0, sizeof(float) * ATTN16_TILE);
                        }
                        pmm(pt, ATTN16_BLOCK, krows + (size_t)j0 * (hd / 2), hd / 2, 1, s16.qt2,
                            ATTN16_BLOCK, nk, ATTN16_BLOCK, hd / 2, diag ? ZT_TILE_J_GE_I : ZT_TILE_DENSE,
                            0, amx);
                        pmm(dst, ATTN16_BLOCK, vrows + (size_t)j0 * (hd / 2), hd / 2, 1, s16.dot2,
                            ATTN16_BLOCK, nk, ATTN16_BLOCK, hd / 2, diag ? ZT_TILE_J_GE_I : ZT_TILE_DENSE,
                            0, amx);
                        zt_attn_key_lo(lo, qs, nq, j0);
                        zt_attn_grad_tile(pt, dst, nq, nk, i0 - j0, window, lo, scale, L, D);
                        const int nqp = (nq + 1) / 2;
                        /* dV += P^T dO */
                        tile_query_pairs(s16.a2, pt, nk, nq);
                        pmm(dvcol + (size_t)j0 * W, W, s16.a2, PAIRS_BLOCK, 1, s16.dop, hd, nk, hd,
                            nqp, diag ? ZT_TILE_K_GE_I : ZT_TILE_DENSE, 1, amx);
                        /* dK += (scale dS)^T Q */
                        tile_query_pairs(s16.a2, dst, nk, nq);
                        pmm(dkcol + (size_t)j0 * W, W, s16.a2, PAIRS_BLOCK, 1, s16.qp, hd, nk, hd,
                            nqp, diag ? ZT_TILE_K_GE_I : ZT_TILE_DENSE, 1, amx);
                        /* dQ += (scale dS) K */
                        key_pairs_product(dq, W, dst, nk, nq, kpairs + (size_t)(j0 / 2) * hd, hd, hd,
                                          diag ? ZT_TILE_K_LE_I : ZT_TILE_DENSE, amx);
                    }
                }
            }
            if (amx)
                zt_amx_end();
        }
    }
}
