/* fast_norm.cu — the fast RMSNorm (with the residual add fused in) and SwiGLU (fast.h):
 * the meaning of rmsnorm.cu and swiglu.cu, with fp32 sums instead of double, one warp
 * per row instead of one block, and the hardware exp; within fp32 rounding of the
 * exact kernels (bf16 outputs: within one bf16 rounding).
 *
 * RMSNorm forward, row n of x (N, C), one warp:
 *   rstd_n = 1 / sqrt(sum_c x_nc^2 / C + eps),  y_nc = (x_nc rstd_n) w_c
 * the sum in fp32: each lane sums its columns in groups of 8, c = 8 lane + j + 256 k
 * (j inner, k outer), then the warp's butterfly; a group is one or two 16-byte accesses
 * where C is a multiple of 8 and the pointers are 16-byte aligned, 8 single elements
 * otherwise, the same columns in the same order, so both paths give the same bits.  The residual form first adds the block's output into the stream,
 * x_nc += delta_nc (x fp32, delta fp32 or bf16), writes x back and normalises it: the
 * add and the norm that follows it in a Llama block read x once.  (Its backward needs
 * nothing new: the exact and fast rmsnorm backward add into dx, the residual stream's
 * gradient, with dx_beta 1.)
 * Backward, row n (one warp), r = rstd_n, xhat = x r, g = dy w:
 *   dx_nc = dx_beta dx_nc + r (g_c - xhat_c mean_c(g xhat)),
 *   dw_c = dw_beta dw_c + sum_n dy_nc xhat_nc,
 * a beta 0 storing 0 + v without reading the destination (rmsnorm.c: the bits of a
 * clear and an add, -0.0 included; with fma contraction, fma(a, b, 0) as before),
 * dw as fp32 column sums over chunks of 64 rows, then the chunks in order (fixed order:
 * the same bits every run), all in one launch (fast_rmsnorm_backward_kernel); dx's
 * row by the forward's groups, dw's column sums over 4 columns a thread (a float4) on
 * the vector path, each column's sum in the rows' order on both.
 * SwiGLU: h = silu(g) u, silu(g) = g / (1 + e^-g), with __expf (the SFU's exp2 of a
 * pre-scaled argument: a few ulp, where zt_expf is 0.5); the backward's expressions are
 * swiglu.cu's. */
#include "entries.cuh"
#include "fast.h"

#define ROWS_PER_BLOCK 8 /* warps per block, one row each */
#define DW_ROWS 64
#define FULL 0xffffffffu

__device__ __forceinline__ float warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* ---- RMSNorm forward (with the residual add) ------------------------------------------ */

/* A lane's columns, in groups of 8: c = 8 lane + j + 256 k (j = 0..7 inner, k outer),
 * the order of its partial sums on both paths.  V: the 8 in one or two 16-byte accesses
 * (C a multiple of 8, every pointer 16-byte aligned: norm_vec8); else one element at a
 * time, the group cut at C.  The same columns in the same order either way, so a row's
 * sums, and every result, have the same bits on both paths. */
#define GROUP 8

/* e[0..k) = buf[i..i+k) widened to fp32, e[k..8) = 0 (dt: any on the elementwise path;
 * fp32 or bf16 on the vector path, the model's dtypes: norm_vec8) */
template <bool V>
__device__ __forceinline__ void norm_load8(const void *buf, zt_dtype dt, size_t i, int k, float *e)
{
    if (!V) {
#pragma unroll
        for (int j = 0; j < GROUP; j++) e[j] = j < k ? zt_d_load(buf, dt, i + j) : 0.0f;
    } else if (dt == ZT_F32) {
        const float4 a = *(const float4 *)((const float *)buf + i), b = *(const float4 *)((const float *)buf + i + 4);
        e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w, e[4] = b.x, e[5] = b.y, e[6] = b.z, e[7] = b.w;
    } else { /* 8 bf16, low address in a word's low half (little-endian) */
        const uint4 q = *(const uint4 *)((const uint16_t *)buf + i);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
            e[2 * j] = zt_bf16_to_f32((uint16_t)(w[j] & 0xffffu)), e[2 * j + 1] = zt_bf16_to_f32((uint16_t)(w[j] >> 16));
    }
}

