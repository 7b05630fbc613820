/* test_zero.c — the ZeRO engine over real MPI ranks (contract §2-§4).
 *
 * Run as `mpirun -np N build/tests/test_zero` (tests/cli/zero_mpi.sh does, for
 * N = 2 and 4); run alone it is a world of one and checks the same things.
 * For each case, rank 0 first trains a one-process reference with micro-batch
 * N*B (a local communicator), then all ranks train the same steps with
 * micro-batch B each.  In fp32:
 *   losses and grad norms over 10 steps     rel err <= 1e-5
 *   final weights                            rel err <= 1e-5 (max|diff| / max|ref| per tensor)
 * for stages 0-3, hybrid sharding, gradient accumulation, tied embeddings and
 * parameter counts that need padding.  Then: model-state bytes per rank equal the
 * stage's formula exactly; collective bytes per step equal ZeRO's volumes
 * (stages 0-2: 2 Psi, stage 3: 3 Psi less the root unit, which stays gathered
 * from forward to backward as FSDP's root does); and FSDP's aligned mode and
 * DeepSpeed give bit-identical losses in bf16.  DeepSpeed's and FSDP's knobs
 * (persistence threshold, max live parameters, prefetch bucket, limit_all_gathers,
 * reduce and all-gather buckets) each change the collectives' count, the bytes in
 * flight or the memory by exactly what they promise, and never a number. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/comm/comm.h"
#include "../src/core/mem.h"
#include "../src/io/hf_model.h"
#include "../src/io/safetensors.h"
#include "../src/io/tokens.h"
#include "../src/train/batches.h"
#include "../src/kernels/matmul.h"
#include "../src/model/llama.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "tmpdir.h"
#include "weights_cmp.h"

static int rank, world;
static char tmp[128]; /* rank 0's scratch directory, shared with every rank */

typedef struct run_out {
    double loss[16], gnorm[16], scale[16];
    int skipped[16];
    int nsteps;
    zt_train_result res;
    char dir[256];
} run_out;

/* The trainer's per-step metrics, kept for comparison (every rank gets them). */
static void record_step(void *ctx, const zt_step_metrics *m)
{
    run_out *o = ctx;
    if (o->nsteps >= 16)
        return;
    o->loss[o->nsteps] = m->loss;
    o->gnorm[o->nsteps] = m->grad_norm;
    o->scale[o->nsteps] = m->loss_scale;
    o->skipped[o->nsteps] = m->skipped;
    o->nsteps++;
}

/* Optional extras of a run: fp16 overflow injection and stopping early. */
typedef struct run_extra {
    long inject_step, inject_count, stop_after;
    int inject_rank;
    long save_steps;
    const char *resume_dir;
    const zt_overlap *overlap; /* replaces the plan's overlap settings */
} run_extra;
static const run_extra *extra; /* set around a call to train() */

/* The test seam: from inject_step, for inject_count steps (at least 1), plant an
 * inf in inject_rank's gradient, as an fp16 overflow would. */
static void inject_nonfinite(void *ctx, long step, int r, zt_engine *eng)
{
    const run_extra *x = ctx;
    long n = x->inject_count > 0 ? x->inject_count : 1;
    if (x->inject_step > 0 && step >= x->inject_step && step < x->inject_step + n && r == x->inject_rank)
        zt_engine_inject_nonfinite(eng);
}

/* Train with plan request req over comm (NULL: one process, local). */
static int train(const char *fixture, zt_plan_request req, int B, int A, long steps, zt_comm *comm,
                 const char *tag, run_out *o)
{
    char data[256];
    snprintf(data, sizeof data, "%s/tokens.npy", fixture);
    snprintf(o->dir, sizeof o->dir, "%s/%s", tmp, tag);
    zt_err err = {0};
    int W = comm ? comm->world : 1;
    zt_plan plan;
    ZT_CHECK_MSG(zt_plan_resolve(&req, W, &plan, &err) == ZT_OK, "%s", err.msg);
    plan.prec.save = ZT_F32;
    if (extra && extra->overlap)
        plan.overlap = *extra->overlap;
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = 16;
    st.batch = B;
    st.accum = A;
    st.max_steps = steps;
    st.lr = 1e-4;
    st.weight_decay = 0.1;
    st.warmup_steps = 2;
    st.seed = 0;
    st.save_steps = extra ? extra->save_steps : 0;
    zt_train_args a;
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK, "%s", err.msg);
    zt_comm c;
    if (comm) {
        ZT_CHECK(zt_comm_create(&c, a.plan.group_size, &err) == ZT_OK);
        a.comm = &c;
    }
    a.model_dir = fixture;
    a.data_path = data;
    a.output_dir = o->dir;
    a.on_step = record_step;
    a.on_step_ctx = o;
    o->nsteps = 0;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    zt_train_hooks hooks = {0};
    if (extra) {
        hooks.stop_after_steps = extra->stop_after;
        hooks.before_update = inject_nonfinite;
        hooks.ctx = (void *)extra;
        a.hooks = &hooks;
        a.resume_dir = extra->resume_dir;
    }
    int rc = zt_train(&a, &o->res, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "rank %d: %s", rank, err.msg);
    if (comm)
        zt_comm_free(&c);
    return rc;
}

static zt_plan_request fsdp(zt_sharding s)
{
    zt_plan_request r;
    zt_plan_request_init(&r);
    r.face = ZT_FACE_FSDP;
    r.sharding = s;
    return r;
}

static zt_plan_request deepspeed(int stage)
{
    zt_plan_request r;
    zt_plan_request_init(&r);
    r.face = ZT_FACE_DEEPSPEED;
    r.zero_stage = stage;
    return r;
}

/* N ranks x B reproduce 1 rank x N*B (same global batch, contract §4 data order). */
static void equivalence(const char *fixture, zt_plan_request req, int A, const char *name)
{
    zt_comm world_comm;
    zt_err err;
    const int B = 1, steps = 10;
    run_out ref = {0}, dist = {0};
    if (rank == 0) {
        zt_plan_request single = req;
        single.ranks_per_node = 0;
        train(fixture, single, B * world, A, steps, NULL, "ref", &ref);
    }
    if (req.ranks_per_node > world)
        req.ranks_per_node = world;
    (void)world_comm;
    (void)err;
    zt_comm tmpc;
    zt_comm_create(&tmpc, 1, &err); /* only for its world size */
    train(fixture, req, B, A, steps, &tmpc, "dist", &dist);
    zt_comm_free(&tmpc);
    if (rank != 0)
        return;
    ZT_CHECK_MSG(ref.nsteps == steps && dist.nsteps == steps, "%s: %d / %d steps logged", name,
                 ref.nsteps, dist.nsteps);
    for (int s = 0; s < steps && s < dist.nsteps; s++) {
        ZT_CHECK_CLOSE(dist.loss[s], ref.loss[s], 1e-5, 1e-6);
        ZT_CHECK_CLOSE(dist.gnorm[s], ref.gnorm[s], 1e-5, 1e-6);
    }
    double d = weights_diff_dirs(dist.dir, ref.dir);
    ZT_CHECK_MSG(d <= 1e-5, "%s (%d ranks): final weights rel err %.3g", name, world, d);
    printf("     %-34s %d ranks: loss %.7f vs %.7f, weights rel err %.2g\n", name, world,
           dist.loss[steps - 1], ref.loss[steps - 1], d);
}

