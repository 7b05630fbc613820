/* tools/cuda_emu/mma_sync.h — the PTX primitives of src/kernels/cuda/mma_sync.cuh on the
 * CPU, for tools/cuda_emu: mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix m8n8
 * x4 (plain and .trans), cp.async 16 bytes with commit and wait groups, and the packed
 * fp32x2 -> bf16x2 conversion.
 *
 * Unlike wmma's fragments, these layouts are documented, and the kernels rely on
 * them (the forward reuses an accumulator as the next product's a operand), so the model
 * keeps each lane's registers exactly as the PTX ISA lays them out (mma_sync.cuh's
 * header): a lane holds only its own elements, and a product or a matrix load is formed
 * by exchanging the warp's registers and addresses, never from a whole tile in every
 * lane.  A layout the model got wrong would then break the kernels here as it would on
 * the GPU; kernels_check's group `mma` holds the model to plain loops (here) and to the
 * hardware (on a GPU).
 *
 * Collectives (mma, ldmatrix): each lane posts its operands and a sequence number,
 * __syncwarp, reads the lanes' posts it needs, __syncwarp (so that no lane posts its next
 * operands before every lane has read).  All 32 lanes of the warp must be at the same
 * collective: a lane that returned, or is at another one, aborts the run ("a lane skipped
 * a collective"), as .sync.aligned is undefined on the GPU then.  The product's sum is an
 * fma chain over k from c in increasing k: bf16 products are exact in fp32, so only the
 * order of the fp32 sum differs from the tensor cores' (unspecified there).
 *
 * cp.async: the 16 source bytes are read at the call, and written to shared memory only
 * when a wait_group covers their group (committed, and older than the last N), so a
 * kernel that reads a tile before waiting reads the poison shared memory starts with
 * (emu.cpp).  Addresses: the source and destination 16-byte aligned, ldmatrix's rows too,
 * and the shared ones inside the block's dynamic shared memory (the only shared memory
 * the kernels that use these have); anything else aborts.  The conversion rounds as
 * core/dtype.h's zt_f32_to_bf16 (nearest, ties to even; cvt's NaN is a canonical NaN,
 * this one keeps the payload: the kernels convert no NaN). */
#ifndef ZT_CUDA_EMU_MMA_SYNC_H
#define ZT_CUDA_EMU_MMA_SYNC_H

#include "cuda_runtime.h"

#include <vector>

extern "C" {
#include "../../src/core/dtype.h"
}

struct zt_emu_post {
    unsigned long serial; /* the block (zt_emu_block_serial) */
    unsigned seq;         /* the lane's count of collectives in this block */
    int op;
    const void *p;
    uint32_t w[6];
};

struct zt_emu_lane_state {
    unsigned long serial = 0;
    unsigned seq = 0;
    struct copy {
        void *dst;
        unsigned char bytes[16];
        long group; /* -1: not committed yet */
    };
    std::vector<copy> pending;
    long committed = 0;
};

inline int zt_emu_thread_index(void)
{
    return (int)(threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y);
}

/* this thread's state, reset when a new block runs on its fiber */
inline zt_emu_lane_state &zt_emu_lane(void)
{
    static zt_emu_lane_state s[1024];
    zt_emu_lane_state &me = s[zt_emu_thread_index()];
    if (me.serial != zt_emu_block_serial()) {
        me.serial = zt_emu_block_serial(), me.seq = 0, me.committed = 0;
        me.pending.clear();
    }
    return me;
}

[[noreturn]] inline void zt_emu_mma_fail(const char *what, const char *why, const void *p)
{
    fprintf(stderr, "cuda_emu: %s: %s (address %p, thread %u,%u,%u of block %u,%u,%u)\n", what, why, p, threadIdx.x,
            threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);
    abort();
}

inline void zt_emu_check_16(const void *p, bool shared, const char *what)
{
    if ((uintptr_t)p & 15u)
        zt_emu_mma_fail(what, "address not 16-byte aligned", p);
    const char *s0 = (const char *)zt_emu_dyn_smem();
    if (shared && ((const char *)p < s0 || (const char *)p + 16 > s0 + ZT_EMU_DYN_SMEM_BYTES))
        zt_emu_mma_fail(what, "address not in the block's shared memory", p);
}

/* Post this lane's operands and wait for the warp; returns the warp's 32 posts, all
 * checked to be this collective.  The caller reads them, then calls __syncwarp. */
