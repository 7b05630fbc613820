/* test_step_graph.c — the step captured as a graph and replayed (train/step_graph.h,
 * backend.h's graph entries; docs/gpu.md, "The captured step"), on the emulated
 * device, whose recorder keeps what a CUDA graph keeps:
 *   - the recorder: nothing runs while capturing; a launch reads buffers and the host
 *     memory behind uploads anew, but replays the values of arguments (a struct's
 *     learning rate) as captured; an entry that waits is refused by graph_end; the
 *     CPU has no graphs;
 *   - a graphed run gives the plain fast run's bits, step by step (loss, norm, lr,
 *     the audit, which reads every parameter), with a schedule whose learning rate
 *     changes every step (baked into the graph, it would not), over one and two
 *     micro-batches, fp32 and bf16, stage 0 and FSDP's stage 3;
 *   - fp16 with overflows (skipped steps, the scale halved and grown again) and a loss
 *     mask (a count of targets of its own every step) give the plain fast run's bits
 *     too: the backward forms its gradient scale on the device from the loss scale
 *     held there and the count the captured passes upload from the token set;
 *   - a replayed step costs the host five calls into the table (the passes' launch,
 *     the inputs' upload, the update's launch, the readback's download and its wait),
 *     where the plain fast step makes hundreds, and it runs ahead: the next step's
 *     passes are launched before a step's numbers are read (fp16 too). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/mem.h"
#include "../src/io/tokens.h"
#include "../src/kernels/adamw.h"
#include "../src/kernels/backend.h"
#include "../src/kernels/matmul.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/batches.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "tmpdir.h"

/* ---- the recorder ------------------------------------------------------------------ */

static void test_recorder_keeps_what_a_graph_keeps(void)
{
    const zt_backend *be = zt_backend_emu_fast();
    zt_err err = {0};
    enum { N = 64 };
    float host[N], got[N], src[N];
    for (int i = 0; i < N; i++)
        host[i] = 1.0f, src[i] = (float)i;
    float *p = be->alloc(ZT_MEM_OTHER, N * 4), *m = be->alloc(ZT_MEM_OTHER, N * 4);
    float *v = be->alloc(ZT_MEM_OTHER, N * 4), *g = be->alloc(ZT_MEM_OTHER, N * 4);
    float *up = be->alloc(ZT_MEM_OTHER, N * 4);
    be->to_device(p, host, sizeof host);
    be->to_device(g, host, sizeof host);
    zt_adamw_step s = {
        .lr = 1e-2, .weight_decay = 0.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .t = 1, .clip = 1.0f};
    zt_graph *graph = NULL;
    ZT_CHECK(be->graph_begin(&err) == ZT_OK);
    be->upload(up, src, sizeof src);
    be->adamw_step(p, m, v, g, NULL, ZT_F32, N, &s, NULL, ZT_F32, NULL);
    ZT_CHECK_MSG(be->graph_end(&graph, &err) == ZT_OK, "%s", err.msg);
    /* nothing ran while capturing */
    be->to_host(got, p, sizeof got);
    ZT_CHECK(got[0] == 1.0f);
    be->to_host(got, up, sizeof got);
    ZT_CHECK(got[5] == 0.0f);
    /* the host changes both: the upload's source is read again, the struct is not */
    src[5] = 42.0f;
    s.lr = 0.5;
    ZT_CHECK(be->graph_launch(graph, &err) == ZT_OK);
    be->to_host(got, up, sizeof got);
    ZT_CHECK(got[5] == 42.0f);
    be->to_host(got, p, sizeof got);
    /* AdamW's first step moves p by lr (m/sqrt(v) = 1 for a constant gradient): the captured lr's */
    ZT_CHECK_CLOSE(got[0], 1.0f - 1e-2f, 1e-6, 0);
    be->graph_free(graph);

    /* a capture that waits fails at its end, naming the entry */
    ZT_CHECK(be->graph_begin(&err) == ZT_OK);
    be->zero(p, N * 4);
    be->to_host(got, p, sizeof got);
    ZT_CHECK(be->graph_end(&graph, &err) != ZT_OK && graph == NULL);
    ZT_CHECK_MSG(strstr(err.msg, "to_host") != NULL, "%s", err.msg);
    be->to_host(got, p, sizeof got); /* and the table is out of capture: this ran */
    ZT_CHECK(got[0] != 0.0f);
    /* the CPU has no graphs */
    ZT_CHECK(zt_backend_cpu()->graph_begin(&err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "no graphs") != NULL, "%s", err.msg);
    be->free(ZT_MEM_OTHER, p, N * 4), be->free(ZT_MEM_OTHER, m, N * 4), be->free(ZT_MEM_OTHER, v, N * 4);
    be->free(ZT_MEM_OTHER, g, N * 4), be->free(ZT_MEM_OTHER, up, N * 4);
}