static const char *TIED = "tests/fixtures/gqa_tied", *ODD = "tests/fixtures/untied_odd";
static char PADDED[256]; /* a model whose unit sizes are odd, written by make_padded_model */

/* hidden 35, 5 heads of 6, 1 kv head, ffn 51, vocab 259, untied: the root unit
 * has 18165 parameters and each layer 7945, so every shard group pads. */
static int make_padded_model(const char *dir)
{
    zt_llama_config c = {0};
    c.hidden_size = 35;
    c.intermediate_size = 51;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 5;
    c.num_key_value_heads = 1;
    c.head_dim = 6;
    c.vocab_size = 259;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000;
    c.initializer_range = 0.05;
    c.torch_dtype = ZT_F32;
    snprintf(c.model_type, sizeof c.model_type, "llama");
    zt_err err;
    int rc = zt_hf_init_random(dir, &c, 11, ZT_F32, 0, NULL, &err);
    zt_tokens t;
    char path[300];
    if (rc == ZT_OK && (rc = zt_tokens_load("tests/fixtures/gqa_tied/tokens.npy", &t, &err)) == ZT_OK) {
        snprintf(path, sizeof path, "%s/tokens.npy", dir);
        rc = zt_tokens_write_npy(path, t.ids, t.n, &err);
        zt_tokens_free(&t);
    }
    return rc;
}

static void test_stage0_no_shard(void) { equivalence(ODD, fsdp(ZT_SHARDING_NO_SHARD), 1, "NO_SHARD"); }
static void test_stage1(void) { equivalence(ODD, deepspeed(1), 1, "DeepSpeed ZeRO-1"); }
static void test_stage2_shard_grad_op(void) { equivalence(ODD, fsdp(ZT_SHARDING_SHARD_GRAD_OP), 1, "SHARD_GRAD_OP"); }
static void test_stage3_full_shard(void) { equivalence(ODD, fsdp(ZT_SHARDING_FULL_SHARD), 1, "FULL_SHARD"); }
static void test_stage3_tied(void) { equivalence(TIED, fsdp(ZT_SHARDING_FULL_SHARD), 1, "FULL_SHARD tied"); }
static void test_deepspeed_stage3_no_wrap(void)
{
    zt_plan_request r = deepspeed(3);
    r.wrap_set = 1;
    r.wrap = ZT_WRAP_NONE;
    equivalence(TIED, r, 1, "ZeRO-3 one unit");
}
static void test_accumulation_every_stage(void)
{
    equivalence(ODD, fsdp(ZT_SHARDING_NO_SHARD), 2, "NO_SHARD, A=2");
    equivalence(ODD, deepspeed(1), 3, "ZeRO-1, A=3");
    equivalence(TIED, fsdp(ZT_SHARDING_SHARD_GRAD_OP), 2, "SHARD_GRAD_OP, A=2");
    equivalence(ODD, fsdp(ZT_SHARDING_FULL_SHARD), 2, "FULL_SHARD, A=2");
}
static void test_padding_odd_sizes(void)
{
    equivalence(PADDED, fsdp(ZT_SHARDING_FULL_SHARD), 1, "FULL_SHARD, odd sizes");
    equivalence(PADDED, fsdp(ZT_SHARDING_SHARD_GRAD_OP), 2, "SHARD_GRAD_OP, odd sizes, A=2");
    equivalence(PADDED, deepspeed(1), 1, "ZeRO-1, odd sizes (one unit)");
}

static void test_hybrid(void)
{
    zt_plan_request r = fsdp(ZT_SHARDING_HYBRID_SHARD);
    r.ranks_per_node = world >= 4 ? 2 : 1;
    equivalence(ODD, r, 1, "HYBRID_SHARD");
    r = fsdp(ZT_SHARDING_HYBRID_SHARD_ZERO2);
    r.ranks_per_node = world >= 4 ? 2 : 1;
    equivalence(TIED, r, 2, "HYBRID_SHARD_ZERO2, A=2");
}

/* Overlap moves collectives, never numbers: the same plan with every overlap off,
 * with prefetch both ways and the reduce-scatter in flight across the next unit's
 * backward, and with BACKWARD_POST, gives bit-identical losses, norms and weights
 * (fp32 reduce, whose in-flight send is the staging itself; bf16 reduce through its
 * own buffer; accumulation, where the root's reduce-scatter is still in flight when
 * the next micro-batch begins; hybrid, which sums replicas when one finishes; stage 0,
 * whose all-reduces start in the last micro-batch's backward).  The
 * counters show the overlap happened: in stage 3 every layer unit is prefetched
 * twice per micro-batch (the root's acquire starts the first layer's gather, the
 * root's grad_begin the last layer's), and in a shard group of more than one rank
 * every unit's reduce-scatter finishes after its grad_end returned. */
static void overlap_case(const char *fixture, zt_plan_request req, int A, const char *name)
{
    static const zt_overlap off = {.forward_prefetch = 0, .backward_prefetch = ZT_BACKWARD_PREFETCH_NONE,
                                   .overlap_reduce = 0};
    static const zt_overlap on = {.forward_prefetch = 1, .backward_prefetch = ZT_BACKWARD_PREFETCH_PRE,
                                  .overlap_reduce = 1};
    static const zt_overlap post = {.forward_prefetch = 0, .backward_prefetch = ZT_BACKWARD_PREFETCH_POST,
                                    .overlap_reduce = 1};
    const zt_overlap *modes[3] = {&off, &on, &post};
    const long steps = 4;
    run_out o[3];
    zt_comm c;
    zt_err err;
    zt_plan plan;
    ZT_CHECK(zt_plan_resolve(&req, world, &plan, &err) == ZT_OK);
    zt_comm_create(&c, 1, &err);
    for (int k = 0; k < 3; k++) {
        memset(&o[k], 0, sizeof o[k]);
        run_extra x = {0};
        x.overlap = modes[k];
        extra = &x;
        char tag[64];
        snprintf(tag, sizeof tag, "overlap%d", k);
        train(fixture, req, 1, A, steps, &c, tag, &o[k]);
        extra = NULL;
    }
    zt_comm_free(&c);
    /* units the backward gathers: every layer unit (stage 3), per micro-step */
    zt_layout lay;
    zt_llama_config cfg;
    char path[300];
    snprintf(path, sizeof path, "%s/config.json", fixture);
    ZT_CHECK(zt_hf_config_read(path, &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&lay, &cfg, plan.wrap, (size_t)plan.min_num_params, plan.group_size, &err) == ZT_OK);
    long layer_units = lay.nunits - 1, micro = steps * A;
    zt_layout_free(&lay);
    int sharded = plan.group_size > 1;
    ZT_CHECK_MSG(o[0].res.prefetch_used == 0 && o[0].res.reduce_overlapped == 0, "%s: overlap off overlapped", name);
    if (plan.stage == 3)
        ZT_CHECK_MSG(o[1].res.prefetch_used == micro * 2 * layer_units && o[1].res.prefetch_dropped == 0,
                     "%s: %ld prefetches used, %ld dropped; want %ld, 0", name, o[1].res.prefetch_used,
                     o[1].res.prefetch_dropped, micro * 2 * layer_units);
    if (plan.stage == 3) /* BACKWARD_POST: each layer unit after the last one in backward */
        ZT_CHECK_MSG(o[2].res.prefetch_used == micro * (layer_units - 1), "%s: POST prefetched %ld",
                     name, o[2].res.prefetch_used);
    /* stages 2-3 reduce-scatter every unit of every micro-batch; stage 0 on several
     * ranks all-reduces every unit once per step, in the last micro-batch's backward */
    long want = plan.stage == 0 ? (world > 1 ? steps * (layer_units + 1) : 0)
                                : (sharded ? micro * (layer_units + 1) : 0);
    ZT_CHECK_MSG(o[1].res.reduce_overlapped == want, "%s: %ld reductions overlapped, want %ld", name,
                 o[1].res.reduce_overlapped, want);
    if (rank != 0)
        return;
    for (int k = 1; k < 3; k++) {
        ZT_CHECK(o[k].nsteps == steps);
        for (int s = 0; s < steps; s++)
            ZT_CHECK_MSG(o[k].loss[s] == o[0].loss[s] && o[k].gnorm[s] == o[0].gnorm[s],
                         "%s, mode %d, step %d: loss %.9g vs %.9g", name, k, s + 1, o[k].loss[s], o[0].loss[s]);
        ZT_CHECK_MSG(weights_diff_dirs(o[k].dir, o[0].dir) == 0.0, "%s, mode %d: weights differ", name, k);
    }
    printf("     %-34s %d ranks: bit-identical; %ld gathers prefetched, %ld reductions overlapped\n", name,
           world, o[1].res.prefetch_used, o[1].res.reduce_overlapped);
}

