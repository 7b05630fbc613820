/* test_failing_step.c — a rank whose step fails mid-training (contract §7: errors).
 *
 * The failure is planted through the trainer's test hooks (zt_train_hooks), at
 * step 2 on the last rank, the way a failing matrix product would fail.
 *   Alone (tests/run), the one process gets the error back as a value: ZT_EFAIL,
 *   the message, step 1's metrics and nothing saved.
 *   Under `mpirun -np 2` (tests/cli/zero_mpi.sh), rank 1 fails while rank 0
 *   waits in the step's collectives: the job must end with rank 1's message
 *   (MPI_Abort) instead of hanging, so returning from zt_train there is a failure. */
#include <string.h>
#include <sys/stat.h>

#include "../src/comm/comm.h"
#include "../src/kernels/matmul.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "tmpdir.h"

static int rank, world;

typedef struct failure { long step; int rank; } failure;

static int fail_forward(void *ctx, long step, int micro, int r, zt_err *err)
{
    const failure *f = ctx;
    (void)micro;
    if (step == f->step && r == f->rank)
        return zt_fail(err, ZT_EFAIL, "injected failure at step %ld (tests)", step);
    return ZT_OK;
}

static void count_step(void *ctx, const zt_step_metrics *m)
{
    long *last = ctx;
    *last = m->step;
}

static void test_failing_step_stops_the_run(void)
{
    char tmp[64], out[128];
    ZT_CHECK(tmpdir_make(tmp, sizeof tmp, "zt_fail_") != NULL);
    tmpdir_join(out, sizeof out, tmp, "out");
    zt_plan_request req;
    zt_plan_request_init(&req);
    req.face = ZT_FACE_FSDP;
    req.sharding = ZT_SHARDING_FULL_SHARD;
    zt_err err = {0};
    zt_plan plan;
    ZT_CHECK_MSG(zt_plan_resolve(&req, world, &plan, &err) == ZT_OK, "%s", err.msg);
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = 16;
    st.batch = 1;
    st.max_steps = 4;
    st.lr = 1e-4;
    st.weight_decay = 0.1;
    zt_train_args a;
    ZT_CHECK_MSG(zt_train_args_from_settings(&st, &plan, &a, &err) == ZT_OK, "%s", err.msg);
    zt_comm c;
    ZT_CHECK(zt_comm_create(&c, a.plan.group_size, &err) == ZT_OK);
    a.comm = &c;
    a.model_dir = "tests/fixtures/gqa_tied";
    a.data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a.output_dir = out;
    a.quiet = 1;
    a.peak_gflops = 1.0;
    failure f = {2, world - 1};
    zt_train_hooks hooks = {.before_forward = fail_forward, .ctx = &f};
    a.hooks = &hooks;
    long last = 0;
    a.on_step = count_step;
    a.on_step_ctx = &last;
    int rc = zt_train(&a, NULL, &err);
    ZT_CHECK_MSG(world == 1, "rank %d returned from a job whose rank %d failed (rc %d): it must abort", rank,
                 world - 1, rc);
    ZT_CHECK_MSG(rc == ZT_EFAIL, "rc %d: %s", rc, err.msg);
    ZT_CHECK_MSG(strstr(err.msg, "injected failure at step 2") != NULL, "%s", err.msg);
    ZT_CHECK_MSG(last == 1, "the last step reported was %ld, want 1", last);
    /* --output_dir is created and probed at start-up (issue 12), but a failed
     * run saves no model into it */
    char model[300];
    snprintf(model, sizeof model, "%s/model.safetensors", out);
    struct stat sb;
    ZT_CHECK_MSG(stat(model, &sb) != 0, "%s was written by a failed run", model);
    zt_comm_free(&c);
    ZT_CHECK(tmpdir_remove(tmp) == 0);
}

int main(int argc, char **argv)
{
    if (zt_comm_init_mpi(&argc, &argv, &rank, &world) != ZT_OK)
        return 1;
    ZT_RUN(test_failing_step_stops_the_run);
    zt_matmul_shutdown();
    zt_comm_finalize_mpi();
    ZT_TEST_MAIN_END();
}
