/* matmul.cu — matrix products through cuBLASLt, matmul.h's contract on the device.
 *
 *   C (M,N) fp32 = beta*C + op(A)(M,K) . op(B)(K,N),  beta 0 or 1, row-major, dense;
 *   op(A) = A^T when trans_a (A stored (K,M)), op(B) = B^T when trans_b (B stored (N,K)).
 *
 * The operands are taken in the compute dtype, as the CPU does: compute ZT_BF16 means
 * bf16 operands with fp32 accumulation (fp32 inputs are rounded to bf16, nearest even,
 * into scratch first — what autocast does), ZT_F16 the same with fp16, ZT_F32 fp32
 * operands (bf16 inputs are widened, exactly).  fp32 products run CUBLAS_COMPUTE_32F,
 * true fp32 arithmetic, never TF32 (docs/gpu.md).
 *
 * Row-major onto cuBLASLt's column-major.  A row-major (r x c) matrix with leading
 * dimension c is, read column-major, its transpose (c x r) with the same leading
 * dimension.  So the row-major C (M x N) is the column-major C^T (N x M), ld N, and
 *   C^T = (op(A) op(B))^T = op(B)^T op(A)^T,
 * a column-major product with m = N, n = M, k = K whose first operand is B's memory and
 * whose second is A's:
 *   first  (op(B)^T, N x K):  trans_b = 0: B (K,N) row-major is col-major (N x K), ld N:
 *                                          used as is (OP_N), layout N x K, ld N;
 *                             trans_b = 1: B (N,K) row-major is col-major (K x N), ld K:
 *                                          transposed (OP_T), layout K x N, ld K;
 *   second (op(A)^T, K x M):  trans_a = 0: A (M,K) row-major is col-major (K x M), ld K:
 *                                          OP_N, layout K x M, ld K;
 *                             trans_a = 1: A (K,M) row-major is col-major (M x K), ld M:
 *                                          OP_T, layout M x K, ld M;
 *   result C^T: layout N x M, ld N, fp32, C and D the same buffer (beta*C read in place).
 * No data moves: the transposes are only descriptor flags.
 *
 * Algorithms: per distinct (M, N, K, transposes, operand dtype, TF32 or not, operand
 * alignment) the descriptors are built once and cublasLtMatmulAlgoGetHeuristic picks
 * the algorithm; the plan is cached, so the training step only ever calls
 * cublasLtMatmul.  The alignment asked of the heuristic is the operands' true
 * alignment capped at 16 bytes, so the choice depends on the shape (and a pointer's
 * offset only when it is not even 16-byte aligned): two runs that place the same
 * tensors at different offsets get the same algorithm and the same bits.  One
 * workspace of ZT_CU_MM_WORKSPACE bytes is allocated at set-up.  cuBLASLt's matmul is
 * deterministic for a given algorithm (no atomics in its reductions on one stream). */
#include "entries.cuh"
#include "fast.h"

extern "C" {
#include "../matmul.h"
#include "../tune.h"
}

#include <cublasLt.h>
#include <string.h>

#define ZT_CU_MM_WORKSPACE ((size_t)32 << 20) /* what cuBLAS recommends for Hopper */
#define MM_CACHE 256

