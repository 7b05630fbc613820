/* comm_nccl.c — collectives on device buffers with NCCL (see comm_nccl.h).
 * Compiled into every build, but empty unless make cuda defines ZT_CUDA. */
#ifdef ZT_CUDA
#include "comm_nccl.h"
#include "../core/prof.h"
#include "watchdog.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ZT_NCCL_JOINS = 16 };

typedef struct nccl_state {
    ncclComm_t comm[3];     /* per scope (ZT_SCOPE_SHARD, _REPLICA, _WORLD); NULL for a scope of one */
    cudaStream_t stream;    /* the collectives' */
    cudaStream_t compute;   /* the kernels' (the backend's stream) */
    cudaEvent_t ready;      /* recorded on compute before each collective */
    /* inside a capture (docs/gpu.md, "The captured step"), a collective's completion
     * event comes from this ring, made at init, and does not go to the watchdog: in a
     * capture an event record is only the edge that joins NCCL's stream back to the
     * compute stream, never a point the device passes that the watchdog could query
     * (and it would destroy the ring's event).  One reused by a later collective on
     * the same stream still orders after both. */
    cudaEvent_t join[ZT_NCCL_JOINS];
    unsigned next_join;
} nccl_state;

/* A failing CUDA or NCCL call in the middle of training leaves the other ranks
 * inside a collective: say which call failed and stop the job. */
static void die(const zt_comm *c, const char *call, const char *why)
{
    fprintf(stderr, "ztrain: error: rank %d: %s failed: %s\n", c->rank, call, why);
    fflush(stderr);
    zt_comm_abort(1);
}

#define CUDA_CHECK(c, call)                                  \
    do {                                                     \
        cudaError_t e_ = (call);                             \
        if (e_ != cudaSuccess)                               \
            die((c), #call, cudaGetErrorString(e_));         \
    } while (0)

#define NCCL_CHECK(c, call)                                  \
    do {                                                     \
        ncclResult_t r_ = (call);                            \
        if (r_ != ncclSuccess)                               \
            die((c), #call, ncclGetErrorString(r_));         \
    } while (0)

static ncclDataType_t nccl_type(zt_dtype dt)
{
    return dt == ZT_F32 ? ncclFloat32 : dt == ZT_BF16 ? ncclBfloat16 : ncclFloat16;
}

/* The watchdog's probe (watchdog.h): a collective's event, queried and destroyed
 * from the watchdog thread, on the device the collectives run on.  An error other
 * than "not ready" counts as done: the marker can go, and the error shows up in
 * the main thread's next CUDA call. */
static int g_device = -1;

static int event_done(void *marker)
{
    static _Thread_local int on_device;
    if (!on_device) {
        cudaSetDevice(g_device);
        on_device = 1;
    }
    cudaError_t e = cudaEventQuery((cudaEvent_t)marker);
    if (e != cudaSuccess && e != cudaErrorNotReady)
        cudaGetLastError(); /* leave no sticky state in this thread */
    return e != cudaErrorNotReady;
}

static void event_release(void *marker) { cudaEventDestroy((cudaEvent_t)marker); }

static MPI_Comm scope_mpi(const zt_comm *c, int scope)
{
    void *p = scope == ZT_SCOPE_SHARD ? c->shard_comm : scope == ZT_SCOPE_REPLICA ? c->replica_comm : c->world_comm;
    return *(MPI_Comm *)p;
}

int zt_nccl_init(zt_comm *c, zt_err *err)
{
    nccl_state *st = calloc(1, sizeof *st);
    if (!st)
        return zt_fail(err, ZT_EFAIL, "out of memory for the NCCL state");
    c->nccl = st;
    st->compute = (cudaStream_t)c->dev.stream;
    cudaGetDevice(&g_device);
    zt_watch_set_device_probe(event_done, event_release);
    cudaError_t ce = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess)
        ce = cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming);
    for (int i = 0; i < ZT_NCCL_JOINS && ce == cudaSuccess; i++)
        ce = cudaEventCreateWithFlags(&st->join[i], cudaEventDisableTiming);
    /* every rank learns whether every other could make its stream, so none waits
     * in a unique id's broadcast for a rank that gave up */
    int ok = ce == cudaSuccess, all_ok = ok;
    if (c->world_comm)
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, scope_mpi(c, ZT_SCOPE_WORLD));
    if (!all_ok)
        return zt_fail(err, ZT_EFAIL, "NCCL path: %s", ok ? "another rank could not create its CUDA stream"
                                                         : cudaGetErrorString(ce));
    if (!c->world_comm)
        return ZT_OK; /* one process: no scope has more than one rank */
    for (int scope = 0; scope < 3; scope++) {
        MPI_Comm mc = scope_mpi(c, scope);
        int size, rank;
        MPI_Comm_size(mc, &size);
        MPI_Comm_rank(mc, &rank);
        if (size == 1)
            continue;
        ncclUniqueId id;
        ncclResult_t r = ncclSuccess;
        if (rank == 0)
            r = ncclGetUniqueId(&id);
        int got = r == ncclSuccess, all_got = got;
        MPI_Allreduce(&got, &all_got, 1, MPI_INT, MPI_MIN, mc);
        if (!all_got)
            return zt_fail(err, ZT_EFAIL, "NCCL: ncclGetUniqueId failed on the scope's first rank: %s",
                           ncclGetErrorString(r));
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mc);
        r = ncclCommInitRank(&st->comm[scope], size, id, rank);
        int made = r == ncclSuccess, all_made = made;
        MPI_Allreduce(&made, &all_made, 1, MPI_INT, MPI_MIN, mc);
        if (!made)
            return zt_fail(err, ZT_EINPUT, "NCCL could not join rank %d of %d (%s); NCCL refuses two ranks on "
                           "one GPU: with more ranks than GPUs on a machine use --comm_backend mpi (staged "
                           "through host memory)", rank, size, ncclGetErrorString(r));
        if (!all_made)
            return zt_fail(err, ZT_EFAIL, "%s", ""); /* the failing rank says why */
    }
    return ZT_OK;
}

