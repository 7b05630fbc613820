/* test_plan.c — requests resolve to the plans of contract §1 and §3, and the engine
 * holds every buffer in the dtype its plan says. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/comm/comm.h"
#include "../src/core/mem.h"
#include "../src/engine/loss_scale.h"
#include "../src/engine/engine.h"
/* the one test that corrupts the engine's dtype records to see its check fire needs
 * them; everything else here goes through engine.h */
#include "../src/engine/engine_impl.h"
#include "../src/plan/plan.h"
#include "test.h"

static int g_fresh; /* grad_begin's answer, unread: the passes here write no gradient */

static zt_plan resolve(zt_face face, const char *load, const char *mp, int sharding, int zero, int world,
                       int *rc)
{
    zt_plan_request r;
    zt_plan_request_init(&r);
    r.face = face;
    r.torch_dtype = load;
    r.mixed_precision = mp;
    if (sharding > 0)
        r.sharding = (zt_sharding)sharding;
    r.zero_stage = zero;
    zt_plan p;
    zt_err err = {0};
    *rc = zt_plan_resolve(&r, world, &p, &err);
    return p;
}

/* contract §1's table: the same bf16-loaded model under the three modes. */
static void test_seed_table(void)
{
    int rc;
    zt_plan p = resolve(ZT_FACE_FSDP, "bf16", "no", ZT_SHARDING_FULL_SHARD, -1, 4, &rc);
    ZT_CHECK(rc == ZT_OK && !strcmp(p.mode, "FSDP memory-constrained"));
    ZT_CHECK(p.prec.load == ZT_BF16 && p.prec.master == ZT_BF16 && p.prec.compute == ZT_BF16);
    p = resolve(ZT_FACE_FSDP, "bf16", "bf16", ZT_SHARDING_FULL_SHARD, -1, 4, &rc);
    ZT_CHECK(rc == ZT_OK && !strcmp(p.mode, "FSDP aligned"));
    ZT_CHECK(p.prec.master == ZT_F32 && p.prec.compute == ZT_BF16 && p.prec.reduce == ZT_BF16);
    p = resolve(ZT_FACE_DEEPSPEED, "bf16", "bf16", 0, 3, 4, &rc);
    ZT_CHECK(rc == ZT_OK && !strcmp(p.mode, "DeepSpeed"));
    ZT_CHECK(p.prec.master == ZT_F32 && p.prec.compute == ZT_BF16 && p.stage == 3);
    /* DeepSpeed keeps an fp32 master even without mixed precision */
    p = resolve(ZT_FACE_DEEPSPEED, "bf16", "no", 0, 2, 4, &rc);
    ZT_CHECK(rc == ZT_OK && p.prec.master == ZT_F32 && p.prec.compute == ZT_F32 && p.prec.save == ZT_BF16);
    p = resolve(ZT_FACE_FSDP, NULL, NULL, 0, -1, 2, &rc);
    ZT_CHECK(rc == ZT_OK && !strcmp(p.mode, "fp32") && p.stage == 3); /* FULL_SHARD is FSDP's default */
}