#define LT_TRY(err, call, key)                                                                          \
    do {                                                                                                \
        cublasStatus_t zt_s_ = (call);                                                                  \
        if (zt_s_ != CUBLAS_STATUS_SUCCESS)                                                             \
            return zt_fail((err), ZT_EFAIL, "cuBLASLt matmul M=%d N=%d K=%d: %s:%d: %s: %s", (key)->M,  \
                           (key)->N, (key)->K, __FILE__, __LINE__, #call, cublasLtGetStatusString(zt_s_)); \
    } while (0)

typedef struct mm_key {
    int M, N, K, trans_a, trans_b;
    zt_dtype opd;
    unsigned align_a, align_b, align_c;
    zt_dtype out; /* C and D: fp32 (the table's matmul), or bf16 (fast.h's zt_cu_fast_matmul_out) */
    int bias;          /* 1: cuBLASLt's BIAS epilogue, a vector of N in bias_dt (zt_cu_fast_linear_act16) */
    zt_dtype bias_dt;
} mm_key;

typedef struct mm_plan {
    mm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t first, second, out; /* B's memory, A's memory, C (see the top) */
    cublasLtMatmulAlgo_t algo;
} mm_plan;

static struct {
    cublasLtHandle_t lt;
    void *workspace;
    mm_plan cache[MM_CACHE];
    int ncache, next_evict;
    void *conv[2]; /* operand conversion scratch (A, B), only grows */
    size_t conv_bytes[2];
    zt_tune_cache tune; /* the timed winner per key (tune.h); on unless ZT_MATMUL_TUNE=0 */
} g;

static cudaDataType_t lt_type(zt_dtype dt)
{
    return dt == ZT_BF16 ? CUDA_R_16BF : dt == ZT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static void plan_destroy(mm_plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->first) cublasLtMatrixLayoutDestroy(p->first);
    if (p->second) cublasLtMatrixLayoutDestroy(p->second);
    if (p->out) cublasLtMatrixLayoutDestroy(p->out);
    memset(p, 0, sizeof *p);
}

/* Descriptors and the heuristic's algorithm for one key (the mapping at the top); with
 * cands, also the heuristic's top candidates in its order (up to ZT_TUNE_MAX, *ncand
 * of them, the first the plan's algo), for tuning. */
static int plan_build(cublasLtHandle_t lt, const mm_key *k, mm_plan *p, cublasLtMatmulAlgo_t *cands, int *ncand,
                      zt_err *err)
{
    memset(p, 0, sizeof *p);
    p->key = *k;
    const cudaDataType_t t = lt_type(k->opd);
    const cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    const cublasOperation_t op_first = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[ZT_TUNE_MAX];
    memset(res, 0, sizeof res);
    const int want = cands ? ZT_TUNE_MAX : 1;
    int found = 0;
    int rc = ZT_OK;
    const uint64_t ws = ZT_CU_MM_WORKSPACE;
    /* a small lambda-free way to release pref on every path */
    do {
#define STEP(call)                                                                                  \
        {                                                                                           \
            cublasStatus_t s_ = (call);                                                             \
            if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
                rc = zt_fail(err, ZT_EFAIL, "cuBLASLt matmul M=%d N=%d K=%d (%s): %s: %s", k->M, k->N, \
                             k->K, zt_dtype_name(k->opd), #call, cublasLtGetStatusString(s_));      \
                break;                                                                              \
            }                                                                                       \
        }
        STEP(cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F));
        STEP(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
        STEP(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
        STEP(k->trans_b ? cublasLtMatrixLayoutCreate(&p->first, t, (uint64_t)k->K, (uint64_t)k->N, k->K)
                        : cublasLtMatrixLayoutCreate(&p->first, t, (uint64_t)k->N, (uint64_t)k->K, k->N));
        STEP(k->trans_a ? cublasLtMatrixLayoutCreate(&p->second, t, (uint64_t)k->M, (uint64_t)k->K, k->M)
                        : cublasLtMatrixLayoutCreate(&p->second, t, (uint64_t)k->K, (uint64_t)k->M, k->K));
        STEP(cublasLtMatrixLayoutCreate(&p->out, lt_type(k->out), (uint64_t)k->N, (uint64_t)k->M, k->N));
        if (k->bias) { /* D^T (N x M) + the bias down its rows: D (M, N) + b (N) per row */
            const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
            const cudaDataType_t bt = lt_type(k->bias_dt);
            STEP(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
            STEP(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        }
        STEP(cublasLtMatmulPreferenceCreate(&pref));
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        /* first operand is B's memory, second A's (cuBLASLt's "A" and "B") */
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_b,
                                                  sizeof k->align_b));
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_a,
                                                  sizeof k->align_a));
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_c,
                                                  sizeof k->align_c));
        STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
                                                  sizeof k->align_c));
        STEP(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->first, p->second, p->out, p->out, pref, want, res, &found));
