/* test_async_step.c — the fast mode's asynchronous step (docs/gpu.md), on the CPU
 * and on the emulated device:
 *   - adamw_unit (one pass over a unit's flat shard, decay by segment, clip and skip
 *     read from the step scalars) gives per-parameter AdamW's bits, and its audit;
 *   - the verdict (skip on an inf or NaN, the clipping coefficient) is the exact
 *     step's rule;
 *   - a fast-mode step on the emulated device makes exactly one host wait (its
 *     readback), where the exact step makes one per unit and more: the fused lm-head
 *     cross-entropy (lmhead_xent) leaves its loss in the step scalars too;
 *   - the host runs ahead across steps: step n's numbers are read after step n+1's
 *     forward and backward are queued, and nothing waits between queuing a step and
 *     the next step's passes; the numbers, the skips (the schedule's count), the
 *     non-finite stop and a stop request's checkpoint are those of the step they
 *     belong to;
 *   - 20 steps in fast mode stay within bf16 error of exact mode. */
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/comm/comm.h"
#include "../src/core/dtype.h"
#include "../src/engine/loss_scale.h"
#include "../src/kernels/adamw.h"
#include "../src/kernels/backend.h"
#include "../src/kernels/matmul.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "emu_train.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n random values in dt (m and v: v non-negative) */
static void *fill(zt_dtype dt, size_t n, float scale, int positive)
{
    void *b = malloc(n * zt_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float x = frand() * scale;
        zt_store_f32(b, dt, i, positive ? fabsf(x) : x);
    }
    return b;
}

static void *dup_bytes(const void *src, size_t bytes)
{
    void *b = malloc(bytes);
    memcpy(b, src, bytes);
    return b;
}

/* Four segments: decay, a gap, no decay, decay. */
static const zt_adamw_seg SEGS[] = {{0, 1}, {100, -1}, {130, 0}, {600, 1}};
#define NSEG 4
#define N 1000

static void unit_case(zt_dtype dt, int with_comp, zt_dtype cast_dt)
{
    const size_t es = zt_dtype_size(dt), bytes = N * es;
    const int cast = dt == ZT_F32;
    void *p = fill(dt, N, 1.0f, 0), *m = fill(dt, N, 0.01f, 0), *v = fill(dt, N, 1e-4f, 1);
    void *g = fill(dt, N, 0.1f, 0), *c = with_comp ? fill(dt, N, 1e-3f, 0) : NULL;
    const size_t cbytes = N * zt_dtype_size(cast_dt);
    /* A: a call per parameter, as the exact step does */
    void *pa = dup_bytes(p, bytes), *ma = dup_bytes(m, bytes), *va = dup_bytes(v, bytes);
    void *ca = c ? dup_bytes(c, bytes) : NULL, *xa = calloc(1, cbytes);
    zt_adamw_step s = {.lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .t = 3,
                       .clip = 0.75f};
    zt_adamw_audit audit = {0};
    for (int k = 0; k < NSEG; k++) {
        size_t lo = SEGS[k].lo, hi = k + 1 < NSEG ? SEGS[k + 1].lo : N;
        if (SEGS[k].kind < 0)
            continue;
        zt_adamw_step st = s;
        st.weight_decay = SEGS[k].kind ? s.weight_decay : 0.0;
        size_t cs = zt_dtype_size(cast_dt);
        zt_adamw_step_shard((char *)pa + lo * es, (char *)ma + lo * es, (char *)va + lo * es, (char *)g + lo * es,
                            ca ? (char *)ca + lo * es : NULL, dt, hi - lo, &st, cast ? (char *)xa + lo * cs : NULL,
                            cast_dt, &audit);
    }
    /* B: one call over the unit, clip, lr and t from the scalars (s.clip, s.lr and
     * s.t are ignored: the step's inputs are on the device) */
    void *pb = dup_bytes(p, bytes), *mb = dup_bytes(m, bytes), *vb = dup_bytes(v, bytes);
    void *cb = c ? dup_bytes(c, bytes) : NULL, *xb = calloc(1, cbytes);
    zt_step_scalars sc = {.clip = 0.75f, .audit_updated = 5.0}; /* the audit adds to what is there */
    zt_adamw_unit_inputs(&sc, &s, s.lr, s.t);
    zt_adamw_step sb = s;
    sb.clip = 123.0f;
    sb.lr = 7.0;
    sb.t = 1;
    const zt_backend *be = zt_backend_cpu();
    be->adamw_unit(pb, mb, vb, g, cb, dt, N, SEGS, NSEG, &sb, &sc, cast ? xb : NULL, cast_dt);
    ZT_CHECK(!memcmp(pa, pb, bytes) && !memcmp(ma, mb, bytes) && !memcmp(va, vb, bytes));
    ZT_CHECK(!c || !memcmp(ca, cb, bytes));
    ZT_CHECK(!cast || !memcmp(xa, xb, cbytes));
    ZT_CHECK(!memcmp((char *)pb + 100 * es, (char *)p + 100 * es, 30 * es)); /* the gap is untouched */
    ZT_CHECK(memcmp(pb, p, 100 * es) != 0);                                 /* the rest moved */
    ZT_CHECK(sc.audit_updated == 5.0 + audit.updated && sc.audit_lost == audit.lost && audit.updated > 0);
    ZT_CHECK_CLOSE(sc.audit_ratio_sum, audit.ratio_sum, 1e-12, 1e-300);
    /* skip: nothing moves, the audit stays */
    zt_step_scalars skip = {.clip = 1.0f, .skip = 1};
    zt_adamw_unit_inputs(&skip, &s, s.lr, s.t);
    void *pc = dup_bytes(p, bytes);
    be->adamw_unit(pc, mb, vb, g, cb, dt, N, SEGS, NSEG, &sb, &skip, NULL, cast_dt);
    ZT_CHECK(!memcmp(pc, p, bytes) && skip.audit_updated == 0.0);
    free(p), free(m), free(v), free(g), free(c), free(pa), free(ma), free(va), free(ca), free(xa);
    free(pb), free(mb), free(vb), free(cb), free(xb), free(pc);
}