static void test_strategies_and_groups(void)
{
    int rc;
    static const struct { int sharding, stage, hybrid; } want[] = {
        {ZT_SHARDING_FULL_SHARD, 3, 0}, {ZT_SHARDING_SHARD_GRAD_OP, 2, 0}, {ZT_SHARDING_NO_SHARD, 0, 0},
        {ZT_SHARDING_HYBRID_SHARD, 3, 1}, {ZT_SHARDING_HYBRID_SHARD_ZERO2, 2, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        zt_plan p = resolve(ZT_FACE_FSDP, NULL, NULL, want[i].sharding, -1, 4, &rc);
        ZT_CHECK(rc == ZT_OK && p.stage == want[i].stage && p.hybrid == want[i].hybrid);
        ZT_CHECK(p.group_size == (p.stage == 0 ? 1 : 4));
        ZT_CHECK(p.wrap == ZT_WRAP_TRANSFORMER);
    }
    zt_plan p = resolve(ZT_FACE_DEEPSPEED, NULL, NULL, 0, 1, 4, &rc);
    ZT_CHECK(rc == ZT_OK && p.stage == 1 && p.wrap == ZT_WRAP_NONE); /* DeepSpeed flattens everything */
    p = resolve(ZT_FACE_DDP, NULL, NULL, 0, -1, 4, &rc);
    ZT_CHECK(rc == ZT_OK && p.stage == 0 && p.group_size == 1);
    zt_sharding s;
    ZT_CHECK(zt_sharding_parse("full_shard", &s) == 0 && s == ZT_SHARDING_FULL_SHARD);
    ZT_CHECK(zt_sharding_parse("4", &s) == 0 && s == ZT_SHARDING_HYBRID_SHARD);
    ZT_CHECK(zt_sharding_parse("FULL", &s) != 0);
}

static void test_refusals(void)
{
    zt_plan_request r;
    zt_plan p;
    zt_err err = {0};
    zt_plan_request_init(&r);
    r.face = ZT_FACE_FSDP;
    r.sharding = ZT_SHARDING_HYBRID_SHARD;
    r.ranks_per_node = 3;
    ZT_CHECK(zt_plan_resolve(&r, 4, &p, &err) == ZT_EINPUT && strstr(err.msg, "ranks_per_node 3"));
    r.ranks_per_node = 2;
    ZT_CHECK(zt_plan_resolve(&r, 4, &p, &err) == ZT_OK && p.group_size == 2);
    r.sharding = ZT_SHARDING_FULL_SHARD;
    ZT_CHECK(zt_plan_resolve(&r, 4, &p, &err) == ZT_EINPUT && strstr(err.msg, "HYBRID"));
    zt_plan_request_init(&r);
    r.mixed_precision = "fp16"; /* fp32 master with loss scaling */
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_OK && p.ls.on && p.prec.master == ZT_F32);
    ZT_CHECK(p.ls.initial_scale_power == 16 && p.ls.window == 1000 && p.ls.hysteresis == 2);
    r.mixed_precision = "no";
    r.torch_dtype = "fp16"; /* an fp16 master with nothing to scale the loss */
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "loss scaling"));
    r.torch_dtype = NULL;
    r.master_compensation = "kahan"; /* an fp32 master has nothing to compensate */
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "master_compensation"));
    r.torch_dtype = "bf16";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_OK && p.prec.compensated && strstr(p.mode, "Kahan"));
    r.master_compensation = "stochastic";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "none or kahan"));
    r.master_compensation = NULL;
    r.mixed_precision = "int8";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "mixed_precision"));
    zt_plan_request_init(&r);
    r.torch_dtype = "float64";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "torch_dtype"));
    zt_plan_request_init(&r);
    r.face = ZT_FACE_DEEPSPEED;
    r.zero_stage = 4;
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "zero_stage"));
}

/* The kernel mode (issue 30 point 1; docs/gpu.md, "Kernel modes"): fast is the default
 * on a GPU and exact everywhere else; the CPU has only exact kernels; the emulated device
 * takes both; an explicit mode wins over the default; the plan line says the mode.  The
 * GPU's default is the plan's word alone (the device is opened later), so it is tested
 * here, without a GPU. */
static void test_kernel_modes(void)
{
    static const struct { const char *device, *asked, *want; } ok[] = {
        {NULL, NULL, "exact"},    {"cpu", NULL, "exact"},    {"emu", NULL, "exact"},  {"cuda", NULL, "fast"},
        {"cuda", "exact", "exact"}, {"emu", "fast", "fast"}, {"cpu", "exact", "exact"}};
    zt_plan_request r;
    zt_plan p;
    zt_err err = {0};
    char line[512], want[64];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        zt_plan_request_init(&r);
        r.device = ok[i].device;
        r.kernels = ok[i].asked;
        int rc = zt_plan_resolve(&r, 1, &p, &err);
        const char *got = p.kernels == ZT_PLAN_KERNELS_FAST ? "fast" : "exact";
        ZT_CHECK_MSG(rc == ZT_OK && !strcmp(got, ok[i].want), "device %s, --kernels %s: rc %d, kernels '%s'",
                     ok[i].device ? ok[i].device : "(none)", ok[i].asked ? ok[i].asked : "(none)", rc, got);
        FILE *f = fmemopen(line, sizeof line, "w");
        zt_plan_print(f, &p, NULL);
        fclose(f);
        snprintf(want, sizeof want, ", kernels %s", ok[i].want);
        ZT_CHECK_MSG(strstr(line, want) != NULL, "%s", line);
    }
    zt_plan_request_init(&r);
    r.kernels = "fast"; /* the CPU, by default */
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "--kernels fast needs a device"));
    r.device = "cpu";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "the CPU has exact kernels only"));
    r.device = "cuda";
    r.kernels = "turbo";
    ZT_CHECK(zt_plan_resolve(&r, 1, &p, &err) == ZT_EINPUT && strstr(err.msg, "--kernels 'turbo'"));
}