#undef STEP
        if (found < 1 || res[0].state != CUBLAS_STATUS_SUCCESS)
            rc = zt_fail(err, ZT_EFAIL, "cuBLASLt matmul M=%d N=%d K=%d (%s%s%s): no algorithm for this shape",
                         k->M, k->N, k->K, zt_dtype_name(k->opd), k->trans_a ? ", A^T" : "",
                         k->trans_b ? ", B^T" : "");
        else
            p->algo = res[0].algo;
        for (int i = 0; cands && i < found && res[i].state == CUBLAS_STATUS_SUCCESS; i++)
            cands[i] = res[i].algo, *ncand = i + 1;
    } while (0);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (rc) plan_destroy(p);
    return rc;
}

static int run_plan(cublasLtHandle_t lt, const mm_plan *p, void *D, const void *C, const void *a, const void *b,
                    float beta, const void *bias, void *workspace, cudaStream_t stream, zt_err *err);

/* One tuning at a key's first use: the operands of that call, the output the timed
 * products write (the call's own D when it overwrites D anyway, else scratch), the
 * candidates and the events. */
typedef struct tune_run {
    mm_plan plan; /* a copy of the new plan, its algo set to each candidate in turn */
    const cublasLtMatmulAlgo_t *cands;
    void *out;
    const void *a, *b, *bias;
    cudaEvent_t e0, e1;
} tune_run;

/* the mean time of 3 products with candidate i after one untimed one (ms); -1 when it
 * cannot run (its failure is not the run's: another candidate is taken) */
static double time_candidate(void *ctx, int i)
{
    tune_run *t = (tune_run *)ctx;
    t->plan.algo = t->cands[i];
    zt_err scratch_err;
    for (int r = 0; r < 4; r++) {
        if (r == 1 && cudaEventRecord(t->e0, zt_cu.stream) != cudaSuccess)
            return -1.0;
        if (run_plan(g.lt, &t->plan, t->out, t->out, t->a, t->b, 0.0f, t->bias, g.workspace, zt_cu.stream,
                     &scratch_err))
            return -1.0;
    }
    float ms = 0.0f;
    if (cudaEventRecord(t->e1, zt_cu.stream) != cudaSuccess || cudaEventSynchronize(t->e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, t->e0, t->e1) != cudaSuccess) {
        cudaGetLastError();
        return -1.0;
    }
    return ms / 3.0;
}

/* p->algo: the fastest of the candidates (tune.h), timed at the key's first use
 * outside a stream capture (a captured stream cannot be waited on: the heuristic's
 * first, as with tuning off).  D (with beta 0 and C == D) or a scratch output takes the
 * timed products; without memory for the scratch every candidate fails and the first
 * is kept. */