static void test_adamw_unit_matches_per_parameter(void)
{
    unit_case(ZT_F32, 0, ZT_BF16);
    unit_case(ZT_F32, 0, ZT_F32);
    unit_case(ZT_BF16, 1, ZT_BF16);
    unit_case(ZT_BF16, 0, ZT_BF16);
    unit_case(ZT_F16, 0, ZT_F16);
}

static void test_verdict(void)
{
    zt_step_scalars s = {0};
    double sums[3] = {1.0, 2.0, 1.0};
    zt_step_verdict(&s, sums, 3, 1.0, 1.0);
    ZT_CHECK(!s.skip && s.first_bad == -1 && s.sumsq == 4.0 && s.norm == 2.0f);
    ZT_CHECK(s.clip == 1.0f / (2.0f + 1e-6f)); /* torch's max_norm / (norm + 1e-6) */
    zt_step_verdict(&s, sums, 3, 0.0, 0.5); /* no clipping; a loss scale's 1/scale */
    ZT_CHECK(!s.skip && s.norm == 1.0f && s.clip == 0.5f);
    zt_step_verdict(&s, sums, 3, 5.0, 1.0); /* below max_norm: no clipping */
    ZT_CHECK(s.clip == 1.0f);
    sums[1] = INFINITY;
    sums[2] = NAN;
    zt_step_verdict(&s, sums, 3, 1.0, 1.0);
    ZT_CHECK(s.skip && s.first_bad == 1);
    double big[2] = {1e308, 1e308}; /* finite units whose sum overflows */
    zt_step_verdict(&s, big, 2, 1.0, 1.0);
    ZT_CHECK(s.skip && s.first_bad == -1);
}

/* fp16's loss scale kept on the device: the verdict divides out the device's scale
 * and updates it with the step's overflow, by loss_scale.c's rule (DeepSpeed's),
 * over a run of overflows and clean steps that spends the hysteresis, grows after
 * `window` clean steps and sits at the floor.  Scales worked out by hand: initial
 * 2^3, window 2, hysteresis 2, min_scale 2. */