static void test_overlap_is_bit_exact(void)
{
    zt_plan_request aligned = fsdp(ZT_SHARDING_FULL_SHARD);
    aligned.torch_dtype = "bf16";
    aligned.mixed_precision = "bf16";
    zt_plan_request hybrid = fsdp(ZT_SHARDING_HYBRID_SHARD);
    hybrid.ranks_per_node = world >= 4 ? 2 : 1;
    overlap_case(ODD, fsdp(ZT_SHARDING_FULL_SHARD), 2, "FULL_SHARD fp32, A=2");
    overlap_case(TIED, aligned, 1, "FULL_SHARD aligned bf16");
    overlap_case(PADDED, fsdp(ZT_SHARDING_SHARD_GRAD_OP), 2, "SHARD_GRAD_OP fp32, odd sizes, A=2");
    overlap_case(ODD, hybrid, 1, "HYBRID_SHARD fp32");
    zt_plan_request ns_aligned = fsdp(ZT_SHARDING_NO_SHARD);
    ns_aligned.torch_dtype = "bf16";
    ns_aligned.mixed_precision = "bf16";
    overlap_case(TIED, fsdp(ZT_SHARDING_NO_SHARD), 2, "NO_SHARD fp32, A=2");
    overlap_case(ODD, ns_aligned, 1, "NO_SHARD aligned bf16");
}

/* Train the untied_odd fixture (micro-batch 1, no accumulation) for `steps` over all
 * ranks under req's plan, and build the layout that plan gives the model, for the checks
 * of bytes against ZeRO's formulas. */
static void run_odd(zt_plan_request req, long steps, const char *tag, zt_plan *plan, run_out *o,
                    zt_llama_config *cfg, zt_layout *lay)
{
    zt_err err;
    ZT_CHECK(zt_plan_resolve(&req, world, plan, &err) == ZT_OK);
    zt_comm c;
    zt_comm_create(&c, 1, &err);
    train(ODD, req, 1, 1, steps, &c, tag, o);
    zt_comm_free(&c);
    ZT_CHECK(zt_hf_config_read("tests/fixtures/untied_odd/config.json", cfg, &err) == ZT_OK);
    int pad = plan->stage == 0 ? 1 : plan->group_size;
    ZT_CHECK(zt_layout_build(lay, cfg, plan->wrap, (size_t)plan->min_num_params, pad, &err) == ZT_OK);
}

/* Model-state bytes per rank, exactly, from the layout: with P_u the padded unit
 * sizes, G the shard group, m the master and c the compute dtype sizes. */
static void test_memory_accounting(void)
{
    struct { zt_plan_request req; const char *mp, *load; } cases[4];
    cases[0].req = fsdp(ZT_SHARDING_NO_SHARD);
    cases[1].req = deepspeed(1);
    cases[2].req = fsdp(ZT_SHARDING_SHARD_GRAD_OP);
    cases[3].req = fsdp(ZT_SHARDING_FULL_SHARD);
    for (int k = 0; k < 4; k++) {
        zt_plan_request req = cases[k].req;
        req.mixed_precision = k % 2 ? "bf16" : "no";
        req.torch_dtype = "bf16";
        zt_plan plan;
        run_out o = {0};
        zt_llama_config cfg;
        zt_layout lay;
        run_odd(req, 1, "mem", &plan, &o, &cfg, &lay);
        size_t G = (size_t)plan.group_size, m = zt_dtype_size(plan.prec.master);
        size_t c_sz = zt_dtype_size(plan.prec.compute), psi = lay.padded_numel, maxP = 0;
        for (int u = 0; u < lay.nunits; u++)
            maxP = lay.units[u].padded_numel > maxP ? lay.units[u].padded_numel : maxP;
        size_t want_master = psi / G * m, want_optim = 2 * psi / G * m;
        size_t want_grads = plan.stage <= 1 ? psi * m : psi / G * m;
        /* stage 3: the root, the unit in use and, with prefetch (FSDP's default
         * BACKWARD_PRE), the next one */
        size_t slots = plan.overlap.backward_prefetch != ZT_BACKWARD_PREFETCH_NONE ? 3 : 2;
        slots = (size_t)lay.nunits < slots ? (size_t)lay.nunits : slots;
        size_t want_gathered = plan.stage == 3   ? slots * maxP * c_sz
                               : plan.stage == 0 && plan.prec.master == plan.prec.compute ? 0
                                                                                          : psi * c_sz;
        ZT_CHECK_MSG(o.res.state.master == want_master, "stage %d master %zu, want %zu", plan.stage,
                     o.res.state.master, want_master);
        ZT_CHECK_MSG(o.res.state.grads == want_grads, "stage %d grads %zu, want %zu", plan.stage,
                     o.res.state.grads, want_grads);
        ZT_CHECK_MSG(o.res.state.optim == want_optim, "stage %d optim %zu, want %zu", plan.stage,
                     o.res.state.optim, want_optim);
        ZT_CHECK_MSG(o.res.state.gathered == want_gathered, "stage %d gathered %zu, want %zu",
                     plan.stage, o.res.state.gathered, want_gathered);
        /* estimate-memory's numbers are the engine's, before anything is allocated */
        zt_engine_bytes est = zt_engine_estimate(&lay, plan.prec, plan.stage, plan.group_size, &plan.overlap);
        ZT_CHECK(est.master == o.res.state.master && est.grads == o.res.state.grads);
        ZT_CHECK(est.optim == o.res.state.optim && est.gathered == o.res.state.gathered);
        ZT_CHECK_MSG(est.comm == o.res.state.comm, "comm estimate %zu, measured %zu", est.comm, o.res.state.comm);
        ZT_CHECK(zt_model_activation_bytes(&cfg, 1, 16, 0, plan.prec.compute) == o.res.activation_bytes);
        if (rank == 0)
            printf("     stage %d %-24s per rank: master %zu, grads %zu, optim %zu, gathered %zu bytes\n",
                   plan.stage, plan.mode, o.res.state.master, o.res.state.grads, o.res.state.optim,
                   o.res.state.gathered);
        zt_layout_free(&lay);
    }
}

