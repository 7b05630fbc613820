/* matmul.c — matrix products through oneDNN's matmul primitive (see matmul.h).
 *
 * What this module promises:
 *  - C (M,N) fp32 = beta*C + op(A) . op(B) with fp32 accumulation, for every
 *    transpose combination; transposes are expressed as memory-descriptor
 *    strides, never as copies, and beta = 1 is oneDNN's in-place sum post-op.
 *  - Each distinct (M, N, K, trans_a, trans_b, beta, primitive dtype, thread
 *    count) gets one primitive, created on first use and cached until
 *    zt_matmul_shutdown.  The cache entry also owns the three memory objects the
 *    primitive runs on; a call only re-points them at the caller's buffers
 *    (dnnl_memory_set_data_handle), so after the first training step a call
 *    allocates nothing on our side.
 *  - Scratchpads are user-managed (one shared buffer sized for the largest
 *    cached primitive), so oneDNN does not allocate its scratchpad per call.
 *  - Inputs not in the primitive's dtype are converted into two reusable,
 *    accounted (ZT_MEM_OTHER) scratch buffers that only grow: fp32 -> bf16 is
 *    round-to-nearest-even (zt_f32_to_bf16), bf16 -> fp32 is exact.
 *  - bf16 compute runs a bf16 x bf16 -> fp32 primitive when the CPU has
 *    AVX512-BF16 or AMX.  Otherwise it runs gemm_bf16.c's AVX2/FMA kernel,
 *    which converts while it packs its panels (fp32 FMAs on the bf16 values: a
 *    product of two bf16 values is exact in fp32, so the result differs from the
 *    native one only in fp32 accumulation order, and nothing is emulated).  Only
 *    a build without AVX2/FMA falls back to converted copies in scratch and the
 *    fp32 primitive.  (DNNL_MAX_CPU_ISA=AVX2 exercises the non-native path on a
 *    bf16-capable machine; tests/test_gemm_bf16.c does.)
 *  - Every oneDNN failure comes back as ZT_EFAIL with the shape and oneDNN's
 *    status name; bad arguments as ZT_EINPUT.
 *
 * Not thread-safe: the cache, scratch and stream are shared module state, so
 * calls must come from one thread at a time (the training loop's main thread).
 * Parallelism is inside oneDNN, which uses the caller's OpenMP pool
 * (omp_get_max_threads() at the time of the call). */
#include "matmul.h"
#include "amx.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "../core/mem.h"
#include "gemm_bf16.h"

/* One cached primitive and the memory objects it executes on.  The memory
 * objects carry the descriptors fixed at creation; their data handles are
 * re-pointed on every call. */
typedef struct mm_entry {
    int M, N, K, trans_a, trans_b, beta1, nthr;
    dnnl_data_type_t dt; /* dtype of A and B as the primitive sees them */
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c;
    dnnl_memory_t mem_scratch; /* NULL when the primitive needs no scratchpad */
} mm_entry;

/* A growable, accounted byte buffer. */
typedef struct mm_buf {
    void *p;
    size_t cap;
} mm_buf;

static struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mm_entry *entries; /* zt_alloc'd array of `cap` slots, `n` used */
    int n, cap;
    int last_hit;      /* index of the last entry found: consecutive calls often repeat */
    mm_buf conv_a, conv_b; /* converted A and B */
    mm_buf scratchpad;     /* shared oneDNN scratchpad, >= every entry's need */
} g;

static int native_bf16 = -1; /* -1 until detected */

/* ---- small helpers ------------------------------------------------------- */

static int dnnl_fail(zt_err *err, dnnl_status_t st, const char *what, int M, int N, int K)
{
    return zt_fail(err, ZT_EFAIL, "oneDNN matmul M=%d N=%d K=%d: %s (%s)", M, N, K,
                   dnnl_status2str(st), what);
}

/* Make b hold at least `need` bytes; old contents are not kept (callers refill). */
static int buf_reserve(mm_buf *b, size_t need)
{
    if (need <= b->cap)
        return 0;
    void *p = zt_alloc(ZT_MEM_OTHER, need);
    if (!p)
        return -1;
    zt_free(ZT_MEM_OTHER, b->p, b->cap);
    b->p = p;
    b->cap = need;
    return 0;
}