static void test_device_loss_scaler(void)
{
    const zt_backend *be = zt_backend_emu();
    static const int over[12] = {1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0};
    static const double ran_at[12] = {8, 8, 4, 4, 8, 8, 8, 4, 2, 2, 2, 2};
    static const double after[12] = {8, 4, 4, 8, 8, 8, 4, 2, 2, 2, 2, 4};
    zt_loss_scaler host;
    zt_loss_scaler_init(&host, 3.0, 2, 2, 2.0);
    zt_step_scalars seed = {.ls = host, .ls_on = 1}, got;
    zt_step_scalars *sc = be->alloc(ZT_MEM_OTHER, sizeof *sc);
    double *dsum = be->alloc(ZT_MEM_OTHER, 2 * sizeof(double));
    be->to_device(sc, &seed, sizeof seed);
    for (int i = 0; i < 12; i++) {
        double sums[2] = {9.0, over[i] ? INFINITY : 16.0};
        be->zero(sc, ZT_STEP_OUTPUT_BYTES); /* a new step: the numbers, not the scale */
        be->to_device(dsum, sums, sizeof sums);
        be->step_verdict(sc, dsum, 2, 0.0, 1.0); /* the 1.0 is ignored: the device's scale rules */
        be->to_host(&got, sc, sizeof got);
        zt_loss_scaler_update(&host, over[i]);
        ZT_CHECK_MSG(got.skip == over[i] && got.ls_used == ran_at[i] && got.ls.scale == after[i],
                     "step %d: skip %d, ran at %g, scale %g (want %d, %g, %g)", i, got.skip, got.ls_used,
                     got.ls.scale, over[i], ran_at[i], after[i]);
        ZT_CHECK(!memcmp(&got.ls, &host, sizeof host)); /* the whole state: hysteresis, iterations, skips */
        if (!over[i]) /* sqrt(25) / scale, and the clip is 1 / scale (no clipping) */
            ZT_CHECK(got.norm == (float)(5.0 / ran_at[i]) && got.clip == (float)(1.0 / ran_at[i]));
    }
    ZT_CHECK(got.ls.skipped == 7 && got.ls.iter == 12);
    /* the step's upload of its inputs leaves the device's scale alone */
    zt_step_scalars in = {0};
    be->upload((char *)sc + ZT_STEP_OUTPUT_BYTES, (const char *)&in + ZT_STEP_OUTPUT_BYTES, ZT_STEP_INPUT_BYTES);
    be->to_host(&got, sc, sizeof got);
    ZT_CHECK(got.ls_on == 1 && got.ls.scale == 4.0);
    be->free(ZT_MEM_OTHER, dsum, 2 * sizeof(double));
    be->free(ZT_MEM_OTHER, sc, sizeof *sc);
}

/* ---- training on the emulated device ---------------------------------------------- */

#define MAXS 24
#define MAXEV (3 * MAXS)

/* What the trainer's callbacks saw, in order: 'F' a step's first forward, 'U' its
 * update (before_update), 'L' its record (on_step); each with the wait count then. */
typedef struct event {
    char kind;
    long step, waits;
} event;

typedef struct run_out {
    double loss[MAXS], gnorm[MAXS], scale[MAXS], lr[MAXS];
    int skipped[MAXS];
    long inject_step;             /* plant an inf in the gradient before this step's update (0: none) */
    long signal_step;             /* raise SIGTERM at this step's first forward (0: none) */
    long waits_at_step[MAXS + 1]; /* the wait count at each step's record, [0]: before step 1 */
    long waits_in_step[MAXS];     /* from the first forward of a step to its record */
    char msg[1024];                /* the run's error, if any */
    long first_forward;
    int nsteps;
    int checkpointing;            /* gradient checkpointing (kept across train's reset) */
    size_t activation_bytes;      /* the model's, from the run's result */
    event ev[MAXEV];
    int nev;
} run_out;

static void note(run_out *o, char kind, long step)
{
    if (o->nev < MAXEV)
        o->ev[o->nev++] = (event){kind, step, zt_backend_emu_waits()};
}

static void on_step(void *ctx, const zt_step_metrics *m)
{
    run_out *o = ctx;
    if (o->nsteps >= MAXS)
        return;
    o->loss[o->nsteps] = m->loss;
    o->gnorm[o->nsteps] = m->grad_norm;
    o->scale[o->nsteps] = m->loss_scale;
    o->skipped[o->nsteps] = m->skipped;
    o->lr[o->nsteps] = m->lr;
    note(o, 'L', m->step);
    o->waits_at_step[o->nsteps + 1] = zt_backend_emu_waits();
    o->waits_in_step[o->nsteps] = zt_backend_emu_waits() - o->first_forward;
    o->nsteps++;
}