void zt_nccl_free(zt_comm *c)
{
    nccl_state *st = c->nccl;
    zt_watch_device_release_all();
    for (int scope = 0; scope < 3; scope++)
        if (st->comm[scope])
            ncclCommDestroy(st->comm[scope]);
    if (st->ready)
        cudaEventDestroy(st->ready);
    for (int i = 0; i < ZT_NCCL_JOINS; i++)
        if (st->join[i])
            cudaEventDestroy(st->join[i]);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    free(st);
    c->nccl = NULL;
}

_Static_assert(sizeof(cudaEvent_t) <= sizeof(((zt_comm_op *)0)->request), "cudaEvent_t storage");
static cudaEvent_t *op_event(zt_comm_op *op) { return (cudaEvent_t *)(void *)op->request; }

/* 1 while the compute stream is being captured (the one query a capture allows) */
static int capturing(const zt_comm *c, const nccl_state *st)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone; /* C: the enum, not a typedef */
    CUDA_CHECK(c, cudaStreamIsCapturing(st->compute, &cs));
    return cs == cudaStreamCaptureStatusActive;
}

/* op's completion event, recorded on NCCL's stream after its collective: a new one the
 * watchdog will own, or inside a capture one of the ring's (see nccl_state) */
static void record_done(zt_comm *c, nccl_state *st, zt_comm_op *op)
{
    op->captured = capturing(c, st);
    if (op->captured)
        *op_event(op) = st->join[st->next_join++ % ZT_NCCL_JOINS];
    else
        CUDA_CHECK(c, cudaEventCreateWithFlags(op_event(op), cudaEventDisableTiming));
    CUDA_CHECK(c, cudaEventRecord(*op_event(op), st->stream));
    op->active = 1;
}

void zt_nccl_start(zt_comm *c, zt_comm_op *op, zt_coll_kind k, int scope, void *recv, const void *send,
                   size_t count, zt_dtype dt)
{
    nccl_state *st = c->nccl;
    ncclComm_t nc = st->comm[scope];
    /* NCCL's stream waits for the kernels that wrote send */
    CUDA_CHECK(c, cudaEventRecord(st->ready, st->compute));
    CUDA_CHECK(c, cudaStreamWaitEvent(st->stream, st->ready, 0));
    /* the profiler (core/prof.h) times it on NCCL's stream, with the device's clock */
    static const char *names[] = {"allgather", "reduce_scatter", "allreduce"};
    int h = zt_prof_begin(names[k], "collective", (void *)st->stream);
    if (k == ZT_COLL_ALLGATHER)
        NCCL_CHECK(c, ncclAllGather(send, recv, count, nccl_type(dt), nc, st->stream));
    else if (k == ZT_COLL_REDUCE_SCATTER)
        NCCL_CHECK(c, ncclReduceScatter(send, recv, count, nccl_type(dt), ncclSum, nc, st->stream));
    else
        NCCL_CHECK(c, ncclAllReduce(send, recv, count, nccl_type(dt), ncclSum, nc, st->stream));
    zt_prof_end(h, 0.0, (double)(count * zt_dtype_size(dt)));
    record_done(c, st, op);
}

void zt_nccl_sum_doubles(zt_comm *c, double *buf, int n, int scope, uint64_t seq)
{
    nccl_state *st = c->nccl;
    zt_comm_op op;
    memset(&op, 0, sizeof op);
    op.seq = seq;
    CUDA_CHECK(c, cudaEventRecord(st->ready, st->compute));
    CUDA_CHECK(c, cudaStreamWaitEvent(st->stream, st->ready, 0));
    int h = zt_prof_begin("sum_doubles", "collective", (void *)st->stream);
    NCCL_CHECK(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclSum, st->comm[scope], st->stream));
    zt_prof_end(h, 0.0, (double)((size_t)n * sizeof *buf));
    record_done(c, st, &op);
    zt_nccl_wait(c, &op);
}

int zt_nccl_test(zt_comm *c, zt_comm_op *op)
{
    (void)c;
    /* inside a capture nothing has run: the engine's test only lets MPI progress */
    return !op->active || op->captured || cudaEventQuery(*op_event(op)) == cudaSuccess;
}

void zt_nccl_wait(zt_comm *c, zt_comm_op *op)
{
    if (!op->active)
        return;
    nccl_state *st = c->nccl;
    /* the kernels queued from now on run after the collective; the host does not
     * wait here, so the watchdog takes the event: it times the job out if the
     * device never passes it, and destroys it once the device has */
    CUDA_CHECK(c, cudaStreamWaitEvent(st->compute, *op_event(op), 0));
    if (!op->captured) /* a captured one is the ring's, and never runs as such: the launch is watched */
        zt_watch_device_track(op->seq, (void *)*op_event(op));
    op->active = 0;
}

void zt_nccl_launched(zt_comm *c, uint64_t seq)
{
    nccl_state *st = c->nccl;
    cudaEvent_t ev;
    CUDA_CHECK(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(c, cudaEventRecord(ev, st->compute));
    zt_watch_device_track(seq, (void *)ev);
}

#else
/* ISO C wants something in a translation unit */
typedef int zt_comm_nccl_unused;
#endif