static void buf_release(mm_buf *b)
{
    zt_free(ZT_MEM_OTHER, b->p, b->cap);
    b->p = NULL;
    b->cap = 0;
}

/* Conversions below this many elements stay on one thread: forking the pool
 * costs more than the loop. */
#define MM_PAR_MIN ((size_t)1 << 16)

static void to_bf16(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= MM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] = zt_f32_to_bf16(src[i]);
}

static void bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= MM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] = zt_bf16_to_f32(src[i]);
}

/* fp32 -> fp32 holding the bf16-rounded value (the non-native bf16 path). */
static void round_bf16_f32(float *dst, const float *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= MM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] = zt_round_bf16(src[i]);
}

/* fp32 -> fp32 holding the fp16-rounded value (fp16 compute: no CPU here has a
 * native fp16 product, so fp16 is emulated on the rounded inputs, as bf16 is
 * without AVX512-BF16; overflow past 65504 becomes inf, as on the device). */
static void round_f16_f32(float *dst, const float *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= MM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] = zt_round_f16(src[i]);
}

static void f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= MM_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dst[i] = zt_f16_to_f32(src[i]);
}

/* Return x as the primitive's input: x itself when it already has the right
 * dtype and values, else a converted copy in `buf`.  NULL on allocation failure. */
static const void *prepare_input(mm_buf *buf, const void *x, zt_dtype x_dt, zt_dtype compute,
                                 dnnl_data_type_t prim_dt, size_t n)
{
    if (prim_dt == dnnl_bf16) { /* native bf16 compute */
        if (x_dt == ZT_BF16)
            return x;
        if (buf_reserve(buf, n * sizeof(uint16_t)))
            return NULL;
        to_bf16(buf->p, x, n);
        return buf->p;
    }
    /* fp32 primitive: fp32 compute, bf16 compute without native support, or fp16 */
    if (x_dt == ZT_F32 && compute == ZT_F32)
        return x;
    if (buf_reserve(buf, n * sizeof(float)))
        return NULL;
    if (x_dt == ZT_BF16)
        bf16_to_f32(buf->p, x, n); /* exact: bf16 values are already rounded */
    else if (x_dt == ZT_F16)
        f16_to_f32(buf->p, x, n);  /* exact likewise */
    else if (compute == ZT_F16)
        round_f16_f32(buf->p, x, n);
    else
        round_bf16_f32(buf->p, x, n);
    return buf->p;
}

/* ---- engine, stream, cache ----------------------------------------------- */

static int ensure_engine(zt_err *err, int M, int N, int K)
{
    dnnl_status_t st;
    if (!g.engine && (st = dnnl_engine_create(&g.engine, dnnl_cpu, 0)) != dnnl_success) {
        g.engine = NULL;
        return dnnl_fail(err, st, "engine_create", M, N, K);
    }
    if (!g.stream &&
        (st = dnnl_stream_create(&g.stream, g.engine, dnnl_stream_default_flags)) != dnnl_success) {
        g.stream = NULL;
        return dnnl_fail(err, st, "stream_create", M, N, K);
    }
    return ZT_OK;
}

static void entry_destroy(mm_entry *e)
{
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    if (e->mem_a)
        dnnl_memory_destroy(e->mem_a);
    if (e->mem_b)
        dnnl_memory_destroy(e->mem_b);
    if (e->mem_c)
        dnnl_memory_destroy(e->mem_c);
    if (e->mem_scratch)
        dnnl_memory_destroy(e->mem_scratch);
    memset(e, 0, sizeof *e);
}

/* Build the primitive for e's key (fields M..dt already set) and its memory
 * objects.  On failure e is left empty. */