/* buf[i..i+k) = e[0..k) rounded to dt (the vector path: fp32 or bf16) */
template <bool V>
__device__ __forceinline__ void norm_store8(void *buf, zt_dtype dt, size_t i, int k, const float *e)
{
    if (!V) {
#pragma unroll /* constant indices: e stays in registers */
        for (int j = 0; j < GROUP; j++)
            if (j < k)
                zt_d_store(buf, dt, i + j, e[j]);
    } else if (dt == ZT_F32) {
        const float4 a = {e[0], e[1], e[2], e[3]}, b = {e[4], e[5], e[6], e[7]};
        *(float4 *)((float *)buf + i) = a, *(float4 *)((float *)buf + i + 4) = b;
    } else {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w[j] = zt_f32_to_bf16(e[2 * j]) | (uint32_t)zt_f32_to_bf16(e[2 * j + 1]) << 16;
        }
        const uint4 q = {w[0], w[1], w[2], w[3]};
        *(uint4 *)((uint16_t *)buf + i) = q;
    }
}

/* the group's length: 8, or what is left of the row (the scalar path's last group; on
 * the vector path C is a multiple of 8, and the constant drops the guards) */
template <bool V>
__device__ __forceinline__ int norm_group(int c, int C)
{
    return V || C - c >= GROUP ? GROUP : C - c;
}