/* The mode's named parts (issue 41 point 4; plan.h): --kernels is the preset of the
 * step, the activations and the graphs, each part printed on the plan line by name, and
 * each can be set alone; the pairs that cannot run are refused naming the flag. */
static void test_mode_parts(void)
{
    /* want: a part of the plan line, or (refused) a part of the error */
    static const struct {
        const char *device, *kernels, *step, *act, *mixed;
        int offload, refused;
        const char *want;
    } cases[] = {
        {"emu", "exact", NULL, NULL, "bf16", 0, 0, "kernels exact, step sync, activations fp32, graphs off"},
        {"emu", "fast", NULL, NULL, "bf16", 0, 0, "kernels fast, step async, activations bf16, graphs on"},
        {"emu", "fast", NULL, NULL, "no", 0, 0, "kernels fast, step async, activations fp32, graphs on"},
        {"emu", "fast", NULL, NULL, "bf16", 1, 0, "kernels fast, step sync, activations bf16, graphs off"},
        {"emu", "fast", "sync", NULL, "bf16", 0, 0, "kernels fast, step sync, activations bf16, graphs off"},
        {"emu", "fast", NULL, "fp32", "bf16", 0, 0, "kernels fast, step async, activations fp32, graphs on"},
        {"emu", "exact", "async", NULL, "bf16", 0, 0, "kernels exact, step async, activations fp32, graphs on"},
        {"cpu", "exact", NULL, "bf16", "bf16", 0, 0, "kernels exact, step sync, activations bf16, graphs off"},
        {"emu", NULL, "later", NULL, "bf16", 0, 1, "--step 'later': expected sync or async"},
        {"emu", NULL, NULL, "fp8", "bf16", 0, 1, "--activations 'fp8': expected fp32 or bf16"},
        {"cpu", NULL, "async", NULL, "bf16", 0, 1, "--step async needs a device"},
        {"emu", NULL, "async", NULL, "bf16", 1, 1, "--step async: the offloaded optimizer"},
        {"emu", NULL, NULL, "bf16", "no", 0, 1, "--activations bf16 needs bf16 compute"},
    };
    zt_plan_request r;
    zt_plan p;
    zt_err err = {0};
    char line[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_plan_request_init(&r);
        r.face = ZT_FACE_DEEPSPEED;
        r.zero_stage = 2;
        r.device = cases[i].device, r.kernels = cases[i].kernels, r.step = cases[i].step;
        r.activations = cases[i].act, r.mixed_precision = cases[i].mixed, r.offload_optimizer = cases[i].offload;
        int rc = zt_plan_resolve(&r, 1, &p, &err);
        if (cases[i].refused) {
            ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, cases[i].want), "case %zu: rc %d, %s", i, rc, err.msg);
            continue;
        }
        ZT_CHECK_MSG(rc == ZT_OK, "case %zu: %s", i, err.msg);
        if (rc)
            continue;
        ZT_CHECK(p.overlap.async_step == (p.step == ZT_PLAN_STEP_ASYNC));
        FILE *f = fmemopen(line, sizeof line, "w");
        zt_plan_print(f, &p, NULL);
        fclose(f);
        ZT_CHECK_MSG(strstr(line, cases[i].want) != NULL, "case %zu: want '%s' in %s", i, cases[i].want, line);
    }
}

static void set_backward_prefetch(zt_plan_request *r) { r->backward_prefetch = "BACKWARD_POST"; }
static void set_forward_prefetch(zt_plan_request *r) { r->forward_prefetch = ZT_NO; }
static void set_sharding(zt_plan_request *r) { r->sharding = ZT_SHARDING_SHARD_GRAD_OP; }
static void set_limit(zt_plan_request *r) { r->limit_all_gathers = ZT_NO; }
static void set_zero_stage(zt_plan_request *r) { r->zero_stage = 3; }