inline const zt_emu_post *zt_emu_collective(int op, const char *what, const void *p, const uint32_t *w, int nw)
{
    static zt_emu_post posts[1024];
    const int t = zt_emu_thread_index(), base = t & ~31;
    if ((int)(blockDim.x * blockDim.y * blockDim.z) < base + 32)
        zt_emu_mma_fail(what, "a warp of fewer than 32 threads", p);
    zt_emu_lane_state &me = zt_emu_lane();
    zt_emu_post &mine = posts[t];
    mine.serial = me.serial, mine.seq = me.seq++, mine.op = op, mine.p = p;
    for (int k = 0; k < nw; k++) mine.w[k] = w[k];
    __syncwarp();
    for (int l = 0; l < 32; l++) {
        const zt_emu_post &o = posts[base + l];
        if (o.serial != mine.serial || o.seq != mine.seq || o.op != op) {
            fprintf(stderr, "cuda_emu: %s: lane %d of the warp is not at this collective (a lane skipped a "
                            "collective, or returned)\n", what, l);
            abort();
        }
    }
    return posts + base;
}

/* element (row, col) of a 16 x 16 a fragment, or (k, n) of a 16 x 8 b fragment, from the
 * warp's posted registers: the lane and register that hold it, then its half */
inline float zt_emu_frag_elem(const zt_emu_post *lanes, int lane, int reg, int half)
{
    const uint32_t u = lanes[lane].w[reg];
    return zt_bf16_to_f32((uint16_t)(half ? u >> 16 : u & 0xffffu));
}

inline void zt_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    const uint32_t w[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const zt_emu_post *lanes = zt_emu_collective(1, "mma.sync m16n8k16", nullptr, w, 6);
    const int lane = zt_emu_thread_index() & 31, g = lane >> 2, t = lane & 3;
    float r[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + (e >> 1) * 8, col = 2 * t + (e & 1);
        float s = d[e];
        for (int k = 0; k < 16; k++) {
            /* A[row][k]: lane (row % 8) 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8);
             * B[k][col]: lane 4 col + (k % 8) / 2, register 4 + (k >= 8) of the post */
            const float x = zt_emu_frag_elem(lanes, (row & 7) * 4 + (k & 7) / 2, (row >> 3) + 2 * (k >> 3), k & 1);
            const float y = zt_emu_frag_elem(lanes, col * 4 + (k & 7) / 2, 4 + (k >> 3), k & 1);
            s = fmaf(x, y, s);
        }
        r[e] = s;
    }
    __syncwarp();
    for (int e = 0; e < 4; e++) d[e] = r[e];
}

inline void zt_emu_ldmatrix(uint32_t (&r)[4], const void *row, bool trans)
{
    const char *what = trans ? "ldmatrix m8n8 x4 trans" : "ldmatrix m8n8 x4";
    zt_emu_check_16(row, true, what);
    const zt_emu_post *lanes = zt_emu_collective(trans ? 3 : 2, what, row, nullptr, 0);
    const int lane = zt_emu_thread_index() & 31, g = lane >> 2, t = lane & 3;
    uint32_t v[4];
    for (int m = 0; m < 4; m++) {
        uint16_t lo, hi;
        if (trans) { /* rows 2t and 2t + 1 of tile m, column g */
            lo = ((const uint16_t *)lanes[8 * m + 2 * t].p)[g];
            hi = ((const uint16_t *)lanes[8 * m + 2 * t + 1].p)[g];
        } else { /* row g of tile m, columns 2t and 2t + 1 */
            lo = ((const uint16_t *)lanes[8 * m + g].p)[2 * t];
            hi = ((const uint16_t *)lanes[8 * m + g].p)[2 * t + 1];
        }
        v[m] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    __syncwarp();
    for (int m = 0; m < 4; m++) r[m] = v[m];
}

inline void zt_ldmatrix_x4(uint32_t (&r)[4], const void *row) { zt_emu_ldmatrix(r, row, false); }
inline void zt_ldmatrix_x4_trans(uint32_t (&r)[4], const void *row) { zt_emu_ldmatrix(r, row, true); }

inline void zt_cp_async16(void *dst, const void *src)
{
    zt_emu_check_16(dst, true, "cp.async (shared destination)");
    zt_emu_check_16(src, false, "cp.async (global source)");
    zt_emu_lane_state::copy c;
    c.dst = dst, c.group = -1;
    memcpy(c.bytes, src, 16);
    zt_emu_lane().pending.push_back(c);
}

inline void zt_cp_async_commit(void)
{
    zt_emu_lane_state &me = zt_emu_lane();
    me.committed++;
    for (auto &c : me.pending)
        if (c.group < 0)
            c.group = me.committed;
}

/* every committed group but the newest N lands; the uncommitted copies stay in flight */
template <int N>
inline void zt_cp_async_wait(void)
{
    zt_emu_lane_state &me = zt_emu_lane();
    std::vector<zt_emu_lane_state::copy> left;
    for (auto &c : me.pending)
        if (c.group >= 0 && c.group <= me.committed - N)
            memcpy(c.dst, c.bytes, 16);
        else
            left.push_back(c);
    me.pending.swap(left);
}

inline uint32_t zt_pack_bf16x2(float lo, float hi)
{
    return (uint32_t)zt_f32_to_bf16(lo) | (uint32_t)zt_f32_to_bf16(hi) << 16;
}

#endif