/* Collective bytes per step (one micro-step) against ZeRO's volumes. */
static void test_communication_volume(void)
{
    zt_plan_request reqs[4] = {fsdp(ZT_SHARDING_NO_SHARD), deepspeed(1), fsdp(ZT_SHARDING_SHARD_GRAD_OP),
                               fsdp(ZT_SHARDING_FULL_SHARD)};
    for (int k = 0; k < 4; k++) {
        zt_plan_request req = reqs[k];
        req.mixed_precision = "bf16";
        zt_plan plan;
        run_out o = {0};
        zt_llama_config cfg;
        zt_layout lay;
        run_odd(req, 2, "vol", &plan, &o, &cfg, &lay);
        uint64_t psi = lay.padded_numel, r = 2, root = lay.units[lay.root_unit].padded_numel;
        uint64_t *b = o.res.step_bytes, total = b[0] + b[1] + b[2];
        if (world == 1) {
            ZT_CHECK_MSG(total == 0, "one rank moved %llu bytes", (unsigned long long)total);
        } else if (plan.stage == 0) {
            ZT_CHECK(b[ZT_COLL_ALLREDUCE] == 2 * psi * r && total == 2 * psi * r);
        } else if (plan.stage <= 2) {
            ZT_CHECK(b[ZT_COLL_REDUCE_SCATTER] == psi * r && b[ZT_COLL_ALLGATHER] == psi * r);
            ZT_CHECK(total == 2 * psi * r);
        } else {
            ZT_CHECK(b[ZT_COLL_REDUCE_SCATTER] == psi * r && b[ZT_COLL_ALLGATHER] == (2 * psi - root) * r);
            ZT_CHECK(total == (3 * psi - root) * r);
        }
        if (rank == 0)
            printf("     stage %d: %.3f Psi per step (allgather %llu, reduce_scatter %llu, allreduce %llu bytes)\n",
                   plan.stage, (double)total / (double)(psi * r), (unsigned long long)b[0],
                   (unsigned long long)b[1], (unsigned long long)b[2]);
        zt_layout_free(&lay);
    }
}

/* The reduce-scatter's sum, element by element: member j's value of element e is
 * value(j, e), finite, of mixed signs and exponents so that a change of order or of
 * rounding shows; the shard must hold the sum over members in rank order, rounded to
 * the 16-bit type after each addition (comm.h), for each dtype.  The shard length
 * (70001) takes the parallel path and ends in a partial block. */
static uint32_t value_bits(int j, size_t e)
{
    uint64_t x = (uint64_t)e * 0x9E3779B97F4A7C15ull + (uint64_t)(j + 1) * 0xD1B54A32D192ED03ull;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    return (uint32_t)x;
}

/* v rounded to dt and read back: the value a dt buffer keeps */
static float as_dtype(float v, zt_dtype dt)
{
    float kept;
    zt_store_f32(&kept, dt, 0, v);
    return zt_load_f32(&kept, dt, 0);
}

static float value(int j, size_t e, zt_dtype dt)
{
    uint32_t r = value_bits(j, e);
    float mag = (float)(1 + (r & 0xff)) * ldexpf(1.0f, (int)((r >> 8) % 9) - 12); /* 2^-12 .. 2^-4 x 1..256 */
    return as_dtype((r >> 31) ? -mag : mag, dt);
}

/* zt_comm_agree: a rank that failed keeps its status and message; every other rank
 * returns the worst status of any rank with an empty message (each error printed
 * once).  Here the last rank refuses its input (ZT_EINPUT, the worst) and, with
 * more than one rank, rank 0 fails otherwise (ZT_EFAIL). */
static void test_agree_on_the_worst_status(void)
{
    zt_comm c;
    zt_err err = {0};
    ZT_CHECK(zt_comm_create(&c, world, &err) == ZT_OK);
    ZT_CHECK(zt_comm_agree(&c, ZT_OK, &err) == ZT_OK);
    int rc = ZT_OK;
    if (rank == world - 1)
        rc = zt_fail(&err, ZT_EINPUT, "bad input on rank %d", rank);
    else if (rank == 0)
        rc = zt_fail(&err, ZT_EFAIL, "failure on rank 0");
    int got = zt_comm_agree(&c, rc, &err);
    if (rank == world - 1)
        ZT_CHECK(got == ZT_EINPUT && strstr(err.msg, "bad input on rank"));
    else if (rank == 0)
        ZT_CHECK(got == ZT_EFAIL && !strcmp(err.msg, "failure on rank 0"));
    else
        ZT_CHECK_MSG(got == ZT_EINPUT && err.msg[0] == '\0', "rank %d: %d '%s'", rank, got, err.msg);
    zt_comm_free(&c);
}

static void test_reduce_scatter_sums_in_rank_order(void)
{
    zt_comm c;
    zt_err err;
    ZT_CHECK(zt_comm_create(&c, world, &err) == ZT_OK);
    const size_t per = 70001, n = per * (size_t)world;
    const zt_dtype dts[3] = {ZT_F32, ZT_BF16, ZT_F16};
    for (int k = 0; k < 3; k++) {
        zt_dtype dt = dts[k];
        size_t es = zt_dtype_size(dt), bad = 0;
        float *mine = malloc(n * sizeof *mine), *shard32 = malloc(per * sizeof *shard32);
        void *full = malloc(n * es), *slices = malloc(n * es), *shard = malloc(per * es);
        ZT_CHECK(mine && shard32 && full && slices && shard);
        if (!mine || !shard32 || !full || !slices || !shard) {
            free(mine), free(shard32), free(full), free(slices), free(shard);
            break;
        }
        for (size_t e = 0; e < n; e++)
            mine[e] = value(rank, e, dt);
        zt_convert(full, dt, mine, ZT_F32, n);
        zt_comm_reduce_scatter(&c, shard, full, slices, n, dt);
        zt_convert(shard32, ZT_F32, shard, dt, per);
        for (size_t i = 0; i < per; i++) {
            size_t e = (size_t)c.shard_rank * per + i;
            float s = value(0, e, dt);
            for (int j = 1; j < world; j++)
                s = as_dtype(s + value(j, e, dt), dt);
            bad += memcmp(&s, &shard32[i], sizeof s) != 0;
        }
        ZT_CHECK_MSG(bad == 0, "%s reduce-scatter over %d ranks: %zu of %zu sums differ from rank order",
                     zt_dtype_name(dt), world, bad, per);
        free(mine), free(shard32), free(full), free(slices), free(shard);
    }
    zt_comm_free(&c);
}