static int before_forward(void *ctx, long step, int micro, int rank, zt_err *err)
{
    (void)rank, (void)err;
    run_out *o = ctx;
    if (micro == 0) {
        o->first_forward = zt_backend_emu_waits();
        note(o, 'F', step);
        if (step == o->signal_step)
            raise(SIGTERM); /* a stop request, answered after this step */
    }
    return ZT_OK;
}

/* an fp16 overflow, as test_zero.c plants it */
static void before_update(void *ctx, long step, int rank, zt_engine *eng)
{
    (void)rank;
    run_out *o = ctx;
    note(o, 'U', step);
    if (step == o->inject_step)
        zt_engine_inject_nonfinite(eng);
}

/* Options of a run beyond its mode: a schedule whose learning rate depends on the
 * applied steps, skips allowed, checkpoints; and the status it must end with. */
typedef struct run_opts {
    long warmup, skip_nonfinite, save_steps;
    double logging;               /* --logging_steps (0: Trainer's 500, past the end: read at the end) */
    const char *output_dir;
    int want_rc;
} run_opts;

static void train_with(const char *kernels, const char *mixed, int A, long steps, run_out *o, const run_opts *op)
{
    long inject = o->inject_step, sig = o->signal_step;
    int ckpt = o->checkpointing;
    memset(o, 0, sizeof *o);
    o->inject_step = inject;
    o->signal_step = sig;
    o->checkpointing = ckpt;
    emu_run r = {.kernels = kernels, .mixed = mixed, .accum = A, .steps = steps, .warmup = op->warmup,
                 .checkpointing = ckpt, .save_steps = op->save_steps};
    zt_plan plan;
    zt_train_args a;
    emu_train_args(&r, &plan, &a);
    a.on_step = on_step;
    a.on_step_ctx = o;
    a.skip_nonfinite_steps = op->skip_nonfinite;
    a.output_dir = op->output_dir;
    a.logging_steps = op->logging;
    zt_train_hooks hooks = {.before_forward = before_forward, .before_update = before_update, .ctx = o};
    a.hooks = &hooks;
    o->waits_at_step[0] = zt_backend_emu_waits();
    zt_train_result res;
    zt_err err = {0};
    int rc = zt_train(&a, &res, &err);
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err.msg : "");
    ZT_CHECK_MSG(rc == op->want_rc, "rc %d (want %d): %s", rc, op->want_rc, err.msg);
    if (op->want_rc == ZT_OK && !o->signal_step)
        ZT_CHECK(o->nsteps == steps);
    o->activation_bytes = res.activation_bytes;
}

/* a record every step: fast mode reads each step back after the next one's passes */
static void train(const char *kernels, const char *mixed, int A, long steps, run_out *o)
{
    static const run_opts plain = {.logging = 1};
    train_with(kernels, mixed, A, steps, o, &plain);
}

/* The wait count at the i-th event of kind k for step n (-1: none). */
static long waits_at(const run_out *o, char k, long n)
{
    for (int i = 0; i < o->nev; i++)
        if (o->ev[i].kind == k && o->ev[i].step == n)
            return o->ev[i].waits;
    return -1;
}

/* Where event (k, n) stands in the order the callbacks came (-1: never). */
static int place_of(const run_out *o, char k, long n)
{
    for (int i = 0; i < o->nev; i++)
        if (o->ev[i].kind == k && o->ev[i].step == n)
            return i;
    return -1;
}

/* A fast step waits once, for its readback, and the host runs ahead: the callbacks
 * come F1 U1 F2 L1 U2 F3 L2 U3 ... FK L(K-1) UK LK.  Between a step's update (U n)
 * and the next step's first forward nothing waits; between that forward and the
 * next update, once: step n's readback, whose record comes there; the last step is
 * read at once.  K steps, K waits.  The exact step is the same step read back at
 * once: its waits are one per micro-batch (the loss comes back with each pass) and
 * the step's one readback, A + 1 (no wait per unit's norm nor per parameter's audit:
 * the verdict is the device's in both modes), and it records each step before the
 * next. */