/* Each face's own knobs (plan.c's face_knobs table), given under another face or
 * plain data parallel, are refused with the knob and how to choose its face; under
 * their own face they resolve. */
static void test_face_knobs(void)
{
    static const struct {
        zt_face face;
        void (*set)(zt_plan_request *r);
        const char *msg;
    } cases[] = {
        {ZT_FACE_FSDP, set_backward_prefetch,
         "fsdp_backward_prefetch and fsdp_forward_prefetch need FSDP (--use_fsdp or distributed_type FSDP); "
         "DeepSpeed prefetches by stage3_prefetch_bucket_size"},
        {ZT_FACE_FSDP, set_forward_prefetch, "fsdp_backward_prefetch and fsdp_forward_prefetch need FSDP"},
        {ZT_FACE_FSDP, set_sharding, "fsdp_sharding_strategy needs FSDP (--use_fsdp or distributed_type FSDP)"},
        {ZT_FACE_FSDP, set_limit, "fsdp_limit_all_gathers needs FSDP (--use_fsdp or distributed_type FSDP)"},
        {ZT_FACE_DEEPSPEED, set_zero_stage,
         "zero_stage needs DeepSpeed (--use_deepspeed or distributed_type DEEPSPEED)"},
    };
    static const zt_face faces[] = {ZT_FACE_DDP, ZT_FACE_FSDP, ZT_FACE_DEEPSPEED};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int f = 0; f < 3; f++) {
            zt_plan_request r;
            zt_plan_request_init(&r);
            r.face = faces[f];
            cases[c].set(&r);
            zt_plan p;
            zt_err err = {0};
            int rc = zt_plan_resolve(&r, 2, &p, &err);
            if (faces[f] == cases[c].face)
                ZT_CHECK_MSG(rc == ZT_OK, "case %zu under its face: %s", c, err.msg);
            else
                ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(err.msg, cases[c].msg) == err.msg, "case %zu, face %d: %s",
                             c, f, err.msg);
        }
}

/* A tiny model's layout (hidden 8, 2 heads of 4, 1 kv head, ffn 12, vocab 16), a
 * unit per layer plus the root, for engine tests on one process. */
static int tiny_layout(zt_layout *lay, int layers, zt_err *err)
{
    zt_llama_config c = {0};
    c.hidden_size = 8;
    c.intermediate_size = 12;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 4;
    c.vocab_size = 16;
    return zt_layout_build(lay, &c, ZT_WRAP_TRANSFORMER, 0, 1, err);
}

/* The engine's buffers carry the plan's dtypes, and the check catches a mismatch. */
/* HYBRID_SHARD's shard group is one machine's ranks, as MPI's topology says;
 * --ranks_per_node overrides it and is still checked against the world. */
static void test_hybrid_group_from_topology(void)
{
    zt_plan_request r;
    zt_plan p;
    zt_err err = {0};
    char line[512];
    for (int zero2 = 0; zero2 <= 1; zero2++) {
        zt_plan_request_init(&r);
        r.face = ZT_FACE_FSDP;
        r.sharding = zero2 ? ZT_SHARDING_HYBRID_SHARD_ZERO2 : ZT_SHARDING_HYBRID_SHARD;
        r.machines = 3, r.machine_ranks = 2;
        ZT_CHECK(zt_plan_resolve(&r, 6, &p, &err) == ZT_OK && p.group_size == 2 && p.stage == (zero2 ? 2 : 3));
        ZT_CHECK(p.machines == 3 && p.machine_ranks == 2);
        FILE *f = fmemopen(line, sizeof line, "w");
        zt_plan_print(f, &p, NULL);
        fclose(f);
        ZT_CHECK_MSG(strstr(line, ", 6 ranks (3 machines x 2), shard group 2,") != NULL, "%s", line);
        ZT_CHECK_MSG(strstr(line, ", comm mpi, kernels exact, step sync, activations fp32, graphs off\n") != NULL, "%s", line);
        /* the caller's word on the products ends the plan line */
        f = fmemopen(line, sizeof line, "w");
        zt_plan_print(f, &p, "bf16 products: native");
        fclose(f);
        ZT_CHECK_MSG(strstr(line, ", comm mpi, kernels exact, step sync, activations fp32, graphs off, bf16 products: native\n") != NULL, "%s", line);
        r.ranks_per_node = 3; /* an override that divides the world wins */
        ZT_CHECK(zt_plan_resolve(&r, 6, &p, &err) == ZT_OK && p.group_size == 3);
        r.ranks_per_node = 4;
        ZT_CHECK(zt_plan_resolve(&r, 6, &p, &err) == ZT_EINPUT && strstr(err.msg, "ranks_per_node 4 does not "
                                                                            "divide the 6 processes"));
        r.ranks_per_node = 0, r.machine_ranks = 0; /* uneven machines: no default group */
        ZT_CHECK(zt_plan_resolve(&r, 6, &p, &err) == ZT_EINPUT && strstr(err.msg, "unevenly on 3 machines") &&
                 strstr(err.msg, "--ranks_per_node"));
        r.ranks_per_node = 2;
        ZT_CHECK(zt_plan_resolve(&r, 6, &p, &err) == ZT_OK && p.group_size == 2);
    }
    /* FULL_SHARD shards over the world whatever the machines */
    zt_plan_request_init(&r);
    r.face = ZT_FACE_FSDP;
    r.machines = 2, r.machine_ranks = 2;
    ZT_CHECK(zt_plan_resolve(&r, 4, &p, &err) == ZT_OK && p.group_size == 4);
    /* no topology (config show, tests without MPI): one machine of the whole world */
    r.machines = r.machine_ranks = 0;
    r.sharding = ZT_SHARDING_HYBRID_SHARD;
    ZT_CHECK(zt_plan_resolve(&r, 4, &p, &err) == ZT_OK && p.group_size == 4 && p.machines == 1);
}