/* The seed's point: FSDP's aligned mode and DeepSpeed run the same numbers. */
static void test_fsdp_aligned_equals_deepspeed(void)
{
    zt_plan_request f = fsdp(ZT_SHARDING_FULL_SHARD), d = deepspeed(3);
    f.torch_dtype = d.torch_dtype = "bf16";
    f.mixed_precision = d.mixed_precision = "bf16";
    run_out a = {0}, b = {0};
    zt_comm c;
    zt_err err;
    zt_comm_create(&c, 1, &err);
    train(TIED, f, 1, 1, 10, &c, "fsdp", &a);
    train(TIED, d, 1, 1, 10, &c, "ds", &b);
    zt_comm_free(&c);
    if (rank != 0)
        return;
    for (int s = 0; s < 10; s++)
        ZT_CHECK_MSG(a.loss[s] == b.loss[s] && a.gnorm[s] == b.gnorm[s], "step %d: %.9g vs %.9g", s + 1,
                     a.loss[s], b.loss[s]);
    ZT_CHECK(weights_diff_dirs(a.dir, b.dir) == 0.0);
}

/* fp16 with dynamic loss scaling: an inf in one rank's gradient makes every
 * rank skip the step, leaves every parameter bit-identical, and moves the scale
 * by DeepSpeed's rules (hysteresis 2: the first overflow spends the budget, the
 * second halves the scale). */
static void test_fp16_overflow_skips_on_every_rank(void)
{
    zt_plan_request req = fsdp(ZT_SHARDING_FULL_SHARD);
    req.mixed_precision = "fp16";
    run_out a = {0}, b = {0}, c = {0};
    zt_comm comm;
    zt_err err;
    zt_comm_create(&comm, 1, &err);
    run_extra inj = {3, 2, 0, world - 1, 0, NULL, NULL}; /* steps 3 and 4, on the last rank */
    extra = &inj;
    train(TIED, req, 1, 1, 6, &comm, "fp16_inj", &a);
    ZT_CHECK_MSG(a.res.skipped_steps == 2, "rank %d skipped %ld steps", rank, a.res.skipped_steps);
    ZT_CHECK(a.res.loss_scale == 32768.0);
    run_extra upto4 = {3, 2, 4, world - 1, 0, NULL, NULL};
    extra = &upto4;
    train(TIED, req, 1, 1, 6, &comm, "fp16_inj4", &c);
    run_extra upto2 = {0, 0, 2, 0, 0, NULL, NULL};
    extra = &upto2;
    train(TIED, req, 1, 1, 6, &comm, "fp16_two", &b);
    extra = NULL;
    zt_comm_free(&comm);
    if (rank != 0)
        return;
    static const double want_scale[6] = {65536, 65536, 65536, 65536, 32768, 32768};
    static const int want_skip[6] = {0, 0, 1, 1, 0, 0};
    for (int s = 0; s < 6 && s < a.nsteps; s++) {
        ZT_CHECK_MSG(a.scale[s] == want_scale[s], "step %d scale %g, want %g", s + 1, a.scale[s], want_scale[s]);
        ZT_CHECK_MSG(a.skipped[s] == want_skip[s], "step %d skipped %d", s + 1, a.skipped[s]);
    }
    /* two skipped steps change nothing: after 4 steps the weights are those after 2 */
    ZT_CHECK_MSG(weights_diff_dirs(c.dir, b.dir) == 0.0, "skipped steps moved weights by %.3g",
                 weights_diff_dirs(c.dir, b.dir));
    ZT_CHECK(weights_diff_dirs(a.dir, b.dir) > 0.0); /* and the steps after them do train */
}

/* Save at step 3, resume, and the run continues bit for bit: losses of steps
 * 4-6 and the final weights equal those of the run that never stopped.  Covered
 * for fp32 ZeRO-3, a Kahan-compensated bf16 master (its compensation buffer is
 * part of the state) and fp16 (the loss scaler is). */
static void resume_case(zt_plan_request req, const char *tag)
{
    char ck[400], t1[64], t2[64];
    snprintf(t1, sizeof t1, "%s_full", tag);
    snprintf(t2, sizeof t2, "%s_resumed", tag);
    run_out full = {0}, resumed = {0};
    zt_comm comm;
    zt_err err;
    zt_comm_create(&comm, 1, &err);
    run_extra save = {0, 0, 0, 0, 3, NULL, NULL};
    extra = &save;
    train(TIED, req, 1, 1, 6, &comm, t1, &full);
    snprintf(ck, sizeof ck, "%s/%s/checkpoint-3", tmp, t1);
    run_extra res = {0, 0, 0, 0, 0, ck, NULL};
    extra = &res;
    train(TIED, req, 1, 1, 6, &comm, t2, &resumed);
    extra = NULL;
    zt_comm_free(&comm);
    if (rank != 0)
        return;
    ZT_CHECK_MSG(full.nsteps == 6 && resumed.nsteps == 3, "%s: %d and %d steps logged", tag, full.nsteps,
                 resumed.nsteps);
    for (int s = 0; s < 3 && s < resumed.nsteps; s++)
        ZT_CHECK_MSG(resumed.loss[s] == full.loss[s + 3] && resumed.gnorm[s] == full.gnorm[s + 3],
                     "%s step %d: %.9g vs %.9g", tag, s + 4, resumed.loss[s], full.loss[s + 3]);
    ZT_CHECK_MSG(weights_diff_dirs(resumed.dir, full.dir) == 0.0, "%s: resumed weights differ by %.3g", tag,
                 weights_diff_dirs(resumed.dir, full.dir));
}

static void test_resume_is_bit_exact(void)
{
    resume_case(fsdp(ZT_SHARDING_FULL_SHARD), "resume_fp32");
    zt_plan_request k = fsdp(ZT_SHARDING_SHARD_GRAD_OP);
    k.torch_dtype = "bf16";
    k.master_compensation = "kahan";
    resume_case(k, "resume_kahan");
    zt_plan_request h = deepspeed(1);
    h.mixed_precision = "fp16";
    resume_case(h, "resume_fp16");
}

/* ---- DeepSpeed's and FSDP's knobs (precision.h) --------------------------------- */

/* One knob against the same run without it: losses and grad norms equal to the bit,
 * and the same final weights; what the knob changes (collective calls, bytes, memory)
 * is checked by the caller on the two results. */
static void knob_pair(zt_plan_request base, zt_plan_request knob, const char *name, run_out *b, run_out *k,
                      zt_layout *lay, zt_plan *plan)
{
    zt_err err;
    zt_comm c;
    zt_llama_config cfg;
    const long steps = 3;
    const int A = 2;
    ZT_CHECK(zt_plan_resolve(&knob, world, plan, &err) == ZT_OK);
    zt_comm_create(&c, 1, &err);
    memset(b, 0, sizeof *b);
    memset(k, 0, sizeof *k);
    train(ODD, base, 1, A, steps, &c, "knob_base", b);
    train(ODD, knob, 1, A, steps, &c, "knob", k);
    zt_comm_free(&c);
    ZT_CHECK(zt_hf_config_read("tests/fixtures/untied_odd/config.json", &cfg, &err) == ZT_OK);
    int pad = plan->stage == 0 ? 1 : plan->group_size;
    ZT_CHECK(zt_layout_build(lay, &cfg, plan->wrap, (size_t)plan->min_num_params, pad, &err) == ZT_OK);
    if (rank != 0)
        return;
    ZT_CHECK(b->nsteps == steps && k->nsteps == steps);
    for (int s = 0; s < steps; s++)
        ZT_CHECK_MSG(k->loss[s] == b->loss[s] && k->gnorm[s] == b->gnorm[s], "%s, step %d: loss %.9g vs %.9g",
                     name, s + 1, k->loss[s], b->loss[s]);
    ZT_CHECK_MSG(weights_diff_dirs(k->dir, b->dir) == 0.0, "%s: the final weights differ", name);
}