static void plan_tune(mm_plan *p, const cublasLtMatmulAlgo_t *cands, int ncand, void *D, int d_is_free,
                      const void *a, const void *b, const void *bias)
{
    static_assert(sizeof(mm_key) <= ZT_TUNE_KEY_BYTES, "a product's key fits the tuning cache's");
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (!g.tune.on || ncand < 2 || cudaStreamIsCapturing(zt_cu.stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return;
    }
    tune_run t;
    memset(&t, 0, sizeof t);
    t.plan = *p, t.cands = cands, t.a = a, t.b = b, t.bias = bias, t.out = d_is_free ? D : NULL;
    const size_t bytes = (size_t)p->key.M * p->key.N * zt_dtype_size(p->key.out);
    if (!t.out && cudaMalloc(&t.out, bytes) != cudaSuccess)
        t.out = NULL;
    else if (!d_is_free)
        zt_mem_account(ZT_MEM_OTHER, bytes);
    int w = 0;
    if (t.out && cudaEventCreate(&t.e0) == cudaSuccess && cudaEventCreate(&t.e1) == cudaSuccess)
        w = zt_tune_choose(&g.tune, &p->key, sizeof p->key, ncand, time_candidate, &t);
    p->algo = cands[w];
    if (t.e0) cudaEventDestroy(t.e0);
    if (t.e1) cudaEventDestroy(t.e1);
    if (t.out && !d_is_free) {
        cudaFree(t.out); /* waits for the timed products */
        zt_mem_unaccount(ZT_MEM_OTHER, bytes);
    }
    cudaGetLastError();
}

/* The plan for k, built and tuned at its first use on this call's operands (see
 * plan_tune for D and d_is_free). */
static const mm_plan *plan_get(const mm_key *k, void *D, int d_is_free, const void *a, const void *b,
                               const void *bias, zt_err *err)
{
    for (int i = 0; i < g.ncache; i++)
        if (!memcmp(&g.cache[i].key, k, sizeof *k))
            return &g.cache[i];
    mm_plan *slot;
    if (g.ncache < MM_CACHE) {
        slot = &g.cache[g.ncache];
    } else { /* more shapes than any model has: replace the oldest */
        slot = &g.cache[g.next_evict];
        g.next_evict = (g.next_evict + 1) % MM_CACHE;
        plan_destroy(slot);
    }
    cublasLtMatmulAlgo_t cands[ZT_TUNE_MAX];
    int ncand = 0;
    if (plan_build(g.lt, k, slot, cands, &ncand, err))
        return NULL;
    plan_tune(slot, cands, ncand, D, d_is_free, a, b, bias);
    if (slot == &g.cache[g.ncache])
        g.ncache++;
    return slot;
}

/* The largest power of two dividing the address, capped at 16 bytes (see the top). */
static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 16;
    while (al > 1 && (a & (al - 1)))
        al >>= 1;
    return al;
}

/* x as an operand in dtype opd: x itself, or converted into conversion scratch i. */
static const void *operand(int i, const void *x, zt_dtype x_dt, zt_dtype opd, size_t n, zt_err *err, int *rc)
{
    if (x_dt == opd)
        return x;
    size_t bytes = n * zt_dtype_size(opd);
    if (bytes > g.conv_bytes[i]) {
        if (g.conv[i]) {
            ZT_CU(cudaStreamSynchronize(zt_cu.stream));
            cudaFree(g.conv[i]);
            zt_mem_unaccount(ZT_MEM_OTHER, g.conv_bytes[i]);
            g.conv[i] = NULL;
            g.conv_bytes[i] = 0;
        }
        if (cudaMalloc(&g.conv[i], bytes) != cudaSuccess) {
            cudaGetLastError();
            g.conv[i] = NULL;
            *rc = zt_fail(err, ZT_EFAIL, "cuBLASLt matmul: out of device memory for a %zu-byte operand conversion",
                          bytes);
            return NULL;
        }
        zt_mem_account(ZT_MEM_OTHER, bytes);
        g.conv_bytes[i] = bytes;
    }
    zt_cu_convert(g.conv[i], opd, x, x_dt, n);
    return g.conv[i];
}

/* D = op(A) op(B) + beta C [+ bias], with C and D of the plan's output layout (C may be
 * D); the bias pointer is set on the plan's descriptor at each call (read as the call is
 * queued; a captured call keeps it) */
static int run_plan(cublasLtHandle_t lt, const mm_plan *p, void *D, const void *C, const void *a, const void *b,
                    float beta, const void *bias, void *workspace, cudaStream_t stream, zt_err *err)
{
    const float alpha = 1.0f;
    if (p->key.bias)
        LT_TRY(err, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
               &p->key);
    LT_TRY(err,
           cublasLtMatmul(lt, p->op, &alpha, b, p->first, a, p->second, &beta, C, p->out, D, p->out, &p->algo,
                          workspace, ZT_CU_MM_WORKSPACE, stream),
           &p->key);
    return ZT_OK;
}

/* D (M, N) in out = op(A) op(B) + beta C, C in out too (C == D: in place); the argument
 * rules are checked by the callers */