static int entry_create(mm_entry *e, zt_err *err)
{
    const int M = e->M, N = e->N, K = e->K;
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
    const char *what;
    int rc = ZT_OK;

    /* Row-major logical shapes; a stored-transposed operand is the same logical
     * matrix with swapped strides: A^T stored (K,M) is A (M,K) with strides
     * (1, M); B^T stored (N,K) is B (K,N) with strides (1, K). */
    dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    dnnl_dims_t a_str = {K, 1}, b_str = {N, 1}, c_str = {N, 1};
    if (e->trans_a) {
        a_str[0] = 1;
        a_str[1] = M;
    }
    if (e->trans_b) {
        b_str[0] = 1;
        b_str[1] = K;
    }

#define MM_TRY(call)                                                                    \
    do {                                                                                \
        what = #call;                                                                   \
        if ((st = (call)) != dnnl_success)                                              \
            goto fail;                                                                  \
    } while (0)

    MM_TRY(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, e->dt, a_str));
    MM_TRY(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, e->dt, b_str));
    MM_TRY(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str));
    MM_TRY(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));

    MM_TRY(dnnl_primitive_attr_create(&attr));
    /* A user scratchpad lets every primitive share one buffer we own, instead of
     * oneDNN allocating a scratchpad inside each execute. */
    MM_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (e->beta1) {
        /* C = 1*C + A.B, fused into the kernel's store: C is read once, in place. */
        MM_TRY(dnnl_post_ops_create(&po));
        MM_TRY(dnnl_post_ops_append_sum(po, 1.0f));
        MM_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    MM_TRY(dnnl_primitive_desc_create(&pd, &desc, attr, g.engine, NULL));

    const dnnl_memory_desc_t *s_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t s_bytes = s_md ? dnnl_memory_desc_get_size(s_md) : 0;
    if (s_bytes > g.scratchpad.cap) {
        if (buf_reserve(&g.scratchpad, s_bytes)) {
            rc = zt_fail(err, ZT_EFAIL, "oneDNN matmul M=%d N=%d K=%d: out of memory for a %zu-byte scratchpad",
                         M, N, K, s_bytes);
            goto cleanup;
        }
        /* Re-point every cached primitive's scratchpad at the new buffer. */
        for (int i = 0; i < g.n; i++)
            if (g.entries[i].mem_scratch)
                MM_TRY(dnnl_memory_set_data_handle(g.entries[i].mem_scratch, g.scratchpad.p));
    }

    MM_TRY(dnnl_primitive_create(&e->prim, pd));
    MM_TRY(dnnl_memory_create(&e->mem_a, &a_md, g.engine, DNNL_MEMORY_NONE));
    MM_TRY(dnnl_memory_create(&e->mem_b, &b_md, g.engine, DNNL_MEMORY_NONE));
    MM_TRY(dnnl_memory_create(&e->mem_c, &c_md, g.engine, DNNL_MEMORY_NONE));
    if (s_bytes)
        MM_TRY(dnnl_memory_create(&e->mem_scratch, s_md, g.engine, g.scratchpad.p));
#undef MM_TRY
    goto cleanup;

fail:
    rc = dnnl_fail(err, st, what, M, N, K);
cleanup:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (rc != ZT_OK)
        entry_destroy(e);
    return rc;
}

/* The cached entry for this key, created on first use; NULL with err set on failure. */
static mm_entry *entry_get(int M, int N, int K, int ta, int tb, int beta1, dnnl_data_type_t dt,
                           zt_err *err)
{
    const int nthr = omp_get_max_threads(); /* oneDNN sizes its blocking to this */
    for (int k = 0; k < g.n; k++) {
        int i = (g.last_hit + k) % g.n;
        mm_entry *e = &g.entries[i];
        if (e->M == M && e->N == N && e->K == K && e->trans_a == ta && e->trans_b == tb &&
            e->beta1 == beta1 && e->dt == dt && e->nthr == nthr) {
            g.last_hit = i;
            return e;
        }
    }
    if (ensure_engine(err, M, N, K))
        return NULL;
    if (g.n == g.cap) {
        int cap = g.cap ? 2 * g.cap : 32;
        mm_entry *ne = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof *ne);
        if (!ne) {
            zt_fail(err, ZT_EFAIL, "oneDNN matmul M=%d N=%d K=%d: out of memory for the primitive cache",
                    M, N, K);
            return NULL;
        }
        if (g.n)
            memcpy(ne, g.entries, (size_t)g.n * sizeof *ne);
        zt_free(ZT_MEM_OTHER, g.entries, (size_t)g.cap * sizeof *ne);
        g.entries = ne;
        g.cap = cap;
    }
    mm_entry *e = &g.entries[g.n];
    *e = (mm_entry){.M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .beta1 = beta1,
                    .nthr = nthr, .dt = dt};
    if (entry_create(e, err))
        return NULL;
    g.last_hit = g.n++;
    return e;
}