static size_t largest_unit(const zt_layout *lay)
{
    size_t m = 0;
    for (int u = 0; u < lay->nunits; u++)
        m = lay->units[u].padded_numel > m ? lay->units[u].padded_numel : m;
    return m;
}

/* stage3_param_persistence_threshold: units of fewer parameters stay gathered.  Above
 * every unit's size, nothing is gathered per micro-step: one all-gather per unit per
 * step (the refresh after the optimizer step) instead of 1 + 2 per layer unit per
 * micro-step; Psi bytes instead of A (2 Psi - root); each unit's own gathered copy
 * instead of the pool. */
static void test_knob_persistence(void)
{
    zt_plan_request base = deepspeed(3), knob = deepspeed(3);
    knob.persistence = 100000000;
    run_out b, k;
    zt_layout lay;
    zt_plan plan;
    knob_pair(base, knob, "persistence", &b, &k, &lay, &plan);
    size_t psi = lay.padded_numel, cs = 4, root = lay.units[lay.root_unit].padded_numel;
    uint64_t layers = (uint64_t)lay.nunits - 1, A = 2;
    ZT_CHECK_MSG(k.res.state.gathered == psi * cs && b.res.state.gathered == 3 * largest_unit(&lay) * cs,
                 "gathered bytes: persistent %zu (want %zu), pool %zu", k.res.state.gathered, psi * cs,
                 b.res.state.gathered);
    ZT_CHECK(k.res.prefetch_used == 0 && b.res.prefetch_used > 0);
    if (world > 1) {
        ZT_CHECK_MSG(b.res.step_calls[ZT_COLL_ALLGATHER] == A * (1 + 2 * layers) &&
                         k.res.step_calls[ZT_COLL_ALLGATHER] == (uint64_t)lay.nunits,
                     "all-gathers per step: %llu without, %llu with persistence",
                     (unsigned long long)b.res.step_calls[ZT_COLL_ALLGATHER],
                     (unsigned long long)k.res.step_calls[ZT_COLL_ALLGATHER]);
        ZT_CHECK(b.res.step_bytes[ZT_COLL_ALLGATHER] == A * (2 * psi - root) * cs &&
                 k.res.step_bytes[ZT_COLL_ALLGATHER] == psi * cs);
        ZT_CHECK(k.res.step_bytes[ZT_COLL_REDUCE_SCATTER] == b.res.step_bytes[ZT_COLL_REDUCE_SCATTER]);
    }
    if (rank == 0)
        printf("     persistence: all-gathers per step %llu -> %llu, gathered %zu -> %zu bytes; bit-identical\n",
               (unsigned long long)b.res.step_calls[ZT_COLL_ALLGATHER],
               (unsigned long long)k.res.step_calls[ZT_COLL_ALLGATHER], b.res.state.gathered, k.res.state.gathered);
    zt_layout_free(&lay);
}

/* stage3_max_live_parameters: room for the root and one layer unit only, so a unit is
 * prefetched only while nothing but the root is gathered (the first layer unit in
 * forward, the last in backward), the pool holds two buffers, and the same
 * collectives move the same bytes. */
static void test_knob_max_live(void)
{
    zt_plan_request base = deepspeed(3), knob = deepspeed(3);
    zt_err err;
    zt_llama_config cfg;
    zt_layout l0;
    ZT_CHECK(zt_hf_config_read("tests/fixtures/untied_odd/config.json", &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&l0, &cfg, ZT_WRAP_TRANSFORMER, 0, world, &err) == ZT_OK);
    knob.max_live = (long)(l0.units[l0.root_unit].padded_numel + largest_unit(&l0));
    zt_layout_free(&l0);
    run_out b, k;
    zt_layout lay;
    zt_plan plan;
    knob_pair(base, knob, "max_live", &b, &k, &lay, &plan);
    size_t cs = 4, maxP = largest_unit(&lay);
    ZT_CHECK_MSG(k.res.prefetch_used > 0 && k.res.prefetch_used < b.res.prefetch_used,
                 "prefetches: %ld without, %ld with max_live", b.res.prefetch_used, k.res.prefetch_used);
    ZT_CHECK(b.res.state.gathered == 3 * maxP * cs && k.res.state.gathered == 2 * maxP * cs);
    for (int c = 0; c < ZT_COLL_NKINDS; c++)
        ZT_CHECK(b.res.step_bytes[c] == k.res.step_bytes[c] && b.res.step_calls[c] == k.res.step_calls[c]);
    zt_layout_free(&lay);
}

/* stage3_prefetch_bucket_size of two layer units, and FSDP without limit_all_gathers:
 * two units gathered ahead instead of one (a pool of 4), the same collectives. */
static void test_knob_prefetch_depth(void)
{
    zt_err err;
    zt_llama_config cfg;
    zt_layout l0;
    ZT_CHECK(zt_hf_config_read("tests/fixtures/untied_odd/config.json", &cfg, &err) == ZT_OK);
    ZT_CHECK(zt_layout_build(&l0, &cfg, ZT_WRAP_TRANSFORMER, 0, world, &err) == ZT_OK);
    size_t layer = l0.units[l0.layer_unit[0]].padded_numel;
    zt_layout_free(&l0);
    zt_plan_request ds = deepspeed(3), fs = fsdp(ZT_SHARDING_FULL_SHARD);
    zt_plan_request ds_knob = ds, fs_knob = fs;
    ds_knob.prefetch_bucket = (long)(2 * layer);
    fs.forward_prefetch = fs_knob.forward_prefetch = ZT_YES;
    fs_knob.limit_all_gathers = ZT_NO;
    struct { zt_plan_request b, k; const char *name; } cases[2] = {{ds, ds_knob, "prefetch bucket"},
                                                                  {fs, fs_knob, "limit_all_gathers false"}};
    for (int i = 0; i < 2; i++) {
        run_out b, k;
        zt_layout lay;
        zt_plan plan;
        knob_pair(cases[i].b, cases[i].k, cases[i].name, &b, &k, &lay, &plan);
        size_t cs = 4, maxP = largest_unit(&lay);
        ZT_CHECK_MSG(b.res.state.gathered == 3 * maxP * cs && k.res.state.gathered == 4 * maxP * cs,
                     "%s: gathered %zu -> %zu bytes", cases[i].name, b.res.state.gathered, k.res.state.gathered);
        ZT_CHECK(k.res.prefetch_used >= b.res.prefetch_used);
        for (int c = 0; c < ZT_COLL_NKINDS; c++)
            ZT_CHECK(b.res.step_bytes[c] == k.res.step_bytes[c] && b.res.step_calls[c] == k.res.step_calls[c]);
        zt_layout_free(&lay);
    }
}