static int product(void *D, zt_dtype out, const void *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt,
                   int M, int N, int K, int trans_a, int trans_b, float beta, const void *bias, zt_dtype bias_dt,
                   zt_dtype compute, zt_err *err)
{
    int rc = ZT_OK;
    const void *a = operand(0, A, a_dt, compute, (size_t)M * K, err, &rc);
    const void *b = a ? operand(1, B, b_dt, compute, (size_t)K * N, err, &rc) : NULL;
    if (!a || !b)
        return rc;
    mm_key k;
    memset(&k, 0, sizeof k); /* the key is compared with memcmp: no stray padding bytes */
    k.M = M, k.N = N, k.K = K, k.trans_a = trans_a != 0, k.trans_b = trans_b != 0;
    k.opd = compute;
    const unsigned ad = align_of(D), ac = align_of(C);
    k.align_a = align_of(a), k.align_b = align_of(b), k.align_c = ad < ac ? ad : ac;
    k.out = out;
    k.bias = bias != NULL, k.bias_dt = bias ? bias_dt : ZT_F32;
    /* D may take the timed products when this call overwrites it anyway */
    const mm_plan *p = plan_get(&k, D, beta == 0.0f && C == D, a, b, bias, err);
    if (!p)
        return err ? err->code : ZT_EFAIL;
    return run_plan(g.lt, p, D, C, a, b, beta, bias, g.workspace, zt_cu.stream, err);
}