/* Run e on buffers already in its dtype and layout. */
static int entry_run(mm_entry *e, float *C, const void *A, const void *B, zt_err *err)
{
    dnnl_status_t st;
    const char *what = "memory_set_data_handle";
    /* oneDNN takes non-const handles; it only reads A and B. */
    if ((st = dnnl_memory_set_data_handle(e->mem_a, (void *)A)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(e->mem_b, (void *)B)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(e->mem_c, C)) != dnnl_success)
        return dnnl_fail(err, st, what, e->M, e->N, e->K);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, e->mem_a},
        {DNNL_ARG_WEIGHTS, e->mem_b},
        {DNNL_ARG_DST, e->mem_c},
        {DNNL_ARG_SCRATCHPAD, e->mem_scratch},
    };
    int nargs = e->mem_scratch ? 4 : 3;
    if ((st = dnnl_primitive_execute(e->prim, g.stream, nargs, args)) != dnnl_success)
        return dnnl_fail(err, st, "primitive_execute", e->M, e->N, e->K);
    /* CPU streams are synchronous with OpenMP, but waiting is what the API asks. */
    if ((st = dnnl_stream_wait(g.stream)) != dnnl_success)
        return dnnl_fail(err, st, "stream_wait", e->M, e->N, e->K);
    return ZT_OK;
}

/* ---- public API ------------------------------------------------------------ */

/* ISA values are nested bit masks, so "at least this ISA" is a mask test. */
static int isa_at_least(dnnl_cpu_isa_t need)
{
    return ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)need) == (unsigned)need;
}

int zt_matmul_has_native_bf16(void)
{
    if (native_bf16 < 0)
        native_bf16 = isa_at_least(dnnl_cpu_isa_avx512_core_bf16); /* AMX includes it */
    return native_bf16;
}

int zt_matmul_isa_has_amx(void) { return isa_at_least(dnnl_cpu_isa_avx512_core_amx); }

zt_bf16_path zt_matmul_bf16_path(zt_dtype compute)
{
    if (compute != ZT_BF16)
        return ZT_BF16_PATH_NONE;
    if (zt_matmul_has_native_bf16())
        return ZT_BF16_PATH_NATIVE;
    return zt_gemm_bf16_available() ? ZT_BF16_PATH_PACKED : ZT_BF16_PATH_COPIES;
}

const char *zt_matmul_bf16_path_name(void)
{
    switch (zt_matmul_bf16_path(ZT_BF16)) {
    case ZT_BF16_PATH_NATIVE:
        return zt_amx_usable() ? "native (oneDNN and attention on AMX-BF16 tiles)" : "native (oneDNN, AVX512-BF16)";
    case ZT_BF16_PATH_PACKED: return "AVX2 kernel, converted while packing (no native bf16)";
    default: return "fp32 oneDNN on converted copies (no native bf16, no AVX2)";
    }
}

/* The primitive's input dtype for a compute dtype. */
static dnnl_data_type_t prim_dtype(zt_dtype compute)
{
    return compute == ZT_BF16 && zt_matmul_has_native_bf16() ? dnnl_bf16 : dnnl_f32;
}

int zt_result_dtype_check(const char *entry, int M, int N, int K, zt_dtype d_dt, zt_dtype compute, zt_err *err)
{
    if (d_dt == ZT_F32 || (d_dt == ZT_BF16 && compute == ZT_BF16))
        return ZT_OK;
    return zt_fail(err, ZT_EINPUT, "%s M=%d N=%d K=%d: a %s result needs %s compute (got %s)", entry, M, N, K,
                   zt_dtype_name(d_dt), zt_dtype_name(d_dt), zt_dtype_name(compute));
}

