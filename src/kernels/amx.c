/* amx.c — see amx.h.  Built with -mamx-tile -mamx-bf16 on x86-64 (Makefile), called
 * only when zt_amx_usable(); other builds keep the interface and never use it. */
#include "amx.h"
#include "matmul.h"

#include <assert.h>

/* GCC spells the feature macros __AMX_TILE__, clang __AMXTILE__ */
#if defined(__x86_64__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && \
    (defined(__AMX_BF16__) || defined(__AMXBF16__))
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Linux keeps the 8 KiB tile state out of a process's signal frames until it asks
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); a tile instruction before
 * that raises SIGILL.  Asking again once granted is a no-op. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int usable = -1;

int zt_amx_usable(void)
{
    if (usable < 0)
        usable = zt_matmul_isa_has_amx() &&
                 syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return usable;
}

/* The 64-byte operand of ldtilecfg: palette 1, and for each of the 8 tiles its bytes
 * per row and rows. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* A constant in memory, not a local: GCC 12 does not treat ldtilecfg as reading its
 * operand, so it dropped the stores that built a local one (and ldtilecfg of garbage
 * faults). */
static const tilecfg config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void zt_amx_begin(void) { _tile_loadconfig(&config); }

void zt_amx_end(void) { _tile_release(); }

/* Tiles 0-3 hold C for four column tiles of one row tile, tile 4 the row tile's A for
 * one 16-pair step, tiles 5-7 the B tiles of that step, in turn. */
void zt_amx_pmm(float *C, size_t ldc, const uint32_t *A, size_t ars, const uint32_t *B,
                size_t ldb, int M, int N, int Q, zt_tile_shape shape, int beta)
{
    assert(zt_amx_fits(M, N, Q) && (beta == 0 || beta == 1));
    const size_t sc = ldc * sizeof(float), sa = ars * sizeof(uint32_t), sb = ldb * sizeof(uint32_t);
    for (int j0 = 0; j0 < N; j0 += 64) {
        const int nt = N - j0 < 64 ? (N - j0) / 16 : 4;
        for (int i0 = 0; i0 < M; i0 += 16) {
            unsigned use = 0; /* bit t: column tile t is computed */
            for (int t = 0; t < nt; t++)
                if (shape != ZT_TILE_J_GE_I || j0 + 16 * t + 15 >= i0) use |= 1u << t;
            if (!use)
                continue;
            float *c = C + (size_t)i0 * ldc + j0;
#define LOAD_C(t)                           \
    if (use & 1u << t) {                    \
        if (beta)                           \
            _tile_loadd(t, c + 16 * t, sc); \
        else                                \
            _tile_zero(t);                  \
    }
            LOAD_C(0) LOAD_C(1) LOAD_C(2) LOAD_C(3)
            for (int q = 0; q < Q; q += 16) {
                /* a step covers k = 2q .. 2q+31 and rows i0 .. i0+15 */
                if (shape == ZT_TILE_K_LE_I && 2 * q > i0 + 15)
                    break;
                if (shape == ZT_TILE_K_GE_I && 2 * q + 31 < i0)
                    continue;
                _tile_loadd(4, A + (size_t)i0 * ars + q, sa);
                const uint32_t *b = B + (size_t)q * ldb + j0;
#define STEP(t, bt) if (use & 1u << t) { _tile_loadd(bt, b + 16 * t, sb); _tile_dpbf16ps(t, 4, bt); }
                STEP(0, 5) STEP(1, 6) STEP(2, 7) STEP(3, 5)
            }
#define STORE_C(t) if (use & 1u << t) _tile_stored(t, c + 16 * t, sc);
            STORE_C(0) STORE_C(1) STORE_C(2) STORE_C(3)
#undef LOAD_C
#undef STEP
#undef STORE_C
        }
    }
}

#else /* no AMX in this build: never usable, so the rest is never called */

int zt_amx_usable(void) { return 0; }
void zt_amx_begin(void) {}
void zt_amx_end(void) {}
void zt_amx_pmm(float *C, size_t ldc, const uint32_t *A, size_t ars, const uint32_t *B,
                size_t ldb, int M, int N, int Q, zt_tile_shape shape, int beta)
{
    (void)C, (void)ldc, (void)A, (void)ars, (void)B, (void)ldb, (void)M, (void)N, (void)Q, (void)shape,
        (void)beta;
    assert(!"zt_amx_pmm without AMX");
}

#endif