static void test_engine_dtype_invariants(void)
{
    zt_layout lay;
    zt_comm comm;
    zt_comm_create_local(&comm);
    zt_err err;
    ZT_CHECK(tiny_layout(&lay, 2, &err) == ZT_OK);
    const char *modes[][2] = {{"fp32", "no"}, {"bf16", "no"}, {"bf16", "bf16"}};
    for (int m = 0; m < 3; m++)
        for (int stage = 0; stage <= 3; stage++) {
            int rc;
            zt_plan p = resolve(ZT_FACE_FSDP, modes[m][0], modes[m][1], ZT_SHARDING_FULL_SHARD, -1, 1, &rc);
            zt_engine *eng = NULL;
            ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, p.prec, stage, &p.overlap, &comm, &err) == ZT_OK);
            for (int u = 0; u < lay.nunits; u++)
                ZT_CHECK(zt_engine_check_dtypes(eng, u) == NULL);
            /* a real pass over the root records what its gather and its gradient's
             * reduction went through; the plan holds for both */
            int root = lay.root_unit;
            zt_engine_zero_grads(eng);
            ZT_CHECK(zt_engine_acquire(eng, root, ZT_PASS_FORWARD) != NULL);
            zt_engine_grad_begin(eng, root, &g_fresh);
            zt_engine_grad_end(eng, root);
            ZT_CHECK(eng->units[root].reduced_valid && eng->units[root].reduced_dt == p.prec.reduce);
            ZT_CHECK(zt_engine_check_dtypes(eng, root) == NULL);
            /* and the check names what a wrong record breaks */
            zt_dtype other = p.prec.reduce == ZT_F32 ? ZT_BF16 : ZT_F32;
            eng->units[root].reduced_dt = other;
            const char *why = zt_engine_check_dtypes(eng, root);
            ZT_CHECK(why && strstr(why, "reduce dtype"));
            eng->units[root].reduced_dt = p.prec.reduce;
            eng->units[root].gathered_dt = p.prec.compute == ZT_F32 ? ZT_BF16 : ZT_F32;
            why = zt_engine_check_dtypes(eng, root);
            ZT_CHECK(why && strstr(why, "compute dtype"));
            eng->units[root].gathered_dt = p.prec.compute;
            zt_engine_release(eng, root);
            zt_engine_destroy(eng);
        }
    zt_layout_free(&lay);
    ZT_CHECK(zt_mem_current(ZT_MEM_PARAMS) == 0 && zt_mem_current(ZT_MEM_GATHERED) == 0);
}

/* Run f(eng) in a child process; return what it wrote to stderr (caller frees)
 * and whether it died of SIGABRT. */