/* ---- training on the emulated device ------------------------------------------------ */

#define MAXS 12

typedef struct run_out {
    zt_step_metrics m[MAXS];
    long calls_at[MAXS + 1]; /* the table's calls at each step's record, [0]: before the run */
    long waits_at[MAXS + 1]; /* and the host's waits for the device */
    int nsteps;
} run_out;

static void on_step(void *ctx, const zt_step_metrics *m)
{
    run_out *o = ctx;
    if (o->nsteps >= MAXS)
        return;
    o->m[o->nsteps] = *m;
    o->waits_at[o->nsteps + 1] = zt_backend_emu_waits();
    o->calls_at[++o->nsteps] = zt_backend_emu_calls();
}

/* What a run adds to its mode: fp16 that overflows (2^20 at first, window 2,
 * hysteresis 2: it skips, halves, grows and skips again, as tests/cli/fp16_fast.sh
 * runs it), and a loss mask (.npy, NULL: none). */
typedef struct run_opts {
    int fp16_overflows;
    const char *mask;
    const char *kernels; /* NULL: fast */
} run_opts;

static void train_with(const char *graphs, const char *mixed, int A, int fsdp, long steps, const run_opts *op,
                       run_out *o)
{
    memset(o, 0, sizeof *o);
    zt_err err = {0};
    zt_plan_request req;
    zt_plan_request_init(&req);
    req.device = "emu";
    req.kernels = op->kernels ? op->kernels : "fast";
    req.cuda_graphs = graphs;
    req.mixed_precision = mixed;
    if (fsdp)
        req.face = ZT_FACE_FSDP;
    if (op->fp16_overflows) {
        req.ls_initial_scale_power = 20;
        req.ls_window = 2;
        req.ls_hysteresis = 2;
    }
    zt_plan plan;
    ZT_CHECK_MSG(zt_plan_resolve(&req, 1, &plan, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(!strcmp(plan.graphs, graphs));
    zt_settings st;
    zt_settings_defaults(&st);
    st.block_size = 16;
    st.batch = 2;
    st.accum = A;
    st.max_steps = steps;
    st.lr = 1e-3;
    st.weight_decay = 0.1;
    st.schedule = "linear"; /* with warmup: a new learning rate every step */
    st.warmup_steps = 2;
    st.seed = 0;
    zt_train_args a;
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK, "%s", err.msg);
    a.model_dir = "tests/fixtures/gqa_tied";
    a.data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a.loss_mask_path = op->mask;
    a.on_step = on_step;
    a.on_step_ctx = o;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    o->calls_at[0] = zt_backend_emu_calls();
    zt_train_result res;
    ZT_CHECK_MSG(zt_train(&a, &res, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(o->nsteps == steps);
}

static void train(const char *graphs, const char *mixed, int A, int fsdp, long steps, run_out *o)
{
    static const run_opts none = {0};
    train_with(graphs, mixed, A, fsdp, steps, &none, o);
}

/* The same bits, step by step: the loss and the norm of step s+1 are computed from
 * the parameters step s left, and the audit reads every updated element. */
static void same_case(const char *mixed, int A, int fsdp)
{
    run_out plain, graphed;
    const long S = 6;
    train("off", mixed, A, fsdp, S, &plain);
    train("on", mixed, A, fsdp, S, &graphed);
    for (int s = 0; s < S; s++) {
        const zt_step_metrics *x = &plain.m[s], *y = &graphed.m[s];
        ZT_CHECK_MSG(
            x->loss == y->loss && x->grad_norm == y->grad_norm && x->lr == y->lr &&
                x->lost_update_fraction == y->lost_update_fraction &&
                x->update_to_half_ulp == y->update_to_half_ulp && x->skipped == y->skipped,
            "%s, %d micro-batch(es)%s, step %d: plain loss %.9g norm %.9g lr %.9g, graphed %.9g %.9g %.9g",
            mixed, A, fsdp ? ", FSDP" : "", s + 1, x->loss, x->grad_norm, x->lr, y->loss, y->grad_norm,
            y->lr);
        if (s > 0)
            ZT_CHECK(x->lr != plain.m[s - 1].lr); /* the schedule moves every step */
    }
}

static void test_graphed_run_matches_plain(void)
{
    same_case("bf16", 1, 0);
    same_case("no", 2, 0);
    same_case("bf16", 2, 1);
}

/* Two runs' records agree to the bit: the loss, the norm (sqrt(sumsq) / the scale the
 * verdict divided out: a backward that took another scale changes it by their ratio),
 * the lr, the scale and the skip. */
static void same_records(const char *what, const char *a_name, const run_out *a, const char *b_name,
                         const run_out *b, long S)
{
    for (int s = 0; s < S; s++) {
        const zt_step_metrics *x = &a->m[s], *y = &b->m[s];
        int same_norm = x->grad_norm == y->grad_norm || (isnan(x->grad_norm) && isnan(y->grad_norm));
        ZT_CHECK_MSG(x->loss == y->loss && same_norm && x->lr == y->lr && x->loss_scale == y->loss_scale &&
                         x->skipped == y->skipped,
                     "%s, step %d: %s loss %.9g norm %.9g scale %g skipped %d, %s %.9g %.9g %g %d", what,
                     s + 1, a_name, x->loss, x->grad_norm, x->loss_scale, x->skipped, b_name, y->loss,
                     y->grad_norm, y->loss_scale, y->skipped);
    }
}

/* S steps of op's run three ways: exact mode (synchronous, the host's gradient scale
 * as an argument), the plain fast run (running ahead, the scale formed on the device)
 * and the graphed one.  In fp32 and fp16 the emulated device's fast mode computes
 * exact mode's numbers (both keep fp32 activations), so all three agree to the bit. */
static void same_steps(const run_opts *op, const char *mixed, long S, run_out *plain, run_out *graphed)
{
    run_out exact;
    run_opts ex = *op;
    ex.kernels = "exact";
    const char *what = op->fp16_overflows ? "fp16 with overflows" : "a loss mask";
    train_with("off", mixed, 1, 0, S, &ex, &exact);
    train_with("off", mixed, 1, 0, S, op, plain);
    train_with("on", mixed, 1, 0, S, op, graphed);
    same_records(what, "exact", &exact, "plain fast", plain, S);
    same_records(what, "plain fast", plain, "graphed", graphed, S);
}

/* fp16 with overflows, captured: the scale each replayed backward runs at is the one
 * the device holds after the step before's verdict, which the host has not read yet
 * when the step's passes are launched (running ahead). */
static void test_graphed_fp16_matches_plain(void)
{
    const run_opts op = {.fp16_overflows = 1};
    run_out plain, graphed;
    const long S = 12;
    same_steps(&op, "fp16", S, &plain, &graphed);
    /* the run did what it is here for: skips, a halving, a growth after it */
    int skips = 0, halved = 0, grown = 0;
    char scales[256] = "";
    for (int s = 0; s < S; s++) {
        const double x = graphed.m[s].loss_scale, before = s ? graphed.m[s - 1].loss_scale : x;
        skips += graphed.m[s].skipped;
        halved += x < before;
        grown += x > before;
        snprintf(scales + strlen(scales), sizeof scales - strlen(scales), " %g%s", x,
                 graphed.m[s].skipped ? "*" : "");
    }
    ZT_CHECK_MSG(skips >= 2 && halved && grown, "fp16: %d skips, %d halvings, %d growths:%s", skips, halved,
                 grown, scales);
    printf("     fp16, 12 steps graphed (* skipped):%s\n", scales);
}

/* A loss mask: each step's gradient scale is 1 / its own count of completion targets,
 * which the captured passes upload from their token set's memory, so a replay takes
 * the step's count and not the one it was captured with.  The mask is drawn so that
 * the steps' counts differ (checked with the trainer's own sample order). */
static void test_graphed_loss_mask_matches_plain(void)
{
    zt_tokens tok;
    zt_err err = {0};
    ZT_CHECK(zt_tokens_load("tests/fixtures/gqa_tied/tokens.npy", &tok, &err) == ZT_OK);
    int32_t *mask = malloc(tok.n * sizeof *mask);
    uint64_t r = 12345;
    for (size_t i = 0; i < tok.n; i++) { /* about 3 in 4 targets count */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        mask[i] = (r >> 61) >= 2;
    }
    char dir[64], path[256];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_graphmask_"));
    tmpdir_join(path, sizeof path, dir, "mask.npy");
    ZT_CHECK(zt_tokens_write_npy(path, mask, tok.n, &err) == ZT_OK);
    const long S = 6;
    const run_opts op = {.mask = path};
    run_out plain, graphed;
    same_steps(&op, "no", S, &plain, &graphed);
    /* the steps' counts, as the trainer takes them: G = 2 samples a step, its order */
    zt_settings st;
    zt_settings_defaults(&st);
    uint8_t *u = malloc(tok.n);
    for (size_t i = 0; i < tok.n; i++)
        u[i] = (uint8_t)mask[i];
    tok.loss_mask = u;
    zt_batcher b;
    ZT_CHECK(zt_batcher_init(&b, &tok, 16, st.shuffle, 0, "mem", &err) == ZT_OK);
    long first = zt_batcher_count_targets(&b, 0, 2), differ = 0;
    for (long s = 1; s < S; s++)
        differ += zt_batcher_count_targets(&b, 2 * s, 2) != first;
    ZT_CHECK_MSG(differ > 0, "every step counts %ld targets: the mask tests nothing", first);
    zt_batcher_free(&b);
    free(u);
    tok.loss_mask = NULL;
    zt_tokens_free(&tok);
    free(mask);
    ZT_CHECK(tmpdir_remove(dir) == 0);
}

/* Steps 3 on are replays, and a graphed run runs ahead as the plain fast run does.
 * Between the records of steps 3 and 4 lie step 4's update (its inputs' upload, the
 * update's launch, the download of its numbers), step 5's passes (one launch) and
 * step 4's wait: 5 calls, one wait.  Between those of steps 4 and 5, the last, lie
 * step 5's update and its wait only: 4 calls, as step 5's passes were launched before
 * step 4's record (a run that read each step back first would make 5 there).  The
 * same for fp16 (with overflows): it runs ahead, its scale read on the device. */
static void five_calls_case(const char *mixed, const run_opts *op)
{
    run_out plain, graphed;
    train_with("off", mixed, 2, 0, 5, op, &plain);
    train_with("on", mixed, 2, 0, 5, op, &graphed);
    for (int s = 2; s < 5; s++) {
        long want = s < 4 ? 5 : 4;
        ZT_CHECK_MSG(graphed.calls_at[s + 1] - graphed.calls_at[s] == want,
                     "%s: replayed step %d: %ld calls, not %ld", mixed, s + 1,
                     graphed.calls_at[s + 1] - graphed.calls_at[s], want);
        ZT_CHECK(graphed.waits_at[s + 1] - graphed.waits_at[s] ==
                 1); /* the readback, as in the plain fast step */
    }
    long plain_calls = plain.calls_at[4] - plain.calls_at[3];
    ZT_CHECK_MSG(plain_calls > 50, "plain fast step: %ld calls", plain_calls);
    printf("     host calls into the table per step, %s, 2 micro-batches: plain fast %ld, replayed %ld\n",
           mixed, plain_calls, graphed.calls_at[4] - graphed.calls_at[3]);
}

static void test_replayed_step_is_five_calls(void)
{
    static const run_opts none = {0}, fp16 = {.fp16_overflows = 1};
    five_calls_case("bf16", &none);
    five_calls_case("fp16", &fp16);
}

int main(void)
{
    ZT_RUN(test_recorder_keeps_what_a_graph_keeps);
    ZT_RUN(test_graphed_run_matches_plain);
    ZT_RUN(test_graphed_fp16_matches_plain);
    ZT_RUN(test_graphed_loss_mask_matches_plain);
    ZT_RUN(test_replayed_step_is_five_calls);
    zt_matmul_shutdown();
    ZT_TEST_MAIN_END();
}