template <bool RESIDUAL, bool V>
__global__ void fast_rmsnorm_kernel(void *y, zt_dtype y_dt, float *rstd, float *x, const void *delta,
                                    zt_dtype delta_dt, const float *w, int N, int C, float eps)
{
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (n >= N)
        return; /* warp-uniform */
    const size_t o = (size_t)n * C;
    float ss = 0.0f;
    for (int c = GROUP * lane; c < C; c += 32 * GROUP) {
        const int k = norm_group<V>(c, C);
        float v[GROUP];
        norm_load8<V>(x, ZT_F32, o + c, k, v);
        if (RESIDUAL) {
            float d[GROUP];
            norm_load8<V>(delta, delta_dt, o + c, k, d);
#pragma unroll
            for (int j = 0; j < GROUP; j++) v[j] += d[j];
            norm_store8<V>(x, ZT_F32, o + c, k, v);
        }
#pragma unroll
        for (int j = 0; j < GROUP; j++)
            if (j < k)
                ss = fmaf(v[j], v[j], ss);
    }
    ss = warp_sum_f(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (lane == 0)
        rstd[n] = r;
    for (int c = GROUP * lane; c < C; c += 32 * GROUP) { /* the row is in L1 from the first pass (this warp wrote it) */
        const int k = norm_group<V>(c, C);
        float v[GROUP], wc[GROUP];
        norm_load8<V>(x, ZT_F32, o + c, k, v), norm_load8<V>(w, ZT_F32, c, k, wc);
#pragma unroll
        for (int j = 0; j < GROUP; j++) v[j] = (v[j] * r) * wc[j];
        norm_store8<V>(y, y_dt, o + c, k, v);
    }
}

/* 16-byte accesses where every row and pointer allows them (C a multiple of 8: the Llama
 * shapes; cudaMalloc's 256-byte alignment) and the 16-bit operands are bf16 (the model's
 * operand dtype is fp32 or bf16), one element at a time otherwise */
static bool norm_vec8(int C, uintptr_t ptr_bits, zt_dtype a, zt_dtype b)
{
    return C % GROUP == 0 && ptr_bits % 16 == 0 && a != ZT_F16 && b != ZT_F16;
}

static void rmsnorm_launch(bool residual, void *y, zt_dtype y_dt, float *rstd, float *x, const void *delta,
                           zt_dtype delta_dt, const float *w, int N, int C, float eps)
{
    if (N <= 0)
        return;
    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    const bool vec = norm_vec8(C, (uintptr_t)y | (uintptr_t)x | (uintptr_t)delta | (uintptr_t)w, y_dt, delta_dt);
    const auto kernel = residual ? (vec ? fast_rmsnorm_kernel<true, true> : fast_rmsnorm_kernel<true, false>)
                                 : (vec ? fast_rmsnorm_kernel<false, true> : fast_rmsnorm_kernel<false, false>);
    kernel<<<blocks, ROWS_PER_BLOCK * 32, 0, zt_cu.stream>>>(y, y_dt, rstd, x, delta, delta_dt, w, N, C, eps);
    ZT_CU_LAUNCHED();
}

void zt_cu_fast_rmsnorm_forward(void *y, zt_dtype y_dt, float *rstd, const float *x, const float *w, int N, int C,
                                float eps)
{
    /* x is only read without the residual */
    rmsnorm_launch(false, y, y_dt, rstd, (float *)x, NULL, ZT_F32, w, N, C, eps);
}

void zt_cu_fast_rmsnorm_residual_forward(float *x, const void *delta, zt_dtype delta_dt, void *y, zt_dtype y_dt,
                                         float *rstd, const float *w, int N, int C, float eps)
{
    rmsnorm_launch(true, y, y_dt, rstd, x, delta, delta_dt, w, N, C, eps);
}

/* ---- RMSNorm backward ---------------------------------------------------------------- */

/* dx for row n, by the warp that owns it (lane: its groups of columns, as the forward's) */
template <bool V>
__device__ __forceinline__ void rmsnorm_dx_row(float *dx, uint16_t *dx_bf16, bool dx_add, const float *dy,
                                               const float *x, const float *w, float r, size_t o, int C, int lane)
{
    float dot = 0.0f; /* sum_c g xhat */
    for (int c = GROUP * lane; c < C; c += 32 * GROUP) {
        const int k = norm_group<V>(c, C);
        float g[GROUP], xv[GROUP], wc[GROUP];
        norm_load8<V>(dy, ZT_F32, o + c, k, g), norm_load8<V>(x, ZT_F32, o + c, k, xv), norm_load8<V>(w, ZT_F32, c, k, wc);
#pragma unroll
        for (int j = 0; j < GROUP; j++)
            if (j < k)
                dot = fmaf(g[j] * wc[j], xv[j] * r, dot);
    }
    const float m = warp_sum_f(dot) / (float)C;
    for (int c = GROUP * lane; c < C; c += 32 * GROUP) {
        const int k = norm_group<V>(c, C);
        float d[GROUP] = {}, g[GROUP], xv[GROUP], wc[GROUP]; /* d: +0.0 where dx is stored */
        if (dx_add)
            norm_load8<V>(dx, ZT_F32, o + c, k, d);
        norm_load8<V>(dy, ZT_F32, o + c, k, g);
        norm_load8<V>(x, ZT_F32, o + c, k, xv), norm_load8<V>(w, ZT_F32, c, k, wc);
#pragma unroll
        for (int j = 0; j < GROUP; j++) d[j] = d[j] + r * (g[j] * wc[j] - xv[j] * r * m);
        norm_store8<V>(dx, ZT_F32, o + c, k, d);
        if (dx_bf16)
            norm_store8<V>(dx_bf16, ZT_BF16, o + c, k, d);
    }
}

/* W consecutive fp32 at p: W 4, one 16-byte access (p 16-byte aligned); W 1, one */
template <int W>
__device__ __forceinline__ void norm_load_w(const float *p, float *e)
{
    if (W == 4) {
        const float4 a = *(const float4 *)p;
        e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w;
    } else {
        e[0] = p[0];
    }
}

/* the chunk's partial dw, partial[b][c] = sum over rows n0..n1 in order of dy xhat: a
 * thread per W columns, each column's own sum in the rows' order whatever W */
template <int W>
__device__ __forceinline__ void rmsnorm_dw_chunk(float *partial, const float *dy, const float *x, const float *rstd,
                                                 int n0, int n1, int C)
{
    for (int c = W * (int)threadIdx.x; c < C; c += W * (int)blockDim.x) {
        float acc[W];
#pragma unroll
        for (int j = 0; j < W; j++) acc[j] = 0.0f;
        for (int n = n0; n < n1; n++) {
            const float rn = rstd[n];
            float g[W], xv[W];
            norm_load_w<W>(dy + (size_t)n * C + c, g), norm_load_w<W>(x + (size_t)n * C + c, xv);
#pragma unroll
            for (int j = 0; j < W; j++) acc[j] = fmaf(g[j], xv[j] * rn, acc[j]);
        }
        float *p = partial + (size_t)blockIdx.x * C + c;
        if (W == 4) {
            const float4 q = {acc[0], acc[1], acc[2], acc[3]};
            *(float4 *)p = q;
        } else {
            p[0] = acc[0];
        }
    }
}

/* The chunks that have written their partial dw (fast_rmsnorm_backward_kernel): the last
 * to arrive sums them and sets this back to 0 for the next launch (stream order). */
__device__ unsigned fast_rmsnorm_arrived;

/* The whole backward in one launch: block b owns the DW_ROWS rows of chunk b.  Its warps
 * write dx for those rows (a warp per row, ROWS_PER_BLOCK rows at a time), then its
 * threads write the chunk's partial dw, partial[b][c] = sum over the chunk's rows in
 * order of dy xhat (the rows it has just read: from L2, not from memory again); the last
 * block to arrive (a counter after a fence) adds the chunks in order into dw.  The same
 * sums in the same order as three launches would make: the same bits every run. */
template <bool V>
__global__ void fast_rmsnorm_backward_kernel(float *dx, uint16_t *dx_bf16, bool dx_add, float *dw, bool dw_add,
                                             float *partial, const float *dy, const float *x, const float *w,
                                             const float *rstd, int N, int C)
{
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0 = blockIdx.x * DW_ROWS, n1 = n0 + DW_ROWS < N ? n0 + DW_ROWS : N;
    for (int n = n0 + warp; n < n1; n += ROWS_PER_BLOCK) /* warp-uniform */
        rmsnorm_dx_row<V>(dx, dx_bf16, dx_add, dy, x, w, rstd[n], (size_t)n * C, C, lane);
    rmsnorm_dw_chunk<V ? 4 : 1>(partial, dy, x, rstd, n0, n1, C);
    __threadfence(); /* this block's partials reach memory before its arrival is counted */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&fast_rmsnorm_arrived, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const volatile float *pv = partial; /* the other blocks' writes: past this SM's L1 */
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (unsigned k = 0; k < gridDim.x; k++) acc += pv[(size_t)k * C + c];
        dw[c] = (dw_add ? dw[c] : 0.0f) + acc; /* dw_beta 0: stored, not read */
    }
    if (threadIdx.x == 0)
        fast_rmsnorm_arrived = 0;
}