static char *run_child(void (*f)(zt_engine *), zt_engine *eng, int *aborted)
{
    int fd[2];
    char *out = calloc(1, 4096);
    *aborted = 0;
    if (pipe(fd) != 0)
        return out;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        f(eng);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n < 4095 && (r = read(fd[0], out + n, 4095 - n)) > 0)
        n += (size_t)r;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
    return out;
}

static int g_unit;
static void end_without_begin(zt_engine *eng) { zt_engine_grad_end(eng, g_unit); }
static void release_idle(zt_engine *eng) { zt_engine_release(eng, g_unit); }
static void acquire_twice(zt_engine *eng)
{
    zt_engine_acquire(eng, g_unit, ZT_PASS_FORWARD);
    zt_engine_acquire(eng, g_unit, ZT_PASS_FORWARD);
}
static void release_open_gradient(zt_engine *eng)
{
    zt_engine_acquire(eng, g_unit, ZT_PASS_BACKWARD);
    zt_engine_grad_begin(eng, g_unit, &g_fresh);
    zt_engine_release(eng, g_unit);
}

/* A stage-3 engine on one process over a tiny model of `layers` layers: bf16
 * compute and reduction, forward and backward prefetch, the reduction overlapped. */
static void stage3_engine(zt_engine **eng, zt_layout *lay, zt_comm *comm, int layers)
{
    zt_err err;
    zt_comm_create_local(comm);
    ZT_CHECK(tiny_layout(lay, layers, &err) == ZT_OK);
    zt_precision prec = {.load = ZT_F32, .master = ZT_F32, .compute = ZT_BF16, .reduce = ZT_BF16,
                         .save = ZT_F32};
    zt_overlap ov = {.forward_prefetch = 1, .backward_prefetch = ZT_BACKWARD_PREFETCH_PRE,
                     .overlap_reduce = 1};
    ZT_CHECK(zt_engine_create(eng, zt_backend_cpu(), lay, prec, 3, &ov, comm, &err) == ZT_OK);
}

/* Each unit walks IDLE -> FORWARD -> IDLE in the forward and IDLE -> BACKWARD_PRE
 * -> BACKWARD_POST -> IDLE in the backward (the root FORWARD -> BACKWARD_PRE, held
 * across the pass); a hook out of order stops the process naming the unit and both
 * phases; and reset returns every unit to IDLE after a pass that failed midway,
 * after which a whole step runs (stage 3, where a unit also holds a pool slot). */