int zt_matmul_check_args(const float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt,
                         int M, int N, int K, float beta, zt_dtype compute, zt_mm_work *work,
                         zt_err *err)
{
    *work = ZT_MM_NOTHING;
    if (M < 0 || N < 0 || K < 0)
        return zt_fail(err, ZT_EINPUT, "matmul: negative shape M=%d N=%d K=%d", M, N, K);
    if (beta != 0.0f && beta != 1.0f)
        return zt_fail(err, ZT_EINPUT, "matmul M=%d N=%d K=%d: beta must be 0 or 1, got %g", M, N,
                       K, (double)beta);
    /* fp16 compute needs fp16 or fp32 inputs; bf16 inputs go with bf16 or fp32 compute */
    if ((compute == ZT_F16 && (a_dt == ZT_BF16 || b_dt == ZT_BF16)) ||
        (compute != ZT_F16 && (a_dt == ZT_F16 || b_dt == ZT_F16)))
        return zt_fail(err, ZT_EINPUT,
                       "matmul M=%d N=%d K=%d: unsupported dtypes A=%s B=%s compute=%s",
                       M, N, K, zt_dtype_name(a_dt), zt_dtype_name(b_dt), zt_dtype_name(compute));
    if (M == 0 || N == 0)
        return ZT_OK;
    if (!C || ((!A || !B) && K > 0))
        return zt_fail(err, ZT_EINPUT, "matmul M=%d N=%d K=%d: NULL buffer", M, N, K);
    *work = K == 0 ? ZT_MM_SCALE_C : ZT_MM_PRODUCT;
    return ZT_OK;
}