/* reduce_bucket_size and allgather_bucket_size smaller than a unit's shard: the
 * reduction (ZeRO-1 at the step, ZeRO-2 and 3 per unit) and the refresh of the
 * gathered copies (ZeRO-1, 2) run in pieces of bucket / G elements per rank: more,
 * smaller calls of the same total bytes, through smaller communication buffers. */
static void test_knob_buckets(void)
{
    const long bucket = 2000;
    for (int stage = 1; stage <= 3; stage++) {
        zt_plan_request base = deepspeed(stage), knob = deepspeed(stage);
        knob.reduce_bucket = bucket;
        knob.allgather_bucket = bucket;
        run_out b, k;
        zt_layout lay;
        zt_plan plan;
        char name[64];
        snprintf(name, sizeof name, "ZeRO-%d buckets", stage);
        knob_pair(base, knob, name, &b, &k, &lay, &plan);
        if (world == 1) { /* nothing to split: a group of one reduces nothing */
            ZT_CHECK(b.res.state.comm == k.res.state.comm);
            zt_layout_free(&lay);
            continue;
        }
        uint64_t G = (uint64_t)plan.group_size, piece = (uint64_t)bucket / G, pieces = 0, A = stage == 1 ? 1 : 2;
        for (int u = 0; u < lay.nunits; u++)
            pieces += (lay.units[u].padded_numel / G + piece - 1) / piece;
        ZT_CHECK_MSG(k.res.step_calls[ZT_COLL_REDUCE_SCATTER] == A * pieces &&
                         b.res.step_calls[ZT_COLL_REDUCE_SCATTER] == A * (uint64_t)lay.nunits,
                     "%s: reduce-scatters %llu (want %llu), without %llu", name,
                     (unsigned long long)k.res.step_calls[ZT_COLL_REDUCE_SCATTER], (unsigned long long)(A * pieces),
                     (unsigned long long)b.res.step_calls[ZT_COLL_REDUCE_SCATTER]);
        if (stage <= 2)
            ZT_CHECK_MSG(k.res.step_calls[ZT_COLL_ALLGATHER] == pieces &&
                             b.res.step_calls[ZT_COLL_ALLGATHER] == (uint64_t)lay.nunits,
                         "%s: all-gathers %llu, want %llu", name,
                         (unsigned long long)k.res.step_calls[ZT_COLL_ALLGATHER], (unsigned long long)pieces);
        for (int c = 0; c < ZT_COLL_NKINDS; c++)
            ZT_CHECK(b.res.step_bytes[c] == k.res.step_bytes[c]);
        /* DeepSpeed overlaps at ZeRO-3 (overlap_comm's default): after a layer unit's
         * grad_end its pieces start at the ticks of the next unit's backward.  Those of
         * the unit reduced last among the layers, and the root's (whose grad_end closes
         * the backward), find no tick before the next reduction, so at most the other
         * layer units' pieces but their first overlap; most of them must.  ZeRO-1
         * reduces at the step and ZeRO-2 does not overlap, so none does there. */
        uint64_t ticked = (uint64_t)k.res.pieces_overlapped, can = 0;
        for (int u = 0; u < lay.nunits; u++)
            if (u != lay.root_unit && u != lay.layer_unit[0])
                can += (lay.units[u].padded_numel / G + piece - 1) / piece - 1;
        can *= A * 3; /* knob_pair: 3 steps */
        if (stage == 3)
            ZT_CHECK_MSG(ticked > can / 2 && ticked <= can && k.res.reduce_overlapped == b.res.reduce_overlapped,
                         "%s: %llu pieces started during the backward, of %llu that could; %ld vs %ld reductions "
                         "overlapped", name, (unsigned long long)ticked, (unsigned long long)can,
                         k.res.reduce_overlapped, b.res.reduce_overlapped);
        else
            ZT_CHECK_MSG(ticked == 0, "%s: %llu pieces overlapped without overlap_comm", name,
                         (unsigned long long)ticked);
        ZT_CHECK_MSG(k.res.state.comm < b.res.state.comm || stage == 1,
                     "%s: communication buffers %zu, without %zu", name, k.res.state.comm, b.res.state.comm);
        if (rank == 0)
            printf("     %s: reduce-scatters %llu -> %llu (%llu of %llu started during the backward), all-gathers "
                   "%llu -> %llu, comm buffers %zu -> %zu bytes; bit-identical\n",
                   name, (unsigned long long)b.res.step_calls[ZT_COLL_REDUCE_SCATTER],
                   (unsigned long long)k.res.step_calls[ZT_COLL_REDUCE_SCATTER], (unsigned long long)ticked,
                   (unsigned long long)can, (unsigned long long)b.res.step_calls[ZT_COLL_ALLGATHER],
                   (unsigned long long)k.res.step_calls[ZT_COLL_ALLGATHER], b.res.state.comm, k.res.state.comm);
        zt_layout_free(&lay);
    }
}

/* The emulated device (kernels/backend_emu.c): every engine buffer is an address
 * the host cannot read, so a run that finishes proves the engine, checkpoints and
 * weights reach them only through to_host / to_device; on several ranks the
 * collectives take the staged path (device -> host lane -> MPI -> device).  The
 * numbers, the bytes counted per collective, a planted inf (fp16 overflow) and a
 * resume from a checkpoint written on the CPU must all be the CPU's exactly. */