static void test_engine_unit_phases(void)
{
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    stage3_engine(&eng, &lay, &comm, 2);
    int root = lay.root_unit, l0 = lay.layer_unit[0], l1 = lay.layer_unit[1];
#define PH(u) zt_engine_unit_phase(eng, u)
    zt_engine_zero_grads(eng);
    zt_engine_acquire(eng, root, ZT_PASS_FORWARD);
    ZT_CHECK(PH(root) == ZT_UNIT_FORWARD);
    zt_engine_acquire(eng, l0, ZT_PASS_FORWARD);
    ZT_CHECK(PH(l0) == ZT_UNIT_FORWARD);
    zt_engine_release(eng, l0);
    ZT_CHECK(PH(l0) == ZT_UNIT_IDLE);
    zt_engine_grad_begin(eng, root, &g_fresh);
    ZT_CHECK(PH(root) == ZT_UNIT_BACKWARD_PRE);
    zt_engine_acquire(eng, l1, ZT_PASS_BACKWARD);
    ZT_CHECK(PH(l1) == ZT_UNIT_BACKWARD_PRE);
    zt_engine_grad_begin(eng, l1, &g_fresh);
    zt_engine_grad_end(eng, l1);
    ZT_CHECK(PH(l1) == ZT_UNIT_BACKWARD_POST);
    zt_engine_release(eng, l1);
    ZT_CHECK(PH(l1) == ZT_UNIT_IDLE);
    zt_engine_grad_end(eng, root);
    zt_engine_release(eng, root);
    ZT_CHECK(PH(root) == ZT_UNIT_IDLE);

    /* out of order: each stops the process with the unit and the phases */
    struct {
        void (*f)(zt_engine *);
        const char *says;
    } bad[] = {
        {end_without_begin, "grad_end on unit %d in phase IDLE (expected BACKWARD_PRE)"},
        {release_idle, "release on unit %d in phase IDLE (expected FORWARD or BACKWARD_POST)"},
        {acquire_twice, "acquire(FORWARD) on unit %d in phase FORWARD (expected IDLE)"},
        {release_open_gradient, "release on unit %d in phase BACKWARD_PRE (expected FORWARD or BACKWARD_POST)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g_unit = l0;
        int aborted;
        char *out = run_child(bad[i].f, eng, &aborted);
        char want[160];
        snprintf(want, sizeof want, bad[i].says, l0);
        ZT_CHECK_MSG(aborted && strstr(out, want), "case %zu: %s", i, out);
        free(out);
    }

    /* a pass that fails midway: the root and a layer unit in use, a gradient open */
    zt_engine_acquire(eng, root, ZT_PASS_FORWARD);
    zt_engine_grad_begin(eng, root, &g_fresh);
    zt_engine_acquire(eng, l0, ZT_PASS_BACKWARD);
    zt_engine_grad_begin(eng, l0, &g_fresh);
    zt_engine_reset(eng);
    for (int u = 0; u < lay.nunits; u++)
        ZT_CHECK(PH(u) == ZT_UNIT_IDLE);
    zt_engine_stats es = zt_engine_get_stats(eng);
    ZT_CHECK(es.gradients_open == 0 && es.units_gathered == 0 && es.pool_held == 0);
    /* usable again: a clean pass and a step */
    zt_engine_zero_grads(eng);
    zt_engine_acquire(eng, root, ZT_PASS_FORWARD);
    zt_engine_grad_begin(eng, root, &g_fresh);
    zt_engine_acquire(eng, l0, ZT_PASS_BACKWARD);
    zt_engine_grad_begin(eng, l0, &g_fresh);
    zt_engine_grad_end(eng, l0);
    zt_engine_release(eng, l0);
    zt_engine_grad_end(eng, root);
    zt_engine_release(eng, root);
    zt_adamw_hparams hp = {1e-3, 0.0, 0.9, 0.999, 1e-8};
    double norm;
    ZT_CHECK(zt_engine_step(eng, &hp, 1e-3, 1.0, 1.0, &norm) == 0);
#undef PH
    zt_engine_destroy(eng);
    zt_layout_free(&lay);
}

/* Unit u's master (fp32, the whole unit on one process), read through the
 * engine's state view (caller frees). */
static float *master_of(const zt_engine *eng, int u)
{
    for (int i = 0; i < zt_engine_state_count(eng); i++) {
        zt_state_tensor t = zt_engine_state_tensor(eng, i);
        if (t.unit == u && t.role == ZT_STATE_MASTER) {
            float *m = malloc(t.bytes);
            zt_engine_state_read(eng, i, m);
            return m;
        }
    }
    return NULL;
}

/* Stage 3's gather pool under prefetch, on one process (gathers are conversions):
 * every acquire returns the unit's own values, whether its gather was prefetched, and
 * a prefetch the model did not follow is dropped when its slot is needed, not used
 * for the wrong unit. */
static void test_stage3_prefetch_pool(void)
{
    zt_layout lay;
    zt_comm comm;
    zt_engine *eng = NULL;
    stage3_engine(&eng, &lay, &comm, 4);
    /* parameter i holds i + j / 1024 at element j: every unit's values differ */
    for (int i = 0; i < lay.nparams; i++) {
        const zt_param *p = &lay.params[i];
        float *v = malloc(p->numel * sizeof *v);
        for (size_t j = 0; j < p->numel; j++)
            v[j] = (float)i + (float)(j % 1024) / 1024.0f;
        zt_engine_set_param(eng, p, v, ZT_F32);
        free(v);
    }
    int root = lay.root_unit, L[4];
    for (int l = 0; l < 4; l++)
        L[l] = lay.layer_unit[l];
    /* the values acquire must return for unit u: its master, rounded to bf16 */
#define CHECK_UNIT(u, got)                                                                   \
    do {                                                                                     \
        const uint16_t *g_ = (const uint16_t *)(got);                                        \
        float *m_ = master_of(eng, u);                                                       \
        int bad_ = 0;                                                                        \
        for (size_t j = 0; j < lay.units[u].padded_numel; j++)                               \
            bad_ += g_[j] != zt_f32_to_bf16(m_[j]);                                          \
        free(m_);                                                                            \
        ZT_CHECK_MSG(bad_ == 0, "unit %d: %d values are not its own", u, bad_);              \
    } while (0)
    CHECK_UNIT(root, zt_engine_acquire(eng, root, ZT_PASS_FORWARD)); /* prefetches layer 0's unit */
    CHECK_UNIT(L[0], zt_engine_acquire(eng, L[0], ZT_PASS_FORWARD)); /* served by it; prefetches layer 1's */
    ZT_CHECK(zt_engine_get_stats(eng).prefetch_used == 1 && zt_engine_get_stats(eng).prefetch_unit == L[1]);
    /* the model goes elsewhere while holding L[0]: the pool (3 slots) is full */
    CHECK_UNIT(L[2], zt_engine_acquire(eng, L[2], ZT_PASS_FORWARD));
    ZT_CHECK(zt_engine_get_stats(eng).prefetch_dropped == 1 && zt_engine_get_stats(eng).prefetch_unit < 0);
    zt_engine_release(eng, L[2]);
    zt_engine_release(eng, L[0]);
    CHECK_UNIT(L[1], zt_engine_acquire(eng, L[1], ZT_PASS_FORWARD));
    zt_engine_release(eng, L[1]);
    zt_engine_release(eng, root);
#undef CHECK_UNIT
    zt_engine_destroy(eng);
    zt_layout_free(&lay);
    ZT_CHECK(zt_mem_current(ZT_MEM_GATHERED) == 0 && zt_mem_current(ZT_MEM_COMM) == 0);
}

/* DeepSpeed's DynamicLossScaler, step by step (hysteresis 2, window 3):
 * the first overflow only spends the hysteresis budget, the second halves the
 * scale, a clean window after the last overflow doubles it and restores the budget. */
static void test_loss_scaler_rules(void)
{
    zt_loss_scaler s;
    zt_loss_scaler_init(&s, 4, 3, 2, 1);
    ZT_CHECK(s.scale == 16.0);
    /* iter 0, 1 clean: (0+1)%3, (1+1)%3 != 0; iter 2 clean: (2+1)%3 == 0 → doubles */
    zt_loss_scaler_update(&s, 0);
    zt_loss_scaler_update(&s, 0);
    ZT_CHECK(s.scale == 16.0);
    zt_loss_scaler_update(&s, 0);
    ZT_CHECK(s.scale == 32.0);
    zt_loss_scaler_update(&s, 1); /* iter 3: overflow, budget 2 -> 1, scale kept */
    ZT_CHECK(s.scale == 32.0 && s.cur_hysteresis == 1 && s.skipped == 1);
    zt_loss_scaler_update(&s, 1); /* iter 4: overflow with budget 1: halve */
    ZT_CHECK(s.scale == 16.0 && s.cur_hysteresis == 1 && s.skipped == 2);
    zt_loss_scaler_update(&s, 1); /* iter 5: halve again (budget stays spent) */
    ZT_CHECK(s.scale == 8.0);
    zt_loss_scaler_update(&s, 0); /* iter 6: (6-5)%3 != 0 */
    zt_loss_scaler_update(&s, 0); /* iter 7 */
    ZT_CHECK(s.scale == 8.0 && s.cur_hysteresis == 1);
    zt_loss_scaler_update(&s, 0); /* iter 8: (8-5)%3 == 0: double, budget restored */
    ZT_CHECK(s.scale == 16.0 && s.cur_hysteresis == 2);
    /* never below min_scale */
    zt_loss_scaler_init(&s, 1, 1000, 1, 1);
    for (int i = 0; i < 5; i++)
        zt_loss_scaler_update(&s, 1);
    ZT_CHECK(s.scale == 1.0 && s.skipped == 5);
}

int main(void)
{
    ZT_RUN(test_loss_scaler_rules);
    ZT_RUN(test_seed_table);
    ZT_RUN(test_strategies_and_groups);
    ZT_RUN(test_refusals);
    ZT_RUN(test_kernel_modes);
    ZT_RUN(test_mode_parts);
    ZT_RUN(test_face_knobs);
    ZT_RUN(test_hybrid_group_from_topology);
    ZT_RUN(test_engine_dtype_invariants);
    ZT_RUN(test_engine_unit_phases);
    ZT_RUN(test_stage3_prefetch_pool);
    ZT_TEST_MAIN_END();
}