static void waits_case(const char *mixed, int A)
{
    enum { K = 4 };
    run_out fast = {0}, exact = {0}; /* no checkpointing, no injection */
    train("fast", mixed, A, K, &fast);
    ZT_CHECK(fast.nev == 3 * K);
    for (long n = 1; n <= K; n++) {
        long f = waits_at(&fast, 'F', n), u = waits_at(&fast, 'U', n), l = waits_at(&fast, 'L', n);
        ZT_CHECK_MSG(u - f == (n > 1), "%s x %d: step %ld: %ld waits between its first forward and its update",
                     mixed, A, n, u - f);
        if (n < K) {
            ZT_CHECK_MSG(waits_at(&fast, 'F', n + 1) - u == 0, "%s x %d: step %ld: %ld waits between its update "
                         "and the next forward", mixed, A, n, waits_at(&fast, 'F', n + 1) - u);
            /* its record after the next step's passes, before the next update */
            ZT_CHECK(place_of(&fast, 'L', n) > place_of(&fast, 'F', n + 1));
            ZT_CHECK(place_of(&fast, 'L', n) < place_of(&fast, 'U', n + 1));
        } else {
            ZT_CHECK_MSG(l - u == 1, "the last step: %ld waits after its update", l - u);
        }
    }
    ZT_CHECK_MSG(waits_at(&fast, 'L', K) - waits_at(&fast, 'F', 1) == K, "%s x %d: %ld waits over %d steps", mixed,
                 A, waits_at(&fast, 'L', K) - waits_at(&fast, 'F', 1), K);
    train("exact", mixed, A, 2, &exact);
    ZT_CHECK_MSG(exact.waits_in_step[1] == A + 1, "exact step: %ld waits, want %d (the losses' and the step's)",
                 exact.waits_in_step[1], A + 1);
    ZT_CHECK(place_of(&exact, 'L', 1) < place_of(&exact, 'F', 2)); /* no running ahead */
    long fast_step = waits_at(&fast, 'U', 2) - waits_at(&fast, 'F', 2);
    printf("     %-4s x %d micro-batches: fast step %ld wait (the step before's, after this one's passes), "
           "exact step %ld\n", mixed, A, fast_step, exact.waits_in_step[1]);
}

static void test_fast_step_waits_once(void)
{
    waits_case("bf16", 1); /* grad_end's rounding leaves the norms on the device */
    waits_case("no", 2);   /* fp32: the step's own sums of squares, two micro-batches' losses */
}

/* 20 steps: the fast mode's losses and norms within bf16 error of exact mode's
 * (on the emulated device both run the CPU's kernels, so they agree closer still;
 * on a GPU tests/gpu/check.sh holds the fast kernels to the same bound). */
static void fast_vs_exact_20_steps(int checkpointing)
{
    run_out fast = {.checkpointing = checkpointing}, exact = {.checkpointing = checkpointing};
    train("fast", "bf16", 1, 20, &fast);
    train("exact", "bf16", 1, 20, &exact);
    const double bf16_eps = 1.0 / 256; /* 2^-8: half a bf16 ulp, relative */
    /* The norm sums every gradient, and each has passed through up to four bf16
     * roundings in a row in fast mode (gate|up, the SwiGLU output's gradient, the
     * attention output, q/k/v), each up to 2^-8 relative: 4 x 2^-8 = 2^-6.  Measured:
     * 2.8e-3 (gcc -O3), 4.4e-3 (the sanitizers' build), above 2^-8 = 3.9e-3. */
    const double norm_eps = 1.0 / 64;
    double worst = 0.0, worst_norm = 0.0;
    for (int s = 0; s < 20; s++) {
        ZT_CHECK_CLOSE(fast.loss[s], exact.loss[s], bf16_eps, 1e-6);
        ZT_CHECK_CLOSE(fast.gnorm[s], exact.gnorm[s], norm_eps, 1e-6);
        double d = fabs(fast.loss[s] - exact.loss[s]) / fabs(exact.loss[s]);
        double dn = fabs(fast.gnorm[s] - exact.gnorm[s]) / fabs(exact.gnorm[s]);
        worst = d > worst ? d : worst;
        worst_norm = dn > worst_norm ? dn : worst_norm;
    }
    /* fast mode keeps bf16 activations (qkv, attention output, gate|up: llama.c), so it
     * is not exact mode's bits: the same numbers would mean the path was not taken */
    ZT_CHECK_MSG(worst > 0.0, "fast mode's losses are exact mode's bits: no bf16 activations");
    printf("     20 bf16 steps%s: loss %.7f (fast) vs %.7f (exact), worst relative difference %.2g (norm %.2g)\n",
           checkpointing ? ", checkpointing" : "", fast.loss[19], exact.loss[19], worst, worst_norm);
    /* and the run holds what the estimate says for each mode (test_act16_bytes) */
    ZT_CHECK_MSG(fast.activation_bytes < exact.activation_bytes, "activation bytes: fast %zu, exact %zu", fast.activation_bytes, exact.activation_bytes);
}