static void test_emulated_device_matches_cpu(void)
{
    zt_plan_request reqs[5] = {fsdp(ZT_SHARDING_NO_SHARD), deepspeed(1), fsdp(ZT_SHARDING_SHARD_GRAD_OP),
                               fsdp(ZT_SHARDING_FULL_SHARD), deepspeed(2)};
    reqs[1].mixed_precision = "bf16";
    reqs[3].torch_dtype = "bf16";
    reqs[3].master_compensation = "kahan";
    reqs[4].mixed_precision = "fp16";
    zt_comm comm;
    zt_err err;
    zt_comm_create(&comm, 1, &err);
    for (int k = 0; k < 5; k++) {
        run_out cpu = {0}, emu = {0};
        zt_plan_request q = reqs[k];
        run_extra save = {k == 4 ? 2 : 0, 1, 0, world - 1, 2, NULL, NULL}; /* fp16: an inf at step 2 */
        extra = &save;
        char tc[32], te[32];
        snprintf(tc, sizeof tc, "dev_cpu%d", k);
        snprintf(te, sizeof te, "dev_emu%d", k);
        train(TIED, q, 1, 1, 4, &comm, tc, &cpu);
        q.device = "emu";
        train(TIED, q, 1, 1, 4, &comm, te, &emu);
        /* fast mode (the asynchronous step, running ahead; the verdict summed over
         * the ranks on the device): the same numbers, the same skip, the same bytes */
        run_out fast = {0};
        char tf[32];
        snprintf(tf, sizeof tf, "dev_fast%d", k);
        extra = &save;
        q.kernels = "fast";
        train(TIED, q, 1, 1, 4, &comm, tf, &fast);
        q.kernels = NULL;
        /* and a checkpoint written on the CPU resumes on the device, where the run left off */
        char ck[400], tr[32];
        snprintf(ck, sizeof ck, "%s/%s/checkpoint-2", tmp, tc);
        snprintf(tr, sizeof tr, "dev_resume%d", k);
        run_extra res = {0, 0, 0, 0, 0, ck, NULL};
        extra = &res;
        run_out resumed = {0};
        train(TIED, q, 1, 1, 4, &comm, tr, &resumed);
        extra = NULL;
        for (int c = 0; c < ZT_COLL_NKINDS; c++)
            ZT_CHECK_MSG(cpu.res.step_bytes[c] == emu.res.step_bytes[c] && cpu.res.step_bytes[c] == fast.res.step_bytes[c],
                         "plan %d, %s: %llu bytes on the cpu, %llu on emu, %llu in fast mode", k,
                         zt_coll_kind_name((zt_coll_kind)c), (unsigned long long)cpu.res.step_bytes[c],
                         (unsigned long long)emu.res.step_bytes[c], (unsigned long long)fast.res.step_bytes[c]);
        if (rank != 0)
            continue;
        ZT_CHECK_MSG(cpu.nsteps == 4 && emu.nsteps == 4 && resumed.nsteps == 2, "plan %d: %d, %d, %d steps", k,
                     cpu.nsteps, emu.nsteps, resumed.nsteps);
        if (k == 4) /* the planted inf was seen: the step was skipped on the CPU (and, below, on emu) */
            ZT_CHECK(cpu.skipped[1] == 1 && cpu.skipped[0] == 0);
        for (int s = 0; s < 4 && s < emu.nsteps; s++)
            ZT_CHECK_MSG(emu.loss[s] == cpu.loss[s] && emu.gnorm[s] == cpu.gnorm[s] &&
                         emu.skipped[s] == cpu.skipped[s], "plan %d step %d: loss %.9g vs %.9g", k, s + 1,
                         emu.loss[s], cpu.loss[s]);
        ZT_CHECK_MSG(fast.nsteps == 4, "plan %d: %d fast steps", k, fast.nsteps);
        /* bf16 compute (plans 1 and 3): fast mode keeps bf16 activations (docs/gpu.md),
         * so its losses and norms are within bf16 error (2^-8) of the CPU's, not its bits,
         * and its weights within 2^-6 of a tensor's largest weight: AdamW moves a weight by
         * about lr a step whatever its gradient's size, so a weight whose small gradient
         * the activations' rounding moves (or flips) differs by up to 2 lr a step (0.0038
         * measured over four steps) */
        const int act16 = k == 1 || k == 3;
        for (int s = 0; s < 4 && s < fast.nsteps; s++) {
            const double tl = act16 ? fabs(cpu.loss[s]) / 256 : 0, tn = act16 ? fabs(cpu.gnorm[s]) / 64 : 0; /* test_async_step.c: 2^-6 */
            ZT_CHECK_MSG(fabs(fast.loss[s] - cpu.loss[s]) <= tl &&
                         (fabs(fast.gnorm[s] - cpu.gnorm[s]) <= tn || fast.gnorm[s] == cpu.gnorm[s]) &&
                         fast.skipped[s] == cpu.skipped[s], "plan %d step %d, fast: loss %.9g vs %.9g, norm %.9g vs "
                         "%.9g", k, s + 1, fast.loss[s], cpu.loss[s], fast.gnorm[s], cpu.gnorm[s]);
        }
        const double wd = weights_diff_dirs(fast.dir, cpu.dir);
        ZT_CHECK_MSG(act16 ? wd <= 1.0 / 64 : wd == 0.0, "plan %d: fast weights differ by %.3g", k, wd);
        if (act16)
            printf("     plan %d (bf16 activations in fast mode): weights within %.2g of the CPU's\n", k, wd);
        for (int s = 0; s < 2 && s < resumed.nsteps; s++)
            ZT_CHECK_MSG(resumed.loss[s] == cpu.loss[s + 2], "plan %d resumed step %d: %.9g vs %.9g", k, s + 3,
                         resumed.loss[s], cpu.loss[s + 2]);
        ZT_CHECK_MSG(weights_diff_dirs(emu.dir, cpu.dir) == 0.0, "plan %d: emu weights differ by %.3g", k,
                     weights_diff_dirs(emu.dir, cpu.dir));
        ZT_CHECK_MSG(weights_diff_dirs(resumed.dir, cpu.dir) == 0.0, "plan %d: resumed weights differ by %.3g", k,
                     weights_diff_dirs(resumed.dir, cpu.dir));
    }
    zt_comm_free(&comm);
}

int main(int argc, char **argv)
{
    if (zt_comm_init_mpi(&argc, &argv, &rank, &world) != ZT_OK)
        return 1;
    char mine[sizeof tmp] = {0}, *all = malloc(sizeof tmp * (size_t)world);
    if (rank == 0 && !tmpdir_make(mine, sizeof mine, "zt_zero_"))
        return 1;
    snprintf(PADDED, sizeof PADDED, "%s/padded_model", mine);
    if (rank == 0 && make_padded_model(PADDED) != ZT_OK)
        return 1;
    zt_comm c;
    zt_comm_create_local(&c);
    zt_comm_create(&c, 1, NULL);
    zt_comm_allgather_bytes(&c, all, mine, sizeof mine);
    memcpy(tmp, all, sizeof tmp);
    snprintf(PADDED, sizeof PADDED, "%s/padded_model", tmp);
    zt_comm_free(&c);
    free(all);
    if (rank == 0)
        printf("     world of %d rank%s\n", world, world == 1 ? "" : "s");
    else if (!freopen("/dev/null", "w", stdout)) /* one report, from rank 0; failures still reach stderr */
        return 1;
    ZT_RUN(test_stage0_no_shard);
    ZT_RUN(test_stage1);
    ZT_RUN(test_stage2_shard_grad_op);
    ZT_RUN(test_stage3_full_shard);
    ZT_RUN(test_stage3_tied);
    ZT_RUN(test_deepspeed_stage3_no_wrap);
    ZT_RUN(test_accumulation_every_stage);
    ZT_RUN(test_padding_odd_sizes);
    ZT_RUN(test_hybrid);
    ZT_RUN(test_overlap_is_bit_exact);
    ZT_RUN(test_memory_accounting);
    ZT_RUN(test_communication_volume);
    ZT_RUN(test_agree_on_the_worst_status);
    ZT_RUN(test_reduce_scatter_sums_in_rank_order);
    ZT_RUN(test_fsdp_aligned_equals_deepspeed);
    ZT_RUN(test_fp16_overflow_skips_on_every_rank);
    ZT_RUN(test_resume_is_bit_exact);
    ZT_RUN(test_knob_persistence);
    ZT_RUN(test_knob_max_live);
    ZT_RUN(test_knob_prefetch_depth);
    ZT_RUN(test_knob_buckets);
    ZT_RUN(test_emulated_device_matches_cpu);
    if (rank == 0)
        tmpdir_remove(tmp);
    zt_matmul_shutdown();
    zt_comm_finalize_mpi();
    if (rank != 0)
        return zt_tests_failed ? 1 : 0;
    ZT_TEST_MAIN_END();
}