int zt_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N,
              int K, int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err)
{
    zt_mm_work work;
    const int bad = zt_matmul_check_args(C, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (bad)
        return bad;
    if (work == ZT_MM_NOTHING)
        return ZT_OK;
    if (work == ZT_MM_SCALE_C) { /* empty sum: C = beta*C */
        if (beta == 0.0f)
            memset(C, 0, (size_t)M * N * sizeof *C);
        return ZT_OK;
    }

    if (zt_matmul_bf16_path(compute) == ZT_BF16_PATH_PACKED)
        return zt_gemm_bf16(C, A, a_dt, B, b_dt, M, N, K, trans_a != 0, trans_b != 0, beta, err);

    dnnl_data_type_t dt = prim_dtype(compute);
    mm_entry *e = entry_get(M, N, K, trans_a != 0, trans_b != 0, beta != 0.0f, dt, err);
    if (!e)
        return err ? err->code : ZT_EFAIL;

    const void *a = prepare_input(&g.conv_a, A, a_dt, compute, dt, (size_t)M * K);
    const void *b = prepare_input(&g.conv_b, B, b_dt, compute, dt, (size_t)K * N);
    if (!a || !b)
        return zt_fail(err, ZT_EFAIL, "oneDNN matmul M=%d N=%d K=%d: out of memory for input conversion",
                       M, N, K);
    return entry_run(e, C, a, b, err);
}

const char *zt_matmul_dnnl_version(void)
{
    static char s[48];
    if (!s[0]) {
        const dnnl_version_t *v = dnnl_version();
        snprintf(s, sizeof s, "%d.%d.%d", v->major, v->minor, v->patch);
    }
    return s;
}

const char *zt_matmul_isa_name(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "SSE4.1";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2 + VNNI";
    case dnnl_cpu_isa_avx512_mic: return "AVX-512 (Xeon Phi)";
    case dnnl_cpu_isa_avx512_mic_4ops: return "AVX-512 (Xeon Phi, 4FMAPS)";
    case dnnl_cpu_isa_avx512_core: return "AVX-512";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX-512 + VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX-512 + BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX-512 + AMX";
    default: return "unknown";
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (every thread), in seconds. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double zt_matmul_peak_gflops(zt_dtype compute) { return zt_matmul_peak_rounds(compute, 1, 0.4, NULL, NULL); }

double zt_matmul_peak_rounds(zt_dtype compute, int rounds, double round_s, double *slowest, double *share)
{
    /* Square 1024^3 (2.1 GFLOP a product), inputs already in the primitive's
     * dtype so the rate is the primitive's, not the conversion's.  0 on failure. */
    enum { S = 1024 };
    const double flops = 2.0 * S * S * S;
    if (compute == ZT_F16)
        compute = ZT_F32; /* emulated on fp32 products */
    dnnl_data_type_t dt = prim_dtype(compute);
    /* Without native bf16 the product bf16 compute runs is the packed kernel,
     * on bf16 inputs: that is what its MFU divides by. */
    const int packed = zt_matmul_bf16_path(compute) == ZT_BF16_PATH_PACKED;
    size_t esz = dt == dnnl_bf16 || packed ? 2 : 4, n = (size_t)S * S;
    void *a = zt_alloc(ZT_MEM_OTHER, n * esz), *b = zt_alloc(ZT_MEM_OTHER, n * esz);
    float *c = zt_alloc(ZT_MEM_OTHER, n * sizeof(float));
    double best = 0.0, worst = 0.0, most = 0.0;
    const int nthr = omp_get_max_threads();
    zt_err err;
    if (!a || !b || !c)
        goto done;
    /* Small varied values: no denormals, no special cases in the timing. */
    for (size_t i = 0; i < n; i++) {
        float va = (float)((i * 7) % 13) * 0.01f - 0.06f, vb = (float)((i * 5) % 11) * 0.01f - 0.05f;
        if (esz == 2) {
            ((uint16_t *)a)[i] = zt_f32_to_bf16(va);
            ((uint16_t *)b)[i] = zt_f32_to_bf16(vb);
        } else {
            ((float *)a)[i] = va;
            ((float *)b)[i] = vb;
        }
    }
    mm_entry *e = packed ? NULL : entry_get(S, S, S, 0, 0, 0, dt, &err);
    if (!packed && !e)
        goto done;
#define MM_PEAK_RUN()                                                                          \
    (packed ? zt_gemm_bf16(c, a, ZT_BF16, b, ZT_BF16, S, S, S, 0, 0, 0.0f, &err)               \
            : entry_run(e, c, a, b, &err))
    for (int w = 0; w < 2; w++) /* warm-up: JIT, page faults, caches */
        if (MM_PEAK_RUN())
            goto done;
    /* Each round runs at least 3 products and round_s seconds; a round slowed by
     * another process only lowers its own rate, so the best round is the peak when
     * some round had the cores to itself.  Whether one did: the OpenMP threads run
     * (or spin) the whole round, so this process's CPU time is wall x threads when
     * nothing else runs on its cores, and less by what other processes took. */
    for (int r = 0; r < (rounds > 0 ? rounds : 1); r++) {
        int iters = 0;
        double t0 = now_s(), c0 = cpu_s(), t;
        do {
            if (MM_PEAK_RUN())
                goto done;
            iters++;
            t = now_s() - t0;
        } while (t < round_s || iters < 3);
        double rate = flops * iters / t * 1e-9, got = (cpu_s() - c0) / (t * nthr);
        if (!isfinite(rate))
            continue;
        most = got > most ? got : most;
        best = rate > best ? rate : best;
        worst = worst == 0.0 || rate < worst ? rate : worst;
    }
#undef MM_PEAK_RUN
done:
    zt_free(ZT_MEM_OTHER, a, n * esz);
    zt_free(ZT_MEM_OTHER, b, n * esz);
    zt_free(ZT_MEM_OTHER, c, n * sizeof(float));
    if (slowest)
        *slowest = worst;
    if (share)
        *share = most;
    return best;
}

void zt_matmul_shutdown(void)
{
    for (int i = 0; i < g.n; i++)
        entry_destroy(&g.entries[i]);
    zt_free(ZT_MEM_OTHER, g.entries, (size_t)g.cap * sizeof *g.entries);
    buf_release(&g.conv_a);
    buf_release(&g.conv_b);
    buf_release(&g.scratchpad);
    zt_gemm_bf16_shutdown();
    if (g.stream)
        dnnl_stream_destroy(g.stream);
    if (g.engine)
        dnnl_engine_destroy(g.engine);
    memset(&g, 0, sizeof g);
}