static void test_fast_matches_exact_20_steps(void)
{
    fast_vs_exact_20_steps(0);
    fast_vs_exact_20_steps(1); /* gradient checkpointing: the layers recomputed in bf16 activations */
}

/* fp16 with an overflow planted at step 2: the device's verdict skips the step (AdamW
 * reads the flag there), and the skip, the loss scale after it and the losses are
 * exact mode's.  And fp16 runs ahead: step 3's backward, queued before step 2's
 * readback, takes the halved scale from the device (zt_step_grad_scale). */
static void test_fast_skips_on_overflow(void)
{
    run_out fast = {.inject_step = 2}, exact = {.inject_step = 2};
    train("fast", "fp16", 1, 4, &fast);
    train("exact", "fp16", 1, 4, &exact);
    ZT_CHECK(fast.skipped[1] == 1 && exact.skipped[1] == 1);
    ZT_CHECK_MSG(fast.scale[2] == exact.scale[2] && fast.scale[3] == exact.scale[3], "scales %g %g %g",
                 fast.scale[1], fast.scale[2], fast.scale[3]);
    for (int s = 0; s < 4; s++) {
        ZT_CHECK(fast.skipped[s] == exact.skipped[s]);
        ZT_CHECK_CLOSE(fast.loss[s], exact.loss[s], 1e-12, 1e-12);
        ZT_CHECK(isfinite(fast.gnorm[s]) == isfinite(exact.gnorm[s]));
        ZT_CHECK(!isfinite(fast.gnorm[s]) ||
                 fast.gnorm[s] == exact.gnorm[s]); /* unscaled by the scale used */
    }
    for (long n = 1; n < 4; n++) /* step n's record after step n+1's passes */
        ZT_CHECK_MSG(place_of(&fast, 'L', n) > place_of(&fast, 'F', n + 1),
                     "fp16: step %ld did not run ahead", n);
    /* one wait a step (its readback), and the planting's (an upload) */
    ZT_CHECK_MSG(waits_at(&fast, 'L', 4) - waits_at(&fast, 'F', 1) == 4 + 1, "fp16: %ld waits over 4 steps",
                 waits_at(&fast, 'L', 4) - waits_at(&fast, 'F', 1));
}

/* An inf planted at step 2 and one skip allowed, under a warm-up whose learning rate
 * counts applied steps: step 2 runs ahead, so step 3's forward and backward are queued
 * before the host learns that step 2 was skipped; step 3's learning rate and AdamW's t
 * must still count one applied step, as in exact mode.  In fp32, where the two modes
 * compute the same numbers (bf16's fast mode keeps bf16 activations), so every number
 * must be exact mode's bits. */
static void test_run_ahead_skip_keeps_schedule(void)
{
    run_out fast = {.inject_step = 2}, exact = {.inject_step = 2};
    const run_opts op = {.warmup = 4, .skip_nonfinite = 1};
    train_with("fast", "no", 1, 5, &fast, &op);
    train_with("exact", "no", 1, 5, &exact, &op);
    ZT_CHECK(place_of(&fast, 'L', 2) > place_of(&fast, 'F', 3)); /* it did run ahead */
    ZT_CHECK(fast.skipped[1] == 1 && exact.skipped[1] == 1);
    for (int s = 0; s < 5; s++) {
        ZT_CHECK_MSG(fast.lr[s] == exact.lr[s], "step %d: lr %g (fast) vs %g (exact)", s + 1, fast.lr[s], exact.lr[s]);
        ZT_CHECK(fast.skipped[s] == exact.skipped[s]);
        ZT_CHECK(fast.loss[s] == exact.loss[s]);
        ZT_CHECK(fast.gnorm[s] == exact.gnorm[s] || (isnan(fast.gnorm[s]) && isnan(exact.gnorm[s])));
    }
    ZT_CHECK(fast.lr[2] == fast.lr[1]); /* the skipped step did not advance the warm-up */
}

/* Without skips allowed, the inf at step 2 stops the run naming step 2 in both modes;
 * in fast mode step 3's passes were queued by then (harmless: nothing is saved), its
 * update never. */