void zt_cu_fast_rmsnorm_backward(float *dx, uint16_t *dx_bf16, float dx_beta, float *dw, float dw_beta,
                                 const float *dy, const float *x, const float *w, const float *rstd, int N, int C)
{
    if (N <= 0)
        return;
    const int nchunk = (N + DW_ROWS - 1) / DW_ROWS;
    float *partial = (float *)zt_cu_scratch((size_t)nchunk * C * sizeof(float));
    const uintptr_t ptrs = (uintptr_t)dx | (uintptr_t)dx_bf16 | (uintptr_t)partial | (uintptr_t)dy | (uintptr_t)x |
                           (uintptr_t)w;
    const bool vec = norm_vec8(C, ptrs, ZT_F32, ZT_BF16); /* every array fp32 but dx's bf16 copy */
    const auto kernel = vec ? fast_rmsnorm_backward_kernel<true> : fast_rmsnorm_backward_kernel<false>;
    kernel<<<(unsigned)nchunk, ROWS_PER_BLOCK * 32, 0, zt_cu.stream>>>(dx, dx_bf16, dx_beta != 0.0f, dw, dw_beta != 0.0f,
                                                                      partial, dy, x, w, rstd, N, C);
    ZT_CU_LAUNCHED();
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

__global__ void fast_swiglu_forward_kernel(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
        zt_d_store(h, h_dt, k, g / (1.0f + __expf(-g)) * u);
    }
}

__global__ void fast_swiglu_backward_kernel(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t n = k / F, f = k % F;
        const size_t ig = n * 2 * F + f, iu = ig + F;
        const float g = gu[ig], u = gu[iu], d = dh[k];
        const float e = 1.0f + __expf(-g);
        const float sig = 1.0f / e;
        zt_d_store(dgu, dgu_dt, ig, d * u * sig * (1.0f + g * (1.0f - sig)));
        zt_d_store(dgu, dgu_dt, iu, d * (g / e));
    }
}

void zt_cu_fast_swiglu_forward(void *h, zt_dtype h_dt, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    fast_swiglu_forward_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(h, h_dt, gu, N, F);
    ZT_CU_LAUNCHED();
}

void zt_cu_fast_swiglu_backward(void *dgu, zt_dtype dgu_dt, const float *dh, const float *gu, int N, int F)
{
    const size_t total = (size_t)N * F;
    if (total == 0)
        return;
    fast_swiglu_backward_kernel<<<zt_cu_blocks(total), ZT_CU_THREADS, 0, zt_cu.stream>>>(dgu, dgu_dt, dh, gu, N, F);
    ZT_CU_LAUNCHED();
}
