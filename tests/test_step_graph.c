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
 *     passes are launched before a step's numbers are read;
 *   - on the ranks it runs on (2 under mpirun in tests/cli/graphs_ranks.sh, one run
 *     alone), with the emulated NCCL (comm.h): FSDP's and ZeRO-1's captured steps hold
 *     their collectives, give the plain run's bits and the same five calls and one
 *     wait a replayed step, running ahead (the staged path's copies would wait);
 *   - fp16 and a loss mask are captured and run ahead too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/comm/comm.h"
#include "../src/core/mem.h"
#include "../src/io/tokens.h"
#include "../src/kernels/adamw.h"
#include "../src/kernels/backend.h"
#include "../src/kernels/matmul.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/batches.h"
#include "../src/train/trainer.h"
#include "emu_train.h"
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

static int rank, world = 1; /* the MPI world (main) */

/* What a run adds to its mode: fp16 that overflows (2^20 at first, window 2,
 * hysteresis 2: it skips, halves, grows and skips again, as tests/cli/fp16_fast.sh
 * runs it), and a loss mask (.npy, NULL: none). */
typedef struct run_opts {
    int fp16_overflows;
    const char *mask;
    const char *kernels; /* NULL: fast */
} run_opts;

/* stage: -1 the plan's face as fsdp says, on one process; 1 or 3 on the MPI world,
 * DeepSpeed ZeRO-1 or FSDP FULL_SHARD, with the emulated NCCL; logging:
 * --logging_steps (1: every step read back after the next one's passes) */
static void train_on(const char *graphs, const char *mixed, int A, int fsdp, long steps, int stage, double logging,
                     const run_opts *op, run_out *o)
{
    memset(o, 0, sizeof *o);
    emu_run r = {.kernels = op->kernels ? op->kernels : "fast", .graphs = graphs, .mixed = mixed, .fsdp = fsdp,
                 .accum = A, .steps = steps, .warmup = 2, .stage = stage, .world = world, .loss_mask = op->mask};
    if (op->fp16_overflows) {
        r.ls_power = 20;
        r.ls_window = 2;
        r.ls_hysteresis = 2;
    }
    zt_plan plan;
    zt_train_args a;
    emu_train_args(&r, &plan, &a);
    ZT_CHECK((plan.graphs == ZT_PLAN_GRAPHS_ON) == !strcmp(graphs, "on"));
    a.on_step = on_step;
    a.on_step_ctx = o;
    a.logging_steps = logging;
    zt_err err = {0};
    zt_comm c;
    if (stage > 0) {
        ZT_CHECK_MSG(zt_comm_create(&c, plan.group_size, &err) == ZT_OK, "%s", err.msg);
        a.comm = &c;
    }
    o->calls_at[0] = zt_backend_emu_calls();
    zt_train_result res;
    ZT_CHECK_MSG(zt_train(&a, &res, &err) == ZT_OK, "%s", err.msg);
    ZT_CHECK(o->nsteps == steps);
    if (stage > 0) {
        ZT_CHECK_MSG(c.path == ZT_COMM_EMU, "the collectives took %s", zt_comm_path_name(c.path));
        zt_comm_free(&c);
    }
}

static const run_opts none = {0};

static void train_with(const char *graphs, const char *mixed, int A, int fsdp, long steps, const run_opts *op,
                       run_out *o)
{
    train_on(graphs, mixed, A, fsdp, steps, -1, 1, op, o);
}

static void train_logged(const char *graphs, const char *mixed, int A, int fsdp, long steps, double logging,
                         run_out *o)
{
    train_on(graphs, mixed, A, fsdp, steps, -1, logging, &none, o);
}

static void train(const char *graphs, const char *mixed, int A, int fsdp, long steps, run_out *o)
{
    train_with(graphs, mixed, A, fsdp, steps, &none, o);
}

/* The same bits, step by step: the loss and the norm of step s+1 are computed from
 * the parameters step s left, and the audit reads every updated element. */
static void same_case_logged(const char *mixed, int A, int fsdp, double logging)
{
    run_out plain, graphed;
    const long S = 6;
    train("off", mixed, A, fsdp, S, &plain);
    train_logged("on", mixed, A, fsdp, S, logging, &graphed);
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

static void same_case(const char *mixed, int A, int fsdp) { same_case_logged(mixed, A, fsdp, 1); }

static void test_graphed_run_matches_plain(void)
{
    same_case("bf16", 1, 0);
    same_case("no", 2, 0);
    same_case("bf16", 2, 1);
    /* read back at the logged steps only, several steps in flight: the same bits as
     * the plain run read every step (the lr from the device's schedule) */
    same_case_logged("bf16", 2, 0, 4);
    same_case_logged("no", 1, 1, 3);
}

/* --cuda_graphs on, --logging_steps 3, 8 steps: the host waits for the device three
 * times over the run (steps 1-3 read after step 4's passes, 4-6 after step 7's, 7 and
 * 8 at the end), the records of a batch in a row with no wait between them, and a
 * replayed step in a batch costs the host four calls (the passes' launch, the update's
 * launch, the numbers' copy and their download) and no wait. */
static void test_graphed_lazy_waits(void)
{
    run_out g;
    train_logged("on", "bf16", 2, 0, 8, 3, &g);
    ZT_CHECK_MSG(g.waits_at[8] - g.waits_at[1] == 2, "%ld waits from the first record to the last",
                 g.waits_at[8] - g.waits_at[1]);
    for (int n = 1; n < 8; n++) /* the same batch: no wait between its records */
        if (n != 3 && n != 6)
            ZT_CHECK_MSG(g.waits_at[n + 1] == g.waits_at[n], "a wait between records %d and %d", n, n + 1);
    /* steps 7 and 8 are replays (four token sets: steps 2-5 captured): between the
     * records of steps 6 and 7 lie step 7's update (its launch, the numbers' copy and
     * download), step 8's passes and update, and the one wait: 8 calls, where two
     * steps read one at a time take 10 (test_replayed_step_is_five_calls) */
    long window = g.calls_at[7] - g.calls_at[6];
    ZT_CHECK_MSG(window == 8, "%ld calls between the records of steps 6 and 7", window);
    ZT_CHECK(g.calls_at[8] == g.calls_at[7]);
    printf("     graphed, logged every 3: %ld waits over 8 steps, %ld calls for the last two\n",
           g.waits_at[8] - g.waits_at[1] + 1, window);
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
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
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

/* On the MPI world with the emulated NCCL: the captured step holds the collectives
 * (FSDP: gathers and reduce-scatters in the passes, the verdict's sum in the update;
 * ZeRO-1: the reduction at the step), gives the plain run's bits, and a replayed step
 * is still five calls and one wait, running ahead (the last window, four).  The
 * numbers the ranks sum on the host (the loss, the audit) are MPI calls, not the
 * table's; a collective the staged way would add its copies' waits. */
static void test_ranks_replay_with_their_collectives(void)
{
    for (int stage = 1; stage <= 3; stage += 2) {
        run_out plain, graphed;
        train_on("off", "bf16", 2, 0, 5, stage, 1, &none, &plain);
        train_on("on", "bf16", 2, 0, 5, stage, 1, &none, &graphed);
        for (int s = 0; s < 5; s++) {
            const zt_step_metrics *x = &plain.m[s], *y = &graphed.m[s];
            ZT_CHECK_MSG(x->loss == y->loss && x->grad_norm == y->grad_norm && x->lr == y->lr &&
                             x->lost_update_fraction == y->lost_update_fraction &&
                             !memcmp(x->comm_bytes, y->comm_bytes, sizeof x->comm_bytes),
                         "%d ranks, stage %d, step %d: plain loss %.9g norm %.9g, graphed %.9g %.9g", world,
                         stage, s + 1, x->loss, x->grad_norm, y->loss, y->grad_norm);
        }
        for (int s = 2; s < 5; s++) {
            long calls = graphed.calls_at[s + 1] - graphed.calls_at[s], want = s < 4 ? 5 : 4;
            ZT_CHECK_MSG(calls == want, "%d ranks, stage %d, replayed step %d: %ld calls, not %ld", world, stage,
                         s + 1, calls, want);
            ZT_CHECK_MSG(graphed.waits_at[s + 1] - graphed.waits_at[s] == 1, "%d ranks, stage %d, step %d: %ld waits",
                         world, stage, s + 1, graphed.waits_at[s + 1] - graphed.waits_at[s]);
        }
        if (rank == 0)
            printf("     %d rank(s), stage %d: host calls per step, plain fast %ld, replayed %ld\n", world, stage,
                   plain.calls_at[4] - plain.calls_at[3], graphed.calls_at[4] - graphed.calls_at[3]);
    }
}

int main(int argc, char **argv)
{
    if (zt_comm_init_mpi(&argc, &argv, &rank, &world) != ZT_OK)
        return 1;
    ZT_RUN(test_recorder_keeps_what_a_graph_keeps);
    ZT_RUN(test_graphed_run_matches_plain);
    ZT_RUN(test_graphed_fp16_matches_plain);
    ZT_RUN(test_graphed_loss_mask_matches_plain);
    ZT_RUN(test_replayed_step_is_five_calls);
    ZT_RUN(test_graphed_lazy_waits);
    ZT_RUN(test_ranks_replay_with_their_collectives);
    zt_matmul_shutdown();
    zt_comm_finalize_mpi();
    ZT_TEST_MAIN_END();
}