static void test_run_ahead_nonfinite_stop(void)
{
    run_out fast = {.inject_step = 2}, exact = {.inject_step = 2};
    const run_opts op = {.want_rc = ZT_EFAIL, .logging = 1};
    train_with("fast", "bf16", 1, 5, &fast, &op);
    train_with("exact", "bf16", 1, 5, &exact, &op);
    ZT_CHECK(fast.nsteps == 2 && exact.nsteps == 2);
    ZT_CHECK(place_of(&fast, 'F', 3) >= 0 && place_of(&fast, 'U', 3) < 0);
    ZT_CHECK(place_of(&exact, 'F', 3) < 0);
}

/* Read at the logged steps only (--logging_steps 3 over 8 steps): steps 1-3 are read
 * after step 4's passes, in one wait, then 4-6 after step 7's, then 7 and 8 at the
 * end: three waits for the run where a record per step made eight, the records all
 * written, in order.  In fp32 and bf16, one micro-batch or two. */
static void lazy_case(const char *mixed, int A)
{
    enum { K = 8 };
    run_out fast = {0};
    const run_opts op = {.logging = 3};
    train_with("fast", mixed, A, K, &fast, &op);
    ZT_CHECK(fast.nsteps == K && fast.nev == 3 * K);
    long total = waits_at(&fast, 'L', K) - waits_at(&fast, 'F', 1);
    ZT_CHECK_MSG(total == 3, "%s x %d: %ld waits over %d steps logged every 3", mixed, A, total, K);
    /* the batches: each record after the passes of the step that follows its batch */
    for (long n = 1; n <= K; n++) {
        long after = n <= 3 ? 4 : n <= 6 ? 7 : 0;
        if (after) {
            ZT_CHECK_MSG(place_of(&fast, 'L', n) > place_of(&fast, 'F', after) &&
                             place_of(&fast, 'L', n) < place_of(&fast, 'U', after),
                         "%s x %d: step %ld's record out of its batch", mixed, A, n);
        } else {
            ZT_CHECK(place_of(&fast, 'L', n) > place_of(&fast, 'U', K));
        }
        /* nothing waits inside a step: from a forward to the update, none but a batch's read */
        long f = waits_at(&fast, 'F', n), u = waits_at(&fast, 'U', n);
        ZT_CHECK_MSG(u - f == (n == 4 || n == 7), "%s x %d: step %ld: %ld waits between its forward and update",
                     mixed, A, n, u - f);
    }
}

static void test_lazy_reads_at_logged_steps(void)
{
    lazy_case("no", 1);
    lazy_case("bf16", 2);
    lazy_case("fp16", 1); /* its backward reads the loss scale on the device: read lazily too */
}

/* Past ZT_STEPS_IN_FLIGHT steps unread the host reads them anyway: 12 steps logged
 * every 20 are read after step 9's passes (8 in flight) and at the end, two waits. */
static void test_lazy_reads_bounded(void)
{
    enum { K = 12 };
    run_out fast = {0};
    const run_opts op = {.logging = 20};
    train_with("fast", "no", 1, K, &fast, &op);
    ZT_CHECK(fast.nsteps == K);
    long total = waits_at(&fast, 'L', K) - waits_at(&fast, 'F', 1);
    ZT_CHECK_MSG(total == 2, "%ld waits over %d steps, %d in flight at most", total, K, ZT_STEPS_IN_FLIGHT);
    ZT_CHECK(place_of(&fast, 'L', ZT_STEPS_IN_FLIGHT) > place_of(&fast, 'F', ZT_STEPS_IN_FLIGHT + 1));
    ZT_CHECK(place_of(&fast, 'L', ZT_STEPS_IN_FLIGHT) < place_of(&fast, 'U', ZT_STEPS_IN_FLIGHT + 1));
}

/* A checkpoint reads the state after its step: every step in flight is read before it
 * (--logging_steps 4, --save_steps 3, 8 steps): records 1-3 before step 4 begins, 4
 * after step 5's passes (its logged read), 5 and 6 before step 7 begins. */