int zt_cu_fast_matmul_out(void *D, zt_dtype d_dt, const void *residual, const void *A, zt_dtype a_dt, const void *B,
                          zt_dtype b_dt, int M, int N, int K, int trans_a, int trans_b, zt_dtype compute, zt_err *err)
{
    if (zt_result_dtype_check("matmul", M, N, K, d_dt, compute, err))
        return ZT_EINPUT;
    const float beta = residual ? 1.0f : 0.0f;
    zt_mm_work work;
    const int bad = zt_matmul_check_args((const float *)D, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (bad || work == ZT_MM_NOTHING)
        return bad;
    const size_t bytes = (size_t)M * N * zt_dtype_size(d_dt);
    if (work == ZT_MM_SCALE_C) { /* empty sum: D = the residual, or 0 */
        if (!residual)
            ZT_CU_TRY(err, cudaMemsetAsync(D, 0, bytes, zt_cu.stream));
        else if (residual != D)
            ZT_CU_TRY(err, cudaMemcpyAsync(D, residual, bytes, cudaMemcpyDeviceToDevice, zt_cu.stream));
        return ZT_OK;
    }
    return product(D, d_dt, residual ? residual : D, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, NULL, ZT_F32,
                   compute, err);
}

/* y16 = bf16(x w^T + b) in one product: cuBLASLt's BIAS epilogue adds b (in the result's
 * dtype, bf16, its default bias type) to the fp32 sum before the one rounding; without
 * a bias, the product with a bf16 result (zt_cu_fast_matmul_out); with a bias in another
 * dtype, or fp32 compute (refused there), the exact table's composition (act16.cu). */
int zt_cu_fast_linear_act16(uint16_t *y16, const void *x, zt_dtype x_dt, const void *w, zt_dtype w_dt, const void *b,
                            zt_dtype b_dt, int N, int out, int in, zt_dtype compute, zt_err *err)
{
    if (!b && compute == ZT_BF16)
        return zt_cu_fast_matmul_out(y16, ZT_BF16, NULL, x, x_dt, w, w_dt, N, out, in, 0, 1, compute, err);
    if (!b || b_dt != ZT_BF16 || compute != ZT_BF16)
        return zt_cu_linear_act16(y16, x, x_dt, w, w_dt, b, b_dt, N, out, in, compute, err);
    zt_mm_work work;
    const int bad = zt_matmul_check_args((const float *)y16, x, x_dt, w, w_dt, N, out, in, 0.0f, compute, &work, err);
    if (bad || work != ZT_MM_PRODUCT)
        return bad ? bad : zt_cu_linear_act16(y16, x, x_dt, w, w_dt, b, b_dt, N, out, in, compute, err);
    return product(y16, ZT_BF16, y16, x, x_dt, w, w_dt, N, out, in, 0, 1, 0.0f, b, b_dt, compute, err);
}

int zt_cu_matmul(float *C, const void *A, zt_dtype a_dt, const void *B, zt_dtype b_dt, int M, int N, int K,
                 int trans_a, int trans_b, float beta, zt_dtype compute, zt_err *err)
{
    /* the CPU's argument rules, from their one home (matmul.h) */
    zt_mm_work work;
    const int bad = zt_matmul_check_args(C, A, a_dt, B, b_dt, M, N, K, beta, compute, &work, err);
    if (bad)
        return bad;
    if (work == ZT_MM_NOTHING)
        return ZT_OK;
    if (work == ZT_MM_SCALE_C) { /* empty sum: C = beta*C */
        if (beta == 0.0f)
            ZT_CU_TRY(err, cudaMemsetAsync(C, 0, (size_t)M * N * sizeof *C, zt_cu.stream));
        return ZT_OK;
    }
    return product(C, ZT_F32, C, A, a_dt, B, b_dt, M, N, K, trans_a, trans_b, beta, NULL, ZT_F32, compute, err);
}

int zt_cu_matmul_init(zt_err *err)
{
    memset(&g.tune, 0, sizeof g.tune);
    const int bad = zt_tune_setting(&g.tune.on, err); /* a bad ZT_MATMUL_TUNE: before anything is made */
    if (bad)
        return bad;
    cublasStatus_t s = cublasLtCreate(&g.lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        return zt_fail(err, ZT_EFAIL, "cuBLASLt: cublasLtCreate: %s", cublasLtGetStatusString(s));
    if (cudaMalloc(&g.workspace, ZT_CU_MM_WORKSPACE) != cudaSuccess) {
        cudaGetLastError();
        cublasLtDestroy(g.lt);
        g.lt = NULL;
        return zt_fail(err, ZT_EFAIL, "cuBLASLt: out of device memory for the %zu-byte workspace",
                       ZT_CU_MM_WORKSPACE);
    }
    zt_mem_account(ZT_MEM_OTHER, ZT_CU_MM_WORKSPACE);
    return ZT_OK;
}

void zt_cu_matmul_shutdown(void)
{
    for (int i = 0; i < g.ncache; i++)
        plan_destroy(&g.cache[i]);
    g.ncache = g.next_evict = 0;
    for (int i = 0; i < 2; i++)
        if (g.conv[i]) {
            cudaFree(g.conv[i]);
            zt_mem_unaccount(ZT_MEM_OTHER, g.conv_bytes[i]);
            g.conv[i] = NULL;
            g.conv_bytes[i] = 0;
        }
    if (g.workspace) {
        cudaFree(g.workspace);
        zt_mem_unaccount(ZT_MEM_OTHER, ZT_CU_MM_WORKSPACE);
        g.workspace = NULL;
    }
    if (g.lt) {
        cublasLtDestroy(g.lt);
        g.lt = NULL;
    }
}

/* ---- the peak rate, for `ztrain env` ------------------------------------------------- */

__global__ void peak_fill(void *x, zt_dtype dt, size_t n)
{
    /* values in [-1, 1) from a hash of the index: products of random-looking data,
     * so the rate is not that of zeros */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 15;
        zt_d_store(x, dt, i, (float)(h & 0xffff) / 32768.0f - 1.0f);
    }
}

/* Square products of side S in the compute dtype, on device dev, with a handle,
 * stream and buffers of their own (the backend's table may live on another device):
 * 2 untimed, then as many as fit in about 0.3 s (at least 5), timed by events. */
int zt_cu_matmul_peak(int dev, zt_dtype compute, double *tflops, zt_err *err)
{
    *tflops = 0.0;
    int prev = 0;
    ZT_CU_TRY(err, cudaGetDevice(&prev));
    ZT_CU_TRY(err, cudaSetDevice(dev));
    size_t free_b = 0, total_b = 0;
    ZT_CU_TRY(err, cudaMemGetInfo(&free_b, &total_b));
    int S = 8192;
    const size_t es = zt_dtype_size(compute);
    while (S > 512 && (2 * es + 4) * (size_t)S * S + ZT_CU_MM_WORKSPACE > free_b / 2)
        S /= 2;
    mm_key k;
    memset(&k, 0, sizeof k);
    k.M = k.N = k.K = S;
    k.trans_b = 1; /* the forward's x . W^T */
    k.opd = compute;
    k.align_a = k.align_b = k.align_c = 16;
    cublasLtHandle_t lt = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    void *a = NULL, *b = NULL, *ws = NULL;
    float *c = NULL;
    mm_plan p;
    memset(&p, 0, sizeof p);
    int rc = ZT_OK;
    do {
        if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
            lt = NULL;
            rc = zt_fail(err, ZT_EFAIL, "device %d: cublasLtCreate failed", dev);
            break;
        }
        if (cudaStreamCreate(&st) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
            cudaEventCreate(&e1) != cudaSuccess || cudaMalloc(&a, es * S * S) != cudaSuccess ||
            cudaMalloc(&b, es * S * S) != cudaSuccess || cudaMalloc((void **)&c, 4 * (size_t)S * S) != cudaSuccess ||
            cudaMalloc(&ws, ZT_CU_MM_WORKSPACE) != cudaSuccess) {
            rc = zt_fail(err, ZT_EFAIL, "device %d: setting up the peak measurement: %s", dev,
                         cudaGetErrorString(cudaGetLastError()));
            break;
        }
        peak_fill<<<1024, 256, 0, st>>>(a, compute, (size_t)S * S);
        peak_fill<<<1024, 256, 0, st>>>(b, compute, (size_t)S * S);
        cudaError_t le = cudaGetLastError();
        if (le != cudaSuccess) {
            rc = zt_fail(err, ZT_EFAIL, "device %d: peak_fill: %s", dev, cudaGetErrorString(le));
            break;
        }
        if ((rc = plan_build(lt, &k, &p, NULL, NULL, err)))
            break;
        for (int i = 0; i < 2 && !rc; i++)
            rc = run_plan(lt, &p, c, c, a, b, 0.0f, NULL, ws, st, err);
        if (rc) break;
        /* one timed product sizes the run */
        cudaEventRecord(e0, st);
        rc = run_plan(lt, &p, c, c, a, b, 0.0f, NULL, ws, st, err);
        cudaEventRecord(e1, st);
        if (rc || cudaEventSynchronize(e1) != cudaSuccess) {
            if (!rc) rc = zt_fail(err, ZT_EFAIL, "device %d: %s", dev, cudaGetErrorString(cudaGetLastError()));
            break;
        }
        float ms1 = 0.0f;
        cudaEventElapsedTime(&ms1, e0, e1);
        int reps = ms1 > 0.0f ? (int)(300.0f / ms1) : 5;
        reps = reps < 5 ? 5 : reps > 200 ? 200 : reps;
        cudaEventRecord(e0, st);
        for (int i = 0; i < reps && !rc; i++)
            rc = run_plan(lt, &p, c, c, a, b, 0.0f, NULL, ws, st, err);
        cudaEventRecord(e1, st);
        if (rc) break;
        if (cudaEventSynchronize(e1) != cudaSuccess) {
            rc = zt_fail(err, ZT_EFAIL, "device %d: %s", dev, cudaGetErrorString(cudaGetLastError()));
            break;
        }
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        *tflops = 2.0 * S * (double)S * S * reps / (ms * 1e-3) / 1e12;
    } while (0);
    plan_destroy(&p);
    cudaFree(ws);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (st) cudaStreamDestroy(st);
    if (lt) cublasLtDestroy(lt);
    cudaGetLastError(); /* leave no error behind for the next call */
    cudaSetDevice(prev);
    return rc;
}
