/* test_stall.c — a rank stopped or killed in the middle of a step (issue 17's
 * watchdog), planted through the watchdog's test seam (zt_watch_test_stall).
 *
 *   test_stall PHASE STEP RANK SIGNAL TIMEOUT OUTDIR   (tests/cli/watchdog.sh)
 *     trains the gqa_tied fixture as `ztrain train --use_fsdp --max_steps 3
 *     --collective_timeout TIMEOUT --output_dir OUTDIR` would, on every rank of
 *     the job; rank RANK raises SIGNAL on itself at its first collective in PHASE
 *     of STEP.  The shell test checks what the other ranks' watchdogs print and
 *     that the job ends.  Rank 0 prints "trained ..." only if the run finished.
 *   test_stall device TIMEOUT                            (tests/cli/watchdog.sh)
 *     a collective the device runs (NCCL's path) whose completion marker never
 *     turns done, while the host waits on the device: the watchdog must time the
 *     job out on it (a stand-in probe: the same code path as CUDA events).
 *   test_stall                                          (tests/run, one process)
 *     checks the seam itself: armed for the loss sum of step 2 with a
 *     signal whose handler counts, it fires exactly once, there, and the run
 *     goes on to finish; and device markers are released once done, the
 *     pending one kept. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/comm/comm.h"
#include "../src/comm/watchdog.h"
#include "../src/kernels/matmul.h"
#include "../src/plan/plan.h"
#include "../src/train/run_args.h"
#include "../src/train/trainer.h"
#include "test.h"
#include "tmpdir.h"

static int rank, world;

/* Train 3 steps of FSDP FULL_SHARD into out; rank 0 talks unless quiet. */
static int train(const char *out, int quiet, zt_err *err)
{
    zt_plan_request req;
    zt_plan_request_init(&req);
    req.face = ZT_FACE_FSDP;
    req.sharding = ZT_SHARDING_FULL_SHARD;
    zt_plan plan;
    int rc = zt_plan_resolve(&req, world, &plan, err);
    zt_settings st;
    zt_settings_defaults(&st);
    st.shuffle = 0; /* the reference reads the windows in order (the default shuffles) */
    st.block_size = 16;
    st.batch = 1;
    st.max_steps = 3;
    zt_train_args a;
    if (rc == ZT_OK)
        rc = zt_train_args_from_settings(&st, &plan, &a, err);
    zt_comm c;
    if (rc == ZT_OK)
        rc = zt_comm_create(&c, a.plan.group_size, err);
    if (rc)
        return rc;
    a.comm = &c;
    a.model_dir = "tests/fixtures/gqa_tied";
    a.data_path = "tests/fixtures/gqa_tied/tokens.npy";
    a.output_dir = out;
    a.quiet = quiet || rank != 0;
    a.peak_gflops = 1.0;
    rc = zt_train(&a, NULL, err);
    zt_comm_free(&c);
    return rc;
}

static volatile sig_atomic_t fired;
static void on_winch(int sig)
{
    (void)sig;
    fired++;
}

/* Armed for the loss sum of step 2 (a collective a world of one still enters)
 * with SIGWINCH (which the trainer leaves alone; SIGUSR2 would be its stop
 * request), whose handler counts: it fires once and the run finishes; armed
 * for a step the run never reaches, it never fires. */
static void test_seam_fires_once_and_the_run_goes_on(void)
{
    char tmp[64], out[128];
    ZT_CHECK(tmpdir_make(tmp, sizeof tmp, "zt_stall_") != NULL);
    tmpdir_join(out, sizeof out, tmp, "out");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_winch;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
    zt_watch_test_stall("loss", 2, 0, SIGWINCH);
    zt_err err = {0};
    int rc = train(out, 1, &err);
    ZT_CHECK_MSG(rc == ZT_OK, "%s", err.msg);
    ZT_CHECK_MSG(fired == 1, "the seam fired %d times", (int)fired);
    fired = 0;
    zt_watch_test_stall("loss", 7, 0, SIGWINCH); /* a step the run never reaches */
    rc = train(out, 1, &err);
    ZT_CHECK_MSG(rc == ZT_OK && fired == 0, "rc %d, fired %d", rc, (int)fired);
    ZT_CHECK(tmpdir_remove(tmp) == 0);
}

/* Stand-in completion markers for the device watchdog: a flag the test sets. */
typedef struct marker {
    _Atomic int done, released;
} marker;
static int marker_done(void *m) { return atomic_load(&((marker *)m)->done); }
static void marker_release(void *m) { atomic_fetch_add(&((marker *)m)->released, 1); }

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Markers handed over are released by the watchdog thread once done, exactly
 * once, in any order; one not done stays, and release_all lets it go. */
static void test_device_markers_are_released_when_done(void)
{
    static marker m[3];
    zt_watch_set_device_probe(marker_done, marker_release);
    for (int i = 0; i < 3; i++)
        zt_watch_device_track(zt_watch_enter("allreduce", 2, 64, 1, "backward", i), &m[i]);
    ZT_CHECK(zt_watch_device_pending() == 3);
    atomic_store(&m[2].done, 1);
    atomic_store(&m[0].done, 1);
    sleep_s(0.35); /* the watchdog ticks every 100 ms */
    ZT_CHECK_MSG(zt_watch_device_pending() == 1, "%d pending", zt_watch_device_pending());
    ZT_CHECK(atomic_load(&m[0].released) == 1 && atomic_load(&m[2].released) == 1 &&
             atomic_load(&m[1].released) == 0);
    zt_watch_device_release_all();
    ZT_CHECK(zt_watch_device_pending() == 0 && atomic_load(&m[1].released) == 1);
}

int main(int argc, char **argv)
{
    if (zt_comm_init_mpi(&argc, &argv, &rank, &world) != ZT_OK)
        return 1;
    if (argc == 7) { /* the job of tests/cli/watchdog.sh */
        zt_comm_set_timeout(atof(argv[5]));
        zt_watch_test_stall(argv[1], atol(argv[2]), atoi(argv[3]), atoi(argv[4]));
        zt_err err = {0};
        int rc = train(argv[6], 0, &err);
        if (rc && err.msg[0])
            fprintf(stderr, "ztrain: error: rank %d: %s\n", rank, err.msg);
        zt_matmul_shutdown();
        zt_comm_finalize_mpi();
        return rc == ZT_OK ? 0 : 1;
    }
    if (argc == 3 && !strcmp(argv[1], "device")) { /* a device collective that never finishes */
        zt_comm_set_timeout(atof(argv[2]));
        zt_err err = {0};
        zt_comm c;
        if (zt_comm_create(&c, 1, &err)) /* starts the watchdog */
            return 1;
        static marker never;
        zt_watch_set_device_probe(marker_done, marker_release);
        zt_watch_device_track(zt_watch_enter("reduce_scatter", 0, 4096, 2, "backward", 1), &never);
        sleep_s(30.0); /* the host waiting on the device */
        fprintf(stderr, "test_stall: no timeout after 30 s\n");
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_stall [PHASE STEP RANK SIGNAL TIMEOUT OUTDIR | device TIMEOUT]\n");
        return 2;
    }
    ZT_RUN(test_seam_fires_once_and_the_run_goes_on);
    ZT_RUN(test_device_markers_are_released_when_done);
    zt_matmul_shutdown();
    zt_comm_finalize_mpi();
    ZT_TEST_MAIN_END();
}