static void test_lazy_reads_before_saves(void)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/zt_lazysave_XXXXXX");
    ZT_CHECK(mkdtemp(dir) != NULL);
    run_out fast = {0};
    const run_opts op = {.logging = 4, .save_steps = 3, .output_dir = dir};
    train_with("fast", "no", 1, 8, &fast, &op);
    ZT_CHECK(fast.nsteps == 8);
    ZT_CHECK(place_of(&fast, 'L', 3) < place_of(&fast, 'F', 4));
    ZT_CHECK(place_of(&fast, 'L', 4) > place_of(&fast, 'F', 5) && place_of(&fast, 'L', 4) < place_of(&fast, 'U', 5));
    ZT_CHECK(place_of(&fast, 'L', 5) > place_of(&fast, 'U', 6) && place_of(&fast, 'L', 6) < place_of(&fast, 'F', 7));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test -d '%s/checkpoint-3' && test -d '%s/checkpoint-6'", dir, dir);
    ZT_CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0);
}

/* Read lazily (all five steps in flight until the end), the inf at step 2 stops the
 * run as the synchronous run stops: the same status and message, steps 1 and 2
 * recorded and no later one, though steps 3 to 5 were queued on the device. */
static void test_lazy_nonfinite_stop(void)
{
    run_out fast = {.inject_step = 2}, exact = {.inject_step = 2};
    const run_opts op = {.want_rc = ZT_EFAIL};
    train_with("fast", "no", 1, 5, &fast, &op);
    train_with("exact", "no", 1, 5, &exact, &op);
    ZT_CHECK(fast.nsteps == 2 && exact.nsteps == 2);
    ZT_CHECK(place_of(&fast, 'U', 5) >= 0); /* it did run ahead */
    ZT_CHECK_MSG(!strcmp(fast.msg, exact.msg), "fast: %s\nexact: %s", fast.msg, exact.msg);
    for (int s = 0; s < 2; s++)
        ZT_CHECK(fast.loss[s] == exact.loss[s] && fast.skipped[s] == exact.skipped[s]);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A stop request (SIGTERM) during step 3 is answered after step 3 in both modes: its
 * record is the last, and the checkpoint is checkpoint-3.  In fast mode step 3 ran
 * ahead; the request is seen before step 4 begins, so step 4 never starts. */
static void test_run_ahead_stop_request(void)
{
    char dir[2][64];
    const char *mode[2] = {"fast", "exact"};
    run_out o[2];
    for (int i = 0; i < 2; i++) {
        snprintf(dir[i], sizeof dir[i], "/tmp/zt_runahead_XXXXXX");
        ZT_CHECK(mkdtemp(dir[i]) != NULL);
        o[i] = (run_out){.signal_step = 3};
        const run_opts op = {.output_dir = dir[i]};
        train_with(mode[i], "bf16", 1, 6, &o[i], &op);
        char ck[128];
        snprintf(ck, sizeof ck, "%s/checkpoint-3", dir[i]);
        ZT_CHECK_MSG(o[i].nsteps == 3 && is_dir(ck), "%s: %d steps recorded, %s %s", mode[i], o[i].nsteps, ck,
                     is_dir(ck) ? "saved" : "missing");
        snprintf(ck, sizeof ck, "rm -rf '%s'", dir[i]);
        ZT_CHECK(system(ck) == 0);
    }
    ZT_CHECK(place_of(&o[0], 'F', 4) < 0 && place_of(&o[0], 'F', 3) < place_of(&o[0], 'L', 3));
    /* fast mode keeps bf16 activations: within bf16 error of exact mode's loss */
    ZT_CHECK_CLOSE(o[0].loss[2], o[1].loss[2], 1.0 / 256, 1e-6);
}

int main(void)
{
    ZT_RUN(test_adamw_unit_matches_per_parameter);
    ZT_RUN(test_verdict);
    ZT_RUN(test_device_loss_scaler);
    ZT_RUN(test_fast_step_waits_once);
    ZT_RUN(test_fast_matches_exact_20_steps);
    ZT_RUN(test_fast_skips_on_overflow);
    ZT_RUN(test_run_ahead_skip_keeps_schedule);
    ZT_RUN(test_run_ahead_nonfinite_stop);
    ZT_RUN(test_run_ahead_stop_request);
    ZT_RUN(test_lazy_reads_at_logged_steps);
    ZT_RUN(test_lazy_reads_bounded);
    ZT_RUN(test_lazy_reads_before_saves);
    ZT_RUN(test_lazy_nonfinite_stop);
    zt_matmul_shutdown();
    ZT_TEST_MAIN_END();
}
